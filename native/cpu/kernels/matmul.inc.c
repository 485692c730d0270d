/* MatMul / Gemm microkernels (matmul.c drives them), instantiated per ISA path and dtype.
 *
 * The product runs on packed f32 panels: A in panels of PB_MM_MR rows (k-major: MR floats per k),
 * B in panels of PB_MM_NR = 2 vectors of columns (NR floats per k), both zero-padded, f16/bf16
 * converted to f32 while packing. The tile kernel keeps an MR x NR block of Y in 2 * MR vector
 * registers: per k it loads two B vectors and broadcasts MR A values, 2 * MR independent FMA
 * chains (MR = 6 on AVX2: 12, enough to cover the 4-cycle FMA latency at 2 FMAs a cycle, and it
 * leaves 3 of AVX2's 16 registers for the operands; 8 on AVX-512: isa_body.inc.c). */
#ifndef PB_MATMUL_ONCE
#define PB_MATMUL_ONCE
#define PB_MM_NR (2 * PB_LANES) /* PB_MM_MR: kernels/isa_body.inc.c */
/* f32 sums of one column block of the M = 1 path: half the L1d (pb_l1d_bytes), at most this many
 * (32 KiB of stack). 2048 columns (8 KiB) read 1 x 4096 x 4096 f32 at 19.6 GB/s, 4096 (16 KiB, half
 * the 32 KiB L1d) at 24.6 against ORT's 23 (Zen 4, 1 thread, 2026-12-06): whole rows of B in order */
#define PB_MM_GEMV_COLS 8192
/* k row i of a panel laid out as the packed B panels (NR words per k step) at pf, into the L2
 * (one prefetch per 64 bytes of the row: the packed panels are 64-byte aligned; pf NULL: none) */
#define PB_MM_PREFETCH_ROW(pf, i)                                                                  \
    do {                                                                                           \
        if ((pf) != NULL)                                                                          \
            for (int pl_ = 0; pl_ < PB_MM_NR * 4; pl_ += 64) __builtin_prefetch((pf) + (i) * PB_MM_NR * 4 + pl_, 0, 2); \
    } while (0)
#endif

/* Prefetch (for writing) the rows a tile reads or writes at its end: the partial sums in acc
 * (load, or not final) and, on the last K step, the output rows of y where they are not acc (f16
 * and bf16; an f32 product of one K step, whose acc is y, prefetches nothing). One prefetch per 64
 * bytes of a row: a row that is not 64-byte aligned may leave its last line to the load. Y (f32:
 * the sums themselves) is larger than the Zen 4's 1 MiB L2 from M x N = 128 x 4096 on, so without
 * it a tile's loads at the end would go to the L3 or DRAM at every K step (8 of them at K = 4096
 * with kc = 512, 32 with the kc = 128 of the measurement); reasoned from the sizes, measured only
 * together with the next-panel prefetch (matmul.c) */
static inline __attribute__((always_inline)) void PB_UK(PB_DT, mm_block_prefetch)(
    const int MRr, const float *acc, int64_t ldacc, int load, int final, int64_t n, const T *y, int64_t ldy) {
    for (int r = 0; r < MRr; r++) {
        if (load || !final)
            for (int64_t l = 0; l < n * 4; l += 64) __builtin_prefetch((const char *)(acc + r * ldacc) + l, 1, 3);
        if (final && (const void *)y != (const void *)acc)
            for (int64_t l = 0; l < n * (int64_t)sizeof(T); l += 64)
                __builtin_prefetch((const char *)(y + r * ldy) + l, 1, 3);
    }
}

/* One row of a finished tile: v = alpha * acc (+ beta * C), stored as T (n <= NR columns). */
static inline void PB_UK(PB_DT, mm_row_out)(vf v0, vf v1, int64_t n, T *y, float alpha, float beta, const T *c,
                                           int64_t c_cs) {
    v0 = vf_mul(v0, vf_set1(alpha));
    v1 = vf_mul(v1, vf_set1(alpha));
    if (c != NULL && c_cs == 1 && n == PB_MM_NR) {
        /* a row of C (Gemm's bias) read a vector at a time: element by element, converting f16
         * one value at a time, 32 x 1024 x 1024 f16 Gemm (C a row) was 1.31x ORT's time against
         * f32's 1.11 (Zen 5, 1 thread) */
        v0 = vf_add(v0, vf_mul(vf_set1(beta), T_LOAD(c)));
        v1 = vf_add(v1, vf_mul(vf_set1(beta), T_LOAD(c + PB_LANES)));
    } else if (c != NULL && c_cs == 0) {
        const vf cv = vf_set1(beta * T_TO_F32(c[0]));
        v0 = vf_add(v0, cv);
        v1 = vf_add(v1, cv);
    } else if (c != NULL) {
        float cb[PB_MM_NR];
        for (int64_t j = 0; j < PB_MM_NR; j++) cb[j] = j < n ? beta * T_TO_F32(c[j * c_cs]) : 0.0f;
        v0 = vf_add(v0, vf_load_f32(cb));
        v1 = vf_add(v1, vf_load_f32(cb + PB_LANES));
    }
    if (n == PB_MM_NR) {
        T_STORE(y, v0);
        T_STORE(y + PB_LANES, v1);
    } else if (n > PB_LANES) {
        T_STORE(y, v0);
        PB_UK(PB_DT, store_part)(y + PB_LANES, v1, n - PB_LANES);
    } else if (n == PB_LANES) {
        T_STORE(y, v0);
    } else {
        PB_UK(PB_DT, store_part)(y, v0, n);
    }
}

/* The end of a tile: the MRr x NR sums in c0/c1. load: add the partial sums in acc (f32, row
 * stride ldacc); final: store Y = alpha * sums + beta * C (c NULL: none) as T, n columns; else
 * store the sums back to acc. */
static inline __attribute__((always_inline)) void PB_UK(PB_DT, mm_block_out)(
    const int MRr, vf *c0, vf *c1, float *acc, int64_t ldacc, int load, int final, int64_t n, T *y, int64_t ldy,
    float alpha, float beta, const T *c, int64_t c_rs, int64_t c_cs) {
    for (int r = 0; r < MRr; r++) {
        float *arow = acc + r * ldacc;
        if (load) {
            if (n == PB_MM_NR) {
                c0[r] = vf_add(c0[r], vf_load_f32(arow));
                c1[r] = vf_add(c1[r], vf_load_f32(arow + PB_LANES));
            } else {
                c0[r] = vf_add(c0[r], PB_UK(f32, load_part)(arow, n < PB_LANES ? n : PB_LANES, 0.0f));
                if (n > PB_LANES) c1[r] = vf_add(c1[r], PB_UK(f32, load_part)(arow + PB_LANES, n - PB_LANES, 0.0f));
            }
        }
        if (final) {
            PB_UK(PB_DT, mm_row_out)(c0[r], c1[r], n, y + r * ldy, alpha, beta, c ? c + r * c_rs : NULL, c_cs);
        } else if (n == PB_MM_NR) {
            vf_store_f32(arow, c0[r]);
            vf_store_f32(arow + PB_LANES, c1[r]);
        } else {
            PB_UK(f32, store_part)(arow, c0[r], n < PB_LANES ? n : PB_LANES);
            if (n > PB_LANES) PB_UK(f32, store_part)(arow + PB_LANES, c1[r], n - PB_LANES);
        }
    }
}

#if defined(PB_MM_BF16_PAIRS) && T_IS_BF16
/* bf16 on a path with a bf16 dot (PB_MM_BF16_PAIRS): A and B are packed as bf16 pairs, one 32-bit
 * word per (row or column, k pair), low half the even k, an odd kc's last pair zero-padded:
 * ceil(kc / 2) x MR words per A panel, ceil(kc / 2) x NR per B panel (half the f32 layout's
 * bytes, in its buffers). Per k pair the tile loads two B vectors of pairs, broadcasts MR A pairs
 * and issues 2 * MR vf_dpbf16: 2 * LANES products each, twice an f32 FMA's work per instruction. */
static void PB_UK(PB_DT, matmul_pack_a)(const void *src, int64_t rs, int64_t cs, int64_t i0, int64_t mc, int64_t p0,
                                        int64_t kc, float *dstf) {
    const uint16_t *a = (const uint16_t *)src;
    const int64_t kw = (kc + 1) / 2;
    for (int64_t q = 0; q < mc; q += PB_MM_MR) {
        int64_t mr = mc - q < PB_MM_MR ? mc - q : PB_MM_MR;
        uint32_t *d = (uint32_t *)dstf + q * kw;
        for (int r = 0; r < PB_MM_MR; r++) {
            if (r >= mr) {
                for (int64_t w = 0; w < kw; w++) d[w * PB_MM_MR + r] = 0;
                continue;
            }
            const uint16_t *row = a + (i0 + q + r) * rs + p0 * cs;
            int64_t w = 0;
            if (cs == 1)
                for (; w < kc / 2; w++) {
                    uint32_t v;
                    memcpy(&v, row + 2 * w, sizeof v); /* the pair is adjacent: one (unaligned) word */
                    d[w * PB_MM_MR + r] = v;
                }
            for (; w < kw; w++) {
                uint32_t lo = row[2 * w * cs], hi = 2 * w + 1 < kc ? row[(2 * w + 1) * cs] : 0;
                d[w * PB_MM_MR + r] = lo | hi << 16;
            }
        }
    }
}

static void PB_UK(PB_DT, matmul_pack_b)(const void *src, int64_t rs, int64_t cs, int64_t p0, int64_t kc, int64_t j0,
                                        int64_t nc, float *dstf) {
    const uint16_t *b = (const uint16_t *)src;
    const int64_t kw = (kc + 1) / 2;
    for (int64_t q = 0; q < nc; q += PB_MM_NR) {
        int64_t nr = nc - q < PB_MM_NR ? nc - q : PB_MM_NR;
        uint32_t *d = (uint32_t *)dstf + q * kw;
        for (int64_t w = 0; w < kw; w++) {
            const uint16_t *r0 = b + (p0 + 2 * w) * rs + (j0 + q) * cs;
            uint32_t *o = d + w * PB_MM_NR;
#if defined(__AVX2__)
            if (rs == 1 && cs % 2 == 0 && nr == PB_MM_NR && 2 * w + 16 <= kc) {
                /* transB: each column's pairs are adjacent words, cs / 2 words apart: 8 x 8 blocks of
                 * words transposed in registers, 8 pairs at a time */
                for (int j = 0; j < PB_MM_NR; j += 8)
                    pb_mv_t8x8_b32((const float *)(r0 + j * cs), cs / 2, (float *)(o + j), PB_MM_NR);
                w += 7;
                continue;
            }
#endif
            if (2 * w + 1 < kc && cs == 1 && nr == PB_MM_NR) {
                /* two rows of B interleaved (the compiler vectorizes it: widen, shift, or) */
                const uint16_t *r1 = r0 + rs;
                for (int j = 0; j < PB_MM_NR; j++) o[j] = (uint32_t)r0[j] | (uint32_t)r1[j] << 16;
                continue;
            }
            for (int j = 0; j < PB_MM_NR; j++) {
                uint32_t lo = j < nr ? r0[j * cs] : 0, hi = j < nr && 2 * w + 1 < kc ? r0[rs + j * cs] : 0;
                o[j] = lo | hi << 16;
            }
        }
    }
}

/* The MRr x NR block of packed A pairs (as words per pair step: PB_MM_MR in a panel, 1 for one
 * contiguous row) times packed B pairs over kc (ceil(kc / 2) pairs); the rest as mm_block_out. */
static inline __attribute__((always_inline)) void PB_UK(PB_DT, mm_block)(
    const int MRr, const float *apf, const int64_t as, const float *bpf, int64_t kc, float *acc, int64_t ldacc,
    int load, int final, int64_t n, T *y, int64_t ldy, float alpha, float beta, const T *c, int64_t c_rs, int64_t c_cs,
    const char *pf) {
    const uint32_t *ap = (const uint32_t *)apf, *bp = (const uint32_t *)bpf;
    PB_UK(PB_DT, mm_block_prefetch)(MRr, acc, ldacc, load, final, n, y, ldy);
    vf c0[PB_MM_MR], c1[PB_MM_MR];
#pragma GCC unroll 8
    for (int r = 0; r < MRr; r++) c0[r] = c1[r] = vf_zero();
    for (int64_t w = 0; w < (kc + 1) / 2; w++) {
        PB_MM_PREFETCH_ROW(pf, w);
        const vbp b0 = vbp_load(bp), b1 = vbp_load(bp + PB_LANES);
#pragma GCC unroll 8
        for (int r = 0; r < MRr; r++) {
            const vbp av = vbp_set1(ap[r]);
            c0[r] = vf_dpbf16(c0[r], av, b0);
            c1[r] = vf_dpbf16(c1[r], av, b1);
        }
        ap += as;
        bp += PB_MM_NR;
    }
    PB_UK(PB_DT, mm_block_out)(MRr, c0, c1, acc, ldacc, load, final, n, y, ldy, alpha, beta, c, c_rs, c_cs);
}
#else
/* Rows [i0, i0 + mc) x k-columns [p0, p0 + kc) of A (element (i, p) at a[i * rs + p * cs]) into
 * ceil(mc / MR) panels of MR x kc at dst, rows past mc zero. */
static void PB_UK(PB_DT, matmul_pack_a)(const void *src, int64_t rs, int64_t cs, int64_t i0, int64_t mc, int64_t p0,
                                        int64_t kc, float *dst) {
    const T *a = (const T *)src;
    for (int64_t q = 0; q < mc; q += PB_MM_MR) {
        int64_t mr = mc - q < PB_MM_MR ? mc - q : PB_MM_MR;
        float *d = dst + q * kc;
        if (cs == 1 && mr == PB_MM_MR) {
            /* rows contiguous: each row's k values converted a vector at a time, then interleaved
             * (with per-item B packing, b89916d, this took f16 32 x 1024 x 1024 at 2 threads from
             * 1.38x ORT's time to 1.02, Zen 4; the two changes were not measured apart) */
            float tmp[PB_MM_MR][PB_LANES];
            int64_t p = 0;
            for (; p + PB_LANES <= kc; p += PB_LANES) {
                for (int r = 0; r < PB_MM_MR; r++) vf_store_f32(tmp[r], T_LOAD(a + (i0 + q + r) * rs + p0 + p));
                for (int t = 0; t < PB_LANES; t++)
                    for (int r = 0; r < PB_MM_MR; r++) d[(p + t) * PB_MM_MR + r] = tmp[r][t];
            }
            for (; p < kc; p++)
                for (int r = 0; r < PB_MM_MR; r++) d[p * PB_MM_MR + r] = T_TO_F32(a[(i0 + q + r) * rs + p0 + p]);
            continue;
        }
        for (int r = 0; r < PB_MM_MR; r++) {
            if (r < mr) {
                const T *row = a + (i0 + q + r) * rs + p0 * cs;
                for (int64_t p = 0; p < kc; p++) d[p * PB_MM_MR + r] = T_TO_F32(row[p * cs]);
            } else {
                for (int64_t p = 0; p < kc; p++) d[p * PB_MM_MR + r] = 0.0f;
            }
        }
    }
}

/* k-rows [p0, p0 + kc) x columns [j0, j0 + nc) of B (element (p, j) at b[p * rs + j * cs]) into
 * ceil(nc / NR) panels of kc x NR at dst, columns past nc zero. */
static void PB_UK(PB_DT, matmul_pack_b)(const void *src, int64_t rs, int64_t cs, int64_t p0, int64_t kc, int64_t j0,
                                        int64_t nc, float *dst) {
    const T *b = (const T *)src;
    for (int64_t q = 0; q < nc; q += PB_MM_NR) {
        int64_t nr = nc - q < PB_MM_NR ? nc - q : PB_MM_NR;
        float *d = dst + q * kc;
        if (rs == 1 && nr == PB_MM_NR) {
            /* columns contiguous along k (transB, nn.Linear's (N, K) weight): each column's k values
             * converted a vector at a time, then interleaved; element by element, packing B at run
             * time made 32 x 1024 x 1024 transB 3.3x ORT's time (Zen 4, 1 thread) */
            int64_t p = 0;
            for (; p + PB_LANES <= kc; p += PB_LANES) {
                /* 8 x 8 blocks transposed in registers where the path has AVX2: the element-by-
                 * element interleave left 32 x 1024 x 1024 transB with B an input at 1.71x ORT's
                 * time (Zen 5, 1 thread) */
#if defined(__AVX2__) && PB_LANES % 8 == 0 && T_IS_F32
                for (int j = 0; j < PB_MM_NR; j += 8)
                    for (int t = 0; t < PB_LANES; t += 8)
                        pb_mv_t8x8_b32(b + (j0 + q + j) * cs + p0 + p + t, cs, d + (p + t) * PB_MM_NR + j, PB_MM_NR);
#else
                float tmp[PB_MM_NR][PB_LANES];
                for (int j = 0; j < PB_MM_NR; j++) vf_store_f32(tmp[j], T_LOAD(b + (j0 + q + j) * cs + p0 + p));
#if defined(__AVX2__) && PB_LANES % 8 == 0
                for (int j = 0; j < PB_MM_NR; j += 8)
                    for (int t = 0; t < PB_LANES; t += 8)
                        pb_mv_t8x8_b32(&tmp[j][t], PB_LANES, d + (p + t) * PB_MM_NR + j, PB_MM_NR);
#else
                for (int t = 0; t < PB_LANES; t++)
                    for (int j = 0; j < PB_MM_NR; j++) d[(p + t) * PB_MM_NR + j] = tmp[j][t];
#endif
#endif
            }
            for (; p < kc; p++)
                for (int j = 0; j < PB_MM_NR; j++) d[p * PB_MM_NR + j] = T_TO_F32(b[(j0 + q + j) * cs + p0 + p]);
            continue;
        }
        for (int64_t p = 0; p < kc; p++) {
            const T *row = b + (p0 + p) * rs + (j0 + q) * cs;
            float *o = d + p * PB_MM_NR;
            if (cs == 1 && nr == PB_MM_NR) {
                vf_store_f32(o, T_LOAD(row));
                vf_store_f32(o + PB_LANES, T_LOAD(row + PB_LANES));
            } else {
                for (int64_t j = 0; j < PB_MM_NR; j++) o[j] = j < nr ? T_TO_F32(row[j * cs]) : 0.0f;
            }
        }
    }
}

/* The MRr x NR block of packed A (as floats per k: PB_MM_MR in a panel, 1 for one contiguous row)
 * times packed B panel bp over kc (f32 panels); the rest as mm_block_out. */
static inline __attribute__((always_inline)) void PB_UK(PB_DT, mm_block)(
    const int MRr, const float *ap, const int64_t as, const float *bp, int64_t kc, float *acc, int64_t ldacc,
    int load, int final, int64_t n, T *y, int64_t ldy, float alpha, float beta, const T *c, int64_t c_rs, int64_t c_cs,
    const char *pf) {
    PB_UK(PB_DT, mm_block_prefetch)(MRr, acc, ldacc, load, final, n, y, ldy);
    vf c0[PB_MM_MR], c1[PB_MM_MR];
#pragma GCC unroll 8
    for (int r = 0; r < MRr; r++) c0[r] = c1[r] = vf_zero();
    int64_t p = 0;
    if (MRr == 1) {
        /* one row: two k a step into four chains (two FMA chains alone wait on the FMA's latency
         * while the panel streams). Gemm 1 x 1024 x 1024 transB f32, B packed, A a row (matmul_row),
         * 1 thread, Zen 4, medians of 11 interleaved in one process: 54.6 us with two chains, 50.8
         * with four (256 x 256: 3.22 / 2.92; 2048 x 1024: 110.2 / 102.9; B in DRAM, 4096 x 4096:
         * the same) */
        vf d0 = vf_zero(), d1 = vf_zero();
        for (; p + 2 <= kc; p += 2) {
            PB_MM_PREFETCH_ROW(pf, p);
            PB_MM_PREFETCH_ROW(pf, p + 1);
            const vf x0 = vf_set1(ap[0]), x1 = vf_set1(ap[as]);
            c0[0] = vf_fmadd(x0, vf_load_f32(bp), c0[0]);
            c1[0] = vf_fmadd(x0, vf_load_f32(bp + PB_LANES), c1[0]);
            d0 = vf_fmadd(x1, vf_load_f32(bp + PB_MM_NR), d0);
            d1 = vf_fmadd(x1, vf_load_f32(bp + PB_MM_NR + PB_LANES), d1);
            ap += 2 * as;
            bp += 2 * PB_MM_NR;
        }
        c0[0] = vf_add(c0[0], d0);
        c1[0] = vf_add(c1[0], d1);
    }
    for (; p < kc; p++) {
        PB_MM_PREFETCH_ROW(pf, p);
        const vf b0 = vf_load_f32(bp), b1 = vf_load_f32(bp + PB_LANES);
#pragma GCC unroll 8
        for (int r = 0; r < MRr; r++) {
            const vf av = vf_set1(ap[r]);
            c0[r] = vf_fmadd(av, b0, c0[r]);
            c1[r] = vf_fmadd(av, b1, c1[r]);
        }
        ap += as;
        bp += PB_MM_NR;
    }
    PB_UK(PB_DT, mm_block_out)(MRr, c0, c1, acc, ldacc, load, final, n, y, ldy, alpha, beta, c, c_rs, c_cs);
}
#endif


/* The tile kernel of the registry: mr (1..MR) rows of packed A x one packed B panel, n (1..NR)
 * columns; see mm_block. Specialized per row count, so each keeps its chains in registers. */
static void PB_UK(PB_DT, matmul_tile)(const float *ap, const float *bp, int64_t kc, float *acc, int64_t ldacc,
                                      int load, int final, int64_t mr, int64_t n, void *y, int64_t ldy, float alpha,
                                      float beta, const void *c, int64_t c_rs, int64_t c_cs, const char *pf) {
    T *yy = (T *)y;
    const T *cc = (const T *)c;
#define PB_MM_CASE(R)                                                                                            \
    case R:                                                                                                      \
        PB_UK(PB_DT, mm_block)(R, ap, PB_MM_MR, bp, kc, acc, ldacc, load, final, n, yy, ldy, alpha, beta, cc, c_rs, \
                               c_cs, pf);                                                                        \
        break;
    switch (mr) {
        PB_MM_CASE(1)
        PB_MM_CASE(2)
        PB_MM_CASE(3)
        PB_MM_CASE(4)
        PB_MM_CASE(5)
#if PB_MM_MR > 6
        PB_MM_CASE(6)
        PB_MM_CASE(7)
#endif
        default:
            PB_UK(PB_DT, mm_block)(PB_MM_MR, ap, PB_MM_MR, bp, kc, acc, ldacc, load, final, n, yy, ldy, alpha, beta,
                                   cc, c_rs, c_cs, pf);
    }
#undef PB_MM_CASE
}

/* One row of A, contiguous (x: kc f32 values), times one packed B panel; the rest as the tile
 * kernel, with Y's row as the f32 sums. Only f32 calls it (matmul.c): f16/bf16 would need their
 * sums apart from Y and x converted; the slot is instantiated per dtype like every slot.
 * Why M = 1 over packed panels has it: the tile kernel's one-row case reads its A panel at a
 * stride of MR floats, a new cache line every two (AVX-512) or three (AVX2) k, next to the
 * panel's stream. Gemm 1 x 1024 x 1024 transB f32, B packed, 1 thread (Zen 4, medians of 9
 * interleaved in one process): 60.2 us with the panel, 51.4 with A read contiguous (the same
 * FMAs); a plain read of the packed B's bytes took 43.8 */
static void PB_UK(PB_DT, matmul_row)(const float *x, const float *bp, int64_t kc, float *acc, int64_t ldacc, int load,
                                     int final, int64_t n, void *y, float alpha, float beta, const void *c,
                                     int64_t c_cs) {
    PB_UK(PB_DT, mm_block)(1, x, 1, bp, kc, acc, ldacc, load, final, n, (T *)y, 0, alpha, beta, (const T *)c, 0, c_cs,
                           NULL);
}

/* One row of A (x, k elements at stride xs) times B (element (p, j) at b[p * rs + j * cs]),
 * columns [j0, j1): y[j] = alpha * sum_p x[p] B[p, j] + beta * C[j] (c NULL: none). The M = 1
 * path, reading B once where it lies, no packing: with cs == 1 four vectors of columns at a
 * time along B's rows; otherwise (B's columns contiguous: trans_b) one dot product per column,
 * two vector accumulators each, four columns at a time in f16/bf16. */
static void PB_UK(PB_DT, matmul_gemv)(const void *xv, int64_t xs, const void *bv, int64_t rs, int64_t cs, int64_t k,
                                      int64_t j0, int64_t j1, void *yv, float alpha, float beta, const void *cv,
                                      int64_t c_cs) {
    const T *x = (const T *)xv, *b = (const T *)bv, *c = (const T *)cv;
    T *y = (T *)yv;
    if (cs == 1) {
        /* B's rows stream in order: a block of up to PB_MM_GEMV_COLS columns of f32 sums stays in
         * L1 while four rows of B at a time are added into it (four prefetch streams, each sum
         * loaded and stored once per four rows). Column strips (64 columns, all K rows, then the
         * next strip) read 1 x 4096 x 4096 f32 at 9 GB/s against ORT's 26 (Zen 4, 1 thread). */
        float acc[PB_MM_GEMV_COLS];
        int64_t cols = pb_l1d_bytes() / 2 / (int64_t)sizeof(float) / PB_LANES * PB_LANES;
        cols = cols < PB_LANES ? PB_LANES : cols > PB_MM_GEMV_COLS ? PB_MM_GEMV_COLS : cols;
        for (int64_t jb = j0; jb < j1; jb += cols) {
            const int64_t w = j1 - jb < cols ? j1 - jb : cols;
            const int64_t wv = w / PB_LANES * PB_LANES;
            memset(acc, 0, sizeof(float) * (size_t)w);
            int64_t p = 0;
            for (; p + 4 <= k; p += 4) {
                const vf x0 = vf_set1(T_TO_F32(x[p * xs])), x1 = vf_set1(T_TO_F32(x[(p + 1) * xs]));
                const vf x2 = vf_set1(T_TO_F32(x[(p + 2) * xs])), x3 = vf_set1(T_TO_F32(x[(p + 3) * xs]));
                const T *r0 = b + p * rs + jb, *r1 = r0 + rs, *r2 = r1 + rs, *r3 = r2 + rs;
                for (int64_t t = 0; t < wv; t += PB_LANES) {
                    vf s = vf_load_f32(acc + t);
                    s = vf_fmadd(x0, T_LOAD(r0 + t), s);
                    s = vf_fmadd(x1, T_LOAD(r1 + t), s);
                    s = vf_fmadd(x2, T_LOAD(r2 + t), s);
                    s = vf_fmadd(x3, T_LOAD(r3 + t), s);
                    vf_store_f32(acc + t, s);
                }
                for (int64_t t = wv; t < w; t++)
                    acc[t] += T_TO_F32(x[p * xs]) * T_TO_F32(r0[t]) + T_TO_F32(x[(p + 1) * xs]) * T_TO_F32(r1[t]) +
                              T_TO_F32(x[(p + 2) * xs]) * T_TO_F32(r2[t]) + T_TO_F32(x[(p + 3) * xs]) * T_TO_F32(r3[t]);
            }
            for (; p < k; p++) {
                const vf xp = vf_set1(T_TO_F32(x[p * xs]));
                const T *r0 = b + p * rs + jb;
                for (int64_t t = 0; t < wv; t += PB_LANES) vf_store_f32(acc + t, vf_fmadd(xp, T_LOAD(r0 + t), vf_load_f32(acc + t)));
                for (int64_t t = wv; t < w; t++) acc[t] += T_TO_F32(x[p * xs]) * T_TO_F32(r0[t]);
            }
            for (int64_t t = 0; t < w; t++) {
                float v = alpha * acc[t];
                if (c != NULL) v += beta * T_TO_F32(c[(jb + t) * c_cs]);
                y[jb + t] = T_FROM_F32(v);
            }
        }
        return;
    }
    /* columns of B contiguous along k (rs == 1): per column a dot product of x and that column.
     * f16/bf16: four columns at a time where x is contiguous (eight FMA chains, x converted once
     * for four), each column's sum in the same order as one at a time. ab, Zen 4, Gemm 1 x 1024 x
     * 1024 transB: the six f16/bf16 cells that take this path (bf16 with a packed B on a pairs path
     * does not) 16-28% less time; f32, whose single column already reads B from the L3 at about
     * 89 GB/s, 9-13% more, so f32 keeps one column at a time */
    int64_t j = j0;
    if (!T_IS_F32 && xs == 1 && rs == 1)
        for (; j + 4 <= j1; j += 4) {
            const T *k0 = b + j * cs, *k1 = k0 + cs, *k2 = k1 + cs, *k3 = k2 + cs;
            vf a0 = vf_zero(), a1 = vf_zero(), b0 = vf_zero(), b1 = vf_zero();
            vf d0 = vf_zero(), d1 = vf_zero(), e0 = vf_zero(), e1 = vf_zero();
            int64_t p = 0;
            for (; p + 2 * PB_LANES <= k; p += 2 * PB_LANES) {
                const vf x0 = T_LOAD(x + p), x1 = T_LOAD(x + p + PB_LANES);
                a0 = vf_fmadd(x0, T_LOAD(k0 + p), a0);
                a1 = vf_fmadd(x1, T_LOAD(k0 + p + PB_LANES), a1);
                b0 = vf_fmadd(x0, T_LOAD(k1 + p), b0);
                b1 = vf_fmadd(x1, T_LOAD(k1 + p + PB_LANES), b1);
                d0 = vf_fmadd(x0, T_LOAD(k2 + p), d0);
                d1 = vf_fmadd(x1, T_LOAD(k2 + p + PB_LANES), d1);
                e0 = vf_fmadd(x0, T_LOAD(k3 + p), e0);
                e1 = vf_fmadd(x1, T_LOAD(k3 + p + PB_LANES), e1);
            }
            float v[4] = {vf_hsum(vf_add(a0, a1)), vf_hsum(vf_add(b0, b1)), vf_hsum(vf_add(d0, d1)),
                          vf_hsum(vf_add(e0, e1))};
            for (int u = 0; u < 4; u++) {
                const T *col = b + (j + u) * cs;
                for (int64_t q = p; q < k; q++) v[u] += T_TO_F32(x[q]) * T_TO_F32(col[q]);
                float o = v[u] * alpha;
                if (c != NULL) o += beta * T_TO_F32(c[(j + u) * c_cs]);
                y[j + u] = T_FROM_F32(o);
            }
        }
    for (; j < j1; j++) {
        const T *col = b + j * cs;
        vf s0 = vf_zero(), s1 = vf_zero();
        int64_t p = 0;
        if (xs == 1 && rs == 1) {
            for (; p + 2 * PB_LANES <= k; p += 2 * PB_LANES) {
                s0 = vf_fmadd(T_LOAD(x + p), T_LOAD(col + p), s0);
                s1 = vf_fmadd(T_LOAD(x + p + PB_LANES), T_LOAD(col + p + PB_LANES), s1);
            }
        }
        float v = vf_hsum(vf_add(s0, s1));
        for (; p < k; p++) v += T_TO_F32(x[p * xs]) * T_TO_F32(col[p * rs]);
        v *= alpha;
        if (c != NULL) v += beta * T_TO_F32(c[j * c_cs]);
        y[j] = T_FROM_F32(v);
    }
}
