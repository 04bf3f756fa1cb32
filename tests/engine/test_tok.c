/*
 * tests/engine/test_tok.c - the tokenizers against llama.cpp's own outputs.
 *
 * Conformance: every vocabulary in ../shared/models/vocab that has .inp/.out
 * files (the inputs and ids of llama.cpp's test-tokenizer-0, which encodes
 * with add_special = false and parse_special = false) and every case of
 * ../shared/golden/tokenizer/<name>.tokenize.json (llama-tokenize's ids with and
 * without BOS and parse_special, and its printed pieces) must come out
 * identical. Both are parameterized over tables of files.
 *
 * Then: decoding round trips, the streaming decoder's UTF-8 guarantee, token
 * types and EOG sets, hostile metadata (each a row: how to break a valid
 * tokenizer, the status and the key the message must name), allocation
 * failure at every step, the command-line tool, and speed on 1 MB inputs.
 */
#define _GNU_SOURCE
#include "engine/tok.h"
#include "tests/common/testutil.h"

#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- helpers -------------------------------------------------------------------- */

static struct gs_tok *open_tok(const char *rel)
{
    struct gs_tok *t;
    struct gs_err err = {0};
    enum gs_status st = gs_tok_open(gs_test_shared_path(rel), &t, &err);
    cr_assert_eq(st, GS_OK, "%s: %s", rel, err.msg);
    return t;
}

static void encode(const struct gs_tok *t, const char *s, size_t n, unsigned flags, int32_t **ids,
                   size_t *n_ids)
{
    struct gs_err err = {0};
    cr_assert_eq(gs_tok_encode(t, s, n, flags, ids, n_ids, &err), GS_OK, "%s", err.msg);
}

/* Formats ids as "1 2 3" into buf (for failure messages). */
static const char *ids_str(const int32_t *ids, size_t n, char *buf, size_t cap)
{
    size_t w = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && w + 16 < cap; i++)
        w += (size_t)snprintf(buf + w, cap - w, "%s%d", i ? " " : "", ids[i]);
    return buf;
}

static bool valid_utf8(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        size_t need = c < 0x80                 ? 1
                      : c >= 0xC2 && c <= 0xDF ? 2
                      : c >= 0xE0 && c <= 0xEF ? 3
                      : c >= 0xF0 && c <= 0xF4 ? 4
                                               : 0;
        if (!need || i + need > n)
            return false;
        for (size_t k = 1; k < need; k++)
            if ((p[i + k] & 0xC0) != 0x80)
                return false;
        if ((c == 0xE0 && p[i + 1] < 0xA0) || (c == 0xED && p[i + 1] > 0x9F) ||
            (c == 0xF0 && p[i + 1] < 0x90) || (c == 0xF4 && p[i + 1] > 0x8F))
            return false;
        i += need;
    }
    return true;
}

/* The inputs of a .inp file: separated by "\n__ggml_vocab_test__\n"; a
 * separator at the very end does not start another input (llama.cpp's
 * test-tokenizer-0 reads them so). Returns the count; *starts and *lens are
 * malloc'ed views into text. */
static size_t split_inputs(const char *text, size_t len, const char ***starts, size_t **lens)
{
    static const char sep[] = "\n__ggml_vocab_test__\n";
    size_t cap = 64, n = 0, pos = 0;
    *starts = malloc(cap * sizeof(**starts));
    *lens = malloc(cap * sizeof(**lens));
    while (pos < len) {
        if (n == cap) {
            cap *= 2;
            *starts = realloc(*starts, cap * sizeof(**starts));
            *lens = realloc(*lens, cap * sizeof(**lens));
        }
        const char *m = memmem(text + pos, len - pos, sep, sizeof(sep) - 1);
        size_t end = m ? (size_t)(m - text) : len;
        (*starts)[n] = text + pos;
        (*lens)[n++] = end - pos;
        pos = m ? end + sizeof(sep) - 1 : len;
    }
    return n;
}

/* Parses one line of space-separated ids. */
static size_t parse_ids(const char *line, int32_t *out, size_t cap)
{
    size_t n = 0;
    char *end;
    for (;;) {
        while (*line == ' ')
            line++;
        if (*line == '\0' || *line == '\n')
            return n;
        long v = strtol(line, &end, 10);
        cr_assert(end != line, "bad id list near '%.20s'", line);
        cr_assert(n < cap);
        out[n++] = (int32_t)v;
        line = end;
    }
}

/* ---- conformance: ../shared/models/vocab/<name>.inp and .out ------------------------------ */

struct vocab_case {
    char name[32];
};

/* Every vocabulary that ships llama.cpp test inputs; a test below checks that
 * this list covers the folder. */
static struct vocab_case vocab_cases[] = {
    {"bert-bge"}, {"deepseek-coder"}, {"deepseek-llm"}, {"falcon"},    {"gemma-4"},
    {"gpt-2"},    {"llama-bpe"},      {"llama-spm"},    {"mpt"},       {"phi-3"},
    {"qwen2"},    {"qwen35"},         {"refact"},       {"starcoder"},
};

ParameterizedTestParameters(tok_vocab, ids_match_llama_cpp)
{
    return cr_make_param_array(struct vocab_case, vocab_cases, GS_ARRAY_LEN(vocab_cases));
}

ParameterizedTest(struct vocab_case *vc, tok_vocab, ids_match_llama_cpp, .timeout = 120)
{
    char rel[128];
    snprintf(rel, sizeof(rel), "models/vocab/ggml-vocab-%s.gguf", vc->name);
    struct gs_tok *t = open_tok(rel);
    size_t inp_len, out_len;
    snprintf(rel, sizeof(rel), "models/vocab/ggml-vocab-%s.gguf.inp", vc->name);
    char *inp = gs_test_read_file(gs_test_shared_path(rel), &inp_len);
    snprintf(rel, sizeof(rel), "models/vocab/ggml-vocab-%s.gguf.out", vc->name);
    char *out = gs_test_read_file(gs_test_shared_path(rel), &out_len);

    const char **starts;
    size_t *lens;
    size_t n = split_inputs(inp, inp_len, &starts, &lens);
    cr_assert_gt(n, 10, "%s: too few inputs", vc->name);
    char *line = out;
    size_t failed = 0;
    for (size_t i = 0; i < n; i++) {
        cr_assert(line && *line != '\0', "%s: .out has fewer lines than inputs", vc->name);
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        int32_t want[4096];
        size_t n_want = parse_ids(line, want, GS_ARRAY_LEN(want));
        int32_t *got;
        size_t n_got;
        encode(t, starts[i], lens[i], 0, &got, &n_got);
        bool same = n_got == n_want && (n_got == 0 || !memcmp(got, want, n_got * sizeof(*got)));
        if (!same) {
            char a[512], b[512];
            cr_log_error("%s input %zu '%.*s': want [%s] got [%s]", vc->name, i,
                         (int)GS_MIN(lens[i], 60), starts[i], ids_str(want, n_want, a, sizeof(a)),
                         ids_str(got, n_got, b, sizeof(b)));
            failed++;
        }
        gs_free(got);
        line = nl ? nl + 1 : NULL;
    }
    cr_expect_eq(failed, 0, "%s: %zu of %zu inputs differ from llama.cpp", vc->name, failed, n);
    free(starts);
    free(lens);
    free(inp);
    free(out);
    gs_tok_free(t);
}

Test(tok_vocab, every_shared_vocab_with_inputs_is_listed)
{
    const char *dir = gs_test_shared_path("models/vocab");
    DIR *d = opendir(dir);
    cr_assert(d, "cannot list %s", dir);
    struct dirent *e;
    size_t found = 0;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 20 || strcmp(e->d_name + l - 9, ".gguf.inp") ||
            strncmp(e->d_name, "ggml-vocab-", 11))
            continue;
        found++;
        bool listed = false;
        for (size_t i = 0; i < GS_ARRAY_LEN(vocab_cases); i++)
            listed |= strlen(vocab_cases[i].name) == l - 20 &&
                      !strncmp(vocab_cases[i].name, e->d_name + 11, l - 20);
        cr_expect(listed, "%s has test inputs but is not in vocab_cases", e->d_name);
    }
    closedir(d);
    cr_expect_eq(found, GS_ARRAY_LEN(vocab_cases));
}

/* Vocabularies without test inputs must still load and encode something. */
Test(tok_vocab, vocabs_without_inputs_load)
{
    static const char *const names[] = {"baichuan", "gpt-neox"};
    for (size_t i = 0; i < GS_ARRAY_LEN(names); i++) {
        char rel[128];
        snprintf(rel, sizeof(rel), "models/vocab/ggml-vocab-%s.gguf", names[i]);
        struct gs_tok *t = open_tok(rel);
        int32_t *ids;
        size_t n;
        encode(t, "Hello world", 11, GS_TOK_ADD_SPECIAL, &ids, &n);
        cr_expect_gt(n, 1, "%s", names[i]);
        gs_free(ids);
        gs_tok_free(t);
    }
}

/* Whitespace outside ASCII, against llama.cpp's ids (taken from llama.cpp
 * as built into node-llama-cpp 3.22.1, 2026-11): its regex engines see
 * U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028/9, U+202F, U+205F and U+3000
 * as whitespace and nothing else (not U+180E), and never as a member of a
 * literal class such as deepseek's [\u3000-\u3002]. */
static const struct {
    const char *vocab, *text;
    int32_t ids[12];
    size_t n;
} ws_cases[] = {
    {"deepseek-llm", "    \xe3\x80\x80\xd9\xa1\xd9\xa2", {251, 88946, 147, 94, 147, 95}, 6},
    {"deepseek-llm",
     "a\xe3\x80\x80\xe3\x80\x81"
     "b \xe3\x80\x80",
     {64, 88946, 537, 65, 207, 88946},
     6},
    {"deepseek-llm",
     "x\xe1\xa0\x8e"
     "y\xe2\x80\x83z",
     {87, 155, 241, 223, 88, 51570, 89},
     7},
    {"deepseek-coder", "\xe4\xb8\xad\xe3\x80\x80\xe6\x96\x87", {759, 343, 209, 1919}, 4},
    {"deepseek-coder",
     "\xe1\x9a\x80\xe4\xb8\xad\xe2\x80\xa8\xe6\x96\x87\xe2\x81\x9f",
     {155, 235, 209, 759, 350, 101, 1919, 156, 210, 240},
     10},
    {"qwen2",
     "a\xe1\xa0\x8e b\xc2\xa0\xc2\xa0"
     "c\xc2\x85"
     "d",
     {64, 123970, 236, 293, 4102, 4102, 66, 126, 227, 67},
     10},
    {"qwen2",
     "1\xe3\x80\x80"
     "2\xe3\x80\x80\xe3\x80\x80\n",
     {16, 22441, 17, 43429, 198},
     5},
    {"llama-bpe",
     "it\xe2\x80\x99s \xe1\xa0\x8e'S  \xe3\x80\x80"
     "done",
     {275, 753, 87189, 254, 236, 6, 50, 256, 23249, 10655},
     10},
    {"gpt-2", "\xc2\xa0\xc2\xa0x\xc2\x85\xc2\x85y", {1849, 1849, 87, 126, 227, 126, 227, 88}, 8},
};

Test(tok_vocab, unicode_whitespace_as_llama_cpp)
{
    for (size_t i = 0; i < GS_ARRAY_LEN(ws_cases); i++) {
        char rel[128];
        snprintf(rel, sizeof(rel), "models/vocab/ggml-vocab-%s.gguf", ws_cases[i].vocab);
        struct gs_tok *t = open_tok(rel);
        int32_t *ids;
        size_t n;
        encode(t, ws_cases[i].text, strlen(ws_cases[i].text), 0, &ids, &n);
        char buf[512];
        cr_expect(n == ws_cases[i].n && !memcmp(ids, ws_cases[i].ids, n * sizeof(*ids)),
                  "%s case %zu: got [%s]", ws_cases[i].vocab, i, ids_str(ids, n, buf, sizeof(buf)));
        gs_free(ids);
        gs_tok_free(t);
    }
}

/* ---- conformance: ../shared/golden/tokenizer/<name>.tokenize.json ----------------------- */

struct golden_case {
    char file[64];
};

static struct golden_case golden_cases[] = {
    {"stories260K.tokenize.json"},      {"llama-2-tiny-random.tokenize.json"},
    {"ggml-vocab-gpt-2.tokenize.json"}, {"ggml-vocab-llama-spm.tokenize.json"},
    {"ggml-vocab-phi-3.tokenize.json"}, {"ggml-vocab-starcoder.tokenize.json"},
};

static bool ids_equal(json_t *want, const int32_t *got, size_t n)
{
    if (!json_is_array(want) || json_array_size(want) != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (json_integer_value(json_array_get(want, i)) != got[i])
            return false;
    return true;
}

/* A piece as llama-tokenize's output was stored: bytes that are not part of
 * valid UTF-8 are written as \xNN. */
static void piece_repr(const char *p, size_t n, char *out, size_t cap)
{
    size_t w = 0;
    for (size_t i = 0; i < n && w + 8 < cap;) {
        size_t k;
        for (k = 1; k <= 4 && i + k <= n; k++)
            if (valid_utf8(p + i, k))
                break;
        if (k <= 4 && i + k <= n) {
            memcpy(out + w, p + i, k);
            w += k;
            i += k;
        } else {
            w += (size_t)snprintf(out + w, cap - w, "\\x%02x", (unsigned char)p[i]);
            i++;
        }
    }
    out[w] = '\0';
}

ParameterizedTestParameters(tok_golden, matches_llama_tokenize)
{
    return cr_make_param_array(struct golden_case, golden_cases, GS_ARRAY_LEN(golden_cases));
}

ParameterizedTest(struct golden_case *gc, tok_golden, matches_llama_tokenize, .timeout = 120)
{
    char rel[128];
    snprintf(rel, sizeof(rel), "golden/tokenizer/%s", gc->file);
    json_t *root = gs_test_load_json(gs_test_shared_path(rel));
    snprintf(rel, sizeof(rel), "models/%s", json_string_value(json_object_get(root, "model")));
    struct gs_tok *t = open_tok(rel);
    static const struct {
        const char *key;
        unsigned flags;
    } variants[] = {
        {"ids_add_special", GS_TOK_ADD_SPECIAL},
        {"ids_no_special", 0},
        {"ids_add_special_parse_special", GS_TOK_ADD_SPECIAL | GS_TOK_PARSE_SPECIAL},
    };
    json_t *cases = json_object_get(root, "cases");
    cr_assert_gt(json_array_size(cases), 0);
    size_t idx;
    json_t *c;
    json_array_foreach(cases, idx, c)
    {
        const char *text = json_string_value(json_object_get(c, "text"));
        size_t len = json_string_length(json_object_get(c, "text"));
        for (size_t v = 0; v < GS_ARRAY_LEN(variants); v++) {
            json_t *want = json_object_get(c, variants[v].key);
            if (!want)
                continue;
            int32_t *ids;
            size_t n;
            encode(t, text, len, variants[v].flags, &ids, &n);
            char buf[512];
            cr_expect(ids_equal(want, ids, n), "%s '%s' %s: got [%s]", gc->file, text,
                      variants[v].key, ids_str(ids, n, buf, sizeof(buf)));
            gs_free(ids);
            /* The same ids from gs_tok_encode_spans: one span over the whole
             * text is parse_special, no span is plain text. */
            bool parse = variants[v].flags & GS_TOK_PARSE_SPECIAL;
            struct gs_tok_span whole = {0, len};
            struct gs_err err = {0};
            cr_assert_eq(gs_tok_encode_spans(t, text, len, parse ? &whole : NULL, parse ? 1 : 0,
                                             variants[v].flags & ~(unsigned)GS_TOK_PARSE_SPECIAL,
                                             &ids, &n, &err),
                         GS_OK, "%s", err.msg);
            cr_expect(ids_equal(want, ids, n), "%s '%s' %s with spans: got [%s]", gc->file, text,
                      variants[v].key, ids_str(ids, n, buf, sizeof(buf)));
            gs_free(ids);
        }
        /* llama-tokenize printed one "id -> 'piece'" per line; the golden
         * file holds that output split at newlines, so compare the joined
         * text (pieces of "\n" span two lines). */
        json_t *pieces = json_object_get(c, "pieces_no_special");
        if (!pieces)
            continue;
        int32_t *ids;
        size_t n;
        encode(t, text, len, 0, &ids, &n);
        char got[8192] = "", want[8192] = "";
        size_t gw = 0, ww = 0;
        for (size_t i = 0; i < n; i++) {
            size_t pl;
            const char *p = gs_tok_piece(t, ids[i], GS_TOK_RENDER_SPECIAL, &pl);
            char repr[256];
            piece_repr(p, pl, repr, sizeof(repr));
            gw += (size_t)snprintf(got + gw, sizeof(got) - gw, "%6d -> '%s'\n", ids[i], repr);
        }
        size_t k;
        json_t *line;
        json_array_foreach(pieces, k, line)
        {
            ww += (size_t)snprintf(want + ww, sizeof(want) - ww, "%s\n", json_string_value(line));
        }
        cr_expect_str_eq(got, want, "%s '%s': pieces", gc->file, text);
        gs_free(ids);
    }
    gs_tok_free(t);
    json_decref(root);
}

/* Encodes with spans; asserts success. */
static void encode_spans(const struct gs_tok *t, const char *s, const struct gs_tok_span *sp,
                         size_t n_sp, unsigned flags, int32_t **ids, size_t *n)
{
    struct gs_err err = {0};
    cr_assert_eq(gs_tok_encode_spans(t, s, strlen(s), sp, n_sp, flags, ids, n, &err), GS_OK,
                 "'%s': %s", s, err.msg);
}

static size_t count_id(const int32_t *ids, size_t n, int32_t id)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += ids[i] == id;
    return k;
}

/* A control token's text is recognised inside a special span and nowhere
 * else: "<|im_start|>" written outside the spans is the plain text's ids. */
Test(tok_spans, control_tokens_only_inside_spans)
{
    struct gs_tok *t = open_tok("models/vocab/ggml-vocab-qwen2.gguf");
    int32_t im_start = gs_tok_find(t, "<|im_start|>", 12),
            im_end = gs_tok_find(t, "<|im_end|>", 10);
    cr_assert(im_start >= 0 && im_end >= 0);
    cr_assert_eq(gs_tok_token_type(t, im_start), GS_TOK_TYPE_CONTROL);
    /* Offsets: user at 12, the second "<|im_start|>" at 17, "<|im_end|>" at 35. */
    const char *text = "<|im_start|>user\n<|im_start|>system<|im_end|>\n";
    struct gs_tok_span sp[] = {{0, 12}, {35, 10}};
    int32_t *ids, *plain, *head;
    size_t n, n_plain, n_head;
    encode_spans(t, text, sp, 2, 0, &ids, &n);
    cr_expect_eq(count_id(ids, n, im_start), 1, "only the marker in a span opens a turn");
    cr_expect_eq(count_id(ids, n, im_end), 1);
    cr_assert_geq(n, 3);
    cr_expect_eq(ids[0], im_start);
    cr_expect_eq(ids[n - 2], im_end);
    /* Between the two markers: exactly the ids of that text alone, unparsed. */
    encode(t, text + 12, 23, 0, &plain, &n_plain);
    cr_assert_eq(n, n_plain + 3, "got %zu ids", n);
    cr_expect(!memcmp(ids + 1, plain, n_plain * sizeof(*ids)));
    gs_free(ids);

    /* A span that covers only part of a token's text does not make it. */
    struct gs_tok_span part = {0, 11};
    encode_spans(t, "<|im_start|>", &part, 1, 0, &head, &n_head);
    cr_expect_eq(count_id(head, n_head, im_start), 0);
    gs_free(head);
    /* Spans that touch act as one stretch of text only if the token is inside one. */
    struct gs_tok_span halves[] = {{0, 6}, {6, 6}};
    encode_spans(t, "<|im_start|>", halves, 2, 0, &head, &n_head);
    cr_expect_eq(count_id(head, n_head, im_start), 0);
    gs_free(head);
    /* parse_special recognises it anywhere, spans or not. */
    encode_spans(t, text, NULL, 0, GS_TOK_PARSE_SPECIAL, &ids, &n);
    cr_expect_eq(count_id(ids, n, im_start), 2);
    gs_free(ids);
    gs_free(plain);
    gs_tok_free(t);
}

/* SentencePiece: text after a recognised token gets the space prefix, as
 * with parse_special; "</s>" outside the spans is text. */
Test(tok_spans, spm_prefix_space_follows_recognised_tokens)
{
    struct gs_tok *t = open_tok("models/vocab/ggml-vocab-llama-spm.gguf");
    int32_t eos = gs_tok_special(t)->eos;
    const char *text = "Hi</s>there</s>you";
    struct gs_tok_span first = {2, 4};
    int32_t *ids, *want;
    size_t n, n_want;
    encode_spans(t, text, &first, 1, GS_TOK_ADD_SPECIAL, &ids, &n);
    cr_expect_eq(count_id(ids, n, eos), 1);
    /* The same as parsing "Hi</s>" and appending "there</s>you" as its own text. */
    encode(t, "Hi</s>there", 11, GS_TOK_ADD_SPECIAL | GS_TOK_PARSE_SPECIAL, &want, &n_want);
    cr_assert_geq(n, n_want);
    size_t at = 0;
    while (at < n && ids[at] != eos)
        at++;
    cr_assert_lt(at, n);
    int32_t *tail;
    size_t n_tail;
    encode(t, "there</s>you", 12, 0, &tail, &n_tail);
    cr_expect_eq(n, at + 1 + n_tail);
    cr_expect(!memcmp(ids + at + 1, tail, n_tail * sizeof(*ids)),
              "the text after a span's token is encoded alone, with the SPM space");
    cr_expect(!memcmp(ids, want, (at + 1) * sizeof(*ids)));
    gs_free(tail);
    gs_free(want);
    gs_free(ids);
    gs_tok_free(t);
}

Test(tok_spans, refuses_spans_out_of_order_or_past_the_text)
{
    struct gs_tok *t = open_tok("models/stories260K.gguf");
    struct gs_err err = {0};
    int32_t *ids = (int32_t *)1;
    size_t n = 7;
    static const struct gs_tok_span bad[][2] = {
        {{4, 2}, {0, 2}}, /* out of order */
        {{0, 3}, {2, 2}}, /* overlapping */
        {{0, 2}, {5, 2}}, /* past the end of "hello" */
        {{0, 2}, {9, 0}}, /* starting past the end */
    };
    for (size_t i = 0; i < GS_ARRAY_LEN(bad); i++) {
        cr_expect_eq(gs_tok_encode_spans(t, "hello", 5, bad[i], 2, 0, &ids, &n, &err), GS_INVAL,
                     "case %zu", i);
        cr_expect(ids == NULL && n == 0 && strstr(err.msg, "span"), "case %zu: %s", i, err.msg);
    }
    struct gs_tok_span touching[] = {{0, 2}, {2, 3}};
    cr_expect_eq(gs_tok_encode_spans(t, "hello", 5, touching, 2, 0, &ids, &n, &err), GS_OK);
    gs_free(ids);
    gs_tok_free(t);
}

/* The prompts and sampled tokens of the shared generation goldens (llama.cpp
 * runs of the tiny models): the prompt's ids with BOS, the prompt's pieces
 * (BOS hidden), and every sampled token's piece bytes. */
static void check_generation_golden(const char *rel)
{
    /* Sampled pieces may be NUL bytes, which gs_test_load_json refuses. */
    json_error_t je;
    json_t *root = json_load_file(gs_test_shared_path(rel), JSON_ALLOW_NUL, &je);
    cr_assert(root, "%s: %s", rel, je.text);
    char model[256];
    snprintf(model, sizeof(model), "%s", json_string_value(json_object_get(root, "model")));
    const char *dirs[] = {"models/", "models/arch/"};
    struct gs_tok *t = NULL;
    for (size_t i = 0; i < GS_ARRAY_LEN(dirs) && !t; i++) {
        char path[512];
        snprintf(path, sizeof(path), "%s/%s%s", getenv("GS_SHARED_DIR"), dirs[i], model);
        struct gs_err err = {0};
        if (access(path, R_OK) == 0)
            cr_assert_eq(gs_tok_open(path, &t, &err), GS_OK, "%s: %s", rel, err.msg);
    }
    cr_assert(t, "%s: model %s not found", rel, model);
    const char *prompt = json_string_value(json_object_get(root, "prompt"));
    int32_t *ids;
    size_t n;
    unsigned flags = json_is_false(json_object_get(root, "add_bos")) ? 0 : GS_TOK_ADD_SPECIAL;
    encode(t, prompt, strlen(prompt), flags, &ids, &n);
    char buf[512];
    cr_expect(ids_equal(json_object_get(root, "prompt_tokens"), ids, n), "%s: prompt ids [%s]", rel,
              ids_str(ids, n, buf, sizeof(buf)));
    json_t *pieces = json_object_get(root, "prompt_pieces");
    for (size_t i = 0; i < n && i < json_array_size(pieces); i++) {
        size_t pl;
        const char *p = gs_tok_piece(t, ids[i], 0, &pl);
        const char *want = json_string_value(json_array_get(pieces, i));
        cr_expect(pl == strlen(want) && !memcmp(p, want, pl), "%s: prompt piece %zu", rel, i);
    }
    gs_free(ids);
    size_t k;
    json_t *step;
    json_array_foreach(json_object_get(root, "steps"), k, step)
    {
        int32_t id = (int32_t)json_integer_value(json_object_get(step, "token"));
        size_t pl;
        const char *p = gs_tok_piece(t, id, 0, &pl);
        char hex[256] = "";
        for (size_t i = 0; i < pl && 2 * i + 2 < sizeof(hex); i++)
            snprintf(hex + 2 * i, 3, "%02x", (unsigned char)p[i]);
        cr_expect_str_eq(hex, json_string_value(json_object_get(step, "piece_hex")),
                         "%s: step %zu token %d", rel, k, id);
    }
    gs_tok_free(t);
    json_decref(root);
}

Test(tok_golden, generation_prompts_and_pieces, .timeout = 120)
{
    static const char *const dirs[] = {"golden/arch", "golden/completions"};
    size_t seen = 0;
    for (size_t d = 0; d < GS_ARRAY_LEN(dirs); d++) {
        char dir[4096];
        snprintf(dir, sizeof(dir), "%s", gs_test_shared_path(dirs[d]));
        DIR *dp = opendir(dir);
        cr_assert(dp, "cannot list %s", dir);
        struct dirent *e;
        while ((e = readdir(dp))) {
            size_t l = strlen(e->d_name);
            if (l < 6 || strcmp(e->d_name + l - 5, ".json"))
                continue;
            char rel[512];
            snprintf(rel, sizeof(rel), "%s/%s", dirs[d], e->d_name);
            check_generation_golden(rel);
            seen++;
        }
        closedir(dp);
    }
    cr_expect_gt(seen, 20, "expected the shared generation goldens");
}

/* ---- decoding ------------------------------------------------------------------------- */

/* Lossless tokenizers: decode(encode(x)) == x for every shared input. WordPiece
 * (lowercases, drops accents) is not lossless and is left out. */
static struct vocab_case roundtrip_cases[] = {
    {"llama-spm"}, {"phi-3"},  {"gpt-2"},     {"llama-bpe"}, {"qwen2"},
    {"qwen35"},    {"falcon"}, {"starcoder"}, {"gemma-4"},   {"deepseek-coder"},
};

/* Decodes ids whole and one id at a time; checks that the stream hands out
 * only valid UTF-8 and adds up to the whole. Returns the whole (malloc'ed). */
static char *decode_both(const struct gs_tok *t, const int32_t *ids, size_t n, size_t *len)
{
    struct gs_err err = {0};
    char *whole;
    cr_assert_eq(gs_tok_decode(t, ids, n, GS_TOK_NO_CLEANUP, &whole, len, &err), GS_OK, "%s",
                 err.msg);
    struct gs_tok_decoder *d;
    cr_assert_eq(gs_tok_decoder_new(t, 0, &d, &err), GS_OK);
    char *stream = malloc(*len * 3 + 16);
    size_t sn = 0;
    for (size_t i = 0; i < n; i++) {
        const char *o;
        size_t ol;
        cr_assert_eq(gs_tok_decoder_feed(d, ids[i], &o, &ol, &err), GS_OK, "%s", err.msg);
        cr_assert(valid_utf8(o, ol), "decoder emitted invalid UTF-8 after id %d", ids[i]);
        memcpy(stream + sn, o, ol);
        sn += ol;
    }
    const char *o;
    size_t ol;
    gs_tok_decoder_flush(d, &o, &ol);
    memcpy(stream + sn, o, ol);
    sn += ol;
    if (valid_utf8(whole, *len))
        cr_expect(sn == *len && !memcmp(stream, whole, sn), "stream '%.*s' != whole '%s'", (int)sn,
                  stream, whole);
    free(stream);
    gs_tok_decoder_free(d);
    return whole;
}

ParameterizedTestParameters(tok_decode, round_trips_shared_inputs)
{
    return cr_make_param_array(struct vocab_case, roundtrip_cases, GS_ARRAY_LEN(roundtrip_cases));
}

ParameterizedTest(struct vocab_case *vc, tok_decode, round_trips_shared_inputs, .timeout = 120)
{
    char rel[128];
    snprintf(rel, sizeof(rel), "models/vocab/ggml-vocab-%s.gguf", vc->name);
    struct gs_tok *t = open_tok(rel);
    snprintf(rel, sizeof(rel), "models/vocab/ggml-vocab-%s.gguf.inp", vc->name);
    size_t inp_len;
    char *inp = gs_test_read_file(gs_test_shared_path(rel), &inp_len);
    const char **starts;
    size_t *lens;
    size_t n = split_inputs(inp, inp_len, &starts, &lens);
    for (size_t i = 0; i < n; i++) {
        int32_t *ids;
        size_t n_ids, len;
        encode(t, starts[i], lens[i], 0, &ids, &n_ids);
        char *back = decode_both(t, ids, n_ids, &len);
        cr_expect(len == lens[i] && !memcmp(back, starts[i], len), "%s: '%.*s' came back as '%s'",
                  vc->name, (int)lens[i], starts[i], back);
        gs_free(back);
        gs_free(ids);
    }
    free(starts);
    free(lens);
    free(inp);
    gs_tok_free(t);
}

Test(tok_decode, stream_holds_back_half_characters)
{
    struct gs_tok *t = open_tok("models/stories260K.gguf");
    struct gs_err err = {0};
    /* "é" is C3 A9: byte tokens <0xC3> <0xA9>; then a lone A9 can never
     * start a character, and C3 followed by 'A' is broken. */
    int32_t c3 = gs_tok_find(t, "<0xC3>", 6), a9 = gs_tok_find(t, "<0xA9>", 6);
    int32_t a = gs_tok_find(t, "A", 1);
    cr_assert(c3 >= 0 && a9 >= 0 && a >= 0);
    struct gs_tok_decoder *d;
    cr_assert_eq(gs_tok_decoder_new(t, 0, &d, &err), GS_OK);
    const char *o;
    size_t n;
    cr_assert_eq(gs_tok_decoder_feed(d, c3, &o, &n, &err), GS_OK);
    cr_expect_eq(n, 0, "half a character must be held back");
    cr_assert_eq(gs_tok_decoder_feed(d, a9, &o, &n, &err), GS_OK);
    cr_expect(n == 2 && !memcmp(o, "\xc3\xa9", 2));
    cr_assert_eq(gs_tok_decoder_feed(d, a9, &o, &n, &err), GS_OK);
    cr_expect(n == 3 && !memcmp(o, "\xef\xbf\xbd", 3), "a stray continuation byte is U+FFFD");
    cr_assert_eq(gs_tok_decoder_feed(d, c3, &o, &n, &err), GS_OK);
    cr_expect_eq(n, 0);
    cr_assert_eq(gs_tok_decoder_feed(d, a, &o, &n, &err), GS_OK);
    cr_expect(n == 4 && !memcmp(o,
                                "\xef\xbf\xbd"
                                "A",
                                4),
              "got %zu bytes", n);
    /* E2 82 starts a 3-byte character: broken by 'A', it is one U+FFFD (a
     * maximal subpart), not two. */
    int32_t e2 = gs_tok_find(t, "<0xE2>", 6), x82 = gs_tok_find(t, "<0x82>", 6);
    cr_assert(e2 >= 0 && x82 >= 0);
    cr_assert_eq(gs_tok_decoder_feed(d, e2, &o, &n, &err), GS_OK);
    cr_assert_eq(gs_tok_decoder_feed(d, x82, &o, &n, &err), GS_OK);
    cr_expect_eq(n, 0);
    cr_assert_eq(gs_tok_decoder_feed(d, a, &o, &n, &err), GS_OK);
    cr_expect(n == 4 && !memcmp(o,
                                "\xef\xbf\xbd"
                                "A",
                                4),
              "got %zu bytes", n);
    cr_assert_eq(gs_tok_decoder_feed(d, c3, &o, &n, &err), GS_OK);
    gs_tok_decoder_flush(d, &o, &n);
    cr_expect(n == 3 && !memcmp(o, "\xef\xbf\xbd", 3), "an unfinished character ends as U+FFFD");
    cr_expect_eq(gs_tok_decoder_feed(d, 100000, &o, &n, &err), GS_INVAL);
    gs_tok_decoder_free(d);
    gs_tok_free(t);
}

/* Random code points fed as single byte tokens come out unchanged; with
 * random junk bytes mixed in, every chunk is still valid UTF-8. */
Test(tok_decode, stream_of_random_bytes_is_always_valid_utf8)
{
    struct gs_tok *t = open_tok("models/stories260K.gguf");
    struct gs_err err = {0};
    int32_t byte_tok[256];
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof(name), "<0x%02X>", b);
        byte_tok[b] = gs_tok_find(t, name, 6);
        cr_assert_geq(byte_tok[b], 0);
    }
    unsigned seed = 12345;
    for (int round = 0; round < 200; round++) {
        bool junk = round % 2;
        char in[256], outb[1024];
        size_t n_in = 0, n_out = 0;
        while (n_in < 200) {
            seed = seed * 1103515245u + 12345u;
            uint32_t cp = (seed >> 8) % 0x110000;
            if (cp >= 0xD800 && cp <= 0xDFFF)
                continue;
            if (junk && (seed & 7) == 0) {
                in[n_in++] = (char)(0x80 + (seed >> 20) % 0x80);
                continue;
            }
            unsigned char *u = (unsigned char *)in + n_in;
            if (cp < 0x80) {
                u[0] = (unsigned char)cp, n_in += 1;
            } else if (cp < 0x800) {
                u[0] = (unsigned char)(0xC0 | cp >> 6), u[1] = (unsigned char)(0x80 | (cp & 63));
                n_in += 2;
            } else if (cp < 0x10000) {
                u[0] = (unsigned char)(0xE0 | cp >> 12);
                u[1] = (unsigned char)(0x80 | ((cp >> 6) & 63));
                u[2] = (unsigned char)(0x80 | (cp & 63));
                n_in += 3;
            } else {
                u[0] = (unsigned char)(0xF0 | cp >> 18);
                u[1] = (unsigned char)(0x80 | ((cp >> 12) & 63));
                u[2] = (unsigned char)(0x80 | ((cp >> 6) & 63));
                u[3] = (unsigned char)(0x80 | (cp & 63));
                n_in += 4;
            }
        }
        struct gs_tok_decoder *d;
        cr_assert_eq(gs_tok_decoder_new(t, 0, &d, &err), GS_OK);
        for (size_t i = 0; i < n_in; i++) {
            const char *o;
            size_t ol;
            cr_assert_eq(gs_tok_decoder_feed(d, byte_tok[(unsigned char)in[i]], &o, &ol, &err),
                         GS_OK);
            cr_assert(valid_utf8(o, ol), "round %d: invalid chunk after byte %zu", round, i);
            memcpy(outb + n_out, o, ol);
            n_out += ol;
        }
        const char *o;
        size_t ol;
        gs_tok_decoder_flush(d, &o, &ol);
        memcpy(outb + n_out, o, ol);
        n_out += ol;
        gs_tok_decoder_free(d);
        if (!junk)
            cr_expect(n_out == n_in && !memcmp(outb, in, n_in), "round %d changed valid text",
                      round);
        else
            cr_expect(valid_utf8(outb, n_out));
    }
    gs_tok_free(t);
}

/* Streams every id through a fresh decoder with flags; returns the text (malloc'ed). */
static char *stream_text(const struct gs_tok *t, const int32_t *ids, size_t n, unsigned flags)
{
    struct gs_err err = {0};
    struct gs_tok_decoder *d;
    cr_assert_eq(gs_tok_decoder_new(t, flags, &d, &err), GS_OK);
    char *text = calloc(1, 4096);
    size_t w = 0;
    for (int round = 0; round < 2; round++) {
        /* The second round checks that a flush starts the next stream alike. */
        w = 0;
        for (size_t i = 0; i < n; i++) {
            const char *o;
            size_t ol;
            cr_assert_eq(gs_tok_decoder_feed(d, ids[i], &o, &ol, &err), GS_OK, "%s", err.msg);
            cr_assert_lt(w + ol, 4096);
            memcpy(text + w, o, ol);
            w += ol;
        }
        const char *o;
        size_t ol;
        gs_tok_decoder_flush(d, &o, &ol);
        text[w] = '\0';
    }
    gs_tok_decoder_free(d);
    return text;
}

/* Generated ids continue their prompt: with GS_TOK_CONTINUATION the first
 * piece keeps its space, as llama.cpp's server prints it ("The little dog"
 * + " was"); without it the ids start a text, whose SPM space goes. */
Test(tok_decode, continuation_keeps_the_first_space)
{
    struct gs_tok *t = open_tok("models/stories260K.gguf");
    /* " was a little": what llama.cpp generates after "The little dog". */
    int32_t gen[3] = {gs_tok_find(t, "\xe2\x96\x81was", 6),
                      gs_tok_find(t,
                                  "\xe2\x96\x81"
                                  "a",
                                  4),
                      gs_tok_find(t, "\xe2\x96\x81little", 9)};
    size_t n_gen = 3;
    cr_assert(gen[0] >= 0 && gen[1] >= 0 && gen[2] >= 0);
    int32_t *ids;
    size_t n;
    encode(t, "The little dog", 14, GS_TOK_ADD_SPECIAL, &ids, &n);
    cr_assert_eq(ids[0], gs_tok_special(t)->bos);

    char *s = stream_text(t, gen, n_gen, GS_TOK_CONTINUATION);
    cr_expect_str_eq(s, " was a little");
    free(s);
    s = stream_text(t, gen, n_gen, 0);
    cr_expect_str_eq(s, "was a little", "a stream that starts a text loses the SPM space");
    free(s);

    struct gs_err err = {0};
    char *text;
    size_t len;
    cr_assert_eq(gs_tok_decode(t, gen, n_gen, GS_TOK_CONTINUATION, &text, &len, &err), GS_OK);
    cr_expect_str_eq(text, " was a little");
    gs_free(text);
    cr_assert_eq(gs_tok_decode(t, gen, n_gen, 0, &text, &len, &err), GS_OK);
    cr_expect_str_eq(text, "was a little");
    gs_free(text);
    /* A whole text still decodes as llama.cpp's detokenize: its SPM space goes. */
    cr_assert_eq(gs_tok_decode(t, ids + 1, n - 1, 0, &text, &len, &err), GS_OK);
    cr_expect_str_eq(text, "The little dog");
    gs_free(text);
    gs_free(ids);
    gs_tok_free(t);
}

Test(tok_decode, removes_prefix_space_and_special_tokens)
{
    struct gs_tok *t = open_tok("models/vocab/ggml-vocab-llama-spm.gguf");
    int32_t *ids;
    size_t n, len;
    char *text;
    struct gs_err err = {0};
    encode(t, "Hello world", 11, GS_TOK_ADD_SPECIAL, &ids, &n);
    cr_assert_eq(ids[0], gs_tok_special(t)->bos);
    cr_assert_eq(gs_tok_decode(t, ids + 1, n - 1, 0, &text, &len, &err), GS_OK);
    cr_expect_str_eq(text, "Hello world");
    gs_free(text);
    cr_assert_eq(gs_tok_decode(t, ids, n, GS_TOK_RENDER_SPECIAL, &text, &len, &err), GS_OK);
    cr_expect_str_eq(text, "<s> Hello world");
    gs_free(text);
    int32_t bad = -5;
    cr_expect_eq(gs_tok_decode(t, &bad, 1, 0, &text, &len, &err), GS_INVAL);
    gs_free(ids);
    gs_tok_free(t);

    /* GPT-2 asks for its spaces before punctuation to be cleaned up. */
    t = open_tok("models/vocab/ggml-vocab-gpt-2.gguf");
    encode(t, "Hi , there !", 12, 0, &ids, &n);
    cr_assert_eq(gs_tok_decode(t, ids, n, 0, &text, &len, &err), GS_OK);
    cr_expect_str_eq(text, "Hi, there!");
    gs_free(text);
    cr_assert_eq(gs_tok_decode(t, ids, n, GS_TOK_NO_CLEANUP, &text, &len, &err), GS_OK);
    cr_expect_str_eq(text, "Hi , there !");
    gs_free(text);
    gs_free(ids);
    gs_tok_free(t);
}

/* ---- token types and end of generation ---------------------------------------------- */

Test(tok_vocab, types_and_eog)
{
    struct gs_tok *t = open_tok("models/stories260K.gguf");
    const struct gs_tok_special *sp = gs_tok_special(t);
    cr_expect_eq(gs_tok_model(t), GS_TOK_MODEL_SPM);
    cr_expect_eq(gs_tok_n_vocab(t), 512);
    cr_expect(sp->bos == 1 && sp->eos == 2 && sp->unk == 0 && sp->add_bos && !sp->add_eos);
    cr_expect_eq(sp->sep, GS_TOK_NULL, "0xFFFFFFFF in the file means none");
    cr_expect_eq(gs_tok_token_type(t, 0), GS_TOK_TYPE_UNKNOWN);
    cr_expect_eq(gs_tok_token_type(t, 1), GS_TOK_TYPE_CONTROL);
    cr_expect_eq(gs_tok_token_type(t, 3), GS_TOK_TYPE_BYTE);
    cr_expect_eq(gs_tok_token_type(t, 300), GS_TOK_TYPE_NORMAL);
    cr_expect_eq(gs_tok_token_type(t, 512), GS_TOK_TYPE_UNDEFINED);
    cr_expect_eq(sp->nl, gs_tok_find(t, "<0x0A>", 6));
    cr_expect(gs_tok_is_eog(t, 2) && !gs_tok_is_eog(t, 1) && !gs_tok_is_eog(t, -1));
    size_t len;
    cr_expect_eq(gs_tok_piece(t, 2, 0, &len)[0], '\0', "control tokens are hidden");
    cr_expect_eq(len, 0);
    gs_tok_piece(t, 2, GS_TOK_RENDER_SPECIAL, &len);
    cr_expect_eq(len, 4, "</s> rendered");
    cr_expect_null(gs_tok_piece(t, 512, 0, &len));
    gs_tok_free(t);

    /* Chat vocabularies: end-of-turn tokens are found by their text. */
    static const struct {
        const char *file, *eog;
    } chats[] = {
        {"models/vocab/ggml-vocab-qwen2.gguf", "<|im_end|>"},
        {"models/vocab/ggml-vocab-llama-bpe.gguf", "<|eot_id|>"},
        {"models/vocab/ggml-vocab-phi-3.gguf", "<|end|>"},
        {"models/vocab/ggml-vocab-gemma-4.gguf", "<turn|>"},
    };
    for (size_t i = 0; i < GS_ARRAY_LEN(chats); i++) {
        t = open_tok(chats[i].file);
        int32_t id = gs_tok_find(t, chats[i].eog, strlen(chats[i].eog));
        cr_assert_geq(id, 0, "%s lacks %s", chats[i].file, chats[i].eog);
        cr_expect(gs_tok_is_eog(t, id), "%s: %s is EOG", chats[i].file, chats[i].eog);
        cr_expect(gs_tok_is_eog(t, gs_tok_special(t)->eos), "%s: eos is EOG", chats[i].file);
        cr_expect_eq(gs_tok_token_type(t, id), GS_TOK_TYPE_CONTROL, "%s", chats[i].eog);
        size_t n;
        const int32_t *eog = gs_tok_eog_ids(t, &n);
        for (size_t k = 1; k < n; k++)
            cr_expect_lt(eog[k - 1], eog[k], "EOG ids ascending");
        gs_tok_free(t);
    }
}

/* ---- hostile metadata ------------------------------------------------------------------- */

/* A small valid SPM tokenizer; each hostile row then adds or replaces keys. */
static const char *const h_tokens[] = {"<unk>",
                                       "<s>",
                                       "</s>",
                                       "\xe2\x96\x81",
                                       "a",
                                       "b",
                                       "ab",
                                       "\xe2\x96\x81"
                                       "a"};
static const float h_scores[] = {0, 0, 0, -1, -2, -3, -1.5f, -0.5f};
static const int32_t h_types[] = {2, 3, 3, 1, 1, 1, 1, 1};

enum h_row {
    H_VALID,
    H_NO_TOKENS,
    H_NO_MODEL,
    H_MODEL_UNKNOWN,
    H_SCORES_SHORT,
    H_TYPES_LONG,
    H_BOS_RANGE,
    H_EOS_RANGE,
    H_UNK_RANGE,
    H_DUP_TOKEN,
    H_MERGE_UNKNOWN,
    H_MERGE_NO_SPACE,
    H_MERGES_MISSING,
    H_PRE_UNKNOWN,
    H_BOS_NONE_BUT_ADDED,
    H_ROWS
};

static const struct {
    enum gs_status status;
    const char *key; /* the message must name it */
} h_expect[H_ROWS] = {
    [H_VALID] = {GS_OK, ""},
    [H_NO_TOKENS] = {GS_FORMAT, "tokenizer.ggml.tokens"},
    [H_NO_MODEL] = {GS_FORMAT, "tokenizer.ggml.model"},
    [H_MODEL_UNKNOWN] = {GS_UNSUPPORTED, "tokenizer.ggml.model"},
    [H_SCORES_SHORT] = {GS_FORMAT, "tokenizer.ggml.scores"},
    [H_TYPES_LONG] = {GS_FORMAT, "tokenizer.ggml.token_type"},
    [H_BOS_RANGE] = {GS_FORMAT, "tokenizer.ggml.bos_token_id"},
    [H_EOS_RANGE] = {GS_FORMAT, "tokenizer.ggml.eos_token_id"},
    [H_UNK_RANGE] = {GS_FORMAT, "tokenizer.ggml.unknown_token_id"},
    [H_DUP_TOKEN] = {GS_FORMAT, "tokenizer.ggml.tokens"},
    [H_MERGE_UNKNOWN] = {GS_FORMAT, "tokenizer.ggml.merges[1]"},
    [H_MERGE_NO_SPACE] = {GS_FORMAT, "tokenizer.ggml.merges[0]"},
    [H_MERGES_MISSING] = {GS_FORMAT, "tokenizer.ggml.merges"},
    [H_PRE_UNKNOWN] = {GS_UNSUPPORTED, "tokenizer.ggml.pre"},
    [H_BOS_NONE_BUT_ADDED] = {GS_FORMAT, "tokenizer.ggml.bos_token_id"},
};

static void *hostile_file(enum h_row row, size_t *len)
{
    struct gs_gguf_writer *w;
    struct gs_err err = {0};
    cr_assert_eq(gs_gguf_writer_new(NULL, &w, &err), GS_OK);
    size_t n = GS_ARRAY_LEN(h_tokens);
    bool bpe = row == H_MERGE_UNKNOWN || row == H_MERGE_NO_SPACE || row == H_MERGES_MISSING ||
               row == H_PRE_UNKNOWN || row == H_BOS_NONE_BUT_ADDED;
    if (row != H_NO_MODEL)
        cr_assert_eq(gs_gguf_w_str(w, "tokenizer.ggml.model",
                                   row == H_MODEL_UNKNOWN ? "sentencepiece-xl"
                                   : bpe                  ? "gpt2"
                                                          : "llama"),
                     GS_OK);
    if (row == H_DUP_TOKEN) {
        const char *dup[8];
        memcpy(dup, h_tokens, sizeof(dup));
        dup[5] = "a";
        cr_assert_eq(gs_gguf_w_arr_str(w, "tokenizer.ggml.tokens", dup, n), GS_OK);
    } else if (row != H_NO_TOKENS) {
        cr_assert_eq(gs_gguf_w_arr_str(w, "tokenizer.ggml.tokens", h_tokens, n), GS_OK);
    }
    cr_assert_eq(gs_gguf_w_arr(w, "tokenizer.ggml.scores", GS_GGUF_F32, h_scores,
                               row == H_SCORES_SHORT ? n - 2 : n),
                 GS_OK);
    if (row == H_TYPES_LONG) {
        int32_t more[9] = {2, 3, 3, 1, 1, 1, 1, 1, 1};
        cr_assert_eq(gs_gguf_w_arr(w, "tokenizer.ggml.token_type", GS_GGUF_I32, more, 9), GS_OK);
    } else {
        cr_assert_eq(gs_gguf_w_arr(w, "tokenizer.ggml.token_type", GS_GGUF_I32, h_types, n), GS_OK);
    }
    if (row == H_BOS_RANGE)
        cr_assert_eq(gs_gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 8), GS_OK);
    if (row == H_EOS_RANGE)
        cr_assert_eq(gs_gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 1000000), GS_OK);
    if (row == H_UNK_RANGE)
        cr_assert_eq(gs_gguf_w_i32(w, "tokenizer.ggml.unknown_token_id", -7), GS_OK);
    if (bpe && row != H_MERGES_MISSING) {
        const char *merges[2] = {"a b", row == H_MERGE_UNKNOWN ? "ab zz" : "\xe2\x96\x81 a"};
        if (row == H_MERGE_NO_SPACE)
            merges[0] = "ab";
        cr_assert_eq(gs_gguf_w_arr_str(w, "tokenizer.ggml.merges", merges, 2), GS_OK);
    }
    if (row == H_PRE_UNKNOWN)
        cr_assert_eq(gs_gguf_w_str(w, "tokenizer.ggml.pre", "no-such-pretokenizer"), GS_OK);
    if (bpe && row != H_BOS_NONE_BUT_ADDED)
        cr_assert_eq(gs_gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 1), GS_OK);
    if (row == H_BOS_NONE_BUT_ADDED) {
        cr_assert_eq(gs_gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 0xFFFFFFFFu), GS_OK);
        cr_assert_eq(gs_gguf_w_bool(w, "tokenizer.ggml.add_bos_token", true), GS_OK);
    }
    void *buf;
    cr_assert_eq(gs_gguf_writer_to_mem(w, &buf, len, &err), GS_OK);
    gs_gguf_writer_free(w);
    return buf;
}

ParameterizedTestParameters(tok_metadata, rejects_hostile_metadata)
{
    static int rows[H_ROWS];
    for (int i = 0; i < H_ROWS; i++)
        rows[i] = i;
    return cr_make_param_array(int, rows, H_ROWS);
}

ParameterizedTest(int *row, tok_metadata, rejects_hostile_metadata)
{
    size_t len;
    void *buf = hostile_file((enum h_row) * row, &len);
    struct gs_gguf *g;
    struct gs_err err = {0};
    enum gs_status st = gs_gguf_open_mem(buf, len, &g, &err);
    /* The file is well-formed GGUF: the tokenizer, not the reader, must
     * find the problem. */
    cr_assert_eq(st, GS_OK, "row %d: the GGUF reader refused it: %s", *row, err.msg);
    {
        struct gs_tok *t = NULL;
        st = gs_tok_new(g, &t, &err);
        if (st == GS_OK) {
            int32_t *ids;
            size_t n;
            encode(t, "a b ab", 6, GS_TOK_ADD_SPECIAL, &ids, &n);
            cr_expect_gt(n, 0);
            gs_free(ids);
        }
        cr_expect((st == GS_OK) == (t != NULL));
        gs_tok_free(t);
        gs_gguf_close(g);
    }
    cr_expect_eq(st, h_expect[*row].status, "row %d: status %s, message '%s'", *row,
                 gs_status_str(st), err.msg);
    cr_expect(strstr(err.msg, h_expect[*row].key), "row %d: message '%s' should name '%s'", *row,
              err.msg, h_expect[*row].key);
    gs_free(buf);
}

/* The small SPM vocabulary merges by score: "▁a" (-0.5) beats "ab" (-1.5). */
Test(tok_metadata, small_spm_merges_by_score)
{
    size_t len;
    void *buf = hostile_file(H_VALID, &len);
    struct gs_gguf *g;
    struct gs_tok *t;
    struct gs_err err = {0};
    cr_assert_eq(gs_gguf_open_mem(buf, len, &g, &err), GS_OK, "%s", err.msg);
    cr_assert_eq(gs_tok_new(g, &t, &err), GS_OK, "%s", err.msg);
    gs_gguf_close(g);
    int32_t *ids;
    size_t n;
    encode(t, "ab", 2, 0, &ids, &n);
    cr_expect(n == 2 && ids[0] == 7 && ids[1] == 5, "'▁ab' -> '▁a' 'b'");
    gs_free(ids);
    gs_tok_free(t);
    gs_free(buf);
}

/* ---- allocation failure ----------------------------------------------------------------- */

/* Fails allocation N for N = 0, 1, ... until building and encoding succeed:
 * every failure must come back as GS_NOMEM, never a crash or a leak. */
static void oom_loop(const char *rel)
{
    struct gs_gguf *g;
    struct gs_err err = {0};
    cr_assert_eq(gs_gguf_open(gs_test_shared_path(rel), &g, &err), GS_OK);
    static const char text[] = "Hello world, it's 2024! <s> Ünïcödé";
    long n;
    for (n = 0; n < 100000; n++) {
        struct gs_tok *t = NULL;
        int32_t *ids = NULL;
        size_t n_ids;
        gs_alloc_fail_after(n);
        enum gs_status st = gs_tok_new(g, &t, &err);
        if (st == GS_OK)
            st = gs_tok_encode(t, text, sizeof(text) - 1, GS_TOK_ADD_SPECIAL, &ids, &n_ids, &err);
        gs_alloc_fail_after(-1);
        gs_free(ids);
        gs_tok_free(t);
        if (st == GS_OK)
            break;
        cr_assert_eq(st, GS_NOMEM, "%s: allocation %ld failed with %s (%s)", rel, n,
                     gs_status_str(st), err.msg);
    }
    cr_expect_gt(n, 3, "%s: the loop must have failed some allocations", rel);
    gs_gguf_close(g);
}

Test(tok_oom, every_allocation_failure_is_nomem, .timeout = 300)
{
    oom_loop("models/stories260K.gguf");
    oom_loop("models/vocab/ggml-vocab-gpt-2.gguf");
}

/* ---- the command-line tool ---------------------------------------------------------------- */

Test(tok_cli, prints_ids_and_pieces)
{
    char exe[4096], cmd[8192], *out;
    /* The path helpers share one static buffer: copy each result. */
    snprintf(exe, sizeof(exe), "%s", gs_test_build_path("server/graphserve"));
    snprintf(cmd, sizeof(cmd), "%s tokenize -m %s --no-bos 'Hello world'", exe,
             gs_test_shared_path("models/stories260K.gguf"));
    cr_assert_eq(gs_test_run(cmd, 0, &out), 0, "%s", cmd);
    cr_expect_str_eq(out, "   346 -> ' He'\n   306 -> 'll'\n   414 -> 'o'\n   263 -> ' w'\n"
                          "   304 -> 'or'\n   341 -> 'ld'\n");
    free(out);
    snprintf(cmd, sizeof(cmd), "%s tokenize -m %s --json --parse-special '<s>Hi</s>'", exe,
             gs_test_shared_path("models/vocab/ggml-vocab-llama-spm.gguf"));
    cr_assert_eq(gs_test_run(cmd, 0, &out), 0, "%s", cmd);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    cr_assert(j, "not JSON: %s", out);
    json_t *ids = json_object_get(j, "ids");
    cr_expect_eq(json_array_size(ids), 4);
    cr_expect_eq(json_integer_value(json_array_get(ids, 0)), 1);
    cr_expect_eq(json_integer_value(json_array_get(ids, 1)), 1);
    cr_expect_eq(json_integer_value(json_array_get(ids, 3)), 2);
    cr_expect_str_eq(json_string_value(json_array_get(json_object_get(j, "pieces"), 3)), "</s>");
    json_decref(j);
    free(out);
    snprintf(cmd, sizeof(cmd), "%s tokenize -m /nonexistent.gguf hi", exe);
    cr_expect_eq(gs_test_run(cmd, 1, &out), 1);
    cr_expect(strstr(out, "/nonexistent.gguf"), "error names the file: %s", out);
    free(out);
}

/* ---- threads ----------------------------------------------------------------------------- */

struct thread_job {
    const struct gs_tok *t;
    const char *text;
    size_t len;
    int32_t *ids;
    size_t n;
    enum gs_status st;
};

static void *encode_job(void *arg)
{
    struct thread_job *j = arg;
    for (int rep = 0; rep < 20 && j->st == GS_OK; rep++) {
        gs_free(j->ids);
        j->st = gs_tok_encode(j->t, j->text, j->len, GS_TOK_ADD_SPECIAL | GS_TOK_PARSE_SPECIAL,
                              &j->ids, &j->n, NULL);
    }
    return NULL;
}

/* One tokenizer, four threads encoding at once: same ids as alone. */
Test(tok_threads, concurrent_encodes_agree, .timeout = 120)
{
    struct gs_tok *t = open_tok("models/vocab/ggml-vocab-qwen2.gguf");
    static const char *const texts[] = {
        "<|im_start|>user\nHello, world! It's 2024.<|im_end|>\n",
        "Once upon a time, \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e and \xf0\x9f\x99\x82 emoji",
        "   leading spaces and trailing   ",
        "def f(x):\n    return x * 2  # 3.14159\n",
    };
    struct thread_job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (struct thread_job){t, texts[i], strlen(texts[i]), NULL, 0, GS_OK};
        cr_assert_eq(pthread_create(&th[i], NULL, encode_job, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(jobs[i].st, GS_OK);
        int32_t *ids;
        size_t n;
        encode(t, texts[i], strlen(texts[i]), GS_TOK_ADD_SPECIAL | GS_TOK_PARSE_SPECIAL, &ids, &n);
        cr_expect(n == jobs[i].n && !memcmp(ids, jobs[i].ids, n * sizeof(*ids)), "text %d", i);
        gs_free(ids);
        gs_free(jobs[i].ids);
    }
    gs_tok_free(t);
}

/* ---- speed ------------------------------------------------------------------------------- */

/* CPU time of the calling thread, so that a loaded machine does not make
 * the bounds flaky. */
static double thread_cpu_ms(void)
{
    struct timespec ts;
    cr_assert_eq(clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts), 0);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static double encode_ms(const struct gs_tok *t, const char *s, size_t n, size_t *n_ids)
{
    int32_t *ids;
    double t0 = thread_cpu_ms();
    encode(t, s, n, 0, &ids, n_ids);
    double ms = thread_cpu_ms() - t0;
    gs_free(ids);
    return ms;
}

/*
 * Tokenizing must take time linear in the text: a long prompt is tokenized on
 * the daemon's thread pool and must not take quadratic time (the text
 * between spaces, and a text without any, is where merge loops go wrong).
 * Asserted as a ratio in one run, 1 MiB against 128 KiB: linear is 8,
 * quadratic 64; the bound of 24 leaves room for noise on a loaded machine.
 * The figures themselves are printed; speed is not asserted.
 */
static void expect_linear(const struct gs_tok *t, const char *name, const char *s, size_t mb)
{
    size_t n_small, n_big;
    double small = encode_ms(t, s, mb / 8, &n_small), big = encode_ms(t, s, mb, &n_big);
    double ratio = big / GS_MAX(small, 0.5);
    cr_log_info("%s: 1 MiB in %.1f ms (%zu tokens), 128 KiB in %.1f ms: ratio %.1f", name, big,
                n_big, small, ratio);
    cr_expect_lt(ratio, 24.0, "%s: 1 MiB took %.1f ms, 128 KiB %.1f ms: not linear", name, big,
                 small);
}

Test(tok_speed, time_is_linear_in_the_text, .timeout = 300)
{
    const size_t mb = 1u << 20;
    char *text = malloc(mb + 1), *flat = malloc(mb + 1);
    static const char story[] = "Once upon a time, there was a little girl named Lily. She liked "
                                "to play outside in the sun with her dog, 3 cats & 12 birds!\n";
    for (size_t i = 0; i < mb; i++) {
        text[i] = story[i % (sizeof(story) - 1)];
        flat[i] = (char)('a' + (i * 7 + i / 13) % 26); /* no spaces at all */
    }
    struct gs_tok *spm = open_tok("models/stories260K.gguf");
    struct gs_tok *bpe = open_tok("models/vocab/ggml-vocab-gpt-2.gguf");
    expect_linear(spm, "stories260K prose", text, mb);
    expect_linear(spm, "stories260K without spaces", flat, mb);
    expect_linear(bpe, "gpt-2 prose", text, mb);
    expect_linear(bpe, "gpt-2 one word", flat, mb);
    gs_tok_free(spm);
    gs_tok_free(bpe);
    free(text);
    free(flat);
}
