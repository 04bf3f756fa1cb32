/*
 * server/respond.c - the response leaf: what every route writes to its connection.
 * JSON and text answers with the common headers (request id, CORS, Retry-After,
 * Connection: close while draining), error objects in the API of the request's route,
 * event streams read from r->out, and suspending and resuming the connection while it
 * waits. It calls nothing else of the daemon's (only buf.c's and errors.c's pure
 * helpers): the HTTP layer and the routes call it, never the other way (the
 * call_graph test holds it to that). Loop thread only.
 */
#include "server/daemon.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define RETRY_AFTER_S "1"

void gs_srv__cors_headers(const struct gs_srv_req *r, struct MHD_Response *resp)
{
    if (!r->cors_origin)
        return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", r->cors_origin);
    MHD_add_response_header(resp, "Access-Control-Expose-Headers",
                            "X-Request-Id, X-Ignored-Fields, Retry-After, request-id");
    MHD_add_response_header(resp, "Vary", "Origin");
}

void gs_srv__id_headers(const struct gs_srv_req *r, struct MHD_Response *resp)
{
    MHD_add_response_header(resp, "X-Request-Id", r->id);
    /* Anthropic's SDKs read the id from their API's own header (as request_id). */
    if (r->api == GS_SRV_API_ANTHROPIC)
        MHD_add_response_header(resp, "request-id", r->id);
}

struct MHD_Response *gs_srv__sse_response(struct gs_srv_req *r)
{
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, gs_srv__sse_read, r, NULL);
    if (!resp)
        return NULL;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    gs_srv__id_headers(r, resp);
    gs_srv__cors_headers(r, resp);
    return resp;
}

static void add_common_headers(struct gs_srv_req *r, struct MHD_Response *resp, unsigned status)
{
    gs_srv__id_headers(r, resp);
    gs_srv__cors_headers(r, resp);
    if (r->gen.ignored[0])
        MHD_add_response_header(resp, "X-Ignored-Fields", r->gen.ignored);
    if (status == 429 || status == 503)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, RETRY_AFTER_S);
    if (r->srv->draining || r->close_after)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
}

/*
 * An answer's response: its bytes in r's arena (copied there unless they are
 * already), which MHD reads only while sending them and never after the
 * completion callback that releases the arena (it destroys the response
 * before that callback, or after it without reading the body). When the arena
 * cannot take them, MHD's own heap copy.
 */
static struct MHD_Response *answer_response(struct gs_srv_req *r, const char *text, size_t len)
{
    char *kept = (char *)text;
    if (len && !gs_srv_arena_owns(r->arena, text) && (kept = gs_srv_arena_alloc(r->arena, len)))
        memcpy(kept, text, len);
    if (!kept)
        return MHD_create_response_from_buffer(len, (void *)text, MHD_RESPMEM_MUST_COPY);
    return MHD_create_response_from_buffer(len, kept, MHD_RESPMEM_PERSISTENT);
}

enum MHD_Result gs_srv__respond_text(struct gs_srv_req *r, unsigned status, const char *type,
                                     const char *text, size_t len)
{
    struct MHD_Response *resp = answer_response(r, text, len);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    add_common_headers(r, resp, status);
    if (status == 405 && r->allow[0])
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->allow);
    if (status == 401)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    r->status = status;
    enum MHD_Result ret = MHD_queue_response(r->conn, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

enum MHD_Result gs_srv__respond_json(struct gs_srv_req *r, unsigned status, json_t *body)
{
    /* Dumped into r's arena, where the response reads it; past the arena's cap, onto
     * the heap as before. */
    struct gs_srv_buf b = {.arena = r->arena};
    char *s = NULL;
    if (gs_srv_buf_add_json(&b, body, JSON_COMPACT) && b.p)
        s = b.p;
    else if (body)
        s = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (!s) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
                                  "\"server_error\",\"param\":null,\"code\":\"internal_error\"}}";
        return gs_srv__respond_text(r, 500, "application/json", oom, sizeof(oom) - 1);
    }
    enum MHD_Result ret = gs_srv__respond_text(r, status, "application/json", s, strlen(s));
    if (s != b.p)
        free(s);
    return ret;
}

enum MHD_Result gs_srv__respond_error(struct gs_srv_req *r, enum gs_srv_ekind kind,
                                      const char *param, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (kind == GS_SRV_E_BUSY)
        r->srv->metrics.rejected_busy++;
    json_t *e = r->api == GS_SRV_API_ANTHROPIC ? gs_srv_err_json_anthropic(kind, msg, r->id)
                                               : gs_srv_err_json(kind, msg, param);
    return gs_srv__respond_json(r, gs_srv_err_http(kind), e);
}

enum MHD_Result gs_srv__respond_nomem(struct gs_srv_req *r)
{
    if (gs_srv_arena_refused(r->arena))
        return gs_srv__respond_error(r, GS_SRV_E_TOO_LARGE, NULL,
                                     "the request needs more than its %zu-byte memory bound",
                                     gs_srv_arena_cap_bytes(r->arena));
    return gs_srv__respond_error(r, GS_SRV_E_UNAVAILABLE, NULL, "out of memory");
}

/* ---- suspend / resume ----------------------------------------------------------------------- */

void gs_srv__suspend(struct gs_srv_req *r)
{
    if (!r->suspended) {
        r->suspended = true;
        MHD_suspend_connection(r->conn);
    }
}

void gs_srv__resume(struct gs_srv_req *r)
{
    if (r->suspended) {
        r->suspended = false;
        MHD_resume_connection(r->conn);
    }
}

/* ---- event streams --------------------------------------------------------------------------- */

ssize_t gs_srv__sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct gs_srv_req *r = cls;
    if (r->peer_gone || r->out.failed)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    r->stalled_rounds = 0; /* MHD has room: the client reads */
    if (r->out.len) {
        size_t n = GS_MIN(max, r->out.len);
        memcpy(buf, r->out.p, n);
        gs_srv_buf_consume(&r->out, n);
        r->t_last_out_ms = gs_now_ms();
        return (ssize_t)n;
    }
    if (r->stream_end)
        return MHD_CONTENT_READER_END_OF_STREAM;
    /* Nothing to send: park the connection until there is more. */
    gs_srv__suspend(r);
    return 0;
}
