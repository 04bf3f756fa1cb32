/*
 * engine/cpu/cpu.h - the kernels and the worker pool behind the `cpu` backend
 * (engine/backend/cpu.c, and cpu_train.c for its training ops). Nothing outside
 * that backend and its tests includes this header.
 *
 * Kernels. Weights are multiplied in their file format. Activations are first
 * quantized to the weight type's dot partner (the vec_dot_type of
 * engine/quant.h: q8_0 for q4_0/q5_0/q8_0, q8_1 for q4_1/q5_1, q8_K for the
 * K-quants, f16/bf16 for f16/bf16 weights, f32 for f32), with that type's
 * reference quantizer, so the products are the integer dot products llama.cpp
 * computes. One table row per weight type gives the kernels (ggml's
 * type_traits_cpu); a new type is one row, no switch.
 *
 * Instruction sets. The table is chosen once, at first use, from what the CPU
 * reports (AVX2+FMA+F16C, then AVX-512 VNNI, on x86-64; Advanced SIMD, then
 * the dot product extension, on aarch64; scalar everywhere else), so one
 * binary runs on any x86-64 or any aarch64. gs_cpu_kernels_for() gives a
 * specific table for tests.
 *
 * Worker pool. gs_cpu_pool runs one task as chunks that its threads (the
 * caller included) claim from a shared counter, and returns when every chunk
 * is done: one barrier per op. Its threads are created once; running a task
 * allocates nothing. Workers spin briefly between tasks (ops follow each other
 * within microseconds), then yield, then sleep on a condition variable.
 *
 * Ownership: tables are static and const. A pool is created and freed by its
 * owner (the backend instance). Threads: kernels are pure functions of their
 * arguments and may run on any thread; a pool is driven by one thread at a time.
 */
#ifndef GS_CPU_H
#define GS_CPU_H

#include "engine/base.h"
#include "engine/quant.h"

/* ---- kernels ----------------------------------------------------------------- */

/*
 * Dot product of one weight row w (n elements of the weight type) with one
 * activation row x (n elements of the weight type's vec_dot_type):
 * sum_i w[i] * x[i]. n is a multiple of both block sizes. No alignment needed.
 */
typedef float (*gs_cpu_dot_fn)(int64_t n, const void *w, const void *x);

/*
 * Tiled product: out[t * out_stride + r] = dot(w row r, x row t) for r < n_rows,
 * t < n_tok. Weight rows are w_stride bytes apart, activation rows x_stride.
 * Implementations reuse each weight block for all n_tok tokens while it is in
 * cache (and in registers where the ISA allows).
 *
 * Batch invariance: out[t][r] has exactly the bits of the same table row's
 * dot(w row r, x row t), whatever n_tok and n_rows are and wherever the row
 * and the token sit in the call, so a caller may cut rows and tokens among
 * threads and steps as it likes, and a token's result does not depend on
 * what else its step multiplies (a decoding sequence's output on the others
 * in its batch; speculative verification on plain decoding). Each ISA's
 * table fixes one summation order per type that both forms follow (for the
 * AVX2 ones: avx2.h); tables of different ISAs may differ from each other.
 */
typedef void (*gs_cpu_gemm_fn)(int64_t n, const void *w, size_t w_stride, int n_rows,
                               const void *x, size_t x_stride, int n_tok, float *out,
                               size_t out_stride);

struct gs_cpu_kernels {
    gs_cpu_dot_fn dot;   /* NULL: the type cannot be multiplied */
    gs_cpu_gemm_fn gemm; /* never NULL where dot is set */
};

enum gs_cpu_isa {
    GS_CPU_ISA_SCALAR = 0,
    GS_CPU_ISA_AVX2,    /* x86-64 with AVX2, FMA and F16C */
    GS_CPU_ISA_VNNI,    /* AVX2 kernels with AVX-512 VNNI byte products and 512-bit panels */
    GS_CPU_ISA_NEON,    /* aarch64 Advanced SIMD (every aarch64 CPU) */
    GS_CPU_ISA_NEON_DOT, /* Advanced SIMD with the int8 dot product (sdot, ARMv8.2+) */
    GS_CPU_ISA_COUNT
};

/* The best ISA this CPU supports (detected once, thread-safe). */
enum gs_cpu_isa gs_cpu_isa_best(void);
const char *gs_cpu_isa_name(enum gs_cpu_isa isa);

/* The kernels of weight type t on the best ISA; NULL for an unknown type id.
 * The row's dot is NULL when the type has no kernel. */
const struct gs_cpu_kernels *gs_cpu_kernels(enum gs_type t);

/* The kernels of t on a given ISA, for tests and benchmarks; NULL when the
 * ISA is not supported by this CPU or this build, or t is unknown. Types an
 * ISA does not specialise fall back to the scalar row. */
const struct gs_cpu_kernels *gs_cpu_kernels_for(enum gs_cpu_isa isa, enum gs_type t);

/*
 * The activation quantizer for format t (q8_0, q8_1, q8_K, f16, ...): the
 * fastest this CPU has, byte-identical to gs_activation_quantizer(t) of
 * engine/quant.h (llama.cpp's CPU rounding). NULL when t has no quantizer.
 */
gs_from_f32_fn gs_cpu_quantizer(enum gs_type t);
gs_from_f32_fn gs_cpu_quantizer_for(enum gs_cpu_isa isa, enum gs_type t);

/* Per-ISA tables, [GS_TYPE_COUNT] rows each (kernels_scalar.c, kernels_avx2_*.c,
 * kernels_neon.c). */
extern const struct gs_cpu_kernels gs_cpu__kernels_scalar[GS_TYPE_COUNT];
/* Fill the rows an ISA file specialises (x86-64 builds only). */
void gs_cpu__kernels_avx2_fill(struct gs_cpu_kernels *table);
void gs_cpu__kernels_vnni_fill(struct gs_cpu_kernels *table);
void gs_cpu__quantizers_avx2_fill(gs_from_f32_fn *table);
/* The same for aarch64 builds. */
void gs_cpu__kernels_neon_fill(struct gs_cpu_kernels *table);
void gs_cpu__kernels_neon_dot_fill(struct gs_cpu_kernels *table);

/* The vector helpers below, as one table per ISA: kernels.c fills it with the
 * scalar forms, then lets the best ISA's file replace what it has. */
struct gs_cpu_helpers {
    void (*f32_to_f16)(const float *x, uint16_t *y, int64_t n);
    void (*f16_to_f32)(const uint16_t *x, float *y, int64_t n);
    float (*dot_f32)(const float *a, const float *b, int64_t n);
    float (*dot_f32_f16)(const float *a, const uint16_t *b, int64_t n);
    void (*dots_f16)(const float *q, const uint16_t *k, size_t stride, int n_rows, int64_t n,
                     float *out);
    void (*dots_f32)(const float *q, const float *k, size_t stride, int n_rows, int64_t n,
                     float *out);
    void (*axpys_f16)(float *acc, const float *w, const uint16_t *v, size_t stride, int n_rows,
                      int64_t n);
    void (*axpys_f32)(float *acc, const float *w, const float *v, size_t stride, int n_rows,
                      int64_t n);
    void (*dots4)(const float *const q[4], const void *k, size_t stride, int n_rows, int64_t n,
                  float *const out[4], bool f16);
    void (*axpys4)(float *const acc[4], const float *const w[4], const void *v, size_t stride,
                   int n_rows, int64_t n, bool f16);
    void (*round_f16)(float *x, int64_t n);
    void (*dots_q8_0)(const float *q, const void *k, size_t stride, int n_rows, int64_t off,
                      int64_t n, float *out);
    void (*axpys_q8_0)(float *acc, const float *w, const void *v, size_t stride, int n_rows,
                       int64_t off, int64_t n);
    void (*dots4_q8_0)(const float *const q[4], const void *k, size_t stride, int n_rows,
                       int64_t off, int64_t n, float *const out[4]);
    void (*axpys4_q8_0)(float *const acc[4], const float *const w[4], const void *v, size_t stride,
                        int n_rows, int64_t off, int64_t n);
    void (*swiglu)(float *o, const float *g, const float *u, int64_t n);
    float (*scale_max)(float *x, float scale, int64_t n);
    float (*exp_sum)(float *x, float m, int64_t n);
    void (*geglu)(float *o, const float *g, const float *u, int64_t n);
    void (*gemm_f32)(float *c, size_t ldc, const float *a, size_t a_i, size_t a_p,
                     const float *b, size_t ldb, int64_t m, int64_t n, int64_t k);
    void (*swiglu_back_gate)(float *o, const float *dy, const float *g, const float *u,
                             int64_t n);
};
void gs_cpu__helpers_avx2_fill(struct gs_cpu_helpers *h); /* x86-64 builds */
void gs_cpu__helpers_neon_fill(struct gs_cpu_helpers *h); /* aarch64 builds */
/* gemm_f32's AVX2 + FMA form and its AVX-512F form (gemm_f32_avx2.c, built twice): the
 * same bits, 8 or 16 floats a vector. The 512-bit one is the helper where the VNNI
 * kernels run (an AVX-512 CPU not capped below it by GS_CPU_ISA_MAX). */
void gs_cpu__gemm_f32_avx2(float *c, size_t ldc, const float *a, size_t a_i, size_t a_p,
                           const float *b, size_t ldb, int64_t m, int64_t n, int64_t k);
void gs_cpu__gemm_f32_avx512(float *c, size_t ldc, const float *a, size_t a_i, size_t a_p,
                             const float *b, size_t ldb, int64_t m, int64_t n, int64_t k);

/* The generic tiled product: dot over tokens in blocks, weight row by row. */
void gs_cpu__gemm_generic(gs_cpu_dot_fn dot, int64_t n, const void *w, size_t w_stride,
                          int n_rows, const void *x, size_t x_stride, int n_tok, float *out,
                          size_t out_stride);
/* Defines static gemm_NAME: the generic tiled product over dot_NAME. */
#define GS_CPU_GEMM_OF_DOT(name)                                                                   \
    static void gemm_##name(int64_t n, const void *w, size_t ws, int nr, const void *x,           \
                            size_t xs, int nt, float *out, size_t os)                              \
    {                                                                                              \
        gs_cpu__gemm_generic(dot_##name, n, w, ws, nr, x, xs, nt, out, os);                       \
    }

/* ---- vector helpers (best ISA, scalar fallback) -------------------------------- */

/* y[i] = f16(x[i]) and y[i] = f32(x[i]) for n values: KV cache rows. */
void gs_cpu_f32_to_f16(const float *x, uint16_t *y, int64_t n);
void gs_cpu_f16_to_f32(const uint16_t *x, float *y, int64_t n);
/* sum_i a[i] * b[i] over f32 / over an f32 row and an f16 row. */
float gs_cpu_dot_f32(const float *a, const float *b, int64_t n);
float gs_cpu_dot_f32_f16(const float *a, const uint16_t *b, int64_t n);

/* Attention over one KV page: rows at k/v, `stride` elements apart.
 * out[s] = sum_i q[i] * k[s][i] for s < n_rows (f16 or f32 rows). The f32
 * version of f16 rows converted exactly gives bit-identical sums (as do the
 * two axpys below), so a caller may convert a page once and reuse it. */
void gs_cpu_dots_f16(const float *q, const uint16_t *k, size_t stride, int n_rows, int64_t n,
                     float *out);
void gs_cpu_dots_f32(const float *q, const float *k, size_t stride, int n_rows, int64_t n,
                     float *out);
/* acc[i] += sum_s w[s] * v[s][i] for s < n_rows. */
void gs_cpu_axpys_f16(float *acc, const float *w, const uint16_t *v, size_t stride, int n_rows,
                      int64_t n);
void gs_cpu_axpys_f32(float *acc, const float *w, const float *v, size_t stride, int n_rows,
                      int64_t n);
/* Four queries at once (a block of a prompt's tokens, one head), each K or V
 * row read once for the four: out[j][s] = q[j] . k[s] for s < n_rows, and
 * acc[j][i] += sum_s w[j][s] * v[s][i]; rows are f16 (f16 true) or f32.
 * The value sums are bit-identical to four calls of the axpys above (each
 * column sums its rows in order); the scores may differ from gs_cpu_dots_*
 * in float summation order. */
void gs_cpu_dots4(const float *const q[4], const void *k, size_t stride, int n_rows, int64_t n,
                  float *const out[4], bool f16);
void gs_cpu_axpys4(float *const acc[4], const float *const w[4], const void *v, size_t stride,
                   int n_rows, int64_t n, bool f16);
/* x[i] = f32(f16(x[i])): rounding through half precision. */
void gs_cpu_round_f16(float *x, int64_t n);

/*
 * Attention over a q8_0 cache (engine/backend.h's row layout: q8_0 blocks,
 * element e of a row in block e / 32): n_rows rows `stride` bytes apart, each
 * read at its elements off .. off + n - 1 (one head's slice, which may begin
 * and end inside a block). With d the block's scale and x the element's int8
 * quant: out[s] = sum_i q[i] * d * x[s][off + i], and
 * acc[i] += sum_s w[s] * d * x[s][off + i]. Queries and weights stay F32; each
 * block's part is summed before its scale multiplies it. Rows are read whole
 * blocks at a time when off and n are multiples of 32.
 */
void gs_cpu_dots_q8_0(const float *q, const void *k, size_t stride, int n_rows, int64_t off,
                      int64_t n, float *out);
void gs_cpu_axpys_q8_0(float *acc, const float *w, const void *v, size_t stride, int n_rows,
                       int64_t off, int64_t n);
/* Four queries at once over the same rows (a block of a prompt's tokens), each
 * row's quants converted once for the four; scores and value sums are
 * bit-identical to four calls of the two above. */
void gs_cpu_dots4_q8_0(const float *const q[4], const void *k, size_t stride, int n_rows,
                       int64_t off, int64_t n, float *const out[4]);
void gs_cpu_axpys4_q8_0(float *const acc[4], const float *const w[4], const void *v, size_t stride,
                        int n_rows, int64_t off, int64_t n);

/*
 * Exponentials. The SIMD versions compute e^x with a degree-7 polynomial
 * after range reduction (within 2 ulp of expf; e^x for x below -87.3 is 0),
 * as llama.cpp's vector exp is not expf either: ref keeps libm's.
 */
/* o[i] = silu(g[i]) * u[i] = g[i] / (1 + e^-g[i]) * u[i]; u NULL: silu alone. */
void gs_cpu_swiglu(float *o, const float *g, const float *u, int64_t n);
/* o[i] = gelu(g[i]) * u[i], gelu in its tanh form as ggml's CPU backend computes it
 * (a table over f16 inputs: input and result rounded to f16, 0 below -10, g above 10),
 * which llama.cpp's outputs hold; u NULL: gelu alone. The SIMD versions use
 * 0.5 (1 + tanh y) = 1 / (1 + e^-2y): gelu is silu's formula with e^-2y for e^-x. */
void gs_cpu_geglu(float *o, const float *g, const float *u, int64_t n);
/* The swiglu op family's join: silu or gelu by act. */
static inline void gs_cpu_glu(int act_gelu, float *o, const float *g, const float *u, int64_t n)
{
    if (act_gelu)
        gs_cpu_geglu(o, g, u, n);
    else
        gs_cpu_swiglu(o, g, u, n);
}
/*
 * F32 product with a strided left operand (training's backward matmuls):
 * c[i * ldc + j] = sum_{p < k} a[i * a_i + p * a_p] * b[p * ldb + j] for i < m,
 * j < n; a_i = 1 reads a transposed. Each element is one chain of
 * multiply-adds over p = 0, 1, ... from zero (fused on the FMA ISAs), however
 * the rows and columns are tiled: a caller that shares rows or columns out
 * among threads gets the same bits on any thread count.
 */
void gs_cpu_gemm_f32(float *c, size_t ldc, const float *a, size_t a_i, size_t a_p, const float *b,
                     size_t ldb, int64_t m, int64_t n, int64_t k);
/* o[i] = dy[i] u[i] silu'(g[i]) = dy[i] u[i] s (1 + g[i] (1 - s)), s = 1 / (1 + e^-g[i]):
 * the gate's gradient through swiglu (training). */
void gs_cpu_swiglu_back_gate(float *o, const float *dy, const float *g, const float *u,
                             int64_t n);
/* x[i] *= scale; returns max x[i] (-inf for n 0). */
float gs_cpu_scale_max(float *x, float scale, int64_t n);
/* x[i] = e^(x[i] - m); returns the sum of the new x[i]. */
float gs_cpu_exp_sum(float *x, float m, int64_t n);

/* ---- worker pool ------------------------------------------------------------- */

struct gs_cpu_pool; /* opaque */

/* A task: do chunk `chunk` of n_chunks, on thread ith (for per-thread buffers). */
typedef void (*gs_cpu_task_fn)(void *arg, int chunk, int n_chunks, int ith);

/* Starts n_threads - 1 workers (the caller is the n_threads-th). n_threads 0:
 * the number of physical cores. GS_INVAL for a count outside 0..1024, GS_NOMEM. */
enum gs_status gs_cpu_pool_new(int n_threads, struct gs_cpu_pool **out, struct gs_err *err);
/* Stops and joins the workers; NULL is a no-op. */
void gs_cpu_pool_free(struct gs_cpu_pool *pool);
int gs_cpu_pool_threads(const struct gs_cpu_pool *pool);
/*
 * Runs fn(arg, c, n_chunks, ith) once for every chunk c in 0..n_chunks-1
 * (1 <= n_chunks <= 65535) and returns when all have returned. Threads claim
 * chunks as they come free, so a worker the OS has not scheduled delays
 * nothing: the caller takes its chunks.
 */
void gs_cpu_pool_run(struct gs_cpu_pool *pool, gs_cpu_task_fn fn, void *arg, int n_chunks);
/* Physical cores of this machine (logical CPUs when unknown), >= 1. */
int gs_cpu_physical_cores(void);

/* [first, last) of n items for thread ith of nth, in whole multiples of align. */
static inline void gs_cpu_split(int64_t n, int64_t align, int ith, int nth, int64_t *first,
                                int64_t *last)
{
    int64_t units = (n + align - 1) / align;
    int64_t per = (units + nth - 1) / nth;
    int64_t a = GS_MIN(units, per * ith) * align, b = GS_MIN(units, per * (ith + 1)) * align;
    *first = GS_MIN(a, n);
    *last = GS_MIN(b, n);
}

#endif /* GS_CPU_H */
