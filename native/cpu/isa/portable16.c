/* 16-lane plain C: never chosen automatically. It runs the 16-lane kernel logic shared with
 * the AVX-512 path (tails, pair shuffles) on any CPU, so tests can check that logic here. */
#include "../internal.h"
#define PB_LANES 16
#include "../vec/portable.h"
#define PB_ISA portable16
#define PB_ISA_NAME "portable16"
#define PB_ISA_SUPPORTED pb_isa_portable_supported
#include "../kernels/isa_body.inc.c"
