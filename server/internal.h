/*
 * server/internal.h - the pieces of the daemon, shared between the server/ sources and
 * their tests: growable buffers, the error table, request parsing, chat
 * templates, stop strings, SSE framing, auth and metrics. No other module
 * includes this header.
 *
 * Everything here is plain, single-threaded code on the loop thread, with no
 * I/O, so that each piece is unit-tested without a socket.
 */
#ifndef GS_SERVER_INTERNAL_H
#define GS_SERVER_INTERNAL_H

#include "config/config.h"
#include "server/server.h"

#include <jansson.h>

/* ---- a request's arena (arena.c) ------------------------------------------------------ */

/*
 * Memory that lives exactly as long as one HTTP request: its record, URL,
 * body, rendered prompt, choices and their text buffers, and its stream and
 * answer bytes (not its JSON tree: the parsed fields stay on the heap).
 * Allocations bump through chunks mapped from the kernel (64 KiB each; one
 * larger than 16 KiB gets a chunk of its own, grown in place by mremap), never
 * the C heap, so gs_srv_arena_free hands every page back to the kernel at once,
 * whatever was allocated from the heap meanwhile. Nothing is freed alone.
 *
 * Bounded: the chunks mapped, the first included, never exceed cap_bytes; an
 * allocation past it returns NULL and sets gs_srv_arena_refused, so that the
 * caller can tell a request that asked too much from a machine out of memory.
 * Every pointer is GS_SRV_ARENA_ALIGN-aligned and stays valid until
 * gs_srv_arena_free. Under AddressSanitizer the bytes not handed out, and
 * those a reallocation moved away from, are poisoned; unmapped chunks fault.
 *
 * One thread at a time (the loop thread for a request's arena); no locks.
 */
#define GS_SRV_ARENA_ALIGN 16

struct gs_srv_arena;

/* A new arena with its first chunk; NULL when out of memory or when cap_bytes
 * is below one chunk (64 KiB). The arena's own record lives in that chunk. */
struct gs_srv_arena *gs_srv_arena_new(size_t cap_bytes);
/* Unmaps every chunk, the arena's record included. NULL: nothing. */
void gs_srv_arena_free(struct gs_srv_arena *a);
/* size bytes, uninitialised; NULL past the cap or out of memory. */
void *gs_srv_arena_alloc(struct gs_srv_arena *a, size_t size);
/* n * size zeroed bytes, overflow-checked (an overflow counts as refused). */
void *gs_srv_arena_calloc(struct gs_srv_arena *a, size_t n, size_t size);
char *gs_srv_arena_strdup(struct gs_srv_arena *a, const char *s);
/* p (from a, old_size bytes, or NULL) grown to size bytes, its contents kept:
 * in place when p is the latest small allocation or has a chunk of its own,
 * else a copy (the old bytes are not reused). Never shrinks. NULL: p is
 * unchanged and still valid. */
void *gs_srv_arena_realloc(struct gs_srv_arena *a, void *p, size_t old_size, size_t size);
/* Whether p points into memory a has handed out. */
bool gs_srv_arena_owns(const struct gs_srv_arena *a, const void *p);
/* Whether an allocation was refused because it would pass the cap. */
bool gs_srv_arena_refused(const struct gs_srv_arena *a);
size_t gs_srv_arena_cap_bytes(const struct gs_srv_arena *a);
/* Bytes mapped for a now (a multiple of the page size). */
size_t gs_srv_arena_mapped_bytes(const struct gs_srv_arena *a);

/* ---- growable byte buffer --------------------------------------------------------------- */

/* A byte buffer that remembers an allocation failure: appends after one are
 * no-ops and failed stays set, so that a caller checks once at the end. p is
 * always NUL-terminated when non-NULL. Free with gs_srv_buf_free.
 *
 * With arena set (before the first append) the bytes come from that arena:
 * gs_srv_buf_free then only forgets them (the arena releases them) and keeps
 * arena, so the buffer may be filled again. */
struct gs_srv_buf {
    char *p;
    size_t len, cap;
    bool failed;
    struct gs_srv_arena *arena; /* borrowed; NULL: the heap (gs_malloc) */
};

void gs_srv_buf_add(struct gs_srv_buf *b, const void *data, size_t n);
void gs_srv_buf_adds(struct gs_srv_buf *b, const char *s);
void gs_srv_buf_addf(struct gs_srv_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Drops the first n bytes. */
void gs_srv_buf_consume(struct gs_srv_buf *b, size_t n);
void gs_srv_buf_free(struct gs_srv_buf *b);
/* Appends j dumped with jansson's flags, without a copy of it on the heap. False when
 * j is NULL or cannot be dumped (nothing of it is appended) or b failed. */
bool gs_srv_buf_add_json(struct gs_srv_buf *b, const json_t *j, size_t flags);

/* ---- errors: one table from error kind to HTTP status and error types ------------------ */

/* X(name, http status, OpenAI error type, OpenAI error code or NULL, Anthropic error type).
 * Anthropic's types are those of its Messages API (2026-12): it has no 503, and a server
 * that is loading or draining is what its "overloaded_error" (retry shortly) means. */
#define GS_SRV_ERR_MAP(X)                                                                          \
    X(BAD_REQUEST, 400, "invalid_request_error", NULL, "invalid_request_error")                    \
    X(CONTEXT_LENGTH, 400, "invalid_request_error", "context_length_exceeded",                     \
      "invalid_request_error")                                                                     \
    X(UNAUTHORIZED, 401, "authentication_error", "invalid_api_key", "authentication_error")        \
    X(NOT_FOUND, 404, "not_found_error", "not_found", "not_found_error")                           \
    X(MODEL_NOT_FOUND, 404, "invalid_request_error", "model_not_found", "not_found_error")         \
    X(RESPONSE_NOT_FOUND, 404, "invalid_request_error", "previous_response_not_found",             \
      "not_found_error")                                                                           \
    X(FORBIDDEN, 403, "permission_error", "forbidden", "permission_error")                         \
    X(METHOD, 405, "invalid_request_error", "method_not_allowed", "invalid_request_error")         \
    X(TOO_LARGE, 413, "invalid_request_error", "request_too_large", "request_too_large")           \
    X(MEDIA_TYPE, 415, "invalid_request_error", "unsupported_media_type", "invalid_request_error") \
    X(BUSY, 429, "rate_limit_error", "rate_limit_exceeded", "rate_limit_error")                    \
    X(UNAVAILABLE, 503, "unavailable_error", "service_unavailable", "overloaded_error")            \
    X(SLOW_READER, 400, "invalid_request_error", "stream_buffer_full", "invalid_request_error")    \
    X(NUMERIC, 500, "server_error", "numerical_error", "api_error")                                \
    X(INTERNAL, 500, "server_error", "internal_error", "api_error")

enum gs_srv_ekind {
#define GS_SRV_EKIND_ENUM(name, http, type, code, atype) GS_SRV_E_##name,
    GS_SRV_ERR_MAP(GS_SRV_EKIND_ENUM)
#undef GS_SRV_EKIND_ENUM
        GS_SRV_E_COUNT
};

unsigned gs_srv_err_http(enum gs_srv_ekind k);
const char *gs_srv_err_type(enum gs_srv_ekind k);
const char *gs_srv_err_code(enum gs_srv_ekind k); /* NULL when the kind has none */

/* The kind an engine or parser status maps to (GS_INVAL -> BAD_REQUEST,
 * GS_BUSY -> BUSY, GS_NOTFOUND -> NOT_FOUND, ...). */
enum gs_srv_ekind gs_srv_err_from_status(enum gs_status st);

/* {"error":{"message","type","param","code"}}; param may be NULL. Returns a
 * new reference or NULL on allocation failure. */
json_t *gs_srv_err_json(enum gs_srv_ekind k, const char *message, const char *param);
/* Anthropic's error object, {"type":"error","error":{"type","message"},"request_id"}
 * (request_id omitted when NULL). A new reference or NULL on allocation failure. */
json_t *gs_srv_err_json_anthropic(enum gs_srv_ekind k, const char *message, const char *request_id);

/* The API a route speaks: which error objects and which answer shapes it writes. */
enum gs_srv_api {
    GS_SRV_API_OPENAI,    /* OpenAI's (and llama.cpp's) objects: every route but the next */
    GS_SRV_API_ANTHROPIC, /* Anthropic's Messages API: /v1/messages, /v1/messages/count_tokens */
};

/* ---- /v1/embeddings bodies (embed.c) ------------------------------------------------------ */

/* A parsed /v1/embeddings body. texts (when the input was text) are tokenized
 * into ids before anything is queued. */
struct gs_srv_embed_req {
    char *model;              /* NULL when absent; owned */
    bool base64;              /* encoding_format "base64" */
    uint32_t n_inputs;        /* 1..2048 */
    struct gs_srv_buf *texts; /* [n_inputs] the texts; NULL when ids were given */
    int32_t **ids;            /* [n_inputs] token ids, each gs_malloc'd; given or tokenized */
    uint32_t *n_ids;          /* [n_inputs] */
    uint32_t n_tokenized;     /* texts tokenized so far */
};

/* Parses an embeddings body: input (a string, strings, token ids below
 * n_vocab, or lists of them; none empty), model, encoding_format ("float",
 * "base64"), dimensions (only n_embd), user. Any other field, or a bad one, is
 * GS_INVAL with its name in param. *out is freed with gs_srv_embed_req_free. */
enum gs_status gs_srv_embed_parse(const char *body, size_t len, uint32_t n_vocab, uint32_t n_embd,
                                  struct gs_srv_embed_req **out, char *param, size_t param_cap,
                                  struct gs_err *err);
void gs_srv_embed_req_free(struct gs_srv_embed_req *e);

/* ---- request heads: framing, names and body type, before any route ----------------------- */

struct gs_srv_header {
    const char *name, *value;
};

/* Which names a request may carry in Host and Origin. */
struct gs_srv_head_policy {
    /* false: any Host or Origin is accepted. true: only IP literals,
     * "localhost", names under ".localhost" and allowed_hosts. */
    bool check_host;
    /* Extra names: exact (case-insensitive), ".example.com" for every name
     * under it, "*" for any. Borrowed. */
    const char *const *allowed_hosts;
    size_t n_allowed_hosts;
    /* Web origins accepted as a whole ("https://app.example"; "*": any) besides those
     * whose host is allowed: the CORS origins. Borrowed. */
    const char *const *origins;
    size_t n_origins;
};

/* The configured origin (exact, case-insensitive, or "*") that origin matches, or NULL. */
const char *gs_srv_origin_listed(const char *origin, const struct gs_srv_head_policy *p);

struct gs_srv_head_verdict {
    enum gs_srv_ekind kind; /* BAD_REQUEST (framing, Host syntax), FORBIDDEN, MEDIA_TYPE */
    char param[32];
    char msg[256];
};

/*
 * Checks a request head: exactly one Content-Length or one Transfer-Encoding
 * (chunked) or neither; one Host, required for HTTP/1.1, of the form
 * host[:port] and allowed by p; an Origin, when p checks names, whose host is
 * allowed; for POST a Content-Type, if any, of application/json (or curl -d's
 * application/x-www-form-urlencoded). Returns true when the request may go
 * on; false with *v filled. A refused request's connection must be closed:
 * after a framing error the rest of the stream cannot be trusted.
 */
bool gs_srv_head_check(const char *method, const char *version, const struct gs_srv_header *h,
                       size_t n_h, const struct gs_srv_head_policy *p,
                       struct gs_srv_head_verdict *v);

/* Whether a host name (lower-case, no port or brackets) passes p's names. */
bool gs_srv_host_name_allowed(const char *name, const struct gs_srv_head_policy *p);

/* ---- a request parser's refusals (refuse.c) ------------------------------------------------ */

/* Where a parser reports what it refused: the field's name for the error
 * object's "param" (param_cap bytes) and the message in err. */
struct gs_srv_refusal {
    char *param;
    size_t param_cap;
    struct gs_err *err;
};

/* Records param and the message; returns GS_INVAL. */
enum gs_status gs_srv_refuse(const struct gs_srv_refusal *c, const char *param, const char *fmt,
                             ...) __attribute__((format(printf, 3, 4)));
/* param "" and GS_NOMEM. */
enum gs_status gs_srv_refuse_nomem(const struct gs_srv_refusal *c);
/* The keys of object o must be among keys[n]; else a 400 for where naming
 * "where.key": a field is read and honoured, or refused, never ignored. */
enum gs_status gs_srv_only_keys(const struct gs_srv_refusal *c, json_t *o, const char *where,
                                const char *const *keys, size_t n);
/* OpenAI's names of functions and json_schema: 1 to 64 of a-z A-Z 0-9 _ -. */
bool gs_srv_name_ok(const char *n);

/* Field readers that refuse in the parsers' words. A field absent or null leaves *out
 * unchanged and *present (when not NULL) false. get_num: a finite number in [lo, hi];
 * get_int: an integer (or an integral real) in [lo, hi]; get_bool: a boolean. */
enum gs_status gs_srv_get_num(const struct gs_srv_refusal *c, json_t *root, const char *key,
                              double lo, double hi, double *out, bool *present);
enum gs_status gs_srv_get_int(const struct gs_srv_refusal *c, json_t *root, const char *key,
                              int64_t lo, int64_t hi, int64_t *out, bool *present);
enum gs_status gs_srv_get_bool(const struct gs_srv_refusal *c, json_t *root, const char *key,
                               bool *out);
struct gs_srv_gen;
struct gs_srv_parse_limits;
/* Stop strings from field key into g->stop: OpenAI's "stop" (lone: a string or a list)
 * or Anthropic's "stop_sequences" (a list only), bounded by lim's max_stop and
 * max_stop_bytes; empty strings are dropped. */
enum gs_status gs_srv_get_stop(const struct gs_srv_refusal *c, json_t *root, const char *key,
                               bool lone, const struct gs_srv_parse_limits *lim,
                               struct gs_srv_gen *g);

/*
 * Rewrites a refusal's param or message s (cap bytes) from chat's field names into another
 * API's, in place: each "messages[k]" becomes origin[k] (a JSON array of strings: where
 * chat message k came from, e.g. "input[3]") when origin has it, and each map[i][0] met
 * becomes map[i][1], the first that matches at a place winning (list longer names first).
 */
void gs_srv_respell(char *s, size_t cap, const char *const (*map)[2], size_t n_map,
                    const json_t *origin);

/* ---- a generation request, parsed and validated ----------------------------------------- */

struct gs_srv_msg {
    char *role;    /* "system", "user", "assistant", "tool"; "developer" becomes "system" */
    char *content; /* text parts joined */
};

/* ---- tool calling: formats (tool_format.c) ----------------------------------------------- */

/*
 * How a model family writes tool calls: one row of tool_format.c's table. A
 * row says what starts the calls (open; also the text after which an "auto"
 * request's grammar applies), whether that text is the start of the JSON
 * itself, what follows each call, what separates calls, whether the calls
 * are one JSON object each, one list, or a list inside {"tool_calls": ...},
 * and under which key the arguments go. The canonical spellings (sep and the
 * spaces after colons) are what the grammar of "required" produces; the
 * parser also takes any JSON whitespace.
 */
enum gs_srv_tool_body {
    GS_SRV_TOOL_BODY_OBJECT,    /* each call one object after its own open marker */
    GS_SRV_TOOL_BODY_ARRAY,     /* one list of call objects after one open marker */
    GS_SRV_TOOL_BODY_WRAPPED,   /* {"tool_calls": [call objects]} */
    GS_SRV_TOOL_BODY_NAME_ARGS, /* open, the function's name, "[ARGS]", the arguments object */
};

struct gs_srv_tool_format {
    const char *name;  /* "hermes", "llama3", "mistral", "mistral_nemo", "generic" */
    const char *open;  /* "<tool_call>", "{\"name\"", "[TOOL_CALLS]", "{\"tool_calls\"" */
    bool open_in_body; /* open is the first bytes of the call's JSON */
    const char *close; /* after each call's JSON: "</tool_call>"; "" for none */
    const char *sep;   /* between calls, as the grammar writes it */
    enum gs_srv_tool_body body;
    const char *args_key; /* "arguments" or "parameters" */
    bool short_ids;       /* call ids of 9 alphanumerics (Mistral's template checks them) */
    bool inject_prompt;   /* the template does not teach the format: a system message does */
};

/* The format of a template text (its markers); the generic row when none is
 * recognised or tmpl is NULL. Never NULL. */
const struct gs_srv_tool_format *gs_srv_tool_format_detect(const char *tmpl);
/* The row named name, or NULL. */
const struct gs_srv_tool_format *gs_srv_tool_format_by_name(const char *name);

/* What the parser checks requests against. */
struct gs_srv_parse_limits {
    uint32_t n_vocab;
    uint32_t max_tokens;
    uint32_t max_n;
    uint32_t max_stop;
    uint32_t max_stop_bytes;
    /* Chats render through a Jinja template: the messages are kept as the
     * client sent them, content may be null (an assistant's tool calls), and
     * tools and chat_template_kwargs are read. */
    bool jinja;
    /* With jinja: how the template's model writes tool calls (never NULL then). */
    const struct gs_srv_tool_format *tool_format;
};

enum gs_srv_tool_choice {
    GS_SRV_TOOL_CHOICE_NONE,     /* "none", or no tools: the answer is text */
    GS_SRV_TOOL_CHOICE_AUTO,     /* text, or calls once the format's open marker is written */
    GS_SRV_TOOL_CHOICE_REQUIRED, /* only calls (one, or with parallel_tool_calls several) */
    GS_SRV_TOOL_CHOICE_NAMED,    /* only calls of tools[tool_named] */
};

/* One function of a request's "tools". */
struct gs_srv_tool {
    char *name; /* [a-zA-Z0-9_-]{1,64}, gs_malloc'ed */
    char *gbnf; /* its parameters as GBNF (start rule root), gs_malloc'ed */
    size_t gbnf_len;
};

struct gs_srv_gen {
    bool chat;               /* /v1/chat/completions */
    char *model;             /* NULL when absent */
    struct gs_srv_msg *msgs; /* chat: n_msgs >= 1 */
    size_t n_msgs;
    char *prompt; /* completions with a text prompt: prompt_len bytes */
    size_t prompt_len;
    int32_t *prompt_ids; /* completions with token ids, each < n_vocab */
    size_t n_prompt_ids;
    uint32_t max_tokens; /* 0: not given */
    uint32_t n;          /* choices, >= 1 */
    bool stream;
    bool include_usage; /* stream_options.include_usage */
    bool logprobs;
    int32_t top_logprobs;
    bool echo; /* completions: prepend the prompt to the text */
    /* Completions with a text prompt: control tokens spelled in it ("</s>")
     * are recognised ("parse_special": true); by default it is plain text. */
    bool parse_special;
    bool ignore_eos;
    bool has_seed;
    struct gs_sample_params sp; /* sp.bias points at bias */
    struct gs_sample_bias *bias;
    char **stop; /* n_stop non-empty strings */
    size_t n_stop;
    char ignored[256];         /* unknown top-level fields, comma-separated, truncated */
    bool validation;           /* "validation": true or an object */
    uint32_t validation_top_k; /* "validation": {"top_logprobs": k} */
    /* With gs_srv_parse_limits.jinja: references into the request's JSON
     * (held, released by gs_srv_gen_free); NULL when absent. */
    json_t *messages_json;
    json_t *tools_json;
    json_t *template_kwargs; /* "chat_template_kwargs": an object */
    /* "response_format" (json_object, json_schema) or "grammar", compiled;
     * NULL: free text. Each choice's sequence takes its own reference. With
     * tools, the grammar of the calls instead (tools.c). */
    struct gs_grammar *grammar;
    /* With grammar: the text after which it applies (tool_choice "auto": the
     * format's open marker); NULL: from the first token. Points into a
     * static table row. */
    const char *grammar_trigger;
    /* "tools", "tool_choice", "parallel_tool_calls" (tools.c). */
    struct gs_srv_tool *tools;
    size_t n_tools;
    enum gs_srv_tool_choice tool_choice;
    size_t tool_named;                            /* NAMED: its index in tools */
    bool parallel_tool_calls;                     /* default true, as OpenAI's */
    const struct gs_srv_tool_format *tool_format; /* with tools: the server's */
    /* "reasoning_format": "none" keeps a thinking block in content; by default ("auto")
     * it goes to reasoning_content when the template writes such blocks. */
    bool reasoning_inline;
    /* Anthropic's Messages API (gs_srv_messages_parse): */
    enum gs_srv_api api;
    bool count_only; /* /v1/messages/count_tokens: the prompt is counted, nothing generated */
    /* A chat's final assistant message, which the answer continues: not in msgs (nor in
     * messages_json); its text follows the rendered prompt as plain text. NULL: none. */
    char *prefill;
    /* OpenAI's Responses API (gs_srv_responses_parse): "store": true keeps the answer
     * for a later request's previous_response_id (responses_store.c). */
    bool store;
    json_t *resp_conv; /* the conversation to keep: prior and input as chat messages */
    /* The request's settings as the response object repeats them (instructions, tools,
     * tool_choice, text, temperature, ...); NULL on other routes. */
    json_t *resp_echo;
};

/*
 * Parses a request body into *out (zeroed first; free with gs_srv_gen_free
 * whatever the result). On failure returns GS_INVAL (or GS_NOMEM) with a
 * message and writes the offending field's name to param (param_cap bytes,
 * "" when the body as a whole is bad).
 */
enum gs_status gs_srv_gen_parse(const char *body, size_t len, bool chat,
                                const struct gs_srv_parse_limits *lim, struct gs_srv_gen *out,
                                char *param, size_t param_cap, struct gs_err *err);
void gs_srv_gen_free(struct gs_srv_gen *g);

/*
 * Parses an Anthropic Messages API body (POST /v1/messages, or with count_only its
 * count_tokens sibling) into *out as a chat: "system" (a string or text blocks) becomes
 * the first message, a final assistant message the prefill, and max_tokens is required
 * (not read by count_only). A field graphserve does not implement (tools, thinking,
 * image blocks, ...) is refused, named in param, never ignored. Errors, ownership and
 * freeing as gs_srv_gen_parse.
 */
enum gs_status gs_srv_messages_parse(const char *body, size_t len, bool count_only,
                                     const struct gs_srv_parse_limits *lim, struct gs_srv_gen *out,
                                     char *param, size_t param_cap, struct gs_err *err);

/* ---- tool calling: the request side (tools.c) ------------------------------------------- */

/*
 * Reads "tools", "tool_choice" and "parallel_tool_calls" of a chat body into
 * g, after its messages: every tool validated (type "function", a name of
 * [a-zA-Z0-9_-]{1,64}, unique; "parameters" an object schema the JSON Schema
 * converter accepts; a refusal names tools[i].function.parameters and the
 * keyword), the messages' tool_calls and tool_call_id checked, and, when the
 * answer may hold calls, the grammar of the calls compiled into g->grammar
 * (with g->grammar_trigger for "auto"). Tools need a Jinja template
 * (lim->jinja); otherwise, and on /v1/completions, they are a 400. Also
 * rewrites g->messages_json for the template: arguments strings of earlier
 * calls as JSON objects, and the generic format's instructions as a system
 * message. Errors as gs_srv_gen_parse.
 */
enum gs_status gs_srv_tools_parse(json_t *root, const struct gs_srv_parse_limits *lim,
                                  struct gs_srv_gen *g, char *param, size_t param_cap,
                                  struct gs_err *err);
void gs_srv_tools_free(struct gs_srv_gen *g);

/*
 * GBNF whose sentences are tool calls in format f: exactly one call, or with
 * parallel one or more, of tools[only] (only < n) or of any tool (only >= n),
 * each call's arguments a sentence of that tool's parameters grammar (its
 * rules renamed t<i>-... so that several coexist). gs_malloc'ed, start rule
 * root; GS_NOMEM or GS_INVAL (a grammar over the converter's limits).
 */
enum gs_status gs_srv_tools_grammar(const struct gs_srv_tool_format *f,
                                    const struct gs_srv_tool *tools, size_t n, size_t only,
                                    bool parallel, char **gbnf, size_t *len, struct gs_err *err);

/*
 * Parses an OpenAI Responses API body (POST /v1/responses) into *out as a chat: "input"
 * (a string, or message, function_call and function_call_output items) and
 * "instructions" become the messages, "text.format" the response_format and the flat
 * function tools chat's nested ones, so that everything after the parse (templates,
 * tool calls, structured output) is the chat route's path. prior, when not NULL, is a
 * stored conversation (a JSON array of chat messages, previous_response_id's) that comes
 * before input. A field graphserve does not implement is refused, named in param, never
 * ignored. previous_response_id is not read here: the caller looks it up first (it
 * decides the 404). Errors and ownership as gs_srv_gen_parse.
 */
enum gs_status gs_srv_responses_parse(const char *body, size_t len, const json_t *prior,
                                      const struct gs_srv_parse_limits *lim, struct gs_srv_gen *out,
                                      char *param, size_t param_cap, struct gs_err *err);

/* ---- tool calling: reading calls out of the text (tool_format.c) ------------------------- */

/*
 * A streaming reader of one choice's text in format f: text outside calls
 * passes through as content, each complete call becomes an entry of calls
 * ({"name": string, "arguments": JSON text as a string}), and nothing of the
 * calls' markup reaches the content. Text is fed in pieces cut anywhere; the
 * same text cut anywhere gives the same content and calls. Text that could
 * still be the start of a marker is held back. A call that is not well formed
 * (bad JSON, an unknown function, arguments that are not an object, a
 * missing close marker) is given back as content, with the reason in
 * malformed, and the reader passes everything after it as content.
 */
struct gs_srv_tool_reader {
    const struct gs_srv_tool_format *f;
    const struct gs_srv_tool *tools; /* borrowed */
    size_t n_tools;
    int state;              /* tool_format.c's enum */
    struct gs_srv_buf held; /* text not yet given out: a marker prefix, or the call so far */
    size_t scan;            /* bytes of held already scanned (JSON state below) */
    size_t json_start;      /* offset of the call's JSON in held */
    uint32_t depth;         /* JSON nesting at scan */
    bool in_string, escaped;
    bool after_call;     /* only whitespace and separators since the last call */
    bool off;            /* a malformed call was met: all the rest is content */
    size_t n_calls;      /* calls found so far */
    char malformed[160]; /* why the last malformed call was refused; "" if none */
    /*
     * Live calls (set by the caller after init; formats whose calls are one object each or
     * NAME_ARGS): for text a grammar wrote from its first token (tool_choice "required" or
     * a named function), so that a call cannot turn out malformed except by being cut
     * off. A call is then announced as soon as its name is read, {"name": ...} in calls,
     * and its arguments follow as they come, {"arguments": fragment}; their concatenation
     * is the arguments' text as written. A call cut off stays a call, with the arguments
     * it has. Other formats, and readers not live, append whole calls
     * {"name", "arguments"} once complete.
     */
    bool live;
    bool live_on;     /* a live call's name was announced */
    size_t args_at;   /* its arguments' first byte in held */
    size_t args_sent; /* bytes of held given out as fragments */
    size_t args_scan; /* the arguments' own scanner: position, nesting, strings */
    uint32_t args_depth;
    bool args_string, args_escaped, args_done;
};

void gs_srv_tool_reader_init(struct gs_srv_tool_reader *t, const struct gs_srv_tool_format *f,
                             const struct gs_srv_tool *tools, size_t n_tools);
/* Feeds text: content to content, calls appended to calls (a JSON array).
 * Returns false on allocation failure. */
bool gs_srv_tool_reader_feed(struct gs_srv_tool_reader *t, const char *text, size_t len,
                             struct gs_srv_buf *content, json_t *calls);
/* The end of the text: what is held is content (an unfinished call is
 * malformed), or dropped when it is only the whitespace after a call. */
bool gs_srv_tool_reader_finish(struct gs_srv_tool_reader *t, struct gs_srv_buf *content,
                               json_t *calls);
void gs_srv_tool_reader_deinit(struct gs_srv_tool_reader *t);

/* ---- reasoning: a thinking block out of the answer (reasoning.c) -------------------------- */

/*
 * Splits a choice's text into the thinking block a model writes first (<think> ... </think>)
 * and the answer after it, in pieces cut anywhere. Only a block at the start of the answer
 * (after whitespace) counts, or one the prompt opened (the template ended the prompt with
 * <think>: open). Text that may still become a tag is held back; the whitespace after
 * </think> is dropped.
 */
struct gs_srv_think {
    int state;              /* reasoning.c's enum */
    struct gs_srv_buf held; /* text not yet given out */
};

void gs_srv_think_init(struct gs_srv_think *t, bool open);
/* Feeds text: the block's text to reasoning, the rest to content. false on allocation
 * failure. */
bool gs_srv_think_feed(struct gs_srv_think *t, const char *text, size_t len,
                       struct gs_srv_buf *reasoning, struct gs_srv_buf *content);
/* The end of the text: what is held goes where it was headed (an unclosed block is all
 * reasoning). */
bool gs_srv_think_finish(struct gs_srv_think *t, struct gs_srv_buf *reasoning,
                         struct gs_srv_buf *content);
void gs_srv_think_deinit(struct gs_srv_think *t);
/* Whether a template writes thinking blocks (its text has <think> and </think>). */
bool gs_srv_think_detect(const char *tmpl);
/* Whether a rendered prompt ends inside an opened block ("<think>" and whitespace). */
bool gs_srv_think_prompt_opens(const char *prompt, size_t len);

/* ---- /tokenize and /detokenize bodies (tokenize_body.c) --------------------------------- */

/* {"content": string, "add_special": bool, "parse_special": bool, "with_pieces": bool};
 * only content is required. */
struct gs_srv_tokenize_req {
    struct gs_srv_buf content; /* the text, content.len bytes (may hold NUL bytes) */
    unsigned flags;            /* enum gs_tok_encode_flags; PARSE_SPECIAL unless refused */
    bool with_pieces;          /* answer {"id","piece"} pairs instead of bare ids */
};

/*
 * Parses a /tokenize body into *out (zeroed first; free with
 * gs_srv_tokenize_req_free whatever the result). Errors as gs_srv_gen_parse:
 * GS_INVAL (or GS_NOMEM) with a message, and the refused field in param.
 */
enum gs_status gs_srv_tokenize_parse(const char *body, size_t len, struct gs_srv_tokenize_req *out,
                                     char *param, size_t param_cap, struct gs_err *err);
void gs_srv_tokenize_req_free(struct gs_srv_tokenize_req *t);

/*
 * Parses a /detokenize body, {"tokens": [id, ...]}, each id in [0, n_vocab).
 * On GS_OK *ids is a gs_malloc'ed array of *n_ids ids (never NULL, even for
 * none) that the caller frees with gs_free; on failure *ids is NULL and the
 * errors are as gs_srv_gen_parse's.
 */
enum gs_status gs_srv_detokenize_parse(const char *body, size_t len, uint32_t n_vocab,
                                       int32_t **ids, size_t *n_ids, char *param, size_t param_cap,
                                       struct gs_err *err);

/* ---- chat templates --------------------------------------------------------------------- */

/* X(name, enum suffix): the families of config/config.h's one list, which
 * --chat-template offers (gs_srv_tmpl_detect has its own order). */
#define GS_SRV_TMPL_MAP(X) GS_CFG_TEMPLATE_FAMILIES(X)

enum gs_srv_tmpl {
#define GS_SRV_TMPL_ENUM(name, id) GS_SRV_TMPL_##id,
    GS_SRV_TMPL_MAP(GS_SRV_TMPL_ENUM)
#undef GS_SRV_TMPL_ENUM
        GS_SRV_TMPL_COUNT
};

const char *gs_srv_tmpl_name(enum gs_srv_tmpl t);
/* GS_OK and *out for a known name, GS_NOTFOUND otherwise. */
enum gs_status gs_srv_tmpl_from_name(const char *name, enum gs_srv_tmpl *out);
/* The family whose markers appear in a GGUF tokenizer.chat_template text;
 * GS_SRV_TMPL_PLAIN for NULL or text we do not recognise. */
enum gs_srv_tmpl gs_srv_tmpl_detect(const char *jinja);

/* Where a rendered prompt may spell control tokens: byte ranges of the
 * text, ascending and disjoint, as gs_tok_encode_spans takes them. Like
 * gs_srv_buf, it remembers an allocation failure in failed. Free with
 * gs_srv_spans_free. */
struct gs_srv_spans {
    struct gs_tok_span *v;
    size_t n, cap;
    bool failed;
};

void gs_srv_spans_free(struct gs_srv_spans *s);

/*
 * Renders messages into the prompt text with the generation prompt for the
 * assistant appended. The BOS token is not written (the tokenizer adds it).
 * Appends to out; when spans is not NULL, also appends the ranges of out->p
 * that the template itself wrote (turn markers, role names, separators), so
 * that the text is tokenized with gs_tok_encode_spans: control tokens are
 * recognised in the template's text and never in message contents, which
 * are the client's.
 */
void gs_srv_tmpl_render_spans(enum gs_srv_tmpl t, const struct gs_srv_msg *msgs, size_t n,
                              struct gs_srv_buf *out, struct gs_srv_spans *spans);
/* The text alone: gs_srv_tmpl_render_spans with spans NULL. */
void gs_srv_tmpl_render(enum gs_srv_tmpl t, const struct gs_srv_msg *msgs, size_t n,
                        struct gs_srv_buf *out);

/* ---- stop strings across token boundaries ----------------------------------------------- */

/*
 * Holds back the text that could still turn into a stop string, so that a
 * client never sees part of one. Text is fed in pieces of complete UTF-8;
 * what may be shown is appended to the caller's buffer.
 */
struct gs_srv_stop {
    char *const *stops; /* borrowed */
    size_t n_stops;
    struct gs_srv_buf held; /* text not yet released */
    bool hit;               /* a stop string was found; feeding is over */
    size_t hit_index;       /* with hit: which of stops it was */
};

void gs_srv_stop_init(struct gs_srv_stop *st, char *const *stops, size_t n_stops);
/* Feeds text; appends releasable text to out. Returns true when a stop string
 * completed: the text before it has been released and the rest dropped. */
bool gs_srv_stop_feed(struct gs_srv_stop *st, const char *text, size_t len, struct gs_srv_buf *out);
/* End of generation without a stop string: releases what was held. */
void gs_srv_stop_flush(struct gs_srv_stop *st, struct gs_srv_buf *out);
void gs_srv_stop_deinit(struct gs_srv_stop *st);

/* ---- SSE framing ------------------------------------------------------------------------ */

/* Appends "data: <compact json>\n\n". Returns false if j cannot be dumped. */
bool gs_srv_sse_json(struct gs_srv_buf *out, const json_t *j);
/* Appends "event: <name>\ndata: <compact json>\n\n" (Anthropic's named events). */
bool gs_srv_sse_event(struct gs_srv_buf *out, const char *name, const json_t *j);
void gs_srv_sse_done(struct gs_srv_buf *out);                      /* "data: [DONE]\n\n" */
void gs_srv_sse_comment(struct gs_srv_buf *out, const char *text); /* ": text\n\n" */

/* ---- auth -------------------------------------------------------------------------------- */

/* Compares the Authorization header value against every key in constant
 * time (SHA-256 of both, compared without early exit). true with no keys. */
bool gs_srv_auth_check(const char *authorization, const uint8_t (*key_digests)[32], size_t n_keys);
/* The same for a bare key (the x-api-key header's value). */
bool gs_srv_auth_check_key(const char *key, const uint8_t (*key_digests)[32], size_t n_keys);

/* ---- metrics ----------------------------------------------------------------------------- */

#define GS_SRV_HIST_BUCKETS 16

struct gs_srv_hist {
    uint64_t counts[GS_SRV_HIST_BUCKETS + 1]; /* per bucket; last is +Inf */
    uint64_t count;
    double sum;
};

/* Endpoints named in request counters (X(label)); anything else is "other". */
#define GS_SRV_ENDPOINT_MAP(X)                                                                     \
    X(CHAT, "/v1/chat/completions")                                                                \
    X(COMPLETIONS, "/v1/completions")                                                              \
    X(MODELS, "/v1/models")                                                                        \
    X(HEALTH, "/health")                                                                           \
    X(READY, "/ready")                                                                             \
    X(METRICS, "/metrics")                                                                         \
    X(TOKENIZE, "/tokenize")                                                                       \
    X(DETOKENIZE, "/detokenize")                                                                   \
    X(APPLY_TEMPLATE, "/apply-template")                                                           \
    X(MESSAGES, "/v1/messages")                                                                    \
    X(COUNT_TOKENS, "/v1/messages/count_tokens")                                                   \
    X(RESPONSES, "/v1/responses")                                                                  \
    X(EMBEDDINGS, "/v1/embeddings")                                                                \
    X(DEBUG, "/debug")                                                                             \
    X(WEBUI, "/")                                                                                  \
    X(OTHER, "other")

enum gs_srv_endpoint {
#define GS_SRV_EP_ENUM(id, label) GS_SRV_EP_##id,
    GS_SRV_ENDPOINT_MAP(GS_SRV_EP_ENUM)
#undef GS_SRV_EP_ENUM
        GS_SRV_EP_COUNT
};

#define GS_SRV_METRICS_STATUSES 12 /* distinct HTTP statuses tracked per endpoint */

struct gs_srv_metrics {
    struct {
        unsigned status;
        uint64_t n;
    } requests[GS_SRV_EP_COUNT][GS_SRV_METRICS_STATUSES];
    struct gs_srv_hist ttft, itl, e2e, queue; /* seconds */
    uint64_t prompt_tokens, generated_tokens, cached_prompt_tokens;
    uint64_t cancelled; /* client went away before the end */
    uint64_t rejected_busy;
    uint64_t conns_timed_out; /* cut: the request did not arrive whole in request-timeout-s */
    uint64_t conns_evicted;   /* cut: the oldest idle connection, to make room for a new one */
    uint64_t refused_heads;   /* requests refused by gs_srv_head_check */
    uint64_t slow_readers;    /* streams cancelled: their client let max-stream-buffer fill */
    uint32_t in_flight;
};

void gs_srv_hist_observe(struct gs_srv_hist *h, double seconds);
void gs_srv_metrics_request(struct gs_srv_metrics *m, enum gs_srv_endpoint ep, unsigned status);
/* Prometheus text format 0.0.4; st (engine stats) may be NULL; kv_type (the served
 * cache's element type, NULL: not told) labels the cache's info gauge. */
void gs_srv_metrics_render(const struct gs_srv_metrics *m, const struct gs_sched_stats *st,
                           const char *kv_type, bool ready, struct gs_srv_buf *out);

/* ---- small JSON helpers ------------------------------------------------------------------ */

/* A JSON string of bytes p[0..n) with invalid UTF-8 replaced by U+FFFD. */
json_t *gs_srv_json_text(const char *p, size_t n);
/* The byte values as a JSON array of integers (OpenAI logprobs "bytes"). */
json_t *gs_srv_json_bytes(const char *p, size_t n);

#endif /* GS_SERVER_INTERNAL_H */
