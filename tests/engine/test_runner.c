/*
 * tests/engine/test_runner.c - the engine runner (engine/runner.h): it opens
 * a backend with the passes it supports and runs steps; a second runner on
 * the rewritten graph runs it as it is; an unknown backend is refused; every
 * failed allocation while opening is reported and leaves nothing behind (the
 * ASan build checks the last part).
 */
#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/runner.h"
#include "kvcache/kvcache.h"
#include "tests/common/testutil.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static struct gs_gguf *file;
static struct gs_model *model;

static void load(void)
{
    struct gs_err err = {0};
    cr_assert_eq(gs_gguf_open(gs_test_shared_path("models/stories260K.gguf"), &file, &err), GS_OK,
                 "%s", err.msg);
    cr_assert_eq(gs_model_load(file, &model, &err), GS_OK, "%s", err.msg);
}

static void unload(void)
{
    gs_model_free(model);
    gs_gguf_close(file);
}

/* The prompt's last-token logits from runner r over a fresh pool, into out. */
static void run_prompt(struct gs_runner *r, float *out)
{
    static const int32_t toks[] = {1, 403, 407, 261, 378};
    enum { N = 5 };
    struct gs_err err = {0};
    struct gs_kv_pool_cfg pc = {.n_layer = gs_model_kv_layers(model),
                                .kv_dim = gs_model_kv_dim(model),
                                .type = GS_TYPE_F32,
                                .page_tokens = 16,
                                .n_pages = 2};
    struct gs_kv_pool *pool;
    cr_assert_eq(gs_kv_pool_new(&pc, &pool, &err), GS_OK, "%s", err.msg);
    struct gs_kv_seq seq;
    gs_kv_seq_init(&seq);
    cr_assert_eq(gs_kv_seq_reserve(pool, &seq, N, &err), GS_OK, "%s", err.msg);
    struct gs_kv_view kv = gs_kv_pool_view(pool);
    cr_assert_eq(kv.type, GS_TYPE_F32);
    int32_t pos[N] = {0, 1, 2, 3, 4};
    uint32_t sidx[N] = {0}, row = N - 1;
    struct gs_seq_pages sp = {seq.pages, seq.n_pages};
    struct gs_step_io io = {.n_tokens = N, .tokens = toks, .pos = pos, .seq = sidx, .n_seqs = 1,
                            .seqs = &sp, .kv = &kv, .n_outputs = 1, .out_rows = &row,
                            .logits = out};
    cr_assert_eq(gs_runner_step(r, &io, &err), GS_OK, "%s", err.msg);
    gs_kv_seq_release(pool, &seq);
    gs_kv_pool_free(pool);
}

Test(runner, passes_then_a_second_runner_on_the_rewritten_graph, .init = load, .fini = unload)
{
    struct gs_err err = {0};
    const uint32_t before = model->graph->n_nodes, nv = model->hp.n_vocab;
    float *plain = calloc(nv, sizeof(float)), *fused = calloc(nv, sizeof(float)),
          *again = calloc(nv, sizeof(float));
    cr_assert(plain && fused && again);
    /* The graph as built first, so the comparison has an unrewritten baseline. */
    struct gs_runner *r;
    const struct gs_runner_cfg as_built = {.backend = "ref", .no_passes = true};
    cr_assert_eq(gs_runner_new(model->graph, &as_built, &r, &err), GS_OK, "%s", err.msg);
    cr_assert_eq(r->n_passes, 0);
    run_prompt(r, plain);
    gs_runner_free(r);
    cr_assert_eq(model->graph->n_nodes, before, "no_passes rewrote the graph");

    const struct gs_runner_cfg with_passes = {.backend = "cpu"};
    cr_assert_eq(gs_runner_new(model->graph, &with_passes, &r, &err), GS_OK, "%s", err.msg);
    cr_assert_gt(r->n_passes, 0);
    cr_assert_lt(model->graph->n_nodes, before, "the passes did not rewrite the graph");
    run_prompt(r, fused);
    /* A reference runner on the graph the cpu runner rewrote, as the scheduler opens one. */
    struct gs_runner *ref;
    cr_assert_eq(gs_runner_new(model->graph, &as_built, &ref, &err), GS_OK, "%s", err.msg);
    run_prompt(ref, again);
    gs_runner_free(ref);
    gs_runner_free(r);
    for (uint32_t v = 0; v < nv; v++) {
        cr_assert_float_eq(fused[v], plain[v], 1e-3f * (1 + fabsf(plain[v])), "logit %u", v);
        cr_assert_float_eq(again[v], plain[v], 1e-4f * (1 + fabsf(plain[v])), "logit %u", v);
    }
    free(plain);
    free(fused);
    free(again);
}

Test(runner, unknown_backend_is_refused, .init = load, .fini = unload)
{
    struct gs_err err = {0};
    struct gs_runner *r = (struct gs_runner *)1;
    const struct gs_runner_cfg cfg = {.backend = "no-such-backend"};
    cr_assert_eq(gs_runner_new(model->graph, &cfg, &r, &err), GS_NOTFOUND);
    cr_assert_null(r);
    cr_assert(strstr(err.msg, "no-such-backend"), "%s", err.msg);
    gs_runner_free(NULL);
}

Test(runner, every_failed_allocation_is_reported, .init = load, .fini = unload)
{
    enum gs_status st = GS_NOMEM;
    for (long n = 0; st == GS_NOMEM; n++) {
        cr_assert(n < 10000, "opening never succeeded");
        struct gs_err err = {0};
        struct gs_runner *r = NULL;
        const struct gs_runner_cfg cfg = {.backend = "cpu", .no_passes = true};
        gs_alloc_fail_after(n);
        st = gs_runner_new(model->graph, &cfg, &r, &err);
        gs_alloc_fail_after(-1);
        cr_assert(st == GS_OK || st == GS_NOMEM, "%s", gs_status_str(st));
        cr_assert_eq(st == GS_OK, r != NULL);
        gs_runner_free(r);
    }
}

/* Every row's hidden state and all five rows' logits of a prompt, from runner r on m. */
static void run_hidden(const struct gs_model *m, struct gs_runner *r, float *hidden, float *logits)
{
    enum { N = 5 };
    int32_t toks[N] = {1, 403, 407, 261, 378};
    for (int i = 0; i < N; i++)
        toks[i] %= (int32_t)m->hp.n_vocab;
    struct gs_err err = {0};
    struct gs_kv_pool_cfg pc = {.n_layer = gs_model_kv_layers(m),
                                .kv_dim = gs_model_kv_dim(m),
                                .type = GS_TYPE_F32,
                                .page_tokens = 16,
                                .n_pages = 2};
    struct gs_kv_pool *pool;
    cr_assert_eq(gs_kv_pool_new(&pc, &pool, &err), GS_OK, "%s", err.msg);
    struct gs_kv_seq seq;
    gs_kv_seq_init(&seq);
    cr_assert_eq(gs_kv_seq_reserve(pool, &seq, N, &err), GS_OK, "%s", err.msg);
    struct gs_kv_view kv = gs_kv_pool_view(pool);
    int32_t pos[N] = {0, 1, 2, 3, 4};
    uint32_t sidx[N] = {0}, rows[N] = {0, 1, 2, 3, 4};
    struct gs_seq_pages sp = {seq.pages, seq.n_pages};
    struct gs_step_io io = {.n_tokens = N,
                            .tokens = toks,
                            .pos = pos,
                            .seq = sidx,
                            .n_seqs = 1,
                            .seqs = &sp,
                            .kv = &kv,
                            .n_outputs = N,
                            .out_rows = rows,
                            .logits = logits,
                            .hidden = hidden};
    cr_assert_eq(gs_runner_step(r, &io, &err), GS_OK, "%s", err.msg);
    gs_kv_seq_release(pool, &seq);
    gs_kv_pool_free(pool);
}

/* The hidden rows are exactly what the output projection multiplies: each
 * row's logits are its hidden state times the projection's rows (soft-capped
 * where the family caps them), computed here in double from the file's F32
 * weights; cpu's rows match ref's. For every family, Gemma 3n's own builder
 * included. */
Test(runner, hidden_rows_are_the_projection_input)
{
    static const char *const files[] = {
        "models/stories260K.gguf",           "models/arch/qwen2-tiny-F32.gguf",
        "models/arch/qwen3-tiny-F32.gguf",   "models/arch/phi3-tiny-F32.gguf",
        "models/arch/gemma2-tiny-F32.gguf",  "models/arch/gemma3-tiny-F32.gguf",
        "models/arch/gemma3n-tiny-F32.gguf",
    };
    enum { N = 5 };
    for (size_t fi = 0; fi < sizeof(files) / sizeof(files[0]); fi++) {
        struct gs_err err = {0};
        struct gs_gguf *f;
        struct gs_model *m;
        cr_assert_eq(gs_gguf_open(gs_test_shared_path(files[fi]), &f, &err), GS_OK, "%s", err.msg);
        cr_assert_eq(gs_model_load(f, &m, &err), GS_OK, "%s: %s", files[fi], err.msg);
        const uint32_t nv = m->hp.n_vocab, d = m->hp.n_embd;
        cr_assert_neq(gs_graph_hidden_node(m->graph), GS_NODE_NONE, "%s", files[fi]);
        const struct gs_gguf_tensor *w = gs_gguf_find_tensor(f, "output.weight");
        if (!w)
            w = gs_gguf_find_tensor(f, "token_embd.weight");
        cr_assert(w && w->type == GS_TYPE_F32 && w->ne[0] == d && w->ne[1] == nv, "%s", files[fi]);
        const float *wf = w->data;
        const double cap = m->hp.final_softcap;
        float *hid = calloc((size_t)N * d, sizeof(float));
        float *lg = calloc((size_t)N * nv, sizeof(float));
        float *hid_cpu = calloc((size_t)N * d, sizeof(float));
        float *lg_cpu = calloc((size_t)N * nv, sizeof(float));
        cr_assert(hid && lg && hid_cpu && lg_cpu);
        struct gs_runner *r;
        const struct gs_runner_cfg as_built = {.backend = "ref", .no_passes = true};
        cr_assert_eq(gs_runner_new(m->graph, &as_built, &r, &err), GS_OK, "%s", err.msg);
        run_hidden(m, r, hid, lg);
        gs_runner_free(r);
        for (uint32_t t = 0; t < N; t++)
            for (uint32_t v = 0; v < nv; v++) {
                double s = 0;
                for (uint32_t j = 0; j < d; j++)
                    s += (double)hid[t * d + j] * wf[(size_t)v * d + j];
                if (cap > 0)
                    s = cap * tanh(s / cap);
                cr_assert_float_eq(lg[(size_t)t * nv + v], s, 1e-4 * (1 + fabs(s)),
                                   "%s: row %u logit %u", files[fi], t, v);
            }
        const struct gs_runner_cfg with_passes = {.backend = "cpu"};
        cr_assert_eq(gs_runner_new(m->graph, &with_passes, &r, &err), GS_OK, "%s", err.msg);
        run_hidden(m, r, hid_cpu, lg_cpu);
        gs_runner_free(r);
        for (uint32_t i = 0; i < N * d; i++)
            cr_assert_float_eq(hid_cpu[i], hid[i], 2e-3f * (1 + fabsf(hid[i])), "%s: hidden %u",
                               files[fi], i);
        free(hid);
        free(lg);
        free(hid_cpu);
        free(lg_cpu);
        gs_model_free(m);
        gs_gguf_close(f);
    }
}
