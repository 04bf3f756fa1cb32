/* Lets Criterion 2.4 start under ThreadSanitizer. Linked into the test
 * executables of a -Db_sanitize=thread build only (tests/meson.build).
 *
 * Criterion keeps its tests' shared state in an "inheritable arena" that
 * BoxFort maps with MAP_FIXED at the same address in the runner and in every
 * worker it re-executes. BoxFort picks that address as
 *     0x200000000000 + (rand_r(&seed) & 0x3fffff) * 16 MiB,
 * i.e. somewhere in [0x2000'0000'0000, 0x6000'0000'0000), and gives up after
 * ten tries on a page that is already mapped. On x86-64 ThreadSanitizer
 * reserves nearly all of that range for its shadow and meta memory (or maps
 * it PROT_NONE); the one part left to the program is the PIE range from
 * 0x5500'0000'0000 to 0x5680'0000'0000, so ten tries almost never hit it and
 * every suite aborts with "Could not initialize inheritable arena: Resource
 * temporarily unavailable" (upstream Snaipe/Criterion#274, still open).
 *
 * This file defines rand_r, so it takes the place of glibc's (and
 * ThreadSanitizer's interceptor) for the whole process. Every caller gets the
 * next definition's result; a call made from libcriterion's code (its copy of
 * BoxFort is linked into it) gets that result with the 22 bits BoxFort uses
 * replaced by a slot in 0x5500'0000'0000 to 0x5540'0000'0000: application
 * memory for ThreadSanitizer, below where the kernel loads PIE executables
 * (0x5555'5555'4000 and up), so the runner and every worker can map it.
 * The tests' own rand_r sequences are untouched. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if !defined(__x86_64__) || !defined(__linux__)
#error "criterion_tsan.c knows ThreadSanitizer's memory layout on x86-64 Linux only"
#endif

/* BoxFort's arena placement (src/arena.c, 64-bit): base 0x200000000000,
 * 16 MiB slots, the slot number taken from the low 22 bits of rand_r. */
enum {
    ARENA_SLOT_MASK = 0x3fffff,
    /* (0x550000000000 - 0x200000000000) / 16 MiB */
    ARENA_FIRST_FREE_SLOT = 0x350000,
    /* 0x4000 slots of 16 MiB: up to 0x554000000000 */
    ARENA_FREE_SLOTS_MASK = 0x3fff,
};

static int (*next_rand_r)(unsigned *);

static void find_next(void)
{
    next_rand_r = (int (*)(unsigned *))dlsym(RTLD_NEXT, "rand_r");
}

static int called_from_criterion(const void *pc)
{
    Dl_info info;
    if (!dladdr(pc, &info) || !info.dli_fname)
        return 0;
    const char *slash = strrchr(info.dli_fname, '/');
    return strncmp(slash ? slash + 1 : info.dli_fname, "libcriterion.so", 15) == 0;
}

int rand_r(unsigned *seed)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, find_next);
    if (!next_rand_r)
        abort(); /* no glibc below us: nothing sensible to return */
    int r = next_rand_r(seed);
    if (called_from_criterion(__builtin_return_address(0)))
        r = (r & ~ARENA_SLOT_MASK) | (ARENA_FIRST_FREE_SLOT + (r & ARENA_FREE_SLOTS_MASK));
    return r;
}
