/*
 * engine/jinja/format.c - Python's printf-style string formatting, for the
 * `%` operator on a string and the `format` filter: conversions s r a d i u
 * f F e E g G x X o c and %%, with the flags - + space 0 #, a width and a
 * precision, and %(key)s against a dict. The result keeps the provenance of
 * its pieces: literal parts are the format string's, a %s of a string is
 * that string's.
 */
#include "engine/jinja/internal.h"

#include <stdio.h>
#include <string.h>

struct spec {
    char flags[8]; /* some of "-+ 0#", NUL-terminated */
    int width;     /* -1: none */
    int prec;      /* -1: none */
    char conv;
};

static int bad_format(struct jctx *cx, const char *why)
{
    return gs_jinja__error(cx, "string formatting: %s", why);
}

/* Reads flags, width, precision and conversion at fmt[*i]; *i moves past them. */
static int read_spec(struct jctx *cx, struct jv fmt, size_t *i, struct spec *sp)
{
    size_t k = 0, at = *i;
    const char *s = fmt.u.s;
    while (at < fmt.n && strchr("-+ 0#", s[at]) && k < sizeof(sp->flags) - 1)
        sp->flags[k++] = s[at++];
    sp->flags[k] = '\0';
    sp->width = sp->prec = -1;
    for (; at < fmt.n && s[at] >= '0' && s[at] <= '9'; at++)
        sp->width = (sp->width < 0 ? 0 : sp->width) * 10 + (s[at] - '0');
    if (at < fmt.n && s[at] == '.') {
        sp->prec = 0;
        for (at++; at < fmt.n && s[at] >= '0' && s[at] <= '9'; at++)
            sp->prec = sp->prec * 10 + (s[at] - '0');
    }
    if (sp->width > 4096 || sp->prec > 4096)
        return bad_format(cx, "width or precision too large");
    if (at >= fmt.n)
        return bad_format(cx, "incomplete format");
    sp->conv = s[at];
    *i = at + 1;
    return 0;
}

/* Appends piece to b, padded with spaces to the width (left-aligned with '-'). */
static int put_padded(struct jctx *cx, struct jbuf *b, const struct spec *sp, struct jv piece)
{
    size_t have = gs_jinja__utf8_count(piece.u.s, piece.n);
    size_t fill = sp->width > 0 && have < (size_t)sp->width ? (size_t)sp->width - have : 0;
    bool left = strchr(sp->flags, '-') != NULL;
    for (size_t i = 0; !left && i < fill; i++)
        if (gs_jinja__buf_putc(cx, b, ' '))
            return -1;
    if (gs_jinja__buf_put_str(cx, b, piece))
        return -1;
    for (size_t i = 0; left && i < fill; i++)
        if (gs_jinja__buf_putc(cx, b, ' '))
            return -1;
    return 0;
}

/* Numbers: C's printf agrees with Python's on these conversions, flags,
 * width and precision. The format handed to snprintf is built here from
 * read_spec's output only (flags from "-+ 0#", bounded numbers, one
 * conversion from a fixed set, each matched with its argument's type), so
 * the warning about a non-literal format does not apply. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
static int format_number(struct jctx *cx, struct jbuf *b, const struct spec *sp, struct jv v)
{
    if (!gs_jinja__is_number(v))
        return gs_jinja__error(cx, "%%%c format: a real number is required, not %s", sp->conv,
                               gs_jinja__type_name(v));
    char cfmt[32], out[4200 + 64];
    int k = snprintf(cfmt, sizeof(cfmt), "%%%s", sp->flags);
    if (sp->width >= 0)
        k += snprintf(cfmt + k, sizeof(cfmt) - (size_t)k, "%d", sp->width);
    if (sp->prec >= 0)
        k += snprintf(cfmt + k, sizeof(cfmt) - (size_t)k, ".%d", sp->prec);
    int n;
    if (strchr("diuxXoc", sp->conv)) {
        int64_t i = v.kind == JV_FLOAT ? (int64_t)v.u.f : v.kind == JV_INT ? v.u.i : v.u.b;
        char conv = sp->conv == 'i' || sp->conv == 'u' ? 'd' : sp->conv == 'c' ? 'c' : sp->conv;
        if (conv == 'c') {
            snprintf(cfmt + k, sizeof(cfmt) - (size_t)k, "c");
            n = snprintf(out, sizeof(out), cfmt, (int)(unsigned char)i);
        } else {
            snprintf(cfmt + k, sizeof(cfmt) - (size_t)k, "ll%c", conv);
            n = snprintf(out, sizeof(out), cfmt, (long long)i);
        }
    } else {
        snprintf(cfmt + k, sizeof(cfmt) - (size_t)k, "%c", sp->conv);
        n = snprintf(out, sizeof(out), cfmt, gs_jinja__as_double(v));
    }
    if (n < 0)
        return bad_format(cx, "bad number format");
    return gs_jinja__buf_put(cx, b, out, GS_MIN((size_t)n, sizeof(out) - 1));
}
#pragma GCC diagnostic pop

static int format_one(struct jctx *cx, struct jbuf *b, const struct spec *sp, struct jv v)
{
    switch (sp->conv) {
    case 's':
    case 'r':
    case 'a': {
        struct jbuf t = {0};
        int rc = sp->conv == 's' ? gs_jinja__print(cx, &t, v) : gs_jinja__repr(cx, &t, v);
        struct jv s;
        if (rc || gs_jinja__buf_to_str(cx, &t, &s))
            return -1;
        if (sp->prec >= 0 && (size_t)sp->prec < s.n) {
            /* A precision cuts to that many code points. */
            size_t cut = 0, count = 0;
            while (cut < s.n && count < (size_t)sp->prec) {
                cut++;
                while (cut < s.n && ((unsigned char)s.u.s[cut] & 0xC0) == 0x80)
                    cut++;
                count++;
            }
            if (gs_jinja__view(cx, s, s.u.s, cut, &s))
                return -1;
        }
        if (sp->conv != 's' && gs_jinja__taint(cx, v, &s))
            return -1;
        return put_padded(cx, b, sp, s);
    }
    case 'd':
    case 'i':
    case 'u':
    case 'f':
    case 'F':
    case 'e':
    case 'E':
    case 'g':
    case 'G':
    case 'x':
    case 'X':
    case 'o':
    case 'c':
        return format_number(cx, b, sp, v);
    default:
        return gs_jinja__error(cx, "string formatting: unsupported format character '%c'",
                               sp->conv);
    }
}

/* %(key)s: the key between the parentheses at fmt[*i] (just past '('). */
static int mapping_arg(struct jctx *cx, struct jv fmt, size_t *i, struct jv args, struct jv *out)
{
    const char *s = fmt.u.s;
    size_t start = *i, depth = 1;
    while (*i < fmt.n && depth) {
        depth += s[*i] == '(';
        depth -= s[*i] == ')';
        (*i)++;
    }
    if (depth)
        return bad_format(cx, "incomplete format key");
    if (args.kind != JV_DICT)
        return bad_format(cx, "format requires a mapping");
    if (!gs_jinja__dict_get_str(args.u.dict, s + start, *i - 1 - start, out))
        return gs_jinja__error(cx, "string formatting: key '%.*s' not found",
                               (int)GS_MIN(*i - 1 - start, 64), s + start);
    return 0;
}

int gs_jinja__percent_format(struct jctx *cx, struct jv fmt, struct jv args, struct jv *out)
{
    /* A tuple gives one argument per conversion; anything else is one argument. */
    const struct jv *items = &args;
    size_t n_items = 1, next = 0;
    if (args.kind == JV_LIST && (args.flags & JV_F_TUPLE)) {
        items = args.u.list->items;
        n_items = args.u.list->n;
    }
    bool used_mapping = false;
    struct jbuf b = {0};
    size_t lit = 0;
    for (size_t i = 0; i < fmt.n;) {
        if (fmt.u.s[i] != '%') {
            i++;
            continue;
        }
        if (gs_jinja__buf_put_part(cx, &b, fmt, lit, i - lit))
            return -1;
        i++;
        if (i < fmt.n && fmt.u.s[i] == '%') {
            if (gs_jinja__buf_putc(cx, &b, '%'))
                return -1;
            lit = ++i;
            continue;
        }
        struct jv v;
        if (i < fmt.n && fmt.u.s[i] == '(') {
            i++;
            if (mapping_arg(cx, fmt, &i, args, &v))
                return -1;
            used_mapping = true;
        } else if (next < n_items) {
            v = items[next++];
        } else {
            return bad_format(cx, "not enough arguments for format string");
        }
        struct spec sp;
        if (read_spec(cx, fmt, &i, &sp) || format_one(cx, &b, &sp, v))
            return -1;
        lit = i;
    }
    if (gs_jinja__buf_put_part(cx, &b, fmt, lit, fmt.n - lit))
        return -1;
    if (!used_mapping && next < n_items && !(args.kind == JV_DICT))
        return bad_format(cx, "not all arguments converted during string formatting");
    return gs_jinja__buf_to_str(cx, &b, out);
}
