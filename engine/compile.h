/*
 * engine/compile.h - compiling a graph for a shape bucket into a plan, and the
 * plan cache.
 *
 * A plan fixes the execution order and assigns every activation a range of one
 * scratch buffer by liveness: a value's range is reused once its last reader
 * has run. The buffer is sized for the worst case of the bucket (every row
 * present), so a step of any size up to the bucket runs in it without
 * allocating. Backends build their plans with gs_plan_layout() and attach
 * their own state in be_data.
 *
 * Shape buckets: a step of n tokens uses the plan of the smallest power of two
 * >= n. gs_plan_cache_get() compiles a bucket the first time it is asked for
 * and returns the same plan afterwards: a step never plans a shape it has seen.
 *
 * Ownership: plans belong to the backend that compiled them; the cache owns
 * the plans it holds and frees them in gs_plan_cache_free. The graph must
 * outlive every plan compiled from it. Threads: one thread at a time.
 */
#ifndef GS_COMPILE_H
#define GS_COMPILE_H

#include "engine/backend.h"
#include "engine/graph.h"

#define GS_PLAN_ALIGN     64 /* bytes: every scratch range starts at a multiple */
#define GS_PLAN_NO_OFFSET UINT64_MAX
#define GS_PLAN_CACHE_MAX 24 /* buckets 1, 2, 4, ... 2^23 tokens */

struct gs_plan {
    const struct gs_graph *graph; /* borrowed */
    struct gs_shape shape;        /* the bucket */
    uint32_t n_order;
    uint32_t *order;        /* [n_order] node ids in execution order (no weights) */
    uint64_t *offset;       /* [graph->n_nodes] scratch offset, GS_PLAN_NO_OFFSET if none */
    uint64_t *bytes;        /* [graph->n_nodes] bytes reserved for the node's value */
    uint64_t scratch_bytes; /* peak of the liveness assignment */
    uint64_t naive_bytes;   /* what one buffer per value would take (for reports) */
    void *be_data;          /* backend-private (scratch memory, work buffers) */
};

/*
 * Plans order and scratch for g at shape s. *out is allocated here and freed
 * with gs_plan_free (the backend frees be_data first).
 */
enum gs_status gs_plan_layout(const struct gs_graph *g, const struct gs_shape *s,
                              struct gs_plan **out, struct gs_err *err);
void gs_plan_free(struct gs_plan *p);

/* The number of rows a node has in a plan for shape s (0 for no value). */
int64_t gs_plan_rows(const struct gs_node *n, const struct gs_shape *s);

/* The bucket for a step of n tokens: the smallest power of two >= n (n >= 1). */
uint32_t gs_plan_bucket(uint32_t n_tokens);

/* ---- cache ------------------------------------------------------------------ */

struct gs_plan_cache {
    struct gs_be *be;                         /* borrowed */
    const struct gs_graph *graph;             /* borrowed */
    struct gs_plan *plans[GS_PLAN_CACHE_MAX]; /* by log2 of the bucket */
    uint32_t n_compiles; /* how many plans were compiled (for tests and reports) */
};

void gs_plan_cache_init(struct gs_plan_cache *c, struct gs_be *be, const struct gs_graph *g);
void gs_plan_cache_deinit(struct gs_plan_cache *c);

/* The plan for a step of n_tokens (compiling its bucket once). Borrowed until deinit. */
enum gs_status gs_plan_cache_get(struct gs_plan_cache *c, uint32_t n_tokens, struct gs_plan **out,
                                 struct gs_err *err);

/*
 * Compiles every bucket a step of 1 to max_tokens tokens can use (1, 2, 4, ...
 * up to max_tokens' bucket) that is not compiled yet, so that no such step
 * compiles later. A long-lived holder of a cache uses it to make its plans'
 * memory when it opens, not in between the allocations of later traffic.
 * GS_INVAL for 0 or more than a bucket can hold; a failed compile leaves the
 * buckets before it compiled.
 */
enum gs_status gs_plan_cache_prepare(struct gs_plan_cache *c, uint32_t max_tokens,
                                     struct gs_err *err);

/* Scratch bytes of all cached plans together. */
uint64_t gs_plan_cache_scratch_bytes(const struct gs_plan_cache *c);

#endif /* GS_COMPILE_H */
