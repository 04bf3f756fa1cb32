/*
 * engine/jinja/internal.h - what the parts of the Jinja renderer share: the
 * arena, the value model, the syntax tree, and the evaluator's context.
 * Private to engine/jinja/.
 *
 * Memory: the parser allocates the tree in the template's arena, freed with
 * the template. A render allocates every value, frame and buffer in one arena
 * of its own, bounded by max_memory_bytes and freed whole at the end, so that
 * no value is ever freed on its own and no error path leaks.
 *
 * Values are small structs passed by value; strings, lists and dicts point
 * into an arena. Lists and dicts are never modified once built (the sandbox
 * refuses mutating methods), except a namespace's attributes, which {% set
 * ns.attr = ... %} assigns in place as Jinja does.
 */
#ifndef GS_JINJA_INTERNAL_H
#define GS_JINJA_INTERNAL_H

#include "engine/jinja.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- arena ----------------------------------------------------------------- */

struct jarena {
    struct jchunk *head; /* newest chunk first */
    size_t used_bytes;   /* all chunks together */
    size_t limit_bytes;  /* 0: unlimited (the template's own arena) */
    bool over_limit;     /* the last failure was the limit, not the system */
};

void gs_jinja__arena_init(struct jarena *ar, size_t limit_bytes);
void gs_jinja__arena_deinit(struct jarena *ar);
/* 16-byte aligned, uninitialised; NULL when out of memory or over the limit. */
void *gs_jinja__alloc(struct jarena *ar, size_t size);
/* Overflow-checked n * size, zeroed. */
void *gs_jinja__alloc_array(struct jarena *ar, size_t n, size_t size);

/* ---- values ------------------------------------------------------------------ */

enum jv_kind {
    JV_UNDEF, /* u.s/n: what was looked up, for error messages */
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,    /* u.s/n: bytes, UTF-8 by convention, not NUL-terminated */
    JV_LIST,   /* u.list; JV_F_TUPLE prints as a tuple, JV_F_GEN is a generator */
    JV_DICT,   /* u.dict: insertion-ordered */
    JV_NS,     /* u.dict: a namespace(), the one mutable object */
    JV_MACRO,  /* u.macro */
    JV_FUNC,   /* u.func: a global such as range */
    JV_METHOD, /* u.bound: obj.name not yet called */
    JV_LOOP,   /* u.loop: the loop variable of a for */
};

enum {
    JV_F_TUPLE = 1, /* a tuple literal or pair: prints with () */
    JV_F_GEN = 2,   /* a filter's lazy result: no len(), not JSON, always true */
    JV_F_MSG = 4,   /* JV_UNDEF: u.s is the whole message, not a variable name */
};

/* Provenance: the byte ranges of a string that came from the context (the
 * caller's data, such as message contents), so that a caller can tell them
 * from the template's own text in the output (control tokens are for the
 * template's text only). Ascending, disjoint, never empty. */
struct jspan {
    uint32_t off, len;
};
struct jspans {
    uint32_t n;
    struct jspan v[];
};

struct jlist;
struct jdict;
struct jmacro;
struct jfunc;
struct jbound;
struct jloop;

struct jv {
    uint8_t kind;  /* enum jv_kind */
    uint8_t flags; /* JV_F_* */
    uint32_t n;    /* length of u.s */
    union {
        bool b;
        int64_t i;
        double f;
        const char *s;
        struct jlist *list;
        struct jdict *dict;
        const struct jmacro *macro;
        const struct jfunc *func;
        const struct jbound *bound;
        const struct jloop *loop;
    } u;
    const struct jspans *sp; /* JV_STR: its context bytes; NULL when none */
};

struct jlist {
    struct jv *items;
    size_t n;
};

struct jdict {
    struct jv *keys;
    struct jv *vals;
    size_t n, cap;
};

struct jbound {
    struct jv self;
    const char *name;
};

struct jloop {
    const struct jlist *items; /* what is iterated, after the loop's filter */
    size_t index0;
    unsigned depth0;
};

/* A growing byte buffer in a render's arena, bounded by max_output_bytes,
 * with the spans of its bytes that came from the context. */
struct jbuf {
    char *p;
    size_t n, cap;
    struct jspan *sp;
    size_t n_sp, cap_sp;
};

static inline struct jv jv_undef(const char *hint, size_t n)
{
    return (struct jv){.kind = JV_UNDEF, .n = (uint32_t)n, .u.s = hint};
}
static inline struct jv jv_none(void)
{
    return (struct jv){.kind = JV_NONE};
}
static inline struct jv jv_bool(bool b)
{
    return (struct jv){.kind = JV_BOOL, .u.b = b};
}
static inline struct jv jv_int(int64_t i)
{
    return (struct jv){.kind = JV_INT, .u.i = i};
}
static inline struct jv jv_float(double f)
{
    return (struct jv){.kind = JV_FLOAT, .u.f = f};
}
static inline struct jv jv_str(const char *s, size_t n)
{
    return (struct jv){.kind = JV_STR, .n = (uint32_t)n, .u.s = s};
}

/* ---- the syntax tree ------------------------------------------------------------ */

enum jn_kind {
    /* expressions */
    JN_LIT,    /* lit */
    JN_NAME,   /* name */
    JN_LIST,   /* kids */
    JN_TUPLE,  /* kids */
    JN_DICT,   /* kids: key, value, key, value ... */
    JN_ATTR,   /* a.name */
    JN_ITEM,   /* a[b] */
    JN_SLICE,  /* a[b:c:d], any of b c d may be NULL */
    JN_CALL,   /* a(kids; kw) */
    JN_FILTER, /* a|name(kids; kw); a is NULL in a filter block */
    JN_TEST,   /* a is [not] name(kids); op = 1 when negated */
    JN_UNARY,  /* op a: JT_MINUS, JT_PLUS, JT_NOT */
    JN_BINARY, /* a op b: arithmetic, comparison, in, not in, ~ */
    JN_AND,    /* a and b */
    JN_OR,     /* a or b */
    JN_COND,   /* b if a else c (c may be NULL) */
    /* statements */
    JN_BODY,         /* kids: statements in order */
    JN_DATA,         /* lit: template text */
    JN_OUTPUT,       /* {{ a }} */
    JN_IF,           /* a: condition, b: body, c: else body or NULL */
    JN_FOR,          /* a: target, b: iterable, c: filter or NULL, d: body, e: else or NULL */
    JN_SET,          /* a: target (NAME, TUPLE of NAMEs, or ATTR of a NAME), b: value */
    JN_SET_BLOCK,    /* a: target NAME, b: body, c: FILTER chain or NULL */
    JN_MACRO,        /* name; kids: NAME params, each with its default in a; b: body */
    JN_FILTER_BLOCK, /* a: FILTER chain (innermost operand NULL), b: body */
    JN_BREAK,
    JN_CONTINUE,
};

/* Token types the parser uses as operators in JN_UNARY / JN_BINARY. */
enum jt_op {
    JT_ADD = 1,
    JT_MINUS,
    JT_PLUS,
    JT_MUL,
    JT_DIV,
    JT_FLOORDIV,
    JT_MOD,
    JT_POW,
    JT_TILDE,
    JT_EQ,
    JT_NE,
    JT_LT,
    JT_LE,
    JT_GT,
    JT_GE,
    JT_IN,
    JT_NOTIN,
    JT_NOT,
};

struct jn {
    uint8_t kind;    /* enum jn_kind */
    uint8_t op;      /* enum jt_op, or the negation of a test */
    uint16_t height; /* 1 + the tallest child: bounds the evaluator's recursion */
    uint32_t line;
    struct jn *a, *b, *c, *d, *e;
    struct jn **kids;
    size_t n_kids;
    struct jn **kw_vals; /* keyword arguments of a call, filter or test */
    const char **kw_names;
    size_t n_kw;
    const char *name; /* NUL-terminated, in the template's arena */
    uint32_t hash;    /* JN_NAME: gs_jinja__name_hash(name) */
    struct jv lit;
};

struct jmacro {
    const struct jn *def;   /* JN_MACRO */
    struct jframe *closure; /* the scope it was defined in */
};

struct gs_jinja_tmpl {
    struct jarena arena;
    struct gs_jinja_limits lim;
    struct jn *root; /* JN_BODY */
};

/* ---- lexer ------------------------------------------------------------------------ */

enum jtok_kind {
    JTK_EOF,
    JTK_DATA,        /* text between tags */
    JTK_BLOCK_BEGIN, /* {% */
    JTK_BLOCK_END,   /* %} */
    JTK_VAR_BEGIN,   /* {{ */
    JTK_VAR_END,     /* }} */
    JTK_NAME,
    JTK_STRING, /* escapes resolved */
    JTK_INT,
    JTK_FLOAT,
    JTK_OP, /* punctuation: s/n hold it, op the enum jt_op if any */
};

struct jtok {
    uint8_t kind;
    uint8_t op;
    uint32_t line, col;
    const char *s; /* NAME/DATA/OP: into the source or the arena; STRING: arena */
    size_t n;
    int64_t i;
    double f;
};

struct jlexer {
    const char *src, *end, *p;
    uint32_t line;
    const char *line_start;
    bool in_tag;          /* between {% / {{ and its end */
    uint8_t tag_kind;     /* JTK_BLOCK_BEGIN or JTK_VAR_BEGIN while in_tag */
    unsigned paren_depth; /* brackets opened inside the tag */
    struct jarena *arena;
    struct gs_err *err;
};

void gs_jinja__lex_init(struct jlexer *lx, const char *src, size_t len, struct jarena *arena,
                        struct gs_err *err);
/* Next token; returns -1 with err set (GS_FORMAT, line and column) on a lexical error. */
int gs_jinja__lex_next(struct jlexer *lx, struct jtok *tok);

/* ---- parser ------------------------------------------------------------------------ */

enum gs_status gs_jinja__parse(struct gs_jinja_tmpl *t, const char *src, size_t len,
                               struct gs_err *err);

/* ---- evaluator --------------------------------------------------------------------- */

struct jframe {
    struct jframe *parent;
    const char **names;
    struct jv *vals;
    uint32_t *hashes; /* gs_jinja__name_hash of each name */
    size_t n, cap;
};

struct jctx {
    struct jarena arena;
    const struct gs_jinja_limits *lim;
    struct jbuf *out; /* where output goes now (set blocks and macros redirect it) */
    uint64_t iterations;
    unsigned call_depth;
    int64_t now_unix_s;
    uint32_t line; /* of the node being evaluated, for messages */
    enum gs_jinja_fail fail;
    struct gs_err *err;
};

/* value.c: errors. Every evaluator function returns 0, or -1 after setting
 * the context's error. */
int gs_jinja__error(struct jctx *cx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int gs_jinja__limit(struct jctx *cx, const char *name, uint64_t value);
int gs_jinja__nomem(struct jctx *cx);
/* The UndefinedError for using v (an undefined) where a value is needed. */
int gs_jinja__undefined_error(struct jctx *cx, struct jv v);
/* An undefined whose message is printf-style (allocated in the arena). */
struct jv gs_jinja__undef_msg(struct jctx *cx, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* value.c: building, printing, comparing */
int gs_jinja__buf_put(struct jctx *cx, struct jbuf *b, const char *s, size_t n);
int gs_jinja__buf_putc(struct jctx *cx, struct jbuf *b, char c);
int gs_jinja__str_new(struct jctx *cx, const char *s, size_t n, struct jv *out);
/* Appends a string with its provenance; s.u.s[from..from+n) of it. */
int gs_jinja__buf_put_str(struct jctx *cx, struct jbuf *b, struct jv s);
int gs_jinja__buf_put_part(struct jctx *cx, struct jbuf *b, struct jv s, size_t from, size_t n);
/* Marks b's bytes from offset from to its end as context. */
int gs_jinja__buf_mark(struct jctx *cx, struct jbuf *b, size_t from);
/* The part [p, p+n) of whole (p points into it), keeping its provenance. */
int gs_jinja__view(struct jctx *cx, struct jv whole, const char *p, size_t n, struct jv *out);
/* Marks all of *s as context when from carries any context byte (a derived
 * string whose bytes cannot be traced one by one: upper(), replace(), ...). */
int gs_jinja__taint(struct jctx *cx, struct jv from, struct jv *s);
/* Whether v, or any string inside it, carries context bytes. */
bool gs_jinja__has_context(struct jv v);
int gs_jinja__buf_to_str(struct jctx *cx, const struct jbuf *b, struct jv *out);
int gs_jinja__list_new(struct jctx *cx, size_t n, struct jv *out);
int gs_jinja__dict_new(struct jctx *cx, size_t cap, struct jv *out);
int gs_jinja__dict_set(struct jctx *cx, struct jdict *d, struct jv key, struct jv val);
bool gs_jinja__dict_get(const struct jdict *d, struct jv key, struct jv *out);
bool gs_jinja__dict_get_str(const struct jdict *d, const char *key, size_t n, struct jv *out);
/* track: its strings are context bytes (see gs_jinja_span). */
int gs_jinja__from_json(struct jctx *cx, const json_t *j, bool track, struct jv *out);
/* Python str() and repr() of v appended to b; tojson as json.dumps. */
int gs_jinja__print(struct jctx *cx, struct jbuf *b, struct jv v);
int gs_jinja__repr(struct jctx *cx, struct jbuf *b, struct jv v);
int gs_jinja__to_str(struct jctx *cx, struct jv v, struct jv *out);
/* json.dumps's arguments, as Hugging Face's tojson passes them. */
struct jjson {
    int indent; /* < 0: all on one line */
    bool sort_keys;
    bool ensure_ascii;    /* non-ASCII as \uXXXX */
    const char *item_sep; /* NULL: ", " (or "," when indenting) */
    size_t item_sep_n;
    const char *key_sep; /* NULL: ": " */
    size_t key_sep_n;
};
int gs_jinja__tojson(struct jctx *cx, struct jbuf *b, struct jv v, const struct jjson *o,
                     int level);
bool gs_jinja__truthy(struct jv v);
bool gs_jinja__equal(struct jv a, struct jv b);
/* Python ordering of two numbers or two strings or two lists: -1, 0, 1 into
 * *cmp; -1 with an error when they are not comparable. */
int gs_jinja__compare(struct jctx *cx, struct jv a, struct jv b, int *cmp);
const char *gs_jinja__type_name(struct jv v);
bool gs_jinja__is_number(struct jv v);
double gs_jinja__as_double(struct jv v);
/* Iteration: lists as they are, dicts by key, strings by code point; undefined
 * gives nothing. Fills a list (a copy for dicts and strings). */
int gs_jinja__iterate(struct jctx *cx, struct jv v, struct jlist **out);
/* UTF-8: code points in s[0..n), and the one at s (invalid bytes count as
 * one each, so that every byte string can be walked). */
size_t gs_jinja__utf8_count(const char *s, size_t n);
uint32_t gs_jinja__utf8_next(const unsigned char *s, size_t n, size_t *len);
/* len(): -1 with an error where Python has no len(). */
int gs_jinja__length(struct jctx *cx, struct jv v, int64_t *out);

/* filters.c and methods.c: filters, tests, methods and globals, each a table row */
struct jargs {
    const struct jv *pos;
    size_t n_pos;
    const char *const *kw_names;
    const struct jv *kw_vals;
    size_t n_kw;
};

/* Argument i by position, else by keyword name (NULL: positional only). */
bool gs_jinja__arg(const struct jargs *a, size_t i, const char *name, struct jv *out);

/* methods.c: string helpers the filters share */
bool gs_jinja__is_space(uint32_t cp); /* Python's str.isspace() for one code point */
/* s without leading/trailing code points in chars (NULL: whitespace); a view into s. */
struct jv gs_jinja__strip(struct jv s, const struct jv *chars, bool left, bool right);
/* mode 'U' upper, 'L' lower, 'T' title, 'C' capitalize */
int gs_jinja__case(struct jctx *cx, struct jv s, char mode, struct jv *out);
int gs_jinja__replace(struct jctx *cx, struct jv s, struct jv old, struct jv new_s, int64_t count,
                      struct jv *out);

/* A list of unknown length, grown in the arena, then made a value. */
struct jlistb {
    struct jv *items;
    size_t n, cap;
};
int gs_jinja__listb_push(struct jctx *cx, struct jlistb *lb, struct jv v);
int gs_jinja__listb_done(struct jctx *cx, struct jlistb *lb, struct jv *out);

int gs_jinja__filter(struct jctx *cx, const char *name, struct jv in, const struct jargs *args,
                     struct jv *out);
int gs_jinja__test(struct jctx *cx, const char *name, struct jv in, const struct jargs *args,
                   bool *out);
/* obj.name(args) for str, dict, list and loop methods; *found false when obj
 * has no such method (the caller then reads the attribute). */
int gs_jinja__method(struct jctx *cx, struct jv self, const char *name, const struct jargs *args,
                     struct jv *out);
bool gs_jinja__has_method(struct jv self, const char *name);
/* The globals every render starts with (range, namespace, raise_exception, ...). */
int gs_jinja__add_globals(struct jctx *cx, struct jframe *f);
int gs_jinja__call_func(struct jctx *cx, const struct jfunc *fn, const struct jargs *args,
                        struct jv *out);
/* ops.c: operators, subscripts and attributes */
int gs_jinja__binary(struct jctx *cx, uint8_t op, struct jv a, struct jv b, struct jv *out);
int gs_jinja__slice(struct jctx *cx, struct jv obj, const struct jv *lo, const struct jv *hi,
                    const struct jv *step, struct jv *out);
/* format.c: fmt % args, Python's printf-style formatting. */
int gs_jinja__percent_format(struct jctx *cx, struct jv fmt, struct jv args, struct jv *out);
/* Looks an attribute up the way Jinja's getattr does: attribute, then item. */
int gs_jinja__getattr(struct jctx *cx, struct jv obj, const char *name, struct jv *out);
int gs_jinja__getitem(struct jctx *cx, struct jv obj, struct jv key, struct jv *out);

/* eval.c, for builtins that call back (map, macros) */
int gs_jinja__call_value(struct jctx *cx, struct jv callee, const struct jargs *args,
                         struct jv *out);

/* frame.c: scopes */
/* An empty frame inside parent (NULL: the outermost), in the render's arena;
 * NULL, with the error set, when out of memory. */
struct jframe *gs_jinja__frame_new(struct jctx *cx, struct jframe *parent);
/* Binds name to v in f itself (not its parents), replacing an earlier
 * binding there. name is borrowed and must outlive the render. */
int gs_jinja__frame_set(struct jctx *cx, struct jframe *f, const char *name, struct jv v);
/* name's value, looked up from f outwards; hash is gs_jinja__name_hash(name).
 * false when no frame binds it. */
bool gs_jinja__frame_get(const struct jframe *f, const char *name, uint32_t hash, struct jv *out);
uint32_t gs_jinja__name_hash(const char *name);

#endif /* GS_JINJA_INTERNAL_H */
