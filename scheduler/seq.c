/*
 * scheduler/seq.c - what every scheduler file asks of a sequence and the event
 * queue: pages for a token count, end-of-generation tokens, the events a
 * sequence emits, and its release. A leaf: it calls no other scheduler file, so
 * the others (sched.c above step.c above spec.c, trace.c and vjobs.c) form a tree.
 */
#include "scheduler/internal.h"

#include <string.h>

/* ---- sequences ------------------------------------------------------------------ */

void gs_sched__seq_free(struct gs_sched *s, struct seq *q)
{
    if (!q)
        return;
    if (s->pool)
        gs_kv_seq_release(s->pool, &q->kv);
    gs_sched__draft_release(s, q);
    gs_sample_state_free(q->sampler);
    gs_grammar_matcher_free(q->matcher);
    gs_free(q->allow);
    gs_free(q->trigger);
    gs_free(q->window);
    gs_free(q->tokens);
    gs_free(q->served);
    gs_free(q->embd);
    gs_free(q->draft);
    gs_free(q);
}

void gs_sched__draft_release(struct gs_sched *s, struct seq *q)
{
    if (s->draft_pool)
        gs_kv_seq_release(s->draft_pool, &q->dkv);
    q->d_computed = 0;
    q->d_from = 0;
}

uint32_t gs_sched__page_tokens(const struct gs_sched *s)
{
    return s->kv.page_tokens;
}

uint32_t gs_sched__pages_for(const struct gs_sched *s, uint64_t n_tokens)
{
    return (uint32_t)((n_tokens + gs_sched__page_tokens(s) - 1) / gs_sched__page_tokens(s));
}

/* ---- events ---------------------------------------------------------------------- */

void gs_sched__item_free(struct ev_item *it)
{
    gs_val_report_free(it->report);
    gs_free(it->embd);
    it->report = NULL;
    it->embd = NULL;
}

/* Appends an event under the lock, taking ownership of report and embd.
 * Returns false when memory is short: the event (and what it owns) is then
 * lost, which the caller turns into an error for the request. */
static bool push_item(struct gs_sched *s, const struct gs_sched_event *ev,
                      const struct gs_sample_logprob *top, uint32_t n_top,
                      struct gs_val_report *report, float *embd)
{
    pthread_mutex_lock(&s->mu);
    if (s->n_events == s->cap_events) {
        size_t cap = s->cap_events ? 2 * s->cap_events : 64;
        struct ev_item *e = gs_realloc(s->events, cap * sizeof(*e));
        if (!e) {
            pthread_mutex_unlock(&s->mu);
            gs_val_report_free(report);
            gs_free(embd);
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
    it->embd = embd;
    it->ev.embedding = NULL;
    for (uint32_t i = 0; i < n_top; i++) {
        it->top[i].token = top[i].token;
        it->top[i].logprob = top[i].logprob;
    }
    pthread_mutex_unlock(&s->mu);
    return true;
}

bool gs_sched__push_event_report(struct gs_sched *s, const struct gs_sched_event *ev,
                                 const struct gs_sample_logprob *top, uint32_t n_top,
                                 struct gs_val_report *report)
{
    return push_item(s, ev, top, n_top, report, NULL);
}

bool gs_sched__push_event(struct gs_sched *s, const struct gs_sched_event *ev,
                          const struct gs_sample_logprob *top, uint32_t n_top)
{
    return gs_sched__push_event_report(s, ev, top, n_top, NULL);
}

void gs_sched__emit_finish(struct gs_sched *s, struct seq *q, bool validation_pending)
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
    struct gs_sched_event ev = {.kind = GS_SCHED_EV_FINISH,
                                .id = q->id,
                                .finish = q->finish,
                                .stats = q->st,
                                .err_code = q->err_code,
                                .validation_pending = validation_pending};
    memcpy(ev.err_msg, q->err_msg, sizeof(ev.err_msg));
    /* The pooled vector moves into the event. */
    float *embd = q->finish == GS_FINISH_STOP ? q->embd : NULL;
    if (embd) {
        q->embd = NULL;
        ev.n_embd = s->n_embd;
    }
    push_item(s, &ev, NULL, 0, NULL, embd);
}

/* ---- tokens ---------------------------------------------------------------------- */

bool gs_sched__is_eog(const struct gs_sched *s, int32_t tok)
{
    for (uint32_t i = 0; i < s->n_eog; i++)
        if (s->eog[i] == tok)
            return true;
    return false;
}
