/* GroupQueryAttention and MultiHeadAttention (com.microsoft): front ends of the attention engine
 * (attention.c). Each validates every argument (returning a status, never crashing), fills the
 * plan (a BSNH query and output, a BNSH cache; GQA's per-row key counts, positions and fused
 * rotary; MHA's key padding bias), appends the new keys/values to the present cache and runs the
 * engine. */
#include <math.h>
#include <stdint.h>

#include "../internal.h"

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
        .H = a->head_size, .Hp = pb_attn_lanes_round(a->head_size), .scale = pb_attn_default_scale(a->scale, a->head_size),
        .q = a->query, .q_sb = S * a->num_heads * a->head_size, .q_sh = a->head_size, .q_ss = a->num_heads * a->head_size,
        .out = a->output, .o_sb = S * a->num_heads * a->head_size, .o_sh = a->head_size,
        .o_ss = a->num_heads * a->head_size, .k = a->present_key, .v = a->present_value,
        .kv_sb = Nkv * a->present_capacity * a->head_size, .kv_sg = a->present_capacity * a->head_size,
        .kv_st = a->head_size, .causal = 1,
    };
    if (a->do_rotary)
        p.rope = (pb_rope){a->cos_cache, a->sin_cache, a->rotary_half, a->rotary_interleaved};
    int64_t max_kv = 0;
    for (int64_t b = 0; b < B; b++) max_kv = a->seqlens_k[b] + 1 > max_kv ? a->seqlens_k[b] + 1 : max_kv;
    pb_attn_sched sch;
    pb_attn_schedule(&p, max_kv, a->exec.num_threads, &sch);
    /* driver arena: kv_len, past_len, positions, then the split partials */
    const size_t head = (sizeof(int64_t) * (size_t)(2 * B + B * S) + 63) / 64 * 64;
    char *arena = (char *)pb_scratch_slot(1, head + sizeof(float) * pb_attn_partial_floats(&p, &sch));
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
        .new_sb = S * Nkv * a->head_size, .new_sg = a->head_size, .new_ss = Nkv * a->head_size,
        .past_k = a->past_key, .past_v = a->past_value, .past_cap = a->past_capacity, .pres_k = a->present_key,
        .pres_v = a->present_value, .pres_cap = a->present_capacity, .past_len = past_len, .pos = pos,
        .copy_past = !shared && !first && a->past_capacity > 0, .zero_rest = !shared, .rope = p.rope,
    };
    pb_attn_copy_while_reading(&p, &ap, 1);
    /* copy mode: ORT's present holds zeros past the new rows; so does ours */
    int64_t moved = 0;
    for (int64_t b = 0; b < B; b++) moved += (shared ? S : ap.copy_past ? a->present_capacity : a->present_capacity - past_len[b]) * Nkv * 2;
    CHECK(pb_attn_append(&ap, a->exec.num_threads, moved, k));
    return pb_attn_run(&p, &sch, partials, k);
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
        .dtype = a->dtype, .B = B, .S = S, .Nq = N, .Nkv = N, .G = 1, .H = H, .Hp = pb_attn_lanes_round(H),
        .scale = pb_attn_default_scale(a->scale, H), .q = a->query, .q_sb = S * N * H, .q_sh = H, .q_ss = N * H,
        .out = a->output, .o_sb = S * N * H, .o_sh = H, .o_ss = N * H,
        .causal = a->unidirectional && S > 1, /* ORT: one query is never masked */
    };
    pb_attn_sched sch;
    pb_attn_schedule(&p, total, a->exec.num_threads, &sch);
    /* driver arena: kv_len, past_len, positions, key bias, then the split partials */
    const size_t off_bias = (head + 63) / 64 * 64, off_part = off_bias + (sizeof(float) * bias + 63) / 64 * 64;
    char *arena = (char *)pb_scratch_slot(1, off_part + sizeof(float) * pb_attn_partial_floats(&p, &sch));
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
            .new_sb = a->kv_seq * N * H, .new_sg = H, .new_ss = N * H,
            .past_k = a->past_key, .past_v = a->past_value, .past_cap = a->past_seq, .pres_k = a->present_key,
            .pres_v = a->present_value, .pres_cap = total, .past_len = pl, .copy_past = a->past_seq > 0,
        };
        pb_attn_copy_while_reading(&p, &ap, 1);
        CHECK(pb_attn_append(&ap, a->exec.num_threads, B * N * (ap.copy_past ? total : a->kv_seq) * 2, k));
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
    return pb_attn_run(&p, &sch, partials, k);
}
