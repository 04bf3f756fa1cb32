/*
 * scheduler/draft.c - the draft-model drafter (GS_SPEC_DRAFT): a second
 * runner on the draft model's graph, on the serving backend, with a KV pool of
 * its own; the batched draft steps that propose each drafting sequence's
 * greedy continuation; and the rollback of the draft's K/V to the tokens the
 * target kept.
 *
 * A sequence's draft K/V holds tokens[0..d_computed). When it drafts, the
 * first draft step feeds it tokens[d_computed..n_tokens) (its prompt at its
 * first decoding step, else the tokens kept last step: the bonus token, and
 * the last drafted one when the whole draft was kept) and takes the argmax of
 * the last row; each further draft step feeds every sequence still drafting
 * the token it drafted last. So k draft steps serve every sequence's k-token
 * draft at once, each step one token per sequence.
 *
 * The draft is greedy, a point mass: the acceptance rule of scheduler/spec.c
 * applies unchanged, so with temperature the served tokens keep the target's
 * distribution, and greedy outputs are the target's token for token.
 */
#include "scheduler/internal.h"

#include "engine/tok.h"

#include <string.h>

/* ---- the vocabulary --------------------------------------------------------------------- */

/* The special ids that must agree: the scheduler ends sequences on the
 * target's, and a draft that names another token by them drafts nonsense. */
#define DRAFT_SPECIAL_IDS(X) X(bos) X(eos) X(eot) X(eom) X(unk) X(sep) X(pad) X(mask)

static enum gs_status compare_vocab(const struct gs_tok *t, const struct gs_tok *d,
                                    struct gs_err *err)
{
    uint32_t n = gs_tok_n_vocab(t);
    if (gs_tok_n_vocab(d) != n)
        return gs_err_set(err, GS_INVAL,
                          "draft model: its vocabulary has %u tokens, the target's %u",
                          gs_tok_n_vocab(d), n);
    if (gs_tok_model(d) != gs_tok_model(t))
        return gs_err_set(err, GS_INVAL, "draft model: its tokenizer is not the target's kind");
    for (uint32_t id = 0; id < n; id++) {
        size_t lt, ld;
        const char *a = gs_tok_token_text(t, (int32_t)id, &lt);
        const char *b = gs_tok_token_text(d, (int32_t)id, &ld);
        if (lt != ld || memcmp(a, b, lt) != 0 ||
            gs_tok_token_type(t, (int32_t)id) != gs_tok_token_type(d, (int32_t)id))
            return gs_err_set(err, GS_INVAL,
                              "draft model: token %u is '%.*s' there, '%.*s' in the target", id,
                              (int)GS_MIN(ld, 64), b, (int)GS_MIN(lt, 64), a);
    }
    const struct gs_tok_special *st = gs_tok_special(t), *sd = gs_tok_special(d);
#define SAME_ID(f)                                                                                 \
    if (st->f != sd->f)                                                                            \
        return gs_err_set(err, GS_INVAL, "draft model: its " #f " id is %d, the target's %d",      \
                          sd->f, st->f);
    DRAFT_SPECIAL_IDS(SAME_ID)
#undef SAME_ID
    return GS_OK;
}

/* GS_INVAL unless the draft model's vocabulary is the target's: the same
 * tokens (text and type) under the same ids, and the same special ids. */
static enum gs_status same_vocab(const struct gs_model *target, const struct gs_model *draft,
                                 struct gs_err *err)
{
    if (draft->hp.n_vocab != target->hp.n_vocab)
        return gs_err_set(err, GS_INVAL,
                          "draft model: its vocabulary has %u tokens, the target's %u",
                          draft->hp.n_vocab, target->hp.n_vocab);
    if (!draft->file || !target->file)
        return gs_err_set(err, GS_INVAL, "draft model: no file whose vocabulary to compare");
    struct gs_tok *t = NULL, *d = NULL;
    enum gs_status rc = gs_tok_new(target->file, &t, err);
    if (!rc && (rc = gs_tok_new(draft->file, &d, err)))
        gs_err_set(err, rc, "draft model: its tokenizer: %.200s", err->msg);
    if (!rc)
        rc = compare_vocab(t, d, err);
    gs_tok_free(t);
    gs_tok_free(d);
    return rc;
}

/* ---- opening ---------------------------------------------------------------------------- */

enum gs_status gs_sched__draft_open(struct gs_sched *s, struct gs_err *err)
{
    struct gs_model *dm = s->cfg.draft_model;
    if (!dm)
        return gs_err_set(err, GS_INVAL, "spec: the draft drafter needs a draft model");
    if (dm == s->model || dm->graph == s->model->graph)
        return gs_err_set(err, GS_INVAL,
                          "draft model: must be a model of its own, not the target (load its "
                          "file again)");
    enum gs_status rc = same_vocab(s->model, dm, err);
    if (rc)
        return rc;
    s->draft_model = dm;
    const struct gs_runner_cfg rcfg = {.backend = s->cfg.backend, .n_threads = s->cfg.n_threads};
    if ((rc = gs_runner_new(dm->graph, &rcfg, &s->draft_run, err)))
        return gs_err_set(err, rc, "draft model: %.200s", err->msg);
    /* As many pages as the target's pool: a sequence's draft K/V never covers
     * more positions than its target K/V does, so what the target admits the
     * draft holds. */
    struct gs_kv_pool_cfg pc = {.n_layer = gs_model_kv_layers(dm),
                                .kv_dim = gs_model_kv_dim(dm),
                                .type = s->cfg.kv_type,
                                .page_tokens = gs_sched__page_tokens(s),
                                .n_pages = s->kv.n_pages};
    if ((rc = gs_kv_pool_new(&pc, &s->draft_pool, err)))
        return gs_err_set(err, rc, "draft model: its KV pool: %.200s", err->msg);
    s->draft_kv = gs_kv_pool_view(s->draft_pool);
    const uint32_t ns = s->cfg.max_seqs;
    s->draft_max_tokens = GS_MAX(s->cfg.max_batch_tokens, ns);
    s->draft_tokens = gs_alloc_array(s->draft_max_tokens, sizeof(*s->draft_tokens));
    s->draft_pos = gs_alloc_array(s->draft_max_tokens, sizeof(*s->draft_pos));
    s->draft_seq = gs_alloc_array(s->draft_max_tokens, sizeof(*s->draft_seq));
    s->draft_rows = gs_alloc_array(ns, sizeof(*s->draft_rows));
    s->draft_pages = gs_alloc_array(ns, sizeof(*s->draft_pages));
    s->draft_seqs = gs_alloc_array(ns, sizeof(*s->draft_seqs));
    s->draft_logits = gs_alloc_array((size_t)ns * s->n_vocab, sizeof(float));
    if (!s->draft_tokens || !s->draft_pos || !s->draft_seq || !s->draft_rows || !s->draft_pages ||
        !s->draft_seqs || !s->draft_logits)
        return gs_err_set(err, GS_NOMEM, "draft model: no memory for its step buffers");
    return GS_OK;
}

void gs_sched__draft_free(struct gs_sched *s)
{
    gs_runner_free(s->draft_run);
    gs_kv_pool_free(s->draft_pool);
    gs_free(s->draft_tokens);
    gs_free(s->draft_pos);
    gs_free(s->draft_seq);
    gs_free(s->draft_rows);
    gs_free(s->draft_pages);
    gs_free(s->draft_seqs);
    gs_free(s->draft_logits);
    s->draft_run = NULL;
    s->draft_pool = NULL;
}

/* ---- drafting --------------------------------------------------------------------------- */

static int32_t argmax(const float *row, uint32_t n)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (row[i] > row[best])
            best = i;
    return (int32_t)best;
}

/* Appends tokens[from..from+n) of q at positions from.. to the draft step
 * being built, as its sequence ns. */
static void put(struct gs_sched *s, uint32_t *t, uint32_t ns, const int32_t *tokens, uint32_t from,
                uint32_t n)
{
    for (uint32_t i = 0; i < n; i++, (*t)++) {
        s->draft_tokens[*t] = tokens[i];
        s->draft_pos[*t] = (int32_t)(from + i);
        s->draft_seq[*t] = ns;
    }
}

/* Runs the draft step of n_tokens over the first ns of draft_seqs, with n_out
 * logits rows. */
static enum gs_status run_draft(struct gs_sched *s, uint32_t n_tokens, uint32_t ns, uint32_t n_out)
{
    for (uint32_t i = 0; i < ns; i++)
        s->draft_pages[i] =
            (struct gs_seq_pages){s->draft_seqs[i]->dkv.pages, s->draft_seqs[i]->dkv.n_pages};
    struct gs_step_io io = {.n_tokens = n_tokens,
                            .tokens = s->draft_tokens,
                            .pos = s->draft_pos,
                            .seq = s->draft_seq,
                            .n_seqs = ns,
                            .seqs = s->draft_pages,
                            .kv = &s->draft_kv,
                            .n_outputs = n_out,
                            .out_rows = s->draft_rows,
                            .logits = s->draft_logits};
    struct gs_err err;
    return gs_runner_step(s->draft_run, &io, &err);
}

/* Takes the draft model's next token for q from logits row r; returns whether
 * q drafts on (below its length, and not past an end of generation, after
 * which nothing could be kept). */
static bool take_draft(struct gs_sched *s, struct seq *q, uint32_t r)
{
    int32_t tok = argmax(s->draft_logits + (size_t)r * s->n_vocab, s->n_vocab);
    q->draft[q->n_draft++] = tok;
    return q->n_draft < q->d_want && (q->ignore_eos || !gs_sched__is_eog(s, tok));
}

/* The first draft step: each sequence's unseen tokens, as far as the draft
 * step's tokens allow (one cut short only catches up this step), and the
 * first drafted token of those that caught up (d_from marks them). Returns
 * how many of draft_seqs[0..n) draft on, moved to the front; -1 when the
 * step failed. */
static int catch_up(struct gs_sched *s, uint32_t n)
{
    uint32_t t = 0, ns = 0, n_out = 0;
    for (uint32_t i = 0; i < n; i++) {
        struct seq *q = s->draft_seqs[i];
        uint32_t unseen = q->n_tokens - q->d_computed;
        uint32_t feed = GS_MIN(unseen, s->draft_max_tokens - t);
        bool whole = feed == unseen;
        /* Pages for the catch-up and the drafted tokens fed after it. */
        struct gs_err err;
        if (feed == 0 ||
            gs_kv_seq_reserve(s->draft_pool, &q->dkv,
                              q->d_computed + feed + (whole ? q->d_want - 1 : 0), &err) != GS_OK)
            continue;
        put(s, &t, ns, q->tokens + q->d_computed, q->d_computed, feed);
        q->d_computed += feed;
        if (whole) {
            s->draft_rows[n_out++] = t - 1;
            q->d_from = q->n_tokens;
        }
        s->draft_seqs[ns++] = q;
    }
    if (ns == 0)
        return 0;
    if (run_draft(s, t, ns, n_out))
        return -1;
    uint32_t on = 0;
    for (uint32_t i = 0, r = 0; i < ns; i++) {
        struct seq *q = s->draft_seqs[i];
        if (q->d_from && take_draft(s, q, r++))
            s->draft_seqs[on++] = q;
    }
    return (int)on;
}

/* The draft length q may ask of the draft model: the target's room, and the
 * draft's own context (it computes positions up to n_tokens + k - 2). */
static uint32_t draft_want(struct gs_sched *s, struct seq *q, uint32_t limit)
{
    uint32_t k = gs_sched__draft_room(s, q, limit);
    const uint32_t d_ctx = s->draft_model->hp.n_ctx_train;
    if (d_ctx)
        k = q->n_tokens > d_ctx ? 0 : GS_MIN(k, d_ctx + 1 - q->n_tokens);
    return k;
}

void gs_sched__draft_model(struct gs_sched *s, uint32_t n_seqs, uint32_t *budget, uint32_t *rows)
{
    uint64_t t0 = gs_now_ns();
    /* Draft lengths first, within what the target step has left. */
    uint32_t n = 0, left = GS_MIN(*budget, *rows);
    for (uint32_t i = 0; i < n_seqs; i++) {
        struct seq *q = s->step_seqs[i];
        q->d_want = 0;
        q->d_from = 0;
        if (left == 0 || q->n_tokens - q->n_computed != 1 || !q->draft)
            continue;
        if ((q->d_want = draft_want(s, q, left)) == 0)
            continue;
        if (s->cfg.draft_recompute)
            gs_sched__draft_release(s, q);
        left -= q->d_want;
        s->draft_seqs[n++] = q;
    }
    if (n == 0)
        return;
    const uint32_t n_drafting = n;
    /* Then k draft steps, each one token of every sequence still drafting;
     * draft_seqs keeps those at its front. */
    int on = catch_up(s, n);
    while (on > 0) {
        uint32_t t = 0;
        for (uint32_t i = 0; i < (uint32_t)on; i++) {
            struct seq *q = s->draft_seqs[i];
            put(s, &t, i, &q->draft[q->n_draft - 1], q->d_computed, 1);
            s->draft_rows[i] = i;
        }
        if (run_draft(s, t, (uint32_t)on, (uint32_t)on)) {
            on = -1;
            break;
        }
        uint32_t still = 0;
        for (uint32_t i = 0; i < (uint32_t)on; i++) {
            struct seq *q = s->draft_seqs[i];
            q->d_computed++;
            if (take_draft(s, q, i))
                s->draft_seqs[still++] = q;
        }
        on = (int)still;
    }
    /* The target's side, in step order: each sequence's draft, cut by its
     * grammar, on the target's free pages. The batched time is shared out
     * evenly among the sequences that asked for a draft. */
    const double share_ms = (double)(gs_now_ns() - t0) / 1e6 / n_drafting;
    for (uint32_t i = 0; i < n_seqs; i++) {
        struct seq *q = s->step_seqs[i];
        if (!q->d_want)
            continue;
        q->d_want = 0;
        q->st.draft_ms += share_ms;
        if (on < 0) /* a failed draft step: its K/V cannot be trusted, start over */
            gs_sched__draft_release(s, q);
        uint32_t drafted = q->d_from ? q->n_draft : 0;
        q->n_draft = 0;
        uint32_t kept = drafted ? gs_sched__draft_commit(s, q, drafted) : 0;
        *budget -= kept;
        *rows -= kept;
    }
    s->spec_draft_ns += gs_now_ns() - t0;
}

void gs_sched__draft_rollback(struct gs_sched *s, struct seq *q)
{
    if (!s->draft_pool)
        return;
    uint32_t valid = GS_MIN(q->d_computed, q->n_tokens);
    if (q->d_from && q->d_from <= q->d_computed) {
        /* Positions from d_from on hold the drafted tokens fed to the draft:
         * valid while they are the tokens the target kept. */
        valid = q->d_from;
        while (valid < q->d_computed && valid < q->n_tokens &&
               q->tokens[valid] == q->draft[valid - q->d_from])
            valid++;
    }
    q->d_from = 0;
    q->d_computed = valid;
    gs_kv_seq_truncate(s->draft_pool, &q->dkv, valid);
}
