/*
 * engine/grammar/vocab.c - a vocabulary's tokens as one flattened trie
 * (internal.h): the tokens sorted by their bytes, each new byte after the
 * common prefix with the previous token a node, in preorder. A mask walk
 * visits a node per byte and skips a whole subtree when the grammar refuses
 * its first byte.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/internal.h"

/* Tokens longer than this are never allowed (no vocabulary has them; the
 * trie's depth field is 16 bits). */
#define VOCAB_MAX_TOKEN_BYTES 4096

struct tok_ref {
    const char *p;
    uint32_t len;
    int32_t id;
};

/* Token order: bytes, then shorter first (a prefix before its extensions),
 * then id. */
static int cmp_token(const void *a, const void *b)
{
    const struct tok_ref *x = a, *y = b;
    int r = memcmp(x->p, y->p, GS_MIN(x->len, y->len));
    if (r)
        return r;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : 1;
}

void gs_grammar_vocab_free(struct gs_grammar_vocab *v)
{
    if (!v)
        return;
    for (uint32_t i = 0; i < v->n_vocab && v->piece; i++)
        gs_free(v->piece[i]);
    gs_free(v->piece);
    gs_free(v->len);
    gs_free(v->same_next);
    gs_free(v->nodes);
    gs_free(v);
}

uint32_t gs_grammar_vocab_n(const struct gs_grammar_vocab *v)
{
    return v->n_vocab;
}

const char *gs_grammar_vocab_piece(const struct gs_grammar_vocab *v, int32_t t, uint32_t *len)
{
    *len = v->len[t];
    return v->piece[t] ? v->piece[t] : "";
}

uint32_t gs_grammar_vocab_max_len(const struct gs_grammar_vocab *v)
{
    return v->max_depth;
}

enum gs_status gs_grammar_vocab_new(const char *const *pieces, const uint32_t *lens,
                                    uint32_t n_vocab, struct gs_grammar_vocab **out,
                                    struct gs_err *err)
{
    *out = NULL;
    if (n_vocab == 0 || n_vocab > (1u << 30))
        return gs_err_set(err, GS_INVAL, "grammar vocabulary: %u tokens", n_vocab);
    struct gs_grammar_vocab *v = gs_calloc(1, sizeof(*v));
    struct tok_ref *order = NULL;
    uint32_t *path = NULL;
    if (!v)
        goto nomem;
    v->n_vocab = n_vocab;
    v->piece = gs_calloc(n_vocab, sizeof(*v->piece));
    v->len = gs_calloc(n_vocab, sizeof(*v->len));
    v->same_next = gs_alloc_array(n_vocab, sizeof(*v->same_next));
    order = gs_alloc_array(n_vocab, sizeof(*order));
    if (!v->piece || !v->len || !v->same_next || !order)
        goto nomem;
    uint32_t n_text = 0;
    uint64_t total = 0;
    for (uint32_t i = 0; i < n_vocab; i++) {
        v->same_next[i] = -1;
        uint32_t l = lens[i];
        if (!l || l > VOCAB_MAX_TOKEN_BYTES)
            continue;
        if (!(v->piece[i] = gs_malloc(l)))
            goto nomem;
        memcpy(v->piece[i], pieces[i], l);
        v->len[i] = l;
        order[n_text++] = (struct tok_ref){v->piece[i], l, (int32_t)i};
        total += l;
    }
    qsort(order, n_text, sizeof(*order), cmp_token);

    /* At most one node per byte of all tokens. */
    v->nodes = gs_alloc_array(total + 1, sizeof(*v->nodes));
    path = gs_alloc_array(VOCAB_MAX_TOKEN_BYTES + 1, sizeof(*path));
    if (!v->nodes || !path)
        goto nomem;
    uint32_t n_nodes = 0, depth = 0, max_depth = 0;
    int32_t prev = -1;
    for (uint32_t k = 0; k < n_text; k++) {
        int32_t t = order[k].id;
        const char *s = v->piece[t];
        uint32_t l = v->len[t];
        uint32_t lcp = 0;
        if (prev >= 0) {
            uint32_t pl = v->len[prev];
            while (lcp < l && lcp < pl && v->piece[prev][lcp] == s[lcp])
                lcp++;
            if (lcp == l && pl == l) {
                /* Same bytes as the previous token: chain it. */
                int32_t head = v->nodes[path[depth - 1]].token;
                while (v->same_next[head] >= 0)
                    head = v->same_next[head];
                v->same_next[head] = t;
                continue;
            }
        }
        /* Close the nodes below the common prefix. */
        while (depth > lcp) {
            v->nodes[path[depth - 1]].end = n_nodes;
            depth--;
        }
        for (uint32_t i = lcp; i < l; i++) {
            v->nodes[n_nodes] = (struct gnode){
                .end = 0, .token = -1, .depth = (uint16_t)(i + 1), .byte = (uint8_t)s[i]};
            path[depth++] = n_nodes++;
        }
        v->nodes[path[depth - 1]].token = t;
        if (depth > max_depth)
            max_depth = depth;
        prev = t;
    }
    while (depth > 0) {
        v->nodes[path[depth - 1]].end = n_nodes;
        depth--;
    }
    v->n_nodes = n_nodes;
    v->max_depth = max_depth;
    gs_free(order);
    gs_free(path);
    *out = v;
    return GS_OK;
nomem:
    gs_free(order);
    gs_free(path);
    gs_grammar_vocab_free(v);
    return gs_err_set(err, GS_NOMEM, "grammar vocabulary: out of memory");
}
