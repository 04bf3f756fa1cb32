/*
 * engine/quant/quant.c - the type traits table and the table-driven entry
 * points of engine/quant.h. Adding a format is one row here plus its kernels;
 * nothing else switches on the type.
 */
#include "engine/quant/internal.h"

#include <strings.h>

#define KERNELS(ty) .to_f32 = gs_quant__##ty##_to_f32, .from_f32 = gs_quant__##ty##_from_f32

/*
 * One row per GGUF type id. Rows left empty (4, 5, 31..33, 36..38) are ids
 * that ggml retired; gs_type_traits() reports them as unknown. Unsupported rows
 * still carry the on-disk block geometry so that sizes can be computed and a
 * file can be refused by name.
 *
 * vec_dot_type records what ggml's CPU backend quantizes activations to for a
 * dot product with a weight of that type: q8_0 for q4_0/q5_0/q8_0, q8_1 for
 * the formats with a minimum (q4_1/q5_1), q8_K for the super-block formats.
 */
/* clang-format off */
static const struct gs_type_traits type_traits[GS_TYPE_COUNT] = {
    [GS_TYPE_F32] = {.name = "f32", .supported = true, .block_size = 1, .block_bytes = 4,
                     KERNELS(f32), .vec_dot_type = GS_TYPE_F32},
    [GS_TYPE_F16] = {.name = "f16", .supported = true, .block_size = 1, .block_bytes = 2,
                     KERNELS(f16), .vec_dot_type = GS_TYPE_F16},
    [GS_TYPE_BF16] = {.name = "bf16", .supported = true, .block_size = 1, .block_bytes = 2,
                      KERNELS(bf16), .vec_dot_type = GS_TYPE_BF16},

    [GS_TYPE_Q4_0] = {.name = "q4_0", .supported = true, .quantized = true, .block_size = 32,
                      .block_bytes = GS_Q4_0_BYTES, KERNELS(q4_0), .vec_dot_type = GS_TYPE_Q8_0},
    [GS_TYPE_Q4_1] = {.name = "q4_1", .supported = true, .quantized = true, .block_size = 32,
                      .block_bytes = GS_Q4_1_BYTES, KERNELS(q4_1), .vec_dot_type = GS_TYPE_Q8_1},
    [GS_TYPE_Q5_0] = {.name = "q5_0", .supported = true, .quantized = true, .block_size = 32,
                      .block_bytes = GS_Q5_0_BYTES, KERNELS(q5_0), .vec_dot_type = GS_TYPE_Q8_0},
    [GS_TYPE_Q5_1] = {.name = "q5_1", .supported = true, .quantized = true, .block_size = 32,
                      .block_bytes = GS_Q5_1_BYTES, KERNELS(q5_1), .vec_dot_type = GS_TYPE_Q8_1},
    [GS_TYPE_Q8_0] = {.name = "q8_0", .supported = true, .quantized = true, .block_size = 32,
                      .block_bytes = GS_Q8_0_BYTES, KERNELS(q8_0), .vec_dot_type = GS_TYPE_Q8_0,
                      .act_from_f32 = gs_quant__q8_0_act_from_f32},
    [GS_TYPE_Q8_1] = {.name = "q8_1", .supported = true, .quantized = true, .block_size = 32,
                      .block_bytes = GS_Q8_1_BYTES, KERNELS(q8_1), .vec_dot_type = GS_TYPE_Q8_1,
                      .act_from_f32 = gs_quant__q8_1_act_from_f32},

    [GS_TYPE_Q2_K] = {.name = "q2_K", .supported = true, .quantized = true,
                      .block_size = GS_QK_K, .block_bytes = GS_Q2_K_BYTES, KERNELS(q2_K),
                      .vec_dot_type = GS_TYPE_Q8_K},
    [GS_TYPE_Q3_K] = {.name = "q3_K", .supported = true, .quantized = true,
                      .block_size = GS_QK_K, .block_bytes = GS_Q3_K_BYTES, KERNELS(q3_K),
                      .vec_dot_type = GS_TYPE_Q8_K},
    [GS_TYPE_Q4_K] = {.name = "q4_K", .supported = true, .quantized = true,
                      .block_size = GS_QK_K, .block_bytes = GS_Q4_K_BYTES, KERNELS(q4_K),
                      .vec_dot_type = GS_TYPE_Q8_K},
    [GS_TYPE_Q5_K] = {.name = "q5_K", .supported = true, .quantized = true,
                      .block_size = GS_QK_K, .block_bytes = GS_Q5_K_BYTES, KERNELS(q5_K),
                      .vec_dot_type = GS_TYPE_Q8_K},
    [GS_TYPE_Q6_K] = {.name = "q6_K", .supported = true, .quantized = true,
                      .block_size = GS_QK_K, .block_bytes = GS_Q6_K_BYTES, KERNELS(q6_K),
                      .vec_dot_type = GS_TYPE_Q8_K},
    [GS_TYPE_Q8_K] = {.name = "q8_K", .supported = true, .quantized = true,
                      .block_size = GS_QK_K, .block_bytes = GS_Q8_K_BYTES, KERNELS(q8_K),
                      .vec_dot_type = GS_TYPE_Q8_K},

    /* Known on disk, not implemented (2026-11: sizes as in ggml-common.h). */
    [GS_TYPE_IQ2_XXS] = {.name = "iq2_xxs", .quantized = true, .block_size = GS_QK_K,
                         .block_bytes = 66, .vec_dot_type = GS_TYPE_Q8_K},
    [GS_TYPE_IQ2_XS] = {.name = "iq2_xs", .quantized = true, .block_size = GS_QK_K,
                        .block_bytes = 74, .vec_dot_type = GS_TYPE_Q8_K},
    [GS_TYPE_IQ3_XXS] = {.name = "iq3_xxs", .quantized = true, .block_size = GS_QK_K,
                         .block_bytes = 98, .vec_dot_type = GS_TYPE_Q8_K},
    [GS_TYPE_IQ1_S] = {.name = "iq1_s", .quantized = true, .block_size = GS_QK_K,
                       .block_bytes = 50, .vec_dot_type = GS_TYPE_Q8_K},
    [GS_TYPE_IQ4_NL] = {.name = "iq4_nl", .quantized = true, .block_size = 32, .block_bytes = 18,
                        .vec_dot_type = GS_TYPE_Q8_0},
    [GS_TYPE_IQ3_S] = {.name = "iq3_s", .quantized = true, .block_size = GS_QK_K,
                       .block_bytes = 110, .vec_dot_type = GS_TYPE_Q8_K},
    [GS_TYPE_IQ2_S] = {.name = "iq2_s", .quantized = true, .block_size = GS_QK_K,
                       .block_bytes = 82, .vec_dot_type = GS_TYPE_Q8_K},
    [GS_TYPE_IQ4_XS] = {.name = "iq4_xs", .quantized = true, .block_size = GS_QK_K,
                        .block_bytes = 136, .vec_dot_type = GS_TYPE_Q8_K},
    [GS_TYPE_IQ1_M] = {.name = "iq1_m", .quantized = true, .block_size = GS_QK_K,
                       .block_bytes = 56, .vec_dot_type = GS_TYPE_Q8_K},
    [GS_TYPE_TQ1_0] = {.name = "tq1_0", .quantized = true, .block_size = GS_QK_K,
                       .block_bytes = 54, .vec_dot_type = GS_TYPE_Q8_K},
    [GS_TYPE_TQ2_0] = {.name = "tq2_0", .quantized = true, .block_size = GS_QK_K,
                       .block_bytes = 66, .vec_dot_type = GS_TYPE_Q8_K},
    [GS_TYPE_MXFP4] = {.name = "mxfp4", .quantized = true, .block_size = 32, .block_bytes = 17,
                       .vec_dot_type = GS_TYPE_Q8_0},

    [GS_TYPE_I8] = {.name = "i8", .block_size = 1, .block_bytes = 1, .vec_dot_type = GS_TYPE_I8},
    [GS_TYPE_I16] = {.name = "i16", .block_size = 1, .block_bytes = 2,
                     .vec_dot_type = GS_TYPE_I16},
    [GS_TYPE_I32] = {.name = "i32", .block_size = 1, .block_bytes = 4,
                     .vec_dot_type = GS_TYPE_I32},
    [GS_TYPE_I64] = {.name = "i64", .block_size = 1, .block_bytes = 8,
                     .vec_dot_type = GS_TYPE_I64},
    [GS_TYPE_F64] = {.name = "f64", .block_size = 1, .block_bytes = 8,
                     .vec_dot_type = GS_TYPE_F64},
};
/* clang-format on */

const struct gs_type_traits *gs_type_traits(int32_t t)
{
    if (t < 0 || t >= GS_TYPE_COUNT || !type_traits[t].name)
        return NULL;
    return &type_traits[t];
}

gs_from_f32_fn gs_activation_quantizer(enum gs_type t)
{
    const struct gs_type_traits *tt = gs_type_traits(t);
    if (!tt || !tt->supported)
        return NULL;
    return tt->act_from_f32 ? tt->act_from_f32 : tt->from_f32;
}

const char *gs_type_name(int32_t t)
{
    const struct gs_type_traits *tt = gs_type_traits(t);
    return tt ? tt->name : "unknown";
}

enum gs_status gs_type_from_name(const char *name, enum gs_type *out)
{
    if (!name)
        return GS_NOTFOUND;
    for (int32_t t = 0; t < GS_TYPE_COUNT; t++) {
        if (type_traits[t].name && strcasecmp(type_traits[t].name, name) == 0) {
            *out = (enum gs_type)t;
            return GS_OK;
        }
    }
    return GS_NOTFOUND;
}

enum gs_status gs_type_row_bytes(int32_t t, int64_t n, uint64_t *out)
{
    const struct gs_type_traits *tt = gs_type_traits(t);
    if (!tt || n < 0)
        return GS_INVAL;
    if (!tt->supported)
        return GS_UNSUPPORTED;
    if (n % tt->block_size != 0)
        return GS_FORMAT;
    uint64_t bytes;
    if (gs_mul_overflow((uint64_t)(n / tt->block_size), (uint64_t)tt->block_bytes, &bytes))
        return GS_FORMAT;
    *out = bytes;
    return GS_OK;
}

/* Traits of t when it can be converted n elements at a time, else NULL with
 * *status set. */
static const struct gs_type_traits *convertible(enum gs_type t, int64_t n, bool quantize,
                                                enum gs_status *status)
{
    const struct gs_type_traits *tt = gs_type_traits((int32_t)t);
    if (!tt) {
        *status = GS_INVAL;
        return NULL;
    }
    const bool has_kernel = quantize ? tt->from_f32 != NULL : tt->to_f32 != NULL;
    if (!tt->supported || !has_kernel) {
        *status = GS_UNSUPPORTED;
        return NULL;
    }
    if (n < 0 || n % tt->block_size != 0) {
        *status = GS_INVAL;
        return NULL;
    }
    return tt;
}

enum gs_status gs_dequantize(enum gs_type t, const void *src, float *dst, int64_t n)
{
    enum gs_status status;
    const struct gs_type_traits *tt = convertible(t, n, false, &status);
    if (!tt)
        return status;
    tt->to_f32(src, dst, n);
    return GS_OK;
}

/* Whether every block of n elements at q decodes to finite values. */
static bool decodes_finite(const struct gs_type_traits *tt, const void *q, int64_t n)
{
    float block[GS_QK_K];
    if (GS_NEVER(tt->block_size > GS_QK_K))
        return true;
    const uint8_t *b = q;
    for (int64_t i = 0; i < n; i += tt->block_size, b += tt->block_bytes) {
        tt->to_f32(b, block, tt->block_size);
        for (int32_t j = 0; j < tt->block_size; j++) {
            if (!isfinite(block[j]))
                return false;
        }
    }
    return true;
}

enum gs_status gs_quantize(enum gs_type t, const float *src, void *dst, int64_t n)
{
    enum gs_status status;
    const struct gs_type_traits *tt = convertible(t, n, true, &status);
    if (!tt)
        return status;
    /* A block scale computed from Inf or NaN poisons the whole block; refuse
     * instead of writing it. The plain float types carry such values exactly. */
    if (tt->quantized) {
        for (int64_t i = 0; i < n; i++) {
            if (!isfinite(src[i]))
                return GS_NUMERIC;
        }
    }
    tt->from_f32(src, dst, n);
    /* Values too large for a format's f16 scales (or its f16 minimum) give an
     * infinite scale, and 0 * Inf decodes as NaN: refuse rather than hand back
     * an encoding that poisons every dot product it enters. */
    if (tt->quantized && !decodes_finite(tt, dst, n))
        return GS_NUMERIC;
    return GS_OK;
}
