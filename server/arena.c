/*
 * server/arena.c - a request's arena: bump allocation from chunks mapped
 * straight from the kernel (server/internal.h has the contract).
 *
 * Why mmap and not malloc: a request's buffers are freed together while
 * longer-lived objects (connections, reloaded settings, the response store)
 * are allocated between them; from glibc's heap the survivors pin the pages
 * around them and the heap only grows. A chunk of its own is unmapped whole,
 * whatever else the process allocated meanwhile.
 *
 * Layout: every chunk starts with its struct chunk; the first also holds the
 * struct gs_srv_arena. Small allocations bump through the current chunk
 * (a->cur); one larger than LARGE_BYTES gets a chunk of its own, which
 * gs_srv_arena_realloc grows with mremap, so the body and the stream buffer
 * grow without leaving copies behind. Under AddressSanitizer the bytes not
 * handed out, and those a realloc moved away from, are poisoned.
 */
#define _GNU_SOURCE
#include "server/internal.h"

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POISON(p, n)   ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n)   ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define CHUNK_BYTES ((size_t)64 << 10)
/* Above this an allocation is a chunk of its own: a quarter of a chunk at most
 * is left unused when the current one cannot take it. */
#define LARGE_BYTES (CHUNK_BYTES / 4)

struct chunk {
    struct chunk *next; /* every chunk of the arena, newest first */
    size_t size;        /* bytes mapped, this header included */
    size_t used;        /* bytes handed out, this header included */
    bool own;           /* holds one large allocation, right after the header */
};

struct gs_srv_arena {
    struct chunk *chunks; /* the first chunk (holding this record) is the last in the list */
    struct chunk *cur;    /* where small allocations come from */
    size_t cap_bytes;
    size_t mapped_bytes;
    bool refused; /* an allocation was refused for the cap */
    void *last;   /* the latest small allocation, which may grow in place */
};

#define ALIGN_UP(n) (((n) + GS_SRV_ARENA_ALIGN - 1) & ~(size_t)(GS_SRV_ARENA_ALIGN - 1))
#define HEAD_BYTES  ALIGN_UP(sizeof(struct chunk))
#define ARENA_BYTES ALIGN_UP(sizeof(struct gs_srv_arena))

static size_t page_bytes(void)
{
    static size_t page;
    if (!page) {
        long p = sysconf(_SC_PAGESIZE);
        page = p > 0 ? (size_t)p : 4096;
    }
    return page;
}

/* size rounded up to whole pages; 0 on overflow. */
static size_t pages_for(size_t size)
{
    size_t page = page_bytes();
    if (size > SIZE_MAX - page)
        return 0;
    return (size + page - 1) / page * page;
}

static struct chunk *chunk_map(size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    struct chunk *c = p;
    *c = (struct chunk){.size = size, .used = HEAD_BYTES};
    POISON((char *)c + HEAD_BYTES, size - HEAD_BYTES);
    return c;
}

static void chunk_unmap(struct chunk *c)
{
    /* The shadow of unmapped memory would stay poisoned for whatever is
     * mapped there next. */
    UNPOISON(c, c->size);
    munmap(c, c->size);
}

/* Whether size more mapped bytes fit under the cap; records a refusal. */
static bool cap_allows(struct gs_srv_arena *a, size_t size)
{
    if (size > a->cap_bytes - a->mapped_bytes) {
        a->refused = true;
        return false;
    }
    return true;
}

struct gs_srv_arena *gs_srv_arena_new(size_t cap_bytes)
{
    if (cap_bytes < CHUNK_BYTES)
        return NULL;
    struct chunk *c = chunk_map(CHUNK_BYTES);
    if (!c)
        return NULL;
    struct gs_srv_arena *a = (struct gs_srv_arena *)((char *)c + HEAD_BYTES);
    UNPOISON(a, ARENA_BYTES);
    c->used += ARENA_BYTES;
    *a = (struct gs_srv_arena){
        .chunks = c, .cur = c, .cap_bytes = cap_bytes, .mapped_bytes = CHUNK_BYTES};
    return a;
}

void gs_srv_arena_free(struct gs_srv_arena *a)
{
    if (!a)
        return;
    struct chunk *c = a->chunks; /* a lives in the last one: read nothing after it goes */
    while (c) {
        struct chunk *next = c->next;
        chunk_unmap(c);
        c = next;
    }
}

static void *alloc_own(struct gs_srv_arena *a, size_t size)
{
    size_t bytes = size <= SIZE_MAX - HEAD_BYTES ? pages_for(HEAD_BYTES + size) : 0;
    if (!bytes) {
        a->refused = true;
        return NULL;
    }
    if (!cap_allows(a, bytes))
        return NULL;
    struct chunk *c = chunk_map(bytes);
    if (!c)
        return NULL;
    c->own = true;
    c->used = HEAD_BYTES + size;
    c->next = a->chunks;
    a->chunks = c;
    a->mapped_bytes += bytes;
    void *p = (char *)c + HEAD_BYTES;
    UNPOISON(p, size);
    return p;
}

void *gs_srv_arena_alloc(struct gs_srv_arena *a, size_t size)
{
    if (size > LARGE_BYTES)
        return alloc_own(a, size);
    size = ALIGN_UP(size ? size : 1);
    struct chunk *c = a->cur;
    if (c->size - c->used < size) {
        if (!cap_allows(a, CHUNK_BYTES) || !(c = chunk_map(CHUNK_BYTES)))
            return NULL;
        c->next = a->chunks;
        a->chunks = c;
        a->cur = c;
        a->mapped_bytes += CHUNK_BYTES;
    }
    void *p = (char *)c + c->used;
    c->used += size;
    UNPOISON(p, size);
    a->last = p;
    return p;
}

void *gs_srv_arena_calloc(struct gs_srv_arena *a, size_t n, size_t size)
{
    uint64_t bytes;
    if (gs_mul_overflow(n, size, &bytes) || bytes > SIZE_MAX) {
        a->refused = true;
        return NULL;
    }
    void *p = gs_srv_arena_alloc(a, (size_t)bytes);
    if (p)
        memset(p, 0, (size_t)bytes);
    return p;
}

char *gs_srv_arena_strdup(struct gs_srv_arena *a, const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = gs_srv_arena_alloc(a, n);
    if (p)
        memcpy(p, s, n);
    return p;
}

/* The chunk that p is the large allocation of, or NULL. */
static struct chunk *own_chunk_of(const struct gs_srv_arena *a, const void *p)
{
    for (struct chunk *c = a->chunks; c; c = c->next)
        if (c->own && (const char *)c + HEAD_BYTES == (const char *)p)
            return c;
    return NULL;
}

static void *grow_own(struct gs_srv_arena *a, struct chunk *c, size_t size)
{
    size_t bytes = size <= SIZE_MAX - HEAD_BYTES ? pages_for(HEAD_BYTES + size) : 0;
    if (!bytes) {
        a->refused = true;
        return NULL;
    }
    if (bytes > c->size) {
        if (!cap_allows(a, bytes - c->size))
            return NULL;
        UNPOISON(c, c->size); /* the shadow moves with nothing: clear it before the move */
        void *q = mremap(c, c->size, bytes, MREMAP_MAYMOVE);
        if (q == MAP_FAILED) {
            POISON((char *)c + c->used, c->size - c->used);
            return NULL;
        }
        struct chunk *moved = q;
        a->mapped_bytes += bytes - moved->size;
        moved->size = bytes;
        if (moved != c) {
            struct chunk **link = &a->chunks;
            while (*link != c)
                link = &(*link)->next;
            *link = moved;
        }
        c = moved;
    }
    c->used = HEAD_BYTES + size;
    POISON((char *)c + c->used, c->size - c->used);
    return (char *)c + HEAD_BYTES;
}

void *gs_srv_arena_realloc(struct gs_srv_arena *a, void *p, size_t old_size, size_t size)
{
    if (!p)
        return gs_srv_arena_alloc(a, size);
    if (size <= old_size)
        return p;
    struct chunk *own = old_size > LARGE_BYTES ? own_chunk_of(a, p) : NULL;
    if (own)
        return grow_own(a, own, size);
    struct chunk *c = a->cur;
    size_t old_room = ALIGN_UP(old_size ? old_size : 1);
    if (p == a->last && size <= LARGE_BYTES) {
        size_t room = ALIGN_UP(size);
        if (room - old_room <= c->size - c->used) {
            UNPOISON((char *)p + old_room, room - old_room);
            c->used += room - old_room;
            return p;
        }
    }
    void *q = gs_srv_arena_alloc(a, size);
    if (!q)
        return NULL;
    memcpy(q, p, old_size);
    POISON(p, old_room); /* a stale pointer to the old copy is an error ASan reports */
    return q;
}

bool gs_srv_arena_owns(const struct gs_srv_arena *a, const void *p)
{
    const char *c_p = p;
    for (const struct chunk *c = a->chunks; c; c = c->next)
        if (c_p >= (const char *)c + HEAD_BYTES && c_p < (const char *)c + c->used)
            return true;
    return false;
}

bool gs_srv_arena_refused(const struct gs_srv_arena *a)
{
    return a->refused;
}

size_t gs_srv_arena_cap_bytes(const struct gs_srv_arena *a)
{
    return a->cap_bytes;
}

size_t gs_srv_arena_mapped_bytes(const struct gs_srv_arena *a)
{
    return a->mapped_bytes;
}
