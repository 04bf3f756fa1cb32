/* engine/graph/passes/rms_norm_mul.c - fuses mul(rms_norm(x), w) into
 * rms_norm_mul(x, w): one pass over the row instead of two. */
#include "engine/graph/internal.h"

static enum gs_status run(struct gs_graph *g, uint32_t *n_changed, struct gs_err *err)
{
    *n_changed = 0;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        struct gs_node *m = &g->nodes[i];
        if (m->op != GS_OP_MUL)
            continue;
        const struct gs_node *norm = &g->nodes[m->src[0]];
        /* The norm must have no other reader: it disappears with the fusion. */
        if (norm->op != GS_OP_RMS_NORM || gs_graph_n_uses(g, m->src[0]) != 1)
            continue;
        m->op = GS_OP_RMS_NORM_MUL;
        m->p.eps = norm->p.eps;
        m->src[0] = norm->src[0];
        (*n_changed)++;
    }
    (void)err;
    return GS_OK;
}

const struct gs_pass gs_pass_rms_norm_mul = {
    .name = "rms_norm_mul",
    .help = "fuse rms_norm followed by a multiply by the norm weight",
    .produces = GS_OP_RMS_NORM_MUL,
    .run = run,
};
