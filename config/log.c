/*
 * config/log.c - the structured logger (see config/log.h).
 */
#include "config/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

static atomic_int g_level = GS_LOG_INFO;
static atomic_int g_format = GS_LOG_LOGFMT;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *g_stream; /* NULL: stderr; guarded by g_lock */

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void gs_log_configure(enum gs_log_level min, enum gs_log_format format)
{
    atomic_store(&g_level, (int)min);
    atomic_store(&g_format, (int)format);
}

void gs_log_set_stream(FILE *f)
{
    pthread_mutex_lock(&g_lock);
    g_stream = f;
    pthread_mutex_unlock(&g_lock);
}

bool gs_log_enabled(enum gs_log_level level)
{
    return (int)level >= atomic_load(&g_level);
}

const char *gs_log_level_name(enum gs_log_level level)
{
    return (unsigned)level < 4 ? level_names[level] : "?";
}

/* ---- the line buffer ------------------------------------------------------- */

/* Room kept at the end for the truncation marker and the newline. */
#define RESERVE 32

struct line {
    char buf[GS_LOG_LINE_MAX];
    size_t n;
    bool full;
    bool json;
};

static void put(struct line *l, const char *s, size_t len)
{
    if (l->full)
        return;
    if (l->n + len > sizeof(l->buf) - RESERVE) {
        len = sizeof(l->buf) - RESERVE - l->n;
        l->full = true;
    }
    memcpy(l->buf + l->n, s, len);
    l->n += len;
}

static void puts_(struct line *l, const char *s)
{
    put(l, s, strlen(s));
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    size_t len = s[0] < 0x80             ? 1
                 : (s[0] & 0xe0) == 0xc0 ? 2
                 : (s[0] & 0xf0) == 0xe0 ? 3
                 : (s[0] & 0xf8) == 0xf0 ? 4
                                         : 0;
    if (!len || len > n || (len == 2 && s[0] < 0xc2) || (len == 4 && s[0] > 0xf4))
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    if (len == 3 && ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0)))
        return 0;
    if (len == 4 && ((s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] >= 0x90)))
        return 0;
    return len;
}

/* Writes s escaped: JSON string contents, or logfmt quoted-string contents.
 * Invalid UTF-8 becomes U+FFFD so that a JSON line always parses. */
static void put_escaped(struct line *l, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        char tmp[8];
        if (c == '"' || c == '\\') {
            tmp[0] = '\\';
            tmp[1] = (char)c;
            put(l, tmp, 2);
        } else if (c == '\n') {
            put(l, "\\n", 2);
        } else if (c == '\r') {
            put(l, "\\r", 2);
        } else if (c == '\t') {
            put(l, "\\t", 2);
        } else if (c < 0x20 || c == 0x7f) {
            snprintf(tmp, sizeof(tmp), "\\u%04x", c);
            put(l, tmp, 6);
        } else if (c >= 0x80) {
            size_t k = utf8_len(p + i, n - i);
            if (!k) {
                put(l, "\xef\xbf\xbd", 3);
                i++;
                continue;
            }
            put(l, s + i, k);
            i += k;
            continue;
        } else {
            put(l, s + i, 1);
        }
        i++;
    }
}

/* logfmt leaves simple values bare and quotes the rest. */
static bool needs_quotes(const char *s, size_t n)
{
    if (!n)
        return true;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= ' ' || c == '=' || c == '"' || c == '\\' || c >= 0x7f)
            return true;
    }
    return false;
}

/* One key=value pair; value is n bytes; numeric values are bare in JSON. */
static void put_pair(struct line *l, const char *key, size_t klen, const char *v, size_t n,
                     bool numeric, bool is_null)
{
    /* A pair that does not fit is left out whole, so a cut line still parses. */
    size_t before = l->n;
    if (l->json) {
        put(l, ",\"", 2);
        put_escaped(l, key, klen);
        put(l, "\":", 2);
        if (is_null) {
            puts_(l, "null");
        } else if (numeric) {
            put(l, v, n);
        } else {
            put(l, "\"", 1);
            put_escaped(l, v, n);
            put(l, "\"", 1);
        }
    } else {
        put(l, " ", 1);
        put(l, key, klen);
        put(l, "=", 1);
        if (needs_quotes(v, n)) {
            put(l, "\"", 1);
            put_escaped(l, v, n);
            put(l, "\"", 1);
        } else {
            put(l, v, n);
        }
    }
    if (l->full)
        l->n = before;
}

/* ---- formatting one value ---------------------------------------------------- */

struct conv {
    char spec[24]; /* "%-08.3lld", NUL-terminated */
    char kind;     /* conversion letter */
    int len;       /* 0 none, 1 hh, 2 h, 3 l, 4 ll, 5 z, 6 j, 7 t, 8 L */
};

/* Parses a conversion at fmt (just after '%'); returns its length or 0. */
static size_t parse_conv(const char *fmt, struct conv *c)
{
    const char *p = fmt;
    while (*p && strchr("-+ #0", *p))
        p++;
    while (*p >= '0' && *p <= '9')
        p++;
    if (*p == '.') {
        p++;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    c->len = 0;
    if (p[0] == 'h' && p[1] == 'h')
        c->len = 1, p += 2;
    else if (p[0] == 'l' && p[1] == 'l')
        c->len = 4, p += 2;
    else if (*p == 'h')
        c->len = 2, p++;
    else if (*p == 'l')
        c->len = 3, p++;
    else if (*p == 'z')
        c->len = 5, p++;
    else if (*p == 'j')
        c->len = 6, p++;
    else if (*p == 't')
        c->len = 7, p++;
    else if (*p == 'L')
        c->len = 8, p++;
    if (!*p || !strchr("diuxXocsfFeEgGp", *p))
        return 0;
    c->kind = *p++;
    size_t n = (size_t)(p - fmt);
    if (n + 2 > sizeof(c->spec))
        return 0;
    c->spec[0] = '%';
    memcpy(c->spec + 1, fmt, n);
    c->spec[n + 1] = 0;
    return n;
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
/* Formats the next argument with one conversion. *is_null when a %s got NULL. */
static int format_arg(char *out, size_t cap, const struct conv *c, va_list *ap, bool *is_null)
{
    *is_null = false;
    switch (c->kind) {
    case 'd':
    case 'i':
        switch (c->len) {
        case 3:
            return snprintf(out, cap, c->spec, va_arg(*ap, long));
        case 4:
            return snprintf(out, cap, c->spec, va_arg(*ap, long long));
        case 5:
            return snprintf(out, cap, c->spec, va_arg(*ap, ssize_t));
        case 6:
            return snprintf(out, cap, c->spec, va_arg(*ap, intmax_t));
        case 7:
            return snprintf(out, cap, c->spec, va_arg(*ap, ptrdiff_t));
        default:
            return snprintf(out, cap, c->spec, va_arg(*ap, int));
        }
    case 'u':
    case 'x':
    case 'X':
    case 'o':
        switch (c->len) {
        case 3:
            return snprintf(out, cap, c->spec, va_arg(*ap, unsigned long));
        case 4:
            return snprintf(out, cap, c->spec, va_arg(*ap, unsigned long long));
        case 5:
            return snprintf(out, cap, c->spec, va_arg(*ap, size_t));
        case 6:
            return snprintf(out, cap, c->spec, va_arg(*ap, uintmax_t));
        case 7:
            return snprintf(out, cap, c->spec, va_arg(*ap, ptrdiff_t));
        default:
            return snprintf(out, cap, c->spec, va_arg(*ap, unsigned int));
        }
    case 'c':
        return snprintf(out, cap, c->spec, va_arg(*ap, int));
    case 's': {
        const char *s = va_arg(*ap, const char *);
        if (!s) {
            *is_null = true;
            out[0] = 0;
            return 0;
        }
        return snprintf(out, cap, c->spec, s);
    }
    case 'p':
        return snprintf(out, cap, c->spec, va_arg(*ap, void *));
    default: /* floating point */
        if (c->len == 8)
            return snprintf(out, cap, c->spec, va_arg(*ap, long double));
        return snprintf(out, cap, c->spec, va_arg(*ap, double));
    }
}
#pragma GCC diagnostic pop

/* A JSON number: what strtod reads whole and is finite ("nan" is not). */
static bool json_number_text(const char *s)
{
    if (!*s)
        return false;
    char *end;
    double d = strtod(s, &end);
    if (*end || d != d || d - d != 0)
        return false;
    /* JSON has no leading '+', no leading zeros, no "0x", no trailing '.'. */
    const char *p = s + (*s == '-');
    if (*p == '+' || !(*p >= '0' && *p <= '9') || strpbrk(s, "xXpP"))
        return false;
    if (p[0] == '0' && p[1] >= '0' && p[1] <= '9')
        return false;
    const char *dot = strchr(s, '.');
    return !dot || (dot[1] >= '0' && dot[1] <= '9');
}

/* Walks fmt's key=value pairs, formatting each value into its own buffer. */
static void put_pairs(struct line *l, const char *fmt, va_list *ap)
{
    const char *p = fmt;
    while (*p) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        const char *key = p;
        while (*p && *p != '=' && *p != ' ')
            p++;
        size_t klen = (size_t)(p - key);
        char val[2048];
        size_t n = 0;
        int n_conv = 0, n_lit = 0;
        bool numeric = false, is_null = false;
        if (*p == '=') {
            p++;
            while (*p && *p != ' ') {
                if (*p == '%' && p[1] == '%') {
                    if (n + 1 < sizeof(val))
                        val[n++] = '%';
                    n_lit++;
                    p += 2;
                    continue;
                }
                struct conv c;
                size_t cl = *p == '%' ? parse_conv(p + 1, &c) : 0;
                if (!cl) {
                    /* A literal byte, or a conversion we cannot read (such as
                     * '*' widths): then the rest of the arguments are unknown,
                     * so stop reading them. */
                    if (*p == '%') {
                        put_pair(l, key, klen, "?", 1, false, false);
                        return;
                    }
                    if (n + 1 < sizeof(val))
                        val[n++] = *p;
                    n_lit++;
                    p++;
                    continue;
                }
                bool nul;
                int w = format_arg(val + n, sizeof(val) - n, &c, ap, &nul);
                if (w > 0)
                    n = n + (size_t)w < sizeof(val) - 1 ? n + (size_t)w : sizeof(val) - 1;
                is_null = nul;
                numeric = strchr("diufFeEgG", c.kind) != NULL;
                n_conv++;
                p += 1 + cl;
            }
        }
        val[n] = 0;
        bool single = n_conv == 1 && n_lit == 0;
        put_pair(l, key, klen, val, n, single && numeric && json_number_text(val),
                 single && is_null);
    }
}

void gs_log(enum gs_log_level level, const char *event, const char *fmt, ...)
{
    if (!gs_log_enabled(level))
        return;
    struct line l;
    l.n = 0;
    l.full = false;
    l.json = atomic_load(&g_format) == GS_LOG_JSON;

    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[80];
    snprintf(when, sizeof(when), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
             (int)(ts.tv_nsec / 1000000) % 1000);
    const char *lv = gs_log_level_name(level);
    if (l.json) {
        puts_(&l, "{\"ts\":\"");
        puts_(&l, when);
        puts_(&l, "\",\"level\":\"");
        puts_(&l, lv);
        puts_(&l, "\"");
        put_pair(&l, "event", 5, event, strlen(event), false, false);
    } else {
        puts_(&l, "ts=");
        puts_(&l, when);
        puts_(&l, " level=");
        puts_(&l, lv);
        put_pair(&l, "event", 5, event, strlen(event), false, false);
    }
    va_list ap;
    va_start(ap, fmt);
    put_pairs(&l, fmt ? fmt : "", &ap);
    va_end(ap);

    /* The reserve always has room for the marker and the end of the line. */
    const char *end = l.json ? (l.full ? ",\"truncated\":true}\n" : "}\n")
                             : (l.full ? " truncated=true\n" : "\n");
    size_t el = strlen(end);
    memcpy(l.buf + l.n, end, el);
    l.n += el;

    pthread_mutex_lock(&g_lock);
    FILE *f = g_stream ? g_stream : stderr;
    fwrite(l.buf, 1, l.n, f);
    fflush(f);
    pthread_mutex_unlock(&g_lock);
}
