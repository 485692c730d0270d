/*
 * The per-ISA kernel bodies. An isa/<name>.c file includes one vec/<name>.h (which defines
 * PB_LANES, the type vf and the vf_* operations), defines PB_ISA and PB_ISA_SUPPORTED, then
 * includes this file once. Each microkernel below is written once against the vf_* API and
 * instantiated per element type, so every path shares the same logic and differs only in the
 * vector operations. Names: pb_<dtype>_<op>__<isa>, e.g. pb_f16_softmax__avx2.
 */
#include <math.h>
#include <string.h>

#define PB_CAT_(a, b) a##b
#define PB_CAT(a, b) PB_CAT_(a, b)
#define PB_UK(dt, op) PB_CAT(PB_CAT(PB_CAT(pb_, dt), PB_CAT(_, op)), PB_CAT(__, PB_ISA))
#define PB_ISA_FN(name) PB_CAT(PB_CAT(pb_, name), PB_CAT(__, PB_ISA))

#include "vexp.inc.c"

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
#define T_LOAD vf_load_f32
#define T_STORE vf_store_f32
#define T_STORE_EXACT vf_store_f32
#define T_FROM_F32(f) (f)
#define T_TO_F32(v) (v)
#include "elementwise.inc.c"
#include "softmax.inc.c"
#include "rotary.inc.c"
#include "attention.inc.c"
#include "norms.inc.c"
#include "eltwise.inc.c"
#include "movement.inc.c"
#include "onnx_attn.inc.c"
#undef PB_DT
#undef T
#undef T_IS_F32
#undef T_LOAD
#undef T_STORE
#undef T_STORE_EXACT
#undef T_FROM_F32
#undef T_TO_F32

/* ---- float16 ---- */
#define PB_DT f16
#define T uint16_t
#define T_IS_F32 0
#define T_LOAD vf_load_f16
#define T_STORE vf_store_f16
#define T_STORE_EXACT vf_store_f16
#define T_FROM_F32(f) pb_f32_to_f16(f)
#define T_TO_F32(v) pb_f16_to_f32(v)
#include "elementwise.inc.c"
#include "softmax.inc.c"
#include "rotary.inc.c"
#include "attention.inc.c"
#include "norms.inc.c"
#include "eltwise.inc.c"
#include "movement.inc.c"
#include "onnx_attn.inc.c"
#undef PB_DT
#undef T
#undef T_IS_F32
#undef T_LOAD
#undef T_STORE
#undef T_STORE_EXACT
#undef T_FROM_F32
#undef T_TO_F32

/* ---- bfloat16 ---- */
#define PB_DT bf16
#define T uint16_t
#define T_IS_F32 0
#define T_LOAD vf_load_bf16
/* kernels on bf16 inputs: NaN payloads have zero low bits (see vf_store_bf16_rne) */
#define T_STORE vf_store_bf16_rne
/* casts from arbitrary f32 */
#define T_STORE_EXACT vf_store_bf16
#define T_FROM_F32(f) pb_f32_to_bf16(f)
#define T_TO_F32(v) pb_bf16_to_f32(v)
#include "elementwise.inc.c"
#include "softmax.inc.c"
#include "rotary.inc.c"
#include "attention.inc.c"
#include "norms.inc.c"
#include "eltwise.inc.c"
#include "movement.inc.c"
#include "onnx_attn.inc.c"
#undef PB_DT
#undef T
#undef T_IS_F32
#undef T_LOAD
#undef T_STORE
#undef T_STORE_EXACT
#undef T_FROM_F32
#undef T_TO_F32

#include "peaks.inc.c"
#include "norms.table.inc.c"
#include "eltwise.table.inc.c"
#include "movement.table.inc.c"
#include "onnx_attn.table.inc.c"

const pb_isa PB_CAT(pb_isa_, PB_ISA) = {
    .name = PB_ISA_NAME,
    .lanes = PB_LANES,
    .supported = PB_ISA_SUPPORTED,
    .softmax = {PB_UK(f32, softmax), PB_UK(f16, softmax), PB_UK(bf16, softmax)},
    .rotary = {PB_UK(f32, rotary), PB_UK(f16, rotary), PB_UK(bf16, rotary)},
    .cast_to_f32 = {PB_UK(f32, cast_to_f32), PB_UK(f16, cast_to_f32), PB_UK(bf16, cast_to_f32)},
    .cast_from_f32 = {PB_UK(f32, cast_from_f32), PB_UK(f16, cast_from_f32), PB_UK(bf16, cast_from_f32)},
    .attention = {PB_UK(f32, attention), PB_UK(f16, attention), PB_UK(bf16, attention)},
    .attn_combine = {PB_UK(f32, attn_combine), PB_UK(f16, attn_combine), PB_UK(bf16, attn_combine)},
    .kv_append = {PB_UK(f32, kv_append), PB_UK(f16, kv_append), PB_UK(bf16, kv_append)},
    .peak_fma_f32 = PB_ISA_FN(peak_fma_f32),
    .peak_bf16_dot = PB_ISA_FN(peak_bf16_dot),
    .peak_bf16_method = PB_PEAK_BF16_METHOD,
    .read_sum = PB_ISA_FN(read_sum),
    .norms = &PB_CAT(pb_norms_table_, PB_ISA),
    .eltwise = &PB_CAT(pb_eltwise_table_, PB_ISA),
    .movement = &PB_CAT(pb_movement_table_, PB_ISA),
    .onnx_attn = &PB_CAT(pb_onnx_attn_table_, PB_ISA),
};
