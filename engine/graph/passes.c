/* engine/graph/passes.c - the pass registry and the pass runner. */
#include "engine/graph/internal.h"

#include <string.h>

const struct gs_pass *const gs_passes_all[] = {
    &gs_pass_rms_norm_mul,  &gs_pass_swiglu,        &gs_pass_residual, &gs_pass_rms_norm_quant,
    &gs_pass_swiglu_quant, &gs_pass_matmul_swiglu, &gs_pass_cse,      &gs_pass_dce,
};
const size_t gs_passes_all_len = GS_ARRAY_LEN(gs_passes_all);

const struct gs_pass *gs_pass_find(const char *name)
{
    for (size_t i = 0; i < gs_passes_all_len; i++)
        if (!strcmp(gs_passes_all[i]->name, name))
            return gs_passes_all[i];
    return NULL;
}

enum gs_status gs_graph_run_passes(struct gs_graph *g, const struct gs_pass *const *passes,
                                   size_t n_passes, struct gs_err *err)
{
    enum gs_status st = gs_graph_status(g, err);
    if (st)
        return st;
    for (size_t i = 0; i < n_passes; i++) {
        uint32_t n_changed = 0;
        st = passes[i]->run(g, &n_changed, err);
        if (!st)
            st = gs_graph_verify(g, err);
        if (st)
            return gs_err_prefix(err, "pass %s", passes[i]->name);
    }
    return GS_OK;
}
