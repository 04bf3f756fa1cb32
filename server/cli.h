/*
 * server/cli.h - the graphserve command-line tools. Each command is a function
 * with main()'s signature, listed in main.c's command table, and lives in
 * server/cmd/<name>.c. A command prints results to stdout and errors to stderr
 * and returns the process exit status (0 ok, 1 failure, 2 usage error).
 */
#ifndef GS_CLI_H
#define GS_CLI_H

#include <stdbool.h>
#include <stdint.h>

int gs_cmd_serve(int argc, char **argv);
int gs_cmd_inspect(int argc, char **argv);
int gs_cmd_synth(int argc, char **argv);
int gs_cmd_train(int argc, char **argv);
int gs_cmd_tokenize(int argc, char **argv);
int gs_cmd_graph(int argc, char **argv);
int gs_cmd_run(int argc, char **argv);
int gs_cmd_validate(int argc, char **argv);
int gs_cmd_config(int argc, char **argv);
int gs_cmd_bench(int argc, char **argv);
int gs_cmd_quantize(int argc, char **argv);
int gs_cmd_template(int argc, char **argv);

/* ---- small helpers shared by the commands (cli_util.c) -------------------- */

/* Parses a whole decimal integer / float in [min, max]. Prints an error naming
 * opt and returns false on anything else. */
bool gs_cli_parse_i64(const char *opt, const char *s, int64_t min, int64_t max, int64_t *out);
bool gs_cli_parse_f64(const char *opt, const char *s, double min, double max, double *out);

/* Prints "graphserve <cmd>: <fmt>\n" to stderr and returns 1 (2 for usage). */
int gs_cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int gs_cli_usage(const char *cmd, const char *usage);

#endif /* GS_CLI_H */
