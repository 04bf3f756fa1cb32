/*
 * engine/tok/spm.c - SentencePiece-style encoding of one fragment: start
 * from UTF-8 characters and repeatedly merge the adjacent pair whose
 * concatenation is the token with the highest score (leftmost on ties);
 * what remains is emitted as tokens, or as byte tokens when a character is
 * not in the vocabulary. The caller has already escaped spaces to U+2581.
 */
#include "engine/tok/internal.h"

#include <string.h>

enum gs_status gs_tok__syms_reserve(struct gs_tok__scratch *s, size_t n)
{
    if (n <= s->syms_cap)
        return GS_OK;
    struct gs_tok__sym *v = gs_realloc(s->syms, n * sizeof(*v));
    if (!v && n)
        return GS_NOMEM;
    s->syms = v;
    s->syms_cap = n;
    return GS_OK;
}

/* Maps a float to an unsigned key with the same order. */
static uint32_t float_order(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

static enum gs_status try_pair(const struct gs_tok *t, struct gs_tok__scratch *s, const char *text,
                               int32_t left, int32_t right)
{
    if (left < 0 || right < 0)
        return GS_OK;
    const struct gs_tok__sym *l = &s->syms[left], *r = &s->syms[right];
    int32_t id = gs_tok__lookup(t, text + l->off, l->len + r->len);
    if (id < 0)
        return GS_OK;
    /* Highest score first, then leftmost: the heap pops the smallest key. */
    struct gs_tok__cand c = {
        .key = ((uint64_t)~float_order(t->vocab[id].score) << 32) | (uint32_t)left,
        .left = left,
        .right = right,
        .size = l->len + r->len,
        .result = id,
    };
    return gs_tok__heap_push(&s->heap, &c);
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
    s->heap.n = 0;
    for (int32_t i = 1; i < n; i++)
        if (try_pair(t, s, text, i - 1, i) != GS_OK)
            return GS_NOMEM;

    struct gs_tok__cand c;
    while (gs_tok__heap_pop(&s->heap, &c)) {
        struct gs_tok__sym *l = &s->syms[c.left], *r = &s->syms[c.right];
        if (l->len == 0 || r->len == 0 || l->len + r->len != c.size)
            continue; /* stale: one side has merged since */
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0)
            s->syms[r->next].prev = c.left;
        if (try_pair(t, s, text, l->prev, c.left) != GS_OK ||
            try_pair(t, s, text, c.left, l->next) != GS_OK)
            return GS_NOMEM;
    }

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
