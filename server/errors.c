/* server/errors.c - the one table from error kinds (and engine statuses) to
 * HTTP statuses and the error objects of OpenAI's and Anthropic's APIs. */
#include "server/internal.h"

#include <string.h>

static const struct {
    unsigned http;
    const char *type;
    const char *code;
    const char *anthropic_type;
} kinds[GS_SRV_E_COUNT] = {
#define GS_SRV_EKIND_ROW(name, h, t, c, a) [GS_SRV_E_##name] = {h, t, c, a},
    GS_SRV_ERR_MAP(GS_SRV_EKIND_ROW)
#undef GS_SRV_EKIND_ROW
};

/* What an engine, tokenizer or parser status means to a client. GS_OK and
 * GS_CANCELLED never reach a client as errors; they map to INTERNAL so that a
 * bug shows up as a 500. */
static const enum gs_srv_ekind status_kinds[GS_STATUS_COUNT] = {
    [GS_OK] = GS_SRV_E_INTERNAL,
    [GS_NOMEM] = GS_SRV_E_UNAVAILABLE,
    [GS_INVAL] = GS_SRV_E_BAD_REQUEST,
    [GS_FORMAT] = GS_SRV_E_BAD_REQUEST,
    [GS_UNSUPPORTED] = GS_SRV_E_BAD_REQUEST,
    [GS_IO] = GS_SRV_E_INTERNAL,
    [GS_BUSY] = GS_SRV_E_BUSY,
    [GS_CANCELLED] = GS_SRV_E_INTERNAL,
    [GS_NOTFOUND] = GS_SRV_E_NOT_FOUND,
    [GS_NUMERIC] = GS_SRV_E_NUMERIC,
};

unsigned gs_srv_err_http(enum gs_srv_ekind k)
{
    return (unsigned)k < GS_SRV_E_COUNT ? kinds[k].http : 500;
}

const char *gs_srv_err_type(enum gs_srv_ekind k)
{
    return (unsigned)k < GS_SRV_E_COUNT ? kinds[k].type : "server_error";
}

const char *gs_srv_err_code(enum gs_srv_ekind k)
{
    return (unsigned)k < GS_SRV_E_COUNT ? kinds[k].code : NULL;
}

enum gs_srv_ekind gs_srv_err_from_status(enum gs_status st)
{
    return (unsigned)st < GS_STATUS_COUNT ? status_kinds[st] : GS_SRV_E_INTERNAL;
}

json_t *gs_srv_err_json(enum gs_srv_ekind k, const char *message, const char *param)
{
    const char *code = gs_srv_err_code(k);
    json_t *msg = gs_srv_json_text(message, strlen(message));
    return json_pack("{s:{s:o,s:s,s:o,s:o}}", "error", "message", msg ? msg : json_string(""),
                     "type", gs_srv_err_type(k), "param",
                     param && *param ? json_string(param) : json_null(), "code",
                     code ? json_string(code) : json_null());
}

json_t *gs_srv_err_json_anthropic(enum gs_srv_ekind k, const char *message, const char *request_id)
{
    const char *type = (unsigned)k < GS_SRV_E_COUNT ? kinds[k].anthropic_type : "api_error";
    json_t *msg = gs_srv_json_text(message, strlen(message));
    json_t *j = json_pack("{s:s,s:{s:s,s:o}}", "type", "error", "error", "type", type, "message",
                          msg ? msg : json_string(""));
    if (j && request_id)
        json_object_set_new(j, "request_id", json_string(request_id));
    return j;
}
