/* bf16: the scalar float <-> bfloat16 conversions, the one reference that both the
 * collectives' bf16 compression (worker/comm/reduce.c) and the CPU engine's bf16 operands
 * (worker/nn/bf16.c, whose AVX2 kernel is tested bit for bit against it) round with.
 *
 * Decision: round to nearest even (add 0x7fff plus the lowest kept bit, keep the high 16
 * bits); a NaN stays a NaN with its quiet bit set, since rounding could carry its payload
 * into infinity. Header-only and stateless, so common/ holds it without a source file and
 * neither worker/nn/ nor worker/comm/ includes the other. Ownership: plain values. */
#ifndef DDPB_BF16_H
#define DDPB_BF16_H

#include <stdint.h>
#include <string.h>

static inline float bf16_to_float(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t bf16_from_float(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t quiet_nan = (u >> 16) | 0x40u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

#endif
