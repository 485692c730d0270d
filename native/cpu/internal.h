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

/* Rotary embedding of head vectors [t0, t1) of the (batch, seq, heads) grid. */
typedef void (*pb_rotary_ukernel)(const pb_rotary_embedding_args *a, int64_t t0, int64_t t1);

/* ---- attention (attention.c builds these; the ISA files run them) ---- */
/* Queries rotated by a cos/sin cache: element (pos, i) of cos at cos + pos * half + i. */
typedef struct pb_rope {
    const void *cos, *sin; /* NULL: no rotation */
    int64_t half;          /* columns of the caches: rotary_dim / 2 (rotary_dim <= head size) */
    int32_t interleaved;
} pb_rope;

/* One attention problem over a key/value cache that already holds every key it reads. */
typedef struct pb_attn_plan {
    int32_t dtype;
    int64_t B, S, Nq, Nkv, G, H, Hp; /* G = Nq / Nkv query heads per KV head; Hp = H padded to lanes */
    int64_t rows_per_item;           /* query positions per work item (x G heads = rows) */
    float scale;
    const void *q; /* (B, S, Nq, H) */
    void *out;     /* (B, S, Nq, H) */
    /* key/value row t of (b, kv head g) at k + b*kv_sb + g*kv_sg + t*kv_st (elements) */
    const void *k, *v;
    int64_t kv_sb, kv_sg, kv_st;
    const int64_t *kv_len; /* (B): keys of batch row b are t < kv_len[b] */
    const int64_t *q_pos;  /* (B*S): position of each query (causal limit and rotary row) */
    int32_t causal;        /* query at position p sees keys t <= p */
    const float *key_bias; /* NULL or (B, bias_stride): added to scaled scores (padding masks) */
    int64_t bias_stride;
    pb_rope rope; /* applied to the queries */
    /* Decode with a copied cache: rows t < past_len[b] are read from the past cache (row t of
     * (b, g) at k_past + b*past_sb + g*past_sg + t*past_st) and copied into k_copy/v_copy
     * (laid out as k/v) as they are read, so the past is read once, not copied then re-read.
     * k_past == NULL: every row is read from k/v. */
    const void *k_past, *v_past;
    void *k_copy, *v_copy;
    int64_t past_sb, past_sg, past_st;
    const int64_t *past_len;
} pb_attn_plan;

/* A query block of at least this many rows (positions x grouped heads) takes the prefill
 * (GEMM) form; fewer take the decode (dot-product) form. */
#define PB_ATT_PACK_ROWS 8
/* Which form a query block of `rows` rows takes: single-token decode always takes the decode
 * form (any number of grouped heads: it streams each key row once, splits keys across
 * threads and copies the past as it reads it); otherwise blocks of PB_ATT_PACK_ROWS rows or
 * more take the prefill form. */
static inline int pb_att_decode_form(int64_t seq, int64_t rows) { return seq == 1 || rows < PB_ATT_PACK_ROWS; }

/* Rows [s0, s1) x the G heads of KV head g in batch row b, keys [t0, t1). partial == NULL: the
 * finished output is stored; else (max, sum, unnormalized output) per row go to partial. */
typedef int (*pb_attn_ukernel)(const pb_attn_plan *p, int64_t b, int64_t g, int64_t s0, int64_t s1, int64_t t0,
                               int64_t t1, float *partial); /* PB_OK or PB_ERR_OUT_OF_MEMORY (scratch) */

/* Merge nparts partials of the same rows (part i at parts + i*stride) into the output. */
typedef int (*pb_attn_combine_ukernel)(const pb_attn_plan *p, int64_t b, int64_t g, int64_t s0, int64_t s1,
                                       const float *parts, int64_t nparts, int64_t stride);

/* New keys/values into a BNSH cache: present row past_len[b] + s <- new token s (keys rotated);
 * copy_past: rows [0, past_len[b]) copied from past first (else past is present). */
typedef struct pb_kv_append {
    int32_t dtype;
    int64_t B, S, Nkv, H;
    const void *k_new, *v_new; /* (B, S, Nkv, H) */
    const void *past_k, *past_v;
    int64_t past_cap;
    void *pres_k, *pres_v;
    int64_t pres_cap;
    const int64_t *past_len; /* (B) */
    const int64_t *pos;      /* (B*S) rotary position of each new token */
    int32_t copy_past;
    int32_t zero_rest; /* rows from past_len[b] + S to pres_cap are zeroed */
    pb_rope rope;
} pb_kv_append;
typedef int (*pb_kv_append_ukernel)(const pb_kv_append *a, int64_t b, int64_t g);

typedef float (*pb_peak_ukernel)(int64_t iters, int64_t *flops);
typedef float (*pb_read_ukernel)(const void *buf, int64_t bytes);

#include "kernels/onnx_attn.h"

/* One ISA path: its microkernel slots are generated from kernels.def (one per dtype each). */
typedef struct pb_isa {
    const char *name;
    int lanes; /* f32 lanes per vector */
    int (*supported)(void);
#define PB_SLOT(slot, type) type slot[PB_DT_COUNT];
#define PB_BINARY(name, vop, comm) pb_binary_ukernel name##_vv[PB_DT_COUNT], name##_vs[PB_DT_COUNT], name##_sv[PB_DT_COUNT];
#include "kernels.def"
    /* machine probes (kernels/peaks.inc.c), one per ISA path */
    pb_peak_ukernel peak_fma_f32;
    pb_peak_ukernel peak_bf16_dot;
    const char *peak_bf16_method;
    pb_read_ukernel read_sum;
} pb_isa;

const pb_isa *pb_active_isa(void);

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
