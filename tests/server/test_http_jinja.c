/*
 * tests/server/test_http_jinja.c - the real daemon rendering chats through
 * the model's own Jinja chat template: stories260K with a golden template
 * from ../shared/golden/templates written into its tokenizer.chat_template.
 * The prompt it tokenizes is the reference rendering (usage.prompt_tokens
 * equals the count /tokenize gives for the golden text, which holds no
 * control token of the stories vocabulary); tools and chat_template_kwargs
 * reach the template; raise_exception is a 400 with the template's words;
 * /v1/models says which template serves; a template that does not parse
 * leaves chats to the built-in format, which /v1/models explains; Anthropic's Messages
 * API renders through the same template.
 */
#define _GNU_SOURCE
#include "tests/common/testutil.h"
#include "tests/server/e2e.h"

#include "engine/base.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* stories260K carrying a golden file's template; *golden is the golden. */
static char *golden_model(const char *name, json_t **golden)
{
    char rel[256];
    snprintf(rel, sizeof(rel), "golden/templates/%s.json", name);
    *golden = gs_test_load_json(gs_test_shared_path(rel));
    json_t *src = json_object_get(*golden, "template");
    return e2e_model_with_template("models/stories260K.gguf", name, json_string_value(src), json_string_length(src));
}

static json_t *golden_case(const json_t *golden, const char *name)
{
    size_t i;
    json_t *c;
    json_array_foreach(
        json_object_get(golden, "cases"), i,
        c) if (!strcmp(json_string_value(json_object_get(c, "name")), name)) return c;
    cr_assert_fail("no golden case %s", name);
    return NULL;
}

static void start_with(struct e2e_daemon *d, const char *model_path)
{
    char args[4200];
    snprintf(args, sizeof(args), "-m '%s'", model_path); /* the last -m wins */
    e2e_start(d, args);
}

/* /tokenize's count for text, BOS added, control-token texts recognised. */
static size_t count_tokens(const struct e2e_daemon *d, const char *text, size_t n)
{
    json_t *req =
        json_pack("{s:s%,s:b,s:b}", "content", text, n, "add_special", 1, "parse_special", 1);
    char *body = json_dumps(req, JSON_COMPACT);
    struct e2e_resp r;
    e2e_http(d, "POST", "/tokenize", body, NULL, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    size_t count = json_array_size(json_object_get(r.json, "tokens"));
    e2e_resp_free(&r);
    free(body);
    json_decref(req);
    return count;
}

/* A chat request with the golden case's messages (and tools, kwargs). */
static void chat(const struct e2e_daemon *d, const json_t *c, struct e2e_resp *r)
{
    json_t *req =
        json_pack("{s:O,s:i}", "messages", json_object_get(c, "messages"), "max_tokens", 1);
    if (json_object_get(c, "tools"))
        json_object_set(req, "tools", json_object_get(c, "tools"));
    if (json_object_get(c, "extra_kwargs"))
        json_object_set(req, "chat_template_kwargs", json_object_get(c, "extra_kwargs"));
    char *body = json_dumps(req, JSON_COMPACT);
    e2e_http(d, "POST", "/v1/chat/completions", body, NULL, r);
    free(body);
    json_decref(req);
}

static void expect_reference_prompt(const struct e2e_daemon *d, const json_t *golden,
                                    const char *case_name)
{
    const json_t *c = golden_case(golden, case_name);
    const json_t *want = json_object_get(c, "rendered");
    cr_assert(want, "%s raises in the reference", case_name);
    struct e2e_resp r;
    chat(d, c, &r);
    cr_assert_eq(r.status, 200, "%s: %s", case_name, r.body);
    json_int_t got =
        json_integer_value(json_object_get(json_object_get(r.json, "usage"), "prompt_tokens"));
    size_t expect = count_tokens(d, json_string_value(want), json_string_length(want));
    cr_expect_eq((size_t)got, expect, "%s: prompt_tokens %lld, the reference has %zu", case_name,
                 (long long)got, expect);
    e2e_resp_free(&r);
}

/* /apply-template gives the reference rendering byte for byte (this template
 * writes neither bos_token nor eos_token, which are the stories vocabulary's
 * here). */
static void expect_applied_template(const struct e2e_daemon *d, const json_t *golden,
                                    const char *case_name)
{
    const json_t *c = golden_case(golden, case_name);
    json_t *req = json_pack("{s:O}", "messages", json_object_get(c, "messages"));
    if (json_object_get(c, "tools"))
        json_object_set(req, "tools", json_object_get(c, "tools"));
    char *body = json_dumps(req, JSON_COMPACT);
    struct e2e_resp r;
    e2e_http(d, "POST", "/apply-template", body, NULL, &r);
    cr_assert_eq(r.status, 200, "%s: %s", case_name, r.body);
    cr_expect_str_eq(json_string_value(json_object_get(r.json, "prompt")),
                     json_string_value(json_object_get(c, "rendered")), "%s", case_name);
    cr_expect_str_eq(json_string_value(json_object_get(r.json, "chat_template")), "jinja");
    e2e_resp_free(&r);
    free(body);
    json_decref(req);
}

Test(http_jinja, chats_render_the_golden_prompt, .timeout = 180)
{
    json_t *golden;
    char *path = golden_model("Qwen-Qwen2.5-7B-Instruct", &golden);
    struct e2e_daemon d;
    start_with(&d, path);
    struct e2e_resp r;
    e2e_http(&d, "GET", "/v1/models", NULL, NULL, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *meta = json_object_get(json_array_get(json_object_get(r.json, "data"), 0), "meta");
    cr_expect_str_eq(json_string_value(json_object_get(meta, "chat_template")), "jinja");
    cr_expect_str_eq(json_string_value(json_object_get(meta, "chat_template_source")), "gguf");
    e2e_resp_free(&r);
    expect_reference_prompt(&d, golden, "system_user");
    expect_reference_prompt(&d, golden, "multi_turn");
    expect_reference_prompt(&d, golden, "unicode_emoji");
    expect_reference_prompt(&d, golden, "tools_available");
    expect_reference_prompt(&d, golden, "tool_call_content_null");
    expect_applied_template(&d, golden, "parallel_tool_calls_then_answer");
    expect_applied_template(&d, golden, "unicode_emoji");
    cr_expect_eq(e2e_stop(&d), 0);
    free(path);
    json_decref(golden);
}

Test(http_jinja, template_kwargs_reach_the_template, .timeout = 180)
{
    json_t *golden;
    char *path = golden_model("Qwen-Qwen3-0.6B", &golden);
    struct e2e_daemon d;
    start_with(&d, path);
    expect_reference_prompt(&d, golden, "enable_thinking_false");
    expect_reference_prompt(&d, golden, "single_user");
    cr_expect_eq(e2e_stop(&d), 0);
    free(path);
    json_decref(golden);
}

Test(http_jinja, raise_exception_is_a_400_with_the_templates_words, .timeout = 180)
{
    json_t *golden;
    char *path = golden_model("google-gemma-2-2b-it", &golden);
    struct e2e_daemon d;
    start_with(&d, path);
    const json_t *c = golden_case(golden, "system_user");
    cr_assert_str_eq(json_string_value(json_object_get(c, "error_type")), "TemplateError");
    struct e2e_resp r;
    chat(&d, c, &r);
    cr_expect_eq(r.status, 400, "%s", r.body);
    json_t *e = json_object_get(r.json, "error");
    cr_expect_str_eq(json_string_value(json_object_get(e, "message")),
                     json_string_value(json_object_get(c, "error")));
    cr_expect_str_eq(json_string_value(json_object_get(e, "type")), "invalid_request_error");
    e2e_resp_free(&r);
    /* The next request renders as usual (its prompt is not the reference's:
     * this template writes bos_token, which is the stories vocabulary's <s>
     * here, not Gemma's <bos>). */
    chat(&d, golden_case(golden, "single_user"), &r);
    cr_expect_eq(r.status, 200, "%s", r.body);
    e2e_resp_free(&r);
    cr_expect_eq(e2e_stop(&d), 0);
    free(path);
    json_decref(golden);
}

Test(http_jinja, a_template_that_does_not_parse_falls_back_to_the_built_in, .timeout = 60)
{
    static const char bad[] = "<|im_start|>{{ messages[0]['content'] }";
    char *path = e2e_model_with_template("models/stories260K.gguf", "bad", bad, strlen(bad));
    struct e2e_daemon d;
    start_with(&d, path);
    struct e2e_resp r;
    e2e_http(&d, "GET", "/v1/models", NULL, NULL, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *meta = json_object_get(json_array_get(json_object_get(r.json, "data"), 0), "meta");
    /* Its markers say chatml, so chats take the built-in chatml format. */
    cr_expect_str_eq(json_string_value(json_object_get(meta, "chat_template")), "chatml");
    const char *why = json_string_value(json_object_get(meta, "chat_template_error"));
    cr_expect(why && strstr(why, "line 1, column"), "%s", r.body);
    e2e_resp_free(&r);
    cr_expect_geq(e2e_log_count(&d, "event=chat_template_unparsed"), 1, "the log says it");
    cr_expect_geq(e2e_log_count(&d, "fallback=chatml"), 1, "and what is used instead");
    e2e_http(&d, "POST", "/v1/chat/completions",
             "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 1}", NULL,
             &r);
    cr_expect_eq(r.status, 200, "%s", r.body);
    e2e_resp_free(&r);
    e2e_http(&d, "POST", "/apply-template",
             "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}", NULL, &r);
    cr_expect_eq(r.status, 200, "%s", r.body);
    cr_expect_str_eq(json_string_value(json_object_get(r.json, "prompt")),
                     "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    cr_expect_str_eq(json_string_value(json_object_get(r.json, "chat_template")), "chatml");
    e2e_resp_free(&r);
    cr_expect_eq(e2e_stop(&d), 0);
    free(path);
}

/* --chat-template-file: a golden template from a file replaces the GGUF's (stories260K
 * has none), /v1/models says so, and /apply-template gives the reference rendering. A
 * file that does not parse stops the start, naming the file, the line and the column;
 * so does naming a built-in format beside it. */
Test(http_jinja, a_template_file_replaces_the_models, .timeout = 180)
{
    json_t *golden = gs_test_load_json(
        gs_test_shared_path("golden/templates/Qwen-Qwen2.5-7B-Instruct.json"));
    char path[600];
    snprintf(path, sizeof(path), "%s/qwen25.jinja", gs_test_tmpdir());
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs(json_string_value(json_object_get(golden, "template")), f);
    fclose(f);
    char args[800];
    snprintf(args, sizeof(args), "--chat-template-file '%s'", path);
    struct e2e_daemon d;
    e2e_start(&d, args);
    struct e2e_resp r;
    e2e_http(&d, "GET", "/v1/models", NULL, NULL, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *meta = json_object_get(json_array_get(json_object_get(r.json, "data"), 0), "meta");
    cr_expect_str_eq(json_string_value(json_object_get(meta, "chat_template")), "jinja");
    cr_expect_str_eq(json_string_value(json_object_get(meta, "chat_template_source")), "file");
    e2e_resp_free(&r);
    expect_applied_template(&d, golden, "multi_turn");
    expect_applied_template(&d, golden, "tools_available");
    cr_expect_eq(e2e_stop(&d), 0);
    json_decref(golden);

    f = fopen(path, "w");
    cr_assert(f);
    fputs("{% for m in messages %}\n{{ m.content }\n{% endfor %}", f);
    fclose(f);
    char *cmd, *out, exe[600], model[600];
    snprintf(exe, sizeof(exe), "%s", gs_test_build_path("server/graphserve"));
    snprintf(model, sizeof(model), "%s", gs_test_shared_path("models/stories260K.gguf"));
    cr_assert(asprintf(&cmd, "%s serve -m '%s' --port 0 --chat-template-file '%s'", exe, model,
                       path) > 0);
    int rc = gs_test_run(cmd, 1, &out);
    cr_expect_neq(rc, 0, "a template that does not parse was served: %s", out);
    cr_expect(strstr(out, path) && strstr(out, ": line ") && strstr(out, ", column "), "%s", out);
    free(out);
    free(cmd);
    cr_assert(asprintf(&cmd, "%s serve -m '%s' --port 0 --chat-template-file '%s' "
                             "--chat-template chatml",
                       exe, model, path) > 0);
    rc = gs_test_run(cmd, 1, &out);
    cr_expect_neq(rc, 0, "%s", out);
    cr_expect(strstr(out, "choose one"), "%s", out);
    free(out);
    free(cmd);
}

/* A golden case's conversation as a Messages API body: its first message, if a system
 * one, as "system", the rest as messages, then a prefill turn (if not NULL) and, unless
 * only counting, max_tokens. */
static char *messages_body(const json_t *c, const char *prefill, bool count_only)
{
    json_t *msgs = json_deep_copy(json_object_get(c, "messages"));
    json_t *req = json_object();
    json_t *first = json_array_get(msgs, 0);
    if (!strcmp(json_string_value(json_object_get(first, "role")), "system")) {
        json_object_set(req, "system", json_object_get(first, "content"));
        json_array_remove(msgs, 0);
    }
    if (prefill)
        json_array_append_new(msgs,
                              json_pack("{s:s,s:s}", "role", "assistant", "content", prefill));
    json_object_set_new(req, "messages", msgs);
    if (!count_only)
        json_object_set_new(req, "max_tokens", json_integer(1));
    char *body = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    return body;
}

/* Anthropic's Messages API renders through the model's template as chats do: count_tokens
 * and usage.input_tokens are the reference rendering's tokens, a prefill follows the
 * opened assistant turn, and a template's raise_exception is Anthropic's 400. */
Test(http_jinja, messages_api_renders_through_the_template, .timeout = 180)
{
    json_t *golden;
    char *path = golden_model("Qwen-Qwen2.5-7B-Instruct", &golden);
    struct e2e_daemon d;
    start_with(&d, path);
    static const char *const cases[] = {"system_user", "multi_turn", "single_user"};
    for (size_t i = 0; i < GS_ARRAY_LEN(cases); i++) {
        const json_t *c = golden_case(golden, cases[i]);
        const json_t *want = json_object_get(c, "rendered");
        size_t expect = count_tokens(&d, json_string_value(want), json_string_length(want));
        char *body = messages_body(c, NULL, true);
        struct e2e_resp r;
        e2e_http(&d, "POST", "/v1/messages/count_tokens", body, NULL, &r);
        cr_assert_eq(r.status, 200, "%s: %s", cases[i], r.body);
        cr_expect_eq(json_integer_value(json_object_get(r.json, "input_tokens")),
                     (json_int_t)expect, "%s: %s, the reference has %zu", cases[i], r.body, expect);
        e2e_resp_free(&r);
        free(body);
    }
    /* The prefill: the reference rendering (generation prompt opened) plus its text. */
    const json_t *c = golden_case(golden, "single_user");
    const char *rendered = json_string_value(json_object_get(c, "rendered"));
    char text[1024];
    snprintf(text, sizeof(text), "%sI am", rendered);
    size_t expect = count_tokens(&d, text, strlen(text));
    char *body = messages_body(c, "I am", false);
    struct e2e_resp r;
    e2e_http(&d, "POST", "/v1/messages", body, NULL, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_expect_eq(
        json_integer_value(json_object_get(json_object_get(r.json, "usage"), "input_tokens")),
        (json_int_t)expect, "%s: the reference + prefill has %zu", r.body, expect);
    e2e_resp_free(&r);
    free(body);
    cr_expect_eq(e2e_stop(&d), 0);
    free(path);
    json_decref(golden);

    path = golden_model("google-gemma-2-2b-it", &golden);
    start_with(&d, path);
    c = golden_case(golden, "system_user");
    body = messages_body(c, NULL, false);
    e2e_http(&d, "POST", "/v1/messages", body, NULL, &r);
    cr_expect_eq(r.status, 400, "%s", r.body);
    cr_expect_str_eq(json_string_value(json_object_get(r.json, "type")), "error", "%s", r.body);
    json_t *e = json_object_get(r.json, "error");
    cr_expect_str_eq(json_string_value(json_object_get(e, "type")), "invalid_request_error");
    cr_expect_str_eq(json_string_value(json_object_get(e, "message")),
                     json_string_value(json_object_get(c, "error")));
    e2e_resp_free(&r);
    free(body);
    cr_expect_eq(e2e_stop(&d), 0);
    free(path);
    json_decref(golden);
}
