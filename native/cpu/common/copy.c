/* A plain copy of n elements over the pool (no overlap): Transpose's identity permutation and
 * ScatterND's copy of data use it. */
#include <stdint.h>
#include <string.h>

#include "../internal.h"

/* ---- plain parallel copy ---- */
typedef struct {
    pb_mv_copy_ukernel uk;
    const char *src;
    char *dst;
    int64_t n;
    size_t es;
    int32_t nt;
} copy_ctx;

static void copy_range(void *ctx, int64_t t0, int64_t t1) {
    copy_ctx *c = (copy_ctx *)ctx;
    int64_t e0 = t0 * PB_COPY_CHUNK, e1 = t1 * PB_COPY_CHUNK < c->n ? t1 * PB_COPY_CHUNK : c->n;
    c->uk(c->dst + (size_t)e0 * c->es, c->src + (size_t)e0 * c->es, e1 - e0, c->nt);
}

int pb_parallel_copy(const pb_exec *ex, int32_t dtype, void *dst, const void *src, int64_t n) {
    if (n <= 0) return PB_OK;
    copy_ctx c = {pb_active_isa()->copy[pb_dtype_index(dtype)], (const char *)src, (char *)dst, n, pb_dtype_size(dtype), 0};
    c.nt = pb_stream_worth(2 * n * (int64_t)c.es);
    int64_t chunks = (n + PB_COPY_CHUNK - 1) / PB_COPY_CHUNK;
    return pb_parallel_for(pb_threads_for(ex->num_threads, 2 * n * (int64_t)c.es, PB_GRAIN_MOVE_BYTES), chunks, copy_range, &c);
}
