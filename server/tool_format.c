/*
 * server/tool_format.c - how each model family writes tool calls: the one
 * table of formats, its choice from a chat template's markers, and the
 * streaming reader that takes calls out of a choice's text.
 *
 * The formats (checked against llama.cpp's common/chat.cpp and vLLM's tool
 * parsers, 2026-12; the code is ours):
 *   hermes   Hermes 2/3, Qwen 2.5/3:   <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
 *   llama3   Llama 3.1-3.3 (JSON):     {"name": "f", "parameters": {...}}, several joined by "; "
 *   mistral  Mistral Small 3.2, Devstral (v11 tokenizer): [TOOL_CALLS]f[ARGS]{...}
 *   mistral_nemo  Mistral Nemo (v3):   [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]
 *   generic  any other template:       {"tool_calls": [{"name": "f", "arguments": {...}}]},
 *            taught by a system message the server adds (tools.c).
 *
 * The reader is a small state machine over held text: outside calls it looks
 * for the format's open marker, holding back a tail that could still become
 * one; inside a call it scans the JSON (strings, escapes, nesting) until the
 * value closes, then parses it with jansson and checks it. Its results do not
 * depend on how the text was cut into pieces: every decision waits until the
 * bytes it needs have arrived. A live reader (text a grammar wrote from its first token)
 * announces a call when its name is read and gives its arguments out as they come.
 *
 * Threads: none of its own; the loop thread.
 */
#define _GNU_SOURCE
#include "server/internal.h"

#include <stdio.h>
#include <string.h>

/* X(id, name, open, open_in_body, close, sep, body, args_key, short_ids, inject_prompt) */
static const struct gs_srv_tool_format formats[] = {
    {"hermes", "<tool_call>", false, "</tool_call>", "\n", GS_SRV_TOOL_BODY_OBJECT, "arguments",
     false, false},
    {"llama3", "{\"name\"", true, "", "; ", GS_SRV_TOOL_BODY_OBJECT, "parameters", false, false},
    {"mistral", "[TOOL_CALLS]", false, "", "", GS_SRV_TOOL_BODY_NAME_ARGS, "arguments", true,
     false},
    {"mistral_nemo", "[TOOL_CALLS]", false, "", ", ", GS_SRV_TOOL_BODY_ARRAY, "arguments", true,
     false},
    {"generic", "{\"tool_calls\"", true, "", ", ", GS_SRV_TOOL_BODY_WRAPPED, "arguments", false,
     true},
};

enum { F_HERMES, F_LLAMA3, F_MISTRAL, F_MISTRAL_NEMO, F_GENERIC };

const struct gs_srv_tool_format *gs_srv_tool_format_detect(const char *t)
{
    if (!t)
        return &formats[F_GENERIC];
    /* Hermes first: its Llama 3 variants also contain Llama's header markers. */
    if (strstr(t, "<tool_call>"))
        return &formats[F_HERMES];
    if (strstr(t, "[TOOL_CALLS]"))
        return &formats[strstr(t, "[ARGS]") ? F_MISTRAL : F_MISTRAL_NEMO];
    if (strstr(t, "<|start_header_id|>") && strstr(t, "\"parameters\""))
        return &formats[F_LLAMA3];
    return &formats[F_GENERIC];
}

const struct gs_srv_tool_format *gs_srv_tool_format_by_name(const char *name)
{
    for (size_t i = 0; i < GS_ARRAY_LEN(formats); i++)
        if (!strcmp(formats[i].name, name))
            return &formats[i];
    return NULL;
}

/* ---- the reader ----------------------------------------------------------------------------- */

enum {
    ST_TEXT, /* outside calls */
    ST_OPEN, /* after the open marker, before the JSON (or the name, NAME_ARGS) */
    ST_NAME, /* NAME_ARGS: the function's name, up to [ARGS] */
    ST_JSON, /* inside the JSON */
    ST_CLOSE /* after the JSON, before the close marker */
};

#define ARGS_MARK        "[ARGS]"
#define CALL_ID_MARK     "[CALL_ID]"
#define MAX_NAME_SEGMENT 256 /* NAME_ARGS: bytes between [TOOL_CALLS] and [ARGS] */

void gs_srv_tool_reader_init(struct gs_srv_tool_reader *t, const struct gs_srv_tool_format *f,
                             const struct gs_srv_tool *tools, size_t n_tools)
{
    *t = (struct gs_srv_tool_reader){.f = f, .tools = tools, .n_tools = n_tools};
}

void gs_srv_tool_reader_deinit(struct gs_srv_tool_reader *t)
{
    gs_srv_buf_free(&t->held);
}

static bool is_gap(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == ';' || ch == ',';
}

static bool is_ws(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

static void consume(struct gs_srv_tool_reader *t, size_t n)
{
    gs_srv_buf_consume(&t->held, n);
    t->scan = 0;
    t->json_start = 0;
}

/* Gives held[0, n) out as content. */
static void give(struct gs_srv_tool_reader *t, size_t n, struct gs_srv_buf *content)
{
    gs_srv_buf_add(content, t->held.p, n);
    consume(t, n);
}

/* The call starting at held[0] is not well formed: all of it is content, and so
 * is everything after it. */
__attribute__((format(printf, 3, 4))) static void
malformed(struct gs_srv_tool_reader *t, struct gs_srv_buf *content, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->malformed, sizeof(t->malformed), fmt, ap);
    va_end(ap);
    give(t, t->held.len, content);
    t->off = true;
    t->state = ST_TEXT;
}

static const struct gs_srv_tool *find_tool(const struct gs_srv_tool_reader *t, const char *name,
                                           size_t n)
{
    for (size_t i = 0; i < t->n_tools; i++)
        if (strlen(t->tools[i].name) == n && !memcmp(t->tools[i].name, name, n))
            return &t->tools[i];
    return NULL;
}

/* Appends {"name","arguments"} for a call of name with args (an object, or a string holding
 * one, as some models double-encode). NULL on success, else why not. */
static const char *add_call(struct gs_srv_tool_reader *t, const char *name, size_t name_len,
                            json_t *args, json_t *out)
{
    if (!find_tool(t, name, name_len))
        return "a call names a function that is not among the tools";
    json_t *parsed = NULL;
    if (json_is_string(args))
        args = parsed = json_loadb(json_string_value(args), json_string_length(args), 0, NULL);
    if (!json_is_object(args)) {
        json_decref(parsed);
        return "a call's arguments are not a JSON object";
    }
    char *text = json_dumps(args, JSON_COMPACT);
    json_decref(parsed);
    json_t *call = text ? json_pack("{s:s%,s:s}", "name", name, name_len, "arguments", text) : NULL;
    free(text);
    if (!call || json_array_append_new(out, call))
        return "out of memory";
    return NULL;
}

/* One call object {"name": ..., <args_key>: {...}}; Llama's "parameters" and everyone
 * else's "arguments" are both taken. */
static const char *add_call_object(struct gs_srv_tool_reader *t, json_t *o, json_t *out)
{
    json_t *name = json_object_get(o, "name");
    if (!json_is_object(o) || !json_is_string(name))
        return "a call is not an object with a string 'name'";
    json_t *args = json_object_get(o, t->f->args_key);
    if (!args)
        args = json_object_get(o, strcmp(t->f->args_key, "arguments") ? "arguments" : "parameters");
    if (!args)
        return "a call has no arguments";
    return add_call(t, json_string_value(name), json_string_length(name), args, out);
}

/* The calls in one complete JSON value held[json_start, end), into calls. */
static const char *take_json(struct gs_srv_tool_reader *t, size_t end, const char *name,
                             size_t name_len, json_t *calls)
{
    json_t *v =
        json_loadb(t->held.p + t->json_start, end - t->json_start, JSON_DISABLE_EOF_CHECK, NULL);
    if (!v)
        return "a call is not valid JSON";
    json_t *found = json_array();
    const char *why = found ? NULL : "out of memory";
    json_t *list = t->f->body == GS_SRV_TOOL_BODY_WRAPPED ? json_object_get(v, "tool_calls") : v;
    switch (t->f->body) {
    case GS_SRV_TOOL_BODY_OBJECT:
        why = why ? why : add_call_object(t, v, found);
        break;
    case GS_SRV_TOOL_BODY_NAME_ARGS:
        why = why ? why : add_call(t, name, name_len, v, found);
        break;
    case GS_SRV_TOOL_BODY_ARRAY:
    case GS_SRV_TOOL_BODY_WRAPPED:
        if (!why && (!json_is_array(list) || json_array_size(list) == 0))
            why = "the calls are not a non-empty list";
        for (size_t i = 0; !why && i < json_array_size(list); i++)
            why = add_call_object(t, json_array_get(list, i), found);
        break;
    }
    if (!why) {
        t->n_calls += json_array_size(found);
        if (json_array_extend(calls, found))
            why = "out of memory";
    }
    json_decref(found);
    json_decref(v);
    return why;
}

/* Scans held from t->scan for the end of the JSON value that starts at json_start;
 * returns its end offset, or 0 when more text is needed. */
static size_t scan_json(struct gs_srv_tool_reader *t)
{
    const char *p = t->held.p;
    for (; t->scan < t->held.len; t->scan++) {
        char ch = p[t->scan];
        if (t->in_string) {
            if (t->escaped)
                t->escaped = false;
            else if (ch == '\\')
                t->escaped = true;
            else if (ch == '"')
                t->in_string = false;
            continue;
        }
        if (ch == '"') {
            t->in_string = true;
        } else if (ch == '{' || ch == '[') {
            t->depth++;
        } else if (ch == '}' || ch == ']') {
            if (t->depth && --t->depth == 0)
                return ++t->scan;
        }
    }
    return 0;
}

/* Where NAME_ARGS keeps the name: held[open_len, name_end). */
static size_t name_end(const struct gs_srv_tool_reader *t)
{
    size_t ol = strlen(t->f->open);
    const char *args = memmem(t->held.p + ol, t->held.len - ol, ARGS_MARK, strlen(ARGS_MARK));
    return args ? (size_t)(args - t->held.p) : 0;
}

/* A call is complete at held[0, end): its calls are out, and the text goes on. */
static void call_done(struct gs_srv_tool_reader *t, size_t end)
{
    consume(t, end);
    t->state = ST_TEXT;
    t->after_call = true;
    t->live_on = false;
}

/* ---- live calls --------------------------------------------------------------------------- */

static bool live_format(const struct gs_srv_tool_reader *t)
{
    return t->live &&
           (t->f->body == GS_SRV_TOOL_BODY_OBJECT || t->f->body == GS_SRV_TOOL_BODY_NAME_ARGS);
}

/* Matches lit at held[*at] (a prefix of it when the text ends first: 0, need more). */
static int match_lit(const struct gs_srv_tool_reader *t, size_t *at, const char *lit)
{
    size_t l = strlen(lit), have = t->held.len - *at;
    if (memcmp(t->held.p + *at, lit, GS_MIN(l, have)))
        return -1;
    if (have < l)
        return 0;
    *at += l;
    return 1;
}

static int match_sp(const struct gs_srv_tool_reader *t, size_t *at)
{
    if (*at == t->held.len)
        return 0;
    if (t->held.p[*at] == ' ')
        (*at)++;
    return 1;
}

/*
 * The start of a call object as the grammar writes it, {"name": "f", "<args_key>": , at
 * json_start: 1 with the name and where the arguments start, 0 when more text is needed,
 * -1 when the text is not in that shape (the call is then read whole).
 */
static int live_prefix(const struct gs_srv_tool_reader *t, size_t *name_at, size_t *name_len,
                       size_t *args_at)
{
    size_t at = t->json_start;
    int m;
    char key[32];
    snprintf(key, sizeof(key), "\"%s\":", t->f->args_key);
    if ((m = match_lit(t, &at, "{\"name\":")) <= 0 || (m = match_sp(t, &at)) <= 0 ||
        (m = match_lit(t, &at, "\"")) <= 0)
        return m;
    *name_at = at;
    while (at < t->held.len && t->held.p[at] != '"' && t->held.p[at] != '\\')
        at++;
    if (at == t->held.len)
        return at - *name_at > 64 ? -1 : 0;
    *name_len = at - *name_at;
    if ((m = match_lit(t, &at, "\",")) <= 0 || (m = match_sp(t, &at)) <= 0 ||
        (m = match_lit(t, &at, key)) <= 0 || (m = match_sp(t, &at)) <= 0 ||
        (m = match_lit(t, &at, "{")) <= 0)
        return m;
    /* The arguments are an object, so that their scanner closes where the call's does. */
    *args_at = at - 1;
    return 1;
}

/* Announces a live call of held[name_at, +name_len) whose arguments start at args_at.
 * false when the name is not a tool's (the call is then read whole, and refused). */
static bool live_start(struct gs_srv_tool_reader *t, size_t name_at, size_t name_len,
                       size_t args_at, json_t *calls)
{
    if (!find_tool(t, t->held.p + name_at, name_len))
        return false;
    json_array_append_new(calls, json_pack("{s:s%}", "name", t->held.p + name_at, name_len));
    t->live_on = true;
    t->args_at = t->args_sent = t->args_scan = args_at;
    t->args_depth = 0;
    t->args_string = t->args_escaped = t->args_done = false;
    t->n_calls++;
    return true;
}

/* Where p[from, to) stops being whole UTF-8: before a trailing lead byte whose sequence has
 * not fully arrived (the next piece finishes it), else to. */
static size_t utf8_whole_end(const char *p, size_t from, size_t to)
{
    for (size_t k = to; k > from && to - k < 4; k--) {
        unsigned char c = (unsigned char)p[k - 1];
        if ((c & 0xC0) == 0x80)
            continue; /* a continuation byte: look further back for its lead */
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return to - (k - 1) < need ? k - 1 : to;
    }
    return to;
}

/* Gives out the arguments' bytes that have arrived, up to their end; fin: all of them,
 * the text is over. A fragment never ends inside a UTF-8 character, and invalid bytes
 * become U+FFFD, so the fragments are JSON strings whose concatenation does not depend
 * on how the text was cut. */
static void live_args(struct gs_srv_tool_reader *t, json_t *calls, bool fin)
{
    const char *p = t->held.p;
    for (; !t->args_done && t->args_scan < t->held.len; t->args_scan++) {
        char ch = p[t->args_scan];
        if (t->args_string) {
            if (t->args_escaped)
                t->args_escaped = false;
            else if (ch == '\\')
                t->args_escaped = true;
            else if (ch == '"')
                t->args_string = false;
        } else if (ch == '"') {
            t->args_string = true;
        } else if (ch == '{' || ch == '[') {
            t->args_depth++;
        } else if ((ch == '}' || ch == ']') && t->args_depth && --t->args_depth == 0) {
            t->args_done = true;
        }
    }
    size_t end = fin ? t->args_scan : utf8_whole_end(p, t->args_sent, t->args_scan);
    if (end > t->args_sent) {
        json_array_append_new(calls,
                              json_pack("{s:o}", "arguments",
                                        gs_srv_json_text(p + t->args_sent, end - t->args_sent)));
        t->args_sent = end;
    }
}

/* One step on held; returns false when it needs more text. */
static bool step(struct gs_srv_tool_reader *t, struct gs_srv_buf *content, json_t *calls)
{
    const struct gs_srv_tool_format *f = t->f;
    size_t ol = strlen(f->open);
    if (t->off) {
        give(t, t->held.len, content);
        return false;
    }
    switch (t->state) {
    case ST_TEXT: {
        const char *at = memmem(t->held.p ? t->held.p : "", t->held.len, f->open, ol);
        size_t upto = at ? (size_t)(at - t->held.p) : t->held.len;
        if (!at) /* keep the longest tail that may still become the marker */
            for (size_t k = GS_MIN(ol - 1, t->held.len); k > 0; k--)
                if (!memcmp(t->held.p + t->held.len - k, f->open, k)) {
                    upto = t->held.len - k;
                    break;
                }
        size_t first = 0;
        while (t->after_call && first < upto && is_gap(t->held.p[first]))
            first++;
        if (t->after_call && first == upto && !at)
            return false; /* only the gap after a call so far: wait */
        if (t->after_call && first == upto) {
            consume(t, upto); /* the separator between two calls */
        } else if (upto) {
            t->after_call = false;
            give(t, upto, content);
        }
        if (!at)
            return false;
        t->after_call = false;
        t->state = ST_OPEN;
        t->scan = f->open_in_body ? 0 : ol;
        return true;
    }
    case ST_OPEN:
        while (!f->open_in_body && t->scan < t->held.len && is_ws(t->held.p[t->scan]))
            t->scan++;
        if (t->scan == t->held.len)
            return false;
        if (f->body == GS_SRV_TOOL_BODY_NAME_ARGS) {
            t->state = ST_NAME;
            return true;
        }
        if (t->held.p[t->scan] != (f->body == GS_SRV_TOOL_BODY_ARRAY ? '[' : '{')) {
            malformed(t, content, "no JSON %s after %s",
                      f->body == GS_SRV_TOOL_BODY_ARRAY ? "list" : "object", f->open);
            return true;
        }
        t->json_start = t->scan;
        t->depth = 0;
        t->in_string = t->escaped = false;
        t->state = ST_JSON;
        return true;
    case ST_NAME: {
        size_t ne = name_end(t);
        if (!ne) {
            if (t->held.len - ol > MAX_NAME_SEGMENT)
                malformed(t, content, "no %s after the function's name", ARGS_MARK);
            return t->off;
        }
        t->scan = ne + strlen(ARGS_MARK);
        while (t->scan < t->held.len && is_ws(t->held.p[t->scan]))
            t->scan++;
        if (t->scan == t->held.len)
            return false;
        if (t->held.p[t->scan] != '{') {
            malformed(t, content, "no JSON object after %s", ARGS_MARK);
            return true;
        }
        t->json_start = t->scan;
        t->depth = 0;
        t->in_string = t->escaped = false;
        t->state = ST_JSON;
        if (live_format(t)) {
            const char *name = t->held.p + ol, *nend = t->held.p + ne;
            const char *id =
                memmem(name, (size_t)(nend - name), CALL_ID_MARK, strlen(CALL_ID_MARK));
            live_start(t, ol, (size_t)((id ? id : nend) - name), t->json_start, calls);
        }
        return true;
    }
    case ST_JSON: {
        if (live_format(t) && !t->live_on && f->body == GS_SRV_TOOL_BODY_OBJECT) {
            size_t name_at = 0, name_len = 0, args_at = 0;
            int m = live_prefix(t, &name_at, &name_len, &args_at);
            if (m == 0)
                return false;
            if (m > 0)
                live_start(t, name_at, name_len, args_at, calls);
        }
        if (t->live_on)
            live_args(t, calls, false);
        size_t end = scan_json(t);
        if (!end)
            return false;
        if (t->live_on) {
            /* Announced already: the object's checks can no longer take it back. */
            t->scan = end;
            if (!f->close[0])
                call_done(t, end);
            else
                t->state = ST_CLOSE;
            return true;
        }
        const char *name = NULL;
        size_t name_len = 0;
        if (f->body == GS_SRV_TOOL_BODY_NAME_ARGS) {
            name = t->held.p + ol;
            const char *nend = t->held.p + name_end(t);
            const char *id =
                memmem(name, (size_t)(nend - name), CALL_ID_MARK, strlen(CALL_ID_MARK));
            name_len = (size_t)((id ? id : nend) - name);
        }
        const char *why = take_json(t, end, name, name_len, calls);
        if (why) {
            malformed(t, content, "%s", why);
            return true;
        }
        t->scan = end;
        if (!f->close[0]) {
            call_done(t, end);
            return true;
        }
        t->state = ST_CLOSE;
        return true;
    }
    case ST_CLOSE: {
        while (t->scan < t->held.len && is_ws(t->held.p[t->scan]))
            t->scan++;
        size_t cl = strlen(f->close), have = t->held.len - t->scan;
        if (memcmp(t->held.p + t->scan, f->close, GS_MIN(cl, have))) {
            /* The calls were taken already: the text after them is content. */
            call_done(t, t->scan);
            t->after_call = false;
            snprintf(t->malformed, sizeof(t->malformed), "no %s after a call", f->close);
            return true;
        }
        if (have < cl)
            return false;
        call_done(t, t->scan + cl);
        return true;
    }
    }
    return false;
}

bool gs_srv_tool_reader_feed(struct gs_srv_tool_reader *t, const char *text, size_t len,
                             struct gs_srv_buf *content, json_t *calls)
{
    gs_srv_buf_add(&t->held, text, len);
    while (!t->held.failed && t->held.len && step(t, content, calls)) {
    }
    return !t->held.failed && !content->failed;
}

bool gs_srv_tool_reader_finish(struct gs_srv_tool_reader *t, struct gs_srv_buf *content,
                               json_t *calls)
{
    if (t->state == ST_CLOSE) {
        /* The calls are whole; only the close marker is missing (a stop string, or the
         * length): nothing of them is lost. */
        snprintf(t->malformed, sizeof(t->malformed), "no %s after a call", t->f->close);
        consume(t, t->held.len);
        t->state = ST_TEXT;
    } else if (t->state != ST_TEXT && t->live_on) {
        /* A live call cut off stays a call with the arguments it has. */
        live_args(t, calls, true);
        snprintf(t->malformed, sizeof(t->malformed), "the text ended inside a call");
        consume(t, t->held.len);
        t->state = ST_TEXT;
        t->live_on = false;
    } else if (t->state != ST_TEXT) {
        malformed(t, content, "the text ended inside a call");
    } else if (t->after_call) {
        size_t k = 0;
        while (k < t->held.len && is_gap(t->held.p[k]))
            k++;
        if (k == t->held.len)
            consume(t, k);
    }
    give(t, t->held.len, content);
    return !content->failed;
}
