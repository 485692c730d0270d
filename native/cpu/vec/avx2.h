/* AVX2 + FMA + F16C: 8 f32 lanes. float16 converts in registers with F16C, bfloat16 with
 * integer shifts (load) and round-to-nearest-even integer arithmetic (store). */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define PB_LANES 8
typedef __m256 vf;

static inline vf vf_zero(void) { return _mm256_setzero_ps(); }
static inline vf vf_set1(float a) { return _mm256_set1_ps(a); }
static inline vf vf_add(vf a, vf b) { return _mm256_add_ps(a, b); }
static inline vf vf_sub(vf a, vf b) { return _mm256_sub_ps(a, b); }
static inline vf vf_mul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static inline vf vf_fmadd(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
static inline vf vf_fnmadd(vf a, vf b, vf c) { return _mm256_fnmadd_ps(a, b, c); }
static inline vf vf_max(vf a, vf b) { return _mm256_max_ps(a, b); }
static inline float vf_hmax(vf a) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}
static inline float vf_hsum(vf a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
/* out[0..3] = horizontal sums of a, b, c, d (three hadds and one cross-half add) */
static inline void vf_hsum4(vf a, vf b, vf c, vf d, float *out) {
    __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1)));
}
/* reinterpret a's bits shifted left by 23: turns a biased integer held in the low mantissa
 * bits into the exponent field (exp's 2^n) */
static inline vf vf_shl23(vf a) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(a), 23)); }
static inline vf vf_swap_pairs(vf a) { return _mm256_permute_ps(a, 0xB1); }


/* PB_LANES bytes at p, each (byte >> shift) & mask, as f32 (MatMulNBits' weight fields) */
static inline vf vf_load_u8_field(const uint8_t *p, int shift, int mask) {
    __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    v = _mm256_and_si256(_mm256_srl_epi32(v, _mm_cvtsi32_si128(shift)), _mm256_set1_epi32(mask));
    return _mm256_cvtepi32_ps(v);
}
/* LANES bytes as f32 (MatMulNBits' zero points a byte a block in B's packed copy) */
static inline vf vf_load_u8(const uint8_t *p) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p))); }
/* int8 dot products (MatMulNBits accuracy 4), as in vec/avx512.h: a vi is PB_LANES int32 lanes or
 * 4 * PB_LANES bytes. Without VNNI, vpmaddubsw (u8 x s8 pairs into saturating int16) then vpmaddwd
 * by ones; exact while u <= 127 (a pair sums to at most 2 x 127 x 128 = 32512). vi_dot_u8 takes
 * any u8: u = lo + 16 hi, each nibble through that pair of instructions. */
typedef __m256i vi;
static inline vi vi_zero(void) { return _mm256_setzero_si256(); }
static inline vi vi_load(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
/* the same, kept in a register: gcc otherwise folds a load used twice into both uses (seen in a
 * probe of MatMulNBits' accuracy-4 loop: two vpandd reading one line of B, where loads bind) */
static inline vi vi_load_once(const void *p) {
    vi v = _mm256_loadu_si256((const __m256i *)p);
    __asm__("" : "+x"(v));
    return v;
}
static inline vi vi_u8_field(vi v, int shift, int mask) {
    return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(shift)), _mm256_set1_epi8((char)mask));
}
static inline vi vi_dot(vi acc, vi u, vi s) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
}
static inline vi vi_dot_u8(vi acc, vi u, vi s) {
    const vi lo = _mm256_and_si256(u, _mm256_set1_epi8(0x0f)), hi = vi_u8_field(u, 4, 0x0f);
    return _mm256_add_epi32(vi_dot(acc, lo, s), _mm256_slli_epi32(vi_dot(vi_zero(), hi, s), 4));
}
static inline vi vi_add32(vi a, vi b) { return _mm256_add_epi32(a, b); }
static inline vi vi_sra32(vi a, int n) { return _mm256_srai_epi32(a, n); }
/* vi_dot's chain is its last add (1 cycle); more chains would only spill 16 registers */
#define PB_VI_DOT_CHAINS 1
#define PB_VI_DOT_U8_EXACT 0 /* vpmaddubsw saturates pairs to int16: u8 above 15 may not be exact */
static inline vf vi_to_vf(vi a) { return _mm256_cvtepi32_ps(a); }
static inline vf vi_as_vf(vi a) { return _mm256_castsi256_ps(a); }
static inline vi vi_load_u8_lanes(const uint8_t *p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)); }
static inline vi vi_srl32(vi a, int n) { return _mm256_srli_epi32(a, n); }
static inline vf vf_lut(vf table, vi idx) { return _mm256_permutevar8x32_ps(table, idx); } /* the index's low 3 bits */
static inline void vi_load_t(const uint8_t *base, int64_t stride, vi w[8]) {
    __m256 r[8], t[8];
    for (int i = 0; i < 8; i++) r[i] = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i *)(base + i * stride)));
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
    }
    for (int j = 0; j < 4; j++) {
        w[j] = _mm256_castps_si256(_mm256_permute2f128_ps(r[j], r[4 + j], 0x20));
        w[4 + j] = _mm256_castps_si256(_mm256_permute2f128_ps(r[j], r[4 + j], 0x31));
    }
}
static inline vi vi_gather_u32(const uint8_t *base, int64_t stride) {
    const __m256i l = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_i32gather_epi32((const int *)base, _mm256_mullo_epi32(l, _mm256_set1_epi32((int)stride)), 1);
}
static inline vf vi_u32_field(vi w, int shift, int mask) {
    return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(w, shift), _mm256_set1_epi32(mask)));
}
/* lane i = field i of the bits-wide fields packed lowest first from p (8 lanes: bits bytes read) */
static inline vf vf_load_u_fields(const uint8_t *p, int bits) {
    uint64_t w = 0;
    memcpy(&w, p, (size_t)bits);
    const __m256i bit = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(bits));
    const __m256i bytes = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)w));
    const __m256i v = _mm256_srlv_epi32(_mm256_permutevar8x32_epi32(bytes, _mm256_srli_epi32(bit, 3)),
                                        _mm256_and_si256(bit, _mm256_set1_epi32(7)));
    return _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32((1 << bits) - 1)));
}
static inline vf vf_abs(vf a) { return _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff))); }
static inline void vf_to_i8(vf a, int8_t *out) {
    a = _mm256_and_ps(a, _mm256_cmp_ps(a, a, _CMP_ORD_Q)); /* NaN lanes 0 */
    a = _mm256_min_ps(_mm256_max_ps(a, _mm256_set1_ps(-128.0f)), _mm256_set1_ps(127.0f));
    const __m256i i = _mm256_cvtps_epi32(a);
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
    _mm_storel_epi64((__m128i *)out, _mm_packs_epi16(w, w));
}
static inline vf vf_load_f32(const float *p) { return _mm256_loadu_ps(p); }
static inline void vf_store_f32(float *p, vf a) { _mm256_storeu_ps(p, a); }

/* one float16 as f32, inline (F16C where the path has it): for per-block scalars in hot loops */
static inline float vf_f16_scalar(uint16_t h) { return _cvtsh_ss(h); }
static inline vf vf_load_f16(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
static inline void vf_store_f16(uint16_t *p, vf a) {
    _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

static inline vf vf_load_bf16(const uint16_t *p) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
/* f32 -> bfloat16, round to nearest even: add 0x7fff + lsb of the kept half, then take the
 * high 16 bits of each lane with one byte shuffle and one cross-lane permute. NaN lanes take
 * the input with its quiet bit set instead (so rounding cannot carry them into inf). */
static inline __m256i pb_bf16_round_bits(vf a) {
    __m256i u = _mm256_castps_si256(a);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    return _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
}
static inline void pb_bf16_store_high_halves(uint16_t *p, __m256i r) {
    const __m256i pick = _mm256_setr_epi8(2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1,
                                          2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1);
    __m256i packed = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(r, pick), 0x08);
    _mm_storeu_si128((__m128i *)p, _mm256_castsi256_si128(packed));
}
static inline void vf_store_bf16(uint16_t *p, vf a) {
    __m256i r = pb_bf16_round_bits(a);
    __m256i qnan = _mm256_or_si256(_mm256_castps_si256(a), _mm256_set1_epi32(0x00400000));
    r = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(qnan),
                                             _mm256_cmp_ps(a, a, _CMP_UNORD_Q)));
    pb_bf16_store_high_halves(p, r);
}
/* f32 -> bfloat16 round to nearest even without the NaN fix-up: exact for finite values and
 * infinities, and for every NaN whose low 16 payload bits are zero -- which is every NaN an op
 * can produce from bfloat16 inputs (their payloads come from the inputs or are the default
 * NaN). Kernels with bfloat16 inputs store with this; casts from arbitrary f32 do not. */
static inline void vf_store_bf16_rne(uint16_t *p, vf a) { pb_bf16_store_high_halves(p, pb_bf16_round_bits(a)); }

static inline int pb_isa_avx2_supported(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}
