/*
 * server/head.c - what a request's line and headers must satisfy before any
 * route sees it (the contract is in server/internal.h, "request heads").
 *
 * Two classes of defence live here. Framing: a request whose length is
 * ambiguous (two Content-Lengths, Content-Length beside Transfer-Encoding, a
 * transfer coding other than chunked) is how requests are smuggled past a
 * proxy that reads the framing differently, so it is refused and its
 * connection closed. Names: a page in the user's browser can reach a server
 * on 127.0.0.1 through DNS rebinding (a name the attacker controls that
 * resolves to 127.0.0.1) or a cross-site form post; the first carries the
 * attacker's name in Host, the second the attacker's site in Origin, so both
 * are checked against names that can only mean this machine.
 */
#include "server/internal.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

static bool refuse(struct gs_srv_head_verdict *v, enum gs_srv_ekind kind, const char *param,
                   const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static bool refuse(struct gs_srv_head_verdict *v, enum gs_srv_ekind kind, const char *param,
                   const char *fmt, ...)
{
    v->kind = kind;
    snprintf(v->param, sizeof(v->param), "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->msg, sizeof(v->msg), fmt, ap);
    va_end(ap);
    return false;
}

/* The value of the only header called name, its count in *n. */
static const char *header(const struct gs_srv_header *h, size_t n_h, const char *name, size_t *n)
{
    const char *v = NULL;
    *n = 0;
    for (size_t i = 0; i < n_h; i++)
        if (h[i].name && !strcasecmp(h[i].name, name)) {
            v = h[i].value ? h[i].value : "";
            (*n)++;
        }
    return v;
}

/* Copies s without surrounding blanks into out; false if it does not fit. */
static bool trimmed(const char *s, char *out, size_t cap)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
        n--;
    if (n >= cap)
        return false;
    memcpy(out, s, n);
    out[n] = '\0';
    return true;
}

/* An IPv4 or IPv6 literal: a rebinding page cannot make one mean its own
 * server, so literals are always accepted. */
static bool is_ip_literal(const char *name)
{
    unsigned char a[16];
    return inet_pton(AF_INET, name, a) == 1 || inet_pton(AF_INET6, name, a) == 1;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcasecmp(s + n - m, suffix);
}

const char *gs_srv_origin_listed(const char *origin, const struct gs_srv_head_policy *p)
{
    for (size_t i = 0; origin && i < p->n_origins; i++)
        if (!strcmp(p->origins[i], "*") || !strcasecmp(p->origins[i], origin))
            return p->origins[i];
    return NULL;
}

bool gs_srv_host_name_allowed(const char *name, const struct gs_srv_head_policy *p)
{
    if (is_ip_literal(name))
        return true;
    /* "localhost" and "*.localhost" never leave the machine (RFC 6761), and
     * browsers resolve them to loopback themselves. */
    if (!strcasecmp(name, "localhost") || ends_with(name, ".localhost"))
        return true;
    for (size_t i = 0; i < p->n_allowed_hosts; i++) {
        const char *a = p->allowed_hosts[i];
        if (!strcmp(a, "*") || !strcasecmp(a, name))
            return true;
        if (a[0] == '.' && ends_with(name, a)) /* ".example.com": any name under it */
            return true;
    }
    return false;
}

/*
 * The host part of a Host value (RFC 9110 7.2: uri-host [":" port]) into out,
 * lower-cased, without a trailing dot or IPv6 brackets. False when it is not
 * of that form.
 */
static bool host_part(const char *value, char *out, size_t cap)
{
    char v[256];
    if (!trimmed(value, v, sizeof(v)) || !v[0])
        return false;
    const char *end;
    const char *p = v;
    if (*p == '[') {
        end = strchr(p, ']');
        if (!end)
            return false;
        p++;
        if (end[1] && end[1] != ':')
            return false;
    } else {
        end = strchr(p, ':');
        if (!end)
            end = p + strlen(p);
    }
    const char *port = *end == ']' ? end + 1 : end;
    if (*port == ':') {
        port++;
        if (!*port || strlen(port) > 5)
            return false;
        for (const char *c = port; *c; c++)
            if (!isdigit((unsigned char)*c))
                return false;
    } else if (*port) {
        return false;
    }
    size_t n = (size_t)(end - p);
    if (n == 0 || n >= cap)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        /* Names, IPv4 and IPv6 literals use no other bytes. */
        if (!isalnum(c) && c != '-' && c != '.' && c != '_' && c != ':')
            return false;
        out[i] = (char)tolower(c);
    }
    out[n] = '\0';
    if (n > 1 && out[n - 1] == '.')
        out[n - 1] = '\0';
    return true;
}

/* Origin: "null" or scheme "://" host [":" port] (RFC 6454 7). */
static bool origin_host(const char *origin, char *out, size_t cap)
{
    const char *sep = strstr(origin, "://");
    if (!sep || sep == origin)
        return false;
    for (const char *c = origin; c < sep; c++)
        if (!isalpha((unsigned char)*c) && *c != '+' && *c != '-' && *c != '.')
            return false;
    return host_part(sep + 3, out, cap);
}

static bool digits_only(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s))
            return false;
    return true;
}

bool gs_srv_head_check(const char *method, const char *version, const struct gs_srv_header *h,
                       size_t n_h, const struct gs_srv_head_policy *p,
                       struct gs_srv_head_verdict *v)
{
    memset(v, 0, sizeof(*v));
    size_t n_cl, n_te, n_host, n_origin, n_ct;
    const char *cl = header(h, n_h, "Content-Length", &n_cl);
    const char *te = header(h, n_h, "Transfer-Encoding", &n_te);
    const char *host = header(h, n_h, "Host", &n_host);
    const char *origin = header(h, n_h, "Origin", &n_origin);
    const char *ct = header(h, n_h, "Content-Type", &n_ct);
    char buf[256];

    /* Framing first: nothing else matters if the length is ambiguous. */
    if (n_cl > 1)
        return refuse(v, GS_SRV_E_BAD_REQUEST, NULL,
                      "the request has %zu Content-Length headers; send one", n_cl);
    if (n_te > 1)
        return refuse(v, GS_SRV_E_BAD_REQUEST, NULL,
                      "the request has %zu Transfer-Encoding headers; send at most one", n_te);
    if (cl && te)
        return refuse(v, GS_SRV_E_BAD_REQUEST, NULL,
                      "the request has both Content-Length and Transfer-Encoding; send one");
    if (cl && (!trimmed(cl, buf, 21) || !digits_only(buf)))
        return refuse(v, GS_SRV_E_BAD_REQUEST, NULL,
                      "Content-Length is not a decimal number of bytes");
    if (te && (!trimmed(te, buf, sizeof(buf)) || strcasecmp(buf, "chunked")))
        return refuse(v, GS_SRV_E_BAD_REQUEST, NULL,
                      "Transfer-Encoding '%.64s' is not supported; only chunked is", te);

    if (n_host > 1)
        return refuse(v, GS_SRV_E_BAD_REQUEST, NULL, "the request has %zu Host headers", n_host);
    bool http11 = version && !strcmp(version, "HTTP/1.1");
    if (!host && http11)
        return refuse(v, GS_SRV_E_BAD_REQUEST, NULL,
                      "an HTTP/1.1 request must have a Host header");
    if (host && !host_part(host, buf, sizeof(buf)))
        return refuse(v, GS_SRV_E_BAD_REQUEST, NULL, "Host '%.64s' is not a host[:port]", host);
    if (p->check_host) {
        if (host && !gs_srv_host_name_allowed(buf, p))
            return refuse(v, GS_SRV_E_FORBIDDEN, NULL,
                          "Host '%.64s' is not a name of this server; add it to --allowed-hosts "
                          "to accept it",
                          buf);
        if (n_origin > 1)
            return refuse(v, GS_SRV_E_BAD_REQUEST, NULL, "the request has %zu Origin headers",
                          n_origin);
        if (origin && !gs_srv_origin_listed(origin, p) &&
            (!origin_host(origin, buf, sizeof(buf)) || !gs_srv_host_name_allowed(buf, p)))
            return refuse(v, GS_SRV_E_FORBIDDEN, NULL,
                          "requests from the web origin '%.64s' are not accepted; add it to "
                          "--cors-origins (or its host to --allowed-hosts) to accept them",
                          origin);
    }

    /* Bodies are JSON. curl -d labels its body form-urlencoded, so that label
     * is taken as JSON too; any other type (text/plain, multipart) is refused
     * rather than guessed at. */
    if (method && !strcmp(method, "POST") && ct) {
        if (n_ct > 1)
            return refuse(v, GS_SRV_E_BAD_REQUEST, NULL, "the request has %zu Content-Type headers",
                          n_ct);
        size_t len = strcspn(ct, ";");
        char type[96];
        if (len >= sizeof(type))
            len = sizeof(type) - 1;
        memcpy(type, ct, len);
        type[len] = '\0';
        if (!trimmed(type, buf, sizeof(buf)) ||
            (strcasecmp(buf, "application/json") &&
             strcasecmp(buf, "application/x-www-form-urlencoded")))
            return refuse(v, GS_SRV_E_MEDIA_TYPE, NULL,
                          "Content-Type '%.64s' is not supported; send application/json", ct);
    }
    return true;
}
