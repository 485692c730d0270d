/* data_movement.toml: Transpose, Gather, Concat, ScatterND, Trilu: public entry points (validate, then run the active ISA's microkernels). */
#include "../internal.h"
