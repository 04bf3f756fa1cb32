/*
 * engine/jinja/parse.c - tokens to the syntax tree: recursive descent with
 * Jinja's operator precedence, lowest first:
 *
 *   a if c else b  <  or  <  and  <  not  <  comparisons, in, not in
 *   <  + -  <  ~  <  * / // %  <  **  <  unary - +  <  filters |f, tests is t
 *   <  postfix .attr [item] (call)  <  literals, names, ( ), [ ], { }
 *
 * Each node records its height; a node taller than max_depth is refused
 * where it is built, which bounds both this parser's recursion and the
 * evaluator's (an operator chain a ~ b ~ ... is as tall as it is long).
 */
#include "engine/jinja/internal.h"

#include <string.h>

struct jparser {
    struct jtok *toks;
    size_t n_toks, pos;
    struct gs_jinja_tmpl *t;
    struct jarena *ar;
    struct gs_err *err;
    size_t n_nodes;
    unsigned depth;              /* current recursion of the parser itself */
    const struct jtok *open_tag; /* the '{%' of the innermost block being parsed */
};

/* ---- errors and tokens ---------------------------------------------------- */

static struct jtok *cur(struct jparser *ps)
{
    return &ps->toks[ps->pos];
}

static struct jtok *peek(struct jparser *ps, size_t k)
{
    size_t i = ps->pos + k;
    return &ps->toks[i < ps->n_toks ? i : ps->n_toks - 1];
}

static void *fail_at(struct jparser *ps, const struct jtok *tok, const char *what)
{
    if (ps->err->code == GS_OK)
        gs_err_set(ps->err, GS_FORMAT, "jinja: line %u, column %u: %s", tok->line, tok->col, what);
    return NULL;
}

static void *fail(struct jparser *ps, const char *what)
{
    return fail_at(ps, cur(ps), what);
}

static void *nomem(struct jparser *ps)
{
    if (ps->err->code == GS_OK)
        gs_err_set(ps->err, GS_NOMEM, "jinja: out of memory while parsing");
    return NULL;
}

static void advance(struct jparser *ps)
{
    if (ps->pos + 1 < ps->n_toks)
        ps->pos++;
}

static bool is_name(const struct jtok *tok, const char *name)
{
    return tok->kind == JTK_NAME && tok->n == strlen(name) && memcmp(tok->s, name, tok->n) == 0;
}

static bool is_op(const struct jtok *tok, const char *op)
{
    return tok->kind == JTK_OP && tok->n == strlen(op) && memcmp(tok->s, op, tok->n) == 0;
}

static bool skip_op(struct jparser *ps, const char *op)
{
    if (!is_op(cur(ps), op))
        return false;
    advance(ps);
    return true;
}

static bool skip_name(struct jparser *ps, const char *name)
{
    if (!is_name(cur(ps), name))
        return false;
    advance(ps);
    return true;
}

static bool expect_op(struct jparser *ps, const char *op)
{
    if (skip_op(ps, op))
        return true;
    char msg[64];
    snprintf(msg, sizeof(msg), "expected '%s'", op);
    fail(ps, msg);
    return false;
}

static bool expect_block_end(struct jparser *ps)
{
    if (cur(ps)->kind == JTK_BLOCK_END) {
        advance(ps);
        return true;
    }
    fail(ps, "expected the end of the tag '%}'");
    return false;
}

static const char *dup_name(struct jparser *ps, const struct jtok *tok)
{
    char *s = gs_jinja__alloc(ps->ar, tok->n + 1);
    if (!s)
        return nomem(ps);
    memcpy(s, tok->s, tok->n);
    s[tok->n] = '\0';
    return s;
}

/* ---- nodes ---------------------------------------------------------------- */

static unsigned height_of(const struct jn *n)
{
    return n ? n->height : 0;
}

/* Recomputes n's height from its children; NULL when it is too tall. */
static struct jn *seal(struct jparser *ps, struct jn *n)
{
    if (!n)
        return NULL;
    unsigned h = GS_MAX(GS_MAX(height_of(n->a), height_of(n->b)),
                        GS_MAX(GS_MAX(height_of(n->c), height_of(n->d)), height_of(n->e)));
    for (size_t i = 0; i < n->n_kids; i++)
        h = GS_MAX(h, height_of(n->kids[i]));
    for (size_t i = 0; i < n->n_kw; i++)
        h = GS_MAX(h, height_of(n->kw_vals[i]));
    if (h + 1 > ps->t->lim.max_depth) {
        if (ps->err->code == GS_OK)
            gs_err_set(ps->err, GS_BUSY,
                       "jinja: line %u: limit max_depth (%u) exceeded: expressions or blocks "
                       "nested too deeply",
                       n->line, ps->t->lim.max_depth);
        return NULL;
    }
    n->height = (uint16_t)(h + 1);
    return n;
}

static struct jn *node(struct jparser *ps, enum jn_kind kind, const struct jtok *at)
{
    if (++ps->n_nodes > ps->t->lim.max_ast_nodes) {
        if (ps->err->code == GS_OK)
            gs_err_set(ps->err, GS_BUSY, "jinja: line %u: limit max_ast_nodes (%zu) exceeded",
                       at->line, ps->t->lim.max_ast_nodes);
        return NULL;
    }
    struct jn *n = gs_jinja__alloc(ps->ar, sizeof(*n));
    if (!n)
        return nomem(ps);
    memset(n, 0, sizeof(*n));
    n->kind = (uint8_t)kind;
    n->line = at->line;
    n->height = 1;
    return n;
}

/* A growable array of child pointers, in the template's arena. */
struct kids {
    struct jn **v;
    size_t n, cap;
};

static bool kids_push(struct jparser *ps, struct kids *k, struct jn *child)
{
    if (k->n == k->cap) {
        size_t cap = k->cap ? k->cap * 2 : 4;
        struct jn **v = gs_jinja__alloc_array(ps->ar, cap, sizeof(*v));
        if (!v) {
            nomem(ps);
            return false;
        }
        if (k->n)
            memcpy(v, k->v, k->n * sizeof(*v));
        k->v = v;
        k->cap = cap;
    }
    k->v[k->n++] = child;
    return true;
}

/* The parser's own recursion, bounded by the same limit as the tree. */
static bool enter(struct jparser *ps)
{
    if (++ps->depth > ps->t->lim.max_depth) {
        if (ps->err->code == GS_OK)
            gs_err_set(ps->err, GS_BUSY,
                       "jinja: line %u: limit max_depth (%u) exceeded: expressions or blocks "
                       "nested too deeply",
                       cur(ps)->line, ps->t->lim.max_depth);
        return false;
    }
    return true;
}

static struct jn *leave(struct jparser *ps, struct jn *n)
{
    ps->depth--;
    return n;
}

/* ---- expressions ------------------------------------------------------------ */

static struct jn *parse_expr(struct jparser *ps, bool with_condexpr);
static struct jn *parse_unary(struct jparser *ps, bool with_filter);
static struct jn *parse_primary(struct jparser *ps);
static struct jn *parse_postfix(struct jparser *ps, struct jn *n);

/* Call arguments after '(' up to ')': positional, then name=value. */
static bool parse_call_args(struct jparser *ps, struct jn *call)
{
    struct kids pos = {0}, kwv = {0};
    const char **kwn = NULL;
    size_t kwn_cap = 0;
    while (!is_op(cur(ps), ")")) {
        if (pos.n + kwv.n > 0 && !expect_op(ps, ","))
            return false;
        if (is_op(cur(ps), ")"))
            break; /* a trailing comma */
        if (cur(ps)->kind == JTK_NAME && is_op(peek(ps, 1), "=")) {
            const char *name = dup_name(ps, cur(ps));
            advance(ps);
            advance(ps);
            struct jn *v = parse_expr(ps, true);
            if (!name || !v || !kids_push(ps, &kwv, v))
                return false;
            if (kwv.n > kwn_cap) {
                const char **nn = gs_jinja__alloc_array(ps->ar, kwv.cap, sizeof(*nn));
                if (!nn)
                    return nomem(ps), false;
                if (kwv.n > 1)
                    memcpy(nn, kwn, (kwv.n - 1) * sizeof(*nn));
                kwn = nn;
                kwn_cap = kwv.cap;
            }
            kwn[kwv.n - 1] = name;
            continue;
        }
        if (kwv.n > 0)
            return fail(ps, "positional argument after a keyword argument"), false;
        struct jn *v = parse_expr(ps, true);
        if (!v || !kids_push(ps, &pos, v))
            return false;
    }
    advance(ps); /* ')' */
    call->kids = pos.v;
    call->n_kids = pos.n;
    call->kw_vals = kwv.v;
    call->kw_names = kwn;
    call->n_kw = kwv.n;
    return true;
}

static struct jn *parse_filter(struct jparser *ps, struct jn *operand)
{
    /* After '|': a name, optionally called. */
    if (cur(ps)->kind != JTK_NAME)
        return fail(ps, "expected a filter name after '|'");
    struct jn *f = node(ps, JN_FILTER, cur(ps));
    if (!f || !(f->name = dup_name(ps, cur(ps))))
        return NULL;
    advance(ps);
    f->a = operand;
    if (skip_op(ps, "(") && !parse_call_args(ps, f))
        return NULL;
    return seal(ps, f);
}

/* Whether the token can start the one bare argument of a test (is sameas x). */
static bool starts_test_arg(const struct jtok *tok)
{
    if (tok->kind == JTK_NAME)
        return !is_name(tok, "else") && !is_name(tok, "or") && !is_name(tok, "and") &&
               !is_name(tok, "if") && !is_name(tok, "in") && !is_name(tok, "is") &&
               !is_name(tok, "not");
    return tok->kind == JTK_STRING || tok->kind == JTK_INT || tok->kind == JTK_FLOAT ||
           is_op(tok, "[") || is_op(tok, "{");
}

static struct jn *parse_test(struct jparser *ps, struct jn *operand)
{
    /* After 'is': [not] name, then (args) or one bare argument. */
    struct jn *t = node(ps, JN_TEST, cur(ps));
    if (!t)
        return NULL;
    if (skip_name(ps, "not"))
        t->op = 1;
    if (cur(ps)->kind != JTK_NAME)
        return fail(ps, "expected a test name after 'is'");
    if (!(t->name = dup_name(ps, cur(ps))))
        return NULL;
    advance(ps);
    t->a = operand;
    if (skip_op(ps, "(")) {
        if (!parse_call_args(ps, t))
            return NULL;
    } else if (starts_test_arg(cur(ps))) {
        struct jn *arg = parse_primary(ps);
        if (arg)
            arg = parse_postfix(ps, arg);
        if (!arg)
            return NULL;
        t->kids = gs_jinja__alloc(ps->ar, sizeof(*t->kids));
        if (!t->kids)
            return nomem(ps);
        t->kids[0] = arg;
        t->n_kids = 1;
    }
    return seal(ps, t);
}

static struct jn *parse_filter_expr(struct jparser *ps, struct jn *n)
{
    while (n) {
        if (skip_op(ps, "|"))
            n = parse_filter(ps, n);
        else if (skip_name(ps, "is"))
            n = parse_test(ps, n);
        else
            break;
    }
    return n;
}

static struct jn *parse_subscript(struct jparser *ps, struct jn *obj, const struct jtok *at)
{
    /* After '[': an index, or a slice with any of its three parts. */
    struct jn *parts[3] = {NULL, NULL, NULL};
    int n_colons = 0;
    for (;;) {
        if (is_op(cur(ps), "]"))
            break;
        if (skip_op(ps, ":")) {
            if (++n_colons > 2)
                return fail(ps, "too many ':' in a slice");
            continue;
        }
        if (parts[n_colons])
            return fail(ps, "expected ':' or ']'");
        if (!(parts[n_colons] = parse_expr(ps, true)))
            return NULL;
    }
    advance(ps); /* ']' */
    struct jn *n = node(ps, n_colons ? JN_SLICE : JN_ITEM, at);
    if (!n)
        return NULL;
    n->a = obj;
    if (!n_colons && !parts[0])
        return fail_at(ps, at, "empty subscript");
    n->b = parts[0];
    n->c = parts[1];
    n->d = parts[2];
    return seal(ps, n);
}

static struct jn *parse_postfix(struct jparser *ps, struct jn *n)
{
    while (n) {
        struct jtok *at = cur(ps);
        if (skip_op(ps, ".")) {
            struct jtok *name = cur(ps);
            if (name->kind == JTK_INT) {
                struct jn *item = node(ps, JN_ITEM, at), *key = node(ps, JN_LIT, name);
                if (!item || !key)
                    return NULL;
                key->lit = jv_int(name->i);
                item->a = n;
                item->b = key;
                advance(ps);
                n = seal(ps, item);
                continue;
            }
            if (name->kind != JTK_NAME)
                return fail(ps, "expected an attribute name after '.'");
            struct jn *attr = node(ps, JN_ATTR, at);
            if (!attr || !(attr->name = dup_name(ps, name)))
                return NULL;
            advance(ps);
            attr->a = n;
            n = seal(ps, attr);
        } else if (skip_op(ps, "[")) {
            n = parse_subscript(ps, n, at);
        } else if (skip_op(ps, "(")) {
            struct jn *call = node(ps, JN_CALL, at);
            if (!call)
                return NULL;
            call->a = n;
            if (!parse_call_args(ps, call))
                return NULL;
            n = seal(ps, call);
        } else {
            break;
        }
    }
    return n;
}

/* Items of [ ], ( ) or { } up to the closing bracket; dict items as key, value. */
static struct jn *parse_sequence(struct jparser *ps, enum jn_kind kind, const char *close,
                                 const struct jtok *at, struct jn *first)
{
    struct jn *n = node(ps, kind, at);
    struct kids k = {0};
    if (!n || (first && !kids_push(ps, &k, first)))
        return NULL;
    while (!is_op(cur(ps), close)) {
        if (k.n > 0 && !expect_op(ps, ","))
            return NULL;
        if (is_op(cur(ps), close))
            break;
        struct jn *item = parse_expr(ps, true);
        if (!item || !kids_push(ps, &k, item))
            return NULL;
        if (kind == JN_DICT) {
            if (!expect_op(ps, ":"))
                return NULL;
            struct jn *val = parse_expr(ps, true);
            if (!val || !kids_push(ps, &k, val))
                return NULL;
        }
    }
    advance(ps);
    n->kids = k.v;
    n->n_kids = k.n;
    return seal(ps, n);
}

static struct jn *parse_paren(struct jparser *ps, const struct jtok *at)
{
    /* After '(': (), (x), (x,), (x, y ...). */
    if (skip_op(ps, ")")) {
        struct jn *empty = node(ps, JN_TUPLE, at);
        return empty ? seal(ps, empty) : NULL;
    }
    struct jn *first = parse_expr(ps, true);
    if (!first)
        return NULL;
    if (skip_op(ps, ")"))
        return first;
    if (!is_op(cur(ps), ","))
        return fail(ps, "expected ',' or ')'");
    return parse_sequence(ps, JN_TUPLE, ")", at, first);
}

static struct jn *literal(struct jparser *ps, const struct jtok *at, struct jv v)
{
    struct jn *n = node(ps, JN_LIT, at);
    if (n)
        n->lit = v;
    return n;
}

static struct jn *parse_string(struct jparser *ps)
{
    /* Adjacent string literals join, as in Python. */
    struct jtok *at = cur(ps);
    size_t total = 0;
    size_t i = ps->pos;
    for (; i < ps->n_toks && ps->toks[i].kind == JTK_STRING; i++)
        total += ps->toks[i].n;
    char *s = gs_jinja__alloc(ps->ar, total + 1);
    if (!s)
        return nomem(ps);
    size_t k = 0;
    while (cur(ps)->kind == JTK_STRING) {
        memcpy(s + k, cur(ps)->s, cur(ps)->n);
        k += cur(ps)->n;
        advance(ps);
    }
    s[k] = '\0';
    return literal(ps, at, jv_str(s, k));
}

static struct jn *parse_name_or_constant(struct jparser *ps)
{
    struct jtok *at = cur(ps);
    static const struct {
        const char *name;
        int kind; /* 0 none, 1 true, 2 false */
    } constants[] = {{"none", 0}, {"None", 0},  {"true", 1},
                     {"True", 1}, {"false", 2}, {"False", 2}};
    for (size_t i = 0; i < GS_ARRAY_LEN(constants); i++) {
        if (is_name(at, constants[i].name)) {
            advance(ps);
            int k = constants[i].kind;
            return literal(ps, at, k == 0 ? jv_none() : jv_bool(k == 1));
        }
    }
    struct jn *n = node(ps, JN_NAME, at);
    if (!n || !(n->name = dup_name(ps, at)))
        return NULL;
    n->hash = gs_jinja__name_hash(n->name);
    advance(ps);
    return n;
}

static struct jn *parse_primary(struct jparser *ps)
{
    struct jtok *at = cur(ps);
    if (!enter(ps))
        return NULL;
    struct jn *n = NULL;
    switch (at->kind) {
    case JTK_NAME:
        n = parse_name_or_constant(ps);
        break;
    case JTK_STRING:
        n = parse_string(ps);
        break;
    case JTK_INT:
        advance(ps);
        n = literal(ps, at, jv_int(at->i));
        break;
    case JTK_FLOAT:
        advance(ps);
        n = literal(ps, at, jv_float(at->f));
        break;
    case JTK_OP:
        if (skip_op(ps, "("))
            n = parse_paren(ps, at);
        else if (skip_op(ps, "["))
            n = parse_sequence(ps, JN_LIST, "]", at, NULL);
        else if (skip_op(ps, "{"))
            n = parse_sequence(ps, JN_DICT, "}", at, NULL);
        else
            n = fail(ps, "unexpected operator in an expression");
        break;
    default:
        n = fail(ps, "expected an expression");
    }
    return leave(ps, n);
}

static struct jn *unary_node(struct jparser *ps, const struct jtok *at, uint8_t op,
                             struct jn *operand)
{
    if (!operand)
        return NULL;
    struct jn *n = node(ps, JN_UNARY, at);
    if (!n)
        return NULL;
    n->op = op;
    n->a = operand;
    return seal(ps, n);
}

static struct jn *parse_unary(struct jparser *ps, bool with_filter)
{
    struct jtok *at = cur(ps);
    if (!enter(ps))
        return NULL;
    struct jn *n;
    if (skip_op(ps, "-"))
        n = unary_node(ps, at, JT_MINUS, parse_unary(ps, false));
    else if (skip_op(ps, "+"))
        n = unary_node(ps, at, JT_PLUS, parse_unary(ps, false));
    else
        n = parse_primary(ps);
    n = parse_postfix(ps, n);
    if (with_filter)
        n = parse_filter_expr(ps, n);
    return leave(ps, n);
}

static struct jn *binary(struct jparser *ps, enum jn_kind kind, uint8_t op, const struct jtok *at,
                         struct jn *a, struct jn *b)
{
    if (!a || !b)
        return NULL;
    struct jn *n = node(ps, kind, at);
    if (!n)
        return NULL;
    n->op = op;
    n->a = a;
    n->b = b;
    return seal(ps, n);
}

/* One row per precedence level of left-associative binary operators. */
struct level {
    const char *ops[4];
    uint8_t codes[4];
};

static const struct level levels[] = {
    {{"**"}, {JT_POW}},
    {{"*", "/", "//", "%"}, {JT_MUL, JT_DIV, JT_FLOORDIV, JT_MOD}},
    {{"~"}, {JT_TILDE}},
    {{"+", "-"}, {JT_ADD, JT_MINUS}},
};

static struct jn *parse_level(struct jparser *ps, int level)
{
    if (level < 0)
        return parse_unary(ps, true);
    struct jn *left = parse_level(ps, level - 1);
    for (;;) {
        if (!left)
            return NULL;
        uint8_t code = 0;
        for (int i = 0; i < 4 && levels[level].ops[i]; i++)
            if (is_op(cur(ps), levels[level].ops[i]))
                code = levels[level].codes[i];
        if (!code)
            return left;
        struct jtok *at = cur(ps);
        advance(ps);
        left = binary(ps, JN_BINARY, code, at, left, parse_level(ps, level - 1));
    }
}

static struct jn *parse_math(struct jparser *ps)
{
    return parse_level(ps, (int)GS_ARRAY_LEN(levels) - 1);
}

static uint8_t compare_op(struct jparser *ps)
{
    static const struct {
        const char *op;
        uint8_t code;
    } ops[] = {{"==", JT_EQ}, {"!=", JT_NE}, {"<", JT_LT},
               {"<=", JT_LE}, {">", JT_GT},  {">=", JT_GE}};
    for (size_t i = 0; i < GS_ARRAY_LEN(ops); i++)
        if (is_op(cur(ps), ops[i].op)) {
            advance(ps);
            return ops[i].code;
        }
    if (skip_name(ps, "in"))
        return JT_IN;
    if (is_name(cur(ps), "not") && is_name(peek(ps, 1), "in")) {
        advance(ps);
        advance(ps);
        return JT_NOTIN;
    }
    return 0;
}

static struct jn *parse_compare(struct jparser *ps)
{
    struct jn *left = parse_math(ps);
    for (;;) {
        if (!left)
            return NULL;
        struct jtok *at = cur(ps);
        uint8_t op = compare_op(ps);
        if (!op)
            return left;
        left = binary(ps, JN_BINARY, op, at, left, parse_math(ps));
    }
}

static struct jn *parse_not(struct jparser *ps)
{
    struct jtok *at = cur(ps);
    if (!is_name(at, "not") || is_name(peek(ps, 1), "in"))
        return parse_compare(ps);
    advance(ps);
    if (!enter(ps))
        return NULL;
    return leave(ps, unary_node(ps, at, JT_NOT, parse_not(ps)));
}

static struct jn *parse_and(struct jparser *ps)
{
    struct jn *left = parse_not(ps);
    while (left && is_name(cur(ps), "and")) {
        struct jtok *at = cur(ps);
        advance(ps);
        left = binary(ps, JN_AND, 0, at, left, parse_not(ps));
    }
    return left;
}

static struct jn *parse_or(struct jparser *ps)
{
    struct jn *left = parse_and(ps);
    while (left && is_name(cur(ps), "or")) {
        struct jtok *at = cur(ps);
        advance(ps);
        left = binary(ps, JN_OR, 0, at, left, parse_and(ps));
    }
    return left;
}

static struct jn *parse_condexpr(struct jparser *ps)
{
    struct jn *value = parse_or(ps);
    while (value && is_name(cur(ps), "if")) {
        struct jtok *at = cur(ps);
        advance(ps);
        struct jn *n = node(ps, JN_COND, at);
        if (!n)
            return NULL;
        n->b = value;
        if (!(n->a = parse_or(ps)))
            return NULL;
        if (skip_name(ps, "else") && !(n->c = parse_condexpr(ps)))
            return NULL;
        value = seal(ps, n);
    }
    return value;
}

static struct jn *parse_expr(struct jparser *ps, bool with_condexpr)
{
    if (!enter(ps))
        return NULL;
    return leave(ps, with_condexpr ? parse_condexpr(ps) : parse_or(ps));
}

/* expr, or expr, expr ... as a tuple (set a = 1, 2; for x in a, b; {{ a, b }}). */
static struct jn *parse_tuple(struct jparser *ps, bool with_condexpr)
{
    struct jtok *at = cur(ps);
    struct jn *first = parse_expr(ps, with_condexpr);
    if (!first || !is_op(cur(ps), ","))
        return first;
    struct jn *n = node(ps, JN_TUPLE, at);
    struct kids k = {0};
    if (!n || !kids_push(ps, &k, first))
        return NULL;
    while (skip_op(ps, ",")) {
        if (cur(ps)->kind == JTK_BLOCK_END || cur(ps)->kind == JTK_VAR_END ||
            is_name(cur(ps), "if"))
            break;
        struct jn *item = parse_expr(ps, with_condexpr);
        if (!item || !kids_push(ps, &k, item))
            return NULL;
    }
    n->kids = k.v;
    n->n_kids = k.n;
    return seal(ps, n);
}

/* ---- statements -------------------------------------------------------------- */

static struct jn *parse_body(struct jparser *ps, const char *const *stops, const char **stopped);

/* A name or a, b, ... as a for target or set target; ns.attr where allowed. */
static struct jn *parse_target(struct jparser *ps, bool allow_attr)
{
    struct jtok *at = cur(ps);
    struct kids k = {0};
    do {
        if (cur(ps)->kind != JTK_NAME)
            return fail(ps, "expected a variable name");
        struct jn *name = node(ps, JN_NAME, cur(ps));
        if (!name || !(name->name = dup_name(ps, cur(ps))))
            return NULL;
        name->hash = gs_jinja__name_hash(name->name);
        advance(ps);
        if (allow_attr && k.n == 0 && is_op(cur(ps), ".")) {
            advance(ps);
            if (cur(ps)->kind != JTK_NAME)
                return fail(ps, "expected an attribute name after '.'");
            struct jn *attr = node(ps, JN_ATTR, cur(ps));
            if (!attr || !(attr->name = dup_name(ps, cur(ps))))
                return NULL;
            advance(ps);
            attr->a = name;
            return seal(ps, attr);
        }
        if (!kids_push(ps, &k, name))
            return NULL;
    } while (skip_op(ps, ","));
    if (k.n == 1)
        return k.v[0];
    struct jn *t = node(ps, JN_TUPLE, at);
    if (!t)
        return NULL;
    t->kids = k.v;
    t->n_kids = k.n;
    return seal(ps, t);
}

static struct jn *parse_if(struct jparser *ps, const struct jtok *at)
{
    struct jn *n = node(ps, JN_IF, at);
    if (!n || !(n->a = parse_tuple(ps, true)) || !expect_block_end(ps))
        return NULL;
    static const char *const stops[] = {"elif", "else", "endif", NULL};
    const char *stopped;
    if (!(n->b = parse_body(ps, stops, &stopped)))
        return NULL;
    if (strcmp(stopped, "elif") == 0) {
        n->c = parse_if(ps, at);
        return n->c ? seal(ps, n) : NULL;
    }
    if (strcmp(stopped, "else") == 0) {
        static const char *const end[] = {"endif", NULL};
        if (!expect_block_end(ps) || !(n->c = parse_body(ps, end, &stopped)))
            return NULL;
    }
    return expect_block_end(ps) ? seal(ps, n) : NULL;
}

static struct jn *parse_for(struct jparser *ps, const struct jtok *at)
{
    struct jn *n = node(ps, JN_FOR, at);
    if (!n || !(n->a = parse_target(ps, false)))
        return NULL;
    if (!skip_name(ps, "in"))
        return fail(ps, "expected 'in' in a for loop");
    if (!(n->b = parse_tuple(ps, false)))
        return NULL;
    if (skip_name(ps, "if") && !(n->c = parse_expr(ps, true)))
        return NULL;
    if (is_name(cur(ps), "recursive"))
        return fail(ps, "recursive loops are not supported");
    if (!expect_block_end(ps))
        return NULL;
    static const char *const stops[] = {"else", "endfor", NULL};
    const char *stopped;
    if (!(n->d = parse_body(ps, stops, &stopped)))
        return NULL;
    if (strcmp(stopped, "else") == 0) {
        static const char *const end[] = {"endfor", NULL};
        if (!expect_block_end(ps) || !(n->e = parse_body(ps, end, &stopped)))
            return NULL;
    }
    return expect_block_end(ps) ? seal(ps, n) : NULL;
}

/* | f | g(...) after a block set target or a filter tag, innermost first. */
static struct jn *parse_filter_chain(struct jparser *ps, struct jn *chain)
{
    do {
        if (!(chain = parse_filter(ps, chain)))
            return NULL;
    } while (skip_op(ps, "|"));
    return chain;
}

static struct jn *parse_set(struct jparser *ps, const struct jtok *at)
{
    struct jn *target = parse_target(ps, true);
    if (!target)
        return NULL;
    if (skip_op(ps, "=")) {
        struct jn *n = node(ps, JN_SET, at);
        if (!n || !(n->b = parse_tuple(ps, true)) || !expect_block_end(ps))
            return NULL;
        n->a = target;
        return seal(ps, n);
    }
    if (target->kind != JN_NAME)
        return fail(ps, "a block set assigns one variable");
    struct jn *n = node(ps, JN_SET_BLOCK, at);
    if (!n)
        return NULL;
    n->a = target;
    if (skip_op(ps, "|") && !(n->c = parse_filter_chain(ps, NULL)))
        return NULL;
    static const char *const stops[] = {"endset", NULL};
    const char *stopped;
    if (!expect_block_end(ps) || !(n->b = parse_body(ps, stops, &stopped)) || !expect_block_end(ps))
        return NULL;
    return seal(ps, n);
}

static struct jn *parse_macro(struct jparser *ps, const struct jtok *at)
{
    struct jn *n = node(ps, JN_MACRO, at);
    if (!n)
        return NULL;
    if (cur(ps)->kind != JTK_NAME)
        return fail(ps, "expected the macro's name");
    if (!(n->name = dup_name(ps, cur(ps))))
        return NULL;
    advance(ps);
    if (!expect_op(ps, "("))
        return NULL;
    struct kids params = {0};
    while (!skip_op(ps, ")")) {
        if (params.n > 0 && !expect_op(ps, ","))
            return NULL;
        if (skip_op(ps, ")"))
            break;
        if (cur(ps)->kind != JTK_NAME)
            return fail(ps, "expected a parameter name");
        struct jn *p = node(ps, JN_NAME, cur(ps));
        if (!p || !(p->name = dup_name(ps, cur(ps))))
            return NULL;
        advance(ps);
        if (skip_op(ps, "=") && !(p->a = parse_expr(ps, true)))
            return NULL;
        if (!seal(ps, p) || !kids_push(ps, &params, p))
            return NULL;
    }
    n->kids = params.v;
    n->n_kids = params.n;
    static const char *const stops[] = {"endmacro", NULL};
    const char *stopped;
    if (!expect_block_end(ps) || !(n->b = parse_body(ps, stops, &stopped)))
        return NULL;
    if (cur(ps)->kind == JTK_NAME) /* {% endmacro name %} */
        advance(ps);
    return expect_block_end(ps) ? seal(ps, n) : NULL;
}

static struct jn *parse_filter_block(struct jparser *ps, const struct jtok *at)
{
    struct jn *n = node(ps, JN_FILTER_BLOCK, at);
    if (!n || !(n->a = parse_filter_chain(ps, NULL)))
        return NULL;
    static const char *const stops[] = {"endfilter", NULL};
    const char *stopped;
    if (!expect_block_end(ps) || !(n->b = parse_body(ps, stops, &stopped)) || !expect_block_end(ps))
        return NULL;
    return seal(ps, n);
}

static struct jn *parse_generation(struct jparser *ps)
{
    /* Hugging Face's assistant-mask tag: outside mask mode its body renders as is. */
    static const char *const stops[] = {"endgeneration", NULL};
    const char *stopped;
    struct jn *body;
    if (!expect_block_end(ps) || !(body = parse_body(ps, stops, &stopped)) || !expect_block_end(ps))
        return NULL;
    return body;
}

static struct jn *parse_loop_control(struct jparser *ps, const struct jtok *at, enum jn_kind kind)
{
    struct jn *n = node(ps, kind, at);
    return n && expect_block_end(ps) ? n : NULL;
}

static struct jn *parse_tag(struct jparser *ps);

/* After '{%': the tag, with its '{%' remembered for "never closed" errors. */
static struct jn *parse_statement(struct jparser *ps)
{
    const struct jtok *saved = ps->open_tag;
    ps->open_tag = &ps->toks[ps->pos - 1];
    struct jn *n = parse_tag(ps);
    ps->open_tag = saved;
    return n;
}

/* The tag whose name is the current token. */
static struct jn *parse_tag(struct jparser *ps)
{
    struct jtok *at = cur(ps);
    if (at->kind != JTK_NAME)
        return fail(ps, "expected a tag name after '{%'");
    advance(ps);
    if (is_name(at, "if"))
        return parse_if(ps, at);
    if (is_name(at, "for"))
        return parse_for(ps, at);
    if (is_name(at, "set"))
        return parse_set(ps, at);
    if (is_name(at, "macro"))
        return parse_macro(ps, at);
    if (is_name(at, "filter"))
        return parse_filter_block(ps, at);
    if (is_name(at, "generation"))
        return parse_generation(ps);
    if (is_name(at, "break"))
        return parse_loop_control(ps, at, JN_BREAK);
    if (is_name(at, "continue"))
        return parse_loop_control(ps, at, JN_CONTINUE);
    char msg[96];
    snprintf(msg, sizeof(msg), "unknown or unsupported tag '%.*s'", (int)GS_MIN(at->n, 40), at->s);
    return fail_at(ps, at, msg);
}

static struct jn *parse_output(struct jparser *ps, const struct jtok *at)
{
    struct jn *n = node(ps, JN_OUTPUT, at);
    if (!n || !(n->a = parse_tuple(ps, true)))
        return NULL;
    if (cur(ps)->kind != JTK_VAR_END)
        return fail(ps, "expected the end of the expression '}}'");
    advance(ps);
    return seal(ps, n);
}

static bool is_stop(const struct jtok *tok, const char *const *stops, const char **stopped)
{
    for (size_t i = 0; stops && stops[i]; i++)
        if (is_name(tok, stops[i])) {
            *stopped = stops[i];
            return true;
        }
    return false;
}

/*
 * Statements until '{% stop' for one of stops (consumed up to the name; the
 * caller reads the rest of that tag), or the end of the template when stops
 * is NULL.
 */
static struct jn *parse_body(struct jparser *ps, const char *const *stops, const char **stopped)
{
    struct jtok *start = cur(ps);
    if (!enter(ps))
        return NULL;
    struct jn *body = node(ps, JN_BODY, start);
    struct kids k = {0};
    if (!body)
        return leave(ps, NULL);
    for (;;) {
        struct jtok *at = cur(ps);
        struct jn *st = NULL;
        if (at->kind == JTK_EOF) {
            if (stops) {
                size_t last = 0;
                while (stops[last + 1])
                    last++;
                char msg[64];
                snprintf(msg, sizeof(msg), "this block is never closed by '{%% %s %%}'",
                         stops[last]);
                return leave(ps, fail_at(ps, ps->open_tag ? ps->open_tag : start, msg));
            }
            break;
        }
        advance(ps);
        if (at->kind == JTK_DATA) {
            if ((st = node(ps, JN_DATA, at)))
                st->lit = jv_str(at->s, at->n);
        } else if (at->kind == JTK_VAR_BEGIN) {
            st = parse_output(ps, at);
        } else if (at->kind == JTK_BLOCK_BEGIN) {
            if (is_stop(cur(ps), stops, stopped)) {
                advance(ps);
                break;
            }
            st = parse_statement(ps);
        } else {
            st = fail_at(ps, at, "unexpected token outside a tag");
        }
        if (!st || !kids_push(ps, &k, st))
            return leave(ps, NULL);
    }
    body->kids = k.v;
    body->n_kids = k.n;
    return leave(ps, seal(ps, body));
}

/* ---- entry ------------------------------------------------------------------- */

/* Newlines normalised to \n and one trailing newline dropped, as Jinja does. */
static char *normalise_newlines(struct jarena *ar, const char *src, size_t len, size_t *out_len)
{
    char *s = gs_jinja__alloc(ar, len + 1);
    if (!s)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
            s[k++] = '\n';
        } else {
            s[k++] = src[i];
        }
    }
    if (k > 0 && s[k - 1] == '\n')
        k--;
    s[k] = '\0';
    *out_len = k;
    return s;
}

static int lex_all(struct jparser *ps, const char *src, size_t len)
{
    struct jlexer lx;
    gs_jinja__lex_init(&lx, src, len, ps->ar, ps->err);
    size_t cap = 64;
    ps->toks = gs_jinja__alloc_array(ps->ar, cap, sizeof(*ps->toks));
    if (!ps->toks)
        return nomem(ps), -1;
    for (;;) {
        if (ps->n_toks == cap) {
            struct jtok *v = gs_jinja__alloc_array(ps->ar, cap * 2, sizeof(*v));
            if (!v)
                return nomem(ps), -1;
            memcpy(v, ps->toks, cap * sizeof(*v));
            ps->toks = v;
            cap *= 2;
        }
        struct jtok *tok = &ps->toks[ps->n_toks];
        if (gs_jinja__lex_next(&lx, tok))
            return -1;
        ps->n_toks++;
        if (tok->kind == JTK_EOF)
            return 0;
    }
}

enum gs_status gs_jinja__parse(struct gs_jinja_tmpl *t, const char *src, size_t len,
                               struct gs_err *err)
{
    struct jparser ps = {.t = t, .ar = &t->arena, .err = err};
    if (memchr(src, '\0', len))
        return gs_err_set(err, GS_FORMAT, "jinja: the template contains a NUL byte");
    size_t n;
    char *text = normalise_newlines(&t->arena, src, len, &n);
    if (!text)
        return gs_err_set(err, GS_NOMEM, "jinja: out of memory while parsing");
    if (lex_all(&ps, text, n))
        return err->code;
    const char *stopped = NULL;
    t->root = parse_body(&ps, NULL, &stopped);
    if (!t->root)
        return err->code != GS_OK ? err->code : gs_err_set(err, GS_FORMAT, "jinja: parse error");
    return GS_OK;
}
