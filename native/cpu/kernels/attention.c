/* The attention engine: the scheduler, the item loop, the combine step and the KV append that
 * GroupQueryAttention, MultiHeadAttention (attention_ms.c) and ai.onnx Attention
 * (onnx_attention.c) share. A front end validates its args, fills a pb_attn_plan and calls
 * pb_attn_schedule, pb_attn_append (when it writes a present cache) and pb_attn_run.
 *
 * Work items are (query block, batch row, KV head[, key split]): each reads its KV head's keys
 * and values once for all the query heads that share them. Items are taken dynamically (an
 * atomic counter), heaviest first. When the queries are too few to keep the threads busy
 * (decode), the keys are split into chunks as flash-decoding does: each chunk leaves a partial
 * (running max, sum, unnormalized output) and a combine step merges them. With a QK output
 * (ai.onnx's qk_matmul_output) every item takes the full-row form instead, never split. */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "../internal.h"

float pb_attn_default_scale(float scale, int64_t head_size) {
    return scale == 0.0f ? (float)(1.0 / sqrt((double)head_size)) : scale;
}

int64_t pb_attn_lanes_round(int64_t h) {
    const int64_t L = pb_active_isa()->lanes;
    return (h + L - 1) / L * L;
}

/* ---- scheduling ---- */
/* Decode form (S == 1, or a block of < PB_ATT_PACK_ROWS rows): one block per item, keys split
 * across threads when (batch x KV heads) cannot keep them busy. Prefill form (and the full-row
 * form): an item is a group of consecutive query blocks of one KV head (its keys converted once
 * for all of them); groups per head are as few as keep every thread fed. */
void pb_attn_schedule(pb_attn_plan *p, int64_t max_kv, int32_t max_threads, pb_attn_sched *s) {
    const int full = p->qk != NULL;
    s->rows_per_item = p->G >= PB_ATT_ROWS ? 1 : PB_ATT_ROWS / p->G;
    if (s->rows_per_item > p->S) s->rows_per_item = p->S;
    s->n_sblocks = (p->S + s->rows_per_item - 1) / s->rows_per_item;
    const int64_t heads = p->B * p->Nkv;
    const int prefill = full || !pb_att_decode_form(p->S, s->rows_per_item * p->G);
    if (prefill) { /* compute-bound: multiply-add pairs */
        /* keys per query row: every one, or with a causal limit the mean over the rows (positions
         * max_kv - S .. max_kv - 1: half of them without a past, nearly all with a long one);
         * the full-row form computes every score */
        const int64_t keys = p->causal && !full ? max_kv + 1 - (p->S + 1) / 2 : max_kv + 1;
        int64_t work = p->B * p->Nq * p->S;
        work = work > PB_ATT_LIMIT / keys ? PB_ATT_LIMIT : work * keys;
        work = work > PB_ATT_LIMIT / p->H ? PB_ATT_LIMIT : work * p->H;
        s->threads = pb_threads_for(max_threads, work, PB_ATT_GRAIN);
    } else { /* memory-bound: key and value elements streamed (a MAC count under-weights them:
              * MHA decode at past 128 stayed on one thread while ORT used two, 1.6x faster) */
        int64_t work = heads > PB_ATT_LIMIT / (max_kv + 1) ? PB_ATT_LIMIT : heads * (max_kv + 1);
        work = work > PB_ATT_LIMIT / (2 * p->H) ? PB_ATT_LIMIT : work * 2 * p->H;
        s->threads = pb_threads_for(max_threads, work, PB_ATT_DECODE_GRAIN);
    }
    s->nsplit = 1;
    s->ngroups = s->n_sblocks;
    if (prefill) {
        const int64_t want = s->threads > 1 ? (4 * s->threads + heads - 1) / heads : 1;
        s->ngroups = want < s->n_sblocks ? want : s->n_sblocks;
    } else if (s->threads > 1 && s->n_sblocks == 1 && heads < 4 * s->threads) {
        const int64_t want = (4 * s->threads + heads - 1) / heads, most = max_kv / PB_ATT_MIN_SPLIT_KEYS;
        s->nsplit = want < most ? want : most;
        if (s->nsplit < 1) s->nsplit = 1;
    }
    s->chunk = s->nsplit > 1 ? ((max_kv + s->nsplit - 1) / s->nsplit + 63) / 64 * 64 : INT64_MAX;
    s->items = heads * s->ngroups * s->nsplit;
    const int64_t R = s->rows_per_item * p->G;
    /* whole cache lines per partial: splits written by different threads never share one */
    s->part_stride = s->nsplit > 1 ? (2 * R + R * p->Hp + 15) / 16 * 16 : 0;
    p->rows_per_item = s->rows_per_item;
}

size_t pb_attn_partial_floats(const pb_attn_plan *p, const pb_attn_sched *s) {
    return s->nsplit > 1 ? (size_t)(p->B * p->Nkv * s->nsplit * s->part_stride) : 0;
}

/* ---- the item loop and the combine step ---- */
typedef struct {
    const pb_attn_plan *p;
    const pb_attn_sched *s;
    pb_attn_ukernel uk;
    pb_attn_combine_ukernel combine;
    pb_attn_full_ukernel full; /* non-NULL: every item takes the full-row form */
    float *partials;
    atomic_llong next;
    atomic_int status;
} attn_ctx;

static void attn_items(void *vctx, int64_t r0, int64_t r1) {
    (void)r0;
    (void)r1;
    attn_ctx *c = (attn_ctx *)vctx;
    const pb_attn_plan *p = c->p;
    const pb_attn_sched *s = c->s;
    const int64_t per_group = p->B * p->Nkv * s->nsplit;
    for (;;) {
        const int64_t i = (int64_t)atomic_fetch_add(&c->next, 1);
        if (i >= s->items) break;
        /* heaviest first: causal groups late in the sequence see the most keys */
        const int64_t grp = s->ngroups - 1 - i / per_group, rem = i % per_group;
        const int64_t b = rem / (p->Nkv * s->nsplit), g = rem / s->nsplit % p->Nkv, split = rem % s->nsplit;
        const int64_t blk0 = grp * s->n_sblocks / s->ngroups, blk1 = (grp + 1) * s->n_sblocks / s->ngroups;
        const int64_t s0 = blk0 * s->rows_per_item;
        const int64_t s1 = blk1 * s->rows_per_item < p->S ? blk1 * s->rows_per_item : p->S;
        const int64_t t0 = s->nsplit > 1 ? split * s->chunk : 0;
        const int64_t t1 = s->nsplit > 1 && split < s->nsplit - 1 ? t0 + s->chunk : INT64_MAX;
        float *part = s->nsplit > 1 ? c->partials + ((b * p->Nkv + g) * s->nsplit + split) * s->part_stride : NULL;
        const int rc = c->full ? c->full(p, b, g, s0, s1) : c->uk(p, b, g, s0, s1, t0, t1, part);
        if (rc != PB_OK) atomic_store(&c->status, rc);
    }
}

static void attn_combine_range(void *vctx, int64_t i0, int64_t i1) {
    attn_ctx *c = (attn_ctx *)vctx;
    const pb_attn_plan *p = c->p;
    const pb_attn_sched *s = c->s;
    for (int64_t i = i0; i < i1; i++) { /* i = b * Nkv + g; decode: one query block */
        const int rc = c->combine(p, i / p->Nkv, i % p->Nkv, 0, p->S, c->partials + i * s->nsplit * s->part_stride,
                                  s->nsplit, s->part_stride);
        if (rc != PB_OK) atomic_store(&c->status, rc);
    }
}

int pb_attn_run(const pb_attn_plan *p, const pb_attn_sched *s, float *partials, const char *k) {
    const pb_isa *isa = pb_active_isa();
    const int di = pb_dtype_index(p->dtype);
    attn_ctx c = {.p = p, .s = s, .uk = isa->attention[di], .combine = isa->attn_combine[di],
                  .full = p->qk ? isa->attn_full[di] : NULL, .partials = partials};
    atomic_init(&c.next, 0);
    atomic_init(&c.status, PB_OK);
    CHECK(pb_parallel_for(s->threads, s->threads, attn_items, &c));
    if (atomic_load(&c.status) == PB_OK && s->nsplit > 1)
        CHECK(pb_parallel_for(s->threads, p->B * p->Nkv, attn_combine_range, &c));
    const int rc = atomic_load(&c.status);
    if (rc != PB_OK) return pb_fail(rc, "%s: out of scratch memory (see PERFBENCH_SCRATCH_MAX_BYTES)", k);
    return PB_OK;
}

/* ---- KV append ---- */
typedef struct {
    const pb_kv_append *a;
    pb_kv_append_ukernel uk;
    atomic_int status;
} append_ctx;

static void append_range(void *vctx, int64_t i0, int64_t i1) {
    append_ctx *c = (append_ctx *)vctx;
    for (int64_t i = i0; i < i1; i++) {
        const int rc = c->uk(c->a, i / c->a->Nkv, i % c->a->Nkv);
        if (rc != PB_OK) atomic_store(&c->status, rc);
    }
}

int pb_attn_append(const pb_kv_append *a, int32_t max_threads, int64_t rows, const char *k) {
    append_ctx c = {.a = a, .uk = pb_active_isa()->kv_append[pb_dtype_index(a->dtype)]};
    atomic_init(&c.status, PB_OK);
    const int64_t work = rows * a->H; /* elements moved */
    CHECK(pb_parallel_for(pb_threads_for(max_threads, work, PB_ATT_COPY_GRAIN), a->B * a->Nkv, append_range, &c));
    const int rc = atomic_load(&c.status);
    if (rc != PB_OK) return pb_fail(rc, "%s: out of scratch memory (see PERFBENCH_SCRATCH_MAX_BYTES)", k);
    return PB_OK;
}

/* The prefill form keeps the copy in the append step (many blocks read each row). */
void pb_attn_copy_while_reading(pb_attn_plan *p, pb_kv_append *ap, int reads_all) {
    if (!ap->copy_past || !reads_all || p->qk != NULL || !pb_att_decode_form(p->S, p->rows_per_item * p->G)) return;
    ap->copy_past = 0;
    p->k_past = ap->past_k;
    p->v_past = ap->past_v;
    p->k_copy = ap->pres_k;
    p->v_copy = ap->pres_v;
    p->past_sb = ap->Nkv * ap->past_cap * ap->H;
    p->past_sg = ap->past_cap * ap->H;
    p->past_st = ap->H;
    p->past_len = ap->past_len;
}
