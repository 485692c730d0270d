/* Host peak probes: independent multiply-add chains and a streaming read. A chain must have
 * latency x issue width accumulators in flight: 12 covers f32 FMA on current x86 (4-cycle
 * latency x 2 pipes = 8), but on a Zen 5 a vdpbf16ps loop reached 355 / 486 / 524 GFLOP/s per
 * core with 8 / 12 / 16 accumulators, so an ISA with 32 vector registers (AVX-512) sets 24. */
#ifndef PB_PEAK_ACCS
#define PB_PEAK_ACCS 12
#endif

static float PB_ISA_FN(peak_fma_f32)(int64_t iters, int64_t *flops) {
    vf acc[PB_PEAK_ACCS];
    for (int k = 0; k < PB_PEAK_ACCS; k++) acc[k] = vf_set1(0.001f * (float)k);
    const vf m = vf_set1(0.9999999f), c = vf_set1(1e-7f);
    for (int64_t it = 0; it < iters; it++) {
        /* unrolled whole: GCC leaves a loop of more than 16 iterations rolled, and then keeps the
         * accumulators on the stack (a load and a store per FMA, seen in objdump at 24) */
#pragma GCC unroll 64
        for (int k = 0; k < PB_PEAK_ACCS; k++) acc[k] = vf_fmadd(acc[k], m, c);
    }
    vf s = vf_zero();
    for (int k = 0; k < PB_PEAK_ACCS; k++) s = vf_add(s, acc[k]);
    *flops = iters * PB_PEAK_ACCS * 2 * PB_LANES;
    return vf_hsum(s);
}

#ifndef PB_HAVE_NATIVE_BF16_DOT
/* No bf16 dot instruction: bf16 operands are loaded from an L1-resident buffer, converted in
 * registers and multiplied-added in f32 (2 flops per bf16 product). */
#define PB_PEAK_BF16_METHOD "bf16 loads converted in registers + f32 FMA (no bf16 dot instruction)"
static float PB_ISA_FN(peak_bf16_dot)(int64_t iters, int64_t *flops) {
    uint16_t buf[PB_PEAK_ACCS * PB_LANES];
    for (int i = 0; i < PB_PEAK_ACCS * PB_LANES; i++) buf[i] = (uint16_t)(0x3f80 + (i & 7)); /* ~1.0 */
    vf acc[PB_PEAK_ACCS];
    for (int k = 0; k < PB_PEAK_ACCS; k++) acc[k] = vf_zero();
    const vf w = vf_set1(1e-7f);
    for (int64_t it = 0; it < iters; it++) {
#pragma GCC unroll 64
        for (int k = 0; k < PB_PEAK_ACCS; k++) acc[k] = vf_fmadd(vf_load_bf16(buf + k * PB_LANES), w, acc[k]);
        __asm__ volatile("" : : "r"(buf) : "memory"); /* keep the loads inside the loop */
    }
    vf s = vf_zero();
    for (int k = 0; k < PB_PEAK_ACCS; k++) s = vf_add(s, acc[k]);
    *flops = iters * PB_PEAK_ACCS * 2 * PB_LANES;
    return vf_hsum(s);
}
#endif

static float PB_ISA_FN(read_sum)(const void *buf, int64_t bytes) {
    const float *p = (const float *)buf;
    const int64_t n = bytes / (int64_t)sizeof(float), L = PB_LANES;
    vf a0 = vf_zero(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    int64_t i = 0;
    for (; i + 8 * L <= n; i += 8 * L) {
        a0 = vf_add(a0, vf_load_f32(p + i));
        a1 = vf_add(a1, vf_load_f32(p + i + L));
        a2 = vf_add(a2, vf_load_f32(p + i + 2 * L));
        a3 = vf_add(a3, vf_load_f32(p + i + 3 * L));
        a4 = vf_add(a4, vf_load_f32(p + i + 4 * L));
        a5 = vf_add(a5, vf_load_f32(p + i + 5 * L));
        a6 = vf_add(a6, vf_load_f32(p + i + 6 * L));
        a7 = vf_add(a7, vf_load_f32(p + i + 7 * L));
    }
    float s = vf_hsum(vf_add(vf_add(vf_add(a0, a1), vf_add(a2, a3)), vf_add(vf_add(a4, a5), vf_add(a6, a7))));
    for (; i < n; i++) s += p[i];
    return s;
}
