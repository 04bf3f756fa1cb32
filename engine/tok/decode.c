/*
 * engine/tok/decode.c - ids back to text: pieces, whole-sequence decoding
 * with llama.cpp's clean-up rules, and the streaming decoder that only ever
 * hands out complete UTF-8.
 */
#include "engine/tok/internal.h"

#include <string.h>

const char *gs_tok_piece(const struct gs_tok *t, int32_t id, unsigned flags, size_t *len)
{
    *len = 0;
    if (id < 0 || (uint32_t)id >= t->n_vocab)
        return NULL;
    const struct gs_tok__entry *e = &t->vocab[id];
    const char *p = t->piece_pool + e->piece_off;
    if (!(flags & GS_TOK_RENDER_SPECIAL) &&
        (e->attr & (GS_TOK__ATTR_CONTROL | GS_TOK__ATTR_UNKNOWN)))
        return ""; /* hidden */
    *len = e->piece_len;
    return p;
}

/* llama.cpp's clean-up of tokenizer artefacts: " ?" " !" " ." " ," lose the
 * space, a lone " ' " loses both spaces, and " 's" " 'm" " 're" " 've" lose
 * the space. Works in place; returns the new length. */
static size_t clean_spaces(char *s, size_t n)
{
    size_t w = n ? 1 : 0;
    for (size_t i = 1; i < n; i++) {
        char x = s[i];
        if (s[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ','))
            w--;
        s[w++] = x;
    }
    n = w;
    w = n ? 1 : 0;
    for (size_t i = 1; i < n; i++) {
        char x = s[i];
        if (x == '\'' && i + 1 < n && s[i - 1] == ' ' && s[i + 1] == ' ') {
            w--;
            s[++i] = '\0';
        }
        s[w++] = x;
    }
    n = w;
    w = n ? 1 : 0;
    for (size_t i = 1; i < n; i++) {
        char x = s[i];
        if (s[i - 1] == ' ' && x == '\'' && i + 1 < n) {
            char x1 = s[i + 1];
            if (x1 == 's' || x1 == 'm')
                w--;
            else if (i + 2 < n &&
                     ((x1 == 'r' && s[i + 2] == 'e') || (x1 == 'v' && s[i + 2] == 'e')))
                w--;
        }
        s[w++] = x;
    }
    return w;
}

/* Whether the first piece of ids loses the space SPM put before a text. */
static bool starts_text(const struct gs_tok *t, unsigned flags)
{
    return t->sp.add_space_prefix && !(flags & GS_TOK_CONTINUATION);
}

enum gs_status gs_tok_decode(const struct gs_tok *t, const int32_t *ids, size_t n_ids,
                             unsigned flags, char **text, size_t *len, struct gs_err *err)
{
    struct gs_tok__buf b = {0};
    *text = NULL;
    *len = 0;
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] < 0 || (uint32_t)ids[i] >= t->n_vocab)
            return gs_err_set(err, GS_INVAL,
                              "detokenize: id %d at %zu out of range (vocabulary of %u)", ids[i], i,
                              t->n_vocab);
    /* The space SPM put before the text goes, except after a removed BOS
     * (llama.cpp keeps it there) and in a continuation, whose first space
     * separates it from the text before. */
    bool strip_space = starts_text(t, flags);
    if ((flags & GS_TOK_REMOVE_SPECIAL) && t->sp.add_bos && n_ids > 0 && ids[0] == t->sp.bos) {
        strip_space = false;
        ids++;
        n_ids--;
    }
    if ((flags & GS_TOK_REMOVE_SPECIAL) && t->sp.add_eos && n_ids > 0 &&
        ids[n_ids - 1] == t->sp.eos)
        n_ids--;
    if (gs_tok__buf_put(&b, "", 0) != GS_OK)
        goto nomem;
    for (size_t i = 0; i < n_ids; i++) {
        size_t pl;
        const char *p = gs_tok_piece(t, ids[i], flags, &pl);
        if (strip_space && pl > 0 && p[0] == ' ')
            p++, pl--;
        strip_space = false;
        if (gs_tok__buf_put(&b, p, pl) != GS_OK)
            goto nomem;
    }
    if (t->clean_spaces && !(flags & GS_TOK_NO_CLEANUP)) {
        b.n = clean_spaces(b.v, b.n);
        b.v[b.n] = '\0';
    }
    *text = b.v;
    *len = b.n;
    return GS_OK;
nomem:
    gs_free(b.v);
    return gs_err_set(err, GS_NOMEM, "detokenize: out of memory");
}

/* ---- streaming --------------------------------------------------------------------- */

struct gs_tok_decoder {
    const struct gs_tok *t;
    unsigned flags;
    bool strip_space; /* the next non-empty piece loses a leading space */
    bool first;       /* no id fed yet in this stream */
    char held[4];     /* bytes of an incomplete character */
    size_t n_held;
    struct gs_tok__buf out;
};

enum gs_status gs_tok_decoder_new(const struct gs_tok *t, unsigned flags,
                                  struct gs_tok_decoder **out, struct gs_err *err)
{
    struct gs_tok_decoder *d = gs_calloc(1, sizeof(*d));
    *out = NULL;
    if (!d)
        return gs_err_set(err, GS_NOMEM, "decoder: out of memory");
    d->t = t;
    d->flags = flags;
    d->strip_space = starts_text(t, flags);
    d->first = true;
    *out = d;
    return GS_OK;
}

void gs_tok_decoder_free(struct gs_tok_decoder *d)
{
    if (!d)
        return;
    gs_free(d->out.v);
    gs_free(d);
}

/* How many bytes a character starting with c needs; 0 if c cannot start one. */
static size_t lead_len(unsigned char c)
{
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        return 2;
    if (c >= 0xE0 && c <= 0xEF)
        return 3;
    if (c >= 0xF0 && c <= 0xF4)
        return 4;
    return 0;
}

/* Whether s[0..n), n < lead_len(s[0]), can still become a valid character. */
static bool viable_prefix(const unsigned char *s, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return false;
        if (i == 1) { /* the second byte carries the overlong/surrogate/range rules */
            if (s[0] == 0xE0 && s[1] < 0xA0)
                return false;
            if (s[0] == 0xED && s[1] > 0x9F)
                return false;
            if (s[0] == 0xF0 && s[1] < 0x90)
                return false;
            if (s[0] == 0xF4 && s[1] > 0x8F)
                return false;
        }
    }
    return true;
}

/* Appends p to the held bytes and moves every complete character to d->out.
 * Malformed input becomes U+FFFD per maximal subpart (Unicode's recommended
 * practice): a byte that cannot start a character is one U+FFFD, and so is
 * a started character that the next byte breaks, which is then re-read. */
static enum gs_status push_bytes(struct gs_tok_decoder *d, const char *p, size_t n)
{
    static const char repl[] = "\xef\xbf\xbd";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (d->n_held > 0) {
            d->held[d->n_held] = (char)c;
            if (!viable_prefix((const unsigned char *)d->held, d->n_held + 1)) {
                d->n_held = 0;
                if (gs_tok__buf_put(&d->out, repl, 3) != GS_OK)
                    return GS_NOMEM;
                i--; /* read c again as the start of a character */
                continue;
            }
            if (++d->n_held == lead_len((unsigned char)d->held[0])) {
                if (gs_tok__buf_put(&d->out, d->held, d->n_held) != GS_OK)
                    return GS_NOMEM;
                d->n_held = 0;
            }
            continue;
        }
        size_t need = lead_len(c);
        enum gs_status st = GS_OK;
        if (need == 0)
            st = gs_tok__buf_put(&d->out, repl, 3);
        else if (need == 1)
            st = gs_tok__buf_put(&d->out, &p[i], 1);
        else
            d->held[d->n_held++] = (char)c;
        if (st != GS_OK)
            return st;
    }
    return GS_OK;
}

enum gs_status gs_tok_decoder_feed(struct gs_tok_decoder *d, int32_t id, const char **out,
                                   size_t *len, struct gs_err *err)
{
    const struct gs_tok *t = d->t;
    d->out.n = 0;
    *out = "";
    *len = 0;
    if (id < 0 || (uint32_t)id >= t->n_vocab)
        return gs_err_set(err, GS_INVAL, "decoder: id %d out of range (vocabulary of %u)", id,
                          t->n_vocab);
    bool first = d->first;
    d->first = false;
    if (first && (d->flags & GS_TOK_REMOVE_SPECIAL) && t->sp.add_bos && id == t->sp.bos) {
        d->strip_space = false;
        return GS_OK;
    }
    size_t pl;
    const char *p = gs_tok_piece(t, id, d->flags, &pl);
    if (d->strip_space && pl > 0 && p[0] == ' ')
        p++, pl--;
    d->strip_space = false;
    if (push_bytes(d, p, pl) != GS_OK || gs_tok__buf_put(&d->out, "", 0) != GS_OK)
        return gs_err_set(err, GS_NOMEM, "decoder: out of memory");
    *out = d->out.v;
    *len = d->out.n;
    return GS_OK;
}

void gs_tok_decoder_flush(struct gs_tok_decoder *d, const char **out, size_t *len)
{
    /* What is held is a viable but unfinished character: one U+FFFD. */
    *out = "\xef\xbf\xbd";
    *len = d->n_held ? 3 : 0;
    d->n_held = 0;
    d->strip_space = starts_text(d->t, d->flags);
    d->first = true;
}
