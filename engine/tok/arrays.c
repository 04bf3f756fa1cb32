/*
 * engine/tok/arrays.c - the growable arrays the tokenizer files fill: token
 * ids (gs_tok__ids) and NUL-terminated bytes (gs_tok__buf). A leaf: it calls
 * nothing else of engine/tok.
 */
#include "engine/tok/internal.h"

#include <string.h>

enum gs_status gs_tok__ids_push(struct gs_tok__ids *a, int32_t id)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        int32_t *v = gs_realloc(a->v, cap * sizeof(*v));
        if (!v)
            return GS_NOMEM;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = id;
    return GS_OK;
}

enum gs_status gs_tok__buf_put(struct gs_tok__buf *b, const void *p, size_t n)
{
    if (b->cap - b->n < n + 1) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->n < n + 1) {
            if (cap > SIZE_MAX / 2)
                return GS_NOMEM;
            cap *= 2;
        }
        char *v = gs_realloc(b->v, cap);
        if (!v)
            return GS_NOMEM;
        b->v = v;
        b->cap = cap;
    }
    if (n)
        memcpy(b->v + b->n, p, n);
    b->n += n;
    b->v[b->n] = '\0';
    return GS_OK;
}
