/* Scalar float16 / bfloat16 conversions, round to nearest even (used by the portable path and
 * by tails nowhere else: vector paths convert in registers). */
#include <string.h>

#include "../internal.h"

static inline uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float pb_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) /* inf / nan */
        return float_of(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        if (man == 0) return float_of(sign);
        /* subnormal: value = man * 2^-24 */
        float v = (float)man * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return float_of(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t pb_f32_to_f16(float f) {
    uint32_t u = bits_of(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t absu = u & 0x7fffffffu;
    if (absu >= 0x7f800000u) /* inf or nan (keep nan quiet) */
        return (uint16_t)(sign | 0x7c00u | (absu > 0x7f800000u ? 0x200u | ((absu >> 13) & 0x3ffu) : 0));
    if (absu >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (absu < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        /* value in units of 2^-24, rounded to nearest even by float arithmetic */
        float a = float_of(absu) * 16777216.0f; /* exact scaling by 2^24 */
        /* round half to even via the 2^23 trick (a < 1024 here) */
        float r = (a + 8388608.0f) - 8388608.0f;
        return (uint16_t)(sign | (uint32_t)r);
    }
    /* normal: rebias exponent, round mantissa from 23 to 10 bits (nearest even) */
    uint32_t rounded = absu + 0xfffu + ((absu >> 13) & 1u);
    return (uint16_t)(sign | ((rounded - 0x38000000u) >> 13));
}

float pb_bf16_to_f32(uint16_t b) { return float_of((uint32_t)b << 16); }

uint16_t pb_f32_to_bf16(float f) {
    uint32_t u = bits_of(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* nan: keep sign, force quiet */
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
