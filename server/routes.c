/*
 * server/routes.c - the endpoint table and the endpoints that need no
 * generation: /health, /ready, /metrics, /v1/models, /tokenize, /detokenize.
 * Generation endpoints are in generate.c.
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
    struct gs_srv_buf b = {0};
    gs_srv_metrics_render(&s->metrics, s->has_engine ? &st : NULL, gs_srv__is_ready(s, NULL, 0),
                          &b);
    gs_srv_val_metrics_render(&s->val_metrics, s->cfg.model.id, s->cfg.model.backend,
                              s->has_engine ? &st : NULL, &b);
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
                  "chat_template", gs_srv_tmpl_name(s->tmpl));
    return json_pack("{s:s,s:s,s:I,s:s,s:o}", "id", m->id, "object", "model", "created",
                     (json_int_t)time(NULL), "owned_by", "graphserve", "meta", meta);
}

static enum MHD_Result models(struct gs_srv_req *r)
{
    return gs_srv__respond_json(
        r, 200, json_pack("{s:s,s:[o]}", "object", "list", "data", model_json(r->srv)));
}

/* GET /v1/models/{id} */
static enum MHD_Result model_one(struct gs_srv_req *r)
{
    const char *id = r->url + strlen("/v1/models/");
    if (strcmp(id, r->srv->cfg.model.id))
        return gs_srv__respond_error(r, GS_SRV_E_MODEL_NOT_FOUND, "model",
                                     "the model '%s' does not exist; this server serves '%s'", id,
                                     r->srv->cfg.model.id);
    return gs_srv__respond_json(r, 200, model_json(r->srv));
}

/* Parses the body as a JSON object; answers 400 itself on failure. */
static json_t *body_object(struct gs_srv_req *r, enum MHD_Result *ret)
{
    json_error_t je;
    json_t *root = json_loadb(r->body.p ? r->body.p : "", r->body.len, 0, &je);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        *ret = root ? gs_srv__respond_error(r, GS_SRV_E_BAD_REQUEST, NULL,
                                            "the request body must be a JSON object")
                    : gs_srv__respond_error(r, GS_SRV_E_BAD_REQUEST, NULL,
                                            "malformed JSON at line %d, column %d: %s", je.line,
                                            je.column, je.text);
        return NULL;
    }
    return root;
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

static enum MHD_Result tokenize(struct gs_srv_req *r)
{
    if (!r->srv->cfg.model.tok)
        return gs_srv__respond_error(r, GS_SRV_E_UNAVAILABLE, NULL, "no tokenizer loaded");
    enum MHD_Result ret;
    json_t *root = body_object(r, &ret);
    if (!root)
        return ret;
    json_t *content = json_object_get(root, "content");
    json_t *add = json_object_get(root, "add_special"),
           *parse = json_object_get(root, "parse_special");
    json_t *pieces = json_object_get(root, "with_pieces");
    if (!json_is_string(content)) {
        json_decref(root);
        return gs_srv__respond_error(r, GS_SRV_E_BAD_REQUEST, "content",
                                     "'content' must be a string");
    }
    if ((add && !json_is_boolean(add)) || (parse && !json_is_boolean(parse)) ||
        (pieces && !json_is_boolean(pieces))) {
        json_decref(root);
        return gs_srv__respond_error(
            r, GS_SRV_E_BAD_REQUEST, NULL,
            "'add_special', 'parse_special' and 'with_pieces' are booleans");
    }
    unsigned flags = (json_is_true(add) ? GS_TOK_ADD_SPECIAL : 0) |
                     (!parse || json_is_true(parse) ? GS_TOK_PARSE_SPECIAL : 0);
    r->tokenize_pieces = json_is_true(pieces);
    gs_srv_buf_add(&r->tok_job.text, json_string_value(content), json_string_length(content));
    json_decref(root);
    if (r->tok_job.text.failed)
        return gs_srv__respond_error(r, GS_SRV_E_UNAVAILABLE, NULL, "out of memory");
    return gs_srv__tokenize_async(r, flags, tokenize_reply);
}

static enum MHD_Result detokenize(struct gs_srv_req *r)
{
    const struct gs_tok *tok = r->srv->cfg.model.tok;
    if (!tok)
        return gs_srv__respond_error(r, GS_SRV_E_UNAVAILABLE, NULL, "no tokenizer loaded");
    enum MHD_Result ret;
    json_t *root = body_object(r, &ret);
    if (!root)
        return ret;
    json_t *toks = json_object_get(root, "tokens");
    if (!json_is_array(toks)) {
        json_decref(root);
        return gs_srv__respond_error(r, GS_SRV_E_BAD_REQUEST, "tokens",
                                     "'tokens' must be an array of token ids");
    }
    size_t n = json_array_size(toks);
    int32_t *ids = gs_alloc_array(n ? n : 1, sizeof(*ids));
    if (!ids) {
        json_decref(root);
        return gs_srv__respond_error(r, GS_SRV_E_UNAVAILABLE, NULL, "out of memory");
    }
    uint32_t n_vocab = gs_tok_n_vocab(tok);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(toks, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) >= (json_int_t)n_vocab) {
            json_decref(root);
            gs_free(ids);
            return gs_srv__respond_error(r, GS_SRV_E_BAD_REQUEST, "tokens",
                                         "'tokens[%zu]' is not a token id in [0, %u)", i, n_vocab);
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    json_decref(root);
    char *text;
    size_t len;
    struct gs_err err;
    enum gs_status st = gs_tok_decode(tok, ids, n, GS_TOK_RENDER_SPECIAL, &text, &len, &err);
    gs_free(ids);
    if (st != GS_OK)
        return gs_srv__respond_error(r, gs_srv_err_from_status(st), "tokens", "%s", err.msg);
    json_t *j = gs_srv_json_text(text, len);
    gs_free(text);
    return gs_srv__respond_json(r, 200, json_pack("{s:o}", "content", j));
}

static const struct gs_srv_route routes[] = {
    {"POST", "/v1/chat/completions", GS_SRV_EP_CHAT, true, gs_srv__gen_start},
    {"POST", "/v1/completions", GS_SRV_EP_COMPLETIONS, true, gs_srv__gen_start},
    {"GET", "/v1/models", GS_SRV_EP_MODELS, true, models},
    {"GET", "/v1/models/*", GS_SRV_EP_MODELS, true, model_one},
    {"GET", "/health", GS_SRV_EP_HEALTH, false, health},
    {"GET", "/ready", GS_SRV_EP_READY, false, ready},
    {"GET", "/metrics", GS_SRV_EP_METRICS, true, metrics},
    {"POST", "/tokenize", GS_SRV_EP_TOKENIZE, true, tokenize},
    {"POST", "/detokenize", GS_SRV_EP_DETOKENIZE, true, detokenize},
};

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
