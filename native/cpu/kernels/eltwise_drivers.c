/* elementwise.toml: Add, Mul, Gelu, FastGelu, BiasGelu, Sigmoid, QuickGelu, ReduceMean: public entry points
 * (validate every argument and return a status, never crash; pick threads with pb_threads_for;
 * run the active ISA's microkernels over pb_parallel_for). */
#include <math.h>
#include <stdint.h>

#include "../internal.h"

#define CHECK(x)                      \
    do {                              \
        int rc_ = (x);                \
        if (rc_ != PB_OK) return rc_; \
    } while (0)

/* Elements one thread should get before another is worth waking (spin off: a sleeping worker
 * takes ~10-20 us to join on this VM): ~15-30 us of one thread's work. Add/Mul stream ~12 bytes
 * per f32 element (~60-80 GB/s in L2); Gelu costs ~1-3.5 cycles per element; ReduceMean only
 * reads. Chosen on a busy 2-core host (second thread contended): a quiet host may want less.
 * Gelu 131072: at 65k elements a second thread measured slower than one (wake cost > half). */
#define PBE_GRAIN_BINARY 65536
#define PBE_GRAIN_GELU 131072
/* Sigmoid family: the same per-element cost as the tanh Gelu (one exp, one division) */
#define PBE_GRAIN_SIGMOID 131072
#define PBE_GRAIN_REDUCE 131072
/* Element-split kernels hand out whole blocks (a multiple of every lane count: threads start
 * on 64-byte boundaries of f32 and 16-bit data alike, given aligned buffers). */
#define PBE_BLOCK 512
/* Working sets of at least this many bytes store their output with non-temporal stores: the
 * output is not read back by this call and would only evict the inputs. Measured here (AVX2,
 * y = a + b in f32, warm loop): no difference at 3 MiB, +20% at 12 MiB, +30-50% at 24-48 MiB. */
#define PBE_NT_BYTES (8 << 20)
/* ReduceMean over columns: columns per task */
#define PBE_COL_CHUNK 256

static const int64_t PBE_LIMIT = INT64_MAX / 16;

static int check_args_ptr(const void *args, const char *kernel) {
    if (args == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: args is NULL", kernel);
    return PB_OK;
}

/* [p, p + pn) and [q, q + qn) share a byte, other than being the very same range */
static int overlap_unless_same(const void *p, size_t pn, const void *q, size_t qn) {
    uintptr_t a = (uintptr_t)p, b = (uintptr_t)q;
    if (a == b && pn == qn) return 0;
    if (pn == 0 || qn == 0) return 0;
    return a < b + qn && b < a + pn;
}

static int overlap_any(const void *p, size_t pn, const void *q, size_t qn) {
    uintptr_t a = (uintptr_t)p, b = (uintptr_t)q;
    if (pn == 0 || qn == 0) return 0;
    return a < b + qn && b < a + pn;
}

/* ================================ Add / Mul ================================================ */

typedef struct {
    pb_binary_ukernel vv, vs;
    int kind; /* the innermost run: 0 both contiguous, 1 b one element, 2 a one element */
    int nt;   /* streaming stores */
    int nd;   /* outer dims, outermost first */
    int64_t dim[8], sa[8], sb[8];
    int64_t inner, total;
    size_t esz;
    const char *a, *b;
    char *y;
} bin_plan;

static void bin_range(void *ctx, int64_t t0, int64_t t1) {
    const bin_plan *p = (const bin_plan *)ctx;
    int64_t e = t0 * PBE_BLOCK, e_end = t1 * PBE_BLOCK;
    if (e_end > p->total) e_end = p->total;
    if (e >= e_end) return;
    int64_t row = e / p->inner, off = e % p->inner;
    int64_t idx[8], oa = 0, ob = 0;
    for (int d = p->nd - 1; d >= 0; d--) {
        idx[d] = row % p->dim[d];
        row /= p->dim[d];
        oa += idx[d] * p->sa[d];
        ob += idx[d] * p->sb[d];
    }
    const size_t es = p->esz;
    while (e < e_end) {
        const int64_t n = (p->inner - off < e_end - e) ? p->inner - off : e_end - e;
        char *y = p->y + (size_t)e * es;
        switch (p->kind) {
        case 0: p->vv(p->a + (size_t)(oa + off) * es, p->b + (size_t)(ob + off) * es, y, n, p->nt); break;
        case 1: p->vs(p->a + (size_t)(oa + off) * es, p->b + (size_t)ob * es, y, n, p->nt); break;
        default: p->vs(p->b + (size_t)(ob + off) * es, p->a + (size_t)oa * es, y, n, p->nt); break; /* commutative */
        }
        e += n;
        off = 0;
        for (int d = p->nd - 1; d >= 0; d--) { /* next outer index (odometer) */
            oa += p->sa[d];
            ob += p->sb[d];
            if (++idx[d] < p->dim[d]) break;
            oa -= p->sa[d] * p->dim[d];
            ob -= p->sb[d] * p->dim[d];
            idx[d] = 0;
        }
    }
}

static int run_binary(const void *args, int op, const char *k) {
    CHECK(check_args_ptr(args, k));
    const pb_binary_args *a = (const pb_binary_args *)args;
    CHECK(pb_check_exec(&a->exec, k));
    CHECK(pb_check_dtype(a->dtype, k));
    if (a->rank < 0 || a->rank > 8) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: rank=%d, expected 0..8", k, (int)a->rank);
    int64_t total = 1, na = 1, nb = 1;
    for (int i = 0; i < a->rank; i++) {
        const int64_t y = a->y_shape[i], sa = a->a_shape[i], sb = a->b_shape[i];
        if (y < 0 || sa < 0 || sb < 0)
            return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: axis %d: negative size (a %lld, b %lld, y %lld)", k, i,
                           (long long)sa, (long long)sb, (long long)y);
        if ((sa != y && sa != 1) || (sb != y && sb != 1) || (y != 1 && sa != y && sb != y))
            return pb_fail(PB_ERR_INVALID_ARGUMENT,
                           "%s: axis %d: a %lld and b %lld do not broadcast to y %lld (each must be 1 or y's size)", k,
                           i, (long long)sa, (long long)sb, (long long)y);
        if (y > 0 && total > PBE_LIMIT / y) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: tensor sizes overflow", k);
        total *= y;
        na *= sa;
        nb *= sb;
    }
    if (total == 0) return PB_OK;
    if (a->a == NULL || a->b == NULL || a->y == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: a, b and y must not be NULL", k);
    const size_t es = pb_dtype_size(a->dtype);
    const size_t ybytes = (size_t)total * es;
    if (overlap_unless_same(a->a, (size_t)na * es, a->y, ybytes) || overlap_unless_same(a->b, (size_t)nb * es, a->y, ybytes))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: y overlaps an input (in place needs y == that input, of y's shape)", k);

    /* collapse: drop size-1 axes of y, merge neighbours with the same broadcast pattern */
    int64_t dim[9];
    int ba[9], bb[9], nd = 0;
    for (int i = 0; i < a->rank; i++) {
        const int64_t y = a->y_shape[i];
        if (y == 1) continue;
        const int fa = a->a_shape[i] == 1, fb = a->b_shape[i] == 1;
        if (nd > 0 && ba[nd - 1] == fa && bb[nd - 1] == fb) {
            dim[nd - 1] *= y;
        } else {
            dim[nd] = y;
            ba[nd] = fa;
            bb[nd] = fb;
            nd++;
        }
    }
    if (nd == 0) { /* one element */
        dim[0] = 1;
        ba[0] = bb[0] = 0;
        nd = 1;
    }
    const pb_eltwise_table *t = pb_active_isa()->eltwise;
    const int di = pb_dtype_index(a->dtype);
    bin_plan p;
    p.vv = t->binary_vv[op][di];
    p.vs = t->binary_vs[op][di];
    p.inner = dim[nd - 1];
    p.kind = ba[nd - 1] ? 2 : (bb[nd - 1] ? 1 : 0);
    p.nd = nd - 1;
    int64_t acc_a = ba[nd - 1] ? 1 : p.inner, acc_b = bb[nd - 1] ? 1 : p.inner;
    for (int d = nd - 2; d >= 0; d--) {
        p.dim[d] = dim[d];
        p.sa[d] = ba[d] ? 0 : acc_a;
        p.sb[d] = bb[d] ? 0 : acc_b;
        if (!ba[d]) acc_a *= dim[d];
        if (!bb[d]) acc_b *= dim[d];
    }
    p.total = total;
    p.esz = es;
    p.nt = (na + nb + total) * (int64_t)es >= PBE_NT_BYTES && (uintptr_t)a->y % es == 0;
    p.a = (const char *)a->a;
    p.b = (const char *)a->b;
    p.y = (char *)a->y;
    const int64_t blocks = (total + PBE_BLOCK - 1) / PBE_BLOCK;
    return pb_parallel_for(pb_threads_for(a->exec.num_threads, total, PBE_GRAIN_BINARY), blocks, bin_range, &p);
}

int pb_add(const void *args) { return run_binary(args, PB_BIN_ADD, "add"); }
int pb_mul(const void *args) { return run_binary(args, PB_BIN_MUL, "mul"); }

/* ================================ Gelu family ============================================== */

typedef struct {
    pb_gelu_ukernel uk;
    const pb_gelu_args *a;
    int64_t total;
    int nt;
} gelu_ctx;

static void gelu_range(void *ctx, int64_t t0, int64_t t1) {
    const gelu_ctx *c = (const gelu_ctx *)ctx;
    int64_t e0 = t0 * PBE_BLOCK, e1 = t1 * PBE_BLOCK;
    if (e1 > c->total) e1 = c->total;
    if (e0 < e1) c->uk(c->a->x, c->a->bias, c->a->y, e0, e1, c->a->cols, c->nt);
}

int pb_gelu(const void *args) {
    const char *k = "gelu";
    CHECK(check_args_ptr(args, k));
    const pb_gelu_args *a = (const pb_gelu_args *)args;
    CHECK(pb_check_exec(&a->exec, k));
    CHECK(pb_check_dtype(a->dtype, k));
    if (a->approximate != PB_GELU_ERF && a->approximate != PB_GELU_TANH)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: approximate=%d, expected 0 (erf) or 1 (tanh)", k, (int)a->approximate);
    if (a->rows < 0 || a->cols < 0)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: rows=%lld cols=%lld must be >= 0", k, (long long)a->rows,
                       (long long)a->cols);
    if (a->rows == 0 || a->cols == 0) return PB_OK;
    if (a->rows > PBE_LIMIT / a->cols) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: rows*cols overflows", k);
    if (a->x == NULL || a->y == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: x and y must not be NULL", k);
    const int64_t total = a->rows * a->cols;
    const size_t es = pb_dtype_size(a->dtype), bytes = (size_t)total * es;
    if (overlap_unless_same(a->x, bytes, a->y, bytes))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: x and y overlap partially (in place needs y == x)", k);
    if (a->bias != NULL && overlap_any(a->bias, (size_t)a->cols * es, a->y, bytes))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: bias overlaps y", k);
    const int nt = (size_t)(2 * total + (a->bias ? a->cols : 0)) * es >= PBE_NT_BYTES && (uintptr_t)a->y % es == 0;
    gelu_ctx c = {pb_active_isa()->eltwise->gelu[a->approximate][pb_dtype_index(a->dtype)], a, total, nt};
    const int64_t blocks = (total + PBE_BLOCK - 1) / PBE_BLOCK;
    return pb_parallel_for(pb_threads_for(a->exec.num_threads, total, PBE_GRAIN_GELU), blocks, gelu_range, &c);
}

/* ================================ Sigmoid family =========================================== */

typedef struct {
    pb_sigmoid_ukernel uk;
    const pb_sigmoid_args *a;
    int nt;
} sigmoid_ctx;

static void sigmoid_range(void *ctx, int64_t t0, int64_t t1) {
    const sigmoid_ctx *c = (const sigmoid_ctx *)ctx;
    int64_t e0 = t0 * PBE_BLOCK, e1 = t1 * PBE_BLOCK;
    if (e1 > c->a->n) e1 = c->a->n;
    if (e0 < e1) c->uk(c->a->x, c->a->y, e0, e1, c->a->alpha, c->nt);
}

int pb_sigmoid(const void *args) {
    const char *k = "sigmoid";
    CHECK(check_args_ptr(args, k));
    const pb_sigmoid_args *a = (const pb_sigmoid_args *)args;
    CHECK(pb_check_exec(&a->exec, k));
    CHECK(pb_check_dtype(a->dtype, k));
    if (a->mode != PB_SIGMOID_PLAIN && a->mode != PB_SIGMOID_MUL)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: mode=%d, expected 0 (sigmoid) or 1 (x * sigmoid(alpha x))", k,
                       (int)a->mode);
    if (a->mode == PB_SIGMOID_MUL && !isfinite(a->alpha))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: alpha=%g must be finite", k, (double)a->alpha);
    if (a->n < 0) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: n=%lld must be >= 0", k, (long long)a->n);
    if (a->n == 0) return PB_OK;
    if (a->n > PBE_LIMIT) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: n=%lld overflows", k, (long long)a->n);
    if (a->x == NULL || a->y == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: x and y must not be NULL", k);
    const size_t es = pb_dtype_size(a->dtype), bytes = (size_t)a->n * es;
    if (overlap_unless_same(a->x, bytes, a->y, bytes))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: x and y overlap partially (in place needs y == x)", k);
    const int nt = 2 * bytes >= PBE_NT_BYTES && (uintptr_t)a->y % es == 0;
    sigmoid_ctx c = {pb_active_isa()->eltwise->sigmoid[a->mode][pb_dtype_index(a->dtype)], a, nt};
    const int64_t blocks = (a->n + PBE_BLOCK - 1) / PBE_BLOCK;
    return pb_parallel_for(pb_threads_for(a->exec.num_threads, a->n, PBE_GRAIN_SIGMOID), blocks, sigmoid_range, &c);
}

/* ================================ ReduceMean =============================================== */

static void store_scalar(int32_t dtype, void *y, int64_t i, double v) {
    const float f = (float)v;
    switch (dtype) {
    case PB_DTYPE_F32: ((float *)y)[i] = f; break;
    case PB_DTYPE_F16: ((uint16_t *)y)[i] = pb_f32_to_f16(f); break;
    default: ((uint16_t *)y)[i] = pb_f32_to_bf16(f); break;
    }
}

typedef struct {
    const pb_reduce_mean_args *a;
    pb_sum_ukernel sum;
    pb_colmean_ukernel col;
    int64_t parts;    /* row sums split into this many parts (1: each task writes its row's mean) */
    double *partial;  /* (outer * parts) when parts > 1 */
    int64_t chunks;   /* column chunks per outer slab (inner > 1) */
    size_t esz;
} rm_ctx;

static void rm_rows(void *ctx, int64_t t0, int64_t t1) {
    const rm_ctx *c = (const rm_ctx *)ctx;
    const int64_t R = c->a->reduce, P = c->parts;
    for (int64_t t = t0; t < t1; t++) {
        const int64_t row = t / P, part = t % P;
        const void *x = (const char *)c->a->x + (size_t)(row * R) * c->esz;
        const double s = c->sum(x, R * part / P, R * (part + 1) / P);
        if (P == 1)
            store_scalar(c->a->dtype, c->a->y, row, s / (double)R);
        else
            c->partial[t] = s;
    }
}

static void rm_cols(void *ctx, int64_t t0, int64_t t1) {
    const rm_ctx *c = (const rm_ctx *)ctx;
    const int64_t R = c->a->reduce, inner = c->a->inner;
    for (int64_t t = t0; t < t1; t++) {
        const int64_t o = t / c->chunks, ch = t % c->chunks;
        const int64_t j0 = ch * PBE_COL_CHUNK, j1 = j0 + PBE_COL_CHUNK < inner ? j0 + PBE_COL_CHUNK : inner;
        c->col((const char *)c->a->x + (size_t)(o * R * inner) * c->esz, (char *)c->a->y + (size_t)(o * inner) * c->esz,
               R, inner, j0, j1, 1.0 / (double)R);
    }
}

int pb_reduce_mean(const void *args) {
    const char *k = "reduce_mean";
    CHECK(check_args_ptr(args, k));
    const pb_reduce_mean_args *a = (const pb_reduce_mean_args *)args;
    CHECK(pb_check_exec(&a->exec, k));
    CHECK(pb_check_dtype(a->dtype, k));
    if (a->outer < 0 || a->reduce < 0 || a->inner < 0)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: outer=%lld reduce=%lld inner=%lld must be >= 0", k,
                       (long long)a->outer, (long long)a->reduce, (long long)a->inner);
    if (a->outer > 0 && a->inner > PBE_LIMIT / a->outer)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: tensor sizes overflow", k);
    const int64_t nout = a->outer * a->inner;
    if (nout > 0 && a->reduce > PBE_LIMIT / nout)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: tensor sizes overflow", k);
    if (nout == 0) return PB_OK;
    if (a->y == NULL || (a->reduce > 0 && a->x == NULL))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: x and y must not be NULL", k);
    const size_t es = pb_dtype_size(a->dtype);
    if (overlap_any(a->x, (size_t)(nout * a->reduce) * es, a->y, (size_t)nout * es))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: x and y overlap", k);
    if (a->reduce == 0) { /* the mean of nothing */
        for (int64_t i = 0; i < nout; i++) store_scalar(a->dtype, a->y, i, NAN);
        return PB_OK;
    }
    const pb_eltwise_table *t = pb_active_isa()->eltwise;
    const int di = pb_dtype_index(a->dtype);
    const int32_t threads = pb_threads_for(a->exec.num_threads, nout * a->reduce, PBE_GRAIN_REDUCE);
    rm_ctx c = {a, t->sum[di], t->colmean[di], 1, NULL, 1, es};
    if (a->inner > 1) {
        c.chunks = (a->inner + PBE_COL_CHUNK - 1) / PBE_COL_CHUNK;
        return pb_parallel_for(threads, a->outer * c.chunks, rm_cols, &c);
    }
    /* row means; fewer rows than threads: each row's sum is split into parts */
    if (a->outer < threads) {
        int64_t parts = (threads + a->outer - 1) / a->outer;
        const int64_t most = a->reduce / 4096 > 1 ? a->reduce / 4096 : 1;
        c.parts = parts < most ? parts : most;
    }
    if (c.parts == 1) return pb_parallel_for(threads, a->outer, rm_rows, &c);
    c.partial = (double *)pb_scratch_slot(1, (size_t)(a->outer * c.parts) * sizeof(double));
    if (c.partial == NULL) return pb_fail(PB_ERR_OUT_OF_MEMORY, "%s: no scratch for %lld partial sums", k,
                                          (long long)(a->outer * c.parts));
    CHECK(pb_parallel_for(threads, a->outer * c.parts, rm_rows, &c));
    for (int64_t r = 0; r < a->outer; r++) {
        double s = 0.0;
        for (int64_t p = 0; p < c.parts; p++) s += c.partial[r * c.parts + p];
        store_scalar(a->dtype, a->y, r, s / (double)a->reduce);
    }
    return PB_OK;
}
