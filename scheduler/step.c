/*
 * scheduler/step.c - the engine's side of the scheduler: the waiting queue,
 * admission, prefix attachment, preemption, building and running one batch,
 * sampling and finishing. The algorithm is described in scheduler/sched.c.
 */
#define _GNU_SOURCE
#include "scheduler/internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The batch-size histogram's bucket bounds, counted in gs_sched__update_stats. */
const uint32_t gs_sched_batch_bounds[GS_SCHED_BATCH_BUCKETS - 1] = {
    1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024,
};

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

/* The hash chain of q's first i full pages, continued from *chain which covers
 * its first *at pages (recomputed from q's tokens, so that it does not depend
 * on which pages q registered). */
static uint64_t chain_to(const struct gs_sched *s, const struct seq *q, uint64_t chain,
                         uint32_t *at, uint32_t i)
{
    uint32_t pt = gs_sched__page_tokens(s);
    for (; *at < i; (*at)++)
        chain = gs_kv_hash_tokens(chain, q->tokens + (size_t)*at * pt, pt);
    return chain;
}

/*
 * Offers the partial pages of a sequence that ends to the prefix cache, so a
 * request that repeats it reuses every computed position, not only its full
 * pages: the page holding the last prompt token under the key of the prompt's
 * positions before it (a copy, since that page may be full and keyed already:
 * the same prompt again leaves exactly its last token to compute), and the
 * last page under the key of every position computed (a conversation's next
 * turn starts with this one's text). A partial key is the hash of the page's
 * first n tokens chained from the full pages before it; the chain is walked
 * once for both, as the prompt's page never follows the last page. q's pages
 * must still be held.
 */
static void register_tails(struct gs_sched *s, struct seq *q)
{
    uint32_t pt = gs_sched__page_tokens(s);
    uint64_t chain = GS_KV_HASH_SEED;
    uint32_t at = 0;
    uint32_t last = q->n_prompt - 1, i = last / pt;
    if (last % pt && last < q->n_computed && i < q->kv.n_pages) {
        chain = chain_to(s, q, chain, &at, i);
        gs_kv_page_cache_copy(s->pool, q->kv.pages[i],
                              gs_kv_hash_tokens(chain, q->tokens + (size_t)i * pt, last % pt));
    }
    uint32_t tail = q->n_computed % pt, j = q->n_computed / pt;
    if (tail && j < q->kv.n_pages && gs_kv_page_refcount(s->pool, q->kv.pages[j]) == 1) {
        chain = chain_to(s, q, chain, &at, j);
        gs_kv_page_set_hash(s->pool, q->kv.pages[j],
                            gs_kv_hash_tokens(chain, q->tokens + (size_t)j * pt, tail));
    }
}

/* Ends a sequence: releases its pages (registered ones stay cached), emits its
 * FINISH event and frees it. It must be out of every queue. */
static void finish_seq(struct gs_sched *s, struct seq *q, enum gs_finish why)
{
    q->finish = why;
    /* A sequence whose numerics failed never shares its pages. */
    if (s->cfg.prefix_cache && why != GS_FINISH_ERROR)
        register_tails(s, q);
    gs_kv_seq_release(s->pool, &q->kv);
    /* A request that ran to an end gets its reference evaluation; one that was
     * cancelled or aborted has no client left to read it. queue_vjob takes the
     * tokens and the served logits. */
    bool validating = q->served && why != GS_FINISH_CANCELLED && why != GS_FINISH_ABORT &&
                      gs_sched__queue_vjob(s, q);
    if (!validating)
        gs_free(q->served);
    q->served = NULL;
    gs_sched__emit_finish(s, q, validating);
    pthread_mutex_lock(&s->mu);
    if (why == GS_FINISH_CANCELLED)
        s->stats.n_cancelled++;
    if (why == GS_FINISH_ERROR)
        s->stats.n_errors++;
    pthread_mutex_unlock(&s->mu);
    gs_sched__seq_free(s, q);
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
    gs_sched__draft_release(s, q);
    q->n_computed = 0;
    q->n_registered = 0;
    q->chain_hash = GS_KV_HASH_SEED;
    /* An embedding pools again from the first row. */
    if (q->embd)
        memset(q->embd, 0, s->n_embd * sizeof(*q->embd));
}

/* Attaches cached pages for the leading full pages of q's tokens, leaving at
 * least one token to compute (its logits are needed). Returns the positions
 * attached. */
static uint32_t attach_prefix(struct gs_sched *s, struct seq *q)
{
    uint32_t pt = gs_sched__page_tokens(s), before = q->n_computed;
    uint32_t usable = (q->n_tokens - 1) / pt;
    while (q->kv.n_pages < usable) {
        uint32_t at = q->kv.n_pages * pt;
        uint64_t h = gs_kv_hash_tokens(q->chain_hash, q->tokens + at, pt);
        if (!gs_kv_seq_append_cached(s->pool, &q->kv, h))
            break;
        q->chain_hash = h;
        q->n_registered = q->kv.n_pages;
        q->n_computed = q->kv.n_tokens;
        if (at < q->n_prompt && !q->t_sched_ms)
            q->st.n_prompt_cached += GS_MIN(pt, q->n_prompt - at);
    }
    return q->n_computed - before;
}

/* After attach_prefix, once q is sure to be admitted: a copy of the longest
 * cached partial page that continues q's full pages (register_tails says
 * which exist), again leaving one token to compute. The copy may evict a
 * cached page, so a request still waiting for room never takes one. Returns
 * the positions attached. */
static uint32_t attach_partial(struct gs_sched *s, struct seq *q)
{
    uint32_t pt = gs_sched__page_tokens(s), at = q->kv.n_pages * pt;
    for (uint32_t k = GS_MIN(pt - 1, q->n_tokens - 1 - at); k > 0; k--) {
        uint64_t h = gs_kv_hash_tokens(q->chain_hash, q->tokens + at, k);
        if (!gs_kv_seq_append_copy(s->pool, &q->kv, h, k))
            continue;
        /* The copy is not registered: register_pages keys it once full. */
        q->n_computed = q->kv.n_tokens;
        if (at < q->n_prompt && !q->t_sched_ms)
            q->st.n_prompt_cached += GS_MIN(k, q->n_prompt - at);
        return k;
    }
    return 0;
}

/* First-come-first-served admission while the pool can hold the newcomer's
 * tokens on top of what is free. The head of the queue blocks the rest, so a
 * large request is not starved by smaller ones behind it. */
static void admit(struct gs_sched *s)
{
    while (s->n_running < s->cfg.max_seqs && s->wait_head) {
        struct seq *q = s->wait_head;
        /* An embedding pools every row: cached pages would skip them. */
        uint32_t hit = 0;
        const bool cacheable = s->cfg.prefix_cache && q->n_computed == 0 && !q->pooling;
        if (cacheable)
            hit = attach_prefix(s, q);
        uint32_t need = gs_sched__pages_for(s, (uint64_t)q->n_tokens + 1) - q->kv.n_pages;
        if (need > gs_kv_pool_n_free(s->pool) && s->n_running > 0) {
            /* Give the attached pages back to the cache: they may be evicted
             * while we wait, and are looked up again at admission. */
            if (q->kv.n_pages && q->n_computed == q->kv.n_tokens)
                drop_pages(s, q);
            break;
        }
        if (cacheable)
            hit += attach_partial(s, q);
        wait_pop(s);
        if (hit && gs_sched__tracing(s))
            gs_sched__trace_hit(s, q->id, q->kv.n_pages, hit);
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
    if (gs_sched__tracing(s))
        gs_sched__trace_preempt(s, q->id);
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
    uint32_t first = q->n_computed / gs_sched__page_tokens(s);
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

/* Places up to budget tokens of q in the step (lay_out writes them); returns
 * the tokens placed. */
static uint32_t place(struct gs_sched *s, struct seq *q, uint32_t budget, uint32_t *n_seqs)
{
    uint32_t pending = q->n_tokens - q->n_computed;
    uint32_t c = GS_MIN(pending, budget);
    if (c == 0 || !reserve_pages(s, q, c))
        return 0;
    s->step_seqs[(*n_seqs)++] = q;
    q->in_batch = true;
    q->batch_tokens = c;
    q->n_draft = 0;
    return c;
}

/* Writes the step's token rows, sequence by sequence: each one's placed tokens
 * then its drafted ones, and a logits row for its last placed token and for
 * each drafted one when that chunk reaches its last token. */
static void lay_out(struct gs_sched *s, uint32_t n_seqs, uint32_t *n_tokens, uint32_t *n_out)
{
    uint32_t t = 0, o = 0;
    for (uint32_t si = 0; si < n_seqs; si++) {
        struct seq *q = s->step_seqs[si];
        q->row0 = t;
        q->out_row = -1;
        for (uint32_t i = 0; i < q->batch_tokens + q->n_draft; i++, t++) {
            s->step_tokens[t] = i < q->batch_tokens ? q->tokens[q->n_computed + i]
                                                     : q->draft[i - q->batch_tokens];
            s->step_pos[t] = (int32_t)(q->n_computed + i);
            s->step_seq[t] = si;
        }
        if (q->n_computed + q->batch_tokens == q->n_tokens && !q->pooling) {
            q->out_row = (int32_t)o;
            for (uint32_t r = 0; r <= q->n_draft; r++)
                s->step_rows[o++] = q->row0 + q->batch_tokens - 1 + r;
        }
    }
    *n_tokens = t;
    *n_out = o;
}

/* Registers q's newly filled pages in the prefix cache. */
static void register_pages(struct gs_sched *s, struct seq *q)
{
    uint32_t pt = gs_sched__page_tokens(s);
    while ((q->n_registered + 1) * pt <= q->n_computed && q->n_registered < q->kv.n_pages) {
        uint32_t at = q->n_registered * pt;
        q->chain_hash = gs_kv_hash_tokens(q->chain_hash, q->tokens + at, pt);
        gs_kv_page_set_hash(s->pool, q->kv.pages[q->n_registered], q->chain_hash);
        q->n_registered++;
    }
}

/* Fills q->allow with the tokens q's grammar allows next: end-of-generation
 * tokens only where the grammar may end, and never with ignore_eos (they
 * would be generated as text the grammar cannot follow). */
static enum gs_status grammar_mask(struct gs_sched *s, struct seq *q, struct gs_err *err)
{
    bool can_end = false;
    enum gs_status rc = gs_grammar_matcher_mask(q->matcher, q->allow, &can_end, err);
    /* Over a run-time limit the grammar is at fault, not the server's load:
     * the request's error (a 400), not a busy server's (a 429). */
    if (rc == GS_BUSY)
        err->code = rc = GS_INVAL;
    if (rc)
        return rc;
    for (uint32_t i = 0; i < s->n_eog; i++) {
        uint32_t t = (uint32_t)s->eog[i];
        if (can_end && !q->ignore_eos)
            q->allow[t >> 6] |= 1ull << (t & 63);
        else
            q->allow[t >> 6] &= ~(1ull << (t & 63));
    }
    return GS_OK;
}

/*
 * A grammar with a trigger: appends token's bytes to q's window and, once the
 * window holds the trigger, starts the grammar on the text from the trigger's
 * first byte. A grammar that refuses that text is dropped: the sequence goes
 * on free, and its reader finds no well-formed call. GS_BUSY (over a matcher
 * limit) is the sequence's error, as in take_token.
 */
static enum gs_status watch_trigger(struct seq *q, int32_t token, struct gs_err *err)
{
    uint32_t n;
    const char *p = gs_grammar_vocab_piece(q->vocab, token, &n);
    memcpy(q->window + q->window_len, p, n);
    q->window_len += n;
    const char *at = memmem(q->window, q->window_len, q->trigger, q->trigger_len);
    if (at) {
        enum gs_status rc = gs_grammar_matcher_accept_bytes(
            q->matcher, at, (size_t)(q->window + q->window_len - at), err);
        if (rc == GS_BUSY)
            return rc;
        if (rc == GS_OK) {
            q->grammar_on = true;
            return GS_OK;
        }
        gs_grammar_matcher_free(q->matcher);
        q->matcher = NULL;
        return GS_OK;
    }
    uint32_t keep = GS_MIN(q->window_len, q->trigger_len - 1);
    memmove(q->window, q->window + q->window_len - keep, keep);
    q->window_len = keep;
    return GS_OK;
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
        memcpy(q->served + (size_t)q->n_generated * s->n_vocab, logits, s->n_vocab * sizeof(float));
    enum gs_status rc = GS_OK;
    bool masked = q->matcher && q->grammar_on;
    uint64_t t_grammar = q->matcher ? gs_now_ns() : 0;
    if (masked)
        rc = grammar_mask(s, q, &err);
    if (q->matcher)
        q->st.grammar_ms += (double)(gs_now_ns() - t_grammar) / 1e6;
    if (!rc)
        rc = gs_sample_next_masked(q->sampler, logits, (int32_t)s->n_vocab,
                                   masked ? q->allow : NULL, &o, &err);
    /* The grammar follows the text: a token it refuses cannot have been
     * sampled, but an end-of-generation token has no text to follow. */
    if (!rc && masked && !gs_sched__is_eog(s, o.token)) {
        t_grammar = gs_now_ns();
        if ((rc = gs_grammar_matcher_accept(q->matcher, o.token, &err)) == GS_BUSY)
            rc = GS_INVAL;
        q->st.grammar_ms += (double)(gs_now_ns() - t_grammar) / 1e6;
    }
    if (!rc && q->matcher && !masked && !gs_sched__is_eog(s, o.token)) {
        t_grammar = gs_now_ns();
        if ((rc = watch_trigger(q, o.token, &err)) == GS_BUSY)
            rc = GS_INVAL;
        q->st.grammar_ms += (double)(gs_now_ns() - t_grammar) / 1e6;
    }
    if (rc) {
        q->err_code = rc;
        snprintf(q->err_msg, sizeof(q->err_msg), "position %u: %.200s", q->n_tokens - 1, err.msg);
        return GS_FINISH_ERROR;
    }
    if (!q->t_first_ms)
        q->t_first_ms = gs_now_ms();
    q->tokens[q->n_tokens++] = o.token;
    q->n_generated++;
    struct gs_sched_event ev = {
        .kind = GS_SCHED_EV_TOKEN, .id = q->id, .token = o.token, .logprob = o.logprob};
    if (!gs_sched__push_event(s, &ev, o.top, q->n_top ? (uint32_t)o.n_top : 0)) {
        q->err_code = GS_NOMEM;
        snprintf(q->err_msg, sizeof(q->err_msg), "no memory for an event");
        return GS_FINISH_ERROR;
    }
    if (o.stop)
        return GS_FINISH_STOP;
    if (!q->ignore_eos && gs_sched__is_eog(s, o.token))
        return GS_FINISH_EOS;
    if (q->matcher && q->grammar_on && gs_grammar_matcher_done(q->matcher))
        return GS_FINISH_STOP;
    if (q->n_generated >= q->max_tokens || q->n_tokens >= s->n_ctx)
        return GS_FINISH_LENGTH;
    return GS_FINISH_NONE;
}

/*
 * Adds an embedding's rows for positions [a, b) of this step to its pool and,
 * once the prompt is whole, turns the pool into a unit vector. The rows are
 * taken in position order whatever the chunking, so a prompt pools to the same
 * vector alone or in any batch. A non-finite or zero vector ends q alone.
 */
static enum gs_finish pool_rows(struct gs_sched *s, struct seq *q, uint32_t a, uint32_t b)
{
    const uint32_t d = s->n_embd;
    for (uint32_t p = a; p < b; p++) {
        const float *row = s->hidden + (size_t)(q->row0 + (p - a)) * d;
        if (q->pooling == GS_POOLING_MEAN)
            for (uint32_t j = 0; j < d; j++)
                q->embd[j] += row[j];
        else if ((q->pooling == GS_POOLING_CLS && p == 0) ||
                 (q->pooling == GS_POOLING_LAST && p == q->n_prompt - 1))
            memcpy(q->embd, row, d * sizeof(*row));
    }
    if (b < q->n_prompt)
        return GS_FINISH_NONE;
    double ss = 0;
    const float scale = q->pooling == GS_POOLING_MEAN ? 1.0f / (float)q->n_prompt : 1.0f;
    for (uint32_t j = 0; j < d; j++) {
        q->embd[j] *= scale;
        ss += (double)q->embd[j] * q->embd[j];
    }
    if (!(ss > 0) || !isfinite(ss)) {
        q->err_code = GS_NUMERIC;
        snprintf(q->err_msg, sizeof(q->err_msg), "embedding: the pooled vector is %s",
                 ss == 0 ? "zero" : "not finite");
        return GS_FINISH_ERROR;
    }
    const float inv = (float)(1.0 / sqrt(ss));
    for (uint32_t j = 0; j < d; j++)
        q->embd[j] *= inv;
    if (!q->t_first_ms)
        q->t_first_ms = gs_now_ms();
    return GS_FINISH_STOP;
}

/* What q holds besides its sampler: tokens, page table, mask, pooled row, served logits. */
static uint64_t seq_bytes(const struct gs_sched *s, const struct seq *q)
{
    uint64_t b = sizeof(*q) + (uint64_t)q->cap * sizeof(*q->tokens) +
                 (uint64_t)(q->kv.cap_pages + q->dkv.cap_pages) * sizeof(*q->kv.pages);
    if (q->allow)
        b += (s->n_vocab + 63) / 64 * sizeof(uint64_t);
    if (q->embd)
        b += (uint64_t)s->n_embd * sizeof(float);
    if (q->served)
        b += (uint64_t)q->max_tokens * s->n_vocab * sizeof(float);
    return b + q->trigger_len * 2;
}

void gs_sched__update_stats(struct gs_sched *s, uint32_t batch_tokens, uint64_t prompt_tokens,
                            uint64_t gen_tokens)
{
    struct gs_kv_stats ks;
    gs_kv_pool_stats(s->pool, &ks);
    uint64_t draft_kv_bytes = 0;
    if (s->draft_pool) {
        struct gs_kv_stats ds;
        gs_kv_pool_stats(s->draft_pool, &ds);
        draft_kv_bytes = (uint64_t)ds.pages_total * ds.page_bytes;
    }
    uint64_t held = 0;
    for (uint32_t i = 0; i < s->n_running; i++)
        held += seq_bytes(s, s->running[i]);
    for (const struct seq *q = s->wait_head; q; q = q->next)
        held += seq_bytes(s, q);
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
    s->stats.page_tokens = gs_sched__page_tokens(s);
    s->stats.n_evictions = ks.n_evictions;
    s->stats.n_prefix_hit_tokens = ks.n_hit_tokens;
    s->stats.kv_bytes = (uint64_t)ks.pages_total * ks.page_bytes;
    s->stats.scratch_bytes = gs_plan_cache_scratch_bytes(&s->run->plans) +
                             (s->draft_run ? gs_plan_cache_scratch_bytes(&s->draft_run->plans) : 0);
    s->stats.n_validating = s->n_vjobs;
    s->stats.n_drafted += s->spec_drafted;
    s->stats.n_draft_accepted += s->spec_accepted;
    s->stats.n_verify_steps += s->spec_verifies;
    s->stats.draft_seconds += (double)s->spec_draft_ns / 1e9;
    s->spec_drafted = s->spec_accepted = s->spec_verifies = s->spec_draft_ns = 0;
    s->stats.seq_bytes = held;
    s->stats.draft_kv_bytes = draft_kv_bytes;
    pthread_mutex_unlock(&s->mu);
}

static void notify(struct gs_sched *s)
{
    pthread_mutex_lock(&s->mu);
    bool pending = s->n_events > 0 || s->trace.out_len > 0;
    pthread_mutex_unlock(&s->mu);
    if (pending && s->cfg.notify)
        s->cfg.notify(s->cfg.notify_ctx);
}

enum gs_status gs_sched_step(struct gs_sched *s, struct gs_err *err)
{
    double t0_ms = gs_now_ms();
    bool tracing = gs_sched__tracing(s);
    if (!tracing) /* what a watcher that left noted */
        s->trace.n_batch = s->trace.n_hits = s->trace.n_preempted = 0;
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
            budget -= place(s, q, budget, &n_seqs);
            /* A preemption reshuffled running[]: scan it again from the start
             * (i wraps to 0). Victims are never placed sequences, so the step
             * built so far stays valid. */
            if (s->n_running != before)
                i = UINT32_MAX;
        }
    }
    /* Drafts last, from what budget, logits rows and free pages are left, so
     * that speculation never takes a place, a page or a cached prefix from
     * a sequence's own tokens. */
    uint32_t draft_rows = s->max_draft_rows;
    if (s->cfg.spec == GS_SPEC_DRAFT && budget > 0 && draft_rows > 0)
        gs_sched__draft_model(s, n_seqs, &budget, &draft_rows);
    for (uint32_t i = 0; s->cfg.spec == GS_SPEC_NGRAM && i < n_seqs && budget > 0 && draft_rows > 0;
         i++) {
        struct seq *q = s->step_seqs[i];
        if (q->n_tokens - q->n_computed == 1) {
            uint32_t n = gs_sched__draft(s, q, GS_MIN(budget, draft_rows));
            budget -= n;
            draft_rows -= n;
        }
    }
    lay_out(s, n_seqs, &n_tokens, &n_out);
    uint64_t prompt_tokens = 0, gen_tokens = 0;
    enum gs_status rc = GS_OK;
    if (n_tokens > 0) {
        bool pooling = false;
        for (uint32_t i = 0; i < n_seqs; i++)
            pooling |= s->step_seqs[i]->pooling != GS_POOLING_NONE;
        for (uint32_t i = 0; i < n_seqs; i++)
            s->step_pages[i] =
                (struct gs_seq_pages){s->step_seqs[i]->kv.pages, s->step_seqs[i]->kv.n_pages};
        struct gs_step_io io = {.n_tokens = n_tokens,
                                .tokens = s->step_tokens,
                                .pos = s->step_pos,
                                .seq = s->step_seq,
                                .n_seqs = n_seqs,
                                .seqs = s->step_pages,
                                .kv = &s->kv,
                                .n_outputs = n_out,
                                .out_rows = s->step_rows,
                                .logits = s->logits,
                                .hidden = pooling ? s->hidden : NULL};
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
            if (tracing) {
                /* Decoding: the one token sampled last step, and the drafts verified
                 * beside it; anything else is known text. */
                bool decode = b == q->n_tokens && a + 1 == b && a >= q->n_prompt;
                gs_sched__trace_batch(s, q->id, decode ? 0 : q->batch_tokens,
                                      decode ? 1 + q->n_draft : 0);
            }
            if (a < q->n_prompt)
                prompt_tokens += GS_MIN(b, q->n_prompt) - a;
            q->n_computed = b;
            if (q->pooling) {
                fin = pool_rows(s, q, a, b);
            } else if (q->out_row >= 0) {
                /* Row r follows draft[r - 1]: sampled as a plain step would
                 * sample that position, it accepts draft[r] by choosing it
                 * (scheduler/spec.c says why that is the acceptance rule). */
                uint32_t kept = 0;
                for (uint32_t r = 0;; r++) {
                    fin = take_token(s, q, s->logits + (size_t)(q->out_row + r) * s->n_vocab);
                    gen_tokens += fin != GS_FINISH_ERROR;
                    if (fin != GS_FINISH_NONE || r == q->n_draft ||
                        q->tokens[q->n_tokens - 1] != q->draft[r])
                        break;
                    kept++;
                }
                if (q->n_draft) {
                    /* The kept drafts' K/V stay; the rest is rolled back. */
                    q->n_computed += kept;
                    gs_kv_seq_truncate(s->pool, &q->kv, q->n_computed);
                    gs_sched__spec_verified(s, q, kept);
                }
                gs_sched__draft_rollback(s, q);
            }
            b = q->n_computed;
            if (a < q->high_water)
                q->st.n_recomputed += GS_MIN(b, q->high_water) - a;
            q->high_water = GS_MAX(q->high_water, b);
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
    gs_sched__validate_step(s);
    gs_sched__update_stats(s, n_tokens, prompt_tokens, gen_tokens);
    /* Watched at the start and still now: only then were the batch's members noted. */
    if (tracing && gs_sched__tracing(s) && (n_tokens > 0 || s->trace.n_preempted))
        gs_sched__trace_step(s, t0_ms, n_tokens, gen_tokens);
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
void gs_sched__abort_all(struct gs_sched *s, enum gs_finish why)
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
        gs_sched__vjob_done(s, NULL, "validation aborted: the scheduler stopped");
    gs_sched__update_stats(s, 0, 0, 0);
    notify(s);
}
