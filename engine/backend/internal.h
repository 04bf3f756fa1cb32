/*
 * engine/backend/internal.h - the training ops' kernels (train_ops.c), shared
 * by the ref and cpu backends. No other module includes this.
 *
 * A training node's work is cut into independent units (rows, columns, or
 * sequence-and-head pairs, whichever lets each unit write output elements no
 * other unit writes), so a backend runs units [u0, u1) on any thread and the
 * result does not depend on how they were shared out. Every kernel is F32
 * with a fixed order of summation: the same step gives the same bits on any
 * thread count.
 */
#ifndef GS_BACKEND_INTERNAL_H
#define GS_BACKEND_INTERNAL_H

#include "engine/backend.h"

/* Scratch a thread needs for a step of n tokens: attention's score rows. */
#define GS_TRAIN_WORK_FLOATS(n) (2 * (int64_t)(n))

/* The ops train_ops.c runs. */
bool gs_train_op(enum gs_op op);

struct gs_train_args {
    const struct gs_node *n;
    const struct gs_step_io *io;
    const float *src[GS_GRAPH_MAX_SRC]; /* each source's rows (a weight's F32 data) */
    int64_t src_rows[GS_GRAPH_MAX_SRC]; /* their rows in this step */
    int64_t src_ne0[GS_GRAPH_MAX_SRC];  /* their row lengths */
    float *out;  /* the node's value; NULL for OUT */
    float *work; /* [GS_TRAIN_WORK_FLOATS(n_tokens)] the running thread's scratch */
};

/* The number of work units of a. */
int64_t gs_train_units(const struct gs_train_args *a);
/* Computes units [u0, u1) of a. */
void gs_train_run(const struct gs_train_args *a, int64_t u0, int64_t u1);

/*
 * The cpu backend's own forms of the hot training ops (cpu_train.c): the
 * backward matmuls, causal attention and its backward, cross-entropy and its
 * backward, swiglu's gate gradient, on engine/cpu's SIMD helpers. The same
 * units as gs_train_units and a fixed order per output element, so
 * thread-count independent as above; their bits differ from train_ops.c's.
 */
/* Whether cpu_train.c has op. */
bool gs_cpu_train_own(enum gs_op op);
/* Attention's dk and dv go as matrix products for a sequence of L rows when
 * L (L + head_dim) floats fit this (256 KiB per thread): up to 224 rows at head_dim 64. */
#define GS_CPU_TRAIN_MATRIX_FLOATS 65536
/* Scratch a thread needs: attention's two score rows and its matrices, or a
 * cross-entropy row of `widest` logits. */
#define GS_CPU_TRAIN_WORK_FLOATS(n, widest)                                                        \
    GS_MAX(2 * (int64_t)(n) + GS_CPU_TRAIN_MATRIX_FLOATS, (int64_t)(widest))
/* first[t] = the first row of row t's sequence in the step (once a step, for
 * attention: a query's keys are rows first[t] .. t). */
void gs_cpu_train_seq_first(const struct gs_step_io *io, uint32_t *first);
/* Output rows per panel of gs_cpu_train_matmul. */
#define GS_CPU_TRAIN_PANEL 16
/* A training plan's F32 matmul, output rows [r0, r1) of out [T][N] =
 * x [T][K] . W^T (W: N rows of K), through wt [GS_CPU_TRAIN_PANEL * K]. */
void gs_cpu_train_matmul(const float *x, const float *w, int64_t K, int64_t N, int64_t T,
                         int64_t r0, int64_t r1, float *out, float *wt);
/* Units [u0, u1) of a (gs_train_units) for an op gs_cpu_train_own has. */
void gs_cpu_train_run(const struct gs_train_args *a, const uint32_t *seq_first, int64_t u0,
                      int64_t u1);

#endif
