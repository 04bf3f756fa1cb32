/*
 * config/value.c - one option's value: parsing text (flags, environment) and
 * JSON (config file), range checks, and the generic field operations that
 * reload and --print-config use.
 */
#include "config/internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void *gs_cfg__field(void *base, const struct gs_cfg_opt *o)
{
    return (char *)base + o->offset;
}

const void *gs_cfg__cfield(const struct gs_cfg *cfg, const struct gs_cfg_opt *o)
{
    return (const char *)cfg + o->offset;
}

size_t gs_cfg__field_size(const struct gs_cfg_opt *o)
{
    switch (o->type) {
    case GS_CFG_BOOL:
        return sizeof(bool);
    case GS_CFG_INT:
        return sizeof(int64_t);
    case GS_CFG_BYTES:
        return sizeof(uint64_t);
    case GS_CFG_FLOAT:
        return sizeof(double);
    case GS_CFG_STR:
        return sizeof(char *);
    case GS_CFG_LIST:
        return sizeof(struct gs_cfg_strlist);
    case GS_CFG_ENUM:
        return sizeof(int);
    }
    return 0;
}

void gs_cfg__list_clear(struct gs_cfg_strlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        gs_free(l->v[i]);
    gs_free(l->v);
    l->v = NULL;
    l->n = 0;
}

enum gs_status gs_cfg__list_add(struct gs_cfg_strlist *l, const char *s, struct gs_err *err)
{
    for (size_t i = 0; i < l->n; i++)
        if (!strcmp(l->v[i], s))
            return GS_OK;
    char *copy = gs_strdup(s);
    char **v = copy ? gs_realloc(l->v, (l->n + 1) * sizeof(*v)) : NULL;
    if (!v) {
        gs_free(copy);
        return gs_err_set(err, GS_NOMEM, "out of memory");
    }
    v[l->n++] = copy;
    l->v = v;
    return GS_OK;
}

void gs_cfg__field_clear(struct gs_cfg *cfg, const struct gs_cfg_opt *o)
{
    void *f = gs_cfg__field(cfg, o);
    if (o->type == GS_CFG_STR)
        gs_free(*(char **)f);
    else if (o->type == GS_CFG_LIST)
        gs_cfg__list_clear(f);
    memset(f, 0, gs_cfg__field_size(o));
}

bool gs_cfg__field_equal(const struct gs_cfg *a, const struct gs_cfg *b, const struct gs_cfg_opt *o)
{
    const void *fa = gs_cfg__cfield(a, o), *fb = gs_cfg__cfield(b, o);
    switch (o->type) {
    case GS_CFG_STR: {
        const char *sa = *(char *const *)fa, *sb = *(char *const *)fb;
        return (!sa && !sb) || (sa && sb && !strcmp(sa, sb));
    }
    case GS_CFG_LIST: {
        const struct gs_cfg_strlist *la = fa, *lb = fb;
        if (la->n != lb->n)
            return false;
        for (size_t i = 0; i < la->n; i++)
            if (strcmp(la->v[i], lb->v[i]))
                return false;
        return true;
    }
    case GS_CFG_FLOAT:
        return *(const double *)fa == *(const double *)fb;
    default:
        return !memcmp(fa, fb, gs_cfg__field_size(o));
    }
}

/* ---- sizes --------------------------------------------------------------- */

struct unit {
    const char *name;
    uint64_t mult;
};

/* Matched case-insensitively; the bare letters are binary, as in most tools. */
static const struct unit units[] = {
    {"", 1},
    {"b", 1},
    {"k", 1ull << 10},
    {"kib", 1ull << 10},
    {"kb", 1000ull},
    {"m", 1ull << 20},
    {"mib", 1ull << 20},
    {"mb", 1000000ull},
    {"g", 1ull << 30},
    {"gib", 1ull << 30},
    {"gb", 1000000000ull},
    {"t", 1ull << 40},
    {"tib", 1ull << 40},
    {"tb", 1000000000000ull},
};

bool gs_cfg__parse_bytes(const char *s, uint64_t *out)
{
    const char *p = s;
    if (!isdigit((unsigned char)*p))
        return false;
    uint64_t ip = 0;
    for (; isdigit((unsigned char)*p); p++)
        if (gs_mul_overflow(ip, 10, &ip) || gs_add_overflow(ip, (uint64_t)(*p - '0'), &ip))
            return false;
    /* The fraction is kept as frac / 10^nfrac, at most 9 digits, exact. */
    uint64_t frac = 0, den = 1;
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p))
            return false;
        for (; isdigit((unsigned char)*p); p++) {
            if (den >= 1000000000ull)
                return false;
            frac = frac * 10 + (uint64_t)(*p - '0');
            den *= 10;
        }
    }
    while (*p == ' ')
        p++;
    for (size_t i = 0; i < GS_ARRAY_LEN(units); i++) {
        if (strcasecmp(p, units[i].name))
            continue;
        uint64_t v, f;
        if (gs_mul_overflow(ip, units[i].mult, &v))
            return false;
        /* frac/den * mult, floored; mult <= 2^40 and frac < 10^9 fit in 128 bits. */
        f = (uint64_t)(((unsigned __int128)frac * units[i].mult) / den);
        if (gs_add_overflow(v, f, &v))
            return false;
        *out = v;
        return true;
    }
    return false;
}

void gs_cfg__format_bytes(uint64_t v, char *buf, size_t cap)
{
    static const char *const names[] = {"TiB", "GiB", "MiB", "KiB"};
    for (int i = 0; i < 4; i++) {
        uint64_t m = 1ull << (10 * (4 - i));
        if (v && v % m == 0) {
            snprintf(buf, cap, "%llu%s", (unsigned long long)(v / m), names[i]);
            return;
        }
    }
    snprintf(buf, cap, "%llu", (unsigned long long)v);
}

/* ---- setting values ------------------------------------------------------ */

static void fmt_range(const struct gs_cfg_opt *o, char *buf, size_t cap)
{
    if (o->type == GS_CFG_BYTES) {
        char a[32], b[32];
        gs_cfg__format_bytes((uint64_t)o->min, a, sizeof(a));
        gs_cfg__format_bytes((uint64_t)o->max, b, sizeof(b));
        snprintf(buf, cap, "[%s, %s]", a, b);
    } else if (o->type == GS_CFG_FLOAT) {
        snprintf(buf, cap, "[%g, %g]", o->min, o->max);
    } else {
        snprintf(buf, cap, "[%.0f, %.0f]", o->min, o->max);
    }
}

static enum gs_status out_of_range(const struct gs_cfg_opt *o, const char *shown, const char *where,
                                   struct gs_err *err)
{
    char r[80];
    fmt_range(o, r, sizeof(r));
    return gs_err_set(err, GS_INVAL, "%s: %s is out of range %s", where, shown, r);
}

static enum gs_status set_int(void *cfg, const struct gs_cfg_opt *o, int64_t v,
                              const char *shown, const char *where, struct gs_err *err)
{
    if ((double)v < o->min || (double)v > o->max)
        return out_of_range(o, shown, where, err);
    *(int64_t *)gs_cfg__field(cfg, o) = v;
    return GS_OK;
}

static enum gs_status set_bytes(void *cfg, const struct gs_cfg_opt *o, uint64_t v,
                                const char *shown, const char *where, struct gs_err *err)
{
    if ((double)v < o->min || (double)v > o->max)
        return out_of_range(o, shown, where, err);
    *(uint64_t *)gs_cfg__field(cfg, o) = v;
    return GS_OK;
}

static enum gs_status set_float(void *cfg, const struct gs_cfg_opt *o, double v,
                                const char *shown, const char *where, struct gs_err *err)
{
    if (!isfinite(v) || v < o->min || v > o->max)
        return out_of_range(o, shown, where, err);
    *(double *)gs_cfg__field(cfg, o) = v;
    return GS_OK;
}

static enum gs_status set_enum(void *cfg, const struct gs_cfg_opt *o, const char *s,
                               const char *where, struct gs_err *err)
{
    char list[256];
    size_t n = 0;
    list[0] = 0;
    for (int i = 0; o->choices[i]; i++) {
        if (!strcmp(o->choices[i], s)) {
            *(int *)gs_cfg__field(cfg, o) = i;
            return GS_OK;
        }
        n += (size_t)snprintf(list + n, sizeof(list) - GS_MIN(n, sizeof(list)), "%s%s",
                              i ? ", " : "", o->choices[i]);
        n = GS_MIN(n, sizeof(list) - 1);
    }
    return gs_err_set(err, GS_INVAL, "%s: '%s' is not one of %s", where, s, list);
}

static enum gs_status set_str(void *cfg, const struct gs_cfg_opt *o, const char *s,
                              struct gs_err *err)
{
    char *copy = NULL;
    if (s && *s && !(copy = gs_strdup(s)))
        return gs_err_set(err, GS_NOMEM, "out of memory");
    char **f = gs_cfg__field(cfg, o);
    gs_free(*f);
    *f = copy;
    return GS_OK;
}

static bool parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"true", "1", "yes", "on"};
    static const char *const no[] = {"false", "0", "no", "off"};
    for (size_t i = 0; i < GS_ARRAY_LEN(yes); i++) {
        if (!strcasecmp(s, yes[i])) {
            *out = true;
            return true;
        }
        if (!strcasecmp(s, no[i])) {
            *out = false;
            return true;
        }
    }
    return false;
}

/* The value as shown in a message: secrets are never echoed. */
static const char *shown(const struct gs_cfg_opt *o, const char *s)
{
    return (o->flags & GS_CFG_F_SECRET) ? "(secret)" : s;
}

enum gs_status gs_cfg__set_text(void *cfg, const struct gs_cfg_opt *o, const char *s,
                                const char *where, struct gs_err *err)
{
    char *end = NULL;
    switch (o->type) {
    case GS_CFG_BOOL: {
        bool b;
        if (!parse_bool(s, &b))
            return gs_err_set(err, GS_INVAL, "%s: '%s' is not a boolean (true/false)", where, s);
        *(bool *)gs_cfg__field(cfg, o) = b;
        return GS_OK;
    }
    case GS_CFG_INT: {
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (!*s || isspace((unsigned char)*s) || *end)
            return gs_err_set(err, GS_INVAL, "%s: '%s' is not an integer", where, s);
        if (errno == ERANGE)
            return out_of_range(o, s, where, err);
        return set_int(cfg, o, v, s, where, err);
    }
    case GS_CFG_BYTES: {
        uint64_t v;
        if (!gs_cfg__parse_bytes(s, &v))
            return gs_err_set(err, GS_INVAL,
                              "%s: '%s' is not a size (e.g. 512MiB, 2G, 1.5GiB, 65536)", where, s);
        return set_bytes(cfg, o, v, s, where, err);
    }
    case GS_CFG_FLOAT: {
        errno = 0;
        double v = strtod(s, &end);
        if (!*s || isspace((unsigned char)*s) || *end || errno == ERANGE)
            return gs_err_set(err, GS_INVAL, "%s: '%s' is not a number", where, s);
        return set_float(cfg, o, v, s, where, err);
    }
    case GS_CFG_STR:
        return set_str(cfg, o, s, err);
    case GS_CFG_ENUM:
        return set_enum(cfg, o, s, where, err);
    case GS_CFG_LIST:
        break;
    }
    return gs_err_set(err, GS_INVAL, "%s: list value '%s' set as a scalar", where, shown(o, s));
}

static const char *json_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a number with a fraction";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "?";
}

static enum gs_status wrong_type(const char *where, const char *want, const json_t *v,
                                 struct gs_err *err)
{
    return gs_err_set(err, GS_INVAL, "%s: expects %s, got %s", where, want, json_kind(v));
}

enum gs_status gs_cfg__set_json(struct gs_cfg *cfg, const struct gs_cfg_opt *o, json_t *v,
                                const char *where, struct gs_err *err)
{
    char num[64];
    switch (o->type) {
    case GS_CFG_BOOL:
        if (!json_is_boolean(v))
            return wrong_type(where, "true or false", v, err);
        *(bool *)gs_cfg__field(cfg, o) = json_is_true(v);
        return GS_OK;
    case GS_CFG_INT:
        if (!json_is_integer(v))
            return wrong_type(where, "an integer", v, err);
        snprintf(num, sizeof(num), "%lld", (long long)json_integer_value(v));
        return set_int(cfg, o, json_integer_value(v), num, where, err);
    case GS_CFG_BYTES:
        if (json_is_string(v))
            return gs_cfg__set_text(cfg, o, json_string_value(v), where, err);
        if (!json_is_integer(v))
            return wrong_type(where, "a size (integer bytes or a string like \"512MiB\")", v, err);
        snprintf(num, sizeof(num), "%lld", (long long)json_integer_value(v));
        if (json_integer_value(v) < 0)
            return out_of_range(o, num, where, err);
        return set_bytes(cfg, o, (uint64_t)json_integer_value(v), num, where, err);
    case GS_CFG_FLOAT:
        if (!json_is_number(v))
            return wrong_type(where, "a number", v, err);
        snprintf(num, sizeof(num), "%g", json_number_value(v));
        return set_float(cfg, o, json_number_value(v), num, where, err);
    case GS_CFG_STR:
        if (json_is_null(v))
            return set_str(cfg, o, NULL, err);
        if (!json_is_string(v))
            return wrong_type(where, "a string", v, err);
        return set_str(cfg, o, json_string_value(v), err);
    case GS_CFG_ENUM:
        if (!json_is_string(v))
            return wrong_type(where, "a string", v, err);
        return set_enum(cfg, o, json_string_value(v), where, err);
    case GS_CFG_LIST: {
        struct gs_cfg_strlist *l = gs_cfg__field(cfg, o);
        gs_cfg__list_clear(l);
        /* One string is a list of one, refused when empty as an element or a
         * flag is: "api_key": "" once configured an empty API key. */
        if (json_is_string(v) && !*json_string_value(v))
            return gs_err_set(err, GS_INVAL, "%s: empty value", where);
        if (json_is_string(v))
            return gs_cfg__list_add(l, json_string_value(v), err);
        if (!json_is_array(v))
            return wrong_type(where, "an array of strings", v, err);
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e)
        {
            if (!json_is_string(e))
                return gs_err_set(err, GS_INVAL, "%s: element %zu expects a string, got %s", where,
                                  i, json_kind(e));
            if (!*json_string_value(e))
                return gs_err_set(err, GS_INVAL, "%s: element %zu is empty", where, i);
            enum gs_status st = gs_cfg__list_add(l, json_string_value(e), err);
            if (st)
                return st;
        }
        return GS_OK;
    }
    }
    return gs_err_set(err, GS_INVAL, "%s: unknown option type", where);
}
