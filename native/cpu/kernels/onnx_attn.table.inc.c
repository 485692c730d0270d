/* onnx_attention.toml: ai.onnx Attention and RotaryEmbedding (opset 23): this ISA path's table (included once by isa_body.inc.c). */
static const pb_onnx_attn_table PB_CAT(pb_onnx_attn_table_, PB_ISA) = {0};
