/*
 * server/debug.c - the engine made visible: GET /debug/graph (the model's
 * graph as built and as served), GET /debug/memory (the memory ledger, which
 * /metrics renders too) and GET /debug/events (SSE: the scheduler's step
 * trace, fanned out to every subscriber).
 *
 * The trace costs the engine nothing while no one subscribes: the first
 * subscriber registers a watcher with the engine and the last one to leave
 * removes it. A subscriber that does not read never holds the engine back
 * nor grows without bound: a record that would take its queued bytes past
 * max-stream-buffer-bytes is dropped and counted, and the next record that
 * fits is preceded by a gap event saying how many were lost.
 */
#include "server/daemon.h"

#include <string.h>

static bool debug_on(struct gs_srv_req *r, enum MHD_Result *ret)
{
    if (r->srv->cfg.debug_endpoints)
        return true;
    *ret = gs_srv__respond_error(r, GS_SRV_E_NOT_FOUND, NULL,
                                 "no route for %s %s (debug endpoints are off: --debug-endpoints)",
                                 r->method, r->url);
    return false;
}

/* ---- /debug/graph ---------------------------------------------------------------------- */

static json_t *graph_or_null(const char *text)
{
    if (!text)
        return json_null();
    json_error_t e;
    json_t *g = json_loads(text, 0, &e);
    return g ? g : json_null();
}

enum MHD_Result gs_srv__debug_graph(struct gs_srv_req *r)
{
    enum MHD_Result ret;
    if (!debug_on(r, &ret))
        return ret;
    const struct gs_srv_model_info *m = &r->srv->cfg.model;
    if (!m->graph_json_built || !m->graph_json_served)
        return gs_srv__respond_error(r, GS_SRV_E_UNAVAILABLE, NULL, "no model graph loaded");
    json_t *body = json_pack(
        "{s:s,s:s,s:s,s:o,s:o}", "model", m->id, "backend", m->backend ? m->backend : "",
        "graph_hash", m->graph_hash ? m->graph_hash : "", "built",
        graph_or_null(m->graph_json_built), "served", graph_or_null(m->graph_json_served));
    return gs_srv__respond_json(r, 200, body);
}

/* ---- the memory ledger ---------------------------------------------------------------- */

static const char *const ledger_kind[GS_SRV_LEDGER_COUNT] = {
#define GS_SRV_LEDGER_KIND(id, kind, help) [GS_SRV_LEDGER_##id] = kind,
    GS_SRV_LEDGER_MAP(GS_SRV_LEDGER_KIND)
#undef GS_SRV_LEDGER_KIND
};
static const char *const ledger_help[GS_SRV_LEDGER_COUNT] = {
#define GS_SRV_LEDGER_HELP(id, kind, help) [GS_SRV_LEDGER_##id] = help,
    GS_SRV_LEDGER_MAP(GS_SRV_LEDGER_HELP)
#undef GS_SRV_LEDGER_HELP
};

static uint64_t req_bytes(const struct gs_srv_req *r)
{
    return r->out.cap + r->body.cap;
}

void gs_srv__ledger(const struct gs_srv *s, const struct gs_sched_stats *st, uint64_t *bytes)
{
    memset(bytes, 0, GS_SRV_LEDGER_COUNT * sizeof(*bytes));
    bytes[GS_SRV_LEDGER_WEIGHTS] = s->cfg.model.size_bytes;
    for (const struct gs_srv_req *r = s->active; r; r = r->next) {
        bytes[GS_SRV_LEDGER_STREAMS] += req_bytes(r);
        bytes[GS_SRV_LEDGER_ARENAS] += gs_srv_arena_mapped_bytes(r->arena);
    }
    for (const struct gs_srv_req *r = s->debug_subs; r; r = r->dnext) {
        bytes[GS_SRV_LEDGER_STREAMS] += req_bytes(r);
        bytes[GS_SRV_LEDGER_ARENAS] += gs_srv_arena_mapped_bytes(r->arena);
    }
    if (!st)
        return;
    uint64_t page_bytes = st->pages_total ? st->kv_bytes / st->pages_total : 0;
    bytes[GS_SRV_LEDGER_KV_POOL] = st->kv_bytes;
    bytes[GS_SRV_LEDGER_KV_USED] = page_bytes * st->pages_used;
    bytes[GS_SRV_LEDGER_PREFIX_CACHE] = page_bytes * st->pages_cached;
    bytes[GS_SRV_LEDGER_DRAFT_KV_POOL] = st->draft_kv_bytes;
    bytes[GS_SRV_LEDGER_SCRATCH] = st->scratch_bytes;
    bytes[GS_SRV_LEDGER_SEQUENCES] = st->seq_bytes;
    bytes[GS_SRV_LEDGER_EVENTS] = st->event_bytes;
}

void gs_srv__ledger_metrics(const struct gs_srv *s, const struct gs_sched_stats *st,
                            struct gs_srv_buf *out)
{
    uint64_t bytes[GS_SRV_LEDGER_COUNT];
    gs_srv__ledger(s, st, bytes);
    gs_srv_buf_adds(out, "# HELP graphserve_memory_bytes Memory the daemon holds, by kind "
                         "(the ledger of GET /debug/memory).\n"
                         "# TYPE graphserve_memory_bytes gauge\n");
    for (size_t i = 0; i < GS_SRV_LEDGER_COUNT; i++)
        gs_srv_buf_addf(out, "graphserve_memory_bytes{kind=\"%s\"} %llu\n", ledger_kind[i],
                        (unsigned long long)bytes[i]);
}

enum MHD_Result gs_srv__debug_memory(struct gs_srv_req *r)
{
    enum MHD_Result ret;
    if (!debug_on(r, &ret))
        return ret;
    struct gs_srv *s = r->srv;
    struct gs_sched_stats st;
    if (s->has_engine)
        s->engine.stats(s->engine.ctx, &st);
    uint64_t bytes[GS_SRV_LEDGER_COUNT];
    gs_srv__ledger(s, s->has_engine ? &st : NULL, bytes);
    json_t *rows = json_array();
    uint64_t total = 0;
    for (size_t i = 0; rows && i < GS_SRV_LEDGER_COUNT; i++) {
        json_array_append_new(rows, json_pack("{s:s,s:I,s:s}", "kind", ledger_kind[i], "bytes",
                                              (json_int_t)bytes[i], "help", ledger_help[i]));
        /* kv_used and prefix_cache are parts of kv_pool, stream_buffers of request_arenas:
         * not more memory. */
        if (i != GS_SRV_LEDGER_KV_USED && i != GS_SRV_LEDGER_PREFIX_CACHE &&
            i != GS_SRV_LEDGER_STREAMS)
            total += bytes[i];
    }
    json_t *body = json_pack("{s:o,s:I,s:{s:I,s:I,s:I,s:I,s:I}}", "rows", rows, "total_bytes",
                             (json_int_t)total, "kv", "pages_total",
                             (json_int_t)(s->has_engine ? st.pages_total : 0), "pages_used",
                             (json_int_t)(s->has_engine ? st.pages_used : 0), "pages_cached",
                             (json_int_t)(s->has_engine ? st.pages_cached : 0), "pages_free",
                             (json_int_t)(s->has_engine ? st.pages_free : 0), "page_tokens",
                             (json_int_t)(s->has_engine ? st.page_tokens : 0));
    return gs_srv__respond_json(r, 200, body);
}

/* ---- /debug/events ------------------------------------------------------------------- */

static void unsubscribe(struct gs_srv_req *r)
{
    struct gs_srv *s = r->srv;
    if (!r->debug_sub)
        return;
    r->debug_sub = false;
    if (r->dprev)
        r->dprev->dnext = r->dnext;
    else
        s->debug_subs = r->dnext;
    if (r->dnext)
        r->dnext->dprev = r->dprev;
    r->dprev = r->dnext = NULL;
    if (s->has_engine && s->engine.trace_watch)
        s->engine.trace_watch(s->engine.ctx, false);
}

const struct gs_srv_route_hooks gs_srv__debug_events_hooks = {
    .free = unsubscribe,
};

/* Appends one record (a JSON object without its newline) to r's stream, or counts it
 * lost when r's queue is full. */
static void deliver(struct gs_srv_req *r, const char *rec, size_t len)
{
    uint64_t cap = r->srv->cfg.limits.max_stream_buffer_bytes;
    if (r->stream_end)
        return;
    if (r->out.len + len + 64 > cap) {
        r->debug_gap++;
        return;
    }
    if (r->debug_gap) {
        gs_srv_buf_addf(&r->out, "data: {\"type\":\"gap\",\"dropped\":%llu}\n\n",
                        (unsigned long long)r->debug_gap);
        r->debug_gap = 0;
    }
    gs_srv_buf_adds(&r->out, "data: ");
    gs_srv_buf_add(&r->out, rec, len);
    gs_srv_buf_adds(&r->out, "\n\n");
}

void gs_srv__debug_drain(struct gs_srv *s)
{
    if (!s->has_engine || !s->engine.trace_take)
        return;
    char *text;
    size_t len;
    uint64_t dropped = s->engine.trace_take(s->engine.ctx, &text, &len);
    if (!s->debug_subs) {
        gs_free(text);
        return;
    }
    for (struct gs_srv_req *r = s->debug_subs; r; r = r->dnext) {
        r->debug_gap += dropped; /* the engine's buffer was full: lost for everyone */
        for (size_t at = 0; text && at < len;) {
            const char *nl = memchr(text + at, '\n', len - at);
            size_t n = nl ? (size_t)(nl - (text + at)) : len - at;
            if (n)
                deliver(r, text + at, n);
            at += n + 1;
        }
        if (r->out.len) {
            r->t_last_out_ms = gs_now_ms();
            gs_srv__resume(r);
        }
    }
    gs_free(text);
}

void gs_srv__debug_end_all(struct gs_srv *s)
{
    for (struct gs_srv_req *r = s->debug_subs; r; r = r->dnext) {
        gs_srv_buf_adds(&r->out, "data: {\"type\":\"end\",\"reason\":\"draining\"}\n\n");
        r->stream_end = true;
        gs_srv__resume(r);
    }
}

enum MHD_Result gs_srv__debug_events(struct gs_srv_req *r)
{
    enum MHD_Result ret;
    if (!debug_on(r, &ret))
        return ret;
    struct gs_srv *s = r->srv;
    if (!s->has_engine || !s->engine.trace_watch || !s->engine.trace_take)
        return gs_srv__respond_error(r, GS_SRV_E_UNAVAILABLE, NULL,
                                     "this engine has no step trace");
    if (s->draining)
        return gs_srv__respond_error(r, GS_SRV_E_UNAVAILABLE, NULL, "the server is draining");
    struct gs_sched_stats st;
    s->engine.stats(s->engine.ctx, &st);
    /* The page map's size before the first step arrives. */
    json_t *hello = json_pack("{s:s,s:s,s:I,s:I,s:I,s:I}", "type", "hello", "model",
                              s->cfg.model.id, "pages_total", (json_int_t)st.pages_total,
                              "page_tokens", (json_int_t)st.page_tokens, "running",
                              (json_int_t)st.n_running, "waiting", (json_int_t)st.n_waiting);
    bool ok = hello && gs_srv_sse_json(&r->out, hello);
    json_decref(hello);
    if (!ok)
        return gs_srv__respond_error(r, GS_SRV_E_UNAVAILABLE, NULL, "out of memory");
    struct MHD_Response *resp = gs_srv__sse_response(r);
    if (!resp)
        return MHD_NO;
    r->status = 200;
    r->streaming = true;
    r->t_last_out_ms = gs_now_ms();
    r->debug_sub = true;
    r->dnext = s->debug_subs;
    if (s->debug_subs)
        s->debug_subs->dprev = r;
    s->debug_subs = r;
    s->engine.trace_watch(s->engine.ctx, true); /* http.c starts the tick for subscribers */
    enum MHD_Result q = MHD_queue_response(r->conn, 200, resp);
    MHD_destroy_response(resp);
    return q;
}
