/* Attention microkernels (GroupQueryAttention and MultiHeadAttention share them).
 *
 * One work item = the query rows of a block of query positions x the G query heads that share
 * one KV head, over a range of keys. Keys and values are read once per item for all G heads.
 * Everything is computed in f32: the item's queries are converted once (rotated, scaled by
 * `scale`, zero-padded to Hp = H rounded up to the lane count), then keys go in tiles of
 * PB_ATT_TK with an online softmax (running max m and sum l per row, the output accumulator
 * rescaled when the max grows), so no S x P score matrix ever exists: the scratch is a few
 * tiles.
 *
 * Scores: in the prefill form the item's keys are packed transposed into an f32 panel once
 * and a 6-row (then 4-, then 1-row) x 2-vector outer-product microkernel computes each tile;
 * in the decode form each score is a dot product over the key row, 2 rows x 4 keys at a time,
 * reduced with vf_hsum4 (f32 key rows read in place when the head size fills whole vectors,
 * else converted). Values: O[r] += p[r][c] * V[c] with 6/4/1-row x 2-vector microkernels over
 * f32 value rows (an L1 tile in decode, the item's converted rows in prefill).
 *
 * Masks: keys past the item's range or a causal query's position, and key padding (an
 * additive bias per key, as ORT applies mask_filter_value) -- masked probabilities are exactly
 * zero. A row that sees no key at all yields zeros. */
#ifndef PB_ATT_TK
#define PB_ATT_TK 64        /* keys per tile: a multiple of 2 vectors at every lane count */
#define PB_ATT_TK_DOT 32    /* keys per tile in the dot form: K and V tiles stay in L1 */
#endif
_Static_assert(PB_ATT_TK % (2 * PB_LANES) == 0, "prefill tiles must be whole 2-vector column blocks");
_Static_assert(PB_ATT_TK_DOT % PB_LANES == 0 && PB_ATT_TK_DOT <= PB_ATT_TK,
               "decode tiles must be whole vectors and fit a score row");

/* ---- f32 helpers: defined once per ISA (they do not depend on the element type) ---- */
#ifndef PB_ATT_F32_HELPERS
#define PB_ATT_F32_HELPERS

/* rotate x[0 .. 2*half) in place with a prepared cos/sin row (see att_rope_row) */
static inline void PB_ISA_FN(att_rope_f32)(float *x, const float *cb, const float *sb, int64_t half,
                                          int interleaved) {
    const int64_t L = PB_LANES;
    int64_t i = 0;
    if (!interleaved) {
        for (; i + L <= half; i += L) {
            vf x1 = vf_load_f32(x + i), x2 = vf_load_f32(x + half + i);
            vf c = vf_load_f32(cb + i), s = vf_load_f32(sb + i);
            vf_store_f32(x + i, vf_fnmadd(x2, s, vf_mul(x1, c)));
            vf_store_f32(x + half + i, vf_fmadd(x1, s, vf_mul(x2, c)));
        }
        for (; i < half; i++) {
            const float x1 = x[i], x2 = x[half + i];
            x[i] = x1 * cb[i] - x2 * sb[i];
            x[half + i] = x2 * cb[i] + x1 * sb[i];
        }
    } else {
        const int64_t n = 2 * half;
        for (; i + L <= n; i += L) {
            vf xv = vf_load_f32(x + i);
            vf_store_f32(x + i, vf_fmadd(vf_swap_pairs(xv), vf_load_f32(sb + i), vf_mul(xv, vf_load_f32(cb + i))));
        }
        for (; i < n; i += 2) { /* cb duplicated, sb = (-s, +s) per pair */
            const float x0 = x[i], x1 = x[i + 1];
            x[i] = x0 * cb[i] + x1 * sb[i];
            x[i + 1] = x1 * cb[i + 1] + x0 * sb[i + 1];
        }
    }
}

static inline void PB_ISA_FN(att_scale)(float *x, int64_t n, float a) {
    const vf av = vf_set1(a);
    for (int64_t i = 0; i < n; i += PB_LANES) vf_store_f32(x + i, vf_mul(vf_load_f32(x + i), av));
}

/* sc[r*TK + c] = q[r] . kt[:, c] for all rows, columns [0, ncols) (ncols a multiple of 2L);
 * kt is Hp rows of keys transposed, ldk apart (packed, zero-padded). */
static void PB_ISA_FN(att_scores_packed)(const float *q, int64_t R, int64_t Hp, const float *kt, int64_t ldk,
                                         int64_t ncols, float *sc) {
    const int64_t L = PB_LANES, TK = PB_ATT_TK;
    int64_t r = 0;
    /* 6 rows x 2 vectors: 12 accumulators, 8 loads (2 keys + 6 broadcasts) per 12 multiply-adds */
    for (; r + 6 <= R; r += 6) {
        const float *q0 = q + r * Hp;
        for (int64_t c = 0; c < ncols; c += 2 * L) {
            vf a00 = vf_zero(), a01 = vf_zero(), a10 = vf_zero(), a11 = vf_zero(), a20 = vf_zero(), a21 = vf_zero();
            vf a30 = vf_zero(), a31 = vf_zero(), a40 = vf_zero(), a41 = vf_zero(), a50 = vf_zero(), a51 = vf_zero();
            const float *kc = kt + c;
            for (int64_t h = 0; h < Hp; h++, kc += ldk) {
                const vf k0 = vf_load_f32(kc), k1 = vf_load_f32(kc + L);
                vf w = vf_set1(q0[h]);
                a00 = vf_fmadd(w, k0, a00);
                a01 = vf_fmadd(w, k1, a01);
                w = vf_set1(q0[Hp + h]);
                a10 = vf_fmadd(w, k0, a10);
                a11 = vf_fmadd(w, k1, a11);
                w = vf_set1(q0[2 * Hp + h]);
                a20 = vf_fmadd(w, k0, a20);
                a21 = vf_fmadd(w, k1, a21);
                w = vf_set1(q0[3 * Hp + h]);
                a30 = vf_fmadd(w, k0, a30);
                a31 = vf_fmadd(w, k1, a31);
                w = vf_set1(q0[4 * Hp + h]);
                a40 = vf_fmadd(w, k0, a40);
                a41 = vf_fmadd(w, k1, a41);
                w = vf_set1(q0[5 * Hp + h]);
                a50 = vf_fmadd(w, k0, a50);
                a51 = vf_fmadd(w, k1, a51);
            }
            float *s0 = sc + r * TK + c;
            vf_store_f32(s0, a00);
            vf_store_f32(s0 + L, a01);
            vf_store_f32(s0 + TK, a10);
            vf_store_f32(s0 + TK + L, a11);
            vf_store_f32(s0 + 2 * TK, a20);
            vf_store_f32(s0 + 2 * TK + L, a21);
            vf_store_f32(s0 + 3 * TK, a30);
            vf_store_f32(s0 + 3 * TK + L, a31);
            vf_store_f32(s0 + 4 * TK, a40);
            vf_store_f32(s0 + 4 * TK + L, a41);
            vf_store_f32(s0 + 5 * TK, a50);
            vf_store_f32(s0 + 5 * TK + L, a51);
        }
    }
    for (; r + 4 <= R; r += 4) {
        const float *q0 = q + r * Hp, *q1 = q0 + Hp, *q2 = q1 + Hp, *q3 = q2 + Hp;
        for (int64_t c = 0; c < ncols; c += 2 * L) {
            vf a00 = vf_zero(), a01 = vf_zero(), a10 = vf_zero(), a11 = vf_zero();
            vf a20 = vf_zero(), a21 = vf_zero(), a30 = vf_zero(), a31 = vf_zero();
            const float *kc = kt + c;
            for (int64_t h = 0; h < Hp; h++, kc += ldk) {
                const vf k0 = vf_load_f32(kc), k1 = vf_load_f32(kc + L);
                vf w = vf_set1(q0[h]);
                a00 = vf_fmadd(w, k0, a00);
                a01 = vf_fmadd(w, k1, a01);
                w = vf_set1(q1[h]);
                a10 = vf_fmadd(w, k0, a10);
                a11 = vf_fmadd(w, k1, a11);
                w = vf_set1(q2[h]);
                a20 = vf_fmadd(w, k0, a20);
                a21 = vf_fmadd(w, k1, a21);
                w = vf_set1(q3[h]);
                a30 = vf_fmadd(w, k0, a30);
                a31 = vf_fmadd(w, k1, a31);
            }
            float *s0 = sc + r * TK + c;
            vf_store_f32(s0, a00);
            vf_store_f32(s0 + L, a01);
            vf_store_f32(s0 + TK, a10);
            vf_store_f32(s0 + TK + L, a11);
            vf_store_f32(s0 + 2 * TK, a20);
            vf_store_f32(s0 + 2 * TK + L, a21);
            vf_store_f32(s0 + 3 * TK, a30);
            vf_store_f32(s0 + 3 * TK + L, a31);
        }
    }
    for (; r < R; r++) {
        const float *q0 = q + r * Hp;
        for (int64_t c = 0; c < ncols; c += 2 * L) {
            vf a0 = vf_zero(), a1 = vf_zero();
            const float *kc = kt + c;
            for (int64_t h = 0; h < Hp; h++, kc += ldk) {
                const vf w = vf_set1(q0[h]);
                a0 = vf_fmadd(w, vf_load_f32(kc), a0);
                a1 = vf_fmadd(w, vf_load_f32(kc + L), a1);
            }
            vf_store_f32(sc + r * TK + c, a0);
            vf_store_f32(sc + r * TK + c + L, a1);
        }
    }
}

/* sc[r*TK + c] = q[r] . k[c] for c < nk: key rows of Hp floats, kst apart (decode form) */
static void PB_ISA_FN(att_scores_dot)(const float *q, int64_t R, int64_t Hp, const float *k, int64_t kst, int64_t nk,
                                      float *sc) {
    const int64_t L = PB_LANES, TK = PB_ATT_TK;
    for (int64_t c = 0; c < nk; c += 4) {
        /* keys past nk repeat key c (their scores are discarded) */
        const float *k0 = k + c * kst;
        const float *k1 = c + 1 < nk ? k0 + kst : k0, *k2 = c + 2 < nk ? k0 + 2 * kst : k0;
        const float *k3 = c + 3 < nk ? k0 + 3 * kst : k0;
        const int64_t m = nk - c < 4 ? nk - c : 4;
        float out[8];
        int64_t r = 0;
        for (; r + 2 <= R; r += 2) {
            const float *qa = q + r * Hp, *qb = qa + Hp;
            vf a0 = vf_zero(), a1 = vf_zero(), a2 = vf_zero(), a3 = vf_zero();
            vf b0 = vf_zero(), b1 = vf_zero(), b2 = vf_zero(), b3 = vf_zero();
            for (int64_t h = 0; h < Hp; h += L) {
                const vf x = vf_load_f32(qa + h), y = vf_load_f32(qb + h);
                vf kv = vf_load_f32(k0 + h);
                a0 = vf_fmadd(x, kv, a0);
                b0 = vf_fmadd(y, kv, b0);
                kv = vf_load_f32(k1 + h);
                a1 = vf_fmadd(x, kv, a1);
                b1 = vf_fmadd(y, kv, b1);
                kv = vf_load_f32(k2 + h);
                a2 = vf_fmadd(x, kv, a2);
                b2 = vf_fmadd(y, kv, b2);
                kv = vf_load_f32(k3 + h);
                a3 = vf_fmadd(x, kv, a3);
                b3 = vf_fmadd(y, kv, b3);
            }
            vf_hsum4(a0, a1, a2, a3, out);
            vf_hsum4(b0, b1, b2, b3, out + 4);
            for (int64_t j = 0; j < m; j++) {
                sc[r * TK + c + j] = out[j];
                sc[(r + 1) * TK + c + j] = out[4 + j];
            }
        }
        for (; r < R; r++) {
            const float *qa = q + r * Hp;
            vf a0 = vf_zero(), a1 = vf_zero(), a2 = vf_zero(), a3 = vf_zero();
            for (int64_t h = 0; h < Hp; h += L) {
                const vf x = vf_load_f32(qa + h);
                a0 = vf_fmadd(x, vf_load_f32(k0 + h), a0);
                a1 = vf_fmadd(x, vf_load_f32(k1 + h), a1);
                a2 = vf_fmadd(x, vf_load_f32(k2 + h), a2);
                a3 = vf_fmadd(x, vf_load_f32(k3 + h), a3);
            }
            vf_hsum4(a0, a1, a2, a3, out);
            for (int64_t j = 0; j < m; j++) sc[r * TK + c + j] = out[j];
        }
    }
}

/* o[r] += sum_c p[r*TK + c] * v[c] for c < nk: value rows of Hp floats, vst apart */
static void PB_ISA_FN(att_pv)(const float *p, int64_t R, int64_t nk, const float *v, int64_t vst, int64_t Hp,
                              float *o) {
    const int64_t L = PB_LANES, TK = PB_ATT_TK;
    int64_t r = 0;
    /* 6 rows x 2 vectors (12 accumulators) while they last */
    for (; r + 6 <= R; r += 6) {
        const float *p0 = p + r * TK;
        float *o0 = o + r * Hp;
        int64_t h = 0;
        for (; h + 2 * L <= Hp; h += 2 * L) {
            vf a00 = vf_load_f32(o0 + h), a01 = vf_load_f32(o0 + h + L);
            vf a10 = vf_load_f32(o0 + Hp + h), a11 = vf_load_f32(o0 + Hp + h + L);
            vf a20 = vf_load_f32(o0 + 2 * Hp + h), a21 = vf_load_f32(o0 + 2 * Hp + h + L);
            vf a30 = vf_load_f32(o0 + 3 * Hp + h), a31 = vf_load_f32(o0 + 3 * Hp + h + L);
            vf a40 = vf_load_f32(o0 + 4 * Hp + h), a41 = vf_load_f32(o0 + 4 * Hp + h + L);
            vf a50 = vf_load_f32(o0 + 5 * Hp + h), a51 = vf_load_f32(o0 + 5 * Hp + h + L);
            const float *vc = v + h;
            for (int64_t c = 0; c < nk; c++, vc += vst) {
                const vf v0 = vf_load_f32(vc), v1 = vf_load_f32(vc + L);
                vf w = vf_set1(p0[c]);
                a00 = vf_fmadd(w, v0, a00);
                a01 = vf_fmadd(w, v1, a01);
                w = vf_set1(p0[TK + c]);
                a10 = vf_fmadd(w, v0, a10);
                a11 = vf_fmadd(w, v1, a11);
                w = vf_set1(p0[2 * TK + c]);
                a20 = vf_fmadd(w, v0, a20);
                a21 = vf_fmadd(w, v1, a21);
                w = vf_set1(p0[3 * TK + c]);
                a30 = vf_fmadd(w, v0, a30);
                a31 = vf_fmadd(w, v1, a31);
                w = vf_set1(p0[4 * TK + c]);
                a40 = vf_fmadd(w, v0, a40);
                a41 = vf_fmadd(w, v1, a41);
                w = vf_set1(p0[5 * TK + c]);
                a50 = vf_fmadd(w, v0, a50);
                a51 = vf_fmadd(w, v1, a51);
            }
            vf_store_f32(o0 + h, a00);
            vf_store_f32(o0 + h + L, a01);
            vf_store_f32(o0 + Hp + h, a10);
            vf_store_f32(o0 + Hp + h + L, a11);
            vf_store_f32(o0 + 2 * Hp + h, a20);
            vf_store_f32(o0 + 2 * Hp + h + L, a21);
            vf_store_f32(o0 + 3 * Hp + h, a30);
            vf_store_f32(o0 + 3 * Hp + h + L, a31);
            vf_store_f32(o0 + 4 * Hp + h, a40);
            vf_store_f32(o0 + 4 * Hp + h + L, a41);
            vf_store_f32(o0 + 5 * Hp + h, a50);
            vf_store_f32(o0 + 5 * Hp + h + L, a51);
        }
        for (; h < Hp; h += L) {
            for (int64_t i = 0; i < 6; i++) {
                vf a0 = vf_load_f32(o0 + i * Hp + h);
                const float *vc = v + h;
                for (int64_t c = 0; c < nk; c++, vc += vst) a0 = vf_fmadd(vf_set1(p0[i * TK + c]), vf_load_f32(vc), a0);
                vf_store_f32(o0 + i * Hp + h, a0);
            }
        }
    }
    for (; r + 4 <= R; r += 4) {
        const float *p0 = p + r * TK, *p1 = p0 + TK, *p2 = p1 + TK, *p3 = p2 + TK;
        float *o0 = o + r * Hp, *o1 = o0 + Hp, *o2 = o1 + Hp, *o3 = o2 + Hp;
        int64_t h = 0;
        for (; h + 2 * L <= Hp; h += 2 * L) {
            vf a00 = vf_load_f32(o0 + h), a01 = vf_load_f32(o0 + h + L);
            vf a10 = vf_load_f32(o1 + h), a11 = vf_load_f32(o1 + h + L);
            vf a20 = vf_load_f32(o2 + h), a21 = vf_load_f32(o2 + h + L);
            vf a30 = vf_load_f32(o3 + h), a31 = vf_load_f32(o3 + h + L);
            const float *vc = v + h;
            for (int64_t c = 0; c < nk; c++, vc += vst) {
                const vf v0 = vf_load_f32(vc), v1 = vf_load_f32(vc + L);
                vf w = vf_set1(p0[c]);
                a00 = vf_fmadd(w, v0, a00);
                a01 = vf_fmadd(w, v1, a01);
                w = vf_set1(p1[c]);
                a10 = vf_fmadd(w, v0, a10);
                a11 = vf_fmadd(w, v1, a11);
                w = vf_set1(p2[c]);
                a20 = vf_fmadd(w, v0, a20);
                a21 = vf_fmadd(w, v1, a21);
                w = vf_set1(p3[c]);
                a30 = vf_fmadd(w, v0, a30);
                a31 = vf_fmadd(w, v1, a31);
            }
            vf_store_f32(o0 + h, a00);
            vf_store_f32(o0 + h + L, a01);
            vf_store_f32(o1 + h, a10);
            vf_store_f32(o1 + h + L, a11);
            vf_store_f32(o2 + h, a20);
            vf_store_f32(o2 + h + L, a21);
            vf_store_f32(o3 + h, a30);
            vf_store_f32(o3 + h + L, a31);
        }
        for (; h < Hp; h += L) {
            vf a0 = vf_load_f32(o0 + h), a1 = vf_load_f32(o1 + h), a2 = vf_load_f32(o2 + h), a3 = vf_load_f32(o3 + h);
            const float *vc = v + h;
            for (int64_t c = 0; c < nk; c++, vc += vst) {
                const vf v0 = vf_load_f32(vc);
                a0 = vf_fmadd(vf_set1(p0[c]), v0, a0);
                a1 = vf_fmadd(vf_set1(p1[c]), v0, a1);
                a2 = vf_fmadd(vf_set1(p2[c]), v0, a2);
                a3 = vf_fmadd(vf_set1(p3[c]), v0, a3);
            }
            vf_store_f32(o0 + h, a0);
            vf_store_f32(o1 + h, a1);
            vf_store_f32(o2 + h, a2);
            vf_store_f32(o3 + h, a3);
        }
    }
    for (; r < R; r++) {
        const float *p0 = p + r * TK;
        float *o0 = o + r * Hp;
        int64_t h = 0;
        for (; h + 4 * L <= Hp; h += 4 * L) {
            vf a0 = vf_load_f32(o0 + h), a1 = vf_load_f32(o0 + h + L);
            vf a2 = vf_load_f32(o0 + h + 2 * L), a3 = vf_load_f32(o0 + h + 3 * L);
            const float *vc = v + h;
            for (int64_t c = 0; c < nk; c++, vc += vst) {
                const vf w = vf_set1(p0[c]);
                a0 = vf_fmadd(w, vf_load_f32(vc), a0);
                a1 = vf_fmadd(w, vf_load_f32(vc + L), a1);
                a2 = vf_fmadd(w, vf_load_f32(vc + 2 * L), a2);
                a3 = vf_fmadd(w, vf_load_f32(vc + 3 * L), a3);
            }
            vf_store_f32(o0 + h, a0);
            vf_store_f32(o0 + h + L, a1);
            vf_store_f32(o0 + h + 2 * L, a2);
            vf_store_f32(o0 + h + 3 * L, a3);
        }
        for (; h < Hp; h += L) {
            vf a0 = vf_load_f32(o0 + h);
            const float *vc = v + h;
            for (int64_t c = 0; c < nk; c++, vc += vst) a0 = vf_fmadd(vf_set1(p0[c]), vf_load_f32(vc), a0);
            vf_store_f32(o0 + h, a0);
        }
    }
}

/* o += t over n floats (n a multiple of the lanes), t zeroed for the next tile: each tile's
 * P.V is summed on its own, then added once -- a long decode row then carries ~(tile + tiles)
 * rounding steps per output element instead of one per key (measured: past 4200, one
 * thread, f32: err 1.0e-5 against ORT's 4.6e-6 before) */
static inline void PB_ISA_FN(att_add_tile)(float *o, float *t, int64_t n) {
    const vf z = vf_zero();
    for (int64_t i = 0; i < n; i += PB_LANES) {
        vf_store_f32(o + i, vf_add(vf_load_f32(o + i), vf_load_f32(t + i)));
        vf_store_f32(t + i, z);
    }
}

/* One tile's online-softmax step for one row: sc row (TK wide, a multiple of the lanes;
 * entries >= lim are masked)
 * becomes probabilities relative to the new running max; returns the factor the row's output
 * must be rescaled by. */
static inline float PB_ISA_FN(att_softmax_step)(float *row, int64_t TK, int64_t lim, float *m, float *l) {
    const int64_t L = PB_LANES;
    if (lim <= 0) { /* nothing visible in this tile */
        memset(row, 0, sizeof(float) * TK);
        return 1.0f;
    }
    for (int64_t c = lim; c < TK; c++) row[c] = -INFINITY;
    vf mx = vf_set1(-INFINITY);
    for (int64_t c = 0; c < TK; c += L) mx = vf_max(mx, vf_load_f32(row + c));
    const float mt = vf_hmax(mx);
    const float m_new = mt > *m ? mt : *m;
    if (m_new == -INFINITY) { /* every visible key masked by -inf bias */
        memset(row, 0, sizeof(float) * TK);
        return 1.0f;
    }
    const float alpha = *m == -INFINITY ? 0.0f : expf(*m - m_new);
    const vf mv = vf_set1(m_new);
    vf s = vf_zero();
    for (int64_t c = 0; c < TK; c += L) {
        const vf e = PB_VEXP(vf_sub(vf_load_f32(row + c), mv));
        vf_store_f32(row + c, e);
        s = vf_add(s, e);
    }
    /* masked lanes gave exp(clamped) ~ 1e-38: make them exactly zero */
    float sum = vf_hsum(s);
    for (int64_t c = lim; c < TK; c++) {
        sum -= row[c];
        row[c] = 0.0f;
    }
    *l = *l * alpha + sum;
    *m = m_new;
    return alpha;
}

#endif /* PB_ATT_F32_HELPERS */

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

/* Queries of positions [s0, s1) x the G heads of KV head g: converted, rotated, scaled, padded */
static void PB_UK(PB_DT, att_queries)(const pb_attn_plan *p, int64_t b, int64_t g, int64_t s0, int64_t s1, float *qf,
                                      float *cb, float *sb) {
    const int64_t H = p->H, Hp = p->Hp, G = p->G;
    for (int64_t si = 0; si < s1 - s0; si++) {
        const int64_t bs = b * p->S + s0 + si;
        if (p->rope.cos) PB_UK(PB_DT, att_rope_row)(&p->rope, p->q_pos[bs], cb, sb);
        for (int64_t j = 0; j < G; j++) {
            float *dst = qf + (si * G + j) * Hp;
            PB_UK(PB_DT, att_load_row)((const T *)p->q + (bs * p->Nq + g * G + j) * H, dst, H, Hp);
            if (p->rope.cos) PB_ISA_FN(att_rope_f32)(dst, cb, sb, p->rope.half, p->rope.interleaved);
            PB_ISA_FN(att_scale)(dst, Hp, p->scale);
        }
    }
}

/* Causal limits and padding bias on a score tile, then the online-softmax step per row */
static inline void PB_UK(PB_DT, att_tile_softmax)(const pb_attn_plan *p, int64_t b, int64_t s0, int64_t R, int64_t tt,
                                                  int64_t nk, int64_t tk, float *sc, float *m, float *l, float *o) {
    const int64_t G = p->G, Hp = p->Hp;
    for (int64_t r = 0; r < R; r++) {
        float *row = sc + r * PB_ATT_TK;
        int64_t lim = nk;
        if (p->causal) {
            const int64_t vis = p->q_pos[b * p->S + s0 + r / G] - tt + 1;
            if (vis < lim) lim = vis;
        }
        if (p->key_bias && lim > 0) {
            const float *bias = p->key_bias + b * p->bias_stride + tt;
            for (int64_t c = 0; c < lim; c++) row[c] += bias[c];
        }
        const float alpha = PB_ISA_FN(att_softmax_step)(row, tk, lim, &m[r], &l[r]);
        if (alpha != 1.0f) PB_ISA_FN(att_scale)(o + r * Hp, Hp, alpha);
    }
}

/* Finished rows of positions [s0, s1) -> the output (T) */
static void PB_UK(PB_DT, att_store_out)(const pb_attn_plan *p, int64_t b, int64_t g, int64_t s0, int64_t s1,
                                        const float *o, const float *l) {
    const int64_t H = p->H, Hp = p->Hp, G = p->G;
    for (int64_t si = 0; si < s1 - s0; si++) {
        T *dst = (T *)p->out + ((b * p->S + s0 + si) * p->Nq + g * G) * H;
        for (int64_t j = 0; j < G; j++) {
            const int64_t r = si * G + j;
            PB_UK(PB_DT, att_store_row)(o + r * Hp, dst + j * H, H, l[r] > 0.0f ? 1.0f / l[r] : 0.0f);
        }
    }
}

/* keys visible to positions [s0, s1) of batch row b within [t0, t1) end before this */
static inline int64_t PB_UK(PB_DT, att_kend)(const pb_attn_plan *p, int64_t b, int64_t s1, int64_t t1) {
    int64_t kend = p->kv_len[b] < t1 ? p->kv_len[b] : t1;
    if (p->causal) {
        const int64_t last = p->q_pos[b * p->S + s1 - 1] + 1; /* positions grow with s */
        if (last < kend) kend = last;
    }
    return kend;
}

/* Prefill form: the item's keys [t0, kend) are converted once -- keys transposed into
 * kt (Hp x ldk, zero-padded columns), values into rows of Hp -- then every query block of
 * p->rows_per_item positions in [s0, s1) runs the GEMM-form tiles over them. */
static int PB_UK(PB_DT, att_prefill)(const pb_attn_plan *p, int64_t b, int64_t g, int64_t s0, int64_t s1, int64_t t0,
                                     int64_t t1) {
    const int64_t TK = PB_ATT_TK, L = PB_LANES, H = p->H, Hp = p->Hp, G = p->G;
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
            PB_ISA_FN(att_scores_packed)(qf, R, Hp, kt + (tt - t0), ldk, ncols, sc);
            PB_UK(PB_DT, att_tile_softmax)(p, b, q0, R, tt, nk, TK, sc, m, l, o);
            PB_ISA_FN(att_pv)(sc, R, nk, vall + (tt - t0) * Hp, Hp, Hp, ot);
            PB_ISA_FN(att_add_tile)(o, ot, R * Hp);
        }
        PB_UK(PB_DT, att_store_out)(p, b, g, q0, q1, o, l);
    }
    return PB_OK;
}

/* Decode form (S == 1, or few rows): dot-product scores on key rows streamed tile by tile (f32 rows in
 * place when the head size fills whole vectors, else converted), values through an L1 tile. */
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
        PB_UK(PB_DT, att_tile_softmax)(p, b, s0, R, tt, nk, tk, sc, m, l, o);
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
        T *dst = (T *)p->out + ((b * p->S + s0 + si) * p->Nq + g * G + j) * H;
        PB_UK(PB_DT, att_store_row)(acc, dst, H, lsum > 0.0f ? 1.0f / lsum : 0.0f);
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
    const int64_t rw = a->rope.cos ? 2 * a->rope.half : 0;
    float *buf = NULL, *cb = NULL, *sb = NULL;
    if (rw) {
        buf = (float *)pb_scratch(sizeof(float) * (size_t)(Hp + 2 * rw));
        if (buf == NULL) return PB_ERR_OUT_OF_MEMORY;
        cb = buf + Hp;
        sb = cb + rw;
    }
    for (int64_t s = 0; s < S; s++) {
        const int64_t src = ((b * S + s) * Nkv + g) * H;
        T *kd = pk + (pl + s) * H, *vd = pv + (pl + s) * H;
        if (rw) {
            PB_UK(PB_DT, att_load_row)((const T *)a->k_new + src, buf, H, Hp);
            PB_UK(PB_DT, att_rope_row)(&a->rope, a->pos[b * S + s], cb, sb);
            PB_ISA_FN(att_rope_f32)(buf, cb, sb, a->rope.half, a->rope.interleaved);
            PB_UK(PB_DT, att_store_row)(buf, kd, H, 1.0f);
        } else {
            memcpy(kd, (const T *)a->k_new + src, sizeof(T) * (size_t)H);
        }
        memcpy(vd, (const T *)a->v_new + src, sizeof(T) * (size_t)H);
    }
    return PB_OK;
}
