/* MatMulNBits microkernel (nbits.c drives it), instantiated per ISA path and dtype (of A, scales,
 * float zero points, bias and Y).
 *
 * One row of Y, columns [j0, j1), from the weight's bytes as stored: per block, each LANES-byte
 * chunk is loaded 8 / bits times, each time one bit field of every byte converted to f32 in
 * registers (vf_load_u8_field; never a dequantized copy of B), its zero point subtracted, and
 * multiplied with the row's x values of that field (the driver lays x out so: field f of byte l is
 * k = l * (8 / bits) + f). A block's sum is scaled once: acc += scale * sum(x (q - zp)). */

/* Columns [j, j + NC) of Y's row (NC = 1 or 2: each x vector loaded once for the NC columns). The
 * zero point is subtracted from the unpacked values (exact in f32) before the product: folded in
 * afterwards as scale x zp x (the block's x sum), the cancellation against sum(x q) cost up to 3x
 * ORT's error at M = 16, K = 4096, past the numerics gate's tolerance. */
static inline __attribute__((always_inline)) void PB_UK(PB_DT, nbits_cols_n)(
    const int BITS, const int NC, const float *xp, const uint8_t *b, const T *sc, const void *zpv, int zp_mode,
    const T *bias, int64_t bs, int64_t kb, int64_t j, T *y) {
    const int per = 8 / BITS, mask = (1 << BITS) - 1;
    const int64_t bb = bs * BITS / 8;                      /* bytes per block (a power of two >= 4) */
    const int64_t cl = bb < PB_LANES ? bb : PB_LANES;      /* bytes per chunk */
    const int64_t nch = bb / cl;                           /* chunks per block */
    const int64_t xblk = nch * per * PB_LANES;             /* floats of xp per block */
    const int64_t zpb = (kb * BITS + 7) / 8;               /* packed zero-point bytes per column */
    vf acc[2] = {vf_zero(), vf_zero()};
    for (int64_t blk = 0; blk < kb; blk++) {
        const float *xb = xp + blk * xblk;
        vf z[2], t[2] = {vf_zero(), vf_zero()};
        for (int u = 0; u < NC; u++) {
            const int64_t jj = j + u;
            z[u] = vf_set1(zp_mode == 0   ? (float)(1 << (BITS - 1))
                           : zp_mode == 1 ? (float)((((const uint8_t *)zpv)[jj * zpb + blk / per] >> (BITS * (blk % per))) & mask)
                                          : T_TO_F32(((const T *)zpv)[jj * kb + blk]));
        }
        for (int64_t c = 0; c < nch; c++) {
            const uint8_t *q[2];
            uint8_t tmp[2][PB_LANES];
            for (int u = 0; u < NC; u++) {
                q[u] = b + ((j + u) * kb + blk) * bb + c * cl;
                if (cl < PB_LANES) { /* a block of fewer bytes than a vector: zero-padded (x is zero there) */
                    memset(tmp[u], 0, sizeof(tmp[u]));
                    memcpy(tmp[u], q[u], (size_t)cl);
                    q[u] = tmp[u];
                }
            }
            const float *xc = xb + c * per * PB_LANES;
#pragma GCC unroll 4
            for (int f = 0; f < per; f++) {
                const vf xv = vf_load_f32(xc + f * PB_LANES);
                for (int u = 0; u < NC; u++)
                    t[u] = vf_fmadd(xv, vf_sub(vf_load_u8_field(q[u], BITS * f, mask), z[u]), t[u]);
            }
        }
        for (int u = 0; u < NC; u++) acc[u] = vf_fmadd(vf_set1(T_TO_F32(sc[(j + u) * kb + blk])), t[u], acc[u]);
    }
    for (int u = 0; u < NC; u++) {
        float v = vf_hsum(acc[u]);
        if (bias != NULL) v += T_TO_F32(bias[j + u]);
        y[j + u] = T_FROM_F32(v);
    }
}

static inline __attribute__((always_inline)) void PB_UK(PB_DT, nbits_cols_bits)(
    const int BITS, const float *xp, const uint8_t *b, const T *sc, const void *zpv, int zp_mode,
    const T *bias, int64_t bs, int64_t kb, int64_t j0, int64_t j1, T *y) {
    int64_t j = j0;
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

/* ---- accuracy_level 4: A quantized per block to int8 (the driver), integer dot products ----
 *
 * The driver lays each row of A out as int8 per unit of U = 4 x LANES weight bytes (a column's
 * bytes run through its blocks back to back, so byte g of the column holds k = g x per + f in field
 * f): unit u, field f is U int8 values, byte l the k of byte u x U + l, field f (zero past K); and
 * per block its int8 sum and scale (floats; zero past the last block, to a multiple of LANES).
 *
 * A column runs in groups of LANES blocks. A group's units give int32 lanes of u8 field x int8 dot
 * products (vi_dot), VG lanes a block (a block's units summed first when it spans several); a tree
 * of pair sums (vi_pair_sums) turns the group's VG vectors into one whose lane g is block g's
 * integer sum I. Then, with the blocks as lanes (scales and zero points are contiguous per column):
 *   acc += scale_w x scale_a x (I - zp x sum_a),
 * I - zp x sum_a exact in f32 (|I| and |zp x sum_a| <= 255 x 128 x 256 < 2^24, blocks of at most
 * 256 at accuracy 4): the zero point costs no rounding.
 * Scaling per unit instead (each block's scale and zero point spread over its lanes) spent more
 * than the dot products: 2.7x ORT's time at 1 x 4096 x 4096, block 32, on a Zen 4. */
#ifndef PB_NB_PF
#define PB_NB_PF 2048
#endif
#define PB_NB_PREFETCH(p) __builtin_prefetch((const char *)(p) + PB_NB_PF, 0, 0)
/* One group of LANES blocks of R rows x NC columns (row r, column c at slot r x NC + c): adds to
 * acc[slot]. A unit's weight bytes are loaded and each field masked out once for the R rows. */
static inline __attribute__((always_inline)) void PB_UK(PB_DT, nbits_i8_group)(
    const int BITS, const int R, const int NC, const int VG, const float *rows, int64_t xrow,
    int64_t nbp, int64_t xq_off, const uint8_t *b, const T *sc, const void *zpv, int zp_mode, int64_t bs, int64_t kb,
    int64_t j, int64_t g0, vf *acc) {
    const int per = 8 / BITS, mask = (1 << BITS) - 1;
    const int64_t U = 4 * PB_LANES, bb = bs * BITS / 8, cb = kb * bb; /* bytes per block, per column */
    const int64_t upv = VG < PB_LANES || bb <= U ? 1 : bb / U;       /* units per vector */
    const int64_t zpb = (kb * BITS + 7) / 8;
    const int64_t ub0 = g0 * bb; /* the group's first byte */
    vi lvl[4][5];
#pragma GCC unroll 16
    for (int v = 0; v < VG; v++) {
        vi I[4] = {vi_zero(), vi_zero(), vi_zero(), vi_zero()};
        for (int64_t uu = 0; uu < upv; uu++) {
            const int64_t ub = ub0 + ((int64_t)v * upv + uu) * U; /* the unit's first byte in the column */
            vi w[2];
            for (int c = 0; c < NC; c++) {
                const uint8_t *src = b + (j + c) * cb + ub;
                w[c] = vi_load(src);
                PB_NB_PREFETCH(src);
            }
            const int64_t xu = xq_off * 4 + (g0 * bb / U + (int64_t)v * upv + uu) * per * U; /* bytes from a row */
#pragma GCC unroll 4
            for (int f = 0; f < per; f++) {
                vi q[2];
                for (int c = 0; c < NC; c++) q[c] = BITS == 8 ? w[c] : vi_u8_field(w[c], BITS * f, mask);
                for (int r = 0; r < R; r++) {
                    const vi xv = vi_load((const int8_t *)(rows + r * xrow) + xu + f * U);
                    for (int c = 0; c < NC; c++)
                        I[r * NC + c] = BITS == 8 ? vi_dot_u8(I[r * NC + c], q[c], xv) : vi_dot(I[r * NC + c], q[c], xv);
                }
            }
        }
        for (int sl = 0; sl < R * NC; sl++) { /* binary-counter merge: lvl[l] holds 2^l vectors' pair sums */
            vi cur = I[sl];
            int l = 0;
            for (int idx = v; idx & 1; idx >>= 1, l++) cur = vi_pair_sums(lvl[sl][l], cur);
            lvl[sl][l] = cur;
        }
    }
    int top = 0;
    while ((1 << top) < VG) top++;
    for (int c = 0; c < NC; c++) {
        const int64_t jj = j + c;
        const vf sw = T_LOAD(sc + jj * kb + g0);
        const vf zp = zp_mode == 0 ? vf_set1((float)(1 << (BITS - 1)))
                      : zp_mode == 1 ? vf_load_u_fields((const uint8_t *)zpv + jj * zpb + g0 * BITS / 8, BITS)
                                     : T_LOAD((const T *)zpv + jj * kb + g0);
        for (int r = 0; r < R; r++) {
            const float *row = rows + r * xrow;
            const vf t = vf_fnmadd(zp, vf_load_f32(row + g0), vi_to_vf(lvl[r * NC + c][top]));
            acc[r * NC + c] = vf_fmadd(t, vf_mul(vf_load_f32(row + nbp + g0), sw), acc[r * NC + c]);
        }
    }
}

/* The last blocks of column jj from block g0 on (fewer than LANES), one row: not unrolled (a
 * compile-time copy of the group for them, and tiles of 2 rows besides, the library took 13 min 54 s
 * to build instead of 2 min 29 s on this 2-core host). Each vector's int32
 * lanes are stored and summed per block in scalars; the blocks' terms are as in the group. */
static float PB_UK(PB_DT, nbits_i8_tail)(int bits, const float *row, int64_t nbp, int64_t xq_off, const uint8_t *b,
                                         const T *sc, const void *zpv, int zp_mode, int64_t bs, int64_t kb, int64_t jj,
                                         int64_t g0) {
    const int per = 8 / bits, mask = (1 << bits) - 1;
    const int64_t U = 4 * PB_LANES, bb = bs * bits / 8, cb = kb * bb, zpb = (kb * bits + 7) / 8;
    const int64_t lpb = bb / 4, vg = lpb < PB_LANES ? lpb : PB_LANES, upv = bb > U ? bb / U : 1;
    const int8_t *xq = (const int8_t *)(row + xq_off);
    int32_t bsum[PB_LANES] = {0}, lanes[PB_LANES];
    for (int64_t ub = g0 * bb; ub < cb; ub += U) { /* unit by unit to the column's end */
        uint8_t wt[4 * PB_LANES] = {0};
        memcpy(wt, b + jj * cb + ub, (size_t)(cb - ub < U ? cb - ub : U));
        const vi w = vi_load(wt);
        vi I = vi_zero();
        const int8_t *xu = xq + (ub / U) * per * U;
        for (int f = 0; f < per; f++)
            I = bits == 8 ? vi_dot_u8(I, w, vi_load(xu + f * U)) : vi_dot(I, vi_u8_field(w, bits * f, mask), vi_load(xu + f * U));
        vi_store(lanes, I);
        const int64_t v = (ub - g0 * bb) / U / upv; /* the vector of the group this unit adds to */
        for (int l = 0; l < PB_LANES; l++) bsum[(v * PB_LANES + l) / vg] += lanes[l];
    }
    float res = 0.0f;
    for (int64_t blk = g0; blk < kb; blk++) {
        const float zp = zp_mode == 0   ? (float)(1 << (bits - 1))
                         : zp_mode == 1 ? (float)((((const uint8_t *)zpv)[jj * zpb + blk / per] >> (bits * (blk % per))) & mask)
                                        : T_TO_F32(((const T *)zpv)[jj * kb + blk]);
        const float t = (float)bsum[blk - g0] - zp * row[blk]; /* exact, as in the group */
        res += t * (row[nbp + blk] * T_TO_F32(sc[jj * kb + blk]));
    }
    return res;
}

/* R rows x NC columns at j of Y (ldy elements a row) */
static inline __attribute__((always_inline)) void PB_UK(PB_DT, nbits_i8_tile)(
    const int BITS, const int R, const int NC, const int VG, const float *rows, int64_t xrow, int64_t nbp,
    int64_t xq_off, const uint8_t *b, const T *sc, const void *zpv, int zp_mode, const T *bias, int64_t bs, int64_t kb,
    int64_t j, T *y, int64_t ldy) {
    vf acc[4] = {vf_zero(), vf_zero(), vf_zero(), vf_zero()};
    int64_t g0 = 0;
    for (; g0 + PB_LANES <= kb; g0 += PB_LANES)
        PB_UK(PB_DT, nbits_i8_group)(BITS, R, NC, VG, rows, xrow, nbp, xq_off, b, sc, zpv, zp_mode, bs, kb, j, g0, acc);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < NC; c++) {
            float v = vf_hsum(acc[r * NC + c]);
            if (g0 < kb) v += PB_UK(PB_DT, nbits_i8_tail)(BITS, rows + r * xrow, nbp, xq_off, b, sc, zpv, zp_mode, bs, kb, j + c, g0);
            if (bias != NULL) v += T_TO_F32(bias[j + c]);
            y[r * ldy + j + c] = T_FROM_F32(v);
        }
}

/* Columns [j0, j1) of R rows: one row takes two columns at a time (sharing the loads of x), more
 * rows one column (sharing its unpacked fields; R x NC accumulators and their merge trees must fit
 * the registers) */
static inline __attribute__((always_inline)) void PB_UK(PB_DT, nbits_i8_rows)(
    const int BITS, const int R, const int VG, const float *rows, int64_t xrow, int64_t nbp, int64_t xq_off,
    const uint8_t *b, const T *sc, const void *zpv, int zp_mode, const T *bias, int64_t bs, int64_t kb, int64_t j0,
    int64_t j1, T *y, int64_t ldy) {
    int64_t j = j0;
    if (R == 1)
        for (; j + 2 <= j1; j += 2)
            PB_UK(PB_DT, nbits_i8_tile)(BITS, 1, 2, VG, rows, xrow, nbp, xq_off, b, sc, zpv, zp_mode, bias, bs, kb, j, y, ldy);
    for (; j < j1; j++)
        PB_UK(PB_DT, nbits_i8_tile)(BITS, R, 1, VG, rows, xrow, nbp, xq_off, b, sc, zpv, zp_mode, bias, bs, kb, j, y, ldy);
}

#define PB_NB_RMAX (PB_LANES >= 16 ? 4 : 2) /* rows a tile: 32 vector registers on AVX-512, 16 on AVX2 */
static inline __attribute__((always_inline)) void PB_UK(PB_DT, nbits_i8_cols_vg)(
    const int BITS, const int VG, const float *rows, int64_t xrow, int64_t nrows, int64_t nbp, int64_t xq_off,
    const uint8_t *b, const T *sc, const void *zpv, int zp_mode, const T *bias, int64_t bs, int64_t kb, int64_t j0,
    int64_t j1, T *y, int64_t ldy) {
    int64_t r = 0;
#define NB_ROWS(RR) PB_UK(PB_DT, nbits_i8_rows)(BITS, RR, VG, rows + r * xrow, xrow, nbp, xq_off, b, sc, zpv, zp_mode, \
                                                bias, bs, kb, j0, j1, y + r * ldy, ldy)
    for (; r + PB_NB_RMAX <= nrows; r += PB_NB_RMAX) NB_ROWS(PB_NB_RMAX);
    for (; r < nrows; r++) NB_ROWS(1); /* a tile of 2 rows on AVX-512 too: more build time for 2 or 3 rows */
#undef NB_ROWS
}

/* VG = lanes a block takes in one vector: min(block bytes / 4, LANES), a power of two */
static inline __attribute__((always_inline)) void PB_UK(PB_DT, nbits_i8_cols_bits)(
    const int BITS, const float *rows, int64_t xrow, int64_t nrows, int64_t nbp, int64_t xq_off, const uint8_t *b,
    const T *sc, const void *zpv, int zp_mode, const T *bias, int64_t bs, int64_t kb, int64_t j0, int64_t j1, T *y,
    int64_t ldy) {
    const int64_t lpb = bs * BITS / 32;
    const int vg = lpb < PB_LANES ? (int)lpb : PB_LANES;
#define NB_VG(V) PB_UK(PB_DT, nbits_i8_cols_vg)(BITS, V, rows, xrow, nrows, nbp, xq_off, b, sc, zpv, zp_mode, bias, bs, \
                                                kb, j0, j1, y, ldy)
    switch (vg) {
        case 1: NB_VG(1); break;
        case 2: NB_VG(2); break;
        case 4: NB_VG(4); break;
#if PB_LANES >= 8
        case 8: NB_VG(8); break;
#endif
#if PB_LANES >= 16
        case 16: NB_VG(16); break;
#endif
        default: break;
    }
#undef NB_VG
}

static void PB_UK(PB_DT, matmul_nbits_i8_cols)(const float *rows, int64_t xrow, int64_t nrows, int64_t nbp,
                                               int64_t xq_off, const uint8_t *b, const void *scales, const void *zp,
                                               int zp_mode, const void *bias, int bits, int64_t block_size, int64_t kb,
                                               int64_t j0, int64_t j1, void *y, int64_t ldy) {
    const T *sc = (const T *)scales, *bi = (const T *)bias;
    T *yy = (T *)y;
#define NB_BITS(B) PB_UK(PB_DT, nbits_i8_cols_bits)(B, rows, xrow, nrows, nbp, xq_off, b, sc, zp, zp_mode, bi, \
                                                    block_size, kb, j0, j1, yy, ldy)
    switch (bits) {
        case 2: NB_BITS(2); break;
        case 4: NB_BITS(4); break;
        default: NB_BITS(8); break;
    }
#undef NB_BITS
}
