/* norms.toml: LayerNormalization family, RMSNormalization: the microkernel table each ISA path fills in (included by internal.h). */
#ifndef PB_NORMS_H
#define PB_NORMS_H
typedef struct pb_norms_table {
    int unused; /* placeholder until the group's microkernels land */
} pb_norms_table;
#endif
