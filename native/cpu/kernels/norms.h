/* norms.toml: LayerNormalization family, RMSNormalization: the microkernel table each ISA path fills in (included by internal.h). */
#ifndef PB_NORMS_H
#define PB_NORMS_H
/* Rows [r0, r1) of a pb_layer_norm_args problem (already validated); stream: store the outputs
 * non-temporally (every row 32-byte aligned; ISA paths without streaming stores ignore it). */
typedef void (*pb_layer_norm_ukernel)(const pb_layer_norm_args *a, int64_t r0, int64_t r1, int stream);
typedef struct pb_norms_table {
    pb_layer_norm_ukernel layer_norm[PB_DT_COUNT];
} pb_norms_table;
#endif
