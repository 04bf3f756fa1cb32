/*
 * engine/cpu/kernels_avx2_dot.c - AVX2 dot products of one weight row with one
 * activation row, for every type the AVX2 table specialises: the table's dot
 * entries, and what the tiled and panel products fall back to for the rows
 * and tokens they do not tile. A file of its own because the int8 rows are
 * built twice, with and without VNNI (avx2.h), like the products that call
 * them, while the vector helpers are built once.
 */
#include "engine/cpu/avx2.h"

/* ---- 32-element formats ------------------------------------------------------------ */

/* The q8_0 partners sum in the order avx2.h gives (q80_dot), which every
 * tiled product of theirs follows. */
float AVX2_FN(dot_q4_0)(int64_t n, const void *w, const void *x)
{
    return q80_dot(q4_0_block_s, n / GS_QK, w, GS_Q4_0_BYTES, x);
}

float AVX2_FN(dot_q8_0)(int64_t n, const void *w, const void *x)
{
    return q80_dot(q8_0_block, n / GS_QK, w, GS_Q8_0_BYTES, x);
}

float AVX2_FN(dot_q5_0)(int64_t n, const void *w, const void *x)
{
    return q80_dot(q5_0_block_s, n / GS_QK, w, GS_Q5_0_BYTES, x);
}

float AVX2_FN(dot_q4_1)(int64_t n, const void *vw, const void *vx)
{
    const uint8_t *w = vw, *x = vx;
    __m256 acc = _mm256_setzero_ps();
    float summ = 0;
    for (int64_t b = 0; b < n / GS_QK; b++, w += GS_Q4_1_BYTES, x += GS_Q8_1_BYTES) {
        const __m256i q = nibbles32(w + GS_Q4_1_QS);
        const __m256i y = _mm256_loadu_si256((const __m256i *)(x + GS_Q8_1_QS));
        const __m256 d = _mm256_set1_ps(ld_f16(w + GS_Q4_1_D) * ld_f16(x + GS_Q8_1_D));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_u8(q, y)), acc);
        summ += ld_f16(w + GS_Q4_1_M) * ld_f16(x + GS_Q8_1_S);
    }
    return hsum_ps(acc) + summ;
}

float AVX2_FN(dot_q5_1)(int64_t n, const void *vw, const void *vx)
{
    const uint8_t *w = vw, *x = vx;
    __m256 acc = _mm256_setzero_ps();
    float summ = 0;
    for (int64_t b = 0; b < n / GS_QK; b++, w += GS_Q5_1_BYTES, x += GS_Q8_1_BYTES) {
        const __m256i q = _mm256_or_si256(nibbles32(w + GS_Q5_1_QS), fifth_bits(w + GS_Q5_1_QH));
        const __m256i y = _mm256_loadu_si256((const __m256i *)(x + GS_Q8_1_QS));
        const __m256 d = _mm256_set1_ps(ld_f16(w + GS_Q5_1_D) * ld_f16(x + GS_Q8_1_D));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_u8(q, y)), acc);
        summ += ld_f16(w + GS_Q5_1_M) * ld_f16(x + GS_Q8_1_S);
    }
    return hsum_ps(acc) + summ;
}

/* ---- K-quants against q8_K ------------------------------------------------------------
 * Each super-block's products come out as vectors of int32 partial sums
 * (its quant sum I and, for formats with minimums, its minimum sum M),
 * reduced to their totals (the two together: one pair of horizontal adds),
 * then chained in order in avx2.h's K-quant order, which the panels follow. */

/* One q4_K (off_qh 0) or q5_K super-block: *isum and *msum. */
static inline void k45_block(const uint8_t *w, const uint8_t *x, int off_qs, int off_qh,
                             __m256i *isum, __m256i *msum)
{
    uint8_t s[8], m[8];
    k4_scales(w + GS_Q4_K_SCALES, s, m);
    /* Minimums: sum over groups of m[g] * (bsum[2g] + bsum[2g + 1]). */
    const __m256i bs = _mm256_loadu_si256((const __m256i *)(x + GS_Q8_K_BSUMS));
    const __m256i pairs = _mm256_madd_epi16(bs, _mm256_set1_epi16(1));
    uint64_t m64;
    memcpy(&m64, m, 8);
    const __m256i mins = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)m64));
    *msum = _mm256_mullo_epi32(pairs, mins);
    const __m256i hb =
        off_qh ? _mm256_loadu_si256((const __m256i *)(w + off_qh)) : _mm256_setzero_si256();
    __m256i sumi = _mm256_setzero_si256();
    /* The eight scales as int16 in both halves; each is spread over a
     * vector with one byte shuffle (broadcasting them one by one from
     * general registers cost a fifth of the loop). */
    uint64_t s64;
    memcpy(&s64, s, 8);
    const __m256i s16 =
        _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)s64)));
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        __m256i lo, hi;
        k45_runs(w + off_qs, off_qh != 0, hb, j, &lo, &hi);
        const __m256i ylo = _mm256_loadu_si256((const __m256i *)(x + GS_Q8_K_QS + 64 * j));
        const __m256i yhi = _mm256_loadu_si256((const __m256i *)(x + GS_Q8_K_QS + 64 * j + 32));
        const __m256i slo =
            _mm256_shuffle_epi8(s16, _mm256_set1_epi16((short)(0x0100 + 0x0404 * j)));
        const __m256i shi =
            _mm256_shuffle_epi8(s16, _mm256_set1_epi16((short)(0x0302 + 0x0404 * j)));
        const __m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, ylo), slo);
        const __m256i phi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, yhi), shi);
        sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(plo, phi));
    }
    *isum = sumi;
}

/* The totals of two int32 vectors, as floats in lanes 0 and 1. */
static inline __m128 hsum2_epi32_ps(__m256i a, __m256i b)
{
    __m256i t = _mm256_hadd_epi32(a, b);
    t = _mm256_hadd_epi32(t, t);
    return _mm_cvtepi32_ps(
        _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1)));
}

/* q4_K and q5_K: each super-block's I and M reduced together. */
static inline float dot_k45(int64_t n, const uint8_t *w, const uint8_t *x, int block_bytes,
                            int off_qs, int off_qh)
{
    float acc = 0, accm = 0;
    for (int64_t b = 0; b < n / GS_QK_K; b++, w += block_bytes, x += GS_Q8_K_BYTES) {
        __m256i isum, msum;
        k45_block(w, x, off_qs, off_qh, &isum, &msum);
        const __m128 tot = hsum2_epi32_ps(isum, msum);
        const float dx = ld_f32(x + GS_Q8_K_D);
        acc = kq_fma(dx * ld_f16(w + GS_Q4_K_D), _mm_cvtss_f32(tot), acc);
        accm = kq_fma(dx * ld_f16(w + GS_Q4_K_DMIN), _mm_cvtss_f32(_mm_movehdup_ps(tot)), accm);
    }
    return acc - accm;
}

/*
 * q2_K and q3_K: a super-block is two 128-quant halves of 32 bytes of 2-bit
 * fields; field j (bits 2j, 2j+1) of byte l of half c is quant 128c + 32j +
 * l, so one shift and mask of the half gives 32 consecutive quants: groups
 * 8c + 2j (low 16 bytes) and 8c + 2j + 1 (high). The group scales (int8,
 * both lanes) are spread over int16 lanes with one byte shuffle each.
 */
static inline __m256i group_scales(__m256i sc8, int c, int j)
{
    const int g = 8 * c + 2 * j;
    /* Scale byte into the high byte of each int16, then an arithmetic
     * shift: sign-extended (q3_K's scales are signed). */
    const __m256i ctrl = _mm256_set_m128i(_mm_set1_epi16((short)(((g + 1) << 8) | 0x80)),
                                          _mm_set1_epi16((short)((g << 8) | 0x80)));
    return _mm256_srai_epi16(_mm256_shuffle_epi8(sc8, ctrl), 8);
}

/* sum over the block of scale[g] * (u . y over group g), u the unsigned
 * quants 0..(3 or 7) of half c, field j (q3_K adds its hmask bit as bit 2). */
static inline __m256i k23_sum(const uint8_t *qs, const uint8_t *hmask, const uint8_t *x,
                              __m256i sc8)
{
    __m256i sumi = _mm256_setzero_si256();
    for (int c = 0; c < 2; c++) {
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            const __m256i u = k23_run(qs, hmask, c, j);
            const __m256i y =
                _mm256_loadu_si256((const __m256i *)(x + GS_Q8_K_QS + 128 * c + 32 * j));
            sumi = _mm256_add_epi32(
                sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(u, y), group_scales(sc8, c, j)));
        }
    }
    return sumi;
}

float AVX2_FN(dot_q2_K)(int64_t n, const void *vw, const void *vx)
{
    const uint8_t *w = vw, *x = vx;
    float acc = 0, accm = 0;
    const __m128i m4 = _mm_set1_epi8(0x0f);
    for (int64_t b = 0; b < n / GS_QK_K; b++, w += GS_Q2_K_BYTES, x += GS_Q8_K_BYTES) {
        const __m128i sc = _mm_loadu_si128((const __m128i *)(w + GS_Q2_K_SCALES));
        const __m256i sumi = k23_sum(w + GS_Q2_K_QS, NULL, x,
                                     _mm256_broadcastsi128_si256(_mm_and_si128(sc, m4)));
        /* Minimums: sum over groups of min[g] * bsum[g]. */
        const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), m4));
        const __m256i msum = _mm256_madd_epi16(
            mins, _mm256_loadu_si256((const __m256i *)(x + GS_Q8_K_BSUMS)));
        const float dx = ld_f32(x + GS_Q8_K_D);
        acc = kq_fma(dx * ld_f16(w + GS_Q2_K_D), (float)hsum_epi32(sumi), acc);
        accm = kq_fma(dx * ld_f16(w + GS_Q2_K_DMIN), (float)hsum_epi32(msum), accm);
    }
    return acc - accm;
}

float AVX2_FN(dot_q3_K)(int64_t n, const void *vw, const void *vx)
{
    const uint8_t *w = vw, *x = vx;
    float acc = 0;
    for (int64_t b = 0; b < n / GS_QK_K; b++, w += GS_Q3_K_BYTES, x += GS_Q8_K_BYTES) {
        const __m128i sc8 = q3_K_scales(w + GS_Q3_K_SCALES);
        /* Quants are u - 4 with u = 2 bits | hmask bit << 2: the 4 comes out
         * through the group sums, 4 * sum of scale[g] * bsum[g]. */
        const __m256i sumi = k23_sum(w + GS_Q3_K_QS, w + GS_Q3_K_HMASK, x,
                                     _mm256_broadcastsi128_si256(sc8));
        const __m256i off = _mm256_madd_epi16(
            _mm256_cvtepi8_epi16(sc8), _mm256_loadu_si256((const __m256i *)(x + GS_Q8_K_BSUMS)));
        const __m256i total = _mm256_sub_epi32(sumi, _mm256_slli_epi32(off, 2));
        acc = kq_fma(ld_f32(x + GS_Q8_K_D) * ld_f16(w + GS_Q3_K_D), (float)hsum_epi32(total), acc);
    }
    return acc;
}

float AVX2_FN(dot_q4_K)(int64_t n, const void *w, const void *x)
{
    return dot_k45(n, w, x, GS_Q4_K_BYTES, GS_Q4_K_QS, 0);
}

float AVX2_FN(dot_q5_K)(int64_t n, const void *w, const void *x)
{
    return dot_k45(n, w, x, GS_Q5_K_BYTES, GS_Q5_K_QS, GS_Q5_K_QH);
}

/* One q6_K super-block's quant sum, its offset taken out. */
static inline __m256i q6_K_block(const uint8_t *w, const uint8_t *x)
{
    const __m128i sc8 = _mm_loadu_si128((const __m128i *)(w + GS_Q6_K_SCALES));
    /* q - 32: the offset goes through the block sums, as a vector:
     * 32 * sum_g sc[g] * bsum[g], subtracted exactly in integers. */
    const __m256i off = _mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8),
                                          _mm256_loadu_si256((const __m256i *)(x + GS_Q8_K_BSUMS)));
    __m256i sumi = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(off, 5));
    for (int h = 0; h < 2; h++) {
        __m256i q[4];
        q6_K_runs(w, h, q);
        /* Scales 8h..8h+7 as int16 in both halves; group g = 8h + 2k goes
         * to the low half of its run's vector and g + 1 to the high
         * half, each with one byte shuffle. */
        const __m256i s16 =
            _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(h ? _mm_srli_si128(sc8, 8) : sc8));
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m256i y =
                _mm256_loadu_si256((const __m256i *)(x + GS_Q8_K_QS + 128 * h + 32 * k));
            const __m256i scv = _mm256_shuffle_epi8(
                s16, _mm256_set_m128i(_mm_set1_epi16((short)(0x0100 + 0x0202 * (2 * k + 1))),
                                      _mm_set1_epi16((short)(0x0100 + 0x0202 * (2 * k)))));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(q[k], y), scv));
        }
    }
    return sumi;
}

float AVX2_FN(dot_q6_K)(int64_t n, const void *vw, const void *vx)
{
    const uint8_t *w = vw, *x = vx;
    float acc = 0;
    for (int64_t b = 0; b < n / GS_QK_K; b++, w += GS_Q6_K_BYTES, x += GS_Q8_K_BYTES) {
        const __m128 tot = hsum2_epi32_ps(q6_K_block(w, x), _mm256_setzero_si256());
        acc = kq_fma(ld_f32(x + GS_Q8_K_D) * ld_f16(w + GS_Q6_K_D), _mm_cvtss_f32(tot), acc);
    }
    return acc;
}

#ifndef GS_CPU_VNNI /* only the plain build's table has the float rows */

/* ---- plain floats ------------------------------------------------------------------------ */

float AVX2_FN(dot_f32)(int64_t n, const void *vw, const void *vx)
{
    const float *w = vw, *x = vx;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
    }
    float sum = hsum_ps(_mm256_add_ps(a0, a1));
    for (; i < n; i++)
        sum += w[i] * x[i];
    return sum;
}

float AVX2_FN(dot_f16)(int64_t n, const void *vw, const void *vx)
{
    const uint16_t *w = vw, *x = vx;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(ld8_f16(w + i), ld8_f16(x + i), a0);
        a1 = _mm256_fmadd_ps(ld8_f16(w + i + 8), ld8_f16(x + i + 8), a1);
    }
    float sum = hsum_ps(_mm256_add_ps(a0, a1));
    for (; i < n; i++)
        sum += _cvtsh_ss(w[i]) * _cvtsh_ss(x[i]);
    return sum;
}

float AVX2_FN(dot_bf16)(int64_t n, const void *vw, const void *vx)
{
    const uint16_t *w = vw, *x = vx;
    __m256 a0 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        a0 = _mm256_fmadd_ps(ld8_bf16(w + i), ld8_bf16(x + i), a0);
    float sum = hsum_ps(a0);
    for (; i < n; i++)
        sum += gs_bf16_to_f32(w[i]) * gs_bf16_to_f32(x[i]);
    return sum;
}

#endif /* !GS_CPU_VNNI */
