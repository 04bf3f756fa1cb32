/*
 * tests/tools/test_options.c - the tools' command lines come from their option
 * tables (config/cli.h): every tool's --help lists every row of its table, every
 * row refuses a bad value naming the flag, and an option several tools share is
 * refused in the same words by each of them and by serve, whose table is
 * config's. The tables are read from the tools library (gs_tools); the commands
 * run as a user runs them, the real binary in a child process.
 */
#define _GNU_SOURCE
#include "tests/common/testutil.h"
#include "tools/tools.h"

#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Runs graphserve with args; *out gets stdout (or stderr alone when errors). */
static int graphserve(char **out, bool errors, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int graphserve(char **out, bool errors, const char *fmt, ...)
{
    char *args, *cmd;
    va_list ap;
    va_start(ap, fmt);
    cr_assert(vasprintf(&args, fmt, ap) > 0);
    va_end(ap);
    cr_assert(asprintf(&cmd, "%s %s %s", gs_test_build_path("server/graphserve"), args,
                       errors ? "2>&1 >/dev/null" : "2>/dev/null") > 0);
    int rc = gs_test_run(cmd, 0, out);
    free(cmd);
    free(args);
    return rc;
}

/* Of every tool; asserts there are some. */
static const struct gs_tool *tools(size_t *n)
{
    const struct gs_tool *t = gs_tools(n);
    cr_assert_geq(*n, 11, "the tools' table lost commands: %zu", *n);
    return t;
}

/* A copy of s with every run of white space as one space: --help wraps lines. */
static char *squeeze(const char *s)
{
    char *out = malloc(strlen(s) + 1), *w = out;
    cr_assert_not_null(out);
    for (; *s; s++)
        if (!(*s == ' ' || *s == '\n') || (w > out && w[-1] != ' '))
            *w++ = *s == '\n' ? ' ' : *s;
    *w = '\0';
    return out;
}

Test(tool_options, help_lists_every_row_of_the_table)
{
    size_t n;
    const struct gs_tool *t = tools(&n);
    for (size_t i = 0; i < n; i++) {
        cr_assert_not_null(t[i].spec, "%s has no option spec", t[i].name);
        char *out = NULL;
        cr_assert_eq(graphserve(&out, false, "%s --help", t[i].name), 0, "%s --help: %s", t[i].name,
                     out);
        char want[256];
        snprintf(want, sizeof(want), "usage: graphserve %s", t[i].name);
        cr_expect(strstr(out, want) == out, "%s --help starts: %.80s", t[i].name, out);
        char *flat = squeeze(out);
        for (size_t k = 0; k < t[i].spec->n_opts; k++) {
            const struct gs_cfg_opt *o = &t[i].spec->opts[k];
            char sh[8] = "";
            if (o->short_flag)
                snprintf(sh, sizeof(sh), "-%c, ", o->short_flag);
            snprintf(want, sizeof(want), "\n  %s--%s%s", sh, o->type == GS_CFG_BOOL ? "[no-]" : "",
                     o->name);
            cr_expect(strstr(out, want), "%s --help lacks '%s'", t[i].name, want + 1);
            cr_expect(strstr(flat, o->help), "%s --help lacks the help of --%s", t[i].name,
                      o->name);
        }
        free(flat);
        free(out);
    }
}

/* A value every row of this type refuses, and the words that say why. */
static bool bad_value(const struct gs_cfg_opt *o, const char **value, const char **why)
{
    switch (o->type) {
    case GS_CFG_INT:
        *value = "x", *why = "'x' is not an integer";
        return true;
    case GS_CFG_FLOAT:
        *value = "x", *why = "'x' is not a number";
        return true;
    case GS_CFG_BYTES:
        *value = "12XB", *why = "'12XB' is not a size";
        return true;
    case GS_CFG_ENUM:
        *value = "nope", *why = "'nope' is not one of ";
        return true;
    case GS_CFG_BOOL:
        *value = "maybe", *why = "'maybe' is not a boolean";
        return true;
    default:
        return false; /* any text is a string's value */
    }
}

Test(tool_options, every_row_refuses_a_bad_value_naming_the_flag)
{
    size_t n, checked = 0;
    const struct gs_tool *t = tools(&n);
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < t[i].spec->n_opts; k++) {
            const struct gs_cfg_opt *o = &t[i].spec->opts[k];
            const char *value, *why;
            if (!bad_value(o, &value, &why))
                continue;
            char *out = NULL, want[256];
            int rc = graphserve(&out, true, "%s --%s=%s", t[i].name, o->name, value);
            snprintf(want, sizeof(want), "graphserve %s: --%s: %s", t[i].name, o->name, why);
            cr_expect_eq(rc, 2, "%s --%s=%s exited %d", t[i].name, o->name, value, rc);
            cr_expect(strstr(out, want) == out, "want '%s', got '%s'", want, out);
            free(out);
            /* Above the range, for ranges whose bound prints exactly. */
            if (o->type == GS_CFG_INT && o->max < 1e15) {
                rc = graphserve(&out, true, "%s --%s %.0f", t[i].name, o->name, o->max + 1);
                snprintf(want, sizeof(want),
                         "graphserve %s: --%s: %.0f is out of range [%.0f, %.0f]", t[i].name,
                         o->name, o->max + 1, o->min, o->max);
                cr_expect_eq(rc, 2, "%s --%s %.0f exited %d", t[i].name, o->name, o->max + 1, rc);
                cr_expect(strstr(out, want) == out, "want '%s', got '%s'", want, out);
                free(out);
            }
            checked++;
        }
    cr_assert_gt(checked, 50, "only %zu typed rows", checked);
}

/* What follows "graphserve <cmd>: " on the first line of out (in place). */
static const char *reason(char *out, const char *cmd)
{
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "graphserve %s: ", cmd);
    cr_assert(strstr(out, prefix) == out, "%s", out);
    char *nl = strchr(out, '\n');
    if (nl)
        *nl = '\0';
    return out + strlen(prefix);
}

Test(tool_options, a_shared_option_is_refused_alike_by_every_tool_and_serve)
{
    static const char *const bad[] = {"x", "5000", "-1", ""};
    size_t n;
    const struct gs_tool *t = tools(&n);
    for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
        char *first = NULL;
        cr_assert_eq(graphserve(&first, true, "serve --threads '%s'", bad[b]), 2, "%s", first);
        const char *want = reason(first, "serve");
        size_t with = 0;
        for (size_t i = 0; i < n; i++) {
            bool has = false;
            for (size_t k = 0; k < t[i].spec->n_opts; k++)
                has |= !strcmp(t[i].spec->opts[k].name, "threads");
            if (!has)
                continue;
            char *out = NULL;
            cr_expect_eq(graphserve(&out, true, "%s --threads '%s'", t[i].name, bad[b]), 2,
                         "%s: %s", t[i].name, out);
            cr_expect_str_eq(reason(out, t[i].name), want, "%s --threads '%s'", t[i].name, bad[b]);
            free(out);
            with++;
        }
        cr_assert_geq(with, 2, "fewer than two tools have --threads");
        free(first);
    }
}
