/*
 * tests/config/test_log.c - the structured logger: both formats parse back to
 * the values logged, levels filter, long lines stay parseable, and lines from
 * several threads never interleave.
 */
#define _GNU_SOURCE
#include "config/log.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static FILE *g_f;
static char *g_text;
static size_t g_len;

static void capture_start(enum gs_log_level lvl, enum gs_log_format fmt)
{
    g_f = open_memstream(&g_text, &g_len);
    cr_assert(g_f);
    gs_log_set_stream(g_f);
    gs_log_configure(lvl, fmt);
}

/* Returns what was logged; caller frees. */
static char *capture_end(void)
{
    gs_log_set_stream(NULL);
    fclose(g_f);
    return g_text;
}

Test(log_logfmt, writes_key_values_with_quoting)
{
    capture_start(GS_LOG_INFO, GS_LOG_LOGFMT);
    gs_log(GS_LOG_INFO, "request", "id=%llu status=%d path=%s ms=%.1f note=%s ratio=%zu%%", 42ull,
           200, "/v1/models", 1.25, "two words \"quoted\"", (size_t)7);
    char *t = capture_end();
    cr_assert(!strncmp(t, "ts=", 3), "%s", t);
    cr_assert(strstr(t, " level=info event=request id=42 status=200 path=/v1/models ms=1.2"), "%s",
              t);
    cr_assert(strstr(t, " note=\"two words \\\"quoted\\\"\""), "%s", t);
    cr_assert(strstr(t, " ratio=7%\n"), "%s", t);
    cr_assert_eq(strchr(t, '\n'), t + strlen(t) - 1, "one line: %s", t);
    free(t);
}

Test(log_json, values_keep_their_types)
{
    capture_start(GS_LOG_DEBUG, GS_LOG_JSON);
    const char *volatile null_str = NULL;
    gs_log(GS_LOG_WARN, "slow", "id=%u lat=%.3f who=%s none=%s hex=%x inf=%f text=\"%s\" bad=%s",
           7u, 0.5, "a\tb", null_str, 255u, 1.0 / 0.0, "q", "\xff\xfe ok");
    char *t = capture_end();
    json_error_t jerr;
    json_t *j = json_loads(t, 0, &jerr);
    cr_assert(j, "not JSON (%s): %s", jerr.text, t);
    cr_assert_str_eq(json_string_value(json_object_get(j, "level")), "warn");
    cr_assert_str_eq(json_string_value(json_object_get(j, "event")), "slow");
    cr_assert(json_is_integer(json_object_get(j, "id")));
    cr_assert_eq(json_integer_value(json_object_get(j, "id")), 7);
    cr_assert(json_is_real(json_object_get(j, "lat")));
    cr_assert_str_eq(json_string_value(json_object_get(j, "who")), "a\tb");
    cr_assert(json_is_null(json_object_get(j, "none")));
    cr_assert_str_eq(json_string_value(json_object_get(j, "hex")), "ff");
    cr_assert_str_eq(json_string_value(json_object_get(j, "inf")), "inf");
    cr_assert_str_eq(json_string_value(json_object_get(j, "text")), "\"q\"");
    cr_assert_str_eq(json_string_value(json_object_get(j, "bad")), "\xef\xbf\xbd\xef\xbf\xbd ok");
    cr_assert(json_is_string(json_object_get(j, "ts")));
    json_decref(j);
    free(t);
}

Test(log_level, filters_below_the_configured_level)
{
    capture_start(GS_LOG_WARN, GS_LOG_LOGFMT);
    cr_assert(!gs_log_enabled(GS_LOG_INFO));
    cr_assert(gs_log_enabled(GS_LOG_ERROR));
    gs_log(GS_LOG_DEBUG, "dropped", "a=1");
    gs_log(GS_LOG_INFO, "dropped", "a=2");
    gs_log(GS_LOG_ERROR, "kept", "a=3");
    gs_log_configure(GS_LOG_DEBUG, GS_LOG_LOGFMT); /* as a SIGHUP reload does */
    gs_log(GS_LOG_DEBUG, "now_kept", "a=4");
    char *t = capture_end();
    cr_assert(!strstr(t, "dropped"), "%s", t);
    cr_assert(strstr(t, "level=error event=kept a=3"), "%s", t);
    cr_assert(strstr(t, "level=debug event=now_kept a=4"), "%s", t);
    free(t);
}

/* A line over the limit drops whole pairs and says so; JSON still parses. */
Test(log_json, long_lines_are_cut_cleanly)
{
    char big[1500];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = 0;
    for (int fmt = 0; fmt < 2; fmt++) {
        capture_start(GS_LOG_INFO, (enum gs_log_format)fmt);
        gs_log(GS_LOG_INFO, "big", "a=%s b=%s c=%s d=%s e=%d", big, big, big, big, 5);
        char *t = capture_end();
        cr_assert(strlen(t) <= GS_LOG_LINE_MAX, "%zu", strlen(t));
        cr_assert_eq(strchr(t, '\n'), t + strlen(t) - 1);
        if (fmt == GS_LOG_JSON) {
            json_error_t jerr;
            json_t *j = json_loads(t, 0, &jerr);
            cr_assert(j, "cut JSON line does not parse (%s): %s", jerr.text, t);
            cr_assert(json_is_true(json_object_get(j, "truncated")));
            cr_assert_str_eq(json_string_value(json_object_get(j, "a")), big);
            cr_assert_null(json_object_get(j, "e"));
            json_decref(j);
        } else {
            cr_assert(strstr(t, " truncated=true\n"), "%s", t);
        }
        free(t);
    }
}

#define N_THREADS 4
#define N_LINES   300

static void *writer(void *arg)
{
    int id = (int)(intptr_t)arg;
    for (int i = 0; i < N_LINES; i++)
        gs_log(GS_LOG_INFO, "tick", "thread=%d i=%d pad=%s", id, i,
               "some padding so that lines are long enough to interleave if unlocked");
    return NULL;
}

/* Lines from the loop and engine threads never interleave. */
Test(log_threads, lines_never_interleave)
{
    capture_start(GS_LOG_INFO, GS_LOG_JSON);
    pthread_t th[N_THREADS];
    for (int i = 0; i < N_THREADS; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, writer, (void *)(intptr_t)i), 0);
    for (int i = 0; i < N_THREADS; i++)
        pthread_join(th[i], NULL);
    char *t = capture_end();
    int count[N_THREADS] = {0}, lines = 0;
    for (char *line = strtok(t, "\n"); line; line = strtok(NULL, "\n")) {
        json_error_t jerr;
        json_t *j = json_loads(line, 0, &jerr);
        cr_assert(j, "line %d does not parse: %s", lines, line);
        int id = (int)json_integer_value(json_object_get(j, "thread"));
        cr_assert_eq(json_integer_value(json_object_get(j, "i")), count[id], "order in thread");
        count[id]++;
        lines++;
        json_decref(j);
    }
    cr_assert_eq(lines, N_THREADS * N_LINES);
    free(t);
}
