/* data_movement.toml: Transpose, Gather, Concat, ScatterND, Trilu: the microkernel table each ISA path fills in (included by internal.h). */
#ifndef PB_MOVEMENT_H
#define PB_MOVEMENT_H
typedef struct pb_movement_table {
    int unused; /* placeholder until the group's microkernels land */
} pb_movement_table;
#endif
