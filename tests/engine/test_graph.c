/*
 * tests/engine/test_graph.c - the graph IR, its passes, printing and the
 * compile step, on small hand-built graphs run by the ref backend.
 */
#include "engine/backend.h"
#include "engine/compile.h"
#include "engine/gguf.h"
#include "engine/graph.h"
#include "engine/model.h"
#include "tests/common/testutil.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define D 8  /* model width */
#define V 6  /* vocabulary */
#define F 12 /* feed-forward width */
#define T 5  /* tokens in the test step */

/* Deterministic pseudo-random weights in [-1, 1). */
static float w_embd[V * D], w_norm[D], w_up[F * D], w_gate[F * D], w_down[D * F], w_out[V * D];

static void fill(float *x, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
    }
}

static void init_weights(void)
{
    fill(w_embd, GS_ARRAY_LEN(w_embd), 1);
    fill(w_norm, GS_ARRAY_LEN(w_norm), 2);
    fill(w_up, GS_ARRAY_LEN(w_up), 3);
    fill(w_gate, GS_ARRAY_LEN(w_gate), 4);
    fill(w_down, GS_ARRAY_LEN(w_down), 5);
    fill(w_out, GS_ARRAY_LEN(w_out), 6);
}

/*
 * A small transformer-shaped graph without attention: embed, a norm, a SwiGLU
 * feed-forward with a residual add, a duplicated norm (for CSE), an unused
 * branch (for DCE), then logits.
 */
static bool mlp_gelu; /* the MLPs' gate is gelu, not silu */

static struct gs_graph *build_mlp(void)
{
    init_weights();
    struct gs_graph *g;
    struct gs_err err = {0};
    cr_assert_eq(gs_graph_new(&g, &err), GS_OK);
    uint32_t embd = gs_graph_weight(g, "token_embd.weight", GS_TYPE_F32, D, V, w_embd);
    uint32_t norm_w = gs_graph_weight(g, "ffn_norm.weight", GS_TYPE_F32, D, 1, w_norm);
    uint32_t up_w = gs_graph_weight(g, "ffn_up.weight", GS_TYPE_F32, D, F, w_up);
    uint32_t gate_w = gs_graph_weight(g, "ffn_gate.weight", GS_TYPE_F32, D, F, w_gate);
    uint32_t down_w = gs_graph_weight(g, "ffn_down.weight", GS_TYPE_F32, F, D, w_down);
    uint32_t out_w = gs_graph_weight(g, "output.weight", GS_TYPE_F32, D, V, w_out);
    uint32_t x = gs_graph_embed(g, embd);
    uint32_t h = gs_graph_mul(g, gs_graph_rms_norm(g, x, 1e-5f), norm_w);
    uint32_t gate_mm = gs_graph_matmul(g, h, gate_w);
    uint32_t gate = mlp_gelu ? gs_graph_gelu(g, gate_mm) : gs_graph_silu(g, gate_mm);
    uint32_t up = gs_graph_matmul(g, h, up_w);
    uint32_t ff = gs_graph_matmul(g, gs_graph_mul(g, gate, up), down_w);
    x = gs_graph_add(g, ff, x);
    /* The same norm twice: CSE merges them. */
    uint32_t n1 = gs_graph_rms_norm(g, x, 1e-5f);
    uint32_t n2 = gs_graph_rms_norm(g, x, 1e-5f);
    x = gs_graph_add(g, n1, n2);
    gs_graph_gelu(g, x); /* read by nobody: DCE removes it */
    x = gs_graph_outputs(g, x);
    gs_graph_logits(g, gs_graph_matmul(g, x, out_w));
    cr_assert_eq(gs_graph_status(g, &err), GS_OK, "%s", err.msg);
    return g;
}

/* Runs g on backend `name` for the first n (<= T) of the test's tokens,
 * logits for every row, into out[n * g->n_vocab]. */
static void run_graph_on(const char *name, const struct gs_graph *g, uint32_t n, float *out)
{
    struct gs_be be;
    struct gs_err err = {0};
    cr_assert_eq(gs_be_init(&be, name, NULL, &err), GS_OK, "%s", err.msg);
    struct gs_plan *p;
    struct gs_shape s = {.n_tokens = 8};
    cr_assert_eq(gs_be_compile(&be, g, &s, &p, &err), GS_OK, "%s", err.msg);
    int32_t tokens[T] = {0, 3, 5, 1, 3};
    int32_t pos[T] = {0, 1, 7, 30, 100};
    uint32_t seq[T] = {0}, rows[T] = {0, 1, 2, 3, 4};
    struct gs_seq_pages sp = {NULL, 0};
    struct gs_step_io io = {.n_tokens = n,
                            .tokens = tokens,
                            .pos = pos,
                            .seq = seq,
                            .n_seqs = 1,
                            .seqs = &sp,
                            .n_outputs = n,
                            .out_rows = rows,
                            .logits = out};
    cr_assert_eq(gs_be_run(&be, p, &io, &err), GS_OK, "%s", err.msg);
    gs_be_plan_free(&be, p);
    gs_be_deinit(&be);
}

static void run_graph(const struct gs_graph *g, float *out)
{
    run_graph_on("ref", g, T, out);
}

static uint32_t count_op(const struct gs_graph *g, enum gs_op op)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < g->n_nodes; i++)
        n += g->nodes[i].op == op;
    return n;
}

static char *print_to_string(const struct gs_graph *g, enum gs_graph_format fmt)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert(f);
    gs_graph_print(g, fmt, f);
    fclose(f);
    return buf;
}

/*
 * Runs one pass on a copy of the MLP graph, prints it before and after (kept
 * in the test log), checks that the outputs are identical, and returns the
 * rewritten graph for pass-specific checks.
 */
static struct gs_graph *check_pass(const struct gs_pass *pass, struct gs_graph **before_out)
{
    struct gs_graph *before = build_mlp(), *after;
    struct gs_err err = {0};
    cr_assert_eq(gs_graph_clone(before, &after, &err), GS_OK);
    cr_assert_eq(gs_graph_run_passes(after, &pass, 1, &err), GS_OK, "%s", err.msg);
    char *a = print_to_string(before, GS_GRAPH_TEXT), *b = print_to_string(after, GS_GRAPH_TEXT);
    cr_log_info("pass %s\nbefore:\n%s\nafter:\n%s", pass->name, a, b);
    free(a);
    free(b);
    float out_a[T * V], out_b[T * V];
    run_graph(before, out_a);
    run_graph(after, out_b);
    for (int i = 0; i < T * V; i++)
        cr_assert_float_eq(out_a[i], out_b[i], 1e-5f * (1 + fabsf(out_a[i])),
                           "pass %s changed output %d: %g vs %g", pass->name, i, out_a[i],
                           out_b[i]);
    *before_out = before;
    return after;
}

Test(graph_pass, dce_removes_unread_nodes_and_keeps_output)
{
    struct gs_graph *before, *after = check_pass(&gs_pass_dce, &before);
    cr_assert_eq(count_op(before, GS_OP_GELU), 1);
    cr_assert_eq(count_op(after, GS_OP_GELU), 0);
    cr_assert_eq(after->n_nodes, before->n_nodes - 1);
    gs_graph_free(before);
    gs_graph_free(after);
}

Test(graph_pass, cse_merges_duplicate_norms)
{
    struct gs_graph *before, *after = check_pass(&gs_pass_cse, &before);
    uint32_t dce_changed = 0;
    struct gs_err err = {0};
    cr_assert_eq(gs_pass_dce.run(after, &dce_changed, &err), GS_OK);
    /* the duplicate norm and the unread gelu */
    cr_assert_eq(dce_changed, 2);
    cr_assert_eq(count_op(after, GS_OP_RMS_NORM), count_op(before, GS_OP_RMS_NORM) - 1);
    gs_graph_free(before);
    gs_graph_free(after);
}

Test(graph_pass, rms_norm_mul_fuses_norm_and_weight)
{
    struct gs_graph *before, *after = check_pass(&gs_pass_rms_norm_mul, &before);
    cr_assert_eq(count_op(after, GS_OP_RMS_NORM_MUL), 1);
    /* The fused norm is dead now; the two unweighted norms stay. */
    cr_assert_eq(count_op(before, GS_OP_MUL) - count_op(after, GS_OP_MUL), 1);
    gs_graph_free(before);
    gs_graph_free(after);
}

Test(graph_pass, swiglu_fuses_silu_times_up)
{
    struct gs_graph *before, *after = check_pass(&gs_pass_swiglu, &before);
    cr_assert_eq(count_op(after, GS_OP_SWIGLU), 1);
    cr_assert_eq(gs_graph_n_uses(after, 0) >= 1, true);
    gs_graph_free(before);
    gs_graph_free(after);
}

Test(graph_pass, residual_folds_add_into_matmul)
{
    struct gs_graph *before, *after = check_pass(&gs_pass_residual, &before);
    cr_assert_eq(count_op(after, GS_OP_MATMUL_ADD), 1);
    cr_assert_eq(count_op(before, GS_OP_ADD) - count_op(after, GS_OP_ADD), 1);
    gs_graph_free(before);
    gs_graph_free(after);
}

Test(graph_pass, all_passes_shrink_graph_and_keep_output)
{
    struct gs_graph *g = build_mlp(), *opt;
    struct gs_err err = {0};
    cr_assert_eq(gs_graph_clone(g, &opt, &err), GS_OK);
    cr_assert_eq(gs_graph_run_passes(opt, gs_passes_all, gs_passes_all_len, &err), GS_OK, "%s",
                 err.msg);
    float a[T * V], b[T * V];
    run_graph(g, a);
    run_graph(opt, b);
    for (int i = 0; i < T * V; i++)
        cr_assert_float_eq(a[i], b[i], 1e-5f * (1 + fabsf(a[i])));
    /* silu+mul, norm+mul, matmul+add fused, then gate, up and swiglu into one;
     * duplicate norm and gelu gone */
    cr_assert_eq(opt->n_nodes, g->n_nodes - 7, "%u -> %u nodes", g->n_nodes, opt->n_nodes);
    cr_assert_eq(count_op(opt, GS_OP_MATMUL_SWIGLU), 1);
    gs_graph_free(g);
    gs_graph_free(opt);
}

Test(graph_pass, fusion_skips_shared_intermediate)
{
    /* rms_norm read twice must not be fused away. */
    init_weights();
    struct gs_graph *g;
    struct gs_err err = {0};
    cr_assert_eq(gs_graph_new(&g, &err), GS_OK);
    uint32_t embd = gs_graph_weight(g, "e", GS_TYPE_F32, D, V, w_embd);
    uint32_t nw = gs_graph_weight(g, "n", GS_TYPE_F32, D, 1, w_norm);
    uint32_t x = gs_graph_embed(g, embd);
    uint32_t n = gs_graph_rms_norm(g, x, 1e-5f);
    uint32_t y = gs_graph_add(g, gs_graph_mul(g, n, nw), n);
    gs_graph_logits(g, gs_graph_outputs(g, y));
    uint32_t changed = 1;
    cr_assert_eq(gs_pass_rms_norm_mul.run(g, &changed, &err), GS_OK);
    cr_assert_eq(changed, 0);
    gs_graph_free(g);
}

/*
 * A graph with q8_0 weights (rows of 32): the first norm feeds two q8_0
 * matmuls, the second a q8_0 and an f32 matmul, the third an add; the swiglu
 * feeds a q8_0 matmul.
 */
#define QD 32
#define QF 64
static uint8_t q_gate[QF * 34], q_up[QF * 34], q_down[QD * QF / 32 * 34], q_a[QD * 34];
static float qw_embd[V * QD], qw_norm[QD], qw_b[QD * QD], qw_out[V * QD];

static struct gs_graph *build_quant_mlp(void)
{
    float tmp[QF * QD];
    fill(tmp, QF * QD, 11);
    cr_assert_eq(gs_quantize(GS_TYPE_Q8_0, tmp, q_gate, QF * QD), GS_OK);
    fill(tmp, QF * QD, 12);
    cr_assert_eq(gs_quantize(GS_TYPE_Q8_0, tmp, q_up, QF * QD), GS_OK);
    fill(tmp, QD * QD, 13);
    cr_assert_eq(gs_quantize(GS_TYPE_Q8_0, tmp, q_a, QD * QD), GS_OK);
    fill(tmp, QD * QF, 16);
    cr_assert_eq(gs_quantize(GS_TYPE_Q8_0, tmp, q_down, QD * QF), GS_OK);
    fill(qw_embd, GS_ARRAY_LEN(qw_embd), 14);
    fill(qw_norm, GS_ARRAY_LEN(qw_norm), 15);
    fill(qw_b, GS_ARRAY_LEN(qw_b), 17);
    fill(qw_out, GS_ARRAY_LEN(qw_out), 18);
    struct gs_graph *g;
    struct gs_err err = {0};
    cr_assert_eq(gs_graph_new(&g, &err), GS_OK);
    uint32_t embd = gs_graph_weight(g, "e", GS_TYPE_F32, QD, V, qw_embd);
    uint32_t nw = gs_graph_weight(g, "n", GS_TYPE_F32, QD, 1, qw_norm);
    uint32_t gate_w = gs_graph_weight(g, "gate", GS_TYPE_Q8_0, QD, QF, q_gate);
    uint32_t up_w = gs_graph_weight(g, "up", GS_TYPE_Q8_0, QD, QF, q_up);
    uint32_t down_w = gs_graph_weight(g, "down", GS_TYPE_Q8_0, QF, QD, q_down);
    uint32_t a_w = gs_graph_weight(g, "a", GS_TYPE_Q8_0, QD, QD, q_a);
    uint32_t b_w = gs_graph_weight(g, "b", GS_TYPE_F32, QD, QD, qw_b);
    uint32_t out_w = gs_graph_weight(g, "out", GS_TYPE_F32, QD, V, qw_out);
    uint32_t x = gs_graph_embed(g, embd);
    uint32_t h = gs_graph_mul(g, gs_graph_rms_norm(g, x, 1e-5f), nw);
    uint32_t ff = gs_graph_glu(g, gs_graph_matmul(g, h, gate_w), gs_graph_matmul(g, h, up_w),
                               mlp_gelu ? GS_GLU_GELU : GS_GLU_SILU);
    x = gs_graph_add(g, gs_graph_matmul(g, ff, down_w), x);
    uint32_t h2 = gs_graph_mul(g, gs_graph_rms_norm(g, x, 1e-5f), nw);
    x = gs_graph_add(g, gs_graph_matmul(g, h2, a_w), gs_graph_matmul(g, h2, b_w));
    uint32_t h3 = gs_graph_mul(g, gs_graph_rms_norm(g, x, 1e-5f), nw);
    x = gs_graph_add(g, h3, x);
    gs_graph_logits(g, gs_graph_matmul(g, gs_graph_outputs(g, x), out_w));
    cr_assert_eq(gs_graph_status(g, &err), GS_OK, "%s", err.msg);
    return g;
}

/* The same logits from `before` and `after` on both backends, for a step of
 * many tokens and for one (whose row the cpu backend splits between threads
 * by blocks). */
static void check_same_logits(const struct gs_graph *before, const struct gs_graph *after)
{
    static const char *const backends[] = {"ref", "cpu"};
    for (size_t b = 0; b < 2 * GS_ARRAY_LEN(backends); b++) {
        const uint32_t n = b % 2 ? 1 : T;
        float out_a[T * V], out_b[T * V];
        run_graph_on(backends[b / 2], before, n, out_a);
        run_graph_on(backends[b / 2], after, n, out_b);
        for (uint32_t i = 0; i < n * V; i++)
            cr_assert_float_eq(out_a[i], out_b[i], 1e-5f * (1 + fabsf(out_a[i])),
                               "%s, %u tokens: logit %u: %g unfused, %g fused", backends[b / 2],
                               n, i, out_a[i], out_b[i]);
    }
}

Test(graph_pass, quant_rows_fuse_norms_and_swiglu_read_by_matmuls_of_one_type)
{
    struct gs_graph *before = build_quant_mlp(), *after;
    struct gs_err err = {0};
    cr_assert_eq(gs_graph_clone(before, &after, &err), GS_OK);
    const struct gs_pass *passes[] = {&gs_pass_rms_norm_mul, &gs_pass_rms_norm_quant,
                                      &gs_pass_swiglu_quant};
    cr_assert_eq(gs_graph_run_passes(after, passes, 3, &err), GS_OK, "%s", err.msg);
    /* Only the norm read by nothing but q8_0 matmuls, and the swiglu. */
    cr_assert_eq(count_op(after, GS_OP_RMS_NORM_QUANT), 1);
    cr_assert_eq(count_op(after, GS_OP_RMS_NORM_MUL), 2);
    cr_assert_eq(count_op(after, GS_OP_SWIGLU_QUANT), 1);
    for (uint32_t i = 0; i < after->n_nodes; i++)
        if (after->nodes[i].op == GS_OP_RMS_NORM_QUANT || after->nodes[i].op == GS_OP_SWIGLU_QUANT)
            cr_assert_eq(after->nodes[i].type, GS_TYPE_Q8_0, "node %u", i);
    char *text = print_to_string(after, GS_GRAPH_TEXT);
    cr_assert(strstr(text, "rms_norm_quant(") && strstr(text, ") q8_0 [32 x T]"), "%s", text);
    cr_assert(strstr(text, "swiglu_quant(") && strstr(text, ") q8_0 [64 x T]"), "%s", text);
    free(text);
    /* Quantizing in the norm is what the matmuls did with its float rows:
     * the same logits on both backends. */
    check_same_logits(before, after);
    /* Quantized rows read by anything but a matmul of their type are refused. */
    for (uint32_t i = 0; i < after->n_nodes; i++)
        if (after->nodes[i].op == GS_OP_RMS_NORM_MUL)
            after->nodes[i].type = GS_TYPE_Q8_0;
    cr_assert_eq(gs_graph_verify(after, &err), GS_FORMAT);
    cr_assert(strstr(err.msg, "reads q8_0 rows"), "%s", err.msg);
    gs_graph_free(before);
    gs_graph_free(after);
}

/* Runs passes on a copy of g; the copy. */
static struct gs_graph *with_passes(const struct gs_graph *g, const struct gs_pass *const *passes,
                                    size_t n)
{
    struct gs_graph *out;
    struct gs_err err = {0};
    cr_assert_eq(gs_graph_clone(g, &out, &err), GS_OK);
    cr_assert_eq(gs_graph_run_passes(out, passes, n, &err), GS_OK, "%s", err.msg);
    return out;
}

Test(graph_pass, matmul_swiglu_joins_gate_and_up_in_float_and_quantized_rows)
{
    struct gs_graph *before = build_quant_mlp();
    /* Alone (and DCE for the matmuls it leaves unread): the swiglu's float rows. */
    const struct gs_pass *alone[] = {&gs_pass_matmul_swiglu, &gs_pass_dce};
    struct gs_graph *f32 = with_passes(before, alone, 2);
    cr_assert_eq(count_op(f32, GS_OP_MATMUL_SWIGLU), 1);
    cr_assert_eq(count_op(f32, GS_OP_SWIGLU), 0);
    cr_assert_eq(count_op(f32, GS_OP_MATMUL), count_op(before, GS_OP_MATMUL) - 2);
    check_same_logits(before, f32);
    /* After swiglu_quant: the down matmul's q8_0 rows, written by the fused node. */
    const struct gs_pass *all[] = {&gs_pass_rms_norm_mul, &gs_pass_rms_norm_quant,
                                   &gs_pass_swiglu_quant, &gs_pass_matmul_swiglu};
    struct gs_graph *quant = with_passes(before, all, GS_ARRAY_LEN(all));
    cr_assert_eq(count_op(quant, GS_OP_SWIGLU_QUANT), 0);
    char *text = print_to_string(quant, GS_GRAPH_TEXT);
    cr_assert(strstr(text, "matmul_swiglu(") && strstr(text, ") q8_0 [64 x T]"), "%s", text);
    free(text);
    check_same_logits(before, quant);
    gs_graph_free(f32);
    gs_graph_free(quant);
    gs_graph_free(before);
}

/* A GELU gate (Gemma's) takes the same fused path: mul(gelu(gate), up) becomes a
 * swiglu with act gelu, then one matmul_swiglu, in float and in quantized rows, with
 * the logits of the unfused graph on both backends. */
Test(graph_pass, gelu_gate_fuses_like_silu)
{
    mlp_gelu = true;
    struct gs_graph *g = build_mlp(), *opt;
    struct gs_err err = {0};
    cr_assert_eq(gs_graph_clone(g, &opt, &err), GS_OK);
    cr_assert_eq(gs_graph_run_passes(opt, gs_passes_all, gs_passes_all_len, &err), GS_OK, "%s",
                 err.msg);
    cr_assert_eq(count_op(opt, GS_OP_MATMUL_SWIGLU), 1);
    cr_assert_eq(count_op(opt, GS_OP_GELU), 0);
    for (uint32_t i = 0; i < opt->n_nodes; i++)
        if (opt->nodes[i].op == GS_OP_MATMUL_SWIGLU)
            cr_assert_eq(opt->nodes[i].p.glu_act, GS_GLU_GELU);
    char *text = print_to_string(opt, GS_GRAPH_TEXT);
    cr_assert(strstr(text, "{act=gelu}"), "%s", text);
    free(text);
    check_same_logits(g, opt);
    gs_graph_free(g);
    gs_graph_free(opt);

    struct gs_graph *before = build_quant_mlp();
    const struct gs_pass *all[] = {&gs_pass_rms_norm_mul, &gs_pass_rms_norm_quant,
                                   &gs_pass_swiglu_quant, &gs_pass_matmul_swiglu};
    struct gs_graph *quant = with_passes(before, all, GS_ARRAY_LEN(all));
    cr_assert_eq(count_op(quant, GS_OP_MATMUL_SWIGLU), 1);
    check_same_logits(before, quant);
    /* and the silu graph differs from it: the activation is not ignored */
    mlp_gelu = false;
    struct gs_graph *silu = build_quant_mlp();
    float a[T * V], b[T * V];
    run_graph(before, a);
    run_graph(silu, b);
    double diff = 0;
    for (int i = 0; i < T * V; i++)
        diff += fabs((double)a[i] - b[i]);
    cr_assert_gt(diff, 1e-3, "gelu and silu gates gave the same logits");
    gs_graph_free(silu);
    gs_graph_free(quant);
    gs_graph_free(before);
}

Test(graph_pass, matmul_swiglu_leaves_a_gate_read_elsewhere)
{
    init_weights();
    struct gs_graph *g;
    struct gs_err err = {0};
    cr_assert_eq(gs_graph_new(&g, &err), GS_OK);
    uint32_t embd = gs_graph_weight(g, "e", GS_TYPE_F32, D, V, w_embd);
    uint32_t gate_w = gs_graph_weight(g, "gate", GS_TYPE_F32, D, F, w_gate);
    uint32_t up_w = gs_graph_weight(g, "up", GS_TYPE_F32, D, F, w_up);
    uint32_t down_w = gs_graph_weight(g, "down", GS_TYPE_F32, F, D, w_down);
    uint32_t x = gs_graph_embed(g, embd);
    uint32_t gate = gs_graph_matmul(g, x, gate_w);
    uint32_t ff = gs_graph_add(g, gs_graph_swiglu(g, gate, gs_graph_matmul(g, x, up_w)), gate);
    gs_graph_logits(g, gs_graph_outputs(g, gs_graph_matmul(g, ff, down_w)));
    cr_assert_eq(gs_graph_status(g, &err), GS_OK, "%s", err.msg);
    uint32_t changed = 1;
    cr_assert_eq(gs_pass_matmul_swiglu.run(g, &changed, &err), GS_OK);
    cr_assert_eq(changed, 0);
    cr_assert_eq(count_op(g, GS_OP_MATMUL_SWIGLU), 0);
    gs_graph_free(g);
}

/* Both backends implement every fused op, so each runs every pass (a backend
 * that could not write a pass's rows would leave that pass out). */
Test(graph_pass, both_backends_select_every_pass)
{
    static const char *const names[] = {"ref", "cpu"};
    for (size_t b = 0; b < GS_ARRAY_LEN(names); b++) {
        struct gs_be be;
        struct gs_err err = {0};
        cr_assert_eq(gs_be_init(&be, names[b], NULL, &err), GS_OK, "%s", err.msg);
        const struct gs_pass *sel[16];
        size_t n = gs_be_select_passes(&be, gs_passes_all, gs_passes_all_len, sel, 16);
        cr_expect_eq(n, gs_passes_all_len, "%s selects %zu of %zu passes", names[b], n,
                     gs_passes_all_len);
        gs_be_deinit(&be);
    }
}

Test(graph_pass, find_by_name)
{
    for (size_t i = 0; i < gs_passes_all_len; i++)
        cr_assert_eq(gs_pass_find(gs_passes_all[i]->name), gs_passes_all[i]);
    cr_assert_null(gs_pass_find("no-such-pass"));
}

Test(graph_build, shape_mismatch_is_sticky_error)
{
    init_weights();
    struct gs_graph *g;
    struct gs_err err = {0};
    cr_assert_eq(gs_graph_new(&g, &err), GS_OK);
    uint32_t embd = gs_graph_weight(g, "e", GS_TYPE_F32, D, V, w_embd);
    uint32_t down = gs_graph_weight(g, "ffn_down.weight", GS_TYPE_F32, F, D, w_down);
    uint32_t x = gs_graph_embed(g, embd);
    uint32_t bad = gs_graph_matmul(g, x, down); /* rows of F, input rows of D */
    cr_assert_eq(bad, GS_NODE_NONE);
    cr_assert_eq(gs_graph_silu(g, bad), GS_NODE_NONE);
    cr_assert_eq(gs_graph_status(g, &err), GS_INVAL);
    cr_assert(strstr(err.msg, "ffn_down.weight"), "%s", err.msg);
    gs_graph_free(g);
}

Test(graph_print, text_dot_json_name_every_node)
{
    struct gs_graph *g = build_mlp();
    char *text = print_to_string(g, GS_GRAPH_TEXT);
    uint32_t lines = 0;
    for (char *p = text; *p; p++)
        lines += *p == '\n';
    cr_assert_eq(lines, g->n_nodes);
    cr_assert(strstr(text, "= matmul(%"));
    cr_assert(strstr(text, "f32 [8 x T]"), "%s", text);
    cr_assert(strstr(text, "[8 x 12] ffn_up.weight"), "%s", text);
    char *dot = print_to_string(g, GS_GRAPH_DOT);
    cr_assert(!strncmp(dot, "digraph", 7));
    char *js = print_to_string(g, GS_GRAPH_JSON);
    json_error_t jerr;
    json_t *j = json_loads(js, 0, &jerr);
    cr_assert(j, "JSON does not parse: %s", jerr.text);
    cr_assert_eq(json_array_size(json_object_get(j, "nodes")), g->n_nodes);
    json_decref(j);
    free(text);
    free(dot);
    free(js);
    gs_graph_free(g);
}

/* ---- compile ---------------------------------------------------------------- */

/* x -> matmul -> rope -> (rope + the matmul's value when reread) -> logits:
 * the rope may rotate in place only when nothing reads its input after it. */
static struct gs_graph *build_rope(bool reread)
{
    init_weights();
    struct gs_graph *g;
    struct gs_err err = {0};
    cr_assert_eq(gs_graph_new(&g, &err), GS_OK);
    uint32_t embd = gs_graph_weight(g, "e", GS_TYPE_F32, D, V, w_embd);
    uint32_t wq = gs_graph_weight(g, "q", GS_TYPE_F32, D, D, w_down);
    uint32_t out_w = gs_graph_weight(g, "out", GS_TYPE_F32, D, V, w_out);
    uint32_t q = gs_graph_matmul(g, gs_graph_embed(g, embd), wq);
    struct gs_rope_params rp = {.n_head = 2, .head_dim = D / 2, .n_rot = D / 2,
                                .mode = GS_ROPE_NEOX, .freq_base = 10000, .freq_scale = 1};
    uint32_t y = gs_graph_rope(g, q, &rp, GS_NODE_NONE);
    if (reread)
        y = gs_graph_add(g, y, q);
    gs_graph_logits(g, gs_graph_matmul(g, gs_graph_outputs(g, y), out_w));
    cr_assert_eq(gs_graph_status(g, &err), GS_OK, "%s", err.msg);
    return g;
}

static uint32_t find_op(const struct gs_graph *g, enum gs_op op)
{
    for (uint32_t i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == op)
            return i;
    cr_assert_fail("no %s node", gs_op_info(op)->name);
    return GS_NODE_NONE;
}

Test(compile_plan, rope_rotates_in_place_only_as_its_inputs_last_reader)
{
    for (int reread = 0; reread < 2; reread++) {
        struct gs_graph *g = build_rope(reread);
        struct gs_err err = {0};
        struct gs_shape s = {.n_tokens = 8};
        struct gs_plan *p;
        cr_assert_eq(gs_plan_layout(g, &s, &p, &err), GS_OK, "%s", err.msg);
        const uint32_t rope = find_op(g, GS_OP_ROPE), src = g->nodes[rope].src[0];
        cr_assert_eq(p->offset[rope] == p->offset[src], !reread, "reread %d", reread);
        gs_plan_free(p);
        /* Either way both backends compute what the graph says. */
        float a[T * V], b[T * V];
        run_graph_on("ref", g, T, a);
        run_graph_on("cpu", g, T, b);
        for (int i = 0; i < T * V; i++)
            cr_assert_float_eq(a[i], b[i], 1e-5f * (1 + fabsf(a[i])), "reread %d", reread);
        gs_graph_free(g);
    }
}

/* Live values never share bytes, except an in-place node and the source it
 * is the last reader of. */
static void check_no_overlap(const struct gs_graph *g)
{
    struct gs_err err = {0};
    struct gs_shape s = {.n_tokens = 16};
    struct gs_plan *p;
    cr_assert_eq(gs_plan_layout(g, &s, &p, &err), GS_OK, "%s", err.msg);
    /* Live range of a value: from its step to the step of its last reader. */
    uint32_t n = g->n_nodes;
    uint32_t *first = calloc(n, sizeof(*first)), *last = calloc(n, sizeof(*last));
    for (uint32_t k = 0; k < p->n_order; k++) {
        uint32_t id = p->order[k];
        first[id] = last[id] = k;
        for (uint32_t j = 0; j < g->nodes[id].n_src; j++)
            last[g->nodes[id].src[j]] = k;
    }
    for (uint32_t a = 0; a < n; a++)
        for (uint32_t b = a + 1; b < n; b++) {
            if (p->offset[a] == GS_PLAN_NO_OFFSET || p->offset[b] == GS_PLAN_NO_OFFSET)
                continue;
            bool live_together = first[a] <= last[b] && first[b] <= last[a];
            bool overlap = p->offset[a] < p->offset[b] + p->bytes[b] &&
                           p->offset[b] < p->offset[a] + p->bytes[a];
            bool in_place = (gs_op_info(g->nodes[b].op)->flags & GS_OPF_INPLACE) &&
                            g->nodes[b].src[0] == a && last[a] == first[b] &&
                            p->offset[a] == p->offset[b];
            cr_assert(!(live_together && overlap) || in_place, "nodes %u and %u share scratch",
                      a, b);
            cr_assert_geq(p->scratch_bytes, p->offset[a] + p->bytes[a]);
        }
    cr_assert_lt(p->scratch_bytes, p->naive_bytes, "liveness saved nothing");
    free(first);
    free(last);
    gs_plan_free(p);
}

Test(compile_plan, live_values_never_overlap)
{
    struct gs_graph *graphs[] = {build_mlp(), build_rope(false), build_rope(true)};
    for (size_t i = 0; i < GS_ARRAY_LEN(graphs); i++) {
        check_no_overlap(graphs[i]);
        gs_graph_free(graphs[i]);
    }
}

Test(compile_plan, cache_compiles_each_bucket_once)
{
    struct gs_graph *g = build_mlp();
    struct gs_be be;
    struct gs_err err = {0};
    cr_assert_eq(gs_be_init(&be, "ref", NULL, &err), GS_OK);
    struct gs_plan_cache c;
    gs_plan_cache_init(&c, &be, g);
    struct gs_plan *p1, *p2, *p3;
    cr_assert_eq(gs_plan_cache_get(&c, 5, &p1, &err), GS_OK);
    cr_assert_eq(gs_plan_cache_get(&c, 7, &p2, &err), GS_OK);
    cr_assert_eq(gs_plan_cache_get(&c, 9, &p3, &err), GS_OK);
    cr_assert_eq(p1, p2);
    cr_assert_neq(p1, p3);
    cr_assert_eq(p1->shape.n_tokens, 8);
    cr_assert_eq(p3->shape.n_tokens, 16);
    cr_assert_eq(c.n_compiles, 2);
    cr_assert_gt(p3->scratch_bytes, p1->scratch_bytes);
    cr_assert_eq(gs_plan_cache_get(&c, 0, &p1, &err), GS_INVAL);
    gs_plan_cache_deinit(&c);
    gs_be_deinit(&be);
    gs_graph_free(g);
}

Test(compile_plan, prepare_compiles_every_bucket_up_to_the_bound_once)
{
    struct gs_graph *g = build_mlp();
    struct gs_be be;
    struct gs_err err = {0};
    cr_assert_eq(gs_be_init(&be, "ref", NULL, &err), GS_OK);
    struct gs_plan_cache c;
    gs_plan_cache_init(&c, &be, g);
    struct gs_plan *p;
    cr_assert_eq(gs_plan_cache_get(&c, 3, &p, &err), GS_OK); /* bucket 4, before */
    cr_assert_eq(gs_plan_cache_prepare(&c, 20, &err), GS_OK);
    /* buckets 1, 2, 8, 16 and 32 new; 4 was there */
    cr_assert_eq(c.n_compiles, 6);
    for (uint32_t n = 1; n <= 20; n++) {
        cr_assert_eq(gs_plan_cache_get(&c, n, &p, &err), GS_OK);
        cr_assert_eq(p->shape.n_tokens, gs_plan_bucket(n));
    }
    cr_assert_eq(c.n_compiles, 6, "a step up to the prepared bound compiled a plan");
    cr_assert_eq(gs_plan_cache_prepare(&c, 32, &err), GS_OK);
    cr_assert_eq(c.n_compiles, 6);
    cr_assert_eq(gs_plan_cache_prepare(&c, 0, &err), GS_INVAL);
    cr_assert(strstr(err.msg, "0 tokens"), "%s", err.msg);
    gs_plan_cache_deinit(&c);
    gs_be_deinit(&be);
    gs_graph_free(g);
}

Test(compile_plan, bucket_is_next_power_of_two)
{
    cr_assert_eq(gs_plan_bucket(1), 1);
    cr_assert_eq(gs_plan_bucket(2), 2);
    cr_assert_eq(gs_plan_bucket(3), 4);
    cr_assert_eq(gs_plan_bucket(64), 64);
    cr_assert_eq(gs_plan_bucket(65), 128);
}

Test(backend_ref, rejects_bad_step)
{
    struct gs_graph *g = build_mlp();
    struct gs_be be;
    struct gs_err err = {0};
    cr_assert_eq(gs_be_init(&be, "ref", NULL, &err), GS_OK);
    struct gs_plan *p;
    struct gs_shape s = {.n_tokens = 2};
    cr_assert_eq(gs_be_compile(&be, g, &s, &p, &err), GS_OK);
    int32_t tokens[3] = {0, V, 1}, pos[3] = {0, 1, 2};
    uint32_t seq[3] = {0, 0, 0}, rows[1] = {0};
    float logits[V];
    struct gs_seq_pages sp = {NULL, 0};
    struct gs_step_io io = {.n_tokens = 2,
                            .tokens = tokens,
                            .pos = pos,
                            .seq = seq,
                            .n_seqs = 1,
                            .seqs = &sp,
                            .n_outputs = 1,
                            .out_rows = rows,
                            .logits = logits};
    cr_assert_eq(gs_be_run(&be, p, &io, &err), GS_INVAL);
    cr_assert(strstr(err.msg, "vocabulary"), "%s", err.msg);
    io.n_tokens = 3; /* past the bucket */
    tokens[1] = 1;
    cr_assert_eq(gs_be_run(&be, p, &io, &err), GS_INVAL);
    io.n_tokens = 2;
    cr_assert_eq(gs_be_run(&be, p, &io, &err), GS_OK, "%s", err.msg);
    gs_be_plan_free(&be, p);
    gs_be_deinit(&be);
    cr_assert_eq(gs_be_init(&be, "no-such-backend", NULL, &err), GS_NOTFOUND);
    gs_graph_free(g);
}

/* ---- single ops against formulas ---------------------------------------------- */

/* embed -> op -> logits, with the table as the "vocabulary": logits are the op's rows. */
static void run_unary(uint32_t (*op)(struct gs_graph *, uint32_t, const void *), const void *arg,
                      float *out)
{
    init_weights();
    struct gs_graph *g;
    struct gs_err err = {0};
    cr_assert_eq(gs_graph_new(&g, &err), GS_OK);
    uint32_t x = gs_graph_embed(g, gs_graph_weight(g, "e", GS_TYPE_F32, D, V, w_embd));
    gs_graph_logits(g, gs_graph_outputs(g, op(g, x, arg)));
    cr_assert_eq(gs_graph_status(g, &err), GS_OK, "%s", err.msg);
    run_graph(g, out); /* the "logits" are the op's rows, D wide */
    gs_graph_free(g);
}

static uint32_t op_softmax(struct gs_graph *g, uint32_t x, const void *arg)
{
    return gs_graph_softmax(g, x, arg);
}

static uint32_t op_rope(struct gs_graph *g, uint32_t x, const void *arg)
{
    return gs_graph_rope(g, x, arg, GS_NODE_NONE);
}

static const int32_t test_tokens[T] = {0, 3, 5, 1, 3};
static const int32_t test_pos[T] = {0, 1, 7, 30, 100};

Test(backend_ref, softmax_with_scale_and_softcap)
{
    struct gs_softmax_params p = {.scale = 0.5f, .softcap = 2.0f};
    float out[T * D];
    run_unary(op_softmax, &p, out);
    for (int t = 0; t < T; t++) {
        const float *x = &w_embd[test_tokens[t] * D];
        double e[D], sum = 0;
        for (int j = 0; j < D; j++) {
            e[j] = exp(2.0 * tanh(x[j] * 0.5 / 2.0));
            sum += e[j];
        }
        for (int j = 0; j < D; j++)
            cr_assert_float_eq(out[t * D + j], e[j] / sum, 1e-6, "row %d col %d", t, j);
    }
}

static uint32_t op_rms_norm_heads(struct gs_graph *g, uint32_t x, const void *arg)
{
    return gs_graph_rms_norm_heads(g, x, gs_graph_weight(g, "hw", GS_TYPE_F32, 4, 1, arg), 4,
                                   1e-6f);
}

/* Each head of 4 is normed by its own rms and multiplied by the same 4 weights. */
Test(backend_ref, rms_norm_heads_norms_each_head)
{
    static const float w[4] = {0.5f, 1.0f, 2.0f, -1.0f};
    float out[T * D];
    run_unary(op_rms_norm_heads, w, out);
    for (int t = 0; t < T; t++) {
        const float *x = &w_embd[test_tokens[t] * D];
        for (int h = 0; h < D / 4; h++) {
            double ss = 0;
            for (int j = 0; j < 4; j++)
                ss += (double)x[h * 4 + j] * x[h * 4 + j];
            double inv = 1.0 / sqrt(ss / 4 + 1e-6);
            for (int j = 0; j < 4; j++)
                cr_assert_float_eq(out[t * D + h * 4 + j], x[h * 4 + j] * inv * w[j], 1e-5,
                                   "token %d head %d col %d", t, h, j);
        }
    }
}

static void check_rope(enum gs_rope_mode mode)
{
    struct gs_rope_params p = {.n_head = 2,
                               .head_dim = 4,
                               .n_rot = 4,
                               .mode = mode,
                               .freq_base = 100.0f,
                               .freq_scale = 0.5f};
    float out[T * D];
    run_unary(op_rope, &p, out);
    for (int t = 0; t < T; t++) {
        const float *x = &w_embd[test_tokens[t] * D];
        for (int h = 0; h < 2; h++)
            for (int i = 0; i < 2; i++) {
                double theta = 0.5 * test_pos[t] * pow(100.0, -2.0 * i / 4);
                int a = h * 4 + (mode == GS_ROPE_NEOX ? i : 2 * i);
                int b = h * 4 + (mode == GS_ROPE_NEOX ? i + 2 : 2 * i + 1);
                double ya = x[a] * cos(theta) - x[b] * sin(theta);
                double yb = x[a] * sin(theta) + x[b] * cos(theta);
                cr_assert_float_eq(out[t * D + a], ya, 1e-4, "row %d head %d pair %d", t, h, i);
                cr_assert_float_eq(out[t * D + b], yb, 1e-4, "row %d head %d pair %d", t, h, i);
            }
    }
}

Test(backend_ref, rope_normal_rotates_adjacent_pairs)
{
    check_rope(GS_ROPE_NORMAL);
}

Test(backend_ref, rope_neox_rotates_half_split_pairs)
{
    check_rope(GS_ROPE_NEOX);
}

/* ---- out of memory ------------------------------------------------------------ */

Test(graph_oom, load_passes_and_compile_fail_cleanly)
{
    struct gs_gguf *f;
    struct gs_err err = {0};
    cr_assert_eq(gs_gguf_open(gs_test_shared_path("models/stories260K.gguf"), &f, &err), GS_OK);
    struct gs_be be;
    cr_assert_eq(gs_be_init(&be, "ref", NULL, &err), GS_OK);
    int n_fail = 0;
    for (long n = 0;; n++) {
        struct gs_model *m = NULL;
        struct gs_plan *p = NULL;
        struct gs_shape s = {.n_tokens = 4};
        gs_alloc_fail_after(n);
        enum gs_status st = gs_model_load(f, &m, &err);
        if (!st)
            st = gs_graph_run_passes(m->graph, gs_passes_all, gs_passes_all_len, &err);
        if (!st)
            st = gs_be_compile(&be, m->graph, &s, &p, &err);
        gs_alloc_fail_after(-1);
        gs_be_plan_free(&be, p);
        gs_model_free(m);
        if (st == GS_OK)
            break;
        cr_assert_eq(st, GS_NOMEM, "allocation %ld: %s", n, err.msg);
        n_fail++;
    }
    cr_assert_gt(n_fail, 3);
    gs_be_deinit(&be);
    gs_gguf_close(f);
}
