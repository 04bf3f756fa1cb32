/*
 * server/refuse.c - what every request parser says when it refuses a field:
 * the field's name as the client spelled it (the error object's "param") and
 * a message naming it; the readers of plain fields (numbers, integers,
 * booleans, stop strings) that refuse in those words; and the respelling of a
 * refusal from chat's field names into another API's. Shared by the chat and
 * completions parser (request.c), tools (tools.c), the Responses API
 * (responses_body.c) and the Messages API (messages_body.c).
 */
#include "server/internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
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

/* ---- field readers ---- */

/* A number field in [lo, hi]; absent or null leaves *out unchanged. */
enum gs_status gs_srv_get_num(const struct gs_srv_refusal *c, json_t *root, const char *key,
                              double lo, double hi, double *out, bool *present)
{
    json_t *v = json_object_get(root, key);
    if (present)
        *present = false;
    if (!v || json_is_null(v))
        return GS_OK;
    if (!json_is_number(v))
        return gs_srv_refuse(c, key, "'%s' must be a number", key);
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi)
        return gs_srv_refuse(c, key, "'%s' must be between %g and %g, got %g", key, lo, hi, d);
    *out = d;
    if (present)
        *present = true;
    return GS_OK;
}

/* An integer field in [lo, hi]. */
enum gs_status gs_srv_get_int(const struct gs_srv_refusal *c, json_t *root, const char *key,
                              int64_t lo, int64_t hi, int64_t *out, bool *present)
{
    json_t *v = json_object_get(root, key);
    if (present)
        *present = false;
    if (!v || json_is_null(v))
        return GS_OK;
    int64_t i;
    if (json_is_integer(v))
        i = json_integer_value(v);
    else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
             fabs(json_real_value(v)) < 9e15)
        i = (int64_t)json_real_value(v);
    else
        return gs_srv_refuse(c, key, "'%s' must be an integer", key);
    if (i < lo || i > hi)
        return gs_srv_refuse(c, key, "'%s' must be between %lld and %lld, got %lld", key,
                             (long long)lo, (long long)hi, (long long)i);
    *out = i;
    if (present)
        *present = true;
    return GS_OK;
}

enum gs_status gs_srv_get_bool(const struct gs_srv_refusal *c, json_t *root, const char *key,
                               bool *out)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v))
        return GS_OK;
    if (!json_is_boolean(v))
        return gs_srv_refuse(c, key, "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return GS_OK;
}

/* Stop strings from field key: OpenAI's "stop" (a string or a list) or Anthropic's
 * "stop_sequences" (a list only, lone false). */
enum gs_status gs_srv_get_stop(const struct gs_srv_refusal *c, json_t *root, const char *key,
                                 bool lone, const struct gs_srv_parse_limits *lim,
                                 struct gs_srv_gen *g)
{
    json_t *s = json_object_get(root, key);
    if (!s || json_is_null(s))
        return GS_OK;
    if (!(lone && json_is_string(s)) && !json_is_array(s))
        return gs_srv_refuse(c, key,
                             lone ? "'%s' must be a string or an array of strings"
                                  : "'%s' must be an array of strings",
                             key);
    size_t n = json_is_string(s) ? 1 : json_array_size(s);
    if (n > lim->max_stop)
        return gs_srv_refuse(c, key, "'%s' has %zu strings; at most %u are allowed", key, n,
                             lim->max_stop);
    g->stop = gs_calloc(n ? n : 1, sizeof(*g->stop));
    if (!g->stop)
        return gs_srv_refuse_nomem(c);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_is_string(s) ? s : json_array_get(s, i);
        if (!json_is_string(v))
            return gs_srv_refuse(c, key, "'%s[%zu]' must be a string", key, i);
        if (json_string_length(v) > lim->max_stop_bytes)
            return gs_srv_refuse(c, key, "'%s[%zu]' is longer than %u bytes", key, i,
                                 lim->max_stop_bytes);
        if (json_string_length(v) == 0 || strlen(json_string_value(v)) != json_string_length(v))
            continue; /* an empty stop string (or one with NUL) can never be matched usefully */
        g->stop[g->n_stop] = gs_strdup(json_string_value(v));
        if (!g->stop[g->n_stop])
            return gs_srv_refuse_nomem(c);
        g->n_stop++;
    }
    return GS_OK;
}

/* ---- another API's spelling ---- */

void gs_srv_respell(char *s, size_t cap, const char *const (*map)[2], size_t n_map,
                    const json_t *origin)
{
    char out[GS_ERR_MSG_LEN];
    size_t w = 0;
    for (const char *p = s; *p && w + 1 < sizeof(out);) {
        char *end;
        unsigned long m = strncmp(p, "messages[", 9) ? 0 : strtoul(p + 9, &end, 10);
        const char *from = !strncmp(p, "messages[", 9) && *end == ']'
                               ? json_string_value(json_array_get(origin, m))
                               : NULL;
        size_t k = 0;
        if (from) {
            p = end + 1;
        } else {
            while (k < n_map && strncmp(p, map[k][0], strlen(map[k][0])))
                k++;
            if (k == n_map) {
                out[w++] = *p++;
                continue;
            }
            from = map[k][1];
            p += strlen(map[k][0]);
        }
        w += (size_t)snprintf(out + w, sizeof(out) - w, "%s", from);
        if (w >= sizeof(out))
            w = sizeof(out) - 1;
    }
    out[w] = '\0';
    snprintf(s, cap, "%s", out);
}
