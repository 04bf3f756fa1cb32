/*
 * tests/server/test_arena.c - a request's arena (server/arena.c): alignment,
 * growth across chunks, reallocation in place and by copy, the cap, the
 * buffers that draw on an arena, pages handed back at the end, and under
 * AddressSanitizer the poisoning of bytes not handed out.
 */
#define _GNU_SOURCE
#include "server/internal.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

#define MIB ((size_t)1 << 20)

static void fill(void *p, size_t n, unsigned seed)
{
    unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        b[i] = (unsigned char)(seed * 31u + i);
}

static bool filled(const void *p, size_t n, unsigned seed)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != (unsigned char)(seed * 31u + i))
            return false;
    return true;
}

/* Whether the page holding p is mapped in this process. */
static bool mapped(const void *p)
{
    long page = sysconf(_SC_PAGESIZE);
    void *base = (void *)((uintptr_t)p & ~(uintptr_t)(page - 1));
    unsigned char v;
    return mincore(base, 1, &v) == 0 || errno != ENOMEM;
}

Test(srv_arena, allocations_are_aligned_and_keep_their_bytes)
{
    struct gs_srv_arena *a = gs_srv_arena_new(16 * MIB);
    cr_assert(a);
    enum { N = 2000 };
    static void *p[N];
    static size_t n[N];
    for (unsigned i = 0; i < N; i++) {
        n[i] = i % 97 == 0 ? 20000 + i : 1 + i % 300; /* some past a chunk's quarter */
        p[i] = gs_srv_arena_alloc(a, n[i]);
        cr_assert(p[i], "allocation %u of %zu bytes", i, n[i]);
        cr_expect_eq((uintptr_t)p[i] % GS_SRV_ARENA_ALIGN, 0, "allocation %u at %p", i, p[i]);
        fill(p[i], n[i], i);
    }
    for (unsigned i = 0; i < N; i++)
        cr_expect(filled(p[i], n[i], i), "allocation %u was overwritten", i);
    /* More than one 64 KiB chunk was needed, and no more than the bytes asked for
     * (with the last chunk's rest and a page per large one) were mapped. */
    size_t asked = 0;
    for (unsigned i = 0; i < N; i++)
        asked += n[i];
    cr_expect_gt(gs_srv_arena_mapped_bytes(a), 64u << 10);
    cr_expect_lt(gs_srv_arena_mapped_bytes(a), asked * 2 + (64u << 10));
    cr_expect_not(gs_srv_arena_refused(a));
    gs_srv_arena_free(a);
}

Test(srv_arena, calloc_zeroes_and_strdup_copies)
{
    struct gs_srv_arena *a = gs_srv_arena_new(MIB);
    cr_assert(a);
    unsigned char *junk = gs_srv_arena_alloc(a, 64);
    memset(junk, 0xab, 64);
    uint64_t *z = gs_srv_arena_calloc(a, 100, sizeof(*z));
    cr_assert(z);
    for (int i = 0; i < 100; i++)
        cr_expect_eq(z[i], 0);
    char *s = gs_srv_arena_strdup(a, "a request's url");
    cr_expect_str_eq(s, "a request's url");
    /* n * size past SIZE_MAX is refused, not wrapped. */
    cr_expect_null(gs_srv_arena_calloc(a, SIZE_MAX / 2, 4));
    cr_expect(gs_srv_arena_refused(a));
    gs_srv_arena_free(a);
}

Test(srv_arena, realloc_grows_in_place_when_it_can_and_keeps_the_bytes)
{
    struct gs_srv_arena *a = gs_srv_arena_new(64 * MIB);
    cr_assert(a);
    /* The latest small allocation grows where it is. */
    char *p = gs_srv_arena_alloc(a, 100);
    fill(p, 100, 1);
    char *q = gs_srv_arena_realloc(a, p, 100, 1000);
    cr_expect_eq(q, p);
    cr_expect(filled(q, 100, 1));
    /* One that is not the latest is copied. */
    char *other = gs_srv_arena_alloc(a, 10);
    fill(other, 10, 2);
    char *moved = gs_srv_arena_realloc(a, q, 1000, 2000);
    cr_assert(moved);
    cr_expect_neq(moved, q);
    cr_expect(filled(moved, 100, 1));
    cr_expect(filled(other, 10, 2));
    /* A small one that becomes large is copied into a chunk of its own, which then
     * grows by whole pages to several MiB and keeps every byte. */
    size_t n = 2000;
    char *big = gs_srv_arena_realloc(a, moved, n, 40000);
    cr_assert(big);
    cr_expect(filled(big, 100, 1));
    fill(big, 40000, 3);
    n = 40000;
    while (n < 8 * MIB) {
        size_t next = n * 2;
        big = gs_srv_arena_realloc(a, big, n, next);
        cr_assert(big, "growth to %zu bytes", next);
        cr_expect(filled(big, 40000, 3), "the first bytes at %zu", next);
        n = next;
    }
    memset(big + n - 1, 7, 1);
    /* Doubling from 40 KB to 8 MiB mapped about the final size, not the sum of
     * the copies (that would be twice as much). */
    cr_expect_lt(gs_srv_arena_mapped_bytes(a), n + n / 2);
    /* Shrinking keeps the pointer. */
    cr_expect_eq(gs_srv_arena_realloc(a, big, n, 10), big);
    cr_expect_eq(gs_srv_arena_realloc(a, NULL, 0, 32) != NULL, true);
    gs_srv_arena_free(a);
}

Test(srv_arena, the_cap_refuses_what_would_pass_it)
{
    cr_expect_null(gs_srv_arena_new(1000), "a cap below one chunk");
    size_t cap = 256u << 10;
    struct gs_srv_arena *a = gs_srv_arena_new(cap);
    cr_assert(a);
    cr_expect_eq(gs_srv_arena_cap_bytes(a), cap);
    size_t got = 0;
    while (gs_srv_arena_alloc(a, 1000))
        got += 1000;
    cr_expect(gs_srv_arena_refused(a));
    cr_expect_leq(gs_srv_arena_mapped_bytes(a), cap);
    cr_expect_gt(got, cap / 2, "only %zu bytes before the cap", got);
    /* A large allocation past the cap is refused too, and a growth past it leaves the
     * old bytes in place. */
    struct gs_srv_arena *b = gs_srv_arena_new(cap);
    cr_assert(b);
    cr_expect_null(gs_srv_arena_alloc(b, cap));
    char *p = gs_srv_arena_alloc(b, 100000);
    cr_assert(p);
    fill(p, 100000, 4);
    cr_expect_null(gs_srv_arena_realloc(b, p, 100000, cap));
    cr_expect(filled(p, 100000, 4));
    cr_expect(gs_srv_arena_refused(b));
    gs_srv_arena_free(b);
    gs_srv_arena_free(a);
}

Test(srv_arena, a_buffer_on_an_arena_fails_at_the_cap_and_refills_after_free)
{
    struct gs_srv_arena *a = gs_srv_arena_new(MIB);
    cr_assert(a);
    struct gs_srv_buf b = {.arena = a};
    char line[100];
    memset(line, 'x', sizeof(line));
    for (int i = 0; i < 1000; i++)
        gs_srv_buf_add(&b, line, sizeof(line));
    cr_expect_not(b.failed);
    cr_expect_eq(b.len, 100000);
    cr_expect_eq(b.p[b.len], '\0');
    gs_srv_buf_free(&b);
    cr_expect_null(b.p);
    cr_expect_eq(b.arena, a, "free keeps the arena");
    gs_srv_buf_adds(&b, "again");
    cr_expect_str_eq(b.p, "again");
    while (!b.failed && b.len < 4 * MIB)
        gs_srv_buf_add(&b, line, sizeof(line));
    cr_expect(b.failed, "a 1 MiB arena held %zu bytes", b.len);
    cr_expect(gs_srv_arena_refused(a));
    gs_srv_arena_free(a);
}

Test(srv_arena, free_unmaps_every_chunk)
{
    struct gs_srv_arena *a = gs_srv_arena_new(64 * MIB);
    cr_assert(a);
    enum { N = 40 };
    void *p[N];
    for (int i = 0; i < N; i++) {
        p[i] = gs_srv_arena_alloc(a, i % 2 ? 10000 : 100000); /* many chunks, large ones */
        cr_assert(p[i]);
        memset(p[i], 1, 100);
        cr_assert(mapped(p[i]));
    }
    gs_srv_arena_free(a);
    for (int i = 0; i < N; i++)
        cr_expect_not(mapped(p[i]), "allocation %d is still mapped", i);
    gs_srv_arena_free(NULL);
}

#if defined(__SANITIZE_ADDRESS__)
Test(srv_arena, bytes_not_handed_out_are_poisoned)
{
    struct gs_srv_arena *a = gs_srv_arena_new(MIB);
    cr_assert(a);
    char *p = gs_srv_arena_alloc(a, 32);
    cr_expect_not(__asan_address_is_poisoned(p));
    cr_expect_not(__asan_address_is_poisoned(p + 31));
    cr_expect(__asan_address_is_poisoned(p + 32), "past the allocation");
    char *other = gs_srv_arena_alloc(a, 16);
    (void)other;
    char *q = gs_srv_arena_realloc(a, p, 32, 64);
    cr_expect_neq(q, p);
    cr_expect(__asan_address_is_poisoned(p), "the old copy after a move");
    char *big = gs_srv_arena_alloc(a, 50000);
    cr_expect(__asan_address_is_poisoned(big + 50000), "past a large allocation");
    gs_srv_arena_free(a);
}
#endif

Test(srv_arena, owns_what_it_handed_out_only)
{
    struct gs_srv_arena *a = gs_srv_arena_new(MIB);
    cr_assert(a);
    char *p = gs_srv_arena_alloc(a, 40), *big = gs_srv_arena_alloc(a, 100000);
    char local;
    cr_expect(gs_srv_arena_owns(a, p));
    cr_expect(gs_srv_arena_owns(a, p + 39));
    cr_expect(gs_srv_arena_owns(a, big + 99999));
    cr_expect_not(gs_srv_arena_owns(a, &local));
    cr_expect_not(gs_srv_arena_owns(a, p + 48), "past the latest allocation");
    gs_srv_arena_free(a);
}

Test(srv_arena, json_is_dumped_into_a_buffer_or_not_at_all)
{
    struct gs_srv_arena *a = gs_srv_arena_new(MIB);
    cr_assert(a);
    struct gs_srv_buf b = {.arena = a};
    gs_srv_buf_adds(&b, "x=");
    json_t *j = json_pack("{s:i,s:[s]}", "a", 1, "b", "c");
    cr_expect(gs_srv_buf_add_json(&b, j, JSON_COMPACT));
    cr_expect_str_eq(b.p, "x={\"a\":1,\"b\":[\"c\"]}");
    json_t *bad = json_integer(5); /* a lone scalar needs JSON_ENCODE_ANY */
    cr_expect_not(gs_srv_buf_add_json(&b, bad, JSON_COMPACT));
    cr_expect_not(gs_srv_buf_add_json(&b, NULL, 0));
    cr_expect_str_eq(b.p, "x={\"a\":1,\"b\":[\"c\"]}", "nothing of a failed dump stays");
    cr_expect_not(b.failed);
    json_decref(j);
    json_decref(bad);
    gs_srv_arena_free(a);
}
