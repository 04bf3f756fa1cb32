/* engine/graph/passes/swiglu.c - fuses mul(silu(a), b) into swiglu(a, b), and
 * mul(gelu(a), b) into swiglu(a, b) with its activation gelu (GeGLU). */
#include "engine/graph/internal.h"

#include <string.h>

static enum gs_status run(struct gs_graph *g, uint32_t *n_changed, struct gs_err *err)
{
    *n_changed = 0;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        struct gs_node *m = &g->nodes[i];
        if (m->op != GS_OP_MUL)
            continue;
        /* act(a) * b and b * act(a) are the same product. */
        for (int side = 0; side < 2; side++) {
            uint32_t s = m->src[side], other = m->src[!side];
            const struct gs_node *act = &g->nodes[s];
            const struct gs_node *o = &g->nodes[other];
            if ((act->op != GS_OP_SILU && act->op != GS_OP_GELU) || gs_graph_n_uses(g, s) != 1 ||
                o->rows != m->rows)
                continue;
            m->op = GS_OP_SWIGLU;
            memset(&m->p, 0, sizeof(m->p));
            m->p.glu_act = act->op == GS_OP_GELU ? GS_GLU_GELU : GS_GLU_SILU;
            m->src[0] = act->src[0];
            m->src[1] = other;
            (*n_changed)++;
            break;
        }
    }
    (void)err;
    return GS_OK;
}

const struct gs_pass gs_pass_swiglu = {
    .name = "swiglu",
    .help = "fuse silu(gate) * up (or gelu(gate) * up) into one swiglu node",
    .produces = GS_OP_SWIGLU,
    .run = run,
};
