/* Softmax entry point: validate, then rows over the pool. */
#include <stdint.h>

#include "../internal.h"

/* ---- softmax ---- */
typedef struct {
    pb_softmax_ukernel uk;
    const pb_softmax_args *a;
} softmax_ctx;

static void softmax_range(void *ctx, int64_t r0, int64_t r1) {
    softmax_ctx *c = (softmax_ctx *)ctx;
    c->uk(c->a->x, c->a->y, r0, r1, c->a->cols);
}

int pb_softmax(const void *args) {
    CHECK(pb_check_args(args, "softmax"));
    const pb_softmax_args *a = (const pb_softmax_args *)args;
    CHECK(pb_check_exec(&a->exec, "softmax"));
    CHECK(pb_check_dtype(a->dtype, "softmax"));
    if (a->rows < 0 || a->cols < 0)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "softmax: rows=%lld cols=%lld must be >= 0", (long long)a->rows,
                       (long long)a->cols);
    if (a->rows == 0 || a->cols == 0) return PB_OK;
    if (a->cols > INT64_MAX / 8 / a->rows) return pb_fail(PB_ERR_INVALID_ARGUMENT, "softmax: rows*cols overflows");
    if (a->x == NULL || a->y == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "softmax: x and y must not be NULL");
    size_t bytes = (size_t)(a->rows * a->cols) * pb_dtype_size(a->dtype);
    if (pb_overlap_unless_same(a->x, bytes, a->y, bytes))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "softmax: x and y overlap partially (in place needs x == y)");
    softmax_ctx c = {pb_active_isa()->softmax[pb_dtype_index(a->dtype)], a};
    int32_t threads = pb_threads_for(a->exec.num_threads, a->rows * a->cols, PB_GRAIN_SOFTMAX);
    return pb_parallel_for(threads, a->rows, softmax_range, &c);
}

