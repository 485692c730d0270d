/* The last-level cache size behind the non-temporal-store policy (see policy.h). */
#include <stdatomic.h>

#include "../internal.h"

#define PB_LLC_DEFAULT (INT64_C(32) << 20)
#define PB_LLC_MAX (INT64_C(1) << 40)

static _Atomic int64_t g_llc_bytes = PB_LLC_DEFAULT;

int pb_set_llc_bytes(int64_t bytes) {
    if (bytes < 0 || bytes > PB_LLC_MAX)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "pb_set_llc_bytes: bytes=%lld, expected 0 (the default, 32 MiB) .. 2^40",
                       (long long)bytes);
    atomic_store(&g_llc_bytes, bytes ? bytes : PB_LLC_DEFAULT);
    return PB_OK;
}

int64_t pb_llc_bytes(void) { return atomic_load(&g_llc_bytes); }

int pb_stream_worth(int64_t ws) { return ws > pb_llc_bytes() / 3; }

/* ---- the L1d and L2 sizes behind the GEMM's cache blocking (matmul.c) ---- */
#define PB_L1D_DEFAULT (INT64_C(32) << 10)
#define PB_L2_DEFAULT (INT64_C(1) << 20)
static _Atomic int64_t g_l1d_bytes = PB_L1D_DEFAULT;
static _Atomic int64_t g_l2_bytes = PB_L2_DEFAULT;

int pb_set_core_cache_bytes(int64_t l1d, int64_t l2) {
    if (l1d < 0 || l1d > (INT64_C(1) << 30) || l2 < 0 || l2 > PB_LLC_MAX)
        return pb_fail(PB_ERR_INVALID_ARGUMENT,
                       "pb_set_core_cache_bytes: l1d=%lld l2=%lld, expected 0 (the default) .. 1 GiB and 0 .. 2^40",
                       (long long)l1d, (long long)l2);
    atomic_store(&g_l1d_bytes, l1d ? l1d : PB_L1D_DEFAULT);
    atomic_store(&g_l2_bytes, l2 ? l2 : PB_L2_DEFAULT);
    return PB_OK;
}

int64_t pb_l1d_bytes(void) { return atomic_load(&g_l1d_bytes); }
int64_t pb_l2_bytes(void) { return atomic_load(&g_l2_bytes); }
