/* The native timing loop: times any kernel by name with no Python inside the loop. */
#include <time.h>

#include "internal.h"

int64_t pb_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t pb_timer_resolution_ns(void) {
    struct timespec ts;
    if (clock_getres(CLOCK_MONOTONIC, &ts) != 0) return 1;
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int lookup(const char *kernel, const void *args, pb_kernel_fn *fn) {
    if (kernel == NULL || args == NULL)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "timing: kernel name and args must not be NULL");
    *fn = pb_kernel_lookup(kernel);
    if (*fn == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "timing: no kernel named '%s'", kernel);
    return PB_OK;
}

int pb_time_warm(const char *kernel, const void *args, int64_t iters, int64_t *elapsed_ns) {
    pb_kernel_fn fn;
    int rc = lookup(kernel, args, &fn);
    if (rc != PB_OK) return rc;
    if (iters < 1 || elapsed_ns == NULL)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "pb_time_warm: iters=%lld must be >= 1 and elapsed_ns non-NULL",
                       (long long)iters);
    int64_t t0 = pb_now_ns();
    for (int64_t i = 0; i < iters; i++) {
        rc = fn(args);
        if (rc != PB_OK) return rc;
    }
    *elapsed_ns = pb_now_ns() - t0;
    return PB_OK;
}

typedef struct {
    const unsigned char *buf;
    int64_t bytes;
    volatile unsigned char sink;
} evict_ctx;

static void evict_range(void *ctx, int64_t begin, int64_t end) {
    evict_ctx *e = (evict_ctx *)ctx;
    unsigned char acc = 0;
    /* one read per 64-byte line of this thread's share */
    int64_t lines = (e->bytes + 63) / 64;
    int64_t from = lines * begin / 1024, to = lines * end / 1024;
    for (int64_t l = from; l < to; l++) acc ^= e->buf[l * 64];
    e->sink ^= acc;
}

/* Evicts caches by reading one byte per line of buf with `threads` threads (each core's L2 and
 * the shared L3), then quiesces the pool so the next (timed) call starts from sleeping workers
 * whatever the spin policy: both sides of a cold cell start alike. */
int pb_evict(void *buf, int64_t bytes, int32_t threads) {
    if (buf == NULL || bytes < 64 || threads < 1 || threads > pb_pool_max_threads())
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "pb_evict: need a buffer of >= 64 bytes and 1..%d threads (got %d)",
                       (int)pb_pool_max_threads(), (int)threads);
    evict_ctx e = {buf, bytes, 0};
    /* 1024 slices split across the threads */
    int rc = pb_parallel_for(threads, 1024, evict_range, &e);
    if (rc != PB_OK) return rc;
    return pb_pool_quiesce();
}

int pb_time_cold(const char *kernel, const void *args, int64_t calls, void *evict_buf, int64_t evict_bytes,
                 int32_t evict_threads, int64_t *per_call_ns) {
    pb_kernel_fn fn;
    int rc = lookup(kernel, args, &fn);
    if (rc != PB_OK) return rc;
    if (calls < 1 || per_call_ns == NULL)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "pb_time_cold: calls must be >= 1 and per_call_ns non-NULL");
    for (int64_t i = 0; i < calls; i++) {
        rc = pb_evict(evict_buf, evict_bytes, evict_threads);
        if (rc != PB_OK) return rc;
        int64_t t0 = pb_now_ns();
        rc = fn(args);
        int64_t t1 = pb_now_ns();
        if (rc != PB_OK) return rc;
        per_call_ns[i] = t1 - t0;
    }
    return PB_OK;
}
