/* engine/backend/runner.c - see engine/runner.h. */
#include "engine/runner.h"

enum gs_status gs_runner_new(struct gs_graph *g, const struct gs_runner_cfg *cfg,
                             struct gs_runner **out, struct gs_err *err)
{
    *out = NULL;
    struct gs_runner *r = gs_calloc(1, sizeof(*r));
    if (!r)
        return gs_err_set(err, GS_NOMEM, "runner: out of memory");
    struct gs_be_cfg bc = {.n_threads = cfg ? cfg->n_threads : 0};
    enum gs_status st = gs_be_init(&r->be, cfg && cfg->backend ? cfg->backend : "ref", &bc, err);
    if (st) {
        gs_free(r);
        return st;
    }
    if (!(cfg && cfg->no_passes)) {
        const struct gs_pass **sel = gs_alloc_array(gs_passes_all_len, sizeof(*sel));
        if (!sel)
            st = gs_err_set(err, GS_NOMEM, "runner: out of memory");
        size_t n = sel ? gs_be_select_passes(&r->be, gs_passes_all, gs_passes_all_len, sel,
                                             gs_passes_all_len)
                       : 0;
        if (!st)
            st = gs_graph_run_passes(g, sel, n, err);
        r->n_passes = (uint32_t)n;
        gs_free(sel);
    }
    if (!st)
        st = gs_be_check_graph(&r->be, g, err);
    if (st) {
        gs_be_deinit(&r->be);
        gs_free(r);
        return st;
    }
    r->graph = g;
    gs_plan_cache_init(&r->plans, &r->be, g);
    *out = r;
    return GS_OK;
}

void gs_runner_free(struct gs_runner *r)
{
    if (!r)
        return;
    gs_plan_cache_deinit(&r->plans);
    gs_be_deinit(&r->be);
    gs_free(r);
}

enum gs_status gs_runner_step(struct gs_runner *r, const struct gs_step_io *io,
                              struct gs_err *err)
{
    struct gs_plan *plan;
    enum gs_status st = gs_plan_cache_get(&r->plans, io->n_tokens, &plan, err);
    return st ? st : gs_be_run(&r->be, plan, io, err);
}

enum gs_status gs_runner_prepare(struct gs_runner *r, uint32_t max_tokens, struct gs_err *err)
{
    return gs_plan_cache_prepare(&r->plans, max_tokens, err);
}
