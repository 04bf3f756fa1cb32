/*
 * tools/tokenize.c - `graphserve tokenize -m FILE [--no-bos]
 * [--parse-special] [--json] (--stdin | [--] TEXT)`: the ids a model's tokenizer
 * gives for a text, with their pieces, one `id -> 'piece'` per line as
 * llama-tokenize prints them, or one JSON object.
 */
#include "engine/tok.h"
#include "tools/internal.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

struct opts {
    const char *model;
    bool bos, parse_special, json, from_stdin;
};

#define O(f) offsetof(struct opts, f)
/* clang-format off */
static const struct gs_cfg_opt opt_rows[] = {
    {"model", 'm', GS_CFG_STR, O(model), NULL, NULL, 0, 0, NULL,
     GS_CFG_F_PATH | GS_CFG_F_REQUIRED, NULL, "GGUF file whose tokenizer to use."},
    {"bos", 0, GS_CFG_BOOL, O(bos), NULL, "true", 0, 0, NULL, 0, NULL,
     "Add BOS/EOS as the model asks; --no-bos: add_special = false."},
    {"parse-special", 0, GS_CFG_BOOL, O(parse_special), NULL, NULL, 0, 0, NULL, 0, NULL,
     "Match control-token texts such as <s> in TEXT."},
    {"json", 0, GS_CFG_BOOL, O(json), NULL, NULL, 0, 0, NULL, 0, NULL,
     "Print {\"ids\": [...], \"pieces\": [...]}."},
    {"stdin", 0, GS_CFG_BOOL, O(from_stdin), NULL, NULL, 0, 0, NULL, 0, NULL,
     "Read the text from standard input instead of TEXT."},
};
/* clang-format on */
#undef O

const struct gs_cli_spec gs_tokenize_spec = {
    .cmd = "tokenize", .synopsis = "-m FILE [options] (--stdin | [--] TEXT)",
    .opts = opt_rows, .n_opts = GS_ARRAY_LEN(opt_rows), .max_args = 1,
};

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
    struct opts o = {0};
    struct gs_cli_args args;
    int prc = gs_cli_begin(&gs_tokenize_spec, &o, argc, argv, &args);
    if (prc >= 0)
        return prc;
    const char *model = o.model, *text = args.n_args ? args.args[0] : NULL;
    bool json = o.json, from_stdin = o.from_stdin;
    unsigned flags =
        (o.bos ? GS_TOK_ADD_SPECIAL : 0u) | (o.parse_special ? GS_TOK_PARSE_SPECIAL : 0u);
    if (!text == !from_stdin)
        return gs_cli_fail(gs_tokenize_spec.cmd, "give the text as one argument or --stdin") + 1;

    struct gs_err err = {0};
    struct gs_tok *tok;
    if (gs_tok_open(model, &tok, &err) != GS_OK)
        return gs_cli_fail("tokenize", "%s", err.msg);
    char *owned = NULL;
    size_t len = text ? strlen(text) : 0;
    if (from_stdin) {
        owned = gs_tool_read_all(stdin, &len);
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
