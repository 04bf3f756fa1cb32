/*
 * tools/validate_server.c - see validate_server.h.
 *
 * The client is a small blocking HTTP/1.1 client over one TCP socket per
 * request (Connection: close, the answer read to EOF): plain http:// only,
 * which is what a daemon on 127.0.0.1 or a trusted network speaks. No
 * library is needed for that; for https, put a TLS proxy in front or use
 * curl against the API.
 */
#define _GNU_SOURCE
#include "tools/validate_server.h"

#include "engine/base.h"
#include "tools/internal.h"

#include <errno.h>
#include <jansson.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static const char *const builtin[] = {
    "Once upon a time",
    "The little dog",
    "One day, Lily went to the park and",
    "Tom and his mom",
};

struct vs_opts {
    char host[256], port[16];
    const char *api_key;
    const char **prompts;
    size_t n_prompts;
    char *file_text; /* owns the prompts read from --prompts-file */
    int64_t max_tokens, timeout_s;
    bool json;
};

static bool parse_url(const char *url, struct vs_opts *o)
{
    if (strncmp(url, "http://", 7))
        return false;
    const char *h = url + 7, *end = h + strcspn(h, "/");
    const char *colon = memchr(h, ':', (size_t)(end - h));
    size_t hl = (size_t)((colon ? colon : end) - h);
    if (!hl || hl >= sizeof(o->host))
        return false;
    memcpy(o->host, h, hl);
    o->host[hl] = '\0';
    size_t pl = colon ? (size_t)(end - colon - 1) : 0;
    if (colon && (!pl || pl >= sizeof(o->port)))
        return false;
    snprintf(o->port, sizeof(o->port), "%.*s", (int)pl, colon ? colon + 1 : "80");
    return true;
}

static bool add_prompts_file(struct vs_opts *o, const char *path, const char **v, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    char buf[4096];
    size_t n, len = 0;
    char *t = NULL;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) {
        char *nt = gs_realloc(t, len + n + 1);
        if (!nt)
            break;
        t = nt;
        memcpy(t + len, buf, n);
        len += n;
    }
    fclose(f);
    if (!t)
        return true;
    t[len] = '\0';
    o->file_text = t;
    for (char *line = strtok(t, "\r\n"); line && o->n_prompts < cap; line = strtok(NULL, "\r\n"))
        if (*line)
            v[o->n_prompts++] = line;
    return true;
}

/* One request; returns the HTTP status (0 when no answer) and the body. */
static int http_post(const struct vs_opts *o, const char *path, const char *body, char **resp,
                     char *why, size_t why_cap)
{
    *resp = NULL;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
    int rc = getaddrinfo(o->host, o->port, &hints, &ai);
    if (rc) {
        snprintf(why, why_cap, "%.200s: %s", o->host, gai_strerror(rc));
        return 0;
    }
    int fd = -1;
    for (struct addrinfo *p = ai; p && fd < 0; p = p->ai_next) {
        fd = socket(p->ai_family, p->ai_socktype, p->ai_protocol);
        if (fd >= 0 && connect(fd, p->ai_addr, p->ai_addrlen)) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    if (fd < 0) {
        snprintf(why, why_cap, "cannot connect to %.200s:%s: %s", o->host, o->port, strerror(errno));
        return 0;
    }
    struct timeval tv = {.tv_sec = o->timeout_s};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    char *req = NULL;
    int n =
        asprintf(&req,
                 "POST %s HTTP/1.1\r\nHost: %s:%s\r\nContent-Type: application/json\r\n"
                 "Content-Length: %zu\r\nConnection: close\r\n%s%s%s\r\n%s",
                 path, o->host, o->port, strlen(body), o->api_key ? "Authorization: Bearer " : "",
                 o->api_key ? o->api_key : "", o->api_key ? "\r\n" : "", body);
    if (n < 0) {
        close(fd);
        snprintf(why, why_cap, "out of memory");
        return 0;
    }
    for (size_t off = 0; off < (size_t)n;) {
        ssize_t w = send(fd, req + off, (size_t)n - off, MSG_NOSIGNAL);
        if (w <= 0) {
            snprintf(why, why_cap, "send: %s", strerror(errno));
            free(req);
            close(fd);
            return 0;
        }
        off += (size_t)w;
    }
    free(req);
    size_t len = 0, cap = 0;
    char *buf = NULL;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            size_t nc = cap ? cap * 2 : 16384;
            char *nb = gs_realloc(buf, nc);
            if (!nb)
                break;
            buf = nb;
            cap = nc;
        }
        ssize_t r = recv(fd, buf + len, cap - len - 1, 0);
        if (r <= 0) {
            if (r < 0)
                snprintf(why, why_cap, "recv: %s", strerror(errno));
            break;
        }
        len += (size_t)r;
    }
    close(fd);
    if (!buf)
        return 0;
    buf[len] = '\0';
    int status = 0;
    if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1)
        status = 0;
    char *b = strstr(buf, "\r\n\r\n");
    if (b) {
        memmove(buf, b + 4, strlen(b + 4) + 1);
        *resp = buf;
    } else {
        gs_free(buf);
        if (!why[0])
            snprintf(why, why_cap, "no HTTP answer");
        return 0;
    }
    return status;
}

static double fig(const json_t *v, const char *k)
{
    json_t *x = json_object_get(v, k);
    return json_is_number(x) ? json_number_value(x) : -1;
}

/* Runs one prompt; prints its line; returns whether it passed. */
/* What the first answer said about the daemon: its system_fingerprint and the KV cache
 * types its validation compared ("q8_0 against the reference's f32"); "" until known. */
struct vs_first {
    char fingerprint[64];
    char kv[96];
};

static bool run_one(const struct vs_opts *o, const char *prompt, struct vs_first *first)
{
    json_t *req = json_pack("{s:s,s:I,s:f,s:b}", "prompt", prompt, "max_tokens",
                            (json_int_t)o->max_tokens, "temperature", 0.0, "validation", 1);
    char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    char *resp = NULL, why[512] = "";
    int status = body ? http_post(o, "/v1/completions", body, &resp, why, sizeof(why)) : 0;
    free(body);
    json_t *j = resp ? json_loads(resp, 0, NULL) : NULL;
    json_t *v = json_object_get(j, "validation");
    bool passed = status == 200 && json_is_true(json_object_get(v, "passed"));
    const char *f = json_string_value(json_object_get(j, "system_fingerprint"));
    if (f && first->fingerprint[0] == '\0')
        snprintf(first->fingerprint, sizeof(first->fingerprint), "%s", f);
    const char *kv = json_string_value(json_object_get(v, "kv_type"));
    const char *ref_kv = json_string_value(json_object_get(v, "reference_kv_type"));
    if (kv && ref_kv && first->kv[0] == '\0')
        snprintf(first->kv, sizeof(first->kv), ", kv_type %s against the reference's %s", kv,
                 ref_kv);
    if (o->json) {
        json_t *line =
            json_pack("{s:s,s:i,s:b,s:O?,s:O?}", "prompt", prompt, "http_status", status, "passed",
                      passed, "validation", v, "graphserve", json_object_get(j, "graphserve"));
        char *s = line ? json_dumps(line, JSON_COMPACT) : NULL;
        printf("%s\n", s ? s : "{}");
        free(s);
        json_decref(line);
    } else if (status != 200 || !json_is_object(v)) {
        const char *msg =
            json_string_value(json_object_get(json_object_get(j, "error"), "message"));
        printf("ERROR  status=%d %s  prompt=\"%.40s\"\n", status, msg ? msg : why, prompt);
    } else {
        json_t *fd = json_object_get(v, "first_divergence");
        char div[32] = "none";
        if (json_is_integer(fd))
            snprintf(div, sizeof(div), "%lld", (long long)json_integer_value(fd));
        const char *reason = json_string_value(json_object_get(v, "reason"));
        printf("%s  positions=%d top1_rate=%.4f topk_overlap=%.4f min_pearson=%.6f "
               "max_abs_err=%.3g mean_kl=%.3g first_divergence=%s  prompt=\"%.40s\"\n",
               passed ? "PASS " : "FAIL ", (int)fig(v, "n_positions"), fig(v, "top1_rate"),
               fig(v, "mean_topk_overlap"), fig(v, "min_pearson"), fig(v, "max_abs_err"),
               fig(v, "mean_kl"), div, prompt);
        if (!passed)
            printf("       reason: %s\n", reason ? reason : "?");
    }
    json_decref(j);
    gs_free(resp);
    return passed;
}

int gs_validate_server(const struct gs_validate_server_opts *in)
{
    struct vs_opts o = {.api_key = in->api_key, .max_tokens = in->max_tokens,
                        .timeout_s = in->timeout_s, .json = in->json};
    if (!parse_url(in->server, &o)) {
        gs_cli_fail("validate", "--server: expected http://HOST[:PORT], got '%s'", in->server);
        return 2;
    }
    size_t cap = in->prompts->n + 1024 + GS_ARRAY_LEN(builtin);
    const char **v = gs_alloc_array(cap, sizeof(*v));
    if (!v)
        return gs_cli_fail("validate", "out of memory");
    o.prompts = v;
    int rc = -1;
    for (size_t i = 0; i < in->prompts->n; i++)
        v[o.n_prompts++] = in->prompts->v[i];
    if (in->prompts_file && !add_prompts_file(&o, in->prompts_file, v, cap))
        rc = gs_cli_fail("validate", "--prompts-file %s: %s", in->prompts_file, strerror(errno));
    if (rc < 0) {
        if (!o.n_prompts)
            for (size_t i = 0; i < GS_ARRAY_LEN(builtin); i++)
                v[o.n_prompts++] = builtin[i];
        size_t n_pass = 0;
        struct vs_first first = {0};
        for (size_t i = 0; i < o.n_prompts; i++)
            n_pass += run_one(&o, v[i], &first);
        if (!o.json)
            printf("%zu/%zu passed against ref on %s:%s (system_fingerprint %s%s)\n", n_pass,
                   o.n_prompts, o.host, o.port, first.fingerprint[0] ? first.fingerprint : "?",
                   first.kv);
        rc = n_pass == o.n_prompts ? 0 : 1;
    }
    gs_free(o.file_text);
    gs_free(v);
    return rc;
}
