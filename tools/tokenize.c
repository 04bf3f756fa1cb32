/*
 * tools/tokenize.c - `graphserve tokenize -m FILE [--no-bos]
 * [--parse-special] [--json] [--stdin | TEXT]`: the ids a model's tokenizer
 * gives for a text, with their pieces, one `id -> 'piece'` per line as
 * llama-tokenize prints them, or one JSON object.
 */
#include "engine/tok.h"
#include "tools/internal.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

static const char usage[] =
    "-m FILE [--no-bos] [--parse-special] [--json] (--stdin | TEXT)\n"
    "  -m FILE          GGUF file whose tokenizer to use\n"
    "  --no-bos         do not add BOS/EOS (add_special = false)\n"
    "  --parse-special  match control-token texts such as <s> in TEXT\n"
    "  --json           print {\"ids\": [...], \"pieces\": [...]}\n"
    "  --stdin          read the text from standard input instead of TEXT\n";

static char *read_stdin(size_t *len)
{
    size_t cap = 4096, n = 0;
    char *buf = gs_malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, stdin);
        if (n < cap)
            break;
        char *grown = cap <= SIZE_MAX / 2 ? gs_realloc(buf, cap * 2) : NULL;
        if (!grown) {
            gs_free(buf);
            return NULL;
        }
        buf = grown;
        cap *= 2;
    }
    *len = n;
    return buf;
}

/* A piece as a JSON string: bytes that are not UTF-8 (half a character)
 * become U+FFFD, as JSON text must be valid UTF-8. */
static json_t *piece_json(const char *p, size_t n)
{
    char *s = gs_malloc(n * 3 + 1);
    if (!s)
        return NULL;
    size_t w = 0;
    for (size_t i = 0; i < n;) {
        size_t step = 1;
        unsigned char c = (unsigned char)p[i];
        size_t need = c < 0x80                 ? 1
                      : c >= 0xC2 && c <= 0xDF ? 2
                      : c >= 0xE0 && c <= 0xEF ? 3
                      : c >= 0xF0 && c <= 0xF4 ? 4
                                               : 0;
        if (need && i + need <= n) {
            size_t k = 1;
            while (k < need && ((unsigned char)p[i + k] & 0xC0) == 0x80)
                k++;
            if (k == need) {
                memcpy(s + w, p + i, need);
                w += need;
                i += need;
                continue;
            }
        }
        memcpy(s + w, "\xef\xbf\xbd", 3);
        w += 3;
        i += step;
    }
    json_t *j = json_stringn(s, w);
    gs_free(s);
    return j;
}

static int print_json(const struct gs_tok *tok, const int32_t *ids, size_t n)
{
    json_t *root = json_object(), *jids = json_array(), *jp = json_array();
    for (size_t i = 0; i < n; i++) {
        size_t pl;
        const char *p = gs_tok_piece(tok, ids[i], GS_TOK_RENDER_SPECIAL, &pl);
        json_array_append_new(jids, json_integer(ids[i]));
        json_array_append_new(jp, piece_json(p, pl));
    }
    json_object_set_new(root, "ids", jids);
    json_object_set_new(root, "pieces", jp);
    int rc = json_dumpf(root, stdout, JSON_COMPACT) == 0 ? 0 : 1;
    fputc('\n', stdout);
    json_decref(root);
    return rc;
}

int gs_cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL, *text = NULL;
    bool json = false, from_stdin = false;
    unsigned flags = GS_TOK_ADD_SPECIAL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (++i >= argc)
                return gs_cli_usage("tokenize", usage);
            model = argv[i];
        } else if (!strcmp(a, "--no-bos")) {
            flags &= ~(unsigned)GS_TOK_ADD_SPECIAL;
        } else if (!strcmp(a, "--parse-special")) {
            flags |= GS_TOK_PARSE_SPECIAL;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--stdin")) {
            from_stdin = true;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: graphserve tokenize %s", usage);
            return 0;
        } else if (a[0] == '-' && a[1] != '\0' && !text) {
            fprintf(stderr, "graphserve tokenize: unknown option '%s'\n", a);
            return gs_cli_usage("tokenize", usage);
        } else if (!text) {
            text = a;
        } else {
            return gs_cli_usage("tokenize", usage);
        }
    }
    if (!model || (!text && !from_stdin) || (text && from_stdin))
        return gs_cli_usage("tokenize", usage);

    struct gs_err err = {0};
    struct gs_tok *tok;
    if (gs_tok_open(model, &tok, &err) != GS_OK)
        return gs_cli_fail("tokenize", "%s", err.msg);
    char *owned = NULL;
    size_t len = text ? strlen(text) : 0;
    if (from_stdin) {
        owned = read_stdin(&len);
        if (!owned) {
            gs_tok_free(tok);
            return gs_cli_fail("tokenize", "reading standard input: out of memory");
        }
        text = owned;
    }
    int32_t *ids;
    size_t n;
    int rc = 0;
    if (gs_tok_encode(tok, text, len, flags, &ids, &n, &err) != GS_OK) {
        rc = gs_cli_fail("tokenize", "%s", err.msg);
    } else if (json) {
        rc = print_json(tok, ids, n);
    } else {
        for (size_t i = 0; i < n; i++) {
            size_t pl;
            const char *p = gs_tok_piece(tok, ids[i], GS_TOK_RENDER_SPECIAL, &pl);
            printf("%6d -> '%.*s'\n", ids[i], (int)pl, p);
        }
    }
    gs_free(ids);
    gs_free(owned);
    gs_tok_free(tok);
    return rc;
}
