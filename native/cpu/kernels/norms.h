/* norms.toml: LayerNormalization family, RMSNormalization: the microkernel table each ISA path fills in (included by internal.h). */
#ifndef PB_NORMS_H
#define PB_NORMS_H
/* Rows [r0, r1) of a pb_layer_norm_args problem (already validated). */
typedef void (*pb_layer_norm_ukernel)(const pb_layer_norm_args *a, int64_t r0, int64_t r1);
typedef struct pb_norms_table {
    pb_layer_norm_ukernel layer_norm[PB_DT_COUNT];
} pb_norms_table;
#endif
