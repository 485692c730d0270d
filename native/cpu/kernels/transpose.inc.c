/* Transpose microkernels (per dtype; elements moved as bits: f16 and bf16 instances are the same
 * moves). Where the ISA has AVX2 8x8 tiles are transposed in registers; elsewhere by plain loops. */
#ifndef PB_TRANSPOSE_ONCE
#define PB_TRANSPOSE_ONCE

#if defined(__AVX2__)
/* 8x8 block of 32-bit elements: dst[j*ds + i] = src[i*ss + j] */
static inline void pb_mv_t8x8_b32(const float *src, int64_t ss, float *dst, int64_t ds) {
    __m256 r0 = _mm256_loadu_ps(src), r1 = _mm256_loadu_ps(src + ss), r2 = _mm256_loadu_ps(src + 2 * ss),
           r3 = _mm256_loadu_ps(src + 3 * ss), r4 = _mm256_loadu_ps(src + 4 * ss), r5 = _mm256_loadu_ps(src + 5 * ss),
           r6 = _mm256_loadu_ps(src + 6 * ss), r7 = _mm256_loadu_ps(src + 7 * ss);
    __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
    __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
    __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
    __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    _mm256_storeu_ps(dst, _mm256_permute2f128_ps(s0, s4, 0x20));
    _mm256_storeu_ps(dst + ds, _mm256_permute2f128_ps(s1, s5, 0x20));
    _mm256_storeu_ps(dst + 2 * ds, _mm256_permute2f128_ps(s2, s6, 0x20));
    _mm256_storeu_ps(dst + 3 * ds, _mm256_permute2f128_ps(s3, s7, 0x20));
    _mm256_storeu_ps(dst + 4 * ds, _mm256_permute2f128_ps(s0, s4, 0x31));
    _mm256_storeu_ps(dst + 5 * ds, _mm256_permute2f128_ps(s1, s5, 0x31));
    _mm256_storeu_ps(dst + 6 * ds, _mm256_permute2f128_ps(s2, s6, 0x31));
    _mm256_storeu_ps(dst + 7 * ds, _mm256_permute2f128_ps(s3, s7, 0x31));
}

/* 8x8 block of 16-bit elements (three unpack stages) */
static inline void pb_mv_t8x8_b16(const uint16_t *src, int64_t ss, uint16_t *dst, int64_t ds) {
#define PB_MV_LD(i) _mm_loadu_si128((const __m128i *)(src + (i) * ss))
    __m128i a0 = PB_MV_LD(0), a1 = PB_MV_LD(1), a2 = PB_MV_LD(2), a3 = PB_MV_LD(3), a4 = PB_MV_LD(4),
            a5 = PB_MV_LD(5), a6 = PB_MV_LD(6), a7 = PB_MV_LD(7);
#undef PB_MV_LD
    __m128i t0 = _mm_unpacklo_epi16(a0, a1), t1 = _mm_unpacklo_epi16(a2, a3);
    __m128i t2 = _mm_unpacklo_epi16(a4, a5), t3 = _mm_unpacklo_epi16(a6, a7);
    __m128i t4 = _mm_unpackhi_epi16(a0, a1), t5 = _mm_unpackhi_epi16(a2, a3);
    __m128i t6 = _mm_unpackhi_epi16(a4, a5), t7 = _mm_unpackhi_epi16(a6, a7);
    __m128i u0 = _mm_unpacklo_epi32(t0, t1), u1 = _mm_unpackhi_epi32(t0, t1);
    __m128i u2 = _mm_unpacklo_epi32(t2, t3), u3 = _mm_unpackhi_epi32(t2, t3);
    __m128i u4 = _mm_unpacklo_epi32(t4, t5), u5 = _mm_unpackhi_epi32(t4, t5);
    __m128i u6 = _mm_unpacklo_epi32(t6, t7), u7 = _mm_unpackhi_epi32(t6, t7);
#define PB_MV_ST(i, v) _mm_storeu_si128((__m128i *)(dst + (i) * ds), v)
    PB_MV_ST(0, _mm_unpacklo_epi64(u0, u2));
    PB_MV_ST(1, _mm_unpackhi_epi64(u0, u2));
    PB_MV_ST(2, _mm_unpacklo_epi64(u1, u3));
    PB_MV_ST(3, _mm_unpackhi_epi64(u1, u3));
    PB_MV_ST(4, _mm_unpacklo_epi64(u4, u6));
    PB_MV_ST(5, _mm_unpackhi_epi64(u4, u6));
    PB_MV_ST(6, _mm_unpacklo_epi64(u5, u7));
    PB_MV_ST(7, _mm_unpackhi_epi64(u5, u7));
#undef PB_MV_ST
}

/* 8 rows x 16 columns of 16-bit elements: two 8x8 blocks at once, one in each 128-bit lane */
static inline void pb_mv_t8x16_b16(const uint16_t *src, int64_t ss, uint16_t *dst, int64_t ds) {
#define PB_MV_LD(i) _mm256_loadu_si256((const __m256i *)(src + (i) * ss))
    __m256i a0 = PB_MV_LD(0), a1 = PB_MV_LD(1), a2 = PB_MV_LD(2), a3 = PB_MV_LD(3), a4 = PB_MV_LD(4),
            a5 = PB_MV_LD(5), a6 = PB_MV_LD(6), a7 = PB_MV_LD(7);
#undef PB_MV_LD
    __m256i t0 = _mm256_unpacklo_epi16(a0, a1), t1 = _mm256_unpacklo_epi16(a2, a3);
    __m256i t2 = _mm256_unpacklo_epi16(a4, a5), t3 = _mm256_unpacklo_epi16(a6, a7);
    __m256i t4 = _mm256_unpackhi_epi16(a0, a1), t5 = _mm256_unpackhi_epi16(a2, a3);
    __m256i t6 = _mm256_unpackhi_epi16(a4, a5), t7 = _mm256_unpackhi_epi16(a6, a7);
    __m256i u0 = _mm256_unpacklo_epi32(t0, t1), u1 = _mm256_unpackhi_epi32(t0, t1);
    __m256i u2 = _mm256_unpacklo_epi32(t2, t3), u3 = _mm256_unpackhi_epi32(t2, t3);
    __m256i u4 = _mm256_unpacklo_epi32(t4, t5), u5 = _mm256_unpackhi_epi32(t4, t5);
    __m256i u6 = _mm256_unpacklo_epi32(t6, t7), u7 = _mm256_unpackhi_epi32(t6, t7);
#define PB_MV_ST(c, v)                                                                      \
    do {                                                                                    \
        __m256i v_ = (v);                                                                   \
        _mm_storeu_si128((__m128i *)(dst + (c) * ds), _mm256_castsi256_si128(v_));         \
        _mm_storeu_si128((__m128i *)(dst + ((c) + 8) * ds), _mm256_extracti128_si256(v_, 1)); \
    } while (0)
    PB_MV_ST(0, _mm256_unpacklo_epi64(u0, u2));
    PB_MV_ST(1, _mm256_unpackhi_epi64(u0, u2));
    PB_MV_ST(2, _mm256_unpacklo_epi64(u1, u3));
    PB_MV_ST(3, _mm256_unpackhi_epi64(u1, u3));
    PB_MV_ST(4, _mm256_unpacklo_epi64(u4, u6));
    PB_MV_ST(5, _mm256_unpackhi_epi64(u4, u6));
    PB_MV_ST(6, _mm256_unpacklo_epi64(u5, u7));
    PB_MV_ST(7, _mm256_unpackhi_epi64(u5, u7));
#undef PB_MV_ST
}
#endif
#endif

/* ---- Transpose ---- */

/* Runs: item t copies run elements; the outer multi-index advances like an odometer. */
static void PB_UK(PB_DT, transpose_runs)(const pb_mv_transpose_plan *p, int64_t t0, int64_t t1) {
    const int n = p->n_outer;
    const int64_t run = p->run;
    const size_t run_bytes = (size_t)run * sizeof(T);
    int64_t idx[8];
    int64_t off = 0, rem = t0;
    for (int i = n - 1; i >= 0; i--) {
        idx[i] = rem % p->dims[i];
        rem /= p->dims[i];
        off += idx[i] * p->src_stride[i];
    }
    const T *x = (const T *)p->x;
    T *y = (T *)p->y + t0 * run;
    const int64_t last_dim = n > 0 ? p->dims[n - 1] : 1, last_stride = n > 0 ? p->src_stride[n - 1] : 0;
    for (int64_t t = t0; t < t1;) {
        /* the innermost outer axis without the odometer */
        int64_t span = last_dim - (n > 0 ? idx[n - 1] : 0);
        if (span > t1 - t) span = t1 - t;
        const T *s = x + off;
        for (int64_t r = 0; r < span; r++, s += last_stride, y += run) pb_mv_copy(y, s, run_bytes, p->nt);
        t += span;
        if (t >= t1 || n == 0) break;
        /* carry */
        off += span * last_stride;
        idx[n - 1] += span;
        for (int i = n - 1; i > 0 && idx[i] == p->dims[i]; i--) {
            off -= idx[i] * p->src_stride[i];
            idx[i] = 0;
            idx[i - 1]++;
            off += p->src_stride[i - 1];
        }
    }
    pb_mv_fence(p->nt);
}

/* One (rows, cols) block: dst[j*ds + i] = src[i*ss + j] */
static inline void PB_UK(PB_DT, transpose_block)(const T *src, int64_t ss, T *dst, int64_t ds, int64_t rows,
                                                  int64_t cols) {
    int64_t i = 0;
#if defined(__AVX2__)
    for (; i + 8 <= rows; i += 8) {
        int64_t j = 0;
#if !T_IS_F32
        for (; j + 16 <= cols; j += 16) pb_mv_t8x16_b16(src + i * ss + j, ss, dst + j * ds + i, ds);
#endif
        for (; j + 8 <= cols; j += 8) {
#if T_IS_F32
            pb_mv_t8x8_b32(src + i * ss + j, ss, dst + j * ds + i, ds);
#else
            pb_mv_t8x8_b16(src + i * ss + j, ss, dst + j * ds + i, ds);
#endif
        }
        for (; j < cols; j++)
            for (int64_t r = i; r < i + 8; r++) dst[j * ds + r] = src[r * ss + j];
    }
#else
    /* 4x4 register blocks in plain C */
    for (; i + 4 <= rows; i += 4) {
        int64_t j = 0;
        for (; j + 4 <= cols; j += 4) {
            const T *s = src + i * ss + j;
            T *d = dst + j * ds + i;
            T a00 = s[0], a01 = s[1], a02 = s[2], a03 = s[3];
            T a10 = s[ss], a11 = s[ss + 1], a12 = s[ss + 2], a13 = s[ss + 3];
            T a20 = s[2 * ss], a21 = s[2 * ss + 1], a22 = s[2 * ss + 2], a23 = s[2 * ss + 3];
            T a30 = s[3 * ss], a31 = s[3 * ss + 1], a32 = s[3 * ss + 2], a33 = s[3 * ss + 3];
            d[0] = a00, d[1] = a10, d[2] = a20, d[3] = a30;
            d[ds] = a01, d[ds + 1] = a11, d[ds + 2] = a21, d[ds + 3] = a31;
            d[2 * ds] = a02, d[2 * ds + 1] = a12, d[2 * ds + 2] = a22, d[2 * ds + 3] = a32;
            d[3 * ds] = a03, d[3 * ds + 1] = a13, d[3 * ds + 2] = a23, d[3 * ds + 3] = a33;
        }
        for (; j < cols; j++)
            for (int64_t r = i; r < i + 4; r++) dst[j * ds + r] = src[r * ss + j];
    }
#endif
    for (; i < rows; i++)
        for (int64_t j = 0; j < cols; j++) dst[j * ds + i] = src[i * ss + j];
}

/* Tiles: item t = ((outer index) * row_tiles + row tile) * col_tiles + column tile */
static void PB_UK(PB_DT, transpose_tiles)(const pb_mv_transpose_plan *p, int64_t t0, int64_t t1) {
    const int64_t per_outer = p->row_tiles * p->col_tiles;
    const T *x = (const T *)p->x;
    T *y = (T *)p->y;
    for (int64_t t = t0; t < t1; t++) {
        int64_t o = t / per_outer, rt = (t % per_outer) / p->col_tiles, ct = t % p->col_tiles;
        int64_t soff = 0, doff = 0;
        for (int i = p->n_outer - 1; i >= 0; i--) {
            int64_t v = o % p->dims[i];
            o /= p->dims[i];
            soff += v * p->src_stride[i];
            doff += v * p->dst_stride[i];
        }
        const int64_t r0 = rt * PB_MV_TILE, c0 = ct * PB_MV_TILE;
        const int64_t nr = p->rows - r0 < PB_MV_TILE ? p->rows - r0 : PB_MV_TILE;
        const int64_t nc = p->cols - c0 < PB_MV_TILE ? p->cols - c0 : PB_MV_TILE;
        PB_UK(PB_DT, transpose_block)(x + soff + r0 * p->src_row_stride + c0, p->src_row_stride,
                                      y + doff + c0 * p->dst_col_stride + r0, p->dst_col_stride, nr, nc);
    }
}

