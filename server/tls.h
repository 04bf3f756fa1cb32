/*
 * server/tls.h - the daemon's TLS terminator. libmicrohttpd's own TLS is
 * GnuTLS-only, so graphserve terminates TLS itself with mbedTLS and hands the
 * plaintext to libmicrohttpd over a socketpair:
 *
 *   client --TCP/TLS--> [listening socket, accept] --handshake (mbedTLS)-->
 *   relay: ciphertext on the TCP socket <-> plaintext on one end of a
 *   socketpair; the other end goes to the deliver callback (the daemon passes
 *   it to MHD_add_connection with the client's real address, so that logs and
 *   per-IP limits see the client, not the relay).
 *
 * Policy: TLS 1.2 minimum, AEAD cipher suites with forward secrecy only
 * (ECDHE with GCM, CCM or ChaCha20-Poly1305; no 8-byte-tag CCM), no
 * renegotiation, a handshake timeout, and caps on handshakes in progress, in
 * all and per client address. The listening socket is always polled: a new
 * connection beyond a cap evicts the handshake that has waited longest (that
 * address's oldest, or the oldest of all), so silent connections cannot
 * starve fresh clients and handshakes cost bounded memory. With a client CA,
 * clients must present a certificate it signed (verification required). A
 * plain-HTTP request to the TLS port gets a short 400 in plain text and is
 * closed; any other non-TLS first byte is closed at once.
 *
 * The relay is event-driven through uv_poll on both descriptors, level
 * triggered, and polls a direction only while it can move data: each way has
 * one 16 KiB buffer, and while the receiving side cannot take more, the
 * sending side is not read (backpressure both ways). An idle connection polls
 * only for readability and costs no CPU. When the daemon closes its end, the
 * client gets a close_notify. When the client finishes sending (a TCP FIN or
 * a close_notify), that is a half-close: the daemon's end gets
 * shutdown(SHUT_WR) once everything before it is delivered, and the daemon's
 * answer is still relayed until the daemon closes or a write to the client
 * fails. When the client resets or sends garbage, the daemon's end is closed
 * and libmicrohttpd sees the peer gone.
 *
 * Plain HTTP goes through the same relay (gs_srv_tls_new with no certificate):
 * libmicrohttpd 0.9.75 closes a connection whose FIN it reads before it has
 * handed the request over, so a client that sends its request and then shuts
 * down its sending side (nc -N, HTTP/1.0 clients, some proxies) lost its
 * answer. The relay holds such a FIN while a request the client sent is
 * unanswered: the daemon reports each finished request
 * (gs_srv_tls_request_done) and only then, or at once when nothing is pending,
 * does the daemon's end get its shutdown(SHUT_WR). TLS connections get the
 * same treatment.
 *
 * Threads: loop thread only (the loop passed to gs_srv_tls_new).
 * Ownership: gs_srv_tls_new takes the listening descriptor; the file paths
 * are read during the call and not kept. gs_srv_tls_close starts closing
 * (handles close through the loop, which must run afterwards); then
 * gs_srv_tls_free releases the rest.
 */
#ifndef GS_SERVER_TLS_H
#define GS_SERVER_TLS_H

#include "server/internal.h"
#include "server/server.h"

#include <sys/socket.h>
#include <uv.h>

struct gs_srv_tls;

/* Receives the daemon's end of a socketpair carrying one connection's
 * plaintext (non-blocking, close-on-exec; the callee owns it) and the
 * client's address. */
typedef void (*gs_srv_tls_deliver_fn)(void *ctx, int fd, const struct sockaddr *peer,
                                      socklen_t peer_len);

/*
 * Loads the certificate, key and optional client CA named in cfg and starts
 * accepting TLS connections on listen_fd (a bound, listening, non-blocking
 * TCP socket; owned from this call on, closed on failure too). GS_IO when a
 * PEM file cannot be read or parsed, GS_INVAL when a limit in cfg is 0, the
 * key does not match the certificate or no cipher suite is left; the message names the option
 * (--tls-cert, --tls-key, --tls-client-ca) and mbedTLS's reason.
 */
enum gs_status gs_srv_tls_new(uv_loop_t *loop, const struct gs_srv_tls_cfg *cfg, int listen_fd,
                              gs_srv_tls_deliver_fn deliver, void *ctx, struct gs_srv_tls **out,
                              struct gs_err *err);

/* The daemon answered a request on the connection whose daemon end is
 * daemon_fd: a FIN the client sent meanwhile may now reach the daemon. */
void gs_srv_tls_request_done(struct gs_srv_tls *t, int daemon_fd);

/* Stops accepting (the drain): closes the listening socket. Connections
 * already accepted carry on. Idempotent. */
void gs_srv_tls_stop_accepting(struct gs_srv_tls *t);

/*
 * Closes everything: the listener, handshakes in progress at once, and each
 * relay as soon as what the daemon already wrote has been sent to the client
 * (within GS_SRV_TLS_CLOSE_GRACE_MS). Handles close through the loop; run it
 * until it has no more handles, then call gs_srv_tls_free. Idempotent.
 */
void gs_srv_tls_close(struct gs_srv_tls *t);

#define GS_SRV_TLS_CLOSE_GRACE_MS 2000

/* Frees the TLS configuration; every handle must have closed (the loop ran
 * after gs_srv_tls_close). NULL is a no-op. */
void gs_srv_tls_free(struct gs_srv_tls *t);

/* Counters, for tests and logs. */
struct gs_srv_tls_stats {
    uint64_t n_accepted;    /* TCP connections accepted */
    uint64_t n_handshakes;  /* completed handshakes, handed to the daemon */
    uint64_t n_refused;     /* failed handshakes, plain HTTP, garbage (not timeouts) */
    uint64_t n_timeouts;    /* handshakes not done within the timeout */
    uint64_t n_evicted;     /* handshakes dropped to make room for a newer connection */
    uint32_t n_handshaking; /* in progress now */
    uint32_t n_open;        /* connections open now (handshaking or relaying) */
};
void gs_srv_tls_stats(const struct gs_srv_tls *t, struct gs_srv_tls_stats *out);

/* Appends the counters in Prometheus text format for /metrics:
 * graphserve_tls_handshakes_total{result="ok|refused|timeout|evicted"},
 * graphserve_tls_handshakes_in_progress, graphserve_tls_connections_open. */
void gs_srv_tls_metrics_render(const struct gs_srv_tls *t, struct gs_srv_buf *o);

/* Creates a non-blocking listening TCP socket bound to addr (SO_REUSEADDR);
 * *fd_out on success. GS_IO with errno's text otherwise. */
enum gs_status gs_srv_tls_listen(const struct sockaddr *addr, socklen_t len, int *fd_out,
                                 struct gs_err *err);

#endif /* GS_SERVER_TLS_H */
