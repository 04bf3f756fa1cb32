/*
 * engine/tok/heap.c - the merge priority queue: a binary min-heap on
 * gs_tok__cand.key. Stale candidates are not removed; the merge loops skip
 * them when popped, so the queue holds O(symbols) entries.
 */
#include "engine/tok/internal.h"

enum gs_status gs_tok__heap_push(struct gs_tok__heap *h, const struct gs_tok__cand *c)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 256;
        struct gs_tok__cand *v = gs_realloc(h->v, cap * sizeof(*v));
        if (!v)
            return GS_NOMEM;
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h->v[p].key <= c->key)
            break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = *c;
    return GS_OK;
}

bool gs_tok__heap_pop(struct gs_tok__heap *h, struct gs_tok__cand *out)
{
    if (h->n == 0)
        return false;
    *out = h->v[0];
    struct gs_tok__cand last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= h->n)
            break;
        size_t m = (l + 1 < h->n && h->v[l + 1].key < h->v[l].key) ? l + 1 : l;
        if (last.key <= h->v[m].key)
            break;
        h->v[i] = h->v[m];
        i = m;
    }
    if (h->n > 0)
        h->v[i] = last;
    return true;
}
