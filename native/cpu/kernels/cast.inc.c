/* Cast microkernels (per dtype): to and from f32. */
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
