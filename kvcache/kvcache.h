/*
 * kvcache/kvcache.h - the KV page pool and per-sequence page tables.
 *
 * The pool is one allocation of n_pages fixed-size pages. A page holds
 * page_tokens token slots of K and V for every layer, laid out as
 *   [layer][K, V][slot] rows of row_bytes each,
 * a row being kv_dim elements of the pool's type (F32, F16, or Q8_0 blocks),
 * which is the layout engine/backend.h's struct gs_kv_view describes: the
 * caller copies gs_kv_pool_layout() into the step.
 *
 * Pages are reference counted from the start: a page is free at refcount 0,
 * and gs_kv_page_ref/unref let several sequences share one (prefix sharing).
 * Each page also carries a content hash, chained from its parent page's hash
 * (gs_kv_hash_tokens), so that a prefix cache can find full pages by content;
 * a page that is shared (refcount > 1) must be copied before it is written
 * (gs_kv_page_cow). Preemption is releasing a sequence's pages.
 *
 * The pool knows nothing of models beyond sizes.
 *
 * Ownership: the pool owns its memory and page metadata; a struct gs_kv_seq is
 * caller-allocated and holds one reference to each page in its table until
 * gs_kv_seq_release. Threads: one thread (the engine thread) at a time.
 */
#ifndef GS_KVCACHE_H
#define GS_KVCACHE_H

#include "engine/backend.h"
#include "engine/base.h"

#define GS_KV_DEFAULT_PAGE_TOKENS 16
#define GS_KV_PAGE_NONE UINT32_MAX
#define GS_KV_HASH_SEED 0xcbf29ce484222325ull /* the parent hash of a sequence's first page */

struct gs_kv_pool_cfg {
    uint32_t n_layer;
    uint32_t kv_dim;      /* elements of K (and of V) per token per layer */
    enum gs_type type;    /* GS_TYPE_F32 (0), GS_TYPE_F16 or GS_TYPE_Q8_0 */
    uint32_t page_tokens; /* 0: GS_KV_DEFAULT_PAGE_TOKENS */
    uint32_t n_pages;
};

/* The memory layout, for building the engine's view of the cache. */
struct gs_kv_layout {
    void *base;
    uint32_t n_pages;
    uint32_t page_tokens;
    uint32_t n_layer;
    uint32_t kv_dim;
    enum gs_type type;
    uint64_t row_bytes; /* one token's K (or V) row of one layer: gs_kv_row_bytes() */
    uint64_t page_bytes;
};

struct gs_kv_pool; /* opaque */

/* ---- pool -------------------------------------------------------------------- */

/* GS_INVAL names a zero or overflowing size or a type the cache cannot hold;
 * GS_NOMEM when memory is short. */
enum gs_status gs_kv_pool_new(const struct gs_kv_pool_cfg *cfg, struct gs_kv_pool **out,
                              struct gs_err *err);
void gs_kv_pool_free(struct gs_kv_pool *pool); /* NULL is a no-op */

struct gs_kv_layout gs_kv_pool_layout(const struct gs_kv_pool *pool);
/* The pool as a step sees it (gs_step_io.kv). */
struct gs_kv_view gs_kv_pool_view(const struct gs_kv_pool *pool);
/* Pages an allocation can take: free ones plus cached ones it may evict. */
uint32_t gs_kv_pool_n_free(const struct gs_kv_pool *pool);
/* Pages on the free list alone: what an allocation takes without evicting a
 * cached prefix. Speculative drafts use only these, so that a rejected draft
 * leaves the prefix cache as it found it. */
uint32_t gs_kv_pool_n_unused(const struct gs_kv_pool *pool);
uint32_t gs_kv_pool_page_tokens(const struct gs_kv_pool *pool);

/* ---- pages ------------------------------------------------------------------- */

/* Takes a free page with refcount 1 (hash cleared). GS_BUSY when none is free. */
enum gs_status gs_kv_page_alloc(struct gs_kv_pool *pool, uint32_t *page, struct gs_err *err);
/* Adds a reference to an allocated page. */
void gs_kv_page_ref(struct gs_kv_pool *pool, uint32_t page);
/* Drops a reference; the page returns to the free list at zero. */
void gs_kv_page_unref(struct gs_kv_pool *pool, uint32_t page);
uint32_t gs_kv_page_refcount(const struct gs_kv_pool *pool, uint32_t page);

/* What a page holds now: referenced by a sequence, kept only for prefix hits, or nothing. */
enum gs_kv_page_state { GS_KV_PAGE_FREE, GS_KV_PAGE_USED, GS_KV_PAGE_CACHED };
enum gs_kv_page_state gs_kv_page_state(const struct gs_kv_pool *pool, uint32_t page);

/* Content hash of a page's tokens[0..n) chained from the parent page's hash:
 * the key of a full page (n = page_tokens) or of a page's first n tokens alone
 * (a partial key, n < page_tokens; see gs_kv_seq_append_copy). */
uint64_t gs_kv_hash_tokens(uint64_t parent, const int32_t *tokens, uint32_t n);
void gs_kv_page_set_hash(struct gs_kv_pool *pool, uint32_t page, uint64_t hash);
/* false when the page has no hash (never keyed, or written since). */
bool gs_kv_page_hash(const struct gs_kv_pool *pool, uint32_t page, uint64_t *hash);

/*
 * Makes *page writable by its holder: a page with refcount 1 stays; a shared
 * page is copied into a fresh one (the holder's reference moves to the copy).
 * GS_BUSY when no page is free.
 */
enum gs_status gs_kv_page_cow(struct gs_kv_pool *pool, uint32_t *page, struct gs_err *err);

/* ---- sequences --------------------------------------------------------------- */

struct gs_kv_seq {
    uint32_t *pages;  /* [n_pages] page ids, owned (gs_malloc) */
    uint32_t n_pages;
    uint32_t cap_pages;
    uint32_t n_tokens; /* positions 0..n_tokens-1 are covered */
};

void gs_kv_seq_init(struct gs_kv_seq *seq);

/*
 * Grows seq's table so that positions 0..n_tokens-1 have pages. All or
 * nothing: on GS_BUSY (pool exhausted) or GS_NOMEM nothing was taken.
 */
enum gs_status gs_kv_seq_reserve(struct gs_kv_pool *pool, struct gs_kv_seq *seq,
                                 uint32_t n_tokens, struct gs_err *err);

/*
 * Appends to seq (whose pages are all full) the cached page registered under
 * hash, taking a reference: the prefix-cache hit of a sequence's next full
 * page. False on a miss or when the page table cannot grow (nothing taken).
 */
bool gs_kv_seq_append_cached(struct gs_kv_pool *pool, struct gs_kv_seq *seq, uint64_t hash);

/*
 * The prefix-cache hit of a partial page: appends to seq (whose pages are all
 * full) a private copy of the page registered under hash, a partial key whose
 * first n_tokens (1..page_tokens-1) positions are seq's next ones, and covers
 * them (seq->n_tokens grows by n_tokens). The copy is seq's to write; the
 * registered page stays for other hits. False on a miss, when no page can be
 * taken (a cached page other than the source may be evicted for the copy) or
 * when the page table cannot grow; nothing is taken then.
 */
bool gs_kv_seq_append_copy(struct gs_kv_pool *pool, struct gs_kv_seq *seq, uint64_t hash,
                           uint32_t n_tokens);

/*
 * Shrinks seq to positions 0..n_tokens-1 (n_tokens <= seq->n_tokens): the
 * pages past the last one those positions need are unreferenced and leave the
 * table, which is then what gs_kv_seq_reserve(n_tokens) alone would have
 * built. The rollback of a rejected speculative draft: slots past n_tokens in
 * the last kept page hold stale rows that are never read (attention stops at
 * a token's position) and are overwritten by the next tokens.
 */
void gs_kv_seq_truncate(struct gs_kv_pool *pool, struct gs_kv_seq *seq, uint32_t n_tokens);

/* Drops every page reference of seq and frees its table (seq is reusable). */
void gs_kv_seq_release(struct gs_kv_pool *pool, struct gs_kv_seq *seq);

/* ---- prefix cache -------------------------------------------------------------- */

/*
 * A full page whose hash was set with gs_kv_page_set_hash is registered in the
 * pool's prefix map. When its last reference goes it is not freed but
 * "cached": it keeps its contents, and gs_kv_prefix_lookup can hand it to a new
 * sequence whose prompt hashes the same. Cached pages are evicted least
 * recently used, and only when an allocation finds no free page. Writing to a
 * page (gs_kv_page_cow on an unshared page) unregisters it. A page may also be
 * registered under a partial key, the hash of its first n < page_tokens
 * tokens: a hit on one is always taken as a copy (gs_kv_seq_append_copy),
 * because the sequence writes the rest of that page.
 */

/* On a hit takes a reference to the page registered under hash (reviving it
 * if cached) and returns true. */
bool gs_kv_prefix_lookup(struct gs_kv_pool *pool, uint64_t hash, uint32_t *page);

/*
 * Registers a copy of page under hash and leaves the copy cached (refcount 0,
 * on the LRU list): how a page already keyed one way is offered under another
 * key too, e.g. a full page's first tokens under a partial key. It takes only
 * a page from the free list, so no cached prefix is evicted for it. False
 * (nothing taken) when no page is unused or hash is already registered.
 */
bool gs_kv_page_cache_copy(struct gs_kv_pool *pool, uint32_t page, uint64_t hash);

struct gs_kv_stats {
    uint32_t pages_total;
    uint32_t pages_used;   /* referenced by a sequence */
    uint32_t pages_cached; /* unreferenced, kept for prefix hits */
    uint32_t pages_free;
    uint64_t n_evictions;  /* cached pages reclaimed for new allocations */
    uint64_t n_hits;       /* pages served by gs_kv_prefix_lookup and gs_kv_seq_append_copy */
    uint64_t n_hit_tokens; /* positions those pages covered (a page, or a partial key's) */
    uint64_t page_bytes;
};

void gs_kv_pool_stats(const struct gs_kv_pool *pool, struct gs_kv_stats *out);

/*
 * Checks the pool's own bookkeeping (tests, diagnostics): the free list and
 * the LRU list hold exactly the unreferenced pages, unregistered and
 * registered respectively, with the counts the pool keeps; every registered
 * page is found under its hash. GS_INVAL with the first broken rule.
 */
enum gs_status gs_kv_pool_check(const struct gs_kv_pool *pool, struct gs_err *err);

#endif /* GS_KVCACHE_H */
