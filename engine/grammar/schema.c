/*
 * engine/grammar/schema.c - JSON Schema to GBNF (gs_grammar_from_json_schema)
 * and the fixed grammar of response_format json_object.
 *
 * The grammar's sentences are a subset of the JSON texts that validate
 * against the schema: every output validates, but not every valid instance
 * can be produced. Where the two differ it is on purpose and documented in
 * docs/SERVER.md ("JSON Schema"): properties come in the schema's order;
 * other keys are produced only when additionalProperties is true or a schema
 * (never when it is absent); numbers have at most 16 integer and 16 fraction
 * digits; upper bounds over SCHEMA_MAX_REPEAT are tightened to it.
 *
 * A keyword that constrains the instance and cannot be enforced is refused,
 * never ignored: GS_INVAL with "unsupported keyword 'K' at #/json/pointer"
 * (": reason" may follow), so that a server can answer 400 naming it.
 * Annotations, "x-" extensions and keywords starting with "_" are ignored.
 *
 * Shape of the output: one rule per schema node that needs one, one rule per
 * $ref target (emitted once, so recursion and sharing cost nothing), and the
 * primitive rules (ws, string, number, ...) that were used, emitted last.
 * Every value rule ends with the bounded whitespace rule ws, and nothing
 * else may be followed by whitespace, so that the grammar is not ambiguous
 * about where spaces go.
 *
 * Bounds: the converter's recursion (SCHEMA_MAX_DEPTH), the grammar text
 * (SCHEMA_MAX_GBNF_BYTES), rules, enum sizes, repetition counts and schema
 * merges are limited, each failure naming its limit. Nothing here allocates
 * in proportion to a number written in the schema.
 *
 * Threads: no state outside a call; any thread may call it.
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "engine/grammar.h"

/* ---- limits ---------------------------------------------------------------- */

#define SCHEMA_MAX_GBNF_BYTES (1u << 20) /* the grammar text */
#define SCHEMA_MAX_DEPTH 64              /* nested schemas the converter descends */
#define SCHEMA_MAX_RULES 20000           /* rules of one grammar */
#define SCHEMA_MAX_REPEAT 4096           /* string lengths, array sizes, regex counts */
#define SCHEMA_MAX_ENUM 4096             /* values of one enum */
#define SCHEMA_MAX_MERGES 2000           /* schema intersections (allOf, $ref siblings) */
#define SCHEMA_MAX_REF_CHAIN 32          /* $ref followed while intersecting */
#define SCHEMA_MAX_PATTERN 4096          /* bytes of one pattern */
#define SCHEMA_INT_DIGITS 16             /* digits of an integer part without bounds */
#define SCHEMA_REPEAT_BUDGET 32768       /* bounded repetitions of strings and arrays, all
                                          * together (each costs the compiler a rule per
                                          * count): upper bounds are tightened to fit */
#define SCHEMA_MAX_BOUND 1e18            /* largest numeric bound taken literally */

/* ---- growing text buffer --------------------------------------------------- */

enum { SB_OK = 0, SB_LIMIT = 1, SB_NOMEM = 2 };

struct sbuf {
    char *p; /* gs_malloc'ed, NUL-terminated when n > 0 */
    size_t n, cap;
    int bad; /* SB_*: the first failure; later appends do nothing */
};

static bool sb_reserve(struct sbuf *b, size_t add)
{
    if (b->bad)
        return false;
    if (b->n + add + 1 > SCHEMA_MAX_GBNF_BYTES) {
        b->bad = SB_LIMIT;
        return false;
    }
    if (b->n + add + 1 <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + add + 1)
        cap *= 2;
    char *p = gs_realloc(b->p, cap);
    if (!p) {
        b->bad = SB_NOMEM;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

static void sb_putn(struct sbuf *b, const char *s, size_t n)
{
    if (!sb_reserve(b, n))
        return;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sb_puts(struct sbuf *b, const char *s)
{
    sb_putn(b, s, strlen(s));
}

static void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(struct sbuf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(tmp)) {
        b->bad = b->bad ? b->bad : SB_LIMIT;
        return;
    }
    sb_putn(b, tmp, (size_t)n);
}

static void sb_free(struct sbuf *b)
{
    gs_free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

static const char *sb_str(const struct sbuf *b)
{
    return b->n ? b->p : "";
}

/* A GBNF "literal" of the bytes s[n]. */
static void sb_lit(struct sbuf *b, const char *s, size_t n)
{
    sb_putn(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            char e[2] = {'\\', (char)ch};
            sb_putn(b, e, 2);
        } else if (ch == '\n') {
            sb_putn(b, "\\n", 2);
        } else if (ch == '\r') {
            sb_putn(b, "\\r", 2);
        } else if (ch == '\t') {
            sb_putn(b, "\\t", 2);
        } else if (ch < 0x20 || ch == 0x7f) {
            sb_printf(b, "\\x%02X", ch);
        } else {
            sb_putn(b, (const char *)&s[i], 1);
        }
    }
    sb_putn(b, "\" ", 2);
}

/* ---- UTF-8 ----------------------------------------------------------------- */

/* Decodes one code point of s[n] at *i (advancing it); -1 on a bad sequence. */
static int32_t utf8_next(const char *s, size_t n, size_t *i)
{
    const unsigned char *u = (const unsigned char *)s;
    unsigned char c0 = u[*i];
    int len = c0 < 0x80 ? 1 : (c0 >> 5) == 6 ? 2 : (c0 >> 4) == 14 ? 3 : (c0 >> 3) == 30 ? 4 : 0;
    if (!len || *i + (size_t)len > n)
        return -1;
    int32_t cp = len == 1 ? c0 : len == 2 ? (c0 & 0x1f) : len == 3 ? (c0 & 0x0f) : (c0 & 0x07);
    for (int k = 1; k < len; k++) {
        if ((u[*i + (size_t)k] & 0xc0) != 0x80)
            return -1;
        cp = (cp << 6) | (u[*i + (size_t)k] & 0x3f);
    }
    *i += (size_t)len;
    return cp;
}

static size_t utf8_put(char *out, uint32_t cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Code points of a UTF-8 string (what JSON Schema's lengths count). */
static size_t utf8_count(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += ((unsigned char)s[i] & 0xc0) != 0x80;
    return k;
}

/* Whether cp may stand for itself inside a JSON string (else it must be
 * escaped). The grammar's plain characters are exactly these. */
static bool json_plain(uint32_t cp)
{
    return cp >= 0x20 && cp != '"' && cp != '\\' && cp != 0x7f && !(cp >= 0xd800 && cp <= 0xdfff) &&
           cp <= 0x10ffff;
}

/* Appends a GBNF literal of cp as it is written inside a JSON string. */
static void sb_json_char(struct sbuf *b, uint32_t cp)
{
    char tmp[8];
    size_t n;
    if (cp == '"' || cp == '\\') {
        tmp[0] = '\\';
        tmp[1] = (char)cp;
        n = 2;
    } else if (cp == '\n' || cp == '\r' || cp == '\t') {
        tmp[0] = '\\';
        tmp[1] = cp == '\n' ? 'n' : cp == '\r' ? 'r' : 't';
        n = 2;
    } else if (cp < 0x20 || cp == 0x7f) {
        n = (size_t)snprintf(tmp, sizeof(tmp), "\\u%04x", (unsigned)cp);
    } else {
        n = utf8_put(tmp, cp);
    }
    sb_lit(b, tmp, n);
}

/* ---- the fixed primitive rules --------------------------------------------- */

enum {
    P_WS = 1u << 0,
    P_VALUE = 1u << 1,
    P_OBJECT = 1u << 2,
    P_ARRAY = 1u << 3,
    P_STRING = 1u << 4,
    P_CHAR = 1u << 5,
    P_NUMBER = 1u << 6,
    P_INTEGER = 1u << 7,
    P_BOOLEAN = 1u << 8,
    P_NULL = 1u << 9,
    P_KCHAR = 1u << 10,
    P_DATE = 1u << 11,
    P_TIME = 1u << 12,
    P_DATETIME = 1u << 13,
    P_UUID = 1u << 14,
    P_EMAIL = 1u << 15,
    P_IPV4 = 1u << 16,
    P_IPV6 = 1u << 17,
    P_HOSTNAME = 1u << 18,
    P_URI = 1u << 19,
    P_HEX = 1u << 20,
    P_OCTET = 1u << 21,
    P_LABEL = 1u << 22,
    P_URL = 1u << 23,
    P_SEMVER = 1u << 24,
    P_SEMVER_N = 1u << 25,
};

struct prim {
    unsigned flag;
    const char *name;
    const char *body; /* GBNF */
    unsigned deps;    /* the primitives body refers to */
};

/* The whitespace is llama.cpp's `space` made optional as a whole: nothing, one
 * space, or one newline and up to 20 blanks, so that a model cannot loop on it.
 * Numbers have at most 16 integer and 16 fraction digits and 2 exponent
 * digits, for the same reason (and so that 1e999 cannot become infinity). The
 * \u escapes leave out surrogates: a pair would be one code point to a
 * validator but two characters to the length bounds. */
static const struct prim prims[] = {
    {P_WS, "ws", "( \" \" | \"\\n\" [ \\t]{0,20} )?", 0},
    {P_VALUE, "value",
     "object | array | string | number | ( \"true\" | \"false\" | \"null\" ) ws",
     P_OBJECT | P_ARRAY | P_STRING | P_NUMBER | P_WS},
    {P_OBJECT, "object",
     "\"{\" ws ( string \":\" ws value ( \",\" ws string \":\" ws value )* )? \"}\" ws",
     P_STRING | P_VALUE | P_WS},
    {P_ARRAY, "array", "\"[\" ws ( value ( \",\" ws value )* )? \"]\" ws", P_VALUE | P_WS},
    {P_STRING, "string", "\"\\\"\" char* \"\\\"\" ws", P_CHAR | P_WS},
    {P_CHAR, "char",
     "[^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" ( [0-9a-cA-CefEF] "
     "[0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} ) )",
     0},
    {P_NUMBER, "number",
     "\"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? ( [eE] [+\\-]? [0-9]{1,2} )? ws",
     P_WS},
    {P_INTEGER, "integer", "\"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ws", P_WS},
    {P_BOOLEAN, "boolean", "( \"true\" | \"false\" ) ws", P_WS},
    {P_NULL, "null", "\"null\" ws", P_WS},
    {P_KCHAR, "kchar", "[^\"\\\\\\x7F\\x00-\\x1F]", 0},
    /* RFC 3339 full-date; days by month, 29 February left out (leap years). */
    {P_DATE, "fmt-date",
     "[1-9] [0-9]{3} \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | "
     "\"3\" [01] ) | ( \"0\" [469] | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" ) | "
     "\"02-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) )",
     0},
    {P_TIME, "fmt-time",
     "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,6} )? "
     "( \"Z\" | [+\\-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )",
     0},
    {P_DATETIME, "fmt-date-time", "fmt-date \"T\" fmt-time", P_DATE | P_TIME},
    {P_HEX, "hex", "[0-9a-fA-F]", 0},
    {P_UUID, "fmt-uuid", "hex{8} \"-\" hex{4} \"-\" hex{4} \"-\" hex{4} \"-\" hex{12}", P_HEX},
    {P_LABEL, "label", "[a-zA-Z0-9]{1,63} ( \"-\" [a-zA-Z0-9]{1,63} ){0,8}", 0},
    {P_HOSTNAME, "fmt-hostname", "label ( \".\" label ){0,8}", P_LABEL},
    {P_EMAIL, "fmt-email",
     "[a-zA-Z0-9_+\\-]{1,64} ( \".\" [a-zA-Z0-9_+\\-]{1,64} ){0,4} \"@\" label ( \".\" label ){1,8}",
     P_LABEL},
    {P_OCTET, "octet", "\"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9]? [0-9]", 0},
    {P_IPV4, "fmt-ipv4", "octet \".\" octet \".\" octet \".\" octet", P_OCTET},
    {P_IPV6, "fmt-ipv6", "hex{1,4} ( \":\" hex{1,4} ){7}", P_HEX},
    /* An absolute URI: scheme "://" host, then an optional path of unreserved
     * characters. */
    {P_URL, "fmt-url",
     "\"http\" \"s\"? \"://\" fmt-hostname ( \":\" [0-9]{1,5} )? ( \"/\" "
     "[a-zA-Z0-9._~%!$&'()*+,;=:@\\-]{0,64} ){0,16}",
     P_HOSTNAME},
    /* Semantic versioning 2.0: MAJOR.MINOR.PATCH, numbers without leading
     * zeros, an optional pre-release of alphanumeric identifiers. */
    {P_SEMVER, "fmt-semver",
     "semver-n \".\" semver-n \".\" semver-n ( \"-\" [0-9A-Za-z]{1,20} ( \".\" "
     "[0-9A-Za-z]{1,20} ){0,4} )?",
     P_SEMVER_N},
    {P_SEMVER_N, "semver-n", "\"0\" | [1-9] [0-9]{0,8}", 0},
    {P_URI, "fmt-uri",
     "[a-z] [a-z0-9+.\\-]{0,15} \"://\" fmt-hostname ( \":\" [0-9]{1,5} )? ( \"/\" "
     "[a-zA-Z0-9._~%!$&'()*+,;=:@\\-]{0,64} ){0,16}",
     P_HOSTNAME},
};

static void prims_emit(struct sbuf *out, unsigned used)
{
    /* Close the set under dependencies (deps point at lower or higher rows). */
    for (bool grew = true; grew;) {
        grew = false;
        for (size_t i = 0; i < GS_ARRAY_LEN(prims); i++)
            if ((used & prims[i].flag) && (used | prims[i].deps) != used) {
                used |= prims[i].deps;
                grew = true;
            }
    }
    for (size_t i = 0; i < GS_ARRAY_LEN(prims); i++)
        if (used & prims[i].flag) {
            sb_printf(out, "%s ::= ", prims[i].name);
            sb_puts(out, prims[i].body);
            sb_puts(out, "\n");
        }
}

const char *gs_grammar_json_object_gbnf(void)
{
    return "root ::= object\n"
           "value ::= object | array | string | number | ( \"true\" | \"false\" | \"null\" ) ws\n"
           "object ::= \"{\" ws ( string \":\" ws value ( \",\" ws string \":\" ws value )* )? "
           "\"}\" ws\n"
           "array ::= \"[\" ws ( value ( \",\" ws value )* )? \"]\" ws\n"
           "string ::= \"\\\"\" char* \"\\\"\" ws\n"
           "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" ( "
           "[0-9a-cA-CefEF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} ) )\n"
           "number ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? ( [eE] [+\\-]? "
           "[0-9]{1,2} )? ws\n"
           "ws ::= ( \" \" | \"\\n\" [ \\t]{0,20} )?\n";
}

/* ---- the converter ---------------------------------------------------------- */

struct refent {
    const json_t *target; /* borrowed from the schema */
    char *name;           /* its rule, gs_malloc'ed */
    bool done;            /* its rule is written */
    unsigned head;        /* c->containers when its expansion began */
};

struct conv {
    const json_t *root;
    struct gs_err *err;
    bool failed;
    struct sbuf out;      /* rules written so far */
    char path[1024];      /* JSON pointer of the schema being converted, "" at the root */
    size_t path_len;
    bool path_cut;        /* a segment did not fit: the message says "..." */
    unsigned depth;       /* nested gen_schema calls */
    unsigned containers;  /* objects and arrays entered: input consumed */
    unsigned n_rules;
    unsigned used;        /* P_* primitives referred to */
    struct refent *refs;
    size_t n_refs, cap_refs;
    json_t *owned;        /* an array holding the schemas built by merging */
    unsigned n_merges;
    uint64_t rep_cap;     /* upper bounds of lengths and item counts are tightened to this */
    uint64_t *reps;       /* [n_reps][2]: each bounded repetition's lower and upper bound */
    size_t n_reps, cap_reps;
};

/* Records a bounded repetition (lo..hi, hi <= SCHEMA_MAX_REPEAT) and returns
 * the upper bound to write: hi tightened to rep_cap, never below lo. */
static uint64_t rep_upper(struct conv *c, uint64_t lo, uint64_t hi)
{
    if (c->n_reps == c->cap_reps) {
        size_t cap = c->cap_reps ? c->cap_reps * 2 : 64;
        uint64_t *r = gs_realloc(c->reps, cap * 2 * sizeof(*r));
        if (r) {
            c->reps = r;
            c->cap_reps = cap;
        }
    }
    if (c->n_reps < c->cap_reps) {
        c->reps[2 * c->n_reps] = lo;
        c->reps[2 * c->n_reps + 1] = hi;
        c->n_reps++;
    }
    return GS_MAX(lo, GS_MIN(hi, c->rep_cap));
}

/* Records the first failure only: later ones are consequences. */
static bool fail(struct conv *c, enum gs_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool fail(struct conv *c, enum gs_status st, const char *fmt, ...)
{
    if (c->failed)
        return false;
    c->failed = true;
    if (c->err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err->msg, sizeof(c->err->msg), fmt, ap);
        va_end(ap);
        c->err->code = st;
    }
    return false;
}

static const char *cpath(const struct conv *c)
{
    return c->path_cut ? "#..." : "#";
}

/* "unsupported keyword 'key' at #/path[: reason]" */
static bool refuse(struct conv *c, const char *key, const char *reason)
{
    return fail(c, GS_INVAL, "unsupported keyword '%s' at %s%s%s%s", key, cpath(c), c->path,
                reason ? ": " : "", reason ? reason : "");
}

/* A keyword whose value is malformed ("'minLength' at #/a: must be ..."). */
static bool bad_value(struct conv *c, const char *key, const char *what)
{
    return fail(c, GS_INVAL, "keyword '%s' at %s%s: %s", key, cpath(c), c->path, what);
}

static bool over_limit(struct conv *c, const char *limit, unsigned long long value)
{
    return fail(c, GS_INVAL, "over the limit of %llu %s at %s%s", value, limit, cpath(c), c->path);
}

/* Pushes one JSON pointer segment (escaped: ~ is ~0, / is ~1); returns the old
 * length for path_pop. */
static size_t path_push(struct conv *c, const char *seg)
{
    size_t old = c->path_len;
    char tmp[sizeof(c->path)];
    size_t n = 0;
    tmp[n++] = '/';
    for (const char *s = seg; *s && n + 3 < sizeof(tmp); s++) {
        if (*s == '~' || *s == '/') {
            tmp[n++] = '~';
            tmp[n++] = *s == '~' ? '0' : '1';
        } else {
            tmp[n++] = *s;
        }
    }
    if (c->path_len + n + 1 > sizeof(c->path)) {
        c->path_cut = true;
        return old;
    }
    memcpy(c->path + c->path_len, tmp, n);
    c->path_len += n;
    c->path[c->path_len] = '\0';
    return old;
}

static size_t path_push_index(struct conv *c, const char *key, size_t i)
{
    size_t old = path_push(c, key);
    char num[24];
    snprintf(num, sizeof(num), "%zu", i);
    path_push(c, num);
    return old;
}

static void path_pop(struct conv *c, size_t old)
{
    c->path_len = old;
    c->path[old] = '\0';
}

/* A fresh rule name from a hint: letters and digits kept, the rest '-'. */
static char *rule_name(struct conv *c, const char *hint)
{
    if (c->n_rules >= SCHEMA_MAX_RULES) {
        over_limit(c, "rules", SCHEMA_MAX_RULES);
        return NULL;
    }
    char buf[64];
    size_t n = 0;
    for (const char *s = hint; *s && n < 32; s++) {
        char ch = isalnum((unsigned char)*s) ? *s : '-';
        if (ch == '-' && (n == 0 || buf[n - 1] == '-'))
            continue;
        buf[n++] = ch;
    }
    while (n && buf[n - 1] == '-')
        n--;
    if (!n)
        buf[n++] = 's';
    snprintf(buf + n, sizeof(buf) - n, "-%u", c->n_rules++);
    char *name = gs_strdup(buf);
    if (!name)
        fail(c, GS_NOMEM, "out of memory");
    return name;
}

static bool rule_add(struct conv *c, const char *name, const struct sbuf *body)
{
    if (body->bad == SB_NOMEM)
        return fail(c, GS_NOMEM, "out of memory");
    if (body->bad)
        return over_limit(c, "bytes of grammar", SCHEMA_MAX_GBNF_BYTES);
    sb_puts(&c->out, name);
    sb_puts(&c->out, " ::= ");
    sb_puts(&c->out, body->n ? body->p : "\"\"");
    sb_puts(&c->out, "\n");
    if (c->out.bad == SB_NOMEM)
        return fail(c, GS_NOMEM, "out of memory");
    if (c->out.bad)
        return over_limit(c, "bytes of grammar", SCHEMA_MAX_GBNF_BYTES);
    return true;
}

/* Keeps a schema built here alive until the end of the call (steals v). */
static json_t *own(struct conv *c, json_t *v)
{
    if (!v || json_array_append_new(c->owned, v)) {
        fail(c, GS_NOMEM, "out of memory");
        return NULL;
    }
    return v;
}

/* ---- keywords --------------------------------------------------------------- */

enum kw_kind {
    KW_UNSUPPORTED, /* a JSON Schema keyword that would constrain, not enforced here */
    KW_ANNOTATION, /* constrains nothing */
    KW_CONTAINER,  /* holds schemas only reached through $ref */
    KW_CONSTRAINT, /* handled below */
};

static const char *const annotations[] = {
    "title",     "description", "default",    "examples",   "example",  "$schema",
    "$id",       "id",          "$comment",   "readOnly",   "writeOnly", "deprecated",
    "markdownDescription", "$anchor", "$vocabulary", "contentEncoding", "contentMediaType",
    "contentSchema", /* annotations in 2019-09 and 2020-12; validators do not assert them */
    "self", /* Snowplow/Iglu self-describing metadata: vendor, name, format, version */
};

/*
 * Keywords of the JSON Schema vocabularies (drafts 4 to 2020-12) that would
 * constrain an instance and that the converter does not enforce: refused.
 * A keyword in no draft's vocabulary ("javaType", "links", a typo such as
 * "pettern") constrains nothing: the specification has implementations treat
 * it as an annotation, and every validator accepts any instance for it, so
 * it is ignored as the annotations above are.
 */
static const char *const unsupported[] = {
    "if",           "then",          "else",         "contains",          "minContains",
    "maxContains",  "propertyNames", "dependentSchemas", "unevaluatedItems",
    "unevaluatedProperties", "$dynamicRef", "$dynamicAnchor", "$recursiveRef",
    "$recursiveAnchor",
};

static const char *const constraints[] = {
    "type",          "enum",          "const",         "properties",       "required",
    "additionalProperties", "patternProperties", "items", "prefixItems",   "additionalItems",
    "minItems",      "maxItems",      "uniqueItems",   "minLength",        "maxLength",
    "pattern",       "format",        "minimum",       "maximum",          "exclusiveMinimum",
    "exclusiveMaximum", "multipleOf", "anyOf",         "oneOf",            "allOf",
    "$ref",          "minProperties", "maxProperties", "dependencies",     "dependentRequired",
    "not", /* only as {"not": {}}, which matches nothing: see is_never */
};

static enum kw_kind kw_kind(const char *k)
{
    if (k[0] == '_' || (k[0] == 'x' && k[1] == '-'))
        return KW_ANNOTATION;
    if (!strcmp(k, "definitions") || !strcmp(k, "$defs"))
        return KW_CONTAINER;
    for (size_t i = 0; i < GS_ARRAY_LEN(annotations); i++)
        if (!strcmp(k, annotations[i]))
            return KW_ANNOTATION;
    for (size_t i = 0; i < GS_ARRAY_LEN(constraints); i++)
        if (!strcmp(k, constraints[i]))
            return KW_CONSTRAINT;
    for (size_t i = 0; i < GS_ARRAY_LEN(unsupported); i++)
        if (!strcmp(k, unsupported[i]))
            return KW_UNSUPPORTED;
    return KW_ANNOTATION; /* in no vocabulary: see unsupported[] */
}

/* Refuses the first keyword of s that would constrain and is not enforced. */
static bool check_keywords(struct conv *c, const json_t *s)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v)
    {
        if (kw_kind(k) == KW_UNSUPPORTED)
            return refuse(c, k, NULL);
    }
    return true;
}

/* Whether s has a constraint keyword other than those named in skip. */
static bool has_constraints_besides(const json_t *s, const char *const *skip, size_t n_skip)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v)
    {
        if (kw_kind(k) != KW_CONSTRAINT)
            continue;
        bool skipped = false;
        for (size_t i = 0; i < n_skip; i++)
            skipped |= !strcmp(k, skip[i]);
        if (!skipped)
            return true;
    }
    return false;
}

/* A non-negative integer keyword; absent leaves *out. */
static bool get_count(struct conv *c, const json_t *s, const char *key, uint64_t *out, bool *present)
{
    const json_t *v = json_object_get(s, key);
    if (present)
        *present = v != NULL;
    if (!v)
        return true;
    double d;
    if (json_is_integer(v)) {
        if (json_integer_value(v) < 0)
            return bad_value(c, key, "must be a non-negative integer");
        *out = (uint64_t)json_integer_value(v);
        return true;
    }
    if (json_is_real(v) && (d = json_real_value(v)) >= 0 && d == floor(d) && d < 1.8e19) {
        *out = (uint64_t)d;
        return true;
    }
    return bad_value(c, key, "must be a non-negative integer");
}

static bool get_number(const json_t *v, double *out)
{
    if (json_is_integer(v)) {
        *out = (double)json_integer_value(v);
        return true;
    }
    if (json_is_real(v)) {
        *out = json_real_value(v);
        return isfinite(*out);
    }
    return false;
}

/* JSON types as a bit set. */
enum {
    T_NULL = 1,
    T_BOOLEAN = 2,
    T_OBJECT = 4,
    T_ARRAY = 8,
    T_STRING = 16,
    T_NUMBER = 32,  /* numbers with a fraction */
    T_INTEGER = 64, /* integral numbers */
    T_ALL = 127,
};

static unsigned type_bit(const char *name)
{
    static const struct {
        const char *name;
        unsigned bits;
    } t[] = {{"null", T_NULL},       {"boolean", T_BOOLEAN}, {"object", T_OBJECT},
             {"array", T_ARRAY},     {"string", T_STRING},   {"number", T_NUMBER | T_INTEGER},
             {"integer", T_INTEGER}};
    for (size_t i = 0; i < GS_ARRAY_LEN(t); i++)
        if (!strcmp(name, t[i].name))
            return t[i].bits;
    return 0;
}

static unsigned value_type(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_NULL:
        return T_NULL;
    case JSON_TRUE:
    case JSON_FALSE:
        return T_BOOLEAN;
    case JSON_OBJECT:
        return T_OBJECT;
    case JSON_ARRAY:
        return T_ARRAY;
    case JSON_STRING:
        return T_STRING;
    case JSON_INTEGER:
        return T_INTEGER;
    case JSON_REAL:
        return json_real_value(v) == floor(json_real_value(v)) ? T_INTEGER : T_NUMBER;
    }
    return 0;
}

/* The types "type" allows (T_ALL when absent); 0 after a failure. */
static unsigned declared_types(struct conv *c, const json_t *s)
{
    const json_t *t = json_object_get(s, "type");
    if (!t)
        return T_ALL;
    if (json_is_string(t)) {
        unsigned b = type_bit(json_string_value(t));
        if (!b)
            refuse(c, "type", "unknown type name");
        return b;
    }
    if (!json_is_array(t) || !json_array_size(t)) {
        bad_value(c, "type", "must be a type name or a non-empty array of them");
        return 0;
    }
    unsigned bits = 0;
    size_t i;
    json_t *e;
    json_array_foreach(t, i, e)
    {
        unsigned b = json_is_string(e) ? type_bit(json_string_value(e)) : 0;
        if (!b) {
            refuse(c, "type", "unknown type name");
            return 0;
        }
        bits |= b;
    }
    return bits;
}

/* JSON equality as validators see it: 1 == 1.0, objects unordered. */
static bool json_same(const json_t *a, const json_t *b)
{
    if (json_is_number(a) && json_is_number(b))
        return json_number_value(a) == json_number_value(b);
    if (json_is_boolean(a) || json_is_boolean(b))
        return json_typeof(a) == json_typeof(b);
    if (json_is_array(a) && json_is_array(b)) {
        if (json_array_size(a) != json_array_size(b))
            return false;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!json_same(json_array_get(a, i), json_array_get(b, i)))
                return false;
        return true;
    }
    if (json_is_object(a) && json_is_object(b)) {
        if (json_object_size(a) != json_object_size(b))
            return false;
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)a, k, v)
        {
            const json_t *w = json_object_get(b, k);
            if (!w || !json_same(v, w))
                return false;
        }
        return true;
    }
    return json_equal(a, b);
}

static bool is_trivial(const json_t *s)
{
    if (json_is_true(s))
        return true;
    if (!json_is_object(s))
        return false;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v)
    {
        if (kw_kind(k) != KW_ANNOTATION && kw_kind(k) != KW_CONTAINER)
            return false;
    }
    return true;
}

/* Whether s matches nothing: false, or {"not": {}} (the idiom for "this
 * property must be absent"). */
static bool is_never(const json_t *s)
{
    if (json_is_false(s))
        return true;
    const json_t *n = json_is_object(s) ? json_object_get(s, "not") : NULL;
    if (!n)
        return false;
    if (json_is_true(n))
        return true;
    if (!json_is_object(n))
        return false;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)n, k, v)
    {
        if (kw_kind(k) == KW_CONSTRAINT || kw_kind(k) == KW_UNSUPPORTED)
            return false;
    }
    return true;
}

/* ---- $ref ------------------------------------------------------------------- */

static int hexval(char ch)
{
    return ch >= '0' && ch <= '9' ? ch - '0'
           : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
           : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
                                    : -1;
}

/* The schema a local reference ("#", "#/definitions/a~1b", percent-escapes
 * allowed) points at; NULL with the error set. */
static const json_t *ref_resolve(struct conv *c, const json_t *ref)
{
    if (!json_is_string(ref)) {
        bad_value(c, "$ref", "must be a string");
        return NULL;
    }
    const char *r = json_string_value(ref);
    if (r[0] != '#') {
        refuse(c, "$ref", "only local references (\"#...\") are supported");
        return NULL;
    }
    if (r[1] != '\0' && r[1] != '/') {
        refuse(c, "$ref", "anchors are not supported, only JSON pointers");
        return NULL;
    }
    const json_t *at = c->root;
    const char *p = r + 1;
    while (*p == '/') {
        p++;
        char seg[512];
        size_t n = 0;
        while (*p && *p != '/') {
            char ch = *p++;
            if (ch == '%' && hexval(p[0]) >= 0 && hexval(p[1]) >= 0) {
                ch = (char)(hexval(p[0]) * 16 + hexval(p[1]));
                p += 2;
            } else if (ch == '~' && (*p == '0' || *p == '1')) {
                ch = *p++ == '0' ? '~' : '/';
            }
            if (n + 1 >= sizeof(seg)) {
                fail(c, GS_INVAL, "'$ref' at %s%s: segment too long", cpath(c), c->path);
                return NULL;
            }
            seg[n++] = ch;
        }
        seg[n] = '\0';
        if (json_is_object(at)) {
            at = json_object_get(at, seg);
        } else if (json_is_array(at)) {
            char *end;
            unsigned long i = strtoul(seg, &end, 10);
            at = n && *end == '\0' ? json_array_get(at, i) : NULL;
        } else {
            at = NULL;
        }
        if (!at)
            break;
    }
    if (!at || *p) {
        fail(c, GS_INVAL, "'$ref' at %s%s: '%s' does not resolve", cpath(c), c->path, r);
        return NULL;
    }
    return at;
}

/* ---- intersections (allOf, $ref with siblings) ------------------------------ */

static json_t *flatten(struct conv *c, const json_t *s, unsigned chain);
static json_t *merge(struct conv *c, json_t *a, json_t *b, unsigned chain);

/* Whether s needs flattening before it can be generated. */
static bool needs_flatten(const json_t *s)
{
    if (!json_is_object(s))
        return false;
    if (json_object_get(s, "allOf"))
        return true;
    if (json_object_get(s, "$ref")) {
        static const char *const only_ref[] = {"$ref"};
        return has_constraints_besides(s, only_ref, 1);
    }
    return false;
}

/* A copy of s without allOf and $ref, intersected with what they name. The
 * result is owned by c (borrowed by the caller). */
static json_t *flatten(struct conv *c, const json_t *s, unsigned chain)
{
    if (chain > SCHEMA_MAX_REF_CHAIN) {
        over_limit(c, "$ref followed while intersecting schemas", SCHEMA_MAX_REF_CHAIN);
        return NULL;
    }
    if (json_is_true(s))
        return own(c, json_object());
    if (json_is_false(s)) {
        refuse(c, "allOf", "a schema that matches nothing (false)");
        return NULL;
    }
    if (!json_is_object(s)) {
        fail(c, GS_INVAL, "schema at %s%s: must be an object or a boolean", cpath(c), c->path);
        return NULL;
    }
    if (!check_keywords(c, s))
        return NULL;
    json_t *base = own(c, json_object());
    if (!base)
        return NULL;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)s, k, v)
    {
        if (strcmp(k, "allOf") && strcmp(k, "$ref") && kw_kind(k) == KW_CONSTRAINT)
            json_object_set(base, k, v);
    }
    const json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        const json_t *target = ref_resolve(c, ref);
        json_t *ft = target ? flatten(c, target, chain + 1) : NULL;
        if (!ft || !(base = merge(c, ft, base, chain + 1)))
            return NULL;
    }
    const json_t *all = json_object_get(s, "allOf");
    if (all) {
        if (!json_is_array(all) || !json_array_size(all)) {
            bad_value(c, "allOf", "must be a non-empty array");
            return NULL;
        }
        size_t i;
        json_t *e;
        json_array_foreach(all, i, e)
        {
            size_t old = path_push_index(c, "allOf", i);
            json_t *fe = flatten(c, e, chain + 1);
            if (fe)
                base = merge(c, base, fe, chain + 1);
            path_pop(c, old);
            if (!fe || !base)
                return NULL;
        }
    }
    return base;
}

static bool key_is(const char *k, const char *const *set, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(k, set[i]))
            return true;
    return false;
}

/* The types a keyword applies to (T_ALL: any). */
static unsigned kw_types(const char *k)
{
    static const char *const obj[] = {"properties",    "required",      "additionalProperties",
                                      "patternProperties", "minProperties", "maxProperties",
                                      "dependencies",  "dependentRequired"};
    static const char *const arr[] = {"items",    "prefixItems", "additionalItems",
                                      "minItems", "maxItems",    "uniqueItems"};
    if (key_is(k, obj, GS_ARRAY_LEN(obj)))
        return T_OBJECT;
    if (key_is(k, arr, GS_ARRAY_LEN(arr)))
        return T_ARRAY;
    return T_ALL;
}

/* enum/const of s as an array (new reference), NULL when neither. */
static json_t *enum_values(const json_t *s)
{
    const json_t *e = json_object_get(s, "enum");
    const json_t *k = json_object_get(s, "const");
    json_t *out = json_array();
    if (!out)
        return NULL;
    if (e && json_is_array(e)) {
        size_t i;
        json_t *v;
        json_array_foreach(e, i, v)
        {
            if (!k || json_same(v, k))
                json_array_append(out, v);
        }
        return out;
    }
    if (k) {
        json_array_append(out, (json_t *)k);
        return out;
    }
    json_decref(out);
    return NULL;
}

/* The intersection of two flattened schemas (new, owned by c): properties and
 * required join, bounds take the tighter side, types and enums intersect.
 * What cannot be intersected exactly is refused under 'allOf'. */
static json_t *merge(struct conv *c, json_t *a, json_t *b, unsigned chain)
{
    if (++c->n_merges > SCHEMA_MAX_MERGES) {
        over_limit(c, "schema intersections", SCHEMA_MAX_MERGES);
        return NULL;
    }
    static const char *const lower[] = {"minLength", "minItems", "minProperties", "minimum",
                                        "exclusiveMinimum"};
    static const char *const upper[] = {"maxLength", "maxItems", "maxProperties", "maximum",
                                        "exclusiveMaximum"};
    json_t *m = own(c, json_deep_copy(a));
    if (!m)
        return NULL;
    const char *k;
    json_t *vb;
    json_object_foreach(b, k, vb)
    {
        json_t *va = json_object_get(a, k);
        if (!va) {
            json_object_set(m, k, vb);
            continue;
        }
        if (key_is(k, lower, GS_ARRAY_LEN(lower)) || key_is(k, upper, GS_ARRAY_LEN(upper))) {
            double x, y;
            if (!get_number(va, &x) || !get_number(vb, &y)) {
                if (json_same(va, vb))
                    continue;
                refuse(c, "allOf", "differing boolean exclusive bounds");
                return NULL;
            }
            bool take_b = key_is(k, lower, GS_ARRAY_LEN(lower)) ? y > x : y < x;
            if (take_b)
                json_object_set(m, k, vb);
        } else if (!strcmp(k, "type")) {
            unsigned ta = declared_types(c, a), tb = declared_types(c, b);
            if (!ta || !tb)
                return NULL;
            unsigned t = ta & tb;
            if ((t & T_NUMBER) && !(t & T_INTEGER))
                t &= ~(unsigned)T_NUMBER;
            if (!t) {
                refuse(c, "allOf", "the types do not intersect");
                return NULL;
            }
            json_t *arr = json_array();
            static const char *const names[] = {"null",   "boolean", "object", "array",
                                                "string", "number",  "integer"};
            for (unsigned i = 0; i < 7; i++) {
                if (i == 6 && (t & T_NUMBER))
                    break; /* number already admits the integers */
                if (t & (1u << i))
                    json_array_append_new(arr, json_string(names[i]));
            }
            json_object_set_new(m, "type", arr);
        } else if (!strcmp(k, "required")) {
            json_t *r = json_deep_copy(va);
            size_t i;
            json_t *e;
            json_array_foreach(vb, i, e)
            {
                bool dup = false;
                for (size_t j = 0; j < json_array_size(va); j++)
                    dup |= json_equal(json_array_get(va, j), e);
                if (!dup)
                    json_array_append(r, e);
            }
            json_object_set_new(m, "required", r);
        } else if (!strcmp(k, "properties") && json_is_object(va) && json_is_object(vb)) {
            json_t *p = json_deep_copy(va);
            const char *pk;
            json_t *pv;
            json_object_foreach(vb, pk, pv)
            {
                json_t *pa = json_object_get(va, pk);
                if (!pa) {
                    json_object_set(p, pk, pv);
                    continue;
                }
                size_t old = path_push(c, "properties");
                path_push(c, pk);
                json_t *fa = flatten(c, pa, chain + 1);
                json_t *fb = fa ? flatten(c, pv, chain + 1) : NULL;
                json_t *mp = fb ? merge(c, fa, fb, chain + 1) : NULL;
                path_pop(c, old);
                if (!mp) {
                    json_decref(p);
                    return NULL;
                }
                json_object_set(p, pk, mp);
            }
            json_object_set_new(m, "properties", p);
        } else if (!strcmp(k, "additionalProperties")) {
            if (is_trivial(vb) || is_never(va))
                continue;
            if (is_trivial(va) || is_never(vb)) {
                json_object_set(m, k, vb);
                continue;
            }
            json_t *fa = flatten(c, va, chain + 1);
            json_t *fb = fa ? flatten(c, vb, chain + 1) : NULL;
            json_t *ma = fb ? merge(c, fa, fb, chain + 1) : NULL;
            if (!ma)
                return NULL;
            json_object_set(m, k, ma);
        } else if ((!strcmp(k, "enum") || !strcmp(k, "const"))) {
            continue; /* below, with both keywords together */
        } else if (!strcmp(k, "items") && json_is_object(va) && json_is_object(vb)) {
            json_t *fa = flatten(c, va, chain + 1);
            json_t *fb = fa ? flatten(c, vb, chain + 1) : NULL;
            json_t *mi = fb ? merge(c, fa, fb, chain + 1) : NULL;
            if (!mi)
                return NULL;
            json_object_set(m, "items", mi);
        } else if (!json_same(va, vb)) {
            refuse(c, "allOf", NULL);
            if (c->err) {
                size_t n = strlen(c->err->msg);
                snprintf(c->err->msg + n, sizeof(c->err->msg) - n,
                         ": differing '%s' cannot be intersected", k);
            }
            return NULL;
        }
    }
    /* Properties one side closes off (additionalProperties false) are not
     * allowed by the intersection: drop those the other side adds. */
    for (int side = 0; side < 2; side++) {
        json_t *closed = side ? b : a, *other = side ? a : b;
        json_t *addl = json_object_get(closed, "additionalProperties");
        bool never = is_never(addl);
        bool addl_schema = !never && json_is_object(addl) && !is_trivial(addl);
        if (!never && !addl_schema)
            continue;
        if (json_object_get(closed, "patternProperties")) {
            refuse(c, "allOf", "patternProperties beside additionalProperties false");
            return NULL;
        }
        json_t *cp = json_object_get(closed, "properties");
        json_t *op = json_object_get(other, "properties");
        json_t *mp = json_object_get(m, "properties");
        const char *pk;
        json_t *pv;
        void *tmp;
        if (!json_is_object(op) || !json_is_object(mp))
            continue;
        json_object_foreach_safe(op, tmp, pk, pv)
        {
            if (json_is_object(cp) && json_object_get(cp, pk))
                continue;
            if (addl_schema) {
                refuse(c, "allOf", "properties beside another branch's additionalProperties");
                return NULL;
            }
            json_object_set(mp, pk, json_false());
        }
    }
    if (json_object_get(a, "enum") || json_object_get(a, "const") || json_object_get(b, "enum") ||
        json_object_get(b, "const")) {
        json_t *ea = enum_values(a), *eb = enum_values(b);
        json_t *e = json_array();
        json_t *from = ea ? ea : eb;
        size_t i;
        json_t *v;
        json_array_foreach(from, i, v)
        {
            bool in = true;
            if (ea && eb) {
                in = false;
                for (size_t j = 0; j < json_array_size(eb); j++)
                    in |= json_same(v, json_array_get(eb, j));
            }
            if (in)
                json_array_append(e, v);
        }
        json_decref(ea);
        json_decref(eb);
        json_object_del(m, "const");
        json_object_set_new(m, "enum", e);
    }
    return m;
}

/* ---- integers and numbers ---------------------------------------------------- */

#define MAXMAG 9999999999999999ull /* SCHEMA_INT_DIGITS nines */

static unsigned ndigits(uint64_t v)
{
    unsigned n = 1;
    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

static uint64_t pow10u(unsigned n)
{
    uint64_t p = 1;
    while (n--)
        p *= 10;
    return p;
}

/* The n-digit strings from lo to hi (same length, lo <= hi), as a GBNF
 * sequence: the classic split on the first digit that differs. */
static void range_digits(struct sbuf *b, const char *lo, const char *hi, size_t n)
{
    static const char nines[] = "99999999999999999999", zeros[] = "00000000000000000000";
    if (n == 0)
        return;
    if (lo[0] == hi[0]) {
        sb_printf(b, "\"%c\" ", lo[0]);
        range_digits(b, lo + 1, hi + 1, n - 1);
        return;
    }
    bool lo_min = !strncmp(lo + 1, zeros, n - 1), hi_max = !strncmp(hi + 1, nines, n - 1);
    if (lo_min && hi_max) {
        sb_printf(b, "[%c-%c] ", lo[0], hi[0]);
        if (n > 1)
            sb_printf(b, "[0-9]{%zu} ", n - 1);
        return;
    }
    char lo_d = lo[0], hi_d = hi[0];
    bool sep = false;
    sb_puts(b, "( ");
    if (!lo_min) {
        sb_printf(b, "\"%c\" ", lo_d);
        range_digits(b, lo + 1, nines, n - 1);
        lo_d++;
        sep = true;
    }
    if (!hi_max)
        hi_d--;
    if (lo_d <= hi_d) {
        sb_puts(b, sep ? "| " : "");
        if (lo_d == hi_d)
            sb_printf(b, "\"%c\" ", lo_d);
        else
            sb_printf(b, "[%c-%c] ", lo_d, hi_d);
        if (n > 1)
            sb_printf(b, "[0-9]{%zu} ", n - 1);
        sep = true;
    }
    if (!hi_max) {
        sb_puts(b, sep ? "| " : "");
        sb_printf(b, "\"%c\" ", hi[0]);
        range_digits(b, zeros, hi + 1, n - 1);
    }
    sb_puts(b, ") ");
}

/* Decimal integers from lo to hi without leading zeros, as one group. */
static void range_uint(struct sbuf *b, uint64_t lo, uint64_t hi)
{
    unsigned nlo = ndigits(lo), nhi = ndigits(hi);
    sb_puts(b, "( ");
    bool sep = false;
    for (unsigned len = nlo; len <= nhi; len++) {
        uint64_t a = len == nlo ? lo : pow10u(len - 1);
        uint64_t z = len == nhi ? hi : pow10u(len) - 1;
        sb_puts(b, sep ? "| " : "");
        sep = true;
        /* Whole lengths run together: [1-9] [0-9]{x,y}. */
        if (len > 1 && a == pow10u(len - 1) && z == pow10u(len) - 1) {
            unsigned last = len;
            while (last + 1 <= nhi && (last + 1 < nhi || hi == pow10u(last + 1) - 1))
                last++;
            if (last == len)
                sb_printf(b, "[1-9] [0-9]{%u} ", len - 1);
            else
                sb_printf(b, "[1-9] [0-9]{%u,%u} ", len - 1, last - 1);
            len = last;
            continue;
        }
        char sa[24], sz[24];
        snprintf(sa, sizeof(sa), "%llu", (unsigned long long)a);
        snprintf(sz, sizeof(sz), "%llu", (unsigned long long)z);
        range_digits(b, sa, sz, strlen(sa));
    }
    sb_puts(b, ") ");
}

struct bounds {
    bool has_lo, lo_excl, has_hi, hi_excl;
    double lo, hi;
};

/* minimum/maximum with both forms of exclusiveMinimum/Maximum (a number in
 * draft 6+, a flag on minimum in draft 4), the tighter side kept. */
static bool read_bounds(struct conv *c, const json_t *s, struct bounds *bd)
{
    memset(bd, 0, sizeof(*bd));
    static const char *const keys[2][2] = {{"minimum", "exclusiveMinimum"},
                                           {"maximum", "exclusiveMaximum"}};
    for (int side = 0; side < 2; side++) {
        const json_t *inc = json_object_get(s, keys[side][0]);
        const json_t *exc = json_object_get(s, keys[side][1]);
        bool has = false, excl = false;
        double v = 0, e;
        if (inc) {
            if (!get_number(inc, &v))
                return bad_value(c, keys[side][0], "must be a finite number");
            has = true;
        }
        if (json_is_boolean(exc)) {
            excl = has && json_is_true(exc);
        } else if (exc) {
            if (!get_number(exc, &e))
                return bad_value(c, keys[side][1], "must be a number or a boolean");
            bool tighter = !has || (side == 0 ? e >= v : e <= v);
            if (tighter) {
                v = e;
                excl = true;
            }
            has = true;
        }
        if (side == 0) {
            bd->has_lo = has, bd->lo_excl = excl, bd->lo = v;
        } else {
            bd->has_hi = has, bd->hi_excl = excl, bd->hi = v;
        }
    }
    return true;
}

static const char *bound_key(const struct bounds *bd, int side)
{
    if (side == 0)
        return bd->lo_excl ? "exclusiveMinimum" : "minimum";
    return bd->hi_excl ? "exclusiveMaximum" : "maximum";
}

static bool check_multiple_of(struct conv *c, const json_t *s, bool *integral)
{
    const json_t *m = json_object_get(s, "multipleOf");
    double d;
    *integral = false;
    if (!m)
        return true;
    if (!get_number(m, &d) || d <= 0)
        return bad_value(c, "multipleOf", "must be a positive number");
    if (d != 1)
        return refuse(c, "multipleOf", "only multipleOf 1 is supported");
    *integral = true;
    return true;
}

/* Integers within the schema's bounds (and format int32/int64). */
static bool gen_integer(struct conv *c, const json_t *s, struct sbuf *b)
{
    struct bounds bd;
    bool integral;
    if (!read_bounds(c, s, &bd) || !check_multiple_of(c, s, &integral))
        return false;
    double lo = -1e300, hi = 1e300;
    if (bd.has_lo)
        lo = bd.lo_excl ? floor(bd.lo) + 1 : ceil(bd.lo);
    if (bd.has_hi)
        hi = bd.hi_excl ? ceil(bd.hi) - 1 : floor(bd.hi);
    const json_t *f = json_object_get(s, "format");
    if (f) {
        const char *fs = json_string_value(f);
        if (fs && !strcmp(fs, "int32")) {
            lo = GS_MAX(lo, -2147483648.0);
            hi = GS_MIN(hi, 2147483647.0);
        } else if (!fs || strcmp(fs, "int64")) {
            return refuse(c, "format", "not a format of integers (int32, int64)");
        }
    }
    if (lo > SCHEMA_MAX_BOUND)
        return refuse(c, bound_key(&bd, 0), "bound over 1e18");
    if (hi < -SCHEMA_MAX_BOUND)
        return refuse(c, bound_key(&bd, 1), "bound under -1e18");
    if (lo <= -SCHEMA_MAX_BOUND && hi >= SCHEMA_MAX_BOUND) {
        c->used |= P_INTEGER;
        sb_puts(b, "integer ");
        return true;
    }
    if (lo > hi)
        return refuse(c, bound_key(&bd, 0), "no integer lies within the bounds");
    int64_t l = lo <= -SCHEMA_MAX_BOUND ? -(int64_t)MAXMAG : (int64_t)lo;
    int64_t h = hi >= SCHEMA_MAX_BOUND ? (int64_t)MAXMAG : (int64_t)hi;
    bool sep = false;
    sb_puts(b, "( ");
    if (l < 0) {
        uint64_t mlo = h < 0 ? (uint64_t)-h : 1, mhi = (uint64_t)-l;
        sb_puts(b, "\"-\" ");
        range_uint(b, mlo, mhi);
        sep = true;
    }
    if (h >= 0) {
        sb_puts(b, sep ? "| " : "");
        range_uint(b, l > 0 ? (uint64_t)l : 0, (uint64_t)h);
    }
    sb_puts(b, ") ws ");
    c->used |= P_WS;
    return true;
}

/* Fractions: up to 16 digits when the bounds are inclusive (rounding to a
 * double is monotonic, so x <= b stays true); with an exclusive bound a value
 * just inside it could round onto it (5.0000000000000001 is 5.0), so numbers
 * keep to 15 significant digits, which doubles tell apart: 9 integer digits
 * and 6 fraction digits. */
struct frac_mode {
    unsigned digits; /* fraction digits at most */
    uint64_t maxmag; /* the largest integer part without an upper bound */
};

static const struct frac_mode frac_wide = {16, MAXMAG};
static const struct frac_mode frac_narrow = {6, 999999999ull};

/* One end of a magnitude interval: I.F with F's digits (no trailing zeros). */
struct dec {
    uint64_t i;
    char f[24];
    size_t nf;
    bool excl;
};

/* |v| as a decimal with at most 15 fraction digits that reads back as v. */
static bool dec_of(double v, bool excl, struct dec *d)
{
    v = fabs(v);
    if (v > SCHEMA_MAX_BOUND)
        return false;
    char buf[64];
    snprintf(buf, sizeof(buf), "%.15f", v);
    char *dot = strchr(buf, '.');
    size_t end = strlen(buf);
    while (end > 0 && buf[end - 1] == '0')
        end--;
    if (dot && buf + end - 1 == dot)
        end--;
    buf[end] = '\0';
    if (strtod(buf, NULL) != v)
        return false;
    d->excl = excl;
    d->i = strtoull(buf, NULL, 10);
    d->nf = dot && (size_t)(dot - buf) + 1 < end ? end - (size_t)(dot - buf) - 1 : 0;
    memcpy(d->f, dot ? dot + 1 : "", d->nf);
    d->f[d->nf] = '\0';
    return true;
}

static int dec_digit(const struct dec *d, size_t i)
{
    return i < d->nf ? d->f[i] - '0' : 0;
}

/*
 * The fraction digits from position i on (at most fm->digits in all) that
 * keep f within the ends: tlo / thi say that the digits so far equal lo's /
 * hi's. Writes a group; returns 0 for the empty set, 1 when something was
 * written, and sets *can_end when the fraction may stop here.
 */
static int frac_digits(struct sbuf *b, const struct dec *lo, bool tlo, const struct dec *hi, bool thi,
                       size_t i, unsigned digits, bool *can_end)
{
    /* Past lo's last digit every continuation is >= lo: the bound is met
     * (or, exclusive, met as soon as a non-zero digit comes). */
    if (tlo && i >= lo->nf && !lo->excl)
        tlo = false;
    bool end = (!tlo || (i >= lo->nf && !lo->excl)) && (!thi || i < hi->nf || !hi->excl);
    *can_end = i > 0 && end;
    if (i >= digits)
        return 0;
    if (thi && i >= hi->nf) {
        /* Equal to hi so far: only zeros may follow, and only if hi is
         * inclusive and lo allows it. */
        if (hi->excl || (tlo && i < lo->nf))
            return 0;
        if (tlo && lo->excl)
            return 0;
        sb_printf(b, "( \"0\"{1,%zu} ) ", digits - i);
        return 1;
    }
    int dlo = tlo ? dec_digit(lo, i) : 0, dhi = thi ? dec_digit(hi, i) : 9;
    if (dlo > dhi)
        return 0;
    int n = 0;
    sb_puts(b, "( ");
    int fa = dlo + (tlo ? 1 : 0), fz = dhi - (thi ? 1 : 0);
    if (fa <= fz) {
        sb_printf(b, "[%d-%d] ", fa, fz);
        if (digits - i > 1)
            sb_printf(b, "[0-9]{0,%zu} ", (size_t)digits - i - 1);
        n++;
    }
    for (int side = 0; side < 2; side++) {
        bool tight = side ? thi : tlo;
        int d = side ? dhi : dlo;
        if (!tight || (side == 1 && tlo && dlo == dhi))
            continue;
        struct sbuf sub = {0};
        bool sub_end;
        bool nlo = tlo && d == dlo, nhi = thi && d == dhi;
        int k = frac_digits(&sub, lo, nlo, hi, nhi, i + 1, digits, &sub_end);
        if (k || sub_end) {
            sb_printf(b, "%s\"%d\" ", n ? "| " : "", d);
            if (k) {
                size_t len = sub.n;
                while (len && sub.p[len - 1] == ' ')
                    len--;
                sb_putn(b, sub.p, len);
                sb_puts(b, sub_end ? "? " : " ");
            }
            n++;
        }
        if (sub.bad)
            b->bad = sub.bad;
        sb_free(&sub);
    }
    sb_puts(b, ") ");
    return n;
}

/* Integer part ip with a fraction between the ends (tight on each side as
 * given); returns whether anything is allowed. */
static bool mag_with_fraction(struct sbuf *b, uint64_t ip, const struct dec *lo, bool tlo,
                              const struct dec *hi, bool thi, unsigned digits, bool sep)
{
    struct sbuf fr = {0};
    bool dummy;
    /* Without a fraction the value is ip itself. */
    bool bare = (!tlo || (lo->nf == 0 && !lo->excl)) && (!thi || hi->nf > 0 || !hi->excl);
    int k = frac_digits(&fr, lo, tlo, hi, thi, 0, digits, &dummy);
    if (k || bare) {
        sb_puts(b, sep ? "| " : "");
        range_uint(b, ip, ip);
        if (k)
            sb_printf(b, "%s\".\" %s%s", bare ? "( " : "", sb_str(&fr), bare ? ")? " : "");
    }
    if (fr.bad)
        b->bad = fr.bad;
    sb_free(&fr);
    return k || bare;
}

/* Magnitudes m = I.F from lo to hi (no upper end when !hi): I = lo.i with a
 * fraction above lo's, the integers between with any fraction, I = hi.i with
 * a fraction below hi's. Returns the alternatives written. */
static int mag_dec(struct sbuf *b, const struct frac_mode *fm, const struct dec *lo,
                   const struct dec *hi, bool sep)
{
    static const struct dec none = {0};
    int n = 0;
    if (hi && hi->i < lo->i)
        return 0;
    if (hi && hi->i == lo->i)
        return mag_with_fraction(b, lo->i, lo, true, hi, true, fm->digits, sep);
    n += mag_with_fraction(b, lo->i, lo, true, &none, false, fm->digits, sep || n);
    uint64_t top = hi ? hi->i - 1 : fm->maxmag;
    if (lo->i + 1 <= top) {
        sb_puts(b, sep || n ? "| " : "");
        range_uint(b, lo->i + 1, top);
        sb_printf(b, "( \".\" [0-9]{1,%u} )? ", fm->digits);
        n++;
    }
    if (hi)
        n += mag_with_fraction(b, hi->i, &none, false, hi, true, fm->digits, sep || n);
    return n;
}

/* Numbers within the bounds, exactly (decimal bounds with up to 15 fraction
 * digits included). Bounded numbers are written without an exponent. */
static bool gen_number(struct conv *c, const json_t *s, struct sbuf *b)
{
    struct bounds bd;
    bool integral;
    if (!read_bounds(c, s, &bd) || !check_multiple_of(c, s, &integral))
        return false;
    const json_t *f = json_object_get(s, "format");
    if (f) {
        const char *fs = json_string_value(f);
        if (fs && (!strcmp(fs, "int32") || !strcmp(fs, "int64")))
            return gen_integer(c, s, b);
        if (!fs || (strcmp(fs, "double") && strcmp(fs, "float")))
            return refuse(c, "format", "not a format of numbers (double, float, int32, int64)");
    }
    if (integral)
        return gen_integer(c, s, b);
    if (bd.has_lo && bd.lo <= -SCHEMA_MAX_BOUND)
        bd.has_lo = false;
    if (bd.has_hi && bd.hi >= SCHEMA_MAX_BOUND)
        bd.has_hi = false;
    if (!bd.has_lo && !bd.has_hi) {
        c->used |= P_NUMBER;
        sb_puts(b, "number ");
        return true;
    }
    const struct frac_mode *fm = &frac_wide;
    if ((bd.has_lo && bd.lo_excl) || (bd.has_hi && bd.hi_excl))
        fm = &frac_narrow;
    struct dec dlo = {0}, dhi = {0};
    for (int side = 0; side < 2; side++) {
        bool has = side ? bd.has_hi : bd.has_lo;
        double v = side ? bd.hi : bd.lo;
        struct dec *d = side ? &dhi : &dlo;
        if (!has)
            continue;
        if (!dec_of(v, side ? bd.hi_excl : bd.lo_excl, d))
            return refuse(c, bound_key(&bd, side), "a bound with more than 15 decimals");
        if (fm == &frac_narrow && (d->i > fm->maxmag || d->nf > fm->digits))
            return refuse(c, bound_key(&bd, side),
                          "beside an exclusive bound, a bound over 1e9 or with more than 6 "
                          "decimals");
    }
    static const struct dec zero_in = {0}, zero_ex = {.excl = true};
    int n = 0;
    sb_puts(b, "( ");
    /* x >= 0: from lo (or 0) up to hi. */
    if (!bd.has_hi || bd.hi > 0 || (bd.hi == 0 && !bd.hi_excl)) {
        const struct dec *lo = bd.has_lo && bd.lo >= 0 ? &dlo : &zero_in;
        n += mag_dec(b, fm, lo, bd.has_hi ? &dhi : NULL, n > 0);
    }
    /* x < 0: its magnitude is above -hi (or above 0) and up to -lo. */
    if (!bd.has_lo || bd.lo < 0) {
        const struct dec *lo = bd.has_hi && bd.hi < 0 ? &dhi : &zero_ex;
        struct sbuf neg = {0};
        int k = mag_dec(&neg, fm, lo, bd.has_lo ? &dlo : NULL, false);
        if (k) {
            sb_puts(b, n ? "| " : "");
            sb_puts(b, "\"-\" ( ");
            sb_puts(b, sb_str(&neg));
            sb_puts(b, ") ");
            n += k;
        }
        if (neg.bad)
            b->bad = neg.bad;
        sb_free(&neg);
    }
    sb_puts(b, ") ws ");
    c->used |= P_WS;
    if (!n)
        return refuse(c, bound_key(&bd, 0), "no number lies within the bounds");
    return true;
}

/* ---- pattern: a regex subset to GBNF ---------------------------------------- */

/*
 * The subset: literals, escapes (\d \w \s \D \W \S, \n \t \r \f \v, \xHH,
 * \uHHHH, escaped punctuation), classes with ranges and negation, `.`,
 * groups ((...), (?:...), (?P<name>...)), alternation, ? * + {m} {m,} {m,n}
 * (lazy forms match the same strings), and ^ / $ at the ends of top-level
 * alternatives. A pattern is a search, as in JSON Schema: an end without its
 * anchor may have any text beyond it. Refused: backreferences, lookaround,
 * inline flags, \b and the other assertions, possessive quantifiers.
 *
 * The pattern applies to the decoded string, the grammar to its JSON text:
 * a character that JSON must escape is written as its escape. \d, \w and \s
 * match ASCII only and their negations printable ASCII only (Python's match
 * Unicode digits, letters and spaces; these subsets keep every output
 * matching).
 */

struct cset {
    uint32_t lo[128], hi[128];
    unsigned n;
    bool full; /* too many ranges */
};

static void cset_add(struct cset *s, uint32_t lo, uint32_t hi)
{
    if (s->n == GS_ARRAY_LEN(s->lo)) {
        s->full = true;
        return;
    }
    s->lo[s->n] = lo;
    s->hi[s->n++] = hi;
}

static void cset_sort(struct cset *s)
{
    for (unsigned i = 1; i < s->n; i++)
        for (unsigned j = i; j > 0 && s->lo[j - 1] > s->lo[j]; j--) {
            uint32_t t = s->lo[j];
            s->lo[j] = s->lo[j - 1];
            s->lo[j - 1] = t;
            t = s->hi[j];
            s->hi[j] = s->hi[j - 1];
            s->hi[j - 1] = t;
        }
    unsigned k = 0;
    for (unsigned i = 0; i < s->n; i++) {
        if (k && s->lo[i] <= s->hi[k - 1] + 1) {
            s->hi[k - 1] = GS_MAX(s->hi[k - 1], s->hi[i]);
        } else {
            s->lo[k] = s->lo[i];
            s->hi[k++] = s->hi[i];
        }
    }
    s->n = k;
}

static void cset_negate(struct cset *s, uint32_t max)
{
    cset_sort(s);
    struct cset t = {.n = 0};
    uint32_t next = 0;
    for (unsigned i = 0; i < s->n; i++) {
        if (s->lo[i] > next)
            cset_add(&t, next, s->lo[i] - 1);
        next = s->hi[i] + 1;
    }
    if (next <= max)
        cset_add(&t, next, max);
    t.full |= s->full;
    *s = t;
}

static bool cset_has(const struct cset *s, uint32_t cp)
{
    for (unsigned i = 0; i < s->n; i++)
        if (cp >= s->lo[i] && cp <= s->hi[i])
            return true;
    return false;
}

static void sb_class_cp(struct sbuf *b, uint32_t cp)
{
    if (cp < 0x10000)
        sb_printf(b, "\\u%04X", (unsigned)cp);
    else
        sb_printf(b, "\\U%08X", (unsigned)cp);
}

/* The set as JSON text: its plain characters in one class, the characters
 * JSON escapes (" \ tab newline return) as their escapes. Other control
 * characters are left out. Returns false when nothing is left. */
static bool cset_emit(struct sbuf *b, const struct cset *s)
{
    static const uint32_t np_lo[] = {0x00, '"', '\\', 0x7f, 0xd800};
    static const uint32_t np_hi[] = {0x1f, '"', '\\', 0x7f, 0xdfff};
    struct cset plain = {.n = 0};
    for (unsigned i = 0; i < s->n; i++) {
        uint32_t cur = s->lo[i], hi = GS_MIN(s->hi[i], 0x10ffffu);
        bool done = false;
        for (size_t k = 0; k < GS_ARRAY_LEN(np_lo) && !done; k++) {
            if (np_hi[k] < cur)
                continue;
            if (np_lo[k] > hi)
                break;
            if (np_lo[k] > cur)
                cset_add(&plain, cur, np_lo[k] - 1);
            cur = np_hi[k] + 1;
            done = cur > hi;
        }
        if (!done && cur <= hi)
            cset_add(&plain, cur, hi);
    }
    cset_sort(&plain);
    static const uint32_t escaped[] = {'"', '\\', '\t', '\n', '\r'};
    int alts = plain.n > 0;
    for (size_t i = 0; i < GS_ARRAY_LEN(escaped); i++)
        alts += cset_has(s, escaped[i]);
    if (!alts)
        return false;
    bool sep = false;
    sb_puts(b, alts > 1 ? "( " : "");
    if (plain.n) {
        sb_puts(b, "[");
        for (unsigned i = 0; i < plain.n; i++) {
            sb_class_cp(b, plain.lo[i]);
            if (plain.hi[i] != plain.lo[i]) {
                sb_puts(b, "-");
                sb_class_cp(b, plain.hi[i]);
            }
        }
        sb_puts(b, "] ");
        sep = true;
    }
    for (size_t i = 0; i < GS_ARRAY_LEN(escaped); i++)
        if (cset_has(s, escaped[i])) {
            sb_puts(b, sep ? "| " : "");
            sb_json_char(b, escaped[i]);
            sep = true;
        }
    sb_puts(b, alts > 1 ? ") " : "");
    return true;
}

#define RX_MAX_TOP 64

struct rx {
    struct conv *c;
    const char *s;
    size_t n, i;
    unsigned depth;
    /* Lengths, for minLength/maxLength beside a pattern: what the top level
     * is made of, and one piece whose count may be overridden. */
    unsigned n_alts;            /* top-level alternatives */
    bool anchored;              /* the (single) top alternative has ^ and $ */
    unsigned n_top;             /* top-level pieces (RX_MAX_TOP + 1: too many) */
    uint64_t amin[RX_MAX_TOP], amax[RX_MAX_TOP]; /* each piece's atom length */
    uint64_t qm[RX_MAX_TOP], qn[RX_MAX_TOP];     /* and count (qn UINT64_MAX: unbounded) */
    int ov_piece;               /* the piece whose count is ov_m..ov_n; -1: none */
    uint64_t ov_m, ov_n;
};

static uint64_t sat_mul(uint64_t a, uint64_t b)
{
    uint64_t r;
    return a == UINT64_MAX || b == UINT64_MAX || gs_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    uint64_t r;
    return gs_add_overflow(a, b, &r) ? UINT64_MAX : r;
}

static bool rx_refuse(struct rx *r, const char *why)
{
    return refuse(r->c, "pattern", why);
}

/* \d \w \s and their negations into set; false if e is not a class escape. */
static bool rx_class_escape(char e, struct cset *set)
{
    struct cset t = {.n = 0};
    switch (e) {
    case 'd':
    case 'D':
        cset_add(&t, '0', '9');
        break;
    case 'w':
    case 'W':
        cset_add(&t, '0', '9');
        cset_add(&t, 'A', 'Z');
        cset_add(&t, 'a', 'z');
        cset_add(&t, '_', '_');
        break;
    case 's':
    case 'S':
        cset_add(&t, ' ', ' ');
        cset_add(&t, '\t', '\r');
        break;
    default:
        return false;
    }
    if (isupper((unsigned char)e)) {
        /* Printable ASCII only: see the comment at the top of this part. */
        struct cset ascii = {.n = 0};
        cset_sort(&t);
        uint32_t next = 0x20;
        for (unsigned i = 0; i < t.n; i++) {
            if (t.hi[i] < 0x20)
                continue;
            if (t.lo[i] > next)
                cset_add(&ascii, next, t.lo[i] - 1);
            next = t.hi[i] + 1;
        }
        if (next <= 0x7e)
            cset_add(&ascii, next, 0x7e);
        t = ascii;
    }
    for (unsigned i = 0; i < t.n; i++)
        cset_add(set, t.lo[i], t.hi[i]);
    return true;
}

/* One escaped literal after '\' (the '\' consumed); -1 refused. */
static int32_t rx_escape_literal(struct rx *r)
{
    char e = r->s[r->i++];
    switch (e) {
    case 'n':
        return '\n';
    case 't':
        return '\t';
    case 'r':
        return '\r';
    case 'f':
        return '\f';
    case 'v':
        return '\v';
    case 'x':
    case 'u': {
        int len = e == 'x' ? 2 : 4;
        int32_t v = 0;
        for (int k = 0; k < len; k++) {
            int h = r->i < r->n ? hexval(r->s[r->i]) : -1;
            if (h < 0) {
                rx_refuse(r, "a bad \\x or \\u escape");
                return -1;
            }
            v = v * 16 + h;
            r->i++;
        }
        return v;
    }
    default:
        break;
    }
    if (isalnum((unsigned char)e)) {
        rx_refuse(r, isdigit((unsigned char)e) ? "backreferences are not supported"
                                               : "this escape is not supported");
        return -1;
    }
    r->i--;
    size_t at = r->i;
    int32_t cp = utf8_next(r->s, r->n, &at);
    if (cp < 0) {
        rx_refuse(r, "not UTF-8");
        return -1;
    }
    r->i = at;
    return cp;
}

static bool rx_class(struct rx *r, struct cset *set)
{
    bool neg = r->i < r->n && r->s[r->i] == '^';
    if (neg)
        r->i++;
    bool first = true;
    while (r->i < r->n && (r->s[r->i] != ']' || first)) {
        first = false;
        int32_t lo;
        if (r->s[r->i] == '\\') {
            r->i++;
            if (r->i >= r->n)
                return rx_refuse(r, "ends inside a class");
            if (rx_class_escape(r->s[r->i], set)) {
                r->i++;
                continue;
            }
            if (r->s[r->i] == 'b') {
                r->i++;
                lo = '\b';
            } else if ((lo = rx_escape_literal(r)) < 0) {
                return false;
            }
        } else if (r->s[r->i] == '[' && r->i + 1 < r->n && r->s[r->i + 1] == ':') {
            return rx_refuse(r, "POSIX classes are not supported");
        } else {
            size_t at = r->i;
            lo = utf8_next(r->s, r->n, &at);
            if (lo < 0)
                return rx_refuse(r, "not UTF-8");
            r->i = at;
        }
        int32_t hi = lo;
        if (r->i + 1 < r->n && r->s[r->i] == '-' && r->s[r->i + 1] != ']') {
            r->i++;
            if (r->s[r->i] == '\\') {
                r->i++;
                if (r->i >= r->n || (hi = rx_escape_literal(r)) < 0)
                    return r->c->failed ? false : rx_refuse(r, "ends inside a class");
            } else {
                size_t at = r->i;
                hi = utf8_next(r->s, r->n, &at);
                if (hi < 0)
                    return rx_refuse(r, "not UTF-8");
                r->i = at;
            }
            if (hi < lo)
                return rx_refuse(r, "a class range out of order");
        }
        cset_add(set, (uint32_t)lo, (uint32_t)hi);
    }
    if (r->i >= r->n)
        return rx_refuse(r, "an unterminated class");
    r->i++; /* ']' */
    if (neg)
        cset_negate(set, 0x10ffff);
    if (set->full)
        return rx_refuse(r, "a class with too many ranges");
    return true;
}

/* {m}, {m,}, {m,n} at r->i; false (nothing consumed) if it is not one, which
 * makes '{' a literal as in Python. */
static bool rx_braces(struct rx *r, unsigned long *m, unsigned long *n, bool *unbounded)
{
    size_t i = r->i + 1;
    char *end;
    if (i >= r->n || !isdigit((unsigned char)r->s[i]))
        return false;
    *m = strtoul(r->s + i, &end, 10);
    i = (size_t)(end - r->s);
    *unbounded = false;
    *n = *m;
    if (i < r->n && r->s[i] == ',') {
        i++;
        if (i < r->n && isdigit((unsigned char)r->s[i])) {
            *n = strtoul(r->s + i, &end, 10);
            i = (size_t)(end - r->s);
        } else {
            *unbounded = true;
        }
    }
    if (i >= r->n || r->s[i] != '}')
        return false;
    r->i = i + 1;
    return true;
}

static bool rx_alt(struct rx *r, struct sbuf *o, bool *nullable, bool top, uint64_t *lmin,
                   uint64_t *lmax);

/* One atom with its quantifier. */
static bool rx_piece(struct rx *r, struct sbuf *o, bool *nullable, uint64_t *lmin, uint64_t *lmax)
{
    struct sbuf a = {0};
    bool ok = true, null = false;
    uint64_t amin = 1, amax = 1; /* the atom's length in code points */
    char ch = r->s[r->i];
    if (ch == '(') {
        r->i++;
        if (r->i < r->n && r->s[r->i] == '?') {
            if (r->i + 1 < r->n && r->s[r->i + 1] == ':') {
                r->i += 2;
            } else if (r->i + 2 < r->n && r->s[r->i + 1] == 'P' && r->s[r->i + 2] == '<') {
                const char *gt = memchr(r->s + r->i, '>', r->n - r->i);
                if (!gt) {
                    sb_free(&a);
                    return rx_refuse(r, "a bad group name");
                }
                r->i = (size_t)(gt - r->s) + 1;
            } else {
                sb_free(&a);
                return rx_refuse(r, "lookaround, inline flags and (?...) groups are not supported");
            }
        }
        if (++r->depth > 32) {
            sb_free(&a);
            return rx_refuse(r, "groups nested deeper than 32");
        }
        sb_puts(&a, "( ");
        ok = rx_alt(r, &a, &null, false, &amin, &amax);
        sb_puts(&a, ") ");
        r->depth--;
        if (ok && (r->i >= r->n || r->s[r->i] != ')'))
            ok = rx_refuse(r, "an unbalanced parenthesis");
        r->i++;
    } else if (ch == '[') {
        struct cset set = {.n = 0};
        r->i++;
        ok = rx_class(r, &set);
        if (ok && !cset_emit(&a, &set))
            ok = rx_refuse(r, "a class of characters the grammar cannot write");
    } else if (ch == '.') {
        r->i++;
        struct cset set = {.n = 0};
        cset_add(&set, '\n', '\n');
        cset_negate(&set, 0x10ffff);
        cset_emit(&a, &set);
    } else if (ch == '\\') {
        r->i++;
        if (r->i >= r->n) {
            ok = rx_refuse(r, "ends with a backslash");
        } else {
            struct cset set = {.n = 0};
            if (rx_class_escape(r->s[r->i], &set)) {
                r->i++;
                cset_emit(&a, &set);
            } else if (strchr("bBAZzG", r->s[r->i])) {
                ok = rx_refuse(r, "assertions (\\b, \\A, ...) are not supported");
            } else {
                int32_t cp = rx_escape_literal(r);
                if (cp < 0)
                    ok = false;
                else if (!json_plain((uint32_t)cp) && cp != '"' && cp != '\\' && cp != '\n' &&
                         cp != '\t' && cp != '\r')
                    ok = rx_refuse(r, "a control character the grammar does not write");
                else
                    sb_json_char(&a, (uint32_t)cp);
            }
        }
    } else if (ch == '^' || ch == '$') {
        ok = rx_refuse(r, "anchors inside the pattern (only at its ends)");
    } else if (ch == '*' || ch == '+' || ch == '?') {
        ok = rx_refuse(r, "a quantifier with nothing to repeat");
    } else {
        size_t at = r->i;
        int32_t cp = utf8_next(r->s, r->n, &at);
        if (cp < 0) {
            ok = rx_refuse(r, "not UTF-8");
        } else {
            r->i = at;
            sb_json_char(&a, (uint32_t)cp);
        }
    }
    if (!ok) {
        sb_free(&a);
        return false;
    }
    /* The quantifier. */
    unsigned long m = 1, n = 1;
    bool unbounded = false, quant = true;
    if (r->i < r->n && r->s[r->i] == '?')
        m = 0, r->i++;
    else if (r->i < r->n && r->s[r->i] == '*')
        m = 0, unbounded = true, r->i++;
    else if (r->i < r->n && r->s[r->i] == '+')
        unbounded = true, r->i++;
    else if (!(r->i < r->n && r->s[r->i] == '{' && rx_braces(r, &m, &n, &unbounded)))
        quant = false;
    if (quant && r->i < r->n && r->s[r->i] == '?')
        r->i++; /* lazy: the same strings */
    if (r->depth == 0) {
        unsigned k = r->n_top;
        if ((int)k == r->ov_piece) {
            quant = true;
            m = r->ov_m;
            n = r->ov_n;
            unbounded = r->ov_n == UINT64_MAX;
        }
        if (k < RX_MAX_TOP) {
            r->amin[k] = amin;
            r->amax[k] = amax;
            r->qm[k] = quant ? m : 1;
            r->qn[k] = !quant ? 1 : unbounded ? UINT64_MAX : n;
        }
        if (r->n_top <= RX_MAX_TOP)
            r->n_top++;
    }
    if (quant && r->i < r->n && (r->s[r->i] == '+' || r->s[r->i] == '*' || r->s[r->i] == '{'))
        ok = rx_refuse(r, "possessive or repeated quantifiers are not supported");
    else if (quant && (m > SCHEMA_MAX_REPEAT || (!unbounded && n > SCHEMA_MAX_REPEAT)))
        ok = rx_refuse(r, "a repetition count over 4096");
    else if (quant && !unbounded && n < m)
        ok = rx_refuse(r, "a repetition {m,n} with n < m");
    else if (quant && null && (unbounded || n > 1))
        ok = rx_refuse(r, "a repetition of something that can match nothing");
    if (!ok) {
        sb_free(&a);
        return false;
    }
    if (!quant) {
        sb_puts(o, sb_str(&a));
    } else if (!unbounded && m == 0 && n == 0) {
        null = true; /* x{0}: nothing */
    } else {
        sb_puts(o, "( ");
        sb_puts(o, sb_str(&a));
        if (unbounded)
            sb_puts(o, m == 0 ? ")* " : m == 1 ? ")+ " : "");
        if (unbounded && m > 1)
            sb_printf(o, "){%lu,} ", m);
        if (!unbounded && m == 0 && n == 1)
            sb_puts(o, ")? ");
        else if (!unbounded && m == n)
            sb_printf(o, "){%lu} ", m);
        else if (!unbounded)
            sb_printf(o, "){%lu,%lu} ", m, n);
        null = null || m == 0;
    }
    if (a.bad)
        o->bad = a.bad;
    sb_free(&a);
    *nullable = null;
    *lmin = quant ? sat_mul(amin, m) : amin;
    *lmax = quant ? sat_mul(amax, unbounded ? UINT64_MAX : n) : amax;
    if (quant && !unbounded && n == 0)
        *lmax = 0;
    return true;
}

/* alt := seq ('|' seq)*; at the top level each alternative may start with ^
 * and end with $, and an end without its anchor takes any text. */
static bool rx_alt(struct rx *r, struct sbuf *o, bool *nullable, bool top, uint64_t *lmin,
                   uint64_t *lmax)
{
    bool any_null = false, sep = false;
    uint64_t amin = UINT64_MAX, amax = 0;
    for (;;) {
        bool start_anchor = false, end_anchor = false, seq_null = true;
        uint64_t smin = 0, smax = 0;
        if (top && r->i < r->n && r->s[r->i] == '^') {
            start_anchor = true;
            r->i++;
        }
        sb_puts(o, sep ? "| " : "");
        sep = true;
        if (top && !start_anchor) {
            r->c->used |= P_CHAR;
            sb_puts(o, "char* ");
        }
        size_t before = o->n;
        while (r->i < r->n && r->s[r->i] != '|' && r->s[r->i] != ')') {
            if (top && r->s[r->i] == '$' &&
                (r->i + 1 == r->n || r->s[r->i + 1] == '|')) {
                end_anchor = true;
                r->i++;
                break;
            }
            bool piece_null;
            uint64_t pmin, pmax;
            if (!rx_piece(r, o, &piece_null, &pmin, &pmax))
                return false;
            seq_null = seq_null && piece_null;
            smin = sat_add(smin, pmin);
            smax = sat_add(smax, pmax);
        }
        if (top) {
            r->n_alts++;
            r->anchored = start_anchor && end_anchor;
            if (!start_anchor || !end_anchor)
                smax = UINT64_MAX; /* a search: any text around */
        }
        amin = GS_MIN(amin, smin);
        amax = GS_MAX(amax, smax);
        if (top && !end_anchor) {
            r->c->used |= P_CHAR;
            sb_puts(o, "char* ");
        }
        if (o->n == before && (start_anchor || !top) && (end_anchor || !top))
            sb_puts(o, "\"\" ");
        any_null = any_null || seq_null;
        if (r->i < r->n && r->s[r->i] == '|') {
            r->i++;
            continue;
        }
        break;
    }
    if (top && r->i < r->n)
        return rx_refuse(r, "an unbalanced parenthesis");
    *nullable = any_null;
    *lmin = amin;
    *lmax = amax;
    return true;
}

/* The JSON string text matching pattern, without the quotes, of lmin to
 * lmax code points (0 and UINT64_MAX: any). Lengths other than the
 * pattern's own are enforced when the pattern's lengths lie within them, or
 * when it is anchored and one single-character piece has a variable count
 * (^[a-z]*$, ^x-\d{1,8}$): that count absorbs the bounds. */
static bool gen_pattern(struct conv *c, const json_t *pat, uint64_t lmin, uint64_t lmax,
                        const char *len_key, struct sbuf *b)
{
    if (!json_is_string(pat))
        return bad_value(c, "pattern", "must be a string");
    size_t n = json_string_length(pat);
    if (n > SCHEMA_MAX_PATTERN)
        return refuse(c, "pattern", "longer than 4096 bytes");
    struct rx r = {.c = c, .s = json_string_value(pat), .n = n, .ov_piece = -1};
    bool nullable;
    uint64_t pmin, pmax;
    struct sbuf out = {0};
    sb_puts(&out, "( ");
    bool ok = rx_alt(&r, &out, &nullable, true, &pmin, &pmax);
    sb_puts(&out, ") ");
    if (ok && (pmin < lmin || pmax > lmax)) {
        /* Find the one variable piece; all others of fixed length. */
        int var = -1;
        uint64_t fixed = 0;
        bool fits = r.n_alts == 1 && r.anchored && r.n_top <= RX_MAX_TOP;
        for (unsigned k = 0; k < r.n_top && fits; k++) {
            bool single = r.amin[k] == 1 && r.amax[k] == 1;
            if (r.qm[k] != r.qn[k] && single && var < 0)
                var = (int)k;
            else if (r.amin[k] == r.amax[k] && r.qm[k] == r.qn[k])
                fixed = sat_add(fixed, sat_mul(r.amin[k], r.qm[k]));
            else
                fits = false;
        }
        fits = fits && var >= 0 && fixed <= lmax;
        uint64_t lo = 0, hi = 0;
        if (fits) {
            lo = GS_MAX(r.qm[var], lmin > fixed ? lmin - fixed : 0);
            hi = GS_MIN(r.qn[var], lmax == UINT64_MAX ? UINT64_MAX : lmax - fixed);
            if (hi > SCHEMA_MAX_REPEAT && hi != UINT64_MAX)
                hi = GS_MAX(lo, (uint64_t)SCHEMA_MAX_REPEAT); /* tightened */
            fits = lo <= hi && lo <= SCHEMA_MAX_REPEAT;
        }
        sb_free(&out);
        if (!fits)
            return refuse(c, len_key, "beside a pattern whose lengths it cannot bound");
        struct rx r2 = {.c = c, .s = json_string_value(pat), .n = n, .ov_piece = var,
                        .ov_m = lo, .ov_n = hi};
        sb_puts(&out, "( ");
        ok = rx_alt(&r2, &out, &nullable, true, &pmin, &pmax);
        sb_puts(&out, ") ");
    }
    if (ok)
        sb_puts(b, sb_str(&out));
    if (out.bad)
        b->bad = out.bad;
    sb_free(&out);
    return ok;
}

/* ---- strings ---------------------------------------------------------------- */

static const struct {
    const char *name;
    unsigned prim;
} string_formats[] = {
    {"date", P_DATE},   {"time", P_TIME},         {"date-time", P_DATETIME}, {"uuid", P_UUID},
    {"email", P_EMAIL}, {"hostname", P_HOSTNAME}, {"ipv4", P_IPV4},          {"ipv6", P_IPV6},
    {"uri", P_URI},     {"url", P_URL},           {"semver", P_SEMVER},
};

static bool gen_string(struct conv *c, const json_t *s, struct sbuf *b)
{
    const json_t *fmt = json_object_get(s, "format");
    const json_t *pat = json_object_get(s, "pattern");
    uint64_t m = 0, n = UINT64_MAX;
    bool has_min, has_max;
    if (!get_count(c, s, "minLength", &m, &has_min) || !get_count(c, s, "maxLength", &n, &has_max))
        return false;
    c->used |= P_WS;
    if (fmt) {
        const char *fs = json_string_value(fmt);
        size_t i = 0;
        while (fs && i < GS_ARRAY_LEN(string_formats) && strcmp(fs, string_formats[i].name))
            i++;
        if (!fs || i == GS_ARRAY_LEN(string_formats))
            return refuse(c, "format", "unknown format (supported: date, time, date-time, uuid, "
                                       "email, hostname, ipv4, ipv6, uri, url, semver)");
        if (pat || has_min || has_max)
            return refuse(c, pat ? "pattern" : has_min ? "minLength" : "maxLength",
                          "beside format");
        c->used |= string_formats[i].prim;
        for (size_t k = 0; k < GS_ARRAY_LEN(prims); k++)
            if (prims[k].flag == string_formats[i].prim)
                sb_printf(b, "\"\\\"\" %s \"\\\"\" ws ", prims[k].name);
        return true;
    }
    if (pat) {
        sb_puts(b, "\"\\\"\" ");
        if (!gen_pattern(c, pat, m, has_max ? n : UINT64_MAX, has_max ? "maxLength" : "minLength",
                         b))
            return false;
        sb_puts(b, "\"\\\"\" ws ");
        return true;
    }
    if (n > SCHEMA_MAX_REPEAT)
        n = has_max ? SCHEMA_MAX_REPEAT : UINT64_MAX; /* tightened: see the file's head */
    if (m > SCHEMA_MAX_REPEAT)
        return refuse(c, "minLength", "over the limit of 4096");
    if (m > n)
        return refuse(c, "minLength", "more than maxLength");
    if (n != UINT64_MAX)
        n = rep_upper(c, m, n);
    if (m == 0 && n == UINT64_MAX) {
        c->used |= P_STRING;
        sb_puts(b, "string ");
        return true;
    }
    c->used |= P_CHAR;
    sb_puts(b, "\"\\\"\" ");
    if (n == UINT64_MAX)
        sb_printf(b, "char{%llu,} ", (unsigned long long)m);
    else if (n > 0)
        sb_printf(b, "char{%llu,%llu} ", (unsigned long long)m, (unsigned long long)n);
    sb_puts(b, "\"\\\"\" ws ");
    return true;
}

/* ---- dispatch (declarations) ------------------------------------------------- */

static bool gen_ref(struct conv *c, const json_t *s, const char *hint, struct sbuf *into);

/* ---- enum and const ---------------------------------------------------------- */

/* json_dump_callback into a struct sbuf. */
static int dump_cb(const char *buf, size_t size, void *data)
{
    sb_putn(data, buf, size);
    return ((struct sbuf *)data)->bad ? -1 : 0;
}

/* Whether pattern (a Python re, PCRE2 here) finds a match in subject. -1:
 * the pattern does not compile. */
static int pcre_search(const char *pattern, size_t plen, const char *subject, size_t slen)
{
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, plen, PCRE2_UTF, &ec, &eo, NULL);
    if (!re)
        return -1;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = md ? pcre2_match(re, (PCRE2_SPTR)subject, slen, 0, 0, md, NULL) : -1;
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return rc >= 0 ? 1 : rc == PCRE2_ERROR_NOMATCH ? 0 : -1;
}

/* Whether value v satisfies the string and number keywords of s (the only
 * ones allowed beside enum). */
static bool enum_value_ok(struct conv *c, const json_t *s, const json_t *v, unsigned types,
                          bool *ok)
{
    *ok = (value_type(v) & types) != 0;
    if (!*ok)
        return true;
    if (json_is_string(v)) {
        uint64_t m = 0, n = UINT64_MAX;
        if (!get_count(c, s, "minLength", &m, NULL) || !get_count(c, s, "maxLength", &n, NULL))
            return false;
        size_t len = utf8_count(json_string_value(v), json_string_length(v));
        *ok = len >= m && len <= n;
        const json_t *pat = json_object_get(s, "pattern");
        if (*ok && pat) {
            if (!json_is_string(pat))
                return bad_value(c, "pattern", "must be a string");
            int r = pcre_search(json_string_value(pat), json_string_length(pat),
                                json_string_value(v), json_string_length(v));
            if (r < 0)
                return refuse(c, "pattern", "does not compile");
            *ok = r == 1;
        }
        if (*ok && json_object_get(s, "format"))
            return refuse(c, "format", "beside enum");
    } else if (json_is_number(v)) {
        struct bounds bd;
        if (!read_bounds(c, s, &bd))
            return false;
        double x = json_number_value(v);
        if (bd.has_lo)
            *ok = *ok && (bd.lo_excl ? x > bd.lo : x >= bd.lo);
        if (bd.has_hi)
            *ok = *ok && (bd.hi_excl ? x < bd.hi : x <= bd.hi);
        const json_t *mo = json_object_get(s, "multipleOf");
        if (mo) {
            double d;
            if (!get_number(mo, &d) || d <= 0)
                return bad_value(c, "multipleOf", "must be a positive number");
            *ok = *ok && fmod(x, d) == 0;
        }
    }
    return true;
}

static bool gen_enum(struct conv *c, const json_t *s, struct sbuf *b)
{
    static const char *const allowed[] = {
        "type",    "enum",    "const",   "minLength",        "maxLength",       "pattern",
        "minimum", "maximum", "format",  "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
    };
    const char *k;
    json_t *v;
    json_t *all = enum_values(s);
    unsigned present = 0;
    for (size_t i = 0; i < json_array_size(all); i++)
        present |= value_type(json_array_get(all, i));
    json_decref(all);
    json_object_foreach((json_t *)s, k, v)
    {
        /* Object and array keywords constrain nothing when no value is one. */
        if (kw_kind(k) == KW_CONSTRAINT && !key_is(k, allowed, GS_ARRAY_LEN(allowed)) &&
            (kw_types(k) & present))
            return refuse(c, k, "beside enum or const");
    }
    const json_t *e = json_object_get(s, "enum");
    if (e && !json_is_array(e))
        return bad_value(c, "enum", "must be an array");
    if (e && json_array_size(e) > SCHEMA_MAX_ENUM)
        return over_limit(c, "enum values", SCHEMA_MAX_ENUM);
    unsigned types = declared_types(c, s);
    if (!types)
        return false;
    json_t *vals = enum_values(s);
    if (!vals)
        return fail(c, GS_NOMEM, "out of memory");
    size_t i, n = 0;
    bool ok = true;
    json_array_foreach(vals, i, v)
    {
        bool fits;
        if (!(ok = enum_value_ok(c, s, v, types, &fits)))
            break;
        if (!fits)
            continue;
        struct sbuf text = {0};
        json_dump_callback(v, dump_cb, &text, JSON_COMPACT | JSON_ENCODE_ANY);
        if (text.bad) {
            b->bad = text.bad;
            sb_free(&text);
            break;
        }
        sb_puts(b, n++ ? "| " : "( ");
        sb_lit(b, text.p, text.n);
        sb_free(&text);
    }
    json_decref(vals);
    if (!ok)
        return false;
    if (b->bad)
        return b->bad == SB_NOMEM ? fail(c, GS_NOMEM, "out of memory")
                                  : over_limit(c, "bytes of grammar", SCHEMA_MAX_GBNF_BYTES);
    if (!n)
        return refuse(c, json_object_get(s, "enum") ? "enum" : "const",
                      "no value satisfies the schema");
    sb_puts(b, ") ws ");
    c->used |= P_WS;
    return true;
}

/* ---- objects ---------------------------------------------------------------- */

/* A trie of the listed property names, over code points, for the rule of keys
 * that are none of them (additionalProperties true or a schema). */
struct trie {
    uint32_t *cp;      /* [n] the code point leading to node i from its parent */
    uint32_t *parent;  /* [n] */
    bool *terminal;    /* [n] a listed name ends here */
    uint32_t n, cap;
};

static bool trie_add(struct conv *c, struct trie *t, const char *key, size_t len)
{
    uint32_t at = 0;
    size_t i = 0;
    if (t->n == 0) {
        t->cap = 64;
        t->cp = gs_alloc_array(t->cap, sizeof(*t->cp));
        t->parent = gs_alloc_array(t->cap, sizeof(*t->parent));
        t->terminal = gs_calloc(t->cap, sizeof(*t->terminal));
        if (!t->cp || !t->parent || !t->terminal)
            return fail(c, GS_NOMEM, "out of memory");
        t->n = 1;
        t->cp[0] = 0;
        t->parent[0] = 0;
    }
    while (i < len) {
        int32_t cp = utf8_next(key, len, &i);
        if (cp < 0)
            return true; /* not text: no plain key can equal it */
        uint32_t next = 0;
        for (uint32_t k = 1; k < t->n && !next; k++)
            if (t->parent[k] == at && t->cp[k] == (uint32_t)cp)
                next = k;
        if (!next) {
            if (t->n == t->cap) {
                uint32_t cap = t->cap * 2;
                uint32_t *a = gs_realloc(t->cp, cap * sizeof(*a));
                if (a)
                    t->cp = a;
                uint32_t *p = a ? gs_realloc(t->parent, cap * sizeof(*p)) : NULL;
                if (p)
                    t->parent = p;
                bool *term = p ? gs_realloc(t->terminal, cap * sizeof(*term)) : NULL;
                if (!term)
                    return fail(c, GS_NOMEM, "out of memory");
                t->terminal = term;
                memset(t->terminal + t->cap, 0, (cap - t->cap) * sizeof(*term));
                t->cap = cap;
            }
            next = t->n++;
            t->cp[next] = (uint32_t)cp;
            t->parent[next] = at;
        }
        at = next;
    }
    t->terminal[at] = true;
    return true;
}

static void trie_free(struct trie *t)
{
    gs_free(t->cp);
    gs_free(t->parent);
    gs_free(t->terminal);
}

/* Rules for a quoted key that is not one of the trie's names (plain
 * characters only: an escape could spell a listed name). Appends the first
 * rule's name to into. */
static bool gen_other_key(struct conv *c, struct trie *t, struct sbuf *into)
{
    /* No listed names: the trie is its root alone, and "" is a key like any. */
    if (t->n == 0) {
        if (!trie_add(c, t, "", 0))
            return false;
        t->terminal[0] = false;
    }
    char **names = gs_calloc(t->n, sizeof(*names));
    if (!names)
        return fail(c, GS_NOMEM, "out of memory");
    bool ok = true;
    for (uint32_t i = 0; i < t->n && ok; i++)
        ok = (names[i] = rule_name(c, "key")) != NULL;
    for (uint32_t i = 0; i < t->n && ok; i++) {
        struct sbuf b = {0};
        bool sep = false;
        if (!t->terminal[i]) {
            sb_puts(&b, "\"\\\"\" ");
            sep = true;
        }
        sb_puts(&b, sep ? "| " : "");
        sb_puts(&b, "[^\"\\\\\\x7F\\x00-\\x1F");
        for (uint32_t k = 1; k < t->n; k++)
            if (t->parent[k] == i && json_plain(t->cp[k]))
                sb_class_cp(&b, t->cp[k]);
        sb_puts(&b, "] kchar* \"\\\"\" ");
        for (uint32_t k = 1; k < t->n; k++)
            if (t->parent[k] == i && json_plain(t->cp[k])) {
                sb_puts(&b, "| ");
                sb_json_char(&b, t->cp[k]);
                sb_puts(&b, names[k]);
                sb_puts(&b, " ");
            }
        ok = rule_add(c, names[i], &b);
        sb_free(&b);
    }
    if (ok) {
        c->used |= P_KCHAR;
        sb_puts(into, "\"\\\"\" ");
        sb_puts(into, names[0]);
        sb_puts(into, " ");
    }
    for (uint32_t i = 0; i < t->n; i++)
        gs_free(names[i]);
    gs_free(names);
    return ok;
}

struct prop {
    const char *name;
    const json_t *schema; /* NULL: any value */
    bool required;
};

/* Whether any listed name matches a patternProperties regex; merges that
 * pattern's schema into the property's. */
static bool apply_pattern_properties(struct conv *c, const json_t *pp, struct prop *props,
                                     size_t n)
{
    if (!json_is_object(pp))
        return bad_value(c, "patternProperties", "must be an object");
    const char *pat;
    json_t *ps;
    json_object_foreach((json_t *)pp, pat, ps)
    {
        for (size_t i = 0; i < n; i++) {
            int r = pcre_search(pat, strlen(pat), props[i].name, strlen(props[i].name));
            if (r < 0)
                return refuse(c, "patternProperties", "a pattern that does not compile");
            if (r == 0)
                continue;
            size_t old = path_push(c, "patternProperties");
            path_push(c, pat);
            json_t *fa = props[i].schema ? flatten(c, props[i].schema, 0) : own(c, json_object());
            json_t *fb = fa ? flatten(c, ps, 0) : NULL;
            json_t *m = fb ? merge(c, fa, fb, 0) : NULL;
            path_pop(c, old);
            if (!m)
                return false;
            props[i].schema = m;
        }
    }
    return true;
}

static bool is_required(const json_t *req, const char *name)
{
    size_t i;
    json_t *e;
    json_array_foreach(req, i, e)
    {
        if (json_is_string(e) && !strcmp(json_string_value(e), name))
            return true;
    }
    return false;
}

/* Whether the generated object may carry keys beyond the listed ones. */
static bool object_extras(const json_t *s)
{
    const json_t *addl = json_object_get(s, "additionalProperties");
    return addl && !is_never(addl) && !json_object_get(s, "patternProperties") &&
           !json_object_get(s, "maxProperties");
}

/*
 * "{" then the properties in the schema's order (required ones always,
 * optional ones maybe), the required names properties does not list, then
 * (additionalProperties true or a schema) other keys. Commas: A[i] is "the
 * rest from property i, nothing written yet", B[i] "the rest, something
 * written"; each is a rule so that the text stays linear in the number of
 * properties.
 */
static bool gen_object(struct conv *c, const json_t *s, struct sbuf *b)
{
    const json_t *props = json_object_get(s, "properties");
    const json_t *req = json_object_get(s, "required");
    const json_t *addl = json_object_get(s, "additionalProperties");
    const json_t *pp = json_object_get(s, "patternProperties");
    const json_t *deps = json_object_get(s, "dependencies");
    if (!deps)
        deps = json_object_get(s, "dependentRequired");
    if (props && !json_is_object(props))
        return bad_value(c, "properties", "must be an object");
    if (req && !json_is_array(req))
        return bad_value(c, "required", "must be an array");
    if (addl && !json_is_boolean(addl) && !json_is_object(addl))
        return bad_value(c, "additionalProperties", "must be a schema");
    if (deps && !json_is_object(deps))
        return bad_value(c, "dependencies", "must be an object");
    if (addl && is_never(addl))
        addl = json_false();

    size_t n_props = (props ? json_object_size(props) : 0) + (req ? json_array_size(req) : 0);
    struct prop *p = gs_calloc(n_props + 1, sizeof(*p));
    if (!p)
        return fail(c, GS_NOMEM, "out of memory");
    size_t n = 0;
    const char *k;
    json_t *v;
    bool ok = true;
    json_object_foreach((json_t *)props, k, v)
    {
        p[n].name = k;
        p[n].schema = is_never(v) ? json_false() : v;
        p[n++].required = req && is_required(req, k);
    }
    size_t i;
    json_array_foreach(req, i, v)
    {
        if (!json_is_string(v)) {
            ok = bad_value(c, "required", "must be an array of strings");
            break;
        }
        const char *name = json_string_value(v);
        bool listed = false;
        for (size_t j = 0; j < n && !listed; j++)
            listed = !strcmp(p[j].name, name);
        if (listed)
            continue;
        if (json_is_false(addl) && !pp) {
            ok = refuse(c, "required", "names a property that additionalProperties false forbids");
            break;
        }
        p[n].name = name;
        p[n].schema = json_is_object(addl) ? addl : NULL;
        p[n++].required = true;
    }
    /* dependencies: a name whose presence requires others (the array form)
     * or a schema (the schema form). If it is always present, so are the
     * others; if it is optional, it is never written, which meets either
     * form. A name no listed property has must not be writable as an extra
     * key. */
    json_object_foreach((json_t *)deps, k, v)
    {
        if (!ok)
            break;
        bool listed = false;
        for (size_t j = 0; j < n; j++)
            listed |= !strcmp(p[j].name, k);
        if (!listed && object_extras(s)) {
            ok = refuse(c, "dependencies", "on a name that an extra key could spell");
            break;
        }
        if (!json_is_array(v)) {
            for (size_t j = 0; j < n && ok; j++) {
                if (strcmp(p[j].name, k))
                    continue;
                if (p[j].required)
                    ok = refuse(c, "dependencies",
                                "a schema that a required property brings along");
                else
                    p[j].schema = json_false();
            }
            continue;
        }
        for (size_t j = 0; j < n; j++) {
            if (strcmp(p[j].name, k))
                continue;
            if (!p[j].required) {
                p[j].schema = json_false();
                continue;
            }
            size_t d;
            json_t *dn;
            json_array_foreach(v, d, dn)
            {
                for (size_t q = 0; q < n; q++)
                    if (json_is_string(dn) && !strcmp(p[q].name, json_string_value(dn)))
                        p[q].required = true;
                bool found = false;
                for (size_t q = 0; q < n; q++)
                    found |= json_is_string(dn) && !strcmp(p[q].name, json_string_value(dn));
                if (!found) {
                    ok = refuse(c, "dependencies", "requires a property that is not listed");
                    break;
                }
            }
        }
    }
    if (ok && pp)
        ok = apply_pattern_properties(c, pp, p, n);

    bool extras = ok && object_extras(s);
    /* minProperties / maxProperties: enforced when the listing decides them. */
    uint64_t min_p = 0, max_p = UINT64_MAX, n_req = 0, n_max = 0;
    bool has_min_p = false, has_max_p = false;
    if (ok)
        ok = get_count(c, s, "minProperties", &min_p, &has_min_p) &&
             get_count(c, s, "maxProperties", &max_p, &has_max_p);
    for (size_t j = 0; j < n && ok; j++) {
        n_req += p[j].required;
        n_max += !json_is_false(p[j].schema);
    }
    /* minProperties over the required ones: the first optional properties
     * (in the schema's order) become required, a subset that meets it. */
    for (size_t j = 0; j < n && ok && has_min_p && min_p > n_req; j++)
        if (!p[j].required && !json_is_false(p[j].schema)) {
            p[j].required = true;
            n_req++;
        }
    if (ok && has_min_p && min_p > n_req)
        ok = refuse(c, "minProperties", "more than the properties that can be written");
    if (ok && has_max_p && max_p < n_max)
        ok = refuse(c, "maxProperties", "fewer than the listed properties");
    if (ok && has_max_p)
        extras = false; /* the listed ones already reach it */

    /* Values and key-value rules. */
    char **kv = gs_calloc(n + 1, sizeof(*kv));
    if (!kv && ok)
        ok = fail(c, GS_NOMEM, "out of memory");
    c->containers++;
    for (size_t j = 0; j < n && ok; j++) {
        if (json_is_false(p[j].schema)) {
            if (p[j].required)
                ok = refuse(c, "required", "names a property whose schema is false");
            continue;
        }
        size_t old = path_push(c, "properties");
        path_push(c, p[j].name);
        struct sbuf body = {0};
        json_t *key = json_string(p[j].name);
        struct sbuf text = {0};
        json_dump_callback(key, dump_cb, &text, JSON_ENCODE_ANY);
        json_decref(key);
        sb_lit(&body, sb_str(&text), text.n);
        sb_free(&text);
        sb_puts(&body, "ws \":\" ws ");
        if (p[j].schema)
            ok = gen_ref(c, p[j].schema, p[j].name, &body);
        else {
            c->used |= P_VALUE;
            sb_puts(&body, "value ");
        }
        if (ok && (kv[j] = rule_name(c, "kv")) != NULL)
            ok = rule_add(c, kv[j], &body);
        else
            ok = false;
        sb_free(&body);
        path_pop(c, old);
    }
    char *xkv = NULL;
    if (ok && extras) {
        struct trie t = {0};
        for (size_t j = 0; j < n && ok; j++)
            ok = trie_add(c, &t, p[j].name, strlen(p[j].name));
        struct sbuf body = {0};
        if (ok)
            ok = gen_other_key(c, &t, &body);
        trie_free(&t);
        sb_puts(&body, "ws \":\" ws ");
        size_t old = path_push(c, "additionalProperties");
        if (ok && json_is_object(addl))
            ok = gen_ref(c, addl, "additional", &body);
        else if (ok) {
            c->used |= P_VALUE;
            sb_puts(&body, "value ");
        }
        path_pop(c, old);
        if (ok && (xkv = rule_name(c, "kv-other")) != NULL)
            ok = rule_add(c, xkv, &body);
        else
            ok = false;
        sb_free(&body);
    }
    c->containers--;

    /* The chain, from the end. */
    char *a_next = NULL, *b_next = NULL;
    if (ok && xkv) {
        struct sbuf ab = {0}, bb = {0};
        sb_printf(&ab, "( %s ( \",\" ws %s )* )?", xkv, xkv);
        sb_printf(&bb, "( \",\" ws %s )*", xkv);
        a_next = rule_name(c, "obj-a");
        b_next = a_next ? rule_name(c, "obj-b") : NULL;
        ok = b_next && rule_add(c, a_next, &ab) && rule_add(c, b_next, &bb);
        sb_free(&ab);
        sb_free(&bb);
    }
    for (size_t j = n; j-- > 0 && ok;) {
        if (!kv[j])
            continue;
        struct sbuf ab = {0}, bb = {0};
        const char *bn = b_next ? b_next : "";
        if (p[j].required) {
            sb_printf(&ab, "%s %s", kv[j], bn);
            sb_printf(&bb, "\",\" ws %s %s", kv[j], bn);
        } else {
            if (a_next)
                sb_printf(&ab, "%s %s | %s", kv[j], bn, a_next);
            else
                sb_printf(&ab, "( %s %s )?", kv[j], bn);
            sb_printf(&bb, "( \",\" ws %s )? %s", kv[j], bn);
        }
        char *an = rule_name(c, "obj-a");
        char *bnn = an ? rule_name(c, "obj-b") : NULL;
        ok = bnn && rule_add(c, an, &ab) && rule_add(c, bnn, &bb);
        sb_free(&ab);
        sb_free(&bb);
        gs_free(a_next);
        gs_free(b_next);
        a_next = an;
        b_next = bnn;
    }
    if (ok) {
        sb_puts(b, "\"{\" ws ");
        if (a_next)
            sb_printf(b, "%s ", a_next);
        sb_puts(b, "\"}\" ws ");
        c->used |= P_WS;
    }
    gs_free(a_next);
    gs_free(b_next);
    gs_free(xkv);
    for (size_t j = 0; kv && j < n; j++)
        gs_free(kv[j]);
    gs_free(kv);
    gs_free(p);
    return ok;
}

/* ---- arrays ----------------------------------------------------------------- */

/* item repeated lo to hi times (hi UINT64_MAX: no bound). */
static void sb_rep(struct sbuf *b, const char *item, uint64_t lo, uint64_t hi)
{
    unsigned long long l = lo, h = hi;
    if (hi == 0)
        return;
    if (lo == 1 && hi == 1) {
        sb_printf(b, "%s ", item);
        return;
    }
    sb_printf(b, "( %s)", item);
    if (hi == UINT64_MAX && lo <= 1)
        sb_puts(b, lo ? "+ " : "* ");
    else if (hi == UINT64_MAX)
        sb_printf(b, "{%llu,} ", l);
    else if (lo == 0 && hi == 1)
        sb_puts(b, "? ");
    else if (lo == hi)
        sb_printf(b, "{%llu} ", l);
    else
        sb_printf(b, "{%llu,%llu} ", l, h);
}

/* "[" items "]": a prefix (prefixItems, or draft 4's array-form items) then
 * the rest (items, or additionalItems), with minItems and maxItems. */
static bool gen_array(struct conv *c, const json_t *s, struct sbuf *b)
{
    const json_t *items = json_object_get(s, "items");
    const json_t *prefix = json_object_get(s, "prefixItems");
    const json_t *rest = items;
    const char *rest_key = "items";
    if (json_is_array(items)) {
        if (prefix)
            return bad_value(c, "items", "an array beside prefixItems");
        prefix = items;
        rest = json_object_get(s, "additionalItems");
        rest_key = "additionalItems";
    }
    if (prefix && !json_is_array(prefix))
        return bad_value(c, "prefixItems", "must be an array");
    if (rest && !json_is_boolean(rest) && !json_is_object(rest))
        return bad_value(c, rest_key, "must be a schema");
    uint64_t m = 0, mx = UINT64_MAX;
    bool has_max;
    if (!get_count(c, s, "minItems", &m, NULL) || !get_count(c, s, "maxItems", &mx, &has_max))
        return false;
    const json_t *uniq = json_object_get(s, "uniqueItems");
    if (json_is_true(uniq) && mx > 1)
        return refuse(c, "uniqueItems", "cannot be enforced by a grammar");
    size_t k = prefix ? json_array_size(prefix) : 0;
    bool rest_none = is_never(rest);
    for (size_t i = 0; i < k; i++)
        if (is_never(json_array_get(prefix, i))) {
            /* No item may stand here: the array ends before it. */
            k = i;
            rest_none = true;
        }
    if (mx > SCHEMA_MAX_REPEAT)
        mx = has_max ? SCHEMA_MAX_REPEAT : UINT64_MAX; /* tightened: see the file's head */
    if (rest_none && mx > k)
        mx = k;
    if (m > SCHEMA_MAX_REPEAT)
        return refuse(c, "minItems", "over the limit of 4096");
    if (m > mx)
        return refuse(c, "minItems", rest_none ? "more than the items allowed" : "more than maxItems");
    if (mx != UINT64_MAX && mx > k)
        mx = k + rep_upper(c, m > k ? m - k : 0, mx - k);
    if (k > mx)
        k = (size_t)mx;

    c->containers++;
    bool ok = true;
    struct sbuf restref = {0};
    if (mx > k) {
        size_t old = path_push(c, rest_key);
        if (json_is_object(rest) && json_object_size(rest)) {
            ok = gen_ref(c, rest, "item", &restref);
        } else {
            c->used |= P_VALUE;
            sb_puts(&restref, "value ");
        }
        path_pop(c, old);
    }
    char **pre = k ? gs_calloc(k, sizeof(*pre)) : NULL;
    if (k && !pre)
        ok = fail(c, GS_NOMEM, "out of memory");
    for (size_t i = 0; i < k && ok; i++) {
        size_t old = path_push_index(c, json_is_array(items) ? "items" : "prefixItems", i);
        struct sbuf one = {0};
        ok = gen_ref(c, json_array_get(prefix, i), "item", &one);
        if (ok)
            pre[i] = gs_strdup(sb_str(&one));
        ok = ok && pre[i];
        if (!ok && !c->failed)
            fail(c, GS_NOMEM, "out of memory");
        sb_free(&one);
        path_pop(c, old);
    }
    c->containers--;

    /* The rest after a full prefix: ("," item){lo,hi}; with no prefix the
     * first item has no comma. */
    struct sbuf tail = {0};
    uint64_t rlo = m > k ? m - k : 0;
    uint64_t rhi = mx == UINT64_MAX ? UINT64_MAX : mx - k;
    if (ok && rhi > 0) {
        struct sbuf one = {0};
        sb_printf(&one, "\",\" ws %s", sb_str(&restref));
        if (k == 0 && rlo == 0) {
            sb_printf(&tail, "( %s", sb_str(&restref));
            sb_rep(&tail, sb_str(&one), 0, rhi == UINT64_MAX ? rhi : rhi - 1);
            sb_puts(&tail, ")? ");
        } else if (k == 0) {
            sb_puts(&tail, sb_str(&restref));
            sb_rep(&tail, sb_str(&one), rlo - 1, rhi == UINT64_MAX ? rhi : rhi - 1);
        } else {
            sb_rep(&tail, sb_str(&one), rlo, rhi);
        }
        if (one.bad)
            tail.bad = one.bad;
        sb_free(&one);
    }
    /* The prefix from its end: C[i] = item_i ("," ws C[i+1])?, the group
     * mandatory while the items are below minItems. */
    struct sbuf seq = {0};
    if (ok) {
        sb_puts(&seq, k ? "" : sb_str(&tail));
        struct sbuf cur = {0};
        for (size_t i = k; i-- > 0;) {
            struct sbuf nx = {0};
            sb_puts(&nx, pre[i]);
            if (i + 1 < k) {
                bool need = i + 1 < m;
                sb_puts(&nx, need ? "\",\" ws " : "( \",\" ws ");
                sb_puts(&nx, sb_str(&cur));
                sb_puts(&nx, need ? "" : ")? ");
            } else {
                sb_puts(&nx, sb_str(&tail));
            }
            sb_free(&cur);
            cur = nx;
            if (cur.bad)
                break;
        }
        if (k) {
            if (m == 0)
                sb_printf(&seq, "( %s)? ", sb_str(&cur));
            else
                sb_puts(&seq, sb_str(&cur));
        }
        if (cur.bad)
            seq.bad = cur.bad;
        sb_free(&cur);
        if (tail.bad)
            seq.bad = tail.bad;
        if (seq.bad)
            ok = seq.bad == SB_NOMEM ? fail(c, GS_NOMEM, "out of memory")
                                     : over_limit(c, "bytes of grammar", SCHEMA_MAX_GBNF_BYTES);
    }
    if (ok) {
        sb_puts(b, "\"[\" ws ");
        sb_puts(b, sb_str(&seq));
        sb_puts(b, "\"]\" ws ");
        c->used |= P_WS;
    }
    sb_free(&seq);
    sb_free(&tail);
    sb_free(&restref);
    for (size_t i = 0; pre && i < k; i++)
        gs_free(pre[i]);
    gs_free(pre);
    return ok;
}

/* ---- anyOf and oneOf -------------------------------------------------------- */

/* The types the generator writes for a flattened schema. */
static unsigned gen_types(struct conv *c, const json_t *s);

static unsigned sem_types(struct conv *c, const json_t *s)
{
    json_t *vals = enum_values(s);
    if (vals) {
        unsigned t = 0;
        size_t i;
        json_t *v;
        json_array_foreach(vals, i, v)
        {
            t |= value_type(v);
        }
        json_decref(vals);
        return t;
    }
    if (json_object_get(s, "anyOf") || json_object_get(s, "oneOf"))
        return T_ALL;
    return declared_types(c, s);
}

/* A property's enum/const values (new reference) after following its $ref. */
static json_t *prop_values(struct conv *c, const json_t *s, const char *name)
{
    const json_t *props = json_object_get(s, "properties");
    const json_t *ps = json_is_object(props) ? json_object_get(props, name) : NULL;
    if (!ps)
        return NULL;
    if (needs_flatten(ps) || json_object_get(ps, "$ref"))
        ps = flatten(c, ps, 0);
    return ps ? enum_values(ps) : NULL;
}

static bool values_disjoint(const json_t *a, const json_t *b)
{
    for (size_t i = 0; i < json_array_size(a); i++)
        for (size_t j = 0; j < json_array_size(b); j++)
            if (json_same(json_array_get(a, i), json_array_get(b, j)))
                return false;
    return true;
}

/* Whether the generator may write name for s (listed and not forbidden). */
static bool lists(const json_t *s, const char *name)
{
    const json_t *props = json_object_get(s, "properties");
    const json_t *ps = json_is_object(props) ? json_object_get(props, name) : NULL;
    return (ps && !is_never(ps)) || is_required(json_object_get(s, "required"), name);
}

/* Whether every output generated for (flattened) i fails schema j. */
static bool rejects(struct conv *c, const json_t *i, const json_t *j)
{
    unsigned gi = gen_types(c, i);
    if (!(gi & sem_types(c, j)))
        return true;
    json_t *ei = enum_values(i), *ej = enum_values(j);
    bool dis = ei && ej && values_disjoint(ei, ej);
    json_decref(ei);
    json_decref(ej);
    if (dis)
        return true;
    if (gi != T_OBJECT)
        return false;
    /* A discriminating property: present in i's outputs or required by j,
     * with values the two sides do not share. */
    const json_t *pi = json_object_get(i, "properties"), *pj = json_object_get(j, "properties");
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)pi, k, v)
    {
        if (!json_is_object(pj) || !json_object_get(pj, k))
            continue;
        if (!is_required(json_object_get(i, "required"), k) &&
            !is_required(json_object_get(j, "required"), k))
            continue;
        json_t *vi = prop_values(c, i, k), *vj = prop_values(c, j, k);
        bool d = vi && vj && values_disjoint(vi, vj);
        json_decref(vi);
        json_decref(vj);
        if (d)
            return true;
    }
    /* A name j requires that i never writes. */
    const json_t *rj = json_object_get(j, "required");
    size_t n;
    json_array_foreach(rj, n, v)
    {
        const char *name = json_is_string(v) ? json_string_value(v) : NULL;
        const json_t *ps = name && json_is_object(pi) ? json_object_get(pi, name) : NULL;
        if (name && !lists(i, name) && (ps || !object_extras(i)))
            return true;
    }
    /* A name i always writes that j (closed) forbids. */
    const json_t *ri = json_object_get(i, "required");
    if (is_never(json_object_get(j, "additionalProperties")) &&
        !json_object_get(j, "patternProperties")) {
        json_array_foreach(ri, n, v)
        {
            if (json_is_string(v) && !(json_is_object(pj) && json_object_get(pj, json_string_value(v))))
                return true;
        }
    }
    return false;
}

/* A copy of *i (owned by c, replacing *i) whose objects never carry a name
 * that j requires and i does not; false only on failure. Unchanged when
 * there is none or i writes more than objects. */
static bool forbid_required(struct conv *c, json_t **i, const json_t *j)
{
    if (gen_types(c, *i) != T_OBJECT)
        return true;
    const json_t *rj = json_object_get(j, "required");
    size_t n;
    json_t *v;
    json_array_foreach(rj, n, v)
    {
        const char *name = json_is_string(v) ? json_string_value(v) : NULL;
        if (!name || is_required(json_object_get(*i, "required"), name))
            continue;
        json_t *copy = own(c, json_deep_copy(*i));
        const json_t *props = copy ? json_object_get(copy, "properties") : NULL;
        json_t *np = json_is_object(props) ? json_deep_copy(props) : json_object();
        if (!copy || !np || json_object_set(np, name, json_false()) ||
            json_object_set_new(copy, "properties", np))
            return fail(c, GS_NOMEM, "out of memory");
        *i = copy;
        return true;
    }
    return true;
}

static bool gen_union(struct conv *c, const json_t *s, struct sbuf *b)
{
    const json_t *any = json_object_get(s, "anyOf"), *one = json_object_get(s, "oneOf");
    if (any && one)
        return refuse(c, "oneOf", "beside anyOf");
    const char *key = any ? "anyOf" : "oneOf";
    const json_t *alts = any ? any : one;
    if (!json_is_array(alts) || !json_array_size(alts))
        return bad_value(c, key, "must be a non-empty array");
    if (json_array_size(alts) > SCHEMA_MAX_ENUM)
        return over_limit(c, "alternatives", SCHEMA_MAX_ENUM);
    const char *const skip[] = {key};
    bool siblings = has_constraints_besides(s, skip, 1);
    json_t *base = NULL;
    if (siblings || one) {
        json_t *copy = own(c, json_deep_copy(s));
        if (!copy)
            return false;
        json_object_del(copy, key);
        base = flatten(c, copy, 0);
        if (!base)
            return false;
    }
    size_t n = json_array_size(alts);
    json_t **flat = gs_calloc(n, sizeof(*flat));
    if (!flat)
        return fail(c, GS_NOMEM, "out of memory");
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        size_t old = path_push_index(c, key, i);
        const json_t *alt = json_array_get(alts, i);
        if (base) {
            json_t *fa = flatten(c, alt, 0);
            flat[i] = fa ? merge(c, base, fa, 0) : NULL;
            ok = flat[i] != NULL;
        }
        path_pop(c, old);
    }
    bool *changed = gs_calloc(n, sizeof(*changed));
    if (!changed && ok)
        ok = fail(c, GS_NOMEM, "out of memory");
    for (size_t i = 0; i < n && ok && one; i++)
        for (size_t j = 0; j < n && ok; j++) {
            if (i == j || rejects(c, flat[i], flat[j]))
                continue;
            /* Make i's outputs fail j by never writing a name j requires. */
            if (!c->failed && (ok = forbid_required(c, &flat[i], flat[j])))
                changed[i] = true;
            if (ok && !c->failed && rejects(c, flat[i], flat[j]))
                continue;
            char why[96];
            snprintf(why, sizeof(why), "alternatives %zu and %zu may both match", GS_MIN(i, j),
                     GS_MAX(i, j));
            ok = refuse(c, "oneOf", why);
        }
    for (size_t i = 0; i < n && ok; i++) {
        size_t old = path_push_index(c, key, i);
        sb_puts(b, i ? "| " : "( ");
        ok = gen_ref(c, siblings || changed[i] ? flat[i] : json_array_get(alts, i), key, b);
        path_pop(c, old);
    }
    if (ok)
        sb_puts(b, ") ");
    gs_free(changed);
    gs_free(flat);
    return ok;
}

/* ---- dispatch --------------------------------------------------------------- */

/* Without "type", the types whose keywords the schema uses (a validator lets
 * other types through; writing only these is a subset); T_ALL if none. */
static unsigned inferred_types(const json_t *s)
{
    static const struct {
        const char *key;
        unsigned types;
    } t[] = {
        {"properties", T_OBJECT},       {"required", T_OBJECT},       {"additionalProperties", T_OBJECT},
        {"patternProperties", T_OBJECT}, {"minProperties", T_OBJECT}, {"maxProperties", T_OBJECT},
        {"dependencies", T_OBJECT},     {"dependentRequired", T_OBJECT}, {"items", T_ARRAY},
        {"prefixItems", T_ARRAY},       {"additionalItems", T_ARRAY}, {"minItems", T_ARRAY},
        {"maxItems", T_ARRAY},          {"uniqueItems", T_ARRAY},     {"minLength", T_STRING},
        {"maxLength", T_STRING},        {"pattern", T_STRING},        {"minimum", T_NUMBER | T_INTEGER},
        {"maximum", T_NUMBER | T_INTEGER}, {"exclusiveMinimum", T_NUMBER | T_INTEGER},
        {"exclusiveMaximum", T_NUMBER | T_INTEGER}, {"multipleOf", T_NUMBER | T_INTEGER},
    };
    unsigned types = 0;
    for (size_t i = 0; i < GS_ARRAY_LEN(t); i++)
        if (json_object_get(s, t[i].key))
            types |= t[i].types;
    const json_t *f = json_object_get(s, "format");
    if (json_is_string(f)) {
        const char *fs = json_string_value(f);
        types |= !strcmp(fs, "int32") || !strcmp(fs, "int64")    ? T_INTEGER
                 : !strcmp(fs, "double") || !strcmp(fs, "float") ? T_NUMBER | T_INTEGER
                                                                 : T_STRING;
    }
    return types ? types : T_ALL;
}

static unsigned gen_types(struct conv *c, const json_t *s)
{
    if (!json_is_object(s))
        return T_ALL;
    json_t *vals = enum_values(s);
    if (vals) {
        json_decref(vals);
        return sem_types(c, s);
    }
    if (json_object_get(s, "anyOf") || json_object_get(s, "oneOf"))
        return T_ALL;
    if (json_object_get(s, "type"))
        return declared_types(c, s);
    return inferred_types(s);
}

static bool gen_body(struct conv *c, const json_t *s, struct sbuf *b);

static bool gen_body_flat(struct conv *c, const json_t *s, struct sbuf *b)
{
    if (json_is_true(s)) {
        c->used |= P_VALUE;
        sb_puts(b, "value ");
        return true;
    }
    if (json_is_false(s))
        return fail(c, GS_INVAL, "schema at %s%s: false matches nothing", cpath(c), c->path);
    if (!json_is_object(s))
        return fail(c, GS_INVAL, "schema at %s%s: must be an object or a boolean", cpath(c),
                    c->path);
    if (!check_keywords(c, s))
        return false;
    if (json_object_get(s, "not"))
        return refuse(c, "not", is_never(s) ? "a schema that matches nothing" : NULL);
    if (json_object_get(s, "$ref"))
        return gen_ref(c, s, "ref", b);
    if (json_object_get(s, "anyOf") || json_object_get(s, "oneOf"))
        return gen_union(c, s, b);
    if (json_object_get(s, "enum") || json_object_get(s, "const"))
        return gen_enum(c, s, b);
    unsigned types = json_object_get(s, "type") ? declared_types(c, s) : inferred_types(s);
    if (!types)
        return false;
    if (types == T_ALL && !json_object_get(s, "type")) {
        c->used |= P_VALUE;
        sb_puts(b, "value ");
        return true;
    }
    static const unsigned order[] = {T_OBJECT, T_ARRAY, T_STRING, T_NUMBER, T_INTEGER, T_BOOLEAN,
                                     T_NULL};
    int n = 0;
    for (size_t i = 0; i < GS_ARRAY_LEN(order); i++)
        n += (types & order[i]) && !(order[i] == T_INTEGER && (types & T_NUMBER));
    bool ok = true;
    int k = 0;
    sb_puts(b, n > 1 ? "( " : "");
    for (size_t i = 0; i < GS_ARRAY_LEN(order) && ok; i++) {
        unsigned t = order[i];
        if (!(types & t) || (t == T_INTEGER && (types & T_NUMBER)))
            continue;
        sb_puts(b, k++ ? "| " : "");
        switch (t) {
        case T_OBJECT:
            ok = gen_object(c, s, b);
            break;
        case T_ARRAY:
            ok = gen_array(c, s, b);
            break;
        case T_STRING:
            ok = gen_string(c, s, b);
            break;
        case T_NUMBER:
            ok = gen_number(c, s, b);
            break;
        case T_INTEGER:
            ok = gen_integer(c, s, b);
            break;
        case T_BOOLEAN:
            c->used |= P_BOOLEAN;
            sb_puts(b, "boolean ");
            break;
        default:
            c->used |= P_NULL;
            sb_puts(b, "null ");
            break;
        }
    }
    sb_puts(b, n > 1 ? ") " : "");
    return ok;
}

static bool gen_body(struct conv *c, const json_t *s, struct sbuf *b)
{
    if (needs_flatten(s)) {
        json_t *f = flatten(c, s, 0);
        return f && gen_body_flat(c, f, b);
    }
    return gen_body_flat(c, s, b);
}

/* The rule of a $ref's target, written once. */
static bool gen_ref_target(struct conv *c, const json_t *s, struct sbuf *into)
{
    const json_t *ref = json_object_get(s, "$ref");
    const json_t *target = ref_resolve(c, ref);
    if (!target)
        return false;
    for (size_t i = 0; i < c->n_refs; i++) {
        if (c->refs[i].target != target)
            continue;
        if (!c->refs[i].done && c->refs[i].head == c->containers)
            return refuse(c, "$ref", "a recursion that writes nothing before it recurs");
        sb_puts(into, c->refs[i].name);
        sb_puts(into, " ");
        return true;
    }
    if (c->n_refs == c->cap_refs) {
        size_t cap = c->cap_refs ? c->cap_refs * 2 : 16;
        struct refent *r = gs_realloc(c->refs, cap * sizeof(*r));
        if (!r)
            return fail(c, GS_NOMEM, "out of memory");
        c->refs = r;
        c->cap_refs = cap;
    }
    const char *ptr = json_string_value(ref);
    const char *last = strrchr(ptr, '/');
    char hint[48];
    snprintf(hint, sizeof(hint), "ref-%s", last ? last + 1 : "root");
    size_t me = c->n_refs;
    char *name = rule_name(c, hint);
    if (!name)
        return false;
    c->refs[c->n_refs++] = (struct refent){.target = target, .name = name, .head = c->containers};
    /* Errors inside the target name its own path. */
    char saved[sizeof(c->path)];
    size_t saved_len = c->path_len;
    memcpy(saved, c->path, saved_len + 1);
    snprintf(c->path, sizeof(c->path), "%s", ptr + 1);
    c->path_len = strlen(c->path);
    struct sbuf body = {0};
    bool ok = gen_body(c, target, &body) && rule_add(c, name, &body);
    sb_free(&body);
    memcpy(c->path, saved, saved_len + 1);
    c->path_len = saved_len;
    c->refs[me].done = true;
    if (ok) {
        sb_puts(into, c->refs[me].name);
        sb_puts(into, " ");
    }
    return ok;
}

/* Appends to into a reference to the rule of schema s (made here, or the
 * shared rule of a $ref target, or a primitive). */
static bool gen_ref(struct conv *c, const json_t *s, const char *hint, struct sbuf *into)
{
    if (c->depth >= SCHEMA_MAX_DEPTH)
        return over_limit(c, "nested schemas", SCHEMA_MAX_DEPTH);
    c->depth++;
    bool ok;
    if (is_trivial(s)) {
        c->used |= P_VALUE;
        sb_puts(into, "value ");
        ok = true;
    } else if (json_is_object(s) && json_object_get(s, "$ref") && !needs_flatten(s)) {
        ok = check_keywords(c, s) && gen_ref_target(c, s, into);
    } else {
        char *name = rule_name(c, hint);
        struct sbuf body = {0};
        ok = name && gen_body(c, s, &body);
        /* A body that is one rule name (a primitive, a $ref target) is used
         * as it is. */
        size_t len = body.n;
        while (len && body.p[len - 1] == ' ')
            len--;
        bool single = ok && len && strspn(body.p, "abcdefghijklmnopqrstuvwxyz0123456789-") == len;
        if (ok && !single)
            ok = rule_add(c, name, &body);
        if (ok) {
            sb_puts(into, single ? body.p : name);
            if (!single)
                sb_puts(into, " ");
        }
        sb_free(&body);
        gs_free(name);
    }
    c->depth--;
    if (into->bad && ok)
        ok = into->bad == SB_NOMEM ? fail(c, GS_NOMEM, "out of memory")
                                   : over_limit(c, "bytes of grammar", SCHEMA_MAX_GBNF_BYTES);
    return ok;
}

/* One conversion with upper bounds tightened to rep_cap. On success *out
 * holds the grammar; *reps (gs_free) the bounded repetitions it wrote. */
static enum gs_status convert(const json_t *schema, uint64_t rep_cap, struct gs_err *err,
                              struct sbuf *out, uint64_t **reps, size_t *n_reps)
{
    struct conv c = {.root = schema, .err = err, .rep_cap = rep_cap};
    c.owned = json_array();
    c.refs = gs_malloc(16 * sizeof(*c.refs));
    char *root_name = gs_strdup("root");
    if (!c.owned || !c.refs || !root_name) {
        json_decref(c.owned);
        gs_free(c.refs);
        gs_free(root_name);
        return gs_err_set(err, GS_NOMEM, "out of memory");
    }
    /* The root is the target of "#": its rule is "root" itself. */
    c.cap_refs = 16;
    c.refs[c.n_refs++] = (struct refent){.target = schema, .name = root_name, .head = 0};
    struct sbuf body = {0}, all = {0};
    bool ok = gen_body(&c, schema, &body);
    c.refs[0].done = true;
    if (ok && (body.bad || c.out.bad))
        ok = (body.bad | c.out.bad) & SB_NOMEM ? fail(&c, GS_NOMEM, "out of memory")
                                               : over_limit(&c, "bytes of grammar",
                                                            SCHEMA_MAX_GBNF_BYTES);
    if (ok) {
        sb_puts(&all, "root ::= ");
        sb_puts(&all, sb_str(&body));
        sb_puts(&all, "\n");
        sb_puts(&all, sb_str(&c.out));
        prims_emit(&all, c.used);
        if (all.bad)
            ok = all.bad == SB_NOMEM ? fail(&c, GS_NOMEM, "out of memory")
                                     : over_limit(&c, "bytes of grammar", SCHEMA_MAX_GBNF_BYTES);
    }
    sb_free(&body);
    sb_free(&c.out);
    for (size_t i = 0; i < c.n_refs; i++)
        gs_free(c.refs[i].name);
    gs_free(c.refs);
    json_decref(c.owned);
    if (!ok) {
        sb_free(&all);
        gs_free(c.reps);
        return err->code ? err->code : GS_INVAL;
    }
    *out = all;
    *reps = c.reps;
    *n_reps = c.n_reps;
    return GS_OK;
}

static uint64_t reps_cost(const uint64_t *reps, size_t n, uint64_t cap)
{
    uint64_t cost = 0;
    for (size_t i = 0; i < n; i++)
        cost += GS_MAX(reps[2 * i], GS_MIN(reps[2 * i + 1], cap));
    return cost;
}

enum gs_status gs_grammar_from_json_schema(const json_t *schema, char **gbnf, size_t *gbnf_len,
                                           struct gs_err *err)
{
    if (gbnf)
        *gbnf = NULL;
    if (gbnf_len)
        *gbnf_len = 0;
    if (err)
        gs_err_clear(err);
    if (!schema || !gbnf)
        return gs_err_set(err, GS_INVAL, "no schema");
    struct gs_err local = {0};
    if (!err)
        err = &local;
    struct sbuf out = {0};
    uint64_t *reps = NULL;
    size_t n_reps = 0;
    enum gs_status st = convert(schema, SCHEMA_MAX_REPEAT, err, &out, &reps, &n_reps);
    if (st == GS_OK && reps_cost(reps, n_reps, SCHEMA_MAX_REPEAT) > SCHEMA_REPEAT_BUDGET) {
        /* Too many counted repetitions for the compiler: the largest cap that
         * fits, then again with it. Lower bounds cannot be tightened. */
        uint64_t lo = 0, hi = SCHEMA_MAX_REPEAT;
        while (lo < hi) {
            uint64_t mid = (lo + hi + 1) / 2;
            if (reps_cost(reps, n_reps, mid) <= SCHEMA_REPEAT_BUDGET)
                lo = mid;
            else
                hi = mid - 1;
        }
        bool fits = lo > 0 && reps_cost(reps, n_reps, lo) <= SCHEMA_REPEAT_BUDGET;
        sb_free(&out);
        gs_free(reps);
        reps = NULL;
        if (!fits)
            st = gs_err_set(err, GS_INVAL,
                            "over the limit of %u counted repetitions (minLength, minItems) at #",
                            SCHEMA_REPEAT_BUDGET);
        else
            st = convert(schema, lo, err, &out, &reps, &n_reps);
    }
    gs_free(reps);
    if (st)
        return st;
    *gbnf = out.p;
    if (gbnf_len)
        *gbnf_len = out.n;
    return GS_OK;
}
