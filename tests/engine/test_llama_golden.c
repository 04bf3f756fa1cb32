/*
 * tests/engine/test_llama_golden.c - the llama builder on the ref backend
 * against llama.cpp's greedy completions (../shared/golden/completions): the
 * prompt is evaluated as one step, then one token per step; every generated
 * token must equal the golden's, and the prompt logits must correlate.
 */
#include "tests/common/testutil.h"
#include "tests/engine/test_llama_util.h"

#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct golden_case {
    const char *golden; /* file stem under golden/completions */
    const char *model;  /* under models/ */
    enum gs_type kv;
    bool passes;
};

static void check_golden(const struct golden_case *c)
{
    char rel[256];
    snprintf(rel, sizeof(rel), "golden/completions/%s.json", c->golden);
    json_t *j = llama_load_golden(rel);
    int32_t *prompt, *completion;
    uint32_t n_prompt = llama_json_ids(json_object_get(j, "prompt_tokens"), &prompt);
    uint32_t n_gen = llama_json_ids(json_object_get(j, "completion_tokens"), &completion);
    bool stopped = json_is_true(json_object_get(j, "stopped_eog"));

    struct llama_rig r;
    snprintf(rel, sizeof(rel), "models/%s.gguf", c->model);
    llama_rig_open(&r, rel, c->kv, c->passes, n_prompt + n_gen + 1);
    uint32_t n_vocab = r.model->hp.n_vocab;
    cr_assert_eq(n_vocab, (uint32_t)json_integer_value(json_object_get(j, "n_vocab")));

    /* Every prompt row against llama.cpp's prompt logits. */
    const float *logits = llama_rig_step(&r, prompt, n_prompt, true);
    json_t *pl = json_object_get(j, "prompt_logits");
    double *ref = calloc(n_vocab, sizeof(*ref)), min_rho = 1;
    for (uint32_t t = 0; t < n_prompt; t++) {
        for (uint32_t v = 0; v < n_vocab; v++)
            ref[v] = json_real_value(json_array_get(json_array_get(pl, t), v));
        double rho = llama_pearson(logits + (size_t)t * n_vocab, ref, n_vocab);
        min_rho = rho < min_rho ? rho : min_rho;
    }
    cr_log_info("%s: prompt logits pearson >= %.7f", c->golden, min_rho);
    cr_assert(min_rho >= 0.9999, "%s: prompt logits pearson %.7f", c->golden, min_rho);
    int32_t next = llama_argmax(logits + (size_t)(n_prompt - 1) * n_vocab, n_vocab);
    for (uint32_t i = 0; i < n_gen; i++) {
        cr_assert_eq(next, completion[i], "%s: step %u: generated %d, golden %d", c->golden, i,
                     next, completion[i]);
        if (i + 1 == n_gen && stopped)
            break;
        logits = llama_rig_step(&r, &next, 1, false);
        next = llama_argmax(logits, n_vocab);
    }
    free(ref);
    free(prompt);
    free(completion);
    llama_rig_close(&r);
    json_decref(j);
}

static const char *const prompts[] = {"once-upon-a-time", "the-little-dog", "lily-and-tom",
                                      "tom-had-3-red-balls"};

static void run_family(const char *golden_model, const char *file_model, enum gs_type kv,
                       bool passes)
{
    for (size_t i = 0; i < GS_ARRAY_LEN(prompts); i++) {
        char stem[128];
        snprintf(stem, sizeof(stem), "%s__%s", golden_model, prompts[i]);
        struct golden_case c = {stem, file_model, kv, passes};
        check_golden(&c);
    }
}

Test(llama_golden, stories260K_f32_matches_greedy_completions)
{
    run_family("stories260K", "stories260K", GS_TYPE_F16, false);
}

Test(llama_golden, stories260K_f32_cache_matches_greedy_completions)
{
    run_family("stories260K-kvf32", "stories260K", GS_TYPE_F32, false);
}

Test(llama_golden, stories260K_f16_matches_greedy_completions)
{
    run_family("stories260K-F16", "stories260K-F16", GS_TYPE_F16, false);
}

Test(llama_golden, tiny_k_f32_matches_greedy_completions)
{
    run_family("tiny-k-F32", "tiny-k-F32", GS_TYPE_F16, false);
}

Test(llama_golden, tiny_k_f32_cache_matches_greedy_completions)
{
    run_family("tiny-k-kvf32", "tiny-k-F32", GS_TYPE_F32, false);
}

Test(llama_golden, passes_keep_greedy_completions)
{
    run_family("stories260K", "stories260K", GS_TYPE_F16, true);
    run_family("tiny-k-F32", "tiny-k-F32", GS_TYPE_F16, true);
}

/* Every prompt row's logits with all passes equal those without, teacher-forced. */
static void check_passes_equal(const char *model)
{
    static const int32_t tokens[] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315};
    uint32_t n = GS_ARRAY_LEN(tokens);
    struct llama_rig plain, opt;
    char rel[128];
    snprintf(rel, sizeof(rel), "models/%s.gguf", model);
    llama_rig_open(&plain, rel, GS_TYPE_F16, false, n);
    llama_rig_open(&opt, rel, GS_TYPE_F16, true, n);
    cr_assert_lt(opt.model->graph->n_nodes, plain.model->graph->n_nodes);
    const float *a = llama_rig_step(&plain, tokens, n, true);
    const float *b = llama_rig_step(&opt, tokens, n, true);
    uint32_t n_vocab = plain.model->hp.n_vocab;
    for (uint32_t i = 0; i < n * n_vocab; i++)
        cr_assert_float_eq(a[i], b[i], 1e-5f, "%s: logit %u: %g without passes, %g with", model, i,
                           a[i], b[i]);
    llama_rig_close(&plain);
    llama_rig_close(&opt);
}

Test(llama_golden, passes_keep_logits)
{
    check_passes_equal("stories260K");
    check_passes_equal("stories260K-Q4_0");
    check_passes_equal("tiny-k-Q4_K");
}
