/* Gather microkernel (per dtype): whole rows copied, indices already checked. */
/* ---- Gather ---- */
static void PB_UK(PB_DT, gather)(const pb_gather_args *a, int64_t r0, int64_t r1, int32_t nt) {
    const int64_t n = a->n_indices, inner = a->inner, dim = a->axis_dim;
    const size_t row_bytes = (size_t)inner * sizeof(T);
    const T *data = (const T *)a->data;
    T *out = (T *)a->output + r0 * inner;
    const int wide = a->index_type == PB_INDEX_INT64;
    for (int64_t r = r0; r < r1; r++, out += inner) {
        const int64_t o = r / n, i = r % n;
        int64_t idx = wide ? ((const int64_t *)a->indices)[i] : (int64_t)((const int32_t *)a->indices)[i];
        if (idx < 0) idx += dim;
        const T *src = data + (o * dim + idx) * inner;
        if (inner == 1)
            *out = *src;
        else
            pb_mv_copy(out, src, row_bytes, nt);
    }
    pb_mv_fence(nt);
}

