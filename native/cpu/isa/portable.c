/* The portable fallback path: 4-lane plain C, runs on any CPU. */
#include "../internal.h"
#define PB_LANES 4
#include "../vec/portable.h"
#define PB_ISA portable
#define PB_ISA_NAME "portable"
#define PB_ISA_SUPPORTED pb_isa_portable_supported
#include "../kernels/isa_body.inc.c"
