/*
 * tests/server/test_systemd.c - server/systemd.h against the protocol as a
 * service manager speaks it: notifications are received on a unix datagram
 * socket the test binds (a path and an abstract name), and passed sockets
 * are handed to a child process as descriptor 3 onwards with LISTEN_PID and
 * LISTEN_FDS set, as systemd does before exec.
 */
#define _GNU_SOURCE
#include "server/systemd.h"
#include "tests/common/testutil.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- a notification receiver --------------------------------------------------- */

struct receiver {
    int fd;
    char env[200]; /* the NOTIFY_SOCKET value that reaches it */
};

static void receiver_open(struct receiver *r, bool abstract)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    socklen_t len;
    r->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    cr_assert(r->fd >= 0);
    if (abstract) {
        snprintf(r->env, sizeof(r->env), "@gs-test-notify-%d-%ld", (int)getpid(), (long)time(NULL));
        memcpy(sa.sun_path + 1, r->env + 1, strlen(r->env) - 1);
        len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(r->env));
    } else {
        /* The build folder's path may be too long for sun_path; /tmp is not. */
        snprintf(r->env, sizeof(r->env), "/tmp/gs-test-notify-%d.sock", (int)getpid());
        unlink(r->env);
        cr_assert_lt(strlen(r->env), sizeof(sa.sun_path));
        memcpy(sa.sun_path, r->env, strlen(r->env) + 1);
        len = sizeof(sa);
    }
    cr_assert_eq(bind(r->fd, (struct sockaddr *)&sa, len), 0, "bind %s: %s", r->env,
                 strerror(errno));
    /* Ask the kernel for the sender's credentials, as systemd does to tell
     * the main process's messages from others (NotifyAccess=main). */
    int one = 1;
    cr_assert_eq(setsockopt(r->fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)), 0);
    /* A hang guard only: every message is sent before it is received. */
    struct timeval tv = {.tv_sec = 60};
    cr_assert_eq(setsockopt(r->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    cr_assert_eq(setenv("NOTIFY_SOCKET", r->env, 1), 0);
}

static void receiver_close(struct receiver *r)
{
    close(r->fd);
    if (r->env[0] == '/')
        unlink(r->env);
    unsetenv("NOTIFY_SOCKET");
}

/* Receives one datagram into buf (NUL-terminated) and returns the sender's pid. */
static pid_t receiver_recv(struct receiver *r, char *buf, size_t cap)
{
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(struct ucred))];
    } ctl;
    struct iovec iov = {.iov_base = buf, .iov_len = cap - 1};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = &ctl, .msg_controllen = sizeof(ctl)};
    ssize_t n = recvmsg(r->fd, &mh, 0);
    cr_assert(n >= 0, "no notification arrived: %s", strerror(errno));
    cr_assert(!(mh.msg_flags & MSG_TRUNC));
    buf[n] = '\0';
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
            struct ucred cred;
            memcpy(&cred, CMSG_DATA(c), sizeof(cred));
            return cred.pid;
        }
    }
    cr_assert_fail("no SCM_CREDENTIALS on the notification");
    return -1;
}

static void expect_message(struct receiver *r, const char *want)
{
    char buf[8192];
    pid_t pid = receiver_recv(r, buf, sizeof(buf));
    cr_assert_str_eq(buf, want);
    cr_assert_eq(pid, getpid(), "sender pid %d, ours %d", (int)pid, (int)getpid());
}

/* ---- notifications --------------------------------------------------------------- */

Test(sd_notify, path_socket_receives_exact_messages)
{
    struct receiver r;
    struct gs_err err = {0};
    bool sent = false;
    receiver_open(&r, false);

    cr_assert_eq(gs_sd_notify("READY=1", &sent, &err), GS_OK, "%s", err.msg);
    cr_assert(sent);
    expect_message(&r, "READY=1");

    cr_assert_eq(gs_sd_notify("STOPPING=1\nSTATUS=draining 3 requests", &sent, &err), GS_OK, "%s",
                 err.msg);
    expect_message(&r, "STOPPING=1\nSTATUS=draining 3 requests");

    cr_assert_eq(gs_sd_notifyf(&sent, &err, "STATUS=loading %s (%d%%)", "model.gguf", 40), GS_OK,
                 "%s", err.msg);
    expect_message(&r, "STATUS=loading model.gguf (40%)");
    receiver_close(&r);
}

Test(sd_notify, abstract_socket_receives_watchdog)
{
    struct receiver r;
    struct gs_err err = {0};
    bool sent = false;
    receiver_open(&r, true);
    cr_assert_eq(r.env[0], '@');
    cr_assert_eq(gs_sd_notify("WATCHDOG=1", &sent, &err), GS_OK, "%s", err.msg);
    cr_assert(sent);
    expect_message(&r, "WATCHDOG=1");
    receiver_close(&r);
}

Test(sd_notify, without_notify_socket_is_a_quiet_no_op)
{
    struct gs_err err = {0};
    bool sent = true;
    unsetenv("NOTIFY_SOCKET");
    cr_assert_eq(gs_sd_notify("READY=1", &sent, &err), GS_OK);
    cr_assert(!sent);
    setenv("NOTIFY_SOCKET", "", 1);
    sent = true;
    cr_assert_eq(gs_sd_notify("READY=1", &sent, &err), GS_OK);
    cr_assert(!sent);
    unsetenv("NOTIFY_SOCKET");
}

Test(sd_notify, refuses_bad_states_and_addresses)
{
    struct receiver r;
    struct gs_err err = {0};
    bool sent = true;
    receiver_open(&r, false);
    /* A status text with a newline must not smuggle in another assignment. */
    cr_assert_eq(gs_sd_notifyf(&sent, &err, "STATUS=%s", "ok\nREADY"), GS_INVAL);
    cr_assert(!sent);
    cr_assert_eq(gs_sd_notify("", &sent, &err), GS_INVAL);
    cr_assert_eq(gs_sd_notify(NULL, &sent, &err), GS_INVAL);
    cr_assert_eq(gs_sd_notify("=1", &sent, &err), GS_INVAL);
    /* Nothing of the refused messages reached the socket. */
    char buf[64];
    cr_assert_eq(recv(r.fd, buf, sizeof(buf), MSG_DONTWAIT), -1);
    cr_assert_eq(errno, EAGAIN);
    receiver_close(&r);

    setenv("NOTIFY_SOCKET", "relative/notify.sock", 1);
    cr_assert_eq(gs_sd_notify("READY=1", &sent, &err), GS_INVAL);
    cr_assert(strstr(err.msg, "NOTIFY_SOCKET"), "%s", err.msg);

    char longpath[300] = "/";
    memset(longpath + 1, 'x', sizeof(longpath) - 2);
    longpath[sizeof(longpath) - 1] = '\0';
    setenv("NOTIFY_SOCKET", longpath, 1);
    cr_assert_eq(gs_sd_notify("READY=1", &sent, &err), GS_INVAL);
    cr_assert(strstr(err.msg, "too long"), "%s", err.msg);

    setenv("NOTIFY_SOCKET", "@", 1);
    cr_assert_eq(gs_sd_notify("READY=1", &sent, &err), GS_INVAL);

    char big[5000];
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    cr_assert_eq(gs_sd_notifyf(&sent, &err, "STATUS=%s", big), GS_INVAL);
    unsetenv("NOTIFY_SOCKET");
}

Test(sd_notify, missing_socket_is_an_io_error)
{
    struct gs_err err = {0};
    bool sent = true;
    setenv("NOTIFY_SOCKET", "/nonexistent-dir-gs/notify.sock", 1);
    cr_assert_eq(gs_sd_notify("READY=1", &sent, &err), GS_IO);
    cr_assert(!sent);
    cr_assert(strstr(err.msg, "/nonexistent-dir-gs/notify.sock"), "%s", err.msg);
    unsetenv("NOTIFY_SOCKET");
}

/* The bound on the refused send is the test's timeout: a send without
 * SO_SNDTIMEO would block forever, and one that waited a few seconds longer
 * on a loaded machine is no failure. A timer never fires early, so the
 * lower bound holds on any machine. */
Test(sd_notify, full_receiver_queue_gives_busy_not_a_hang, .timeout = 60)
{
    struct receiver r;
    struct gs_err err = {0};
    receiver_open(&r, true);
    /* Nobody reads: the receiver's queue fills (net.unix.max_dgram_qlen or
     * the buffer), then one send waits GS_SD_NOTIFY_TIMEOUT_MS and gives up. */
    enum gs_status st = GS_OK;
    int i;
    double t0 = gs_now_ms(), t_busy = 0;
    for (i = 0; i < 100000 && st == GS_OK; i++) {
        t_busy = gs_now_ms();
        st = gs_sd_notify("WATCHDOG=1", NULL, &err);
    }
    double waited = gs_now_ms() - t_busy;
    cr_assert_eq(st, GS_BUSY, "after %d sends: %s", i, err.msg);
    cr_assert(waited >= GS_SD_NOTIFY_TIMEOUT_MS * 0.9,
              "the refused send gave up after %.0f ms, before its timeout (total %.0f ms)", waited,
              gs_now_ms() - t0);
    receiver_close(&r);
}

/* ---- watchdog ------------------------------------------------------------------------ */

static void set_watchdog(const char *usec, const char *pid)
{
    if (usec)
        setenv("WATCHDOG_USEC", usec, 1);
    else
        unsetenv("WATCHDOG_USEC");
    if (pid)
        setenv("WATCHDOG_PID", pid, 1);
    else
        unsetenv("WATCHDOG_PID");
}

Test(sd_watchdog, reads_interval_for_this_process_only)
{
    struct gs_err err = {0};
    uint64_t usec = 1;
    char me[32], other[32];
    snprintf(me, sizeof(me), "%d", (int)getpid());
    snprintf(other, sizeof(other), "%d", (int)getppid());

    set_watchdog(NULL, NULL);
    cr_assert_eq(gs_sd_watchdog_usec(&usec, &err), GS_OK);
    cr_assert_eq(usec, 0);

    set_watchdog("30000000", NULL);
    cr_assert_eq(gs_sd_watchdog_usec(&usec, &err), GS_OK, "%s", err.msg);
    cr_assert_eq(usec, 30000000);

    set_watchdog("15000000", me);
    cr_assert_eq(gs_sd_watchdog_usec(&usec, &err), GS_OK, "%s", err.msg);
    cr_assert_eq(usec, 15000000);

    set_watchdog("15000000", other);
    cr_assert_eq(gs_sd_watchdog_usec(&usec, &err), GS_OK, "%s", err.msg);
    cr_assert_eq(usec, 0, "a watchdog meant for pid %s was taken", other);
    set_watchdog(NULL, NULL);
}

Test(sd_watchdog, refuses_malformed_values_by_name)
{
    static const char *const bad_usec[] = {
        "abc", "0", "-5", "10s", " 5", "", "99999999999999999999"};
    struct gs_err err = {0};
    uint64_t usec = 1;
    for (size_t i = 0; i < GS_ARRAY_LEN(bad_usec); i++) {
        set_watchdog(bad_usec[i], NULL);
        cr_assert_eq(gs_sd_watchdog_usec(&usec, &err), GS_INVAL, "WATCHDOG_USEC='%s'", bad_usec[i]);
        cr_assert_eq(usec, 0);
        cr_assert(strstr(err.msg, "WATCHDOG_USEC"), "%s", err.msg);
    }
    set_watchdog("1000000", "pid1");
    cr_assert_eq(gs_sd_watchdog_usec(&usec, &err), GS_INVAL);
    cr_assert(strstr(err.msg, "WATCHDOG_PID"), "%s", err.msg);
    cr_assert_eq(usec, 0);
    set_watchdog(NULL, NULL);
}

/* ---- socket activation ---------------------------------------------------------------- */

/* What a child is started with, as a service manager would set it up. */
struct child_spec {
    int fds[4]; /* descriptors to pass as 3, 4, ... */
    int n_fds;
    const char *listen_pid; /* NULL: the child's own pid; "PARENT": the test's pid */
    const char *listen_fds; /* NULL: unset */
    const char *names;      /* NULL: unset */
    bool accept_one;        /* after reporting, accept a connection on fd 3 and send "hi" */
};

#define REPORT_FD 100

static void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void report(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vdprintf(REPORT_FD, fmt, ap);
    va_end(ap);
}

/* Runs in the forked child: arranges the descriptors and variables, calls
 * gs_sd_listen_fds() and writes what it found to REPORT_FD. Never returns. */
static void child_main(const struct child_spec *cs)
{
    int high[4];
    for (int i = 0; i < cs->n_fds; i++)
        high[i] = fcntl(cs->fds[i], F_DUPFD, 110 + i);
    for (int fd = 3; fd < REPORT_FD; fd++)
        close(fd);
    for (int i = 0; i < cs->n_fds; i++) {
        /* dup2 leaves FD_CLOEXEC clear on the copy, as after systemd's exec. */
        if (dup2(high[i], 3 + i) != 3 + i)
            _exit(90);
        close(high[i]);
    }
    char pid[32];
    if (!cs->listen_pid)
        snprintf(pid, sizeof(pid), "%d", (int)getpid());
    else if (strcmp(cs->listen_pid, "PARENT") == 0)
        snprintf(pid, sizeof(pid), "%d", (int)getppid());
    else
        snprintf(pid, sizeof(pid), "%s", cs->listen_pid);
    setenv("LISTEN_PID", pid, 1);
    if (cs->listen_fds)
        setenv("LISTEN_FDS", cs->listen_fds, 1);
    else
        unsetenv("LISTEN_FDS");
    if (cs->names)
        setenv("LISTEN_FDNAMES", cs->names, 1);
    else
        unsetenv("LISTEN_FDNAMES");

    struct gs_sd_fds fds;
    struct gs_err err = {0};
    enum gs_status st = gs_sd_listen_fds(&fds, &err);
    report("status=%s n=%zu env_left=%d msg=%s\n", gs_status_str(st), fds.n,
           getenv("LISTEN_PID") || getenv("LISTEN_FDS") || getenv("LISTEN_FDNAMES"), err.msg);
    for (size_t i = 0; i < fds.n; i++) {
        const struct gs_sd_fd *f = &fds.v[i];
        report("fd=%d name=%s family=%s type=%s listening=%d\n", f->fd, f->name,
               f->family == AF_INET   ? "inet"
               : f->family == AF_UNIX ? "unix"
                                      : "other",
               f->type == SOCK_STREAM  ? "stream"
               : f->type == SOCK_DGRAM ? "dgram"
                                       : "other",
               f->listening);
    }
    for (int i = 0; i < cs->n_fds; i++)
        report("cloexec%d=%d\n", 3 + i, (fcntl(3 + i, F_GETFD) & FD_CLOEXEC) != 0);
    if (cs->accept_one && fds.n >= 1) {
        int c = accept(fds.v[0].fd, NULL, NULL);
        if (c < 0 || write(c, "hi", 2) != 2)
            _exit(91);
        close(c);
    }
    gs_sd_fds_deinit(&fds);
    _exit(0);
}

/* Starts the child, optionally connects to port and expects "hi", and
 * returns the child's report (caller frees). */
static char *run_child(const struct child_spec *cs, int port)
{
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        if (dup2(p[1], REPORT_FD) != REPORT_FD)
            _exit(92);
        child_main(cs);
    }
    close(p[1]);
    if (port > 0) {
        int c = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        struct timeval tv = {.tv_sec = 60}; /* a hang guard on the child's answer */
        setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        cr_assert_eq(connect(c, (struct sockaddr *)&sa, sizeof(sa)), 0, "%s", strerror(errno));
        char buf[3] = {0};
        cr_assert_eq(recv(c, buf, 2, MSG_WAITALL), 2, "the child did not serve on fd 3");
        cr_assert_str_eq(buf, "hi");
        close(c);
    }
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    char buf[512];
    ssize_t n;
    while ((n = read(p[0], buf, sizeof(buf))) > 0)
        fwrite(buf, 1, (size_t)n, f);
    fclose(f);
    close(p[0]);
    int ws;
    cr_assert_eq(waitpid(pid, &ws, 0), pid);
    cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "child exit %d; report:\n%s", WEXITSTATUS(ws),
              out);
    return out;
}

static int tcp_listener(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(sa);
    cr_assert_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    cr_assert_eq(listen(fd, 8), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    *port = ntohs(sa.sin_port);
    return fd;
}

static void expect_in(const char *report_text, const char *want)
{
    cr_assert(strstr(report_text, want), "expected '%s' in:\n%s", want, report_text);
}

Test(sd_listen, finds_passed_listener_and_serves_on_it)
{
    int port;
    int l = tcp_listener(&port);
    struct child_spec cs = {
        .fds = {l}, .n_fds = 1, .listen_fds = "1", .names = "http", .accept_one = true};
    char *out = run_child(&cs, port);
    expect_in(out, "status=ok n=1 env_left=0");
    expect_in(out, "fd=3 name=http family=inet type=stream listening=1");
    expect_in(out, "cloexec3=1");
    free(out);
    close(l);
}

Test(sd_listen, describes_each_of_several_descriptors)
{
    int port;
    int l = tcp_listener(&port);
    int d = socket(AF_UNIX, SOCK_DGRAM, 0);
    struct child_spec cs = {.fds = {l, d}, .n_fds = 2, .listen_fds = "2", .names = "https:notify"};
    char *out = run_child(&cs, 0);
    expect_in(out, "status=ok n=2 env_left=0");
    expect_in(out, "fd=3 name=https family=inet type=stream listening=1");
    expect_in(out, "fd=4 name=notify family=unix type=dgram listening=0");
    expect_in(out, "cloexec3=1");
    expect_in(out, "cloexec4=1");
    free(out);

    /* Without LISTEN_FDNAMES each one is "unknown", as systemd says. */
    cs.names = NULL;
    out = run_child(&cs, 0);
    expect_in(out, "fd=3 name=unknown");
    expect_in(out, "fd=4 name=unknown");
    free(out);
    close(l);
    close(d);
}

Test(sd_listen, ignores_descriptors_meant_for_another_process)
{
    int port;
    int l = tcp_listener(&port);
    struct child_spec cs = {.fds = {l}, .n_fds = 1, .listen_pid = "PARENT", .listen_fds = "1"};
    char *out = run_child(&cs, 0);
    expect_in(out, "status=ok n=0 env_left=0");
    expect_in(out, "cloexec3=0"); /* not ours: left alone */
    free(out);

    cs.listen_fds = NULL; /* LISTEN_PID alone */
    cs.listen_pid = NULL;
    out = run_child(&cs, 0);
    expect_in(out, "status=ok n=0 env_left=0");
    free(out);
    close(l);
}

Test(sd_listen, refuses_malformed_variables_cleanly)
{
    static const struct {
        const char *pid, *n, *names, *want;
    } cases[] = {
        {NULL, "abc", NULL, "LISTEN_FDS: 'abc'"},
        {NULL, "-1", NULL, "LISTEN_FDS: '-1'"},
        {NULL, "1x", NULL, "LISTEN_FDS: '1x'"},
        {NULL, "99999999999", NULL, "LISTEN_FDS: '99999999999'"},
        {"abc", "1", NULL, "LISTEN_PID: 'abc'"},
        {"0", "1", NULL, "LISTEN_PID: '0'"},
        {NULL, "1", "a:b", "LISTEN_FDNAMES: more names"},
        {NULL, "3", "a:b", "descriptor 4 is not open"},
        {NULL, "2", "a", "LISTEN_FDNAMES: 1 names for LISTEN_FDS=2"},
    };
    int port;
    int l = tcp_listener(&port);
    int d = socket(AF_UNIX, SOCK_DGRAM, 0);
    for (size_t i = 0; i < GS_ARRAY_LEN(cases); i++) {
        struct child_spec cs = {.fds = {l, d},
                                .n_fds = 2,
                                .listen_pid = cases[i].pid,
                                .listen_fds = cases[i].n,
                                .names = cases[i].names};
        if (strstr(cases[i].want, "descriptor 4"))
            cs.n_fds = 1; /* LISTEN_FDS=3 with only fd 3 open */
        char *out = run_child(&cs, 0);
        expect_in(out, "status=invalid argument n=0 env_left=0");
        expect_in(out, cases[i].want);
        /* A refusal touches no descriptor. */
        expect_in(out, "cloexec3=0");
        free(out);
    }
    close(l);
    close(d);
}

Test(sd_listen, nothing_passed_means_nothing_found)
{
    struct child_spec cs = {.n_fds = 0, .listen_fds = "0"};
    char *out = run_child(&cs, 0);
    expect_in(out, "status=ok n=0 env_left=0");
    free(out);
    /* Called outside any service manager: no variables at all. */
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    struct gs_sd_fds fds;
    struct gs_err err = {0};
    cr_assert_eq(gs_sd_listen_fds(&fds, &err), GS_OK);
    cr_assert_eq(fds.n, 0);
    cr_assert_null(fds.v);
    gs_sd_fds_deinit(&fds);
}
