/* onnx_attention.toml: ai.onnx Attention and RotaryEmbedding (opset 23): this ISA path's table (included once by isa_body.inc.c). */
static const pb_onnx_attn_table PB_CAT(pb_onnx_attn_table_, PB_ISA) = {
    .attention = {PB_UK(f32, oattention), PB_UK(f16, oattention), PB_UK(bf16, oattention)},
    .combine = {PB_UK(f32, oattn_combine), PB_UK(f16, oattn_combine), PB_UK(bf16, oattn_combine)},
    .full = {PB_UK(f32, oatt_full), PB_UK(f16, oatt_full), PB_UK(bf16, oatt_full)},
    .rotary = {PB_UK(f32, orotary), PB_UK(f16, orotary), PB_UK(bf16, orotary)},
};
