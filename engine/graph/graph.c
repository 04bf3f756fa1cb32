/* engine/graph/graph.c - graph storage, the builder and editing helpers. */
#include "engine/graph/internal.h"

#include <stdio.h>
#include <math.h>
#include <string.h>

static const struct gs_op_info op_table[GS_OP_COUNT] = {
#define GS_OP_ROW(name, text, n_src, flags) [GS_OP_##name] = {text, n_src, flags},
    GS_OP_MAP(GS_OP_ROW)
#undef GS_OP_ROW
};

const struct gs_op_info *gs_op_info(enum gs_op op)
{
    return (unsigned)op < GS_OP_COUNT ? &op_table[op] : NULL;
}

/* ---- arena ------------------------------------------------------------------ */

/* A chain of chunks; nothing is freed before the whole graph. */
struct gs_graph_arena {
    struct gs_graph_arena *next;
    size_t used, cap;
    char data[];
};

static void *arena_alloc(struct gs_graph *g, size_t n)
{
    struct gs_graph_arena *a = g->arena;
    if (!a || a->cap - a->used < n) {
        size_t cap = n > 4096 ? n : 4096;
        struct gs_graph_arena *c = gs_malloc(sizeof(*c) + cap);
        if (!c)
            return NULL;
        c->next = a;
        c->used = 0;
        c->cap = cap;
        g->arena = c;
        a = c;
    }
    void *p = a->data + a->used;
    a->used += n;
    return p;
}

const char *gs_graph__strdup(struct gs_graph *g, const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = arena_alloc(g, n);
    if (p)
        memcpy(p, s, n);
    return p;
}

/* ---- lifetime --------------------------------------------------------------- */

enum gs_status gs_graph_new(struct gs_graph **out, struct gs_err *err)
{
    *out = NULL;
    struct gs_graph *g = gs_calloc(1, sizeof(*g));
    if (!g)
        return gs_err_set(err, GS_NOMEM, "graph: out of memory");
    *out = g;
    return GS_OK;
}

void gs_graph_free(struct gs_graph *g)
{
    if (!g)
        return;
    struct gs_graph_arena *a = g->arena;
    while (a) {
        struct gs_graph_arena *next = a->next;
        gs_free(a);
        a = next;
    }
    gs_free(g->nodes);
    gs_free(g);
}

enum gs_status gs_graph_clone(const struct gs_graph *g, struct gs_graph **out, struct gs_err *err)
{
    struct gs_graph *c;
    enum gs_status st = gs_graph_new(&c, err);
    if (st)
        return st;
    c->nodes = gs_alloc_array(g->n_nodes ? g->n_nodes : 1, sizeof(*c->nodes));
    if (!c->nodes)
        goto out_nomem;
    c->cap_nodes = g->n_nodes ? g->n_nodes : 1;
    c->n_nodes = g->n_nodes;
    c->n_vocab = g->n_vocab;
    c->err = g->err;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        c->nodes[i] = g->nodes[i];
        c->nodes[i].name = gs_graph__strdup(c, g->nodes[i].name);
        if (!c->nodes[i].name)
            goto out_nomem;
    }
    *out = c;
    return GS_OK;
out_nomem:
    gs_graph_free(c);
    *out = NULL;
    return gs_err_set(err, GS_NOMEM, "graph: out of memory while copying");
}

enum gs_status gs_graph_status(const struct gs_graph *g, struct gs_err *err)
{
    if (g->err.code != GS_OK && err)
        *err = g->err;
    return g->err.code;
}

/* ---- builder ---------------------------------------------------------------- */

/* Records the first builder error and returns GS_NODE_NONE. */
static uint32_t fail(struct gs_graph *g, enum gs_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static uint32_t fail(struct gs_graph *g, enum gs_status code, const char *fmt, ...)
{
    if (g->err.code == GS_OK) {
        va_list ap;
        va_start(ap, fmt);
        char msg[GS_ERR_MSG_LEN];
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        gs_err_set(&g->err, code, "graph: %s", msg);
    }
    return GS_NODE_NONE;
}

static const struct gs_node *node_or_null(const struct gs_graph *g, uint32_t id)
{
    return id < g->n_nodes ? &g->nodes[id] : NULL;
}

static bool is_act(const struct gs_node *n)
{
    return n->rows == GS_ROWS_TOKENS || n->rows == GS_ROWS_OUTPUTS;
}

static uint32_t push(struct gs_graph *g, enum gs_op op, enum gs_rows rows, int64_t ne0,
                     const uint32_t *src, uint32_t n_src, const union gs_node_params *p)
{
    if (g->n_nodes == g->cap_nodes) {
        uint32_t cap = g->cap_nodes ? g->cap_nodes * 2 : 64;
        struct gs_node *nodes = gs_realloc(g->nodes, (size_t)cap * sizeof(*nodes));
        if (!nodes)
            return fail(g, GS_NOMEM, "out of memory adding a node");
        g->nodes = nodes;
        g->cap_nodes = cap;
    }
    struct gs_node *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof(*n));
    n->op = op;
    n->type = GS_TYPE_F32;
    n->rows = rows;
    n->ne[0] = ne0;
    n->n_src = n_src;
    for (uint32_t i = 0; i < GS_GRAPH_MAX_SRC; i++)
        n->src[i] = i < n_src ? src[i] : GS_NODE_NONE;
    if (p)
        n->p = *p;
    n->name = "";
    return g->n_nodes++;
}

uint32_t gs_graph__push(struct gs_graph *g, enum gs_op op, enum gs_rows rows, int64_t ne0,
                        const uint32_t *src, uint32_t n_src, const union gs_node_params *p)
{
    return g->err.code == GS_OK ? push(g, op, rows, ne0, src, n_src, p) : GS_NODE_NONE;
}

uint32_t gs_graph__fail(struct gs_graph *g, enum gs_status code, const char *msg)
{
    return fail(g, code, "%s", msg);
}

/* Looks up sources for a new node: NULL (and a sticky error) if any is missing. */
static bool get_srcs(struct gs_graph *g, const char *op, const uint32_t *ids, int n,
                     const struct gs_node **out)
{
    if (g->err.code != GS_OK)
        return false;
    for (int i = 0; i < n; i++) {
        out[i] = node_or_null(g, ids[i]);
        if (!out[i]) {
            fail(g, GS_INVAL, "%s: source %d is not a node", op, i);
            return false;
        }
    }
    return true;
}

uint32_t gs_graph_weight(struct gs_graph *g, const char *name, enum gs_type type, int64_t ne0,
                         int64_t ne1, const void *data)
{
    if (g->err.code != GS_OK)
        return GS_NODE_NONE;
    const struct gs_type_traits *tt = gs_type_traits(type);
    if (!tt)
        return fail(g, GS_INVAL, "weight '%s': unknown type %d", name, (int)type);
    if (ne0 <= 0 || ne1 <= 0 || !data)
        return fail(g, GS_INVAL, "weight '%s': empty shape or no data", name);
    uint32_t id = push(g, GS_OP_WEIGHT, GS_ROWS_FIXED, ne0, NULL, 0, NULL);
    if (id == GS_NODE_NONE)
        return id;
    g->nodes[id].type = type;
    g->nodes[id].ne[1] = ne1;
    g->nodes[id].data = data;
    return gs_graph_name(g, id, "%s", name);
}

uint32_t gs_graph_embed(struct gs_graph *g, uint32_t table)
{
    const struct gs_node *s[1];
    if (!get_srcs(g, "embed", &table, 1, s))
        return GS_NODE_NONE;
    if (s[0]->op != GS_OP_WEIGHT)
        return fail(g, GS_INVAL, "embed: the table must be a weight");
    return push(g, GS_OP_EMBED, GS_ROWS_TOKENS, s[0]->ne[0], &table, 1, NULL);
}

static uint32_t unary(struct gs_graph *g, enum gs_op op, uint32_t x, const union gs_node_params *p)
{
    const struct gs_node *s[1];
    if (!get_srcs(g, gs_op_info(op)->name, &x, 1, s))
        return GS_NODE_NONE;
    if (!is_act(s[0]))
        return fail(g, GS_INVAL, "%s: source must be an activation", gs_op_info(op)->name);
    return push(g, op, s[0]->rows, s[0]->ne[0], &x, 1, p);
}

uint32_t gs_graph_rms_norm(struct gs_graph *g, uint32_t x, float eps)
{
    union gs_node_params p;
    memset(&p, 0, sizeof(p));
    p.eps = eps;
    return unary(g, GS_OP_RMS_NORM, x, &p);
}

uint32_t gs_graph_silu(struct gs_graph *g, uint32_t x)
{
    return unary(g, GS_OP_SILU, x, NULL);
}

uint32_t gs_graph_gelu(struct gs_graph *g, uint32_t x)
{
    return unary(g, GS_OP_GELU, x, NULL);
}

uint32_t gs_graph_scale(struct gs_graph *g, uint32_t x, float scale)
{
    if (g->err.code == GS_OK && !isfinite(scale))
        return fail(g, GS_INVAL, "scale: %g is not finite", (double)scale);
    union gs_node_params p;
    memset(&p, 0, sizeof(p));
    p.scale = scale;
    return unary(g, GS_OP_SCALE, x, &p);
}

uint32_t gs_graph_softcap(struct gs_graph *g, uint32_t x, float softcap)
{
    if (g->err.code == GS_OK && !(softcap > 0 && isfinite(softcap)))
        return fail(g, GS_INVAL, "softcap: %g is not positive", (double)softcap);
    union gs_node_params p;
    memset(&p, 0, sizeof(p));
    p.softcap = softcap;
    return unary(g, GS_OP_SOFTCAP, x, &p);
}

uint32_t gs_graph_softmax(struct gs_graph *g, uint32_t x, const struct gs_softmax_params *sp)
{
    union gs_node_params p;
    memset(&p, 0, sizeof(p));
    p.softmax = *sp;
    return unary(g, GS_OP_SOFTMAX, x, &p);
}

/* An activation source of width ne0 (0: any), or a sticky error naming op. */
static bool act_src(struct gs_graph *g, const char *op, const struct gs_node *s, int64_t ne0,
                    enum gs_rows rows)
{
    if (!is_act(s))
        fail(g, GS_INVAL, "%s: sources must be activations", op);
    else if (ne0 && s->ne[0] != ne0)
        fail(g, GS_INVAL, "%s: a source has rows of %lld, not %lld", op, (long long)s->ne[0],
             (long long)ne0);
    else if (s->rows != rows)
        fail(g, GS_INVAL, "%s: sources differ in row count", op);
    return g->err.code == GS_OK;
}

uint32_t gs_graph_cols(struct gs_graph *g, uint32_t x, int64_t off, int64_t n)
{
    const struct gs_node *s[1];
    if (!get_srcs(g, "cols", &x, 1, s) || !act_src(g, "cols", s[0], 0, s[0]->rows))
        return GS_NODE_NONE;
    if (off < 0 || n <= 0 || off + n > s[0]->ne[0] || off > INT32_MAX)
        return fail(g, GS_INVAL, "cols: [%lld, %lld) is not within rows of %lld", (long long)off,
                    (long long)(off + n), (long long)s[0]->ne[0]);
    union gs_node_params p;
    memset(&p, 0, sizeof(p));
    p.cols.off = (int32_t)off;
    return push(g, GS_OP_COLS, s[0]->rows, n, &x, 1, &p);
}

uint32_t gs_graph_concat(struct gs_graph *g, const uint32_t *xs, int n)
{
    const struct gs_node *s[GS_GRAPH_MAX_SRC];
    if (n < 2 || n > GS_GRAPH_MAX_SRC)
        return fail(g, GS_INVAL, "concat: %d sources (2 to %d)", n, GS_GRAPH_MAX_SRC);
    if (!get_srcs(g, "concat", xs, n, s))
        return GS_NODE_NONE;
    int64_t width = 0;
    for (int i = 0; i < n; i++) {
        if (!act_src(g, "concat", s[i], 0, s[0]->rows))
            return GS_NODE_NONE;
        width += s[i]->ne[0];
    }
    return push(g, GS_OP_CONCAT, s[0]->rows, width, xs, (uint32_t)n, NULL);
}

uint32_t gs_graph_altup_predict(struct gs_graph *g, uint32_t streams, uint32_t coefs,
                                int32_t n_streams)
{
    uint32_t ids[2] = {streams, coefs};
    const struct gs_node *s[2];
    if (!get_srcs(g, "altup_predict", ids, 2, s))
        return GS_NODE_NONE;
    if (n_streams < 1 || s[0]->ne[0] % n_streams)
        return fail(g, GS_INVAL, "altup_predict: %d streams do not divide rows of %lld",
                    n_streams, (long long)s[0]->ne[0]);
    if (!act_src(g, "altup_predict", s[0], 0, s[0]->rows) ||
        !act_src(g, "altup_predict", s[1], (int64_t)n_streams * n_streams, s[0]->rows))
        return GS_NODE_NONE;
    union gs_node_params p;
    memset(&p, 0, sizeof(p));
    p.altup.n_streams = n_streams;
    return push(g, GS_OP_ALTUP_PREDICT, s[0]->rows, s[0]->ne[0], ids, 2, &p);
}

uint32_t gs_graph_altup_correct(struct gs_graph *g, uint32_t predictions, uint32_t activated,
                                uint32_t coefs, int32_t n_streams, int32_t active)
{
    uint32_t ids[3] = {predictions, activated, coefs};
    const struct gs_node *s[3];
    if (!get_srcs(g, "altup_correct", ids, 3, s))
        return GS_NODE_NONE;
    if (n_streams < 1 || s[0]->ne[0] % n_streams || active < 0 || active >= n_streams)
        return fail(g, GS_INVAL, "altup_correct: stream %d of %d over rows of %lld", active,
                    n_streams, (long long)s[0]->ne[0]);
    if (!act_src(g, "altup_correct", s[0], 0, s[0]->rows) ||
        !act_src(g, "altup_correct", s[1], s[0]->ne[0] / n_streams, s[0]->rows) ||
        !act_src(g, "altup_correct", s[2], n_streams, s[0]->rows))
        return GS_NODE_NONE;
    union gs_node_params p;
    memset(&p, 0, sizeof(p));
    p.altup.n_streams = n_streams;
    p.altup.active = active;
    return push(g, GS_OP_ALTUP_CORRECT, s[0]->rows, s[0]->ne[0], ids, 3, &p);
}

uint32_t gs_graph_mag_match(struct gs_graph *g, uint32_t x, uint32_t ref)
{
    uint32_t ids[2] = {x, ref};
    const struct gs_node *s[2];
    if (!get_srcs(g, "mag_match", ids, 2, s) ||
        !act_src(g, "mag_match", s[0], 0, s[0]->rows) ||
        !act_src(g, "mag_match", s[1], 0, s[0]->rows))
        return GS_NODE_NONE;
    return push(g, GS_OP_MAG_MATCH, s[0]->rows, s[0]->ne[0], ids, 2, NULL);
}

uint32_t gs_graph_gauss_topk(struct gs_graph *g, uint32_t x, float k)
{
    if (g->err.code == GS_OK && !isfinite(k))
        return fail(g, GS_INVAL, "gauss_topk: %g is not finite", (double)k);
    const struct gs_node *s[1];
    if (!get_srcs(g, "gauss_topk", &x, 1, s) || !act_src(g, "gauss_topk", s[0], 0, s[0]->rows))
        return GS_NODE_NONE;
    if (s[0]->ne[0] < 2)
        return fail(g, GS_INVAL, "gauss_topk: rows of %lld have no deviation",
                    (long long)s[0]->ne[0]);
    union gs_node_params p;
    memset(&p, 0, sizeof(p));
    p.topk_k = k;
    return push(g, GS_OP_GAUSS_TOPK, s[0]->rows, s[0]->ne[0], &x, 1, &p);
}

uint32_t gs_graph_outputs(struct gs_graph *g, uint32_t x)
{
    const struct gs_node *s[1];
    if (!get_srcs(g, "outputs", &x, 1, s))
        return GS_NODE_NONE;
    if (s[0]->rows != GS_ROWS_TOKENS)
        return fail(g, GS_INVAL, "outputs: source must have one row per token");
    return push(g, GS_OP_OUTPUTS, GS_ROWS_OUTPUTS, s[0]->ne[0], &x, 1, NULL);
}

uint32_t gs_graph_logits(struct gs_graph *g, uint32_t x)
{
    const struct gs_node *s[1];
    if (!get_srcs(g, "logits", &x, 1, s))
        return GS_NODE_NONE;
    if (s[0]->rows != GS_ROWS_OUTPUTS)
        return fail(g, GS_INVAL, "logits: source must have one row per output");
    if (gs_graph_logits_node(g) != GS_NODE_NONE)
        return fail(g, GS_INVAL, "logits: the graph already has a logits node");
    uint32_t id = push(g, GS_OP_LOGITS, GS_ROWS_NONE, s[0]->ne[0], &x, 1, NULL);
    if (id != GS_NODE_NONE)
        g->n_vocab = g->nodes[id].ne[0];
    return id;
}

uint32_t gs_graph_hidden(struct gs_graph *g, uint32_t x)
{
    const struct gs_node *s[1];
    if (!get_srcs(g, "hidden", &x, 1, s))
        return GS_NODE_NONE;
    if (s[0]->rows != GS_ROWS_TOKENS)
        return fail(g, GS_INVAL, "hidden: source must have one row per token");
    if (gs_graph_hidden_node(g) != GS_NODE_NONE)
        return fail(g, GS_INVAL, "hidden: the graph already has a hidden node");
    return push(g, GS_OP_HIDDEN, GS_ROWS_NONE, s[0]->ne[0], &x, 1, NULL);
}

/* a (activation) with b of the same shape, or b a single row broadcast. */
static uint32_t binary(struct gs_graph *g, enum gs_op op, uint32_t a, uint32_t b)
{
    uint32_t ids[2] = {a, b};
    const struct gs_node *s[2];
    const char *name = gs_op_info(op)->name;
    if (!get_srcs(g, name, ids, 2, s))
        return GS_NODE_NONE;
    if (!is_act(s[0]))
        return fail(g, GS_INVAL, "%s: first source must be an activation", name);
    if (s[1]->ne[0] != s[0]->ne[0])
        return fail(g, GS_INVAL, "%s: row lengths differ (%lld vs %lld)", name,
                    (long long)s[0]->ne[0], (long long)s[1]->ne[0]);
    bool bcast = s[1]->rows == GS_ROWS_FIXED && s[1]->ne[1] == 1;
    if (!bcast && s[1]->rows != s[0]->rows)
        return fail(g, GS_INVAL, "%s: row counts differ", name);
    if (!bcast && op == GS_OP_SWIGLU && !is_act(s[1]))
        return fail(g, GS_INVAL, "%s: second source must be an activation", name);
    return push(g, op, s[0]->rows, s[0]->ne[0], ids, 2, NULL);
}

uint32_t gs_graph_mul(struct gs_graph *g, uint32_t a, uint32_t b)
{
    return binary(g, GS_OP_MUL, a, b);
}

uint32_t gs_graph_add(struct gs_graph *g, uint32_t a, uint32_t b)
{
    return binary(g, GS_OP_ADD, a, b);
}

uint32_t gs_graph_swiglu(struct gs_graph *g, uint32_t a, uint32_t b)
{
    return binary(g, GS_OP_SWIGLU, a, b);
}

uint32_t gs_graph_glu(struct gs_graph *g, uint32_t a, uint32_t b, enum gs_glu_act act)
{
    uint32_t id = binary(g, GS_OP_SWIGLU, a, b);
    if (id != GS_NODE_NONE)
        g->nodes[id].p.glu_act = act;
    return id;
}

uint32_t gs_graph_rms_norm_mul(struct gs_graph *g, uint32_t x, uint32_t w, float eps)
{
    uint32_t id = binary(g, GS_OP_RMS_NORM_MUL, x, w);
    if (id != GS_NODE_NONE)
        g->nodes[id].p.eps = eps;
    return id;
}

uint32_t gs_graph_rms_norm_heads(struct gs_graph *g, uint32_t x, uint32_t w, int32_t head_dim,
                                 float eps)
{
    uint32_t ids[2] = {x, w};
    const struct gs_node *s[2];
    if (!get_srcs(g, "rms_norm_heads", ids, 2, s))
        return GS_NODE_NONE;
    if (!is_act(s[0]))
        return fail(g, GS_INVAL, "rms_norm_heads: first source must be an activation");
    if (head_dim <= 0 || s[0]->ne[0] % head_dim)
        return fail(g, GS_INVAL, "rms_norm_heads: head_dim %d does not divide rows of %lld",
                    head_dim, (long long)s[0]->ne[0]);
    if (s[1]->op != GS_OP_WEIGHT || s[1]->type != GS_TYPE_F32 || s[1]->ne[0] != head_dim ||
        s[1]->ne[1] != 1)
        return fail(g, GS_INVAL, "rms_norm_heads: weight must be %d f32 values", head_dim);
    union gs_node_params p;
    memset(&p, 0, sizeof(p));
    p.norm_heads.eps = eps;
    p.norm_heads.head_dim = head_dim;
    return push(g, GS_OP_RMS_NORM_HEADS, s[0]->rows, s[0]->ne[0], ids, 2, &p);
}

static bool check_matmul(struct gs_graph *g, const char *name, const struct gs_node *x,
                         const struct gs_node *w)
{
    if (!is_act(x)) {
        fail(g, GS_INVAL, "%s: first source must be an activation", name);
        return false;
    }
    if (w->op != GS_OP_WEIGHT) {
        fail(g, GS_INVAL, "%s: second source must be a weight", name);
        return false;
    }
    if (w->ne[0] != x->ne[0]) {
        fail(g, GS_INVAL, "%s: weight '%s' rows have %lld elements, input rows %lld", name, w->name,
             (long long)w->ne[0], (long long)x->ne[0]);
        return false;
    }
    return true;
}

uint32_t gs_graph_matmul(struct gs_graph *g, uint32_t x, uint32_t w)
{
    uint32_t ids[2] = {x, w};
    const struct gs_node *s[2];
    if (!get_srcs(g, "matmul", ids, 2, s) || !check_matmul(g, "matmul", s[0], s[1]))
        return GS_NODE_NONE;
    return push(g, GS_OP_MATMUL, s[0]->rows, s[1]->ne[1], ids, 2, NULL);
}

uint32_t gs_graph_matmul_add(struct gs_graph *g, uint32_t x, uint32_t w, uint32_t r)
{
    uint32_t ids[3] = {x, w, r};
    const struct gs_node *s[3];
    if (!get_srcs(g, "matmul_add", ids, 3, s) || !check_matmul(g, "matmul_add", s[0], s[1]))
        return GS_NODE_NONE;
    if (s[2]->rows != s[0]->rows || s[2]->ne[0] != s[1]->ne[1])
        return fail(g, GS_INVAL, "matmul_add: residual shape differs from the product");
    return push(g, GS_OP_MATMUL_ADD, s[0]->rows, s[1]->ne[1], ids, 3, NULL);
}

uint32_t gs_graph_matmul_swiglu(struct gs_graph *g, uint32_t x, uint32_t w_gate, uint32_t w_up)
{
    return gs_graph_matmul_glu(g, x, w_gate, w_up, GS_GLU_SILU);
}

uint32_t gs_graph_matmul_glu(struct gs_graph *g, uint32_t x, uint32_t w_gate, uint32_t w_up,
                             enum gs_glu_act act)
{
    uint32_t ids[3] = {x, w_gate, w_up};
    const struct gs_node *s[3];
    if (!get_srcs(g, "matmul_swiglu", ids, 3, s) ||
        !check_matmul(g, "matmul_swiglu", s[0], s[1]) ||
        !check_matmul(g, "matmul_swiglu", s[0], s[2]))
        return GS_NODE_NONE;
    if (s[1]->type != s[2]->type || s[1]->ne[1] != s[2]->ne[1])
        return fail(g, GS_INVAL, "matmul_swiglu: weights '%s' and '%s' differ in type or shape",
                    s[1]->name, s[2]->name);
    union gs_node_params p;
    memset(&p, 0, sizeof(p));
    p.glu_act = act;
    return push(g, GS_OP_MATMUL_SWIGLU, s[0]->rows, s[1]->ne[1], ids, 3, &p);
}

uint32_t gs_graph_rope(struct gs_graph *g, uint32_t x, const struct gs_rope_params *rp,
                       uint32_t freq_factors)
{
    uint32_t ids[2] = {x, freq_factors};
    uint32_t n = freq_factors == GS_NODE_NONE ? 1 : 2;
    const struct gs_node *s[2];
    if (!get_srcs(g, "rope", ids, (int)n, s))
        return GS_NODE_NONE;
    if (s[0]->rows != GS_ROWS_TOKENS)
        return fail(g, GS_INVAL, "rope: source must have one row per token");
    if (rp->n_head <= 0 || rp->head_dim <= 0 || (int64_t)rp->n_head * rp->head_dim != s[0]->ne[0])
        return fail(g, GS_INVAL, "rope: %d heads of %d do not make a row of %lld", rp->n_head,
                    rp->head_dim, (long long)s[0]->ne[0]);
    if (rp->n_rot <= 0 || rp->n_rot > rp->head_dim || rp->n_rot % 2)
        return fail(g, GS_INVAL, "rope: n_rot %d must be even and in (0, %d]", rp->n_rot,
                    rp->head_dim);
    if (rp->mode != GS_ROPE_NORMAL && rp->mode != GS_ROPE_NEOX)
        return fail(g, GS_INVAL, "rope: unknown mode %d", (int)rp->mode);
    if (n == 2 && (s[1]->op != GS_OP_WEIGHT || s[1]->type != GS_TYPE_F32 ||
                   s[1]->ne[0] * s[1]->ne[1] != rp->n_rot / 2))
        return fail(g, GS_INVAL, "rope: frequency factors must be %d f32 values", rp->n_rot / 2);
    union gs_node_params p;
    memset(&p, 0, sizeof(p));
    p.rope = *rp;
    return push(g, GS_OP_ROPE, GS_ROWS_TOKENS, s[0]->ne[0], ids, n, &p);
}

static bool check_attn(struct gs_graph *g, const char *name, const struct gs_attn_params *ap)
{
    if (ap->layer < 0 || ap->n_head <= 0 || ap->n_head_kv <= 0 || ap->head_dim <= 0 ||
        ap->n_head % ap->n_head_kv || ap->window < 0) {
        fail(g, GS_INVAL, "%s: bad heads (layer %d, %d heads, %d kv heads, head dim %d, window %d)",
             name, ap->layer, ap->n_head, ap->n_head_kv, ap->head_dim, ap->window);
        return false;
    }
    return true;
}

uint32_t gs_graph_kv_store(struct gs_graph *g, uint32_t k, uint32_t v,
                           const struct gs_attn_params *ap)
{
    uint32_t ids[2] = {k, v};
    const struct gs_node *s[2];
    if (!get_srcs(g, "kv_store", ids, 2, s) || !check_attn(g, "kv_store", ap))
        return GS_NODE_NONE;
    int64_t kv_dim = (int64_t)ap->n_head_kv * ap->head_dim;
    for (int i = 0; i < 2; i++)
        if (s[i]->rows != GS_ROWS_TOKENS || s[i]->ne[0] != kv_dim)
            return fail(g, GS_INVAL, "kv_store: %s must be [%lld x T]", i ? "v" : "k",
                        (long long)kv_dim);
    union gs_node_params p;
    memset(&p, 0, sizeof(p));
    p.attn = *ap;
    return push(g, GS_OP_KV_STORE, GS_ROWS_NONE, 0, ids, 2, &p);
}

uint32_t gs_graph_attn(struct gs_graph *g, uint32_t q, uint32_t kv_store,
                       const struct gs_attn_params *ap)
{
    uint32_t ids[2] = {q, kv_store};
    const struct gs_node *s[2];
    if (!get_srcs(g, "attn", ids, 2, s) || !check_attn(g, "attn", ap))
        return GS_NODE_NONE;
    if (s[0]->rows != GS_ROWS_TOKENS || s[0]->ne[0] != (int64_t)ap->n_head * ap->head_dim)
        return fail(g, GS_INVAL, "attn: q must be [%lld x T]",
                    (long long)ap->n_head * ap->head_dim);
    if (s[1]->op != GS_OP_KV_STORE || s[1]->p.attn.layer != ap->layer ||
        s[1]->p.attn.n_head_kv != ap->n_head_kv || s[1]->p.attn.head_dim != ap->head_dim)
        return fail(g, GS_INVAL, "attn: second source must be the kv_store of layer %d", ap->layer);
    union gs_node_params p;
    memset(&p, 0, sizeof(p));
    p.attn = *ap;
    return push(g, GS_OP_ATTN, GS_ROWS_TOKENS, s[0]->ne[0], ids, 2, &p);
}

uint32_t gs_graph_name(struct gs_graph *g, uint32_t id, const char *fmt, ...)
{
    if (id >= g->n_nodes)
        return id;
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    const char *s = gs_graph__strdup(g, buf);
    if (!s)
        return fail(g, GS_NOMEM, "out of memory naming a node");
    g->nodes[id].name = s;
    return id;
}

uint32_t gs_graph_logits_node(const struct gs_graph *g)
{
    for (uint32_t i = g->n_nodes; i-- > 0;)
        if (g->nodes[i].op == GS_OP_LOGITS)
            return i;
    return GS_NODE_NONE;
}

uint32_t gs_graph_hidden_node(const struct gs_graph *g)
{
    for (uint32_t i = g->n_nodes; i-- > 0;)
        if (g->nodes[i].op == GS_OP_HIDDEN)
            return i;
    return GS_NODE_NONE;
}

/* ---- editing ---------------------------------------------------------------- */

uint32_t gs_graph_n_uses(const struct gs_graph *g, uint32_t id)
{
    uint32_t n = 0;
    for (uint32_t i = id + 1; i < g->n_nodes; i++)
        for (uint32_t j = 0; j < g->nodes[i].n_src; j++)
            n += g->nodes[i].src[j] == id;
    return n;
}

void gs_graph_replace_uses(struct gs_graph *g, uint32_t from, uint32_t to)
{
    for (uint32_t i = from + 1; i < g->n_nodes; i++)
        for (uint32_t j = 0; j < g->nodes[i].n_src; j++)
            if (g->nodes[i].src[j] == from)
                g->nodes[i].src[j] = to;
}

uint32_t gs_graph_compact(struct gs_graph *g, const bool *dead)
{
    /* Node ids only shrink, so a remap table can be filled in one forward sweep. */
    uint32_t out = 0, removed = 0;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        if (dead[i]) {
            removed++;
            continue;
        }
        struct gs_node n = g->nodes[i];
        for (uint32_t j = 0; j < n.n_src; j++) {
            uint32_t s = n.src[j];
            uint32_t before = 0;
            for (uint32_t k = 0; k < s; k++)
                before += dead[k];
            n.src[j] = s - before;
        }
        g->nodes[out++] = n;
    }
    g->n_nodes = out;
    return removed;
}

bool gs_graph__same_value(const struct gs_node *a, const struct gs_node *b)
{
    if (a->op != b->op || a->type != b->type || a->rows != b->rows || a->ne[0] != b->ne[0] ||
        a->ne[1] != b->ne[1] || a->n_src != b->n_src || a->data != b->data)
        return false;
    for (uint32_t j = 0; j < a->n_src; j++)
        if (a->src[j] != b->src[j])
            return false;
    return !memcmp(&a->p, &b->p, sizeof(a->p));
}

enum gs_status gs_graph_verify(const struct gs_graph *g, struct gs_err *err)
{
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const struct gs_node *n = &g->nodes[i];
        const struct gs_op_info *info = gs_op_info(n->op);
        if (!info)
            return gs_err_set(err, GS_FORMAT, "graph: node %u has unknown op %d", i, (int)n->op);
        const bool opt_src = n->op == GS_OP_ROPE || n->op == GS_OP_ROPE_BACK;
        if (n->n_src > GS_GRAPH_MAX_SRC || (n->op == GS_OP_CONCAT ? n->n_src < 2
                                     : !opt_src && (int)n->n_src != info->n_src))
            return gs_err_set(err, GS_FORMAT, "graph: node %u (%s) has %u sources", i, info->name,
                              n->n_src);
        for (uint32_t j = 0; j < n->n_src; j++) {
            if (n->src[j] >= i)
                return gs_err_set(err, GS_FORMAT,
                                  "graph: node %u (%s) source %u is %u, not an earlier node", i,
                                  info->name, j, n->src[j]);
            /* Quantized activation rows (RMS_NORM_QUANT) are a matmul's input
             * in exactly the type its weights multiply with, and nothing else. */
            const struct gs_node *b = &g->nodes[n->src[j]];
            const bool matmul = gs_op_is_matmul(n->op);
            const struct gs_type_traits *wt =
                matmul ? gs_type_traits(g->nodes[n->src[1]].type) : NULL;
            if (b->op != GS_OP_WEIGHT && b->type != GS_TYPE_F32 &&
                !(j == 0 && wt && wt->vec_dot_type == b->type && wt->quantized))
                return gs_err_set(err, GS_FORMAT,
                                  "graph: node %u (%s) reads %s rows of node %u; only a matmul "
                                  "whose weights multiply with %s may",
                                  i, info->name, gs_type_name(b->type), n->src[j],
                                  gs_type_name(b->type));
        }
        if (n->op == GS_OP_WEIGHT && (!n->data || n->ne[0] <= 0 || n->ne[1] <= 0))
            return gs_err_set(err, GS_FORMAT, "graph: weight %u '%s' has no data or shape", i,
                              n->name);
    }
    return GS_OK;
}

const char *gs_graph__rows_str(const struct gs_node *n, char *buf, size_t len)
{
    switch (n->rows) {
    case GS_ROWS_TOKENS:
        return "T";
    case GS_ROWS_OUTPUTS:
        return "O";
    case GS_ROWS_NONE:
        return "-";
    case GS_ROWS_FIXED:
        break;
    }
    snprintf(buf, len, "%lld", (long long)n->ne[1]);
    return buf;
}
