/* engine/compile/plan.c - execution order and liveness-based scratch layout. */
#include "engine/compile.h"

#include <string.h>

int64_t gs_plan_rows(const struct gs_node *n, const struct gs_shape *s)
{
    switch (n->rows) {
    case GS_ROWS_FIXED:
        return n->ne[1];
    case GS_ROWS_TOKENS:
    case GS_ROWS_OUTPUTS: /* worst case: every token wants logits */
        return s->n_tokens;
    case GS_ROWS_NONE:
        break;
    }
    return 0;
}

uint32_t gs_plan_bucket(uint32_t n_tokens)
{
    uint32_t b = 1;
    while (b < n_tokens && b < (1u << (GS_PLAN_CACHE_MAX - 1)))
        b <<= 1;
    return b;
}

void gs_plan_free(struct gs_plan *p)
{
    if (!p)
        return;
    gs_free(p->order);
    gs_free(p->offset);
    gs_free(p->bytes);
    gs_free(p);
}

/* A live range of the scratch buffer. */
struct block {
    uint64_t off, size;
};

/* First fit: the lowest offset where size bytes fit between live blocks
 * (kept sorted by offset). */
static uint64_t first_fit(const struct block *live, uint32_t n_live, uint64_t size)
{
    uint64_t at = 0;
    for (uint32_t i = 0; i < n_live; i++) {
        if (live[i].off >= at + size)
            return at;
        uint64_t end = live[i].off + live[i].size;
        if (end > at)
            at = end;
    }
    return at;
}

static void insert_block(struct block *live, uint32_t *n_live, struct block b)
{
    uint32_t i = *n_live;
    while (i > 0 && live[i - 1].off > b.off) {
        live[i] = live[i - 1];
        i--;
    }
    live[i] = b;
    (*n_live)++;
}

static void remove_block(struct block *live, uint32_t *n_live, uint64_t off)
{
    for (uint32_t i = 0; i < *n_live; i++) {
        if (live[i].off != off)
            continue;
        memmove(&live[i], &live[i + 1], (*n_live - i - 1) * sizeof(*live));
        (*n_live)--;
        return;
    }
}

/* Whether node nd (at step k) may write over its src[0]: an in-place op
 * (GS_OPF_INPLACE), the last reader of a same-sized value that no other
 * source of nd names. */
static bool takes_over(const struct gs_graph *g, const struct gs_plan *p,
                       const uint32_t *last_use, uint32_t k, const struct gs_node *nd)
{
    if (!(gs_op_info(nd->op)->flags & GS_OPF_INPLACE) || nd->n_src == 0)
        return false;
    const uint32_t src = nd->src[0];
    if (p->offset[src] == GS_PLAN_NO_OFFSET || last_use[src] != k ||
        p->bytes[src] != p->bytes[nd - g->nodes])
        return false;
    for (uint32_t j = 1; j < nd->n_src; j++)
        if (nd->src[j] == src)
            return false;
    return true;
}

enum gs_status gs_plan_layout(const struct gs_graph *g, const struct gs_shape *s,
                              struct gs_plan **out, struct gs_err *err)
{
    *out = NULL;
    if (s->n_tokens == 0)
        return gs_err_set(err, GS_INVAL, "compile: shape bucket of 0 tokens");
    enum gs_status st = gs_graph_verify(g, err);
    if (st)
        return st;
    uint32_t n = g->n_nodes ? g->n_nodes : 1;
    struct gs_plan *p = gs_calloc(1, sizeof(*p));
    uint32_t *last_use = gs_calloc(n, sizeof(*last_use));
    struct block *live = gs_calloc(n, sizeof(*live));
    if (!p || !last_use || !live)
        goto out_nomem;
    p->graph = g;
    p->shape = *s;
    p->order = gs_calloc(n, sizeof(*p->order));
    p->offset = gs_calloc(n, sizeof(*p->offset));
    p->bytes = gs_calloc(n, sizeof(*p->bytes));
    if (!p->order || !p->offset || !p->bytes)
        goto out_nomem;

    /* Graph order is already topological; weights need no step. */
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        p->offset[i] = GS_PLAN_NO_OFFSET;
        if (g->nodes[i].op != GS_OP_WEIGHT)
            p->order[p->n_order++] = i;
    }
    for (uint32_t k = 0; k < p->n_order; k++) {
        const struct gs_node *nd = &g->nodes[p->order[k]];
        for (uint32_t j = 0; j < nd->n_src; j++)
            last_use[nd->src[j]] = k;
    }

    uint32_t n_live = 0;
    uint64_t peak = 0;
    for (uint32_t k = 0; k < p->n_order; k++) {
        uint32_t id = p->order[k], reused = GS_NODE_NONE;
        const struct gs_node *nd = &g->nodes[id];
        /* LOGITS and OUT write straight into the caller's buffer; KV_STORE into the cache. */
        if (nd->rows != GS_ROWS_NONE) { /* a value: activations, gradients of weights */
            uint64_t row, bytes;
            if (gs_type_row_bytes(nd->type, nd->ne[0], &row) ||
                gs_mul_overflow(row, (uint64_t)gs_plan_rows(nd, s), &bytes))
                goto out_too_big;
            bytes = (bytes + GS_PLAN_ALIGN - 1) / GS_PLAN_ALIGN * GS_PLAN_ALIGN;
            p->bytes[id] = bytes;
            p->naive_bytes += bytes;
            if (takes_over(g, p, last_use, k, nd)) {
                /* The source's block becomes this node's: no new bytes, and it
                 * is released when this node's last reader has run. */
                p->offset[id] = p->offset[nd->src[0]];
                reused = nd->src[0];
                if (last_use[id] <= k)
                    remove_block(live, &n_live, p->offset[id]);
            } else {
                /* An output is allocated before its inputs are released, so a
                 * kernel never reads a range it is writing. */
                struct block b = {first_fit(live, n_live, bytes), bytes};
                insert_block(live, &n_live, b);
                p->offset[id] = b.off;
                if (b.off + bytes > peak)
                    peak = b.off + bytes;
                if (last_use[id] <= k) /* never read: free at once */
                    remove_block(live, &n_live, b.off);
            }
        }
        for (uint32_t j = 0; j < nd->n_src; j++) {
            uint32_t src = nd->src[j];
            if (src == reused)
                continue;
            /* A node reading the same source twice frees it once. */
            bool seen = false;
            for (uint32_t q = 0; q < j; q++)
                seen |= nd->src[q] == src;
            if (!seen && last_use[src] == k && p->offset[src] != GS_PLAN_NO_OFFSET)
                remove_block(live, &n_live, p->offset[src]);
        }
    }
    p->scratch_bytes = peak;
    gs_free(last_use);
    gs_free(live);
    *out = p;
    return GS_OK;

out_too_big:
    gs_free(last_use);
    gs_free(live);
    gs_plan_free(p);
    return gs_err_set(err, GS_INVAL, "compile: bucket of %u tokens overflows scratch size",
                      s->n_tokens);
out_nomem:
    gs_free(last_use);
    gs_free(live);
    gs_plan_free(p);
    return gs_err_set(err, GS_NOMEM, "compile: out of memory");
}

/* ---- cache ------------------------------------------------------------------ */

void gs_plan_cache_init(struct gs_plan_cache *c, struct gs_be *be, const struct gs_graph *g)
{
    memset(c, 0, sizeof(*c));
    c->be = be;
    c->graph = g;
}

void gs_plan_cache_deinit(struct gs_plan_cache *c)
{
    for (int i = 0; i < GS_PLAN_CACHE_MAX; i++) {
        gs_be_plan_free(c->be, c->plans[i]);
        c->plans[i] = NULL;
    }
}

enum gs_status gs_plan_cache_get(struct gs_plan_cache *c, uint32_t n_tokens, struct gs_plan **out,
                                 struct gs_err *err)
{
    *out = NULL;
    if (n_tokens == 0 || n_tokens > (1u << (GS_PLAN_CACHE_MAX - 1)))
        return gs_err_set(err, GS_INVAL, "compile: step of %u tokens", n_tokens);
    uint32_t bucket = gs_plan_bucket(n_tokens);
    int slot = __builtin_ctz(bucket);
    if (!c->plans[slot]) {
        struct gs_shape s = {.n_tokens = bucket};
        enum gs_status st = gs_be_compile(c->be, c->graph, &s, &c->plans[slot], err);
        if (st)
            return st;
        c->n_compiles++;
    }
    *out = c->plans[slot];
    return GS_OK;
}

enum gs_status gs_plan_cache_prepare(struct gs_plan_cache *c, uint32_t max_tokens,
                                     struct gs_err *err)
{
    if (max_tokens == 0 || max_tokens > (1u << (GS_PLAN_CACHE_MAX - 1)))
        return gs_err_set(err, GS_INVAL, "compile: preparing steps of up to %u tokens", max_tokens);
    struct gs_plan *p;
    for (uint32_t n = 1; n < gs_plan_bucket(max_tokens); n *= 2) {
        enum gs_status st = gs_plan_cache_get(c, n, &p, err);
        if (st)
            return st;
    }
    return gs_plan_cache_get(c, max_tokens, &p, err);
}

uint64_t gs_plan_cache_scratch_bytes(const struct gs_plan_cache *c)
{
    uint64_t total = 0;
    for (int i = 0; i < GS_PLAN_CACHE_MAX; i++)
        if (c->plans[i])
            total += c->plans[i]->scratch_bytes;
    return total;
}
