/* ReduceMean microkernels (per dtype): row sums and column means. */
/* ---- ReduceMean ---- */
/* Sum of x[i0..i1): 8 f32 vector accumulators over blocks of 32 iterations (256 lanes' worth),
 * each block's sum added into a double: every f32 partial adds at most 32 values. */
static double PB_UK(PB_DT, sum)(const void *xv, int64_t i0, int64_t i1) {
    const T *x = (const T *)xv;
    const int64_t L = PB_LANES, step = 8 * L, block = 32 * step;
    double total = 0.0;
    int64_t i = i0;
    while (i1 - i >= step) {
        vf s0 = vf_zero(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0, s7 = s0;
        const int64_t end = i + ((i1 - i < block) ? (i1 - i) / step * step : block);
        for (; i < end; i += step) {
            s0 = vf_add(s0, T_LOAD(x + i));
            s1 = vf_add(s1, T_LOAD(x + i + L));
            s2 = vf_add(s2, T_LOAD(x + i + 2 * L));
            s3 = vf_add(s3, T_LOAD(x + i + 3 * L));
            s4 = vf_add(s4, T_LOAD(x + i + 4 * L));
            s5 = vf_add(s5, T_LOAD(x + i + 5 * L));
            s6 = vf_add(s6, T_LOAD(x + i + 6 * L));
            s7 = vf_add(s7, T_LOAD(x + i + 7 * L));
        }
        total += (double)vf_hsum(vf_add(vf_add(vf_add(s0, s1), vf_add(s2, s3)), vf_add(vf_add(s4, s5), vf_add(s6, s7))));
    }
    vf s = vf_zero();
    for (; i + L <= i1; i += L) s = vf_add(s, T_LOAD(x + i));
    if (i < i1) s = vf_add(s, PB_UK(PB_DT, load_part)(x + i, i1 - i, 0.0f));
    return total + (double)vf_hsum(s);
}

/* Column means of an (R, inner) slab for columns [j0, j1), 4 vectors of columns at a time; the
 * f32 accumulators are flushed into doubles every 64 rows. */
static void PB_UK(PB_DT, colmean)(const void *xv, void *yv, int64_t R, int64_t inner, int64_t j0, int64_t j1,
                                  double scale) {
    const T *x = (const T *)xv;
    T *y = (T *)yv;
    const int64_t L = PB_LANES, W = 4 * L, FLUSH = 64;
    for (int64_t j = j0; j < j1; j += W) {
        const int64_t w = (j1 - j < W) ? j1 - j : W;
        double acc[4 * PB_LANES];
        float part[4 * PB_LANES];
        for (int64_t k = 0; k < W; k++) acc[k] = 0.0;
        for (int64_t r0 = 0; r0 < R; r0 += FLUSH) {
            const int64_t r1 = (R - r0 < FLUSH) ? R : r0 + FLUSH;
            vf s0 = vf_zero(), s1 = s0, s2 = s0, s3 = s0;
            if (w == W) {
                for (int64_t r = r0; r < r1; r++) {
                    const T *row = x + r * inner + j;
                    s0 = vf_add(s0, T_LOAD(row));
                    s1 = vf_add(s1, T_LOAD(row + L));
                    s2 = vf_add(s2, T_LOAD(row + 2 * L));
                    s3 = vf_add(s3, T_LOAD(row + 3 * L));
                }
            } else {
                /* the last, narrower chunk: whole vectors, then one partial one */
                for (int64_t r = r0; r < r1; r++) {
                    const T *row = x + r * inner + j;
                    int64_t k = 0;
                    vf *acc4[4] = {&s0, &s1, &s2, &s3};
                    for (; k + L <= w; k += L) *acc4[k / L] = vf_add(*acc4[k / L], T_LOAD(row + k));
                    if (k < w) *acc4[k / L] = vf_add(*acc4[k / L], PB_UK(PB_DT, load_part)(row + k, w - k, 0.0f));
                }
            }
            vf_store_f32(part, s0);
            vf_store_f32(part + L, s1);
            vf_store_f32(part + 2 * L, s2);
            vf_store_f32(part + 3 * L, s3);
            for (int64_t k = 0; k < w; k++) acc[k] += (double)part[k];
        }
        for (int64_t k = 0; k < w; k++) part[k] = (float)(acc[k] * scale);
        int64_t k = 0;
        for (; k + L <= w; k += L) T_STORE(y + j + k, vf_load_f32(part + k));
        if (k < w) PB_UK(PB_DT, store_part)(y + j + k, vf_load_f32(part + k), w - k);
    }
}
