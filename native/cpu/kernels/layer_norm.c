/* The LayerNormalization family and RMSNormalization entry point: validate, then rows over the pool. */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>

#include "../internal.h"


/* ---- non-temporal output stores ----
 * Outputs beyond the caches are better streamed to memory (pb_stream_worth: no read for
 * ownership of each y line, and the inputs are not evicted by outputs nobody reads again in
 * this call). pb_layer_norm_stream_mode forces it on or off for tests. */
static _Atomic int g_stream_mode = -1;

int pb_layer_norm_stream_mode(int32_t mode) {
    if (mode < -1 || mode > 1) return -2;
    return atomic_exchange(&g_stream_mode, mode);
}

static int aligned32(const void *p) { return p == NULL || ((uintptr_t)p & 31) == 0; }

typedef struct {
    const void *p;
    size_t bytes;
    const char *name;
} norm_range;

static int ranges_overlap(const norm_range *a, const norm_range *b) { return pb_overlap(a->p, a->bytes, b->p, b->bytes); }

typedef struct {
    pb_layer_norm_ukernel uk;
    const pb_layer_norm_args *a;
    int stream;
} layer_norm_ctx;

static void layer_norm_range(void *ctx, int64_t r0, int64_t r1) {
    layer_norm_ctx *c = (layer_norm_ctx *)ctx;
    c->uk(c->a, r0, r1, c->stream);
}

int pb_layer_norm(const void *args) {
    const char *k = "layer_norm";
    CHECK(pb_check_args(args, k));
    const pb_layer_norm_args *a = (const pb_layer_norm_args *)args;
    CHECK(pb_check_exec(&a->exec, k));
    CHECK(pb_check_dtype(a->dtype, k));
    if (a->simplified != 0 && a->simplified != 1)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: simplified=%d, expected 0 or 1", k, (int)a->simplified);
    if (!isfinite(a->epsilon) || a->epsilon < 0.0f)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: epsilon=%g must be finite and >= 0", k, (double)a->epsilon);
    if (a->rows < 0 || a->hidden < 1)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: rows=%lld must be >= 0 and hidden=%lld >= 1", k,
                       (long long)a->rows, (long long)a->hidden);
    if (a->rows > INT64_MAX / 8 / a->hidden)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: rows*hidden overflows", k);
    if (a->skip == NULL) {
        if (a->skip_rows != 0)
            return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: skip_rows=%lld without a skip (expected 0)", k,
                           (long long)a->skip_rows);
    } else if (a->skip_rows < 1 || (a->rows > 0 && a->rows % a->skip_rows != 0)) {
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: skip_rows=%lld must be >= 1 and divide rows=%lld", k,
                       (long long)a->skip_rows, (long long)a->rows);
    }
    if (a->simplified && a->beta != NULL)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: beta is not defined for the simplified (RMS) form", k);
    if (a->simplified && a->mean != NULL)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: mean is not defined for the simplified (RMS) form", k);
    if (a->rows == 0) return PB_OK;
    if (a->x == NULL || a->scale == NULL || a->y == NULL)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: x, scale and y must not be NULL", k);

    const size_t es = pb_dtype_size(a->dtype);
    const size_t row_bytes = (size_t)a->hidden * es, all = (size_t)a->rows * row_bytes;
    const norm_range in[] = {
        {a->x, all, "x"}, {a->skip, (size_t)a->skip_rows * row_bytes, "skip"}, {a->bias, row_bytes, "bias"},
        {a->scale, row_bytes, "scale"}, {a->beta, row_bytes, "beta"},
    };
    const norm_range out[] = {
        {a->y, all, "y"}, {a->mean, (size_t)a->rows * sizeof(float), "mean"},
        {a->inv_std, (size_t)a->rows * sizeof(float), "inv_std"}, {a->sum, all, "sum"},
    };
    const int nin = (int)(sizeof in / sizeof in[0]), nout = (int)(sizeof out / sizeof out[0]);
    for (int o = 0; o < nout; o++) {
        for (int i = 0; i < nin; i++)
            if (ranges_overlap(&out[o], &in[i]))
                return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: output %s overlaps input %s", k, out[o].name, in[i].name);
        for (int p = o + 1; p < nout; p++)
            if (ranges_overlap(&out[o], &out[p]))
                return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: outputs %s and %s overlap", k, out[o].name, out[p].name);
    }
    int stream = 0, mode = atomic_load(&g_stream_mode);
    if (mode != 0 && (row_bytes & 31) == 0 && aligned32(a->y) && aligned32(a->sum)) {
        if (mode == 1) {
            stream = 1;
        } else {
            size_t ws = 0;
            for (int i = 0; i < nin; i++) ws += in[i].p ? in[i].bytes : 0;
            for (int o = 0; o < nout; o++) ws += out[o].p ? out[o].bytes : 0;
            stream = pb_stream_worth((int64_t)ws);
        }
    }
    layer_norm_ctx c = {pb_active_isa()->layer_norm[pb_dtype_index(a->dtype)], a, stream};
    int32_t threads = pb_threads_for(a->exec.num_threads, a->rows * a->hidden, PB_GRAIN_NORM);
    return pb_parallel_for(threads, a->rows, layer_norm_range, &c);
}
