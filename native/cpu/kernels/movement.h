/* data_movement.toml: Transpose, Gather, Concat, ScatterND, Trilu: the microkernel table each ISA path fills in (included by internal.h). */
#ifndef PB_MOVEMENT_H
#define PB_MOVEMENT_H

#include <stdint.h>

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
    int32_t nt; /* runs: non-temporal stores (outputs past PB_MV_NT_BYTES) */
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

typedef struct pb_movement_table {
    pb_mv_transpose_ukernel transpose_runs[3];
    pb_mv_transpose_ukernel transpose_tiles[3];
    pb_mv_gather_ukernel gather[3];
    pb_mv_concat_ukernel concat[3];
    pb_mv_reduce_ukernel reduce[3];
    pb_mv_trilu_ukernel trilu[3];
    pb_mv_copy_ukernel copy[3];
} pb_movement_table;
#endif
