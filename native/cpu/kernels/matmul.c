/* MatMul / Gemm entry points: validate, block for the host's caches, run over the pool.
 *
 * The blocked product (BLIS's loop order): each work item is a block of at most mc rows of A and
 * a group of B's NR-column panels, and loops over K in kc steps: it packs its A block (mc x kc,
 * sized for half the L2), then per panel of B (kc x NR, a sixteenth of the L2 or half the L1d,
 * whichever is more: mm_blocking) packs it, unless
 * B was packed once outside the call (pb_matmul_pack_b), and runs the tile kernel over every MR
 * rows. f32 sums of Y accumulate in Y itself between K
 * steps, f16/bf16 in an f32 block of the item's scratch. M = 1 without a packed B reads B once
 * where it lies (the GEMV microkernel): packing would move B three times. Panels hold f32 (f16
 * and bf16 converted while packing), except bf16 on a path with a bf16 dot (isa->mm_bf16_pairs):
 * bf16 pairs, half the words per k (mm_kw). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../internal.h"

#define MM_MAGIC UINT64_C(0x7062676d6d70636b) /* "pbgmmpck" */
#define MM_HEADER 64
/* f16/bf16 items keep their f32 sums in scratch (mc rows x their panels): at most this many
 * columns per item, so that a 32000-column projection does not ask for mc x 32000 floats */
#define MM_ACC_MAX_COLS 1024

typedef struct {
    uint64_t magic;
    int32_t dtype, nr, kc, trans_b;
    int32_t pairs, unused; /* the panel layout: bf16 pairs (mm_ctx.pairs) or f32 */
    int64_t k, n, isa_lanes;
} mm_header;
_Static_assert(sizeof(mm_header) <= MM_HEADER, "the packed B's header fits before its panels");

typedef struct {
    const pb_matmul_args *a;
    const pb_isa *isa;
    int di;
    size_t es;
    int64_t nr, kc, mc, npad;
    int pairs;                       /* bf16 packed as pairs (isa->mm_bf16_pairs): ceil(k / 2) words per k run */
    int64_t icb, ngroups, gpanels; /* row blocks per batch, panel groups, panels per group */
    const float *bp;                 /* B packed once outside the call, or NULL: each item packs its own */
    pb_matmul_panel_ukernel panel;   /* non-NULL: each item's panels made by panel(panel_src, ...), not from b */
    const void *panel_src;
    int64_t acc_kc;                  /* > 0: a tile's sums go to Y (or its f32 block) every acc_kc k within a K step */
    /* B as stored: element (p, j) at b + p * brs + j * bcs (plus its batch's offset) */
    const char *b;
    int64_t brs, bcs;
    int failed; /* a worker found no memory for its scratch (set atomically, read after the region) */
} mm_ctx;

static int64_t mm_round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

static int mm_run_blocked(mm_ctx *cp, int64_t batch);

/* packed words that a run of kk k-values takes: kk (f32), or ceil(kk / 2) pairs; K-step offsets
 * p0 are even wherever pairs meet more than one K step (kc is then a multiple of 8) */
static int64_t mm_kw(const mm_ctx *c, int64_t kk) { return c->pairs ? (kk + 1) / 2 : kk; }

/* element offsets of batch t's A and B (batch dims row-major) */
static void mm_batch_offsets(const pb_matmul_args *a, int64_t t, int64_t *aoff, int64_t *boff) {
    int64_t ao = 0, bo = 0;
    for (int d = a->batch_rank - 1; d >= 0; d--) {
        int64_t i = t % a->batch_dims[d];
        t /= a->batch_dims[d];
        ao += i * a->a_strides[d];
        bo += i * a->b_strides[d];
    }
    *aoff = ao;
    *boff = bo;
}

static void mm_blocking(const pb_isa *isa, int64_t k, int pairs, int64_t *nr, int64_t *kc, int64_t *mc) {
    *nr = 2 * isa->lanes;
    /* kc: one B panel (kc x NR) is a sixteenth of the L2, or half the L1d where that is more, in
     * bytes (a bf16-pair panel takes 2 bytes per k and column, so its kc is up to twice f32's).
     * The panel then streams from the L2 (each k row read once per tile, next to the A panel's)
     * rather than sitting in the L1; what it buys, reasoned and not profiled, is fewer tile ends
     * (the MR x NR sums loaded and stored, the tile's fixed cost) per FMA.
     * Measured on a Zen 4 (32 KiB L1d, 1 MiB L2), 1 thread, B packed, medians of 9 interleaved in
     * one process:
     *  - f32, NR = 32 (half the L1d gave kc = 128; FMA peak 117 GFLOP/s): kc = 512 ran 512 x 4096^2
     *    at 107.1 GFLOP/s against 96.9, 1024^3 106.5 / 92.7, 16 x 4096^2 105.1 / 91.8, 32 x 1024^2
     *    101.3 / 92.3; kc = 1024 about as kc = 512, except B an input at 1024^3 (92.9 against 98.9);
     *  - bf16 pairs, kc = 1024 against 512 (bf16 dot peak 232.5): 1024^3 215.8 / 200.2, 32 x 1024^2
     *    211.9 / 199.1, 128 x 4096^2 212.9 / 206.3, 512 x 4096^2 208.8 / 204.4;
     *  - the AVX2 path (NR = 16: kc = 256 by the L1d, 1024 by this rule on that host): within the
     *    noise at 512 and 1024 in the same loop; perfbench ab (PERFBENCH_ISA=avx2, against kc = 256)
     *    called its 7 f32 cells at 1 thread unchanged (-5.4% to +2.8%: 16 x 4096^2 B packed -5.4%,
     *    1024^3 B an input +2.8%).
     * Not measured apart: mc's bytes for pairs (256 rows either way on that Zen 4). Not measured
     * again at the larger kc: the M = 1 choice between the panels and the GEMV (pb_matmul) and the
     * next-panel prefetch. Where several cores share one L2, the sysfs size passed in is the
     * shared one. */
    const int64_t kb = pairs ? 2 : 4; /* bytes per k and column of a packed panel */
    int64_t kcv = pb_l1d_bytes() / 2 / (*nr * kb), kl2 = pb_l2_bytes() / 16 / (*nr * kb);
    kcv = kl2 > kcv ? kl2 : kcv;
    kcv = kcv < 64 ? 64 : kcv > PB_MM_KC_MAX ? PB_MM_KC_MAX : kcv / 8 * 8;
    if (k > 0 && k < kcv) kcv = k;
    *kc = kcv;
    int64_t mcv = pb_l2_bytes() / 2 / (kcv * kb);
    const int64_t mr = isa->mm_mr;
    mcv = mcv < mr ? mr : mcv > 170 * mr ? 170 * mr : mcv / mr * mr;
    *mc = mcv;
}

/* panels [q0, q1) of the packed layout: K in kc steps, in each step every panel kcb x NR */
typedef struct {
    mm_ctx *c;
    float *dst;
} mm_pack_ctx;

static void mm_pack_range(void *ctx, int64_t q0, int64_t q1) {
    mm_pack_ctx *pc = (mm_pack_ctx *)ctx;
    mm_ctx *c = pc->c;
    const pb_matmul_args *a = c->a;
    pb_matmul_pack_ukernel pack = c->isa->matmul_pack_b[c->di];
    for (int64_t p0 = 0; p0 < a->k; p0 += c->kc) {
        int64_t kcb = a->k - p0 < c->kc ? a->k - p0 : c->kc;
        for (int64_t q = q0; q < q1; q++) {
            int64_t j0 = q * c->nr, nc = a->n - j0 < c->nr ? a->n - j0 : c->nr;
            pack(c->b, c->brs, c->bcs, p0, kcb, j0, nc,
                 pc->dst + mm_kw(c, p0) * c->npad + q * c->nr * mm_kw(c, kcb));
        }
    }
}

static void mm_compute_range(void *ctx, int64_t t0, int64_t t1) {
    mm_ctx *c = (mm_ctx *)ctx;
    const pb_matmul_args *a = c->a;
    const int64_t m = a->m, n = a->n, k = a->k, nr = c->nr, kc = c->kc, mc = c->mc, MR = c->isa->mm_mr;
    const int f32 = a->dtype == PB_DTYPE_F32;
    const int64_t gw = c->gpanels * nr;
    const int own_b = c->bp == NULL; /* B packed by each item, one kc x NR panel at a time */
    const int64_t kwc = mm_kw(c, kc); /* words per k run of a panel: kc, or ceil(kc / 2) bf16 pairs */
    float *ap = (float *)pb_scratch((size_t)(mc * kwc + (f32 ? 0 : mc * gw) + (own_b ? kwc * nr : 0)) * sizeof(float));
    if (ap == NULL) {
        __atomic_store_n(&c->failed, 1, __ATOMIC_RELAXED);
        return;
    }
    float *accbuf = ap + mc * kwc;
    float *bblk = accbuf + (f32 ? 0 : mc * gw);
    pb_matmul_pack_ukernel pack_a = c->isa->matmul_pack_a[c->di];
    pb_matmul_pack_ukernel pack_b = c->isa->matmul_pack_b[c->di];
    pb_matmul_tile_ukernel tile = c->isa->matmul_tile[c->di];
    pb_matmul_row_ukernel row = c->isa->matmul_row[c->di];
    const int64_t ars = a->trans_a ? 1 : k, acs = a->trans_a ? m : 1;
    const int64_t npanels = (n + nr - 1) / nr;
    const float beta = a->beta;
    for (int64_t t = t0; t < t1; t++) {
        int64_t g = t % c->ngroups, rest = t / c->ngroups;
        int64_t ib = rest % c->icb, bt = rest / c->icb;
        int64_t aoff, boff;
        mm_batch_offsets(a, bt, &aoff, &boff);
        const char *abase = (const char *)a->a + aoff * (int64_t)c->es;
        char *ybase = (char *)a->y + bt * m * n * (int64_t)c->es;
        int64_t i0 = ib * mc, mcb = m - i0 < mc ? m - i0 : mc;
        int64_t q0 = g * c->gpanels, q1 = q0 + c->gpanels < npanels ? q0 + c->gpanels : npanels;
        /* one f32 row whose k values are contiguous (M = 1, transposed or not): read where it lies
         * by the row kernel (matmul_row), no A panel */
        const float *xrow = f32 && mcb == 1 && acs == 1 ? (const float *)abase + i0 * ars : NULL;
        for (int64_t p0 = 0; p0 < k; p0 += kc) {
            int64_t kcb = k - p0 < kc ? k - p0 : kc;
            int load = p0 > 0, final = p0 + kcb >= k;
            const int64_t kwb = mm_kw(c, kcb);
            const int64_t sk = c->acc_kc > 0 && c->acc_kc < kcb ? c->acc_kc : kcb;
            if (xrow == NULL) pack_a(abase, ars, acs, i0, mcb, p0, kcb, ap);
            for (int64_t q = q0; q < q1; q++) {
                int64_t j0 = q * nr, nb = n - j0 < nr ? n - j0 : nr;
                const float *bpan = bblk;
                if (c->panel != NULL)
                    c->panel(c->panel_src, p0, kcb, j0, nb, bblk);
                else if (own_b)
                    pack_b(c->b + boff * (int64_t)c->es, c->brs, c->bcs, p0, kcb, j0, nb, bblk);
                else
                    bpan = c->bp + mm_kw(c, p0) * c->npad + q * nr * kwb;
                if (xrow != NULL) {
                    char *yt = ybase + (i0 * n + j0) * (int64_t)c->es;
                    const void *ct = (a->c != NULL && beta != 0.0f)
                                         ? (const char *)a->c + (i0 * a->c_rs + j0 * a->c_cs) * (int64_t)c->es
                                         : NULL;
                    for (int64_t s0 = 0; s0 < kcb; s0 += sk) {
                        const int64_t ks = kcb - s0 < sk ? kcb - s0 : sk;
                        row(xrow + p0 + s0, bpan + s0 * nr, ks, (float *)yt, n, load || s0 > 0, final && s0 + ks >= kcb,
                            nb, yt, a->alpha, beta, ct, a->c_cs);
                    }
                    continue;
                }
                /* B packed outside the call streams from memory: the item's next panel (the next K
                 * step's first after its last) is prefetched into the L2 by the first tile, one k row
                 * per k step, spread evenly over its FMAs, where the panel has two tiles or more: with
                 * one (M = 1 x 4096 x 4096 f32, 1 thread) the prefetches made it 31% slower, its
                 * stream already as fast as the hardware's prefetcher takes it; the 2-tile 16 x 4096 x
                 * 4096 took 21% less time at 1 thread and 26% at 2, 1024^3 16% and 6.5% in two runs at
                 * 1 thread (Zen 4, ab, with the tile's prefetch of its sums, mm_block_prefetch, in the
                 * same change). Prefetches issued in bursts before each tile (a share of the next
                 * panel's lines, at most 32) helped 128 x 4096 x 4096 f32 (-9%) but made 16 x 4096 x
                 * 4096 18% slower, where the unrestricted share was 192 lines a tile (Zen 5, ab,
                 * 1 thread) */
                const char *next = NULL;
                if (!own_b && mcb > MR) {
                    if (q + 1 < q1)
                        next = (const char *)(bpan + nr * kwb);
                    else if (p0 + 2 * kc <= k) /* a next K step as long as this one: kwb rows */
                        next = (const char *)(c->bp + mm_kw(c, p0 + kc) * c->npad + q0 * nr * kwb);
                }
                for (int64_t ir = 0; ir < mcb; ir += MR) {
                    int64_t mr = mcb - ir < MR ? mcb - ir : MR;
                    int64_t i = i0 + ir;
                    char *yt = ybase + (i * n + j0) * (int64_t)c->es;
                    float *acc = f32 ? (float *)yt : accbuf + ir * gw + (j0 - q0 * nr);
                    int64_t ldacc = f32 ? n : gw;
                    const void *ct = (a->c != NULL && beta != 0.0f)
                                         ? (const char *)a->c + (i * a->c_rs + j0 * a->c_cs) * (int64_t)c->es
                                         : NULL;
                    for (int64_t s0 = 0; s0 < kcb; s0 += sk) { /* sk: kcb, or acc_kc (f32 panels: kw = k) */
                        const int64_t ks = kcb - s0 < sk ? kcb - s0 : sk;
                        tile(ap + ir * kwb + s0 * MR, bpan + s0 * nr, ks, acc, ldacc, load || s0 > 0,
                             final && s0 + ks >= kcb, mr, nb, yt, n, a->alpha, beta, ct, a->c_rs, a->c_cs,
                             ir == 0 && s0 == 0 ? next : NULL);
                    }
                }
            }
        }
    }
}

typedef struct {
    const pb_matmul_args *a;
    pb_matmul_gemv_ukernel uk;
    size_t es;
    int64_t chunk, nchunks;
} gemv_ctx;

static void gemv_range(void *ctx, int64_t t0, int64_t t1) {
    gemv_ctx *g = (gemv_ctx *)ctx;
    const pb_matmul_args *a = g->a;
    const int64_t k = a->k, n = a->n;
    const int64_t xs = 1; /* one row of A (m == 1): contiguous whether transposed or not */
    const int64_t rs = a->trans_b ? 1 : n, cs = a->trans_b ? k : 1;
    const void *c = (a->c != NULL && a->beta != 0.0f) ? a->c : NULL;
    /* items: (batch, row, column chunk); more than one row only where k == 0 (Y = beta * C) */
    for (int64_t t = t0; t < t1; t++) {
        int64_t ch = t % g->nchunks, rest = t / g->nchunks, i = rest % a->m, bt = rest / a->m;
        int64_t aoff, boff;
        mm_batch_offsets(a, bt, &aoff, &boff);
        int64_t j0 = ch * g->chunk, j1 = j0 + g->chunk < n ? j0 + g->chunk : n;
        const char *bb = a->b != NULL ? (const char *)a->b + boff * (int64_t)g->es : (const char *)a->a; /* k = 0: unread */
        g->uk((const char *)a->a + aoff * (int64_t)g->es, xs, bb, rs, cs, k,
              j0, j1, (char *)a->y + (bt * a->m + i) * n * (int64_t)g->es, a->alpha, a->beta,
              c ? (const char *)c + i * a->c_rs * (int64_t)g->es : NULL, a->c_cs);
    }
}

static int mm_validate(const pb_matmul_args *a, const char *kernel, int64_t *batch_out) {
    CHECK(pb_check_exec(&a->exec, kernel));
    CHECK(pb_check_dtype(a->dtype, kernel));
    if (a->batch_rank < 0 || a->batch_rank > 8)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: batch_rank=%d, expected 0..8", kernel, (int)a->batch_rank);
    if (a->m < 0 || a->n < 0 || a->k < 0)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: m=%lld n=%lld k=%lld must be >= 0", kernel, (long long)a->m,
                       (long long)a->n, (long long)a->k);
    if ((a->trans_a != 0 && a->trans_a != 1) || (a->trans_b != 0 && a->trans_b != 1))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: trans_a=%d trans_b=%d, expected 0 or 1", kernel, (int)a->trans_a,
                       (int)a->trans_b);
    int64_t batch = 1, t;
    for (int d = 0; d < a->batch_rank; d++) {
        if (a->batch_dims[d] < 0 || a->a_strides[d] < 0 || a->b_strides[d] < 0)
            return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: batch dim %d: size %lld, strides %lld/%lld must be >= 0", kernel,
                           d, (long long)a->batch_dims[d], (long long)a->a_strides[d], (long long)a->b_strides[d]);
        if (!pb_mul_ok(batch, a->batch_dims[d], &batch))
            return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: the batch dims' product overflows", kernel);
    }
    if (a->c_rs < 0 || a->c_cs < 0)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: c_rs=%lld c_cs=%lld must be >= 0", kernel, (long long)a->c_rs,
                       (long long)a->c_cs);
    if (!isfinite(a->alpha) || !isfinite(a->beta))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: alpha=%g beta=%g must be finite", kernel, (double)a->alpha,
                       (double)a->beta);
    if (!pb_mul_ok(a->m, a->n, &t) || !pb_mul_ok(t, batch, &t) || !pb_mul_ok(a->m, a->k, &t) ||
        !pb_mul_ok(a->k, a->n, &t))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: sizes overflow", kernel);
    *batch_out = batch;
    return PB_OK;
}

int pb_matmul_packed_bytes(int64_t k, int64_t n, int64_t *bytes_out) {
    int64_t t;
    if (bytes_out == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul_packed_bytes: bytes_out is NULL");
    if (k < 0 || n < 0) return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul_packed_bytes: k=%lld n=%lld must be >= 0",
                                       (long long)k, (long long)n);
    /* the widest path's panels (NR = 32 floats) so that any path's layout fits */
    if (!pb_mul_ok(k, mm_round_up(n, 32), &t) || !pb_mul_ok(t, 4, &t) || t > PB_SIZE_LIMIT)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul_packed_bytes: k x n overflows");
    *bytes_out = t + MM_HEADER;
    return PB_OK;
}

static void mm_ctx_init(mm_ctx *c, const pb_matmul_args *a, const pb_isa *isa) {
    memset(c, 0, sizeof(*c));
    c->a = a;
    c->isa = isa;
    c->di = pb_dtype_index(a->dtype);
    c->pairs = a->dtype == PB_DTYPE_BF16 && isa->mm_bf16_pairs;
    c->es = pb_dtype_size(a->dtype);
    mm_blocking(isa, a->k, c->pairs, &c->nr, &c->kc, &c->mc);
    c->npad = mm_round_up(a->n, c->nr);
    c->b = (const char *)a->b;
    c->brs = a->trans_b ? 1 : a->n;
    c->bcs = a->trans_b ? a->k : 1;
}

int pb_matmul_pack_b(const void *args) {
    CHECK(pb_check_args(args, "matmul_pack_b"));
    const pb_matmul_pack_args *pa = (const pb_matmul_pack_args *)args;
    CHECK(pb_check_exec(&pa->exec, "matmul_pack_b"));
    if (pa->problem == NULL || pa->out == NULL)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul_pack_b: problem and out must not be NULL");
    const pb_matmul_args *a = pa->problem;
    int64_t batch, need;
    CHECK(mm_validate(a, "matmul_pack_b", &batch));
    if (a->b == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul_pack_b: problem->b must not be NULL");
    if (a->batch_rank != 0)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul_pack_b: B is one (k, n) matrix: batch_rank must be 0");
    CHECK(pb_matmul_packed_bytes(a->k, a->n, &need));
    if (pa->out_bytes < need)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul_pack_b: out_bytes=%lld, needs %lld (pb_matmul_packed_bytes)",
                       (long long)pa->out_bytes, (long long)need);
    if (((uintptr_t)pa->out & 63) != 0)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul_pack_b: out must be 64-byte aligned");
    size_t bbytes = (size_t)(a->k * a->n) * pb_dtype_size(a->dtype);
    if (pb_overlap(pa->out, (size_t)need, a->b, bbytes))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul_pack_b: out overlaps B");
    mm_ctx c;
    mm_ctx_init(&c, a, pb_active_isa());
    mm_header h = {MM_MAGIC, a->dtype, (int32_t)c.nr, (int32_t)c.kc, a->trans_b, c.pairs, 0, a->k, a->n, c.isa->lanes};
    memcpy(pa->out, &h, sizeof(h));
    mm_pack_ctx pc = {&c, (float *)((char *)pa->out + MM_HEADER)};
    int64_t npanels = c.npad / c.nr;
    int32_t threads = pb_threads_for(pa->exec.num_threads, a->k * a->n, PB_GRAIN_GEMV);
    return pb_parallel_for(threads, npanels, mm_pack_range, &pc);
}

int pb_matmul(const void *args) {
    CHECK(pb_check_args(args, "matmul"));
    const pb_matmul_args *a = (const pb_matmul_args *)args;
    int64_t batch;
    CHECK(mm_validate(a, "matmul", &batch));
    if (batch == 0 || a->m == 0 || a->n == 0) return PB_OK;
    if (a->a == NULL || a->y == NULL || (a->b == NULL && a->b_packed == NULL))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul: a, y and b (or b_packed) must not be NULL");
    const size_t es = pb_dtype_size(a->dtype);
    const size_t ybytes = (size_t)(batch * a->m * a->n) * es;
    /* the extents of A and B: the largest element offset + 1 (checked: a hand-filled struct) */
    int64_t aext = a->m * a->k, bext = a->k * a->n, t;
    for (int d = 0; d < a->batch_rank; d++) {
        if (!pb_mul_ok(a->batch_dims[d] - 1, a->a_strides[d], &t) || (aext += t) > PB_SIZE_LIMIT ||
            !pb_mul_ok(a->batch_dims[d] - 1, a->b_strides[d], &t) || (bext += t) > PB_SIZE_LIMIT)
            return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul: a batch stride overflows");
    }
    if (a->c != NULL) {
        int64_t r, q;
        if (!pb_mul_ok(a->m - 1, a->c_rs, &r) || !pb_mul_ok(a->n - 1, a->c_cs, &q) || r + q > PB_SIZE_LIMIT)
            return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul: c_rs/c_cs overflow");
    }
    if (pb_overlap(a->y, ybytes, a->a, (size_t)aext * es) ||
        (a->b != NULL && pb_overlap(a->y, ybytes, a->b, (size_t)bext * es)))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul: y overlaps a or b");
    if (a->c != NULL) {
        size_t cext = (size_t)((a->m - 1) * a->c_rs + (a->n - 1) * a->c_cs + 1) * es;
        if (pb_overlap(a->y, ybytes, a->c, cext)) return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul: y overlaps c");
    }
    const pb_isa *isa = pb_active_isa();
    int di = pb_dtype_index(a->dtype);
    mm_ctx c;
    mm_ctx_init(&c, a, isa);
    int bcast = 1; /* B the same for every batch */
    for (int d = 0; d < a->batch_rank; d++) bcast &= a->b_strides[d] == 0 || a->batch_dims[d] == 1;
    if (a->b_packed != NULL) {
        mm_header h;
        memcpy(&h, a->b_packed, sizeof(h));
        if (((uintptr_t)a->b_packed & 63) != 0 || h.magic != MM_MAGIC || h.dtype != a->dtype || h.k != a->k ||
            h.n != a->n || h.trans_b != a->trans_b || h.nr != c.nr || h.kc != c.kc || h.pairs != c.pairs ||
            h.isa_lanes != isa->lanes)
            return pb_fail(PB_ERR_INVALID_ARGUMENT,
                           "matmul: b_packed was not packed for this problem on this path (pb_matmul_pack_b with the "
                           "same dtype, k, n, trans_b, ISA path and cache sizes)");
        if (!bcast) return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul: b_packed needs B broadcast over every batch dim");
        int64_t need;
        CHECK(pb_matmul_packed_bytes(a->k, a->n, &need));
        if (pb_overlap(a->y, ybytes, a->b_packed, (size_t)need))
            return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul: y overlaps b_packed");
    }
    /* M = 1 reads B once: where B's packed panels hold more bytes than B itself (f16, and bf16
     * without pairs: panels of f32), and f32 B's rows where B fits the L2, B is read where it lies
     * even when a packed copy is given (the packed copy is still checked against the problem above) */
    const int raw_smaller = a->dtype != PB_DTYPE_F32 && !c.pairs;
    /* f32 B's rows (not transB) where B fits the L2: there the packed path's fixed costs (A packed
     * into an MR-row panel, the K steps) outweigh a read of B that is as fast either way. ab on the
     * Zen 4 (f32, B an initializer, the panels vs this rule): 1 x 256 x 256 (256 KiB) 34.5% less
     * time at 1 thread and 32.3% at 2. With B in DRAM the GEMV's four row streams lose to the
     * panels' one: for any B, 1 x 4096 x 11008 took 23.7% more and 1 x 11008 x 4096 10.3% more at 1
     * thread; for B whose rows fit one GEMV column block, 1 x 4096 x 4096 and 1 x 11008 x 4096 13.3%
     * more each. Sizes between 256 KiB and the L2 were not measured. transB keeps its panels: a dot
     * product per column was slower (Gemm 1 x 1024 x 1024 f32, 64.7 us against 55.6 with the panels
     * in one suite run) */
    int64_t bbytes_f32;
    const int raw_rows = a->dtype == PB_DTYPE_F32 && !a->trans_b && pb_mul_ok(a->k, a->n * 4, &bbytes_f32) &&
                         bbytes_f32 <= pb_l2_bytes();
    if (a->k == 0 || (a->m == 1 && (a->b_packed == NULL || ((raw_smaller || raw_rows) && a->b != NULL)))) {
        /* Y = beta * C (k = 0), or the M = 1 GEMV reading B where it lies */
        if (a->b == NULL && a->k > 0) return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul: b must not be NULL where m = 1");
        gemv_ctx g = {a, isa->matmul_gemv[di], es, 0, 0};
        int64_t work;
        if (!pb_mul_ok(batch * a->m, (a->k + 1) * a->n, &work)) work = INT64_MAX;
        int32_t threads = pb_threads_for(a->exec.num_threads, work, PB_GRAIN_GEMV);
        int64_t per = mm_round_up((a->n + threads - 1) / threads, 4 * isa->lanes);
        g.chunk = per < a->n ? per : a->n;
        g.nchunks = (a->n + g.chunk - 1) / g.chunk;
        return pb_parallel_for(threads, batch * a->m * g.nchunks, gemv_range, &g);
    }
    c.bp = a->b_packed != NULL ? (const float *)((const char *)a->b_packed + MM_HEADER) : NULL;
    return mm_run_blocked(&c, batch);
}

int pb_matmul_blocked_panels(const pb_matmul_args *a, pb_matmul_panel_ukernel panel, const void *src) {
    int64_t batch;
    CHECK(mm_validate(a, "matmul_blocked_panels", &batch));
    mm_ctx c;
    mm_ctx_init(&c, a, pb_active_isa());
    if (a->batch_rank != 0 || a->trans_b != 0 || c.pairs || panel == NULL)
        return pb_fail(PB_ERR_INTERNAL, "matmul_blocked_panels: one f32-panel B (no batch, no transB, no bf16 pairs)");
    if (a->m == 0 || a->n == 0 || a->k == 0) return PB_OK; /* the callers handle k = 0 */
    c.panel = panel;
    c.panel_src = src;
    /* each tile's sums leave the registers for Y every PB_MM_PANEL_ACC_K k (the panels stay kc long):
     * 16 x 4096 x 4096 at 2 and 8 bits with 512-k register chains had 2.2x ORT's error, past the
     * numerics gate (1.66e-6 against a tolerance of 1.54e-6, ORT 7.7e-7). kc = 128 for the
     * panels as well cost 25% of the time of 16 x 4096 x 4096 4-bit (Zen 4, 1 thread), their
     * per-panel work four times as often */
    c.acc_kc = PB_MM_PANEL_ACC_K;
    return mm_run_blocked(&c, batch);
}

/* the blocked product over the pool: c initialized (mm_ctx_init), c->bp or c->panel set if given */
static int mm_run_blocked(mm_ctx *cp, int64_t batch) {
    mm_ctx c = *cp;
    const pb_matmul_args *a = c.a;
    const pb_isa *isa = c.isa;
    const int64_t npanels = c.npad / c.nr;
    int64_t macs;
    if (!pb_mul_ok(batch * a->m * a->n, a->k, &macs)) macs = INT64_MAX;
    int32_t threads = pb_threads_for(a->exec.num_threads, macs, PB_GRAIN_MATMUL);
    /* row blocks of equal size (mc the most the L2 holds): 1024 rows in blocks of 1020 and 4 gave one
     * of two threads all the work (1024^3 f32: 2 threads as slow as 1) */
    c.icb = (a->m + c.mc - 1) / c.mc;
    c.mc = mm_round_up((a->m + c.icb - 1) / c.icb, isa->mm_mr);
    int64_t items = batch * c.icb;
    /* at least two items a thread where the rows alone give fewer: a share of a quarter of the work
     * at most left over at the end */
    c.ngroups = threads == 1 || items >= 2 * threads ? 1 : (2 * threads + items - 1) / items;
    if (c.ngroups > npanels) c.ngroups = npanels;
    c.gpanels = (npanels + c.ngroups - 1) / c.ngroups;
    /* f16/bf16 items keep their sums in scratch: at most MM_ACC_MAX_COLS columns an item */
    if (a->dtype != PB_DTYPE_F32 && c.gpanels * c.nr > MM_ACC_MAX_COLS) c.gpanels = MM_ACC_MAX_COLS / c.nr;
    c.ngroups = (npanels + c.gpanels - 1) / c.gpanels;
    /* B: packed once outside the call (b_packed), else by each item, one kc x NR panel at a time
     * (into the L1 where kc came from the L1d; a sixteenth of the L2 where that is more), just
     * before its tiles (measured with kc from half the L1d): packing all of B first moved it three
     * times through DRAM (16 x 4096 x 4096 f32 at 2 threads: 1.20x ORT's time), and a kc x (the
     * item's panels) block packed per K step wrote it through the L2 (32 x 1024 x 1024 transB f32
     * at 1 thread, B an input: 478 us in an ab run, where the suite run before had 285 us with B
     * packed outside the call, Zen 5; not side by side) */
    int64_t tasks = batch * c.icb * c.ngroups;
    CHECK(pb_parallel_for(threads, tasks, mm_compute_range, &c));
    if (c.failed) return pb_fail(PB_ERR_OUT_OF_MEMORY, "matmul: no memory for an item's packed blocks");
    return PB_OK;
}
