/*
 * config/cli.c - the tools' command lines from their option tables
 * (config/cli.h): the walk over argv, --help, and the messages. Values go
 * through gs_cfg__set_text, the code that checks serve's flags.
 */
#include "config/cli.h"

#include "config/internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- parsing ----------------------------------------------------------------- */

static const struct gs_cfg_opt *find_long(const struct gs_cli_spec *spec, const char *name)
{
    for (size_t i = 0; i < spec->n_opts; i++)
        if (!strcmp(spec->opts[i].name, name))
            return &spec->opts[i];
    return NULL;
}

static const struct gs_cfg_opt *find_short(const struct gs_cli_spec *spec, char c)
{
    for (size_t i = 0; i < spec->n_opts; i++)
        if (spec->opts[i].short_flag == c)
            return &spec->opts[i];
    return NULL;
}

/* One value for row o; where is the flag as written ("-t", "--threads"). */
static enum gs_status set_value(void *opts, const struct gs_cfg_opt *o, const char *val,
                                const char *where, struct gs_err *err)
{
    void *f = gs_cfg__field(opts, o);
    if (o->type == GS_CFG_STR) {
        *(const char **)f = val;
        return GS_OK;
    }
    if (o->type == GS_CFG_LIST) {
        struct gs_cli_list *l = f;
        if (!*val)
            return gs_err_set(err, GS_INVAL, "%s: empty value", where);
        if (l->n == GS_CLI_MAX_LIST)
            return gs_err_set(err, GS_INVAL, "%s: more than %d values", where, GS_CLI_MAX_LIST);
        l->v[l->n++] = val;
        return GS_OK;
    }
    return gs_cfg__set_text(opts, o, val, where, err);
}

static enum gs_status set_defaults(const struct gs_cli_spec *spec, void *opts, struct gs_err *err)
{
    for (size_t i = 0; i < spec->n_opts; i++) {
        const struct gs_cfg_opt *o = &spec->opts[i];
        void *f = gs_cfg__field(opts, o);
        if (o->type == GS_CFG_LIST)
            memset(f, 0, sizeof(struct gs_cli_list));
        else if (o->type == GS_CFG_STR)
            *(const char **)f = NULL;
        if (o->def && set_value(opts, o, o->def, o->name, err))
            return gs_err_prefix(err, "%s: default", spec->cmd);
    }
    return GS_OK;
}

enum gs_status gs_cli_parse(const struct gs_cli_spec *spec, void *opts, int argc, char **argv,
                            struct gs_cli_args *out, struct gs_err *err)
{
    memset(out, 0, sizeof(*out));
    gs_err_clear(err);
    if (spec->n_opts > 64 || spec->max_args > GS_CLI_MAX_ARGS)
        return gs_err_set(err, GS_INVAL, "%s: option table too large", spec->cmd);
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--"))
            break;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            out->help = true;
            return GS_OK;
        }
    enum gs_status st = set_defaults(spec, opts, err);
    bool options = true;
    for (int i = 1; i < argc && !st; i++) {
        const char *a = argv[i], *val = NULL;
        const struct gs_cfg_opt *o = NULL;
        bool negated = false;
        char where[160];
        if (options && !strcmp(a, "--")) {
            options = false;
            continue;
        }
        if (!options || a[0] != '-' || !a[1]) {
            if (out->n_args == spec->max_args)
                return gs_err_set(err, GS_INVAL, "unexpected argument '%s'", a);
            out->args[out->n_args++] = a;
            continue;
        }
        if (a[1] == '-') {
            const char *name = a + 2, *eq = strchr(name, '=');
            char nm[128];
            snprintf(nm, sizeof(nm), "%.*s", (int)(eq ? (size_t)(eq - name) : strlen(name)), name);
            o = find_long(spec, nm);
            if (!o && !strncmp(nm, "no-", 3)) {
                const struct gs_cfg_opt *b = find_long(spec, nm + 3);
                if (b && b->type == GS_CFG_BOOL) {
                    o = b;
                    negated = true;
                }
            }
            if (!o)
                return gs_err_set(err, GS_INVAL, "--%s: unknown option", nm);
            snprintf(where, sizeof(where), "--%s", nm);
            val = eq ? eq + 1 : NULL;
            if (negated && eq)
                return gs_err_set(err, GS_INVAL, "%s: takes no value", where);
        } else {
            if (a[2] || !(o = find_short(spec, a[1])))
                return gs_err_set(err, GS_INVAL, "%s: unknown option", a);
            snprintf(where, sizeof(where), "%s", a);
        }
        if (o->type == GS_CFG_BOOL && !val)
            val = negated ? "false" : "true";
        if (!val) {
            if (i + 1 >= argc)
                return gs_err_set(err, GS_INVAL, "%s: expects a value", where);
            val = argv[++i];
        }
        st = set_value(opts, o, val, where, err);
        out->given |= 1ull << (o - spec->opts);
    }
    if (st)
        return st;
    for (size_t i = 0; i < spec->n_opts; i++) {
        const struct gs_cfg_opt *o = &spec->opts[i];
        if ((o->flags & GS_CFG_F_REQUIRED) && !(out->given & (1ull << i))) {
            char sh[8] = "";
            if (o->short_flag)
                snprintf(sh, sizeof(sh), "-%c/", o->short_flag);
            return gs_err_set(err, GS_INVAL, "%s--%s is required", sh, o->name);
        }
    }
    if (out->n_args < spec->min_args)
        return gs_err_set(err, GS_INVAL, "expects %u argument%s, got %u", spec->min_args,
                          spec->min_args == 1 ? "" : "s", out->n_args);
    return GS_OK;
}

int gs_cli_begin(const struct gs_cli_spec *spec, void *opts, int argc, char **argv,
                 struct gs_cli_args *out)
{
    struct gs_err err;
    if (gs_cli_parse(spec, opts, argc, argv, out, &err)) {
        fprintf(stderr, "graphserve %s: %s\nusage: graphserve %s%s%s (--help lists the options)\n",
                spec->cmd, err.msg, spec->cmd, *spec->synopsis ? " " : "", spec->synopsis);
        return 2;
    }
    if (out->help) {
        gs_cli_help(spec, opts, stdout);
        return 0;
    }
    return -1;
}

bool gs_cli_given(const struct gs_cli_spec *spec, const struct gs_cli_args *a, const char *name)
{
    const struct gs_cfg_opt *o = find_long(spec, name);
    return o && (a->given & (1ull << (o - spec->opts)));
}

/* ---- help -------------------------------------------------------------------- */

/* The value a row without a default text holds in opts, as text. */
static void current_value(const struct gs_cfg_opt *o, const void *opts, char *buf, size_t cap)
{
    const void *f = (const char *)opts + o->offset;
    switch (o->type) {
    case GS_CFG_INT:
        snprintf(buf, cap, "%lld", (long long)*(const int64_t *)f);
        return;
    case GS_CFG_BYTES:
        gs_cfg__format_bytes(*(const uint64_t *)f, buf, cap);
        return;
    case GS_CFG_FLOAT:
        snprintf(buf, cap, "%g", *(const double *)f);
        return;
    case GS_CFG_ENUM:
        snprintf(buf, cap, "%s", gs_cfg__choice(o, *(const int *)f));
        return;
    default:
        gs_cfg__fmt_default(o, buf, cap);
        return;
    }
}

void gs_cli_help(const struct gs_cli_spec *spec, const void *opts, FILE *f)
{
    fprintf(f, "usage: graphserve %s%s%s\n", spec->cmd, *spec->synopsis ? " " : "", spec->synopsis);
    if (spec->about)
        fprintf(f, "\n%s", spec->about);
    fprintf(f, "\noptions:\n  -h, --help                    this text\n");
    for (size_t i = 0; i < spec->n_opts; i++) {
        const struct gs_cfg_opt *o = &spec->opts[i];
        char mv[128], flag[192], def[64], range[80], sh[8] = "";
        if (o->type == GS_CFG_LIST)
            snprintf(mv, sizeof(mv), "TEXT");
        else
            gs_cfg__metavar(o, mv, sizeof(mv));
        if (o->short_flag)
            snprintf(sh, sizeof(sh), "-%c, ", o->short_flag);
        snprintf(flag, sizeof(flag), "%s--%s%s%s%s", sh, o->type == GS_CFG_BOOL ? "[no-]" : "",
                 o->name, *mv ? " " : "", mv);
        fprintf(f, "  %s", flag);
        size_t col = 2 + strlen(flag);
        if (col + 2 > GS_CFG__HELP_INDENT) {
            fputc('\n', f); /* a long flag gets its text on the next line */
            col = 0;
        }
        gs_cfg__wrap(f, o->help, col);
        fputc('\n', f);
        char detail[256];
        if (!o->def && opts)
            current_value(o, opts, def, sizeof(def));
        else
            gs_cfg__fmt_default(o, def, sizeof(def));
        gs_cfg__fmt_help_range(o, range, sizeof(range));
        if (o->flags & GS_CFG_F_REQUIRED)
            snprintf(detail, sizeof(detail), "Required.");
        else if (o->type == GS_CFG_LIST)
            snprintf(detail, sizeof(detail), "Repeatable.");
        else if ((o->type == GS_CFG_BOOL || o->type == GS_CFG_STR) && !o->def)
            detail[0] = 0; /* off, or unset: the help text says what that means */
        else
            snprintf(detail, sizeof(detail), "Default %s%s%s%s%s.", def, *range ? ", range " : "",
                     range, o->unit && *range ? " " : "", o->unit && *range ? o->unit : "");
        if (*detail) {
            gs_cfg__wrap(f, detail, 0);
            fputc('\n', f);
        }
    }
}

/* ---- messages ------------------------------------------------------------------ */

bool gs_cli_parse_int(const char *cmd, const char *where, const char *s, int64_t min, int64_t max,
                      int64_t *out)
{
    /* A one-row table, so that an element reads and fails as a flag's value does. */
    const struct gs_cfg_opt row = {
        .name = where, .type = GS_CFG_INT, .min = (double)min, .max = (double)max};
    struct gs_err err;
    int64_t v;
    if (gs_cfg__set_text(&v, &row, s, where, &err)) {
        gs_cli_fail(cmd, "%s", err.msg);
        return false;
    }
    *out = v;
    return true;
}

int gs_cli_fail(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "graphserve %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

int gs_cli_usage(const char *cmd, const char *usage)
{
    fprintf(stderr, "usage: graphserve %s %s\n", cmd, usage);
    return 2;
}
