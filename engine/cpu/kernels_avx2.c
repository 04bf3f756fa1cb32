/*
 * engine/cpu/kernels_avx2.c - AVX2 + FMA + F16C kernels. This file is compiled
 * with -mavx2 -mfma -mf16c (engine/cpu/meson.build) and only ever called after
 * gs_cpu_isa_best() has seen those features, so a binary built here still runs
 * on an x86-64 without them.
 *
 * Integer products use the usual AVX2 idiom for int8 x int8: maddubs takes an
 * unsigned and a signed operand, so the signed weight moves its sign onto the
 * activation (sign_epi8) and its magnitude becomes the unsigned side. Weights
 * that are unsigned by construction (q4_K/q5_K/q6_K quants before their
 * offset) go in directly, and the offset is applied through q8_K's block sums.
 *
 * Built a second time with GS_CPU_VNNI defined (and AVX-512 VNNI + VL
 * enabled) for CPUs that have vpdpbusd: the unsigned-by-signed byte products
 * then accumulate in one instruction instead of two, with no int16
 * intermediate. Only the kernel table comes from that build.
 */
#include "engine/cpu/cpu.h"
#include "engine/quant/internal.h"

#include <immintrin.h>

#ifdef GS_CPU_VNNI
/* The VNNI build exports only the rows VNNI changes; the rest stays unused. */
#pragma GCC diagnostic ignored "-Wunused-function"
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

/* ---- 32-element formats ------------------------------------------------------------ */

static float dot_q4_0(int64_t n, const void *vw, const void *vx)
{
    const uint8_t *w = vw, *x = vx;
    __m256 acc = _mm256_setzero_ps(), acc2 = _mm256_setzero_ps();
    int64_t b = 0;
    /* Two blocks per round: two independent accumulation chains. */
    for (; b + 2 <= n / GS_QK; b += 2, w += 2 * GS_Q4_0_BYTES, x += 2 * GS_Q8_0_BYTES) {
        const __m256i q0 = _mm256_sub_epi8(nibbles32(w + GS_Q4_0_QS), _mm256_set1_epi8(8));
        const __m256i q1 = _mm256_sub_epi8(nibbles32(w + GS_Q4_0_BYTES + GS_Q4_0_QS),
                                           _mm256_set1_epi8(8));
        const __m256i y0 = _mm256_loadu_si256((const __m256i *)(x + GS_Q8_0_QS));
        const __m256i y1 = _mm256_loadu_si256((const __m256i *)(x + GS_Q8_0_BYTES + GS_Q8_0_QS));
        const __m256 d0 = _mm256_set1_ps(ld_f16(w + GS_Q4_0_D) * ld_f16(x + GS_Q8_0_D));
        const __m256 d1 = _mm256_set1_ps(ld_f16(w + GS_Q4_0_BYTES + GS_Q4_0_D) *
                                         ld_f16(x + GS_Q8_0_BYTES + GS_Q8_0_D));
        acc = _mm256_fmadd_ps(d0, _mm256_cvtepi32_ps(dot_i8(q0, y0)), acc);
        acc2 = _mm256_fmadd_ps(d1, _mm256_cvtepi32_ps(dot_i8(q1, y1)), acc2);
    }
    acc = _mm256_add_ps(acc, acc2);
    for (; b < n / GS_QK; b++, w += GS_Q4_0_BYTES, x += GS_Q8_0_BYTES) {
        const __m256i q = _mm256_sub_epi8(nibbles32(w + GS_Q4_0_QS), _mm256_set1_epi8(8));
        const __m256i y = _mm256_loadu_si256((const __m256i *)(x + GS_Q8_0_QS));
        const __m256 d = _mm256_set1_ps(ld_f16(w + GS_Q4_0_D) * ld_f16(x + GS_Q8_0_D));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8(q, y)), acc);
    }
    return hsum_ps(acc);
}

static float dot_q8_0(int64_t n, const void *vw, const void *vx)
{
    const uint8_t *w = vw, *x = vx;
    __m256 acc = _mm256_setzero_ps(), acc2 = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= n / GS_QK; b += 2, w += 2 * GS_Q8_0_BYTES, x += 2 * GS_Q8_0_BYTES) {
        const __m256i q0 = _mm256_loadu_si256((const __m256i *)(w + GS_Q8_0_QS));
        const __m256i q1 = _mm256_loadu_si256((const __m256i *)(w + GS_Q8_0_BYTES + GS_Q8_0_QS));
        const __m256i y0 = _mm256_loadu_si256((const __m256i *)(x + GS_Q8_0_QS));
        const __m256i y1 = _mm256_loadu_si256((const __m256i *)(x + GS_Q8_0_BYTES + GS_Q8_0_QS));
        const __m256 d0 = _mm256_set1_ps(ld_f16(w + GS_Q8_0_D) * ld_f16(x + GS_Q8_0_D));
        const __m256 d1 = _mm256_set1_ps(ld_f16(w + GS_Q8_0_BYTES + GS_Q8_0_D) *
                                         ld_f16(x + GS_Q8_0_BYTES + GS_Q8_0_D));
        acc = _mm256_fmadd_ps(d0, _mm256_cvtepi32_ps(dot_i8(q0, y0)), acc);
        acc2 = _mm256_fmadd_ps(d1, _mm256_cvtepi32_ps(dot_i8(q1, y1)), acc2);
    }
    acc = _mm256_add_ps(acc, acc2);
    for (; b < n / GS_QK; b++, w += GS_Q8_0_BYTES, x += GS_Q8_0_BYTES) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(w + GS_Q8_0_QS));
        const __m256i y = _mm256_loadu_si256((const __m256i *)(x + GS_Q8_0_QS));
        const __m256 d = _mm256_set1_ps(ld_f16(w + GS_Q8_0_D) * ld_f16(x + GS_Q8_0_D));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8(q, y)), acc);
    }
    return hsum_ps(acc);
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

static float dot_q5_0(int64_t n, const void *vw, const void *vx)
{
    const uint8_t *w = vw, *x = vx;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / GS_QK; b++, w += GS_Q5_0_BYTES, x += GS_Q8_0_BYTES) {
        __m256i q = _mm256_or_si256(nibbles32(w + GS_Q5_0_QS), fifth_bits(w + GS_Q5_0_QH));
        q = _mm256_sub_epi8(q, _mm256_set1_epi8(16));
        const __m256i y = _mm256_loadu_si256((const __m256i *)(x + GS_Q8_0_QS));
        const __m256 d = _mm256_set1_ps(ld_f16(w + GS_Q5_0_D) * ld_f16(x + GS_Q8_0_D));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8(q, y)), acc);
    }
    return hsum_ps(acc);
}

static float dot_q4_1(int64_t n, const void *vw, const void *vx)
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

static float dot_q5_1(int64_t n, const void *vw, const void *vx)
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

/* ---- K-quants against q8_K ------------------------------------------------------------ */

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

/* q4_K (off_qh 0) and q5_K. */
static inline float dot_k45(int64_t n, const uint8_t *w, const uint8_t *x, int block_bytes,
                            int off_qs, int off_qh)
{
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / GS_QK_K; b++, w += block_bytes, x += GS_Q8_K_BYTES) {
        uint8_t s[8], m[8];
        k4_scales(w + GS_Q4_K_SCALES, s, m);
        const float dx = ld_f32(x + GS_Q8_K_D);
        /* Minimums: sum over groups of m[g] * (bsum[2g] + bsum[2g + 1]). */
        const __m256i bs = _mm256_loadu_si256((const __m256i *)(x + GS_Q8_K_BSUMS));
        const __m256i pairs = _mm256_madd_epi16(bs, _mm256_set1_epi16(1));
        uint64_t m64;
        memcpy(&m64, m, 8);
        const __m256i mins = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)m64));
        accm = _mm256_fmadd_ps(_mm256_set1_ps(dx * ld_f16(w + GS_Q4_K_DMIN)),
                               _mm256_cvtepi32_ps(_mm256_mullo_epi32(pairs, mins)), accm);
        const __m256i hb = off_qh ? _mm256_loadu_si256((const __m256i *)(w + off_qh))
                                  : _mm256_setzero_si256();
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
            const __m256i yhi =
                _mm256_loadu_si256((const __m256i *)(x + GS_Q8_K_QS + 64 * j + 32));
            const __m256i slo = _mm256_shuffle_epi8(s16, _mm256_set1_epi16((short)(0x0100 + 0x0404 * j)));
            const __m256i shi = _mm256_shuffle_epi8(s16, _mm256_set1_epi16((short)(0x0302 + 0x0404 * j)));
            const __m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, ylo), slo);
            const __m256i phi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, yhi), shi);
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(plo, phi));
        }
        const __m256 d = _mm256_set1_ps(dx * ld_f16(w + GS_Q4_K_D));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(_mm256_sub_ps(acc, accm));
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

static float dot_q2_K(int64_t n, const void *vw, const void *vx)
{
    const uint8_t *w = vw, *x = vx;
    __m256 acc = _mm256_setzero_ps();
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
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dx * ld_f16(w + GS_Q2_K_D)), _mm256_cvtepi32_ps(sumi),
                              acc);
        acc = _mm256_fnmadd_ps(_mm256_set1_ps(dx * ld_f16(w + GS_Q2_K_DMIN)),
                               _mm256_cvtepi32_ps(msum), acc);
    }
    return hsum_ps(acc);
}

static float dot_q3_K(int64_t n, const void *vw, const void *vx)
{
    const uint8_t *w = vw, *x = vx;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / GS_QK_K; b++, w += GS_Q3_K_BYTES, x += GS_Q8_K_BYTES) {
        const __m128i sc8 = q3_K_scales(w + GS_Q3_K_SCALES);
        /* Quants are u - 4 with u = 2 bits | hmask bit << 2: the 4 comes out
         * through the group sums, 4 * sum of scale[g] * bsum[g]. */
        const __m256i sumi = k23_sum(w + GS_Q3_K_QS, w + GS_Q3_K_HMASK, x,
                                     _mm256_broadcastsi128_si256(sc8));
        const __m256i off = _mm256_madd_epi16(
            _mm256_cvtepi8_epi16(sc8), _mm256_loadu_si256((const __m256i *)(x + GS_Q8_K_BSUMS)));
        const __m256i total = _mm256_sub_epi32(sumi, _mm256_slli_epi32(off, 2));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(ld_f32(x + GS_Q8_K_D) * ld_f16(w + GS_Q3_K_D)),
                              _mm256_cvtepi32_ps(total), acc);
    }
    return hsum_ps(acc);
}

static float dot_q4_K(int64_t n, const void *w, const void *x)
{
    return dot_k45(n, w, x, GS_Q4_K_BYTES, GS_Q4_K_QS, 0);
}

static float dot_q5_K(int64_t n, const void *w, const void *x)
{
    return dot_k45(n, w, x, GS_Q5_K_BYTES, GS_Q5_K_QS, GS_Q5_K_QH);
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

static float dot_q6_K(int64_t n, const void *vw, const void *vx)
{
    const uint8_t *w = vw, *x = vx;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / GS_QK_K; b++, w += GS_Q6_K_BYTES, x += GS_Q8_K_BYTES) {
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)(w + GS_Q6_K_SCALES));
        /* q - 32: the offset goes through the block sums, as a vector:
         * 32 * sum_g sc[g] * bsum[g], subtracted exactly in integers. */
        const __m256i off = _mm256_madd_epi16(
            _mm256_cvtepi8_epi16(sc8), _mm256_loadu_si256((const __m256i *)(x + GS_Q8_K_BSUMS)));
        __m256i sumi = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(off, 5));
        for (int h = 0; h < 2; h++) {
            __m256i q[4];
            q6_K_runs(w, h, q);
            /* Scales 8h..8h+7 as int16 in both halves; group g = 8h + 2k goes
             * to the low half of its run's vector and g + 1 to the high
             * half, each with one byte shuffle. */
            const __m256i s16 = _mm256_broadcastsi128_si256(
                _mm_cvtepi8_epi16(h ? _mm_srli_si128(sc8, 8) : sc8));
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
        const float d = ld_f32(x + GS_Q8_K_D) * ld_f16(w + GS_Q6_K_D);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_ps(acc);
}

/* ---- plain floats ------------------------------------------------------------------------ */

static float dot_f32(int64_t n, const void *vw, const void *vx)
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
static void gemm_f32(int64_t n, const void *vw, size_t ws, int nr, const void *vx, size_t xs,
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
                        dot_f32(n, w0 + (size_t)e * wf, (const float *)vx + (size_t)t * xf);
        }
        for (; r < nr; r++)
            for (int t = t0; t < t1; t++)
                out[(size_t)t * os + r] = dot_f32(n, (const float *)vw + (size_t)r * wf,
                                                  (const float *)vx + (size_t)t * xf);
    }
}

static inline __m256 ld8_f16(const void *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

static inline __m256 ld8_bf16(const void *p)
{
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

static float dot_f16(int64_t n, const void *vw, const void *vx)
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

static float dot_bf16(int64_t n, const void *vw, const void *vx)
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

/* ---- tiled products -------------------------------------------------------------------------
 * Prompt steps and batched decoding spend their time here: each weight block
 * is unpacked once and multiplied with several tokens in registers. Types
 * without a tiled kernel use the cache-blocked generic loop. */

/* Blocks per row up to which the tiled q8_0-partner products keep the token
 * block's activation scales on the stack (K <= 16384). */
#define GEMM_MAX_BLOCKS 512

/* Four int32 vectors of partial sums -> their four totals, in order. */
static inline __m128i sum4_epi32(__m256i s0, __m256i s1, __m256i s2, __m256i s3)
{
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(s0, s1), _mm256_hadd_epi32(s2, s3));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

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

/*
 * Tiled products against q8_0 activations, four weight rows by TOK_TILE
 * tokens: each block of the four rows is unpacked once and each activation
 * block loaded once; the four rows' integer sums are folded into one vector
 * (lane = row), so the float work per block is one convert and two fused
 * multiply-adds for four rows. Unsigned formats (q4_0, q5_0: quant - offset)
 * multiply the raw unsigned quants and subtract offset * sum(y) per block,
 * which needs no sign juggling; q8_0 moves its signs onto the activations.
 * Rows left over (fewer than four) and tokens left over use the paths below.
 */
#define GEMM4_Q80(name, wbytes, unpack_u, offset)                                                \
    static void gemm4_##name(int64_t nb, const uint8_t *wr, size_t ws, const uint8_t *x0,         \
                             size_t xs, const float *dx0, const float *cx0, float *out,           \
                             size_t os, int nk)                                                   \
    {                                                                                             \
        __m128 acc[TOK_TILE];                                                                     \
        for (int k = 0; k < TOK_TILE; k++)                                                        \
            acc[k] = _mm_setzero_ps();                                                            \
        for (int64_t b = 0; b < nb; b++) {                                                        \
            const int64_t off = b * (wbytes);                                                     \
            const __m256i q0 = unpack_u(wr + off), q1 = unpack_u(wr + ws + off);                  \
            const __m256i q2 = unpack_u(wr + 2 * ws + off), q3 = unpack_u(wr + 3 * ws + off);     \
            const __m128 dw = scales4(wr, ws, off);                                               \
            for (int k = 0; k < nk; k++) {                                                        \
                const __m256i y = _mm256_loadu_si256(                                             \
                    (const __m256i *)(x0 + (size_t)k * xs + b * GS_Q8_0_BYTES + GS_Q8_0_QS));     \
                __m128i si;                                                                       \
                if (offset)                                                                       \
                    si = sum4_epi32(dot_u8(q0, y), dot_u8(q1, y), dot_u8(q2, y), dot_u8(q3, y));  \
                else                                                                              \
                    si = sum4_epi32(dot_i8(q0, y), dot_i8(q1, y), dot_i8(q2, y), dot_i8(q3, y));  \
                const __m128 dx = _mm_broadcast_ss(dx0 + (size_t)k * nb + b);                     \
                __m128 t = _mm_mul_ps(dx, _mm_cvtepi32_ps(si));                                   \
                if (offset)                                                                       \
                    t = _mm_add_ps(t, _mm_broadcast_ss(cx0 + (size_t)k * nb + b));                \
                acc[k] = _mm_fmadd_ps(dw, t, acc[k]);                                             \
            }                                                                                     \
        }                                                                                         \
        for (int k = 0; k < nk; k++)                                                              \
            _mm_storeu_ps(out + (size_t)k * os, acc[k]);                                          \
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

GEMM4_Q80(q4_0, GS_Q4_0_BYTES, q4_0_block_u, 8)
GEMM4_Q80(q5_0, GS_Q5_0_BYTES, q5_0_block_u, 16)
GEMM4_Q80(q8_0, GS_Q8_0_BYTES, q8_0_block, 0)
#undef GEMM4_Q80

/*
 * Products for steps of fewer than TOK_TILE tokens (decoding): one weight row
 * at a time, which streams from memory best, with the activation scales
 * (and offset corrections) already as f32, and two blocks per round for two
 * independent accumulation chains.
 */
#define GEMV_Q80(name, wbytes, unpack_u, offset)                                                  \
    static void gemv_##name(int64_t nb, const uint8_t *w, size_t ws, int nr, const uint8_t *x,    \
                            size_t xs, int nt, const float *dxs, const float *cxs, float *out,    \
                            size_t os)                                                            \
    {                                                                                             \
        for (int r = 0; r < nr; r++) {                                                            \
            const uint8_t *wr = w + (size_t)r * ws;                                               \
            for (int t = 0; t < nt; t++) {                                                        \
                const uint8_t *xt = x + (size_t)t * xs;                                           \
                const float *dx = dxs + (size_t)t * nb, *cx = cxs + (size_t)t * nb;               \
                __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();                        \
                __m256 c8 = _mm256_setzero_ps();                                                  \
                float corr = 0;                                                                   \
                int64_t b = 0;                                                                    \
                for (; b + 8 <= nb; b += 8) {                                                     \
                    const uint8_t *w0 = wr + b * (wbytes);                                        \
                    const uint8_t *y0 = xt + b * GS_Q8_0_BYTES + GS_Q8_0_QS;                      \
                    __m256i sj[8];                                                                \
                    _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) {                         \
                        const __m256i q = unpack_u(w0 + j * (wbytes));                            \
                        const __m256i y =                                                         \
                            _mm256_loadu_si256((const __m256i *)(y0 + j * GS_Q8_0_BYTES));        \
                        sj[j] = (offset) ? dot_u8(q, y) : dot_i8(q, y);                           \
                    }                                                                             \
                    const __m256 dw = scales8(w0, (wbytes), 0);                                   \
                    a0 = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_loadu_ps(dx + b)),              \
                                         _mm256_cvtepi32_ps(hsum8_epi32(sj)), a0);                \
                    if (offset)                                                                   \
                        c8 = _mm256_fmadd_ps(dw, _mm256_loadu_ps(cx + b), c8);                    \
                }                                                                                 \
                if (offset)                                                                       \
                    corr = hsum_ps(c8);                                                           \
                for (; b + 2 <= nb; b += 2) {                                                     \
                    const uint8_t *w0 = wr + b * (wbytes), *w1 = w0 + (wbytes);                   \
                    const __m256i y0 = _mm256_loadu_si256(                                        \
                        (const __m256i *)(xt + b * GS_Q8_0_BYTES + GS_Q8_0_QS));                  \
                    const __m256i y1 = _mm256_loadu_si256(                                        \
                        (const __m256i *)(xt + (b + 1) * GS_Q8_0_BYTES + GS_Q8_0_QS));            \
                    const __m256i q0 = unpack_u(w0), q1 = unpack_u(w1);                           \
                    const float d0 = ld_f16(w0), d1 = ld_f16(w1);                                 \
                    const __m256i s0 = (offset) ? dot_u8(q0, y0) : dot_i8(q0, y0);                \
                    const __m256i s1 = (offset) ? dot_u8(q1, y1) : dot_i8(q1, y1);                \
                    a0 = _mm256_fmadd_ps(_mm256_set1_ps(d0 * dx[b]), _mm256_cvtepi32_ps(s0), a0); \
                    a1 = _mm256_fmadd_ps(_mm256_set1_ps(d1 * dx[b + 1]), _mm256_cvtepi32_ps(s1),  \
                                         a1);                                                     \
                    if (offset)                                                                   \
                        corr += d0 * cx[b] + d1 * cx[b + 1];                                      \
                }                                                                                 \
                for (; b < nb; b++) {                                                             \
                    const uint8_t *w0 = wr + b * (wbytes);                                        \
                    const __m256i y0 = _mm256_loadu_si256(                                        \
                        (const __m256i *)(xt + b * GS_Q8_0_BYTES + GS_Q8_0_QS));                  \
                    const __m256i q0 = unpack_u(w0);                                              \
                    const float d0 = ld_f16(w0);                                                  \
                    const __m256i s0 = (offset) ? dot_u8(q0, y0) : dot_i8(q0, y0);                \
                    a0 = _mm256_fmadd_ps(_mm256_set1_ps(d0 * dx[b]), _mm256_cvtepi32_ps(s0), a0); \
                    if (offset)                                                                   \
                        corr += d0 * cx[b];                                                       \
                }                                                                                 \
                out[(size_t)t * os + r] = hsum_ps(_mm256_add_ps(a0, a1)) + corr;                  \
            }                                                                                     \
        }                                                                                         \
    }

GEMV_Q80(q4_0_by_block, GS_Q4_0_BYTES, q4_0_block_u, 8)
GEMV_Q80(q5_0, GS_Q5_0_BYTES, q5_0_block_u, 16)
GEMV_Q80(q8_0, GS_Q8_0_BYTES, q8_0_block, 0)
#undef GEMV_Q80

/*
 * q4_0 decoding, two blocks per unpack. A q4_0 block's 16 bytes hold quants
 * 0-15 in their low nibbles and 16-31 in their high ones, so unpacking one
 * block into one vector costs a lane insert per block. Two blocks loaded side
 * by side give, with one shift and two masks, their low halves in one vector
 * and their high halves in another; the activations are rearranged to match
 * once per call (ypair: per block pair, the two blocks' quants 0-15, then
 * their 16-31), which every row reuses. The integer block sums are the same
 * integers as gemv_q4_0_by_block's, reduced into the same lanes, and the
 * float steps are its own, so the results are bit for bit the same (about a
 * third fewer vector operations per block: 1B q4_0 rows are compute-bound
 * on AVX2, at ~6 GB/s per thread from cache or memory alike).
 */
static void gemv_q4_0(int64_t nb, const uint8_t *w, size_t ws, int nr, const uint8_t *x,
                      size_t xs, int nt, const float *dxs, const float *cxs, float *out,
                      size_t os)
{
    const int64_t n8 = nb / 8 * 8; /* blocks in whole eight-block groups */
    __m256i ypair[(TOK_TILE - 1) * GEMM_MAX_BLOCKS];
    if (nt >= TOK_TILE || nb > GEMM_MAX_BLOCKS || n8 == 0) {
        gemv_q4_0_by_block(nb, w, ws, nr, x, xs, nt, dxs, cxs, out, os);
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
        for (int t = 0; t < nt; t++) {
            const uint8_t *xt = x + (size_t)t * xs;
            const __m256i *yp = ypair + (size_t)t * nb;
            const float *dx = dxs + (size_t)t * nb, *cx = cxs + (size_t)t * nb;
            __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
            __m256 c8 = _mm256_setzero_ps();
            int64_t b = 0;
            for (; b < n8; b += 8) {
                const uint8_t *w0 = wr + b * GS_Q4_0_BYTES;
                __m256i sj[4];
#pragma GCC unroll 4
                for (int j = 0; j < 4; j++) {
                    const uint8_t *wp = w0 + 2 * j * GS_Q4_0_BYTES + GS_Q4_0_QS;
                    const __m256i q = _mm256_set_m128i(
                        _mm_loadu_si128((const __m128i *)(wp + GS_Q4_0_BYTES)),
                        _mm_loadu_si128((const __m128i *)wp));
                    const __m256i lo = _mm256_and_si256(q, m4);
                    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                    /* Pair sums of 15 * 127 twice: far inside int16. */
                    const __m256i s16 = _mm256_add_epi16(
                        _mm256_maddubs_epi16(lo, yp[b + 2 * j]),
                        _mm256_maddubs_epi16(hi, yp[b + 2 * j + 1]));
                    sj[j] = _mm256_madd_epi16(s16, ones);
                }
                const __m256i u = _mm256_hadd_epi32(_mm256_hadd_epi32(sj[0], sj[1]),
                                                    _mm256_hadd_epi32(sj[2], sj[3]));
                const __m256i isum = _mm256_permutevar8x32_epi32(u, order);
                const __m256 dw = scales8(w0, GS_Q4_0_BYTES, 0);
                a0 = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_loadu_ps(dx + b)),
                                     _mm256_cvtepi32_ps(isum), a0);
                c8 = _mm256_fmadd_ps(dw, _mm256_loadu_ps(cx + b), c8);
            }
            float corr = hsum_ps(c8);
            /* The blocks after the last whole group, as gemv_q4_0_by_block
             * takes them. */
            for (; b + 2 <= nb; b += 2) {
                const uint8_t *w0 = wr + b * GS_Q4_0_BYTES, *w1 = w0 + GS_Q4_0_BYTES;
                const __m256i y0 =
                    _mm256_loadu_si256((const __m256i *)(xt + b * GS_Q8_0_BYTES + GS_Q8_0_QS));
                const __m256i y1 = _mm256_loadu_si256(
                    (const __m256i *)(xt + (b + 1) * GS_Q8_0_BYTES + GS_Q8_0_QS));
                const __m256i s0 = dot_u8(q4_0_block_u(w0), y0);
                const __m256i s1 = dot_u8(q4_0_block_u(w1), y1);
                const float d0 = ld_f16(w0), d1 = ld_f16(w1);
                a0 = _mm256_fmadd_ps(_mm256_set1_ps(d0 * dx[b]), _mm256_cvtepi32_ps(s0), a0);
                a1 = _mm256_fmadd_ps(_mm256_set1_ps(d1 * dx[b + 1]), _mm256_cvtepi32_ps(s1), a1);
                corr += d0 * cx[b] + d1 * cx[b + 1];
            }
            for (; b < nb; b++) {
                const uint8_t *w0 = wr + b * GS_Q4_0_BYTES;
                const __m256i y0 =
                    _mm256_loadu_si256((const __m256i *)(xt + b * GS_Q8_0_BYTES + GS_Q8_0_QS));
                const float d0 = ld_f16(w0);
                a0 = _mm256_fmadd_ps(_mm256_set1_ps(d0 * dx[b]),
                                     _mm256_cvtepi32_ps(dot_u8(q4_0_block_u(w0), y0)), a0);
                corr += d0 * cx[b];
            }
            out[(size_t)t * os + r] = hsum_ps(_mm256_add_ps(a0, a1)) + corr;
        }
    }
}

/* The driver: token blocks; in each, the activation scales (and, for offset
 * formats, -offset * scale * sum) as f32, then tiles of 4 rows by up to
 * TOK_TILE tokens, then the rows left over (fewer than four) one by one. */
#define GEMM_Q80(name, offset)                                                                  \
    static void gemm_rows_##name(int64_t n, const void *vw, size_t ws, int nr, const void *vx,        \
                            size_t xs, int nt, float *out, size_t os)                            \
    {                                                                                            \
        const int64_t nb = n / GS_QK;                                                            \
        float dxs[TOK_BLOCK * GEMM_MAX_BLOCKS], cxs[TOK_BLOCK * GEMM_MAX_BLOCKS];                \
        if (nb > GEMM_MAX_BLOCKS) {                                                              \
            gs_cpu__gemm_generic(dot_##name, n, vw, ws, nr, vx, xs, nt, out, os);               \
            return;                                                                              \
        }                                                                                        \
        for (int t0 = 0; t0 < nt; t0 += TOK_BLOCK) {                                             \
            const int t1 = GS_MIN(nt, t0 + TOK_BLOCK);                                           \
            for (int t = t0; t < t1; t++) {                                                      \
                const uint8_t *xt = (const uint8_t *)vx + (size_t)t * xs;                        \
                for (int64_t b = 0; b < nb; b++) {                                               \
                    const float d = ld_f16(xt + b * GS_Q8_0_BYTES);                              \
                    dxs[(t - t0) * nb + b] = d;                                                  \
                    if (offset)                                                                  \
                        cxs[(t - t0) * nb + b] =                                                 \
                            -(float)(offset) * d * (float)block_sum(xt + b * GS_Q8_0_BYTES);    \
                }                                                                                \
            }                                                                                    \
            if (t1 - t0 < TOK_TILE) {                                                            \
                /* Few tokens: rows stream best one at a time (measured: 2x on decode). */        \
                gemv_##name(nb, (const uint8_t *)vw, ws, nr, (const uint8_t *)vx + (size_t)t0 * xs, \
                            xs, t1 - t0, dxs, cxs, out + (size_t)t0 * os, os);                   \
                continue;                                                                        \
            }                                                                                    \
            int r = 0;                                                                           \
            for (; r + 4 <= nr; r += 4)                                                          \
                for (int t = t0; t < t1; t += TOK_TILE)                                          \
                    gemm4_##name(nb, (const uint8_t *)vw + (size_t)r * ws, ws,                   \
                                 (const uint8_t *)vx + (size_t)t * xs, xs, dxs + (t - t0) * nb,  \
                                 cxs + (t - t0) * nb, out + (size_t)t * os + r, os,              \
                                 GS_MIN(TOK_TILE, t1 - t));                                      \
            for (; r < nr; r++)                                                                  \
                for (int t = t0; t < t1; t++)                                                    \
                    out[(size_t)t * os + r] = dot_##name(                                        \
                        n, (const uint8_t *)vw + (size_t)r * ws,                                 \
                        (const uint8_t *)vx + (size_t)t * xs);                                   \
        }                                                                                        \
    }

GEMM_Q80(q4_0, 8)
GEMM_Q80(q5_0, 16)
GEMM_Q80(q8_0, 0)
#undef GEMM_Q80

/*
 * Panel products: PANEL weight rows at a time, transposed in registers so
 * that int32 lane i of every byte product belongs to row i. One vpdpbusd
 * then multiplies four quants of each row with the same four activation
 * bytes (broadcast), and a block's row totals come out in one vector with no
 * horizontal sums. The transposition costs a few dozen shuffles per block of
 * eight rows and is paid once for all the tokens of a token block, so steps
 * of many tokens (prompts, batched decoding) gain and the weights stay as
 * they are in the file: nothing is repacked in memory.
 *
 * vpdpbusd multiplies unsigned by signed bytes: the weights go in unsigned
 * (q4_0/q5_0 quants before their offset, q8_0 quants + 128) and the offset
 * comes out exactly, in integers, as offset * sum(activation quants).
 *
 * Panels are eight rows on 256-bit vectors, and sixteen on 512-bit vectors
 * in the VNNI build. Eight rows issue ten loads (eight broadcast activation
 * dwords, a scale and an offset sum) per eight vpdpbusd and were bound by
 * loads at ~35 of 64 byte products per cycle; sixteen feed each broadcast to
 * twice the rows, and a 512-bit vpdpbusd retires as many products per cycle
 * as two 256-bit ones where the vector units are 256 bits wide (measured on
 * a 16-token q4_0 product: 240 -> 410 Gop/s). The pv_ names below are the
 * few vector operations the panels use, at the build's width.
 */
#ifdef GS_CPU_VNNI
#define PANEL 16
typedef __m512i pv_i;
typedef __m512 pv_f;
#define pv_zero_i _mm512_setzero_si512
#define pv_zero_f _mm512_setzero_ps
#define pv_set1_i32 _mm512_set1_epi32
#define pv_set1_f _mm512_set1_ps
#define pv_dpbusd _mm512_dpbusd_epi32
#define pv_add_i32 _mm512_add_epi32
#define pv_sub_i32 _mm512_sub_epi32
#define pv_mullo_i32 _mm512_mullo_epi32
#define pv_madd_i16 _mm512_madd_epi16
#define pv_cvt _mm512_cvtepi32_ps
#define pv_mul _mm512_mul_ps
#define pv_sub _mm512_sub_ps
#define pv_fmadd _mm512_fmadd_ps
#define pv_load_i(p) _mm512_load_si512((const void *)(p))
#define pv_load_f _mm512_load_ps
#define pv_storeu_f _mm512_storeu_ps
#else
#define PANEL 8
typedef __m256i pv_i;
typedef __m256 pv_f;
#define pv_zero_i _mm256_setzero_si256
#define pv_zero_f _mm256_setzero_ps
#define pv_set1_i32 _mm256_set1_epi32
#define pv_set1_f _mm256_set1_ps
#define pv_dpbusd dpbusd_acc
#define pv_add_i32 _mm256_add_epi32
#define pv_sub_i32 _mm256_sub_epi32
#define pv_mullo_i32 _mm256_mullo_epi32
#define pv_madd_i16 _mm256_madd_epi16
#define pv_cvt _mm256_cvtepi32_ps
#define pv_mul _mm256_mul_ps
#define pv_sub _mm256_sub_ps
#define pv_fmadd _mm256_fmadd_ps
#define pv_load_i(p) _mm256_load_si256((const __m256i *)(p))
#define pv_load_f _mm256_load_ps
#define pv_storeu_f _mm256_storeu_ps
#endif
/* Fewer tokens than this take the row-by-row path (decoding). */
#define PANEL_MIN_TOKENS 4

/* Vector g of a panel from eight-row vectors: h[g] for rows 0..7 and, in a
 * sixteen-row panel, h[8 + g] for rows 8..15. */
static inline pv_i pv_from8(const __m256i *h, int g)
{
#ifdef GS_CPU_VNNI
    return _mm512_inserti64x4(_mm512_castsi256_si512(h[g]), h[8 + g], 1);
#else
    return h[g];
#endif
}

/* The f16 block scales of a panel's rows (ws bytes apart, at offset off). */
static inline pv_f panel_scales(const uint8_t *w, size_t ws, int64_t off)
{
#ifdef GS_CPU_VNNI
    return _mm512_cvtph_ps(_mm256_set_epi64x((long long)f16x4(w + 12 * ws, ws, off),
                                             (long long)f16x4(w + 8 * ws, ws, off),
                                             (long long)f16x4(w + 4 * ws, ws, off),
                                             (long long)f16x4(w, ws, off)));
#else
    return scales8(w, ws, off);
#endif
}

/* a[i] = eight dwords of row i -> a[g] = dword g of rows 0..7. */
static inline void transpose8_epi32(__m256i a[8])
{
    __m256i t[8], u[8];
#pragma GCC unroll 4
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_epi32(a[i], a[i + 1]);
        t[i + 1] = _mm256_unpackhi_epi32(a[i], a[i + 1]);
    }
#pragma GCC unroll 2
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        a[g] = _mm256_permute2x128_si256(u[g], u[g + 4], 0x20);
        a[g + 4] = _mm256_permute2x128_si256(u[g], u[g + 4], 0x31);
    }
}

static inline int32_t ld_i32(const uint8_t *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Asks for the n bytes at p ahead of use. Panels of short rows are too short
 * a stream for the hardware prefetcher: fetching the next panel while this
 * one is multiplied hides the memory latency (measured: the panel loads took
 * a third of 16-stream decoding on 576-wide rows). */
static inline void prefetch_bytes(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i += 64)
        _mm_prefetch((const char *)p + i, _MM_HINT_T1);
}

/* Bytes of the next panel (PANEL rows of ws bytes) each of a panel's nb
 * blocks prefetches, in whole cache lines. */
static inline size_t panel_prefetch_share(size_t ws, int64_t nb)
{
    return (PANEL * ws / (size_t)nb + 63) & ~(size_t)63;
}

static inline __m256i q8_0_block_u(const uint8_t *b)
{
    return _mm256_xor_si256(q8_0_block(b), _mm256_set1_epi8((char)0x80));
}

/* Tokens per register tile of the panel products. */
#define PANEL_TOK 4

/* One packed block of a panel: q[g] lane i = quants 4g..4g+3 of row i. */
struct panel_block {
    pv_i q[8];
};

/* n_tok (<= PANEL_TOK) tokens at x against a packed panel of nb blocks (row
 * scales in dw): the PANEL products of token k go to out + k * os. ox holds
 * -offset * the activation block's quant sum (negated once, so that the
 * accumulator starts from a broadcast load, not from a general register).
 * Unless pf is NULL, each block also prefetches pf_block bytes of the next
 * panel (at pf): spread over the blocks rather than asked for at once, the
 * requests do not fill the miss buffers and stall the products (16-stream
 * decoding of the 1B shape, whose panels are 18-74 KiB: 210-220 -> 258-262
 * tokens/s). */
static inline void panel_tile(int64_t nb, const struct panel_block *pb, const pv_f *dw,
                              const uint8_t *x, size_t xs, int nk, const float *dx,
                              const int32_t *ox, float *out, size_t os, const uint8_t *pf,
                              size_t pf_block, int run16)
{
    pv_f acc[PANEL_TOK];
    for (int k = 0; k < PANEL_TOK; k++)
        acc[k] = pv_zero_f();
    for (int64_t b = 0; b < nb; b++) {
        if (pf)
            prefetch_bytes(pf + b * pf_block, pf_block);
        const pv_i *q = pb[b].q;
        const uint8_t *xb = x + b * GS_Q8_0_BYTES + GS_Q8_0_QS;
#pragma GCC unroll 4
        for (int k = 0; k < PANEL_TOK; k++) {
            if (k >= nk)
                break;
            const uint8_t *y = xb + (size_t)k * xs;
            pv_i s0 = pv_set1_i32(ox[(size_t)k * nb + b]);
            pv_i s1 = pv_zero_i();
#ifdef GS_CPU_VNNI
            (void)run16;
            s0 = pv_dpbusd(s0, q[0], pv_set1_i32(ld_i32(y)));
            s1 = pv_dpbusd(s1, q[1], pv_set1_i32(ld_i32(y + 4)));
            s0 = pv_dpbusd(s0, q[2], pv_set1_i32(ld_i32(y + 8)));
            s1 = pv_dpbusd(s1, q[3], pv_set1_i32(ld_i32(y + 12)));
            s0 = pv_dpbusd(s0, q[4], pv_set1_i32(ld_i32(y + 16)));
            s1 = pv_dpbusd(s1, q[5], pv_set1_i32(ld_i32(y + 20)));
            s0 = pv_dpbusd(s0, q[6], pv_set1_i32(ld_i32(y + 24)));
            s1 = pv_dpbusd(s1, q[7], pv_set1_i32(ld_i32(y + 28)));
#else
            /* maddubs' int16 pair sums of run16 groups added before one
             * widening: exact while run16 pair sums fit in int16, which the
             * callers' quant ranges ensure (q4_0: 8 x 2 x 15 x 128 = 30720). */
            pv_i p = pv_zero_i();
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++) {
                p = _mm256_add_epi16(p, _mm256_maddubs_epi16(q[g], pv_set1_i32(ld_i32(y + 4 * g))));
                if ((g + 1) % run16 == 0) {
                    s0 = pv_add_i32(s0, pv_madd_i16(p, _mm256_set1_epi16(1)));
                    p = pv_zero_i();
                }
            }
#endif
            const pv_f t = pv_mul(pv_cvt(pv_add_i32(s0, s1)), pv_set1_f(dx[(size_t)k * nb + b]));
            acc[k] = pv_fmadd(dw[b], t, acc[k]);
        }
    }
    for (int k = 0; k < nk; k++)
        pv_storeu_f(out + (size_t)k * os, acc[k]);
}

/* Eight rows' blocks at w (ws bytes apart) -> q[g] lane i = quants 4g..4g+3
 * of row i, unsigned. The generic way: unpack each row, transpose. */
#define PACK8_BY_ROWS(name, unpack_u)                                                              \
    static inline void pack8_##name(const uint8_t *w, size_t ws, __m256i q[8])                    \
    {                                                                                             \
        _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) q[i] = unpack_u(w + (size_t)i * ws);  \
        transpose8_epi32(q);                                                                      \
    }
PACK8_BY_ROWS(q5_0, q5_0_block_u)
#ifdef GS_CPU_VNNI
PACK8_BY_ROWS(q8_0, q8_0_block_u)
#endif
#undef PACK8_BY_ROWS

/* q4_0 transposes before unpacking: dword m of a block's 16 quant bytes holds
 * quants 4m..4m+3 (low nibbles) and 16+4m..16+4m+3 (high), so a 4 x 8 dword
 * transpose of the packed bytes and one mask and one shift give all eight
 * vectors: half the shuffles of unpacking eight rows and transposing them. */
static inline void pack8_q4_0(const uint8_t *w, size_t ws, __m256i q[8])
{
    __m256i a[4];
    for (int i = 0; i < 4; i++)
        a[i] = _mm256_set_m128i(
            _mm_loadu_si128((const __m128i *)(w + (size_t)(i + 4) * ws + GS_Q4_0_QS)),
            _mm_loadu_si128((const __m128i *)(w + (size_t)i * ws + GS_Q4_0_QS)));
    const __m256i t0 = _mm256_unpacklo_epi32(a[0], a[1]), t1 = _mm256_unpackhi_epi32(a[0], a[1]);
    const __m256i t2 = _mm256_unpacklo_epi32(a[2], a[3]), t3 = _mm256_unpackhi_epi32(a[2], a[3]);
    const __m256i d[4] = {_mm256_unpacklo_epi64(t0, t2), _mm256_unpackhi_epi64(t0, t2),
                          _mm256_unpacklo_epi64(t1, t3), _mm256_unpackhi_epi64(t1, t3)};
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    for (int m = 0; m < 4; m++) {
        q[m] = _mm256_and_si256(d[m], m4);
        q[4 + m] = _mm256_and_si256(_mm256_srli_epi16(d[m], 4), m4);
    }
}

/*
 * PANEL rows at wr (ws bytes apart) by nt tokens at x (xs apart); dx[k * nb
 * + b] is token k's block scale, ox[k * nb + b] -offset * its quant sum;
 * out[k * os + i] = row i . token k. The panel is unpacked and transposed
 * once into pb/dw (the caller's scratch, nb blocks), eight rows at a time,
 * then read by every tile.
 */
#define PANEL_Q80(name, wbytes, run16)                                                             \
    static void panel_##name(int64_t nb, const uint8_t *wr, size_t ws, const uint8_t *x,          \
                             size_t xs, int nt, const float *dx, const int32_t *ox,               \
                             struct panel_block *pb, pv_f *dw, float *out, size_t os)             \
    {                                                                                             \
        for (int64_t b = 0; b < nb; b++) {                                                        \
            const int64_t off = b * (wbytes);                                                     \
            __m256i h[PANEL];                                                                     \
            for (int j = 0; j < PANEL / 8; j++)                                                   \
                pack8_##name(wr + (size_t)(8 * j) * ws + off, ws, h + 8 * j);                     \
            for (int g = 0; g < 8; g++)                                                           \
                pb[b].q[g] = pv_from8(h, g);                                                      \
            dw[b] = panel_scales(wr, ws, off);                                                    \
        }                                                                                         \
        const size_t pf_block = panel_prefetch_share(ws, nb);                                     \
        for (int k = 0; k < nt; k += PANEL_TOK)                                                   \
            panel_tile(nb, pb, dw, x + (size_t)k * xs, xs, GS_MIN(PANEL_TOK, nt - k),             \
                       dx + (size_t)k * nb, ox + (size_t)k * nb, out + (size_t)k * os, os,        \
                       k ? NULL : wr + PANEL * ws, pf_block, run16);                              \
    }

/* run16: groups whose int16 pair sums stay within int16 without VNNI (quants
 * up to 15 and 31 by q8_0 activations, at most 127 in magnitude; the VNNI
 * build ignores it). */
PANEL_Q80(q4_0, GS_Q4_0_BYTES, 8)
PANEL_Q80(q5_0, GS_Q5_0_BYTES, 4)
#ifdef GS_CPU_VNNI
PANEL_Q80(q8_0, GS_Q8_0_BYTES, 1)
#endif
#undef PANEL_Q80

#ifndef GS_CPU_VNNI
/*
 * q8_0 panels without VNNI. Offsetting the signed quants to unsigned (as the
 * VNNI build does) would reach 255, where maddubs' int16 pair sums saturate,
 * so the panel keeps each lane's magnitude |w| (at most 128) and its sign,
 * and every product moves the weight's sign onto the broadcast activation
 * (sign_epi8) first: |w| * +-y summed in pairs stays within 2 * 128 * 127
 * (q8_0 activations are at most 127 in magnitude). The integer sums are
 * exact and the float steps per row and token are the four-row kernels'
 * (and the VNNI panels'), so the results are theirs bit for bit.
 */
struct panel_block_s8 {
    __m256i mag[8], sgn[8]; /* [g] lane i: quants 4g..4g+3 of row i, |w| and w */
};

static inline void panel_tile_s8(int64_t nb, const struct panel_block_s8 *pb, const __m256 *dw,
                                 const uint8_t *x, size_t xs, int nk, const float *dx,
                                 float *out, size_t os, const uint8_t *pf, size_t pf_block)
{
    __m256 acc[PANEL_TOK];
    for (int k = 0; k < PANEL_TOK; k++)
        acc[k] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t b = 0; b < nb; b++) {
        if (pf)
            prefetch_bytes(pf + b * pf_block, pf_block);
        const struct panel_block_s8 *q = pb + b;
        const uint8_t *xb = x + b * GS_Q8_0_BYTES + GS_Q8_0_QS;
#pragma GCC unroll 4
        for (int k = 0; k < PANEL_TOK; k++) {
            if (k >= nk)
                break;
            const uint8_t *y = xb + (size_t)k * xs;
            /* Two int16 chains of products, widened once per pair of groups. */
            __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int g = 0; g < 8; g += 2) {
                const __m256i y0 = _mm256_set1_epi32(ld_i32(y + 4 * g));
                const __m256i y1 = _mm256_set1_epi32(ld_i32(y + 4 * g + 4));
                const __m256i p0 =
                    _mm256_maddubs_epi16(q->mag[g], _mm256_sign_epi8(y0, q->sgn[g]));
                const __m256i p1 =
                    _mm256_maddubs_epi16(q->mag[g + 1], _mm256_sign_epi8(y1, q->sgn[g + 1]));
                s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(p0, ones));
                s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(p1, ones));
            }
            const __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(s0, s1)),
                                           _mm256_set1_ps(dx[(size_t)k * nb + b]));
            acc[k] = _mm256_fmadd_ps(dw[b], t, acc[k]);
        }
    }
    for (int k = 0; k < nk; k++)
        _mm256_storeu_ps(out + (size_t)k * os, acc[k]);
}

/* The q8_0 panel: PANEL_Q80's contract (ox unused: q8_0 has no offset). */
static void panel_q8_0(int64_t nb, const uint8_t *wr, size_t ws, const uint8_t *x, size_t xs,
                       int nt, const float *dx, const int32_t *ox, struct panel_block_s8 *pb,
                       __m256 *dw, float *out, size_t os)
{
    (void)ox;
    for (int64_t b = 0; b < nb; b++) {
        const int64_t off = b * GS_Q8_0_BYTES;
        __m256i h[8];
        for (int i = 0; i < 8; i++)
            h[i] = q8_0_block(wr + (size_t)i * ws + off);
        transpose8_epi32(h);
        for (int g = 0; g < 8; g++) {
            pb[b].sgn[g] = h[g];
            pb[b].mag[g] = _mm256_abs_epi8(h[g]);
        }
        dw[b] = panel_scales(wr, ws, off);
    }
    const size_t pf_block = panel_prefetch_share(ws, nb);
    for (int k = 0; k < nt; k += PANEL_TOK)
        panel_tile_s8(nb, pb, dw, x + (size_t)k * xs, xs, GS_MIN(PANEL_TOK, nt - k),
                      dx + (size_t)k * nb, out + (size_t)k * os, os, k ? NULL : wr + PANEL * ws,
                      pf_block);
}
#endif

/* The driver: token blocks; in each, the activation scales and offset sums,
 * then the panels; the rows left over (fewer than a panel) go to the
 * four-row kernels. */
#define GEMM_PANEL(name, offset, block_t, min_tokens)                                              \
    static void gemm_##name(int64_t n, const void *vw, size_t ws, int nr, const void *vx,          \
                            size_t xs, int nt, float *out, size_t os)                              \
    {                                                                                              \
        const int64_t nb = n / GS_QK;                                                              \
        if (nt < (min_tokens) || nr < PANEL || nb > GEMM_MAX_BLOCKS) {                             \
            gemm_rows_##name(n, vw, ws, nr, vx, xs, nt, out, os);                                  \
            return;                                                                                \
        }                                                                                          \
        float dxs[TOK_BLOCK * GEMM_MAX_BLOCKS];                                                    \
        int32_t oxs[TOK_BLOCK * GEMM_MAX_BLOCKS];                                                  \
        block_t pb[GEMM_MAX_BLOCKS];                                                               \
        pv_f dw[GEMM_MAX_BLOCKS];                                                                  \
        const uint8_t *w = vw, *x = vx;                                                            \
        const int rp = nr / PANEL * PANEL;                                                         \
        for (int t0 = 0; t0 < nt; t0 += TOK_BLOCK) {                                               \
            const int t1 = GS_MIN(nt, t0 + TOK_BLOCK);                                             \
            for (int t = t0; t < t1; t++) {                                                        \
                const uint8_t *xt = x + (size_t)t * xs;                                            \
                for (int64_t b = 0; b < nb; b++) {                                                 \
                    dxs[(t - t0) * nb + b] = ld_f16(xt + b * GS_Q8_0_BYTES + GS_Q8_0_D);          \
                    oxs[(t - t0) * nb + b] = -(offset) * block_sum(xt + b * GS_Q8_0_BYTES);        \
                }                                                                                  \
            }                                                                                      \
            for (int r = 0; r < rp; r += PANEL)                                                    \
                panel_##name(nb, w + (size_t)r * ws, ws, x + (size_t)t0 * xs, xs, t1 - t0, dxs,   \
                             oxs, pb, dw, out + (size_t)t0 * os + r, os);                          \
        }                                                                                          \
        if (rp < nr)                                                                               \
            gemm_rows_##name(n, w + (size_t)rp * ws, ws, nr - rp, vx, xs, nt, out + rp, os);       \
    }

GEMM_PANEL(q4_0, 8, struct panel_block, PANEL_MIN_TOKENS)
GEMM_PANEL(q5_0, 16, struct panel_block, PANEL_MIN_TOKENS)
#ifdef GS_CPU_VNNI
GEMM_PANEL(q8_0, 128, struct panel_block, PANEL_MIN_TOKENS)
#else
/* A signed panel costs a fourth more per product than an unsigned one and
 * as much to pack as it holds: below 12 tokens the four-row kernels were
 * as fast or faster (single thread, thread CPU time, K 2048 x 1024: 4
 * tokens 0.93 vs 0.74 ms, 8: 1.52 vs 1.46, 12: 2.06 vs 2.16, 16: 2.65 vs
 * 2.88, 64: 9.16 vs 10.99). */
GEMM_PANEL(q8_0, 0, struct panel_block_s8, 12)
#endif
#undef GEMM_PANEL

/* Drives a register-blocked kernel over token tiles within cache blocks. */
typedef void (*tile_fn)(int64_t n, const uint8_t *w, const uint8_t *x, size_t xs, float *out,
                        size_t os);

static inline void gemm_tiled(tile_fn tile, gs_cpu_dot_fn dot, int64_t n, const void *vw,
                              size_t ws, int nr, const void *vx, size_t xs, int nt, float *out,
                              size_t os)
{
    for (int t0 = 0; t0 < nt; t0 += TOK_BLOCK) {
        const int t1 = GS_MIN(nt, t0 + TOK_BLOCK);
        for (int r = 0; r < nr; r++) {
            const uint8_t *wr = (const uint8_t *)vw + (size_t)r * ws;
            int t = t0;
            for (; t + TOK_TILE <= t1; t += TOK_TILE)
                tile(n, wr, (const uint8_t *)vx + (size_t)t * xs, xs, out + (size_t)t * os + r, os);
            for (; t < t1; t++)
                out[(size_t)t * os + r] = dot(n, wr, (const uint8_t *)vx + (size_t)t * xs);
        }
    }
}

/* One q4_K row against TOK_TILE q8_K rows: each 32-quant run is unpacked once. */
static void tile_q4_K(int64_t n, const uint8_t *w, const uint8_t *x, size_t xs, float *out,
                      size_t os)
{
    __m256 acc[TOK_TILE], accm[TOK_TILE];
    for (int k = 0; k < TOK_TILE; k++)
        acc[k] = accm[k] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    for (int64_t b = 0; b < n / GS_QK_K; b++, w += GS_Q4_K_BYTES) {
        uint8_t s[8], m[8];
        k4_scales(w + GS_Q4_K_SCALES, s, m);
        uint64_t m64;
        memcpy(&m64, m, 8);
        const __m256i mins = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)m64));
        const float dw = ld_f16(w + GS_Q4_K_D), dmw = ld_f16(w + GS_Q4_K_DMIN);
        __m256i sumi[TOK_TILE];
        for (int k = 0; k < TOK_TILE; k++)
            sumi[k] = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(w + GS_Q4_K_QS + 32 * j));
            const __m256i lo = _mm256_and_si256(q, m4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            const __m256i slo = _mm256_set1_epi16((short)s[2 * j]);
            const __m256i shi = _mm256_set1_epi16((short)s[2 * j + 1]);
            for (int k = 0; k < TOK_TILE; k++) {
                const uint8_t *xb = x + (size_t)k * xs + b * GS_Q8_K_BYTES + GS_Q8_K_QS + 64 * j;
                const __m256i ylo = _mm256_loadu_si256((const __m256i *)xb);
                const __m256i yhi = _mm256_loadu_si256((const __m256i *)(xb + 32));
                sumi[k] = _mm256_add_epi32(
                    sumi[k], _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(lo, ylo), slo),
                                              _mm256_madd_epi16(_mm256_maddubs_epi16(hi, yhi), shi)));
            }
        }
        for (int k = 0; k < TOK_TILE; k++) {
            const uint8_t *xb = x + (size_t)k * xs + b * GS_Q8_K_BYTES;
            const float dx = ld_f32(xb + GS_Q8_K_D);
            const __m256i pairs = _mm256_madd_epi16(
                _mm256_loadu_si256((const __m256i *)(xb + GS_Q8_K_BSUMS)), _mm256_set1_epi16(1));
            acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(dx * dw), _mm256_cvtepi32_ps(sumi[k]), acc[k]);
            accm[k] = _mm256_fmadd_ps(_mm256_set1_ps(dx * dmw),
                                      _mm256_cvtepi32_ps(_mm256_mullo_epi32(pairs, mins)), accm[k]);
        }
    }
    for (int k = 0; k < TOK_TILE; k++)
        out[(size_t)k * os] = hsum_ps(_mm256_sub_ps(acc[k], accm[k]));
}

/* One q6_K row against TOK_TILE q8_K rows. */
static void tile_q6_K(int64_t n, const uint8_t *w, const uint8_t *x, size_t xs, float *out,
                      size_t os)
{
    __m256 acc[TOK_TILE];
    for (int k = 0; k < TOK_TILE; k++)
        acc[k] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / GS_QK_K; b++, w += GS_Q6_K_BYTES) {
        const int8_t *sc = (const int8_t *)(w + GS_Q6_K_SCALES);
        __m256i sumi[TOK_TILE];
        for (int k = 0; k < TOK_TILE; k++) {
            const uint8_t *xb = x + (size_t)k * xs + b * GS_Q8_K_BYTES;
            int off = 0;
            for (int g = 0; g < 16; g++)
                off += sc[g] * bsum(xb, g);
            sumi[k] = _mm256_setr_epi32(-32 * off, 0, 0, 0, 0, 0, 0, 0);
        }
        for (int h = 0; h < 2; h++) {
            __m256i q[4], scv[4];
            q6_K_runs(w, h, q);
            for (int j = 0; j < 4; j++) {
                const int g = 8 * h + 2 * j;
                scv[j] = _mm256_set_m128i(_mm_set1_epi16(sc[g + 1]), _mm_set1_epi16(sc[g]));
            }
            for (int k = 0; k < TOK_TILE; k++) {
                const uint8_t *xb = x + (size_t)k * xs + b * GS_Q8_K_BYTES + GS_Q8_K_QS + 128 * h;
                for (int j = 0; j < 4; j++) {
                    const __m256i y = _mm256_loadu_si256((const __m256i *)(xb + 32 * j));
                    sumi[k] = _mm256_add_epi32(
                        sumi[k], _mm256_madd_epi16(_mm256_maddubs_epi16(q[j], y), scv[j]));
                }
            }
        }
        const float dw = ld_f16(w + GS_Q6_K_D);
        for (int k = 0; k < TOK_TILE; k++) {
            const float d = dw * ld_f32(x + (size_t)k * xs + b * GS_Q8_K_BYTES + GS_Q8_K_D);
            acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi[k]), acc[k]);
        }
    }
    for (int k = 0; k < TOK_TILE; k++)
        out[(size_t)k * os] = hsum_ps(acc[k]);
}

static void gemm_q4_K(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs,
                      int nt, float *out, size_t os)
{
    gemm_tiled(tile_q4_K, dot_q4_K, n, w, ws, nr, x, xs, nt, out, os);
}

static void gemm_q6_K(int64_t n, const void *w, size_t ws, int nr, const void *x, size_t xs,
                      int nt, float *out, size_t os)
{
    gemm_tiled(tile_q6_K, dot_q6_K, n, w, ws, nr, x, xs, nt, out, os);
}

#define GEMM_OF(name)                                                                              \
    static void gemm_##name(int64_t n, const void *w, size_t ws, int nr, const void *x,           \
                            size_t xs, int nt, float *out, size_t os)                              \
    {                                                                                              \
        gs_cpu__gemm_generic(dot_##name, n, w, ws, nr, x, xs, nt, out, os);                       \
    }
GEMM_OF(q4_1)
GEMM_OF(q5_1)
GEMM_OF(q2_K)
GEMM_OF(q3_K)
GEMM_OF(q5_K)
GEMM_OF(f16)
GEMM_OF(bf16)
#undef GEMM_OF

/*
 * Panel products for q4_K and q6_K against q8_K, built like the q8_0
 * ones above: each row is unpacked into eight runs of 32 unsigned quants,
 * and eight rows at a time are transposed so that lane i is row i. A super-block then has 16
 * groups of 16 quants; group g has one integer scale per row (q4_K: the
 * 6-bit scale of its 32-quant half, q6_K: its own int8 scale) and an offset
 * term c_g * bsum_g, bsum_g being the activation's own 16-element sums
 * (q4_K: c = the 6-bit min, a separate term with scale dmin; q6_K: c = 32 *
 * scale, the quant offset, subtracted exactly in integers).
 */

/* Super-blocks per row up to which the packed panel lives on the stack. */
#define KPANEL_MAX_BLOCKS 64

struct kpanel_block {
    uint8_t q[64][4 * PANEL]; /* [4g + i]: lane r = quants 16g + 4i .. + 3 of row r */
    int32_t sc[16][PANEL];    /* [g][r]: group scale */
    uint32_t c[8][PANEL];     /* [p][r]: offsets c_2p | c_2p+1 << 16 (int16 pairs) */
    float d[PANEL], e[PANEL]; /* [r]: super-block scale; the offset's (q4_K: dmin) */
} __attribute__((aligned(4 * PANEL)));

/*
 * One row of a super-block, as vectors: eight runs of 32 unsigned quants, the
 * group scales as int32 (sc[0]: groups 0-7, sc[1]: 8-15), the offsets as
 * int16 pairs (c: dword p = c_2p | c_2p+1 << 16), and the two float scales.
 * Vectors, so that eight rows transpose with shuffles instead of ~400 scalar
 * stores (the packing was half the work of a 16-token step).
 */
struct krow {
    __m256i run[8], sc[2], c;
    float d, e;
};

/* q4_K (off_qh 0) and q5_K: scales, mins and nibbles at the same places
 * (GS_Q4_K_D, _DMIN, _SCALES = GS_Q5_K_*); q5_K adds a fifth bit (quants up
 * to 31, still under maddubs' 128 bound). */
static inline void kpack_k45(const uint8_t *w, struct krow *k, int off_qs, int off_qh)
{
    const __m256i hb = off_qh ? _mm256_loadu_si256((const __m256i *)(w + off_qh))
                              : _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++)
        k45_runs(w + off_qs, off_qh != 0, hb, j, &k->run[2 * j], &k->run[2 * j + 1]);
    uint8_t s[8], m[8];
    k4_scales(w + GS_Q4_K_SCALES, s, m);
    uint64_t s64, m64;
    memcpy(&s64, s, 8);
    memcpy(&m64, m, 8);
    /* Group g has its 32-quant half's scale and min: s[g / 2], m[g / 2]. */
    const __m256i sv = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)s64));
    const __m256i mv = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)m64));
    k->sc[0] = _mm256_permutevar8x32_epi32(sv, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
    k->sc[1] = _mm256_permutevar8x32_epi32(sv, _mm256_setr_epi32(4, 4, 5, 5, 6, 6, 7, 7));
    k->c = _mm256_or_si256(mv, _mm256_slli_epi32(mv, 16));
    k->d = ld_f16(w + GS_Q4_K_D);
    k->e = ld_f16(w + GS_Q4_K_DMIN);
}

static void kpack_q4_K(const uint8_t *w, struct krow *k)
{
    kpack_k45(w, k, GS_Q4_K_QS, 0);
}

static void kpack_q5_K(const uint8_t *w, struct krow *k)
{
    kpack_k45(w, k, GS_Q5_K_QS, GS_Q5_K_QH);
}

static void kpack_q6_K(const uint8_t *w, struct krow *k)
{
    q6_K_runs(w, 0, k->run);
    q6_K_runs(w, 1, k->run + 4);
    /* int8 scales; the offset of group g is 32 * scale, as int16 pairs. */
    const __m128i s8 = _mm_loadu_si128((const __m128i *)(w + GS_Q6_K_SCALES));
    k->sc[0] = _mm256_cvtepi8_epi32(s8);
    k->sc[1] = _mm256_cvtepi8_epi32(_mm_srli_si128(s8, 8));
    k->c = _mm256_slli_epi16(_mm256_cvtepi8_epi16(s8), 5);
    k->d = k->e = ld_f16(w + GS_Q6_K_D);
}

/* q2_K: quants 0..3; group g's scale and min are the low and high nibbles of
 * byte g, with the super-block scales d and dmin (a separate min term, as
 * q4_K's). */
static void kpack_q2_K(const uint8_t *w, struct krow *k)
{
    for (int r = 0; r < 8; r++)
        k->run[r] = k23_run(w + GS_Q2_K_QS, NULL, r / 4, r % 4);
    const __m128i sc = _mm_loadu_si128((const __m128i *)(w + GS_Q2_K_SCALES));
    const __m128i s4 = _mm_and_si128(sc, _mm_set1_epi8(0x0f));
    k->sc[0] = _mm256_cvtepu8_epi32(s4);
    k->sc[1] = _mm256_cvtepu8_epi32(_mm_srli_si128(s4, 8));
    k->c = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), _mm_set1_epi8(0x0f)));
    k->d = ld_f16(w + GS_Q2_K_D);
    k->e = ld_f16(w + GS_Q2_K_DMIN);
}

/* q3_K: quants u - 4 with u = 0..7; signed 6-bit group scales; the offset
 * of group g is 4 * scale, subtracted exactly, as q6_K's 32 * scale. */
static void kpack_q3_K(const uint8_t *w, struct krow *k)
{
    for (int r = 0; r < 8; r++)
        k->run[r] = k23_run(w + GS_Q3_K_QS, w + GS_Q3_K_HMASK, r / 4, r % 4);
    const __m128i s8 = q3_K_scales(w + GS_Q3_K_SCALES);
    k->sc[0] = _mm256_cvtepi8_epi32(s8);
    k->sc[1] = _mm256_cvtepi8_epi32(_mm_srli_si128(s8, 8));
    k->c = _mm256_slli_epi16(_mm256_cvtepi8_epi16(s8), 2);
    k->d = k->e = ld_f16(w + GS_Q3_K_D);
}

typedef void (*kpack_fn)(const uint8_t *w, struct krow *k);

/* Transposes vector `which` of eight rows (runs 0-7, scales 8-9, offsets 10)
 * into eight vectors at dst, stride bytes apart. */
static inline void kpanel_put(const struct krow k[8], int which, uint8_t *dst, size_t stride)
{
    __m256i a[8];
    for (int r = 0; r < 8; r++)
        a[r] = which < 8 ? k[r].run[which] : which < 10 ? k[r].sc[which - 8] : k[r].c;
    transpose8_epi32(a);
    for (int i = 0; i < 8; i++)
        _mm256_store_si256((__m256i *)(dst + i * stride), a[i]);
}

/* Packs a super-block of PANEL rows at wr (ws bytes apart, at offset off),
 * eight rows at a time into their lanes of each vector. */
static void kpanel_pack(kpack_fn pack, const uint8_t *wr, size_t ws, int64_t off,
                        struct kpanel_block *pb)
{
    struct krow k[PANEL];
    for (int r = 0; r < PANEL; r++) {
        pack(wr + (size_t)r * ws + off, &k[r]);
        pb->d[r] = k[r].d;
        pb->e[r] = k[r].e;
    }
    /* Addressed from the block's start: every vector spans rows of q/sc/c. */
    uint8_t *const base = (uint8_t *)pb;
    const size_t stride = 4 * PANEL, q = offsetof(struct kpanel_block, q),
                 sc = offsetof(struct kpanel_block, sc), c = offsetof(struct kpanel_block, c);
    for (int h = 0; h < PANEL / 8; h++) {
        const struct krow *k8 = k + 8 * h;
        for (int j = 0; j < 8; j++)
            kpanel_put(k8, j, base + q + 8 * j * stride + 32 * h, stride);
        kpanel_put(k8, 8, base + sc + 32 * h, stride);
        kpanel_put(k8, 9, base + sc + 8 * stride + 32 * h, stride);
        kpanel_put(k8, 10, base + c + 32 * h, stride);
    }
}

/* nk (<= PANEL_TOK) tokens at x against a packed panel of nb super-blocks.
 * exact_offset: the offset shares the main scale (q6_K) and is subtracted in
 * integers; otherwise it is its own term with scale e (q4_K's mins). */
static inline void kpanel_tile(int64_t nb, const struct kpanel_block *pb, const uint8_t *x,
                               size_t xs, int nk, float *out, size_t os, bool exact_offset,
                               const uint8_t *pf, size_t pf_block, int run16)
{
    pv_f acc[PANEL_TOK], accm[PANEL_TOK];
    for (int k = 0; k < PANEL_TOK; k++)
        acc[k] = accm[k] = pv_zero_f();
    for (int64_t b = 0; b < nb; b++) {
        if (pf)
            prefetch_bytes(pf + b * pf_block, pf_block);
        const struct kpanel_block *kb = pb + b;
        pv_i isum[PANEL_TOK];
        for (int k = 0; k < PANEL_TOK; k++)
            isum[k] = pv_zero_i();
        for (int g = 0; g < 16; g++) {
            const pv_i q0 = pv_load_i(kb->q[4 * g]), q1 = pv_load_i(kb->q[4 * g + 1]);
            const pv_i q2 = pv_load_i(kb->q[4 * g + 2]), q3 = pv_load_i(kb->q[4 * g + 3]);
            const pv_i scv = pv_load_i(kb->sc[g]);
#ifndef GS_CPU_VNNI
            /* The group scale in both int16 halves of each lane: madd then
             * multiplies and widens maddubs' pair sums in one step. */
            const __m256i sc16 = _mm256_blend_epi16(scv, _mm256_slli_epi32(scv, 16), 0xaa);
#endif
#pragma GCC unroll 4
            for (int k = 0; k < PANEL_TOK; k++) {
                if (k >= nk)
                    break;
                const uint8_t *y = x + (size_t)k * xs + b * GS_Q8_K_BYTES + GS_Q8_K_QS + 16 * g;
#ifdef GS_CPU_VNNI
                (void)run16;
                pv_i s0 = pv_dpbusd(pv_zero_i(), q0, pv_set1_i32(ld_i32(y)));
                pv_i s1 = pv_dpbusd(pv_zero_i(), q1, pv_set1_i32(ld_i32(y + 4)));
                s0 = pv_dpbusd(s0, q2, pv_set1_i32(ld_i32(y + 8)));
                s1 = pv_dpbusd(s1, q3, pv_set1_i32(ld_i32(y + 12)));
                isum[k] = pv_add_i32(isum[k], pv_mullo_i32(pv_add_i32(s0, s1), scv));
#else
                /* int16 sums of run16 (4 or 2) maddubs: exact for quants up
                 * to 31 (4 x 2 x 31 x 128: q8_K reaches -128) and 63 (2 x 2
                 * x 63 x 128). */
                const __m256i p0 = _mm256_maddubs_epi16(q0, pv_set1_i32(ld_i32(y)));
                const __m256i p1 = _mm256_maddubs_epi16(q1, pv_set1_i32(ld_i32(y + 4)));
                const __m256i p2 = _mm256_maddubs_epi16(q2, pv_set1_i32(ld_i32(y + 8)));
                const __m256i p3 = _mm256_maddubs_epi16(q3, pv_set1_i32(ld_i32(y + 12)));
                if (run16 >= 4) {
                    const __m256i p = _mm256_add_epi16(_mm256_add_epi16(p0, p1),
                                                       _mm256_add_epi16(p2, p3));
                    isum[k] = pv_add_i32(isum[k], _mm256_madd_epi16(p, sc16));
                } else {
                    isum[k] = pv_add_i32(
                        isum[k], pv_add_i32(_mm256_madd_epi16(_mm256_add_epi16(p0, p1), sc16),
                                            _mm256_madd_epi16(_mm256_add_epi16(p2, p3), sc16)));
                }
#endif
            }
        }
        const pv_f d = pv_load_f(kb->d), e = pv_load_f(kb->e);
#pragma GCC unroll 4
        for (int k = 0; k < PANEL_TOK; k++) {
            if (k >= nk)
                break;
            const uint8_t *xb = x + (size_t)k * xs + b * GS_Q8_K_BYTES;
            pv_i osum = pv_zero_i();
            for (int p = 0; p < 8; p++)
                osum = pv_add_i32(osum, pv_madd_i16(pv_load_i(kb->c[p]),
                                                    pv_set1_i32(ld_i32(xb + GS_Q8_K_BSUMS + 4 * p))));
            /* Scaled as the row kernels (and llama.cpp) do: the two scales
             * multiplied first, the offset term in its own accumulator. */
            const pv_f dx = pv_set1_f(ld_f32(xb + GS_Q8_K_D));
            if (exact_offset) {
                acc[k] = pv_fmadd(pv_cvt(pv_sub_i32(isum[k], osum)), pv_mul(d, dx), acc[k]);
            } else {
                acc[k] = pv_fmadd(pv_cvt(isum[k]), pv_mul(d, dx), acc[k]);
                accm[k] = pv_fmadd(pv_cvt(osum), pv_mul(e, dx), accm[k]);
            }
        }
    }
    for (int k = 0; k < nk; k++)
        pv_storeu_f(out + (size_t)k * os, exact_offset ? acc[k] : pv_sub(acc[k], accm[k]));
}

/* Token blocks; in each, every panel of PANEL rows is packed once and read by
 * all the block's token tiles; rows left over go to the row kernels. */
#define GEMM_KPANEL(name, wbytes, exact_offset, run16)                                             \
    static void gemm_panel_##name(int64_t n, const void *vw, size_t ws, int nr, const void *vx,    \
                                  size_t xs, int nt, float *out, size_t os)                        \
    {                                                                                              \
        const int64_t nb = n / GS_QK_K;                                                            \
        if (nt < PANEL_MIN_TOKENS || nr < PANEL || nb > KPANEL_MAX_BLOCKS) {                       \
            gemm_##name(n, vw, ws, nr, vx, xs, nt, out, os);                                       \
            return;                                                                                \
        }                                                                                          \
        struct kpanel_block pb[KPANEL_MAX_BLOCKS];                                                 \
        const uint8_t *w = vw, *x = vx;                                                            \
        const int rp = nr / PANEL * PANEL;                                                         \
        const size_t pf_block = panel_prefetch_share(ws, nb);                                      \
        for (int t0 = 0; t0 < nt; t0 += TOK_BLOCK) {                                               \
            const int t1 = GS_MIN(nt, t0 + TOK_BLOCK);                                             \
            for (int r = 0; r < rp; r += PANEL) {                                                  \
                for (int64_t b = 0; b < nb; b++)                                                   \
                    kpanel_pack(kpack_##name, w + (size_t)r * ws, ws, b * (wbytes),                 \
                                pb + b);                                                           \
                for (int t = t0; t < t1; t += PANEL_TOK)                                           \
                    kpanel_tile(nb, pb, x + (size_t)t * xs, xs, GS_MIN(PANEL_TOK, t1 - t),         \
                                out + (size_t)t * os + r, os, exact_offset,                        \
                                t > t0 ? NULL : w + (size_t)(r + PANEL) * ws, pf_block, run16);    \
            }                                                                                      \
        }                                                                                          \
        if (rp < nr)                                                                               \
            gemm_##name(n, w + (size_t)rp * ws, ws, nr - rp, vx, xs, nt, out + rp, os);            \
    }

/* run16 (AVX2 only): maddubs sums per group added in int16 (quants up to 3,
 * 7, 15, 31: four; q6_K's up to 63: two). */
GEMM_KPANEL(q2_K, GS_Q2_K_BYTES, false, 4)
GEMM_KPANEL(q3_K, GS_Q3_K_BYTES, true, 4)
GEMM_KPANEL(q4_K, GS_Q4_K_BYTES, false, 4)
GEMM_KPANEL(q5_K, GS_Q5_K_BYTES, false, 4)
GEMM_KPANEL(q6_K, GS_Q6_K_BYTES, true, 2)
#undef GEMM_KPANEL

#ifdef GS_CPU_VNNI
#define KERNELS_FILL gs_cpu__kernels_vnni_fill
#else
#define KERNELS_FILL gs_cpu__kernels_avx2_fill
#endif

void KERNELS_FILL(struct gs_cpu_kernels *t)
{
#define ROW(ty, name) t[ty] = (struct gs_cpu_kernels){.dot = dot_##name, .gemm = gemm_##name}
    /* The rows whose products go through dot_u8 (the only VNNI difference). */
    ROW(GS_TYPE_Q4_0, q4_0);
    ROW(GS_TYPE_Q4_1, q4_1);
    ROW(GS_TYPE_Q5_0, q5_0);
    ROW(GS_TYPE_Q5_1, q5_1);
    ROW(GS_TYPE_Q8_0, q8_0);
    t[GS_TYPE_Q2_K] = (struct gs_cpu_kernels){.dot = dot_q2_K, .gemm = gemm_panel_q2_K};
    t[GS_TYPE_Q3_K] = (struct gs_cpu_kernels){.dot = dot_q3_K, .gemm = gemm_panel_q3_K};
    t[GS_TYPE_Q4_K] = (struct gs_cpu_kernels){.dot = dot_q4_K, .gemm = gemm_panel_q4_K};
    t[GS_TYPE_Q5_K] = (struct gs_cpu_kernels){.dot = dot_q5_K, .gemm = gemm_panel_q5_K};
    t[GS_TYPE_Q6_K] = (struct gs_cpu_kernels){.dot = dot_q6_K, .gemm = gemm_panel_q6_K};
#ifndef GS_CPU_VNNI
    ROW(GS_TYPE_F32, f32);
    ROW(GS_TYPE_F16, f16);
    ROW(GS_TYPE_BF16, bf16);
#endif
#undef ROW
}

#ifndef GS_CPU_VNNI /* one copy of what does not use VNNI */

/* ---- vector helpers -------------------------------------------------------------------------- */

static void vh_f32_to_f16(const float *x, uint16_t *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        y[i] = gs_f32_to_fp16(x[i]);
}

static void vh_f16_to_f32(const uint16_t *x, float *y, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, ld8_f16(x + i));
    for (; i < n; i++)
        y[i] = gs_fp16_to_f32(x[i]);
}

static float vh_dot_f32(const float *a, const float *b, int64_t n)
{
    return dot_f32(n, a, b);
}

/* Eight vectors -> the vector of their eight horizontal sums, in order. */
static inline __m256 hsum8_ps(const __m256 a[8])
{
    const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
    const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
    const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
                         _mm256_permute2f128_ps(u0, u1, 0x31));
}

/* Eight floats of row v at column i, from f16 or f32 storage. */
static inline __m256 ld8_kv(const void *v, size_t i, bool f16)
{
    return f16 ? ld8_f16((const uint16_t *)v + i) : _mm256_loadu_ps((const float *)v + i);
}

/* q . row for one f16 or f32 row; the same sums for a row and its f32 copy. */
static inline float dot_kv(const float *q, const void *k, int64_t n, bool f16)
{
    __m256 a0 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), ld8_kv(k, (size_t)i, f16), a0);
    float sum = hsum_ps(a0);
    for (; i < n; i++)
        sum += q[i] * (f16 ? gs_fp16_to_f32(((const uint16_t *)k)[i]) : ((const float *)k)[i]);
    return sum;
}

/* Eight keys at a time: eight accumulators, then one transposing reduction
 * instead of eight horizontal sums (attention spent most of its time in
 * those on 64-wide heads). f16 rows and their f32 copies give the same sums. */
static inline void dots(const float *q, const void *k, size_t stride, int n_rows, int64_t n,
                        float *out, bool f16)
{
    int s = 0;
    if (n % 8 == 0) {
        for (; s + 8 <= n_rows; s += 8) {
            __m256 acc[8];
            for (int j = 0; j < 8; j++)
                acc[j] = _mm256_setzero_ps();
            for (int64_t i = 0; i < n; i += 8) {
                const __m256 qv = _mm256_loadu_ps(q + i);
                for (int j = 0; j < 8; j++)
                    acc[j] = _mm256_fmadd_ps(qv, ld8_kv(k, (size_t)(s + j) * stride + i, f16),
                                             acc[j]);
            }
            _mm256_storeu_ps(out + s, hsum8_ps(acc));
        }
    }
    for (; s < n_rows; s++) {
        const size_t row = (size_t)s * stride;
        out[s] = dot_kv(q, f16 ? (const void *)((const uint16_t *)k + row)
                               : (const void *)((const float *)k + row), n, f16);
    }
}

static float vh_dot_f32_f16(const float *a, const uint16_t *b, int64_t n)
{
    return dot_kv(a, b, n, true);
}

static void vh_dots_f16(const float *q, const uint16_t *k, size_t stride, int n_rows,
                        int64_t n, float *out)
{
    dots(q, k, stride, n_rows, n, out, true);
}

static void vh_dots_f32(const float *q, const float *k, size_t stride, int n_rows,
                        int64_t n, float *out)
{
    dots(q, k, stride, n_rows, n, out, false);
}

/* acc[i] += sum_s w[s] * v[s][i]. Columns go 64 at a time with eight
 * accumulators, so that the FMAs of one V row are independent: a single
 * accumulator per eight columns would wait out the FMA latency at every row. */
static inline void axpys(float *acc, const float *w, const void *v, size_t stride, int n_rows,
                         int64_t n, bool f16)
{
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m256 a[8];
        for (int j = 0; j < 8; j++)
            a[j] = _mm256_loadu_ps(acc + i + 8 * j);
        for (int s = 0; s < n_rows; s++) {
            const __m256 ws = _mm256_broadcast_ss(w + s);
            for (int j = 0; j < 8; j++)
                a[j] = _mm256_fmadd_ps(ws, ld8_kv(v, (size_t)s * stride + i + 8 * j, f16), a[j]);
        }
        for (int j = 0; j < 8; j++)
            _mm256_storeu_ps(acc + i + 8 * j, a[j]);
    }
    for (; i + 8 <= n; i += 8) {
        __m256 a = _mm256_loadu_ps(acc + i);
        for (int s = 0; s < n_rows; s++)
            a = _mm256_fmadd_ps(_mm256_broadcast_ss(w + s), ld8_kv(v, (size_t)s * stride + i, f16),
                                a);
        _mm256_storeu_ps(acc + i, a);
    }
    for (; i < n; i++)
        for (int s = 0; s < n_rows; s++) {
            const size_t k = (size_t)s * stride + i;
            acc[i] += w[s] * (f16 ? gs_fp16_to_f32(((const uint16_t *)v)[k]) : ((const float *)v)[k]);
        }
}

/* Four queries against two keys at a time: eight accumulators, each key's
 * vector loaded once for the four (prompt attention was bound by reading
 * every K row once per query), then one transposing reduction. Head sizes
 * that are not a multiple of eight take the single-query path. */
static void vh_dots4(const float *const q[4], const void *k, size_t stride, int n_rows, int64_t n,
                     float *const out[4], bool f16)
{
    int s = 0;
    if (n % 8 == 0) {
        for (; s + 2 <= n_rows; s += 2) {
            __m256 acc[8];
            for (int j = 0; j < 8; j++)
                acc[j] = _mm256_setzero_ps();
            for (int64_t i = 0; i < n; i += 8) {
                const __m256 k0 = ld8_kv(k, (size_t)s * stride + i, f16);
                const __m256 k1 = ld8_kv(k, (size_t)(s + 1) * stride + i, f16);
                for (int j = 0; j < 4; j++) {
                    const __m256 qv = _mm256_loadu_ps(q[j] + i);
                    acc[2 * j] = _mm256_fmadd_ps(qv, k0, acc[2 * j]);
                    acc[2 * j + 1] = _mm256_fmadd_ps(qv, k1, acc[2 * j + 1]);
                }
            }
            float sums[8];
            _mm256_storeu_ps(sums, hsum8_ps(acc));
            for (int j = 0; j < 4; j++) {
                out[j][s] = sums[2 * j];
                out[j][s + 1] = sums[2 * j + 1];
            }
        }
    }
    for (; s < n_rows; s++) {
        const size_t row = (size_t)s * stride;
        const void *kr = f16 ? (const void *)((const uint16_t *)k + row)
                             : (const void *)((const float *)k + row);
        for (int j = 0; j < 4; j++)
            out[j][s] = dot_kv(q[j], kr, n, f16);
    }
}

/* acc[j][i] += sum_s w[j][s] * v[s][i] for four queries, sixteen columns at a
 * time: each V vector is loaded once for the four. Every column sums its
 * rows in order, with the same fused and unfused steps as axpys, so the
 * results equal four axpys calls bit for bit. */
static void vh_axpys4(float *const acc[4], const float *const w[4], const void *v, size_t stride,
                      int n_rows, int64_t n, bool f16)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 a[4][2];
        for (int j = 0; j < 4; j++) {
            a[j][0] = _mm256_loadu_ps(acc[j] + i);
            a[j][1] = _mm256_loadu_ps(acc[j] + i + 8);
        }
        for (int s = 0; s < n_rows; s++) {
            const __m256 v0 = ld8_kv(v, (size_t)s * stride + i, f16);
            const __m256 v1 = ld8_kv(v, (size_t)s * stride + i + 8, f16);
            for (int j = 0; j < 4; j++) {
                const __m256 ws = _mm256_broadcast_ss(w[j] + s);
                a[j][0] = _mm256_fmadd_ps(ws, v0, a[j][0]);
                a[j][1] = _mm256_fmadd_ps(ws, v1, a[j][1]);
            }
        }
        for (int j = 0; j < 4; j++) {
            _mm256_storeu_ps(acc[j] + i, a[j][0]);
            _mm256_storeu_ps(acc[j] + i + 8, a[j][1]);
        }
    }
    if (i < n) /* the columns left: axpys' own eight-column and single-column steps */
        for (int j = 0; j < 4; j++)
            axpys(acc[j] + i, w[j], f16 ? (const void *)((const uint16_t *)v + i)
                                        : (const void *)((const float *)v + i),
                  stride, n_rows, n - i, f16);
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

static void vh_round_f16(float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i),
                                                                _MM_FROUND_TO_NEAREST_INT)));
    for (; i < n; i++)
        x[i] = gs_fp16_to_f32(gs_f32_to_fp16(x[i]));
}

/* ---- activation quantizers ---------------------------------------------------------------------
 * Byte-identical to the reference quantizers of engine/quant (same float
 * operations in the same order: a product, no fused multiply-add), so the cpu
 * backend multiplies exactly the activations ref rounds through. */

static inline __m256 abs_ps(__m256 v)
{
    return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v);
}

static inline float hmax_ps(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

/* e^x, 8 lanes: x = n ln2 + r with |r| <= ln2 / 2 (ln2 in two parts, so r
 * is exact), e^r by its Taylor series to r^7 (truncation below 6e-9), times
 * 2^n built in the exponent bits. x is clamped to [-87.34, 88]: 2^n stays a
 * normal float; below -87.34 the result is 0 (e^x is under 1.2e-38 there). */
static inline __m256 exp_ps(__m256 x)
{
    const __m256 lo = _mm256_set1_ps(-87.3365447504f);
    const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504089f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

static void vh_swiglu(float *o, const float *g, const float *u, int64_t n)
{
    const __m256 one = _mm256_set1_ps(1.0f), neg = _mm256_set1_ps(-0.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(g + i);
        __m256 y = _mm256_div_ps(x, _mm256_add_ps(one, exp_ps(_mm256_xor_ps(x, neg))));
        if (u)
            y = _mm256_mul_ps(y, _mm256_loadu_ps(u + i));
        _mm256_storeu_ps(o + i, y);
    }
    for (; i < n; i++)
        o[i] = g[i] / (1.0f + expf(-g[i])) * (u ? u[i] : 1.0f);
}

/* gelu(h) = h / (1 + e^-2y), y = sqrt(2/pi) (h + 0.044715 h^3): the silu loop with
 * e^-2y, on h = x rounded to f16 and with the result rounded to f16 (cpu.h says why);
 * x <= -10 gives 0 and x >= 10 gives x. */
static inline __m256 round_f16_ps(__m256 x)
{
    return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
}

static void vh_geglu(float *o, const float *g, const float *u, int64_t n)
{
    const __m256 one = _mm256_set1_ps(1.0f), lo = _mm256_set1_ps(-10.0f);
    const __m256 hi = _mm256_set1_ps(10.0f);
    const __m256 k1 = _mm256_set1_ps(-1.5957691216057308f); /* -2 sqrt(2/pi) */
    const __m256 k3 = _mm256_set1_ps(-0.0713548162726009f); /* that times 0.044715 */
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(g + i), h = round_f16_ps(x);
        const __m256 z = _mm256_mul_ps(h, _mm256_fmadd_ps(k3, _mm256_mul_ps(h, h), k1));
        __m256 y = round_f16_ps(_mm256_div_ps(h, _mm256_add_ps(one, exp_ps(z))));
        y = _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, hi, _CMP_GE_OQ));
        y = _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LE_OQ), y);
        if (u)
            y = _mm256_mul_ps(y, _mm256_loadu_ps(u + i));
        _mm256_storeu_ps(o + i, y);
    }
    for (; i < n; i++) {
        const float x = g[i];
        float y = x;
        if (x <= -10.0f) {
            y = 0.0f;
        } else if (x < 10.0f) {
            const float h = gs_fp16_to_f32(gs_f32_to_fp16(x));
            y = gs_fp16_to_f32(gs_f32_to_fp16(
                h / (1.0f + expf(-1.5957691216057308f * (h + 0.044715f * h * h * h)))));
        }
        o[i] = y * (u ? u[i] : 1.0f);
    }
}

static void vh_swiglu_back_gate(float *o, const float *dy, const float *g, const float *u,
                                int64_t n)
{
    const __m256 one = _mm256_set1_ps(1.0f), neg = _mm256_set1_ps(-0.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(g + i);
        const __m256 s = _mm256_div_ps(one, _mm256_add_ps(one, exp_ps(_mm256_xor_ps(x, neg))));
        const __m256 d = _mm256_add_ps(one, _mm256_mul_ps(x, _mm256_sub_ps(one, s)));
        const __m256 du = _mm256_mul_ps(_mm256_loadu_ps(dy + i), _mm256_loadu_ps(u + i));
        _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_mul_ps(du, s), d));
    }
    for (; i < n; i++) {
        const float s = 1.0f / (1.0f + expf(-g[i]));
        o[i] = dy[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
    }
}

static float vh_scale_max(float *x, float scale, int64_t n)
{
    const __m256 vs = _mm256_set1_ps(scale);
    __m256 vm = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
        _mm256_storeu_ps(x + i, v);
        vm = _mm256_max_ps(vm, v);
    }
    float m = hmax_ps(vm);
    for (; i < n; i++) {
        x[i] *= scale;
        m = x[i] > m ? x[i] : m;
    }
    return m;
}

static float vh_exp_sum(float *x, float m, int64_t n)
{
    const __m256 vm = _mm256_set1_ps(m);
    __m256 vsum = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        _mm256_storeu_ps(x + i, v);
        vsum = _mm256_add_ps(vsum, v);
    }
    float sum = hsum_ps(vsum);
    for (; i < n; i++) {
        x[i] = expf(x[i] - m);
        sum += x[i];
    }
    return sum;
}

/* roundf(): to nearest, halves away from zero. */
static inline __m256 round_away_ps(__m256 v)
{
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 half = _mm256_cmp_ps(abs_ps(_mm256_sub_ps(v, t)), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    const __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(v, _mm256_set1_ps(-0.0f)));
    return _mm256_add_ps(t, _mm256_and_ps(half, one));
}

/* 32 int32 lanes in four vectors -> 32 int8 in order, saturating. */
static inline __m256i pack_i32x32(__m256i a, __m256i b, __m256i c, __m256i d)
{
    const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
    return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd),
                                       _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* One 32-element q8 block: quants at qs, returns d; *sum gets the quant sum. */
static inline float q8_block32(const float *x, int8_t *qs, int *sum)
{
    __m256 v[4], amax = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        amax = _mm256_max_ps(amax, abs_ps(v[k]));
    }
    const float d = hmax_ps(amax) / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    __m256i q[4];
    for (int k = 0; k < 4; k++)
        q[k] = _mm256_cvttps_epi32(round_away_ps(_mm256_mul_ps(v[k], _mm256_set1_ps(id))));
    const __m256i all = pack_i32x32(q[0], q[1], q[2], q[3]);
    _mm256_storeu_si256((__m256i *)qs, all);
    if (sum) {
        const __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        __m128i t = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
        t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
        *sum = _mm_cvtsi128_si32(t);
    }
    return d;
}

static inline void st_f16(uint8_t *p, float f)
{
    const uint16_t h = _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
    memcpy(p, &h, 2);
}

static void quantize_q8_0(const float *x, void *dst, int64_t n)
{
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / GS_QK; i++, b += GS_Q8_0_BYTES, x += GS_QK)
        st_f16(b + GS_Q8_0_D, q8_block32(x, (int8_t *)(b + GS_Q8_0_QS), NULL));
}

static void quantize_q8_1(const float *x, void *dst, int64_t n)
{
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / GS_QK; i++, b += GS_Q8_1_BYTES, x += GS_QK) {
        int sum;
        const float d = q8_block32(x, (int8_t *)(b + GS_Q8_1_QS), &sum);
        st_f16(b + GS_Q8_1_D, d);
        st_f16(b + GS_Q8_1_S, (float)sum * d);
    }
}

static void quantize_q8_K(const float *x, void *dst, int64_t n)
{
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / GS_QK_K; i++, b += GS_Q8_K_BYTES, x += GS_QK_K) {
        __m256 am = _mm256_setzero_ps();
        for (int k = 0; k < GS_QK_K; k += 8)
            am = _mm256_max_ps(am, abs_ps(_mm256_loadu_ps(x + k)));
        const float amax = hmax_ps(am);
        if (amax == 0.0f) {
            memset(b, 0, GS_Q8_K_BYTES);
            continue;
        }
        /* The first element of largest magnitude sets the sign, as in the reference. */
        float max = 0;
        for (int k = 0; k < GS_QK_K; k++) {
            if (fabsf(x[k]) == amax) {
                max = x[k];
                break;
            }
        }
        const float iscale = -127.f / max;
        const __m256 vs = _mm256_set1_ps(iscale);
        const __m256 lo = _mm256_set1_ps(-128.0f), hi = _mm256_set1_ps(127.0f);
        int8_t *qs = (int8_t *)(b + GS_Q8_K_QS);
        for (int k = 0; k < GS_QK_K; k += 32) {
            __m256i q[4];
            for (int j = 0; j < 4; j++) {
                __m256 v = _mm256_mul_ps(vs, _mm256_loadu_ps(x + k + 8 * j));
                v = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                q[j] = _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(v, lo), hi));
            }
            _mm256_storeu_si256((__m256i *)(qs + k), pack_i32x32(q[0], q[1], q[2], q[3]));
        }
        for (int g = 0; g < GS_QK_K / 16; g++) {
            const __m256i w = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(qs + 16 * g)));
            __m256i s = _mm256_madd_epi16(w, _mm256_set1_epi16(1));
            __m128i t = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
            t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
            const int16_t sum = (int16_t)_mm_cvtsi128_si32(t);
            memcpy(b + GS_Q8_K_BSUMS + 2 * g, &sum, 2);
        }
        const float d = 1 / iscale;
        memcpy(b + GS_Q8_K_D, &d, 4);
    }
}

static void quantize_f16(const float *x, void *dst, int64_t n)
{
    vh_f32_to_f16(x, dst, n);
}

void gs_cpu__quantizers_avx2_fill(gs_from_f32_fn *t)
{
    t[GS_TYPE_Q8_0] = quantize_q8_0;
    t[GS_TYPE_Q8_1] = quantize_q8_1;
    t[GS_TYPE_Q8_K] = quantize_q8_K;
    t[GS_TYPE_F16] = quantize_f16;
}

void gs_cpu__helpers_avx2_fill(struct gs_cpu_helpers *h)
{
    h->f32_to_f16 = vh_f32_to_f16;
    h->f16_to_f32 = vh_f16_to_f32;
    h->dot_f32 = vh_dot_f32;
    h->dot_f32_f16 = vh_dot_f32_f16;
    h->dots_f16 = vh_dots_f16;
    h->dots_f32 = vh_dots_f32;
    h->axpys_f16 = vh_axpys_f16;
    h->axpys_f32 = vh_axpys_f32;
    h->dots4 = vh_dots4;
    h->axpys4 = vh_axpys4;
    h->round_f16 = vh_round_f16;
    h->swiglu = vh_swiglu;
    h->geglu = vh_geglu;
    h->scale_max = vh_scale_max;
    h->exp_sum = vh_exp_sum;
    h->gemm_f32 = gs_cpu__gemm_f32_avx2;
    h->swiglu_back_gate = vh_swiglu_back_gate;
}

#endif /* !GS_CPU_VNNI */
