/* AVX-512 path (compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16 -mfma
 * -mf16c). bf16 peak uses the native dot-product instruction vdpbf16ps. */
#include "../internal.h"
#include "../vec/avx512.h"
#define PB_ISA avx512
#define PB_ISA_NAME "avx512"
#define PB_ISA_SUPPORTED pb_isa_avx512_supported

#define PB_HAVE_NATIVE_BF16_DOT 1
#define PB_PEAK_BF16_METHOD "vdpbf16ps (AVX512-BF16), operands from L1"
static float pb_peak_bf16_dot__avx512(int64_t iters, int64_t *flops) {
    uint16_t buf[12 * 32] __attribute__((aligned(64)));
    for (int i = 0; i < 12 * 32; i++) buf[i] = (uint16_t)(0x3f80 + (i & 7));
    __m512 acc[12];
    for (int k = 0; k < 12; k++) acc[k] = _mm512_setzero_ps();
    const __m512bh w = (__m512bh)_mm512_set1_epi16((short)0x3380); /* ~6e-8 */
    for (int64_t it = 0; it < iters; it++) {
        for (int k = 0; k < 12; k++)
            acc[k] = _mm512_dpbf16_ps(acc[k], (__m512bh)_mm512_load_si512((const void *)(buf + k * 32)), w);
        __asm__ volatile("" : : "r"(buf) : "memory");
    }
    __m512 s = _mm512_setzero_ps();
    for (int k = 0; k < 12; k++) s = _mm512_add_ps(s, acc[k]);
    *flops = iters * 12 * 32 * 2; /* 32 bf16 products per instruction, 2 flops each */
    return _mm512_reduce_add_ps(s);
}

#include "../kernels/isa_body.inc.c"
