/* Argument checks shared by every entry point: one meaning of "overlap" for the whole library.
 * Each returns PB_OK or sets the error (pb_fail) and returns its status; CHECK returns it on. */
#ifndef PB_COMMON_CHECKS_H
#define PB_COMMON_CHECKS_H

#include <stddef.h>
#include <stdint.h>

#define CHECK(x)                      \
    do {                              \
        int rc_ = (x);                \
        if (rc_ != PB_OK) return rc_; \
    } while (0)

int pb_fail(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* the args pointer every entry point takes */
static inline int pb_check_args(const void *args, const char *kernel) {
    if (args == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: args is NULL", kernel);
    return PB_OK;
}

/* [p, p + pn) and [q, q + qn) share a byte. A NULL pointer or an empty range overlaps nothing
 * (an absent optional tensor; nothing is read or written through it). */
static inline int pb_overlap(const void *p, size_t pn, const void *q, size_t qn) {
    if (p == NULL || q == NULL || pn == 0 || qn == 0) return 0;
    const uintptr_t a = (uintptr_t)p, b = (uintptr_t)q;
    return a < b + qn && b < a + pn;
}

/* pb_overlap, except that the very same range (in place: y == x, of x's size) is allowed: the
 * rule of every op that may run in place */
static inline int pb_overlap_unless_same(const void *p, size_t pn, const void *q, size_t qn) {
    if (p == q && pn == qn) return 0;
    return pb_overlap(p, pn, q, qn);
}

/* Element counts of every op stay below this: their byte counts (x 8 at most) then fit in int64
 * with room to spare. */
#define PB_SIZE_LIMIT (INT64_MAX / 16)
/* attention: the longest head, and the bound on any one tensor's elements */
#define PB_ATT_MAX_HEAD 1024
#define PB_ATT_LIMIT (INT64_C(1) << 40)

/* *out = a * b for a, b >= 0 when the product stays below PB_SIZE_LIMIT; 0 (*out untouched) when not */
static inline int pb_mul_ok(int64_t a, int64_t b, int64_t *out) {
    if (a != 0 && b > PB_SIZE_LIMIT / a) return 0;
    *out = a * b;
    return 1;
}

#endif
