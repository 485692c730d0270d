/* 16-lane plain C: never chosen automatically. It runs the 16-lane kernel logic shared with
 * the AVX-512 path (tails, pair shuffles) on any CPU, so tests can check that logic here. */
#include "../internal.h"
#define PB_LANES 16
#include "../vec/portable.h"
#define PB_ISA portable16
#define PB_ISA_NAME "portable16"
#define PB_ISA_SUPPORTED pb_isa_portable_supported
/* bf16 MatMul on pairs, vdpbf16ps emulated (vec/portable.h): the AVX-512 path's pair logic runs here */
#define PB_MM_BF16_PAIRS 1
#include "../kernels/isa_body.inc.c"
