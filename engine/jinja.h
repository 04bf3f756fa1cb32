/*
 * engine/jinja.h - a sandboxed renderer for the Jinja subset that chat
 * templates use, with Hugging Face's settings (trim_blocks, lstrip_blocks,
 * loop controls, the {% generation %} tag, tojson as json.dumps, and the
 * globals raise_exception and strftime_now).
 *
 * A template is parsed once (gs_jinja_parse) into an immutable tree and
 * rendered any number of times (gs_jinja_render) against a context given as a
 * jansson object, whose members become the template's variables. Output values
 * follow Python: a list, dict, None or bool printed with {{ }} comes out as
 * Python's str() of it.
 *
 * Sandbox: rendering is a pure function of the template, the context and the
 * time the caller passes; it reads no file, no environment and no clock. Every
 * resource a template can consume is bounded by struct gs_jinja_limits, fixed
 * at parse time: exceeding one fails with GS_BUSY and a message naming the
 * limit ("jinja: limit max_loop_iterations (1000000) exceeded"), never a hang,
 * a crash or an unbounded allocation. Like Hugging Face's immutable sandbox,
 * methods that modify a list or dict (append, pop, update, ...) are refused.
 *
 * Ownership: a template owns its tree and is freed with gs_jinja_free. A
 * rendered string is the caller's, freed with gs_free. The template does not
 * keep the source or the context.
 *
 * Threads: a parsed template is never modified, so any number of threads may
 * render the same one at once. Rendering recurses on the calling thread's
 * stack, at most max_depth levels of statements and expressions per macro call
 * level; the defaults fit in a few hundred KiB.
 *
 * Errors: every failure returns a status and fills struct gs_err:
 *   GS_FORMAT  parse error, "jinja: line L, column C: ..." (1-based);
 *              or a runtime error of the template (TypeError, undefined
 *              attribute, unknown filter, unsafe method): "jinja: line L: ...";
 *   GS_INVAL   the template called raise_exception(msg): err->msg is msg
 *              exactly (cut to GS_ERR_MSG_LEN), and *fail is
 *              GS_JINJA_FAIL_RAISED, so that a server can answer 400 with it;
 *   GS_BUSY    a limit was exceeded (the message names it);
 *   GS_NOMEM   out of memory.
 *
 * Example:
 *     struct gs_jinja_tmpl *t;
 *     if (gs_jinja_parse(src, len, NULL, &t, &err)) ...;
 *     char *text; size_t n;
 *     if (gs_jinja_render(t, ctx, time(NULL), &text, &n, NULL, &err)) ...;
 *     gs_free(text);
 *     gs_jinja_free(t);
 */
#ifndef GS_JINJA_H
#define GS_JINJA_H

#include "engine/base.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* ---- limits ---------------------------------------------------------------- */

/* Every bound on what a template may consume. Zero in a field means "the
 * default" (gs_jinja_limits_default), so a caller sets only what it changes. */
struct gs_jinja_limits {
    size_t max_source_bytes;      /* template text accepted by the parser */
    size_t max_ast_nodes;         /* nodes of the parsed tree */
    unsigned max_depth;           /* height of the tree: nested expressions and blocks,
                                   * and the length of an operator chain a + b + ... */
    unsigned max_call_depth;      /* nested macro calls (recursion) */
    uint64_t max_loop_iterations; /* for-loop bodies run, all loops of a render together */
    size_t max_output_bytes;      /* the rendered text, and any one string built (< 4 GiB) */
    size_t max_memory_bytes;      /* everything one render allocates */
};

/* Fills lim with the defaults: 1 MiB source, 200000 nodes, depth 192, 32
 * calls, 1000000 iterations, 4 MiB output, 256 MiB memory. */
void gs_jinja_limits_default(struct gs_jinja_limits *lim);

/* ---- parsing ---------------------------------------------------------------- */

struct gs_jinja_tmpl; /* opaque, immutable once parsed */

/*
 * Parses src[0..len) (need not be NUL-terminated; embedded NULs are refused)
 * under lim (NULL: defaults; zero fields: defaults). On success *out is the
 * template, freed with gs_jinja_free. On failure *out is NULL and err says
 * where: GS_FORMAT with line and column, GS_BUSY for a limit, GS_NOMEM.
 * A filter, test or function that does not exist is not a parse error: as in
 * Jinja, it fails when the template reaches it.
 */
enum gs_status gs_jinja_parse(const char *src, size_t len, const struct gs_jinja_limits *lim,
                              struct gs_jinja_tmpl **out, struct gs_err *err);

/* Frees a template; NULL is a no-op. */
void gs_jinja_free(struct gs_jinja_tmpl *t);

/* ---- rendering -------------------------------------------------------------- */

/* What kind of failure a render met, for callers that answer differently. */
enum gs_jinja_fail {
    GS_JINJA_FAIL_NONE = 0, /* rendered */
    GS_JINJA_FAIL_RAISED,   /* the template called raise_exception(msg) */
    GS_JINJA_FAIL_ERROR,    /* a runtime error of the template */
    GS_JINJA_FAIL_LIMIT,    /* a limit of struct gs_jinja_limits */
    GS_JINJA_FAIL_NOMEM,    /* out of memory */
};

/*
 * Renders t with the members of context (a JSON object, or NULL for none) as
 * variables. A member's JSON null is None; a variable the context lacks is
 * undefined, as in Jinja. now_unix_s is the moment strftime_now formats, in
 * UTC, C locale (the renderer never reads the clock).
 *
 * On success *out is the NUL-terminated text (caller frees with gs_free) and
 * *out_len its length in bytes (the text itself may not contain NUL unless the
 * context does). On failure *out is NULL, *fail (if fail is not NULL) says
 * which kind, and the status and err are as described at the top.
 */
enum gs_status gs_jinja_render(const struct gs_jinja_tmpl *t, const json_t *context,
                               int64_t now_unix_s, char **out, size_t *out_len,
                               enum gs_jinja_fail *fail, struct gs_err *err);

/*
 * Provenance of the rendered text: which bytes came from the context (message
 * contents, tool arguments, any string of the caller's) rather than from the
 * template's own text. A server recognises control tokens (<|im_start|>) only
 * in the template's text, so that a client cannot forge turns by writing one
 * into a message. A string the template derives from context data by an
 * operation whose bytes cannot be traced (upper, replace, tojson, printing a
 * list or dict) counts as context as a whole; concatenation, slicing,
 * stripping and splitting keep each byte's origin.
 */
struct gs_jinja_span {
    size_t off, len; /* bytes [off, off + len) of the rendered text */
};

/*
 * gs_jinja_render with two sources of variables: context, the client's data,
 * whose strings are tracked, and trusted (NULL for none), the caller's own
 * variables such as bos_token and eos_token from the vocabulary, which count
 * as template text and which the context cannot replace. On success *spans
 * (caller frees with gs_free; NULL when there are none) and *n_spans are the
 * context's bytes in the output, ascending, disjoint and non-empty; adjacent
 * ones are merged. On failure *spans is NULL.
 */
enum gs_status gs_jinja_render_spans(const struct gs_jinja_tmpl *t, const json_t *context,
                                     const json_t *trusted, int64_t now_unix_s, char **out,
                                     size_t *out_len, struct gs_jinja_span **spans, size_t *n_spans,
                                     enum gs_jinja_fail *fail, struct gs_err *err);

#endif /* GS_JINJA_H */
