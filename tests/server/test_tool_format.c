/*
 * tests/server/test_tool_format.c - the tool-call formats of server/tool_format.c and the
 * grammar of server/tools.c, without a daemon: for every format, hand-written model
 * outputs (text, calls, text between them) read whole, byte by byte and cut at every byte
 * boundary give the same content and the same calls; nothing of the markup reaches the
 * content; malformed calls come back as content with a reason; the grammar of "required"
 * accepts each format's canonical calls and refuses others; and the template markers
 * choose the format.
 */
#define _GNU_SOURCE
#include "engine/grammar.h"
#include "server/internal.h"
#include "tests/common/testutil.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct gs_srv_tool tools[2];

/* get_weather(location: string, unit: enum) and add(a: integer, b: integer). */
static void tools_init(void)
{
    static const char *const names[] = {"get_weather", "add"};
    static const char *const schemas[] = {
        "{\"type\":\"object\",\"properties\":{\"location\":{\"type\":\"string\"},\"unit\":"
        "{\"enum\":[\"celsius\",\"fahrenheit\"]}},\"required\":[\"location\"]}",
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":"
        "\"integer\"}},\"required\":[\"a\",\"b\"]}"};
    for (int i = 0; i < 2; i++) {
        struct gs_err err;
        json_t *s = json_loads(schemas[i], 0, NULL);
        cr_assert(s);
        tools[i].name = gs_strdup(names[i]);
        cr_assert_eq(gs_grammar_from_json_schema(s, &tools[i].gbnf, &tools[i].gbnf_len, &err),
                     GS_OK, "%s", err.msg);
        json_decref(s);
    }
}

static void tools_fini(void)
{
    for (int i = 0; i < 2; i++) {
        gs_free(tools[i].name);
        gs_free(tools[i].gbnf);
    }
}

struct result {
    struct gs_srv_buf content;
    json_t *calls;
    char malformed[160];
};

/* Reads text cut at the offsets cuts[n] (ascending). */
static void read_cut(const struct gs_srv_tool_format *f, const char *text, const size_t *cuts,
                     size_t n, struct result *out)
{
    struct gs_srv_tool_reader t;
    gs_srv_tool_reader_init(&t, f, tools, 2);
    *out = (struct result){.calls = json_array()};
    size_t at = 0, len = strlen(text);
    for (size_t i = 0; i <= n; i++) {
        size_t end = i < n ? cuts[i] : len;
        cr_assert(gs_srv_tool_reader_feed(&t, text + at, end - at, &out->content, out->calls));
        if (t.malformed[0])
            snprintf(out->malformed, sizeof(out->malformed), "%s", t.malformed);
        at = end;
    }
    cr_assert(gs_srv_tool_reader_finish(&t, &out->content, out->calls));
    if (t.malformed[0])
        snprintf(out->malformed, sizeof(out->malformed), "%s", t.malformed);
    gs_srv_buf_add(&out->content, "", 0);
    gs_srv_tool_reader_deinit(&t);
}

static void result_free(struct result *r)
{
    gs_srv_buf_free(&r->content);
    json_decref(r->calls);
}

static void expect_same(const struct result *a, const struct result *b, const char *what)
{
    cr_assert_str_eq(a->content.p, b->content.p, "%s: content differs", what);
    cr_assert(json_equal(a->calls, b->calls), "%s: calls differ", what);
    cr_assert_str_eq(a->malformed, b->malformed, "%s: the verdict differs", what);
}

/*
 * text read whole must give content want_content and the calls want_calls (a JSON text of
 * [{"name","arguments"}]); so must the same text byte by byte and cut at every boundary.
 */
static void check(const char *format, const char *text, const char *want_content,
                  const char *want_calls, bool want_malformed)
{
    const struct gs_srv_tool_format *f = gs_srv_tool_format_by_name(format);
    cr_assert(f, "no format %s", format);
    struct result whole;
    read_cut(f, text, NULL, 0, &whole);
    json_t *want = json_loads(want_calls, 0, NULL);
    cr_assert(want, "bad expectation %s", want_calls);
    char *got = json_dumps(whole.calls, JSON_COMPACT);
    cr_assert_str_eq(whole.content.p, want_content, "%s: content", format);
    cr_assert(json_equal(whole.calls, want), "%s: calls %s, want %s", format, got, want_calls);
    cr_assert_eq(whole.malformed[0] != '\0', want_malformed, "%s: malformed '%s'", format,
                 whole.malformed);
    free(got);
    json_decref(want);
    size_t len = strlen(text);
    for (size_t k = 1; k < len; k++) {
        struct result cut;
        read_cut(f, text, &k, 1, &cut);
        char what[64];
        snprintf(what, sizeof(what), "%s cut at %zu", format, k);
        expect_same(&whole, &cut, what);
        result_free(&cut);
    }
    size_t *all = malloc(len * sizeof(*all));
    for (size_t k = 0; k + 1 < len; k++)
        all[k] = k + 1;
    struct result bytes;
    read_cut(f, text, all, len ? len - 1 : 0, &bytes);
    expect_same(&whole, &bytes, "byte by byte");
    result_free(&bytes);
    free(all);
    result_free(&whole);
}

#define TWO_CALLS                                                                                  \
    "[{\"name\":\"get_weather\",\"arguments\":\"{\\\"location\\\":\\\"Paris {x}\\\",\\\"unit\\\":" \
    "\\\"celsius\\\"}\"},{\"name\":\"add\",\"arguments\":\"{\\\"a\\\":1,\\\"b\\\":2}\"}]"

TestSuite(srv_tool_format, .init = tools_init, .fini = tools_fini);

Test(srv_tool_format, hermes_two_calls_in_any_cut)
{
    check("hermes",
          "Let me look.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": "
          "\"Paris {x}\", \"unit\": \"celsius\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"add\", "
          "\"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>\n",
          "Let me look.", TWO_CALLS, false);
}

Test(srv_tool_format, llama3_two_calls_in_any_cut)
{
    check("llama3",
          "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris {x}\", \"unit\": "
          "\"celsius\"}}; {\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}",
          "", TWO_CALLS, false);
}

Test(srv_tool_format, mistral_two_calls_in_any_cut)
{
    check("mistral",
          "[TOOL_CALLS]get_weather[ARGS]{\"location\": \"Paris {x}\", \"unit\": \"celsius\"}"
          "[TOOL_CALLS]add[CALL_ID]abcdefghi[ARGS]{\"a\": 1, \"b\": 2}",
          "", TWO_CALLS, false);
}

Test(srv_tool_format, mistral_nemo_two_calls_in_any_cut)
{
    check("mistral_nemo",
          "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris {x}\", "
          "\"unit\": \"celsius\"}, \"id\": \"abcdefghi\"}, {\"name\": \"add\", \"arguments\": "
          "{\"a\": 1, \"b\": 2}}]",
          "", TWO_CALLS, false);
}

Test(srv_tool_format, generic_two_calls_in_any_cut)
{
    check("generic",
          "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris "
          "{x}\", \"unit\": \"celsius\"}}, {\"name\": \"add\", \"arguments\": \"{\\\"a\\\": 1, "
          "\\\"b\\\": 2}\"}]}",
          "", TWO_CALLS, false);
}

Test(srv_tool_format, text_alone_passes_through_even_near_a_marker)
{
    check("hermes", "I think <tool is not a call, nor <tool_cal",
          "I think <tool is not a call, "
          "nor <tool_cal",
          "[]", false);
    check("mistral", "[TOOL] and [TOOL_CALL", "[TOOL] and [TOOL_CALL", "[]", false);
}

Test(srv_tool_format, malformed_calls_come_back_as_content)
{
    /* An unknown function, broken JSON, arguments that are not an object, a call cut off. */
    check("hermes", "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>",
          "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>", "[]", true);
    check("hermes", "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1,, }}\n</tool_call>",
          "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1,, }}\n</tool_call>", "[]",
          true);
    check("llama3", "{\"name\": \"add\", \"parameters\": [1, 2]}",
          "{\"name\": \"add\", \"parameters\": [1, 2]}", "[]", true);
    check("hermes", "ok <tool_call>\n{\"name\": \"add\", \"argu",
          "ok <tool_call>\n{\"name\": "
          "\"add\", \"argu",
          "[]", true);
    check("mistral", "[TOOL_CALLS]add{\"a\": 1}", "[TOOL_CALLS]add{\"a\": 1}", "[]", true);
}

Test(srv_tool_format, text_after_a_call_is_content)
{
    check("hermes",
          "<tool_call>{\"name\":\"add\",\"arguments\":{\"a\":1,\"b\":2}}</tool_call> done", " done",
          "[{\"name\":\"add\",\"arguments\":\"{\\\"a\\\":1,\\\"b\\\":2}\"}]", false);
}

/* ---- live calls ---------------------------------------------------------------------------- */

/* Reads text live, cut at cuts[n]: the calls folded from the events ({"name"} starts a call,
 * {"arguments"} extends the last one's), the content, and how many fragments came. */
static void read_live(const char *format, const char *text, const size_t *cuts, size_t n,
                      struct result *out, size_t *n_fragments)
{
    struct gs_srv_tool_reader t;
    gs_srv_tool_reader_init(&t, gs_srv_tool_format_by_name(format), tools, 2);
    t.live = true;
    *out = (struct result){.calls = json_array()};
    json_t *ev = json_array();
    size_t at = 0, len = strlen(text);
    for (size_t i = 0; i <= n; i++) {
        size_t end = i < n ? cuts[i] : len;
        cr_assert(gs_srv_tool_reader_feed(&t, text + at, end - at, &out->content, ev));
        at = end;
    }
    cr_assert(gs_srv_tool_reader_finish(&t, &out->content, ev));
    gs_srv_buf_add(&out->content, "", 0);
    gs_srv_tool_reader_deinit(&t);
    *n_fragments = 0;
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e)
    {
        json_t *name = json_object_get(e, "name"), *args = json_object_get(e, "arguments");
        if (name)
            json_array_append_new(out->calls,
                                  json_pack("{s:O,s:s}", "name", name, "arguments", ""));
        if (args) {
            json_t *last = json_array_get(out->calls, json_array_size(out->calls) - 1);
            cr_assert(last, "arguments before any call");
            char *joined;
            cr_assert(asprintf(&joined, "%s%s",
                               json_string_value(json_object_get(last, "arguments")),
                               json_string_value(args)) > 0);
            json_object_set_new(last, "arguments", json_string(joined));
            free(joined);
            *n_fragments += !name;
        }
    }
    json_decref(ev);
}

static void check_live(const char *format, const char *text, const char *want_content,
                       const char *want_calls)
{
    struct result whole;
    size_t nf;
    read_live(format, text, NULL, 0, &whole, &nf);
    json_t *want = json_loads(want_calls, 0, NULL);
    cr_assert(want);
    char *got = json_dumps(whole.calls, JSON_COMPACT);
    cr_assert(json_equal(whole.calls, want), "%s live: calls %s, want %s", format, got, want_calls);
    cr_assert_str_eq(whole.content.p, want_content, "%s live: content", format);
    free(got);
    json_decref(want);
    size_t len = strlen(text);
    for (size_t k = 1; k < len; k++) {
        struct result cut;
        read_live(format, text, &k, 1, &cut, &nf);
        char what[64];
        snprintf(what, sizeof(what), "%s live, cut at %zu", format, k);
        cr_assert_str_eq(cut.content.p, whole.content.p, "%s", what);
        cr_assert(json_equal(cut.calls, whole.calls), "%s", what);
        result_free(&cut);
    }
    size_t *all = malloc(len * sizeof(*all));
    for (size_t k = 0; k + 1 < len; k++)
        all[k] = k + 1;
    struct result bytes;
    read_live(format, text, all, len - 1, &bytes, &nf);
    cr_assert(json_equal(bytes.calls, whole.calls), "%s live, byte by byte", format);
    cr_expect_gt(nf, json_array_size(whole.calls), "%s: arguments in several fragments", format);
    result_free(&bytes);
    free(all);
    result_free(&whole);
}

Test(srv_tool_format, live_calls_stream_their_arguments_in_any_cut)
{
    check_live(
        "hermes",
        "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": \"}\"}}\n"
        "</tool_call>\n<tool_call>\n{\"name\":\"get_weather\",\"arguments\":{}}\n</tool_call>",
        "",
        "[{\"name\":\"add\",\"arguments\":\"{\\\"a\\\": 1, \\\"b\\\": \\\"}\\\"}\"},"
        "{\"name\":\"get_weather\",\"arguments\":\"{}\"}]");
    check_live("llama3", "{\"name\": \"add\", \"parameters\": {\"a\": [1, {}]}}", "",
               "[{\"name\":\"add\",\"arguments\":\"{\\\"a\\\": [1, {}]}\"}]");
    check_live("mistral", "[TOOL_CALLS]add[ARGS]{\"a\": 1}[TOOL_CALLS]get_weather[ARGS]{}", "",
               "[{\"name\":\"add\",\"arguments\":\"{\\\"a\\\": 1}\"},"
               "{\"name\":\"get_weather\",\"arguments\":\"{}\"}]");
}

Test(srv_tool_format, a_live_call_cut_off_keeps_what_it_has)
{
    check_live("hermes", "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 12", "",
               "[{\"name\":\"add\",\"arguments\":\"{\\\"a\\\": 12\"}]");
    /* Before its name is whole, nothing was announced: the text is content. */
    struct result r;
    size_t nf;
    read_live("hermes", "<tool_call>\n{\"name\": \"ad", NULL, 0, &r, &nf);
    cr_expect_eq(json_array_size(r.calls), 0);
    cr_expect_str_eq(r.content.p, "<tool_call>\n{\"name\": \"ad");
    result_free(&r);
}

/* ---- the grammar -------------------------------------------------------------------------- */

static struct gs_grammar *grammar(const char *format, size_t only, bool parallel)
{
    char *src;
    size_t len;
    struct gs_err err;
    cr_assert_eq(gs_srv_tools_grammar(gs_srv_tool_format_by_name(format), tools, 2, only, parallel,
                                      &src, &len, &err),
                 GS_OK, "%s", err.msg);
    struct gs_grammar *g;
    cr_assert_eq(gs_grammar_compile(src, len, "root", NULL, &g, &err), GS_OK, "%s\n%s", err.msg,
                 src);
    gs_free(src);
    return g;
}

/* Whether g's sentences include text, whole. */
static bool accepts(struct gs_grammar *g, const char *text)
{
    const char *piece = "x";
    uint32_t one = 1;
    struct gs_grammar_vocab *v;
    struct gs_grammar_matcher *m;
    struct gs_err err;
    cr_assert_eq(gs_grammar_vocab_new(&piece, &one, 1, &v, &err), GS_OK);
    cr_assert_eq(gs_grammar_matcher_new(g, v, &m, &err), GS_OK);
    bool ok = gs_grammar_matcher_accept_bytes(m, text, strlen(text), &err) == GS_OK &&
              gs_grammar_matcher_can_end(m);
    gs_grammar_matcher_free(m);
    gs_grammar_vocab_free(v);
    return ok;
}

struct canon {
    const char *format;
    const char *one;      /* one call of add, canonical */
    const char *two;      /* get_weather then add */
    const char *bad_args; /* add with a string argument */
};

static const struct canon canon[] = {
    {"hermes",
     "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call>",
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"P\"}}\n"
     "</tool_call>\n<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n"
     "</tool_call>",
     "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": \"1\", \"b\": 2}}\n</tool_call>"},
    {"llama3", "{\"name\": \"add\", \"parameters\": {\"a\": 1, \"b\": 2}}",
     "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"P\"}}; {\"name\": \"add\", "
     "\"parameters\": {\"a\": 1, \"b\": 2}}",
     "{\"name\": \"add\", \"parameters\": {\"a\": \"1\", \"b\": 2}}"},
    {"mistral", "[TOOL_CALLS]add[ARGS]{\"a\": 1, \"b\": 2}",
     "[TOOL_CALLS]get_weather[ARGS]{\"location\": \"P\"}[TOOL_CALLS]add[ARGS]{\"a\": 1, \"b\": 2}",
     "[TOOL_CALLS]add[ARGS]{\"a\": true, \"b\": 2}"},
    {"mistral_nemo", "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}]",
     "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"location\": \"P\"}}, {\"name\": "
     "\"add\", \"arguments\": {\"a\": 1, \"b\": 2}}]",
     "[TOOL_CALLS][{\"name\": \"add\", \"arguments\": {\"b\": 2}}]"},
    {"generic", "{\"tool_calls\": [{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}]}",
     "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"location\": \"P\"}}, "
     "{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}]}",
     "{\"tool_calls\": [{\"name\": \"add\", \"arguments\": {\"a\": 1.5, \"b\": 2}}]}"},
};

Test(srv_tool_format, grammar_takes_exactly_the_calls_the_reader_reads)
{
    for (size_t i = 0; i < GS_ARRAY_LEN(canon); i++) {
        const struct canon *c = &canon[i];
        struct gs_grammar *any = grammar(c->format, 2, false), *par = grammar(c->format, 2, true);
        struct gs_grammar *named = grammar(c->format, 0, true); /* get_weather only */
        cr_expect(accepts(any, c->one), "%s: one call", c->format);
        cr_expect(!accepts(any, c->two), "%s: two calls without parallel_tool_calls", c->format);
        cr_expect(accepts(par, c->two), "%s: two calls with parallel_tool_calls", c->format);
        cr_expect(!accepts(any, c->bad_args), "%s: arguments outside the schema", c->format);
        cr_expect(!accepts(named, c->one), "%s: a call of another function", c->format);
        cr_expect(!accepts(any, "Hello"), "%s: text", c->format);
        /* What the grammar writes, the reader reads. */
        struct result r;
        read_cut(gs_srv_tool_format_by_name(c->format), c->two, NULL, 0, &r);
        cr_expect_eq(json_array_size(r.calls), 2, "%s: the reader reads both calls", c->format);
        cr_expect_str_eq(r.content.p, "", "%s: no content", c->format);
        result_free(&r);
        gs_grammar_unref(any);
        gs_grammar_unref(par);
        gs_grammar_unref(named);
    }
}

Test(srv_tool_format, template_markers_choose_the_format)
{
    struct {
        const char *golden, *format;
    } rows[] = {
        {"Qwen-Qwen2.5-7B-Instruct", "hermes"},
        {"Qwen-Qwen3-0.6B", "hermes"},
        {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "hermes"},
        {"meta-llama-Llama-3.1-8B-Instruct", "llama3"},
        {"meta-llama-Llama-3.3-70B-Instruct", "llama3"},
        {"Mistral-Small-3.2-24B-Instruct-2506", "mistral"},
        {"unsloth-mistral-Devstral-Small-2507", "mistral"},
        {"google-gemma-2-2b-it", "generic"},
        {"microsoft-Phi-3.5-mini-instruct", "generic"},
    };
    for (size_t i = 0; i < GS_ARRAY_LEN(rows); i++) {
        char rel[256];
        snprintf(rel, sizeof(rel), "golden/templates/%s.json", rows[i].golden);
        json_t *g = gs_test_load_json(gs_test_shared_path(rel));
        const char *t = json_string_value(json_object_get(g, "template"));
        cr_expect_str_eq(gs_srv_tool_format_detect(t)->name, rows[i].format, "%s", rows[i].golden);
        json_decref(g);
    }
    cr_expect_str_eq(gs_srv_tool_format_detect(NULL)->name, "generic");
    cr_expect_str_eq(gs_srv_tool_format_detect("[TOOL_CALLS] {{ x }}")->name, "mistral_nemo");
}

/* ---- thinking blocks (server/reasoning.c) ------------------------------------------------- */

static void think_cut(const char *text, bool open, const size_t *cuts, size_t n,
                      struct gs_srv_buf *reasoning, struct gs_srv_buf *content)
{
    struct gs_srv_think t;
    gs_srv_think_init(&t, open);
    *reasoning = (struct gs_srv_buf){0};
    *content = (struct gs_srv_buf){0};
    size_t at = 0, len = strlen(text);
    for (size_t i = 0; i <= n; i++) {
        size_t end = i < n ? cuts[i] : len;
        cr_assert(gs_srv_think_feed(&t, text + at, end - at, reasoning, content));
        at = end;
    }
    cr_assert(gs_srv_think_finish(&t, reasoning, content));
    gs_srv_buf_add(reasoning, "", 0);
    gs_srv_buf_add(content, "", 0);
    gs_srv_think_deinit(&t);
}

/* text split into want_reasoning and want_content whole, cut at every boundary, and byte
 * by byte. */
static void check_think(const char *text, bool open, const char *want_reasoning,
                        const char *want_content)
{
    size_t len = strlen(text);
    size_t *all = malloc((len + 1) * sizeof(*all));
    for (size_t k = 0; k + 1 < len; k++)
        all[k] = k + 1;
    for (size_t k = 0; k <= len + 1; k++) {
        struct gs_srv_buf r, c;
        if (k == len + 1)
            think_cut(text, open, all, len ? len - 1 : 0, &r, &c);
        else
            think_cut(text, open, &k, k > 0 && k < len, &r, &c);
        cr_expect_str_eq(r.p, want_reasoning, "'%s' cut at %zu: reasoning", text, k);
        cr_expect_str_eq(c.p, want_content, "'%s' cut at %zu: content", text, k);
        gs_srv_buf_free(&r);
        gs_srv_buf_free(&c);
    }
    free(all);
}

Test(srv_reasoning, a_leading_block_goes_to_reasoning_in_any_cut)
{
    check_think("<think>\nLet me see.</think>\n\nIt is 5.", false, "\nLet me see.", "It is 5.");
    check_think("  <think>a<b</think>c", false, "a<b", "c");
    check_think("<think>unfinished </thi", false, "unfinished </thi", "");
    check_think("<think></think>", false, "", "");
}

Test(srv_reasoning, a_block_the_prompt_opened_needs_no_tag)
{
    check_think("thinking</think>answer", true, "thinking", "answer");
    check_think("all thought", true, "all thought", "");
}

Test(srv_reasoning, anything_else_is_content)
{
    check_think("Hello <think>x</think>", false, "", "Hello <think>x</think>");
    check_think("<thinking>x</thinking>", false, "", "<thinking>x</thinking>");
    check_think("  <thin", false, "", "  <thin");
    check_think("", false, "", "");
}

Test(srv_reasoning, templates_and_prompts_that_think)
{
    json_t *g = gs_test_load_json(gs_test_shared_path("golden/templates/Qwen-Qwen3-0.6B.json"));
    cr_expect(gs_srv_think_detect(json_string_value(json_object_get(g, "template"))));
    json_decref(g);
    g = gs_test_load_json(gs_test_shared_path("golden/templates/google-gemma-2-2b-it.json"));
    cr_expect(!gs_srv_think_detect(json_string_value(json_object_get(g, "template"))));
    json_decref(g);
    cr_expect(gs_srv_think_prompt_opens("<|Assistant|><think>\n", 21));
    cr_expect(!gs_srv_think_prompt_opens("<think>\n\n</think>\n\n", 19));
}
