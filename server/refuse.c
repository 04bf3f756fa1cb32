/*
 * server/refuse.c - what every request parser says when it refuses a field:
 * the field's name as the client spelled it (the error object's "param") and
 * a message naming it. Shared by the chat and completions parser (request.c),
 * tools (tools.c) and the Responses API (responses_body.c).
 */
#include "server/internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

enum gs_status gs_srv_refuse(const struct gs_srv_refusal *c, const char *param, const char *fmt,
                             ...)
{
    snprintf(c->param, c->param_cap, "%s", param);
    va_list ap;
    va_start(ap, fmt);
    char msg[GS_ERR_MSG_LEN];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return gs_err_set(c->err, GS_INVAL, "%s", msg);
}

enum gs_status gs_srv_refuse_nomem(const struct gs_srv_refusal *c)
{
    snprintf(c->param, c->param_cap, "%s", "");
    return gs_err_set(c->err, GS_NOMEM, "out of memory");
}

bool gs_srv_name_ok(const char *n)
{
    size_t len = strlen(n);
    if (!len || len > 64)
        return false;
    for (; *n; n++)
        if (!((*n >= 'a' && *n <= 'z') || (*n >= 'A' && *n <= 'Z') || (*n >= '0' && *n <= '9') ||
              *n == '_' || *n == '-'))
            return false;
    return true;
}

enum gs_status gs_srv_only_keys(const struct gs_srv_refusal *c, json_t *o, const char *where,
                                const char *const *keys, size_t n)
{
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v)
    {
        bool known = false;
        for (size_t i = 0; i < n && !known; i++)
            known = !strcmp(k, keys[i]);
        if (!known)
            return gs_srv_refuse(c, where, "'%s.%.60s' is not supported", where, k);
    }
    return GS_OK;
}
