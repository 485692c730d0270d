/* exp(x) on vf lanes: x = n*ln2 + r with |r| <= ln2/2, exp(r) by a degree-6 polynomial (the
 * classic Cephes expf coefficients), scaled by 2^n built in the exponent bits. Relative error
 * about 1e-7 over the range. Inputs are clamped to [-87.34, 88.72]: below about -87 the result
 * flushes to 0 (no subnormals), at the top it saturates near FLT_MAX instead of inf (softmax
 * only ever passes x - max <= 0). NaN in, NaN out. */
static inline vf PB_ISA_FN(vexp)(vf x) {
    /* max(lo, x) / min(hi, x) return x when x is NaN (x86 semantics on every path) */
    x = vf_min(vf_set1(88.7228317260742f), vf_max(vf_set1(-87.3365478515625f), x));
    vf n = vf_round(vf_mul(x, vf_set1(1.44269504088896341f)));
    vf r = vf_fnmadd(n, vf_set1(0.693359375f), x);
    r = vf_fnmadd(n, vf_set1(-2.12194440e-4f), r);
    vf p = vf_set1(1.9875691500e-4f);
    p = vf_fmadd(p, r, vf_set1(1.3981999507e-3f));
    p = vf_fmadd(p, r, vf_set1(8.3334519073e-3f));
    p = vf_fmadd(p, r, vf_set1(4.1665795894e-2f));
    p = vf_fmadd(p, r, vf_set1(1.6666665459e-1f));
    p = vf_fmadd(p, r, vf_set1(5.0000001201e-1f));
    vf r2 = vf_mul(r, r);
    p = vf_fmadd(p, r2, vf_add(r, vf_set1(1.0f)));
    /* n may reach 128 at the top of the range: split the scale as 2^(n-1) * 2 */
    return vf_mul(vf_mul(p, vf_pow2i(vf_sub(n, vf_set1(1.0f)))), vf_set1(2.0f));
}
#define PB_VEXP PB_ISA_FN(vexp)
