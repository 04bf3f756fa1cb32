/*
 * engine/cpu/kernels_avx2_vec.c - the AVX2 vector helpers (KV-row
 * conversions, attention's dots and weighted sums, SwiGLU/GELU, softmax
 * pieces) and activation quantizers. Its own file because none of it uses
 * VNNI: it is built once, into the plain AVX2 library, while the products are
 * built twice (avx2.h). The quantizers are byte-identical to engine/quant's
 * reference ones (-ffp-contract=off, the same operations in the same order).
 */
#include "engine/cpu/avx2.h"

#include <math.h>

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
    return AVX2_FN(dot_f32)(n, a, b);
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

/* 32 int32 lanes in four vectors -> 32 int8 in order, saturating. */
static inline __m256i pack_i32x32(__m256i a, __m256i b, __m256i c, __m256i d)
{
    const __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
    return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd),
                                       _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* One 32-element q8 block as a dot product's activations (gs_activation_quantizer):
 * multiplier 127 / amax, halves to even. Quants at qs, returns d; *sum gets the
 * quant sum. */
static inline float q8_block32(const float *x, int8_t *qs, int *sum)
{
    __m256 v[4], amax = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        amax = _mm256_max_ps(amax, abs_ps(v[k]));
    }
    const float m = hmax_ps(amax), d = m / 127;
    const float id = m != 0.0f ? 127 / m : 0.0f;
    __m256i q[4];
    for (int k = 0; k < 4; k++)
        q[k] = _mm256_cvttps_epi32(_mm256_round_ps(_mm256_mul_ps(v[k], _mm256_set1_ps(id)),
                                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
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

/* ---- a q8_0 cache (cpu.h: gs_cpu_dots_q8_0, gs_cpu_axpys_q8_0) --------------------------------
 */

/* Eight int8 quants at x as f32. */
static inline __m256 ld8_i8(const int8_t *x)
{
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)x)));
}

/* q . n elements of whole blocks starting at block b: each block's 32 products
 * in two chains, then its scale. */
static inline __m256 dot_q8_0_blocks(const float *q, const uint8_t *b, int64_t n)
{
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += GS_QK, b += GS_Q8_0_BYTES) {
        const int8_t *x = (const int8_t *)(b + GS_Q8_0_QS);
        __m256 p0 = _mm256_mul_ps(_mm256_loadu_ps(q + i), ld8_i8(x));
        __m256 p1 = _mm256_mul_ps(_mm256_loadu_ps(q + i + 8), ld8_i8(x + 8));
        p0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 16), ld8_i8(x + 16), p0);
        p1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 24), ld8_i8(x + 24), p1);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(ld_f16(b + GS_Q8_0_D)), _mm256_add_ps(p0, p1), acc);
    }
    return acc;
}

/* The same for a slice that begins or ends inside a block: each block's part
 * eight elements at a time where eight remain in it, the rest one by one. */
static float dot_q8_0_slice(const float *q, const uint8_t *row, int64_t off, int64_t n)
{
    __m256 acc = _mm256_setzero_ps();
    float rest = 0;
    for (int64_t i = 0; i < n;) {
        const int64_t e = off + i, m = GS_MIN(GS_QK - e % GS_QK, n - i);
        const uint8_t *b = row + e / GS_QK * GS_Q8_0_BYTES;
        const int8_t *x = (const int8_t *)(b + GS_Q8_0_QS) + e % GS_QK;
        const float d = ld_f16(b + GS_Q8_0_D);
        __m256 part = _mm256_setzero_ps();
        int64_t j = 0;
        for (; j + 8 <= m; j += 8)
            part = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + j), ld8_i8(x + j), part);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), part, acc);
        float tail = 0;
        for (; j < m; j++)
            tail += q[i + j] * (float)x[j];
        rest += d * tail;
        i += m;
    }
    return hsum_ps(acc) + rest;
}

/* Whole blocks: eight keys at a time, reduced together (as dots() above). */
static void vh_dots_q8_0(const float *q, const void *k, size_t stride, int n_rows, int64_t off,
                         int64_t n, float *out)
{
    const uint8_t *rows = k;
    int s = 0;
    if (off % GS_QK == 0 && n % GS_QK == 0) {
        const size_t first = (size_t)(off / GS_QK) * GS_Q8_0_BYTES;
        for (; s + 8 <= n_rows; s += 8) {
            __m256 acc[8];
            for (int j = 0; j < 8; j++)
                acc[j] = dot_q8_0_blocks(q, rows + (size_t)(s + j) * stride + first, n);
            _mm256_storeu_ps(out + s, hsum8_ps(acc));
        }
        for (; s < n_rows; s++)
            out[s] = hsum_ps(dot_q8_0_blocks(q, rows + (size_t)s * stride + first, n));
        return;
    }
    for (; s < n_rows; s++)
        out[s] = dot_q8_0_slice(q, rows + (size_t)s * stride, off, n);
}

/* Whole blocks: 32 columns at a time held in four accumulators over every row,
 * so that one row's FMAs are independent; otherwise a row at a time. */
static void vh_axpys_q8_0(float *acc, const float *w, const void *v, size_t stride, int n_rows,
                          int64_t off, int64_t n)
{
    const uint8_t *rows = v;
    if (off % GS_QK == 0 && n % GS_QK == 0) {
        for (int64_t i = 0; i < n; i += GS_QK) {
            const size_t blk = (size_t)((off + i) / GS_QK) * GS_Q8_0_BYTES;
            __m256 a[4];
            for (int j = 0; j < 4; j++)
                a[j] = _mm256_loadu_ps(acc + i + 8 * j);
            for (int s = 0; s < n_rows; s++) {
                const uint8_t *b = rows + (size_t)s * stride + blk;
                const int8_t *x = (const int8_t *)(b + GS_Q8_0_QS);
                const __m256 c = _mm256_set1_ps(w[s] * ld_f16(b + GS_Q8_0_D));
                for (int j = 0; j < 4; j++)
                    a[j] = _mm256_fmadd_ps(c, ld8_i8(x + 8 * j), a[j]);
            }
            for (int j = 0; j < 4; j++)
                _mm256_storeu_ps(acc + i + 8 * j, a[j]);
        }
        return;
    }
    for (int s = 0; s < n_rows; s++) {
        const uint8_t *row = rows + (size_t)s * stride;
        for (int64_t i = 0; i < n;) {
            const int64_t e = off + i, m = GS_MIN(GS_QK - e % GS_QK, n - i);
            const uint8_t *b = row + e / GS_QK * GS_Q8_0_BYTES;
            const int8_t *x = (const int8_t *)(b + GS_Q8_0_QS) + e % GS_QK;
            const float c = w[s] * ld_f16(b + GS_Q8_0_D);
            int64_t j = 0;
            for (; j + 8 <= m; j += 8)
                _mm256_storeu_ps(acc + i + j, _mm256_fmadd_ps(_mm256_set1_ps(c), ld8_i8(x + j),
                                                              _mm256_loadu_ps(acc + i + j)));
            for (; j < m; j++)
                acc[i + j] += c * (float)x[j];
            i += m;
        }
    }
}

/* dot_q8_0_blocks for four queries, each block's quants converted once: per
 * query the same operations in the same order, so the same sums. */
static inline void dot4_q8_0_blocks(const float *const q[4], const uint8_t *b, int64_t n,
                                    __m256 acc[4])
{
    for (int j = 0; j < 4; j++)
        acc[j] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += GS_QK, b += GS_Q8_0_BYTES) {
        const int8_t *x = (const int8_t *)(b + GS_Q8_0_QS);
        const __m256 x0 = ld8_i8(x), x1 = ld8_i8(x + 8), x2 = ld8_i8(x + 16), x3 = ld8_i8(x + 24);
        const __m256 d = _mm256_set1_ps(ld_f16(b + GS_Q8_0_D));
        for (int j = 0; j < 4; j++) {
            __m256 p0 = _mm256_mul_ps(_mm256_loadu_ps(q[j] + i), x0);
            __m256 p1 = _mm256_mul_ps(_mm256_loadu_ps(q[j] + i + 8), x1);
            p0 = _mm256_fmadd_ps(_mm256_loadu_ps(q[j] + i + 16), x2, p0);
            p1 = _mm256_fmadd_ps(_mm256_loadu_ps(q[j] + i + 24), x3, p1);
            acc[j] = _mm256_fmadd_ps(d, _mm256_add_ps(p0, p1), acc[j]);
        }
    }
}

/* Rows grouped and reduced as vh_dots_q8_0 groups them, per query. */
static void vh_dots4_q8_0(const float *const q[4], const void *k, size_t stride, int n_rows,
                          int64_t off, int64_t n, float *const out[4])
{
    if (off % GS_QK || n % GS_QK) {
        for (int j = 0; j < 4; j++)
            vh_dots_q8_0(q[j], k, stride, n_rows, off, n, out[j]);
        return;
    }
    const uint8_t *rows = k;
    const size_t first = (size_t)(off / GS_QK) * GS_Q8_0_BYTES;
    int s = 0;
    for (; s + 8 <= n_rows; s += 8) {
        __m256 acc[4][8], a4[4];
        for (int r = 0; r < 8; r++) {
            dot4_q8_0_blocks(q, rows + (size_t)(s + r) * stride + first, n, a4);
            for (int j = 0; j < 4; j++)
                acc[j][r] = a4[j];
        }
        for (int j = 0; j < 4; j++)
            _mm256_storeu_ps(out[j] + s, hsum8_ps(acc[j]));
    }
    for (; s < n_rows; s++) {
        __m256 a4[4];
        dot4_q8_0_blocks(q, rows + (size_t)s * stride + first, n, a4);
        for (int j = 0; j < 4; j++)
            out[j][s] = hsum_ps(a4[j]);
    }
}

/* vh_axpys_q8_0's whole-block path for four queries, sixteen columns at a time
 * (eight accumulators): each column's sum is the same chain of FMAs over the
 * rows in order. */
static void vh_axpys4_q8_0(float *const acc[4], const float *const w[4], const void *v,
                           size_t stride, int n_rows, int64_t off, int64_t n)
{
    if (off % GS_QK || n % GS_QK) {
        for (int j = 0; j < 4; j++)
            vh_axpys_q8_0(acc[j], w[j], v, stride, n_rows, off, n);
        return;
    }
    const uint8_t *rows = v;
    for (int64_t i = 0; i < n; i += 16) {
        const size_t blk = (size_t)((off + i) / GS_QK) * GS_Q8_0_BYTES;
        const int64_t in = (off + i) % GS_QK; /* 0 or 16 */
        __m256 a[4][2];
        for (int j = 0; j < 4; j++) {
            a[j][0] = _mm256_loadu_ps(acc[j] + i);
            a[j][1] = _mm256_loadu_ps(acc[j] + i + 8);
        }
        for (int s = 0; s < n_rows; s++) {
            const uint8_t *b = rows + (size_t)s * stride + blk;
            const int8_t *x = (const int8_t *)(b + GS_Q8_0_QS) + in;
            const __m256 x0 = ld8_i8(x), x1 = ld8_i8(x + 8);
            const float d = ld_f16(b + GS_Q8_0_D);
            for (int j = 0; j < 4; j++) {
                const __m256 c = _mm256_set1_ps(w[j][s] * d);
                a[j][0] = _mm256_fmadd_ps(c, x0, a[j][0]);
                a[j][1] = _mm256_fmadd_ps(c, x1, a[j][1]);
            }
        }
        for (int j = 0; j < 4; j++) {
            _mm256_storeu_ps(acc[j] + i, a[j][0]);
            _mm256_storeu_ps(acc[j] + i + 8, a[j][1]);
        }
    }
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
    h->dots_q8_0 = vh_dots_q8_0;
    h->axpys_q8_0 = vh_axpys_q8_0;
    h->dots4_q8_0 = vh_dots4_q8_0;
    h->axpys4_q8_0 = vh_axpys4_q8_0;
    h->swiglu = vh_swiglu;
    h->geglu = vh_geglu;
    h->scale_max = vh_scale_max;
    h->exp_sum = vh_exp_sum;
    h->gemm_f32 = gs_cpu__gemm_f32_avx2;
    h->swiglu_back_gate = vh_swiglu_back_gate;
}
