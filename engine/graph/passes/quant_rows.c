/* engine/graph/passes/quant_rows.c - rms_norm_quant and swiglu_quant: an
 * rms_norm_mul or swiglu whose every reader is a matmul on weights of one dot
 * partner (q8_0 for q4_0..q8_0, q8_K for the K-quants) writes its rows in that
 * block type. The float rows are never stored, read back and quantized in a
 * step of their own, and the rows take a quarter of the memory. */
#include "engine/graph/internal.h"

/* No reader yet / readers that disagree or cannot take quantized rows. */
#define NO_READER GS_TYPE_COUNT
#define MIXED     (GS_TYPE_COUNT + 1)

/* The block type a matmul needs its input in, or MIXED when its weight
 * multiplies with float rows. */
static int input_type(const struct gs_graph *g, const struct gs_node *mm)
{
    const struct gs_node *w = &g->nodes[mm->src[1]];
    const struct gs_type_traits *wt = gs_type_traits(w->type);
    if (w->op != GS_OP_WEIGHT || !wt || !wt->quantized)
        return MIXED;
    const struct gs_type_traits *vt = gs_type_traits(wt->vec_dot_type);
    if (!vt || !vt->quantized || !vt->from_f32 || w->ne[0] % vt->block_size)
        return MIXED;
    return (int)wt->vec_dot_type;
}

/* Turns every `from` node whose readers all want one block type into `to`
 * of that type. */
static enum gs_status fuse(struct gs_graph *g, enum gs_op from, enum gs_op to,
                           uint32_t *n_changed, struct gs_err *err)
{
    *n_changed = 0;
    int *need = gs_alloc_array(g->n_nodes ? g->n_nodes : 1, sizeof(*need));
    if (!need)
        return gs_err_set(err, GS_NOMEM, "%s: out of memory", gs_op_info(to)->name);
    for (uint32_t i = 0; i < g->n_nodes; i++)
        need[i] = NO_READER;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const struct gs_node *n = &g->nodes[i];
        const bool matmul = gs_op_is_matmul(n->op);
        for (uint32_t k = 0; k < n->n_src; k++) {
            const uint32_t s = n->src[k];
            const int t = matmul && k == 0 ? input_type(g, n) : MIXED;
            need[s] = need[s] == NO_READER || need[s] == t ? t : MIXED;
        }
    }
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        struct gs_node *n = &g->nodes[i];
        if (n->op != from || n->type != GS_TYPE_F32 || need[i] == NO_READER || need[i] == MIXED)
            continue;
        n->op = to;
        n->type = (enum gs_type)need[i];
        (*n_changed)++;
    }
    gs_free(need);
    return GS_OK;
}

static enum gs_status run_rms_norm(struct gs_graph *g, uint32_t *n_changed, struct gs_err *err)
{
    return fuse(g, GS_OP_RMS_NORM_MUL, GS_OP_RMS_NORM_QUANT, n_changed, err);
}

static enum gs_status run_swiglu(struct gs_graph *g, uint32_t *n_changed, struct gs_err *err)
{
    return fuse(g, GS_OP_SWIGLU, GS_OP_SWIGLU_QUANT, n_changed, err);
}

const struct gs_pass gs_pass_rms_norm_quant = {
    .name = "rms_norm_quant",
    .help = "write rms_norm_mul rows straight in the block type of the matmuls that read them",
    .produces = GS_OP_RMS_NORM_QUANT,
    .produces_type = GS_TYPE_Q8_0,
    .run = run_rms_norm,
};

const struct gs_pass gs_pass_swiglu_quant = {
    .name = "swiglu_quant",
    .help = "write swiglu rows straight in the block type of the matmul that reads them",
    .produces = GS_OP_SWIGLU_QUANT,
    .produces_type = GS_TYPE_Q8_0,
    .run = run_swiglu,
};
