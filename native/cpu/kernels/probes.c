/* Probes of the harness and the machine: the no-op kernel (the timing loop's floor), the FMA and
 * bf16-dot peaks and the read bandwidth, each on every thread asked for. */
#include <stdint.h>

#include "../internal.h"

/* ---- noop ---- */
int pb_noop(const void *args) {
    CHECK(pb_check_args(args, "noop"));
    return pb_check_exec(&((const pb_noop_args *)args)->exec, "noop");
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
    CHECK(pb_check_args(args, k));
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
    pb_mv_copy_ukernel copy;
    int32_t nt;
    const pb_read_args *a;
} read_ctx;

static void read_range(void *ctx, int64_t t0, int64_t t1) {
    read_ctx *c = (read_ctx *)ctx;
    int64_t T = c->a->exec.num_threads;
    int64_t floats = c->a->bytes / 4;
    if (c->a->copy) { /* thread t copies its share of the first half onto the second half */
        int64_t half = floats / 2;
        char *base = (char *)(uintptr_t)c->a->buf;
        for (int64_t t = t0; t < t1; t++) {
            int64_t from = half * t / T, to = half * (t + 1) / T;
            for (int64_t k = 0; k < c->a->passes; k++)
                c->copy(base + (half + from) * 4, base + from * 4, to - from, c->nt);
            c->a->sink[t] = ((const float *)c->a->buf)[half + from];
        }
        return;
    }
    for (int64_t t = t0; t < t1; t++) {
        int64_t from = floats * t / T, to = floats * (t + 1) / T;
        float s = 0.0f;
        for (int64_t k = 0; k < c->a->passes; k++) s += c->uk((const float *)c->a->buf + from, (to - from) * 4);
        c->a->sink[t] = s;
    }
}

int pb_read_bandwidth(const void *args) {
    const char *k = "read_bandwidth";
    CHECK(pb_check_args(args, k));
    const pb_read_args *a = (const pb_read_args *)args;
    CHECK(pb_check_exec(&a->exec, k));
    if (a->buf == NULL || a->sink == NULL || a->bytes < 4 || a->passes < 1 || (a->copy != 0 && a->copy != 1) ||
        (a->copy && a->bytes < 8 * (int64_t)a->exec.num_threads))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: buf, sink (one float per thread), bytes >= 4 (copy: >= 8 per "
                       "thread), passes >= 1 and copy 0 or 1 required", k);
    const pb_isa *isa = pb_active_isa();
    read_ctx c = {isa->read_sum, isa->copy[pb_dtype_index(PB_DTYPE_F32)], pb_stream_worth(a->bytes), a};
    return pb_parallel_for(a->exec.num_threads, a->exec.num_threads, read_range, &c);
}
