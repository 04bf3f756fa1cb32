/* engine/graph/passes/matmul_swiglu.c - fuses a feed-forward's gate and up
 * matmuls and the SwiGLU that joins them, swiglu(x @ Wg, x @ Wu) (F32 or
 * quantized rows), into one matmul_swiglu node. A backend then computes a
 * slice of gate and up rows and joins them while they are in cache: the two
 * [n_ff x T] products are never stored, and the join is not a pass of its own. */
#include "engine/graph/internal.h"

/* Whether node id is a plain matmul read only by the swiglu being fused. */
static bool sole_matmul(const struct gs_graph *g, uint32_t id)
{
    return g->nodes[id].op == GS_OP_MATMUL && gs_graph_n_uses(g, id) == 1;
}

static enum gs_status run(struct gs_graph *g, uint32_t *n_changed, struct gs_err *err)
{
    /* Dead nodes that earlier fusions left (the silu the swiglu pass took in)
     * still read the matmuls: drop them first, so that uses are real readers. */
    uint32_t removed = 0;
    enum gs_status st = gs_pass_dce.run(g, &removed, err);
    *n_changed = removed;
    if (st)
        return st;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        struct gs_node *m = &g->nodes[i];
        if (m->op != GS_OP_SWIGLU && m->op != GS_OP_SWIGLU_QUANT)
            continue;
        const uint32_t gate = m->src[0], up = m->src[1];
        if (!sole_matmul(g, gate) || !sole_matmul(g, up))
            continue;
        const struct gs_node *a = &g->nodes[gate], *b = &g->nodes[up];
        const struct gs_node *wa = &g->nodes[a->src[1]], *wb = &g->nodes[b->src[1]];
        if (a->src[0] != b->src[0] || wa->type != wb->type || wa->ne[0] != wb->ne[0] ||
            wa->ne[1] != wb->ne[1])
            continue;
        m->op = GS_OP_MATMUL_SWIGLU;
        m->src[0] = a->src[0];
        m->src[1] = a->src[1];
        m->src[2] = b->src[1];
        m->n_src = 3;
        (*n_changed)++;
    }
    return GS_OK;
}

const struct gs_pass gs_pass_matmul_swiglu = {
    .name = "matmul_swiglu",
    .help = "fuse a feed-forward's gate and up matmuls and their swiglu into one node",
    .produces = GS_OP_MATMUL_SWIGLU,
    .run = run,
};
