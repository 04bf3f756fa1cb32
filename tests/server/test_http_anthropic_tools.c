/*
 * tests/server/test_http_anthropic_tools.c - tool use on Anthropic's Messages API, on the
 * real daemon. The model is the random-weight Qwen2 architecture file carrying Qwen 2.5's
 * golden template (Hermes-style <tool_call> markup): its output is noise, so only the
 * grammar of tool_choice "any" / "tool" makes its answers calls.
 *
 * The Messages route rewrites tools, tool_choice, tool_use and tool_result blocks into the
 * chat route's shape and shares its path, so the checks are equalities with that route:
 * greedy answers are the same calls (Anthropic's input is chat's arguments parsed), and a
 * history with tool_use and tool_result blocks counts as many prompt tokens as the same
 * history in chat's tool_calls and tool messages. Also: the stream's tool_use blocks and
 * input_json_delta pieces, stop_reason "tool_use", and each refusal named in Anthropic's
 * spelling.
 */
#define _GNU_SOURCE
#include "tests/common/testutil.h"
#include "tests/server/e2e.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RANDOM_QWEN2 "models/arch/qwen2-tiny-Q4_K_M.gguf"
#define KEY          "-H 'anthropic-version: 2023-06-01'"

static struct e2e_daemon d;

static void start(void)
{
    json_t *g = gs_test_load_json(gs_test_shared_path("golden/templates/Qwen-Qwen2.5-7B-Instruct.json"));
    json_t *t = json_object_get(g, "template");
    char *path = e2e_model_with_template(RANDOM_QWEN2, "qwen2-anthropic-tools.gguf",
                                         json_string_value(t), json_string_length(t));
    char args[1024];
    snprintf(args, sizeof(args), "-m '%s'", path); /* the last -m wins */
    e2e_start(&d, args);
    free(path);
    json_decref(g);
}

static void stop(void)
{
    cr_expect_eq(e2e_stop(&d), 0, "the daemon did not exit 0 after SIGTERM");
}

TestSuite(http_anthropic_tools, .init = start, .fini = stop, .timeout = 300);

static const char *str(json_t *o, const char *key)
{
    return json_string_value(json_object_get(o, key));
}

/* The whole prompt of a message's usage: computed plus served by the prefix cache. */
static json_int_t prompt_of(json_t *usage)
{
    return json_integer_value(json_object_get(usage, "input_tokens")) +
           json_integer_value(json_object_get(usage, "cache_read_input_tokens"));
}

static void post(const char *path, json_t *req, struct e2e_resp *r)
{
    char *body = json_dumps(req, JSON_COMPACT);
    e2e_http(&d, "POST", path, body, KEY, r);
    free(body);
    json_decref(req);
}

/* Enumerated values keep a noise model's calls short: no answer runs into max_tokens. */
static json_t *schema(void)
{
    return json_pack("{s:s,s:{s:{s:[s,s,s]},s:{s:s,s:[s,s]}},s:[s,s],s:b}", "type", "object",
                     "properties", "city", "enum", "Paris", "London", "Lagos", "unit", "type",
                     "string", "enum", "celsius", "fahrenheit", "required", "city", "unit",
                     "additionalProperties", 0);
}

/* The same two tools in each API's spelling. */
static json_t *anthropic_tools(void)
{
    return json_pack("[{s:s,s:s,s:o},{s:s,s:o}]", "name", "get_weather", "description",
                     "The weather in a city", "input_schema", schema(), "name", "get_time",
                     "input_schema", json_pack("{s:s,s:{}}", "type", "object", "properties"));
}

static json_t *chat_tools(void)
{
    return json_pack("[{s:s,s:{s:s,s:s,s:o}},{s:s,s:{s:s,s:o}}]", "type", "function", "function",
                     "name", "get_weather", "description", "The weather in a city", "parameters",
                     schema(), "type", "function", "function", "name", "get_time", "parameters",
                     json_pack("{s:s,s:{}}", "type", "object", "properties"));
}

#define QUESTION "What is the weather in Paris?"

/* ---- answers: the chat route's calls, as tool_use blocks ---------------------------------- */

static void expect_same_call(json_t *anthropic_choice, json_t *chat_choice, bool parallel,
                             const char *what)
{
    struct e2e_resp a, c;
    post("/v1/messages",
         json_pack("{s:[{s:s,s:s}],s:i,s:i,s:o,s:o}", "messages", "role", "user", "content",
                   QUESTION, "max_tokens", 256, "temperature", 0, "tools", anthropic_tools(),
                   "tool_choice", anthropic_choice),
         &a);
    post("/v1/chat/completions",
         json_pack("{s:[{s:s,s:s}],s:i,s:i,s:o,s:o,s:b}", "messages", "role", "user", "content",
                   QUESTION, "max_tokens", 256, "temperature", 0, "tools", chat_tools(),
                   "tool_choice", chat_choice, "parallel_tool_calls", parallel),
         &c);
    cr_assert_eq(a.status, 200, "%s: %s", what, a.body);
    cr_assert_eq(c.status, 200, "%s: %s", what, c.body);
    json_t *calls = json_object_get(
        json_object_get(json_array_get(json_object_get(c.json, "choices"), 0), "message"),
        "tool_calls");
    cr_assert_geq(json_array_size(calls), 1, "%s: %s", what, c.body);
    json_t *content = json_object_get(a.json, "content");
    cr_expect_str_eq(str(a.json, "stop_reason"), "tool_use", "%s: %s", what, a.body);
    cr_assert_eq(json_array_size(content), json_array_size(calls), "%s: %s vs %s", what, a.body,
                 c.body);
    for (size_t i = 0; i < json_array_size(calls); i++) {
        json_t *blk = json_array_get(content, i);
        json_t *fn = json_object_get(json_array_get(calls, i), "function");
        cr_expect_str_eq(str(blk, "type"), "tool_use", "%s", what);
        cr_expect(str(blk, "id") && !strncmp(str(blk, "id"), "toolu_", 6), "%s: %s", what, a.body);
        cr_expect_str_eq(str(blk, "name"), str(fn, "name"), "%s", what);
        json_t *args = json_loads(str(fn, "arguments"), 0, NULL);
        cr_expect(json_equal(json_object_get(blk, "input"), args), "%s: input %s vs arguments %s",
                  what, a.body, str(fn, "arguments"));
        json_decref(args);
    }
    cr_expect_eq(prompt_of(json_object_get(a.json, "usage")),
                 json_integer_value(json_object_get(json_object_get(c.json, "usage"),
                                                    "prompt_tokens")),
                 "%s: the two routes rendered different prompts", what);
    e2e_resp_free(&a);
    e2e_resp_free(&c);
}

Test(http_anthropic_tools, greedy_tool_use_equals_the_chat_routes_calls)
{
    expect_same_call(json_pack("{s:s}", "type", "any"), json_string("required"), true, "any");
    expect_same_call(json_pack("{s:s,s:s}", "type", "tool", "name", "get_weather"),
                     json_pack("{s:s,s:{s:s}}", "type", "function", "function", "name",
                               "get_weather"),
                     true, "tool");
    expect_same_call(json_pack("{s:s,s:b}", "type", "any", "disable_parallel_tool_use", 1),
                     json_string("required"), false, "one call");
}

/* ---- the stream ---------------------------------------------------------------------------- */

Test(http_anthropic_tools, stream_has_tool_use_blocks_and_input_json_deltas)
{
    struct e2e_resp whole, r;
#define REQ(stream)                                                                                \
    json_pack("{s:[{s:s,s:s}],s:i,s:i,s:o,s:{s:s,s:s},s:b}", "messages", "role", "user",        \
              "content", QUESTION, "max_tokens", 256, "temperature", 0, "tools",                    \
              anthropic_tools(), "tool_choice", "type", "tool", "name", "get_weather", "stream",   \
              stream)
    post("/v1/messages", REQ(0), &whole);
    post("/v1/messages", REQ(1), &r);
#undef REQ
    cr_assert_eq(whole.status, 200, "%s", whole.body);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *want = json_object_get(whole.json, "content");
    json_t *ev = e2e_sse_named_events(r.body);
    size_t n = json_array_size(ev);
    cr_assert_geq(n, 6, "%s", r.body);
    cr_expect_str_eq(str(json_array_get(ev, 0), "event"), "message_start", "%s", r.body);
    cr_expect_str_eq(str(json_array_get(ev, n - 1), "event"), "message_stop", "%s", r.body);
    json_t *blocks = json_array();
    char args[4096] = "";
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(ev, i), *data = json_object_get(e, "data");
        const char *name = str(e, "event");
        cr_expect_str_eq(str(data, "type"), name, "the data's type is the event's name");
        if (!strcmp(name, "content_block_start")) {
            json_t *b = json_object_get(data, "content_block");
            cr_expect_eq(json_integer_value(json_object_get(data, "index")),
                         (json_int_t)json_array_size(blocks), "blocks are numbered in order");
            cr_expect_str_eq(str(b, "type"), "tool_use", "%s", r.body);
            json_t *input = json_object_get(b, "input");
            cr_expect(json_is_object(input) && json_object_size(input) == 0, "%s", r.body);
            json_array_append(blocks, b);
            args[0] = '\0';
        } else if (!strcmp(name, "content_block_delta")) {
            json_t *dl = json_object_get(data, "delta");
            cr_assert_str_eq(str(dl, "type"), "input_json_delta", "%s", r.body);
            cr_assert_lt(strlen(args) + strlen(str(dl, "partial_json")), sizeof(args));
            strcat(args, str(dl, "partial_json"));
        } else if (!strcmp(name, "content_block_stop")) {
            json_t *input = json_loads(args, 0, NULL);
            cr_expect(input, "the pieces are not JSON: %s", args);
            json_object_set_new(json_array_get(blocks, json_array_size(blocks) - 1), "input",
                                input ? input : json_null());
        } else if (!strcmp(name, "message_delta")) {
            cr_expect_str_eq(str(json_object_get(data, "delta"), "stop_reason"), "tool_use", "%s",
                             r.body);
        }
    }
    /* The stream's blocks are the whole answer's, ids aside (each answer draws its own). */
    cr_assert_eq(json_array_size(blocks), json_array_size(want), "%s vs %s", r.body, whole.body);
    for (size_t i = 0; i < json_array_size(want); i++) {
        json_t *a = json_array_get(blocks, i), *b = json_array_get(want, i);
        cr_expect(!strncmp(str(a, "id"), "toolu_", 6), "%s", str(a, "id"));
        cr_expect_str_eq(str(a, "name"), str(b, "name"));
        cr_expect(json_equal(json_object_get(a, "input"), json_object_get(b, "input")),
                  "%s vs %s", r.body, whole.body);
    }
    json_decref(blocks);
    json_decref(ev);
    e2e_resp_free(&whole);
    e2e_resp_free(&r);
}

/* ---- a history of calls and results -------------------------------------------------------- */

static json_int_t count_tokens(json_t *req)
{
    struct e2e_resp r;
    post("/v1/messages/count_tokens", req, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_int_t n = json_integer_value(json_object_get(r.json, "input_tokens"));
    e2e_resp_free(&r);
    return n;
}

static json_t *anthropic_history(bool is_error)
{
    return json_pack(
        "[{s:s,s:s},{s:s,s:[{s:s,s:s},{s:s,s:s,s:s,s:{s:s,s:s}}]},"
        "{s:s,s:[{s:s,s:s,s:s,s:b},{s:s,s:s}]}]",
        "role", "user", "content", QUESTION, "role", "assistant", "content", "type", "text", "text",
        "Let me look.", "type", "tool_use", "id", "toolu_1", "name", "get_weather", "input",
        "city", "Paris", "unit", "celsius", "role", "user", "content", "type", "tool_result",
        "tool_use_id", "toolu_1", "content", "18 degrees", "is_error", is_error, "type", "text",
        "text", "And tomorrow?");
}

Test(http_anthropic_tools, a_history_of_calls_counts_as_the_chat_routes)
{
    json_int_t anthropic = count_tokens(json_pack("{s:o,s:o}", "messages", anthropic_history(0),
                                                  "tools", anthropic_tools()));
    struct e2e_resp c;
    post("/v1/chat/completions",
         json_pack("{s:[{s:s,s:s},{s:s,s:s,s:[{s:s,s:s,s:{s:s,s:s}}]},{s:s,s:s,s:s},{s:s,s:s}],"
                   "s:i,s:o}",
                   "messages", "role", "user", "content", QUESTION, "role", "assistant", "content",
                   "Let me look.", "tool_calls", "id", "toolu_1", "type", "function", "function",
                   "name", "get_weather", "arguments", "{\"city\":\"Paris\",\"unit\":\"celsius\"}",
                   "role", "tool", "tool_call_id", "toolu_1", "content", "18 degrees", "role",
                   "user", "content", "And tomorrow?", "max_tokens", 1, "tools", chat_tools()),
         &c);
    cr_assert_eq(c.status, 200, "%s", c.body);
    cr_expect_eq(anthropic,
                 json_integer_value(json_object_get(json_object_get(c.json, "usage"),
                                                    "prompt_tokens")),
                 "tool_use and tool_result blocks are not chat's tool_calls and tool message");
    e2e_resp_free(&c);
    /* is_error reaches the model: the result's text says so. */
    json_int_t with_error = count_tokens(json_pack("{s:o,s:o}", "messages", anthropic_history(1),
                                                   "tools", anthropic_tools()));
    cr_expect_gt(with_error, anthropic, "is_error was dropped");
    /* And the history answers through /v1/messages as well. */
    struct e2e_resp r;
    post("/v1/messages",
         json_pack("{s:o,s:o,s:i,s:i}", "messages", anthropic_history(0), "tools",
                   anthropic_tools(), "max_tokens", 4, "temperature", 0),
         &r);
    cr_expect_eq(r.status, 200, "%s", r.body);
    cr_expect_eq(prompt_of(json_object_get(r.json, "usage")), anthropic);
    e2e_resp_free(&r);
}

/* ---- refusals, in Anthropic's spelling ----------------------------------------------------- */

static void expect_refused(json_t *req, const char *needle)
{
    struct e2e_resp r;
    char *body = json_dumps(req, JSON_COMPACT);
    post("/v1/messages", req, &r);
    cr_expect_eq(r.status, 400, "%s -> %d %s", body, r.status, r.body);
    json_t *e = json_object_get(r.json, "error");
    cr_expect_str_eq(str(r.json, "type"), "error", "%s", r.body);
    cr_expect_str_eq(str(e, "type"), "invalid_request_error", "%s", r.body);
    cr_expect(str(e, "message") && strstr(str(e, "message"), needle), "'%s' not in %s", needle,
              r.body);
    free(body);
    e2e_resp_free(&r);
}

static json_t *ask(json_t *tools, json_t *choice)
{
    json_t *req = json_pack("{s:[{s:s,s:s}],s:i,s:o}", "messages", "role", "user", "content",
                            QUESTION, "max_tokens", 8, "tools", tools);
    if (choice)
        json_object_set_new(req, "tool_choice", choice);
    return req;
}

static json_t *with_messages(json_t *msgs)
{
    return json_pack("{s:o,s:i,s:o}", "messages", msgs, "max_tokens", 8, "tools",
                     anthropic_tools());
}

Test(http_anthropic_tools, what_cannot_be_honoured_is_refused_by_name)
{
    expect_refused(ask(json_pack("[{s:s,s:s}]", "type", "web_search_20250305", "name", "web"), NULL),
                   "tools[0].type");
    expect_refused(ask(json_pack("[{s:s}]", "name", "get_weather"), NULL),
                   "tools[0].input_schema' is required");
    expect_refused(ask(json_pack("[{s:s,s:{s:s}}]", "name", "f", "input_schema", "type", "string"),
                       NULL),
                   "tools[0].input_schema");
    expect_refused(ask(json_pack("[{s:s,s:o}]", "name", "bad name", "input_schema", schema()), NULL),
                   "tools[0].name");
    expect_refused(ask(json_pack("[{s:s,s:o,s:b}]", "name", "f", "input_schema", schema(),
                                 "strict", 1),
                       NULL),
                   "tools[0].strict");
    expect_refused(ask(anthropic_tools(), json_pack("{s:s,s:s}", "type", "tool", "name", "nope")),
                   "tool_choice.name");
    expect_refused(ask(anthropic_tools(), json_pack("{s:s}", "type", "tool")), "tool_choice.name");
    expect_refused(ask(anthropic_tools(), json_pack("{s:s}", "type", "sometimes")),
                   "tool_choice.type");
    expect_refused(ask(anthropic_tools(), json_pack("{s:s,s:b}", "type", "none",
                                                    "disable_parallel_tool_use", 1)),
                   "disable_parallel_tool_use");
    /* Blocks in the wrong place. */
    expect_refused(with_messages(json_pack("[{s:s,s:[{s:s,s:s,s:s,s:{}}]}]", "role", "user",
                                           "content", "type", "tool_use", "id", "t1", "name",
                                           "get_time", "input")),
                   "messages[0].content[0]': tool_use blocks are for assistant messages");
    expect_refused(with_messages(json_pack("[{s:s,s:s},{s:s,s:[{s:s,s:s,s:s,s:{}}]},"
                                           "{s:s,s:[{s:s,s:s}]}]",
                                           "role", "user", "content", QUESTION, "role",
                                           "assistant", "content", "type", "tool_use", "id", "t1",
                                           "name", "get_time", "input", "role", "user", "content",
                                           "type", "tool_result", "tool_use_id", "t2")),
                   "messages[2].content[0].tool_use_id': 't2' is not the id");
    expect_refused(with_messages(json_pack("[{s:s,s:s},{s:s,s:[{s:s,s:s,s:s,s:{}}]},"
                                           "{s:s,s:[{s:s,s:s},{s:s,s:s}]}]",
                                           "role", "user", "content", QUESTION, "role",
                                           "assistant", "content", "type", "tool_use", "id", "t1",
                                           "name", "get_time", "input", "role", "user", "content",
                                           "type", "text", "text", "x", "type", "tool_result",
                                           "tool_use_id", "t1")),
                   "must come before any text");
    expect_refused(with_messages(json_pack("[{s:s,s:s},{s:s,s:[{s:s,s:s,s:s,s:s}]}]", "role",
                                           "user", "content", QUESTION, "role", "assistant",
                                           "content", "type", "tool_use", "id", "t1", "name",
                                           "get_time", "input", "now")),
                   "messages[1].content[0].input' must be an object");
    expect_refused(with_messages(json_pack("[{s:s,s:s},{s:s,s:[{s:s,s:s,s:s,s:{}}]}]", "role",
                                           "user", "content", QUESTION, "role", "assistant",
                                           "content", "type", "tool_use", "id", "t1", "name",
                                           "get_time", "input")),
                   "cannot hold tool_use blocks");
    /* A prefill is text the answer continues; a forced call cannot continue it. */
    json_t *req = ask(anthropic_tools(), json_pack("{s:s}", "type", "any"));
    json_array_append_new(json_object_get(req, "messages"),
                          json_pack("{s:s,s:s}", "role", "assistant", "content", "Sure"));
    expect_refused(req, "prefill");
}

/* A model rendered by a built-in format cannot be given tools: the shared stories260K
 * file has no template. */
Test(http_anthropic_tools, tools_need_a_jinja_template)
{
    struct e2e_daemon plain;
    e2e_start(&plain, "");
    struct e2e_resp r;
    json_t *req = ask(anthropic_tools(), NULL);
    char *body = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    e2e_http(&plain, "POST", "/v1/messages", body, KEY, &r);
    cr_expect_eq(r.status, 400, "%s", r.body);
    cr_expect(strstr(r.body, "Jinja"), "%s", r.body);
    cr_expect(strstr(r.body, "\"tools\"") || strstr(r.body, "'tools'"), "%s", r.body);
    free(body);
    e2e_resp_free(&r);
    cr_expect_eq(e2e_stop(&plain), 0);
}

/* An assistant turn of tool_use blocks alone reaches the template with "" as its content,
 * not null: Qwen 3's template tests "'</think>' in message.content", which a null content
 * cannot answer. Its prompt is the chat route's for the same history with content "". */
Test(http_anthropic_tools, a_turn_of_tool_use_alone_renders_with_qwen3s_template)
{
    json_t *g = gs_test_load_json(gs_test_shared_path("golden/templates/Qwen-Qwen3-0.6B.json"));
    json_t *t = json_object_get(g, "template");
    cr_assert(json_is_string(t), "the Qwen 3 golden has no template");
    char *path = e2e_model_with_template("models/arch/qwen3-tiny-Q4_K_M.gguf",
                                         "qwen3-anthropic-tools", json_string_value(t),
                                         json_string_length(t));
    char args[1024];
    snprintf(args, sizeof(args), "-m '%s'", path);
    struct e2e_daemon q3;
    e2e_start(&q3, args);
    json_t *msgs = json_pack(
        "[{s:s,s:s},{s:s,s:[{s:s,s:s,s:s,s:{s:s,s:s}}]},{s:s,s:[{s:s,s:s,s:s}]}]", "role",
        "user", "content", QUESTION, "role", "assistant", "content", "type", "tool_use", "id",
        "toolu_1", "name", "get_weather", "input", "city", "Paris", "unit", "celsius", "role",
        "user", "content", "type", "tool_result", "tool_use_id", "toolu_1", "content",
        "18 degrees");
    json_t *req = json_pack("{s:o,s:o}", "messages", msgs, "tools", anthropic_tools());
    char *body = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    struct e2e_resp r;
    e2e_http(&q3, "POST", "/v1/messages/count_tokens", body, KEY, &r);
    /* cr_expect, not cr_assert: a failure must still reach e2e_stop below. */
    cr_expect_eq(r.status, 200, "%s", r.body);
    json_int_t anthropic = json_integer_value(json_object_get(r.json, "input_tokens"));
    e2e_resp_free(&r);
    free(body);
    req = json_pack("{s:[{s:s,s:s},{s:s,s:s,s:[{s:s,s:s,s:{s:s,s:s}}]},{s:s,s:s,s:s}],s:i,s:o}",
                    "messages", "role", "user", "content", QUESTION, "role", "assistant",
                    "content", "", "tool_calls", "id", "toolu_1", "type", "function", "function",
                    "name", "get_weather", "arguments", "{\"city\":\"Paris\",\"unit\":\"celsius\"}",
                    "role", "tool", "tool_call_id", "toolu_1", "content", "18 degrees",
                    "max_tokens", 1, "tools", chat_tools());
    body = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    e2e_http(&q3, "POST", "/v1/chat/completions", body, NULL, &r);
    cr_expect_eq(r.status, 200, "%s", r.body);
    cr_expect_eq(anthropic,
                 json_integer_value(json_object_get(json_object_get(r.json, "usage"),
                                                    "prompt_tokens")),
                 "the tool_use-only turn is not the chat route's turn with content \"\"");
    e2e_resp_free(&r);
    free(body);
    free(path);
    json_decref(g);
    cr_expect_eq(e2e_stop(&q3), 0);
}
