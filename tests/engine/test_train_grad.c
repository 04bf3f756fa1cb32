/*
 * tests/engine/test_train_grad.c - every op's gradient (gs_graph_backward and
 * the training kernels) against central finite differences of the forward
 * graph, on ref and cpu.
 *
 * Each case is a small graph: x = embed(table) (distinct tokens, so x's
 * gradient is the table's), the op under test, then a projection to 7
 * classes and the cross-entropy loss. Every element of every parameter is
 * perturbed by +-h in place and the loss re-evaluated on ref's forward-only
 * graph; the differences are formed in float64. The analytic gradient of
 * each parameter must match with a norm-wise relative error of at most 1e-3.
 */
#include "engine/backend.h"
#include "engine/compile.h"
#include "engine/graph.h"

#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <string.h>

#define N_CLS  7
#define N_SEQ  2
#define SEQ    3
#define N_TOK  (N_SEQ * SEQ)
#define MAX_W  4
#define MAX_EL 256

struct op_case {
    const char *name;
    int64_t width; /* x's row length */
    int n_w;       /* the op's own weights */
    int64_t w_shape[MAX_W][2];
    int64_t out_width;
    /* builds the op from x and its weights' nodes */
    uint32_t (*build)(struct gs_graph *g, uint32_t x, const uint32_t *w);
};

static uint32_t b_identity(struct gs_graph *g, uint32_t x, const uint32_t *w)
{
    return x;
}

static uint32_t b_rms_norm_mul(struct gs_graph *g, uint32_t x, const uint32_t *w)
{
    return gs_graph_mul(g, gs_graph_rms_norm(g, x, 1e-5f), w[0]);
}

static uint32_t b_matmul(struct gs_graph *g, uint32_t x, const uint32_t *w)
{
    return gs_graph_matmul(g, x, w[0]);
}

static uint32_t b_rope(struct gs_graph *g, uint32_t x, const uint32_t *w)
{
    const struct gs_rope_params rp = {2, 4, 4, GS_ROPE_NORMAL, 10000.0f, 1.0f};
    /* a matmul first, so the positions' angles act on values with a gradient of their own */
    return gs_graph_rope(g, gs_graph_matmul(g, x, w[0]), &rp, GS_NODE_NONE);
}

static uint32_t b_swiglu(struct gs_graph *g, uint32_t x, const uint32_t *w)
{
    return gs_graph_swiglu(g, gs_graph_matmul(g, x, w[0]), gs_graph_matmul(g, x, w[1]));
}

static uint32_t b_residual(struct gs_graph *g, uint32_t x, const uint32_t *w)
{
    return gs_graph_add(g, x, gs_graph_matmul(g, x, w[0])); /* x read twice: summed gradients */
}

static uint32_t b_attn(struct gs_graph *g, uint32_t x, const uint32_t *w)
{
    /* 4 query heads over 2 kv heads of 4: grouped-query attention */
    const struct gs_attn_params ap = {.n_head = 4, .n_head_kv = 2, .head_dim = 4, .scale = 0.5f};
    const struct gs_rope_params rq = {4, 4, 4, GS_ROPE_NORMAL, 10000.0f, 1.0f};
    struct gs_rope_params rk = rq;
    rk.n_head = 2;
    uint32_t q = gs_graph_rope(g, gs_graph_matmul(g, x, w[0]), &rq, GS_NODE_NONE);
    uint32_t k = gs_graph_rope(g, gs_graph_matmul(g, x, w[1]), &rk, GS_NODE_NONE);
    uint32_t v = gs_graph_matmul(g, x, w[2]);
    return gs_graph_attn_causal(g, q, k, v, &ap);
}

static const struct op_case cases[] = {
    {"embed", 5, 0, {{0}}, 5, b_identity},
    {"rms_norm_mul", 6, 1, {{6, 1}}, 6, b_rms_norm_mul},
    {"matmul", 5, 1, {{5, 4}}, 4, b_matmul},
    {"rope", 5, 1, {{5, 8}}, 8, b_rope},
    {"swiglu", 4, 2, {{4, 6}, {4, 6}}, 6, b_swiglu},
    {"residual", 5, 1, {{5, 5}}, 5, b_residual},
    {"attn_causal_gqa", 6, 3, {{6, 16}, {6, 8}, {6, 8}}, 16, b_attn},
};

struct rig {
    float table[N_TOK * 16], proj[N_CLS * 16], w[MAX_W][MAX_EL];
    float *data[2 + MAX_W];
    int64_t ne[2 + MAX_W][2];
    int n_params;
    int32_t tokens[N_TOK], targets[N_TOK], pos[N_TOK];
    uint32_t seq[N_TOK];
    struct gs_seq_pages seqs[N_SEQ];
};

static void fill(float *x, size_t n, uint32_t seed, float amp)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = ((float)(seed >> 8) / (float)(1u << 24) * 2.0f - 1.0f) * amp;
    }
}

/* interleaved: the two sequences' rows alternate (t % N_SEQ) instead of
 * following each other, which the cpu backend's attention takes another way. */
static void rig_init(struct rig *r, const struct op_case *c, bool interleaved)
{
    memset(r, 0, sizeof(*r));
    r->n_params = 2 + c->n_w;
    r->data[0] = r->table, r->ne[0][0] = c->width, r->ne[0][1] = N_TOK;
    r->data[1] = r->proj, r->ne[1][0] = c->out_width, r->ne[1][1] = N_CLS;
    fill(r->table, GS_ARRAY_LEN(r->table), 11, 1.0f);
    fill(r->proj, GS_ARRAY_LEN(r->proj), 12, 0.7f);
    for (int i = 0; i < c->n_w; i++) {
        r->data[2 + i] = r->w[i];
        r->ne[2 + i][0] = c->w_shape[i][0], r->ne[2 + i][1] = c->w_shape[i][1];
        cr_assert_leq(c->w_shape[i][0] * c->w_shape[i][1], MAX_EL);
        fill(r->w[i], MAX_EL, 20 + (uint32_t)i, 0.6f);
        if (c->w_shape[i][1] == 1) /* a norm gain: around 1 */
            for (int j = 0; j < MAX_EL; j++)
                r->w[i][j] += 1.0f;
    }
    for (int t = 0; t < N_TOK; t++) {
        r->tokens[t] = (t * 5) % N_TOK; /* each row once */
        r->targets[t] = (t * 3 + 1) % N_CLS;
        r->pos[t] = interleaved ? t / N_SEQ : t % SEQ;
        r->seq[t] = (uint32_t)(interleaved ? t % N_SEQ : t / SEQ);
    }
}

/* The case's graph: the loss, and with backward its gradients. */
static struct gs_graph *build(const struct op_case *c, struct rig *r, bool backward)
{
    struct gs_graph *g;
    struct gs_err err = {0};
    cr_assert_eq(gs_graph_new(&g, &err), GS_OK);
    uint32_t ids[2 + MAX_W];
    for (int i = 0; i < r->n_params; i++)
        ids[i] = gs_graph_weight(g, i == 0 ? "table" : i == 1 ? "proj" : "w", GS_TYPE_F32,
                                 r->ne[i][0], r->ne[i][1], r->data[i]);
    uint32_t y = c->build(g, gs_graph_embed(g, ids[0]), ids + 2);
    uint32_t loss = gs_graph_cross_entropy(g, gs_graph_matmul(g, y, ids[1]));
    if (backward)
        cr_assert_eq(gs_graph_backward(g, loss, ids, (uint32_t)r->n_params, &err), GS_OK, "%s",
                     err.msg);
    else
        gs_graph_out(g, loss, 0);
    cr_assert_eq(gs_graph_status(g, &err), GS_OK, "%s", err.msg);
    return g;
}

static void run(struct gs_be *be, const struct gs_graph *g, struct rig *r, float *const *outs,
                uint32_t n_outs)
{
    struct gs_err err = {0};
    struct gs_plan *p;
    const struct gs_shape s = {N_TOK};
    cr_assert_eq(gs_be_compile(be, g, &s, &p, &err), GS_OK, "%s", err.msg);
    const struct gs_step_io io = {.n_tokens = N_TOK, .tokens = r->tokens, .pos = r->pos,
                                  .seq = r->seq, .n_seqs = N_SEQ, .seqs = r->seqs,
                                  .targets = r->targets, .outs = outs, .n_outs = n_outs};
    cr_assert_eq(gs_be_run(be, p, &io, &err), GS_OK, "%s", err.msg);
    gs_be_plan_free(be, p);
}

/* Rows, not pointers: Criterion re-executes the binary for each test. */
struct grad_param {
    int index;
    int cpu; /* 0: ref, 1: cpu */
    int interleaved;
};

static void check_case(const struct op_case *c, const char *backend, bool interleaved)
{
    static struct rig r;
    rig_init(&r, c, interleaved);
    struct gs_err err = {0};
    struct gs_be ref, be;
    cr_assert_eq(gs_be_init(&ref, "ref", &(struct gs_be_cfg){0}, &err), GS_OK);
    cr_assert_eq(gs_be_init(&be, backend, &(struct gs_be_cfg){.n_threads = 2}, &err), GS_OK);
    struct gs_graph *gb = build(c, &r, true), *gf = build(c, &r, false);

    static float grads[2 + MAX_W][N_TOK * 16 > MAX_EL ? N_TOK * 16 : MAX_EL];
    float loss, *outs[3 + MAX_W] = {&loss};
    for (int i = 0; i < r.n_params; i++)
        outs[1 + i] = grads[i];
    run(&be, gb, &r, outs, (uint32_t)(1 + r.n_params));
    cr_assert(isfinite(loss) && loss > 0, "loss %g", (double)loss);

    const float h = 1e-2f;
    for (int i = 0; i < r.n_params; i++) {
        double num = 0, den = 0;
        const int64_t n = r.ne[i][0] * r.ne[i][1];
        for (int64_t j = 0; j < n; j++) {
            float lp, lm, *o[1] = {&lp};
            const float keep = r.data[i][j];
            r.data[i][j] = keep + h;
            run(&ref, gf, &r, o, 1);
            o[0] = &lm;
            r.data[i][j] = keep - h;
            run(&ref, gf, &r, o, 1);
            r.data[i][j] = keep;
            const double fd = ((double)lp - (double)lm) / (2.0 * (double)h);
            num += (fd - grads[i][j]) * (fd - grads[i][j]);
            den += fd * fd;
        }
        const double rel = sqrt(num / (den > 0 ? den : 1));
        const char *rows = interleaved ? ", sequences interleaved" : "";
        cr_log_info("%s on %s%s: parameter %d, |g| %.3g, relative error %.2e", c->name, backend,
                    rows, i, sqrt(den), rel);
        cr_expect(den > 1e-12, "%s: parameter %d has no gradient to check", c->name, i);
        cr_expect_leq(rel, 1e-3, "%s on %s%s: parameter %d relative error %.3e", c->name,
                      backend, rows, i, rel);
    }
    gs_graph_free(gb);
    gs_graph_free(gf);
    gs_be_deinit(&ref);
    gs_be_deinit(&be);
}

ParameterizedTestParameters(train_grad, finite_differences)
{
    static struct grad_param params[4 * GS_ARRAY_LEN(cases)];
    for (size_t i = 0; i < GS_ARRAY_LEN(cases); i++)
        for (int k = 0; k < 4; k++)
            params[4 * i + k] = (struct grad_param){(int)i, k & 1, k >> 1};
    return cr_make_param_array(struct grad_param, params, GS_ARRAY_LEN(params));
}

ParameterizedTest(struct grad_param *p, train_grad, finite_differences)
{
    check_case(&cases[p->index], p->cpu ? "cpu" : "ref", p->interleaved);
}

/* What the backward pass refuses, by name. */
Test(train_grad, refusals)
{
    struct gs_graph *g;
    struct gs_err err = {0};
    float t[40] = {0}, w[40] = {0};
    cr_assert_eq(gs_graph_new(&g, &err), GS_OK);
    uint32_t table = gs_graph_weight(g, "table", GS_TYPE_F32, 4, 10, t);
    uint32_t proj = gs_graph_weight(g, "proj", GS_TYPE_F32, 4, 10, w);
    uint32_t unused = gs_graph_weight(g, "unused", GS_TYPE_F32, 4, 1, w);
    uint32_t x = gs_graph_gelu(g, gs_graph_embed(g, table));
    uint32_t loss = gs_graph_cross_entropy(g, gs_graph_matmul(g, x, proj));
    uint32_t ids[2] = {table, proj};
    cr_expect_eq(gs_graph_backward(g, x, ids, 2, &err), GS_INVAL, "not a loss");
    uint32_t dup[2] = {proj, proj};
    cr_expect_eq(gs_graph_backward(g, loss, dup, 2, &err), GS_INVAL);
    cr_expect(strstr(err.msg, "twice"), "%s", err.msg);
    gs_graph_free(g);

    cr_assert_eq(gs_graph_new(&g, &err), GS_OK);
    table = gs_graph_weight(g, "table", GS_TYPE_F32, 4, 10, t);
    proj = gs_graph_weight(g, "proj", GS_TYPE_F32, 4, 10, w);
    x = gs_graph_gelu(g, gs_graph_embed(g, table));
    loss = gs_graph_cross_entropy(g, gs_graph_matmul(g, x, proj));
    cr_expect_eq(gs_graph_backward(g, loss, ids, 2, &err), GS_UNSUPPORTED);
    cr_expect(strstr(err.msg, "gelu"), "%s", err.msg);
    gs_graph_free(g);

    cr_assert_eq(gs_graph_new(&g, &err), GS_OK);
    table = gs_graph_weight(g, "table", GS_TYPE_F32, 4, 10, t);
    proj = gs_graph_weight(g, "proj", GS_TYPE_F32, 4, 10, w);
    unused = gs_graph_weight(g, "unused", GS_TYPE_F32, 4, 1, w);
    loss = gs_graph_cross_entropy(g, gs_graph_matmul(g, gs_graph_embed(g, table), proj));
    uint32_t three[3] = {table, proj, unused};
    cr_expect_eq(gs_graph_backward(g, loss, three, 3, &err), GS_INVAL);
    cr_expect(strstr(err.msg, "'unused' does not reach the loss"), "%s", err.msg);
    gs_graph_free(g);

    /* a gradient through a quantized (frozen) weight is refused, naming it */
    static float wide[32 * 4], proj3[2 * 3];
    static uint8_t q8[2 * 34];
    cr_assert_eq(gs_graph_new(&g, &err), GS_OK);
    table = gs_graph_weight(g, "table", GS_TYPE_F32, 32, 4, wide);
    uint32_t frozen = gs_graph_weight(g, "frozen", GS_TYPE_Q8_0, 32, 2, q8);
    proj = gs_graph_weight(g, "proj", GS_TYPE_F32, 2, 3, proj3);
    x = gs_graph_matmul(g, gs_graph_embed(g, table), frozen);
    loss = gs_graph_cross_entropy(g, gs_graph_matmul(g, x, proj));
    uint32_t two[2] = {table, proj};
    cr_expect_eq(gs_graph_backward(g, loss, two, 2, &err), GS_UNSUPPORTED);
    cr_expect(strstr(err.msg, "q8_0 weight 'frozen'"), "%s", err.msg);
    gs_graph_free(g);
}
