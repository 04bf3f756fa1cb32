/*
 * tests/server/test_families.c - the daemon serves every supported family
 * beyond llama (the tiny arch files of ../shared/models/arch): it becomes
 * ready (the known-answer check passes at start), answers a completion,
 * streams a chat, and a validated request passes against ref.
 */
#define _GNU_SOURCE
#include "tests/common/testutil.h"
#include "tests/server/e2e.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void serve_family_with(const char *model, const char *opts)
{
    char extra[1024];
    snprintf(extra, sizeof(extra), "-m '%s' --backend cpu %s", gs_test_shared_path(model), opts);
    struct e2e_daemon d;
    e2e_start(&d, extra);
    struct e2e_resp r;
    e2e_http(&d, "GET", "/ready", NULL, NULL, &r);
    cr_assert_eq(r.status, 200, "%s: not ready: %s", model, r.body);
    e2e_resp_free(&r);

    e2e_http(&d, "POST", "/v1/completions",
             "{\"prompt\":\"Once upon a time\",\"max_tokens\":12,\"temperature\":0,"
             "\"validation\":true}",
             NULL, &r);
    cr_assert_eq(r.status, 200, "%s: %s", model, r.body);
    json_t *usage = json_object_get(r.json, "usage");
    cr_expect_gt(json_integer_value(json_object_get(usage, "completion_tokens")), 0, "%s", model);
    json_t *v = json_object_get(r.json, "validation");
    cr_expect(json_is_true(json_object_get(v, "passed")), "%s: validation failed: %s", model,
              r.body);
    e2e_resp_free(&r);

    e2e_http(&d, "POST", "/v1/chat/completions",
             "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell a story\"}],"
             "\"max_tokens\":8,\"temperature\":0,\"stream\":true}",
             NULL, &r);
    cr_assert_eq(r.status, 200, "%s: %s", model, r.body);
    bool done = false;
    json_t *evs = e2e_sse_events(r.body, &done);
    cr_expect(done, "%s: stream did not end with [DONE]", model);
    cr_expect_geq(json_array_size(evs), 2, "%s: %s", model, r.body);
    json_decref(evs);
    e2e_resp_free(&r);
    cr_expect_eq(e2e_stop(&d), 0);
}

static void serve_family(const char *model)
{
    serve_family_with(model, "");
}

Test(srv_families, qwen2_is_served, .timeout = 120)
{
    serve_family("models/arch/qwen2-tiny-F32.gguf");
}

Test(srv_families, qwen3_is_served, .timeout = 120)
{
    serve_family("models/arch/qwen3-tiny-F32.gguf");
}

Test(srv_families, phi3_is_served, .timeout = 120)
{
    serve_family("models/arch/phi3-tiny-F32.gguf");
}

Test(srv_families, gemma2_is_served, .timeout = 120)
{
    serve_family("models/arch/gemma2-tiny-F32.gguf");
}

Test(srv_families, gemma3_is_served, .timeout = 120)
{
    serve_family("models/arch/gemma3-tiny-F32.gguf");
}

/* With an F32 KV cache, as its goldens were made: this random 25-layer model carries
 * the f16 cache's rounding far (measured: min Pearson 0.9957 against ref over the
 * known-answer positions, under the 0.999 the check asks), so with the default f16
 * cache the daemon refuses to serve it (gemma3n_at_the_default_f16_kv_is_refused). */
Test(srv_families, gemma3n_is_served, .timeout = 120)
{
    serve_family_with("models/arch/gemma3n-tiny-F32.gguf", "--kv-type f32");
}

/* The daemon on `model` did not pass its known-answer check for the reason the check
 * exists to report: the served logits left ref's (a Pearson or KL figure under its
 * bound), not a failure to run. It is not ready and refuses to generate. */
static void expect_known_answer_refusal(const char *model, const char *opts)
{
    char extra[1024];
    snprintf(extra, sizeof(extra), "-m '%s' %s", model, opts);
    struct e2e_daemon d;
    e2e_start(&d, extra);
    struct e2e_resp r;
    e2e_http(&d, "GET", "/ready", NULL, NULL, &r);
    cr_expect_eq(r.status, 503, "%s: ready: %s", model, r.body);
    e2e_resp_free(&r);
    e2e_http(&d, "GET", "/health", NULL, NULL, &r);
    json_t *ka = json_object_get(r.json, "known_answer");
    const char *detail = json_string_value(json_object_get(ka, "detail"));
    cr_expect(json_is_false(json_object_get(ka, "passed")), "%s: %s", model, r.body);
    cr_expect(detail && strstr(detail, "failed against ref on 8 positions") &&
                  strstr(detail, "min Pearson"),
              "%s: %s", model, r.body);
    e2e_resp_free(&r);
    e2e_http(&d, "POST", "/v1/completions",
             "{\"prompt\":\"Once upon a time\",\"max_tokens\":4,\"validation\":true}", NULL, &r);
    cr_expect_eq(r.status, 503, "%s: %s", model, r.body);
    e2e_resp_free(&r);
    cr_expect_eq(e2e_stop(&d), 0);
}

/* Why the gemma3n-tiny daemons ask for an F32 cache: at the default f16 the check fails on
 * either backend, ref included, because validation's reference keeps K and V in F32
 * (scheduler/vjobs.c) and this random 25-layer model carries the f16 rounding of its
 * cache to the logits (min Pearson 0.9957 on cpu). */
Test(srv_families, gemma3n_at_the_default_f16_kv_is_refused, .timeout = 120)
{
    const char *model = gs_test_shared_path("models/arch/gemma3n-tiny-F32.gguf");
    char path[600];
    snprintf(path, sizeof(path), "%s", model);
    expect_known_answer_refusal(path, "--backend cpu");
    expect_known_answer_refusal(path, "--backend ref");
}

/* The Q8_0 file `graphserve quantize` makes of gemma3n-tiny is refused on cpu at either
 * cache type: its known-answer check measures the served logits leaving ref's (min
 * Pearson 0.81 at f32, 0.64 at f16 over the 8 positions). That is what the check should
 * report here. The kernels are not at fault: the file's early tensors equal llama.cpp's
 * to 5e-5 (family_golden's gemma3n_q8_0_from_quantize_matches_llama_cpp), and the file
 * is chaotic under q8_0 activation rounding: llama.cpp against itself with another
 * micro-batch size leaves the golden's thresholds as far (tests/engine/golden/README.md).
 * On ref with an F32 cache, the reference arithmetic itself, it is served: a validated
 * completion agrees with validation's runner exactly, and a chat streams through the
 * Gemma template. */
Test(srv_families, gemma3n_q8_0_is_refused_on_cpu_served_on_ref, .timeout = 300)
{
    char q8[600], exe[600], *cmd, *out;
    snprintf(q8, sizeof(q8), "%s/gemma3n-tiny-Q8_0.gguf", gs_test_tmpdir());
    snprintf(exe, sizeof(exe), "%s", gs_test_build_path("server/graphserve"));
    cr_assert(asprintf(&cmd, "'%s' quantize '%s' '%s' q8_0", exe,
                       gs_test_shared_path("models/arch/gemma3n-tiny-F32.gguf"), q8) > 0);
    cr_assert_eq(gs_test_run(cmd, 1, &out), 0, "%s", out);
    free(out);
    free(cmd);
    expect_known_answer_refusal(q8, "--backend cpu --kv-type f32");
    expect_known_answer_refusal(q8, "--backend cpu");

    char extra[1024];
    snprintf(extra, sizeof(extra), "-m '%s' --backend ref --kv-type f32 --chat-template gemma", q8);
    struct e2e_daemon d;
    e2e_start(&d, extra);
    struct e2e_resp r;
    e2e_http(&d, "GET", "/ready", NULL, NULL, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    e2e_resp_free(&r);
    e2e_http(&d, "POST", "/v1/completions",
             "{\"prompt\":\"Once upon a time\",\"max_tokens\":8,\"temperature\":0,"
             "\"ignore_eos\":true,\"validation\":true}",
             NULL, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *v = json_object_get(r.json, "validation");
    cr_expect(json_is_true(json_object_get(v, "passed")), "%s", r.body);
    cr_expect_eq(json_integer_value(json_object_get(v, "n_positions")), 8, "%s", r.body);
    cr_expect_eq(json_real_value(json_object_get(v, "max_abs_err")), 0.0, "%s", r.body);
    e2e_resp_free(&r);

    static const char msgs[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell a story\"}]";
    char body[512];
    snprintf(body, sizeof(body), "%s}", msgs);
    e2e_http(&d, "POST", "/apply-template", body, NULL, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_expect_str_eq(json_string_value(json_object_get(r.json, "prompt")),
                     "<start_of_turn>user\nTell a story<end_of_turn>\n<start_of_turn>model\n");
    e2e_resp_free(&r);
    snprintf(body, sizeof(body), "%s,\"max_tokens\":8,\"temperature\":0,\"stream\":true}", msgs);
    e2e_http(&d, "POST", "/v1/chat/completions", body, NULL, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    bool done = false;
    json_t *evs = e2e_sse_events(r.body, &done);
    cr_expect(done, "stream did not end with [DONE]");
    cr_expect_geq(json_array_size(evs), 2, "%s", r.body);
    json_decref(evs);
    e2e_resp_free(&r);
    cr_expect_eq(e2e_stop(&d), 0);
}
/* The streamed text of a completion stream, its pieces joined and hex-encoded: a random
 * model's byte tokens include NUL, which a C string would cut. */
static char *stream_text(const char *body)
{
    char *hex = calloc(1, 65536);
    size_t len = 0;
    bool done = false;
    for (const char *p = strstr(body, "data: "); p; p = strstr(p + 1, "data: ")) {
        const char *eol = strstr(p, "\n\n");
        if (!eol)
            break;
        if (!strncmp(p + 6, "[DONE]", 6)) {
            done = true;
            break;
        }
        json_error_t e;
        json_t *ev = json_loadb(p + 6, (size_t)(eol - p - 6), JSON_ALLOW_NUL, &e);
        cr_assert(ev, "bad event: %.200s", p);
        json_t *t = json_object_get(json_array_get(json_object_get(ev, "choices"), 0), "text");
        const char *txt = json_string_value(t);
        for (size_t i = 0; txt && i < json_string_length(t) && len + 3 < 65536; i++)
            len += (size_t)snprintf(hex + len, 65536 - len, "%02x", (unsigned char)txt[i]);
        json_decref(ev);
    }
    cr_expect(done, "stream without [DONE]: %.300s", body);
    return hex;
}

/* Gemma 3n batched in the daemon: n = 2 gives two equal greedy choices, and 16
 * streams at once each equal their request alone. On ref, whose rows do not depend
 * on what else is in the step, so equality is exact. kv_opts: the cache type. */
static void gemma3n_batches(const char *kv_opts)
{
    enum { N = 16 };
    char extra[1024];
    snprintf(extra, sizeof(extra), "-m '%s' --backend ref %s",
             gs_test_shared_path("models/arch/gemma3n-tiny-F32.gguf"), kv_opts);
    struct e2e_daemon d;
    e2e_start(&d, extra);
    struct e2e_resp r;
    e2e_http(&d, "POST", "/v1/completions",
             "{\"prompt\":\"Once upon a time\",\"max_tokens\":10,\"temperature\":0,\"n\":2}", NULL,
             &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *ch = json_object_get(r.json, "choices");
    cr_assert_eq(json_array_size(ch), 2, "%s", r.body);
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(ch, 0), "text")),
                     json_string_value(json_object_get(json_array_get(ch, 1), "text")));
    e2e_resp_free(&r);

    char *alone[N], *streamed[N], stream_bodies[N][256];
    const char *bodies[N];
    for (int i = 0; i < N; i++) {
        char *body = stream_bodies[i];
        bodies[i] = body;
        snprintf(body, sizeof(stream_bodies[i]),
                 "{\"prompt\":\"The little dog %d\",\"max_tokens\":10,\"temperature\":0,"
                 "\"ignore_eos\":true,\"stream\":true}",
                 i);
        e2e_http(&d, "POST", "/v1/completions", body, NULL, &r);
        cr_assert_eq(r.status, 200, "%s", r.body);
        alone[i] = stream_text(r.body);
        e2e_resp_free(&r);
    }
    e2e_post_at_once(&d, "/v1/completions", bodies, N, streamed);
    for (int i = 0; i < N; i++) {
        char *body = streamed[i];
        char *text = stream_text(body);
        cr_expect_str_eq(text, alone[i], "stream %d differs from its request alone", i);
        free(text);
        free(body);
        free(alone[i]);
    }
    cr_expect_eq(e2e_stop(&d), 0);
}

Test(srv_families, gemma3n_batches_streams_exactly, .timeout = 600)
{
    gemma3n_batches("--kv-type f32");
}
