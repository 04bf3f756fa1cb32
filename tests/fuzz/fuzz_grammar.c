/*
 * tests/fuzz/fuzz_grammar.c - engine/grammar on any GBNF text, and the
 * matcher on the grammars that compile.
 *
 * Input: the grammar text, optionally followed by a NUL and bytes that steer
 * the walk:
 *     <grammar> [ \0 <choices> ]
 * Each choice byte picks one of the allowed tokens of a small vocabulary
 * (single ASCII bytes, multi-byte UTF-8 characters, their halves, words).
 *
 * Invariants: compiling succeeds, or fails with GS_INVAL (GS_NOMEM) and a
 * message; on a compiled grammar every mask bit equals whether a clone of the
 * matcher accepts that token, can_end agrees with the matcher, an allowed
 * token is accepted, and the run-time limits (small here, so every input runs
 * in milliseconds) end a walk only with GS_BUSY and a message naming one.
 */
#include "engine/grammar.h"
#include "tests/fuzz/fuzz.h"

#include <string.h>

static const char *const vocab_text[] = {
    "a", "b", "c", "x", "0", "1", "9", " ", "\n", "\"", "{", "}", "[", "]", ",", ":", "-", ".",
    "ab", "the", "then", "\":", "\",", "{\"", "null", "true", "12", "é", "\xc3", "\xa9", "€",
    "\xe2\x82", "😀", "\xf0\x9f", "\x98\x80", "aé", "\\", "\\n",
};
#define N_VOCAB (sizeof(vocab_text) / sizeof(*vocab_text))

static struct gs_grammar_vocab *the_vocab; /* built once, kept (reachable) */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    uint32_t len[N_VOCAB];
    for (size_t i = 0; i < N_VOCAB; i++)
        len[i] = (uint32_t)strlen(vocab_text[i]);
    struct gs_err err;
    FUZZ_CHECK(gs_grammar_vocab_new(vocab_text, len, N_VOCAB, &the_vocab, &err) == GS_OK,
               "vocabulary: %s", err.msg);
    return 0;
}

static struct gs_grammar_vocab *vocab(void)
{
    return the_vocab;
}

static void walk(struct gs_grammar *g, const uint8_t *choices, size_t n_choices)
{
    struct gs_err err;
    struct gs_grammar_matcher *m;
    enum gs_status st = gs_grammar_matcher_new(g, vocab(), &m, &err);
    if (st) {
        FUZZ_CHECK(st == GS_BUSY || st == GS_NOMEM, "matcher_new: status %d: %s", st, err.msg);
        return;
    }
    uint64_t allow[(N_VOCAB + 63) / 64];
    for (size_t step = 0; step < 24; step++) {
        bool can_end;
        st = gs_grammar_matcher_mask(m, allow, &can_end, &err);
        if (st) {
            FUZZ_CHECK(st == GS_BUSY || st == GS_NOMEM, "mask: status %d: %s", st, err.msg);
            FUZZ_CHECK(st == GS_NOMEM || strstr(err.msg, "max_"), "mask: '%s' names no limit",
                          err.msg);
            break;
        }
        FUZZ_CHECK(can_end == gs_grammar_matcher_can_end(m), "can_end disagrees");
        int32_t ok[N_VOCAB];
        size_t n_ok = 0;
        bool busy = false;
        for (size_t t = 0; t < N_VOCAB && !busy; t++) {
            struct gs_grammar_matcher *c;
            if (gs_grammar_matcher_clone(m, &c, &err) != GS_OK)
                break;
            st = gs_grammar_matcher_accept(c, (int32_t)t, &err);
            gs_grammar_matcher_free(c);
            busy = st == GS_BUSY;
            if (busy)
                break;
            bool bit = (allow[t / 64] >> (t % 64)) & 1;
            FUZZ_CHECK(bit == (st == GS_OK), "token %zu: mask %d, accept status %d", t, bit,
                          st);
            if (st == GS_OK)
                ok[n_ok++] = (int32_t)t;
        }
        if (busy || n_ok == 0 || step >= n_choices)
            break;
        st = gs_grammar_matcher_accept(m, ok[choices[step] % n_ok], &err);
        FUZZ_CHECK(st == GS_OK || st == GS_BUSY, "an allowed token was refused: %s", err.msg);
        if (st)
            break;
    }
    gs_grammar_matcher_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, '\0', size);
    size_t src_len = nul ? (size_t)(nul - data) : size;
    struct gs_grammar_limits lim = {
        .max_source_bytes = 1 << 16,
        .max_rules = 4096,
        .max_elements = 1 << 16,
        .max_repeat = 64,
        .max_stacks = 256,
        .max_stack_depth = 128,
        .max_mask_work = 1 << 20,
        .max_cache_bytes = 1 << 20,
    };
    struct gs_grammar *g = NULL;
    struct gs_err err = {0};
    enum gs_status st = gs_grammar_compile((const char *)data, src_len, NULL, &lim, &g, &err);
    if (st) {
        FUZZ_CHECK(st == GS_INVAL || st == GS_NOMEM, "compile: status %d", st);
        FUZZ_CHECK(err.msg[0], "compile failed without a message");
        FUZZ_CHECK(!g, "compile failed but returned a grammar");
        return 0;
    }
    walk(g, nul ? nul + 1 : NULL, nul ? size - src_len - 1 : 0);
    gs_grammar_unref(g);
    return 0;
}
