/*
 * config/table.c - the one table of graphserve's options. Adding an option is
 * one row here plus its field in struct gs_cfg; the flag, environment
 * variable, file key, --help, the README reference, --print-config,
 * validation and reload all follow from the row.
 *
 * Defaults are text parsed by the same code as a flag value, so a default is
 * checked against its own range (tests/config checks every row).
 */
#include "config/internal.h"

#include <ctype.h>
#include <string.h>

static const char *const backend_choices[] = {
#define BACKEND_CHOICE(id, ID) #id,
    GS_BE_LIST(BACKEND_CHOICE)
#undef BACKEND_CHOICE
    NULL,
};
static const char *const kv_type_choices[] = {
#define KV_TYPE_CHOICE(name, ID) name,
    GS_CFG_KV_TYPES(KV_TYPE_CHOICE)
#undef KV_TYPE_CHOICE
        NULL,
};
static const char *const spec_choices[] = {"off", "ngram", "draft", NULL}; /* enum gs_cfg_spec */
/* In the order of enum gs_cfg_chat_template: auto, then config.h's one list. */
static const char *const template_choices[] = {
    "auto",
#define TEMPLATE_CHOICE(name, ID) name,
    GS_CFG_TEMPLATE_FAMILIES(TEMPLATE_CHOICE)
#undef TEMPLATE_CHOICE
    NULL,
};
/* In the order of enum gs_cfg_pooling, whose values past auto are engine/model.h's. */
static const char *const pooling_choices[] = {"auto", "mean", "cls", "last", NULL};
static const char *const log_level_choices[] = {"debug", "info", "warn", "error", NULL};
static const char *const log_format_choices[] = {"logfmt", "json", NULL};

#define KiB 1024.0
#define MiB (1024.0 * KiB)
#define GiB (1024.0 * MiB)
#define TiB (1024.0 * GiB)

#define F(field) offsetof(struct gs_cfg, field)
#define R        GS_CFG_F_RELOAD
#define SECRET   GS_CFG_F_SECRET
#define PATH     GS_CFG_F_PATH

static const char g_model[] = "model and engine";
static const char g_http[] = "HTTP";
static const char g_limits[] = "limits";
static const char g_auth[] = "authentication";
static const char g_tls[] = "TLS";
static const char g_log[] = "logging";
static const char g_val[] = "validation";
static const char g_file[] = "config file";

/* clang-format off */
static const struct gs_cfg_opt opts[] = {
    /* name, short, type, field, group, default, min, max, choices, flags, unit, help */
    {"model", 'm', GS_CFG_STR, F(model), g_model, NULL, 0, 0, NULL, PATH, NULL,
     "GGUF model file to serve (required)."},
    {"backend", 0, GS_CFG_ENUM, F(backend), g_model, "cpu", 0, 0, backend_choices, 0, NULL,
     "Compute backend: cpu is the fast one (SIMD kernels picked at start, worker threads); "
     "ref is the scalar reference, the oracle that validation compares against."},
    {"threads", 't', GS_CFG_INT, F(threads), g_model, "0", 0, 1024, NULL, 0, "threads",
     "Backend worker threads; 0 uses one per physical core."},
    {"kv-cache-bytes", 0, GS_CFG_BYTES, F(kv_cache_bytes), g_model, "0", 0, TiB, NULL, 0,
     "bytes", "Size of the KV page pool; 0 derives it from the model and free memory."},
    {"kv-type", 0, GS_CFG_ENUM, F(kv_type), g_model, "f16", 0, 0, kv_type_choices, 0, NULL,
     "Element type of cached keys and values: q8_0 holds 1.88x the tokens of f16 in the same "
     "memory (34 bytes per 32 values) at a small accuracy cost; validation's reference keeps "
     "f32."},
    {"page-tokens", 0, GS_CFG_INT, F(page_tokens), g_model, "16", 1, 1024, NULL, 0, "tokens",
     "Tokens per KV page; a sequence wastes at most one partly filled page."},
    {"max-seqs", 0, GS_CFG_INT, F(max_seqs), g_model, "64", 1, 4096, NULL, 0, "sequences",
     "Sequences running at once in one engine step."},
    {"max-batch-tokens", 0, GS_CFG_INT, F(max_batch_tokens), g_model, "512", 1, 65536, NULL, 0,
     "tokens", "Tokens per engine step (decodes first, then prefill chunks); at least max-seqs."},
    {"max-queue", 0, GS_CFG_INT, F(max_queue), g_model, "256", 1, 1000000, NULL, 0, "requests",
     "Requests waiting for admission before new ones get 429."},
    {"n-ctx", 'c', GS_CFG_INT, F(n_ctx), g_model, "0", 0, 1048576, NULL, 0, "tokens",
     "Longest sequence, prompt plus output; 0 uses the model's context length."},
    {"prefix-cache", 0, GS_CFG_BOOL, F(prefix_cache), g_model, "true", 0, 0, NULL, 0, NULL,
     "Reuse the KV pages of identical prompt prefixes across requests."},
    {"spec", 0, GS_CFG_ENUM, F(spec), g_model, "off", 0, 0, spec_choices, 0, NULL,
     "Speculative decoding: ngram drafts each decoding sequence's next tokens from the "
     "latest earlier match of its last tokens in its own prompt and output, draft has the "
     "--draft-model propose them greedily, and the model checks them in the same step; "
     "outputs are unchanged (greedy: token for token). Helps when few streams share a step "
     "and the drafts are often right: ngram when outputs repeat their input (editing, "
     "summarising, code), draft when a much smaller model of the same vocabulary agrees "
     "with this one."},
    {"spec-max-draft", 0, GS_CFG_INT, F(spec_max_draft), g_model, "8", 1, 64, NULL, 0, "tokens",
     "Most drafted tokens per sequence per step; each sequence adapts its own draft length "
     "to how many it recently kept, down to none."},
    {"spec-ngram", 0, GS_CFG_INT, F(spec_ngram), g_model, "4", 2, 64, NULL, 0, "tokens",
     "Longest n-gram the ngram drafter looks up (it tries shorter ones down to 2)."},
    {"draft-model", 0, GS_CFG_STR, F(draft_model), g_model, NULL, 0, 0, NULL, PATH, NULL,
     "GGUF model that drafts for --spec draft (required by it, refused without it): the "
     "model's vocabulary (same tokens, ids and special tokens), run on the same backend "
     "with a KV pool of its own, as many pages as the model's, on top of kv-cache-bytes."},
    {"chat-template", 0, GS_CFG_ENUM, F(chat_template), g_model, "auto", 0, 0, template_choices,
     0, NULL, "Chat template; auto picks it from the model's tokenizer.chat_template."},
    {"chat-template-file", 0, GS_CFG_STR, F(chat_template_file), g_model, NULL, 0, 0, NULL, PATH,
     NULL,
     "A Jinja chat template to render chats with instead of the model's "
     "tokenizer.chat_template; one that does not parse stops the start with its line and "
     "column."},
    {"served-model-name", 0, GS_CFG_LIST, F(served_model_name), g_model, NULL, 0, 0, NULL, 0,
     NULL,
     "Name the model is served under; repeat for aliases. Responses carry the first; the "
     "default is the file name without .gguf."},
    {"accept-any-model-name", 0, GS_CFG_BOOL, F(accept_any_model_name), g_model, "false", 0, 0,
     NULL, 0, NULL,
     "Answer a request whatever model it names, for clients that hard-code one, instead of "
     "404 model_not_found for a name this server does not serve."},
    {"pooling", 0, GS_CFG_ENUM, F(pooling), g_model, "auto", 0, 0, pooling_choices, 0, NULL,
     "How /v1/embeddings pools a text's final hidden states: mean, cls (the first token's) or "
     "last; auto takes the GGUF's ARCH.pooling_type key when it names one of these, else mean."},

    {"host", 0, GS_CFG_STR, F(host), g_http, "127.0.0.1", 0, 0, NULL, 0, NULL,
     "Address to listen on; 0.0.0.0 or :: listens on every interface."},
    {"port", 0, GS_CFG_INT, F(port), g_http, "8080", 0, 65535, NULL, 0, NULL,
     "TCP port to listen on; 0 picks a free port."},
    {"allowed-hosts", 0, GS_CFG_LIST, F(allowed_hosts), g_http, NULL, 0, 0, NULL, R, NULL,
     "Host name accepted in Host and Origin headers besides IP literals and localhost "
     "(.example.com: every name under it; *: any); repeat for several. Names are checked when "
     "any is given, or when listening on loopback without API keys (DNS rebinding)."},
    {"cors-origins", 0, GS_CFG_LIST, F(cors_origins), g_http, NULL, 0, 0, NULL, 0, NULL,
     "Web origin (scheme://host[:port]) whose pages may call the API from a browser; * for "
     "any; repeat for several. Their preflight OPTIONS requests are answered, responses to "
     "them carry Access-Control-Allow-Origin, and their Origin passes the host check."},

    {"max-body-bytes", 0, GS_CFG_BYTES, F(max_body_bytes), g_limits, "2MiB", KiB, GiB, NULL, R,
     "bytes", "Largest request body; larger ones get 413."},
    {"max-header-bytes", 0, GS_CFG_BYTES, F(max_header_bytes), g_limits, "16KiB", KiB, MiB, NULL,
     0, "bytes", "Largest request line plus headers."},
    {"conn-timeout-s", 0, GS_CFG_INT, F(conn_timeout_s), g_limits, "30", 1, 3600, NULL, 0, "s",
     "A connection idle this long (no bytes either way) is closed."},
    {"request-timeout-s", 0, GS_CFG_INT, F(request_timeout_s), g_limits, "30", 0, 3600, NULL, R,
     "s", "A request must arrive whole (line, headers, body) this long after its connection "
     "opened or its previous answer ended, however steadily it drips; stops slowloris clients. "
     "0: no deadline."},
    {"max-stream-buffer-bytes", 0, GS_CFG_BYTES, F(max_stream_buffer_bytes), g_limits, "4MiB",
     64 * KiB, GiB, NULL, R, "bytes",
     "Stream bytes queued for a client that does not read; past it, with nothing read "
     "through two rounds of engine events, the request is cancelled (or, if its answer has "
     "ended, the rest of it dropped). A client that reads is not cut when the loop queues a "
     "burst."},
    /* Not reloadable: libmicrohttpd takes both limits once, when the daemon starts. */
    {"max-conns", 0, GS_CFG_INT, F(max_conns), g_limits, "256", 1, 65536, NULL, 0, "connections",
     "Open client connections in total."},
    {"max-conns-per-ip", 0, GS_CFG_INT, F(max_conns_per_ip), g_limits, "64", 1, 65536, NULL, 0,
     "connections", "Open client connections per client address."},
    {"max-tokens", 0, GS_CFG_INT, F(max_tokens), g_limits, "4096", 1, 1048576, NULL, R, "tokens",
     "Cap on a request's max_tokens; larger requests get 400."},
    /* Not reloadable: the store is sized once, when the daemon starts. */
    {"responses-store-max", 0, GS_CFG_INT, F(responses_store_max), g_limits, "256", 1, 1 << 20,
     NULL, 0, "responses",
     "Responses kept for previous_response_id and GET /v1/responses/{id} (those created with "
     "store: true); the oldest go first."},
    {"responses-store-bytes", 0, GS_CFG_BYTES, F(responses_store_bytes), g_limits, "16MiB", KiB,
     GiB, NULL, 0, "bytes",
     "Bytes (compact JSON of each conversation and response object) the kept responses may "
     "hold in all; the oldest go first, and a larger one is not kept."},
    {"responses-store-max-age-s", 0, GS_CFG_INT, F(responses_store_max_age_s), g_limits, "3600",
     1, 604800, NULL, 0, "s",
     "A kept response older than this is forgotten: previous_response_id or GET naming it is a "
     "404."},
    {"drain-timeout-s", 0, GS_CFG_INT, F(drain_timeout_s), g_limits, "30", 0, 3600, NULL, R, "s",
     "On SIGTERM, time given to in-flight requests before they end with finish_reason abort."},

    {"api-key", 0, GS_CFG_LIST, F(api_key), g_auth, NULL, 0, 0, NULL, R | SECRET, NULL,
     "Accepted key for /v1 and /metrics, sent as 'Authorization: Bearer KEY' or 'x-api-key: "
     "KEY'; repeat for several. None: no authentication."},
    {"api-key-file", 0, GS_CFG_STR, F(api_key_file), g_auth, NULL, 0, 0, NULL, R | PATH, NULL,
     "File of accepted keys, one per line ('#' comments and blank lines skipped)."},
    {"metrics-public", 0, GS_CFG_BOOL, F(metrics_public), g_auth, "false", 0, 0, NULL, R, NULL,
     "Serve GET /metrics without an API key, for scrapers that send none (Prometheus, a "
     "Gateway API inference endpoint picker); the rest of the API still needs one."},
    {"debug-endpoints", 0, GS_CFG_BOOL, F(debug_endpoints), g_auth, "true", 0, 0, NULL, 0, NULL,
     "Serve /debug/graph, /debug/memory and /debug/events (the engine's step trace, which the "
     "web page shows), behind the API keys when keys are set; --no-debug-endpoints makes them "
     "404, as production configs should."},
    {"webui", 0, GS_CFG_BOOL, F(webui), g_http, "true", 0, 0, NULL, 0, NULL,
     "Serve the web page (chat, engine, graph and memory views) at /; --no-webui makes / a "
     "404."},

    {"tls-cert", 0, GS_CFG_STR, F(tls_cert), g_tls, NULL, 0, 0, NULL, PATH, NULL,
     "PEM certificate chain; with tls-key, serve HTTPS only."},
    {"tls-key", 0, GS_CFG_STR, F(tls_key), g_tls, NULL, 0, 0, NULL, PATH, NULL,
     "PEM private key of tls-cert."},
    {"tls-client-ca", 0, GS_CFG_STR, F(tls_client_ca), g_tls, NULL, 0, 0, NULL, PATH, NULL,
     "PEM CA bundle; when set, clients must present a certificate it signed."},
    {"tls-handshake-timeout-s", 0, GS_CFG_INT, F(tls_handshake_timeout_s), g_tls, "10", 1, 300,
     NULL, 0, "s", "A TLS handshake not finished by then is dropped."},
    {"max-tls-handshakes", 0, GS_CFG_INT, F(max_tls_handshakes), g_tls, "64", 1, 4096, NULL, 0,
     "handshakes", "TLS handshakes in progress at once; a new connection beyond it evicts the "
     "handshake that has waited longest."},
    {"max-tls-handshakes-per-ip", 0, GS_CFG_INT, F(max_tls_handshakes_per_ip), g_tls, "8", 1,
     4096, NULL, 0, "handshakes", "TLS handshakes in progress from one client address; a new "
     "connection beyond it evicts that address's oldest handshake."},

    {"log-level", 0, GS_CFG_ENUM, F(log_level), g_log, "info", 0, 0, log_level_choices, R, NULL,
     "Least severe level written to stderr."},
    {"log-format", 0, GS_CFG_ENUM, F(log_format), g_log, "logfmt", 0, 0, log_format_choices, R,
     NULL, "Log line format: logfmt (key=value) or json (one object per line)."},

    {"validate-rate", 0, GS_CFG_FLOAT, F(validate_rate), g_val, "0", 0, 1, NULL, R, "fraction",
     "Fraction of requests re-evaluated on ref and compared, besides those that ask."},
    {"validate-timeout-ms", 0, GS_CFG_INT, F(validate_timeout_ms), g_val, "10000", 0, 600000,
     NULL, R, "ms", "How long a response waits for its validation report; 0 never waits."},

    {"config", 0, GS_CFG_STR, F(config), g_file, NULL, 0, 0, NULL, PATH | GS_CFG_F_NOFILE, NULL,
     "JSON config file; flags and GRAPHSERVE_* variables override its keys."},
};
/* clang-format on */

_Static_assert(GS_ARRAY_LEN(opts) <= GS_CFG_MAX_OPTS, "raise GS_CFG_MAX_OPTS");
_Static_assert(sizeof(enum gs_cfg_backend) == sizeof(int), "enum fields are int-sized");
_Static_assert(sizeof(enum gs_cfg_kv_type) == sizeof(int), "enum fields are int-sized");
_Static_assert(sizeof(enum gs_cfg_spec) == sizeof(int), "enum fields are int-sized");
_Static_assert(sizeof(enum gs_cfg_chat_template) == sizeof(int), "enum fields are int-sized");
_Static_assert(sizeof(enum gs_cfg_pooling) == sizeof(int), "enum fields are int-sized");
_Static_assert(sizeof(enum gs_log_level) == sizeof(int), "enum fields are int-sized");
_Static_assert(sizeof(enum gs_log_format) == sizeof(int), "enum fields are int-sized");

const struct gs_cfg_opt *gs_cfg_opts(size_t *n)
{
    *n = GS_ARRAY_LEN(opts);
    return opts;
}

size_t gs_cfg__index(const struct gs_cfg_opt *o)
{
    return (size_t)(o - opts);
}

/* Compares a spelling with the table name, treating '-' and '_' alike when
 * loose; the file key must use '_', the flag '-'. */
static bool name_eq(const char *table, const char *s, char sep)
{
    for (; *table && *s; table++, s++) {
        char want = *table == '-' ? sep : *table;
        if (*s != want)
            return false;
    }
    return !*table && !*s;
}

const struct gs_cfg_opt *gs_cfg_opt_find(const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < GS_ARRAY_LEN(opts); i++)
        if (name_eq(opts[i].name, name, '-') || name_eq(opts[i].name, name, '_'))
            return &opts[i];
    return NULL;
}

const char *gs_cfg__env_name(const struct gs_cfg_opt *o, char *buf, size_t cap)
{
    size_t n = (size_t)snprintf(buf, cap, "GRAPHSERVE_%s", o->name);
    for (size_t i = 0; i < n && i < cap; i++)
        buf[i] = buf[i] == '-' ? '_' : (char)toupper((unsigned char)buf[i]);
    return buf;
}

const char *gs_cfg__file_key(const struct gs_cfg_opt *o, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", o->name);
    for (char *p = buf; *p; p++)
        if (*p == '-')
            *p = '_';
    return buf;
}

/* Levenshtein distance, capped: names are short. */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return 99;
    size_t prev[64], cur[64];
    for (size_t j = 0; j <= lb; j++)
        prev[j] = j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            size_t del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = GS_MIN(sub, GS_MIN(del, ins));
        }
        memcpy(prev, cur, sizeof(prev));
    }
    return prev[lb];
}

const struct gs_cfg_opt *gs_cfg__suggest(const char *name, int style)
{
    const struct gs_cfg_opt *best = NULL;
    size_t best_d = 4;
    char key[64];
    for (size_t i = 0; i < GS_ARRAY_LEN(opts); i++) {
        const char *cand = style ? gs_cfg__file_key(&opts[i], key, sizeof(key)) : opts[i].name;
        size_t d = edit_distance(name, cand);
        /* A prefix of a longer name ("kv-cache") is a likely truncation. */
        if (strlen(name) >= 3 && !strncmp(cand, name, strlen(name)))
            d = GS_MIN(d, 1);
        if (d < best_d) {
            best_d = d;
            best = &opts[i];
        }
    }
    return best;
}

const char *gs_cfg__choice(const struct gs_cfg_opt *o, int i)
{
    if (!o->choices || i < 0)
        return "?";
    for (int k = 0; o->choices[k]; k++)
        if (k == i)
            return o->choices[k];
    return "?";
}

const char *gs_cfg_backend_name(enum gs_cfg_backend b)
{
    return gs_cfg__choice(gs_cfg_opt_find("backend"), (int)b);
}

const char *gs_cfg_spec_name(enum gs_cfg_spec t)
{
    return gs_cfg__choice(gs_cfg_opt_find("spec"), (int)t);
}

const char *gs_cfg_kv_type_name(enum gs_cfg_kv_type t)
{
    return gs_cfg__choice(gs_cfg_opt_find("kv-type"), (int)t);
}

const char *gs_cfg_template_name(enum gs_cfg_chat_template t)
{
    return gs_cfg__choice(gs_cfg_opt_find("chat-template"), (int)t);
}
