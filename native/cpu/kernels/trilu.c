/* Trilu: keep the upper or lower triangle of each matrix (from diagonal k), zero the rest.
 *
 * Every argument is checked before anything is written (shapes, overflow, pointers, overlap):
 * a bad argument returns a status with a message, never a read or write out of bounds. */
#include <stdint.h>
#include <string.h>

#include "../internal.h"

/* ---- Trilu ---- */
typedef struct {
    pb_mv_trilu_ukernel uk;
    const pb_trilu_args *a;
    int32_t nt;
} trilu_ctx;

static void trilu_range(void *ctx, int64_t r0, int64_t r1) {
    trilu_ctx *c = (trilu_ctx *)ctx;
    c->uk(c->a, r0, r1, c->nt);
}

int pb_trilu(const void *args) {
    const char *k = "trilu";
    CHECK(pb_check_args(args, k));
    const pb_trilu_args *a = (const pb_trilu_args *)args;
    CHECK(pb_check_exec(&a->exec, k));
    CHECK(pb_check_dtype(a->dtype, k));
    if (a->upper != 0 && a->upper != 1) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: upper=%d, expected 0 or 1", k, (int)a->upper);
    if (a->batch < 0 || a->rows < 0 || a->cols < 0)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: batch=%lld rows=%lld cols=%lld must be >= 0", k, (long long)a->batch,
                       (long long)a->rows, (long long)a->cols);
    int64_t nrows, total;
    if (!pb_mul_ok(a->batch, a->rows, &nrows) || !pb_mul_ok(nrows, a->cols, &total))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: tensor sizes overflow", k);
    if (total == 0) return PB_OK;
    if (a->x == NULL || a->y == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: x and y must not be NULL", k);
    const size_t bytes = (size_t)total * pb_dtype_size(a->dtype);
    if (a->x != a->y && pb_overlap(a->x, bytes, a->y, bytes))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: x and y overlap partially (in place needs y == x)", k);
    trilu_ctx c = {pb_active_isa()->trilu[pb_dtype_index(a->dtype)], a, pb_stream_worth(2 * (int64_t)bytes) && a->x != a->y};
    return pb_parallel_for(pb_threads_for(a->exec.num_threads, 2 * (int64_t)bytes, PB_GRAIN_MOVE_BYTES), nrows, trilu_range, &c);
}
