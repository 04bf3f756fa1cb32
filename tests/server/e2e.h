/*
 * tests/server/e2e.h - helpers for end-to-end tests: the real `graphserve
 * serve` as a child process on 127.0.0.1 with an ephemeral port, and HTTP
 * through the curl program.
 */
#ifndef GS_TEST_E2E_H
#define GS_TEST_E2E_H

#include <jansson.h>
#include <stdbool.h>
#include <sys/types.h>

struct e2e_daemon {
    pid_t pid;
    int port;
    char url[64];
    char log_path[512]; /* the daemon's stderr */
};

/* Starts graphserve serve -m <shared stories260K> --port 0 plus extra args
 * (a shell-quoted string, may be ""); waits for its "listening" line. */
void e2e_start(struct e2e_daemon *d, const char *extra_args);

/* e2e_start with the test gate `var` (GS_TEST_STEP_GATE, GS_TEST_EVENT_GATE, ...)
 * naming the file `gate`, which is then created: the gate holds from the first
 * request on (the known-answer check ran before it existed). Removing the file
 * opens it. */
void e2e_start_gated(struct e2e_daemon *d, const char *var, const char *gate,
                     const char *extra_args);

/* SIGTERM, wait; returns the exit status (128+signal when killed). Asserts
 * the daemon's log shows no sanitizer report. */
int e2e_stop(struct e2e_daemon *d);

struct e2e_resp {
    int status;
    char *headers; /* raw response headers, lower-cased names */
    char *body;
    json_t *json; /* body parsed, NULL if not JSON */
};

/* The longest any single wait of these helpers lasts before it fails: only a
 * genuine hang reaches it (a test's Criterion .timeout is the real bound).
 * Never a budget for real work: machines running the suite differ and are
 * shared and loaded. */
#define E2E_HANG_S 300

/* One request with curl (bounded by E2E_HANG_S as a hang guard only). body may be NULL; extra_curl
 * is added to curl's arguments as is (e.g. "-H 'Authorization: Bearer k'"). */
void e2e_http(const struct e2e_daemon *d, const char *method, const char *path, const char *body,
              const char *extra_curl, struct e2e_resp *out);
void e2e_resp_free(struct e2e_resp *r);

/* POSTs the n bodies to path all at once (n curls started together, then waited for)
 * and sets outs[i] to the i-th answer's body (malloc'ed; the caller frees each): for
 * tests that need many requests in flight together. Each curl is bounded by E2E_HANG_S. */
void e2e_post_at_once(const struct e2e_daemon *d, const char *path, const char *const *bodies,
                      size_t n, char **outs);

/* Writes body into a fresh file under the test's tmpdir; returns its path
 * (static buffer, valid until the next call). */
const char *e2e_body_file(const char *body);

/* Parses an SSE body: returns the array of JSON events (the "[DONE]" marker
 * is not in it; *done tells whether it was the last event). Asserts that
 * every data line is valid JSON. */
json_t *e2e_sse_events(const char *body, bool *done);

/* Parses an SSE body of named events ("event: NAME" then "data: JSON", Anthropic's
 * streams): returns the array of {"event": NAME, "data": JSON}. Asserts that every
 * event has both lines and valid JSON; comment lines (keepalives) are skipped. */
json_t *e2e_sse_named_events(const char *body);

/* The value of a metric sample line "name{labels} value" in a /metrics body,
 * or -1 when absent. name_and_labels must match up to the space exactly. */
double e2e_metric(const char *metrics, const char *name_and_labels);

/* Polls /metrics until the metric is at least at_least (or E2E_HANG_S pass:
 * only a hung daemon gets there); returns its last value. */
double e2e_await_metric(const struct e2e_daemon *d, const char *name, double at_least);

/* Waits until the daemon's log holds needle at least n times (polling the
 * file); fails after E2E_HANG_S. Returns how many times it does. */
int e2e_await_log(const struct e2e_daemon *d, const char *needle, int n);

/* Times needle occurs in the daemon's log now. */
int e2e_log_count(const struct e2e_daemon *d, const char *needle);

/* A copy of the shared model rel (a path under ../shared) with
 * tokenizer.chat_template = tmpl (n bytes), written to NAME.gguf in the test's
 * tmpdir and checked to open; returns its path (malloc'ed). */
char *e2e_model_with_template(const char *rel, const char *name, const char *tmpl, size_t n);

#endif
