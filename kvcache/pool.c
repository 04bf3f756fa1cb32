/* kvcache/pool.c - the page pool, page refcounts and hashes, page tables. */
#include "kvcache/kvcache.h"

#include <string.h>

/*
 * A page is in exactly one of three states:
 *   used    refcount > 0 (possibly registered in the prefix map as well)
 *   cached  refcount == 0, registered in the prefix map, on the LRU list:
 *           its contents are still valid and a lookup can revive it
 *   free    refcount == 0, not registered, on the free list
 * Allocation takes a free page first and evicts the least recently used cached
 * page only when none is free, so cached prefixes live as long as possible.
 */
struct page_meta {
    uint32_t refcount;
    uint32_t next_free;  /* free-list link while free */
    uint32_t lru_prev;   /* LRU links while cached */
    uint32_t lru_next;
    uint32_t map_next;   /* next page in the same prefix-map bucket while registered */
    uint64_t hash;
    bool hashed;         /* hash holds the page's content hash */
    bool registered;     /* in the prefix map under hash */
};

struct gs_kv_pool {
    struct gs_kv_pool_cfg cfg;
    uint64_t page_bytes;
    char *data;               /* [n_pages * page_bytes] */
    struct page_meta *meta;   /* [n_pages] */
    uint32_t free_head;
    uint32_t n_free;          /* pages on the free list */
    uint32_t lru_head;        /* least recently used cached page */
    uint32_t lru_tail;
    uint32_t n_cached;        /* pages on the LRU list */
    uint32_t *buckets;        /* [n_buckets] prefix map heads */
    uint32_t n_buckets;       /* a power of two */
    uint64_t n_evictions;
    uint64_t n_hits;       /* pages found by gs_kv_prefix_lookup and append_copy */
    uint64_t n_hit_tokens; /* positions they covered */
};

enum gs_status gs_kv_pool_new(const struct gs_kv_pool_cfg *cfg, struct gs_kv_pool **out,
                              struct gs_err *err)
{
    *out = NULL;
    struct gs_kv_pool_cfg c = *cfg;
    if (c.page_tokens == 0)
        c.page_tokens = GS_KV_DEFAULT_PAGE_TOKENS;
    if (c.n_layer == 0 || c.kv_dim == 0 || c.n_pages == 0 || c.n_pages == GS_KV_PAGE_NONE)
        return gs_err_set(err, GS_INVAL, "kv pool: n_layer, kv_dim and n_pages must be positive");
    const uint64_t row_bytes = gs_kv_row_bytes(c.type, c.kv_dim);
    if (!row_bytes)
        return gs_err_set(err, GS_INVAL, "kv pool: type %s is not f32, f16 or q8_0",
                          gs_type_name(c.type));
    uint64_t page_bytes, total;
    if (gs_mul_overflow((uint64_t)c.n_layer * 2 * c.page_tokens, row_bytes, &page_bytes) ||
        gs_mul_overflow(page_bytes, c.n_pages, &total) || total > SIZE_MAX)
        return gs_err_set(err, GS_INVAL, "kv pool: %u pages overflow the address space",
                          c.n_pages);
    struct gs_kv_pool *p = gs_calloc(1, sizeof(*p));
    if (!p)
        return gs_err_set(err, GS_NOMEM, "kv pool: out of memory");
    p->cfg = c;
    p->page_bytes = page_bytes;
    p->data = gs_alloc_pages((size_t)total);
    p->meta = gs_calloc(c.n_pages, sizeof(*p->meta));
    p->n_buckets = 1;
    while (p->n_buckets < c.n_pages)
        p->n_buckets <<= 1;
    p->buckets = gs_alloc_array(p->n_buckets, sizeof(*p->buckets));
    if (!p->data || !p->meta || !p->buckets) {
        gs_kv_pool_free(p);
        return gs_err_set(err, GS_NOMEM, "kv pool: out of memory for %llu bytes",
                          (unsigned long long)total);
    }
    /* Free list in increasing page order, so allocation is deterministic. */
    for (uint32_t i = 0; i < c.n_pages; i++)
        p->meta[i].next_free = i + 1 < c.n_pages ? i + 1 : GS_KV_PAGE_NONE;
    p->free_head = 0;
    p->n_free = c.n_pages;
    for (uint32_t i = 0; i < p->n_buckets; i++)
        p->buckets[i] = GS_KV_PAGE_NONE;
    p->lru_head = p->lru_tail = GS_KV_PAGE_NONE;
    *out = p;
    return GS_OK;
}

void gs_kv_pool_free(struct gs_kv_pool *pool)
{
    if (!pool)
        return;
    gs_free_pages(pool->data, (size_t)pool->cfg.n_pages * pool->page_bytes);
    gs_free(pool->meta);
    gs_free(pool->buckets);
    gs_free(pool);
}

struct gs_kv_layout gs_kv_pool_layout(const struct gs_kv_pool *pool)
{
    struct gs_kv_layout l = {
        .base = pool->data,
        .n_pages = pool->cfg.n_pages,
        .page_tokens = pool->cfg.page_tokens,
        .n_layer = pool->cfg.n_layer,
        .kv_dim = pool->cfg.kv_dim,
        .type = pool->cfg.type,
        .row_bytes = gs_kv_row_bytes(pool->cfg.type, pool->cfg.kv_dim),
        .page_bytes = pool->page_bytes,
    };
    return l;
}

struct gs_kv_view gs_kv_pool_view(const struct gs_kv_pool *pool)
{
    const struct gs_kv_layout l = gs_kv_pool_layout(pool);
    return (struct gs_kv_view){
        .base = l.base,
        .type = l.type,
        .n_pages = l.n_pages,
        .page_tokens = l.page_tokens,
        .n_layer = l.n_layer,
        .kv_dim = l.kv_dim,
        .page_bytes = l.page_bytes,
    };
}

uint32_t gs_kv_pool_n_free(const struct gs_kv_pool *pool)
{
    return pool->n_free + pool->n_cached;
}

uint32_t gs_kv_pool_n_unused(const struct gs_kv_pool *pool)
{
    return pool->n_free;
}

void gs_kv_pool_stats(const struct gs_kv_pool *pool, struct gs_kv_stats *out)
{
    out->pages_total = pool->cfg.n_pages;
    out->pages_free = pool->n_free;
    out->pages_cached = pool->n_cached;
    out->pages_used = pool->cfg.n_pages - pool->n_free - pool->n_cached;
    out->n_evictions = pool->n_evictions;
    out->n_hits = pool->n_hits;
    out->n_hit_tokens = pool->n_hit_tokens;
    out->page_bytes = pool->page_bytes;
}

/* ---- prefix map and LRU ------------------------------------------------------- */

/* Page dst's K/V bytes become page src's (every layer, both halves). */
static void page_copy(struct gs_kv_pool *pool, uint32_t dst, uint32_t src)
{
    memcpy(pool->data + (uint64_t)dst * pool->page_bytes,
           pool->data + (uint64_t)src * pool->page_bytes, pool->page_bytes);
}

static uint32_t bucket_index(const struct gs_kv_pool *pool, uint64_t hash)
{
    return (uint32_t)((hash ^ (hash >> 32)) & (pool->n_buckets - 1));
}

static uint32_t *bucket_of(struct gs_kv_pool *pool, uint64_t hash)
{
    return &pool->buckets[bucket_index(pool, hash)];
}

static void map_remove(struct gs_kv_pool *pool, uint32_t page)
{
    struct page_meta *m = &pool->meta[page];
    if (!m->registered)
        return;
    uint32_t *link = bucket_of(pool, m->hash);
    while (*link != page && GS_ALWAYS(*link != GS_KV_PAGE_NONE))
        link = &pool->meta[*link].map_next;
    if (*link == page)
        *link = m->map_next;
    m->registered = false;
    m->map_next = GS_KV_PAGE_NONE;
}

static uint32_t map_find(const struct gs_kv_pool *pool, uint64_t hash)
{
    uint32_t p = pool->buckets[bucket_index(pool, hash)];
    while (p != GS_KV_PAGE_NONE && pool->meta[p].hash != hash)
        p = pool->meta[p].map_next;
    return p;
}

static void lru_remove(struct gs_kv_pool *pool, uint32_t page)
{
    struct page_meta *m = &pool->meta[page];
    if (m->lru_prev != GS_KV_PAGE_NONE)
        pool->meta[m->lru_prev].lru_next = m->lru_next;
    else
        pool->lru_head = m->lru_next;
    if (m->lru_next != GS_KV_PAGE_NONE)
        pool->meta[m->lru_next].lru_prev = m->lru_prev;
    else
        pool->lru_tail = m->lru_prev;
    m->lru_prev = m->lru_next = GS_KV_PAGE_NONE;
    pool->n_cached--;
}

static void lru_push(struct gs_kv_pool *pool, uint32_t page)
{
    struct page_meta *m = &pool->meta[page];
    m->lru_next = GS_KV_PAGE_NONE;
    m->lru_prev = pool->lru_tail;
    if (pool->lru_tail != GS_KV_PAGE_NONE)
        pool->meta[pool->lru_tail].lru_next = page;
    else
        pool->lru_head = page;
    pool->lru_tail = page;
    pool->n_cached++;
}

static void free_push(struct gs_kv_pool *pool, uint32_t page)
{
    pool->meta[page].next_free = pool->free_head;
    pool->free_head = page;
    pool->n_free++;
}

bool gs_kv_prefix_lookup(struct gs_kv_pool *pool, uint64_t hash, uint32_t *page)
{
    uint32_t p = map_find(pool, hash);
    if (p == GS_KV_PAGE_NONE)
        return false;
    if (pool->meta[p].refcount == 0)
        lru_remove(pool, p); /* revive a cached page */
    pool->meta[p].refcount++;
    pool->n_hits++;
    pool->n_hit_tokens += pool->cfg.page_tokens;
    *page = p;
    return true;
}

bool gs_kv_page_cache_copy(struct gs_kv_pool *pool, uint32_t page, uint64_t hash)
{
    if (GS_NEVER(page >= pool->cfg.n_pages || pool->meta[page].refcount == 0))
        return false;
    if (pool->n_free == 0 || map_find(pool, hash) != GS_KV_PAGE_NONE)
        return false;
    uint32_t copy;
    if (gs_kv_page_alloc(pool, &copy, NULL) != GS_OK) /* cannot fail: a page is free */
        return false;
    page_copy(pool, copy, page);
    gs_kv_page_set_hash(pool, copy, hash);
    gs_kv_page_unref(pool, copy);
    return true;
}

uint32_t gs_kv_pool_page_tokens(const struct gs_kv_pool *pool)
{
    return pool->cfg.page_tokens;
}

enum gs_status gs_kv_page_alloc(struct gs_kv_pool *pool, uint32_t *page, struct gs_err *err)
{
    *page = GS_KV_PAGE_NONE;
    uint32_t id;
    if (pool->free_head != GS_KV_PAGE_NONE) {
        id = pool->free_head;
        pool->free_head = pool->meta[id].next_free;
        pool->n_free--;
    } else if (pool->lru_head != GS_KV_PAGE_NONE) {
        id = pool->lru_head; /* evict the least recently used cached prefix */
        lru_remove(pool, id);
        map_remove(pool, id);
        pool->n_evictions++;
    } else {
        return gs_err_set(err, GS_BUSY, "kv pool: all %u pages are in use", pool->cfg.n_pages);
    }
    struct page_meta *m = &pool->meta[id];
    m->refcount = 1;
    m->next_free = GS_KV_PAGE_NONE;
    m->hashed = false;
    m->hash = 0;
    *page = id;
    return GS_OK;
}

void gs_kv_page_ref(struct gs_kv_pool *pool, uint32_t page)
{
    if (GS_NEVER(page >= pool->cfg.n_pages || pool->meta[page].refcount == 0))
        return;
    pool->meta[page].refcount++;
}

void gs_kv_page_unref(struct gs_kv_pool *pool, uint32_t page)
{
    if (GS_NEVER(page >= pool->cfg.n_pages || pool->meta[page].refcount == 0))
        return;
    struct page_meta *m = &pool->meta[page];
    if (--m->refcount > 0)
        return;
    if (m->registered) {
        lru_push(pool, page); /* keep the contents for a later prefix hit */
        return;
    }
    m->hashed = false;
    free_push(pool, page);
}

uint32_t gs_kv_page_refcount(const struct gs_kv_pool *pool, uint32_t page)
{
    return page < pool->cfg.n_pages ? pool->meta[page].refcount : 0;
}

enum gs_kv_page_state gs_kv_page_state(const struct gs_kv_pool *pool, uint32_t page)
{
    if (page >= pool->cfg.n_pages)
        return GS_KV_PAGE_FREE;
    const struct page_meta *m = &pool->meta[page];
    return m->refcount     ? GS_KV_PAGE_USED
           : m->registered ? GS_KV_PAGE_CACHED
                           : GS_KV_PAGE_FREE;
}

uint64_t gs_kv_hash_tokens(uint64_t parent, const int32_t *tokens, uint32_t n)
{
    /* FNV-1a over the parent hash then the token ids, little-endian bytes. */
    uint64_t h = GS_KV_HASH_SEED;
    for (int i = 0; i < 8; i++) {
        h ^= (parent >> (8 * i)) & 0xff;
        h *= 0x100000001b3ull;
    }
    for (uint32_t t = 0; t < n; t++)
        for (int i = 0; i < 4; i++) {
            h ^= ((uint32_t)tokens[t] >> (8 * i)) & 0xff;
            h *= 0x100000001b3ull;
        }
    return h;
}

void gs_kv_page_set_hash(struct gs_kv_pool *pool, uint32_t page, uint64_t hash)
{
    if (GS_NEVER(page >= pool->cfg.n_pages || pool->meta[page].refcount == 0))
        return;
    struct page_meta *m = &pool->meta[page];
    map_remove(pool, page);
    m->hash = hash;
    m->hashed = true;
    /* The first page registered under a hash stays the one lookups find; an
     * identical page computed later is simply not shared. */
    if (map_find(pool, hash) == GS_KV_PAGE_NONE) {
        uint32_t *head = bucket_of(pool, hash);
        m->map_next = *head;
        *head = page;
        m->registered = true;
    }
}

bool gs_kv_page_hash(const struct gs_kv_pool *pool, uint32_t page, uint64_t *hash)
{
    if (page >= pool->cfg.n_pages || !pool->meta[page].hashed)
        return false;
    *hash = pool->meta[page].hash;
    return true;
}

enum gs_status gs_kv_page_cow(struct gs_kv_pool *pool, uint32_t *page, struct gs_err *err)
{
    uint32_t old = *page;
    if (GS_NEVER(old >= pool->cfg.n_pages || pool->meta[old].refcount == 0))
        return gs_err_set(err, GS_INVAL, "kv pool: page %u is not allocated", old);
    if (pool->meta[old].refcount == 1) {
        /* about to be written: its contents will no longer match its hash */
        map_remove(pool, old);
        pool->meta[old].hashed = false;
        return GS_OK;
    }
    uint32_t fresh;
    enum gs_status st = gs_kv_page_alloc(pool, &fresh, err);
    if (st)
        return st;
    page_copy(pool, fresh, old);
    gs_kv_page_unref(pool, old);
    *page = fresh;
    return GS_OK;
}

/* ---- sequences ------------------------------------------------------------------ */

void gs_kv_seq_init(struct gs_kv_seq *seq)
{
    memset(seq, 0, sizeof(*seq));
}

/* Makes room for need entries in seq's page table. */
static bool seq_grow(struct gs_kv_seq *seq, uint32_t need)
{
    if (need <= seq->cap_pages)
        return true;
    uint32_t cap = GS_MAX(need, 2 * seq->cap_pages);
    uint32_t *pages = gs_realloc(seq->pages, (size_t)cap * sizeof(*pages));
    if (!pages)
        return false;
    seq->pages = pages;
    seq->cap_pages = cap;
    return true;
}

bool gs_kv_seq_append_cached(struct gs_kv_pool *pool, struct gs_kv_seq *seq, uint64_t hash)
{
    uint32_t page;
    if (!seq_grow(seq, seq->n_pages + 1) || !gs_kv_prefix_lookup(pool, hash, &page))
        return false;
    seq->pages[seq->n_pages++] = page;
    seq->n_tokens = seq->n_pages * pool->cfg.page_tokens;
    return true;
}

bool gs_kv_seq_append_copy(struct gs_kv_pool *pool, struct gs_kv_seq *seq, uint64_t hash,
                           uint32_t n_tokens)
{
    const uint32_t pt = pool->cfg.page_tokens;
    if (GS_NEVER(n_tokens == 0 || n_tokens >= pt || seq->n_tokens != seq->n_pages * pt))
        return false;
    uint32_t src = map_find(pool, hash), copy;
    if (src == GS_KV_PAGE_NONE || !seq_grow(seq, seq->n_pages + 1))
        return false;
    /* Held while the copy is taken, so that the allocation cannot evict it. */
    if (pool->meta[src].refcount == 0)
        lru_remove(pool, src);
    pool->meta[src].refcount++;
    bool ok = gs_kv_page_alloc(pool, &copy, NULL) == GS_OK;
    if (ok)
        page_copy(pool, copy, src);
    gs_kv_page_unref(pool, src);
    if (!ok)
        return false;
    pool->n_hits++;
    pool->n_hit_tokens += n_tokens;
    seq->pages[seq->n_pages++] = copy;
    seq->n_tokens += n_tokens;
    return true;
}

enum gs_status gs_kv_seq_reserve(struct gs_kv_pool *pool, struct gs_kv_seq *seq,
                                 uint32_t n_tokens, struct gs_err *err)
{
    uint32_t pt = pool->cfg.page_tokens;
    uint32_t need = (uint32_t)(((uint64_t)n_tokens + pt - 1) / pt);
    if (need <= seq->n_pages) {
        seq->n_tokens = GS_MAX(seq->n_tokens, n_tokens);
        return GS_OK;
    }
    if (need - seq->n_pages > gs_kv_pool_n_free(pool))
        return gs_err_set(err, GS_BUSY, "kv pool: %u more pages needed, %u free",
                          need - seq->n_pages, gs_kv_pool_n_free(pool));
    if (!seq_grow(seq, need))
        return gs_err_set(err, GS_NOMEM, "kv pool: out of memory for a page table");
    /* Cannot fail: enough pages were counted free above. */
    while (seq->n_pages < need)
        gs_kv_page_alloc(pool, &seq->pages[seq->n_pages++], NULL);
    seq->n_tokens = n_tokens;
    return GS_OK;
}

void gs_kv_seq_truncate(struct gs_kv_pool *pool, struct gs_kv_seq *seq, uint32_t n_tokens)
{
    if (GS_NEVER(n_tokens > seq->n_tokens))
        return;
    uint32_t pt = pool->cfg.page_tokens;
    uint32_t keep = (uint32_t)(((uint64_t)n_tokens + pt - 1) / pt);
    while (seq->n_pages > keep)
        gs_kv_page_unref(pool, seq->pages[--seq->n_pages]);
    seq->n_tokens = n_tokens;
}

void gs_kv_seq_release(struct gs_kv_pool *pool, struct gs_kv_seq *seq)
{
    for (uint32_t i = 0; i < seq->n_pages; i++)
        gs_kv_page_unref(pool, seq->pages[i]);
    gs_free(seq->pages);
    gs_kv_seq_init(seq);
}

/* ---- checks ------------------------------------------------------------------------- */

enum gs_status gs_kv_pool_check(const struct gs_kv_pool *pool, struct gs_err *err)
{
    const uint32_t n = pool->cfg.n_pages;
    uint32_t n_free = 0, n_cached = 0;
    for (uint32_t p = pool->free_head; p != GS_KV_PAGE_NONE; p = pool->meta[p].next_free) {
        const struct page_meta *m = &pool->meta[p];
        if (p >= n || ++n_free > n)
            return gs_err_set(err, GS_INVAL, "kv pool: the free list is broken at page %u", p);
        if (m->refcount || m->registered)
            return gs_err_set(err, GS_INVAL, "kv pool: free page %u has refcount %u%s", p,
                              m->refcount, m->registered ? " and is registered" : "");
    }
    uint32_t prev = GS_KV_PAGE_NONE;
    for (uint32_t p = pool->lru_head; p != GS_KV_PAGE_NONE; p = pool->meta[p].lru_next) {
        const struct page_meta *m = &pool->meta[p];
        if (p >= n || ++n_cached > n || m->lru_prev != prev)
            return gs_err_set(err, GS_INVAL, "kv pool: the LRU list is broken at page %u", p);
        if (m->refcount || !m->registered)
            return gs_err_set(err, GS_INVAL, "kv pool: cached page %u has refcount %u%s", p,
                              m->refcount, m->registered ? "" : " and is not registered");
        prev = p;
    }
    if (prev != pool->lru_tail)
        return gs_err_set(err, GS_INVAL, "kv pool: the LRU tail is not its last page");
    if (n_free != pool->n_free || n_cached != pool->n_cached)
        return gs_err_set(err, GS_INVAL, "kv pool: %u free and %u cached pages counted, %u and %u "
                          "listed", pool->n_free, pool->n_cached, n_free, n_cached);
    uint32_t n_unref = 0;
    for (uint32_t p = 0; p < n; p++) {
        const struct page_meta *m = &pool->meta[p];
        n_unref += m->refcount == 0;
        if (m->registered && (!m->hashed || map_find(pool, m->hash) != p))
            return gs_err_set(err, GS_INVAL, "kv pool: registered page %u is not found under "
                              "its hash", p);
    }
    if (n_unref != n_free + n_cached)
        return gs_err_set(err, GS_INVAL, "kv pool: %u unreferenced pages, %u free or cached",
                          n_unref, n_free + n_cached);
    return GS_OK;
}
