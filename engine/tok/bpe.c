/*
 * engine/tok/bpe.c - byte-pair encoding of one fragment: the pre-tokenizer
 * cuts the text into words; each word starts as one symbol per byte (GPT-2
 * byte-level vocabularies, where every byte has a printable stand-in
 * character) or per UTF-8 character (gemma4), and the adjacent pair with the
 * lowest merge rank is merged until no pair has a merge. Symbols carry token
 * ids, so a merge is one hash lookup of (left id, right id).
 */
#include "engine/tok/internal.h"

#include <string.h>

/* A pair merges when the merge table has (left id, right id); the lower its
 * rank, the sooner. */
static bool pair_rank(const struct gs_tok *t, const char *text, const struct gs_tok__sym *l,
                      const struct gs_tok__sym *r, uint32_t *rank, int32_t *result)
{
    (void)text; /* BPE symbols carry their ids */
    const struct gs_tok__merge *m = gs_tok__merge_find(t, l->id, r->id);
    if (!m)
        return false;
    *rank = (uint32_t)m->rank;
    *result = m->result;
    return true;
}

/* The word in vocabulary form: GPT-2 byte-level mapped, or as is. */
static enum gs_status word_form(const struct gs_tok *t, struct gs_tok__buf *w, const char *p,
                                size_t n)
{
    w->n = 0;
    if (t->pre->raw_utf8)
        return gs_tok__buf_put(w, p, n);
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)p[i];
        if (gs_tok__buf_put(w, t->byte_enc[b], t->byte_enc_len[b]) != GS_OK)
            return GS_NOMEM;
    }
    return GS_OK;
}

static bool all_newlines(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != '\n')
            return false;
    return true;
}

/* Emits a symbol that no token covers, as llama.cpp does: byte-level
 * vocabularies look up each byte of the stand-in character (usually in
 * vain, so the symbol is dropped); others use the <0xXX> byte tokens. */
static enum gs_status emit_unknown(const struct gs_tok *t, const char *p, size_t n,
                                   struct gs_tok__ids *out)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)p[i];
        if (t->pre->raw_utf8) {
            if (t->byte_tok[b] >= 0 && gs_tok__ids_push(out, t->byte_tok[b]) != GS_OK)
                return GS_NOMEM;
            continue;
        }
        for (size_t k = 0; k < t->byte_enc_len[b]; k++) {
            int32_t id = gs_tok__lookup(t, &t->byte_enc[b][k], 1);
            if (id >= 0 && gs_tok__ids_push(out, id) != GS_OK)
                return GS_NOMEM;
        }
    }
    return GS_OK;
}

static enum gs_status encode_word(const struct gs_tok *t, struct gs_tok__scratch *s, const char *p,
                                  size_t n, struct gs_tok__ids *out)
{
    if (t->pre->ignore_merges || (t->pre->raw_utf8 && all_newlines(p, n))) {
        if (word_form(t, &s->word, p, n) != GS_OK)
            return GS_NOMEM;
        int32_t id = gs_tok__lookup(t, s->word.v, s->word.n);
        if (id >= 0)
            return gs_tok__ids_push(out, id);
    }
    int32_t ns = 0;
    for (size_t off = 0; off < n; ns++) {
        size_t cl = t->pre->raw_utf8 ? GS_MIN(gs_tok__utf8_len((unsigned char)p[off]), n - off) : 1;
        int32_t id =
            t->pre->raw_utf8 ? gs_tok__lookup(t, p + off, cl) : t->byte_sym[(unsigned char)p[off]];
        s->syms[ns] = (struct gs_tok__sym){(uint32_t)off, (uint32_t)cl, ns - 1, -1, id};
        off += cl;
        s->syms[ns].next = off == n ? -1 : ns + 1;
    }
    if (gs_tok__merge_syms(t, s, p, ns, pair_rank) != GS_OK)
        return GS_NOMEM;
    for (int32_t i = 0; i != -1; i = s->syms[i].next) {
        const struct gs_tok__sym *y = &s->syms[i];
        enum gs_status st =
            y->id >= 0 ? gs_tok__ids_push(out, y->id) : emit_unknown(t, p + y->off, y->len, out);
        if (st != GS_OK)
            return st;
    }
    return GS_OK;
}

enum gs_status gs_tok__bpe_encode(const struct gs_tok *t, struct gs_tok__scratch *s,
                                  const char *text, size_t len, struct gs_tok__ids *out)
{
    struct gs_tok__splits words = {0};
    struct gs_tok__buf esc = {0};
    enum gs_status st;
    s->buf.n = 0;
    if ((st = gs_tok__utf8_sanitize(&s->buf, text, len)) != GS_OK)
        goto out;
    const char *p = s->buf.v;
    size_t n = s->buf.n;
    if (t->escape_spaces) {
        for (size_t i = 0; i < n; i++) {
            st = p[i] == ' ' ? gs_tok__buf_put(&esc, "\xe2\x96\x81", 3)
                             : gs_tok__buf_put(&esc, p + i, 1);
            if (st != GS_OK)
                goto out;
        }
        p = esc.v;
        n = esc.n;
    }
    if (n == 0 || n > INT32_MAX) {
        st = n ? GS_NOMEM : GS_OK;
        goto out;
    }
    if ((st = gs_tok__syms_reserve(s, n)) != GS_OK ||
        (st = gs_tok__pre_split(t, s, p, n, &words)) != GS_OK)
        goto out;
    size_t start = 0;
    for (size_t k = 0; k < words.n; k++) {
        if ((st = encode_word(t, s, p + start, words.v[k] - start, out)) != GS_OK)
            goto out;
        start = words.v[k];
    }
out:
    gs_free(words.v);
    gs_free(esc.v);
    return st;
}
