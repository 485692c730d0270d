/* MatMulNBits microkernel (nbits.c drives it), instantiated per ISA path and dtype (of A, scales,
 * float zero points, bias and Y).
 *
 * One row of Y, columns [j0, j1), from the weight's bytes as stored: per block, each LANES-byte
 * chunk is loaded 8 / bits times, each time one bit field of every byte converted to f32 in
 * registers (vf_load_u8_field; never a dequantized copy of B) and multiplied with the row's x
 * values of that field (the driver lays x out so: field f of byte l is k = l * (8 / bits) + f).
 * A block's dot of x with its unsigned values q is scaled once: acc += scale * sum(x q), and its
 * zero point enters as scale * zp * sum(x), one scalar per block: sum_k x (q - zp) scale. */

static inline __attribute__((always_inline)) void PB_UK(PB_DT, nbits_cols_bits)(
    const int BITS, const float *xp, const float *xsum, const uint8_t *b, const T *sc, const void *zpv, int zp_mode,
    const T *bias, int64_t bs, int64_t kb, int64_t j0, int64_t j1, T *y) {
    const int per = 8 / BITS, mask = (1 << BITS) - 1;
    const int64_t bb = bs * BITS / 8;                      /* bytes per block (a power of two >= 4) */
    const int64_t cl = bb < PB_LANES ? bb : PB_LANES;      /* bytes per chunk */
    const int64_t nch = bb / cl;                           /* chunks per block */
    const int64_t xblk = nch * per * PB_LANES;             /* floats of xp per block */
    const int64_t zpb = (kb * BITS + 7) / 8;               /* packed zero-point bytes per column */
    const uint8_t *zq = (const uint8_t *)zpv;
    const T *zf = (const T *)zpv;
    const float dz = (float)(1 << (BITS - 1));
    for (int64_t j = j0; j < j1; j++) {
        const uint8_t *bj = b + j * kb * bb;
        vf acc = vf_zero();
        float corr = 0.0f;
        for (int64_t blk = 0; blk < kb; blk++) {
            const float s = T_TO_F32(sc[j * kb + blk]);
            const float z = zp_mode == 0   ? dz
                            : zp_mode == 1 ? (float)((zq[j * zpb + blk / per] >> (BITS * (blk % per))) & mask)
                                           : T_TO_F32(zf[j * kb + blk]);
            const float *xb = xp + blk * xblk;
            const uint8_t *qb = bj + blk * bb;
            vf t0 = vf_zero(), t1 = vf_zero();
            for (int64_t c = 0; c < nch; c++) {
                const uint8_t *q = qb + c * cl;
                uint8_t tmp[PB_LANES];
                if (cl < PB_LANES) { /* a block of fewer bytes than a vector: zero-padded (x is zero there) */
                    memset(tmp, 0, sizeof(tmp));
                    memcpy(tmp, q, (size_t)cl);
                    q = tmp;
                }
                const float *xc = xb + c * per * PB_LANES;
#pragma GCC unroll 4
                for (int f = 0; f < per; f += 2) {
                    t0 = vf_fmadd(vf_load_f32(xc + f * PB_LANES), vf_load_u8_field(q, BITS * f, mask), t0);
                    if (f + 1 < per)
                        t1 = vf_fmadd(vf_load_f32(xc + (f + 1) * PB_LANES), vf_load_u8_field(q, BITS * (f + 1), mask), t1);
                }
            }
            acc = vf_fmadd(vf_set1(s), vf_add(t0, t1), acc);
            corr += s * z * xsum[blk];
        }
        float v = vf_hsum(acc) - corr;
        if (bias != NULL) v += T_TO_F32(bias[j]);
        y[j] = T_FROM_F32(v);
    }
}

static void PB_UK(PB_DT, matmul_nbits_cols)(const float *xp, const float *xsum, const uint8_t *b, const void *scales,
                                            const void *zp, int zp_mode, const void *bias, int bits, int64_t block_size,
                                            int64_t kb, int64_t j0, int64_t j1, void *y) {
    const T *sc = (const T *)scales, *bi = (const T *)bias;
    T *yy = (T *)y;
    switch (bits) {
        case 2: PB_UK(PB_DT, nbits_cols_bits)(2, xp, xsum, b, sc, zp, zp_mode, bi, block_size, kb, j0, j1, yy); break;
        case 4: PB_UK(PB_DT, nbits_cols_bits)(4, xp, xsum, b, sc, zp, zp_mode, bi, block_size, kb, j0, j1, yy); break;
        default: PB_UK(PB_DT, nbits_cols_bits)(8, xp, xsum, b, sc, zp, zp_mode, bi, block_size, kb, j0, j1, yy); break;
    }
}
