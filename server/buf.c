/* server/buf.c - growable byte buffers and small JSON helpers for the daemon. */
#include "server/internal.h"

#include <stdio.h>
#include <string.h>

static bool buf_reserve(struct gs_srv_buf *b, size_t extra)
{
    if (b->failed)
        return false;
    if (b->len + extra + 1 <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) {
        if (cap > SIZE_MAX / 2) {
            b->failed = true;
            return false;
        }
        cap *= 2;
    }
    char *p = b->arena ? gs_srv_arena_realloc(b->arena, b->p, b->cap, cap) : gs_realloc(b->p, cap);
    if (!p) {
        b->failed = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

void gs_srv_buf_add(struct gs_srv_buf *b, const void *data, size_t n)
{
    if (!buf_reserve(b, n))
        return;
    if (n)
        memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void gs_srv_buf_adds(struct gs_srv_buf *b, const char *s)
{
    gs_srv_buf_add(b, s, strlen(s));
}

void gs_srv_buf_addf(struct gs_srv_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char tmp[256];
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = true;
    } else if ((size_t)n < sizeof(tmp)) {
        gs_srv_buf_add(b, tmp, (size_t)n);
    } else if (buf_reserve(b, (size_t)n)) {
        vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap2);
        b->len += (size_t)n;
    }
    va_end(ap2);
}

void gs_srv_buf_consume(struct gs_srv_buf *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
    } else {
        memmove(b->p, b->p + n, b->len - n);
        b->len -= n;
    }
    if (b->p)
        b->p[b->len] = '\0';
}

void gs_srv_buf_free(struct gs_srv_buf *b)
{
    if (!b->arena)
        gs_free(b->p);
    *b = (struct gs_srv_buf){.arena = b->arena};
}

/* Length of the valid UTF-8 character at p[0..n), 0 if there is none. */
static size_t utf8_char_len(const unsigned char *p, size_t n)
{
    unsigned c = p[0];
    size_t need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0)
            lo = 0xA0;
        if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0)
            lo = 0x90;
        if (c == 0xF4)
            hi = 0x8F;
    } else
        return 0;
    if (n < need || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t k = 2; k < need; k++)
        if ((p[k] & 0xC0) != 0x80)
            return 0;
    return need;
}

json_t *gs_srv_json_text(const char *p, size_t n)
{
    struct gs_srv_buf b = {0};
    const unsigned char *u = (const unsigned char *)p;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_char_len(u + i, n - i);
        if (k) {
            gs_srv_buf_add(&b, p + i, k);
            i += k;
        } else {
            gs_srv_buf_add(&b, "\xef\xbf\xbd", 3);
            i++;
        }
    }
    json_t *j = b.failed ? NULL : json_stringn(b.p ? b.p : "", b.len);
    gs_srv_buf_free(&b);
    return j;
}

json_t *gs_srv_json_bytes(const char *p, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        json_array_append_new(a, json_integer((unsigned char)p[i]));
    return a;
}

/* ---- SSE framing ---------------------------------------------------------------------------- */

static int dump_to_buf(const char *text, size_t n, void *data)
{
    struct gs_srv_buf *out = data;
    gs_srv_buf_add(out, text, n);
    return out->failed ? -1 : 0;
}

/* Drops what was added to b since its length was at (unless b has failed, when
 * its state is already what gs_srv_buf_add leaves). */
static void buf_cut_back(struct gs_srv_buf *b, size_t at)
{
    if (!b->failed && b->p) {
        b->len = at;
        b->p[at] = '\0';
    }
}

bool gs_srv_buf_add_json(struct gs_srv_buf *b, const json_t *j, size_t flags)
{
    size_t at = b->len;
    if (j && json_dump_callback(j, dump_to_buf, b, flags) == 0)
        return true;
    buf_cut_back(b, at); /* j cannot be dumped: nothing of it stays */
    return false;
}

bool gs_srv_sse_json(struct gs_srv_buf *out, const json_t *j)
{
    /* Straight into out: no copy of the event on the heap between the two. */
    size_t at = out->len;
    gs_srv_buf_adds(out, "data: ");
    if (!gs_srv_buf_add_json(out, j, JSON_COMPACT)) {
        buf_cut_back(out, at);
        return false;
    }
    gs_srv_buf_adds(out, "\n\n");
    return !out->failed;
}

bool gs_srv_sse_event(struct gs_srv_buf *out, const char *name, const json_t *j)
{
    gs_srv_buf_adds(out, "event: ");
    gs_srv_buf_adds(out, name);
    gs_srv_buf_adds(out, "\n");
    return gs_srv_sse_json(out, j);
}

void gs_srv_sse_done(struct gs_srv_buf *out)
{
    gs_srv_buf_adds(out, "data: [DONE]\n\n");
}

void gs_srv_sse_comment(struct gs_srv_buf *out, const char *text)
{
    gs_srv_buf_adds(out, ": ");
    gs_srv_buf_adds(out, text);
    gs_srv_buf_adds(out, "\n\n");
}
