/* Portable "vectors": PB_LANES floats in a struct, plain C loops (the compiler vectorizes them
 * for the baseline ISA). Built with PB_LANES=4 as the fallback path that runs on any CPU, and
 * with PB_LANES=16 as "portable16", which exercises the 16-lane kernel logic (tails, pair
 * shuffles) that the AVX-512 path shares, on machines without AVX-512. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#ifndef PB_LANES
#error "define PB_LANES before including vec/portable.h"
#endif

typedef struct { float v[PB_LANES]; } vf;

#define PB_VLOOP(i) for (int i = 0; i < PB_LANES; i++)

static inline vf vf_zero(void) { vf r; PB_VLOOP(i) r.v[i] = 0.0f; return r; }
static inline vf vf_set1(float a) { vf r; PB_VLOOP(i) r.v[i] = a; return r; }
static inline vf vf_add(vf a, vf b) { PB_VLOOP(i) a.v[i] += b.v[i]; return a; }
static inline vf vf_sub(vf a, vf b) { PB_VLOOP(i) a.v[i] -= b.v[i]; return a; }
static inline vf vf_mul(vf a, vf b) { PB_VLOOP(i) a.v[i] *= b.v[i]; return a; }
/* a*b + c and c - a*b (fused only where the target has a fast fma: a libm call is far slower) */
#ifdef FP_FAST_FMAF
static inline vf vf_fmadd(vf a, vf b, vf c) { PB_VLOOP(i) c.v[i] = fmaf(a.v[i], b.v[i], c.v[i]); return c; }
static inline vf vf_fnmadd(vf a, vf b, vf c) { PB_VLOOP(i) c.v[i] = fmaf(-a.v[i], b.v[i], c.v[i]); return c; }
#else
static inline vf vf_fmadd(vf a, vf b, vf c) { PB_VLOOP(i) c.v[i] = a.v[i] * b.v[i] + c.v[i]; return c; }
static inline vf vf_fnmadd(vf a, vf b, vf c) { PB_VLOOP(i) c.v[i] = c.v[i] - a.v[i] * b.v[i]; return c; }
#endif
/* max returns b when either is NaN (x86 semantics, kept identical on every path) */
static inline vf vf_max(vf a, vf b) { PB_VLOOP(i) a.v[i] = a.v[i] > b.v[i] ? a.v[i] : b.v[i]; return a; }
static inline float vf_hmax(vf a) { float m = a.v[0]; for (int i = 1; i < PB_LANES; i++) m = a.v[i] > m ? a.v[i] : m; return m; }
static inline float vf_hsum(vf a) { float s = 0.0f; PB_VLOOP(i) s += a.v[i]; return s; }
static inline void vf_hsum4(vf a, vf b, vf c, vf d, float *out) {
    out[0] = vf_hsum(a);
    out[1] = vf_hsum(b);
    out[2] = vf_hsum(c);
    out[3] = vf_hsum(d);
}
static inline vf vf_shl23(vf a) {
    PB_VLOOP(i) {
        uint32_t bits;
        memcpy(&bits, &a.v[i], 4);
        bits <<= 23;
        memcpy(&a.v[i], &bits, 4);
    }
    return a;
}
/* pairs: (a0,a1,a2,a3,...) -> (a1,a0,a3,a2,...) */
static inline vf vf_swap_pairs(vf a) { vf r; for (int i = 0; i < PB_LANES; i += 2) { r.v[i] = a.v[i + 1]; r.v[i + 1] = a.v[i]; } return r; }

/* loads and stores, by element type */
/* PB_LANES bytes at p, each (byte >> shift) & mask, as f32 (MatMulNBits' weight fields) */
static inline vf vf_load_u8_field(const uint8_t *p, int shift, int mask) {
    vf r;
    PB_VLOOP(i) r.v[i] = (float)((p[i] >> shift) & mask);
    return r;
}
/* LANES bytes as f32 (MatMulNBits' zero points a byte a block in B's packed copy) */
static inline vf vf_load_u8(const uint8_t *p) {
    vf r;
    PB_VLOOP(i) r.v[i] = (float)p[i];
    return r;
}
/* int8 dot products (MatMulNBits accuracy 4), as in vec/avx512.h: PB_LANES int32 lanes, or the
 * 4 * PB_LANES bytes at the same place */
typedef union { int32_t v[PB_LANES]; uint8_t b[4 * PB_LANES]; } vi;
static inline vi vi_zero(void) { vi r; PB_VLOOP(i) r.v[i] = 0; return r; }
static inline vi vi_load(const void *p) { vi r; memcpy(r.b, p, sizeof r.b); return r; }
static inline vi vi_load_once(const void *p) { return vi_load(p); } /* vec/avx512.h says why it exists */
static inline vi vi_u8_field(vi v, int shift, int mask) {
    for (int i = 0; i < 4 * PB_LANES; i++) v.b[i] = (uint8_t)((v.b[i] >> shift) & mask);
    return v;
}
static inline vi vi_dot(vi acc, vi u, vi s) {
    PB_VLOOP(i) for (int j = 4 * i; j < 4 * i + 4; j++) acc.v[i] += (int32_t)u.b[j] * (int32_t)(int8_t)s.b[j];
    return acc;
}
static inline vi vi_dot_u8(vi acc, vi u, vi s) { return vi_dot(acc, u, s); }
static inline vi vi_add32(vi a, vi b) { PB_VLOOP(i) a.v[i] += b.v[i]; return a; }
static inline vi vi_sra32(vi a, int n) { PB_VLOOP(i) a.v[i] >>= n; return a; } /* gcc: arithmetic */
#define PB_VI_DOT_CHAINS 2 /* as on AVX-512, so that portable16 runs the AVX-512 path's chain logic */
#define PB_VI_DOT_U8_EXACT 1
static inline vf vi_to_vf(vi a) { vf r; PB_VLOOP(i) r.v[i] = (float)a.v[i]; return r; }
static inline vf vi_as_vf(vi a) { vf r; memcpy(r.v, a.v, sizeof r.v); return r; }
static inline vi vi_load_u8_lanes(const uint8_t *p) { vi r; PB_VLOOP(i) r.v[i] = p[i]; return r; }
static inline vi vi_srl32(vi a, int n) { PB_VLOOP(i) a.v[i] = (int32_t)((uint32_t)a.v[i] >> n); return a; }
static inline vf vf_lut(vf table, vi idx) { vf r; PB_VLOOP(i) r.v[i] = table.v[(uint32_t)idx.v[i] % PB_LANES]; return r; }
static inline void vi_load_t(const uint8_t *base, int64_t stride, vi w[PB_LANES]) {
    for (int i = 0; i < PB_LANES; i++) PB_VLOOP(c) memcpy(&w[i].v[c], base + c * stride + 4 * i, 4);
}
static inline vi vi_gather_u32(const uint8_t *base, int64_t stride) {
    vi r;
    PB_VLOOP(i) memcpy(&r.v[i], base + i * stride, 4);
    return r;
}
static inline vf vi_u32_field(vi w, int shift, int mask) {
    vf r;
    PB_VLOOP(i) r.v[i] = (float)(((uint32_t)w.v[i] >> shift) & (uint32_t)mask);
    return r;
}
static inline vf vf_load_u_fields(const uint8_t *p, int bits) {
    vf r;
    PB_VLOOP(i) r.v[i] = (float)((p[i * bits / 8] >> (i * bits % 8)) & ((1 << bits) - 1));
    return r;
}
static inline vf vf_abs(vf a) { PB_VLOOP(i) a.v[i] = fabsf(a.v[i]); return a; }
static inline void vf_to_i8(vf a, int8_t *out) {
    PB_VLOOP(i) {
        const float q = nearbyintf(a.v[i]); /* the default mode: half to even */
        out[i] = (int8_t)(q > 127.0f ? 127.0f : q < -128.0f ? -128.0f : q == q ? q : 0.0f);
    }
}
static inline vf vf_load_f32(const float *p) { vf r; memcpy(r.v, p, sizeof r.v); return r; }
static inline void vf_store_f32(float *p, vf a) { memcpy(p, a.v, sizeof a.v); }

/* one float16 as f32, inline (F16C where the path has it): for per-block scalars in hot loops */
static inline float vf_f16_scalar(uint16_t h) { return pb_f16_to_f32(h); }
static inline vf vf_load_f16(const uint16_t *p) { vf r; PB_VLOOP(i) r.v[i] = pb_f16_to_f32(p[i]); return r; }
static inline void vf_store_f16(uint16_t *p, vf a) { PB_VLOOP(i) p[i] = pb_f32_to_f16(a.v[i]); }

static inline vf vf_load_bf16(const uint16_t *p) { vf r; PB_VLOOP(i) r.v[i] = pb_bf16_to_f32(p[i]); return r; }
static inline void vf_store_bf16(uint16_t *p, vf a) { PB_VLOOP(i) p[i] = pb_f32_to_bf16(a.v[i]); }
static inline void vf_store_bf16_rne(uint16_t *p, vf a) { vf_store_bf16(p, a); }

static inline int pb_isa_portable_supported(void) { return 1; }

/* bf16 pairs (MatMul's bf16 dot path, kernels/matmul.inc.c): PB_LANES 32-bit words, each two bf16
 * (low half: the even k). vf_dpbf16 computes what AVX512-BF16's vdpbf16ps does, so portable16
 * runs the AVX-512 path's pair logic on any CPU: per lane acc += odd product, rounded, then +=
 * even product, rounded; inputs and each rounded sum flushed to zero when denormal (DAZ/FTZ). The
 * products are exact (8 x 8 bits), so each step is one double sum rounded to f32. On a Zen 4
 * (2026-12-06, a one-off check whose script was not kept) this matched vdpbf16ps bit for bit on
 * 10^6 random lanes, a third of them with denormal accumulators or products; the even-first order
 * or one rounding for both products differed in 5-14% of lanes. tests/kernels_ffi/test_matmul.py
 * checks it against a numpy model on any CPU and, where the instruction runs, against it with
 * products, sums and inputs in f32's denormal range. */
typedef struct { uint32_t w[PB_LANES]; } vbp;
static inline vbp vbp_load(const uint32_t *p) { vbp r; memcpy(r.w, p, sizeof r.w); return r; }
static inline vbp vbp_set1(uint32_t x) { vbp r; PB_VLOOP(i) r.w[i] = x; return r; }
static inline float pb_dp_ftz(float f) { return fabsf(f) < FLT_MIN ? copysignf(0.0f, f) : f; }
static inline double pb_dp_bf16(uint32_t half) {
    uint32_t u = (half & 0xffffu) << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return (double)pb_dp_ftz(f);
}
static inline vf vf_dpbf16(vf acc, vbp a, vbp b) {
    PB_VLOOP(i) {
        float t = pb_dp_ftz((float)((double)pb_dp_ftz(acc.v[i]) + pb_dp_bf16(a.w[i] >> 16) * pb_dp_bf16(b.w[i] >> 16)));
        acc.v[i] = pb_dp_ftz((float)((double)t + pb_dp_bf16(a.w[i]) * pb_dp_bf16(b.w[i])));
    }
    return acc;
}
