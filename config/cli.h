/*
 * config/cli.h - the command line of graphserve's commands: messages in one
 * shape ("graphserve <cmd>: ...") and number parsing with a range.
 */
#ifndef GS_CONFIG_CLI_H
#define GS_CONFIG_CLI_H

#include <stdbool.h>
#include <stdint.h>

/* Parses a whole decimal integer / float in [min, max]. Prints an error naming
 * opt and returns false on anything else. */
bool gs_cli_parse_i64(const char *opt, const char *s, int64_t min, int64_t max, int64_t *out);
bool gs_cli_parse_f64(const char *opt, const char *s, double min, double max, double *out);

/* Prints "graphserve <cmd>: <fmt>\n" to stderr and returns 1 (2 for usage). */
int gs_cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int gs_cli_usage(const char *cmd, const char *usage);

#endif /* GS_CONFIG_CLI_H */
