/*
 * engine/quant.h - the weight formats graphserve understands: one table of type
 * traits, indexed by enum gs_type, for every GGUF tensor type.
 *
 * The numeric values of enum gs_type are the on-disk GGUF/ggml type ids, so a
 * type read from a file is looked up directly. Types that exist on disk but are
 * not implemented (I-quants, ternary, ...) have a row with .supported = false
 * and a name, so that the GGUF reader can say "type iq2_xxs is not supported
 * yet" instead of "unknown type".
 *
 * Block layout: a row of n elements of a type is n / block_size consecutive
 * blocks of block_bytes each; n must be a multiple of block_size.
 *
 * Ownership: the table is static and const. Conversion functions write into
 * caller-provided buffers and allocate nothing. Thread-safe.
 */
#ifndef GS_QUANT_H
#define GS_QUANT_H

#include "engine/base.h"

enum gs_type {
    GS_TYPE_F32 = 0,
    GS_TYPE_F16 = 1,
    GS_TYPE_Q4_0 = 2,
    GS_TYPE_Q4_1 = 3,
    /* 4 and 5 were Q4_2 and Q4_3, removed from the format long ago */
    GS_TYPE_Q5_0 = 6,
    GS_TYPE_Q5_1 = 7,
    GS_TYPE_Q8_0 = 8,
    GS_TYPE_Q8_1 = 9,
    GS_TYPE_Q2_K = 10,
    GS_TYPE_Q3_K = 11,
    GS_TYPE_Q4_K = 12,
    GS_TYPE_Q5_K = 13,
    GS_TYPE_Q6_K = 14,
    GS_TYPE_Q8_K = 15,
    GS_TYPE_IQ2_XXS = 16,
    GS_TYPE_IQ2_XS = 17,
    GS_TYPE_IQ3_XXS = 18,
    GS_TYPE_IQ1_S = 19,
    GS_TYPE_IQ4_NL = 20,
    GS_TYPE_IQ3_S = 21,
    GS_TYPE_IQ2_S = 22,
    GS_TYPE_IQ4_XS = 23,
    GS_TYPE_I8 = 24,
    GS_TYPE_I16 = 25,
    GS_TYPE_I32 = 26,
    GS_TYPE_I64 = 27,
    GS_TYPE_F64 = 28,
    GS_TYPE_IQ1_M = 29,
    GS_TYPE_BF16 = 30,
    /* 31..33 were Q4_0_4_4, Q4_0_4_8, Q4_0_8_8 (repacked, removed) */
    GS_TYPE_TQ1_0 = 34,
    GS_TYPE_TQ2_0 = 35,
    /* 36..38 were IQ4_NL_4_4, IQ4_NL_4_8, IQ4_NL_8_8 (removed) */
    GS_TYPE_MXFP4 = 39,
    GS_TYPE_COUNT = 40
};

/* Super-block size of the K-quants. */
#define GS_QK_K 256

/* Converts n values (a multiple of block_size) from blocks at src to floats at dst. */
typedef void (*gs_to_f32_fn)(const void *src, float *dst, int64_t n);
/* Quantizes n floats (a multiple of block_size) into blocks at dst. Reference
 * (scalar, deterministic) quantization: the same input gives the same bytes. */
typedef void (*gs_from_f32_fn)(const float *src, void *dst, int64_t n);

struct gs_type_traits {
    const char *name;        /* lower case as in GGUF tooling: "q4_0", "q4_K", "f16" */
    bool supported;          /* false: known on disk, not implemented (refused at load) */
    bool quantized;          /* block-quantized (not a plain float/int type) */
    int32_t block_size;      /* elements per block (1 for plain types) */
    int32_t block_bytes;     /* bytes per block */
    gs_to_f32_fn to_f32;     /* NULL when !supported */
    gs_from_f32_fn from_f32; /* NULL where no reference quantizer exists yet */
    enum gs_type vec_dot_type; /* type activations are quantized to for dot products */
    /* How a dot product's activations are rounded into this type when that is not
     * from_f32 (q8_0, q8_1); NULL: from_f32. Read it through gs_activation_quantizer. */
    gs_from_f32_fn act_from_f32;
};

/* Returns the traits of type t, or NULL when t is not a type id at all. */
const struct gs_type_traits *gs_type_traits(int32_t t);

/* Name of a type id ("q4_K"), "unknown" when not a type id. */
const char *gs_type_name(int32_t t);

/* Looks a type up by name, case-insensitively ("Q4_K", "q8_0", "f32").
 * Returns GS_OK and *out, or GS_NOTFOUND. */
enum gs_status gs_type_from_name(const char *name, enum gs_type *out);

/*
 * Bytes taken by a row of n elements of type t; sets *out. Fails with
 * GS_FORMAT when n is not a multiple of the block size, GS_UNSUPPORTED for an
 * unsupported type, GS_INVAL for an unknown type id or n < 0.
 */
enum gs_status gs_type_row_bytes(int32_t t, int64_t n, uint64_t *out);

/* Dequantizes n elements of type t (n a multiple of the block size). The type
 * must be supported; returns GS_UNSUPPORTED otherwise, GS_INVAL for an unknown
 * type id or an n that is negative or not a multiple of the block size. src
 * needs no alignment. Results are bit-identical to ggml's reference
 * dequantization. Allocates nothing. */
enum gs_status gs_dequantize(enum gs_type t, const void *src, float *dst, int64_t n);

/* Quantizes n floats into type t; GS_UNSUPPORTED when t has no quantizer,
 * GS_INVAL as for gs_dequantize. For block-quantized types, GS_NUMERIC when src
 * holds an Inf or NaN (nothing written) or values too large for the format's
 * f16 scales (dst written but unusable); magnitudes up to 30000 always fit.
 * Otherwise every byte of the destination is written, deterministically, and
 * the bytes equal llama.cpp's reference quantization (no importance matrix).
 * Allocates nothing. */
enum gs_status gs_quantize(enum gs_type t, const float *src, void *dst, int64_t n);

/* The quantizer a dot product's activations go through into type t (a vec_dot_type),
 * for every backend: llama.cpp's CPU form. For q8_0 and q8_1 that differs from the
 * reference quantizer above, which is how llama.cpp quantizes weights into files:
 * the scale's inverse is 127 / amax rather than 1 / (amax / 127), and quants round
 * half to even rather than away from zero. NULL where t has no quantizer. */
gs_from_f32_fn gs_activation_quantizer(enum gs_type t);

#endif /* GS_QUANT_H */
