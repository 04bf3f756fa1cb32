/*
 * tests/server/test_http_tools.c - tool calling on the real daemon. The model is the
 * random-weight Qwen2 architecture file (models/arch) carrying a golden template of
 * ../shared/golden/templates in its tokenizer.chat_template (the arch files have none):
 * its output is noise, so only the grammar makes calls well formed.
 *
 * Checked: the prompt holds the tools and the earlier calls exactly as the family's
 * template renders them (the golden renderings, arguments sent as a string rendered as
 * the object); tool_choice "required" and a named function give calls that parse and
 * validate for every seed, in every format; a stream carries OpenAI's call deltas and no
 * markup in content; a call cut off (a stop string) comes back as content with a log
 * line, never a 500; what cannot be honoured is a 400 naming it (tools on a built-in
 * format, on /v1/completions, with response_format; bad tool definitions).
 */
#define _GNU_SOURCE
#include "tests/common/testutil.h"
#include "tests/server/e2e.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RANDOM_QWEN2 "models/arch/qwen2-tiny-Q4_K_M.gguf"

/* ---- a model file carrying a template (as test_http_jinja.c writes them) ------------------- */

static json_t *golden(const char *name)
{
    char rel[256];
    snprintf(rel, sizeof(rel), "golden/templates/%s.json", name);
    return gs_test_load_json(gs_test_shared_path(rel));
}

static json_t *golden_case(const json_t *g, const char *name)
{
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(g, "cases"), i, c)
    {
        if (!strcmp(json_string_value(json_object_get(c, "name")), name))
            return c;
    }
    cr_assert_fail("no golden case %s", name);
    return NULL;
}

/* The daemon serving the shared model file rel with golden template name. */
static void start_family_on(struct e2e_daemon *d, const char *rel, const char *name, json_t **g)
{
    *g = golden(name);
    char file[160];
    snprintf(file, sizeof(file), "%s-%s", strrchr(rel, '/') ? strrchr(rel, '/') + 1 : rel, name);
    char *path = e2e_model_with_template(rel, file, json_string_value(json_object_get(*g, "template")),
                                         json_string_length(json_object_get(*g, "template")));
    char args[1024];
    snprintf(args, sizeof(args), "-m '%s'", path); /* the last -m wins */
    e2e_start(d, args);
    free(path);
}

/* The daemon serving the random Qwen2 file with golden template name. */
static void start_family(struct e2e_daemon *d, const char *name, json_t **g)
{
    start_family_on(d, RANDOM_QWEN2, name, g);
}

static void post(const struct e2e_daemon *d, const char *path, json_t *req, struct e2e_resp *r)
{
    char *body = json_dumps(req, JSON_COMPACT);
    e2e_http(d, "POST", path, body, NULL, r);
    free(body);
    json_decref(req);
}

/* ---- the prompt: tools and calls as the template renders them ------------------------------ */

/* /apply-template for the golden case's messages and tools; the golden's bos_token is
 * this vocabulary's ("<s>") here. */
static void expect_golden_prompt(const struct e2e_daemon *d, const json_t *g, const char *case_name,
                                 const char *as_case)
{
    const json_t *c = golden_case(g, case_name), *want = golden_case(g, as_case);
    json_t *req = json_pack("{s:O,s:O}", "messages", json_object_get(c, "messages"), "tools",
                            json_object_get(c, "tools"));
    struct e2e_resp r;
    post(d, "/apply-template", req, &r);
    cr_assert_eq(r.status, 200, "%s: %s", case_name, r.body);
    const char *bos = json_string_value(json_object_get(g, "bos_token"));
    const char *ref = json_string_value(json_object_get(want, "rendered"));
    char *expect;
    if (bos && *bos && !strncmp(ref, bos, strlen(bos)))
        cr_assert(asprintf(&expect, "<s>%s", ref + strlen(bos)) > 0);
    else
        expect = strdup(ref);
    cr_expect_str_eq(json_string_value(json_object_get(r.json, "prompt")), expect, "%s as %s",
                     case_name, as_case);
    free(expect);
    e2e_resp_free(&r);
}

Test(http_tools, prompts_render_tools_and_calls_as_the_template_does, .timeout = 300)
{
    static const char *const families[] = {"Qwen-Qwen2.5-7B-Instruct",
                                           "NousResearch-Hermes-3-Llama-3.1-8B-tool_use",
                                           "meta-llama-Llama-3.1-8B-Instruct"};
    for (size_t i = 0; i < sizeof(families) / sizeof(*families); i++) {
        struct e2e_daemon d;
        json_t *g;
        start_family(&d, families[i], &g);
        expect_golden_prompt(&d, g, "tools_available", "tools_available");
        expect_golden_prompt(&d, g, "tool_call_arguments_object", "tool_call_arguments_object");
        /* The SDKs send arguments as a JSON string; the template gets the object. */
        expect_golden_prompt(&d, g, "tool_call_arguments_string", "tool_call_arguments_object");
        cr_expect_eq(e2e_stop(&d), 0);
        json_decref(g);
    }
}

/* ---- calls under the grammar --------------------------------------------------------------- */

#define ADD_TOOL                                                                                   \
    "{\"type\":\"function\",\"function\":{\"name\":\"add\",\"parameters\":{\"type\":\"object\","   \
    "\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":99},\"b\":{\"type\":"   \
    "\"integer\",\"minimum\":0,\"maximum\":99}},\"required\":[\"a\",\"b\"]}}}"
#define WEATHER_TOOL                                                                               \
    "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":"      \
    "\"object\",\"properties\":{\"unit\":{\"enum\":[\"celsius\",\"fahrenheit\"]}},\"required\":"   \
    "[\"unit\"]}}}"

static json_t *tools_json(void)
{
    json_t *t = json_loads("[" ADD_TOOL "," WEATHER_TOOL "]", 0, NULL);
    cr_assert(t);
    return t;
}

/* A chat asking for calls; with system, a short system message first (Mistral's template
 * has a long default one; Gemma's refuses any). */
static json_t *tool_request_sys(const char *choice, int seed, bool system)
{
    json_t *req = json_pack("{s:[{s:s,s:s}],s:o,s:i,s:i,s:b}", "messages", "role", "user",
                            "content", "Add 2 and 3.", "tools", tools_json(), "max_tokens", 300,
                            "seed", seed, "parallel_tool_calls", 0);
    if (system)
        json_array_insert_new(json_object_get(req, "messages"), 0,
                              json_pack("{s:s,s:s}", "role", "system", "content", "Be brief."));
    json_object_set_new(
        req, "tool_choice",
        choice ? json_pack("{s:s,s:{s:s}}", "type", "function", "function", "name", choice)
               : json_string("required"));
    return req;
}

static json_t *tool_request(const char *choice, int seed)
{
    return tool_request_sys(choice, seed, true);
}

/* The call's arguments validate: add's integers in [0, 99], get_weather's enum. */
static void expect_valid_call(const json_t *call, const char *only, const char *what)
{
    json_t *fn = json_object_get(call, "function");
    const char *name = json_string_value(json_object_get(fn, "name"));
    cr_assert_str_eq(json_string_value(json_object_get(call, "type")), "function", "%s", what);
    cr_assert(json_string_value(json_object_get(call, "id")), "%s: no id", what);
    cr_assert(name, "%s: no name", what);
    if (only)
        cr_expect_str_eq(name, only, "%s", what);
    const char *args = json_string_value(json_object_get(fn, "arguments"));
    json_t *a = json_loads(args ? args : "", 0, NULL);
    cr_assert(json_is_object(a), "%s: arguments '%s' are not a JSON object", what, args);
    if (!strcmp(name, "add")) {
        cr_expect_eq(json_object_size(a), 2, "%s: %s", what, args);
        for (int k = 0; k < 2; k++) {
            json_t *v = json_object_get(a, k ? "b" : "a");
            cr_expect(json_is_integer(v) && json_integer_value(v) >= 0 &&
                          json_integer_value(v) <= 99,
                      "%s: %s", what, args);
        }
    } else {
        cr_expect_str_eq(name, "get_weather", "%s", what);
        const char *u = json_string_value(json_object_get(a, "unit"));
        cr_expect(u && (!strcmp(u, "celsius") || !strcmp(u, "fahrenheit")), "%s: %s", what, args);
    }
    json_decref(a);
}

static void expect_calls_on(const char *rel, const char *family, bool system)
{
    struct e2e_daemon d;
    json_t *g;
    start_family_on(&d, rel, family, &g);
    for (int seed = 1; seed <= 6; seed++)
        for (int named = 0; named < 2; named++) {
            struct e2e_resp r;
            post(&d, "/v1/chat/completions",
                 tool_request_sys(named ? "get_weather" : NULL, seed, system), &r);
            cr_assert_eq(r.status, 200, "%s: %s", family, r.body);
            json_t *ch = json_array_get(json_object_get(r.json, "choices"), 0);
            json_t *msg = json_object_get(ch, "message");
            char what[160];
            snprintf(what, sizeof(what), "%s seed %d%s", family, seed, named ? " named" : "");
            cr_expect_str_eq(json_string_value(json_object_get(ch, "finish_reason")), "tool_calls",
                             "%s: %s", what, r.body);
            cr_expect(json_is_null(json_object_get(msg, "content")), "%s: %s", what, r.body);
            json_t *calls = json_object_get(msg, "tool_calls");
            cr_assert_eq(json_array_size(calls), 1, "%s: %s", what, r.body);
            expect_valid_call(json_array_get(calls, 0), named ? "get_weather" : NULL, what);
            e2e_resp_free(&r);
        }
    cr_expect_eq(e2e_stop(&d), 0);
    json_decref(g);
}

static void expect_calls_for(const char *family, bool system)
{
    expect_calls_on(RANDOM_QWEN2, family, system);
}

Test(http_tools, required_calls_validate_hermes, .timeout = 300)
{
    expect_calls_for("Qwen-Qwen2.5-7B-Instruct", true);
}

Test(http_tools, required_calls_validate_llama3, .timeout = 300)
{
    expect_calls_for("meta-llama-Llama-3.3-70B-Instruct", true);
}

Test(http_tools, required_calls_validate_mistral, .timeout = 300)
{
    expect_calls_for("unsloth-mistral-Devstral-Small-2507", true);
}

Test(http_tools, required_calls_validate_generic, .timeout = 300)
{
    expect_calls_for("google-gemma-2-2b-it", false); /* the instructions open the user's text */
}

/* Every architecture graphserve serves, each with a template of its family: the calls are
 * the grammar's whatever the model. The Gemma files are the F32 ones, whose known-answer
 * check passes (as in test_families.c). */
Test(http_tools, required_calls_validate_on_every_architecture, .timeout = 900)
{
    expect_calls_on("models/stories260K.gguf", "meta-llama-Llama-3.1-8B-Instruct", true);
    expect_calls_on("models/arch/qwen3-tiny-Q4_K_M.gguf", "Qwen-Qwen3-0.6B", true);
    expect_calls_on("models/arch/phi3-tiny-Q4_K_M.gguf", "microsoft-Phi-3.5-mini-instruct", true);
    expect_calls_on("models/arch/gemma2-tiny-F32.gguf", "google-gemma-2-2b-it", false);
    expect_calls_on("models/arch/gemma3-tiny-F32.gguf", "google-gemma-2-2b-it", false);
}

/* ---- streams and the fallback ---------------------------------------------------------------- */

Test(http_tools, streams_carry_call_deltas_and_no_markup, .timeout = 300)
{
    struct e2e_daemon d;
    json_t *g;
    start_family(&d, "Qwen-Qwen2.5-7B-Instruct", &g);
    json_t *req = tool_request(NULL, 4);
    json_object_set_new(req, "stream", json_true());
    struct e2e_resp r;
    post(&d, "/v1/chat/completions", req, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    bool done;
    json_t *ev = e2e_sse_events(r.body, &done);
    cr_assert(done);
    size_t i, n_first = 0, n_args = 0;
    json_t *e;
    struct e2e_resp whole;
    post(&d, "/v1/chat/completions", tool_request(NULL, 4), &whole);
    json_t *wcalls = json_object_get(
        json_object_get(json_array_get(json_object_get(whole.json, "choices"), 0), "message"),
        "tool_calls");
    const char *fin = NULL;
    char args[4096] = "";
    json_array_foreach(ev, i, e)
    {
        json_t *ch = json_array_get(json_object_get(e, "choices"), 0);
        json_t *delta = json_object_get(ch, "delta");
        const char *content = json_string_value(json_object_get(delta, "content"));
        cr_expect(!content || !*content, "content next to a call: '%s'", content);
        if (json_is_string(json_object_get(ch, "finish_reason")))
            fin = json_string_value(json_object_get(ch, "finish_reason"));
        json_t *tc = json_array_get(json_object_get(delta, "tool_calls"), 0);
        if (!tc)
            continue;
        cr_expect_eq(json_integer_value(json_object_get(tc, "index")), 0);
        json_t *fn = json_object_get(tc, "function");
        if (json_object_get(tc, "id")) {
            n_first++;
            cr_expect_str_eq(json_string_value(json_object_get(tc, "type")), "function");
            cr_expect_str_eq(json_string_value(json_object_get(fn, "name")),
                             json_string_value(json_object_get(
                                 json_object_get(json_array_get(wcalls, 0), "function"), "name")));
        } else {
            cr_expect_eq(json_object_size(tc), 2, "later deltas: index and function alone");
            cr_expect(!json_object_get(fn, "name"));
        }
        strncat(args, json_string_value(json_object_get(fn, "arguments")),
                sizeof(args) - strlen(args) - 1);
        n_args += json_string_length(json_object_get(fn, "arguments")) > 0;
    }
    cr_expect_eq(n_first, 1);
    /* Under "required" the arguments stream as they are generated, in several deltas. */
    cr_expect_gt(n_args, 2, "the arguments came in %zu deltas", n_args);
    cr_expect_str_eq(fin, "tool_calls");
    cr_expect_str_eq(args,
                     json_string_value(json_object_get(
                         json_object_get(json_array_get(wcalls, 0), "function"), "arguments")),
                     "the streamed arguments are the answer's");
    json_decref(ev);
    e2e_resp_free(&r);
    e2e_resp_free(&whole);
    cr_expect_eq(e2e_stop(&d), 0);
    json_decref(g);
}

Test(http_tools, a_cut_call_comes_back_as_content_with_a_log_line, .timeout = 300)
{
    struct e2e_daemon d;
    json_t *g;
    start_family(&d, "Qwen-Qwen2.5-7B-Instruct", &g);
    json_t *req = tool_request("add", 1);
    json_object_set_new(req, "stop", json_string("arguments"));
    struct e2e_resp r;
    post(&d, "/v1/chat/completions", req, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *ch = json_array_get(json_object_get(r.json, "choices"), 0);
    json_t *msg = json_object_get(ch, "message");
    cr_expect_str_eq(json_string_value(json_object_get(msg, "content")),
                     "<tool_call>\n{\"name\": \"add\", \"", "%s", r.body);
    cr_expect(!json_object_get(msg, "tool_calls"), "%s", r.body);
    cr_expect_str_eq(json_string_value(json_object_get(ch, "finish_reason")), "stop");
    e2e_resp_free(&r);
    e2e_await_log(&d, "event=tool_call_malformed", 1);
    cr_expect_eq(e2e_stop(&d), 0);
    json_decref(g);
}

/* ---- refusals ------------------------------------------------------------------------------- */

static void expect_400(const struct e2e_daemon *d, const char *path, const char *body,
                       const char *param, const char *needle)
{
    struct e2e_resp r;
    e2e_http(d, "POST", path, body, NULL, &r);
    cr_assert_eq(r.status, 400, "%s: %s", body, r.body);
    json_t *err = json_object_get(r.json, "error");
    cr_expect_str_eq(json_string_value(json_object_get(err, "param")), param, "%s", r.body);
    cr_expect(strstr(json_string_value(json_object_get(err, "message")), needle), "%s: %s", needle,
              r.body);
    e2e_resp_free(&r);
}

#define CHAT_WITH(extra) "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]," extra "}"

Test(http_tools, what_cannot_be_honoured_is_a_400_naming_it, .timeout = 300)
{
    struct e2e_daemon d;
    json_t *g;
    start_family(&d, "Qwen-Qwen2.5-7B-Instruct", &g);
    const char *chat = "/v1/chat/completions";
    expect_400(&d, chat, CHAT_WITH("\"tools\":[{\"type\":\"function\",\"function\":{}}]"),
               "tools[0].function.name", "required");
    expect_400(&d, chat, CHAT_WITH("\"tools\":[" ADD_TOOL "," ADD_TOOL "]"),
               "tools[1].function.name", "unique");
    expect_400(&d, chat,
               CHAT_WITH("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
                         "\"parameters\":{\"type\":\"array\"}}}]"),
               "tools[0].function.parameters", "object schema");
    expect_400(&d, chat,
               CHAT_WITH("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\","
                         "\"parameters\":{\"type\":\"object\",\"properties\":{\"x\":{\"not\":"
                         "{\"type\":\"string\"}}}}}}]"),
               "tools[0].function.parameters", "'not'");
    expect_400(&d, chat, CHAT_WITH("\"tools\":[{\"type\":\"retrieval\"}]"), "tools[0].type",
               "must be \"function\"");
    expect_400(&d, chat, CHAT_WITH("\"tools\":[" ADD_TOOL "],\"tool_choice\":\"sometimes\""),
               "tool_choice", "sometimes");
    expect_400(&d, chat, CHAT_WITH("\"tool_choice\":\"required\""), "tool_choice", "needs");
    expect_400(&d, chat,
               CHAT_WITH("\"tools\":[" ADD_TOOL "],\"tool_choice\":\"required\","
                         "\"response_format\":{\"type\":\"json_object\"}"),
               "tool_choice", "response_format");
    expect_400(&d, chat, CHAT_WITH("\"parallel_tool_calls\":1"), "parallel_tool_calls", "boolean");
    expect_400(&d, chat,
               "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\",\"tool_calls\":[]}]}",
               "messages[0].tool_calls", "assistant");
    expect_400(&d, chat,
               "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"tool\","
               "\"content\":\"1\"}]}",
               "messages[1].tool_call_id", "required");
    expect_400(&d, "/v1/completions", "{\"prompt\":\"hi\",\"tools\":[" ADD_TOOL "]}", "tools",
               "/v1/chat/completions");
    cr_expect_eq(e2e_stop(&d), 0);
    json_decref(g);

    /* A built-in chat format cannot render tools: refused, never dropped. */
    char args[512];
    snprintf(args, sizeof(args), "-m '%s'", gs_test_shared_path(RANDOM_QWEN2));
    e2e_start(&d, args);
    expect_400(&d, chat, CHAT_WITH("\"tools\":[" ADD_TOOL "]"), "tools", "Jinja");
    struct e2e_resp r;
    e2e_http(&d, "POST", chat, CHAT_WITH("\"tools\":[],\"tool_choice\":\"none\",\"max_tokens\":1"),
             NULL, &r);
    cr_expect_eq(r.status, 200, "%s", r.body);
    cr_expect(!strstr(r.headers, "x-ignored-fields"), "%s", r.headers);
    e2e_resp_free(&r);
    cr_expect_eq(e2e_stop(&d), 0);
}

/* ---- reasoning_content ---------------------------------------------------------------------- */

static json_t *think_message(const struct e2e_daemon *d, const char *extra, struct e2e_resp *r)
{
    char body[512];
    snprintf(body, sizeof(body),
             "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":12,"
             "\"seed\":3%s}",
             extra);
    e2e_http(d, "POST", "/v1/chat/completions", body, NULL, r);
    cr_assert_eq(r->status, 200, "%s", r->body);
    return json_object_get(json_array_get(json_object_get(r->json, "choices"), 0), "message");
}

/*
 * DeepSeek R1's template ends the prompt inside <think>: what the model writes is its
 * thinking until </think> (never, for the random model), so it is all reasoning_content,
 * streamed as that delta field; "reasoning_format": "none" keeps it in content. Qwen 3
 * with enable_thinking false closes the block in the prompt: the answer is content.
 */
Test(http_tools, a_thinking_block_goes_to_reasoning_content, .timeout = 300)
{
    struct e2e_daemon d;
    json_t *g;
    start_family(&d, "deepseek-ai-DeepSeek-R1-Distill-Llama-8B", &g);
    struct e2e_resp a, b, c;
    json_t *split = think_message(&d, "", &a);
    json_t *inl = think_message(&d, ",\"reasoning_format\":\"none\"", &b);
    const char *thought = json_string_value(json_object_get(split, "reasoning_content"));
    cr_assert(thought && *thought, "%s", a.body);
    cr_expect_str_eq(json_string_value(json_object_get(split, "content")), "", "%s", a.body);
    cr_expect_str_eq(json_string_value(json_object_get(inl, "content")), thought, "%s", b.body);
    cr_expect(!json_object_get(inl, "reasoning_content"), "%s", b.body);
    think_message(&d, ",\"stream\":true", &c);
    bool done;
    json_t *ev = e2e_sse_events(c.body, &done);
    char streamed[1024] = "";
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e)
    {
        json_t *delta = json_object_get(json_array_get(json_object_get(e, "choices"), 0), "delta");
        const char *content = json_string_value(json_object_get(delta, "content"));
        cr_expect(!content || !*content, "content in a thinking stream: '%s'", content);
        const char *rc = json_string_value(json_object_get(delta, "reasoning_content"));
        if (rc)
            strncat(streamed, rc, sizeof(streamed) - strlen(streamed) - 1);
    }
    cr_expect_str_eq(streamed, thought);
    json_decref(ev);
    e2e_resp_free(&a);
    e2e_resp_free(&b);
    e2e_resp_free(&c);
    cr_expect_eq(e2e_stop(&d), 0);
    json_decref(g);

    start_family(&d, "Qwen-Qwen3-0.6B", &g);
    json_t *m = think_message(&d, ",\"chat_template_kwargs\":{\"enable_thinking\":false}", &a);
    cr_expect(!json_object_get(m, "reasoning_content"), "%s", a.body);
    cr_expect(json_string_length(json_object_get(m, "content")) > 0, "%s", a.body);
    e2e_resp_free(&a);
    cr_expect_eq(e2e_stop(&d), 0);
    json_decref(g);
}

#define NULL_CONTENT_FMT                                                                           \
    "{\"messages\":[{\"role\":\"user\",\"content\":\"Add 2 and 3.\"},{\"role\":\"assistant\","     \
    "\"content\":%s,\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":"        \
    "{\"name\":\"add\",\"arguments\":\"{\\\"a\\\":2,\\\"b\\\":3}\"}}]},{\"role\":\"tool\","        \
    "\"tool_call_id\":\"call_1\",\"content\":\"5\"}],\"tools\":[" ADD_TOOL "]}"

/* The SDKs send an answer's tool calls back with "content": null. Qwen 3's template searches
 * the content ("'</think>' in message.content") and cannot take null: the template sees "",
 * so the turn renders exactly as one sent with "" and holds the call. */
Test(http_tools, a_tool_call_turn_with_null_content_renders_as_empty, .timeout = 300)
{
    struct e2e_daemon d;
    json_t *g;
    start_family(&d, "Qwen-Qwen3-0.6B", &g);
    char body[2048];
    struct e2e_resp empty, null;
    snprintf(body, sizeof(body), NULL_CONTENT_FMT, "\"\"");
    e2e_http(&d, "POST", "/apply-template", body, NULL, &empty);
    snprintf(body, sizeof(body), NULL_CONTENT_FMT, "null");
    e2e_http(&d, "POST", "/apply-template", body, NULL, &null);
    cr_assert_eq(empty.status, 200, "%s", empty.body);
    cr_assert_eq(null.status, 200, "%s", null.body);
    const char *p = json_string_value(json_object_get(null.json, "prompt"));
    cr_expect_str_eq(p, json_string_value(json_object_get(empty.json, "prompt")));
    cr_expect(p && strstr(p, "\"name\": \"add\"") && strstr(p, "5"), "%s", p);
    /* And a completion of it runs. */
    snprintf(body, sizeof(body), NULL_CONTENT_FMT, "null");
    json_t *req = json_loads(body, 0, NULL);
    cr_assert(req);
    json_object_set_new(req, "max_tokens", json_integer(4));
    struct e2e_resp r;
    post(&d, "/v1/chat/completions", req, &r);
    cr_expect_eq(r.status, 200, "%s", r.body);
    e2e_resp_free(&r);
    e2e_resp_free(&empty);
    e2e_resp_free(&null);
    cr_expect_eq(e2e_stop(&d), 0);
    json_decref(g);
}
