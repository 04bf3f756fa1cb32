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

#include <criterion/criterion.h>
#include <errno.h>
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

/* The next datagram within timeout_s into buf (NUL-terminated); false when none. */
static bool next_msg(int fd, char *buf, size_t cap, double timeout_s)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, (int)(timeout_s * 1000)) <= 0)
        return false;
    ssize_t n = recv(fd, buf, cap - 1, 0);
    if (n < 0)
        return false;
    buf[n] = '\0';
    return true;
}

/* Waits for a message containing want, skipping others (watchdog pings). */
static void expect_msg(int fd, const char *want, double timeout_s)
{
    char buf[4096];
    double end = now_s() + timeout_s;
    while (now_s() < end)
        if (next_msg(fd, buf, sizeof(buf), end - now_s()) && strstr(buf, want))
            return;
    cr_assert_fail("no '%s' within %.1f s", want, timeout_s);
}

Test(service, notify_watchdog_reload_and_stopping, .timeout = 60)
{
    char path[108];
    snprintf(path, sizeof(path), "/tmp/gs-test-svc-%d.sock", (int)getpid());
    unlink(path);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    cr_assert(fd >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, path, strlen(path) + 1);
    cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "%s", strerror(errno));
    setenv("NOTIFY_SOCKET", path, 1);
    setenv("WATCHDOG_USEC", "400000", 1); /* pings every 200 ms */
    struct e2e_daemon d;
    e2e_start(&d, "--api-key k");
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");

    expect_msg(fd, "READY=1", 10);
    /* Count pings for 1.2 s: about 6 at 200 ms; fewer than 4 means a late or
     * missing timer, which systemd would answer with a restart. */
    int n_pings = 0;
    char buf[4096];
    double end = now_s() + 1.2;
    while (now_s() < end)
        if (next_msg(fd, buf, sizeof(buf), end - now_s()) && !strcmp(buf, "WATCHDOG=1"))
            n_pings++;
    cr_expect_geq(n_pings, 4, "%d WATCHDOG=1 pings in 1.2 s at WatchdogSec=0.4s", n_pings);
    cr_expect_leq(n_pings, 9, "%d pings in 1.2 s: far more often than half the interval",
                  n_pings);

    /* Pings go on while a request runs on the engine. */
    struct e2e_resp r;
    e2e_http(&d, "POST", "/v1/completions",
             "{\"prompt\":\"Once upon a time\",\"max_tokens\":64,\"temperature\":0}",
             "-H 'Authorization: Bearer k'", &r);
    cr_expect_eq(r.status, 200);
    e2e_resp_free(&r);
    expect_msg(fd, "WATCHDOG=1", 1);

    kill(d.pid, SIGHUP);
    expect_msg(fd, "RELOADING=1\nMONOTONIC_USEC=", 5);
    expect_msg(fd, "READY=1", 5);
    /* Still serving after the reload. */
    e2e_http(&d, "GET", "/v1/models", NULL, "-H 'Authorization: Bearer k'", &r);
    cr_expect_eq(r.status, 200);
    e2e_resp_free(&r);

    kill(d.pid, SIGTERM);
    expect_msg(fd, "STOPPING=1", 10);
    int st;
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
    usleep(300 * 1000);
    struct e2e_resp r;
    e2e_http(&d, "GET", "/health", NULL, NULL, &r);
    cr_expect_eq(r.status, 200);
    e2e_resp_free(&r);
    cr_expect_eq(e2e_stop(&d), 0);
    char *log = gs_test_read_file(d.log_path, NULL);
    cr_expect(strstr(log, "event=config_reload"), "no reload line:\n%s", log);
    free(log);
}

/* A daemon whose known-answer check failed never tells systemd READY=1, not
 * even after a SIGHUP reload (the start stays incomplete, so the service
 * manager's start timeout acts on it). GS_TEST_POISON_POS=0 makes every
 * logits row non-finite, so the check fails. */
Test(service, failed_known_answer_never_says_ready, .timeout = 60)
{
    char path[108];
    snprintf(path, sizeof(path), "/tmp/gs-test-svc-ka-%d.sock", (int)getpid());
    unlink(path);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    cr_assert(fd >= 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, path, strlen(path) + 1);
    cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "%s", strerror(errno));
    setenv("NOTIFY_SOCKET", path, 1);
    setenv("GS_TEST_POISON_POS", "0", 1);
    struct e2e_daemon d;
    e2e_start(&d, "");
    unsetenv("NOTIFY_SOCKET");
    unsetenv("GS_TEST_POISON_POS");

    kill(d.pid, SIGHUP);
    /* Every message from the start until a moment after the reload's status
     * line: none may announce readiness. */
    char buf[4096];
    bool reloaded = false;
    double end = now_s() + 10;
    while (now_s() < end) {
        if (!next_msg(fd, buf, sizeof(buf), end - now_s()))
            continue;
        cr_expect(strncmp(buf, "READY=1", 7) && !strstr(buf, "\nREADY=1"),
                  "READY=1 after a failed known-answer check: '%s'", buf);
        if (strstr(buf, "STATUS=reloaded; not ready") && !reloaded) {
            reloaded = true;
            end = now_s() + 0.5;
        }
    }
    cr_expect(reloaded, "no status line after the reload");
    struct e2e_resp r;
    e2e_http(&d, "GET", "/ready", NULL, NULL, &r);
    cr_expect_eq(r.status, 503);
    e2e_resp_free(&r);
    kill(d.pid, SIGTERM);
    int st;
    cr_assert_eq(waitpid(d.pid, &st, 0), d.pid);
    close(fd);
    unlink(path);
}
