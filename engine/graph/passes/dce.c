/* engine/graph/passes/dce.c - dead-node elimination: drops every node that no
 * root (KV_STORE, LOGITS) depends on. */
#include "engine/graph/internal.h"

static enum gs_status run(struct gs_graph *g, uint32_t *n_changed, struct gs_err *err)
{
    *n_changed = 0;
    if (g->n_nodes == 0)
        return GS_OK;
    bool *live = gs_calloc(g->n_nodes, sizeof(*live));
    if (!live)
        return gs_err_set(err, GS_NOMEM, "pass dce: out of memory");
    /* Sources precede their readers, so one backward sweep marks everything live. */
    for (uint32_t i = g->n_nodes; i-- > 0;) {
        const struct gs_node *n = &g->nodes[i];
        if (gs_op_info(n->op)->flags & GS_OPF_ROOT)
            live[i] = true;
        if (!live[i])
            continue;
        for (uint32_t j = 0; j < n->n_src; j++)
            live[n->src[j]] = true;
    }
    for (uint32_t i = 0; i < g->n_nodes; i++)
        live[i] = !live[i];
    *n_changed = gs_graph_compact(g, live);
    gs_free(live);
    return GS_OK;
}

const struct gs_pass gs_pass_dce = {
    .name = "dce",
    .help = "remove nodes that no kv_store or logits node depends on",
    .produces = GS_OP_COUNT,
    .run = run,
};
