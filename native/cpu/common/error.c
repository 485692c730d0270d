/* Status messages and argument checks shared by every kernel. */
#include <stdarg.h>
#include <stdio.h>

#include "../internal.h"

static _Thread_local char pb_error_message[512];

int pb_fail(int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pb_error_message, sizeof pb_error_message, fmt, ap);
    va_end(ap);
    return status;
}

void pb_clear_error(void) { pb_error_message[0] = '\0'; }

const char *pb_last_error(void) { return pb_error_message; }

int pb_check_exec(const pb_exec *ex, const char *kernel) {
    if (ex->device != PB_DEVICE_CPU)
        return pb_fail(PB_ERR_UNSUPPORTED, "%s: device %d is not built into this library (CPU only)",
                       kernel, (int)ex->device);
    if (ex->num_threads < 1 || ex->num_threads > pb_pool_max_threads())
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: num_threads=%d, expected 1..%d", kernel,
                       (int)ex->num_threads, (int)pb_pool_max_threads());
    return PB_OK;
}

int pb_dtype_index(int32_t dtype) {
    switch (dtype) {
    case PB_DTYPE_F32: return PB_DT_F32;
    case PB_DTYPE_F16: return PB_DT_F16;
    case PB_DTYPE_BF16: return PB_DT_BF16;
    default: return -1;
    }
}

size_t pb_dtype_size(int32_t dtype) { return dtype == PB_DTYPE_F32 ? 4 : 2; }

int pb_check_dtype(int32_t dtype, const char *kernel) {
    if (pb_dtype_index(dtype) < 0)
        return pb_fail(PB_ERR_UNSUPPORTED,
                       "%s: dtype %d not supported (expected 1=float32, 10=float16, 16=bfloat16)",
                       kernel, (int)dtype);
    return PB_OK;
}
