/* AVX-512 (F, BW, VL, DQ) + AVX512-BF16 + AVX512-VNNI + F16C: 16 f32 lanes. float16 converts in registers
 * (vcvtph2ps / vcvtps2ph), bfloat16 loads by shift and stores by integer round to nearest even;
 * AVX512-BF16 (vdpbf16ps) is used by the bf16 peak probe. */
#include <immintrin.h>
#include <stdint.h>

#define PB_LANES 16
typedef __m512 vf;

static inline vf vf_zero(void) { return _mm512_setzero_ps(); }
static inline vf vf_set1(float a) { return _mm512_set1_ps(a); }
static inline vf vf_add(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline vf vf_sub(vf a, vf b) { return _mm512_sub_ps(a, b); }
static inline vf vf_mul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline vf vf_fmadd(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline vf vf_fnmadd(vf a, vf b, vf c) { return _mm512_fnmadd_ps(a, b, c); }
static inline vf vf_max(vf a, vf b) { return _mm512_max_ps(a, b); }
static inline float vf_hmax(vf a) { return _mm512_reduce_max_ps(a); }
static inline float vf_hsum(vf a) { return _mm512_reduce_add_ps(a); }
/* out[0..3] = horizontal sums of a, b, c, d: each folded to 8 lanes, then three hadds */
static inline __m256 pb_fold256(vf a) { return _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1)); }
static inline void vf_hsum4(vf a, vf b, vf c, vf d, float *out) {
    __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(pb_fold256(a), pb_fold256(b)), _mm256_hadd_ps(pb_fold256(c), pb_fold256(d)));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1)));
}
static inline vf vf_shl23(vf a) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_castps_si512(a), 23)); }
static inline vf vf_swap_pairs(vf a) { return _mm512_permute_ps(a, 0xB1); }


/* PB_LANES bytes at p, each (byte >> shift) & mask, as f32 (MatMulNBits' weight fields) */
static inline vf vf_load_u8_field(const uint8_t *p, int shift, int mask) {
    __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    v = _mm512_and_si512(_mm512_srl_epi32(v, _mm_cvtsi32_si128(shift)), _mm512_set1_epi32(mask));
    return _mm512_cvtepi32_ps(v);
}
/* LANES bytes as f32 (MatMulNBits' zero points a byte a block in B's packed copy) */
static inline vf vf_load_u8(const uint8_t *p) { return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p))); }
/* int8 dot products (MatMulNBits accuracy 4): a vi is PB_LANES int32 lanes, or the 4 * PB_LANES
 * bytes they are made of; vi_dot adds to lane l the four products of bytes 4l..4l+3, u unsigned
 * and s signed (AVX512-VNNI vpdpbusd: exact, no saturation, for any u8) */
typedef __m512i vi;
static inline vi vi_zero(void) { return _mm512_setzero_si512(); }
static inline vi vi_load(const void *p) { return _mm512_loadu_si512(p); }
/* the same, kept in a register: gcc otherwise folds a load used twice into both uses (seen in a
 * probe of MatMulNBits' accuracy-4 loop: two vpandd reading one line of B, where loads bind) */
static inline vi vi_load_once(const void *p) {
    vi v = _mm512_loadu_si512(p);
    __asm__("" : "+v"(v));
    return v;
}
/* each byte (b >> shift) & mask (16-bit shifts: the mask drops the bits shifted in from the next byte) */
static inline vi vi_u8_field(vi v, int shift, int mask) {
    return _mm512_and_si512(_mm512_srl_epi16(v, _mm_cvtsi32_si128(shift)), _mm512_set1_epi8((char)mask));
}
static inline vi vi_dot(vi acc, vi u, vi s) { return _mm512_dpbusd_epi32(acc, u, s); }
static inline vi vi_dot_u8(vi acc, vi u, vi s) { return _mm512_dpbusd_epi32(acc, u, s); }
static inline vi vi_add32(vi a, vi b) { return _mm512_add_epi32(a, b); }
static inline vi vi_sra32(vi a, int n) { return _mm512_srai_epi32(a, (unsigned)n); }
/* vpdpbusd adds into its accumulator in place: a chain of them waits 4 cycles each where one can
 * issue every cycle (Zen 4), so sums run in this many independent chains (MatMulNBits accuracy 4) */
#define PB_VI_DOT_CHAINS 2
#define PB_VI_DOT_U8_EXACT 1 /* vi_dot exact for any u8 (no int16 step) */
static inline vf vi_to_vf(vi a) { return _mm512_cvtepi32_ps(a); }
static inline vf vi_as_vf(vi a) { return _mm512_castsi512_ps(a); } /* the same bits */
/* PB_LANES bytes at p zero-extended to int32 lanes; lanes shifted right; lane l = table[idx_l mod
 * PB_LANES] (vpermps reads the index's low 4 bits: MatMulNBits' weight fields as indices) */
static inline vi vi_load_u8_lanes(const uint8_t *p) { return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)); }
static inline vi vi_srl32(vi a, int n) { return _mm512_srli_epi32(a, (unsigned)n); }
static inline vf vf_lut(vf table, vi idx) { return _mm512_permutexvar_ps(idx, table); }
/* w[i] lane c = the 4-byte word i of the 16 at base + c * stride (16 rows of 64 bytes transposed:
 * MatMulNBits' panels, a word of 16 columns a vector) */
static inline void vi_load_t(const uint8_t *base, int64_t stride, vi w[16]) {
    __m512i t[16], u[16];
    for (int i = 0; i < 16; i++) t[i] = _mm512_loadu_si512((const void *)(base + i * stride));
    for (int i = 0; i < 16; i += 2) { /* lane L: (a 4L, b 4L, a 4L+1, b 4L+1), (a 4L+2, ...) */
        u[i] = _mm512_unpacklo_epi32(t[i], t[i + 1]);
        u[i + 1] = _mm512_unpackhi_epi32(t[i], t[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) { /* t[i + j] lane L: word 4L + j of rows i .. i + 3 */
        t[i] = _mm512_unpacklo_epi64(u[i], u[i + 2]);
        t[i + 1] = _mm512_unpackhi_epi64(u[i], u[i + 2]);
        t[i + 2] = _mm512_unpacklo_epi64(u[i + 1], u[i + 3]);
        t[i + 3] = _mm512_unpackhi_epi64(u[i + 1], u[i + 3]);
    }
    for (int j = 0; j < 4; j++) { /* the 4 x 4 transpose of 128-bit lanes of t[j], t[4 + j], t[8 + j], t[12 + j] */
        const __m512i v0 = _mm512_shuffle_i32x4(t[j], t[4 + j], 0x44), v1 = _mm512_shuffle_i32x4(t[j], t[4 + j], 0xEE);
        const __m512i v2 = _mm512_shuffle_i32x4(t[8 + j], t[12 + j], 0x44), v3 = _mm512_shuffle_i32x4(t[8 + j], t[12 + j], 0xEE);
        w[j] = _mm512_shuffle_i32x4(v0, v2, 0x88);
        w[4 + j] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
        w[8 + j] = _mm512_shuffle_i32x4(v1, v3, 0x88);
        w[12 + j] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
    }
}
/* lane l = the 4 bytes at base + l * stride (MatMulNBits' panels: one word of each of 16 columns;
 * 15 x stride must fit an int32) */
static inline vi vi_gather_u32(const uint8_t *base, int64_t stride) {
    const __m512i l = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    return _mm512_i32gather_epi32(_mm512_mullo_epi32(l, _mm512_set1_epi32((int)stride)), (const void *)base, 1);
}
/* each int32 lane (w >> shift) & mask, as f32 */
static inline vf vi_u32_field(vi w, int shift, int mask) {
    return _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(w, (unsigned)shift), _mm512_set1_epi32(mask)));
}
/* lane i = field i of the bits-wide fields packed lowest first from p (16 lanes: 16 x bits / 8
 * bytes read) */
static inline vf vf_load_u_fields(const uint8_t *p, int bits) {
    const __m512i i = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i bit = _mm512_mullo_epi32(i, _mm512_set1_epi32(bits));
    const __m512i bytes = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8((__mmask16)((1u << (2 * bits)) - 1), p));
    const __m512i v = _mm512_srlv_epi32(_mm512_permutexvar_epi32(_mm512_srli_epi32(bit, 3), bytes),
                                        _mm512_and_si512(bit, _mm512_set1_epi32(7)));
    return _mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32((1 << bits) - 1)));
}
/* |a| (the sign bit cleared; NaN stays NaN) */
static inline vf vf_abs(vf a) { return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7fffffff))); }
/* each lane rounded half to even (the default rounding mode) and saturated to int8, into out[0..LANES),
 * a NaN lane 0 (MatMulNBits' int8 activations: 0 x inf where a block's max is so small that 127 / max
 * overflows) */
static inline void vf_to_i8(vf a, int8_t *out) {
    a = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(a, a, _CMP_ORD_Q), a);
    a = _mm512_min_ps(_mm512_max_ps(a, _mm512_set1_ps(-128.0f)), _mm512_set1_ps(127.0f));
    _mm_storeu_si128((__m128i *)out, _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(a)));
}
static inline vf vf_load_f32(const float *p) { return _mm512_loadu_ps(p); }
static inline void vf_store_f32(float *p, vf a) { _mm512_storeu_ps(p, a); }

/* one float16 as f32, inline (F16C where the path has it): for per-block scalars in hot loops */
static inline float vf_f16_scalar(uint16_t h) { return _cvtsh_ss(h); }
static inline vf vf_load_f16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
static inline void vf_store_f16(uint16_t *p, vf a) {
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

static inline vf vf_load_bf16(const uint16_t *p) {
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
/* f32 -> bfloat16 by integer round to nearest even (vcvtneps2bf16 would flush denormals to
 * zero), then vpmovdw packs the high halves. vf_store_bf16 sends NaN lanes through with their
 * quiet bit set; vf_store_bf16_rne (bf16-input kernels) skips that, as in vec/avx2.h. */
static inline __m512i pb_bf16_round_bits(vf a) {
    __m512i u = _mm512_castps_si512(a);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    return _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
}
static inline void pb_bf16_store_high_halves(uint16_t *p, __m512i r) {
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16)));
}
static inline void vf_store_bf16(uint16_t *p, vf a) {
    __m512i r = pb_bf16_round_bits(a);
    __m512i qnan = _mm512_or_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x00400000));
    r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q), qnan);
    pb_bf16_store_high_halves(p, r);
}
static inline void vf_store_bf16_rne(uint16_t *p, vf a) { pb_bf16_store_high_halves(p, pb_bf16_round_bits(a)); }

/* bf16 pairs (MatMul's bf16 dot path): 16 words of two bf16 each (low half: the even k);
 * vf_dpbf16 is vdpbf16ps (vec/portable.h states its semantics and emulates them) */
typedef __m512i vbp;
static inline vbp vbp_load(const uint32_t *p) { return _mm512_loadu_si512((const void *)p); }
static inline vbp vbp_set1(uint32_t x) { return _mm512_set1_epi32((int)x); }
static inline vf vf_dpbf16(vf acc, vbp a, vbp b) { return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b); }

static inline int pb_isa_avx512_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vnni") &&
           __builtin_cpu_supports("f16c") &&
           __builtin_cpu_supports("fma");
}
