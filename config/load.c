/*
 * config/load.c - building a struct gs_cfg from its sources: defaults, the
 * JSON file, GRAPHSERVE_* variables, the command line (each overriding the
 * one before), then the API key file and the checks that span options; and
 * the SIGHUP reload that rebuilds from the same sources.
 */
#include "config/internal.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

extern char **environ;

static const char env_prefix[] = "GRAPHSERVE_";

struct loader {
    struct gs_cfg *cfg;
    uint8_t src[GS_CFG_MAX_OPTS];     /* enum gs_cfg__src per option */
    bool list_reset[GS_CFG_MAX_OPTS]; /* the current source already replaced this list */
    char *file_path;                  /* copy of the config file's path, for messages */
    char *file_text;                  /* its bytes, NUL-terminated, for key lines */
    const char *file_where;           /* who named the file: "--config", "env ..." */
};

/* ---- messages -------------------------------------------------------------- */

/* 1-based line of the first "key": in the file text, 0 if not found. */
static int key_line(const char *text, const char *key)
{
    size_t kl = strlen(key);
    for (const char *p = text; (p = strchr(p, '"')); p++) {
        if (strncmp(p + 1, key, kl) || p[1 + kl] != '"')
            continue;
        const char *q = p + 2 + kl;
        while (isspace((unsigned char)*q))
            q++;
        if (*q != ':')
            continue;
        int line = 1;
        for (const char *r = text; r < p; r++)
            line += *r == '\n';
        return line;
    }
    return 0;
}

/* "path:line: key" for a key of the file being read. */
static void file_where(const struct loader *ld, const char *key, char *buf, size_t cap)
{
    int line = ld->file_text ? key_line(ld->file_text, key) : 0;
    if (line)
        snprintf(buf, cap, "%s:%d: %s", ld->file_path, line, key);
    else
        snprintf(buf, cap, "%s: %s", ld->file_path, key);
}

/* Where option o's current value came from, for messages after loading. */
static void opt_where(const struct loader *ld, const struct gs_cfg_opt *o, char *buf, size_t cap)
{
    char name[64];
    switch (ld->src[gs_cfg__index(o)]) {
    case GS_CFG__SRC_FLAG:
        snprintf(buf, cap, "--%s", o->name);
        break;
    case GS_CFG__SRC_ENV:
        snprintf(buf, cap, "env %s", gs_cfg__env_name(o, name, sizeof(name)));
        break;
    case GS_CFG__SRC_FILE:
        file_where(ld, gs_cfg__file_key(o, name, sizeof(name)), buf, cap);
        break;
    default:
        snprintf(buf, cap, "%s (default)", o->name);
        break;
    }
}

/* ---- sources ------------------------------------------------------------- */

static enum gs_status set_defaults(struct loader *ld, struct gs_err *err)
{
    size_t n;
    const struct gs_cfg_opt *opts = gs_cfg_opts(&n);
    for (size_t i = 0; i < n; i++) {
        if (!opts[i].def)
            continue;
        enum gs_status st = gs_cfg__set_text(ld->cfg, &opts[i], opts[i].def, opts[i].name, err);
        if (st)
            return gs_err_prefix(err, "default");
    }
    return GS_OK;
}

/* Applies one text value from a flag or a variable. */
static enum gs_status apply_text(struct loader *ld, const struct gs_cfg_opt *o, const char *val,
                                 enum gs_cfg__src src, const char *where, struct gs_err *err)
{
    size_t idx = gs_cfg__index(o);
    if (o->type == GS_CFG_LIST) {
        struct gs_cfg_strlist *l = gs_cfg__field(ld->cfg, o);
        if (!ld->list_reset[idx]) {
            gs_cfg__list_clear(l);
            ld->list_reset[idx] = true;
        }
        /* Variables carry lists comma-separated; a flag carries one element. */
        const char *p = val;
        do {
            const char *end = src == GS_CFG__SRC_ENV ? strchr(p, ',') : NULL;
            size_t len = end ? (size_t)(end - p) : strlen(p);
            while (len && isspace((unsigned char)*p))
                p++, len--;
            while (len && isspace((unsigned char)p[len - 1]))
                len--;
            if (len || src == GS_CFG__SRC_FLAG) {
                if (!len)
                    return gs_err_set(err, GS_INVAL, "%s: empty value", where);
                char *item = gs_strndup(p, len);
                if (!item)
                    return gs_err_set(err, GS_NOMEM, "out of memory");
                enum gs_status st = gs_cfg__list_add(l, item, err);
                gs_free(item);
                if (st)
                    return st;
            }
            p = end ? end + 1 : NULL;
        } while (p);
    } else {
        enum gs_status st = gs_cfg__set_text(ld->cfg, o, val, where, err);
        if (st)
            return st;
    }
    ld->src[idx] = (uint8_t)src;
    return GS_OK;
}

/* Applies GRAPHSERVE_* variables; only (if not NULL) restricts to one option. */
static enum gs_status apply_env(struct loader *ld, char **envp, const struct gs_cfg_opt *only,
                                struct gs_err *err)
{
    memset(ld->list_reset, 0, sizeof(ld->list_reset));
    for (char **e = envp; e && *e; e++) {
        if (strncmp(*e, env_prefix, sizeof(env_prefix) - 1))
            continue;
        const char *eq = strchr(*e, '=');
        if (!eq)
            continue;
        char var[128], name[128];
        snprintf(var, sizeof(var), "%.*s", (int)(eq - *e), *e);
        size_t k = 0;
        for (const char *p = var + sizeof(env_prefix) - 1; *p && k + 1 < sizeof(name); p++)
            name[k++] = *p == '_' ? '-' : (char)tolower((unsigned char)*p);
        name[k] = 0;
        const struct gs_cfg_opt *o = gs_cfg_opt_find(name);
        if (!o) {
            if (only)
                continue;
            const struct gs_cfg_opt *hint = gs_cfg__suggest(name, 0);
            char hv[64];
            if (hint)
                return gs_err_set(err, GS_INVAL, "env %s: unknown setting (did you mean %s?)", var,
                                  gs_cfg__env_name(hint, hv, sizeof(hv)));
            return gs_err_set(err, GS_INVAL, "env %s: unknown setting", var);
        }
        if (only && o != only)
            continue;
        char where[160];
        snprintf(where, sizeof(where), "env %s", var);
        enum gs_status st = apply_text(ld, o, eq + 1, GS_CFG__SRC_ENV, where, err);
        if (st)
            return st;
    }
    return GS_OK;
}

/* Walks the command line. Actions (--help ...) are recorded only when only is
 * NULL; only restricts the walk to one option (to find --config first). */
static enum gs_status apply_argv(struct loader *ld, int argc, char **argv,
                                 const struct gs_cfg_opt *only, struct gs_err *err)
{
    memset(ld->list_reset, 0, sizeof(ld->list_reset));
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const struct gs_cfg_opt *o = NULL;
        const char *val = NULL;
        char where[160];
        bool negated = false;
        enum gs_cfg_action act = !strcmp(a, "-h") || !strcmp(a, "--help") ? GS_CFG_HELP
                                 : !strcmp(a, "--help-markdown")          ? GS_CFG_HELP_MARKDOWN
                                 : !strcmp(a, "--print-config")           ? GS_CFG_PRINT_CONFIG
                                                                          : GS_CFG_RUN;
        if (act != GS_CFG_RUN) {
            if (!only)
                ld->cfg->action = act;
            continue;
        }
        if (a[0] == '-' && a[1] == '-' && a[2]) {
            const char *name = a + 2;
            const char *eq = strchr(name, '=');
            char nm[128];
            snprintf(nm, sizeof(nm), "%.*s", (int)(eq ? (size_t)(eq - name) : strlen(name)), name);
            o = gs_cfg_opt_find(nm);
            if (!o && !strncmp(nm, "no-", 3)) {
                const struct gs_cfg_opt *b = gs_cfg_opt_find(nm + 3);
                if (b && b->type == GS_CFG_BOOL) {
                    o = b;
                    negated = true;
                }
            }
            if (!o) {
                const struct gs_cfg_opt *hint = gs_cfg__suggest(nm, 0);
                if (hint)
                    return gs_err_set(err, GS_INVAL, "--%s: unknown option (did you mean --%s?)",
                                      nm, hint->name);
                return gs_err_set(err, GS_INVAL, "--%s: unknown option", nm);
            }
            snprintf(where, sizeof(where), "--%s", nm);
            if (eq)
                val = eq + 1;
            if (negated && eq)
                return gs_err_set(err, GS_INVAL, "%s: takes no value", where);
        } else if (a[0] == '-' && a[1] && !a[2]) {
            size_t n;
            const struct gs_cfg_opt *opts = gs_cfg_opts(&n);
            for (size_t k = 0; k < n && !o; k++)
                if (opts[k].short_flag == a[1])
                    o = &opts[k];
            if (!o)
                return gs_err_set(err, GS_INVAL, "%s: unknown option", a);
            snprintf(where, sizeof(where), "%s", a);
        } else {
            return gs_err_set(err, GS_INVAL, "unexpected argument '%s' (options start with --)", a);
        }
        if (o->type == GS_CFG_BOOL && !val)
            val = negated ? "false" : "true";
        if (!val) {
            if (i + 1 >= argc)
                return gs_err_set(err, GS_INVAL, "%s: expects a value", where);
            val = argv[++i];
        }
        if (only && o != only)
            continue;
        enum gs_status st = apply_text(ld, o, val, GS_CFG__SRC_FLAG, where, err);
        if (st)
            return st;
    }
    return GS_OK;
}

/* Reads a whole file into a NUL-terminated buffer (caller gs_free()s). */
static enum gs_status read_text(const char *path, const char *what, char **out, size_t *len,
                                struct gs_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return gs_err_set(err, GS_IO, "%s: cannot read '%s': %s", what, path, strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 8192;
            char *nb = gs_realloc(buf, cap);
            if (!nb) {
                gs_free(buf);
                fclose(f);
                return gs_err_set(err, GS_NOMEM, "out of memory");
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, 4096, f);
        n += got;
        if (got < 4096)
            break;
    }
    bool bad = ferror(f);
    fclose(f);
    if (bad) {
        gs_free(buf);
        return gs_err_set(err, GS_IO, "%s: error reading '%s'", what, path);
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return GS_OK;
}

static enum gs_status apply_file(struct loader *ld, const char *path, struct gs_err *err)
{
    size_t len;
    enum gs_status st = read_text(path, ld->file_where, &ld->file_text, &len, err);
    if (st)
        return st;
    if (!(ld->file_path = gs_strdup(path)))
        return gs_err_set(err, GS_NOMEM, "out of memory");
    json_error_t jerr;
    json_t *root = json_loadb(ld->file_text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return gs_err_set(err, GS_FORMAT, "%s:%d:%d: malformed JSON: %s", path, jerr.line,
                          jerr.column, jerr.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return gs_err_set(err, GS_INVAL, "%s: expects a JSON object of settings at the top level",
                          path);
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v)
    {
        char where[512], fk[64];
        const struct gs_cfg_opt *o = gs_cfg_opt_find(key);
        file_where(ld, key, where, sizeof(where));
        if (!o || strcmp(key, gs_cfg__file_key(o, fk, sizeof(fk)))) {
            const struct gs_cfg_opt *hint = gs_cfg__suggest(key, 1);
            if (hint)
                st = gs_err_set(err, GS_INVAL, "%s: unknown key (did you mean '%s'?)", where,
                                gs_cfg__file_key(hint, fk, sizeof(fk)));
            else
                st = gs_err_set(err, GS_INVAL, "%s: unknown key", where);
            break;
        }
        if (o->flags & GS_CFG_F_NOFILE) {
            st = gs_err_set(err, GS_INVAL, "%s: can only be set by a flag or variable", where);
            break;
        }
        st = gs_cfg__set_json(ld->cfg, o, v, where, err);
        if (st)
            break;
        ld->src[gs_cfg__index(o)] = GS_CFG__SRC_FILE;
    }
    json_decref(root);
    return st;
}

/* ---- after the sources ------------------------------------------------------- */

static bool has_space(const char *s)
{
    for (; *s; s++)
        if (isspace((unsigned char)*s) || iscntrl((unsigned char)*s))
            return true;
    return false;
}

static enum gs_status check_paths(struct loader *ld, struct gs_err *err)
{
    size_t n;
    const struct gs_cfg_opt *opts = gs_cfg_opts(&n);
    for (size_t i = 0; i < n; i++) {
        if (!(opts[i].flags & GS_CFG_F_PATH))
            continue;
        const char *p = *(char *const *)gs_cfg__cfield(ld->cfg, &opts[i]);
        if (!p)
            continue;
        struct stat sb;
        const char *why = NULL;
        if (stat(p, &sb))
            why = strerror(errno);
        else if (!S_ISREG(sb.st_mode))
            why = "not a regular file";
        else if (access(p, R_OK))
            why = strerror(errno);
        if (why) {
            char where[512];
            opt_where(ld, &opts[i], where, sizeof(where));
            return gs_err_set(err, GS_IO, "%s: cannot read '%s': %s", where, p, why);
        }
    }
    return GS_OK;
}

static enum gs_status read_key_file(struct loader *ld, struct gs_err *err)
{
    struct gs_cfg *cfg = ld->cfg;
    if (!cfg->api_key_file)
        return GS_OK;
    char where[512];
    opt_where(ld, gs_cfg_opt_find("api-key-file"), where, sizeof(where));
    char *text;
    size_t len;
    enum gs_status st = read_text(cfg->api_key_file, where, &text, &len, err);
    if (st)
        return st;
    size_t n_keys = 0;
    int line = 0;
    for (char *p = text, *next; p && *p && !st; p = next) {
        line++;
        next = strchr(p, '\n');
        if (next)
            *next++ = 0;
        while (isspace((unsigned char)*p))
            p++;
        size_t l = strlen(p);
        while (l && isspace((unsigned char)p[l - 1]))
            p[--l] = 0;
        if (!l || *p == '#')
            continue;
        if (has_space(p))
            st = gs_err_set(err, GS_INVAL, "%s:%d: a key must not contain whitespace",
                            cfg->api_key_file, line);
        else if (!(st = gs_cfg__list_add(&cfg->api_key, p, err)))
            n_keys++;
    }
    gs_free(text);
    if (!st && !n_keys)
        st = gs_err_set(err, GS_INVAL, "%s: '%s' holds no keys (refusing to run without auth)",
                        where, cfg->api_key_file);
    return st;
}

static enum gs_status check_cross(struct loader *ld, struct gs_err *err)
{
    const struct gs_cfg *c = ld->cfg;
    for (size_t i = 0; i < c->api_key.n; i++) {
        char where[512];
        opt_where(ld, gs_cfg_opt_find("api-key"), where, sizeof(where));
        if (has_space(c->api_key.v[i]))
            return gs_err_set(err, GS_INVAL, "%s: a key must not contain whitespace", where);
        /* A file saved from --print-config would otherwise accept "***". */
        if (!strcmp(c->api_key.v[i], GS_CFG_MASK))
            return gs_err_set(err, GS_INVAL,
                              "%s: '%s' is the mask --print-config writes, not a key", where,
                              GS_CFG_MASK);
    }
    if (!c->host)
        return gs_err_set(err, GS_INVAL, "host: must not be empty");
    if (!c->tls_cert != !c->tls_key)
        return gs_err_set(err, GS_INVAL, "tls-cert and tls-key must be set together (%s is unset)",
                          c->tls_cert ? "tls-key" : "tls-cert");
    if (c->tls_client_ca && !c->tls_cert)
        return gs_err_set(err, GS_INVAL, "tls-client-ca needs tls-cert and tls-key");
    if ((c->spec == GS_CFG_SPEC_DRAFT) != (c->draft_model != NULL))
        return gs_err_set(err, GS_INVAL,
                          c->draft_model ? "draft-model is for --spec draft (spec is %s)"
                                         : "spec draft needs --draft-model%s",
                          c->draft_model ? gs_cfg_spec_name(c->spec) : "");
    if (c->max_batch_tokens < c->max_seqs)
        return gs_err_set(err, GS_INVAL,
                          "max-batch-tokens (%lld) must be at least max-seqs (%lld): every running "
                          "sequence decodes one token per step",
                          (long long)c->max_batch_tokens, (long long)c->max_seqs);
    return GS_OK;
}

static enum gs_status save_origin(struct loader *ld, int argc, char **argv, struct gs_err *err)
{
    struct gs_cfg__origin *og = &ld->cfg->origin_;
    size_t n;
    gs_cfg_opts(&n);
    og->src = gs_malloc(n);
    og->argv = gs_calloc((size_t)argc + 1, sizeof(char *));
    if (!og->src || !og->argv)
        return gs_err_set(err, GS_NOMEM, "out of memory");
    memcpy(og->src, ld->src, n);
    /* argc first: after a failure below, deinit frees the copies made so far. */
    og->argc = argc;
    for (int i = 0; i < argc; i++)
        if (!(og->argv[i] = gs_strdup(argv[i])))
            return gs_err_set(err, GS_NOMEM, "out of memory");
    return GS_OK;
}

/*
 * The whole pipeline. check_path, when set, names a config file to read
 * alone (config check); otherwise the file comes from --config or
 * GRAPHSERVE_CONFIG.
 */
static enum gs_status build(struct gs_cfg *cfg, int argc, char **argv, char **envp,
                            const char *check_path, struct gs_err *err)
{
    struct loader ld = {.cfg = cfg};
    memset(cfg, 0, sizeof(*cfg));
    gs_err_clear(err);
    const struct gs_cfg_opt *copt = gs_cfg_opt_find("config");
    enum gs_status st = set_defaults(&ld, err);
    if (!st && !check_path) {
        /* Help must work even when the config or environment is broken. */
        for (int i = 1; i < argc; i++)
            if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help") ||
                !strcmp(argv[i], "--help-markdown")) {
                cfg->action = strlen(argv[i]) > 6 ? GS_CFG_HELP_MARKDOWN : GS_CFG_HELP;
                return GS_OK;
            }
        if (!(st = apply_env(&ld, envp, copt, err)))
            st = apply_argv(&ld, argc, argv, copt, err);
    }
    if (!st && check_path)
        st = gs_cfg__set_text(cfg, copt, check_path, "config", err);
    if (!st && cfg->config) {
        char w[160];
        opt_where(&ld, copt, w, sizeof(w));
        ld.file_where = check_path ? "config" : w;
        st = apply_file(&ld, cfg->config, err);
    }
    if (!st && !check_path && !(st = apply_env(&ld, envp, NULL, err)))
        st = apply_argv(&ld, argc, argv, NULL, err);
    if (!st)
        st = check_paths(&ld, err);
    if (!st)
        st = read_key_file(&ld, err);
    if (!st)
        st = check_cross(&ld, err);
    if (!st)
        st = save_origin(&ld, argc, argv, err);
    gs_free(ld.file_text);
    gs_free(ld.file_path);
    if (st)
        gs_cfg_deinit(cfg);
    return st;
}

enum gs_status gs_cfg_load(struct gs_cfg *cfg, int argc, char **argv, char **envp,
                           struct gs_err *err)
{
    return build(cfg, argc, argv, envp ? envp : environ, NULL, err);
}

enum gs_status gs_cfg_check_file(const char *path, struct gs_err *err)
{
    struct gs_cfg cfg;
    char *none[] = {NULL};
    enum gs_status st = build(&cfg, 0, none, none, path, err);
    gs_cfg_deinit(&cfg);
    return st;
}

void gs_cfg_deinit(struct gs_cfg *cfg)
{
    if (!cfg)
        return;
    size_t n;
    const struct gs_cfg_opt *opts = gs_cfg_opts(&n);
    for (size_t i = 0; i < n; i++)
        gs_cfg__field_clear(cfg, &opts[i]);
    if (cfg->origin_.argv)
        for (int i = 0; i < cfg->origin_.argc; i++)
            gs_free(cfg->origin_.argv[i]);
    gs_free(cfg->origin_.argv);
    gs_free(cfg->origin_.src);
    memset(cfg, 0, sizeof(*cfg));
}

enum gs_status gs_cfg_reload(struct gs_cfg *cfg, char **envp, struct gs_cfg_reload_report *rep,
                             struct gs_err *err)
{
    memset(rep, 0, sizeof(*rep));
    struct gs_cfg nc;
    enum gs_status st =
        build(&nc, cfg->origin_.argc, cfg->origin_.argv, envp ? envp : environ, NULL, err);
    if (st)
        return gs_err_prefix(err, "reload refused, nothing changed");
    size_t n;
    const struct gs_cfg_opt *opts = gs_cfg_opts(&n);
    for (size_t i = 0; i < n; i++) {
        if (gs_cfg__field_equal(cfg, &nc, &opts[i]))
            continue;
        if (!(opts[i].flags & GS_CFG_F_RELOAD)) {
            rep->ignored[rep->n_ignored++] = opts[i].name;
            continue;
        }
        /* Swap, so that deinit of nc frees the old value. */
        unsigned char tmp[sizeof(struct gs_cfg_strlist)];
        size_t sz = gs_cfg__field_size(&opts[i]);
        memcpy(tmp, gs_cfg__field(cfg, &opts[i]), sz);
        memcpy(gs_cfg__field(cfg, &opts[i]), gs_cfg__field(&nc, &opts[i]), sz);
        memcpy(gs_cfg__field(&nc, &opts[i]), tmp, sz);
        cfg->origin_.src[i] = nc.origin_.src[i];
        rep->applied[rep->n_applied++] = opts[i].name;
    }
    gs_cfg_deinit(&nc);
    return GS_OK;
}

void gs_cfg_apply_log(const struct gs_cfg *cfg)
{
    gs_log_configure(cfg->log_level, cfg->log_format);
}

/* Joins names with commas into buf; "-" when there are none. */
static const char *join(const char *const *names, size_t n, char *buf, size_t cap)
{
    size_t k = 0;
    buf[0] = 0;
    for (size_t i = 0; i < n && k + 1 < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%s", i ? "," : "", names[i]);
    return n ? buf : "-";
}

void gs_cfg_log_reload(const struct gs_cfg_reload_report *rep)
{
    char a[1024], b[1024];
    gs_log(rep->n_ignored ? GS_LOG_WARN : GS_LOG_INFO, "config_reload", "applied=%s ignored=%s",
           join(rep->applied, rep->n_applied, a, sizeof(a)),
           join(rep->ignored, rep->n_ignored, b, sizeof(b)));
}
