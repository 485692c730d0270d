/* data_movement.toml: Transpose, Gather, Concat, ScatterND, Trilu: public entry points (validate, then run the active ISA's microkernels).
 *
 * Every argument is checked before anything is written (shapes, overflow, pointers, overlap,
 * every index of Gather and ScatterND): a bad argument returns a status with a message, never a
 * read or write out of bounds. Work is split over the pool in contiguous ranges, with enough
 * bytes per thread that waking a worker pays. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../internal.h"

#define CHECK(x)                      \
    do {                              \
        int rc_ = (x);                \
        if (rc_ != PB_OK) return rc_; \
    } while (0)

/* Bytes (read + written) one thread should get before another is worth waking (~10-20 us). */
#define PB_MV_GRAIN_BYTES (512 * 1024)
/* Elements per work item of plain copies (Concat, ScatterND's copy of data). */
#define PB_MV_CHUNK 16384
/* Overflow guard for element counts: bytes must fit in int64 with room to spare. */
#define PB_MV_LIMIT (INT64_MAX / 16)
#define PB_MV_MAX_INPUTS 1024

static const pb_movement_table *mv(void) { return pb_active_isa()->movement; }

/* Outputs of at least this many bytes are written with non-temporal stores: they would not stay
 * in the caches anyway, and streaming them leaves the input there (copies here: 2x the bytes
 * per second from 16 MB on). $PERFBENCH_MOVEMENT_NT_BYTES overrides it (0: never). The cache
 * sizes the OS reports are not trusted for this (a VM reported a 256 MB L3). */
#define PB_MV_NT_BYTES (8 << 20)
static int64_t nt_bytes(void) {
    static int64_t v = -1;
    if (v < 0) {
        const char *e = getenv("PERFBENCH_MOVEMENT_NT_BYTES");
        long long x = e && *e ? atoll(e) : (long long)PB_MV_NT_BYTES;
        v = x > 0 ? (int64_t)x : INT64_MAX;
    }
    return v;
}
static int32_t use_nt(int64_t out_bytes) { return out_bytes >= nt_bytes(); }

static int check_args(const void *args, const char *k) {
    if (args == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: args is NULL", k);
    return PB_OK;
}

/* a*b into *out, or 0 if it would pass PB_MV_LIMIT (a, b >= 0) */
static int mul_ok(int64_t a, int64_t b, int64_t *out) {
    if (a != 0 && b > PB_MV_LIMIT / a) return 0;
    *out = a * b;
    return 1;
}

/* [a, a + an) and [b, b + bn) share a byte */
static int overlap(const void *a, size_t an, const void *b, size_t bn) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    if (an == 0 || bn == 0) return 0;
    return x < y + bn && y < x + an;
}

static int32_t threads_for_bytes(const pb_exec *ex, int64_t bytes) {
    return pb_threads_for(ex->num_threads, bytes, PB_MV_GRAIN_BYTES);
}

/* ---- plain parallel copy ---- */
typedef struct {
    pb_mv_copy_ukernel uk;
    const char *src;
    char *dst;
    int64_t n;
    size_t es;
    int32_t nt;
} copy_ctx;

static void copy_range(void *ctx, int64_t t0, int64_t t1) {
    copy_ctx *c = (copy_ctx *)ctx;
    int64_t e0 = t0 * PB_MV_CHUNK, e1 = t1 * PB_MV_CHUNK < c->n ? t1 * PB_MV_CHUNK : c->n;
    c->uk(c->dst + (size_t)e0 * c->es, c->src + (size_t)e0 * c->es, e1 - e0, c->nt);
}

static int parallel_copy(const pb_exec *ex, int32_t dtype, void *dst, const void *src, int64_t n) {
    if (n <= 0) return PB_OK;
    copy_ctx c = {mv()->copy[pb_dtype_index(dtype)], (const char *)src, (char *)dst, n, pb_dtype_size(dtype), 0};
    c.nt = use_nt(n * (int64_t)c.es);
    int64_t chunks = (n + PB_MV_CHUNK - 1) / PB_MV_CHUNK;
    return pb_parallel_for(threads_for_bytes(ex, 2 * n * (int64_t)c.es), chunks, copy_range, &c);
}

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
    CHECK(check_args(args, k));
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
        if (!mul_ok(total, a->shape[i], &total)) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: tensor size overflows", k);
    }
    if (total == 0) return PB_OK;
    if (a->x == NULL || a->y == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: x and y must not be NULL", k);
    const size_t es = pb_dtype_size(a->dtype), bytes = (size_t)total * es;
    if (overlap(a->x, bytes, a->y, bytes))
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
    if (ng <= 1) return parallel_copy(&a->exec, a->dtype, a->y, a->x, total);
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
        p.nt = use_nt((int64_t)bytes);
        c.uk = mv()->transpose_runs[di];
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
        c.uk = mv()->transpose_tiles[di];
    }
    return pb_parallel_for(threads_for_bytes(&a->exec, 2 * (int64_t)bytes), items, transpose_range, &c);
}

/* ---- Gather ---- */
typedef struct {
    pb_mv_gather_ukernel uk;
    const pb_gather_args *a;
    int32_t nt;
} gather_ctx;

static void gather_range(void *ctx, int64_t r0, int64_t r1) {
    gather_ctx *c = (gather_ctx *)ctx;
    c->uk(c->a, r0, r1, c->nt);
}

int pb_gather(const void *args) {
    const char *k = "gather";
    CHECK(check_args(args, k));
    const pb_gather_args *a = (const pb_gather_args *)args;
    CHECK(pb_check_exec(&a->exec, k));
    CHECK(pb_check_dtype(a->dtype, k));
    if (a->index_type != PB_INDEX_INT64 && a->index_type != PB_INDEX_INT32)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: index_type=%d, expected %d (int64) or %d (int32)", k,
                       (int)a->index_type, PB_INDEX_INT64, PB_INDEX_INT32);
    if (a->outer < 0 || a->axis_dim < 0 || a->inner < 0 || a->n_indices < 0)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: outer=%lld axis_dim=%lld inner=%lld n_indices=%lld must be >= 0", k,
                       (long long)a->outer, (long long)a->axis_dim, (long long)a->inner, (long long)a->n_indices);
    int64_t data_n, rows, out_n;
    if (!mul_ok(a->outer, a->axis_dim, &data_n) || !mul_ok(data_n, a->inner, &data_n) ||
        !mul_ok(a->outer, a->n_indices, &rows) || !mul_ok(rows, a->inner, &out_n))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: tensor sizes overflow", k);
    if (a->n_indices > 0 && a->indices == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: indices is NULL", k);
    /* every index is checked even when nothing would be copied: a bad index is a bad node */
    const int wide = a->index_type == PB_INDEX_INT64;
    for (int64_t i = 0; i < a->n_indices; i++) {
        int64_t v = wide ? ((const int64_t *)a->indices)[i] : (int64_t)((const int32_t *)a->indices)[i];
        if (v < -a->axis_dim || v >= a->axis_dim)
            return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: indices[%lld] = %lld is outside [-%lld, %lld) (axis of size %lld)",
                           k, (long long)i, (long long)v, (long long)a->axis_dim, (long long)a->axis_dim,
                           (long long)a->axis_dim);
    }
    if (out_n == 0) return PB_OK;
    if (a->data == NULL || a->output == NULL)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: data and output must not be NULL", k);
    const size_t es = pb_dtype_size(a->dtype);
    const size_t ib = (size_t)a->n_indices * (wide ? 8 : 4);
    if (overlap(a->output, (size_t)out_n * es, a->data, (size_t)data_n * es) ||
        overlap(a->output, (size_t)out_n * es, a->indices, ib))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: output overlaps data or indices", k);
    gather_ctx c = {mv()->gather[pb_dtype_index(a->dtype)], a, use_nt(out_n * (int64_t)es)};
    return pb_parallel_for(threads_for_bytes(&a->exec, 2 * out_n * (int64_t)es), rows, gather_range, &c);
}

/* ---- Concat ---- */
typedef struct {
    pb_mv_concat_ukernel uk;
    const pb_concat_args *a;
    const int64_t *offsets;
    int64_t total;
    int32_t nt;
} concat_ctx;

static void concat_range(void *ctx, int64_t t0, int64_t t1) {
    concat_ctx *c = (concat_ctx *)ctx;
    int64_t e1 = t1 * PB_MV_CHUNK < c->total ? t1 * PB_MV_CHUNK : c->total;
    c->uk(c->a, c->offsets, t0 * PB_MV_CHUNK, e1, c->nt);
}

int pb_concat(const void *args) {
    const char *k = "concat";
    CHECK(check_args(args, k));
    const pb_concat_args *a = (const pb_concat_args *)args;
    CHECK(pb_check_exec(&a->exec, k));
    CHECK(pb_check_dtype(a->dtype, k));
    if (a->n_inputs < 1 || a->n_inputs > PB_MV_MAX_INPUTS)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: n_inputs=%d, expected 1..%d", k, (int)a->n_inputs, PB_MV_MAX_INPUTS);
    if (a->outer < 0 || a->inner < 0)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: outer=%lld inner=%lld must be >= 0", k, (long long)a->outer,
                       (long long)a->inner);
    if (a->extents == NULL || a->inputs == NULL)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: extents and inputs must not be NULL", k);
    int64_t offsets[PB_MV_MAX_INPUTS + 1];
    offsets[0] = 0;
    for (int j = 0; j < a->n_inputs; j++) {
        int64_t piece;
        if (a->extents[j] < 0)
            return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: extents[%d]=%lld must be >= 0", k, j, (long long)a->extents[j]);
        if (!mul_ok(a->extents[j], a->inner, &piece) || offsets[j] > PB_MV_LIMIT - piece)
            return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: tensor sizes overflow", k);
        offsets[j + 1] = offsets[j] + piece;
    }
    int64_t total;
    if (!mul_ok(a->outer, offsets[a->n_inputs], &total)) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: tensor sizes overflow", k);
    if (total == 0) return PB_OK;
    if (a->output == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: output is NULL", k);
    const size_t es = pb_dtype_size(a->dtype);
    for (int j = 0; j < a->n_inputs; j++) {
        size_t in_bytes = (size_t)(a->outer * (offsets[j + 1] - offsets[j])) * es;
        if (in_bytes == 0) continue;
        if (a->inputs[j] == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: inputs[%d] is NULL", k, j);
        if (overlap(a->inputs[j], in_bytes, a->output, (size_t)total * es))
            return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: inputs[%d] overlaps the output", k, j);
    }
    concat_ctx c = {mv()->concat[pb_dtype_index(a->dtype)], a, offsets, total, use_nt(total * (int64_t)es)};
    int64_t chunks = (total + PB_MV_CHUNK - 1) / PB_MV_CHUNK;
    return pb_parallel_for(threads_for_bytes(&a->exec, 2 * total * (int64_t)es), chunks, concat_range, &c);
}

/* ---- ScatterND ---- */
typedef struct {
    const pb_scatter_nd_args *a;
    int64_t strides[PB_MOVEMENT_MAX_RANK]; /* element strides of the first k axes */
    int64_t slice;
    size_t es;
} scatter_ctx;

static int64_t scatter_offset(const scatter_ctx *c, int64_t u) {
    const int64_t *ix = c->a->indices + u * c->a->k;
    int64_t off = 0;
    for (int d = 0; d < c->a->k; d++) {
        int64_t v = ix[d];
        if (v < 0) v += c->a->shape[d];
        off += v * c->strides[d];
    }
    return off;
}

static void scatter_range(void *ctx, int64_t u0, int64_t u1) {
    scatter_ctx *c = (scatter_ctx *)ctx;
    char *out = (char *)c->a->output;
    const char *upd = (const char *)c->a->updates;
    for (int64_t u = u0; u < u1; u++)
        memcpy(out + (size_t)scatter_offset(c, u) * c->es, upd + (size_t)(u * c->slice) * c->es, (size_t)c->slice * c->es);
}

int pb_scatter_nd(const void *args) {
    const char *k = "scatter_nd";
    CHECK(check_args(args, k));
    const pb_scatter_nd_args *a = (const pb_scatter_nd_args *)args;
    CHECK(pb_check_exec(&a->exec, k));
    CHECK(pb_check_dtype(a->dtype, k));
    if (a->reduction < PB_REDUCTION_NONE || a->reduction > PB_REDUCTION_MIN)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: reduction=%d, expected 0 (none), 1 (add), 2 (mul), 3 (max) or 4 (min)",
                       k, (int)a->reduction);
    if (a->rank < 1 || a->rank > PB_MOVEMENT_MAX_RANK)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: rank=%d, expected 1..%d", k, (int)a->rank, PB_MOVEMENT_MAX_RANK);
    if (a->k < 1 || a->k > a->rank)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: k=%d (index depth), expected 1..rank=%d", k, (int)a->k, (int)a->rank);
    if (a->n_updates < 0) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: n_updates=%lld must be >= 0", k, (long long)a->n_updates);
    scatter_ctx c;
    memset(&c, 0, sizeof c);
    c.a = a;
    c.es = pb_dtype_size(a->dtype);
    int64_t total = 1, slice = 1, upd_n, idx_n;
    for (int d = 0; d < a->rank; d++) {
        if (a->shape[d] < 0)
            return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: shape[%d]=%lld must be >= 0", k, d, (long long)a->shape[d]);
        if (!mul_ok(total, a->shape[d], &total)) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: tensor sizes overflow", k);
        if (d >= a->k) slice *= a->shape[d];
    }
    if (!mul_ok(a->n_updates, slice, &upd_n) || !mul_ok(a->n_updates, a->k, &idx_n))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: tensor sizes overflow", k);
    c.slice = slice;
    for (int d = a->k - 1; d >= 0; d--) c.strides[d] = d == a->k - 1 ? slice : c.strides[d + 1] * a->shape[d + 1];
    if (a->n_updates > 0 && a->indices == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: indices is NULL", k);
    for (int64_t u = 0; u < a->n_updates; u++) {
        for (int d = 0; d < a->k; d++) {
            int64_t v = a->indices[u * a->k + d];
            if (v < -a->shape[d] || v >= a->shape[d])
                return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: indices[%lld, %d] = %lld is outside [-%lld, %lld) (axis %d of data)",
                               k, (long long)u, d, (long long)v, (long long)a->shape[d], (long long)a->shape[d], d);
        }
    }
    if (total == 0) return PB_OK;
    if (a->data == NULL || a->output == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: data and output must not be NULL", k);
    if (upd_n > 0 && a->updates == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: updates is NULL", k);
    const size_t bytes = (size_t)total * c.es;
    if (a->data != a->output && overlap(a->data, bytes, a->output, bytes))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: data and output overlap partially (in place needs output == data)", k);
    if (overlap(a->updates, (size_t)upd_n * c.es, a->output, bytes) ||
        overlap(a->indices, (size_t)idx_n * 8, a->output, bytes))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: updates or indices overlap the output", k);
    if (a->data != a->output) CHECK(parallel_copy(&a->exec, a->dtype, a->output, a->data, total));
    if (a->n_updates == 0 || slice == 0) return PB_OK;
    if (a->reduction == PB_REDUCTION_NONE) {
        /* distinct slices (ONNX: duplicate indices are undefined without a reduction) */
        return pb_parallel_for(threads_for_bytes(&a->exec, 2 * upd_n * (int64_t)c.es), a->n_updates, scatter_range, &c);
    }
    /* reductions: in index order, one thread (duplicates combine in a defined order) */
    pb_mv_reduce_ukernel uk = mv()->reduce[pb_dtype_index(a->dtype)];
    char *out = (char *)a->output;
    const char *upd = (const char *)a->updates;
    for (int64_t u = 0; u < a->n_updates; u++)
        uk(out + (size_t)scatter_offset(&c, u) * c.es, upd + (size_t)(u * slice) * c.es, slice, a->reduction);
    return PB_OK;
}

/* ---- Trilu ---- */
typedef struct {
    pb_mv_trilu_ukernel uk;
    const pb_trilu_args *a;
    int32_t nt;
} trilu_ctx;

static void trilu_range(void *ctx, int64_t r0, int64_t r1) {
    trilu_ctx *c = (trilu_ctx *)ctx;
    c->uk(c->a, r0, r1, c->nt);
}

int pb_trilu(const void *args) {
    const char *k = "trilu";
    CHECK(check_args(args, k));
    const pb_trilu_args *a = (const pb_trilu_args *)args;
    CHECK(pb_check_exec(&a->exec, k));
    CHECK(pb_check_dtype(a->dtype, k));
    if (a->upper != 0 && a->upper != 1) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: upper=%d, expected 0 or 1", k, (int)a->upper);
    if (a->batch < 0 || a->rows < 0 || a->cols < 0)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: batch=%lld rows=%lld cols=%lld must be >= 0", k, (long long)a->batch,
                       (long long)a->rows, (long long)a->cols);
    int64_t nrows, total;
    if (!mul_ok(a->batch, a->rows, &nrows) || !mul_ok(nrows, a->cols, &total))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: tensor sizes overflow", k);
    if (total == 0) return PB_OK;
    if (a->x == NULL || a->y == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: x and y must not be NULL", k);
    const size_t bytes = (size_t)total * pb_dtype_size(a->dtype);
    if (a->x != a->y && overlap(a->x, bytes, a->y, bytes))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: x and y overlap partially (in place needs y == x)", k);
    trilu_ctx c = {mv()->trilu[pb_dtype_index(a->dtype)], a, use_nt((int64_t)bytes) && a->x != a->y};
    return pb_parallel_for(threads_for_bytes(&a->exec, 2 * (int64_t)bytes), nrows, trilu_range, &c);
}
