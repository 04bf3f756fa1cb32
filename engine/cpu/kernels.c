/*
 * engine/cpu/kernels.c - picks the kernel table for this CPU, once, and the
 * vector helpers that dispatch on it.
 */
#include "engine/cpu/cpu.h"
#include "engine/quant/blocks.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#define GS_CPU_X86 1
#else
#define GS_CPU_X86 0
#endif
#if defined(__aarch64__)
#define GS_CPU_ARM64 1
#if defined(__linux__)
#include <sys/auxv.h>
#elif defined(__APPLE__)
#include <sys/sysctl.h>
#endif
#else
#define GS_CPU_ARM64 0
#endif

/* The vector helpers of the best ISA: scalar below, replaced by detect(). */
static struct gs_cpu_helpers helpers;
static const struct gs_cpu_helpers helpers_scalar;

static struct gs_cpu_kernels tables[GS_CPU_ISA_COUNT][GS_TYPE_COUNT];
static gs_from_f32_fn quantizers[GS_CPU_ISA_COUNT][GS_TYPE_COUNT];
static bool isa_ok[GS_CPU_ISA_COUNT];
static enum gs_cpu_isa isa_best = GS_CPU_ISA_SCALAR;
static pthread_once_t once = PTHREAD_ONCE_INIT;

#if GS_CPU_ARM64
/* Whether the OS reports the aarch64 int8 dot product instructions. */
static bool arm64_has_dotprod(void)
{
#if defined(__linux__) && defined(HWCAP_ASIMDDP)
    return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#elif defined(__APPLE__)
    int v = 0;
    size_t len = sizeof(v);
    return sysctlbyname("hw.optional.arm.FEAT_DotProd", &v, &len, NULL, 0) == 0 && v;
#else
    return false;
#endif
}
#endif

#if GS_CPU_X86
/* clang before 15 (the fuzz build, ./dev fuzz) does not know "f16c" here;
 * every CPU with AVX2 and FMA (Intel Haswell, AMD Excavator and later) has it. */
static bool cpu_has_f16c(void)
{
#if defined(__clang__) && __clang_major__ < 15
    return true;
#else
    return __builtin_cpu_supports("f16c");
#endif
}
#endif

static const char *const isa_names[GS_CPU_ISA_COUNT] = {"scalar", "avx2", "avx2-vnni", "neon",
                                                         "neon-dotprod"};

/*
 * GS_CPU_ISA_MAX=NAME (scalar, avx2, avx2-vnni, neon, neon-dotprod) runs this
 * process as a CPU whose best instruction set is NAME would: the sets above it
 * are not used, not even by the tests that compare every set this CPU has. It
 * is how an AVX-512 machine runs the test suite as an AVX2-only one does. A
 * name this CPU cannot run is a setup error, reported and fatal: quietly
 * running other kernels would make the check a lie.
 */
static void cap_isa(void)
{
    const char *cap = getenv("GS_CPU_ISA_MAX");
    if (!cap || !*cap)
        return;
    int want = -1;
    for (int i = 0; i < GS_CPU_ISA_COUNT; i++)
        if (!strcmp(cap, isa_names[i]))
            want = i;
    if (want < 0 || !isa_ok[want]) {
        fprintf(stderr, "graphserve: GS_CPU_ISA_MAX=%s is not an instruction set this CPU runs "
                        "(it runs up to %s)\n",
                cap, isa_names[isa_best]);
        abort();
    }
    for (int i = want + 1; i < GS_CPU_ISA_COUNT; i++)
        isa_ok[i] = false;
    isa_best = (enum gs_cpu_isa)want;
    if (want == GS_CPU_ISA_SCALAR)
        helpers = helpers_scalar;
}

static void detect(void)
{
    helpers = helpers_scalar;
    for (int i = 0; i < GS_CPU_ISA_COUNT; i++) {
        memcpy(tables[i], gs_cpu__kernels_scalar, sizeof(tables[i]));
        for (int t = 0; t < GS_TYPE_COUNT; t++) {
            const struct gs_type_traits *tt = gs_type_traits(t);
            quantizers[i][t] = tt && tt->supported ? gs_activation_quantizer(t) : NULL;
        }
    }
    isa_ok[GS_CPU_ISA_SCALAR] = true;
#if GS_CPU_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c()) {
        gs_cpu__kernels_avx2_fill(tables[GS_CPU_ISA_AVX2]);
        gs_cpu__quantizers_avx2_fill(quantizers[GS_CPU_ISA_AVX2]);
        isa_ok[GS_CPU_ISA_AVX2] = true;
        isa_best = GS_CPU_ISA_AVX2;
        if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl")) {
            gs_cpu__kernels_avx2_fill(tables[GS_CPU_ISA_VNNI]);
            gs_cpu__kernels_vnni_fill(tables[GS_CPU_ISA_VNNI]);
            gs_cpu__quantizers_avx2_fill(quantizers[GS_CPU_ISA_VNNI]);
            isa_ok[GS_CPU_ISA_VNNI] = true;
            isa_best = GS_CPU_ISA_VNNI;
        }
        gs_cpu__helpers_avx2_fill(&helpers);
    }
#elif GS_CPU_ARM64
    gs_cpu__kernels_neon_fill(tables[GS_CPU_ISA_NEON]);
    isa_ok[GS_CPU_ISA_NEON] = true;
    isa_best = GS_CPU_ISA_NEON;
    if (arm64_has_dotprod()) {
        gs_cpu__kernels_neon_fill(tables[GS_CPU_ISA_NEON_DOT]);
        gs_cpu__kernels_neon_dot_fill(tables[GS_CPU_ISA_NEON_DOT]);
        isa_ok[GS_CPU_ISA_NEON_DOT] = true;
        isa_best = GS_CPU_ISA_NEON_DOT;
    }
    gs_cpu__helpers_neon_fill(&helpers); /* rounding, SwiGLU, softmax stay scalar */
#endif
    cap_isa();
#if GS_CPU_X86
    if (isa_best == GS_CPU_ISA_VNNI)
        helpers.gemm_f32 = gs_cpu__gemm_f32_avx512;
#endif
}

enum gs_cpu_isa gs_cpu_isa_best(void)
{
    pthread_once(&once, detect);
    return isa_best;
}

const char *gs_cpu_isa_name(enum gs_cpu_isa isa)
{
    return (unsigned)isa < GS_CPU_ISA_COUNT ? isa_names[isa] : "unknown";
}

const struct gs_cpu_kernels *gs_cpu_kernels_for(enum gs_cpu_isa isa, enum gs_type t)
{
    pthread_once(&once, detect);
    if ((unsigned)isa >= GS_CPU_ISA_COUNT || !isa_ok[isa] || (unsigned)t >= GS_TYPE_COUNT)
        return NULL;
    return &tables[isa][t];
}

const struct gs_cpu_kernels *gs_cpu_kernels(enum gs_type t)
{
    return gs_cpu_kernels_for(gs_cpu_isa_best(), t);
}

gs_from_f32_fn gs_cpu_quantizer_for(enum gs_cpu_isa isa, enum gs_type t)
{
    pthread_once(&once, detect);
    if ((unsigned)isa >= GS_CPU_ISA_COUNT || !isa_ok[isa] || (unsigned)t >= GS_TYPE_COUNT)
        return NULL;
    return quantizers[isa][t];
}

gs_from_f32_fn gs_cpu_quantizer(enum gs_type t)
{
    return gs_cpu_quantizer_for(gs_cpu_isa_best(), t);
}

/* ---- vector helpers: the scalar forms, then the dispatch ------------------------------ */

static void f32_to_f16(const float *x, uint16_t *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = gs_f32_to_fp16(x[i]);
}

static void f16_to_f32(const uint16_t *x, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = gs_fp16_to_f32(x[i]);
}

static float dot_f32(const float *a, const float *b, int64_t n)
{
    float s = 0;
    for (int64_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

static float dot_f32_f16(const float *a, const uint16_t *b, int64_t n)
{
    float s = 0;
    for (int64_t i = 0; i < n; i++)
        s += a[i] * gs_fp16_to_f32(b[i]);
    return s;
}

static void dots_f16(const float *q, const uint16_t *k, size_t stride, int n_rows, int64_t n,
                     float *out)
{
    for (int s = 0; s < n_rows; s++)
        out[s] = dot_f32_f16(q, k + (size_t)s * stride, n);
}

static void dots_f32(const float *q, const float *k, size_t stride, int n_rows, int64_t n,
                     float *out)
{
    for (int s = 0; s < n_rows; s++)
        out[s] = dot_f32(q, k + (size_t)s * stride, n);
}

static void axpys_f16(float *acc, const float *w, const uint16_t *v, size_t stride, int n_rows,
                      int64_t n)
{
    for (int s = 0; s < n_rows; s++)
        for (int64_t i = 0; i < n; i++)
            acc[i] += w[s] * gs_fp16_to_f32(v[(size_t)s * stride + i]);
}

static void axpys_f32(float *acc, const float *w, const float *v, size_t stride, int n_rows,
                      int64_t n)
{
    for (int s = 0; s < n_rows; s++)
        for (int64_t i = 0; i < n; i++)
            acc[i] += w[s] * v[(size_t)s * stride + i];
}

/* The four-query forms as four single-query calls of the best helpers. */
static void dots4(const float *const q[4], const void *k, size_t stride, int n_rows, int64_t n,
                  float *const out[4], bool f16)
{
    for (int j = 0; j < 4; j++) {
        if (f16)
            helpers.dots_f16(q[j], k, stride, n_rows, n, out[j]);
        else
            helpers.dots_f32(q[j], k, stride, n_rows, n, out[j]);
    }
}

static void axpys4(float *const acc[4], const float *const w[4], const void *v, size_t stride,
                   int n_rows, int64_t n, bool f16)
{
    for (int j = 0; j < 4; j++) {
        if (f16)
            helpers.axpys_f16(acc[j], w[j], v, stride, n_rows, n);
        else
            helpers.axpys_f32(acc[j], w[j], v, stride, n_rows, n);
    }
}

static void round_f16(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = gs_fp16_to_f32(gs_f32_to_fp16(x[i]));
}

/* q . the slice off .. off + n - 1 of one q8_0 row: a block's part, then its scale. */
static float dot_q8_0_row(const float *q, const uint8_t *row, int64_t off, int64_t n)
{
    float sum = 0;
    for (int64_t i = 0; i < n;) {
        const int64_t e = off + i, m = GS_MIN(GS_QK - e % GS_QK, n - i);
        const uint8_t *b = row + e / GS_QK * GS_Q8_0_BYTES;
        const int8_t *x = (const int8_t *)(b + GS_Q8_0_QS) + e % GS_QK;
        float part = 0;
        for (int64_t j = 0; j < m; j++)
            part += q[i + j] * (float)x[j];
        sum += gs_quant_ldf16(b + GS_Q8_0_D) * part;
        i += m;
    }
    return sum;
}

static void dots_q8_0(const float *q, const void *k, size_t stride, int n_rows, int64_t off,
                      int64_t n, float *out)
{
    for (int s = 0; s < n_rows; s++)
        out[s] = dot_q8_0_row(q, (const uint8_t *)k + (size_t)s * stride, off, n);
}

static void axpys_q8_0(float *acc, const float *w, const void *v, size_t stride, int n_rows,
                       int64_t off, int64_t n)
{
    for (int s = 0; s < n_rows; s++) {
        const uint8_t *row = (const uint8_t *)v + (size_t)s * stride;
        for (int64_t i = 0; i < n;) {
            const int64_t e = off + i, m = GS_MIN(GS_QK - e % GS_QK, n - i);
            const uint8_t *b = row + e / GS_QK * GS_Q8_0_BYTES;
            const int8_t *x = (const int8_t *)(b + GS_Q8_0_QS) + e % GS_QK;
            const float c = w[s] * gs_quant_ldf16(b + GS_Q8_0_D);
            for (int64_t j = 0; j < m; j++)
                acc[i + j] += c * (float)x[j];
            i += m;
        }
    }
}

/* The four-query forms as four single-query calls of the best helpers. */
static void dots4_q8_0(const float *const q[4], const void *k, size_t stride, int n_rows,
                       int64_t off, int64_t n, float *const out[4])
{
    for (int j = 0; j < 4; j++)
        helpers.dots_q8_0(q[j], k, stride, n_rows, off, n, out[j]);
}

static void axpys4_q8_0(float *const acc[4], const float *const w[4], const void *v, size_t stride,
                        int n_rows, int64_t off, int64_t n)
{
    for (int j = 0; j < 4; j++)
        helpers.axpys_q8_0(acc[j], w[j], v, stride, n_rows, off, n);
}

static void swiglu(float *o, const float *g, const float *u, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        o[i] = g[i] / (1.0f + expf(-g[i])) * (u ? u[i] : 1.0f);
}

/* gelu as ggml's CPU backend has it (see cpu.h): f16 input and result. */
static void geglu(float *o, const float *g, const float *u, int64_t n)
{
    const float c = 0.7978845608028654f; /* sqrt(2 / pi) */
    for (int64_t i = 0; i < n; i++) {
        const float x = g[i];
        float y = x;
        if (x <= -10.0f) {
            y = 0.0f;
        } else if (x < 10.0f) {
            const float h = gs_fp16_to_f32(gs_f32_to_fp16(x));
            y = gs_fp16_to_f32(
                gs_f32_to_fp16(0.5f * h * (1.0f + tanhf(c * h * (1.0f + 0.044715f * h * h)))));
        }
        o[i] = y * (u ? u[i] : 1.0f);
    }
}

static float scale_max(float *x, float scale, int64_t n)
{
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        x[i] *= scale;
        m = x[i] > m ? x[i] : m;
    }
    return m;
}

static float exp_sum(float *x, float m, int64_t n)
{
    float sum = 0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - m);
        sum += x[i];
    }
    return sum;
}

static void gemm_f32(float *c, size_t ldc, const float *a, size_t a_i, size_t a_p,
                     const float *b, size_t ldb, int64_t m, int64_t n, int64_t k)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float s = 0;
            for (int64_t p = 0; p < k; p++)
                s += a[(size_t)i * a_i + (size_t)p * a_p] * b[(size_t)p * ldb + j];
            c[(size_t)i * ldc + j] = s;
        }
}

static void swiglu_back_gate(float *o, const float *dy, const float *g, const float *u,
                             int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        const float s = 1.0f / (1.0f + expf(-g[i]));
        o[i] = dy[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
    }
}

static const struct gs_cpu_helpers helpers_scalar = {
    .f32_to_f16 = f32_to_f16,
    .f16_to_f32 = f16_to_f32,
    .dot_f32 = dot_f32,
    .dot_f32_f16 = dot_f32_f16,
    .dots_f16 = dots_f16,
    .dots_f32 = dots_f32,
    .axpys_f16 = axpys_f16,
    .axpys_f32 = axpys_f32,
    .dots4 = dots4,
    .axpys4 = axpys4,
    .round_f16 = round_f16,
    .dots_q8_0 = dots_q8_0,
    .axpys_q8_0 = axpys_q8_0,
    .dots4_q8_0 = dots4_q8_0,
    .axpys4_q8_0 = axpys4_q8_0,
    .swiglu = swiglu,
    .scale_max = scale_max,
    .exp_sum = exp_sum,
    .geglu = geglu,
    .gemm_f32 = gemm_f32,
    .swiglu_back_gate = swiglu_back_gate,
};

static inline const struct gs_cpu_helpers *best(void)
{
    pthread_once(&once, detect);
    return &helpers;
}

void gs_cpu_f32_to_f16(const float *x, uint16_t *y, int64_t n)
{
    best()->f32_to_f16(x, y, n);
}

void gs_cpu_f16_to_f32(const uint16_t *x, float *y, int64_t n)
{
    best()->f16_to_f32(x, y, n);
}

float gs_cpu_dot_f32(const float *a, const float *b, int64_t n)
{
    return best()->dot_f32(a, b, n);
}

float gs_cpu_dot_f32_f16(const float *a, const uint16_t *b, int64_t n)
{
    return best()->dot_f32_f16(a, b, n);
}

void gs_cpu_dots_f16(const float *q, const uint16_t *k, size_t stride, int n_rows, int64_t n,
                     float *out)
{
    best()->dots_f16(q, k, stride, n_rows, n, out);
}

void gs_cpu_dots_f32(const float *q, const float *k, size_t stride, int n_rows, int64_t n,
                     float *out)
{
    best()->dots_f32(q, k, stride, n_rows, n, out);
}

void gs_cpu_axpys_f16(float *acc, const float *w, const uint16_t *v, size_t stride, int n_rows,
                      int64_t n)
{
    best()->axpys_f16(acc, w, v, stride, n_rows, n);
}

void gs_cpu_axpys_f32(float *acc, const float *w, const float *v, size_t stride, int n_rows,
                      int64_t n)
{
    best()->axpys_f32(acc, w, v, stride, n_rows, n);
}

void gs_cpu_round_f16(float *x, int64_t n)
{
    best()->round_f16(x, n);
}

void gs_cpu_dots_q8_0(const float *q, const void *k, size_t stride, int n_rows, int64_t off,
                      int64_t n, float *out)
{
    best()->dots_q8_0(q, k, stride, n_rows, off, n, out);
}

void gs_cpu_axpys_q8_0(float *acc, const float *w, const void *v, size_t stride, int n_rows,
                       int64_t off, int64_t n)
{
    best()->axpys_q8_0(acc, w, v, stride, n_rows, off, n);
}

void gs_cpu_dots4_q8_0(const float *const q[4], const void *k, size_t stride, int n_rows,
                       int64_t off, int64_t n, float *const out[4])
{
    best()->dots4_q8_0(q, k, stride, n_rows, off, n, out);
}

void gs_cpu_axpys4_q8_0(float *const acc[4], const float *const w[4], const void *v, size_t stride,
                        int n_rows, int64_t off, int64_t n)
{
    best()->axpys4_q8_0(acc, w, v, stride, n_rows, off, n);
}

void gs_cpu_swiglu(float *o, const float *g, const float *u, int64_t n)
{
    best()->swiglu(o, g, u, n);
}

void gs_cpu_geglu(float *o, const float *g, const float *u, int64_t n)
{
    best()->geglu(o, g, u, n);
}

float gs_cpu_scale_max(float *x, float scale, int64_t n)
{
    return best()->scale_max(x, scale, n);
}

void gs_cpu_dots4(const float *const q[4], const void *k, size_t stride, int n_rows, int64_t n,
                  float *const out[4], bool f16)
{
    best()->dots4(q, k, stride, n_rows, n, out, f16);
}

void gs_cpu_axpys4(float *const acc[4], const float *const w[4], const void *v, size_t stride,
                   int n_rows, int64_t n, bool f16)
{
    best()->axpys4(acc, w, v, stride, n_rows, n, f16);
}

float gs_cpu_exp_sum(float *x, float m, int64_t n)
{
    return best()->exp_sum(x, m, n);
}

void gs_cpu_swiglu_back_gate(float *o, const float *dy, const float *g, const float *u,
                             int64_t n)
{
    best()->swiglu_back_gate(o, dy, g, u, n);
}

void gs_cpu_gemm_f32(float *c, size_t ldc, const float *a, size_t a_i, size_t a_p, const float *b,
                     size_t ldb, int64_t m, int64_t n, int64_t k)
{
    best()->gemm_f32(c, ldc, a, a_i, a_p, b, ldb, m, n, k);
}
