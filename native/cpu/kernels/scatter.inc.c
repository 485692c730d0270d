/* ScatterND microkernel (per dtype): the reductions compute in f32 through the vf_* API, rounded
 * once per update; plain updates are copies. */
/* ---- ScatterND reductions ---- */
static void PB_UK(PB_DT, scatter_reduce)(void *dstv, const void *srcv, int64_t n, int32_t op) {
    T *dst = (T *)dstv;
    const T *src = (const T *)srcv;
    const int64_t L = PB_LANES, nv = n - n % L;
    const vf neg = vf_set1(-1.0f);
    int64_t i = 0;
    for (; i < nv; i += L) {
        vf d = T_LOAD(dst + i), s = T_LOAD(src + i), r;
        switch (op) {
        case PB_REDUCTION_ADD: r = vf_add(d, s); break;
        case PB_REDUCTION_MUL: r = vf_mul(d, s); break;
        case PB_REDUCTION_MAX: r = vf_max(d, s); break;
        default: r = vf_mul(neg, vf_max(vf_mul(neg, d), vf_mul(neg, s))); break; /* min = -max(-d, -s) */
        }
        T_STORE(dst + i, r);
    }
    if (i < n) {
        vf d = PB_UK(PB_DT, load_part)(dst + i, n - i, 0.0f), s = PB_UK(PB_DT, load_part)(src + i, n - i, 0.0f), r;
        switch (op) {
        case PB_REDUCTION_ADD: r = vf_add(d, s); break;
        case PB_REDUCTION_MUL: r = vf_mul(d, s); break;
        case PB_REDUCTION_MAX: r = vf_max(d, s); break;
        default: r = vf_mul(neg, vf_max(vf_mul(neg, d), vf_mul(neg, s))); break;
        }
        PB_UK(PB_DT, store_part)(dst + i, r, n - i);
    }
}

