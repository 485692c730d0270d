/* Cast entry point (f32 <-> f16/bf16): validate, then elements over the pool. */
#include <stdint.h>

#include "../internal.h"

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
    CHECK(pb_check_args(args, k));
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
    if (pb_overlap_unless_same(a->src, (size_t)a->n * pb_dtype_size(a->src_dtype), a->dst,
                               (size_t)a->n * pb_dtype_size(a->dst_dtype)))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: src and dst overlap", k);
    const pb_isa *isa = pb_active_isa();
    cast_ctx c = {a->src_dtype == PB_DTYPE_F32 ? isa->cast_from_f32[pb_dtype_index(a->dst_dtype)]
                                               : isa->cast_to_f32[pb_dtype_index(a->src_dtype)],
                  a};
    return pb_parallel_for(pb_threads_for(a->exec.num_threads, a->n, PB_GRAIN_CAST), a->n, cast_range, &c);
}

