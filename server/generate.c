/*
 * server/generate.c - /v1/chat/completions, /v1/completions and /v1/messages:
 * from a parsed request to engine requests (one per choice), and from engine
 * events to SSE chunks or one JSON answer. One path serves every API; where
 * their answers differ it calls the request's shape (struct gs_srv_shape in
 * daemon.h), which the route's row in routes.c names: OpenAI's in openai.c,
 * Anthropic's in anthropic.c, the Responses API's in responses.c. The HTTP layer
 * reaches this file only through the routes' hooks (gs_srv__gen_hooks, and those of
 * responses.c and embed.c, which share this machinery); it calls below itself only
 * (loop.c, respond.c, validation.c, openai.c's renderers, the pure parsers).
 *
 * Text goes through two stages per choice: the tokenizer's streaming decoder
 * releases only complete UTF-8, and the stop-string matcher holds back what
 * could still become a stop string. A stop string found ends the choice with
 * finish_reason "stop"; the engine is told to cancel the sequence.
 */
#include "server/daemon.h"

#include "config/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

enum gs_srv_ekind gs_srv__unfinished_kind(const struct gs_srv_choice *c, const char **msg)
{
    if (c->finish == GS_FINISH_ERROR) {
        *msg = c->err_msg;
        return gs_srv_err_from_status(c->err_code);
    }
    *msg = "the server ended the request before its answer was whole (shutting down)";
    return GS_SRV_E_UNAVAILABLE;
}

/* Choice c's released text to the stream, fin: with its end; dropped once the stream
 * has ended for a client that stopped reading. */
static void stream_text(struct gs_srv_req *r, struct gs_srv_choice *c, bool fin)
{
    if (r->slow_reader) {
        c->text.len = 0;
        json_decref(c->logprobs);
        c->logprobs = NULL;
        return;
    }
    r->shape->stream_text(r, c, fin);
}

static void submit_deferred(struct gs_srv_req *r, const struct gs_srv_choice *first);

/* ---- engine events -------------------------------------------------------------------------- */

/*
 * A control token that spells one of the format's markers ([TOOL_CALLS] and [ARGS] in
 * Mistral's tekken vocabulary) has no text in the stream; the reader needs it. Any other
 * control token stays invisible.
 */
static const char *marker_piece(struct gs_srv_req *r, struct gs_srv_choice *c, int32_t token,
                                size_t *len)
{
    size_t n = 0;
    const char *t = gs_tok_token_text(r->srv->cfg.model.tok, token, &n);
    const char *marks[] = {c->tools.f->open, "[ARGS]", "[CALL_ID]"};
    for (size_t i = 0; t && i < GS_ARRAY_LEN(marks); i++)
        if (strlen(marks[i]) == n && !memcmp(t, marks[i], n)) {
            *len = n;
            return t;
        }
    *len = 0;
    return "";
}

/* A call id: "call_" and 24 random letters and digits, or 9 of them where the model's
 * template checks for that (Mistral's). */
static void call_id(const struct gs_srv_choice *c, char *out, size_t cap)
{
    static const char alnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    unsigned char rnd[24];
    size_t n = c->tools.f->short_ids ? 9 : 24, at = 0;
    if (getrandom(rnd, n, GRND_NONBLOCK) != (ssize_t)n) /* then still unique enough in-process */
        for (size_t i = 0; i < n; i++)
            rnd[i] = (unsigned char)((gs_now_ns() >> (i % 8)) + i * 131 + c->sched_id);
    if (!c->tools.f->short_ids)
        at = (size_t)snprintf(out, cap, "call_");
    for (size_t i = 0; i < n && at + 1 < cap; i++)
        out[at++] = alnum[rnd[i] % (sizeof(alnum) - 1)];
    out[at] = '\0';
}

/*
 * One entry of the reader's output into c's calls and, for the stream, OpenAI's deltas: a
 * call's first delta carries its index, id, type and name (arguments ""), the next ones
 * its index and arguments. A whole call ({"name","arguments"}) gives both at once; a live
 * call gives the first when its name is read ({"name"}) and one delta per fragment of its
 * arguments ({"arguments"}) after it.
 */
static bool take_call_entry(struct gs_srv_choice *c, json_t *e)
{
    json_t *name = json_object_get(e, "name"), *args = json_object_get(e, "arguments");
    size_t index = json_array_size(c->calls);
    if (name) {
        char id[40];
        call_id(c, id, sizeof(id));
        if (json_array_append_new(c->calls,
                                  json_pack("{s:s,s:s,s:{s:O,s:s}}", "id", id, "type", "function",
                                            "function", "name", name, "arguments", "")) ||
            json_array_append_new(c->call_deltas,
                                  json_pack("{s:i,s:s,s:s,s:{s:O,s:s}}", "index", (int)index, "id",
                                            id, "type", "function", "function", "name", name,
                                            "arguments", "")))
            return false;
    }
    if (!args || !json_array_size(c->calls))
        return true;
    index = json_array_size(c->calls) - 1;
    json_t *fn = json_object_get(json_array_get(c->calls, index), "function");
    const char *had = json_string_value(json_object_get(fn, "arguments"));
    struct gs_srv_buf b = {0};
    gs_srv_buf_adds(&b, had ? had : "");
    gs_srv_buf_add(&b, json_string_value(args), json_string_length(args));
    bool ok = !b.failed && !json_object_set_new(fn, "arguments", json_stringn(b.p, b.len)) &&
              !json_array_append_new(c->call_deltas, json_pack("{s:i,s:{s:O}}", "index", (int)index,
                                                               "function", "arguments", args));
    gs_srv_buf_free(&b);
    return ok;
}

/* Passes src (then emptied) through c's tool-call reader (fin: the text is over): content
 * to c->text, calls into c->calls and c->call_deltas. */
static void read_calls(struct gs_srv_req *r, struct gs_srv_choice *c, struct gs_srv_buf *src,
                       bool fin)
{
    json_t *found = json_array();
    bool ok = found &&
              gs_srv_tool_reader_feed(&c->tools, src->p ? src->p : "", src->len, &c->text, found);
    src->len = 0;
    if (ok && fin)
        ok = gs_srv_tool_reader_finish(&c->tools, &c->text, found);
    if (c->tools.malformed[0]) {
        gs_log(GS_LOG_WARN, "tool_call_malformed", "id=%s choice=%u format=%s reason=%s", r->id,
               c->index, c->tools.f->name, c->tools.malformed);
        c->tools.malformed[0] = '\0';
    }
    size_t i;
    json_t *e;
    json_array_foreach(found, i, e)
    {
        ok = ok && take_call_entry(c, e);
    }
    json_decref(found);
    if (!ok)
        c->text.failed = true; /* out of memory: the rest is lost, as with any full buffer */
}

/* c's released text through the thinking splitter and the tool-call reader, as each is
 * on (fin: the text is over). */
static void pass_text(struct gs_srv_req *r, struct gs_srv_choice *c, bool fin)
{
    struct gs_srv_buf *src = &c->released;
    if (c->think_on) {
        bool ok = gs_srv_think_feed(&c->think, c->released.p ? c->released.p : "", c->released.len,
                                    &c->reasoning, &c->answer);
        c->released.len = 0;
        if (ok && fin)
            ok = gs_srv_think_finish(&c->think, &c->reasoning, &c->answer);
        if (!ok)
            c->text.failed = true; /* out of memory, as above */
        src = &c->answer;
    }
    if (c->tools_on) {
        read_calls(r, c, src, fin);
    } else {
        gs_srv_buf_add(&c->text, src->p ? src->p : "", src->len);
        src->len = 0;
    }
}

static void on_token(struct gs_srv_req *r, struct gs_srv_choice *c, const struct gs_sched_event *ev)
{
    struct gs_srv *s = r->srv;
    double now = gs_now_ms();
    if (c->n_tokens == 0) {
        c->t_first_ms = now;
        if (c->index == 0)
            gs_srv_hist_observe(&s->metrics.ttft, (now - r->t_start_ms) / 1000.0);
    } else {
        gs_srv_hist_observe(&s->metrics.itl, (now - c->t_last_ms) / 1000.0);
    }
    c->t_last_ms = now;
    c->n_tokens++;
    if (c->stop_hit)
        return;
    const char *piece;
    size_t len;
    struct gs_err err;
    if (gs_tok_decoder_feed(c->dec, ev->token, &piece, &len, &err) != GS_OK)
        len = 0;
    if (r->gen.logprobs) {
        /* OpenAI's entries, kept until they are sent (streams) or answered. */
        if (!c->logprobs)
            c->logprobs = json_array();
        json_array_append_new(c->logprobs, gs_srv__openai_logprob(r->srv->cfg.model.tok, ev,
                                                                  (uint32_t)r->gen.top_logprobs));
    }
    if (r->val.top_k)
        gs_srv__val_token(r, c, ev);
    if (!len && c->tools_on)
        piece = marker_piece(r, c, ev->token, &len);
    bool staged = c->tools_on || c->think_on;
    if (gs_srv_stop_feed(&c->stop, piece, len, staged ? &c->released : &c->text)) {
        c->stop_hit = true;
        c->n_tokens_at_stop = c->n_tokens;
        s->engine.cancel(s->engine.ctx, c->sched_id);
    }
    if (staged)
        pass_text(r, c, c->stop_hit);
    if (r->streaming &&
        (c->text.len || c->reasoning.len || r->gen.logprobs || json_array_size(c->call_deltas)))
        stream_text(r, c, false);
}

static void on_finish(struct gs_srv_req *r, struct gs_srv_choice *c,
                      const struct gs_sched_event *ev)
{
    struct gs_srv *s = r->srv;
    c->done = true;
    c->finish = ev->finish;
    if (r->drain_abort && ev->finish == GS_FINISH_CANCELLED)
        c->finish = GS_FINISH_ABORT;
    c->stats = ev->stats;
    c->err_code = ev->err_code;
    snprintf(c->err_msg, sizeof(c->err_msg), "%s", ev->err_msg);
    if (!c->stop_hit) {
        const char *rest;
        size_t len;
        bool staged = c->tools_on || c->think_on;
        struct gs_srv_buf *dst = staged ? &c->released : &c->text;
        gs_tok_decoder_flush(c->dec, &rest, &len);
        if (gs_srv_stop_feed(&c->stop, rest, len, dst)) {
            c->stop_hit = true;
            c->n_tokens_at_stop = c->n_tokens;
        } else
            gs_srv_stop_flush(&c->stop, dst);
        if (staged)
            pass_text(r, c, true);
    }
    s->metrics.generated_tokens += gs_srv__choice_tokens(c);
    if (c->index == 0) {
        s->metrics.prompt_tokens += r->n_prompt;
        s->metrics.cached_prompt_tokens += ev->stats.n_prompt_cached;
        gs_srv_hist_observe(&s->metrics.queue, ev->stats.queue_ms / 1000.0);
    }
    r->n_done++;
    gs_srv__val_finish(r, c, ev);
    if (r->streaming) {
        stream_text(r, c, true);
        gs_srv__gen_try_end(r);
    }
}

/* Whether every choice has ended and no validation report is awaited. */
static bool complete(const struct gs_srv_req *r)
{
    return r->n_done == r->n_choices && r->val.n_pending == 0;
}

void gs_srv__gen_try_end(struct gs_srv_req *r)
{
    if (!r->streaming || r->stream_end || r->n_done < r->n_choices)
        return;
    if (!complete(r)) {
        /* The text is complete; the report is awaited. Say so once. */
        if (!r->val.pending_told && r->shape->stream_pending)
            r->shape->stream_pending(r);
        r->val.pending_told = true;
        return;
    }
    r->shape->stream_end(r);
    r->stream_end = true;
}

/*
 * A stream whose client does not read piles up in r->out. The verdict waits for
 * the client to have had its chance: the loop may format a long run of events at
 * once (an engine that got ahead of a busy loop thread), and those bytes are
 * queued, not refused. So the limit is judged after each round of engine events,
 * once MHD has run (gs_srv__gen_after_round): a stream still over it at the end of
 * two rounds with no read by MHD between (gs_srv__sse_read resets the count) is
 * cut: cancelled if it still generates, its unsent events dropped if it has
 * ended, and closed with an error event. A stream that ends over the limit stays
 * on the active list until it is judged or its client has caught up, so an
 * answer that a lagging loop formatted in two rounds is judged like any other.
 * A client's memory on this server stays bounded by the limit plus two rounds of
 * its events, and at most its own answer.
 */
#define STALLED_ROUNDS 2

/* Whether r is a stream over --max-stream-buffer-bytes that has not been cut. */
static bool over_limit(const struct gs_srv_req *r)
{
    uint64_t cap = r->srv->cfg.limits.max_stream_buffer_bytes;
    return r->streaming && !r->slow_reader && cap && r->out.len > cap;
}

/* An ended stream's queue loses its whole events past the one in flight (MHD may have
 * sent part of it: events end with a blank line), so the error event follows a
 * complete one. */
static void drop_unsent_events(struct gs_srv_req *r)
{
    const char *p = r->out.p;
    for (size_t i = 0; i + 1 < r->out.len; i++)
        if (p[i] == '\n' && p[i + 1] == '\n') {
            r->out.len = i + 2;
            return;
        }
}

void gs_srv__gen_after_round(struct gs_srv_req *r)
{
    struct gs_srv *s = r->srv;
    if (!over_limit(r)) {
        r->stalled_rounds = 0;
        if (complete(r))
            gs_srv__active_remove(r); /* an ended stream whose client has caught up */
        return;
    }
    if (++r->stalled_rounds < STALLED_ROUNDS)
        return;
    uint64_t cap = s->cfg.limits.max_stream_buffer_bytes;
    gs_log(GS_LOG_WARN, "slow_reader",
           "id=%s queued_bytes=%zu max_stream_buffer_bytes=%llu ended=%s", r->id, r->out.len,
           (unsigned long long)cap, r->stream_end ? "true" : "false");
    r->slow_reader = true;
    s->metrics.slow_readers++;
    char msg[200];
    snprintf(msg, sizeof(msg),
             "the client did not read the stream: %zu bytes were waiting (limit %llu); %s",
             r->out.len, (unsigned long long)cap,
             r->stream_end ? "the rest of the answer was dropped" : "the request was cancelled");
    if (r->stream_end)
        drop_unsent_events(r);
    else
        gs_srv__gen_cancel(r);
    r->shape->stream_fail(r, GS_SRV_E_SLOW_READER, msg);
    r->stream_end = true;
    gs_srv__resume(r);
    if (complete(r))
        gs_srv__active_remove(r);
}

void gs_srv__gen_settle(struct gs_srv_req *r)
{
    gs_srv__gen_try_end(r);
    if (r->streaming ? r->out.len > 0 : complete(r))
        gs_srv__resume(r);
    if (complete(r) && !over_limit(r))
        gs_srv__active_remove(r);
}

void gs_srv__gen_event(struct gs_srv_req *r, const struct gs_sched_event *ev)
{
    struct gs_srv_choice *c = gs_srv__choice_of(r, ev->id);
    if (!c || (c->done && ev->kind != GS_SCHED_EV_VALIDATION))
        return; /* a late event for a choice that has ended */
    if (ev->kind == GS_SCHED_EV_VALIDATION) {
        if (!c->val.pending)
            return; /* timed out already */
        gs_srv__val_report(r, c, ev);
        gs_srv__gen_settle(r);
        return;
    }
    if (ev->kind == GS_SCHED_EV_TOKEN)
        on_token(r, c, ev);
    else
        on_finish(r, c, ev);
    if (r->deferred && c->index == 0)
        submit_deferred(r, c);
    gs_srv__gen_settle(r);
}

void gs_srv__gen_tick(struct gs_srv_req *r, double now_ms)
{
    if (gs_srv__val_expire(r, now_ms))
        gs_srv__gen_settle(r);
}

bool gs_srv__gen_cancel(struct gs_srv_req *r)
{
    struct gs_srv *s = r->srv;
    if (!r->n_choices || (r->n_done == r->n_choices && !r->val.n_pending))
        return false; /* nothing is awaited */
    if (r->deferred) {
        /* The choices not yet submitted end here, as the first will. */
        r->deferred = false;
        for (uint32_t i = 1; i < r->n_choices; i++)
            if (!r->choices[i].submitted && !r->choices[i].done) {
                struct gs_srv_choice *c = &r->choices[i];
                c->done = true;
                c->finish = r->drain_abort ? GS_FINISH_ABORT : GS_FINISH_CANCELLED;
                r->n_done++;
                if (r->streaming) {
                    stream_text(r, c, true);
                    gs_srv__gen_try_end(r);
                }
            }
    }
    for (uint32_t i = 0; i < r->n_choices; i++)
        if (!r->choices[i].done && r->choices[i].submitted && s->has_engine)
            s->engine.cancel(s->engine.ctx, r->choices[i].sched_id);
    /* Reports still awaited are dropped in the engine; the answer says so. */
    if (r->val.n_pending) {
        gs_srv__val_give_up(r, GS_SRV_VAL_ERROR, "cancelled");
        gs_srv__gen_try_end(r);
        if (r->drain_abort)
            gs_srv__resume(r);
    }
    return true;
}

void gs_srv__gen_free(struct gs_srv_req *r)
{
    for (uint32_t i = 0; i < r->n_choices; i++) {
        struct gs_srv_choice *c = &r->choices[i];
        gs_tok_decoder_free(c->dec);
        gs_srv_stop_deinit(&c->stop);
        gs_srv_buf_free(&c->text);
        json_decref(c->logprobs);
        json_decref(c->val.report);
        json_decref(c->val.top);
        gs_srv_tool_reader_deinit(&c->tools);
        gs_srv_think_deinit(&c->think);
        gs_srv_buf_free(&c->reasoning);
        gs_srv_buf_free(&c->answer);
        gs_srv_buf_free(&c->released);
        json_decref(c->calls);
        json_decref(c->call_deltas);
        gs_free(c->embd);
    }
    gs_srv_gen_free(&r->gen);
    r->choices = NULL;
    r->n_choices = 0;
}

/* ---- the final JSON answer ------------------------------------------------------------------ */

enum MHD_Result gs_srv__gen_respond(struct gs_srv_req *r)
{
    r->waiting = false;
    for (uint32_t i = 0; i < r->n_choices; i++) {
        struct gs_srv_choice *c = &r->choices[i];
        if (c->finish == GS_FINISH_ERROR && !c->stop_hit)
            return gs_srv__respond_error(r, gs_srv_err_from_status(c->err_code), NULL,
                                         "generation failed: %s", c->err_msg);
    }
    return r->shape->respond(r);
}

/* ---- starting a request --------------------------------------------------------------------- */

/* r->prompt becomes a copy of ids[n] in r's arena, and ids (gs_malloc'd) is freed at
 * once: the tokenizer's result comes from a pool thread's heap, where it would stay
 * among that thread's allocations until the request ends. False: out of memory. */
static bool take_prompt(struct gs_srv_req *r, int32_t *ids, size_t n)
{
    r->n_prompt = (uint32_t)GS_MIN(n, UINT32_MAX);
    r->prompt = r->n_prompt ? gs_srv_arena_calloc(r->arena, r->n_prompt, sizeof(*ids)) : NULL;
    if (r->prompt)
        memcpy(r->prompt, ids, r->n_prompt * sizeof(*ids));
    gs_free(ids);
    return r->prompt || !r->n_prompt;
}

static enum MHD_Result tokenize_prompt(struct gs_srv_req *r)
{
    struct gs_srv *s = r->srv;
    struct gs_srv_gen *g = &r->gen;
    if (g->prompt_ids) {
        int32_t *ids = g->prompt_ids;
        g->prompt_ids = NULL;
        return take_prompt(r, ids, g->n_prompt_ids) ? MHD_YES : gs_srv__respond_nomem(r);
    }
    struct gs_srv_tok_job *j = &r->tok_job;
    /* Only the template's own text may spell control tokens; a completion's
     * prompt may ask for them with parse_special. */
    unsigned flags = GS_TOK_ADD_SPECIAL;
    enum MHD_Result ret;
    if (g->chat && s->jinja.tmpl) {
        if (!gs_srv__jinja_render(r, &flags, &ret))
            return ret;
        r->think_open = gs_srv_think_prompt_opens(j->text.p ? j->text.p : "", j->text.len);
    } else if (g->chat) {
        gs_srv_tmpl_render_spans(s->tmpl, g->msgs, g->n_msgs, &j->text, &j->spans);
    } else {
        gs_srv_buf_add(&j->text, g->prompt, g->prompt_len);
    }
    /* The answer continues the final assistant message: its text is the client's, so
     * it is outside the template's spans. */
    if (g->prefill)
        gs_srv_buf_adds(&j->text, g->prefill);
    if (j->text.failed || j->spans.failed)
        return gs_srv__respond_error(r, GS_SRV_E_UNAVAILABLE, NULL, "out of memory");
    return gs_srv__tokenize_async(r, flags | (g->parse_special ? GS_TOK_PARSE_SPECIAL : 0),
                                  gs_srv__gen_continue);
}

/* Takes the pool's result; answers 400 itself for a bad or empty prompt. */
static bool take_tokens(struct gs_srv_req *r, enum MHD_Result *ret)
{
    struct gs_srv_tok_job *j = &r->tok_job;
    gs_srv_buf_free(&j->text);
    gs_srv_spans_free(&j->spans);
    if (j->st != GS_OK) {
        *ret = gs_srv__respond_error(r, gs_srv_err_from_status(j->st),
                                     r->gen.chat ? "messages" : "prompt", "%s", j->err.msg);
        return false;
    }
    int32_t *ids = j->ids;
    j->ids = NULL;
    if (!take_prompt(r, ids, j->n_ids)) {
        *ret = gs_srv__respond_nomem(r);
        return false;
    }
    if (r->n_prompt == 0) {
        *ret = gs_srv__respond_error(r, GS_SRV_E_BAD_REQUEST, "prompt", "the prompt is empty");
        return false;
    }
    return true;
}

/* Context check: the prompt plus max_tokens must fit; never truncated. */
static bool check_context(struct gs_srv_req *r, enum MHD_Result *ret)
{
    const struct gs_srv_model_info *m = &r->srv->cfg.model;
    uint64_t want = (uint64_t)r->n_prompt + (r->gen.max_tokens ? r->gen.max_tokens : 1);
    if (want <= m->n_ctx)
        return true;
    *ret = gs_srv__respond_error(
        r, GS_SRV_E_CONTEXT_LENGTH, r->gen.chat ? "messages" : "prompt",
        "This model's maximum context length is %u tokens. However, you requested %llu tokens "
        "(%u in the %s, %u for the completion). Please reduce the length of the %s or "
        "max_tokens.",
        m->n_ctx, (unsigned long long)want, r->n_prompt, r->gen.chat ? "messages" : "prompt",
        r->gen.max_tokens ? r->gen.max_tokens : 1, r->gen.chat ? "messages" : "prompt");
    return false;
}

static uint64_t random_seed(void)
{
    uint64_t seed;
    if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) != (ssize_t)sizeof(seed))
        seed = (uint64_t)time(NULL) ^ gs_now_ns();
    return seed & INT64_MAX; /* a seed a client can send back (JSON integers are signed) */
}

/* The model's tokens for grammar masks, built once, on first use: most
 * deployments never pay its memory (some 18 MB for a 152k vocabulary). */
static enum gs_status grammar_vocab(struct gs_srv *s, struct gs_err *err)
{
    if (s->grammar_vocab)
        return GS_OK;
    const struct gs_tok *tok = s->cfg.model.tok;
    uint32_t n = gs_tok_n_vocab(tok);
    const char **piece = gs_alloc_array(n, sizeof(*piece));
    uint32_t *len = gs_alloc_array(n, sizeof(*len));
    enum gs_status st = GS_NOMEM;
    if (piece && len) {
        for (uint32_t i = 0; i < n; i++) {
            size_t l = 0;
            /* Control tokens have no text: the grammar never allows them;
             * the scheduler adds end-of-generation where it may end. */
            piece[i] = gs_tok_piece(tok, (int32_t)i, 0, &l);
            len[i] = (uint32_t)l;
        }
        st = gs_grammar_vocab_new(piece, len, n, &s->grammar_vocab, err);
    } else {
        gs_err_set(err, GS_NOMEM, "no memory for the grammar vocabulary");
    }
    gs_free(piece);
    gs_free(len);
    return st;
}

static enum gs_status submit_choice(struct gs_srv_req *r, uint32_t i, struct gs_err *err)
{
    struct gs_srv *s = r->srv;
    struct gs_srv_gen *g = &r->gen;
    enum gs_status vst = g->grammar ? grammar_vocab(s, err) : GS_OK;
    if (vst)
        return vst;
    struct gs_sched_request q = {
        .id = r->choices[i].sched_id,
        .prompt = r->prompt,
        .n_prompt = r->n_prompt,
        .max_tokens = r->max_tokens,
        .ignore_eos = g->ignore_eos,
        .n_top_logprobs = (uint32_t)g->top_logprobs,
        .want_logprobs = g->logprobs,
        .validate = r->val.on,
        .sampling = g->sp,
        .grammar = g->grammar,
        .grammar_vocab = s->grammar_vocab,
        .grammar_trigger = g->grammar_trigger,
    };
    if (r->val.top_k > q.n_top_logprobs)
        q.n_top_logprobs = r->val.top_k;
    /* Choices differ by seed, so that n > 1 with sampling gives n answers. */
    q.sampling.seed = r->seed + i;
    enum gs_status st = s->engine.submit(s->engine.ctx, &q, err);
    r->choices[i].submitted = st == GS_OK;
    return st;
}

/*
 * Choices after the first are submitted once the first has its prompt in
 * the KV cache (its first event), so that they find the prompt's full pages
 * in the prefix cache instead of computing them again. A choice that cannot
 * be queued then ends with an error; the others go on.
 */
static void submit_deferred(struct gs_srv_req *r, const struct gs_srv_choice *first)
{
    r->deferred = false;
    bool give_up =
        first->done && (first->finish == GS_FINISH_ERROR || first->finish == GS_FINISH_CANCELLED ||
                        first->finish == GS_FINISH_ABORT);
    for (uint32_t i = 1; i < r->n_choices; i++) {
        struct gs_srv_choice *c = &r->choices[i];
        struct gs_err err = {0};
        enum gs_status st = give_up ? GS_CANCELLED : submit_choice(r, i, &err);
        if (st == GS_OK)
            continue;
        struct gs_sched_event ev = {.kind = GS_SCHED_EV_FINISH, .id = c->sched_id};
        ev.finish = give_up ? first->finish : GS_FINISH_ERROR;
        ev.err_code = give_up ? first->err_code : st;
        snprintf(ev.err_msg, sizeof(ev.err_msg), "%s", give_up ? first->err_msg : err.msg);
        gs_srv__gen_event(r, &ev);
    }
}

static enum MHD_Result submit_all(struct gs_srv_req *r)
{
    struct gs_srv *s = r->srv;
    struct gs_srv_gen *g = &r->gen;
    r->max_tokens = g->max_tokens;
    if (!r->max_tokens)
        r->max_tokens = GS_MIN(s->cfg.limits.max_tokens, s->cfg.model.n_ctx - r->n_prompt);
    r->seed = g->has_seed ? g->sp.seed : random_seed();
    gs_srv__val_decide(r);
    r->choices = gs_srv_arena_calloc(r->arena, g->n, sizeof(*r->choices));
    if (!r->choices)
        return gs_srv__respond_nomem(r);
    uint64_t base = s->next_sched_id;
    s->next_sched_id += g->n;
    for (uint32_t i = 0; i < g->n; i++) {
        struct gs_srv_choice *c = &r->choices[i];
        c->sched_id = base + i;
        c->index = i;
        c->text.arena = c->released.arena = c->answer.arena = c->reasoning.arena = r->arena;
        gs_srv_stop_init(&c->stop, g->stop, g->n_stop);
        c->stop.held.arena = r->arena;
        if (g->chat && g->api == GS_SRV_API_OPENAI && s->jinja.tmpl && s->thinks &&
            !g->reasoning_inline) {
            c->think_on = true;
            gs_srv_think_init(&c->think, r->think_open);
            c->think.held.arena = r->arena;
        }
        if (g->chat && g->n_tools && g->tool_choice != GS_SRV_TOOL_CHOICE_NONE) {
            c->tools_on = true;
            gs_srv_tool_reader_init(&c->tools, g->tool_format, g->tools, g->n_tools);
            c->tools.held.arena = r->arena;
            /* Under a grammar from the first token a call cannot go wrong but by being cut
             * off: its arguments may stream as they come. */
            c->tools.live = g->tool_choice == GS_SRV_TOOL_CHOICE_REQUIRED ||
                            g->tool_choice == GS_SRV_TOOL_CHOICE_NAMED;
            if (!(c->calls = json_array()) || !(c->call_deltas = json_array()))
                return gs_srv__respond_error(r, GS_SRV_E_UNAVAILABLE, NULL, "out of memory");
        }
        struct gs_err err;
        /* The answer continues the prompt: its first piece keeps its space,
         * chat included, as llama.cpp's server sends each piece as it is. */
        if (gs_tok_decoder_new(s->cfg.model.tok, GS_TOK_CONTINUATION, &c->dec, &err) != GS_OK)
            return gs_srv__respond_error(r, GS_SRV_E_UNAVAILABLE, NULL, "%s", err.msg);
    }
    r->n_choices = g->n;
    if (!g->chat && g->echo && g->prompt)
        for (uint32_t i = 0; i < g->n; i++)
            gs_srv_buf_add(&r->choices[i].text, g->prompt, g->prompt_len);
    struct gs_err err;
    enum gs_status st = submit_choice(r, 0, &err);
    if (st != GS_OK) {
        r->n_done = r->n_choices; /* nothing left to cancel or wait for */
        if (st == GS_BUSY)
            return gs_srv__respond_error(r, GS_SRV_E_BUSY, NULL,
                                         "the server is at capacity; retry shortly (%s)", err.msg);
        return gs_srv__respond_error(r, gs_srv_err_from_status(st), NULL, "%s", err.msg);
    }
    r->deferred = g->n > 1;
    return MHD_YES;
}

static enum MHD_Result start_stream(struct gs_srv_req *r)
{
    r->streaming = true;
    r->t_last_out_ms = gs_now_ms();
    r->shape->stream_open(r);
    struct MHD_Response *resp = gs_srv__sse_response(r);
    if (!resp)
        return MHD_NO;
    if (r->gen.ignored[0])
        MHD_add_response_header(resp, "X-Ignored-Fields", r->gen.ignored);
    r->status = 200;
    enum MHD_Result ret = MHD_queue_response(r->conn, 200, resp);
    MHD_destroy_response(resp);
    return ret;
}

bool gs_srv__gen_begin(struct gs_srv_req *r, enum MHD_Result *ret)
{
    struct gs_srv *s = r->srv;
    r->shape = r->route->shape;
    char why[64];
    if (!gs_srv__is_ready(s, why, sizeof(why))) {
        *ret = gs_srv__respond_error(r, GS_SRV_E_UNAVAILABLE, NULL, "the server is %s",
                                     why[0] ? why : "not ready");
        return false;
    }
    if (!s->has_engine || !s->cfg.model.tok) {
        *ret = gs_srv__respond_error(r, GS_SRV_E_UNAVAILABLE, NULL, "no engine is running");
        return false;
    }
    char serial[40];
    snprintf(serial, sizeof(serial), "%s", r->id + 4); /* after "req-" */
    snprintf(r->id, sizeof(r->id), "%s%s", r->shape->id_prefix, serial);
    return true;
}

enum MHD_Result gs_srv__gen_start(struct gs_srv_req *r)
{
    enum MHD_Result ret;
    if (!gs_srv__gen_begin(r, &ret))
        return ret;
    const struct gs_srv_parse_limits pl = gs_srv__parse_limits(r->srv);
    char param[64];
    struct gs_err err;
    const char *body = r->body.p ? r->body.p : "";
    enum gs_status st =
        r->api == GS_SRV_API_ANTHROPIC
            ? gs_srv_messages_parse(body, r->body.len, r->ep == GS_SRV_EP_COUNT_TOKENS, &pl,
                                    &r->gen, param, sizeof(param), &err)
            : gs_srv_gen_parse(body, r->body.len, r->ep == GS_SRV_EP_CHAT, &pl, &r->gen, param,
                               sizeof(param), &err);
    return gs_srv__gen_parsed(r, st, param, &err);
}

/* After the parse: the refusal, or the model check and the prompt's tokens. */
enum MHD_Result gs_srv__gen_parsed(struct gs_srv_req *r, enum gs_status st, const char *param,
                                   const struct gs_err *e)
{
    struct gs_srv *s = r->srv;
    const struct gs_err err = *e;
    if (st != GS_OK)
        return gs_srv__respond_error(r, gs_srv_err_from_status(st), param, "%s", err.msg);
    if (!gs_srv__model_name_ok(s, r->gen.model))
        return gs_srv__respond_error(r, GS_SRV_E_MODEL_NOT_FOUND, "model",
                                     "the model '%s' does not exist; this server serves '%s'",
                                     r->gen.model, s->cfg.model.id);
    r->created = (long long)time(NULL);
    enum MHD_Result ret = tokenize_prompt(r);
    if (r->status || r->tok_job.running)
        return ret;
    return gs_srv__gen_continue(r);
}

enum MHD_Result gs_srv__gen_continue(struct gs_srv_req *r)
{
    enum MHD_Result ret;
    if (r->tok_job.done) {
        r->tok_job.done = false; /* consumed here */
        if (!take_tokens(r, &ret))
            return ret;
    }
    if (r->gen.count_only) /* count_tokens: the prompt the same body would generate from */
        return gs_srv__respond_json(r, 200, json_pack("{s:i}", "input_tokens", (int)r->n_prompt));
    if (!gs_srv__is_ready(r->srv, NULL, 0))
        return gs_srv__respond_error(r, GS_SRV_E_UNAVAILABLE, NULL, "the server is draining");
    if (!check_context(r, &ret))
        return ret;
    ret = submit_all(r);
    if (r->status || ret != MHD_YES)
        return ret;
    gs_srv__active_add(r);
    if (r->gen.stream)
        return start_stream(r);
    r->waiting = true;
    gs_srv__suspend(r);
    return MHD_YES;
}

const struct gs_srv_route_hooks gs_srv__gen_hooks = {
    .event = gs_srv__gen_event,
    .resume = gs_srv__gen_respond,
    .cancel = gs_srv__gen_cancel,
    .tick = gs_srv__gen_tick,
    .after_round = gs_srv__gen_after_round,
    .free = gs_srv__gen_free,
};
