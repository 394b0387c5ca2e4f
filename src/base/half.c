/* float32 <-> IEEE half and bfloat16, round to nearest even, for compressed
 * gradient reduction (comm, ddp) and bf16 GEMMs (ops). Bit manipulation after F. Giesen's "float_to_half_fast3"
 * (public domain): exact for every input, including subnormals. */
#include "duet/base.h"

#include <string.h>

static inline uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t f32_to_f16(float value) {
    const uint32_t f32_inf = 255u << 23;
    const uint32_t f16_overflow = (127u + 16u) << 23; /* 2^16: >= rounds to inf */
    /* Adding 0.5 (as a float with this exponent) lines the half's subnormal
     * mantissa up at the bottom of the float's, rounding by the FPU (RNE). */
    const uint32_t denorm_magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    uint32_t f = bits_of(value);
    uint32_t sign = f & 0x80000000u;
    f ^= sign;
    uint16_t o;
    if (f >= f16_overflow) {
        o = f > f32_inf ? 0x7e00 : 0x7c00; /* NaN stays (quiet) NaN, else inf */
    } else if (f < (113u << 23)) {         /* below 2^-14: subnormal half or zero */
        uint32_t r = bits_of(float_of(f) + float_of(denorm_magic));
        o = (uint16_t)(r - denorm_magic);
    } else {
        uint32_t mant_odd = (f >> 13) & 1u;
        f += ((uint32_t)(15 - 127) << 23) + 0xfffu; /* rebias, round half up ... */
        f += mant_odd;                                /* ... or to even on ties */
        o = (uint16_t)(f >> 13);
    }
    return (uint16_t)(o | (sign >> 16));
}

static inline float f16_to_f32(uint16_t h) {
    const uint32_t magic = 113u << 23;
    const uint32_t shifted_exp = 0x7c00u << 13;
    uint32_t o = ((uint32_t)h & 0x7fffu) << 13;
    uint32_t exp = shifted_exp & o;
    o += (uint32_t)(127 - 15) << 23;
    if (exp == shifted_exp) {
        o += (uint32_t)(128 - 16) << 23; /* inf / NaN */
    } else if (exp == 0) {
        o += 1u << 23; /* subnormal: renormalise through the FPU */
        o = bits_of(float_of(o) - float_of(magic));
    }
    o |= ((uint32_t)h & 0x8000u) << 16;
    return float_of(o);
}

static inline uint16_t f32_to_bf16(float value) {
    uint32_t u = bits_of(value);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

void duet_f32_to_f16(uint16_t *out, const float *in, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = f32_to_f16(in[i]);
}

void duet_f16_to_f32(float *out, const uint16_t *in, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = f16_to_f32(in[i]);
}

/* The bf16 GEMM rounds both of its inputs on every call (a fifth of a bf16
 * training step went here with the baseline's 16-byte vectors): the loop
 * is also compiled for AVX2 and AVX-512, picked at load time by the CPU
 * (the same exact rounding in every version). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
void duet_f32_to_bf16(uint16_t *out, const float *in, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = f32_to_bf16(in[i]);
}

void duet_bf16_to_f32(float *out, const uint16_t *in, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = float_of((uint32_t)in[i] << 16);
}
