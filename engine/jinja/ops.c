/*
 * engine/jinja/ops.c - operators, subscripts, slices and attribute lookup,
 * with Python's semantics where a chat template can observe them (1 == 1.0,
 * True + 1, floor division and modulo rounding towards minus infinity,
 * negative indices, slices with steps, "in" on strings, lists and dicts).
 *
 * Every size is checked before anything is built: 'a' * 10**9 fails on
 * max_output_bytes without allocating.
 */
#define _GNU_SOURCE /* memmem */
#include "engine/jinja/internal.h"

#include <math.h>
#include <string.h>

/* ---- arithmetic ---------------------------------------------------------------------- */

static bool is_intlike(struct jv v)
{
    return v.kind == JV_INT || v.kind == JV_BOOL;
}

static int64_t as_int(struct jv v)
{
    return v.kind == JV_INT ? v.u.i : (int64_t)v.u.b;
}

static const char *op_text(uint8_t op)
{
    static const char *const text[] = {
        [JT_ADD] = "+",       [JT_MINUS] = "-", [JT_MUL] = "*",  [JT_DIV] = "/",
        [JT_FLOORDIV] = "//", [JT_MOD] = "%",   [JT_POW] = "**",
    };
    return op < GS_ARRAY_LEN(text) && text[op] ? text[op] : "?";
}

static int type_error(struct jctx *cx, uint8_t op, struct jv a, struct jv b)
{
    if (a.kind == JV_UNDEF)
        return gs_jinja__undefined_error(cx, a);
    if (b.kind == JV_UNDEF)
        return gs_jinja__undefined_error(cx, b);
    if (op == JT_ADD && (a.kind == JV_STR || a.kind == JV_LIST) && !(a.flags & JV_F_TUPLE))
        return gs_jinja__error(cx, "can only concatenate %s (not \"%s\") to %s",
                               gs_jinja__type_name(a), gs_jinja__type_name(b),
                               gs_jinja__type_name(a));
    return gs_jinja__error(cx, "unsupported operand type(s) for %s: '%s' and '%s'", op_text(op),
                           gs_jinja__type_name(a), gs_jinja__type_name(b));
}

static int int_arith(struct jctx *cx, uint8_t op, int64_t x, int64_t y, struct jv *out)
{
    int64_t r = 0;
    bool overflow = false;
    switch (op) {
    case JT_ADD:
        overflow = __builtin_add_overflow(x, y, &r);
        break;
    case JT_MINUS:
        overflow = __builtin_sub_overflow(x, y, &r);
        break;
    case JT_MUL:
        overflow = __builtin_mul_overflow(x, y, &r);
        break;
    case JT_DIV:
        if (y == 0)
            return gs_jinja__error(cx, "division by zero");
        *out = jv_float((double)x / (double)y);
        return 0;
    case JT_FLOORDIV:
    case JT_MOD:
        if (y == 0)
            return gs_jinja__error(cx, "integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) {
            overflow = true;
            break;
        }
        r = op == JT_FLOORDIV ? x / y : x % y;
        /* Python rounds the quotient down, so the remainder takes y's sign. */
        if ((x % y != 0) && ((x < 0) != (y < 0)))
            r = op == JT_FLOORDIV ? r - 1 : r + y;
        break;
    case JT_POW:
        if (y < 0) {
            *out = jv_float(pow((double)x, (double)y));
            return 0;
        }
        r = 1;
        for (int64_t i = 0; i < y && !overflow; i++) {
            overflow = __builtin_mul_overflow(r, x, &r);
            if (r == 0 || r == 1)
                break; /* 0 and 1 stay where they are: no need to loop 10**18 times */
        }
        if (!overflow && r == 1 && x == -1)
            r = (y % 2) ? -1 : 1;
        break;
    default:
        return gs_jinja__error(cx, "bad operator");
    }
    if (overflow)
        return gs_jinja__error(cx, "integer overflow in '%s'", op_text(op));
    *out = jv_int(r);
    return 0;
}

static int float_arith(struct jctx *cx, uint8_t op, double x, double y, struct jv *out)
{
    double r;
    switch (op) {
    case JT_ADD:
        r = x + y;
        break;
    case JT_MINUS:
        r = x - y;
        break;
    case JT_MUL:
        r = x * y;
        break;
    case JT_DIV:
        if (y == 0)
            return gs_jinja__error(cx, "float division by zero");
        r = x / y;
        break;
    case JT_FLOORDIV:
        if (y == 0)
            return gs_jinja__error(cx, "float floor division by zero");
        r = floor(x / y);
        break;
    case JT_MOD:
        if (y == 0)
            return gs_jinja__error(cx, "float modulo");
        r = fmod(x, y);
        if (r != 0 && ((r < 0) != (y < 0)))
            r += y;
        break;
    case JT_POW:
        r = pow(x, y);
        break;
    default:
        return gs_jinja__error(cx, "bad operator");
    }
    *out = jv_float(r);
    return 0;
}

/* s * count and list * count, refused past max_output_bytes before allocating. */
static int repeat(struct jctx *cx, struct jv seq, int64_t count, struct jv *out)
{
    if (count < 0)
        count = 0;
    size_t unit = seq.kind == JV_STR ? seq.n : seq.u.list->n * sizeof(struct jv);
    uint64_t total;
    if (gs_mul_overflow(unit, (uint64_t)count, &total) || total > cx->lim->max_output_bytes)
        return gs_jinja__limit(cx, "max_output_bytes", cx->lim->max_output_bytes);
    if (total == 0) /* '' * 10**9 is '' at once, not 10**9 empty copies */
        count = 0;
    if (seq.kind == JV_STR) {
        char *p = gs_jinja__alloc(&cx->arena, (size_t)total + 1);
        if (!p)
            return gs_jinja__nomem(cx);
        for (int64_t i = 0; i < count; i++)
            memcpy(p + (size_t)i * seq.n, seq.u.s, seq.n);
        p[total] = '\0';
        *out = jv_str(p, (size_t)total);
        return gs_jinja__taint(cx, seq, out);
    }
    size_t n = seq.u.list->n;
    if (gs_jinja__list_new(cx, n * (size_t)count, out))
        return -1;
    out->flags = seq.flags & JV_F_TUPLE;
    for (int64_t i = 0; i < count; i++)
        memcpy(out->u.list->items + (size_t)i * n, seq.u.list->items, n * sizeof(struct jv));
    return 0;
}

static int concat_lists(struct jctx *cx, struct jv a, struct jv b, struct jv *out)
{
    size_t n = a.u.list->n, m = b.u.list->n;
    if (gs_jinja__list_new(cx, n + m, out))
        return -1;
    out->flags = a.flags & JV_F_TUPLE;
    if (n)
        memcpy(out->u.list->items, a.u.list->items, n * sizeof(struct jv));
    if (m)
        memcpy(out->u.list->items + n, b.u.list->items, m * sizeof(struct jv));
    return 0;
}

static int concat_strs(struct jctx *cx, struct jv a, struct jv b, struct jv *out)
{
    struct jbuf buf = {0};
    if (gs_jinja__buf_put_str(cx, &buf, a) || gs_jinja__buf_put_str(cx, &buf, b))
        return -1;
    return gs_jinja__buf_to_str(cx, &buf, out);
}

static int add(struct jctx *cx, struct jv a, struct jv b, struct jv *out)
{
    if (a.kind == JV_STR && b.kind == JV_STR)
        return concat_strs(cx, a, b, out);
    bool plain = !((a.flags | b.flags) & JV_F_GEN);
    if (a.kind == JV_LIST && b.kind == JV_LIST && plain &&
        (a.flags & JV_F_TUPLE) == (b.flags & JV_F_TUPLE))
        return concat_lists(cx, a, b, out);
    return type_error(cx, JT_ADD, a, b);
}

static int arith(struct jctx *cx, uint8_t op, struct jv a, struct jv b, struct jv *out)
{
    if (op == JT_ADD && !(gs_jinja__is_number(a) && gs_jinja__is_number(b)))
        return add(cx, a, b, out);
    if (op == JT_MOD && a.kind == JV_STR)
        return gs_jinja__percent_format(cx, a, b, out);
    if (op == JT_MUL) {
        if ((a.kind == JV_STR || (a.kind == JV_LIST && !(a.flags & JV_F_GEN))) && is_intlike(b))
            return repeat(cx, a, as_int(b), out);
        if ((b.kind == JV_STR || (b.kind == JV_LIST && !(b.flags & JV_F_GEN))) && is_intlike(a))
            return repeat(cx, b, as_int(a), out);
    }
    if (!gs_jinja__is_number(a) || !gs_jinja__is_number(b))
        return type_error(cx, op, a, b);
    if (is_intlike(a) && is_intlike(b))
        return int_arith(cx, op, as_int(a), as_int(b), out);
    return float_arith(cx, op, gs_jinja__as_double(a), gs_jinja__as_double(b), out);
}

/* ---- membership ------------------------------------------------------------------------- */

static int contains(struct jctx *cx, struct jv hay, struct jv needle, bool *out)
{
    switch (hay.kind) {
    case JV_STR:
        if (needle.kind != JV_STR)
            return gs_jinja__error(cx, "'in <string>' requires string as left operand, not %s",
                                   gs_jinja__type_name(needle));
        *out = needle.n == 0 || (needle.n <= hay.n && memmem(hay.u.s, hay.n, needle.u.s, needle.n));
        return 0;
    case JV_LIST:
        *out = false;
        for (size_t i = 0; i < hay.u.list->n && !*out; i++)
            *out = gs_jinja__equal(hay.u.list->items[i], needle);
        return 0;
    case JV_DICT:
    case JV_NS: {
        struct jv ignored;
        *out = gs_jinja__dict_get(hay.u.dict, needle, &ignored);
        return 0;
    }
    case JV_UNDEF:
        *out = false;
        return 0;
    default:
        return gs_jinja__error(cx, "argument of type '%s' is not iterable",
                               gs_jinja__type_name(hay));
    }
}

static int concat_any(struct jctx *cx, struct jv a, struct jv b, struct jv *out)
{
    struct jbuf buf = {0};
    if (gs_jinja__print(cx, &buf, a) || gs_jinja__print(cx, &buf, b))
        return -1;
    return gs_jinja__buf_to_str(cx, &buf, out);
}

int gs_jinja__binary(struct jctx *cx, uint8_t op, struct jv a, struct jv b, struct jv *out)
{
    int cmp = 0;
    bool in = false;
    switch (op) {
    case JT_TILDE:
        return concat_any(cx, a, b, out);
    case JT_EQ:
    case JT_NE:
        *out = jv_bool(gs_jinja__equal(a, b) == (op == JT_EQ));
        return 0;
    case JT_LT:
    case JT_LE:
    case JT_GT:
    case JT_GE:
        if (gs_jinja__compare(cx, a, b, &cmp))
            return -1;
        *out = jv_bool(op == JT_LT   ? cmp < 0
                       : op == JT_LE ? cmp <= 0
                       : op == JT_GT ? cmp > 0
                                     : cmp >= 0);
        return 0;
    case JT_IN:
    case JT_NOTIN:
        if (contains(cx, b, a, &in))
            return -1;
        *out = jv_bool(in == (op == JT_IN));
        return 0;
    default:
        return arith(cx, op, a, b, out);
    }
}

/* ---- strings by code point ------------------------------------------------------------------ */

/* Byte offsets of each code point of s, plus one past the end; NULL for an
 * ASCII string (offsets are then the indices). */
static int code_points(struct jctx *cx, struct jv s, size_t **offsets, size_t *count)
{
    *count = gs_jinja__utf8_count(s.u.s, s.n);
    *offsets = NULL;
    if (*count == s.n)
        return 0;
    size_t *off = gs_jinja__alloc_array(&cx->arena, *count + 1, sizeof(*off));
    if (!off)
        return gs_jinja__nomem(cx);
    size_t k = 0;
    for (size_t i = 0; i < s.n; i++)
        if (((unsigned char)s.u.s[i] & 0xC0) != 0x80)
            off[k++] = i;
    off[k] = s.n;
    *offsets = off;
    return 0;
}

/* ---- subscripts and slices ------------------------------------------------------------------- */

static int index_seq(struct jctx *cx, struct jv obj, int64_t i, struct jv *out)
{
    size_t *off = NULL, len = 0;
    if (obj.kind == JV_STR) {
        if (code_points(cx, obj, &off, &len))
            return -1;
    } else {
        len = obj.u.list->n;
    }
    int64_t at = i < 0 ? i + (int64_t)len : i;
    if (at < 0 || at >= (int64_t)len) {
        *out = gs_jinja__undef_msg(cx, "%s object has no element %lld", gs_jinja__type_name(obj),
                                   (long long)i);
        return 0;
    }
    if (obj.kind == JV_LIST)
        *out = obj.u.list->items[at];
    else if (off)
        return gs_jinja__view(cx, obj, obj.u.s + off[at], off[at + 1] - off[at], out);
    else
        return gs_jinja__view(cx, obj, obj.u.s + at, 1, out);
    return 0;
}

int gs_jinja__getitem(struct jctx *cx, struct jv obj, struct jv key, struct jv *out)
{
    switch (obj.kind) {
    case JV_UNDEF:
        return gs_jinja__undefined_error(cx, obj);
    case JV_DICT:
    case JV_NS:
        if (gs_jinja__dict_get(obj.u.dict, key, out))
            return 0;
        break;
    case JV_LIST:
        if (obj.flags & JV_F_GEN)
            return gs_jinja__error(cx, "'generator' object is not subscriptable");
        /* fallthrough */
    case JV_STR:
        if (is_intlike(key))
            return index_seq(cx, obj, as_int(key), out);
        break;
    case JV_NONE:
        *out = gs_jinja__undef_msg(cx, "None has no element %s",
                                   key.kind == JV_STR ? "(a string key)" : "(an index)");
        if (is_intlike(key))
            *out = gs_jinja__undef_msg(cx, "None has no element %lld", (long long)as_int(key));
        return 0;
    default:
        break;
    }
    if (key.kind == JV_STR && key.n == strlen(key.u.s) && obj.kind != JV_DICT)
        return gs_jinja__getattr(cx, obj, key.u.s, out);
    if (key.kind == JV_STR)
        *out = gs_jinja__undef_msg(cx, "'%s object' has no attribute '%.*s'",
                                   gs_jinja__type_name(obj), (int)GS_MIN(key.n, 64), key.u.s);
    else
        *out = gs_jinja__undef_msg(cx, "%s object has no element", gs_jinja__type_name(obj));
    return 0;
}

static int slice_bound(struct jctx *cx, const struct jv *v, int64_t dflt, int64_t *out)
{
    if (!v || v->kind == JV_NONE) {
        *out = dflt;
        return 0;
    }
    if (!is_intlike(*v))
        return gs_jinja__error(cx, "slice indices must be integers or None");
    *out = as_int(*v);
    return 0;
}

/* Python's PySlice_AdjustIndices: clamps start and stop into [0, len] (or
 * [-1, len-1] going backwards) and returns how many items the slice takes. */
static size_t adjust_slice(int64_t len, int64_t *start, int64_t *stop, int64_t step, bool has_start,
                           bool has_stop)
{
    if (!has_start)
        *start = step < 0 ? len - 1 : 0;
    else if (*start < 0)
        *start = *start + len < 0 ? (step < 0 ? -1 : 0) : *start + len;
    else if (*start >= len)
        *start = step < 0 ? len - 1 : len;
    if (!has_stop)
        *stop = step < 0 ? -1 : len;
    else if (*stop < 0)
        *stop = *stop + len < 0 ? (step < 0 ? -1 : 0) : *stop + len;
    else if (*stop >= len)
        *stop = step < 0 ? len - 1 : len;
    if (step < 0)
        return *stop < *start ? (size_t)((*start - *stop - 1) / -step + 1) : 0;
    return *start < *stop ? (size_t)((*stop - *start - 1) / step + 1) : 0;
}

int gs_jinja__slice(struct jctx *cx, struct jv obj, const struct jv *lo, const struct jv *hi,
                    const struct jv *step_v, struct jv *out)
{
    if (obj.kind == JV_UNDEF)
        return gs_jinja__undefined_error(cx, obj);
    if (obj.kind != JV_STR && (obj.kind != JV_LIST || (obj.flags & JV_F_GEN)))
        return gs_jinja__error(cx, "'%s' object is not subscriptable", gs_jinja__type_name(obj));
    int64_t start = 0, stop = 0, step = 1;
    if (slice_bound(cx, step_v, 1, &step) || slice_bound(cx, lo, 0, &start) ||
        slice_bound(cx, hi, 0, &stop))
        return -1;
    if (step == 0)
        return gs_jinja__error(cx, "slice step cannot be zero");
    if (step == INT64_MIN)
        step = -INT64_MAX;
    size_t *off = NULL, len;
    if (obj.kind == JV_STR) {
        if (code_points(cx, obj, &off, &len))
            return -1;
    } else {
        len = obj.u.list->n;
    }
    bool has_start = lo && lo->kind != JV_NONE, has_stop = hi && hi->kind != JV_NONE;
    size_t n = adjust_slice((int64_t)len, &start, &stop, step, has_start, has_stop);
    if (obj.kind == JV_LIST) {
        if (gs_jinja__list_new(cx, n, out))
            return -1;
        out->flags = obj.flags & JV_F_TUPLE;
        for (size_t i = 0; i < n; i++)
            out->u.list->items[i] = obj.u.list->items[start + (int64_t)i * step];
        return 0;
    }
    struct jbuf buf = {0};
    for (size_t i = 0; i < n; i++) {
        int64_t at = start + (int64_t)i * step;
        size_t from = off ? off[at] : (size_t)at, to = off ? off[at + 1] : (size_t)at + 1;
        if (gs_jinja__buf_put_part(cx, &buf, obj, from, to - from))
            return -1;
    }
    return gs_jinja__buf_to_str(cx, &buf, out);
}

/* ---- attributes -------------------------------------------------------------------------------
 */

static int loop_attr(struct jctx *cx, const struct jloop *l, const char *name, struct jv *out)
{
    int64_t i = (int64_t)l->index0, n = (int64_t)l->items->n;
    static const char *const ints[] = {"index",  "index0", "revindex", "revindex0",
                                       "length", "depth",  "depth0"};
    int64_t vals[] = {i + 1, i, n - i, n - i - 1, n, (int64_t)l->depth0 + 1, (int64_t)l->depth0};
    for (size_t k = 0; k < GS_ARRAY_LEN(ints); k++)
        if (strcmp(name, ints[k]) == 0) {
            *out = jv_int(vals[k]);
            return 0;
        }
    if (strcmp(name, "first") == 0 || strcmp(name, "last") == 0) {
        *out = jv_bool(name[0] == 'f' ? i == 0 : i == n - 1);
        return 0;
    }
    if (strcmp(name, "previtem") == 0 || strcmp(name, "nextitem") == 0) {
        int64_t at = name[0] == 'p' ? i - 1 : i + 1;
        if (at >= 0 && at < n)
            *out = l->items->items[at];
        else
            *out = gs_jinja__undef_msg(cx, "there is no %s", name);
        return 0;
    }
    *out = gs_jinja__undef_msg(cx, "'LoopContext object' has no attribute '%s'", name);
    return 0;
}

static int bound_method(struct jctx *cx, struct jv self, const char *name, struct jv *out)
{
    struct jbound *b = gs_jinja__alloc(&cx->arena, sizeof(*b));
    if (!b)
        return gs_jinja__nomem(cx);
    b->self = self;
    b->name = name;
    *out = (struct jv){.kind = JV_METHOD, .u.bound = b};
    return 0;
}

int gs_jinja__getattr(struct jctx *cx, struct jv obj, const char *name, struct jv *out)
{
    switch (obj.kind) {
    case JV_UNDEF:
        return gs_jinja__undefined_error(cx, obj);
    case JV_LOOP:
        if (gs_jinja__has_method(obj, name))
            return bound_method(cx, obj, name, out);
        return loop_attr(cx, obj.u.loop, name, out);
    case JV_NS:
        if (gs_jinja__dict_get_str(obj.u.dict, name, strlen(name), out))
            return 0;
        break;
    case JV_DICT:
        /* An attribute first (the dict's methods), then the item. */
        if (gs_jinja__has_method(obj, name))
            return bound_method(cx, obj, name, out);
        if (gs_jinja__dict_get_str(obj.u.dict, name, strlen(name), out))
            return 0;
        break;
    case JV_NONE:
        *out = gs_jinja__undef_msg(cx, "'None' has no attribute '%s'", name);
        return 0;
    default:
        if (gs_jinja__has_method(obj, name))
            return bound_method(cx, obj, name, out);
        break;
    }
    *out = gs_jinja__undef_msg(cx, "'%s object' has no attribute '%s'", gs_jinja__type_name(obj),
                               name);
    return 0;
}
