/*
 * tests/server/test_http_engine.c - the HTTP side of the engine contract,
 * with an engine whose events the test scripts: what the real scheduler
 * cannot be made to do on demand. The server is the real one (gs_srv on its
 * loop thread, libmicrohttpd, curl as the client); only the engine behind
 * struct gs_srv_engine is scripted, by max_tokens:
 *
 *   2: the two byte tokens of "é" (one UTF-8 character split across tokens)
 *   3: one token, then a numerical error
 *   4: nothing at all until cancelled (a stream waiting in a queue)
 *
 * It checks UTF-8-safe deltas, the error after the 200 header, keepalive
 * comments on a waiting stream, noticing a client that left within about a
 * second, and the drain deadline turning into finish_reason "abort".
 */
#define _GNU_SOURCE
#include "engine/tok.h"
#include "server/server.h"
#include "tests/common/testutil.h"
#include "tests/server/e2e.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_REQS 16
#define MAX_EVS  64

struct fake {
    pthread_mutex_t mu;
    pthread_t thread;
    bool quit;
    struct gs_srv *srv;
    struct gs_tok *tok;
    struct {
        uint64_t id;
        uint32_t script, step;
        bool live, cancelled;
    } reqs[MAX_REQS];
    struct gs_sched_event evs[MAX_EVS];
    size_t n_evs;
    double cancel_ms[MAX_REQS]; /* when each cancel arrived (gs_now_ms), 0 if none */
    int n_cancels;
};

static struct fake fk;
static struct gs_srv *srv;
static pthread_t loop_thread;
static int loop_rc = -1;
static bool loop_joined;
static struct e2e_daemon d; /* only url/port are used: the server is in-process */

static enum gs_status fake_submit(void *ctx, const struct gs_sched_request *req, struct gs_err *err)
{
    struct fake *f = ctx;
    pthread_mutex_lock(&f->mu);
    for (int i = 0; i < MAX_REQS; i++)
        if (!f->reqs[i].live) {
            f->reqs[i].id = req->id;
            f->reqs[i].script = req->max_tokens;
            f->reqs[i].step = 0;
            f->reqs[i].live = true;
            f->reqs[i].cancelled = false;
            pthread_mutex_unlock(&f->mu);
            return GS_OK;
        }
    pthread_mutex_unlock(&f->mu);
    return gs_err_set(err, GS_BUSY, "fake engine full");
}

static void fake_cancel(void *ctx, uint64_t id)
{
    struct fake *f = ctx;
    pthread_mutex_lock(&f->mu);
    for (int i = 0; i < MAX_REQS; i++)
        if (f->reqs[i].live && f->reqs[i].id == id && !f->reqs[i].cancelled) {
            f->reqs[i].cancelled = true;
            if (f->n_cancels < MAX_REQS)
                f->cancel_ms[f->n_cancels++] = gs_now_ms();
        }
    pthread_mutex_unlock(&f->mu);
}

static size_t fake_poll(void *ctx, struct gs_sched_event *out, size_t cap)
{
    struct fake *f = ctx;
    pthread_mutex_lock(&f->mu);
    size_t n = GS_MIN(cap, f->n_evs);
    memcpy(out, f->evs, n * sizeof(*out));
    memmove(f->evs, f->evs + n, (f->n_evs - n) * sizeof(*out));
    f->n_evs -= n;
    pthread_mutex_unlock(&f->mu);
    return n;
}

static void fake_stats(void *ctx, struct gs_sched_stats *out)
{
    memset(out, 0, sizeof(*out));
}

static void push_token(struct fake *f, uint64_t id, const char *text)
{
    struct gs_sched_event *e = &f->evs[f->n_evs++];
    *e = (struct gs_sched_event){.kind = GS_SCHED_EV_TOKEN, .id = id};
    e->token = gs_tok_find(f->tok, text, strlen(text));
    cr_assert(e->token >= 0, "no token '%s' in the vocabulary", text);
}

static void push_finish(struct fake *f, uint64_t id, enum gs_finish fin, uint32_t n_gen)
{
    struct gs_sched_event *e = &f->evs[f->n_evs++];
    *e = (struct gs_sched_event){.kind = GS_SCHED_EV_FINISH, .id = id, .finish = fin};
    e->stats.n_generated = n_gen;
    if (fin == GS_FINISH_ERROR) {
        e->err_code = GS_NUMERIC;
        snprintf(e->err_msg, sizeof(e->err_msg), "non-finite logits at step 1");
    }
}

/* One engine "step" every 5 ms: each live request advances its script. */
static void *fake_thread(void *arg)
{
    struct fake *f = arg;
    for (;;) {
        usleep(5000);
        pthread_mutex_lock(&f->mu);
        if (f->quit) {
            pthread_mutex_unlock(&f->mu);
            return NULL;
        }
        size_t before = f->n_evs;
        for (int i = 0; i < MAX_REQS && f->n_evs + 2 < MAX_EVS; i++) {
            if (!f->reqs[i].live)
                continue;
            uint64_t id = f->reqs[i].id;
            uint32_t step = f->reqs[i].step++;
            if (f->reqs[i].cancelled) {
                push_finish(f, id, GS_FINISH_CANCELLED, step);
                f->reqs[i].live = false;
            } else if (f->reqs[i].script == 2) {
                if (step < 2)
                    push_token(f, id, step == 0 ? "<0xC3>" : "<0xA9>");
                else {
                    push_finish(f, id, GS_FINISH_LENGTH, 2);
                    f->reqs[i].live = false;
                }
            } else if (f->reqs[i].script == 3) {
                if (step == 0)
                    push_token(f, id, "\xe2\x96\x81Once");
                else {
                    push_finish(f, id, GS_FINISH_ERROR, 1);
                    f->reqs[i].live = false;
                }
            }
        }
        bool wake = f->n_evs > before;
        pthread_mutex_unlock(&f->mu);
        if (wake)
            gs_srv_wake(f->srv);
    }
}

static void *loop_main(void *arg)
{
    loop_rc = gs_srv_run(arg);
    return NULL;
}

static void setup(void)
{
    memset(&fk, 0, sizeof(fk));
    pthread_mutex_init(&fk.mu, NULL);
    struct gs_err err;
    cr_assert_eq(gs_tok_open(gs_test_shared_path("models/stories260K.gguf"), &fk.tok, &err), GS_OK,
                 "%s", err.msg);
    struct gs_srv_cfg cfg = {
        .limits = GS_SRV_LIMITS_DEFAULT,
        .drain_timeout_ms = 300,
        .model = {.id = "fake", .tok = fk.tok, .n_ctx = 256},
    };
    cr_assert_eq(gs_srv_new(&cfg, &srv, &err), GS_OK, "%s", err.msg);
    struct gs_srv_engine eng = {&fk, fake_submit, fake_cancel, fake_poll, fake_stats, NULL, NULL};
    gs_srv_set_engine(srv, &eng);
    fk.srv = srv;
    memset(&d, 0, sizeof(d));
    d.port = gs_srv_port(srv);
    snprintf(d.url, sizeof(d.url), "http://127.0.0.1:%d", d.port);
    cr_assert_eq(pthread_create(&fk.thread, NULL, fake_thread, &fk), 0);
    cr_assert_eq(pthread_create(&loop_thread, NULL, loop_main, srv), 0);
}

static void teardown(void)
{
    if (!loop_joined) {
        gs_srv_shutdown(srv);
        pthread_join(loop_thread, NULL);
    }
    pthread_mutex_lock(&fk.mu);
    fk.quit = true;
    pthread_mutex_unlock(&fk.mu);
    pthread_join(fk.thread, NULL);
    cr_expect_eq(loop_rc, 0);
    gs_srv_free(srv);
    gs_tok_free(fk.tok);
}

TestSuite(http_engine, .init = setup, .fini = teardown, .timeout = 60);

Test(http_engine, deltas_never_split_a_utf8_character)
{
    struct e2e_resp r;
    e2e_http(
        &d, "POST", "/v1/chat/completions",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":2,\"stream\":true}",
        NULL, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    bool done;
    json_t *ev = e2e_sse_events(r.body, &done);
    cr_expect(done);
    char text[64] = "";
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e)
    {
        json_t *delta = json_object_get(json_array_get(json_object_get(e, "choices"), 0), "delta");
        const char *c = json_string_value(json_object_get(delta, "content"));
        if (c)
            strncat(text, c, sizeof(text) - strlen(text) - 1);
    }
    cr_expect_str_eq(text, "\xc3\xa9", "deltas: %s", r.body);
    json_decref(ev);
    e2e_resp_free(&r);
}

Test(http_engine, error_after_the_header_is_an_error_event_then_done)
{
    struct e2e_resp r;
    e2e_http(&d, "POST", "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":3,\"stream\":true}",
             NULL, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    bool done;
    json_t *ev = e2e_sse_events(r.body, &done);
    cr_expect(done, "%s", r.body);
    size_t n = json_array_size(ev);
    cr_assert_geq(n, 2, "%s", r.body);
    json_t *fin = json_array_get(json_object_get(json_array_get(ev, n - 2), "choices"), 0);
    cr_expect_str_eq(json_string_value(json_object_get(fin, "finish_reason")), "error", "%s",
                     r.body);
    json_t *err = json_object_get(json_array_get(ev, n - 1), "error");
    cr_assert(json_is_object(err), "%s", r.body);
    cr_expect_str_eq(json_string_value(json_object_get(err, "type")), "server_error");
    cr_expect_str_eq(json_string_value(json_object_get(err, "code")), "numerical_error");
    json_decref(ev);
    e2e_resp_free(&r);
    /* Before any header went out, the same failure is a plain 500. */
    e2e_http(&d, "POST", "/v1/completions", "{\"prompt\":\"x\",\"max_tokens\":3}", NULL, &r);
    cr_expect_eq(r.status, 500, "%s", r.body);
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(r.json, "error"), "code")),
                     "numerical_error");
    e2e_resp_free(&r);
}

/* Waits until the fake engine has seen n cancels (the suite's timeout bounds
 * a hang; this bound only ends a lost wait); returns how many it saw. */
static int await_cancels(int n)
{
    int seen = 0;
    for (int i = 0; i < 60000 && seen < n; i++) {
        pthread_mutex_lock(&fk.mu);
        seen = fk.n_cancels;
        pthread_mutex_unlock(&fk.mu);
        if (seen < n)
            usleep(1000);
    }
    return seen;
}

/* Waits until the fake engine holds n live requests, not cancelled. */
static bool await_live_requests(int n)
{
    for (int i = 0; i < 60000; i++) {
        pthread_mutex_lock(&fk.mu);
        int live = 0;
        for (int k = 0; k < MAX_REQS; k++)
            live += fk.reqs[k].live && !fk.reqs[k].cancelled;
        pthread_mutex_unlock(&fk.mu);
        if (live >= n)
            return true;
        usleep(1000);
    }
    return false;
}

/* Sends a POST /v1/completions with body on a fresh connection; returns the
 * socket. */
static int post_raw(const char *body)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)d.port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    char req[1024];
    int n = snprintf(req, sizeof(req),
                     "POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s",
                     strlen(body), body);
    cr_assert_eq(send(fd, req, (size_t)n, MSG_NOSIGNAL), n);
    return fd;
}

/* Leaves with a reset (SO_LINGER 0): "gone" under any reading of a FIN. */
static void reset_close(int fd)
{
    struct linger l = {.l_onoff = 1, .l_linger = 0};
    cr_assert_eq(setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l)), 0);
    close(fd);
}

/* A stream the engine never feeds gets keepalive comments; when its client
 * leaves (with a reset), the engine hears of it and cancels. The same for a
 * waiting non-stream request. Each step waits on what it depends on: the
 * first keepalive comment, the request reaching the engine, the cancel. */
Test(http_engine, waiting_stream_keeps_alive_and_cancels_on_disconnect)
{
    int fd = post_raw("{\"prompt\":\"x\",\"max_tokens\":4,\"stream\":true}");
    char buf[8192];
    size_t len = 0;
    while (len < sizeof(buf) - 1) {
        ssize_t r = recv(fd, buf + len, sizeof(buf) - 1 - len, 0);
        if (r <= 0)
            break;
        len += (size_t)r;
        buf[len] = '\0';
        if (strstr(buf, ": keepalive\n\n"))
            break;
    }
    buf[len] = '\0';
    cr_expect(strstr(buf, ": keepalive\n\n"), "no keepalive comment: '%s'", buf);
    reset_close(fd);
    cr_expect_eq(await_cancels(1), 1, "the stream's client left and nothing was cancelled");
    /* A waiting non-stream request whose client leaves is cancelled too. */
    fd = post_raw("{\"prompt\":\"x\",\"max_tokens\":4}");
    cr_assert(await_live_requests(1), "the request never reached the engine");
    reset_close(fd);
    cr_expect_eq(await_cancels(2), 2, "the non-stream client left and nothing was cancelled");
    pthread_mutex_lock(&fk.mu);
    int n = fk.n_cancels;
    pthread_mutex_unlock(&fk.mu);
    cr_expect_eq(n, 2, "cancels: %d", n);
}

/* At the drain deadline, what still runs ends with "abort"; then the loop returns 0. */
Test(http_engine, drain_deadline_aborts_waiting_requests)
{
    char *cmd, *out, whole[600];
    snprintf(whole, sizeof(whole), "%s", e2e_body_file("{\"prompt\":\"x\",\"max_tokens\":4}"));
    cr_assert(asprintf(&cmd,
                       "curl -s --max-time 100 --data-binary @%s %s/v1/completions & "
                       "curl -sN --max-time 100 --data-binary @%s %s/v1/completions & wait",
                       whole, d.url,
                       e2e_body_file("{\"prompt\":\"x\",\"max_tokens\":4,\"stream\":true}"),
                       d.url) > 0);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    cr_assert(await_live_requests(2), "the requests never reached the engine");
    gs_srv_shutdown(srv);
    char buf[8192];
    size_t len = fread(buf, 1, sizeof(buf) - 1, p);
    buf[len] = '\0';
    pclose(p);
    free(cmd);
    out = buf;
    cr_expect(strstr(out, "\"finish_reason\":\"abort\""), "%s", out);
    cr_expect(strstr(out, "\"object\":\"text_completion\",\"created\""), "%s", out);
    cr_expect(strstr(out, "data: [DONE]"), "%s", out);
    const char *a = strstr(out, "abort"), *b = a ? strstr(a + 1, "abort") : NULL;
    cr_expect(b, "both requests should end with abort: %s", out);
    pthread_join(loop_thread, NULL);
    loop_joined = true;
    cr_expect_eq(loop_rc, 0);
}

/* gs_srv_update (what a SIGHUP reload calls) swaps keys and request limits. */
Test(http_update, keys_and_limits_change_without_restart, .timeout = 30)
{
    struct gs_err err;
    struct gs_tok *tok;
    cr_assert_eq(gs_tok_open(gs_test_shared_path("models/stories260K.gguf"), &tok, &err), GS_OK);
    const char *old_keys[] = {"old-key"}, *new_keys[] = {"new-key", "other"};
    struct gs_srv_cfg cfg = {
        .limits = GS_SRV_LIMITS_DEFAULT,
        .api_keys = old_keys,
        .n_api_keys = 1,
        .model = {.id = "fake", .tok = tok, .n_ctx = 256},
    };
    struct gs_srv *s;
    cr_assert_eq(gs_srv_new(&cfg, &s, &err), GS_OK, "%s", err.msg);
    cfg.api_keys = new_keys;
    cfg.n_api_keys = 2;
    cfg.limits.max_body_bytes = 1024;
    cr_assert_eq(gs_srv_update(s, &cfg, &err), GS_OK);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, loop_main, s), 0);
    struct e2e_daemon k = {.port = gs_srv_port(s)};
    snprintf(k.url, sizeof(k.url), "http://127.0.0.1:%d", k.port);
    struct e2e_resp r;
    e2e_http(&k, "GET", "/v1/models", NULL, "-H 'Authorization: Bearer old-key'", &r);
    cr_expect_eq(r.status, 401);
    e2e_resp_free(&r);
    e2e_http(&k, "GET", "/v1/models", NULL, "-H 'Authorization: Bearer other'", &r);
    cr_expect_eq(r.status, 200);
    e2e_resp_free(&r);
    char body[2100];
    memset(body, ' ', sizeof(body) - 1);
    body[sizeof(body) - 1] = '\0';
    e2e_http(&k, "POST", "/tokenize", body, "-H 'Authorization: Bearer new-key'", &r);
    cr_expect_eq(r.status, 413);
    e2e_resp_free(&r);
    gs_srv_shutdown(s);
    pthread_join(t, NULL);
    gs_srv_free(s);
    gs_tok_free(tok);
}

/* A listening socket handed over (systemd socket activation) is served as is. */
Test(http_update, serves_a_passed_listening_socket, .timeout = 30)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(fd > 2);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(listen(fd, 16), 0);
    socklen_t len = sizeof(a);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    struct gs_srv_cfg cfg = {
        .limits = GS_SRV_LIMITS_DEFAULT,
        .port = 1, /* ignored with a passed socket */
        .listen_fd = fd,
        .model = {.id = "fake", .n_ctx = 256},
    };
    struct gs_srv *s;
    struct gs_err err;
    cr_assert_eq(gs_srv_new(&cfg, &s, &err), GS_OK, "%s", err.msg);
    cr_expect_eq(gs_srv_port(s), ntohs(a.sin_port));
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, loop_main, s), 0);
    struct e2e_daemon k = {.port = ntohs(a.sin_port)};
    snprintf(k.url, sizeof(k.url), "http://127.0.0.1:%d", k.port);
    struct e2e_resp r;
    e2e_http(&k, "GET", "/health", NULL, NULL, &r);
    cr_expect_eq(r.status, 200);
    e2e_resp_free(&r);
    gs_srv_shutdown(s);
    pthread_join(t, NULL);
    gs_srv_free(s);
}
