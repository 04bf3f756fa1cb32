/*
 * engine/quant/internal.h - what the files of the quant module share beyond
 * the public block layouts of engine/quant/blocks.h: little-endian stores,
 * rounding helpers, and the per-type kernels that the traits table in quant.c
 * points to. No other module includes this file.
 *
 * Kernels follow the signatures in engine/quant.h: n is a multiple of the
 * block size (checked by gs_dequantize/gs_quantize, not here), nothing is
 * allocated, and every byte of the destination is written.
 */
#ifndef GS_QUANT_INTERNAL_H
#define GS_QUANT_INTERNAL_H

#include "engine/quant.h"
#include "engine/quant/blocks.h"

#include <math.h>
#include <string.h>

/* ---- little-endian stores --------------------------------------------------- */

static inline void gs_quant__st16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void gs_quant__st32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static inline void gs_quant__stf32(uint8_t *p, float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    gs_quant__st32(p, u);
}

/* ---- rounding --------------------------------------------------------------- */

/*
 * Nearest integer, ties to even (the rounding the reference quantizers use),
 * clamped to [lo, hi]. Clamping before rounding gives the same result as
 * rounding then clamping because lo and hi are integers, and it keeps the
 * conversion defined for huge values; NaN maps to lo.
 */
static inline int gs_quant__round_clamp(float v, int lo, int hi)
{
    if (!(v > (float)lo))
        return lo;
    if (v >= (float)hi)
        return hi;
    return (int)rintf(v);
}

/* As above with the widest range the reference rounding is defined on (its
 * magic-number trick holds for |v| < 2^22). For call sites that wrap the result
 * into a byte the way the reference does. */
static inline int gs_quant__round(float v)
{
    return gs_quant__round_clamp(v, -4194303, 4194303);
}

/* ---- kernels ------------------------------------------------------------------- */

#define GS_QUANT_KERNEL_PAIR(ty)                                                                   \
    void gs_quant__##ty##_to_f32(const void *src, float *dst, int64_t n);                          \
    void gs_quant__##ty##_from_f32(const float *src, void *dst, int64_t n);

/* plain.c */
GS_QUANT_KERNEL_PAIR(f32)
GS_QUANT_KERNEL_PAIR(f16)
GS_QUANT_KERNEL_PAIR(bf16)
/* legacy.c: the 32-element formats */
GS_QUANT_KERNEL_PAIR(q4_0)
GS_QUANT_KERNEL_PAIR(q4_1)
GS_QUANT_KERNEL_PAIR(q5_0)
GS_QUANT_KERNEL_PAIR(q5_1)
GS_QUANT_KERNEL_PAIR(q8_0)
GS_QUANT_KERNEL_PAIR(q8_1)
/* legacy.c: q8_0 and q8_1 as llama.cpp's CPU backend rounds activations (quant.h) */
void gs_quant__q8_0_act_from_f32(const float *src, void *dst, int64_t n);
void gs_quant__q8_1_act_from_f32(const float *src, void *dst, int64_t n);
/* kquants.c: the 256-element super-block formats */
GS_QUANT_KERNEL_PAIR(q2_K)
GS_QUANT_KERNEL_PAIR(q3_K)
GS_QUANT_KERNEL_PAIR(q4_K)
GS_QUANT_KERNEL_PAIR(q5_K)
GS_QUANT_KERNEL_PAIR(q6_K)
GS_QUANT_KERNEL_PAIR(q8_K)

#undef GS_QUANT_KERNEL_PAIR

#endif /* GS_QUANT_INTERNAL_H */
