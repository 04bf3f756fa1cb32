/*
 * engine/tok/lookup.c - the two hash tables every encoder reads: token text
 * to id (gs_tok.hash) and (left, right) to merge (gs_tok.merges). vocab.c
 * fills them; this file only reads them, so the encoders depend on it and
 * not on the loader.
 */
#include "engine/tok/internal.h"

#include <string.h>

uint64_t gs_tok__hash_bytes(const char *s, size_t len)
{
    /* FNV-1a, then a final mix so that the low bits (the slot) depend on
     * every byte. */
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}

int32_t gs_tok__lookup(const struct gs_tok *t, const char *s, size_t len)
{
    uint64_t i = gs_tok__hash_bytes(s, len) & t->hash_mask;
    for (;;) {
        uint32_t slot = t->hash[i];
        if (slot == 0)
            return GS_TOK_NULL;
        const struct gs_tok__entry *e = &t->vocab[slot - 1];
        if (e->len == len && memcmp(t->pool + e->off, s, len) == 0)
            return (int32_t)(slot - 1);
        i = (i + 1) & t->hash_mask;
    }
}

uint64_t gs_tok__merge_hash(int32_t left, int32_t right)
{
    uint64_t h = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

const struct gs_tok__merge *gs_tok__merge_find(const struct gs_tok *t, int32_t left, int32_t right)
{
    if (!t->merges || left < 0 || right < 0)
        return NULL;
    uint64_t i = gs_tok__merge_hash(left, right) & t->merge_mask;
    for (;;) {
        const struct gs_tok__merge *m = &t->merges[i];
        if (m->left == GS_TOK_NULL)
            return NULL;
        if (m->left == left && m->right == right)
            return m;
        i = (i + 1) & t->merge_mask;
    }
}
