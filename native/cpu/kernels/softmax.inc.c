/* Softmax over rows [r0, r1) of an (rows, n) matrix, computed in f32 in registers.
 *
 * Pass 1: row max (4 accumulators). Pass 2: e = exp(x - max) and its sum, e stored in a f32
 * "work" row. Pass 3: y = e * (1/sum), converted once to the output type.
 * The work row is y itself for f32; for f16/bf16 it is per-thread scratch, so each element is
 * exponentiated and rounded to the output type exactly once. If the scratch cannot be had
 * (PERFBENCH_SCRATCH_MAX_BYTES, or out of memory) 16-bit rows recompute exp(x - max) from x in
 * pass 3 instead. Tails go through load_part with fill -inf (exp -> ~0). */
static void PB_UK(PB_DT, softmax)(const void *xv, void *yv, int64_t r0, int64_t r1, int64_t n) {
    const int64_t L = PB_LANES;
    const int64_t nv = n - n % L, tail = n % L;
#if !T_IS_F32
    float *scratch = (float *)pb_scratch((size_t)n * sizeof(float));
#endif
    for (int64_t row = r0; row < r1; row++) {
        const T *x = (const T *)xv + row * n;
        T *y = (T *)yv + row * n;
#if T_IS_F32
        float *work = y;
#else
        float *work = scratch;
#endif
        /* pass 1: max */
        vf m0 = vf_set1(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
        int64_t i = 0;
        for (; i + 4 * L <= n; i += 4 * L) {
            m0 = vf_max(m0, T_LOAD(x + i));
            m1 = vf_max(m1, T_LOAD(x + i + L));
            m2 = vf_max(m2, T_LOAD(x + i + 2 * L));
            m3 = vf_max(m3, T_LOAD(x + i + 3 * L));
        }
        for (; i < nv; i += L) m0 = vf_max(m0, T_LOAD(x + i));
        vf xt = vf_zero();
        if (tail) {
            xt = PB_UK(PB_DT, load_part)(x + nv, tail, -INFINITY);
            m0 = vf_max(m0, xt);
        }
        const vf vmax = vf_set1(vf_hmax(vf_max(vf_max(m0, m1), vf_max(m2, m3))));

        /* pass 2: exponentials and their sum */
        /* one accumulator fed pairwise: with the exp constants this keeps every value in
         * registers on 16-register ISAs (a spilled accumulator serializes the loop) */
        vf s0 = vf_zero();
        if (work != NULL) {
            for (i = 0; i + 2 * L <= nv; i += 2 * L) {
                vf e0 = PB_VEXP(vf_sub(T_LOAD(x + i), vmax));
                vf e1 = PB_VEXP(vf_sub(T_LOAD(x + i + L), vmax));
                vf_store_f32(work + i, e0);
                vf_store_f32(work + i + L, e1);
                s0 = vf_add(s0, vf_add(e0, e1));
            }
            for (; i < nv; i += L) {
                vf e0 = PB_VEXP(vf_sub(T_LOAD(x + i), vmax));
                vf_store_f32(work + i, e0);
                s0 = vf_add(s0, e0);
            }
        } else {
            for (i = 0; i < nv; i += L) s0 = vf_add(s0, PB_VEXP(vf_sub(T_LOAD(x + i), vmax)));
        }
        vf et = vf_zero();
        if (tail) {
            et = PB_VEXP(vf_sub(xt, vmax));
            s0 = vf_add(s0, et);
        }
        const float sum = vf_hsum(s0);
        const vf inv = vf_set1(1.0f / sum);

        /* pass 3: scale, convert once */
        if (work != NULL) {
            for (i = 0; i < nv; i += L) T_STORE(y + i, vf_mul(vf_load_f32(work + i), inv));
        } else {
            for (i = 0; i < nv; i += L) T_STORE(y + i, vf_mul(PB_VEXP(vf_sub(T_LOAD(x + i), vmax)), inv));
        }
        if (tail) PB_UK(PB_DT, store_part)(y + nv, vf_mul(et, inv), tail);
    }
}
