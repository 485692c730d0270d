/* Attention's f32 tile helpers (once per ISA: they do not depend on the element type). The one
 * attention engine (attention.inc.c per dtype, attention_full.inc.c, driven by attention.c) runs
 * GroupQueryAttention, MultiHeadAttention and ai.onnx Attention on them.
 *
 * Everything is computed in f32: an item's queries are converted once (rotated, scaled by
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
 * f32 value rows (an L1 tile in decode, the item's converted rows in prefill). */
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

/* One tile's online-softmax step for one row: sc row (TK wide, a multiple of the lanes; entries
 * >= lim masked) becomes probabilities relative to the new running max; returns the factor the
 * row's output must be rescaled by. Masked scores (-inf: the mask, the causal limit, the tile's
 * tail) never reach the exp's own clamp at -87.3: its results there (~1.2e-38 times a polynomial below 1) are denormal, and
 * denormal results stall the vector units -- with a mask, the exp step cost as much as the QK
 * GEMM. Arguments are clamped at -80 instead (exp = 1.8e-35, a normal number) and the results
 * flushed: (e + 2^-60) - 2^-60 is exactly 0 for e < 2^-84 and exactly e for e >= 2^-35 (between,
 * it moves by at most 2^-84, next to a row maximum of 1). So masked probabilities are exactly
 * zero, and P.V never multiplies denormals either. */
static inline float PB_ISA_FN(att_softmax_step)(float *row, int64_t TK, int64_t lim, float *m, float *l) {
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

#endif /* PB_ATT_F32_HELPERS */
