/*
 * server/request.c - a /v1/chat/completions, /v1/completions or /v1/messages
 * body, parsed with jansson and checked field by field into struct gs_srv_gen.
 * Every refusal names the field as the client spelled it; nothing unchecked
 * reaches the scheduler. Unknown fields are accepted and listed on OpenAI's
 * routes; Anthropic's route refuses them (see "the Messages API" below).
 */
#include "server/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A message's content: a string, or an array of {"type":"text","text":...}
 * parts joined. */
static enum gs_status message_content(const struct gs_srv_refusal *c, json_t *v, size_t i,
                                      char **out)
{
    char param[48];
    snprintf(param, sizeof(param), "messages[%zu].content", i);
    if (json_is_string(v)) {
        *out = gs_strndup(json_string_value(v), json_string_length(v));
        return *out ? GS_OK : gs_srv_refuse_nomem(c);
    }
    if (json_is_null(v)) {
        *out = gs_strdup("");
        return *out ? GS_OK : gs_srv_refuse_nomem(c);
    }
    if (!json_is_array(v))
        return gs_srv_refuse(c, param, "'%s' must be a string or an array of text parts", param);
    struct gs_srv_buf b = {0};
    size_t k;
    json_t *part;
    json_array_foreach(v, k, part)
    {
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_string(type) || strcmp(json_string_value(type), "text") ||
            !json_is_string(text)) {
            gs_srv_buf_free(&b);
            return gs_srv_refuse(c, param, "'%s[%zu]' must be {\"type\":\"text\",\"text\":string}",
                                 param, k);
        }
        gs_srv_buf_add(&b, json_string_value(text), json_string_length(text));
    }
    gs_srv_buf_add(&b, "", 0);
    if (b.failed) {
        gs_srv_buf_free(&b);
        return gs_srv_refuse_nomem(c);
    }
    *out = b.p;
    return GS_OK;
}

static enum gs_status parse_messages(const struct gs_srv_refusal *c, json_t *root, bool jinja,
                                     struct gs_srv_gen *g)
{
    json_t *msgs = json_object_get(root, "messages");
    if (!msgs)
        return gs_srv_refuse(c, "messages", "'messages' is required");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return gs_srv_refuse(c, "messages", "'messages' must be a non-empty array");
    g->msgs = gs_calloc(json_array_size(msgs), sizeof(*g->msgs));
    if (!g->msgs)
        return gs_srv_refuse_nomem(c);
    size_t i;
    json_t *m;
    bool null_content = false;
    json_array_foreach(msgs, i, m)
    {
        char param[48];
        snprintf(param, sizeof(param), "messages[%zu].role", i);
        json_t *role = json_object_get(m, "role");
        if (!json_is_object(m) || !json_is_string(role))
            return gs_srv_refuse(c, param, "'%s' must be a string", param);
        const char *r = json_string_value(role);
        static const char *const roles[] = {"system", "user", "assistant", "tool", "developer"};
        bool known = false;
        for (size_t k = 0; k < GS_ARRAY_LEN(roles); k++)
            known = known || !strcmp(r, roles[k]);
        if (!known)
            return gs_srv_refuse(
                c, param, "'%s' must be one of system, user, assistant, tool, developer", param);
        g->msgs[i].role = gs_strdup(!strcmp(r, "developer") ? "system" : r);
        g->n_msgs = i + 1;
        if (!g->msgs[i].role)
            return gs_srv_refuse_nomem(c);
        json_t *content = json_object_get(m, "content");
        if (jinja && (!content || json_is_null(content))) {
            /* An assistant's tool calls come with null content (the SDKs send
             * the answer back so); the template sees "" instead: templates
             * that search the content (Qwen 3's "'</think>' in
             * message.content") cannot take null, and every template that
             * tests it for truth reads "" as it reads null. */
            if (!(g->msgs[i].content = gs_strdup("")))
                return gs_srv_refuse_nomem(c);
            null_content = true;
            continue;
        }
        if (!content) {
            snprintf(param, sizeof(param), "messages[%zu].content", i);
            return gs_srv_refuse(c, param, "'%s' is required", param);
        }
        enum gs_status st = message_content(c, content, i, &g->msgs[i].content);
        if (st != GS_OK)
            return st;
    }
    if (!jinja)
        return GS_OK;
    if (!null_content) {
        g->messages_json = json_incref(msgs);
        return GS_OK;
    }
    if (!(g->messages_json = json_deep_copy(msgs)))
        return gs_srv_refuse_nomem(c);
    json_array_foreach(g->messages_json, i, m)
    {
        json_t *content = json_object_get(m, "content");
        if ((!content || json_is_null(content)) &&
            json_object_set_new(m, "content", json_string("")) != 0)
            return gs_srv_refuse_nomem(c);
    }
    return GS_OK;
}

/* tools and chat_template_kwargs, for a Jinja template. */
static enum gs_status parse_template_inputs(const struct gs_srv_refusal *c, json_t *root,
                                            struct gs_srv_gen *g)
{
    json_t *tools = json_object_get(root, "tools");
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools))
            return gs_srv_refuse(c, "tools", "'tools' must be an array");
        g->tools_json = json_incref(tools);
    }
    json_t *kw = json_object_get(root, "chat_template_kwargs");
    if (kw && !json_is_null(kw)) {
        if (!json_is_object(kw))
            return gs_srv_refuse(c, "chat_template_kwargs",
                                 "'chat_template_kwargs' must be an object");
        g->template_kwargs = json_incref(kw);
    }
    return GS_OK;
}

static enum gs_status parse_prompt(const struct gs_srv_refusal *c, json_t *root,
                                   const struct gs_srv_parse_limits *lim, struct gs_srv_gen *g)
{
    json_t *p = json_object_get(root, "prompt");
    if (!p)
        return gs_srv_refuse(c, "prompt", "'prompt' is required");
    /* A one-element list of a string or of token ids is the same prompt. */
    if (json_is_array(p) && json_array_size(p) == 1 &&
        (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0))))
        p = json_array_get(p, 0);
    if (json_is_string(p)) {
        g->prompt = gs_strndup(json_string_value(p), json_string_length(p));
        g->prompt_len = json_string_length(p);
        return g->prompt ? GS_OK : gs_srv_refuse_nomem(c);
    }
    if (!json_is_array(p) || json_array_size(p) == 0)
        return gs_srv_refuse(c, "prompt",
                             "'prompt' must be a string or a non-empty array of token ids");
    g->prompt_ids = gs_alloc_array(json_array_size(p), sizeof(*g->prompt_ids));
    if (!g->prompt_ids)
        return gs_srv_refuse_nomem(c);
    size_t i;
    json_t *v;
    json_array_foreach(p, i, v)
    {
        if (!json_is_integer(v))
            return gs_srv_refuse(c, "prompt", "'prompt[%zu]' must be a token id (an integer)", i);
        json_int_t id = json_integer_value(v);
        if (id < 0 || (uint64_t)id >= lim->n_vocab)
            return gs_srv_refuse(c, "prompt",
                                 "'prompt[%zu]': token id %lld is outside the vocabulary [0, %u)",
                                 i, (long long)id, lim->n_vocab);
        g->prompt_ids[i] = (int32_t)id;
    }
    g->n_prompt_ids = json_array_size(p);
    return GS_OK;
}

static enum gs_status parse_logit_bias(const struct gs_srv_refusal *c, json_t *root,
                                       const struct gs_srv_parse_limits *lim, struct gs_srv_gen *g)
{
    json_t *b = json_object_get(root, "logit_bias");
    if (!b || json_is_null(b))
        return GS_OK;
    if (!json_is_object(b))
        return gs_srv_refuse(c, "logit_bias", "'logit_bias' must be an object of token id to bias");
    size_t n = json_object_size(b);
    if (n > GS_SAMPLE_N_BIAS_MAX)
        return gs_srv_refuse(c, "logit_bias",
                             "'logit_bias' has %zu entries; at most %d are allowed", n,
                             GS_SAMPLE_N_BIAS_MAX);
    g->bias = gs_calloc(n ? n : 1, sizeof(*g->bias));
    if (!g->bias)
        return gs_srv_refuse_nomem(c);
    const char *key;
    json_t *v;
    size_t i = 0, n_banned = 0;
    json_object_foreach(b, key, v)
    {
        /* Plain decimal only: strtoll would also take " 1", "+1" and "01",
         * and two spellings of one id would be two entries. */
        bool decimal = key[0] >= '0' && key[0] <= '9' && (key[0] != '0' || !key[1]) &&
                       strlen(key) <= 10;
        for (const char *k = key; decimal && *k; k++)
            decimal = *k >= '0' && *k <= '9';
        long long id = decimal ? strtoll(key, NULL, 10) : -1;
        if (id < 0 || (uint64_t)id >= lim->n_vocab)
            return gs_srv_refuse(c, "logit_bias",
                                 "'logit_bias': key '%.40s' is not a token id in [0, %u)", key,
                                 lim->n_vocab);
        if (!json_is_number(v) || json_number_value(v) < -100 || json_number_value(v) > 100)
            return gs_srv_refuse(c, "logit_bias",
                                 "'logit_bias[%.40s]' must be a number in [-100, 100]", key);
        g->bias[i].token = (int32_t)id;
        /* -100 bans the token, as OpenAI describes it. */
        g->bias[i].bias = json_number_value(v) <= -100 ? -INFINITY : (float)json_number_value(v);
        n_banned += g->bias[i].bias == -INFINITY;
        i++;
    }
    /* Keys are distinct ids, so this is every token: nothing could be sampled. */
    if (n_banned >= lim->n_vocab)
        return gs_srv_refuse(
            c, "logit_bias",
            "'logit_bias' bans every one of the %u tokens; nothing could be sampled", lim->n_vocab);
    g->sp.bias = g->bias;
    g->sp.n_bias = (int32_t)i;
    return GS_OK;
}

/* Fields we read; anything else is listed in g->ignored. */
static const char *const known_fields[] = {
    "model",
    "messages",
    "prompt",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repeat_penalty",
    "repeat_last_n",
    "seed",
    "stop",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "n",
    "stream",
    "stream_options",
    "user",
    "ignore_eos",
    "echo",
    "parse_special",
    "validation",
    "response_format",
    "grammar",
    "tools", /* read by tools.c: honoured, or refused where they cannot be */
    "tool_choice",
    "parallel_tool_calls",
    "reasoning_format",
};

/* Read only when chats render through a Jinja template. */
static const char *const jinja_fields[] = {"chat_template_kwargs"};

static void list_ignored(json_t *root, bool jinja, struct gs_srv_gen *g)
{
    const char *key;
    json_t *v;
    size_t w = 0;
    json_object_foreach(root, key, v)
    {
        bool known = false;
        for (size_t k = 0; k < GS_ARRAY_LEN(known_fields) && !known; k++)
            known = !strcmp(key, known_fields[k]);
        for (size_t k = 0; jinja && g->chat && k < GS_ARRAY_LEN(jinja_fields) && !known; k++)
            known = !strcmp(key, jinja_fields[k]);
        if (known)
            continue;
        /* Header-safe names only: a comma list of printable ASCII. */
        for (const char *p = key; *p; p++)
            if (*p <= ' ' || *p > '~' || *p == ',')
                goto next;
        size_t kl = strlen(key);
        if (w + kl + 2 >= sizeof(g->ignored))
            return;
        if (w)
            g->ignored[w++] = ',';
        memcpy(g->ignored + w, key, kl);
        w += kl;
        g->ignored[w] = '\0';
    next:;
    }
}

static enum gs_status parse_sampling(const struct gs_srv_refusal *c, json_t *root,
                                     struct gs_srv_gen *g)
{
    double d;
    int64_t i;
    bool has;
    enum gs_status st;
    struct gs_sample_params *sp = &g->sp;
#define NUM(key, lo, hi, field)                                                                    \
    do {                                                                                           \
        d = sp->field;                                                                             \
        if ((st = gs_srv_get_num(c, root, key, lo, hi, &d, NULL)) != GS_OK)                               \
            return st;                                                                             \
        sp->field = (float)d;                                                                      \
    } while (0)
    NUM("temperature", 0, 2, temperature);
    NUM("top_p", 0, 1, top_p);
    NUM("min_p", 0, 1, min_p);
    NUM("presence_penalty", -2, 2, presence_penalty);
    NUM("frequency_penalty", -2, 2, frequency_penalty);
    NUM("repeat_penalty", 0.0001, 100, repeat_penalty);
#undef NUM
    if (sp->top_p <= 0)
        return gs_srv_refuse(c, "top_p", "'top_p' must be greater than 0");
    if ((st = gs_srv_get_int(c, root, "top_k", 0, 1 << 30, &i, &has)) != GS_OK)
        return st;
    if (has)
        sp->top_k = (int32_t)i;
    if ((st = gs_srv_get_int(c, root, "repeat_last_n", 0, GS_SAMPLE_REPEAT_LAST_N_MAX, &i, &has)) != GS_OK)
        return st;
    if (has)
        sp->repeat_last_n = (int32_t)i;
    if ((st = gs_srv_get_int(c, root, "seed", INT64_MIN, INT64_MAX, &i, &has)) != GS_OK)
        return st;
    if (has) {
        sp->seed = (uint64_t)i;
        g->has_seed = true;
    }
    return GS_OK;
}

/* logprobs: chat takes a boolean plus top_logprobs; completions take an
 * integer (the number of alternatives). */
static enum gs_status parse_logprobs(const struct gs_srv_refusal *c, json_t *root,
                                     struct gs_srv_gen *g)
{
    enum gs_status st;
    int64_t i;
    bool has;
    json_t *lp = json_object_get(root, "logprobs");
    if (g->chat) {
        if ((st = gs_srv_get_bool(c, root, "logprobs", &g->logprobs)) != GS_OK)
            return st;
        if ((st = gs_srv_get_int(c, root, "top_logprobs", 0, GS_SAMPLE_TOP_LOGPROBS_MAX, &i, &has)) !=
            GS_OK)
            return st;
        if (has) {
            if (!g->logprobs)
                return gs_srv_refuse(c, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
            g->top_logprobs = (int32_t)i;
        }
    } else if (lp && !json_is_null(lp)) {
        if (json_is_boolean(lp)) {
            g->logprobs = json_is_true(lp);
        } else {
            if ((st = gs_srv_get_int(c, root, "logprobs", 0, 5, &i, &has)) != GS_OK)
                return st;
            g->logprobs = true;
            g->top_logprobs = (int32_t)i;
        }
    }
    g->sp.logprobs = g->logprobs;
    g->sp.top_logprobs = g->top_logprobs;
    return GS_OK;
}

/* "validation": true, or {"top_logprobs": k} for the served top-k per
 * position as well (server/validation.h). */
static enum gs_status parse_validation(const struct gs_srv_refusal *c, json_t *root,
                                       struct gs_srv_gen *g)
{
    json_t *v = json_object_get(root, "validation");
    if (!v || json_is_null(v) || json_is_false(v))
        return GS_OK;
    g->validation = true;
    if (json_is_true(v))
        return GS_OK;
    if (!json_is_object(v))
        return gs_srv_refuse(c, "validation", "'validation' must be a boolean or an object");
    int64_t k;
    bool has;
    if (gs_srv_get_int(c, v, "top_logprobs", 0, GS_SAMPLE_TOP_LOGPROBS_MAX, &k, &has) != GS_OK)
        return gs_srv_refuse(c, "validation.top_logprobs",
                             "'validation.top_logprobs' must be an integer from 0 to %d",
                             GS_SAMPLE_TOP_LOGPROBS_MAX);
    if (has)
        g->validation_top_k = (uint32_t)k;
    return GS_OK;
}

/* "parse_special": a completion's text prompt may spell control tokens.
 * Refused where nothing would read it: chat contents are always plain text,
 * and token ids are not tokenized. */
static enum gs_status parse_parse_special(const struct gs_srv_refusal *c, json_t *root,
                                          struct gs_srv_gen *g)
{
    json_t *v = json_object_get(root, "parse_special");
    enum gs_status st = gs_srv_get_bool(c, root, "parse_special", &g->parse_special);
    if (st != GS_OK || !v || json_is_null(v))
        return st;
    if (g->chat)
        return gs_srv_refuse(
            c, "parse_special",
            "'parse_special' is for /v1/completions; chat messages are always plain text");
    if (!g->prompt)
        return gs_srv_refuse(c, "parse_special",
                             "'parse_special' needs a text prompt, not token ids");
    return GS_OK;
}

/*
 * Structured output: "response_format" (OpenAI: text, json_object,
 * json_schema) or "grammar" (llama-server's GBNF text). The grammar is
 * compiled here, so that a schema or grammar the engine cannot enforce is a
 * 400 that names what is wrong, before anything is queued.
 */
static enum gs_status parse_structured(const struct gs_srv_refusal *c, json_t *root,
                                       struct gs_srv_gen *g)
{
    json_t *rf = json_object_get(root, "response_format");
    json_t *gr = json_object_get(root, "grammar");
    bool has_rf = rf && !json_is_null(rf), has_gr = gr && !json_is_null(gr);
    if (has_rf && has_gr)
        return gs_srv_refuse(c, "grammar", "'grammar' and 'response_format' cannot both be given");
    const char *src = NULL, *param = "grammar";
    size_t len = 0;
    char *owned = NULL;
    struct gs_err e;
    if (has_gr) {
        if (!json_is_string(gr))
            return gs_srv_refuse(c, "grammar", "'grammar' must be a string of GBNF rules");
        src = json_string_value(gr);
        len = json_string_length(gr);
    } else if (has_rf) {
        static const char *const rf_keys[] = {"type", "json_schema"};
        static const char *const js_keys[] = {"name", "schema", "strict", "description"};
        json_t *type = json_object_get(rf, "type");
        enum gs_status st;
        if (!json_is_object(rf))
            return gs_srv_refuse(c, "response_format", "'response_format' must be an object");
        if ((st = gs_srv_only_keys(c, rf, "response_format", rf_keys, GS_ARRAY_LEN(rf_keys))))
            return st;
        if (!json_is_string(type))
            return gs_srv_refuse(c, "response_format.type",
                                 "'response_format.type' must be \"text\", \"json_object\" or "
                                 "\"json_schema\"");
        const char *t = json_string_value(type);
        json_t *js = json_object_get(rf, "json_schema");
        if (strcmp(t, "json_schema") && js)
            return gs_srv_refuse(c, "response_format.json_schema",
                                 "'response_format.json_schema' goes with type \"json_schema\"");
        if (!strcmp(t, "text"))
            return GS_OK;
        param = "response_format";
        if (!strcmp(t, "json_object")) {
            src = gs_grammar_json_object_gbnf();
            len = strlen(src);
        } else if (!strcmp(t, "json_schema")) {
            if (!json_is_object(js))
                return gs_srv_refuse(
                    c, "response_format.json_schema",
                    "'response_format.json_schema' must be an object with 'name' and "
                    "'schema'");
            if ((st = gs_srv_only_keys(c, js, "response_format.json_schema", js_keys,
                                       GS_ARRAY_LEN(js_keys))))
                return st;
            json_t *name = json_object_get(js, "name");
            if (!json_is_string(name) || !gs_srv_name_ok(json_string_value(name)))
                return gs_srv_refuse(
                    c, "response_format.json_schema.name",
                    "'response_format.json_schema.name' must be 1 to 64 of a-z, A-Z, "
                    "0-9, '_' and '-'");
            json_t *strict = json_object_get(js, "strict");
            if (strict && !json_is_null(strict) && !json_is_boolean(strict))
                return gs_srv_refuse(c, "response_format.json_schema.strict",
                                     "'response_format.json_schema.strict' must be a boolean");
            json_t *desc = json_object_get(js, "description");
            if (desc && !json_is_null(desc) && !json_is_string(desc))
                return gs_srv_refuse(c, "response_format.json_schema.description",
                                     "'response_format.json_schema.description' must be a string");
            json_t *schema = json_object_get(js, "schema");
            if (!json_is_object(schema) && !json_is_boolean(schema))
                return gs_srv_refuse(
                    c, "response_format.json_schema.schema",
                    "'response_format.json_schema.schema' must be a JSON Schema object");
            param = "response_format.json_schema.schema";
            /* The output is enforced whatever strict says: "strict": false
             * gets the same guarantee. */
            if (gs_grammar_from_json_schema(schema, &owned, &len, &e) != GS_OK) {
                if (e.code == GS_NOMEM)
                    return gs_srv_refuse_nomem(c);
                return gs_srv_refuse(c, param, "%s", e.msg);
            }
            src = owned;
        } else {
            return gs_srv_refuse(c, "response_format.type",
                                 "'response_format.type' must be \"text\", \"json_object\" or "
                                 "\"json_schema\", not \"%.40s\"",
                                 t);
        }
    } else {
        return GS_OK;
    }
    enum gs_status st = gs_grammar_compile(src, len, "root", NULL, &g->grammar, &e);
    gs_free(owned);
    if (st == GS_NOMEM)
        return gs_srv_refuse_nomem(c);
    if (st)
        return gs_srv_refuse(c, param, "%s", e.msg);
    return GS_OK;
}

/* "reasoning_format": "auto" (a thinking block goes to reasoning_content) or "none" (it
 * stays in content). Chat only. */
static enum gs_status parse_reasoning_format(const struct gs_srv_refusal *c, json_t *root,
                                             struct gs_srv_gen *g)
{
    json_t *v = json_object_get(root, "reasoning_format");
    if (!v || json_is_null(v))
        return GS_OK;
    if (!g->chat)
        return gs_srv_refuse(c, "reasoning_format",
                             "'reasoning_format' is for /v1/chat/completions");
    const char *s = json_string_value(v);
    if (!s || (strcmp(s, "auto") && strcmp(s, "none")))
        return gs_srv_refuse(c, "reasoning_format",
                             "'reasoning_format' must be \"auto\" or \"none\"");
    g->reasoning_inline = !strcmp(s, "none");
    return GS_OK;
}

static enum gs_status parse_root(const struct gs_srv_refusal *c, json_t *root,
                                 const struct gs_srv_parse_limits *lim, struct gs_srv_gen *g)
{
    enum gs_status st;
    int64_t i;
    bool has;
    json_t *model = json_object_get(root, "model");
    if (model && !json_is_null(model)) {
        if (!json_is_string(model))
            return gs_srv_refuse(c, "model", "'model' must be a string");
        if (!(g->model = gs_strdup(json_string_value(model))))
            return gs_srv_refuse_nomem(c);
    }
    if ((st = g->chat ? parse_messages(c, root, lim->jinja, g) : parse_prompt(c, root, lim, g)) !=
        GS_OK)
        return st;
    if (g->chat && lim->jinja && (st = parse_template_inputs(c, root, g)) != GS_OK)
        return st;
    const char *mt = g->chat && json_object_get(root, "max_completion_tokens")
                         ? "max_completion_tokens"
                         : "max_tokens";
    if ((st = gs_srv_get_int(c, root, mt, 1, INT32_MAX, &i, &has)) != GS_OK)
        return st;
    if (has && i > lim->max_tokens)
        return gs_srv_refuse(c, mt, "'%s' is %lld; this server allows at most %u", mt, (long long)i,
                             lim->max_tokens);
    if (has)
        g->max_tokens = (uint32_t)i;
    g->n = 1;
    if ((st = gs_srv_get_int(c, root, "n", 1, lim->max_n, &i, &has)) != GS_OK)
        return st;
    if (has)
        g->n = (uint32_t)i;
    if ((st = gs_srv_get_bool(c, root, "stream", &g->stream)) != GS_OK ||
        (st = gs_srv_get_bool(c, root, "ignore_eos", &g->ignore_eos)) != GS_OK ||
        (st = gs_srv_get_bool(c, root, "echo", &g->echo)) != GS_OK)
        return st;
    json_t *so = json_object_get(root, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so))
            return gs_srv_refuse(c, "stream_options", "'stream_options' must be an object");
        if ((st = gs_srv_get_bool(c, so, "include_usage", &g->include_usage)) != GS_OK)
            return gs_srv_refuse(c, "stream_options.include_usage",
                                 "'stream_options.include_usage' must be a boolean");
    }
    json_t *user = json_object_get(root, "user");
    if (user && !json_is_null(user) && !json_is_string(user))
        return gs_srv_refuse(c, "user", "'user' must be a string");
    if ((st = parse_sampling(c, root, g)) != GS_OK || (st = parse_logprobs(c, root, g)) != GS_OK ||
        (st = gs_srv_get_stop(c, root, "stop", true, lim, g)) != GS_OK ||
        (st = parse_logit_bias(c, root, lim, g)) != GS_OK ||
        (st = parse_validation(c, root, g)) != GS_OK ||
        (st = parse_parse_special(c, root, g)) != GS_OK ||
        (st = parse_structured(c, root, g)) != GS_OK)
        return st;
    struct gs_err e;
    if (gs_sample_params_check(&g->sp, (int32_t)lim->n_vocab, &e) != GS_OK)
        return gs_srv_refuse(c, "", "%s", e.msg);
    if ((st = gs_srv_tools_parse(root, lim, g, c->param, c->param_cap, c->err)) != GS_OK ||
        (st = parse_reasoning_format(c, root, g)) != GS_OK)
        return st;
    list_ignored(root, lim->jinja, g);
    return GS_OK;
}

enum gs_status gs_srv_gen_parse(const char *body, size_t len, bool chat,
                                const struct gs_srv_parse_limits *lim, struct gs_srv_gen *out,
                                char *param, size_t param_cap, struct gs_err *err)
{
    const struct gs_srv_refusal c = {param, param_cap, err};
    *out = (struct gs_srv_gen){.chat = chat};
    gs_sample_params_init(&out->sp);
    if (param_cap)
        param[0] = '\0';
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return gs_srv_refuse(&c, "", "malformed JSON at line %d, column %d: %s", je.line, je.column,
                             je.text);
    enum gs_status st;
    if (!json_is_object(root))
        st = gs_srv_refuse(&c, "", "the request body must be a JSON object");
    else
        st = parse_root(&c, root, lim, out);
    json_decref(root);
    return st;
}

void gs_srv_gen_free(struct gs_srv_gen *g)
{
    for (size_t i = 0; i < g->n_msgs; i++) {
        gs_free(g->msgs[i].role);
        gs_free(g->msgs[i].content);
    }
    gs_free(g->msgs);
    for (size_t i = 0; i < g->n_stop; i++)
        gs_free(g->stop[i]);
    gs_free(g->stop);
    gs_free(g->model);
    gs_free(g->prompt);
    gs_free(g->prompt_ids);
    gs_free(g->prefill);
    gs_free(g->bias);
    json_decref(g->messages_json);
    json_decref(g->tools_json);
    json_decref(g->template_kwargs);
    json_decref(g->resp_conv);
    json_decref(g->resp_echo);
    gs_grammar_unref(g->grammar);
    gs_srv_tools_free(g);
    *g = (struct gs_srv_gen){0};
}
