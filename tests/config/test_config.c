/*
 * tests/config/test_config.c - the config struct as a user builds it: flags
 * over GRAPHSERVE_* variables over the JSON file, every refusal naming its key
 * and source, masking, reload, and the generated help covering the table.
 */
#define _GNU_SOURCE
#include "config/config.h"
#include "config/sched_cfg.h"
#include "tests/common/testutil.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers --------------------------------------------------------------------- */

static char *write_file(const char *dir, const char *name, const char *text)
{
    char *path;
    cr_assert(asprintf(&path, "%s/%s", dir, name) > 0);
    FILE *f = fopen(path, "w");
    cr_assert(f, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
    return path;
}

/* Loads from a NULL-terminated list of arguments (after "serve") and one of
 * "NAME=value" variables. */
static enum gs_status load(struct gs_cfg *cfg, const char *const *args, const char *const *env,
                           struct gs_err *err)
{
    char *argv[64] = {"serve"};
    int argc = 1;
    for (; args && args[argc - 1]; argc++)
        argv[argc] = (char *)args[argc - 1];
    argv[argc] = NULL;
    char *envp[64] = {NULL};
    for (int i = 0; env && env[i]; i++)
        envp[i] = (char *)env[i];
    return gs_cfg_load(cfg, argc, argv, envp, err);
}

static char *env_kv(const char *name, const char *value)
{
    char *s;
    cr_assert(asprintf(&s, "%s=%s", name, value) > 0);
    return s;
}

/* ---- defaults and the table ------------------------------------------------------- */

/* Every row's default parses and lies in its own range, and the defaults are
 * the safe ones the README promises. */
Test(config_defaults, every_default_is_valid_and_safe)
{
    struct gs_cfg cfg;
    struct gs_err err;
    cr_assert_eq(load(&cfg, NULL, NULL, &err), GS_OK, "%s", err.msg);
    cr_assert_str_eq(cfg.host, "127.0.0.1");
    cr_assert_eq(cfg.port, 8080);
    cr_assert_eq(cfg.backend, GS_CFG_BACKEND_CPU);
    cr_assert_eq(cfg.kv_type, GS_CFG_KV_F16);
    cr_assert_eq(cfg.api_key.n, 0);
    cr_assert_eq(cfg.max_body_bytes, 2u << 20);
    cr_assert_eq(cfg.max_header_bytes, 16u << 10);
    cr_assert_eq(cfg.log_level, GS_LOG_INFO);
    cr_assert_eq(cfg.log_format, GS_LOG_LOGFMT);
    cr_assert(cfg.prefix_cache);
    cr_assert_eq(cfg.validate_rate, 0.0);
    cr_assert_null(cfg.model);
    cr_assert_null(cfg.tls_cert);
    cr_assert_eq(cfg.action, GS_CFG_RUN);

    size_t n;
    const struct gs_cfg_opt *opts = gs_cfg_opts(&n);
    for (size_t i = 0; i < n; i++) {
        const struct gs_cfg_opt *o = &opts[i];
        cr_assert(o->help && strlen(o->help) > 10, "%s: help text", o->name);
        cr_assert(o->group, "%s: group", o->name);
        if (o->type == GS_CFG_INT || o->type == GS_CFG_BYTES || o->type == GS_CFG_FLOAT)
            cr_assert(o->min <= o->max, "%s: range", o->name);
        if (o->type == GS_CFG_ENUM)
            cr_assert(o->def && o->choices && o->choices[0], "%s: choices", o->name);
        cr_assert_eq(gs_cfg_opt_find(o->name), o, "%s: find by name", o->name);
    }
    gs_cfg_deinit(&cfg);
}

/* Names, variables, keys and short flags are unique across the table. */
Test(config_table, spellings_are_unique)
{
    size_t n;
    const struct gs_cfg_opt *opts = gs_cfg_opts(&n);
    cr_assert(n <= GS_CFG_MAX_OPTS);
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++) {
            cr_assert_str_neq(opts[i].name, opts[j].name);
            cr_assert(!opts[i].short_flag || opts[i].short_flag != opts[j].short_flag,
                      "-%c used twice", opts[i].short_flag);
        }
}

/* --backend's choices come from engine/backend.h's GS_BE_LIST: each is a
 * backend the engine opens by that name, in enum gs_cfg_backend's order, and
 * gs_cfg_backend_name gives it back. */
Test(config_table, backend_choices_are_the_engine_backends)
{
    const struct gs_cfg_opt *opt = gs_cfg_opt_find("backend");
    cr_assert(opt && opt->choices);
    int n = 0;
    for (const char *const *c = opt->choices; *c; c++, n++) {
        const struct gs_be_ops *ops = gs_be_find(*c);
        cr_assert(ops, "--backend %s is not a backend of the engine", *c);
        cr_expect_str_eq(ops->name, *c);
        cr_expect_str_eq(gs_cfg_backend_name((enum gs_cfg_backend)n), *c);
    }
    cr_expect_eq(n, 2);
    cr_expect_str_eq(gs_cfg_backend_name(GS_CFG_BACKEND_REF), "ref");
    cr_expect_str_eq(gs_cfg_backend_name(GS_CFG_BACKEND_CPU), "cpu");
}

/* ---- precedence ---------------------------------------------------------------------- */

/* For one option of each type: the file's value, overridden by the variable,
 * overridden by the flag. */
Test(config_precedence, flag_over_env_over_file)
{
    const char *dir = gs_test_tmpdir();
    char *path = write_file(dir, "c.json",
                            "{\n  \"port\": 1000,\n  \"kv_cache_bytes\": \"1GiB\",\n"
                            "  \"log_level\": \"warn\",\n  \"validate_rate\": 0.25,\n"
                            "  \"api_key\": [\"file-a\", \"file-b\"],\n  \"prefix_cache\": false,\n"
                            "  \"host\": \"10.0.0.1\"\n}\n");
    char *cfgv = env_kv("GRAPHSERVE_CONFIG", path);
    struct gs_cfg cfg;
    struct gs_err err;

    /* file only */
    const char *env1[] = {cfgv, NULL};
    cr_assert_eq(load(&cfg, NULL, env1, &err), GS_OK, "%s", err.msg);
    cr_assert_eq(cfg.port, 1000);
    cr_assert_eq(cfg.kv_cache_bytes, 1ull << 30);
    cr_assert_eq(cfg.log_level, GS_LOG_WARN);
    cr_assert_eq(cfg.validate_rate, 0.25);
    cr_assert_eq(cfg.api_key.n, 2);
    cr_assert_str_eq(cfg.api_key.v[1], "file-b");
    cr_assert(!cfg.prefix_cache);
    cr_assert_str_eq(cfg.host, "10.0.0.1");
    cr_assert_str_eq(cfg.config, path);
    gs_cfg_deinit(&cfg);

    /* env over file; a list from env replaces the file's list */
    const char *env2[] = {cfgv,
                          "GRAPHSERVE_PORT=2000",
                          "GRAPHSERVE_KV_CACHE_BYTES=512MiB",
                          "GRAPHSERVE_LOG_LEVEL=error",
                          "GRAPHSERVE_VALIDATE_RATE=0.5",
                          "GRAPHSERVE_API_KEY=env-a, env-b",
                          "GRAPHSERVE_PREFIX_CACHE=on",
                          "PATH=/usr/bin",
                          NULL};
    cr_assert_eq(load(&cfg, NULL, env2, &err), GS_OK, "%s", err.msg);
    cr_assert_eq(cfg.port, 2000);
    cr_assert_eq(cfg.kv_cache_bytes, 512ull << 20);
    cr_assert_eq(cfg.log_level, GS_LOG_ERROR);
    cr_assert_eq(cfg.validate_rate, 0.5);
    cr_assert_eq(cfg.api_key.n, 2);
    cr_assert_str_eq(cfg.api_key.v[0], "env-a");
    cr_assert_str_eq(cfg.api_key.v[1], "env-b");
    cr_assert(cfg.prefix_cache);
    cr_assert_str_eq(cfg.host, "10.0.0.1", "the file still supplies what env leaves alone");
    gs_cfg_deinit(&cfg);

    /* flags over both; repeated --api-key collects */
    const char *args[] = {"--port",      "3000",      "--kv-cache-bytes=2G",
                          "--log-level", "debug",     "--validate-rate",
                          "1",           "--api-key", "flag-a",
                          "--api-key",   "flag-b",    "--no-prefix-cache",
                          NULL};
    cr_assert_eq(load(&cfg, args, env2, &err), GS_OK, "%s", err.msg);
    cr_assert_eq(cfg.port, 3000);
    cr_assert_eq(cfg.kv_cache_bytes, 2ull << 30);
    cr_assert_eq(cfg.log_level, GS_LOG_DEBUG);
    cr_assert_eq(cfg.validate_rate, 1.0);
    cr_assert_eq(cfg.api_key.n, 2);
    cr_assert_str_eq(cfg.api_key.v[0], "flag-a");
    cr_assert_str_eq(cfg.api_key.v[1], "flag-b");
    cr_assert(!cfg.prefix_cache);
    gs_cfg_deinit(&cfg);
    free(cfgv);
    free(path);
}

/* --config on the command line beats GRAPHSERVE_CONFIG. */
Test(config_precedence, config_flag_over_config_env)
{
    const char *dir = gs_test_tmpdir();
    char *a = write_file(dir, "a.json", "{\"port\": 1111}");
    char *b = write_file(dir, "b.json", "{\"port\": 2222}");
    char *ev = env_kv("GRAPHSERVE_CONFIG", a);
    const char *env[] = {ev, NULL};
    const char *args[] = {"--config", b, NULL};
    struct gs_cfg cfg;
    struct gs_err err;
    cr_assert_eq(load(&cfg, args, env, &err), GS_OK, "%s", err.msg);
    cr_assert_eq(cfg.port, 2222);
    gs_cfg_deinit(&cfg);
    free(a);
    free(b);
    free(ev);
}

/* Every spelling of a boolean. */
Test(config_values, bool_spellings)
{
    struct {
        const char *arg;
        const char *env;
        bool want;
    } cases[] = {
        {"--prefix-cache", NULL, true},
        {"--no-prefix-cache", NULL, false},
        {"--prefix-cache=false", NULL, false},
        {"--prefix-cache=yes", NULL, true},
        {NULL, "GRAPHSERVE_PREFIX_CACHE=off", false},
        {NULL, "GRAPHSERVE_PREFIX_CACHE=0", false},
        {NULL, "GRAPHSERVE_PREFIX_CACHE=TRUE", true},
    };
    for (size_t i = 0; i < GS_ARRAY_LEN(cases); i++) {
        const char *args[] = {cases[i].arg, NULL};
        const char *env[] = {cases[i].env, NULL};
        struct gs_cfg cfg;
        struct gs_err err;
        cr_assert_eq(load(&cfg, cases[i].arg ? args : NULL, env, &err), GS_OK, "%s", err.msg);
        cr_assert_eq(cfg.prefix_cache, cases[i].want, "case %zu", i);
        gs_cfg_deinit(&cfg);
    }
}

/* Sizes with units, as documented; the bare letters are binary. */
Test(config_values, byte_units)
{
    struct {
        const char *text;
        uint64_t want;
    } ok[] = {
        {"65536", 65536},
        {"64k", 64ull << 10},
        {"64KiB", 64ull << 10},
        {"64KB", 64000},
        {"512MiB", 512ull << 20},
        {"512mib", 512ull << 20},
        {"2G", 2ull << 30},
        {"2GB", 2000000000ull},
        {"1.5GiB", 3ull << 29},
        {"1 TiB", 1ull << 40},
        {"100b", 100},
        {"0", 0},
    };
    for (size_t i = 0; i < GS_ARRAY_LEN(ok); i++) {
        const char *args[] = {"--kv-cache-bytes", ok[i].text, NULL};
        struct gs_cfg cfg;
        struct gs_err err;
        cr_assert_eq(load(&cfg, args, NULL, &err), GS_OK, "%s: %s", ok[i].text, err.msg);
        cr_assert_eq(cfg.kv_cache_bytes, ok[i].want, "%s", ok[i].text);
        gs_cfg_deinit(&cfg);
    }
    const char *bad[] = {"12XB", "",    "-1",    "1.",   ".5G",
                         "G",    "1e9", "2 G B", "0x10", "99999999999999999999"};
    for (size_t i = 0; i < GS_ARRAY_LEN(bad); i++) {
        const char *args[] = {"--kv-cache-bytes", bad[i], NULL};
        struct gs_cfg cfg;
        struct gs_err err;
        cr_assert_eq(load(&cfg, args, NULL, &err), GS_INVAL, "'%s' accepted", bad[i]);
        cr_assert(strstr(err.msg, "--kv-cache-bytes"), "%s", err.msg);
    }
}

/* ---- refusals ------------------------------------------------------------------------ */

struct refusal {
    const char *name;
    const char *args[6];
    const char *env[3];
    const char *file; /* config file text, or NULL */
    enum gs_status want;
    const char *msg[3]; /* substrings of the message; "$F" is the file path */
};

static const struct refusal refusals[] = {
    {"unknown flag",
     {"--kv-cache", "1G"},
     {NULL},
     NULL,
     GS_INVAL,
     {"--kv-cache: unknown option", "did you mean --kv-cache-bytes"}},
    {"unknown short flag", {"-z"}, {NULL}, NULL, GS_INVAL, {"-z: unknown option"}},
    {"positional argument",
     {"model.gguf"},
     {NULL},
     NULL,
     GS_INVAL,
     {"unexpected argument 'model.gguf'"}},
    {"missing value", {"--port"}, {NULL}, NULL, GS_INVAL, {"--port: expects a value"}},
    {"--no- on a non-bool", {"--no-port"}, {NULL}, NULL, GS_INVAL, {"--no-port: unknown option"}},
    {"unknown variable",
     {NULL},
     {"GRAPHSERVE_PROT=80"},
     NULL,
     GS_INVAL,
     {"env GRAPHSERVE_PROT: unknown setting", "did you mean GRAPHSERVE_PORT"}},
    {"unknown file key",
     {NULL},
     {NULL},
     "{\n  \"port\": 80,\n  \"kv_cache\": \"1G\"\n}",
     GS_INVAL,
     {"$F:3: kv_cache: unknown key", "did you mean 'kv_cache_bytes'"}},
    {"dashed file key",
     {NULL},
     {NULL},
     "{\"max-seqs\": 4}",
     GS_INVAL,
     {"$F:1: max-seqs: unknown key", "'max_seqs'"}},
    {"config key in file",
     {NULL},
     {NULL},
     "{\"config\": \"x.json\"}",
     GS_INVAL,
     {"config: can only be set by a flag or variable"}},
    {"flag wrong type",
     {"--port", "eighty"},
     {NULL},
     NULL,
     GS_INVAL,
     {"--port: 'eighty' is not an integer"}},
    {"env wrong type",
     {NULL},
     {"GRAPHSERVE_VALIDATE_RATE=half"},
     NULL,
     GS_INVAL,
     {"env GRAPHSERVE_VALIDATE_RATE: 'half' is not a number"}},
    {"file wrong type",
     {NULL},
     {NULL},
     "{\n\"host\": \"::\",\n\"port\": \"8080\"}",
     GS_INVAL,
     {"$F:3: port: expects an integer, got a string"}},
    {"file fraction for int",
     {NULL},
     {NULL},
     "{\"max_seqs\": 4.5}",
     GS_INVAL,
     {"max_seqs: expects an integer, got a number with a fraction"}},
    {"file bool as string",
     {NULL},
     {NULL},
     "{\"prefix_cache\": \"yes\"}",
     GS_INVAL,
     {"prefix_cache: expects true or false"}},
    {"file list of numbers",
     {NULL},
     {NULL},
     "{\"api_key\": [\"a\", 7]}",
     GS_INVAL,
     {"api_key: element 1 expects a string"}},
    {"flag out of range",
     {"--port", "70000"},
     {NULL},
     NULL,
     GS_INVAL,
     {"--port: 70000 is out of range [0, 65535]"}},
    {"env out of range",
     {NULL},
     {"GRAPHSERVE_VALIDATE_RATE=1.5"},
     NULL,
     GS_INVAL,
     {"env GRAPHSERVE_VALIDATE_RATE: 1.5 is out of range [0, 1]"}},
    {"file out of range",
     {NULL},
     {NULL},
     "{\"max_body_bytes\": \"2GiB\"}",
     GS_INVAL,
     {"max_body_bytes: 2GiB is out of range [1KiB, 1GiB]"}},
    {"negative size in file",
     {NULL},
     {NULL},
     "{\"kv_cache_bytes\": -5}",
     GS_INVAL,
     {"kv_cache_bytes: -5 is out of range"}},
    {"bad unit",
     {"--max-body-bytes", "12XB"},
     {NULL},
     NULL,
     GS_INVAL,
     {"--max-body-bytes: '12XB' is not a size"}},
    {"bad enum",
     {"--kv-type", "q8"},
     {NULL},
     NULL,
     GS_INVAL,
     {"--kv-type: 'q8' is not one of f16, f32, q8_0"}},
    {"bad bool",
     {"--prefix-cache=maybe"},
     {NULL},
     NULL,
     GS_INVAL,
     {"--prefix-cache: 'maybe' is not a boolean"}},
    {"missing config file",
     {"--config", "/nonexistent/graphserve.json"},
     {NULL},
     NULL,
     GS_IO,
     {"--config: cannot read '/nonexistent/graphserve.json'", "No such file"}},
    {"malformed JSON",
     {NULL},
     {NULL},
     "{\n  \"port\": 80,\n  \"host\": \"x\"\n  \"n_ctx\": 5\n}",
     GS_FORMAT,
     {"$F:4:", "malformed JSON"}},
    {"duplicate key",
     {NULL},
     {NULL},
     "{\"port\": 80,\n\"port\": 81}",
     GS_FORMAT,
     {"$F:2:", "duplicate"}},
    {"top level array", {NULL}, {NULL}, "[1, 2]", GS_INVAL, {"expects a JSON object"}},
    {"missing model",
     {"-m", "/nonexistent/m.gguf"},
     {NULL},
     NULL,
     GS_IO,
     {"--model: cannot read '/nonexistent/m.gguf'"}},
    {"model is a directory",
     {NULL},
     {"GRAPHSERVE_MODEL=/"},
     NULL,
     GS_IO,
     {"env GRAPHSERVE_MODEL: cannot read '/': not a regular file"}},
    {"missing key file",
     {NULL},
     {NULL},
     "{\"api_key_file\": \"/nonexistent/keys\"}",
     GS_IO,
     {"$F:1: api_key_file: cannot read '/nonexistent/keys'"}},
    {"empty key file",
     {"--api-key-file", "$D/empty"},
     {NULL},
     NULL,
     GS_INVAL,
     {"--api-key-file", "holds no keys"}},
    {"tls cert without key",
     {"--tls-cert", "$D/empty"},
     {NULL},
     NULL,
     GS_INVAL,
     {"tls-cert and tls-key must be set together (tls-key is unset)"}},
    {"client ca without cert",
     {"--tls-client-ca", "$D/empty"},
     {NULL},
     NULL,
     GS_INVAL,
     {"tls-client-ca needs tls-cert"}},
    {"batch smaller than seqs",
     {"--max-seqs", "64", "--max-batch-tokens", "32"},
     {NULL},
     NULL,
     GS_INVAL,
     {"max-batch-tokens (32) must be at least max-seqs (64)"}},
    {"masked key loaded back",
     {NULL},
     {NULL},
     "{\"api_key\": [\"***\"]}",
     GS_INVAL,
     {"$F:1: api_key: '***' is the mask --print-config writes"}},
    {"empty api key", {"--api-key", ""}, {NULL}, NULL, GS_INVAL, {"--api-key: empty value"}},
    {"empty host", {"--host="}, {NULL}, NULL, GS_INVAL, {"host: must not be empty"}},
};

static void subst(char *out, size_t cap, const char *s, const char *file, const char *dir)
{
    size_t n = 0;
    for (; *s && n + 1 < cap; s++) {
        const char *rep = s[0] == '$' && s[1] == 'F'   ? file
                          : s[0] == '$' && s[1] == 'D' ? dir
                                                       : NULL;
        if (rep) {
            n += (size_t)snprintf(out + n, cap - n, "%s", rep);
            s++;
        } else {
            out[n++] = *s;
        }
    }
    out[GS_MIN(n, cap - 1)] = 0;
}

/* Every refusal: the status, and a message naming the key and its source. */
Test(config_refuse, every_case_names_key_and_source)
{
    const char *dir = gs_test_tmpdir();
    free(write_file(dir, "empty", "# no keys here\n\n"));
    for (size_t i = 0; i < GS_ARRAY_LEN(refusals); i++) {
        const struct refusal *r = &refusals[i];
        char *file = r->file ? write_file(dir, "r.json", r->file) : NULL;
        char args[6][512];
        const char *argp[8] = {NULL};
        size_t na = 0;
        if (file) {
            argp[na++] = "--config";
            argp[na++] = file;
        }
        for (size_t k = 0; k < 6 && r->args[k]; k++) {
            subst(args[k], sizeof(args[k]), r->args[k], file ? file : "", dir);
            argp[na++] = args[k];
        }
        struct gs_cfg cfg;
        struct gs_err err;
        enum gs_status st = load(&cfg, argp, r->env, &err);
        cr_assert_eq(st, r->want, "%s: got %s (%s)", r->name, gs_status_str(st), err.msg);
        cr_assert_eq(err.code, r->want, "%s", r->name);
        for (size_t k = 0; k < 3 && r->msg[k]; k++) {
            char want[512];
            subst(want, sizeof(want), r->msg[k], file ? file : "", dir);
            cr_assert(strstr(err.msg, want), "%s: message '%s' lacks '%s'", r->name, err.msg, want);
        }
        /* A failed load leaves nothing to free; deinit is still harmless. */
        gs_cfg_deinit(&cfg);
        free(file);
    }
}

/* An error about a secret never echoes it. */
Test(config_refuse, secret_values_are_not_echoed)
{
    const char *env[] = {"GRAPHSERVE_API_KEY=good-one,sk-bad secret", NULL};
    struct gs_cfg cfg;
    struct gs_err err;
    cr_assert_eq(load(&cfg, NULL, env, &err), GS_INVAL);
    cr_assert(strstr(err.msg, "env GRAPHSERVE_API_KEY"), "%s", err.msg);
    cr_assert(!strstr(err.msg, "sk-bad"), "%s", err.msg);
}

/* --help works even when the config file and environment are broken. */
Test(config_actions, help_ignores_a_broken_config)
{
    const char *args[] = {"--config", "/nonexistent.json", "--help", NULL};
    const char *env[] = {"GRAPHSERVE_BOGUS=1", NULL};
    struct gs_cfg cfg;
    struct gs_err err;
    cr_assert_eq(load(&cfg, args, env, &err), GS_OK, "%s", err.msg);
    cr_assert_eq(cfg.action, GS_CFG_HELP);
    gs_cfg_deinit(&cfg);
    const char *md[] = {"--help-markdown", NULL};
    cr_assert_eq(load(&cfg, md, NULL, &err), GS_OK);
    cr_assert_eq(cfg.action, GS_CFG_HELP_MARKDOWN);
    gs_cfg_deinit(&cfg);
    const char *pc[] = {"--print-config", "--port", "9", NULL};
    cr_assert_eq(load(&cfg, pc, NULL, &err), GS_OK);
    cr_assert_eq(cfg.action, GS_CFG_PRINT_CONFIG);
    cr_assert_eq(cfg.port, 9);
    gs_cfg_deinit(&cfg);
}

/* ---- API keys and masking --------------------------------------------------------- */

/* The key file's keys follow the flag's; comments, blanks and CRLF are handled. */
Test(config_keys, key_file_appends_keys)
{
    const char *dir = gs_test_tmpdir();
    char *kf = write_file(dir, "keys", "# ops team\r\nkey-one\r\n\n  key-two  \nkey-one\n");
    const char *args[] = {"--api-key", "flag-key", "--api-key-file", kf, NULL};
    struct gs_cfg cfg;
    struct gs_err err;
    cr_assert_eq(load(&cfg, args, NULL, &err), GS_OK, "%s", err.msg);
    cr_assert_eq(cfg.api_key.n, 3);
    cr_assert_str_eq(cfg.api_key.v[0], "flag-key");
    cr_assert_str_eq(cfg.api_key.v[1], "key-one");
    cr_assert_str_eq(cfg.api_key.v[2], "key-two");
    gs_cfg_deinit(&cfg);

    char *bad = write_file(dir, "bad", "ok-key\nnot ok\n");
    const char *a2[] = {"--api-key-file", bad, NULL};
    cr_assert_eq(load(&cfg, a2, NULL, &err), GS_INVAL);
    cr_assert(strstr(err.msg, ":2: a key must not contain whitespace"), "%s", err.msg);
    free(kf);
    free(bad);
}

/* --print-config masks every key but shows how many there are; the unmasked
 * JSON loads back as a config file giving the same config. */
Test(config_print, masks_secrets_and_round_trips)
{
    const char *args[] = {"--api-key", "sk-live-1",        "--api-key", "sk-live-2",    "--port",
                          "9001",      "--max-body-bytes", "3MiB",      "--log-format", "json",
                          NULL};
    struct gs_cfg cfg;
    struct gs_err err;
    cr_assert_eq(load(&cfg, args, NULL, &err), GS_OK, "%s", err.msg);

    char *text;
    size_t len;
    FILE *f = open_memstream(&text, &len);
    cr_assert(gs_cfg_print(&cfg, f));
    fclose(f);
    cr_assert(!strstr(text, "sk-live"), "secret leaked: %s", text);
    json_error_t jerr;
    json_t *j = json_loads(text, 0, &jerr);
    cr_assert(j, "print-config is not JSON: %s", jerr.text);
    json_t *keys = json_object_get(j, "api_key");
    cr_assert_eq(json_array_size(keys), 2);
    cr_assert_str_eq(json_string_value(json_array_get(keys, 0)), "***");
    cr_assert_eq(json_integer_value(json_object_get(j, "port")), 9001);
    cr_assert_eq(json_integer_value(json_object_get(j, "max_body_bytes")), 3 << 20);
    cr_assert_str_eq(json_string_value(json_object_get(j, "log_format")), "json");
    cr_assert(json_is_null(json_object_get(j, "model")));
    /* Every option but --config appears. */
    size_t n;
    const struct gs_cfg_opt *opts = gs_cfg_opts(&n);
    cr_assert_eq(json_object_size(j), n - 1);
    json_decref(j);
    free(text);

    json_t *raw = gs_cfg_to_json(&cfg, false);
    const char *dir = gs_test_tmpdir();
    char path[4200];
    snprintf(path, sizeof(path), "%s/round.json", dir);
    cr_assert_eq(json_dump_file(raw, path, JSON_INDENT(2)), 0);
    json_decref(raw);
    cr_assert_eq(gs_cfg_check_file(path, &err), GS_OK, "%s", err.msg);
    const char *a2[] = {"--config", path, NULL};
    struct gs_cfg back;
    cr_assert_eq(load(&back, a2, NULL, &err), GS_OK, "%s", err.msg);
    for (size_t i = 0; i < n; i++) {
        if (opts[i].flags & GS_CFG_F_NOFILE)
            continue;
        json_t *x = gs_cfg_to_json(&cfg, false), *y = gs_cfg_to_json(&back, false);
        char key[64];
        snprintf(key, sizeof(key), "%s", opts[i].name);
        for (char *p = key; *p; p++)
            *p = *p == '-' ? '_' : *p;
        cr_assert(json_equal(json_object_get(x, key), json_object_get(y, key)), "%s differs", key);
        json_decref(x);
        json_decref(y);
    }
    gs_cfg_deinit(&back);
    gs_cfg_deinit(&cfg);
}

/* ---- reload ------------------------------------------------------------------------- */

/* A reload applies the reloadable changes, reports the others and leaves
 * them alone, and keeps command-line values. */
Test(config_reload, applies_only_reloadable_fields)
{
    const char *dir = gs_test_tmpdir();
    char *kf = write_file(dir, "keys", "old-file-key\n");
    char text[2048];
    snprintf(text, sizeof(text),
             "{\"log_level\": \"info\", \"port\": 8081, \"api_key\": [\"old\"],"
             " \"api_key_file\": \"%s\", \"max_tokens\": 100, \"validate_rate\": 0.1,"
             " \"max_seqs\": 8, \"max_conns\": 50}",
             kf);
    char *path = write_file(dir, "c.json", text);
    const char *args[] = {"--config", path, "--max-conns", "40", NULL};
    struct gs_cfg cfg;
    struct gs_err err;
    cr_assert_eq(load(&cfg, args, NULL, &err), GS_OK, "%s", err.msg);
    cr_assert_eq(cfg.max_conns, 40);
    cr_assert_eq(cfg.api_key.n, 2);

    /* Nothing changed: nothing to report. */
    struct gs_cfg_reload_report rep;
    char *noenv[] = {NULL};
    cr_assert_eq(gs_cfg_reload(&cfg, noenv, &rep, &err), GS_OK, "%s", err.msg);
    cr_assert_eq(rep.n_applied, 0);
    cr_assert_eq(rep.n_ignored, 0);

    free(write_file(dir, "keys", "new-file-key\n"));
    snprintf(text, sizeof(text),
             "{\"log_level\": \"debug\", \"port\": 9999, \"api_key\": [\"new\"],"
             " \"api_key_file\": \"%s\", \"max_tokens\": 200, \"validate_rate\": 0.5,"
             " \"max_seqs\": 16, \"max_conns\": 60}",
             kf);
    free(write_file(dir, "c.json", text));
    char *env[] = {"GRAPHSERVE_LOG_FORMAT=json", NULL};
    cr_assert_eq(gs_cfg_reload(&cfg, env, &rep, &err), GS_OK, "%s", err.msg);

    cr_assert_eq(cfg.log_level, GS_LOG_DEBUG);
    cr_assert_eq(cfg.log_format, GS_LOG_JSON);
    cr_assert_eq(cfg.max_tokens, 200);
    cr_assert_eq(cfg.validate_rate, 0.5);
    cr_assert_eq(cfg.api_key.n, 2);
    cr_assert_str_eq(cfg.api_key.v[0], "new");
    cr_assert_str_eq(cfg.api_key.v[1], "new-file-key");
    cr_assert_eq(cfg.port, 8081, "port needs a restart");
    cr_assert_eq(cfg.max_seqs, 8, "max-seqs needs a restart");
    cr_assert_eq(cfg.max_conns, 40, "the flag still wins");

    const char *want_applied[] = {"api-key", "log-level", "log-format", "max-tokens",
                                  "validate-rate"};
    cr_assert_eq(rep.n_applied, GS_ARRAY_LEN(want_applied));
    for (size_t i = 0; i < GS_ARRAY_LEN(want_applied); i++) {
        bool found = false;
        for (size_t k = 0; k < rep.n_applied; k++)
            found |= !strcmp(rep.applied[k], want_applied[i]);
        cr_assert(found, "%s not applied", want_applied[i]);
    }
    cr_assert_eq(rep.n_ignored, 2);
    cr_assert_str_eq(rep.ignored[0], "max-seqs");
    cr_assert_str_eq(rep.ignored[1], "port");

    /* Every reported field is one the table marks reloadable, and vice versa. */
    for (size_t k = 0; k < rep.n_applied; k++)
        cr_assert(gs_cfg_opt_find(rep.applied[k])->flags & GS_CFG_F_RELOAD);
    for (size_t k = 0; k < rep.n_ignored; k++)
        cr_assert(!(gs_cfg_opt_find(rep.ignored[k])->flags & GS_CFG_F_RELOAD));

    /* The daemon logs the outcome: a warning, since a restart is needed. */
    char *logged;
    size_t loglen;
    FILE *lf = open_memstream(&logged, &loglen);
    gs_log_set_stream(lf);
    gs_log_configure(GS_LOG_INFO, GS_LOG_LOGFMT);
    gs_cfg_log_reload(&rep);
    gs_log_set_stream(NULL);
    fclose(lf);
    cr_assert(strstr(logged, "level=warn event=config_reload applied=max-tokens,api-key,"
                             "log-level,log-format,validate-rate ignored=max-seqs,port\n"),
              "%s", logged);
    free(logged);
    gs_cfg_deinit(&cfg);
    free(kf);
    free(path);
}

/* A broken file at reload changes nothing and says why. */
Test(config_reload, refused_reload_changes_nothing)
{
    const char *dir = gs_test_tmpdir();
    char *path = write_file(dir, "c.json", "{\"log_level\": \"warn\", \"api_key\": \"k1\"}");
    const char *args[] = {"--config", path, NULL};
    struct gs_cfg cfg;
    struct gs_err err;
    cr_assert_eq(load(&cfg, args, NULL, &err), GS_OK, "%s", err.msg);
    free(write_file(dir, "c.json",
                    "{\"log_level\": \"debug\", \"api_key\": \"k2\", \"max_tokens\": 0}"));
    struct gs_cfg_reload_report rep;
    char *noenv[] = {NULL};
    cr_assert_eq(gs_cfg_reload(&cfg, noenv, &rep, &err), GS_INVAL);
    cr_assert(strstr(err.msg, "max_tokens: 0 is out of range"), "%s", err.msg);
    cr_assert(strstr(err.msg, "nothing changed"), "%s", err.msg);
    cr_assert_eq(cfg.log_level, GS_LOG_WARN);
    cr_assert_str_eq(cfg.api_key.v[0], "k1");
    cr_assert_eq(rep.n_applied, 0);
    gs_cfg_deinit(&cfg);
    free(path);
}

/* ---- generated help ---------------------------------------------------------------- */

static char *capture(void (*fn)(FILE *))
{
    char *text;
    size_t len;
    FILE *f = open_memstream(&text, &len);
    fn(f);
    fclose(f);
    return text;
}

/* Collapses every run of whitespace to one space, so that wrapped text can
 * be searched. */
static void squeeze(char *s)
{
    char *o = s;
    for (char *p = s; *p; p++) {
        bool sp = *p == ' ' || *p == '\n';
        if (!sp || (o > s && o[-1] != ' '))
            *o++ = sp ? ' ' : *p;
    }
    *o = 0;
}

/* --help shows every option with its flag, variable and help text. */
Test(config_help, covers_every_row)
{
    char *text = capture(gs_cfg_help);
    squeeze(text);
    size_t n;
    const struct gs_cfg_opt *opts = gs_cfg_opts(&n);
    for (size_t i = 0; i < n; i++) {
        char flag[80], env[80];
        snprintf(flag, sizeof(flag), "--%s%s", opts[i].type == GS_CFG_BOOL ? "[no-]" : "",
                 opts[i].name);
        snprintf(env, sizeof(env), "GRAPHSERVE_%s", opts[i].name);
        for (char *p = env; *p; p++)
            *p = *p == '-' ? '_' : (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
        cr_assert(strstr(text, flag), "--help lacks %s", flag);
        cr_assert(strstr(text, env), "--help lacks %s", env);
        cr_assert(strstr(text, opts[i].help), "--help lacks the help of %s", opts[i].name);
        if (opts[i].short_flag) {
            char sh[8];
            snprintf(sh, sizeof(sh), "-%c, ", opts[i].short_flag);
            cr_assert(strstr(text, sh), "--help lacks %s", sh);
        }
    }
    free(text);
}

/* The Markdown reference has one well-formed row per option, in table order. */
Test(config_help, markdown_has_one_row_per_option)
{
    char *text = capture(gs_cfg_help_markdown);
    size_t n;
    const struct gs_cfg_opt *opts = gs_cfg_opts(&n);
    size_t rows = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cr_assert(line[0] == '|' && line[strlen(line) - 1] == '|', "not a table row: %s", line);
        size_t cells = 0;
        for (const char *p = line; *p; p++)
            cells += *p == '|' && (p == line || p[-1] != '\\');
        cr_assert_eq(cells, 9, "row with %zu cells: %s", cells, line);
        if (rows >= 2) {
            const struct gs_cfg_opt *o = &opts[rows - 2];
            char flag[80];
            snprintf(flag, sizeof(flag), "--%s%s`", o->type == GS_CFG_BOOL ? "[no-]" : "", o->name);
            cr_assert(strstr(line, flag), "row %zu is not %s: %s", rows, o->name, line);
            cr_assert(strstr(line, (o->flags & GS_CFG_F_RELOAD) ? "| yes |" : "| no |"), "%s",
                      line);
        }
        rows++;
    }
    cr_assert_eq(rows, n + 2);
    free(text);
}

/* ---- the scheduler's view ------------------------------------------------------------ */

Test(config_sched, maps_onto_sched_cfg)
{
    const char *args[] = {"--backend", "cpu", "-t",         "6", "--kv-cache-bytes",   "256MiB",
                          "--kv-type", "f32", "--max-seqs", "7", "--max-batch-tokens", "99",
                          NULL};
    struct gs_cfg cfg;
    struct gs_err err;
    cr_assert_eq(load(&cfg, args, NULL, &err), GS_OK, "%s", err.msg);
    struct gs_sched_cfg sc;
    gs_cfg_to_sched_cfg(&cfg, &sc);
    cr_assert_str_eq(sc.backend, "cpu");
    cr_assert_eq(sc.n_threads, 6);
    cr_assert_eq(sc.kv_cache_bytes, 256u << 20);
    cr_assert_eq(sc.kv_type, GS_TYPE_F32);
    cr_assert_eq(sc.page_tokens, 16);
    cr_assert_eq(sc.max_seqs, 7);
    cr_assert_eq(sc.max_batch_tokens, 99);
    cr_assert_eq(sc.max_queue, 256);
    cr_assert(sc.prefix_cache);
    cr_assert_null(sc.notify);
    gs_cfg_deinit(&cfg);
}

/* ---- allocation failures ----------------------------------------------------------- */

/* Loading under failing allocations returns GS_NOMEM, never crashes or leaks
 * (the sanitizer build checks the leaks). */
Test(config_oom, every_allocation_failure_is_reported)
{
    const char *dir = gs_test_tmpdir();
    char *path = write_file(dir, "c.json", "{\"api_key\": [\"a\", \"b\"], \"host\": \"::1\"}");
    const char *args[] = {"--config", path, "--api-key", "c", "-m", path, NULL};
    for (long k = 0;; k++) {
        struct gs_cfg cfg;
        struct gs_err err;
        gs_alloc_fail_after(k);
        enum gs_status st = load(&cfg, args, NULL, &err);
        gs_alloc_fail_after(-1);
        if (st == GS_OK) {
            cr_assert_str_eq(cfg.host, "::1");
            gs_cfg_deinit(&cfg);
            break;
        }
        cr_assert_eq(st, GS_NOMEM, "k=%ld: %s", k, err.msg);
        cr_assert(k < 1000);
    }
    free(path);
}
