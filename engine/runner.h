/*
 * engine/runner.h - one engine ready to run steps: a backend, the rewrite
 * passes it supports run over a model's graph, the graph checked against the
 * backend, and the plan cache. The serving scheduler, its validation
 * reference and its draft model, `graphserve bench`, `graphserve validate` and the test rigs all
 * open their engine through it; nothing else opens a backend by hand.
 *
 * The KV cache is not the runner's: a step's gs_step_io carries the pages it
 * reads and writes (kvcache/kvcache.h makes them, above this layer), so one
 * runner serves many pools, as the validation reference does with one pool
 * per job.
 *
 * Passes rewrite the graph in place, so a graph belongs to the first runner
 * opened on it with passes; a second runner on the same graph (the `ref`
 * reference of a `cpu` server) opens with no_passes and runs the graph as the
 * first rewrote it, after checking that it supports every node.
 *
 * Ownership: a runner borrows its graph, which must outlive it. Threads: one
 * thread steps a runner at a time.
 */
#ifndef GS_RUNNER_H
#define GS_RUNNER_H

#include "engine/backend.h"
#include "engine/compile.h"
#include "engine/graph.h"

struct gs_runner_cfg {
    const char *backend; /* "cpu", "ref"; NULL: "ref" */
    int n_threads;       /* 0: the backend's default */
    bool no_passes;      /* run the graph as it is (already rewritten, or for a test) */
};

struct gs_runner {
    struct gs_be be;
    struct gs_plan_cache plans;
    const struct gs_graph *graph; /* borrowed */
    uint32_t n_passes;            /* passes this runner ran over the graph */
};

/* Opens a runner on g. GS_NOTFOUND for an unknown backend, GS_UNSUPPORTED when
 * the backend cannot run a node of the (rewritten) graph, naming it. *out is
 * freed with gs_runner_free. */
enum gs_status gs_runner_new(struct gs_graph *g, const struct gs_runner_cfg *cfg,
                             struct gs_runner **out, struct gs_err *err);
void gs_runner_free(struct gs_runner *r); /* NULL is a no-op */

/* Runs one step of io->n_tokens tokens with the plan of its bucket (compiled
 * the first time a bucket is seen). */
enum gs_status gs_runner_step(struct gs_runner *r, const struct gs_step_io *io,
                              struct gs_err *err);

/* Compiles the plans of every step size up to max_tokens now
 * (gs_plan_cache_prepare), so that no later step of that size compiles. */
enum gs_status gs_runner_prepare(struct gs_runner *r, uint32_t max_tokens, struct gs_err *err);

#endif /* GS_RUNNER_H */
