/*
 * server/tls.c - TLS termination with mbedTLS in front of libmicrohttpd (the
 * contract, policy and data flow are in server/tls.h).
 */
#define _GNU_SOURCE
#include "server/tls.h"

#include "config/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <mbedtls/cipher.h>
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/net_sockets.h>
#include <mbedtls/pk.h>
#include <mbedtls/ssl.h>
#include <mbedtls/ssl_ciphersuites.h>
#include <mbedtls/x509_crt.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define RELAY_BUF_BYTES   16384 /* one TLS record's worth of plaintext each way */
#define ACCEPT_BACKOFF_MS 100   /* out of descriptors: retry accepting after this */
#define ACCEPT_BATCH      64    /* accepts per wakeup, so that a flood cannot starve the loop */
#define MAX_SUITES        64
/* The kernel send buffer of both sockets on a connection's way out, the client's TCP
 * socket and the daemon's end of the socketpair (Linux doubles it). Fixed because the
 * kernel would otherwise grow it to megabytes (tcp_wmem) for a client that does not
 * read, and hold what --max-stream-buffer-bytes means to bound; ample for a client
 * that reads. */
#define SNDBUF_BYTES (256 * 1024)

/* A plain-HTTP request on the TLS port gets this, unencrypted (as nginx does). */
static const char plain_http_answer[] =
    "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n"
    "Content-Length: 50\r\n\r\nThis port speaks HTTPS only: use an https:// URL.\n";

enum conn_state { CONN_HANDSHAKE, CONN_RELAY, CONN_CLOSE_NOTIFY };

struct conn {
    struct gs_srv_tls *t;
    struct conn *prev, *next;       /* every open connection */
    struct conn *hs_prev, *hs_next; /* CONN_HANDSHAKE only, oldest first (accept order) */
    enum conn_state state;
    int fd;  /* TCP socket to the client */
    int pfd; /* our end of the socketpair to the daemon; -1 before the handshake ends */
    uv_poll_t tcp_poll, plain_poll;
    uv_timer_t timer; /* handshake timeout, then the close grace */
    int n_handles;    /* open uv handles; the conn is freed when the last one closes */
    bool closed;      /* conn_close ran */
    bool draining;    /* the daemon is closing: end once its bytes are sent */
    bool peeked;      /* the first byte was seen to start a TLS handshake */
    bool up_dead;     /* the daemon closed its end: what the client sends is dropped */
    bool timed_out;   /* the handshake timeout ended it */
    bool evicted;     /* a newer connection took its handshake slot */
    bool up_eof;      /* the client finished sending (FIN or close_notify) */
    bool up_shut;     /* ...and the daemon's end was told so (shutdown SHUT_WR) */
    bool pending;     /* bytes went up since the daemon last finished a request */
    bool down_shut;   /* plain: the client got our FIN; draining what it still sends */
    int dfd;          /* the daemon's end of the socketpair (its number, for request_done) */
    int tcp_events, plain_events; /* what each poll watches now */
    mbedtls_ssl_context ssl;
    struct sockaddr_storage peer;
    socklen_t peer_len;
    unsigned char up[RELAY_BUF_BYTES]; /* decrypted from the client, for the daemon */
    size_t up_len, up_off;
    unsigned char down[RELAY_BUF_BYTES]; /* from the daemon, for mbedtls_ssl_write */
    size_t down_len, down_off;
};

struct gs_srv_tls {
    uv_loop_t *loop;
    int listen_fd;
    uv_poll_t listen_poll;
    uv_timer_t backoff;
    bool listen_open, listening, closing;
    bool plain; /* no certificate: relay plaintext, no handshake */
    struct gs_srv_tls_cfg cfg;
    gs_srv_tls_deliver_fn deliver;
    void *ctx;
    struct conn *conns;
    struct conn *hs_oldest, *hs_newest; /* the handshakes in progress, in accept order */
    struct gs_srv_tls_stats st;

    mbedtls_ssl_config conf;
    mbedtls_x509_crt cert, client_ca;
    mbedtls_pk_context key;
    mbedtls_entropy_context entropy;
    mbedtls_ctr_drbg_context drbg;
    int suites[MAX_SUITES + 1]; /* 0-terminated; mbedtls keeps a pointer to it */
};

static void pump(struct conn *c);
static void listen_update(struct gs_srv_tls *t);

/* ---- helpers ---------------------------------------------------------------------------- */

static const char *peer_text(const struct conn *c, char *buf, size_t cap)
{
    const struct sockaddr *sa = (const struct sockaddr *)&c->peer;
    const void *a = sa->sa_family == AF_INET6 ? (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr
                                              : (const void *)&((const struct sockaddr_in *)sa)->sin_addr;
    if (!inet_ntop(sa->sa_family, a, buf, (socklen_t)cap))
        snprintf(buf, cap, "?");
    return buf;
}

/* Whether two client addresses are the same host (the port is not compared). */
static bool same_host(const struct sockaddr_storage *a, const struct sockaddr_storage *b)
{
    if (a->ss_family != b->ss_family)
        return false;
    if (a->ss_family == AF_INET6)
        return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
                       &((const struct sockaddr_in6 *)b)->sin6_addr, sizeof(struct in6_addr));
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    return false;
}

static enum gs_status tls_fail(struct gs_err *err, enum gs_status code, const char *what,
                               const char *path, int ret)
{
    char reason[160];
    mbedtls_strerror(ret, reason, sizeof(reason));
    return gs_err_set(err, code, "%s %s: %s (mbedTLS -0x%04x)", what, path, reason,
                      (unsigned)-ret);
}

/* BIO callbacks: the raw socket, never blocking, never raising SIGPIPE. */
static int bio_send(void *ctx, const unsigned char *buf, size_t len)
{
    struct conn *c = ctx;
    ssize_t n = send(c->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0)
        return (int)n;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
        return MBEDTLS_ERR_SSL_WANT_WRITE;
    return MBEDTLS_ERR_NET_SEND_FAILED;
}

static int bio_recv(void *ctx, unsigned char *buf, size_t len)
{
    struct conn *c = ctx;
    ssize_t n = recv(c->fd, buf, len, MSG_DONTWAIT);
    if (n >= 0)
        return (int)n;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
        return MBEDTLS_ERR_SSL_WANT_READ;
    return MBEDTLS_ERR_NET_RECV_FAILED;
}

/* ---- connection lifetime ---------------------------------------------------------------- */

static void hs_unlink(struct conn *c)
{
    struct gs_srv_tls *t = c->t;
    if (c->hs_prev)
        c->hs_prev->hs_next = c->hs_next;
    else
        t->hs_oldest = c->hs_next;
    if (c->hs_next)
        c->hs_next->hs_prev = c->hs_prev;
    else
        t->hs_newest = c->hs_prev;
    c->hs_prev = c->hs_next = NULL;
}

/* A connection's record holds its two relay buffers (33 KiB): it is mapped from the
 * kernel rather than malloc'd, and unmapped when the connection ends, so that
 * connections coming and going leave no holes in the heap between the daemon's
 * longer-lived objects (which the soak's idle memory showed as growth). Zeroed. */
static struct conn *conn_alloc(void)
{
    void *p =
        mmap(NULL, sizeof(struct conn), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void conn_release(struct conn *c)
{
    munmap(c, sizeof(*c));
}

static void on_handle_closed(uv_handle_t *h)
{
    struct conn *c = h->data;
    if (--c->n_handles > 0)
        return;
    mbedtls_ssl_free(&c->ssl);
    conn_release(c);
}

/* Ends a connection at once: both descriptors closed (the daemon's side sees
 * its peer gone), handles closed through the loop. */
static void conn_close(struct conn *c, const char *why)
{
    if (c->closed)
        return;
    c->closed = true;
    struct gs_srv_tls *t = c->t;
    if (c->state == CONN_HANDSHAKE) {
        t->st.n_handshaking--;
        hs_unlink(c);
        if (why) {
            char ip[INET6_ADDRSTRLEN];
            if (c->evicted)
                t->st.n_evicted++;
            else if (!c->timed_out)
                t->st.n_refused++;
            gs_log(GS_LOG_DEBUG, "tls_refused", "peer=%s reason=\"%s\"",
                   peer_text(c, ip, sizeof(ip)), why);
        }
    }
    t->st.n_open--;
    if (c->prev)
        c->prev->next = c->next;
    else
        t->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    /* uv_close stops the polls at once, so the descriptors may close right after. */
    uv_close((uv_handle_t *)&c->tcp_poll, on_handle_closed);
    uv_close((uv_handle_t *)&c->timer, on_handle_closed);
    if (c->pfd >= 0) {
        uv_close((uv_handle_t *)&c->plain_poll, on_handle_closed);
        close(c->pfd);
    }
    close(c->fd);
    listen_update(t);
}

static void on_conn_timer(uv_timer_t *h)
{
    struct conn *c = h->data;
    if (c->state == CONN_HANDSHAKE) {
        c->t->st.n_timeouts++;
        c->timed_out = true;
        conn_close(c, "handshake timeout");
    } else {
        conn_close(c, NULL); /* the close grace ran out */
    }
}

static void set_poll(uv_poll_t *p, int *cur, int want, uv_poll_cb cb)
{
    if (want == *cur)
        return;
    *cur = want;
    if (want)
        uv_poll_start(p, want, cb);
    else
        uv_poll_stop(p);
}

static void on_conn_poll(uv_poll_t *h, int status, int events)
{
    struct conn *c = h->data;
    (void)events;
    /* An error on the daemon's end may come with an answer still queued on it
     * (libmicrohttpd answers 431 and closes with the client's bytes unread, which
     * an AF_UNIX socket reports as a reset): the relay reads what is there first
     * and ends the connection when a read or write fails. */
    if (status < 0 && (h != &c->plain_poll || c->state != CONN_RELAY)) {
        conn_close(c, "socket error");
        return;
    }
    pump(c);
}

/* ---- the handshake ------------------------------------------------------------------------ */

/* Looks at the first byte before mbedTLS does: a TLS handshake record starts
 * with 0x16; an upper-case letter is an HTTP method sent in the clear. */
static bool first_byte_ok(struct conn *c, bool *wait)
{
    unsigned char b;
    *wait = false;
    ssize_t n = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        *wait = true;
        return true;
    }
    if (n <= 0) {
        conn_close(c, n == 0 ? "closed before the handshake" : "socket error");
        return false;
    }
    if (b == 0x16)
        return true;
    if (b >= 'A' && b <= 'Z') {
        /* The request is read first: closing a socket with unread input
         * resets it, and the reset can overtake the answer. The answer fits
         * any socket buffer; a short write only shortens a courtesy message. */
        unsigned char junk[4096];
        while (recv(c->fd, junk, sizeof(junk), MSG_DONTWAIT) > 0)
            ;
        ssize_t w = send(c->fd, plain_http_answer, sizeof(plain_http_answer) - 1,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)w;
        shutdown(c->fd, SHUT_WR);
        conn_close(c, "plain HTTP on the TLS port");
    } else {
        conn_close(c, "not a TLS handshake");
    }
    return false;
}

static void fix_sndbuf(int fd)
{
    int bytes = SNDBUF_BYTES;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
}

/* A connection ready for the relay (its handshake done, or plain): the socketpair
 * to the daemon, whose end is delivered to it. */
static void relay_start(struct conn *c)
{
    struct gs_srv_tls *t = c->t;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) {
        gs_log(GS_LOG_WARN, "tls_socketpair", "error=\"%s\"", strerror(errno));
        conn_close(c, "no socketpair");
        return;
    }
    if (c->state == CONN_HANDSHAKE) {
        uv_timer_stop(&c->timer);
        hs_unlink(c);
        t->st.n_handshaking--;
        t->st.n_handshakes++;
    }
    c->state = CONN_RELAY;
    c->pfd = sv[0];
    c->dfd = sv[1];
    fix_sndbuf(c->dfd);
    uv_poll_init(t->loop, &c->plain_poll, c->pfd);
    c->plain_poll.data = c;
    c->n_handles++;
    listen_update(t);
    /* The daemon owns sv[1] from here, even when it refuses the connection
     * (then it closes it and the relay below sees the end). */
    t->deliver(t->ctx, sv[1], (const struct sockaddr *)&c->peer, c->peer_len);
    pump(c);
}

static void handshake_step(struct conn *c)
{
    bool wait = false;
    if (!c->peeked) {
        if (!first_byte_ok(c, &wait))
            return;
        c->peeked = !wait;
    }
    int want = 0;
    if (wait) {
        want = UV_READABLE;
    } else {
        int r = mbedtls_ssl_handshake(&c->ssl);
        if (r == 0) {
            relay_start(c);
            return;
        }
        if (r == MBEDTLS_ERR_SSL_WANT_READ) {
            want = UV_READABLE;
        } else if (r == MBEDTLS_ERR_SSL_WANT_WRITE) {
            want = UV_WRITABLE;
        } else {
            char why[160];
            mbedtls_strerror(r, why, sizeof(why));
            conn_close(c, why);
            return;
        }
    }
    set_poll(&c->tcp_poll, &c->tcp_events, want, on_conn_poll);
}

/* ---- the relay ---------------------------------------------------------------------------- */

/* Client to daemon: decrypted records into up, up into the socketpair. Returns
 * false when the connection ended. Adds to *tcp / *plain what it waits for.
 * A client that finishes sending (a FIN or a close_notify) has only
 * half-closed: the daemon's end gets the same half-close once what came
 * before is delivered, and the answer still flows down. */
static bool relay_up(struct conn *c, int *tcp, int *plain)
{
    if (c->up_dead && c->t->plain && !c->up_eof) {
        /* The daemon stopped reading (it answered and closes): drop what the client
         * still sends, so that closing leaves nothing unread to turn into a reset. */
        unsigned char sink[4096];
        ssize_t n;
        while ((n = recv(c->fd, sink, sizeof(sink), MSG_DONTWAIT)) > 0) {
        }
        if (n == 0)
            c->up_eof = true;
        else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            *tcp |= UV_READABLE;
        return true;
    }
    while (!c->up_dead) {
        if (c->up_off < c->up_len) {
            ssize_t n = send(c->pfd, c->up + c->up_off, c->up_len - c->up_off,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
                    *plain |= UV_WRITABLE; /* the daemon is behind: stop reading the client */
                    return true;
                }
                /* The daemon closed its end; what it wrote before may still be
                 * on its way to the client (relay_down), so only this way stops. */
                c->up_dead = true;
                c->up_off = c->up_len = 0;
                return true;
            }
            c->up_off += (size_t)n;
            c->pending = true;
            continue;
        }
        c->up_off = c->up_len = 0;
        if (c->up_eof) {
            /* Held while a request is unanswered: libmicrohttpd closes a
             * connection whose FIN it reads before handing the request over. */
            if (!c->up_shut && !c->pending) {
                c->up_shut = true;
                shutdown(c->pfd, SHUT_WR);
            }
            return true;
        }
        if (c->t->plain) {
            ssize_t n = recv(c->fd, c->up, sizeof(c->up), MSG_DONTWAIT);
            if (n > 0) {
                c->up_len = (size_t)n;
            } else if (n == 0) {
                c->up_eof = true;
            } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
                *tcp |= UV_READABLE;
                return true;
            } else {
                conn_close(c, NULL); /* a reset: the client is gone */
                return false;
            }
            continue;
        }
        int r = mbedtls_ssl_read(&c->ssl, c->up, sizeof(c->up));
        if (r > 0) {
            c->up_len = (size_t)r;
        } else if (r == MBEDTLS_ERR_SSL_WANT_READ) {
            *tcp |= UV_READABLE;
            return true;
        } else if (r == MBEDTLS_ERR_SSL_WANT_WRITE) {
            *tcp |= UV_WRITABLE;
            return true;
        } else if (r == 0 || r == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY) {
            c->up_eof = true; /* 0 is a FIN without close_notify */
        } else {
            /* A reset or a bad record: the client is gone. */
            conn_close(c, NULL);
            return false;
        }
    }
    return true;
}

/* Daemon to client: the socketpair into down, down through mbedtls_ssl_write.
 * Returns false when the connection ended or moved to CONN_CLOSE_NOTIFY. */
static bool relay_down(struct conn *c, int *tcp, int *plain)
{
    for (;;) {
        if (c->down_off < c->down_len && c->t->plain) {
            ssize_t n = send(c->fd, c->down + c->down_off, c->down_len - c->down_off,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0) {
                c->down_off += (size_t)n;
                continue;
            }
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
                *tcp |= UV_WRITABLE; /* the client is behind: stop reading the daemon */
                return true;
            }
            conn_close(c, NULL);
            return false;
        }
        if (c->down_off < c->down_len) {
            /* After WANT_WRITE mbedTLS must be called again with the same data. */
            int r = mbedtls_ssl_write(&c->ssl, c->down + c->down_off, c->down_len - c->down_off);
            if (r > 0) {
                c->down_off += (size_t)r;
                continue;
            }
            if (r == MBEDTLS_ERR_SSL_WANT_WRITE) {
                *tcp |= UV_WRITABLE; /* the client is behind: stop reading the daemon */
                return true;
            }
            if (r == MBEDTLS_ERR_SSL_WANT_READ) {
                *tcp |= UV_READABLE;
                return true;
            }
            conn_close(c, NULL);
            return false;
        }
        c->down_off = c->down_len = 0;
        ssize_t n = recv(c->pfd, c->down, sizeof(c->down), MSG_DONTWAIT);
        if (n > 0) {
            c->down_len = (size_t)n;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            if (c->draining) {
                c->state = CONN_CLOSE_NOTIFY; /* everything the daemon wrote is out */
                return false;
            }
            *plain |= UV_READABLE;
            return true;
        }
        c->state = CONN_CLOSE_NOTIFY; /* the daemon closed the connection */
        return false;
    }
}

/* Plain: the daemon closed and what it wrote is out. The client gets a FIN, and what
 * it still sends is read and dropped until its own FIN (within the close grace): a
 * socket closed with unread bytes sends a reset, which can reach the client before
 * the answer does (an oversized request answered 431, say). */
static void plain_close_step(struct conn *c)
{
    if (!c->down_shut) {
        c->down_shut = true;
        shutdown(c->fd, SHUT_WR);
        if (c->pfd >= 0)
            set_poll(&c->plain_poll, &c->plain_events, 0, on_conn_poll);
        uv_timer_start(&c->timer, on_conn_timer, GS_SRV_TLS_CLOSE_GRACE_MS, 0);
    }
    unsigned char sink[4096];
    for (;;) {
        ssize_t n = recv(c->fd, sink, sizeof(sink), MSG_DONTWAIT);
        if (n > 0)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            set_poll(&c->tcp_poll, &c->tcp_events, UV_READABLE, on_conn_poll);
            return;
        }
        conn_close(c, NULL); /* the client's FIN, or its reset */
        return;
    }
}

static void close_notify_step(struct conn *c)
{
    if (c->t->plain) {
        plain_close_step(c);
        return;
    }
    int r = mbedtls_ssl_close_notify(&c->ssl);
    if (r == MBEDTLS_ERR_SSL_WANT_WRITE) {
        if (!uv_is_active((uv_handle_t *)&c->timer))
            uv_timer_start(&c->timer, on_conn_timer, GS_SRV_TLS_CLOSE_GRACE_MS, 0);
        if (c->pfd >= 0)
            set_poll(&c->plain_poll, &c->plain_events, 0, on_conn_poll);
        set_poll(&c->tcp_poll, &c->tcp_events, UV_WRITABLE, on_conn_poll);
        return;
    }
    conn_close(c, NULL);
}

static void pump(struct conn *c)
{
    if (c->state == CONN_HANDSHAKE) {
        handshake_step(c);
        return;
    }
    if (c->state == CONN_RELAY) {
        int tcp = 0, plain = 0;
        if (!relay_up(c, &tcp, &plain))
            return;
        if (relay_down(c, &tcp, &plain)) {
            /* After the client's FIN the socket stays readable for good, so
             * it is not polled for reading (that would spin). A reset still
             * wakes the poll as an error, which is all that is left to see
             * on that side. */
            if (c->up_eof)
                tcp = (tcp & ~UV_READABLE) | UV_PRIORITIZED;
            set_poll(&c->tcp_poll, &c->tcp_events, tcp, on_conn_poll);
            set_poll(&c->plain_poll, &c->plain_events, plain, on_conn_poll);
            return;
        }
        if (c->closed)
            return;
    }
    close_notify_step(c);
}

/* ---- accepting ---------------------------------------------------------------------------- */

static void evict(struct conn *c)
{
    c->evicted = true;
    conn_close(c, "evicted by a newer connection");
}

/* Makes room for one more handshake from ss: when its address already has
 * max_handshakes_per_ip in progress, that address's oldest goes; then, when
 * all max_handshakes slots are taken, the oldest of all goes. A handshake
 * that has waited longest without completing is the likeliest to be a
 * silent or stalled client, and a fresh connection the likeliest to finish,
 * so fresh ones win; the listening socket is always polled. */
static void make_room(struct gs_srv_tls *t, const struct sockaddr_storage *ss)
{
    struct conn *oldest_here = NULL;
    uint32_t n_here = 0;
    for (struct conn *c = t->hs_oldest; c; c = c->hs_next)
        if (same_host(&c->peer, ss) && !n_here++)
            oldest_here = c;
    if (n_here >= t->cfg.max_handshakes_per_ip)
        evict(oldest_here);
    if (t->st.n_handshaking >= t->cfg.max_handshakes)
        evict(t->hs_oldest);
}

static void conn_accept(struct gs_srv_tls *t, int fd, const struct sockaddr_storage *ss,
                        socklen_t len)
{
    if (!t->plain)
        make_room(t, ss);
    struct conn *c = conn_alloc();
    if (!c) {
        close(fd);
        return;
    }
    mbedtls_ssl_init(&c->ssl);
    if (!t->plain && mbedtls_ssl_setup(&c->ssl, &t->conf) != 0) {
        mbedtls_ssl_free(&c->ssl);
        conn_release(c);
        close(fd);
        return;
    }
    mbedtls_ssl_set_bio(&c->ssl, c, bio_send, bio_recv, NULL);
    fix_sndbuf(fd);
    c->t = t;
    c->fd = fd;
    c->pfd = -1;
    c->peer = *ss;
    c->peer_len = len;
    uv_poll_init_socket(t->loop, &c->tcp_poll, fd);
    uv_timer_init(t->loop, &c->timer);
    c->tcp_poll.data = c->timer.data = c;
    c->n_handles = 2;
    c->dfd = -1;
    c->next = t->conns;
    if (t->conns)
        t->conns->prev = c;
    t->conns = c;
    t->st.n_accepted++;
    t->st.n_open++;
    if (t->plain) {
        c->state = CONN_RELAY;
        relay_start(c); /* no handshake: straight to the relay */
        return;
    }
    c->hs_prev = t->hs_newest;
    if (t->hs_newest)
        t->hs_newest->hs_next = c;
    else
        t->hs_oldest = c;
    t->hs_newest = c;
    t->st.n_handshaking++;
    uv_timer_start(&c->timer, on_conn_timer, t->cfg.handshake_timeout_ms, 0);
    pump(c);
}

static void on_backoff(uv_timer_t *h)
{
    listen_update(h->data);
}

static void on_listen(uv_poll_t *h, int status, int events)
{
    struct gs_srv_tls *t = h->data;
    (void)events;
    if (status < 0)
        return;
    for (int i = 0; i < ACCEPT_BATCH && t->listening; i++) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        int fd = accept4(t->listen_fd, (struct sockaddr *)&ss, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* Level-triggered polling would spin: pause, then try again. */
                gs_log(GS_LOG_WARN, "tls_accept", "error=\"%s\" retry_ms=%d", strerror(errno),
                       ACCEPT_BACKOFF_MS);
                uv_poll_stop(&t->listen_poll);
                t->listening = false;
                uv_timer_start(&t->backoff, on_backoff, ACCEPT_BACKOFF_MS, 0);
            }
            return;
        }
        conn_accept(t, fd, &ss, len);
    }
    listen_update(t);
}

/* Polls the listening socket unless accepting backs off (out of
 * descriptors); a full set of handshake slots makes room by eviction. */
static void listen_update(struct gs_srv_tls *t)
{
    if (!t->listen_open || t->closing || uv_is_active((uv_handle_t *)&t->backoff))
        return;
    if (!t->listening)
        uv_poll_start(&t->listen_poll, UV_READABLE, on_listen);
    t->listening = true;
}

/* ---- configuration ------------------------------------------------------------------------ */

/* AEAD suites with an ephemeral elliptic-curve key exchange (RSA or ECDSA
 * certificates), in mbedTLS's preference order. */
static enum gs_status pick_suites(struct gs_srv_tls *t, struct gs_err *err)
{
    size_t n = 0;
    for (const int *id = mbedtls_ssl_list_ciphersuites(); *id && n < MAX_SUITES; id++) {
        const mbedtls_ssl_ciphersuite_t *cs = mbedtls_ssl_ciphersuite_from_id(*id);
        if (!cs || (cs->flags & MBEDTLS_CIPHERSUITE_SHORT_TAG))
            continue;
        if (cs->key_exchange != MBEDTLS_KEY_EXCHANGE_ECDHE_RSA &&
            cs->key_exchange != MBEDTLS_KEY_EXCHANGE_ECDHE_ECDSA)
            continue;
        const mbedtls_cipher_info_t *ci = mbedtls_cipher_info_from_type(cs->cipher);
        if (!ci || (ci->mode != MBEDTLS_MODE_GCM && ci->mode != MBEDTLS_MODE_CCM &&
                    ci->mode != MBEDTLS_MODE_CHACHAPOLY))
            continue;
        t->suites[n++] = *id;
    }
    t->suites[n] = 0;
    if (!n)
        return gs_err_set(err, GS_INVAL, "TLS: this mbedTLS offers no AEAD cipher suite");
    mbedtls_ssl_conf_ciphersuites(&t->conf, t->suites);
    return GS_OK;
}

static enum gs_status configure(struct gs_srv_tls *t, const struct gs_srv_tls_cfg *cfg,
                                struct gs_err *err)
{
    static const char pers[] = "graphserve-tls";
    int r = mbedtls_ctr_drbg_seed(&t->drbg, mbedtls_entropy_func, &t->entropy,
                                  (const unsigned char *)pers, sizeof(pers) - 1);
    if (r)
        return tls_fail(err, GS_IO, "TLS:", "random generator", r);
    if ((r = mbedtls_x509_crt_parse_file(&t->cert, cfg->cert_path)))
        return tls_fail(err, GS_IO, "--tls-cert", cfg->cert_path, r);
    if ((r = mbedtls_pk_parse_keyfile(&t->key, cfg->key_path, NULL)))
        return tls_fail(err, GS_IO, "--tls-key", cfg->key_path, r);
    if ((r = mbedtls_pk_check_pair(&t->cert.pk, &t->key)))
        return tls_fail(err, GS_INVAL, "--tls-key", cfg->key_path, r);
    if ((r = mbedtls_ssl_config_defaults(&t->conf, MBEDTLS_SSL_IS_SERVER,
                                         MBEDTLS_SSL_TRANSPORT_STREAM,
                                         MBEDTLS_SSL_PRESET_DEFAULT)))
        return tls_fail(err, GS_INVAL, "TLS:", "defaults", r);
    mbedtls_ssl_conf_rng(&t->conf, mbedtls_ctr_drbg_random, &t->drbg);
    mbedtls_ssl_conf_min_version(&t->conf, MBEDTLS_SSL_MAJOR_VERSION_3,
                                 MBEDTLS_SSL_MINOR_VERSION_3); /* TLS 1.2 */
#if defined(MBEDTLS_SSL_RENEGOTIATION)
    mbedtls_ssl_conf_renegotiation(&t->conf, MBEDTLS_SSL_RENEGOTIATION_DISABLED);
#endif
    if ((r = mbedtls_ssl_conf_own_cert(&t->conf, &t->cert, &t->key)))
        return tls_fail(err, GS_INVAL, "--tls-cert", cfg->cert_path, r);
    if (cfg->client_ca_path) {
        if ((r = mbedtls_x509_crt_parse_file(&t->client_ca, cfg->client_ca_path)))
            return tls_fail(err, GS_IO, "--tls-client-ca", cfg->client_ca_path, r);
        mbedtls_ssl_conf_ca_chain(&t->conf, &t->client_ca, NULL);
        mbedtls_ssl_conf_authmode(&t->conf, MBEDTLS_SSL_VERIFY_REQUIRED);
    } else {
        mbedtls_ssl_conf_authmode(&t->conf, MBEDTLS_SSL_VERIFY_NONE);
    }
    return pick_suites(t, err);
}

/* ---- public API ----------------------------------------------------------------------------- */

enum gs_status gs_srv_tls_listen(const struct sockaddr *addr, socklen_t len, int *fd_out,
                                 struct gs_err *err)
{
    int fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return gs_err_set(err, GS_IO, "cannot create a socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (addr->sa_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (bind(fd, addr, len) != 0 || listen(fd, 511) != 0) {
        int e = errno;
        close(fd);
        return gs_err_set(err, GS_IO, "cannot listen: %s", strerror(e));
    }
    *fd_out = fd;
    return GS_OK;
}

enum gs_status gs_srv_tls_new(uv_loop_t *loop, const struct gs_srv_tls_cfg *cfg, int listen_fd,
                              gs_srv_tls_deliver_fn deliver, void *ctx, struct gs_srv_tls **out,
                              struct gs_err *err)
{
    *out = NULL;
    struct gs_srv_tls *t = gs_calloc(1, sizeof(*t));
    if (!t) {
        close(listen_fd);
        return gs_err_set(err, GS_NOMEM, "out of memory");
    }
    t->loop = loop;
    t->listen_fd = listen_fd;
    t->cfg = *cfg;
    t->cfg.cert_path = t->cfg.key_path = t->cfg.client_ca_path = NULL; /* not kept */
    t->deliver = deliver;
    t->ctx = ctx;
    mbedtls_ssl_config_init(&t->conf);
    mbedtls_x509_crt_init(&t->cert);
    mbedtls_x509_crt_init(&t->client_ca);
    mbedtls_pk_init(&t->key);
    mbedtls_entropy_init(&t->entropy);
    mbedtls_ctr_drbg_init(&t->drbg);
    enum gs_status st = GS_OK;
    t->plain = !cfg->cert_path;
    /* The defaults live in config/table.c only; a caller must pass them on. */
    if (!t->plain &&
        (!cfg->handshake_timeout_ms || !cfg->max_handshakes || !cfg->max_handshakes_per_ip))
        st = gs_err_set(err, GS_INVAL, "TLS: a handshake limit is 0");
    if (st == GS_OK && !t->plain)
        st = configure(t, cfg, err);
    if (st == GS_OK) {
        int fl = fcntl(listen_fd, F_GETFL);
        if (fl < 0 || fcntl(listen_fd, F_SETFL, fl | O_NONBLOCK) < 0 ||
            uv_poll_init_socket(loop, &t->listen_poll, listen_fd) != 0)
            st = gs_err_set(err, GS_IO, "cannot watch the TLS listening socket");
    }
    if (st != GS_OK) {
        close(listen_fd);
        t->listen_fd = -1;
        gs_srv_tls_free(t);
        return st;
    }
    uv_timer_init(loop, &t->backoff);
    t->listen_poll.data = t->backoff.data = t;
    t->listen_open = true;
    listen_update(t);
    *out = t;
    return GS_OK;
}

void gs_srv_tls_stop_accepting(struct gs_srv_tls *t)
{
    if (!t || !t->listen_open)
        return;
    t->listen_open = false;
    t->listening = false;
    uv_close((uv_handle_t *)&t->listen_poll, NULL);
    uv_close((uv_handle_t *)&t->backoff, NULL);
    close(t->listen_fd);
    t->listen_fd = -1;
}

void gs_srv_tls_close(struct gs_srv_tls *t)
{
    if (!t || t->closing)
        return;
    gs_srv_tls_stop_accepting(t);
    t->closing = true;
    for (struct conn *c = t->conns, *next; c; c = next) {
        next = c->next;
        if (c->state == CONN_HANDSHAKE) {
            conn_close(c, NULL);
            continue;
        }
        c->draining = true;
        uv_timer_start(&c->timer, on_conn_timer, GS_SRV_TLS_CLOSE_GRACE_MS, 0);
        pump(c);
    }
}

void gs_srv_tls_free(struct gs_srv_tls *t)
{
    if (!t)
        return;
    mbedtls_ssl_config_free(&t->conf);
    mbedtls_x509_crt_free(&t->cert);
    mbedtls_x509_crt_free(&t->client_ca);
    mbedtls_pk_free(&t->key);
    mbedtls_ctr_drbg_free(&t->drbg);
    mbedtls_entropy_free(&t->entropy);
    gs_free(t);
}

void gs_srv_tls_stats(const struct gs_srv_tls *t, struct gs_srv_tls_stats *out)
{
    *out = t->st;
}

void gs_srv_tls_metrics_render(const struct gs_srv_tls *t, struct gs_srv_buf *o)
{
    if (t->plain)
        return; /* no TLS: no handshakes to count */
    const struct gs_srv_tls_stats *st = &t->st;
    gs_srv_buf_addf(o,
                    "# HELP graphserve_tls_handshakes_total TLS handshakes by outcome.\n"
                    "# TYPE graphserve_tls_handshakes_total counter\n"
                    "graphserve_tls_handshakes_total{result=\"ok\"} %llu\n"
                    "graphserve_tls_handshakes_total{result=\"refused\"} %llu\n"
                    "graphserve_tls_handshakes_total{result=\"timeout\"} %llu\n"
                    "graphserve_tls_handshakes_total{result=\"evicted\"} %llu\n"
                    "# HELP graphserve_tls_handshakes_in_progress TLS handshakes under way.\n"
                    "# TYPE graphserve_tls_handshakes_in_progress gauge\n"
                    "graphserve_tls_handshakes_in_progress %u\n"
                    "# HELP graphserve_tls_connections_open TLS connections open (handshaking or "
                    "relaying).\n"
                    "# TYPE graphserve_tls_connections_open gauge\n"
                    "graphserve_tls_connections_open %u\n",
                    (unsigned long long)st->n_handshakes, (unsigned long long)st->n_refused,
                    (unsigned long long)st->n_timeouts, (unsigned long long)st->n_evicted,
                    st->n_handshaking, st->n_open);
}

void gs_srv_tls_request_done(struct gs_srv_tls *t, int daemon_fd)
{
    for (struct conn *c = t ? t->conns : NULL; c; c = c->next)
        if (c->state == CONN_RELAY && c->dfd == daemon_fd) {
            c->pending = false;
            if (c->up_eof && !c->up_shut)
                pump(c);
            return;
        }
}
