/*
 * server/embed.c - POST /v1/embeddings: the body, tokenizing each text on the
 * thread pool, one engine request per input (the scheduler computes the
 * prompt beside other work and pools its final hidden states,
 * scheduler/scheduler.h), and OpenAI's list of embeddings, as floats or as
 * base64 of little-endian float32. Loop thread only.
 *
 * The request reuses generation's machinery: each input is one choice, its
 * FINISH event carries the pooled vector, and the answer goes out once every
 * choice has ended (gs_srv__gen_respond calls embed_respond through the shape). Its
 * hooks (gs_srv__embed_hooks) are generation's but for the events and the free.
 */
#include "server/daemon.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

/* OpenAI's cap on inputs in one request. */
#define MAX_INPUTS 2048

void gs_srv_embed_req_free(struct gs_srv_embed_req *e)
{
    if (!e)
        return;
    for (uint32_t i = 0; i < e->n_inputs; i++) {
        if (e->texts)
            gs_srv_buf_free(&e->texts[i]);
        if (e->ids)
            gs_free(e->ids[i]);
    }
    gs_free(e->texts);
    gs_free(e->ids);
    gs_free(e->n_ids);
    gs_free(e->model);
    gs_free(e);
}

/* Names the refused field for the error's param. */
static void set_param(char *param, size_t cap, const char *name)
{
    snprintf(param, cap, "%s", name);
}

/* One list of token ids, each below n_vocab; i is its index in input (-1: input itself). */
static enum gs_status take_ids(const json_t *a, int i, uint32_t n_vocab, int32_t **out,
                               uint32_t *n_out, char *param, size_t cap, struct gs_err *err)
{
    char where[32];
    snprintf(where, sizeof(where), i < 0 ? "input" : "input[%d]", i);
    size_t n = json_array_size(a);
    if (n == 0) {
        set_param(param, cap, "input");
        return gs_err_set(err, GS_INVAL, "%s: an empty list of token ids", where);
    }
    if (n > UINT32_MAX) {
        set_param(param, cap, "input");
        return gs_err_set(err, GS_INVAL, "%s: too many token ids", where);
    }
    int32_t *ids = gs_alloc_array(n, sizeof(*ids));
    if (!ids)
        return gs_err_set(err, GS_NOMEM, "out of memory");
    for (size_t k = 0; k < n; k++) {
        const json_t *v = json_array_get(a, k);
        json_int_t t = json_is_integer(v) ? json_integer_value(v) : -1;
        if (t < 0 || (uint64_t)t >= n_vocab) {
            gs_free(ids);
            set_param(param, cap, "input");
            return gs_err_set(err, GS_INVAL, "%s[%zu]: not a token id in [0, %u)", where, k,
                              n_vocab);
        }
        ids[k] = (int32_t)t;
    }
    *out = ids;
    *n_out = (uint32_t)n;
    return GS_OK;
}

/* The inputs: a string, strings, token ids, or lists of token ids. */
static enum gs_status take_input(const json_t *in, uint32_t n_vocab, struct gs_srv_embed_req *e,
                                 char *param, size_t cap, struct gs_err *err)
{
    const char *what =
        "must be a string, a list of strings, a list of token ids or a list of such lists";
    const bool one = json_is_string(in) || (json_is_array(in) && json_array_size(in) > 0 &&
                                            json_is_integer(json_array_get(in, 0)));
    size_t n = one ? 1 : json_array_size(in);
    if (!json_is_string(in) && !json_is_array(in)) {
        set_param(param, cap, "input");
        return gs_err_set(err, GS_INVAL, "input: %s", what);
    }
    if (n == 0) {
        set_param(param, cap, "input");
        return gs_err_set(err, GS_INVAL, "input: an empty list");
    }
    if (n > MAX_INPUTS) {
        set_param(param, cap, "input");
        return gs_err_set(err, GS_INVAL, "input: more than %d inputs", MAX_INPUTS);
    }
    e->ids = gs_calloc(n, sizeof(*e->ids));
    e->n_ids = gs_calloc(n, sizeof(*e->n_ids));
    if (!e->ids || !e->n_ids)
        return gs_err_set(err, GS_NOMEM, "out of memory");
    const bool text = json_is_string(one ? in : json_array_get(in, 0));
    if (text && !(e->texts = gs_calloc(n, sizeof(*e->texts))))
        return gs_err_set(err, GS_NOMEM, "out of memory");
    e->n_inputs = (uint32_t)n;
    if (one && !text)
        return take_ids(in, -1, n_vocab, &e->ids[0], &e->n_ids[0], param, cap, err);
    for (size_t i = 0; i < n; i++) {
        const json_t *v = one ? in : json_array_get(in, i);
        if (text != json_is_string(v) || (!text && !json_is_array(v))) {
            set_param(param, cap, "input");
            return gs_err_set(err, GS_INVAL, "input[%zu]: %s, all of one kind", i, what);
        }
        if (!text) {
            enum gs_status st =
                take_ids(v, (int)i, n_vocab, &e->ids[i], &e->n_ids[i], param, cap, err);
            if (st)
                return st;
            continue;
        }
        if (json_string_length(v) == 0) {
            set_param(param, cap, "input");
            return gs_err_set(err, GS_INVAL, "input[%zu]: an empty string", i);
        }
        gs_srv_buf_add(&e->texts[i], json_string_value(v), json_string_length(v));
        if (e->texts[i].failed)
            return gs_err_set(err, GS_NOMEM, "out of memory");
    }
    return GS_OK;
}

enum gs_status gs_srv_embed_parse(const char *body, size_t len, uint32_t n_vocab, uint32_t n_embd,
                                  struct gs_srv_embed_req **out, char *param, size_t param_cap,
                                  struct gs_err *err)
{
    *out = NULL;
    param[0] = '\0';
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return gs_err_set(err, GS_INVAL, "the body is not valid JSON: %s", je.text);
    struct gs_srv_embed_req *e = gs_calloc(1, sizeof(*e));
    enum gs_status st = e ? GS_OK : gs_err_set(err, GS_NOMEM, "out of memory");
    if (!st && !json_is_object(root))
        st = gs_err_set(err, GS_INVAL, "the body must be a JSON object");
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        if (st)
            break;
        if (!strcmp(key, "input")) {
            st = take_input(v, n_vocab, e, param, param_cap, err);
        } else if (!strcmp(key, "model")) {
            if (!json_is_string(v)) {
                set_param(param, param_cap, key);
                st = gs_err_set(err, GS_INVAL, "%s: must be a string", key);
            } else if (!(e->model = gs_strdup(json_string_value(v))))
                st = gs_err_set(err, GS_NOMEM, "out of memory");
        } else if (!strcmp(key, "encoding_format")) {
            const char *f = json_is_string(v) ? json_string_value(v) : "";
            e->base64 = !strcmp(f, "base64");
            if (!json_is_null(v) && strcmp(f, "float") && !e->base64) {
                set_param(param, param_cap, key);
                st = gs_err_set(err, GS_INVAL, "%s: must be \"float\" or \"base64\"", key);
            }
        } else if (!strcmp(key, "dimensions")) {
            if (!json_is_null(v) && (!json_is_integer(v) || json_integer_value(v) != n_embd)) {
                set_param(param, param_cap, "dimensions");
                st = gs_err_set(err, GS_INVAL,
                                "dimensions: this model's embeddings have %u dimensions and "
                                "cannot be shortened",
                                n_embd);
            }
        } else if (!strcmp(key, "user")) {
            if (!json_is_string(v) && !json_is_null(v)) {
                set_param(param, param_cap, key);
                st = gs_err_set(err, GS_INVAL, "%s: must be a string", key);
            }
        } else {
            set_param(param, param_cap, key);
            st = gs_err_set(err, GS_INVAL, "unknown field '%.64s'", key);
        }
    }
    if (!st && e->n_inputs == 0) {
        set_param(param, param_cap, "input");
        st = gs_err_set(err, GS_INVAL, "input: is required");
    }
    json_decref(root);
    if (st) {
        gs_srv_embed_req_free(e);
        return st;
    }
    *out = e;
    return GS_OK;
}

/* RFC 4648 base64 of n bytes, padded. */
static json_t *base64_json(const void *data, size_t n)
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const unsigned char *p = data;
    size_t out_len = 4 * ((n + 2) / 3);
    char *out = gs_malloc(out_len + 1);
    if (!out)
        return NULL;
    size_t w = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < n)
            v |= p[i + 2];
        out[w++] = abc[(v >> 18) & 63];
        out[w++] = abc[(v >> 12) & 63];
        out[w++] = i + 1 < n ? abc[(v >> 6) & 63] : '=';
        out[w++] = i + 2 < n ? abc[v & 63] : '=';
    }
    json_t *j = json_stringn(out, w);
    gs_free(out);
    return j;
}

/* One vector as OpenAI writes it: numbers, or base64 of little-endian float32. */
static json_t *vector_json(const float *v, uint32_t d, bool b64)
{
    if (b64) {
        unsigned char *bytes = gs_alloc_array(d, 4);
        if (!bytes)
            return NULL;
        for (uint32_t i = 0; i < d; i++) {
            uint32_t u;
            memcpy(&u, &v[i], 4);
            for (int k = 0; k < 4; k++)
                bytes[4 * i + k] = (unsigned char)(u >> (8 * k));
        }
        json_t *j = base64_json(bytes, (size_t)d * 4);
        gs_free(bytes);
        return j;
    }
    json_t *a = json_array();
    for (uint32_t i = 0; a && i < d; i++)
        json_array_append_new(a, json_real((double)v[i]));
    return a;
}

static enum MHD_Result embed_respond(struct gs_srv_req *r)
{
    const struct gs_srv_embed_req *e = r->embed;
    uint32_t d = r->srv->cfg.model.n_embd;
    for (uint32_t i = 0; i < r->n_choices; i++)
        if (!r->choices[i].embd)
            return gs_srv__respond_error(r, GS_SRV_E_UNAVAILABLE, NULL,
                                         "input %u was not embedded (%s)", i,
                                         gs_finish_name(r->choices[i].finish));
    json_t *data = json_array();
    uint64_t n_tokens = 0;
    for (uint32_t i = 0; data && i < r->n_choices; i++) {
        n_tokens += e->n_ids[i];
        json_array_append_new(data, json_pack("{s:s,s:i,s:o*}", "object", "embedding", "index",
                                              (int)i, "embedding",
                                              vector_json(r->choices[i].embd, d, e->base64)));
    }
    json_t *body = json_pack("{s:s,s:o,s:s,s:{s:I,s:I}}", "object", "list", "data", data, "model",
                             r->srv->cfg.model.id, "usage", "prompt_tokens", (json_int_t)n_tokens,
                             "total_tokens", (json_int_t)n_tokens);
    return gs_srv__respond_json(r, 200, body);
}

const struct gs_srv_shape gs_srv__embed_shape = {
    .id_prefix = "embd-",
    .respond = embed_respond,
};

/* Every input has its ids: one engine request each, then wait for them all. */
static enum MHD_Result embed_submit(struct gs_srv_req *r)
{
    struct gs_srv *s = r->srv;
    struct gs_srv_embed_req *e = r->embed;
    for (uint32_t i = 0; i < e->n_inputs; i++)
        if (e->n_ids[i] > s->cfg.model.n_ctx)
            return gs_srv__respond_error(
                r, GS_SRV_E_CONTEXT_LENGTH, "input",
                "input %u has %u tokens; the context length is %u (inputs are not truncated)", i,
                e->n_ids[i], s->cfg.model.n_ctx);
    if (!gs_srv__is_ready(s, NULL, 0))
        return gs_srv__respond_error(r, GS_SRV_E_UNAVAILABLE, NULL, "the server is draining");
    r->choices = gs_srv_arena_calloc(r->arena, e->n_inputs, sizeof(*r->choices));
    if (!r->choices)
        return gs_srv__respond_nomem(r);
    uint64_t base = s->next_sched_id;
    s->next_sched_id += e->n_inputs;
    r->n_choices = e->n_inputs;
    for (uint32_t i = 0; i < e->n_inputs; i++) {
        struct gs_srv_choice *c = &r->choices[i];
        c->sched_id = base + i;
        c->index = i;
        r->n_prompt += e->n_ids[i];
        struct gs_sched_request q = {.id = c->sched_id,
                                     .prompt = e->ids[i],
                                     .n_prompt = e->n_ids[i],
                                     .pooling = s->cfg.model.pooling};
        struct gs_err err;
        enum gs_status st = s->engine.submit(s->engine.ctx, &q, &err);
        if (st == GS_OK) {
            c->submitted = true;
            continue;
        }
        /* Nothing is answered in part: what was queued is cancelled. */
        for (uint32_t k = 0; k < i; k++)
            s->engine.cancel(s->engine.ctx, r->choices[k].sched_id);
        r->n_done = r->n_choices;
        if (st == GS_BUSY)
            return gs_srv__respond_error(r, GS_SRV_E_BUSY, NULL,
                                         "the server is at capacity; retry shortly (%s)", err.msg);
        return gs_srv__respond_error(r, gs_srv_err_from_status(st), "input", "input %u: %s", i,
                                     err.msg);
    }
    gs_srv__active_add(r);
    r->waiting = true;
    gs_srv__suspend(r);
    return MHD_YES;
}

static enum MHD_Result tokenize_next(struct gs_srv_req *r);

/* The pool tokenized input n_tokenized: keep its ids, go on with the next. */
static enum MHD_Result embed_tokenized(struct gs_srv_req *r)
{
    struct gs_srv_tok_job *j = &r->tok_job;
    struct gs_srv_embed_req *e = r->embed;
    j->done = false;
    gs_srv_buf_free(&j->text);
    uint32_t i = e->n_tokenized;
    if (j->st != GS_OK)
        return gs_srv__respond_error(r, gs_srv_err_from_status(j->st), "input", "input %u: %s", i,
                                     j->err.msg);
    if (j->n_ids == 0 || j->n_ids > UINT32_MAX)
        return gs_srv__respond_error(r, GS_SRV_E_BAD_REQUEST, "input",
                                     "input %u: no tokens to embed", i);
    e->ids[i] = j->ids;
    e->n_ids[i] = (uint32_t)j->n_ids;
    j->ids = NULL;
    e->n_tokenized++;
    return tokenize_next(r);
}

/* Texts go to the pool one at a time, so the loop never tokenizes. */
static enum MHD_Result tokenize_next(struct gs_srv_req *r)
{
    struct gs_srv_embed_req *e = r->embed;
    if (!e->texts || e->n_tokenized == e->n_inputs)
        return embed_submit(r);
    struct gs_srv_tok_job *j = &r->tok_job;
    const struct gs_srv_buf *t = &e->texts[e->n_tokenized];
    gs_srv_buf_add(&j->text, t->p, t->len);
    if (j->text.failed)
        return gs_srv__respond_error(r, GS_SRV_E_UNAVAILABLE, NULL, "out of memory");
    /* Client text never spells control tokens; BOS/EOS as the model adds them. */
    return gs_srv__tokenize_async(r, GS_TOK_ADD_SPECIAL, embed_tokenized);
}

enum MHD_Result gs_srv__embed_start(struct gs_srv_req *r)
{
    struct gs_srv *s = r->srv;
    r->shape = r->route->shape;
    char why[64];
    if (!gs_srv__is_ready(s, why, sizeof(why)))
        return gs_srv__respond_error(r, GS_SRV_E_UNAVAILABLE, NULL, "the server is %s",
                                     why[0] ? why : "not ready");
    if (!s->has_engine || !s->cfg.model.tok)
        return gs_srv__respond_error(r, GS_SRV_E_UNAVAILABLE, NULL, "no engine is running");
    char param[64];
    struct gs_err err;
    enum gs_status st = gs_srv_embed_parse(r->body.p ? r->body.p : "", r->body.len,
                                           gs_tok_n_vocab(s->cfg.model.tok), s->cfg.model.n_embd,
                                           &r->embed, param, sizeof(param), &err);
    if (st != GS_OK)
        return gs_srv__respond_error(r, gs_srv_err_from_status(st), param[0] ? param : NULL, "%s",
                                     err.msg);
    if (!gs_srv__model_name_ok(s, r->embed->model))
        return gs_srv__respond_error(r, GS_SRV_E_MODEL_NOT_FOUND, "model",
                                     "the model '%s' does not exist; this server serves '%s'",
                                     r->embed->model, s->cfg.model.id);
    r->created = (long long)time(NULL);
    return tokenize_next(r);
}

/* An input's events: its FINISH carries the vector. */
static void embed_event(struct gs_srv_req *r, const struct gs_sched_event *ev)
{
    struct gs_srv_choice *c = gs_srv__choice_of(r, ev->id);
    if (!c || (c->done && ev->kind != GS_SCHED_EV_VALIDATION))
        return; /* a late event for an input that has ended */
    if (ev->kind != GS_SCHED_EV_FINISH) {
        gs_srv__gen_settle(r);
        return;
    }
    struct gs_srv *s = r->srv;
    c->done = true;
    c->finish = ev->finish;
    c->stats = ev->stats;
    c->err_code = ev->err_code;
    snprintf(c->err_msg, sizeof(c->err_msg), "%s", ev->err_msg);
    if (ev->embedding && ev->n_embd == s->cfg.model.n_embd &&
        (c->embd = gs_alloc_array(ev->n_embd, sizeof(float))))
        memcpy(c->embd, ev->embedding, ev->n_embd * sizeof(float));
    else if (ev->finish == GS_FINISH_STOP) {
        c->finish = GS_FINISH_ERROR;
        c->err_code = GS_NOMEM;
        snprintf(c->err_msg, sizeof(c->err_msg), "no memory for the embedding");
    }
    s->metrics.prompt_tokens += ev->stats.n_prompt;
    r->n_done++;
    gs_srv__gen_settle(r);
}

/* The request's end: its body, then what generation's machinery allocated. */
static void embed_free(struct gs_srv_req *r)
{
    gs_srv_embed_req_free(r->embed);
    r->embed = NULL;
    gs_srv__gen_free(r);
}

/* Generation's hooks but for the events (and the body's free). */
const struct gs_srv_route_hooks gs_srv__embed_hooks = {
    .event = embed_event,
    .resume = gs_srv__gen_respond,
    .cancel = gs_srv__gen_cancel,
    .tick = gs_srv__gen_tick,
    .free = embed_free,
};
