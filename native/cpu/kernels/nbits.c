/* com.microsoft MatMulNBits: validate, lay each row of A out as the microkernel reads it
 * (kernels/nbits.inc.c), run column blocks over the pool.
 *
 * accuracy_level 0, M >= NB_GEMM_MIN_M: matmul.c's blocked GEMM over A as it lies and panels of B
 * dequantized in registers (the matmul_nbits_panel microkernel, kernels/nbits.inc.c); bf16 on a
 * path with bf16 pairs runs it in f32 (nb_gemm_bf16_as_f32).
 * accuracy_level 0, fewer rows: each row of A becomes f32 x in the weight's field order (per block, or per
 * vector's worth of blocks where a block has fewer bytes than a vector; per run of PB_LANES bytes; per bit
 * field: the k values of that field, zero past k). Work items are blocks of columns; an item runs every row over its columns in
 * sub-blocks whose weight bytes fit half the L2, so that for M > 1 the rows after the first read
 * them from the L2 rather than memory (reasoned from the sizes; not measured).
 * accuracy_level 4: B regrouped per group of 16 blocks and 4-byte word (nb_pack, unless given
 * packed); each row of A quantized per block to int8 (the matmul_nbits_quant_rows microkernel, rows over the pool) and laid out to match, with
 * its blocks' int8 sums and scales; same work items, each running all rows (in tiles). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../internal.h"

#define NB_G PB_NB_GROUP
/* accuracy 0: rows of A from which the GEMM over dequantized panels runs rather than the row kernel.
 * Zen 4, 1 thread, 4096 x 4096 4-bit, medians of 9 interleaved in one process, GEMM / row time: block
 * 32 M = 2 0.95, M = 3 0.76, M = 4 0.56 (2 threads 0.92, 0.73, 0.53); block 128 M = 2 1.31, M = 3
 * 1.02, M = 4 0.76; M = 1 1.65 (the row kernel streams B once without a panel's stores) */
#define NB_GEMM_MIN_M 3

typedef struct {
    const pb_matmul_nbits_args *a;
    pb_matmul_nbits_ukernel uk;
    pb_matmul_nbits_i8_ukernel uk8; /* accuracy 4: rows at xp as matmul_nbits_quant_rows lays them out, B packed at bp */
    const uint8_t *bp;
    const float *xp;
    int64_t kb, xrow, chunk, sub, es, lanes8, xq_off; /* accuracy 4: floats of each per-block array, xq's offset */
    int zp_mode;
    const void *zp8; /* accuracy 4: the zero points the int8 kernel reads (packed ones: B's packed copy of them) */
    int wide; /* accuracy 4: a single row may take four columns at a time (nb_wide) */
} nb_ctx;

static void nb_range(void *ctx, int64_t t0, int64_t t1) {
    const nb_ctx *c = (const nb_ctx *)ctx;
    const pb_matmul_nbits_args *a = c->a;
    for (int64_t t = t0; t < t1; t++) {
        const int64_t c0 = t * c->chunk, c1 = c0 + c->chunk < a->n ? c0 + c->chunk : a->n;
        for (int64_t s0 = c0; s0 < c1; s0 += c->sub) {
            const int64_t s1 = s0 + c->sub < c1 ? s0 + c->sub : c1;
            if (c->uk8 != NULL) { /* all rows at once: the kernel runs them in tiles of rows */
                c->uk8(c->xp, c->xrow, a->m, c->lanes8, c->xq_off, c->bp, a->scales, c->zp8, c->zp_mode,
                       a->bias, a->bits, a->block_size, c->kb, s0, s1, a->y, a->n, c->wide);
                continue;
            }
            for (int64_t i = 0; i < a->m; i++)
                c->uk(c->xp + i * c->xrow, a->b, a->scales, a->zero_points, c->zp_mode, a->bias, a->bits, a->block_size,
                      c->kb, s0, s1, (char *)a->y + i * a->n * c->es);
        }
    }
}

static float nb_to_f32(int32_t dtype, const void *p, int64_t i) {
    if (dtype == PB_DTYPE_F16) return pb_f16_to_f32(((const uint16_t *)p)[i]);
    if (dtype == PB_DTYPE_BF16) return pb_bf16_to_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

/* accuracy 4: rows of A quantized (the matmul_nbits_quant_rows microkernel), a range of rows a thread */
typedef struct {
    const pb_matmul_nbits_args *a;
    pb_matmul_nbits_quant_ukernel uk;
    int64_t kb, nbp, xq_off, xrow;
    float *rows;
} nb_quant_ctx;

static void nb_quant_range(void *ctx, int64_t i0, int64_t i1) {
    const nb_quant_ctx *q = (const nb_quant_ctx *)ctx;
    q->uk(q->a->a, q->a->k, i0, i1, q->a->bits, q->a->block_size, q->kb, q->nbp, q->xq_off, q->xrow, q->rows);
}

/* accuracy 0, M >= NB_GEMM_MIN_M, bf16 on a path whose bf16 GEMM multiplies bf16 pairs (the
 * panels here are f32): A and the bias widened to f32 (exact), the GEMM run in f32 into an f32 Y,
 * rounded to bf16 once (half to even). Before this, these cells ran the row kernel once per row
 * of A: 16 x 4096 x 4096 lost to ORT's f32 by 2.5-8.8x at 1-2 threads (Zen 4). */
static int nb_gemm_bf16_as_f32(const pb_isa *isa, const pb_matmul_nbits_args *a, pb_matmul_args *g,
                               pb_matmul_panel_ukernel panel, const pb_nbits_panel_src *src) {
    const int di = pb_dtype_index(PB_DTYPE_BF16);
    int64_t mk, mn;
    if (!pb_mul_ok(a->m, a->k, &mk) || !pb_mul_ok(a->m, a->n, &mn) || mk + mn + a->n > PB_SIZE_LIMIT / 4)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul_nbits: sizes overflow (f32 copies of A and Y)");
    float *w = (float *)pb_scratch_slot(1, (size_t)(mk + mn + a->n) * sizeof(float));
    if (w == NULL) return pb_fail(PB_ERR_OUT_OF_MEMORY, "matmul_nbits: no memory for the f32 copies of A and Y");
    isa->cast_to_f32[di](a->a, w, 0, mk);
    if (a->bias != NULL) isa->cast_to_f32[di](a->bias, w + mk + mn, 0, a->n);
    g->dtype = PB_DTYPE_F32;
    g->a = w;
    g->y = w + mk;
    g->c = a->bias != NULL ? w + mk + mn : NULL;
    CHECK(pb_matmul_blocked_panels(g, panel, src));
    isa->cast_from_f32[di](w + mk, a->y, 0, mn);
    return PB_OK;
}

/* accuracy 4, one row: four columns at a time (sharing each x vector's load over four dot products
 * where two took two loads) where the weights (packed B, scales, zero points) stay in the last-level
 * cache, two where they stream from memory (pb_stream_worth), and two at 8 bits. perfbench's native
 * loop against the build before the dot chains (two columns, one chain), 1 thread, Zen 4 (32 MiB
 * L3), weights warm, medians of 9, the chains in both new forms: two columns 1 x 4096 x 4096 block
 * 32 0.924, block 128 0.980, 11008 x 4096 block 128 1.011, 8 bits 0.951; four columns (several
 * runs) 4096 x 4096 (10 MiB of weights) block 32 0.85-0.94, block 128 0.86-0.95, 2 bits 0.93, but
 * 4096 x 11008 and 11008 x 4096 (23-28 MiB) 1.00-1.57 (block 128 the worst) and 8 bits 1.09-1.20
 * (the reason not looked into). The third is the library's streaming rule, not a measured edge:
 * nothing between 10 and 23 MiB was tried. */
static int nb_wide(int bits, int64_t weight_bytes) { return bits != 8 && !pb_stream_worth(weight_bytes); }

/* The packed copy (accuracy 4): B per group of NB_G blocks and 4-byte word, then each column's
 * packed zero points one byte a block (kb rounded up to a group; zero past kb), then a trailer saying
 * whether the zero points are there. The int8 kernel had unpacked a group's 16 zero points from 8
 * bytes per column (masked load, widen, permute, shift, mask) where a byte a block takes a widening
 * load and a conversion. perfbench's native loop against the build before (0cf31d5), Zen 4, medians
 * of 9, Y bitwise the same, one run on a noisy host (an earlier version of this change, which also
 * let 4096 x 4096 block 32 f32 fall to two columns a row, is not counted): 1 x 4096 x 4096 4-bit
 * block 32 1 thread 0.845 and 0.926, 2 threads 1.022 and 0.920, block 128 0.939, f16 0.821; 16 rows
 * 1.071 (the earlier version 0.99-1.05: 16 rows may be up to 5-7% slower, not looked into). */
#define NB_TRAILER 64
#define NB_MAGIC 0x42544e50u /* "PNTB" */
typedef struct { /* at the packed copy's end (NB_TRAILER bytes, the rest zero) */
    uint32_t magic, has_zp;
    int64_t n, kb, bb;
    int32_t bits;
} nb_trailer;
static int64_t nb_kbg(int64_t kb) { return (kb + NB_G - 1) / NB_G * NB_G; } /* blocks a column, whole groups */
static int64_t nb_zp_offset(int64_t n, int64_t kb, int64_t bb) { return n * nb_kbg(kb) * bb; }
static int64_t nb_packed_bytes(int64_t n, int64_t kb, int64_t bb) { return nb_zp_offset(n, kb, bb) + n * nb_kbg(kb) + NB_TRAILER; }

/* zp: packed zero points (ceil(kb x bits / 8) bytes a column) or NULL */
static void nb_pack(const uint8_t *b, const uint8_t *zp, int bits, int64_t n, int64_t kb, int64_t bb, uint8_t *out) {
    const int64_t kbg = nb_kbg(kb), ngr = kbg / NB_G, wpb = bb / 4, zpb = (kb * bits + 7) / 8;
    const int per = 8 / bits, mask = (1 << bits) - 1;
    for (int64_t j = 0; j < n; j++)
        for (int64_t grp = 0; grp < ngr; grp++)
            for (int64_t w = 0; w < wpb; w++) {
                uint8_t *o = out + ((j * ngr + grp) * wpb + w) * 4 * NB_G;
                for (int64_t l = 0; l < NB_G; l++) {
                    const int64_t blk = grp * NB_G + l;
                    if (blk < kb)
                        memcpy(o + l * 4, b + (j * kb + blk) * bb + w * 4, 4);
                    else
                        memset(o + l * 4, 0, 4);
                }
            }
    uint8_t *z = out + nb_zp_offset(n, kb, bb);
    for (int64_t j = 0; j < n; j++)
        for (int64_t blk = 0; blk < kbg; blk++)
            z[j * kbg + blk] = zp != NULL && blk < kb ? (zp[j * zpb + blk / per] >> (bits * (blk % per))) & mask : 0;
    nb_trailer tr;
    memset(&tr, 0, sizeof(tr));
    tr.magic = NB_MAGIC;
    tr.has_zp = zp != NULL;
    tr.n = n;
    tr.kb = kb;
    tr.bb = bb;
    tr.bits = bits;
    memset(z + n * kbg, 0, NB_TRAILER);
    memcpy(z + n * kbg, &tr, sizeof(tr));
}

static int nb_pack_check(int64_t n, int64_t k, int32_t bits, int32_t block_size, int64_t *bytes, const char *who) {
    if (bits != 2 && bits != 4 && bits != 8)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: bits=%d, expected 2, 4 or 8", who, (int)bits);
    if (block_size < 16 || block_size > 256 || (block_size & (block_size - 1)) != 0)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: block_size=%d, expected a power of two from 16 to 256", who,
                       (int)block_size);
    if (n < 0 || k < 0)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: n=%lld k=%lld must be >= 0", who, (long long)n, (long long)k);
    const int64_t kb = (k + block_size - 1) / block_size, bb = (int64_t)block_size * bits / 8;
    int64_t t;
    if (!pb_mul_ok(n, nb_kbg(kb), &t) || !pb_mul_ok(t, bb + 1, &t) || t > PB_SIZE_LIMIT)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: sizes overflow", who);
    *bytes = nb_packed_bytes(n, kb, bb);
    return PB_OK;
}

int pb_matmul_nbits_packed_bytes(int64_t n, int64_t k, int32_t bits, int32_t block_size, int64_t *bytes_out) {
    if (bytes_out == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul_nbits_packed_bytes: bytes_out is NULL");
    return nb_pack_check(n, k, bits, block_size, bytes_out, "matmul_nbits_packed_bytes");
}

int pb_matmul_nbits_pack_b(const uint8_t *b, const uint8_t *zero_points, int64_t n, int64_t k, int32_t bits,
                           int32_t block_size, uint8_t *out, int64_t out_bytes) {
    int64_t need;
    CHECK(nb_pack_check(n, k, bits, block_size, &need, "matmul_nbits_pack_b"));
    if (out_bytes < need)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul_nbits_pack_b: out holds %lld bytes, %lld needed",
                       (long long)out_bytes, (long long)need);
    const int64_t kb = (k + block_size - 1) / block_size;
    /* the trailer is written even for an empty B (n or k 0: b may be NULL then) */
    if (out == NULL || (b == NULL && n * kb > 0))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul_nbits_pack_b: b and out must not be NULL");
    if (pb_overlap(out, (size_t)need, b, (size_t)(n * kb * block_size * bits / 8)))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul_nbits_pack_b: out overlaps b");
    if (zero_points != NULL && pb_overlap(out, (size_t)need, zero_points, (size_t)(n * ((kb * bits + 7) / 8))))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul_nbits_pack_b: out overlaps zero_points");
    nb_pack(b, zero_points, bits, n, kb, (int64_t)block_size * bits / 8, out);
    return PB_OK;
}

int pb_matmul_nbits(const void *args) {
    CHECK(pb_check_args(args, "matmul_nbits"));
    const pb_matmul_nbits_args *a = (const pb_matmul_nbits_args *)args;
    CHECK(pb_check_exec(&a->exec, "matmul_nbits"));
    CHECK(pb_check_dtype(a->dtype, "matmul_nbits"));
    if (a->bits != 2 && a->bits != 4 && a->bits != 8)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul_nbits: bits=%d, expected 2, 4 or 8", (int)a->bits);
    if (a->block_size < 16 || (a->block_size & (a->block_size - 1)) != 0 || a->block_size > (1 << 20))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul_nbits: block_size=%d, expected a power of two from 16 to 2^20",
                       (int)a->block_size);
    if (a->accuracy_level != 0 && a->accuracy_level != 4)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul_nbits: accuracy_level=%d, expected 0 (f32 products) or 4 (int8 activations)",
                       (int)a->accuracy_level);
    if (a->accuracy_level == 4 && a->block_size > 256) /* int32 sums: 8 bits x 256 x 128 x 255 < 2^24, exact in f32 */
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul_nbits: block_size=%d at accuracy_level 4, expected at most 256 "
                       "(ORT's largest; a block's int32 sum must stay exact)", (int)a->block_size);
    if (a->zp_packed != 0 && a->zp_packed != 1)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul_nbits: zp_packed=%d, expected 0 or 1", (int)a->zp_packed);
    if (a->m < 0 || a->n < 0 || a->k < 0)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul_nbits: m=%lld n=%lld k=%lld must be >= 0", (long long)a->m,
                       (long long)a->n, (long long)a->k);
    const int64_t es = (int64_t)pb_dtype_size(a->dtype), bs = a->block_size;
    const int64_t kb = (a->k + bs - 1) / bs, bb = bs * a->bits / 8, zpb = (kb * a->bits + 7) / 8;
    const pb_isa *isa = pb_active_isa();
    const int isa_lanes = isa->lanes;
    const int64_t per = 8 / a->bits;
    /* accuracy 0's row kernel reads x per unit of SPB blocks: one block, or where a block has fewer
     * bytes than a vector the LANES / (block bytes) blocks a vector takes (nbits_cols_small) */
    const int64_t spb = bb < isa_lanes ? isa_lanes / bb : 1, xunit = bb * spb * per; /* x floats a unit */
    int64_t t, ybytes, bbytes, xrow;
    if (!pb_mul_ok(a->m, a->n, &t) || !pb_mul_ok(t, es, &ybytes) || !pb_mul_ok(a->n, kb, &t) ||
        !pb_mul_ok(t, bb, &bbytes) || !pb_mul_ok((kb + spb - 1) / spb, xunit, &xrow) || !pb_mul_ok(a->m, xrow, &t) ||
        t > PB_SIZE_LIMIT / 4)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul_nbits: sizes overflow");
    if (a->m == 0 || a->n == 0) return PB_OK;
    if (a->y == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul_nbits: y must not be NULL");
    if (a->k == 0) { /* Y = bias (same dtype: its bytes), or 0 (all-zero bits in every dtype) */
        for (int64_t i = 0; i < a->m; i++) {
            char *row = (char *)a->y + i * a->n * es;
            if (a->bias != NULL)
                memcpy(row, a->bias, (size_t)(a->n * es));
            else
                memset(row, 0, (size_t)(a->n * es));
        }
        return PB_OK;
    }
    if (a->a == NULL || a->b == NULL || a->scales == NULL)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul_nbits: a, b and scales must not be NULL");
    const size_t zbytes = a->zero_points == NULL ? 0 : a->zp_packed ? (size_t)(a->n * zpb) : (size_t)(a->n * kb * es);
    if (pb_overlap(a->y, (size_t)ybytes, a->a, (size_t)(a->m * a->k * es)) ||
        pb_overlap(a->y, (size_t)ybytes, a->b, (size_t)bbytes) ||
        pb_overlap(a->y, (size_t)ybytes, a->scales, (size_t)(a->n * kb * es)) ||
        (a->zero_points && pb_overlap(a->y, (size_t)ybytes, a->zero_points, zbytes)) ||
        (a->bias && pb_overlap(a->y, (size_t)ybytes, a->bias, (size_t)(a->n * es))))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul_nbits: y overlaps an input");
    nb_ctx c = {a, isa->matmul_nbits_cols[pb_dtype_index(a->dtype)], NULL, NULL, NULL, kb, xrow, 0, 0, es, 0, 0,
                a->zero_points == NULL ? 0 : a->zp_packed ? 1 : 2};
    if (a->accuracy_level == 4) { /* per row: block sums and scales (kb rounded up to a group), then the int8 values */
        const int64_t xq_bytes = nb_kbg(kb) * bs;
        c.uk8 = isa->matmul_nbits_i8_cols[pb_dtype_index(a->dtype)];
        c.lanes8 = nb_kbg(kb);
        c.xq_off = 2 * c.lanes8;
        c.xrow = (c.xq_off + xq_bytes / 4 + 15) / 16 * 16; /* whole cache lines a row */
        if (!pb_mul_ok(a->m, c.xrow, &t) || t > PB_SIZE_LIMIT / 4)
            return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul_nbits: sizes overflow");
        const uint8_t *zpk = c.zp_mode == 1 ? (const uint8_t *)a->zero_points : NULL;
        /* the bytes the kernel reads: packed B, scales, and zero points (packed ones: the packed copy's) */
        c.wide = nb_wide(a->bits, nb_zp_offset(a->n, kb, bb) + a->n * kb * es +
                                      (zpk != NULL ? a->n * c.lanes8 : (int64_t)zbytes));
        c.bp = a->b_packed;
        if (c.bp == NULL) { /* B not packed beforehand: packed here, every call */
            /* slot 0: the per-thread microkernel scratch, which the nbits microkernels do not use */
            uint8_t *bp = (uint8_t *)pb_scratch_slot(0, (size_t)nb_packed_bytes(a->n, kb, bb));
            if (bp == NULL) return pb_fail(PB_ERR_OUT_OF_MEMORY, "matmul_nbits: no memory to pack B");
            nb_pack(a->b, zpk, a->bits, a->n, kb, bb, bp);
            c.bp = bp;
        } else {
            if (pb_overlap(a->y, (size_t)ybytes, a->b_packed, (size_t)nb_packed_bytes(a->n, kb, bb)))
                return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul_nbits: y overlaps b_packed");
            nb_trailer tr;
            memcpy(&tr, a->b_packed + nb_packed_bytes(a->n, kb, bb) - NB_TRAILER, sizeof(tr));
            if (tr.magic != NB_MAGIC || tr.n != a->n || tr.kb != kb || tr.bb != bb || tr.bits != a->bits)
                return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul_nbits: b_packed is not pb_matmul_nbits_pack_b's "
                                                        "output for this n, k, bits and block_size");
            if (zpk != NULL && !tr.has_zp)
                return pb_fail(PB_ERR_INVALID_ARGUMENT, "matmul_nbits: b_packed was packed without zero points; "
                                                        "pass the packed zero_points to pb_matmul_nbits_pack_b too");
        }
        /* packed zero points: the packed copy's byte a block (mode 3) */
        c.zp8 = zpk != NULL ? (const void *)(c.bp + nb_zp_offset(a->n, kb, bb)) : a->zero_points;
        if (zpk != NULL) c.zp_mode = 3;
        float *xq = (float *)pb_scratch_slot(1, (size_t)(a->m * c.xrow) * sizeof(float));
        if (xq == NULL) return pb_fail(PB_ERR_OUT_OF_MEMORY, "matmul_nbits: no memory for the rows of A quantized");
        nb_quant_ctx q = {a, isa->matmul_nbits_quant_rows[pb_dtype_index(a->dtype)], kb, c.lanes8, c.xq_off, c.xrow, xq};
        /* two passes over each block and a byte scatter: a LayerNormalization's work an element */
        CHECK(pb_parallel_for(pb_threads_for(a->exec.num_threads, a->m * a->k, PB_GRAIN_NORM), a->m, nb_quant_range, &q));
        c.xp = xq;
    } else {
        /* M > 1 (at least NB_GEMM_MIN_M rows): a GEMM of A (as it lies) by B dequantized a panel at
         * a time (matmul.c's blocked loop); else each row of A (laid out as f32 in the field order)
         * by the row kernel, which unpacks B once per row */
        if (a->m >= NB_GEMM_MIN_M) {
            const pb_nbits_panel_src src = {a->b, a->scales, a->zero_points, c.zp_mode, a->bits, bs, kb};
            pb_matmul_args g;
            memset(&g, 0, sizeof(g));
            g.exec = a->exec;
            g.dtype = a->dtype;
            g.m = a->m;
            g.n = a->n;
            g.k = a->k;
            g.alpha = 1.0f;
            g.beta = a->bias != NULL ? 1.0f : 0.0f;
            g.c = a->bias; /* one row, broadcast over Y's rows */
            g.c_cs = 1;
            g.a = a->a;
            g.y = a->y;
            const pb_matmul_panel_ukernel panel = isa->matmul_nbits_panel[pb_dtype_index(a->dtype)];
            if (a->dtype == PB_DTYPE_BF16 && isa->mm_bf16_pairs)
                return nb_gemm_bf16_as_f32(isa, a, &g, panel, &src);
            return pb_matmul_blocked_panels(&g, panel, &src);
        }
        float *xp = (float *)pb_scratch_slot(1, (size_t)(a->m * xrow) * sizeof(float));
        if (xp == NULL) return pb_fail(PB_ERR_OUT_OF_MEMORY, "matmul_nbits: no memory for the rows of A laid out");
        memset(xp, 0, (size_t)(a->m * xrow) * sizeof(float));
        /* unit u's byte l (of LANES, a run of LANES bytes at a time), field f: k = u x SPB x block_size +
         * (run x LANES + l) x per + f, zero past k */
        for (int64_t i = 0; i < a->m; i++)
            for (int64_t u = 0; u * spb < kb; u++)
                for (int64_t ch = 0; ch < xunit / per / isa_lanes; ch++)
                    for (int64_t f = 0; f < per; f++)
                        for (int64_t l = 0; l < isa_lanes; l++) {
                            const int64_t p = u * spb * bs + (ch * isa_lanes + l) * per + f;
                            if (p < a->k)
                                xp[i * xrow + u * xunit + (ch * per + f) * isa_lanes + l] =
                                    nb_to_f32(a->dtype, a->a, i * a->k + p);
                        }
        c.xp = xp;
    }
    int64_t work;
    if (!pb_mul_ok(a->m * a->n, a->k, &work)) work = INT64_MAX; /* m * n checked above */
    const int32_t threads = pb_threads_for(a->exec.num_threads, work, PB_GRAIN_GEMV);
    c.chunk = (a->n + threads - 1) / threads;
    const int64_t colbytes = kb * bb > 0 ? kb * bb : 1;
    c.sub = pb_l2_bytes() / 2 / colbytes;
    if (c.sub < 1) c.sub = 1;
    return pb_parallel_for(threads, (a->n + c.chunk - 1) / c.chunk, nb_range, &c);
}
