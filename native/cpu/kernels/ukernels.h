/* The microkernel types of every family but attention (kernels/attention.h), named by the slots
 * of kernels.def. Each microkernel does one share of a validated problem on one thread. */
#ifndef PB_UKERNELS_H
#define PB_UKERNELS_H
#include <stdint.h>

/* ---- cast, softmax ---- */
/* Softmax of rows [r0, r1) of a (rows, cols) matrix. */
typedef void (*pb_softmax_ukernel)(const void *x, void *y, int64_t r0, int64_t r1, int64_t cols);
/* Elements [i0, i1) converted to / from f32. */
typedef void (*pb_cast_ukernel)(const void *src, void *dst, int64_t i0, int64_t i1);

/* ---- layer_norm ---- */
/* Rows [r0, r1) of a pb_layer_norm_args problem (already validated); stream: store the outputs
 * non-temporally (every row 32-byte aligned; ISA paths without streaming stores ignore it). */
typedef void (*pb_layer_norm_ukernel)(const pb_layer_norm_args *a, int64_t r0, int64_t r1, int stream);

/* ---- binary, gelu, reduce ---- */
/* y[i] = a[i] (op) b[i], i < n (vv); y[i] = a[i] (op) b[0] (vs: b one broadcast element);
 * y[i] = a[0] (op) b[i] (sv: a one broadcast element).
 * nt: store y with non-temporal (streaming) stores, for outputs far beyond the caches (y must
 * be aligned to its element size; the kernel peels to vector alignment and fences at its end). */
typedef void (*pb_binary_ukernel)(const void *a, const void *b, void *y, int64_t n, int nt);
/* Gelu of elements [e0, e1) of a (rows, cols) matrix; bias NULL or (cols), added per row; nt
 * as above. */
typedef void (*pb_gelu_ukernel)(const void *x, const void *bias, void *y, int64_t e0, int64_t e1, int64_t cols,
                                int nt);
/* Sigmoid family on elements [i0, i1): y = sigmoid(x) (PB_SIGMOID_PLAIN) or x * sigmoid(alpha x)
 * (PB_SIGMOID_MUL; alpha read only there); nt as above. */
typedef void (*pb_sigmoid_ukernel)(const void *x, void *y, int64_t i0, int64_t i1, float alpha, int nt);
/* Sum of elements [i0, i1) of x: f32 vector blocks, block sums added in double. */
typedef double (*pb_sum_ukernel)(const void *x, int64_t i0, int64_t i1);
/* Column means of an (R, inner) slab, columns [j0, j1): y[j] = scale * sum_r x[r, j]. */
typedef void (*pb_colmean_ukernel)(const void *x, void *y, int64_t R, int64_t inner, int64_t j0, int64_t j1,
                                   double scale);

/* ---- transpose, gather, concat, scatter, trilu ---- */
/* A transpose after simplification (size-1 axes dropped, axes that stay neighbours merged),
 * split into `outer` axes that the work items iterate over and the inner work of one item.
 *
 * Runs (the last input axis stays last): item t copies `run` contiguous elements to
 * y + t*run from x + sum(idx_i * src_stride[i]), idx = t as a multi-index over dims (output
 * order).
 *
 * Tiles (the last input axis moves): per outer index, a (rows, cols) block is transposed:
 * element (i, j) at x + i*src_row_stride + j goes to y + j*dst_col_stride + i. Items are tiles
 * of PB_MV_TILE x PB_MV_TILE: item t = (outer index, row tile, column tile). */
#define PB_MV_TILE 32
typedef struct pb_mv_transpose_plan {
    int32_t n_outer;
    int64_t dims[8];
    int64_t src_stride[8];
    int64_t dst_stride[8];
    int64_t run;
    int64_t rows, cols, src_row_stride, dst_col_stride;
    int64_t row_tiles, col_tiles;
    int32_t nt; /* runs: non-temporal stores (pb_stream_worth) */
    const void *x;
    void *y;
} pb_mv_transpose_plan;

/* Items [t0, t1) of a plan (runs or tiles). */
typedef void (*pb_mv_transpose_ukernel)(const pb_mv_transpose_plan *p, int64_t t0, int64_t t1);
/* nt (below): copy with non-temporal stores, for outputs too large to stay in the caches (the
 * driver decides; the microkernel fences before it returns). */
/* Output rows [r0, r1) of the (outer * n_indices) rows; indices already checked in range. */
typedef void (*pb_mv_gather_ukernel)(const pb_gather_args *a, int64_t r0, int64_t r1, int32_t nt);
/* Output elements [e0, e1) of a concat; offsets[j] = inner * (extents[0] + .. + extents[j-1]). */
typedef void (*pb_mv_concat_ukernel)(const pb_concat_args *a, const int64_t *offsets, int64_t e0, int64_t e1,
                                     int32_t nt);
/* dst[i] = op(dst[i], src[i]) for i < n (PB_REDUCTION_ADD/MUL/MAX/MIN), in f32, rounded once. */
typedef void (*pb_mv_reduce_ukernel)(void *dst, const void *src, int64_t n, int32_t op);
/* Matrix rows [r0, r1) of the (batch * rows) rows of a Trilu. */
typedef void (*pb_mv_trilu_ukernel)(const pb_trilu_args *a, int64_t r0, int64_t r1, int32_t nt);
/* n elements copied (no overlap). */
typedef void (*pb_mv_copy_ukernel)(void *dst, const void *src, int64_t n, int32_t nt);
/* ---- matmul (kernels/matmul.inc.c) ---- */
/* rows of A per register tile and packed A panel: PB_MM_MR, per ISA path (isa_body.inc.c; the
 * driver blocks by pb_isa.mm_mr) */
/* Pack a block of A into MR-row panels / of B into NR-column panels (f32, zero-padded). */
typedef void (*pb_matmul_pack_ukernel)(const void *src, int64_t rs, int64_t cs, int64_t r0, int64_t rn, int64_t c0,
                                       int64_t cn, float *dst);
/* mr x n block of Y from one packed A panel and one packed B panel over kc (partial sums in acc);
 * pf (or NULL): a panel laid out as bp, prefetched into the L2 one k row per k step. */
typedef void (*pb_matmul_tile_ukernel)(const float *ap, const float *bp, int64_t kc, float *acc, int64_t ldacc,
                                       int load, int final, int64_t mr, int64_t n, void *y, int64_t ldy, float alpha,
                                       float beta, const void *c, int64_t c_rs, int64_t c_cs, const char *pf);
/* One contiguous row of A (f32 words) x one packed B panel over kc, n (1..NR) columns of one row of Y. */
typedef void (*pb_matmul_row_ukernel)(const float *x, const float *bp, int64_t kc, float *acc, int64_t ldacc, int load,
                                      int final, int64_t n, void *y, float alpha, float beta, const void *c,
                                      int64_t c_cs);
/* MatMulNBits: columns [j0, j1) of one row of Y from the row's x prepared by the driver (f32, per
 * block and per LANES-byte chunk of the block's bytes, 8 / bits runs of LANES values, lane l of
 * run f the k at byte l, field f; zero past k); b, scales, zp and bias as pb_matmul_nbits_args
 * (zp_mode 0 none, 1 packed, 2 dtype). */
typedef void (*pb_matmul_nbits_ukernel)(const float *xp, const uint8_t *b, const void *scales,
                                        const void *zp, int zp_mode, const void *bias, int bits, int64_t block_size,
                                        int64_t kb, int64_t j0, int64_t j1, void *y);
/* MatMulNBits accuracy_level 4: columns [j0, j1) of nrows rows of Y (ldy elements a row) from the
 * rows of A quantized to int8 and laid out by the driver, xrow floats apart: each row's blocks' int8
 * sums at [0, nbp), their scales at [nbp, 2 nbp), its int8 values from float xq_off on; bp: B
 * packed (kernels/nbits.inc.c states both layouts); wide: a single row may take four columns at a
 * time (PB_NB_NC1) rather than two; zp_mode 0, 2 or 3 (packed zero points only as the packed copy's,
 * a byte a block, kb rounded up to a group a column; not 1); the rest as pb_matmul_nbits_ukernel. */
#define PB_NB_GROUP 16 /* blocks a packed group: the widest path's lanes, so one layout serves every path */
typedef void (*pb_matmul_nbits_i8_ukernel)(const float *rows, int64_t xrow, int64_t nrows, int64_t nbp, int64_t xq_off,
                                           const uint8_t *bp, const void *scales, const void *zp, int zp_mode,
                                           const void *bias, int bits, int64_t block_size, int64_t kb, int64_t j0,
                                           int64_t j1, void *y, int64_t ldy, int wide);
/* MatMulNBits accuracy_level 4: rows [i0, i1) of A (M x K of the dtype) quantized per block to
 * int8 and laid out at rows + i x xrow as pb_matmul_nbits_i8_ukernel reads them (kernels/nbits.inc.c). */
typedef void (*pb_matmul_nbits_quant_ukernel)(const void *a, int64_t k, int64_t i0, int64_t i1, int bits,
                                              int64_t block_size, int64_t kb, int64_t nbp, int64_t xq_off,
                                              int64_t xrow, float *rows);
/* MatMulNBits accuracy 0, M >= 3 (a GEMM over dequantized panels, run by matmul.c's blocked loop):
 * k-rows [p0, p0 + kc) x columns [j0, j0 + nc) of B (k in its natural order: A is packed as it
 * lies), each weight (q - zp) x scale in f32, into ceil(nc / NR) panels of kc x NR as matmul_pack_b
 * lays them out, columns past nc zero; kc <= PB_MM_KC_MAX. src: a pb_nbits_panel_src. The type is
 * also the blocked loop's hook for B panels made by the caller. */
#define PB_MM_KC_MAX 1024 /* the most k a K step of matmul.c's blocked loop takes */
#define PB_MM_PANEL_ACC_K 128 /* made panels: k a tile sums in registers before adding to Y (matmul.c) */
typedef struct pb_nbits_panel_src {
    const uint8_t *b;
    const void *scales, *zp;
    int zp_mode, bits;
    int64_t block_size, kb;
} pb_nbits_panel_src;
typedef void (*pb_matmul_panel_ukernel)(const void *src, int64_t p0, int64_t kc, int64_t j0, int64_t nc, float *dst);
/* Columns [j0, j1) of one row of A times B (M = 1). */
typedef void (*pb_matmul_gemv_ukernel)(const void *x, int64_t xs, const void *b, int64_t rs, int64_t cs, int64_t k,
                                       int64_t j0, int64_t j1, void *y, float alpha, float beta, const void *c,
                                       int64_t c_cs);

#endif
