/*
 * bench/kernels.c - gs-bench-kernels: speed of every cpu kernel on every ISA
 * this machine has, as weight bytes per second and as a ratio to the scalar
 * kernel measured in the same run. Dot: one token (generation). Gemm: a
 * batch of tokens (prompt processing). Single thread, timed by the thread's
 * own CPU time, so that other work on a shared machine (which deschedules
 * the thread) does not count; a type name as the fourth argument measures
 * that type alone. Not a test: nothing is asserted; bench/RESULTS.md records
 * what it printed.
 *
 * usage: gs-bench-kernels [K [N [TOKENS [TYPE]]]]   (default 2048 1024 64, every type)
 */
#include "engine/cpu/cpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const enum gs_type types[] = {
    GS_TYPE_F32,  GS_TYPE_F16,  GS_TYPE_BF16, GS_TYPE_Q4_0, GS_TYPE_Q4_1,
    GS_TYPE_Q5_0, GS_TYPE_Q5_1, GS_TYPE_Q8_0, GS_TYPE_Q2_K, GS_TYPE_Q3_K,
    GS_TYPE_Q4_K, GS_TYPE_Q5_K, GS_TYPE_Q6_K,
};

static float frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffffff) / (float)0x1000000 * 2.0f - 1.0f;
}

/* This thread's CPU time in milliseconds. */
static double thread_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Seconds per call of the gemm over n_tok tokens (best of a few runs). */
static double time_gemm(const struct gs_cpu_kernels *k, int64_t K, const void *w, size_t ws,
                        int N, const void *x, size_t xs, int n_tok, float *out)
{
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = thread_ms();
        int calls = 0;
        do {
            k->gemm(K, w, ws, N, x, xs, n_tok, out, (size_t)N);
            calls++;
        } while (thread_ms() - t0 < 150);
        best = GS_MIN(best, (thread_ms() - t0) / 1000.0 / calls);
    }
    return best;
}

int main(int argc, char **argv)
{
    int64_t K = argc > 1 ? atoll(argv[1]) : 2048;
    int N = argc > 2 ? atoi(argv[2]) : 1024;
    int T = argc > 3 ? atoi(argv[3]) : 64;
    const char *only = argc > 4 ? argv[4] : NULL;
    bool known = !only;
    for (size_t i = 0; only && i < GS_ARRAY_LEN(types); i++)
        known |= !strcmp(only, gs_type_name(types[i]));
    if (K <= 0 || K % 256 || N <= 0 || T <= 0 || !known) {
        fprintf(stderr, "usage: gs-bench-kernels [K (multiple of 256) [N [TOKENS [TYPE]]]]\n");
        return 2;
    }
    uint64_t seed = 1;
    float *tmp = malloc(sizeof(float) * K);
    float *out = malloc(sizeof(float) * (size_t)N * T);
    printf("K %lld, N %d, tokens %d, best ISA %s, one thread\n", (long long)K, N, T,
           gs_cpu_isa_name(gs_cpu_isa_best()));
    printf("| type | isa | dot GB/s | dot x scalar | gemm%d Gop/s | gemm x scalar |\n", T);
    printf("|---|---|---:|---:|---:|---:|\n");
    for (size_t i = 0; i < GS_ARRAY_LEN(types); i++) {
        enum gs_type t = types[i], xt = gs_type_traits(t)->vec_dot_type;
        if (only && strcmp(only, gs_type_name(t)))
            continue;
        uint64_t wb, xb;
        gs_type_row_bytes(t, K, &wb);
        gs_type_row_bytes(xt, K, &xb);
        char *w = malloc(wb * N), *x = malloc(xb * T);
        for (int r = 0; r < N; r++) {
            for (int64_t j = 0; j < K; j++)
                tmp[j] = frand(&seed) * 0.1f;
            gs_quantize(t, tmp, w + r * wb, K);
        }
        for (int r = 0; r < T; r++) {
            for (int64_t j = 0; j < K; j++)
                tmp[j] = frand(&seed);
            gs_quantize(xt, tmp, x + r * xb, K);
        }
        double dot_scalar = 0, gemm_scalar = 0;
        for (int isa = 0; isa < GS_CPU_ISA_COUNT; isa++) {
            const struct gs_cpu_kernels *k = gs_cpu_kernels_for((enum gs_cpu_isa)isa, t);
            if (!k || !k->dot)
                continue;
            double s1 = time_gemm(k, K, w, wb, N, x, xb, 1, out);
            double sT = time_gemm(k, K, w, wb, N, x, xb, T, out);
            if (isa == GS_CPU_ISA_SCALAR) {
                dot_scalar = s1;
                gemm_scalar = sT;
            }
            printf("| %s | %s | %.2f | %.1f | %.2f | %.1f |\n", gs_type_name(t),
                   gs_cpu_isa_name((enum gs_cpu_isa)isa), (double)wb * N / s1 / 1e9,
                   dot_scalar / s1, 2.0 * K * N * T / sT / 1e9, gemm_scalar / sT);
        }
        free(w);
        free(x);
    }
    free(tmp);
    free(out);
    return 0;
}
