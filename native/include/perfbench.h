/*
 * perfbench native kernel library: the ONE public header.
 *
 * Calling convention (every kernel): `int pb_<op>(const void *args)` takes a pointer to that
 * op's args struct and returns a status (PB_OK = 0). On a non-zero status nothing was written
 * that the caller may rely on, and pb_last_error() holds a message for this thread. Kernels
 * never abort the process on bad arguments.
 *
 * Every args struct starts with a pb_exec: the device and how many threads this call may use
 * (matched to ORT's intra_op_num_threads by the harness). One native timing loop
 * (pb_time_warm / pb_time_cold) can time any kernel by name, with no Python inside the loop.
 *
 * The block between PB_CDEF_BEGIN and PB_CDEF_END is read by perfbench/kernels_ffi as cffi
 * declarations: keep it to plain typedefs, prototypes and integer #defines.
 */
#ifndef PERFBENCH_H
#define PERFBENCH_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* PB_CDEF_BEGIN */

#define PB_ABI_VERSION 2

/* status codes */
#define PB_OK 0
#define PB_ERR_INVALID_ARGUMENT 1
#define PB_ERR_UNSUPPORTED 2
#define PB_ERR_OUT_OF_MEMORY 3
#define PB_ERR_INTERNAL 4

/* element types: the ONNX TensorProto codes */
#define PB_DTYPE_F32 1
#define PB_DTYPE_F16 10
#define PB_DTYPE_BF16 16

/* devices (CUDA kernels come later behind this same header) */
#define PB_DEVICE_CPU 0
#define PB_DEVICE_CUDA 1

/* tensor layouts of attention inputs */
#define PB_LAYOUT_BSNH 0 /* (batch, seq, heads * head_size) */
#define PB_LAYOUT_BNSH 1 /* (batch, heads, seq, head_size) */

typedef struct pb_exec {
    int32_t device;      /* PB_DEVICE_* */
    int32_t num_threads; /* threads this call may use, >= 1 */
} pb_exec;

typedef int (*pb_kernel_fn)(const void *args);

/* ---- library ---------------------------------------------------------------------------- */
int pb_abi_version(void);
const char *pb_last_error(void);     /* message of this thread's last non-zero status */
void pb_clear_error(void);           /* forget it (tests: a status without a fresh message shows) */
const char *pb_build_info(void);     /* compiler and flags this library was built with */
const char *pb_isa_compiled(void);   /* comma-separated ISA paths compiled in */
const char *pb_isa_supported(void);  /* those of them this CPU can run */
const char *pb_isa_active(void);     /* the path kernels use now (chosen once at load) */
int pb_isa_select(const char *name); /* force a compiled-in, supported path; "auto" = best */
int pb_kernel_count(void);
const char *pb_kernel_name(int index);
pb_kernel_fn pb_kernel_lookup(const char *name); /* NULL if unknown */

/* ---- thread pool ------------------------------------------------------------------------ */
/* Workers spin for spin_us microseconds after a parallel region before sleeping (0 = sleep at
 * once: the "spin off" policy). pb_pool_quiesce() returns once every worker sleeps. */
int pb_pool_set_spin(int32_t spin_us);
int pb_pool_quiesce(void);
int32_t pb_pool_max_threads(void);
/* parallel regions run on more than one thread since load: the op contract checks with it that
 * a test case meant to split over 2 threads really does (a grain above the case's work would not) */
int64_t pb_pool_multi_regions(void);

/* ---- host facts the kernels' size policies use ------------------------------------------ */
/* The last-level cache size (bytes) behind every non-temporal-store decision: outputs are
 * streamed when a call reads and writes more than a third of it. 32 MiB until set; 0 restores
 * that default. perfbench's loader sets it from timing/caches.py (sysfs or $PERFBENCH_LLC_BYTES). */
int pb_set_llc_bytes(int64_t bytes);
int64_t pb_llc_bytes(void);
/* The L1 data and L2 cache sizes (bytes, per core) behind the GEMM's cache blocking (kc from L1,
 * mc from L2): 32 KiB and 1 MiB until set; 0 restores a default. Set by the loader from
 * timing/caches.py. */
int pb_set_core_cache_bytes(int64_t l1d, int64_t l2);

/* ---- timing (CLOCK_MONOTONIC, nanoseconds) ---------------------------------------------- */
/* warm: one timed loop of `iters` calls; *elapsed_ns = the whole loop. */
int pb_time_warm(const char *kernel, const void *args, int64_t iters, int64_t *elapsed_ns);
/* cold: `calls` calls, each timed alone after evicting caches by touching evict_buf (which
 * should exceed the last-level cache) with evict_threads threads, outside the timed region. */
int pb_time_cold(const char *kernel, const void *args, int64_t calls, void *evict_buf,
                 int64_t evict_bytes, int32_t evict_threads, int64_t *per_call_ns);
int pb_evict(void *buf, int64_t bytes, int32_t threads);
int64_t pb_now_ns(void);
int64_t pb_timer_resolution_ns(void);

/* ---- kernels ---------------------------------------------------------------------------- */

/* noop: the harness floor (dispatch through the same path, no work) */
typedef struct pb_noop_args {
    pb_exec exec;
} pb_noop_args;
int pb_noop(const void *args);

/* Softmax over the last axis: y[r, :] = softmax(x[r, :]); x, y of `dtype`, (rows, cols). */
typedef struct pb_softmax_args {
    pb_exec exec;
    int32_t dtype;
    int64_t rows;
    int64_t cols;
    const void *x;
    void *y;
} pb_softmax_args;
int pb_softmax(const void *args);

/* com.microsoft RotaryEmbedding (rotary_embedding_dim = head_size).
 * input/output: PB_LAYOUT_BSNH (batch, seq, num_heads*head_size) or PB_LAYOUT_BNSH
 * (batch, num_heads, seq, head_size); position_ids int64 (batch, seq), each in [0, max_pos);
 * cos_cache/sin_cache (max_pos, head_size/2) of `dtype`.
 * interleaved=0: halves (x[i], x[i+H/2]) rotate together; interleaved=1: pairs (x[2i], x[2i+1]). */
typedef struct pb_rotary_embedding_args {
    pb_exec exec;
    int32_t dtype;
    int32_t layout;
    int32_t interleaved;
    int64_t batch;
    int64_t seq;
    int64_t num_heads;
    int64_t head_size;
    int64_t max_pos;
    const void *input;
    const int64_t *position_ids;
    const void *cos_cache;
    const void *sin_cache;
    void *output;
} pb_rotary_embedding_args;
int pb_rotary_embedding(const void *args);

/* Cast (element type conversion) between float32 and float32/float16/bfloat16, n elements,
 * round to nearest even; NaN stays NaN (quiet), infinities and signed zeros are kept. */
typedef struct pb_cast_args {
    pb_exec exec;
    int32_t src_dtype;
    int32_t dst_dtype;
    int64_t n;
    const void *src;
    void *dst;
} pb_cast_args;
int pb_cast(const void *args);

/* com.microsoft GroupQueryAttention. query (batch, seq, num_heads*head_size); key/value
 * (batch, seq, kv_num_heads*head_size); past_key/past_value and present_key/present_value are
 * BNSH caches (batch, kv_num_heads, capacity, head_size). Batch row b holds
 * total_b = seqlens_k[b] + 1 tokens after this call. As in ORT: seq == total_sequence_length
 * is a first prompt (past_b = 0, rows may be right-padded: total_b <= seq); otherwise
 * past_b = total_b - seq. New tokens go to rows [past_b, past_b + seq) at positions
 * past_b + s; query s attends keys 0 .. min(past_b + s, total_b - 1) (causal). KV modes: copy
 * (present != past: rows [0, past_b) copied from past, rows after the new ones zeroed) or
 * shared buffer (present_key == past_key, present_value == past_value: only the new rows are
 * written). do_rotary: queries and new keys are rotated
 * (cos/sin caches (rotary_max_pos, rotary_half), rotary_dim = 2*rotary_half <= head_size) at
 * their positions. Declined with PB_ERR_UNSUPPORTED: softcap != 0, local_window_size != -1,
 * smooth_softmax == 1. */
typedef struct pb_group_query_attention_args {
    pb_exec exec;
    int32_t dtype;
    int32_t do_rotary;
    int32_t rotary_interleaved;
    int32_t local_window_size; /* -1: none (only value implemented) */
    int32_t smooth_softmax;    /* -1 or 0: off (1 is not implemented) */
    int32_t total_sequence_length;
    float scale;   /* 0: 1/sqrt(head_size) */
    float softcap; /* 0: off (only value implemented) */
    int64_t batch;
    int64_t seq;
    int64_t num_heads;
    int64_t kv_num_heads;
    int64_t head_size;
    int64_t past_capacity;    /* 0: no past */
    int64_t present_capacity; /* >= every total_b */
    int64_t rotary_max_pos;
    int64_t rotary_half;
    const void *query;
    const void *key;
    const void *value;
    const void *past_key; /* NULL when past_capacity == 0 */
    const void *past_value;
    const int32_t *seqlens_k; /* (batch) */
    const void *cos_cache;    /* NULL unless do_rotary */
    const void *sin_cache;
    void *output;
    void *present_key;
    void *present_value;
} pb_group_query_attention_args;
int pb_group_query_attention(const void *args);

/* com.microsoft MultiHeadAttention (separate query, key, value in (batch, seq, heads*head_size)).
 * With past (past_seq > 0): past_key/past_value (batch, num_heads, past_seq, head_size) and
 * present = past ++ new keys/values (batch, num_heads, past_seq + kv_seq, head_size); without
 * past, present outputs are optional (NULL: not written). key_padding_mask: NULL or int32
 * (batch, past_seq + kv_seq), 0 = masked: mask_filter_value is added to that key's scaled
 * score. unidirectional (as ORT's CPU kernel): with q_seq > 1, query s sees keys 0 .. past_seq + s
 * (q_seq == kv_seq required; other shapes are declined as unsupported); one query sees every key. */
typedef struct pb_multi_head_attention_args {
    pb_exec exec;
    int32_t dtype;
    int32_t unidirectional;
    float scale; /* 0: 1/sqrt(head_size) */
    float mask_filter_value;
    int64_t batch;
    int64_t q_seq;
    int64_t kv_seq;
    int64_t num_heads;
    int64_t head_size;
    int64_t past_seq;
    const void *query;
    const void *key;
    const void *value;
    const int32_t *key_padding_mask;
    const void *past_key;
    const void *past_value;
    void *output;
    void *present_key;
    void *present_value;
} pb_multi_head_attention_args;
int pb_multi_head_attention(const void *args);

/* ---- norms.toml: LayerNormalization family, RMSNormalization ---- */
/* PB_GROUP_NORMS_BEGIN */
/* The LayerNormalization family over rows of `hidden` elements (x, y: (rows, hidden) of `dtype`):
 *   v = x[r] (+ skip[r % skip_rows]) (+ bias)            (computed in f32, never rounded)
 *   simplified = 0: y = (v - mean(v)) / sqrt(var(v) + epsilon) * scale (+ beta)
 *   simplified = 1: y = v / sqrt(mean(v^2) + epsilon) * scale          (RMS norm)
 * var is the population variance. Optional outputs (NULL = not written): mean (rows) float32
 * (simplified = 0 only), inv_std (rows) float32 = 1 / sqrt(var + epsilon) (or of the mean square),
 * sum (rows, hidden) of `dtype` = v rounded once. skip (skip_rows, hidden), skip_rows dividing rows
 * (a skip of one batch row broadcast over the batch), or NULL with skip_rows = 0; scale, beta,
 * bias: (hidden). beta needs simplified = 0. No output may overlap an input or another output. */
typedef struct pb_layer_norm_args {
    pb_exec exec;
    int32_t dtype;
    int32_t simplified;
    float epsilon; /* >= 0, finite */
    int64_t rows;
    int64_t hidden;
    int64_t skip_rows;
    const void *x;
    const void *skip;  /* NULL: none */
    const void *bias;  /* NULL: none (added before the statistics) */
    const void *scale; /* gamma */
    const void *beta;  /* NULL: none (added after scaling) */
    void *y;
    float *mean;
    float *inv_std;
    void *sum;
} pb_layer_norm_args;
int pb_layer_norm(const void *args);
/* Non-temporal stores of y and sum: mode -1 (the default) when a call's working set exceeds half
 * the last-level cache, 0 never, 1 whenever every row starts 32-byte aligned (tests). Returns
 * the previous mode; other values are rejected (returns -2). */
int pb_layer_norm_stream_mode(int32_t mode);
/* PB_GROUP_NORMS_END */

/* ---- elementwise.toml: Add, Mul, Gelu, FastGelu, BiasGelu, Sigmoid, QuickGelu, ReduceMean ---- */
/* PB_GROUP_ELTWISE_BEGIN */
/* Add and Mul with numpy broadcasting: y = a + b / a * b, computed in f32 and rounded once to
 * `dtype` (a, b, y all of `dtype`). The shapes are given aligned to `rank` (0..8, leading 1s
 * added by the caller): each a_shape[i], b_shape[i] is 1 or y_shape[i], and y_shape[i] is the
 * larger of the two. Arrays are C-contiguous in their own shapes. y may be a or b when that input
 * has y's shape (in place); any other overlap is refused. */
typedef struct pb_binary_args {
    pb_exec exec;
    int32_t dtype;
    int32_t rank;
    int64_t a_shape[8];
    int64_t b_shape[8];
    int64_t y_shape[8];
    const void *a;
    const void *b;
    void *y;
} pb_binary_args;
int pb_add(const void *args);
int pb_mul(const void *args);
/* Sub: y = a - b, with pb_binary_args as Add and Mul (the same broadcasting, rounding and in-place rules) */
int pb_sub(const void *args);

/* Gelu family over a (rows, cols) matrix: v = x + bias (bias NULL or (cols) of `dtype`, added
 * per row), then
 *   PB_GELU_ERF:  y = 0.5 * v * (1 + erf(v / sqrt(2)))                  (Gelu, BiasGelu)
 *   PB_GELU_TANH: y = 0.5 * v * (1 + tanh(sqrt(2/pi) * (v + 0.044715 v^3))) (Gelu tanh, FastGelu)
 * computed in f32 (error ~1e-7 of the row's scale), rounded once. y may be x (in place). */
#define PB_GELU_ERF 0
#define PB_GELU_TANH 1
typedef struct pb_gelu_args {
    pb_exec exec;
    int32_t dtype;
    int32_t approximate; /* PB_GELU_ERF or PB_GELU_TANH */
    int64_t rows;
    int64_t cols;
    const void *x;
    const void *bias; /* NULL: no bias */
    void *y;
} pb_gelu_args;
int pb_gelu(const void *args);

/* Sigmoid family over n contiguous elements, z = alpha * x:
 *   PB_SIGMOID_PLAIN: y = sigmoid(x) = 1 / (1 + exp(-x))       (Sigmoid; alpha unused)
 *   PB_SIGMOID_MUL:   y = x * sigmoid(alpha * x)                (com.microsoft QuickGelu; SiLU at alpha 1)
 * computed in f32 from e = exp(-|z|) (never overflows): sigmoid(z) = 1 / (1 + e) for z >= 0 and
 * e / (1 + e) for z < 0 (relative error <= 5e-7 on the SIMD paths). e is flushed to 0 below
 * z = -87.3365, where sigmoid leaves the normal floats: a very negative z gives 0 (PLAIN) or
 * +-0 (MUL) -- in the MUL mode x * sigmoid(z) can still be a normal float there (x = -88,
 * alpha = 1: -5.3e-37; it is below |x| * 1.2e-38), so those results are flushed too; x = -inf in the MUL
 * mode gives NaN (-inf * 0). Rounded once.
 * alpha must be finite. y may be x (in place). */
#define PB_SIGMOID_PLAIN 0
#define PB_SIGMOID_MUL 1
typedef struct pb_sigmoid_args {
    pb_exec exec;
    int32_t dtype;
    int32_t mode; /* PB_SIGMOID_PLAIN or PB_SIGMOID_MUL */
    float alpha;  /* PB_SIGMOID_MUL: the factor inside the sigmoid (QuickGelu's default 1.702) */
    int64_t n;
    const void *x;
    void *y;
} pb_sigmoid_args;
int pb_sigmoid(const void *args);

/* ReduceMean over one contiguous run of axes: x viewed as (outer, reduce, inner), y (outer,
 * inner) = mean over the middle axis, accumulated in f32 blocks summed in double, rounded once.
 * reduce == 0 gives NaN (the mean of nothing). */
typedef struct pb_reduce_mean_args {
    pb_exec exec;
    int32_t dtype;
    int64_t outer;
    int64_t reduce;
    int64_t inner;
    const void *x;
    void *y;
} pb_reduce_mean_args;
int pb_reduce_mean(const void *args);
/* PB_GROUP_ELTWISE_END */

/* ---- data_movement.toml: Transpose, Gather, Concat, ScatterND, Trilu ---- */
/* PB_GROUP_MOVEMENT_BEGIN */
/* Pure data movement: results are bit-exact copies of input elements (ScatterND's reductions
 * excepted: computed in f32, rounded once per update). Element types f32, f16, bf16. */
#define PB_MOVEMENT_MAX_RANK 8
#define PB_INDEX_INT32 6 /* ONNX TensorProto codes of index tensors */
#define PB_INDEX_INT64 7

/* Transpose: y = x.transpose(perm), rank 1..PB_MOVEMENT_MAX_RANK (ONNX Transpose): output axis
 * i is input axis perm[i]; x and y must not overlap. */
typedef struct pb_transpose_args {
    pb_exec exec;
    int32_t dtype;
    int32_t rank;
    int64_t shape[8]; /* input shape */
    int32_t perm[8];
    const void *x;
    void *y;
} pb_transpose_args;
int pb_transpose(const void *args);

/* Gather (ONNX, any axis): data viewed as (outer, axis_dim, inner), output (outer, n_indices,
 * inner) with output[o, i, :] = data[o, indices[i], :]. Negative indices count from the end
 * (ONNX); an index outside [-axis_dim, axis_dim) is an error (nothing is read out of bounds). */
typedef struct pb_gather_args {
    pb_exec exec;
    int32_t dtype;
    int32_t index_type; /* PB_INDEX_INT64 or PB_INDEX_INT32 */
    int64_t outer;
    int64_t axis_dim;
    int64_t inner;
    int64_t n_indices;
    const void *data;
    const void *indices;
    void *output;
} pb_gather_args;
int pb_gather(const void *args);

/* Concat (ONNX, any axis): input j viewed as (outer, extents[j], inner), output (outer,
 * sum of extents, inner). Inputs must not overlap the output. */
typedef struct pb_concat_args {
    pb_exec exec;
    int32_t dtype;
    int32_t n_inputs; /* 1..1024 */
    int64_t outer;
    int64_t inner;
    const int64_t *extents; /* n_inputs */
    const void **inputs;    /* n_inputs pointers */
    void *output;
} pb_concat_args;
int pb_concat(const void *args);

/* ScatterND (ONNX): output = data with the slices selected by indices replaced (reduction
 * none) or combined with the updates (add, mul, max, min; applied in index order, computed in
 * f32 and rounded to the element type once per update). data (shape[0..rank)), indices int64
 * (n_updates, k) addressing the first k axes (negative values count from the end), updates
 * (n_updates, prod(shape[k..rank))). output may be data itself (in place); else a copy of data
 * is written first. An index out of range is an error, nothing is written out of bounds. */
#define PB_REDUCTION_NONE 0
#define PB_REDUCTION_ADD 1
#define PB_REDUCTION_MUL 2
#define PB_REDUCTION_MAX 3
#define PB_REDUCTION_MIN 4
typedef struct pb_scatter_nd_args {
    pb_exec exec;
    int32_t dtype;
    int32_t reduction; /* PB_REDUCTION_* */
    int32_t rank;      /* 1..PB_MOVEMENT_MAX_RANK */
    int32_t k;         /* 1..rank */
    int64_t shape[8];
    int64_t n_updates;
    const int64_t *indices;
    const void *data;
    const void *updates;
    void *output;
} pb_scatter_nd_args;
int pb_scatter_nd(const void *args);

/* Trilu (ONNX): a batch of (rows, cols) matrices; upper=1 keeps elements with col - row >= k,
 * upper=0 keeps col - row <= k; the rest become zero. y may be x (in place). */
typedef struct pb_trilu_args {
    pb_exec exec;
    int32_t dtype;
    int32_t upper;
    int64_t k;
    int64_t batch;
    int64_t rows;
    int64_t cols;
    const void *x;
    void *y;
} pb_trilu_args;
int pb_trilu(const void *args);
/* PB_GROUP_MOVEMENT_END */

/* ---- onnx_attention.toml: ai.onnx Attention and RotaryEmbedding (opset 23) ---- */
/* PB_GROUP_ONNX_ATTN_BEGIN */
/* ai.onnx Attention (opset 23), as onnx.reference computes it.
 * layout PB_LAYOUT_BNSH (4-D): query (B, q_num_heads, q_seq, H), key/value (B, kv_num_heads,
 * kv_seq, H), output (B, q_num_heads, q_seq, H); PB_LAYOUT_BSNH (3-D): query (B, q_seq,
 * q_num_heads*H), key/value (B, kv_seq, kv_num_heads*H), output (B, q_seq, q_num_heads*H).
 * Query head n reads KV head n / (q_num_heads / kv_num_heads). With past (past_seq > 0):
 * past_key/past_value (B, kv_num_heads, past_seq, H), and present = past ++ new keys/values
 * (B, kv_num_heads, past_seq + kv_seq, H) is required; without past, present is optional (NULL:
 * not written). Scores: (q . k) * scale, then softcap (c * tanh(x / c), c > 0), then the mask
 * bias: attn_mask element (b, n, s, t) at attn_mask + b*mask_sb + n*mask_sh + s*mask_ss + t for
 * t < mask_len (a stride 0 broadcasts; keys t >= mask_len are masked, as ONNX pads a short mask),
 * bool (uint8: 0 = masked, -inf) or float (the cell's dtype, added); is_causal: query s sees keys
 * t <= past_seq + s (bottom-right). A row whose every key is masked gives zeros. qk_output
 * (NULL or (B, q_num_heads, q_seq, past_seq + kv_seq)): qk_matmul_output_mode 0 = scaled QK,
 * 1 = after softcap, 2 = after softcap and mask (-inf where masked), 3 = after softmax (zero rows
 * where fully masked). Declined with PB_ERR_UNSUPPORTED: mode 0 with softcap > 0 (the spec's
 * text says raw QK, onnx.reference returns it softcapped), head_size > 1024. */
#define PB_ONNX_MASK_NONE 0
#define PB_ONNX_MASK_BOOL 1
#define PB_ONNX_MASK_FLOAT 2
typedef struct pb_onnx_attention_args {
    pb_exec exec;
    int32_t dtype;
    int32_t layout;
    int32_t is_causal;
    int32_t mask_type; /* PB_ONNX_MASK_* */
    int32_t qk_matmul_output_mode;
    float scale;   /* 0: 1/sqrt(head_size) */
    float softcap; /* 0: off */
    int64_t batch;
    int64_t q_seq;
    int64_t kv_seq;
    int64_t past_seq;
    int64_t q_num_heads;
    int64_t kv_num_heads;
    int64_t head_size;
    int64_t mask_sb;
    int64_t mask_sh;
    int64_t mask_ss;
    int64_t mask_len;
    const void *query;
    const void *key;
    const void *value;
    const void *attn_mask;
    const void *past_key;
    const void *past_value;
    void *output;
    void *present_key;
    void *present_value;
    void *qk_output;
} pb_onnx_attention_args;
int pb_onnx_attention(const void *args);

/* ai.onnx RotaryEmbedding (opset 23). input/output PB_LAYOUT_BSNH (batch, seq,
 * num_heads*head_size) or PB_LAYOUT_BNSH (batch, num_heads, seq, head_size). The first
 * rotary_dim elements of each head vector rotate (halves, or pairs (x[2i], x[2i+1]) when
 * interleaved), the rest pass through. position_ids int64 (batch, seq) in [0, max_pos) with
 * cos/sin caches (max_pos, rotary_dim/2), or NULL with caches (batch, seq, rotary_dim/2). */
typedef struct pb_onnx_rotary_embedding_args {
    pb_exec exec;
    int32_t dtype;
    int32_t layout;
    int32_t interleaved;
    int64_t batch;
    int64_t seq;
    int64_t num_heads;
    int64_t head_size;
    int64_t rotary_dim; /* even, 2 .. head_size */
    int64_t max_pos;    /* cache rows with position_ids (ignored without) */
    const void *input;
    const int64_t *position_ids;
    const void *cos_cache;
    const void *sin_cache;
    void *output;
} pb_onnx_rotary_embedding_args;
int pb_onnx_rotary_embedding(const void *args);
/* PB_GROUP_ONNX_ATTN_END */

/* ---- matmul.toml: MatMul and Gemm ---- */
/* PB_GROUP_MATMUL_BEGIN */
/* Y[b] = alpha * op(A[b]) @ op(B[b]) + beta * C, for every batch index b of `batch_rank` dims
 * (each at most 8; Y is contiguous (batch..., m, n)): op(X) is X or its transpose (trans_a,
 * trans_b). A[b] is (m, k) -- (k, m) with trans_a -- at a + sum(b_i * a_strides[i]) elements, its
 * rows contiguous; B[b] likewise (k, n), or (n, k) with trans_b; a stride of 0 broadcasts that
 * batch dim. C (NULL: none) is read at c + i * c_rs + j * c_cs for every batch (a stride 0
 * broadcasts a dim of C), and only where beta != 0 (beta == 0 ignores NaN in C as Gemm does).
 * Products accumulate in f32 (f16 and bf16 converted in registers), Y is stored in dtype
 * (bf16 round-to-nearest-even). b_packed (NULL: pack B inside the call): a buffer that
 * pb_matmul_pack_b filled from this B (same dtype, k, n, trans_b, and batch_rank 0 or B broadcast
 * over every batch dim), read instead of B: ORT packs a constant weight at session creation, we
 * pack it once outside the timed call. Where m == 1 and the packed panels hold more bytes than
 * B (f16; bf16 on a path without bf16 pairs), or B is f32, not transposed and within the L2
 * (pb_set_core_cache_bytes), B is read instead, when given. A b_packed given is
 * checked against the problem on every call, k == 0 and m == 1 included. k == 0 gives
 * Y = beta * C (or 0). Y must not overlap A, B, C or b_packed. */
typedef struct pb_matmul_args {
    pb_exec exec;
    int32_t dtype;
    int32_t trans_a;
    int32_t trans_b;
    int32_t batch_rank;
    int64_t batch_dims[8];
    int64_t a_strides[8];
    int64_t b_strides[8];
    int64_t m;
    int64_t n;
    int64_t k;
    float alpha;
    float beta;
    int64_t c_rs;
    int64_t c_cs;
    const void *a;
    const void *b;
    const void *c;
    const void *b_packed;
    void *y;
} pb_matmul_args;
int pb_matmul(const void *args);
/* B of a pb_matmul_args (its dtype, k, n, trans_b, b; batch_rank must be 0) packed into `out`
 * (out_bytes at least pb_matmul_packed_bytes's), in the layout pb_matmul reads through
 * b_packed on this library's ISA path and cache sizes. */
typedef struct pb_matmul_pack_args {
    pb_exec exec;
    const pb_matmul_args *problem;
    void *out;
    int64_t out_bytes;
} pb_matmul_pack_args;
int pb_matmul_pack_b(const void *args);
/* Bytes pb_matmul_pack_b needs for a (k, n) B: *bytes_out; a status. */
int pb_matmul_packed_bytes(int64_t k, int64_t n, int64_t *bytes_out);
/* com.microsoft MatMulNBits: Y (m, n) = A (m, k) @ W + bias,
 * W (k, n) the block-quantized weight: b is (n, k_blocks, block_size * bits / 8) bytes, k_blocks =
 * ceil(k / block_size), column j of W contiguous along k, 8 / bits values a byte, the lowest bits
 * the first; W[p, j] = (q - zp) * scale with scale = scales[j * k_blocks + p / block_size] (dtype)
 * and zp: zero_points NULL (2^(bits - 1)), packed (zp_packed 1: uint8, ceil(k_blocks * bits / 8)
 * bytes a column, the lowest bits the even block) or unpacked (zp_packed 0: dtype, (n, k_blocks)).
 * bits 2, 4 or 8; block_size a power of two >= 16. A, scales, float zero points, bias (NULL: none)
 * and Y in dtype; sums in f32. Y must not overlap the inputs. accuracy_level 0: f32 products;
 * 4: each row of A quantized per block of block_size (at most 256) to int8 (scale max|a| / 127,
 * values rounded half to even: ORT's x86 rule), integer dot products with the weight's integers;
 * b_packed: NULL (B is regrouped in scratch every call) or pb_matmul_nbits_pack_b's copy of b. */
typedef struct pb_matmul_nbits_args {
    pb_exec exec;
    int32_t dtype;
    int32_t bits;
    int32_t block_size;
    int32_t zp_packed;
    int32_t accuracy_level;
    int64_t m;
    int64_t n;
    int64_t k;
    const void *a;
    const uint8_t *b;
    const void *scales;
    const void *zero_points;
    const void *bias;
    void *y;
    const uint8_t *b_packed;
} pb_matmul_nbits_args;
int pb_matmul_nbits(const void *args);
/* B's bytes regrouped for accuracy_level 4 (once, as ORT prepacks a constant weight), with the packed
 * zero points (zp_packed 1; NULL: none) one byte a block: bytes needed, and the packing into out
 * (out_bytes at least that). bits 2/4/8, block_size 16..256. A call with packed zero points needs
 * a b_packed made with them (the same values: the call reads the packed copy's). */
int pb_matmul_nbits_packed_bytes(int64_t n, int64_t k, int32_t bits, int32_t block_size, int64_t *bytes_out);
int pb_matmul_nbits_pack_b(const uint8_t *b, const uint8_t *zero_points, int64_t n, int64_t k, int32_t bits,
                           int32_t block_size, uint8_t *out, int64_t out_bytes);
/* PB_GROUP_MATMUL_END */

/* ---- host peak probes (perfbench peaks) ------------------------------------------------- */
/* Each thread runs `iters` iterations of independent multiply-adds; *flops_out receives the
 * floating-point operations one call performs (all threads), *method_out what was used. */
typedef struct pb_peak_args {
    pb_exec exec;
    int64_t iters;
    int64_t *flops_out;
    const char **method_out;
    float *sink; /* one float per thread, defeats dead-code elimination */
} pb_peak_args;
int pb_peak_fma_f32(const void *args);
int pb_peak_bf16_dot(const void *args);

/* Reads `bytes` of buf (split across threads) `passes` times over; sink gets one float per
 * thread. Several passes per call keep the pool's wake-up out of a small working set's figure.
 * copy = 1: the first half of buf is copied onto the second half instead (bytes read + written,
 * with the library's own store policy for that traffic: pb_stream_worth), so buf is written. */
typedef struct pb_read_args {
    pb_exec exec;
    const void *buf;
    int64_t bytes;
    int64_t passes;
    int32_t copy;
    float *sink;
} pb_read_args;
int pb_read_bandwidth(const void *args);

/* PB_CDEF_END */

#ifdef __cplusplus
}
#endif

#endif /* PERFBENCH_H */
