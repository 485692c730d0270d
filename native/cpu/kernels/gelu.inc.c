/* The Gelu family (Gelu, FastGelu, BiasGelu) and the Sigmoid family (Sigmoid, QuickGelu): per-dtype
 * microkernels. Everything is computed in f32 registers: 16-bit inputs are widened on load and the
 * result is rounded once on store. The Sigmoid family runs the Gelu family's loops (BIAS 0). */

/* ---- once per ISA file: the dtype-independent Gelu and sigmoid math ---- */
#ifndef PB_GELU_ONCE
#define PB_GELU_ONCE

/* Gelu(x) = x * Phi(x), Phi the standard normal CDF = 0.5 * (1 + erf(x / sqrt 2)).
 * |x| < 1.30373: Phi = 0.5 + x * R(x^2), R of degree 5 (relative error 1.6e-8 on Phi - 0.5);
 * else Phi(-|x|) = exp(Q(|x|)), Q of degree 6 fitted to log Phi(-a) on [1.30373, 5.54372]
 * (absolute error 8e-10 on Phi), and Phi(x) = 1 - Phi(-x) for x > 0. Beyond 5.54372
 * (Phi(-a) < 1.5e-8) the tail is 0 / 1. No cancellation for negative x: the small tail is
 * computed directly. Coefficients fitted for perfbench by weighted least squares in float64
 * on Chebyshev nodes; evaluated in f32 the error of Phi is below 1e-7 absolute. */
static inline vf PB_ISA_FN(eltwise_gelu_erf)(vf x) {
    const vf a = pbe_abs(x);
    const vf s = vf_mul(x, x);
    vf r = vf_fmadd(vf_set1(-6.613891401e-06f), s, vf_set1(1.103127142e-04f));
    r = vf_fmadd(r, s, vf_set1(-1.182895270e-03f));
    r = vf_fmadd(r, s, vf_set1(9.971790016e-03f));
    r = vf_fmadd(r, s, vf_set1(-6.649012119e-02f));
    r = vf_fmadd(r, s, vf_set1(3.989422619e-01f));
    const vf phi_small = vf_fmadd(x, r, vf_set1(0.5f));
    /* Q by Estrin's scheme (a shorter dependency chain than Horner's: the exp waits on it) */
    const vf ac = pbe_min(a, vf_set1(5.543717384f));
    const vf a2 = vf_mul(ac, ac);
    const vf q01 = vf_fmadd(vf_set1(-7.973769307e-01f), ac, vf_set1(-6.933466196e-01f));
    const vf q23 = vf_fmadd(vf_set1(-3.673949465e-02f), ac, vf_set1(-3.186020255e-01f));
    const vf q45 = vf_fmadd(vf_set1(-5.377508351e-04f), ac, vf_set1(5.555083044e-03f));
    vf q = vf_fmadd(vf_set1(2.448241685e-05f), a2, q45);
    q = vf_fmadd(q, a2, q23);
    q = vf_fmadd(q, a2, q01);
    vf tail = PB_VEXP(q); /* Phi(-|x|) */
    tail = pbe_sel_lt(a, vf_set1(5.543717384f), tail, vf_zero());
    const vf phi_big = pbe_sel_lt(x, vf_zero(), tail, vf_sub(vf_set1(1.0f), tail));
    return vf_mul(x, pbe_sel_lt(a, vf_set1(1.303728104f), phi_small, phi_big));
}

/* tanh form: 0.5 x (1 + tanh(u)) = x * sigmoid(2u), 2u = x * (k0 + k1 x^2) with
 * k0 = 2 sqrt(2/pi), k1 = k0 * 0.044715. With e = exp(-|2u|) <= 1 (never overflows):
 * sigmoid(2u) = 1 / (1 + e) for u >= 0 and e / (1 + e) for u < 0. */
/* (vdivps stays: an rcp estimate plus a Newton step measured slower here -- two more FMA-port
 * operations in a form already bound on those ports -- and the divider runs beside them) */
static inline vf PB_ISA_FN(eltwise_gelu_tanh)(vf x) {
    const vf w = vf_mul(x, vf_fmadd(vf_mul(x, x), vf_set1(7.135481627e-02f), vf_set1(1.595769122e+00f)));
    const vf nw = vf_sub(vf_zero(), pbe_abs(w));
    /* exp clamps its argument at about -87.3 (e never reaches 0): below -87 take e = 0, so a
     * very negative x gives -0 and x = -inf gives NaN (-inf * 0), as the definition does */
    const vf e = pbe_sel_lt(nw, vf_set1(-87.0f), vf_zero(), PB_VEXP(nw));
    const vf num = pbe_sel_lt(w, vf_zero(), e, vf_set1(1.0f));
    return vf_mul(x, pbe_div(num, vf_add(vf_set1(1.0f), e)));
}

/* sigmoid(z) = 1 / (1 + exp(-z)) from e = exp(-|z|) in (0, 1] (never overflows): 1 / (1 + e)
 * for z >= 0, e / (1 + e) for z < 0 -- the small side computed directly, no cancellation, so
 * the relative error stays that of the exp plus one division (<= 5e-7 measured; the portable
 * paths without a fused fmadd: 1.5e-6 for z > -30, 6e-6 below) down to z = -87.3365, where the
 * exp clamps and sigmoid leaves the normal floats (below it e = 0: sigmoid is then < 1.18e-38;
 * taking 0 makes a very negative x give 0, or -0 times x, and x = -inf in x * sigmoid(x) NaN,
 * as the definition does). NaN in, NaN out (the exp passes it; 1 / (1 + NaN)). One division, as the tanh Gelu. */
static inline vf PB_ISA_FN(eltwise_sigmoid_e)(vf z) {
    const vf nz = pbe_nabs(z);
    return pbe_sel_lt(nz, vf_set1(-87.3365478515625f), vf_zero(), PB_VEXP(nz));
}
static inline vf PB_ISA_FN(eltwise_sigmoid)(vf z) {
    const vf e = PB_ISA_FN(eltwise_sigmoid_e)(z);
    const vf num = pbe_sel_lt(z, vf_zero(), e, vf_set1(1.0f));
    return pbe_div(num, vf_add(vf_set1(1.0f), e));
}
/* x * sigmoid(z) as (z < 0 ? x e : x) / (1 + e): the product with x folded into the numerator
 * (one multiply fewer than x * sigmoid(z); two roundings, the first in the subnormal range where
 * x e is subnormal: up to one subnormal ulp more there). The form is bound on the
 * FMA pipes (Zen 4, AVX-512: each multiply more measured ~10% slower per element), so the
 * multiply saved is time saved. x = -inf: -inf * 0 = NaN; x = +inf: inf / 1; -0 stays -0. */
static inline vf PB_ISA_FN(eltwise_xsigmoid)(vf x, vf z) {
    const vf e = PB_ISA_FN(eltwise_sigmoid_e)(z);
    const vf num = pbe_sel_lt(z, vf_zero(), vf_mul(x, e), x);
    return pbe_div(num, vf_add(vf_set1(1.0f), e));
}

/* The same sigmoid to bfloat16's precision (its results are rounded to 8 significant bits: half
 * an ulp is >= 1.95e-3 relative): exp(r) on |r| <= ln2/2 by a degree-3 polynomial (fitted for
 * perfbench by reweighted least squares on relative error: 7.5e-5) and the division by a
 * reciprocal estimate (AVX-512 rcp14: 2^-14; AVX2 rcp: 3.7e-4; portable: exact), so the result
 * is within 4.5e-4 relative before the one rounding to bf16 (a quarter of half an ulp at most;
 * tests/ops/test_sigmoid.py checks every bf16 input against the float64 sigmoid rounded to bf16).
 * Four vector operations fewer than the f32 form and no divider: on Zen 4 the bf16 Sigmoid
 * family measured 5-8% slower than ORT's f32 kernel at 1 thread with the f32 form. Same special
 * values as eltwise_sigmoid (the clamp and the e = 0 flush below z = -87.3365, NaN through). */
static inline vf PB_ISA_FN(eltwise_sigmoid_e_bf16)(vf z) {
    const vf bias = vf_set1(12582912.0f + 127.0f);
    const vf nz = vf_max(vf_set1(-87.3365478515625f), pbe_nabs(z));
    const vf t = vf_fmadd(nz, vf_set1(1.44269504088896341f), bias);
    const vf r = vf_fnmadd(vf_sub(t, bias), vf_set1(0.693147180559945f), nz);
    vf q = vf_fmadd(vf_set1(0.16566805541515350f), r, vf_set1(0.50496321916580200f));
    q = vf_fmadd(q, r, vf_set1(1.00016427040100098f));
    q = vf_fmadd(q, r, vf_set1(0.99992805719375610f));
    const vf e = vf_mul(q, vf_shl23(t));
    return pbe_sel_lt(pbe_nabs(z), vf_set1(-87.3365478515625f), vf_zero(), e);
}
static inline vf PB_ISA_FN(eltwise_sigmoid_bf16)(vf z) {
    const vf e = PB_ISA_FN(eltwise_sigmoid_e_bf16)(z);
    const vf num = pbe_sel_lt(z, vf_zero(), e, vf_set1(1.0f));
    return vf_mul(num, pbe_rcp(vf_add(vf_set1(1.0f), e)));
}
static inline vf PB_ISA_FN(eltwise_xsigmoid_bf16)(vf x, vf z) {
    const vf e = PB_ISA_FN(eltwise_sigmoid_e_bf16)(z);
    const vf num = pbe_sel_lt(z, vf_zero(), vf_mul(x, e), x);
    return vf_mul(num, pbe_rcp(vf_add(vf_set1(1.0f), e)));
}
#endif /* PB_GELU_ONCE */

/* ---- Gelu family: elements [e0, e1) of (rows, cols), bias (cols) added first when given ---- */
/* Pairs: 2 x PB_LANES consecutive elements as two vectors. bfloat16 on AVX2 (plain stores
 * only) takes the even elements (shifted up) and the odd ones (masked) of one 32-byte load and
 * stores them back with one blend and one 32-byte store, rounded to nearest even like
 * vf_store_bf16_rne (2 operations per 16 elements each way instead of 4 or more; the same
 * arrangement as layer_norm.inc.c's pairs). Gelu is elementwise, so the lane order does not matter as
 * long as x, bias and y use the same one. Everywhere else a pair is the two halves in order. */
#define PBE_IS_BF16_bf16 1
#if defined(__AVX2__) && !defined(PB_VLOOP) && PB_LANES == 8 && PB_CAT(PBE_IS_BF16_, PB_DT)
static inline void PB_UK(PB_DT, gl_load2)(const T *p, vf *a, vf *b) {
    const __m256i w = _mm256_loadu_si256((const __m256i *)(const void *)p);
    *a = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
    *b = _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32((int)0xffff0000u)));
}
static inline void PB_UK(PB_DT, gl_store2)(T *p, vf a, vf b) {
    const __m256i ra = _mm256_srli_epi32(pb_bf16_round_bits(a), 16);
    const __m256i rb = pb_bf16_round_bits(b);
    _mm256_storeu_si256((__m256i *)(void *)p, _mm256_blend_epi16(ra, rb, 0xAA));
}
#elif !defined(PB_VLOOP) && PB_LANES == 16 && PB_CAT(PBE_IS_BF16_, PB_DT)
/* the same even/odd arrangement on AVX-512 (one 64-byte load; one 32-lane blend and one 64-byte
 * store back): the widening load (vpmovzxwd + shift) and the narrowing vpmovdw cost more vector
 * operations than the sigmoid leaves free (the Sigmoid family in bf16, measured on Zen 4) */
static inline void PB_UK(PB_DT, gl_load2)(const T *p, vf *a, vf *b) {
    const __m512i w = _mm512_loadu_si512((const void *)p);
    *a = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
    *b = _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32((int)0xffff0000u)));
}
static inline __m512i PB_UK(PB_DT, gl_pack2)(vf a, vf b) {
    const __m512i ra = _mm512_srli_epi32(pb_bf16_round_bits(a), 16);
    return _mm512_mask_blend_epi16((__mmask32)0xAAAAAAAAu, ra, pb_bf16_round_bits(b));
}
static inline void PB_UK(PB_DT, gl_store2)(T *p, vf a, vf b) {
    _mm512_storeu_si512((void *)p, PB_UK(PB_DT, gl_pack2)(a, b));
}
#else
static inline void PB_UK(PB_DT, gl_load2)(const T *p, vf *a, vf *b) {
    *a = T_LOAD(p);
    *b = T_LOAD(p + PB_LANES);
}
static inline void PB_UK(PB_DT, gl_store2)(T *p, vf a, vf b) {
    T_STORE(p, a);
    T_STORE(p + PB_LANES, b);
}
#endif
#if !defined(PB_VLOOP) && PB_LANES == 16 && PB_CAT(PBE_IS_BF16_, PB_DT)
/* AVX-512 bf16 streams pairs too: the 64-byte pair as two 32-byte streams (nt_peel aligns y to
 * one vector, 32 bytes) */
static inline void PB_UK(PB_DT, gl_load2_plain)(const T *p, vf *a, vf *b) { PB_UK(PB_DT, gl_load2)(p, a, b); }
static inline void PB_UK(PB_DT, gl_store2_stream)(T *p, vf a, vf b) {
    const __m512i r = PB_UK(PB_DT, gl_pack2)(a, b);
    _mm256_stream_si256((__m256i *)(void *)p, _mm512_castsi512_si256(r));
    _mm256_stream_si256((__m256i *)(void *)(p + PB_LANES), _mm512_extracti64x4_epi64(r, 1));
}
#else
/* the streaming path keeps plain halves (its stores are aligned to one vector only) */
static inline void PB_UK(PB_DT, gl_load2_plain)(const T *p, vf *a, vf *b) {
    *a = T_LOAD(p);
    *b = T_LOAD(p + PB_LANES);
}
static inline void PB_UK(PB_DT, gl_store2_stream)(T *p, vf a, vf b) {
    T_STREAM(p, a);
    T_STREAM(p + PB_LANES, b);
}
#endif

/* one run of n elements within a row: v = x (+ bias), y = F(v); 4 independent vectors per
 * iteration (the Gelu forms are long dependency chains), then single vectors */
#define PBE_GELU_LOOPS(F, LOAD2, STORE2, STORE1, BIAS)                                                 \
    for (; i + 4 * L <= n; i += 4 * L) {                                                                \
        vf v0, v1, v2, v3;                                                                              \
        LOAD2(x + i, &v0, &v1);                                                                         \
        LOAD2(x + i + 2 * L, &v2, &v3);                                                                 \
        if (BIAS) {                                                                                     \
            vf b0, b1, b2, b3;                                                                          \
            LOAD2(bias + i, &b0, &b1);                                                                  \
            LOAD2(bias + i + 2 * L, &b2, &b3);                                                          \
            v0 = vf_add(v0, b0);                                                                        \
            v1 = vf_add(v1, b1);                                                                        \
            v2 = vf_add(v2, b2);                                                                        \
            v3 = vf_add(v3, b3);                                                                        \
        }                                                                                               \
        v0 = F(v0);                                                                                     \
        v1 = F(v1);                                                                                     \
        v2 = F(v2);                                                                                     \
        v3 = F(v3);                                                                                     \
        STORE2(y + i, v0, v1);                                                                          \
        STORE2(y + i + 2 * L, v2, v3);                                                                  \
    }                                                                                                   \
    for (; i + L <= n; i += L) STORE1(y + i, F(BIAS ? vf_add(T_LOAD(x + i), T_LOAD(bias + i)) : T_LOAD(x + i)));
#define PBE_GELU_PART(F, m)                                                                            \
    do {                                                                                                \
        vf v_ = PB_UK(PB_DT, load_part)(x + i, m, 0.0f);                                                \
        if (bias != NULL) v_ = vf_add(v_, PB_UK(PB_DT, load_part)(bias + i, m, 0.0f));                  \
        PB_UK(PB_DT, store_part)(y + i, F(v_), m);                                                      \
    } while (0)
#define PBE_GELU(NAME, F)                                                                               \
    static inline void PB_UK(PB_DT, NAME##_run)(const T *x, const T *bias, T *y, int64_t n, int nt) {    \
        const int64_t L = PB_LANES;                                                                     \
        int64_t i = 0;                                                                                  \
        if (nt) {                                                                                       \
            const int64_t p = PB_UK(PB_DT, nt_peel)(y, n);                                              \
            if (p > 0) {                                                                                \
                PBE_GELU_PART(F, p);                                                                    \
                i = p;                                                                                  \
            }                                                                                           \
            if (bias == NULL) {                                                                         \
                PBE_GELU_LOOPS(F, PB_UK(PB_DT, gl_load2_plain), PB_UK(PB_DT, gl_store2_stream), T_STREAM, 0) \
            } else {                                                                                    \
                PBE_GELU_LOOPS(F, PB_UK(PB_DT, gl_load2_plain), PB_UK(PB_DT, gl_store2_stream), T_STREAM, 1) \
            }                                                                                           \
        } else if (bias == NULL) {                                                                      \
            PBE_GELU_LOOPS(F, PB_UK(PB_DT, gl_load2), PB_UK(PB_DT, gl_store2), T_STORE, 0)              \
        } else {                                                                                        \
            PBE_GELU_LOOPS(F, PB_UK(PB_DT, gl_load2), PB_UK(PB_DT, gl_store2), T_STORE, 1)              \
        }                                                                                               \
        if (i < n) PBE_GELU_PART(F, n - i);                                                             \
    }                                                                                                   \
    static void PB_UK(PB_DT, NAME)(const void *xv, const void *bv, void *yv, int64_t e0, int64_t e1,   \
                                   int64_t cols, int nt) {                                              \
        const T *x = (const T *)xv, *bias = (const T *)bv;                                              \
        T *y = (T *)yv;                                                                                 \
        if (bias == NULL) {                                                                             \
            PB_UK(PB_DT, NAME##_run)(x + e0, NULL, y + e0, e1 - e0, nt);                                \
        } else {                                                                                        \
            for (int64_t e = e0; e < e1;) { /* row by row: the bias restarts at each row */             \
                const int64_t c0 = e % cols;                                                            \
                const int64_t n = (cols - c0 < e1 - e) ? cols - c0 : e1 - e;                            \
                PB_UK(PB_DT, NAME##_run)(x + e, bias + c0, y + e, n, nt);                               \
                e += n;                                                                                 \
            }                                                                                           \
        }                                                                                               \
        if (nt) pbe_stream_fence();                                                                     \
    }
PBE_GELU(gelu_erf, PB_ISA_FN(eltwise_gelu_erf))
PBE_GELU(gelu_tanh, PB_ISA_FN(eltwise_gelu_tanh))
#undef PBE_GELU
#undef PBE_GELU_PART

/* ---- Sigmoid family: elements [i0, i1), y = sigmoid(x) or x * sigmoid(alpha x) ---- */
/* The Gelu family's loops without a bias (PBE_GELU_LOOPS with BIAS 0): 4 independent vectors per
 * iteration (the exp and the division are long chains), bf16 in even/odd pairs, streaming stores
 * when pb_stream_worth says so, then single vectors and one partial vector for the tail. F(v) may use `va`
 * (alpha broadcast). */
#define PBE_SIG_LOOPS(F, LOAD2, STORE2, STORE1) PBE_GELU_LOOPS(F, LOAD2, STORE2, STORE1, 0)
#define PBE_SIG_PART(F, m)                                                                             \
    do {                                                                                                \
        const vf v_ = PB_UK(PB_DT, load_part)(x + i, m, 0.0f);                                          \
        PB_UK(PB_DT, store_part)(y + i, F(v_), m);                                                      \
    } while (0)
#define PBE_SIGMOID(NAME, F)                                                                            \
    static void PB_UK(PB_DT, NAME)(const void *xv, void *yv, int64_t i0, int64_t i1, float alpha, int nt) { \
        const T *x = (const T *)xv + i0;                                                                \
        T *y = (T *)yv + i0;                                                                            \
        const int64_t L = PB_LANES, n = i1 - i0;                                                        \
        const vf va = vf_set1(alpha);                                                                   \
        const T *bias = NULL; /* PBE_GELU_LOOPS with BIAS 0 never reads it */                         \
        (void)va;                                                                                       \
        (void)bias;                                                                                     \
        int64_t i = 0;                                                                                  \
        if (nt) {                                                                                       \
            const int64_t p = PB_UK(PB_DT, nt_peel)(y, n);                                              \
            if (p > 0) {                                                                                \
                PBE_SIG_PART(F, p);                                                                     \
                i = p;                                                                                  \
            }                                                                                           \
            PBE_SIG_LOOPS(F, PB_UK(PB_DT, gl_load2_plain), PB_UK(PB_DT, gl_store2_stream), T_STREAM)    \
        } else {                                                                                        \
            PBE_SIG_LOOPS(F, PB_UK(PB_DT, gl_load2), PB_UK(PB_DT, gl_store2), T_STORE)                  \
        }                                                                                               \
        if (i < n) PBE_SIG_PART(F, n - i);                                                              \
        if (nt) pbe_stream_fence();                                                                     \
    }
/* bf16 results take the sigmoid to bf16's precision (the _bf16 forms), f32 and f16 the full one */
#define PBE_SIGF_f32 eltwise_sigmoid
#define PBE_SIGF_f16 eltwise_sigmoid
#define PBE_SIGF_bf16 eltwise_sigmoid_bf16
#define PBE_XSIGF_f32 eltwise_xsigmoid
#define PBE_XSIGF_f16 eltwise_xsigmoid
#define PBE_XSIGF_bf16 eltwise_xsigmoid_bf16
#define PBE_SIGF PB_ISA_FN(PB_CAT(PBE_SIGF_, PB_DT))
#define PBE_XSIGF PB_ISA_FN(PB_CAT(PBE_XSIGF_, PB_DT))
#define PBE_SIG_PLAIN(v) PBE_SIGF(v)
#define PBE_SIG_MUL(v) PBE_XSIGF(v, vf_mul(va, v))
#define PBE_SIG_SILU(v) PBE_XSIGF(v, v)
PBE_SIGMOID(sigmoid_plain, PBE_SIG_PLAIN)
PBE_SIGMOID(sigmoid_mul_alpha, PBE_SIG_MUL)
PBE_SIGMOID(sigmoid_silu, PBE_SIG_SILU)
/* alpha = 1 (SiLU: the QuickGelu ORT makes of every Sigmoid * Mul) skips the multiply by alpha */
static void PB_UK(PB_DT, sigmoid_mul)(const void *xv, void *yv, int64_t i0, int64_t i1, float alpha, int nt) {
    if (alpha == 1.0f) {
        PB_UK(PB_DT, sigmoid_silu)(xv, yv, i0, i1, alpha, nt);
    } else {
        PB_UK(PB_DT, sigmoid_mul_alpha)(xv, yv, i0, i1, alpha, nt);
    }
}
#undef PBE_SIG_PLAIN
#undef PBE_SIG_MUL
#undef PBE_SIG_SILU
#undef PBE_SIGF
#undef PBE_XSIGF
#undef PBE_SIGF_f32
#undef PBE_SIGF_f16
#undef PBE_SIGF_bf16
#undef PBE_XSIGF_f32
#undef PBE_XSIGF_f16
#undef PBE_XSIGF_bf16
#undef PBE_SIGMOID
#undef PBE_SIG_PART
#undef PBE_SIG_LOOPS
#undef PBE_GELU_LOOPS
