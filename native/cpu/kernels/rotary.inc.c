/* RotaryEmbedding (com.microsoft and ai.onnx, one microkernel) on tokens t in [t0, t1) of the
 * (batch, seq) grid, all heads; the first 2h elements of a head rotate, the rest pass through.
 * Non-interleaved: out[i] = x[i]c[i] - x[i+h]s[i], out[i+h] = x[i+h]c[i] + x[i]s[i].
 * Interleaved: out[2k] = x[2k]c[k] - x[2k+1]s[k], out[2k+1] = x[2k+1]c[k] + x[2k]s[k], computed
 * as x*cc + swap_pairs(x)*ss with cc = (c0,c0,c1,c1,...) and ss = (-s0,+s0,-s1,+s1,...).
 *
 * Tokens go in blocks: the cos/sin rows of a block's tokens (position_ids[t], or t itself) are converted to f32 once into
 * stack buffers (interleaved: already duplicated and signed; non-interleaved f32 caches are
 * read in place), then every head of every token in the block is rotated with them. Heads
 * and tokens are visited in memory order: token-major for (B,S,N*H), head-major for
 * (B,N,S,H), so each pass streams through contiguous rows. Half-rows longer than the buffer
 * are processed in chunks of pairs. */
#ifndef PB_ROT_BUF
#define PB_ROT_BUF 4096      /* floats per stack buffer (cos and sin each) */
#define PB_ROT_MAX_BLOCK 128 /* tokens per block */
#endif

/* pairs [j0, j0 + m) of one head vector x -> y; cf/sf hold this token's chunk in f32 */
static inline void PB_UK(PB_DT, rot_apply)(const T *x, T *y, const float *cf, const float *sf, int64_t half,
                                           int64_t j0, int64_t m, int interleaved) {
    const int64_t L = PB_LANES;
    int64_t i = 0;
    if (!interleaved) {
        const int64_t mv = m - m % L;
        x += j0;
        y += j0;
        for (; i < mv; i += L) {
            vf x1 = T_LOAD(x + i), x2 = T_LOAD(x + half + i);
            vf cv = vf_load_f32(cf + i), sv = vf_load_f32(sf + i);
            T_STORE(y + i, vf_fnmadd(x2, sv, vf_mul(x1, cv)));
            T_STORE(y + half + i, vf_fmadd(x1, sv, vf_mul(x2, cv)));
        }
        if (i < m) {
            const int64_t r = m - i;
            vf x1 = PB_UK(PB_DT, load_part)(x + i, r, 0.0f), x2 = PB_UK(PB_DT, load_part)(x + half + i, r, 0.0f);
            vf cv = pb_f32_load_part(cf + i, r), sv = pb_f32_load_part(sf + i, r);
            PB_UK(PB_DT, store_part)(y + i, vf_fnmadd(x2, sv, vf_mul(x1, cv)), r);
            PB_UK(PB_DT, store_part)(y + half + i, vf_fmadd(x1, sv, vf_mul(x2, cv)), r);
        }
    } else {
        const int64_t e = 2 * m, ev = e - e % L; /* elements [2 j0, 2 (j0 + m)) */
        x += 2 * j0;
        y += 2 * j0;
        for (; i < ev; i += L) {
            vf xv = T_LOAD(x + i);
            T_STORE(y + i, vf_fmadd(vf_swap_pairs(xv), vf_load_f32(sf + i), vf_mul(xv, vf_load_f32(cf + i))));
        }
        if (i < e) {
            const int64_t r = e - i; /* even, < L */
            vf xv = PB_UK(PB_DT, load_part)(x + i, r, 0.0f);
            vf cv = pb_f32_load_part(cf + i, r), sv = pb_f32_load_part(sf + i, r);
            PB_UK(PB_DT, store_part)(y + i, vf_fmadd(vf_swap_pairs(xv), sv, vf_mul(xv, cv)), r);
        }
    }
}

static void PB_UK(PB_DT, rotary)(const pb_rot_plan *a, int64_t t0, int64_t t1) {
    const int64_t S = a->S, N = a->N, H = a->H, half = a->half;
    const int64_t rest = H - 2 * half;
    const int interleaved = a->interleaved;
    const int bsnh = a->bsnh;
    const T *in = (const T *)a->in;
    T *out = (T *)a->out;
    const int copy_rest = rest > 0 && (const void *)in != (const void *)out;
    const size_t rest_bytes = sizeof(T) * (size_t)rest;
    const T *cos_cache = (const T *)a->cos, *sin_cache = (const T *)a->sin;
    /* f32 per pair in the buffers: 1, or 2 when interleaved (duplicated) */
    const int64_t w = interleaved ? 2 : 1;
    const int64_t chunk = half * w <= PB_ROT_BUF ? half : PB_ROT_BUF / w;
    int64_t block = PB_ROT_BUF / (chunk * w);
    if (block > PB_ROT_MAX_BLOCK) block = PB_ROT_MAX_BLOCK;
    if (block < 1) block = 1;
    const int in_place = T_IS_F32 && !interleaved; /* read the f32 cache directly */
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
