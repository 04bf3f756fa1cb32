/*
 * server/systemd.c - sd_notify and socket activation without libsystemd.
 * The contract and the protocol facts are in server/systemd.h.
 */
#define _GNU_SOURCE
#include "server/systemd.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#define NOTIFYF_MAX_BYTES 4096

/* ---- helpers ------------------------------------------------------------------ */

/* Parses a plain decimal integer ("0".."max"): no sign, no spaces, no suffix,
 * which is what systemd writes. Returns false for anything else. */
static bool parse_dec(const char *s, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    if (!s || !*s)
        return false;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9')
            return false;
        if (gs_mul_overflow(v, 10, &v) || gs_add_overflow(v, (uint64_t)(*p - '0'), &v))
            return false;
    }
    if (v > max)
        return false;
    *out = v;
    return true;
}

/* Every non-empty line of a notification must be an assignment. */
static bool state_is_assignments(const char *state)
{
    const char *line = state;
    while (*line) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        if (len > 0) {
            const char *eq = memchr(line, '=', len);
            if (!eq || eq == line)
                return false;
        }
        if (!end)
            break;
        line = end + 1;
    }
    return true;
}

/* Fills *sa from $NOTIFY_SOCKET's value. */
static enum gs_status notify_addr(const char *path, struct sockaddr_un *sa, socklen_t *sa_len,
                                  struct gs_err *err)
{
    size_t len = strlen(path);
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    if (path[0] == '/') {
        if (len >= sizeof(sa->sun_path))
            return gs_err_set(err, GS_INVAL, "NOTIFY_SOCKET: path of %zu bytes is too long", len);
        memcpy(sa->sun_path, path, len + 1);
        *sa_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + 1);
        return GS_OK;
    }
    if (path[0] == '@') {
        /* Abstract namespace: a leading NUL byte, and the address length (not
         * a terminator) marks where the name ends. */
        if (len > sizeof(sa->sun_path) || len < 2)
            return gs_err_set(err, GS_INVAL, "NOTIFY_SOCKET: abstract name '%s' has a bad length",
                              path);
        sa->sun_path[0] = '\0';
        memcpy(sa->sun_path + 1, path + 1, len - 1);
        *sa_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
        return GS_OK;
    }
    return gs_err_set(err, GS_INVAL,
                      "NOTIFY_SOCKET: '%s' is neither an absolute path nor an '@' abstract name",
                      path);
}

/* ---- notifications ---------------------------------------------------------- */

enum gs_status gs_sd_notify(const char *state, bool *sent, struct gs_err *err)
{
    if (sent)
        *sent = false;
    if (!state || !*state)
        return gs_err_set(err, GS_INVAL, "sd_notify: empty state");
    if (!state_is_assignments(state))
        return gs_err_set(err, GS_INVAL, "sd_notify: a line of the state is not VAR=value");

    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !*path)
        return GS_OK;

    struct sockaddr_un sa;
    socklen_t sa_len = 0;
    enum gs_status st = notify_addr(path, &sa, &sa_len, err);
    if (st != GS_OK)
        return st;

    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return gs_err_set(err, GS_IO, "NOTIFY_SOCKET: socket: %s", strerror(errno));
    /* A full receive queue makes a datagram send block; bound that wait so
     * that the engine loop's watchdog ping cannot hang the engine. */
    struct timeval tv = {.tv_sec = GS_SD_NOTIFY_TIMEOUT_MS / 1000,
                         .tv_usec = (GS_SD_NOTIFY_TIMEOUT_MS % 1000) * 1000};
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));

    size_t len = strlen(state);
    ssize_t n;
    do {
        n = sendto(fd, state, len, MSG_NOSIGNAL, (const struct sockaddr *)&sa, sa_len);
    } while (n < 0 && errno == EINTR);
    int e = errno;
    close(fd);
    if (n < 0 && (e == EAGAIN || e == EWOULDBLOCK))
        return gs_err_set(err, GS_BUSY, "NOTIFY_SOCKET %s: receiver's queue full for %d ms", path,
                          GS_SD_NOTIFY_TIMEOUT_MS);
    if (n < 0)
        return gs_err_set(err, GS_IO, "NOTIFY_SOCKET %s: send: %s", path, strerror(e));
    if ((size_t)n != len)
        return gs_err_set(err, GS_IO, "NOTIFY_SOCKET %s: sent %zd of %zu bytes", path, n, len);
    if (sent)
        *sent = true;
    return GS_OK;
}

enum gs_status gs_sd_notifyf(bool *sent, struct gs_err *err, const char *fmt, ...)
{
    char buf[NOTIFYF_MAX_BYTES];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (sent)
        *sent = false;
    if (n < 0 || (size_t)n >= sizeof(buf))
        return gs_err_set(err, GS_INVAL, "sd_notify: message longer than %d bytes",
                          NOTIFYF_MAX_BYTES - 1);
    return gs_sd_notify(buf, sent, err);
}

/* ---- watchdog ---------------------------------------------------------------------- */

enum gs_status gs_sd_watchdog_usec(uint64_t *usec, struct gs_err *err)
{
    *usec = 0;
    const char *pid_s = getenv("WATCHDOG_PID");
    if (pid_s) {
        uint64_t pid;
        if (!parse_dec(pid_s, INT_MAX, &pid) || pid == 0)
            return gs_err_set(err, GS_INVAL, "WATCHDOG_PID: '%s' is not a process id", pid_s);
        if (pid != (uint64_t)getpid())
            return GS_OK;
    }
    const char *usec_s = getenv("WATCHDOG_USEC");
    if (!usec_s)
        return GS_OK;
    uint64_t v;
    if (!parse_dec(usec_s, UINT64_MAX, &v) || v == 0)
        return gs_err_set(err, GS_INVAL,
                          "WATCHDOG_USEC: '%s' is not a positive number of microseconds", usec_s);
    *usec = v;
    return GS_OK;
}

/* ---- socket activation --------------------------------------------------------------- */

static void unset_listen_env(void)
{
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
}

/* Splits LISTEN_FDNAMES into fds->v[i].name; the count must be fds->n. */
static enum gs_status copy_names(const char *names, struct gs_sd_fds *fds, struct gs_err *err)
{
    size_t i = 0;
    const char *p = names;
    for (;;) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (i == fds->n)
            return gs_err_set(err, GS_INVAL, "LISTEN_FDNAMES: more names than LISTEN_FDS=%zu",
                              fds->n);
        if (len >= sizeof(fds->v[i].name))
            return gs_err_set(err, GS_INVAL, "LISTEN_FDNAMES: name %zu is longer than %zu bytes", i,
                              sizeof(fds->v[i].name) - 1);
        memcpy(fds->v[i].name, p, len);
        fds->v[i].name[len] = '\0';
        i++;
        if (!end)
            break;
        p = end + 1;
    }
    if (i != fds->n)
        return gs_err_set(err, GS_INVAL, "LISTEN_FDNAMES: %zu names for LISTEN_FDS=%zu", i, fds->n);
    return GS_OK;
}

/* What kind of descriptor fd is: socket family, type and listening state. */
static void describe_fd(struct gs_sd_fd *f)
{
    struct sockaddr_storage ss;
    socklen_t ss_len = sizeof(ss);
    int v;
    socklen_t v_len = sizeof(v);
    f->family = -1;
    f->type = -1;
    f->listening = false;
    if (getsockname(f->fd, (struct sockaddr *)&ss, &ss_len) != 0)
        return;
    f->family = ss.ss_family;
    if (getsockopt(f->fd, SOL_SOCKET, SO_TYPE, &v, &v_len) == 0)
        f->type = v;
    v_len = sizeof(v);
    if (getsockopt(f->fd, SOL_SOCKET, SO_ACCEPTCONN, &v, &v_len) == 0)
        f->listening = v != 0;
}

static enum gs_status listen_fds(struct gs_sd_fds *fds, struct gs_err *err)
{
    const char *pid_s = getenv("LISTEN_PID");
    const char *n_s = getenv("LISTEN_FDS");
    const char *names = getenv("LISTEN_FDNAMES");
    if (!pid_s || !n_s)
        return GS_OK;

    uint64_t pid, n;
    if (!parse_dec(pid_s, INT_MAX, &pid) || pid == 0)
        return gs_err_set(err, GS_INVAL, "LISTEN_PID: '%s' is not a process id", pid_s);
    if (pid != (uint64_t)getpid())
        return GS_OK;
    if (!parse_dec(n_s, (uint64_t)INT_MAX - GS_SD_LISTEN_FDS_START, &n))
        return gs_err_set(err, GS_INVAL, "LISTEN_FDS: '%s' is not a descriptor count", n_s);
    if (n == 0)
        return GS_OK;

    /* Check every descriptor before touching any, so that a refusal leaves
     * the process as it was. */
    for (uint64_t i = 0; i < n; i++) {
        int fd = GS_SD_LISTEN_FDS_START + (int)i;
        if (fcntl(fd, F_GETFD) < 0)
            return gs_err_set(err, GS_INVAL, "LISTEN_FDS=%s: descriptor %d is not open", n_s, fd);
    }

    fds->v = gs_alloc_array(n, sizeof(*fds->v));
    if (!fds->v)
        return gs_err_set(err, GS_NOMEM, "LISTEN_FDS: out of memory for %s descriptors", n_s);
    fds->n = n;
    for (size_t i = 0; i < n; i++) {
        fds->v[i].fd = GS_SD_LISTEN_FDS_START + (int)i;
        snprintf(fds->v[i].name, sizeof(fds->v[i].name), "unknown");
    }
    if (names) {
        enum gs_status st = copy_names(names, fds, err);
        if (st != GS_OK) {
            gs_sd_fds_deinit(fds);
            return st;
        }
    }
    for (size_t i = 0; i < n; i++) {
        int flags = fcntl(fds->v[i].fd, F_GETFD);
        if (flags >= 0 && !(flags & FD_CLOEXEC))
            (void)fcntl(fds->v[i].fd, F_SETFD, flags | FD_CLOEXEC);
        describe_fd(&fds->v[i]);
    }
    return GS_OK;
}

enum gs_status gs_sd_listen_fds(struct gs_sd_fds *fds, struct gs_err *err)
{
    fds->n = 0;
    fds->v = NULL;
    enum gs_status st = listen_fds(fds, err);
    /* Read once: a child, or a second call, must not take these as its own. */
    unset_listen_env();
    return st;
}

void gs_sd_fds_deinit(struct gs_sd_fds *fds)
{
    if (!fds)
        return;
    gs_free(fds->v);
    fds->v = NULL;
    fds->n = 0;
}
