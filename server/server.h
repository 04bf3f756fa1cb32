/*
 * server/server.h - the graphserve daemon: an OpenAI-compatible HTTP API with
 * SSE streaming, libmicrohttpd driven from a libuv loop.
 *
 * Threads: the loop thread (the one that calls gs_srv_run) owns everything in
 * here. The engine (the scheduler on its own thread) reaches the server only
 * through gs_srv_wake(), which is async-signal-safe and thread-safe, and
 * gs_srv_set_ready() / gs_srv_shutdown(), which any thread may call.
 *
 * The engine is reached through struct gs_srv_engine, a table with the four
 * loop-thread calls of scheduler/scheduler.h, so that the HTTP machinery can
 * be exercised with any engine that keeps that contract (the daemon passes
 * the real scheduler). Without an engine, every route that needs no
 * generation works and generation routes answer 503.
 *
 * Ownership: gs_srv_new copies the configuration's strings and key list; the
 * tokenizer and model facts in cfg.model are borrowed and must outlive the
 * server.
 *
 * Lifetime: gs_srv_new binds the socket, gs_srv_run serves until a drain
 * (SIGTERM, SIGINT or gs_srv_shutdown) has finished every request, then
 * returns 0; gs_srv_free closes everything.
 */
#ifndef GS_SERVER_H
#define GS_SERVER_H

#include "engine/base.h"
#include "engine/tok.h"
#include "scheduler/scheduler.h"

/* Every limit of the daemon; GS_SRV_LIMITS_DEFAULT gives the defaults of config/table.c
 * (README lists them; test_srv_parts checks they agree). */
struct gs_srv_limits {
    uint64_t max_body_bytes;   /* request body cap (413 above) */
    uint32_t max_header_bytes; /* per-connection memory for the request line and headers */
    uint32_t conn_timeout_s;   /* idle connection timeout */
    /* A request's line, headers and body must be whole this long after the
     * connection opened (or its previous response ended), however steadily
     * the bytes drip; 0: no such deadline. */
    uint32_t request_timeout_s;
    /* Stream bytes a connection may have queued for a client that does not
     * read; past it the request is cancelled. */
    uint64_t max_stream_buffer_bytes;
    uint32_t max_conns;        /* open connections in total */
    uint32_t max_conns_per_ip; /* open connections per client address */
    uint32_t max_tokens;       /* largest max_tokens a request may ask for */
    uint32_t max_n;            /* largest n (choices per request) */
    uint32_t max_stop;         /* stop strings per request */
    uint32_t max_stop_bytes;   /* bytes per stop string */
    /* /v1/responses' store for previous_response_id (responses_store.c). */
    uint32_t responses_store_max;       /* responses kept */
    uint64_t responses_store_bytes;     /* their conversations' compact JSON, in all */
    uint32_t responses_store_max_age_s; /* how long each is kept */
};

#define GS_SRV_LIMITS_DEFAULT                                                                      \
    ((struct gs_srv_limits){                                                                       \
        .max_body_bytes = 2u << 20,                                                                \
        .max_header_bytes = 16u << 10,                                                             \
        .conn_timeout_s = 30,                                                                      \
        .request_timeout_s = 30,                                                                   \
        .max_stream_buffer_bytes = 4u << 20,                                                       \
        .max_conns = 256,                                                                          \
        .max_conns_per_ip = 64,                                                                    \
        .max_tokens = 4096,                                                                        \
        .max_n = 16,                                                                               \
        .max_stop = 16,                                                                            \
        .max_stop_bytes = 256,                                                                     \
        .responses_store_max = 256,                                                                \
        .responses_store_bytes = 16u << 20,                                                        \
        .responses_store_max_age_s = 3600,                                                         \
    })

/* What the routes need to know about the served model. */
struct gs_srv_model_info {
    const char *id;            /* the name clients send as "model"; responses carry it */
    const char *const *aliases; /* n_aliases more names a request may use */
    size_t n_aliases;
    bool accept_any_name;      /* a request naming any model gets this one */
    const struct gs_tok *tok;  /* borrowed; NULL: /tokenize and generation answer 503 */
    const char *chat_template; /* tokenizer.chat_template text, NULL if none */
    /* Where chat_template came from: NULL the GGUF (a template that does not parse falls
     * back to the built-in format); else the file named, whose template must parse. */
    const char *chat_template_file;
    uint32_t n_ctx;            /* longest sequence (prompt + output) */
    uint32_t n_ctx_train;
    uint32_t n_embd;
    enum gs_pooling pooling;   /* how /v1/embeddings pools (never GS_POOLING_NONE when set) */
    uint64_t n_params;
    uint64_t size_bytes; /* model file size */
    const char *backend; /* for logs and the fingerprint */
    /* The served KV cache's element type ("f16", "f32", "q8_0"), and the one the validation
     * reference's cache keeps (GS_SCHED_VAL_KV_TYPE's name); NULL: not told, and /health,
     * /v1/models, /metrics and the receipts leave the field out. */
    const char *kv_type;
    const char *validation_kv_type;
    /* The reproducibility receipt (NULL: ""): the model file's SHA-256 in
     * hex, the kernel variant ("avx2", "reference", ...) and a hash of the
     * compiled graph's text. */
    const char *sha256;
    const char *kernel_variant;
    const char *graph_hash;
    /* GET /debug/graph: the model's graph as engine/graph.h's JSON form, as built
     * and after the rewrite passes the serving backend ran; borrowed, NULL: unknown. */
    const char *graph_json_built;
    const char *graph_json_served;
};

/* The loop-thread side of the scheduler contract (scheduler/scheduler.h). */
struct gs_srv_engine {
    void *ctx;
    enum gs_status (*submit)(void *ctx, const struct gs_sched_request *req, struct gs_err *err);
    void (*cancel)(void *ctx, uint64_t id);
    size_t (*poll)(void *ctx, struct gs_sched_event *out, size_t cap);
    void (*stats)(void *ctx, struct gs_sched_stats *out);
    /* The step trace (gs_sched_trace_watch, gs_sched_trace_take); NULL: an engine
     * without one, and /debug/events answers 503. */
    void (*trace_watch)(void *ctx, bool on);
    uint64_t (*trace_take)(void *ctx, char **text, size_t *len);
};

/* HTTPS (server/tls.h): with cert_path and key_path the listener speaks TLS
 * only. Paths are read by gs_srv_new and not kept. */
struct gs_srv_tls_cfg {
    const char *cert_path;      /* PEM certificate chain; NULL: plain HTTP (relayed, no TLS) */
    const char *key_path;       /* PEM private key */
    const char *client_ca_path; /* PEM CA bundle; set: clients must present a certificate */
    /* The limits come from config/table.c (its rows hold the defaults); each
     * must be nonzero. */
    uint32_t handshake_timeout_ms;
    uint32_t max_handshakes;        /* in progress at once; a new one evicts the oldest */
    uint32_t max_handshakes_per_ip; /* in progress from one client address */
};

struct gs_srv;

struct gs_srv_cfg {
    const char *host; /* "127.0.0.1" when NULL; an address containing ':' is IPv6 */
    uint16_t port;    /* 0: an ephemeral port (gs_srv_port tells which) */
    int listen_fd;    /* > 2: serve this listening TCP socket (socket activation) instead of
                       * binding host:port; the server owns it from gs_srv_new on */
    struct gs_srv_limits limits;
    const char *const *api_keys; /* n_api_keys Bearer tokens; none: no auth */
    /* Host and Origin names accepted besides IP literals and localhost (see
     * gs_srv_head_check); "*" accepts any. Names are checked when this list
     * is not empty, or when the daemon listens on loopback without keys. */
    const char *const *allowed_hosts;
    size_t n_allowed_hosts;
    /* Web origins ("https://app.example:8443", or "*") whose pages may call the API:
     * preflights are answered and responses to them carry CORS headers. */
    const char *const *cors_origins;
    size_t n_cors_origins;
    size_t n_api_keys;
    bool metrics_public;       /* GET /metrics needs no key even when keys are configured */
    /* /debug/graph, /debug/memory and /debug/events are served (behind the keys, when
     * keys are configured); false: they answer 404 as unknown paths. */
    bool debug_endpoints;
    bool webui; /* the web page at / and its /assets/ */
    uint32_t drain_timeout_ms; /* SIGTERM: time in-flight requests get before "abort" */
    const char *chat_template; /* forced template family name; NULL: from the model */
    struct gs_srv_model_info model;
    bool handle_signals; /* SIGTERM/SIGINT drain, a second one exits at once */
    struct gs_srv_tls_cfg tls;
    /* SIGHUP (with handle_signals): on_reload(reload_ctx, server) runs on the
     * loop thread, between requests' callbacks, so it may call gs_srv_update.
     * NULL: SIGHUP keeps its default action. */
    void (*on_reload)(void *ctx, struct gs_srv *s);
    void *reload_ctx;
    /* > 0: the service manager's watchdog interval; WATCHDOG=1 goes out every
     * half of it while the loop runs and the engine makes progress. */
    uint64_t watchdog_usec;
    double validate_rate;         /* fraction of requests validated unasked, 0..1 */
    uint32_t validate_timeout_ms; /* longest wait for a validation report; 0: 10000 */
};

/*
 * Creates the loop, binds host:port and prepares the daemon. GS_INVAL for a
 * bad address or template name, GS_IO when the port cannot be bound or a TLS
 * file cannot be loaded.
 */
enum gs_status gs_srv_new(const struct gs_srv_cfg *cfg, struct gs_srv **out, struct gs_err *err);

/* Sets the engine (copied) before gs_srv_run; without one, generation
 * routes answer 503. The daemon creates the scheduler after the server so
 * that the scheduler's notify can point at gs_srv_wake(srv). */
void gs_srv_set_engine(struct gs_srv *s, const struct gs_srv_engine *engine);

/* The bound port (useful with port 0). */
uint16_t gs_srv_port(const struct gs_srv *s);

/* Wakes the loop to drain engine events. Any thread; pass as the
 * scheduler's cfg.notify with notify_ctx = the server. */
void gs_srv_wake(void *srv);

/* /ready answers 200 only while ready (default true once running); why is
 * shown in the 503 body. Any thread. */
void gs_srv_set_ready(struct gs_srv *s, bool ready, const char *why);

/*
 * Applies what a reload (SIGHUP) may change while requests run: the API keys,
 * drain_timeout_ms, the per-request limits (max_body_bytes, max_tokens,
 * max_n, max_stop, max_stop_bytes), validate_rate and validate_timeout_ms.
 * Connection limits, host, port, the model, the template and TLS need a
 * restart and are ignored here. Requests already
 * admitted keep what they were admitted with. Loop thread only (a SIGHUP
 * handler on the loop). GS_NOMEM leaves the previous settings in place.
 */
enum gs_status gs_srv_update(struct gs_srv *s, const struct gs_srv_cfg *cfg, struct gs_err *err);

/* Records the known-answer readiness check's verdict, shown in /health's
 * body as "known_answer": {"passed", "detail"}. Call before gs_srv_run;
 * readiness itself is gs_srv_set_ready's. */
void gs_srv_set_known_answer(struct gs_srv *s, bool passed, const char *detail);

/* Starts a drain as SIGTERM does. Any thread. */
void gs_srv_shutdown(struct gs_srv *s);

/* Serves until a drain completes. Returns 0 (clean), 1 on a loop failure. */
int gs_srv_run(struct gs_srv *s);

void gs_srv_free(struct gs_srv *s); /* NULL is a no-op */

#endif /* GS_SERVER_H */
