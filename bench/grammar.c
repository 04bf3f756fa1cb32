/*
 * bench/grammar.c - the cost of structured outputs outside the model:
 * compiling every schema of a JSONL file (JSON Schema to GBNF to matcher
 * rules), building a vocabulary's trie, and the mask of one decoding step
 * over real vocabularies, on random walks through JSON grammars.
 *
 * usage: gs-bench-grammar SCHEMAS.jsonl VOCAB.gguf [VOCAB.gguf ...]
 *
 * Masks are timed on walks that choose uniformly among the allowed tokens,
 * which visit strings, numbers and structure alike; the first steps of a walk
 * fill the grammar's cache (a fresh grammar per walk, as per request), so the
 * figures include the misses a request pays.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar.h"
#include "engine/tok.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, size_t n, double p)
{
    if (!n)
        return 0;
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return v[i];
}

static void compile_all(const char *path, const char **largest_gbnf)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        exit(1);
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    double *ms = NULL;
    size_t n_ok = 0, n_refused = 0, n_rows = 0, big_len = 0;
    double worst = 0;
    char worst_id[128] = "";
    while ((n = getline(&line, &cap, f)) > 0) {
        json_error_t je;
        json_t *row = json_loadb(line, (size_t)n, 0, &je);
        if (!row)
            continue;
        n_rows++;
        /* Best of five: the machines this runs on are shared. */
        double dt = 1e30;
        char *gbnf = NULL;
        size_t len = 0;
        struct gs_err err;
        struct gs_grammar *g = NULL;
        enum gs_status st = GS_OK;
        for (int rep = 0; rep < 5 && !st; rep++) {
            gs_grammar_unref(g);
            gs_free(gbnf);
            g = NULL;
            gbnf = NULL;
            double t0 = gs_now_ms();
            st = gs_grammar_from_json_schema(json_object_get(row, "schema"), &gbnf, &len, &err);
            if (!st)
                st = gs_grammar_compile(gbnf, len, "root", NULL, &g, &err);
            double t = gs_now_ms() - t0;
            if (t < dt)
                dt = t;
        }
        if (st) {
            n_refused++;
        } else {
            ms = realloc(ms, (n_ok + 1) * sizeof(*ms));
            ms[n_ok++] = dt;
            if (dt > worst) {
                worst = dt;
                snprintf(worst_id, sizeof(worst_id), "%s",
                         json_string_value(json_object_get(row, "id")));
            }
            if (len > big_len) {
                big_len = len;
                free((void *)*largest_gbnf);
                *largest_gbnf = strdup(gbnf);
            }
        }
        gs_grammar_unref(g);
        gs_free(gbnf);
        json_decref(row);
    }
    free(line);
    fclose(f);
    qsort(ms, n_ok, sizeof(*ms), cmp_double);
    printf("schemas: %zu rows, %zu compiled, %zu refused\n", n_rows, n_ok, n_refused);
    printf("compile (schema -> GBNF -> rules, best of 5) ms: median %.3f, p90 %.3f, p99 %.3f, max %.3f (%s)\n",
           pct(ms, n_ok, 0.5), pct(ms, n_ok, 0.9), pct(ms, n_ok, 0.99), worst, worst_id);
    printf("largest grammar: %zu bytes of GBNF\n", big_len);
    free(ms);
}

static uint64_t rng(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void walks(const char *label, const char *gbnf, const struct gs_grammar_vocab *v,
                  uint32_t n_vocab)
{
    enum { WALKS = 8, STEPS = 256 };
    double *ms = malloc(sizeof(double) * WALKS * STEPS);
    size_t n_ms = 0;
    uint64_t *allow = calloc((n_vocab + 63) / 64, sizeof(*allow));
    int32_t *ok = malloc(sizeof(int32_t) * n_vocab);
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    double first = 0;
    for (int w = 0; w < WALKS; w++) {
        struct gs_err err;
        struct gs_grammar *g;
        if (gs_grammar_compile(gbnf, strlen(gbnf), "root", NULL, &g, &err)) {
            printf("%s: %s\n", label, err.msg);
            break;
        }
        struct gs_grammar_matcher *m;
        gs_grammar_matcher_new(g, v, &m, &err);
        for (int s = 0; s < STEPS; s++) {
            bool can_end;
            double t0 = gs_now_ms();
            if (gs_grammar_matcher_mask(m, allow, &can_end, &err)) {
                printf("%s: %s\n", label, err.msg);
                break;
            }
            double dt = gs_now_ms() - t0;
            ms[n_ms++] = dt;
            if (s == 0)
                first += dt;
            uint32_t k = 0;
            for (uint32_t t = 0; t < n_vocab; t++)
                if ((allow[t / 64] >> (t % 64)) & 1)
                    ok[k++] = (int32_t)t;
            if (!k || (can_end && rng(&seed) % 64 == 0))
                break;
            if (gs_grammar_matcher_accept(m, ok[rng(&seed) % k], &err))
                break;
        }
        gs_grammar_matcher_free(m);
        gs_grammar_unref(g);
    }
    double sum = 0;
    for (size_t i = 0; i < n_ms; i++)
        sum += ms[i];
    qsort(ms, n_ms, sizeof(*ms), cmp_double);
    printf("  %-12s %5zu steps: mean %.1f us, median %.1f us, p99 %.0f us, max %.0f us "
           "(first step of a request %.0f us)\n",
           label, n_ms, 1000 * sum / (double)n_ms, 1000 * pct(ms, n_ms, 0.5),
           1000 * pct(ms, n_ms, 0.99), 1000 * pct(ms, n_ms, 1.0), 1000 * first / WALKS);
    free(ms);
    free(allow);
    free(ok);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: gs-bench-grammar SCHEMAS.jsonl VOCAB.gguf [VOCAB.gguf ...]\n");
        return 2;
    }
    const char *largest = NULL;
    compile_all(argv[1], &largest);
    for (int a = 2; a < argc; a++) {
        struct gs_err err;
        struct gs_tok *tok;
        if (gs_tok_open(argv[a], &tok, &err)) {
            fprintf(stderr, "%s: %s\n", argv[a], err.msg);
            return 1;
        }
        uint32_t n = gs_tok_n_vocab(tok);
        const char **piece = malloc(n * sizeof(*piece));
        uint32_t *len = malloc(n * sizeof(*len));
        for (uint32_t i = 0; i < n; i++) {
            size_t l = 0;
            piece[i] = gs_tok_piece(tok, (int32_t)i, 0, &l);
            len[i] = (uint32_t)l;
        }
        double t0 = gs_now_ms();
        struct gs_grammar_vocab *v;
        if (gs_grammar_vocab_new(piece, len, n, &v, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        const char *name = strrchr(argv[a], '/') ? strrchr(argv[a], '/') + 1 : argv[a];
        printf("%s: %u tokens, trie built in %.1f ms\n", name, n, gs_now_ms() - t0);
        walks("json_object", gs_grammar_json_object_gbnf(), v, n);
        if (largest)
            walks("largest", largest, v, n);
        gs_grammar_vocab_free(v);
        gs_tok_free(tok);
        free(piece);
        free(len);
    }
    free((void *)largest);
    return 0;
}
