/* elementwise.toml: Add, Mul, Gelu, FastGelu, BiasGelu, ReduceMean: public entry points (validate, then run the active ISA's microkernels). */
#include "../internal.h"
