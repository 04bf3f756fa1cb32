/*
 * scheduler/spec.c - speculative decoding's side of a step: the prompt-lookup
 * drafter, a sequence's draft (its length adapted to recent acceptance,
 * checked against its grammar, held to free pages), what a verification
 * teaches the sequence, and the page invariants tests check after each step.
 *
 * How a draft is verified (step.c): the step computes the sequence's next
 * token and its drafted tokens d[0..n) at the following positions, with a
 * logits row for each. Row r is sampled exactly as a plain step would sample
 * that position (same sampler, history, grammar mask, random stream); the
 * token is kept, and d[r] counts as accepted when the token equals it. At the
 * first difference, or after the last drafted token, the sampled token is the
 * step's last: its K/V is computed by the next step like any new token.
 *
 * For a drafter that proposes one token with certainty (a point mass q), this
 * is the standard speculative acceptance rule: accept d with probability
 * min(1, p(d) / q(d)) = p(d), and on rejection draw from the residual
 * max(0, p - q) renormalised, which is p with d removed. Drawing x ~ p and
 * accepting when x == d gives both: P(accept) = p(d), and given x != d, x is
 * distributed as p without d. So each position's token has the target's
 * distribution, and with a seed the same draws as without speculation.
 */
#include "scheduler/internal.h"

#include <string.h>

uint32_t gs_spec_ngram_draft(const int32_t *tokens, uint32_t n, uint32_t ngram_max, int32_t *out,
                             uint32_t k)
{
    if (k == 0)
        return 0;
    for (uint32_t g = GS_MIN(ngram_max, n > 0 ? n - 1 : 0); g >= 2; g--) {
        const int32_t *tail = tokens + n - g;
        /* The latest earlier occurrence: it ends before the tail does, so at
         * least one token follows it. */
        for (uint32_t j = n - g; j-- > 0;) {
            if (tokens[j] != tail[0] || memcmp(tokens + j, tail, g * sizeof(*tokens)) != 0)
                continue;
            uint32_t from = j + g, m = GS_MIN(k, n - from);
            memcpy(out, tokens + from, m * sizeof(*out));
            return m;
        }
    }
    return 0;
}

/* Draft tokens q's grammar allows, from its current state: the draft is cut
 * at the first token the grammar refuses and at an end-of-generation token
 * (it ends the sequence, so nothing after it could be kept). */
static uint32_t grammar_cut(struct gs_sched *s, struct seq *q, uint32_t n)
{
    if (!q->matcher || !q->grammar_on)
        return n;
    struct gs_grammar_matcher *m;
    struct gs_err err;
    if (gs_grammar_matcher_clone(q->matcher, &m, &err) != GS_OK)
        return 0;
    uint32_t ok = 0;
    while (ok < n && !gs_sched__is_eog(s, q->draft[ok]) &&
           gs_grammar_matcher_accept(m, q->draft[ok], &err) == GS_OK)
        ok++;
    gs_grammar_matcher_free(m);
    return ok;
}

/* The draft length q tries now: spec_k, or while it has backed off to 0 a
 * one-token probe once it has generated spec_probe_at tokens. */
static uint32_t draft_length(const struct seq *q)
{
    if (q->spec_k > 0)
        return q->spec_k;
    return q->n_generated >= q->spec_probe_at ? 1 : 0;
}

uint32_t gs_sched__draft_room(struct gs_sched *s, struct seq *q, uint32_t limit)
{
    q->n_draft = 0;
    if (!q->draft || q->pooling)
        return 0;
    /* Room for the draft and the token after it, within max_tokens and the
     * context: what could be kept without running past either. */
    uint32_t k = GS_MIN(draft_length(q), limit);
    k = GS_MIN(k, q->max_tokens - q->n_generated - 1);
    if (q->n_tokens + 1 >= s->n_ctx)
        return 0;
    k = GS_MIN(k, s->n_ctx - q->n_tokens - 1);
    /* Only free pages: a draft never evicts a cached prefix or preempts. */
    const uint32_t pt = gs_sched__page_tokens(s);
    const uint32_t base = q->n_computed + 1; /* positions placed already */
    uint32_t room = q->kv.n_pages * pt - GS_MIN(q->kv.n_pages * pt, base) +
                    gs_kv_pool_n_unused(s->pool) * pt;
    return GS_MIN(k, room);
}

uint32_t gs_sched__draft_commit(struct gs_sched *s, struct seq *q, uint32_t n)
{
    n = grammar_cut(s, q, n);
    /* Another sequence's draft may have taken the free pages counted by
     * gs_sched__draft_room since. */
    if (n > 0) {
        struct gs_err err;
        if (gs_kv_seq_reserve(s->pool, &q->kv, q->n_computed + 1 + n, &err) != GS_OK)
            n = 0;
    }
    q->n_draft = n;
    return n;
}

uint32_t gs_sched__draft(struct gs_sched *s, struct seq *q, uint32_t limit)
{
    uint32_t k = gs_sched__draft_room(s, q, limit);
    if (k == 0)
        return 0;
    uint64_t t0 = gs_now_ns();
    uint32_t n = gs_spec_ngram_draft(q->tokens, q->n_tokens, s->cfg.spec_ngram, q->draft, k);
    n = gs_sched__draft_commit(s, q, n);
    s->spec_draft_ns += gs_now_ns() - t0;
    q->st.draft_ms += (double)(gs_now_ns() - t0) / 1e6;
    return n;
}

void gs_sched__spec_verified(struct gs_sched *s, struct seq *q, uint32_t n_accepted)
{
    const uint32_t n = q->n_draft;
    q->n_draft = 0;
    if (n == 0)
        return;
    q->st.n_drafted += n;
    q->st.n_draft_accepted += n_accepted;
    q->st.n_verify_steps++;
    s->spec_drafted += n;
    s->spec_accepted += n_accepted;
    s->spec_verifies++;
    /* A moving share of drafted tokens kept; below a quarter, drafting costs
     * more rows than it saves steps, so the sequence stops for a while. */
    q->spec_rate = 0.7f * q->spec_rate + 0.3f * (float)n_accepted / (float)n;
    if (q->spec_rate < 0.25f) {
        q->spec_k = 0;
        q->spec_probe_at = q->n_generated + q->spec_backoff;
        q->spec_backoff = GS_MIN(2 * q->spec_backoff, SPEC_BACKOFF_MAX);
        return;
    }
    if (n_accepted > 0)
        q->spec_backoff = SPEC_BACKOFF_MIN;
    /* Grow by one after a fully kept draft; else try what was kept plus one. */
    q->spec_k = n_accepted == n ? GS_MIN(GS_MAX(q->spec_k, n) + 1, s->cfg.spec_max_draft)
                                : n_accepted + 1;
}

/* ---- invariants ----------------------------------------------------------------------- */

static enum gs_status check_seq(struct gs_sched *s, const struct seq *q, uint32_t *refs,
                                uint32_t n_pages, struct gs_err *err)
{
    const uint32_t pt = gs_sched__page_tokens(s);
    if (q->kv.n_tokens != q->n_computed || q->kv.n_pages != gs_sched__pages_for(s, q->n_computed))
        return gs_err_set(err, GS_INVAL,
                          "seq %llu: its page table covers %u tokens in %u pages, it has "
                          "computed %u",
                          (unsigned long long)q->id, q->kv.n_tokens, q->kv.n_pages, q->n_computed);
    uint64_t chain = GS_KV_HASH_SEED;
    for (uint32_t i = 0; i < q->kv.n_pages; i++) {
        uint32_t page = q->kv.pages[i];
        if (page >= n_pages)
            return gs_err_set(err, GS_INVAL, "seq %llu: page %u is out of the pool",
                              (unsigned long long)q->id, page);
        refs[page]++;
        uint64_t h;
        bool hashed = gs_kv_page_hash(s->pool, page, &h);
        if (i < q->n_registered) {
            chain = gs_kv_hash_tokens(chain, q->tokens + (size_t)i * pt, pt);
            if (!hashed || h != chain)
                return gs_err_set(err, GS_INVAL,
                                  "seq %llu: registered page %u (index %u) does not carry the "
                                  "hash of its tokens",
                                  (unsigned long long)q->id, page, i);
        } else if (hashed) {
            return gs_err_set(err, GS_INVAL, "seq %llu: unregistered page %u (index %u) has a hash",
                              (unsigned long long)q->id, page, i);
        }
    }
    return GS_OK;
}

/* q's draft page table covers exactly what the draft computed, never past q's
 * own tokens (drafted positions were rolled back), with no page hashed (the
 * draft pool has no prefix cache); refs counts the tables holding each page. */
static enum gs_status check_draft_seq(struct gs_sched *s, const struct seq *q, uint32_t *refs,
                                      uint32_t n_pages, struct gs_err *err)
{
    if (q->dkv.n_tokens != q->d_computed || q->d_computed > q->n_tokens ||
        q->dkv.n_pages != gs_sched__pages_for(s, q->d_computed))
        return gs_err_set(err, GS_INVAL,
                          "seq %llu: its draft page table covers %u tokens in %u pages, the "
                          "draft has computed %u of its %u tokens",
                          (unsigned long long)q->id, q->dkv.n_tokens, q->dkv.n_pages, q->d_computed,
                          q->n_tokens);
    for (uint32_t i = 0; i < q->dkv.n_pages; i++) {
        uint32_t page = q->dkv.pages[i];
        uint64_t h;
        if (page >= n_pages || gs_kv_page_hash(s->draft_pool, page, &h))
            return gs_err_set(err, GS_INVAL, "seq %llu: draft page %u is out of the pool or hashed",
                              (unsigned long long)q->id, page);
        refs[page]++;
    }
    return GS_OK;
}

/* The draft model's pool: its own lists, every sequence's draft table, and
 * refcounts equal to the tables holding each page. */
static enum gs_status check_draft(struct gs_sched *s, struct gs_err *err)
{
    enum gs_status rc = gs_kv_pool_check(s->draft_pool, err);
    if (rc)
        return rc;
    const uint32_t n_pages = s->draft_kv.n_pages;
    uint32_t *refs = gs_calloc(n_pages, sizeof(*refs));
    if (!refs)
        return gs_err_set(err, GS_NOMEM, "no memory to check %u pages", n_pages);
    for (uint32_t i = 0; i < s->n_running && !rc; i++)
        rc = check_draft_seq(s, s->running[i], refs, n_pages, err);
    for (const struct seq *q = s->wait_head; q && !rc; q = q->next)
        rc = check_draft_seq(s, q, refs, n_pages, err);
    for (uint32_t p = 0; p < n_pages && !rc; p++)
        if (gs_kv_page_refcount(s->draft_pool, p) != refs[p])
            rc = gs_err_set(err, GS_INVAL, "draft page %u: refcount %u, held by %u page tables", p,
                            gs_kv_page_refcount(s->draft_pool, p), refs[p]);
    gs_free(refs);
    return rc;
}

enum gs_status gs_sched_check(struct gs_sched *s, struct gs_err *err)
{
    enum gs_status rc = gs_kv_pool_check(s->pool, err);
    if (rc)
        return rc;
    const uint32_t n_pages = s->kv.n_pages;
    uint32_t *refs = gs_calloc(n_pages, sizeof(*refs));
    if (!refs)
        return gs_err_set(err, GS_NOMEM, "no memory to check %u pages", n_pages);
    for (uint32_t i = 0; i < s->n_running && !rc; i++)
        rc = check_seq(s, s->running[i], refs, n_pages, err);
    for (const struct seq *q = s->wait_head; q && !rc; q = q->next)
        rc = check_seq(s, q, refs, n_pages, err);
    for (uint32_t p = 0; p < n_pages && !rc; p++)
        if (gs_kv_page_refcount(s->pool, p) != refs[p])
            rc = gs_err_set(err, GS_INVAL, "page %u: refcount %u, held by %u page tables", p,
                            gs_kv_page_refcount(s->pool, p), refs[p]);
    gs_free(refs);
    if (!rc && s->draft_pool)
        rc = check_draft(s, err);
    return rc;
}
