/*
 * engine/quant/kquants.c - the 256-element super-block formats ("K-quants"):
 * q2_K, q3_K, q4_K, q5_K, q6_K and q8_K.
 *
 * A super-block is split into groups of 16 (q2_K, q3_K, q6_K) or 32 (q4_K,
 * q5_K) elements. Each group has its own scale (and, for q2_K/q4_K/q5_K, its
 * own minimum), itself quantized to 4, 6 or 8 bits against one f16 super-scale
 * per block. q8_K is the activation format for dot products with the others.
 *
 * The quantizers are the deterministic reference ones that llama.cpp uses when
 * no importance matrix is given: a weighted least-squares search for each
 * group's scale (and minimum), then a second pass that requantizes every value
 * against the scale as it will actually be decoded. Float operations are kept
 * in the reference's order and precision, so that requantizing a block that
 * llama.cpp wrote usually reproduces its bytes.
 *
 * Decoding iterates over the natural element order and computes where each
 * element's bits live; the layouts are described at each format.
 */
#include "engine/quant/internal.h"

/* Groups whose largest magnitude is below this are treated as all zero. */
#define GROUP_MAX_EPS 1e-15f

/* ---- scale search ----------------------------------------------------------- */

/*
 * Symmetric quantization of x[0..n) to L[i] in [0, 2*nmax) meaning
 * (L[i] - nmax) * scale; returns scale. The first guess maps the value of
 * largest magnitude to -nmax; then 18 nearby scales are tried and the one that
 * maximises the weighted fit (sum w*x*l)^2 / (sum w*l^2) wins, with weights
 * w = x^2 (large values matter most). The returned scale is the least-squares
 * scale for the chosen L.
 */
static float make_qx_quants(int n, int nmax, const float *x, int8_t *L)
{
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    }
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = gs_quant__round_clamp(iscale * x[i], -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0)
            continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            const int l = gs_quant__round_clamp(iscale * x[i], -nmax, nmax - 1);
            const float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i)
                L[i] = (int8_t)(nmax + gs_quant__round_clamp(iscale * x[i], -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/*
 * Like make_qx_quants for q3_K: L[i] in [0, 2*nmax). After the first guess,
 * up to 5 coordinate-descent sweeps move single quants while that improves the
 * x^2-weighted fit.
 */
static float make_q3_quants(int n, int nmax, const float *x, int8_t *L)
{
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    }
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, (size_t)n);
        return 0.0f;
    }
    const float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = gs_quant__round_clamp(iscale * x[i], -nmax, nmax - 1);
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                const int new_l = gs_quant__round_clamp(x[i] * sl2 / slx, -nmax, nmax - 1);
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed)
            break;
    }
    for (int i = 0; i < n; ++i)
        L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/*
 * Asymmetric quantization of x[0..n) to L[i] in [0, nmax] meaning
 * L[i] * scale - *the_min; returns scale (*the_min >= 0: the minimum is never
 * above zero). Starting from the min..max range, nstep+1 candidate scales
 * (nmax + rmin + rdelta*k over the range) are tried; for each, the weighted
 * least-squares scale and minimum for the resulting L are solved in closed form
 * and kept if they lower the weighted error (absolute if use_mad, else
 * squared). Laux is scratch of n bytes.
 */
static float make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L,
                              float *the_min, uint8_t *Laux, float rmin, float rdelta, int nstep,
                              bool use_mad)
{
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min)
            min = x[i];
        if (x[i] > max)
            max = x[i];
        const float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0)
        min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0.0f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        L[i] = (uint8_t)gs_quant__round_clamp(iscale * (x[i] - min), 0, nmax);
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += weights[i] * diff;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            const int l = gs_quant__round_clamp(iscale * (x[i] - min), 0, nmax);
            Laux[i] = (uint8_t)l;
            const float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                cur_error += weights[i] * diff;
            }
            if (cur_error < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/* The reference stores some rounded values straight into a byte, wrapping
 * out-of-range ones; these keep that (rare) behaviour well defined. */
static inline uint8_t wrap_u8(int v)
{
    return (uint8_t)(v & 0xff);
}

/* Packs 256 2-bit quants: byte l of each 32-byte half holds elements l, l+32,
 * l+64, l+96 of that half's 128 elements, lowest bits first (q2_K, q3_K). */
static void pack_2bit(const uint8_t *L, uint8_t *qs)
{
    for (int j = 0; j < GS_QK_K; j += 128) {
        for (int l = 0; l < 32; ++l) {
            qs[j / 4 + l] = (uint8_t)((L[j + l] & 3) | ((L[j + l + 32] & 3) << 2) |
                                      ((L[j + l + 64] & 3) << 4) | ((L[j + l + 96] & 3) << 6));
        }
    }
}

/* Two bits of element e in the 2-bit layout above. */
static inline int unpack_2bit(const uint8_t *qs, int e)
{
    return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

/* ---- q2_K ------------------------------------------------------------------------
 * x = d * (sc & 15) * q - dmin * (sc >> 4), with sc = scales[e / 16], q 2 bits. */

void gs_quant__q2_K_to_f32(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / GS_QK_K; i++, b += GS_Q2_K_BYTES, dst += GS_QK_K) {
        const float d = gs_quant_ldf16(b + GS_Q2_K_D);
        const float dmin = gs_quant_ldf16(b + GS_Q2_K_DMIN);
        for (int g = 0; g < GS_QK_K / 16; g++) {
            const uint8_t sc = b[GS_Q2_K_SCALES + g];
            const float dl = d * (sc & 0xf);
            const float ml = dmin * (sc >> 4);
            for (int e = 16 * g; e < 16 * g + 16; e++)
                dst[e] = dl * unpack_2bit(b + GS_Q2_K_QS, e) - ml;
        }
    }
}

void gs_quant__q2_K_from_f32(const float *src, void *dst, int64_t n)
{
    uint8_t *b = dst;
    uint8_t L[GS_QK_K], Laux[16];
    float weights[16], mins[GS_QK_K / 16], scales[GS_QK_K / 16];
    const float q4scale = 15.f;

    for (int64_t i = 0; i < n / GS_QK_K; i++, b += GS_Q2_K_BYTES, src += GS_QK_K) {
        const float *x = src;
        uint8_t *sc = b + GS_Q2_K_SCALES;
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < GS_QK_K / 16; ++j) {
            for (int l = 0; l < 16; ++l)
                weights[l] = fabsf(x[16 * j + l]);
            scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux,
                                         -0.5f, 0.1f, 15, true);
            if (scales[j] > max_scale)
                max_scale = scales[j];
            if (mins[j] > max_min)
                max_min = mins[j];
        }

        if (max_scale > 0) {
            const float iscale = q4scale / max_scale;
            for (int j = 0; j < GS_QK_K / 16; ++j)
                sc[j] = wrap_u8(gs_quant__round(iscale * scales[j]));
            gs_quant__st16(b + GS_Q2_K_D, gs_f32_to_fp16(max_scale / q4scale));
        } else {
            memset(sc, 0, GS_QK_K / 16);
            gs_quant__st16(b + GS_Q2_K_D, gs_f32_to_fp16(0.f));
        }
        if (max_min > 0) {
            const float iscale = q4scale / max_min;
            for (int j = 0; j < GS_QK_K / 16; ++j)
                sc[j] = wrap_u8(sc[j] | (gs_quant__round(iscale * mins[j]) << 4));
            gs_quant__st16(b + GS_Q2_K_DMIN, gs_f32_to_fp16(max_min / q4scale));
        } else {
            gs_quant__st16(b + GS_Q2_K_DMIN, gs_f32_to_fp16(0.f));
        }

        /* Requantize against the scales as they will be decoded. */
        const float d_all = gs_quant_ldf16(b + GS_Q2_K_D);
        const float dmin_all = gs_quant_ldf16(b + GS_Q2_K_DMIN);
        for (int j = 0; j < GS_QK_K / 16; ++j) {
            const float d = d_all * (sc[j] & 0xf);
            if (d == 0.0f)
                continue;
            const float dm = dmin_all * (sc[j] >> 4);
            for (int ii = 0; ii < 16; ++ii)
                L[16 * j + ii] = (uint8_t)gs_quant__round_clamp((x[16 * j + ii] + dm) / d, 0, 3);
        }
        pack_2bit(L, b + GS_Q2_K_QS);
    }
}

/* ---- q3_K ------------------------------------------------------------------------
 * x = d * (s - 32) * (q - 4): q is 2 bits from qs plus a third bit in hmask
 * (element e: byte e % 32, bit e / 32); s is the 6-bit scale of group e / 16,
 * its low 4 bits in the nibbles of scales[0..7] (groups 0..7 low nibbles,
 * 8..15 high nibbles), its high 2 bits in scales[8 + g % 4] at bit 2 * (g / 4). */

void gs_quant__q3_K_to_f32(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / GS_QK_K; i++, b += GS_Q3_K_BYTES, dst += GS_QK_K) {
        const float d_all = gs_quant_ldf16(b + GS_Q3_K_D);
        const uint8_t *hmask = b + GS_Q3_K_HMASK;
        for (int g = 0; g < GS_QK_K / 16; g++) {
            const float dl = d_all * gs_quant_q3_K_scale(b + GS_Q3_K_SCALES, g);
            for (int e = 16 * g; e < 16 * g + 16; e++) {
                const int high = (hmask[e % 32] >> (e / 32)) & 1;
                dst[e] = dl * (unpack_2bit(b + GS_Q3_K_QS, e) - (high ? 0 : 4));
            }
        }
    }
}

void gs_quant__q3_K_from_f32(const float *src, void *dst, int64_t n)
{
    uint8_t *b = dst;
    int8_t L[GS_QK_K];
    uint8_t Lu[GS_QK_K];
    float scales[GS_QK_K / 16];

    for (int64_t i = 0; i < n / GS_QK_K; i++, b += GS_Q3_K_BYTES, src += GS_QK_K) {
        const float *x = src;
        uint8_t *sc = b + GS_Q3_K_SCALES;
        float max_scale = 0, amax = 0;
        for (int j = 0; j < GS_QK_K / 16; ++j) {
            scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            if (fabsf(scales[j]) > amax) {
                amax = fabsf(scales[j]);
                max_scale = scales[j];
            }
        }

        memset(sc, 0, 12);
        if (max_scale != 0.0f) {
            const float iscale = -32.f / max_scale;
            for (int j = 0; j < GS_QK_K / 16; ++j) {
                const int8_t r = (int8_t)wrap_u8(gs_quant__round(iscale * scales[j]));
                const int l = GS_MAX(-32, GS_MIN(31, r)) + 32;
                if (j < 8)
                    sc[j] = (uint8_t)(l & 0xf);
                else
                    sc[j - 8] |= (uint8_t)((l & 0xf) << 4);
                sc[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            gs_quant__st16(b + GS_Q3_K_D, gs_f32_to_fp16(1 / iscale));
        } else {
            gs_quant__st16(b + GS_Q3_K_D, gs_f32_to_fp16(0.f));
        }

        const float d_all = gs_quant_ldf16(b + GS_Q3_K_D);
        for (int j = 0; j < GS_QK_K / 16; ++j) {
            const float d = d_all * gs_quant_q3_K_scale(sc, j);
            if (d == 0.0f)
                continue;
            for (int ii = 0; ii < 16; ++ii)
                L[16 * j + ii] = (int8_t)(gs_quant__round_clamp(x[16 * j + ii] / d, -4, 3) + 4);
        }

        uint8_t *hmask = b + GS_Q3_K_HMASK;
        memset(hmask, 0, GS_QK_K / 8);
        for (int e = 0; e < GS_QK_K; ++e) {
            Lu[e] = (uint8_t)L[e];
            if (Lu[e] > 3) {
                hmask[e % 32] |= (uint8_t)(1u << (e / 32));
                Lu[e] -= 4;
            }
        }
        pack_2bit(Lu, b + GS_Q3_K_QS);
    }
}

/* ---- q4_K and q5_K -------------------------------------------------------------
 * x = d * s * q - dmin * m for the 6-bit scale s and min m of group e / 32.
 * Groups 0..3 keep s and m in the low 6 bits of scales[g] and scales[g + 4];
 * groups 4..7 keep their low 4 bits in the nibbles of scales[g + 4] and their
 * high 2 bits in the top bits of scales[g - 4] (s) and scales[g] (m).
 * Quants: byte l of each 32-byte chunk c holds element 64c + l in its low
 * nibble and 64c + 32 + l in its high nibble; q5_K adds a fifth bit in
 * qh[l] at bit 2c (low nibble) or 2c + 1 (high nibble). */

static void k4_pack_scales(uint8_t *scales, const uint8_t *ls, const uint8_t *lm)
{
    for (int j = 0; j < GS_QK_K / 32; ++j) {
        if (j < 4) {
            scales[j] = ls[j];
            scales[j + 4] = lm[j];
        } else {
            scales[j + 4] = (uint8_t)((ls[j] & 0xf) | ((lm[j] & 0xf) << 4));
            scales[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            scales[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
}

static int k4_nibble(const uint8_t *qs, int e)
{
    const uint8_t byte = qs[32 * (e / 64) + e % 32];
    return (e % 64) < 32 ? byte & 0xf : byte >> 4;
}

/* Decodes q4_K (qh == NULL) or q5_K. */
static void k45_to_f32(const uint8_t *b, const uint8_t *scales, const uint8_t *qs,
                       const uint8_t *qh, float *dst)
{
    const float d = gs_quant_ldf16(b + GS_Q4_K_D);
    const float dmin = gs_quant_ldf16(b + GS_Q4_K_DMIN);
    for (int g = 0; g < GS_QK_K / 32; g++) {
        uint8_t s, m;
        gs_quant_k4_scale_min(scales, g, &s, &m);
        const float dl = d * s;
        const float ml = dmin * m;
        for (int e = 32 * g; e < 32 * g + 32; e++) {
            int q = k4_nibble(qs, e);
            if (qh)
                q += ((qh[e % 32] >> (2 * (e / 64) + (e % 64) / 32)) & 1) << 4;
            dst[e] = dl * q - ml;
        }
    }
}

/*
 * Shared quantizer of q4_K (nmax 15) and q5_K (nmax 31): per group of 32, the
 * scale and min search weighted by |x| plus the group's RMS; then both are
 * quantized to 6 bits against the largest of each; then every value is
 * requantized against the decoded scale and min. Writes d, dmin, scales and
 * the quants L[0..256).
 */
static void k45_from_f32(const float *x, uint8_t *b, uint8_t *L, int nmax, float rmin, int nstep)
{
    uint8_t Laux[32], ls[GS_QK_K / 32], lm[GS_QK_K / 32];
    float weights[32], mins[GS_QK_K / 32], scales[GS_QK_K / 32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < GS_QK_K / 32; ++j) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l)
            sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; ++l)
            weights[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux,
                                     rmin, 0.1f, nstep, false);
        if (scales[j] > max_scale)
            max_scale = scales[j];
        if (mins[j] > max_min)
            max_min = mins[j];
    }

    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < GS_QK_K / 32; ++j) {
        ls[j] = GS_MIN(63, wrap_u8(gs_quant__round(inv_scale * scales[j])));
        lm[j] = GS_MIN(63, wrap_u8(gs_quant__round(inv_min * mins[j])));
    }
    uint8_t *sc = b + GS_Q4_K_SCALES;
    k4_pack_scales(sc, ls, lm);
    gs_quant__st16(b + GS_Q4_K_D, gs_f32_to_fp16(max_scale / 63.f));
    gs_quant__st16(b + GS_Q4_K_DMIN, gs_f32_to_fp16(max_min / 63.f));

    const float d_all = gs_quant_ldf16(b + GS_Q4_K_D);
    const float dmin_all = gs_quant_ldf16(b + GS_Q4_K_DMIN);
    for (int j = 0; j < GS_QK_K / 32; ++j) {
        uint8_t s, m;
        gs_quant_k4_scale_min(sc, j, &s, &m);
        const float d = d_all * s;
        if (d == 0.0f)
            continue;
        const float dm = dmin_all * m;
        for (int ii = 0; ii < 32; ++ii)
            L[32 * j + ii] = (uint8_t)gs_quant__round_clamp((x[32 * j + ii] + dm) / d, 0, nmax);
    }
}

void gs_quant__q4_K_to_f32(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / GS_QK_K; i++, b += GS_Q4_K_BYTES, dst += GS_QK_K)
        k45_to_f32(b, b + GS_Q4_K_SCALES, b + GS_Q4_K_QS, NULL, dst);
}

void gs_quant__q4_K_from_f32(const float *src, void *dst, int64_t n)
{
    uint8_t *b = dst;
    uint8_t L[GS_QK_K];
    for (int64_t i = 0; i < n / GS_QK_K; i++, b += GS_Q4_K_BYTES, src += GS_QK_K) {
        k45_from_f32(src, b, L, 15, -1.f, 20);
        uint8_t *q = b + GS_Q4_K_QS;
        for (int j = 0; j < GS_QK_K; j += 64, q += 32) {
            for (int l = 0; l < 32; ++l)
                q[l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 4));
        }
    }
}

void gs_quant__q5_K_to_f32(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / GS_QK_K; i++, b += GS_Q5_K_BYTES, dst += GS_QK_K)
        k45_to_f32(b, b + GS_Q5_K_SCALES, b + GS_Q5_K_QS, b + GS_Q5_K_QH, dst);
}

void gs_quant__q5_K_from_f32(const float *src, void *dst, int64_t n)
{
    uint8_t *b = dst;
    uint8_t L[GS_QK_K];
    for (int64_t i = 0; i < n / GS_QK_K; i++, b += GS_Q5_K_BYTES, src += GS_QK_K) {
        k45_from_f32(src, b, L, 31, -0.5f, 15);
        uint8_t *qh = b + GS_Q5_K_QH;
        uint8_t *ql = b + GS_Q5_K_QS;
        memset(qh, 0, GS_QK_K / 8);
        for (int c = 0; c < GS_QK_K / 64; ++c, ql += 32) {
            for (int j = 0; j < 32; ++j) {
                const int l1 = L[64 * c + j], l2 = L[64 * c + j + 32];
                qh[j] |= (uint8_t)(((l1 >> 4) << (2 * c)) | ((l2 >> 4) << (2 * c + 1)));
                ql[j] = (uint8_t)((l1 & 0xf) | ((l2 & 0xf) << 4));
            }
        }
    }
}

/* ---- q6_K ------------------------------------------------------------------------
 * x = d * s * (q - 32), s the signed 8-bit scale of group e / 16. In each half
 * h of 128 elements, element 128h + 32k + l (k 0..3, l 0..31) has its low 4
 * bits in ql[64h + l + 32 * (k & 1)] (low nibble for k < 2, high otherwise)
 * and its high 2 bits in qh[32h + l] at bit 2k. */

void gs_quant__q6_K_to_f32(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / GS_QK_K; i++, b += GS_Q6_K_BYTES, dst += GS_QK_K) {
        const float d = gs_quant_ldf16(b + GS_Q6_K_D);
        for (int e = 0; e < GS_QK_K; e++) {
            const int h = e / 128, k = (e % 128) / 32, l = e % 32;
            const uint8_t lo = b[GS_Q6_K_QL + 64 * h + l + 32 * (k & 1)];
            const uint8_t hi = b[GS_Q6_K_QH + 32 * h + l];
            const int q = ((k < 2 ? lo & 0xf : lo >> 4) | (((hi >> (2 * k)) & 3) << 4)) - 32;
            const int8_t s = (int8_t)b[GS_Q6_K_SCALES + e / 16];
            dst[e] = d * s * q;
        }
    }
}

void gs_quant__q6_K_from_f32(const float *src, void *dst, int64_t n)
{
    uint8_t *b = dst;
    int8_t L[GS_QK_K];
    float scales[GS_QK_K / 16];

    for (int64_t i = 0; i < n / GS_QK_K; i++, b += GS_Q6_K_BYTES, src += GS_QK_K) {
        const float *x = src;
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < GS_QK_K / 16; ++ib) {
            scales[ib] = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
            if (fabsf(scales[ib]) > max_abs_scale) {
                max_abs_scale = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(b, 0, GS_Q6_K_BYTES);
            continue;
        }

        const float iscale = -128.f / max_scale;
        gs_quant__st16(b + GS_Q6_K_D, gs_f32_to_fp16(1 / iscale));
        int8_t *sc = (int8_t *)(b + GS_Q6_K_SCALES);
        for (int ib = 0; ib < GS_QK_K / 16; ++ib)
            sc[ib] = (int8_t)gs_quant__round_clamp(iscale * scales[ib], -128, 127);

        const float d_all = gs_quant_ldf16(b + GS_Q6_K_D);
        for (int j = 0; j < GS_QK_K / 16; ++j) {
            const float d = d_all * sc[j];
            if (d == 0.0f)
                continue;
            for (int ii = 0; ii < 16; ++ii)
                L[16 * j + ii] = (int8_t)(gs_quant__round_clamp(x[16 * j + ii] / d, -32, 31) + 32);
        }

        uint8_t *ql = b + GS_Q6_K_QL, *qh = b + GS_Q6_K_QH;
        for (int j = 0; j < GS_QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; ++l) {
                const int q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96];
                ql[l] = (uint8_t)((q1 & 0xf) | ((q3 & 0xf) << 4));
                ql[l + 32] = (uint8_t)((q2 & 0xf) | ((q4 & 0xf) << 4));
                qh[l] =
                    (uint8_t)((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
            }
        }
    }
}

/* ---- q8_K: x = d * q, d an f32, q in -127..127 ------------------------------ */

void gs_quant__q8_K_to_f32(const void *src, float *dst, int64_t n)
{
    const uint8_t *b = src;
    for (int64_t i = 0; i < n / GS_QK_K; i++, b += GS_Q8_K_BYTES, dst += GS_QK_K) {
        const float d = gs_quant_ldf32(b + GS_Q8_K_D);
        for (int j = 0; j < GS_QK_K; j++)
            dst[j] = d * (int8_t)b[GS_Q8_K_QS + j];
    }
}

void gs_quant__q8_K_from_f32(const float *src, void *dst, int64_t n)
{
    uint8_t *b = dst;
    for (int64_t i = 0; i < n / GS_QK_K; i++, b += GS_Q8_K_BYTES, src += GS_QK_K) {
        float max = 0, amax = 0;
        for (int j = 0; j < GS_QK_K; ++j) {
            if (fabsf(src[j]) > amax) {
                amax = fabsf(src[j]);
                max = src[j];
            }
        }
        if (amax == 0.0f) {
            /* bsums too, so that equal inputs always give equal bytes. */
            memset(b, 0, GS_Q8_K_BYTES);
            continue;
        }
        /* -127 rather than -128 keeps every quant's negation in range. */
        const float iscale = -127.f / max;
        int8_t *qs = (int8_t *)(b + GS_Q8_K_QS);
        for (int j = 0; j < GS_QK_K; ++j)
            qs[j] = (int8_t)gs_quant__round_clamp(iscale * src[j], -128, 127);
        for (int j = 0; j < GS_QK_K / 16; ++j) {
            int sum = 0;
            for (int ii = 0; ii < 16; ++ii)
                sum += qs[16 * j + ii];
            gs_quant__st16(b + GS_Q8_K_BSUMS + 2 * j, (uint16_t)(int16_t)sum);
        }
        gs_quant__stf32(b + GS_Q8_K_D, 1 / iscale);
    }
}
