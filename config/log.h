/*
 * config/log.h - graphserve's structured logger: one line per event on stderr,
 * as logfmt or as JSON, chosen by the config (log_format, log_level).
 *
 *   gs_log(GS_LOG_INFO, "request", "id=%llu status=%d path=%s ms=%.1f",
 *          (unsigned long long)id, 200, "/v1/models", 1.5);
 *
 * prints, in logfmt,
 *
 *   ts=2026-11-29T15:02:03.123Z level=info event=request id=7 status=200 path=/v1/models ms=1.5
 *
 * and, in JSON,
 *
 *   {"ts":"2026-11-29T15:02:03.123Z","level":"info","event":"request","id":7,"status":200,...}
 *
 * The format argument is a space-separated list of key=value pairs; a value is
 * either literal text or exactly one printf conversion (%d %u %ld %llu %zu %x
 * %s %c %f %g %e %p, with flags, width and precision, no '*'). Each value is
 * quoted and escaped for the chosen format; numeric conversions are JSON
 * numbers, everything else JSON strings; a NULL %s prints as null / empty.
 * Keys are written as given; use [a-z0-9_] so that both formats stay tidy.
 *
 * Threads: every function may be called from any thread (the loop thread and
 * the engine thread both log). A line is formatted on the caller's stack and
 * written with one locked write, so lines never interleave. The level and the
 * format are atomics: gs_log_configure() from a SIGHUP reload takes effect on
 * the next line of every thread.
 *
 * Ownership: nothing is allocated. One value is cut at 2 KiB; pairs that do
 * not fit in GS_LOG_LINE_MAX are left out and the line ends with
 * truncated=true, so that even a cut JSON line parses.
 */
#ifndef GS_LOG_H
#define GS_LOG_H

#include <stdbool.h>
#include <stdio.h>

/* The order is the order of severity; the names are the config's choices. */
enum gs_log_level {
    GS_LOG_DEBUG = 0,
    GS_LOG_INFO = 1,
    GS_LOG_WARN = 2,
    GS_LOG_ERROR = 3,
};

enum gs_log_format {
    GS_LOG_LOGFMT = 0,
    GS_LOG_JSON = 1,
};

#define GS_LOG_LINE_MAX 4096

/* Lines below min are dropped. Defaults before any call: info, logfmt. */
void gs_log_configure(enum gs_log_level min, enum gs_log_format format);

/* Where lines go: stderr unless a test redirects it (NULL restores stderr). */
void gs_log_set_stream(FILE *f);

/* True when a line at level would be written (to skip costly arguments). */
bool gs_log_enabled(enum gs_log_level level);

/* "debug", "info", "warn", "error". */
const char *gs_log_level_name(enum gs_log_level level);

/* Writes one event line; see the file comment for fmt. */
void gs_log(enum gs_log_level level, const char *event, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* GS_LOG_H */
