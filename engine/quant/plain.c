/* engine/quant/plain.c - the unblocked float formats: f32, f16 and bf16.
 * f32 is a (byte-order independent) copy; f16 and bf16 convert each value with the exact, round-to-
 * nearest-even conversions of engine/base.h, so f16/bf16 values round-trip
 * bit for bit (signed zeros, infinities and NaN payloads included). */
#include "engine/quant/internal.h"

void gs_quant__f32_to_f32(const void *src, float *dst, int64_t n)
{
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = gs_quant_ldf32(p + 4 * i);
}

void gs_quant__f32_from_f32(const float *src, void *dst, int64_t n)
{
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++)
        gs_quant__stf32(p + 4 * i, src[i]);
}

void gs_quant__f16_to_f32(const void *src, float *dst, int64_t n)
{
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = gs_fp16_to_f32(gs_quant_ld16(p + 2 * i));
}

void gs_quant__f16_from_f32(const float *src, void *dst, int64_t n)
{
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++)
        gs_quant__st16(p + 2 * i, gs_f32_to_fp16(src[i]));
}

void gs_quant__bf16_to_f32(const void *src, float *dst, int64_t n)
{
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = gs_bf16_to_f32(gs_quant_ld16(p + 2 * i));
}

void gs_quant__bf16_from_f32(const float *src, void *dst, int64_t n)
{
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++)
        gs_quant__st16(p + 2 * i, gs_f32_to_bf16(src[i]));
}
