/*
 * server/responses_body.c - a POST /v1/responses body (OpenAI's Responses API), read
 * as the chat completion it asks for. The Responses fields are checked and rewritten
 * into chat's spelling (input items into messages, text.format into response_format,
 * flat function tools into nested ones, max_output_tokens into max_tokens), and that
 * body goes through gs_srv_gen_parse: one parser, one set of checks, one path to the
 * engine. A refusal from the chat parser is given back in the Responses spelling of
 * the field it names.
 *
 * Unlike the chat route, every top-level field is either honoured or refused.
 */
#include "server/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct rctx {
    struct gs_srv_refusal r; /* where refusals go */
    /* For each chat message, the field it came from ("instructions", "input[3]",
     * "previous_response_id"), so that the chat parser's "messages[k]" is told back as
     * the client wrote it. */
    json_t *origin;
};

/* Names the chat messages from msgs' end back to origin's size as coming from where. */
static void came_from(struct rctx *c, const json_t *msgs, const char *where)
{
    while (c->origin && json_array_size(c->origin) < json_array_size(msgs))
        if (json_array_append_new(c->origin, json_string(where)))
            break;
}

/* What /v1/responses reads. previous_response_id is read by the route (responses.c). */
static const char *const fields[] = {
    "model",
    "input",
    "instructions",
    "max_output_tokens",
    "temperature",
    "top_p",
    "stream",
    "store",
    "text",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "previous_response_id",
};

static bool listed(const char *key, const char *const *keys, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(key, keys[i]))
            return true;
    return false;
}

/* Every key of o is among keys[n]; else a 400 naming where.key. */
static enum gs_status only_keys(struct rctx *c, json_t *o, const char *where,
                                const char *const *keys, size_t n)
{
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v)
    {
        if (listed(k, keys, n))
            continue;
        char p[192]; /* where (at most 127 bytes, see its callers), ".", 40 of k */
        snprintf(p, sizeof(p), "%s%s%.40s", where, *where ? "." : "", k);
        return gs_srv_refuse(&c->r, p, "'%s': graphserve does not implement this field; remove it",
                             p);
    }
    return GS_OK;
}

/* A message item's content: a string, or input_text / output_text parts, joined. */
static enum gs_status item_text(struct rctx *c, json_t *v, const char *where, json_t **out)
{
    if (json_is_string(v)) {
        *out = json_incref(v);
        return GS_OK;
    }
    char p[96];
    snprintf(p, sizeof(p), "%s.content", where);
    if (!json_is_array(v))
        return gs_srv_refuse(&c->r, p, "'%s' must be a string or an array of input_text parts", p);
    struct gs_srv_buf b = {0};
    size_t k;
    json_t *part;
    static const char *const part_keys[] = {"type", "text", "annotations", "logprobs"};
    json_array_foreach(v, k, part)
    {
        char pp[128];
        snprintf(pp, sizeof(pp), "%s[%zu]", p, k);
        const char *type = json_string_value(json_object_get(part, "type"));
        json_t *text = json_object_get(part, "text");
        enum gs_status st = GS_OK;
        if (!json_is_object(part) || !type)
            st = gs_srv_refuse(&c->r, pp, "'%s' must be a content part with a 'type'", pp);
        else if (strcmp(type, "input_text") && strcmp(type, "output_text"))
            st = gs_srv_refuse(
                &c->r, pp,
                "'%s': content parts of type '%.40s' are not supported by graphserve; only "
                "'input_text' and 'output_text'",
                pp, type);
        else if ((st = only_keys(c, part, pp, part_keys, GS_ARRAY_LEN(part_keys))) == GS_OK &&
                 !json_is_string(text))
            st = gs_srv_refuse(&c->r, pp, "'%s.text' must be a string", pp);
        if (st != GS_OK) {
            gs_srv_buf_free(&b);
            return st;
        }
        gs_srv_buf_add(&b, json_string_value(text), json_string_length(text));
    }
    *out = b.failed ? NULL : json_stringn(b.p ? b.p : "", b.len);
    gs_srv_buf_free(&b);
    return *out ? GS_OK : gs_srv_refuse_nomem(&c->r);
}

static enum gs_status item_message(struct rctx *c, json_t *it, const char *where, json_t *msgs)
{
    static const char *const keys[] = {"type", "role", "content", "id", "status"};
    enum gs_status st = only_keys(c, it, where, keys, GS_ARRAY_LEN(keys));
    if (st != GS_OK)
        return st;
    const char *role = json_string_value(json_object_get(it, "role"));
    char p[96];
    snprintf(p, sizeof(p), "%s.role", where);
    if (!role || (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system") &&
                  strcmp(role, "developer")))
        return gs_srv_refuse(&c->r, p, "'%s' must be one of user, assistant, system, developer", p);
    json_t *content = json_object_get(it, "content"), *text;
    snprintf(p, sizeof(p), "%s.content", where);
    if (!content)
        return gs_srv_refuse(&c->r, p, "'%s' is required", p);
    if ((st = item_text(c, content, where, &text)) != GS_OK)
        return st;
    if (json_array_append_new(msgs, json_pack("{s:s,s:o}", "role", role, "content", text)))
        return gs_srv_refuse_nomem(&c->r);
    return GS_OK;
}

/* A function_call item: an assistant's tool call, merged into the assistant message
 * before it when that one is the last (the model's text, then its calls). */
static enum gs_status item_call(struct rctx *c, json_t *it, const char *where, json_t *msgs)
{
    static const char *const keys[] = {"type", "call_id", "name", "arguments", "id", "status"};
    enum gs_status st = only_keys(c, it, where, keys, GS_ARRAY_LEN(keys));
    if (st != GS_OK)
        return st;
    static const char *const need[] = {"call_id", "name", "arguments"};
    for (size_t i = 0; i < GS_ARRAY_LEN(need); i++)
        if (!json_is_string(json_object_get(it, need[i]))) {
            char p[96];
            snprintf(p, sizeof(p), "%s.%s", where, need[i]);
            return gs_srv_refuse(&c->r, p, "'%s' must be a string", p);
        }
    json_t *call = json_pack("{s:O,s:s,s:{s:O,s:O}}", "id", json_object_get(it, "call_id"), "type",
                             "function", "function", "name", json_object_get(it, "name"),
                             "arguments", json_object_get(it, "arguments"));
    if (!call)
        return gs_srv_refuse_nomem(&c->r);
    json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    const char *lrole = json_string_value(json_object_get(last, "role"));
    if (!lrole || strcmp(lrole, "assistant")) {
        last = json_pack("{s:s,s:n,s:[]}", "role", "assistant", "content", "tool_calls");
        if (!last || json_array_append_new(msgs, last)) {
            json_decref(call);
            return gs_srv_refuse_nomem(&c->r);
        }
    }
    json_t *calls = json_object_get(last, "tool_calls");
    if (!calls) {
        calls = json_array();
        if (!calls || json_object_set_new(last, "tool_calls", calls)) {
            json_decref(call);
            return gs_srv_refuse_nomem(&c->r);
        }
    }
    return json_array_append_new(calls, call) ? gs_srv_refuse_nomem(&c->r) : GS_OK;
}

static enum gs_status item_output(struct rctx *c, json_t *it, const char *where, json_t *msgs)
{
    static const char *const keys[] = {"type", "call_id", "output", "id", "status"};
    enum gs_status st = only_keys(c, it, where, keys, GS_ARRAY_LEN(keys));
    if (st != GS_OK)
        return st;
    char p[96];
    snprintf(p, sizeof(p), "%s.call_id", where);
    if (!json_is_string(json_object_get(it, "call_id")))
        return gs_srv_refuse(&c->r, p, "'%s' must be a string", p);
    snprintf(p, sizeof(p), "%s.output", where);
    if (!json_is_string(json_object_get(it, "output")))
        return gs_srv_refuse(&c->r, p, "'%s' must be a string", p);
    if (json_array_append_new(msgs, json_pack("{s:s,s:O,s:O}", "role", "tool", "tool_call_id",
                                              json_object_get(it, "call_id"), "content",
                                              json_object_get(it, "output"))))
        return gs_srv_refuse_nomem(&c->r);
    return GS_OK;
}

/* "input" into chat messages appended to msgs. */
static enum gs_status parse_input(struct rctx *c, json_t *input, json_t *msgs)
{
    if (!input)
        return gs_srv_refuse(&c->r, "input", "'input' is required");
    if (json_is_string(input)) {
        if (json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "user", "content", input)))
            return gs_srv_refuse_nomem(&c->r);
        came_from(c, msgs, "input");
        return GS_OK;
    }
    if (!json_is_array(input) || !json_array_size(input))
        return gs_srv_refuse(&c->r, "input",
                             "'input' must be a string or a non-empty array of items");
    size_t i;
    json_t *it;
    json_array_foreach(input, i, it)
    {
        char where[32];
        snprintf(where, sizeof(where), "input[%zu]", i);
        if (!json_is_object(it))
            return gs_srv_refuse(&c->r, where, "'%s' must be an object", where);
        const char *type = json_string_value(json_object_get(it, "type"));
        enum gs_status st;
        if (!type || !strcmp(type, "message"))
            st = item_message(c, it, where, msgs);
        else if (!strcmp(type, "function_call"))
            st = item_call(c, it, where, msgs);
        else if (!strcmp(type, "function_call_output"))
            st = item_output(c, it, where, msgs);
        else
            st = gs_srv_refuse(&c->r, where,
                               "'%s': items of type '%.40s' are not supported by graphserve; only "
                               "'message', 'function_call' and 'function_call_output'",
                               where, type);
        if (st != GS_OK)
            return st;
        came_from(c, msgs, where);
    }
    return GS_OK;
}

/* "text": {"format": {"type": "text" | "json_object" | "json_schema", ...}}. */
static enum gs_status parse_text(struct rctx *c, json_t *text, json_t *chat)
{
    if (!text || json_is_null(text))
        return GS_OK;
    static const char *const keys[] = {"format"};
    enum gs_status st;
    if (!json_is_object(text))
        return gs_srv_refuse(&c->r, "text", "'text' must be an object");
    if ((st = only_keys(c, text, "text", keys, 1)) != GS_OK)
        return st;
    json_t *f = json_object_get(text, "format");
    if (!f || json_is_null(f))
        return GS_OK;
    const char *type = json_string_value(json_object_get(f, "type"));
    if (!json_is_object(f) || !type)
        return gs_srv_refuse(&c->r, "text.format", "'text.format' must be an object with a 'type'");
    json_t *rf;
    if (!strcmp(type, "json_schema")) {
        static const char *const js_keys[] = {"type", "name", "schema", "strict", "description"};
        if ((st = only_keys(c, f, "text.format", js_keys, GS_ARRAY_LEN(js_keys))) != GS_OK)
            return st;
        json_t *js = json_deep_copy(f);
        if (js)
            json_object_del(js, "type");
        rf = json_pack("{s:s,s:o}", "type", "json_schema", "json_schema", js);
    } else {
        static const char *const t_keys[] = {"type"};
        if ((st = only_keys(c, f, "text.format", t_keys, 1)) != GS_OK)
            return st;
        rf = json_pack("{s:s}", "type", type);
    }
    if (!rf || json_object_set_new(chat, "response_format", rf))
        return gs_srv_refuse_nomem(&c->r);
    return GS_OK;
}

/* Flat function tools ({"type":"function","name",...}) into chat's nested ones. */
static enum gs_status parse_tools(struct rctx *c, json_t *root, json_t *chat)
{
    json_t *tools = json_object_get(root, "tools"), *tc = json_object_get(root, "tool_choice");
    enum gs_status st;
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools))
            return gs_srv_refuse(&c->r, "tools", "'tools' must be an array");
        json_t *out = json_array();
        if (!out || json_object_set_new(chat, "tools", out))
            return gs_srv_refuse_nomem(&c->r);
        size_t i;
        json_t *t;
        static const char *const keys[] = {"type", "name", "description", "parameters", "strict"};
        json_array_foreach(tools, i, t)
        {
            char where[32];
            snprintf(where, sizeof(where), "tools[%zu]", i);
            const char *type = json_string_value(json_object_get(t, "type"));
            if (!json_is_object(t) || !type || strcmp(type, "function"))
                return gs_srv_refuse(
                    &c->r, where,
                    "'%s': only function tools ({\"type\":\"function\",\"name\",...}) "
                    "are supported by graphserve",
                    where);
            if ((st = only_keys(c, t, where, keys, GS_ARRAY_LEN(keys))) != GS_OK)
                return st;
            json_t *fn = json_deep_copy(t);
            if (fn)
                json_object_del(fn, "type");
            if (json_array_append_new(out,
                                      json_pack("{s:s,s:o}", "type", "function", "function", fn)))
                return gs_srv_refuse_nomem(&c->r);
        }
    }
    if (!tc || json_is_null(tc) || json_is_string(tc))
        return tc && json_object_set(chat, "tool_choice", tc) ? gs_srv_refuse_nomem(&c->r) : GS_OK;
    static const char *const tc_keys[] = {"type", "name"};
    const char *type = json_string_value(json_object_get(tc, "type"));
    if (!json_is_object(tc) || !type || strcmp(type, "function"))
        return gs_srv_refuse(&c->r, "tool_choice",
                             "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                             "{\"type\":\"function\",\"name\":...}");
    if ((st = only_keys(c, tc, "tool_choice", tc_keys, GS_ARRAY_LEN(tc_keys))) != GS_OK)
        return st;
    json_t *name = json_object_get(tc, "name");
    json_t *out = json_pack("{s:s,s:{s:O}}", "type", "function", "function", "name",
                            name ? name : json_null());
    if (!out || json_object_set_new(chat, "tool_choice", out))
        return gs_srv_refuse_nomem(&c->r);
    return GS_OK;
}

/* The fields copied under the same name, and those renamed. */
static enum gs_status copy_fields(struct rctx *c, json_t *root, json_t *chat)
{
    static const char *const same[] = {"model", "temperature", "top_p", "stream",
                                       "parallel_tool_calls"};
    for (size_t i = 0; i < GS_ARRAY_LEN(same); i++) {
        json_t *v = json_object_get(root, same[i]);
        if (v && json_object_set(chat, same[i], v))
            return gs_srv_refuse_nomem(&c->r);
    }
    json_t *mt = json_object_get(root, "max_output_tokens");
    if (mt && json_object_set(chat, "max_tokens", mt))
        return gs_srv_refuse_nomem(&c->r);
    return GS_OK;
}

/* The settings the response object repeats, as the request gave them or their defaults. */
static json_t *echo(json_t *root, const struct gs_srv_gen *g)
{
    static const char *const keys[] = {"instructions", "previous_response_id", "max_output_tokens"};
    json_t *e = json_object();
    for (size_t i = 0; e && i < GS_ARRAY_LEN(keys); i++) {
        json_t *v = json_object_get(root, keys[i]);
        json_object_set(e, keys[i], v ? v : json_null());
    }
    json_t *tools = json_object_get(root, "tools"), *tc = json_object_get(root, "tool_choice");
    json_t *text = json_object_get(root, "text");
    if (e && (json_object_set_new(e, "tools",
                                  json_is_array(tools) ? json_incref(tools) : json_array()) ||
              json_object_set_new(e, "tool_choice", tc ? json_incref(tc) : json_string("auto")) ||
              json_object_set_new(e, "text",
                                  json_object_get(text, "format")
                                      ? json_incref(text)
                                      : json_pack("{s:{s:s}}", "format", "type", "text")) ||
              json_object_set_new(e, "temperature", json_real(g->sp.temperature)) ||
              json_object_set_new(e, "top_p", json_real(g->sp.top_p)))) {
        json_decref(e);
        e = NULL;
    }
    return e;
}

/* Chat's spelling of a field back into the Responses spelling; longest first. */
static const char *const spelling[][2] = {
    {"response_format.json_schema", "text.format"},
    {"response_format", "text.format"},
    {"tool_choice.function.name", "tool_choice.name"},
    {"].function.", "]."},
    {"max_tokens", "max_output_tokens"},
    {"messages", "input"},
};

static enum gs_status responses_root(struct rctx *c, json_t *root, const json_t *prior,
                                     const struct gs_srv_parse_limits *lim, struct gs_srv_gen *g)
{
    enum gs_status st;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        if (!listed(key, fields, GS_ARRAY_LEN(fields)))
            return gs_srv_refuse(
                &c->r, key, "'%.64s': graphserve does not implement this field; remove it", key);
    }
    json_t *store = json_object_get(root, "store");
    if (store && !json_is_null(store) && !json_is_boolean(store))
        return gs_srv_refuse(&c->r, "store", "'store' must be a boolean");
    g->store = json_is_true(store);
    json_t *chat = json_object(), *msgs = json_array();
    if (!chat || !msgs || json_object_set_new(chat, "messages", msgs)) {
        json_decref(chat);
        return gs_srv_refuse_nomem(&c->r);
    }
    json_t *ins = json_object_get(root, "instructions");
    if (ins && !json_is_null(ins) && !json_is_string(ins))
        st = gs_srv_refuse(&c->r, "instructions", "'instructions' must be a string");
    else if (json_is_string(ins) && json_string_length(ins) &&
             json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "system", "content", ins)))
        st = gs_srv_refuse_nomem(&c->r);
    else
        st = GS_OK;
    came_from(c, msgs, "instructions");
    if (st == GS_OK && prior && json_array_extend(msgs, (json_t *)prior))
        st = gs_srv_refuse_nomem(&c->r);
    came_from(c, msgs, "previous_response_id");
    size_t n_sys = json_array_size(msgs) - (prior ? json_array_size(prior) : 0);
    if (st == GS_OK)
        st = parse_input(c, json_object_get(root, "input"), msgs);
    json_t *conv = NULL;
    if (st == GS_OK && g->store) {
        /* What a later previous_response_id continues: all but the instructions. */
        conv = json_array();
        for (size_t i = n_sys; conv && i < json_array_size(msgs); i++)
            if (json_array_append(conv, json_array_get(msgs, i))) {
                json_decref(conv);
                conv = NULL;
            }
        if (!conv)
            st = gs_srv_refuse_nomem(&c->r);
    }
    if (st == GS_OK)
        st = parse_text(c, json_object_get(root, "text"), chat);
    if (st == GS_OK)
        st = parse_tools(c, root, chat);
    if (st == GS_OK)
        st = copy_fields(c, root, chat);
    char *body = st == GS_OK ? json_dumps(chat, JSON_COMPACT) : NULL;
    json_decref(chat);
    if (st != GS_OK || !body) {
        json_decref(conv);
        return st != GS_OK ? st : gs_srv_refuse_nomem(&c->r);
    }
    st = gs_srv_gen_parse(body, strlen(body), true, lim, g, c->r.param, c->r.param_cap, c->r.err);
    free(body); /* jansson's allocator */
    g->store = json_is_true(store);
    g->resp_conv = conv;
    if (st == GS_OK && !(g->resp_echo = echo(root, g)))
        st = gs_srv_refuse_nomem(&c->r);
    /* The Responses answer has no reasoning_content beside its text: a thinking block
     * stays in output_text rather than being dropped. */
    g->reasoning_inline = true;
    if (st != GS_OK) {
        gs_srv_respell(c->r.param, c->r.param_cap, spelling, GS_ARRAY_LEN(spelling), c->origin);
        gs_srv_respell(c->r.err->msg, sizeof(c->r.err->msg), spelling, GS_ARRAY_LEN(spelling),
                       c->origin);
    }
    return st;
}

enum gs_status gs_srv_responses_parse(const char *body, size_t len, const json_t *prior,
                                      const struct gs_srv_parse_limits *lim, struct gs_srv_gen *out,
                                      char *param, size_t param_cap, struct gs_err *err)
{
    struct rctx c = {{param, param_cap, err}, NULL};
    *out = (struct gs_srv_gen){.chat = true, .n = 1};
    gs_sample_params_init(&out->sp);
    if (param_cap)
        param[0] = '\0';
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return gs_srv_refuse(&c.r, "", "malformed JSON at line %d, column %d: %s", je.line,
                             je.column, je.text);
    c.origin = json_array(); /* NULL (out of memory): refusals keep chat's indexes */
    enum gs_status st = json_is_object(root)
                            ? responses_root(&c, root, prior, lim, out)
                            : gs_srv_refuse(&c.r, "", "the request body must be a JSON object");
    json_decref(root);
    json_decref(c.origin);
    return st;
}
