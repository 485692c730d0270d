/* com.microsoft RotaryEmbedding entry point: validate, then one task per token over the pool. */
#include <stdint.h>

#include "../internal.h"

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
    CHECK(pb_check_args(args, "rotary_embedding"));
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
    if (pb_overlap_unless_same(a->input, bytes, a->output, bytes))
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
    int32_t threads = pb_threads_for(a->exec.num_threads, tasks * a->head_size, PB_GRAIN_SOFTMAX);
    return pb_parallel_for(threads, a->batch * a->seq, rotary_range, &c);
}

