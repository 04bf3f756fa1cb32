/*
 * engine/cpu/avx2.h - what the AVX2 + FMA + F16C kernel files
 * (kernels_avx2_*.c) share; private to engine/cpu. Those files are compiled
 * with -mavx2 -mfma -mf16c (engine/cpu/meson.build) and only ever called
 * after gs_cpu_isa_best() has seen those features, so a binary built with
 * them still runs on an x86-64 without them. Include this only from such files.
 *
 * Integer products use the usual AVX2 idiom for int8 x int8: maddubs takes an
 * unsigned and a signed operand, so the signed weight moves its sign onto the
 * activation (sign_epi8) and its magnitude becomes the unsigned side. Weights
 * that are unsigned by construction (q4_K/q5_K/q6_K quants before their
 * offset) go in directly, and the offset is applied through q8_K's block sums.
 *
 * The products (kernels_avx2_dot.c, _tile.c, _panel.c) are built twice, the
 * second time with GS_CPU_VNNI defined (and AVX-512 VNNI + VL enabled) for
 * CPUs that have vpdpbusd: the unsigned-by-signed byte products below
 * (dot_u8, dpbusd_acc) then accumulate in one instruction instead of two, with
 * no int16 intermediate, and the panels are sixteen rows wide. Both builds are
 * linked into one binary, so a function that one product file calls in
 * another is named through AVX2_FN: gs_cpu__avx2_NAME in the plain build,
 * gs_cpu__vnni_NAME in the VNNI one. The vector helpers and activation
 * quantizers (kernels_avx2_vec.c) do not use VNNI and are built once.
 *
 * Below: the tile sizes, the int8 products, the block unpackers that the row
 * dots and the tiled products both use, and the cross-file functions.
 */
#ifndef GS_CPU_AVX2_H
#define GS_CPU_AVX2_H

#include "engine/cpu/cpu.h"
#include "engine/quant/blocks.h"

#include <immintrin.h>
#include <string.h>

#ifdef GS_CPU_VNNI
#define AVX2_FN(name) gs_cpu__vnni_##name
#else
#define AVX2_FN(name) gs_cpu__avx2_##name
#endif

/* Tokens per group of the register-blocked products. */
#define TOK_TILE 4
/* Tokens per cache block: activations of this many tokens stay in L2 while a
 * thread's weight rows stream past them. */
#define TOK_BLOCK 64

static inline float hsum_ps(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float ld_f16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

static inline float ld_f32(const uint8_t *p)
{
    float f;
    memcpy(&f, p, 4);
    return f;
}

/* Eight f16 or bf16 values at p as f32. */
static inline __m256 ld8_f16(const void *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

static inline __m256 ld8_bf16(const void *p)
{
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

/* 32 nibbles of a 16-byte run: element j < 16 from the low nibble of byte j,
 * element j >= 16 from the high nibble of byte j - 16. */
static inline __m256i nibbles32(const uint8_t *qs)
{
    const __m128i t = _mm_loadu_si128((const __m128i *)qs);
    const __m256i v = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
}

/* Eight int32 partial sums of uw[i] * y[i] for unsigned uw and signed y. */
static inline __m256i dot_u8(__m256i uw, __m256i y)
{
#ifdef GS_CPU_VNNI
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), uw, y);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(uw, y), _mm256_set1_epi16(1));
#endif
}

/* acc + the eight int32 sums of uw[i] * y[i] (unsigned uw, signed y). Without
 * VNNI the int16 pair sums of maddubs must not saturate: |uw * y| summed in
 * pairs stays below 2^15 for uw <= 127, so callers keep uw under 128. */
static inline __m256i dpbusd_acc(__m256i acc, __m256i uw, __m256i y)
{
#ifdef GS_CPU_VNNI
    return _mm256_dpbusd_epi32(acc, uw, y);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(uw, y), _mm256_set1_epi16(1)));
#endif
}

/* Eight int32 partial sums of w[i] * y[i] for signed int8 w and y: the sign
 * of w moves onto y. */
static inline __m256i dot_i8(__m256i w, __m256i y)
{
    return dot_u8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(y, w));
}

/* The fifth bits of a q5 block as 0x10 in each byte that has one. */
static inline __m256i fifth_bits(const uint8_t *qh_bytes)
{
    uint32_t qh;
    memcpy(&qh, qh_bytes, 4);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303ll, 0x0202020202020202ll,
                                           0x0101010101010101ll, 0x0000000000000000ll);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), shuf);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

static inline int bsum(const uint8_t *x, int g)
{
    int16_t v;
    memcpy(&v, x + GS_Q8_K_BSUMS + 2 * g, 2);
    return v;
}

/* The 8 six-bit scales (s) and mins (m) of a q4_K/q5_K block, as bytes: the
 * first four sit in the low 6 bits of bytes 0..3 (4..7 for mins); the last
 * four keep their low 4 bits in the nibbles of bytes 8..11 and their high 2
 * bits in the top of bytes 0..3 (4..7 for mins). */
static inline void k4_scales(const uint8_t *sc, uint8_t s[8], uint8_t m[8])
{
    uint32_t w0, w1, w2;
    memcpy(&w0, sc, 4);
    memcpy(&w1, sc + 4, 4);
    memcpy(&w2, sc + 8, 4);
    const uint32_t s0 = w0 & 0x3f3f3f3fu, m0 = w1 & 0x3f3f3f3fu;
    const uint32_t s1 = (w2 & 0x0f0f0f0fu) | (((w0 >> 6) & 0x03030303u) << 4);
    const uint32_t m1 = ((w2 >> 4) & 0x0f0f0f0fu) | (((w1 >> 6) & 0x03030303u) << 4);
    memcpy(s, &s0, 4);
    memcpy(s + 4, &s1, 4);
    memcpy(m, &m0, 4);
    memcpy(m + 4, &m1, 4);
}

/* Eight vectors of int32 partial sums -> the vector of their eight totals:
 * one transposing reduction for eight blocks instead of a float multiply
 * per block. */
static inline __m256i hsum8_epi32(const __m256i a[8])
{
    const __m256i t0 = _mm256_hadd_epi32(a[0], a[1]), t1 = _mm256_hadd_epi32(a[2], a[3]);
    const __m256i t2 = _mm256_hadd_epi32(a[4], a[5]), t3 = _mm256_hadd_epi32(a[6], a[7]);
    const __m256i u0 = _mm256_hadd_epi32(t0, t1), u1 = _mm256_hadd_epi32(t2, t3);
    return _mm256_add_epi32(_mm256_permute2x128_si256(u0, u1, 0x20),
                            _mm256_permute2x128_si256(u0, u1, 0x31));
}

/* Runs 2j and 2j + 1 (32 quants each) of a q4_K/q5_K super-block as unsigned
 * bytes: the low and high nibbles of the 32 bytes at qs + 32j and, for q5_K
 * (hb: its 32 high-bit bytes), bits 2j and 2j + 1 of hb as bit 4. */
static inline void k45_runs(const uint8_t *qs, bool has_qh, __m256i hb, int j, __m256i *lo,
                            __m256i *hi)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
    *lo = _mm256_and_si256(q, m4);
    *hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    if (has_qh) {
        const __m256i one = _mm256_set1_epi8(1);
        const __m256i b0 = _mm256_and_si256(_mm256_srl_epi16(hb, _mm_cvtsi32_si128(2 * j)), one);
        const __m256i b1 =
            _mm256_and_si256(_mm256_srl_epi16(hb, _mm_cvtsi32_si128(2 * j + 1)), one);
        *lo = _mm256_or_si256(*lo, _mm256_slli_epi16(b0, 4));
        *hi = _mm256_or_si256(*hi, _mm256_slli_epi16(b1, 4));
    }
}

/* The sixteen group scales of a q3_K block as int8: 6 bits stored with an
 * offset of 32, low nibbles of groups 0-7 and 8-15 in the low and high
 * halves of bytes 0-7, the top two bits of group g at bit 2 * (g / 4) of
 * byte 8 + g % 4. */
static inline __m128i q3_K_scales(const uint8_t *s)
{
    uint64_t lo64;
    uint32_t h;
    memcpy(&lo64, s, 8);
    memcpy(&h, s + 8, 4);
    const __m128i m4 = _mm_set1_epi8(0x0f), v = _mm_cvtsi64_si128((long long)lo64);
    const __m128i lo =
        _mm_unpacklo_epi64(_mm_and_si128(v, m4), _mm_and_si128(_mm_srli_epi16(v, 4), m4));
    const __m128i hi = _mm_and_si128(
        _mm_set_epi32((int)(h >> 6), (int)(h >> 4), (int)(h >> 2), (int)h), _mm_set1_epi8(3));
    return _mm_sub_epi8(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi8(32));
}

/* Run 4c + j of a q2_K/q3_K super-block: quants 128c + 32j .. + 31 as
 * unsigned bytes (field j of half c; q3_K adds its hmask bit as bit 2). */
static inline __m256i k23_run(const uint8_t *qs, const uint8_t *hmask, int c, int j)
{
    const __m256i qv = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
    __m256i u = _mm256_and_si256(_mm256_srl_epi16(qv, _mm_cvtsi32_si128(2 * j)),
                                 _mm256_set1_epi8(3));
    if (hmask) {
        const __m256i hv = _mm256_loadu_si256((const __m256i *)hmask);
        const __m256i h = _mm256_and_si256(_mm256_srl_epi16(hv, _mm_cvtsi32_si128(4 * c + j)),
                                           _mm256_set1_epi8(1));
        u = _mm256_or_si256(u, _mm256_slli_epi16(h, 2));
    }
    return u;
}

/* The four 32-quant runs of half h (128 quants) of a q6_K block, unsigned
 * 0..63: run k holds quants 128h + 32k .. + 31, its low four bits from ql and
 * its top two from qh. */
static inline void q6_K_runs(const uint8_t *w, int h, __m256i q[4])
{
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x03);
    const uint8_t *ql = w + GS_Q6_K_QL + 64 * h, *qh = w + GS_Q6_K_QH + 32 * h;
    const __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
    const __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
    const __m256i hv = _mm256_loadu_si256((const __m256i *)qh);
    q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4),
                           _mm256_slli_epi16(_mm256_and_si256(hv, m2), 4));
    q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4),
                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hv, 2), m2), 4));
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hv, 4), m2), 4));
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                           _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hv, 6), m2), 4));
}

/* Blocks per row up to which the tiled q8_0-partner products keep the token
 * block's activation scales on the stack (K <= 16384). */
#define GEMM_MAX_BLOCKS 512

/* Four f16 block scales, one per weight row (ws bytes apart, at offset off),
 * in one word: assembled in a general register, since four small stores and
 * a wide load would stall store forwarding. */
static inline uint64_t f16x4(const uint8_t *w, size_t ws, int64_t off)
{
    uint64_t u = 0;
    for (int i = 0; i < 4; i++) {
        uint16_t h;
        memcpy(&h, w + i * ws + off, 2);
        u |= (uint64_t)h << (16 * i);
    }
    return u;
}

/* The same four scales as f32. */
static inline __m128 scales4(const uint8_t *w, size_t ws, int64_t off)
{
    return _mm_cvtph_ps(_mm_cvtsi64_si128((long long)f16x4(w, ws, off)));
}

/* Eight such scales (w, w + ws, .. w + 7 ws) as f32. */
static inline __m256 scales8(const uint8_t *w, size_t ws, int64_t off)
{
    return _mm256_cvtph_ps(
        _mm_set_epi64x((long long)f16x4(w + 4 * ws, ws, off), (long long)f16x4(w, ws, off)));
}

/* Sum of the 32 quants of a q8_0 block. */
static inline int block_sum(const uint8_t *xb)
{
    const __m256i y = _mm256_loadu_si256((const __m256i *)(xb + GS_Q8_0_QS));
    const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), y),
                                        _mm256_set1_epi16(1));
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
    return _mm_cvtsi128_si32(t);
}

static inline __m256i q4_0_block_u(const uint8_t *b)
{
    return nibbles32(b + GS_Q4_0_QS);
}

static inline __m256i q5_0_block_u(const uint8_t *b)
{
    return _mm256_or_si256(nibbles32(b + GS_Q5_0_QS), fifth_bits(b + GS_Q5_0_QH));
}

static inline __m256i q8_0_block(const uint8_t *b)
{
    return _mm256_loadu_si256((const __m256i *)(b + GS_Q8_0_QS));
}

/*
 * The one summation order of every product against q8_0 activations (q4_0,
 * q5_0, q8_0), which the row dots, the decoding paths, the four-row tiles and
 * the panels all follow, so that a row's result has the same bits whichever
 * of them computes it (cpu.h: batch invariance). Block b of a row gives an
 * exact integer I_b (the offset of q4_0/q5_0 taken out in integers) and the
 * scale s_b = f32(d_w) * f32(d_x), rounded once; block b goes to accumulator
 * b % 8: A_j = fma(s_b, I_b, A_j), from zero, blocks in order; the result is
 * ((A_0 + A_4) + (A_2 + A_6)) + ((A_1 + A_5) + (A_3 + A_7)), which is
 * hsum_ps of the eight as vector lanes. A row kernel keeps the eight in the
 * lanes of one vector (a group of eight blocks per step); a kernel whose
 * lanes are rows keeps eight vectors, one per residue (q80_tree).
 */
#define Q80_LANES 8

/* The total of eight int32 lanes. */
static inline int32_t hsum_epi32(__m256i v)
{
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
    return _mm_cvtsi128_si32(t);
}

/* The f16 scales at p, p + stride, .. of the first m (0..8) of eight blocks as
 * f32, 0 for the others: assembled in general registers, as f16x4, and read
 * only where a block is. */
static inline __m256 scales8_first(const uint8_t *p, size_t stride, int m)
{
    uint64_t lo = 0, hi = 0;
    for (int j = 0; j < m; j++) {
        uint16_t h;
        memcpy(&h, p + j * stride, 2);
        if (j < 4)
            lo |= (uint64_t)h << (16 * j);
        else
            hi |= (uint64_t)h << (16 * (j - 4));
    }
    return _mm256_cvtph_ps(_mm_set_epi64x((long long)hi, (long long)lo));
}

/* acc + s * I for the group of m (1..8) blocks at w (wbytes apart) and x
 * (q8_0 blocks): lane j takes block j. signed_q gives a block's quants as
 * signed bytes. Lanes past m add 0 * 0, which leaves them as they are (an
 * accumulator started at +0 is never -0); nothing past block m is read. */
static inline __m256 q80_group(__m256 acc, __m256i (*signed_q)(const uint8_t *), const uint8_t *w,
                               size_t wbytes, const uint8_t *x, int m)
{
    __m256i sj[8];
    __m256 s;
    if (m == 8) {
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            sj[j] =
                dot_i8(signed_q(w + j * wbytes),
                       _mm256_loadu_si256((const __m256i *)(x + j * GS_Q8_0_BYTES + GS_Q8_0_QS)));
        s = _mm256_mul_ps(scales8(w, wbytes, 0), scales8(x, GS_Q8_0_BYTES, 0));
    } else {
        for (int j = 0; j < 8; j++)
            sj[j] = j < m ? dot_i8(signed_q(w + j * wbytes),
                                   _mm256_loadu_si256(
                                       (const __m256i *)(x + j * GS_Q8_0_BYTES + GS_Q8_0_QS)))
                          : _mm256_setzero_si256();
        s = _mm256_mul_ps(scales8_first(w, wbytes, m), scales8_first(x, GS_Q8_0_BYTES, m));
    }
    return _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(hsum8_epi32(sj)), acc);
}

/* The signed quants of a q4_0, q5_0 or q8_0 block. */
static inline __m256i q4_0_block_s(const uint8_t *b)
{
    return _mm256_sub_epi8(nibbles32(b + GS_Q4_0_QS), _mm256_set1_epi8(8));
}

static inline __m256i q5_0_block_s(const uint8_t *b)
{
    return _mm256_sub_epi8(q5_0_block_u(b), _mm256_set1_epi8(16));
}

/* A q80-order row dot of nb blocks: groups of eight, then the rest. */
static inline float q80_dot(__m256i (*signed_q)(const uint8_t *), int64_t nb, const uint8_t *w,
                            size_t wbytes, const uint8_t *x)
{
    __m256 acc = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8)
        acc = q80_group(acc, signed_q, w + b * wbytes, wbytes, x + b * GS_Q8_0_BYTES, 8);
    if (b < nb)
        acc =
            q80_group(acc, signed_q, w + b * wbytes, wbytes, x + b * GS_Q8_0_BYTES, (int)(nb - b));
    return hsum_ps(acc);
}

/* The K-quants' order (against q8_K): super-block b gives exact integers I_b
 * (quants by activations, scales applied, an offset that shares the main
 * scale taken out) and, for formats with minimums, M_b; A = fma(d_w * d_x,
 * I_b, A) and B = fma(dmin_w * d_x, M_b, B), super-blocks in order, from
 * zero; the result is A - B. Panels keep A and B per row lane. */
static inline float kq_fma(float a, float b, float c)
{
    return __builtin_fmaf(a, b, c); /* one vfmadd: these files are built with -mfma */
}

/* ---- the products' cross-file functions ----------------------------------------------------- */

/* Row dots (kernels_avx2_dot.c), gs_cpu_dot_fn: weight row w . activation row x. */
float AVX2_FN(dot_q4_0)(int64_t n, const void *w, const void *x);
float AVX2_FN(dot_q4_1)(int64_t n, const void *w, const void *x);
float AVX2_FN(dot_q5_0)(int64_t n, const void *w, const void *x);
float AVX2_FN(dot_q5_1)(int64_t n, const void *w, const void *x);
float AVX2_FN(dot_q8_0)(int64_t n, const void *w, const void *x);
float AVX2_FN(dot_q2_K)(int64_t n, const void *w, const void *x);
float AVX2_FN(dot_q3_K)(int64_t n, const void *w, const void *x);
float AVX2_FN(dot_q4_K)(int64_t n, const void *w, const void *x);
float AVX2_FN(dot_q5_K)(int64_t n, const void *w, const void *x);
float AVX2_FN(dot_q6_K)(int64_t n, const void *w, const void *x);
#ifndef GS_CPU_VNNI /* the float rows do not use VNNI: plain build only */
float AVX2_FN(dot_f32)(int64_t n, const void *w, const void *x);
float AVX2_FN(dot_f16)(int64_t n, const void *w, const void *x);
float AVX2_FN(dot_bf16)(int64_t n, const void *w, const void *x);
#endif

/* Tiled products (kernels_avx2_tile.c), gs_cpu_gemm_fn. gemm_rows_*: four rows
 * by four tokens, or one row at a time for fewer than four tokens; the panels
 * hand them the steps and rows a panel does not fit. The others are the whole
 * product of their type, or the K-quant panels' fallback. */
#define AVX2_GEMM_DECL(name)                                                                      \
    void AVX2_FN(name)(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs,   \
                       int nt, float *out, size_t os);
AVX2_GEMM_DECL(gemm_rows_q4_0)
AVX2_GEMM_DECL(gemm_rows_q5_0)
AVX2_GEMM_DECL(gemm_rows_q8_0)
AVX2_GEMM_DECL(gemm_q4_1)
AVX2_GEMM_DECL(gemm_q5_1)
AVX2_GEMM_DECL(gemm_q2_K)
AVX2_GEMM_DECL(gemm_q3_K)
AVX2_GEMM_DECL(gemm_q4_K)
AVX2_GEMM_DECL(gemm_q5_K)
AVX2_GEMM_DECL(gemm_q6_K)
#ifndef GS_CPU_VNNI
AVX2_GEMM_DECL(gemm_f32)
AVX2_GEMM_DECL(gemm_f16)
AVX2_GEMM_DECL(gemm_bf16)
#endif
#undef AVX2_GEMM_DECL

#endif /* GS_CPU_AVX2_H */
