/* Partial (tail) loads and stores of n < PB_LANES elements of T, through a small buffer so
 * that every path handles tails with the same logic. Lanes past n read as `fill`. */
static inline vf PB_UK(PB_DT, load_part)(const T *p, int64_t n, float fill) {
    T buf[PB_LANES];
    T f = T_FROM_F32(fill);
    for (int i = 0; i < PB_LANES; i++) buf[i] = i < n ? p[i] : f;
    return T_LOAD(buf);
}
static inline void PB_UK(PB_DT, store_part)(T *p, vf v, int64_t n) {
    T buf[PB_LANES];
    T_STORE(buf, v);
    memcpy(p, buf, (size_t)n * sizeof(T));
}

/* Cast to and from f32, elements [i0, i1) */
static void PB_UK(PB_DT, cast_to_f32)(const void *src, void *dst, int64_t i0, int64_t i1) {
    const T *x = (const T *)src;
    float *y = (float *)dst;
    int64_t i = i0;
    for (; i + PB_LANES <= i1; i += PB_LANES) vf_store_f32(y + i, T_LOAD(x + i));
    for (; i < i1; i++) y[i] = T_TO_F32(x[i]);
}
static void PB_UK(PB_DT, cast_from_f32)(const void *src, void *dst, int64_t i0, int64_t i1) {
    const float *x = (const float *)src;
    T *y = (T *)dst;
    int64_t i = i0;
    for (; i + PB_LANES <= i1; i += PB_LANES) T_STORE_EXACT(y + i, vf_load_f32(x + i));
    for (; i < i1; i++) y[i] = T_FROM_F32(x[i]);
}
