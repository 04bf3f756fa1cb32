/*
 * engine/tok/spm.c - SentencePiece-style encoding of one fragment: start
 * from UTF-8 characters and repeatedly merge the adjacent pair whose
 * concatenation is the token with the highest score (leftmost on ties);
 * what remains is emitted as tokens, or as byte tokens when a character is
 * not in the vocabulary. The caller has already escaped spaces to U+2581.
 */
#include "engine/tok/internal.h"

#include <string.h>

/* Maps a float to an unsigned key with the same order. */
static uint32_t float_order(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* A pair merges when its text is a token; the higher that token's score, the
 * sooner (the loop merges the smallest rank first). */
static bool pair_rank(const struct gs_tok *t, const char *text, const struct gs_tok__sym *l,
                      const struct gs_tok__sym *r, uint32_t *rank, int32_t *result)
{
    int32_t id = gs_tok__lookup(t, text + l->off, l->len + r->len);
    if (id < 0)
        return false;
    *rank = ~float_order(t->vocab[id].score);
    *result = id;
    return true;
}

enum gs_status gs_tok__spm_encode(const struct gs_tok *t, struct gs_tok__scratch *s,
                                  const char *text, size_t len, struct gs_tok__ids *out)
{
    if (len == 0)
        return GS_OK;
    if (len > INT32_MAX)
        return GS_NOMEM;
    if (gs_tok__syms_reserve(s, len) != GS_OK)
        return GS_NOMEM;
    int32_t n = 0;
    for (size_t off = 0; off < len;) {
        size_t cl = GS_MIN(gs_tok__utf8_len((unsigned char)text[off]), len - off);
        s->syms[n] = (struct gs_tok__sym){(uint32_t)off, (uint32_t)cl, n - 1, -1, GS_TOK_NULL};
        off += cl;
        s->syms[n].next = off == len ? -1 : n + 1;
        n++;
    }
    if (gs_tok__merge_syms(t, s, text, n, pair_rank) != GS_OK)
        return GS_NOMEM;

    for (int32_t i = 0; i != -1; i = s->syms[i].next) {
        const struct gs_tok__sym *y = &s->syms[i];
        int32_t id = gs_tok__lookup(t, text + y->off, y->len);
        if (id >= 0) {
            if (gs_tok__ids_push(out, id) != GS_OK)
                return GS_NOMEM;
            continue;
        }
        /* Byte fallback; a vocabulary without byte tokens gets <unk>. */
        for (uint32_t k = 0; k < y->len; k++) {
            int32_t b = t->byte_tok[(unsigned char)text[y->off + k]];
            if (b < 0)
                b = t->sp.unk;
            if (b >= 0 && gs_tok__ids_push(out, b) != GS_OK)
                return GS_NOMEM;
        }
    }
    return GS_OK;
}
