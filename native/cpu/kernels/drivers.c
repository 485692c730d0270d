/* Public kernel entry points: validate every argument (returning a status, never crashing),
 * choose how many threads the work is worth, and run the active ISA's microkernel over
 * contiguous ranges on the pool. */
#include <stdint.h>

#include "../internal.h"

#define CHECK(x)                      \
    do {                              \
        int rc_ = (x);                \
        if (rc_ != PB_OK) return rc_; \
    } while (0)

/* Elements one thread should get before another thread is worth waking (~10 us of work). */
#define PB_GRAIN_ELEMENTS 32768

static int check_args_ptr(const void *args, const char *kernel) {
    if (args == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: args is NULL", kernel);
    return PB_OK;
}

static int ranges_overlap_not_equal(const void *a, const void *b, size_t bytes) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    if (x == y) return 0;
    return x < y ? y - x < bytes : x - y < bytes;
}

/* ---- noop ---- */
int pb_noop(const void *args) {
    CHECK(check_args_ptr(args, "noop"));
    return pb_check_exec(&((const pb_noop_args *)args)->exec, "noop");
}

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
    CHECK(check_args_ptr(args, "softmax"));
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
    if (ranges_overlap_not_equal(a->x, a->y, bytes))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "softmax: x and y overlap partially (in place needs x == y)");
    softmax_ctx c = {pb_active_isa()->softmax[pb_dtype_index(a->dtype)], a};
    int32_t threads = pb_threads_for(a->exec.num_threads, a->rows * a->cols, PB_GRAIN_ELEMENTS);
    return pb_parallel_for(threads, a->rows, softmax_range, &c);
}

/* ---- rotary embedding ---- */
typedef struct {
    pb_rotary_ukernel uk;
    const pb_rotary_embedding_args *a;
} rotary_ctx;

static void rotary_range(void *ctx, int64_t t0, int64_t t1) {
    rotary_ctx *c = (rotary_ctx *)ctx;
    c->uk(c->a, t0, t1);
}

int pb_rotary_embedding(const void *args) {
    CHECK(check_args_ptr(args, "rotary_embedding"));
    const pb_rotary_embedding_args *a = (const pb_rotary_embedding_args *)args;
    const char *k = "rotary_embedding";
    CHECK(pb_check_exec(&a->exec, k));
    CHECK(pb_check_dtype(a->dtype, k));
    if (a->layout != PB_LAYOUT_BSNH && a->layout != PB_LAYOUT_BNSH)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: layout=%d, expected 0 (BSNH) or 1 (BNSH)", k, (int)a->layout);
    if (a->interleaved != 0 && a->interleaved != 1)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: interleaved=%d, expected 0 or 1", k, (int)a->interleaved);
    if (a->batch < 1 || a->seq < 1 || a->num_heads < 1 || a->max_pos < 1)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: batch=%lld seq=%lld num_heads=%lld max_pos=%lld must be >= 1", k,
                       (long long)a->batch, (long long)a->seq, (long long)a->num_heads, (long long)a->max_pos);
    if (a->head_size < 2 || a->head_size % 2 != 0)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: head_size=%lld must be even and >= 2", k, (long long)a->head_size);
    if (a->input == NULL || a->output == NULL || a->position_ids == NULL || a->cos_cache == NULL ||
        a->sin_cache == NULL)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: input, position_ids, cos_cache, sin_cache and output must not be NULL", k);
    const int64_t lim = INT64_MAX / 8;
    if (a->batch > lim / a->seq || a->batch * a->seq > lim / a->num_heads ||
        a->batch * a->seq * a->num_heads > lim / a->head_size || a->max_pos > lim / a->head_size)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: tensor sizes overflow", k);
    const int64_t tasks = a->batch * a->seq * a->num_heads;
    size_t bytes = (size_t)(tasks * a->head_size) * pb_dtype_size(a->dtype);
    if (ranges_overlap_not_equal(a->input, a->output, bytes))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: input and output overlap partially (in place needs input == output)", k);
    for (int64_t i = 0; i < a->batch * a->seq; i++) {
        int64_t p = a->position_ids[i];
        if (p < 0 || p >= a->max_pos)
            return pb_fail(PB_ERR_INVALID_ARGUMENT,
                           "%s: position_ids[%lld, %lld] = %lld is outside the cos/sin cache rows [0, %lld)", k,
                           (long long)(i / a->seq), (long long)(i % a->seq), (long long)p, (long long)a->max_pos);
    }
    /* one task per token: its cos/sin row is converted once and applied to all its heads */
    rotary_ctx c = {pb_active_isa()->rotary[pb_dtype_index(a->dtype)], a};
    int32_t threads = pb_threads_for(a->exec.num_threads, tasks * a->head_size, PB_GRAIN_ELEMENTS);
    return pb_parallel_for(threads, a->batch * a->seq, rotary_range, &c);
}

/* ---- cast ---- */
typedef struct {
    pb_cast_ukernel uk;
    const pb_cast_args *a;
} cast_ctx;

static void cast_range(void *ctx, int64_t i0, int64_t i1) {
    cast_ctx *c = (cast_ctx *)ctx;
    c->uk(c->a->src, c->a->dst, i0, i1);
}

int pb_cast(const void *args) {
    const char *k = "cast";
    CHECK(check_args_ptr(args, k));
    const pb_cast_args *a = (const pb_cast_args *)args;
    CHECK(pb_check_exec(&a->exec, k));
    CHECK(pb_check_dtype(a->src_dtype, k));
    CHECK(pb_check_dtype(a->dst_dtype, k));
    if (a->src_dtype != PB_DTYPE_F32 && a->dst_dtype != PB_DTYPE_F32)
        return pb_fail(PB_ERR_UNSUPPORTED, "%s: one side must be float32 (got %d -> %d)", k, (int)a->src_dtype,
                       (int)a->dst_dtype);
    if (a->n < 0 || a->n > INT64_MAX / 8) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: n=%lld out of range", k, (long long)a->n);
    if (a->n == 0) return PB_OK;
    if (a->src == NULL || a->dst == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: src and dst must not be NULL", k);
    if (a->src == a->dst && a->src_dtype != a->dst_dtype)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: in-place cast between different sizes", k);
    const uintptr_t s0 = (uintptr_t)a->src, s1 = s0 + (size_t)a->n * pb_dtype_size(a->src_dtype);
    const uintptr_t d0 = (uintptr_t)a->dst, d1 = d0 + (size_t)a->n * pb_dtype_size(a->dst_dtype);
    if (s0 != d0 && s0 < d1 && d0 < s1) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: src and dst overlap", k);
    const pb_isa *isa = pb_active_isa();
    cast_ctx c = {a->src_dtype == PB_DTYPE_F32 ? isa->cast_from_f32[pb_dtype_index(a->dst_dtype)]
                                               : isa->cast_to_f32[pb_dtype_index(a->src_dtype)],
                  a};
    return pb_parallel_for(pb_threads_for(a->exec.num_threads, a->n, 4 * PB_GRAIN_ELEMENTS), a->n, cast_range, &c);
}

/* ---- host peak probes ---- */
typedef struct {
    pb_peak_ukernel uk;
    const pb_peak_args *a;
    int64_t flops[256];
} peak_ctx;

static void peak_range(void *ctx, int64_t t0, int64_t t1) {
    peak_ctx *c = (peak_ctx *)ctx;
    for (int64_t t = t0; t < t1; t++) c->a->sink[t] = c->uk(c->a->iters, &c->flops[t]);
}

static int run_peak(const void *args, int native, const char *k) {
    CHECK(check_args_ptr(args, k));
    const pb_peak_args *a = (const pb_peak_args *)args;
    CHECK(pb_check_exec(&a->exec, k));
    if (a->iters < 1 || a->flops_out == NULL || a->sink == NULL || a->exec.num_threads > 256)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: iters >= 1, flops_out and sink (one float per thread) required", k);
    const pb_isa *isa = pb_active_isa();
    peak_ctx c = {native ? isa->peak_fma_f32 : isa->peak_bf16_dot, a, {0}};
    CHECK(pb_parallel_for(a->exec.num_threads, a->exec.num_threads, peak_range, &c));
    int64_t total = 0;
    for (int t = 0; t < a->exec.num_threads; t++) total += c.flops[t];
    *a->flops_out = total;
    if (a->method_out) *a->method_out = native ? isa->name : isa->peak_bf16_method;
    return PB_OK;
}

int pb_peak_fma_f32(const void *args) { return run_peak(args, 1, "peak_fma_f32"); }
int pb_peak_bf16_dot(const void *args) { return run_peak(args, 0, "peak_bf16_dot"); }

typedef struct {
    pb_read_ukernel uk;
    const pb_read_args *a;
} read_ctx;

static void read_range(void *ctx, int64_t t0, int64_t t1) {
    read_ctx *c = (read_ctx *)ctx;
    int64_t T = c->a->exec.num_threads;
    int64_t floats = c->a->bytes / 4;
    for (int64_t t = t0; t < t1; t++) {
        int64_t from = floats * t / T, to = floats * (t + 1) / T;
        c->a->sink[t] = c->uk((const float *)c->a->buf + from, (to - from) * 4);
    }
}

int pb_read_bandwidth(const void *args) {
    const char *k = "read_bandwidth";
    CHECK(check_args_ptr(args, k));
    const pb_read_args *a = (const pb_read_args *)args;
    CHECK(pb_check_exec(&a->exec, k));
    if (a->buf == NULL || a->sink == NULL || a->bytes < 4)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: buf, sink (one float per thread) and bytes >= 4 required", k);
    read_ctx c = {pb_active_isa()->read_sum, a};
    return pb_parallel_for(a->exec.num_threads, a->exec.num_threads, read_range, &c);
}
