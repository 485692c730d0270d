/* onnx_attention.toml: ai.onnx Attention and RotaryEmbedding (opset 23): the microkernel table each ISA path fills in (included by internal.h). */
#ifndef PB_ONNX_ATTN_H
#define PB_ONNX_ATTN_H
typedef struct pb_onnx_attn_table {
    int unused; /* placeholder until the group's microkernels land */
} pb_onnx_attn_table;
#endif
