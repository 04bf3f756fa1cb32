/*
 * engine/jinja/methods.c - the Python methods a template may call on values:
 * str (strip, split, startswith, replace, upper, ...), dict (items, get,
 * keys, values), list (index, count) and loop.cycle. Methods that would
 * modify a list or dict are refused as Hugging Face's immutable sandbox
 * refuses them, with its message. One table row per method.
 */
#include "engine/jinja/internal.h"

#include <string.h>
#include <utf8proc.h>

bool gs_jinja__arg(const struct jargs *a, size_t i, const char *name, struct jv *out)
{
    if (!a)
        return false;
    if (i < a->n_pos) {
        *out = a->pos[i];
        return true;
    }
    for (size_t k = 0; name && k < a->n_kw; k++)
        if (strcmp(a->kw_names[k], name) == 0) {
            *out = a->kw_vals[k];
            return true;
        }
    return false;
}

/* ---- string helpers -------------------------------------------------------------- */

bool gs_jinja__is_space(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

static bool in_chars(uint32_t cp, const struct jv *chars)
{
    if (!chars)
        return gs_jinja__is_space(cp);
    size_t len;
    for (size_t i = 0; i < chars->n; i += len)
        if (gs_jinja__utf8_next((const unsigned char *)chars->u.s + i, chars->n - i, &len) == cp)
            return true;
    return false;
}

/* The start of the code point that ends at s[end] (exclusive). */
static size_t prev_cp(const char *s, size_t end)
{
    size_t i = end - 1;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80)
        i--;
    return i;
}

struct jv gs_jinja__strip(struct jv s, const struct jv *chars, bool left, bool right)
{
    size_t a = 0, b = s.n, len;
    while (left && a < b &&
           in_chars(gs_jinja__utf8_next((const unsigned char *)s.u.s + a, b - a, &len), chars))
        a += len;
    while (right && b > a) {
        size_t p = prev_cp(s.u.s, b);
        if (!in_chars(gs_jinja__utf8_next((const unsigned char *)s.u.s + p, b - p, &len), chars))
            break;
        b = p;
    }
    return jv_str(s.u.s + a, b - a);
}

/* Upper, lower, title or capitalised copy, code point by code point. */
int gs_jinja__case(struct jctx *cx, struct jv s, char mode, struct jv *out)
{
    struct jbuf buf = {0};
    bool prev_cased = false;
    size_t len;
    for (size_t i = 0; i < s.n; i += len) {
        uint32_t cp = gs_jinja__utf8_next((const unsigned char *)s.u.s + i, s.n - i, &len);
        utf8proc_int32_t c = (utf8proc_int32_t)cp;
        bool upper = mode == 'U' || (mode == 'T' && !prev_cased) || (mode == 'C' && i == 0);
        utf8proc_int32_t mapped = upper ? utf8proc_toupper(c) : utf8proc_tolower(c);
        prev_cased = utf8proc_toupper(c) != c || utf8proc_tolower(c) != c;
        if (len == 1 && cp >= 0x80) /* an invalid byte stays as it is */
            mapped = c;
        utf8proc_uint8_t enc[4];
        utf8proc_ssize_t k = cp >= 0x80 && len == 1 ? 0 : utf8proc_encode_char(mapped, enc);
        if (k == 0 ? gs_jinja__buf_put(cx, &buf, s.u.s + i, len)
                   : gs_jinja__buf_put(cx, &buf, (const char *)enc, (size_t)k))
            return -1;
    }
    return gs_jinja__buf_to_str(cx, &buf, out) || gs_jinja__taint(cx, s, out);
}

int gs_jinja__listb_push(struct jctx *cx, struct jlistb *lb, struct jv v)
{
    if (lb->n == lb->cap) {
        size_t cap = lb->cap ? lb->cap * 2 : 8;
        struct jv *items = gs_jinja__alloc_array(&cx->arena, cap, sizeof(*items));
        if (!items)
            return gs_jinja__nomem(cx);
        if (lb->n)
            memcpy(items, lb->items, lb->n * sizeof(*items));
        lb->items = items;
        lb->cap = cap;
    }
    lb->items[lb->n++] = v;
    return 0;
}

int gs_jinja__listb_done(struct jctx *cx, struct jlistb *lb, struct jv *out)
{
    struct jlist *l = gs_jinja__alloc(&cx->arena, sizeof(*l));
    if (!l)
        return gs_jinja__nomem(cx);
    l->items = lb->items;
    l->n = lb->n;
    *out = (struct jv){.kind = JV_LIST, .u.list = l};
    return 0;
}

/* str.split(sep=None, maxsplit=-1): on runs of whitespace without sep. */
static int split(struct jctx *cx, struct jv s, const struct jv *sep, int64_t maxsplit,
                 struct jv *out)
{
    struct jlistb lb = {0};
    const char *p = s.u.s, *end = s.u.s + s.n;
    if (sep) {
        if (sep->n == 0)
            return gs_jinja__error(cx, "empty separator");
        while (maxsplit != 0) {
            const char *hit = NULL;
            for (const char *q = p; q + sep->n <= end; q++)
                if (memcmp(q, sep->u.s, sep->n) == 0) {
                    hit = q;
                    break;
                }
            if (!hit)
                break;
            struct jv part;
            if (gs_jinja__view(cx, s, p, (size_t)(hit - p), &part) ||
                gs_jinja__listb_push(cx, &lb, part))
                return -1;
            p = hit + sep->n;
            maxsplit--;
        }
        struct jv last;
        if (gs_jinja__view(cx, s, p, (size_t)(end - p), &last) ||
            gs_jinja__listb_push(cx, &lb, last))
            return -1;
        return gs_jinja__listb_done(cx, &lb, out);
    }
    size_t len;
    for (;;) {
        while (p < end && gs_jinja__is_space(gs_jinja__utf8_next((const unsigned char *)p,
                                                                 (size_t)(end - p), &len)))
            p += len;
        if (p >= end)
            break;
        const char *w = p;
        if (maxsplit == 0) {
            struct jv rest = gs_jinja__strip(jv_str(w, (size_t)(end - w)), NULL, false, true);
            if (gs_jinja__view(cx, s, rest.u.s, rest.n, &rest) ||
                gs_jinja__listb_push(cx, &lb, rest))
                return -1;
            break;
        }
        while (p < end && !gs_jinja__is_space(gs_jinja__utf8_next((const unsigned char *)p,
                                                                  (size_t)(end - p), &len)))
            p += len;
        struct jv word;
        if (gs_jinja__view(cx, s, w, (size_t)(p - w), &word) || gs_jinja__listb_push(cx, &lb, word))
            return -1;
        maxsplit--;
    }
    return gs_jinja__listb_done(cx, &lb, out);
}

static int replace_bytes(struct jctx *cx, struct jv s, struct jv old, struct jv new_s,
                         int64_t count, struct jv *out);

int gs_jinja__replace(struct jctx *cx, struct jv s, struct jv old, struct jv new_s, int64_t count,
                      struct jv *out)
{
    if (replace_bytes(cx, s, old, new_s, count, out))
        return -1;
    return gs_jinja__taint(cx, s, out) || gs_jinja__taint(cx, new_s, out);
}

static int replace_bytes(struct jctx *cx, struct jv s, struct jv old, struct jv new_s,
                         int64_t count, struct jv *out)
{
    struct jbuf buf = {0};
    size_t i = 0;
    if (old.n == 0) {
        /* Python inserts new between every code point (and at both ends). */
        size_t len;
        if (count != 0 && gs_jinja__buf_put(cx, &buf, new_s.u.s, new_s.n))
            return -1;
        if (count > 0)
            count--;
        for (; i < s.n; i += len) {
            gs_jinja__utf8_next((const unsigned char *)s.u.s + i, s.n - i, &len);
            if (gs_jinja__buf_put(cx, &buf, s.u.s + i, len))
                return -1;
            if (count != 0 && gs_jinja__buf_put(cx, &buf, new_s.u.s, new_s.n))
                return -1;
            if (count > 0)
                count--;
        }
        return gs_jinja__buf_to_str(cx, &buf, out);
    }
    while (i < s.n) {
        if (count != 0 && i + old.n <= s.n && memcmp(s.u.s + i, old.u.s, old.n) == 0) {
            if (gs_jinja__buf_put(cx, &buf, new_s.u.s, new_s.n))
                return -1;
            i += old.n;
            if (count > 0)
                count--;
            continue;
        }
        if (gs_jinja__buf_putc(cx, &buf, s.u.s[i]))
            return -1;
        i++;
    }
    return gs_jinja__buf_to_str(cx, &buf, out);
}

/* ---- method rows ------------------------------------------------------------------- */

typedef int (*method_fn)(struct jctx *cx, struct jv self, const struct jargs *a, struct jv *out);

static int need_str(struct jctx *cx, const char *method, const struct jv *v)
{
    if (v->kind != JV_STR)
        return gs_jinja__error(cx, "%s() argument must be str, not %s", method,
                               gs_jinja__type_name(*v));
    return 0;
}

static int m_strip_any(struct jctx *cx, struct jv self, const struct jargs *a, struct jv *out,
                       bool left, bool right)
{
    struct jv chars;
    bool has = gs_jinja__arg(a, 0, "chars", &chars) && chars.kind != JV_NONE;
    if (has && need_str(cx, "strip", &chars))
        return -1;
    struct jv v = gs_jinja__strip(self, has ? &chars : NULL, left, right);
    return gs_jinja__view(cx, self, v.u.s, v.n, out);
}

static int m_strip(struct jctx *cx, struct jv self, const struct jargs *a, struct jv *out)
{
    return m_strip_any(cx, self, a, out, true, true);
}

static int m_lstrip(struct jctx *cx, struct jv self, const struct jargs *a, struct jv *out)
{
    return m_strip_any(cx, self, a, out, true, false);
}

static int m_rstrip(struct jctx *cx, struct jv self, const struct jargs *a, struct jv *out)
{
    return m_strip_any(cx, self, a, out, false, true);
}

static int m_split(struct jctx *cx, struct jv self, const struct jargs *a, struct jv *out)
{
    struct jv sep, maxsplit = jv_int(-1);
    bool has_sep = gs_jinja__arg(a, 0, "sep", &sep) && sep.kind != JV_NONE;
    gs_jinja__arg(a, 1, "maxsplit", &maxsplit);
    if ((has_sep && need_str(cx, "split", &sep)) || maxsplit.kind != JV_INT)
        return maxsplit.kind != JV_INT ? gs_jinja__error(cx, "maxsplit must be an integer") : -1;
    return split(cx, self, has_sep ? &sep : NULL, maxsplit.u.i, out);
}

/* startswith/endswith: a prefix, or a tuple of them. */
static int affix(struct jctx *cx, struct jv self, const struct jargs *a, struct jv *out, bool end)
{
    struct jv arg;
    if (!gs_jinja__arg(a, 0, NULL, &arg))
        return gs_jinja__error(cx, "%s() takes at least 1 argument",
                               end ? "endswith" : "startswith");
    const struct jv *cands = &arg;
    size_t n = 1;
    if (arg.kind == JV_LIST && (arg.flags & JV_F_TUPLE)) {
        cands = arg.u.list->items;
        n = arg.u.list->n;
    }
    *out = jv_bool(false);
    for (size_t i = 0; i < n; i++) {
        if (need_str(cx, end ? "endswith" : "startswith", &cands[i]))
            return -1;
        const struct jv *c = &cands[i];
        if (c->n <= self.n && memcmp(self.u.s + (end ? self.n - c->n : 0), c->u.s, c->n) == 0)
            *out = jv_bool(true);
    }
    return 0;
}

static int m_startswith(struct jctx *cx, struct jv self, const struct jargs *a, struct jv *out)
{
    return affix(cx, self, a, out, false);
}

static int m_endswith(struct jctx *cx, struct jv self, const struct jargs *a, struct jv *out)
{
    return affix(cx, self, a, out, true);
}

static int m_replace(struct jctx *cx, struct jv self, const struct jargs *a, struct jv *out)
{
    struct jv old, new_s, count = jv_int(-1);
    if (!gs_jinja__arg(a, 0, NULL, &old) || !gs_jinja__arg(a, 1, NULL, &new_s))
        return gs_jinja__error(cx, "replace() takes at least 2 arguments");
    gs_jinja__arg(a, 2, "count", &count);
    if (need_str(cx, "replace", &old) || need_str(cx, "replace", &new_s))
        return -1;
    return gs_jinja__replace(cx, self, old, new_s, count.kind == JV_INT ? count.u.i : -1, out);
}

static int m_upper(struct jctx *cx, struct jv self, const struct jargs *a, struct jv *out)
{
    (void)a;
    return gs_jinja__case(cx, self, 'U', out);
}

static int m_lower(struct jctx *cx, struct jv self, const struct jargs *a, struct jv *out)
{
    (void)a;
    return gs_jinja__case(cx, self, 'L', out);
}

static int m_title(struct jctx *cx, struct jv self, const struct jargs *a, struct jv *out)
{
    (void)a;
    return gs_jinja__case(cx, self, 'T', out);
}

static int m_capitalize(struct jctx *cx, struct jv self, const struct jargs *a, struct jv *out)
{
    (void)a;
    return gs_jinja__case(cx, self, 'C', out);
}

static int m_find(struct jctx *cx, struct jv self, const struct jargs *a, struct jv *out)
{
    struct jv sub;
    if (!gs_jinja__arg(a, 0, NULL, &sub) || need_str(cx, "find", &sub))
        return sub.kind == JV_STR ? gs_jinja__error(cx, "find() takes 1 argument") : -1;
    *out = jv_int(-1);
    for (size_t i = 0; i + sub.n <= self.n; i++)
        if (memcmp(self.u.s + i, sub.u.s, sub.n) == 0) {
            *out = jv_int((int64_t)gs_jinja__utf8_count(self.u.s, i));
            break;
        }
    return 0;
}

static int m_str_count(struct jctx *cx, struct jv self, const struct jargs *a, struct jv *out)
{
    struct jv sub;
    if (!gs_jinja__arg(a, 0, NULL, &sub) || need_str(cx, "count", &sub))
        return -1;
    int64_t n = 0;
    if (sub.n == 0) {
        *out = jv_int((int64_t)gs_jinja__utf8_count(self.u.s, self.n) + 1);
        return 0;
    }
    for (size_t i = 0; i + sub.n <= self.n;) {
        if (memcmp(self.u.s + i, sub.u.s, sub.n) == 0) {
            n++;
            i += sub.n;
        } else {
            i++;
        }
    }
    *out = jv_int(n);
    return 0;
}

static int m_join(struct jctx *cx, struct jv self, const struct jargs *a, struct jv *out)
{
    struct jv it;
    struct jlist *items;
    if (!gs_jinja__arg(a, 0, NULL, &it) || gs_jinja__iterate(cx, it, &items))
        return -1;
    struct jbuf buf = {0};
    for (size_t i = 0; i < items->n; i++) {
        if (need_str(cx, "join", &items->items[i]))
            return -1;
        if ((i && gs_jinja__buf_put_str(cx, &buf, self)) ||
            gs_jinja__buf_put_str(cx, &buf, items->items[i]))
            return -1;
    }
    return gs_jinja__buf_to_str(cx, &buf, out);
}

/* isdigit, isalpha, ...: every code point passes and there is at least one. */
static int str_class(struct jv self, struct jv *out, bool (*pass)(uint32_t cp))
{
    size_t len;
    bool all = self.n > 0;
    for (size_t i = 0; i < self.n && all; i += len)
        all = pass(gs_jinja__utf8_next((const unsigned char *)self.u.s + i, self.n - i, &len));
    *out = jv_bool(all);
    return 0;
}

static bool cp_digit(uint32_t cp)
{
    return utf8proc_category((utf8proc_int32_t)cp) == UTF8PROC_CATEGORY_ND;
}

static bool cp_alpha(uint32_t cp)
{
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    return c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
}

static bool cp_alnum(uint32_t cp)
{
    return cp_digit(cp) || cp_alpha(cp);
}

static int m_isdigit(struct jctx *cx, struct jv self, const struct jargs *a, struct jv *out)
{
    (void)cx, (void)a;
    return str_class(self, out, cp_digit);
}

static int m_isalpha(struct jctx *cx, struct jv self, const struct jargs *a, struct jv *out)
{
    (void)cx, (void)a;
    return str_class(self, out, cp_alpha);
}

static int m_isalnum(struct jctx *cx, struct jv self, const struct jargs *a, struct jv *out)
{
    (void)cx, (void)a;
    return str_class(self, out, cp_alnum);
}

static int m_isspace(struct jctx *cx, struct jv self, const struct jargs *a, struct jv *out)
{
    (void)cx, (void)a;
    return str_class(self, out, gs_jinja__is_space);
}

/* dict.items(), keys(), values() as lists (Python's views, iterated the same). */
static int dict_view(struct jctx *cx, struct jv self, struct jv *out, char which)
{
    const struct jdict *d = self.u.dict;
    if (gs_jinja__list_new(cx, d->n, out))
        return -1;
    for (size_t i = 0; i < d->n; i++) {
        if (which == 'k') {
            out->u.list->items[i] = d->keys[i];
        } else if (which == 'v') {
            out->u.list->items[i] = d->vals[i];
        } else {
            struct jv pair;
            if (gs_jinja__list_new(cx, 2, &pair))
                return -1;
            pair.flags = JV_F_TUPLE;
            pair.u.list->items[0] = d->keys[i];
            pair.u.list->items[1] = d->vals[i];
            out->u.list->items[i] = pair;
        }
    }
    return 0;
}

static int m_items(struct jctx *cx, struct jv self, const struct jargs *a, struct jv *out)
{
    (void)a;
    return dict_view(cx, self, out, 'i');
}

static int m_keys(struct jctx *cx, struct jv self, const struct jargs *a, struct jv *out)
{
    (void)a;
    return dict_view(cx, self, out, 'k');
}

static int m_values(struct jctx *cx, struct jv self, const struct jargs *a, struct jv *out)
{
    (void)a;
    return dict_view(cx, self, out, 'v');
}

static int m_get(struct jctx *cx, struct jv self, const struct jargs *a, struct jv *out)
{
    struct jv key, dflt = jv_none();
    if (!gs_jinja__arg(a, 0, NULL, &key))
        return gs_jinja__error(cx, "get() takes at least 1 argument");
    gs_jinja__arg(a, 1, NULL, &dflt);
    if (!gs_jinja__dict_get(self.u.dict, key, out))
        *out = dflt;
    return 0;
}

static int m_list_index(struct jctx *cx, struct jv self, const struct jargs *a, struct jv *out)
{
    struct jv x;
    if (!gs_jinja__arg(a, 0, NULL, &x))
        return gs_jinja__error(cx, "index() takes at least 1 argument");
    for (size_t i = 0; i < self.u.list->n; i++)
        if (gs_jinja__equal(self.u.list->items[i], x)) {
            *out = jv_int((int64_t)i);
            return 0;
        }
    return gs_jinja__error(cx, "value is not in list");
}

static int m_list_count(struct jctx *cx, struct jv self, const struct jargs *a, struct jv *out)
{
    struct jv x;
    if (!gs_jinja__arg(a, 0, NULL, &x))
        return gs_jinja__error(cx, "count() takes exactly one argument");
    int64_t n = 0;
    for (size_t i = 0; i < self.u.list->n; i++)
        n += gs_jinja__equal(self.u.list->items[i], x);
    *out = jv_int(n);
    return 0;
}

static int m_cycle(struct jctx *cx, struct jv self, const struct jargs *a, struct jv *out)
{
    if (!a || a->n_pos == 0)
        return gs_jinja__error(cx, "no items for cycling given");
    *out = a->pos[self.u.loop->index0 % a->n_pos];
    return 0;
}

/* NULL fn: the method exists but modifies its object, which the sandbox refuses. */
struct method_row {
    uint8_t kind; /* enum jv_kind of self */
    const char *name;
    method_fn fn;
};

static const struct method_row methods[] = {
    {JV_STR, "strip", m_strip},
    {JV_STR, "lstrip", m_lstrip},
    {JV_STR, "rstrip", m_rstrip},
    {JV_STR, "split", m_split},
    {JV_STR, "startswith", m_startswith},
    {JV_STR, "endswith", m_endswith},
    {JV_STR, "replace", m_replace},
    {JV_STR, "upper", m_upper},
    {JV_STR, "lower", m_lower},
    {JV_STR, "title", m_title},
    {JV_STR, "capitalize", m_capitalize},
    {JV_STR, "find", m_find},
    {JV_STR, "count", m_str_count},
    {JV_STR, "join", m_join},
    {JV_STR, "isdigit", m_isdigit},
    {JV_STR, "isalpha", m_isalpha},
    {JV_STR, "isalnum", m_isalnum},
    {JV_STR, "isspace", m_isspace},
    {JV_DICT, "items", m_items},
    {JV_DICT, "keys", m_keys},
    {JV_DICT, "values", m_values},
    {JV_DICT, "get", m_get},
    {JV_DICT, "pop", NULL},
    {JV_DICT, "popitem", NULL},
    {JV_DICT, "update", NULL},
    {JV_DICT, "setdefault", NULL},
    {JV_DICT, "clear", NULL},
    {JV_LIST, "index", m_list_index},
    {JV_LIST, "count", m_list_count},
    {JV_LIST, "append", NULL},
    {JV_LIST, "pop", NULL},
    {JV_LIST, "extend", NULL},
    {JV_LIST, "insert", NULL},
    {JV_LIST, "remove", NULL},
    {JV_LIST, "clear", NULL},
    {JV_LIST, "sort", NULL},
    {JV_LIST, "reverse", NULL},
    {JV_LOOP, "cycle", m_cycle},
};

static const struct method_row *find_method(struct jv self, const char *name)
{
    if (self.kind == JV_LIST && (self.flags & JV_F_GEN))
        return NULL;
    for (size_t i = 0; i < GS_ARRAY_LEN(methods); i++)
        if (methods[i].kind == self.kind && methods[i].name[0] == name[0] &&
            strcmp(methods[i].name, name) == 0)
            return &methods[i];
    return NULL;
}

bool gs_jinja__has_method(struct jv self, const char *name)
{
    return find_method(self, name) != NULL;
}

int gs_jinja__method(struct jctx *cx, struct jv self, const char *name, const struct jargs *args,
                     struct jv *out)
{
    const struct method_row *m = find_method(self, name);
    if (!m)
        return gs_jinja__error(cx, "'%s' object has no method '%s'", gs_jinja__type_name(self),
                               name);
    if (!m->fn)
        return gs_jinja__error(cx, "access to attribute '%s' of '%s' object is unsafe.", name,
                               gs_jinja__type_name(self));
    return m->fn(cx, self, args, out);
}
