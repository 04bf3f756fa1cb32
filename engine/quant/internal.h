/*
 * engine/quant/internal.h - what the files of the quant module share: the byte
 * layout of every implemented block, little-endian loads and stores, rounding
 * helpers, and the per-type kernels that the traits table in quant.c points to.
 * No other module includes this file.
 *
 * Block layouts are written as byte offsets rather than C structs, so that a
 * block can start at any address (GGUF only aligns the start of a tensor) and
 * the layout does not depend on the host's padding or byte order. Each layout
 * is byte-for-byte the one llama.cpp writes into GGUF files; the _Static_asserts
 * below tie the offsets to the block sizes in the traits table.
 *
 * Kernels follow the signatures in engine/quant.h: n is a multiple of the
 * block size (checked by gs_dequantize/gs_quantize, not here), nothing is
 * allocated, and every byte of the destination is written.
 */
#ifndef GS_QUANT_INTERNAL_H
#define GS_QUANT_INTERNAL_H

#include "engine/quant.h"

#include <math.h>
#include <string.h>

/* ---- block layouts (byte offsets inside one block) ------------------------ */

/* 32-element formats. d is an f16 scale, m an f16 offset (the block minimum),
 * qs packs element j in the low nibble of byte j and element j+16 in the high
 * nibble; qh holds the fifth bit of element j in bit j of a little-endian u32. */
#define GS_QK 32
/* clang-format off */
enum {
    GS_Q4_0_D = 0, GS_Q4_0_QS = 2, GS_Q4_0_BYTES = 18,
    GS_Q4_1_D = 0, GS_Q4_1_M = 2, GS_Q4_1_QS = 4, GS_Q4_1_BYTES = 20,
    GS_Q5_0_D = 0, GS_Q5_0_QH = 2, GS_Q5_0_QS = 6, GS_Q5_0_BYTES = 22,
    GS_Q5_1_D = 0, GS_Q5_1_M = 2, GS_Q5_1_QH = 4, GS_Q5_1_QS = 8, GS_Q5_1_BYTES = 24,
    GS_Q8_0_D = 0, GS_Q8_0_QS = 2, GS_Q8_0_BYTES = 34,
    /* s is d times the sum of the 32 quants, kept for dot products with Q4_1/Q5_1. */
    GS_Q8_1_D = 0, GS_Q8_1_S = 2, GS_Q8_1_QS = 4, GS_Q8_1_BYTES = 36,
};

/* 256-element super-blocks (GS_QK_K). Sub-block scales are 4, 6 or 8 bits;
 * see kquants.c for how each format packs them. */
enum {
    /* scales: 16 bytes, low nibble scale / high nibble min of each 16-element group;
     * qs: 2-bit quants; d, dmin: f16 super-scales of scales and mins. */
    GS_Q2_K_SCALES = 0, GS_Q2_K_QS = 16, GS_Q2_K_D = 80, GS_Q2_K_DMIN = 82, GS_Q2_K_BYTES = 84,
    /* hmask: third bit of each quant; qs: low 2 bits; scales: 16 6-bit signed scales
     * packed in 12 bytes; d: f16 super-scale. */
    GS_Q3_K_HMASK = 0, GS_Q3_K_QS = 32, GS_Q3_K_SCALES = 96, GS_Q3_K_D = 108,
    GS_Q3_K_BYTES = 110,
    /* 8 groups of 32 with a 6-bit scale and a 6-bit min each, packed in 12 bytes. */
    GS_Q4_K_D = 0, GS_Q4_K_DMIN = 2, GS_Q4_K_SCALES = 4, GS_Q4_K_QS = 16, GS_Q4_K_BYTES = 144,
    GS_Q5_K_D = 0, GS_Q5_K_DMIN = 2, GS_Q5_K_SCALES = 4, GS_Q5_K_QH = 16, GS_Q5_K_QS = 48,
    GS_Q5_K_BYTES = 176,
    /* ql: low 4 bits, qh: high 2 bits, scales: 16 signed 8-bit scales, d: f16. */
    GS_Q6_K_QL = 0, GS_Q6_K_QH = 128, GS_Q6_K_SCALES = 192, GS_Q6_K_D = 208, GS_Q6_K_BYTES = 210,
    /* d is an f32 here; bsums are the i16 sums of each 16 quants (for dot products). */
    GS_Q8_K_D = 0, GS_Q8_K_QS = 4, GS_Q8_K_BSUMS = 260, GS_Q8_K_BYTES = 292,
};

/* clang-format on */

_Static_assert(GS_Q4_0_QS + GS_QK / 2 == GS_Q4_0_BYTES, "q4_0 layout");
_Static_assert(GS_Q4_1_QS + GS_QK / 2 == GS_Q4_1_BYTES, "q4_1 layout");
_Static_assert(GS_Q5_0_QS + GS_QK / 2 == GS_Q5_0_BYTES, "q5_0 layout");
_Static_assert(GS_Q5_1_QS + GS_QK / 2 == GS_Q5_1_BYTES, "q5_1 layout");
_Static_assert(GS_Q8_0_QS + GS_QK == GS_Q8_0_BYTES, "q8_0 layout");
_Static_assert(GS_Q8_1_QS + GS_QK == GS_Q8_1_BYTES, "q8_1 layout");
_Static_assert(GS_Q2_K_QS + GS_QK_K / 4 == GS_Q2_K_D && GS_Q2_K_DMIN + 2 == GS_Q2_K_BYTES,
               "q2_K layout");
_Static_assert(GS_Q3_K_QS + GS_QK_K / 4 == GS_Q3_K_SCALES && GS_Q3_K_D + 2 == GS_Q3_K_BYTES,
               "q3_K layout");
_Static_assert(GS_Q4_K_QS + GS_QK_K / 2 == GS_Q4_K_BYTES, "q4_K layout");
_Static_assert(GS_Q5_K_QH + GS_QK_K / 8 == GS_Q5_K_QS && GS_Q5_K_QS + GS_QK_K / 2 == GS_Q5_K_BYTES,
               "q5_K layout");
_Static_assert(GS_Q6_K_QH + GS_QK_K / 4 == GS_Q6_K_SCALES && GS_Q6_K_D + 2 == GS_Q6_K_BYTES,
               "q6_K layout");
_Static_assert(GS_Q8_K_QS + GS_QK_K == GS_Q8_K_BSUMS && GS_Q8_K_BSUMS + 32 == GS_Q8_K_BYTES,
               "q8_K layout");

/* ---- little-endian access ------------------------------------------------- */

static inline uint16_t gs_quant__ld16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t gs_quant__ld32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
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
static inline float gs_quant__ldf16(const uint8_t *p)
{
    return gs_fp16_to_f32(gs_quant__ld16(p));
}
static inline float gs_quant__ldf32(const uint8_t *p)
{
    uint32_t u = gs_quant__ld32(p);
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
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

/* ---- K-quant scales ------------------------------------------------------------ */

/* The 6-bit scale s and min m of group g (0..7) of a q4_K/q5_K block's 12
 * scale bytes: groups 0..3 keep them in the low 6 bits of scales[g] and
 * scales[g + 4]; groups 4..7 keep their low 4 bits in the nibbles of
 * scales[g + 4] and their high 2 bits in the top bits of scales[g - 4] (s)
 * and scales[g] (m). */
static inline void gs_quant__k4_scale_min(const uint8_t *scales, int g, uint8_t *s, uint8_t *m)
{
    if (g < 4) {
        *s = scales[g] & 63;
        *m = scales[g + 4] & 63;
    } else {
        *s = (uint8_t)((scales[g + 4] & 0xf) | ((scales[g - 4] >> 6) << 4));
        *m = (uint8_t)((scales[g + 4] >> 4) | ((scales[g] >> 6) << 4));
    }
}

/* The signed 6-bit scale of group g (0..15) of a q3_K block's 12 scale bytes:
 * low 4 bits in a nibble of bytes 0..7, high 2 bits in bytes 8..11; less 32. */
static inline int gs_quant__q3_K_scale(const uint8_t *scales, int g)
{
    const int lo = g < 8 ? scales[g] & 0xf : scales[g - 8] >> 4;
    const int hi = (scales[8 + g % 4] >> (2 * (g / 4))) & 3;
    return (lo | (hi << 4)) - 32;
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
