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
