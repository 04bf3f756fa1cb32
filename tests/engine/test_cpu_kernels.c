/*
 * tests/engine/test_cpu_kernels.c - every dot and tiled kernel of the cpu
 * backend, on every ISA this machine has, against the scalar reference:
 * dequantize the weight row and the quantized activation row and take the
 * float dot product in double. Sizes include odd block counts; tiled
 * products run batch sizes 1..64. Thresholds are normalized mean squared
 * errors per type (integer products are exact up to float rounding).
 */
#include "engine/cpu/cpu.h"

#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const enum gs_type weight_types[] = {
    GS_TYPE_F32,  GS_TYPE_F16,  GS_TYPE_BF16, GS_TYPE_Q4_0, GS_TYPE_Q4_1,
    GS_TYPE_Q5_0, GS_TYPE_Q5_1, GS_TYPE_Q8_0, GS_TYPE_Q2_K, GS_TYPE_Q3_K,
    GS_TYPE_Q4_K, GS_TYPE_Q5_K, GS_TYPE_Q6_K,
};

static uint64_t rng_state = 42;

static float frand(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) & 0xffffff) / (float)0x1000000 * 2.0f - 1.0f;
}

/* A quantized matrix of rows x n, its dequantized copy, and the same for
 * activations in the weight's vec_dot_type. */
struct operands {
    enum gs_type wt, xt;
    int64_t n;
    int rows, toks;
    size_t w_stride, x_stride;
    uint8_t *w, *x;
    float *wf, *xf;
};

static void operands_make(struct operands *o, enum gs_type wt, int64_t n, int rows, int toks)
{
    const struct gs_type_traits *tt = gs_type_traits(wt);
    uint64_t wb, xb;
    o->wt = wt;
    o->xt = tt->vec_dot_type;
    o->n = n;
    o->rows = rows;
    o->toks = toks;
    cr_assert_eq(gs_type_row_bytes(wt, n, &wb), GS_OK);
    cr_assert_eq(gs_type_row_bytes(o->xt, n, &xb), GS_OK);
    o->w_stride = wb;
    o->x_stride = xb;
    o->w = malloc(wb * rows);
    o->x = malloc(xb * toks);
    o->wf = malloc(sizeof(float) * n * rows);
    o->xf = malloc(sizeof(float) * n * toks);
    float *tmp = malloc(sizeof(float) * n);
    for (int r = 0; r < rows; r++) {
        for (int64_t i = 0; i < n; i++)
            tmp[i] = frand() * (1.0f + (float)(i % 7)) * 0.3f;
        cr_assert_eq(gs_quantize(wt, tmp, o->w + r * wb, n), GS_OK);
        cr_assert_eq(gs_dequantize(wt, o->w + r * wb, o->wf + r * n, n), GS_OK);
    }
    for (int t = 0; t < toks; t++) {
        for (int64_t i = 0; i < n; i++)
            tmp[i] = frand() * 2.0f;
        cr_assert_eq(gs_quantize(o->xt, tmp, o->x + t * xb, n), GS_OK);
        cr_assert_eq(gs_dequantize(o->xt, o->x + t * xb, o->xf + t * n, n), GS_OK);
    }
    free(tmp);
}

static void operands_free(struct operands *o)
{
    free(o->w);
    free(o->x);
    free(o->wf);
    free(o->xf);
}

static double ref_dot(const struct operands *o, int r, int t)
{
    double s = 0;
    for (int64_t i = 0; i < o->n; i++)
        s += (double)o->wf[r * o->n + i] * o->xf[t * o->n + i];
    return s;
}

/* NMSE limits: float accumulation of exact integer block sums. Products with
 * q8_1 activations also carry q8_1's block sum, which the format stores as an
 * f16 (relative error up to 2^-11 on the minimum's term). */
static double nmse_limit(enum gs_type t)
{
    if (gs_type_traits(t)->vec_dot_type == GS_TYPE_Q8_1)
        return 1e-5;
    return t == GS_TYPE_F32 || t == GS_TYPE_F16 || t == GS_TYPE_BF16 ? 1e-10 : 1e-9;
}

static int64_t sizes_for(enum gs_type t, int64_t out[4])
{
    const int32_t bs = gs_type_traits(gs_type_traits(t)->vec_dot_type)->block_size;
    const int32_t bw = gs_type_traits(t)->block_size;
    const int64_t b = bw > bs ? bw : bs;
    if (b == 1) {
        out[0] = 1, out[1] = 37, out[2] = 64, out[3] = 1001;
        return 4;
    }
    out[0] = b, out[1] = 3 * b, out[2] = 7 * b, out[3] = 11 * b;
    return 4;
}

Test(cpu_kernels, dot_matches_dequantized_reference_on_every_isa)
{
    for (int isa = 0; isa < GS_CPU_ISA_COUNT; isa++) {
        for (size_t k = 0; k < GS_ARRAY_LEN(weight_types); k++) {
            enum gs_type t = weight_types[k];
            const struct gs_cpu_kernels *kr = gs_cpu_kernels_for((enum gs_cpu_isa)isa, t);
            if (!kr)
                continue;
            cr_assert(kr->dot && kr->gemm, "%s has no kernel", gs_type_name(t));
            int64_t sizes[4];
            int64_t ns = sizes_for(t, sizes);
            for (int64_t s = 0; s < ns; s++) {
                struct operands o;
                operands_make(&o, t, sizes[s], 5, 3);
                double num = 0, den = 0;
                for (int r = 0; r < o.rows; r++) {
                    for (int tk = 0; tk < o.toks; tk++) {
                        double want = ref_dot(&o, r, tk);
                        double got = kr->dot(o.n, o.w + r * o.w_stride, o.x + tk * o.x_stride);
                        num += (got - want) * (got - want);
                        den += want * want;
                    }
                }
                double nmse = num / den;
                cr_expect(nmse < nmse_limit(t), "%s/%s n=%lld: nmse %.3g",
                          gs_cpu_isa_name((enum gs_cpu_isa)isa), gs_type_name(t),
                          (long long)o.n, nmse);
                operands_free(&o);
            }
        }
    }
}

/* 27 rows: a panel of sixteen (VNNI build) and one of eight, or three of
 * eight (the many-token kernels), and three left over; up to 70 tokens: more
 * than one token block. */
enum { GEMM_ROWS = 27, GEMM_STRIDE = 29, GEMM_TOKS = 70 };

Test(cpu_kernels, gemm_matches_reference_for_batches_1_to_70)
{
    for (int isa = 0; isa < GS_CPU_ISA_COUNT; isa++) {
        for (size_t k = 0; k < GS_ARRAY_LEN(weight_types); k++) {
            enum gs_type t = weight_types[k];
            const struct gs_cpu_kernels *kr = gs_cpu_kernels_for((enum gs_cpu_isa)isa, t);
            if (!kr)
                continue;
            int64_t sizes[4];
            sizes_for(t, sizes);
            struct operands o;
            operands_make(&o, t, sizes[1], GEMM_ROWS, GEMM_TOKS);
            float *out = malloc(sizeof(float) * GEMM_TOKS * GEMM_STRIDE);
            static const int batches[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 31, 63, 64, 65, 70};
            for (size_t bi = 0; bi < GS_ARRAY_LEN(batches); bi++) {
                const int nt = batches[bi];
                for (size_t i = 0; i < GEMM_TOKS * GEMM_STRIDE; i++)
                    out[i] = NAN;
                /* out_stride > rows: the kernel must leave the gap alone. */
                kr->gemm(o.n, o.w, o.w_stride, o.rows, o.x, o.x_stride, nt, out, GEMM_STRIDE);
                /* Measured against the exact product, like the dot above (that
                 * gemm has dot's bits is the invariance test's below). */
                double num = 0, den = 0;
                for (int tk = 0; tk < nt; tk++) {
                    for (int r = 0; r < o.rows; r++) {
                        double want = ref_dot(&o, r, tk);
                        float got = out[tk * GEMM_STRIDE + r];
                        cr_assert(isfinite(got), "%s/%s batch %d: out[%d][%d] = %g",
                                  gs_cpu_isa_name((enum gs_cpu_isa)isa), gs_type_name(t), nt, tk,
                                  r, got);
                        num += (got - want) * (got - want);
                        den += want * want;
                    }
                    for (int r = GEMM_ROWS; r < GEMM_STRIDE; r++)
                        cr_assert(isnan(out[tk * GEMM_STRIDE + r]));
                }
                cr_expect(num / den < nmse_limit(t), "%s/%s batch %d: nmse %.3g",
                          gs_cpu_isa_name((enum gs_cpu_isa)isa), gs_type_name(t), nt, num / den);
            }
            free(out);
            operands_free(&o);
        }
    }
}

/* Decoding steps (1-3 tokens) over rows of 19 blocks: the row-by-row
 * kernels reduce whole groups of eight blocks at a time (two groups here),
 * then the blocks after them (three). */
Test(cpu_kernels, gemm_of_decode_steps_matches_reference_on_long_rows)
{
    for (int isa = 0; isa < GS_CPU_ISA_COUNT; isa++) {
        for (size_t k = 0; k < GS_ARRAY_LEN(weight_types); k++) {
            enum gs_type t = weight_types[k];
            const struct gs_cpu_kernels *kr = gs_cpu_kernels_for((enum gs_cpu_isa)isa, t);
            if (!kr)
                continue;
            int64_t sizes[4];
            sizes_for(t, sizes);
            const int64_t n = sizes[0] * 19;
            enum { ROWS = 11, TOKS = 3 };
            struct operands o;
            operands_make(&o, t, n, ROWS, TOKS);
            float out[TOKS * ROWS];
            for (int nt = 1; nt <= TOKS; nt++) {
                kr->gemm(o.n, o.w, o.w_stride, o.rows, o.x, o.x_stride, nt, out, ROWS);
                double num = 0, den = 0;
                for (int tk = 0; tk < nt; tk++)
                    for (int r = 0; r < ROWS; r++) {
                        double want = ref_dot(&o, r, tk), got = out[tk * ROWS + r];
                        num += (got - want) * (got - want);
                        den += want * want;
                    }
                cr_expect(num / den < nmse_limit(t), "%s/%s n=%lld, %d tokens: nmse %.3g",
                          gs_cpu_isa_name((enum gs_cpu_isa)isa), gs_type_name(t), (long long)n,
                          nt, num / den);
            }
            operands_free(&o);
        }
    }
}

/* The tiled F32 product is dot_f32 element by element, bit for bit: an F32
 * model's logits do not depend on how many tokens a step batches. */
Test(cpu_kernels, f32_gemm_equals_dot_bit_for_bit)
{
    static const int64_t sizes[] = {1, 16, 37, 64, 1001};
    for (int isa = 0; isa < GS_CPU_ISA_COUNT; isa++) {
        const struct gs_cpu_kernels *kr = gs_cpu_kernels_for((enum gs_cpu_isa)isa, GS_TYPE_F32);
        if (!kr)
            continue;
        for (size_t s = 0; s < GS_ARRAY_LEN(sizes); s++) {
            struct operands o;
            operands_make(&o, GS_TYPE_F32, sizes[s], GEMM_ROWS, GEMM_TOKS);
            float *out = malloc(sizeof(float) * GEMM_TOKS * GEMM_STRIDE);
            for (int nt = 1; nt <= GEMM_TOKS; nt += nt < 8 ? 1 : 31) {
                kr->gemm(o.n, o.w, o.w_stride, o.rows, o.x, o.x_stride, nt, out, GEMM_STRIDE);
                for (int tk = 0; tk < nt; tk++)
                    for (int r = 0; r < o.rows; r++) {
                        const float want =
                            kr->dot(o.n, o.w + r * o.w_stride, o.x + tk * o.x_stride);
                        cr_assert(out[tk * GEMM_STRIDE + r] == want,
                                  "%s n=%lld batch %d: out[%d][%d] = %a, dot %a",
                                  gs_cpu_isa_name((enum gs_cpu_isa)isa), (long long)o.n, nt, tk,
                                  r, out[tk * GEMM_STRIDE + r], want);
                    }
            }
            free(out);
            operands_free(&o);
        }
    }
}

/*
 * Batch invariance: every tiled product gives dot's bits, whatever the token
 * count and however rows and tokens are cut into calls (as the backend's
 * threads and slices cut them), on every type and ISA. A token's outputs
 * then do not depend on what else its step holds. Row lengths of 3 and 19
 * blocks: fewer than one group of eight, and groups with a tail; 37 rows:
 * whole panels of sixteen or eight and rows left over.
 */
enum { INV_ROWS = 37, INV_TOKS = 40 };

static void expect_gemm_is_dot(const struct gs_cpu_kernels *kr, const struct operands *o,
                               const float *want, int r0, int r1, int t0, int t1, float *out,
                               const char *what)
{
    const size_t os = INV_ROWS;
    kr->gemm(o->n, o->w + (size_t)r0 * o->w_stride, o->w_stride, r1 - r0,
             o->x + (size_t)t0 * o->x_stride, o->x_stride, t1 - t0, out + (size_t)t0 * os + r0, os);
    for (int tk = t0; tk < t1; tk++)
        for (int r = r0; r < r1; r++) {
            const float got = out[(size_t)tk * os + r], w = want[(size_t)tk * os + r];
            cr_assert(memcmp(&got, &w, sizeof got) == 0,
                      "%s n=%lld rows %d..%d tokens %d..%d: out[%d][%d] = %a, dot %a", what,
                      (long long)o->n, r0, r1, t0, t1, tk, r, got, w);
        }
}

Test(cpu_kernels, gemm_equals_dot_bit_for_bit_at_every_batch_and_split)
{
    /* The cross build's test shim runs every test in one process: leave the
     * generator as found, so that the tests after this one see their usual data. */
    const uint64_t rng_saved = rng_state;
    for (int isa = 0; isa < GS_CPU_ISA_COUNT; isa++) {
        for (size_t k = 0; k < GS_ARRAY_LEN(weight_types); k++) {
            const enum gs_type t = weight_types[k];
            const struct gs_cpu_kernels *kr = gs_cpu_kernels_for((enum gs_cpu_isa)isa, t);
            if (!kr)
                continue;
            char what[64];
            snprintf(what, sizeof what, "%s/%s", gs_cpu_isa_name((enum gs_cpu_isa)isa),
                     gs_type_name(t));
            int64_t sizes[4];
            sizes_for(t, sizes);
            const int64_t lens[] = {sizes[1], sizes[0] * 19};
            for (size_t li = 0; li < GS_ARRAY_LEN(lens); li++) {
                struct operands o;
                operands_make(&o, t, lens[li], INV_ROWS, INV_TOKS);
                float *want = malloc(sizeof(float) * INV_ROWS * INV_TOKS);
                float *out = malloc(sizeof(float) * INV_ROWS * INV_TOKS);
                for (int tk = 0; tk < INV_TOKS; tk++)
                    for (int r = 0; r < INV_ROWS; r++)
                        want[tk * INV_ROWS + r] =
                            kr->dot(o.n, o.w + r * o.w_stride, o.x + tk * o.x_stride);
                for (int nt = 1; nt <= INV_TOKS; nt++) {
                    expect_gemm_is_dot(kr, &o, want, 0, INV_ROWS, 0, nt, out, what);
                    /* Row cuts at a panel's edge and off it, and a token cut, at
                     * and around the counts where the kernels change paths (4
                     * tokens, AVX2 q8_0's 12, four-token tiles). */
                    static const int cut_at[] = {1, 2, 3, 4, 5, 11, 12, 13, 16, 17, 33, 40};
                    bool cut = false;
                    for (size_t c = 0; c < GS_ARRAY_LEN(cut_at); c++)
                        cut |= cut_at[c] == nt;
                    if (!cut)
                        continue;
                    expect_gemm_is_dot(kr, &o, want, 16, INV_ROWS, 0, nt, out, what);
                    expect_gemm_is_dot(kr, &o, want, 3, 30, 0, nt, out, what);
                    if (nt > 1)
                        expect_gemm_is_dot(kr, &o, want, 0, INV_ROWS, nt / 2, nt, out, what);
                }
                free(want);
                free(out);
                operands_free(&o);
            }
        }
    }
    rng_state = rng_saved;
}

/* n floats from frand(), malloc'd. */
static float *rand_floats(size_t n)
{
    float *x = malloc(sizeof(float) * n);
    cr_assert(x);
    for (size_t i = 0; i < n; i++)
        x[i] = frand();
    return x;
}

/* Whether gemm_f32's AVX2 and AVX-512F forms can both be called here, whatever
 * GS_CPU_ISA_MAX says. */
static bool have_both_gemms(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
           __builtin_cpu_supports("fma");
#else
    return false;
#endif
}

/* gs_cpu_gemm_f32 (training's backward matmuls) against float64 on shapes
 * that leave every tail of the tiles (of 8, 16 and 32 columns) and, with a b over
 * 256 KiB, of the row blocks (96) and reduction passes (128), with a read straight
 * and transposed; any cut of c into row and column pieces (as threads share it out)
 * gives the same bits as the whole; and where the CPU has AVX-512F, the 512-bit form
 * gives the AVX2 form's bits. */
Test(cpu_kernels, gemm_f32_matches_float64_and_any_tiling_gives_the_same_bits)
{
    static const int64_t ms[] = {1, 5, 6, 13, 100},
                         ns[] = {1, 7, 8, 15, 16, 17, 31, 32, 33, 40, 64, 240},
                         ks[] = {1, 3, 100, 300};
    const bool both = have_both_gemms();
    enum { MAX = 300, LDC = 250 };
    float *a = rand_floats(MAX * MAX), *b = rand_floats(MAX * MAX);
    float *c = malloc(sizeof(float) * MAX * LDC), *cut = malloc(sizeof(float) * MAX * LDC);
    for (int tr = 0; tr < 2; tr++)
        for (size_t mi = 0; mi < GS_ARRAY_LEN(ms); mi++)
            for (size_t ni = 0; ni < GS_ARRAY_LEN(ns); ni++)
                for (size_t ki = 0; ki < GS_ARRAY_LEN(ks); ki++) {
                    const int64_t m = ms[mi], n = ns[ni], k = ks[ki];
                    /* a is m x k row-major (a_i = k), or k x m read transposed. */
                    const size_t a_i = tr ? 1 : (size_t)k, a_p = tr ? (size_t)m : 1;
                    for (int i = 0; i < MAX * LDC; i++)
                        c[i] = cut[i] = NAN;
                    gs_cpu_gemm_f32(c, LDC, a, a_i, a_p, b, (size_t)n, m, n, k);
                    double num = 0, den = 0;
                    for (int64_t i = 0; i < m; i++) {
                        for (int64_t j = 0; j < n; j++) {
                            double want = 0;
                            for (int64_t p = 0; p < k; p++)
                                want += (double)a[i * a_i + p * a_p] * b[p * n + j];
                            num += (c[i * LDC + j] - want) * (c[i * LDC + j] - want);
                            den += want * want;
                        }
                        for (int64_t j = n; j < LDC; j++)
                            cr_assert(isnan(c[i * LDC + j]), "the gap after column %lld",
                                      (long long)n);
                    }
                    cr_assert(num <= 1e-12 * den, "m %lld n %lld k %lld%s: nmse %.3g",
                              (long long)m, (long long)n, (long long)k, tr ? " transposed" : "",
                              num / den);
                    /* Rows [0, m1) and [m1, m), and the first rows' columns in two pieces. */
                    const int64_t m1 = m / 2 + 1 < m ? m / 2 + 1 : m, n1 = n / 3;
                    gs_cpu_gemm_f32(cut, LDC, a, a_i, a_p, b, (size_t)n, m1, n1, k);
                    gs_cpu_gemm_f32(cut + n1, LDC, a, a_i, a_p, b + n1, (size_t)n, m1, n - n1, k);
                    gs_cpu_gemm_f32(cut + m1 * LDC, LDC, a + m1 * a_i, a_i, a_p, b, (size_t)n,
                                    m - m1, n, k);
                    for (int64_t i = 0; i < m; i++)
                        for (int64_t j = 0; j < n; j++)
                            cr_assert(memcmp(&cut[i * LDC + j], &c[i * LDC + j], 4) == 0,
                                      "m %lld n %lld k %lld: [%lld][%lld] %a cut, %a whole",
                                      (long long)m, (long long)n, (long long)k, (long long)i,
                                      (long long)j, cut[i * LDC + j], c[i * LDC + j]);
                    if (!both)
                        continue;
#if defined(__x86_64__) || defined(__i386__)
                    gs_cpu__gemm_f32_avx2(cut, LDC, a, a_i, a_p, b, (size_t)n, m, n, k);
                    gs_cpu__gemm_f32_avx512(c, LDC, a, a_i, a_p, b, (size_t)n, m, n, k);
                    for (int64_t i = 0; i < m; i++)
                        cr_assert(memcmp(cut + i * LDC, c + i * LDC, (size_t)n * 4) == 0,
                                  "m %lld n %lld k %lld%s: row %lld, AVX2 and AVX-512F differ",
                                  (long long)m, (long long)n, (long long)k,
                                  tr ? " transposed" : "", (long long)i);
#endif
                }
    free(a);
    free(b);
    free(c);
    free(cut);
}

Test(cpu_kernels, vector_helpers_match_scalar)
{
    enum { N = 203 };
    float a[N], b[N], back[N];
    uint16_t h[N];
    for (int i = 0; i < N; i++) {
        a[i] = frand();
        b[i] = frand() * 3;
    }
    gs_cpu_f32_to_f16(b, h, N);
    gs_cpu_f16_to_f32(h, back, N);
    double d32 = 0, d16 = 0;
    for (int i = 0; i < N; i++) {
        cr_assert_eq(h[i], gs_f32_to_fp16(b[i]), "f16 of %g at %d", b[i], i);
        cr_assert_eq(back[i], gs_fp16_to_f32(h[i]));
        d32 += (double)a[i] * b[i];
        d16 += (double)a[i] * back[i];
    }
    cr_assert(fabs(gs_cpu_dot_f32(a, b, N) - d32) < 1e-4);
    cr_assert(fabs(gs_cpu_dot_f32_f16(a, h, N) - d16) < 1e-4);
    /* swiglu's gate gradient, gates over [-12, 12]: the vector exp is within
     * 2 ulp of expf. */
    float g[N], o[N];
    for (int i = 0; i < N; i++)
        g[i] = 12 * a[i];
    gs_cpu_swiglu_back_gate(o, a, g, b, N);
    for (int i = 0; i < N; i++) {
        const double s = 1 / (1 + exp(-(double)g[i]));
        const double want = (double)a[i] * b[i] * s * (1 + g[i] * (1 - s));
        cr_assert(fabs(o[i] - want) <= 1e-6 + 1e-5 * fabs(want), "[%d] g %g: %g, want %g", i,
                  (double)g[i], (double)o[i], want);
    }
}

Test(cpu_kernels, unknown_type_has_no_row_and_unsupported_isa_is_null)
{
    cr_assert_null(gs_cpu_kernels((enum gs_type)GS_TYPE_COUNT));
    cr_assert_null(gs_cpu_kernels_for(GS_CPU_ISA_COUNT, GS_TYPE_F32));
    cr_assert_null(gs_cpu_kernels(GS_TYPE_IQ2_XXS)->dot);
    cr_assert_not_null(gs_cpu_kernels_for(GS_CPU_ISA_SCALAR, GS_TYPE_Q4_K)->dot);
}

/* Every aarch64 CPU has Advanced SIMD: an arm64 build that ran only the
 * scalar table would pass the comparisons above without testing a NEON line. */
Test(cpu_kernels, arm64_builds_pick_neon)
{
#if defined(__aarch64__)
    cr_assert(gs_cpu_isa_best() >= GS_CPU_ISA_NEON, "best ISA %s",
              gs_cpu_isa_name(gs_cpu_isa_best()));
    for (size_t k = 0; k < GS_ARRAY_LEN(weight_types); k++) {
        const enum gs_type t = weight_types[k];
        cr_assert(gs_cpu_kernels_for(GS_CPU_ISA_NEON, t)->dot !=
                      gs_cpu_kernels_for(GS_CPU_ISA_SCALAR, t)->dot,
                  "%s has no NEON kernel", gs_type_name(t));
    }
#else
    cr_assert_null(gs_cpu_kernels_for(GS_CPU_ISA_NEON, GS_TYPE_Q4_0));
    cr_assert_null(gs_cpu_kernels_for(GS_CPU_ISA_NEON_DOT, GS_TYPE_Q4_0));
#endif
}

/* ---- pool ------------------------------------------------------------------------------- */

struct count_task {
    _Atomic int calls;
    _Atomic long chunk_sum;
    _Atomic int bad;
    int n_threads;
    int n_chunks;
};

static void count_fn(void *arg, int chunk, int n_chunks, int ith)
{
    struct count_task *c = arg;
    atomic_fetch_add(&c->calls, 1);
    atomic_fetch_add(&c->chunk_sum, chunk);
    if (n_chunks != c->n_chunks || ith < 0 || ith >= c->n_threads)
        atomic_fetch_add(&c->bad, 1);
}

Test(cpu_pool, runs_every_chunk_once_per_task_and_waits)
{
    for (int n = 1; n <= 4; n++) {
        struct gs_cpu_pool *pool;
        struct gs_err err = {0};
        cr_assert_eq(gs_cpu_pool_new(n, &pool, &err), GS_OK, "%s", err.msg);
        cr_assert_eq(gs_cpu_pool_threads(pool), n);
        for (int rep = 0; rep < 3000; rep++) {
            int chunks = 1 + rep % 13;
            struct count_task c = {.n_threads = n, .n_chunks = chunks};
            gs_cpu_pool_run(pool, count_fn, &c, chunks);
            /* Returning means every chunk is done, each exactly once. */
            cr_assert_eq(atomic_load(&c.calls), chunks);
            cr_assert_eq(atomic_load(&c.chunk_sum), (long)chunks * (chunks - 1) / 2);
            cr_assert_eq(atomic_load(&c.bad), 0);
            if (rep == 1500)
                usleep(20000); /* let the workers fall asleep once */
        }
        gs_cpu_pool_free(pool);
    }
}

Test(cpu_pool, rejects_bad_counts_and_defaults_to_cores)
{
    struct gs_cpu_pool *pool;
    struct gs_err err = {0};
    cr_assert_eq(gs_cpu_pool_new(-1, &pool, &err), GS_INVAL);
    cr_assert_null(pool);
    cr_assert_eq(gs_cpu_pool_new(0, &pool, &err), GS_OK);
    cr_assert_eq(gs_cpu_pool_threads(pool), gs_cpu_physical_cores());
    gs_cpu_pool_free(pool);
    gs_cpu_pool_free(NULL);
}

Test(cpu_pool, split_covers_range_in_aligned_pieces)
{
    for (int nth = 1; nth <= 5; nth++) {
        for (int64_t n = 0; n < 100; n += 7) {
            int64_t next = 0;
            for (int i = 0; i < nth; i++) {
                int64_t a, b;
                gs_cpu_split(n, 4, i, nth, &a, &b);
                cr_assert_eq(a, next);
                cr_assert(b >= a && (a % 4 == 0 || a == n));
                next = b;
            }
            cr_assert_eq(next, n);
        }
    }
}

Test(cpu_kernels, activation_quantizers_are_byte_identical_to_the_definition)
{
    static const enum gs_type acts[] = {GS_TYPE_Q8_0, GS_TYPE_Q8_1, GS_TYPE_Q8_K, GS_TYPE_F16,
                                        GS_TYPE_BF16};
    enum { N = 5 * 256 };
    static float x[N];
    static uint8_t want[N * 4], got[N * 4];
    for (int isa = 0; isa < GS_CPU_ISA_COUNT; isa++) {
        for (size_t k = 0; k < GS_ARRAY_LEN(acts); k++) {
            gs_from_f32_fn q = gs_cpu_quantizer_for((enum gs_cpu_isa)isa, acts[k]);
            if (!q)
                continue;
            for (int rep = 0; rep < 20; rep++) {
                for (int i = 0; i < N; i++)
                    x[i] = frand() * (rep + 1);
                /* Exact halves, ties of magnitude, a zero block and a negative maximum. */
                for (int i = 0; i < 32; i++)
                    x[i] = (float)(i - 16) * 0.5f;
                x[300] = -20.0f * (rep + 1);
                x[301] = 20.0f * (rep + 1);
                for (int i = 512; i < 768; i++)
                    x[i] = 0;
                uint64_t bytes;
                cr_assert_eq(gs_type_row_bytes(acts[k], N, &bytes), GS_OK);
                memset(want, 0xaa, bytes);
                memset(got, 0x55, bytes);
                gs_activation_quantizer(acts[k])(x, want, N);
                q(x, got, N);
                for (uint64_t b = 0; b < bytes; b++)
                    cr_assert_eq(got[b], want[b], "%s/%s rep %d: byte %llu differs",
                                 gs_cpu_isa_name((enum gs_cpu_isa)isa), gs_type_name(acts[k]),
                                 rep, (unsigned long long)b);
            }
        }
    }
}

/* Relative distance of got from libm's want, in units of float epsilon. */
static double ulps(float got, double want)
{
    return fabs(got - want) / (fabs(want) * FLT_EPSILON + FLT_MIN);
}

/* The vector exponentials against libm over the whole range that matters:
 * softmax feeds x - max <= 0 down to the underflow, SiLU both signs. */
Test(cpu_kernels, exponentials_match_libm)
{
    enum { N = 4099 };
    float *x = malloc(sizeof(float) * N), *u = malloc(sizeof(float) * N);
    float *o = malloc(sizeof(float) * N), *e = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++) {
        x[i] = -100.0f + 190.0f * (float)i / (N - 1); /* -100 .. 90 */
        u[i] = frand();
    }
    x[7] = 0.0f, x[8] = -0.0f, x[9] = 1e-30f;
    gs_cpu_swiglu(o, x, u, N);
    for (int i = 0; i < N; i++) {
        double want = (double)x[i] / (1.0 + exp(-(double)x[i])) * u[i];
        cr_assert(ulps(o[i], want) < 2 || fabs(want) < 1e-35, "swiglu(%g, %g) = %g, want %g",
                  x[i], u[i], o[i], want);
    }
    gs_cpu_swiglu(o, x, NULL, N);
    for (int i = 0; i < N; i++) {
        double want = (double)x[i] / (1.0 + exp(-(double)x[i]));
        cr_assert(ulps(o[i], want) < 2 || fabs(want) < 1e-35, "silu(%g) = %g, want %g", x[i],
                  o[i], want);
    }
    /* Softmax: scale, max, e^(x - max) and the sum. */
    memcpy(e, x, sizeof(float) * N);
    float m = gs_cpu_scale_max(e, 0.5f, N);
    cr_assert_eq(m, 45.0f);
    memcpy(o, e, sizeof(float) * N);
    for (int i = 0; i < N; i++)
        cr_assert_eq(o[i], x[i] * 0.5f);
    float sum = gs_cpu_exp_sum(e, m, N);
    double want_sum = 0;
    for (int i = 0; i < N; i++) {
        double want = exp((double)(o[i] - m)); /* the argument the kernel rounds to */
        want_sum += e[i];
        cr_assert(ulps(e[i], want) < 2 || want < 1.2e-38, "exp(%g) = %g, want %g",
                  (double)(o[i] - m), e[i], want);
        cr_assert(e[i] >= 0);
    }
    cr_assert(fabs(sum - want_sum) <= 1e-5 * want_sum, "sum %g, want %g", sum, want_sum);
    free(x), free(u), free(o), free(e);
}

/* Attention's key products: groups of eight keys and the rows left over, on
 * head sizes that are and are not multiples of eight. */
Test(cpu_kernels, attention_dots_match_double)
{
    enum { ROWS = 19, STRIDE = 200 };
    static const int64_t dims[] = {64, 128, 60, 7};
    uint16_t *k = malloc(sizeof(uint16_t) * ROWS * STRIDE);
    float q[128], out[ROWS];
    for (int i = 0; i < ROWS * STRIDE; i++)
        k[i] = gs_f32_to_fp16(frand());
    for (int i = 0; i < 128; i++)
        q[i] = frand();
    float *k32 = malloc(sizeof(float) * ROWS * STRIDE), out32[ROWS];
    gs_cpu_f16_to_f32(k, k32, ROWS * STRIDE);
    for (size_t d = 0; d < GS_ARRAY_LEN(dims); d++) {
        const int64_t n = dims[d];
        gs_cpu_dots_f16(q, k, STRIDE, ROWS, n, out);
        /* A page converted to f32 once gives the very same scores. */
        gs_cpu_dots_f32(q, k32, STRIDE, ROWS, n, out32);
        cr_assert(!memcmp(out, out32, sizeof(out)), "n %lld: f32 copy scores differ",
                  (long long)n);
        for (int s = 0; s < ROWS; s++) {
            double want = 0;
            for (int64_t i = 0; i < n; i++)
                want += (double)q[i] * gs_fp16_to_f32(k[s * STRIDE + i]);
            cr_assert(fabs(out[s] - want) <= 1e-5 * (1 + fabs(want)), "n %lld key %d: %g, want %g",
                      (long long)n, s, out[s], want);
        }
    }
    free(k);
    free(k32);
}

/* Attention's value sums acc += sum_s w[s] v[s], f16 and f32 rows, on head
 * sizes that fill the 64-column tiles, leave eight-column pieces and leave
 * single columns. */
Test(cpu_kernels, attention_value_sums_match_double)
{
    enum { ROWS = 19, STRIDE = 200 };
    static const int64_t dims[] = {64, 128, 200, 72, 60, 7};
    float *v32 = malloc(sizeof(float) * ROWS * STRIDE);
    float *vconv = malloc(sizeof(float) * ROWS * STRIDE);
    uint16_t *v16 = malloc(sizeof(uint16_t) * ROWS * STRIDE);
    float w[ROWS], acc16[STRIDE], acc32[STRIDE], start[STRIDE];
    for (int i = 0; i < ROWS * STRIDE; i++) {
        v16[i] = gs_f32_to_fp16(frand());
        v32[i] = frand();
    }
    for (int s = 0; s < ROWS; s++)
        w[s] = frand();
    gs_cpu_f16_to_f32(v16, vconv, ROWS * STRIDE);
    for (size_t d = 0; d < GS_ARRAY_LEN(dims); d++) {
        const int64_t n = dims[d];
        for (int64_t i = 0; i < n; i++)
            start[i] = acc16[i] = acc32[i] = frand();
        gs_cpu_axpys_f16(acc16, w, v16, STRIDE, ROWS, n);
        gs_cpu_axpys_f32(acc32, w, v32, STRIDE, ROWS, n);
        float copy[STRIDE];
        memcpy(copy, start, sizeof(float) * (size_t)n);
        gs_cpu_axpys_f32(copy, w, vconv, STRIDE, ROWS, n);
        cr_assert(!memcmp(copy, acc16, sizeof(float) * (size_t)n),
                  "n %lld: sums over an f32 copy of the f16 rows differ", (long long)n);
        for (int64_t i = 0; i < n; i++) {
            double want16 = start[i], want32 = start[i];
            for (int s = 0; s < ROWS; s++) {
                want16 += (double)w[s] * gs_fp16_to_f32(v16[s * STRIDE + i]);
                want32 += (double)w[s] * v32[s * STRIDE + i];
            }
            cr_assert(fabs(acc16[i] - want16) <= 1e-5 * (1 + fabs(want16)),
                      "f16 n %lld column %lld: %g, want %g", (long long)n, (long long)i,
                      acc16[i], want16);
            cr_assert(fabs(acc32[i] - want32) <= 1e-5 * (1 + fabs(want32)),
                      "f32 n %lld column %lld: %g, want %g", (long long)n, (long long)i,
                      acc32[i], want32);
        }
    }
    free(v32);
    free(vconv);
    free(v16);
}

/* Attention over a q8_0 cache: one head's slice of rows of q8_0 blocks, whole
 * blocks (the fast path), slices that begin or end inside a block (head sizes
 * 8 and 48, as stories260K's and gemma2-tiny's are) and ones of odd length,
 * against double sums over engine/quant's dequantized rows, and the four-query
 * forms bit for bit against the single-query ones. Run with
 * GS_CPU_ISA_MAX=scalar for the scalar forms (the NEON build's too). */
Test(cpu_kernels, attention_over_q8_0_rows_matches_double)
{
    enum { ROWS = 19, DIM = 224, BLOCKS = DIM / 32, STRIDE = BLOCKS * 34 };
    static const int64_t slices[][2] = {{0, 64}, {64, 64}, {32, 128}, {0, 224}, {192, 32},
                                        {8, 8},  {48, 48}, {0, 48},   {16, 40}, {100, 7},
                                        {3, 60}, {24, 16}, {200, 24}};
    uint8_t *k = malloc((size_t)ROWS * STRIDE);
    float *x = malloc(sizeof(float) * ROWS * DIM), *deq = malloc(sizeof(float) * ROWS * DIM);
    float q[DIM], w[ROWS], out[ROWS], acc[DIM], start[DIM];
    for (int i = 0; i < ROWS * DIM; i++)
        x[i] = frand() * (1 + i % 5); /* blocks of different scales */
    for (int s = 0; s < ROWS; s++) {
        gs_cpu_quantizer(GS_TYPE_Q8_0)(x + s * DIM, k + (size_t)s * STRIDE, DIM);
        gs_type_traits(GS_TYPE_Q8_0)->to_f32(k + (size_t)s * STRIDE, deq + s * DIM, DIM);
        w[s] = frand();
    }
    for (int i = 0; i < DIM; i++)
        q[i] = frand();
    for (size_t c = 0; c < GS_ARRAY_LEN(slices); c++) {
        const int64_t off = slices[c][0], n = slices[c][1];
        gs_cpu_dots_q8_0(q, k, STRIDE, ROWS, off, n, out);
        for (int s = 0; s < ROWS; s++) {
            double want = 0, mag = 0;
            for (int64_t i = 0; i < n; i++) {
                want += (double)q[i] * deq[s * DIM + off + i];
                mag += fabs((double)q[i] * deq[s * DIM + off + i]);
            }
            cr_assert(fabs(out[s] - want) <= 1e-6 * (1 + mag),
                      "off %lld n %lld key %d: %g, want %g", (long long)off, (long long)n, s,
                      out[s], want);
        }
        for (int64_t i = 0; i < n; i++)
            start[i] = acc[i] = frand();
        gs_cpu_axpys_q8_0(acc, w, k, STRIDE, ROWS, off, n);
        for (int64_t i = 0; i < n; i++) {
            double want = start[i], mag = fabs(start[i]);
            for (int s = 0; s < ROWS; s++) {
                want += (double)w[s] * deq[s * DIM + off + i];
                mag += fabs((double)w[s] * deq[s * DIM + off + i]);
            }
            cr_assert(fabs(acc[i] - want) <= 1e-6 * (1 + mag),
                      "off %lld n %lld column %lld: %g, want %g", (long long)off, (long long)n,
                      (long long)i, acc[i], want);
        }
        /* Four queries at once: the very bits of four single-query calls, for the
         * row counts a page's pieces have (whole groups of eight and the rest). */
        static const int counts[] = {ROWS, 8, 3};
        for (size_t r = 0; r < GS_ARRAY_LEN(counts); r++) {
            const int nr = counts[r];
            float qv[4][DIM], wv[4][ROWS], o4[4][ROWS], o1[4][ROWS], a4[4][DIM], a1[4][DIM];
            const float *qp[4], *wp[4];
            float *op[4], *ap[4];
            for (int j = 0; j < 4; j++) {
                for (int i = 0; i < DIM; i++) {
                    qv[j][i] = frand();
                    a4[j][i] = a1[j][i] = frand();
                }
                for (int t = 0; t < ROWS; t++)
                    wv[j][t] = frand();
                qp[j] = qv[j], wp[j] = wv[j], op[j] = o4[j], ap[j] = a4[j];
            }
            gs_cpu_dots4_q8_0(qp, k, STRIDE, nr, off, n, op);
            gs_cpu_axpys4_q8_0(ap, wp, k, STRIDE, nr, off, n);
            for (int j = 0; j < 4; j++) {
                gs_cpu_dots_q8_0(qv[j], k, STRIDE, nr, off, n, o1[j]);
                gs_cpu_axpys_q8_0(a1[j], wv[j], k, STRIDE, nr, off, n);
                cr_assert(!memcmp(o4[j], o1[j], sizeof(float) * (size_t)nr),
                          "off %lld n %lld rows %d query %d: four-query scores differ",
                          (long long)off, (long long)n, nr, j);
                cr_assert(!memcmp(a4[j], a1[j], sizeof(float) * (size_t)n),
                          "off %lld n %lld rows %d query %d: four-query sums differ",
                          (long long)off, (long long)n, nr, j);
            }
        }
    }
    free(k);
    free(x);
    free(deq);
}

/* Four queries at once (prompt attention): scores against double, value sums
 * bit-identical to four single-query calls, f16 and f32 rows, head sizes
 * with and without a multiple of eight, odd and even key counts. */
Test(cpu_kernels, four_query_attention_matches_single_queries)
{
    enum { ROWS = 19, STRIDE = 200 };
    static const int64_t dims[] = {64, 128, 72, 60, 7};
    static const int rows[] = {1, 2, 16, 19};
    uint16_t *k16 = malloc(sizeof(uint16_t) * ROWS * STRIDE);
    float *k32 = malloc(sizeof(float) * ROWS * STRIDE);
    for (int i = 0; i < ROWS * STRIDE; i++) {
        k16[i] = gs_f32_to_fp16(frand());
        k32[i] = frand();
    }
    float qbuf[4][128], wbuf[4][ROWS], out[4][ROWS], acc4[4][STRIDE], acc1[4][STRIDE];
    for (int j = 0; j < 4; j++) {
        for (int i = 0; i < 128; i++)
            qbuf[j][i] = frand();
        for (int s = 0; s < ROWS; s++)
            wbuf[j][s] = frand();
    }
    const float *q[4] = {qbuf[0], qbuf[1], qbuf[2], qbuf[3]};
    const float *w[4] = {wbuf[0], wbuf[1], wbuf[2], wbuf[3]};
    float *o[4] = {out[0], out[1], out[2], out[3]};
    float *a4[4] = {acc4[0], acc4[1], acc4[2], acc4[3]};
    for (int f16 = 0; f16 < 2; f16++) {
        const void *k = f16 ? (const void *)k16 : (const void *)k32;
        for (size_t d = 0; d < GS_ARRAY_LEN(dims); d++) {
            for (size_t ri = 0; ri < GS_ARRAY_LEN(rows); ri++) {
                const int64_t n = dims[d];
                const int nr = rows[ri];
                gs_cpu_dots4(q, k, STRIDE, nr, n, o, f16);
                for (int j = 0; j < 4; j++)
                    for (int s = 0; s < nr; s++) {
                        double want = 0;
                        for (int64_t i = 0; i < n; i++)
                            want += (double)q[j][i] * (f16 ? gs_fp16_to_f32(k16[s * STRIDE + i])
                                                           : k32[s * STRIDE + i]);
                        cr_assert(fabs(out[j][s] - want) <= 1e-5 * (1 + fabs(want)),
                                  "f16 %d n %lld rows %d: q%d key %d: %g, want %g", f16,
                                  (long long)n, nr, j, s, out[j][s], want);
                    }
                for (int j = 0; j < 4; j++)
                    for (int64_t i = 0; i < n; i++)
                        acc4[j][i] = acc1[j][i] = frand();
                gs_cpu_axpys4(a4, w, k, STRIDE, nr, n, f16);
                for (int j = 0; j < 4; j++) {
                    if (f16)
                        gs_cpu_axpys_f16(acc1[j], w[j], k16, STRIDE, nr, n);
                    else
                        gs_cpu_axpys_f32(acc1[j], w[j], k32, STRIDE, nr, n);
                    cr_assert(!memcmp(acc1[j], acc4[j], sizeof(float) * (size_t)n),
                              "f16 %d n %lld rows %d: query %d's value sums differ", f16,
                              (long long)n, nr, j);
                }
            }
        }
    }
    free(k16);
    free(k32);
}
