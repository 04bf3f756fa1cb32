/*
 * server/daemon.h - the daemon's own state, shared by http.c (libmicrohttpd
 * on libuv, connections, drain), routes.c (the endpoints) and generate.c
 * (generation requests and their engine events). Loop thread only, except
 * the fields marked atomic. No other module includes this header.
 *
 * Life of an HTTP request (struct gs_srv_req): created when its headers
 * arrive, the body collected up to the cap, then dispatched to a route. A
 * generation request submits one engine request per choice and suspends its
 * connection; engine events (uv_async) fill its buffers and resume it. The
 * request is freed in MHD's completion callback, which also cancels whatever
 * the engine still runs for it (the client went away).
 */
#ifndef GS_SERVER_DAEMON_H
#define GS_SERVER_DAEMON_H

#include "engine/jinja.h"
#include "server/internal.h"
#include "server/validation.h"

#include <microhttpd.h>
#include <stdatomic.h>
#include <uv.h>

struct gs_srv_choice {
    uint64_t sched_id;
    uint32_t index;
    struct gs_tok_decoder *dec;
    struct gs_srv_stop stop;
    struct gs_srv_buf text; /* released text: all of it (non-stream) or not yet sent (stream) */
    json_t *logprobs;       /* entries not yet reported (stream) or all (non-stream) */
    size_t text_offset;     /* completions logprobs: bytes released before the pending ones */
    bool submitted;         /* the engine has it (see submit_deferred in generate.c) */
    bool done;              /* FINISH received */
    bool stop_hit;          /* a stop string matched; the engine was told to cancel */
    bool first_sent;        /* stream: the opening chunk went out */
    enum gs_finish finish;
    struct gs_sched_req_stats stats;
    enum gs_status err_code;
    char err_msg[GS_ERR_MSG_LEN];
    uint32_t n_tokens;         /* TOKEN events seen */
    uint32_t n_tokens_at_stop; /* n_tokens when the stop string completed */
    double t_first_ms, t_last_ms;
    struct gs_srv_choice_val val;
    /* Tool calls (tools given and tool_choice not "none") and thinking blocks: the stop
     * matcher's output goes to released, then through the thinking splitter (its block to
     * reasoning, the rest to answer) and the tool-call reader, whose content lands in
     * text. */
    bool think_on;
    struct gs_srv_think think;
    struct gs_srv_buf reasoning; /* released thinking: all of it (non-stream) or not yet sent */
    struct gs_srv_buf answer;    /* after the splitter, before the reader */
    bool tools_on;
    struct gs_srv_tool_reader tools;
    struct gs_srv_buf released;
    json_t *calls;       /* OpenAI's tool call objects found so far, ids assigned */
    json_t *call_deltas; /* stream: OpenAI's tool_calls delta entries not yet sent */
    float *embd;         /* /v1/embeddings: [n_embd] this input's unit vector; owned */
};

struct gs_srv_route;

struct gs_srv_req;

/*
 * How a generation request's answer is written: OpenAI's chunks and objects
 * (generate.c) or Anthropic's events and message (anthropic.c). generate.c runs one
 * path for every API, from the parsed request to the engine's events, and calls these
 * only where the shapes differ. Errors before an answer starts go through
 * gs_srv__respond_error, which writes the route's API's error object.
 */
struct gs_srv_shape {
    const char *id_prefix; /* of the request's id: "chatcmpl-", "cmpl-", "msg_" */
    /* Stream: what follows the 200 header (the chat's role chunk; message_start). */
    void (*stream_open)(struct gs_srv_req *r);
    /* Stream: choice c's released text (c->text, emptied); fin: the choice has ended. */
    void (*stream_text)(struct gs_srv_req *r, struct gs_srv_choice *c, bool fin);
    /* Stream: every choice ended and every report is in: the closing events, the last. */
    void (*stream_end)(struct gs_srv_req *r);
    /* Stream: the stream ends early with an error event (a client that does not read). */
    void (*stream_fail)(struct gs_srv_req *r, enum gs_srv_ekind kind, const char *msg);
    /* Not streamed: every choice ended without an engine error; answers. */
    enum MHD_Result (*respond)(struct gs_srv_req *r);
};

/* generate.c: the error kind and message for a choice that did not end as an
 * answer (an engine error, or a shutdown before it was whole); for the shapes
 * whose streams end in an error event. */
enum gs_srv_ekind gs_srv__unfinished_kind(const struct gs_srv_choice *c, const char **msg);

/* anthropic.c */
extern const struct gs_srv_shape gs_srv__anthropic_shape;
/* responses.c: OpenAI's Responses API */
extern const struct gs_srv_shape gs_srv__responses_shape;

struct gs_srv_resp_store;

/* A /v1/responses stream's state (responses.c): the typed events are numbered, and
 * response.completed carries every output item, so the items are kept as they close. */
struct gs_srv_resp_stream {
    uint32_t seq;           /* sequence_number of the next event */
    json_t *output;         /* the output items closed so far; owned */
    int open;               /* responses.c's enum: which item is open, if any */
    struct gs_srv_buf text; /* the open message's text, or the open call's arguments */
    json_t *item;           /* the open item; owned */
};
/* A /v1/messages stream's state (anthropic.c): the content block open, if any, and its
 * index (blocks are numbered from 0 in the order they open). */
struct gs_srv_msg_stream {
    int open;       /* anthropic.c's enum */
    uint32_t index; /* the open block's index, or the next one's */
};
/* embed.c: only respond (embeddings never stream) */
extern const struct gs_srv_shape gs_srv__embed_shape;

/* A text being tokenized on libuv's thread pool (gs_srv__tokenize_async). */
struct gs_srv_tok_job {
    uv_work_t work;
    struct gs_srv_buf text; /* the rendered prompt */
    int32_t *ids;           /* result, gs_malloc'd */
    size_t n_ids;
    enum gs_status st;
    struct gs_err err;
    unsigned flags;                                /* enum gs_tok_encode_flags */
    enum MHD_Result (*then)(struct gs_srv_req *r); /* goes on once done; clears done */
    bool running; /* queued or on a pool thread: the request must not be freed */
    bool done;    /* result ready for then() */
    /* Where text may spell control tokens (a chat template's markers);
     * elsewhere it is plain text unless flags has GS_TOK_PARSE_SPECIAL. */
    struct gs_srv_spans spans;
};

/* jinja_prompt.c: chats rendered by a Jinja chat template (engine/jinja.h). */
struct gs_srv_jinja {
    struct gs_jinja_tmpl *tmpl; /* NULL: chats use the built-in format gs_srv.tmpl */
    char *origin;               /* where the template came from: "gguf" */
    char *error;                /* the model's template did not parse: why; else NULL */
    json_t *trusted;            /* bos_token and eos_token from the vocabulary */
    char *bos_text;             /* the vocabulary's BOS text; NULL when it has none */
};

/*
 * A client connection, from MHD's accept to its close (http.c). The request
 * deadline and the eviction of idle connections work on these: MHD sees a
 * request only once its headers are whole, so a client that drips its
 * headers would otherwise be invisible.
 */
struct gs_srv_conn {
    struct gs_srv_conn *prev, *next; /* srv->conns, oldest first */
    int fd;
    double t_since_ms; /* opened, or its previous answer ended: the request is due from here */
    bool busy;         /* a whole request is in hand: no deadline, not evicted */
    bool cut;          /* shut down by the deadline or to make room; MHD closes it */
};

struct gs_srv_req {
    struct gs_srv *srv;
    struct MHD_Connection *conn;
    struct gs_srv_conn *hconn; /* NULL if MHD gave none */
    bool close_after;          /* the answer says Connection: close (a refused head) */
    const char *cors_origin;   /* Access-Control-Allow-Origin for the answer; NULL: none */
    char origin[256];          /* the request's Origin, when cors_origin echoes it */
    struct gs_srv_req *prev, *next; /* srv->active while the engine works for it */
    bool in_active;
    char id[64];
    const struct gs_srv_route *route;
    enum gs_srv_endpoint ep;
    char method[12];
    char *url;
    struct gs_srv_buf body;
    bool too_large;
    unsigned status; /* HTTP status sent, for the log and metrics */
    double t_start_ms;
    bool suspended;
    bool waiting; /* non-stream: suspended until every choice is done */
    bool streaming;
    bool peer_gone;   /* the client closed or reset the connection */
    bool drain_abort; /* ended by the drain deadline: finish_reason "abort" */
    /* generation */
    const struct gs_srv_shape *shape; /* set by gs_srv__gen_start */
    struct gs_srv_gen gen;
    struct gs_srv_tok_job tok_job;
    bool tokenize_pieces; /* /tokenize: with_pieces */
    int32_t *prompt;
    uint32_t n_prompt;
    struct gs_srv_choice *choices;
    uint32_t n_choices, n_done;
    uint32_t max_tokens;   /* as submitted (the request's, or what the context allows) */
    uint64_t seed;         /* choice i samples with seed + i */
    bool deferred;         /* choices 1.. wait for choice 0's prompt to be cached */
    bool think_open;       /* the rendered prompt ends inside an opened <think> block */
    long long created;     /* unix seconds */
    struct gs_srv_buf out; /* stream: SSE bytes not yet handed to MHD */
    bool stream_end;       /* "[DONE]" is in out */
    bool slow_reader;      /* out passed max_stream_buffer_bytes: cancelled, nothing more added */
    double t_last_out_ms;
    struct gs_srv_req_val val;
    struct gs_srv_resp_stream resp; /* /v1/responses streams */
    struct gs_srv_msg_stream msg;   /* /v1/messages streams */
    struct gs_srv_embed_req *embed; /* /v1/embeddings (embed.c): its body; owned; else NULL */
    /* GET /debug/events (debug.c): a subscriber of the engine's step trace, in
     * srv->debug_subs; records that did not fit in out are counted in debug_gap and
     * reported by a gap event before the next one that fits. */
    bool debug_sub;
    struct gs_srv_req *dprev, *dnext;
    uint64_t debug_gap;
};

struct gs_srv {
    struct gs_srv_cfg cfg; /* strings below are copies owned by the server */
    char *host, *model_id, *chat_template_name;
    uint8_t (*key_digests)[32];
    enum gs_srv_tmpl tmpl;
    struct gs_srv_jinja jinja; /* jinja_prompt.c: the Jinja template, when chats use one */
    /* How the template's model writes tool calls (tool_format.c); with jinja.tmpl. */
    const struct gs_srv_tool_format *tool_format;
    bool thinks; /* the template writes <think> blocks: answers split them out */
    struct gs_srv_engine engine;
    bool has_engine;
    /* The model's tokens as byte strings for grammar masks, built on the
     * first structured-output request (engine/grammar.h); owned. */
    struct gs_grammar_vocab *grammar_vocab;

    uv_loop_t loop;
    uv_poll_t mhd_poll;   /* MHD's epoll descriptor */
    uv_timer_t mhd_timer; /* MHD's next timeout */
    uv_timer_t tick;      /* 1 s: dead peers and SSE keepalives, while requests run */
    uv_timer_t drain_timer;
    uv_timer_t sweep; /* 1 s while connections are open: the request deadline */
    bool sweep_on;
    uv_async_t async; /* engine events and cross-thread requests */
    uv_signal_t sig_term, sig_int;
    uv_signal_t sig_hup;     /* service.c: SIGHUP -> cfg.on_reload */
    uv_timer_t watchdog;     /* service.c: WATCHDOG=1 every half interval */
    bool hup_on, watchdog_on;
    uint64_t wd_steps;       /* engine steps at the last sign of progress */
    double wd_progress_ms;   /* when the engine last progressed (or was idle) */
    struct gs_srv_tls *tls;  /* tls.c: the TLS terminator; NULL: plain HTTP */
    bool handles_open, tick_on;
    struct MHD_Daemon *mhd;
    uint16_t port;

    struct gs_srv_conn *conns, *conns_tail; /* open client connections, oldest first */
    uint32_t n_conns;
    bool listens_on_loopback;     /* the bound address is 127.0.0.0/8 or ::1 */
    struct gs_srv_head_policy head_policy;
    char **allowed_hosts;         /* owned copies behind head_policy */
    char **cors_origins;          /* owned copies behind head_policy.origins */
    char **model_aliases;         /* owned copies behind cfg.model.aliases */

    struct gs_srv_req *active; /* generation requests with engine work */
    struct gs_srv_req *debug_subs; /* /debug/events streams (debug.c) */
    uint32_t n_reqs;           /* HTTP requests alive (any route) */
    uint64_t next_seq;         /* request ids for X-Request-Id */
    double t_trim_ms;          /* when freed heap was last handed back (malloc_trim) */
    uint64_t next_sched_id;
    bool draining, drain_expired, closing;
    int n_signals;

    _Atomic bool ready;
    _Atomic bool shutdown_requested;
    char ready_why[64]; /* protected by ready_mu */
    uv_mutex_t ready_mu;

    struct gs_srv_metrics metrics;
    struct gs_srv_val_metrics val_metrics;
    struct gs_srv_resp_store *resp_store; /* responses_store.c; NULL until one is kept */
    bool known_answer_set, known_answer_passed;
    char known_answer[256]; /* the readiness check's verdict, for /health */
};

/* A route: one row of routes.c's table. */
struct gs_srv_route {
    const char *method;
    const char *path;
    enum gs_srv_endpoint ep;
    bool auth; /* a key required (when keys are configured) */
    enum MHD_Result (*handler)(struct gs_srv_req *r);
    enum gs_srv_api api; /* whose error objects its answers carry */
};

/* routes.c */
/* The route for method+path; *path_known tells a 405 from a 404 when NULL. */
const struct gs_srv_route *gs_srv__route_find(const char *method, const char *path,
                                              bool *path_known);
/* The API of path's routes, whatever the method (a 405 answers in it); OpenAI's for an
 * unknown path. */
enum gs_srv_api gs_srv__route_api(const char *path);
/* The methods path allows, for the Allow header of a 405 ("GET, HEAD"). */
void gs_srv__route_allow(const char *path, char *out, size_t cap);

/* http.c: responses and connection control */
enum MHD_Result gs_srv__respond_json(struct gs_srv_req *r, unsigned status, json_t *body);
/* What the request parsers may accept from this server's limits (model.tok must be set). */
struct gs_srv_parse_limits gs_srv__parse_limits(const struct gs_srv *s);

/* X-Request-Id, and Anthropic's request-id on its API's routes. */
void gs_srv__id_headers(const struct gs_srv_req *r, struct MHD_Response *resp);
/* The CORS headers of r's answer (none unless its Origin is configured). */
void gs_srv__cors_headers(const struct gs_srv_req *r, struct MHD_Response *resp);
/* An event stream's response, read from r->out by gs_srv__gen_stream_read, with its
 * content type, no-cache, the id and CORS headers; NULL when out of memory. */
struct MHD_Response *gs_srv__sse_response(struct gs_srv_req *r);
/* Whether a request naming model `name` (NULL: none named) is for this server. */
bool gs_srv__model_name_ok(const struct gs_srv *s, const char *name);

enum MHD_Result gs_srv__respond_text(struct gs_srv_req *r, unsigned status, const char *type,
                                     const char *text, size_t len);
/* Answers kind's status with the error object of the API of r's path (OpenAI's for an
 * unknown path). */
enum MHD_Result gs_srv__respond_error(struct gs_srv_req *r, enum gs_srv_ekind kind,
                                      const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void gs_srv__suspend(struct gs_srv_req *r);
/* Lets MHD process what changed (a resumed connection) outside its callbacks. */
void gs_srv__kick(struct gs_srv *s);
/* Tokenizes r->tok_job.text with its spans and flags (gs_tok_encode_spans)
 * on the thread pool, the connection suspended; then the access handler
 * calls then(r), which takes the result (ids, n_ids, st, err) and clears
 * done. Call from a handler; returns what the handler returns. */
enum MHD_Result gs_srv__tokenize_async(struct gs_srv_req *r, unsigned flags,
                                       enum MHD_Result (*then)(struct gs_srv_req *r));
void gs_srv__resume(struct gs_srv_req *r);
void gs_srv__active_add(struct gs_srv_req *r);
/* Starts the 1-second tick (dead peers, keepalives) if it is not running. */
void gs_srv__tick_start(struct gs_srv *s);
void gs_srv__active_remove(struct gs_srv_req *r);
bool gs_srv__is_ready(struct gs_srv *s, char *why, size_t cap);

/* service.c: SIGHUP -> cfg.on_reload, and WATCHDOG=1 pings (when configured). */
void gs_srv__service_start(struct gs_srv *s);
void gs_srv__service_close(struct gs_srv *s);

/* jinja_prompt.c. init: parses the model's tokenizer.chat_template (unless
 * a built-in format is forced); one that does not parse leaves chats to the
 * built-in format, with a warning and /v1/models saying why. render: the chat of r into r->tok_job (text, the
 * template's spans, and in *flags GS_TOK_ADD_SPECIAL unless the template
 * wrote BOS itself); on a template error it answers 400 itself (the
 * template's own message for raise_exception) and returns false with *ret. */
enum gs_status gs_srv__jinja_init(struct gs_srv *s, const struct gs_srv_cfg *cfg,
                                  struct gs_err *err);
void gs_srv__jinja_free(struct gs_srv *s);
bool gs_srv__jinja_render(struct gs_srv_req *r, unsigned *flags, enum MHD_Result *ret);
/* POST /apply-template: a chat completion body's prompt, rendered by the
 * template chats use, without generating: {"prompt": ..., "chat_template": ...}. */
enum MHD_Result gs_srv__apply_template(struct gs_srv_req *r);

/* generate.c */
enum MHD_Result gs_srv__gen_start(struct gs_srv_req *r);
/* Called again once the prompt is tokenized: checks it and submits. */
enum MHD_Result gs_srv__gen_continue(struct gs_srv_req *r);
/* Called again for a resumed non-stream request: queues the final answer. */
enum MHD_Result gs_srv__gen_respond(struct gs_srv_req *r);
void gs_srv__gen_event(struct gs_srv *s, const struct gs_sched_event *ev);
/* The client is gone or the drain deadline passed: cancel what still runs. */
void gs_srv__gen_cancel(struct gs_srv_req *r);
void gs_srv__gen_free(struct gs_srv_req *r);
uint32_t gs_srv__choice_tokens(const struct gs_srv_choice *c);
/* The SSE content reader for streaming requests. */
ssize_t gs_srv__gen_stream_read(void *cls, uint64_t pos, char *buf, size_t max);
/* Streaming: once every choice ended, the closing chunks and [DONE], or the
 * "pending" usage chunk while validation reports are awaited. */
void gs_srv__gen_try_end(struct gs_srv_req *r);
/* After a change: try_end, resume the connection if it has something to
 * send or answer, leave the active list when nothing is awaited. */
void gs_srv__gen_settle(struct gs_srv_req *r);

/* responses.c and responses_store.c: /v1/responses */
/* Frees r's stream state (from gs_srv__gen_free). */
void gs_srv__responses_free(struct gs_srv_req *r);
/* The conversation kept for response id (chat messages; borrowed until the next call
 * into the store), or NULL when unknown or expired. */
const json_t *gs_srv__responses_find(struct gs_srv *s, const char *id);
/* Keeps r's conversation and its answer resp (the response object) when r asked for
 * "store": true; a conversation too large for the store is not kept (logged). */
void gs_srv__responses_keep(struct gs_srv_req *r, const json_t *resp);
void gs_srv__responses_store_free(struct gs_srv *s);
/* GET /v1/responses/{id}: the kept response object; DELETE: forgets it
 * ({"id","object":"response","deleted":true}). 404 for an id not kept. */
enum MHD_Result gs_srv__responses_retrieve(struct gs_srv_req *r);
enum MHD_Result gs_srv__responses_delete(struct gs_srv_req *r);
/* embed.c: POST /v1/embeddings, and each input's FINISH event (its vector). */
enum MHD_Result gs_srv__embed_start(struct gs_srv_req *r);
void gs_srv__embed_event(struct gs_srv_req *r, struct gs_srv_choice *c,
                         const struct gs_sched_event *ev);

/* debug.c: /debug/graph, /debug/memory, /debug/events and the memory ledger. */
enum MHD_Result gs_srv__debug_graph(struct gs_srv_req *r);
enum MHD_Result gs_srv__debug_memory(struct gs_srv_req *r);
enum MHD_Result gs_srv__debug_events(struct gs_srv_req *r);
/* After engine events: hands the trace's new records to every subscriber. */
void gs_srv__debug_drain(struct gs_srv *s);
/* The drain: every subscriber's stream ends. */
void gs_srv__debug_end_all(struct gs_srv *s);
/* Leaves the subscribers (from req_free). */
void gs_srv__debug_free(struct gs_srv_req *r);

/*
 * The memory ledger: one row per kind of memory the daemon holds, read by
 * /debug/memory and /metrics (graphserve_memory_bytes{kind}) alike.
 * X(id, kind label, what it counts)
 */
#define GS_SRV_LEDGER_MAP(X)                                                                       \
    X(WEIGHTS, "weights_mapped", "the model file, mapped read-only (resident as it is read)")      \
    X(KV_POOL, "kv_pool", "the KV page pool, every page")                                          \
    X(KV_USED, "kv_used", "KV pages referenced by sequences")                                      \
    X(PREFIX_CACHE, "prefix_cache", "KV pages kept only for prefix-cache hits")                    \
    X(SCRATCH, "scratch", "activation scratch of the compiled plans")                              \
    X(SEQUENCES, "sequence_buffers",                                                               \
      "the engine's per-sequence buffers: tokens, page tables, masks, validation logits")          \
    X(STREAMS, "stream_buffers", "per-request bytes queued for clients, and request bodies")

enum gs_srv_ledger_row {
#define GS_SRV_LEDGER_ENUM(id, kind, help) GS_SRV_LEDGER_##id,
    GS_SRV_LEDGER_MAP(GS_SRV_LEDGER_ENUM)
#undef GS_SRV_LEDGER_ENUM
        GS_SRV_LEDGER_COUNT
};

/* Fills bytes[GS_SRV_LEDGER_COUNT] from st (NULL: no engine, its rows 0). */
void gs_srv__ledger(const struct gs_srv *s, const struct gs_sched_stats *st, uint64_t *bytes);
/* graphserve_memory_bytes{kind="..."}, one line per row. */
void gs_srv__ledger_metrics(const struct gs_srv *s, const struct gs_sched_stats *st,
                            struct gs_srv_buf *out);

/* webui.c: the web page's files, compiled in (GET / and /assets/...). */
enum MHD_Result gs_srv__webui(struct gs_srv_req *r);

/* validation.c: the request side (see server/validation.h) */
/* Whether r is validated (asked, or sampled by validate_rate); its fingerprint. */
void gs_srv__val_decide(struct gs_srv_req *r);
const char *gs_srv__val_usage(const struct gs_srv_req *r); /* usage.validation */
/* The structured receipt {"model_sha256", "backend", ...} (new reference). */
json_t *gs_srv__val_receipt(const struct gs_srv_req *r);
/* Sets body.validation (choice 0's) and, with n > 1, each choice's in
 * body.validations; nothing when r is not validated. */
void gs_srv__val_attach(struct gs_srv_req *r, json_t *body);
void gs_srv__val_token(struct gs_srv_req *r, struct gs_srv_choice *c,
                       const struct gs_sched_event *ev);
void gs_srv__val_finish(struct gs_srv_req *r, struct gs_srv_choice *c,
                        const struct gs_sched_event *ev);
void gs_srv__val_report(struct gs_srv_req *r, struct gs_srv_choice *c,
                        const struct gs_sched_event *ev);
/* Ends every awaited report with state (TIMEOUT or ERROR) and drops the
 * engine's job. */
void gs_srv__val_give_up(struct gs_srv_req *r, enum gs_srv_val_state state, const char *why);
/* The tick: requests whose reports are overdue time out. */
void gs_srv__val_tick(struct gs_srv *s, double now_ms);

#endif /* GS_SERVER_DAEMON_H */
