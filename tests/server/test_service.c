/*
 * tests/server/test_service.c - the daemon as systemd sees it: with
 * NOTIFY_SOCKET and WATCHDOG_USEC set, the real daemon sends READY=1, then
 * WATCHDOG=1 every half interval, RELOADING=1 and READY=1 around a SIGHUP
 * reload, and STOPPING=1 on SIGTERM; the messages are received on a unix
 * datagram socket bound here, as the service manager's.
 */
#define _GNU_SOURCE
#include "tests/common/testutil.h"
#include "tests/server/e2e.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The next datagram within timeout_s into buf (NUL-terminated); false when
 * none. *kernel_s, when not NULL, gets the time the kernel queued it
 * (SO_TIMESTAMPNS), which is when the daemon sent it: unlike the time it is
 * read here, it does not move when this process is slow to be scheduled. */
static bool next_msg(int fd, char *buf, size_t cap, double timeout_s, double *kernel_s)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, (int)(timeout_s * 1000)) <= 0)
        return false;
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(struct timespec))];
    } ctl;
    struct iovec iov = {.iov_base = buf, .iov_len = cap - 1};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = &ctl, .msg_controllen = sizeof(ctl)};
    ssize_t n = recvmsg(fd, &mh, 0);
    if (n < 0)
        return false;
    buf[n] = '\0';
    if (kernel_s) {
        *kernel_s = -1;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
                struct timespec ts;
                memcpy(&ts, CMSG_DATA(c), sizeof(ts));
                *kernel_s = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
            }
        cr_assert_geq(*kernel_s, 0, "no SCM_TIMESTAMPNS on the datagram");
    }
    return true;
}

/* Waits for a message containing want, skipping others (watchdog pings).
 * Only a hang reaches the bound; the test's .timeout is the real one. */
static void expect_msg(int fd, const char *want)
{
    char buf[4096];
    double end = now_s() + E2E_HANG_S;
    while (now_s() < end)
        if (next_msg(fd, buf, sizeof(buf), end - now_s(), NULL) && strstr(buf, want))
            return;
    cr_assert_fail("no '%s' in %d s", want, E2E_HANG_S);
}

/* A datagram receiver bound at path, with kernel timestamps on. */
static int notify_socket(const char *path)
{
    unlink(path);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    cr_assert(fd >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, path, strlen(path) + 1);
    cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "%s", strerror(errno));
    int one = 1;
    cr_assert_eq(setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one)), 0);
    return fd;
}

/* Runs cmd with sh in the background; returns its pid. */
static pid_t spawn_sh(const char *cmd)
{
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

enum { N_PINGS = 8 };

/* READY=1, then WATCHDOG=1 every half interval (WATCHDOG_USEC 400 ms: every
 * 200 ms); withheld while requests wait on an engine that has not finished a
 * step for a whole interval (held here by the test gate, GS_TEST_STEP_GATE),
 * and resumed once it steps again; RELOADING=1 and READY=1 around SIGHUP;
 * STOPPING=1 on SIGTERM. Every wait is for an event; the ping timing is
 * judged by the kernel's send times of the datagrams. */
Test(service, notify_watchdog_reload_and_stopping, .timeout = 120)
{
    char path[108], gate[600];
    snprintf(path, sizeof(path), "/tmp/gs-test-svc-%d.sock", (int)getpid());
    snprintf(gate, sizeof(gate), "%s/gate-%d", gs_test_tmpdir(), (int)getpid());
    int fd = notify_socket(path);
    setenv("NOTIFY_SOCKET", path, 1);
    setenv("WATCHDOG_USEC", "400000", 1); /* pings every 200 ms */
    setenv("GS_TEST_STEP_GATE", gate, 1);
    struct e2e_daemon d;
    e2e_start(&d, "--api-key k");
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    unsetenv("GS_TEST_STEP_GATE");

    expect_msg(fd, "READY=1");
    /* N_PINGS pings, however long they take to arrive. The timer repeats
     * from its last firing, so no two pings are sent closer than its period
     * (half slack for clock granularity); and a late firing only widens one
     * gap, so the narrowest gap is the period itself: it must be under the
     * whole interval, or systemd would restart a healthy daemon. */
    double sent[N_PINGS];
    char buf[4096];
    for (int n = 0; n < N_PINGS;) {
        cr_assert(next_msg(fd, buf, sizeof(buf), E2E_HANG_S, &sent[n]), "no WATCHDOG=1 in %d s",
                  E2E_HANG_S);
        n += !strcmp(buf, "WATCHDOG=1");
    }
    double min_gap = 1e9;
    for (int i = 1; i < N_PINGS; i++)
        if (sent[i] - sent[i - 1] < min_gap)
            min_gap = sent[i] - sent[i - 1];
    cr_expect_geq(min_gap, 0.1, "two pings %.3f s apart at WatchdogSec=0.4s", min_gap);
    cr_expect_lt(min_gap, 0.4, "pings at least %.3f s apart: not every half of WatchdogSec=0.4s",
                 min_gap);

    /* A request on an engine held inside a step (the gate): it counts as
     * waiting until the step ends, so once the engine has not stepped for an
     * interval the pings stop, and the daemon logs each tick it skips. */
    FILE *g = fopen(gate, "w");
    cr_assert(g);
    fclose(g);
    const char *body = e2e_body_file("{\"prompt\":\"Once upon a time\",\"max_tokens\":8,"
                                     "\"ignore_eos\":true,\"stream\":true}");
    char *cmd;
    cr_assert(asprintf(&cmd,
                       "curl -sS --max-time %d -H 'Authorization: Bearer k' --data-binary @%s "
                       "%s/v1/completions > %s.stream",
                       E2E_HANG_S, body, d.url, gate) > 0);
    pid_t stream_pid = spawn_sh(cmd);
    free(cmd);
    e2e_await_log(&d, "engine_stalled_ms=", 1);
    /* Nothing is sent from here until another stalled tick is logged. */
    while (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) >= 0)
        ;
    int n_stalled = e2e_log_count(&d, "engine_stalled_ms=");
    e2e_await_log(&d, "engine_stalled_ms=", n_stalled + 1);
    ssize_t got = recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);
    if (got >= 0)
        buf[got] = '\0';
    cr_expect(got < 0, "'%s' sent while the engine was stalled", got >= 0 ? buf : "");
    unlink(gate); /* the engine steps again: the stream ends, pings resume */
    int st;
    cr_assert_eq(waitpid(stream_pid, &st, 0), stream_pid);
    char out[700];
    snprintf(out, sizeof(out), "%s.stream", gate);
    char *stream = gs_test_read_file(out, NULL);
    bool done;
    json_t *ev = e2e_sse_events(stream, &done);
    cr_expect(done, "the stream did not end: %s", stream);
    cr_expect_geq(json_array_size(ev), 8u, "%s", stream);
    json_decref(ev);
    free(stream);
    expect_msg(fd, "WATCHDOG=1");

    kill(d.pid, SIGHUP);
    expect_msg(fd, "RELOADING=1\nMONOTONIC_USEC=");
    expect_msg(fd, "READY=1");
    /* Still serving after the reload. */
    struct e2e_resp r;
    e2e_http(&d, "GET", "/v1/models", NULL, "-H 'Authorization: Bearer k'", &r);
    cr_expect_eq(r.status, 200);
    e2e_resp_free(&r);

    kill(d.pid, SIGTERM);
    expect_msg(fd, "STOPPING=1");
    cr_assert_eq(waitpid(d.pid, &st, 0), d.pid); /* e2e_stop would signal a second time */
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit status %d", st);
    close(fd);
    unlink(path);
}

/* Without a service manager, SIGHUP reloads and the daemon keeps serving
 * (the default action of SIGHUP would have ended it). */
Test(service, sighup_without_systemd_keeps_serving, .timeout = 60)
{
    struct e2e_daemon d;
    e2e_start(&d, "");
    kill(d.pid, SIGHUP);
    e2e_await_log(&d, "event=config_reload", 1);
    struct e2e_resp r;
    e2e_http(&d, "GET", "/health", NULL, NULL, &r);
    cr_expect_eq(r.status, 200);
    e2e_resp_free(&r);
    cr_expect_eq(e2e_stop(&d), 0);
    char *log = gs_test_read_file(d.log_path, NULL);
    cr_expect(strstr(log, "event=config_reload"), "no reload line:\n%s", log);
    free(log);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert(f, "%s: %s", path, strerror(errno));
    fputs(text, f);
    cr_assert_eq(fclose(f), 0);
}

/* The status of GET /v1/models sent with this key and Host header. */
static long models_status(const struct e2e_daemon *d, const char *key, const char *host)
{
    char extra[200];
    snprintf(extra, sizeof(extra), "-H 'Authorization: Bearer %s' -H 'Host: %s'", key, host);
    struct e2e_resp r;
    e2e_http(d, "GET", "/v1/models", NULL, extra, &r);
    long status = r.status;
    e2e_resp_free(&r);
    return status;
}

/* A SIGHUP replaces the API keys and the allowed host names whole: after it
 * the old key is refused and the new ones accepted, a name only the old list
 * had is refused, and a second reload back to the first file restores it. */
Test(service, sighup_replaces_api_keys_and_allowed_hosts, .timeout = 120)
{
    char cfg[600], extra[700];
    snprintf(cfg, sizeof(cfg), "%s/reload-keys-%d.json", gs_test_tmpdir(), getpid());
    const char *first = "{\"api_key\": [\"key-one\"], \"allowed_hosts\": [\"one.test\"]}\n";
    write_text(cfg, first);
    snprintf(extra, sizeof(extra), "--config '%s'", cfg);
    struct e2e_daemon d;
    e2e_start(&d, extra);
    cr_expect_eq(models_status(&d, "key-one", "one.test"), 200);
    cr_expect_eq(models_status(&d, "key-two", "one.test"), 401);
    cr_expect_eq(models_status(&d, "key-one", "two.test"), 403);

    write_text(cfg, "{\"api_key\": [\"key-two\", \"key-three\"], "
                    "\"allowed_hosts\": [\"two.test\", \"three.test\"]}\n");
    kill(d.pid, SIGHUP);
    e2e_await_log(&d, "event=config_reload", 1);
    cr_expect_eq(models_status(&d, "key-one", "two.test"), 401, "the old key after the reload");
    cr_expect_eq(models_status(&d, "key-two", "two.test"), 200);
    cr_expect_eq(models_status(&d, "key-three", "three.test"), 200);
    cr_expect_eq(models_status(&d, "key-two", "one.test"), 403, "the old name after the reload");

    write_text(cfg, first);
    kill(d.pid, SIGHUP);
    e2e_await_log(&d, "event=config_reload", 2);
    cr_expect_eq(models_status(&d, "key-one", "one.test"), 200, "after the second reload");
    cr_expect_eq(models_status(&d, "key-three", "one.test"), 401);
    cr_expect_eq(models_status(&d, "key-one", "three.test"), 403);
    cr_expect_eq(e2e_stop(&d), 0);
}

/* What a reload changes is what config/table.c marks reloadable, and what it
 * does not change it names: a SIGHUP after the config file lowered max_tokens
 * and the connection limits applies the first (a request over the new cap is
 * a 400) and reports the other two as ignored; libmicrohttpd took them at the
 * start, so the old limit still holds (connections past the new one are
 * served). */
Test(service, sighup_applies_reloadable_options_and_names_the_rest, .timeout = 120)
{
    char cfg[600], extra[700];
    snprintf(cfg, sizeof(cfg), "%s/reload-%d.json", gs_test_tmpdir(), getpid());
    write_text(cfg, "{\"max_tokens\": 16, \"max_conns\": 8, \"max_conns_per_ip\": 8}\n");
    snprintf(extra, sizeof(extra), "--config '%s'", cfg);
    struct e2e_daemon d;
    e2e_start(&d, extra);
    const char *body8 = "{\"prompt\":\"Once\",\"max_tokens\":8,\"temperature\":0}";
    struct e2e_resp r;
    e2e_http(&d, "POST", "/v1/completions", body8, NULL, &r);
    cr_expect_eq(r.status, 200, "before the reload: %s", r.body);
    e2e_resp_free(&r);

    write_text(cfg, "{\"max_tokens\": 4, \"max_conns\": 2, \"max_conns_per_ip\": 1}\n");
    kill(d.pid, SIGHUP);
    e2e_await_log(&d, "event=config_reload", 1);
    char *log = gs_test_read_file(d.log_path, NULL);
    cr_expect(strstr(log, "level=warn event=config_reload applied=max-tokens "
                          "ignored=max-conns,max-conns-per-ip\n"),
              "reload line:\n%s", log);
    free(log);

    e2e_http(&d, "POST", "/v1/completions", body8, NULL, &r);
    cr_expect_eq(r.status, 400, "max_tokens 8 over the reloaded cap of 4: %s", r.body);
    e2e_resp_free(&r);
    /* Two idle connections held open: with the reloaded per-address limit of
     * one, the request below could not connect. */
    int held[2];
    for (int i = 0; i < 2; i++) {
        held[i] = socket(AF_INET, SOCK_STREAM, 0);
        cr_assert_geq(held[i], 0);
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)d.port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        cr_assert_eq(connect(held[i], (struct sockaddr *)&a, sizeof(a)), 0, "%s", strerror(errno));
    }
    e2e_http(&d, "GET", "/health", NULL, NULL, &r);
    cr_expect_eq(r.status, 200, "a third connection from this address after the reload");
    e2e_resp_free(&r);
    for (int i = 0; i < 2; i++)
        close(held[i]);
    cr_expect_eq(e2e_stop(&d), 0);
    unlink(cfg);
}

/* A daemon whose known-answer check failed never tells systemd READY=1, not
 * even after a SIGHUP reload (the start stays incomplete, so the service
 * manager's start timeout acts on it). GS_TEST_POISON_POS=0 makes every
 * logits row non-finite, so the check fails. Every message the daemon sends,
 * from its start through the reload to STOPPING=1 at SIGTERM, is read: one
 * sender's datagrams arrive in order, so none can be missed by a short look. */
Test(service, failed_known_answer_never_says_ready, .timeout = 60)
{
    char path[108];
    snprintf(path, sizeof(path), "/tmp/gs-test-svc-ka-%d.sock", (int)getpid());
    int fd = notify_socket(path);
    setenv("NOTIFY_SOCKET", path, 1);
    setenv("GS_TEST_POISON_POS", "0", 1);
    struct e2e_daemon d;
    e2e_start(&d, "");
    unsetenv("NOTIFY_SOCKET");
    unsetenv("GS_TEST_POISON_POS");

    kill(d.pid, SIGHUP);
    char buf[4096];
    bool reloaded = false, stopping = false;
    double end = now_s() + E2E_HANG_S;
    while (!stopping && now_s() < end) {
        if (!next_msg(fd, buf, sizeof(buf), end - now_s(), NULL))
            continue;
        cr_expect(strncmp(buf, "READY=1", 7) && !strstr(buf, "\nREADY=1"),
                  "READY=1 after a failed known-answer check: '%s'", buf);
        stopping = !strncmp(buf, "STOPPING=1", 10);
        if (strstr(buf, "STATUS=reloaded; not ready") && !reloaded) {
            reloaded = true;
            struct e2e_resp r;
            e2e_http(&d, "GET", "/ready", NULL, NULL, &r);
            cr_expect_eq(r.status, 503);
            e2e_resp_free(&r);
            kill(d.pid, SIGTERM);
        }
    }
    cr_expect(reloaded, "no status line after the reload");
    cr_expect(stopping, "no STOPPING=1 after SIGTERM");
    int st;
    cr_assert_eq(waitpid(d.pid, &st, 0), d.pid);
    close(fd);
    unlink(path);
}
