/* engine/graph/passes/residual.c - folds a residual add into the matmul that
 * produces one of its operands: add(matmul(x, W), r) becomes
 * matmul_add(x, W, r), which adds r while writing each output instead of
 * reading the product back in a second pass. */
#include "engine/graph/internal.h"

static enum gs_status run(struct gs_graph *g, uint32_t *n_changed, struct gs_err *err)
{
    *n_changed = 0;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        struct gs_node *a = &g->nodes[i];
        if (a->op != GS_OP_ADD)
            continue;
        for (int side = 0; side < 2; side++) {
            uint32_t s = a->src[side], r = a->src[!side];
            const struct gs_node *mm = &g->nodes[s];
            const struct gs_node *res = &g->nodes[r];
            /* A broadcast operand (bias row) is not a residual. */
            if (mm->op != GS_OP_MATMUL || gs_graph_n_uses(g, s) != 1 || res->rows != a->rows)
                continue;
            a->op = GS_OP_MATMUL_ADD;
            a->n_src = 3;
            a->src[0] = mm->src[0];
            a->src[1] = mm->src[1];
            a->src[2] = r;
            (*n_changed)++;
            break;
        }
    }
    (void)err;
    return GS_OK;
}

const struct gs_pass gs_pass_residual = {
    .name = "residual",
    .help = "fold a residual add into the matmul that produces its other operand",
    .produces = GS_OP_MATMUL_ADD,
    .run = run,
};
