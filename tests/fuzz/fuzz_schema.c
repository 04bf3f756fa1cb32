/*
 * tests/fuzz/fuzz_schema.c - engine/grammar/schema.c on any JSON: a schema
 * converted to GBNF twice.
 *
 * Input: JSON text (any value; what does not parse is skipped).
 *
 * Invariants: the status is GS_OK or GS_INVAL (never another, never a
 * crash); GS_OK gives a NUL-terminated grammar of the stated length that
 * starts with the root rule and stays under the converter's 1 MiB cap;
 * GS_INVAL gives no grammar and a non-empty message; every grammar it gives
 * compiles (gs_grammar_compile: no undefined rule, no left recursion, no
 * repetition of the empty string, within the compiler's limits); and the
 * conversion is a pure function: a second call gives the same status and the
 * same bytes or message.
 */
#include "engine/grammar.h"
#include "tests/fuzz/fuzz.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_t *schema = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
    if (!schema)
        return 0;
    char *g1 = NULL, *g2 = NULL;
    size_t n1 = 0, n2 = 0;
    struct gs_err e1 = {0}, e2 = {0};
    enum gs_status s1 = gs_grammar_from_json_schema(schema, &g1, &n1, &e1);
    FUZZ_CHECK(s1 == GS_OK || s1 == GS_INVAL, "status %d: %s", s1, e1.msg);
    if (s1 == GS_OK) {
        FUZZ_CHECK(g1 && strlen(g1) == n1, "length %zu", n1);
        FUZZ_CHECK(n1 <= (1u << 20), "grammar of %zu bytes", n1);
        FUZZ_CHECK(!strncmp(g1, "root ::= ", 9), "no root rule first");
        struct gs_grammar *g = NULL;
        struct gs_err ce = {0};
        enum gs_status cs = gs_grammar_compile(g1, n1, NULL, NULL, &g, &ce);
        FUZZ_CHECK(cs == GS_OK, "the grammar does not compile: %s\n%s", ce.msg, g1);
        gs_grammar_unref(g);
    } else {
        FUZZ_CHECK(!g1 && n1 == 0, "a grammar beside a failure");
        FUZZ_CHECK(e1.msg[0] != '\0' && e1.code == s1, "no message");
    }
    enum gs_status s2 = gs_grammar_from_json_schema(schema, &g2, &n2, &e2);
    FUZZ_CHECK(s2 == s1, "second status %d, first %d", s2, s1);
    if (s1 == GS_OK)
        FUZZ_CHECK(n2 == n1 && !memcmp(g1, g2, n1), "a second conversion differs");
    else
        FUZZ_CHECK(!strcmp(e1.msg, e2.msg), "messages differ: '%s' / '%s'", e1.msg, e2.msg);
    gs_free(g1);
    gs_free(g2);
    json_decref(schema);
    return 0;
}
