/* The Gelu family (Gelu, FastGelu, BiasGelu) and the Sigmoid family (Sigmoid, QuickGelu) entry
 * points: validate, then blocks of elements over the pool. */
#include <math.h>
#include <stdint.h>

#include "../internal.h"

/* Element-split kernels hand out whole blocks (a multiple of every lane count: threads start
 * on 64-byte boundaries of f32 and 16-bit data alike, given aligned buffers). */
#define PB_ELT_BLOCK 512

/* ================================ Gelu family ============================================== */

typedef struct {
    pb_gelu_ukernel uk;
    const pb_gelu_args *a;
    int64_t total;
    int nt;
} gelu_ctx;

static void gelu_range(void *ctx, int64_t t0, int64_t t1) {
    const gelu_ctx *c = (const gelu_ctx *)ctx;
    int64_t e0 = t0 * PB_ELT_BLOCK, e1 = t1 * PB_ELT_BLOCK;
    if (e1 > c->total) e1 = c->total;
    if (e0 < e1) c->uk(c->a->x, c->a->bias, c->a->y, e0, e1, c->a->cols, c->nt);
}

int pb_gelu(const void *args) {
    const char *k = "gelu";
    CHECK(pb_check_args(args, k));
    const pb_gelu_args *a = (const pb_gelu_args *)args;
    CHECK(pb_check_exec(&a->exec, k));
    CHECK(pb_check_dtype(a->dtype, k));
    if (a->approximate != PB_GELU_ERF && a->approximate != PB_GELU_TANH)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: approximate=%d, expected 0 (erf) or 1 (tanh)", k, (int)a->approximate);
    if (a->rows < 0 || a->cols < 0)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: rows=%lld cols=%lld must be >= 0", k, (long long)a->rows,
                       (long long)a->cols);
    if (a->rows == 0 || a->cols == 0) return PB_OK;
    if (a->rows > PB_SIZE_LIMIT / a->cols) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: rows*cols overflows", k);
    if (a->x == NULL || a->y == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: x and y must not be NULL", k);
    const int64_t total = a->rows * a->cols;
    const size_t es = pb_dtype_size(a->dtype), bytes = (size_t)total * es;
    if (pb_overlap_unless_same(a->x, bytes, a->y, bytes))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: x and y overlap partially (in place needs y == x)", k);
    if (a->bias != NULL && pb_overlap(a->bias, (size_t)a->cols * es, a->y, bytes))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: bias overlaps y", k);
    const int nt = pb_stream_worth((int64_t)((size_t)(2 * total + (a->bias ? a->cols : 0)) * es)) && (uintptr_t)a->y % es == 0;
    const pb_isa *isa = pb_active_isa();
    const int di = pb_dtype_index(a->dtype);
    gelu_ctx c = {a->approximate == PB_GELU_ERF ? isa->gelu_erf[di] : isa->gelu_tanh[di], a, total, nt};
    const int64_t blocks = (total + PB_ELT_BLOCK - 1) / PB_ELT_BLOCK;
    return pb_parallel_for(pb_threads_for(a->exec.num_threads, total, PB_GRAIN_GELU), blocks, gelu_range, &c);
}

/* ================================ Sigmoid family =========================================== */

typedef struct {
    pb_sigmoid_ukernel uk;
    const pb_sigmoid_args *a;
    int nt;
} sigmoid_ctx;

static void sigmoid_range(void *ctx, int64_t t0, int64_t t1) {
    const sigmoid_ctx *c = (const sigmoid_ctx *)ctx;
    int64_t e0 = t0 * PB_ELT_BLOCK, e1 = t1 * PB_ELT_BLOCK;
    if (e1 > c->a->n) e1 = c->a->n;
    if (e0 < e1) c->uk(c->a->x, c->a->y, e0, e1, c->a->alpha, c->nt);
}

int pb_sigmoid(const void *args) {
    const char *k = "sigmoid";
    CHECK(pb_check_args(args, k));
    const pb_sigmoid_args *a = (const pb_sigmoid_args *)args;
    CHECK(pb_check_exec(&a->exec, k));
    CHECK(pb_check_dtype(a->dtype, k));
    if (a->mode != PB_SIGMOID_PLAIN && a->mode != PB_SIGMOID_MUL)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: mode=%d, expected 0 (sigmoid) or 1 (x * sigmoid(alpha x))", k,
                       (int)a->mode);
    if (a->mode == PB_SIGMOID_MUL && !isfinite(a->alpha))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: alpha=%g must be finite", k, (double)a->alpha);
    if (a->n < 0) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: n=%lld must be >= 0", k, (long long)a->n);
    if (a->n == 0) return PB_OK;
    if (a->n > PB_SIZE_LIMIT) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: n=%lld overflows", k, (long long)a->n);
    if (a->x == NULL || a->y == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: x and y must not be NULL", k);
    const size_t es = pb_dtype_size(a->dtype), bytes = (size_t)a->n * es;
    if (pb_overlap_unless_same(a->x, bytes, a->y, bytes))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: x and y overlap partially (in place needs y == x)", k);
    const int nt = pb_stream_worth((int64_t)(2 * bytes)) && (uintptr_t)a->y % es == 0;
    const pb_isa *isa = pb_active_isa();
    const int di = pb_dtype_index(a->dtype);
    sigmoid_ctx c = {a->mode == PB_SIGMOID_PLAIN ? isa->sigmoid_plain[di] : isa->sigmoid_mul[di], a, nt};
    const int64_t blocks = (a->n + PB_ELT_BLOCK - 1) / PB_ELT_BLOCK;
    return pb_parallel_for(pb_threads_for(a->exec.num_threads, a->n, PB_GRAIN_SIGMOID), blocks, sigmoid_range, &c);
}

