/* MatMulNBits microkernel (nbits.c drives it), instantiated per ISA path and dtype (of A, scales,
 * float zero points, bias and Y).
 *
 * One row of Y, columns [j0, j1), from the weight's bytes as stored: per block, each LANES-byte
 * chunk is loaded 8 / bits times, each time one bit field of every byte converted to f32 in
 * registers (vf_load_u8_field; never a dequantized copy of B), its zero point subtracted, and
 * multiplied with the row's x values of that field (the driver lays x out so: field f of byte l is
 * k = l * (8 / bits) + f). A block's sum is scaled once: acc += scale * sum(x (q - zp)). */

static inline __attribute__((always_inline)) void PB_UK(PB_DT, nbits_cols_bits)(
    const int BITS, const float *xp, const uint8_t *b, const T *sc, const void *zpv, int zp_mode,
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
    /* a block's zero point of column jj as f32 */
#define PB_NB_ZP(jj, blk)                                                                                   \
    (zp_mode == 0   ? dz                                                                                     \
     : zp_mode == 1 ? (float)((zq[(jj) * zpb + (blk) / per] >> (BITS * ((blk) % per))) & mask)              \
                    : T_TO_F32(zf[(jj) * kb + (blk)]))
    /* two columns at a time: each x vector loaded once for both. The zero point is subtracted from
     * the unpacked values (exact in f32) before the product: folded in afterwards as scale x zp x
     * (the block's x sum), the cancellation against sum(x q) cost up to 3x ORT's error at M = 16,
     * K = 4096, past the numerics gate's tolerance */
    int64_t j = j0;
    for (; j + 2 <= j1; j += 2) {
        const uint8_t *b0 = b + j * kb * bb, *b1 = b0 + kb * bb;
        const T *s0 = sc + j * kb, *s1 = s0 + kb;
        vf acc0 = vf_zero(), acc1 = vf_zero();
        for (int64_t blk = 0; blk < kb; blk++) {
            const float *xb = xp + blk * xblk;
            const vf z0 = vf_set1(PB_NB_ZP(j, blk)), z1 = vf_set1(PB_NB_ZP(j + 1, blk));
            vf t0 = vf_zero(), t1 = vf_zero();
            for (int64_t c = 0; c < nch; c++) {
                const uint8_t *q0 = b0 + blk * bb + c * cl, *q1 = b1 + blk * bb + c * cl;
                uint8_t tmp0[PB_LANES], tmp1[PB_LANES];
                if (cl < PB_LANES) { /* a block of fewer bytes than a vector: zero-padded (x is zero there) */
                    memset(tmp0, 0, sizeof(tmp0));
                    memset(tmp1, 0, sizeof(tmp1));
                    memcpy(tmp0, q0, (size_t)cl);
                    memcpy(tmp1, q1, (size_t)cl);
                    q0 = tmp0;
                    q1 = tmp1;
                }
                const float *xc = xb + c * per * PB_LANES;
#pragma GCC unroll 4
                for (int f = 0; f < per; f++) {
                    const vf xv = vf_load_f32(xc + f * PB_LANES);
                    t0 = vf_fmadd(xv, vf_sub(vf_load_u8_field(q0, BITS * f, mask), z0), t0);
                    t1 = vf_fmadd(xv, vf_sub(vf_load_u8_field(q1, BITS * f, mask), z1), t1);
                }
            }
            acc0 = vf_fmadd(vf_set1(T_TO_F32(s0[blk])), t0, acc0);
            acc1 = vf_fmadd(vf_set1(T_TO_F32(s1[blk])), t1, acc1);
        }
        float v0 = vf_hsum(acc0), v1 = vf_hsum(acc1);
        if (bias != NULL) {
            v0 += T_TO_F32(bias[j]);
            v1 += T_TO_F32(bias[j + 1]);
        }
        y[j] = T_FROM_F32(v0);
        y[j + 1] = T_FROM_F32(v1);
    }
    for (; j < j1; j++) {
        const uint8_t *bj = b + j * kb * bb;
        vf acc = vf_zero();
        for (int64_t blk = 0; blk < kb; blk++) {
            const float *xb = xp + blk * xblk;
            const vf zv = vf_set1(PB_NB_ZP(j, blk));
            vf t0 = vf_zero();
            for (int64_t c = 0; c < nch; c++) {
                const uint8_t *q = bj + blk * bb + c * cl;
                uint8_t tmp[PB_LANES];
                if (cl < PB_LANES) {
                    memset(tmp, 0, sizeof(tmp));
                    memcpy(tmp, q, (size_t)cl);
                    q = tmp;
                }
                const float *xc = xb + c * per * PB_LANES;
#pragma GCC unroll 4
                for (int f = 0; f < per; f++)
                    t0 = vf_fmadd(vf_load_f32(xc + f * PB_LANES), vf_sub(vf_load_u8_field(q, BITS * f, mask), zv), t0);
            }
            acc = vf_fmadd(vf_set1(T_TO_F32(sc[j * kb + blk])), t0, acc);
        }
        float v = vf_hsum(acc);
        if (bias != NULL) v += T_TO_F32(bias[j]);
        y[j] = T_FROM_F32(v);
    }
#undef PB_NB_ZP
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
