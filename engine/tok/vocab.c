/*
 * engine/tok/vocab.c - building a tokenizer from tokenizer.ggml.* metadata:
 * the vocabulary and its hash, merges, special tokens and their attributes,
 * the end-of-generation set, byte tables and the piece cache. Which tokens
 * count as special or EOG follows llama.cpp's loader (facts as of 2026-11),
 * so that the same file tokenizes the same way in both.
 */
#define _GNU_SOURCE /* memmem, qsort_r */
#include "engine/tok/internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- metadata access ------------------------------------------------------- */

static bool is_int_type(enum gs_gguf_vtype t)
{
    return t == GS_GGUF_U8 || t == GS_GGUF_I8 || t == GS_GGUF_U16 || t == GS_GGUF_I16 ||
           t == GS_GGUF_U32 || t == GS_GGUF_I32 || t == GS_GGUF_U64 || t == GS_GGUF_I64;
}

static bool is_signed_type(enum gs_gguf_vtype t)
{
    return t == GS_GGUF_I8 || t == GS_GGUF_I16 || t == GS_GGUF_I32 || t == GS_GGUF_I64;
}

/* An optional bool; *v is left alone when the key is absent. */
static enum gs_status opt_bool(const struct gs_gguf *g, const char *key, bool *v,
                               struct gs_err *err)
{
    const struct gs_gguf_kv *kv = gs_gguf_find_kv(g, key);
    if (!kv)
        return GS_OK;
    if (kv->type == GS_GGUF_BOOL || (is_int_type(kv->type) && !is_signed_type(kv->type))) {
        *v = kv->v.u64 != 0;
        return GS_OK;
    }
    if (is_signed_type(kv->type)) {
        *v = kv->v.i64 != 0;
        return GS_OK;
    }
    return gs_err_set(err, GS_FORMAT, "%s: expected a bool, found %s", key,
                      gs_gguf_vtype_name(kv->type));
}

/*
 * An optional token id. All-ones (-1 or 0xFFFFFFFF, which converters write
 * for "none") keeps the default, as llama.cpp does; any other value must be a
 * valid id.
 */
static enum gs_status opt_id(const struct gs_gguf *g, const char *key, uint32_t n_vocab,
                             int32_t *id, struct gs_err *err)
{
    const struct gs_gguf_kv *kv = gs_gguf_find_kv(g, key);
    if (!kv)
        return GS_OK;
    if (!is_int_type(kv->type))
        return gs_err_set(err, GS_FORMAT, "%s: expected an integer, found %s", key,
                          gs_gguf_vtype_name(kv->type));
    int64_t v;
    if (is_signed_type(kv->type)) {
        v = kv->v.i64;
    } else {
        if (kv->v.u64 == UINT32_MAX || kv->v.u64 == UINT64_MAX)
            return GS_OK;
        v = kv->v.u64 > INT64_MAX ? INT64_MAX : (int64_t)kv->v.u64;
    }
    if (v == -1)
        return GS_OK;
    if (v < 0 || v >= (int64_t)n_vocab)
        return gs_err_set(err, GS_FORMAT, "%s: token id %lld out of range (vocabulary of %u)", key,
                          (long long)v, n_vocab);
    *id = (int32_t)v;
    return GS_OK;
}

static enum gs_status get_arr(const struct gs_gguf *g, const char *key, bool required,
                              const struct gs_gguf_kv **out, struct gs_err *err)
{
    const struct gs_gguf_kv *kv = gs_gguf_find_kv(g, key);
    *out = NULL;
    if (!kv) {
        if (required)
            return gs_err_set(err, GS_FORMAT, "%s: missing", key);
        return GS_OK;
    }
    if (kv->type != GS_GGUF_ARRAY)
        return gs_err_set(err, GS_FORMAT, "%s: expected an array, found %s", key,
                          gs_gguf_vtype_name(kv->type));
    *out = kv;
    return GS_OK;
}

/* ---- building ---------------------------------------------------------------- */

static enum gs_status alloc_hash(struct gs_tok *t)
{
    uint64_t slots = 16;
    while (slots < (uint64_t)t->n_vocab * 2)
        slots *= 2;
    t->hash = gs_calloc(slots, sizeof(*t->hash));
    if (!t->hash)
        return GS_NOMEM;
    t->hash_mask = slots - 1;
    return GS_OK;
}

/* Copies the token texts into one pool and indexes them. */
static enum gs_status load_tokens(struct gs_tok *t, const struct gs_gguf_kv *kv, struct gs_err *err)
{
    static const char key[] = "tokenizer.ggml.tokens";
    if (kv->v.arr.type != GS_GGUF_STRING)
        return gs_err_set(err, GS_FORMAT, "%s: expected an array of strings, found %s", key,
                          gs_gguf_vtype_name(kv->v.arr.type));
    if (kv->v.arr.n == 0)
        return gs_err_set(err, GS_FORMAT, "%s: empty vocabulary", key);
    if (kv->v.arr.n > INT32_MAX / 2)
        return gs_err_set(err, GS_FORMAT, "%s: %llu tokens is too many", key,
                          (unsigned long long)kv->v.arr.n);
    t->n_vocab = (uint32_t)kv->v.arr.n;

    /* Empty texts are replaced by "[EMPTY_<id>]" (llama.cpp) so that every
     * token has a text that can be looked up. */
    uint64_t pool_bytes = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        uint64_t n = kv->v.arr.strs[i].len ? kv->v.arr.strs[i].len : 24;
        if (n > UINT32_MAX / 2 || gs_add_overflow(pool_bytes, n, &pool_bytes) ||
            pool_bytes > UINT32_MAX / 2)
            return gs_err_set(err, GS_FORMAT, "%s: texts too long (token %u)", key, i);
    }
    t->vocab = gs_calloc(t->n_vocab, sizeof(*t->vocab));
    t->pool = gs_malloc(pool_bytes + 1);
    if (!t->vocab || !t->pool || alloc_hash(t) != GS_OK)
        return gs_err_set(err, GS_NOMEM, "%s: out of memory", key);

    uint32_t off = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        const struct gs_gguf_str *s = &kv->v.arr.strs[i];
        struct gs_tok__entry *e = &t->vocab[i];
        e->off = off;
        if (s->len) {
            memcpy(t->pool + off, s->data, s->len);
            e->len = (uint32_t)s->len;
        } else {
            e->len = (uint32_t)snprintf(t->pool + off, 24, "[EMPTY_%u]", i);
        }
        off += e->len;
        e->type = GS_TOK_TYPE_NORMAL;
        e->attr = GS_TOK__ATTR_NORMAL;
        if (e->len > t->max_token_len)
            t->max_token_len = e->len;

        const char *text = t->pool + e->off;
        uint64_t h = gs_tok__hash_bytes(text, e->len) & t->hash_mask;
        for (;;) {
            uint32_t slot = t->hash[h];
            if (slot == 0) {
                t->hash[h] = i + 1;
                break;
            }
            const struct gs_tok__entry *o = &t->vocab[slot - 1];
            if (o->len == e->len && memcmp(t->pool + o->off, text, e->len) == 0)
                return gs_err_set(err, GS_FORMAT, "%s: token %u repeats the text of token %u", key,
                                  i, slot - 1);
            h = (h + 1) & t->hash_mask;
        }
    }
    t->pool[off] = '\0';
    return GS_OK;
}

static enum gs_status load_scores(struct gs_tok *t, const struct gs_gguf *g, struct gs_err *err)
{
    static const char key[] = "tokenizer.ggml.scores";
    const struct gs_gguf_kv *kv;
    enum gs_status st = get_arr(g, key, false, &kv, err);
    if (st != GS_OK || !kv)
        return st;
    if (kv->v.arr.type != GS_GGUF_F32 && kv->v.arr.type != GS_GGUF_I32)
        return gs_err_set(err, GS_FORMAT, "%s: expected an array of f32, found %s", key,
                          gs_gguf_vtype_name(kv->v.arr.type));
    if (kv->v.arr.n != t->n_vocab)
        return gs_err_set(err, GS_FORMAT, "%s: %llu entries for %u tokens", key,
                          (unsigned long long)kv->v.arr.n, t->n_vocab);
    for (uint32_t i = 0; i < t->n_vocab; i++)
        t->vocab[i].score =
            kv->v.arr.type == GS_GGUF_F32 ? gs_gguf_arr_f32(kv, i) : (float)gs_gguf_arr_i32(kv, i);
    return GS_OK;
}

static uint8_t attr_of_type(int32_t type)
{
    switch (type) {
    case GS_TOK_TYPE_NORMAL:
        return GS_TOK__ATTR_NORMAL;
    case GS_TOK_TYPE_UNKNOWN:
        return GS_TOK__ATTR_UNKNOWN;
    case GS_TOK_TYPE_CONTROL:
        return GS_TOK__ATTR_CONTROL;
    case GS_TOK_TYPE_USER_DEFINED:
        return GS_TOK__ATTR_USER;
    case GS_TOK_TYPE_UNUSED:
        return GS_TOK__ATTR_UNUSED;
    case GS_TOK_TYPE_BYTE:
        return GS_TOK__ATTR_BYTE;
    default:
        return 0;
    }
}

static enum gs_status load_types(struct gs_tok *t, const struct gs_gguf *g, struct gs_err *err)
{
    static const char key[] = "tokenizer.ggml.token_type";
    const struct gs_gguf_kv *kv;
    enum gs_status st = get_arr(g, key, false, &kv, err);
    if (st != GS_OK || !kv)
        return st;
    if (kv->v.arr.type != GS_GGUF_I32 && kv->v.arr.type != GS_GGUF_U32)
        return gs_err_set(err, GS_FORMAT, "%s: expected an array of i32, found %s", key,
                          gs_gguf_vtype_name(kv->v.arr.type));
    if (kv->v.arr.n != t->n_vocab)
        return gs_err_set(err, GS_FORMAT, "%s: %llu entries for %u tokens", key,
                          (unsigned long long)kv->v.arr.n, t->n_vocab);
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        int32_t ty = gs_gguf_arr_i32(kv, i);
        /* Unknown values read as undefined, like llama.cpp: such a token is
         * never printed and never matched as special. */
        t->vocab[i].type = (ty >= 0 && ty <= GS_TOK_TYPE_BYTE) ? (uint8_t)ty : 0;
        t->vocab[i].attr = attr_of_type(ty);
    }
    return GS_OK;
}

/* Parses "left right" (the split is the first space after the first byte,
 * so that a merge may start with a space) into ids. */
static enum gs_status load_merges(struct gs_tok *t, const struct gs_gguf *g, struct gs_err *err)
{
    static const char key[] = "tokenizer.ggml.merges";
    const struct gs_gguf_kv *kv;
    enum gs_status st = get_arr(g, key, true, &kv, err);
    if (st != GS_OK)
        return st;
    if (kv->v.arr.type != GS_GGUF_STRING)
        return gs_err_set(err, GS_FORMAT, "%s: expected an array of strings, found %s", key,
                          gs_gguf_vtype_name(kv->v.arr.type));
    if (kv->v.arr.n > INT32_MAX / 4)
        return gs_err_set(err, GS_FORMAT, "%s: %llu merges is too many", key,
                          (unsigned long long)kv->v.arr.n);
    uint64_t slots = 16;
    while (slots < kv->v.arr.n * 2)
        slots *= 2;
    t->merges = gs_alloc_array(slots, sizeof(*t->merges));
    if (!t->merges)
        return gs_err_set(err, GS_NOMEM, "%s: out of memory", key);
    for (uint64_t i = 0; i < slots; i++)
        t->merges[i].left = GS_TOK_NULL;
    t->merge_mask = slots - 1;

    struct gs_tok__buf joined = {0};
    for (uint64_t r = 0; r < kv->v.arr.n; r++) {
        const struct gs_gguf_str *s = &kv->v.arr.strs[r];
        const char *sp = s->len > 1 ? memchr(s->data + 1, ' ', s->len - 1) : NULL;
        if (!sp) {
            gs_free(joined.v);
            return gs_err_set(err, GS_FORMAT, "%s[%llu]: no space between the two parts", key,
                              (unsigned long long)r);
        }
        size_t nl = (size_t)(sp - s->data), nr = s->len - nl - 1;
        int32_t left = gs_tok__lookup(t, s->data, nl);
        int32_t right = gs_tok__lookup(t, sp + 1, nr);
        joined.n = 0;
        if (gs_tok__buf_put(&joined, s->data, nl) != GS_OK ||
            gs_tok__buf_put(&joined, sp + 1, nr) != GS_OK) {
            gs_free(joined.v);
            return gs_err_set(err, GS_NOMEM, "%s: out of memory", key);
        }
        int32_t result = gs_tok__lookup(t, joined.v, joined.n);
        if (left < 0 || right < 0 || result < 0) {
            gs_free(joined.v);
            return gs_err_set(err, GS_FORMAT, "%s[%llu]: '%.*s' refers to unknown token '%.*s'",
                              key, (unsigned long long)r, (int)GS_MIN(s->len, 64), s->data,
                              left < 0 ? (int)GS_MIN(nl, 64) : (int)GS_MIN(joined.n, 64),
                              left < 0 ? s->data : (right < 0 ? sp + 1 : joined.v));
        }
        uint64_t h = gs_tok__merge_hash(left, right) & t->merge_mask;
        while (t->merges[h].left != GS_TOK_NULL &&
               !(t->merges[h].left == left && t->merges[h].right == right))
            h = (h + 1) & t->merge_mask;
        if (t->merges[h].left == GS_TOK_NULL) /* the first rank of a repeated merge wins */
            t->merges[h] = (struct gs_tok__merge){left, right, (int32_t)r, result};
    }
    gs_free(joined.v);
    return GS_OK;
}

/* Token texts that mark end of generation, and which special role, if any,
 * they fill when the metadata does not name it (llama.cpp's loader). "</s>"
 * is deliberately absent: Phi-3 spells its user-defined end-of-text that
 * way, and the reference ids (2026-11) keep it matchable without
 * parse_special; a model whose EOS is </s> names it in eos_token_id. */
enum role { ROLE_NONE, ROLE_EOT, ROLE_EOM, ROLE_FIM_PAD, ROLE_FIM_REP, ROLE_FIM_SEP };
struct text_rule {
    const char *text;
    enum role role;
    bool eog;
};
static const struct text_rule text_rules[] = {
    {"<|eot_id|>", ROLE_EOT, true},
    {"<|im_end|>", ROLE_EOT, true},
    {"<|end|>", ROLE_EOT, true},
    {"<end_of_turn>", ROLE_EOT, true},
    {"<|endoftext|>", ROLE_EOT, true},
    {"<|end_of_text|>", ROLE_EOT, true},
    {"<EOT>", ROLE_EOT, true},
    {"_<EOT>", ROLE_EOT, true},
    {"[EOT]", ROLE_EOT, true},
    {"<\xef\xbd\x9c"
     "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
     ROLE_EOT, true},
    {"<end_of_utterance>", ROLE_EOT, true},
    {"<|eom_id|>", ROLE_EOM, true},
    {"<|return|>", ROLE_NONE, true},
    {"<|call|>", ROLE_NONE, true},
    {"<|flush|>", ROLE_NONE, true},
    {"<|calls|>", ROLE_NONE, true},
    {"[EOS]", ROLE_NONE, true},
    {"<eos>", ROLE_NONE, true},
    {"<turn|>", ROLE_NONE, true},
    {"<|tool_response>", ROLE_NONE, true},
    {"[e~[", ROLE_NONE, true},
    {"<|fim_pad|>", ROLE_FIM_PAD, false},
    {"<fim-pad>", ROLE_FIM_PAD, false},
    {"<fim_pad>", ROLE_FIM_PAD, false},
    {"<PAD>", ROLE_FIM_PAD, false},
    {"[PAD]", ROLE_FIM_PAD, false},
    {"<|fim_repo|>", ROLE_FIM_REP, false},
    {"<|repo_name|>", ROLE_FIM_REP, false},
    {"<fim-repo>", ROLE_FIM_REP, false},
    {"<REPO>", ROLE_FIM_REP, false},
    {"<reponame>", ROLE_FIM_REP, false},
    {"<|file_sep|>", ROLE_FIM_SEP, false},
};

static int32_t find_cstr(const struct gs_tok *t, const char *s)
{
    return gs_tok__lookup(t, s, strlen(s));
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static bool eog_has(const struct gs_tok *t, int32_t id)
{
    for (size_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id)
            return true;
    return false;
}

static void eog_add(struct gs_tok *t, int32_t id)
{
    if (id >= 0 && !eog_has(t, id))
        t->eog[t->n_eog++] = id;
}

static void eog_remove(struct gs_tok *t, int32_t id)
{
    for (size_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) {
            t->eog[i] = t->eog[--t->n_eog];
            return;
        }
}

/* Fills the EOT/EOM/FIM roles and the EOG set from the token texts; tokens
 * found this way become control tokens. */
static enum gs_status detect_roles(struct gs_tok *t, int32_t fim[3])
{
    size_t n_rules = GS_ARRAY_LEN(text_rules);
    /* At most one id per rule, plus eos, eot, eom and three FIM roles. */
    t->eog = gs_alloc_array(n_rules + 8, sizeof(*t->eog));
    if (!t->eog)
        return GS_NOMEM;
    int32_t *roles[] = {
        [ROLE_NONE] = NULL,       [ROLE_EOT] = &t->sp.eot,  [ROLE_EOM] = &t->sp.eom,
        [ROLE_FIM_PAD] = &fim[0], [ROLE_FIM_REP] = &fim[1], [ROLE_FIM_SEP] = &fim[2]};
    for (size_t i = 0; i < n_rules; i++) {
        int32_t id = find_cstr(t, text_rules[i].text);
        int32_t *slot = roles[text_rules[i].role];
        if (id < 0)
            continue;
        if (slot && *slot == GS_TOK_NULL) {
            *slot = id;
            t->vocab[id].attr |= GS_TOK__ATTR_CONTROL;
        }
    }
    /* Control tokens named "unused" are placeholders. */
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        struct gs_tok__entry *e = &t->vocab[i];
        if ((e->attr & GS_TOK__ATTR_CONTROL) && memmem(t->pool + e->off, e->len, "unused", 6))
            e->attr |= GS_TOK__ATTR_UNUSED;
    }
    eog_add(t, fim[0]);
    eog_add(t, fim[1]);
    eog_add(t, fim[2]);
    for (size_t i = 0; i < n_rules; i++) {
        int32_t id = find_cstr(t, text_rules[i].text);
        if (id < 0 || !text_rules[i].eog)
            continue;
        eog_add(t, id);
        t->vocab[id].attr |= GS_TOK__ATTR_CONTROL;
    }
    eog_add(t, t->sp.eos);
    eog_add(t, t->sp.eot);
    eog_add(t, t->sp.eom);

    /* Harmony-style vocabularies end a turn with <|return|> or <|call|>;
     * there <|end|> only separates messages, so it is not EOG. */
    int32_t ret = find_cstr(t, "<|return|>"), call = find_cstr(t, "<|call|>");
    int32_t calls = find_cstr(t, "<|calls|>"), flush = find_cstr(t, "<|flush|>");
    int32_t end = find_cstr(t, "<|end|>");
    if (end >= 0 && eog_has(t, end) &&
        ((ret >= 0 && eog_has(t, ret) &&
          ((call >= 0 && eog_has(t, call)) || (calls >= 0 && eog_has(t, calls)))) ||
         (flush >= 0 && eog_has(t, flush) &&
          ((call >= 0 && eog_has(t, call)) || (calls >= 0 && eog_has(t, calls)))))) {
        eog_remove(t, end);
        t->vocab[end].attr = GS_TOK__ATTR_USER;
    }
    qsort(t->eog, t->n_eog, sizeof(*t->eog), cmp_i32);
    return GS_OK;
}

static int cmp_special(const void *a, const void *b, void *ctx)
{
    const struct gs_tok *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = t->vocab[x].len, ly = t->vocab[y].len;
    if (lx != ly)
        return lx > ly ? -1 : 1;
    return (x > y) - (x < y);
}

static bool name_has(const struct gs_gguf *g, const char *needle)
{
    const struct gs_gguf_kv *kv = gs_gguf_find_kv(g, "general.name");
    if (!kv || kv->type != GS_GGUF_STRING)
        return false;
    size_t n = strlen(needle);
    for (uint64_t i = 0; i + n <= kv->v.str.len; i++) {
        size_t j = 0;
        while (j < n && tolower((unsigned char)kv->v.str.data[i + j]) == needle[j])
            j++;
        if (j == n)
            return true;
    }
    return false;
}

static enum gs_status build_specials(struct gs_tok *t, const struct gs_gguf *g)
{
    const uint8_t want = GS_TOK__SPECIAL_ATTRS;
    size_t n = 0;
    for (uint32_t i = 0; i < t->n_vocab; i++)
        n += (t->vocab[i].attr & want) != 0;
    t->special_ids = gs_alloc_array(n ? n : 1, sizeof(*t->special_ids));
    t->special_lens = gs_alloc_array(n ? n : 1, sizeof(*t->special_lens));
    if (!t->special_ids || !t->special_lens)
        return GS_NOMEM;
    for (uint32_t i = 0; i < t->n_vocab; i++)
        if (t->vocab[i].attr & want) {
            t->special_ids[t->n_special++] = (int32_t)i;
            unsigned char c = (unsigned char)t->pool[t->vocab[i].off];
            t->special_first[c >> 3] |= (uint8_t)(1u << (c & 7));
        }
    qsort_r(t->special_ids, t->n_special, sizeof(*t->special_ids), cmp_special, t);
    for (size_t i = t->n_special; i-- > 0;) {
        uint32_t l = t->vocab[t->special_ids[i]].len;
        if (t->n_special_lens == 0 || t->special_lens[t->n_special_lens - 1] != l)
            t->special_lens[t->n_special_lens++] = l;
    }

    /* Phi-3's tokenizer eats the whitespace after its special tokens. */
    if (name_has(g, "phi-3") || name_has(g, "phi3")) {
        for (size_t i = 0; i < t->n_special; i++)
            t->vocab[t->special_ids[i]].attr |= GS_TOK__ATTR_RSTRIP;
        static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
        int32_t s_end = find_cstr(t, "</s>");
        if (s_end >= 0)
            t->vocab[s_end].attr |= GS_TOK__ATTR_RSTRIP;
        for (size_t i = 0; i < GS_ARRAY_LEN(keep); i++) {
            int32_t id = find_cstr(t, keep[i]);
            if (id >= 0)
                t->vocab[id].attr &= (uint8_t)~GS_TOK__ATTR_RSTRIP;
        }
    }
    return GS_OK;
}

/* GPT-2's reversible byte -> printable code point map: printable Latin-1
 * bytes map to themselves, the others to U+0100 upwards in byte order. */
static void build_byte_tables(struct gs_tok *t)
{
    uint32_t next = 256;
    for (size_t i = 0; i < GS_ARRAY_LEN(t->byte_dec); i++)
        t->byte_dec[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        uint32_t cp = keep ? (uint32_t)b : next++;
        t->byte_dec[cp] = (int16_t)b;
        t->byte_enc_len[b] = (uint8_t)gs_tok__utf8_encode(cp, t->byte_enc[b]);
        t->byte_sym[b] = gs_tok__lookup(t, t->byte_enc[b], t->byte_enc_len[b]);

        char hex[8];
        snprintf(hex, sizeof(hex), "<0x%02X>", (unsigned)b);
        t->byte_tok[b] = find_cstr(t, hex);
        if (t->byte_tok[b] < 0) {
            char c = (char)b;
            t->byte_tok[b] = gs_tok__lookup(t, &c, 1);
        }
    }
}

/* Parses the hex digits of a "<0xXX>" byte token; -1 if it is not one. */
static int byte_of_text(const char *s, size_t len)
{
    if (len != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        int c = (unsigned char)s[i], d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Appends the piece of token i (special tokens rendered) to b. */
static enum gs_status piece_of(const struct gs_tok *t, uint32_t i, struct gs_tok__buf *b)
{
    const struct gs_tok__entry *e = &t->vocab[i];
    const char *s = t->pool + e->off;
    const uint8_t special = GS_TOK__ATTR_UNKNOWN | GS_TOK__ATTR_CONTROL | GS_TOK__ATTR_USER;
    static const char space_mark[] = "\xe2\x96\x81"; /* U+2581 */

    if (e->attr & special)
        return gs_tok__buf_put(b, s, e->len);
    if (e->attr & GS_TOK__ATTR_NORMAL) {
        bool unescape = t->model != GS_TOK_MODEL_BPE || t->escape_spaces;
        if (unescape) {
            size_t k = 0;
            while (k < e->len) {
                if (e->len - k >= 3 && memcmp(s + k, space_mark, 3) == 0) {
                    if (gs_tok__buf_put(b, " ", 1) != GS_OK)
                        return GS_NOMEM;
                    k += 3;
                } else {
                    if (gs_tok__buf_put(b, s + k, 1) != GS_OK)
                        return GS_NOMEM;
                    k++;
                }
            }
            return GS_OK;
        }
        /* Byte-level BPE: map each code point back to its byte. A code point
         * outside the map is spelled out, as llama.cpp does. */
        size_t k = 0;
        while (k < e->len) {
            uint32_t cp;
            size_t n = gs_tok__utf8_decode(s + k, e->len - k, &cp);
            int byte = cp < GS_ARRAY_LEN(t->byte_dec) ? t->byte_dec[cp] : -1;
            if (byte >= 0) {
                char c = (char)byte;
                if (gs_tok__buf_put(b, &c, 1) != GS_OK)
                    return GS_NOMEM;
            } else {
                char tmp[32];
                int m = snprintf(tmp, sizeof(tmp), "[UNK_BYTE_0x");
                for (size_t q = 0; q < n; q++)
                    m += snprintf(tmp + m, sizeof(tmp) - (size_t)m, "%02x",
                                  (unsigned)(unsigned char)s[k + q]);
                if (gs_tok__buf_put(b, tmp, (size_t)m) != GS_OK ||
                    gs_tok__buf_put(b, s, e->len) != GS_OK || gs_tok__buf_put(b, "]", 1) != GS_OK)
                    return GS_NOMEM;
            }
            k += n;
        }
        return GS_OK;
    }
    if (e->attr & GS_TOK__ATTR_BYTE) {
        int v = byte_of_text(s, e->len);
        if (v >= 0) {
            char c = (char)v;
            return gs_tok__buf_put(b, &c, 1);
        }
    }
    return GS_OK; /* unused and undefined tokens print as nothing */
}

static enum gs_status build_pieces(struct gs_tok *t, struct gs_err *err)
{
    struct gs_tok__buf b = {0};
    for (uint32_t i = 0; i < t->n_vocab; i++) {
        size_t at = b.n;
        if (piece_of(t, i, &b) != GS_OK || b.n > UINT32_MAX) {
            gs_free(b.v);
            return gs_err_set(err, GS_NOMEM, "token pieces: out of memory");
        }
        t->vocab[i].piece_off = (uint32_t)at;
        t->vocab[i].piece_len = (uint32_t)(b.n - at);
    }
    if (!b.v && gs_tok__buf_put(&b, "", 0) != GS_OK)
        return gs_err_set(err, GS_NOMEM, "token pieces: out of memory");
    t->piece_pool = b.v;
    return GS_OK;
}

/* Model defaults, then the pre-tokenizer. */
static enum gs_status choose_model(struct gs_tok *t, const struct gs_gguf *g, struct gs_err *err)
{
    struct gs_gguf_str model, pre = {0, ""};
    enum gs_status st = gs_gguf_get_str(g, "tokenizer.ggml.model", &model, err);
    if (st == GS_NOTFOUND)
        return gs_err_set(err, GS_FORMAT, "tokenizer.ggml.model: missing");
    if (st != GS_OK)
        return st;
    const struct gs_gguf_kv *pkv = gs_gguf_find_kv(g, "tokenizer.ggml.pre");
    if (pkv) {
        if (pkv->type != GS_GGUF_STRING)
            return gs_err_set(err, GS_FORMAT, "tokenizer.ggml.pre: expected a string, found %s",
                              gs_gguf_vtype_name(pkv->type));
        pre = pkv->v.str;
    }

    t->sp = (struct gs_tok_special){GS_TOK_NULL, GS_TOK_NULL, GS_TOK_NULL, GS_TOK_NULL,
                                    GS_TOK_NULL, GS_TOK_NULL, GS_TOK_NULL, GS_TOK_NULL,
                                    GS_TOK_NULL, false,       false,       false};
    if (gs_gguf_str_eq(model, "llama")) {
        t->model = GS_TOK_MODEL_SPM;
        t->sp.bos = 1, t->sp.eos = 2, t->sp.unk = 0;
        t->sp.add_space_prefix = true;
        t->sp.add_bos = true;
        return GS_OK;
    }
    if (gs_gguf_str_eq(model, "bert")) {
        t->model = GS_TOK_MODEL_WPM;
        t->sp.bos = 101, t->sp.unk = 100, t->sp.sep = 102, t->sp.pad = 0, t->sp.mask = 103;
        t->sp.add_bos = true;
        t->add_sep = true;
        t->clean_spaces = true;
        t->wpm_lowercase = true;
        t->wpm_strip_accents = true;
        return GS_OK;
    }
    bool gemma4 = gs_gguf_str_eq(model, "gemma4");
    if (!gemma4 && !gs_gguf_str_eq(model, "gpt2"))
        return gs_err_set(err, GS_UNSUPPORTED, "tokenizer.ggml.model: '%.*s' is not supported",
                          (int)GS_MIN(model.len, 64), model.data);
    t->model = GS_TOK_MODEL_BPE;
    if (gemma4) {
        pre = (struct gs_gguf_str){6, "gemma4"};
    } else {
        t->sp.bos = 11, t->sp.eos = 11;
        if (pre.len == 0)
            pre = (struct gs_gguf_str){7, "default"};
    }
    t->pre = gs_tok__pre_find(pre.data, pre.len);
    if (!t->pre)
        return gs_err_set(err, GS_UNSUPPORTED, "tokenizer.ggml.pre: '%.*s' is not supported",
                          (int)GS_MIN(pre.len, 64), pre.data);
    snprintf(t->pre_name, sizeof(t->pre_name), "%.*s", (int)GS_MIN(pre.len, 63), pre.data);
    t->clean_spaces = t->pre->clean_spaces;
    t->escape_spaces = t->pre->escape_spaces;
    t->sp.add_bos = t->pre->add_bos;
    return GS_OK;
}

static enum gs_status read_specials(struct gs_tok *t, const struct gs_gguf *g, int32_t fim[3],
                                    struct gs_err *err)
{
    struct {
        const char *key;
        int32_t *id;
    } ids[] = {
        {"tokenizer.ggml.bos_token_id", &t->sp.bos},
        {"tokenizer.ggml.eos_token_id", &t->sp.eos},
        {"tokenizer.ggml.eot_token_id", &t->sp.eot},
        {"tokenizer.ggml.eom_token_id", &t->sp.eom},
        {"tokenizer.ggml.unknown_token_id", &t->sp.unk},
        {"tokenizer.ggml.seperator_token_id", &t->sp.sep},
        {"tokenizer.ggml.padding_token_id", &t->sp.pad},
        {"tokenizer.ggml.mask_token_id", &t->sp.mask},
        {"tokenizer.ggml.fim_pad_token_id", &fim[0]},
        {"tokenizer.ggml.fim_rep_token_id", &fim[1]},
        {"tokenizer.ggml.fim_sep_token_id", &fim[2]},
    };
    for (size_t i = 0; i < GS_ARRAY_LEN(ids); i++) {
        /* A default that this vocabulary is too small for is dropped. */
        if (*ids[i].id >= (int32_t)t->n_vocab)
            *ids[i].id = GS_TOK_NULL;
        enum gs_status st = opt_id(g, ids[i].key, t->n_vocab, ids[i].id, err);
        if (st != GS_OK)
            return st;
    }
    bool add_sep = t->add_sep;
    enum gs_status st;
    if ((st = opt_bool(g, "tokenizer.ggml.add_space_prefix", &t->sp.add_space_prefix, err)) ||
        (st = opt_bool(g, "tokenizer.ggml.add_bos_token", &t->sp.add_bos, err)) ||
        (st = opt_bool(g, "tokenizer.ggml.add_eos_token", &t->sp.add_eos, err)) ||
        (st = opt_bool(g, "tokenizer.ggml.add_sep_token", &add_sep, err)) ||
        (st = opt_bool(g, "tokenizer.ggml.normalizer.lowercase", &t->wpm_lowercase, err)))
        return st;
    t->add_sep = add_sep;
    t->wpm_strip_accents = t->wpm_lowercase;
    if ((st = opt_bool(g, "tokenizer.ggml.normalizer.strip_accents", &t->wpm_strip_accents, err)))
        return st;
    if (t->pre && t->pre->escape_spaces)
        t->sp.add_bos = true; /* Gemma 4 needs its BOS whatever the file says */
    if (t->model == GS_TOK_MODEL_BPE)
        t->sp.add_space_prefix = false;
    if ((t->sp.add_bos || t->model == GS_TOK_MODEL_WPM) && t->sp.bos == GS_TOK_NULL)
        return gs_err_set(err, GS_FORMAT,
                          "tokenizer.ggml.bos_token_id: missing, but BOS is to be added");
    if (t->sp.add_eos && t->sp.eos == GS_TOK_NULL)
        return gs_err_set(err, GS_FORMAT,
                          "tokenizer.ggml.eos_token_id: missing, but EOS is to be added");
    if (t->model == GS_TOK_MODEL_WPM && t->sp.sep == GS_TOK_NULL)
        return gs_err_set(err, GS_FORMAT, "tokenizer.ggml.seperator_token_id: missing");
    return GS_OK;
}

static void find_newline(struct gs_tok *t)
{
    t->sp.nl = t->sp.pad;
    if (t->model == GS_TOK_MODEL_SPM) {
        if (t->byte_tok['\n'] >= 0)
            t->sp.nl = t->byte_tok['\n'];
    } else if (t->model == GS_TOK_MODEL_BPE) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (gs_tok_encode(t, "\n", 1, 0, &ids, &n, NULL) == GS_OK && n > 0)
            t->sp.nl = ids[0];
        gs_free(ids);
    }
}

enum gs_status gs_tok_new(const struct gs_gguf *g, struct gs_tok **out, struct gs_err *err)
{
    *out = NULL;
    struct gs_tok *t = gs_calloc(1, sizeof(*t));
    if (!t)
        return gs_err_set(err, GS_NOMEM, "tokenizer: out of memory");
    int32_t fim[3] = {GS_TOK_NULL, GS_TOK_NULL, GS_TOK_NULL};
    const struct gs_gguf_kv *tokens;
    enum gs_status st;
    if ((st = choose_model(t, g, err)) ||
        (st = get_arr(g, "tokenizer.ggml.tokens", true, &tokens, err)) ||
        (st = load_tokens(t, tokens, err)) || (st = load_scores(t, g, err)) ||
        (st = load_types(t, g, err)))
        goto fail;
    if (t->model == GS_TOK_MODEL_BPE && (st = load_merges(t, g, err)))
        goto fail;
    if ((st = read_specials(t, g, fim, err)))
        goto fail;
    build_byte_tables(t);
    if (detect_roles(t, fim) != GS_OK || build_specials(t, g) != GS_OK) {
        st = gs_err_set(err, GS_NOMEM, "tokenizer: out of memory");
        goto fail;
    }
    if ((st = build_pieces(t, err)))
        goto fail;
    if (t->model == GS_TOK_MODEL_BPE && (st = gs_tok__pre_compile(t, err)))
        goto fail;
    find_newline(t);
    *out = t;
    return GS_OK;
fail:
    gs_tok_free(t);
    return st;
}

enum gs_status gs_tok_open(const char *path, struct gs_tok **out, struct gs_err *err)
{
    struct gs_gguf *g;
    *out = NULL;
    if (gs_gguf_open(path, &g, err) != GS_OK)
        return err ? err->code : GS_IO; /* the reader's message names the file */
    enum gs_status st = gs_tok_new(g, out, err);
    gs_gguf_close(g);
    if (st != GS_OK)
        gs_err_prefix(err, "%s", path);
    return st;
}

void gs_tok_free(struct gs_tok *t)
{
    if (!t)
        return;
    for (int i = 0; i < t->n_re; i++)
        pcre2_code_free(t->re[i]);
    pcre2_general_context_free(t->re_gc);
    gs_free(t->vocab);
    gs_free(t->pool);
    gs_free(t->piece_pool);
    gs_free(t->hash);
    gs_free(t->merges);
    gs_free(t->special_ids);
    gs_free(t->special_lens);
    gs_free(t->eog);
    gs_free(t);
}

/* ---- accessors ------------------------------------------------------------------ */

enum gs_tok_model gs_tok_model(const struct gs_tok *t)
{
    return t->model;
}

const char *gs_tok_pre_name(const struct gs_tok *t)
{
    return t->pre_name;
}

uint32_t gs_tok_n_vocab(const struct gs_tok *t)
{
    return t->n_vocab;
}

const struct gs_tok_special *gs_tok_special(const struct gs_tok *t)
{
    return &t->sp;
}

enum gs_tok_type gs_tok_token_type(const struct gs_tok *t, int32_t id)
{
    if (id < 0 || (uint32_t)id >= t->n_vocab)
        return GS_TOK_TYPE_UNDEFINED;
    const struct gs_tok__entry *e = &t->vocab[id];
    /* Report what the tokenizer treats the token as, which differs from the
     * file for tokens promoted by their text (<|im_end|> -> control). */
    if (e->attr & GS_TOK__ATTR_CONTROL)
        return GS_TOK_TYPE_CONTROL;
    if (e->attr & GS_TOK__ATTR_USER)
        return GS_TOK_TYPE_USER_DEFINED;
    if (e->attr & GS_TOK__ATTR_NORMAL)
        return GS_TOK_TYPE_NORMAL;
    return (enum gs_tok_type)e->type;
}

const char *gs_tok_token_text(const struct gs_tok *t, int32_t id, size_t *len)
{
    if (id < 0 || (uint32_t)id >= t->n_vocab) {
        *len = 0;
        return NULL;
    }
    *len = t->vocab[id].len;
    return t->pool + t->vocab[id].off;
}

int32_t gs_tok_find(const struct gs_tok *t, const char *text, size_t len)
{
    return gs_tok__lookup(t, text, len);
}

bool gs_tok_is_eog(const struct gs_tok *t, int32_t id)
{
    return id >= 0 && bsearch(&id, t->eog, t->n_eog, sizeof(*t->eog), cmp_i32) != NULL;
}

const int32_t *gs_tok_eog_ids(const struct gs_tok *t, size_t *n)
{
    *n = t->n_eog;
    return t->eog;
}
