/*
 * engine/tok/merge.c - the merge loop SPM and BPE share, and its priority
 * queue. Symbols start as spans of the text, linked in order; the adjacent
 * pair that ranks first is merged into its left symbol, its neighbours'
 * pairs are ranked again, and so on until no adjacent pair merges. The two
 * encoders differ only in how a pair ranks (gs_tok__pair_rank): SPM by the
 * merged token's score, BPE by the merge table's rank.
 *
 * The queue is a binary min-heap on gs_tok__cand.key. Stale candidates (a
 * side has merged since they were queued) are not removed; the loop skips
 * them when popped, so the queue holds O(symbols) entries.
 */
#include "engine/tok/internal.h"

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

static enum gs_status heap_push(struct gs_tok__heap *h, const struct gs_tok__cand *c)
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

static bool heap_pop(struct gs_tok__heap *h, struct gs_tok__cand *out)
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

/* Queues the pair (left, right) if it merges: smallest rank first, then
 * leftmost (the left symbol's index is the key's low half). */
static enum gs_status try_pair(const struct gs_tok *t, struct gs_tok__scratch *s, const char *text,
                               gs_tok__pair_rank rank_of, int32_t left, int32_t right)
{
    if (left < 0 || right < 0)
        return GS_OK;
    const struct gs_tok__sym *l = &s->syms[left], *r = &s->syms[right];
    uint32_t rank;
    int32_t result;
    if (!rank_of(t, text, l, r, &rank, &result))
        return GS_OK;
    struct gs_tok__cand c = {
        .key = ((uint64_t)rank << 32) | (uint32_t)left,
        .left = left,
        .right = right,
        .size = l->len + r->len,
        .result = result,
    };
    return heap_push(&s->heap, &c);
}

enum gs_status gs_tok__merge_syms(const struct gs_tok *t, struct gs_tok__scratch *s,
                                  const char *text, int32_t n, gs_tok__pair_rank rank_of)
{
    s->heap.n = 0;
    for (int32_t i = 1; i < n; i++)
        if (try_pair(t, s, text, rank_of, i - 1, i) != GS_OK)
            return GS_NOMEM;
    struct gs_tok__cand c;
    while (heap_pop(&s->heap, &c)) {
        struct gs_tok__sym *l = &s->syms[c.left], *r = &s->syms[c.right];
        if (l->len == 0 || r->len == 0 || l->len + r->len != c.size)
            continue; /* stale: one side has merged since */
        l->len += r->len;
        l->id = c.result;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0)
            s->syms[r->next].prev = c.left;
        if (try_pair(t, s, text, rank_of, l->prev, c.left) != GS_OK ||
            try_pair(t, s, text, rank_of, c.left, l->next) != GS_OK)
            return GS_NOMEM;
    }
    return GS_OK;
}
