/*
 * tests/server/test_http_hostile.c - the bad-input catalogue: what a hostile
 * client, a rebinding web page or an odd proxy sends, against the real
 * daemon. Each case asserts the status, the error object's shape, that the
 * connection is closed where the stream cannot be trusted, and that a normal
 * request still succeeds afterwards. The misbehaving clients are in
 * hostile_client.py; every wait is on an event, bounded only against a hang.
 */
#define _GNU_SOURCE
#include "tests/common/testutil.h"
#include "tests/server/e2e.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The shell command that runs hostile_client.py with args (free it). */
static char *client_cmd(const char *args)
{
    char *cmd;
    cr_assert(asprintf(&cmd, "python3 '%s/tests/server/hostile_client.py' %s",
                       getenv("GS_SOURCE_DIR"), args) > 0);
    return cmd;
}

/* Runs hostile_client.py CMD PORT ARGS and returns its JSON answer. */
static json_t *client(const char *args)
{
    char *out, *cmd = client_cmd(args);
    int rc = gs_test_run(cmd, 0, &out);
    cr_assert_eq(rc, 0, "%s failed: %s", cmd, out);
    json_error_t e;
    json_t *j = json_loads(out, 0, &e);
    cr_assert(j, "not JSON from %s: %s", cmd, out);
    free(cmd);
    free(out);
    return j;
}

/* Starts a shell command in the background; its stdout comes back through
 * bg_output once it is done. */
static FILE *bg_start(char *cmd)
{
    FILE *bg = popen(cmd, "r");
    cr_assert(bg, "%s", cmd);
    free(cmd);
    return bg;
}

/* Waits for a background command and returns what it printed (free it). */
static char *bg_output(FILE *bg)
{
    size_t cap = 1 << 16, n = 0, got;
    char *out = malloc(cap);
    cr_assert(out);
    while ((got = fread(out + n, 1, cap - 1 - n, bg)) > 0)
        if ((n += got) == cap - 1)
            cr_assert((out = realloc(out, cap *= 2)));
    out[n] = '\0';
    cr_expect_eq(pclose(bg), 0, "a client failed: %s", out);
    return out;
}

static const char *err_code(json_t *resp)
{
    return json_string_value(
        json_object_get(json_object_get(json_object_get(resp, "json"), "error"), "code"));
}

static const char *err_type(json_t *resp)
{
    return json_string_value(
        json_object_get(json_object_get(json_object_get(resp, "json"), "error"), "type"));
}

static int status_of(json_t *resp)
{
    return (int)json_integer_value(json_object_get(resp, "status"));
}

static void expect_serving(struct e2e_daemon *d)
{
    struct e2e_resp r;
    e2e_http(d, "POST", "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":2}", NULL, &r);
    cr_expect_eq(r.status, 200, "a normal request after the bad ones: %s", r.body);
    e2e_resp_free(&r);
}

/* ---- framing ------------------------------------------------------------------------------ */

Test(http_hostile, ambiguous_framing_is_refused_and_the_connection_closed, .timeout = 300)
{
    struct e2e_daemon d;
    e2e_start(&d, "");
    char args[64];
    snprintf(args, sizeof(args), "framing %d", d.port);
    json_t *res = client(args);
    /* Refused by graphserve's head check: a JSON error object. */
    const char *ours[] = {"two_content_lengths", "same_content_length_twice", "length_and_chunked",
                          "unknown_coding", "coding_list", "two_codings", "two_hosts",
                          "bad_host_syntax"};
    for (size_t i = 0; i < sizeof(ours) / sizeof(ours[0]); i++) {
        json_t *r = json_object_get(res, ours[i]);
        cr_expect_eq(status_of(r), 400, "%s: %s", ours[i], json_dumps(r, 0));
        cr_expect_str_eq(err_type(r) ? err_type(r) : "", "invalid_request_error", "%s", ours[i]);
        cr_expect(json_is_true(json_object_get(r, "closed")), "%s: connection left open", ours[i]);
        cr_expect(strcasestr(json_string_value(json_object_get(r, "head")), "connection: close"),
                  "%s: no Connection: close", ours[i]);
        cr_expect_eq(json_integer_value(json_object_get(r, "status_lines")), 1, "%s", ours[i]);
    }
    /* Refused by libmicrohttpd before any route runs (its own HTML answer). */
    const char *mhd[] = {"no_host", "invalid_length", "space_before_colon"};
    for (size_t i = 0; i < sizeof(mhd) / sizeof(mhd[0]); i++) {
        json_t *r = json_object_get(res, mhd[i]);
        cr_expect_eq(status_of(r), 400, "%s: %s", mhd[i], json_dumps(r, 0));
        cr_expect(json_is_true(json_object_get(r, "closed")), "%s: connection left open", mhd[i]);
    }
    /* HTTP/1.0 may omit Host (a browser never does). */
    json_t *r10 = json_object_get(res, "http10_without_host");
    cr_expect_eq(status_of(r10), 200, "%s", json_dumps(r10, 0));
    json_decref(res);
    expect_serving(&d);
    cr_expect_eq(e2e_stop(&d), 0);
}

/* ---- names: DNS rebinding and cross-site posts ------------------------------------------- */

static json_t *tokenize_with(struct e2e_daemon *d, const char *host, const char *origin,
                             const char *ctype)
{
    char args[512];
    snprintf(args, sizeof(args), "raw %d '%s' '%s' '%s'", d->port, host, origin, ctype);
    return client(args);
}

static void expect_status(struct e2e_daemon *d, const char *host, const char *origin,
                          const char *ctype, int want, const char *code)
{
    json_t *r = tokenize_with(d, host, origin, ctype);
    cr_expect_eq(status_of(r), want, "Host %s Origin %s Content-Type %s: %s", host, origin, ctype,
                 json_dumps(r, 0));
    if (code)
        cr_expect_str_eq(err_code(r) ? err_code(r) : "", code, "Host %s Origin %s", host, origin);
    json_decref(r);
}

Test(http_hostile, loopback_without_keys_accepts_only_its_own_names, .timeout = 300)
{
    struct e2e_daemon d;
    e2e_start(&d, "");
    const char *json = "application/json";
    expect_status(&d, "evil.example", "-", json, 403, "forbidden");
    expect_status(&d, "evil.example:8080", "-", json, 403, "forbidden");
    expect_status(&d, "localhost.evil.example", "-", json, 403, "forbidden");
    expect_status(&d, "localhost", "-", json, 200, NULL);
    expect_status(&d, "LOCALHOST.:8080", "-", json, 200, NULL);
    expect_status(&d, "app.localhost", "-", json, 200, NULL);
    expect_status(&d, "127.0.0.1:8080", "-", json, 200, NULL);
    expect_status(&d, "10.1.2.3", "-", json, 200, NULL); /* a literal cannot be rebound */
    expect_status(&d, "[::1]:8080", "-", json, 200, NULL);
    /* A cross-site page posts with its own Origin. */
    expect_status(&d, "localhost", "http://evil.example", json, 403, "forbidden");
    expect_status(&d, "localhost", "null", json, 403, "forbidden");
    expect_status(&d, "localhost", "http://localhost:3000", json, 200, NULL);
    expect_serving(&d);
    cr_expect_eq(e2e_stop(&d), 0);
}

Test(http_hostile, allowed_hosts_and_keys_widen_the_names, .timeout = 300)
{
    struct e2e_daemon d;
    e2e_start(&d, "--allowed-hosts my.box --allowed-hosts .example.org");
    const char *json = "application/json";
    expect_status(&d, "my.box:8080", "-", json, 200, NULL);
    expect_status(&d, "api.example.org", "https://ui.example.org", json, 200, NULL);
    expect_status(&d, "evil.example", "-", json, 403, "forbidden");
    expect_status(&d, "localhost", "-", json, 200, NULL);
    cr_expect_eq(e2e_stop(&d), 0);
    /* With a key, a rebinding page has nothing to gain: names are not checked. */
    e2e_start(&d, "--api-key k");
    struct e2e_resp resp;
    e2e_http(&d, "GET", "/v1/models", NULL, "-H 'Host: anything.example' -H 'Authorization: Bearer k'",
             &resp);
    cr_expect_eq(resp.status, 200, "%s", resp.body);
    e2e_resp_free(&resp);
    cr_expect_eq(e2e_stop(&d), 0);
    e2e_start(&d, "--allowed-hosts '*'");
    expect_status(&d, "evil.example", "http://evil.example", json, 200, NULL);
    cr_expect_eq(e2e_stop(&d), 0);
}

Test(http_hostile, bodies_must_be_json, .timeout = 300)
{
    struct e2e_daemon d;
    e2e_start(&d, "");
    expect_status(&d, "localhost", "-", "text/plain", 415, "unsupported_media_type");
    expect_status(&d, "localhost", "-", "multipart/form-data; boundary=x", 415,
                  "unsupported_media_type");
    expect_status(&d, "localhost", "-", "application/json; charset=utf-8", 200, NULL);
    expect_status(&d, "localhost", "-", "APPLICATION/JSON", 200, NULL);
    expect_status(&d, "localhost", "-", "-", 200, NULL);
    /* curl -d's default label */
    expect_status(&d, "localhost", "-", "application/x-www-form-urlencoded", 200, NULL);
    expect_serving(&d);
    cr_expect_eq(e2e_stop(&d), 0);
}

/* ---- slow senders --------------------------------------------------------------------------- */

/* Eight connections from another address drip header bytes forever (each
 * byte restarts libmicrohttpd's idle timer) and fill --max-conns 8; with no
 * request deadline at all, only eviction of the oldest idle connection can
 * let a new client in. */
Test(http_hostile, slow_senders_cannot_hold_every_slot, .timeout = 300)
{
    struct e2e_daemon d;
    e2e_start(&d, "--max-conns 8 --request-timeout-s 0");
    char ready[600], stop[600];
    snprintf(ready, sizeof(ready), "%s/hold-ready-%d", gs_test_tmpdir(), getpid());
    snprintf(stop, sizeof(stop), "%s/hold-stop-%d", gs_test_tmpdir(), getpid());
    unlink(ready);
    unlink(stop);
    char args[1400];
    snprintf(args, sizeof(args), "hold %d 8 127.0.0.2 '%s' '%s'", d.port, ready, stop);
    FILE *bg = bg_start(client_cmd(args));
    for (int i = 0; i < 3000 && access(ready, F_OK) != 0; i++)
        usleep(100 * 1000);
    cr_assert(access(ready, F_OK) == 0, "the slow clients did not connect");
    struct e2e_resp r;
    e2e_http(&d, "GET", "/health", NULL, NULL, &r);
    cr_expect_eq(r.status, 200, "a new client while slow ones hold the slots: %s", r.body);
    e2e_resp_free(&r);
    FILE *f = fopen(stop, "w");
    cr_assert(f);
    fclose(f);
    char *out = bg_output(bg);
    json_t *j = json_loads(out, 0, NULL);
    cr_assert(j, "%s", out);
    cr_expect_geq(json_integer_value(json_object_get(j, "cut")), 1, "%s", out);
    json_decref(j);
    free(out);
    e2e_http(&d, "GET", "/metrics", NULL, NULL, &r);
    cr_expect_geq(e2e_metric(r.body, "graphserve_connections_cut_total{reason=\"evicted\"}"), 1,
                  "%s", r.body);
    e2e_resp_free(&r);
    expect_serving(&d);
    cr_expect_eq(e2e_stop(&d), 0);
}

/* A request whose headers drip in one byte per 10 ms would take 30 s; the
 * deadline of 1 s cuts it however steadily the bytes come. */
Test(http_hostile, a_dripping_request_is_cut_at_its_deadline, .timeout = 300)
{
    struct e2e_daemon d;
    e2e_start(&d, "--request-timeout-s 1");
    char args[64];
    snprintf(args, sizeof(args), "drip %d 3000", d.port);
    json_t *j = client(args);
    cr_expect(json_is_true(json_object_get(j, "closed")), "never cut: %s", json_dumps(j, 0));
    cr_expect_lt(json_integer_value(json_object_get(j, "sent")), 3000, "%s", json_dumps(j, 0));
    json_decref(j);
    struct e2e_resp r;
    e2e_http(&d, "GET", "/metrics", NULL, NULL, &r);
    cr_expect_geq(e2e_metric(r.body, "graphserve_connections_cut_total{reason=\"request_timeout\"}"),
                  1, "%s", r.body);
    e2e_resp_free(&r);
    expect_serving(&d);
    cr_expect_eq(e2e_stop(&d), 0);
}

/* ---- half-closed clients ---------------------------------------------------------------------- */

/* Clients that shut down their sending side after the request (nc -N, some
 * proxies) still read the answer. The engine is held (GS_TEST_STEP_GATE)
 * while both requests wait; the clients shut down their sending side once
 * both are admitted, and the daemon's once-a-second check of waiting
 * connections gets three looks at them; the answers must then arrive whole.
 * (A FIN that arrives with the request, before libmicrohttpd hands the
 * request over, is closed by libmicrohttpd 0.9.75 itself: docs/SERVER.md,
 * "Cancellation and shutdown". That is not what this test can promise.) */
Test(http_hostile, half_closed_clients_get_their_answer, .timeout = 300)
{
    char gate[600], go[600];
    snprintf(gate, sizeof(gate), "%s/halfclose-gate-%d", gs_test_tmpdir(), getpid());
    snprintf(go, sizeof(go), "%s/halfclose-go-%d", gs_test_tmpdir(), getpid());
    unlink(go);
    struct e2e_daemon d;
    e2e_start_gated(&d, "GS_TEST_STEP_GATE", gate, "--backend ref");
    char whole[600], stream[600];
    snprintf(whole, sizeof(whole), "%s",
             e2e_body_file("{\"prompt\":\"Once upon a time\",\"max_tokens\":24,\"ignore_eos\":true}"));
    snprintf(stream, sizeof(stream), "%s",
             e2e_body_file("{\"prompt\":\"Once upon a time\",\"max_tokens\":24,\"ignore_eos\":true,"
                           "\"stream\":true}"));
    char args[1400], *one, *both;
    snprintf(args, sizeof(args), "halfclose %d /v1/completions '%s' '%s'", d.port, whole, go);
    one = client_cmd(args);
    snprintf(args, sizeof(args), "halfclose %d /v1/completions '%s' '%s'", d.port, stream, go);
    char *two = client_cmd(args);
    /* Each client answers into its own file: two answers longer than a pipe's
     * atomic write would interleave on one pipe. */
    char out1[600], out2[600];
    snprintf(out1, sizeof(out1), "%s/halfclose-out1-%d", gs_test_tmpdir(), getpid());
    snprintf(out2, sizeof(out2), "%s/halfclose-out2-%d", gs_test_tmpdir(), getpid());
    cr_assert(asprintf(&both, "%s >'%s' & %s >'%s' & wait; cat '%s'; cat '%s'", one, out1, two,
                       out2, out1, out2) > 0);
    free(one);
    free(two);
    FILE *bg = bg_start(both);
    cr_assert_geq(e2e_await_metric(&d, "graphserve_requests_in_flight", 2), 2,
                  "the two requests were not admitted");
    FILE *f = fopen(go, "w");
    cr_assert(f);
    fclose(f);
    /* The check runs each second while requests wait; three give it its chance. */
    usleep(3000 * 1000);
    unlink(gate);
    char *out = bg_output(bg);
    char *line2 = strchr(out, '\n');
    cr_assert(line2, "%s", out);
    *line2++ = '\0';
    json_t *a = json_loads(out, 0, NULL), *b = json_loads(line2, 0, NULL);
    cr_assert(a && b, "%s | %s", out, line2);
    int streamed = 0, whole_ok = 0;
    json_t *rs[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        json_t *r = rs[i];
        cr_expect_eq(status_of(r), 200, "%s", json_dumps(r, 0));
        const char *body = json_string_value(json_object_get(r, "body"));
        if (strstr(body, "data: [DONE]"))
            streamed++;
        else if (json_integer_value(json_object_get(
                     json_object_get(json_object_get(r, "json"), "usage"), "completion_tokens")) == 24)
            whole_ok++;
    }
    cr_expect_eq(streamed, 1, "the streamed answer did not end with [DONE]: %s", out);
    cr_expect_eq(whole_ok, 1, "the whole answer did not carry its 24 tokens: %s", out);
    json_decref(a);
    json_decref(b);
    free(out);
    unlink(out1);
    unlink(out2);
    struct e2e_resp r;
    e2e_http(&d, "GET", "/metrics", NULL, NULL, &r);
    cr_expect_eq(e2e_metric(r.body, "graphserve_cancellations_total"), 0, "%s", r.body);
    e2e_resp_free(&r);
    cr_expect_eq(e2e_stop(&d), 0);
}

/* A FIN right behind the request, while the engine is busy with other streams: before
 * the relay held it, libmicrohttpd 0.9.75 read it first on 143 of 200 such requests here
 * and closed the connection unanswered. Every one must get its whole answer. */
Test(http_hostile, a_fin_sent_with_the_request_still_gets_its_answer, .timeout = 300)
{
    struct e2e_daemon d;
    e2e_start(&d, "--backend ref --drain-timeout-s 0");
    const char *load = e2e_body_file(
        "{\"prompt\":\"Once upon a time\",\"max_tokens\":400,\"ignore_eos\":true}");
    char *cmd;
    cr_assert(asprintf(&cmd,
                       "for i in 1 2 3 4; do curl -s --data-binary @%s %s/v1/completions "
                       ">/dev/null & done; wait",
                       load, d.url) > 0);
    FILE *bg = bg_start(cmd);
    char args[64];
    snprintf(args, sizeof(args), "finmany %d 25 4", d.port);
    json_t *j = client(args);
    cr_expect_eq(json_integer_value(json_object_get(j, "answered")),
                 json_integer_value(json_object_get(j, "sent")), "%s", json_dumps(j, 0));
    cr_expect_eq(json_integer_value(json_object_get(j, "sent")), 100);
    json_decref(j);
    cr_expect_eq(e2e_stop(&d), 0);
    pclose(bg);
}

/* ---- clients that do not read ----------------------------------------------------------------- */

/* A noread client (hostile_client.py) reads on once GO exists: its result, whose
 * stream must end with the stream_buffer_full error event and [DONE]. */
static json_t *noread_result(FILE *bg, const char *go)
{
    FILE *f = fopen(go, "w");
    cr_assert(f);
    fclose(f);
    char *out = bg_output(bg);
    json_t *j = json_loads(out, 0, NULL);
    cr_assert(j, "%s", out);
    free(out);
    const char *tail = json_string_value(json_object_get(j, "tail"));
    cr_expect(strstr(tail, "\"stream_buffer_full\""), "no error event at the end: %s", tail);
    cr_expect(strstr(tail, "data: [DONE]"), "no [DONE] at the end: %s", tail);
    return j;
}

/* Eight choices with five alternatives each make far more stream than the
 * client's 4 KiB window and the sockets hold; the daemon keeps at most
 * --max-stream-buffer-bytes of it, then cancels the request and closes the
 * stream with an error event. */
Test(http_hostile, a_client_that_stops_reading_is_cancelled, .timeout = 600)
{
    struct e2e_daemon d;
    e2e_start(&d, "--max-stream-buffer-bytes 64KiB");
    char go[600], body[600];
    snprintf(go, sizeof(go), "%s/noread-go-%d", gs_test_tmpdir(), getpid());
    unlink(go);
    snprintf(body, sizeof(body), "%s",
             e2e_body_file("{\"prompt\":\"Once upon a time\",\"max_tokens\":1500,\"ignore_eos\":true,"
                           "\"n\":8,\"logprobs\":5,\"stream\":true}"));
    char args[1400];
    snprintf(args, sizeof(args), "noread %d '%s' '%s'", d.port, body, go);
    FILE *bg = bg_start(client_cmd(args));
    /* Either the daemon cuts the stream, or (unfixed) the request runs to its end. */
    double cut = -1, generated = 0;
    for (int i = 0; i < 6000 && cut < 1; i++) {
        struct e2e_resp m;
        e2e_http(&d, "GET", "/metrics", NULL, NULL, &m);
        cut = e2e_metric(m.body, "graphserve_slow_reader_cancellations_total");
        generated = e2e_metric(m.body, "graphserve_generation_tokens_total");
        e2e_resp_free(&m);
        if (generated >= 8 * 1500)
            break;
        usleep(50 * 1000);
    }
    cr_expect_eq(cut, 1, "the stream was not cut (generated %.0f tokens)", generated);
    json_t *j = noread_result(bg, go);
    json_decref(j);
    /* Every page comes back once the cancelled choices have ended. */
    double used = 1;
    for (int i = 0; i < 3000 && used != 0; i++) {
        struct e2e_resp m;
        e2e_http(&d, "GET", "/metrics", NULL, NULL, &m);
        used = e2e_metric(m.body, "graphserve_kv_pages{state=\"used\"}");
        e2e_resp_free(&m);
        if (used != 0)
            usleep(100 * 1000);
    }
    cr_expect_eq(used, 0);
    expect_serving(&d);
    cr_expect_eq(e2e_stop(&d), 0);
}

/* The engine's step count (published after each step). */
static double engine_steps(struct e2e_daemon *d)
{
    struct e2e_resp m;
    e2e_http(d, "GET", "/metrics", NULL, NULL, &m);
    double steps = e2e_metric(m.body, "graphserve_engine_steps_total");
    e2e_resp_free(&m);
    return steps;
}

/* Behind the event gate: waits until the engine has made a 1500-token answer (1000
 * steps past steps0 and nothing running or waiting) while the loop took none of it. */
static void await_gated_answer(struct e2e_daemon *d, double steps0)
{
    double steps = steps0, running = 1, waiting = 1;
    for (int i = 0; i < 6000 && !(steps >= steps0 + 1000 && running == 0 && waiting == 0); i++) {
        usleep(50 * 1000);
        struct e2e_resp m;
        e2e_http(d, "GET", "/metrics", NULL, NULL, &m);
        steps = e2e_metric(m.body, "graphserve_engine_steps_total");
        running = e2e_metric(m.body, "graphserve_requests_running");
        waiting = e2e_metric(m.body, "graphserve_requests_waiting");
        e2e_resp_free(&m);
    }
    cr_assert(steps >= steps0 + 1000 && running == 0 && waiting == 0,
              "the engine did not finish the answer (%.0f steps, %.0f running)", steps - steps0,
              running);
}

/* A client that reads is never cut, however much the loop queues at once. The
 * event gate (GS_TEST_EVENT_GATE) keeps the engine's events in its queue until the
 * engine has made the whole answer, as behind a loop thread that fell behind; the
 * loop then formats 1500 tokens' events in one round, far past
 * --max-stream-buffer-bytes. A second request's tokens keep the rounds coming while
 * the first client reads its backlog: it gets every token and the end of its stream. */
Test(http_hostile, a_client_that_reads_is_not_cut_by_a_burst_of_events, .timeout = 600)
{
    char gate[600], out_path[600];
    snprintf(gate, sizeof(gate), "%s/burst-gate-%d", gs_test_tmpdir(), getpid());
    snprintf(out_path, sizeof(out_path), "%s/burst-out-%d", gs_test_tmpdir(), getpid());
    struct e2e_daemon d;
    e2e_start_gated(&d, "GS_TEST_EVENT_GATE", gate, "--max-stream-buffer-bytes 64KiB");
    struct e2e_resp m;
    double steps0 = engine_steps(&d);
    const char *body = e2e_body_file("{\"prompt\":\"Once upon a time\",\"max_tokens\":1500,"
                                     "\"ignore_eos\":true,\"logprobs\":5,\"stream\":true}");
    char *cmd;
    cr_assert(asprintf(&cmd, "curl -sN --max-time 550 --data-binary @%s -o %s %s/v1/completions",
                       body, out_path, d.url) > 0);
    FILE *bg = bg_start(cmd);
    /* The engine has made every token (its counts are published after each step)
     * and the loop has taken none of them. */
    await_gated_answer(&d, steps0);
    if (access(out_path, F_OK) == 0) {
        char *early = gs_test_read_file(out_path, NULL);
        cr_expect(!strstr(early, "data: {"), "the gate let events through");
        free(early);
    }
    unlink(gate);
    e2e_http(&d, "POST", "/v1/completions",
             "{\"prompt\":\"Once\",\"max_tokens\":64,\"ignore_eos\":true}", NULL, &m);
    cr_expect_eq(m.status, 200, "%s", m.body);
    e2e_resp_free(&m);
    free(bg_output(bg));
    char *got = gs_test_read_file(out_path, NULL);
    cr_assert(got, "no stream");
    cr_expect(!strstr(got, "stream_buffer_full"), "a reading client was cut");
    cr_expect(strstr(got, "data: [DONE]"), "the stream did not end");
    size_t tokens = 0;
    for (const char *p = got; (p = strstr(p, "\"finish_reason\":null")); p++)
        tokens++;
    cr_expect(strstr(got, "\"finish_reason\":\"length\""), "the stream did not finish");
    free(got);
    cr_expect_eq(tokens, 1500, "%zu of 1500 tokens arrived", tokens);
    e2e_http(&d, "GET", "/metrics", NULL, NULL, &m);
    cr_expect_eq(e2e_metric(m.body, "graphserve_slow_reader_cancellations_total"), 0);
    e2e_resp_free(&m);
    unlink(out_path);
    cr_expect_eq(e2e_stop(&d), 0);
}

/* A client that does not read is cut even when its answer ended before the verdict:
 * the gate holds a stream's events (1500 tokens with 20 alternatives each, megabytes,
 * more than the sockets between hold) until the engine has finished it, so the loop
 * formats the whole answer, far past --max-stream-buffer-bytes, in the round
 * that ends it (as behind a loop thread that fell behind). A second request's tokens
 * keep the rounds coming; two of them without a read cut the stream, whose unsent
 * events are dropped for the error event. Before, an answer that ended within its
 * first rounds stayed queued whole for as long as the connection lived. */
Test(http_hostile, a_client_that_does_not_read_is_cut_after_its_answer_ended, .timeout = 600)
{
    char gate[600], go[600];
    snprintf(gate, sizeof(gate), "%s/noread-end-gate-%d", gs_test_tmpdir(), getpid());
    snprintf(go, sizeof(go), "%s/noread-end-go-%d", gs_test_tmpdir(), getpid());
    unlink(go);
    struct e2e_daemon d;
    e2e_start_gated(&d, "GS_TEST_EVENT_GATE", gate, "--max-stream-buffer-bytes 64KiB");
    struct e2e_resp m;
    double steps0 = engine_steps(&d);
    char body[600];
    snprintf(body, sizeof(body), "%s",
             e2e_body_file("{\"messages\":[{\"role\":\"user\",\"content\":\"Once upon a time\"}],"
                           "\"max_tokens\":1500,\"ignore_eos\":true,\"logprobs\":true,"
                           "\"top_logprobs\":20,\"stream\":true}"));
    char args[1400];
    snprintf(args, sizeof(args), "noread %d '%s' '%s' /v1/chat/completions", d.port, body, go);
    FILE *bg = bg_start(client_cmd(args));
    await_gated_answer(&d, steps0);
    unlink(gate);
    /* Each request's tokens are rounds; the cut comes at the second. */
    double cut = 0;
    for (int i = 0; i < 20 && cut < 1; i++) {
        e2e_http(&d, "POST", "/v1/completions",
                 "{\"prompt\":\"Once\",\"max_tokens\":8,\"ignore_eos\":true}", NULL, &m);
        cr_expect_eq(m.status, 200, "%s", m.body);
        e2e_resp_free(&m);
        e2e_http(&d, "GET", "/metrics", NULL, NULL, &m);
        cut = e2e_metric(m.body, "graphserve_slow_reader_cancellations_total");
        e2e_resp_free(&m);
    }
    cr_expect_eq(cut, 1, "the ended stream was not cut");
    json_t *j = noread_result(bg, go);
    const char *tail = json_string_value(json_object_get(j, "tail"));
    cr_expect(strstr(tail, "rest of the answer was dropped"), "%s", tail);
    /* The error follows a whole event: the one before it ends with a blank line. */
    const char *err = strstr(tail, "data: {\"error\"");
    cr_expect(err && err - tail >= 2 && err[-1] == '\n' && err[-2] == '\n', "%s", tail);
    /* Far fewer events than the answer's 1500 tokens reached the client. */
    cr_expect_lt(json_integer_value(json_object_get(j, "data_events")), 1500, "%s", tail);
    json_decref(j);
    unlink(go);
    expect_serving(&d);
    cr_expect_eq(e2e_stop(&d), 0);
}

/* ---- request parameters that leave nothing to sample ------------------------------------------ */

Test(http_hostile, logit_bias_that_bans_everything_or_misnames_ids_is_a_400, .timeout = 300)
{
    struct e2e_daemon d;
    e2e_start(&d, "");
    /* stories260K has 512 tokens */
    size_t cap = 512 * 16 + 128;
    char *body = malloc(cap);
    cr_assert(body);
    int w = snprintf(body, cap, "{\"prompt\":\"Once\",\"max_tokens\":2,\"logit_bias\":{");
    for (int i = 0; i < 512; i++)
        w += snprintf(body + w, cap - (size_t)w, "%s\"%d\":-100", i ? "," : "", i);
    snprintf(body + w, cap - (size_t)w, "}}");
    struct e2e_resp r;
    e2e_http(&d, "POST", "/v1/completions", body, NULL, &r);
    cr_expect_eq(r.status, 400, "%s", r.body);
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(r.json, "error"), "param")),
                     "logit_bias");
    e2e_resp_free(&r);
    /* All but one banned: that one is the answer. */
    char *one = strstr(body, "\"77\":-100");
    cr_assert(one);
    memcpy(one, "\"77\":   0", 9);
    e2e_http(&d, "POST", "/v1/completions", body, NULL, &r);
    cr_expect_eq(r.status, 200, "%s", r.body);
    e2e_resp_free(&r);
    free(body);
    const char *keys[] = {" 1", "+1", "01", "1 ", "0x1", "-1", "99999999999", ""};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        char b[256];
        snprintf(b, sizeof(b), "{\"prompt\":\"Once\",\"max_tokens\":2,\"logit_bias\":{\"%s\":5}}",
                 keys[i]);
        e2e_http(&d, "POST", "/v1/completions", b, NULL, &r);
        cr_expect_eq(r.status, 400, "key '%s': %s", keys[i], r.body);
        e2e_resp_free(&r);
    }
    expect_serving(&d);
    cr_expect_eq(e2e_stop(&d), 0);
}

/* ---- limits that contradict the model --------------------------------------------------------- */

Test(http_hostile, max_tokens_is_capped_at_the_context, .timeout = 300)
{
    struct e2e_daemon d;
    e2e_start(&d, "-c 64");
    struct e2e_resp r;
    e2e_http(&d, "POST", "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":100}", NULL, &r);
    cr_expect_eq(r.status, 400, "%s", r.body);
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(r.json, "error"), "param")),
                     "max_tokens", "%s", r.body);
    e2e_resp_free(&r);
    cr_expect_eq(e2e_stop(&d), 0);
    char *log = gs_test_read_file(d.log_path, NULL);
    cr_expect(strstr(log, "event=limits max_tokens=64 max_tokens_asked=4096"), "%s", log);
    free(log);
}

/* A file whose context_length is 2^32-1 is served with a context that fits
 * in memory, and says so, instead of failing a 2.7 TB allocation. */
Test(http_hostile, an_impossible_context_length_is_cut_to_memory, .timeout = 300)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/ctx-%d.gguf", gs_test_tmpdir(), getpid());
    const char *py =
        "import struct, sys\n"
        "b = bytearray(open(sys.argv[1], 'rb').read())\n"
        "i = b.find(b'llama.context_length') + len(b'llama.context_length')\n"
        "assert struct.unpack_from('<I', b, i)[0] == 4  # u32\n"
        "struct.pack_into('<I', b, i + 4, 0xffffffff)\n"
        "open(sys.argv[2], 'wb').write(b)\n";
    char *cmd, *out;
    cr_assert(asprintf(&cmd, "python3 '%s' '%s' '%s'", e2e_body_file(py),
                       gs_test_shared_path("models/stories260K.gguf"), path) > 0);
    cr_assert_eq(gs_test_run(cmd, 1, &out), 0, "%s", out);
    free(cmd);
    free(out);
    struct e2e_daemon d;
    char extra[700];
    snprintf(extra, sizeof(extra), "-m '%s'", path);
    e2e_start(&d, extra);
    expect_serving(&d);
    cr_expect_eq(e2e_stop(&d), 0);
    char *log = gs_test_read_file(d.log_path, NULL);
    cr_expect(strstr(log, "event=context") && strstr(log, "n_ctx_train=4294967295"), "%s", log);
    free(log);
}
