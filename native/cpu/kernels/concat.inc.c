/* Concat microkernel (per dtype). */
/* ---- Concat ---- */
static void PB_UK(PB_DT, concat)(const pb_concat_args *a, const int64_t *offsets, int64_t e0, int64_t e1, int32_t nt) {
    const int64_t row = offsets[a->n_inputs];
    T *out = (T *)a->output;
    int64_t e = e0;
    int64_t o = e / row, w = e % row;
    int j = 0;
    while (j + 1 < a->n_inputs && offsets[j + 1] <= w) j++;
    while (e < e1) {
        const int64_t piece = offsets[j + 1] - offsets[j]; /* extents[j] * inner */
        int64_t take = offsets[j + 1] - w;
        if (take > e1 - e) take = e1 - e;
        if (take > 0) {
            const T *src = (const T *)a->inputs[j] + o * piece + (w - offsets[j]);
            pb_mv_copy(out + e, src, (size_t)take * sizeof(T), nt);
        }
        e += take;
        w += take;
        if (w >= row) {
            w = 0;
            o++;
            j = 0;
        }
        while (j + 1 < a->n_inputs && offsets[j + 1] <= w) j++; /* past this piece and empty ones */
    }
    pb_mv_fence(nt);
}

