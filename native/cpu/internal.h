/* Internal declarations shared by the CPU sources (not part of the public header). */
#ifndef PB_INTERNAL_H
#define PB_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "../include/perfbench.h"

/* ---- the shared substrate (common/): argument checks, thread and streaming policies ---- */
#include "common/checks.h"
#include "common/policy.h"

/* ---- errors (common/error.c) ---- */
void pb_clear_error(void);

/* n elements of dtype copied from src to dst (no overlap) over the pool (common/copy.c) */
int pb_parallel_copy(const pb_exec *ex, int32_t dtype, void *dst, const void *src, int64_t n);

/* Validation helpers: each returns PB_OK or sets the error and returns its status. */
int pb_check_exec(const pb_exec *ex, const char *kernel);
int pb_check_dtype(int32_t dtype, const char *kernel);
size_t pb_dtype_size(int32_t dtype);

/* ---- thread pool (common/pool.c) ---- */
/* fn(ctx, begin, end) runs on [begin, end) of [0, ntasks); ranges are contiguous, one per
 * participating thread; the caller is one of them. Threads used = min(nthreads, ntasks). */
typedef void (*pb_range_fn)(void *ctx, int64_t begin, int64_t end);
int pb_parallel_for(int32_t nthreads, int64_t ntasks, pb_range_fn fn, void *ctx);

/* Per-thread scratch of at least `bytes` (64-byte aligned); NULL on allocation failure.
 * Slot 0 (pb_scratch) belongs to microkernels; slot 1 to drivers, for buffers that live across
 * a parallel region (the caller's slot 0 is reused by its own share of the region). */
void *pb_scratch(size_t bytes);
void *pb_scratch_slot(int slot, size_t bytes);

/* ---- ISA dispatch (dispatch.c and the isa/ files) ---- */
/* Index into per-dtype arrays */
enum { PB_DT_F32 = 0, PB_DT_F16 = 1, PB_DT_BF16 = 2, PB_DT_COUNT = 3 };
int pb_dtype_index(int32_t dtype);

#include "kernels/ukernels.h"

#include "kernels/attention.h"

typedef float (*pb_peak_ukernel)(int64_t iters, int64_t *flops);
typedef float (*pb_read_ukernel)(const void *buf, int64_t bytes);

/* One ISA path: its microkernel slots are generated from kernels.def (one per dtype each). */
typedef struct pb_isa {
    const char *name;
    int lanes; /* f32 lanes per vector */
    int mm_mr; /* rows of MatMul's register tile and packed A panels (PB_MM_MR) */
    int (*supported)(void);
#define PB_SLOT(slot, type) type slot[PB_DT_COUNT];
#define PB_BINARY(name, vop, comm) pb_binary_ukernel name##_vv[PB_DT_COUNT], name##_vs[PB_DT_COUNT], name##_sv[PB_DT_COUNT];
#include "kernels.def"
    /* 1: bf16 MatMul packs A and B as bf16 pairs (kernels/matmul.inc.c) and multiplies them with a
     * bf16 dot (vdpbf16ps, or its emulation on portable16); 0: as f32, like f16 */
    int mm_bf16_pairs;
    /* machine probes (kernels/peaks.inc.c), one per ISA path */
    pb_peak_ukernel peak_fma_f32;
    pb_peak_ukernel peak_bf16_dot;
    const char *peak_bf16_method;
    pb_read_ukernel read_sum;
} pb_isa;

const pb_isa *pb_active_isa(void);

/* matmul.c's blocked GEMM (A packed per row block, B per kc x NR panel, the tile microkernel) with
 * B's panels made by `panel(src, ...)` rather than packed from a->b, which is not read: the GEMM
 * under other ops whose weights are not a plain matrix (MatMulNBits). a: validated as pb_matmul's,
 * batch_rank 0, trans_b 0; a bf16 a->dtype only on a path without bf16 pairs (the panels are f32). */
int pb_matmul_blocked_panels(const pb_matmul_args *a, pb_matmul_panel_ukernel panel, const void *src);

/* Each compiled ISA file defines one of these. */
extern const pb_isa pb_isa_portable;
extern const pb_isa pb_isa_portable16;
#if defined(PB_HAVE_AVX2)
extern const pb_isa pb_isa_avx2;
#endif
#if defined(PB_HAVE_AVX512)
extern const pb_isa pb_isa_avx512;
#endif

/* ---- scalar half/bfloat16 conversions (round to nearest even) ---- */
float pb_f16_to_f32(uint16_t h);
uint16_t pb_f32_to_f16(float f);
float pb_bf16_to_f32(uint16_t b);
uint16_t pb_f32_to_bf16(float f);

#endif /* PB_INTERNAL_H */
