/*
 * server/routes.c - the endpoint table and the endpoints that need no
 * generation: /health, /ready, /metrics, /v1/models, /tokenize, /detokenize
 * (the /debug/ routes are debug.c's, the web page's webui.c's).
 * Generation endpoints (chat, completions, Anthropic's messages and
 * count_tokens) are in generate.c, /v1/responses in responses.c, /v1/embeddings in
 * embed.c. A row names its handler, its answer shape and its hooks
 * (struct gs_srv_route_hooks), so that the HTTP layer reaches every route through
 * this table and never names the files behind it.
 */
#include "server/daemon.h"
#include "server/tls.h"

#include <string.h>
#include <time.h>

static enum MHD_Result health(struct gs_srv_req *r)
{
    json_t *body = json_pack("{s:s}", "status", "ok");
    const struct gs_srv *s = r->srv;
    if (body && s->known_answer_set)
        json_object_set_new(
            body, "known_answer",
            json_pack("{s:b,s:s}", "passed", s->known_answer_passed, "detail", s->known_answer));
    /* What the cache stores changes every answer's numerics, so a probe can tell a
     * q8_0 daemon from an f16 one without its config. */
    if (body && s->cfg.model.kv_type)
        json_object_set_new(body, "kv_type", json_string(s->cfg.model.kv_type));
    return gs_srv__respond_json(r, 200, body);
}

static enum MHD_Result ready(struct gs_srv_req *r)
{
    char why[64];
    if (gs_srv__is_ready(r->srv, why, sizeof(why)))
        return gs_srv__respond_json(r, 200, json_pack("{s:s}", "status", "ready"));
    return gs_srv__respond_json(r, 503, json_pack("{s:s}", "status", why[0] ? why : "not ready"));
}

static enum MHD_Result metrics(struct gs_srv_req *r)
{
    struct gs_srv *s = r->srv;
    struct gs_sched_stats st;
    if (s->has_engine)
        s->engine.stats(s->engine.ctx, &st);
    struct gs_srv_buf b = {.arena = r->arena};
    gs_srv_metrics_render(&s->metrics, s->has_engine ? &st : NULL, s->cfg.model.kv_type,
                          gs_srv__is_ready(s, NULL, 0), &b);
    gs_srv_val_metrics_render(&s->val_metrics, s->cfg.model.id, s->cfg.model.backend,
                              s->has_engine ? &st : NULL, &b);
    gs_srv__ledger_metrics(s, s->has_engine ? &st : NULL, &b);
    if (s->tls)
        gs_srv_tls_metrics_render(s->tls, &b);
    enum MHD_Result ret =
        b.failed ? gs_srv__respond_error(r, GS_SRV_E_UNAVAILABLE, NULL, "out of memory")
                 : gs_srv__respond_text(r, 200, "text/plain; version=0.0.4; charset=utf-8",
                                        b.p ? b.p : "", b.len);
    gs_srv_buf_free(&b);
    return ret;
}

static json_t *model_json(const struct gs_srv *s)
{
    const struct gs_srv_model_info *m = &s->cfg.model;
    json_t *meta =
        json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:s}", "n_vocab",
                  (json_int_t)(m->tok ? gs_tok_n_vocab(m->tok) : 0), "n_ctx", (json_int_t)m->n_ctx,
                  "n_ctx_train", (json_int_t)m->n_ctx_train, "n_embd", (json_int_t)m->n_embd,
                  "n_params", (json_int_t)m->n_params, "size", (json_int_t)m->size_bytes,
                  "chat_template", s->jinja.tmpl ? "jinja" : gs_srv_tmpl_name(s->tmpl));
    /* Which template chats render with, and why not the model's own. */
    if (meta && s->jinja.tmpl) {
        json_object_set_new(meta, "chat_template_source", json_string(s->jinja.origin));
        json_object_set_new(meta, "tool_call_format", json_string(s->tool_format->name));
    }
    if (meta && s->jinja.error)
        json_object_set_new(meta, "chat_template_error", json_string(s->jinja.error));
    if (meta && m->kv_type)
        json_object_set_new(meta, "kv_type", json_string(m->kv_type));
    /* How /v1/embeddings pools this model's hidden states (--pooling, or the file's). */
    if (meta && m->pooling != GS_POOLING_NONE)
        json_object_set_new(meta, "pooling", json_string(gs_pooling_name(m->pooling)));
    return json_pack("{s:s,s:s,s:I,s:s,s:o}", "id", m->id, "object", "model", "created",
                     (json_int_t)time(NULL), "owned_by", "graphserve", "meta", meta);
}

/* One entry per name the model is served under, the id first. */
static enum MHD_Result models(struct gs_srv_req *r)
{
    const struct gs_srv *s = r->srv;
    json_t *data = json_array();
    for (size_t i = 0; data && i <= s->cfg.model.n_aliases; i++) {
        json_t *m = model_json(s);
        if (m && i > 0)
            json_object_set_new(m, "id", json_string(s->cfg.model.aliases[i - 1]));
        json_array_append_new(data, m);
    }
    return gs_srv__respond_json(r, 200, json_pack("{s:s,s:o}", "object", "list", "data", data));
}

/* GET /v1/models/{id} */
static enum MHD_Result model_one(struct gs_srv_req *r)
{
    const char *id = r->url + strlen("/v1/models/");
    if (!gs_srv__model_name_ok(r->srv, id))
        return gs_srv__respond_error(r, GS_SRV_E_MODEL_NOT_FOUND, "model",
                                     "the model '%s' does not exist; this server serves '%s'", id,
                                     r->srv->cfg.model.id);
    json_t *m = model_json(r->srv);
    if (m)
        json_object_set_new(m, "id", json_string(id));
    return gs_srv__respond_json(r, 200, m);
}

/* The /tokenize answer, once the pool has the ids. */
static enum MHD_Result tokenize_reply(struct gs_srv_req *r)
{
    const struct gs_tok *tok = r->srv->cfg.model.tok;
    struct gs_srv_tok_job *j = &r->tok_job;
    j->done = false;
    if (j->st != GS_OK)
        return gs_srv__respond_error(r, gs_srv_err_from_status(j->st), "content", "%s", j->err.msg);
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < j->n_ids; i++) {
        if (!r->tokenize_pieces) {
            json_array_append_new(arr, json_integer(j->ids[i]));
            continue;
        }
        size_t pl;
        const char *p = gs_tok_piece(tok, j->ids[i], GS_TOK_RENDER_SPECIAL, &pl);
        json_array_append_new(arr, json_pack("{s:i,s:o}", "id", j->ids[i], "piece",
                                             gs_srv_json_text(p ? p : "", p ? pl : 0)));
    }
    return gs_srv__respond_json(r, 200, json_pack("{s:o}", "tokens", arr));
}

/* Answers a refused /tokenize or /detokenize body as 400 (503 out of memory). */
static enum MHD_Result body_refused(struct gs_srv_req *r, enum gs_status st, const char *param,
                                    const struct gs_err *err)
{
    return gs_srv__respond_error(r, gs_srv_err_from_status(st), param[0] ? param : NULL, "%s",
                                 err->msg);
}

static enum MHD_Result tokenize(struct gs_srv_req *r)
{
    if (!r->srv->cfg.model.tok)
        return gs_srv__respond_error(r, GS_SRV_E_UNAVAILABLE, NULL, "no tokenizer loaded");
    struct gs_srv_tokenize_req req;
    char param[32];
    struct gs_err err;
    enum gs_status st = gs_srv_tokenize_parse(r->body.p ? r->body.p : "", r->body.len, &req,
                                              param, sizeof(param), &err);
    if (st != GS_OK) {
        gs_srv_tokenize_req_free(&req);
        return body_refused(r, st, param, &err);
    }
    r->tokenize_pieces = req.with_pieces;
    /* The text moves into the job, which the request frees. */
    gs_srv_buf_free(&r->tok_job.text);
    r->tok_job.text = req.content;
    return gs_srv__tokenize_async(r, req.flags, tokenize_reply);
}

static enum MHD_Result detokenize(struct gs_srv_req *r)
{
    const struct gs_tok *tok = r->srv->cfg.model.tok;
    if (!tok)
        return gs_srv__respond_error(r, GS_SRV_E_UNAVAILABLE, NULL, "no tokenizer loaded");
    int32_t *ids;
    size_t n;
    char param[32];
    struct gs_err err;
    enum gs_status st = gs_srv_detokenize_parse(r->body.p ? r->body.p : "", r->body.len,
                                                gs_tok_n_vocab(tok), &ids, &n, param,
                                                sizeof(param), &err);
    if (st != GS_OK)
        return body_refused(r, st, param, &err);
    char *text;
    size_t len;
    st = gs_tok_decode(tok, ids, n, GS_TOK_RENDER_SPECIAL, &text, &len, &err);
    gs_free(ids);
    if (st != GS_OK)
        return gs_srv__respond_error(r, gs_srv_err_from_status(st), "tokens", "%s", err.msg);
    json_t *j = gs_srv_json_text(text, len);
    gs_free(text);
    return gs_srv__respond_json(r, 200, json_pack("{s:o}", "content", j));
}

/* One row per route: method, path, endpoint label, key required, handler, the API of its
 * answers, its answer shape (generation routes) and its hooks (routes whose requests
 * outlive the handler). */
#define OPENAI    GS_SRV_API_OPENAI
#define ANTHROPIC GS_SRV_API_ANTHROPIC
static const struct gs_srv_route routes[] = {
    {"POST", "/v1/chat/completions", GS_SRV_EP_CHAT, true, gs_srv__gen_start, OPENAI,
     &gs_srv__openai_chat_shape, &gs_srv__gen_hooks},
    {"POST", "/v1/completions", GS_SRV_EP_COMPLETIONS, true, gs_srv__gen_start, OPENAI,
     &gs_srv__openai_completion_shape, &gs_srv__gen_hooks},
    {"GET", "/v1/models", GS_SRV_EP_MODELS, true, models, OPENAI, NULL, NULL},
    {"GET", "/v1/models/*", GS_SRV_EP_MODELS, true, model_one, OPENAI, NULL, NULL},
    {"GET", "/health", GS_SRV_EP_HEALTH, false, health, OPENAI, NULL, NULL},
    {"GET", "/ready", GS_SRV_EP_READY, false, ready, OPENAI, NULL, NULL},
    {"GET", "/metrics", GS_SRV_EP_METRICS, true, metrics, OPENAI, NULL, NULL},
    {"POST", "/tokenize", GS_SRV_EP_TOKENIZE, true, tokenize, OPENAI, NULL, NULL},
    {"POST", "/detokenize", GS_SRV_EP_DETOKENIZE, true, detokenize, OPENAI, NULL, NULL},
    {"POST", "/apply-template", GS_SRV_EP_APPLY_TEMPLATE, true, gs_srv__apply_template, OPENAI,
     NULL, &gs_srv__apply_template_hooks},
    {"POST", "/v1/responses", GS_SRV_EP_RESPONSES, true, gs_srv__responses_start, OPENAI,
     &gs_srv__responses_shape, &gs_srv__responses_hooks},
    {"GET", "/v1/responses/*", GS_SRV_EP_RESPONSES, true, gs_srv__responses_retrieve, OPENAI, NULL,
     NULL},
    {"DELETE", "/v1/responses/*", GS_SRV_EP_RESPONSES, true, gs_srv__responses_delete, OPENAI, NULL,
     NULL},
    {"POST", "/v1/embeddings", GS_SRV_EP_EMBEDDINGS, true, gs_srv__embed_start, OPENAI,
     &gs_srv__embed_shape, &gs_srv__embed_hooks},
    {"POST", "/v1/messages", GS_SRV_EP_MESSAGES, true, gs_srv__gen_start, ANTHROPIC,
     &gs_srv__anthropic_shape, &gs_srv__gen_hooks},
    {"POST", "/v1/messages/count_tokens", GS_SRV_EP_COUNT_TOKENS, true, gs_srv__gen_start,
     ANTHROPIC, &gs_srv__anthropic_shape, &gs_srv__gen_hooks},
    /* debug.c: 404 unless debug_endpoints */
    {"GET", "/debug/graph", GS_SRV_EP_DEBUG, true, gs_srv__debug_graph, OPENAI, NULL, NULL},
    {"GET", "/debug/memory", GS_SRV_EP_DEBUG, true, gs_srv__debug_memory, OPENAI, NULL, NULL},
    {"GET", "/debug/events", GS_SRV_EP_DEBUG, true, gs_srv__debug_events, OPENAI, NULL,
     &gs_srv__debug_events_hooks},
    /* webui.c: 404 unless webui. No key: a browser's navigation sends none, and the page
     * holds nothing secret; it asks for the key and sends it on its API calls. */
    {"GET", "/", GS_SRV_EP_WEBUI, false, gs_srv__webui, OPENAI, NULL, NULL},
    {"GET", "/assets/*", GS_SRV_EP_WEBUI, false, gs_srv__webui, OPENAI, NULL, NULL},
};
#undef OPENAI
#undef ANTHROPIC

/* An exact path, or a pattern ending in slash-asterisk for one more non-empty segment. */
static bool path_match(const char *pattern, const char *path)
{
    size_t n = strlen(pattern);
    if (n < 2 || strcmp(pattern + n - 2, "/*"))
        return !strcmp(pattern, path);
    return !strncmp(pattern, path, n - 1) && path[n - 1] && !strchr(path + n - 1, '/');
}

const struct gs_srv_route *gs_srv__route_find(const char *method, const char *path,
                                              bool *path_known)
{
    *path_known = false;
    for (size_t i = 0; i < GS_ARRAY_LEN(routes); i++) {
        if (!path_match(routes[i].path, path))
            continue;
        *path_known = true;
        if (!strcmp(method, routes[i].method) ||
            (!strcmp(method, "HEAD") && !strcmp(routes[i].method, "GET")))
            return &routes[i];
    }
    return NULL;
}

enum gs_srv_api gs_srv__route_api(const char *path)
{
    for (size_t i = 0; path && i < GS_ARRAY_LEN(routes); i++)
        if (path_match(routes[i].path, path))
            return routes[i].api;
    return GS_SRV_API_OPENAI;
}

void gs_srv__route_allow(const char *path, char *out, size_t cap)
{
    size_t w = 0;
    out[0] = '\0';
    for (size_t i = 0; i < GS_ARRAY_LEN(routes); i++)
        if (path_match(routes[i].path, path))
            w +=
                (size_t)snprintf(out + w, w < cap ? cap - w : 0, "%s%s", w ? ", " : "",
                                 !strcmp(routes[i].method, "GET") ? "GET, HEAD" : routes[i].method);
}
