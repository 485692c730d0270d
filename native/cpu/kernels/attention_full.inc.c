/* The attention engine's full-row form, per element type (after attention.inc.c): with a QK
 * output (ai.onnx's qk_matmul_output) every item takes this form. */

/* With qk_matmul_output: the full-row form. An item (positions [s0, s1) x the G heads of KV head
 * g) converts its keys once (all of them for modes 0 and 1, which expose the raw scores of every
 * key; else up to the last visible one) and values, then per query block computes every score
 * row whole with the GEMM-form tiles: softcap, the mode 0/1 output, mask and causal bias, the
 * mode 2 output, then an exact two-pass softmax over the whole row (a row with no visible key
 * is zero), the mode 3 output, and Y = P.V from the same probabilities. The score rows of a block
 * (rows x keys floats) are the scratch; ORT materializes them too. */
static int PB_UK(PB_DT, attn_full)(const pb_attn_plan *p, int64_t b, int64_t g, int64_t s0, int64_t s1) {
    const int64_t TK = PB_ATT_TK, L = PB_LANES, H = p->H, Hp = p->Hp, G = p->G, NK = p->kv_len[b];
    const int64_t bsz = p->rows_per_item, Rmax = bsz * G, mode = p->qk_mode;
    const int64_t kv_n = PB_UK(PB_DT, att_kend)(p, b, s1, INT64_MAX); /* keys any row of the item sees */
    const int64_t kq = mode <= 1 ? NK : kv_n;                        /* keys whose scores are needed */
    const int64_t ldk = (kq + TK - 1) / TK * TK + 2 * L, ldf = (NK + L - 1) / L * L;
    const int64_t rw = p->rope.cos ? 2 * p->rope.half : 0;
    const size_t floats = (size_t)(Hp * ldk + (kv_n + 1) * Hp + 3 * Rmax * Hp + Rmax * TK + Rmax * ldf + Hp + 2 * rw);
    float *ws = (float *)pb_scratch(floats * sizeof(float));
    if (ws == NULL) return PB_ERR_OUT_OF_MEMORY;
    float *kt = ws, *vall = kt + Hp * ldk, *qf = vall + (kv_n + 1) * Hp, *o = qf + Rmax * Hp, *ot = o + Rmax * Hp;
    float *sc = ot + Rmax * Hp, *full = sc + Rmax * TK, *tmp = full + Rmax * ldf;
    float *cb = tmp + Hp, *sb = cb + rw;

    PB_UK(PB_DT, att_pack_keys)(p, b, g, 0, kq, kv_n, ldk, kt, vall, tmp);

    T *qk = (T *)p->qk + (b * p->Nq * p->S) * NK;
    for (int64_t q0 = s0; q0 < s1; q0 += bsz) {
        const int64_t q1 = q0 + bsz < s1 ? q0 + bsz : s1, R = (q1 - q0) * G;
        PB_UK(PB_DT, att_queries)(p, b, g, q0, q1, qf, cb, sb);
        /* modes 2 and 3: keys past this block's last visible one are masked, not computed */
        const int64_t bq = mode <= 1 ? kq : PB_UK(PB_DT, att_kend)(p, b, q1, INT64_MAX);
        for (int64_t tt = 0; tt < bq; tt += TK) {
            const int64_t nk = bq - tt < TK ? bq - tt : TK;
            const int64_t ncols = (nk + 2 * L - 1) / (2 * L) * (2 * L);
            PB_UK(PB_DT, att_prefetch_mask)(p, b, g, q0, R, tt, nk);
            PB_ISA_FN(att_scores_packed)(qf, R, Hp, kt + tt, ldk, ncols, sc);
            for (int64_t r = 0; r < R; r++) {
                float *row = sc + r * TK;
                const int64_t s = q0 + r / G, n = g * G + r % G;
                T *dst = qk + (n * p->S + s) * NK + tt;
                if (p->softcap > 0.0f) PB_UK(PB_DT, att_softcap)(row, nk, p->softcap);
                if (mode <= 1) PB_UK(PB_DT, att_store_row)(row, dst, nk, 1.0f);
                PB_UK(PB_DT, att_mask_bias)(p, b, n, s, tt, nk, row);
                if (p->causal)
                    for (int64_t c = p->q_pos[b * p->S + s] + 1 - tt < 0 ? 0 : p->q_pos[b * p->S + s] + 1 - tt; c < nk; c++)
                        row[c] = -INFINITY;
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
                for (int64_t c = 0; c < ldf; c += L) { /* as att_softmax_step: no denormals, masked keys 0 */
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
