/* tests/kvcache/test_pool.c - the KV page pool: allocation, refcounts,
 * exhaustion, copy-on-write, hashes and page tables. */
#include "kvcache/kvcache.h"

#include <criterion/criterion.h>
#include <string.h>

static struct gs_kv_pool *make_pool(uint32_t n_pages)
{
    struct gs_kv_pool_cfg cfg = {
        .n_layer = 2, .kv_dim = 8, .type = GS_TYPE_F16, .n_pages = n_pages};
    struct gs_kv_pool *p;
    struct gs_err err = {0};
    cr_assert_eq(gs_kv_pool_new(&cfg, &p, &err), GS_OK, "%s", err.msg);
    return p;
}

Test(kv_pool, layout_matches_config)
{
    struct gs_kv_pool *p = make_pool(4);
    struct gs_kv_layout l = gs_kv_pool_layout(p);
    cr_assert_eq(l.page_tokens, GS_KV_DEFAULT_PAGE_TOKENS);
    cr_assert_eq(l.page_bytes, 2ull * 2 * 16 * 8 * 2);
    cr_assert_eq(gs_kv_pool_n_free(p), 4);
    gs_kv_pool_free(p);
}

Test(kv_pool, rejects_bad_config)
{
    struct gs_kv_pool *p;
    struct gs_err err = {0};
    struct gs_kv_pool_cfg cfg = {.n_layer = 2, .kv_dim = 8, .type = GS_TYPE_Q4_K, .n_pages = 4};
    cr_assert_eq(gs_kv_pool_new(&cfg, &p, &err), GS_INVAL);
    cr_assert(strstr(err.msg, "q4_K"), "%s", err.msg);
    cfg.type = GS_TYPE_F32;
    cfg.n_pages = 0;
    cr_assert_eq(gs_kv_pool_new(&cfg, &p, &err), GS_INVAL);
    cfg.n_pages = 1u << 30;
    cfg.kv_dim = 1u << 30;
    cr_assert_eq(gs_kv_pool_new(&cfg, &p, &err), GS_INVAL);
}

Test(kv_pages, exhaustion_is_busy_and_unref_frees)
{
    struct gs_kv_pool *p = make_pool(2);
    struct gs_err err = {0};
    uint32_t a, b, c;
    cr_assert_eq(gs_kv_page_alloc(p, &a, &err), GS_OK);
    cr_assert_eq(gs_kv_page_alloc(p, &b, &err), GS_OK);
    cr_assert_neq(a, b);
    cr_assert_eq(gs_kv_page_alloc(p, &c, &err), GS_BUSY);
    gs_kv_page_ref(p, a);
    cr_assert_eq(gs_kv_page_refcount(p, a), 2);
    gs_kv_page_unref(p, a);
    cr_assert_eq(gs_kv_pool_n_free(p), 0, "a shared page must stay allocated");
    gs_kv_page_unref(p, a);
    cr_assert_eq(gs_kv_pool_n_free(p), 1);
    cr_assert_eq(gs_kv_page_alloc(p, &c, &err), GS_OK);
    cr_assert_eq(c, a);
    gs_kv_pool_free(p);
}

Test(kv_pages, cow_copies_shared_page_on_write)
{
    struct gs_kv_pool *p = make_pool(3);
    struct gs_err err = {0};
    struct gs_kv_layout l = gs_kv_pool_layout(p);
    uint32_t a, mine;
    cr_assert_eq(gs_kv_page_alloc(p, &a, &err), GS_OK);
    memset((char *)l.base + a * l.page_bytes, 0x5a, l.page_bytes);
    gs_kv_page_ref(p, a); /* a second holder */
    mine = a;
    cr_assert_eq(gs_kv_page_cow(p, &mine, &err), GS_OK);
    cr_assert_neq(mine, a);
    cr_assert_eq(gs_kv_page_refcount(p, a), 1);
    cr_assert_eq(gs_kv_page_refcount(p, mine), 1);
    cr_assert_eq(memcmp((char *)l.base + a * l.page_bytes, (char *)l.base + mine * l.page_bytes,
                        l.page_bytes),
                 0);
    uint32_t only = a;
    cr_assert_eq(gs_kv_page_cow(p, &only, &err), GS_OK);
    cr_assert_eq(only, a, "an unshared page is written in place");
    gs_kv_pool_free(p);
}

Test(kv_pages, hash_chains_from_parent)
{
    struct gs_kv_pool *p = make_pool(2);
    struct gs_err err = {0};
    int32_t t1[4] = {1, 2, 3, 4}, t2[4] = {1, 2, 3, 5};
    uint64_t h1 = gs_kv_hash_tokens(GS_KV_HASH_SEED, t1, 4);
    cr_assert_eq(h1, gs_kv_hash_tokens(GS_KV_HASH_SEED, t1, 4));
    cr_assert_neq(h1, gs_kv_hash_tokens(GS_KV_HASH_SEED, t2, 4));
    /* Same page content after a different parent is a different page. */
    cr_assert_neq(gs_kv_hash_tokens(h1, t1, 4), gs_kv_hash_tokens(h1 + 1, t1, 4));
    uint32_t a;
    uint64_t got;
    cr_assert_eq(gs_kv_page_alloc(p, &a, &err), GS_OK);
    cr_assert(!gs_kv_page_hash(p, a, &got));
    gs_kv_page_set_hash(p, a, h1);
    cr_assert(gs_kv_page_hash(p, a, &got));
    cr_assert_eq(got, h1);
    gs_kv_page_unref(p, a);
    cr_assert(gs_kv_page_hash(p, a, &got), "a released registered page is cached, hash kept");
    uint32_t b, c;
    cr_assert_eq(gs_kv_page_alloc(p, &b, &err), GS_OK);
    cr_assert_eq(gs_kv_page_alloc(p, &c, &err), GS_OK); /* evicts a */
    cr_assert_eq(c, a);
    cr_assert(!gs_kv_page_hash(p, a, &got), "an evicted page forgets its hash");
    gs_kv_page_unref(p, b);
    gs_kv_page_unref(p, c);
    gs_kv_pool_free(p);
}

Test(kv_seq, reserve_is_all_or_nothing_and_release_frees)
{
    struct gs_kv_pool *p = make_pool(4);
    struct gs_err err = {0};
    struct gs_kv_seq s1, s2;
    gs_kv_seq_init(&s1);
    gs_kv_seq_init(&s2);
    cr_assert_eq(gs_kv_seq_reserve(p, &s1, 17, &err), GS_OK);
    cr_assert_eq(s1.n_pages, 2);
    cr_assert_eq(gs_kv_seq_reserve(p, &s1, 32, &err), GS_OK);
    cr_assert_eq(s1.n_pages, 2);
    cr_assert_eq(gs_kv_seq_reserve(p, &s2, 48, &err), GS_BUSY);
    cr_assert_eq(s2.n_pages, 0);
    cr_assert_eq(gs_kv_pool_n_free(p), 2, "a failed reserve takes nothing");
    cr_assert_eq(gs_kv_seq_reserve(p, &s2, 32, &err), GS_OK);
    gs_kv_seq_release(p, &s1);
    cr_assert_eq(gs_kv_pool_n_free(p), 2);
    gs_kv_seq_release(p, &s2);
    cr_assert_eq(gs_kv_pool_n_free(p), 4);
    gs_kv_pool_free(p);
}

/* Truncation gives back exactly the pages past the kept positions, leaving
 * the table, refcounts and free list as a reserve of the kept tokens alone
 * would have; a registered page before the cut stays registered. */
Test(kv_seq, truncate_returns_the_pages_past_the_kept_positions)
{
    struct gs_kv_pool *p = make_pool(6);
    struct gs_err err = {0};
    struct gs_kv_seq s, other;
    gs_kv_seq_init(&s);
    gs_kv_seq_init(&other);
    cr_assert_eq(gs_kv_seq_reserve(p, &s, 16, &err), GS_OK);
    gs_kv_page_set_hash(p, s.pages[0], 42);
    cr_assert_eq(gs_kv_pool_n_unused(p), 5);
    cr_assert_eq(gs_kv_seq_reserve(p, &s, 40, &err), GS_OK); /* a draft to position 39 */
    cr_assert_eq(s.n_pages, 3);
    cr_assert_eq(gs_kv_pool_n_unused(p), 3);
    gs_kv_seq_truncate(p, &s, 17);
    cr_assert_eq(s.n_pages, 2);
    cr_assert_eq(s.n_tokens, 17);
    cr_assert_eq(gs_kv_pool_n_unused(p), 4);
    cr_assert_eq(gs_kv_pool_check(p, &err), GS_OK, "%s", err.msg);
    uint64_t h;
    cr_assert(gs_kv_page_hash(p, s.pages[0], &h) && h == 42);
    /* a cut on a page boundary keeps no empty page */
    gs_kv_seq_truncate(p, &s, 16);
    cr_assert_eq(s.n_pages, 1);
    /* the pages went back to the free list: another sequence gets them without eviction */
    cr_assert_eq(gs_kv_seq_reserve(p, &other, 80, &err), GS_OK);
    struct gs_kv_stats st;
    gs_kv_pool_stats(p, &st);
    cr_assert_eq(st.n_evictions, 0);
    /* a cut to nothing keeps no page */
    gs_kv_seq_truncate(p, &s, 0);
    cr_assert_eq(s.n_pages, 0);
    gs_kv_pool_stats(p, &st);
    cr_assert_eq(st.pages_cached, 1, "the registered page is cached, not freed");
    cr_assert_eq(gs_kv_pool_check(p, &err), GS_OK, "%s", err.msg);
    gs_kv_seq_release(p, &s);
    gs_kv_seq_release(p, &other);
    cr_assert_eq(gs_kv_pool_check(p, &err), GS_OK, "%s", err.msg);
    gs_kv_pool_free(p);
}
