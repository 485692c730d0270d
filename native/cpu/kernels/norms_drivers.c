/* norms.toml: LayerNormalization family, RMSNormalization: public entry points (validate, then run the active ISA's microkernels). */
#include "../internal.h"
