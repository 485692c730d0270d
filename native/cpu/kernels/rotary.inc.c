/* com.microsoft RotaryEmbedding on tokens t in [t0, t1) of the (batch, seq) grid, all heads.
 * Non-interleaved: out[i] = x[i]c[i] - x[i+h]s[i], out[i+h] = x[i+h]c[i] + x[i]s[i] (h = H/2).
 * Interleaved: out[2k] = x[2k]c[k] - x[2k+1]s[k], out[2k+1] = x[2k+1]c[k] + x[2k]s[k], computed
 * as x*dup(c) + swap_pairs(x)*(-s, +s, ...).
 * A token's cos/sin row is shared by all its heads: it is converted to f32 once per token, in
 * chunks of PB_ROT_CHUNK entries on the stack (non-interleaved f32 caches are read in place),
 * and every head of the token is rotated with that chunk. */
#ifndef PB_ROT_CHUNK
#define PB_ROT_CHUNK 256
#endif

static void PB_UK(PB_DT, rotary)(const pb_rotary_embedding_args *a, int64_t t0, int64_t t1) {
    const int64_t L = PB_LANES;
    const int64_t S = a->seq, N = a->num_heads, H = a->head_size, half = H / 2;
    const T *in = (const T *)a->input;
    T *out = (T *)a->output;
    /* stride between the heads of one token */
    const int64_t head_stride = a->layout == PB_LAYOUT_BSNH ? H : S * H;
    /* per-token f32 copies of a chunk of the cos/sin row; interleaved: duplicated per pair
     * element, sin with the pair's sign applied (-s, +s), so the head loop needs no shuffles */
    float cbuf[2 * PB_ROT_CHUNK], sbuf[2 * PB_ROT_CHUNK];
    for (int64_t t = t0; t < t1; t++) {
        const int64_t b = t / S, s = t % S;
        const int64_t base = a->layout == PB_LAYOUT_BSNH ? (b * S + s) * N * H : (b * N * S + s) * H;
        const int64_t pos = a->position_ids[t];
        const T *crow = (const T *)a->cos_cache + pos * half, *srow = (const T *)a->sin_cache + pos * half;
        for (int64_t j0 = 0; j0 < half; j0 += PB_ROT_CHUNK) {
            const int64_t m = half - j0 < PB_ROT_CHUNK ? half - j0 : PB_ROT_CHUNK;
            const int64_t mv = m - m % L;
            if (!a->interleaved) {
#if T_IS_F32
                const float *cf = crow + j0, *sf = srow + j0;
#else
                int64_t k = 0;
                for (; k < mv; k += L) {
                    vf_store_f32(cbuf + k, T_LOAD(crow + j0 + k));
                    vf_store_f32(sbuf + k, T_LOAD(srow + j0 + k));
                }
                for (; k < m; k++) {
                    cbuf[k] = T_TO_F32(crow[j0 + k]);
                    sbuf[k] = T_TO_F32(srow[j0 + k]);
                }
                const float *cf = cbuf, *sf = sbuf;
#endif
                for (int64_t h = 0; h < N; h++) {
                    const T *x = in + base + h * head_stride + j0;
                    T *y = out + base + h * head_stride + j0;
                    int64_t i = 0;
                    for (; i < mv; i += L) {
                        vf x1 = T_LOAD(x + i), x2 = T_LOAD(x + half + i);
                        vf cv = vf_load_f32(cf + i), sv = vf_load_f32(sf + i);
                        T_STORE(y + i, vf_fnmadd(x2, sv, vf_mul(x1, cv)));
                        T_STORE(y + half + i, vf_fmadd(x1, sv, vf_mul(x2, cv)));
                    }
                    if (i < m) {
                        const int64_t r = m - i;
                        vf x1 = PB_UK(PB_DT, load_part)(x + i, r, 0.0f);
                        vf x2 = PB_UK(PB_DT, load_part)(x + half + i, r, 0.0f);
                        vf cv = pb_f32_load_part(cf + i, r), sv = pb_f32_load_part(sf + i, r);
                        PB_UK(PB_DT, store_part)(y + i, vf_fnmadd(x2, sv, vf_mul(x1, cv)), r);
                        PB_UK(PB_DT, store_part)(y + half + i, vf_fmadd(x1, sv, vf_mul(x2, cv)), r);
                    }
                }
            } else {
                /* pairs [j0, j0 + m) are elements [2 j0, 2 (j0 + m)) */
                for (int64_t k = 0; k < m; k++) {
                    const float c = T_TO_F32(crow[j0 + k]), sn = T_TO_F32(srow[j0 + k]);
                    cbuf[2 * k] = cbuf[2 * k + 1] = c;
                    sbuf[2 * k] = -sn;
                    sbuf[2 * k + 1] = sn;
                }
                const int64_t e = 2 * m, ev = e - e % L;
                for (int64_t h = 0; h < N; h++) {
                    const T *x = in + base + h * head_stride + 2 * j0;
                    T *y = out + base + h * head_stride + 2 * j0;
                    int64_t i = 0;
                    for (; i < ev; i += L) {
                        vf xv = T_LOAD(x + i);
                        T_STORE(y + i, vf_fmadd(vf_swap_pairs(xv), vf_load_f32(sbuf + i), vf_mul(xv, vf_load_f32(cbuf + i))));
                    }
                    if (i < e) {
                        const int64_t r = e - i; /* even, < L */
                        vf xv = PB_UK(PB_DT, load_part)(x + i, r, 0.0f);
                        vf cv = pb_f32_load_part(cbuf + i, r), sv = pb_f32_load_part(sbuf + i, r);
                        PB_UK(PB_DT, store_part)(y + i, vf_fmadd(vf_swap_pairs(xv), sv, vf_mul(xv, cv)), r);
                    }
                }
            }
        }
    }
}
