/* onnx_attention.toml: ai.onnx Attention and RotaryEmbedding (opset 23): public entry points (validate, then run the active ISA's microkernels). */
#include "../internal.h"
