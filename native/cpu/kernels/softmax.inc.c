/* Softmax over rows [r0, r1) of an (rows, n) matrix, computed in f32 in registers.
 * Pass 1: row max (4 accumulators). Pass 2: exp(x - max) and its sum (f32 output stores the
 * exponentials in y; 16-bit outputs do not, to round only once). Pass 3: scale by 1/sum
 * (f32: y in place; 16-bit: recompute exp from x, scale, convert once). Tails go through
 * load_part with fill -inf, whose exp is 0. */
static void PB_UK(PB_DT, softmax)(const void *xv, void *yv, int64_t r0, int64_t r1, int64_t n) {
    const int64_t L = PB_LANES;
    const int64_t nv = n - n % L, tail = n % L;
    for (int64_t row = r0; row < r1; row++) {
        const T *x = (const T *)xv + row * n;
        T *y = (T *)yv + row * n;

        vf m0 = vf_set1(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
        int64_t i = 0;
        for (; i + 4 * L <= n; i += 4 * L) {
            m0 = vf_max(m0, T_LOAD(x + i));
            m1 = vf_max(m1, T_LOAD(x + i + L));
            m2 = vf_max(m2, T_LOAD(x + i + 2 * L));
            m3 = vf_max(m3, T_LOAD(x + i + 3 * L));
        }
        for (; i < nv; i += L) m0 = vf_max(m0, T_LOAD(x + i));
        if (tail) m0 = vf_max(m0, PB_UK(PB_DT, load_part)(x + nv, tail, -INFINITY));
        const vf vmax = vf_set1(vf_hmax(vf_max(vf_max(m0, m1), vf_max(m2, m3))));

        vf s0 = vf_zero(), s1 = vf_zero();
        for (i = 0; i + 2 * L <= n; i += 2 * L) {
            vf e0 = PB_VEXP(vf_sub(T_LOAD(x + i), vmax));
            vf e1 = PB_VEXP(vf_sub(T_LOAD(x + i + L), vmax));
#if T_IS_F32
            vf_store_f32(y + i, e0);
            vf_store_f32(y + i + L, e1);
#endif
            s0 = vf_add(s0, e0);
            s1 = vf_add(s1, e1);
        }
        for (; i < nv; i += L) {
            vf e0 = PB_VEXP(vf_sub(T_LOAD(x + i), vmax));
#if T_IS_F32
            vf_store_f32(y + i, e0);
#endif
            s0 = vf_add(s0, e0);
        }
        if (tail) {
            vf e0 = PB_VEXP(vf_sub(PB_UK(PB_DT, load_part)(x + nv, tail, -INFINITY), vmax));
#if T_IS_F32
            PB_UK(PB_DT, store_part)(y + nv, e0, tail);
#endif
            s0 = vf_add(s0, e0);
        }
        const vf inv = vf_set1(1.0f / vf_hsum(vf_add(s0, s1)));

        for (i = 0; i < nv; i += L) {
#if T_IS_F32
            vf_store_f32(y + i, vf_mul(vf_load_f32(y + i), inv));
#else
            T_STORE(y + i, vf_mul(PB_VEXP(vf_sub(T_LOAD(x + i), vmax)), inv));
#endif
        }
        if (tail) {
#if T_IS_F32
            PB_UK(PB_DT, store_part)(y + nv, vf_mul(PB_UK(PB_DT, load_part)(y + nv, tail, 0.0f), inv), tail);
#else
            vf e0 = PB_VEXP(vf_sub(PB_UK(PB_DT, load_part)(x + nv, tail, -INFINITY), vmax));
            PB_UK(PB_DT, store_part)(y + nv, vf_mul(e0, inv), tail);
#endif
        }
    }
}
