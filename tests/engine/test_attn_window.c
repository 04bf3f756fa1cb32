/*
 * tests/engine/test_attn_window.c - sliding-window attention on a paged KV
 * cache, on ref and cpu, against a scalar formula: a query at position p
 * attends to keys (p - window, p] only. The keys before the window are
 * poisoned with NaN before the second step, so a kernel that read them (even
 * to mask them afterwards) would produce NaN.
 */
#include "engine/backend.h"
#include "engine/compile.h"
#include "engine/graph.h"

#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

enum { HD = 8, V = 32, PAGE = 4, N_PAGES = 8, WINDOW = 5, N1 = 10, N2 = 6 };

static float table[V * HD];
static float kv_bytes[N_PAGES * 2 * PAGE * HD];

/* q = k = v = the token's embedding row; attention of one head. */
static struct gs_graph *build(int32_t window)
{
    struct gs_graph *g;
    struct gs_err err = {0};
    cr_assert_eq(gs_graph_new(&g, &err), GS_OK);
    uint32_t x = gs_graph_embed(g, gs_graph_weight(g, "e", GS_TYPE_F32, HD, V, table));
    struct gs_attn_params ap = {
        .layer = 0, .n_head = 1, .n_head_kv = 1, .head_dim = HD, .scale = 0.7f, .window = window};
    uint32_t kv = gs_graph_kv_store(g, x, x, &ap);
    gs_graph_logits(g, gs_graph_outputs(g, gs_graph_attn(g, x, kv, &ap)));
    cr_assert_eq(gs_graph_status(g, &err), GS_OK, "%s", err.msg);
    return g;
}

static int32_t token_at(int32_t pos)
{
    return (pos * 7 + 3) % V;
}

/* Runs positions from..from+n-1 as one step; out [n][HD]. */
static void step(struct gs_be *be, struct gs_plan *p, int32_t from, uint32_t n, float *out)
{
    struct gs_err err = {0};
    int32_t tokens[16], pos[16];
    uint32_t seq[16] = {0}, rows[16];
    for (uint32_t i = 0; i < n; i++) {
        pos[i] = from + (int32_t)i;
        tokens[i] = token_at(pos[i]);
        rows[i] = i;
    }
    static const uint32_t pages[N_PAGES] = {0, 1, 2, 3, 4, 5, 6, 7};
    struct gs_seq_pages sp = {pages, N_PAGES};
    struct gs_kv_view kv = {.base = kv_bytes,
                            .type = GS_TYPE_F32,
                            .n_pages = N_PAGES,
                            .page_tokens = PAGE,
                            .n_layer = 1,
                            .kv_dim = HD,
                            .page_bytes = 2 * PAGE * HD * sizeof(float)};
    struct gs_step_io io = {.n_tokens = n,
                            .tokens = tokens,
                            .pos = pos,
                            .seq = seq,
                            .n_seqs = 1,
                            .seqs = &sp,
                            .kv = &kv,
                            .n_outputs = n,
                            .out_rows = rows,
                            .logits = out};
    cr_assert_eq(gs_be_run(be, p, &io, &err), GS_OK, "%s", err.msg);
}

/* The formula for the query at position p. */
static void expect_row(int32_t p, const float *got, const char *backend)
{
    const float *q = &table[token_at(p) * HD];
    int32_t first = p - WINDOW + 1 > 0 ? p - WINDOW + 1 : 0;
    double s[WINDOW], mx = -INFINITY, sum = 0, o[HD] = {0};
    for (int32_t j = first; j <= p; j++) {
        const float *k = &table[token_at(j) * HD];
        double d = 0;
        for (int i = 0; i < HD; i++)
            d += (double)q[i] * k[i];
        s[j - first] = d * 0.7;
        mx = fmax(mx, s[j - first]);
    }
    for (int32_t j = first; j <= p; j++)
        sum += exp(s[j - first] - mx);
    for (int32_t j = first; j <= p; j++)
        for (int i = 0; i < HD; i++)
            o[i] += exp(s[j - first] - mx) / sum * table[token_at(j) * HD + i];
    for (int i = 0; i < HD; i++)
        cr_assert_float_eq(got[i], o[i], 1e-5, "%s: position %d col %d: %g, want %g", backend, p, i,
                           (double)got[i], o[i]);
}

static void check_backend(const char *name)
{
    for (int i = 0; i < V * HD; i++)
        table[i] = (float)((i * 7919) % 23) / 23.0f - 0.5f;
    memset(kv_bytes, 0, sizeof(kv_bytes));
    struct gs_graph *g = build(WINDOW);
    struct gs_be be;
    struct gs_err err = {0};
    cr_assert_eq(gs_be_init(&be, name, NULL, &err), GS_OK, "%s", err.msg);
    struct gs_plan *p;
    struct gs_shape s = {.n_tokens = 16};
    cr_assert_eq(gs_be_compile(&be, g, &s, &p, &err), GS_OK, "%s", err.msg);
    float out[16 * HD];
    step(&be, p, 0, N1, out); /* a prompt longer than the window */
    for (int32_t t = 0; t < N1; t++)
        expect_row(t, out + t * HD, name);
    /* Keys and values of positions 0..N1-WINDOW are outside every later window. */
    for (int32_t pos = 0; pos <= N1 - WINDOW; pos++)
        for (int which = 0; which < 2; which++)
            for (int i = 0; i < HD; i++)
                kv_bytes[((pos / PAGE) * 2 + which) * PAGE * HD + (pos % PAGE) * HD + i] = NAN;
    step(&be, p, N1, N2, out); /* four-query blocks and a single one */
    for (int32_t t = 0; t < N2; t++)
        expect_row(N1 + t, out + t * HD, name);
    step(&be, p, N1 + N2, 1, out); /* decoding one token */
    expect_row(N1 + N2, out, name);
    gs_be_plan_free(&be, p);
    gs_be_deinit(&be);
    gs_graph_free(g);
}

Test(attn_window, ref_reads_only_the_window)
{
    check_backend("ref");
}

Test(attn_window, cpu_reads_only_the_window)
{
    check_backend("cpu");
}

Test(attn_window, negative_window_refused)
{
    struct gs_graph *g;
    struct gs_err err = {0};
    cr_assert_eq(gs_graph_new(&g, &err), GS_OK);
    uint32_t x = gs_graph_embed(g, gs_graph_weight(g, "e", GS_TYPE_F32, HD, V, table));
    struct gs_attn_params ap = {.n_head = 1, .n_head_kv = 1, .head_dim = HD, .window = -1};
    gs_graph_kv_store(g, x, x, &ap);
    cr_assert_eq(gs_graph_status(g, &err), GS_INVAL);
    cr_assert(strstr(err.msg, "window -1"), "%s", err.msg);
    gs_graph_free(g);
}
