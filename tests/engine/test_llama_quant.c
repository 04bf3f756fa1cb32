/*
 * tests/engine/test_llama_quant.c - quantized models on the ref backend,
 * teacher-forced on llama.cpp's prompt + completion tokens
 * (../shared/golden/completions). llama.cpp multiplies quantized weights by
 * activations quantized to 8 bits while ref dequantizes the weights and stays
 * in F32, so logits agree closely rather than exactly: Pearson >= 0.999 on
 * every prompt row and on last_logits; the same top-1 on every generated step
 * whose margin to the second token is >= 0.5, and on >= 95% of all steps.
 */
#include "tests/common/testutil.h"
#include "tests/engine/test_llama_util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>

static void check_teacher_forced(const char *golden)
{
    char rel[256];
    snprintf(rel, sizeof(rel), "golden/completions/%s.json", golden);
    json_t *j = llama_load_golden(rel);
    int32_t *prompt, *completion;
    uint32_t n_prompt = llama_json_ids(json_object_get(j, "prompt_tokens"), &prompt);
    uint32_t n_gen = llama_json_ids(json_object_get(j, "completion_tokens"), &completion);
    const char *model = json_string_value(json_object_get(j, "model"));
    const char *kv =
        json_string_value(json_object_get(j, "settings")
                              ? json_object_get(json_object_get(j, "settings"), "kv_cache_type")
                              : NULL);
    cr_assert(model && kv);

    /* Step i's logits are those of row n_prompt - 1 + i. */
    uint32_t n = n_prompt + n_gen - 1;
    int32_t *tokens = calloc(n, sizeof(*tokens));
    for (uint32_t i = 0; i < n; i++)
        tokens[i] = i < n_prompt ? prompt[i] : completion[i - n_prompt];
    struct llama_rig r;
    snprintf(rel, sizeof(rel), "models/%s", model);
    llama_rig_open(&r, rel, kv[1] == '1' ? GS_TYPE_F16 : GS_TYPE_F32, false, n);
    uint32_t n_vocab = r.model->hp.n_vocab;
    const float *logits = llama_rig_step(&r, tokens, n, true);

    double *ref = calloc(n_vocab, sizeof(*ref)), min_rho = 1;
    json_t *pl = json_object_get(j, "prompt_logits");
    for (uint32_t t = 0; t < n_prompt; t++) {
        for (uint32_t v = 0; v < n_vocab; v++)
            ref[v] = json_real_value(json_array_get(json_array_get(pl, t), v));
        double rho = llama_pearson(logits + (size_t)t * n_vocab, ref, n_vocab);
        min_rho = rho < min_rho ? rho : min_rho;
    }
    json_t *last = json_object_get(j, "last_logits");
    for (uint32_t v = 0; v < n_vocab; v++)
        ref[v] = json_real_value(json_array_get(last, v));
    double rho_last = llama_pearson(logits + (size_t)(n_prompt - 1) * n_vocab, ref, n_vocab);
    min_rho = rho_last < min_rho ? rho_last : min_rho;

    json_t *steps = json_object_get(j, "steps");
    uint32_t agree = 0, n_steps = (uint32_t)json_array_size(steps);
    for (uint32_t i = 0; i < n_steps; i++) {
        json_t *st = json_array_get(steps, i);
        int32_t want = (int32_t)json_integer_value(json_object_get(st, "token"));
        double margin = json_real_value(json_object_get(st, "margin_to_2nd"));
        int32_t got = llama_argmax(logits + (size_t)(n_prompt - 1 + i) * n_vocab, n_vocab);
        agree += got == want;
        cr_expect(got == want || margin < 0.5, "%s: step %u: top-1 %d, golden %d with margin %.3f",
                  golden, i, got, want, margin);
    }
    double rate = (double)agree / n_steps;
    cr_log_info("%s: pearson >= %.6f, top-1 %u/%u (%.1f%%)", golden, min_rho, agree, n_steps,
                100 * rate);
    cr_expect(min_rho >= 0.999, "%s: pearson %.6f", golden, min_rho);
    cr_expect(rate >= 0.95, "%s: top-1 agreement %.3f", golden, rate);
    free(ref);
    free(tokens);
    free(prompt);
    free(completion);
    llama_rig_close(&r);
    json_decref(j);
}

static const char *const prompts[] = {"once-upon-a-time", "the-little-dog", "lily-and-tom",
                                      "tom-had-3-red-balls"};

static void check_model(const char *stem)
{
    for (size_t i = 0; i < GS_ARRAY_LEN(prompts); i++) {
        char name[128];
        snprintf(name, sizeof(name), "%s__%s", stem, prompts[i]);
        check_teacher_forced(name);
    }
}

Test(llama_quant, stories260K_q8_0)
{
    check_model("stories260K-Q8_0");
}
Test(llama_quant, stories260K_q5_1)
{
    check_model("stories260K-Q5_1");
}
Test(llama_quant, stories260K_q5_0)
{
    check_model("stories260K-Q5_0");
}
Test(llama_quant, stories260K_q4_1)
{
    check_model("stories260K-Q4_1");
}
Test(llama_quant, stories260K_q4_0)
{
    check_model("stories260K-Q4_0");
}
Test(llama_quant, stories260K_q4_k_m_fallback)
{
    check_model("stories260K-Q4_K_M-fallback");
}
Test(llama_quant, tiny_k_q8_0)
{
    check_model("tiny-k-Q8_0");
}
Test(llama_quant, tiny_k_q6_k)
{
    check_model("tiny-k-Q6_K");
}
Test(llama_quant, tiny_k_q5_k_m)
{
    check_model("tiny-k-Q5_K_M");
}
Test(llama_quant, tiny_k_q5_k)
{
    check_model("tiny-k-Q5_K");
}
Test(llama_quant, tiny_k_q4_k_m)
{
    check_model("tiny-k-Q4_K_M");
}
Test(llama_quant, tiny_k_q4_k)
{
    check_model("tiny-k-Q4_K");
}
Test(llama_quant, tiny_k_q3_k_m)
{
    check_model("tiny-k-Q3_K_M");
}
Test(llama_quant, tiny_k_q2_k)
{
    check_model("tiny-k-Q2_K");
}
Test(llama_quant, llama_2_tiny_random)
{
    check_teacher_forced("llama-2-tiny-random__once-upon-a-time");
}
