/*
 * engine/cpu/kernels_avx2_panel.c - AVX2 panel products (weight rows
 * transposed in registers so that each int32 lane is one row) for the q8_0
 * partners (q4_0, q5_0, q8_0) and the K-quants, and the AVX2 kernel table.
 * Its own file because it is the part of the products whose shape the VNNI
 * build changes (sixteen rows on 512-bit vectors instead of eight); the rows
 * and steps a panel does not fit go to kernels_avx2_tile.c.
 */
#include "engine/cpu/avx2.h"

#include <stddef.h>

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
#define pv_add       _mm512_add_ps
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
#define pv_add       _mm256_add_ps
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

/* The q80 order's final sum of eight per-residue accumulators (avx2.h), lane
 * by lane: each lane of a panel is one row. */
static inline pv_f pv_tree(const pv_f a[Q80_LANES])
{
    return pv_add(pv_add(pv_add(a[0], a[4]), pv_add(a[2], a[6])),
                  pv_add(pv_add(a[1], a[5]), pv_add(a[3], a[7])));
}

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
    pv_f part[PANEL_TOK][Q80_LANES];
    for (int j = 0; j < Q80_LANES; j++) {
        pv_f acc[PANEL_TOK];
        for (int k = 0; k < PANEL_TOK; k++)
            acc[k] = pv_zero_f();
        for (int64_t b = j; b < nb; b += Q80_LANES) {
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
                    p = _mm256_add_epi16(
                        p, _mm256_maddubs_epi16(q[g], pv_set1_i32(ld_i32(y + 4 * g))));
                    if ((g + 1) % run16 == 0) {
                        s0 = pv_add_i32(s0, pv_madd_i16(p, _mm256_set1_epi16(1)));
                        p = pv_zero_i();
                    }
                }
#endif
                const pv_f s = pv_mul(dw[b], pv_set1_f(dx[(size_t)k * nb + b]));
                acc[k] = pv_fmadd(s, pv_cvt(pv_add_i32(s0, s1)), acc[k]);
            }
        }
        for (int k = 0; k < PANEL_TOK; k++)
            part[k][j] = acc[k];
    }
    for (int k = 0; k < nk; k++)
        pv_storeu_f(out + (size_t)k * os, pv_tree(part[k]));
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
    __m256 part[PANEL_TOK][Q80_LANES];
    const __m256i ones = _mm256_set1_epi16(1);
    for (int j = 0; j < Q80_LANES; j++) {
        __m256 acc[PANEL_TOK];
        for (int k = 0; k < PANEL_TOK; k++)
            acc[k] = _mm256_setzero_ps();
        for (int64_t b = j; b < nb; b += Q80_LANES) {
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
                const __m256 s = _mm256_mul_ps(dw[b], _mm256_set1_ps(dx[(size_t)k * nb + b]));
                acc[k] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(_mm256_add_epi32(s0, s1)), acc[k]);
            }
        }
        for (int k = 0; k < PANEL_TOK; k++)
            part[k][j] = acc[k];
    }
    for (int k = 0; k < nk; k++)
        _mm256_storeu_ps(out + (size_t)k * os, pv_tree(part[k]));
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
            AVX2_FN(gemm_rows_##name)(n, vw, ws, nr, vx, xs, nt, out, os);                         \
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
            AVX2_FN(gemm_rows_##name)(n, w + (size_t)rp * ws, ws, nr - rp, vx, xs, nt, out + rp,   \
                                      os);                                                     \
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
            AVX2_FN(gemm_##name)(n, vw, ws, nr, vx, xs, nt, out, os);                              \
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
            AVX2_FN(gemm_##name)(n, w + (size_t)rp * ws, ws, nr - rp, vx, xs, nt, out + rp, os);   \
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
#define ROW(ty, name, product)                                                                 \
    t[ty] = (struct gs_cpu_kernels){.dot = AVX2_FN(dot_##name), .gemm = product}
    /* The rows whose products go through dot_u8 (the only VNNI difference). */
    ROW(GS_TYPE_Q4_0, q4_0, gemm_q4_0);
    ROW(GS_TYPE_Q4_1, q4_1, AVX2_FN(gemm_q4_1));
    ROW(GS_TYPE_Q5_0, q5_0, gemm_q5_0);
    ROW(GS_TYPE_Q5_1, q5_1, AVX2_FN(gemm_q5_1));
    ROW(GS_TYPE_Q8_0, q8_0, gemm_q8_0);
    ROW(GS_TYPE_Q2_K, q2_K, gemm_panel_q2_K);
    ROW(GS_TYPE_Q3_K, q3_K, gemm_panel_q3_K);
    ROW(GS_TYPE_Q4_K, q4_K, gemm_panel_q4_K);
    ROW(GS_TYPE_Q5_K, q5_K, gemm_panel_q5_K);
    ROW(GS_TYPE_Q6_K, q6_K, gemm_panel_q6_K);
#ifndef GS_CPU_VNNI
    ROW(GS_TYPE_F32, f32, AVX2_FN(gemm_f32));
    ROW(GS_TYPE_F16, f16, AVX2_FN(gemm_f16));
    ROW(GS_TYPE_BF16, bf16, AVX2_FN(gemm_bf16));
#endif
#undef ROW
}
