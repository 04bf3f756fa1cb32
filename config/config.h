/*
 * config/config.h - every setting of `graphserve serve` in one validated
 * struct, built from command-line flags, GRAPHSERVE_* environment variables
 * and a JSON config file, in that order of precedence.
 *
 * One table (config/table.c) lists every option: its name, type, default,
 * range, unit, whether a reload may change it, whether it is a secret, its
 * help text and its field in struct gs_cfg. Everything else is generated from
 * that table: the flag (--kv-cache-bytes), the environment variable
 * (GRAPHSERVE_KV_CACHE_BYTES), the config-file key (kv_cache_bytes), --help,
 * the Markdown reference in the README, --print-config and validation.
 *
 * Values:
 *   bool    flag alone (--prefix-cache), --no-<name>, or --name=true|false;
 *           env and flag values: true/false, 1/0, yes/no, on/off; file: JSON true/false.
 *   int     decimal integer; file: JSON integer.
 *   bytes   integer with an optional unit, case-insensitive: B, KiB/MiB/GiB/TiB
 *           and K/M/G/T (powers of 1024), KB/MB/GB/TB (powers of 1000);
 *           "512MiB", "2G", "1.5GiB", "65536"; file: JSON integer or such a string.
 *   float   decimal number; file: JSON number.
 *   string  any text; file: JSON string.
 *   list    repeat the flag (--api-key A --api-key B); env: comma-separated;
 *           file: JSON array of strings (or one string). A source that sets a
 *           list replaces the lower sources' list; it does not append.
 *   enum    one of the listed names; file: JSON string.
 * A value out of its range, of the wrong type, an unknown flag, an unknown
 * GRAPHSERVE_* variable or an unknown file key is refused with GS_INVAL and a
 * message naming the key and its source:
 *   "--port: 70000 is out of range [0, 65535]"
 *   "env GRAPHSERVE_KV_CACHE_BYTES: '12XB' is not a size (e.g. 512MiB, 2G, 65536)"
 *   "/etc/graphserve.json:4: unknown key 'kv_cache' (did you mean 'kv_cache_bytes'?)"
 *
 * Ownership: struct gs_cfg is caller-allocated; gs_cfg_load() fills it and
 * gs_cfg_deinit() frees the strings it holds. Strings in it are owned by the
 * struct and valid until the next gs_cfg_reload() (for reloadable fields) or
 * gs_cfg_deinit().
 *
 * Threads: a gs_cfg belongs to one thread (the daemon's loop thread, which also
 * runs the SIGHUP reload). Other threads get copies of what they need (the
 * scheduler's struct gs_sched_cfg, see config/sched_cfg.h); the logger's level
 * and format are atomics updated by gs_cfg_apply_log().
 */
#ifndef GS_CONFIG_H
#define GS_CONFIG_H

#include "config/log.h"
#include "engine/backend.h"
#include "engine/base.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- value types ---------------------------------------------------------- */

/* A list of owned strings, e.g. the API keys. */
struct gs_cfg_strlist {
    size_t n;
    char **v; /* [n], each NUL-terminated */
};

/* Enum options are stored as these C enums; the value is the index of the
 * name in the option's choice list. */
/* engine/backend.h's GS_BE_LIST: "ref" (scalar reference backend, the oracle),
 * "cpu" (SIMD + threads). */
enum gs_cfg_backend {
#define GS_CFG_BACKEND_ENUM(id, ID) GS_CFG_BACKEND_##ID,
    GS_BE_LIST(GS_CFG_BACKEND_ENUM)
#undef GS_CFG_BACKEND_ENUM
};

/* The KV cache's element types, the first the default: kv-type's choices
 * (table.c), the tools' --kv-type (tools/options.c) and the engine type each
 * names (GS_TYPE_<ID>) come from this one list. */
#define GS_CFG_KV_TYPES(X)                                                                         \
    X("f16", F16)                                                                                  \
    X("f32", F32)                                                                                  \
    X("q8_0", Q8_0)

enum gs_cfg_kv_type {
#define GS_CFG_KV_ENUM(name, ID) GS_CFG_KV_##ID,
    GS_CFG_KV_TYPES(GS_CFG_KV_ENUM)
#undef GS_CFG_KV_ENUM
};

/* The engine's type for a kv-type choice. */
static inline enum gs_type gs_cfg_kv_engine_type(enum gs_cfg_kv_type t)
{
    switch (t) {
#define GS_CFG_KV_CASE(name, ID)                                                                   \
    case GS_CFG_KV_##ID:                                                                           \
        return GS_TYPE_##ID;
        GS_CFG_KV_TYPES(GS_CFG_KV_CASE)
#undef GS_CFG_KV_CASE
    }
    return GS_TYPE_F16;
}

enum gs_cfg_spec {
    GS_CFG_SPEC_OFF = 0,   /* "off": one token per sequence per step */
    GS_CFG_SPEC_NGRAM = 1, /* "ngram": prompt-lookup drafts */
    GS_CFG_SPEC_DRAFT = 2, /* "draft": --draft-model's greedy drafts */
};

/* The built-in chat formats, X(name, ID) ("plain" is the documented fallback
 * format). The one list: enum gs_cfg_chat_template, --chat-template's choices
 * (table.c) and the families the server renders (server/internal.h's
 * GS_SRV_TMPL_MAP) derive from it. */
#define GS_CFG_TEMPLATE_FAMILIES(X)                                                                \
    X("chatml", CHATML)                                                                            \
    X("llama2", LLAMA2)                                                                            \
    X("llama3", LLAMA3)                                                                            \
    X("mistral", MISTRAL)                                                                          \
    X("gemma", GEMMA)                                                                              \
    X("phi3", PHI3)                                                                                \
    X("zephyr", ZEPHYR)                                                                            \
    X("plain", PLAIN)                                                                              \
    X("gemma4", GEMMA4)

enum gs_cfg_chat_template {
    GS_CFG_TEMPLATE_AUTO = 0, /* "auto": from the GGUF's tokenizer.chat_template */
#define GS_CFG_TEMPLATE_ENUM(name, ID) GS_CFG_TEMPLATE_##ID,
    GS_CFG_TEMPLATE_FAMILIES(GS_CFG_TEMPLATE_ENUM)
#undef GS_CFG_TEMPLATE_ENUM
};

enum gs_cfg_pooling {
    GS_CFG_POOLING_AUTO = 0, /* "auto": the GGUF's <arch>.pooling_type, else mean */
    GS_CFG_POOLING_MEAN = 1, /* "mean"; this and the next equal enum gs_pooling's values */
    GS_CFG_POOLING_CLS = 2,  /* "cls": the first token's */
    GS_CFG_POOLING_LAST = 3, /* "last": the last token's */
};

/* What the command line asked for besides running. */
enum gs_cfg_action {
    GS_CFG_RUN = 0,       /* start serving */
    GS_CFG_HELP,          /* -h/--help: print gs_cfg_help() and exit 0 */
    GS_CFG_HELP_MARKDOWN, /* --help-markdown: print gs_cfg_help_markdown() and exit 0 */
    GS_CFG_PRINT_CONFIG,  /* --print-config: print gs_cfg_print() and exit 0 */
};

/* ---- the config ------------------------------------------------------------ */

/*
 * The effective configuration. Units are in the names; "0: ..." says what 0
 * means where 0 is allowed. (R) marks fields a reload may change: the daemon
 * must read those from this struct at each use, not cache them at start.
 * Ranges and defaults: see the table (gs_cfg_help) or the README reference.
 */
struct gs_cfg {
    enum gs_cfg_action action;

    /* model and engine */
    char *model;                 /* -m/--model: GGUF path (required to serve; NULL if unset) */
    enum gs_cfg_backend backend; /* default ref until the cpu backend lands */
    int64_t threads;             /* -t: backend worker threads; 0: physical cores */
    uint64_t kv_cache_bytes;     /* KV page pool; 0: derived from the model and free memory */
    enum gs_cfg_kv_type kv_type;
    int64_t page_tokens;      /* tokens per KV page */
    int64_t max_seqs;         /* running sequences per engine step */
    int64_t max_batch_tokens; /* tokens per engine step */
    int64_t max_queue;        /* waiting requests before 429 */
    int64_t n_ctx;            /* -c: longest sequence; 0: the model's context length */
    bool prefix_cache;        /* reuse KV pages of identical prompt prefixes */
    enum gs_cfg_spec spec;    /* speculative decoding's drafter */
    int64_t spec_max_draft;   /* drafted tokens per sequence per step, at most */
    int64_t spec_ngram;       /* ngram drafter: longest n-gram looked up */
    char *draft_model;        /* spec draft: the drafting GGUF's path; NULL otherwise */
    enum gs_cfg_chat_template chat_template;
    char *chat_template_file; /* a Jinja template instead of the GGUF's; NULL: the GGUF's */
    struct gs_cfg_strlist served_model_name; /* names requests may use; the first is the id */
    bool accept_any_model_name;              /* any "model" is this one, never a 404 */
    enum gs_cfg_pooling pooling;             /* /v1/embeddings: how hidden states pool */

    /* HTTP */
    char *host;   /* listen address */
    int64_t port; /* listen port; 0: any free port */
    struct gs_cfg_strlist allowed_hosts; /* (R) Host/Origin names accepted besides localhost */
    struct gs_cfg_strlist cors_origins;  /* web origins answered with CORS headers */

    /* limits */
    uint64_t max_body_bytes;   /* (R) request body cap, 413 above */
    uint64_t max_header_bytes; /* request line + headers cap */
    int64_t conn_timeout_s;    /* idle connection timeout */
    int64_t request_timeout_s; /* (R) a request must be whole by then (slowloris) */
    uint64_t max_stream_buffer_bytes; /* (R) a stream's queued bytes before it is cancelled */
    int64_t max_conns;         /* (R) open connections in total */
    int64_t max_conns_per_ip;  /* (R) open connections per client address */
    int64_t max_tokens;        /* (R) cap on a request's max_tokens */
    int64_t drain_timeout_s;   /* (R) on SIGTERM: time for in-flight requests */
    int64_t responses_store_max;       /* responses kept for previous_response_id */
    uint64_t responses_store_bytes;    /* their conversations' bytes in all */
    int64_t responses_store_max_age_s; /* how long each is kept */

    /* auth */
    struct gs_cfg_strlist api_key; /* (R) accepted Bearer keys: --api-key values, then the
                                    * lines of api_key_file; empty: no auth */
    char *api_key_file; /* (R) file with one key per line ('#' comments, blanks skipped) */
    bool metrics_public; /* (R) GET /metrics needs no key (a cluster's scraper sends none) */
    bool debug_endpoints; /* /debug/graph, /debug/memory, /debug/events are served */
    bool webui;           /* the web page at / */

    /* TLS */
    char *tls_cert;                    /* PEM certificate chain; with tls_key enables HTTPS */
    char *tls_key;                     /* PEM private key */
    char *tls_client_ca;               /* PEM CA bundle; set: clients must present a certificate */
    int64_t tls_handshake_timeout_s;   /* a handshake not done by then is dropped */
    int64_t max_tls_handshakes;        /* concurrent handshakes in progress */
    int64_t max_tls_handshakes_per_ip; /* of those, from one client address */

    /* logging */
    enum gs_log_level log_level;   /* (R) */
    enum gs_log_format log_format; /* (R) */

    /* validation */
    double validate_rate;        /* (R) fraction of requests validated against ref, 0..1 */
    int64_t validate_timeout_ms; /* (R) how long a response waits for its validation report */

    /* the config file this was read from (flag or env only; NULL if none) */
    char *config;

    /* private: how the config was built, for gs_cfg_reload() */
    struct gs_cfg__origin {
        int argc;
        char **argv;  /* owned copy of the command line */
        uint8_t *src; /* [n_opts] where each option's value came from */
    } origin_;
};

/* ---- loading ----------------------------------------------------------------- */

/*
 * Builds cfg from defaults, then the config file (--config FILE or
 * GRAPHSERVE_CONFIG), then the environment, then argv. argv[0] is the command
 * name ("serve") and is skipped; positional arguments are refused. envp is a
 * NULL-terminated "NAME=value" array; NULL means the process environment.
 * Reads api_key_file and appends its keys to api_key. Checks paths (model,
 * tls_*) are readable files and that tls_cert and tls_key come together.
 *
 * When argv asks for --help or --help-markdown, returns GS_OK at once with
 * cfg->action set (nothing else is read, so help works with a broken config).
 *
 * GS_INVAL (message names key and source) for any refused value, GS_IO for a
 * file that cannot be read (config, API keys, model, TLS), GS_FORMAT for
 * malformed JSON or a duplicate key (with its line), GS_NOMEM. On failure cfg holds nothing that
 * needs freeing, but calling gs_cfg_deinit() on it is harmless.
 */
enum gs_status gs_cfg_load(struct gs_cfg *cfg, int argc, char **argv, char **envp,
                           struct gs_err *err);

/* Validates one config file alone (`graphserve config check FILE`): the file
 * over the defaults, with no flags and no environment. */
enum gs_status gs_cfg_check_file(const char *path, struct gs_err *err);

/* Frees what cfg holds and zeroes it. Safe on a zeroed or failed cfg. */
void gs_cfg_deinit(struct gs_cfg *cfg);

/* ---- reload (SIGHUP) --------------------------------------------------------- */

#define GS_CFG_MAX_OPTS 64

/* What a reload did. Names are the options' table names ("log-level"),
 * static strings. */
struct gs_cfg_reload_report {
    size_t n_applied;
    const char *applied[GS_CFG_MAX_OPTS]; /* reloadable options whose value changed */
    size_t n_ignored;
    const char *ignored[GS_CFG_MAX_OPTS]; /* other options whose value changed: need a restart */
};

/*
 * Re-reads the environment (envp as in gs_cfg_load; NULL: the process's) and
 * the config file named at load, re-applies the original command line on top
 * (flags still win), validates everything, and then copies only the reloadable
 * fields into cfg. Changes to other options are listed in rep->ignored and
 * leave cfg untouched. When anything is refused, cfg is unchanged and the
 * error is returned as for gs_cfg_load. Call gs_cfg_apply_log() afterwards to
 * pass a new log level or format to the logger.
 */
enum gs_status gs_cfg_reload(struct gs_cfg *cfg, char **envp, struct gs_cfg_reload_report *rep,
                             struct gs_err *err);

/* Configures the logger from cfg->log_level and cfg->log_format. */
void gs_cfg_apply_log(const struct gs_cfg *cfg);

/* Logs a reload's outcome as one line: event=config_reload applied=a,b
 * ignored=c (warn level when something needs a restart, info otherwise). */
void gs_cfg_log_reload(const struct gs_cfg_reload_report *rep);

/* ---- output ---------------------------------------------------------------------- */

/* What secrets print as. Loading refuses it as a key, so that a saved
 * --print-config never authorizes "***". */
#define GS_CFG_MASK "***"

/* The effective config as a JSON object keyed like the config file (so that it
 * loads back), secrets as GS_CFG_MASK when mask. Caller json_decref()s; NULL on
 * allocation failure. Declared with void * to keep jansson out of this header;
 * the result is a json_t *. */
void *gs_cfg_to_json(const struct gs_cfg *cfg, bool mask);

/* Prints gs_cfg_to_json(cfg, true), indented, to f. Returns false on failure. */
bool gs_cfg_print(const struct gs_cfg *cfg, FILE *f);

/* Prints every option grouped, with flag, env variable, default, range and
 * help text, after the line "usage: graphserve serve [options]". */
void gs_cfg_help(FILE *f);

/* Prints the Markdown reference table (one row per option) for the README. */
void gs_cfg_help_markdown(FILE *f);

/* Names of enum values: gs_cfg_backend_name(GS_CFG_BACKEND_CPU) is "cpu",
 * gs_cfg_template_name(...) "chatml". Never NULL. */
const char *gs_cfg_backend_name(enum gs_cfg_backend b);
const char *gs_cfg_kv_type_name(enum gs_cfg_kv_type t);
const char *gs_cfg_spec_name(enum gs_cfg_spec t);
const char *gs_cfg_template_name(enum gs_cfg_chat_template t);

/* ---- the table (for tests and tools) -------------------------------------------
 * The same row type describes the tools' options (config/cli.h): there the
 * offset is into the tool's own options struct. */

enum gs_cfg_type {
    GS_CFG_BOOL,
    GS_CFG_INT,   /* int64_t field */
    GS_CFG_BYTES, /* uint64_t field */
    GS_CFG_FLOAT, /* double field */
    GS_CFG_STR,   /* char * field, NULL when unset */
    GS_CFG_LIST,  /* struct gs_cfg_strlist field */
    GS_CFG_ENUM,  /* C enum field (int-sized), value = index in choices */
};

enum gs_cfg_flag {
    GS_CFG_F_RELOAD = 1u << 0, /* a reload may change it */
    GS_CFG_F_SECRET = 1u << 1, /* masked in --print-config and errors */
    GS_CFG_F_NOFILE = 1u << 2, /* flag or env only (--config itself) */
    GS_CFG_F_PATH = 1u << 3,   /* must name a readable file when set */
    GS_CFG_F_REQUIRED = 1u << 4, /* a tool's option it cannot run without (config/cli.h) */
};

struct gs_cfg_opt {
    const char *name; /* "kv-cache-bytes": --name, GRAPHSERVE_NAME, file key name_ */
    char short_flag;  /* 'm' for -m, 0 for none */
    enum gs_cfg_type type;
    size_t offset;              /* of the field in struct gs_cfg */
    const char *group;          /* heading in --help and the reference */
    const char *def;            /* default, as text parsed like a flag value; NULL: unset */
    double min, max;            /* inclusive range for int, bytes, float */
    const char *const *choices; /* enum names, NULL-terminated */
    unsigned flags;             /* enum gs_cfg_flag */
    const char *unit;           /* for the reference: "bytes", "s", "ms", NULL */
    const char *help;           /* one sentence */
};

/* The table, in --help order. */
const struct gs_cfg_opt *gs_cfg_opts(size_t *n);

/* The option named name (table name, file key or flag without dashes), or NULL. */
const struct gs_cfg_opt *gs_cfg_opt_find(const char *name);

#endif /* GS_CONFIG_H */
