/*
 * server/loop.c - what the loop does for a route besides answering: running MHD
 * again once a connection was resumed (gs_srv__kick, and MHD's own timer), the list
 * of requests the engine works for (srv->active, searched by engine request id),
 * tokenizing a text on libuv's thread pool, readiness, the model names a request
 * may use and the parsers' limits. Below the routes, above the response leaf
 * (respond.c), and calling nothing else of the daemon's. Loop thread only, but for
 * tok_work on a pool thread.
 */
#include "server/daemon.h"

#include <string.h>

/* What a request holds besides its buffers: its record, URL, headers and choices. */
#define ARENA_SMALL_BYTES ((uint64_t)1 << 20)
/* The one stream event that may pass --max-stream-buffer-bytes before the stream is cut. */
#define ARENA_EVENT_BYTES ((uint64_t)1 << 20)

/* ---- running MHD ------------------------------------------------------------------------- */

static void on_mhd_timer(uv_timer_t *h);

void gs_srv__kick(struct gs_srv *s)
{
    if (!s->mhd || s->closing)
        return;
    MHD_run(s->mhd);
    MHD_UNSIGNED_LONG_LONG to;
    if (MHD_get_timeout(s->mhd, &to) == MHD_YES)
        uv_timer_start(&s->mhd_timer, on_mhd_timer, to, 0);
    else
        uv_timer_stop(&s->mhd_timer);
}

static void on_mhd_timer(uv_timer_t *h)
{
    gs_srv__kick(h->data);
}

/* ---- the active list ------------------------------------------------------------------------ */

void gs_srv__active_add(struct gs_srv_req *r)
{
    struct gs_srv *s = r->srv;
    r->next = s->active;
    r->prev = NULL;
    if (s->active)
        s->active->prev = r;
    s->active = r;
    r->in_active = true;
    s->metrics.in_flight++;
}

void gs_srv__active_remove(struct gs_srv_req *r)
{
    struct gs_srv *s = r->srv;
    if (!r->in_active)
        return;
    if (r->prev)
        r->prev->next = r->next;
    else
        s->active = r->next;
    if (r->next)
        r->next->prev = r->prev;
    r->in_active = false;
    r->prev = r->next = NULL;
    s->metrics.in_flight--;
}

/* A request's choices have consecutive engine ids from choices[0].sched_id. */
struct gs_srv_choice *gs_srv__choice_of(struct gs_srv_req *r, uint64_t sched_id)
{
    if (!r->n_choices || sched_id < r->choices[0].sched_id ||
        sched_id >= r->choices[0].sched_id + r->n_choices)
        return NULL;
    return &r->choices[sched_id - r->choices[0].sched_id];
}

struct gs_srv_req *gs_srv__active_find(struct gs_srv *s, uint64_t sched_id)
{
    for (struct gs_srv_req *r = s->active; r; r = r->next)
        if (gs_srv__choice_of(r, sched_id))
            return r;
    return NULL;
}

/* ---- tokenizing off the loop ---------------------------------------------------------------- */

/* Tokenizing a long text takes a while (about 0.3 s per MiB), so it runs on
 * libuv's thread pool while the connection is suspended; the loop goes on
 * serving the others. The tokenizer is immutable and safe to share. */
static void tok_work(uv_work_t *w)
{
    struct gs_srv_req *r = w->data;
    struct gs_srv_tok_job *j = &r->tok_job;
    j->st = gs_tok_encode_spans(r->srv->cfg.model.tok, j->text.p ? j->text.p : "", j->text.len,
                                j->spans.v, j->spans.n, j->flags, &j->ids, &j->n_ids, &j->err);
}

static void tok_done(uv_work_t *w, int status)
{
    struct gs_srv_req *r = w->data;
    r->tok_job.running = false;
    r->tok_job.done = true;
    if (status != 0 || r->srv->closing)
        r->peer_gone = true; /* shutting down: the connection is closed */
    /* The access handler runs again and calls r->tok_job.then. */
    gs_srv__resume(r);
    gs_srv__kick(r->srv);
}

enum MHD_Result gs_srv__tokenize_async(struct gs_srv_req *r, unsigned flags,
                                       enum MHD_Result (*then)(struct gs_srv_req *r))
{
    struct gs_srv_tok_job *j = &r->tok_job;
    j->flags = flags;
    j->then = then;
    j->work.data = r;
    if (uv_queue_work(&r->srv->loop, &j->work, tok_work, tok_done) != 0)
        return gs_srv__respond_error(r, GS_SRV_E_UNAVAILABLE, NULL, "cannot queue tokenization");
    j->running = true;
    gs_srv__suspend(r);
    return MHD_YES;
}

void gs_srv__tok_job_free(struct gs_srv_tok_job *j)
{
    gs_free(j->ids);
    j->ids = NULL;
    gs_srv_buf_free(&j->text);
    gs_srv_spans_free(&j->spans);
}

/* ---- what a request may ask for -------------------------------------------------------------- */

bool gs_srv__is_ready(struct gs_srv *s, char *why, size_t cap)
{
    bool ready = atomic_load(&s->ready) && !s->draining;
    if (why && cap) {
        uv_mutex_lock(&s->ready_mu);
        snprintf(why, cap, "%s", s->draining ? "draining" : s->ready_why);
        uv_mutex_unlock(&s->ready_mu);
    }
    return ready;
}

bool gs_srv__model_name_ok(const struct gs_srv *s, const char *name)
{
    if (!name || s->cfg.model.accept_any_name || !strcmp(name, s->cfg.model.id))
        return true;
    for (size_t i = 0; i < s->cfg.model.n_aliases; i++)
        if (!strcmp(name, s->cfg.model.aliases[i]))
            return true;
    return false;
}

struct gs_srv_parse_limits gs_srv__parse_limits(const struct gs_srv *s)
{
    const struct gs_srv_limits *l = &s->cfg.limits;
    return (struct gs_srv_parse_limits){
        .n_vocab = gs_tok_n_vocab(s->cfg.model.tok),
        .max_tokens = l->max_tokens,
        .max_n = l->max_n,
        .max_stop = l->max_stop,
        .max_stop_bytes = l->max_stop_bytes,
        .jinja = s->jinja.tmpl != NULL,
        .tool_format = s->jinja.tmpl ? s->tool_format : NULL,
    };
}

size_t gs_srv__max_piece_bytes(const struct gs_tok *tok)
{
    size_t most = 0;
    uint32_t n = tok ? gs_tok_n_vocab(tok) : 0;
    for (uint32_t id = 0; id < n; id++) {
        size_t len = 0;
        if (gs_tok_piece(tok, (int32_t)id, GS_TOK_RENDER_SPECIAL, &len))
            most = GS_MAX(most, len);
    }
    return most;
}

size_t gs_srv__req_arena_cap(const struct gs_srv *s)
{
    const struct gs_srv_limits *l = &s->cfg.limits;
    /* Each term is a buffer at up to twice what it holds, since buffers grow by
     * doubling: the body and the prompt rendered from it (the body's text again,
     * the template's own text beside it); the stream bytes a slow client may
     * leave waiting, and the event that passed the limit; a choice's four text
     * buffers (released, answer, reasoning, text) at the longest piece for each
     * of max_tokens tokens, for max_n choices; and ARENA_SMALL_BYTES for the
     * record, its URL and headers, and the choices' records. */
    uint64_t piece = GS_MAX(s->max_piece_bytes, 16), cap = ARENA_SMALL_BYTES, t;
    bool over = gs_mul_overflow(l->max_body_bytes, 2 * 2, &t) || gs_add_overflow(cap, t, &cap);
    over |= gs_mul_overflow(l->max_stream_buffer_bytes + ARENA_EVENT_BYTES, 2, &t) ||
            gs_add_overflow(cap, t, &cap);
    over |= gs_mul_overflow((uint64_t)l->max_n * l->max_tokens, piece * 4 * 2, &t) ||
            gs_add_overflow(cap, t, &cap);
    return over || cap > SIZE_MAX ? SIZE_MAX : (size_t)cap;
}
