/*
 * server/tools.c - tool calling, the request side: "tools", "tool_choice" and
 * "parallel_tool_calls" of a chat body, the tool calls and results in its
 * messages, and the grammar that makes the model's answer calls.
 *
 * Everything is checked before anything is queued, and nothing read is then
 * ignored: a tool definition the server cannot honour (no name, a duplicate,
 * parameters that are not an object schema, a schema keyword the grammar
 * cannot enforce) is a 400 naming it. With tool_choice "required" or a named
 * function the answer is constrained by a grammar to calls whose arguments
 * are sentences of each function's parameters schema; with "auto" the same
 * grammar applies from the format's open marker on (the scheduler's trigger).
 *
 * Threads: the loop thread; no state of its own.
 */
#include "server/internal.h"

#include <stdio.h>
#include <string.h>

/* Calls one answer may hold with parallel_tool_calls: a bound, so that a model that
 * never stops calling still ends with whole calls (docs/SERVER.md, "Limits"). */
#define MAX_PARALLEL_CALLS 16
#define MAX_TOOLS          128 /* functions of one request */

/* ---- tools ---------------------------------------------------------------------------------- */

static enum gs_status parse_tool(const struct gs_srv_refusal *c, json_t *t, size_t i,
                                 struct gs_srv_tool *out)
{
    static const char *const tool_keys[] = {"type", "function"};
    static const char *const fn_keys[] = {"name", "description", "parameters", "strict"};
    char where[64], p[96];
    snprintf(where, sizeof(where), "tools[%zu]", i);
    if (!json_is_object(t))
        return gs_srv_refuse(c, where, "'%s' must be an object", where);
    enum gs_status st = gs_srv_only_keys(c, t, where, tool_keys, GS_ARRAY_LEN(tool_keys));
    if (st)
        return st;
    json_t *type = json_object_get(t, "type"), *fn = json_object_get(t, "function");
    snprintf(p, sizeof(p), "%s.type", where);
    if (!json_is_string(type) || strcmp(json_string_value(type), "function"))
        return gs_srv_refuse(c, p, "'%s' must be \"function\"", p);
    snprintf(p, sizeof(p), "%s.function", where);
    if (!json_is_object(fn))
        return gs_srv_refuse(c, p, "'%s' must be an object with a 'name'", p);
    if ((st = gs_srv_only_keys(c, fn, p, fn_keys, GS_ARRAY_LEN(fn_keys))))
        return st;
    json_t *name = json_object_get(fn, "name"), *desc = json_object_get(fn, "description");
    json_t *params = json_object_get(fn, "parameters"), *strict = json_object_get(fn, "strict");
    snprintf(p, sizeof(p), "%s.function.name", where);
    if (!json_is_string(name) || !gs_srv_name_ok(json_string_value(name)))
        return gs_srv_refuse(c, p, "'%s' is required: 1 to 64 of a-z, A-Z, 0-9, '_' and '-'", p);
    snprintf(p, sizeof(p), "%s.function.description", where);
    if (desc && !json_is_null(desc) && !json_is_string(desc))
        return gs_srv_refuse(c, p, "'%s' must be a string", p);
    snprintf(p, sizeof(p), "%s.function.strict", where);
    if (strict && !json_is_null(strict) && !json_is_boolean(strict))
        return gs_srv_refuse(c, p, "'%s' must be a boolean", p);
    snprintf(p, sizeof(p), "%s.function.parameters", where);
    json_t *type_kw = json_object_get(params, "type");
    /* Omitted parameters are a function without arguments, as OpenAI's. */
    json_t *none = NULL;
    if (!params || json_is_null(params))
        params = none = json_pack("{s:s,s:{}}", "type", "object", "properties");
    else if (!json_is_object(params) || !json_is_string(type_kw) ||
             strcmp(json_string_value(type_kw), "object"))
        return gs_srv_refuse(c, p, "'%s' must be an object schema ({\"type\": \"object\", ...})",
                             p);
    if (!params)
        return gs_srv_refuse_nomem(c);
    /* The call's arguments are enforced whatever strict says: "strict": false gets the
     * same guarantee, as response_format's schemas do. */
    struct gs_err e;
    st = gs_grammar_from_json_schema(params, &out->gbnf, &out->gbnf_len, &e);
    json_decref(none);
    if (st == GS_NOMEM)
        return gs_srv_refuse_nomem(c);
    if (st)
        return gs_srv_refuse(c, p, "'%s': %s", p, e.msg);
    if (!(out->name = gs_strdup(json_string_value(name))))
        return gs_srv_refuse_nomem(c);
    return GS_OK;
}

static enum gs_status parse_tools(const struct gs_srv_refusal *c, json_t *tools,
                                  struct gs_srv_gen *g)
{
    if (!json_is_array(tools))
        return gs_srv_refuse(c, "tools", "'tools' must be an array of {\"type\":\"function\",...}");
    size_t n = json_array_size(tools);
    if (n > MAX_TOOLS)
        return gs_srv_refuse(c, "tools", "'tools' has %zu functions; at most %d are allowed", n,
                             MAX_TOOLS);
    if (!n)
        return GS_OK;
    if (!(g->tools = gs_calloc(n, sizeof(*g->tools))))
        return gs_srv_refuse_nomem(c);
    for (size_t i = 0; i < n; i++) {
        enum gs_status st = parse_tool(c, json_array_get(tools, i), i, &g->tools[i]);
        g->n_tools = i + 1;
        if (st)
            return st;
        for (size_t k = 0; k < i; k++)
            if (!strcmp(g->tools[k].name, g->tools[i].name)) {
                char p[64];
                snprintf(p, sizeof(p), "tools[%zu].function.name", i);
                return gs_srv_refuse(
                    c, p, "'%s': the name '%s' is also tools[%zu]'s; names must be unique", p,
                    g->tools[i].name, k);
            }
    }
    return GS_OK;
}

static enum gs_status parse_choice(const struct gs_srv_refusal *c, json_t *tc, struct gs_srv_gen *g)
{
    g->tool_choice = g->n_tools ? GS_SRV_TOOL_CHOICE_AUTO : GS_SRV_TOOL_CHOICE_NONE;
    if (!tc || json_is_null(tc))
        return GS_OK;
    if (json_is_string(tc)) {
        const char *s = json_string_value(tc);
        if (!strcmp(s, "none"))
            g->tool_choice = GS_SRV_TOOL_CHOICE_NONE;
        else if (!strcmp(s, "auto"))
            g->tool_choice = g->n_tools ? GS_SRV_TOOL_CHOICE_AUTO : GS_SRV_TOOL_CHOICE_NONE;
        else if (!strcmp(s, "required"))
            g->tool_choice = GS_SRV_TOOL_CHOICE_REQUIRED;
        else
            return gs_srv_refuse(
                c, "tool_choice",
                "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                "{\"type\":\"function\",\"function\":{\"name\":...}}, not \"%.40s\"",
                s);
    } else {
        static const char *const keys[] = {"type", "function"};
        static const char *const fn_keys[] = {"name"};
        if (!json_is_object(tc))
            return gs_srv_refuse(c, "tool_choice", "'tool_choice' must be a string or an object");
        enum gs_status st = gs_srv_only_keys(c, tc, "tool_choice", keys, GS_ARRAY_LEN(keys));
        json_t *type = json_object_get(tc, "type"), *fn = json_object_get(tc, "function");
        if (st)
            return st;
        if (!json_is_string(type) || strcmp(json_string_value(type), "function"))
            return gs_srv_refuse(c, "tool_choice.type", "'tool_choice.type' must be \"function\"");
        if (!json_is_object(fn) ||
            (st = gs_srv_only_keys(c, fn, "tool_choice.function", fn_keys, GS_ARRAY_LEN(fn_keys))))
            return st ? st
                      : gs_srv_refuse(c, "tool_choice.function",
                                      "'tool_choice.function' must be {\"name\": string}");
        json_t *name = json_object_get(fn, "name");
        if (!json_is_string(name))
            return gs_srv_refuse(c, "tool_choice.function.name",
                                 "'tool_choice.function.name' must be a string");
        size_t i = 0;
        while (i < g->n_tools && strcmp(g->tools[i].name, json_string_value(name)))
            i++;
        if (i == g->n_tools)
            return gs_srv_refuse(c, "tool_choice.function.name",
                                 "'tool_choice.function.name': no function '%.64s' among the tools",
                                 json_string_value(name));
        g->tool_choice = GS_SRV_TOOL_CHOICE_NAMED;
        g->tool_named = i;
    }
    if (g->tool_choice == GS_SRV_TOOL_CHOICE_REQUIRED && !g->n_tools)
        return gs_srv_refuse(c, "tool_choice", "'tool_choice' \"required\" needs 'tools'");
    return GS_OK;
}

/* ---- messages: earlier calls and their results ---------------------------------------------- */

/* An earlier call in the history. Other keys than these pass to the template as they are:
 * they are the conversation, not requests of the server (the SDKs keep their parsed
 * arguments there). */
static enum gs_status check_call(const struct gs_srv_refusal *c, json_t *call, const char *where)
{
    char p[160];
    if (!json_is_object(call))
        return gs_srv_refuse(c, where, "'%s' must be a tool call object", where);
    json_t *id = json_object_get(call, "id"), *type = json_object_get(call, "type");
    json_t *fn = json_object_get(call, "function");
    snprintf(p, sizeof(p), "%s.id", where);
    if (id && !json_is_string(id))
        return gs_srv_refuse(c, p, "'%s' must be a string", p);
    snprintf(p, sizeof(p), "%s.type", where);
    if (type && (!json_is_string(type) || strcmp(json_string_value(type), "function")))
        return gs_srv_refuse(c, p, "'%s' must be \"function\"", p);
    snprintf(p, sizeof(p), "%s.function", where);
    if (!json_is_object(fn))
        return gs_srv_refuse(c, p, "'%s' must be {\"name\": string, \"arguments\": string}", p);
    json_t *args = json_object_get(fn, "arguments");
    snprintf(p, sizeof(p), "%s.function.name", where);
    if (!json_is_string(json_object_get(fn, "name")))
        return gs_srv_refuse(c, p, "'%s' must be a string", p);
    snprintf(p, sizeof(p), "%s.function.arguments", where);
    if (args && !json_is_string(args) && !json_is_object(args))
        return gs_srv_refuse(c, p, "'%s' must be a string of JSON", p);
    return GS_OK;
}

/*
 * Checks the messages' tool_calls and tool_call_id. With the template's copy (jinja), each
 * call's arguments string that holds a JSON object becomes that object: templates write
 * `arguments | tojson`, and a model was trained on the object, not on a quoted string
 * (llama.cpp does the same).
 */
static enum gs_status check_messages(const struct gs_srv_refusal *c, json_t *msgs, bool jinja)
{
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m)
    {
        char p[64];
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *calls = json_object_get(m, "tool_calls"), *id = json_object_get(m, "tool_call_id");
        snprintf(p, sizeof(p), "messages[%zu].tool_calls", i);
        if (calls && !json_is_null(calls)) {
            if (!jinja)
                return gs_srv_refuse(
                    c, p,
                    "'%s' needs the model's Jinja chat template; this server renders "
                    "chats with a built-in format",
                    p);
            if (!role || strcmp(role, "assistant"))
                return gs_srv_refuse(c, p, "'%s' is for assistant messages", p);
            if (!json_is_array(calls))
                return gs_srv_refuse(c, p, "'%s' must be an array", p);
            size_t k;
            json_t *call;
            json_array_foreach(calls, k, call)
            {
                char w[112];
                snprintf(w, sizeof(w), "%s[%zu]", p, k);
                enum gs_status st = check_call(c, call, w);
                if (st)
                    return st;
                json_t *fn = json_object_get(call, "function");
                json_t *args = json_object_get(fn, "arguments");
                json_t *obj = json_is_string(args) ? json_loadb(json_string_value(args),
                                                                json_string_length(args), 0, NULL)
                                                   : NULL;
                if (json_is_object(obj) && json_object_set(fn, "arguments", obj)) {
                    json_decref(obj);
                    return gs_srv_refuse_nomem(c);
                }
                json_decref(obj);
            }
        }
        snprintf(p, sizeof(p), "messages[%zu].tool_call_id", i);
        if (role && !strcmp(role, "tool") && jinja && !json_is_string(id))
            return gs_srv_refuse(
                c, p, "'%s' is required for tool messages: the id of the call answered", p);
        if (id && !json_is_null(id) && (!role || strcmp(role, "tool")))
            return gs_srv_refuse(c, p, "'%s' is for tool messages", p);
    }
    return GS_OK;
}

/*
 * The generic format is not in the template, so the server teaches it: the instructions
 * join the system message when the conversation has one, else they open the first
 * message's text (a template may refuse a system role it was not sent: Gemma's).
 */
static enum gs_status add_generic_prompt(const struct gs_srv_refusal *c, json_t *msgs,
                                         json_t *tools)
{
    char *list = json_dumps(tools, JSON_COMPACT);
    struct gs_srv_buf b = {0};
    gs_srv_buf_adds(&b, "You can call these functions (JSON Schema of their arguments "
                        "included):\n");
    gs_srv_buf_adds(&b, list ? list : "[]");
    gs_srv_buf_adds(&b, "\nTo call one or more of them, answer with only a JSON object "
                        "{\"tool_calls\": [{\"name\": <function name>, \"arguments\": "
                        "<arguments object>}]}. Otherwise answer in plain text.");
    free(list);
    json_t *first = json_array_get(msgs, 0);
    const char *role = json_string_value(json_object_get(first, "role"));
    json_t *content = json_object_get(first, "content");
    int rc = 1;
    if (json_is_string(content)) {
        bool system = role && !strcmp(role, "system");
        struct gs_srv_buf joined = {0};
        if (system)
            gs_srv_buf_add(&joined, json_string_value(content), json_string_length(content));
        gs_srv_buf_adds(&joined, system ? "\n\n" : "");
        gs_srv_buf_add(&joined, b.p, b.len);
        gs_srv_buf_adds(&joined, system ? "" : "\n\n");
        if (!system)
            gs_srv_buf_add(&joined, json_string_value(content), json_string_length(content));
        rc = joined.failed ||
             json_object_set_new(first, "content", json_stringn(joined.p, joined.len));
        gs_srv_buf_free(&joined);
    } else {
        rc = b.failed ||
             json_array_insert_new(
                 msgs, 0, json_pack("{s:s,s:s%}", "role", "system", "content", b.p, b.len));
    }
    gs_srv_buf_free(&b);
    return rc ? gs_srv_refuse_nomem(c) : GS_OK;
}

/* A message's content as text: a string as it is, anything else as JSON. */
static char *content_text(json_t *v)
{
    if (json_is_string(v))
        return gs_strndup(json_string_value(v), json_string_length(v));
    if (!v || json_is_null(v))
        return gs_strdup("");
    char *d = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    char *t = d ? gs_strdup(d) : NULL;
    free(d);
    return t;
}

/* Whether a conversation holds calls or their results. */
static bool history_has_tools(json_t *msgs)
{
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m)
    {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (json_array_size(json_object_get(m, "tool_calls")) || (role && !strcmp(role, "tool")))
            return true;
    }
    return false;
}

/*
 * A template without a tool format knows neither tool_calls nor the tool role: the
 * history is rewritten in the generic format's words, as the model was told to write
 * them. An assistant's calls become its text {"tool_calls": [...]}; the results that
 * follow become one user message of {"tool_response": ...} lines, so that roles still
 * alternate.
 */
static enum gs_status polyfill_history(const struct gs_srv_refusal *c, struct gs_srv_gen *g)
{
    json_t *in = g->messages_json, *out = json_array();
    size_t i;
    json_t *m;
    bool last_results = false;
    if (!out)
        return gs_srv_refuse_nomem(c);
    json_array_foreach(in, i, m)
    {
        const char *role = json_string_value(json_object_get(m, "role"));
        json_t *calls = json_object_get(m, "tool_calls");
        bool is_tool = role && !strcmp(role, "tool");
        json_t *copy = json_copy(m);
        char *text = content_text(json_object_get(m, "content"));
        int rc = !copy || !text;
        if (!rc && json_array_size(calls)) {
            json_t *list = json_array();
            size_t k;
            json_t *call;
            json_array_foreach(calls, k, call)
            {
                json_t *fn = json_object_get(call, "function");
                json_array_append_new(list,
                                      json_pack("{s:O,s:O}", "name", json_object_get(fn, "name"),
                                                "arguments", json_object_get(fn, "arguments")));
            }
            json_t *wrap = json_pack("{s:o}", "tool_calls", list);
            char *d = wrap ? json_dumps(wrap, JSON_COMPACT) : NULL;
            struct gs_srv_buf b = {0};
            gs_srv_buf_adds(&b, text);
            gs_srv_buf_adds(&b, *text ? "\n" : "");
            gs_srv_buf_adds(&b, d ? d : "");
            rc = !d || b.failed || json_object_del(copy, "tool_calls") ||
                 json_object_set_new(copy, "content", json_stringn(b.p, b.len));
            free(d);
            json_decref(wrap);
            gs_srv_buf_free(&b);
        }
        if (!rc && is_tool) {
            json_t *resp = json_pack("{s:{s:O,s:s}}", "tool_response", "tool_call_id",
                                     json_object_get(m, "tool_call_id"), "content", text);
            char *d = resp ? json_dumps(resp, JSON_COMPACT) : NULL;
            json_t *prev = json_array_get(out, json_array_size(out) - 1);
            struct gs_srv_buf b = {0};
            if (last_results && prev) {
                gs_srv_buf_adds(&b, json_string_value(json_object_get(prev, "content")));
                gs_srv_buf_adds(&b, "\n");
            }
            gs_srv_buf_adds(&b, d ? d : "");
            json_decref(copy);
            copy = json_pack("{s:s,s:s%}", "role", "user", "content", b.p ? b.p : "", b.len);
            rc = !d || b.failed || !copy;
            if (!rc && last_results && prev)
                rc = json_array_remove(out, json_array_size(out) - 1);
            free(d);
            json_decref(resp);
            gs_srv_buf_free(&b);
        }
        gs_free(text);
        last_results = is_tool;
        if (rc || json_array_append_new(out, copy)) {
            json_decref(out);
            return gs_srv_refuse_nomem(c);
        }
    }
    json_decref(g->messages_json);
    g->messages_json = out;
    return GS_OK;
}

/* ---- the grammar of the calls --------------------------------------------------------------- */

/* Appends s as a GBNF literal's body (the quotes are the caller's). */
static void lit(struct gs_srv_buf *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            gs_srv_buf_addf(b, "\\%c", *s);
        else if (*s == '\n')
            gs_srv_buf_adds(b, "\\n");
        else
            gs_srv_buf_add(b, s, 1);
    }
}

/* Appends src's rules with every rule name prefixed: names are the runs of
 * [a-zA-Z0-9_-] outside literals, classes, repetition counts and comments. */
static void renamed(struct gs_srv_buf *b, const char *src, size_t n, const char *prefix)
{
    size_t i = 0;
    while (i < n) {
        char ch = src[i];
        size_t j = i + 1;
        if (ch == '"' || ch == '[') {
            char end = ch == '"' ? '"' : ']';
            while (j < n && src[j] != end)
                j += src[j] == '\\' && j + 1 < n ? 2 : 1;
            j = GS_MIN(j + 1, n);
        } else if (ch == '{') {
            while (j < n && src[j - 1] != '}')
                j++;
        } else if (ch == '#') {
            while (j < n && src[j] != '\n')
                j++;
        } else if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                   (ch >= '0' && ch <= '9') || ch == '_' || ch == '-') {
            while (j < n && ((src[j] >= 'a' && src[j] <= 'z') || (src[j] >= 'A' && src[j] <= 'Z') ||
                             (src[j] >= '0' && src[j] <= '9') || src[j] == '_' || src[j] == '-'))
                j++;
            gs_srv_buf_adds(b, prefix);
        }
        gs_srv_buf_add(b, src + i, j - i);
        i = j;
    }
    gs_srv_buf_adds(b, "\n");
}

/* Appends ` "<s>"` when s is not empty: GBNF has no use for an empty literal. */
static void lit_term(struct gs_srv_buf *b, const char *s)
{
    if (!*s)
        return;
    gs_srv_buf_adds(b, " \"");
    lit(b, s);
    gs_srv_buf_adds(b, "\"");
}

enum gs_status gs_srv_tools_grammar(const struct gs_srv_tool_format *f,
                                    const struct gs_srv_tool *tools, size_t n, size_t only,
                                    bool parallel, char **gbnf, size_t *len, struct gs_err *err)
{
    struct gs_srv_buf b = {0};
    bool name_args = f->body == GS_SRV_TOOL_BODY_NAME_ARGS;
    bool list = f->body == GS_SRV_TOOL_BODY_ARRAY || f->body == GS_SRV_TOOL_BODY_WRAPPED;
    char head[64] = "", tail[64] = "";
    if (f->body == GS_SRV_TOOL_BODY_ARRAY)
        snprintf(head, sizeof(head), "%s[", f->open), snprintf(tail, sizeof(tail), "]");
    else if (f->body == GS_SRV_TOOL_BODY_WRAPPED)
        snprintf(head, sizeof(head), "{\"tool_calls\": ["), snprintf(tail, sizeof(tail), "]}");
    /* root: the calls, with the format's list around them and separators between. */
    gs_srv_buf_adds(&b, "root ::=");
    lit_term(&b, head);
    gs_srv_buf_adds(&b, " call");
    if (parallel) {
        gs_srv_buf_adds(&b, " (");
        lit_term(&b, f->sep);
        gs_srv_buf_addf(&b, " call ){0,%d}", MAX_PARALLEL_CALLS - 1);
    }
    lit_term(&b, tail);
    /* call: one call object, or the marker, the name and [ARGS]. */
    char pre[64], post[64];
    snprintf(pre, sizeof(pre), "%s%s%s", !list && !f->open_in_body ? f->open : "",
             f->body == GS_SRV_TOOL_BODY_OBJECT && f->close[0] ? "\n" : "",
             name_args ? "" : "{\"name\":");
    snprintf(post, sizeof(post), "%s%s%s", name_args ? "" : "}", f->close[0] ? "\n" : "", f->close);
    gs_srv_buf_adds(&b, "\ncall ::=");
    lit_term(&b, pre);
    if (!name_args)
        gs_srv_buf_adds(&b, " sp \"\\\"\"");
    gs_srv_buf_adds(&b, " fn");
    lit_term(&b, post);
    gs_srv_buf_adds(&b, "\nsp ::= \" \"?\nfn ::=");
    bool first = true;
    for (size_t i = 0; i < n; i++)
        if (only >= n || i == only) {
            gs_srv_buf_addf(&b, "%s t%zu-fn", first ? "" : " |", i);
            first = false;
        }
    gs_srv_buf_adds(&b, "\n");
    for (size_t i = 0; i < n; i++) {
        if (only < n && i != only)
            continue;
        /* "name", "arguments": <the parameters' root>, or name[ARGS]<root>. */
        gs_srv_buf_addf(&b, "t%zu-fn ::= \"%s", i, tools[i].name);
        if (name_args)
            gs_srv_buf_adds(&b, "[ARGS]\"");
        else
            gs_srv_buf_addf(&b, "\\\",\" sp \"\\\"%s\\\":\" sp", f->args_key);
        gs_srv_buf_addf(&b, " t%zu-root\n", i);
        char prefix[24];
        snprintf(prefix, sizeof(prefix), "t%zu-", i);
        renamed(&b, tools[i].gbnf, tools[i].gbnf_len, prefix);
    }
    if (b.failed) {
        gs_srv_buf_free(&b);
        return gs_err_set(err, GS_NOMEM, "out of memory");
    }
    *gbnf = b.p;
    *len = b.len;
    return GS_OK;
}

/* ---- the whole request ---------------------------------------------------------------------- */

enum gs_status gs_srv_tools_parse(json_t *root, const struct gs_srv_parse_limits *lim,
                                  struct gs_srv_gen *g, char *param, size_t param_cap,
                                  struct gs_err *err)
{
    const struct gs_srv_refusal c = {param, param_cap, err};
    /* A caller that renders through Jinja without naming a format gets the generic one. */
    const struct gs_srv_tool_format *format =
        lim->tool_format ? lim->tool_format : gs_srv_tool_format_detect(NULL);
    json_t *tools = json_object_get(root, "tools"), *tc = json_object_get(root, "tool_choice");
    json_t *ptc = json_object_get(root, "parallel_tool_calls");
    static const char *const names[] = {"tools", "tool_choice", "parallel_tool_calls"};
    json_t *vals[] = {tools, tc, ptc};
    if (!g->chat) {
        for (size_t i = 0; i < GS_ARRAY_LEN(names); i++)
            if (vals[i] && !json_is_null(vals[i]))
                return gs_srv_refuse(&c, names[i], "'%s' is for /v1/chat/completions", names[i]);
        return GS_OK;
    }
    enum gs_status st;
    g->parallel_tool_calls = true;
    if (ptc && !json_is_null(ptc)) {
        if (!json_is_boolean(ptc))
            return gs_srv_refuse(&c, "parallel_tool_calls",
                                 "'parallel_tool_calls' must be a boolean");
        g->parallel_tool_calls = json_is_true(ptc);
    }
    if (tools && !json_is_null(tools) && (st = parse_tools(&c, tools, g)))
        return st;
    if ((st = parse_choice(&c, tc, g)))
        return st;
    if ((st = check_messages(
             &c, g->messages_json ? g->messages_json : json_object_get(root, "messages"),
             lim->jinja)))
        return st;
    if (g->n_tools && !lim->jinja)
        return gs_srv_refuse(
            &c, "tools",
            "'tools' needs the model's Jinja chat template, which renders them; this "
            "server renders chats with a built-in format");
    if (lim->jinja && format->inject_prompt && g->messages_json &&
        history_has_tools(g->messages_json) && (st = polyfill_history(&c, g)))
        return st;
    if (!g->n_tools)
        return GS_OK;
    g->tool_format = format;
    if (g->tool_choice == GS_SRV_TOOL_CHOICE_NONE)
        return GS_OK;
    if (g->grammar)
        return gs_srv_refuse(&c, "tool_choice",
                             "'response_format' and 'grammar' cannot be combined with tools unless "
                             "'tool_choice' is \"none\"");
    if (g->tool_format->inject_prompt && (st = add_generic_prompt(&c, g->messages_json, tools)))
        return st;
    char *src;
    size_t len;
    struct gs_err e;
    size_t only = g->tool_choice == GS_SRV_TOOL_CHOICE_NAMED ? g->tool_named : g->n_tools;
    if ((st = gs_srv_tools_grammar(g->tool_format, g->tools, g->n_tools, only,
                                   g->parallel_tool_calls, &src, &len, &e)))
        return st == GS_NOMEM ? gs_srv_refuse_nomem(&c) : gs_srv_refuse(&c, "tools", "%s", e.msg);
    st = gs_grammar_compile(src, len, "root", NULL, &g->grammar, &e);
    gs_free(src);
    if (st == GS_NOMEM)
        return gs_srv_refuse_nomem(&c);
    if (st)
        return gs_srv_refuse(&c, "tools", "the tools' grammar: %s", e.msg);
    if (g->tool_choice == GS_SRV_TOOL_CHOICE_AUTO)
        g->grammar_trigger = g->tool_format->open;
    return GS_OK;
}

void gs_srv_tools_free(struct gs_srv_gen *g)
{
    for (size_t i = 0; i < g->n_tools; i++) {
        gs_free(g->tools[i].name);
        gs_free(g->tools[i].gbnf);
    }
    gs_free(g->tools);
    g->tools = NULL;
    g->n_tools = 0;
}
