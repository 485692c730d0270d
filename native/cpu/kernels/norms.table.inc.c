/* norms.toml: LayerNormalization family, RMSNormalization: this ISA path's table (included once by isa_body.inc.c). */
static const pb_norms_table PB_CAT(pb_norms_table_, PB_ISA) = {
    .layer_norm = {PB_UK(f32, layer_norm), PB_UK(f16, layer_norm), PB_UK(bf16, layer_norm)},
};
