/*
 * tests/server/test_families.c - the daemon serves every supported family
 * beyond llama (the tiny arch files of ../shared/models/arch): it becomes
 * ready (the known-answer check passes at start), answers a completion,
 * streams a chat, and a validated request passes against ref.
 */
#include "tests/common/testutil.h"
#include "tests/server/e2e.h"

#include <criterion/criterion.h>
#include <stdio.h>
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
 * cache the daemon refuses to serve it. */
Test(srv_families, gemma3n_is_served, .timeout = 120)
{
    serve_family_with("models/arch/gemma3n-tiny-F32.gguf", "--kv-type f32");
}
