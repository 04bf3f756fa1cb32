/*
 * tests/fuzz/fuzz_tool_reader.c - the tool-call reader of every format and the thinking
 * splitter (server/tool_format.c, server/reasoning.c) on any model output.
 *
 * Input: the first byte picks the format (modulo the number of formats), whether the
 * reader is live (bit 2), and a cut point (the byte's high bits scale it into the text);
 * the rest is the text.
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

/* Live readers give events ({"name"} starts a call, {"arguments"} extends the last); folded
 * into calls, they must not depend on the cut either. */
static void fold(json_t *events, json_t *calls)
{
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e)
    {
        json_t *name = json_object_get(e, "name"), *args = json_object_get(e, "arguments");
        if (name && args) {
            json_array_append(calls, e);
            continue;
        }
        if (name)
            json_array_append_new(calls, json_pack("{s:O,s:s}", "name", name, "arguments", ""));
        json_t *last = json_array_get(calls, json_array_size(calls) - 1);
        FUZZ_CHECK(!args || last, "arguments before any call");
        if (!args)
            continue;
        struct gs_srv_buf b = {0};
        gs_srv_buf_adds(&b, json_string_value(json_object_get(last, "arguments")));
        gs_srv_buf_add(&b, json_string_value(args), json_string_length(args));
        json_object_set_new(last, "arguments", json_stringn(b.p ? b.p : "", b.len));
        gs_srv_buf_free(&b);
    }
}

static void read_text(const struct gs_srv_tool_format *f, const char *text, size_t len, size_t cut,
                      bool live, struct gs_srv_buf *content, json_t *calls)
{
    struct gs_srv_tool_reader t;
    gs_srv_tool_reader_init(&t, f, tools, 2);
    t.live = live;
    json_t *ev = json_array();
    FUZZ_CHECK(ev, "out of memory");
    FUZZ_CHECK(gs_srv_tool_reader_feed(&t, text, cut, content, ev), "out of memory");
    FUZZ_CHECK(gs_srv_tool_reader_feed(&t, text + cut, len - cut, content, ev), "out of memory");
    FUZZ_CHECK(gs_srv_tool_reader_finish(&t, content, ev), "out of memory");
    gs_srv_tool_reader_deinit(&t);
    fold(ev, calls);
    json_decref(ev);
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
    bool live = data[0] & 4;
    read_text(f, text, len, 0, live, &c1, k1);
    read_text(f, text, len, cut, live, &c2, k2);
    FUZZ_CHECK(same(&c1, &c2), "%s: content depends on the cut at %zu", f->name, cut);
    if (!json_equal(k1, k2)) {
        char *a = json_dumps(k1, JSON_COMPACT), *b = json_dumps(k2, JSON_COMPACT);
        FUZZ_CHECK(false, "%s: calls depend on the cut at %zu: %s, cut: %s", f->name, cut, a, b);
    }
    FUZZ_CHECK(c1.len <= len, "%s: content longer than the text", f->name);
    size_t i;
    json_t *call;
    json_array_foreach(k1, i, call)
    {
        const char *name = json_string_value(json_object_get(call, "name"));
        FUZZ_CHECK(name && (!strcmp(name, "add") || !strcmp(name, "get_weather")),
                   "%s: a call of an unknown function", f->name);
        /* A live call cut off keeps the arguments it has; a whole one's are an object. */
        const char *args = json_string_value(json_object_get(call, "arguments"));
        json_t *a = args ? json_loads(args, 0, NULL) : NULL;
        FUZZ_CHECK(args && (live || json_is_object(a)), "%s: arguments not an object", f->name);
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
