/*
 * server/systemd.h - the parts of the systemd service protocol the daemon
 * speaks, implemented natively (no libsystemd): readiness and watchdog
 * notifications over $NOTIFY_SOCKET, and socket activation ($LISTEN_FDS).
 * Outside systemd (no variables set) every call is a harmless no-op, so the
 * daemon calls them unconditionally; launchd, containers and a terminal see
 * no difference.
 *
 * Protocol facts (sd_notify(3), sd_listen_fds(3), systemd.exec(5)):
 *   - NOTIFY_SOCKET is the path of a unix datagram socket, or an abstract
 *     socket name written with a leading '@'. A message is newline-separated
 *     VAR=value assignments, e.g. "READY=1", "STOPPING=1", "WATCHDOG=1",
 *     "STATUS=loading model", "RELOADING=1".
 *   - WATCHDOG_USEC (with WATCHDOG_PID, when set, naming this process) is the
 *     watchdog interval; the service should send WATCHDOG=1 at least every
 *     half of it.
 *   - Passed sockets start at descriptor 3 (SD_LISTEN_FDS_START), LISTEN_FDS
 *     of them, for the process LISTEN_PID; LISTEN_FDNAMES names them,
 *     colon-separated (FileDescriptorName=, "unknown" when unset).
 *
 * Ownership: struct gs_sd_fds is caller-allocated; gs_sd_listen_fds() fills
 * it with a gs_malloc'd array that gs_sd_fds_deinit() frees. The descriptors
 * themselves belong to the caller from then on (they are not closed by
 * gs_sd_fds_deinit()).
 *
 * Threads: gs_sd_notify() and gs_sd_notifyf() may be called from any thread
 * (each call opens, uses and closes its own socket; the environment is only
 * read). gs_sd_listen_fds() and gs_sd_watchdog_usec() read, and the former
 * unsets, environment variables: call them once at start, before any other
 * thread exists.
 */
#ifndef GS_SERVER_SYSTEMD_H
#define GS_SERVER_SYSTEMD_H

#include "engine/base.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The first descriptor systemd passes (SD_LISTEN_FDS_START). */
#define GS_SD_LISTEN_FDS_START 3

/* How long a notification may wait for room in the receiver's queue before
 * gs_sd_notify() gives up with GS_BUSY (the engine loop sends WATCHDOG=1 and
 * must not hang on a stuck manager). */
#define GS_SD_NOTIFY_TIMEOUT_MS 2000

/* ---- notifications ------------------------------------------------------- */

/*
 * Sends state (one or more "VAR=value" lines, separated by '\n') to the
 * socket named by $NOTIFY_SOCKET. *sent (may be NULL) says whether a message
 * went out: false with GS_OK when NOTIFY_SOCKET is unset or empty (not run by
 * a service manager).
 *
 * GS_INVAL: state is NULL or empty, a line of it has no '=' (a status text
 * holding a newline would otherwise smuggle in assignments), or NOTIFY_SOCKET
 * is neither an absolute path nor '@name', or is too long for a socket
 * address; GS_IO: the socket cannot be created or the send failed (errno's
 * text in the message); GS_BUSY: the receiver's queue stayed full for
 * GS_SD_NOTIFY_TIMEOUT_MS.
 */
enum gs_status gs_sd_notify(const char *state, bool *sent, struct gs_err *err);

/* printf-style gs_sd_notify(), e.g. gs_sd_notifyf(NULL, &err, "STATUS=%s", what).
 * A message longer than 4 KiB is refused with GS_INVAL. */
enum gs_status gs_sd_notifyf(bool *sent, struct gs_err *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- watchdog -------------------------------------------------------------- */

/*
 * The watchdog interval the service manager expects pings within, in
 * microseconds, or 0 when none is requested (WATCHDOG_USEC unset, or
 * WATCHDOG_PID set to another process). Send WATCHDOG=1 every *usec / 2.
 * GS_INVAL, naming the variable, when WATCHDOG_USEC is not a positive decimal
 * integer or WATCHDOG_PID is not a process id; *usec is then 0 and the
 * caller should log the message and run without a watchdog.
 */
enum gs_status gs_sd_watchdog_usec(uint64_t *usec, struct gs_err *err);

/* ---- socket activation ------------------------------------------------------ */

/* One descriptor passed by the service manager. */
struct gs_sd_fd {
    int fd;         /* GS_SD_LISTEN_FDS_START + index */
    char name[256]; /* from LISTEN_FDNAMES, "unknown" when unnamed */
    int family;     /* AF_INET, AF_INET6, AF_UNIX, ...; -1 when not a socket */
    int type;       /* SOCK_STREAM, SOCK_DGRAM, ...; -1 when not a socket */
    bool listening; /* a socket in the listening state (SO_ACCEPTCONN) */
};

struct gs_sd_fds {
    size_t n;
    struct gs_sd_fd *v; /* [n], gs_malloc'd; NULL when n == 0 */
};

/*
 * Collects the descriptors passed for this process: none (n = 0, GS_OK) when
 * LISTEN_PID or LISTEN_FDS is unset, or LISTEN_PID names another process
 * (they were meant for a parent; a wrapper's leftover variables are not
 * ours). Each descriptor gets FD_CLOEXEC, so that nothing the daemon might
 * start inherits it. LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES are unset in
 * every case, success or failure, so that they are read once.
 *
 * GS_INVAL, naming the variable and its value, when LISTEN_PID or LISTEN_FDS
 * is not a decimal integer in range, LISTEN_FDNAMES does not have exactly
 * LISTEN_FDS names, or one of the descriptors is not open; GS_NOMEM. On
 * failure fds is empty and none of the descriptors was touched.
 */
enum gs_status gs_sd_listen_fds(struct gs_sd_fds *fds, struct gs_err *err);

/* Frees fds->v (not the descriptors) and zeroes fds. Safe on a zeroed fds. */
void gs_sd_fds_deinit(struct gs_sd_fds *fds);

#endif /* GS_SERVER_SYSTEMD_H */
