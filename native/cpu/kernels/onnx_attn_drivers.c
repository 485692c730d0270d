/* onnx_attention.toml: ai.onnx Attention and RotaryEmbedding (opset 23): public entry points (validate, then run the active ISA's microkernels).
 *
 * Attention is planned like the com.microsoft kernels (attention.c): work items are (query
 * block, batch row, KV head[, key split]), each reading its KV head's keys and values once for
 * the G query heads that share them, taken heaviest first from an atomic counter; decode splits
 * the keys flash-decoding style when batch x KV heads cannot keep the threads busy, and a combine
 * step merges the partials. present = past ++ new is written before the attention pass, except
 * that the decode form copies the past rows into present as it reads them (read once). The
 * optional qk_matmul_output switches every item to the full-row form (whole score rows: the
 * output at the requested stage, an exact softmax, Y from the same probabilities). */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "../internal.h"

/* ---- Attention: scheduling ---- */
typedef struct {
    int64_t rows_per_item, n_sblocks, ngroups, nsplit, chunk, items, part_stride;
    int32_t threads;
} oa_sched;

/* full: the full-row form (qk_matmul_output), grouped like the prefill form, never split */
static void plan_schedule(const pb_oattn_plan *p, int64_t max_kv, int32_t max_threads, int full, oa_sched *s) {
    s->rows_per_item = p->G >= PB_ATT_ROWS ? 1 : PB_ATT_ROWS / p->G;
    if (s->rows_per_item > p->S) s->rows_per_item = p->S;
    s->n_sblocks = (p->S + s->rows_per_item - 1) / s->rows_per_item;
    const int64_t heads = p->B * p->Nkv;
    const int prefill = full || !pb_att_decode_form(p->S, s->rows_per_item * p->G);
    if (prefill) {
        int64_t work = p->B * p->Nq * p->S;
        work = work > PB_ATT_LIMIT / (max_kv + 1) ? PB_ATT_LIMIT : work * (max_kv + 1);
        work = work > PB_ATT_LIMIT / p->H ? PB_ATT_LIMIT : work * p->H;
        if (p->causal && !full) work /= 2;
        s->threads = pb_threads_for(max_threads, work, PB_ATT_GRAIN);
    } else {
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
    s->part_stride = s->nsplit > 1 ? (2 * R + R * p->Hp + 15) / 16 * 16 : 0;
}

typedef struct {
    const pb_oattn_plan *p;
    const oa_sched *s;
    pb_oattn_ukernel uk;
    pb_oattn_combine_ukernel combine;
    pb_oattn_full_ukernel full; /* non-NULL: every item takes the full-row form */
    float *partials;
    atomic_llong next;
    atomic_int status;
} oa_ctx;

static void oa_items(void *vctx, int64_t r0, int64_t r1) {
    (void)r0;
    (void)r1;
    oa_ctx *c = (oa_ctx *)vctx;
    const pb_oattn_plan *p = c->p;
    const oa_sched *s = c->s;
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

static void oa_combine_range(void *vctx, int64_t i0, int64_t i1) {
    oa_ctx *c = (oa_ctx *)vctx;
    const pb_oattn_plan *p = c->p;
    for (int64_t i = i0; i < i1; i++) {
        const int rc = c->combine(p, i / p->Nkv, i % p->Nkv, 0, p->S, c->partials + i * c->s->nsplit * c->s->part_stride,
                                  c->s->nsplit, c->s->part_stride);
        if (rc != PB_OK) atomic_store(&c->status, rc);
    }
}

/* ---- Attention: present = past ++ new ---- */
typedef struct {
    const pb_onnx_attention_args *a;
    size_t esz;
    int copy_past;
} oa_append_ctx;

static void oa_append_range(void *vctx, int64_t i0, int64_t i1) {
    const oa_append_ctx *c = (const oa_append_ctx *)vctx;
    const pb_onnx_attention_args *a = c->a;
    const int64_t Nkv = a->kv_num_heads, H = a->head_size, P = a->past_seq, Tn = a->kv_seq, total = P + Tn;
    const size_t e = c->esz, row = e * (size_t)H;
    for (int64_t i = i0; i < i1; i++) { /* i = b * Nkv + g */
        const int64_t b = i / Nkv, g = i % Nkv;
        char *pk = (char *)a->present_key + (size_t)(i * total * H) * e;
        char *pv = (char *)a->present_value + (size_t)(i * total * H) * e;
        if (c->copy_past && P > 0) {
            memcpy(pk, (const char *)a->past_key + (size_t)(i * P * H) * e, row * (size_t)P);
            memcpy(pv, (const char *)a->past_value + (size_t)(i * P * H) * e, row * (size_t)P);
        }
        pk += row * (size_t)P;
        pv += row * (size_t)P;
        if (a->layout == PB_LAYOUT_BNSH) { /* (B, Nkv, T, H): one block per (b, g) */
            memcpy(pk, (const char *)a->key + (size_t)(i * Tn * H) * e, row * (size_t)Tn);
            memcpy(pv, (const char *)a->value + (size_t)(i * Tn * H) * e, row * (size_t)Tn);
        } else { /* (B, T, Nkv*H): a row per token */
            for (int64_t t = 0; t < Tn; t++) {
                const size_t src = (size_t)(((b * Tn + t) * Nkv + g) * H) * e;
                memcpy(pk + row * (size_t)t, (const char *)a->key + src, row);
                memcpy(pv + row * (size_t)t, (const char *)a->value + src, row);
            }
        }
    }
}

static int oa_validate(const pb_onnx_attention_args *a, const char *k) {
    CHECK(pb_check_exec(&a->exec, k));
    CHECK(pb_check_dtype(a->dtype, k));
    if (a->layout != PB_LAYOUT_BSNH && a->layout != PB_LAYOUT_BNSH)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: layout=%d, expected 0 (3-D, BSNH) or 1 (4-D, BNSH)", k,
                       (int)a->layout);
    if (a->is_causal != 0 && a->is_causal != 1)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: is_causal=%d, expected 0 or 1", k, (int)a->is_causal);
    if (a->mask_type < PB_ONNX_MASK_NONE || a->mask_type > PB_ONNX_MASK_FLOAT)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: mask_type=%d, expected 0 (none), 1 (bool) or 2 (float)", k,
                       (int)a->mask_type);
    if (a->qk_output != NULL && (a->qk_matmul_output_mode < 0 || a->qk_matmul_output_mode > 3))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: qk_matmul_output_mode=%d, expected 0..3", k,
                       (int)a->qk_matmul_output_mode);
    if (!isfinite(a->scale) || !isfinite(a->softcap) || a->softcap < 0.0f)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: scale=%g must be finite and softcap=%g finite and >= 0", k,
                       (double)a->scale, (double)a->softcap);
    if (a->qk_output != NULL && a->qk_matmul_output_mode == 0 && a->softcap > 0.0f)
        return pb_fail(PB_ERR_UNSUPPORTED,
                       "%s: qk_matmul_output_mode=0 with softcap=%g is not implemented (the spec's text says the raw "
                       "QK, onnx.reference returns it softcapped)",
                       k, (double)a->softcap);
    if (a->batch < 1 || a->q_seq < 1 || a->kv_seq < 1 || a->q_num_heads < 1 || a->kv_num_heads < 1 ||
        a->head_size < 1 || a->past_seq < 0)
        return pb_fail(PB_ERR_INVALID_ARGUMENT,
                       "%s: batch=%lld q_seq=%lld kv_seq=%lld q_num_heads=%lld kv_num_heads=%lld head_size=%lld "
                       "must be >= 1 and past_seq=%lld >= 0",
                       k, (long long)a->batch, (long long)a->q_seq, (long long)a->kv_seq, (long long)a->q_num_heads,
                       (long long)a->kv_num_heads, (long long)a->head_size, (long long)a->past_seq);
    if (a->q_num_heads % a->kv_num_heads != 0)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: q_num_heads=%lld is not a multiple of kv_num_heads=%lld", k,
                       (long long)a->q_num_heads, (long long)a->kv_num_heads);
    if (a->head_size > PB_ATT_MAX_HEAD)
        return pb_fail(PB_ERR_UNSUPPORTED, "%s: head_size=%lld is above %d", k, (long long)a->head_size, PB_ATT_MAX_HEAD);
    const int64_t lim = PB_ATT_LIMIT, B = a->batch, S = a->q_seq, Nq = a->q_num_heads, H = a->head_size;
    if (a->past_seq > lim || a->kv_seq > lim)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: tensor sizes overflow", k);
    const int64_t total = a->past_seq + a->kv_seq, longest = S > total ? S : total;
    if (B > lim / Nq || B * Nq > lim / longest || B * Nq * longest > lim / H || B * Nq * S > lim / total)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: tensor sizes overflow", k);
    if (a->query == NULL || a->key == NULL || a->value == NULL || a->output == NULL)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: query, key, value and output must not be NULL", k);
    if ((a->past_key == NULL) != (a->past_value == NULL) || (a->present_key == NULL) != (a->present_value == NULL))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: give past_key with past_value and present_key with present_value", k);
    if (a->past_seq > 0 && (a->past_key == NULL || a->present_key == NULL))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: past_seq=%lld needs past_key, past_value, present_key and "
                       "present_value", k, (long long)a->past_seq);
    if (a->past_seq == 0 && a->past_key != NULL)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: past_key given with past_seq=0", k);
    if (a->mask_type != PB_ONNX_MASK_NONE) {
        if (a->attn_mask == NULL)
            return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: mask_type=%d needs attn_mask", k, (int)a->mask_type);
        if (a->mask_sb < 0 || a->mask_sh < 0 || a->mask_ss < 0 || a->mask_len < 1 || a->mask_len > total ||
            a->mask_sb > lim || a->mask_sh > lim || a->mask_ss > lim)
            return pb_fail(PB_ERR_INVALID_ARGUMENT,
                           "%s: mask strides (%lld, %lld, %lld) must be >= 0 and mask_len=%lld in [1, %lld]", k,
                           (long long)a->mask_sb, (long long)a->mask_sh, (long long)a->mask_ss,
                           (long long)a->mask_len, (long long)total);
    } else if (a->attn_mask != NULL) {
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: attn_mask given with mask_type=0", k);
    }
    /* no output may overlap an input or another output */
    const size_t e = pb_dtype_size(a->dtype), Nkv = (size_t)a->kv_num_heads;
    const size_t qb = (size_t)(B * Nq * S * H) * e, kvb = (size_t)(B * a->kv_seq) * Nkv * (size_t)H * e;
    const size_t pastb = (size_t)(B * a->past_seq) * Nkv * (size_t)H * e;
    const size_t presb = a->present_key ? (size_t)(B * total) * Nkv * (size_t)H * e : 0;
    const size_t qkb = a->qk_output ? (size_t)(B * Nq * S * total) * e : 0;
    size_t maskb = 0;
    if (a->mask_type != PB_ONNX_MASK_NONE)
        maskb = (size_t)((B - 1) * a->mask_sb + (Nq - 1) * a->mask_sh + (S - 1) * a->mask_ss + a->mask_len) *
                (a->mask_type == PB_ONNX_MASK_BOOL ? 1 : e);
    const void *ins[6] = {a->query, a->key, a->value, a->past_key, a->past_value, a->attn_mask};
    const size_t inb[6] = {qb, kvb, kvb, pastb, pastb, maskb};
    const char *in_names[6] = {"query", "key", "value", "past_key", "past_value", "attn_mask"};
    void *outs[4] = {a->output, a->present_key, a->present_value, a->qk_output};
    const size_t outb[4] = {qb, presb, presb, qkb};
    const char *out_names[4] = {"output", "present_key", "present_value", "qk_output"};
    for (int o = 0; o < 4; o++) {
        for (int i = 0; i < 6; i++)
            if (pb_overlap(outs[o], outb[o], ins[i], inb[i]))
                return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: %s overlaps %s", k, out_names[o], in_names[i]);
        for (int j = o + 1; j < 4; j++)
            if (pb_overlap(outs[o], outb[o], outs[j], outb[j]))
                return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: %s overlaps %s", k, out_names[o], out_names[j]);
    }
    return PB_OK;
}

int pb_onnx_attention(const void *args) {
    const char *k = "onnx_attention";
    if (args == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: args is NULL", k);
    const pb_onnx_attention_args *a = (const pb_onnx_attention_args *)args;
    CHECK(oa_validate(a, k));
    const int64_t B = a->batch, S = a->q_seq, Nq = a->q_num_heads, Nkv = a->kv_num_heads, H = a->head_size;
    const int64_t P = a->past_seq, Tn = a->kv_seq, total = P + Tn;
    const int bnsh = a->layout == PB_LAYOUT_BNSH;
    const int64_t L = pb_active_isa()->lanes;

    pb_oattn_plan p = {
        .dtype = a->dtype, .B = B, .S = S, .Nq = Nq, .Nkv = Nkv, .G = Nq / Nkv, .H = H, .Hp = (H + L - 1) / L * L,
        .scale = a->scale == 0.0f ? (float)(1.0 / sqrt((double)H)) : a->scale, .softcap = a->softcap,
        .q = a->query, .out = a->output,
        .q_sb = Nq * S * H, .q_sh = bnsh ? S * H : H, .q_ss = bnsh ? H : Nq * H,
        .kv_len = total, .past = P, .causal = a->is_causal,
        .mask = a->attn_mask, .mask_type = a->mask_type,
        .m_sb = a->mask_sb, .m_sh = a->mask_sh, .m_ss = a->mask_ss, .m_len = a->mask_len,
        .qk = a->qk_output, .qk_mode = a->qk_matmul_output_mode,
    };
    p.o_sb = p.q_sb;
    p.o_sh = p.q_sh;
    p.o_ss = p.q_ss;
    if (a->present_key != NULL) { /* attention reads present (B, Nkv, total, H) */
        p.k = a->present_key;
        p.v = a->present_value;
        p.kv_sb = Nkv * total * H;
        p.kv_sg = total * H;
        p.kv_st = H;
    } else { /* keys and values read in place */
        p.k = a->key;
        p.v = a->value;
        p.kv_sb = Nkv * Tn * H;
        p.kv_sg = bnsh ? Tn * H : H;
        p.kv_st = bnsh ? H : Nkv * H;
    }
    int64_t max_kv = total;
    if (a->mask_type != PB_ONNX_MASK_NONE && a->mask_len < max_kv) max_kv = a->mask_len;
    oa_sched sch;
    const int full = a->qk_output != NULL;
    plan_schedule(&p, full ? total : max_kv, a->exec.num_threads, full, &sch);
    p.rows_per_item = sch.rows_per_item;

    /* present: the decode form copies the past rows as it reads them (when it reads them all) */
    oa_append_ctx ap = {.a = a, .esz = pb_dtype_size(a->dtype), .copy_past = P > 0};
    if (a->present_key != NULL) {
        if (P > 0 && !full && pb_att_decode_form(S, sch.rows_per_item * p.G) && max_kv >= P) {
            ap.copy_past = 0;
            p.k_past = a->past_key;
            p.v_past = a->past_value;
            p.k_copy = a->present_key;
            p.v_copy = a->present_value;
            p.past_sb = Nkv * P * H;
            p.past_sg = P * H;
            p.past_st = H;
            p.past_len = P;
        }
        const int64_t moved = 2 * B * Nkv * H * (ap.copy_past ? total : Tn);
        CHECK(pb_parallel_for(pb_threads_for(a->exec.num_threads, moved, PB_ATT_COPY_GRAIN), B * Nkv, oa_append_range,
                              &ap));
    }

    const size_t part = sch.nsplit > 1 ? (size_t)(B * Nkv * sch.nsplit * sch.part_stride) : 0;
    float *partials = NULL;
    if (part) {
        partials = (float *)pb_scratch_slot(1, sizeof(float) * part);
        if (partials == NULL) return pb_fail(PB_ERR_OUT_OF_MEMORY, "%s: out of scratch memory", k);
    }
    const pb_isa *tab = pb_active_isa();
    const int di = pb_dtype_index(a->dtype);
    oa_ctx c = {.p = &p, .s = &sch, .uk = tab->oattention[di], .combine = tab->oattn_combine[di],
                .full = full ? tab->oatt_full[di] : NULL, .partials = partials};
    atomic_init(&c.next, 0);
    atomic_init(&c.status, PB_OK);
    CHECK(pb_parallel_for(sch.threads, sch.threads, oa_items, &c));
    if (atomic_load(&c.status) == PB_OK && sch.nsplit > 1)
        CHECK(pb_parallel_for(sch.threads, B * Nkv, oa_combine_range, &c));
    const int rc = atomic_load(&c.status);
    if (rc != PB_OK) return pb_fail(rc, "%s: out of scratch memory (see PERFBENCH_SCRATCH_MAX_BYTES)", k);
    return PB_OK;
}

/* ---- RotaryEmbedding ---- */
typedef struct {
    pb_orot_ukernel uk;
    const pb_onnx_rotary_embedding_args *a;
} orot_ctx;

static void orot_range(void *ctx, int64_t t0, int64_t t1) {
    orot_ctx *c = (orot_ctx *)ctx;
    c->uk(c->a, t0, t1);
}

int pb_onnx_rotary_embedding(const void *args) {
    const char *k = "onnx_rotary_embedding";
    if (args == NULL) return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: args is NULL", k);
    const pb_onnx_rotary_embedding_args *a = (const pb_onnx_rotary_embedding_args *)args;
    CHECK(pb_check_exec(&a->exec, k));
    CHECK(pb_check_dtype(a->dtype, k));
    if (a->layout != PB_LAYOUT_BSNH && a->layout != PB_LAYOUT_BNSH)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: layout=%d, expected 0 (BSNH) or 1 (BNSH)", k, (int)a->layout);
    if (a->interleaved != 0 && a->interleaved != 1)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: interleaved=%d, expected 0 or 1", k, (int)a->interleaved);
    if (a->batch < 1 || a->seq < 1 || a->num_heads < 1 || a->head_size < 1)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: batch=%lld seq=%lld num_heads=%lld head_size=%lld must be >= 1", k,
                       (long long)a->batch, (long long)a->seq, (long long)a->num_heads, (long long)a->head_size);
    if (a->rotary_dim < 2 || a->rotary_dim % 2 != 0 || a->rotary_dim > a->head_size)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: rotary_dim=%lld must be even and in [2, head_size=%lld]", k,
                       (long long)a->rotary_dim, (long long)a->head_size);
    if (a->position_ids != NULL && a->max_pos < 1)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: max_pos=%lld must be >= 1 with position_ids", k,
                       (long long)a->max_pos);
    if (a->input == NULL || a->output == NULL || a->cos_cache == NULL || a->sin_cache == NULL)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: input, cos_cache, sin_cache and output must not be NULL", k);
    const int64_t lim = INT64_MAX / 8;
    if (a->batch > lim / a->seq || a->batch * a->seq > lim / a->num_heads ||
        a->batch * a->seq * a->num_heads > lim / a->head_size || a->max_pos > lim / a->rotary_dim)
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: tensor sizes overflow", k);
    const size_t e = pb_dtype_size(a->dtype);
    const size_t bytes = (size_t)(a->batch * a->seq * a->num_heads * a->head_size) * e;
    const size_t cache = (size_t)((a->position_ids ? a->max_pos : a->batch * a->seq) * (a->rotary_dim / 2)) * e;
    if (a->input != a->output && pb_overlap(a->input, bytes, a->output, bytes))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: input and output overlap partially (in place needs input == output)",
                       k);
    if (pb_overlap(a->output, bytes, a->cos_cache, cache) || pb_overlap(a->output, bytes, a->sin_cache, cache))
        return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: output overlaps cos_cache or sin_cache", k);
    if (a->position_ids != NULL) {
        if (pb_overlap(a->output, bytes, a->position_ids, sizeof(int64_t) * (size_t)(a->batch * a->seq)))
            return pb_fail(PB_ERR_INVALID_ARGUMENT, "%s: output overlaps position_ids", k);
        for (int64_t i = 0; i < a->batch * a->seq; i++) {
            const int64_t p = a->position_ids[i];
            if (p < 0 || p >= a->max_pos)
                return pb_fail(PB_ERR_INVALID_ARGUMENT,
                               "%s: position_ids[%lld, %lld] = %lld is outside the cos/sin cache rows [0, %lld)", k,
                               (long long)(i / a->seq), (long long)(i % a->seq), (long long)p, (long long)a->max_pos);
        }
    }
    orot_ctx c = {pb_active_isa()->orotary[pb_dtype_index(a->dtype)], a};
    const int64_t elements = a->batch * a->seq * a->num_heads * a->head_size;
    return pb_parallel_for(pb_threads_for(a->exec.num_threads, elements, 32768), a->batch * a->seq, orot_range, &c);
}
