/* onnx_attention.toml: ai.onnx Attention and RotaryEmbedding (opset 23): per-dtype microkernels (included once per dtype by isa_body.inc.c).
 *
 * Attention reuses the com.microsoft attention machinery of attention.inc.c (included before
 * this file in the same translation unit): the f32 tile helpers (att_scores_packed,
 * att_scores_dot, att_pv, att_add_tile, att_scale) and the per-dtype row converters
 * (att_load_row, att_store_row). What differs is the item loop around them, and the softmax step
 * (oatt_softmax_step: masked probabilities exactly zero, no denormals):
 *
 * - queries and outputs are strided (q_sb, q_sh, q_ss), so the 3-D (B, S, N*H) and 4-D
 *   (B, N, S, H) layouts are both read and written in place;
 * - scores pass through softcap (c * tanh(x / c)) and then the mask bias of their own
 *   (batch, head, query, key) element (broadcast strides; bool -> -inf, float added), before the
 *   bottom-right causal limit (query s sees keys t <= past + s) and the online softmax;
 * - with qk_matmul_output, items take the full-row form (oatt_full): whole score rows, written at
 *   the requested stage, an exact softmax over them, and Y from the same probabilities.
 *
 * RotaryEmbedding reuses rotary.inc.c's rot_apply (one head vector's pairs) with
 * rotary_dim <= head size (the rest is copied through) and cos/sin rows chosen by position_ids
 * or, without them, by token. */

/* ---- Attention ---- */

#ifndef PB_OATT_F32_HELPERS
#define PB_OATT_F32_HELPERS
/* One tile's online-softmax step for one row, as attention.inc.c's att_softmax_step, except that
 * masked scores (-inf: the mask, the causal limit, the tile's tail) never reach the exp's own
 * clamp at -87.3: its results there (~1.2e-38 times a polynomial below 1) are denormal, and
 * denormal results stall the vector units -- with a mask, the exp step cost as much as the QK
 * GEMM. Arguments are clamped at -80 instead (exp = 1.8e-35, a normal number) and the results
 * flushed: (e + 2^-60) - 2^-60 is exactly 0 for e < 2^-84 and exactly e for e >= 2^-35 (between,
 * it moves by at most 2^-84, next to a row maximum of 1). So masked probabilities are exactly
 * zero, and P.V never multiplies denormals either. */
static inline float PB_ISA_FN(oatt_softmax_step)(float *row, int64_t TK, int64_t lim, float *m, float *l) {
    const int64_t L = PB_LANES;
    if (lim <= 0) {
        memset(row, 0, sizeof(float) * TK);
        return 1.0f;
    }
    for (int64_t c = lim; c < TK; c++) row[c] = -INFINITY;
    vf mx = vf_set1(-INFINITY);
    for (int64_t c = 0; c < TK; c += L) mx = vf_max(mx, vf_load_f32(row + c));
    const float mt = vf_hmax(mx);
    const float m_new = mt > *m ? mt : *m;
    if (m_new == -INFINITY) { /* every visible key masked */
        memset(row, 0, sizeof(float) * TK);
        return 1.0f;
    }
    const float alpha = *m == -INFINITY || *m - m_new < -80.0f ? 0.0f : expf(*m - m_new);
    const vf mv = vf_set1(m_new), lo = vf_set1(-80.0f), k = vf_set1(0x1p-60f);
    vf s = vf_zero();
    for (int64_t c = 0; c < TK; c += L) {
        const vf e = vf_sub(vf_add(PB_VEXP(vf_max(lo, vf_sub(vf_load_f32(row + c), mv))), k), k);
        vf_store_f32(row + c, e);
        s = vf_add(s, e);
    }
    *l = *l * alpha + vf_hsum(s);
    *m = m_new;
    return alpha;
}
#endif

/* Queries of positions [s0, s1) x the G heads of KV head g: converted, scaled, zero-padded */
static void PB_UK(PB_DT, oatt_queries)(const pb_oattn_plan *p, int64_t b, int64_t g, int64_t s0, int64_t s1,
                                       float *qf) {
    const int64_t H = p->H, Hp = p->Hp, G = p->G;
    const T *q = (const T *)p->q + b * p->q_sb;
    for (int64_t si = 0; si < s1 - s0; si++) {
        for (int64_t j = 0; j < G; j++) {
            float *dst = qf + (si * G + j) * Hp;
            PB_UK(PB_DT, att_load_row)(q + (g * G + j) * p->q_sh + (s0 + si) * p->q_ss, dst, H, Hp);
            PB_ISA_FN(att_scale)(dst, Hp, p->scale);
        }
    }
}

/* softcap on n scores: c * tanh(x / c) */
static inline void PB_UK(PB_DT, oatt_softcap)(float *row, int64_t n, float c) {
    const float ic = 1.0f / c;
    for (int64_t i = 0; i < n; i++) row[i] = c * tanhf(row[i] * ic);
}

/* the mask of row (b, head n, position s) on keys [tt, tt + n): bool false -> -inf, float
 * added, keys at or past the mask's length -> -inf */
static inline void PB_UK(PB_DT, oatt_mask_row)(const pb_oattn_plan *p, int64_t b, int64_t n, int64_t s, int64_t tt,
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
static inline void PB_UK(PB_DT, oatt_prefetch_mask)(const pb_oattn_plan *p, int64_t b, int64_t g, int64_t s0, int64_t R,
                                                    int64_t tt, int64_t nk) {
    if (p->mask_type == PB_ONNX_MASK_NONE || tt >= p->m_len) return;
    const size_t esz = p->mask_type == PB_ONNX_MASK_BOOL ? 1 : sizeof(T);
    const int64_t n = p->m_len - tt < nk ? p->m_len - tt : nk;
    const size_t bytes = esz * (size_t)n;
    const char *base = (const char *)p->mask + esz * (size_t)(b * p->m_sb + tt);
    for (int64_t r = 0; r < R; r++) {
        if (r >= p->G && p->m_ss == 0) break; /* rows repeat the first G */
        if (r % p->G && p->m_sh == 0) continue; /* heads share one mask row */
        const char *row = base + esz * (size_t)((p->G * g + r % p->G) * p->m_sh + (s0 + r / p->G) * p->m_ss);
        for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(row + off, 0, 3);
    }
}

/* softcap, mask, causal limit on a score tile, then the online-softmax step per row */
static inline void PB_UK(PB_DT, oatt_tile_softmax)(const pb_oattn_plan *p, int64_t b, int64_t g, int64_t s0, int64_t R,
                                                   int64_t tt, int64_t nk, int64_t tk, float *sc, float *m, float *l,
                                                   float *o) {
    const int64_t G = p->G, Hp = p->Hp;
    for (int64_t r = 0; r < R; r++) {
        float *row = sc + r * PB_ATT_TK;
        const int64_t s = s0 + r / G;
        int64_t lim = nk;
        if (p->causal) {
            const int64_t vis = p->past + s - tt + 1;
            if (vis < lim) lim = vis;
        }
        if (lim > 0) {
            if (p->softcap > 0.0f) PB_UK(PB_DT, oatt_softcap)(row, lim, p->softcap);
            if (p->mask_type != PB_ONNX_MASK_NONE) PB_UK(PB_DT, oatt_mask_row)(p, b, g * G + r % G, s, tt, lim, row);
        }
        const float alpha = PB_ISA_FN(oatt_softmax_step)(row, tk, lim, &m[r], &l[r]);
        if (alpha != 1.0f) PB_ISA_FN(att_scale)(o + r * Hp, Hp, alpha);
    }
}

/* Finished rows of positions [s0, s1) -> the output (T); a row that saw no key is zero */
static void PB_UK(PB_DT, oatt_store_out)(const pb_oattn_plan *p, int64_t b, int64_t g, int64_t s0, int64_t s1,
                                         const float *o, const float *l) {
    const int64_t H = p->H, Hp = p->Hp, G = p->G;
    T *out = (T *)p->out + b * p->o_sb;
    for (int64_t si = 0; si < s1 - s0; si++) {
        for (int64_t j = 0; j < G; j++) {
            const int64_t r = si * G + j;
            PB_UK(PB_DT, att_store_row)(o + r * Hp, out + (g * G + j) * p->o_sh + (s0 + si) * p->o_ss, H,
                                        l[r] > 0.0f ? 1.0f / l[r] : 0.0f);
        }
    }
}

/* keys visible to positions before s1 within [0, t1) end before this */
static inline int64_t PB_UK(PB_DT, oatt_kend)(const pb_oattn_plan *p, int64_t s1, int64_t t1) {
    int64_t kend = p->kv_len < t1 ? p->kv_len : t1;
    if (p->causal && p->past + s1 < kend) kend = p->past + s1; /* last position past + s1 - 1 */
    if (p->mask_type != PB_ONNX_MASK_NONE && p->m_len < kend) kend = p->m_len;
    return kend;
}

/* Prefill form: the item's keys [t0, kend) converted once (keys transposed into kt, values into
 * rows of Hp), then every query block of p->rows_per_item positions runs GEMM-form tiles. */
static int PB_UK(PB_DT, oatt_prefill)(const pb_oattn_plan *p, int64_t b, int64_t g, int64_t s0, int64_t s1, int64_t t0,
                                      int64_t t1) {
    const int64_t TK = PB_ATT_TK, L = PB_LANES, H = p->H, Hp = p->Hp, G = p->G;
    const int64_t bsz = p->rows_per_item, Rmax = bsz * G;
    const int64_t kend = PB_UK(PB_DT, oatt_kend)(p, s1, t1);
    const int64_t nkeys = kend > t0 ? kend - t0 : 0;
    /* whole tiles plus 2 vectors: rows of kt never a multiple of 4 KiB apart (one L1 set) */
    const int64_t ldk = (nkeys + TK - 1) / TK * TK + 2 * L;
    const size_t floats = (size_t)(Hp * ldk + (nkeys + 1) * Hp + 3 * Rmax * Hp + Rmax * TK + 2 * Rmax + Hp);
    float *ws = (float *)pb_scratch(floats * sizeof(float));
    if (ws == NULL) return PB_ERR_OUT_OF_MEMORY;
    float *kt = ws, *vall = kt + Hp * ldk, *qf = vall + (nkeys + 1) * Hp, *o = qf + Rmax * Hp;
    float *ot = o + Rmax * Hp, *sc = ot + Rmax * Hp, *m = sc + Rmax * TK, *l = m + Rmax, *tmp = l + Rmax;

    const T *kb = (const T *)p->k + b * p->kv_sb + g * p->kv_sg;
    const T *vb = (const T *)p->v + b * p->kv_sb + g * p->kv_sg;
    const int64_t st = p->kv_st;
    for (int64_t c = 0; c < nkeys; c++) {
        PB_UK(PB_DT, att_load_row)(kb + (t0 + c) * st, tmp, H, Hp);
        for (int64_t h = 0; h < Hp; h++) kt[h * ldk + c] = tmp[h];
        PB_UK(PB_DT, att_load_row)(vb + (t0 + c) * st, vall + c * Hp, H, Hp);
    }
    for (int64_t h = 0; h < Hp; h++)
        for (int64_t c = nkeys; c < ldk; c++) kt[h * ldk + c] = 0.0f;

    for (int64_t q0 = s0; q0 < s1; q0 += bsz) {
        const int64_t q1 = q0 + bsz < s1 ? q0 + bsz : s1, R = (q1 - q0) * G;
        PB_UK(PB_DT, oatt_queries)(p, b, g, q0, q1, qf);
        for (int64_t r = 0; r < R; r++) {
            m[r] = -INFINITY;
            l[r] = 0.0f;
        }
        memset(o, 0, sizeof(float) * (size_t)(R * Hp));
        memset(ot, 0, sizeof(float) * (size_t)(R * Hp));
        const int64_t bend = PB_UK(PB_DT, oatt_kend)(p, q1, t1);
        for (int64_t tt = t0; tt < bend; tt += TK) {
            const int64_t nk = bend - tt < TK ? bend - tt : TK;
            const int64_t ncols = (nk + 2 * L - 1) / (2 * L) * (2 * L);
            PB_UK(PB_DT, oatt_prefetch_mask)(p, b, g, q0, R, tt, nk);
            PB_ISA_FN(att_scores_packed)(qf, R, Hp, kt + (tt - t0), ldk, ncols, sc);
            PB_UK(PB_DT, oatt_tile_softmax)(p, b, g, q0, R, tt, nk, TK, sc, m, l, o);
            PB_ISA_FN(att_pv)(sc, R, nk, vall + (tt - t0) * Hp, Hp, Hp, ot);
            PB_ISA_FN(att_add_tile)(o, ot, R * Hp);
        }
        PB_UK(PB_DT, oatt_store_out)(p, b, g, q0, q1, o, l);
    }
    return PB_OK;
}

/* Decode form (one position, or few rows): dot-product scores on key rows streamed tile by tile,
 * values through an L1 tile; past rows (if k_past) read from the past cache and copied into
 * present as they are read. */
static int PB_UK(PB_DT, oatt_decode)(const pb_oattn_plan *p, int64_t b, int64_t g, int64_t s0, int64_t s1, int64_t t0,
                                     int64_t t1, float *partial) {
    const int64_t TK = PB_ATT_TK, tk = PB_ATT_TK_DOT, H = p->H, Hp = p->Hp, G = p->G, R = (s1 - s0) * G;
    const int direct = T_IS_F32 && H == Hp;
    const size_t floats = (size_t)(3 * R * Hp + R * TK + 2 * R + 2 * tk * Hp);
    float *ws = (float *)pb_scratch(floats * sizeof(float));
    if (ws == NULL) return PB_ERR_OUT_OF_MEMORY;
    float *qf = ws, *o = qf + R * Hp, *ot = o + R * Hp, *sc = ot + R * Hp, *m = sc + R * TK, *l = m + R;
    float *kt = l + R, *vt = kt + tk * Hp;

    PB_UK(PB_DT, oatt_queries)(p, b, g, s0, s1, qf);
    for (int64_t r = 0; r < R; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    memset(o, 0, sizeof(float) * (size_t)(R * Hp));
    memset(ot, 0, sizeof(float) * (size_t)(R * Hp));
    const int64_t kend = PB_UK(PB_DT, oatt_kend)(p, s1, t1);
    const T *kb = (const T *)p->k + b * p->kv_sb + g * p->kv_sg;
    const T *vb = (const T *)p->v + b * p->kv_sb + g * p->kv_sg;
    const int64_t st = p->kv_st;
    const T *kpa = NULL, *vpa = NULL;
    T *kcp = NULL, *vcp = NULL;
    int64_t alen = 0, pst = 0;
    if (p->k_past) {
        kpa = (const T *)p->k_past + b * p->past_sb + g * p->past_sg;
        vpa = (const T *)p->v_past + b * p->past_sb + g * p->past_sg;
        kcp = (T *)p->k_copy + b * p->kv_sb + g * p->kv_sg;
        vcp = (T *)p->v_copy + b * p->kv_sb + g * p->kv_sg;
        alen = p->past_len;
        pst = p->past_st;
    }
#define PB_KROW(t) ((t) < alen ? kpa + (t) * pst : kb + (t) * st)
#define PB_VROW(t) ((t) < alen ? vpa + (t) * pst : vb + (t) * st)
    const size_t row_bytes = sizeof(T) * (size_t)H;
    for (int64_t tt = t0; tt < kend; tt += tk) {
        const int64_t nk = kend - tt < tk ? kend - tt : tk;
        if (tt + tk < kend) PB_UK(PB_DT, oatt_prefetch_mask)(p, b, g, s0, R, tt + tk, tk);
        for (int64_t t = tt + tk; t < kend && t < tt + 2 * tk; t++) { /* the next tile, requested now */
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
        PB_UK(PB_DT, oatt_tile_softmax)(p, b, g, s0, R, tt, nk, tk, sc, m, l, o);
        for (int64_t c = 0; c < nk; c++) PB_UK(PB_DT, att_load_row)(PB_VROW(tt + c), vt + c * Hp, H, Hp);
        PB_ISA_FN(att_pv)(sc, R, nk, vt, Hp, Hp, ot);
        PB_ISA_FN(att_add_tile)(o, ot, R * Hp);
        for (int64_t t = tt; t < tt + nk && t < alen; t++) { /* just read: into present */
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
    PB_UK(PB_DT, oatt_store_out)(p, b, g, s0, s1, o, l);
    return PB_OK;
}

static int PB_UK(PB_DT, oattention)(const pb_oattn_plan *p, int64_t b, int64_t g, int64_t s0, int64_t s1, int64_t t0,
                                    int64_t t1, float *partial) {
    const int64_t block = s1 - s0 < p->rows_per_item ? s1 - s0 : p->rows_per_item;
    if (partial == NULL && !pb_att_decode_form(p->S, block * p->G))
        return PB_UK(PB_DT, oatt_prefill)(p, b, g, s0, s1, t0, t1);
    return PB_UK(PB_DT, oatt_decode)(p, b, g, s0, s1, t0, t1, partial);
}

static int PB_UK(PB_DT, oattn_combine)(const pb_oattn_plan *p, int64_t b, int64_t g, int64_t s0, int64_t s1,
                                       const float *parts, int64_t nparts, int64_t stride) {
    const int64_t H = p->H, Hp = p->Hp, G = p->G, R = (s1 - s0) * G;
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
        const int64_t si = r / G, j = r % G;
        T *dst = (T *)p->out + b * p->o_sb + (g * G + j) * p->o_sh + (s0 + si) * p->o_ss;
        PB_UK(PB_DT, att_store_row)(acc, dst, H, lsum > 0.0f ? 1.0f / lsum : 0.0f);
    }
    return PB_OK;
}

/* With qk_matmul_output: the full-row form. An item (positions [s0, s1) x the G heads of KV head
 * g) converts its keys once (all of them for modes 0 and 1, which expose the raw scores of every
 * key; else up to the last visible one) and values, then per query block computes every score
 * row whole with the GEMM-form tiles: softcap, the mode 0/1 output, mask and causal bias, the
 * mode 2 output, then an exact two-pass softmax over the whole row (a row with no visible key
 * is zero), the mode 3 output, and Y = P.V from the same probabilities. The score rows of a block
 * (rows x keys floats) are the scratch; ORT materializes them too. */
static int PB_UK(PB_DT, oatt_full)(const pb_oattn_plan *p, int64_t b, int64_t g, int64_t s0, int64_t s1) {
    const int64_t TK = PB_ATT_TK, L = PB_LANES, H = p->H, Hp = p->Hp, G = p->G, NK = p->kv_len;
    const int64_t bsz = p->rows_per_item, Rmax = bsz * G, mode = p->qk_mode;
    const int64_t kv_n = PB_UK(PB_DT, oatt_kend)(p, s1, INT64_MAX); /* keys any row of the item sees */
    const int64_t kq = mode <= 1 ? NK : kv_n;                        /* keys whose scores are needed */
    const int64_t ldk = (kq + TK - 1) / TK * TK + 2 * L, ldf = (NK + L - 1) / L * L;
    const size_t floats = (size_t)(Hp * ldk + (kv_n + 1) * Hp + 3 * Rmax * Hp + Rmax * TK + Rmax * ldf + Hp);
    float *ws = (float *)pb_scratch(floats * sizeof(float));
    if (ws == NULL) return PB_ERR_OUT_OF_MEMORY;
    float *kt = ws, *vall = kt + Hp * ldk, *qf = vall + (kv_n + 1) * Hp, *o = qf + Rmax * Hp, *ot = o + Rmax * Hp;
    float *sc = ot + Rmax * Hp, *full = sc + Rmax * TK, *tmp = full + Rmax * ldf;

    const T *kb = (const T *)p->k + b * p->kv_sb + g * p->kv_sg;
    const T *vb = (const T *)p->v + b * p->kv_sb + g * p->kv_sg;
    const int64_t st = p->kv_st;
    for (int64_t c = 0; c < kq; c++) {
        PB_UK(PB_DT, att_load_row)(kb + c * st, tmp, H, Hp);
        for (int64_t h = 0; h < Hp; h++) kt[h * ldk + c] = tmp[h];
    }
    for (int64_t h = 0; h < Hp; h++)
        for (int64_t c = kq; c < ldk; c++) kt[h * ldk + c] = 0.0f;
    for (int64_t c = 0; c < kv_n; c++) PB_UK(PB_DT, att_load_row)(vb + c * st, vall + c * Hp, H, Hp);

    T *qk = (T *)p->qk + (b * p->Nq * p->S) * NK;
    for (int64_t q0 = s0; q0 < s1; q0 += bsz) {
        const int64_t q1 = q0 + bsz < s1 ? q0 + bsz : s1, R = (q1 - q0) * G;
        PB_UK(PB_DT, oatt_queries)(p, b, g, q0, q1, qf);
        /* modes 2 and 3: keys past this block's last visible one are masked, not computed */
        const int64_t bq = mode <= 1 ? kq : PB_UK(PB_DT, oatt_kend)(p, q1, INT64_MAX);
        for (int64_t tt = 0; tt < bq; tt += TK) {
            const int64_t nk = bq - tt < TK ? bq - tt : TK;
            const int64_t ncols = (nk + 2 * L - 1) / (2 * L) * (2 * L);
            PB_UK(PB_DT, oatt_prefetch_mask)(p, b, g, q0, R, tt, nk);
            PB_ISA_FN(att_scores_packed)(qf, R, Hp, kt + tt, ldk, ncols, sc);
            for (int64_t r = 0; r < R; r++) {
                float *row = sc + r * TK;
                const int64_t s = q0 + r / G, n = g * G + r % G;
                T *dst = qk + (n * p->S + s) * NK + tt;
                if (p->softcap > 0.0f) PB_UK(PB_DT, oatt_softcap)(row, nk, p->softcap);
                if (mode <= 1) PB_UK(PB_DT, att_store_row)(row, dst, nk, 1.0f);
                if (p->mask_type != PB_ONNX_MASK_NONE) PB_UK(PB_DT, oatt_mask_row)(p, b, n, s, tt, nk, row);
                if (p->causal)
                    for (int64_t c = p->past + s + 1 - tt < 0 ? 0 : p->past + s + 1 - tt; c < nk; c++) row[c] = -INFINITY;
                if (mode == 2) PB_UK(PB_DT, att_store_row)(row, dst, nk, 1.0f);
                memcpy(full + r * ldf + tt, row, sizeof(float) * (size_t)nk);
            }
        }
        /* softmax over whole rows; keys past bq are masked (mode 2 writes them as -inf) */
        for (int64_t r = 0; r < R; r++) {
            float *row = full + r * ldf;
            for (int64_t c = bq; c < ldf; c++) row[c] = -INFINITY;
            if (mode == 2 && bq < NK) {
                const int64_t s = q0 + r / G, n = g * G + r % G;
                PB_UK(PB_DT, att_store_row)(row + bq, qk + (n * p->S + s) * NK + bq, NK - bq, 1.0f);
            }
            vf mx = vf_set1(-INFINITY);
            for (int64_t c = 0; c < ldf; c += L) mx = vf_max(mx, vf_load_f32(row + c));
            const float m = vf_hmax(mx);
            float scale = 0.0f;
            if (m == -INFINITY) { /* every key masked: a zero row, as the spec's guard */
                memset(row, 0, sizeof(float) * (size_t)ldf);
            } else {
                const vf mv = vf_set1(m), lo = vf_set1(-80.0f), kf = vf_set1(0x1p-60f);
                vf sum = vf_zero();
                for (int64_t c = 0; c < ldf; c += L) { /* as oatt_softmax_step: no denormals, masked keys 0 */
                    const vf e = vf_sub(vf_add(PB_VEXP(vf_max(lo, vf_sub(vf_load_f32(row + c), mv))), kf), kf);
                    vf_store_f32(row + c, e);
                    sum = vf_add(sum, e);
                }
                scale = 1.0f / vf_hsum(sum);
                PB_ISA_FN(att_scale)(row, ldf, scale);
            }
            if (mode == 3) {
                const int64_t s = q0 + r / G, n = g * G + r % G;
                PB_UK(PB_DT, att_store_row)(row, qk + (n * p->S + s) * NK, NK, 1.0f);
            }
        }
        /* Y = P.V, tile by tile (each tile summed on its own, then added) */
        memset(o, 0, sizeof(float) * (size_t)(R * Hp));
        memset(ot, 0, sizeof(float) * (size_t)(R * Hp));
        const int64_t vq = bq < kv_n ? bq : kv_n;
        for (int64_t tt = 0; tt < vq; tt += TK) {
            const int64_t nk = vq - tt < TK ? vq - tt : TK;
            for (int64_t r = 0; r < R; r++) memcpy(sc + r * TK, full + r * ldf + tt, sizeof(float) * (size_t)nk);
            PB_ISA_FN(att_pv)(sc, R, nk, vall + tt * Hp, Hp, Hp, ot);
            PB_ISA_FN(att_add_tile)(o, ot, R * Hp);
        }
        for (int64_t r = 0; r < R; r++) {
            const int64_t s = q0 + r / G, n = g * G + r % G;
            PB_UK(PB_DT, att_store_row)(o + r * Hp, (T *)p->out + b * p->o_sb + n * p->o_sh + s * p->o_ss, H, 1.0f);
        }
    }
    return PB_OK;
}

/* ---- RotaryEmbedding (opset 23) ---- */

/* Tokens [t0, t1) of the (batch, seq) grid in blocks: each block's cos/sin rows converted to f32
 * once (interleaved: duplicated and signed; non-interleaved f32 caches read in place), then every
 * head of every token rotated with them (rotary.inc.c's rot_apply) and its last
 * head_size - rotary_dim elements copied through. */
static void PB_UK(PB_DT, orotary)(const pb_onnx_rotary_embedding_args *a, int64_t t0, int64_t t1) {
    const int64_t S = a->seq, N = a->num_heads, H = a->head_size, half = a->rotary_dim / 2;
    const int64_t rest = H - 2 * half;
    const int interleaved = a->interleaved;
    const int bsnh = a->layout == PB_LAYOUT_BSNH;
    const T *in = (const T *)a->input;
    T *out = (T *)a->output;
    const int copy_rest = rest > 0 && (const void *)in != (const void *)out;
    const size_t rest_bytes = sizeof(T) * (size_t)rest;
    const T *cos_cache = (const T *)a->cos_cache, *sin_cache = (const T *)a->sin_cache;
    const int64_t w = interleaved ? 2 : 1;
    const int64_t chunk = half * w <= PB_ROT_BUF ? half : PB_ROT_BUF / w;
    int64_t block = PB_ROT_BUF / (chunk * w);
    if (block > PB_ROT_MAX_BLOCK) block = PB_ROT_MAX_BLOCK;
    if (block < 1) block = 1;
    const int in_place = T_IS_F32 && !interleaved;
    float cbuf[PB_ROT_BUF], sbuf[PB_ROT_BUF];
    const float *cptr[PB_ROT_MAX_BLOCK], *sptr[PB_ROT_MAX_BLOCK];

    for (int64_t tb = t0; tb < t1; tb += block) {
        const int64_t nb = t1 - tb < block ? t1 - tb : block;
        for (int64_t j0 = 0; j0 < half; j0 += chunk) {
            const int64_t m = half - j0 < chunk ? half - j0 : chunk;
            for (int64_t k = 0; k < nb; k++) {
                const int64_t row = a->position_ids ? a->position_ids[tb + k] : tb + k;
                const T *crow = cos_cache + row * half + j0, *srow = sin_cache + row * half + j0;
                if (in_place) {
                    cptr[k] = (const float *)(const void *)crow;
                    sptr[k] = (const float *)(const void *)srow;
                    continue;
                }
                float *cb = cbuf + k * m * w, *sb = sbuf + k * m * w;
                if (!interleaved) {
                    int64_t q = 0;
                    for (; q + PB_LANES <= m; q += PB_LANES) {
                        vf_store_f32(cb + q, T_LOAD(crow + q));
                        vf_store_f32(sb + q, T_LOAD(srow + q));
                    }
                    for (; q < m; q++) {
                        cb[q] = T_TO_F32(crow[q]);
                        sb[q] = T_TO_F32(srow[q]);
                    }
                } else {
                    for (int64_t q = 0; q < m; q++) {
                        const float c = T_TO_F32(crow[q]), sn = T_TO_F32(srow[q]);
                        cb[2 * q] = cb[2 * q + 1] = c;
                        sb[2 * q] = -sn;
                        sb[2 * q + 1] = sn;
                    }
                }
                cptr[k] = cb;
                sptr[k] = sb;
            }
            const int last = j0 + m >= half; /* copy the pass-through part once, with the last chunk */
            if (bsnh) {
                for (int64_t k = 0; k < nb; k++) {
                    const int64_t off = (tb + k) * N * H;
                    for (int64_t h = 0; h < N; h++) {
                        PB_UK(PB_DT, rot_apply)(in + off + h * H, out + off + h * H, cptr[k], sptr[k], half, j0, m,
                                                interleaved);
                        if (last && copy_rest) memcpy(out + off + h * H + 2 * half, in + off + h * H + 2 * half, rest_bytes);
                    }
                }
            } else {
                for (int64_t h = 0; h < N; h++) {
                    for (int64_t k = 0; k < nb; k++) {
                        const int64_t t = tb + k, bb = t / S, s = t % S;
                        const int64_t off = ((bb * N + h) * S + s) * H;
                        PB_UK(PB_DT, rot_apply)(in + off, out + off, cptr[k], sptr[k], half, j0, m, interleaved);
                        if (last && copy_rest) memcpy(out + off + 2 * half, in + off + 2 * half, rest_bytes);
                    }
                }
            }
        }
    }
}
