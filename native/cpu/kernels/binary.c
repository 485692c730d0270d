/* Elementwise binary ops with numpy broadcasting (Add, Mul, Sub: one PB_BINARY line of kernels.def
 * each): validate, collapse the broadcast pattern, then blocks of elements over the pool. */
#include <math.h>
#include <stdint.h>

#include "../internal.h"

/* Element-split kernels hand out whole blocks (a multiple of every lane count: threads start
 * on 64-byte boundaries of f32 and 16-bit data alike, given aligned buffers). */
#define PB_ELT_BLOCK 512


typedef struct {
    pb_binary_ukernel vv, vs, sv; /* sv NULL: commutative, vs runs with the operands swapped */
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
    int64_t e = t0 * PB_ELT_BLOCK, e_end = t1 * PB_ELT_BLOCK;
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
        default:
            if (p->sv)
                p->sv(p->a + (size_t)oa * es, p->b + (size_t)(ob + off) * es, y, n, p->nt);
            else
                p->vs(p->b + (size_t)(ob + off) * es, p->a + (size_t)oa * es, y, n, p->nt); /* commutative */
            break;
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

/* the microkernels of one binary op (per-dtype arrays of the active ISA's table) */
typedef struct {
    const pb_binary_ukernel *vv, *vs, *sv; /* sv NULL: commutative */
} bin_ops;

static int run_binary(const void *args, bin_ops ops, const char *k) {
    CHECK(pb_check_args(args, k));
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
        if (y > 0 && total > PB_SIZE_LIMIT / y) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: tensor sizes overflow", k);
        total *= y;
        na *= sa;
        nb *= sb;
    }
    if (total == 0) return PB_OK;
    if (a->a == NULL || a->b == NULL || a->y == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: a, b and y must not be NULL", k);
    const size_t es = pb_dtype_size(a->dtype);
    const size_t ybytes = (size_t)total * es;
    if (pb_overlap_unless_same(a->a, (size_t)na * es, a->y, ybytes) || pb_overlap_unless_same(a->b, (size_t)nb * es, a->y, ybytes))
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
    const int di = pb_dtype_index(a->dtype);
    bin_plan p;
    p.vv = ops.vv[di];
    p.vs = ops.vs[di];
    p.sv = ops.sv ? ops.sv[di] : NULL;
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
    p.nt = pb_stream_worth((na + nb + total) * (int64_t)es) && (uintptr_t)a->y % es == 0;
    p.a = (const char *)a->a;
    p.b = (const char *)a->b;
    p.y = (char *)a->y;
    const int64_t blocks = (total + PB_ELT_BLOCK - 1) / PB_ELT_BLOCK;
    return pb_parallel_for(pb_threads_for(a->exec.num_threads, total, PB_GRAIN_BINARY), blocks, bin_range, &p);
}

/* one entry point per PB_BINARY line of kernels.def */
#define PB_BINARY(name, vop, comm)                                                                   \
    int pb_##name(const void *args) {                                                                \
        const pb_isa *isa = pb_active_isa();                                                         \
        return run_binary(args, (bin_ops){isa->name##_vv, isa->name##_vs, (comm) ? NULL : isa->name##_sv}, #name); \
    }
#include "../kernels.def"

