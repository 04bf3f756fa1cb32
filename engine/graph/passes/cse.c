/* engine/graph/passes/cse.c - common-subexpression elimination: a node that
 * computes the same op with the same parameters from the same sources as an
 * earlier node is replaced by it. Roots are never merged (each has an effect).
 * Leaves the duplicates dead; dce removes them. */
#include "engine/graph/internal.h"

static enum gs_status run(struct gs_graph *g, uint32_t *n_changed, struct gs_err *err)
{
    *n_changed = 0;
    /* Quadratic, but graphs are a few thousand nodes and this runs once per model.
     * Earlier replacements rewrite later sources first, so chains collapse in one sweep. */
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const struct gs_node *n = &g->nodes[i];
        if (gs_op_info(n->op)->flags & GS_OPF_ROOT)
            continue;
        for (uint32_t j = 0; j < i; j++) {
            if (!gs_graph__same_value(&g->nodes[j], n))
                continue;
            if (gs_graph_n_uses(g, i) > 0) {
                gs_graph_replace_uses(g, i, j);
                (*n_changed)++;
            }
            break;
        }
    }
    (void)err;
    return GS_OK;
}

const struct gs_pass gs_pass_cse = {
    .name = "cse",
    .help = "reuse the first of several nodes that compute the same value",
    .produces = GS_OP_COUNT,
    .run = run,
};
