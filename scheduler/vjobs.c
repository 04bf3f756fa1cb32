/*
 * scheduler/vjobs.c - validation jobs: a finished request's tokens evaluated
 * again, teacher-forced, on the reference runner with a KV pool of its own,
 * chunk by chunk between serving steps, and compared with what was served.
 */
#define _GNU_SOURCE
#include "scheduler/internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- validation ------------------------------------------------------------------------ */

/* Moves q's tokens and served logits into a validation job. Returns false
 * (nothing moved) when memory is short. */
bool gs_sched__queue_vjob(struct gs_sched *s, struct seq *q)
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
void gs_sched__vjob_done(struct gs_sched *s, struct gs_val_report *report, const char *why)
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
        if (gs_sched__push_event_report(s, &ev, NULL, 0, report)) {
            pthread_mutex_lock(&s->mu);
            s->stats.n_validated += report != NULL;
            s->stats.n_validation_failed += failed;
            pthread_mutex_unlock(&s->mu);
        }
    }
    vjob_free(s, j);
}

/* Opens the reference runner on first use, on the graph as the serving
 * backend's passes rewrote it, with the plans of every chunk size compiled:
 * the runner lives as long as the scheduler, and a plan compiled the first
 * time a job's last chunk had a new size would be a long-lived block placed
 * among a busy daemon's short-lived ones, holding the heap's top up. */
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
    enum gs_status st = gs_runner_new(s->model->graph, &cfg, &s->ref, err);
    if (!st && (st = gs_runner_prepare(s->ref, c, err))) {
        gs_runner_free(s->ref);
        s->ref = NULL;
    }
    return st;
}

void gs_sched__ref_free(struct gs_sched *s)
{
    gs_runner_free(s->ref);
    gs_free(s->ref_logits);
    gs_free(s->ref_pos);
    gs_free(s->ref_seq);
    gs_free(s->ref_rows);
}

/*
 * Evaluates the next chunk of the head validation job on ref and compares
 * every row whose logits were served. The job's tokens run teacher-forced:
 * exactly the tokens the client received, so the figures say how far the
 * served logits were from the oracle's at each step of this very answer.
 */
void gs_sched__validate_step(struct gs_sched *s)
{
    struct vjob *j = s->vjobs_head;
    if (!j)
        return;
    if (s->cfg.validate_hook)
        s->cfg.validate_hook(s->cfg.validate_hook_ctx);
    if (j->cancelled || j->n_served == 0) {
        gs_sched__vjob_done(s, NULL, j->cancelled ? NULL : "no generated position to compare");
        return;
    }
    struct gs_err err = {0};
    char why[GS_ERR_MSG_LEN + 32];
    if (open_ref(s, &err))
        goto fail;
    uint32_t end = j->n_prompt - 1 + j->n_served; /* positions [0, end) are evaluated */
    if (!j->pool) {
        struct gs_kv_pool_cfg pc = {.n_layer = gs_model_kv_layers(s->model),
                                    .kv_dim = gs_model_kv_dim(s->model),
                                    .type = GS_SCHED_VAL_KV_TYPE,
                                    .page_tokens = gs_sched__page_tokens(s),
                                    .n_pages = gs_sched__pages_for(s, end) + 1};
        if (gs_kv_pool_new(&pc, &j->pool, &err) || gs_kv_seq_reserve(j->pool, &j->kv, end, &err) ||
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
    struct gs_step_io io = {.n_tokens = c,
                            .tokens = j->tokens + j->n_done,
                            .pos = s->ref_pos,
                            .seq = s->ref_seq,
                            .n_seqs = 1,
                            .seqs = &sp,
                            .kv = &kv,
                            .n_outputs = n_out,
                            .out_rows = s->ref_rows,
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
        gs_sched__vjob_done(s, j->report, NULL);
    }
    return;
fail:
    snprintf(why, sizeof(why), "validation failed to run: %s", err.msg);
    gs_sched__vjob_done(s, NULL, why);
}
