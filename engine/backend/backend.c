/* engine/backend/backend.c - the checks shared by backends (graph, step I/O, rows) and
 * pass selection; the registry is registry.c, so that the backends calling these checks
 * and the table naming the backends are not one cycle. */
#include "engine/backend.h"
#include "engine/quant/blocks.h"

#include <string.h>

size_t gs_be_select_passes(const struct gs_be *be, const struct gs_pass *const *in, size_t n_in,
                           const struct gs_pass **out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < n_in && n < cap; i++) {
        struct gs_node probe;
        memset(&probe, 0, sizeof(probe));
        probe.op = in[i]->produces;
        probe.type = in[i]->produces_type;
        if (in[i]->produces == GS_OP_COUNT || gs_be_supports(be, &probe))
            out[n++] = in[i];
    }
    return n;
}

enum gs_status gs_be_check_graph(const struct gs_be *be, const struct gs_graph *g,
                                 struct gs_err *err)
{
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const struct gs_node *n = &g->nodes[i];
        if (!gs_be_supports(be, n))
            return gs_err_set(err, GS_UNSUPPORTED, "backend %s cannot run node %u (%s, %s) '%s'",
                              be->ops->name, i, gs_op_info(n->op)->name, gs_type_name(n->type),
                              n->name);
    }
    return GS_OK;
}

/* ---- step validation -------------------------------------------------------- */

uint64_t gs_kv_row_bytes(enum gs_type type, uint32_t kv_dim)
{
    switch (type) {
    case GS_TYPE_F32:
        return (uint64_t)kv_dim * 4;
    case GS_TYPE_F16:
        return (uint64_t)kv_dim * 2;
    case GS_TYPE_Q8_0:
        return ((uint64_t)kv_dim + GS_QK - 1) / GS_QK * GS_Q8_0_BYTES;
    default:
        return 0;
    }
}

static enum gs_status check_kv(const struct gs_step_io *io, const struct gs_graph *g,
                               struct gs_err *err)
{
    const struct gs_kv_view *kv = io->kv;
    bool needs_kv = false;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const struct gs_node *n = &g->nodes[i];
        if (n->op != GS_OP_KV_STORE)
            continue;
        needs_kv = true;
        if (!kv || !kv->base)
            return gs_err_set(err, GS_INVAL, "step: kv: the graph has attention but no cache");
        if ((uint32_t)n->p.attn.layer >= kv->n_layer)
            return gs_err_set(err, GS_INVAL, "step: kv: cache has %u layers, graph needs %d",
                              kv->n_layer, n->p.attn.layer + 1);
        if ((int64_t)kv->kv_dim != (int64_t)n->p.attn.n_head_kv * n->p.attn.head_dim)
            return gs_err_set(err, GS_INVAL, "step: kv: cache rows of %u, layer %d needs %d",
                              kv->kv_dim, n->p.attn.layer, n->p.attn.n_head_kv * n->p.attn.head_dim);
    }
    if (!needs_kv)
        return GS_OK;
    const uint64_t row = gs_kv_row_bytes(kv->type, kv->kv_dim);
    if (!row || kv->page_tokens == 0)
        return gs_err_set(err, GS_INVAL, "step: kv: type %s / %u tokens per page unsupported",
                          gs_type_name(kv->type), kv->page_tokens);
    if (kv->page_bytes < (uint64_t)kv->n_layer * 2 * kv->page_tokens * row)
        return gs_err_set(err, GS_INVAL, "step: kv: page_bytes %llu too small",
                          (unsigned long long)kv->page_bytes);
    for (uint32_t t = 0; t < io->n_tokens; t++) {
        const struct gs_seq_pages *sp = &io->seqs[io->seq[t]];
        uint32_t page = (uint32_t)io->pos[t] / kv->page_tokens;
        if (page >= sp->n_pages || !sp->pages)
            return gs_err_set(err, GS_INVAL,
                              "step: token %u: position %d is past sequence %u's %u pages", t,
                              io->pos[t], io->seq[t], sp->n_pages);
        for (uint32_t i = 0; i <= page; i++)
            if (sp->pages[i] >= kv->n_pages)
                return gs_err_set(err, GS_INVAL, "step: sequence %u: page %u is %u, pool has %u",
                                  io->seq[t], i, sp->pages[i], kv->n_pages);
    }
    return GS_OK;
}

/* What training graphs read and write: targets for the loss, buffers for OUT. */
static enum gs_status check_train(const struct gs_step_io *io, const struct gs_graph *g,
                                  struct gs_err *err)
{
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const struct gs_node *n = &g->nodes[i];
        if (n->op == GS_OP_CROSS_ENTROPY || n->op == GS_OP_CROSS_ENTROPY_BACK) {
            if (!io->targets)
                return gs_err_set(err, GS_INVAL, "step: node %u (%s) needs targets", i,
                                  gs_op_info(n->op)->name);
            const int64_t n_vocab = g->nodes[n->src[0]].ne[0];
            for (uint32_t t = 0; t < io->n_tokens; t++)
                if (io->targets[t] < 0 || io->targets[t] >= n_vocab)
                    return gs_err_set(err, GS_INVAL, "step: token %u: target %d outside 0..%lld",
                                      t, io->targets[t], (long long)n_vocab - 1);
        }
        if (n->op == GS_OP_OUT &&
            ((uint32_t)n->p.out_slot >= io->n_outs || !io->outs || !io->outs[n->p.out_slot]))
            return gs_err_set(err, GS_INVAL, "step: out slot %d has no buffer (%u given)",
                              n->p.out_slot, io->n_outs);
    }
    return GS_OK;
}

enum gs_status gs_step_io_check(const struct gs_step_io *io, const struct gs_graph *g,
                                const struct gs_shape *shape, struct gs_err *err)
{
    if (io->n_tokens == 0 || io->n_tokens > shape->n_tokens)
        return gs_err_set(err, GS_INVAL, "step: n_tokens %u outside the plan's bucket 1..%u",
                          io->n_tokens, shape->n_tokens);
    enum gs_status st;
    if (!io->tokens || !io->pos || !io->seq || !io->seqs)
        return gs_err_set(err, GS_INVAL, "step: tokens, pos, seq and seqs are required");
    int64_t n_rows_embed = INT64_MAX;
    for (uint32_t i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == GS_OP_EMBED)
            n_rows_embed = GS_MIN(n_rows_embed, g->nodes[g->nodes[i].src[0]].ne[1]);
    for (uint32_t t = 0; t < io->n_tokens; t++) {
        if (io->tokens[t] < 0 || io->tokens[t] >= n_rows_embed)
            return gs_err_set(err, GS_INVAL, "step: token %u: id %d outside the vocabulary", t,
                              io->tokens[t]);
        if (io->pos[t] < 0)
            return gs_err_set(err, GS_INVAL, "step: token %u: negative position %d", t,
                              io->pos[t]);
        if (io->seq[t] >= io->n_seqs)
            return gs_err_set(err, GS_INVAL, "step: token %u: sequence %u of %u", t, io->seq[t],
                              io->n_seqs);
    }
    if (io->n_outputs > io->n_tokens || (io->n_outputs && (!io->out_rows || !io->logits)))
        return gs_err_set(err, GS_INVAL, "step: %u outputs for %u tokens (or no buffers)",
                          io->n_outputs, io->n_tokens);
    for (uint32_t o = 0; o < io->n_outputs; o++)
        if (io->out_rows[o] >= io->n_tokens || (o && io->out_rows[o] <= io->out_rows[o - 1]))
            return gs_err_set(err, GS_INVAL, "step: out_rows[%u] = %u is out of order or range",
                              o, io->out_rows[o]);
    st = check_train(io, g, err);
    if (st)
        return st;
    return check_kv(io, g, err);
}

int64_t gs_step_rows(const struct gs_node *n, const struct gs_step_io *io)
{
    switch (n->rows) {
    case GS_ROWS_TOKENS:
        return io->n_tokens;
    case GS_ROWS_OUTPUTS:
        return io->n_outputs;
    case GS_ROWS_FIXED:
        return n->ne[1];
    case GS_ROWS_NONE:
        break;
    }
    return 0;
}
