/*
 * config/cli.h - the command line of graphserve's tools (tools/), from an
 * option table: the same rows (struct gs_cfg_opt, config/config.h) and the
 * same value parser as `serve`'s flags, so every command reads a value, checks
 * its range and refuses it with the same words:
 *   "graphserve bench: --threads: 'x' is not an integer"
 *   "graphserve run: -n: 99999999 is out of range [0, 1048576]"
 *   "graphserve graph: --format: 'svg' is not one of text, dot, json"
 * and --help lists every row with its placeholder, default and range.
 *
 * A tool's table is an array of struct gs_cfg_opt whose offsets are into the
 * tool's own options struct; the field types are those of config.h (bool,
 * int64_t, uint64_t, double, int for an enum's choice index) except:
 *   GS_CFG_STR   a `const char *`, borrowed: it points into argv or at the
 *                row's default, so nothing needs freeing;
 *   GS_CFG_LIST  a struct gs_cli_list, every value of a repeated flag, borrowed.
 * Flags that matter here: GS_CFG_F_REQUIRED (refused when absent) and
 * GS_CFG_F_PATH, which only names the value FILE in --help: the tool opens the
 * file and reports a failure itself (exit status 1, not 2).
 *
 * Syntax (as serve's): --name VALUE, --name=VALUE, -x VALUE (short_flag), a
 * bool alone or --no-name, -h/--help anywhere, "--" ends the options. Every
 * other argument is positional, in order, up to the spec's max_args.
 */
#ifndef GS_CONFIG_CLI_H
#define GS_CONFIG_CLI_H

#include "config/config.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define GS_CLI_MAX_ARGS 8    /* positional arguments, at most */
#define GS_CLI_MAX_LIST 1024 /* values of one repeated flag, at most */

struct gs_cli_list {
    size_t n;
    const char *v[GS_CLI_MAX_LIST];
};

/* A command: its name, its table, and what --help says around the table. */
struct gs_cli_spec {
    const char *cmd;      /* "bench" */
    const char *synopsis; /* after "usage: graphserve bench ": "-m FILE [options]" */
    const char *about;    /* lines printed after the usage line, or NULL */
    const struct gs_cfg_opt *opts;
    size_t n_opts;               /* at most 64 */
    unsigned min_args, max_args; /* positional arguments (max <= GS_CLI_MAX_ARGS) */
};

/* What the command line held besides option values. */
struct gs_cli_args {
    bool help;       /* -h or --help: print gs_cli_help(), exit 0 */
    unsigned n_args; /* positional arguments, pointing into argv */
    const char *args[GS_CLI_MAX_ARGS];
    uint64_t given; /* bit i: opts[i] appeared on the command line */
};

/*
 * Sets every row of spec that has a default text to it in opts (rows without
 * one keep what the caller put there, so zero the struct first, or set a
 * library's defaults), then applies argv (argv[0]
 * is the command's name and is skipped). On -h/--help returns GS_OK at once
 * with out->help set (nothing else is checked). GS_INVAL with a message that
 * names the flag as written for an unknown option, a bad value, a missing
 * value, a missing required option or too few or too many arguments.
 */
enum gs_status gs_cli_parse(const struct gs_cli_spec *spec, void *opts, int argc, char **argv,
                            struct gs_cli_args *out, struct gs_err *err);

/* gs_cli_parse, then what every tool does with its result: prints help to
 * stdout and returns 0, or prints "graphserve <cmd>: <message>" and the usage
 * line to stderr and returns 2; returns -1 when the command should run. */
int gs_cli_begin(const struct gs_cli_spec *spec, void *opts, int argc, char **argv,
                 struct gs_cli_args *out);

/* True when the row named name (its long name) was on the command line. */
bool gs_cli_given(const struct gs_cli_spec *spec, const struct gs_cli_args *a, const char *name);

/* Prints "usage: graphserve <cmd> <synopsis>", the about text, and one entry
 * per row: flags, placeholder, help, default and range. A numeric or enum row
 * without a default text leaves its field as the caller set it before
 * parsing (a library's own default: validate's thresholds are
 * engine/validate's), and help then shows that value from opts (NULL: "unset"). */
void gs_cli_help(const struct gs_cli_spec *spec, const void *opts, FILE *f);

/* ---- messages ------------------------------------------------------------- */

/* Prints "graphserve <cmd>: <fmt>\n" to stderr and returns 1. */
int gs_cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints "usage: graphserve <cmd> <usage>\n" to stderr and returns 2. */
int gs_cli_usage(const char *cmd, const char *usage);

/* Parses one integer in [min, max] that is part of a value (an element of
 * a comma-separated list) with the words a flag's value gets; on failure
 * prints "graphserve <cmd>: <where>: ..." and returns false. */
bool gs_cli_parse_int(const char *cmd, const char *where, const char *s, int64_t min, int64_t max,
                      int64_t *out);

#endif /* GS_CONFIG_CLI_H */
