/* The LayerNormalization family and RMSNormalization: per-dtype microkernels.
 *
 * pb_layer_norm over rows [r0, r1), in f32 in registers, two passes over each row:
 *
 * Pass 1 reads x (+ skip + bias) once and forms v. It accumulates the sum and the sum of squares
 * of d = v - K, with K the mean of the row's first vector (a shift: the one-pass variance
 * S2/n - (S1/n)^2 then stays accurate when |mean| >> std, e.g. a row offset by a constant, and S1
 * stays small), 4 vectors at a time into 8 accumulators;
 * the simplified (RMS) form needs only the squares of v. It stores the `sum` output (v rounded
 * once) when asked, and f32 rows with a skip or bias keep v in y as the work row.
 * Pass 2 reads v back -- from y (f32 with skip/bias) or recomputed from the inputs, which the
 * first pass just brought into L1/L2 -- and writes y = (v - mean) * inv_std * scale (+ beta), or
 * v * inv_std * scale for the simplified form. When the driver asks (a working set beyond the
 * last-level cache, rows 32-byte aligned), the AVX2 path stores y and sum non-temporally.
 * Tails go through load_part (fill 0) / store_part; in the shifted sums the lanes past the tail
 * are multiplied by a 0/1 mask. */

#ifndef PB_NORMS_ONCE
#define PB_NORMS_ONCE
static const float pb_norms_ones[16] = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f,
                                        1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
#define PB_LN_INLINE static inline __attribute__((always_inline))
/* the plain-C paths (vec/portable.h) run one copy with the flags as variables: compile time, not
 * speed, matters there; the SIMD paths get one copy per (skip, simplified) */
#ifdef PB_VLOOP
#define PB_LN_SPECIALIZE 0
#else
#define PB_LN_SPECIALIZE 1
#endif
/* non-temporal (streaming) stores of the outputs: AVX2 path only (elsewhere plain stores) */
#if defined(__AVX2__) && !defined(PB_VLOOP) && PB_LANES == 8
#define PB_LN_CAN_STREAM 1
#else
#define PB_LN_CAN_STREAM 0
#endif
/* pass-1 vectors per iteration (even: they go in pairs): 4 x 8 lanes keeps 8 accumulators in 16
 * registers */
#define PB_LN_UNROLL (PB_LANES >= 16 ? 2 : 4)
#endif

/* v at element i of a row: x (+ skip) (+ bias), added in that order (as ORT does) */
PB_LN_INLINE vf PB_UK(PB_DT, ln_v)(const T *x, const T *sk, const T *bi, int64_t i, const int SKIP, const int BIAS) {
    vf v = T_LOAD(x + i);
    if (SKIP) v = vf_add(v, T_LOAD(sk + i));
    if (BIAS) v = vf_add(v, T_LOAD(bi + i));
    return v;
}

/* the same for the last n < PB_LANES elements; lanes past n are 0 */
PB_LN_INLINE vf PB_UK(PB_DT, ln_v_part)(const T *x, const T *sk, const T *bi, int64_t i, int64_t n, const int SKIP,
                                         const int BIAS) {
    vf v = PB_UK(PB_DT, load_part)(x + i, n, 0.0f);
    if (SKIP) v = vf_add(v, PB_UK(PB_DT, load_part)(sk + i, n, 0.0f));
    if (BIAS) v = vf_add(v, PB_UK(PB_DT, load_part)(bi + i, n, 0.0f));
    return v;
}

/* Pairs: 2 x PB_LANES consecutive elements as two vectors, in an arrangement that only ln_store2
 * undoes (elementwise work and sums do not care which element sits in which lane, as long as
 * every operand is loaded the same way). bfloat16 on AVX2 takes the even elements (shifted up)
 * and the odd ones (masked) of one 32-byte load -- 2 operations per 16 elements instead of 4 --
 * and stores them back with one blend and one 32-byte store (rounded to nearest even like
 * vf_store_bf16_rne) instead of two shuffles, two permutes and two stores. Everywhere else a
 * pair is the two halves in order. */
#define PB_LN_IS_BF16_bf16 1
#if defined(__AVX2__) && !defined(PB_VLOOP) && PB_LANES == 8 && PB_CAT(PB_LN_IS_BF16_, PB_DT)
#define PB_LN_PAIRS 1
#else
#define PB_LN_PAIRS 0
#endif

/* one vector; STREAM: non-temporal for f32 and f16 (a lone bf16 vector is stored plainly) */
PB_LN_INLINE void PB_UK(PB_DT, ln_store1)(T *p, vf v, const int STREAM) {
#if PB_LN_CAN_STREAM && T_IS_F32
    if (STREAM) {
        _mm256_stream_ps((float *)(void *)p, v);
        return;
    }
#elif PB_LN_CAN_STREAM && !PB_CAT(PB_LN_IS_BF16_, PB_DT)
    if (STREAM) {
        _mm_stream_si128((__m128i *)(void *)p, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        return;
    }
#endif
    (void)STREAM;
    T_STORE(p, v);
}

PB_LN_INLINE void PB_UK(PB_DT, ln_load2)(const T *p, vf *a, vf *b) {
#if PB_LN_PAIRS
    const __m256i w = _mm256_loadu_si256((const __m256i *)(const void *)p);
    *a = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
    *b = _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32((int)0xffff0000u)));
#else
    *a = T_LOAD(p);
    *b = T_LOAD(p + PB_LANES);
#endif
}

/* STREAM: non-temporal stores (the driver checked that every row starts 32-byte aligned) */
PB_LN_INLINE void PB_UK(PB_DT, ln_store2)(T *p, vf a, vf b, const int STREAM) {
#if PB_LN_PAIRS
    const __m256i ra = _mm256_srli_epi32(pb_bf16_round_bits(a), 16);
    const __m256i rb = pb_bf16_round_bits(b);
    if (STREAM)
        _mm256_stream_si256((__m256i *)(void *)p, _mm256_blend_epi16(ra, rb, 0xAA));
    else
        _mm256_storeu_si256((__m256i *)(void *)p, _mm256_blend_epi16(ra, rb, 0xAA));
#else
    PB_UK(PB_DT, ln_store1)(p, a, STREAM);
    PB_UK(PB_DT, ln_store1)(p + PB_LANES, b, STREAM);
#endif
}

/* v for the pair at element i */
PB_LN_INLINE void PB_UK(PB_DT, ln_v2)(const T *x, const T *sk, const T *bi, int64_t i, vf *v0, vf *v1, const int SKIP,
                                       const int BIAS) {
    PB_UK(PB_DT, ln_load2)(x + i, v0, v1);
    vf a0, a1;
    if (SKIP) {
        PB_UK(PB_DT, ln_load2)(sk + i, &a0, &a1);
        *v0 = vf_add(*v0, a0);
        *v1 = vf_add(*v1, a1);
    }
    if (BIAS) {
        PB_UK(PB_DT, ln_load2)(bi + i, &a0, &a1);
        *v0 = vf_add(*v0, a0);
        *v1 = vf_add(*v1, a1);
    }
}

/* one output vector from v: (v - mean) * inv * g (+ beta), or v * inv * g */
PB_LN_INLINE vf PB_UK(PB_DT, ln_out)(vf v, vf vm, vf vi, vf g, vf b, const int SIMPLE, const int BETA) {
    vf t = SIMPLE ? vf_mul(v, vi) : vf_mul(vf_sub(v, vm), vi);
    return BETA ? vf_fmadd(t, g, b) : vf_mul(t, g);
}

PB_LN_INLINE void PB_UK(PB_DT, ln_rows)(const pb_layer_norm_args *a, int64_t r0, int64_t r1, const int SKIP,
                                         const int BIAS, const int SIMPLE, const int stream) {
    const int64_t L = PB_LANES, U = PB_LN_UNROLL;
    const int64_t n = a->hidden, nv = n - n % L, tail = n % L;
    const T *g = (const T *)a->scale;
    const T *be = (const T *)a->beta;
    const T *bi = (const T *)a->bias;
    /* bias, beta and sum are loop-invariant branches (predicted); skip and simplified are
     * specializations */
    const int BETA = !SIMPLE && be != NULL, SUM = a->sum != NULL;
    const float fn = (float)n;
    const vf mask = pb_f32_load_part(pb_norms_ones, tail);
    /* outputs stored non-temporally (working sets beyond the last-level cache: no read for
     * ownership of y, no eviction of the inputs) */
    const int STREAM = PB_LN_CAN_STREAM && stream;
    /* f32 rows with a skip or bias keep v in y between the passes (not when y is streamed); the
     * others recompute it */
    const int WORK = T_IS_F32 && (SKIP || BIAS) && !STREAM;
    for (int64_t r = r0; r < r1; r++) {
        const T *x = (const T *)a->x + r * n;
        /* (no division when the skip has every row: the common case) */
        const T *sk = !SKIP ? NULL : (const T *)a->skip + (a->skip_rows == a->rows ? r : r % a->skip_rows) * n;
        T *y = (T *)a->y + r * n;
        float *w = (float *)(void *)y; /* the work row (used only when WORK, i.e. T is float) */
        T *s = SUM ? (T *)a->sum + r * n : NULL;

        /* pass 1: statistics (and the sum output, and the work row) */
        float k0 = 0.0f;
        if (!SIMPLE) { /* the shift: the mean of the first vector, within ~std/sqrt(lanes) of the row's */
            vf f = n >= L ? PB_UK(PB_DT, ln_v)(x, sk, bi, 0, SKIP, BIAS) : PB_UK(PB_DT, ln_v_part)(x, sk, bi, 0, n, SKIP, BIAS);
            k0 = vf_hsum(f) / (float)(n >= L ? L : n);
        }
        const vf K = vf_set1(k0);
        vf acc[PB_LN_UNROLL], sq[PB_LN_UNROLL]; /* sums of d = v - K (v for simplified) and of d^2 */
        for (int u = 0; u < U; u++) acc[u] = sq[u] = vf_zero();
        int64_t i = 0;
        for (; i + U * L <= nv; i += U * L) {
            vf v[PB_LN_UNROLL];
            for (int u = 0; u < U; u += 2) PB_UK(PB_DT, ln_v2)(x, sk, bi, i + u * L, &v[u], &v[u + 1], SKIP, BIAS);
            if (SUM)
                for (int u = 0; u < U; u += 2) PB_UK(PB_DT, ln_store2)(s + i + u * L, v[u], v[u + 1], STREAM);
            if (WORK)
                for (int u = 0; u < U; u++) vf_store_f32(w + i + u * L, v[u]);
            if (!SIMPLE)
                for (int u = 0; u < U; u++) {
                    v[u] = vf_sub(v[u], K);
                    acc[u] = vf_add(acc[u], v[u]);
                }
            for (int u = 0; u < U; u++) sq[u] = vf_fmadd(v[u], v[u], sq[u]);
        }
        for (; i < nv; i += L) {
            vf v0 = PB_UK(PB_DT, ln_v)(x, sk, bi, i, SKIP, BIAS);
            if (SUM) PB_UK(PB_DT, ln_store1)(s + i, v0, STREAM);
            if (WORK) vf_store_f32(w + i, v0);
            if (!SIMPLE) {
                v0 = vf_sub(v0, K);
                acc[0] = vf_add(acc[0], v0);
            }
            sq[0] = vf_fmadd(v0, v0, sq[0]);
        }
        if (tail) {
            vf v0 = PB_UK(PB_DT, ln_v_part)(x, sk, bi, nv, tail, SKIP, BIAS);
            if (SUM) PB_UK(PB_DT, store_part)(s + nv, v0, tail);
            if (WORK) PB_UK(PB_DT, store_part)(y + nv, v0, tail);
            if (!SIMPLE) {
                v0 = vf_mul(vf_sub(v0, K), mask);
                acc[1] = vf_add(acc[1], v0);
            }
            sq[1] = vf_fmadd(v0, v0, sq[1]);
        }
        for (int u = 1; u < U; u++) {
            acc[0] = vf_add(acc[0], acc[u]);
            sq[0] = vf_add(sq[0], sq[u]);
        }
        const float s2 = vf_hsum(sq[0]);
        float mean = 0.0f, inv;
        if (SIMPLE) {
            inv = 1.0f / sqrtf(s2 / fn + a->epsilon);
        } else {
            const float dm = vf_hsum(acc[0]) / fn;
            float var = s2 / fn - dm * dm;
            if (var < 0.0f) var = 0.0f; /* rounding; NaN stays NaN */
            mean = k0 + dm;
            inv = 1.0f / sqrtf(var + a->epsilon);
            if (a->mean) a->mean[r] = mean;
        }
        if (a->inv_std) a->inv_std[r] = inv;

        /* pass 2: normalize, scale, shift */
        const vf vm = vf_set1(mean), vi = vf_set1(inv);
        const vf zero = vf_zero();
        for (i = 0; i + 2 * L <= nv; i += 2 * L) {
            vf v0, v1, g0, g1, b0 = zero, b1 = zero;
            if (WORK) {
                v0 = vf_load_f32(w + i);
                v1 = vf_load_f32(w + i + L);
            } else {
                PB_UK(PB_DT, ln_v2)(x, sk, bi, i, &v0, &v1, SKIP, BIAS);
            }
            PB_UK(PB_DT, ln_load2)(g + i, &g0, &g1);
            if (BETA) PB_UK(PB_DT, ln_load2)(be + i, &b0, &b1);
            PB_UK(PB_DT, ln_store2)(y + i, PB_UK(PB_DT, ln_out)(v0, vm, vi, g0, b0, SIMPLE, BETA),
                                    PB_UK(PB_DT, ln_out)(v1, vm, vi, g1, b1, SIMPLE, BETA), STREAM);
        }
        for (; i < nv; i += L) {
            vf v0 = WORK ? vf_load_f32(w + i) : PB_UK(PB_DT, ln_v)(x, sk, bi, i, SKIP, BIAS);
            vf b0 = BETA ? T_LOAD(be + i) : zero;
            PB_UK(PB_DT, ln_store1)(y + i, PB_UK(PB_DT, ln_out)(v0, vm, vi, T_LOAD(g + i), b0, SIMPLE, BETA), STREAM);
        }
        if (tail) {
            vf v0 = WORK ? PB_UK(PB_DT, load_part)(y + nv, tail, 0.0f)
                         : PB_UK(PB_DT, ln_v_part)(x, sk, bi, nv, tail, SKIP, BIAS);
            vf g0 = PB_UK(PB_DT, load_part)(g + nv, tail, 0.0f);
            vf b0 = BETA ? PB_UK(PB_DT, load_part)(be + nv, tail, 0.0f) : zero;
            PB_UK(PB_DT, store_part)(y + nv, PB_UK(PB_DT, ln_out)(v0, vm, vi, g0, b0, SIMPLE, BETA), tail);
        }
    }
#if PB_LN_CAN_STREAM
    if (STREAM) _mm_sfence(); /* the streamed stores are visible before the region ends */
#endif
}

static void PB_UK(PB_DT, layer_norm)(const pb_layer_norm_args *a, int64_t r0, int64_t r1, int stream) {
    const int skip = a->skip != NULL, bias = a->bias != NULL, simple = a->simplified != 0;
#if PB_LN_SPECIALIZE
    switch (skip | simple << 1) {
    case 0: PB_UK(PB_DT, ln_rows)(a, r0, r1, 0, bias, 0, stream); return;
    case 1: PB_UK(PB_DT, ln_rows)(a, r0, r1, 1, bias, 0, stream); return;
    case 2: PB_UK(PB_DT, ln_rows)(a, r0, r1, 0, bias, 1, stream); return;
    default: PB_UK(PB_DT, ln_rows)(a, r0, r1, 1, bias, 1, stream); return;
    }
#else
    PB_UK(PB_DT, ln_rows)(a, r0, r1, skip, bias, simple, stream);
#endif
}
#undef PB_LN_PAIRS
