/* Once per ISA file: the few vector operations beyond the shared vf_* API that several families
 * need (division, min, abs, -abs, a per-lane select, a reciprocal) and non-temporal stores. */
#ifndef PB_VEXTRA_ONCE
#define PB_VEXTRA_ONCE
#if defined(PB_VLOOP) /* vec/portable.h (4 or 16 lanes of plain C) */
static inline vf pbe_div(vf a, vf b) { PB_VLOOP(i) a.v[i] /= b.v[i]; return a; }
static inline vf pbe_min(vf a, vf b) { PB_VLOOP(i) a.v[i] = a.v[i] < b.v[i] ? a.v[i] : b.v[i]; return a; }
static inline vf pbe_abs(vf a) { PB_VLOOP(i) a.v[i] = fabsf(a.v[i]); return a; }
static inline vf pbe_nabs(vf a) { PB_VLOOP(i) a.v[i] = -fabsf(a.v[i]); return a; }
/* a < b ? x : y, per lane (false for NaN) */
static inline vf pbe_sel_lt(vf a, vf b, vf x, vf y) { PB_VLOOP(i) y.v[i] = a.v[i] < b.v[i] ? x.v[i] : y.v[i]; return y; }
static inline vf pbe_rcp(vf a) { PB_VLOOP(i) a.v[i] = 1.0f / a.v[i]; return a; } /* exact here */
#elif PB_LANES == 8 /* vec/avx2.h */
static inline vf pbe_div(vf a, vf b) { return _mm256_div_ps(a, b); }
static inline vf pbe_min(vf a, vf b) { return _mm256_min_ps(a, b); }
static inline vf pbe_abs(vf a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
static inline vf pbe_nabs(vf a) { return _mm256_or_ps(_mm256_set1_ps(-0.0f), a); }
static inline vf pbe_sel_lt(vf a, vf b, vf x, vf y) { return _mm256_blendv_ps(y, x, _mm256_cmp_ps(a, b, _CMP_LT_OQ)); }
static inline vf pbe_rcp(vf a) { return _mm256_rcp_ps(a); } /* relative error <= 1.5 * 2^-12 */
#elif PB_LANES == 16 /* vec/avx512.h */
static inline vf pbe_div(vf a, vf b) { return _mm512_div_ps(a, b); }
static inline vf pbe_min(vf a, vf b) { return _mm512_min_ps(a, b); }
static inline vf pbe_abs(vf a) { return _mm512_abs_ps(a); }
static inline vf pbe_nabs(vf a) {
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(a), _mm512_set1_epi32((int)0x80000000u)));
}
static inline vf pbe_sel_lt(vf a, vf b, vf x, vf y) { return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, b, _CMP_LT_OQ), y, x); }
static inline vf pbe_rcp(vf a) { return _mm512_rcp14_ps(a); } /* relative error <= 2^-14 */
#else
#error "vextra.inc.c: unknown vector ISA"
#endif

/* Non-temporal (streaming) stores of one vector, p aligned to the vector's bytes; 16-bit types
 * rounded as T_STORE rounds them (bf16: the _rne store). The portable paths store normally. */
#if defined(PB_VLOOP)
static inline void pbe_stream_f32(float *p, vf a) { vf_store_f32(p, a); }
static inline void pbe_stream_f16(uint16_t *p, vf a) { vf_store_f16(p, a); }
static inline void pbe_stream_bf16(uint16_t *p, vf a) { vf_store_bf16_rne(p, a); }
static inline void pbe_stream_fence(void) {}
#elif PB_LANES == 8
static inline void pbe_stream_f32(float *p, vf a) { _mm256_stream_ps(p, a); }
static inline void pbe_stream_f16(uint16_t *p, vf a) {
    _mm_stream_si128((__m128i *)p, _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
static inline void pbe_stream_bf16(uint16_t *p, vf a) {
    const __m256i pick = _mm256_setr_epi8(2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1,
                                          2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1);
    __m256i packed = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(pb_bf16_round_bits(a), pick), 0x08);
    _mm_stream_si128((__m128i *)p, _mm256_castsi256_si128(packed));
}
static inline void pbe_stream_fence(void) { _mm_sfence(); }
#else
static inline void pbe_stream_f32(float *p, vf a) { _mm512_stream_ps(p, a); }
static inline void pbe_stream_f16(uint16_t *p, vf a) {
    _mm256_stream_si256((__m256i *)p, _mm512_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
static inline void pbe_stream_bf16(uint16_t *p, vf a) {
    _mm256_stream_si256((__m256i *)p, _mm512_cvtepi32_epi16(_mm512_srli_epi32(pb_bf16_round_bits(a), 16)));
}
static inline void pbe_stream_fence(void) { _mm_sfence(); }
#endif
#endif /* PB_VEXTRA_ONCE */
