/* The rotary and attention plans (internal): what the microkernels see. The public entry points
 * (rotary.c, attention_ms.c, onnx_attention.c) validate their args and fill these; the one
 * attention engine (attention.c, attention*.inc.c) runs them. */
#ifndef PB_ATTENTION_H
#define PB_ATTENTION_H

/* ---- RotaryEmbedding (com.microsoft and ai.onnx) ---- */
/* Tokens t of the (batch, seq) grid, N heads of H elements each: the first 2*half elements of a
 * head are rotated with cos/sin row position_ids[t] (or row t when position_ids is NULL), the
 * rest copied through (unless in place). */
typedef struct pb_rot_plan {
    int64_t S, N, H, half;
    int32_t interleaved;
    int32_t bsnh; /* 1: (B, S, N, H); 0: (B, N, S, H) */
    const void *in;
    void *out;
    const void *cos, *sin; /* element (row, i) at cos + row * half + i */
    const int64_t *position_ids;
} pb_rot_plan;
/* Tokens [t0, t1), all heads. */
typedef void (*pb_rotary_ukernel)(const pb_rot_plan *p, int64_t t0, int64_t t1);
int pb_rotary_run(const pb_rot_plan *p, int32_t dtype, int32_t max_threads, int64_t batch);

/* ---- attention ---- */
/* Queries rotated by a cos/sin cache: element (pos, i) of cos at cos + pos * half + i. */
typedef struct pb_rope {
    const void *cos, *sin; /* NULL: no rotation */
    int64_t half;          /* columns of the caches: rotary_dim / 2 (rotary_dim <= head size) */
    int32_t interleaved;
} pb_rope;

/* One attention problem, the superset of GroupQueryAttention, MultiHeadAttention and ai.onnx
 * Attention: strided queries and outputs (3-D and 4-D layouts without a transpose), keys and
 * values of a cache that already holds every key read (or, in the decode form, past rows read
 * from the past cache and copied into present as they go), per-batch key counts and query
 * positions (the causal limit and the rotary row), an additive key bias (key padding), a mask
 * element per (batch, head, query, key) with broadcast strides, softcap and, optionally, the QK
 * scores as an output. */
typedef struct pb_attn_plan {
    int32_t dtype;
    int64_t B, S, Nq, Nkv, G, H, Hp; /* G = Nq / Nkv query heads per KV head; Hp = H padded to lanes */
    int64_t rows_per_item;           /* query positions per block (x G heads = rows) */
    float scale;
    float softcap; /* 0: off; else scores become c * tanh(score / c) */
    /* query row (b, head n, position s) at q + b*q_sb + n*q_sh + s*q_ss (elements); output likewise */
    const void *q;
    int64_t q_sb, q_sh, q_ss;
    void *out;
    int64_t o_sb, o_sh, o_ss;
    /* key/value row t of (b, kv head g) at k + b*kv_sb + g*kv_sg + t*kv_st (elements) */
    const void *k, *v;
    int64_t kv_sb, kv_sg, kv_st;
    const int64_t *kv_len; /* (B): keys of batch row b are t < kv_len[b] */
    const int64_t *q_pos;  /* (B*S): position of each query (causal limit and rotary row) */
    int32_t causal;        /* query at position p sees keys t <= p */
    const float *key_bias; /* NULL or (B, bias_stride): added to scaled scores (padding masks) */
    int64_t bias_stride;
    /* mask element (b, n, s, t) at mask + b*m_sb + n*m_sh + s*m_ss + t for t < m_len; keys
     * t >= m_len masked; mask_type PB_ONNX_MASK_* (NONE: no mask; BOOL: uint8; FLOAT: T, added) */
    const void *mask;
    int32_t mask_type;
    int64_t m_sb, m_sh, m_ss, m_len;
    pb_rope rope; /* applied to the queries */
    /* Decode with a copied cache: rows t < past_len[b] are read from the past cache (row t of
     * (b, g) at k_past + b*past_sb + g*past_sg + t*past_st) and copied into k_copy/v_copy
     * (laid out as k/v) as they are read, so the past is read once, not copied then re-read.
     * k_past == NULL: every row is read from k/v. */
    const void *k_past, *v_past;
    void *k_copy, *v_copy;
    int64_t past_sb, past_sg, past_st;
    const int64_t *past_len;
    /* qk_matmul_output (B, Nq, S, kv_len[0]) at stage qk_mode (0 raw, 1 softcapped, 2 masked, 3
     * softmax), or NULL; every item then takes the full-row form (which needs every kv_len[b]
     * equal: ai.onnx's, the one front end that sets qk) */
    void *qk;
    int32_t qk_mode;
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
/* With qk: Y and the qk rows of positions [s0, s1) x the G heads of KV head g (whole rows). */
typedef int (*pb_attn_full_ukernel)(const pb_attn_plan *p, int64_t b, int64_t g, int64_t s0, int64_t s1);

/* New keys/values into a BNSH cache: present row past_len[b] + s <- new token s (keys rotated);
 * copy_past: rows [0, past_len[b]) copied from past first (else past is present). */
typedef struct pb_kv_append {
    int32_t dtype;
    int64_t B, S, Nkv, H;
    /* new token s of (b, kv head g) at k_new + b*new_sb + g*new_sg + s*new_ss (elements) */
    const void *k_new, *v_new;
    int64_t new_sb, new_sg, new_ss;
    const void *past_k, *past_v; /* (B, Nkv, past_cap, H) */
    int64_t past_cap;
    void *pres_k, *pres_v; /* (B, Nkv, pres_cap, H) */
    int64_t pres_cap;
    const int64_t *past_len; /* (B) */
    const int64_t *pos;      /* (B*S) rotary position of each new token (read only with rope) */
    int32_t copy_past;
    int32_t zero_rest; /* rows from past_len[b] + S to pres_cap are zeroed */
    pb_rope rope;
} pb_kv_append;
typedef int (*pb_kv_append_ukernel)(const pb_kv_append *a, int64_t b, int64_t g);

/* ---- the engine (attention.c): what a front end calls once its plan is filled ---- */
typedef struct pb_attn_sched {
    int64_t rows_per_item, n_sblocks, ngroups, nsplit, chunk, items, part_stride;
    int32_t threads;
} pb_attn_sched;
/* Work items and threads for p's shapes (its arrays need not exist yet); max_kv = the most
 * keys any batch row reads. Sets p->rows_per_item. */
void pb_attn_schedule(pb_attn_plan *p, int64_t max_kv, int32_t max_threads, pb_attn_sched *s);
/* Floats of split partials the schedule needs (0 when keys are not split). */
size_t pb_attn_partial_floats(const pb_attn_plan *p, const pb_attn_sched *s);
/* The decode form copies the past rows as it reads them (reads_all: it reads every past row),
 * so the append step copies none: moves ap's past copy into p. */
void pb_attn_copy_while_reading(pb_attn_plan *p, pb_kv_append *ap, int reads_all);
/* present = past ++ new over the pool; rows = rows (keys and values) written, for the grain. */
int pb_attn_append(const pb_kv_append *a, int32_t max_threads, int64_t rows, const char *k);
/* Every item, then the split partials' combine step. */
int pb_attn_run(const pb_attn_plan *p, const pb_attn_sched *s, float *partials, const char *k);
float pb_attn_default_scale(float scale, int64_t head_size);
int64_t pb_attn_lanes_round(int64_t h);

#endif
