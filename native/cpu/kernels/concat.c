/* Concat along one axis: output elements over the pool in chunks, each from its input.
 *
 * Every argument is checked before anything is written (shapes, overflow, pointers, overlap):
 * a bad argument returns a status with a message, never a read or write out of bounds. */
#include <stdint.h>
#include <string.h>

#include "../internal.h"

#define PB_MV_MAX_INPUTS 1024

/* ---- Concat ---- */
typedef struct {
    pb_mv_concat_ukernel uk;
    const pb_concat_args *a;
    const int64_t *offsets;
    int64_t total;
    int32_t nt;
} concat_ctx;

static void concat_range(void *ctx, int64_t t0, int64_t t1) {
    concat_ctx *c = (concat_ctx *)ctx;
    int64_t e1 = t1 * PB_COPY_CHUNK < c->total ? t1 * PB_COPY_CHUNK : c->total;
    c->uk(c->a, c->offsets, t0 * PB_COPY_CHUNK, e1, c->nt);
}

int pb_concat(const void *args) {
    const char *k = "concat";
    CHECK(pb_check_args(args, k));
    const pb_concat_args *a = (const pb_concat_args *)args;
    CHECK(pb_check_exec(&a->exec, k));
    CHECK(pb_check_dtype(a->dtype, k));
    if (a->n_inputs < 1 || a->n_inputs > PB_MV_MAX_INPUTS)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: n_inputs=%d, expected 1..%d", k, (int)a->n_inputs, PB_MV_MAX_INPUTS);
    if (a->outer < 0 || a->inner < 0)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: outer=%lld inner=%lld must be >= 0", k, (long long)a->outer,
                       (long long)a->inner);
    if (a->extents == NULL || a->inputs == NULL)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: extents and inputs must not be NULL", k);
    int64_t offsets[PB_MV_MAX_INPUTS + 1];
    offsets[0] = 0;
    for (int j = 0; j < a->n_inputs; j++) {
        int64_t piece;
        if (a->extents[j] < 0)
            return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: extents[%d]=%lld must be >= 0", k, j, (long long)a->extents[j]);
        if (!pb_mul_ok(a->extents[j], a->inner, &piece) || offsets[j] > PB_SIZE_LIMIT - piece)
            return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: tensor sizes overflow", k);
        offsets[j + 1] = offsets[j] + piece;
    }
    int64_t total;
    if (!pb_mul_ok(a->outer, offsets[a->n_inputs], &total)) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: tensor sizes overflow", k);
    if (total == 0) return PB_OK;
    if (a->output == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: output is NULL", k);
    const size_t es = pb_dtype_size(a->dtype);
    for (int j = 0; j < a->n_inputs; j++) {
        size_t in_bytes = (size_t)(a->outer * (offsets[j + 1] - offsets[j])) * es;
        if (in_bytes == 0) continue;
        if (a->inputs[j] == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: inputs[%d] is NULL", k, j);
        if (pb_overlap(a->inputs[j], in_bytes, a->output, (size_t)total * es))
            return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: inputs[%d] overlaps the output", k, j);
    }
    concat_ctx c = {pb_active_isa()->concat[pb_dtype_index(a->dtype)], a, offsets, total, pb_stream_worth(2 * total * (int64_t)es)};
    int64_t chunks = (total + PB_COPY_CHUNK - 1) / PB_COPY_CHUNK;
    return pb_parallel_for(pb_threads_for(a->exec.num_threads, 2 * total * (int64_t)es, PB_GRAIN_MOVE_BYTES), chunks, concat_range, &c);
}
