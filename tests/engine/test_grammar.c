/*
 * tests/engine/test_grammar.c - the GBNF compiler and the matcher.
 *
 * The mask is checked against its definition: for every token, the mask bit
 * must equal whether a copy of the matcher accepts the token's bytes. That
 * brute force runs on random walks through grammars over real vocabularies
 * (SPM with byte tokens, byte-level BPE), where tokens straddle grammar
 * symbols and split UTF-8 characters.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar.h"
#include "engine/tok.h"
#include "tests/common/testutil.h"

static struct gs_grammar *compile_ok(const char *src)
{
    struct gs_grammar *g = NULL;
    struct gs_err err = {0};
    enum gs_status st = gs_grammar_compile(src, strlen(src), NULL, NULL, &g, &err);
    cr_assert_eq(st, GS_OK, "compile failed: %s\n%s", err.msg, src);
    return g;
}

static void compile_fails(const char *src, const char *needle)
{
    struct gs_grammar *g = NULL;
    struct gs_err err = {0};
    enum gs_status st = gs_grammar_compile(src, strlen(src), NULL, NULL, &g, &err);
    cr_assert_neq(st, GS_OK, "compiled but should not: %s", src);
    cr_assert_null(g);
    cr_assert(strstr(err.msg, needle), "message '%s' lacks '%s'", err.msg, needle);
}

/* Whether g accepts text as a complete sentence. */
static bool accepts(struct gs_grammar *g, const char *text)
{
    /* A one-token vocabulary: the matcher needs one, accept_bytes ignores it. */
    const char *piece[1] = {"x"};
    uint32_t len[1] = {1};
    struct gs_grammar_vocab *v;
    struct gs_err err;
    cr_assert_eq(gs_grammar_vocab_new(piece, len, 1, &v, &err), GS_OK);
    struct gs_grammar_matcher *m;
    cr_assert_eq(gs_grammar_matcher_new(g, v, &m, &err), GS_OK, "%s", err.msg);
    bool ok = gs_grammar_matcher_accept_bytes(m, text, strlen(text), &err) == GS_OK &&
              gs_grammar_matcher_can_end(m);
    gs_grammar_matcher_free(m);
    gs_grammar_vocab_free(v);
    return ok;
}

Test(grammar, literals_classes_and_repetition)
{
    struct gs_grammar *g = compile_ok("root ::= \"a\" [0-9]+ (\"x\" | \"yz\")? [a-c]{2,3} \"!\"*\n");
    cr_assert(accepts(g, "a1ab"));
    cr_assert(accepts(g, "a123xabc!!"));
    cr_assert(accepts(g, "a9yzcc!"));
    cr_assert_not(accepts(g, "a"));       /* no digit */
    cr_assert_not(accepts(g, "a1a"));     /* one class char, two needed */
    cr_assert_not(accepts(g, "a1abcd"));  /* four */
    cr_assert_not(accepts(g, "a1xyzab")); /* both options */
    cr_assert_not(accepts(g, "b1ab"));
    gs_grammar_unref(g);
}

Test(grammar, rules_alternatives_and_continuation_lines)
{
    struct gs_grammar *g = compile_ok("# arithmetic\n"
                                      "root ::= expr\n"
                                      "expr ::= term ((\"+\" | \"-\") term)*\n"
                                      "term ::= num\n"
                                      "       | \"(\" expr \")\"\n"
                                      "num  ::= [0-9]+\n");
    cr_assert(accepts(g, "1+2"));
    cr_assert(accepts(g, "(1+(2-3))-44"));
    cr_assert_not(accepts(g, "(1+2"));
    cr_assert_not(accepts(g, "1+"));
    gs_grammar_unref(g);
    /* Several definitions of one rule join their alternatives. */
    g = compile_ok("root ::= \"a\"\nroot ::= \"b\"\n");
    cr_assert(accepts(g, "a") && accepts(g, "b") && !accepts(g, "ab"));
    gs_grammar_unref(g);
}

Test(grammar, utf8_classes_and_escapes)
{
    struct gs_grammar *g = compile_ok("root ::= [à-ÿ] [^a-z] \"\\u00e9\\x41\\n\" .\n");
    cr_assert(accepts(g, "àA\xc3\xa9" "A\n€"));
    cr_assert(accepts(g, "ÿ😀éA\nz"));
    cr_assert_not(accepts(g, "aAéA\nz"));  /* 'a' is not in [à-ÿ] */
    cr_assert_not(accepts(g, "àbéA\nz"));  /* 'b' is excluded */
    cr_assert_not(accepts(g, "à\xed\xa0\x80" "éA\nz")); /* a surrogate is not a character */
    cr_assert_not(accepts(g, "à\xc3" "éA\nz"));          /* a truncated sequence */
    gs_grammar_unref(g);
}

Test(grammar, refusals_name_what_is_wrong)
{
    compile_fails("root ::= foo\n", "rule 'foo' (line 1) is used but not defined");
    compile_fails("start ::= \"a\"\n", "no rule 'root'");
    compile_fails("root ::= root \"a\" | \"b\"\n", "left recursion through rule 'root'");
    compile_fails("root ::= a\na ::= b? a \"x\"\nb ::= \"y\"\n", "left recursion through rule 'a'");
    compile_fails("root ::= (\"\")* \"a\"\n", "left recursion through a group or repetition");
    compile_fails("root ::= \"a\n", "line 1, column 10: unterminated string literal");
    compile_fails("root ::= \"a\"\nb ::= [z-a]\n", "line 2, column 7: character range is reversed");
    compile_fails("root ::= \"a\"{2,1}\n", "n < m");
    compile_fails("root ::= \"a\"{100000}\n", "max_repeat");
    compile_fails("root ::= (\"a\"\n", "missing ')'");
    compile_fails("root ::= \"\\q\"\n", "unknown escape");
    compile_fails("root ::= \"\\uD800\"\n", "not a Unicode scalar value");
    compile_fails("root ::= \"\xff\"\n", "invalid UTF-8");
    compile_fails("root := \"a\"\n", "expected '::='");
}

Test(grammar, limits_bound_size_and_ambiguity)
{
    struct gs_grammar_limits lim = {.max_elements = 1000};
    struct gs_grammar *g = NULL;
    struct gs_err err;
    const char *big = "root ::= [a-z]{600} [0-9]{600}\n";
    cr_assert_eq(gs_grammar_compile(big, strlen(big), NULL, &lim, &g, &err), GS_INVAL);
    cr_assert(strstr(err.msg, "max_elements"), "%s", err.msg);
    lim = (struct gs_grammar_limits){.max_source_bytes = 8};
    cr_assert_eq(gs_grammar_compile(big, strlen(big), NULL, &lim, &g, &err), GS_INVAL);
    cr_assert(strstr(err.msg, "max_source_bytes"), "%s", err.msg);

    /* After n a's the text may close any number of the n open x's with a
     * "b": one stack per depth, so the stacks grow with the text and the
     * matcher stops at max_stacks with GS_BUSY. */
    const char *src = "root ::= x\nx ::= \"a\" x \"b\"? | \"a\"\n";
    lim = (struct gs_grammar_limits){.max_stacks = 64};
    cr_assert_eq(gs_grammar_compile(src, strlen(src), NULL, &lim, &g, &err), GS_OK, "%s",
                 err.msg);
    const char *piece[1] = {"a"};
    uint32_t len[1] = {1};
    struct gs_grammar_vocab *v;
    cr_assert_eq(gs_grammar_vocab_new(piece, len, 1, &v, &err), GS_OK);
    struct gs_grammar_matcher *m;
    cr_assert_eq(gs_grammar_matcher_new(g, v, &m, &err), GS_OK);
    enum gs_status st = GS_OK;
    for (int i = 0; i < 200 && st == GS_OK; i++)
        st = gs_grammar_matcher_accept_bytes(m, "a", 1, &err);
    cr_assert_eq(st, GS_BUSY, "status %d: %s", st, err.msg);
    cr_assert(strstr(err.msg, "max_stacks"), "%s", err.msg);
    gs_grammar_matcher_free(m);
    gs_grammar_vocab_free(v);
    gs_grammar_unref(g);
}

/* ---- masks against the brute force ------------------------------------------------ */

struct vocab_fixture {
    struct gs_tok *tok;
    struct gs_grammar_vocab *v;
    uint32_t n;
    const char **piece;
    uint32_t *len;
};

static void vocab_open(struct vocab_fixture *f, const char *rel)
{
    struct gs_err err;
    cr_assert_eq(gs_tok_open(gs_test_shared_path(rel), &f->tok, &err), GS_OK, "%s", err.msg);
    f->n = gs_tok_n_vocab(f->tok);
    f->piece = calloc(f->n, sizeof(*f->piece));
    f->len = calloc(f->n, sizeof(*f->len));
    for (uint32_t i = 0; i < f->n; i++) {
        size_t l = 0;
        f->piece[i] = gs_tok_piece(f->tok, (int32_t)i, 0, &l);
        f->len[i] = (uint32_t)l;
    }
    cr_assert_eq(gs_grammar_vocab_new(f->piece, f->len, f->n, &f->v, &err), GS_OK);
}

static void vocab_close(struct vocab_fixture *f)
{
    gs_grammar_vocab_free(f->v);
    gs_tok_free(f->tok);
    free(f->piece);
    free(f->len);
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/*
 * Walks `steps` random tokens through g over the vocabulary, checking every
 * step's mask bit for bit against accept() on a clone. Returns the text.
 */
static char *random_walk(struct vocab_fixture *f, struct gs_grammar *g, int steps, uint64_t seed,
                         bool *ended)
{
    struct gs_err err;
    struct gs_grammar_matcher *m;
    cr_assert_eq(gs_grammar_matcher_new(g, f->v, &m, &err), GS_OK, "%s", err.msg);
    size_t words = (f->n + 63) / 64;
    uint64_t *allow = calloc(words, sizeof(*allow));
    int32_t *ok = calloc(f->n, sizeof(*ok));
    size_t cap = 4096, n_text = 0;
    char *text = calloc(cap, 1);
    *ended = false;
    for (int step = 0; step < steps; step++) {
        bool can_end;
        cr_assert_eq(gs_grammar_matcher_mask(m, allow, &can_end, &err), GS_OK, "%s", err.msg);
        cr_assert_eq(can_end, gs_grammar_matcher_can_end(m));
        uint32_t n_ok = 0;
        for (uint32_t t = 0; t < f->n; t++) {
            struct gs_grammar_matcher *c;
            cr_assert_eq(gs_grammar_matcher_clone(m, &c, &err), GS_OK);
            bool brute = f->len[t] && gs_grammar_matcher_accept(c, (int32_t)t, &err) == GS_OK;
            gs_grammar_matcher_free(c);
            bool bit = (allow[t / 64] >> (t % 64)) & 1;
            cr_assert_eq(bit, brute, "step %d after '%.*s': token %u '%.*s': mask %d, accept %d",
                         step, (int)n_text, text, t, (int)f->len[t], f->piece[t], bit, brute);
            if (brute)
                ok[n_ok++] = (int32_t)t;
        }
        if (gs_grammar_matcher_done(m) || n_ok == 0) {
            cr_assert(gs_grammar_matcher_can_end(m), "no token allowed but the text is not done");
            *ended = true;
            break;
        }
        if (can_end && rng_next(&seed) % 4 == 0) {
            *ended = true;
            break;
        }
        int32_t t = ok[rng_next(&seed) % n_ok];
        cr_assert_eq(gs_grammar_matcher_accept(m, t, &err), GS_OK, "%s", err.msg);
        while (n_text + f->len[t] + 1 > cap)
            text = realloc(text, cap *= 2);
        memcpy(text + n_text, f->piece[t], f->len[t]);
        n_text += f->len[t];
        text[n_text] = '\0';
    }
    free(allow);
    free(ok);
    gs_grammar_matcher_free(m);
    return text;
}

static const char json_gbnf[] =
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"
    "array  ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\bfnrt] | \"u\" "
    "[0-9a-fA-F]{4}) )* \"\\\"\" ws\n"
    "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9]{1,3})? ws\n"
    "ws     ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

static const char *walk_grammars[] = {
    json_gbnf,
    /* UTF-8 heavy: tokens that end inside a character must still be allowed. */
    "root ::= (\"«\" [^»]{1,12} \"»\" \" \"?){1,6}\n",
    /* Symbols shorter than tokens, and alternatives sharing prefixes. */
    "root ::= (\"the\" | \"then\" | \"there\" | \" \" | [a-e]+ | \".\"){1,40}\n",
    /* A bounded list of numbers. */
    "root ::= \"[\" [0-9]{1,4} (\", \" [0-9]{1,4}){0,8} \"]\"\n",
};

static void walks_on(const char *rel, int steps, int seeds)
{
    struct vocab_fixture f;
    vocab_open(&f, rel);
    for (size_t gi = 0; gi < sizeof(walk_grammars) / sizeof(*walk_grammars); gi++) {
        struct gs_grammar *g = compile_ok(walk_grammars[gi]);
        for (int s = 0; s < seeds; s++) {
            bool ended;
            char *text = random_walk(&f, g, steps, 0x9e3779b97f4a7c15ull * (uint64_t)(s + 1) + gi,
                                     &ended);
            if (getenv("GS_GRAMMAR_SHOW"))
                fprintf(stderr, "%s [%s]: %s\n", rel, ended ? "ended" : "open", text);
            if (ended)
                cr_assert(accepts(g, text), "walk ended with text the grammar refuses: '%s'", text);
            free(text);
        }
        gs_grammar_unref(g);
    }
    vocab_close(&f);
}

Test(grammar_mask, equals_brute_force_spm_byte_fallback, .timeout = 600)
{
    walks_on("models/stories260K.gguf", 60, 6);
}

/* The brute force clones the matcher for every token of the vocabulary at
 * every step: under the sanitizers (several times slower) one walk per
 * grammar over the large vocabularies. */
#if defined(__SANITIZE_ADDRESS__)
#define LARGE_VOCAB_WALKS 1
#else
#define LARGE_VOCAB_WALKS 2
#endif

Test(grammar_mask, equals_brute_force_spm_32k, .timeout = 600)
{
    walks_on("models/vocab/ggml-vocab-llama-spm.gguf", 12, LARGE_VOCAB_WALKS);
}

Test(grammar_mask, equals_brute_force_byte_level_bpe, .timeout = 600)
{
    walks_on("models/vocab/ggml-vocab-gpt-2.gguf", 12, LARGE_VOCAB_WALKS);
}

Test(grammar_mask, end_and_done)
{
    struct vocab_fixture f;
    vocab_open(&f, "models/stories260K.gguf");
    struct gs_grammar *g = compile_ok("root ::= \"ab\" \"c\"?\n");
    struct gs_err err;
    struct gs_grammar_matcher *m;
    cr_assert_eq(gs_grammar_matcher_new(g, f.v, &m, &err), GS_OK);
    cr_assert_not(gs_grammar_matcher_can_end(m));
    cr_assert_eq(gs_grammar_matcher_accept_bytes(m, "ab", 2, &err), GS_OK);
    cr_assert(gs_grammar_matcher_can_end(m));
    cr_assert_not(gs_grammar_matcher_done(m));
    cr_assert_eq(gs_grammar_matcher_accept_bytes(m, "x", 1, &err), GS_INVAL);
    cr_assert(gs_grammar_matcher_can_end(m), "a refused byte left the matcher changed");
    cr_assert_eq(gs_grammar_matcher_accept_bytes(m, "c", 1, &err), GS_OK);
    cr_assert(gs_grammar_matcher_done(m));
    size_t words = (f.n + 63) / 64;
    uint64_t *allow = calloc(words, sizeof(*allow));
    bool can_end = false;
    cr_assert_eq(gs_grammar_matcher_mask(m, allow, &can_end, &err), GS_OK);
    cr_assert(can_end);
    for (size_t i = 0; i < words; i++)
        cr_assert_eq(allow[i], 0, "tokens allowed after the grammar is done");
    free(allow);
    gs_grammar_matcher_free(m);
    gs_grammar_unref(g);
    vocab_close(&f);
}
