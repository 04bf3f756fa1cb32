/*
 * tests/server/test_http_responses.c - OpenAI's Responses API (POST /v1/responses) on the
 * real daemon, spoken to with curl: the response object, input as a string and as
 * items, the typed and numbered event stream, text.format through the structured-output
 * engine, previous_response_id from the store (and its 404s), and errors in OpenAI's
 * shape. Tool calls need a tool-capable template: tests/e2e/openai_responses.mjs has them.
 *
 * Greedy (temperature 0) answers are compared with the chat route's for the same
 * conversation: the two routes share one path, so they must be the same text and the
 * same prompt.
 */
#define _GNU_SOURCE
#include "tests/server/e2e.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct e2e_daemon d;

#define SYSTEM "You tell stories."
#define USER   "Tell me about Lily."
#define CHAT_MSGS                                                                                  \
    "[{\"role\":\"system\",\"content\":\"" SYSTEM "\"},{\"role\":\"user\",\"content\":\"" USER     \
    "\"}]"

static void start(void)
{
    e2e_start(&d, "");
}

static void stop(void)
{
    cr_expect_eq(e2e_stop(&d), 0, "the daemon did not exit 0 after SIGTERM");
}

TestSuite(http_responses, .init = start, .fini = stop, .timeout = 120);

static const char *str(json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

static json_int_t num(json_t *o, const char *key)
{
    return json_integer_value(json_object_get(o, key));
}

static void post(const char *path, const char *body, struct e2e_resp *r)
{
    e2e_http(&d, "POST", path, body, NULL, r);
}

/* The greedy chat answer for messages (a JSON array), max_tokens; its prompt tokens. */
static char *chat_text(const char *msgs, int max_tokens, json_int_t *prompt_tokens)
{
    char body[1024];
    snprintf(body, sizeof(body), "{\"messages\":%s,\"max_tokens\":%d,\"temperature\":0}", msgs,
             max_tokens);
    struct e2e_resp r;
    post("/v1/chat/completions", body, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *c = json_array_get(json_object_get(r.json, "choices"), 0);
    char *text = strdup(str(json_object_get(c, "message"), "content"));
    *prompt_tokens = num(json_object_get(r.json, "usage"), "prompt_tokens");
    e2e_resp_free(&r);
    return text;
}

/* The text of a response object's one message item. */
static const char *output_text(json_t *resp)
{
    json_t *out = json_object_get(resp, "output");
    cr_assert_eq(json_array_size(out), 1, "output %s", json_dumps(out, 0));
    json_t *msg = json_array_get(out, 0);
    cr_expect_str_eq(str(msg, "type"), "message");
    cr_expect_str_eq(str(msg, "role"), "assistant");
    json_t *part = json_array_get(json_object_get(msg, "content"), 0);
    cr_expect_str_eq(str(part, "type"), "output_text");
    cr_expect(json_is_array(json_object_get(part, "annotations")));
    return str(part, "text");
}

Test(http_responses, response_has_the_responses_shape_and_the_chat_routes_text)
{
    json_int_t chat_prompt;
    char *want = chat_text(CHAT_MSGS, 24, &chat_prompt);
    struct e2e_resp r;
    post("/v1/responses",
         "{\"model\":\"stories260K\",\"instructions\":\"" SYSTEM "\",\"input\":\"" USER
         "\",\"max_output_tokens\":24,\"temperature\":0}",
         &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_expect(!strncmp(str(r.json, "id"), "resp_", 5), "id %s", str(r.json, "id"));
    cr_expect_str_eq(str(r.json, "object"), "response");
    cr_expect(json_is_integer(json_object_get(r.json, "created_at")));
    cr_expect_str_eq(str(r.json, "model"), "stories260K");
    cr_expect_str_eq(output_text(r.json), want);
    cr_expect(!strncmp(str(json_array_get(json_object_get(r.json, "output"), 0), "id"), "msg_", 4));
    /* 24 tokens, and this model's stories run longer. */
    cr_expect_str_eq(str(r.json, "status"), "incomplete", "%s", r.body);
    cr_expect_str_eq(str(json_object_get(r.json, "incomplete_details"), "reason"),
                     "max_output_tokens");
    /* The settings, repeated as the API does. */
    cr_expect_str_eq(str(r.json, "instructions"), SYSTEM);
    cr_expect_eq(num(r.json, "max_output_tokens"), 24);
    cr_expect(json_is_null(json_object_get(r.json, "previous_response_id")), "%s", r.body);
    cr_expect_eq(json_real_value(json_object_get(r.json, "temperature")), 0);
    cr_expect_eq(json_array_size(json_object_get(r.json, "tools")), 0);
    cr_expect_str_eq(str(r.json, "tool_choice"), "auto");
    cr_expect_str_eq(str(json_object_get(json_object_get(r.json, "text"), "format"), "type"),
                     "text");
    json_t *u = json_object_get(r.json, "usage");
    cr_expect_eq(num(u, "input_tokens"), chat_prompt, "%s", r.body);
    cr_expect_eq(num(u, "output_tokens"), 24);
    cr_expect_eq(num(u, "total_tokens"), chat_prompt + 24);
    free(want);
    e2e_resp_free(&r);
}

/* Message items with input_text parts (and a developer message) are the same prompt. */
Test(http_responses, input_items_equal_a_string_and_instructions)
{
    json_int_t chat_prompt;
    char *want = chat_text(CHAT_MSGS, 8, &chat_prompt);
    struct e2e_resp r;
    post("/v1/responses",
         "{\"input\":[{\"role\":\"developer\",\"content\":\"" SYSTEM "\"},{\"type\":\"message\","
         "\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"Tell me about \"},"
         "{\"type\":\"input_text\",\"text\":\"Lily.\"}]}],\"max_output_tokens\":8,"
         "\"temperature\":0}",
         &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_expect_str_eq(output_text(r.json), want);
    cr_expect_eq(num(json_object_get(r.json, "usage"), "input_tokens"), chat_prompt);
    free(want);
    e2e_resp_free(&r);
}

/* The typed events in the API's order, numbered from 0; the deltas add up to the done
 * text, the final response and the non-streamed answer. */
Test(http_responses, stream_is_the_typed_event_sequence)
{
    struct e2e_resp whole, r;
    static const char body[] = "{\"instructions\":\"" SYSTEM "\",\"input\":\"" USER
                               "\",\"max_output_tokens\":16,\"temperature\":0%s}";
    char b[512];
    snprintf(b, sizeof(b), body, "");
    post("/v1/responses", b, &whole);
    cr_assert_eq(whole.status, 200, "%s", whole.body);
    snprintf(b, sizeof(b), body, ",\"stream\":true");
    post("/v1/responses", b, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_expect(strstr(r.headers, "content-type: text/event-stream"));
    json_t *ev = e2e_sse_named_events(r.body);
    static const char *const head[] = {"response.created", "response.in_progress",
                                       "response.output_item.added", "response.content_part.added"};
    static const char *const tail[] = {"response.output_text.done", "response.content_part.done",
                                       "response.output_item.done", "response.incomplete"};
    size_t n = json_array_size(ev);
    cr_assert_gt(n, 8, "%s", r.body);
    for (size_t i = 0; i < 4; i++) {
        cr_expect_str_eq(str(json_array_get(ev, i), "event"), head[i]);
        cr_expect_str_eq(str(json_array_get(ev, n - 4 + i), "event"), tail[i]);
    }
    char text[1024] = "";
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(ev, i), *data = json_object_get(e, "data");
        cr_expect_str_eq(str(data, "type"), str(e, "event"));
        cr_expect_eq(num(data, "sequence_number"), (json_int_t)i);
        if (i >= 4 && i < n - 4) {
            cr_expect_str_eq(str(e, "event"), "response.output_text.delta");
            cr_expect_eq(num(data, "output_index"), 0);
            strncat(text, str(data, "delta"), sizeof(text) - strlen(text) - 1);
        }
    }
    /* A message is announced empty; its part comes in content_part.added. */
    json_t *added = json_object_get(json_object_get(json_array_get(ev, 2), "data"), "item");
    cr_expect_eq(json_array_size(json_object_get(added, "content")), 0, "%s", r.body);
    cr_expect_str_eq(str(added, "status"), "in_progress");
    json_t *created = json_object_get(json_object_get(json_array_get(ev, 0), "data"), "response");
    cr_expect_str_eq(str(created, "status"), "in_progress");
    json_t *done = json_object_get(json_array_get(ev, n - 4), "data");
    cr_expect_str_eq(str(done, "text"), text);
    json_t *fin = json_object_get(json_object_get(json_array_get(ev, n - 1), "data"), "response");
    cr_expect_str_eq(output_text(fin), text);
    cr_expect_str_eq(output_text(whole.json), text);
    cr_expect_str_eq(str(fin, "id"), str(created, "id"));
    cr_expect_eq(num(json_object_get(fin, "usage"), "output_tokens"), 16);
    json_decref(ev);
    e2e_resp_free(&whole);
    e2e_resp_free(&r);
}

/* text.format json_schema goes through the structured-output engine: the answer is JSON
 * of the schema, and the answer ends there ("completed"). */
Test(http_responses, text_format_json_schema_is_enforced)
{
    struct e2e_resp r;
    post("/v1/responses",
         "{\"input\":\"" USER "\",\"max_output_tokens\":64,\"text\":{\"format\":{\"type\":"
         "\"json_schema\",\"name\":\"pick\",\"strict\":true,\"schema\":{\"type\":\"object\","
         "\"properties\":{\"n\":{\"type\":\"integer\"}},\"required\":[\"n\"],"
         "\"additionalProperties\":false}}}}",
         &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_expect_str_eq(str(r.json, "status"), "completed", "%s", r.body);
    json_t *j = json_loads(output_text(r.json), JSON_DECODE_ANY, NULL);
    cr_assert(json_is_object(j), "%s", r.body);
    cr_expect(json_is_integer(json_object_get(j, "n")), "%s", r.body);
    cr_expect_eq(json_object_size(j), 1);
    json_decref(j);
    e2e_resp_free(&r);
}

/* A stored response continues: the next request's prompt is the chat route's prompt of
 * the whole conversation, instructions not carried over. Unstored and unknown ids are
 * 404s. */
Test(http_responses, previous_response_id_continues_a_stored_conversation)
{
    struct e2e_resp a, b, c;
    post("/v1/responses",
         "{\"instructions\":\"" SYSTEM "\",\"input\":\"" USER "\",\"store\":true,"
         "\"max_output_tokens\":6,\"temperature\":0}",
         &a);
    cr_assert_eq(a.status, 200, "%s", a.body);
    cr_expect(json_is_true(json_object_get(a.json, "store")));
    json_t *msgs = json_pack("[{s:s,s:s},{s:s,s:s},{s:s,s:s}]", "role", "user", "content", USER,
                             "role", "assistant", "content", output_text(a.json), "role", "user",
                             "content", "And then?");
    char *m = json_dumps(msgs, JSON_COMPACT);
    json_int_t chat_prompt;
    char *want = chat_text(m, 6, &chat_prompt);
    char body[512];
    snprintf(body, sizeof(body),
             "{\"previous_response_id\":\"%s\",\"input\":\"And then?\",\"max_output_tokens\":6,"
             "\"temperature\":0}",
             str(a.json, "id"));
    post("/v1/responses", body, &b);
    cr_assert_eq(b.status, 200, "%s", b.body);
    cr_expect_eq(num(json_object_get(b.json, "usage"), "input_tokens"), chat_prompt, "%s", b.body);
    cr_expect_str_eq(output_text(b.json), want);
    /* b was not stored (store defaults to false here): it cannot be continued. */
    snprintf(body, sizeof(body), "{\"previous_response_id\":\"%s\",\"input\":\"x\"}",
             str(b.json, "id"));
    post("/v1/responses", body, &c);
    cr_expect_eq(c.status, 404, "%s", c.body);
    json_t *e = json_object_get(c.json, "error");
    cr_expect_str_eq(str(e, "type"), "invalid_request_error");
    cr_expect_str_eq(str(e, "code"), "previous_response_not_found");
    cr_expect_str_eq(str(e, "param"), "previous_response_id");
    free(m);
    free(want);
    json_decref(msgs);
    e2e_resp_free(&a);
    e2e_resp_free(&b);
    e2e_resp_free(&c);
}

/* A stored stream can be continued too. */
Test(http_responses, a_streamed_response_is_stored)
{
    struct e2e_resp a, b;
    post("/v1/responses",
         "{\"input\":\"" USER "\",\"store\":true,\"stream\":true,\"max_output_tokens\":4}", &a);
    cr_assert_eq(a.status, 200, "%s", a.body);
    json_t *ev = e2e_sse_named_events(a.body);
    json_t *last = json_object_get(json_array_get(ev, json_array_size(ev) - 1), "data");
    char body[256];
    snprintf(body, sizeof(body),
             "{\"previous_response_id\":\"%s\",\"input\":\"x\",\"max_output_tokens\":1}",
             str(json_object_get(last, "response"), "id"));
    post("/v1/responses", body, &b);
    cr_expect_eq(b.status, 200, "%s", b.body);
    json_decref(ev);
    e2e_resp_free(&a);
    e2e_resp_free(&b);
}

/* GET /v1/responses/{id} gives back the stored object as it was answered; DELETE forgets it:
 * then GET, DELETE and previous_response_id all say 404. An unstored response was never
 * kept. */
Test(http_responses, a_stored_response_is_retrieved_and_deleted)
{
    struct e2e_resp a, got, del, again, unstored;
    post("/v1/responses",
         "{\"input\":\"" USER "\",\"store\":true,\"max_output_tokens\":6,\"temperature\":0}",
         &a);
    cr_assert_eq(a.status, 200, "%s", a.body);
    char path[128];
    snprintf(path, sizeof(path), "/v1/responses/%s", str(a.json, "id"));
    e2e_http(&d, "GET", path, NULL, NULL, &got);
    cr_assert_eq(got.status, 200, "%s", got.body);
    cr_expect(json_equal(got.json, a.json), "retrieved %s, answered %s", got.body, a.body);
    e2e_http(&d, "DELETE", path, NULL, NULL, &del);
    cr_assert_eq(del.status, 200, "%s", del.body);
    cr_expect_str_eq(str(del.json, "id"), str(a.json, "id"));
    cr_expect_str_eq(str(del.json, "object"), "response");
    cr_expect(json_is_true(json_object_get(del.json, "deleted")), "%s", del.body);
    e2e_resp_free(&del);
    e2e_http(&d, "GET", path, NULL, NULL, &again);
    cr_expect_eq(again.status, 404, "%s", again.body);
    cr_expect_str_eq(str(json_object_get(again.json, "error"), "param"), "response_id", "%s",
                     again.body);
    e2e_http(&d, "DELETE", path, NULL, NULL, &del);
    cr_expect_eq(del.status, 404, "%s", del.body);
    char body[256];
    snprintf(body, sizeof(body), "{\"previous_response_id\":\"%s\",\"input\":\"x\"}",
             str(a.json, "id"));
    e2e_resp_free(&again);
    post("/v1/responses", body, &again);
    cr_expect_eq(again.status, 404, "a deleted response cannot be continued: %s", again.body);
    post("/v1/responses", "{\"input\":\"" USER "\",\"max_output_tokens\":1}", &unstored);
    snprintf(path, sizeof(path), "/v1/responses/%s", str(unstored.json, "id"));
    e2e_resp_free(&got);
    e2e_http(&d, "GET", path, NULL, NULL, &got);
    cr_expect_eq(got.status, 404, "store defaults to false: %s", got.body);
    e2e_resp_free(&a);
    e2e_resp_free(&got);
    e2e_resp_free(&del);
    e2e_resp_free(&again);
    e2e_resp_free(&unstored);
}

static void expect_400(const char *body, const char *param)
{
    struct e2e_resp r;
    post("/v1/responses", body, &r);
    cr_expect_eq(r.status, 400, "%s -> %s", body, r.body);
    json_t *e = json_object_get(r.json, "error");
    cr_expect_str_eq(str(e, "type"), "invalid_request_error", "%s", r.body);
    cr_expect_str_eq(str(e, "param"), param, "%s -> %s", body, r.body);
    cr_expect(json_is_string(json_object_get(e, "message")), "%s", r.body);
    e2e_resp_free(&r);
}

/* Fields graphserve does not implement are refused by name, never ignored; bad values
 * are named in the Responses spelling, also where the chat parser found them. */
Test(http_responses, errors_name_the_field_in_openais_shape)
{
    expect_400("{\"input\":\"x\",\"reasoning\":{\"effort\":\"low\"}}", "reasoning");
    expect_400("{\"input\":\"x\",\"include\":[]}", "include");
    expect_400("{\"instructions\":\"x\"}", "input");
    expect_400("{\"input\":[]}", "input");
    expect_400("{\"input\":[{\"type\":\"input_image\",\"image_url\":\"x\"}]}", "input[0]");
    expect_400("{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\"}]}]}",
               "input[0].content[0]");
    expect_400("{\"input\":[{\"role\":\"robot\",\"content\":\"x\"}]}", "input[0].role");
    expect_400("{\"input\":\"x\",\"max_output_tokens\":0}", "max_output_tokens");
    expect_400("{\"input\":\"x\",\"temperature\":3}", "temperature");
    expect_400("{\"input\":\"x\",\"store\":\"yes\"}", "store");
    expect_400("{\"input\":\"x\",\"text\":{\"verbosity\":\"low\"}}", "text.verbosity");
    expect_400("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"a\","
               "\"schema\":3}}}",
               "text.format.schema");
    expect_400("{\"input\":\"x\",\"tools\":[{\"type\":\"web_search\"}]}", "tools[0]");
    expect_400("{\"input\":\"x\",\"previous_response_id\":7}", "previous_response_id");
    /* Refused by the chat parser (calls need a Jinja template; this daemon has none), and
     * named by the input item, counted as the client counts: the instructions are no item. */
    expect_400(
        "{\"instructions\":\"x\",\"input\":[{\"role\":\"user\",\"content\":\"Hi\"},"
        "{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"f\",\"arguments\":\"{}\"}]}",
        "input[1].tool_calls");
    struct e2e_resp r;
    post("/v1/responses", "{\"input\":\"x\",\"previous_response_id\":\"resp_none\"}", &r);
    cr_expect_eq(r.status, 404, "%s", r.body);
    cr_expect_str_eq(str(json_object_get(r.json, "error"), "code"), "previous_response_not_found");
    e2e_resp_free(&r);
    post("/v1/responses", "{\"input\":\"x\",\"model\":\"gpt-9\"}", &r);
    cr_expect_eq(r.status, 404, "%s", r.body);
    e2e_resp_free(&r);
    e2e_http(&d, "GET", "/v1/responses", NULL, NULL, &r);
    cr_expect_eq(r.status, 405, "%s", r.body);
    e2e_resp_free(&r);
}

/* ---- the store's limits, each on a daemon of its own --------------------------------------- */

static struct e2e_daemon small;

static void start_small(void)
{
    e2e_start(&small, "--responses-store-max 2 --responses-store-bytes 4KiB");
}

static void stop_small(void)
{
    cr_expect_eq(e2e_stop(&small), 0, "the daemon did not exit 0 after SIGTERM");
}

TestSuite(http_responses_store, .init = start_small, .fini = stop_small, .timeout = 120);

/* Stores input on daemon dm; the response's id (malloc'ed). */
static char *store(struct e2e_daemon *dm, const char *input)
{
    char body[8192];
    snprintf(body, sizeof(body),
             "{\"input\":\"%s\",\"store\":true,\"max_output_tokens\":1,\"temperature\":0}", input);
    struct e2e_resp r;
    e2e_http(dm, "POST", "/v1/responses", body, NULL, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    char *id = strdup(str(r.json, "id"));
    e2e_resp_free(&r);
    return id;
}

/* The status of a request continuing id. */
static int continue_status(struct e2e_daemon *dm, const char *id)
{
    char body[256];
    snprintf(body, sizeof(body),
             "{\"previous_response_id\":\"%s\",\"input\":\"x\",\"max_output_tokens\":1}", id);
    struct e2e_resp r;
    e2e_http(dm, "POST", "/v1/responses", body, NULL, &r);
    int status = r.status;
    if (status != 200)
        cr_expect_str_eq(str(json_object_get(r.json, "error"), "code"),
                         "previous_response_not_found", "%s", r.body);
    e2e_resp_free(&r);
    return status;
}

Test(http_responses_store, the_oldest_goes_past_the_count)
{
    char *a = store(&small, "One."), *b = store(&small, "Two."), *c = store(&small, "Three.");
    cr_expect_eq(continue_status(&small, c), 200);
    cr_expect_eq(continue_status(&small, b), 200);
    cr_expect_eq(continue_status(&small, a), 404, "a third response pushes out the first");
    free(a);
    free(b);
    free(c);
}

/* Inputs of 100 words (about 500 bytes of conversation each): two do not fit in 1 KiB,
 * and one of 250 words is not kept at all. */
Test(http_responses_store, the_oldest_goes_past_the_bytes_and_a_larger_one_is_not_kept)
{
    /* An entry is its conversation and its response object (about 1 KiB without the
     * input): 400 words make one of about 3 KiB, two of which pass 4 KiB. */
    char words[4200] = "";
    for (int i = 0; i < 400; i++)
        strcat(words, "Lily ");
    char *a = store(&small, words), *b = store(&small, words);
    cr_expect_eq(continue_status(&small, b), 200);
    cr_expect_eq(continue_status(&small, a), 404, "two entries over 4KiB: the first goes");
    for (int i = 400; i < 820; i++)
        strcat(words, "Lily ");
    char *big = store(&small, words);
    cr_expect_eq(continue_status(&small, big), 404, "an entry over the limit is not kept");
    cr_expect_eq(continue_status(&small, b), 200, "and it pushed nothing out");
    cr_expect_geq(e2e_log_count(&small, "response_not_stored"), 1);
    free(a);
    free(b);
    free(big);
}

static struct e2e_daemon brief;

static void start_brief(void)
{
    e2e_start(&brief, "--responses-store-max-age-s 1");
}

static void stop_brief(void)
{
    cr_expect_eq(e2e_stop(&brief), 0, "the daemon did not exit 0 after SIGTERM");
}

TestSuite(http_responses_age, .init = start_brief, .fini = stop_brief, .timeout = 120);

/* Past the age limit a stored response is unknown. Only the lower bound is timed: the
 * request comes at least 2 s after the store, however slow the machine. */
Test(http_responses_age, an_expired_response_is_a_404)
{
    char *a = store(&brief, "One.");
    sleep(2);
    cr_expect_eq(continue_status(&brief, a), 404);
    free(a);
}
