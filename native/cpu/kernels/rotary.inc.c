/* com.microsoft RotaryEmbedding on head vectors t in [t0, t1) of the (batch, seq, heads) grid.
 * Non-interleaved: out[i] = x[i]c[i] - x[i+h]s[i], out[i+h] = x[i+h]c[i] + x[i]s[i] (h = H/2),
 * one vector of each half per step. Interleaved: out[2k] = x[2k]c[k] - x[2k+1]s[k],
 * out[2k+1] = x[2k+1]c[k] + x[2k]s[k], as x*dup(c) + swap_pairs(x)*(-s, +s, ...). */
static void PB_UK(PB_DT, rotary)(const pb_rotary_embedding_args *a, int64_t t0, int64_t t1) {
    const int64_t L = PB_LANES;
    const int64_t S = a->seq, N = a->num_heads, H = a->head_size, half = H / 2;
    const T *in = (const T *)a->input;
    T *out = (T *)a->output;
    const T *cos_cache = (const T *)a->cos_cache, *sin_cache = (const T *)a->sin_cache;
    for (int64_t t = t0; t < t1; t++) {
        const int64_t b = t / (S * N), s = (t / N) % S, h = t % N;
        const int64_t off = a->layout == PB_LAYOUT_BSNH ? ((b * S + s) * N + h) * H : ((b * N + h) * S + s) * H;
        const int64_t pos = a->position_ids[b * S + s];
        const T *c = cos_cache + pos * half, *sn = sin_cache + pos * half;
        const T *x = in + off;
        T *y = out + off;
        int64_t i = 0;
        if (!a->interleaved) {
            for (; i + L <= half; i += L) {
                vf x1 = T_LOAD(x + i), x2 = T_LOAD(x + half + i);
                vf cv = T_LOAD(c + i), sv = T_LOAD(sn + i);
                T_STORE(y + i, vf_fnmadd(x2, sv, vf_mul(x1, cv)));
                T_STORE(y + half + i, vf_fmadd(x1, sv, vf_mul(x2, cv)));
            }
            if (i < half) {
                const int64_t r = half - i;
                vf x1 = PB_UK(PB_DT, load_part)(x + i, r, 0.0f), x2 = PB_UK(PB_DT, load_part)(x + half + i, r, 0.0f);
                vf cv = PB_UK(PB_DT, load_part)(c + i, r, 0.0f), sv = PB_UK(PB_DT, load_part)(sn + i, r, 0.0f);
                PB_UK(PB_DT, store_part)(y + i, vf_fnmadd(x2, sv, vf_mul(x1, cv)), r);
                PB_UK(PB_DT, store_part)(y + half + i, vf_fmadd(x1, sv, vf_mul(x2, cv)), r);
            }
        } else {
            for (; i + L <= H; i += L) {
                vf xv = T_LOAD(x + i);
                vf cv = T_LOAD_DUP(c + i / 2), sv = vf_negate_even(T_LOAD_DUP(sn + i / 2));
                T_STORE(y + i, vf_fmadd(vf_swap_pairs(xv), sv, vf_mul(xv, cv)));
            }
            if (i < H) {
                const int64_t r = H - i; /* even, < L */
                vf xv = PB_UK(PB_DT, load_part)(x + i, r, 0.0f);
                vf cv = PB_UK(PB_DT, load_dup_part)(c + i / 2, r / 2);
                vf sv = vf_negate_even(PB_UK(PB_DT, load_dup_part)(sn + i / 2, r / 2));
                PB_UK(PB_DT, store_part)(y + i, vf_fmadd(vf_swap_pairs(xv), sv, vf_mul(xv, cv)), r);
            }
        }
    }
}
