/* data_movement.toml: Transpose, Gather, Concat, ScatterND, Trilu: this ISA path's table (included once by isa_body.inc.c). */
static const pb_movement_table PB_CAT(pb_movement_table_, PB_ISA) = {0};
