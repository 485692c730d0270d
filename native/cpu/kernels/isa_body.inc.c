/*
 * The per-ISA kernel bodies. An isa/<name>.c file includes one vec/<name>.h (which defines
 * PB_LANES, the type vf and the vf_* operations), defines PB_ISA and PB_ISA_SUPPORTED, then
 * includes this file once. It instantiates every family file of families.inc once per dtype
 * and fills this path's table from kernels.def. Each microkernel is written once against the vf_*
 * API and instantiated per element type, so every path shares the same logic and differs only in the
 * vector operations. Names: pb_<dtype>_<op>__<isa>, e.g. pb_f16_softmax__avx2.
 */
#include <math.h>
#include <string.h>

#define PB_CAT_(a, b) a##b
#define PB_CAT(a, b) PB_CAT_(a, b)
#define PB_UK(dt, op) PB_CAT(PB_CAT(PB_CAT(pb_, dt), PB_CAT(_, op)), PB_CAT(__, PB_ISA))
#define PB_ISA_FN(name) PB_CAT(PB_CAT(pb_, name), PB_CAT(__, PB_ISA))

#include "../common/vexp.inc.c"
#include "../common/vextra.inc.c"
#include "../common/vcopy.inc.c"

/* MatMul's register tile (matmul.inc.c): MR rows of A x 2 vectors of B, 2 * MR accumulators.
 * 8 rows where the path has 32 vector registers (AVX-512, and portable16, which runs its logic):
 * 16 accumulators, 2 B vectors and a broadcast, and M = 16, 32, 128, 1024 fall in whole tiles
 * (with 6, 32 rows were five tiles and one of 2 rows, its 4 chains bound by the FMA latency:
 * 32 x 1024 x 1024 f32 at 1 thread was 1.17x ORT's time, Zen 5); 6 on AVX2's 16 (12 + 3). */
#if PB_LANES >= 16
#define PB_MM_MR 8
#else
#define PB_MM_MR 6
#endif

/* partial loads of f32 buffers (tails): n < PB_LANES elements */
static inline vf pb_f32_load_part(const float *p, int64_t n) {
    float buf[PB_LANES];
    for (int i = 0; i < PB_LANES; i++) buf[i] = i < n ? p[i] : 0.0f;
    return vf_load_f32(buf);
}

/* ---- float32 ---- */
#define PB_DT f32
#define T float
#define T_IS_F32 1
#define T_IS_BF16 0
#define T_LOAD vf_load_f32
#define T_STORE vf_store_f32
#define T_STORE_EXACT vf_store_f32
#define T_FROM_F32(f) (f)
#define T_TO_F32(v) (v)
#include "families.inc"

/* ---- float16 ---- */
#define PB_DT f16
#define T uint16_t
#define T_IS_F32 0
#define T_IS_BF16 0
#define T_LOAD vf_load_f16
#define T_STORE vf_store_f16
#define T_STORE_EXACT vf_store_f16
#define T_FROM_F32(f) pb_f32_to_f16(f)
#define T_TO_F32(v) pb_f16_to_f32(v)
#include "families.inc"

/* ---- bfloat16 ---- */
#define PB_DT bf16
#define T uint16_t
#define T_IS_F32 0
#define T_IS_BF16 1
#define T_LOAD vf_load_bf16
/* kernels on bf16 inputs: NaN payloads have zero low bits (see vf_store_bf16_rne) */
#define T_STORE vf_store_bf16_rne
/* casts from arbitrary f32 */
#define T_STORE_EXACT vf_store_bf16
#define T_FROM_F32(f) pb_f32_to_bf16(f)
#define T_TO_F32(v) pb_bf16_to_f32(v)
#include "families.inc"

#include "peaks.inc.c"

/* this path's table: every slot of kernels.def, one microkernel per dtype */
#define PB_UK_ALL(slot) {PB_UK(f32, slot), PB_UK(f16, slot), PB_UK(bf16, slot)}
const pb_isa PB_CAT(pb_isa_, PB_ISA) = {
    .name = PB_ISA_NAME,
    .lanes = PB_LANES,
    .mm_mr = PB_MM_MR,
    .supported = PB_ISA_SUPPORTED,
#define PB_SLOT(slot, type) .slot = PB_UK_ALL(slot),
#define PB_BINARY(name, vop, comm) .name##_vv = PB_UK_ALL(name##_vv), .name##_vs = PB_UK_ALL(name##_vs), .name##_sv = PB_UK_ALL(name##_sv),
#include "../kernels.def"
#ifdef PB_MM_BF16_PAIRS
    .mm_bf16_pairs = 1,
#endif
    .peak_fma_f32 = PB_ISA_FN(peak_fma_f32),
    .peak_bf16_dot = PB_ISA_FN(peak_bf16_dot),
    .peak_bf16_method = PB_PEAK_BF16_METHOD,
    .read_sum = PB_ISA_FN(read_sum),
};
#undef PB_UK_ALL
