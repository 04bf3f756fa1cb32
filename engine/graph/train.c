/*
 * engine/graph/train.c - the training ops' builders and reverse-mode autodiff.
 *
 * The backward pass is built as more nodes of the same graph: for each
 * forward node, from the last to the first, the nodes of its vector-Jacobian
 * product are appended, reading the forward values they need (which liveness
 * then keeps alive until their last backward reader). Only nodes that depend
 * on a parameter get gradients, and a node read by several others has its
 * gradients summed with ADD. Nothing here computes: the backends run the
 * result like any other graph.
 */
#include "engine/graph/internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static bool is_act(const struct gs_node *n)
{
    return n->rows == GS_ROWS_TOKENS || n->rows == GS_ROWS_OUTPUTS;
}

static uint32_t failf(struct gs_graph *g, enum gs_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static uint32_t failf(struct gs_graph *g, enum gs_status code, const char *fmt, ...)
{
    char msg[GS_ERR_MSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return gs_graph__fail(g, code, msg);
}

static bool valid(const struct gs_graph *g, const uint32_t *ids, int n)
{
    if (g->err.code != GS_OK)
        return false;
    for (int i = 0; i < n; i++)
        if (ids[i] >= g->n_nodes)
            return false;
    return true;
}

/* Appends a node with fixed rows [ne0 x ne1]. */
static uint32_t push_fixed(struct gs_graph *g, enum gs_op op, int64_t ne0, int64_t ne1,
                           const uint32_t *src, uint32_t n_src, const union gs_node_params *p)
{
    uint32_t id = gs_graph__push(g, op, GS_ROWS_FIXED, ne0, src, n_src, p);
    if (id != GS_NODE_NONE)
        g->nodes[id].ne[1] = ne1;
    return id;
}

uint32_t gs_graph_attn_causal(struct gs_graph *g, uint32_t q, uint32_t k, uint32_t v,
                              const struct gs_attn_params *ap)
{
    uint32_t ids[3] = {q, k, v};
    if (!valid(g, ids, 3))
        return g->err.code ? GS_NODE_NONE : failf(g, GS_INVAL, "attn_causal: bad source");
    if (ap->n_head <= 0 || ap->n_head_kv <= 0 || ap->head_dim <= 0 || ap->n_head % ap->n_head_kv)
        return failf(g, GS_INVAL, "attn_causal: bad heads (%d heads, %d kv heads, head dim %d)",
                     ap->n_head, ap->n_head_kv, ap->head_dim);
    const int64_t q_dim = (int64_t)ap->n_head * ap->head_dim;
    const int64_t kv_dim = (int64_t)ap->n_head_kv * ap->head_dim;
    for (int i = 0; i < 3; i++) {
        const struct gs_node *s = &g->nodes[ids[i]];
        if (s->rows != GS_ROWS_TOKENS || s->ne[0] != (i ? kv_dim : q_dim))
            return failf(g, GS_INVAL, "attn_causal: %s must be [%lld x T]", i ? "k and v" : "q",
                         (long long)(i ? kv_dim : q_dim));
    }
    union gs_node_params p;
    memset(&p, 0, sizeof(p));
    p.attn = *ap;
    p.attn.layer = 0;
    p.attn.window = 0;
    return gs_graph__push(g, GS_OP_ATTN_CAUSAL, GS_ROWS_TOKENS, q_dim, ids, 3, &p);
}

uint32_t gs_graph_cross_entropy(struct gs_graph *g, uint32_t logits)
{
    if (!valid(g, &logits, 1))
        return g->err.code ? GS_NODE_NONE : failf(g, GS_INVAL, "cross_entropy: bad source");
    if (g->nodes[logits].rows != GS_ROWS_TOKENS)
        return failf(g, GS_INVAL, "cross_entropy: logits must have one row per token");
    return push_fixed(g, GS_OP_CROSS_ENTROPY, 1, 1, &logits, 1, NULL);
}

uint32_t gs_graph_out(struct gs_graph *g, uint32_t x, int32_t slot)
{
    if (!valid(g, &x, 1))
        return g->err.code ? GS_NODE_NONE : failf(g, GS_INVAL, "out: bad source");
    const struct gs_node *s = &g->nodes[x];
    if (s->rows == GS_ROWS_NONE || s->op == GS_OP_WEIGHT || slot < 0)
        return failf(g, GS_INVAL, "out: source must be a computed value and slot >= 0");
    union gs_node_params p;
    memset(&p, 0, sizeof(p));
    p.out_slot = slot;
    return gs_graph__push(g, GS_OP_OUT, GS_ROWS_NONE, 0, &x, 1, &p);
}

/* ---- autodiff ----------------------------------------------------------------- */

struct bwd {
    struct gs_graph *g;
    uint32_t *grad; /* [n_forward] gradient node of each forward node, or NONE */
    bool *needs;    /* [n_forward] depends on a parameter */
};

/* a + b for gradients of any rows (weights' gradients have fixed rows). */
static uint32_t sum(struct gs_graph *g, uint32_t a, uint32_t b)
{
    if (is_act(&g->nodes[a]))
        return gs_graph_add(g, a, b);
    uint32_t ids[2] = {a, b};
    return push_fixed(g, GS_OP_ADD, g->nodes[a].ne[0], g->nodes[a].ne[1], ids, 2, NULL);
}

static void accum(struct bwd *b, uint32_t src, uint32_t contrib)
{
    if (!b->needs[src] || contrib == GS_NODE_NONE)
        return;
    b->grad[src] = b->grad[src] == GS_NODE_NONE ? contrib : sum(b->g, b->grad[src], contrib);
}

/* A backward node with the rows of its first source. */
static uint32_t like(struct gs_graph *g, enum gs_op op, int64_t ne0, const uint32_t *src,
                     uint32_t n_src, const union gs_node_params *p)
{
    return gs_graph__push(g, op, g->nodes[src[0]].rows, ne0, src, n_src, p);
}

/* Appends the vector-Jacobian product of forward node id, whose gradient is dy. */
static void vjp(struct bwd *b, uint32_t id, uint32_t dy)
{
    struct gs_graph *g = b->g;
    const struct gs_node n = g->nodes[id]; /* a copy: appending may move the array */
    const uint32_t s0 = n.src[0], s1 = n.src[1];
    switch (n.op) {
    case GS_OP_EMBED:
        accum(b, s0, push_fixed(g, GS_OP_EMBED_BACK, n.ne[0], g->nodes[s0].ne[1], &dy, 1, NULL));
        break;
    case GS_OP_RMS_NORM: {
        uint32_t src[2] = {dy, s0};
        accum(b, s0, like(g, GS_OP_RMS_NORM_BACK, n.ne[0], src, 2, &n.p));
        break;
    }
    case GS_OP_MUL: {
        const struct gs_node *bn = &g->nodes[s1];
        const bool bcast = bn->rows == GS_ROWS_FIXED && bn->ne[1] == 1;
        if (b->needs[s0])
            accum(b, s0, gs_graph_mul(g, dy, s1));
        if (b->needs[s1]) {
            uint32_t src[2] = {dy, s0};
            accum(b, s1, bcast ? push_fixed(g, GS_OP_SUM_ROWS_MUL, n.ne[0], 1, src, 2, NULL)
                               : gs_graph_mul(g, dy, s0));
        }
        break;
    }
    case GS_OP_ADD: {
        const struct gs_node *bn = &g->nodes[s1];
        if (b->needs[s1] && bn->rows == GS_ROWS_FIXED && bn->ne[1] == 1 &&
            g->nodes[s0].rows != GS_ROWS_FIXED) {
            failf(g, GS_UNSUPPORTED, "backward: add node %u broadcasts a trainable row", id);
            return;
        }
        accum(b, s0, dy);
        accum(b, s1, dy);
        break;
    }
    case GS_OP_SCALE:
        accum(b, s0, gs_graph_scale(g, dy, n.p.scale));
        break;
    case GS_OP_MATMUL: {
        if (b->needs[s0] && g->nodes[s1].type != GS_TYPE_F32) { /* the kernels read F32 rows */
            failf(g, GS_UNSUPPORTED, "backward: matmul node %u multiplies by %s weight '%s'", id,
                  gs_type_name(g->nodes[s1].type), g->nodes[s1].name);
            return;
        }
        if (b->needs[s0]) {
            uint32_t src[2] = {dy, s1};
            accum(b, s0, like(g, GS_OP_MATMUL_BACK_X, g->nodes[s1].ne[0], src, 2, NULL));
        }
        if (b->needs[s1]) {
            uint32_t src[2] = {dy, s0};
            accum(b, s1, push_fixed(g, GS_OP_MATMUL_BACK_W, g->nodes[s1].ne[0],
                                    g->nodes[s1].ne[1], src, 2, NULL));
        }
        break;
    }
    case GS_OP_ROPE: {
        uint32_t src[2] = {dy, s1};
        accum(b, s0, like(g, GS_OP_ROPE_BACK, n.ne[0], src, n.n_src, &n.p));
        break;
    }
    case GS_OP_SWIGLU:
        if (n.p.glu_act != GS_GLU_SILU) {
            failf(g, GS_UNSUPPORTED, "backward: swiglu node %u has a gelu gate", id);
            return;
        }
        if (b->needs[s0]) {
            uint32_t src[3] = {dy, s0, s1};
            accum(b, s0, like(g, GS_OP_SWIGLU_BACK_GATE, n.ne[0], src, 3, NULL));
        }
        if (b->needs[s1])
            accum(b, s1, gs_graph_swiglu(g, s0, dy));
        break;
    case GS_OP_ATTN_CAUSAL: {
        static const enum gs_op back[3] = {GS_OP_ATTN_CAUSAL_BACK_Q, GS_OP_ATTN_CAUSAL_BACK_K,
                                           GS_OP_ATTN_CAUSAL_BACK_V};
        uint32_t src[4] = {dy, n.src[0], n.src[1], n.src[2]};
        for (int i = 0; i < 3; i++)
            if (b->needs[n.src[i]])
                accum(b, n.src[i], like(g, back[i], g->nodes[n.src[i]].ne[0], src, 4, &n.p));
        break;
    }
    case GS_OP_CROSS_ENTROPY:
        accum(b, s0, like(g, GS_OP_CROSS_ENTROPY_BACK, g->nodes[s0].ne[0], &s0, 1, NULL));
        break;
    default:
        failf(g, GS_UNSUPPORTED, "backward: node %u (%s) has no gradient", id,
              gs_op_info(n.op)->name);
        break;
    }
}

enum gs_status gs_graph_backward(struct gs_graph *g, uint32_t loss, const uint32_t *params,
                                 uint32_t n_params, struct gs_err *err)
{
    enum gs_status st = gs_graph_status(g, err);
    if (st)
        return st;
    if (loss >= g->n_nodes || g->nodes[loss].op != GS_OP_CROSS_ENTROPY)
        return gs_err_set(err, GS_INVAL, "backward: node %u is not a cross_entropy loss", loss);
    const uint32_t n_fwd = loss + 1;
    struct bwd b = {g, gs_alloc_array(n_fwd, sizeof(uint32_t)), gs_calloc(n_fwd, sizeof(bool))};
    if (!b.grad || !b.needs) {
        gs_free(b.grad);
        gs_free(b.needs);
        return gs_err_set(err, GS_NOMEM, "backward: out of memory");
    }
    for (uint32_t i = 0; i < n_fwd; i++)
        b.grad[i] = GS_NODE_NONE;
    st = GS_OK;
    for (uint32_t k = 0; k < n_params && !st; k++) {
        const uint32_t p = params[k];
        if (p >= n_fwd || g->nodes[p].op != GS_OP_WEIGHT || g->nodes[p].type != GS_TYPE_F32)
            st = gs_err_set(err, GS_INVAL, "backward: parameter %u (node %u) is not an f32 weight",
                            k, p);
        else if (b.needs[p])
            st = gs_err_set(err, GS_INVAL, "backward: node %u is listed twice", p);
        else
            b.needs[p] = true;
    }
    for (uint32_t i = 0; i < n_fwd && !st; i++)
        for (uint32_t j = 0; j < g->nodes[i].n_src; j++)
            if (g->nodes[i].src[j] != GS_NODE_NONE && b.needs[g->nodes[i].src[j]])
                b.needs[i] = true;
    if (!st) {
        /* The loss's own gradient is 1: cross_entropy_back computes d loss / d logits. */
        vjp(&b, loss, GS_NODE_NONE);
        for (uint32_t i = loss; i-- > 0 && g->err.code == GS_OK;)
            if (b.grad[i] != GS_NODE_NONE && g->nodes[i].op != GS_OP_WEIGHT)
                vjp(&b, i, b.grad[i]);
        gs_graph_name(g, gs_graph_out(g, loss, 0), "loss");
        for (uint32_t k = 0; k < n_params && g->err.code == GS_OK; k++) {
            const uint32_t p = params[k];
            if (b.grad[p] == GS_NODE_NONE) {
                failf(g, GS_INVAL, "backward: parameter '%s' does not reach the loss",
                      g->nodes[p].name);
                break;
            }
            gs_graph_name(g, b.grad[p], "grad.%s", g->nodes[p].name);
            gs_graph_out(g, b.grad[p], (int32_t)(1 + k));
        }
        st = gs_graph_status(g, err);
    }
    gs_free(b.grad);
    gs_free(b.needs);
    return st;
}
