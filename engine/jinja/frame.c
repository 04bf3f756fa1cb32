/*
 * engine/jinja/frame.c - a render's scopes: each frame maps names to values
 * and points to the frame around it; a lookup walks outwards to the globals.
 * The evaluator opens frames (eval.c), the globals are set by filters.c, and
 * the parser stores each name's hash in its node so that a lookup need not
 * hash it again.
 */
#include "engine/jinja/internal.h"

#include <string.h>

struct jframe *gs_jinja__frame_new(struct jctx *cx, struct jframe *parent)
{
    struct jframe *f = gs_jinja__alloc(&cx->arena, sizeof(*f));
    if (!f) {
        gs_jinja__nomem(cx);
        return NULL;
    }
    memset(f, 0, sizeof(*f));
    f->parent = parent;
    return f;
}

/* FNV-1a of a name: frames compare hashes before names, since a lookup walks
 * every frame up to the globals and most names it passes are not the one. */
uint32_t gs_jinja__name_hash(const char *name)
{
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        h = (h ^ *p) * 16777619u;
    return h;
}

int gs_jinja__frame_set(struct jctx *cx, struct jframe *f, const char *name, struct jv v)
{
    uint32_t h = gs_jinja__name_hash(name);
    for (size_t i = 0; i < f->n; i++)
        if (f->hashes[i] == h && strcmp(f->names[i], name) == 0) {
            f->vals[i] = v;
            return 0;
        }
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 8;
        const char **names = gs_jinja__alloc_array(&cx->arena, cap, sizeof(*names));
        struct jv *vals = gs_jinja__alloc_array(&cx->arena, cap, sizeof(*vals));
        uint32_t *hashes = gs_jinja__alloc_array(&cx->arena, cap, sizeof(*hashes));
        if (!names || !vals || !hashes)
            return gs_jinja__nomem(cx);
        if (f->n) {
            memcpy(names, f->names, f->n * sizeof(*names));
            memcpy(vals, f->vals, f->n * sizeof(*vals));
            memcpy(hashes, f->hashes, f->n * sizeof(*hashes));
        }
        f->names = names;
        f->vals = vals;
        f->hashes = hashes;
        f->cap = cap;
    }
    f->names[f->n] = name;
    f->vals[f->n] = v;
    f->hashes[f->n] = h;
    f->n++;
    return 0;
}

bool gs_jinja__frame_get(const struct jframe *f, const char *name, uint32_t hash, struct jv *out)
{
    for (; f; f = f->parent)
        for (size_t i = f->n; i-- > 0;)
            if (f->hashes[i] == hash && strcmp(f->names[i], name) == 0) {
                *out = f->vals[i];
                return true;
            }
    return false;
}
