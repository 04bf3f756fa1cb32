/* config/cli.c - argument parsing and error printing for the commands (config/cli.h). */
#include "config/cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

bool gs_cli_parse_i64(const char *opt, const char *s, int64_t min, int64_t max, int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || !*s || *end || errno || v < min || v > max) {
        fprintf(stderr, "graphserve: %s expects an integer in [%lld, %lld], got '%s'\n", opt,
                (long long)min, (long long)max, s ? s : "");
        return false;
    }
    *out = v;
    return true;
}

bool gs_cli_parse_f64(const char *opt, const char *s, double min, double max, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || !*s || *end || errno || !(v >= min && v <= max)) {
        fprintf(stderr, "graphserve: %s expects a number in [%g, %g], got '%s'\n", opt, min, max,
                s ? s : "");
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
