/*
 * engine/jinja/filters.c - Jinja's filters, tests and the globals a chat
 * template may call (range, namespace, dict, raise_exception, strftime_now),
 * each one row of a table. tojson is Hugging Face's: json.dumps with
 * ensure_ascii off, no HTML escaping, keys in the input's order.
 *
 * Filters that Jinja implements as generators (map, select, reject,
 * selectattr, rejectattr, unique) return lists flagged JV_F_GEN, so that the
 * things Python refuses on a generator (len(), json.dumps, indexing) are
 * refused here too, and `|list` turns one into a list.
 */
#include "engine/jinja/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int (*filter_fn)(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out);

/* Jinja's soft_str: strings stay, everything else prints (undefined as ""). */
static int soft_str(struct jctx *cx, struct jv v, struct jv *out)
{
    return gs_jinja__to_str(cx, v, out);
}

static bool arg_true(const struct jargs *a, size_t i, const char *name)
{
    struct jv v;
    return gs_jinja__arg(a, i, name, &v) && gs_jinja__truthy(v);
}

/* The rest of the positional arguments from i on, as their own jargs. */
static struct jargs args_from(const struct jargs *a, size_t i)
{
    struct jargs r = {0};
    if (a && a->n_pos > i) {
        r.pos = a->pos + i;
        r.n_pos = a->n_pos - i;
    }
    return r;
}

static int to_list(struct jctx *cx, struct jv in, struct jlist **out)
{
    return gs_jinja__iterate(cx, in, out);
}

/* ---- attribute paths (map(attribute=), selectattr, sort(attribute=)) ------------ */

/* Jinja's make_attrgetter: "a.b.0" looked up part by part, items first. */
static int attr_path(struct jctx *cx, struct jv item, struct jv path, struct jv *out)
{
    if (path.kind == JV_INT)
        return gs_jinja__getitem(cx, item, path, out);
    if (path.kind != JV_STR)
        return gs_jinja__error(cx, "attribute must be a string");
    const char *p = path.u.s, *end = path.u.s + path.n;
    struct jv v = item;
    while (p <= end) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        size_t n = (size_t)((dot ? dot : end) - p);
        struct jv key;
        /* A part of digits is an index, as Jinja's getattr path reads it. */
        bool digits = n > 0 && n < 18;
        int64_t idx = 0;
        for (size_t i = 0; i < n && digits; i++) {
            digits = p[i] >= '0' && p[i] <= '9';
            idx = idx * 10 + (p[i] - '0');
        }
        if (digits)
            key = jv_int(idx);
        else if (gs_jinja__str_new(cx, p, n, &key))
            return -1;
        if (v.kind == JV_UNDEF)
            return gs_jinja__undefined_error(cx, v);
        if (gs_jinja__getitem(cx, v, key, &v))
            return -1;
        if (!dot)
            break;
        p = dot + 1;
    }
    *out = v;
    return 0;
}

/* ---- filters ------------------------------------------------------------------------ */

/* Hugging Face's tojson(x, ensure_ascii=False, indent=None, separators=None,
 * sort_keys=False). */
static int f_tojson(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    struct jv indent = jv_none(), seps = jv_none();
    gs_jinja__arg(a, 1, "indent", &indent);
    gs_jinja__arg(a, 2, "separators", &seps);
    struct jjson o = {.indent = -1,
                      .ensure_ascii = arg_true(a, 0, "ensure_ascii"),
                      .sort_keys = arg_true(a, 3, "sort_keys")};
    if (indent.kind == JV_INT)
        o.indent = (int)GS_MAX(0, GS_MIN(indent.u.i, 64));
    else if (indent.kind != JV_NONE)
        return gs_jinja__error(cx, "tojson: indent must be an integer");
    if (seps.kind == JV_LIST && seps.u.list->n == 2 && seps.u.list->items[0].kind == JV_STR &&
        seps.u.list->items[1].kind == JV_STR) {
        o.item_sep = seps.u.list->items[0].u.s;
        o.item_sep_n = seps.u.list->items[0].n;
        o.key_sep = seps.u.list->items[1].u.s;
        o.key_sep_n = seps.u.list->items[1].n;
    } else if (seps.kind != JV_NONE) {
        return gs_jinja__error(cx, "tojson: separators must be a pair of strings");
    }
    struct jbuf b = {0};
    if (gs_jinja__tojson(cx, &b, in, &o, 0) || gs_jinja__buf_to_str(cx, &b, out))
        return -1;
    return gs_jinja__taint(cx, in, out);
}

static int f_length(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    (void)a;
    int64_t n;
    if (gs_jinja__length(cx, in, &n))
        return -1;
    *out = jv_int(n);
    return 0;
}

static int f_trim(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    struct jv s, chars;
    if (soft_str(cx, in, &s))
        return -1;
    bool has = gs_jinja__arg(a, 0, "chars", &chars) && chars.kind == JV_STR;
    struct jv v = gs_jinja__strip(s, has ? &chars : NULL, true, true);
    return gs_jinja__view(cx, s, v.u.s, v.n, out);
}

static int f_string(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    (void)a;
    return gs_jinja__to_str(cx, in, out);
}

static int f_safe(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    (void)cx, (void)a;
    *out = in;
    return 0;
}

static int f_join(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    struct jv sep = jv_str("", 0), attr;
    gs_jinja__arg(a, 0, "d", &sep);
    bool by_attr = gs_jinja__arg(a, 1, "attribute", &attr) && attr.kind != JV_NONE;
    struct jlist *items;
    if (soft_str(cx, sep, &sep) || to_list(cx, in, &items))
        return -1;
    struct jbuf b = {0};
    for (size_t i = 0; i < items->n; i++) {
        struct jv v = items->items[i];
        if (by_attr && attr_path(cx, v, attr, &v))
            return -1;
        if ((i && gs_jinja__buf_put_str(cx, &b, sep)) || gs_jinja__print(cx, &b, v))
            return -1;
    }
    return gs_jinja__buf_to_str(cx, &b, out);
}

static int f_default(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    (void)cx;
    struct jv dflt = jv_str("", 0);
    gs_jinja__arg(a, 0, "default_value", &dflt);
    bool boolean = arg_true(a, 1, "boolean");
    *out = in.kind == JV_UNDEF || (boolean && !gs_jinja__truthy(in)) ? dflt : in;
    return 0;
}

static int f_items(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    if (in.kind == JV_UNDEF)
        return gs_jinja__list_new(cx, 0, out);
    if (in.kind != JV_DICT)
        return gs_jinja__error(cx, "Can only get item pairs from a mapping.");
    return gs_jinja__method(cx, in, "items", a, out);
}

static int f_case(struct jctx *cx, struct jv in, struct jv *out, char mode)
{
    struct jv s;
    return soft_str(cx, in, &s) || gs_jinja__case(cx, s, mode, out);
}

static int f_lower(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    (void)a;
    return f_case(cx, in, out, 'L');
}

static int f_upper(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    (void)a;
    return f_case(cx, in, out, 'U');
}

static int f_capitalize(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    (void)a;
    struct jv lower;
    return f_case(cx, in, &lower, 'L') || gs_jinja__case(cx, lower, 'C', out);
}

static int f_title(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    (void)a;
    return f_case(cx, in, out, 'T');
}

static int f_list(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    (void)a;
    struct jlist *items;
    if (to_list(cx, in, &items) || gs_jinja__list_new(cx, items->n, out))
        return -1;
    if (items->n)
        memcpy(out->u.list->items, items->items, items->n * sizeof(struct jv));
    return 0;
}

static int f_replace(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    struct jv s, old, new_s, count = jv_none();
    if (!gs_jinja__arg(a, 0, "old", &old) || !gs_jinja__arg(a, 1, "new", &new_s))
        return gs_jinja__error(cx, "replace needs old and new");
    gs_jinja__arg(a, 2, "count", &count);
    if (soft_str(cx, in, &s) || soft_str(cx, old, &old) || soft_str(cx, new_s, &new_s))
        return -1;
    return gs_jinja__replace(cx, s, old, new_s, count.kind == JV_INT ? count.u.i : -1, out);
}

static int f_map(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    struct jlist *items;
    struct jv attr, fname, dflt;
    if (to_list(cx, in, &items) || gs_jinja__list_new(cx, items->n, out))
        return -1;
    out->flags = JV_F_GEN;
    bool by_attr = gs_jinja__arg(a, SIZE_MAX, "attribute", &attr);
    bool has_default = gs_jinja__arg(a, SIZE_MAX, "default", &dflt);
    if (!by_attr && !gs_jinja__arg(a, 0, NULL, &fname))
        return gs_jinja__error(cx, "map requires a filter name or attribute=");
    if (!by_attr && fname.kind != JV_STR)
        return gs_jinja__error(cx, "map: the filter name must be a string");
    struct jargs rest = args_from(a, 1);
    for (size_t i = 0; i < items->n; i++) {
        struct jv *o = &out->u.list->items[i];
        if (by_attr) {
            if (attr_path(cx, items->items[i], attr, o))
                return -1;
            if (has_default && o->kind == JV_UNDEF)
                *o = dflt;
        } else if (gs_jinja__filter(cx, fname.u.s, items->items[i], &rest, o)) {
            return -1;
        }
    }
    return 0;
}

/* select/reject/selectattr/rejectattr: keep items whose test (or truth) is want. */
static int filter_by_test(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out,
                          bool by_attr, bool want)
{
    struct jlist *items;
    if (to_list(cx, in, &items))
        return -1;
    size_t first = by_attr ? 1 : 0;
    struct jv attr, test;
    if (by_attr && !gs_jinja__arg(a, 0, NULL, &attr))
        return gs_jinja__error(cx, "selectattr needs an attribute");
    bool has_test = gs_jinja__arg(a, first, NULL, &test);
    if (has_test && test.kind != JV_STR)
        return gs_jinja__error(cx, "the test name must be a string");
    struct jargs rest = args_from(a, first + 1);
    struct jlistb kept = {0};
    for (size_t i = 0; i < items->n; i++) {
        struct jv v = items->items[i];
        bool r;
        if (by_attr && attr_path(cx, v, attr, &v))
            return -1;
        if (has_test) {
            if (gs_jinja__test(cx, test.u.s, v, &rest, &r))
                return -1;
        } else {
            r = gs_jinja__truthy(v);
        }
        if (r == want && gs_jinja__listb_push(cx, &kept, items->items[i]))
            return -1;
    }
    if (gs_jinja__listb_done(cx, &kept, out))
        return -1;
    out->flags = JV_F_GEN;
    return 0;
}

static int f_select(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    return filter_by_test(cx, in, a, out, false, true);
}

static int f_reject(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    return filter_by_test(cx, in, a, out, false, false);
}

static int f_selectattr(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    return filter_by_test(cx, in, a, out, true, true);
}

static int f_rejectattr(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    return filter_by_test(cx, in, a, out, true, false);
}

/* The key a sort compares: the item, its attribute, lower-cased unless case-sensitive. */
static int sort_key(struct jctx *cx, struct jv v, const struct jv *attr, bool case_sensitive,
                    struct jv *out)
{
    if (attr && attr_path(cx, v, *attr, &v))
        return -1;
    if (!case_sensitive && v.kind == JV_STR)
        return gs_jinja__case(cx, v, 'L', out);
    *out = v;
    return 0;
}

/* A stable merge sort of idx[0..n) by keys, which can fail on incomparable keys. */
static int merge_sort(struct jctx *cx, size_t *idx, size_t *tmp, size_t n, const struct jv *keys,
                      bool reverse)
{
    if (n < 2)
        return 0;
    size_t h = n / 2;
    if (merge_sort(cx, idx, tmp, h, keys, reverse) ||
        merge_sort(cx, idx + h, tmp, n - h, keys, reverse))
        return -1;
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int c;
        if (gs_jinja__compare(cx, keys[idx[j]], keys[idx[i]], &c))
            return -1;
        bool take_right = reverse ? c > 0 : c < 0;
        tmp[k++] = take_right ? idx[j++] : idx[i++];
    }
    while (i < h)
        tmp[k++] = idx[i++];
    while (j < n)
        tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof(*idx));
    return 0;
}

static int sorted(struct jctx *cx, const struct jlist *items, const struct jv *keys, bool reverse,
                  struct jv *out)
{
    size_t n = items->n;
    size_t *idx = gs_jinja__alloc_array(&cx->arena, n + 1, sizeof(*idx));
    size_t *tmp = gs_jinja__alloc_array(&cx->arena, n + 1, sizeof(*tmp));
    if (!idx || !tmp)
        return gs_jinja__nomem(cx);
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    if (merge_sort(cx, idx, tmp, n, keys, reverse) || gs_jinja__list_new(cx, n, out))
        return -1;
    for (size_t i = 0; i < n; i++)
        out->u.list->items[i] = items->items[idx[i]];
    return 0;
}

static int f_sort(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    struct jlist *items;
    struct jv attr;
    bool by_attr = gs_jinja__arg(a, 2, "attribute", &attr) && attr.kind != JV_NONE;
    bool cs = arg_true(a, 1, "case_sensitive");
    if (to_list(cx, in, &items))
        return -1;
    struct jv *keys = gs_jinja__alloc_array(&cx->arena, items->n + 1, sizeof(*keys));
    if (!keys)
        return gs_jinja__nomem(cx);
    for (size_t i = 0; i < items->n; i++)
        if (sort_key(cx, items->items[i], by_attr ? &attr : NULL, cs, &keys[i]))
            return -1;
    return sorted(cx, items, keys, arg_true(a, 0, "reverse"), out);
}

static int f_dictsort(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    if (in.kind != JV_DICT)
        return gs_jinja__error(cx, "You can only sort by either \"key\" or \"value\" of a mapping");
    struct jv pairs, by = jv_str("key", 3);
    gs_jinja__arg(a, 1, "by", &by);
    bool by_value = by.kind == JV_STR && by.n == 5 && memcmp(by.u.s, "value", 5) == 0;
    bool cs = arg_true(a, 0, "case_sensitive");
    if (gs_jinja__method(cx, in, "items", NULL, &pairs))
        return -1;
    const struct jlist *items = pairs.u.list;
    struct jv *keys = gs_jinja__alloc_array(&cx->arena, items->n + 1, sizeof(*keys));
    if (!keys)
        return gs_jinja__nomem(cx);
    for (size_t i = 0; i < items->n; i++)
        if (sort_key(cx, items->items[i].u.list->items[by_value ? 1 : 0], NULL, cs, &keys[i]))
            return -1;
    return sorted(cx, items, keys, arg_true(a, 2, "reverse"), out);
}

static int f_unique(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    struct jlist *items;
    struct jv attr;
    bool by_attr = gs_jinja__arg(a, 1, "attribute", &attr) && attr.kind != JV_NONE;
    bool cs = arg_true(a, 0, "case_sensitive");
    if (to_list(cx, in, &items))
        return -1;
    struct jlistb kept = {0}, seen = {0};
    for (size_t i = 0; i < items->n; i++) {
        struct jv key;
        if (sort_key(cx, items->items[i], by_attr ? &attr : NULL, cs, &key))
            return -1;
        bool dup = false;
        for (size_t k = 0; k < seen.n && !dup; k++)
            dup = gs_jinja__equal(seen.items[k], key);
        if (!dup && (gs_jinja__listb_push(cx, &seen, key) ||
                     gs_jinja__listb_push(cx, &kept, items->items[i])))
            return -1;
    }
    if (gs_jinja__listb_done(cx, &kept, out))
        return -1;
    out->flags = JV_F_GEN;
    return 0;
}

static int f_first_last(struct jctx *cx, struct jv in, struct jv *out, bool last)
{
    struct jlist *items;
    if (to_list(cx, in, &items))
        return -1;
    if (items->n == 0)
        *out = gs_jinja__undef_msg(cx, "No %s item, sequence was empty.", last ? "last" : "first");
    else
        *out = items->items[last ? items->n - 1 : 0];
    return 0;
}

static int f_first(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    (void)a;
    return f_first_last(cx, in, out, false);
}

static int f_last(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    (void)a;
    return f_first_last(cx, in, out, true);
}

static int f_reverse(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    (void)a;
    struct jv step = jv_int(-1);
    if (in.kind == JV_STR)
        return gs_jinja__slice(cx, in, NULL, NULL, &step, out);
    struct jlist *items;
    if (to_list(cx, in, &items) || gs_jinja__list_new(cx, items->n, out))
        return -1;
    for (size_t i = 0; i < items->n; i++)
        out->u.list->items[i] = items->items[items->n - 1 - i];
    out->flags = JV_F_GEN;
    return 0;
}

static int f_int(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    struct jv dflt = jv_int(0);
    gs_jinja__arg(a, 0, "default", &dflt);
    if (in.kind == JV_INT || in.kind == JV_BOOL) {
        *out = jv_int(in.kind == JV_INT ? in.u.i : in.u.b);
    } else if (in.kind == JV_FLOAT && isfinite(in.u.f) && fabs(in.u.f) < 9.2e18) {
        *out = jv_int((int64_t)in.u.f);
    } else if (in.kind == JV_STR) {
        struct jv s;
        char buf[64], *end;
        if (soft_str(cx, in, &s))
            return -1;
        s = gs_jinja__strip(s, NULL, true, true);
        size_t n = GS_MIN(s.n, sizeof(buf) - 1);
        memcpy(buf, s.u.s, n);
        buf[n] = '\0';
        long long v = strtoll(buf, &end, 10);
        if (n && *end == '\0' && n == s.n) {
            *out = jv_int(v);
        } else {
            double d = strtod(buf, &end);
            *out = n && *end == '\0' && isfinite(d) && fabs(d) < 9.2e18 ? jv_int((int64_t)d) : dflt;
        }
    } else {
        *out = dflt;
    }
    return 0;
}

static int f_float(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    struct jv dflt = jv_float(0.0);
    gs_jinja__arg(a, 0, "default", &dflt);
    if (gs_jinja__is_number(in)) {
        *out = jv_float(gs_jinja__as_double(in));
    } else if (in.kind == JV_STR) {
        char buf[64], *end;
        struct jv s = gs_jinja__strip(in, NULL, true, true);
        size_t n = GS_MIN(s.n, sizeof(buf) - 1);
        memcpy(buf, s.u.s, n);
        buf[n] = '\0';
        double d = strtod(buf, &end);
        *out = n && *end == '\0' && n == s.n ? jv_float(d) : dflt;
    } else {
        (void)cx;
        *out = dflt;
    }
    return 0;
}

static int f_abs(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    (void)a;
    if (in.kind == JV_INT && in.u.i != INT64_MIN)
        *out = jv_int(in.u.i < 0 ? -in.u.i : in.u.i);
    else if (in.kind == JV_FLOAT)
        *out = jv_float(fabs(in.u.f));
    else if (in.kind == JV_BOOL)
        *out = jv_int(in.u.b);
    else
        return gs_jinja__error(cx, "bad operand type for abs(): '%s'", gs_jinja__type_name(in));
    return 0;
}

static int f_sum(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    struct jlist *items;
    struct jv attr, acc = jv_int(0);
    bool by_attr = gs_jinja__arg(a, 0, "attribute", &attr) && attr.kind != JV_NONE;
    gs_jinja__arg(a, 1, "start", &acc);
    if (to_list(cx, in, &items))
        return -1;
    for (size_t i = 0; i < items->n; i++) {
        struct jv v = items->items[i];
        if ((by_attr && attr_path(cx, v, attr, &v)) || gs_jinja__binary(cx, JT_ADD, acc, v, &acc))
            return -1;
    }
    *out = acc;
    return 0;
}

static int min_max(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out, int sign)
{
    struct jlist *items;
    struct jv attr;
    bool by_attr = gs_jinja__arg(a, 1, "attribute", &attr) && attr.kind != JV_NONE;
    bool cs = arg_true(a, 0, "case_sensitive");
    if (to_list(cx, in, &items))
        return -1;
    if (items->n == 0) {
        *out = gs_jinja__undef_msg(cx, "No aggregated item, sequence was empty.");
        return 0;
    }
    size_t best = 0;
    struct jv best_key, key;
    if (sort_key(cx, items->items[0], by_attr ? &attr : NULL, cs, &best_key))
        return -1;
    for (size_t i = 1; i < items->n; i++) {
        int c;
        if (sort_key(cx, items->items[i], by_attr ? &attr : NULL, cs, &key) ||
            gs_jinja__compare(cx, key, best_key, &c))
            return -1;
        if (c * sign > 0) {
            best = i;
            best_key = key;
        }
    }
    *out = items->items[best];
    return 0;
}

static int f_min(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    return min_max(cx, in, a, out, -1);
}

static int f_max(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    return min_max(cx, in, a, out, 1);
}

static int f_round(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    struct jv prec = jv_int(0), method = jv_str("common", 6);
    gs_jinja__arg(a, 0, "precision", &prec);
    gs_jinja__arg(a, 1, "method", &method);
    if (!gs_jinja__is_number(in) || prec.kind != JV_INT)
        return gs_jinja__error(cx, "round needs a number");
    double scale = pow(10.0, (double)GS_MAX(-300, GS_MIN(prec.u.i, 300)));
    double x = gs_jinja__as_double(in) * scale;
    bool is_floor = method.kind == JV_STR && method.n == 5 && memcmp(method.u.s, "floor", 5) == 0;
    bool is_ceil = method.kind == JV_STR && method.n == 4 && memcmp(method.u.s, "ceil", 4) == 0;
    /* "common" is Python's round(): halves go to the even neighbour. */
    double r = is_floor ? floor(x) : is_ceil ? ceil(x) : nearbyint(x);
    *out = jv_float(r / scale);
    return 0;
}

static int f_indent(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    struct jv s, width = jv_int(4);
    gs_jinja__arg(a, 0, "width", &width);
    bool first = arg_true(a, 1, "first"), blank = arg_true(a, 2, "blank");
    if (soft_str(cx, in, &s))
        return -1;
    struct jv pad;
    if (width.kind == JV_STR) {
        pad = width;
    } else if (width.kind == JV_INT) {
        int64_t w = GS_MAX(0, GS_MIN(width.u.i, 256));
        static const char spaces[257] = {[0 ... 255] = ' '};
        pad = jv_str(spaces, (size_t)w);
    } else {
        return gs_jinja__error(cx, "indent: width must be an integer or a string");
    }
    struct jbuf b = {0};
    size_t line = 0;
    for (size_t i = 0; i <= s.n; i++) {
        if (i < s.n && s.u.s[i] != '\n')
            continue;
        bool is_blank = i == line;
        bool indent_it = (line > 0 || first) && (blank || !is_blank);
        if ((indent_it && gs_jinja__buf_put_str(cx, &b, pad)) ||
            gs_jinja__buf_put_part(cx, &b, s, line, i - line + (i < s.n)))
            return -1;
        line = i + 1;
    }
    return gs_jinja__buf_to_str(cx, &b, out);
}

static int f_escape(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    (void)a;
    struct jv s;
    if (soft_str(cx, in, &s))
        return -1;
    struct jbuf b = {0};
    for (size_t i = 0; i < s.n; i++) {
        const char *rep = NULL;
        switch (s.u.s[i]) {
        case '&':
            rep = "&amp;";
            break;
        case '<':
            rep = "&lt;";
            break;
        case '>':
            rep = "&gt;";
            break;
        case '"':
            rep = "&#34;";
            break;
        case '\'':
            rep = "&#39;";
            break;
        }
        if (rep ? gs_jinja__buf_put(cx, &b, rep, strlen(rep))
                : gs_jinja__buf_putc(cx, &b, s.u.s[i]))
            return -1;
    }
    return gs_jinja__buf_to_str(cx, &b, out) || gs_jinja__taint(cx, s, out);
}

static int f_wordcount(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    (void)a;
    struct jv s, words;
    if (soft_str(cx, in, &s) || gs_jinja__method(cx, s, "split", NULL, &words))
        return -1;
    *out = jv_int((int64_t)words.u.list->n);
    return 0;
}

/* "fmt"|format(a, b) is fmt % (a, b); with keywords, fmt % {k: v}. */
static int f_format(struct jctx *cx, struct jv in, const struct jargs *a, struct jv *out)
{
    struct jv fmt, args;
    if (gs_jinja__to_str(cx, in, &fmt))
        return -1;
    if (a && a->n_kw > 0) {
        if (a->n_pos > 0)
            return gs_jinja__error(cx, "format: positional and keyword arguments together");
        if (gs_jinja__dict_new(cx, a->n_kw, &args))
            return -1;
        for (size_t i = 0; i < a->n_kw; i++) {
            struct jv key;
            if (gs_jinja__str_new(cx, a->kw_names[i], strlen(a->kw_names[i]), &key) ||
                gs_jinja__dict_set(cx, args.u.dict, key, a->kw_vals[i]))
                return -1;
        }
    } else {
        size_t n = a ? a->n_pos : 0;
        if (gs_jinja__list_new(cx, n, &args))
            return -1;
        args.flags = JV_F_TUPLE;
        for (size_t i = 0; i < n; i++)
            args.u.list->items[i] = a->pos[i];
    }
    return gs_jinja__percent_format(cx, fmt, args, out);
}

struct filter_row {
    const char *name;
    filter_fn fn;
};

static const struct filter_row filters[] = {
    {"tojson", f_tojson},
    {"length", f_length},
    {"count", f_length},
    {"trim", f_trim},
    {"string", f_string},
    {"safe", f_safe},
    {"join", f_join},
    {"default", f_default},
    {"d", f_default},
    {"items", f_items},
    {"lower", f_lower},
    {"upper", f_upper},
    {"capitalize", f_capitalize},
    {"title", f_title},
    {"list", f_list},
    {"replace", f_replace},
    {"map", f_map},
    {"select", f_select},
    {"reject", f_reject},
    {"selectattr", f_selectattr},
    {"rejectattr", f_rejectattr},
    {"sort", f_sort},
    {"dictsort", f_dictsort},
    {"unique", f_unique},
    {"first", f_first},
    {"last", f_last},
    {"reverse", f_reverse},
    {"int", f_int},
    {"float", f_float},
    {"abs", f_abs},
    {"sum", f_sum},
    {"min", f_min},
    {"max", f_max},
    {"round", f_round},
    {"indent", f_indent},
    {"escape", f_escape},
    {"e", f_escape},
    {"wordcount", f_wordcount},
    {"format", f_format},
};

int gs_jinja__filter(struct jctx *cx, const char *name, struct jv in, const struct jargs *args,
                     struct jv *out)
{
    for (size_t i = 0; i < GS_ARRAY_LEN(filters); i++)
        if (filters[i].name[0] == name[0] && strcmp(filters[i].name, name) == 0)
            return filters[i].fn(cx, in, args, out);
    return gs_jinja__error(cx, "No filter named '%s' found.", name);
}

/* ---- tests ---------------------------------------------------------------------------- */

typedef bool (*test_fn)(struct jv v);
typedef int (*test_arg_fn)(struct jctx *cx, struct jv v, struct jv arg, bool *out);

static bool t_defined(struct jv v)
{
    return v.kind != JV_UNDEF;
}
static bool t_undefined(struct jv v)
{
    return v.kind == JV_UNDEF;
}
static bool t_none(struct jv v)
{
    return v.kind == JV_NONE;
}
static bool t_string(struct jv v)
{
    return v.kind == JV_STR;
}
static bool t_mapping(struct jv v)
{
    return v.kind == JV_DICT;
}
static bool t_boolean(struct jv v)
{
    return v.kind == JV_BOOL;
}
static bool t_true(struct jv v)
{
    return v.kind == JV_BOOL && v.u.b;
}
static bool t_false(struct jv v)
{
    return v.kind == JV_BOOL && !v.u.b;
}
static bool t_number(struct jv v)
{
    return gs_jinja__is_number(v);
}
static bool t_integer(struct jv v)
{
    return v.kind == JV_INT;
}
static bool t_float(struct jv v)
{
    return v.kind == JV_FLOAT;
}
static bool t_callable(struct jv v)
{
    return v.kind == JV_MACRO || v.kind == JV_FUNC || v.kind == JV_METHOD;
}
/* Python's iter() accepts it; Jinja's Undefined iterates as empty. */
static bool t_iterable(struct jv v)
{
    return v.kind == JV_UNDEF || v.kind == JV_STR || v.kind == JV_LIST || v.kind == JV_DICT;
}
/* len() and [] both work: Undefined has both, a generator neither. */
static bool t_sequence(struct jv v)
{
    return v.kind == JV_UNDEF || v.kind == JV_STR || v.kind == JV_DICT ||
           (v.kind == JV_LIST && !(v.flags & JV_F_GEN));
}
static bool t_odd(struct jv v)
{
    return v.kind == JV_INT && (v.u.i % 2) != 0;
}
static bool t_even(struct jv v)
{
    return v.kind == JV_INT && (v.u.i % 2) == 0;
}

static int t_eq(struct jctx *cx, struct jv v, struct jv arg, bool *out)
{
    (void)cx;
    *out = gs_jinja__equal(v, arg);
    return 0;
}

static int t_ne(struct jctx *cx, struct jv v, struct jv arg, bool *out)
{
    (void)cx;
    *out = !gs_jinja__equal(v, arg);
    return 0;
}

static int t_order(struct jctx *cx, struct jv v, struct jv arg, bool *out, int want_lo, int want_hi)
{
    int c;
    if (gs_jinja__compare(cx, v, arg, &c))
        return -1;
    *out = c >= want_lo && c <= want_hi;
    return 0;
}

static int t_lt(struct jctx *cx, struct jv v, struct jv arg, bool *out)
{
    return t_order(cx, v, arg, out, -1, -1);
}
static int t_le(struct jctx *cx, struct jv v, struct jv arg, bool *out)
{
    return t_order(cx, v, arg, out, -1, 0);
}
static int t_gt(struct jctx *cx, struct jv v, struct jv arg, bool *out)
{
    return t_order(cx, v, arg, out, 1, 1);
}
static int t_ge(struct jctx *cx, struct jv v, struct jv arg, bool *out)
{
    return t_order(cx, v, arg, out, 0, 1);
}

static int t_in(struct jctx *cx, struct jv v, struct jv arg, bool *out)
{
    struct jv r;
    if (gs_jinja__binary(cx, JT_IN, v, arg, &r))
        return -1;
    *out = r.u.b;
    return 0;
}

static int t_sameas(struct jctx *cx, struct jv v, struct jv arg, bool *out)
{
    (void)cx;
    /* Identity: the same singleton, or the same object. */
    if (v.kind != arg.kind)
        *out = false;
    else if (v.kind == JV_NONE || v.kind == JV_UNDEF)
        *out = true;
    else if (v.kind == JV_BOOL)
        *out = v.u.b == arg.u.b;
    else
        *out = memcmp(&v.u, &arg.u, sizeof(v.u)) == 0;
    return 0;
}

static int t_divisibleby(struct jctx *cx, struct jv v, struct jv arg, bool *out)
{
    if (v.kind != JV_INT || arg.kind != JV_INT || arg.u.i == 0)
        return gs_jinja__error(cx, "divisibleby needs integers");
    *out = v.u.i % arg.u.i == 0;
    return 0;
}

struct test_row {
    const char *name;
    test_fn fn;         /* tests of the value alone */
    test_arg_fn fn_arg; /* tests with one argument */
};

static const struct test_row tests[] = {
    {"defined", t_defined, NULL},
    {"undefined", t_undefined, NULL},
    {"none", t_none, NULL},
    {"string", t_string, NULL},
    {"mapping", t_mapping, NULL},
    {"iterable", t_iterable, NULL},
    {"sequence", t_sequence, NULL},
    {"boolean", t_boolean, NULL},
    {"true", t_true, NULL},
    {"false", t_false, NULL},
    {"number", t_number, NULL},
    {"integer", t_integer, NULL},
    {"float", t_float, NULL},
    {"callable", t_callable, NULL},
    {"odd", t_odd, NULL},
    {"even", t_even, NULL},
    {"equalto", NULL, t_eq},
    {"eq", NULL, t_eq},
    {"==", NULL, t_eq},
    {"ne", NULL, t_ne},
    {"!=", NULL, t_ne},
    {"lt", NULL, t_lt},
    {"lessthan", NULL, t_lt},
    {"le", NULL, t_le},
    {"gt", NULL, t_gt},
    {"greaterthan", NULL, t_gt},
    {"ge", NULL, t_ge},
    {"in", NULL, t_in},
    {"sameas", NULL, t_sameas},
    {"divisibleby", NULL, t_divisibleby},
};

int gs_jinja__test(struct jctx *cx, const char *name, struct jv in, const struct jargs *args,
                   bool *out)
{
    for (size_t i = 0; i < GS_ARRAY_LEN(tests); i++) {
        if (tests[i].name[0] != name[0] || strcmp(tests[i].name, name) != 0)
            continue;
        if (tests[i].fn) {
            *out = tests[i].fn(in);
            return 0;
        }
        struct jv arg;
        if (!gs_jinja__arg(args, 0, NULL, &arg))
            return gs_jinja__error(cx, "test '%s' needs an argument", name);
        return tests[i].fn_arg(cx, in, arg, out);
    }
    return gs_jinja__error(cx, "No test named '%s' found.", name);
}

/* ---- globals ------------------------------------------------------------------------------ */

typedef int (*func_fn)(struct jctx *cx, const struct jargs *a, struct jv *out);

struct jfunc {
    const char *name;
    func_fn fn;
};

static int g_range(struct jctx *cx, const struct jargs *a, struct jv *out)
{
    int64_t v[3] = {0, 0, 1};
    size_t n = a ? a->n_pos : 0;
    if (n < 1 || n > 3)
        return gs_jinja__error(cx, "range expected 1 to 3 arguments, got %zu", n);
    for (size_t i = 0; i < n; i++) {
        if (a->pos[i].kind != JV_INT && a->pos[i].kind != JV_BOOL)
            return gs_jinja__error(cx, "'%s' object cannot be interpreted as an integer",
                                   gs_jinja__type_name(a->pos[i]));
        v[n == 1 ? 1 : i] = a->pos[i].kind == JV_INT ? a->pos[i].u.i : a->pos[i].u.b;
    }
    int64_t start = v[0], stop = v[1], step = v[2];
    if (step == 0)
        return gs_jinja__error(cx, "range() arg 3 must not be zero");
    /* Counted in unsigned arithmetic so that no bound overflows. */
    uint64_t count = 0;
    if (step > 0 && start < stop)
        count = ((uint64_t)stop - (uint64_t)start - 1) / (uint64_t)step + 1;
    else if (step < 0 && start > stop)
        count = ((uint64_t)start - (uint64_t)stop - 1) / ((uint64_t)(-(step + 1)) + 1) + 1;
    /* No list is ever longer than the loops that could run over it. */
    if (count > cx->lim->max_loop_iterations)
        return gs_jinja__limit(cx, "max_loop_iterations", cx->lim->max_loop_iterations);
    if (gs_jinja__list_new(cx, (size_t)count, out))
        return -1;
    for (uint64_t i = 0; i < count; i++)
        out->u.list->items[i] = jv_int(start + (int64_t)i * step);
    return 0;
}

/* namespace(mapping?, **kw) and dict(mapping?, **kw): a copy of the mapping plus keywords. */
static int build_mapping(struct jctx *cx, const struct jargs *a, struct jv *out, const char *what)
{
    if (gs_jinja__dict_new(cx, 8, out))
        return -1;
    size_t n = a ? a->n_pos : 0;
    if (n > 1)
        return gs_jinja__error(cx, "%s expected at most 1 argument, got %zu", what, n);
    if (n == 1) {
        struct jv m = a->pos[0];
        if (m.kind != JV_DICT && m.kind != JV_NS)
            return gs_jinja__error(cx, "%s: cannot convert a %s to a mapping", what,
                                   gs_jinja__type_name(m));
        for (size_t i = 0; i < m.u.dict->n; i++)
            if (gs_jinja__dict_set(cx, out->u.dict, m.u.dict->keys[i], m.u.dict->vals[i]))
                return -1;
    }
    for (size_t i = 0; a && i < a->n_kw; i++) {
        struct jv key;
        if (gs_jinja__str_new(cx, a->kw_names[i], strlen(a->kw_names[i]), &key) ||
            gs_jinja__dict_set(cx, out->u.dict, key, a->kw_vals[i]))
            return -1;
    }
    return 0;
}

static int g_namespace(struct jctx *cx, const struct jargs *a, struct jv *out)
{
    if (build_mapping(cx, a, out, "namespace"))
        return -1;
    out->kind = JV_NS;
    return 0;
}

static int g_dict(struct jctx *cx, const struct jargs *a, struct jv *out)
{
    return build_mapping(cx, a, out, "dict");
}

static int g_raise_exception(struct jctx *cx, const struct jargs *a, struct jv *out)
{
    (void)out;
    struct jv msg = jv_str("", 0);
    gs_jinja__arg(a, 0, "message", &msg);
    if (gs_jinja__to_str(cx, msg, &msg))
        return -1;
    if (cx->fail == GS_JINJA_FAIL_NONE) {
        /* The template's own words, exactly: a server answers 400 with them. */
        cx->fail = GS_JINJA_FAIL_RAISED;
        gs_err_set(cx->err, GS_INVAL, "%.*s", (int)msg.n, msg.u.s);
    }
    return -1;
}

/* strftime in the C locale and UTC, by table, so that no locale or time zone
 * of the process can change a prompt. */
static int put_time_field(struct jctx *cx, struct jbuf *b, char conv, const struct tm *tm)
{
    static const char *const days[] = {"Sunday",   "Monday", "Tuesday", "Wednesday",
                                       "Thursday", "Friday", "Saturday"};
    static const char *const months[] = {"January",   "February", "March",    "April",
                                         "May",       "June",     "July",     "August",
                                         "September", "October",  "November", "December"};
    int hour12 = tm->tm_hour % 12 ? tm->tm_hour % 12 : 12;
    const struct {
        char conv;
        int width; /* zero-padded to it; 0: as it is; -2: space-padded to 2 */
        int value;
    } nums[] = {
        {'Y', 0, tm->tm_year + 1900}, {'y', 2, (tm->tm_year + 1900) % 100},
        {'m', 2, tm->tm_mon + 1},     {'d', 2, tm->tm_mday},
        {'e', -2, tm->tm_mday},       {'j', 3, tm->tm_yday + 1},
        {'H', 2, tm->tm_hour},        {'I', 2, hour12},
        {'M', 2, tm->tm_min},         {'S', 2, tm->tm_sec},
    };
    char s[32];
    for (size_t i = 0; i < GS_ARRAY_LEN(nums); i++) {
        if (nums[i].conv != conv)
            continue;
        int n = nums[i].width < 0 ? snprintf(s, sizeof(s), "%2d", nums[i].value)
                                  : snprintf(s, sizeof(s), "%0*d", nums[i].width, nums[i].value);
        return gs_jinja__buf_put(cx, b, s, (size_t)n);
    }
    const char *text = conv == 'A'   ? days[tm->tm_wday]
                       : conv == 'B' ? months[tm->tm_mon]
                       : conv == 'p' ? (tm->tm_hour < 12 ? "AM" : "PM")
                       : conv == 'Z' ? "UTC"
                       : conv == 'z' ? "+0000"
                       : conv == '%' ? "%"
                                     : NULL;
    if (text)
        return gs_jinja__buf_put(cx, b, text, strlen(text));
    if (conv == 'a' || conv == 'b' || conv == 'h') /* abbreviations: the first three letters */
        return gs_jinja__buf_put(cx, b, conv == 'a' ? days[tm->tm_wday] : months[tm->tm_mon], 3);
    /* Unknown conversions stay as written, as Python's strftime leaves them. */
    s[0] = '%';
    s[1] = conv;
    return gs_jinja__buf_put(cx, b, s, 2);
}

static int g_strftime_now(struct jctx *cx, const struct jargs *a, struct jv *out)
{
    struct jv fmt;
    if (!gs_jinja__arg(a, 0, "format", &fmt) || fmt.kind != JV_STR)
        return gs_jinja__error(cx, "strftime_now needs a format string");
    time_t t = (time_t)cx->now_unix_s;
    struct tm tm;
    if (!gmtime_r(&t, &tm))
        return gs_jinja__error(cx, "strftime_now: time out of range");
    struct jbuf b = {0};
    for (size_t i = 0; i < fmt.n; i++) {
        int rc = fmt.u.s[i] == '%' && i + 1 < fmt.n ? put_time_field(cx, &b, fmt.u.s[++i], &tm)
                                                    : gs_jinja__buf_putc(cx, &b, fmt.u.s[i]);
        if (rc)
            return -1;
    }
    return gs_jinja__buf_to_str(cx, &b, out);
}

static const struct jfunc funcs[] = {
    {"range", g_range},
    {"namespace", g_namespace},
    {"dict", g_dict},
    {"raise_exception", g_raise_exception},
    {"strftime_now", g_strftime_now},
};

int gs_jinja__call_func(struct jctx *cx, const struct jfunc *fn, const struct jargs *args,
                        struct jv *out)
{
    return fn->fn(cx, args, out);
}

int gs_jinja__add_globals(struct jctx *cx, struct jframe *f)
{
    for (size_t i = 0; i < GS_ARRAY_LEN(funcs); i++) {
        struct jv v = {.kind = JV_FUNC, .u.func = &funcs[i]};
        if (gs_jinja__frame_set(cx, f, funcs[i].name, v))
            return -1;
    }
    return 0;
}
