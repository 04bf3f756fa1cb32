/*
 * engine/cpu/kernels.c - picks the kernel table for this CPU, once, and the
 * vector helpers that dispatch on it.
 */
#include "engine/cpu/cpu.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#define GS_CPU_X86 1
#else
#define GS_CPU_X86 0
#endif

static struct gs_cpu_kernels tables[GS_CPU_ISA_COUNT][GS_TYPE_COUNT];
static gs_from_f32_fn quantizers[GS_CPU_ISA_COUNT][GS_TYPE_COUNT];
static bool isa_ok[GS_CPU_ISA_COUNT];
static enum gs_cpu_isa isa_best = GS_CPU_ISA_SCALAR;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void detect(void)
{
    for (int i = 0; i < GS_CPU_ISA_COUNT; i++) {
        memcpy(tables[i], gs_cpu__kernels_scalar, sizeof(tables[i]));
        for (int t = 0; t < GS_TYPE_COUNT; t++) {
            const struct gs_type_traits *tt = gs_type_traits(t);
            quantizers[i][t] = tt && tt->supported ? tt->from_f32 : NULL;
        }
    }
    isa_ok[GS_CPU_ISA_SCALAR] = true;
#if GS_CPU_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c")) {
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
    }
#endif
}

enum gs_cpu_isa gs_cpu_isa_best(void)
{
    pthread_once(&once, detect);
    return isa_best;
}

const char *gs_cpu_isa_name(enum gs_cpu_isa isa)
{
    static const char *const names[GS_CPU_ISA_COUNT] = {"scalar", "avx2", "avx2-vnni"};
    return (unsigned)isa < GS_CPU_ISA_COUNT ? names[isa] : "unknown";
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

/* ---- vector helpers ------------------------------------------------------------------ */

static inline bool avx2(void)
{
    return GS_CPU_X86 && gs_cpu_isa_best() >= GS_CPU_ISA_AVX2;
}

void gs_cpu_f32_to_f16(const float *x, uint16_t *y, int64_t n)
{
#if GS_CPU_X86
    if (avx2()) {
        gs_cpu__avx2_f32_to_f16(x, y, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++)
        y[i] = gs_f32_to_fp16(x[i]);
}

void gs_cpu_f16_to_f32(const uint16_t *x, float *y, int64_t n)
{
#if GS_CPU_X86
    if (avx2()) {
        gs_cpu__avx2_f16_to_f32(x, y, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++)
        y[i] = gs_fp16_to_f32(x[i]);
}

float gs_cpu_dot_f32(const float *a, const float *b, int64_t n)
{
#if GS_CPU_X86
    if (avx2())
        return gs_cpu__avx2_dot_f32(a, b, n);
#endif
    float s = 0;
    for (int64_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

float gs_cpu_dot_f32_f16(const float *a, const uint16_t *b, int64_t n)
{
#if GS_CPU_X86
    if (avx2())
        return gs_cpu__avx2_dot_f32_f16(a, b, n);
#endif
    float s = 0;
    for (int64_t i = 0; i < n; i++)
        s += a[i] * gs_fp16_to_f32(b[i]);
    return s;
}

void gs_cpu_dots_f16(const float *q, const uint16_t *k, size_t stride, int n_rows, int64_t n,
                     float *out)
{
#if GS_CPU_X86
    if (avx2()) {
        gs_cpu__avx2_dots_f16(q, k, stride, n_rows, n, out);
        return;
    }
#endif
    for (int s = 0; s < n_rows; s++)
        out[s] = gs_cpu_dot_f32_f16(q, k + (size_t)s * stride, n);
}

void gs_cpu_dots_f32(const float *q, const float *k, size_t stride, int n_rows, int64_t n,
                     float *out)
{
#if GS_CPU_X86
    if (avx2()) {
        gs_cpu__avx2_dots_f32(q, k, stride, n_rows, n, out);
        return;
    }
#endif
    for (int s = 0; s < n_rows; s++)
        out[s] = gs_cpu_dot_f32(q, k + (size_t)s * stride, n);
}

void gs_cpu_axpys_f16(float *acc, const float *w, const uint16_t *v, size_t stride, int n_rows,
                      int64_t n)
{
#if GS_CPU_X86
    if (avx2()) {
        gs_cpu__avx2_axpys_f16(acc, w, v, stride, n_rows, n);
        return;
    }
#endif
    for (int s = 0; s < n_rows; s++)
        for (int64_t i = 0; i < n; i++)
            acc[i] += w[s] * gs_fp16_to_f32(v[(size_t)s * stride + i]);
}

void gs_cpu_axpys_f32(float *acc, const float *w, const float *v, size_t stride, int n_rows,
                      int64_t n)
{
#if GS_CPU_X86
    if (avx2()) {
        gs_cpu__avx2_axpys_f32(acc, w, v, stride, n_rows, n);
        return;
    }
#endif
    for (int s = 0; s < n_rows; s++)
        for (int64_t i = 0; i < n; i++)
            acc[i] += w[s] * v[(size_t)s * stride + i];
}

void gs_cpu_round_f16(float *x, int64_t n)
{
#if GS_CPU_X86
    if (avx2()) {
        gs_cpu__avx2_round_f16(x, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++)
        x[i] = gs_fp16_to_f32(gs_f32_to_fp16(x[i]));
}

void gs_cpu_swiglu(float *o, const float *g, const float *u, int64_t n)
{
#if GS_CPU_X86
    if (avx2()) {
        gs_cpu__avx2_swiglu(o, g, u, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++)
        o[i] = g[i] / (1.0f + expf(-g[i])) * (u ? u[i] : 1.0f);
}

float gs_cpu_scale_max(float *x, float scale, int64_t n)
{
#if GS_CPU_X86
    if (avx2())
        return gs_cpu__avx2_scale_max(x, scale, n);
#endif
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        x[i] *= scale;
        m = x[i] > m ? x[i] : m;
    }
    return m;
}

float gs_cpu_exp_sum(float *x, float m, int64_t n)
{
#if GS_CPU_X86
    if (avx2())
        return gs_cpu__avx2_exp_sum(x, m, n);
#endif
    float sum = 0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - m);
        sum += x[i];
    }
    return sum;
}
