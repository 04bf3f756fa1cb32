/*
 * tests/kvcache/test_prefix.c - the pool's prefix cache: registered full pages
 * survive their last reference as cached pages, are found by hash, revived,
 * and evicted least recently used only when nothing is free; partial keys
 * (a page's first tokens) are hit as copies.
 */
#include "kvcache/kvcache.h"

#include <criterion/criterion.h>
#include <string.h>

static struct gs_kv_pool *new_pool(uint32_t n_pages)
{
    struct gs_kv_pool_cfg cfg = {
        .n_layer = 2, .kv_dim = 8, .type = GS_TYPE_F32, .page_tokens = 4, .n_pages = n_pages};
    struct gs_kv_pool *p;
    struct gs_err err;
    cr_assert_eq(gs_kv_pool_new(&cfg, &p, &err), GS_OK, "%s", err.msg);
    return p;
}

static float *page_data(struct gs_kv_pool *pool, uint32_t page)
{
    struct gs_kv_layout l = gs_kv_pool_layout(pool);
    return (float *)((char *)l.base + (size_t)page * l.page_bytes);
}

static void check_stats(struct gs_kv_pool *p, uint32_t used, uint32_t cached, uint32_t free_)
{
    struct gs_kv_stats st;
    gs_kv_pool_stats(p, &st);
    cr_assert_eq(st.pages_used, used, "used %u, want %u", st.pages_used, used);
    cr_assert_eq(st.pages_cached, cached, "cached %u, want %u", st.pages_cached, cached);
    cr_assert_eq(st.pages_free, free_, "free %u, want %u", st.pages_free, free_);
    cr_assert_eq(st.pages_used + st.pages_cached + st.pages_free, st.pages_total);
}

Test(kv_prefix, released_registered_page_is_cached_and_found_again)
{
    struct gs_kv_pool *p = new_pool(4);
    struct gs_err err;
    uint32_t a;
    cr_assert_eq(gs_kv_page_alloc(p, &a, &err), GS_OK);
    page_data(p, a)[0] = 42.0f;
    int32_t toks[4] = {1, 2, 3, 4};
    uint64_t h = gs_kv_hash_tokens(GS_KV_HASH_SEED, toks, 4);
    gs_kv_page_set_hash(p, a, h);
    gs_kv_page_unref(p, a);
    check_stats(p, 0, 1, 3);
    cr_assert_eq(gs_kv_pool_n_free(p), 4, "cached pages count as allocatable");

    uint32_t b;
    cr_assert(gs_kv_prefix_lookup(p, h, &b));
    cr_assert_eq(b, a);
    cr_assert_eq(page_data(p, b)[0], 42.0f, "a cached page keeps its contents");
    cr_assert_eq(gs_kv_page_refcount(p, b), 1);
    check_stats(p, 1, 0, 3);
    uint64_t other = gs_kv_hash_tokens(h, toks, 4);
    uint32_t c;
    cr_assert_not(gs_kv_prefix_lookup(p, other, &c), "a different chain must miss");
    gs_kv_page_unref(p, b);
    gs_kv_pool_free(p);
}

Test(kv_prefix, hash_depends_on_parent_chain)
{
    int32_t t1[2] = {5, 6};
    uint64_t a = gs_kv_hash_tokens(GS_KV_HASH_SEED, t1, 2);
    uint64_t b = gs_kv_hash_tokens(a, t1, 2);
    uint64_t c = gs_kv_hash_tokens(GS_KV_HASH_SEED, t1, 2);
    cr_assert_neq(a, b);
    cr_assert_eq(a, c);
    int32_t t2[2] = {6, 5};
    cr_assert_neq(gs_kv_hash_tokens(GS_KV_HASH_SEED, t2, 2), a);
}

Test(kv_prefix, evicts_least_recently_used_only_when_nothing_is_free)
{
    struct gs_kv_pool *p = new_pool(3);
    struct gs_err err;
    uint32_t pg[3];
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(gs_kv_page_alloc(p, &pg[i], &err), GS_OK);
        gs_kv_page_set_hash(p, pg[i], 100 + (uint64_t)i);
    }
    /* release in order 1, 0, 2: LRU order is 1, 0, 2 */
    gs_kv_page_unref(p, pg[1]);
    gs_kv_page_unref(p, pg[0]);
    gs_kv_page_unref(p, pg[2]);
    check_stats(p, 0, 3, 0);
    uint32_t x;
    cr_assert_eq(gs_kv_page_alloc(p, &x, &err), GS_OK);
    cr_assert_eq(x, pg[1], "the least recently released page goes first");
    struct gs_kv_stats st;
    gs_kv_pool_stats(p, &st);
    cr_assert_eq(st.n_evictions, 1);
    uint32_t y;
    cr_assert_not(gs_kv_prefix_lookup(p, 101, &y), "an evicted page is no longer found");
    cr_assert(gs_kv_prefix_lookup(p, 100, &y));
    cr_assert_eq(y, pg[0]);
    check_stats(p, 2, 1, 0);
    gs_kv_page_unref(p, x);
    gs_kv_page_unref(p, y);
    check_stats(p, 0, 2, 1);
    gs_kv_pool_free(p);
}

/* Two holders of one page: a write through copy-on-write goes to a private
 * copy, and the other holder still sees the original. */
Test(kv_prefix, cow_keeps_sharers_from_seeing_each_others_writes)
{
    struct gs_kv_pool *p = new_pool(4);
    struct gs_err err;
    uint32_t shared;
    cr_assert_eq(gs_kv_page_alloc(p, &shared, &err), GS_OK);
    page_data(p, shared)[3] = 1.5f;
    gs_kv_page_set_hash(p, shared, 7);
    gs_kv_page_ref(p, shared); /* a second sequence */
    uint32_t mine = shared;
    cr_assert_eq(gs_kv_page_cow(p, &mine, &err), GS_OK);
    cr_assert_neq(mine, shared);
    cr_assert_eq(page_data(p, mine)[3], 1.5f, "the copy starts with the same contents");
    page_data(p, mine)[3] = -9.0f;
    cr_assert_eq(page_data(p, shared)[3], 1.5f, "the other holder must not see the write");
    cr_assert_eq(gs_kv_page_refcount(p, shared), 1);
    uint32_t found;
    cr_assert(gs_kv_prefix_lookup(p, 7, &found));
    cr_assert_eq(found, shared, "the registered original is still what lookups find");
    gs_kv_page_unref(p, found);
    /* the last holder writing in place unregisters the page */
    cr_assert_eq(gs_kv_page_cow(p, &found, &err), GS_OK);
    cr_assert_eq(found, shared);
    cr_assert_not(gs_kv_prefix_lookup(p, 7, &found));
    gs_kv_page_unref(p, shared);
    gs_kv_page_unref(p, mine);
    check_stats(p, 0, 0, 4);
    gs_kv_pool_free(p);
}

/* A sequence's reserve may reclaim cached pages when nothing else is free. */
Test(kv_prefix, reserve_reclaims_cached_pages)
{
    struct gs_kv_pool *p = new_pool(2);
    struct gs_err err;
    uint32_t a;
    cr_assert_eq(gs_kv_page_alloc(p, &a, &err), GS_OK);
    gs_kv_page_set_hash(p, a, 1);
    gs_kv_page_unref(p, a);
    struct gs_kv_seq s;
    gs_kv_seq_init(&s);
    cr_assert_eq(gs_kv_seq_reserve(p, &s, 8, &err), GS_OK, "%s", err.msg);
    cr_assert_eq(s.n_pages, 2);
    check_stats(p, 2, 0, 0);
    cr_assert_eq(gs_kv_seq_reserve(p, &s, 9, &err), GS_BUSY);
    gs_kv_seq_release(p, &s);
    check_stats(p, 0, 0, 2);
    gs_kv_pool_free(p);
}

/* A sequence takes cached pages by hash, one full page at a time; a miss
 * takes nothing. */
Test(kv_prefix, seq_appends_cached_pages_by_hash)
{
    struct gs_kv_pool *p = new_pool(4);
    struct gs_err err;
    uint32_t a;
    cr_assert_eq(gs_kv_page_alloc(p, &a, &err), GS_OK);
    gs_kv_page_set_hash(p, a, 11);
    gs_kv_page_unref(p, a);
    struct gs_kv_seq s;
    gs_kv_seq_init(&s);
    cr_assert(gs_kv_seq_append_cached(p, &s, 11));
    cr_assert_eq(s.n_pages, 1);
    cr_assert_eq(s.pages[0], a);
    cr_assert_eq(s.n_tokens, 4, "one full page of 4 tokens");
    cr_assert_eq(gs_kv_page_refcount(p, a), 1);
    cr_assert_not(gs_kv_seq_append_cached(p, &s, 12));
    cr_assert_eq(s.n_pages, 1, "a miss takes nothing");
    check_stats(p, 1, 0, 3);
    gs_kv_seq_release(p, &s);
    check_stats(p, 0, 1, 3);
    gs_kv_pool_free(p);
}

/* A partial key's hit is a private copy: the sequence covers only the key's
 * positions, may write the copy, and the cached page stays for the next hit.
 * When the only page an allocation could take is the source itself, the hit
 * misses rather than evict it. */
Test(kv_prefix, partial_hit_takes_a_copy_and_leaves_the_source_cached)
{
    struct gs_kv_pool *p = new_pool(3);
    struct gs_err err;
    uint32_t src;
    cr_assert_eq(gs_kv_page_alloc(p, &src, &err), GS_OK);
    page_data(p, src)[0] = 7.0f;
    int32_t toks[3] = {9, 8, 7};
    uint64_t h = gs_kv_hash_tokens(GS_KV_HASH_SEED, toks, 3);
    gs_kv_page_set_hash(p, src, h);
    gs_kv_page_unref(p, src);
    check_stats(p, 0, 1, 2);

    struct gs_kv_seq a, b, c;
    gs_kv_seq_init(&a);
    gs_kv_seq_init(&b);
    gs_kv_seq_init(&c);
    cr_assert_not(gs_kv_seq_append_copy(p, &a, gs_kv_hash_tokens(GS_KV_HASH_SEED, toks, 2), 2));
    cr_assert(gs_kv_seq_append_copy(p, &a, h, 3));
    cr_assert_eq(a.n_pages, 1);
    cr_assert_eq(a.n_tokens, 3);
    cr_assert_neq(a.pages[0], src, "the hit is a copy");
    cr_assert_eq(page_data(p, a.pages[0])[0], 7.0f, "with the source's contents");
    uint64_t got;
    cr_assert_not(gs_kv_page_hash(p, a.pages[0], &got), "the copy is not keyed");
    check_stats(p, 1, 1, 1);
    cr_assert(gs_kv_seq_append_copy(p, &b, h, 3), "the source is still cached");
    check_stats(p, 2, 1, 0);
    /* The only page an allocation could take now is the source: no copy. */
    cr_assert_not(gs_kv_seq_append_copy(p, &c, h, 3));
    cr_assert_eq(c.n_pages, 0);
    check_stats(p, 2, 1, 0);
    struct gs_kv_stats st;
    gs_kv_pool_stats(p, &st);
    cr_assert_eq(st.n_hits, 2);
    cr_assert_eq(st.n_hit_tokens, 6, "a partial hit counts its positions, not a page's");
    cr_assert_eq(gs_kv_pool_check(p, &err), GS_OK, "%s", err.msg);
    gs_kv_seq_release(p, &a);
    gs_kv_seq_release(p, &b);
    gs_kv_seq_release(p, &c);
    gs_kv_pool_free(p);
}

/* A page offered under a second key is copied into a free page, never into
 * an evicted one, and a key registered already is not offered twice. */
Test(kv_prefix, cache_copy_takes_only_a_free_page)
{
    struct gs_kv_pool *p = new_pool(2);
    struct gs_err err;
    uint32_t a;
    cr_assert_eq(gs_kv_page_alloc(p, &a, &err), GS_OK);
    page_data(p, a)[1] = 3.0f;
    int32_t toks[4] = {1, 2, 3, 4};
    uint64_t full = gs_kv_hash_tokens(GS_KV_HASH_SEED, toks, 4);
    uint64_t head = gs_kv_hash_tokens(GS_KV_HASH_SEED, toks, 2);
    gs_kv_page_set_hash(p, a, full);
    cr_assert(gs_kv_page_cache_copy(p, a, head));
    check_stats(p, 1, 1, 0);
    cr_assert_not(gs_kv_page_cache_copy(p, a, head), "registered already");
    cr_assert_not(gs_kv_page_cache_copy(p, a, gs_kv_hash_tokens(GS_KV_HASH_SEED, toks, 1)),
                  "no free page: the cached copy is not evicted for another");
    check_stats(p, 1, 1, 0);
    struct gs_kv_seq s;
    gs_kv_seq_init(&s);
    gs_kv_page_unref(p, a); /* now both are cached; a copy may evict the other one */
    cr_assert(gs_kv_seq_append_copy(p, &s, head, 2));
    cr_assert_eq(page_data(p, s.pages[0])[1], 3.0f);
    cr_assert_eq(gs_kv_pool_check(p, &err), GS_OK, "%s", err.msg);
    gs_kv_seq_release(p, &s);
    gs_kv_pool_free(p);
}
