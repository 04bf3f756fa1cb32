/*
 * scheduler/sched.c - continuous batching over the paged KV cache: creation, the
 * loop thread's side and the engine thread (scheduler/internal.h says
 * which file holds what). See scheduler/scheduler.h for the contract.
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
#include "scheduler/internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
    uint64_t want = seqs * gs_sched__pages_for(s, s->n_ctx) * page_bytes;
    return GS_MIN(want, avail / 4);
}

static enum gs_status make_pool(struct gs_sched *s, struct gs_err *err)
{
    const struct gs_model *m = s->model;
    uint32_t pt = s->cfg.page_tokens;
    const uint64_t row = gs_kv_row_bytes(s->cfg.kv_type, gs_model_kv_dim(m));
    /* A q8_0 row is whole blocks of 32: rows of fewer than 32 values pad to more
     * bytes than f16 takes, the opposite of what the type is asked for. */
    if (s->cfg.kv_type == GS_TYPE_Q8_0 && row >= gs_kv_row_bytes(GS_TYPE_F16, gs_model_kv_dim(m)))
        return gs_err_set(err, GS_INVAL,
                          "kv_type q8_0: this model's K and V rows of %u values take %llu bytes "
                          "in q8_0 blocks of 32, no fewer than f16's %llu: use f16",
                          gs_model_kv_dim(m), (unsigned long long)row,
                          (unsigned long long)gs_kv_row_bytes(GS_TYPE_F16, gs_model_kv_dim(m)));
    uint64_t page_bytes = (uint64_t)gs_model_kv_layers(m) * 2 * pt * row;
    s->kv.page_tokens = pt; /* gs_sched__pages_for() needs it before the pool exists */
    /* A file's context_length is whatever its writer put there (2^32-1 has
     * been seen). One sequence of it must fit in the memory there is: a
     * context asked for (--n-ctx) that does not is refused, the model's own
     * is cut down to what a quarter of the memory holds. */
    uint64_t avail = available_memory_bytes();
    uint64_t ctx_bytes = gs_sched__pages_for(s, s->n_ctx) * page_bytes;
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
    uint64_t min_pages = gs_sched__pages_for(s, s->n_ctx);
    if (n_pages < 1)
        return gs_err_set(err, GS_INVAL, "kv_cache_bytes: %llu bytes hold no page of %llu bytes",
                          (unsigned long long)bytes, (unsigned long long)page_bytes);
    if (!s->cfg.kv_cache_bytes && n_pages < min_pages)
        n_pages = min_pages;
    if (n_pages >= GS_KV_PAGE_NONE)
        n_pages = GS_KV_PAGE_NONE - 1;
    struct gs_kv_pool_cfg pc = {.n_layer = gs_model_kv_layers(m),
                                .kv_dim = gs_model_kv_dim(m),
                                .type = s->cfg.kv_type,
                                .page_tokens = pt,
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
    if (c->kv_type != GS_TYPE_F32 && c->kv_type != GS_TYPE_F16 && c->kv_type != GS_TYPE_Q8_0)
        return gs_err_set(err, GS_INVAL, "kv_type: %s is not f16, f32 or q8_0",
                          gs_type_name(c->kv_type));
    if (c->page_tokens > 4096)
        return gs_err_set(err, GS_INVAL, "page_tokens: %u is over 4096", c->page_tokens);
    if (c->max_seqs > 4096)
        return gs_err_set(err, GS_INVAL, "max_seqs: %u is over 4096", c->max_seqs);
    if (!c->spec_max_draft)
        c->spec_max_draft = DEFAULT_SPEC_MAX_DRAFT;
    if (!c->spec_ngram)
        c->spec_ngram = DEFAULT_SPEC_NGRAM;
    if (c->spec != GS_SPEC_OFF && c->spec != GS_SPEC_NGRAM && c->spec != GS_SPEC_DRAFT)
        return gs_err_set(err, GS_INVAL, "spec: unknown drafter %d", (int)c->spec);
    if ((c->spec == GS_SPEC_DRAFT) != (c->draft_model != NULL))
        return gs_err_set(err, GS_INVAL,
                          c->draft_model ? "draft_model: given, but spec is not draft"
                                         : "spec: the draft drafter needs a draft model");
    if (c->spec_max_draft > MAX_SPEC_DRAFT)
        return gs_err_set(err, GS_INVAL, "spec_max_draft: %u is over %d", c->spec_max_draft,
                          MAX_SPEC_DRAFT);
    if (c->spec_ngram < 2 || c->spec_ngram > 64)
        return gs_err_set(err, GS_INVAL, "spec_ngram: %u is not in [2, 64]", c->spec_ngram);
    if (c->max_batch_tokens > (1u << 20))
        return gs_err_set(err, GS_INVAL, "max_batch_tokens: %u is over 2^20", c->max_batch_tokens);
    return GS_OK;
}

static enum gs_status alloc_step_buffers(struct gs_sched *s)
{
    uint32_t nt = s->cfg.max_batch_tokens, ns = s->cfg.max_seqs;
    s->running = gs_calloc(ns, sizeof(*s->running));
    s->step_tokens = gs_alloc_array(nt, sizeof(*s->step_tokens));
    s->step_pos = gs_alloc_array(nt, sizeof(*s->step_pos));
    s->step_seq = gs_alloc_array(nt, sizeof(*s->step_seq));
    /* Drafted tokens need logits rows of their own, bounded by the token budget. */
    s->max_draft_rows =
        s->cfg.spec ? GS_MIN(GS_MIN(ns, SPEC_DRAFT_SEQS) * s->cfg.spec_max_draft, nt) : 0;
    s->max_out_rows = ns + s->max_draft_rows;
    s->step_rows = gs_alloc_array(s->max_out_rows, sizeof(*s->step_rows));
    s->step_pages = gs_alloc_array(ns, sizeof(*s->step_pages));
    s->step_seqs = gs_alloc_array(ns, sizeof(*s->step_seqs));
    s->logits = gs_alloc_array((size_t)s->max_out_rows * s->n_vocab, sizeof(float));
    /* Embeddings need every row's hidden state: a graph without the root serves none. */
    if (gs_graph_hidden_node(s->model->graph) != GS_NODE_NONE)
        s->hidden = gs_alloc_array((size_t)nt * s->n_embd, sizeof(float));
    bool ok = s->running && s->step_tokens && s->step_pos && s->step_seq && s->step_rows &&
              s->step_pages && s->step_seqs && s->logits &&
              (s->hidden || gs_graph_hidden_node(s->model->graph) == GS_NODE_NONE);
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
    s->n_embd = model->hp.n_embd;
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
    if (s->cfg.spec == GS_SPEC_DRAFT && (rc = gs_sched__draft_open(s, err)))
        goto fail;
    if ((rc = alloc_step_buffers(s)) || (rc = gs_sched__trace_init(s))) {
        gs_err_set(err, rc, "no memory for step buffers of %u tokens", s->cfg.max_batch_tokens);
        goto fail;
    }
    gs_sched__update_stats(s, 0, 0, 0);
    *out = s;
    return GS_OK;
fail:
    gs_sched_free(s);
    return rc;
}

void gs_sched_free(struct gs_sched *s)
{
    if (!s)
        return;
    gs_sched_stop(s, 0);
    gs_sched__abort_all(s, GS_FINISH_ABORT);
    gs_sched__draft_free(s);
    gs_runner_free(s->run);
    gs_sched__ref_free(s);
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
        gs_sched__item_free(&s->events[i]);
    for (size_t i = 0; i < s->n_borrowed; i++)
        gs_sched__item_free(&s->borrowed[i]);
    gs_free(s->hidden);
    gs_sched__trace_free(s);
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
    const bool embed = req->pooling != GS_POOLING_NONE;
    if (embed && (!gs_pooling_name(req->pooling) || !s->hidden))
        return gs_err_set(err, GS_UNSUPPORTED, "embeddings: %s",
                          s->hidden ? "unknown pooling"
                                    : "this model's graph has no hidden states");
    if (embed && req->n_prompt > s->n_ctx)
        return gs_err_set(err, GS_INVAL,
                          "context_length_exceeded: %u input tokens exceed the context length %u",
                          req->n_prompt, s->n_ctx);
    if (!embed && req->max_tokens < 1)
        return gs_err_set(err, GS_INVAL, "max_tokens: must be at least 1");
    uint64_t total = (uint64_t)req->n_prompt + (embed ? 0 : req->max_tokens);
    if (total > s->n_ctx)
        return gs_err_set(err, GS_INVAL,
                          "context_length_exceeded: %u prompt tokens plus max_tokens %u exceed "
                          "the context length %u",
                          req->n_prompt, req->max_tokens, s->n_ctx);
    if (gs_sched__pages_for(s, total) > s->kv.n_pages)
        return gs_err_set(err, GS_INVAL,
                          "request needs %u KV pages for %llu tokens; the whole pool has %u",
                          gs_sched__pages_for(s, total), (unsigned long long)total, s->kv.n_pages);
    for (uint32_t i = 0; i < req->n_prompt; i++)
        if (req->prompt[i] < 0 || (uint32_t)req->prompt[i] >= s->n_vocab)
            return gs_err_set(err, GS_INVAL, "prompt[%u]: token id %d is outside [0, %u)", i,
                              req->prompt[i], s->n_vocab);
    if (req->n_top_logprobs > GS_SAMPLE_TOP_LOGPROBS_MAX)
        return gs_err_set(err, GS_INVAL, "top_logprobs: %u is over %d", req->n_top_logprobs,
                          GS_SAMPLE_TOP_LOGPROBS_MAX);
    if (req->grammar && (!req->grammar_vocab || gs_grammar_vocab_n(req->grammar_vocab) != s->n_vocab))
        return gs_err_set(err, GS_INVAL, "grammar: needs the model's vocabulary of %u tokens",
                          s->n_vocab);

    struct seq *q = gs_calloc(1, sizeof(*q));
    if (!q)
        return gs_err_set(err, GS_NOMEM, "no memory for a request");
    q->cap = (uint32_t)total;
    q->tokens = gs_alloc_array(q->cap, sizeof(*q->tokens));
    struct gs_sample_params sp = req->sampling;
    sp.logprobs = req->want_logprobs || req->n_top_logprobs > 0;
    sp.top_logprobs = (int32_t)req->n_top_logprobs;
    enum gs_status rc = !q->tokens ? gs_err_set(err, GS_NOMEM, "no memory for a request")
                        : embed    ? GS_OK
                                : gs_sample_state_new(&sp, (int32_t)s->n_vocab, &q->sampler, err);
    if (!rc && embed && !(q->embd = gs_calloc(s->n_embd, sizeof(float))))
        rc = gs_err_set(err, GS_NOMEM, "no memory for an embedding");
    if (!rc && !embed)
        rc = gs_sample_accept_prompt(q->sampler, req->prompt, (int32_t)req->n_prompt, err);
    if (rc) {
        gs_sample_state_free(q->sampler);
        gs_free(q->embd);
        gs_free(q->tokens);
        gs_free(q);
        return rc;
    }
    memcpy(q->tokens, req->prompt, req->n_prompt * sizeof(*q->tokens));
    q->id = req->id;
    q->n_tokens = q->n_prompt = req->n_prompt;
    q->max_tokens = embed ? 0 : req->max_tokens;
    q->pooling = req->pooling;
    q->ignore_eos = req->ignore_eos;
    q->want_logprobs = sp.logprobs;
    q->n_top = req->n_top_logprobs;
    q->chain_hash = GS_KV_HASH_SEED;
    q->out_row = -1;
    q->t_submit_ms = gs_now_ms();
    if (s->cfg.spec && !embed) {
        q->spec_k = s->cfg.spec_max_draft;
        q->spec_rate = 1.0f;
        q->spec_backoff = SPEC_BACKOFF_MIN;
        if (!(q->draft = gs_alloc_array(s->cfg.spec_max_draft, sizeof(*q->draft)))) {
            gs_sched__seq_free(s, q);
            return gs_err_set(err, GS_NOMEM, "no memory for a request");
        }
    }
    if (req->validate && !embed) {
        /* one extra row: a sequence that fails on a non-finite row keeps it */
        uint64_t bytes = ((uint64_t)q->max_tokens + 1) * s->n_vocab * sizeof(float);
        if (bytes > MAX_VALIDATE_BYTES) {
            gs_sched__seq_free(s, q);
            return gs_err_set(err, GS_INVAL,
                              "validation: max_tokens %u x %u vocabulary logits exceed %u MiB",
                              q->max_tokens, s->n_vocab, MAX_VALIDATE_BYTES >> 20);
        }
        q->served = gs_malloc((size_t)bytes);
        if (!q->served) {
            gs_sched__seq_free(s, q);
            return gs_err_set(err, GS_NOMEM, "validation: no memory for the served logits");
        }
    }
    if (req->grammar && !embed) {
        /* The matcher starts here, on the caller's thread: it only reads the
         * rules. Its masks (and the grammar's cache) belong to the engine. */
        rc = gs_grammar_matcher_new(req->grammar, req->grammar_vocab, &q->matcher, err);
        if (!rc && !(q->allow = gs_calloc(((size_t)s->n_vocab + 63) / 64, sizeof(uint64_t))))
            rc = gs_err_set(err, GS_NOMEM, "no memory for a grammar mask");
        q->vocab = req->grammar_vocab;
        q->grammar_on = !req->grammar_trigger || !req->grammar_trigger[0];
        if (!rc && !q->grammar_on) {
            /* Sized here so that a step allocates nothing. */
            q->trigger_len = (uint32_t)strlen(req->grammar_trigger);
            q->trigger = gs_strdup(req->grammar_trigger);
            q->window = gs_malloc((size_t)q->trigger_len + gs_grammar_vocab_max_len(q->vocab) + 1);
            if (!q->trigger || !q->window)
                rc = gs_err_set(err, GS_NOMEM, "no memory for a grammar trigger");
        }
        if (rc) {
            gs_sched__seq_free(s, q);
            return rc;
        }
    }
    gs_kv_seq_init(&q->kv);
    gs_kv_seq_init(&q->dkv);

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
        gs_sched__seq_free(s, q);
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

/* Event queue capacities above this are released once drained (see poll). An
 * item is about 600 bytes, so 128 of them stay in the heap; the next doubling, 256,
 * is past glibc's mmap threshold (128 KiB, serve.c) and is a mapping of its own
 * whose pages become resident one burst at a time: kept, an idle daemon's memory
 * climbed toward its largest burst's (the daemon soak saw that mapping go from 88
 * to 140 KiB resident between its warm-up and its end). */
#define EVENTS_SHRINK_AT 128

size_t gs_sched_poll(struct gs_sched *s, struct gs_sched_event *out, size_t cap)
{
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < s->n_borrowed; i++)
        gs_sched__item_free(&s->borrowed[i]);
    s->n_borrowed = 0;
    if (s->cap_borrowed > EVENTS_SHRINK_AT) {
        gs_free(s->borrowed);
        s->borrowed = NULL;
        s->cap_borrowed = 0;
    }
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
    /* A burst (many streams, a slow loop) grows the queue to its peak; once
     * drained, a queue far larger than the default goes back to it, so that
     * an idle daemon holds no more than it did before the burst. The margin
     * keeps an ordinary step's events from reallocating it every poll. */
    if (s->n_events == 0 && s->cap_events > EVENTS_SHRINK_AT) {
        gs_free(s->events);
        s->events = NULL;
        s->cap_events = 0;
    }
    pthread_mutex_unlock(&s->mu);
    for (size_t i = 0; i < n; i++) {
        out[i] = s->borrowed[i].ev;
        out[i].top = s->borrowed[i].ev.n_top ? s->borrowed[i].top : NULL;
        out[i].validation = s->borrowed[i].report;
        out[i].embedding = s->borrowed[i].embd;
    }
    return n;
}

void gs_sched_stats(struct gs_sched *s, struct gs_sched_stats *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->stats;
    out->n_waiting += s->n_inbox;
    out->event_bytes = (uint64_t)(s->cap_events + s->cap_borrowed) * sizeof(struct ev_item);
    pthread_mutex_unlock(&s->mu);
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
    int e = pthread_attr_setstacksize(&attr, GS_THREAD_STACK_BYTES);
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
    gs_sched__abort_all(s, GS_FINISH_ABORT);
}
