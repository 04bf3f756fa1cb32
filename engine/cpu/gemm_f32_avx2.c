/*
 * engine/cpu/gemm_f32_avx2.c - F32 matrix products on AVX2 + FMA, and on
 * AVX-512F: the strided product of training's backward matmuls
 * (gs_cpu_gemm_f32, cpu.h). Built twice (engine/cpu/meson.build): with the
 * flags of kernels_avx2.c as gs_cpu__gemm_f32_avx2, and with -mavx512f and
 * GS_GEMM_AVX512 as gs_cpu__gemm_f32_avx512, whose vectors are 16 floats
 * wide; each is only called after the runtime check has seen its ISA.
 *
 * A tile is up to GEMM_MR rows of c by two vectors of columns (16 or 32),
 * twelve accumulators: each step of the reduction broadcasts one a per row and
 * loads two vectors of b's row, so an element of b is loaded once per tile and
 * an a once per two vectors of columns. Every element is its own chain of fused multiply-adds
 * over p in order from zero, in the tile body, the narrower column tails and
 * the scalar tail alike (fmaf is one vfmadd here), so how c is cut into tiles
 * (and among threads), and which of the two widths runs, never changes a bit.
 *
 * Blocking, where b is over GEMM_B_CACHED bytes: the reduction goes in passes
 * of GEMM_KC steps, and in a pass, c's rows in blocks of GEMM_MC, each block's
 * tiles column strip by column strip: a strip of b (GEMM_KC x a tile's columns) stays
 * in L1 over a block's tiles and the block's part of a (GEMM_MC x GEMM_KC) in
 * L2 over its strips, where walking all of b for every six rows streamed it
 * from memory (dW's b is every token's row, dx's the whole weight). A pass
 * after the first starts each chain from the value the previous pass stored
 * in c, which is the chain's value there, so the bits are those of one pass.
 * A smaller b (a forward panel) goes row tile by row tile in one pass, each
 * tile's rows of a in L1 over all of b's columns.
 */
#include "engine/cpu/cpu.h"

#include <immintrin.h>
#include <math.h>

#define GEMM_MR 6

/* The vector: VW floats, and the five operations the tiles use. */
#if GS_GEMM_AVX512
#define VW 16
typedef __m512 vf;
#define vf_load   _mm512_loadu_ps
#define vf_store  _mm512_storeu_ps
#define vf_zero   _mm512_setzero_ps
#define vf_bcast  _mm512_set1_ps
#define vf_fma    _mm512_fmadd_ps
#define GEMM_NAME gs_cpu__gemm_f32_avx512
#else
#define VW 8
typedef __m256 vf;
#define vf_load   _mm256_loadu_ps
#define vf_store  _mm256_storeu_ps
#define vf_zero   _mm256_setzero_ps
#define vf_bcast  _mm256_set1_ps
#define vf_fma    _mm256_fmadd_ps
#define GEMM_NAME gs_cpu__gemm_f32_avx2
#endif
#define GEMM_MC       96
#define GEMM_KC       128
#define GEMM_B_CACHED (256u << 10)

/* mr rows by nv vectors of VW columns; mr and nv are constants where inlined.
 * The chains start from zero, or with more from c's values. */
static inline __attribute__((always_inline)) void tile(int mr, int nv, float *c, size_t ldc,
                                                       const float *a, size_t a_i, size_t a_p,
                                                       const float *b, size_t ldb, int64_t k,
                                                       bool more)
{
    /* Unrolled so that the accumulators live in registers. */
    vf acc[GEMM_MR][2];
#pragma GCC unroll 6
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 2
        for (int v = 0; v < nv; v++)
            acc[i][v] = more ? vf_load(c + (size_t)i * ldc + VW * v) : vf_zero();
    for (int64_t p = 0; p < k; p++) {
        const float *bp = b + (size_t)p * ldb, *ap = a + (size_t)p * a_p;
        const vf b0 = vf_load(bp);
        const vf b1 = nv > 1 ? vf_load(bp + VW) : b0;
#pragma GCC unroll 6
        for (int i = 0; i < mr; i++) {
            const vf av = vf_bcast(ap[(size_t)i * a_i]);
            acc[i][0] = vf_fma(av, b0, acc[i][0]);
            if (nv > 1)
                acc[i][1] = vf_fma(av, b1, acc[i][1]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 2
        for (int v = 0; v < nv; v++)
            vf_store(c + (size_t)i * ldc + VW * v, acc[i][v]);
}

#define TILE_ROWS(nv)                                                                              \
    switch (mr) {                                                                                  \
    case 6:                                                                                        \
        tile(6, nv, c, ldc, a, a_i, a_p, b, ldb, k, more);                                         \
        break;                                                                                     \
    case 5:                                                                                        \
        tile(5, nv, c, ldc, a, a_i, a_p, b, ldb, k, more);                                         \
        break;                                                                                     \
    case 4:                                                                                        \
        tile(4, nv, c, ldc, a, a_i, a_p, b, ldb, k, more);                                         \
        break;                                                                                     \
    case 3:                                                                                        \
        tile(3, nv, c, ldc, a, a_i, a_p, b, ldb, k, more);                                         \
        break;                                                                                     \
    case 2:                                                                                        \
        tile(2, nv, c, ldc, a, a_i, a_p, b, ldb, k, more);                                         \
        break;                                                                                     \
    default:                                                                                       \
        tile(1, nv, c, ldc, a, a_i, a_p, b, ldb, k, more);                                         \
        break;                                                                                     \
    }

static void tile_2v(int mr, float *c, size_t ldc, const float *a, size_t a_i, size_t a_p,
                    const float *b, size_t ldb, int64_t k, bool more)
{
    TILE_ROWS(2)
}

static void tile_1v(int mr, float *c, size_t ldc, const float *a, size_t a_i, size_t a_p,
                   const float *b, size_t ldb, int64_t k, bool more)
{
    TILE_ROWS(1)
}
#undef TILE_ROWS

/* Rows [0, m) of c, reduction steps [0, k) of a pass (a and b at its first step),
 * a strip of b's columns at a time. */
static void gemm_block(float *c, size_t ldc, const float *a, size_t a_i, size_t a_p, const float *b,
                       size_t ldb, int64_t m, int64_t n, int64_t k, bool more)
{
    int64_t j = 0;
    for (; j + 2 * VW <= n; j += 2 * VW)
        for (int64_t i0 = 0; i0 < m; i0 += GEMM_MR)
            tile_2v((int)GS_MIN(GEMM_MR, m - i0), c + (size_t)i0 * ldc + j, ldc,
                    a + (size_t)i0 * a_i, a_i, a_p, b + j, ldb, k, more);
    for (; j + VW <= n; j += VW)
        for (int64_t i0 = 0; i0 < m; i0 += GEMM_MR)
            tile_1v((int)GS_MIN(GEMM_MR, m - i0), c + (size_t)i0 * ldc + j, ldc,
                   a + (size_t)i0 * a_i, a_i, a_p, b + j, ldb, k, more);
    for (; j < n; j++)
        for (int64_t i = 0; i < m; i++) {
            float s = more ? c[(size_t)i * ldc + j] : 0.0f;
            for (int64_t p = 0; p < k; p++)
                s = fmaf(a[(size_t)i * a_i + (size_t)p * a_p], b[(size_t)p * ldb + j], s);
            c[(size_t)i * ldc + j] = s;
        }
}

void GEMM_NAME(float *c, size_t ldc, const float *a, size_t a_i, size_t a_p, const float *b,
               size_t ldb, int64_t m, int64_t n, int64_t k)
{
    if ((uint64_t)GS_MAX(k, 0) * (uint64_t)n * sizeof(float) <= GEMM_B_CACHED) {
        for (int64_t i0 = 0; i0 < m; i0 += GEMM_MR)
            gemm_block(c + (size_t)i0 * ldc, ldc, a + (size_t)i0 * a_i, a_i, a_p, b, ldb,
                       GS_MIN(GEMM_MR, m - i0), n, k, false);
        return;
    }
    /* one pass when k is 0: c is zeroed */
    for (int64_t p0 = 0; p0 == 0 || p0 < k; p0 += GEMM_KC) {
        const int64_t kc = GS_MIN(GEMM_KC, k - p0);
        for (int64_t i0 = 0; i0 < m; i0 += GEMM_MC)
            gemm_block(c + (size_t)i0 * ldc, ldc, a + (size_t)i0 * a_i + (size_t)p0 * a_p, a_i, a_p,
                       b + (size_t)p0 * ldb, ldb, GS_MIN(GEMM_MC, m - i0), n, GS_MAX(kc, 0),
                       p0 > 0);
    }
}
