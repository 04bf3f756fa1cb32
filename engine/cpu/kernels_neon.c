/*
 * engine/cpu/kernels_neon.c - Advanced SIMD (NEON) kernels for aarch64.
 *
 * Every aarch64 CPU has Advanced SIMD, so the plain build of this file
 * (-march=armv8-a) is the arm64 baseline. It multiplies int8 by int8 with
 * widening products (smull into int16, pairwise-accumulated into int32).
 * Built a second time with GS_CPU_DOTPROD (-march=armv8.2-a+dotprod) for CPUs
 * that have sdot, four byte products summed into each int32 lane in one
 * instruction; kernels.c picks that table only after the OS reports the
 * feature. The two builds differ in dot_i8() alone.
 *
 * Each kernel unpacks a block's quants into signed bytes in registers and
 * takes exact integer sums per scale group, the same sums the scalar kernels
 * of kernels_scalar.c take; only the float accumulation order differs.
 * Products of many tokens use the generic tiled loop (weight row reused from
 * L1 across a block of tokens).
 *
 * Block layouts come from engine/quant/blocks.h.
 */
#include "engine/cpu/cpu.h"
#include "engine/quant/blocks.h"

#include <arm_neon.h>

#ifdef GS_CPU_DOTPROD
/* The dotprod build exports only the kernel table; the helpers stay unused. */
#pragma GCC diagnostic ignored "-Wunused-function"
#endif

/* acc[i] += sum of a[4i..4i+3] * b[4i..4i+3] (dotprod) or an equivalent
 * split of the sixteen products over the four lanes (baseline): callers only
 * ever use the sum of all lanes, or lanes scaled alike. */
static inline int32x4_t dot_i8(int32x4_t acc, int8x16_t a, int8x16_t b)
{
#ifdef GS_CPU_DOTPROD
    return vdotq_s32(acc, a, b);
#else
    /* |a*b| <= 128 * 128 fits int16; pairs are summed into int32 lanes. */
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
    return vpadalq_s16(acc, vmull_high_s8(a, b));
#endif
}

/* Thirty-two byte products: a0 with b0 and a1 with b1. */
static inline int32x4_t dot32(int8x16_t a0, int8x16_t a1, const int8_t *b)
{
    return dot_i8(dot_i8(vdupq_n_s32(0), a0, vld1q_s8(b)), a1, vld1q_s8(b + 16));
}

static inline float ld_f16(const uint8_t *p)
{
    __fp16 h;
    memcpy(&h, p, sizeof(h));
    return (float)h;
}

static inline float ld_f32(const uint8_t *p)
{
    float f;
    memcpy(&f, p, sizeof(f));
    return f;
}

static inline int8x16_t s8(uint8x16_t v)
{
    return vreinterpretq_s8_u8(v);
}

/* 0x10 in byte j where bit j of the 16 bits `bits` is set: the fifth bit of
 * q5_0/q5_1 quants, spread to the bytes it belongs to. */
static inline uint8x16_t fifth_bits16(uint32_t bits)
{
    static const uint8_t sel[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t b = vcombine_u8(vdup_n_u8((uint8_t)bits), vdup_n_u8((uint8_t)(bits >> 8)));
    return vandq_u8(vtstq_u8(b, vld1q_u8(sel)), vdupq_n_u8(0x10));
}

/* ---- 32-element formats ---------------------------------------------------------------------- */

/* The low and high nibbles of a 16-byte run: elements 0..15 and 16..31. */
static inline void nibbles(const uint8_t *qs, uint8x16_t *lo, uint8x16_t *hi)
{
    const uint8x16_t v = vld1q_u8(qs);
    *lo = vandq_u8(v, vdupq_n_u8(0x0f));
    *hi = vshrq_n_u8(v, 4);
}

static float dot_q4_0(int64_t n, const void *vw, const void *vx)
{
    const uint8_t *w = vw, *x = vx;
    float32x4_t acc = vdupq_n_f32(0);
    const int8x16_t eight = vdupq_n_s8(8);
    for (int64_t b = 0; b < n / GS_QK; b++, w += GS_Q4_0_BYTES, x += GS_Q8_0_BYTES) {
        uint8x16_t lo, hi;
        nibbles(w + GS_Q4_0_QS, &lo, &hi);
        const int32x4_t p = dot32(vsubq_s8(s8(lo), eight), vsubq_s8(s8(hi), eight),
                                  (const int8_t *)(x + GS_Q8_0_QS));
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(p), ld_f16(w + GS_Q4_0_D) * ld_f16(x + GS_Q8_0_D));
    }
    return vaddvq_f32(acc);
}

static float dot_q4_1(int64_t n, const void *vw, const void *vx)
{
    const uint8_t *w = vw, *x = vx;
    float32x4_t acc = vdupq_n_f32(0);
    float mins = 0;
    for (int64_t b = 0; b < n / GS_QK; b++, w += GS_Q4_1_BYTES, x += GS_Q8_1_BYTES) {
        uint8x16_t lo, hi;
        nibbles(w + GS_Q4_1_QS, &lo, &hi);
        const int32x4_t p = dot32(s8(lo), s8(hi), (const int8_t *)(x + GS_Q8_1_QS));
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(p), ld_f16(w + GS_Q4_1_D) * ld_f16(x + GS_Q8_1_D));
        mins += ld_f16(w + GS_Q4_1_M) * ld_f16(x + GS_Q8_1_S);
    }
    return vaddvq_f32(acc) + mins;
}

/* q5_0/q5_1 quants of one block, before q5_0's offset of 16. */
static inline void quants5(const uint8_t *qs, const uint8_t *qh, uint8x16_t *lo, uint8x16_t *hi)
{
    const uint32_t bits = gs_quant_ld32(qh);
    nibbles(qs, lo, hi);
    *lo = vorrq_u8(*lo, fifth_bits16(bits));
    *hi = vorrq_u8(*hi, fifth_bits16(bits >> 16));
}

static float dot_q5_0(int64_t n, const void *vw, const void *vx)
{
    const uint8_t *w = vw, *x = vx;
    float32x4_t acc = vdupq_n_f32(0);
    const int8x16_t sixteen = vdupq_n_s8(16);
    for (int64_t b = 0; b < n / GS_QK; b++, w += GS_Q5_0_BYTES, x += GS_Q8_0_BYTES) {
        uint8x16_t lo, hi;
        quants5(w + GS_Q5_0_QS, w + GS_Q5_0_QH, &lo, &hi);
        const int32x4_t p = dot32(vsubq_s8(s8(lo), sixteen), vsubq_s8(s8(hi), sixteen),
                                  (const int8_t *)(x + GS_Q8_0_QS));
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(p), ld_f16(w + GS_Q5_0_D) * ld_f16(x + GS_Q8_0_D));
    }
    return vaddvq_f32(acc);
}

static float dot_q5_1(int64_t n, const void *vw, const void *vx)
{
    const uint8_t *w = vw, *x = vx;
    float32x4_t acc = vdupq_n_f32(0);
    float mins = 0;
    for (int64_t b = 0; b < n / GS_QK; b++, w += GS_Q5_1_BYTES, x += GS_Q8_1_BYTES) {
        uint8x16_t lo, hi;
        quants5(w + GS_Q5_1_QS, w + GS_Q5_1_QH, &lo, &hi);
        const int32x4_t p = dot32(s8(lo), s8(hi), (const int8_t *)(x + GS_Q8_1_QS));
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(p), ld_f16(w + GS_Q5_1_D) * ld_f16(x + GS_Q8_1_D));
        mins += ld_f16(w + GS_Q5_1_M) * ld_f16(x + GS_Q8_1_S);
    }
    return vaddvq_f32(acc) + mins;
}

static float dot_q8_0(int64_t n, const void *vw, const void *vx)
{
    const uint8_t *w = vw, *x = vx;
    float32x4_t acc = vdupq_n_f32(0);
    for (int64_t b = 0; b < n / GS_QK; b++, w += GS_Q8_0_BYTES, x += GS_Q8_0_BYTES) {
        const int8_t *q = (const int8_t *)(w + GS_Q8_0_QS);
        const int32x4_t p = dot32(vld1q_s8(q), vld1q_s8(q + 16), (const int8_t *)(x + GS_Q8_0_QS));
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(p), ld_f16(w + GS_Q8_0_D) * ld_f16(x + GS_Q8_0_D));
    }
    return vaddvq_f32(acc);
}

/* ---- K-quants against q8_K --------------------------------------------------------------------
 * A q8_K block: f32 scale d, 256 int8 quants, 16 int16 sums of 16 quants each. */

/* sum over the 16 groups g of m[g] * bsums[g], m >= 0 (the minimums' term). */
static inline int32_t mins_dot(const uint8_t *x, const uint8_t m[16])
{
    const int16x8_t b0 = vld1q_s16((const int16_t *)(x + GS_Q8_K_BSUMS));
    const int16x8_t b1 = vld1q_s16((const int16_t *)(x + GS_Q8_K_BSUMS + 16));
    const uint8x16_t mv = vld1q_u8(m);
    const int16x8_t m0 = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mv)));
    const int16x8_t m1 = vreinterpretq_s16_u16(vmovl_u8(vget_high_u8(mv)));
    int32x4_t s = vmull_s16(vget_low_s16(b0), vget_low_s16(m0));
    s = vmlal_s16(s, vget_high_s16(b0), vget_high_s16(m0));
    s = vmlal_s16(s, vget_low_s16(b1), vget_low_s16(m1));
    s = vmlal_s16(s, vget_high_s16(b1), vget_high_s16(m1));
    return vaddvq_s32(s);
}

/* acc += scale * (the 16 products of q with y): one scale group. */
static inline int32x4_t group16(int32x4_t acc, int8x16_t q, const int8_t *y, int scale)
{
    return vmlaq_n_s32(acc, dot_i8(vdupq_n_s32(0), q, vld1q_s8(y)), scale);
}

static float dot_q2_K(int64_t n, const void *vw, const void *vx)
{
    const uint8_t *w = vw, *x = vx;
    float sum = 0;
    for (int64_t b = 0; b < n / GS_QK_K; b++, w += GS_Q2_K_BYTES, x += GS_Q8_K_BYTES) {
        const uint8_t *sc = w + GS_Q2_K_SCALES;
        const int8_t *y = (const int8_t *)(x + GS_Q8_K_QS);
        uint8_t mins[16];
        vst1q_u8(mins, vshrq_n_u8(vld1q_u8(sc), 4));
        int32x4_t acc = vdupq_n_s32(0);
        /* Element 128h + 32k + l: bits 2k..2k+1 of qs[32h + l]; group 8h + 2k + l / 16. */
        for (int h = 0; h < 2; h++) {
            const uint8x16_t q0 = vld1q_u8(w + GS_Q2_K_QS + 32 * h);
            const uint8x16_t q1 = vld1q_u8(w + GS_Q2_K_QS + 32 * h + 16);
            const uint8x16_t three = vdupq_n_u8(3);
            const uint8x16_t s[4][2] = {
                {vandq_u8(q0, three), vandq_u8(q1, three)},
                {vandq_u8(vshrq_n_u8(q0, 2), three), vandq_u8(vshrq_n_u8(q1, 2), three)},
                {vandq_u8(vshrq_n_u8(q0, 4), three), vandq_u8(vshrq_n_u8(q1, 4), three)},
                {vshrq_n_u8(q0, 6), vshrq_n_u8(q1, 6)},
            };
            for (int k = 0; k < 4; k++) {
                const int g = 8 * h + 2 * k;
                acc = group16(acc, s8(s[k][0]), y + 16 * g, sc[g] & 0xf);
                acc = group16(acc, s8(s[k][1]), y + 16 * g + 16, sc[g + 1] & 0xf);
            }
        }
        const float dx = ld_f32(x + GS_Q8_K_D);
        sum += dx * ld_f16(w + GS_Q2_K_D) * (float)vaddvq_s32(acc) -
               dx * ld_f16(w + GS_Q2_K_DMIN) * (float)mins_dot(x, mins);
    }
    return sum;
}

static float dot_q3_K(int64_t n, const void *vw, const void *vx)
{
    const uint8_t *w = vw, *x = vx;
    float sum = 0;
    for (int64_t b = 0; b < n / GS_QK_K; b++, w += GS_Q3_K_BYTES, x += GS_Q8_K_BYTES) {
        int scale[16];
        for (int g = 0; g < 16; g++)
            scale[g] = gs_quant_q3_K_scale(w + GS_Q3_K_SCALES, g);
        const int8_t *y = (const int8_t *)(x + GS_Q8_K_QS);
        const uint8x16_t hm0 = vld1q_u8(w + GS_Q3_K_HMASK), hm1 = vld1q_u8(w + GS_Q3_K_HMASK + 16);
        const uint8x16_t three = vdupq_n_u8(3), four = vdupq_n_u8(4);
        int32x4_t acc = vdupq_n_s32(0);
        /* As q2_K, less 4 where bit 4h + k of hmask[l] is clear. */
        for (int h = 0; h < 2; h++) {
            const uint8x16_t q0 = vld1q_u8(w + GS_Q3_K_QS + 32 * h);
            const uint8x16_t q1 = vld1q_u8(w + GS_Q3_K_QS + 32 * h + 16);
            for (int k = 0; k < 4; k++) {
                const int shift = 2 * k, g = 8 * h + 2 * k;
                const uint8x16_t bit = vdupq_n_u8((uint8_t)(1u << (4 * h + k)));
                const int8x16_t v0 = vsubq_s8(
                    s8(vandq_u8(vshlq_u8(q0, vdupq_n_s8((int8_t)-shift)), three)),
                    s8(vbicq_u8(four, vtstq_u8(hm0, bit))));
                const int8x16_t v1 = vsubq_s8(
                    s8(vandq_u8(vshlq_u8(q1, vdupq_n_s8((int8_t)-shift)), three)),
                    s8(vbicq_u8(four, vtstq_u8(hm1, bit))));
                acc = group16(acc, v0, y + 16 * g, scale[g]);
                acc = group16(acc, v1, y + 16 * g + 16, scale[g + 1]);
            }
        }
        sum += ld_f32(x + GS_Q8_K_D) * ld_f16(w + GS_Q3_K_D) * (float)vaddvq_s32(acc);
    }
    return sum;
}

/* The eight 6-bit scales and minimums of a q4_K/q5_K block; a minimum
 * covers 32 elements, two of q8_K's 16-element sums, so it is given twice. */
static inline void k4_scales(const uint8_t *sc, int scale[8], uint8_t mins16[16])
{
    for (int g = 0; g < 8; g++) {
        uint8_t s, m;
        gs_quant_k4_scale_min(sc, g, &s, &m);
        scale[g] = s;
        mins16[2 * g] = mins16[2 * g + 1] = m;
    }
}

/* q4_K (qh NULL) and q5_K: element 64j + l (l < 32) is the low nibble of
 * qs[32j + l], element 64j + 32 + l the high one; q5_K's fifth bits are bits
 * 2j and 2j + 1 of qh[l]. */
static float dot_k45(int64_t n, const void *vw, const void *vx, int block_bytes, int off_qs,
                     int off_qh)
{
    const uint8_t *w = vw, *x = vx;
    float sum = 0;
    const uint8x16_t m4 = vdupq_n_u8(0x0f), bit5 = vdupq_n_u8(0x10);
    for (int64_t b = 0; b < n / GS_QK_K; b++, w += block_bytes, x += GS_Q8_K_BYTES) {
        int scale[8];
        uint8_t mins[16];
        k4_scales(w + GS_Q4_K_SCALES, scale, mins);
        const int8_t *y = (const int8_t *)(x + GS_Q8_K_QS);
        uint8x16_t qh0 = vdupq_n_u8(0), qh1 = vdupq_n_u8(0);
        if (off_qh) {
            qh0 = vld1q_u8(w + off_qh);
            qh1 = vld1q_u8(w + off_qh + 16);
        }
        int32x4_t acc = vdupq_n_s32(0);
        for (int j = 0; j < 4; j++) {
            const uint8x16_t v0 = vld1q_u8(w + off_qs + 32 * j);
            const uint8x16_t v1 = vld1q_u8(w + off_qs + 32 * j + 16);
            uint8x16_t lo0 = vandq_u8(v0, m4), lo1 = vandq_u8(v1, m4);
            uint8x16_t hi0 = vshrq_n_u8(v0, 4), hi1 = vshrq_n_u8(v1, 4);
            if (off_qh) {
                const uint8x16_t bl = vdupq_n_u8((uint8_t)(1u << (2 * j)));
                const uint8x16_t bh = vdupq_n_u8((uint8_t)(2u << (2 * j)));
                lo0 = vorrq_u8(lo0, vandq_u8(vtstq_u8(qh0, bl), bit5));
                lo1 = vorrq_u8(lo1, vandq_u8(vtstq_u8(qh1, bl), bit5));
                hi0 = vorrq_u8(hi0, vandq_u8(vtstq_u8(qh0, bh), bit5));
                hi1 = vorrq_u8(hi1, vandq_u8(vtstq_u8(qh1, bh), bit5));
            }
            acc = vmlaq_n_s32(acc, dot32(s8(lo0), s8(lo1), y + 64 * j), scale[2 * j]);
            acc = vmlaq_n_s32(acc, dot32(s8(hi0), s8(hi1), y + 64 * j + 32), scale[2 * j + 1]);
        }
        const float dx = ld_f32(x + GS_Q8_K_D);
        sum += dx * ld_f16(w + GS_Q4_K_D) * (float)vaddvq_s32(acc) -
               dx * ld_f16(w + GS_Q4_K_DMIN) * (float)mins_dot(x, mins);
    }
    return sum;
}

static float dot_q4_K(int64_t n, const void *w, const void *x)
{
    return dot_k45(n, w, x, GS_Q4_K_BYTES, GS_Q4_K_QS, 0);
}

static float dot_q5_K(int64_t n, const void *w, const void *x)
{
    return dot_k45(n, w, x, GS_Q5_K_BYTES, GS_Q5_K_QS, GS_Q5_K_QH);
}

/* q6_K, half h of the block (128 elements): element 128h + 32k + l takes its
 * low four bits from ql[64h + l + 32 (k & 1)] (low nibble for k < 2, high
 * for k >= 2) and its top two from bits 2k..2k+1 of qh[32h + l]; less 32. */
static float dot_q6_K(int64_t n, const void *vw, const void *vx)
{
    const uint8_t *w = vw, *x = vx;
    float sum = 0;
    const uint8x16_t m4 = vdupq_n_u8(0x0f), m2 = vdupq_n_u8(0x30);
    const int8x16_t off = vdupq_n_s8(32);
    for (int64_t b = 0; b < n / GS_QK_K; b++, w += GS_Q6_K_BYTES, x += GS_Q8_K_BYTES) {
        const int8_t *sc = (const int8_t *)(w + GS_Q6_K_SCALES);
        int32x4_t acc = vdupq_n_s32(0);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = w + GS_Q6_K_QL + 64 * h, *qh = w + GS_Q6_K_QH + 32 * h;
            const int8_t *y = (const int8_t *)(x + GS_Q8_K_QS) + 128 * h;
            const uint8x16_t l[4] = {vld1q_u8(ql), vld1q_u8(ql + 16), vld1q_u8(ql + 32),
                                     vld1q_u8(ql + 48)};
            const uint8x16_t hb[2] = {vld1q_u8(qh), vld1q_u8(qh + 16)};
            for (int k = 0; k < 4; k++) {
                for (int half = 0; half < 2; half++) {
                    const uint8x16_t lv = l[2 * (k & 1) + half];
                    const uint8x16_t lo = k < 2 ? vandq_u8(lv, m4) : vshrq_n_u8(lv, 4);
                    /* bits 2k..2k+1 of qh moved to bits 4..5 */
                    const uint8x16_t hi =
                        vandq_u8(vshlq_u8(hb[half], vdupq_n_s8((int8_t)(4 - 2 * k))), m2);
                    const int8x16_t q = vsubq_s8(s8(vorrq_u8(lo, hi)), off);
                    const int g = 8 * h + 2 * k + half;
                    acc = group16(acc, q, y + 32 * k + 16 * half, sc[g]);
                }
            }
        }
        sum += ld_f32(x + GS_Q8_K_D) * ld_f16(w + GS_Q6_K_D) * (float)vaddvq_s32(acc);
    }
    return sum;
}

/* ---- plain floats ---------------------------------------------------------------------------- */

static inline float32x4_t ld4_f16(const uint16_t *p)
{
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
}

static inline float32x4_t ld4_bf16(const uint16_t *p)
{
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
}

/* sum a[i] * b[i] with b f32 or f16: four accumulators of four lanes, then
 * the tail in order. A row and its exact f32 copy give the same sum. */
static inline float dot_f32_any(const float *a, const void *b, int64_t n, bool f16)
{
    float32x4_t acc[4] = {vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 4; j++) {
            const float32x4_t bv = f16 ? ld4_f16((const uint16_t *)b + i + 4 * j)
                                       : vld1q_f32((const float *)b + i + 4 * j);
            acc[j] = vfmaq_f32(acc[j], vld1q_f32(a + i + 4 * j), bv);
        }
    for (; i + 4 <= n; i += 4) {
        const float32x4_t bv =
            f16 ? ld4_f16((const uint16_t *)b + i) : vld1q_f32((const float *)b + i);
        acc[0] = vfmaq_f32(acc[0], vld1q_f32(a + i), bv);
    }
    float sum = vaddvq_f32(vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3])));
    for (; i < n; i++)
        sum += a[i] * (f16 ? gs_fp16_to_f32(((const uint16_t *)b)[i]) : ((const float *)b)[i]);
    return sum;
}

static float dot_f32(int64_t n, const void *w, const void *x)
{
    return dot_f32_any(w, x, n, false);
}

/* f16 and bf16 weights with activations of the same format. */
static float dot_h16(int64_t n, const uint16_t *w, const uint16_t *x, bool bf16)
{
    float32x4_t acc[2] = {vdupq_n_f32(0), vdupq_n_f32(0)};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 2; j++) {
            const uint16_t *wp = w + i + 4 * j, *xp = x + i + 4 * j;
            acc[j] = bf16 ? vfmaq_f32(acc[j], ld4_bf16(wp), ld4_bf16(xp))
                          : vfmaq_f32(acc[j], ld4_f16(wp), ld4_f16(xp));
        }
    float sum = vaddvq_f32(vaddq_f32(acc[0], acc[1]));
    for (; i < n; i++)
        sum += bf16 ? gs_bf16_to_f32(w[i]) * gs_bf16_to_f32(x[i])
                    : gs_fp16_to_f32(w[i]) * gs_fp16_to_f32(x[i]);
    return sum;
}

static float dot_f16(int64_t n, const void *w, const void *x)
{
    return dot_h16(n, w, x, false);
}

static float dot_bf16(int64_t n, const void *w, const void *x)
{
    return dot_h16(n, w, x, true);
}

/* ---- table ------------------------------------------------------------------------------------ */

GS_CPU_GEMM_OF_DOT(q4_0)
GS_CPU_GEMM_OF_DOT(q4_1)
GS_CPU_GEMM_OF_DOT(q5_0)
GS_CPU_GEMM_OF_DOT(q5_1)
GS_CPU_GEMM_OF_DOT(q8_0)
GS_CPU_GEMM_OF_DOT(q2_K)
GS_CPU_GEMM_OF_DOT(q3_K)
GS_CPU_GEMM_OF_DOT(q4_K)
GS_CPU_GEMM_OF_DOT(q5_K)
GS_CPU_GEMM_OF_DOT(q6_K)
GS_CPU_GEMM_OF_DOT(f32)
GS_CPU_GEMM_OF_DOT(f16)
GS_CPU_GEMM_OF_DOT(bf16)

#ifdef GS_CPU_DOTPROD
#define KERNELS_FILL gs_cpu__kernels_neon_dot_fill
#else
#define KERNELS_FILL gs_cpu__kernels_neon_fill
#endif

void KERNELS_FILL(struct gs_cpu_kernels *t)
{
#define ROW(ty, name) t[ty] = (struct gs_cpu_kernels){.dot = dot_##name, .gemm = gemm_##name}
    ROW(GS_TYPE_Q4_0, q4_0);
    ROW(GS_TYPE_Q4_1, q4_1);
    ROW(GS_TYPE_Q5_0, q5_0);
    ROW(GS_TYPE_Q5_1, q5_1);
    ROW(GS_TYPE_Q8_0, q8_0);
    ROW(GS_TYPE_Q2_K, q2_K);
    ROW(GS_TYPE_Q3_K, q3_K);
    ROW(GS_TYPE_Q4_K, q4_K);
    ROW(GS_TYPE_Q5_K, q5_K);
    ROW(GS_TYPE_Q6_K, q6_K);
    ROW(GS_TYPE_F32, f32);
    ROW(GS_TYPE_F16, f16);
    ROW(GS_TYPE_BF16, bf16);
#undef ROW
}

#ifndef GS_CPU_DOTPROD /* one copy of the vector helpers: they use no int8 products */

static void vh_f32_to_f16(const float *x, uint16_t *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) /* round to nearest even, the FPCR default */
        vst1_u16(y + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(x + i))));
    for (; i < n; i++)
        y[i] = gs_f32_to_fp16(x[i]);
}

static void vh_f16_to_f32(const uint16_t *x, float *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        vst1q_f32(y + i, ld4_f16(x + i));
    for (; i < n; i++)
        y[i] = gs_fp16_to_f32(x[i]);
}

static float vh_dot_f32(const float *a, const float *b, int64_t n)
{
    return dot_f32_any(a, b, n, false);
}

static float vh_dot_f32_f16(const float *a, const uint16_t *b, int64_t n)
{
    return dot_f32_any(a, b, n, true);
}

static void vh_dots_f16(const float *q, const uint16_t *k, size_t stride, int n_rows,
                        int64_t n, float *out)
{
    for (int s = 0; s < n_rows; s++)
        out[s] = dot_f32_any(q, k + (size_t)s * stride, n, true);
}

static void vh_dots_f32(const float *q, const float *k, size_t stride, int n_rows,
                        int64_t n, float *out)
{
    for (int s = 0; s < n_rows; s++)
        out[s] = dot_f32_any(q, k + (size_t)s * stride, n, false);
}

/* acc[i] += sum_s w[s] * v[s][i], 16 columns at a time so that one V row's
 * four multiply-adds are independent. */
static inline void axpys(float *acc, const float *w, const void *v, size_t stride, int n_rows,
                         int64_t n, bool f16)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        float32x4_t a[4];
        for (int j = 0; j < 4; j++)
            a[j] = vld1q_f32(acc + i + 4 * j);
        for (int s = 0; s < n_rows; s++) {
            const size_t at = (size_t)s * stride + (size_t)i;
            for (int j = 0; j < 4; j++) {
                const float32x4_t vv = f16 ? ld4_f16((const uint16_t *)v + at + 4 * j)
                                           : vld1q_f32((const float *)v + at + 4 * j);
                a[j] = vfmaq_n_f32(a[j], vv, w[s]);
            }
        }
        for (int j = 0; j < 4; j++)
            vst1q_f32(acc + i + 4 * j, a[j]);
    }
    for (; i < n; i++)
        for (int s = 0; s < n_rows; s++) {
            const size_t k = (size_t)s * stride + (size_t)i;
            acc[i] += w[s] * (f16 ? gs_fp16_to_f32(((const uint16_t *)v)[k]) : ((const float *)v)[k]);
        }
}

static void vh_axpys_f16(float *acc, const float *w, const uint16_t *v, size_t stride,
                         int n_rows, int64_t n)
{
    axpys(acc, w, v, stride, n_rows, n, true);
}

static void vh_axpys_f32(float *acc, const float *w, const float *v, size_t stride,
                         int n_rows, int64_t n)
{
    axpys(acc, w, v, stride, n_rows, n, false);
}

void gs_cpu__helpers_neon_fill(struct gs_cpu_helpers *h)
{
    h->f32_to_f16 = vh_f32_to_f16;
    h->f16_to_f32 = vh_f16_to_f32;
    h->dot_f32 = vh_dot_f32;
    h->dot_f32_f16 = vh_dot_f32_f16;
    h->dots_f16 = vh_dots_f16;
    h->dots_f32 = vh_dots_f32;
    h->axpys_f16 = vh_axpys_f16;
    h->axpys_f32 = vh_axpys_f32;
}

#endif /* !GS_CPU_DOTPROD */
