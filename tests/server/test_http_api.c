/*
 * tests/server/test_http_api.c - the real daemon on 127.0.0.1, spoken to with
 * curl: every endpoint, every error status with its OpenAI error object,
 * greedy output against llama.cpp's recorded answers for the same model,
 * streaming, stop strings, n, logprobs and usage.
 */
#define _GNU_SOURCE
#include "tests/common/testutil.h"
#include "tests/server/e2e.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct e2e_daemon d;

static void start_default(void)
{
    e2e_start(&d, "");
}

static void stop_daemon(void)
{
    cr_expect_eq(e2e_stop(&d), 0, "the daemon did not exit 0 after SIGTERM");
}

static json_t *golden(const char *name)
{
    char rel[256];
    snprintf(rel, sizeof(rel), "golden/server/%s", name);
    return gs_test_load_json(gs_test_shared_path(rel));
}

TestSuite(http_api, .init = start_default, .fini = stop_daemon, .timeout = 120);

Test(http_api, health_ready_models)
{
    struct e2e_resp r;
    e2e_http(&d, "GET", "/health", NULL, NULL, &r);
    cr_expect_eq(r.status, 200);
    cr_expect_str_eq(json_string_value(json_object_get(r.json, "status")), "ok");
    e2e_resp_free(&r);
    e2e_http(&d, "GET", "/ready", NULL, NULL, &r);
    cr_expect_eq(r.status, 200);
    e2e_resp_free(&r);
    e2e_http(&d, "GET", "/v1/models", NULL, NULL, &r);
    cr_assert_eq(r.status, 200);
    json_t *m = json_array_get(json_object_get(r.json, "data"), 0);
    cr_expect_str_eq(json_string_value(json_object_get(r.json, "object")), "list");
    cr_expect_str_eq(json_string_value(json_object_get(m, "id")), "stories260K");
    cr_expect_str_eq(json_string_value(json_object_get(m, "object")), "model");
    json_t *g = golden("v1_models.json");
    json_t *gm = json_object_get(json_array_get(json_object_get(g, "data"), 0), "meta");
    cr_expect(json_equal(json_object_get(json_object_get(m, "meta"), "n_vocab"),
                         json_object_get(gm, "n_vocab")));
    cr_expect(json_equal(json_object_get(json_object_get(m, "meta"), "n_params"),
                         json_object_get(gm, "n_params")));
    json_decref(g);
    e2e_resp_free(&r);
}

/* /tokenize and /detokenize give what llama.cpp's server gave for the same text. */
Test(http_api, tokenize_detokenize_match_llama_cpp)
{
    struct e2e_resp r;
    e2e_http(&d, "POST", "/tokenize",
             "{\"content\":\"Once upon a time\",\"add_special\":true,\"with_pieces\":true}", NULL,
             &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *g = golden("tokenize.json");
    cr_expect(json_equal(r.json, g), "got %s", r.body);
    json_decref(g);
    e2e_resp_free(&r);
    e2e_http(&d, "POST", "/detokenize", "{\"tokens\":[1,403,407,261,378]}", NULL, &r);
    cr_assert_eq(r.status, 200);
    g = golden("detokenize.json");
    cr_expect(json_equal(r.json, g), "got %s", r.body);
    json_decref(g);
    e2e_resp_free(&r);
}

static void expect_error(const char *method, const char *path, const char *body, int status,
                         const char *type, const char *code, const char *param)
{
    struct e2e_resp r;
    e2e_http(&d, method, path, body, NULL, &r);
    cr_expect_eq(r.status, status, "%s %s %s -> %d %s", method, path, body ? body : "", r.status,
                 r.body);
    json_t *e = json_object_get(r.json, "error");
    cr_assert(json_is_object(e), "no error object: %s", r.body);
    cr_expect(json_is_string(json_object_get(e, "message")));
    cr_expect_str_eq(json_string_value(json_object_get(e, "type")), type, "%s", r.body);
    if (code)
        cr_expect_str_eq(json_string_value(json_object_get(e, "code")), code, "%s", r.body);
    else
        cr_expect(json_is_null(json_object_get(e, "code")), "%s", r.body);
    if (param)
        cr_expect_str_eq(json_string_value(json_object_get(e, "param")), param, "%s", r.body);
    cr_expect(strstr(r.headers, "content-type: application/json"));
    e2e_resp_free(&r);
}

Test(http_api, errors_have_status_and_openai_object)
{
    const char *chat = "/v1/chat/completions", *cmpl = "/v1/completions";
    expect_error("POST", chat, "{\"messages\": no", 400, "invalid_request_error", NULL, NULL);
    expect_error("POST", chat, "{}", 400, "invalid_request_error", NULL, "messages");
    expect_error("POST", cmpl, "{\"prompt\":\"a\",\"temperature\":\"x\"}", 400,
                 "invalid_request_error", NULL, "temperature");
    expect_error("POST", cmpl, "{\"prompt\":\"a\",\"top_p\":7}", 400, "invalid_request_error", NULL,
                 "top_p");
    expect_error("POST", cmpl, "{\"prompt\":[1,2,512]}", 400, "invalid_request_error", NULL,
                 "prompt");
    expect_error("POST", cmpl, "{\"prompt\":\"Once\",\"max_tokens\":2047}", 400,
                 "invalid_request_error", "context_length_exceeded", "prompt");
    expect_error("POST", chat,
                 "{\"model\":\"gpt-4\",\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}", 404,
                 "invalid_request_error", "model_not_found", "model");
    expect_error("GET", "/v1/nothing", NULL, 404, "not_found_error", "not_found", NULL);
    expect_error("GET", chat, NULL, 405, "invalid_request_error", "method_not_allowed", NULL);
    expect_error("POST", "/health", "{}", 405, "invalid_request_error", "method_not_allowed", NULL);
}

/* A prompt as long as the context is refused, not truncated. */
Test(http_api, long_prompt_is_refused_not_truncated)
{
    size_t n = 2100;
    char *body = malloc(n * 6 + 64);
    cr_assert(body);
    size_t w = (size_t)sprintf(body, "{\"prompt\":[1");
    for (size_t i = 1; i < n; i++)
        w += (size_t)sprintf(body + w, ",%d", 300 + (int)(i % 100));
    sprintf(body + w, "],\"max_tokens\":1}");
    expect_error("POST", "/v1/completions", body, 400, "invalid_request_error",
                 "context_length_exceeded", "prompt");
    free(body);
}

Test(http_api, allowed_methods_are_listed_on_405)
{
    struct e2e_resp r;
    e2e_http(&d, "DELETE", "/v1/models", NULL, NULL, &r);
    cr_expect_eq(r.status, 405);
    cr_expect(strstr(r.headers, "allow: get, head"), "%s", r.headers);
    e2e_resp_free(&r);
}

static const char *completion_text(json_t *resp, size_t i)
{
    return json_string_value(
        json_object_get(json_array_get(json_object_get(resp, "choices"), i), "text"));
}

/* Greedy decoding gives the text llama.cpp's server gave for the same request. */
Test(http_api, greedy_completion_matches_llama_cpp)
{
    struct e2e_resp r;
    e2e_http(&d, "POST", "/v1/completions",
             "{\"prompt\":\"Once upon a time\",\"max_tokens\":64,\"temperature\":0,\"foo\":1}",
             NULL, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *g = golden("v1_completions__once-upon-a-time__temp0.json");
    cr_expect_str_eq(completion_text(r.json, 0), completion_text(g, 0));
    json_t *u = json_object_get(r.json, "usage");
    cr_expect(json_equal(json_object_get(u, "prompt_tokens"),
                         json_object_get(json_object_get(g, "usage"), "prompt_tokens")));
    cr_expect_eq(json_integer_value(json_object_get(u, "completion_tokens")), 64);
    cr_expect_eq(json_integer_value(json_object_get(u, "total_tokens")), 69);
    cr_expect(json_is_integer(
        json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens")));
    cr_expect_str_eq(json_string_value(json_object_get(
                         json_array_get(json_object_get(r.json, "choices"), 0), "finish_reason")),
                     "length");
    cr_expect_str_eq(json_string_value(json_object_get(r.json, "object")), "text_completion");
    cr_expect(json_is_object(json_object_get(r.json, "timings")));
    /* Unknown fields are ignored and listed. */
    cr_expect(strstr(r.headers, "x-ignored-fields: foo"), "%s", r.headers);
    cr_expect(strstr(r.headers, "x-request-id: cmpl-"), "%s", r.headers);
    json_decref(g);
    e2e_resp_free(&r);
}

Test(http_api, stop_string_ends_before_it)
{
    struct e2e_resp r;
    e2e_http(&d, "POST", "/v1/completions",
             "{\"prompt\":\"Once upon a time\",\"max_tokens\":64,\"temperature\":0,"
             "\"stop\":[\"Lily\"]}",
             NULL, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *g = golden("v1_completions__stop.json");
    cr_expect_str_eq(completion_text(r.json, 0), completion_text(g, 0));
    cr_expect_str_eq(json_string_value(json_object_get(
                         json_array_get(json_object_get(r.json, "choices"), 0), "finish_reason")),
                     "stop");
    json_decref(g);
    e2e_resp_free(&r);
}

/* Logprobs of the chosen tokens agree with llama.cpp's for the same prompt. */
Test(http_api, logprobs_match_llama_cpp)
{
    struct e2e_resp r;
    e2e_http(&d, "POST", "/v1/completions",
             "{\"prompt\":\"Once upon a time\",\"max_tokens\":4,\"temperature\":0,\"logprobs\":3}",
             NULL, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *lp = json_object_get(json_array_get(json_object_get(r.json, "choices"), 0), "logprobs");
    json_t *g = golden("v1_completions__logprobs3.json");
    json_t *gc = json_object_get(
        json_object_get(json_array_get(json_object_get(g, "choices"), 0), "logprobs"), "content");
    json_t *toks = json_object_get(lp, "tokens"), *lps = json_object_get(lp, "token_logprobs");
    json_t *tops = json_object_get(lp, "top_logprobs");
    cr_assert_eq(json_array_size(toks), 4, "%s", r.body);
    for (size_t i = 0; i < 4; i++) {
        json_t *ge = json_array_get(gc, i);
        cr_expect_str_eq(json_string_value(json_array_get(toks, i)),
                         json_string_value(json_object_get(ge, "token")));
        double want = json_number_value(json_object_get(ge, "logprob"));
        double got = json_number_value(json_array_get(lps, i));
        cr_expect(fabs(got - want) < 1e-3, "token %zu: logprob %g, llama.cpp %g", i, got, want);
        json_t *top = json_array_get(tops, i);
        cr_expect_eq(json_object_size(top), 3);
        size_t k;
        json_t *gt;
        json_array_foreach(json_object_get(ge, "top_logprobs"), k, gt)
        {
            json_t *v = json_object_get(top, json_string_value(json_object_get(gt, "token")));
            cr_expect(v && fabs(json_number_value(v) -
                                json_number_value(json_object_get(gt, "logprob"))) < 1e-3,
                      "token %zu alternative %zu", i, k);
        }
    }
    json_decref(g);
    e2e_resp_free(&r);
}

Test(http_api, chat_logprobs_have_openai_shape)
{
    struct e2e_resp r;
    e2e_http(&d, "POST", "/v1/chat/completions",
             "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me a story\"}],\"max_tokens\":3,"
             "\"temperature\":0,\"logprobs\":true,\"top_logprobs\":2}",
             NULL, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *ch = json_array_get(json_object_get(r.json, "choices"), 0);
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(ch, "message"), "role")),
                     "assistant");
    json_t *content = json_object_get(json_object_get(ch, "logprobs"), "content");
    cr_assert_eq(json_array_size(content), 3, "%s", r.body);
    json_t *e = json_array_get(content, 0);
    cr_expect(json_is_string(json_object_get(e, "token")));
    cr_expect(json_number_value(json_object_get(e, "logprob")) <= 0);
    cr_expect(json_is_array(json_object_get(e, "bytes")));
    cr_expect_eq(json_array_size(json_object_get(e, "top_logprobs")), 2);
    /* Greedy: the chosen token is the most likely one. */
    cr_expect(
        json_equal(json_object_get(json_array_get(json_object_get(e, "top_logprobs"), 0), "token"),
                   json_object_get(e, "token")));
    e2e_resp_free(&r);
}

Test(http_api, n2_gives_two_choices)
{
    struct e2e_resp r;
    e2e_http(&d, "POST", "/v1/completions",
             "{\"prompt\":\"Once upon a time\",\"max_tokens\":8,\"temperature\":0,\"n\":2}", NULL,
             &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *choices = json_object_get(r.json, "choices");
    cr_assert_eq(json_array_size(choices), 2);
    cr_expect_str_eq(completion_text(r.json, 0), completion_text(r.json, 1));
    cr_expect_eq(json_integer_value(json_object_get(json_array_get(choices, 1), "index")), 1);
    cr_expect_eq(
        json_integer_value(json_object_get(json_object_get(r.json, "usage"), "completion_tokens")),
        16);
    cr_expect_eq(
        json_integer_value(json_object_get(json_object_get(r.json, "usage"), "prompt_tokens")), 5);
    e2e_resp_free(&r);
}

/* The deltas of a stream add up to the non-streamed answer; the first delta
 * has the role, the last a finish_reason, then usage and [DONE]. */
Test(http_api, chat_stream_equals_non_stream)
{
#define REQ(extra)                                                                                 \
    "{\"messages\":[{\"role\":\"system\",\"content\":\"You tell stories.\"},"                      \
    "{\"role\":\"user\",\"content\":\"Tell me about Lily.\"}],"                                    \
    "\"max_tokens\":40,\"temperature\":0" extra "}"
    char body[512];
    snprintf(body, sizeof(body), "%s", REQ(""));
    struct e2e_resp whole;
    e2e_http(&d, "POST", "/v1/chat/completions", body, NULL, &whole);
    cr_assert_eq(whole.status, 200, "%s", whole.body);
    snprintf(body, sizeof(body), "%s",
             REQ(",\"stream\":true,\"stream_options\":{\"include_usage\":true}"));
#undef REQ
    struct e2e_resp r;
    e2e_http(&d, "POST", "/v1/chat/completions", body, NULL, &r);
    cr_assert_eq(r.status, 200);
    cr_expect(strstr(r.headers, "content-type: text/event-stream"), "%s", r.headers);
    bool done;
    json_t *ev = e2e_sse_events(r.body, &done);
    cr_expect(done, "no [DONE]");
    size_t n = json_array_size(ev);
    cr_assert_geq(n, 3);
    json_t *first = json_object_get(
        json_array_get(json_object_get(json_array_get(ev, 0), "choices"), 0), "delta");
    cr_expect_str_eq(json_string_value(json_object_get(first, "role")), "assistant");
    char text[4096] = "";
    const char *finish = NULL;
    for (size_t i = 0; i + 1 < n; i++) {
        json_t *e = json_array_get(ev, i);
        cr_expect_str_eq(json_string_value(json_object_get(e, "object")), "chat.completion.chunk");
        cr_expect(
            json_equal(json_object_get(e, "id"), json_object_get(json_array_get(ev, 0), "id")));
        json_t *c = json_array_get(json_object_get(e, "choices"), 0);
        const char *delta =
            json_string_value(json_object_get(json_object_get(c, "delta"), "content"));
        if (delta)
            strncat(text, delta, sizeof(text) - strlen(text) - 1);
        if (json_is_string(json_object_get(c, "finish_reason"))) {
            cr_expect(!finish, "two finish_reasons");
            finish = json_string_value(json_object_get(c, "finish_reason"));
        }
    }
    json_t *wc = json_array_get(json_object_get(whole.json, "choices"), 0);
    cr_expect_str_eq(text,
                     json_string_value(json_object_get(json_object_get(wc, "message"), "content")));
    cr_expect_str_eq(finish, json_string_value(json_object_get(wc, "finish_reason")));
    json_t *last = json_array_get(ev, n - 1);
    cr_expect_eq(json_array_size(json_object_get(last, "choices")), 0);
    /* The second request may find its prompt in the prefix cache; the rest is equal. */
    json_t *su = json_object_get(last, "usage"), *wu = json_object_get(whole.json, "usage");
    cr_expect(
        json_equal(json_object_get(su, "prompt_tokens"), json_object_get(wu, "prompt_tokens")));
    cr_expect(json_equal(json_object_get(su, "completion_tokens"),
                         json_object_get(wu, "completion_tokens")));
    cr_expect(json_is_integer(
        json_object_get(json_object_get(su, "prompt_tokens_details"), "cached_tokens")));
    json_decref(ev);
    e2e_resp_free(&r);
    e2e_resp_free(&whole);
}

Test(http_api, completion_stream_with_stop_and_n2)
{
    struct e2e_resp r;
    e2e_http(&d, "POST", "/v1/completions",
             "{\"prompt\":\"Once upon a time\",\"max_tokens\":64,\"temperature\":0,\"n\":2,"
             "\"stop\":\"Lily\",\"stream\":true}",
             NULL, &r);
    cr_assert_eq(r.status, 200);
    bool done;
    json_t *ev = e2e_sse_events(r.body, &done);
    cr_expect(done);
    char text[2][1024] = {"", ""};
    int finishes = 0;
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e)
    {
        json_t *c = json_array_get(json_object_get(e, "choices"), 0);
        json_int_t idx = json_integer_value(json_object_get(c, "index"));
        cr_assert(idx == 0 || idx == 1);
        strncat(text[idx], json_string_value(json_object_get(c, "text")), 1000 - strlen(text[idx]));
        if (json_is_string(json_object_get(c, "finish_reason"))) {
            cr_expect_str_eq(json_string_value(json_object_get(c, "finish_reason")), "stop");
            finishes++;
        }
    }
    cr_expect_eq(finishes, 2);
    json_t *g = golden("v1_completions__stop.json");
    cr_expect_str_eq(text[0], completion_text(g, 0));
    cr_expect_str_eq(text[1], completion_text(g, 0));
    json_decref(g);
    json_decref(ev);
    e2e_resp_free(&r);
}

Test(http_api, metrics_count_requests_by_endpoint_and_status)
{
    struct e2e_resp r;
    e2e_http(&d, "GET", "/health", NULL, NULL, &r);
    e2e_resp_free(&r);
    e2e_http(&d, "POST", "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":3}", NULL, &r);
    e2e_resp_free(&r);
    e2e_http(&d, "POST", "/v1/completions", "{\"prompt\":7}", NULL, &r);
    e2e_resp_free(&r);
    e2e_http(&d, "GET", "/metrics", NULL, NULL, &r);
    cr_assert_eq(r.status, 200);
    cr_expect(strstr(r.headers, "content-type: text/plain; version=0.0.4"));
    cr_expect_eq(
        e2e_metric(r.body, "graphserve_http_requests_total{endpoint=\"/health\",status=\"200\"}"),
        1);
    cr_expect_eq(
        e2e_metric(r.body,
                   "graphserve_http_requests_total{endpoint=\"/v1/completions\",status=\"200\"}"),
        1);
    cr_expect_eq(
        e2e_metric(r.body,
                   "graphserve_http_requests_total{endpoint=\"/v1/completions\",status=\"400\"}"),
        1);
    cr_expect_eq(e2e_metric(r.body, "graphserve_generation_tokens_total"), 3);
    cr_expect_eq(e2e_metric(r.body, "graphserve_prompt_tokens_total"), 2);
    cr_expect_eq(e2e_metric(r.body, "graphserve_time_to_first_token_seconds_count"), 1);
    cr_expect_eq(e2e_metric(r.body, "graphserve_inter_token_latency_seconds_count"), 2);
    cr_expect_eq(e2e_metric(r.body, "graphserve_kv_pages{state=\"used\"}"), 0);
    cr_expect_gt(e2e_metric(r.body, "graphserve_kv_pages_capacity"), 0);
    /* every engine step lands in the batch-size histogram */
    cr_expect_gt(e2e_metric(r.body, "graphserve_batch_tokens_per_step_count"), 0);
    cr_expect_eq(e2e_metric(r.body, "graphserve_batch_tokens_per_step_count"),
                 e2e_metric(r.body, "graphserve_engine_steps_total"));
    cr_expect_eq(e2e_metric(r.body, "graphserve_batch_tokens_per_step_bucket{le=\"+Inf\"}"),
                 e2e_metric(r.body, "graphserve_engine_steps_total"));
    cr_expect_geq(e2e_metric(r.body, "graphserve_batch_tokens_per_step_sum"),
                  e2e_metric(r.body, "graphserve_engine_steps_total"));
    /* Prometheus' own linter accepts the exposition (./dev installs promtool). */
    char cmd[700], *out;
    snprintf(cmd, sizeof(cmd), "promtool check metrics < '%s'", e2e_body_file(r.body));
    cr_expect_eq(gs_test_run(cmd, 1, &out), 0, "promtool: %s", out);
    free(out);
    e2e_resp_free(&r);
}

/* ---- daemons with other options ----------------------------------------------------------- */

Test(http_opts, api_keys_guard_v1_and_metrics_only)
{
    struct e2e_daemon k;
    e2e_start(&k, "--api-key sekret --api-key other-key");
    struct e2e_resp r;
    e2e_http(&k, "GET", "/v1/models", NULL, NULL, &r);
    cr_expect_eq(r.status, 401);
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(r.json, "error"), "type")),
                     "authentication_error");
    e2e_resp_free(&r);
    e2e_http(&k, "GET", "/v1/models", NULL, "-H 'Authorization: Bearer wrong'", &r);
    cr_expect_eq(r.status, 401);
    e2e_resp_free(&r);
    e2e_http(&k, "GET", "/metrics", NULL, NULL, &r);
    cr_expect_eq(r.status, 401);
    e2e_resp_free(&r);
    e2e_http(&k, "POST", "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":1}", NULL, &r);
    cr_expect_eq(r.status, 401);
    e2e_resp_free(&r);
    e2e_http(&k, "GET", "/v1/models", NULL, "-H 'Authorization: Bearer other-key'", &r);
    cr_expect_eq(r.status, 200);
    e2e_resp_free(&r);
    e2e_http(&k, "GET", "/health", NULL, NULL, &r);
    cr_expect_eq(r.status, 200);
    e2e_resp_free(&r);
    e2e_http(&k, "GET", "/ready", NULL, NULL, &r);
    cr_expect_eq(r.status, 200);
    e2e_resp_free(&r);
    cr_expect_eq(e2e_stop(&k), 0);
}

Test(http_opts, body_over_the_cap_is_413)
{
    struct e2e_daemon k;
    e2e_start(&k, "--max-body-bytes 2KiB");
    size_t n = 4000;
    char *body = malloc(n + 64);
    cr_assert(body);
    int w = sprintf(body, "{\"prompt\":\"");
    memset(body + w, 'a', n);
    strcpy(body + w + n, "\"}");
    struct e2e_resp r;
    e2e_http(&k, "POST", "/v1/completions", body, NULL, &r);
    cr_expect_eq(r.status, 413, "%s", r.body);
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(r.json, "error"), "code")),
                     "request_too_large");
    e2e_resp_free(&r);
    /* The same body sent chunked (no Content-Length) is refused too. */
    e2e_http(&k, "POST", "/v1/completions", body, "-H 'Transfer-Encoding: chunked'", &r);
    cr_expect_eq(r.status, 413, "%s", r.body);
    e2e_resp_free(&r);
    free(body);
    e2e_http(&k, "POST", "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":2}", NULL, &r);
    cr_expect_eq(r.status, 200);
    e2e_resp_free(&r);
    cr_expect_eq(e2e_stop(&k), 0);
}

/* With one running sequence and a queue of one, a burst gets 429s with
 * Retry-After while the accepted ones complete. The engine is held by the
 * test gate (GS_TEST_STEP_GATE) until every one of the six has been admitted
 * or refused (the daemon's in-flight gauge plus its 429 counter reach six),
 * so no completion can make room during the burst on a machine of any
 * speed; then the gate opens and the accepted ones run to the end. */
Test(http_opts, full_queue_is_429_with_retry_after, .timeout = 120)
{
    char gate[600];
    snprintf(gate, sizeof(gate), "%s/gate-%d", gs_test_tmpdir(), (int)getpid());
    struct e2e_daemon k;
    e2e_start_gated(&k, "GS_TEST_STEP_GATE", gate,
                    "--backend ref --max-seqs 1 --max-queue 1 --max-batch-tokens 64");
    char body[600];
    snprintf(body, sizeof(body), "%s",
             e2e_body_file("{\"prompt\":\"Once upon a time\",\"max_tokens\":8,"
                           "\"ignore_eos\":true,\"temperature\":0}"));
    const char *script =
        "import http.client, os, sys, threading, time\n"
        "port, body, gate = int(sys.argv[1]), open(sys.argv[2], 'rb').read(), sys.argv[3]\n"
        "hang = float(sys.argv[4])\n"
        "out = [None] * 6\n"
        "def client(i):\n"
        "    c = http.client.HTTPConnection('127.0.0.1', port, timeout=hang)\n"
        "    c.request('POST', '/v1/completions', body, {'Content-Type': 'application/json'})\n"
        "    r = c.getresponse(); r.read()\n"
        "    out[i] = 'status %d retry-after %s' % (r.status, r.getheader('Retry-After'))\n"
        "def metric(text, name):\n"
        "    for l in text.splitlines():\n"
        "        if l.startswith(name + ' '): return float(l.split()[1])\n"
        "    return -1\n"
        "ts = [threading.Thread(target=client, args=(i,)) for i in range(6)]\n"
        "for t in ts: t.start()\n"
        "end = time.monotonic() + hang\n"
        "while time.monotonic() < end:\n"
        "    c = http.client.HTTPConnection('127.0.0.1', port, timeout=hang)\n"
        "    c.request('GET', '/metrics'); m = c.getresponse().read().decode(); c.close()\n"
        "    held = metric(m, 'graphserve_requests_in_flight')\n"
        "    refused = metric(m, 'graphserve_rejected_busy_total')\n"
        "    if held + refused >= 6: break\n"
        "    time.sleep(0.02)\n"
        "print('held %d refused %d while the gate was closed' % (held, refused))\n"
        "os.unlink(gate)\n"
        "for t in ts: t.join()\n"
        "print('\\n'.join(str(o) for o in out))\n";
    char cmd[1400], *out;
    snprintf(cmd, sizeof(cmd), "python3 '%s' %d '%s' '%s' %d", e2e_body_file(script), k.port, body,
             gate, E2E_HANG_S);
    cr_assert_eq(gs_test_run(cmd, 1, &out), 0, "%s", out);
    int n429 = 0, n200 = 0;
    for (const char *p = out; (p = strstr(p, "status ")); p++) {
        int st = atoi(p + 7);
        n429 += st == 429;
        n200 += st == 200;
    }
    /* One or two are accepted: the queue holds one, and the first may or may
     * not have moved on to running when the others arrive; nothing ends
     * while the gate is closed, so the others are all refused. */
    cr_expect_geq(n200, 1, "%s", out);
    cr_expect_leq(n200, 2, "%s", out);
    cr_expect_geq(n429, 4, "%s", out);
    cr_expect_eq(n429 + n200, 6, "%s", out);
    cr_expect(strstr(out, "status 429 retry-after 1"), "%s", out);
    free(out);
    cr_expect_eq(e2e_stop(&k), 0);
}

/* Runs script with bash (for /dev/tcp), output in *out. */
static int run_bash(const char *script, char **out)
{
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "bash '%s'", e2e_body_file(script));
    return gs_test_run(cmd, 1, out);
}

/* A client that sends half a request line is dropped after --conn-timeout-s
 * (no slowloris): not at once, and by that timeout, the only one that can cut
 * it here (--request-timeout-s is off, and the wait's own guard is far
 * longer). The daemon keeps serving. */
Test(http_opts, slow_client_is_cut_off_by_the_connection_timeout, .timeout = 120)
{
    struct e2e_daemon k;
    e2e_start(&k, "--conn-timeout-s 1 --request-timeout-s 0");
    char *cmd, *out;
    cr_assert(asprintf(&cmd,
                       "exec 5<>/dev/tcp/127.0.0.1/%d; printf 'GET /health HT' >&5; "
                       "s=$(date +%%s%%N); timeout %d cat <&5 >/dev/null; echo cat=$?; "
                       "e=$(date +%%s%%N); echo slow_ms=$(( (e - s) / 1000000 ))",
                       k.port, E2E_HANG_S / 3) > 0);
    cr_assert_eq(run_bash(cmd, &out), 0, "%s", out);
    int slow_ms = -1;
    sscanf(strstr(out, "slow_ms=") ? strstr(out, "slow_ms=") : "", "slow_ms=%d", &slow_ms);
    /* A timer fires no earlier than set, however slow the machine. */
    cr_expect_geq(slow_ms, 500, "slow client dropped after %d ms", slow_ms);
    cr_expect(strstr(out, "cat=0"), "the daemon never cut the slow client: %s", out);
    free(cmd);
    free(out);
    struct e2e_resp r;
    e2e_http(&k, "GET", "/metrics", NULL, NULL, &r);
    cr_expect_eq(e2e_metric(r.body, "graphserve_connections_cut_total{reason=\"request_timeout\"}"),
                 0, "cut by something else than --conn-timeout-s");
    e2e_resp_free(&r);
    e2e_http(&k, "GET", "/health", NULL, NULL, &r);
    cr_expect_eq(r.status, 200);
    e2e_resp_free(&r);
    cr_expect_eq(e2e_stop(&k), 0);
}

/* Connections over --max-conns-per-ip are closed at once; a header block
 * over --max-header-bytes is refused. The three held connections each get an
 * answer first (keep-alive), so they are counted before the fourth comes;
 * the default timeouts are far longer than this takes. The daemon keeps
 * serving. */
Test(http_opts, excess_and_oversized_clients_are_cut_off, .timeout = 120)
{
    struct e2e_daemon k;
    e2e_start(&k, "--max-conns-per-ip 3 --max-header-bytes 4KiB");
    char *cmd, *out;
    cr_assert(asprintf(&cmd,
                       "req='GET /health HTTP/1.1\\r\\nHost: localhost\\r\\n\\r\\n'; "
                       "for fd in 3 4 5; do eval \"exec $fd<>/dev/tcp/127.0.0.1/%d\"; "
                       "printf \"$req\" >&$fd; read -r line <&$fd; echo \"held $fd $line\"; "
                       "done; exec 6<>/dev/tcp/127.0.0.1/%d; printf \"$req\" >&6 2>/dev/null; "
                       "timeout %d cat <&6 | head -c 12; echo",
                       k.port, k.port, E2E_HANG_S / 3) > 0);
    run_bash(cmd, &out);
    cr_expect(strstr(out, "held 5 HTTP/1.1 200"), "the three first were not all served: %s", out);
    cr_expect(!strstr(out, "\nHTTP/1.1 200"), "a 4th connection from one address was served: %s",
              out);
    free(cmd);
    free(out);
    char big[6000] = "-H 'X-Big: ";
    memset(big + strlen(big), 'a', 5000);
    strcat(big, "'");
    struct e2e_resp r;
    e2e_http(&k, "GET", "/health", NULL, big, &r);
    cr_expect(r.status == 431 || r.status == 413 || r.status == 400, "status %d", r.status);
    e2e_resp_free(&r);
    e2e_http(&k, "GET", "/health", NULL, NULL, &r);
    cr_expect_eq(r.status, 200);
    e2e_resp_free(&r);
    cr_expect_eq(e2e_stop(&k), 0);
}

/* The choices of one request share the prompt's KV pages: choices after the
 * first find its full pages in the prefix cache and compute only the rest. */
Test(http_api, n_choices_share_prompt_pages)
{
    char body[2048] = "{\"prompt\":\"";
    for (int i = 0; i < 20; i++)
        strcat(body, "Once upon a time there was a girl. ");
    strcat(body, "\",\"max_tokens\":4,\"temperature\":0,\"n\":4}");
    struct e2e_resp r;
    e2e_http(&d, "POST", "/v1/completions", body, NULL, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_int_t n_prompt =
        json_integer_value(json_object_get(json_object_get(r.json, "usage"), "prompt_tokens"));
    for (size_t i = 1; i < 4; i++)
        cr_expect_str_eq(completion_text(r.json, i), completion_text(r.json, 0));
    e2e_resp_free(&r);
    e2e_http(&d, "GET", "/metrics", NULL, NULL, &r);
    double hits = e2e_metric(r.body, "graphserve_prefix_cache_hit_tokens_total");
    double computed = e2e_metric(r.body, "graphserve_prompt_tokens_computed_total");
    /* Three choices reuse every full page (16 tokens each) of the prompt, and
     * a choice admitted after choice 0 ended also the rest of the prompt but
     * its last token (choice 0 left its partial page cached). */
    cr_expect_geq(hits, 3 * (double)(n_prompt / 16 * 16), "%s", r.body);
    cr_expect_leq(hits, 3 * (double)(n_prompt - 1), "%s", r.body);
    cr_expect_lt(computed, 2 * (double)n_prompt);
    e2e_resp_free(&r);
}

Test(http_api, model_by_id)
{
    struct e2e_resp r;
    e2e_http(&d, "GET", "/v1/models/stories260K", NULL, NULL, &r);
    cr_expect_eq(r.status, 200, "%s", r.body);
    cr_expect_str_eq(json_string_value(json_object_get(r.json, "id")), "stories260K");
    e2e_resp_free(&r);
    e2e_http(&d, "GET", "/v1/models/gpt-4", NULL, NULL, &r);
    cr_expect_eq(r.status, 404);
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(r.json, "error"), "code")),
                     "model_not_found");
    e2e_resp_free(&r);
    e2e_http(&d, "GET", "/v1/models/a/b", NULL, NULL, &r);
    cr_expect_eq(r.status, 404);
    e2e_resp_free(&r);
}

/* Garbage and malformed HTTP over raw sockets: every connection is answered
 * or closed, and the daemon keeps serving (and exits cleanly, checked by the
 * sanitizer build). The fixed requests are read until the daemon closes them
 * (at most --conn-timeout-s for a half request); the random ones are left
 * after 20 ms either way, since only the daemon's survival is judged. */
Test(http_opts, malformed_http_leaves_the_daemon_serving, .timeout = 120)
{
    struct e2e_daemon k;
    e2e_start(&k, "--conn-timeout-s 1");
    const char *script =
        "import random, socket, sys\n"
        "port, hang = int(sys.argv[1]), float(sys.argv[2]); rnd = random.Random(7)\n"
        "fixed = [b'GET /health HTTP/1.1\\r\\nHost: localhost\\r\\nContent-Length: -5\\r\\n\\r\\n',\n"
        "  b'POST /v1/completions HTTP/1.1\\r\\nHost: localhost\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n"
        "zzz\\r\\n',\n"
        "  b'POST /v1/completions HTTP/1.1\\r\\nHost: localhost\\r\\nContent-Length: 3\\r\\n\\r\\n{\"p',\n"
        "  b'GET /' + b'a' * 70000 + b' HTTP/1.1\\r\\n\\r\\n',\n"
        "  b'\\x00\\xff\\r\\n\\r\\n', b'GET /health HTTP/9.9\\r\\n\\r\\n',\n"
        "  b'POST /tokenize HTTP/1.1\\r\\nHost: localhost\\r\\nContent-Length: 20\\r\\n\\r\\n"
        "{\"content\":\"\\xff\\xfe\"}']\n"
        "blobs = fixed + [bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 400)))\n"
        "                 for _ in range(150)]\n"
        "for i, b in enumerate(blobs):\n"
        "    s = socket.create_connection(('127.0.0.1', port), timeout=hang)\n"
        "    s.settimeout(hang if i < len(fixed) else 0.02)\n"
        "    try:\n"
        "        s.sendall(b)\n"
        "        while s.recv(65536): pass\n"
        "    except OSError: pass\n"
        "    s.close()\n"
        "print('sent', len(blobs))\n";
    char cmd[800], *out;
    snprintf(cmd, sizeof(cmd), "python3 '%s' %d %d", e2e_body_file(script), k.port, E2E_HANG_S);
    cr_expect_eq(gs_test_run(cmd, 1, &out), 0, "%s", out);
    cr_expect(strstr(out, "sent 157"), "%s", out);
    free(out);
    struct e2e_resp r;
    e2e_http(&k, "GET", "/health", NULL, NULL, &r);
    cr_expect_eq(r.status, 200);
    e2e_resp_free(&r);
    e2e_http(&k, "POST", "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":2}", NULL, &r);
    cr_expect_eq(r.status, 200);
    e2e_resp_free(&r);
    cr_expect_eq(e2e_stop(&k), 0);
}

/* Under systemd: the daemon serves the listening socket it was passed
 * (LISTEN_FDS), reports READY=1 once serving and STOPPING=1 on SIGTERM to
 * $NOTIFY_SOCKET, and exits 0. */
Test(http_opts, systemd_socket_activation_and_notify, .timeout = E2E_HANG_S)
{
    const char *script =
        "import os, socket, sys, time, urllib.request, signal\n"
        "bin, model = sys.argv[1], sys.argv[2]\n"
        "ls = socket.socket(); ls.bind(('127.0.0.1', 0)); ls.listen(16)\n"
        "port = ls.getsockname()[1]\n"
        "nd = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
        "path = sys.argv[3]\n"
        "nd.bind(path); nd.settimeout(float(sys.argv[4]))\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os.dup2(ls.fileno(), 3); os.set_inheritable(3, True)\n"
        "    os.environ.update(LISTEN_FDS='1', LISTEN_PID=str(os.getpid()), NOTIFY_SOCKET=path)\n"
        "    devnull = os.open(os.devnull, os.O_WRONLY); os.dup2(devnull, 1); os.dup2(devnull, 2)\n"
        "    os.execv(bin, [bin, 'serve', '-m', model, '--port', '1'])\n"
        "ls.close()\n"
        "try:\n"
        "    msgs = [nd.recv(4096).decode()]\n"
        "    url = 'http://127.0.0.1:%d/health' % port\n"
        "    body = urllib.request.urlopen(url, timeout=float(sys.argv[4])).read().decode()\n"
        "    os.kill(pid, signal.SIGTERM)\n"
        "    msgs.append(nd.recv(4096).decode())\n"
        "    _, st = os.waitpid(pid, 0)\n"
        "finally:\n"
        "    os.unlink(path)\n"
        "    if 'st' not in dir(): os.kill(pid, signal.SIGKILL)\n"
        "print('ready' if msgs[0].startswith('READY=1') else 'no-ready:' + msgs[0])\n"
        "print('health', body)\n"
        "print('stopping' if msgs[1] == 'STOPPING=1' else 'no-stopping:' + msgs[1])\n"
        "print('exit', os.waitstatus_to_exitcode(st))\n";
    char py[600], cmd[2000], *out;
    snprintf(py, sizeof(py), "%s", e2e_body_file(script));
    char bin[600], model[600];
    snprintf(bin, sizeof(bin), "%s", gs_test_build_path("server/graphserve"));
    snprintf(model, sizeof(model), "%s", gs_test_shared_path("models/stories260K.gguf"));
    /* Each wait inside is a hang guard only; `timeout` ends the script (and
     * its daemon, in its finally) before the test's own timeout would. */
    snprintf(cmd, sizeof(cmd), "timeout %d python3 '%s' '%s' '%s' '%s/notify-%d' %d",
             E2E_HANG_S - 20, py, bin, model, gs_test_tmpdir(), (int)getpid(), E2E_HANG_S / 3);
    cr_expect_eq(gs_test_run(cmd, 1, &out), 0, "%s", out);
    /* /health also carries the known-answer check's verdict. */
    cr_expect(strstr(out, "ready\nhealth {\"status\":\"ok\",\"known_answer\":{\"passed\":true"),
              "%s", out);
    cr_expect(strstr(out, "}\nstopping\nexit 0\n"), "%s", out);
    free(out);
}

/* A long prompt is tokenized off the loop thread: while it is, /health still
 * answers. The prompt is then refused for the context, not cut. The client
 * waits until the daemon has read every byte of the big request (its socket's
 * queues in /proc/net/tcp are empty), then asks /health three times on a
 * connection it holds open, and looks after each answer whether the big
 * request's answer has arrived yet: a loop thread busy tokenizing could
 * answer at most one of them before it. Should a fast machine finish the
 * tokenizing first, the big request is sent again. */
Test(http_api, long_prompt_tokenizes_off_the_loop)
{
    size_t n = 1900000;
    char *body = malloc(n + 64);
    cr_assert(body);
    int w = sprintf(body, "{\"prompt\":\"");
    for (size_t i = 0; i < n; i++)
        body[w + i] = "Once upon a time there was a girl "[i % 34];
    strcpy(body + w + n, "\"}");
    char big[600];
    snprintf(big, sizeof(big), "%s", e2e_body_file(body));
    free(body);
    const char *script =
        "import http.client, select, socket, sys, time\n"
        "port, body, hang = int(sys.argv[1]), open(sys.argv[2], 'rb').read(), float(sys.argv[3])\n"
        "def queues(lport, rport):\n"
        "    for l in open('/proc/net/tcp').read().splitlines()[1:]:\n"
        "        f = l.split()\n"
        "        lp, rp = int(f[1].split(':')[1], 16), int(f[2].split(':')[1], 16)\n"
        "        if (lp, rp) == (lport, rport):\n"
        "            tx, rx = f[4].split(':')\n"
        "            return int(tx, 16), int(rx, 16)\n"
        "    return None\n"
        "h = http.client.HTTPConnection('127.0.0.1', port, timeout=hang)\n"
        "def health():\n"
        "    h.request('GET', '/health'); r = h.getresponse(); r.read(); return r.status\n"
        "print('warm', health())\n"
        "head = ('POST /v1/completions HTTP/1.1\\r\\nHost: localhost\\r\\n'\n"
        "        'Content-Type: application/json\\r\\nContent-Length: %d\\r\\n'\n"
        "        'Connection: close\\r\\n\\r\\n' % len(body)).encode()\n"
        "for attempt in range(20):\n"
        "    b = socket.create_connection(('127.0.0.1', port), timeout=hang)\n"
        "    b.sendall(head + body)\n"
        "    me = b.getsockname()[1]\n"
        "    end = time.monotonic() + hang\n"
        "    while time.monotonic() < end:\n"
        "        mine, theirs = queues(me, port), queues(port, me)\n"
        "        if not mine or not theirs or (mine[0] == 0 and theirs[1] == 0): break\n"
        "        time.sleep(0.001)\n"
        "    answered = 0\n"
        "    while answered < 3 and not select.select([b], [], [], 0)[0]:\n"
        "        if health() != 200: break\n"
        "        answered += select.select([b], [], [], 0)[0] == []\n"
        "    resp = b''\n"
        "    while True:\n"
        "        d = b.recv(65536)\n"
        "        if not d: break\n"
        "        resp += d\n"
        "    b.close()\n"
        "    print('attempt %d: health answered %d times before the big request; big %s' %\n"
        "          (attempt, answered, resp.split(b'\\r\\n')[0].decode()))\n"
        "    if answered == 3: break\n"
        "if answered == 3 and b'context_length_exceeded' in resp: print('overlap ok')\n";
    char cmd[1400], *out;
    snprintf(cmd, sizeof(cmd), "python3 '%s' %d '%s' %d", e2e_body_file(script), d.port, big,
             E2E_HANG_S);
    cr_expect_eq(gs_test_run(cmd, 1, &out), 0, "%s", out);
    cr_expect(strstr(out, "big HTTP/1.1 400"), "%s", out);
    cr_expect(strstr(out, "overlap ok"), "no /health answer while the prompt was tokenized:\n%s",
              out);
    cr_log_info("%s", out);
    free(out);
}

/* --cors-origins: a browser's preflight is answered without the key, answers to the
 * origin carry Access-Control-Allow-Origin (streams too), other origins are refused by
 * the host check (loopback, no keys) and their preflight too. */
Test(http_opts, cors_origins_answer_preflights_and_mark_responses, .timeout = 120)
{
    struct e2e_daemon c;
    e2e_start(&c, "--cors-origins http://app.example:3000");
    struct e2e_resp r;
    e2e_http(&c, "OPTIONS", "/v1/chat/completions", NULL,
             "-H 'Origin: http://app.example:3000' -H 'Access-Control-Request-Method: POST' "
             "-H 'Access-Control-Request-Headers: authorization, content-type'",
             &r);
    cr_expect_eq(r.status, 204, "%s", r.body);
    cr_expect(strstr(r.headers, "access-control-allow-origin: http://app.example:3000"), "%s",
              r.headers);
    cr_expect(strstr(r.headers, "access-control-allow-methods: post"), "%s", r.headers);
    cr_expect(strstr(r.headers, "access-control-allow-headers: authorization, content-type"),
              "%s", r.headers);
    e2e_resp_free(&r);
    e2e_http(&c, "POST", "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":2}",
             "-H 'Origin: http://app.example:3000'", &r);
    cr_expect_eq(r.status, 200, "%s", r.body);
    cr_expect(strstr(r.headers, "access-control-allow-origin: http://app.example:3000"), "%s",
              r.headers);
    cr_expect(strstr(r.headers, "vary: origin"), "%s", r.headers);
    e2e_resp_free(&r);
    e2e_http(&c, "POST", "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":2,\"stream\":true}",
             "-H 'Origin: http://app.example:3000'", &r);
    cr_expect_eq(r.status, 200, "%s", r.body);
    cr_expect(strstr(r.headers, "access-control-allow-origin: http://app.example:3000"), "%s",
              r.headers);
    e2e_resp_free(&r);
    /* No Origin: no CORS headers. */
    e2e_http(&c, "GET", "/v1/models", NULL, NULL, &r);
    cr_expect_eq(r.status, 200);
    cr_expect_null(strstr(r.headers, "access-control-allow-origin"), "%s", r.headers);
    e2e_resp_free(&r);
    /* Another origin: refused, and told what would accept it. */
    e2e_http(&c, "GET", "/v1/models", NULL, "-H 'Origin: http://evil.example'", &r);
    cr_expect_eq(r.status, 403, "%s", r.body);
    cr_expect(strstr(r.body, "--cors-origins"), "%s", r.body);
    cr_expect_null(strstr(r.headers, "access-control-allow-origin"), "%s", r.headers);
    e2e_resp_free(&r);
    e2e_http(&c, "OPTIONS", "/v1/models", NULL, "-H 'Origin: http://evil.example'", &r);
    cr_expect_eq(r.status, 403, "%s", r.body);
    e2e_resp_free(&r);
    cr_expect_eq(e2e_stop(&c), 0);
}

/* Without --cors-origins an OPTIONS request is refused with an error object. */
Test(http_api, options_without_cors_is_refused)
{
    struct e2e_resp r;
    e2e_http(&d, "OPTIONS", "/v1/models", NULL, NULL, &r);
    cr_expect_eq(r.status, 403, "%s", r.body);
    cr_expect(json_object_get(r.json, "error"), "%s", r.body);
    e2e_resp_free(&r);
}

/* --served-model-name: the first name is the id responses carry, every name is
 * accepted and listed, an unknown one is a 404; --accept-any-model-name takes any. */
Test(http_opts, served_model_names_and_any_name, .timeout = 120)
{
    struct e2e_daemon m;
    e2e_start(&m, "--served-model-name tiny-story --served-model-name gpt-4o-mini");
    struct e2e_resp r;
    e2e_http(&m, "GET", "/v1/models", NULL, NULL, &r);
    cr_expect_eq(r.status, 200);
    json_t *data = json_object_get(r.json, "data");
    cr_assert_eq(json_array_size(data), 2, "%s", r.body);
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(data, 0), "id")),
                     "tiny-story");
    cr_expect_str_eq(json_string_value(json_object_get(json_array_get(data, 1), "id")),
                     "gpt-4o-mini");
    e2e_resp_free(&r);
    e2e_http(&m, "POST", "/v1/completions",
             "{\"model\":\"gpt-4o-mini\",\"prompt\":\"Once\",\"max_tokens\":2}", NULL, &r);
    cr_expect_eq(r.status, 200, "%s", r.body);
    cr_expect_str_eq(json_string_value(json_object_get(r.json, "model")), "tiny-story");
    e2e_resp_free(&r);
    e2e_http(&m, "GET", "/v1/models/gpt-4o-mini", NULL, NULL, &r);
    cr_expect_eq(r.status, 200, "%s", r.body);
    e2e_resp_free(&r);
    e2e_http(&m, "POST", "/v1/completions",
             "{\"model\":\"stories260K\",\"prompt\":\"Once\",\"max_tokens\":2}", NULL, &r);
    cr_expect_eq(r.status, 404, "the file name is not a name once names are given: %s", r.body);
    e2e_resp_free(&r);
    cr_expect_eq(e2e_stop(&m), 0);

    e2e_start(&m, "--accept-any-model-name");
    e2e_http(&m, "POST", "/v1/chat/completions",
             "{\"model\":\"claude-whatever\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],"
             "\"max_tokens\":2}",
             NULL, &r);
    cr_expect_eq(r.status, 200, "%s", r.body);
    cr_expect_str_eq(json_string_value(json_object_get(r.json, "model")), "stories260K");
    e2e_resp_free(&r);
    cr_expect_eq(e2e_stop(&m), 0);
}

/* What a cluster's endpoint picker reads (the Gateway API Inference Extension): queue and
 * running gauges, KV usage as one 0..1 gauge consistent with the page counts, the pool's
 * shape as an info gauge under vLLM's label names too; and --metrics-public opens
 * /metrics, and nothing else, to a scraper without a key. */
Test(http_opts, cluster_gauges_and_metrics_public, .timeout = 120)
{
    struct e2e_daemon k;
    e2e_start(&k, "--api-key sekret --metrics-public");
    struct e2e_resp r;
    e2e_http(&k, "POST", "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":4}",
             "-H 'Authorization: Bearer sekret'", &r);
    cr_expect_eq(r.status, 200, "%s", r.body);
    e2e_resp_free(&r);
    e2e_http(&k, "GET", "/v1/models", NULL, NULL, &r);
    cr_expect_eq(r.status, 401, "only /metrics is opened");
    e2e_resp_free(&r);
    e2e_http(&k, "GET", "/metrics", NULL, NULL, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_expect_geq(e2e_metric(r.body, "graphserve_requests_waiting"), 0);
    cr_expect_geq(e2e_metric(r.body, "graphserve_requests_running"), 0);
    cr_expect(strstr(r.body, "# TYPE graphserve_kv_cache_usage_ratio gauge\n"));
    double ratio = e2e_metric(r.body, "graphserve_kv_cache_usage_ratio");
    double used = e2e_metric(r.body, "graphserve_kv_pages{state=\"used\"}");
    double cap = e2e_metric(r.body, "graphserve_kv_pages_capacity");
    cr_assert_gt(cap, 0, "%s", r.body);
    cr_expect(ratio >= 0 && ratio <= 1 && fabs(ratio - used / cap) < 1e-9, "ratio %g, %g/%g",
              ratio, used, cap);
    char info[160];
    snprintf(info, sizeof(info),
             "graphserve_cache_config_info{page_tokens=\"16\",num_pages=\"%.0f\","
             "block_size=\"16\",num_gpu_blocks=\"%.0f\",kv_type=\"f16\",cache_dtype=\"f16\"}",
             cap, cap);
    cr_expect_eq(e2e_metric(r.body, info), 1, "no %s in %s", info, r.body);
    cr_expect(strstr(r.body, "# TYPE graphserve_cache_config_info gauge\n"));
    e2e_resp_free(&r);
    cr_expect_eq(e2e_stop(&k), 0);
}
