/* AVX2 + FMA + F16C path (compiled with -mavx2 -mfma -mf16c). */
#include "../internal.h"
#include "../vec/avx2.h"
#define PB_ISA avx2
#define PB_ISA_NAME "avx2"
#define PB_ISA_SUPPORTED pb_isa_avx2_supported
#include "../kernels/isa_body.inc.c"
