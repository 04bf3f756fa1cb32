/*
 * scheduler/sched.c - continuous batching over the paged KV cache. See
 * scheduler/scheduler.h for the contract.
 *
 * A sequence holds tokens[0..n_tokens) (prompt, then generated tokens) and has
 * K/V for positions [0, n_computed) in its pages. It always has at least one
 * token to feed: pending = n_tokens - n_computed >= 1. A decoding sequence
 * has pending == 1; a prefilling one has more, and is fed in chunks. Logits
 * are requested only for a chunk that reaches the last token.
 *
 * Each step: take new requests and cancellations from the inbox, admit waiting
 * sequences while pages allow, build one batch (decodes first, then prefill
 * chunks in admission order, within the token budget), run it, sample, emit
 * events, finish what ended. When a sequence needs a page and none is left,
 * the most recently admitted sequence not yet placed in this batch is
 * preempted: its pages are released (full ones stay in the prefix cache) and it
 * goes back to the front of the queue with its tokens and sampler state, so it
 * continues with the same output after recomputing.
 */
#define _GNU_SOURCE
#include "scheduler/scheduler.h"

#include "engine/backend.h"
#include "engine/runner.h"
#include "kvcache/kvcache.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_MAX_SEQS 64
#define DEFAULT_MAX_BATCH_TOKENS 512
#define DEFAULT_MAX_QUEUE 256
#define DEFAULT_VALIDATE_CHUNK 32
/* Served logits kept for one validated request: max_tokens x n_vocab floats. */
#define MAX_VALIDATE_BYTES (256u << 20)

struct seq {
    struct seq *next;          /* link in the inbox or the waiting queue */
    uint64_t id;
    int32_t *tokens;           /* [cap] prompt then generated, owned */
    uint32_t n_tokens, cap;
    uint32_t n_prompt;
    uint32_t max_tokens;
    uint32_t n_generated;
    uint32_t n_computed;       /* positions with K/V in the pages */
    uint32_t high_water;       /* most positions ever computed (recompute accounting) */
    uint32_t n_registered;     /* leading pages whose hash is set */
    uint64_t chain_hash;       /* hash of the last registered page */
    struct gs_kv_seq kv;
    struct gs_sample_state *sampler;
    bool ignore_eos;
    bool want_logprobs;
    uint32_t n_top;
    float *served;             /* [max_tokens][n_vocab] logits as sampled, when validating */
    uint64_t admit_order;      /* larger = admitted more recently */
    bool cancelled;
    bool in_batch;             /* placed in the step being built */
    uint32_t batch_tokens;     /* tokens of this sequence in that step */
    int32_t out_row;           /* its logits row in that step, -1 if none */
    enum gs_finish finish;
    enum gs_status err_code;
    char err_msg[GS_ERR_MSG_LEN];
    double t_submit_ms, t_sched_ms, t_first_ms;
    struct gs_sched_req_stats st;
};

struct ev_item {
    struct gs_sched_event ev;
    struct gs_sched_top top[GS_SAMPLE_TOP_LOGPROBS_MAX];
    struct gs_val_report *report; /* VALIDATION: owned by the item */
};

/* A finished request waiting for, or in, its reference evaluation. It runs on
 * a private ref backend and KV pool, so serving state is never touched. */
struct vjob {
    struct vjob *next;
    uint64_t id;
    int32_t *tokens;          /* [n_tokens] prompt then generated, owned */
    uint32_t n_tokens, n_prompt;
    float *served;            /* [n_served][n_vocab], owned */
    uint32_t n_served;        /* rows: positions n_prompt-1 .. n_prompt-2+n_served */
    uint32_t n_done;          /* tokens evaluated on ref so far */
    struct gs_kv_pool *pool;  /* sized for this job alone */
    struct gs_kv_seq kv;
    struct gs_val_report *report;
    bool cancelled;
};

struct gs_sched {
    struct gs_sched_cfg cfg;
    const struct gs_model *model;
    uint32_t n_vocab;
    uint32_t n_ctx;
    int32_t *eog;
    uint32_t n_eog;

    /* Engine side: touched only by the engine thread (or the sync caller). */
    struct gs_runner *run;
    struct gs_kv_pool *pool;
    struct gs_kv_view kv;
    struct seq *wait_head, *wait_tail;
    uint32_t n_waiting_engine;
    struct seq **running;      /* [max_seqs] */
    uint32_t n_running;
    uint64_t admit_counter;
    /* step buffers, sized once for max_batch_tokens / max_seqs */
    int32_t *step_tokens, *step_pos;
    uint32_t *step_seq, *step_rows;
    struct gs_seq_pages *step_pages;
    struct seq **step_seqs;
    float *logits;             /* [max_seqs][n_vocab] */
    /* validation: a ref runner opened on first use, and its jobs */
    struct gs_runner *ref;
    struct vjob *vjobs_head, *vjobs_tail;
    uint32_t n_vjobs;
    float *ref_logits;         /* [validate_chunk_tokens][n_vocab] */
    int32_t *ref_pos;
    uint32_t *ref_seq, *ref_rows;
    struct gs_val_thresholds thresholds;

    /* Shared with the loop thread, under mu. */
    pthread_mutex_t mu;
    pthread_cond_t wake;
    struct seq *inbox_head, *inbox_tail;
    uint32_t n_inbox;
    uint64_t *cancels;
    uint32_t n_cancels, cap_cancels;
    struct ev_item *events;
    size_t n_events, cap_events;
    struct ev_item *borrowed;  /* what the last poll handed out */
    size_t cap_borrowed, n_borrowed;
    struct gs_sched_stats stats;
    bool draining, stopping;

    pthread_t thread;
    bool thread_running;
};

const uint32_t gs_sched_batch_bounds[GS_SCHED_BATCH_BUCKETS - 1] = {
    1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024,
};

const char *gs_finish_name(enum gs_finish f)
{
    static const char *const names[] = {
        [GS_FINISH_NONE] = "none",           [GS_FINISH_STOP] = "stop",
        [GS_FINISH_LENGTH] = "length",       [GS_FINISH_EOS] = "eos",
        [GS_FINISH_CANCELLED] = "cancelled", [GS_FINISH_ERROR] = "error",
        [GS_FINISH_ABORT] = "abort",
    };
    return (unsigned)f < GS_ARRAY_LEN(names) ? names[f] : "unknown";
}

/* ---- sequences ------------------------------------------------------------------ */

static void seq_free(struct gs_sched *s, struct seq *q)
{
    if (!q)
        return;
    if (s->pool)
        gs_kv_seq_release(s->pool, &q->kv);
    gs_sample_state_free(q->sampler);
    gs_free(q->tokens);
    gs_free(q->served);
    gs_free(q);
}

static uint32_t page_tokens(const struct gs_sched *s)
{
    return s->kv.page_tokens;
}

static uint32_t pages_for(const struct gs_sched *s, uint64_t n_tokens)
{
    return (uint32_t)((n_tokens + page_tokens(s) - 1) / page_tokens(s));
}

/* ---- events ---------------------------------------------------------------------- */

/* Appends an event under the lock, taking ownership of report. Returns false
 * when memory is short: the event (and report) is then lost, which the caller
 * turns into an error for the request. */
static bool push_event_report(struct gs_sched *s, const struct gs_sched_event *ev,
                              const struct gs_sample_logprob *top, uint32_t n_top,
                              struct gs_val_report *report)
{
    pthread_mutex_lock(&s->mu);
    if (s->n_events == s->cap_events) {
        size_t cap = s->cap_events ? 2 * s->cap_events : 64;
        struct ev_item *e = gs_realloc(s->events, cap * sizeof(*e));
        if (!e) {
            pthread_mutex_unlock(&s->mu);
            gs_val_report_free(report);
            return false;
        }
        s->events = e;
        s->cap_events = cap;
    }
    struct ev_item *it = &s->events[s->n_events++];
    it->ev = *ev;
    it->ev.top = NULL;
    it->ev.validation = NULL;
    it->ev.n_top = n_top;
    it->report = report;
    for (uint32_t i = 0; i < n_top; i++) {
        it->top[i].token = top[i].token;
        it->top[i].logprob = top[i].logprob;
    }
    pthread_mutex_unlock(&s->mu);
    return true;
}

static bool push_event(struct gs_sched *s, const struct gs_sched_event *ev,
                       const struct gs_sample_logprob *top, uint32_t n_top)
{
    return push_event_report(s, ev, top, n_top, NULL);
}

static void emit_finish(struct gs_sched *s, struct seq *q, bool validation_pending)
{
    double now = gs_now_ms();
    q->st.n_prompt = q->n_prompt;
    q->st.n_generated = q->n_generated;
    if (q->t_sched_ms > 0)
        q->st.queue_ms = q->t_sched_ms - q->t_submit_ms;
    if (q->t_first_ms > 0) {
        q->st.prefill_ms = q->t_first_ms - q->t_sched_ms;
        q->st.decode_ms = now - q->t_first_ms;
    } else if (q->t_sched_ms > 0) {
        q->st.prefill_ms = now - q->t_sched_ms;
    }
    struct gs_sched_event ev = {.kind = GS_SCHED_EV_FINISH, .id = q->id, .finish = q->finish,
                                .stats = q->st, .err_code = q->err_code,
                                .validation_pending = validation_pending};
    memcpy(ev.err_msg, q->err_msg, sizeof(ev.err_msg));
    push_event(s, &ev, NULL, 0);
}

static void update_stats(struct gs_sched *s, uint32_t batch_tokens, uint64_t prompt_tokens,
                         uint64_t gen_tokens);

/* ---- creation ---------------------------------------------------------------------- */

static uint64_t available_memory_bytes(void)
{
    long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : (uint64_t)1 << 30;
}

/* The pool's size when the caller gave none: room for min(max_seqs, 8) full
 * contexts, but never more than a quarter of avail, the memory available now. */
static uint64_t default_kv_bytes(const struct gs_sched *s, uint64_t page_bytes, uint64_t avail)
{
    uint64_t seqs = GS_MIN(s->cfg.max_seqs, 8u);
    uint64_t want = seqs * pages_for(s, s->n_ctx) * page_bytes;
    return GS_MIN(want, avail / 4);
}

static enum gs_status make_pool(struct gs_sched *s, struct gs_err *err)
{
    const struct gs_model *m = s->model;
    uint32_t elem = s->cfg.kv_type == GS_TYPE_F32 ? 4 : 2;
    uint32_t pt = s->cfg.page_tokens;
    uint64_t page_bytes = (uint64_t)gs_model_kv_layers(m) * 2 * pt * gs_model_kv_dim(m) * elem;
    s->kv.page_tokens = pt; /* pages_for() needs it before the pool exists */
    /* A file's context_length is whatever its writer put there (2^32-1 has
     * been seen). One sequence of it must fit in the memory there is: a
     * context asked for (--n-ctx) that does not is refused, the model's own
     * is cut down to what a quarter of the memory holds. */
    uint64_t avail = available_memory_bytes();
    uint64_t ctx_bytes = pages_for(s, s->n_ctx) * page_bytes;
    if (!s->cfg.kv_cache_bytes && ctx_bytes > avail) {
        if (s->cfg.n_ctx)
            return gs_err_set(err, GS_INVAL,
                              "n_ctx: one sequence of %u tokens needs %.1f GiB of KV cache, more "
                              "than the %.1f GiB of memory available",
                              s->n_ctx, ctx_bytes / 1073741824.0, avail / 1073741824.0);
        uint64_t fit = GS_MAX(avail / 4 / page_bytes, 1) * pt;
        s->n_ctx = (uint32_t)GS_MIN(fit, (uint64_t)s->n_ctx);
    }
    uint64_t bytes =
        s->cfg.kv_cache_bytes ? s->cfg.kv_cache_bytes : default_kv_bytes(s, page_bytes, avail);
    uint64_t n_pages = bytes / page_bytes;
    uint64_t min_pages = pages_for(s, s->n_ctx);
    if (n_pages < 1)
        return gs_err_set(err, GS_INVAL,
                          "kv_cache_bytes: %llu bytes hold no page of %llu bytes",
                          (unsigned long long)bytes, (unsigned long long)page_bytes);
    if (!s->cfg.kv_cache_bytes && n_pages < min_pages)
        n_pages = min_pages;
    if (n_pages >= GS_KV_PAGE_NONE)
        n_pages = GS_KV_PAGE_NONE - 1;
    struct gs_kv_pool_cfg pc = {.n_layer = gs_model_kv_layers(m), .kv_dim = gs_model_kv_dim(m),
                                .elem_bytes = elem, .page_tokens = pt,
                                .n_pages = (uint32_t)n_pages};
    enum gs_status rc = gs_kv_pool_new(&pc, &s->pool, err);
    if (rc)
        return rc;
    s->kv = gs_kv_pool_view(s->pool);
    return GS_OK;
}

static enum gs_status check_cfg(struct gs_sched_cfg *c, struct gs_err *err)
{
    if (!c->backend)
        c->backend = "ref";
    if (!c->page_tokens)
        c->page_tokens = GS_KV_DEFAULT_PAGE_TOKENS;
    if (!c->max_seqs)
        c->max_seqs = DEFAULT_MAX_SEQS;
    if (!c->max_batch_tokens)
        c->max_batch_tokens = DEFAULT_MAX_BATCH_TOKENS;
    if (!c->max_queue)
        c->max_queue = DEFAULT_MAX_QUEUE;
    if (!c->validate_chunk_tokens)
        c->validate_chunk_tokens = DEFAULT_VALIDATE_CHUNK;
    if (c->validate_chunk_tokens > 4096)
        return gs_err_set(err, GS_INVAL, "validate_chunk_tokens: %u is over 4096",
                          c->validate_chunk_tokens);
    if (c->kv_type != GS_TYPE_F32 && c->kv_type != GS_TYPE_F16)
        return gs_err_set(err, GS_INVAL, "kv_type: %s is neither f16 nor f32",
                          gs_type_name(c->kv_type));
    if (c->page_tokens > 4096)
        return gs_err_set(err, GS_INVAL, "page_tokens: %u is over 4096", c->page_tokens);
    if (c->max_seqs > 4096)
        return gs_err_set(err, GS_INVAL, "max_seqs: %u is over 4096", c->max_seqs);
    if (c->max_batch_tokens > (1u << 20))
        return gs_err_set(err, GS_INVAL, "max_batch_tokens: %u is over 2^20",
                          c->max_batch_tokens);
    return GS_OK;
}

static enum gs_status alloc_step_buffers(struct gs_sched *s)
{
    uint32_t nt = s->cfg.max_batch_tokens, ns = s->cfg.max_seqs;
    s->running = gs_calloc(ns, sizeof(*s->running));
    s->step_tokens = gs_alloc_array(nt, sizeof(*s->step_tokens));
    s->step_pos = gs_alloc_array(nt, sizeof(*s->step_pos));
    s->step_seq = gs_alloc_array(nt, sizeof(*s->step_seq));
    s->step_rows = gs_alloc_array(ns, sizeof(*s->step_rows));
    s->step_pages = gs_alloc_array(ns, sizeof(*s->step_pages));
    s->step_seqs = gs_alloc_array(ns, sizeof(*s->step_seqs));
    s->logits = gs_alloc_array((size_t)ns * s->n_vocab, sizeof(float));
    bool ok = s->running && s->step_tokens && s->step_pos && s->step_seq && s->step_rows &&
              s->step_pages && s->step_seqs && s->logits;
    return ok ? GS_OK : GS_NOMEM;
}

enum gs_status gs_sched_new(const struct gs_sched_cfg *cfg, struct gs_model *model,
                            struct gs_sched **out, struct gs_err *err)
{
    *out = NULL;
    struct gs_sched *s = gs_calloc(1, sizeof(*s));
    if (!s)
        return gs_err_set(err, GS_NOMEM, "no memory for the scheduler");
    s->cfg = *cfg;
    s->model = model;
    s->n_vocab = model->hp.n_vocab;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->wake, NULL);
    enum gs_status rc = check_cfg(&s->cfg, err);
    if (rc)
        goto fail;
    if (cfg->validate_thresholds)
        s->thresholds = *cfg->validate_thresholds;
    else
        gs_val_thresholds_init(&s->thresholds);
    s->cfg.validate_thresholds = NULL; /* copied above; never dereferenced later */
    s->n_ctx = s->cfg.n_ctx ? s->cfg.n_ctx : model->hp.n_ctx_train;
    if (!s->n_ctx)
        s->n_ctx = 2048;
    s->n_eog = cfg->eog ? cfg->n_eog : (model->hp.eos_id >= 0 ? 1 : 0);
    s->eog = gs_calloc(s->n_eog ? s->n_eog : 1, sizeof(*s->eog));
    if (!s->eog) {
        rc = gs_err_set(err, GS_NOMEM, "no memory for the scheduler");
        goto fail;
    }
    if (cfg->eog)
        memcpy(s->eog, cfg->eog, s->n_eog * sizeof(*s->eog));
    else if (s->n_eog)
        s->eog[0] = model->hp.eos_id;
    const struct gs_runner_cfg rc_cfg = {.backend = s->cfg.backend, .n_threads = s->cfg.n_threads};
    if ((rc = gs_runner_new(model->graph, &rc_cfg, &s->run, err)))
        goto fail;
    if ((rc = make_pool(s, err)))
        goto fail;
    if ((rc = alloc_step_buffers(s))) {
        gs_err_set(err, rc, "no memory for step buffers of %u tokens", s->cfg.max_batch_tokens);
        goto fail;
    }
    update_stats(s, 0, 0, 0);
    *out = s;
    return GS_OK;
fail:
    gs_sched_free(s);
    return rc;
}

static void abort_all(struct gs_sched *s, enum gs_finish why);

void gs_sched_free(struct gs_sched *s)
{
    if (!s)
        return;
    gs_sched_stop(s, 0);
    abort_all(s, GS_FINISH_ABORT);
    gs_runner_free(s->run);
    gs_runner_free(s->ref);
    gs_free(s->ref_logits);
    gs_free(s->ref_pos);
    gs_free(s->ref_seq);
    gs_free(s->ref_rows);
    gs_kv_pool_free(s->pool);
    gs_free(s->running);
    gs_free(s->step_tokens);
    gs_free(s->step_pos);
    gs_free(s->step_seq);
    gs_free(s->step_rows);
    gs_free(s->step_pages);
    gs_free(s->step_seqs);
    gs_free(s->logits);
    gs_free(s->eog);
    gs_free(s->cancels);
    for (size_t i = 0; i < s->n_events; i++)
        gs_val_report_free(s->events[i].report);
    for (size_t i = 0; i < s->n_borrowed; i++)
        gs_val_report_free(s->borrowed[i].report);
    gs_free(s->events);
    gs_free(s->borrowed);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->wake);
    gs_free(s);
}

uint32_t gs_sched_n_ctx(const struct gs_sched *s)
{
    return s->n_ctx;
}

/* ---- the loop thread's side ---------------------------------------------------------- */

enum gs_status gs_sched_submit(struct gs_sched *s, const struct gs_sched_request *req,
                               struct gs_err *err)
{
    if (req->n_prompt < 1)
        return gs_err_set(err, GS_INVAL, "prompt: at least one token is required");
    if (req->max_tokens < 1)
        return gs_err_set(err, GS_INVAL, "max_tokens: must be at least 1");
    uint64_t total = (uint64_t)req->n_prompt + req->max_tokens;
    if (total > s->n_ctx)
        return gs_err_set(err, GS_INVAL,
                          "context_length_exceeded: %u prompt tokens plus max_tokens %u exceed "
                          "the context length %u",
                          req->n_prompt, req->max_tokens, s->n_ctx);
    if (pages_for(s, total) > s->kv.n_pages)
        return gs_err_set(err, GS_INVAL,
                          "request needs %u KV pages for %llu tokens; the whole pool has %u",
                          pages_for(s, total), (unsigned long long)total, s->kv.n_pages);
    for (uint32_t i = 0; i < req->n_prompt; i++)
        if (req->prompt[i] < 0 || (uint32_t)req->prompt[i] >= s->n_vocab)
            return gs_err_set(err, GS_INVAL, "prompt[%u]: token id %d is outside [0, %u)", i,
                              req->prompt[i], s->n_vocab);
    if (req->n_top_logprobs > GS_SAMPLE_TOP_LOGPROBS_MAX)
        return gs_err_set(err, GS_INVAL, "top_logprobs: %u is over %d", req->n_top_logprobs,
                          GS_SAMPLE_TOP_LOGPROBS_MAX);

    struct seq *q = gs_calloc(1, sizeof(*q));
    if (!q)
        return gs_err_set(err, GS_NOMEM, "no memory for a request");
    q->cap = (uint32_t)total;
    q->tokens = gs_alloc_array(q->cap, sizeof(*q->tokens));
    struct gs_sample_params sp = req->sampling;
    sp.logprobs = req->want_logprobs || req->n_top_logprobs > 0;
    sp.top_logprobs = (int32_t)req->n_top_logprobs;
    enum gs_status rc = q->tokens ? gs_sample_state_new(&sp, (int32_t)s->n_vocab, &q->sampler, err)
                                  : gs_err_set(err, GS_NOMEM, "no memory for a request");
    if (!rc)
        rc = gs_sample_accept_prompt(q->sampler, req->prompt, (int32_t)req->n_prompt, err);
    if (rc) {
        gs_sample_state_free(q->sampler);
        gs_free(q->tokens);
        gs_free(q);
        return rc;
    }
    memcpy(q->tokens, req->prompt, req->n_prompt * sizeof(*q->tokens));
    q->id = req->id;
    q->n_tokens = q->n_prompt = req->n_prompt;
    q->max_tokens = req->max_tokens;
    q->ignore_eos = req->ignore_eos;
    q->want_logprobs = sp.logprobs;
    q->n_top = req->n_top_logprobs;
    q->chain_hash = GS_KV_HASH_SEED;
    q->out_row = -1;
    q->t_submit_ms = gs_now_ms();
    if (req->validate) {
        /* one extra row: a sequence that fails on a non-finite row keeps it */
        uint64_t bytes = ((uint64_t)q->max_tokens + 1) * s->n_vocab * sizeof(float);
        if (bytes > MAX_VALIDATE_BYTES) {
            seq_free(s, q);
            return gs_err_set(err, GS_INVAL,
                              "validation: max_tokens %u x %u vocabulary logits exceed %u MiB",
                              q->max_tokens, s->n_vocab, MAX_VALIDATE_BYTES >> 20);
        }
        q->served = gs_malloc((size_t)bytes);
        if (!q->served) {
            seq_free(s, q);
            return gs_err_set(err, GS_NOMEM, "validation: no memory for the served logits");
        }
    }
    gs_kv_seq_init(&q->kv);

    pthread_mutex_lock(&s->mu);
    if (s->draining || s->stopping)
        rc = gs_err_set(err, GS_BUSY, "the server is shutting down");
    else if (s->stats.n_waiting + s->n_inbox >= s->cfg.max_queue)
        rc = gs_err_set(err, GS_BUSY, "the queue is full (%u waiting)", s->cfg.max_queue);
    if (!rc) {
        if (s->inbox_tail)
            s->inbox_tail->next = q;
        else
            s->inbox_head = q;
        s->inbox_tail = q;
        s->n_inbox++;
        pthread_cond_signal(&s->wake);
    }
    pthread_mutex_unlock(&s->mu);
    if (rc)
        seq_free(s, q);
    return rc;
}

void gs_sched_cancel(struct gs_sched *s, uint64_t id)
{
    pthread_mutex_lock(&s->mu);
    if (s->n_cancels == s->cap_cancels) {
        uint32_t cap = s->cap_cancels ? 2 * s->cap_cancels : 16;
        uint64_t *c = gs_realloc(s->cancels, cap * sizeof(*c));
        if (c) {
            s->cancels = c;
            s->cap_cancels = cap;
        }
    }
    /* Without memory for the list the cancellation is dropped; the request
     * then ends on its own limits, which only costs compute. */
    if (s->n_cancels < s->cap_cancels)
        s->cancels[s->n_cancels++] = id;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
}

size_t gs_sched_poll(struct gs_sched *s, struct gs_sched_event *out, size_t cap)
{
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < s->n_borrowed; i++)
        gs_val_report_free(s->borrowed[i].report);
    s->n_borrowed = 0;
    size_t n = GS_MIN(cap, s->n_events);
    if (n == 0) {
        /* nothing to hand out (and the buffers may not exist yet: memcpy with
         * a NULL pointer is undefined even for zero bytes) */
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    if (n > s->cap_borrowed) {
        struct ev_item *b = gs_realloc(s->borrowed, n * sizeof(*b));
        if (!b) {
            pthread_mutex_unlock(&s->mu);
            return 0;
        }
        s->borrowed = b;
        s->cap_borrowed = n;
    }
    memcpy(s->borrowed, s->events, n * sizeof(*s->events));
    memmove(s->events, s->events + n, (s->n_events - n) * sizeof(*s->events));
    s->n_events -= n;
    s->n_borrowed = n;
    pthread_mutex_unlock(&s->mu);
    for (size_t i = 0; i < n; i++) {
        out[i] = s->borrowed[i].ev;
        out[i].top = s->borrowed[i].ev.n_top ? s->borrowed[i].top : NULL;
        out[i].validation = s->borrowed[i].report;
    }
    return n;
}

void gs_sched_stats(struct gs_sched *s, struct gs_sched_stats *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->stats;
    out->n_waiting += s->n_inbox;
    pthread_mutex_unlock(&s->mu);
}

/* ---- the engine's side ------------------------------------------------------------------ */

static void wait_push_back(struct gs_sched *s, struct seq *q)
{
    q->next = NULL;
    if (s->wait_tail)
        s->wait_tail->next = q;
    else
        s->wait_head = q;
    s->wait_tail = q;
    s->n_waiting_engine++;
}

static void wait_push_front(struct gs_sched *s, struct seq *q)
{
    q->next = s->wait_head;
    s->wait_head = q;
    if (!s->wait_tail)
        s->wait_tail = q;
    s->n_waiting_engine++;
}

static struct seq *wait_pop(struct gs_sched *s)
{
    struct seq *q = s->wait_head;
    if (!q)
        return NULL;
    s->wait_head = q->next;
    if (!s->wait_head)
        s->wait_tail = NULL;
    q->next = NULL;
    s->n_waiting_engine--;
    return q;
}

/* Moves new requests into the waiting queue and marks cancelled sequences. */
static void take_inbox(struct gs_sched *s)
{
    pthread_mutex_lock(&s->mu);
    struct seq *in = s->inbox_head;
    s->inbox_head = s->inbox_tail = NULL;
    s->n_inbox = 0;
    for (struct seq *q = in; q;) {
        struct seq *next = q->next;
        wait_push_back(s, q);
        q = next;
    }
    /* Published with the inbox emptied, so that gs_sched_submit's queue check
     * never sees a request in neither count: the step's end publishing the
     * count left a window in which a burst overshot --max-queue. Until then it
     * may count a request admitted this step: the cap errs on the safe side. */
    s->stats.n_waiting = s->n_waiting_engine;
    for (uint32_t c = 0; c < s->n_cancels; c++) {
        for (uint32_t i = 0; i < s->n_running; i++)
            if (s->running[i]->id == s->cancels[c])
                s->running[i]->cancelled = true;
        for (struct seq *q = s->wait_head; q; q = q->next)
            if (q->id == s->cancels[c])
                q->cancelled = true;
        for (struct vjob *j = s->vjobs_head; j; j = j->next)
            if (j->id == s->cancels[c])
                j->cancelled = true;
    }
    s->n_cancels = 0;
    pthread_mutex_unlock(&s->mu);
}

static void remove_running(struct gs_sched *s, uint32_t i)
{
    memmove(&s->running[i], &s->running[i + 1], (s->n_running - i - 1) * sizeof(*s->running));
    s->n_running--;
}

static bool queue_vjob(struct gs_sched *s, struct seq *q);

/* Ends a sequence: releases its pages (registered ones stay cached), emits its
 * FINISH event and frees it. It must be out of every queue. */
static void finish_seq(struct gs_sched *s, struct seq *q, enum gs_finish why)
{
    q->finish = why;
    gs_kv_seq_release(s->pool, &q->kv);
    /* A request that ran to an end gets its reference evaluation; one that was
     * cancelled or aborted has no client left to read it. queue_vjob takes the
     * tokens and the served logits. */
    bool validating = q->served && why != GS_FINISH_CANCELLED && why != GS_FINISH_ABORT &&
                      queue_vjob(s, q);
    if (!validating)
        gs_free(q->served);
    q->served = NULL;
    emit_finish(s, q, validating);
    pthread_mutex_lock(&s->mu);
    if (why == GS_FINISH_CANCELLED)
        s->stats.n_cancelled++;
    if (why == GS_FINISH_ERROR)
        s->stats.n_errors++;
    pthread_mutex_unlock(&s->mu);
    seq_free(s, q);
}

/* ---- validation ------------------------------------------------------------------------ */

/* Moves q's tokens and served logits into a validation job. Returns false
 * (nothing moved) when memory is short. */
static bool queue_vjob(struct gs_sched *s, struct seq *q)
{
    struct vjob *j = gs_calloc(1, sizeof(*j));
    if (!j)
        return false;
    j->id = q->id;
    j->tokens = q->tokens;
    j->n_tokens = q->n_tokens;
    j->n_prompt = q->n_prompt;
    j->served = q->served;
    /* a non-finite row that ended the sequence was recorded too */
    j->n_served = q->n_generated + (q->err_code == GS_NUMERIC ? 1 : 0);
    gs_kv_seq_init(&j->kv);
    q->tokens = NULL; /* moved */
    if (j->n_tokens < j->n_prompt + j->n_served)
        j->n_served = j->n_tokens - j->n_prompt + 1;
    if (s->vjobs_tail)
        s->vjobs_tail->next = j;
    else
        s->vjobs_head = j;
    s->vjobs_tail = j;
    s->n_vjobs++;
    return true;
}

static void vjob_free(struct gs_sched *s, struct vjob *j)
{
    if (j->pool) {
        gs_kv_seq_release(j->pool, &j->kv);
        gs_kv_pool_free(j->pool);
    }
    gs_val_report_free(j->report);
    gs_free(j->tokens);
    gs_free(j->served);
    gs_free(j);
}

/* Ends the head job: its report (or, without one, the reason) goes out. */
static void vjob_done(struct gs_sched *s, struct gs_val_report *report, const char *why)
{
    struct vjob *j = s->vjobs_head;
    s->vjobs_head = j->next;
    if (!s->vjobs_head)
        s->vjobs_tail = NULL;
    s->n_vjobs--;
    if (!j->cancelled) {
        struct gs_sched_event ev = {.kind = GS_SCHED_EV_VALIDATION, .id = j->id};
        if (why)
            snprintf(ev.err_msg, sizeof(ev.err_msg), "%s", why);
        bool failed = report && !report->pass;
        if (report)
            j->report = NULL; /* the event owns it now */
        if (push_event_report(s, &ev, NULL, 0, report)) {
            pthread_mutex_lock(&s->mu);
            s->stats.n_validated += report != NULL;
            s->stats.n_validation_failed += failed;
            pthread_mutex_unlock(&s->mu);
        }
    }
    vjob_free(s, j);
}

/* Opens the reference runner on first use, on the graph as the serving
 * backend's passes rewrote it. */
static enum gs_status open_ref(struct gs_sched *s, struct gs_err *err)
{
    if (s->ref)
        return GS_OK;
    uint32_t c = s->cfg.validate_chunk_tokens;
    s->ref_logits = gs_alloc_array((size_t)c * s->n_vocab, sizeof(float));
    s->ref_pos = gs_alloc_array(c, sizeof(*s->ref_pos));
    s->ref_seq = gs_calloc(c, sizeof(*s->ref_seq));
    s->ref_rows = gs_alloc_array(c, sizeof(*s->ref_rows));
    if (!s->ref_logits || !s->ref_pos || !s->ref_seq || !s->ref_rows)
        return gs_err_set(err, GS_NOMEM, "no memory for the reference evaluation");
    const struct gs_runner_cfg cfg = {.backend = "ref", .no_passes = true};
    return gs_runner_new(s->model->graph, &cfg, &s->ref, err);
}

/*
 * Evaluates the next chunk of the head validation job on ref and compares
 * every row whose logits were served. The job's tokens run teacher-forced:
 * exactly the tokens the client received, so the figures say how far the
 * served logits were from the oracle's at each step of this very answer.
 */
static void validate_step(struct gs_sched *s)
{
    struct vjob *j = s->vjobs_head;
    if (!j)
        return;
    if (s->cfg.validate_hook)
        s->cfg.validate_hook(s->cfg.validate_hook_ctx);
    if (j->cancelled || j->n_served == 0) {
        vjob_done(s, NULL, j->cancelled ? NULL : "no generated position to compare");
        return;
    }
    struct gs_err err = {0};
    char why[GS_ERR_MSG_LEN + 32];
    if (open_ref(s, &err))
        goto fail;
    uint32_t end = j->n_prompt - 1 + j->n_served; /* positions [0, end) are evaluated */
    if (!j->pool) {
        /* F32 K/V: the reference numerics, whatever the serving cache uses */
        struct gs_kv_pool_cfg pc = {.n_layer = gs_model_kv_layers(s->model),
                                    .kv_dim = gs_model_kv_dim(s->model), .elem_bytes = 4,
                                    .page_tokens = page_tokens(s),
                                    .n_pages = pages_for(s, end) + 1};
        if (gs_kv_pool_new(&pc, &j->pool, &err) ||
            gs_kv_seq_reserve(j->pool, &j->kv, end, &err) ||
            gs_val_report_new((int32_t)s->n_vocab, &s->thresholds, &j->report, &err))
            goto fail;
    }
    uint32_t c = GS_MIN(s->cfg.validate_chunk_tokens, end - j->n_done);
    uint32_t n_out = 0;
    for (uint32_t i = 0; i < c; i++) {
        uint32_t p = j->n_done + i;
        s->ref_pos[i] = (int32_t)p;
        if (p + 1 >= j->n_prompt) /* its logits were served */
            s->ref_rows[n_out++] = i;
    }
    struct gs_kv_view kv = gs_kv_pool_view(j->pool);
    struct gs_seq_pages sp = {j->kv.pages, j->kv.n_pages};
    struct gs_step_io io = {.n_tokens = c, .tokens = j->tokens + j->n_done, .pos = s->ref_pos,
                            .seq = s->ref_seq, .n_seqs = 1, .seqs = &sp, .kv = &kv,
                            .n_outputs = n_out, .out_rows = s->ref_rows,
                            .logits = s->ref_logits};
    if (gs_runner_step(s->ref, &io, &err))
        goto fail;
    for (uint32_t r = 0; r < n_out; r++) {
        uint32_t p = j->n_done + s->ref_rows[r];
        const float *served = j->served + (size_t)(p + 1 - j->n_prompt) * s->n_vocab;
        if (gs_val_add_full(j->report, (int32_t)p, served, s->ref_logits + (size_t)r * s->n_vocab,
                            NAN, &err))
            goto fail;
    }
    j->n_done += c;
    if (j->n_done == end) {
        gs_val_finish(j->report);
        vjob_done(s, j->report, NULL);
    }
    return;
fail:
    snprintf(why, sizeof(why), "validation failed to run: %s", err.msg);
    vjob_done(s, NULL, why);
}

static void drop_cancelled(struct gs_sched *s)
{
    for (uint32_t i = 0; i < s->n_running;) {
        struct seq *q = s->running[i];
        if (q->cancelled) {
            remove_running(s, i);
            finish_seq(s, q, GS_FINISH_CANCELLED);
        } else {
            i++;
        }
    }
    struct seq **link = &s->wait_head;
    struct seq *prev = NULL;
    while (*link) {
        struct seq *q = *link;
        if (!q->cancelled) {
            prev = q;
            link = &q->next;
            continue;
        }
        *link = q->next;
        if (s->wait_tail == q)
            s->wait_tail = prev;
        s->n_waiting_engine--;
        q->next = NULL;
        finish_seq(s, q, GS_FINISH_CANCELLED);
    }
}

/* Gives q's pages back (full registered ones stay cached) and forgets what
 * was computed: q starts again from position 0, prefix cache permitting. */
static void drop_pages(struct gs_sched *s, struct seq *q)
{
    gs_kv_seq_release(s->pool, &q->kv);
    q->n_computed = 0;
    q->n_registered = 0;
    q->chain_hash = GS_KV_HASH_SEED;
}

/* Attaches cached pages for the leading full pages of q's tokens, leaving at
 * least one token to compute (its logits are needed). */
static void attach_prefix(struct gs_sched *s, struct seq *q)
{
    uint32_t pt = page_tokens(s);
    uint32_t usable = (q->n_tokens - 1) / pt;
    while (q->kv.n_pages < usable) {
        uint32_t at = q->kv.n_pages * pt;
        uint64_t h = gs_kv_hash_tokens(q->chain_hash, q->tokens + at, pt);
        if (!gs_kv_seq_append_cached(s->pool, &q->kv, h))
            return;
        q->chain_hash = h;
        q->n_registered = q->kv.n_pages;
        q->n_computed = q->kv.n_tokens;
        if (at < q->n_prompt && !q->t_sched_ms)
            q->st.n_prompt_cached += GS_MIN(pt, q->n_prompt - at);
    }
}

/* First-come-first-served admission while the pool can hold the newcomer's
 * tokens on top of what is free. The head of the queue blocks the rest, so a
 * large request is not starved by smaller ones behind it. */
static void admit(struct gs_sched *s)
{
    while (s->n_running < s->cfg.max_seqs && s->wait_head) {
        struct seq *q = s->wait_head;
        if (s->cfg.prefix_cache && q->n_computed == 0)
            attach_prefix(s, q);
        uint32_t need = pages_for(s, (uint64_t)q->n_tokens + 1) - q->kv.n_pages;
        if (need > gs_kv_pool_n_free(s->pool) && s->n_running > 0) {
            /* Give the attached pages back to the cache: they may be evicted
             * while we wait, and are looked up again at admission. */
            if (q->kv.n_pages && q->n_computed == q->kv.n_tokens)
                drop_pages(s, q);
            break;
        }
        wait_pop(s);
        q->admit_order = ++s->admit_counter;
        if (!q->t_sched_ms)
            q->t_sched_ms = gs_now_ms();
        s->running[s->n_running++] = q;
    }
}

/* Releases q's pages and puts it back at the front of the queue. */
static void preempt(struct gs_sched *s, struct seq *q)
{
    for (uint32_t i = 0; i < s->n_running; i++)
        if (s->running[i] == q) {
            remove_running(s, i);
            break;
        }
    drop_pages(s, q);
    q->st.n_preemptions++;
    wait_push_front(s, q);
    pthread_mutex_lock(&s->mu);
    s->stats.n_preemptions++;
    pthread_mutex_unlock(&s->mu);
}

/* The sequence to give up when pages run out: the most recently admitted one
 * not yet placed in this step (q itself if every other is placed). */
static struct seq *pick_victim(struct gs_sched *s)
{
    struct seq *v = NULL;
    for (uint32_t i = 0; i < s->n_running; i++) {
        struct seq *r = s->running[i];
        if (!r->in_batch && (!v || r->admit_order > v->admit_order))
            v = r;
    }
    return v;
}

/* Makes room in q's pages for its next c tokens, preempting others if needed.
 * Returns false when q itself had to be preempted. */
static bool reserve_pages(struct gs_sched *s, struct seq *q, uint32_t c)
{
    struct gs_err err;
    for (;;) {
        enum gs_status rc = gs_kv_seq_reserve(s->pool, &q->kv, q->n_computed + c, &err);
        if (rc == GS_OK)
            break;
        struct seq *v = pick_victim(s);
        preempt(s, v);
        if (v == q)
            return false;
    }
    /* The first page written may be shared (prefix sharing): copy it first. */
    uint32_t first = q->n_computed / page_tokens(s);
    if (first < q->kv.n_pages && gs_kv_page_refcount(s->pool, q->kv.pages[first]) > 1) {
        while (gs_kv_page_cow(s->pool, &q->kv.pages[first], &err) != GS_OK) {
            struct seq *v = pick_victim(s);
            preempt(s, v);
            if (v == q)
                return false;
        }
    }
    return true;
}

/* Places up to budget tokens of q in the step; returns the tokens placed. */
static uint32_t place(struct gs_sched *s, struct seq *q, uint32_t budget, uint32_t *n_tokens,
                      uint32_t *n_seqs, uint32_t *n_out)
{
    uint32_t pending = q->n_tokens - q->n_computed;
    uint32_t c = GS_MIN(pending, budget);
    if (c == 0 || !reserve_pages(s, q, c))
        return 0;
    uint32_t si = (*n_seqs)++;
    s->step_seqs[si] = q;
    q->in_batch = true;
    q->batch_tokens = c;
    q->out_row = -1;
    for (uint32_t i = 0; i < c; i++) {
        uint32_t t = (*n_tokens)++;
        s->step_tokens[t] = q->tokens[q->n_computed + i];
        s->step_pos[t] = (int32_t)(q->n_computed + i);
        s->step_seq[t] = si;
    }
    if (q->n_computed + c == q->n_tokens) {
        s->step_rows[*n_out] = *n_tokens - 1;
        q->out_row = (int32_t)(*n_out)++;
    }
    return c;
}

static bool is_eog(const struct gs_sched *s, int32_t tok)
{
    for (uint32_t i = 0; i < s->n_eog; i++)
        if (s->eog[i] == tok)
            return true;
    return false;
}

/* Registers q's newly filled pages in the prefix cache. */
static void register_pages(struct gs_sched *s, struct seq *q)
{
    uint32_t pt = page_tokens(s);
    while ((q->n_registered + 1) * pt <= q->n_computed && q->n_registered < q->kv.n_pages) {
        uint32_t at = q->n_registered * pt;
        q->chain_hash = gs_kv_hash_tokens(q->chain_hash, q->tokens + at, pt);
        gs_kv_page_set_hash(s->pool, q->kv.pages[q->n_registered], q->chain_hash);
        q->n_registered++;
    }
}

/* Samples q's next token from its logits row and decides whether it ends. A
 * non-finite logit ends this sequence alone, with GS_NUMERIC. */
static enum gs_finish take_token(struct gs_sched *s, struct seq *q, float *logits)
{
    struct gs_sample_out o;
    struct gs_err err;
    if (s->cfg.logits_hook)
        s->cfg.logits_hook(q->id, q->n_tokens - 1, logits, s->n_vocab, s->cfg.logits_hook_ctx);
    if (q->served)
        memcpy(q->served + (size_t)q->n_generated * s->n_vocab, logits,
               s->n_vocab * sizeof(float));
    enum gs_status rc = gs_sample_next(q->sampler, logits, (int32_t)s->n_vocab, &o, &err);
    if (rc) {
        q->err_code = rc;
        snprintf(q->err_msg, sizeof(q->err_msg), "position %u: %.200s", q->n_tokens - 1, err.msg);
        return GS_FINISH_ERROR;
    }
    if (!q->t_first_ms)
        q->t_first_ms = gs_now_ms();
    q->tokens[q->n_tokens++] = o.token;
    q->n_generated++;
    struct gs_sched_event ev = {.kind = GS_SCHED_EV_TOKEN, .id = q->id, .token = o.token,
                                .logprob = o.logprob};
    if (!push_event(s, &ev, o.top, q->n_top ? (uint32_t)o.n_top : 0)) {
        q->err_code = GS_NOMEM;
        snprintf(q->err_msg, sizeof(q->err_msg), "no memory for an event");
        return GS_FINISH_ERROR;
    }
    if (o.stop)
        return GS_FINISH_STOP;
    if (!q->ignore_eos && is_eog(s, o.token))
        return GS_FINISH_EOS;
    if (q->n_generated >= q->max_tokens || q->n_tokens >= s->n_ctx)
        return GS_FINISH_LENGTH;
    return GS_FINISH_NONE;
}

static void update_stats(struct gs_sched *s, uint32_t batch_tokens, uint64_t prompt_tokens,
                         uint64_t gen_tokens)
{
    struct gs_kv_stats ks;
    gs_kv_pool_stats(s->pool, &ks);
    pthread_mutex_lock(&s->mu);
    s->stats.n_steps += batch_tokens > 0;
    s->stats.last_batch_tokens = batch_tokens;
    if (batch_tokens > 0) {
        size_t b = 0;
        while (b < GS_SCHED_BATCH_BUCKETS - 1 && batch_tokens > gs_sched_batch_bounds[b])
            b++;
        s->stats.batch_steps[b]++;
        s->stats.batch_tokens_sum += batch_tokens;
    }
    s->stats.n_tokens_prompt += prompt_tokens;
    s->stats.n_tokens_generated += gen_tokens;
    s->stats.n_running = s->n_running;
    s->stats.n_waiting = s->n_waiting_engine;
    s->stats.pages_total = ks.pages_total;
    s->stats.pages_used = ks.pages_used;
    s->stats.pages_cached = ks.pages_cached;
    s->stats.pages_free = ks.pages_free;
    s->stats.n_evictions = ks.n_evictions;
    s->stats.n_prefix_hit_tokens = ks.n_hits * page_tokens(s);
    s->stats.kv_bytes = (uint64_t)ks.pages_total * ks.page_bytes;
    s->stats.scratch_bytes = gs_plan_cache_scratch_bytes(&s->run->plans);
    s->stats.n_validating = s->n_vjobs;
    pthread_mutex_unlock(&s->mu);
}

static void notify(struct gs_sched *s)
{
    pthread_mutex_lock(&s->mu);
    bool pending = s->n_events > 0;
    pthread_mutex_unlock(&s->mu);
    if (pending && s->cfg.notify)
        s->cfg.notify(s->cfg.notify_ctx);
}

enum gs_status gs_sched_step(struct gs_sched *s, struct gs_err *err)
{
    take_inbox(s);
    drop_cancelled(s);
    admit(s);

    /* Build the batch: decodes first, then prefill chunks, oldest first. */
    uint32_t n_tokens = 0, n_seqs = 0, n_out = 0, budget = s->cfg.max_batch_tokens;
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t i = 0; i < s->n_running && budget > 0; i++) {
            struct seq *q = s->running[i];
            bool decoding = q->n_tokens - q->n_computed == 1;
            if (q->in_batch || decoding != (pass == 0))
                continue;
            uint32_t before = s->n_running;
            budget -= place(s, q, budget, &n_tokens, &n_seqs, &n_out);
            /* A preemption reshuffled running[]: scan it again from the start
             * (i wraps to 0). Victims are never placed sequences, so the step
             * built so far stays valid. */
            if (s->n_running != before)
                i = UINT32_MAX;
        }
    }
    uint64_t prompt_tokens = 0, gen_tokens = 0;
    enum gs_status rc = GS_OK;
    if (n_tokens > 0) {
        for (uint32_t i = 0; i < n_seqs; i++)
            s->step_pages[i] = (struct gs_seq_pages){s->step_seqs[i]->kv.pages,
                                                     s->step_seqs[i]->kv.n_pages};
        struct gs_step_io io = {.n_tokens = n_tokens, .tokens = s->step_tokens,
                                .pos = s->step_pos, .seq = s->step_seq, .n_seqs = n_seqs,
                                .seqs = s->step_pages, .kv = &s->kv, .n_outputs = n_out,
                                .out_rows = s->step_rows, .logits = s->logits};
        rc = gs_runner_step(s->run, &io, err);
    }
    for (uint32_t i = 0; i < n_seqs; i++) {
        struct seq *q = s->step_seqs[i];
        q->in_batch = false;
        enum gs_finish fin = GS_FINISH_NONE;
        if (rc) {
            q->err_code = rc;
            snprintf(q->err_msg, sizeof(q->err_msg), "engine step failed: %.200s", err->msg);
            fin = GS_FINISH_ERROR;
        } else {
            uint32_t a = q->n_computed, b = a + q->batch_tokens;
            if (a < q->high_water)
                q->st.n_recomputed += GS_MIN(b, q->high_water) - a;
            if (a < q->n_prompt)
                prompt_tokens += GS_MIN(b, q->n_prompt) - a;
            q->n_computed = b;
            q->high_water = GS_MAX(q->high_water, b);
            if (q->out_row >= 0) {
                fin = take_token(s, q, s->logits + (size_t)q->out_row * s->n_vocab);
                gen_tokens += fin != GS_FINISH_ERROR;
            }
            /* A sequence whose numerics failed never shares its pages. */
            if (s->cfg.prefix_cache && fin != GS_FINISH_ERROR)
                register_pages(s, q);
        }
        if (fin != GS_FINISH_NONE) {
            for (uint32_t r = 0; r < s->n_running; r++)
                if (s->running[r] == q) {
                    remove_running(s, r);
                    break;
                }
            finish_seq(s, q, fin);
        }
    }
    /* One bounded slice of reference evaluation per step, after serving. */
    validate_step(s);
    update_stats(s, n_tokens, prompt_tokens, gen_tokens);
    notify(s);
    return rc;
}

bool gs_sched_idle(struct gs_sched *s)
{
    pthread_mutex_lock(&s->mu);
    bool inbox_empty = s->n_inbox == 0 && s->n_cancels == 0;
    pthread_mutex_unlock(&s->mu);
    return inbox_empty && s->n_running == 0 && s->wait_head == NULL && s->n_vjobs == 0;
}

/* Ends every request still known to the engine with why. */
static void abort_all(struct gs_sched *s, enum gs_finish why)
{
    if (!s->pool)
        return;
    take_inbox(s);
    while (s->n_running > 0) {
        struct seq *q = s->running[s->n_running - 1];
        s->n_running--;
        finish_seq(s, q, why);
    }
    struct seq *q;
    while ((q = wait_pop(s)))
        finish_seq(s, q, why);
    while (s->vjobs_head)
        vjob_done(s, NULL, "validation aborted: the scheduler stopped");
    update_stats(s, 0, 0, 0);
    notify(s);
}

/* ---- threaded mode ------------------------------------------------------------------------ */

static void *engine_main(void *arg)
{
    struct gs_sched *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->stopping && s->n_inbox == 0 && s->n_cancels == 0 && s->n_running == 0 &&
               !s->wait_head && s->n_vjobs == 0)
            pthread_cond_wait(&s->wake, &s->mu);
        bool stop = s->stopping;
        pthread_mutex_unlock(&s->mu);
        if (stop)
            break;
        struct gs_err err;
        gs_sched_step(s, &err);
    }
    return NULL;
}

enum gs_status gs_sched_start(struct gs_sched *s, struct gs_err *err)
{
    if (s->thread_running)
        return GS_OK;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    int e = pthread_attr_setstacksize(&attr, GS_BE_THREAD_STACK_BYTES);
    if (!e)
        e = pthread_create(&s->thread, &attr, engine_main, s);
    pthread_attr_destroy(&attr);
    if (e)
        return gs_err_set(err, GS_NOMEM, "cannot start the engine thread: %s", strerror(e));
    s->thread_running = true;
    return GS_OK;
}

void gs_sched_stop(struct gs_sched *s, uint32_t drain_ms)
{
    if (!s->thread_running)
        return;
    pthread_mutex_lock(&s->mu);
    s->draining = true;
    pthread_mutex_unlock(&s->mu);
    /* Let running work finish within drain_ms; the engine thread keeps stepping. */
    double deadline = gs_now_ms() + drain_ms;
    for (;;) {
        struct gs_sched_stats st;
        gs_sched_stats(s, &st);
        if ((st.n_running == 0 && st.n_waiting == 0 && st.n_validating == 0) ||
            gs_now_ms() >= deadline)
            break;
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    s->thread_running = false;
    abort_all(s, GS_FINISH_ABORT);
}
