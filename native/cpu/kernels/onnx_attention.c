/* ai.onnx Attention (opset 23): a front end of the attention engine (attention.c). It validates
 * every argument, fills the plan (3-D or 4-D strided queries and outputs, the mask with its
 * broadcast strides, softcap, the bottom-right causal positions past + s, the optional QK
 * output), writes present = past ++ new (or lets the decode form copy the past rows as it
 * reads them) and runs the engine. */
#include <math.h>
#include <stdint.h>

#include "../internal.h"

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

    pb_attn_plan p = {
        .dtype = a->dtype, .B = B, .S = S, .Nq = Nq, .Nkv = Nkv, .G = Nq / Nkv, .H = H, .Hp = pb_attn_lanes_round(H),
        .scale = pb_attn_default_scale(a->scale, H), .softcap = a->softcap,
        .q = a->query, .out = a->output,
        .q_sb = Nq * S * H, .q_sh = bnsh ? S * H : H, .q_ss = bnsh ? H : Nq * H,
        .causal = a->is_causal,
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
    /* keys at or past the mask's length are masked: never read (the full-row form reads them all) */
    int64_t max_kv = total;
    if (a->mask_type != PB_ONNX_MASK_NONE && a->mask_len < max_kv) max_kv = a->mask_len;
    pb_attn_sched sch;
    pb_attn_schedule(&p, p.qk ? total : max_kv, a->exec.num_threads, &sch);
    /* driver arena: kv_len, past_len, positions (query s of every row at past + s), then the
     * split partials */
    const size_t head = (sizeof(int64_t) * (size_t)(2 * B + B * S) + 63) / 64 * 64;
    char *arena = (char *)pb_scratch_slot(1, head + sizeof(float) * pb_attn_partial_floats(&p, &sch));
    if (arena == NULL) return pb_fail(PB_ERR_OUT_OF_MEMORY, "%s: out of scratch memory", k);
    int64_t *kv_len = (int64_t *)(void *)arena, *past_len = kv_len + B, *pos = kv_len + 2 * B;
    for (int64_t b = 0; b < B; b++) {
        kv_len[b] = total;
        past_len[b] = P;
        for (int64_t s = 0; s < S; s++) pos[b * S + s] = P + s;
    }
    p.kv_len = kv_len;
    p.q_pos = pos;
    float *partials = (float *)(void *)(arena + head);

    if (a->present_key != NULL) {
        pb_kv_append ap = {
            .dtype = a->dtype, .B = B, .S = Tn, .Nkv = Nkv, .H = H, .k_new = a->key, .v_new = a->value,
            .new_sb = Nkv * Tn * H, .new_sg = bnsh ? Tn * H : H, .new_ss = bnsh ? H : Nkv * H,
            .past_k = a->past_key, .past_v = a->past_value, .past_cap = P, .pres_k = a->present_key,
            .pres_v = a->present_value, .pres_cap = total, .past_len = past_len, .copy_past = P > 0,
        };
        /* the decode form copies the past rows as it reads them, when it reads them all */
        pb_attn_copy_while_reading(&p, &ap, max_kv >= P);
        CHECK(pb_attn_append(&ap, a->exec.num_threads, 2 * B * Nkv * (ap.copy_past ? total : Tn), k));
    }
    return pb_attn_run(&p, &sch, partials, k);
}
