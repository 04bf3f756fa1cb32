/*
 * server/jinja_prompt.c - chats rendered by the model's own Jinja chat
 * template (engine/jinja.h), unless --chat-template forces a built-in format.
 *
 * The template is parsed once, when the server is created; a model template
 * that does not parse leaves chats to the built-in format of its family,
 * which the log and /v1/models say. A chat renders with the messages as the
 * client sent them, tools and chat_template_kwargs when given, and
 * add_generation_prompt true; bos_token and eos_token are the vocabulary's,
 * passed as trusted variables that a request cannot replace. The renderer
 * tells which bytes of the prompt came from the request; control tokens are
 * recognised only in the rest, the template's own text.
 *
 * Threads: the loop thread only.
 */
#include "server/daemon.h"

#include "config/log.h"
#include "engine/tok.h"

#include <string.h>
#include <time.h>

static enum gs_status set_trusted(struct gs_srv_jinja *j, const struct gs_tok *tok)
{
    j->trusted = json_object();
    if (!j->trusted)
        return GS_NOMEM;
    if (!tok)
        return GS_OK;
    const struct gs_tok_special *sp = gs_tok_special(tok);
    static const char *const names[] = {"bos_token", "eos_token"};
    const int32_t ids[] = {sp->bos, sp->eos};
    for (int i = 0; i < 2; i++) {
        size_t n;
        const char *t = ids[i] >= 0 ? gs_tok_token_text(tok, ids[i], &n) : NULL;
        if (!t)
            continue;
        if (json_object_set_new(j->trusted, names[i], json_stringn(t, n)))
            return GS_NOMEM;
        if (i == 0 && !(j->bos_text = gs_strndup(t, n)))
            return GS_NOMEM;
    }
    return GS_OK;
}

enum gs_status gs_srv__jinja_init(struct gs_srv *s, const struct gs_srv_cfg *cfg,
                                  struct gs_err *err)
{
    struct gs_srv_jinja *j = &s->jinja;
    *j = (struct gs_srv_jinja){0};
    const char *src = cfg->model.chat_template;
    if (cfg->chat_template || !src)
        return GS_OK; /* a built-in format is forced, or the model has no template */
    struct gs_err perr = {0};
    const char *file = cfg->model.chat_template_file;
    if (file && gs_jinja_parse(src, strlen(src), NULL, &j->tmpl, &perr) != GS_OK)
        return gs_err_set(err, GS_FORMAT, "--chat-template-file %s: %s", file, perr.msg);
    if (!file && gs_jinja_parse(src, strlen(src), NULL, &j->tmpl, &perr) != GS_OK) {
        /* Chats still work, in the family's built-in format; say so and why. */
        gs_log(GS_LOG_WARN, "chat_template_unparsed", "error=%s fallback=%s", perr.msg,
               gs_srv_tmpl_name(s->tmpl));
        j->error = gs_strdup(perr.msg);
        return j->error ? GS_OK : gs_err_set(err, GS_NOMEM, "out of memory");
    }
    s->tool_format = gs_srv_tool_format_detect(src);
    s->thinks = gs_srv_think_detect(src);
    gs_log(GS_LOG_INFO, "tool_call_format", "format=%s", s->tool_format->name);
    j->origin = gs_strdup(file ? "file" : "gguf");
    if (!j->origin || set_trusted(j, cfg->model.tok) != GS_OK)
        return gs_err_set(err, GS_NOMEM, "out of memory");
    return GS_OK;
}

void gs_srv__jinja_free(struct gs_srv *s)
{
    struct gs_srv_jinja *j = &s->jinja;
    gs_jinja_free(j->tmpl);
    gs_free(j->origin);
    gs_free(j->error);
    gs_free(j->bos_text);
    json_decref(j->trusted);
    *j = (struct gs_srv_jinja){0};
}

/* The template's own text: the complement of the request's spans. */
static bool add_template_spans(struct gs_srv_spans *out, const struct gs_jinja_span *req,
                               size_t n_req, size_t len)
{
    out->v = gs_alloc_array(n_req + 1, sizeof(*out->v));
    if (!out->v)
        return false;
    out->cap = n_req + 1;
    size_t at = 0;
    for (size_t i = 0; i <= n_req; i++) {
        size_t end = i < n_req ? req[i].off : len;
        if (end > at)
            out->v[out->n++] = (struct gs_tok_span){.off = at, .len = end - at};
        if (i < n_req)
            at = req[i].off + req[i].len;
    }
    return true;
}

/* The variables of a chat: chat_template_kwargs first, so that they cannot
 * replace what the request says in its own fields. */
static json_t *chat_context(const struct gs_srv_gen *g)
{
    json_t *ctx = g->template_kwargs ? json_deep_copy(g->template_kwargs) : json_object();
    if (!ctx)
        return NULL;
    if (json_object_set(ctx, "messages", g->messages_json) ||
        json_object_set_new(ctx, "add_generation_prompt", json_true()) ||
        (g->tools_json && json_object_set(ctx, "tools", g->tools_json))) {
        json_decref(ctx);
        return NULL;
    }
    return ctx;
}

bool gs_srv__jinja_render(struct gs_srv_req *r, unsigned *flags, enum MHD_Result *ret)
{
    struct gs_srv_jinja *j = &r->srv->jinja;
    struct gs_srv_tok_job *job = &r->tok_job;
    json_t *ctx = chat_context(&r->gen);
    if (!ctx) {
        *ret = gs_srv__respond_error(r, GS_SRV_E_UNAVAILABLE, NULL, "out of memory");
        return false;
    }
    char *text = NULL;
    size_t n = 0, n_sp = 0;
    struct gs_jinja_span *sp = NULL;
    enum gs_jinja_fail fail;
    struct gs_err err = {0};
    enum gs_status st = gs_jinja_render_spans(j->tmpl, ctx, j->trusted, (int64_t)time(NULL), &text,
                                              &n, &sp, &n_sp, &fail, &err);
    json_decref(ctx);
    if (st != GS_OK) {
        if (fail == GS_JINJA_FAIL_NOMEM)
            *ret = gs_srv__respond_error(r, GS_SRV_E_UNAVAILABLE, NULL, "out of memory");
        else if (fail == GS_JINJA_FAIL_RAISED) /* the template's own words */
            *ret = gs_srv__respond_error(r, GS_SRV_E_BAD_REQUEST, "messages", "%s", err.msg);
        else
            *ret = gs_srv__respond_error(r, GS_SRV_E_BAD_REQUEST, "messages",
                                         "the chat template cannot render these messages: %s",
                                         err.msg);
        return false;
    }
    gs_srv_buf_add(&job->text, text, n);
    bool spans_ok = add_template_spans(&job->spans, sp, n_sp, n);
    /* A template that writes bos_token itself must not get a second BOS. */
    size_t bos_len = j->bos_text ? strlen(j->bos_text) : 0;
    bool wrote_bos = bos_len && n >= bos_len && memcmp(text, j->bos_text, bos_len) == 0;
    *flags = wrote_bos ? 0 : GS_TOK_ADD_SPECIAL;
    gs_free(text);
    gs_free(sp);
    if (!spans_ok || job->text.failed) {
        *ret = gs_srv__respond_error(r, GS_SRV_E_UNAVAILABLE, NULL, "out of memory");
        return false;
    }
    return true;
}

enum MHD_Result gs_srv__apply_template(struct gs_srv_req *r)
{
    struct gs_srv *s = r->srv;
    if (!s->cfg.model.tok)
        return gs_srv__respond_error(r, GS_SRV_E_UNAVAILABLE, NULL, "no tokenizer loaded");
    const struct gs_srv_parse_limits pl = gs_srv__parse_limits(s);
    char param[64];
    struct gs_err err;
    enum gs_status st = gs_srv_gen_parse(r->body.p ? r->body.p : "", r->body.len, true, &pl,
                                         &r->gen, param, sizeof(param), &err);
    if (st != GS_OK)
        return gs_srv__respond_error(r, gs_srv_err_from_status(st), param, "%s", err.msg);
    struct gs_srv_tok_job *job = &r->tok_job;
    enum MHD_Result ret;
    unsigned flags;
    if (s->jinja.tmpl) {
        if (!gs_srv__jinja_render(r, &flags, &ret))
            return ret;
    } else {
        gs_srv_tmpl_render(s->tmpl, r->gen.msgs, r->gen.n_msgs, &job->text);
    }
    if (job->text.failed)
        return gs_srv__respond_error(r, GS_SRV_E_UNAVAILABLE, NULL, "out of memory");
    json_t *prompt = gs_srv_json_text(job->text.p ? job->text.p : "", job->text.len);
    const char *name = s->jinja.tmpl ? "jinja" : gs_srv_tmpl_name(s->tmpl);
    return gs_srv__respond_json(r, 200,
                                json_pack("{s:o,s:s}", "prompt", prompt, "chat_template", name));
}

/* /apply-template parses a chat body into r->gen. */
static void apply_template_free(struct gs_srv_req *r)
{
    gs_srv_gen_free(&r->gen);
}

const struct gs_srv_route_hooks gs_srv__apply_template_hooks = {
    .free = apply_template_free,
};
