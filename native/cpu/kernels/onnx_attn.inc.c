/* onnx_attention.toml: ai.onnx Attention and RotaryEmbedding (opset 23): per-dtype microkernels (included once per dtype by isa_body.inc.c). */
