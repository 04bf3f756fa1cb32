/*
 * server/messages_body.c - a POST /v1/messages body (Anthropic's Messages API), and
 * its count_tokens sibling, read into the same struct gs_srv_gen as a chat, so that it
 * renders, tokenizes and generates exactly as /v1/chat/completions does. The
 * conversation is rewritten into chat's shape as it is checked: "system" becomes the
 * first message, tool_use blocks an assistant's tool_calls, each tool_result block a
 * "tool" message, and a final assistant message the prefill the answer continues.
 * Custom tools and tool_choice are rewritten into chat's spelling and go through
 * gs_srv_tools_parse (tools.c): one set of checks, one grammar, one call reader. A
 * refusal from tools.c is given back in Anthropic's spelling of the field.
 *
 * Unlike OpenAI's routes, every field is either implemented or refused: a client that
 * sends "thinking" or an image block must learn that graphserve did not honour it,
 * not get an answer that silently lacks it.
 */
#include "server/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mctx {
    struct gs_srv_refusal r; /* where refusals go */
    json_t *chat;            /* the conversation in chat's shape; owned */
    json_t *origin;          /* for each chat message, the field it came from; owned */
};

/* What /v1/messages reads; count_tokens reads the first n_count_fields. */
static const char *const messages_fields[] = {
    "model",      "messages",       "system",      "tools", "tool_choice",
    "max_tokens", "stop_sequences", "temperature", "top_p", "top_k",
    "stream",     "metadata",
};
enum { n_count_fields = 5 };

static enum gs_status messages_refuse_unread(const struct gs_srv_refusal *c, json_t *root,
                                             bool count_only)
{
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        size_t n = count_only ? n_count_fields : GS_ARRAY_LEN(messages_fields);
        bool known = false;
        for (size_t k = 0; k < n && !known; k++)
            known = !strcmp(key, messages_fields[k]);
        if (!known)
            return gs_srv_refuse(c, key,
                                 "'%.64s': graphserve does not implement this field%s; remove it",
                                 key, count_only ? " on count_tokens" : "");
    }
    return GS_OK;
}

/* cache_control on a block: {"type":"ephemeral"} with an optional "ttl". Accepted
 * because it is honoured without being asked: the prefix cache keeps every prompt's
 * full pages for the requests after it. */
static enum gs_status block_cache_control(const struct gs_srv_refusal *c, json_t *cc,
                                          const char *param)
{
    json_t *type = json_object_get(cc, "type"), *ttl = json_object_get(cc, "ttl");
    if (!json_is_object(cc) || !json_is_string(type) ||
        strcmp(json_string_value(type), "ephemeral") || (ttl && !json_is_string(ttl)) ||
        json_object_size(cc) > 1 + (ttl != NULL))
        return gs_srv_refuse(c, param, "'%s.cache_control' must be {\"type\":\"ephemeral\"}",
                             param);
    return GS_OK;
}

/* A content (or system) value: a string, or text blocks joined as the chat route joins
 * text parts. Any other block type is refused by name, but tool_use and tool_result
 * blocks are passed over with skip_tool_blocks (message_blocks reads them). */
static enum gs_status messages_text(const struct gs_srv_refusal *c, json_t *v, const char *param,
                                    bool skip_tool_blocks, char **out)
{
    if (json_is_string(v)) {
        *out = gs_strndup(json_string_value(v), json_string_length(v));
        return *out ? GS_OK : gs_srv_refuse_nomem(c);
    }
    if (!json_is_array(v))
        return gs_srv_refuse(c, param, "'%s' must be a string or an array of text blocks", param);
    struct gs_srv_buf b = {0};
    size_t k;
    json_t *block;
    enum gs_status st = GS_OK;
    json_array_foreach(v, k, block)
    {
        char bp[64];
        snprintf(bp, sizeof(bp), "%s[%zu]", param, k);
        json_t *type = json_object_get(block, "type"), *text = json_object_get(block, "text");
        if (!json_is_object(block) || !json_is_string(type)) {
            st = gs_srv_refuse(c, bp, "'%s' must be a content block with a 'type'", bp);
            break;
        }
        if (skip_tool_blocks && (!strcmp(json_string_value(type), "tool_use") ||
                                 !strcmp(json_string_value(type), "tool_result")))
            continue; /* read by message_blocks */
        if (strcmp(json_string_value(type), "text")) {
            st = gs_srv_refuse(
                c, bp,
                "'%s': content blocks of type '%.40s' are not supported by graphserve; "
                "only 'text'",
                bp, json_string_value(type));
            break;
        }
        const char *key;
        json_t *f;
        json_object_foreach(block, key, f)
        {
            if (!strcmp(key, "cache_control"))
                st = block_cache_control(c, f, bp);
            else if (strcmp(key, "type") && strcmp(key, "text"))
                st = gs_srv_refuse(c, bp, "'%s.%.40s': graphserve does not implement this field",
                                   bp, key);
            if (st != GS_OK)
                break;
        }
        if (st == GS_OK && !json_is_string(text))
            st = gs_srv_refuse(c, bp, "'%s.text' must be a string", bp);
        if (st != GS_OK)
            break;
        gs_srv_buf_add(&b, json_string_value(text), json_string_length(text));
    }
    gs_srv_buf_add(&b, "", 0);
    if (st == GS_OK && b.failed)
        st = gs_srv_refuse_nomem(c);
    if (st != GS_OK) {
        gs_srv_buf_free(&b);
        return st;
    }
    *out = b.p;
    return GS_OK;
}

/* The final assistant message: the answer continues it. Anthropic refuses one that ends
 * in whitespace, and so does graphserve: the tokenizer would end the prompt in a space
 * that the model's next word normally carries. */
static enum gs_status messages_prefill(const struct gs_srv_refusal *c, size_t i, char *text,
                                       struct gs_srv_gen *g)
{
    size_t n = strlen(text);
    if (n && strchr(" \t\n\r", text[n - 1])) {
        gs_free(text);
        char param[48];
        snprintf(param, sizeof(param), "messages[%zu].content", i);
        return gs_srv_refuse(c, param,
                             "'%s': the final assistant content cannot end with whitespace", param);
    }
    if (n)
        g->prefill = text;
    else
        gs_free(text);
    return GS_OK;
}

/* Appends chat message m (reference taken) as coming from where. */
static enum gs_status chat_add(struct mctx *mc, json_t *m, const char *where)
{
    if (!m || json_array_append_new(mc->chat, m) ||
        json_array_append_new(mc->origin, json_string(where)))
        return gs_srv_refuse_nomem(&mc->r);
    return GS_OK;
}

/* The keys a block may have beside "type": the rest is refused by name. */
static enum gs_status block_keys(const struct gs_srv_refusal *c, json_t *block, const char *bp,
                                 const char *const *keys, size_t n)
{
    const char *key;
    json_t *f;
    json_object_foreach(block, key, f)
    {
        bool known = !strcmp(key, "type");
        for (size_t k = 0; k < n && !known; k++)
            known = !strcmp(key, keys[k]);
        enum gs_status st =
            !known ? gs_srv_refuse(c, bp, "'%s.%.40s': graphserve does not implement this field",
                                   bp, key)
            : !strcmp(key, "cache_control") ? block_cache_control(c, f, bp)
                                            : GS_OK;
        if (st != GS_OK)
            return st;
    }
    return GS_OK;
}

/* A tool_use block of an assistant message, as a chat tool call appended to calls. */
static enum gs_status tool_use(const struct gs_srv_refusal *c, json_t *block, const char *bp,
                               json_t *calls)
{
    static const char *const keys[] = {"id", "name", "input", "cache_control"};
    enum gs_status st = block_keys(c, block, bp, keys, GS_ARRAY_LEN(keys));
    if (st != GS_OK)
        return st;
    json_t *id = json_object_get(block, "id"), *name = json_object_get(block, "name");
    json_t *input = json_object_get(block, "input");
    char p[96];
    snprintf(p, sizeof(p), "%s.id", bp);
    if (!json_is_string(id) || !json_string_length(id))
        return gs_srv_refuse(c, p, "'%s' must be a non-empty string", p);
    snprintf(p, sizeof(p), "%s.name", bp);
    if (!json_is_string(name) || !gs_srv_name_ok(json_string_value(name)))
        return gs_srv_refuse(c, p, "'%s' must be 1 to 64 of a-z, A-Z, 0-9, '_' and '-'", p);
    snprintf(p, sizeof(p), "%s.input", bp);
    if (!json_is_object(input))
        return gs_srv_refuse(c, p, "'%s' must be an object", p);
    char *args = json_dumps(input, JSON_COMPACT);
    json_t *call = args ? json_pack("{s:O,s:s,s:{s:O,s:s}}", "id", id, "type", "function",
                                    "function", "name", name, "arguments", args)
                        : NULL;
    free(args); /* jansson's allocator */
    if (!call || json_array_append_new(calls, call))
        return gs_srv_refuse_nomem(c);
    return GS_OK;
}

/* Whether id is the id of one of the calls of the assistant message before chat's end. */
static bool answers_a_call(json_t *chat, const char *id)
{
    for (size_t i = json_array_size(chat); i-- > 0;) {
        json_t *m = json_array_get(chat, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        if (role && !strcmp(role, "tool"))
            continue;
        size_t k;
        json_t *call;
        json_array_foreach(json_object_get(m, "tool_calls"), k, call)
        {
            if (!strcmp(json_string_value(json_object_get(call, "id")), id))
                return true;
        }
        return false;
    }
    return false;
}

/* A tool_result block of a user message, as a chat "tool" message. An error result
 * says so in the text the model reads, since chat's tool role has no flag for it. */
static enum gs_status tool_result(struct mctx *mc, json_t *block, const char *bp)
{
    static const char *const keys[] = {"tool_use_id", "content", "is_error", "cache_control"};
    const struct gs_srv_refusal *c = &mc->r;
    enum gs_status st = block_keys(c, block, bp, keys, GS_ARRAY_LEN(keys));
    if (st != GS_OK)
        return st;
    json_t *id = json_object_get(block, "tool_use_id"), *err = json_object_get(block, "is_error");
    json_t *content = json_object_get(block, "content");
    char p[96];
    snprintf(p, sizeof(p), "%s.tool_use_id", bp);
    if (!json_is_string(id))
        return gs_srv_refuse(c, p, "'%s' must be a string", p);
    if (!answers_a_call(mc->chat, json_string_value(id)))
        return gs_srv_refuse(c, p,
                             "'%s': '%.64s' is not the id of a tool_use block in the assistant "
                             "message before it",
                             p, json_string_value(id));
    snprintf(p, sizeof(p), "%s.is_error", bp);
    if (err && !json_is_boolean(err))
        return gs_srv_refuse(c, p, "'%s' must be a boolean", p);
    snprintf(p, sizeof(p), "%s.content", bp);
    char *text = NULL;
    if (content && !json_is_null(content) && (st = messages_text(c, content, p, false, &text)) != GS_OK)
        return st;
    struct gs_srv_buf b = {0};
    gs_srv_buf_adds(&b, json_is_true(err) ? "Error: " : "");
    gs_srv_buf_adds(&b, text ? text : "");
    gs_free(text);
    st = b.failed ? gs_srv_refuse_nomem(c)
                  : chat_add(mc,
                             json_pack("{s:s,s:O,s:s%}", "role", "tool", "tool_call_id", id,
                                       "content", b.p ? b.p : "", b.len),
                             bp);
    gs_srv_buf_free(&b);
    return st;
}

/*
 * One message's content into chat messages: a string, or blocks. An assistant's text and
 * tool_use blocks make one message with tool_calls; a user's tool_result blocks (which
 * come first, as Anthropic requires) each make a tool message, and the text after them a
 * user message. Tool blocks need the Jinja template (lim_jinja), which renders them.
 */
static enum gs_status message_blocks(struct mctx *mc, json_t *content, const char *param,
                                     const char *role, bool jinja, char **text_out,
                                     json_t **calls_out)
{
    const struct gs_srv_refusal *c = &mc->r;
    bool assistant = !strcmp(role, "assistant");
    if (!json_is_array(content))
        return messages_text(c, content, param, false, text_out);
    json_t *calls = json_array();
    enum gs_status st = calls ? GS_OK : gs_srv_refuse_nomem(c);
    bool text_seen = false;
    size_t k;
    json_t *block;
    json_array_foreach(content, k, block)
    {
        if (st != GS_OK)
            break;
        char bp[80]; /* param (at most 47 bytes) and [k] */
        snprintf(bp, sizeof(bp), "%s[%zu]", param, k);
        const char *type = json_string_value(json_object_get(block, "type"));
        bool use = type && !strcmp(type, "tool_use"), result = type && !strcmp(type, "tool_result");
        if ((use || result) && !jinja)
            st = gs_srv_refuse(c, bp,
                               "'%s': %s blocks need the model's Jinja chat template; this "
                               "server renders chats with a built-in format",
                               bp, type);
        else if (use && !assistant)
            st = gs_srv_refuse(c, bp, "'%s': tool_use blocks are for assistant messages", bp);
        else if (result && assistant)
            st = gs_srv_refuse(c, bp, "'%s': tool_result blocks are for user messages", bp);
        else if (result && text_seen)
            st = gs_srv_refuse(c, bp,
                               "'%s': tool_result blocks must come before any text in the "
                               "message",
                               bp);
        else if (use)
            st = tool_use(c, block, bp, calls);
        else if (result)
            st = tool_result(mc, block, bp);
        else
            text_seen = true;
    }
    if (st == GS_OK)
        st = messages_text(c, content, param, true, text_out);
    if (st == GS_OK && json_array_size(calls))
        *calls_out = calls;
    else
        json_decref(calls);
    return st;
}

static enum gs_status messages_conversation(struct mctx *mc, json_t *root,
                                            const struct gs_srv_parse_limits *lim,
                                            struct gs_srv_gen *g)
{
    const struct gs_srv_refusal *c = &mc->r;
    json_t *msgs = json_object_get(root, "messages"), *system = json_object_get(root, "system");
    if (!msgs)
        return gs_srv_refuse(c, "messages", "'messages' is required");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return gs_srv_refuse(c, "messages", "'messages' must be a non-empty array");
    if (!(mc->chat = json_array()) || !(mc->origin = json_array()))
        return gs_srv_refuse_nomem(c);
    size_t n = json_array_size(msgs);
    enum gs_status st;
    char *text;
    if (system && !json_is_null(system)) {
        if ((st = messages_text(c, system, "system", false, &text)) != GS_OK)
            return st;
        st = *text ? chat_add(mc, json_pack("{s:s,s:s}", "role", "system", "content", text),
                              "system")
                   : GS_OK;
        gs_free(text);
        if (st != GS_OK)
            return st;
    }
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m)
    {
        char param[48];
        snprintf(param, sizeof(param), "messages[%zu]", i);
        if (!json_is_object(m))
            return gs_srv_refuse(c, param, "'%s' must be an object with 'role' and 'content'",
                                 param);
        const char *key;
        json_t *f;
        json_object_foreach(m, key, f)
        {
            if (strcmp(key, "role") && strcmp(key, "content"))
                return gs_srv_refuse(
                    c, param, "'%s.%.40s': graphserve does not implement this field", param, key);
        }
        json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
        const char *r = json_is_string(role) ? json_string_value(role) : "";
        snprintf(param, sizeof(param), "messages[%zu].role", i);
        if (strcmp(r, "user") && strcmp(r, "assistant"))
            return gs_srv_refuse(c, param, "'%s' must be 'user' or 'assistant'", param);
        snprintf(param, sizeof(param), "messages[%zu].content", i);
        if (!content)
            return gs_srv_refuse(c, param, "'%s' is required", param);
        json_t *calls = NULL;
        size_t n_before = json_array_size(mc->chat);
        if ((st = message_blocks(mc, content, param, r, lim->jinja, &text, &calls)) != GS_OK)
            return st;
        if (i + 1 == n && !strcmp(r, "assistant") && !calls) {
            if ((st = messages_prefill(c, i, text, g)) != GS_OK)
                return st;
            continue;
        }
        if (calls && i + 1 == n) {
            json_decref(calls);
            gs_free(text);
            return gs_srv_refuse(c, param,
                                 "'%s': the final assistant message cannot hold tool_use blocks; "
                                 "send their results in a user message after it",
                                 param);
        }
        /* A user message of tool results alone adds no user turn. An assistant turn of
         * tool_use blocks alone has "" as its content, the text it had: templates that
         * search the content (Qwen 3's "'</think>' in message.content") cannot take null. */
        bool results_only = !calls && !*text && json_array_size(mc->chat) > n_before;
        json_t *cm = results_only ? NULL
                     : calls      ? json_pack("{s:s,s:s,s:o}", "role", r, "content", text,
                                              "tool_calls", calls)
                                  : json_pack("{s:s,s:s}", "role", r, "content", text);
        gs_free(text);
        if (!results_only && (st = chat_add(mc, cm, param)) != GS_OK)
            return st;
    }
    /* The messages as the built-in formats read them, and as the template sees them. */
    size_t n_chat = json_array_size(mc->chat);
    if (n_chat == 0)
        return gs_srv_refuse(c, "messages",
                             "'messages' has nothing before its final assistant message");
    if (!(g->msgs = gs_calloc(n_chat, sizeof(*g->msgs))))
        return gs_srv_refuse_nomem(c);
    json_array_foreach(mc->chat, i, m)
    {
        const char *t = json_string_value(json_object_get(m, "content"));
        g->msgs[i].role = gs_strdup(json_string_value(json_object_get(m, "role")));
        g->msgs[i].content = gs_strdup(t ? t : "");
        g->n_msgs = i + 1;
        if (!g->msgs[i].role || !g->msgs[i].content)
            return gs_srv_refuse_nomem(c);
    }
    if (lim->jinja)
        g->messages_json = json_incref(mc->chat);
    return GS_OK;
}

/* ---- tools ---------------------------------------------------------------------------------- */

/* Custom tools ({"name","description","input_schema"}) as chat's function tools. */
static enum gs_status rewrite_tools(const struct gs_srv_refusal *c, json_t *tools, json_t *out)
{
    static const char *const keys[] = {"type", "name", "description", "input_schema",
                                       "cache_control"};
    if (!json_is_array(tools))
        return gs_srv_refuse(c, "tools", "'tools' must be an array of tool definitions");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t)
    {
        char where[32], p[64];
        snprintf(where, sizeof(where), "tools[%zu]", i);
        if (!json_is_object(t))
            return gs_srv_refuse(c, where, "'%s' must be an object", where);
        const char *type = json_string_value(json_object_get(t, "type"));
        snprintf(p, sizeof(p), "%s.type", where);
        if (json_object_get(t, "type") && (!type || strcmp(type, "custom")))
            return gs_srv_refuse(c, p,
                                 "'%s': '%.40s' tools run on Anthropic's servers; graphserve "
                                 "supports custom tools (no type, or \"custom\")",
                                 p, type ? type : "?");
        const char *k;
        json_t *v;
        json_object_foreach(t, k, v)
        {
            bool known = false;
            for (size_t j = 0; j < GS_ARRAY_LEN(keys) && !known; j++)
                known = !strcmp(k, keys[j]);
            enum gs_status st =
                !known ? gs_srv_refuse(c, where,
                                       "'%s.%.40s': graphserve does not implement this field",
                                       where, k)
                : !strcmp(k, "cache_control") ? block_cache_control(c, v, where)
                                              : GS_OK;
            if (st != GS_OK)
                return st;
        }
        json_t *schema = json_object_get(t, "input_schema");
        snprintf(p, sizeof(p), "%s.input_schema", where);
        if (!schema)
            return gs_srv_refuse(c, p, "'%s' is required", p);
        json_t *fn = json_pack("{s:O*,s:O*,s:O}", "name", json_object_get(t, "name"),
                               "description", json_object_get(t, "description"), "parameters",
                               schema);
        if (!fn || json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function",
                                                        "function", fn)))
            return gs_srv_refuse_nomem(c);
    }
    return GS_OK;
}

/* tool_choice {"type": "auto" | "any" | "tool" | "none", "name", "disable_parallel_tool_use"}
 * as chat's tool_choice and parallel_tool_calls. */
static enum gs_status rewrite_choice(const struct gs_srv_refusal *c, json_t *tc, json_t *chat)
{
    static const char *const keys[] = {"type", "name", "disable_parallel_tool_use"};
    if (!tc || json_is_null(tc))
        return GS_OK;
    if (!json_is_object(tc))
        return gs_srv_refuse(c, "tool_choice", "'tool_choice' must be an object with a 'type'");
    enum gs_status st = gs_srv_only_keys(c, tc, "tool_choice", keys, GS_ARRAY_LEN(keys));
    if (st != GS_OK)
        return st;
    const char *type = json_string_value(json_object_get(tc, "type"));
    json_t *name = json_object_get(tc, "name"), *dp = json_object_get(tc, "disable_parallel_tool_use");
    static const char *const types[][2] = {
        {"auto", "auto"}, {"any", "required"}, {"tool", NULL}, {"none", "none"}};
    size_t k = 0;
    while (type && k < GS_ARRAY_LEN(types) && strcmp(type, types[k][0]))
        k++;
    if (!type || k == GS_ARRAY_LEN(types))
        return gs_srv_refuse(c, "tool_choice.type",
                             "'tool_choice.type' must be \"auto\", \"any\", \"tool\" or \"none\"");
    if ((name != NULL) != !types[k][1])
        return gs_srv_refuse(c, "tool_choice.name",
                             types[k][1] ? "'tool_choice.name' is only for \"type\": \"tool\""
                                         : "'tool_choice.name' is required for \"type\": \"tool\"");
    if (dp && (!json_is_boolean(dp) || !strcmp(type, "none")))
        return gs_srv_refuse(c, "tool_choice.disable_parallel_tool_use",
                             "'tool_choice.disable_parallel_tool_use' must be a boolean, and "
                             "not with \"type\": \"none\"");
    json_t *v = types[k][1] ? json_string(types[k][1])
                            : json_pack("{s:s,s:{s:O}}", "type", "function", "function", "name",
                                        name);
    if (!v || json_object_set_new(chat, "tool_choice", v) ||
        (dp && json_object_set_new(chat, "parallel_tool_calls", json_boolean(!json_is_true(dp)))))
        return gs_srv_refuse_nomem(c);
    return GS_OK;
}

/* Chat's spelling of a tool field back into Anthropic's; longest first. */
static const char *const spelling[][2] = {
    {"tool_choice.function.name", "tool_choice.name"},
    {"].function.parameters", "].input_schema"},
    {"].function.", "]."},
    {"parallel_tool_calls", "tool_choice.disable_parallel_tool_use"},
};

/* tools and tool_choice, through tools.c on the chat-shaped conversation; also the
 * check of the conversation's calls when there are no tools. */
static enum gs_status messages_tools(struct mctx *mc, json_t *root,
                                     const struct gs_srv_parse_limits *lim, struct gs_srv_gen *g)
{
    const struct gs_srv_refusal *c = &mc->r;
    json_t *tools = json_object_get(root, "tools"), *tc = json_object_get(root, "tool_choice");
    json_t *chat = json_pack("{s:O}", "messages", mc->chat), *list = json_array();
    enum gs_status st = chat && list ? GS_OK : gs_srv_refuse_nomem(c);
    if (st == GS_OK && tools && !json_is_null(tools)) {
        st = rewrite_tools(c, tools, list);
        if (st == GS_OK && json_object_set(chat, "tools", list))
            st = gs_srv_refuse_nomem(c);
        if (st == GS_OK && lim->jinja)
            g->tools_json = json_incref(list);
    }
    json_decref(list);
    if (st == GS_OK)
        st = rewrite_choice(c, tc, chat);
    if (st == GS_OK && (st = gs_srv_tools_parse(chat, lim, g, c->param, c->param_cap, c->err))) {
        gs_srv_respell(c->param, c->param_cap, spelling, GS_ARRAY_LEN(spelling), mc->origin);
        gs_srv_respell(c->err->msg, sizeof(c->err->msg), spelling, GS_ARRAY_LEN(spelling),
                       mc->origin);
    }
    json_decref(chat);
    if (st == GS_OK && g->prefill && g->tool_choice != GS_SRV_TOOL_CHOICE_NONE &&
        g->tool_choice != GS_SRV_TOOL_CHOICE_AUTO)
        return gs_srv_refuse(c, "tool_choice",
                             "a final assistant message (a prefill) cannot be combined with "
                             "'tool_choice' \"any\" or \"tool\"");
    return st;
}

/* "metadata": {"user_id": string or null}, nothing else. */
static enum gs_status messages_metadata(const struct gs_srv_refusal *c, json_t *root)
{
    json_t *md = json_object_get(root, "metadata");
    if (!md || json_is_null(md))
        return GS_OK;
    if (!json_is_object(md))
        return gs_srv_refuse(c, "metadata", "'metadata' must be an object");
    const char *key;
    json_t *v;
    json_object_foreach(md, key, v)
    {
        if (strcmp(key, "user_id"))
            return gs_srv_refuse(c, "metadata",
                                 "'metadata.%.40s': graphserve does not implement this field", key);
        if (!json_is_string(v) && !json_is_null(v))
            return gs_srv_refuse(c, "metadata", "'metadata.user_id' must be a string");
    }
    return GS_OK;
}

static enum gs_status messages_root(struct mctx *mc, json_t *root,
                                    const struct gs_srv_parse_limits *lim, struct gs_srv_gen *g)
{
    const struct gs_srv_refusal *c = &mc->r;
    enum gs_status st;
    int64_t i;
    bool has;
    double d;
    if ((st = messages_refuse_unread(c, root, g->count_only)) != GS_OK)
        return st;
    json_t *model = json_object_get(root, "model");
    if (model && !json_is_null(model)) {
        if (!json_is_string(model))
            return gs_srv_refuse(c, "model", "'model' must be a string");
        if (!(g->model = gs_strdup(json_string_value(model))))
            return gs_srv_refuse_nomem(c);
    }
    if ((st = messages_conversation(mc, root, lim, g)) != GS_OK ||
        (st = messages_tools(mc, root, lim, g)) != GS_OK || g->count_only)
        return st;
    if ((st = gs_srv_get_int(c, root, "max_tokens", 1, INT32_MAX, &i, &has)) != GS_OK)
        return st;
    if (!has)
        return gs_srv_refuse(c, "max_tokens", "'max_tokens' is required");
    if (i > lim->max_tokens)
        return gs_srv_refuse(c, "max_tokens", "'max_tokens' is %lld; this server allows at most %u",
                             (long long)i, lim->max_tokens);
    g->max_tokens = (uint32_t)i;
    /* Anthropic's temperature is [0, 1]; top_p and top_k as OpenAI's. */
    struct gs_sample_params *sp = &g->sp;
    d = sp->temperature;
    if ((st = gs_srv_get_num(c, root, "temperature", 0, 1, &d, NULL)) != GS_OK)
        return st;
    sp->temperature = (float)d;
    d = sp->top_p;
    if ((st = gs_srv_get_num(c, root, "top_p", 0, 1, &d, NULL)) != GS_OK)
        return st;
    if (d <= 0)
        return gs_srv_refuse(c, "top_p", "'top_p' must be greater than 0");
    sp->top_p = (float)d;
    if ((st = gs_srv_get_int(c, root, "top_k", 0, 1 << 30, &i, &has)) != GS_OK)
        return st;
    if (has)
        sp->top_k = (int32_t)i;
    if ((st = gs_srv_get_bool(c, root, "stream", &g->stream)) != GS_OK ||
        (st = gs_srv_get_stop(c, root, "stop_sequences", false, lim, g)) != GS_OK ||
        (st = messages_metadata(c, root)) != GS_OK)
        return st;
    struct gs_err e;
    if (gs_sample_params_check(sp, (int32_t)lim->n_vocab, &e) != GS_OK)
        return gs_srv_refuse(c, "", "%s", e.msg);
    return GS_OK;
}

enum gs_status gs_srv_messages_parse(const char *body, size_t len, bool count_only,
                                     const struct gs_srv_parse_limits *lim, struct gs_srv_gen *out,
                                     char *param, size_t param_cap, struct gs_err *err)
{
    struct mctx c = {{param, param_cap, err}, NULL, NULL};
    *out = (struct gs_srv_gen){
        .chat = true, .api = GS_SRV_API_ANTHROPIC, .n = 1, .count_only = count_only};
    gs_sample_params_init(&out->sp);
    if (param_cap)
        param[0] = '\0';
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return gs_srv_refuse(&c.r, "", "malformed JSON at line %d, column %d: %s", je.line, je.column,
                             je.text);
    enum gs_status st = json_is_object(root)
                            ? messages_root(&c, root, lim, out)
                            : gs_srv_refuse(&c.r, "", "the request body must be a JSON object");
    json_decref(root);
    json_decref(c.chat);
    json_decref(c.origin);
    return st;
}
