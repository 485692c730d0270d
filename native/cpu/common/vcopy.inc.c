/* Byte copies, streaming copies and zero fills, once per ISA file (the data-movement families
 * and the copy microkernel use them). Where the ISA has AVX2 (the avx2 and avx512 units) in
 * 32-byte vectors; elsewhere memcpy/memset. */
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#if defined(__AVX2__)
/* n >= 32 bytes in 32-byte vectors; the last vector may overlap bytes already written (with the
 * same values: src and dst never overlap) */
static inline void pb_mv_copy_vec(unsigned char *d, const unsigned char *s, size_t n) {
    size_t i = 0;
    for (; i + 128 <= n; i += 128) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(s + i)), b = _mm256_loadu_si256((const __m256i *)(s + i + 32));
        __m256i c = _mm256_loadu_si256((const __m256i *)(s + i + 64)), e = _mm256_loadu_si256((const __m256i *)(s + i + 96));
        _mm256_storeu_si256((__m256i *)(d + i), a);
        _mm256_storeu_si256((__m256i *)(d + i + 32), b);
        _mm256_storeu_si256((__m256i *)(d + i + 64), c);
        _mm256_storeu_si256((__m256i *)(d + i + 96), e);
    }
    for (; i + 32 <= n; i += 32) _mm256_storeu_si256((__m256i *)(d + i), _mm256_loadu_si256((const __m256i *)(s + i)));
    if (i < n) _mm256_storeu_si256((__m256i *)(d + n - 32), _mm256_loadu_si256((const __m256i *)(s + n - 32)));
}

/* the same with non-temporal stores (whole lines straight to memory, the output does not evict
 * the input from the caches); the caller fences (pb_mv_fence) before its work is done */
static inline void pb_mv_stream_vec(unsigned char *d, const unsigned char *s, size_t n) {
    size_t head = (32 - ((uintptr_t)d & 31)) & 31;
    if (n < 256 + head) {
        pb_mv_copy_vec(d, s, n);
        return;
    }
    if (head) pb_mv_copy_vec(d, s, 32); /* an unaligned first vector; streaming starts aligned */
    size_t i = head;
    for (; i + 128 <= n; i += 128) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(s + i)), b = _mm256_loadu_si256((const __m256i *)(s + i + 32));
        __m256i c = _mm256_loadu_si256((const __m256i *)(s + i + 64)), e = _mm256_loadu_si256((const __m256i *)(s + i + 96));
        _mm256_stream_si256((__m256i *)(d + i), a);
        _mm256_stream_si256((__m256i *)(d + i + 32), b);
        _mm256_stream_si256((__m256i *)(d + i + 64), c);
        _mm256_stream_si256((__m256i *)(d + i + 96), e);
    }
    for (; i + 32 <= n; i += 32) _mm256_stream_si256((__m256i *)(d + i), _mm256_loadu_si256((const __m256i *)(s + i)));
    if (i < n) _mm256_storeu_si256((__m256i *)(d + n - 32), _mm256_loadu_si256((const __m256i *)(s + n - 32)));
}
#endif

static inline void pb_mv_fence(int nt) {
#if defined(__AVX2__)
    if (nt) _mm_sfence();
#else
    (void)nt;
#endif
}

/* Copy `bytes` (no overlap). Short runs inline (a call costs as much as moving a 256-byte head
 * row); long ones in vectors -- glibc's memcpy takes `rep movsb` for them, which moved half as
 * many bytes per second here -- or, with nt, with non-temporal stores. */
static inline void pb_mv_copy(void *dst, const void *src, size_t bytes, int nt) {
    unsigned char *d = (unsigned char *)dst;
    const unsigned char *s = (const unsigned char *)src;
#if defined(__AVX2__)
    if (bytes >= 32) {
        if (nt)
            pb_mv_stream_vec(d, s, bytes);
        else
            pb_mv_copy_vec(d, s, bytes);
        return;
    }
#else
    (void)nt;
    if (bytes > 512) {
        memcpy(dst, src, bytes);
        return;
    }
    size_t j = 0;
    for (; j + 32 <= bytes; j += 32) __builtin_memcpy(d + j, s + j, 32);
    d += j, s += j, bytes -= j;
#endif
    size_t i = 0;
    if (i + 16 <= bytes) {
        __builtin_memcpy(d + i, s + i, 16);
        i += 16;
    }
    for (; i + 4 <= bytes; i += 4) __builtin_memcpy(d + i, s + i, 4);
    for (; i < bytes; i++) d[i] = s[i];
}
#define pb_mv_copy_bytes(d, s, n) pb_mv_copy((d), (s), (n), 0)

/* Zero `bytes`. */
static inline void pb_mv_zero(void *dst, size_t bytes) {
#if defined(__AVX2__)
    unsigned char *d = (unsigned char *)dst;
    if (bytes >= 32) {
        const __m256i z = _mm256_setzero_si256();
        size_t i = 0;
        for (; i + 32 <= bytes; i += 32) _mm256_storeu_si256((__m256i *)(d + i), z);
        if (i < bytes) _mm256_storeu_si256((__m256i *)(d + bytes - 32), z);
        return;
    }
#endif
    memset(dst, 0, bytes);
}
