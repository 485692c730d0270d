/* GroupQueryAttention and MultiHeadAttention entry points: validate every argument (returning a
 * status, never crashing), append new keys/values to the cache, plan the work items and run
 * the active ISA's attention microkernel over them on the pool.
 *
 * Work items are (query block, batch row, KV head[, key split]): each reads its KV head's keys
 * and values once for all the query heads that share them. Items are taken dynamically (an
 * atomic counter), heaviest first. When the queries are too few to keep the threads busy
 * (decode), the keys are split into chunks as flash-decoding does: each chunk leaves a partial
 * (running max, sum, unnormalized output) and a combine step merges them. */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "../internal.h"


/* ---- scheduling ---- */
typedef struct {
    int64_t rows_per_item, n_sblocks, ngroups, nsplit, chunk, items, part_stride;
    int32_t threads;
} attn_sched;

/* p's shapes only (its arrays need not exist yet); max_kv = the longest batch row's keys.
 * Decode form (S == 1, or a block of < PB_ATT_PACK_ROWS rows): one block per item, keys split across
 * threads when (batch x KV heads) cannot keep them busy. Prefill form: an item is a group of
 * consecutive query blocks of one KV head (its keys converted once for all of them); groups
 * per head are as few as keep every thread fed. */
static void plan_schedule(const pb_attn_plan *p, int64_t max_kv, int32_t max_threads, attn_sched *s) {
    s->rows_per_item = p->G >= PB_ATT_ROWS ? 1 : PB_ATT_ROWS / p->G;
    if (s->rows_per_item > p->S) s->rows_per_item = p->S;
    s->n_sblocks = (p->S + s->rows_per_item - 1) / s->rows_per_item;
    const int64_t heads = p->B * p->Nkv;
    const int prefill = !pb_att_decode_form(p->S, s->rows_per_item * p->G);
    if (prefill) { /* compute-bound: multiply-add pairs */
        int64_t work = p->B * p->Nq * p->S;
        work = work > PB_ATT_LIMIT / (max_kv + 1) ? PB_ATT_LIMIT : work * (max_kv + 1);
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
        int64_t want = s->threads > 1 ? (4 * s->threads + heads - 1) / heads : 1;
        s->ngroups = want < s->n_sblocks ? want : s->n_sblocks;
    } else if (s->threads > 1 && s->n_sblocks == 1 && heads < 4 * s->threads) {
        int64_t want = (4 * s->threads + heads - 1) / heads;
        int64_t most = max_kv / PB_ATT_MIN_SPLIT_KEYS;
        s->nsplit = want < most ? want : most;
        if (s->nsplit < 1) s->nsplit = 1;
    }
    s->chunk = s->nsplit > 1 ? ((max_kv + s->nsplit - 1) / s->nsplit + 63) / 64 * 64 : INT64_MAX;
    s->items = heads * s->ngroups * s->nsplit;
    const int64_t R = s->rows_per_item * p->G;
    /* whole cache lines per partial: splits written by different threads never share one */
    s->part_stride = s->nsplit > 1 ? (2 * R + R * p->Hp + 15) / 16 * 16 : 0;
}

static size_t partial_floats(const pb_attn_plan *p, const attn_sched *s) {
    return s->nsplit > 1 ? (size_t)(p->B * p->Nkv * s->nsplit * s->part_stride) : 0;
}

typedef struct {
    const pb_attn_plan *p;
    const attn_sched *s;
    pb_attn_ukernel uk;
    pb_attn_combine_ukernel combine;
    float *partials;
    atomic_llong next;
    atomic_int status;
} attn_ctx;

static void attn_items(void *vctx, int64_t r0, int64_t r1) {
    (void)r0;
    (void)r1;
    attn_ctx *c = (attn_ctx *)vctx;
    const pb_attn_plan *p = c->p;
    const attn_sched *s = c->s;
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
        const int rc = c->uk(p, b, g, s0, s1, t0, t1, part);
        if (rc != PB_OK) atomic_store(&c->status, rc);
    }
}

static void attn_combine_range(void *vctx, int64_t i0, int64_t i1) {
    attn_ctx *c = (attn_ctx *)vctx;
    const pb_attn_plan *p = c->p;
    const attn_sched *s = c->s;
    for (int64_t i = i0; i < i1; i++) { /* i = b * Nkv + g; decode: one query block */
        const int rc = c->combine(p, i / p->Nkv, i % p->Nkv, 0, p->S, c->partials + i * s->nsplit * s->part_stride,
                                  s->nsplit, s->part_stride);
        if (rc != PB_OK) atomic_store(&c->status, rc);
    }
}

static int run_attention(const pb_attn_plan *p, const attn_sched *s, float *partials, const char *k) {
    const pb_isa *isa = pb_active_isa();
    const int di = pb_dtype_index(p->dtype);
    attn_ctx c = {.p = p, .s = s, .uk = isa->attention[di], .combine = isa->attn_combine[di], .partials = partials};
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

static int run_append(const pb_kv_append *a, int32_t max_threads, int64_t rows, const char *k) {
    append_ctx c = {.a = a, .uk = pb_active_isa()->kv_append[pb_dtype_index(a->dtype)]};
    atomic_init(&c.status, PB_OK);
    const int64_t work = rows * a->H; /* elements moved */
    CHECK(pb_parallel_for(pb_threads_for(max_threads, work, 8 * 32768), a->B * a->Nkv, append_range, &c));
    const int rc = atomic_load(&c.status);
    if (rc != PB_OK) return pb_fail(rc, "%s: out of scratch memory (see PERFBENCH_SCRATCH_MAX_BYTES)", k);
    return PB_OK;
}

/* Decode form with a copied cache: the attention pass copies each past row into present as it
 * reads it (the past is read once, not copied and then re-read), so the append step copies
 * nothing. The prefill form keeps the copy in the append step (many blocks read each row). */
static void copy_while_reading(pb_attn_plan *p, pb_kv_append *ap, int64_t rows_per_item) {
    if (!ap->copy_past || !pb_att_decode_form(p->S, rows_per_item * p->G)) return;
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

static float default_scale(float scale, int64_t head_size) {
    return scale == 0.0f ? (float)(1.0 / sqrt((double)head_size)) : scale;
}

static int64_t lanes_round(int64_t h) {
    const int64_t L = pb_active_isa()->lanes;
    return (h + L - 1) / L * L;
}

/* ---- GroupQueryAttention ---- */
int pb_group_query_attention(const void *args) {
    const char *k = "group_query_attention";
    if (args == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: args is NULL", k);
    const pb_group_query_attention_args *a = (const pb_group_query_attention_args *)args;
    CHECK(pb_check_exec(&a->exec, k));
    CHECK(pb_check_dtype(a->dtype, k));
    /* attribute values we do not implement: declined, never approximated */
    if (a->softcap != 0.0f)
        return pb_fail(PB_ERR_UNSUPPORTED, "%s: softcap=%g is not implemented (only 0, off)", k, (double)a->softcap);
    if (a->local_window_size != -1)
        return pb_fail(PB_ERR_UNSUPPORTED, "%s: local_window_size=%d is not implemented (only -1, no window)", k,
                       (int)a->local_window_size);
    if (a->smooth_softmax == 1)
        return pb_fail(PB_ERR_UNSUPPORTED, "%s: smooth_softmax=1 is not implemented (only -1 or 0, off)", k);
    if (a->smooth_softmax != 0 && a->smooth_softmax != -1)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: smooth_softmax=%d, expected -1, 0 or 1", k, (int)a->smooth_softmax);
    if (a->do_rotary != 0 && a->do_rotary != 1)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: do_rotary=%d, expected 0 or 1", k, (int)a->do_rotary);
    if (a->rotary_interleaved != 0 && a->rotary_interleaved != 1)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: rotary_interleaved=%d, expected 0 or 1", k,
                       (int)a->rotary_interleaved);
    if (!isfinite(a->scale)) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: scale=%g is not finite", k, (double)a->scale);
    if (a->batch < 1 || a->seq < 1 || a->num_heads < 1 || a->kv_num_heads < 1 || a->head_size < 1)
        return pb_fail(PB_ERR_INVALID_ARGUMENT,
                       "%s: batch=%lld seq=%lld num_heads=%lld kv_num_heads=%lld head_size=%lld must be >= 1", k,
                       (long long)a->batch, (long long)a->seq, (long long)a->num_heads, (long long)a->kv_num_heads,
                       (long long)a->head_size);
    if (a->num_heads % a->kv_num_heads != 0)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: num_heads=%lld is not a multiple of kv_num_heads=%lld", k,
                       (long long)a->num_heads, (long long)a->kv_num_heads);
    if (a->head_size > PB_ATT_MAX_HEAD)
        return pb_fail(PB_ERR_UNSUPPORTED, "%s: head_size=%lld is above %d", k, (long long)a->head_size,
                       PB_ATT_MAX_HEAD);
    if (a->past_capacity < 0 || a->present_capacity < 1 || a->total_sequence_length < 1 ||
        a->past_capacity > PB_ATT_LIMIT || a->present_capacity > PB_ATT_LIMIT)
        return pb_fail(PB_ERR_INVALID_ARGUMENT,
                       "%s: past_capacity=%lld must be in [0, 2^40], present_capacity=%lld in [1, 2^40] and "
                       "total_sequence_length=%d >= 1",
                       k, (long long)a->past_capacity, (long long)a->present_capacity, (int)a->total_sequence_length);
    const int64_t lim = PB_ATT_LIMIT;
    if (a->batch > lim / a->seq || a->batch * a->seq > lim / a->num_heads ||
        a->batch * a->seq * a->num_heads > lim / a->head_size || a->batch * a->kv_num_heads > lim / a->present_capacity ||
        a->batch * a->kv_num_heads * a->present_capacity > lim / a->head_size ||
        (a->past_capacity > 0 && a->batch * a->kv_num_heads > lim / a->past_capacity) ||
        a->batch * a->kv_num_heads * a->past_capacity > lim / a->head_size)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: tensor sizes overflow", k);
    if (a->key == NULL || a->value == NULL)
        return pb_fail(PB_ERR_UNSUPPORTED, "%s: packed QKV (key/value NULL) is not implemented", k);
    if (a->query == NULL || a->output == NULL || a->present_key == NULL || a->present_value == NULL ||
        a->seqlens_k == NULL)
        return pb_fail(PB_ERR_INVALID_ARGUMENT,
                       "%s: query, key, value, seqlens_k, output, present_key and present_value must not be NULL", k);
    if (a->past_capacity > 0 && (a->past_key == NULL || a->past_value == NULL))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: past_capacity=%lld but past_key/past_value is NULL", k,
                       (long long)a->past_capacity);
    const int shared = a->past_capacity > 0 && a->past_key == a->present_key;
    if (a->past_capacity > 0 && (a->past_key == a->present_key) != (a->past_value == a->present_value))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: share both caches (past == present) or neither", k);
    if (shared && a->past_capacity != a->present_capacity)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: shared buffer needs past_capacity == present_capacity (%lld != %lld)",
                       k, (long long)a->past_capacity, (long long)a->present_capacity);
    if (a->do_rotary) {
        if (a->cos_cache == NULL || a->sin_cache == NULL)
            return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: do_rotary=1 needs cos_cache and sin_cache", k);
        if (a->rotary_half < 1 || 2 * a->rotary_half > a->head_size || a->rotary_max_pos < 1 ||
            a->rotary_max_pos > lim / a->rotary_half)
            return pb_fail(PB_ERR_INVALID_ARGUMENT,
                           "%s: cos/sin caches (%lld, %lld): need 1 <= 2 x columns <= head_size=%lld", k,
                           (long long)a->rotary_max_pos, (long long)a->rotary_half, (long long)a->head_size);
    }
    const int64_t B = a->batch, S = a->seq, Nkv = a->kv_num_heads;
    /* ORT's rule: seq == total_sequence_length is a first prompt (no past is read, positions
     * 0..seq-1, rows may be right-padded: seqlens_k[b] + 1 <= seq); otherwise the new tokens
     * follow seqlens_k[b] + 1 - seq past tokens. */
    const int first = S == a->total_sequence_length;
    if (first && S > a->present_capacity)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: seq=%lld new rows exceed the present capacity %lld", k,
                       (long long)S, (long long)a->present_capacity);
    for (int64_t b = 0; b < B; b++) {
        const int64_t total = (int64_t)a->seqlens_k[b] + 1;
        if (total < 1 || total > a->present_capacity || total > a->total_sequence_length)
            return pb_fail(PB_ERR_INVALID_ARGUMENT,
                           "%s: seqlens_k[%lld]=%d: need 0 <= seqlens_k < min(total_sequence_length=%d, present "
                           "capacity %lld)",
                           k, (long long)b, (int)a->seqlens_k[b], (int)a->total_sequence_length,
                           (long long)a->present_capacity);
        /* a first prompt's total <= total_sequence_length == seq: right padding at most */
        if (!first && (total < S || total - S > a->past_capacity))
            return pb_fail(PB_ERR_INVALID_ARGUMENT,
                           "%s: seqlens_k[%lld]=%d gives %lld tokens; need seq=%lld <= tokens and tokens - seq <= "
                           "past capacity %lld",
                           k, (long long)b, (int)a->seqlens_k[b], (long long)total, (long long)S,
                           (long long)a->past_capacity);
        const int64_t last_pos = first ? S - 1 : total - 1;
        if (a->do_rotary && last_pos >= a->rotary_max_pos)
            return pb_fail(PB_ERR_INVALID_ARGUMENT,
                           "%s: position %lld (batch row %lld) is outside the cos/sin cache rows [0, %lld)", k,
                           (long long)last_pos, (long long)b, (long long)a->rotary_max_pos);
    }

    pb_attn_plan p = {
        .dtype = a->dtype, .B = B, .S = S, .Nq = a->num_heads, .Nkv = Nkv, .G = a->num_heads / Nkv,
        .H = a->head_size, .Hp = lanes_round(a->head_size), .scale = default_scale(a->scale, a->head_size),
        .q = a->query, .out = a->output, .k = a->present_key, .v = a->present_value,
        .kv_sb = Nkv * a->present_capacity * a->head_size, .kv_sg = a->present_capacity * a->head_size,
        .kv_st = a->head_size, .causal = 1,
    };
    if (a->do_rotary)
        p.rope = (pb_rope){a->cos_cache, a->sin_cache, a->rotary_half, a->rotary_interleaved};
    int64_t max_kv = 0;
    for (int64_t b = 0; b < B; b++) max_kv = a->seqlens_k[b] + 1 > max_kv ? a->seqlens_k[b] + 1 : max_kv;
    attn_sched sch;
    plan_schedule(&p, max_kv, a->exec.num_threads, &sch);
    p.rows_per_item = sch.rows_per_item;
    /* driver arena: kv_len, past_len, positions, then the split partials */
    const size_t head = (sizeof(int64_t) * (size_t)(2 * B + B * S) + 63) / 64 * 64;
    char *arena = (char *)pb_scratch_slot(1, head + sizeof(float) * partial_floats(&p, &sch));
    if (arena == NULL) return pb_fail(PB_ERR_OUT_OF_MEMORY, "%s: out of scratch memory", k);
    int64_t *kv_len = (int64_t *)(void *)arena, *past_len = kv_len + B, *pos = kv_len + 2 * B;
    for (int64_t b = 0; b < B; b++) {
        kv_len[b] = (int64_t)a->seqlens_k[b] + 1;
        past_len[b] = first ? 0 : kv_len[b] - S;
        for (int64_t s = 0; s < S; s++) pos[b * S + s] = past_len[b] + s;
    }
    p.kv_len = kv_len;
    p.q_pos = pos;
    float *partials = (float *)(void *)(arena + head);

    pb_kv_append ap = {
        .dtype = a->dtype, .B = B, .S = S, .Nkv = Nkv, .H = a->head_size, .k_new = a->key, .v_new = a->value,
        .past_k = a->past_key, .past_v = a->past_value, .past_cap = a->past_capacity, .pres_k = a->present_key,
        .pres_v = a->present_value, .pres_cap = a->present_capacity, .past_len = past_len, .pos = pos,
        .copy_past = !shared && !first && a->past_capacity > 0, .zero_rest = !shared, .rope = p.rope,
    };
    copy_while_reading(&p, &ap, sch.rows_per_item);
    /* copy mode: ORT's present holds zeros past the new rows; so does ours */
    int64_t moved = 0;
    for (int64_t b = 0; b < B; b++) moved += (shared ? S : ap.copy_past ? a->present_capacity : a->present_capacity - past_len[b]) * Nkv * 2;
    CHECK(run_append(&ap, a->exec.num_threads, moved, k));
    return run_attention(&p, &sch, partials, k);
}

/* ---- MultiHeadAttention ---- */
int pb_multi_head_attention(const void *args) {
    const char *k = "multi_head_attention";
    if (args == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: args is NULL", k);
    const pb_multi_head_attention_args *a = (const pb_multi_head_attention_args *)args;
    CHECK(pb_check_exec(&a->exec, k));
    CHECK(pb_check_dtype(a->dtype, k));
    if (a->unidirectional != 0 && a->unidirectional != 1)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: unidirectional=%d, expected 0 or 1", k, (int)a->unidirectional);
    if (!isfinite(a->scale) || isnan(a->mask_filter_value))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: scale=%g and mask_filter_value=%g must be numbers", k,
                       (double)a->scale, (double)a->mask_filter_value);
    if (a->batch < 1 || a->q_seq < 1 || a->kv_seq < 1 || a->num_heads < 1 || a->head_size < 1 || a->past_seq < 0)
        return pb_fail(PB_ERR_INVALID_ARGUMENT,
                       "%s: batch=%lld q_seq=%lld kv_seq=%lld num_heads=%lld head_size=%lld must be >= 1, "
                       "past_seq=%lld >= 0",
                       k, (long long)a->batch, (long long)a->q_seq, (long long)a->kv_seq, (long long)a->num_heads,
                       (long long)a->head_size, (long long)a->past_seq);
    if (a->head_size > PB_ATT_MAX_HEAD)
        return pb_fail(PB_ERR_UNSUPPORTED, "%s: head_size=%lld is above %d", k, (long long)a->head_size,
                       PB_ATT_MAX_HEAD);
    const int64_t lim = PB_ATT_LIMIT, B = a->batch, N = a->num_heads, H = a->head_size;
    const int64_t total = a->past_seq + a->kv_seq;
    if (a->past_seq > lim || a->kv_seq > lim || B > lim / N || B * N > lim / (a->q_seq > total ? a->q_seq : total) ||
        B * N * (a->q_seq > total ? a->q_seq : total) > lim / H)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: tensor sizes overflow", k);
    if (a->query == NULL || a->key == NULL || a->value == NULL || a->output == NULL)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: query, key, value and output must not be NULL", k);
    if ((a->present_key == NULL) != (a->present_value == NULL))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: give both present_key and present_value or neither", k);
    if (a->past_seq > 0 && (a->past_key == NULL || a->past_value == NULL || a->present_key == NULL))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: past_seq=%lld needs past_key, past_value, present_key and "
                       "present_value", k, (long long)a->past_seq);
    if (a->present_key != NULL && (a->present_key == a->past_key || a->present_value == a->past_value))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: present and past must be different buffers", k);
    if (a->unidirectional && a->past_seq + a->q_seq > total)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: unidirectional needs past_seq + q_seq <= keys, got %lld + %lld > %lld",
                       k, (long long)a->past_seq, (long long)a->q_seq, (long long)total);
    if (a->unidirectional && a->q_seq > 1 && a->q_seq != a->kv_seq)
        return pb_fail(PB_ERR_UNSUPPORTED,
                       "%s: unidirectional with q_seq=%lld != kv_seq=%lld is not implemented (ORT's causal rule for "
                       "that case is unverified here)",
                       k, (long long)a->q_seq, (long long)a->kv_seq);

    const int64_t S = a->q_seq;
    const size_t head = sizeof(int64_t) * (size_t)(2 * B + B * S), bias = a->key_padding_mask ? (size_t)(B * total) : 0;
    pb_attn_plan p = {
        .dtype = a->dtype, .B = B, .S = S, .Nq = N, .Nkv = N, .G = 1, .H = H, .Hp = lanes_round(H),
        .scale = default_scale(a->scale, H), .q = a->query, .out = a->output,
        .causal = a->unidirectional && S > 1, /* ORT: one query is never masked */
    };
    attn_sched sch;
    plan_schedule(&p, total, a->exec.num_threads, &sch);
    p.rows_per_item = sch.rows_per_item;
    /* driver arena: kv_len, past_len, positions, key bias, then the split partials */
    const size_t off_bias = (head + 63) / 64 * 64, off_part = off_bias + (sizeof(float) * bias + 63) / 64 * 64;
    char *arena = (char *)pb_scratch_slot(1, off_part + sizeof(float) * partial_floats(&p, &sch));
    if (arena == NULL) return pb_fail(PB_ERR_OUT_OF_MEMORY, "%s: out of scratch memory", k);
    int64_t *kv_len = (int64_t *)(void *)arena, *pl = kv_len + B, *pos = kv_len + 2 * B;
    for (int64_t b = 0; b < B; b++) {
        kv_len[b] = total;
        pl[b] = a->past_seq;
        for (int64_t s = 0; s < S; s++) pos[b * S + s] = a->past_seq + s; /* ORT: query s sees keys <= P + s */
    }
    p.kv_len = kv_len;
    p.q_pos = pos;
    if (a->key_padding_mask) {
        float *kb = (float *)(void *)(arena + off_bias);
        for (int64_t i = 0; i < B * total; i++) kb[i] = a->key_padding_mask[i] > 0 ? 0.0f : a->mask_filter_value;
        p.key_bias = kb;
        p.bias_stride = total;
    }
    float *partials = (float *)(void *)(arena + off_part);

    if (a->present_key != NULL) {
        /* present = past ++ new (BNSH); attention then reads present */
        pb_kv_append ap = {
            .dtype = a->dtype, .B = B, .S = a->kv_seq, .Nkv = N, .H = H, .k_new = a->key, .v_new = a->value,
            .past_k = a->past_key, .past_v = a->past_value, .past_cap = a->past_seq, .pres_k = a->present_key,
            .pres_v = a->present_value, .pres_cap = total, .past_len = pl, .copy_past = a->past_seq > 0,
        };
        copy_while_reading(&p, &ap, sch.rows_per_item);
        CHECK(run_append(&ap, a->exec.num_threads, B * N * (ap.copy_past ? total : a->kv_seq) * 2, k));
        p.k = a->present_key;
        p.v = a->present_value;
        p.kv_sb = N * total * H;
        p.kv_sg = total * H;
        p.kv_st = H;
    } else {
        /* keys and values read in place from (B, kv_seq, N, H) */
        p.k = a->key;
        p.v = a->value;
        p.kv_sb = a->kv_seq * N * H;
        p.kv_sg = H;
        p.kv_st = N * H;
    }
    return run_attention(&p, &sch, partials, k);
}
