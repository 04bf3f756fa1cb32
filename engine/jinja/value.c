/*
 * engine/jinja/value.c - the renderer's arena, errors and value model:
 * building values, converting a jansson context, and the Python behaviour that a
 * template's output depends on (str() and repr() of every kind, json.dumps,
 * truth, equality, ordering, iteration, len()).
 */
#include "engine/jinja/internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- arena ------------------------------------------------------------------ */

struct jchunk {
    struct jchunk *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

#define CHUNK_BYTES ((size_t)64 * 1024)

void gs_jinja__arena_init(struct jarena *ar, size_t limit_bytes)
{
    memset(ar, 0, sizeof(*ar));
    ar->limit_bytes = limit_bytes;
}

void gs_jinja__arena_deinit(struct jarena *ar)
{
    struct jchunk *c = ar->head;
    while (c) {
        struct jchunk *next = c->next;
        gs_free(c);
        c = next;
    }
    ar->head = NULL;
    ar->used_bytes = 0;
}

void *gs_jinja__alloc(struct jarena *ar, size_t size)
{
    size = (size + 15) & ~(size_t)15;
    if (size == 0)
        size = 16;
    struct jchunk *c = ar->head;
    if (c && c->size - c->used >= size) {
        void *p = c->data + c->used;
        c->used += size;
        return p;
    }
    /* Large requests get a chunk of their own, so a small one after them does
     * not waste the rest of a fresh chunk. */
    size_t data = size > CHUNK_BYTES / 4 ? size : CHUNK_BYTES;
    if (data > SIZE_MAX - sizeof(*c) - ar->used_bytes)
        return NULL;
    if (ar->limit_bytes && ar->used_bytes + data + sizeof(*c) > ar->limit_bytes) {
        ar->over_limit = true;
        return NULL;
    }
    struct jchunk *n = gs_malloc(sizeof(*n) + data);
    if (!n)
        return NULL;
    n->size = data;
    n->used = size;
    ar->used_bytes += sizeof(*n) + data;
    if (c && data == size && c->size - c->used > CHUNK_BYTES / 8) {
        /* Keep the current chunk in front: it still has room for small ones. */
        n->next = c->next;
        c->next = n;
    } else {
        n->next = c;
        ar->head = n;
    }
    return n->data;
}

void *gs_jinja__alloc_array(struct jarena *ar, size_t n, size_t size)
{
    uint64_t total;
    if (gs_mul_overflow(n, size, &total) || total > SIZE_MAX)
        return NULL;
    void *p = gs_jinja__alloc(ar, (size_t)total);
    if (p)
        memset(p, 0, (size_t)total);
    return p;
}

/* ---- errors ------------------------------------------------------------------- */

int gs_jinja__error(struct jctx *cx, const char *fmt, ...)
{
    if (cx->fail != GS_JINJA_FAIL_NONE)
        return -1; /* keep the first error */
    char msg[GS_ERR_MSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    cx->fail = GS_JINJA_FAIL_ERROR;
    gs_err_set(cx->err, GS_FORMAT, "jinja: line %u: %s", cx->line, msg);
    return -1;
}

int gs_jinja__limit(struct jctx *cx, const char *name, uint64_t value)
{
    if (cx->fail != GS_JINJA_FAIL_NONE)
        return -1;
    cx->fail = GS_JINJA_FAIL_LIMIT;
    gs_err_set(cx->err, GS_BUSY, "jinja: line %u: limit %s (%llu) exceeded", cx->line, name,
               (unsigned long long)value);
    return -1;
}

int gs_jinja__nomem(struct jctx *cx)
{
    if (cx->arena.over_limit)
        return gs_jinja__limit(cx, "max_memory_bytes", cx->lim->max_memory_bytes);
    if (cx->fail != GS_JINJA_FAIL_NONE)
        return -1;
    cx->fail = GS_JINJA_FAIL_NOMEM;
    gs_err_set(cx->err, GS_NOMEM, "jinja: out of memory while rendering");
    return -1;
}

struct jv gs_jinja__undef_msg(struct jctx *cx, const char *fmt, ...)
{
    char msg[GS_ERR_MSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    size_t len = n < 0 ? 0 : GS_MIN((size_t)n, sizeof(msg) - 1);
    char *s = gs_jinja__alloc(&cx->arena, len + 1);
    if (!s) /* the message is only for a later error; a bare undefined still behaves */
        return jv_undef("", 0);
    memcpy(s, msg, len);
    s[len] = '\0';
    struct jv v = jv_undef(s, len);
    v.flags = JV_F_MSG;
    return v;
}

int gs_jinja__undefined_error(struct jctx *cx, struct jv v)
{
    if (v.flags & JV_F_MSG)
        return gs_jinja__error(cx, "%.*s", (int)v.n, v.u.s);
    if (v.n == 0)
        return gs_jinja__error(cx, "an undefined value was used");
    return gs_jinja__error(cx, "'%.*s' is undefined", (int)v.n, v.u.s);
}

/* ---- buffers and strings --------------------------------------------------------- */

static int buf_reserve(struct jctx *cx, struct jbuf *b, size_t more)
{
    if (more > cx->lim->max_output_bytes || b->n > cx->lim->max_output_bytes - more)
        return gs_jinja__limit(cx, "max_output_bytes", cx->lim->max_output_bytes);
    if (b->n + more <= b->cap)
        return 0;
    size_t cap = GS_MAX(GS_MAX(b->cap * 2, b->n + more), (size_t)128);
    cap = GS_MIN(cap, cx->lim->max_output_bytes);
    char *p = gs_jinja__alloc(&cx->arena, cap);
    if (!p)
        return gs_jinja__nomem(cx);
    if (b->n)
        memcpy(p, b->p, b->n);
    b->p = p;
    b->cap = cap;
    return 0;
}

int gs_jinja__buf_put(struct jctx *cx, struct jbuf *b, const char *s, size_t n)
{
    if (n == 0)
        return 0;
    if (buf_reserve(cx, b, n))
        return -1;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

int gs_jinja__buf_putc(struct jctx *cx, struct jbuf *b, char c)
{
    return gs_jinja__buf_put(cx, b, &c, 1);
}

static int buf_puts(struct jctx *cx, struct jbuf *b, const char *s)
{
    return gs_jinja__buf_put(cx, b, s, strlen(s));
}

int gs_jinja__str_new(struct jctx *cx, const char *s, size_t n, struct jv *out)
{
    if (n > cx->lim->max_output_bytes)
        return gs_jinja__limit(cx, "max_output_bytes", cx->lim->max_output_bytes);
    char *p = gs_jinja__alloc(&cx->arena, n + 1);
    if (!p)
        return gs_jinja__nomem(cx);
    if (n)
        memcpy(p, s, n);
    p[n] = '\0';
    *out = jv_str(p, n);
    return 0;
}

int gs_jinja__buf_to_str(struct jctx *cx, const struct jbuf *b, struct jv *out)
{
    /* The bytes are in the arena already and never written again; the spans
     * are copied, since the buffer's array may still grow elsewhere. */
    *out = jv_str(b->n ? b->p : "", b->n);
    if (b->n_sp == 0)
        return 0;
    struct jspans *sp = gs_jinja__alloc(&cx->arena, sizeof(*sp) + b->n_sp * sizeof(sp->v[0]));
    if (!sp)
        return gs_jinja__nomem(cx);
    sp->n = (uint32_t)b->n_sp;
    memcpy(sp->v, b->sp, b->n_sp * sizeof(sp->v[0]));
    out->sp = sp;
    return 0;
}

/* ---- provenance ------------------------------------------------------------------ */

/* Records [off, off+len) of b as context, merging with the span before it. */
static int buf_add_span(struct jctx *cx, struct jbuf *b, size_t off, size_t len)
{
    if (len == 0)
        return 0;
    if (b->n_sp > 0) {
        struct jspan *last = &b->sp[b->n_sp - 1];
        if ((size_t)last->off + last->len >= off) {
            size_t end = GS_MAX((size_t)last->off + last->len, off + len);
            last->len = (uint32_t)(end - last->off);
            return 0;
        }
    }
    if (b->n_sp == b->cap_sp) {
        size_t cap = b->cap_sp ? b->cap_sp * 2 : 8;
        struct jspan *v = gs_jinja__alloc_array(&cx->arena, cap, sizeof(*v));
        if (!v)
            return gs_jinja__nomem(cx);
        if (b->n_sp)
            memcpy(v, b->sp, b->n_sp * sizeof(*v));
        b->sp = v;
        b->cap_sp = cap;
    }
    b->sp[b->n_sp++] = (struct jspan){.off = (uint32_t)off, .len = (uint32_t)len};
    return 0;
}

int gs_jinja__buf_mark(struct jctx *cx, struct jbuf *b, size_t from)
{
    /* Spans inside the marked range are covered by it. */
    while (b->n_sp > 0 && b->sp[b->n_sp - 1].off >= from)
        b->n_sp--;
    return from < b->n ? buf_add_span(cx, b, from, b->n - from) : 0;
}

int gs_jinja__buf_put_part(struct jctx *cx, struct jbuf *b, struct jv s, size_t from, size_t n)
{
    size_t at = b->n;
    if (gs_jinja__buf_put(cx, b, s.u.s + from, n))
        return -1;
    for (uint32_t i = 0; s.sp && i < s.sp->n; i++) {
        size_t lo = GS_MAX((size_t)s.sp->v[i].off, from);
        size_t hi = GS_MIN((size_t)s.sp->v[i].off + s.sp->v[i].len, from + n);
        if (lo < hi && buf_add_span(cx, b, at + lo - from, hi - lo))
            return -1;
    }
    return 0;
}

int gs_jinja__buf_put_str(struct jctx *cx, struct jbuf *b, struct jv s)
{
    return gs_jinja__buf_put_part(cx, b, s, 0, s.n);
}

int gs_jinja__view(struct jctx *cx, struct jv whole, const char *p, size_t n, struct jv *out)
{
    size_t from = (size_t)(p - whole.u.s);
    *out = jv_str(p, n);
    if (!whole.sp)
        return 0;
    uint32_t count = 0;
    for (uint32_t i = 0; i < whole.sp->n; i++)
        count += GS_MAX((size_t)whole.sp->v[i].off, from) <
                 GS_MIN((size_t)whole.sp->v[i].off + whole.sp->v[i].len, from + n);
    if (count == 0)
        return 0;
    struct jspans *sp = gs_jinja__alloc(&cx->arena, sizeof(*sp) + count * sizeof(sp->v[0]));
    if (!sp)
        return gs_jinja__nomem(cx);
    sp->n = 0;
    for (uint32_t i = 0; i < whole.sp->n; i++) {
        size_t lo = GS_MAX((size_t)whole.sp->v[i].off, from);
        size_t hi = GS_MIN((size_t)whole.sp->v[i].off + whole.sp->v[i].len, from + n);
        if (lo < hi)
            sp->v[sp->n++] =
                (struct jspan){.off = (uint32_t)(lo - from), .len = (uint32_t)(hi - lo)};
    }
    out->sp = sp;
    return 0;
}

static int mark_all(struct jctx *cx, struct jv *s)
{
    if (s->kind != JV_STR || s->n == 0)
        return 0;
    struct jspans *sp = gs_jinja__alloc(&cx->arena, sizeof(*sp) + sizeof(sp->v[0]));
    if (!sp)
        return gs_jinja__nomem(cx);
    sp->n = 1;
    sp->v[0] = (struct jspan){.off = 0, .len = s->n};
    s->sp = sp;
    return 0;
}

int gs_jinja__taint(struct jctx *cx, struct jv from, struct jv *s)
{
    return gs_jinja__has_context(from) ? mark_all(cx, s) : 0;
}

bool gs_jinja__has_context(struct jv v)
{
    switch ((enum jv_kind)v.kind) {
    case JV_STR:
        return v.sp != NULL;
    case JV_LIST:
        for (size_t i = 0; i < v.u.list->n; i++)
            if (gs_jinja__has_context(v.u.list->items[i]))
                return true;
        return false;
    case JV_DICT:
    case JV_NS:
        for (size_t i = 0; i < v.u.dict->n; i++)
            if (gs_jinja__has_context(v.u.dict->keys[i]) ||
                gs_jinja__has_context(v.u.dict->vals[i]))
                return true;
        return false;
    default:
        return false;
    }
}

/* ---- lists and dicts ---------------------------------------------------------------- */

int gs_jinja__list_new(struct jctx *cx, size_t n, struct jv *out)
{
    struct jlist *l = gs_jinja__alloc(&cx->arena, sizeof(*l));
    struct jv *items = n ? gs_jinja__alloc_array(&cx->arena, n, sizeof(*items)) : NULL;
    if (!l || (n && !items))
        return gs_jinja__nomem(cx);
    l->items = items;
    l->n = n;
    *out = (struct jv){.kind = JV_LIST, .u.list = l};
    return 0;
}

int gs_jinja__dict_new(struct jctx *cx, size_t cap, struct jv *out)
{
    struct jdict *d = gs_jinja__alloc(&cx->arena, sizeof(*d));
    if (!d)
        return gs_jinja__nomem(cx);
    memset(d, 0, sizeof(*d));
    if (cap) {
        d->keys = gs_jinja__alloc_array(&cx->arena, cap, sizeof(*d->keys));
        d->vals = gs_jinja__alloc_array(&cx->arena, cap, sizeof(*d->vals));
        if (!d->keys || !d->vals)
            return gs_jinja__nomem(cx);
        d->cap = cap;
    }
    *out = (struct jv){.kind = JV_DICT, .u.dict = d};
    return 0;
}

static ssize_t dict_find(const struct jdict *d, struct jv key)
{
    for (size_t i = 0; i < d->n; i++)
        if (gs_jinja__equal(d->keys[i], key))
            return (ssize_t)i;
    return -1;
}

int gs_jinja__dict_set(struct jctx *cx, struct jdict *d, struct jv key, struct jv val)
{
    ssize_t at = dict_find(d, key);
    if (at >= 0) {
        d->vals[at] = val;
        return 0;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        struct jv *k = gs_jinja__alloc_array(&cx->arena, cap, sizeof(*k));
        struct jv *v = gs_jinja__alloc_array(&cx->arena, cap, sizeof(*v));
        if (!k || !v)
            return gs_jinja__nomem(cx);
        if (d->n) {
            memcpy(k, d->keys, d->n * sizeof(*k));
            memcpy(v, d->vals, d->n * sizeof(*v));
        }
        d->keys = k;
        d->vals = v;
        d->cap = cap;
    }
    d->keys[d->n] = key;
    d->vals[d->n] = val;
    d->n++;
    return 0;
}

bool gs_jinja__dict_get(const struct jdict *d, struct jv key, struct jv *out)
{
    ssize_t at = dict_find(d, key);
    if (at < 0)
        return false;
    *out = d->vals[at];
    return true;
}

bool gs_jinja__dict_get_str(const struct jdict *d, const char *key, size_t n, struct jv *out)
{
    return gs_jinja__dict_get(d, jv_str(key, n), out);
}

/* ---- the context --------------------------------------------------------------------- */

int gs_jinja__from_json(struct jctx *cx, const json_t *j, bool track, struct jv *out)
{
    switch (json_typeof(j)) {
    case JSON_NULL:
        *out = jv_none();
        return 0;
    case JSON_TRUE:
        *out = jv_bool(true);
        return 0;
    case JSON_FALSE:
        *out = jv_bool(false);
        return 0;
    case JSON_INTEGER:
        *out = jv_int((int64_t)json_integer_value(j));
        return 0;
    case JSON_REAL:
        *out = jv_float(json_real_value(j));
        return 0;
    case JSON_STRING:
        return gs_jinja__str_new(cx, json_string_value(j), json_string_length(j), out) ||
               (track && mark_all(cx, out));
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        if (gs_jinja__list_new(cx, n, out))
            return -1;
        for (size_t i = 0; i < n; i++)
            if (gs_jinja__from_json(cx, json_array_get(j, i), track, &out->u.list->items[i]))
                return -1;
        return 0;
    }
    case JSON_OBJECT: {
        if (gs_jinja__dict_new(cx, json_object_size(j), out))
            return -1;
        const char *key;
        json_t *val;
        /* jansson iterates in insertion order, which tojson must keep. */
        json_object_foreach((json_t *)j, key, val)
        {
            struct jv k, v;
            if (gs_jinja__str_new(cx, key, strlen(key), &k) || (track && mark_all(cx, &k)) ||
                gs_jinja__from_json(cx, val, track, &v) ||
                gs_jinja__dict_set(cx, out->u.dict, k, v))
                return -1;
        }
        return 0;
    }
    }
    return gs_jinja__error(cx, "unknown JSON type in the context");
}

/* ---- Python's str() and repr() -------------------------------------------------------- */

/* Python's repr(float): the shortest digits that read back the same, in
 * fixed notation from 1e-4 up to 1e16 and scientific outside. */
static int put_float(struct jctx *cx, struct jbuf *b, double f, bool json)
{
    if (isnan(f))
        return buf_puts(cx, b, json ? "NaN" : "nan");
    if (isinf(f))
        return buf_puts(cx, b, f > 0 ? (json ? "Infinity" : "inf") : (json ? "-Infinity" : "-inf"));
    char e[40];
    for (int prec = 0; prec < 17; prec++) {
        snprintf(e, sizeof(e), "%.*e", prec, f);
        if (strtod(e, NULL) == f)
            break;
    }
    /* e is [-]d[.ddd]e[+-]XX: split into sign, digits and exponent. */
    char digits[24];
    size_t nd = 0;
    const char *p = e;
    bool neg = *p == '-';
    if (neg)
        p++;
    for (; *p && *p != 'e'; p++)
        if (*p != '.')
            digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    char out[64];
    size_t k = 0;
    if (neg)
        out[k++] = '-';
    if (exp >= -5 && exp < 16) {
        if (exp < 0) {
            out[k++] = '0';
            out[k++] = '.';
            for (int z = 0; z < -exp - 1; z++)
                out[k++] = '0';
            memcpy(out + k, digits, nd);
            k += nd;
        } else {
            for (int i = 0; i <= exp; i++)
                out[k++] = (size_t)i < nd ? digits[i] : '0';
            out[k++] = '.';
            if ((size_t)exp + 1 < nd) {
                memcpy(out + k, digits + exp + 1, nd - (size_t)exp - 1);
                k += nd - (size_t)exp - 1;
            } else {
                out[k++] = '0';
            }
        }
    } else {
        out[k++] = digits[0];
        if (nd > 1) {
            out[k++] = '.';
            memcpy(out + k, digits + 1, nd - 1);
            k += nd - 1;
        }
        k += (size_t)snprintf(out + k, sizeof(out) - k, "e%c%02d", exp < 0 ? '-' : '+',
                              exp < 0 ? -exp : exp);
    }
    return gs_jinja__buf_put(cx, b, out, k);
}

/* Decodes one UTF-8 code point at s (n bytes left); invalid bytes come back
 * as themselves with length 1. */
uint32_t gs_jinja__utf8_next(const unsigned char *s, size_t n, size_t *len)
{
    unsigned char c = s[0];
    int want = c < 0x80             ? 0
               : (c & 0xE0) == 0xC0 ? 1
               : (c & 0xF0) == 0xE0 ? 2
               : (c & 0xF8) == 0xF0 ? 3
                                    : -1;
    if (want <= 0 || (size_t)want >= n) {
        *len = 1;
        return c;
    }
    uint32_t cp = c & (0x3F >> want);
    for (int i = 1; i <= want; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            *len = 1;
            return c;
        }
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    *len = (size_t)want + 1;
    return cp;
}

/* Code points Python's str.isprintable() rejects, beyond the controls: the
 * common separators and format characters (an approximation of Unicode's
 * Z and C categories, which repr() escapes). */
static bool unprintable(uint32_t cp)
{
    static const uint32_t ranges[][2] = {
        {0x00, 0x1F},     {0x7F, 0xA0},       {0xAD, 0xAD},       {0x600, 0x605},
        {0x61C, 0x61C},   {0x6DD, 0x6DD},     {0x70F, 0x70F},     {0x1680, 0x1680},
        {0x180E, 0x180E}, {0x2000, 0x200F},   {0x2028, 0x202F},   {0x205F, 0x2064},
        {0x2066, 0x206F}, {0x3000, 0x3000},   {0xD800, 0xDFFF},   {0xFEFF, 0xFEFF},
        {0xFFF9, 0xFFFB}, {0xE0001, 0xE0001}, {0xE0020, 0xE007F},
    };
    for (size_t i = 0; i < GS_ARRAY_LEN(ranges); i++)
        if (cp >= ranges[i][0] && cp <= ranges[i][1])
            return true;
    return false;
}

static int repr_str(struct jctx *cx, struct jbuf *b, const char *s, size_t n)
{
    bool has_single = memchr(s, '\'', n) != NULL, has_double = memchr(s, '"', n) != NULL;
    char quote = has_single && !has_double ? '"' : '\'';
    if (gs_jinja__buf_putc(cx, b, quote))
        return -1;
    for (size_t i = 0; i < n;) {
        size_t len;
        uint32_t cp = gs_jinja__utf8_next((const unsigned char *)s + i, n - i, &len);
        char esc[16];
        const char *put = esc;
        size_t put_n = 0;
        if (cp == (uint32_t)quote || cp == '\\') {
            esc[0] = '\\';
            esc[1] = (char)cp;
            put_n = 2;
        } else if (cp == '\n' || cp == '\r' || cp == '\t') {
            esc[0] = '\\';
            esc[1] = cp == '\n' ? 'n' : cp == '\r' ? 'r' : 't';
            put_n = 2;
        } else if (cp != ' ' && unprintable(cp)) {
            put_n = (size_t)snprintf(esc, sizeof(esc),
                                     cp < 0x100     ? "\\x%02x"
                                     : cp < 0x10000 ? "\\u%04x"
                                                    : "\\U%08x",
                                     cp);
        } else {
            put = s + i;
            put_n = len;
        }
        if (gs_jinja__buf_put(cx, b, put, put_n))
            return -1;
        i += len;
    }
    return gs_jinja__buf_putc(cx, b, quote);
}

static int repr_seq(struct jctx *cx, struct jbuf *b, const struct jlist *l, bool tuple)
{
    if (gs_jinja__buf_putc(cx, b, tuple ? '(' : '['))
        return -1;
    for (size_t i = 0; i < l->n; i++) {
        if ((i && buf_puts(cx, b, ", ")) || gs_jinja__repr(cx, b, l->items[i]))
            return -1;
    }
    if (tuple && l->n == 1 && gs_jinja__buf_putc(cx, b, ','))
        return -1;
    return gs_jinja__buf_putc(cx, b, tuple ? ')' : ']');
}

static int repr_dict(struct jctx *cx, struct jbuf *b, const struct jdict *d)
{
    if (gs_jinja__buf_putc(cx, b, '{'))
        return -1;
    for (size_t i = 0; i < d->n; i++) {
        if ((i && buf_puts(cx, b, ", ")) || gs_jinja__repr(cx, b, d->keys[i]) ||
            buf_puts(cx, b, ": ") || gs_jinja__repr(cx, b, d->vals[i]))
            return -1;
    }
    return gs_jinja__buf_putc(cx, b, '}');
}

int gs_jinja__repr(struct jctx *cx, struct jbuf *b, struct jv v)
{
    if (v.kind == JV_STR)
        return repr_str(cx, b, v.u.s, v.n);
    return gs_jinja__print(cx, b, v);
}

static int print_value(struct jctx *cx, struct jbuf *b, struct jv v)
{
    char num[32];
    switch ((enum jv_kind)v.kind) {
    case JV_UNDEF:
        return 0;
    case JV_NONE:
        return buf_puts(cx, b, "None");
    case JV_BOOL:
        return buf_puts(cx, b, v.u.b ? "True" : "False");
    case JV_INT:
        snprintf(num, sizeof(num), "%lld", (long long)v.u.i);
        return buf_puts(cx, b, num);
    case JV_FLOAT:
        return put_float(cx, b, v.u.f, false);
    case JV_STR:
        return gs_jinja__buf_put_str(cx, b, v);
    case JV_LIST:
        if (v.flags & JV_F_GEN)
            return buf_puts(cx, b, "<generator object>");
        return repr_seq(cx, b, v.u.list, v.flags & JV_F_TUPLE);
    case JV_DICT:
        return repr_dict(cx, b, v.u.dict);
    case JV_NS:
        return buf_puts(cx, b, "<Namespace ") || repr_dict(cx, b, v.u.dict) ||
               gs_jinja__buf_putc(cx, b, '>');
    case JV_MACRO:
        return buf_puts(cx, b, "<Macro>");
    case JV_FUNC:
    case JV_METHOD:
        return buf_puts(cx, b, "<function>");
    case JV_LOOP:
        return buf_puts(cx, b, "<LoopContext>");
    }
    return 0;
}

int gs_jinja__print(struct jctx *cx, struct jbuf *b, struct jv v)
{
    /* A printed container holding context strings is context as a whole:
     * its repr quotes and escapes them, so bytes cannot be traced. */
    size_t at = b->n;
    if (print_value(cx, b, v))
        return -1;
    if (v.kind != JV_STR && gs_jinja__has_context(v))
        return gs_jinja__buf_mark(cx, b, at);
    return 0;
}

int gs_jinja__to_str(struct jctx *cx, struct jv v, struct jv *out)
{
    if (v.kind == JV_STR) {
        *out = v;
        return 0;
    }
    struct jbuf b = {0};
    if (gs_jinja__print(cx, &b, v))
        return -1;
    return gs_jinja__buf_to_str(cx, &b, out);
}

/* ---- json.dumps -------------------------------------------------------------------------- */

/* A \uXXXX escape, as json.dumps writes one (lower-case hex). */
static int json_u_escape(struct jctx *cx, struct jbuf *b, uint32_t unit)
{
    char esc[8];
    int k = snprintf(esc, sizeof(esc), "\\u%04x", unit);
    return gs_jinja__buf_put(cx, b, esc, (size_t)k);
}

/* ensure_ascii: a code point past ASCII as \uXXXX, astral ones as a surrogate pair. */
static int json_ascii_cp(struct jctx *cx, struct jbuf *b, uint32_t cp)
{
    if (cp < 0x10000)
        return json_u_escape(cx, b, cp);
    cp -= 0x10000;
    return json_u_escape(cx, b, 0xD800 + (cp >> 10)) || json_u_escape(cx, b, 0xDC00 + (cp & 0x3FF));
}

/* The letter of json.dumps's two-character escape for c ("\\n"), or 0. */
static char json_short_escape(unsigned char c)
{
    static const char table[][2] = {
        {'"', '"'}, {'\\', '\\'}, {'\n', 'n'}, {'\r', 'r'}, {'\t', 't'}, {'\b', 'b'}, {'\f', 'f'},
    };
    for (size_t i = 0; i < GS_ARRAY_LEN(table); i++)
        if ((unsigned char)table[i][0] == c)
            return table[i][1];
    return 0;
}

static int json_str(struct jctx *cx, struct jbuf *b, const char *s, size_t n, bool ascii)
{
    if (gs_jinja__buf_putc(cx, b, '"'))
        return -1;
    size_t run = 0; /* bytes copied as they are, flushed before each escape */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x80 && ascii) {
            size_t len;
            uint32_t cp = gs_jinja__utf8_next((const unsigned char *)s + i, n - i, &len);
            if (gs_jinja__buf_put(cx, b, s + run, i - run) || json_ascii_cp(cx, b, cp))
                return -1;
            i += len - 1;
            run = i + 1;
            continue;
        }
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        char esc[2] = {'\\', json_short_escape(c)};
        size_t k = esc[1] ? 2 : 0;
        if (gs_jinja__buf_put(cx, b, s + run, i - run) ||
            (k ? gs_jinja__buf_put(cx, b, esc, k) : json_u_escape(cx, b, c)))
            return -1;
        run = i + 1;
    }
    return gs_jinja__buf_put(cx, b, s + run, n - run) || gs_jinja__buf_putc(cx, b, '"');
}

static int json_newline(struct jctx *cx, struct jbuf *b, int indent, int level)
{
    if (gs_jinja__buf_putc(cx, b, '\n'))
        return -1;
    for (int i = 0; i < indent * level; i++)
        if (gs_jinja__buf_putc(cx, b, ' '))
            return -1;
    return 0;
}

/* A dict key as json.dumps writes it: strings as they are, numbers, bools and
 * None converted to their JSON text. */
static int json_key(struct jctx *cx, struct jbuf *b, struct jv k, const struct jjson *o)
{
    if (k.kind == JV_STR)
        return json_str(cx, b, k.u.s, k.n, o->ensure_ascii);
    struct jbuf t = {0};
    if (k.kind == JV_BOOL || k.kind == JV_NONE)
        t.p = (char *)(k.kind == JV_NONE ? "null" : k.u.b ? "true" : "false"), t.n = strlen(t.p);
    else if (k.kind == JV_INT || k.kind == JV_FLOAT) {
        struct jjson plain = {.indent = -1};
        if (gs_jinja__tojson(cx, &t, k, &plain, 0))
            return -1;
    } else
        return gs_jinja__error(cx, "keys must be str, int, float, bool or None, not %s",
                               gs_jinja__type_name(k));
    return json_str(cx, b, t.p, t.n, false);
}

static int cmp_keys(const void *a, const void *b)
{
    const struct jv *x = *(const struct jv *const *)a, *y = *(const struct jv *const *)b;
    size_t n = GS_MIN(x->n, y->n);
    int c = memcmp(x->u.s, y->u.s, n);
    return c ? c : (x->n > y->n) - (x->n < y->n);
}

/* The separators json.dumps uses: its argument, else "," once indenting. */
static const char *item_sep(const struct jjson *o, size_t *n)
{
    if (o->item_sep) {
        *n = o->item_sep_n;
        return o->item_sep;
    }
    *n = o->indent >= 0 ? 1 : 2;
    return ", ";
}

static int put_key_sep(struct jctx *cx, struct jbuf *b, const struct jjson *o)
{
    return o->key_sep ? gs_jinja__buf_put(cx, b, o->key_sep, o->key_sep_n) : buf_puts(cx, b, ": ");
}

static int json_dict(struct jctx *cx, struct jbuf *b, const struct jdict *d, const struct jjson *o,
                     int level)
{
    if (d->n == 0)
        return buf_puts(cx, b, "{}");
    /* order[i] is the i-th key written: insertion order, or sorted. */
    const struct jv **order = gs_jinja__alloc_array(&cx->arena, d->n, sizeof(*order));
    if (!order)
        return gs_jinja__nomem(cx);
    for (size_t i = 0; i < d->n; i++) {
        order[i] = &d->keys[i];
        if (o->sort_keys && d->keys[i].kind != JV_STR)
            return gs_jinja__error(cx, "sort_keys needs string keys");
    }
    if (o->sort_keys)
        qsort(order, d->n, sizeof(*order), cmp_keys);
    if (gs_jinja__buf_putc(cx, b, '{'))
        return -1;
    for (size_t i = 0; i < d->n; i++) {
        size_t at = (size_t)(order[i] - d->keys), sep_n;
        const char *sep = item_sep(o, &sep_n);
        if (i && gs_jinja__buf_put(cx, b, sep, sep_n))
            return -1;
        if (o->indent >= 0 && json_newline(cx, b, o->indent, level + 1))
            return -1;
        if (json_key(cx, b, d->keys[at], o) || put_key_sep(cx, b, o) ||
            gs_jinja__tojson(cx, b, d->vals[at], o, level + 1))
            return -1;
    }
    if (o->indent >= 0 && json_newline(cx, b, o->indent, level))
        return -1;
    return gs_jinja__buf_putc(cx, b, '}');
}

static int json_list(struct jctx *cx, struct jbuf *b, const struct jlist *l, const struct jjson *o,
                     int level)
{
    if (l->n == 0)
        return buf_puts(cx, b, "[]");
    if (gs_jinja__buf_putc(cx, b, '['))
        return -1;
    for (size_t i = 0; i < l->n; i++) {
        size_t sep_n;
        const char *sep = item_sep(o, &sep_n);
        if (i && gs_jinja__buf_put(cx, b, sep, sep_n))
            return -1;
        if (o->indent >= 0 && json_newline(cx, b, o->indent, level + 1))
            return -1;
        if (gs_jinja__tojson(cx, b, l->items[i], o, level + 1))
            return -1;
    }
    if (o->indent >= 0 && json_newline(cx, b, o->indent, level))
        return -1;
    return gs_jinja__buf_putc(cx, b, ']');
}

int gs_jinja__tojson(struct jctx *cx, struct jbuf *b, struct jv v, const struct jjson *o, int level)
{
    char num[32];
    switch ((enum jv_kind)v.kind) {
    case JV_NONE:
        return buf_puts(cx, b, "null");
    case JV_BOOL:
        return buf_puts(cx, b, v.u.b ? "true" : "false");
    case JV_INT:
        snprintf(num, sizeof(num), "%lld", (long long)v.u.i);
        return buf_puts(cx, b, num);
    case JV_FLOAT:
        return put_float(cx, b, v.u.f, true);
    case JV_STR:
        return json_str(cx, b, v.u.s, v.n, o->ensure_ascii);
    case JV_LIST:
        if (v.flags & JV_F_GEN)
            break;
        return json_list(cx, b, v.u.list, o, level);
    case JV_DICT:
        return json_dict(cx, b, v.u.dict, o, level);
    default:
        break;
    }
    return gs_jinja__error(cx, "Object of type %s is not JSON serializable",
                           gs_jinja__type_name(v));
}

/* ---- truth, equality, order ---------------------------------------------------------------- */

bool gs_jinja__truthy(struct jv v)
{
    switch ((enum jv_kind)v.kind) {
    case JV_UNDEF:
    case JV_NONE:
        return false;
    case JV_BOOL:
        return v.u.b;
    case JV_INT:
        return v.u.i != 0;
    case JV_FLOAT:
        return v.u.f != 0.0;
    case JV_STR:
        return v.n != 0;
    case JV_LIST:
        return (v.flags & JV_F_GEN) || v.u.list->n != 0;
    case JV_DICT:
        return v.u.dict->n != 0;
    default:
        return true;
    }
}

bool gs_jinja__is_number(struct jv v)
{
    return v.kind == JV_INT || v.kind == JV_FLOAT || v.kind == JV_BOOL;
}

double gs_jinja__as_double(struct jv v)
{
    return v.kind == JV_FLOAT ? v.u.f : v.kind == JV_INT ? (double)v.u.i : (double)v.u.b;
}

static bool number_equal(struct jv a, struct jv b)
{
    if (a.kind == JV_FLOAT || b.kind == JV_FLOAT)
        return gs_jinja__as_double(a) == gs_jinja__as_double(b);
    int64_t x = a.kind == JV_INT ? a.u.i : a.u.b, y = b.kind == JV_INT ? b.u.i : b.u.b;
    return x == y;
}

bool gs_jinja__equal(struct jv a, struct jv b)
{
    if (gs_jinja__is_number(a) && gs_jinja__is_number(b))
        return number_equal(a, b);
    if (a.kind != b.kind)
        return false;
    switch ((enum jv_kind)a.kind) {
    case JV_UNDEF:
    case JV_NONE:
        return true;
    case JV_STR:
        return a.n == b.n && memcmp(a.u.s, b.u.s, a.n) == 0;
    case JV_LIST:
        if ((a.flags & JV_F_TUPLE) != (b.flags & JV_F_TUPLE) || (a.flags & JV_F_GEN) ||
            (b.flags & JV_F_GEN))
            return a.u.list == b.u.list;
        if (a.u.list->n != b.u.list->n)
            return false;
        for (size_t i = 0; i < a.u.list->n; i++)
            if (!gs_jinja__equal(a.u.list->items[i], b.u.list->items[i]))
                return false;
        return true;
    case JV_DICT: {
        const struct jdict *x = a.u.dict, *y = b.u.dict;
        if (x->n != y->n)
            return false;
        for (size_t i = 0; i < x->n; i++) {
            struct jv other;
            if (!gs_jinja__dict_get(y, x->keys[i], &other) || !gs_jinja__equal(x->vals[i], other))
                return false;
        }
        return true;
    }
    case JV_NS:
        return a.u.dict == b.u.dict;
    case JV_MACRO:
        return a.u.macro == b.u.macro;
    case JV_FUNC:
        return a.u.func == b.u.func;
    default:
        return false;
    }
}

int gs_jinja__compare(struct jctx *cx, struct jv a, struct jv b, int *cmp)
{
    if (gs_jinja__is_number(a) && gs_jinja__is_number(b)) {
        if (a.kind != JV_FLOAT && b.kind != JV_FLOAT) {
            int64_t x = a.kind == JV_INT ? a.u.i : a.u.b, y = b.kind == JV_INT ? b.u.i : b.u.b;
            *cmp = (x > y) - (x < y);
        } else {
            double x = gs_jinja__as_double(a), y = gs_jinja__as_double(b);
            *cmp = (x > y) - (x < y);
        }
        return 0;
    }
    if (a.kind == JV_STR && b.kind == JV_STR) {
        int c = memcmp(a.u.s, b.u.s, GS_MIN(a.n, b.n));
        *cmp = c ? (c > 0) - (c < 0) : (a.n > b.n) - (a.n < b.n);
        return 0;
    }
    if (a.kind == JV_LIST && b.kind == JV_LIST && !((a.flags | b.flags) & JV_F_GEN)) {
        const struct jlist *x = a.u.list, *y = b.u.list;
        for (size_t i = 0; i < x->n && i < y->n; i++) {
            if (gs_jinja__equal(x->items[i], y->items[i]))
                continue;
            return gs_jinja__compare(cx, x->items[i], y->items[i], cmp);
        }
        *cmp = (x->n > y->n) - (x->n < y->n);
        return 0;
    }
    if (a.kind == JV_UNDEF || b.kind == JV_UNDEF)
        return gs_jinja__undefined_error(cx, a.kind == JV_UNDEF ? a : b);
    return gs_jinja__error(cx, "comparison not supported between instances of '%s' and '%s'",
                           gs_jinja__type_name(a), gs_jinja__type_name(b));
}

const char *gs_jinja__type_name(struct jv v)
{
    switch ((enum jv_kind)v.kind) {
    case JV_UNDEF:
        return "Undefined";
    case JV_NONE:
        return "NoneType";
    case JV_BOOL:
        return "bool";
    case JV_INT:
        return "int";
    case JV_FLOAT:
        return "float";
    case JV_STR:
        return "str";
    case JV_LIST:
        return v.flags & JV_F_GEN ? "generator" : v.flags & JV_F_TUPLE ? "tuple" : "list";
    case JV_DICT:
        return "dict";
    case JV_NS:
        return "Namespace";
    case JV_MACRO:
        return "Macro";
    case JV_FUNC:
        return "function";
    case JV_METHOD:
        return "method";
    case JV_LOOP:
        return "LoopContext";
    }
    return "object";
}

/* ---- iteration and len() --------------------------------------------------------------------- */

static int iterate_str(struct jctx *cx, struct jv s, struct jlist **out)
{
    size_t count = 0, len;
    for (size_t i = 0; i < s.n; i += len) {
        gs_jinja__utf8_next((const unsigned char *)s.u.s + i, s.n - i, &len);
        count++;
    }
    struct jv l;
    if (gs_jinja__list_new(cx, count, &l))
        return -1;
    size_t k = 0;
    for (size_t i = 0; i < s.n; i += len) {
        gs_jinja__utf8_next((const unsigned char *)s.u.s + i, s.n - i, &len);
        if (gs_jinja__view(cx, s, s.u.s + i, len, &l.u.list->items[k++]))
            return -1;
    }
    *out = l.u.list;
    return 0;
}

int gs_jinja__iterate(struct jctx *cx, struct jv v, struct jlist **out)
{
    static struct jlist empty;
    switch ((enum jv_kind)v.kind) {
    case JV_UNDEF:
        *out = &empty;
        return 0;
    case JV_LIST:
        *out = v.u.list;
        return 0;
    case JV_DICT:
    case JV_NS: {
        struct jv l;
        if (gs_jinja__list_new(cx, v.u.dict->n, &l))
            return -1;
        if (v.u.dict->n)
            memcpy(l.u.list->items, v.u.dict->keys, v.u.dict->n * sizeof(struct jv));
        *out = l.u.list;
        return 0;
    }
    case JV_STR:
        return iterate_str(cx, v, out);
    default:
        return gs_jinja__error(cx, "'%s' object is not iterable", gs_jinja__type_name(v));
    }
}

size_t gs_jinja__utf8_count(const char *s, size_t n)
{
    size_t count = 0;
    for (size_t i = 0; i < n; i++)
        count += ((unsigned char)s[i] & 0xC0) != 0x80;
    return count;
}

int gs_jinja__length(struct jctx *cx, struct jv v, int64_t *out)
{
    switch ((enum jv_kind)v.kind) {
    case JV_UNDEF:
        *out = 0;
        return 0;
    case JV_STR:
        *out = (int64_t)gs_jinja__utf8_count(v.u.s, v.n);
        return 0;
    case JV_LIST:
        if (v.flags & JV_F_GEN)
            break;
        *out = (int64_t)v.u.list->n;
        return 0;
    case JV_DICT:
        *out = (int64_t)v.u.dict->n;
        return 0;
    default:
        break;
    }
    return gs_jinja__error(cx, "object of type '%s' has no len()", gs_jinja__type_name(v));
}
