/* data_movement.toml: Transpose, Gather, Concat, ScatterND, Trilu: per-dtype microkernels (included once per dtype by isa_body.inc.c). */
