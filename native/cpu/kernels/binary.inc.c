/* Elementwise binary ops (per dtype), one set of microkernels per PB_BINARY line of kernels.def:
 * vv = two contiguous runs, vs = a run and one broadcast element, sv = one broadcast element and a
 * run. Computed in f32 registers, rounded once on store. */

/* whole vectors from i: 4 at a time, then 1 (B(j) is b's vector at element j) */
#define PBE_BIN_LOOPS(VOP, B, STORE)                                                                   \
    for (; i + 4 * L <= n; i += 4 * L) {                                                                \
        vf r0 = VOP(T_LOAD(a + i), B(i));                                                               \
        vf r1 = VOP(T_LOAD(a + i + L), B(i + L));                                                       \
        vf r2 = VOP(T_LOAD(a + i + 2 * L), B(i + 2 * L));                                               \
        vf r3 = VOP(T_LOAD(a + i + 3 * L), B(i + 3 * L));                                               \
        STORE(y + i, r0);                                                                               \
        STORE(y + i + L, r1);                                                                           \
        STORE(y + i + 2 * L, r2);                                                                       \
        STORE(y + i + 3 * L, r3);                                                                       \
    }                                                                                                   \
    for (; i + L <= n; i += L) STORE(y + i, VOP(T_LOAD(a + i), B(i)));
/* a partial run of m elements at i (the peel before aligned streaming, and the tail) */
#define PBE_BIN_PART(VOP, BP, m)                                                                       \
    PB_UK(PB_DT, store_part)(y + i, VOP(PB_UK(PB_DT, load_part)(a + i, m, 0.0f), BP(m)), m)
#define PBE_BIN_BODY(VOP, B, BP)                                                                       \
    const int64_t L = PB_LANES;                                                                         \
    int64_t i = 0;                                                                                      \
    if (nt) {                                                                                           \
        const int64_t p = PB_UK(PB_DT, nt_peel)(y, n);                                                  \
        if (p > 0) {                                                                                    \
            PBE_BIN_PART(VOP, BP, p);                                                                   \
            i = p;                                                                                      \
        }                                                                                               \
        PBE_BIN_LOOPS(VOP, B, T_STREAM)                                                                 \
    } else {                                                                                            \
        PBE_BIN_LOOPS(VOP, B, T_STORE)                                                                  \
    }                                                                                                   \
    if (i < n) PBE_BIN_PART(VOP, BP, n - i);                                                            \
    if (nt) pbe_stream_fence();

#define PBE_B_VEC(j) T_LOAD(b + (j))
#define PBE_B_VEC_PART(m) PB_UK(PB_DT, load_part)(b + i, m, 0.0f)
#define PBE_B_ONE(j) s
#define PBE_B_ONE_PART(m) s
/* sv: y = s (op) b[i], the loops above run over b with the operands swapped back */
#define PBE_BINARY_SWAP(NAME, VOP)                                                                      \
    static inline vf PB_UK(PB_DT, NAME##_swapped)(vf x, vf s) { return VOP(s, x); }
#define PB_BINARY(NAME, VOP, COMM)                                                                      \
    PBE_BINARY_SWAP(NAME, VOP)                                                                          \
    static void PB_UK(PB_DT, NAME##_vv)(const void *av, const void *bv, void *yv, int64_t n, int nt) {  \
        const T *a = (const T *)av, *b = (const T *)bv;                                                 \
        T *y = (T *)yv;                                                                                 \
        PBE_BIN_BODY(VOP, PBE_B_VEC, PBE_B_VEC_PART)                                                    \
    }                                                                                                   \
    static void PB_UK(PB_DT, NAME##_vs)(const void *av, const void *bv, void *yv, int64_t n, int nt) {  \
        const T *a = (const T *)av;                                                                     \
        T *y = (T *)yv;                                                                                 \
        const vf s = vf_set1(T_TO_F32(*(const T *)bv));                                                 \
        PBE_BIN_BODY(VOP, PBE_B_ONE, PBE_B_ONE_PART)                                                    \
    }                                                                                                   \
    static void PB_UK(PB_DT, NAME##_sv)(const void *av, const void *bv, void *yv, int64_t n, int nt) {  \
        const T *a = (const T *)bv;                                                                     \
        T *y = (T *)yv;                                                                                 \
        const vf s = vf_set1(T_TO_F32(*(const T *)av));                                                 \
        PBE_BIN_BODY(PB_UK(PB_DT, NAME##_swapped), PBE_B_ONE, PBE_B_ONE_PART)                           \
    }
#include "../kernels.def"
#undef PBE_BINARY_SWAP
#undef PBE_B_VEC
#undef PBE_B_VEC_PART
#undef PBE_B_ONE
#undef PBE_B_ONE_PART
#undef PBE_BIN_BODY
#undef PBE_BIN_PART
#undef PBE_BIN_LOOPS
