/* Transpose: simplify the permutation (drop size-1 axes, merge axes that stay neighbours), then run
 * contiguous runs or 32x32 tiles over the pool; a permutation that keeps the order is a copy.
 *
 * Every argument is checked before anything is written (shapes, overflow, pointers, overlap):
 * a bad argument returns a status with a message, never a read or write out of bounds. */
#include <stdint.h>
#include <string.h>

#include "../internal.h"

/* ---- Transpose ---- */
typedef struct {
    pb_mv_transpose_ukernel uk;
    const pb_mv_transpose_plan *p;
} transpose_ctx;

static void transpose_range(void *ctx, int64_t t0, int64_t t1) {
    transpose_ctx *c = (transpose_ctx *)ctx;
    c->uk(c->p, t0, t1);
}

int pb_transpose(const void *args) {
    const char *k = "transpose";
    CHECK(pb_check_args(args, k));
    const pb_transpose_args *a = (const pb_transpose_args *)args;
    CHECK(pb_check_exec(&a->exec, k));
    CHECK(pb_check_dtype(a->dtype, k));
    const int r = a->rank;
    if (r < 1 || r > PB_MOVEMENT_MAX_RANK)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: rank=%d, expected 1..%d", k, r, PB_MOVEMENT_MAX_RANK);
    int seen[PB_MOVEMENT_MAX_RANK] = {0};
    int64_t total = 1;
    for (int i = 0; i < r; i++) {
        if (a->shape[i] < 0)
            return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: shape[%d]=%lld must be >= 0", k, i, (long long)a->shape[i]);
        if (a->perm[i] < 0 || a->perm[i] >= r || seen[a->perm[i]]++)
            return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: perm is not a permutation of 0..%d (perm[%d]=%d)", k, r - 1, i,
                           (int)a->perm[i]);
        if (!pb_mul_ok(total, a->shape[i], &total)) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: tensor size overflows", k);
    }
    if (total == 0) return PB_OK;
    if (a->x == NULL || a->y == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: x and y must not be NULL", k);
    const size_t es = pb_dtype_size(a->dtype), bytes = (size_t)total * es;
    if (pb_overlap(a->x, bytes, a->y, bytes))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: x and y overlap (a transpose cannot run in place)", k);

    /* simplify: drop size-1 axes, then merge input axes that stay neighbours in the output */
    int64_t ns[PB_MOVEMENT_MAX_RANK];
    int map[PB_MOVEMENT_MAX_RANK], p2[PB_MOVEMENT_MAX_RANK], n = 0, m = 0;
    for (int i = 0; i < r; i++) {
        map[i] = a->shape[i] == 1 ? -1 : n;
        if (a->shape[i] != 1) ns[n++] = a->shape[i];
    }
    for (int j = 0; j < r; j++)
        if (map[a->perm[j]] >= 0) p2[m++] = map[a->perm[j]];
    int gfirst[PB_MOVEMENT_MAX_RANK], ng = 0;
    int64_t gsize[PB_MOVEMENT_MAX_RANK];
    for (int j = 0; j < m; j++) {
        if (j > 0 && p2[j] == p2[j - 1] + 1) {
            gsize[ng - 1] *= ns[p2[j]];
        } else {
            gfirst[ng] = p2[j];
            gsize[ng] = ns[p2[j]];
            ng++;
        }
    }
    if (ng <= 1) return pb_parallel_copy(&a->exec, a->dtype, a->y, a->x, total);
    int perm3[PB_MOVEMENT_MAX_RANK];
    int64_t shape3[PB_MOVEMENT_MAX_RANK];
    for (int g = 0; g < ng; g++) {
        int in_axis = 0;
        for (int h = 0; h < ng; h++) in_axis += gfirst[h] < gfirst[g];
        perm3[g] = in_axis;
        shape3[in_axis] = gsize[g];
    }
    int64_t is[PB_MOVEMENT_MAX_RANK], os[PB_MOVEMENT_MAX_RANK];
    is[ng - 1] = os[ng - 1] = 1;
    for (int i = ng - 2; i >= 0; i--) {
        is[i] = is[i + 1] * shape3[i + 1];
        os[i] = os[i + 1] * shape3[perm3[i + 1]];
    }

    pb_mv_transpose_plan p;
    memset(&p, 0, sizeof p);
    p.x = a->x;
    p.y = a->y;
    const int di = pb_dtype_index(a->dtype);
    transpose_ctx c = {NULL, &p};
    int64_t items;
    if (perm3[ng - 1] == ng - 1) {
        /* the last input axis stays last: contiguous runs */
        p.run = shape3[ng - 1];
        p.n_outer = ng - 1;
        for (int g = 0; g < ng - 1; g++) {
            p.dims[g] = shape3[perm3[g]];
            p.src_stride[g] = is[perm3[g]];
        }
        items = total / p.run;
        p.nt = pb_stream_worth(2 * (int64_t)bytes);
        c.uk = pb_active_isa()->transpose_runs[di];
    } else {
        /* the last input axis moves: (rows, cols) tiles between the input axis that becomes the
         * output's last and the input's last axis */
        int pos = 0;
        while (perm3[pos] != ng - 1) pos++;
        const int ra = perm3[ng - 1];
        p.rows = shape3[ra];
        p.src_row_stride = is[ra];
        p.cols = shape3[ng - 1];
        p.dst_col_stride = os[pos];
        int q = 0;
        for (int g = 0; g < ng - 1; g++) {
            if (g == pos) continue;
            p.dims[q] = shape3[perm3[g]];
            p.src_stride[q] = is[perm3[g]];
            p.dst_stride[q] = os[g];
            q++;
        }
        p.n_outer = q;
        p.row_tiles = (p.rows + PB_MV_TILE - 1) / PB_MV_TILE;
        p.col_tiles = (p.cols + PB_MV_TILE - 1) / PB_MV_TILE;
        items = total / (p.rows * p.cols) * p.row_tiles * p.col_tiles;
        c.uk = pb_active_isa()->transpose_tiles[di];
    }
    return pb_parallel_for(pb_threads_for(a->exec.num_threads, 2 * (int64_t)bytes, PB_GRAIN_MOVE_BYTES), items, transpose_range, &c);
}
