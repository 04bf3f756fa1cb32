/*
 * engine/backend/internal.h - what files of engine/backend share: the training
 * ops' kernels (train_ops.c), used by the ref and cpu backends, and the cpu
 * backend's step state, shared by how it compiles and runs steps (cpu.c) and
 * its op kernels (cpu_ops.c). No other module includes this.
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
#include "engine/compile.h"

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

/* ---- the cpu backend: cpu.c and cpu_ops.c ------------------------------------------ */

struct gs_cpu_pool; /* engine/cpu/cpu.h */

/* Steps of at most this many tokens quantize a matmul's input inside the
 * matmul task, each thread for itself: redoing a few rows costs far less than
 * the barrier a separate quantize task needs. */
#define LOCAL_QUANT_TOKENS 4

/* What one thread's private quantized rows hold; one cache line each. */
struct local_quant {
    uint64_t step;
    uint32_t node;
    enum gs_type type;
    char pad[48];
};

/*
 * Work memory. A backend instance runs one step at a time (engine/backend.h),
 * so all its plans share one set of buffers, each grown when a plan that
 * needs more is compiled: the process holds the largest bucket's scratch,
 * not the sum over every bucket it has seen.
 */
struct cpu_ctx {
    struct gs_cpu_pool *pool;
    int n_threads;
    uint64_t n_steps;          /* steps run, to date per-thread quantized rows */
    void *scratch;             /* activations: a plan's offsets index it */
    size_t scratch_bytes;
    uint8_t *xq;               /* [tokens][xq_stride] activations quantized for a matmul */
    size_t xq_bytes;
    uint8_t *xq_local;         /* [n_threads][LOCAL_QUANT_TOKENS][xq_stride] */
    size_t xq_local_bytes;
    struct local_quant *local; /* [n_threads] */
    float *thread_buf;         /* [n_threads][thread_floats] per-thread temporaries */
    size_t thread_buf_bytes;
    float *scores; /* [n_threads][ATTN_ROWS][scores_cap] attention scores */
    size_t scores_bytes;
    int64_t scores_cap;        /* positions per query row */
    uint32_t *attn_tiles;      /* [tokens + 1] first token of each attention tile */
    size_t attn_tiles_bytes;
    uint32_t *seq_first;       /* [tokens] first row of each row's sequence (training attention) */
    size_t seq_first_bytes;
    /* Causal attention's probabilities, kept by the forward op for the backward
     * ones (struct cpu_plan's probs_*): [slot][head][key rows of each query]. */
    float *probs;
    size_t probs_bytes;
    uint32_t *probs_row; /* [tokens] where query row t's keys start in a head's part */
    size_t probs_row_bytes;
    float *rope_cs;            /* [tokens][n_rot / 2][2] cos, sin of the step's rotations */
    size_t rope_cs_bytes;
    uint64_t rope_step;        /* rope_cs holds step rope_step's angles of rope_node's */
    const struct gs_node *rope_node;
};

/* The sizes a plan's graph needs from the work memory. */
struct cpu_plan {
    uint64_t xq_stride;  /* bytes per token row in xq */
    int64_t thread_floats;
    /* The matmul whose only reader is the LOGITS node, or GS_NODE_NONE: it
     * writes straight into the caller's logits (same [output][vocab]
     * layout), so vocab x outputs floats of scratch are never touched. */
    uint32_t logits_matmul;
    bool paged_attn; /* the graph reads the KV cache (ATTN): score rows are needed */
    bool causal_attn; /* the graph has ATTN_CAUSAL ops: seq_first is needed */
    /* A training plan (it has training ops): F32 matmuls run as the backward
     * ones do (gs_cpu_train_matmul), through GS_CPU_TRAIN_PANEL x K floats per
     * thread. */
    bool train;
    /* The ATTN_CAUSAL nodes whose q, k, v backward nodes also read: each has a
     * slot of probs_slot floats in cpu_ctx.probs, where its forward run leaves
     * every query's softmax row so that the backward runs read them instead of
     * computing them again (the same bits). A step whose rows need more than a
     * slot computes them again. */
    uint32_t n_probs;
    uint32_t (*probs_src)[3]; /* [n_probs] the forward node's q, k, v */
    uint64_t probs_slot;
    /* Tokens per attention tile (cpu_ops.c): ATTN_ROWS / (query heads a unit
     * takes at most), a multiple of ATTN_BLOCK. */
    int attn_tile;
};

/* One step in flight. The fields below io are per op. */
struct cpu_run {
    const struct gs_plan *plan;
    const struct gs_graph *g;
    const struct gs_step_io *io;
    const struct cpu_plan *cp;
    struct cpu_ctx *ctx;       /* the work memory */
    uint32_t xq_node;          /* node whose rows are in xq, GS_NODE_NONE when none */
    enum gs_type xq_type;
    uint64_t step;             /* this step's number (cpu_ctx.n_steps) */
    uint32_t n_attn_tiles;     /* tiles of the step's tokens for attention (attn_tiles) */
    uint64_t probs_rows;       /* key rows over every query of the step (0: probs unused) */
    const struct gs_node *n;   /* the op being run */
    float *out;
};

/* Attention (cpu_ops.c) works on units of one tile of a sequence's
 * consecutive tokens and the query heads of one kv head: each K and V row is
 * read once for the unit's ATTN_ROWS or fewer query rows. The four-query
 * kernels take a block of ATTN_BLOCK tokens of one head at a time; a unit
 * holds at most ATTN_HEADS query heads, and the score rows (cpu.c) are
 * sized for ATTN_ROWS queries. */
#define ATTN_BLOCK 4
#define ATTN_HEADS 4
#define ATTN_ROWS  16
/* Floats of one matmul_swiglu slice's gate (and of its up) products in a
 * thread's buffer (cpu_ops.c, where the slices are explained). */
#define FFN_SLICE_FLOATS 16384

/* Node r->n at r->out, chunk c of nc, on thread ith (per-thread buffers). */
typedef void (*cpu_kernel_fn)(struct cpu_run *r, int c, int nc, int ith);

/* One row per op, NULL where the cpu backend has no kernel; WEIGHT has none
 * and never appears in a plan's order. */
extern const cpu_kernel_fn gs_be__cpu_kernels[GS_OP_COUNT];

/* Node id's value in the work memory (its plan offset). */
static inline float *cpu_value(const struct cpu_run *r, uint32_t id)
{
    return (float *)((char *)r->ctx->scratch + r->plan->offset[id]);
}

/* The kernels the run loop calls by name: a matmul as a member of a group of
 * matmuls, and the quantize task that fills xq for the matmuls after it. */
void gs_be__cpu_matmul(struct cpu_run *r, int c, int nc, int ith);
void gs_be__cpu_quantize_input(struct cpu_run *r, int c, int nc, int ith);
/* Cuts the step's tokens into attention tiles (ctx->attn_tiles), once a step. */
void gs_be__cpu_attn_tiles(struct cpu_run *r);
/* Whether ropes a and b of one graph turn by the same angles; fills the step's
 * cos/sin table for rope n unless it already holds n's angles. */
bool gs_be__cpu_same_rotation(const struct gs_node *a, const struct gs_node *b);
void gs_be__cpu_rope_prepare(struct cpu_run *r, const struct gs_node *n);

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
/* row[t] = the sum of t' - first[t'] + 1 over t' < t: where query t's
 * probabilities start in a head's part of a probs slot; returns the sum over
 * every row (a head's part). */
uint64_t gs_cpu_train_probs_rows(const struct gs_step_io *io, const uint32_t *first, uint32_t *row);
/* Where gs_cpu_train_run keeps (ATTN_CAUSAL) or finds (its backward ops) a
 * node's softmax rows: NULL to compute them where needed. */
struct gs_cpu_train_probs {
    float *p;            /* [n_head][rows] */
    const uint32_t *row; /* gs_cpu_train_probs_rows's */
    uint64_t rows;
};
/* Output rows per panel of gs_cpu_train_matmul. */
#define GS_CPU_TRAIN_PANEL 16
/* A training plan's F32 matmul, output rows [r0, r1) of out [T][N] =
 * x [T][K] . W^T (W: N rows of K), through wt [GS_CPU_TRAIN_PANEL * K]. */
void gs_cpu_train_matmul(const float *x, const float *w, int64_t K, int64_t N, int64_t T,
                         int64_t r0, int64_t r1, float *out, float *wt);
/* Units [u0, u1) of a (gs_train_units) for an op gs_cpu_train_own has. */
void gs_cpu_train_run(const struct gs_train_args *a, const uint32_t *seq_first,
                      const struct gs_cpu_train_probs *probs, int64_t u0, int64_t u1);

#endif
