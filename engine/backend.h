/*
 * engine/backend.h - the backend interface: a versioned table of function
 * pointers per backend, the step input/output struct, and the inline wrappers
 * callers use (gs_be_run(...), never be->ops->run).
 *
 * One step evaluates the graph for the tokens of MANY sequences at once
 * (continuous batching): each token carries its sequence, its position and,
 * through the sequence, a page table into the KV cache. Attention reads only
 * the pages of the token's own sequence, up to the token's position. Matmuls
 * read each weight once per step for all tokens. Tokens of one sequence must
 * appear in the step in increasing position order, and a sequence's
 * positions 0..pos must already be in the cache or in this step.
 *
 * Ownership: a struct gs_be is caller-allocated (gs_be_init/gs_be_deinit); its
 * ctx belongs to the backend. Plans come from gs_be_compile (or the plan cache
 * in engine/compile.h) and are freed with gs_be_plan_free. The step struct and
 * everything it points at are borrowed for the duration of gs_be_run.
 *
 * Threads: a backend instance and its plans are used by one thread at a time
 * (the engine thread). Backends may run worker threads internally.
 *
 * Backends: "ref", plain scalar C over F32 with weights dequantized row by row
 * as they are read. It is the oracle every faster backend is compared with.
 */
#ifndef GS_BACKEND_H
#define GS_BACKEND_H

#include "engine/base.h"
#include "engine/graph.h"
#include "engine/quant.h"

#define GS_BE_API_VERSION 1

/* The compile-time shape of a step: the bucket a plan is reserved for. */
struct gs_shape {
    uint32_t n_tokens; /* most tokens a step of this plan may carry (>= 1) */
};

/*
 * Where K and V live. The KV cache is an array of pages of page_bytes each;
 * page p holds, for each layer l, page_tokens rows of K then page_tokens rows
 * of V, each row kv_dim elements of type stored in row = gs_kv_row_bytes(type,
 * kv_dim) bytes:
 *   K(p, l, slot) at base + p*page_bytes + ((2*l + 0)*page_tokens + slot)*row
 *   V(p, l, slot) at base + p*page_bytes + ((2*l + 1)*page_tokens + slot)*row
 * An F32 or F16 row is kv_dim plain elements. A Q8_0 row is kv_dim / 32 q8_0
 * blocks (engine/quant/blocks.h: an f16 scale, 32 int8 quants), the last one
 * zero-padded when kv_dim is not a multiple of 32; element i of the row is in
 * block i / 32, so one head's slice may start and end inside a block.
 * kvcache/ owns the memory; the caller copies its layout here.
 */
struct gs_kv_view {
    void *base;
    enum gs_type type;    /* GS_TYPE_F32, GS_TYPE_F16 or GS_TYPE_Q8_0 */
    uint32_t n_pages;     /* pages at base */
    uint32_t page_tokens; /* tokens per page */
    uint32_t n_layer;
    uint32_t kv_dim;      /* n_head_kv * head_dim */
    uint64_t page_bytes;  /* n_layer * 2 * page_tokens * row bytes */
};

/* Bytes of one token's K (or V) row of one layer: kv_dim elements of type in the
 * layout above. 0 for a type the cache cannot hold, or kv_dim 0. */
uint64_t gs_kv_row_bytes(enum gs_type type, uint32_t kv_dim);

/* One sequence's page table: position pos lives in page pages[pos / page_tokens]. */
struct gs_seq_pages {
    const uint32_t *pages;
    uint32_t n_pages;
};

/* The input and output of one step. */
struct gs_step_io {
    uint32_t n_tokens;
    const int32_t *tokens;   /* [n_tokens] token ids */
    const int32_t *pos;      /* [n_tokens] positions within each token's sequence */
    const uint32_t *seq;     /* [n_tokens] index into seqs */
    uint32_t n_seqs;
    const struct gs_seq_pages *seqs; /* [n_seqs] page tables */
    const struct gs_kv_view *kv;
    uint32_t n_outputs;
    const uint32_t *out_rows; /* [n_outputs] token rows that want logits, strictly increasing */
    float *logits;            /* OUT: [n_outputs][n_vocab] */
    /* OUT, optional: [n_tokens][n_embd] every token row's final hidden state (the
     * output norm's result, before the projection) when the graph has a HIDDEN
     * root; NULL: not copied. */
    float *hidden;
    /* Training graphs. targets: [n_tokens] the next token of each row, read by
     * CROSS_ENTROPY; outs: [n_outs] buffers the OUT roots write (slot i gets
     * the node's rows x ne0 floats). */
    const int32_t *targets;
    float *const *outs;
    uint32_t n_outs;
};

/*
 * Validates io against a graph's needs (sizes, token ids below n_vocab, page
 * tables covering every position, KV layout matching the graph's attention).
 * Backends call it at the top of run; GS_INVAL names the bad field.
 */
/* The rows a node has in this step: weights their own, token rows n_tokens,
 * output rows n_outputs, 0 for nodes without a value. (gs_plan_rows in
 * engine/compile.h is the worst case of a bucket, for planning.) */
int64_t gs_step_rows(const struct gs_node *n, const struct gs_step_io *io);

enum gs_status gs_step_io_check(const struct gs_step_io *io, const struct gs_graph *g,
                                const struct gs_shape *shape, struct gs_err *err);

struct gs_be_cfg {
    int n_threads; /* 0: backend default */
};

struct gs_be;
struct gs_plan;

struct gs_be_ops {
    int api_version;  /* GS_BE_API_VERSION */
    const char *name; /* "ref", "cpu", ... */
    /* Methods below are valid for version 1. */
    enum gs_status (*open)(struct gs_be *be, const struct gs_be_cfg *cfg, struct gs_err *err);
    void (*close)(struct gs_be *be);
    /* Whether the backend can execute this node (op and weight type). */
    bool (*supports)(const struct gs_be *be, const struct gs_node *node);
    enum gs_status (*compile)(struct gs_be *be, const struct gs_graph *g, const struct gs_shape *s,
                              struct gs_plan **out, struct gs_err *err);
    enum gs_status (*run)(struct gs_be *be, struct gs_plan *p, const struct gs_step_io *io,
                          struct gs_err *err);
    void (*plan_free)(struct gs_be *be, struct gs_plan *p);
    void (*sync)(struct gs_be *be); /* optional: NULL if synchronous */
    /* Optional (NULL: the caller runs the chunks in order): runs fn(arg, c) for every
     * chunk c in 0..n_chunks-1 on the backend's threads and returns when all have
     * returned. For work beside a plan that the backend's threads should share
     * (training's optimiser); chunks may run in any order and on any thread. */
    void (*parallel)(struct gs_be *be, void (*fn)(void *arg, int chunk), void *arg, int n_chunks);
};

struct gs_be {
    const struct gs_be_ops *ops;
    void *ctx; /* backend-private */
};

/* Every backend, X(id, ID), in the order of config's enum gs_cfg_backend: its
 * ops are gs_be_<id>_ops and its name is "<id>". The one list: the registry
 * gs_be_find searches (registry.c), --backend's choices and enum
 * gs_cfg_backend (config/) derive from it. */
#define GS_BE_LIST(X)                                                                              \
    X(ref, REF) /* engine/backend/ref.c */                                                         \
    X(cpu, CPU) /* engine/backend/cpu.c */

#define GS_BE_OPS_DECL(id, ID) extern const struct gs_be_ops gs_be_##id##_ops;
GS_BE_LIST(GS_BE_OPS_DECL)
#undef GS_BE_OPS_DECL

/* Finds a backend by name ("ref"); NULL when unknown. */
const struct gs_be_ops *gs_be_find(const char *name);

/* The kernels backend `name` runs on this machine, for receipts and logs: the cpu
 * backend's instruction set ("avx2", "avx512-vnni", "neon", ...), "reference" for ref. */
const char *gs_be_kernel_variant(const char *name);

/* Opens backend `name` into be. GS_NOTFOUND for an unknown name. */
enum gs_status gs_be_init(struct gs_be *be, const char *name, const struct gs_be_cfg *cfg,
                          struct gs_err *err);
/* Closes be; a zeroed or already closed be is a no-op. */
void gs_be_deinit(struct gs_be *be);

/* Keeps only the passes whose product the backend supports; returns the count
 * written to out (capacity cap). */
size_t gs_be_select_passes(const struct gs_be *be, const struct gs_pass *const *in, size_t n_in,
                           const struct gs_pass **out, size_t cap);

/* Checks every node of g against supports(); GS_UNSUPPORTED names the first
 * node the backend cannot run. */
enum gs_status gs_be_check_graph(const struct gs_be *be, const struct gs_graph *g,
                                 struct gs_err *err);

static inline bool gs_be_supports(const struct gs_be *be, const struct gs_node *node)
{
    return be->ops->supports(be, node);
}

static inline enum gs_status gs_be_compile(struct gs_be *be, const struct gs_graph *g,
                                           const struct gs_shape *s, struct gs_plan **out,
                                           struct gs_err *err)
{
    return be->ops->compile(be, g, s, out, err);
}

/* Evaluates one step. Logits of io->out_rows land in io->logits. A step
 * allocates nothing. Errors leave the KV cache rows of this step undefined.
 * The calling thread needs GS_THREAD_STACK_BYTES (engine/base.h) of stack. */
static inline enum gs_status gs_be_run(struct gs_be *be, struct gs_plan *p,
                                       const struct gs_step_io *io, struct gs_err *err)
{
    return be->ops->run(be, p, io, err);
}

static inline void gs_be_plan_free(struct gs_be *be, struct gs_plan *p)
{
    if (p)
        be->ops->plan_free(be, p);
}

/* fn(arg, c) for every chunk c in 0..n_chunks-1 (1 <= n_chunks <= 65535), on the
 * backend's threads where it has them, else in order on the caller; returns when all
 * have returned. A chunk's result must not depend on which thread runs it. */
static inline void gs_be_parallel(struct gs_be *be, void (*fn)(void *arg, int chunk), void *arg,
                                  int n_chunks)
{
    if (be->ops->parallel) {
        be->ops->parallel(be, fn, arg, n_chunks);
        return;
    }
    for (int c = 0; c < n_chunks; c++)
        fn(arg, c);
}

static inline void gs_be_sync(struct gs_be *be)
{
    if (be->ops->sync)
        be->ops->sync(be);
}

#endif /* GS_BACKEND_H */
