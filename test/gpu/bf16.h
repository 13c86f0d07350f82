/* bf16.h — bfloat16 on the host, for the GPU tests and the CPU mock of the GPU layers: the same
 * rounding as the device's __float2bfloat16_rn (round to nearest, ties to even; NaN stays a
 * quiet NaN; values beyond the largest bf16 become ±Inf) and the exact widening back to fp32.
 * bf16 is the high half of an fp32: 1 sign, 8 exponent, 7 stored fraction bits (8 significant
 * bits, unit roundoff u = 2^-8 ≈ 3.9e-3). Plain C, header only. */
#ifndef DSGD_TEST_BF16_H
#define DSGD_TEST_BF16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The bf16 bits of f rounded to nearest even. */
static inline uint16_t bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u); /* NaN: keep it quiet */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* The fp32 value of bf16 bits b (exact). */
static inline float bf16_value(uint16_t b) {
    const uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* f rounded to the nearest bf16, as an fp32. */
static inline float bf16_round(float f) { return bf16_value(bf16_bits(f)); }

static inline void bf16_round_all(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = bf16_round(x[i]);
}

static inline void bf16_pack(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = bf16_bits(src[i]);
}

static inline void bf16_unpack(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = bf16_value(src[i]);
}

#endif
