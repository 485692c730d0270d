/* ScatterND (none/add/mul/max/min): data copied to the output unless in place, every index
 * checked, then the update slices written (reductions in index order on one thread).
 *
 * Every argument is checked before anything is written (shapes, overflow, pointers, overlap):
 * a bad argument returns a status with a message, never a read or write out of bounds. */
#include <stdint.h>
#include <string.h>

#include "../internal.h"

/* ---- ScatterND ---- */
typedef struct {
    const pb_scatter_nd_args *a;
    int64_t strides[PB_MOVEMENT_MAX_RANK]; /* element strides of the first k axes */
    int64_t slice;
    size_t es;
} scatter_ctx;

static int64_t scatter_offset(const scatter_ctx *c, int64_t u) {
    const int64_t *ix = c->a->indices + u * c->a->k;
    int64_t off = 0;
    for (int d = 0; d < c->a->k; d++) {
        int64_t v = ix[d];
        if (v < 0) v += c->a->shape[d];
        off += v * c->strides[d];
    }
    return off;
}

static void scatter_range(void *ctx, int64_t u0, int64_t u1) {
    scatter_ctx *c = (scatter_ctx *)ctx;
    char *out = (char *)c->a->output;
    const char *upd = (const char *)c->a->updates;
    for (int64_t u = u0; u < u1; u++)
        memcpy(out + (size_t)scatter_offset(c, u) * c->es, upd + (size_t)(u * c->slice) * c->es, (size_t)c->slice * c->es);
}

int pb_scatter_nd(const void *args) {
    const char *k = "scatter_nd";
    CHECK(pb_check_args(args, k));
    const pb_scatter_nd_args *a = (const pb_scatter_nd_args *)args;
    CHECK(pb_check_exec(&a->exec, k));
    CHECK(pb_check_dtype(a->dtype, k));
    if (a->reduction < PB_REDUCTION_NONE || a->reduction > PB_REDUCTION_MIN)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: reduction=%d, expected 0 (none), 1 (add), 2 (mul), 3 (max) or 4 (min)",
                       k, (int)a->reduction);
    if (a->rank < 1 || a->rank > PB_MOVEMENT_MAX_RANK)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: rank=%d, expected 1..%d", k, (int)a->rank, PB_MOVEMENT_MAX_RANK);
    if (a->k < 1 || a->k > a->rank)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: k=%d (index depth), expected 1..rank=%d", k, (int)a->k, (int)a->rank);
    if (a->n_updates < 0) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: n_updates=%lld must be >= 0", k, (long long)a->n_updates);
    scatter_ctx c;
    memset(&c, 0, sizeof c);
    c.a = a;
    c.es = pb_dtype_size(a->dtype);
    int64_t total = 1, slice = 1, upd_n, idx_n;
    for (int d = 0; d < a->rank; d++) {
        if (a->shape[d] < 0)
            return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: shape[%d]=%lld must be >= 0", k, d, (long long)a->shape[d]);
        if (!pb_mul_ok(total, a->shape[d], &total)) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: tensor sizes overflow", k);
        /* the slice and the strides below are products of some axes only: behind a zero-size axis
         * total stays 0 while they need not, so each product is checked on its own */
        if (d >= a->k && !pb_mul_ok(slice, a->shape[d], &slice))
            return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: tensor sizes overflow (the update slice, axes %d..%d)", k,
                           (int)a->k, (int)a->rank - 1);
    }
    if (!pb_mul_ok(a->n_updates, slice, &upd_n) || !pb_mul_ok(a->n_updates, a->k, &idx_n))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: tensor sizes overflow", k);
    c.slice = slice;
    c.strides[a->k - 1] = slice;
    for (int d = a->k - 2; d >= 0; d--)
        if (!pb_mul_ok(c.strides[d + 1], a->shape[d + 1], &c.strides[d]))
            return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: tensor sizes overflow (the stride of index axis %d)", k, d);
    if (a->n_updates > 0 && a->indices == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: indices is NULL", k);
    for (int64_t u = 0; u < a->n_updates; u++) {
        for (int d = 0; d < a->k; d++) {
            int64_t v = a->indices[u * a->k + d];
            if (v < -a->shape[d] || v >= a->shape[d])
                return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: indices[%lld, %d] = %lld is outside [-%lld, %lld) (axis %d of data)",
                               k, (long long)u, d, (long long)v, (long long)a->shape[d], (long long)a->shape[d], d);
        }
    }
    if (total == 0) return PB_OK;
    if (a->data == NULL || a->output == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: data and output must not be NULL", k);
    if (upd_n > 0 && a->updates == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: updates is NULL", k);
    const size_t bytes = (size_t)total * c.es;
    if (a->data != a->output && pb_overlap(a->data, bytes, a->output, bytes))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: data and output overlap partially (in place needs output == data)", k);
    if (pb_overlap(a->updates, (size_t)upd_n * c.es, a->output, bytes) ||
        pb_overlap(a->indices, (size_t)idx_n * 8, a->output, bytes))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: updates or indices overlap the output", k);
    if (a->data != a->output) CHECK(pb_parallel_copy(&a->exec, a->dtype, a->output, a->data, total));
    if (a->n_updates == 0 || slice == 0) return PB_OK;
    if (a->reduction == PB_REDUCTION_NONE) {
        /* distinct slices (ONNX: duplicate indices are undefined without a reduction) */
        return pb_parallel_for(pb_threads_for(a->exec.num_threads, 2 * upd_n * (int64_t)c.es, PB_GRAIN_MOVE_BYTES), a->n_updates, scatter_range, &c);
    }
    /* reductions: in index order, one thread (duplicates combine in a defined order) */
    pb_mv_reduce_ukernel uk = pb_active_isa()->scatter_reduce[pb_dtype_index(a->dtype)];
    char *out = (char *)a->output;
    const char *upd = (const char *)a->updates;
    for (int64_t u = 0; u < a->n_updates; u++)
        uk(out + (size_t)scatter_offset(&c, u) * c.es, upd + (size_t)(u * slice) * c.es, slice, a->reduction);
    return PB_OK;
}
