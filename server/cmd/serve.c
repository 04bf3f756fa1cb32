/*
 * server/cmd/serve.c - `graphserve serve -m FILE [options]`: loads the model,
 * starts the scheduler on its engine thread and serves the OpenAI-compatible
 * API until SIGTERM/SIGINT has drained it. Options come from config/ (flags,
 * GRAPHSERVE_* variables, --config FILE); `graphserve serve --help` lists
 * them.
 */
#define _GNU_SOURCE /* open_memstream */
#include "config/cli.h"
#include "config/config.h"
#include "config/sched_cfg.h"
#include "engine/gguf.h"
#include "engine/graph.h"
#include "engine/model.h"
#include "engine/quant.h"
#include "engine/tok.h"
#include "scheduler/scheduler.h"
#include "server/cli.h"
#include "server/cmd/serve_val.h"
#include "server/progress.h"
#include "server/server.h"
#include "server/systemd.h"

#include <errno.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* The graph in engine/graph.h's JSON form, for /debug/graph; NULL out of memory. */
static char *graph_json(const struct gs_graph *g)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return NULL;
    gs_graph_print(g, GS_GRAPH_JSON, f);
    if (fclose(f)) {
        free(text);
        return NULL;
    }
    return text;
}

/* The scheduler is created before the server (the server needs its context
 * length), so its notify goes through this holder, filled before the engine
 * thread starts. */
struct wake_holder {
    _Atomic(struct gs_srv *) srv;
};

static void wake(void *ctx)
{
    struct wake_holder *h = ctx;
    struct gs_srv *srv = atomic_load(&h->srv);
    if (srv)
        gs_srv_wake(srv);
}

/* The model's name for clients: the file name without folders or ".gguf". */
static void model_id(const char *path, char *out, size_t cap)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    snprintf(out, cap, "%s", base);
    size_t n = strlen(out);
    if (n > 5 && !strcmp(out + n - 5, ".gguf"))
        out[n - 5] = '\0';
}

static char *chat_template_text(const struct gs_gguf *g)
{
    struct gs_gguf_str s;
    struct gs_err err;
    if (gs_gguf_get_str(g, "tokenizer.chat_template", &s, &err) != GS_OK)
        return NULL;
    return gs_strndup(s.data, s.len);
}

static uint64_t count_params(const struct gs_gguf *g)
{
    uint64_t n = 0;
    for (uint64_t i = 0; i < gs_gguf_n_tensors(g); i++) {
        const struct gs_gguf_tensor *t = gs_gguf_tensor_at(g, i);
        uint64_t e = 1;
        for (uint32_t d = 0; d < t->n_dims; d++)
            e *= (uint64_t)t->ne[d];
        n += e;
    }
    return n;
}

struct serve {
    struct gs_cfg cfg;
    struct gs_gguf *gguf;
    struct gs_model *model;
    struct gs_tok *tok;
    struct gs_gguf *draft_gguf; /* --spec draft: the drafting model, which the scheduler borrows */
    struct gs_model *draft_model;
    char *tmpl;
    char *graph_built, *graph_served; /* /debug/graph: JSON before and after the passes */
    struct gs_sched *sched;
    struct gs_srv *srv;
    struct wake_holder holder;
    struct gs_serve_receipt receipt;
    struct gs_serve_test_hooks hooks; /* test only: the GS_TEST_ variables (serve_val.c) */
    bool known_answer_ok; /* READY=1 was (and may again be) sent */
};

static struct gs_sched *sched_of(void *ctx)
{
    return ((struct serve *)ctx)->sched;
}

static const struct gs_serve_test_hooks *hooks_of(void *ctx)
{
    return &((struct serve *)ctx)->hooks;
}

/* The loop-thread half of the scheduler contract, as the server calls it; ctx is
 * the struct serve. */
static enum gs_status eng_submit(void *ctx, const struct gs_sched_request *req, struct gs_err *err)
{
    return gs_sched_submit(sched_of(ctx), req, err);
}

static void eng_cancel(void *ctx, uint64_t id)
{
    gs_sched_cancel(sched_of(ctx), id);
}

static size_t eng_poll(void *ctx, struct gs_sched_event *out, size_t cap)
{
    /* GS_TEST_EVENT_GATE: while the file exists the events wait in the scheduler's
     * queue, as they do behind a busy loop thread. */
    const char *gate = hooks_of(ctx)->event_gate_path;
    if (gate && access(gate, F_OK) == 0)
        return 0;
    return gs_sched_poll(sched_of(ctx), out, cap);
}

static void eng_stats(void *ctx, struct gs_sched_stats *out)
{
    gs_sched_stats(sched_of(ctx), out);
}

static void eng_trace_watch(void *ctx, bool on)
{
    gs_sched_trace_watch(sched_of(ctx), on);
}

static uint64_t eng_trace_take(void *ctx, char **text, size_t *len)
{
    return gs_sched_trace_take(sched_of(ctx), text, len);
}

/* Reads the model file once through its mapping, hashing it for the
 * reproducibility receipt, with a progress bar on a terminal: the weights are
 * mapped, not read, so without this pass the first requests would pay for the
 * disk reads, and hashing the file separately would read it a second time. */
static void read_weights(const struct gs_gguf *g, uint8_t digest[GS_SHA256_BYTES])
{
    const unsigned char *p = gs_gguf_file_data(g);
    uint64_t n = gs_gguf_file_bytes(g), chunk = 8u << 20;
    struct gs_progress bar;
    struct gs_sha256 h;
    gs_progress_begin(&bar, stderr, "loading weights", n);
    gs_sha256_begin(&h);
    for (uint64_t off = 0; off < n; off += chunk) {
        uint64_t end = off + chunk < n ? off + chunk : n;
        gs_sha256_update(&h, p + off, (size_t)(end - off));
        gs_progress_update(&bar, end);
    }
    gs_sha256_end(&h, digest);
    gs_progress_end(&bar);
}

/* The text of a --chat-template-file (at most 1 MiB, the renderer's default source
 * limit); NULL with a message in err otherwise. */
static char *template_file_text(const char *path, struct gs_err *err)
{
    enum { MAX_BYTES = 1 << 20 };
    FILE *f = fopen(path, "rb");
    if (!f) {
        gs_err_set(err, GS_IO, "--chat-template-file %s: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = gs_malloc(MAX_BYTES + 1);
    size_t n = buf ? fread(buf, 1, MAX_BYTES + 1, f) : 0;
    bool bad = ferror(f);
    fclose(f);
    if (!buf || bad || n > MAX_BYTES || memchr(buf, '\0', n)) {
        gs_err_set(err, GS_FORMAT, "--chat-template-file %s: %s", path,
                   !buf ? "out of memory"
                   : bad ? "read error"
                   : n > MAX_BYTES ? "over 1 MiB"
                                   : "holds a NUL byte");
        gs_free(buf);
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

static int load(struct serve *sv)
{
    struct gs_err err;
    const char *path = sv->cfg.model;
    if (gs_gguf_open(path, &sv->gguf, &err) != GS_OK ||
        gs_model_load(sv->gguf, &sv->model, &err) != GS_OK ||
        gs_tok_new(sv->gguf, &sv->tok, &err) != GS_OK)
        return gs_cli_fail("serve", "%s: %s", path, err.msg);
    uint8_t digest[GS_SHA256_BYTES];
    read_weights(sv->gguf, digest);
    if (sv->cfg.chat_template_file && sv->cfg.chat_template != GS_CFG_TEMPLATE_AUTO)
        return gs_cli_fail("serve", "--chat-template-file and --chat-template %s: choose one",
                           gs_cfg_template_name(sv->cfg.chat_template));
    if (sv->cfg.chat_template_file) {
        if (!(sv->tmpl = template_file_text(sv->cfg.chat_template_file, &err)))
            return gs_cli_fail("serve", "%s", err.msg);
    } else {
        sv->tmpl = chat_template_text(sv->gguf);
    }
    struct gs_sched_cfg sc;
    gs_cfg_to_sched_cfg(&sv->cfg, &sc);
    size_t n_eog;
    sc.eog = gs_tok_eog_ids(sv->tok, &n_eog);
    sc.n_eog = (uint32_t)n_eog;
    sc.notify = wake;
    sc.notify_ctx = &sv->holder;
    if (sv->cfg.draft_model) {
        const char *dpath = sv->cfg.draft_model;
        if (gs_gguf_open(dpath, &sv->draft_gguf, &err) != GS_OK ||
            gs_model_load(sv->draft_gguf, &sv->draft_model, &err) != GS_OK)
            return gs_cli_fail("serve", "--draft-model %s: %s", dpath, err.msg);
        sc.draft_model = sv->draft_model;
    }
    if (gs_serve_test_hooks_from_env(&sv->hooks)) {
        gs_log(GS_LOG_WARN, "test_hook",
               "poison_pos=%lld step_gate=%s step_gate_at=%u:%s validate_gate=%s event_gate=%s "
               "reason=%s",
               sv->hooks.poison ? (long long)sv->hooks.poison_pos : -1LL,
               sv->hooks.gate_path ? sv->hooks.gate_path : "-", sv->hooks.gate_at,
               sv->hooks.gate_at_path ? sv->hooks.gate_at_path : "-",
               sv->hooks.validate_gate_path ? sv->hooks.validate_gate_path : "-",
               sv->hooks.event_gate_path ? sv->hooks.event_gate_path : "-",
               "a GS_TEST_ variable is set (tests only)");
        sc.logits_hook = gs_serve_test_hook;
        sc.logits_hook_ctx = &sv->hooks;
        sc.validate_hook = gs_serve_test_validate_hook;
        sc.validate_hook_ctx = &sv->hooks;
    }
    /* The scheduler rewrites the graph with its backend's passes: keep it as built. */
    sv->graph_built = graph_json(sv->model->graph);
    if (gs_sched_new(&sc, sv->model, &sv->sched, &err) != GS_OK)
        return gs_cli_fail("serve", "scheduler: %s", err.msg);
    sv->graph_served = graph_json(sv->model->graph);
    if (gs_serve_receipt_compute(digest, sv->model, sc.backend, &sv->receipt, &err) != GS_OK)
        return gs_cli_fail("serve", "%s", err.msg);
    return 0;
}

/* --pooling, or with auto the model's own pooling type when it is one we pool by. */
static enum gs_pooling pooling_for(const struct gs_cfg *cfg, const struct gs_model *m)
{
    if (cfg->pooling != GS_CFG_POOLING_AUTO)
        return (enum gs_pooling)cfg->pooling;
    enum gs_pooling p = GS_POOLING_NONE;
    if (gs_model_pooling(m, &p, NULL) != GS_OK || p == GS_POOLING_NONE)
        p = GS_POOLING_MEAN;
    return p;
}

static void print_start(const struct serve *sv, const struct gs_srv_cfg *c)
{
    struct gs_sched_stats st;
    gs_sched_stats(sv->sched, &st);
    const struct gs_model_hparams *hp = &sv->model->hp;
    gs_log(GS_LOG_INFO, "model",
           "path=%s id=%s arch=%s n_vocab=%u n_ctx=%u n_ctx_train=%u n_embd=%u n_layer=%u "
           "params=%llu chat_template=%s",
           sv->cfg.model, c->model.id, hp->arch, hp->n_vocab, c->model.n_ctx, hp->n_ctx_train,
           hp->n_embd, hp->n_layer, (unsigned long long)c->model.n_params,
           c->chat_template ? c->chat_template : (sv->tmpl ? "from-gguf" : "plain"));
    gs_log(GS_LOG_INFO, "engine",
           "backend=%s threads=%lld kv_type=%s kv_pages=%u page_tokens=%lld kv_bytes=%llu "
           "max_seqs=%lld max_batch_tokens=%lld max_queue=%lld prefix_cache=%s spec=%s "
           "spec_max_draft=%lld draft_model=%s draft_kv_bytes=%llu",
           c->model.backend, (long long)sv->cfg.threads, c->model.kv_type, st.pages_total,
           (long long)sv->cfg.page_tokens, (unsigned long long)st.kv_bytes,
           (long long)sv->cfg.max_seqs, (long long)sv->cfg.max_batch_tokens,
           (long long)sv->cfg.max_queue, sv->cfg.prefix_cache ? "true" : "false",
           gs_cfg_spec_name(sv->cfg.spec), (long long)sv->cfg.spec_max_draft,
           sv->cfg.draft_model ? sv->cfg.draft_model : "-", (unsigned long long)st.draft_kv_bytes);
    if (!sv->cfg.n_ctx && c->model.n_ctx < hp->n_ctx_train)
        gs_log(GS_LOG_WARN, "context",
               "n_ctx=%u n_ctx_train=%u reason=%s", c->model.n_ctx, hp->n_ctx_train,
               "one sequence of the model's context_length does not fit in the memory "
               "available; pass --n-ctx to choose");
    const struct gs_srv_limits *l = &c->limits;
    gs_log(GS_LOG_INFO, "limits",
           "max_body_bytes=%llu max_header_bytes=%u conn_timeout_s=%u request_timeout_s=%u "
           "max_conns=%u max_conns_per_ip=%u max_tokens=%u max_stream_buffer_bytes=%llu "
           "drain_timeout_ms=%u api_keys=%zu allowed_hosts=%zu",
           (unsigned long long)l->max_body_bytes, l->max_header_bytes, l->conn_timeout_s,
           l->request_timeout_s, l->max_conns, l->max_conns_per_ip, l->max_tokens,
           (unsigned long long)l->max_stream_buffer_bytes, c->drain_timeout_ms, c->n_api_keys,
           c->n_allowed_hosts);
    if (l->max_tokens < sv->cfg.max_tokens)
        gs_log(GS_LOG_INFO, "limits", "max_tokens=%u max_tokens_asked=%lld reason=%s",
               l->max_tokens, (long long)sv->cfg.max_tokens, "over the context");
}

static void server_cfg(const struct serve *sv, struct gs_srv_cfg *c, char *id, size_t id_cap)
{
    const struct gs_cfg *cfg = &sv->cfg;
    if (cfg->served_model_name.n)
        snprintf(id, id_cap, "%s", cfg->served_model_name.v[0]);
    else
        model_id(cfg->model, id, id_cap);
    *c = (struct gs_srv_cfg){
        .host = cfg->host,
        .port = (uint16_t)cfg->port,
        .limits = GS_SRV_LIMITS_DEFAULT,
        .api_keys = (const char *const *)cfg->api_key.v,
        .n_api_keys = cfg->api_key.n,
        .metrics_public = cfg->metrics_public,
        .debug_endpoints = cfg->debug_endpoints,
        .webui = cfg->webui,
        .allowed_hosts = (const char *const *)cfg->allowed_hosts.v,
        .n_allowed_hosts = cfg->allowed_hosts.n,
        .cors_origins = (const char *const *)cfg->cors_origins.v,
        .n_cors_origins = cfg->cors_origins.n,
        .drain_timeout_ms = (uint32_t)(cfg->drain_timeout_s * 1000),
        .chat_template = cfg->chat_template == GS_CFG_TEMPLATE_AUTO
                             ? NULL
                             : gs_cfg_template_name(cfg->chat_template),
        .handle_signals = true,
    };
    c->limits.max_body_bytes = cfg->max_body_bytes;
    c->limits.max_header_bytes = (uint32_t)cfg->max_header_bytes;
    c->limits.conn_timeout_s = (uint32_t)cfg->conn_timeout_s;
    c->limits.request_timeout_s = (uint32_t)cfg->request_timeout_s;
    c->limits.max_stream_buffer_bytes = cfg->max_stream_buffer_bytes;
    c->limits.max_conns = (uint32_t)cfg->max_conns;
    c->limits.max_conns_per_ip = (uint32_t)cfg->max_conns_per_ip;
    c->limits.responses_store_max = (uint32_t)cfg->responses_store_max;
    c->limits.responses_store_bytes = cfg->responses_store_bytes;
    c->limits.responses_store_max_age_s = (uint32_t)cfg->responses_store_max_age_s;
    /* No request can generate more than the context holds: a larger cap
     * would only turn into context_length_exceeded later. */
    c->limits.max_tokens = (uint32_t)GS_MIN((uint64_t)cfg->max_tokens, gs_sched_n_ctx(sv->sched));
    c->model = (struct gs_srv_model_info){
        .id = id,
        .aliases =
            cfg->served_model_name.n > 1 ? (const char *const *)cfg->served_model_name.v + 1 : NULL,
        .n_aliases = cfg->served_model_name.n > 1 ? cfg->served_model_name.n - 1 : 0,
        .accept_any_name = cfg->accept_any_model_name,
        .tok = sv->tok,
        .chat_template = sv->tmpl,
        .chat_template_file = cfg->chat_template_file,
        .n_ctx = gs_sched_n_ctx(sv->sched),
        .n_ctx_train = sv->model->hp.n_ctx_train,
        .n_embd = sv->model->hp.n_embd,
        .n_params = count_params(sv->gguf),
        .size_bytes = gs_gguf_file_bytes(sv->gguf),
        .backend = gs_cfg_backend_name(cfg->backend),
        .kv_type = gs_cfg_kv_type_name(cfg->kv_type),
        .validation_kv_type = gs_type_name(GS_SCHED_VAL_KV_TYPE),
        .sha256 = sv->receipt.sha256,
        .kernel_variant = sv->receipt.variant,
        .graph_hash = sv->receipt.graph_hash,
        .graph_json_built = sv->graph_built,
        .graph_json_served = sv->graph_served,
        .pooling = pooling_for(cfg, sv->model),
    };
    c->validate_rate = cfg->validate_rate;
    c->validate_timeout_ms = (uint32_t)cfg->validate_timeout_ms;
}

/* SIGHUP, on the loop thread: the config is rebuilt from the file and the
 * environment with the original flags on top, and what may change while
 * requests run is applied to the server and the logger. Requests already
 * admitted keep what they were admitted with. */
static void reload(void *ctx, struct gs_srv *srv)
{
    struct serve *sv = ctx;
    struct gs_err err;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    unsigned long long usec = (unsigned long long)ts.tv_sec * 1000000ull + ts.tv_nsec / 1000;
    gs_sd_notifyf(NULL, &err, "RELOADING=1\nMONOTONIC_USEC=%llu", usec);
    struct gs_cfg_reload_report rep;
    if (gs_cfg_reload(&sv->cfg, NULL, &rep, &err) != GS_OK) {
        gs_log(GS_LOG_ERROR, "config_reload", "refused=\"%s\"", err.msg);
    } else {
        gs_cfg_apply_log(&sv->cfg);
        char id[256];
        struct gs_srv_cfg c;
        server_cfg(sv, &c, id, sizeof(id));
        if (gs_srv_update(srv, &c, &err) != GS_OK)
            gs_log(GS_LOG_ERROR, "config_reload", "not_applied=\"%s\"", err.msg);
        else
            gs_cfg_log_reload(&rep);
    }
    /* A daemon whose known-answer check failed never said READY=1; a reload
     * must not say it either. */
    if (sv->known_answer_ok)
        gs_sd_notify("READY=1", NULL, &err);
    else
        gs_sd_notify("STATUS=reloaded; not ready: known-answer check failed", NULL, &err);
}

/* Socket activation: the first listening TCP socket systemd passed, or -1.
 * Must run before any thread starts (it edits the environment). */
static int passed_socket(struct gs_err *err)
{
    struct gs_sd_fds fds = {0};
    if (gs_sd_listen_fds(&fds, err) != GS_OK)
        return -2;
    int fd = -1;
    for (size_t i = 0; i < fds.n && fd < 0; i++)
        if (fds.v[i].listening && (fds.v[i].family == AF_INET || fds.v[i].family == AF_INET6))
            fd = fds.v[i].fd;
    if (fds.n && fd < 0)
        gs_log(GS_LOG_WARN, "socket_activation", "passed=%zu usable=0", fds.n);
    gs_sd_fds_deinit(&fds);
    return fd;
}

static int serve(struct serve *sv)
{
    struct gs_err err;
    int listen_fd = passed_socket(&err);
    if (listen_fd == -2)
        return gs_cli_fail("serve", "socket activation: %s", err.msg);
    uint64_t watchdog_usec = 0;
    if (gs_sd_watchdog_usec(&watchdog_usec, &err) != GS_OK)
        gs_log(GS_LOG_WARN, "watchdog", "disabled=\"%s\"", err.msg);
    int rc = load(sv);
    if (rc)
        return rc;
    char id[256];
    struct gs_srv_cfg c;
    server_cfg(sv, &c, id, sizeof(id));
    c.listen_fd = listen_fd;
    c.tls = (struct gs_srv_tls_cfg){
        .cert_path = sv->cfg.tls_cert,
        .key_path = sv->cfg.tls_key,
        .client_ca_path = sv->cfg.tls_client_ca,
        .handshake_timeout_ms = (uint32_t)(sv->cfg.tls_handshake_timeout_s * 1000),
        .max_handshakes = (uint32_t)sv->cfg.max_tls_handshakes,
        .max_handshakes_per_ip = (uint32_t)sv->cfg.max_tls_handshakes_per_ip,
    };
    c.on_reload = reload;
    c.reload_ctx = sv;
    c.watchdog_usec = watchdog_usec;
    const char *scheme = sv->cfg.tls_cert ? "https" : "http";
    if (gs_srv_new(&c, &sv->srv, &err) != GS_OK)
        return gs_cli_fail("serve", "%s", err.msg);
    atomic_store(&sv->holder.srv, sv->srv);
    struct gs_srv_engine eng = {sv,         eng_submit,      eng_cancel,    eng_poll,
                                eng_stats,  eng_trace_watch, eng_trace_take};
    gs_srv_set_engine(sv->srv, &eng);
    /* Known-answer check: the serving backend against ref on a fixed prompt,
     * before the engine thread starts; /ready and READY=1 wait for it. */
    char ka[256];
    bool ka_ok = gs_serve_known_answer(sv->sched, sv->tok, ka, sizeof(ka));
    sv->known_answer_ok = ka_ok;
    gs_srv_set_known_answer(sv->srv, ka_ok, ka);
    gs_srv_set_ready(sv->srv, ka_ok, ka_ok ? NULL : "not serving: its known-answer check failed");
    gs_log(ka_ok ? GS_LOG_INFO : GS_LOG_ERROR, "known_answer", "passed=%s detail=%s",
           ka_ok ? "true" : "false", ka);
    gs_log(GS_LOG_INFO, "receipt",
           "model_sha256=%s backend=%s kernel_variant=%s graph_hash=%s kv_type=%s",
           sv->receipt.sha256, c.model.backend, sv->receipt.variant, sv->receipt.graph_hash,
           c.model.kv_type);
    if (gs_sched_start(sv->sched, &err) != GS_OK)
        return gs_cli_fail("serve", "engine: %s", err.msg);
    print_start(sv, &c);
    gs_log(GS_LOG_INFO, "listening", "url=%s://%s:%u tls_client_cert=%s watchdog_usec=%llu",
           scheme, c.host ? c.host : "127.0.0.1", gs_srv_port(sv->srv),
           sv->cfg.tls_client_ca ? "required" : "no", (unsigned long long)watchdog_usec);
    /* Tests read the bound port from this line when they pass --port 0. */
    fprintf(stdout, "graphserve: listening on %s://%s:%u\n", scheme,
            c.host ? c.host : "127.0.0.1", gs_srv_port(sv->srv));
    fflush(stdout);
    if (ka_ok)
        gs_sd_notifyf(NULL, &err, "READY=1\nSTATUS=serving %s on port %u", id,
                      gs_srv_port(sv->srv));
    else /* no READY=1: the service manager sees a start that never completes */
        gs_sd_notifyf(NULL, &err, "STATUS=known-answer check failed: %s", ka);
    rc = gs_srv_run(sv->srv);
    /* Every request has ended; the engine has nothing left to finish, and
     * the loop that gs_srv_wake would signal is closed. */
    atomic_store(&sv->holder.srv, NULL);
    gs_sched_stop(sv->sched, 0);
    gs_log(GS_LOG_INFO, "stopped", "status=%d", rc);
    return rc;
}

int gs_cmd_serve(int argc, char **argv)
{
#ifdef __GLIBC__
    /* glibc raises its mmap threshold to the size of each large block freed, so a
     * daemon's large per-request buffers (logits rows, stream buffers, validation
     * reports) move into the arenas after the first few and stay there as
     * fragmentation: a 15-minute soak grew anonymous memory 8.8% with the default and
     * 1.5% with the threshold fixed. Fixed, blocks of 128 KiB and more are mapped per
     * allocation and returned when freed. */
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
#endif
    struct serve sv = {0};
    struct gs_err err;
    if (gs_cfg_load(&sv.cfg, argc, argv, NULL, &err) != GS_OK) {
        gs_cfg_deinit(&sv.cfg);
        return gs_cli_fail("serve", "%s", err.msg) + 1;
    }
    int rc = 0;
    switch (sv.cfg.action) {
    case GS_CFG_HELP:
        gs_cfg_help(stdout);
        break;
    case GS_CFG_HELP_MARKDOWN:
        gs_cfg_help_markdown(stdout);
        break;
    case GS_CFG_PRINT_CONFIG:
        rc = gs_cfg_print(&sv.cfg, stdout) ? 0 : 1;
        break;
    case GS_CFG_RUN:
        gs_cfg_apply_log(&sv.cfg);
        if (!sv.cfg.model)
            rc = gs_cli_usage("serve", "-m FILE [options]   (see graphserve serve --help)");
        else
            rc = serve(&sv);
        break;
    }
    gs_srv_free(sv.srv);
    gs_sched_free(sv.sched);
    gs_serve_test_hooks_free(&sv.hooks);
    gs_free(sv.tmpl);
    free(sv.graph_built);
    free(sv.graph_served);
    gs_tok_free(sv.tok);
    gs_model_free(sv.model);
    gs_gguf_close(sv.gguf);
    gs_model_free(sv.draft_model);
    gs_gguf_close(sv.draft_gguf);
    gs_cfg_deinit(&sv.cfg);
    return rc;
}
