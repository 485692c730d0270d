/* onnx_attention.toml: ai.onnx Attention and RotaryEmbedding (opset 23): the microkernel table each ISA path fills in (included by internal.h). */
#ifndef PB_ONNX_ATTN_H
#define PB_ONNX_ATTN_H

/* One ai.onnx Attention problem as the microkernels see it: the com.microsoft plan
 * (pb_attn_plan) generalized to what the ONNX op needs -- strided queries and outputs (3-D and
 * 4-D layouts without a transpose), a mask element per (batch, head, query, key) with broadcast
 * strides, a bottom-right causal offset, softcap -- over a key/value cache that already holds
 * every key it reads (or, in the decode form, reads past rows from the past cache and copies
 * them into present as it goes). */
typedef struct pb_oattn_plan {
    int32_t dtype;
    int64_t B, S, Nq, Nkv, G, H, Hp; /* G = Nq / Nkv; Hp = H rounded up to the lanes */
    int64_t rows_per_item;           /* query positions per block (x G heads = rows) */
    float scale;
    float softcap; /* 0: off */
    /* query row (b, head n, position s) at q + b*q_sb + n*q_sh + s*q_ss; output likewise */
    const void *q;
    int64_t q_sb, q_sh, q_ss;
    void *out;
    int64_t o_sb, o_sh, o_ss;
    /* key/value row t of (b, kv head g) at k + b*kv_sb + g*kv_sg + t*kv_st (elements) */
    const void *k, *v;
    int64_t kv_sb, kv_sg, kv_st;
    int64_t kv_len; /* keys of every batch row */
    int64_t past;   /* causal: query s sees keys t <= past + s */
    int32_t causal;
    /* mask element (b, n, s, t) at mask + b*m_sb + n*m_sh + s*m_ss + t for t < m_len; keys
     * t >= m_len masked; mask_type PB_ONNX_MASK_* (bool: uint8) */
    const void *mask;
    int32_t mask_type;
    int64_t m_sb, m_sh, m_ss, m_len;
    /* decode form: rows t < past_len of (b, g) come from the past cache (at k_past + b*past_sb
     * + g*past_sg + t*past_st) and are copied into k_copy/v_copy (laid out as k/v) as read */
    const void *k_past, *v_past;
    void *k_copy, *v_copy;
    int64_t past_sb, past_sg, past_st, past_len;
    /* qk_matmul_output (B, Nq, S, kv_len), or NULL */
    void *qk;
    int32_t qk_mode;
} pb_oattn_plan;

/* positions [s0, s1) x the G heads of KV head g of batch row b, keys [t0, t1); partial == NULL:
 * the finished rows are stored, else (max, sum, unnormalized output) per row go to partial */
typedef int (*pb_oattn_ukernel)(const pb_oattn_plan *p, int64_t b, int64_t g, int64_t s0, int64_t s1, int64_t t0,
                                int64_t t1, float *partial);
/* merge nparts partials of the same rows (part i at parts + i*stride) into the output */
typedef int (*pb_oattn_combine_ukernel)(const pb_oattn_plan *p, int64_t b, int64_t g, int64_t s0, int64_t s1,
                                        const float *parts, int64_t nparts, int64_t stride);
/* with qk_matmul_output: Y and the qk rows of positions [s0, s1) x the G heads of KV head g */
typedef int (*pb_oattn_full_ukernel)(const pb_oattn_plan *p, int64_t b, int64_t g, int64_t s0, int64_t s1);
/* RotaryEmbedding of tokens [t0, t1) of the (batch, seq) grid, all heads */
typedef void (*pb_orot_ukernel)(const pb_onnx_rotary_embedding_args *a, int64_t t0, int64_t t1);

#endif
