/*
 * engine/cpu/kernels_scalar.c - portable dot products of every weight type
 * with its activation format, in integer arithmetic where the formats are
 * integer (as llama.cpp's reference vec_dot does), and the generic tiled
 * product. These are the fallback on every CPU and the reference the SIMD
 * kernels are tested against.
 *
 * Block layouts come from engine/quant/blocks.h: they are facts of the GGUF
 * format, kept in one place.
 */
#include "engine/cpu/cpu.h"
#include "engine/quant/blocks.h"

/* Tokens per block of the generic tiled product: a weight row is reused for
 * this many activation rows while it sits in L1. */
#define GEMM_TOKEN_BLOCK 16

static inline int nib(const uint8_t *qs, int j)
{
    return j < 16 ? qs[j] & 0x0f : qs[j - 16] >> 4;
}

/* ---- 32-element formats --------------------------------------------------------- */

static float dot_q4_0(int64_t n, const void *vw, const void *vx)
{
    const uint8_t *w = vw, *x = vx;
    float sum = 0;
    for (int64_t b = 0; b < n / GS_QK; b++, w += GS_Q4_0_BYTES, x += GS_Q8_0_BYTES) {
        const int8_t *y = (const int8_t *)(x + GS_Q8_0_QS);
        int isum = 0;
        for (int j = 0; j < GS_QK; j++)
            isum += (nib(w + GS_Q4_0_QS, j) - 8) * y[j];
        sum += (float)isum * gs_quant_ldf16(w + GS_Q4_0_D) * gs_quant_ldf16(x + GS_Q8_0_D);
    }
    return sum;
}

static float dot_q4_1(int64_t n, const void *vw, const void *vx)
{
    const uint8_t *w = vw, *x = vx;
    float sum = 0;
    for (int64_t b = 0; b < n / GS_QK; b++, w += GS_Q4_1_BYTES, x += GS_Q8_1_BYTES) {
        const int8_t *y = (const int8_t *)(x + GS_Q8_1_QS);
        int isum = 0;
        for (int j = 0; j < GS_QK; j++)
            isum += nib(w + GS_Q4_1_QS, j) * y[j];
        sum += (float)isum * gs_quant_ldf16(w + GS_Q4_1_D) * gs_quant_ldf16(x + GS_Q8_1_D) +
               gs_quant_ldf16(w + GS_Q4_1_M) * gs_quant_ldf16(x + GS_Q8_1_S);
    }
    return sum;
}

static float dot_q5_0(int64_t n, const void *vw, const void *vx)
{
    const uint8_t *w = vw, *x = vx;
    float sum = 0;
    for (int64_t b = 0; b < n / GS_QK; b++, w += GS_Q5_0_BYTES, x += GS_Q8_0_BYTES) {
        const int8_t *y = (const int8_t *)(x + GS_Q8_0_QS);
        const uint32_t qh = gs_quant_ld32(w + GS_Q5_0_QH);
        int isum = 0;
        for (int j = 0; j < GS_QK; j++)
            isum += ((nib(w + GS_Q5_0_QS, j) | (int)(((qh >> j) & 1) << 4)) - 16) * y[j];
        sum += (float)isum * gs_quant_ldf16(w + GS_Q5_0_D) * gs_quant_ldf16(x + GS_Q8_0_D);
    }
    return sum;
}

static float dot_q5_1(int64_t n, const void *vw, const void *vx)
{
    const uint8_t *w = vw, *x = vx;
    float sum = 0;
    for (int64_t b = 0; b < n / GS_QK; b++, w += GS_Q5_1_BYTES, x += GS_Q8_1_BYTES) {
        const int8_t *y = (const int8_t *)(x + GS_Q8_1_QS);
        const uint32_t qh = gs_quant_ld32(w + GS_Q5_1_QH);
        int isum = 0;
        for (int j = 0; j < GS_QK; j++)
            isum += (nib(w + GS_Q5_1_QS, j) | (int)(((qh >> j) & 1) << 4)) * y[j];
        sum += (float)isum * gs_quant_ldf16(w + GS_Q5_1_D) * gs_quant_ldf16(x + GS_Q8_1_D) +
               gs_quant_ldf16(w + GS_Q5_1_M) * gs_quant_ldf16(x + GS_Q8_1_S);
    }
    return sum;
}

static float dot_q8_0(int64_t n, const void *vw, const void *vx)
{
    const uint8_t *w = vw, *x = vx;
    float sum = 0;
    for (int64_t b = 0; b < n / GS_QK; b++, w += GS_Q8_0_BYTES, x += GS_Q8_0_BYTES) {
        const int8_t *q = (const int8_t *)(w + GS_Q8_0_QS), *y = (const int8_t *)(x + GS_Q8_0_QS);
        int isum = 0;
        for (int j = 0; j < GS_QK; j++)
            isum += q[j] * y[j];
        sum += (float)isum * gs_quant_ldf16(w + GS_Q8_0_D) * gs_quant_ldf16(x + GS_Q8_0_D);
    }
    return sum;
}

/* ---- K-quants against q8_K ------------------------------------------------------- */

static inline const int8_t *q8k_qs(const uint8_t *x)
{
    return (const int8_t *)(x + GS_Q8_K_QS);
}

static inline int q8k_bsum(const uint8_t *x, int g)
{
    return (int16_t)gs_quant_ld16(x + GS_Q8_K_BSUMS + 2 * g);
}

/* Sum of q[e] * y[e] over the 16 elements of group g. */
static inline int group16(const int8_t *q, const int8_t *y, int g)
{
    int s = 0;
    for (int e = 16 * g; e < 16 * g + 16; e++)
        s += q[e] * y[e];
    return s;
}

/* The 2-bit field of element e in q2_K/q3_K packing. */
static inline int two_bits(const uint8_t *qs, int e)
{
    return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

static float dot_q2_K(int64_t n, const void *vw, const void *vx)
{
    const uint8_t *w = vw, *x = vx;
    int8_t q[GS_QK_K];
    float sum = 0;
    for (int64_t b = 0; b < n / GS_QK_K; b++, w += GS_Q2_K_BYTES, x += GS_Q8_K_BYTES) {
        for (int e = 0; e < GS_QK_K; e++)
            q[e] = (int8_t)two_bits(w + GS_Q2_K_QS, e);
        int isum = 0, msum = 0;
        for (int g = 0; g < GS_QK_K / 16; g++) {
            const uint8_t sc = w[GS_Q2_K_SCALES + g];
            isum += (sc & 0xf) * group16(q, q8k_qs(x), g);
            msum += (sc >> 4) * q8k_bsum(x, g);
        }
        const float dx = gs_quant_ldf32(x + GS_Q8_K_D);
        sum += dx * gs_quant_ldf16(w + GS_Q2_K_D) * (float)isum -
               dx * gs_quant_ldf16(w + GS_Q2_K_DMIN) * (float)msum;
    }
    return sum;
}

static float dot_q3_K(int64_t n, const void *vw, const void *vx)
{
    const uint8_t *w = vw, *x = vx;
    int8_t q[GS_QK_K];
    float sum = 0;
    for (int64_t b = 0; b < n / GS_QK_K; b++, w += GS_Q3_K_BYTES, x += GS_Q8_K_BYTES) {
        const uint8_t *hm = w + GS_Q3_K_HMASK;
        for (int e = 0; e < GS_QK_K; e++)
            q[e] = (int8_t)(two_bits(w + GS_Q3_K_QS, e) - (((hm[e % 32] >> (e / 32)) & 1) ? 0 : 4));
        int isum = 0;
        for (int g = 0; g < GS_QK_K / 16; g++)
            isum += gs_quant_q3_K_scale(w + GS_Q3_K_SCALES, g) * group16(q, q8k_qs(x), g);
        sum += gs_quant_ldf32(x + GS_Q8_K_D) * gs_quant_ldf16(w + GS_Q3_K_D) * (float)isum;
    }
    return sum;
}

/* q4_K (qh NULL) and q5_K share everything but the fifth bit. */
static float dot_k45(int64_t n, const void *vw, const void *vx, int block_bytes, int off_qs,
                     int off_qh)
{
    const uint8_t *w = vw, *x = vx;
    int8_t q[GS_QK_K];
    float sum = 0;
    for (int64_t b = 0; b < n / GS_QK_K; b++, w += block_bytes, x += GS_Q8_K_BYTES) {
        const uint8_t *qs = w + off_qs;
        for (int e = 0; e < GS_QK_K; e++) {
            const uint8_t byte = qs[32 * (e / 64) + e % 32];
            int v = (e % 64) < 32 ? byte & 0xf : byte >> 4;
            if (off_qh)
                v |= ((w[off_qh + e % 32] >> (2 * (e / 64) + (e % 64) / 32)) & 1) << 4;
            q[e] = (int8_t)v;
        }
        int isum = 0, msum = 0;
        for (int g = 0; g < GS_QK_K / 32; g++) {
            uint8_t s, m;
            gs_quant_k4_scale_min(w + GS_Q4_K_SCALES, g, &s, &m);
            isum += s * (group16(q, q8k_qs(x), 2 * g) + group16(q, q8k_qs(x), 2 * g + 1));
            msum += m * (q8k_bsum(x, 2 * g) + q8k_bsum(x, 2 * g + 1));
        }
        const float dx = gs_quant_ldf32(x + GS_Q8_K_D);
        sum += dx * gs_quant_ldf16(w + GS_Q4_K_D) * (float)isum -
               dx * gs_quant_ldf16(w + GS_Q4_K_DMIN) * (float)msum;
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

static float dot_q6_K(int64_t n, const void *vw, const void *vx)
{
    const uint8_t *w = vw, *x = vx;
    int8_t q[GS_QK_K];
    float sum = 0;
    for (int64_t b = 0; b < n / GS_QK_K; b++, w += GS_Q6_K_BYTES, x += GS_Q8_K_BYTES) {
        for (int e = 0; e < GS_QK_K; e++) {
            const int h = e / 128, k = (e % 128) / 32, l = e % 32;
            const uint8_t lo = w[GS_Q6_K_QL + 64 * h + l + 32 * (k & 1)];
            const uint8_t hi = w[GS_Q6_K_QH + 32 * h + l];
            q[e] = (int8_t)(((k < 2 ? lo & 0xf : lo >> 4) | (((hi >> (2 * k)) & 3) << 4)) - 32);
        }
        int isum = 0;
        for (int g = 0; g < GS_QK_K / 16; g++)
            isum += (int8_t)w[GS_Q6_K_SCALES + g] * group16(q, q8k_qs(x), g);
        sum += gs_quant_ldf32(x + GS_Q8_K_D) * gs_quant_ldf16(w + GS_Q6_K_D) * (float)isum;
    }
    return sum;
}

/* ---- plain floats ------------------------------------------------------------------ */

static float dot_f32(int64_t n, const void *vw, const void *vx)
{
    const float *w = vw, *x = vx;
    float sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += w[i] * x[i];
    return sum;
}

static float dot_f16(int64_t n, const void *vw, const void *vx)
{
    const uint8_t *w = vw, *x = vx;
    float sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += gs_quant_ldf16(w + 2 * i) * gs_quant_ldf16(x + 2 * i);
    return sum;
}

static float dot_bf16(int64_t n, const void *vw, const void *vx)
{
    const uint8_t *w = vw, *x = vx;
    float sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += gs_bf16_to_f32(gs_quant_ld16(w + 2 * i)) * gs_bf16_to_f32(gs_quant_ld16(x + 2 * i));
    return sum;
}

/* ---- tiled product ----------------------------------------------------------------- */

void gs_cpu__gemm_generic(gs_cpu_dot_fn dot, int64_t n, const void *w, size_t w_stride,
                          int n_rows, const void *x, size_t x_stride, int n_tok, float *out,
                          size_t out_stride)
{
    for (int t0 = 0; t0 < n_tok; t0 += GEMM_TOKEN_BLOCK) {
        const int t1 = GS_MIN(n_tok, t0 + GEMM_TOKEN_BLOCK);
        for (int r = 0; r < n_rows; r++) {
            const char *wr = (const char *)w + (size_t)r * w_stride;
            for (int t = t0; t < t1; t++)
                out[(size_t)t * out_stride + r] =
                    dot(n, wr, (const char *)x + (size_t)t * x_stride);
        }
    }
}

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

#define ROW(ty) {.dot = dot_##ty, .gemm = gemm_##ty}

const struct gs_cpu_kernels gs_cpu__kernels_scalar[GS_TYPE_COUNT] = {
    [GS_TYPE_F32] = ROW(f32),   [GS_TYPE_F16] = ROW(f16),   [GS_TYPE_BF16] = ROW(bf16),
    [GS_TYPE_Q4_0] = ROW(q4_0), [GS_TYPE_Q4_1] = ROW(q4_1), [GS_TYPE_Q5_0] = ROW(q5_0),
    [GS_TYPE_Q5_1] = ROW(q5_1), [GS_TYPE_Q8_0] = ROW(q8_0), [GS_TYPE_Q2_K] = ROW(q2_K),
    [GS_TYPE_Q3_K] = ROW(q3_K), [GS_TYPE_Q4_K] = ROW(q4_K), [GS_TYPE_Q5_K] = ROW(q5_K),
    [GS_TYPE_Q6_K] = ROW(q6_K),
};
