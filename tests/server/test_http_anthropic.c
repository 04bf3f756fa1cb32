/*
 * tests/server/test_http_anthropic.c - Anthropic's Messages API (POST /v1/messages and
 * /v1/messages/count_tokens) on the real daemon, spoken to with curl: the message
 * object, the streamed event sequence, count_tokens against the chat route's prompt,
 * stop_reason for each way an answer ends, the prefill, and errors in Anthropic's
 * shape. The daemon runs with an API key, sent as x-api-key as Anthropic's SDKs do.
 *
 * Greedy (temperature 0) answers are compared with the chat route's for the same
 * conversation: the two routes share one path, so they must be the same text.
 */
#define _GNU_SOURCE
#include "tests/server/e2e.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct e2e_daemon d;

#define KEY "-H 'x-api-key: sekret' -H 'anthropic-version: 2023-06-01'"

/* A conversation in both APIs' spelling: system apart (Anthropic) or first (OpenAI). */
#define SYSTEM "You tell stories."
#define USER   "Tell me about Lily."
#define MSGS   "[{\"role\":\"user\",\"content\":\"" USER "\"}]"
#define CHAT_MSGS                                                                                  \
    "[{\"role\":\"system\",\"content\":\"" SYSTEM "\"},{\"role\":\"user\",\"content\":\"" USER     \
    "\"}]"

static void start(void)
{
    e2e_start(&d, "--api-key sekret");
}

static void stop(void)
{
    cr_expect_eq(e2e_stop(&d), 0, "the daemon did not exit 0 after SIGTERM");
}

TestSuite(http_anthropic, .init = start, .fini = stop, .timeout = 120);

static const char *str(json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

static json_int_t num(json_t *o, const char *key)
{
    return json_integer_value(json_object_get(o, key));
}

/* The whole prompt of an answer's usage: what it computed and what the prefix cache gave. */
static json_int_t prompt_of(json_t *usage)
{
    cr_expect_eq(num(usage, "cache_creation_input_tokens"), 0);
    return num(usage, "input_tokens") + num(usage, "cache_read_input_tokens");
}

static void messages(const char *path, const char *body, struct e2e_resp *r)
{
    e2e_http(&d, "POST", path, body, KEY, r);
}

/* The greedy chat answer (and its prompt tokens) for the conversation, max_tokens. */
static char *chat_text(int max_tokens, json_int_t *prompt_tokens)
{
    char body[512];
    snprintf(body, sizeof(body), "{\"messages\":%s,\"max_tokens\":%d,\"temperature\":0}", CHAT_MSGS,
             max_tokens);
    struct e2e_resp r;
    e2e_http(&d, "POST", "/v1/chat/completions", body, KEY, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *c = json_array_get(json_object_get(r.json, "choices"), 0);
    char *text = strdup(str(json_object_get(c, "message"), "content"));
    if (prompt_tokens)
        *prompt_tokens = num(json_object_get(r.json, "usage"), "prompt_tokens");
    e2e_resp_free(&r);
    return text;
}

Test(http_anthropic, message_has_anthropic_shape_and_the_chat_routes_text)
{
    json_int_t chat_prompt;
    char *want = chat_text(24, &chat_prompt);
    struct e2e_resp r;
    messages("/v1/messages",
             "{\"model\":\"stories260K\",\"system\":\"" SYSTEM "\",\"messages\":" MSGS
             ",\"max_tokens\":24,\"temperature\":0,\"metadata\":{\"user_id\":\"u-1\"}}",
             &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_expect(strstr(r.headers, "content-type: application/json"));
    cr_expect(!strncmp(str(r.json, "id"), "msg_", 4), "id %s", str(r.json, "id"));
    cr_expect_str_eq(str(r.json, "type"), "message");
    cr_expect_str_eq(str(r.json, "role"), "assistant");
    cr_expect_str_eq(str(r.json, "model"), "stories260K");
    json_t *content = json_object_get(r.json, "content");
    cr_assert_eq(json_array_size(content), 1, "%s", r.body);
    cr_expect_str_eq(str(json_array_get(content, 0), "type"), "text");
    cr_expect_str_eq(str(json_array_get(content, 0), "text"), want);
    cr_expect_str_eq(str(r.json, "stop_reason"), "max_tokens");
    cr_expect(json_is_null(json_object_get(r.json, "stop_sequence")), "%s", r.body);
    json_t *u = json_object_get(r.json, "usage");
    cr_expect_eq(prompt_of(u), chat_prompt, "%s", r.body);
    /* The chat route just ran this conversation: its full pages came from the cache. */
    cr_expect_gt(num(u, "cache_read_input_tokens"), 0, "%s", r.body);
    cr_expect_eq(num(u, "output_tokens"), 24);
    free(want);
    e2e_resp_free(&r);
}

/* system as a list of text blocks and content as text blocks are the same prompt as strings. */
Test(http_anthropic, text_blocks_equal_strings)
{
    json_int_t chat_prompt;
    char *want = chat_text(8, &chat_prompt);
    struct e2e_resp r;
    messages("/v1/messages",
             "{\"system\":[{\"type\":\"text\",\"text\":\"" SYSTEM "\"}],"
             "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Tell me "
             "about \",\"cache_control\":{\"type\":\"ephemeral\"}},{\"type\":\"text\",\"text\":"
             "\"Lily.\"}]}],\"max_tokens\":8,\"temperature\":0}",
             &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_expect_str_eq(str(json_array_get(json_object_get(r.json, "content"), 0), "text"), want);
    cr_expect_eq(prompt_of(json_object_get(r.json, "usage")), chat_prompt);
    free(want);
    e2e_resp_free(&r);
}

Test(http_anthropic, stream_is_anthropics_event_sequence)
{
    struct e2e_resp whole, r;
#define BODY(extra)                                                                                \
    "{\"system\":\"" SYSTEM "\",\"messages\":" MSGS ",\"max_tokens\":30,\"temperature\":0" extra "}"
    messages("/v1/messages", BODY(""), &whole);
    cr_assert_eq(whole.status, 200, "%s", whole.body);
    messages("/v1/messages", BODY(",\"stream\":true"), &r);
#undef BODY
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_expect(strstr(r.headers, "content-type: text/event-stream"), "%s", r.headers);
    json_t *ev = e2e_sse_named_events(r.body);
    size_t n = json_array_size(ev);
    cr_assert_geq(n, 7, "%s", r.body);
    static const char *const head[] = {"message_start", "content_block_start", "ping"};
    static const char *const tail[] = {"content_block_stop", "message_delta", "message_stop"};
    char text[4096] = "";
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(ev, i), *data = json_object_get(e, "data");
        const char *name = str(e, "event");
        /* Each event's name is its data's type, as the SDKs read either. */
        cr_expect_str_eq(str(data, "type"), name);
        if (i < 3)
            cr_expect_str_eq(name, head[i], "event %zu", i);
        else if (i >= n - 3)
            cr_expect_str_eq(name, tail[i - (n - 3)], "event %zu", i);
        else
            cr_expect_str_eq(name, "content_block_delta", "event %zu", i);
        if (!strcmp(name, "content_block_delta")) {
            json_t *delta = json_object_get(data, "delta");
            cr_expect_eq(num(data, "index"), 0);
            cr_expect_str_eq(str(delta, "type"), "text_delta");
            strncat(text, str(delta, "text"), sizeof(text) - strlen(text) - 1);
        }
    }
    json_t *start = json_object_get(json_object_get(json_array_get(ev, 0), "data"), "message");
    cr_expect(!strncmp(str(start, "id"), "msg_", 4));
    cr_expect_str_eq(str(start, "role"), "assistant");
    cr_expect_eq(json_array_size(json_object_get(start, "content")), 0);
    cr_expect(json_is_null(json_object_get(start, "stop_reason")));
    /* message_start counts the whole prompt; message_delta has the cache's share. */
    cr_expect_eq(num(json_object_get(start, "usage"), "input_tokens"),
                 prompt_of(json_object_get(whole.json, "usage")));
    json_t *block =
        json_object_get(json_object_get(json_array_get(ev, 1), "data"), "content_block");
    cr_expect_str_eq(str(block, "type"), "text");
    cr_expect_str_eq(str(block, "text"), "");
    json_t *md = json_object_get(json_array_get(ev, n - 2), "data");
    cr_expect_str_eq(str(json_object_get(md, "delta"), "stop_reason"), "max_tokens");
    cr_expect_eq(num(json_object_get(md, "usage"), "output_tokens"), 30);
    cr_expect_str_eq(text, str(json_array_get(json_object_get(whole.json, "content"), 0), "text"));
    json_decref(ev);
    e2e_resp_free(&r);
    e2e_resp_free(&whole);
}

/* count_tokens is the prompt the chat route reports for the same conversation, multi-turn
 * included, and the prompt /v1/messages itself reports. */
Test(http_anthropic, count_tokens_equals_the_chat_routes_prompt)
{
    json_int_t chat_prompt;
    free(chat_text(1, &chat_prompt));
    struct e2e_resp r;
    messages("/v1/messages/count_tokens",
             "{\"model\":\"stories260K\",\"system\":\"" SYSTEM "\",\"messages\":" MSGS "}", &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_expect_eq(json_object_size(r.json), 1, "%s", r.body);
    cr_expect_eq(num(r.json, "input_tokens"), chat_prompt, "%s", r.body);
    e2e_resp_free(&r);

    const char *turns = "[{\"role\":\"user\",\"content\":\"Hi\"},{\"role\":\"assistant\","
                        "\"content\":\"Hello there\"},{\"role\":\"user\",\"content\":\"A story\"}]";
    char b[512];
    snprintf(b, sizeof(b), "{\"messages\":%s,\"max_tokens\":1}", turns);
    e2e_http(&d, "POST", "/v1/chat/completions", b, KEY, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_int_t want = num(json_object_get(r.json, "usage"), "prompt_tokens");
    e2e_resp_free(&r);
    snprintf(b, sizeof(b), "{\"messages\":%s}", turns);
    messages("/v1/messages/count_tokens", b, &r);
    cr_expect_eq(num(r.json, "input_tokens"), want, "%s", r.body);
    e2e_resp_free(&r);
    snprintf(b, sizeof(b), "{\"messages\":%s,\"max_tokens\":1}", turns);
    messages("/v1/messages", b, &r);
    cr_expect_eq(prompt_of(json_object_get(r.json, "usage")), want, "%s", r.body);
    e2e_resp_free(&r);
}

/* A stop sequence taken from the middle of the greedy answer ends it there, streamed or not. */
Test(http_anthropic, stop_sequence_ends_with_stop_reason_stop_sequence)
{
    char *full = chat_text(40, NULL);
    size_t n = strlen(full);
    cr_assert_gt(n, 20, "answer too short: '%s'", full);
    /* The word starting after the middle: a stop sequence the answer surely reaches. */
    const char *at = strchr(full + n / 2, ' ');
    cr_assert(at && at[1], "no word after the middle: '%s'", full);
    char stop[32];
    snprintf(stop, sizeof(stop), "%.*s", (int)strcspn(at + 1, " ,.\""), at + 1);
    const char *first = strstr(full, stop);
    char want[1024];
    snprintf(want, sizeof(want), "%.*s", (int)(first - full), full);
    char b[512];
    snprintf(b, sizeof(b),
             "{\"system\":\"" SYSTEM "\",\"messages\":" MSGS ",\"max_tokens\":40,"
             "\"temperature\":0,\"stop_sequences\":[\"never-seen\",\"%s\"]}",
             stop);
    struct e2e_resp r;
    messages("/v1/messages", b, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_expect_str_eq(str(r.json, "stop_reason"), "stop_sequence", "%s", r.body);
    cr_expect_str_eq(str(r.json, "stop_sequence"), stop, "%s", r.body);
    cr_expect_str_eq(str(json_array_get(json_object_get(r.json, "content"), 0), "text"), want);
    cr_expect_lt(num(json_object_get(r.json, "usage"), "output_tokens"), 40);
    e2e_resp_free(&r);

    snprintf(b, sizeof(b),
             "{\"system\":\"" SYSTEM "\",\"messages\":" MSGS ",\"max_tokens\":40,"
             "\"temperature\":0,\"stop_sequences\":[\"%s\"],\"stream\":true}",
             stop);
    messages("/v1/messages", b, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *ev = e2e_sse_named_events(r.body);
    json_t *md = json_object_get(json_array_get(ev, json_array_size(ev) - 2), "data");
    cr_expect_str_eq(str(md, "type"), "message_delta");
    cr_expect_str_eq(str(json_object_get(md, "delta"), "stop_reason"), "stop_sequence");
    cr_expect_str_eq(str(json_object_get(md, "delta"), "stop_sequence"), stop);
    cr_expect(!strstr(r.body, stop) || strstr(r.body, stop) > strstr(r.body, "message_delta"),
              "the stop sequence was streamed: %s", r.body);
    json_decref(ev);
    e2e_resp_free(&r);
    free(full);
}

/* A final assistant message is continued: the answer is what a completion of the rendered
 * prompt plus that text gives. */
Test(http_anthropic, final_assistant_message_is_a_prefill)
{
    struct e2e_resp t, c, r;
    e2e_http(&d, "POST", "/apply-template", "{\"messages\":" MSGS "}", KEY, &t);
    cr_assert_eq(t.status, 200, "%s", t.body);
    char b[1024];
    snprintf(b, sizeof(b), "{\"prompt\":\"%sOnce upon\",\"max_tokens\":12,\"temperature\":0}",
             str(t.json, "prompt"));
    /* The rendered prompt is plain text with newlines: escape them for the JSON body. */
    for (char *p = strstr(b, "\n"); p; p = strstr(p, "\n")) {
        memmove(p + 2, p + 1, strlen(p + 1) + 1);
        p[0] = '\\';
        p[1] = 'n';
    }
    e2e_http(&d, "POST", "/v1/completions", b, KEY, &c);
    cr_assert_eq(c.status, 200, "%s %s", b, c.body);
    messages("/v1/messages",
             "{\"messages\":[{\"role\":\"user\",\"content\":\"" USER "\"},"
             "{\"role\":\"assistant\",\"content\":\"Once upon\"}],\"max_tokens\":12,"
             "\"temperature\":0}",
             &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_expect_str_eq(str(json_array_get(json_object_get(r.json, "content"), 0), "text"),
                     str(json_array_get(json_object_get(c.json, "choices"), 0), "text"));
    cr_expect_eq(prompt_of(json_object_get(r.json, "usage")),
                 num(json_object_get(c.json, "usage"), "prompt_tokens"));
    e2e_resp_free(&t);
    e2e_resp_free(&c);
    e2e_resp_free(&r);
}

/* {"type":"error","error":{"type","message"},"request_id"} with the status, the message
 * naming what was wrong, and request_id the X-Request-Id header. */
static void expect_error(const char *path, const char *body, const char *curl, int status,
                         const char *type, const char *needle)
{
    struct e2e_resp r;
    e2e_http(&d, "POST", path, body, curl, &r);
    cr_expect_eq(r.status, status, "%s -> %d %s", body, r.status, r.body);
    cr_assert(r.json, "not JSON: %s", r.body);
    cr_expect_str_eq(str(r.json, "type"), "error", "%s", r.body);
    json_t *e = json_object_get(r.json, "error");
    cr_expect_str_eq(str(e, "type"), type, "%s", r.body);
    cr_expect(str(e, "message") && strstr(str(e, "message"), needle), "'%s' not in %s", needle,
              r.body);
    const char *id = str(r.json, "request_id");
    char hdr[96];
    snprintf(hdr, sizeof(hdr), "x-request-id: %s\r", id ? id : "(none)");
    cr_expect(strstr(r.headers, hdr), "request_id %s is not the header: %s", id, r.headers);
    snprintf(hdr, sizeof(hdr), "\nrequest-id: %s\r", id ? id : "(none)");
    cr_expect(strstr(r.headers, hdr), "no Anthropic request-id header %s: %s", id, r.headers);
    e2e_resp_free(&r);
}

Test(http_anthropic, errors_have_anthropics_shape)
{
    const char *m = "/v1/messages", *ct = "/v1/messages/count_tokens";
    const char *bad = "invalid_request_error";
    expect_error(m, "{\"messages\":" MSGS "}", KEY, 400, bad, "max_tokens");
    expect_error(m, "{\"messages\":[{\"role\":\"system\",\"content\":\"a\"}],\"max_tokens\":4}",
                 KEY, 400, bad, "messages[0].role");
    expect_error(m, "{\"messages\":" MSGS ",\"max_tokens\":4,\"tools\":{}}", KEY, 400, bad,
                 "'tools'");
    expect_error(m, "{\"messages\":" MSGS ",\"max_tokens\":4,\"thinking\":{}}", KEY, 400, bad,
                 "'thinking'");
    expect_error(m, "{\"messages\":" MSGS ",\"max_tokens\":4,\"stop\":[\"x\"]}", KEY, 400, bad,
                 "'stop'");
    expect_error(m,
                 "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{}"
                 "}]}],\"max_tokens\":4}",
                 KEY, 400, bad, "'image'");
    expect_error(m, "{\"messages\":" MSGS ",\"max_tokens\":4,\"temperature\":1.5}", KEY, 400, bad,
                 "temperature");
    expect_error(m, "{\"messages\":" MSGS ",\"max_tokens\":4,\"metadata\":{\"tier\":1}}", KEY, 400,
                 bad, "metadata.tier");
    expect_error(m,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\","
                 "\"content\":\"b \"}],\"max_tokens\":4}",
                 KEY, 400, bad, "whitespace");
    expect_error(m, "{\"messages\": no", KEY, 400, bad, "malformed JSON");
    expect_error(m, "{\"messages\":" MSGS ",\"max_tokens\":2047}", KEY, 400, bad, "context length");
    expect_error(ct, "{\"messages\":" MSGS ",\"max_tokens\":4}", KEY, 400, bad, "max_tokens");
    expect_error(m, "{\"model\":\"claude-x\",\"messages\":" MSGS ",\"max_tokens\":4}", KEY, 404,
                 "not_found_error", "claude-x");
    expect_error(m, "{\"messages\":" MSGS ",\"max_tokens\":4}", "-H 'x-api-key: wrong'", 401,
                 "authentication_error", "invalid API key");
    expect_error(m, "{\"messages\":" MSGS ",\"max_tokens\":4}", NULL, 401, "authentication_error",
                 "x-api-key");
    expect_error(ct, "{\"messages\":" MSGS "}", NULL, 401, "authentication_error", "missing");
    struct e2e_resp r;
    e2e_http(&d, "GET", "/v1/messages", NULL, KEY, &r);
    cr_expect_eq(r.status, 405);
    cr_expect_str_eq(str(r.json, "type"), "error", "a 405 on the route is Anthropic's: %s", r.body);
    cr_expect_str_eq(str(json_object_get(r.json, "error"), "type"), "invalid_request_error", "%s",
                     r.body);
    cr_expect(strstr(r.headers, "allow: post\r"), "%s", r.headers);
    e2e_resp_free(&r);
}

/* x-api-key opens every keyed route, and a Bearer key opens Anthropic's. */
Test(http_anthropic, either_key_header_opens_every_route)
{
    struct e2e_resp r;
    e2e_http(&d, "GET", "/v1/models", NULL, "-H 'x-api-key: sekret'", &r);
    cr_expect_eq(r.status, 200, "%s", r.body);
    e2e_resp_free(&r);
    e2e_http(&d, "GET", "/metrics", NULL, "-H 'x-api-key: sekret'", &r);
    cr_expect_eq(r.status, 200, "%s", r.body);
    e2e_resp_free(&r);
    e2e_http(&d, "POST", "/v1/messages", "{\"messages\":" MSGS ",\"max_tokens\":2}",
             "-H 'Authorization: Bearer sekret'", &r);
    cr_expect_eq(r.status, 200, "%s", r.body);
    e2e_resp_free(&r);
    /* OpenAI's routes keep OpenAI's error object. */
    e2e_http(&d, "GET", "/v1/models", NULL, "-H 'x-api-key: wrong'", &r);
    cr_expect_eq(r.status, 401);
    cr_expect_str_eq(str(json_object_get(r.json, "error"), "type"), "authentication_error");
    cr_expect(!json_object_get(r.json, "type"), "%s", r.body);
    e2e_resp_free(&r);
}

Test(http_anthropic, metrics_count_the_routes)
{
    struct e2e_resp r;
    messages("/v1/messages", "{\"messages\":" MSGS ",\"max_tokens\":2}", &r);
    cr_expect_eq(r.status, 200);
    e2e_resp_free(&r);
    messages("/v1/messages/count_tokens", "{\"messages\":" MSGS "}", &r);
    cr_expect_eq(r.status, 200);
    e2e_resp_free(&r);
    e2e_http(&d, "GET", "/metrics", NULL, KEY, &r);
    cr_expect_eq(e2e_metric(r.body, "graphserve_http_requests_total{endpoint=\"/v1/messages\","
                                    "status=\"200\"}"),
                 1, "%s", r.body);
    cr_expect_eq(e2e_metric(r.body, "graphserve_http_requests_total{endpoint=\"/v1/messages/"
                                    "count_tokens\",status=\"200\"}"),
                 1);
    cr_expect_geq(e2e_metric(r.body, "graphserve_generation_tokens_total"), 2);
    cr_expect_eq(e2e_metric(r.body, "graphserve_e2e_request_latency_seconds_count"), 1,
                 "counting tokens is not a generation's latency");
    e2e_resp_free(&r);
}
