/*
 * scheduler/trace.c - the step trace (scheduler.h, "step trace"): one JSON
 * record per engine step, built on the engine thread only while someone
 * watches, handed to the loop thread through a bounded buffer.
 *
 * The engine side notes prefix hits and preemptions as they happen and each
 * batch member's token split, then writes the record after the step into its
 * own buffer (no lock held while formatting) and appends it to the shared one
 * under the scheduler's mutex, or counts it dropped when that is full.
 */
#include "scheduler/internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

bool gs_sched__tracing(const struct gs_sched *s)
{
    return atomic_load_explicit(&s->trace.watchers, memory_order_relaxed) > 0;
}

void gs_sched_trace_watch(struct gs_sched *s, bool on)
{
    if (on)
        atomic_fetch_add(&s->trace.watchers, 1);
    else if (atomic_load(&s->trace.watchers) > 0)
        atomic_fetch_sub(&s->trace.watchers, 1);
}

uint64_t gs_sched_trace_take(struct gs_sched *s, char **text, size_t *len)
{
    pthread_mutex_lock(&s->mu);
    *text = s->trace.out;
    *len = s->trace.out_len;
    s->trace.out = NULL;
    s->trace.out_len = s->trace.out_cap = 0;
    uint64_t dropped = s->trace.dropped;
    s->trace.dropped = 0;
    pthread_mutex_unlock(&s->mu);
    return dropped;
}

enum gs_status gs_sched__trace_init(struct gs_sched *s)
{
    struct gs_sched_trace_state *t = &s->trace;
    atomic_init(&t->watchers, 0);
    t->hits = gs_calloc(s->cfg.max_seqs, sizeof(*t->hits));
    t->batch = gs_calloc(s->cfg.max_seqs, sizeof(*t->batch));
    return t->hits && t->batch ? GS_OK : GS_NOMEM;
}

void gs_sched__trace_free(struct gs_sched *s)
{
    struct gs_sched_trace_state *t = &s->trace;
    gs_free(t->hits);
    gs_free(t->batch);
    gs_free(t->rec);
    gs_free(t->out);
}

void gs_sched__trace_hit(struct gs_sched *s, uint64_t id, uint32_t pages, uint32_t tokens)
{
    struct gs_sched_trace_state *t = &s->trace;
    if (pages && t->n_hits < s->cfg.max_seqs)
        t->hits[t->n_hits++] = (struct gs_sched_trace_hit){id, pages, tokens};
}

void gs_sched__trace_preempt(struct gs_sched *s, uint64_t id)
{
    struct gs_sched_trace_state *t = &s->trace;
    if (t->n_preempted < GS_ARRAY_LEN(t->preempted))
        t->preempted[t->n_preempted] = id;
    t->n_preempted++;
}

void gs_sched__trace_batch(struct gs_sched *s, uint64_t id, uint32_t prompt, uint32_t decode)
{
    struct gs_sched_trace_state *t = &s->trace;
    if (t->n_batch < s->cfg.max_seqs)
        t->batch[t->n_batch++] = (struct gs_sched_trace_member){id, prompt, decode};
}

/* ---- the record ------------------------------------------------------------------------- */

/* Appends to the engine's record buffer; a failed growth marks it, and the record is then
 * dropped as if the shared buffer were full. */
static void add(struct gs_sched_trace_state *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void add(struct gs_sched_trace_state *t, const char *fmt, ...)
{
    if (t->rec_failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = t->rec_cap - t->rec_len;
        int n = vsnprintf(t->rec ? t->rec + t->rec_len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->rec_failed = true;
            return;
        }
        if ((size_t)n < room) {
            t->rec_len += (size_t)n;
            return;
        }
        size_t need = t->rec_len + (size_t)n + 1, cap = GS_MAX(t->rec_cap * 2, need + 256);
        char *p = need <= GS_SCHED_TRACE_MAX_BYTES ? gs_realloc(t->rec, cap) : NULL;
        if (!p) {
            t->rec_failed = true;
            return;
        }
        t->rec = p;
        t->rec_cap = cap;
    }
}

static const char page_code[] = {
    [GS_KV_PAGE_FREE] = 'f', [GS_KV_PAGE_USED] = 'u', [GS_KV_PAGE_CACHED] = 'c'};

/* The page map as runs: "u3c2f11" is three used pages, two cached, eleven free. */
static void add_page_map(struct gs_sched *s, uint32_t n_pages)
{
    struct gs_sched_trace_state *t = &s->trace;
    uint32_t i = 0;
    while (i < n_pages) {
        enum gs_kv_page_state st = gs_kv_page_state(s->pool, i);
        uint32_t j = i + 1;
        while (j < n_pages && gs_kv_page_state(s->pool, j) == st)
            j++;
        add(t, "%c%u", page_code[st], j - i);
        i = j;
    }
}

/* A sequence's page table as [first, count] runs of consecutive page ids. */
static void add_seq_pages(struct gs_sched_trace_state *t, const struct seq *q)
{
    add(t, "{\"seq\":%llu,\"tokens\":%u,\"pages\":[", (unsigned long long)q->id, q->n_computed);
    for (uint32_t i = 0; i < q->kv.n_pages;) {
        uint32_t j = i + 1;
        while (j < q->kv.n_pages && q->kv.pages[j] == q->kv.pages[j - 1] + 1)
            j++;
        add(t, "%s[%u,%u]", i ? "," : "", q->kv.pages[i], j - i);
        i = j;
    }
    add(t, "]}");
}

/* Generated tokens per second over the last GS_SCHED_TRACE_WINDOW steps. */
static double tokens_per_s(struct gs_sched_trace_state *t, double now_ms, uint32_t gen)
{
    uint32_t k = t->win_n % GS_SCHED_TRACE_WINDOW;
    t->win_t[k] = now_ms;
    t->win_gen[k] = gen;
    t->win_n++;
    uint32_t n = GS_MIN(t->win_n, (uint32_t)GS_SCHED_TRACE_WINDOW);
    uint32_t oldest = (t->win_n - n) % GS_SCHED_TRACE_WINDOW;
    uint64_t sum = 0; /* the oldest step's tokens came before its time stamp */
    for (uint32_t i = 1; i < n; i++)
        sum += t->win_gen[(t->win_n - n + i) % GS_SCHED_TRACE_WINDOW];
    double span = now_ms - t->win_t[oldest];
    return span > 0 ? sum * 1000.0 / span : 0;
}

void gs_sched__trace_step(struct gs_sched *s, double t0_ms, uint32_t batch_tokens,
                          uint64_t gen_tokens)
{
    struct gs_sched_trace_state *t = &s->trace;
    double now = gs_now_ms();
    struct gs_kv_stats ks;
    gs_kv_pool_stats(s->pool, &ks);
    t->rec_len = 0;
    t->rec_failed = false;
    add(t,
        "{\"type\":\"step\",\"step\":%llu,\"t_ms\":%.3f,\"step_ms\":%.3f,\"batch_tokens\":%u,"
        "\"batch\":[",
        (unsigned long long)++t->n_steps, now, now - t0_ms, batch_tokens);
    for (uint32_t i = 0; i < t->n_batch; i++)
        add(t, "%s{\"seq\":%llu,\"prompt_tokens\":%u,\"decode_tokens\":%u}", i ? "," : "",
            (unsigned long long)t->batch[i].id, t->batch[i].prompt, t->batch[i].decode);
    add(t, "],\"running\":%u,\"waiting\":%u,\"prefix_hits\":[", s->n_running, s->n_waiting_engine);
    for (uint32_t i = 0; i < t->n_hits; i++)
        add(t, "%s{\"seq\":%llu,\"pages\":%u,\"tokens\":%u}", i ? "," : "",
            (unsigned long long)t->hits[i].id, t->hits[i].pages, t->hits[i].tokens);
    add(t, "],\"preempted\":[");
    for (uint32_t i = 0; i < GS_MIN(t->n_preempted, (uint32_t)GS_ARRAY_LEN(t->preempted)); i++)
        add(t, "%s%llu", i ? "," : "", (unsigned long long)t->preempted[i]);
    add(t, "],\"n_preempted\":%u,\"tokens_per_s\":%.1f,", t->n_preempted,
        tokens_per_s(t, now, (uint32_t)gen_tokens));
    add(t,
        "\"kv\":{\"pages_total\":%u,\"page_tokens\":%u,\"used\":%u,\"cached\":%u,\"free\":%u,"
        "\"map\":\"",
        ks.pages_total, gs_sched__page_tokens(s), ks.pages_used, ks.pages_cached, ks.pages_free);
    add_page_map(s, ks.pages_total);
    add(t, "\",\"seqs\":[");
    for (uint32_t i = 0; i < s->n_running; i++) {
        if (i)
            add(t, ",");
        add_seq_pages(t, s->running[i]);
    }
    add(t, "]}}\n");
    t->n_batch = t->n_hits = t->n_preempted = 0;

    pthread_mutex_lock(&s->mu);
    bool fits = !t->rec_failed && t->out_len + t->rec_len <= GS_SCHED_TRACE_MAX_BYTES;
    if (fits && t->out_len + t->rec_len + 1 > t->out_cap) {
        size_t cap = GS_MAX(t->out_cap * 2, t->out_len + t->rec_len + 1);
        char *p = gs_realloc(t->out, cap);
        if (p) {
            t->out = p;
            t->out_cap = cap;
        } else {
            fits = false;
        }
    }
    if (fits) {
        memcpy(t->out + t->out_len, t->rec, t->rec_len);
        t->out_len += t->rec_len;
        t->out[t->out_len] = '\0';
    } else {
        t->dropped++;
    }
    pthread_mutex_unlock(&s->mu);
}
