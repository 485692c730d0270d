/* MatMulNBits microkernel (nbits.c drives it), instantiated per ISA path and dtype (of A, scales,
 * float zero points, bias and Y).
 *
 * One row of Y, columns [j0, j1), from the weight's bytes as stored: per block, each LANES-byte
 * chunk is loaded 8 / bits times, each time one bit field of every byte converted to f32 in
 * registers (vf_load_u8_field; never a dequantized copy of B), its zero point subtracted, and
 * multiplied with the row's x values of that field (the driver lays x out so: field f of byte l is
 * k = l * (8 / bits) + f). A block's sum is scaled once: acc += scale * sum(x (q - zp)). Where
 * a field's values fit the lanes and a block's bytes fill a vector, each field instead looks its
 * dequantized weight up in a vector made once per block (nbits_cols_lut); where a block has fewer
 * bytes than a vector, a vector takes several blocks (nbits_cols_small). */

/* a scale, zero point or bias element as f32, inline (T_TO_F32 calls the library's converters, per
 * block and column in the row kernel: ours/ORT at 1 x 4096 x 4096 f16, 1 thread, went 2.34 -> 0.99
 * with this, the lookup row kernel in both; Zen 4, one run each) */
static inline float PB_UK(PB_DT, nb_f32)(T v) {
#if T_IS_F32
    return v;
#elif T_IS_BF16
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
#else
    return vf_f16_scalar(v);
#endif
}
#define NB_F32(v) PB_UK(PB_DT, nb_f32)(v)

/* B's bytes prefetched NC x colb + PB_NB_PF_AHEAD bytes ahead (past the NC columns in flight: the
 * next ones start right after), into the L2 (prefetcht2). Scratch medians, each of our calls right
 * after two of ORT's (which evict our weights: they come from memory), Zen 4, 1 thread, 4-bit
 * block 32, one run, against the earlier prefetchnta 2048 bytes ahead (the next column's bytes at
 * the same offset, already being loaded when NC = 2): M = 1 4096 x 4096 656 -> 323 us, 4096 x
 * 11008 2989 -> 1529, 11008 x 4096 2313 -> 1356, 2 threads 4096 x 4096 523 -> 287; M = 16
 * 2917 -> 2767; M = 128 unchanged; 8192 ahead the same. Earlier runs: prefetchnta at 4-16 KiB
 * 28-54% slower than prefetcht2 at the same distance. The accuracy-0 row kernel prefetches the
 * same way (B as stored; its effect there not measured apart from the lookup's). */
#define PB_NB_PF_AHEAD 4096

/* Columns [j, j + NC) of Y's row (NC = 1 or 2: each x vector loaded once for the NC columns). The
 * zero point is subtracted from the unpacked values (exact in f32) before the product: folded in
 * afterwards as scale x zp x (the block's x sum), the cancellation against sum(x q) cost up to 3x
 * ORT's error at M = 16, K = 4096, past the numerics gate's tolerance. B is prefetched a line at a
 * time past the NC columns in flight, as the accuracy-4 kernel does. */
static inline __attribute__((always_inline)) float PB_UK(PB_DT, nbits_zp)(const int BITS, const void *zpv, int zp_mode,
                                                                          int64_t kb, int64_t jj, int64_t blk) {
    const int per = 8 / BITS, mask = (1 << BITS) - 1;
    const int64_t zpb = (kb * BITS + 7) / 8; /* packed zero-point bytes per column */
    const int64_t kbg = (kb + PB_NB_GROUP - 1) / PB_NB_GROUP * PB_NB_GROUP; /* mode 3: bytes a column */
    return zp_mode == 0   ? (float)(1 << (BITS - 1))
           : zp_mode == 1 ? (float)((((const uint8_t *)zpv)[jj * zpb + blk / per] >> (BITS * (blk % per))) & mask)
           : zp_mode == 3 ? (float)((const uint8_t *)zpv)[jj * kbg + blk]
                          : NB_F32(((const T *)zpv)[jj * kb + blk]);
}

static inline __attribute__((always_inline)) void PB_UK(PB_DT, nbits_cols_n)(
    const int BITS, const int NC, const float *xp, const uint8_t *b, const T *sc, const void *zpv, int zp_mode,
    const T *bias, int64_t bs, int64_t kb, int64_t j, T *y) {
    const int per = 8 / BITS, mask = (1 << BITS) - 1;
    const int64_t bb = bs * BITS / 8;                      /* bytes per block (a power of two >= 4) */
    const int64_t nch = bb / PB_LANES;                     /* chunks per block (nbits_cols_small takes blocks of fewer bytes) */
    const int64_t xblk = nch * per * PB_LANES;             /* floats of xp per block */
    const int64_t pf = NC * kb * bb + PB_NB_PF_AHEAD;
    vf acc[2] = {vf_zero(), vf_zero()};
    for (int64_t blk = 0; blk < kb; blk++) {
        const float *xb = xp + blk * xblk;
        vf z[2], t[2] = {vf_zero(), vf_zero()};
        for (int u = 0; u < NC; u++) z[u] = vf_set1(PB_UK(PB_DT, nbits_zp)(BITS, zpv, zp_mode, kb, j + u, blk));
        for (int64_t c = 0; c < nch; c++) {
            const uint8_t *q[2];
            for (int u = 0; u < NC; u++) {
                q[u] = b + ((j + u) * kb + blk) * bb + c * PB_LANES;
                if (((blk * bb + c * PB_LANES) & 63) == 0) __builtin_prefetch(q[u] + pf, 0, 1);
            }
            const float *xc = xb + c * per * PB_LANES;
#pragma GCC unroll 4
            for (int f = 0; f < per; f++) {
                const vf xv = vf_load_f32(xc + f * PB_LANES);
                for (int u = 0; u < NC; u++)
                    t[u] = vf_fmadd(xv, vf_sub(vf_load_u8_field(q[u], BITS * f, mask), z[u]), t[u]);
            }
        }
        for (int u = 0; u < NC; u++) acc[u] = vf_fmadd(vf_set1(NB_F32(sc[(j + u) * kb + blk])), t[u], acc[u]);
    }
    for (int u = 0; u < NC; u++) {
        float v = vf_hsum(acc[u]);
        if (bias != NULL) v += NB_F32(bias[j + u]);
        y[j + u] = T_FROM_F32(v);
    }
}

/* The same where a field's 2^bits values fit the lanes and a block's bytes fill a vector (AVX-512 and
 * portable16: 4 bits from block 32 on, 2 bits from 64; AVX2: 2 bits from 32; portable: 2 bits; 8
 * bits nowhere): each block's dequantized
 * weights (v - zp) x scale for v < 2^bits are made once as a vector (lane i: i mod 2^bits) and
 * every field looks its weight up (vf_lut: zero-extend, shift, permute) instead of masking,
 * converting and subtracting it: acc += x x w, the weight rounded to f32 once as in ORT's
 * dequantize-then-GEMM. 1 x 4096 x 4096 4-bit f32, Zen 4, 1 thread, interleaved medians against
 * the field form without the row kernel's prefetch (this form with it: the two changes together):
 * block 32 0.65x its time, block 128 0.55x. */
static inline __attribute__((always_inline)) void PB_UK(PB_DT, nbits_cols_lut)(
    const int BITS, const int NC, const float *xp, const uint8_t *b, const T *sc, const void *zpv, int zp_mode,
    const T *bias, int64_t bs, int64_t kb, int64_t j, T *y) {
    const int per = 8 / BITS, mask = (1 << BITS) - 1;
    const int64_t bb = bs * BITS / 8, nch = bb / PB_LANES, colb = kb * bb, pf = NC * colb + PB_NB_PF_AHEAD;
    float io[PB_LANES];
    for (int i = 0; i < PB_LANES; i++) io[i] = (float)(i & mask);
    const vf iota = vf_load_f32(io);
    vf acc[2][2] = {{vf_zero(), vf_zero()}, {vf_zero(), vf_zero()}}; /* [field parity][column] */
    const uint8_t *q = b + j * colb;
    for (int64_t blk = 0; blk < kb; blk++, q += bb) {
        const float *xb = xp + blk * nch * per * PB_LANES;
        vf lut[2];
        for (int u = 0; u < NC; u++) {
            const float zf = PB_UK(PB_DT, nbits_zp)(BITS, zpv, zp_mode, kb, j + u, blk);
            lut[u] = vf_mul(vf_sub(iota, vf_set1(zf)), vf_set1(NB_F32(sc[(j + u) * kb + blk])));
        }
        for (int64_t c = 0; c < nch; c++) {
            vi w[2];
            for (int u = 0; u < NC; u++) {
                const uint8_t *qc = q + u * colb + c * PB_LANES;
                if (((blk * bb + c * PB_LANES) & 63) == 0) __builtin_prefetch(qc + pf, 0, 1);
                w[u] = vi_load_u8_lanes(qc);
            }
            const float *xc = xb + c * per * PB_LANES;
#pragma GCC unroll 4
            for (int f = 0; f < per; f++) {
                const vf xv = vf_load_f32(xc + f * PB_LANES);
                for (int u = 0; u < NC; u++)
                    acc[f & 1][u] = vf_fmadd(xv, vf_lut(lut[u], f ? vi_srl32(w[u], BITS * f) : w[u]), acc[f & 1][u]);
            }
        }
    }
    for (int u = 0; u < NC; u++) {
        float v = vf_hsum(vf_add(acc[0][u], acc[1][u]));
        if (bias != NULL) v += NB_F32(bias[j + u]);
        y[j + u] = T_FROM_F32(v);
    }
}

/* One vector of NC columns from block b0: nbk blocks (FULL: all SPB of them), scales (float zero
 * points) from block `base`, packed zero points from byte zb; ZPM the zero-point mode */
static inline __attribute__((always_inline)) void PB_UK(PB_DT, nbits_small_vec)(
    const int BITS, const int NC, const int ZPM, const int FULL, const float *xc, const uint8_t *b, const T *sc,
    const void *zpv, int64_t bb, int64_t kb, int64_t j, int64_t b0, int64_t nbk, int64_t base, int64_t zb,
    const vi *idx, int64_t pf, vf *acc) {
    const int per = 8 / BITS, mask = (1 << BITS) - 1;
    const int64_t zpb = (kb * BITS + 7) / 8, zlb = PB_LANES * BITS / 8; /* zero-point bytes: a column, a vector */
    vf z[2], s[2], t[2] = {vf_zero(), vf_zero()};
    const uint8_t *q[2];
    uint8_t tmp[2][PB_LANES];
    for (int u = 0; u < NC; u++) {
        const int64_t jj = j + u;
        q[u] = b + (jj * kb + b0) * bb;
        if (((b0 * bb) & 63) == 0) __builtin_prefetch(q[u] + pf, 0, 1);
        if (!FULL) { /* the column's last blocks: a copy, zero past them (x is zero there) */
            memset(tmp[u], 0, sizeof(tmp[u]));
            memcpy(tmp[u], q[u], (size_t)(nbk * bb));
            q[u] = tmp[u];
        }
        const T *sp = sc + jj * kb + base;
        s[u] = vf_lut(!FULL && kb < PB_LANES ? PB_UK(PB_DT, load_part)(sp, kb, 0.0f) : T_LOAD(sp), idx[b0 - base]);
        if (ZPM == 0) {
            z[u] = vf_set1((float)(1 << (BITS - 1)));
        } else if (ZPM == 2) {
            const T *zp = (const T *)zpv + jj * kb + base;
            z[u] = vf_lut(!FULL && kb < PB_LANES ? PB_UK(PB_DT, load_part)(zp, kb, 0.0f) : T_LOAD(zp), idx[b0 - base]);
        } else if (FULL || zpb >= zlb) {
            z[u] = vf_lut(vf_load_u_fields((const uint8_t *)zpv + jj * zpb + zb, BITS), idx[b0 - zb * per]);
        } else { /* fewer zero-point bytes a column than a vector's fields take */
            float zt[PB_LANES] = {0};
            for (int64_t g = 0; g < nbk; g++) zt[g] = PB_UK(PB_DT, nbits_zp)(BITS, zpv, ZPM, kb, jj, b0 + g);
            z[u] = vf_lut(vf_load_f32(zt), idx[0]);
        }
    }
#pragma GCC unroll 4
    for (int f = 0; f < per; f++) {
        const vf xv = vf_load_f32(xc + f * PB_LANES);
        for (int u = 0; u < NC; u++) t[u] = vf_fmadd(xv, vf_sub(vf_load_u8_field(q[u], BITS * f, mask), z[u]), t[u]);
    }
    for (int u = 0; u < NC; u++) acc[u] = vf_fmadd(s[u], t[u], acc[u]);
}

/* The same where a block has fewer bytes than a vector (4 bits at block 16, 2 bits at 16 and 32 on
 * 16 lanes; 2 bits at 16 on 8): a vector takes SPB = LANES / (block bytes) consecutive blocks of a
 * column (the driver lays x out as for one block of SPB x block_size). Lane l's scale and zero
 * point are those of block l / (block bytes): a whole vector of the column's scales (zero points)
 * is loaded from block `base` (b0, or LANES blocks before the column's end) and permuted by
 * idx[b0 - base]. Each block had been copied into a zeroed vector's worth of bytes, half or more
 * of the lanes multiplying zeros: 1 x 4096 x 4096 4-bit block 16, accuracy 0, 1 thread, 4.0x
 * ORT's time (scratch medians, Zen 4). In the column's last vector, lanes past its last block
 * (x zero there, B copied with zeros past it) take another block's scale and zero point: 0 unless
 * that scale or zero point is not finite. The vectors whose loads need no clamp run first, with
 * the zero-point mode a constant: one loop of it kept the scale and zero-point vectors on the
 * stack and branched per vector (3.7 ms at 1 x 4096 x 4096 4-bit block 16, 1 thread). */
static inline __attribute__((always_inline)) void PB_UK(PB_DT, nbits_cols_small_z)(
    const int BITS, const int NC, const int ZPM, const float *xp, const uint8_t *b, const T *sc, const void *zpv,
    int64_t bs, int64_t kb, int64_t j, const vi *idx, vf *acc) {
    const int per = 8 / BITS;
    const int64_t bb = bs * BITS / 8, spb = PB_LANES / bb, pf = NC * kb * bb + PB_NB_PF_AHEAD;
    const int64_t zpb = (kb * BITS + 7) / 8, zlb = PB_LANES * BITS / 8;
    int64_t b0 = 0;
    /* whole vectors whose scales (b0 + LANES <= kb) and zero points (b0 / per + zlb <= zpb) lie ahead */
    for (; b0 + PB_LANES <= kb && b0 / per + zlb <= zpb; b0 += spb)
        PB_UK(PB_DT, nbits_small_vec)(BITS, NC, ZPM, 1, xp + b0 / spb * per * PB_LANES, b, sc, zpv, bb, kb, j, b0, spb,
                                      b0, b0 / per, idx, pf, acc);
    for (; b0 < kb; b0 += spb) { /* the column's last vectors: loads clamped to its end */
        const int64_t nbk = kb - b0 < spb ? kb - b0 : spb;
        const int64_t base = kb < PB_LANES ? 0 : b0 < kb - PB_LANES ? b0 : kb - PB_LANES;
        const int64_t zb = zpb < zlb ? 0 : b0 / per < zpb - zlb ? b0 / per : zpb - zlb;
        const float *xc = xp + b0 / spb * per * PB_LANES;
        if (nbk == spb && kb >= PB_LANES)
            PB_UK(PB_DT, nbits_small_vec)(BITS, NC, ZPM, 1, xc, b, sc, zpv, bb, kb, j, b0, nbk, base, zb, idx, pf, acc);
        else
            PB_UK(PB_DT, nbits_small_vec)(BITS, NC, ZPM, 0, xc, b, sc, zpv, bb, kb, j, b0, nbk, base, zb, idx, pf, acc);
    }
}

static inline __attribute__((always_inline)) void PB_UK(PB_DT, nbits_cols_small)(
    const int BITS, const int NC, const float *xp, const uint8_t *b, const T *sc, const void *zpv, int zp_mode,
    const T *bias, int64_t bs, int64_t kb, int64_t j, const vi *idx, T *y) {
    vf acc[2] = {vf_zero(), vf_zero()};
    if (zp_mode == 0) PB_UK(PB_DT, nbits_cols_small_z)(BITS, NC, 0, xp, b, sc, zpv, bs, kb, j, idx, acc);
    else if (zp_mode == 1) PB_UK(PB_DT, nbits_cols_small_z)(BITS, NC, 1, xp, b, sc, zpv, bs, kb, j, idx, acc);
    else PB_UK(PB_DT, nbits_cols_small_z)(BITS, NC, 2, xp, b, sc, zpv, bs, kb, j, idx, acc);
    for (int u = 0; u < NC; u++) {
        float v = vf_hsum(acc[u]);
        if (bias != NULL) v += NB_F32(bias[j + u]);
        y[j + u] = T_FROM_F32(v);
    }
}

static inline __attribute__((always_inline)) void PB_UK(PB_DT, nbits_cols_bits)(
    const int BITS, const float *xp, const uint8_t *b, const T *sc, const void *zpv, int zp_mode,
    const T *bias, int64_t bs, int64_t kb, int64_t j0, int64_t j1, T *y) {
    int64_t j = j0;
    if ((1 << BITS) <= PB_LANES && bs * BITS / 8 >= PB_LANES) {
        for (; j + 2 <= j1; j += 2) PB_UK(PB_DT, nbits_cols_lut)(BITS, 2, xp, b, sc, zpv, zp_mode, bias, bs, kb, j, y);
        if (j < j1) PB_UK(PB_DT, nbits_cols_lut)(BITS, 1, xp, b, sc, zpv, zp_mode, bias, bs, kb, j, y);
        return;
    }
    if (bs * BITS / 8 < PB_LANES) {
        const int64_t bb = bs * BITS / 8;
        int32_t ib[PB_LANES][PB_LANES]; /* [o][l]: o + l / bb (mod LANES: the permute reads the low bits) */
        vi idx[PB_LANES];
        for (int o = 0; o < PB_LANES; o++) {
            for (int l = 0; l < PB_LANES; l++) ib[o][l] = (int32_t)((o + l / bb) % PB_LANES);
            idx[o] = vi_load(ib[o]);
        }
        for (; j + 2 <= j1; j += 2) PB_UK(PB_DT, nbits_cols_small)(BITS, 2, xp, b, sc, zpv, zp_mode, bias, bs, kb, j, idx, y);
        if (j < j1) PB_UK(PB_DT, nbits_cols_small)(BITS, 1, xp, b, sc, zpv, zp_mode, bias, bs, kb, j, idx, y);
        return;
    }
    for (; j + 2 <= j1; j += 2) PB_UK(PB_DT, nbits_cols_n)(BITS, 2, xp, b, sc, zpv, zp_mode, bias, bs, kb, j, y);
    if (j < j1) PB_UK(PB_DT, nbits_cols_n)(BITS, 1, xp, b, sc, zpv, zp_mode, bias, bs, kb, j, y);
}

static void PB_UK(PB_DT, matmul_nbits_cols)(const float *xp, const uint8_t *b, const void *scales,
                                            const void *zp, int zp_mode, const void *bias, int bits, int64_t block_size,
                                            int64_t kb, int64_t j0, int64_t j1, void *y) {
    const T *sc = (const T *)scales, *bi = (const T *)bias;
    T *yy = (T *)y;
    switch (bits) {
        case 2: PB_UK(PB_DT, nbits_cols_bits)(2, xp, b, sc, zp, zp_mode, bi, block_size, kb, j0, j1, yy); break;
        case 4: PB_UK(PB_DT, nbits_cols_bits)(4, xp, b, sc, zp, zp_mode, bi, block_size, kb, j0, j1, yy); break;
        default: PB_UK(PB_DT, nbits_cols_bits)(8, xp, b, sc, zp, zp_mode, bi, block_size, kb, j0, j1, yy); break;
    }
}

/* ---- accuracy_level 0, M > 1: B dequantized a kc x NR panel at a time for matmul.c's GEMM ----
 * A column's weights are one bit stream (blocks back to back, the low field of a byte first), so
 * the weight at k sits in the column's 4-byte word k / (32 / bits). LANES words of LANES columns
 * are loaded (a row of bytes per column) and transposed in registers, so that a vector holds one
 * word of every column; per k of the word, a panel row of LANES weights (field - zp) x scale, k in
 * its natural order (A is packed as it lies). A word never spans two blocks (a block's bytes are a
 * multiple of 4). 1 x 4096 x 4096 block 32 through this path, Zen 4, 1 thread (one process each,
 * not side by side): a gather of each word from the LANES columns 3.4 ms, these transposed loads
 * about the same (3.6), then scales and zero points a vector a block (below) 2.2 ms. */
/* p: the (N, kb) scales (or dtype zero points); out[q] lane c = p[(j + c) x kb + b0 + q] as f32,
 * q < nb, c < nh (0 past nh) */
static inline __attribute__((always_inline)) void PB_UK(PB_DT, nbits_panel_params)(
    const void *p, int64_t kb, int64_t j, int64_t nh, int64_t b0, int64_t nb, vf *out) {
    const T *pt = (const T *)p + j * kb;
    int64_t q = 0;
#if T_IS_F32
    if (nh == PB_LANES && kb <= INT32_MAX / 4 / PB_LANES)
        for (; q < nb && b0 + q + PB_LANES <= kb; q += PB_LANES) {
            vi w[PB_LANES];
            vi_load_t((const uint8_t *)(pt + b0 + q), kb * 4, w);
            for (int i = 0; i < PB_LANES; i++) out[q + i] = vi_as_vf(w[i]);
        }
#endif
    for (; q < nb; q++) {
        float tmp[PB_LANES] = {0};
        for (int64_t c = 0; c < nh; c++) tmp[c] = NB_F32(pt[c * kb + b0 + q]);
        out[q] = vf_load_f32(tmp);
    }
}

#define PB_NB_PANEL_BLOCKS (PB_MM_KC_MAX / 16 + 2) /* blocks a K step spans at most (block_size >= 16) */
static inline __attribute__((always_inline)) void PB_UK(PB_DT, nbits_panel_bits)(
    const int BITS, const pb_nbits_panel_src *s, int64_t p0, int64_t kc, int64_t j0, int64_t nc, float *dst) {
    const int per = 8 / BITS, mask = (1 << BITS) - 1, kpw = 32 / BITS;
    const int64_t bs = s->block_size, kb = s->kb, colb = kb * bs * BITS / 8, zpb = (kb * BITS + 7) / 8;
    const int64_t w1 = (p0 + kc + kpw - 1) / kpw; /* past the last word */
    const T *sc = (const T *)s->scales;
    for (int64_t h0 = 0; h0 < nc; h0 += PB_LANES) { /* LANES columns: half of an NR panel */
        const int64_t nh = nc - h0 < PB_LANES ? nc - h0 : PB_LANES;
        float *d = dst + h0 / PB_MM_NR * PB_MM_NR * kc + h0 % PB_MM_NR;
        const uint8_t *base = s->b + (j0 + h0) * colb;
        /* the LANES columns' scales and zero points of the panel's blocks [bA, bA + nblk), block by
         * block a vector (0 past nc): f32 scales and zero points LANES blocks at a time transposed in
         * registers, packed zero points a gathered word of every column at a time, else element by
         * element (all element by element: the 3.6 ms above). */
        const int64_t bA = p0 / bs, nblk = (p0 + kc - 1) / bs - bA + 1;
        vf st[PB_NB_PANEL_BLOCKS + PB_LANES], zt[PB_NB_PANEL_BLOCKS + PB_LANES];
        PB_UK(PB_DT, nbits_panel_params)(s->scales, kb, j0 + h0, nh, bA, nblk, st);
        if (s->zp_mode == 2) PB_UK(PB_DT, nbits_panel_params)(s->zp, kb, j0 + h0, nh, bA, nblk, zt);
        if (s->zp_mode == 0)
            for (int64_t q = 0; q < nblk; q++) zt[q] = vf_set1((float)(1 << (BITS - 1)));
        if (s->zp_mode == 1) {
            const uint8_t *zb = (const uint8_t *)s->zp + (j0 + h0) * zpb;
            for (int64_t u = bA / kpw; u * kpw < bA + nblk; u++) { /* the word holding blocks [u kpw, u kpw + kpw) */
                vi zw;
                if (nh == PB_LANES && 4 * u + 4 <= zpb && zpb <= INT32_MAX / PB_LANES) {
                    zw = vi_gather_u32(zb + 4 * u, zpb);
                } else {
                    uint8_t wt[PB_LANES][4] = {{0}};
                    for (int64_t c = 0; c < nh; c++)
                        for (int64_t e = 0; e < 4 && 4 * u + e < zpb; e++) wt[c][e] = zb[c * zpb + 4 * u + e];
                    zw = vi_load(wt);
                }
                for (int t = 0; t < kpw; t++) {
                    const int64_t q = u * kpw + t - bA;
                    if (q >= 0 && q < nblk) zt[q] = vi_u32_field(zw, BITS * t, mask);
                }
            }
        }
        for (int64_t wc = p0 / kpw; wc < w1; wc += PB_LANES) {
            const int64_t nw = w1 - wc < PB_LANES ? w1 - wc : PB_LANES;
            vi words[PB_LANES];
            if (nh == PB_LANES && nw == PB_LANES) {
                vi_load_t(base + wc * 4, colb, words);
            } else { /* a short chunk: words past the panel's or columns past nc zero */
                uint32_t wt[PB_LANES][PB_LANES] = {{0}};
                for (int64_t i = 0; i < nw; i++)
                    for (int64_t c = 0; c < nh; c++) memcpy(&wt[i][c], base + c * colb + (wc + i) * 4, 4);
                for (int64_t i = 0; i < PB_LANES; i++) words[i] = vi_load(wt[i]);
            }
            for (int64_t i = 0; i < nw; i++) {
                const int64_t w = wc + i, q = w * kpw / bs - bA;
                const vf sv = st[q], zv = zt[q];
                const int64_t t0 = w * kpw < p0 ? p0 - w * kpw : 0;
                const int64_t t1 = (w + 1) * kpw > p0 + kc ? p0 + kc - w * kpw : kpw;
                if (t0 == 0 && t1 == kpw) {
                    float *o = d + (w * kpw - p0) * PB_MM_NR;
#pragma GCC unroll 16
                    for (int t = 0; t < kpw; t++)
                        vf_store_f32(o + t * PB_MM_NR, vf_mul(vf_sub(vi_u32_field(words[i], BITS * t, mask), zv), sv));
                } else {
                    for (int64_t t = t0; t < t1; t++)
                        vf_store_f32(d + (w * kpw + t - p0) * PB_MM_NR,
                                     vf_mul(vf_sub(vi_u32_field(words[i], BITS * (int)t, mask), zv), sv));
                }
            }
        }
        if (h0 % PB_MM_NR == 0 && h0 + PB_LANES >= nc) /* the last panel's second half has no columns: zero */
            for (int64_t p = 0; p < kc; p++) vf_store_f32(d + p * PB_MM_NR + PB_LANES, vf_zero());
    }
}

static void PB_UK(PB_DT, matmul_nbits_panel)(const void *src, int64_t p0, int64_t kc, int64_t j0, int64_t nc,
                                             float *dst) {
    const pb_nbits_panel_src *s = (const pb_nbits_panel_src *)src;
    switch (s->bits) {
        case 2: PB_UK(PB_DT, nbits_panel_bits)(2, s, p0, kc, j0, nc, dst); break;
        case 4: PB_UK(PB_DT, nbits_panel_bits)(4, s, p0, kc, j0, nc, dst); break;
        default: PB_UK(PB_DT, nbits_panel_bits)(8, s, p0, kc, j0, nc, dst); break;
    }
}

/* ---- accuracy_level 4: A quantized per block to int8 (the driver), integer dot products ----
 *
 * B's bytes are regrouped first (pb_matmul_nbits_pack_b; the driver does it per call unless B was
 * packed once, as ORT prepacks its initializers): per column, per group of 16 blocks, per 4-byte
 * word of a block, the word of each of the group's 16 blocks (zero past the last block): 64 bytes,
 * so that a vector's int32 lane l meets block l's bytes and vi_dot's four products a lane stay in
 * one block. Each row of A is laid out the same way (the driver): per group, word and bit field,
 * lane l's four bytes the int8 values of block l's k at that word and field; with, per block, its
 * int8 sum and scale. A vector of LANES lanes covers LANES blocks of a group (AVX2: half of it).
 * After a group's words, lane g holds block g's integer sum I and, with scales and zero points
 * contiguous per column, acc += scale_w x scale_a x (I - zp x sum_a): I - zp x sum_a is exact in f32
 * (|I| and |zp x sum_a| <= 255 x 128 x 256 < 2^24, blocks of at most 256 at accuracy 4).
 * Two earlier forms read B as stored: each block's scale and zero point spread over its lanes per
 * vector (2.7x ORT's time at 1 x 4096 x 4096, block 32, Zen 4), then each group's vectors reduced
 * to block sums by a tree of pair sums (1.6x; 2.7x at block 128, where the tree costs 15 pair sums
 * per 16 vectors). */
/* Columns a single row takes at a time where the driver allows it (nb_wide in nbits.c: 4-bit and
 * 2-bit weights that stay in the last-level cache), sharing each x vector over that many dot
 * products: 4 with 32 vector registers (4 columns x PB_VI_DOT_CHAINS sums, 4 words, a field and x),
 * 2 with AVX2's 16. With the dot chains and the in-place high nibble (nbits_i8_lanes), perfbench's
 * native loop against the two-column form before them, 1 thread, Zen 4, medians of 9, one run:
 * 1 x 4096 x 4096 block 32 0.855, block 128 0.912, 2 bits 0.880, 2 threads 0.924 / 0.983; f16
 * 0.980; 8 bits (two columns, two chains of words) 1.044; 11008 x 4096 block 128 and 4096 x 11008
 * block 32 (two columns: their weights stream) 1.005 / 1.000; M = 16 1.017. */
#if PB_VI_DOT_CHAINS > 1
#define PB_NB_NC1 4
#else
#define PB_NB_NC1 2
#endif
#define PB_NB_PREFETCH(p) __builtin_prefetch((const char *)(p) + NC * colb + PB_NB_PF_AHEAD, 0, 1)

/* Blocks [g0, g0 + LANES) of R rows x NC columns (row r, column c at slot r x NC + c), FULL: all of
 * them in the column; adds to acc[slot]. A word's bytes are loaded and each field masked out once
 * for the R rows. */
static inline __attribute__((always_inline)) void PB_UK(PB_DT, nbits_i8_lanes)(
    const int BITS, const int R, const int NC, const int FULL, const float *rows, int64_t xrow, int64_t nbp,
    int64_t xq_off, const uint8_t *bp, const T *sc, const void *zpv, int zp_mode, int64_t bs, int64_t kb, int64_t j,
    int64_t g0, vf *acc) {
    const int per = 8 / BITS, mask = (1 << BITS) - 1;
    const int64_t G = PB_NB_GROUP, wpb = bs * BITS / 32;                  /* 4-byte words a block */
    const int64_t ngr = (kb + G - 1) / G, grp = g0 / G, h = g0 % G;       /* g0's group, its lane offset */
    const int64_t colb = ngr * wpb * 4 * G;                               /* packed bytes a column */
    /* CH chains a sum (PB_VI_DOT_CHAINS): a field's products go to chain f mod CH, or with one field
     * a byte (8 bits) word w's to chain w mod CH, words taken CH at a time (wpb = bs / 4 is even:
     * nbits.c admits only powers of two from 16).
     * One chain a sum made each vi_dot wait for the last: on a Zen 4, vpdpbusd on zmm takes 4
     * cycles and issues one a cycle (a probe: 1 chain 1.09 ns an instruction, 4 chains 0.27) */
    enum { CH = PB_VI_DOT_CHAINS };
    const int U = per == 1 ? CH : 1;
    /* 4 bits with two chains: the high nibble masked in place (16 x its value, one instruction
     * where a shift and a mask took two) into chain 1, whose sum is divided by 16 (exact: a multiple
     * of 16) at the end; only where vi_dot is exact for u8 up to 240 (not AVX2's vpmaddubsw, whose
     * int16 pair sums would saturate) */
    const int HI16 = BITS == 4 && CH == 2 && PB_VI_DOT_U8_EXACT;
    vi I[4 * CH];
    for (int s = 0; s < 4 * CH; s++) I[s] = vi_zero();
    const uint8_t *src[4];
    for (int c = 0; c < NC; c++) src[c] = bp + (j + c) * colb + grp * wpb * 4 * G + h * 4;
    const int64_t xb = xq_off * 4 + grp * wpb * per * 4 * G + h * 4; /* bytes from a row's start */
#pragma GCC unroll 2 /* was 4: with four columns a row, half the code (not measured apart) */
    for (int64_t w0 = 0; w0 < wpb; w0 += U)
        for (int u = 0; u < U; u++) {
            const int64_t w = w0 + u;
            vi q[4];
            for (int c = 0; c < NC; c++) {
                q[c] = vi_load_once(src[c] + w * 4 * G);
                PB_NB_PREFETCH(src[c] + w * 4 * G);
            }
            for (int f = 0; f < per; f++)
                for (int r = 0; r < R; r++) {
                    const vi xv = vi_load((const int8_t *)(rows + r * xrow) + xb + (w * per + f) * 4 * G);
                    for (int c = 0; c < NC; c++) {
                        vi *acc_i = &I[(r * NC + c) * CH + (per == 1 ? u : f) % CH];
                        const vi field = BITS == 8 ? q[c] : HI16 && f == 1 ? vi_u8_field(q[c], 0, 0xf0)
                                                                           : vi_u8_field(q[c], BITS * f, mask);
                        *acc_i = BITS == 8 ? vi_dot_u8(*acc_i, field, xv) : vi_dot(*acc_i, field, xv);
                    }
                }
        }
    for (int s = 0; s < R * NC; s++)
        for (int ch = 1; ch < CH; ch++) I[s * CH] = vi_add32(I[s * CH], HI16 ? vi_sra32(I[s * CH + ch], 4) : I[s * CH + ch]);
    for (int c = 0; c < NC; c++) {
        const int64_t jj = j + c;
        vf sw, zp;
        if (FULL) {
            sw = T_LOAD(sc + jj * kb + g0);
            zp = zp_mode == 0   ? vf_set1((float)(1 << (BITS - 1)))
                 : zp_mode == 3 ? vf_load_u8((const uint8_t *)zpv + jj * ngr * G + g0) /* packed: the copy's bytes */
                                : T_LOAD((const T *)zpv + jj * kb + g0);
        } else { /* the column's last blocks: copies, zero past them */
            float st[PB_LANES] = {0}, zt[PB_LANES] = {0};
            for (int64_t g = 0; g < kb - g0; g++) {
                st[g] = NB_F32(sc[jj * kb + g0 + g]);
                zt[g] = PB_UK(PB_DT, nbits_zp)(BITS, zpv, zp_mode, kb, jj, g0 + g);
            }
            sw = vf_load_f32(st);
            zp = vf_load_f32(zt);
        }
        for (int r = 0; r < R; r++) {
            const float *row = rows + r * xrow;
            const vf t = vf_fnmadd(zp, vf_load_f32(row + g0), vi_to_vf(I[(r * NC + c) * CH]));
            acc[r * NC + c] = vf_fmadd(t, vf_mul(vf_load_f32(row + nbp + g0), sw), acc[r * NC + c]);
        }
    }
}

/* R rows x NC columns at j, blocks [gb, ge) (gb a multiple of LANES): the sums into res[slot] */
static inline __attribute__((always_inline)) void PB_UK(PB_DT, nbits_i8_tile)(
    const int BITS, const int R, const int NC, const float *rows, int64_t xrow, int64_t nbp, int64_t xq_off,
    const uint8_t *bp, const T *sc, const void *zpv, int zp_mode, int64_t bs, int64_t kb, int64_t j, int64_t gb,
    int64_t ge, float *res) {
    vf acc[4] = {vf_zero(), vf_zero(), vf_zero(), vf_zero()};
    int64_t g0 = gb;
    for (; g0 + PB_LANES <= ge; g0 += PB_LANES)
        PB_UK(PB_DT, nbits_i8_lanes)(BITS, R, NC, 1, rows, xrow, nbp, xq_off, bp, sc, zpv, zp_mode, bs, kb, j, g0, acc);
    if (g0 < ge) /* only at the column's end: ge is kb or a multiple of 16 */
        PB_UK(PB_DT, nbits_i8_lanes)(BITS, R, NC, 0, rows, xrow, nbp, xq_off, bp, sc, zpv, zp_mode, bs, kb, j, g0, acc);
    for (int sl = 0; sl < R * NC; sl++) res[sl] = vf_hsum(acc[sl]);
}

/* Columns [j0, j1) of R rows: one row takes two columns at a time (sharing the loads of x), more
 * rows one column (sharing its unpacked fields; R x NC accumulators must fit the registers). When
 * the R rows' int8 values outgrow the L1d, K runs in chunks of whole groups, each over a block of
 * up to 64 columns whose partial sums wait in `part`. perfbench ab against no chunks on a Zen 4
 * (32 KiB L1d), 1 thread: 11008 x 4096 at M = 16 and 128 took 5-23% less time (3 of 4 cells
 * flagged improvements), 4096 x 4096 unchanged; chunking already at half the L1d also split
 * K = 4096 (4 x 4.2 KiB) and cost it 9-18%. */
static inline __attribute__((always_inline)) void PB_UK(PB_DT, nbits_i8_rows)(
    const int BITS, const int R, const float *rows, int64_t xrow, int64_t nbp, int64_t xq_off, const uint8_t *bp,
    const T *sc, const void *zpv, int zp_mode, const T *bias, int64_t bs, int64_t kb, int64_t j0, int64_t j1, T *y,
    int64_t ldy, int wide) {
    const int64_t G = PB_NB_GROUP, row_group = G * bs + 2 * G * (int64_t)sizeof(float); /* a row's bytes a group */
    int64_t chunk = pb_l1d_bytes() / (R * row_group) * G;
    if (chunk < G) chunk = G;
    if (R == 1 || chunk >= kb) chunk = kb;
    for (int64_t jb = j0; jb < j1; jb += 64) {
        const int64_t je = jb + 64 < j1 ? jb + 64 : j1;
        float part[4][64], res[4];
        for (int64_t gb = 0; gb < kb; gb += chunk) {
            const int64_t ge = gb + chunk < kb ? gb + chunk : kb;
            int64_t j = jb;
/* tiles of RR rows x NCC columns while NCC columns are left, each tile's sums into part */
#define NB_TILES(RR, NCC)                                                                                          \
    for (; j + (NCC) <= je; j += (NCC)) {                                                                           \
        PB_UK(PB_DT, nbits_i8_tile)(BITS, RR, NCC, rows, xrow, nbp, xq_off, bp, sc, zpv, zp_mode, bs, kb, j, gb, ge, res); \
        for (int r = 0; r < (RR); r++)                                                                              \
            for (int c = 0; c < (NCC); c++) part[r][j + c - jb] = (gb ? part[r][j + c - jb] : 0.0f) + res[r * (NCC) + c]; \
    }
            if (R == 1 && PB_NB_NC1 == 4 && wide) NB_TILES(1, 4)
            if (R == 1) NB_TILES(1, 2)
            NB_TILES(R, 1)
#undef NB_TILES
        }
        for (int r = 0; r < R; r++)
            for (int64_t j = jb; j < je; j++) {
                float v = part[r][j - jb];
                if (bias != NULL) v += NB_F32(bias[j]);
                y[r * ldy + j] = T_FROM_F32(v);
            }
    }
}

#define PB_NB_RMAX 4 /* rows a tile: 4 accumulators, 4 int32 sums, a word and an x vector (AVX2's 16 registers too) */
static inline __attribute__((always_inline)) void PB_UK(PB_DT, nbits_i8_cols_bits)(
    const int BITS, const float *rows, int64_t xrow, int64_t nrows, int64_t nbp, int64_t xq_off, const uint8_t *bp,
    const T *sc, const void *zpv, int zp_mode, const T *bias, int64_t bs, int64_t kb, int64_t j0, int64_t j1, T *y,
    int64_t ldy, int wide) {
    int64_t r = 0;
#define NB_ROWS(RR) PB_UK(PB_DT, nbits_i8_rows)(BITS, RR, rows + r * xrow, xrow, nbp, xq_off, bp, sc, zpv, zp_mode, \
                                                bias, bs, kb, j0, j1, y + r * ldy, ldy, wide)
    for (; r + PB_NB_RMAX <= nrows; r += PB_NB_RMAX) NB_ROWS(PB_NB_RMAX);
    for (; r < nrows; r++) NB_ROWS(1);
#undef NB_ROWS
}

static void PB_UK(PB_DT, matmul_nbits_i8_cols)(const float *rows, int64_t xrow, int64_t nrows, int64_t nbp,
                                               int64_t xq_off, const uint8_t *bp, const void *scales, const void *zp,
                                               int zp_mode, const void *bias, int bits, int64_t block_size, int64_t kb,
                                               int64_t j0, int64_t j1, void *y, int64_t ldy, int wide) {
    const T *sc = (const T *)scales, *bi = (const T *)bias;
    T *yy = (T *)y;
#define NB_BITS(B) PB_UK(PB_DT, nbits_i8_cols_bits)(B, rows, xrow, nrows, nbp, xq_off, bp, sc, zp, zp_mode, bi, \
                                                    block_size, kb, j0, j1, yy, ldy, wide)
    switch (bits) {
        case 2: NB_BITS(2); break;
        case 4: NB_BITS(4); break;
        default: NB_BITS(8); break;
    }
#undef NB_BITS
}

/* accuracy 4: row i of A (K values of T) quantized per block as ORT's x86 int8 path does it
 * (ops/_nbits.py quantize_a_int8: f32 max |a| over the block's real values, scale max / 127,
 * q = a x (127 / max) rounded half to even, saturated), laid out at `row` (floats): the blocks'
 * int8 sums [0, nbp), their scales [nbp, 2 nbp) (zero past kb), then from xq_off the int8 values
 * per group of NB_G blocks, 4-byte word and bit field (the layout above; zero past k and in the
 * last group's lanes past kb). A block holding a NaN or an infinity gets a NaN scale, so the row
 * of Y is NaN (as in the reference, where an infinity's block gives inf x 0). */
static inline __attribute__((always_inline)) void PB_UK(PB_DT, nbits_quant_row)(
    const int BITS, const T *x, int64_t k, int64_t bs, int64_t kb, int64_t nbp, int64_t xq_off, float *row) {
    const int per = 8 / BITS;
    const int64_t G = PB_NB_GROUP, wpb = bs * BITS / 32, ngr = (kb + G - 1) / G;
    int8_t *xq = (int8_t *)(row + xq_off), t[256]; /* bs <= 256: the driver refuses more at accuracy 4 */
    float *sum = row, *sv = row + nbp;
    for (int64_t b = kb; b < nbp; b++) sum[b] = sv[b] = 0.0f;
    if (kb % G) memset(xq + (ngr - 1) * G * bs, 0, (size_t)(G * bs)); /* the last group: lanes past kb zero */
    for (int64_t blk = 0; blk < kb; blk++) {
        const T *xb = x + blk * bs;
        const int64_t n = k - blk * bs < bs ? k - blk * bs : bs;
        vf mx = vf_zero(), probe = vf_zero(), tail = vf_zero(); /* probe: v - v, 0 unless v is NaN or infinite */
        int64_t o = 0;
        for (; o + PB_LANES <= n; o += PB_LANES) {
            const vf v = T_LOAD(xb + o);
            mx = vf_max(vf_abs(v), mx);
            probe = vf_add(probe, vf_sub(v, v));
        }
        if (o < n) {
            tail = PB_UK(PB_DT, load_part)(xb + o, n - o, 0.0f);
            mx = vf_max(vf_abs(tail), mx);
            probe = vf_add(probe, vf_sub(tail, tail));
        }
        const float m = vf_hsum(probe) != 0.0f ? NAN : vf_hmax(mx);
        const vf inv = vf_set1(m != 0.0f ? 127.0f / m : 0.0f);
        for (o = 0; o + PB_LANES <= n; o += PB_LANES) vf_to_i8(vf_mul(T_LOAD(xb + o), inv), t + o);
        if (o < n) {
            vf_to_i8(vf_mul(tail, inv), t + o);
            o += PB_LANES;
        }
        memset(t + o, 0, (size_t)(bs - o));
        int32_t qs = 0; /* exact: |sum| <= 128 x 256 */
        int8_t *dst = xq + blk / G * wpb * per * 4 * G + blk % G * 4;
        for (int64_t w = 0; w < wpb; w++)
            for (int f = 0; f < per; f++)
                for (int b = 0; b < 4; b++) {
                    const int8_t q = t[(4 * w + b) * per + f];
                    dst[(w * per + f) * 4 * G + b] = q;
                    qs += q;
                }
        sum[blk] = (float)qs;
        sv[blk] = m / 127.0f;
    }
}

static void PB_UK(PB_DT, matmul_nbits_quant_rows)(const void *a, int64_t k, int64_t i0, int64_t i1, int bits,
                                                  int64_t block_size, int64_t kb, int64_t nbp, int64_t xq_off,
                                                  int64_t xrow, float *rows) {
    for (int64_t i = i0; i < i1; i++) {
        const T *x = (const T *)a + i * k;
        float *row = rows + i * xrow;
        switch (bits) {
            case 2: PB_UK(PB_DT, nbits_quant_row)(2, x, k, block_size, kb, nbp, xq_off, row); break;
            case 4: PB_UK(PB_DT, nbits_quant_row)(4, x, k, block_size, kb, nbp, xq_off, row); break;
            default: PB_UK(PB_DT, nbits_quant_row)(8, x, k, block_size, kb, nbp, xq_off, row); break;
        }
    }
}

#undef NB_F32
