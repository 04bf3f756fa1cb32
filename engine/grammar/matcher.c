/*
 * engine/grammar/matcher.c - a sequence's parse stacks, and the token masks
 * computed from them.
 *
 * A matcher holds the set of parse stacks (internal.h) that the text so far
 * leaves open, each expanded so that its top is a byte set. Accepting a byte
 * advances every stack whose top admits it and expands the results again.
 *
 * Masks. Walking the vocabulary trie with the full stacks would cost a stack
 * copy per trie node, and a node per byte of every token that survives: in a
 * JSON string, nearly the whole vocabulary, every step. Two things make it
 * cheap:
 *
 *   - Frames. A walk from a stack depends mostly on its top few entries (the
 *     innermost rules). A stack's frame is its top FRAME entries; the walk is
 *     done from the frame alone, and where the frame is used up (its bottom
 *     entry finishes: an "exit") the walk notes the trie node. The walk of a
 *     frame over the whole trie, its allowed tokens and its exits, is cached
 *     in the grammar: every character inside a JSON string has the same
 *     frame, and so have all strings of a schema. Only the exits are walked
 *     again per step, against the rest of the sequence's stack (usually a
 *     handful of tokens such as `",` and `"}`).
 *   - A lazy DFA. Walks go over interned parse states (sets of stacks in a
 *     canonical form) whose transitions on each byte are computed once and
 *     kept, so a walk costs one array lookup per trie node.
 *
 * All of it lives in the grammar's cache (struct gcache), bounded by
 * max_cache_bytes: over it, the cache is emptied at the start of the next
 * mask. Matchers hold full stacks, never cache ids, so emptying is safe.
 *
 * The grammar's reference count is here too: every matcher holds one, and
 * the last reference, whoever holds it, frees the cache before the rules
 * (gs_grammar__free, gbnf.c).
 */
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/internal.h"

/* Entries of a stack that a cached walk covers; see "Frames" above. Three
 * covers a JSON string (its closing quote, the repetition of characters, the
 * character) and is shared by every string of a grammar. */
#define FRAME 3

/* ---- sets of stacks ---------------------------------------------------------- */

struct sset {
    uint32_t *data; /* the stacks' entries, one after another */
    size_t n_data, cap_data;
    uint32_t *off, *len; /* [n] where each stack is */
    uint32_t n, cap;
    uint32_t *hash; /* open addressing: stack index + 1, 0 empty */
    uint32_t hcap;
    bool has_empty; /* the empty stack (the text is complete) is in the set */
};

static void sset_free(struct sset *s)
{
    gs_free(s->data);
    gs_free(s->off);
    gs_free(s->len);
    gs_free(s->hash);
    *s = (struct sset){0};
}

static void sset_clear(struct sset *s)
{
    s->n_data = 0;
    s->n = 0;
    s->has_empty = false;
    if (s->hcap)
        memset(s->hash, 0, s->hcap * sizeof(*s->hash));
}

static uint32_t hash_stack(const uint32_t *e, uint32_t n)
{
    uint64_t h = 1469598103934665603ull ^ n;
    for (uint32_t i = 0; i < n; i++)
        h = (h ^ e[i]) * 1099511628211ull;
    return (uint32_t)(h ^ (h >> 32));
}

static bool sset_rehash(struct sset *s, uint32_t cap)
{
    uint32_t *h = gs_calloc(cap, sizeof(*h));
    if (!h)
        return false;
    for (uint32_t i = 0; i < s->n; i++) {
        uint32_t k = hash_stack(s->data + s->off[i], s->len[i]) & (cap - 1);
        while (h[k])
            k = (k + 1) & (cap - 1);
        h[k] = i + 1;
    }
    gs_free(s->hash);
    s->hash = h;
    s->hcap = cap;
    return true;
}

/* Whether the tool-less C library's realloc-by-doubling fits need. */
static bool grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return true;
    size_t nc = *cap ? *cap : 16;
    while (nc < need)
        nc *= 2;
    void *q = gs_realloc(*p, nc * elem);
    if (!q)
        return false;
    *p = q;
    *cap = nc;
    return true;
}

/* Adds stack e[n] unless present. n == 0 sets has_empty. */
static enum gs_status sset_add(struct sset *s, const uint32_t *e, uint32_t n, uint32_t max_stacks,
                               struct gs_err *err)
{
    if (n == 0) {
        s->has_empty = true;
        return GS_OK;
    }
    if ((s->n + 1) * 2 > s->hcap && !sset_rehash(s, s->hcap ? s->hcap * 2 : 16))
        return gs_err_set(err, GS_NOMEM, "grammar: out of memory");
    uint32_t k = hash_stack(e, n) & (s->hcap - 1);
    while (s->hash[k]) {
        uint32_t i = s->hash[k] - 1;
        if (s->len[i] == n && !memcmp(s->data + s->off[i], e, n * sizeof(*e)))
            return GS_OK;
        k = (k + 1) & (s->hcap - 1);
    }
    if (s->n >= max_stacks)
        return gs_err_set(err, GS_BUSY,
                          "grammar: more than %u parse stacks at once (an ambiguous grammar; "
                          "max_stacks)",
                          max_stacks);
    if (!grow((void **)&s->data, &s->cap_data, s->n_data + n, sizeof(*s->data)))
        return gs_err_set(err, GS_NOMEM, "grammar: out of memory");
    if (s->n == s->cap) {
        uint32_t nc = s->cap ? s->cap * 2 : 16;
        uint32_t *off = gs_realloc(s->off, nc * sizeof(*off));
        if (off)
            s->off = off;
        uint32_t *len = off ? gs_realloc(s->len, nc * sizeof(*len)) : NULL;
        if (!len)
            return gs_err_set(err, GS_NOMEM, "grammar: out of memory");
        s->len = len;
        s->cap = nc;
    }
    memcpy(s->data + s->n_data, e, n * sizeof(*e));
    s->off[s->n] = (uint32_t)s->n_data;
    s->len[s->n] = n;
    s->n_data += n;
    s->hash[k] = ++s->n;
    return GS_OK;
}

static enum gs_status sset_copy(struct sset *dst, const struct sset *src, uint32_t max_stacks,
                                struct gs_err *err)
{
    sset_clear(dst);
    dst->has_empty = src->has_empty;
    for (uint32_t i = 0; i < src->n; i++) {
        enum gs_status st = sset_add(dst, src->data + src->off[i], src->len[i], max_stacks, err);
        if (st)
            return st;
    }
    return GS_OK;
}

/* ---- expansion ------------------------------------------------------------ */

/* Scratch shared by the expansions of one thread's work: stacks waiting to be
 * expanded, one after another. */
struct pending {
    uint32_t *data;
    size_t n_data, cap_data;
    uint32_t *len;
    size_t n, cap;
};

struct work {
    const struct gs_grammar *g;
    struct pending pend;
    uint32_t *tmp;
    size_t cap_tmp;
    uint64_t steps; /* stack entries touched, against max_mask_work */
    struct gs_err *err;
};

static enum gs_status pend_push(struct work *w, const uint32_t *e, uint32_t n, uint32_t extra)
{
    struct pending *p = &w->pend;
    if (n + 1 > w->g->lim.max_stack_depth)
        return gs_err_set(w->err, GS_BUSY,
                          "grammar: a parse stack deeper than %u entries (max_stack_depth)",
                          w->g->lim.max_stack_depth);
    if (!grow((void **)&p->data, &p->cap_data, p->n_data + n + 1, sizeof(*p->data)) ||
        !grow((void **)&p->len, &p->cap, p->n + 1, sizeof(*p->len)))
        return gs_err_set(w->err, GS_NOMEM, "grammar: out of memory");
    memcpy(p->data + p->n_data, e, n * sizeof(*e));
    p->data[p->n_data + n] = extra;
    p->n_data += n + 1;
    p->len[p->n++] = n + 1;
    return GS_OK;
}

static enum gs_status charge(struct work *w, uint64_t n)
{
    w->steps += n;
    if (w->steps > w->g->lim.max_mask_work)
        return gs_err_set(w->err, GS_BUSY,
                          "grammar: a step took more than %llu parse operations (max_mask_work)",
                          (unsigned long long)w->g->lim.max_mask_work);
    return GS_OK;
}

/*
 * Adds to out every stack derived from the stack below[n_below] with top on
 * it (no copy of it is made first: advancing a stack past a byte is this with
 * top + 1) by expanding its top until it is a byte set: an END pops, a REF is
 * replaced by its continuation (dropped when that is an END: tail calls keep
 * stacks short) with each of the rule's alternatives pushed on top, one stack
 * per alternative. Terminates because the compiler refused left recursion.
 */
static enum gs_status expand_onto(struct work *w, const uint32_t *below, uint32_t n_below,
                                  uint32_t top, struct sset *out)
{
    const struct gs_grammar *g = w->g;
    struct pending *p = &w->pend;
    size_t base_n = p->n, base_data = p->n_data;
    enum gs_status st = pend_push(w, below, n_below, top);
    if (st)
        return st;
    while (p->n > base_n) {
        uint32_t len = p->len[--p->n];
        p->n_data -= len;
        if (!grow((void **)&w->tmp, &w->cap_tmp, (size_t)len + 2, sizeof(*w->tmp)))
            return gs_err_set(w->err, GS_NOMEM, "grammar: out of memory");
        uint32_t *s = w->tmp;
        memcpy(s, p->data + p->n_data, len * sizeof(*s));
        if ((st = charge(w, len)))
            goto fail;
        for (;;) {
            if (len == 0) {
                out->has_empty = true;
                break;
            }
            uint32_t pos = s[len - 1], el = g->el[pos];
            if (GE_KIND(el) == GE_END) {
                len--;
                continue;
            }
            if (GE_KIND(el) == GE_BYTES) {
                if ((st = sset_add(out, s, len, g->lim.max_stacks, w->err)))
                    goto fail;
                break;
            }
            uint32_t r = GE_ARG(el);
            if (GE_KIND(g->el[pos + 1]) == GE_END)
                len--;
            else
                s[len - 1] = pos + 1;
            uint32_t a0 = g->rule_alt[r], a1 = g->rule_alt[r + 1];
            for (uint32_t a = a0 + 1; a < a1; a++)
                if ((st = pend_push(w, s, len, g->alt_start[a])))
                    goto fail;
            if (len + 1 > g->lim.max_stack_depth) {
                st = gs_err_set(w->err, GS_BUSY,
                                "grammar: a parse stack deeper than %u entries (max_stack_depth)",
                                g->lim.max_stack_depth);
                goto fail;
            }
            if (!grow((void **)&w->tmp, &w->cap_tmp, (size_t)len + 1, sizeof(*w->tmp))) {
                st = gs_err_set(w->err, GS_NOMEM, "grammar: out of memory");
                goto fail;
            }
            s = w->tmp;
            s[len++] = g->alt_start[a0];
            if ((st = charge(w, 1)))
                goto fail;
        }
    }
    return GS_OK;
fail:
    p->n = base_n;
    p->n_data = base_data;
    return st;
}

/* The same for the stack e[n] (n == 0: the empty stack, the text complete). */
static enum gs_status expand(struct work *w, const uint32_t *e, uint32_t n, struct sset *out)
{
    if (!n) {
        out->has_empty = true;
        return GS_OK;
    }
    return expand_onto(w, e, n - 1, e[n - 1], out);
}

/* out = the stacks of in advanced past byte c (out is cleared first). */
static enum gs_status advance(struct work *w, const struct sset *in, uint8_t c, struct sset *out)
{
    const struct gs_grammar *g = w->g;
    sset_clear(out);
    for (uint32_t i = 0; i < in->n; i++) {
        const uint32_t *s = in->data + in->off[i];
        uint32_t n = in->len[i];
        uint32_t top = s[n - 1];
        if (!gbytes_has(&g->sets[GE_ARG(g->el[top])], c))
            continue;
        enum gs_status st = expand_onto(w, s, n - 1, top + 1, out);
        if (st)
            return st;
    }
    return GS_OK;
}

static void work_free(struct work *w)
{
    gs_free(w->pend.data);
    gs_free(w->pend.len);
    gs_free(w->tmp);
}

/* ---- the cache: interned parse states and their transitions ----------------- */

#define DEAD (-2)
#define UNKNOWN (-1)

struct pmask {
    uint64_t *bits;  /* allowed tokens of a whole-trie walk from this state */
    uint32_t *exits; /* trie nodes (with children) where a stack was used up */
    uint32_t n_exits;
};

struct pstate {
    uint32_t off, len; /* canonical form in blob: stacks as (len, entries...) */
    uint32_t n_stacks;
    bool has_empty;
    int32_t *trans; /* [256] UNKNOWN, DEAD or a state; NULL until first used */
    struct pmask *mask;
};

struct gcache {
    const struct gs_grammar_vocab *vocab;
    uint32_t *blob;
    size_t n_blob, cap_blob;
    struct pstate *st;
    size_t n_st, cap_st;
    uint32_t *hash; /* state index + 1 */
    uint32_t hcap;
    uint64_t bytes; /* what the cache holds, against max_cache_bytes */
    struct work w;
    struct sset scratch;
    uint32_t *canon; /* serialisation scratch */
    size_t cap_canon;
    uint32_t *order;
    size_t cap_order;
    int32_t *level; /* [vocab max_depth + 1] walk state per trie depth */
};

static void cache_clear_states(struct gcache *c)
{
    for (size_t i = 0; i < c->n_st; i++) {
        gs_free(c->st[i].trans);
        if (c->st[i].mask) {
            gs_free(c->st[i].mask->bits);
            gs_free(c->st[i].mask->exits);
            gs_free(c->st[i].mask);
        }
    }
    c->n_st = 0;
    c->n_blob = 0;
    if (c->hcap)
        memset(c->hash, 0, c->hcap * sizeof(*c->hash));
    c->bytes = 0;
}

static void cache_free(struct gcache *c)
{
    if (!c)
        return;
    cache_clear_states(c);
    gs_free(c->st);
    gs_free(c->blob);
    gs_free(c->hash);
    work_free(&c->w);
    sset_free(&c->scratch);
    gs_free(c->canon);
    gs_free(c->order);
    gs_free(c->level);
    gs_free(c);
}

/* Stack order for the canonical form: shorter first, then by entries. */
static int cmp_stacks(const struct sset *s, uint32_t x, uint32_t y)
{
    if (s->len[x] != s->len[y])
        return s->len[x] < s->len[y] ? -1 : 1;
    const uint32_t *p = s->data + s->off[x], *q = s->data + s->off[y];
    for (uint32_t i = 0; i < s->len[x]; i++)
        if (p[i] != q[i])
            return p[i] < q[i] ? -1 : 1;
    return 0;
}

static void sift_down(const struct sset *s, uint32_t *o, uint32_t root, uint32_t size)
{
    for (;;) {
        uint32_t child = 2 * root + 1;
        if (child >= size)
            return;
        if (child + 1 < size && cmp_stacks(s, o[child], o[child + 1]) < 0)
            child++;
        if (cmp_stacks(s, o[root], o[child]) >= 0)
            return;
        uint32_t t = o[root];
        o[root] = o[child];
        o[child] = t;
        root = child;
    }
}

/* Heapsort of the indices o[n] by cmp_stacks (qsort has no context argument,
 * and masks may be computed on several threads for different grammars). */
static void sort_stacks(const struct sset *s, uint32_t *o, uint32_t n)
{
    if (n < 2)
        return;
    for (uint32_t k = n / 2; k-- > 0;)
        sift_down(s, o, k, n);
    for (uint32_t end = n - 1; end > 0; end--) {
        uint32_t t = o[0];
        o[0] = o[end];
        o[end] = t;
        sift_down(s, o, 0, end);
    }
}

static enum gs_status nomem(struct gs_err *err)
{
    return gs_err_set(err, GS_NOMEM, "grammar: out of memory");
}

/* Interns canon[0..n) (a canonical form); returns the state's id in *id. */
static enum gs_status intern(struct gcache *c, const uint32_t *canon, size_t n, uint32_t n_stacks,
                             bool has_empty, int32_t *id, struct gs_err *err)
{
    uint64_t h64 = 1469598103934665603ull ^ (has_empty ? 0x9e37u : 0);
    for (size_t i = 0; i < n; i++)
        h64 = (h64 ^ canon[i]) * 1099511628211ull;
    uint32_t h = (uint32_t)(h64 ^ (h64 >> 32));
    if ((c->n_st + 1) * 2 > c->hcap) {
        uint32_t nc = c->hcap ? c->hcap * 2 : 1024;
        uint32_t *nh = gs_calloc(nc, sizeof(*nh));
        if (!nh)
            return nomem(err);
        for (size_t i = 0; i < c->n_st; i++) {
            const struct pstate *p = &c->st[i];
            uint64_t g64 = 1469598103934665603ull ^ (p->has_empty ? 0x9e37u : 0);
            for (size_t j = 0; j < p->len; j++)
                g64 = (g64 ^ c->blob[p->off + j]) * 1099511628211ull;
            uint32_t k = (uint32_t)(g64 ^ (g64 >> 32)) & (nc - 1);
            while (nh[k])
                k = (k + 1) & (nc - 1);
            nh[k] = (uint32_t)i + 1;
        }
        gs_free(c->hash);
        c->bytes += (uint64_t)(nc - c->hcap) * sizeof(*nh);
        c->hash = nh;
        c->hcap = nc;
    }
    uint32_t k = h & (c->hcap - 1);
    while (c->hash[k]) {
        const struct pstate *p = &c->st[c->hash[k] - 1];
        if (p->len == n && p->has_empty == has_empty &&
            !memcmp(c->blob + p->off, canon, n * sizeof(*canon))) {
            *id = (int32_t)(c->hash[k] - 1);
            return GS_OK;
        }
        k = (k + 1) & (c->hcap - 1);
    }
    size_t cap_st = c->cap_st;
    if (!grow((void **)&c->blob, &c->cap_blob, c->n_blob + n, sizeof(*c->blob)) ||
        !grow((void **)&c->st, &cap_st, c->n_st + 1, sizeof(*c->st)))
        return nomem(err);
    c->cap_st = cap_st;
    memcpy(c->blob + c->n_blob, canon, n * sizeof(*canon));
    c->st[c->n_st] = (struct pstate){.off = (uint32_t)c->n_blob,
                                     .len = (uint32_t)n,
                                     .n_stacks = n_stacks,
                                     .has_empty = has_empty};
    c->n_blob += n;
    c->bytes += n * sizeof(*canon) + sizeof(struct pstate);
    c->hash[k] = (uint32_t)++c->n_st;
    *id = (int32_t)(c->n_st - 1);
    return GS_OK;
}

/* Interns the set s (sorted into canonical order first). */
static enum gs_status intern_set(struct gcache *c, const struct sset *s, int32_t *id,
                                 struct gs_err *err)
{
    if (!grow((void **)&c->order, &c->cap_order, s->n + 1, sizeof(*c->order)) ||
        !grow((void **)&c->canon, &c->cap_canon, s->n_data + s->n + 1, sizeof(*c->canon)))
        return nomem(err);
    for (uint32_t i = 0; i < s->n; i++)
        c->order[i] = i;
    sort_stacks(s, c->order, s->n);
    size_t n = 0;
    for (uint32_t i = 0; i < s->n; i++) {
        uint32_t j = c->order[i];
        c->canon[n++] = s->len[j];
        memcpy(c->canon + n, s->data + s->off[j], s->len[j] * sizeof(*c->canon));
        n += s->len[j];
    }
    return intern(c, c->canon, n, s->n, s->has_empty, id, err);
}

/* The state holding the one stack e[n]. */
static enum gs_status intern_stack(struct gcache *c, const uint32_t *e, uint32_t n, int32_t *id,
                                   struct gs_err *err)
{
    if (!grow((void **)&c->canon, &c->cap_canon, (size_t)n + 1, sizeof(*c->canon)))
        return nomem(err);
    c->canon[0] = n;
    memcpy(c->canon + 1, e, n * sizeof(*e));
    return intern(c, c->canon, (size_t)n + 1, 1, false, id, err);
}

/* The state after byte b from state id (DEAD when nothing survives). */
static enum gs_status transition(struct gcache *c, int32_t id, uint8_t b, int32_t *next,
                                 struct gs_err *err)
{
    struct pstate *p = &c->st[id];
    if (p->trans && p->trans[b] != UNKNOWN) {
        *next = p->trans[b];
        return GS_OK;
    }
    if (!p->trans) {
        if (!(p->trans = gs_alloc_array(256, sizeof(int32_t))))
            return nomem(err);
        for (int i = 0; i < 256; i++)
            p->trans[i] = UNKNOWN;
        c->bytes += 256 * sizeof(int32_t);
    }
    /* Decode the stacks into the scratch set, advanced past b. */
    const struct gs_grammar *g = c->w.g;
    struct sset *out = &c->scratch;
    sset_clear(out);
    enum gs_status st = GS_OK;
    size_t at = p->off, end = (size_t)p->off + p->len;
    while (at < end && !st) {
        uint32_t n = c->blob[at];
        const uint32_t *e = c->blob + at + 1;
        at += (size_t)n + 1;
        uint32_t top = e[n - 1];
        if (!gbytes_has(&g->sets[GE_ARG(g->el[top])], b))
            continue;
        c->w.err = err;
        st = expand_onto(&c->w, e, n - 1, top + 1, out);
    }
    if (st)
        return st;
    int32_t r = DEAD;
    if ((out->n || out->has_empty) && (st = intern_set(c, out, &r, err)))
        return st;
    c->st[id].trans[b] = r; /* c->st may have moved */
    *next = r;
    return GS_OK;
}

struct u32vec {
    uint32_t *v;
    size_t n, cap;
};

static void set_token(const struct gs_grammar_vocab *v, uint64_t *bits, int32_t t)
{
    for (; t >= 0; t = v->same_next[t])
        bits[(uint32_t)t >> 6] |= 1ull << ((uint32_t)t & 63);
}

/*
 * Walks trie nodes [lo, hi) (the children of a node of depth base, or the
 * whole trie with base 0) from state id: sets the bits of the tokens whose
 * bytes the state accepts, and appends to exits (may be NULL) the nodes with
 * children where some stack was used up.
 */
static enum gs_status walk(struct gcache *c, int32_t id, uint32_t lo, uint32_t hi, uint32_t base,
                           uint64_t *bits, struct u32vec *exits, struct gs_err *err)
{
    const struct gs_grammar_vocab *v = c->vocab;
    const struct gnode *nodes = v->nodes;
    c->level[base] = id;
    uint32_t i = lo;
    uint64_t visited = 0;
    while (i < hi) {
        const struct gnode *nd = &nodes[i];
        int32_t s = DEAD;
        enum gs_status st = transition(c, c->level[nd->depth - 1], nd->byte, &s, err);
        if (st)
            return st;
        visited++;
        if (s == DEAD) {
            i = nd->end;
            continue;
        }
        const struct pstate *p = &c->st[s];
        if (nd->token >= 0)
            set_token(v, bits, nd->token);
        if (p->has_empty && exits && nd->end > i + 1) {
            if (!grow((void **)&exits->v, &exits->cap, exits->n + 1, sizeof(*exits->v)))
                return nomem(err);
            exits->v[exits->n++] = i;
        }
        if (p->n_stacks) {
            c->level[nd->depth] = s;
            i++;
        } else {
            i = nd->end;
        }
    }
    c->w.err = err;
    return charge(&c->w, visited);
}

/* The cached whole-trie walk of state id. */
static enum gs_status frame_mask(struct gcache *c, int32_t id, const struct pmask **out,
                                 struct gs_err *err)
{
    if (c->st[id].mask) {
        *out = c->st[id].mask;
        return GS_OK;
    }
    size_t words = ((size_t)c->vocab->n_vocab + 63) / 64;
    struct pmask *m = gs_calloc(1, sizeof(*m));
    if (!m || !(m->bits = gs_calloc(words, sizeof(uint64_t)))) {
        gs_free(m);
        return nomem(err);
    }
    struct u32vec ex = {0};
    enum gs_status st = walk(c, id, 0, c->vocab->n_nodes, 0, m->bits, &ex, err);
    if (st) {
        gs_free(ex.v);
        gs_free(m->bits);
        gs_free(m);
        return st;
    }
    m->exits = ex.v;
    m->n_exits = (uint32_t)ex.n;
    c->st[id].mask = m;
    c->bytes += words * sizeof(uint64_t) + ex.cap * sizeof(uint32_t) + sizeof(*m);
    *out = m;
    return GS_OK;
}

static enum gs_status cache_get(struct gs_grammar *g, const struct gs_grammar_vocab *v,
                                struct gcache **out, struct gs_err *err)
{
    struct gcache *c = g->cache;
    if (c && c->vocab != v) {
        cache_free(c);
        g->cache = c = NULL;
    }
    if (!c) {
        if (!(c = gs_calloc(1, sizeof(*c))))
            return nomem(err);
        c->vocab = v;
        c->w.g = g;
        if (!(c->level = gs_alloc_array((size_t)v->max_depth + 2, sizeof(*c->level)))) {
            gs_free(c);
            return nomem(err);
        }
        g->cache = c;
    }
    *out = c;
    return GS_OK;
}

/* ---- the grammar's lifetime --------------------------------------------------- */

/* The count is kept here, with the cache, because the last reference frees the
 * cache as well as the rules gbnf.c built. */
struct gs_grammar *gs_grammar_ref(struct gs_grammar *g)
{
    atomic_fetch_add_explicit(&g->refs, 1, memory_order_relaxed);
    return g;
}

void gs_grammar_unref(struct gs_grammar *g)
{
    if (g && atomic_fetch_sub_explicit(&g->refs, 1, memory_order_acq_rel) == 1) {
        cache_free(g->cache);
        gs_grammar__free(g);
    }
}

/* ---- matchers ---------------------------------------------------------------- */

struct gs_grammar_matcher {
    struct gs_grammar *g;
    const struct gs_grammar_vocab *v;
    struct sset cur;     /* the open stacks, expanded */
    struct sset step[2]; /* accept's scratch */
    struct work w;       /* accept's and the exits' expansion scratch */
    struct sset *rest;   /* [depth] the rests' expansions during a mask */
    uint32_t n_rest;
    struct u32vec *exits; /* [depth] exits of the walks below the top */
};

void gs_grammar_matcher_free(struct gs_grammar_matcher *m)
{
    if (!m)
        return;
    sset_free(&m->cur);
    sset_free(&m->step[0]);
    sset_free(&m->step[1]);
    work_free(&m->w);
    for (uint32_t i = 0; i < m->n_rest; i++) {
        sset_free(&m->rest[i]);
        gs_free(m->exits[i].v);
    }
    gs_free(m->rest);
    gs_free(m->exits);
    gs_grammar_unref(m->g);
    gs_free(m);
}

enum gs_status gs_grammar_matcher_new(struct gs_grammar *g, const struct gs_grammar_vocab *v,
                                      struct gs_grammar_matcher **out, struct gs_err *err)
{
    *out = NULL;
    struct gs_grammar_matcher *m = gs_calloc(1, sizeof(*m));
    if (!m)
        return nomem(err);
    m->g = gs_grammar_ref(g);
    m->v = v;
    m->w.g = g;
    m->w.err = err;
    uint32_t start = g->alt_start[g->rule_alt[g->root]];
    /* The root's alternatives: expand a stack that references the root. */
    enum gs_status st = GS_OK;
    uint32_t a0 = g->rule_alt[g->root], a1 = g->rule_alt[g->root + 1];
    for (uint32_t a = a0; a < a1 && !st; a++) {
        start = g->alt_start[a];
        st = expand(&m->w, &start, 1, &m->cur);
    }
    if (st) {
        gs_grammar_matcher_free(m);
        return st;
    }
    *out = m;
    return GS_OK;
}

enum gs_status gs_grammar_matcher_clone(const struct gs_grammar_matcher *m,
                                        struct gs_grammar_matcher **out, struct gs_err *err)
{
    *out = NULL;
    struct gs_grammar_matcher *c = gs_calloc(1, sizeof(*c));
    if (!c)
        return nomem(err);
    c->g = gs_grammar_ref(m->g);
    c->v = m->v;
    c->w.g = m->g;
    enum gs_status st = sset_copy(&c->cur, &m->cur, UINT32_MAX, err);
    if (st) {
        gs_grammar_matcher_free(c);
        return st;
    }
    *out = c;
    return GS_OK;
}

bool gs_grammar_matcher_can_end(const struct gs_grammar_matcher *m)
{
    return m->cur.has_empty;
}

bool gs_grammar_matcher_done(const struct gs_grammar_matcher *m)
{
    return m->cur.has_empty && m->cur.n == 0;
}

enum gs_status gs_grammar_matcher_accept_bytes(struct gs_grammar_matcher *m, const char *s,
                                               size_t n, struct gs_err *err)
{
    m->w.err = err;
    m->w.steps = 0;
    const struct sset *in = &m->cur;
    struct sset *out = NULL;
    for (size_t i = 0; i < n; i++) {
        out = &m->step[i & 1];
        enum gs_status st = advance(&m->w, in, (uint8_t)s[i], out);
        if (st)
            return st;
        if (!out->n && !out->has_empty) {
            return gs_err_set(err, GS_INVAL,
                              "grammar: byte %zu (0x%02x) of the text is not allowed here", i,
                              (unsigned)(uint8_t)s[i]);
        }
        in = out;
    }
    if (out) {
        struct sset t = m->cur;
        m->cur = *out;
        *out = t;
    }
    return GS_OK;
}

enum gs_status gs_grammar_matcher_accept(struct gs_grammar_matcher *m, int32_t token,
                                         struct gs_err *err)
{
    if (token < 0 || (uint32_t)token >= m->v->n_vocab)
        return gs_err_set(err, GS_INVAL, "grammar: token %d is out of range", (int)token);
    if (!m->v->len[token])
        return gs_err_set(err, GS_INVAL, "grammar: token %d has no text", (int)token);
    return gs_grammar_matcher_accept_bytes(m, m->v->piece[token], m->v->len[token], err);
}

/* The scratch of recursion depth d (the rest's expansion and the exits). */
static enum gs_status rest_at(struct gs_grammar_matcher *m, uint32_t d, struct gs_err *err)
{
    if (d < m->n_rest)
        return GS_OK;
    if (d >= m->g->lim.max_stack_depth)
        return gs_err_set(err, GS_BUSY, "grammar: parse stacks too deep (max_stack_depth)");
    uint32_t n = d + 1;
    struct sset *r = gs_realloc(m->rest, n * sizeof(*r));
    if (!r)
        return nomem(err);
    m->rest = r;
    struct u32vec *e = gs_realloc(m->exits, n * sizeof(*e));
    if (!e)
        return nomem(err);
    m->exits = e;
    for (uint32_t i = m->n_rest; i < n; i++) {
        m->rest[i] = (struct sset){0};
        m->exits[i] = (struct u32vec){0};
    }
    m->n_rest = n;
    return GS_OK;
}

/*
 * Sets the bits of the tokens stack s[n] accepts, over trie nodes [lo, hi)
 * below depth base (the whole trie: lo 0, hi n_nodes, base 0, from the
 * cache). The frame (top FRAME entries) is walked; where it is used up, the
 * rest of the stack continues from that node, recursively.
 */
static enum gs_status mask_stack(struct gs_grammar_matcher *m, struct gcache *c, const uint32_t *s,
                                 uint32_t n, uint32_t lo, uint32_t hi, uint32_t base, uint32_t d,
                                 uint64_t *bits, struct gs_err *err)
{
    uint32_t fl = GS_MIN(n, FRAME), rl = n - fl;
    int32_t id;
    enum gs_status st = intern_stack(c, s + rl, fl, &id, err);
    if (st || (st = rest_at(m, d, err)))
        return st;
    const uint32_t *exits;
    size_t n_exits;
    if (base == 0 && lo == 0 && hi == c->vocab->n_nodes) {
        const struct pmask *pm = NULL;
        if ((st = frame_mask(c, id, &pm, err)))
            return st;
        size_t words = ((size_t)c->vocab->n_vocab + 63) / 64;
        for (size_t i = 0; i < words; i++)
            bits[i] |= pm->bits[i];
        exits = pm->exits;
        n_exits = pm->n_exits;
    } else {
        struct u32vec *ev = &m->exits[d];
        ev->n = 0;
        if ((st = walk(c, id, lo, hi, base, bits, ev, err)))
            return st;
        exits = ev->v;
        n_exits = ev->n;
    }
    if (!rl || !n_exits)
        return GS_OK;
    /* The rest continues where the frame was used up. Its expansion is
     * shared by every exit; the exits' own walks use the next depth. */
    struct sset *rest = &m->rest[d];
    sset_clear(rest);
    m->w.err = err;
    if ((st = expand(&m->w, s, rl, rest)))
        return st;
    for (size_t k = 0; k < n_exits; k++) {
        uint32_t e = exits[k];
        const struct gnode *nd = &c->vocab->nodes[e];
        for (uint32_t j = 0; j < m->rest[d].n; j++) {
            rest = &m->rest[d]; /* rest_at below may move the array */
            if ((st = mask_stack(m, c, rest->data + rest->off[j], rest->len[j], e + 1, nd->end,
                                 nd->depth, d + 1, bits, err)))
                return st;
        }
    }
    return GS_OK;
}

enum gs_status gs_grammar_matcher_mask(struct gs_grammar_matcher *m, uint64_t *allow,
                                       bool *can_end, struct gs_err *err)
{
    struct gcache *c = NULL;
    enum gs_status st = cache_get(m->g, m->v, &c, err);
    if (st)
        return st;
    if (c->bytes > m->g->lim.max_cache_bytes)
        cache_clear_states(c);
    c->w.steps = 0;
    m->w.steps = 0;
    m->w.err = err;
    size_t words = ((size_t)m->v->n_vocab + 63) / 64;
    memset(allow, 0, words * sizeof(*allow));
    for (uint32_t i = 0; i < m->cur.n; i++) {
        st = mask_stack(m, c, m->cur.data + m->cur.off[i], m->cur.len[i], 0, m->v->n_nodes, 0, 0,
                        allow, err);
        if (st)
            return st;
        if (c->bytes > 2 * m->g->lim.max_cache_bytes)
            return gs_err_set(err, GS_BUSY,
                              "grammar: one step's masks need more than twice max_cache_bytes");
    }
    if (can_end)
        *can_end = m->cur.has_empty;
    return GS_OK;
}
