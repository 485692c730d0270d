/* The attention engine's microkernels, per element type (attention_tiles.inc.c holds the f32
 * tile helpers; attention_full.inc.c the full-row form). GroupQueryAttention,
 * MultiHeadAttention and ai.onnx Attention all run these on one plan (attention.h).
 *
 * One work item = the query rows of a block of query positions x the G query heads that share
 * one KV head, over a range of keys. Keys and values are read once per item for all G heads.
 *
 * Masks, applied to a tile's scores in this order: softcap (c * tanh(x / c)); the mask element
 * of its (batch, head, query, key) (bool false -> -inf, float added; keys at or past the mask's
 * length -> -inf); the key padding bias (ORT's mask_filter_value, added); the causal limit (the
 * query at position p sees keys t <= p) and the item's key range. Masked probabilities are
 * exactly zero (att_softmax_step), and a row that sees no key at all yields zeros. */

/* ---- per element type ---- */

/* src (H elements of T) -> dst (Hp floats, zero-padded) */
static inline void PB_UK(PB_DT, att_load_row)(const T *src, float *dst, int64_t H, int64_t Hp) {
    const int64_t L = PB_LANES;
    int64_t i = 0;
    for (; i + L <= H; i += L) vf_store_f32(dst + i, T_LOAD(src + i));
    if (i < H) {
        vf_store_f32(dst + i, PB_UK(PB_DT, load_part)(src + i, H - i, 0.0f));
        i += L;
    }
    for (; i < Hp; i++) dst[i] = 0.0f;
}

/* the cos/sin row of position pos in the form att_rope_f32 takes */
static inline void PB_UK(PB_DT, att_rope_row)(const pb_rope *rp, int64_t pos, float *cb, float *sb) {
    const T *c = (const T *)rp->cos + pos * rp->half, *s = (const T *)rp->sin + pos * rp->half;
    if (!rp->interleaved) {
        for (int64_t i = 0; i < rp->half; i++) {
            cb[i] = T_TO_F32(c[i]);
            sb[i] = T_TO_F32(s[i]);
        }
    } else {
        for (int64_t i = 0; i < rp->half; i++) {
            const float cv = T_TO_F32(c[i]), sv = T_TO_F32(s[i]);
            cb[2 * i] = cb[2 * i + 1] = cv;
            sb[2 * i] = -sv;
            sb[2 * i + 1] = sv;
        }
    }
}

/* f32 row (H used) -> T, times a */
static inline void PB_UK(PB_DT, att_store_row)(const float *src, T *dst, int64_t H, float a) {
    const int64_t L = PB_LANES;
    const vf av = vf_set1(a);
    int64_t i = 0;
    for (; i + L <= H; i += L) T_STORE(dst + i, vf_mul(vf_load_f32(src + i), av));
    if (i < H) PB_UK(PB_DT, store_part)(dst + i, vf_mul(vf_load_f32(src + i), av), H - i);
}

/* Queries of positions [s0, s1) x the G heads of KV head g: converted, rotated, scaled, padded.
 * cb/sb: 2 * rope.half floats each (unused without rope). */
static void PB_UK(PB_DT, att_queries)(const pb_attn_plan *p, int64_t b, int64_t g, int64_t s0, int64_t s1, float *qf,
                                      float *cb, float *sb) {
    const int64_t H = p->H, Hp = p->Hp, G = p->G;
    const T *q = (const T *)p->q + b * p->q_sb;
    for (int64_t si = 0; si < s1 - s0; si++) {
        if (p->rope.cos) PB_UK(PB_DT, att_rope_row)(&p->rope, p->q_pos[b * p->S + s0 + si], cb, sb);
        for (int64_t j = 0; j < G; j++) {
            float *dst = qf + (si * G + j) * Hp;
            PB_UK(PB_DT, att_load_row)(q + (g * G + j) * p->q_sh + (s0 + si) * p->q_ss, dst, H, Hp);
            if (p->rope.cos) PB_ISA_FN(att_rope_f32)(dst, cb, sb, p->rope.half, p->rope.interleaved);
            PB_ISA_FN(att_scale)(dst, Hp, p->scale);
        }
    }
}

/* softcap on n scores: c * tanh(x / c) */
static inline void PB_UK(PB_DT, att_softcap)(float *row, int64_t n, float c) {
    const float ic = 1.0f / c;
    for (int64_t i = 0; i < n; i++) row[i] = c * tanhf(row[i] * ic);
}

/* the mask of row (b, head n, position s) on keys [tt, tt + cnt): bool false -> -inf, float
 * added, keys at or past the mask's length -> -inf */
static inline void PB_UK(PB_DT, att_mask_row)(const pb_attn_plan *p, int64_t b, int64_t n, int64_t s, int64_t tt,
                                              int64_t cnt, float *row) {
    int64_t inside = p->m_len - tt;
    if (inside > cnt) inside = cnt;
    if (inside < 0) inside = 0;
    const int64_t off = b * p->m_sb + n * p->m_sh + s * p->m_ss + tt;
    if (p->mask_type == PB_ONNX_MASK_BOOL) {
        /* a select the compiler vectorizes (a branch per key mispredicts on a random mask) */
        const uint8_t *m = (const uint8_t *)p->mask + off;
        for (int64_t i = 0; i < inside; i++) row[i] = m[i] ? row[i] : -INFINITY;
    } else {
        const T *m = (const T *)p->mask + off;
        int64_t i = 0;
        for (; i + PB_LANES <= inside; i += PB_LANES) vf_store_f32(row + i, vf_add(vf_load_f32(row + i), T_LOAD(m + i)));
        for (; i < inside; i++) row[i] += T_TO_F32(m[i]);
    }
    for (int64_t i = inside; i < cnt; i++) row[i] = -INFINITY;
}

/* The mask rows of a tile (rows [0, R) of positions from s0 x the G heads of g, keys [tt, tt + nk))
 * requested ahead: each row's segment sits far from the next one (another head or position), so
 * the hardware prefetcher never sees a stream, and the mask loads stalled on memory (a float
 * (B,N,S,T) mask cost a 14/2 x 64 prefill at 128 tokens ~40%). */
static inline void PB_UK(PB_DT, att_prefetch_mask)(const pb_attn_plan *p, int64_t b, int64_t g, int64_t s0, int64_t R,
                                                   int64_t tt, int64_t nk) {
    if (p->mask_type == PB_ONNX_MASK_NONE || tt >= p->m_len) return;
    const size_t esz = p->mask_type == PB_ONNX_MASK_BOOL ? 1 : sizeof(T);
    const int64_t n = p->m_len - tt < nk ? p->m_len - tt : nk;
    const size_t bytes = esz * (size_t)n;
    const char *base = (const char *)p->mask + esz * (size_t)(b * p->m_sb + tt);
    for (int64_t r = 0; r < R; r++) {
        if (r >= p->G && p->m_ss == 0) break;   /* rows repeat the first G */
        if (r % p->G && p->m_sh == 0) continue; /* heads share one mask row */
        const char *row = base + esz * (size_t)((p->G * g + r % p->G) * p->m_sh + (s0 + r / p->G) * p->m_ss);
        for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(row + off, 0, 3);
    }
}

/* The mask element and the key padding bias on one score row of position s, head n, keys
 * [tt, tt + n) */
static inline void PB_UK(PB_DT, att_mask_bias)(const pb_attn_plan *p, int64_t b, int64_t n, int64_t s, int64_t tt,
                                               int64_t cnt, float *row) {
    if (p->mask_type != PB_ONNX_MASK_NONE) PB_UK(PB_DT, att_mask_row)(p, b, n, s, tt, cnt, row);
    if (p->key_bias) {
        const float *bias = p->key_bias + b * p->bias_stride + tt;
        for (int64_t c = 0; c < cnt; c++) row[c] += bias[c];
    }
}

/* Every mask on one score row (keys [tt, tt + lim), already cut to the causal limit): softcap,
 * then the mask element and the key padding bias. */
static inline void PB_UK(PB_DT, att_mask_scores)(const pb_attn_plan *p, int64_t b, int64_t n, int64_t s, int64_t tt,
                                                 int64_t lim, float *row) {
    if (p->softcap > 0.0f) PB_UK(PB_DT, att_softcap)(row, lim, p->softcap);
    PB_UK(PB_DT, att_mask_bias)(p, b, n, s, tt, lim, row);
}

/* The masks and the causal limit on a score tile, then the online-softmax step per row */
static inline void PB_UK(PB_DT, att_tile_softmax)(const pb_attn_plan *p, int64_t b, int64_t g, int64_t s0, int64_t R,
                                                  int64_t tt, int64_t nk, int64_t tk, float *sc, float *m, float *l,
                                                  float *o) {
    const int64_t G = p->G, Hp = p->Hp;
    for (int64_t r = 0; r < R; r++) {
        float *row = sc + r * PB_ATT_TK;
        const int64_t s = s0 + r / G;
        int64_t lim = nk;
        if (p->causal) {
            const int64_t vis = p->q_pos[b * p->S + s] - tt + 1;
            if (vis < lim) lim = vis;
        }
        if (lim > 0) PB_UK(PB_DT, att_mask_scores)(p, b, g * G + r % G, s, tt, lim, row);
        const float alpha = PB_ISA_FN(att_softmax_step)(row, tk, lim, &m[r], &l[r]);
        if (alpha != 1.0f) PB_ISA_FN(att_scale)(o + r * Hp, Hp, alpha);
    }
}

/* Output row r (position s0 + r / G, head g*G + r % G) of an item */
static inline T *PB_UK(PB_DT, att_out_row)(const pb_attn_plan *p, int64_t b, int64_t g, int64_t s0, int64_t r) {
    return (T *)p->out + b * p->o_sb + (g * p->G + r % p->G) * p->o_sh + (s0 + r / p->G) * p->o_ss;
}

/* Finished rows of positions [s0, s1) -> the output (T); a row that saw no key is zero */
static void PB_UK(PB_DT, att_store_out)(const pb_attn_plan *p, int64_t b, int64_t g, int64_t s0, int64_t s1,
                                        const float *o, const float *l) {
    const int64_t R = (s1 - s0) * p->G;
    for (int64_t r = 0; r < R; r++)
        PB_UK(PB_DT, att_store_row)(o + r * p->Hp, PB_UK(PB_DT, att_out_row)(p, b, g, s0, r), p->H,
                                    l[r] > 0.0f ? 1.0f / l[r] : 0.0f);
}

/* keys visible to positions [s0, s1) of batch row b within [t0, t1) end before this */
static inline int64_t PB_UK(PB_DT, att_kend)(const pb_attn_plan *p, int64_t b, int64_t s1, int64_t t1) {
    int64_t kend = p->kv_len[b] < t1 ? p->kv_len[b] : t1;
    if (p->causal) {
        const int64_t last = p->q_pos[b * p->S + s1 - 1] + 1; /* positions grow with s */
        if (last < kend) kend = last;
    }
    if (p->mask_type != PB_ONNX_MASK_NONE && p->m_len < kend) kend = p->m_len;
    return kend;
}

/* Keys [t0, t0 + n) of (b, g) converted: transposed into kt (Hp rows, ldk apart, columns past n
 * zeroed up to ldk) and, for the first nv of them, values into rows of Hp; tmp: Hp floats */
static void PB_UK(PB_DT, att_pack_keys)(const pb_attn_plan *p, int64_t b, int64_t g, int64_t t0, int64_t n, int64_t nv,
                                        int64_t ldk, float *kt, float *vall, float *tmp) {
    const int64_t H = p->H, Hp = p->Hp, st = p->kv_st;
    const T *kb = (const T *)p->k + b * p->kv_sb + g * p->kv_sg;
    const T *vb = (const T *)p->v + b * p->kv_sb + g * p->kv_sg;
    for (int64_t c = 0; c < n; c++) {
        PB_UK(PB_DT, att_load_row)(kb + (t0 + c) * st, tmp, H, Hp);
        for (int64_t h = 0; h < Hp; h++) kt[h * ldk + c] = tmp[h];
    }
    for (int64_t h = 0; h < Hp; h++)
        for (int64_t c = n; c < ldk; c++) kt[h * ldk + c] = 0.0f;
    for (int64_t c = 0; c < nv; c++) PB_UK(PB_DT, att_load_row)(vb + (t0 + c) * st, vall + c * Hp, H, Hp);
}

/* Prefill form: the item's keys [t0, kend) are converted once -- keys transposed into
 * kt (Hp x ldk, zero-padded columns), values into rows of Hp -- then every query block of
 * p->rows_per_item positions in [s0, s1) runs the GEMM-form tiles over them. */
static int PB_UK(PB_DT, att_prefill)(const pb_attn_plan *p, int64_t b, int64_t g, int64_t s0, int64_t s1, int64_t t0,
                                     int64_t t1) {
    const int64_t TK = PB_ATT_TK, L = PB_LANES, Hp = p->Hp, G = p->G;
    const int64_t bsz = p->rows_per_item, Rmax = bsz * G;
    const int64_t kend = PB_UK(PB_DT, att_kend)(p, b, s1, t1);
    const int64_t nkeys = kend > t0 ? kend - t0 : 0;
    /* whole tiles plus 2 vectors: rows of kt never a multiple of 4 KiB apart (one L1 set) */
    const int64_t ldk = (nkeys + TK - 1) / TK * TK + 2 * L;
    const int64_t rw = p->rope.cos ? 2 * p->rope.half : 0;
    const size_t floats = (size_t)(Hp * ldk + (nkeys + 1) * Hp + 3 * Rmax * Hp + Rmax * TK + 2 * Rmax + 2 * rw + Hp);
    float *ws = (float *)pb_scratch(floats * sizeof(float));
    if (ws == NULL) return PB_ERR_OUT_OF_MEMORY;
    float *kt = ws, *vall = kt + Hp * ldk, *qf = vall + (nkeys + 1) * Hp, *o = qf + Rmax * Hp;
    float *ot = o + Rmax * Hp, *sc = ot + Rmax * Hp, *m = sc + Rmax * TK, *l = m + Rmax, *cb = l + Rmax, *sb = cb + rw;
    float *tmp = sb + rw;
    PB_UK(PB_DT, att_pack_keys)(p, b, g, t0, nkeys, nkeys, ldk, kt, vall, tmp);

    for (int64_t q0 = s0; q0 < s1; q0 += bsz) {
        const int64_t q1 = q0 + bsz < s1 ? q0 + bsz : s1, R = (q1 - q0) * G;
        PB_UK(PB_DT, att_queries)(p, b, g, q0, q1, qf, cb, sb);
        for (int64_t r = 0; r < R; r++) {
            m[r] = -INFINITY;
            l[r] = 0.0f;
        }
        memset(o, 0, sizeof(float) * (size_t)(R * Hp));
        memset(ot, 0, sizeof(float) * (size_t)(R * Hp));
        const int64_t bend = PB_UK(PB_DT, att_kend)(p, b, q1, t1);
        for (int64_t tt = t0; tt < bend; tt += TK) {
            const int64_t nk = bend - tt < TK ? bend - tt : TK;
            const int64_t ncols = (nk + 2 * L - 1) / (2 * L) * (2 * L);
            PB_UK(PB_DT, att_prefetch_mask)(p, b, g, q0, R, tt, nk);
            PB_ISA_FN(att_scores_packed)(qf, R, Hp, kt + (tt - t0), ldk, ncols, sc);
            PB_UK(PB_DT, att_tile_softmax)(p, b, g, q0, R, tt, nk, TK, sc, m, l, o);
            PB_ISA_FN(att_pv)(sc, R, nk, vall + (tt - t0) * Hp, Hp, Hp, ot);
            PB_ISA_FN(att_add_tile)(o, ot, R * Hp);
        }
        PB_UK(PB_DT, att_store_out)(p, b, g, q0, q1, o, l);
    }
    return PB_OK;
}

/* Decode form (S == 1, or few rows): dot-product scores on key rows streamed tile by tile (f32 rows in
 * place when the head size fills whole vectors, else converted), values through an L1 tile; past
 * rows (if k_past) read from the past cache and copied into present as they are read. */
static int PB_UK(PB_DT, att_decode)(const pb_attn_plan *p, int64_t b, int64_t g, int64_t s0, int64_t s1, int64_t t0,
                                    int64_t t1, float *partial) {
    const int64_t TK = PB_ATT_TK, tk = PB_ATT_TK_DOT, H = p->H, Hp = p->Hp, G = p->G, R = (s1 - s0) * G;
    const int direct = T_IS_F32 && H == Hp;
    const int64_t rw = p->rope.cos ? 2 * p->rope.half : 0;
    const size_t floats = (size_t)(3 * R * Hp + R * TK + 2 * R + 2 * tk * Hp + 2 * rw);
    float *ws = (float *)pb_scratch(floats * sizeof(float));
    if (ws == NULL) return PB_ERR_OUT_OF_MEMORY;
    float *qf = ws, *o = qf + R * Hp, *ot = o + R * Hp, *sc = ot + R * Hp, *m = sc + R * TK, *l = m + R;
    float *kt = l + R, *vt = kt + tk * Hp, *cb = vt + tk * Hp, *sb = cb + rw;

    PB_UK(PB_DT, att_queries)(p, b, g, s0, s1, qf, cb, sb);
    for (int64_t r = 0; r < R; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    memset(o, 0, sizeof(float) * (size_t)(R * Hp));
    memset(ot, 0, sizeof(float) * (size_t)(R * Hp));
    const int64_t kend = PB_UK(PB_DT, att_kend)(p, b, s1, t1);
    const T *kb = (const T *)p->k + b * p->kv_sb + g * p->kv_sg;
    const T *vb = (const T *)p->v + b * p->kv_sb + g * p->kv_sg;
    const int64_t st = p->kv_st;
    /* rows below alen come from the past cache and are copied into the present one */
    const T *kpa = NULL, *vpa = NULL;
    T *kcp = NULL, *vcp = NULL;
    int64_t alen = 0, pst = 0;
    if (p->k_past) {
        kpa = (const T *)p->k_past + b * p->past_sb + g * p->past_sg;
        vpa = (const T *)p->v_past + b * p->past_sb + g * p->past_sg;
        kcp = (T *)p->k_copy + b * p->kv_sb + g * p->kv_sg;
        vcp = (T *)p->v_copy + b * p->kv_sb + g * p->kv_sg;
        alen = p->past_len[b];
        pst = p->past_st;
    }
#define PB_KROW(t) ((t) < alen ? kpa + (t) * pst : kb + (t) * st)
#define PB_VROW(t) ((t) < alen ? vpa + (t) * pst : vb + (t) * st)
    const size_t row_bytes = sizeof(T) * (size_t)H;
    for (int64_t tt = t0; tt < kend; tt += tk) {
        const int64_t nk = kend - tt < tk ? kend - tt : tk;
        if (tt + tk < kend) PB_UK(PB_DT, att_prefetch_mask)(p, b, g, s0, R, tt + tk, tk);
        /* the next tile's rows are requested now: the hardware prefetcher alone leaves this
         * loop waiting on L3/DRAM latency row by row (decode reads each row once) */
        for (int64_t t = tt + tk; t < kend && t < tt + 2 * tk; t++) {
            const char *kp = (const char *)PB_KROW(t), *vp = (const char *)PB_VROW(t);
            for (size_t off = 0; off < row_bytes; off += 64) {
                __builtin_prefetch(kp + off, 0, 3);
                __builtin_prefetch(vp + off, 0, 3);
            }
        }
        const int one_source = tt + nk <= alen || tt >= alen;
        if (direct && one_source) {
            const int from_past = tt < alen;
            PB_ISA_FN(att_scores_dot)(qf, R, Hp, (const float *)(const void *)PB_KROW(tt), from_past ? pst : st, nk, sc);
        } else {
            for (int64_t c = 0; c < nk; c++) PB_UK(PB_DT, att_load_row)(PB_KROW(tt + c), kt + c * Hp, H, Hp);
            PB_ISA_FN(att_scores_dot)(qf, R, Hp, kt, Hp, nk, sc);
        }
        PB_UK(PB_DT, att_tile_softmax)(p, b, g, s0, R, tt, nk, tk, sc, m, l, o);
        /* values through an L1 tile: the PV loop walks it h-chunk by h-chunk; rows read in place
         * straight from L3/DRAM were slower (GQA decode 32/8 x 128, past 1024, f32, 1 thread:
         * 1.15 ms in place vs 0.79 ms through the tile, a noisy A/B) */
        for (int64_t c = 0; c < nk; c++) PB_UK(PB_DT, att_load_row)(PB_VROW(tt + c), vt + c * Hp, H, Hp);
        PB_ISA_FN(att_pv)(sc, R, nk, vt, Hp, Hp, ot);
        PB_ISA_FN(att_add_tile)(o, ot, R * Hp);
        /* the tile's past rows, just read (in L1/L2), go to the present cache */
        for (int64_t t = tt; t < tt + nk && t < alen; t++) {
            memcpy(kcp + t * st, kpa + t * pst, row_bytes);
            memcpy(vcp + t * st, vpa + t * pst, row_bytes);
        }
    }
#undef PB_KROW
#undef PB_VROW
    if (partial) {
        memcpy(partial, m, sizeof(float) * (size_t)R);
        memcpy(partial + R, l, sizeof(float) * (size_t)R);
        memcpy(partial + 2 * R, o, sizeof(float) * (size_t)(R * Hp));
        return PB_OK;
    }
    PB_UK(PB_DT, att_store_out)(p, b, g, s0, s1, o, l);
    return PB_OK;
}

/* One work item: positions [s0, s1) (one block of rows_per_item, or several in the prefill
 * form) x the G heads of KV head g, keys [t0, t1). */
static int PB_UK(PB_DT, attention)(const pb_attn_plan *p, int64_t b, int64_t g, int64_t s0, int64_t s1, int64_t t0,
                                   int64_t t1, float *partial) {
    const int64_t block = s1 - s0 < p->rows_per_item ? s1 - s0 : p->rows_per_item;
    if (partial == NULL && !pb_att_decode_form(p->S, block * p->G))
        return PB_UK(PB_DT, att_prefill)(p, b, g, s0, s1, t0, t1);
    return PB_UK(PB_DT, att_decode)(p, b, g, s0, s1, t0, t1, partial);
}

/* Merge nparts partial results (part i at parts + i*stride, as attention() wrote them for
 * the same rows) into the output. */
static int PB_UK(PB_DT, attn_combine)(const pb_attn_plan *p, int64_t b, int64_t g, int64_t s0, int64_t s1,
                                      const float *parts, int64_t nparts, int64_t stride) {
    const int64_t Hp = p->Hp, R = (s1 - s0) * p->G;
    float *acc = (float *)pb_scratch(sizeof(float) * (size_t)Hp);
    if (acc == NULL) return PB_ERR_OUT_OF_MEMORY;
    for (int64_t r = 0; r < R; r++) {
        float M = -INFINITY;
        for (int64_t i = 0; i < nparts; i++) {
            const float mi = parts[i * stride + r];
            if (mi > M) M = mi;
        }
        memset(acc, 0, sizeof(float) * (size_t)Hp);
        float lsum = 0.0f;
        if (M != -INFINITY) {
            for (int64_t i = 0; i < nparts; i++) {
                const float *pi = parts + i * stride;
                if (pi[r] == -INFINITY) continue;
                const float w = expf(pi[r] - M);
                lsum += w * pi[R + r];
                const vf wv = vf_set1(w);
                const float *oi = pi + 2 * R + r * Hp;
                for (int64_t h = 0; h < Hp; h += PB_LANES)
                    vf_store_f32(acc + h, vf_fmadd(wv, vf_load_f32(oi + h), vf_load_f32(acc + h)));
            }
        }
        PB_UK(PB_DT, att_store_row)(acc, PB_UK(PB_DT, att_out_row)(p, b, g, s0, r), p->H,
                                    lsum > 0.0f ? 1.0f / lsum : 0.0f);
    }
    return PB_OK;
}

/* New keys (rotated) and values of batch row b, KV head g into the present cache. */
static int PB_UK(PB_DT, kv_append)(const pb_kv_append *a, int64_t b, int64_t g) {
    const int64_t H = a->H, S = a->S, Nkv = a->Nkv, pl = a->past_len[b];
    const int64_t Hp = (H + PB_LANES - 1) / PB_LANES * PB_LANES;
    T *pk = (T *)a->pres_k + (b * Nkv + g) * a->pres_cap * H;
    T *pv = (T *)a->pres_v + (b * Nkv + g) * a->pres_cap * H;
    if (a->copy_past && pl > 0) {
        memcpy(pk, (const T *)a->past_k + (b * Nkv + g) * a->past_cap * H, sizeof(T) * (size_t)(pl * H));
        memcpy(pv, (const T *)a->past_v + (b * Nkv + g) * a->past_cap * H, sizeof(T) * (size_t)(pl * H));
    }
    if (a->zero_rest && pl + S < a->pres_cap) {
        memset(pk + (pl + S) * H, 0, sizeof(T) * (size_t)((a->pres_cap - pl - S) * H));
        memset(pv + (pl + S) * H, 0, sizeof(T) * (size_t)((a->pres_cap - pl - S) * H));
    }
    const T *kn = (const T *)a->k_new + b * a->new_sb + g * a->new_sg;
    const T *vn = (const T *)a->v_new + b * a->new_sb + g * a->new_sg;
    const int64_t rw = a->rope.cos ? 2 * a->rope.half : 0;
    if (!rw && a->new_ss == H) { /* (B, Nkv, S, H) new rows: one block each */
        memcpy(pk + pl * H, kn, sizeof(T) * (size_t)(S * H));
        memcpy(pv + pl * H, vn, sizeof(T) * (size_t)(S * H));
        return PB_OK;
    }
    float *buf = NULL, *cb = NULL, *sb = NULL;
    if (rw) {
        buf = (float *)pb_scratch(sizeof(float) * (size_t)(Hp + 2 * rw));
        if (buf == NULL) return PB_ERR_OUT_OF_MEMORY;
        cb = buf + Hp;
        sb = cb + rw;
    }
    for (int64_t s = 0; s < S; s++) {
        const T *ks = kn + s * a->new_ss;
        T *kd = pk + (pl + s) * H, *vd = pv + (pl + s) * H;
        if (rw) {
            PB_UK(PB_DT, att_load_row)(ks, buf, H, Hp);
            PB_UK(PB_DT, att_rope_row)(&a->rope, a->pos[b * S + s], cb, sb);
            PB_ISA_FN(att_rope_f32)(buf, cb, sb, a->rope.half, a->rope.interleaved);
            PB_UK(PB_DT, att_store_row)(buf, kd, H, 1.0f);
        } else {
            memcpy(kd, ks, sizeof(T) * (size_t)H);
        }
        memcpy(vd, vn + s * a->new_ss, sizeof(T) * (size_t)H);
    }
    return PB_OK;
}
