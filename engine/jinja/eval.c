/*
 * engine/jinja/eval.c - the evaluator: a tree walk over the parsed template,
 * one function per node kind, writing text into the context's current
 * buffer, and the public parse/render entry points.
 *
 * Scopes follow Jinja: the context's variables live in one frame over the
 * globals; each iteration of a for loop runs in a fresh frame (a {% set %}
 * inside a loop does not leak out, which is why templates use namespace());
 * if blocks open no scope; a macro call runs in a frame over the scope the
 * macro was defined in.
 */
#include "engine/jinja/internal.h"

#include <string.h>

enum flow {
    FLOW_ERR = -1,
    FLOW_OK = 0,
    FLOW_BREAK,
    FLOW_CONTINUE,
};

static int eval(struct jctx *cx, struct jframe *f, const struct jn *n, struct jv *out);
static int exec(struct jctx *cx, struct jframe *f, const struct jn *n);

/* ---- arguments -------------------------------------------------------------------- */

/* Small argument lists live on the stack; longer ones in the arena. */
#define ARGS_SMALL 6

struct args_store {
    struct jv pos_small[ARGS_SMALL];
    struct jv kw_small[ARGS_SMALL];
    struct jargs args;
};

static int eval_args(struct jctx *cx, struct jframe *f, const struct jn *n, struct args_store *st)
{
    struct jv *pos = st->pos_small, *kw = st->kw_small;
    if (n->n_kids > ARGS_SMALL &&
        !(pos = gs_jinja__alloc_array(&cx->arena, n->n_kids, sizeof(*pos))))
        return gs_jinja__nomem(cx);
    if (n->n_kw > ARGS_SMALL && !(kw = gs_jinja__alloc_array(&cx->arena, n->n_kw, sizeof(*kw))))
        return gs_jinja__nomem(cx);
    for (size_t i = 0; i < n->n_kids; i++)
        if (eval(cx, f, n->kids[i], &pos[i]))
            return -1;
    for (size_t i = 0; i < n->n_kw; i++)
        if (eval(cx, f, n->kw_vals[i], &kw[i]))
            return -1;
    st->args = (struct jargs){
        .pos = pos, .n_pos = n->n_kids, .kw_names = n->kw_names, .kw_vals = kw, .n_kw = n->n_kw};
    return 0;
}

/* ---- macros -------------------------------------------------------------------------- */

static int bind_params(struct jctx *cx, struct jframe *mf, const struct jn *def,
                       const struct jargs *args)
{
    size_t n_params = def->n_kids;
    for (size_t i = 0; i < n_params; i++) {
        const struct jn *p = def->kids[i];
        struct jv v = jv_undef(p->name, strlen(p->name));
        bool given = false;
        if (i < args->n_pos) {
            v = args->pos[i];
            given = true;
        }
        for (size_t k = 0; k < args->n_kw; k++)
            if (strcmp(args->kw_names[k], p->name) == 0) {
                if (given)
                    return gs_jinja__error(cx, "macro '%s' got multiple values for '%s'", def->name,
                                           p->name);
                v = args->kw_vals[k];
                given = true;
            }
        /* Defaults are evaluated at call time, in the macro's own scope. */
        if (!given && p->a && eval(cx, mf, p->a, &v))
            return -1;
        if (gs_jinja__frame_set(cx, mf, p->name, v))
            return -1;
    }
    for (size_t k = 0; k < args->n_kw; k++) {
        bool known = false;
        for (size_t i = 0; i < n_params; i++)
            known |= strcmp(args->kw_names[k], def->kids[i]->name) == 0;
        if (!known)
            return gs_jinja__error(cx, "macro '%s' takes no keyword argument '%s'", def->name,
                                   args->kw_names[k]);
    }
    struct jv varargs;
    size_t extra = args->n_pos > n_params ? args->n_pos - n_params : 0;
    if (gs_jinja__list_new(cx, extra, &varargs))
        return -1;
    varargs.flags = JV_F_TUPLE;
    for (size_t i = 0; i < extra; i++)
        varargs.u.list->items[i] = args->pos[n_params + i];
    return gs_jinja__frame_set(cx, mf, "varargs", varargs);
}

static int call_macro(struct jctx *cx, const struct jmacro *m, const struct jargs *args,
                      struct jv *out)
{
    if (cx->call_depth >= cx->lim->max_call_depth)
        return gs_jinja__limit(cx, "max_call_depth", cx->lim->max_call_depth);
    struct jframe *mf = gs_jinja__frame_new(cx, m->closure);
    if (!mf || bind_params(cx, mf, m->def, args))
        return -1;
    struct jbuf buf = {0}, *saved = cx->out;
    cx->out = &buf;
    cx->call_depth++;
    int flow = exec(cx, mf, m->def->b);
    cx->call_depth--;
    cx->out = saved;
    if (flow == FLOW_ERR)
        return -1;
    return gs_jinja__buf_to_str(cx, &buf, out);
}

int gs_jinja__call_value(struct jctx *cx, struct jv callee, const struct jargs *args,
                         struct jv *out)
{
    switch (callee.kind) {
    case JV_MACRO:
        return call_macro(cx, callee.u.macro, args, out);
    case JV_FUNC:
        return gs_jinja__call_func(cx, callee.u.func, args, out);
    case JV_METHOD:
        return gs_jinja__method(cx, callee.u.bound->self, callee.u.bound->name, args, out);
    case JV_UNDEF:
        return gs_jinja__undefined_error(cx, callee);
    default:
        return gs_jinja__error(cx, "'%s' object is not callable", gs_jinja__type_name(callee));
    }
}

/* ---- expressions ---------------------------------------------------------------------- */

static int eval_call(struct jctx *cx, struct jframe *f, const struct jn *n, struct jv *out)
{
    struct args_store st;
    const struct jn *callee = n->a;
    /* obj.method(...) calls the method directly, without a bound value. */
    if (callee->kind == JN_ATTR) {
        struct jv self;
        if (eval(cx, f, callee->a, &self))
            return -1;
        if (gs_jinja__has_method(self, callee->name)) {
            if (eval_args(cx, f, n, &st))
                return -1;
            cx->line = n->line;
            return gs_jinja__method(cx, self, callee->name, &st.args, out);
        }
        struct jv fn;
        if (gs_jinja__getattr(cx, self, callee->name, &fn) || eval_args(cx, f, n, &st))
            return -1;
        cx->line = n->line;
        return gs_jinja__call_value(cx, fn, &st.args, out);
    }
    struct jv fn;
    if (eval(cx, f, callee, &fn) || eval_args(cx, f, n, &st))
        return -1;
    cx->line = n->line;
    return gs_jinja__call_value(cx, fn, &st.args, out);
}

static int eval_filter(struct jctx *cx, struct jframe *f, const struct jn *n, struct jv in,
                       struct jv *out);

/* A filter's operand: its own expression, or for a chain under a block set or
 * filter tag (operand NULL), the block's text. */
static int filter_operand(struct jctx *cx, struct jframe *f, const struct jn *a, struct jv in,
                          struct jv *out)
{
    if (!a) {
        *out = in;
        return 0;
    }
    /* Down a chain, the block's text travels to the innermost filter. */
    if (a->kind == JN_FILTER)
        return eval_filter(cx, f, a, in, out);
    return eval(cx, f, a, out);
}

static int eval_filter(struct jctx *cx, struct jframe *f, const struct jn *n, struct jv in,
                       struct jv *out)
{
    struct jv operand;
    struct args_store st;
    if (filter_operand(cx, f, n->a, in, &operand) || eval_args(cx, f, n, &st))
        return -1;
    cx->line = n->line;
    return gs_jinja__filter(cx, n->name, operand, &st.args, out);
}

static int eval_test(struct jctx *cx, struct jframe *f, const struct jn *n, struct jv *out)
{
    struct jv operand;
    struct args_store st;
    bool r;
    if (eval(cx, f, n->a, &operand) || eval_args(cx, f, n, &st))
        return -1;
    cx->line = n->line;
    if (gs_jinja__test(cx, n->name, operand, &st.args, &r))
        return -1;
    *out = jv_bool(n->op ? !r : r);
    return 0;
}

static int eval_seq(struct jctx *cx, struct jframe *f, const struct jn *n, struct jv *out)
{
    if (gs_jinja__list_new(cx, n->n_kids, out))
        return -1;
    out->flags = n->kind == JN_TUPLE ? JV_F_TUPLE : 0;
    for (size_t i = 0; i < n->n_kids; i++)
        if (eval(cx, f, n->kids[i], &out->u.list->items[i]))
            return -1;
    return 0;
}

static int eval_dict(struct jctx *cx, struct jframe *f, const struct jn *n, struct jv *out)
{
    if (gs_jinja__dict_new(cx, n->n_kids / 2, out))
        return -1;
    for (size_t i = 0; i + 1 < n->n_kids; i += 2) {
        struct jv k, v;
        if (eval(cx, f, n->kids[i], &k) || eval(cx, f, n->kids[i + 1], &v) ||
            gs_jinja__dict_set(cx, out->u.dict, k, v))
            return -1;
    }
    return 0;
}

static int eval_slice(struct jctx *cx, struct jframe *f, const struct jn *n, struct jv *out)
{
    struct jv obj, parts[3];
    const struct jn *bounds[3] = {n->b, n->c, n->d};
    if (eval(cx, f, n->a, &obj))
        return -1;
    for (int i = 0; i < 3; i++)
        if (bounds[i] && eval(cx, f, bounds[i], &parts[i]))
            return -1;
    cx->line = n->line;
    return gs_jinja__slice(cx, obj, n->b ? &parts[0] : NULL, n->c ? &parts[1] : NULL,
                           n->d ? &parts[2] : NULL, out);
}

static int eval_unary(struct jctx *cx, struct jframe *f, const struct jn *n, struct jv *out)
{
    struct jv v;
    if (eval(cx, f, n->a, &v))
        return -1;
    cx->line = n->line;
    if (n->op == JT_NOT) {
        *out = jv_bool(!gs_jinja__truthy(v));
        return 0;
    }
    if (v.kind == JV_INT || v.kind == JV_BOOL) {
        int64_t i = v.kind == JV_INT ? v.u.i : v.u.b;
        if (n->op == JT_MINUS && i == INT64_MIN)
            return gs_jinja__error(cx, "integer overflow");
        *out = jv_int(n->op == JT_MINUS ? -i : i);
        return 0;
    }
    if (v.kind == JV_FLOAT) {
        *out = jv_float(n->op == JT_MINUS ? -v.u.f : v.u.f);
        return 0;
    }
    if (v.kind == JV_UNDEF)
        return gs_jinja__undefined_error(cx, v);
    return gs_jinja__error(cx, "bad operand type for unary %c: '%s'", n->op == JT_MINUS ? '-' : '+',
                           gs_jinja__type_name(v));
}

static int eval_name(struct jctx *cx, struct jframe *f, const struct jn *n, struct jv *out)
{
    (void)cx;
    if (!gs_jinja__frame_get(f, n->name, n->hash, out))
        *out = jv_undef(n->name, strlen(n->name));
    return 0;
}

static int eval(struct jctx *cx, struct jframe *f, const struct jn *n, struct jv *out)
{
    cx->line = n->line;
    struct jv a, b;
    switch ((enum jn_kind)n->kind) {
    case JN_LIT:
        *out = n->lit;
        return 0;
    case JN_NAME:
        return eval_name(cx, f, n, out);
    case JN_LIST:
    case JN_TUPLE:
        return eval_seq(cx, f, n, out);
    case JN_DICT:
        return eval_dict(cx, f, n, out);
    case JN_ATTR:
        if (eval(cx, f, n->a, &a))
            return -1;
        cx->line = n->line;
        return gs_jinja__getattr(cx, a, n->name, out);
    case JN_ITEM:
        if (eval(cx, f, n->a, &a) || eval(cx, f, n->b, &b))
            return -1;
        cx->line = n->line;
        return gs_jinja__getitem(cx, a, b, out);
    case JN_SLICE:
        return eval_slice(cx, f, n, out);
    case JN_CALL:
        return eval_call(cx, f, n, out);
    case JN_FILTER:
        return eval_filter(cx, f, n, jv_undef("", 0), out);
    case JN_TEST:
        return eval_test(cx, f, n, out);
    case JN_UNARY:
        return eval_unary(cx, f, n, out);
    case JN_BINARY:
        if (eval(cx, f, n->a, &a) || eval(cx, f, n->b, &b))
            return -1;
        cx->line = n->line;
        return gs_jinja__binary(cx, n->op, a, b, out);
    case JN_AND:
    case JN_OR:
        /* Python's and/or: the operand that decided, not a bool. */
        if (eval(cx, f, n->a, &a))
            return -1;
        if (gs_jinja__truthy(a) == (n->kind == JN_OR)) {
            *out = a;
            return 0;
        }
        return eval(cx, f, n->b, out);
    case JN_COND:
        if (eval(cx, f, n->a, &a))
            return -1;
        if (gs_jinja__truthy(a))
            return eval(cx, f, n->b, out);
        if (n->c)
            return eval(cx, f, n->c, out);
        *out = jv_undef("", 0);
        return 0;
    default:
        return gs_jinja__error(cx, "a statement used as an expression");
    }
}

/* ---- statements ------------------------------------------------------------------------- */

/* Binds a for or set target: a name, or names unpacked from a sequence. */
static int assign(struct jctx *cx, struct jframe *f, const struct jn *target, struct jv v)
{
    if (target->kind == JN_NAME)
        return gs_jinja__frame_set(cx, f, target->name, v);
    if (target->kind == JN_ATTR) {
        struct jv ns;
        if (!gs_jinja__frame_get(f, target->a->name, target->a->hash, &ns) || ns.kind != JV_NS)
            return gs_jinja__error(cx, "cannot assign attribute on non-namespace object");
        struct jv key;
        return gs_jinja__str_new(cx, target->name, strlen(target->name), &key) ||
               gs_jinja__dict_set(cx, ns.u.dict, key, v);
    }
    struct jlist *items;
    if (gs_jinja__iterate(cx, v, &items))
        return -1;
    if (items->n != target->n_kids)
        return gs_jinja__error(cx, "%s values to unpack (expected %zu, got %zu)",
                               items->n < target->n_kids ? "not enough" : "too many",
                               target->n_kids, items->n);
    for (size_t i = 0; i < items->n; i++)
        if (assign(cx, f, target->kids[i], items->items[i]))
            return -1;
    return 0;
}

static int count_iteration(struct jctx *cx)
{
    if (++cx->iterations > cx->lim->max_loop_iterations)
        return gs_jinja__limit(cx, "max_loop_iterations", cx->lim->max_loop_iterations);
    return 0;
}

/* The items a loop runs over: its iterable, less those its if-clause rejects. */
static int loop_items(struct jctx *cx, struct jframe *f, const struct jn *n, struct jlist **out)
{
    struct jv it;
    if (eval(cx, f, n->b, &it) || gs_jinja__iterate(cx, it, out))
        return -1;
    if (!n->c)
        return 0;
    struct jlist *all = *out;
    struct jv kept;
    if (gs_jinja__list_new(cx, all->n, &kept))
        return -1;
    struct jframe *tf = gs_jinja__frame_new(cx, f);
    if (!tf)
        return -1;
    size_t k = 0;
    for (size_t i = 0; i < all->n; i++) {
        struct jv keep;
        tf->n = 0;
        if (count_iteration(cx) || assign(cx, tf, n->a, all->items[i]) || eval(cx, tf, n->c, &keep))
            return -1;
        if (gs_jinja__truthy(keep))
            kept.u.list->items[k++] = all->items[i];
    }
    kept.u.list->n = k;
    *out = kept.u.list;
    return 0;
}

static int exec_for(struct jctx *cx, struct jframe *f, const struct jn *n)
{
    struct jlist *items;
    if (loop_items(cx, f, n, &items))
        return FLOW_ERR;
    struct jframe *lf = gs_jinja__frame_new(cx, f);
    struct jloop *loop = gs_jinja__alloc(&cx->arena, sizeof(*loop));
    if (!lf || !loop)
        return gs_jinja__nomem(cx);
    if (items->n == 0)
        return n->e ? exec(cx, lf, n->e) : FLOW_OK;
    loop->items = items;
    loop->depth0 = 0;
    struct jv loop_v = {.kind = JV_LOOP, .u.loop = loop};
    for (size_t i = 0; i < items->n; i++) {
        loop->index0 = i;
        lf->n = 0; /* a fresh scope for each iteration */
        if (count_iteration(cx) || gs_jinja__frame_set(cx, lf, "loop", loop_v) ||
            assign(cx, lf, n->a, items->items[i]))
            return FLOW_ERR;
        int flow = exec(cx, lf, n->d);
        if (flow == FLOW_ERR)
            return FLOW_ERR;
        if (flow == FLOW_BREAK)
            break;
    }
    return FLOW_OK;
}

static int exec_if(struct jctx *cx, struct jframe *f, const struct jn *n)
{
    struct jv cond;
    if (eval(cx, f, n->a, &cond))
        return FLOW_ERR;
    if (gs_jinja__truthy(cond))
        return exec(cx, f, n->b);
    return n->c ? exec(cx, f, n->c) : FLOW_OK;
}

/* Runs body into a buffer of its own and returns the text. */
static int capture(struct jctx *cx, struct jframe *f, const struct jn *body, struct jv *out)
{
    struct jbuf buf = {0}, *saved = cx->out;
    cx->out = &buf;
    int flow = exec(cx, f, body);
    cx->out = saved;
    if (flow == FLOW_ERR)
        return -1;
    return gs_jinja__buf_to_str(cx, &buf, out);
}

static int exec_set_block(struct jctx *cx, struct jframe *f, const struct jn *n)
{
    struct jv text, v;
    if (capture(cx, f, n->b, &text))
        return FLOW_ERR;
    v = text;
    if (n->c && eval_filter(cx, f, n->c, text, &v))
        return FLOW_ERR;
    return assign(cx, f, n->a, v) ? FLOW_ERR : FLOW_OK;
}

static int exec_filter_block(struct jctx *cx, struct jframe *f, const struct jn *n)
{
    struct jv text, v;
    if (capture(cx, f, n->b, &text) || eval_filter(cx, f, n->a, text, &v) ||
        gs_jinja__print(cx, cx->out, v))
        return FLOW_ERR;
    return FLOW_OK;
}

static int exec_macro(struct jctx *cx, struct jframe *f, const struct jn *n)
{
    struct jmacro *m = gs_jinja__alloc(&cx->arena, sizeof(*m));
    if (!m)
        return gs_jinja__nomem(cx);
    m->def = n;
    m->closure = f;
    struct jv v = {.kind = JV_MACRO, .u.macro = m};
    return gs_jinja__frame_set(cx, f, n->name, v) ? FLOW_ERR : FLOW_OK;
}

static int exec_body(struct jctx *cx, struct jframe *f, const struct jn *n)
{
    for (size_t i = 0; i < n->n_kids; i++) {
        int flow = exec(cx, f, n->kids[i]);
        if (flow != FLOW_OK)
            return flow;
    }
    return FLOW_OK;
}

static int exec(struct jctx *cx, struct jframe *f, const struct jn *n)
{
    cx->line = n->line;
    struct jv v;
    switch ((enum jn_kind)n->kind) {
    case JN_BODY:
        return exec_body(cx, f, n);
    case JN_DATA:
        return gs_jinja__buf_put(cx, cx->out, n->lit.u.s, n->lit.n) ? FLOW_ERR : FLOW_OK;
    case JN_OUTPUT:
        if (eval(cx, f, n->a, &v) || gs_jinja__print(cx, cx->out, v))
            return FLOW_ERR;
        return FLOW_OK;
    case JN_IF:
        return exec_if(cx, f, n);
    case JN_FOR:
        return exec_for(cx, f, n);
    case JN_SET:
        if (eval(cx, f, n->b, &v) || assign(cx, f, n->a, v))
            return FLOW_ERR;
        return FLOW_OK;
    case JN_SET_BLOCK:
        return exec_set_block(cx, f, n);
    case JN_MACRO:
        return exec_macro(cx, f, n);
    case JN_FILTER_BLOCK:
        return exec_filter_block(cx, f, n);
    case JN_BREAK:
        return FLOW_BREAK;
    case JN_CONTINUE:
        return FLOW_CONTINUE;
    default:
        return gs_jinja__error(cx, "an expression used as a statement");
    }
}

/* ---- entry points -------------------------------------------------------------------------- */

void gs_jinja_limits_default(struct gs_jinja_limits *lim)
{
    *lim = (struct gs_jinja_limits){
        .max_source_bytes = (size_t)1 << 20,
        .max_ast_nodes = 200000,
        .max_depth = 192,
        .max_call_depth = 32,
        .max_loop_iterations = 1000000,
        .max_output_bytes = (size_t)4 << 20,
        .max_memory_bytes = (size_t)256 << 20,
    };
}

/* Zero fields take the default; max_depth and max_output_bytes are capped by the
 * widths of the fields that hold them. */
static void limits_resolve(const struct gs_jinja_limits *in, struct gs_jinja_limits *out)
{
    struct gs_jinja_limits d;
    gs_jinja_limits_default(&d);
    *out = in ? *in : d;
    if (!out->max_source_bytes)
        out->max_source_bytes = d.max_source_bytes;
    if (!out->max_ast_nodes)
        out->max_ast_nodes = d.max_ast_nodes;
    if (!out->max_depth)
        out->max_depth = d.max_depth;
    if (out->max_depth > UINT16_MAX - 1)
        out->max_depth = UINT16_MAX - 1;
    if (!out->max_call_depth)
        out->max_call_depth = d.max_call_depth;
    if (!out->max_loop_iterations)
        out->max_loop_iterations = d.max_loop_iterations;
    if (!out->max_output_bytes)
        out->max_output_bytes = d.max_output_bytes;
    if (out->max_output_bytes > UINT32_MAX) /* string lengths and spans are 32-bit */
        out->max_output_bytes = UINT32_MAX;
    if (!out->max_memory_bytes)
        out->max_memory_bytes = d.max_memory_bytes;
}

enum gs_status gs_jinja_parse(const char *src, size_t len, const struct gs_jinja_limits *lim,
                              struct gs_jinja_tmpl **out, struct gs_err *err)
{
    *out = NULL;
    struct gs_err local;
    if (!err)
        err = &local;
    gs_err_clear(err);
    struct gs_jinja_tmpl *t = gs_calloc(1, sizeof(*t));
    if (!t)
        return gs_err_set(err, GS_NOMEM, "jinja: out of memory while parsing");
    limits_resolve(lim, &t->lim);
    if (len > t->lim.max_source_bytes) {
        size_t limit = t->lim.max_source_bytes;
        gs_free(t);
        return gs_err_set(err, GS_BUSY, "jinja: limit max_source_bytes (%zu) exceeded", limit);
    }
    gs_jinja__arena_init(&t->arena, 0);
    enum gs_status st = gs_jinja__parse(t, src ? src : "", src ? len : 0, err);
    if (st != GS_OK) {
        gs_jinja_free(t);
        return st;
    }
    *out = t;
    return GS_OK;
}

void gs_jinja_free(struct gs_jinja_tmpl *t)
{
    if (!t)
        return;
    gs_jinja__arena_deinit(&t->arena);
    gs_free(t);
}

static int load_context(struct jctx *cx, const json_t *context, bool track, struct jframe *vars)
{
    if (!context)
        return 0;
    if (!json_is_object(context))
        return gs_jinja__error(cx, "the context must be a JSON object");
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)context, key, val)
    {
        struct jv v, name;
        if (gs_jinja__from_json(cx, val, track, &v) ||
            gs_jinja__str_new(cx, key, strlen(key), &name) ||
            gs_jinja__frame_set(cx, vars, name.u.s, v))
            return -1;
    }
    return 0;
}

static enum gs_status render_fail(struct jctx *cx, enum gs_jinja_fail *fail)
{
    if (cx->fail == GS_JINJA_FAIL_NONE) /* a failure that set no message */
        gs_jinja__nomem(cx);
    if (fail)
        *fail = cx->fail;
    enum gs_status st = cx->err->code;
    gs_jinja__arena_deinit(&cx->arena);
    return st;
}

/* Copies the output's context spans out of the arena for the caller. */
static int export_spans(struct jctx *cx, const struct jbuf *buf, struct gs_jinja_span **spans,
                        size_t *n_spans)
{
    *spans = NULL;
    *n_spans = 0;
    if (buf->n_sp == 0)
        return 0;
    struct gs_jinja_span *v = gs_alloc_array(buf->n_sp, sizeof(*v));
    if (!v)
        return gs_jinja__nomem(cx);
    for (size_t i = 0; i < buf->n_sp; i++)
        v[i] = (struct gs_jinja_span){.off = buf->sp[i].off, .len = buf->sp[i].len};
    *spans = v;
    *n_spans = buf->n_sp;
    return 0;
}

enum gs_status gs_jinja_render_spans(const struct gs_jinja_tmpl *t, const json_t *context,
                                     const json_t *trusted, int64_t now_unix_s, char **out,
                                     size_t *out_len, struct gs_jinja_span **spans, size_t *n_spans,
                                     enum gs_jinja_fail *fail, struct gs_err *err)
{
    struct gs_err local;
    if (!err)
        err = &local;
    gs_err_clear(err);
    *out = NULL;
    if (out_len)
        *out_len = 0;
    if (spans) {
        *spans = NULL;
        *n_spans = 0;
    }
    if (fail)
        *fail = GS_JINJA_FAIL_NONE;
    struct jctx cx = {.lim = &t->lim, .now_unix_s = now_unix_s, .err = err};
    gs_jinja__arena_init(&cx.arena, t->lim.max_memory_bytes);
    struct jbuf buf = {0};
    cx.out = &buf;
    struct jframe *globals = gs_jinja__frame_new(&cx, NULL);
    struct jframe *vars = globals ? gs_jinja__frame_new(&cx, globals) : NULL;
    /* The trusted variables come last, so that the context cannot replace them. */
    if (!vars || gs_jinja__add_globals(&cx, globals) ||
        load_context(&cx, context, spans != NULL, vars) || load_context(&cx, trusted, false, vars))
        return render_fail(&cx, fail);
    if (exec(&cx, vars, t->root) == FLOW_ERR)
        return render_fail(&cx, fail);
    char *text = gs_malloc(buf.n + 1);
    if (!text || (spans && export_spans(&cx, &buf, spans, n_spans))) {
        gs_free(text);
        gs_jinja__nomem(&cx);
        return render_fail(&cx, fail);
    }
    if (buf.n)
        memcpy(text, buf.p, buf.n);
    text[buf.n] = '\0';
    gs_jinja__arena_deinit(&cx.arena);
    *out = text;
    if (out_len)
        *out_len = buf.n;
    return GS_OK;
}

enum gs_status gs_jinja_render(const struct gs_jinja_tmpl *t, const json_t *context,
                               int64_t now_unix_s, char **out, size_t *out_len,
                               enum gs_jinja_fail *fail, struct gs_err *err)
{
    return gs_jinja_render_spans(t, context, NULL, now_unix_s, out, out_len, NULL, NULL, fail, err);
}
