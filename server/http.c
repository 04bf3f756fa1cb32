/*
 * server/http.c - libmicrohttpd driven from a libuv loop: MHD runs without a
 * thread of its own in epoll mode; libuv watches MHD's epoll descriptor and
 * arms a timer for MHD's next timeout. Streaming and waiting connections are
 * suspended and resumed when engine events arrive through uv_async, so an
 * idle stream costs no CPU. Also here: request bodies and their cap, auth,
 * the request log, dead-peer detection, signals and the drain. This is the top of
 * the daemon: it finds a request's route in routes.c's table and calls the route
 * only through its row (the handler and struct gs_srv_route_hooks), never naming
 * the files behind it; answers go out through respond.c like every route's.
 */
#define _GNU_SOURCE
#include "server/daemon.h"

#include "config/log.h"
#include "engine/digest.h"
#include "server/systemd.h"
#include "server/tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define TICK_MS        1000 /* dead-peer checks while requests run */
#define SWEEP_MS       1000 /* request deadlines, while connections are open */
#define MAX_HEADERS    256  /* more headers than this is refused (MHD caps their bytes too) */
#define KEEPALIVE_MS   2000 /* SSE comment on a stream quiet this long */
#define DRAIN_GRACE_MS 3000 /* after the deadline, aborted requests get this long */
#define TRIM_MS        1000 /* idle: hand freed heap back to the system at most this often */

static void begin_drain(struct gs_srv *s);
static void on_tick(uv_timer_t *h);
static void on_drain_timer(uv_timer_t *h);
static void on_sweep(uv_timer_t *h);

/* ---- the request log ----------------------------------------------------------------------- */

/* The client's address as MHD has it: the peer of the TCP connection, or with
 * TLS the address the terminator handed over with the plaintext socket. */
static void client_address(struct gs_srv_req *r, char *out, size_t cap)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    if (sa && sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out, (socklen_t)cap);
    else if (sa && sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out, (socklen_t)cap);
}

static void log_request(struct gs_srv *s, struct gs_srv_req *r, bool completed_ok)
{
    uint32_t n_gen = 0, n_cached = 0;
    double queue_ms = 0, ttft_ms = -1;
    for (uint32_t i = 0; i < r->n_choices; i++) {
        n_gen += gs_srv__choice_tokens(&r->choices[i]);
        if (i == 0) {
            n_cached = r->choices[i].stats.n_prompt_cached;
            queue_ms = r->choices[i].stats.queue_ms;
            if (r->choices[i].n_tokens)
                ttft_ms = r->choices[i].t_first_ms - r->t_start_ms;
        }
    }
    char client[INET6_ADDRSTRLEN] = "-";
    client_address(r, client, sizeof(client));
    gs_log(GS_LOG_INFO, "request",
           "id=%s client=%s method=%s path=%s status=%u prompt_tokens=%u cached_tokens=%u "
           "gen_tokens=%u queue_ms=%.1f ttft_ms=%.1f total_ms=%.1f client_gone=%s",
           r->id, client, r->method, r->url ? r->url : "-", r->status, r->n_prompt, n_cached,
           n_gen, queue_ms, ttft_ms, gs_now_ms() - r->t_start_ms,
           completed_ok ? "false" : "true");
}

/* ---- MHD callbacks ------------------------------------------------------------------------- */

static struct gs_srv_req *req_new(struct gs_srv *s, struct MHD_Connection *c, const char *url,
                                  const char *method)
{
    struct gs_srv_arena *a = gs_srv_arena_new(gs_srv__req_arena_cap(s));
    struct gs_srv_req *r = a ? gs_srv_arena_calloc(a, 1, sizeof(*r)) : NULL;
    if (!r) {
        gs_srv_arena_free(a);
        return NULL;
    }
    r->arena = a;
    r->body.arena = r->out.arena = r->tok_job.text.arena = a;
    r->srv = s;
    r->conn = c;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    r->hconn = ci ? ci->socket_context : NULL;
    r->t_start_ms = gs_now_ms();
    r->url = gs_srv_arena_strdup(a, url);
    snprintf(r->method, sizeof(r->method), "%s", method);
    snprintf(r->id, sizeof(r->id), "req-%" PRIx64 "%04" PRIx64, (uint64_t)time(NULL),
             ++s->next_seq);
    bool known;
    r->route = gs_srv__route_find(method, url, &known);
    r->ep = r->route ? r->route->ep : GS_SRV_EP_OTHER;
    r->api = r->route ? r->route->api : gs_srv__route_api(url);
    s->n_reqs++;
    return r;
}

/* Every route's hooks come from its table row; a request without a route (a 404, a
 * 405, a preflight) has none. */
static const struct gs_srv_route_hooks no_hooks;

static const struct gs_srv_route_hooks *hooks_of(const struct gs_srv_req *r)
{
    return r->route && r->route->hooks ? r->route->hooks : &no_hooks;
}

static void req_free(struct gs_srv_req *r)
{
    if (hooks_of(r)->free)
        hooks_of(r)->free(r);
    gs_srv__tok_job_free(&r->tok_job);
    gs_srv_arena_free(r->arena); /* r itself, its body, url and buffers */
}

struct header_list {
    struct gs_srv_header h[MAX_HEADERS];
    size_t n;
    bool overflow;
};

static enum MHD_Result collect_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                      const char *value)
{
    (void)kind;
    struct header_list *l = cls;
    if (l->n == MAX_HEADERS) {
        l->overflow = true;
        return MHD_NO;
    }
    l->h[l->n++] = (struct gs_srv_header){key, value};
    return MHD_YES;
}

/* Framing, Host, Origin and Content-Type (gs_srv_head_check); a refused
 * request's connection is closed after the answer. */
static bool head_ok(struct gs_srv_req *r, const char *version, enum MHD_Result *ret)
{
    struct gs_srv *s = r->srv;
    struct header_list *l = gs_srv_arena_alloc(r->arena, sizeof(*l));
    if (!l) {
        *ret = MHD_NO;
        return false;
    }
    l->n = 0;
    l->overflow = false;
    MHD_get_connection_values(r->conn, MHD_HEADER_KIND, collect_header, l);
    struct gs_srv_head_verdict v;
    bool ok = !l->overflow &&
              gs_srv_head_check(r->method, version, l->h, l->n, &s->head_policy, &v);
    bool overflow = l->overflow;
    if (ok)
        return true;
    r->close_after = true;
    s->metrics.refused_heads++;
    if (overflow)
        *ret = gs_srv__respond_error(r, GS_SRV_E_BAD_REQUEST, NULL,
                                     "the request has more than %d headers", MAX_HEADERS);
    else
        *ret = gs_srv__respond_error(r, v.kind, v.param[0] ? v.param : NULL, "%s", v.msg);
    return false;
}

/* OPTIONS: a browser asking whether its page's origin may send a request. Answered
 * without the API key (browsers send none with a preflight) for a configured origin
 * on a known path; refused otherwise. */
static enum MHD_Result preflight(struct gs_srv_req *r, const char *origin)
{
    bool known;
    gs_srv__route_find("GET", r->url, &known);
    if (!known)
        return gs_srv__respond_error(r, GS_SRV_E_NOT_FOUND, NULL, "no route for %s", r->url);
    if (!r->cors_origin)
        return gs_srv__respond_error(r, GS_SRV_E_FORBIDDEN, NULL,
                                     origin ? "the web origin '%.64s' is not in --cors-origins"
                                            : "OPTIONS is answered only for a browser's "
                                              "preflight from an origin in --cors-origins%.0s",
                                     origin ? origin : "");
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return MHD_NO;
    char allow[64];
    gs_srv__route_allow(r->url, allow, sizeof(allow));
    gs_srv__cors_headers(r, resp);
    MHD_add_response_header(resp, "X-Request-Id", r->id);
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", allow);
    const char *want = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND,
                                                   "Access-Control-Request-Headers");
    MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                            want && *want ? want
                                          : "Authorization, Content-Type, x-api-key, "
                                            "anthropic-version");
    MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    r->status = 204;
    enum MHD_Result ret = MHD_queue_response(r->conn, 204, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* The first call for a request: head checks, route, auth and the declared body size. */
static enum MHD_Result on_headers(struct gs_srv_req *r, const char *version)
{
    struct gs_srv *s = r->srv;
    bool known;
    enum MHD_Result ret;
    if (!head_ok(r, version, &ret))
        return ret;
    const char *origin = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Origin");
    const char *listed = gs_srv_origin_listed(origin, &s->head_policy);
    if (listed) {
        /* "*" answers with the request's own origin, so that credentials work too. */
        snprintf(r->origin, sizeof(r->origin), "%s", origin);
        r->cors_origin = r->origin;
    }
    if (!strcmp(r->method, "OPTIONS"))
        return preflight(r, origin);
    if (!r->route) {
        gs_srv__route_find(r->method, r->url, &known);
        if (known) {
            gs_srv__route_allow(r->url, r->allow, sizeof(r->allow));
            return gs_srv__respond_error(r, GS_SRV_E_METHOD, NULL, "method %s is not allowed on %s",
                                         r->method, r->url);
        }
        return gs_srv__respond_error(r, GS_SRV_E_NOT_FOUND, NULL, "no route for %s %s", r->method,
                                     r->url);
    }
    bool open_metrics = r->ep == GS_SRV_EP_METRICS && s->cfg.metrics_public;
    if (r->route->auth && s->cfg.n_api_keys && !open_metrics) {
        /* Either header may carry the key: OpenAI's clients send a Bearer token,
         * Anthropic's x-api-key. */
        const char *auth =
            MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
        const char *xkey = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "x-api-key");
        const uint8_t(*digests)[32] = (const uint8_t(*)[32])s->key_digests;
        bool ok = gs_srv_auth_check(auth, digests, s->cfg.n_api_keys);
        ok |= gs_srv_auth_check_key(xkey, digests, s->cfg.n_api_keys);
        if (!ok)
            return gs_srv__respond_error(r, GS_SRV_E_UNAUTHORIZED, NULL,
                                         auth || xkey ? "invalid API key"
                                                      : "missing API key: send "
                                                        "'Authorization: Bearer KEY' or "
                                                        "'x-api-key: KEY'");
    }
    const char *cl =
        MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl) {
        char *end;
        unsigned long long n = strtoull(cl, &end, 10);
        if (*end || n > s->cfg.limits.max_body_bytes)
            return gs_srv__respond_error(r, GS_SRV_E_TOO_LARGE, NULL,
                                         "request body over the %" PRIu64 "-byte limit",
                                         s->cfg.limits.max_body_bytes);
    }
    return MHD_YES;
}

/* A whole request into its route: the handler, or what it waits for to go on (its
 * prompt's tokens, or the end of its engine work). */
static enum MHD_Result dispatch(struct gs_srv_req *r)
{
    struct gs_srv *s = r->srv;
    if (r->tok_job.done)
        return r->tok_job.then(r);
    if (r->waiting && hooks_of(r)->resume)
        return hooks_of(r)->resume(r);
    if (r->too_large)
        return gs_srv__respond_error(r, GS_SRV_E_TOO_LARGE, NULL,
                                     "request body over the %" PRIu64 "-byte limit",
                                     s->cfg.limits.max_body_bytes);
    if (r->body.failed)
        return gs_srv__respond_nomem(r);
    return r->route->handler(r);
}

/* The 1-second tick runs while the engine works for a request or a /debug/events
 * stream is open; a route joins those lists from its handler, after which this starts
 * the tick (on_tick stops it once both are empty). */
static void tick_keep(struct gs_srv *s)
{
    if ((s->active || s->debug_subs) && !s->tick_on) {
        uv_timer_start(&s->tick, on_tick, TICK_MS, TICK_MS);
        s->tick_on = true;
    }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    struct gs_srv *s = cls;
    struct gs_srv_req *r = *con_cls;
    if (!r) {
        r = req_new(s, c, url, method);
        if (!r)
            return MHD_NO;
        *con_cls = r;
        enum MHD_Result ret = on_headers(r, version);
        if (r->status && r->hconn)
            r->hconn->busy = true; /* answered: the rest of the request is not awaited */
        return ret;
    }
    if (r->status) {
        *upload_size = 0; /* answered early (413, 401, ...): the rest is discarded */
        return MHD_YES;
    }
    if (*upload_size) {
        if (!r->too_large && r->body.len + *upload_size > s->cfg.limits.max_body_bytes)
            r->too_large = true;
        if (!r->too_large)
            gs_srv_buf_add(&r->body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    if (r->hconn)
        r->hconn->busy = true; /* the request is whole: the deadline is met */
    if (r->peer_gone)
        return MHD_NO;
    if (r->tok_job.running)
        return MHD_YES; /* resumed early (shutdown); the pool still has the prompt */
    enum MHD_Result ret = dispatch(r);
    tick_keep(s);
    return ret;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct gs_srv *s = cls;
    struct gs_srv_req *r = *con_cls;
    if (!r)
        return;
    *con_cls = NULL;
    bool ok = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK;
    /* Whatever the engine still runs for the request is cancelled: its client is gone
     * (or it was answered without waiting for all of it). */
    if (hooks_of(r)->cancel && hooks_of(r)->cancel(r) && !ok)
        s->metrics.cancelled++;
    if (!r->status)
        r->status = 499; /* nothing was sent: the client went away first */
    gs_srv_metrics_request(&s->metrics, r->ep, r->status);
    if (r->n_choices && r->n_done == r->n_choices) /* generated: not count_tokens, not refused */
        gs_srv_hist_observe(&s->metrics.e2e, (gs_now_ms() - r->t_start_ms) / 1000.0);
    log_request(s, r, ok);
    if (r->hconn) {
        /* A kept-alive connection's next request is due from now. */
        r->hconn->busy = false;
        r->hconn->t_since_ms = gs_now_ms();
    }
    gs_srv__active_remove(r);
    req_free(r);
    s->n_reqs--;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci)
        gs_srv_tls_request_done(s->tls, ci->connect_fd);
    /* glibc keeps what requests freed mapped, in as many arenas as threads touched it; an
     * idle server gives it back, so that its RSS is what it holds, not its peak. */
    if (s->n_reqs == 0 && gs_now_ms() - s->t_trim_ms >= TRIM_MS) {
        malloc_trim(0);
        s->t_trim_ms = gs_now_ms();
    }
    if (s->draining && s->n_reqs == 0 && !s->closing)
        uv_async_send(&s->async); /* finish the drain outside MHD's callback */
}

static void mhd_logger(void *cls, const char *fmt, va_list ap)
{
    /* MHD reports client misbehaviour (bad requests, resets) here; the request log
     * already shows what matters, so only the loop's own failures would be news. */
    (void)cls;
    (void)fmt;
    (void)ap;
}

/* ---- the loop ------------------------------------------------------------------------------ */

static void on_mhd_poll(uv_poll_t *h, int status, int events)
{
    gs_srv__kick(h->data);
}

/*
 * True when the client of a suspended connection is gone. MHD's end is the
 * relay's socketpair (server/tls.h), which holds a client's FIN while its
 * request is unanswered (nc -N, HTTP/1.0 clients and some proxies finish
 * sending and still read the answer), so an end of stream here means the relay
 * closed: the client reset its connection or a write to it failed.
 */
static bool peer_gone(struct gs_srv_req *r)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return true;
    char c;
    ssize_t n = recv(ci->connect_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* ---- connections: the request deadline and room for new clients --------------------------- */

static void conn_cut(struct gs_srv *s, struct gs_srv_conn *c, bool evicted)
{
    c->cut = true;
    if (evicted)
        s->metrics.conns_evicted++;
    else
        s->metrics.conns_timed_out++;
    /* MHD sees the end of the stream at its next look and closes the
     * connection through its usual path (and our NOTIFY_CLOSED). */
    shutdown(c->fd, SHUT_RDWR);
}

static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    struct gs_srv *s = cls;
    struct gs_srv_conn *c = *socket_context;
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        if (!c)
            return;
        if (c->prev)
            c->prev->next = c->next;
        else
            s->conns = c->next;
        if (c->next)
            c->next->prev = c->prev;
        else
            s->conns_tail = c->prev;
        s->n_conns--;
        gs_free(c);
        *socket_context = NULL;
        return;
    }
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    c = ci ? gs_calloc(1, sizeof(*c)) : NULL;
    if (!c)
        return; /* untracked: MHD's own idle timeout still applies */
    c->fd = ci->connect_fd;
    c->t_since_ms = gs_now_ms();
    c->prev = s->conns_tail;
    if (s->conns_tail)
        s->conns_tail->next = c;
    else
        s->conns = c;
    s->conns_tail = c;
    s->n_conns++;
    *socket_context = c;
    /* At the connection limit, the oldest connection that has no whole
     * request in hand (still sending, or idle between requests) makes room:
     * a slot always remains for a new client, however many slow ones came
     * first. Connections whose requests run are never cut for this. */
    if (s->n_conns >= s->cfg.limits.max_conns)
        for (struct gs_srv_conn *o = s->conns; o && o != c; o = o->next)
            if (!o->busy && !o->cut) {
                conn_cut(s, o, true);
                break;
            }
    if (!s->sweep_on && s->cfg.limits.request_timeout_s && !s->closing) {
        uv_timer_start(&s->sweep, on_sweep, SWEEP_MS, SWEEP_MS);
        s->sweep_on = true;
    }
}

/* Connections whose request is not whole by its deadline are cut, however
 * steadily their bytes arrive (MHD's own timeout restarts at every byte). */
static void on_sweep(uv_timer_t *h)
{
    struct gs_srv *s = h->data;
    double now = gs_now_ms(), limit_ms = s->cfg.limits.request_timeout_s * 1000.0;
    bool cut = false;
    for (struct gs_srv_conn *c = s->conns; c; c = c->next)
        if (!c->busy && !c->cut && limit_ms > 0 && now - c->t_since_ms >= limit_ms) {
            conn_cut(s, c, false);
            cut = true;
        }
    if (!s->conns || limit_ms <= 0) {
        uv_timer_stop(&s->sweep);
        s->sweep_on = false;
    }
    if (cut)
        gs_srv__kick(s);
}

static void on_tick(uv_timer_t *h)
{
    struct gs_srv *s = h->data;
    double now = gs_now_ms();
    for (struct gs_srv_req *r = s->active, *next; r; r = next) {
        next = r->next;
        if (!r->suspended)
            continue;
        if (peer_gone(r)) {
            r->peer_gone = true;
            if (hooks_of(r)->cancel)
                hooks_of(r)->cancel(r);
            gs_srv__resume(r);
        } else if (r->streaming && now - r->t_last_out_ms >= KEEPALIVE_MS) {
            gs_srv_sse_comment(&r->out, "keepalive");
            r->t_last_out_ms = now;
            gs_srv__resume(r);
        }
    }
    /* /debug/events subscribers (debug.c): the same checks, nothing to cancel. */
    for (struct gs_srv_req *r = s->debug_subs; r; r = r->dnext) {
        if (!r->suspended)
            continue;
        if (peer_gone(r)) {
            r->peer_gone = true;
            gs_srv__resume(r);
        } else if (now - r->t_last_out_ms >= KEEPALIVE_MS) {
            gs_srv_sse_comment(&r->out, "keepalive");
            r->t_last_out_ms = now;
            gs_srv__resume(r);
        }
    }
    /* The routes' deadlines (validation reports); a request may leave the list. */
    for (struct gs_srv_req *r = s->active, *next; r; r = next) {
        next = r->next;
        if (hooks_of(r)->tick)
            hooks_of(r)->tick(r, now);
    }
    if (!s->active && !s->debug_subs) {
        uv_timer_stop(&s->tick);
        s->tick_on = false;
    }
    gs_srv__kick(s);
}

static void close_all(struct gs_srv *s)
{
    if (s->closing)
        return;
    s->closing = true;
    if (s->mhd_poll.loop == &s->loop) /* initialised */
        uv_close((uv_handle_t *)&s->mhd_poll, NULL);
    uv_close((uv_handle_t *)&s->mhd_timer, NULL);
    uv_close((uv_handle_t *)&s->tick, NULL);
    uv_close((uv_handle_t *)&s->drain_timer, NULL);
    uv_close((uv_handle_t *)&s->sweep, NULL);
    uv_close((uv_handle_t *)&s->async, NULL);
    if (s->cfg.handle_signals) {
        uv_close((uv_handle_t *)&s->sig_term, NULL);
        uv_close((uv_handle_t *)&s->sig_int, NULL);
    }
    gs_srv__service_close(s);
    gs_srv_tls_close(s->tls);
}

static void on_async(uv_async_t *h)
{
    struct gs_srv *s = h->data;
    if (atomic_exchange(&s->shutdown_requested, false))
        begin_drain(s);
    if (s->has_engine) {
        struct gs_sched_event evs[64];
        size_t n;
        do {
            n = s->engine.poll(s->engine.ctx, evs, GS_ARRAY_LEN(evs));
            for (size_t i = 0; i < n; i++) {
                /* None: the request is gone (its client went away), or nothing waits
                 * for a late event of a request that has ended. */
                struct gs_srv_req *r = gs_srv__active_find(s, evs[i].id);
                if (r && hooks_of(r)->event)
                    hooks_of(r)->event(r, &evs[i]);
            }
        } while (n == GS_ARRAY_LEN(evs));
        gs_srv__debug_drain(s);
    }
    gs_srv__kick(s);
    /* MHD has offered what the round queued: the streams' backlog verdicts. */
    bool cut = false;
    for (struct gs_srv_req *r = s->active, *next; r; r = next) {
        next = r->next;
        if (hooks_of(r)->after_round) {
            bool was = r->slow_reader;
            hooks_of(r)->after_round(r);
            cut |= r->slow_reader != was;
        }
    }
    if (cut)
        gs_srv__kick(s);
    if (s->draining && s->n_reqs == 0)
        close_all(s);
}

/* The drain deadline: whatever still runs ends with finish_reason "abort". */
static void on_drain_timer(uv_timer_t *h)
{
    struct gs_srv *s = h->data;
    if (!s->drain_expired) {
        s->drain_expired = true;
        for (struct gs_srv_req *r = s->active; r; r = r->next) {
            r->drain_abort = true;
            if (hooks_of(r)->cancel)
                hooks_of(r)->cancel(r);
        }
        uv_timer_start(&s->drain_timer, on_drain_timer, DRAIN_GRACE_MS, 0);
        gs_srv__kick(s);
        return;
    }
    gs_log(GS_LOG_WARN, "drain_forced", "requests_left=%u", s->n_reqs);
    close_all(s);
}

static void begin_drain(struct gs_srv *s)
{
    if (s->draining)
        return;
    s->draining = true;
    gs_log(GS_LOG_INFO, "drain", "requests_in_flight=%u deadline_ms=%u", s->n_reqs,
           s->cfg.drain_timeout_ms);
    struct gs_err e;
    gs_sd_notify("STOPPING=1", NULL, &e); /* a no-op outside systemd */
    /* Stop accepting: MHD hands back its listening socket, which we close. */
    MHD_socket fd = MHD_quiesce_daemon(s->mhd);
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
    gs_srv_tls_stop_accepting(s->tls);
    gs_srv__debug_end_all(s);
    uv_timer_start(&s->drain_timer, on_drain_timer, s->cfg.drain_timeout_ms, 0);
    if (s->n_reqs == 0)
        close_all(s);
}

static void on_signal(uv_signal_t *h, int signum)
{
    struct gs_srv *s = h->data;
    if (++s->n_signals > 1) {
        gs_log(GS_LOG_WARN, "exit_now", "signal=%d", signum);
        _exit(1);
    }
    begin_drain(s);
}

/* ---- public API ---------------------------------------------------------------------------- */

static enum gs_status make_addr(const char *host, uint16_t port, struct sockaddr_storage *ss,
                                bool *v6, struct gs_err *err)
{
    memset(ss, 0, sizeof(*ss));
    *v6 = strchr(host, ':') != NULL;
    if (*v6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons(port);
        if (inet_pton(AF_INET6, host, &a->sin6_addr) != 1)
            return gs_err_set(err, GS_INVAL, "host '%s' is not an IPv6 address", host);
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)ss;
        a->sin_family = AF_INET;
        a->sin_port = htons(port);
        if (inet_pton(AF_INET, host, &a->sin_addr) != 1)
            return gs_err_set(err, GS_INVAL, "host '%s' is not an IPv4 address", host);
    }
    return GS_OK;
}

static bool is_loopback(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
    if (ss->ss_family == AF_INET6)
        return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)ss)->sin6_addr);
    return false;
}

/* Names are checked when some are configured, or where a browser page could
 * reach an unauthenticated server through rebinding: on loopback, keyless. */
static void update_head_policy(struct gs_srv *s)
{
    s->head_policy.check_host = s->head_policy.n_allowed_hosts > 0 ||
                                (s->listens_on_loopback && s->cfg.n_api_keys == 0);
}

/* Maps a new reload block (see gs_srv.reload_map) with cfg's key digests (one
 * zeroed digest for no key) and allowed host names, and replaces the old block
 * with it; on failure the old one stays in force. */
static enum gs_status map_reloadable(struct gs_srv *s, const struct gs_srv_cfg *cfg,
                                     struct gs_err *err)
{
    size_t n_keys = cfg->n_api_keys ? cfg->n_api_keys : 1, n_hosts = cfg->n_allowed_hosts;
    size_t bytes = n_keys * sizeof(*s->key_digests) + n_hosts * sizeof(char *);
    for (size_t i = 0; i < n_hosts; i++)
        bytes += strlen(cfg->allowed_hosts[i]) + 1;
    void *map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED)
        return gs_err_set(err, GS_NOMEM, "out of memory mapping %zu bytes of keys and host names",
                          bytes);
    uint8_t(*digests)[32] = map; /* 32-byte records: the pointers after them stay aligned */
    for (size_t i = 0; i < cfg->n_api_keys; i++)
        gs_sha256(cfg->api_keys[i], strlen(cfg->api_keys[i]), digests[i]);
    char **hosts = (char **)(digests + n_keys);
    char *text = (char *)(hosts + n_hosts);
    for (size_t i = 0; i < n_hosts; i++) {
        size_t len = strlen(cfg->allowed_hosts[i]) + 1;
        hosts[i] = memcpy(text, cfg->allowed_hosts[i], len);
        text += len;
    }
    if (s->reload_map)
        munmap(s->reload_map, s->reload_map_bytes);
    s->reload_map = map;
    s->reload_map_bytes = bytes;
    s->key_digests = digests;
    s->allowed_hosts = n_hosts ? hosts : NULL;
    s->head_policy.allowed_hosts = (const char *const *)s->allowed_hosts;
    s->head_policy.n_allowed_hosts = n_hosts;
    return GS_OK;
}

/* Owned copies of n strings; NULL (and *ok false on no memory) for none. */
static char **copy_strs(const char *const *v, size_t n, bool *ok)
{
    *ok = true;
    if (!n)
        return NULL;
    char **out = gs_calloc(n, sizeof(char *));
    for (size_t i = 0; out && i < n; i++)
        if (!(out[i] = gs_strdup(v[i])))
            *ok = false;
    *ok = *ok && out;
    return out;
}

static void free_strs(char **v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        gs_free(v[i]);
    gs_free(v);
}

static enum gs_status copy_cfg(struct gs_srv *s, const struct gs_srv_cfg *cfg, struct gs_err *err)
{
    s->cfg = *cfg;
    s->host = gs_strdup(cfg->host ? cfg->host : "127.0.0.1");
    s->model_id = gs_strdup(cfg->model.id ? cfg->model.id : "model");
    if (!s->host || !s->model_id)
        return gs_err_set(err, GS_NOMEM, "out of memory");
    s->cfg.host = s->host;
    s->cfg.model.id = s->model_id;
    s->cfg.api_keys = NULL; /* only digests are kept */
    if (map_reloadable(s, cfg, err) != GS_OK)
        return err->code;
    s->cfg.allowed_hosts = NULL; /* s->head_policy has the copies */
    bool ok_origins, ok_aliases;
    s->cors_origins = copy_strs(cfg->cors_origins, cfg->n_cors_origins, &ok_origins);
    s->head_policy.origins = (const char *const *)s->cors_origins;
    s->head_policy.n_origins = cfg->n_cors_origins;
    s->cfg.cors_origins = NULL;
    s->model_aliases = copy_strs(cfg->model.aliases, cfg->model.n_aliases, &ok_aliases);
    s->cfg.model.aliases = (const char *const *)s->model_aliases;
    if (!ok_origins || !ok_aliases)
        return gs_err_set(err, GS_NOMEM, "out of memory");
    s->cfg.chat_template = NULL;
    if (cfg->chat_template) {
        if (gs_srv_tmpl_from_name(cfg->chat_template, &s->tmpl) != GS_OK)
            return gs_err_set(err, GS_INVAL,
                              "--chat-template '%s': not one of chatml, llama3, gemma, phi3, "
                              "zephyr, llama2, mistral, plain",
                              cfg->chat_template);
    } else {
        s->tmpl = gs_srv_tmpl_detect(cfg->model.chat_template);
    }
    if (gs_srv__jinja_init(s, cfg, err) != GS_OK)
        return err->code;
    s->cfg.model.chat_template = NULL;
    return GS_OK;
}

/* A connection the relay accepted (TLS: once its handshake finished): MHD serves
 * its plaintext end as if the client had connected directly (peer is the
 * client's address). */
static void tls_deliver(void *ctx, int fd, const struct sockaddr *peer, socklen_t peer_len)
{
    struct gs_srv *s = ctx;
    if (s->closing || !s->mhd) {
        close(fd);
        return;
    }
    /* On failure (limits, memory) MHD closes fd itself. */
    MHD_add_connection(s->mhd, fd, peer, peer_len);
    gs_srv__kick(s);
}

/* MHD gets no listening socket; the relay (TLS or plain) owns the passed socket
 * or binds host:port, and hands MHD each connection's plaintext. */
static enum gs_status start_tls(struct gs_srv *s, const struct sockaddr_storage *ss, bool v6,
                                struct gs_err *err)
{
    int fd = s->cfg.listen_fd;
    if (fd <= 2) {
        socklen_t len = v6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
        struct gs_err e;
        if (gs_srv_tls_listen((const struct sockaddr *)ss, len, &fd, &e) != GS_OK)
            return gs_err_set(err, GS_IO, "%s:%u: %s", s->host, s->cfg.port, e.msg);
    }
    struct sockaddr_storage bound;
    socklen_t len = sizeof(bound);
    if (getsockname(fd, (struct sockaddr *)&bound, &len) == 0)
        s->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                    : ((struct sockaddr_in *)&bound)->sin_port);
    enum gs_status st = gs_srv_tls_new(&s->loop, &s->cfg.tls, fd, tls_deliver, s, &s->tls, err);
    s->cfg.tls.cert_path = s->cfg.tls.key_path = s->cfg.tls.client_ca_path = NULL; /* read */
    return st;
}

static enum gs_status start_mhd(struct gs_srv *s, struct gs_err *err)
{
    struct sockaddr_storage ss;
    bool v6;
    if (make_addr(s->host, s->cfg.port, &ss, &v6, err) != GS_OK)
        return err->code;
    const struct gs_srv_limits *l = &s->cfg.limits;
    unsigned flags = MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (v6)
        flags |= MHD_USE_IPv6;
    /* MHD never listens: the relay (server/tls.c, plaintext without a certificate)
     * accepts every connection and hands MHD its end of a socketpair, so that a
     * client's FIN can wait for its answer (see server/tls.h). */
    flags |= MHD_USE_NO_LISTEN_SOCKET;
    s->mhd = MHD_start_daemon(
        flags, s->cfg.port, NULL, NULL, on_request, s,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)l->max_conns, MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)l->max_conns_per_ip,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)l->conn_timeout_s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)l->max_header_bytes, MHD_OPTION_EXTERNAL_LOGGER,
        mhd_logger, s, MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
        /* Refuses what the strict HTTP/1.1 grammar refuses (whitespace before
         * a colon, folded lines, ...) before our own head checks run. */
        MHD_OPTION_STRICT_FOR_CLIENT, (int)1, MHD_OPTION_END);
    if (!s->mhd)
        return gs_err_set(err, GS_IO, "cannot listen on %s:%u: %s", s->host, s->cfg.port,
                          strerror(errno));
    s->port = s->cfg.port;
    if (start_tls(s, &ss, v6, err) != GS_OK)
        return err->code;
    struct sockaddr_storage bound = ss;
    if (s->cfg.listen_fd > 2) {
        socklen_t len = sizeof(bound);
        if (getsockname(s->cfg.listen_fd, (struct sockaddr *)&bound, &len) != 0)
            bound.ss_family = AF_UNSPEC;
    }
    s->listens_on_loopback = is_loopback(&bound);
    update_head_policy(s);
    const union MHD_DaemonInfo *ei = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_EPOLL_FD);
    if (!ei)
        return gs_err_set(err, GS_IO, "libmicrohttpd has no epoll descriptor");
    if (uv_poll_init(&s->loop, &s->mhd_poll, ei->epoll_fd) != 0)
        return gs_err_set(err, GS_IO, "cannot watch libmicrohttpd's epoll descriptor");
    s->mhd_poll.data = s;
    uv_poll_start(&s->mhd_poll, UV_READABLE, on_mhd_poll);
    return GS_OK;
}

enum gs_status gs_srv_new(const struct gs_srv_cfg *cfg, struct gs_srv **out, struct gs_err *err)
{
    *out = NULL;
    struct gs_srv *s = gs_calloc(1, sizeof(*s));
    if (!s)
        return gs_err_set(err, GS_NOMEM, "out of memory");
    atomic_init(&s->ready, true);
    atomic_init(&s->shutdown_requested, false);
    uv_mutex_init(&s->ready_mu);
    if (uv_loop_init(&s->loop) != 0) {
        gs_free(s);
        return gs_err_set(err, GS_IO, "cannot create the event loop");
    }
    uv_timer_init(&s->loop, &s->mhd_timer);
    uv_timer_init(&s->loop, &s->tick);
    uv_timer_init(&s->loop, &s->drain_timer);
    uv_timer_init(&s->loop, &s->sweep);
    uv_async_init(&s->loop, &s->async, on_async);
    s->mhd_timer.data = s->tick.data = s->drain_timer.data = s->sweep.data = s->async.data = s;
    if (cfg->handle_signals) {
        signal(SIGPIPE, SIG_IGN);
        uv_signal_init(&s->loop, &s->sig_term);
        uv_signal_init(&s->loop, &s->sig_int);
        s->sig_term.data = s->sig_int.data = s;
    }
    s->handles_open = true;
    if (copy_cfg(s, cfg, err) != GS_OK || start_mhd(s, err) != GS_OK) {
        gs_srv_free(s);
        return err->code;
    }
    s->max_piece_bytes = gs_srv__max_piece_bytes(s->cfg.model.tok);
    /* From here on a SIGHUP reloads (once the loop runs) instead of ending
     * the process, so a reload sent as soon as the port is announced is safe. */
    gs_srv__service_start(s);
    *out = s;
    return GS_OK;
}

enum gs_status gs_srv_update(struct gs_srv *s, const struct gs_srv_cfg *cfg, struct gs_err *err)
{
    if (map_reloadable(s, cfg, err) != GS_OK)
        return err->code;
    s->cfg.n_api_keys = cfg->n_api_keys;
    s->cfg.metrics_public = cfg->metrics_public;
    update_head_policy(s);
    s->cfg.drain_timeout_ms = cfg->drain_timeout_ms;
    struct gs_srv_limits *l = &s->cfg.limits;
    l->max_body_bytes = cfg->limits.max_body_bytes;
    l->max_tokens = cfg->limits.max_tokens;
    l->max_n = cfg->limits.max_n;
    l->max_stop = cfg->limits.max_stop;
    l->max_stop_bytes = cfg->limits.max_stop_bytes;
    l->request_timeout_s = cfg->limits.request_timeout_s;
    l->max_stream_buffer_bytes = cfg->limits.max_stream_buffer_bytes;
    s->cfg.validate_rate = cfg->validate_rate;
    s->cfg.validate_timeout_ms = cfg->validate_timeout_ms;
    return GS_OK;
}

void gs_srv_set_engine(struct gs_srv *s, const struct gs_srv_engine *engine)
{
    s->has_engine = engine != NULL;
    if (engine)
        s->engine = *engine;
}

uint16_t gs_srv_port(const struct gs_srv *s)
{
    return s->port;
}

void gs_srv_wake(void *srv)
{
    struct gs_srv *s = srv;
    uv_async_send(&s->async);
}

void gs_srv_set_ready(struct gs_srv *s, bool ready, const char *why)
{
    uv_mutex_lock(&s->ready_mu);
    snprintf(s->ready_why, sizeof(s->ready_why), "%s", why ? why : "");
    uv_mutex_unlock(&s->ready_mu);
    atomic_store(&s->ready, ready);
}

void gs_srv_shutdown(struct gs_srv *s)
{
    atomic_store(&s->shutdown_requested, true);
    uv_async_send(&s->async);
}

int gs_srv_run(struct gs_srv *s)
{
    if (s->cfg.handle_signals) {
        uv_signal_start(&s->sig_term, on_signal, SIGTERM);
        uv_signal_start(&s->sig_int, on_signal, SIGINT);
    }
    gs_srv__kick(s);
    int rc = uv_run(&s->loop, UV_RUN_DEFAULT);
    return rc < 0 ? 1 : 0;
}

void gs_srv_free(struct gs_srv *s)
{
    if (!s)
        return;
    if (s->handles_open) {
        /* Stop watching MHD's descriptors before MHD closes them. */
        close_all(s);
        uv_run(&s->loop, UV_RUN_DEFAULT);
        uv_loop_close(&s->loop);
    }
    /* Requests still waiting (a forced end of a drain) are woken so that MHD
     * can close their connections; their readers see peer_gone and stop. */
    for (struct gs_srv_req *r = s->active; r; r = r->next) {
        r->peer_gone = true;
        gs_srv__resume(r);
    }
    if (s->mhd) {
        /* Completion callbacks run from here for connections still open. */
        MHD_stop_daemon(s->mhd);
        s->mhd = NULL;
    }
    gs_srv_tls_free(s->tls); /* its handles closed in the loop run above */
    uv_mutex_destroy(&s->ready_mu);
    gs_free(s->host);
    gs_free(s->model_id);
    if (s->reload_map)
        munmap(s->reload_map, s->reload_map_bytes);
    free_strs(s->cors_origins, s->head_policy.n_origins);
    free_strs(s->model_aliases, s->cfg.model.n_aliases);
    gs_srv__jinja_free(s);
    gs_srv__responses_store_free(s);
    gs_grammar_vocab_free(s->grammar_vocab);
    gs_free(s);
}
