/*
 * config/output.c - what the table generates for people: --help, the
 * Markdown reference for the README, and --print-config (the effective
 * config as JSON, secrets masked).
 */
#include "config/internal.h"

#include <string.h>

static json_t *opt_json(const struct gs_cfg *cfg, const struct gs_cfg_opt *o, bool masked)
{
    const void *f = gs_cfg__cfield(cfg, o);
    bool hide = masked && (o->flags & GS_CFG_F_SECRET);
    switch (o->type) {
    case GS_CFG_BOOL:
        return json_boolean(*(const bool *)f);
    case GS_CFG_INT:
        return json_integer((json_int_t) * (const int64_t *)f);
    case GS_CFG_BYTES:
        return json_integer((json_int_t) * (const uint64_t *)f);
    case GS_CFG_FLOAT:
        return json_real(*(const double *)f);
    case GS_CFG_STR: {
        const char *s = *(char *const *)f;
        return s ? json_string(hide ? GS_CFG_MASK : s) : json_null();
    }
    case GS_CFG_ENUM:
        return json_string(gs_cfg__choice(o, *(const int *)f));
    case GS_CFG_LIST: {
        const struct gs_cfg_strlist *l = f;
        json_t *a = json_array();
        for (size_t i = 0; a && i < l->n; i++)
            if (json_array_append_new(a, json_string(hide ? GS_CFG_MASK : l->v[i]))) {
                json_decref(a);
                return NULL;
            }
        return a;
    }
    }
    return NULL;
}

void *gs_cfg_to_json(const struct gs_cfg *cfg, bool masked)
{
    size_t n;
    const struct gs_cfg_opt *opts = gs_cfg_opts(&n);
    json_t *root = json_object();
    for (size_t i = 0; root && i < n; i++) {
        if (opts[i].flags & GS_CFG_F_NOFILE)
            continue;
        char key[64];
        json_t *v = opt_json(cfg, &opts[i], masked);
        if (!v || json_object_set_new(root, gs_cfg__file_key(&opts[i], key, sizeof(key)), v)) {
            json_decref(root);
            return NULL;
        }
    }
    return root;
}

bool gs_cfg_print(const struct gs_cfg *cfg, FILE *f)
{
    json_t *j = gs_cfg_to_json(cfg, true);
    if (!j)
        return false;
    int rc = json_dumpf(j, f, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
    json_decref(j);
    return rc == 0 && fputc('\n', f) != EOF;
}

/* ---- help ------------------------------------------------------------------ */

static const char *type_name(const struct gs_cfg_opt *o)
{
    switch (o->type) {
    case GS_CFG_BOOL:
        return "bool";
    case GS_CFG_INT:
        return "integer";
    case GS_CFG_BYTES:
        return "size";
    case GS_CFG_FLOAT:
        return "number";
    case GS_CFG_STR:
        return (o->flags & GS_CFG_F_PATH) ? "path" : "string";
    case GS_CFG_LIST:
        return "list";
    case GS_CFG_ENUM:
        return "enum";
    }
    return "?";
}

/* The placeholder after the flag: "N", "SIZE", "ref|cpu", ... */
void gs_cfg__metavar(const struct gs_cfg_opt *o, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = 0;
    switch (o->type) {
    case GS_CFG_BOOL:
        break;
    case GS_CFG_INT:
        snprintf(buf, cap, "N");
        break;
    case GS_CFG_BYTES:
        snprintf(buf, cap, "SIZE");
        break;
    case GS_CFG_FLOAT:
        snprintf(buf, cap, "X");
        break;
    case GS_CFG_STR:
        snprintf(buf, cap, (o->flags & GS_CFG_F_PATH) ? "FILE" : "TEXT");
        break;
    case GS_CFG_LIST:
        snprintf(buf, cap, "KEY");
        break;
    case GS_CFG_ENUM:
        for (int i = 0; o->choices[i] && n + 1 < cap; i++)
            n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? "|" : "", o->choices[i]);
        break;
    }
}

void gs_cfg__fmt_default(const struct gs_cfg_opt *o, char *buf, size_t cap)
{
    if (!o->def)
        snprintf(buf, cap, o->type == GS_CFG_LIST ? "none" : "unset");
    else
        snprintf(buf, cap, "%s", o->def);
}

/* "" when the type has no numeric range. */
void gs_cfg__fmt_help_range(const struct gs_cfg_opt *o, char *buf, size_t cap)
{
    char a[32], b[32];
    buf[0] = 0;
    if (o->type == GS_CFG_BYTES) {
        gs_cfg__format_bytes((uint64_t)o->min, a, sizeof(a));
        gs_cfg__format_bytes((uint64_t)o->max, b, sizeof(b));
        snprintf(buf, cap, "%s..%s", a, b);
    } else if (o->type == GS_CFG_INT) {
        snprintf(buf, cap, "%.0f..%.0f", o->min, o->max);
    } else if (o->type == GS_CFG_FLOAT) {
        snprintf(buf, cap, "%g..%g", o->min, o->max);
    }
}

#define HELP_INDENT GS_CFG__HELP_INDENT
#define HELP_WIDTH  100

/* Writes text word by word from column col, breaking lines at HELP_WIDTH
 * and indenting continuation lines to HELP_INDENT; returns the column. */
size_t gs_cfg__wrap(FILE *f, const char *text, size_t col)
{
    for (;;) {
        while (*text == ' ')
            text++;
        size_t w = strcspn(text, " ");
        if (!w)
            return col;
        if (col < HELP_INDENT) {
            fprintf(f, "%*s", (int)(HELP_INDENT - col), "");
            col = HELP_INDENT;
        } else if (col + 1 + w > HELP_WIDTH) {
            fprintf(f, "\n%*s", HELP_INDENT, "");
            col = HELP_INDENT;
        } else {
            fputc(' ', f);
            col++;
        }
        fwrite(text, 1, w, f);
        col += w;
        text += w;
    }
}

void gs_cfg_help(FILE *f)
{
    size_t n;
    const struct gs_cfg_opt *opts = gs_cfg_opts(&n);
    fprintf(f, "usage: graphserve serve [options]\n\n"
               "Every option can also be set by the GRAPHSERVE_* variable shown, or by its key\n"
               "(the name with '_' for '-') in a JSON config file given with --config FILE.\n"
               "Flags override variables, which override the file. Sizes take units: 512MiB,\n"
               "2G (powers of 1024), 500MB (powers of 1000). Options marked 'reload' change\n"
               "on SIGHUP without a restart.\n\n"
               "  -h, --help            this text\n"
               "  --help-markdown       the option reference as a Markdown table\n"
               "  --print-config        print the effective config as JSON (secrets masked)\n");
    const char *group = NULL;
    for (size_t i = 0; i < n; i++) {
        const struct gs_cfg_opt *o = &opts[i];
        if (!group || strcmp(group, o->group))
            fprintf(f, "\n%s:\n", group = o->group);
        char mv[128], flag[192], def[64], range[80], env[64];
        gs_cfg__metavar(o, mv, sizeof(mv));
        char sh[8] = "";
        if (o->short_flag)
            snprintf(sh, sizeof(sh), "-%c, ", o->short_flag);
        snprintf(flag, sizeof(flag), "%s--%s%s%s%s", sh, o->type == GS_CFG_BOOL ? "[no-]" : "",
                 o->name, *mv ? " " : "", mv);
        gs_cfg__fmt_default(o, def, sizeof(def));
        gs_cfg__fmt_help_range(o, range, sizeof(range));
        char detail[512];
        snprintf(detail, sizeof(detail), "Default %s%s%s%s%s; env %s%s%s%s.", def,
                 *range ? ", range " : "", range, o->unit ? " " : "", o->unit ? o->unit : "",
                 gs_cfg__env_name(o, env, sizeof(env)),
                 o->type == GS_CFG_LIST ? " (comma-separated)" : "",
                 (o->flags & GS_CFG_F_RELOAD) ? "; reloadable" : "",
                 (o->flags & GS_CFG_F_SECRET) ? "; secret" : "");
        fprintf(f, "  %s", flag);
        size_t col = 2 + strlen(flag);
        if (col + 2 > HELP_INDENT) {
            /* A long flag gets the help text on the next line. */
            fputc('\n', f);
            col = 0;
        }
        gs_cfg__wrap(f, o->help, col);
        fputc('\n', f);
        gs_cfg__wrap(f, detail, 0);
        fputc('\n', f);
    }
}

/* Markdown cells must not contain '|'. */
static void md_cell(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '|')
            fputs("\\|", f);
        else
            fputc(*s, f);
    }
}

void gs_cfg_help_markdown(FILE *f)
{
    size_t n;
    const struct gs_cfg_opt *opts = gs_cfg_opts(&n);
    fprintf(f, "| Flag | Environment | File key | Type | Default | Range | Reload | Description "
               "|\n|---|---|---|---|---|---|---|---|\n");
    for (size_t i = 0; i < n; i++) {
        const struct gs_cfg_opt *o = &opts[i];
        char mv[128], def[64], range[80], env[64], key[64];
        gs_cfg__metavar(o, mv, sizeof(mv));
        gs_cfg__fmt_default(o, def, sizeof(def));
        gs_cfg__fmt_help_range(o, range, sizeof(range));
        fputs("| `", f);
        if (o->short_flag)
            fprintf(f, "-%c`, `", o->short_flag);
        fprintf(f, "--%s%s", o->type == GS_CFG_BOOL ? "[no-]" : "", o->name);
        fprintf(f, "` | `%s` | ", gs_cfg__env_name(o, env, sizeof(env)));
        if (o->flags & GS_CFG_F_NOFILE)
            fputs("—", f);
        else
            fprintf(f, "`%s`", gs_cfg__file_key(o, key, sizeof(key)));
        fputs(" | ", f);
        if (o->type == GS_CFG_ENUM)
            md_cell(f, mv);
        else
            fputs(type_name(o), f);
        fprintf(f, " | %s | %s%s%s | %s | ", def, range, o->unit && *range ? " " : "",
                o->unit && *range ? o->unit : "", (o->flags & GS_CFG_F_RELOAD) ? "yes" : "no");
        md_cell(f, o->help);
        if (o->flags & GS_CFG_F_SECRET)
            fputs(" Secret: masked in `--print-config`.", f);
        if (o->type == GS_CFG_LIST)
            fputs(" Repeatable; comma-separated in the variable; an array in the file.", f);
        fputs(" |\n", f);
    }
}
