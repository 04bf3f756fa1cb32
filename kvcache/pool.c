/* kvcache/pool.c - the page pool, page refcounts and hashes, page tables. */
#include "kvcache/kvcache.h"

#include <string.h>

struct page_meta {
    uint32_t refcount;
    uint32_t next_free; /* free-list link while refcount == 0 */
    uint64_t hash;
    bool hashed;
};

struct gs_kv_pool {
    struct gs_kv_pool_cfg cfg;
    uint64_t page_bytes;
    char *data;               /* [n_pages * page_bytes] */
    struct page_meta *meta;   /* [n_pages] */
    uint32_t free_head;
    uint32_t n_free;
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
    if (c.elem_bytes != 2 && c.elem_bytes != 4)
        return gs_err_set(err, GS_INVAL, "kv pool: elem_bytes %u is neither 2 nor 4",
                          c.elem_bytes);
    uint64_t page_bytes, total;
    if (gs_mul_overflow((uint64_t)c.n_layer * 2 * c.page_tokens, (uint64_t)c.kv_dim * c.elem_bytes,
                        &page_bytes) ||
        gs_mul_overflow(page_bytes, c.n_pages, &total) || total > SIZE_MAX)
        return gs_err_set(err, GS_INVAL, "kv pool: %u pages overflow the address space",
                          c.n_pages);
    struct gs_kv_pool *p = gs_calloc(1, sizeof(*p));
    if (!p)
        return gs_err_set(err, GS_NOMEM, "kv pool: out of memory");
    p->cfg = c;
    p->page_bytes = page_bytes;
    p->data = gs_calloc(1, (size_t)total);
    p->meta = gs_calloc(c.n_pages, sizeof(*p->meta));
    if (!p->data || !p->meta) {
        gs_kv_pool_free(p);
        return gs_err_set(err, GS_NOMEM, "kv pool: out of memory for %llu bytes",
                          (unsigned long long)total);
    }
    /* Free list in increasing page order, so allocation is deterministic. */
    for (uint32_t i = 0; i < c.n_pages; i++)
        p->meta[i].next_free = i + 1 < c.n_pages ? i + 1 : GS_KV_PAGE_NONE;
    p->free_head = 0;
    p->n_free = c.n_pages;
    *out = p;
    return GS_OK;
}

void gs_kv_pool_free(struct gs_kv_pool *pool)
{
    if (!pool)
        return;
    gs_free(pool->data);
    gs_free(pool->meta);
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
        .elem_bytes = pool->cfg.elem_bytes,
        .page_bytes = pool->page_bytes,
    };
    return l;
}

uint32_t gs_kv_pool_n_free(const struct gs_kv_pool *pool)
{
    return pool->n_free;
}

uint32_t gs_kv_pool_page_tokens(const struct gs_kv_pool *pool)
{
    return pool->cfg.page_tokens;
}

enum gs_status gs_kv_page_alloc(struct gs_kv_pool *pool, uint32_t *page, struct gs_err *err)
{
    *page = GS_KV_PAGE_NONE;
    if (pool->free_head == GS_KV_PAGE_NONE)
        return gs_err_set(err, GS_BUSY, "kv pool: all %u pages are in use", pool->cfg.n_pages);
    uint32_t id = pool->free_head;
    struct page_meta *m = &pool->meta[id];
    pool->free_head = m->next_free;
    pool->n_free--;
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
    m->hashed = false;
    m->next_free = pool->free_head;
    pool->free_head = page;
    pool->n_free++;
}

uint32_t gs_kv_page_refcount(const struct gs_kv_pool *pool, uint32_t page)
{
    return page < pool->cfg.n_pages ? pool->meta[page].refcount : 0;
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
    if (GS_NEVER(page >= pool->cfg.n_pages))
        return;
    pool->meta[page].hash = hash;
    pool->meta[page].hashed = true;
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
        pool->meta[old].hashed = false; /* about to be written */
        return GS_OK;
    }
    uint32_t fresh;
    enum gs_status st = gs_kv_page_alloc(pool, &fresh, err);
    if (st)
        return st;
    memcpy(pool->data + fresh * pool->page_bytes, pool->data + old * pool->page_bytes,
           pool->page_bytes);
    gs_kv_page_unref(pool, old);
    *page = fresh;
    return GS_OK;
}

/* ---- sequences ------------------------------------------------------------------ */

void gs_kv_seq_init(struct gs_kv_seq *seq)
{
    memset(seq, 0, sizeof(*seq));
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
    if (need - seq->n_pages > pool->n_free)
        return gs_err_set(err, GS_BUSY, "kv pool: %u more pages needed, %u free",
                          need - seq->n_pages, pool->n_free);
    if (need > seq->cap_pages) {
        uint32_t *pages = gs_realloc(seq->pages, (size_t)need * sizeof(*pages));
        if (!pages)
            return gs_err_set(err, GS_NOMEM, "kv pool: out of memory for a page table");
        seq->pages = pages;
        seq->cap_pages = need;
    }
    /* Cannot fail: enough pages were counted free above. */
    while (seq->n_pages < need)
        gs_kv_page_alloc(pool, &seq->pages[seq->n_pages++], NULL);
    seq->n_tokens = n_tokens;
    return GS_OK;
}

void gs_kv_seq_release(struct gs_kv_pool *pool, struct gs_kv_seq *seq)
{
    for (uint32_t i = 0; i < seq->n_pages; i++)
        gs_kv_page_unref(pool, seq->pages[i]);
    gs_free(seq->pages);
    gs_kv_seq_init(seq);
}
