/*
 * server/webui.c - GET / and /assets/...: the web page's files from the
 * table compiled in (server/webui.h), with their content type, a strong
 * ETag (a 304 when If-None-Match has it) and "Cache-Control: no-cache", so a
 * browser revalidates each load and never runs a page older than the daemon.
 * Every answer carries a Content-Security-Policy that allows only this
 * origin's scripts, styles and connections: the page never loads anything
 * from elsewhere, and model text it shows can never run as script.
 */
#include "server/webui.h"
#include "server/daemon.h"

#include <string.h>

static const char csp[] = "default-src 'none'; script-src 'self'; style-src 'self'; "
                          "connect-src 'self'; img-src 'self' data:; base-uri 'none'; "
                          "form-action 'none'; frame-ancestors 'none'";

static const struct gs_srv_asset *find(const char *path)
{
    if (!strcmp(path, "/"))
        path = "/index.html";
    for (size_t i = 0; i < gs_srv_n_assets; i++)
        if (!strcmp(gs_srv_assets[i].path, path))
            return &gs_srv_assets[i];
    return NULL;
}

enum MHD_Result gs_srv__webui(struct gs_srv_req *r)
{
    if (!r->srv->cfg.webui)
        return gs_srv__respond_error(r, GS_SRV_E_NOT_FOUND, NULL,
                                     "no route for %s %s (the web page is off: --no-webui)",
                                     r->method, r->url);
    /* index.html is served only as "/", so the page has one address. */
    const struct gs_srv_asset *a = strcmp(r->url, "/index.html") ? find(r->url) : NULL;
    if (!a)
        return gs_srv__respond_error(r, GS_SRV_E_NOT_FOUND, NULL, "no route for %s %s", r->method,
                                     r->url);
    const char *inm =
        MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH);
    bool fresh = inm && strstr(inm, a->etag);
    unsigned status = fresh ? 304 : 200;
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        fresh ? 0 : a->len, fresh ? NULL : (void *)a->data, MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, a->type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, a->etag);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(resp, "Content-Security-Policy", csp);
    gs_srv__id_headers(r, resp);
    r->status = status;
    enum MHD_Result ret = MHD_queue_response(r->conn, status, resp);
    MHD_destroy_response(resp);
    return ret;
}
