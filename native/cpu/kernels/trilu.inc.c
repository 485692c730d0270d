/* Trilu microkernel (per dtype) and the plain copy microkernel (per dtype) the copies use. */
#ifndef PB_TRILU_ONCE
#define PB_TRILU_ONCE
/* Trilu's kept columns of row i: [lo, hi) */
static inline void pb_mv_trilu_keep(const pb_trilu_args *a, int64_t i, int64_t *lo, int64_t *hi) {
    const int64_t c = a->cols;
    /* i + k may overflow int64 for absurd k: clamp k first */
    int64_t k = a->k < -c - a->rows ? -c - a->rows : (a->k > c + a->rows ? c + a->rows : a->k);
    int64_t d = i + k;
    if (a->upper) {
        *lo = d < 0 ? 0 : (d > c ? c : d);
        *hi = c;
    } else {
        *lo = 0;
        *hi = d + 1 < 0 ? 0 : (d + 1 > c ? c : d + 1);
    }
}
#endif

/* ---- Trilu ---- */
static void PB_UK(PB_DT, trilu)(const pb_trilu_args *a, int64_t r0, int64_t r1, int32_t nt) {
    const int64_t c = a->cols;
    const T *x = (const T *)a->x;
    T *y = (T *)a->y;
    const int in_place = a->x == a->y;
    for (int64_t r = r0; r < r1; r++) {
        int64_t lo, hi;
        pb_mv_trilu_keep(a, r % a->rows, &lo, &hi);
        T *yr = y + r * c;
        if (lo > 0) pb_mv_zero(yr, (size_t)lo * sizeof(T));
        if (!in_place && hi > lo) pb_mv_copy(yr + lo, x + r * c + lo, (size_t)(hi - lo) * sizeof(T), nt);
        if (hi < c) pb_mv_zero(yr + hi, (size_t)(c - hi) * sizeof(T));
    }
    pb_mv_fence(nt);
}

static void PB_UK(PB_DT, copy)(void *dst, const void *src, int64_t n, int32_t nt) {
    pb_mv_copy(dst, src, (size_t)n * sizeof(T), nt);
    pb_mv_fence(nt);
}
