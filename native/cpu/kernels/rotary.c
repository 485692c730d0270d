/* RotaryEmbedding, com.microsoft and ai.onnx (opset 23): two front ends that validate their args
 * and fill one plan (attention.h's pb_rot_plan), then one microkernel (rotary.inc.c) over the
 * pool, one task per token (its cos/sin row converted once and applied to all its heads). */
#include <stdint.h>

#include "../internal.h"

typedef struct {
    pb_rotary_ukernel uk;
    const pb_rot_plan *p;
} rotary_ctx;

static void rotary_range(void *ctx, int64_t t0, int64_t t1) {
    rotary_ctx *c = (rotary_ctx *)ctx;
    c->uk(c->p, t0, t1);
}

int pb_rotary_run(const pb_rot_plan *p, int32_t dtype, int32_t max_threads, int64_t batch) {
    rotary_ctx c = {pb_active_isa()->rotary[pb_dtype_index(dtype)], p};
    const int64_t elements = batch * p->S * p->N * p->H;
    return pb_parallel_for(pb_threads_for(max_threads, elements, PB_GRAIN_SOFTMAX), batch * p->S, rotary_range, &c);
}

/* what both ops' args share: exec, dtype, layout, interleaved */
static int rot_check_common(const pb_exec *ex, int32_t dtype, int32_t layout, int32_t interleaved, const char *k) {
    CHECK(pb_check_exec(ex, k));
    CHECK(pb_check_dtype(dtype, k));
    if (layout != PB_LAYOUT_BSNH && layout != PB_LAYOUT_BNSH)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: layout=%d, expected 0 (BSNH) or 1 (BNSH)", k, (int)layout);
    if (interleaved != 0 && interleaved != 1)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: interleaved=%d, expected 0 or 1", k, (int)interleaved);
    return PB_OK;
}

/* every position id of the (batch, seq) grid names a cos/sin cache row */
static int rot_check_positions(const int64_t *ids, int64_t batch, int64_t seq, int64_t max_pos, const char *k) {
    for (int64_t i = 0; i < batch * seq; i++)
        if (ids[i] < 0 || ids[i] >= max_pos)
            return pb_fail(PB_ERR_INVALID_ARGUMENT,
                           "%s: position_ids[%lld, %lld] = %lld is outside the cos/sin cache rows [0, %lld)", k,
                           (long long)(i / seq), (long long)(i % seq), (long long)ids[i], (long long)max_pos);
    return PB_OK;
}

/* ---- com.microsoft RotaryEmbedding ---- */
int pb_rotary_embedding(const void *args) {
    CHECK(pb_check_args(args, "rotary_embedding"));
    const pb_rotary_embedding_args *a = (const pb_rotary_embedding_args *)args;
    const char *k = "rotary_embedding";
    CHECK(rot_check_common(&a->exec, a->dtype, a->layout, a->interleaved, k));
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
    CHECK(rot_check_positions(a->position_ids, a->batch, a->seq, a->max_pos, k));
    const pb_rot_plan p = {.S = a->seq, .N = a->num_heads, .H = a->head_size, .half = a->head_size / 2,
                           .interleaved = a->interleaved, .bsnh = a->layout == PB_LAYOUT_BSNH, .in = a->input,
                           .out = a->output, .cos = a->cos_cache, .sin = a->sin_cache, .position_ids = a->position_ids};
    return pb_rotary_run(&p, a->dtype, a->exec.num_threads, a->batch);
}

/* ---- ai.onnx RotaryEmbedding: rotary_dim <= head size (the rest passes through), position_ids optional ---- */
int pb_onnx_rotary_embedding(const void *args) {
    const char *k = "onnx_rotary_embedding";
    if (args == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: args is NULL", k);
    const pb_onnx_rotary_embedding_args *a = (const pb_onnx_rotary_embedding_args *)args;
    CHECK(rot_check_common(&a->exec, a->dtype, a->layout, a->interleaved, k));
    if (a->batch < 1 || a->seq < 1 || a->num_heads < 1 || a->head_size < 1)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: batch=%lld seq=%lld num_heads=%lld head_size=%lld must be >= 1", k,
                       (long long)a->batch, (long long)a->seq, (long long)a->num_heads, (long long)a->head_size);
    if (a->rotary_dim < 2 || a->rotary_dim % 2 != 0 || a->rotary_dim > a->head_size)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: rotary_dim=%lld must be even and in [2, head_size=%lld]", k,
                       (long long)a->rotary_dim, (long long)a->head_size);
    if (a->position_ids != NULL && a->max_pos < 1)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: max_pos=%lld must be >= 1 with position_ids", k,
                       (long long)a->max_pos);
    if (a->input == NULL || a->output == NULL || a->cos_cache == NULL || a->sin_cache == NULL)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: input, cos_cache, sin_cache and output must not be NULL", k);
    const int64_t lim = INT64_MAX / 8;
    if (a->batch > lim / a->seq || a->batch * a->seq > lim / a->num_heads ||
        a->batch * a->seq * a->num_heads > lim / a->head_size || a->max_pos > lim / a->rotary_dim)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: tensor sizes overflow", k);
    const size_t e = pb_dtype_size(a->dtype);
    const size_t bytes = (size_t)(a->batch * a->seq * a->num_heads * a->head_size) * e;
    const size_t cache = (size_t)((a->position_ids ? a->max_pos : a->batch * a->seq) * (a->rotary_dim / 2)) * e;
    if (a->input != a->output && pb_overlap(a->input, bytes, a->output, bytes))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: input and output overlap partially (in place needs input == output)",
                       k);
    if (pb_overlap(a->output, bytes, a->cos_cache, cache) || pb_overlap(a->output, bytes, a->sin_cache, cache))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: output overlaps cos_cache or sin_cache", k);
    if (a->position_ids != NULL) {
        if (pb_overlap(a->output, bytes, a->position_ids, sizeof(int64_t) * (size_t)(a->batch * a->seq)))
            return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: output overlaps position_ids", k);
        CHECK(rot_check_positions(a->position_ids, a->batch, a->seq, a->max_pos, k));
    }
    const pb_rot_plan p = {.S = a->seq, .N = a->num_heads, .H = a->head_size, .half = a->rotary_dim / 2,
                           .interleaved = a->interleaved, .bsnh = a->layout == PB_LAYOUT_BSNH, .in = a->input,
                           .out = a->output, .cos = a->cos_cache, .sin = a->sin_cache, .position_ids = a->position_ids};
    return pb_rotary_run(&p, a->dtype, a->exec.num_threads, a->batch);
}
