/*
 * server/metrics.c - the daemon's counters and latency histograms, rendered
 * in the Prometheus text format (version 0.0.4) for GET /metrics together
 * with the engine's snapshot (KV pages, batch size, preemptions).
 */
#include "server/internal.h"

#include <string.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

/* Upper bounds (seconds) shared by every latency histogram: 1 ms to 60 s. */
static const double bounds[GS_SRV_HIST_BUCKETS] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60,
};

static const char *const endpoint_labels[GS_SRV_EP_COUNT] = {
#define GS_SRV_EP_LABEL(id, label) [GS_SRV_EP_##id] = label,
    GS_SRV_ENDPOINT_MAP(GS_SRV_EP_LABEL)
#undef GS_SRV_EP_LABEL
};

void gs_srv_hist_observe(struct gs_srv_hist *h, double seconds)
{
    if (!(seconds >= 0))
        seconds = 0;
    size_t b = 0;
    while (b < GS_SRV_HIST_BUCKETS && seconds > bounds[b])
        b++;
    h->counts[b]++;
    h->count++;
    h->sum += seconds;
}

void gs_srv_metrics_request(struct gs_srv_metrics *m, enum gs_srv_endpoint ep, unsigned status)
{
    if ((unsigned)ep >= GS_SRV_EP_COUNT)
        ep = GS_SRV_EP_OTHER;
    for (size_t i = 0; i < GS_SRV_METRICS_STATUSES; i++) {
        if (m->requests[ep][i].status == status || m->requests[ep][i].status == 0) {
            m->requests[ep][i].status = status;
            m->requests[ep][i].n++;
            return;
        }
    }
    /* More distinct statuses than slots: count them under the last one. */
    m->requests[ep][GS_SRV_METRICS_STATUSES - 1].n++;
}

static void header(struct gs_srv_buf *o, const char *name, const char *type, const char *help)
{
    gs_srv_buf_addf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void counter(struct gs_srv_buf *o, const char *name, const char *help, uint64_t v)
{
    header(o, name, "counter", help);
    gs_srv_buf_addf(o, "%s %llu\n", name, (unsigned long long)v);
}

static void gauge(struct gs_srv_buf *o, const char *name, const char *help, double v)
{
    header(o, name, "gauge", help);
    gs_srv_buf_addf(o, "%s %.17g\n", name, v);
}

static void hist(struct gs_srv_buf *o, const char *name, const char *help,
                 const struct gs_srv_hist *h)
{
    header(o, name, "histogram", help);
    uint64_t cum = 0;
    for (size_t b = 0; b < GS_SRV_HIST_BUCKETS; b++) {
        cum += h->counts[b];
        gs_srv_buf_addf(o, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[b], (unsigned long long)cum);
    }
    cum += h->counts[GS_SRV_HIST_BUCKETS];
    gs_srv_buf_addf(o, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cum);
    gs_srv_buf_addf(o, "%s_sum %.17g\n%s_count %llu\n", name, h->sum, name,
                    (unsigned long long)h->count);
}

static void engine_metrics(struct gs_srv_buf *o, const struct gs_sched_stats *st,
                           const char *kv_type)
{
    counter(o, "graphserve_engine_steps_total", "Engine steps run.", st->n_steps);
    counter(o, "graphserve_prompt_tokens_computed_total",
            "Prompt tokens computed by the engine (prefix-cache hits excluded).",
            st->n_tokens_prompt);
    counter(o, "graphserve_prefix_cache_hit_tokens_total",
            "Prompt tokens served from the prefix cache.", st->n_prefix_hit_tokens);
    counter(o, "graphserve_preemptions_total", "Sequences preempted for lack of KV pages.",
            st->n_preemptions);
    counter(o, "graphserve_engine_cancellations_total", "Sequences cancelled in the engine.",
            st->n_cancelled);
    counter(o, "graphserve_engine_errors_total", "Sequences ended by an engine error.",
            st->n_errors);
    counter(o, "graphserve_kv_evictions_total", "Cached KV pages evicted.", st->n_evictions);
    counter(o, "graphserve_spec_draft_tokens_total", "Tokens drafted for speculative decoding.",
            st->n_drafted);
    counter(o, "graphserve_spec_accepted_tokens_total",
            "Drafted tokens the model's own sampling reproduced (kept).", st->n_draft_accepted);
    counter(o, "graphserve_spec_verify_steps_total",
            "Sequence steps that verified a draft; tokens per verification step are "
            "(accepted + verify steps) / verify steps.",
            st->n_verify_steps);
    header(o, "graphserve_spec_draft_seconds_total", "counter", "Time spent drafting.");
    gs_srv_buf_addf(o, "graphserve_spec_draft_seconds_total %.17g\n", st->draft_seconds);
    gauge(o, "graphserve_spec_acceptance_ratio",
          "Drafted tokens kept over drafted tokens since start (0 before any draft).",
          st->n_drafted ? (double)st->n_draft_accepted / (double)st->n_drafted : 0.0);
    gauge(o, "graphserve_spec_tokens_per_verify_step",
          "Tokens generated per sequence step that verified a draft, since start.",
          st->n_verify_steps
              ? (double)(st->n_draft_accepted + st->n_verify_steps) / (double)st->n_verify_steps
              : 0.0);
    gauge(o, "graphserve_requests_running", "Sequences running in the engine.", st->n_running);
    gauge(o, "graphserve_requests_waiting", "Sequences queued for admission.", st->n_waiting);
    gauge(o, "graphserve_batch_tokens", "Tokens in the last engine step's batch.",
          st->last_batch_tokens);
    header(o, "graphserve_batch_tokens_per_step", "histogram",
           "Tokens per engine step (decode tokens plus prefill chunks).");
    uint64_t cum = 0;
    for (size_t b = 0; b + 1 < GS_SCHED_BATCH_BUCKETS; b++) {
        cum += st->batch_steps[b];
        gs_srv_buf_addf(o, "graphserve_batch_tokens_per_step_bucket{le=\"%u\"} %llu\n",
                        gs_sched_batch_bounds[b], (unsigned long long)cum);
    }
    cum += st->batch_steps[GS_SCHED_BATCH_BUCKETS - 1];
    gs_srv_buf_addf(o, "graphserve_batch_tokens_per_step_bucket{le=\"+Inf\"} %llu\n",
                    (unsigned long long)cum);
    gs_srv_buf_addf(o, "graphserve_batch_tokens_per_step_sum %llu\n"
                       "graphserve_batch_tokens_per_step_count %llu\n",
                    (unsigned long long)st->batch_tokens_sum, (unsigned long long)st->n_steps);
    header(o, "graphserve_kv_pages", "gauge", "KV cache pages by state.");
    gs_srv_buf_addf(o, "graphserve_kv_pages{state=\"used\"} %u\n", st->pages_used);
    gs_srv_buf_addf(o, "graphserve_kv_pages{state=\"cached\"} %u\n", st->pages_cached);
    gs_srv_buf_addf(o, "graphserve_kv_pages{state=\"free\"} %u\n", st->pages_free);
    gauge(o, "graphserve_kv_pages_capacity", "KV cache pages in the pool.", st->pages_total);
    /* What the Gateway API Inference Extension's endpoint picker scrapes to route by load
     * (its model server protocol, 2026-12), with vLLM's types and meanings: KV usage as
     * one 0..1 gauge (vllm:kv_cache_usage_perc: pages held by sequences; cached pages are
     * evictable, so free for this purpose), and an info gauge whose labels give the pool's
     * shape. The picker reads the labels block_size and num_gpu_blocks by those names
     * whatever the metric is called, so they are written beside graphserve's own, and
     * the cache's element type as kv_type and vLLM's cache_dtype. Queued and running
     * requests are graphserve_requests_waiting and _running above. */
    gauge(o, "graphserve_kv_cache_usage_ratio",
          "Fraction of KV cache pages held by sequences (0 to 1).",
          st->pages_total ? (double)st->pages_used / st->pages_total : 0);
    header(o, "graphserve_cache_config_info", "gauge",
           "KV cache shape and element type; block_size, num_gpu_blocks and cache_dtype repeat "
           "them under vLLM's label names.");
    gs_srv_buf_addf(o,
                    "graphserve_cache_config_info{page_tokens=\"%u\",num_pages=\"%u\","
                    "block_size=\"%u\",num_gpu_blocks=\"%u\"",
                    st->page_tokens, st->pages_total, st->page_tokens, st->pages_total);
    if (kv_type)
        gs_srv_buf_addf(o, ",kv_type=\"%s\",cache_dtype=\"%s\"", kv_type, kv_type);
    gs_srv_buf_adds(o, "} 1\n");
    gauge(o, "graphserve_kv_bytes", "Bytes of the KV page pool.", (double)st->kv_bytes);
}

/*
 * The C allocator's own count, beside the ledger's: what the daemon has
 * allocated and what the allocator keeps free for reuse. Resident memory
 * that grows while in_use stays put is the allocator's, not a leak; the soak
 * test reads both. glibc only (mallinfo2); elsewhere the family is absent.
 */
static void heap_metrics(struct gs_srv_buf *o)
{
#ifdef __GLIBC__
    struct mallinfo2 mi = mallinfo2();
    header(o, "graphserve_heap_bytes", "gauge",
           "The C allocator's heap (glibc mallinfo2): allocated (in_use, mapped blocks "
           "included) and kept free for reuse (free).");
    gs_srv_buf_addf(o, "graphserve_heap_bytes{state=\"in_use\"} %zu\n", mi.uordblks + mi.hblkhd);
    gs_srv_buf_addf(o, "graphserve_heap_bytes{state=\"free\"} %zu\n", mi.fordblks);
#else
    (void)o;
#endif
}

void gs_srv_metrics_render(const struct gs_srv_metrics *m, const struct gs_sched_stats *st,
                           const char *kv_type, bool ready, struct gs_srv_buf *o)
{
    header(o, "graphserve_http_requests_total", "counter", "HTTP requests by endpoint and status.");
    for (int ep = 0; ep < GS_SRV_EP_COUNT; ep++)
        for (size_t i = 0; i < GS_SRV_METRICS_STATUSES && m->requests[ep][i].status; i++)
            gs_srv_buf_addf(o,
                            "graphserve_http_requests_total{endpoint=\"%s\",status=\"%u\"} %llu\n",
                            endpoint_labels[ep], m->requests[ep][i].status,
                            (unsigned long long)m->requests[ep][i].n);
    hist(o, "graphserve_time_to_first_token_seconds",
         "Time from request arrival to its first generated token.", &m->ttft);
    hist(o, "graphserve_inter_token_latency_seconds",
         "Time between consecutive tokens of a choice.", &m->itl);
    hist(o, "graphserve_e2e_request_latency_seconds", "Time from request arrival to its end.",
         &m->e2e);
    hist(o, "graphserve_queue_time_seconds", "Time a request waited before the engine took it.",
         &m->queue);
    counter(o, "graphserve_prompt_tokens_total", "Prompt tokens of finished requests.",
            m->prompt_tokens);
    counter(o, "graphserve_generation_tokens_total", "Tokens generated for finished requests.",
            m->generated_tokens);
    counter(o, "graphserve_cached_prompt_tokens_total",
            "Prompt tokens of finished requests served from the prefix cache.",
            m->cached_prompt_tokens);
    counter(o, "graphserve_cancellations_total", "Requests whose client went away before the end.",
            m->cancelled);
    counter(o, "graphserve_rejected_busy_total", "Requests refused with 429 (queue full).",
            m->rejected_busy);
    header(o, "graphserve_connections_cut_total", "counter",
           "Client connections the server closed before they sent a whole request.");
    gs_srv_buf_addf(o, "graphserve_connections_cut_total{reason=\"request_timeout\"} %llu\n",
                    (unsigned long long)m->conns_timed_out);
    gs_srv_buf_addf(o, "graphserve_connections_cut_total{reason=\"evicted\"} %llu\n",
                    (unsigned long long)m->conns_evicted);
    counter(o, "graphserve_refused_heads_total",
            "Requests refused for their framing, Host, Origin or Content-Type.", m->refused_heads);
    counter(o, "graphserve_slow_reader_cancellations_total",
            "Streams cancelled because their client did not read (max-stream-buffer-bytes).",
            m->slow_readers);
    gauge(o, "graphserve_requests_in_flight", "HTTP generation requests in progress.",
          m->in_flight);
    gauge(o, "graphserve_ready", "1 when /ready answers 200.", ready ? 1 : 0);
    if (st)
        engine_metrics(o, st, kv_type);
    heap_metrics(o);
}
