/* elementwise.toml: Add, Mul, Gelu, FastGelu, BiasGelu, ReduceMean: the microkernel table each ISA path fills in (included by internal.h). */
#ifndef PB_ELTWISE_H
#define PB_ELTWISE_H
typedef struct pb_eltwise_table {
    int unused; /* placeholder until the group's microkernels land */
} pb_eltwise_table;
#endif
