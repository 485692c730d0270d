/* ReduceMean entry point: validate, then row sums (split when rows are fewer than threads) or
 * column means over the pool. */
#include <math.h>
#include <stdint.h>

#include "../internal.h"

/* ReduceMean over columns: columns per task */
#define PB_RM_COL_CHUNK 256

/* ================================ ReduceMean =============================================== */

static void store_scalar(int32_t dtype, void *y, int64_t i, double v) {
    const float f = (float)v;
    switch (dtype) {
    case PB_DTYPE_F32: ((float *)y)[i] = f; break;
    case PB_DTYPE_F16: ((uint16_t *)y)[i] = pb_f32_to_f16(f); break;
    default: ((uint16_t *)y)[i] = pb_f32_to_bf16(f); break;
    }
}

typedef struct {
    const pb_reduce_mean_args *a;
    pb_sum_ukernel sum;
    pb_colmean_ukernel col;
    int64_t parts;    /* row sums split into this many parts (1: each task writes its row's mean) */
    double *partial;  /* (outer * parts) when parts > 1 */
    int64_t chunks;   /* column chunks per outer slab (inner > 1) */
    size_t esz;
} rm_ctx;

static void rm_rows(void *ctx, int64_t t0, int64_t t1) {
    const rm_ctx *c = (const rm_ctx *)ctx;
    const int64_t R = c->a->reduce, P = c->parts;
    for (int64_t t = t0; t < t1; t++) {
        const int64_t row = t / P, part = t % P;
        const void *x = (const char *)c->a->x + (size_t)(row * R) * c->esz;
        const double s = c->sum(x, R * part / P, R * (part + 1) / P);
        if (P == 1)
            store_scalar(c->a->dtype, c->a->y, row, s / (double)R);
        else
            c->partial[t] = s;
    }
}

static void rm_cols(void *ctx, int64_t t0, int64_t t1) {
    const rm_ctx *c = (const rm_ctx *)ctx;
    const int64_t R = c->a->reduce, inner = c->a->inner;
    for (int64_t t = t0; t < t1; t++) {
        const int64_t o = t / c->chunks, ch = t % c->chunks;
        const int64_t j0 = ch * PB_RM_COL_CHUNK, j1 = j0 + PB_RM_COL_CHUNK < inner ? j0 + PB_RM_COL_CHUNK : inner;
        c->col((const char *)c->a->x + (size_t)(o * R * inner) * c->esz, (char *)c->a->y + (size_t)(o * inner) * c->esz,
               R, inner, j0, j1, 1.0 / (double)R);
    }
}

int pb_reduce_mean(const void *args) {
    const char *k = "reduce_mean";
    CHECK(pb_check_args(args, k));
    const pb_reduce_mean_args *a = (const pb_reduce_mean_args *)args;
    CHECK(pb_check_exec(&a->exec, k));
    CHECK(pb_check_dtype(a->dtype, k));
    if (a->outer < 0 || a->reduce < 0 || a->inner < 0)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: outer=%lld reduce=%lld inner=%lld must be >= 0", k,
                       (long long)a->outer, (long long)a->reduce, (long long)a->inner);
    if (a->outer > 0 && a->inner > PB_SIZE_LIMIT / a->outer)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: tensor sizes overflow", k);
    const int64_t nout = a->outer * a->inner;
    if (nout > 0 && a->reduce > PB_SIZE_LIMIT / nout)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: tensor sizes overflow", k);
    if (nout == 0) return PB_OK;
    if (a->y == NULL || (a->reduce > 0 && a->x == NULL))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: x and y must not be NULL", k);
    const size_t es = pb_dtype_size(a->dtype);
    if (pb_overlap(a->x, (size_t)(nout * a->reduce) * es, a->y, (size_t)nout * es))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: x and y overlap", k);
    if (a->reduce == 0) { /* the mean of nothing */
        for (int64_t i = 0; i < nout; i++) store_scalar(a->dtype, a->y, i, NAN);
        return PB_OK;
    }
    const pb_isa *t = pb_active_isa();
    const int di = pb_dtype_index(a->dtype);
    const int32_t threads = pb_threads_for(a->exec.num_threads, nout * a->reduce, PB_GRAIN_REDUCE);
    rm_ctx c = {a, t->sum[di], t->colmean[di], 1, NULL, 1, es};
    if (a->inner > 1) {
        c.chunks = (a->inner + PB_RM_COL_CHUNK - 1) / PB_RM_COL_CHUNK;
        return pb_parallel_for(threads, a->outer * c.chunks, rm_cols, &c);
    }
    /* row means; fewer rows than threads: each row's sum is split into parts */
    if (a->outer < threads) {
        int64_t parts = (threads + a->outer - 1) / a->outer;
        const int64_t most = a->reduce / 4096 > 1 ? a->reduce / 4096 : 1;
        c.parts = parts < most ? parts : most;
    }
    if (c.parts == 1) return pb_parallel_for(threads, a->outer, rm_rows, &c);
    c.partial = (double *)pb_scratch_slot(1, (size_t)(a->outer * c.parts) * sizeof(double));
    if (c.partial == NULL) return pb_fail(PB_ERR_OUT_OF_MEMORY, "%s: no scratch for %lld partial sums", k,
                                          (long long)(a->outer * c.parts));
    CHECK(pb_parallel_for(threads, a->outer * c.parts, rm_rows, &c));
    for (int64_t r = 0; r < a->outer; r++) {
        double s = 0.0;
        for (int64_t p = 0; p < c.parts; p++) s += c.partial[r * c.parts + p];
        store_scalar(a->dtype, a->y, r, s / (double)a->reduce);
    }
    return PB_OK;
}

