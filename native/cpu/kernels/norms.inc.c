/* norms.toml: LayerNormalization family, RMSNormalization: per-dtype microkernels (included once per dtype by isa_body.inc.c). */
