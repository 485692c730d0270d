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
