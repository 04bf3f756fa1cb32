/*
 * tests/engine/test_family_golden.c - the family builders (engine/models/)
 * against llama.cpp's outputs on the tiny architecture files
 * (../shared/golden/arch, F32 KV cache), on the ref and the cpu backend.
 * The prompt is evaluated as one step with logits on every row, then one
 * token per step. F32 files: every greedy token equals the golden's and every
 * prompt row's logits correlate at Pearson >= 0.9999. Quantized files, each
 * against its own golden: Pearson >= 0.999 on the prompt rows, and the
 * greedy token equals the golden's on every step whose golden top-1 margin is
 * at least 0.5 (decoding follows the golden's tokens, so one near-tie does
 * not derail the steps after it).
 */
#include "tests/common/testutil.h"
#include "tests/engine/test_llama_util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check_golden(const char *model, const char *prompt, const char *backend, bool quant)
{
    char rel[256];
    snprintf(rel, sizeof(rel), "golden/arch/%s__%s.json", model, prompt);
    json_t *j = llama_load_golden(rel);
    int32_t *toks, *completion;
    uint32_t n_prompt = llama_json_ids(json_object_get(j, "prompt_tokens"), &toks);
    uint32_t n_gen = llama_json_ids(json_object_get(j, "completion_tokens"), &completion);
    json_t *steps = json_object_get(j, "steps");
    cr_assert_eq(json_array_size(steps), n_gen, "%s: steps and completion_tokens differ", rel);

    struct llama_rig r;
    snprintf(rel, sizeof(rel), "models/arch/%s.gguf", model);
    llama_rig_open(&r, rel, GS_TYPE_F32, true, n_prompt + n_gen + 1);
    llama_rig_use(&r, backend, 0);
    const uint32_t n_vocab = r.model->hp.n_vocab;
    cr_assert_eq(n_vocab, (uint32_t)json_integer_value(json_object_get(j, "n_vocab")));

    const float *logits = llama_rig_step(&r, toks, n_prompt, true);
    json_t *pl = json_object_get(j, "prompt_logits");
    double *want = calloc(n_vocab, sizeof(*want)), min_rho = 1;
    cr_assert(want);
    for (uint32_t t = 0; t < n_prompt; t++) {
        for (uint32_t v = 0; v < n_vocab; v++)
            want[v] = json_real_value(json_array_get(json_array_get(pl, t), v));
        double rho = llama_pearson(logits + (size_t)t * n_vocab, want, n_vocab);
        min_rho = rho < min_rho ? rho : min_rho;
    }
    const double min_pearson = quant ? 0.999 : 0.9999;
    cr_log_info("%s %s %s: prompt logits pearson >= %.7f", model, prompt, backend, min_rho);
    cr_assert(min_rho >= min_pearson, "%s %s on %s: prompt logits pearson %.7f", model, prompt,
              backend, min_rho);

    int32_t got = llama_argmax(logits + (size_t)(n_prompt - 1) * n_vocab, n_vocab);
    uint32_t n_judged = 0;
    for (uint32_t i = 0; i < n_gen; i++) {
        double margin = json_real_value(json_object_get(json_array_get(steps, i), "margin_to_2nd"));
        if (!quant || margin >= 0.5) {
            cr_assert_eq(got, completion[i], "%s %s on %s: step %u: generated %d, golden %d", model,
                         prompt, backend, i, got, completion[i]);
            n_judged++;
        }
        if (i + 1 == n_gen)
            break;
        /* F32 follows its own tokens (equal to the golden's); quantized follows the golden's. */
        logits = llama_rig_step(&r, &completion[i], 1, false);
        got = llama_argmax(logits, n_vocab);
    }
    cr_assert(n_judged > n_gen / 2, "%s %s: only %u of %u steps judged", model, prompt, n_judged,
              n_gen);
    free(want);
    free(toks);
    free(completion);
    llama_rig_close(&r);
    json_decref(j);
}

static void check_model(const char *model, bool quant)
{
    static const char *const prompts[] = {"once-upon-a-time", "the-little-dog"};
    static const char *const backends[] = {"ref", "cpu"};
    for (size_t b = 0; b < GS_ARRAY_LEN(backends); b++)
        for (size_t p = 0; p < GS_ARRAY_LEN(prompts); p++)
            check_golden(model, prompts[p], backends[b], quant);
}

Test(family_golden, qwen2_f32_matches_llama_cpp)
{
    check_model("qwen2-tiny-F32", false);
}

Test(family_golden, qwen2_q4_k_m_matches_its_golden)
{
    check_model("qwen2-tiny-Q4_K_M", true);
}

Test(family_golden, phi3_f32_matches_llama_cpp)
{
    check_model("phi3-tiny-F32", false);
}

Test(family_golden, phi3_q4_k_m_matches_its_golden)
{
    check_model("phi3-tiny-Q4_K_M", true);
}

Test(family_golden, qwen3_f32_matches_llama_cpp)
{
    check_model("qwen3-tiny-F32", false);
}

Test(family_golden, qwen3_q4_k_m_matches_its_golden)
{
    check_model("qwen3-tiny-Q4_K_M", true);
}

Test(family_golden, gemma2_f32_matches_llama_cpp)
{
    check_model("gemma2-tiny-F32", false);
}

Test(family_golden, gemma2_q8_0_matches_its_golden)
{
    check_model("gemma2-tiny-Q8_0", true);
}

Test(family_golden, gemma3_f32_matches_llama_cpp)
{
    check_model("gemma3-tiny-F32", false);
}

Test(family_golden, gemma3_q8_0_matches_its_golden)
{
    check_model("gemma3-tiny-Q8_0", true);
}
