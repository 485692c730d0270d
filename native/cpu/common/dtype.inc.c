/* Per-dtype helpers every family uses (included once per dtype by isa_body.inc.c, before the
 * families): partial (tail) loads and stores, the streaming store of T (T_STREAM, undefined
 * after the families) and the peel before aligned streaming stores. */
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


#define T_STREAM PB_CAT(pbe_stream_, PB_DT)

/* elements to store normally before y reaches the vector alignment streaming stores need */
static inline int64_t PB_UK(PB_DT, nt_peel)(const T *y, int64_t n) {
    const uintptr_t vb = (uintptr_t)(PB_LANES * sizeof(T));
    const int64_t k = (int64_t)(((vb - ((uintptr_t)y & (vb - 1))) & (vb - 1)) / sizeof(T));
    return k < n ? k : n;
}

