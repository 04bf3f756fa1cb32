/*
 * tests/fuzz/fuzz_tool_reader.c - the tool-call reader of every format and the thinking
 * splitter (server/tool_format.c, server/reasoning.c) on any model output.
 *
 * Input: the first byte picks the format (modulo the number of formats) and a cut point
 * (the byte's high bits scale it into the text); the rest is the text.
 *
 * Invariants: the text read whole and read in two pieces cut anywhere gives the same
 * content and the same calls; every call names a function of the tools and its arguments
 * are a JSON object; the content is never longer than the text; the splitter's reasoning
 * and content add up to at most the text and do not depend on the cut either.
 */
#include "server/internal.h"
#include "tests/fuzz/fuzz.h"

#include <string.h>

static const char *const formats[] = {"hermes", "llama3", "mistral", "mistral_nemo", "generic"};

static struct gs_srv_tool tools[2];

static void read_text(const struct gs_srv_tool_format *f, const char *text, size_t len, size_t cut,
                      struct gs_srv_buf *content, json_t *calls)
{
    struct gs_srv_tool_reader t;
    gs_srv_tool_reader_init(&t, f, tools, 2);
    FUZZ_CHECK(gs_srv_tool_reader_feed(&t, text, cut, content, calls), "out of memory");
    FUZZ_CHECK(gs_srv_tool_reader_feed(&t, text + cut, len - cut, content, calls), "out of memory");
    FUZZ_CHECK(gs_srv_tool_reader_finish(&t, content, calls), "out of memory");
    gs_srv_tool_reader_deinit(&t);
}

static void split_text(const char *text, size_t len, size_t cut, bool open,
                       struct gs_srv_buf *reasoning, struct gs_srv_buf *content)
{
    struct gs_srv_think t;
    gs_srv_think_init(&t, open);
    FUZZ_CHECK(gs_srv_think_feed(&t, text, cut, reasoning, content), "out of memory");
    FUZZ_CHECK(gs_srv_think_feed(&t, text + cut, len - cut, reasoning, content), "out of memory");
    FUZZ_CHECK(gs_srv_think_finish(&t, reasoning, content), "out of memory");
    gs_srv_think_deinit(&t);
}

static bool same(const struct gs_srv_buf *a, const struct gs_srv_buf *b)
{
    return a->len == b->len && (!a->len || !memcmp(a->p, b->p, a->len));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (!tools[0].name) {
        tools[0] = (struct gs_srv_tool){.name = (char *)"add"};
        tools[1] = (struct gs_srv_tool){.name = (char *)"get_weather"};
    }
    const struct gs_srv_tool_format *f =
        gs_srv_tool_format_by_name(formats[data[0] % (sizeof(formats) / sizeof(*formats))]);
    const char *text = (const char *)data + 1;
    size_t len = size - 1, cut = len ? (size_t)(data[0] >> 3) * len / 31 : 0;
    if (cut > len)
        cut = len;
    struct gs_srv_buf c1 = {0}, c2 = {0};
    json_t *k1 = json_array(), *k2 = json_array();
    FUZZ_CHECK(k1 && k2, "out of memory");
    read_text(f, text, len, 0, &c1, k1);
    read_text(f, text, len, cut, &c2, k2);
    FUZZ_CHECK(same(&c1, &c2), "%s: content depends on the cut at %zu", f->name, cut);
    FUZZ_CHECK(json_equal(k1, k2), "%s: calls depend on the cut at %zu", f->name, cut);
    FUZZ_CHECK(c1.len <= len, "%s: content longer than the text", f->name);
    size_t i;
    json_t *call;
    json_array_foreach(k1, i, call)
    {
        const char *name = json_string_value(json_object_get(call, "name"));
        FUZZ_CHECK(name && (!strcmp(name, "add") || !strcmp(name, "get_weather")),
                   "%s: a call of an unknown function", f->name);
        const char *args = json_string_value(json_object_get(call, "arguments"));
        json_t *a = args ? json_loads(args, 0, NULL) : NULL;
        FUZZ_CHECK(json_is_object(a), "%s: arguments not an object", f->name);
        json_decref(a);
    }
    gs_srv_buf_free(&c1);
    gs_srv_buf_free(&c2);
    json_decref(k1);
    json_decref(k2);

    for (int open = 0; open < 2; open++) {
        struct gs_srv_buf r1 = {0}, n1 = {0}, r2 = {0}, n2 = {0};
        split_text(text, len, 0, open, &r1, &n1);
        split_text(text, len, cut, open, &r2, &n2);
        FUZZ_CHECK(same(&r1, &r2) && same(&n1, &n2), "thinking depends on the cut at %zu", cut);
        FUZZ_CHECK(r1.len + n1.len <= len, "the splitter made text");
        gs_srv_buf_free(&r1);
        gs_srv_buf_free(&n1);
        gs_srv_buf_free(&r2);
        gs_srv_buf_free(&n2);
    }
    return 0;
}
