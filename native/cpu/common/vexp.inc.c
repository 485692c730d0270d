/* exp(x) for x <= 0 on vf lanes (softmax passes x - max). x = n*ln2 + r with
 * n = round(x*log2(e)), |r| <= ln2/2; exp(r) by a degree-5 minimax polynomial (coefficients
 * fitted for perfbench by a Remez exchange on relative error, 7.5e-8 in exact arithmetic);
 * 2^n by the "rounding bias" trick: t = x*log2(e) + (1.5*2^23 + 127) rounds to an integer in
 * one fma and keeps n + 127 in its low mantissa bits, so bits(t) << 23 is 2^n and t - bias is
 * n. Evaluated in f32: max relative error 4.2e-7 (at x near -87), median 1.7e-7.
 * Below -87.34 the input is clamped (result ~1.2e-38, not 0: invisible next to a row sum
 * >= 1). Domain: x <= 88.37; callers never pass more. NaN in, NaN out (max(lo, x) returns x
 * when x is NaN). 11 vector operations. */
static inline vf PB_ISA_FN(vexp_nonpos)(vf x) {
    const vf bias = vf_set1(12582912.0f + 127.0f);
    x = vf_max(vf_set1(-87.3365478515625f), x);
    vf t = vf_fmadd(x, vf_set1(1.44269504088896341f), bias);
    vf n = vf_sub(t, bias);
    vf r = vf_fnmadd(n, vf_set1(0.693147180559945f), x);
    vf p = vf_fmadd(vf_set1(0.008297654800117016f), r, vf_set1(0.04191538318991661f));
    p = vf_fmadd(p, r, vf_set1(0.16667574644088745f));
    p = vf_fmadd(p, r, vf_set1(0.49998894333839417f));
    p = vf_fmadd(p, r, vf_set1(0.9999997019767761f));
    p = vf_fmadd(p, r, vf_set1(1.0000001192092896f));
    return vf_mul(p, vf_shl23(t));
}
#define PB_VEXP PB_ISA_FN(vexp_nonpos)
