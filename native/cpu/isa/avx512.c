/* AVX-512 path (compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512bf16
 * -mavx512vnni -mfma -mf16c). bf16 peak uses the native dot-product instruction vdpbf16ps;
 * MatMulNBits' int8 path vpdpbusd (every CPU with AVX512-BF16 so far also has AVX512-VNNI). */
#include "../internal.h"
#include "../vec/avx512.h"
#define PB_ISA avx512
#define PB_ISA_NAME "avx512"
#define PB_ISA_SUPPORTED pb_isa_avx512_supported

#define PB_PEAK_ACCS 24 /* 32 zmm registers: see kernels/peaks.inc.c */
#define PB_HAVE_NATIVE_BF16_DOT 1
#define PB_MM_BF16_PAIRS 1 /* bf16 MatMul multiplies bf16 pairs with vdpbf16ps (kernels/matmul.inc.c) */
#define PB_PEAK_BF16_METHOD "vdpbf16ps (AVX512-BF16), operands in registers, 24 accumulators"
/* The operands stay in registers (a ceiling, not a kernel): the first probe loaded them from L1
 * with 12 accumulators and stored 157 GFLOP/s per core on a Zen 5 where this loop reaches 524. */
static float pb_peak_bf16_dot__avx512(int64_t iters, int64_t *flops) {
    __m512 acc[PB_PEAK_ACCS];
    for (int k = 0; k < PB_PEAK_ACCS; k++) acc[k] = _mm512_set1_ps(0.001f * (float)k); /* distinct chains */
    __m512bh x = (__m512bh)_mm512_set1_epi16((short)0x3f80);  /* 1.0 */
    const __m512bh w = (__m512bh)_mm512_set1_epi16((short)0x3380); /* ~6e-8 */
    for (int64_t it = 0; it < iters; it++) {
        __asm__("" : "+v"(x)); /* x is opaque to the compiler: no folding across iterations */
#pragma GCC unroll 64 /* see peak_fma_f32 in kernels/peaks.inc.c: rolled, the chains live on the stack */
        for (int k = 0; k < PB_PEAK_ACCS; k++) acc[k] = _mm512_dpbf16_ps(acc[k], x, w);
    }
    __m512 s = _mm512_setzero_ps();
    for (int k = 0; k < PB_PEAK_ACCS; k++) s = _mm512_add_ps(s, acc[k]);
    *flops = iters * PB_PEAK_ACCS * 32 * 2; /* 32 bf16 products per instruction, 2 flops each */
    return _mm512_reduce_add_ps(s);
}

#include "../kernels/isa_body.inc.c"
