/*
 * tests/server/test_http_spec.c - speculative decoding through the real
 * daemon: 16 concurrent greedy streams with --spec ngram give exactly what a
 * daemon without it gives each request alone; drafts were made and kept
 * (/metrics and the response's timings say so); a validated request passes
 * against ref with the served logits; a JSON-schema request gives the same
 * object with and without speculation. The same with --spec draft, the
 * stories260K Q4_0 quantization drafting for the F32 model, and a draft model
 * of another vocabulary refused at start.
 */
#define _GNU_SOURCE
#include "tests/common/testutil.h"
#include "tests/server/e2e.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_CLIENTS 16

/* Prompts whose continuations repeat what they already hold. */
static void prompt_of(int i, char *out, size_t cap)
{
    static const char *const who[] = {"Lily", "Tom", "Ben", "Sue"};
    static const char *const what[] = {"saw a big dog", "found a red ball", "went to the park",
                                       "had a little cat"};
    snprintf(out, cap, "%s %s. %s %s. %s %s. %s", who[i % 4], what[(i / 4) % 4], who[i % 4],
             what[(i / 4) % 4], who[i % 4], what[(i / 4) % 4], who[i % 4]);
}

static char *completion(const struct e2e_daemon *d, const char *body, json_t **timings)
{
    struct e2e_resp r;
    e2e_http(d, "POST", "/v1/completions", body, NULL, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    char *text = strdup(json_string_value(
        json_object_get(json_array_get(json_object_get(r.json, "choices"), 0), "text")));
    if (timings)
        *timings = json_incref(json_object_get(r.json, "timings"));
    e2e_resp_free(&r);
    return text;
}

/* Concatenated text of a completions SSE body. */
static char *stream_text(const char *body)
{
    bool done;
    json_t *ev = e2e_sse_events(body, &done);
    cr_expect(done, "stream without [DONE]: %s", body);
    size_t cap = 8192, len = 0;
    char *text = calloc(1, cap);
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e)
    {
        json_t *c = json_array_get(json_object_get(e, "choices"), 0);
        const char *t = json_string_value(json_object_get(c, "text"));
        if (t && len + strlen(t) < cap) {
            memcpy(text + len, t, strlen(t));
            len += strlen(t);
        }
    }
    json_decref(ev);
    return text;
}

/* The daemon's flags for --spec draft with the Q4_0 quantization drafting. */
static const char *draft_flags(const char *more)
{
    static char flags[4400];
    snprintf(flags, sizeof(flags), "--backend cpu --spec draft --draft-model %s %s",
             gs_test_shared_path("models/stories260K-Q4_0.gguf"), more);
    return flags;
}

static void sixteen_streams(const char *spec_flags)
{
    struct e2e_daemon plain, spec;
    e2e_start(&plain, "--backend cpu");
    e2e_start(&spec, spec_flags);
    char *alone[N_CLIENTS], *streamed[N_CLIENTS], stream_bodies[N_CLIENTS][512];
    const char *bodies[N_CLIENTS];
    for (int i = 0; i < N_CLIENTS; i++) {
        char prompt[256], body[512];
        prompt_of(i, prompt, sizeof(prompt));
        snprintf(body, sizeof(body), "{\"prompt\":\"%s\",\"max_tokens\":64,\"temperature\":0}",
                 prompt);
        alone[i] = completion(&plain, body, NULL);
        snprintf(stream_bodies[i], sizeof(stream_bodies[i]),
                 "{\"prompt\":\"%s\",\"max_tokens\":64,\"temperature\":0,\"stream\":true}", prompt);
        bodies[i] = stream_bodies[i];
    }
    e2e_post_at_once(&spec, "/v1/completions", bodies, N_CLIENTS, streamed);
    for (int i = 0; i < N_CLIENTS; i++) {
        char *text = stream_text(streamed[i]);
        cr_expect_str_eq(text, alone[i], "client %d differs from plain decoding", i);
        free(text);
        free(streamed[i]);
    }
    /* One alone on the speculating daemon: its timings report the drafts. */
    char prompt[256], body[512];
    prompt_of(0, prompt, sizeof(prompt));
    snprintf(body, sizeof(body), "{\"prompt\":\"%s\",\"max_tokens\":64,\"temperature\":0}",
             prompt);
    json_t *t;
    char *text = completion(&spec, body, &t);
    cr_expect_str_eq(text, alone[0]);
    free(text);
    cr_assert(json_is_object(t));
    json_int_t drafted = json_integer_value(json_object_get(t, "draft_n"));
    json_int_t kept = json_integer_value(json_object_get(t, "draft_n_accepted"));
    cr_expect_gt(drafted, 0, "no draft for a repetitive prompt: %s", json_dumps(t, 0));
    cr_expect_gt(kept, 0);
    cr_expect_leq(kept, drafted);
    cr_expect_gt(json_integer_value(json_object_get(t, "draft_verify_steps")), 0);
    cr_expect(json_is_number(json_object_get(t, "draft_ms")));
    json_decref(t);
    for (int i = 0; i < N_CLIENTS; i++)
        free(alone[i]);

    struct e2e_resp m;
    e2e_http(&spec, "GET", "/metrics", NULL, NULL, &m);
    double d = e2e_metric(m.body, "graphserve_spec_draft_tokens_total");
    double a = e2e_metric(m.body, "graphserve_spec_accepted_tokens_total");
    double v = e2e_metric(m.body, "graphserve_spec_verify_steps_total");
    cr_expect_gt(a, 0);
    cr_expect_lt(a, d + 1);
    cr_expect_gt(v, 0);
    cr_expect_eq(e2e_metric(m.body, "graphserve_spec_tokens_per_verify_step"), (a + v) / v);
    cr_expect_eq(e2e_metric(m.body, "graphserve_kv_pages{state=\"used\"}"), 0);
    /* the draft model's own pool is in the memory ledger */
    double draft_kv = e2e_metric(m.body, "graphserve_memory_bytes{kind=\"draft_kv_pool\"}");
    if (strstr(spec_flags, "--draft-model"))
        cr_expect_gt(draft_kv, 0);
    else
        cr_expect_eq(draft_kv, 0);
    e2e_resp_free(&m);
    e2e_http(&plain, "GET", "/metrics", NULL, NULL, &m);
    cr_expect_eq(e2e_metric(m.body, "graphserve_spec_draft_tokens_total"), 0);
    e2e_resp_free(&m);
    cr_expect_eq(e2e_stop(&spec), 0);
    cr_expect_eq(e2e_stop(&plain), 0);
}

Test(http_spec, sixteen_streams_equal_plain_decoding, .timeout = 300)
{
    sixteen_streams("--backend cpu --spec ngram --spec-max-draft 6");
}

Test(http_spec, sixteen_streams_drafted_by_a_model_equal_plain_decoding, .timeout = 300)
{
    sixteen_streams(draft_flags("--spec-max-draft 6"));
}

/* The served logits of a speculating sequence are the target's: validation
 * against ref passes; and structured output holds its grammar with drafts
 * cut at what the grammar refuses, answering what plain decoding answers. */
static void validation_and_structured(const char *spec_flags)
{
    struct e2e_daemon plain, spec;
    e2e_start(&plain, "--backend cpu");
    e2e_start(&spec, spec_flags);
    char prompt[256], body[1024];
    prompt_of(5, prompt, sizeof(prompt));
    snprintf(body, sizeof(body),
             "{\"prompt\":\"%s\",\"max_tokens\":48,\"temperature\":0,\"validation\":true}",
             prompt);
    struct e2e_resp r;
    e2e_http(&spec, "POST", "/v1/completions", body, NULL, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *val = json_object_get(r.json, "validation");
    cr_expect(json_is_true(json_object_get(val, "passed")), "validation failed: %s", r.body);
    cr_expect_gt(json_integer_value(json_object_get(json_object_get(r.json, "timings"),
                                                    "draft_n_accepted")),
                 0, "%s", r.body);
    e2e_resp_free(&r);

    snprintf(body, sizeof(body),
             "{\"prompt\":\"%s\",\"max_tokens\":48,\"temperature\":0,"
             "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"s\","
             "\"schema\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
             "\"n\":{\"type\":\"integer\"}},\"required\":[\"name\",\"n\"]}}}}",
             prompt);
    char *want = completion(&plain, body, NULL);
    char *got = completion(&spec, body, NULL);
    cr_expect_str_eq(got, want);
    free(want);
    free(got);
    cr_expect_eq(e2e_stop(&spec), 0);
    cr_expect_eq(e2e_stop(&plain), 0);
}

Test(http_spec, validation_and_structured_output, .timeout = 300)
{
    validation_and_structured("--backend cpu --spec ngram");
}

Test(http_spec, validation_and_structured_output_with_a_draft_model, .timeout = 300)
{
    validation_and_structured(draft_flags(""));
}

/* A draft model of another vocabulary stops the start with the difference,
 * and --draft-model without --spec draft is refused rather than ignored. */
Test(http_spec, a_draft_model_of_another_vocabulary_is_refused)
{
    /* gs_test_shared_path's buffer is overwritten by its next call */
    char bin[4200], target[4200], other[4200], q4[4200], cmd[18000];
    snprintf(bin, sizeof(bin), "%s", gs_test_build_path("server/graphserve"));
    snprintf(target, sizeof(target), "%s", gs_test_shared_path("models/stories260K.gguf"));
    snprintf(other, sizeof(other), "%s", gs_test_shared_path("models/llama-2-tiny-random.gguf"));
    snprintf(q4, sizeof(q4), "%s", gs_test_shared_path("models/stories260K-Q4_0.gguf"));
    char *out = NULL;
    snprintf(cmd, sizeof(cmd), "%s serve -m %s --port 0 --spec draft --draft-model %s", bin, target,
             other);
    cr_expect_neq(gs_test_run(cmd, 1, &out), 0, "started: %s", out);
    cr_expect(strstr(out, "its vocabulary has 32000 tokens, the target's 512"), "%s", out);
    free(out);
    snprintf(cmd, sizeof(cmd), "%s serve -m %s --port 0 --draft-model %s", bin, target, q4);
    cr_expect_neq(gs_test_run(cmd, 1, &out), 0, "started: %s", out);
    cr_expect(strstr(out, "draft-model is for --spec draft (spec is off)"), "%s", out);
    free(out);
}
