/*
 * engine/grammar.h - grammar-constrained decoding: a context-free grammar
 * compiled into a byte-level pushdown matcher that says, at every step, which
 * tokens of a vocabulary may come next, and JSON Schema turned into such a
 * grammar.
 *
 * Three kinds of object:
 *   - struct gs_grammar: compiled rules. Compiled once per request (from
 *     llama.cpp's GBNF, or from a JSON Schema through its GBNF), shared by the
 *     request's choices through a reference count. The rules are immutable;
 *     the grammar also holds the cache of token masks its matchers compute
 *     (below), so all matchers of one grammar must be used from one thread at
 *     a time (the engine thread). Creating and unreferencing may happen on any
 *     thread.
 *   - struct gs_grammar_vocab: a vocabulary's tokens as byte strings in a
 *     flattened trie, built once per model. Immutable; shared by any threads.
 *   - struct gs_grammar_matcher: one sequence's position in the grammar (its
 *     set of parse stacks). Survives anything the sequence survives: it is
 *     advanced only by the tokens the sequence accepts.
 *
 * The grammar language is llama.cpp's GBNF:
 *
 *     root   ::= "{" ws pair ("," ws pair)* "}"    # a comment
 *     pair   ::= string ":" ws value
 *     string ::= "\"" [^"\\\x7F\x00-\x1F]* "\""
 *     ws     ::= [ \t\n]{0,20}
 *
 * Rule names are [a-zA-Z0-9_-]+; a rule may be defined by several `::=`
 * lines (their alternatives join). Terms: "literal", [class], [^negated],
 * `.` (any character), a rule name, ( group ); postfix *, +, ?, {m}, {m,},
 * {m,n}; `|` between alternatives. Escapes in literals and classes: \n \r \t
 * \\ \" \[ \] \- \xHH \uHHHH \UHHHHHHHH. A rule body continues across lines
 * inside parentheses, or when the next line does not start a new rule. Text is
 * UTF-8; classes and `.` range over code points and are compiled to UTF-8
 * byte sequences, so the matcher works on bytes alone: a token may end in the
 * middle of a character and the next token finishes it.
 *
 * Refused at compile time, each with a message naming the rule or the line
 * and column: syntax errors, an undefined rule, a missing root, left
 * recursion (directly or through rules that can match nothing), a repetition
 * of something that can match nothing (`("")*`), and anything over a limit.
 *
 * Masks. gs_grammar_matcher_mask() walks the vocabulary trie once per
 * distinct parse context and caches the result in the grammar: contexts
 * repeat (every character inside a JSON string has the same one), so most
 * steps cost one lookup and a bitset union. What a cached walk could not
 * decide (tokens that finish the innermost rules and continue past them) is
 * walked again against the sequence's own stacks, a few tokens a step.
 *
 * Bounds (struct gs_grammar_limits): a grammar over a compile limit is
 * refused with GS_INVAL naming the limit; a matcher that would go over a
 * run-time limit (too many parse stacks from an ambiguous grammar, stacks too
 * deep, a mask that takes too much work) fails with GS_BUSY naming it, which
 * ends that sequence alone.
 *
 * Example:
 *     struct gs_grammar *g;
 *     if (gs_grammar_compile(src, len, "root", NULL, &g, &err)) ...;
 *     struct gs_grammar_matcher *m;
 *     if (gs_grammar_matcher_new(g, vocab, &m, &err)) ...;
 *     for (;;) {
 *         bool can_end;
 *         if (gs_grammar_matcher_mask(m, allow, &can_end, &err)) break;
 *         ... sample among the tokens set in allow (plus EOS if can_end) ...
 *         if (token is EOS || gs_grammar_matcher_accept(m, token, &err)) break;
 *         if (gs_grammar_matcher_done(m)) break; // nothing more may follow
 *     }
 *     gs_grammar_matcher_free(m);
 *     gs_grammar_unref(g);
 */
#ifndef GS_GRAMMAR_H
#define GS_GRAMMAR_H

#include <jansson.h>

#include "engine/base.h"

/* Limits. A zero field takes the default (gs_grammar_limits_default). */
struct gs_grammar_limits {
    uint32_t max_source_bytes; /* grammar text: 1 MiB */
    uint32_t max_rules;        /* rules after desugaring repetitions: 65536 */
    uint32_t max_elements;     /* terms of all rules after desugaring: 1 << 20 */
    uint32_t max_repeat;       /* m and n of {m,n}: 10000 */
    uint32_t max_stacks;       /* parse stacks alive at once: 2048 */
    uint32_t max_stack_depth;  /* entries of one stack: 1024 */
    uint64_t max_mask_work;    /* stack steps one mask may take: 1 << 26 */
    uint64_t max_cache_bytes;  /* a grammar's mask cache: 64 MiB (then it is emptied) */
};

void gs_grammar_limits_default(struct gs_grammar_limits *lim);

/* ---- grammars -------------------------------------------------------------- */

struct gs_grammar;

/*
 * Compiles GBNF src[len] with start rule root (NULL: "root"). lim may be NULL.
 * Returns GS_OK and *out (reference count 1), GS_INVAL with a message naming
 * what is wrong (line and column, the rule, or the limit), GS_NOMEM.
 */
enum gs_status gs_grammar_compile(const char *src, size_t len, const char *root,
                                  const struct gs_grammar_limits *lim, struct gs_grammar **out,
                                  struct gs_err *err);

/* Takes a reference (atomic); returns g. */
struct gs_grammar *gs_grammar_ref(struct gs_grammar *g);
/* Drops a reference; the last frees g. NULL is a no-op. */
void gs_grammar_unref(struct gs_grammar *g);

/* Size after desugaring, for diagnostics and benchmarks. */
uint32_t gs_grammar_n_rules(const struct gs_grammar *g);
uint32_t gs_grammar_n_elements(const struct gs_grammar *g);

/* ---- vocabularies ---------------------------------------------------------- */

struct gs_grammar_vocab;

/*
 * Builds the trie of n_vocab tokens; token i is the bytes pieces[i][0 ..
 * lens[i]). A token with lens[i] == 0 (control tokens, which are not text) is
 * never allowed by a grammar; the caller allows end-of-generation tokens
 * itself where the grammar may end. The pieces are copied.
 */
enum gs_status gs_grammar_vocab_new(const char *const *pieces, const uint32_t *lens,
                                    uint32_t n_vocab, struct gs_grammar_vocab **out,
                                    struct gs_err *err);
void gs_grammar_vocab_free(struct gs_grammar_vocab *v); /* NULL is a no-op */
uint32_t gs_grammar_vocab_n(const struct gs_grammar_vocab *v);
/* Token t's bytes (borrowed for v's life; *len 0 for a control token) and the
 * longest token's length, for callers that watch the text a sequence writes
 * (a grammar trigger, scheduler/). t must be < gs_grammar_vocab_n(v). */
const char *gs_grammar_vocab_piece(const struct gs_grammar_vocab *v, int32_t t, uint32_t *len);
uint32_t gs_grammar_vocab_max_len(const struct gs_grammar_vocab *v);

/* ---- matchers -------------------------------------------------------------- */

struct gs_grammar_matcher;

/* A matcher at the start of g over v (both borrowed: g gets a reference,
 * v must outlive the matcher). */
enum gs_status gs_grammar_matcher_new(struct gs_grammar *g, const struct gs_grammar_vocab *v,
                                      struct gs_grammar_matcher **out, struct gs_err *err);
void gs_grammar_matcher_free(struct gs_grammar_matcher *m); /* NULL is a no-op */

/* A matcher in the same position as m, sharing its grammar (n > 1 choices
 * after a common prefix, tests). */
enum gs_status gs_grammar_matcher_clone(const struct gs_grammar_matcher *m,
                                        struct gs_grammar_matcher **out, struct gs_err *err);

/*
 * Fills allow[(n_vocab + 63) / 64]: bit t (allow[t / 64] >> (t % 64) & 1)
 * is set when token t's bytes may come next. *can_end (may be NULL) says
 * whether the grammar may end here. GS_BUSY over a run-time limit.
 */
enum gs_status gs_grammar_matcher_mask(struct gs_grammar_matcher *m, uint64_t *allow,
                                       bool *can_end, struct gs_err *err);

/* Advances past token's bytes. GS_INVAL (m unchanged) if the grammar does not
 * allow them here; GS_BUSY over a run-time limit. */
enum gs_status gs_grammar_matcher_accept(struct gs_grammar_matcher *m, int32_t token,
                                         struct gs_err *err);

/* Advances past bytes s[n] (tests, forced text). Same results as accept. */
enum gs_status gs_grammar_matcher_accept_bytes(struct gs_grammar_matcher *m, const char *s,
                                               size_t n, struct gs_err *err);

/* Whether the text so far is a complete sentence of the grammar. */
bool gs_grammar_matcher_can_end(const struct gs_grammar_matcher *m);
/* Whether the text so far is complete and nothing may follow it. */
bool gs_grammar_matcher_done(const struct gs_grammar_matcher *m);

/* ---- JSON Schema ----------------------------------------------------------- */

/*
 * Translates a JSON Schema into GBNF whose sentences are exactly the JSON
 * texts (compact or with bounded whitespace) that validate against it, for
 * the supported keywords (docs/SERVER.md lists them). A keyword outside that
 * set, or a use of one that cannot be expressed, is refused: GS_INVAL whose
 * message names the keyword and its JSON path ("unsupported keyword 'not' at
 * #/properties/a"). *gbnf is gs_malloc'ed, NUL-terminated, start rule "root".
 */
enum gs_status gs_grammar_from_json_schema(const json_t *schema, char **gbnf, size_t *gbnf_len,
                                           struct gs_err *err);

/* GBNF for any JSON object (response_format json_object). Static. */
const char *gs_grammar_json_object_gbnf(void);

#endif /* GS_GRAMMAR_H */
