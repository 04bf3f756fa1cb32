/*
 * engine/quant/legacy.c - the 32-element block formats: q4_0, q4_1, q5_0,
 * q5_1, q8_0 and q8_1.
 *
 * Symmetric formats (q4_0, q5_0, q8_0, q8_1) store one f16 scale d and signed
 * quants: x = d * q. Asymmetric ones (q4_1, q5_1) add the block minimum m:
 * x = d * q + m. The quantizers are the deterministic reference ones that
 * llama.cpp uses when no importance matrix is given, so requantizing a block
 * that llama.cpp wrote reproduces its bytes. Arithmetic is kept in the same
 * order and precision as the reference (float, no fused multiply-add; see the
 * meson.build of this folder), because the dequantized values are checked bit
 * for bit against values computed by ggml.
 */
#include "engine/quant/internal.h"

#include <float.h>

/* Quant j of a nibble-packed block: low nibbles hold elements 0..15, high
 * nibbles elements 16..31. */
static inline int nibble(const uint8_t *qs, int j)
{
    return j < GS_QK / 2 ? qs[j] & 0x0f : qs[j - GS_QK / 2] >> 4;
}

/* Fifth bit of quant j, as 0 or 16. */
static inline int bit5(uint32_t qh, int j)
{
    return (int)((qh >> j) & 1u) << 4;
}

/* The value of largest magnitude, with its sign; the first one wins a tie.
 * The symmetric formats map it to the most negative quant, which has one
 * more step than the positive side. */
static float signed_absmax(const float *x, int n)
{
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static void min_max(const float *x, int n, float *min, float *max)
{
    *min = FLT_MAX;
    *max = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < *min)
            *min = x[j];
        if (x[j] > *max)
            *max = x[j];
    }
}

/* Truncation of v + bias (v + bias >= 0 in range), as the reference's integer
 * cast does, clamped to [0, hi] so that no input makes the conversion undefined. */
static inline int trunc_clamp(float v, int hi)
{
    if (!(v > 0.0f))
        return 0;
    if (v >= (float)hi)
        return hi;
    return (int)v;
}

/* Packs 32 quants of up to 5 bits into nibbles at qs and fifth bits into the
 * returned qh word. */
static uint32_t pack_nibbles(const uint8_t *q, uint8_t *qs)
{
    uint32_t qh = 0;
    for (int j = 0; j < GS_QK / 2; j++) {
        qs[j] = (uint8_t)((q[j] & 0x0f) | ((q[j + GS_QK / 2] & 0x0f) << 4));
        qh |= (uint32_t)((q[j] >> 4) & 1) << j;
        qh |= (uint32_t)((q[j + GS_QK / 2] >> 4) & 1) << (j + GS_QK / 2);
    }
    return qh;
}

/* ---- q4_0: x = d * (q - 8), q in 0..15 ------------------------------------- */

void gs_quant__q4_0_to_f32(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / GS_QK; i++, b += GS_Q4_0_BYTES, dst += GS_QK) {
        const float d = gs_quant_ldf16(b + GS_Q4_0_D);
        for (int j = 0; j < GS_QK; j++)
            dst[j] = (float)(nibble(b + GS_Q4_0_QS, j) - 8) * d;
    }
}

void gs_quant__q4_0_from_f32(const float *src, void *dst, int64_t n)
{
    uint8_t *b = dst;
    uint8_t q[GS_QK];
    for (int64_t i = 0; i < n / GS_QK; i++, b += GS_Q4_0_BYTES, src += GS_QK) {
        const float d = signed_absmax(src, GS_QK) / -8;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        gs_quant__st16(b + GS_Q4_0_D, gs_f32_to_fp16(d));
        for (int j = 0; j < GS_QK; j++)
            q[j] = (uint8_t)trunc_clamp(src[j] * id + 8.5f, 15);
        (void)pack_nibbles(q, b + GS_Q4_0_QS);
    }
}

/* ---- q4_1: x = d * q + m, q in 0..15 --------------------------------------- */

void gs_quant__q4_1_to_f32(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / GS_QK; i++, b += GS_Q4_1_BYTES, dst += GS_QK) {
        const float d = gs_quant_ldf16(b + GS_Q4_1_D);
        const float m = gs_quant_ldf16(b + GS_Q4_1_M);
        for (int j = 0; j < GS_QK; j++)
            dst[j] = (float)nibble(b + GS_Q4_1_QS, j) * d + m;
    }
}

void gs_quant__q4_1_from_f32(const float *src, void *dst, int64_t n)
{
    uint8_t *b = dst;
    uint8_t q[GS_QK];
    for (int64_t i = 0; i < n / GS_QK; i++, b += GS_Q4_1_BYTES, src += GS_QK) {
        float min, max;
        min_max(src, GS_QK, &min, &max);
        const float d = (max - min) / 15;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        gs_quant__st16(b + GS_Q4_1_D, gs_f32_to_fp16(d));
        gs_quant__st16(b + GS_Q4_1_M, gs_f32_to_fp16(min));
        for (int j = 0; j < GS_QK; j++)
            q[j] = (uint8_t)trunc_clamp((src[j] - min) * id + 0.5f, 15);
        (void)pack_nibbles(q, b + GS_Q4_1_QS);
    }
}

/* ---- q5_0: x = d * (q - 16), q in 0..31 ------------------------------------ */

void gs_quant__q5_0_to_f32(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / GS_QK; i++, b += GS_Q5_0_BYTES, dst += GS_QK) {
        const float d = gs_quant_ldf16(b + GS_Q5_0_D);
        const uint32_t qh = gs_quant_ld32(b + GS_Q5_0_QH);
        for (int j = 0; j < GS_QK; j++)
            dst[j] = (float)((nibble(b + GS_Q5_0_QS, j) | bit5(qh, j)) - 16) * d;
    }
}

void gs_quant__q5_0_from_f32(const float *src, void *dst, int64_t n)
{
    uint8_t *b = dst;
    uint8_t q[GS_QK];
    for (int64_t i = 0; i < n / GS_QK; i++, b += GS_Q5_0_BYTES, src += GS_QK) {
        const float d = signed_absmax(src, GS_QK) / -16;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        gs_quant__st16(b + GS_Q5_0_D, gs_f32_to_fp16(d));
        for (int j = 0; j < GS_QK; j++)
            q[j] = (uint8_t)trunc_clamp(src[j] * id + 16.5f, 31);
        gs_quant__st32(b + GS_Q5_0_QH, pack_nibbles(q, b + GS_Q5_0_QS));
    }
}

/* ---- q5_1: x = d * q + m, q in 0..31 --------------------------------------- */

void gs_quant__q5_1_to_f32(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / GS_QK; i++, b += GS_Q5_1_BYTES, dst += GS_QK) {
        const float d = gs_quant_ldf16(b + GS_Q5_1_D);
        const float m = gs_quant_ldf16(b + GS_Q5_1_M);
        const uint32_t qh = gs_quant_ld32(b + GS_Q5_1_QH);
        for (int j = 0; j < GS_QK; j++)
            dst[j] = (float)(nibble(b + GS_Q5_1_QS, j) | bit5(qh, j)) * d + m;
    }
}

void gs_quant__q5_1_from_f32(const float *src, void *dst, int64_t n)
{
    uint8_t *b = dst;
    uint8_t q[GS_QK];
    for (int64_t i = 0; i < n / GS_QK; i++, b += GS_Q5_1_BYTES, src += GS_QK) {
        float min, max;
        min_max(src, GS_QK, &min, &max);
        const float d = (max - min) / 31;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        gs_quant__st16(b + GS_Q5_1_D, gs_f32_to_fp16(d));
        gs_quant__st16(b + GS_Q5_1_M, gs_f32_to_fp16(min));
        for (int j = 0; j < GS_QK; j++)
            q[j] = (uint8_t)trunc_clamp((src[j] - min) * id + 0.5f, 31);
        gs_quant__st32(b + GS_Q5_1_QH, pack_nibbles(q, b + GS_Q5_1_QS));
    }
}

/* ---- q8_0 and q8_1: x = d * q, q in -127..127 ------------------------------ */

/* Quantizes one block to qs with round-half-away-from-zero (roundf, as the
 * reference does here, unlike the K-quants), returns d and the quant sum. */
static float q8_block(const float *x, int8_t *qs, int *sum)
{
    float amax = 0.0f;
    for (int j = 0; j < GS_QK; j++)
        amax = GS_MAX(amax, fabsf(x[j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    *sum = 0;
    for (int j = 0; j < GS_QK; j++) {
        const float v = roundf(x[j] * id);
        /* |v| <= 127 for finite input; the clamp only keeps NaN defined. */
        qs[j] = (int8_t)(v >= -128.0f && v <= 127.0f ? (int)v : 0);
        *sum += qs[j];
    }
    return d;
}

void gs_quant__q8_0_to_f32(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / GS_QK; i++, b += GS_Q8_0_BYTES, dst += GS_QK) {
        const float d = gs_quant_ldf16(b + GS_Q8_0_D);
        for (int j = 0; j < GS_QK; j++)
            dst[j] = (float)(int8_t)b[GS_Q8_0_QS + j] * d;
    }
}

void gs_quant__q8_0_from_f32(const float *src, void *dst, int64_t n)
{
    uint8_t *b = dst;
    int8_t qs[GS_QK];
    int sum;
    for (int64_t i = 0; i < n / GS_QK; i++, b += GS_Q8_0_BYTES, src += GS_QK) {
        const float d = q8_block(src, qs, &sum);
        gs_quant__st16(b + GS_Q8_0_D, gs_f32_to_fp16(d));
        memcpy(b + GS_Q8_0_QS, qs, GS_QK);
    }
}

void gs_quant__q8_1_to_f32(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / GS_QK; i++, b += GS_Q8_1_BYTES, dst += GS_QK) {
        const float d = gs_quant_ldf16(b + GS_Q8_1_D);
        for (int j = 0; j < GS_QK; j++)
            dst[j] = (float)(int8_t)b[GS_Q8_1_QS + j] * d;
    }
}

/* One block as llama.cpp's x86 CPU backend quantizes a dot product's activations
 * (ggml-cpu's quantize_row_q8_0/q8_1): the multiplier is 127 / amax, not 1 / d,
 * and quants round half to even (the SIMD round instruction), not away from zero.
 * Either can move a quant by one against q8_block; on a deep model one such step
 * is enough to move the logits visibly, so graphserve rounds as the engine whose
 * outputs users compare with. rintf rounds half to even in the default mode. */
static float q8_block_act(const float *x, int8_t *qs, int *sum)
{
    float amax = 0.0f;
    for (int j = 0; j < GS_QK; j++)
        amax = GS_MAX(amax, fabsf(x[j]));
    const float d = amax / 127;
    const float id = amax != 0.0f ? 127 / amax : 0.0f;
    *sum = 0;
    for (int j = 0; j < GS_QK; j++) {
        const float v = rintf(x[j] * id);
        qs[j] = (int8_t)(v >= -128.0f && v <= 127.0f ? (int)v : 0);
        *sum += qs[j];
    }
    return d;
}

void gs_quant__q8_0_act_from_f32(const float *src, void *dst, int64_t n)
{
    uint8_t *b = dst;
    int8_t qs[GS_QK];
    int sum;
    for (int64_t i = 0; i < n / GS_QK; i++, b += GS_Q8_0_BYTES, src += GS_QK) {
        const float d = q8_block_act(src, qs, &sum);
        gs_quant__st16(b + GS_Q8_0_D, gs_f32_to_fp16(d));
        memcpy(b + GS_Q8_0_QS, qs, GS_QK);
    }
}

void gs_quant__q8_1_act_from_f32(const float *src, void *dst, int64_t n)
{
    uint8_t *b = dst;
    int8_t qs[GS_QK];
    int sum;
    for (int64_t i = 0; i < n / GS_QK; i++, b += GS_Q8_1_BYTES, src += GS_QK) {
        const float d = q8_block_act(src, qs, &sum);
        gs_quant__st16(b + GS_Q8_1_D, gs_f32_to_fp16(d));
        gs_quant__st16(b + GS_Q8_1_S, gs_f32_to_fp16((float)sum * d));
        memcpy(b + GS_Q8_1_QS, qs, GS_QK);
    }
}

void gs_quant__q8_1_from_f32(const float *src, void *dst, int64_t n)
{
    uint8_t *b = dst;
    int8_t qs[GS_QK];
    int sum;
    for (int64_t i = 0; i < n / GS_QK; i++, b += GS_Q8_1_BYTES, src += GS_QK) {
        const float d = q8_block(src, qs, &sum);
        gs_quant__st16(b + GS_Q8_1_D, gs_f32_to_fp16(d));
        gs_quant__st16(b + GS_Q8_1_S, gs_f32_to_fp16((float)sum * d));
        memcpy(b + GS_Q8_1_QS, qs, GS_QK);
    }
}
