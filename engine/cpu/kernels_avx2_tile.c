/*
 * engine/cpu/kernels_avx2_tile.c - AVX2 tiled products below the panels: four
 * weight rows by four tokens in registers (prompts on rows a panel does not
 * fill), one row at a time for steps of fewer than four tokens (decoding),
 * and the generic cache-blocked loop for the other types and for the rows
 * the K-quant panels leave. Built twice, with and without VNNI (avx2.h), as the panels
 * that fall back to these are.
 */
#include "engine/cpu/avx2.h"

/* ---- tiled products -------------------------------------------------------------------------
 * Prompt steps and batched decoding spend their time here: each weight block
 * is unpacked once and multiplied with several tokens in registers. Types
 * without a tiled kernel use the cache-blocked generic loop. Every product
 * against q8_0 activations sums in avx2.h's q80 order, so each output has
 * the bits of the row dot. */

/* Four int32 vectors of partial sums -> their four totals, in order. */
static inline __m128i sum4_epi32(__m256i s0, __m256i s1, __m256i s2, __m256i s3)
{
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(s0, s1), _mm256_hadd_epi32(s2, s3));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/* The q80 order's final sum of eight per-residue accumulators, lane by lane. */
static inline __m128 q80_tree4(const __m128 a[Q80_LANES])
{
    return _mm_add_ps(_mm_add_ps(_mm_add_ps(a[0], a[4]), _mm_add_ps(a[2], a[6])),
                      _mm_add_ps(_mm_add_ps(a[1], a[5]), _mm_add_ps(a[3], a[7])));
}

/*
 * Tiled products against q8_0 activations, four weight rows by TOK_TILE
 * tokens: each block of the four rows is unpacked once and each activation
 * block loaded once; the four rows' integer sums are folded into one vector
 * (lane = row), so the float work per block is one convert, a multiply and a
 * fused multiply-add for four rows. The blocks are taken residue by residue
 * (b % 8 = 0, then 1, ...: the q80 order's eight accumulators, one at a time
 * in registers). Unsigned formats (q4_0, q5_0: quant - offset) multiply the
 * raw unsigned quants and add ox = -offset * sum(y) per block, exactly, in
 * integers; q8_0 moves its signs onto the activations. Rows left over (fewer
 * than four) and tokens left over use the paths below.
 */
#define GEMM4_Q80(name, wbytes, unpack_u, offset)                                                  \
    static void gemm4_##name(int64_t nb, const uint8_t *wr, size_t ws, const uint8_t *x0,          \
                             size_t xs, const float *dx0, const int32_t *ox0, float *out,          \
                             size_t os, int nk)                                                    \
    {                                                                                              \
        __m128 part[TOK_TILE][Q80_LANES];                                                          \
        for (int j = 0; j < Q80_LANES; j++) {                                                      \
            __m128 acc[TOK_TILE];                                                                  \
            for (int k = 0; k < TOK_TILE; k++)                                                     \
                acc[k] = _mm_setzero_ps();                                                         \
            for (int64_t b = j; b < nb; b += Q80_LANES) {                                          \
                const int64_t off = b * (wbytes);                                                  \
                const __m256i q0 = unpack_u(wr + off), q1 = unpack_u(wr + ws + off);               \
                const __m256i q2 = unpack_u(wr + 2 * ws + off), q3 = unpack_u(wr + 3 * ws + off);  \
                const __m128 dw = scales4(wr, ws, off);                                            \
                for (int k = 0; k < nk; k++) {                                                     \
                    const __m256i y = _mm256_loadu_si256(                                          \
                        (const __m256i *)(x0 + (size_t)k * xs + b * GS_Q8_0_BYTES + GS_Q8_0_QS));  \
                    __m128i si;                                                                    \
                    if (offset)                                                                    \
                        si = _mm_add_epi32(sum4_epi32(dot_u8(q0, y), dot_u8(q1, y), dot_u8(q2, y), \
                                                      dot_u8(q3, y)),                              \
                                           _mm_set1_epi32(ox0[(size_t)k * nb + b]));               \
                    else                                                                           \
                        si = sum4_epi32(dot_i8(q0, y), dot_i8(q1, y), dot_i8(q2, y),               \
                                        dot_i8(q3, y));                                            \
                    const __m128 s = _mm_mul_ps(dw, _mm_broadcast_ss(dx0 + (size_t)k * nb + b));   \
                    acc[k] = _mm_fmadd_ps(s, _mm_cvtepi32_ps(si), acc[k]);                         \
                }                                                                                  \
            }                                                                                      \
            for (int k = 0; k < TOK_TILE; k++)                                                     \
                part[k][j] = acc[k];                                                               \
        }                                                                                          \
        for (int k = 0; k < nk; k++)                                                               \
            _mm_storeu_ps(out + (size_t)k * os, q80_tree4(part[k]));                               \
    }

GEMM4_Q80(q4_0, GS_Q4_0_BYTES, q4_0_block_u, 8)
GEMM4_Q80(q5_0, GS_Q5_0_BYTES, q5_0_block_u, 16)
GEMM4_Q80(q8_0, GS_Q8_0_BYTES, q8_0_block, 0)
#undef GEMM4_Q80

/*
 * Products for steps of fewer than TOK_TILE tokens (decoding): one weight row
 * at a time, which streams from memory best, with the activation scales (and
 * offset sums) already at hand: groups of eight blocks in the lanes of one
 * accumulator, the row dot's q80 order, and its last partial group. A group is
 * unpacked once for all the step's tokens, each token with its own accumulator,
 * so every token's integers and float chain are its row dot's.
 */
#define GEMV_Q80(name, wbytes, unpack_u, signed_q, offset)                                         \
    static void gemv_##name(int64_t nb, const uint8_t *w, size_t ws, int nr, const uint8_t *x,     \
                            size_t xs, int nt, const float *dxs, const int32_t *oxs, float *out,   \
                            size_t os)                                                             \
    {                                                                                              \
        for (int r = 0; r < nr; r++) {                                                             \
            const uint8_t *wr = w + (size_t)r * ws;                                                \
            __m256 acc[TOK_TILE - 1];                                                              \
            for (int t = 0; t < nt; t++)                                                           \
                acc[t] = _mm256_setzero_ps();                                                      \
            int64_t b = 0;                                                                         \
            for (; b + 8 <= nb; b += 8) {                                                          \
                /* The group's blocks unpacked once for the step's tokens. */                     \
                const uint8_t *w0 = wr + b * (wbytes);                                             \
                __m256i uw[8];                                                                     \
                _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) uw[j] =                        \
                    unpack_u(w0 + j * (wbytes));                                                   \
                const __m256 dw = scales8(w0, (wbytes), 0);                                        \
                for (int t = 0; t < nt; t++) {                                                     \
                    const uint8_t *y0 = x + (size_t)t * xs + b * GS_Q8_0_BYTES + GS_Q8_0_QS;       \
                    __m256i sj[8];                                                                 \
                    _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++)                            \
                    {                                                                              \
                        const __m256i y =                                                          \
                            _mm256_loadu_si256((const __m256i *)(y0 + j * GS_Q8_0_BYTES));         \
                        sj[j] = (offset) ? dot_u8(uw[j], y) : dot_i8(uw[j], y);                    \
                    }                                                                              \
                    __m256i isum = hsum8_epi32(sj);                                                \
                    if (offset)                                                                    \
                        isum = _mm256_add_epi32(                                                   \
                            isum, _mm256_loadu_si256((const __m256i *)(oxs + (size_t)t * nb + b))); \
                    const __m256 s =                                                               \
                        _mm256_mul_ps(dw, _mm256_loadu_ps(dxs + (size_t)t * nb + b));              \
                    acc[t] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(isum), acc[t]);                 \
                }                                                                                  \
            }                                                                                      \
            for (int t = 0; t < nt; t++) {                                                         \
                const uint8_t *xt = x + (size_t)t * xs;                                            \
                if (b < nb)                                                                        \
                    acc[t] = q80_group(acc[t], signed_q, wr + b * (wbytes), (wbytes),              \
                                       xt + b * GS_Q8_0_BYTES, (int)(nb - b));                     \
                out[(size_t)t * os + r] = hsum_ps(acc[t]);                                         \
            }                                                                                      \
        }                                                                                          \
    }

GEMV_Q80(q4_0, GS_Q4_0_BYTES, q4_0_block_u, q4_0_block_s, 8)
GEMV_Q80(q5_0, GS_Q5_0_BYTES, q5_0_block_u, q5_0_block_s, 16)
GEMV_Q80(q8_0, GS_Q8_0_BYTES, q8_0_block, q8_0_block, 0)
#undef GEMV_Q80

/*
 * q4_0 decoding, two blocks per unpack. A q4_0 block's 16 bytes hold quants
 * 0-15 in their low nibbles and 16-31 in their high ones, so unpacking one
 * block into one vector costs a lane insert per block. Two blocks loaded side
 * by side give, with one shift and two masks, their low halves in one vector
 * and their high halves in another; the activations are rearranged to match
 * once per call (ypair: per block pair, the two blocks' quants 0-15, then
 * their 16-31), which every row reuses. The integer block sums are the row
 * dot's integers (the offset added from oxs), in the same lanes, and the
 * float steps are the q80 order's, so the results are dot_q4_0's bit for bit
 * (about a third fewer vector operations per block: 1B q4_0 rows are
 * compute-bound on AVX2, at ~6 GB/s per thread from cache or memory alike).
 */
static void gemv_q4_0_paired(int64_t nb, const uint8_t *w, size_t ws, int nr, const uint8_t *x,
                             size_t xs, int nt, const float *dxs, const int32_t *oxs, float *out,
                             size_t os)
{
    const int64_t n8 = nb / 8 * 8; /* blocks in whole eight-block groups */
    __m256i ypair[(TOK_TILE - 1) * GEMM_MAX_BLOCKS];
    if (nt >= TOK_TILE || nb > GEMM_MAX_BLOCKS || n8 == 0) {
        gemv_q4_0(nb, w, ws, nr, x, xs, nt, dxs, oxs, out, os);
        return;
    }
    for (int t = 0; t < nt; t++) {
        const uint8_t *y = x + (size_t)t * xs + GS_Q8_0_QS;
        __m256i *yp = ypair + (size_t)t * nb;
        for (int64_t b = 0; b < n8; b += 2) {
            const uint8_t *y0 = y + b * GS_Q8_0_BYTES, *y1 = y0 + GS_Q8_0_BYTES;
            yp[b] = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)y1),
                                     _mm_loadu_si128((const __m128i *)y0));
            yp[b + 1] = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)(y1 + 16)),
                                         _mm_loadu_si128((const __m128i *)(y0 + 16)));
        }
    }
    const __m256i m4 = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    /* hadd(hadd(s0, s1), hadd(s2, s3)) leaves blocks 0 2 4 6 1 3 5 7. */
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (int r = 0; r < nr; r++) {
        const uint8_t *wr = w + (size_t)r * ws;
        __m256 acc[TOK_TILE - 1];
        for (int t = 0; t < nt; t++)
            acc[t] = _mm256_setzero_ps();
        int64_t b = 0;
        for (; b < n8; b += 8) {
            /* The row's eight blocks unpacked once for every token (a verification
             * step or a few streams: 2-3 tokens), then each token's sums. */
            const uint8_t *w0 = wr + b * GS_Q4_0_BYTES;
            __m256i lo[4], hi[4];
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                const uint8_t *wp = w0 + 2 * j * GS_Q4_0_BYTES + GS_Q4_0_QS;
                const __m256i q =
                    _mm256_set_m128i(_mm_loadu_si128((const __m128i *)(wp + GS_Q4_0_BYTES)),
                                     _mm_loadu_si128((const __m128i *)wp));
                lo[j] = _mm256_and_si256(q, m4);
                hi[j] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            }
            const __m256 dw = scales8(w0, GS_Q4_0_BYTES, 0);
            for (int t = 0; t < nt; t++) {
                const __m256i *yp = ypair + (size_t)t * nb + b;
                __m256i sj[4];
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++) {
                    /* Pair sums of 15 * 127 twice: far inside int16. */
                    const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(lo[j], yp[2 * j]),
                                                         _mm256_maddubs_epi16(hi[j], yp[2 * j + 1]));
                    sj[j] = _mm256_madd_epi16(s16, ones);
                }
                const __m256i u = _mm256_hadd_epi32(_mm256_hadd_epi32(sj[0], sj[1]),
                                                    _mm256_hadd_epi32(sj[2], sj[3]));
                const __m256i isum =
                    _mm256_add_epi32(_mm256_permutevar8x32_epi32(u, order),
                                     _mm256_loadu_si256((const __m256i *)(oxs + (size_t)t * nb + b)));
                acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_loadu_ps(dxs + (size_t)t * nb + b)),
                                         _mm256_cvtepi32_ps(isum), acc[t]);
            }
        }
        for (int t = 0; t < nt; t++) {
            const uint8_t *xt = x + (size_t)t * xs;
            if (b < nb)
                acc[t] = q80_group(acc[t], q4_0_block_s, wr + b * GS_Q4_0_BYTES, GS_Q4_0_BYTES,
                                   xt + b * GS_Q8_0_BYTES, (int)(nb - b));
            out[(size_t)t * os + r] = hsum_ps(acc[t]);
        }
    }
}

/* The driver: token blocks; in each, the activation scales (and, for offset
 * formats, -offset * sum of the quants) per block, then tiles of 4 rows by up
 * to TOK_TILE tokens, then the rows left over (fewer than four) one by one. */
#define GEMM_Q80(name, offset, gemv)                                                               \
    void AVX2_FN(gemm_rows_##name)(int64_t n, const void *vw, size_t ws, int nr, const void *vx,   \
                                   size_t xs, int nt, float *out, size_t os)                       \
    {                                                                                              \
        const int64_t nb = n / GS_QK;                                                              \
        float dxs[TOK_BLOCK * GEMM_MAX_BLOCKS];                                                    \
        int32_t oxs[TOK_BLOCK * GEMM_MAX_BLOCKS];                                                  \
        if (nb > GEMM_MAX_BLOCKS) {                                                                \
            gs_cpu__gemm_generic(AVX2_FN(dot_##name), n, vw, ws, nr, vx, xs, nt, out, os);         \
            return;                                                                                \
        }                                                                                          \
        for (int t0 = 0; t0 < nt; t0 += TOK_BLOCK) {                                               \
            const int t1 = GS_MIN(nt, t0 + TOK_BLOCK);                                             \
            for (int t = t0; t < t1; t++) {                                                        \
                const uint8_t *xt = (const uint8_t *)vx + (size_t)t * xs;                          \
                for (int64_t b = 0; b < nb; b++) {                                                 \
                    dxs[(t - t0) * nb + b] = ld_f16(xt + b * GS_Q8_0_BYTES);                       \
                    oxs[(t - t0) * nb + b] =                                                       \
                        (offset) ? -(offset)*block_sum(xt + b * GS_Q8_0_BYTES) : 0;                \
                }                                                                                  \
            }                                                                                      \
            if (t1 - t0 < TOK_TILE) {                                                              \
                /* Few tokens: rows stream best one at a time (measured: 2x on decode). */         \
                gemv(nb, (const uint8_t *)vw, ws, nr, (const uint8_t *)vx + (size_t)t0 * xs, xs,   \
                     t1 - t0, dxs, oxs, out + (size_t)t0 * os, os);                                \
                continue;                                                                          \
            }                                                                                      \
            int r = 0;                                                                             \
            for (; r + 4 <= nr; r += 4)                                                            \
                for (int t = t0; t < t1; t += TOK_TILE)                                            \
                    gemm4_##name(nb, (const uint8_t *)vw + (size_t)r * ws, ws,                     \
                                 (const uint8_t *)vx + (size_t)t * xs, xs, dxs + (t - t0) * nb,    \
                                 oxs + (t - t0) * nb, out + (size_t)t * os + r, os,                \
                                 GS_MIN(TOK_TILE, t1 - t));                                        \
            for (; r < nr; r++)                                                                    \
                for (int t = t0; t < t1; t++)                                                      \
                    out[(size_t)t * os + r] =                                                      \
                        AVX2_FN(dot_##name)(n, (const uint8_t *)vw + (size_t)r * ws,               \
                                            (const uint8_t *)vx + (size_t)t * xs);                 \
        }                                                                                          \
    }

GEMM_Q80(q4_0, 8, gemv_q4_0_paired)
GEMM_Q80(q5_0, 16, gemv_q5_0)
GEMM_Q80(q8_0, 0, gemv_q8_0)
#undef GEMM_Q80

#define GEMM_OF(name)                                                                              \
    void AVX2_FN(gemm_##name)(int64_t n, const void *w, size_t ws, int nr, const void *x,         \
                              size_t xs, int nt, float *out, size_t os)                            \
    {                                                                                              \
        gs_cpu__gemm_generic(AVX2_FN(dot_##name), n, w, ws, nr, x, xs, nt, out, os);              \
    }
/* The K-quants' rows that their panels leave (fewer than a panel of rows or
 * of tokens, or rows too long for the packed panel): the row dot, whose bits
 * the panels reproduce. */
GEMM_OF(q4_1)
GEMM_OF(q5_1)
GEMM_OF(q2_K)
GEMM_OF(q3_K)
GEMM_OF(q4_K)
GEMM_OF(q5_K)
GEMM_OF(q6_K)
#ifndef GS_CPU_VNNI
GEMM_OF(f16)
GEMM_OF(bf16)
#endif
#undef GEMM_OF

#ifndef GS_CPU_VNNI /* the float rows do not use VNNI: plain build only */
/* Rows r0, r0 + 1 of w by tokens t0 .. t0 + 2 of x: six dot_f32 at once, each
 * summed exactly as dot_f32 sums it (so a tiled product has the same bits as
 * the row-by-row one), every w and x vector loaded once for the six. */
static void dot_f32_2x3(int64_t n, const float *w0, const float *w1, const float *x0,
                        size_t xs, float *o, size_t os)
{
    const float *x1 = x0 + xs, *x2 = x1 + xs;
    __m256 a[6][2];
    for (int e = 0; e < 6; e++)
        a[e][0] = a[e][1] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m256 v0 = _mm256_loadu_ps(w0 + i + 8 * h), v1 = _mm256_loadu_ps(w1 + i + 8 * h);
            const __m256 y0 = _mm256_loadu_ps(x0 + i + 8 * h), y1 = _mm256_loadu_ps(x1 + i + 8 * h);
            const __m256 y2 = _mm256_loadu_ps(x2 + i + 8 * h);
            a[0][h] = _mm256_fmadd_ps(v0, y0, a[0][h]);
            a[1][h] = _mm256_fmadd_ps(v1, y0, a[1][h]);
            a[2][h] = _mm256_fmadd_ps(v0, y1, a[2][h]);
            a[3][h] = _mm256_fmadd_ps(v1, y1, a[3][h]);
            a[4][h] = _mm256_fmadd_ps(v0, y2, a[4][h]);
            a[5][h] = _mm256_fmadd_ps(v1, y2, a[5][h]);
        }
    }
    const float *xt[3] = {x0, x1, x2}, *wr[2] = {w0, w1};
    for (int e = 0; e < 6; e++) {
        const float *w = wr[e & 1], *x = xt[e >> 1];
        float sum = hsum_ps(_mm256_add_ps(a[e][0], a[e][1]));
        for (int64_t j = i; j < n; j++)
            sum += w[j] * x[j];
        o[(size_t)(e >> 1) * os + (e & 1)] = sum;
    }
}

/* F32 weights: blocks of TOK_BLOCK tokens, pairs of rows by triples of tokens,
 * the edges row by row; the same bits as gs_cpu__gemm_generic over dot_f32. */
void AVX2_FN(gemm_f32)(int64_t n, const void *vw, size_t ws, int nr, const void *vx, size_t xs,
                     int nt, float *out, size_t os)
{
    const size_t wf = ws / sizeof(float), xf = xs / sizeof(float);
    for (int t0 = 0; t0 < nt; t0 += TOK_BLOCK) {
        const int t1 = GS_MIN(nt, t0 + TOK_BLOCK);
        int r = 0;
        for (; r + 2 <= nr; r += 2) {
            const float *w0 = (const float *)vw + (size_t)r * wf;
            int t = t0;
            for (; t + 3 <= t1; t += 3)
                dot_f32_2x3(n, w0, w0 + wf, (const float *)vx + (size_t)t * xf, xf,
                            out + (size_t)t * os + r, os);
            for (; t < t1; t++)
                for (int e = 0; e < 2; e++)
                    out[(size_t)t * os + r + e] =
                        AVX2_FN(dot_f32)(n, w0 + (size_t)e * wf, (const float *)vx + (size_t)t * xf);
        }
        for (; r < nr; r++)
            for (int t = t0; t < t1; t++)
                out[(size_t)t * os + r] = AVX2_FN(dot_f32)(n, (const float *)vw + (size_t)r * wf,
                                                  (const float *)vx + (size_t)t * xf);
    }
}
#endif
