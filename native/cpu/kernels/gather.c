/* Gather along one axis: every index checked in range before anything is written; output rows
 * over the pool.
 *
 * Every argument is checked before anything is written (shapes, overflow, pointers, overlap):
 * a bad argument returns a status with a message, never a read or write out of bounds. */
#include <stdint.h>
#include <string.h>

#include "../internal.h"

/* ---- Gather ---- */
typedef struct {
    pb_mv_gather_ukernel uk;
    const pb_gather_args *a;
    int32_t nt;
} gather_ctx;

static void gather_range(void *ctx, int64_t r0, int64_t r1) {
    gather_ctx *c = (gather_ctx *)ctx;
    c->uk(c->a, r0, r1, c->nt);
}

int pb_gather(const void *args) {
    const char *k = "gather";
    CHECK(pb_check_args(args, k));
    const pb_gather_args *a = (const pb_gather_args *)args;
    CHECK(pb_check_exec(&a->exec, k));
    CHECK(pb_check_dtype(a->dtype, k));
    if (a->index_type != PB_INDEX_INT64 && a->index_type != PB_INDEX_INT32)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: index_type=%d, expected %d (int64) or %d (int32)", k,
                       (int)a->index_type, PB_INDEX_INT64, PB_INDEX_INT32);
    if (a->outer < 0 || a->axis_dim < 0 || a->inner < 0 || a->n_indices < 0)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: outer=%lld axis_dim=%lld inner=%lld n_indices=%lld must be >= 0", k,
                       (long long)a->outer, (long long)a->axis_dim, (long long)a->inner, (long long)a->n_indices);
    int64_t data_n, rows, out_n;
    if (!pb_mul_ok(a->outer, a->axis_dim, &data_n) || !pb_mul_ok(data_n, a->inner, &data_n) ||
        !pb_mul_ok(a->outer, a->n_indices, &rows) || !pb_mul_ok(rows, a->inner, &out_n))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: tensor sizes overflow", k);
    if (a->n_indices > 0 && a->indices == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: indices is NULL", k);
    /* every index is checked even when nothing would be copied: a bad index is a bad node */
    const int wide = a->index_type == PB_INDEX_INT64;
    for (int64_t i = 0; i < a->n_indices; i++) {
        int64_t v = wide ? ((const int64_t *)a->indices)[i] : (int64_t)((const int32_t *)a->indices)[i];
        if (v < -a->axis_dim || v >= a->axis_dim)
            return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: indices[%lld] = %lld is outside [-%lld, %lld) (axis of size %lld)",
                           k, (long long)i, (long long)v, (long long)a->axis_dim, (long long)a->axis_dim,
                           (long long)a->axis_dim);
    }
    if (out_n == 0) return PB_OK;
    if (a->data == NULL || a->output == NULL)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: data and output must not be NULL", k);
    const size_t es = pb_dtype_size(a->dtype);
    const size_t ib = (size_t)a->n_indices * (wide ? 8 : 4);
    if (pb_overlap(a->output, (size_t)out_n * es, a->data, (size_t)data_n * es) ||
        pb_overlap(a->output, (size_t)out_n * es, a->indices, ib))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: output overlaps data or indices", k);
    gather_ctx c = {pb_active_isa()->gather[pb_dtype_index(a->dtype)], a, pb_stream_worth(2 * out_n * (int64_t)es)};
    return pb_parallel_for(pb_threads_for(a->exec.num_threads, 2 * out_n * (int64_t)es, PB_GRAIN_MOVE_BYTES), rows, gather_range, &c);
}
