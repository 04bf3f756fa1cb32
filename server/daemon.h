/*
 * server/daemon.h - the daemon's own state, shared by its files: http.c
 * (libmicrohttpd on libuv, connections, drain), routes.c (the table and the
 * endpoints that need no generation), the route files (generate.c, openai.c,
 * anthropic.c, responses.c, embed.c, debug.c, ...), loop.c (the loop's services
 * to routes) and respond.c (the response leaf). Loop thread only, except the
 * fields marked atomic. No other module includes this header.
 *
 * Files call downward only (the call_graph test, tests/check_calls.py): http.c ->
 * routes.c -> the route files -> validation.c, loop.c -> respond.c -> the pure
 * pieces of internal.h. What a lower file must reach above it goes through a table:
 * a route's hooks (struct gs_srv_route_hooks) for the HTTP layer, a request's shape
 * (struct gs_srv_shape) for generate.c, the tokenize job's then for loop.c.
 *
 * Life of an HTTP request (struct gs_srv_req): created when its headers
 * arrive, the body collected up to the cap, then dispatched to its route's
 * handler. A generation request submits one engine request per choice and
 * suspends its connection; engine events (uv_async) go to its route's event
 * hook, which fills its buffers and resumes it. The request is freed in MHD's
 * completion callback, which first calls the route's cancel hook (whatever the
 * engine still runs for it: the client went away) and then its free hook.
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

/* Tokens a choice produced for its client: up to the one that completed a
 * stop string (the engine may have run a step further before the cancel). */
static inline uint32_t gs_srv__choice_tokens(const struct gs_srv_choice *c)
{
    if (c->stop_hit)
        return c->n_tokens_at_stop;
    return c->done ? c->stats.n_generated : c->n_tokens;
}

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
    /* Stream: every choice ended and a validation report is awaited (once); NULL:
     * nothing is said until the end. */
    void (*stream_pending)(struct gs_srv_req *r);
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
    /* Where this record and the request's buffers live (body, out, the tokenize
     * job's text, choices and their buffers); released last, in req_free. */
    struct gs_srv_arena *arena;
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
    enum gs_srv_api api; /* whose error objects it answers with: its route's, or its path's */
    char allow[64];      /* a 405's Allow header: the methods its path takes */
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
    const struct gs_srv_shape *shape; /* its route's (gs_srv__gen_begin, embed start) */
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
    uint32_t stalled_rounds; /* rounds ended over that limit with no read since (generate.c) */
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
    uint8_t (*key_digests)[32]; /* in reload_map */
    /* What a reload replaces, the keys' digests and the allowed host names, lives in
     * one block mapped for it and unmapped when the next reload replaces it: from
     * the heap, one SIGHUP's few bytes land among request garbage and hold the heap's
     * resident top up once the traffic is gone. */
    void *reload_map;
    size_t reload_map_bytes;
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
    char **allowed_hosts;         /* copies behind head_policy, in reload_map */
    char **cors_origins;          /* owned copies behind head_policy.origins */
    char **model_aliases;         /* owned copies behind cfg.model.aliases */

    struct gs_srv_req *active; /* generation requests with engine work */
    struct gs_srv_req *debug_subs; /* /debug/events streams (debug.c) */
    uint32_t n_reqs;           /* HTTP requests alive (any route) */
    uint64_t next_seq;         /* request ids for X-Request-Id */
    double t_trim_ms;          /* when freed heap was last handed back (malloc_trim) */
    uint64_t next_sched_id;
    size_t max_piece_bytes; /* the vocabulary's longest piece: bounds a request's arena */
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

/*
 * A route's life after its handler, for routes whose requests outlive it (engine
 * work, a stream): the HTTP layer (http.c) calls these through the route's table
 * entry and never names the file that implements them, so that a route is one row
 * and one file. NULL members are not called. Loop thread.
 */
struct gs_srv_route_hooks {
    /* An engine event for one of r's choices (r is on the active list). */
    void (*event)(struct gs_srv_req *r, const struct gs_sched_event *ev);
    /* r->waiting and every choice is in: MHD runs r again for its whole answer. */
    enum MHD_Result (*resume)(struct gs_srv_req *r);
    /* The client is gone, or the drain deadline passed: end what the engine still
     * runs for r. Returns whether anything was still awaited (a cancelled request). */
    bool (*cancel)(struct gs_srv_req *r);
    /* The 1-second tick, for each request on the active list: its deadlines (the
     * validation reports'). */
    void (*tick)(struct gs_srv_req *r, double now_ms);
    /* After each round of engine events, once MHD has run: a stream's backlog
     * verdict (gs_srv__gen_after_round). r may leave the active list. */
    void (*after_round)(struct gs_srv_req *r);
    /* The request ends (MHD's completion): frees what the route allocated for r.
     * Called for every request the route matched, answered or refused, whatever
     * its handler reached; http.c frees the rest (body, tok_job, out). */
    void (*free)(struct gs_srv_req *r);
};

/* A route: one row of routes.c's table. */
struct gs_srv_route {
    const char *method;
    const char *path;
    enum gs_srv_endpoint ep;
    bool auth; /* a key required (when keys are configured) */
    enum MHD_Result (*handler)(struct gs_srv_req *r);
    enum gs_srv_api api;              /* whose error objects its answers carry */
    const struct gs_srv_shape *shape; /* generation routes: how their answers are written */
    const struct gs_srv_route_hooks *hooks; /* NULL: the handler is the whole route */
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

/* respond.c: the response leaf (answers, error objects, event streams, suspension). */
enum MHD_Result gs_srv__respond_json(struct gs_srv_req *r, unsigned status, json_t *body);
enum MHD_Result gs_srv__respond_text(struct gs_srv_req *r, unsigned status, const char *type,
                                     const char *text, size_t len);
/* Answers kind's status with the error object of r's API (r->api). */
enum MHD_Result gs_srv__respond_error(struct gs_srv_req *r, enum gs_srv_ekind kind,
                                      const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* An allocation from r's arena failed: 413 when it was refused for the arena's cap
 * (the request asked for more than the limits allow), else 503 "out of memory". */
enum MHD_Result gs_srv__respond_nomem(struct gs_srv_req *r);
/* X-Request-Id, and Anthropic's request-id on its API's routes. */
void gs_srv__id_headers(const struct gs_srv_req *r, struct MHD_Response *resp);
/* The CORS headers of r's answer (none unless its Origin is configured). */
void gs_srv__cors_headers(const struct gs_srv_req *r, struct MHD_Response *resp);
/* An event stream's response, read from r->out by gs_srv__sse_read, with its
 * content type, no-cache, the id and CORS headers; NULL when out of memory. */
struct MHD_Response *gs_srv__sse_response(struct gs_srv_req *r);
/* The content reader of an event stream: hands MHD what r->out holds, ends the
 * stream once r->stream_end is set and out is empty (with an error when the peer is
 * gone or out failed), and suspends the connection while there is nothing to send. */
ssize_t gs_srv__sse_read(void *cls, uint64_t pos, char *buf, size_t max);
void gs_srv__suspend(struct gs_srv_req *r);
void gs_srv__resume(struct gs_srv_req *r);

/* loop.c: the loop's services to routes (MHD runs, the active list, the thread pool). */
/* Lets MHD process what changed (a resumed connection) outside its callbacks; rearms
 * MHD's timer. */
void gs_srv__kick(struct gs_srv *s);
/* srv->active: the requests the engine works for (from their submission until every
 * choice and awaited report is in). */
void gs_srv__active_add(struct gs_srv_req *r);
void gs_srv__active_remove(struct gs_srv_req *r);
/* The active request one of whose choices is engine request sched_id; NULL: none (its
 * client went away). */
struct gs_srv_req *gs_srv__active_find(struct gs_srv *s, uint64_t sched_id);
/* r's choice for engine request sched_id, or NULL. */
struct gs_srv_choice *gs_srv__choice_of(struct gs_srv_req *r, uint64_t sched_id);
/* Tokenizes r->tok_job.text with its spans and flags (gs_tok_encode_spans)
 * on the thread pool, the connection suspended; then the access handler
 * calls then(r), which takes the result (ids, n_ids, st, err) and clears
 * done. Call from a handler; returns what the handler returns. */
enum MHD_Result gs_srv__tokenize_async(struct gs_srv_req *r, unsigned flags,
                                       enum MHD_Result (*then)(struct gs_srv_req *r));
/* Frees a job's text, spans and ids (not while it runs). */
void gs_srv__tok_job_free(struct gs_srv_tok_job *j);
bool gs_srv__is_ready(struct gs_srv *s, char *why, size_t cap);
/* Whether a request naming model `name` (NULL: none named) is for this server. */
bool gs_srv__model_name_ok(const struct gs_srv *s, const char *name);
/* What the request parsers may accept from this server's limits (model.tok must be set). */
struct gs_srv_parse_limits gs_srv__parse_limits(const struct gs_srv *s);
/* The longest piece (GS_TOK_RENDER_SPECIAL) of tok's vocabulary, in bytes; 0 for NULL. */
size_t gs_srv__max_piece_bytes(const struct gs_tok *tok);
/* The cap of a request's arena (gs_srv_arena_new) under s's current limits: what
 * its body, rendered prompt, waiting stream bytes and choices' text may hold. */
size_t gs_srv__req_arena_cap(const struct gs_srv *s);

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
extern const struct gs_srv_route_hooks gs_srv__apply_template_hooks; /* frees r->gen */

/* generate.c: the generation routes (chat, completions, messages, count_tokens), and
 * the machinery that /v1/responses and /v1/embeddings share with them. */
enum MHD_Result gs_srv__gen_start(struct gs_srv_req *r);
/* The start of every generation handler: r->shape from the route, the request id in
 * the shape's spelling, readiness and the engine checked. false: answered (*ret). */
bool gs_srv__gen_begin(struct gs_srv_req *r, enum MHD_Result *ret);
/* After a body's parse into r->gen: the refusal (st, param, e), or the model check and
 * the prompt's tokens, then the submission. */
enum MHD_Result gs_srv__gen_parsed(struct gs_srv_req *r, enum gs_status st, const char *param,
                                   const struct gs_err *e);
/* Called again once the prompt is tokenized: checks it and submits. */
enum MHD_Result gs_srv__gen_continue(struct gs_srv_req *r);
/* The generation routes' hooks (struct gs_srv_route_hooks), for the routes that
 * share the machinery and add their own parts (responses.c, embed.c). */
void gs_srv__gen_event(struct gs_srv_req *r, const struct gs_sched_event *ev);
enum MHD_Result gs_srv__gen_respond(struct gs_srv_req *r);
bool gs_srv__gen_cancel(struct gs_srv_req *r);
void gs_srv__gen_tick(struct gs_srv_req *r, double now_ms);
void gs_srv__gen_free(struct gs_srv_req *r);
extern const struct gs_srv_route_hooks gs_srv__gen_hooks;
/* Streaming: once every choice ended, the closing chunks and [DONE], or the
 * "pending" usage chunk while validation reports are awaited. */
void gs_srv__gen_try_end(struct gs_srv_req *r);
/* After a change: try_end, resume the connection if it has something to
 * send or answer, leave the active list when nothing is awaited. */
void gs_srv__gen_settle(struct gs_srv_req *r);
void gs_srv__gen_after_round(struct gs_srv_req *r);

/* openai.c: OpenAI's answer shapes (chat.completion and text_completion objects and
 * chunks), and their renderers: pure functions of r's state, each returning a new
 * reference (NULL out of memory). */
extern const struct gs_srv_shape gs_srv__openai_chat_shape;
extern const struct gs_srv_shape gs_srv__openai_completion_shape;
/* The whole answer of a request whose choices have all ended. */
json_t *gs_srv__openai_answer(const struct gs_srv_req *r);
/* One stream chunk for choice c: its pending text (c->text), reasoning and logprobs, the
 * role on its first chunk (!c->first_sent), and with fin (a finish_reason) the receipt. */
json_t *gs_srv__openai_chunk(const struct gs_srv_req *r, const struct gs_srv_choice *c,
                             const char *fin);
/* A chunk's envelope (id, object, created, model, fingerprint) around choices (taken). */
json_t *gs_srv__openai_chunk_base(const struct gs_srv_req *r, json_t *choices);
/* {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details"} and,
 * validated, "validation"; timings: llama.cpp's per-request figures for choice 0. */
json_t *gs_srv__openai_usage(const struct gs_srv_req *r);
json_t *gs_srv__openai_timings(const struct gs_srv_req *r);
/* "stop", "length", "tool_calls", "error" or "abort" for how c ended. */
const char *gs_srv__openai_finish_reason(const struct gs_srv_choice *c);
/* One sampled token's logprobs entry (token, logprob, bytes, id, up to n_top
 * alternatives) from its TOKEN event. */
json_t *gs_srv__openai_logprob(const struct gs_tok *tok, const struct gs_sched_event *ev,
                               uint32_t n_top);

/* responses.c and responses_store.c: /v1/responses */
/* POST /v1/responses: previous_response_id looked up, the body rewritten into a chat,
 * then generation's path; its hooks add the stream state's free. */
enum MHD_Result gs_srv__responses_start(struct gs_srv_req *r);
extern const struct gs_srv_route_hooks gs_srv__responses_hooks;
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
/* embed.c: POST /v1/embeddings; its hooks take each input's FINISH event (its vector). */
enum MHD_Result gs_srv__embed_start(struct gs_srv_req *r);
extern const struct gs_srv_route_hooks gs_srv__embed_hooks;

/* debug.c: /debug/graph, /debug/memory, /debug/events and the memory ledger. */
enum MHD_Result gs_srv__debug_graph(struct gs_srv_req *r);
enum MHD_Result gs_srv__debug_memory(struct gs_srv_req *r);
enum MHD_Result gs_srv__debug_events(struct gs_srv_req *r);
/* After engine events: hands the trace's new records to every subscriber. */
void gs_srv__debug_drain(struct gs_srv *s);
/* The drain: every subscriber's stream ends. */
void gs_srv__debug_end_all(struct gs_srv *s);
/* GET /debug/events' hooks: a subscriber leaves the list when its request ends. */
extern const struct gs_srv_route_hooks gs_srv__debug_events_hooks;

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
    X(DRAFT_KV_POOL, "draft_kv_pool", "the draft model's KV page pool (--spec draft), every page") \
    X(SCRATCH, "scratch", "activation scratch of the compiled plans")                              \
    X(SEQUENCES, "sequence_buffers",                                                               \
      "the engine's per-sequence buffers: tokens, page tables, masks, validation logits")          \
    X(EVENTS, "event_queue",                                                                       \
      "engine events not yet taken by the loop thread, and the last batch it took")                \
    X(STREAMS, "stream_buffers", "per-request bytes queued for clients, and request bodies")       \
    X(ARENAS, "request_arenas",                                                                    \
      "chunks mapped for requests in progress: records, bodies, queued bytes, prompts, choices' "  \
      "text (stream_buffers is part of it)")

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
void gs_srv__val_attach(const struct gs_srv_req *r, json_t *body);
void gs_srv__val_token(struct gs_srv_req *r, struct gs_srv_choice *c,
                       const struct gs_sched_event *ev);
void gs_srv__val_finish(struct gs_srv_req *r, struct gs_srv_choice *c,
                        const struct gs_sched_event *ev);
void gs_srv__val_report(struct gs_srv_req *r, struct gs_srv_choice *c,
                        const struct gs_sched_event *ev);
/* Ends every awaited report with state (TIMEOUT or ERROR) and drops the
 * engine's job. */
void gs_srv__val_give_up(struct gs_srv_req *r, enum gs_srv_val_state state, const char *why);
/* The tick: when r's awaited reports are past validate_timeout_ms, gives them up as
 * timed out and returns true (the route then settles r); false otherwise. */
bool gs_srv__val_expire(struct gs_srv_req *r, double now_ms);

#endif /* GS_SERVER_DAEMON_H */
