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
/* n < PB_LANES/2 elements, each repeated twice (lanes past 2n are 0) */
static inline vf PB_UK(PB_DT, load_dup_part)(const T *p, int64_t n) {
    T buf[PB_LANES / 2 > 0 ? PB_LANES / 2 : 1];
    T z = T_FROM_F32(0.0f);
    for (int i = 0; i < PB_LANES / 2; i++) buf[i] = i < n ? p[i] : z;
    return T_LOAD_DUP(buf);
}
