/*
 * tests/fuzz/fuzz_request.c - a request body from a stranger, as each route
 * that takes one parses it: /v1/chat/completions and /v1/completions
 * (gs_srv_gen_parse), /v1/messages and its count_tokens (gs_srv_messages_parse),
 * /v1/responses (gs_srv_responses_parse, with and without a stored conversation before
 * it), /tokenize and /detokenize (server/tokenize_body.c), /v1/embeddings
 * (gs_srv_embed_parse). Every input goes to all nine, so a corpus file is one plain body.
 *
 * Invariants: a refusal is GS_INVAL or GS_NOMEM with a message, and the
 * error body the daemon would send can be built from it; an accepted body
 * holds only what the limits allow (ids in the vocabulary, at most max_n
 * choices, non-empty stop strings within their caps, known roles), and a
 * chat renders through every template.
 */
#define _GNU_SOURCE /* memmem */
#include "server/internal.h"
#include "tests/fuzz/fuzz.h"

#include <string.h>

#define LIMITS .n_vocab = 32000, .max_tokens = 4096, .max_n = 8, .max_stop = 4, .max_stop_bytes = 64
static const struct gs_srv_parse_limits limits = {LIMITS};
/* The same limits for a model with a Jinja template: tools and tool blocks are read. */
static const struct gs_srv_parse_limits jinja_limits = {LIMITS, .jinja = true};

/* A refusal must carry what the daemon answers with. */
static void check_refusal(enum gs_status st, const char *param, const struct gs_err *err)
{
    FUZZ_CHECK(st == GS_INVAL || st == GS_NOMEM, "status %d", (int)st);
    FUZZ_CHECK(err->msg[0], "refused without a message");
    json_t *j = gs_srv_err_json(gs_srv_err_from_status(st), err->msg, param);
    FUZZ_CHECK(j, "no error body for '%s'", err->msg);
    char *s = json_dumps(j, JSON_COMPACT);
    FUZZ_CHECK(s, "error body for '%s' does not serialise", err->msg);
    free(s);
    json_decref(j);
}

static bool known_role(const char *r)
{
    static const char *const roles[] = {"system", "user", "assistant", "tool"};
    for (size_t i = 0; i < GS_ARRAY_LEN(roles); i++)
        if (!strcmp(r, roles[i]))
            return true;
    return false;
}

static void check_gen(const struct gs_srv_gen *g, bool chat)
{
    FUZZ_CHECK(g->n >= 1 && g->n <= limits.max_n, "n = %u", g->n);
    FUZZ_CHECK(g->max_tokens <= limits.max_tokens, "max_tokens = %u", g->max_tokens);
    FUZZ_CHECK(g->n_stop <= limits.max_stop, "%zu stop strings", g->n_stop);
    for (size_t i = 0; i < g->n_stop; i++)
        FUZZ_CHECK(g->stop[i][0] && strlen(g->stop[i]) <= limits.max_stop_bytes, "stop[%zu]", i);
    FUZZ_CHECK(g->top_logprobs >= 0 && g->top_logprobs <= GS_SAMPLE_TOP_LOGPROBS_MAX,
               "top_logprobs = %d", g->top_logprobs);
    for (int32_t i = 0; i < g->sp.n_bias; i++)
        FUZZ_CHECK(g->bias[i].token >= 0 && (uint32_t)g->bias[i].token < limits.n_vocab,
                   "bias token %d", g->bias[i].token);
    FUZZ_CHECK(memchr(g->ignored, 0, sizeof(g->ignored)), "ignored list not terminated");
    if (!chat) {
        FUZZ_CHECK(!g->prompt != !g->prompt_ids, "exactly one of prompt and prompt_ids");
        for (size_t i = 0; i < g->n_prompt_ids; i++)
            FUZZ_CHECK(g->prompt_ids[i] >= 0 && (uint32_t)g->prompt_ids[i] < limits.n_vocab,
                       "prompt id %d", g->prompt_ids[i]);
        return;
    }
    FUZZ_CHECK(g->n_msgs >= 1, "a chat without messages");
    for (size_t i = 0; i < g->n_msgs; i++)
        FUZZ_CHECK(g->msgs[i].role && known_role(g->msgs[i].role) && g->msgs[i].content,
                   "message %zu", i);
    for (int t = 0; t < GS_SRV_TMPL_COUNT; t++) {
        struct gs_srv_buf out = {0};
        gs_srv_tmpl_render((enum gs_srv_tmpl)t, g->msgs, g->n_msgs, &out);
        FUZZ_CHECK(!out.failed && out.p && out.len == strlen(out.p), "template %s",
                   gs_srv_tmpl_name((enum gs_srv_tmpl)t));
        gs_srv_buf_free(&out);
    }
}

static void fuzz_gen(const char *body, size_t len, bool chat)
{
    struct gs_srv_gen g;
    char param[64];
    struct gs_err err = {0};
    enum gs_status st = gs_srv_gen_parse(body, len, chat, &limits, &g, param, sizeof(param), &err);
    if (st == GS_OK)
        check_gen(&g, chat);
    else
        check_refusal(st, param, &err);
    gs_srv_gen_free(&g);
}

/* Anthropic's: a chat of user and assistant turns after an optional system message (and,
 * with a Jinja template, the tool messages of tool_result blocks), the final assistant
 * turn (if any) set aside as a prefill without trailing whitespace, max_tokens always
 * given unless only counting, and a refusal from tools.c named in Anthropic's spelling. */
static void fuzz_messages(const char *body, size_t len, bool count_only,
                          const struct gs_srv_parse_limits *lim)
{
    struct gs_srv_gen g;
    char param[64];
    struct gs_err err = {0};
    enum gs_status st =
        gs_srv_messages_parse(body, len, count_only, lim, &g, param, sizeof(param), &err);
    if (st != GS_OK) {
        check_refusal(st, param, &err);
        json_t *j = gs_srv_err_json_anthropic(gs_srv_err_from_status(st), err.msg, "msg_1");
        FUZZ_CHECK(j, "no Anthropic error body for '%s'", err.msg);
        json_decref(j);
        FUZZ_CHECK(!strstr(param, ".function.") && !strstr(param, "parallel_tool_calls"),
                   "chat's spelling in param '%s'", param);
        gs_srv_gen_free(&g);
        return;
    }
    check_gen(&g, true);
    FUZZ_CHECK(g.api == GS_SRV_API_ANTHROPIC && g.n == 1 && g.count_only == count_only, "shape");
    FUZZ_CHECK(count_only || g.max_tokens >= 1, "max_tokens = %u", g.max_tokens);
    for (size_t i = 0; i < g.n_msgs; i++)
        FUZZ_CHECK((i == 0 && !strcmp(g.msgs[i].role, "system")) ||
                       !strcmp(g.msgs[i].role, "user") || !strcmp(g.msgs[i].role, "assistant") ||
                       (lim->jinja && !strcmp(g.msgs[i].role, "tool")),
                   "message %zu is %s", i, g.msgs[i].role);
    FUZZ_CHECK(!lim->jinja == !g.messages_json, "the template's messages");
    size_t n = g.prefill ? strlen(g.prefill) : 0;
    FUZZ_CHECK(!g.prefill || (n && !strchr(" \t\n\r", g.prefill[n - 1])), "prefill '%s'",
               g.prefill);
    gs_srv_gen_free(&g);
}

/* The Responses API's: a chat (rewritten into chat's body, so every check of a chat
 * holds), one answer, a refusal named in the Responses spelling; the conversation to store
 * (with "store": true) is the chat without its instructions, prior included. */
static void fuzz_responses(const char *body, size_t len, const json_t *prior)
{
    struct gs_srv_gen g;
    char param[64];
    struct gs_err err = {0};
    enum gs_status st =
        gs_srv_responses_parse(body, len, prior, &limits, &g, param, sizeof(param), &err);
    if (st != GS_OK) {
        check_refusal(st, param, &err);
        /* Unless the client itself wrote the name (a refused field of that name). */
        static const char *const chat_names[] = {"response_format", "max_tokens"};
        for (size_t i = 0; i < GS_ARRAY_LEN(chat_names); i++)
            FUZZ_CHECK(!strstr(param, chat_names[i]) ||
                           memmem(body, len, chat_names[i], strlen(chat_names[i])),
                       "chat's spelling in param '%s'", param);
        gs_srv_gen_free(&g);
        return;
    }
    check_gen(&g, true);
    FUZZ_CHECK(g.n == 1 && g.api == GS_SRV_API_OPENAI && g.reasoning_inline, "shape");
    FUZZ_CHECK(!g.store == !g.resp_conv, "store %d without its conversation", g.store);
    FUZZ_CHECK(!g.resp_conv || json_array_size(g.resp_conv) >= json_array_size(prior) + 1,
               "the stored conversation lacks the prior or the input");
    gs_srv_gen_free(&g);
}

static void fuzz_tokenize(const char *body, size_t len)
{
    struct gs_srv_tokenize_req t;
    char param[32];
    struct gs_err err = {0};
    enum gs_status st = gs_srv_tokenize_parse(body, len, &t, param, sizeof(param), &err);
    if (st == GS_OK)
        FUZZ_CHECK(!(t.flags & ~(unsigned)(GS_TOK_ADD_SPECIAL | GS_TOK_PARSE_SPECIAL)),
                   "flags %#x", t.flags);
    else
        check_refusal(st, param, &err);
    gs_srv_tokenize_req_free(&t);
}

static void fuzz_detokenize(const char *body, size_t len)
{
    int32_t *ids;
    size_t n;
    char param[32];
    struct gs_err err = {0};
    enum gs_status st =
        gs_srv_detokenize_parse(body, len, limits.n_vocab, &ids, &n, param, sizeof(param), &err);
    if (st != GS_OK) {
        FUZZ_CHECK(!ids, "ids after a refusal");
        check_refusal(st, param, &err);
        return;
    }
    FUZZ_CHECK(ids, "no ids array");
    for (size_t i = 0; i < n; i++)
        FUZZ_CHECK(ids[i] >= 0 && (uint32_t)ids[i] < limits.n_vocab, "id %d", ids[i]);
    gs_free(ids);
}

/* Embeddings: 1..2048 inputs, each texts or ids in the vocabulary, none empty. */
static void fuzz_embed(const char *body, size_t len)
{
    struct gs_srv_embed_req *e = NULL;
    char param[64];
    struct gs_err err = {0};
    enum gs_status st =
        gs_srv_embed_parse(body, len, limits.n_vocab, 64, &e, param, sizeof(param), &err);
    if (st != GS_OK) {
        FUZZ_CHECK(!e, "a request after a refusal");
        check_refusal(st, param, &err);
        return;
    }
    FUZZ_CHECK(e && e->n_inputs >= 1 && e->n_inputs <= 2048, "%u inputs", e ? e->n_inputs : 0);
    for (uint32_t i = 0; i < e->n_inputs; i++) {
        if (e->texts) {
            FUZZ_CHECK(e->texts[i].len > 0 && !e->ids[i], "input %u", i);
            continue;
        }
        FUZZ_CHECK(e->ids[i] && e->n_ids[i] > 0, "input %u", i);
        for (uint32_t k = 0; k < e->n_ids[i]; k++)
            FUZZ_CHECK(e->ids[i][k] >= 0 && (uint32_t)e->ids[i][k] < limits.n_vocab,
                       "input %u id %d", i, e->ids[i][k]);
    }
    gs_srv_embed_req_free(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *body = size ? (const char *)data : "";
    fuzz_gen(body, size, true);
    fuzz_gen(body, size, false);
    fuzz_messages(body, size, false, &limits);
    fuzz_messages(body, size, true, &limits);
    fuzz_messages(body, size, false, &jinja_limits);
    fuzz_messages(body, size, true, &jinja_limits);
    fuzz_responses(body, size, NULL);
    json_t *prior =
        json_pack("[{s:s,s:s},{s:s,s:n,s:[{s:s,s:s,s:{s:s,s:s}}]},{s:s,s:s,s:s}]", "role", "user",
                  "content", "Hi", "role", "assistant", "content", "tool_calls", "id", "call_1",
                  "type", "function", "function", "name", "f", "arguments", "{}", "role", "tool",
                  "tool_call_id", "call_1", "content", "ok");
    if (prior)
        fuzz_responses(body, size, prior);
    json_decref(prior);
    fuzz_tokenize(body, size);
    fuzz_detokenize(body, size);
    fuzz_embed(body, size);
    return 0;
}
