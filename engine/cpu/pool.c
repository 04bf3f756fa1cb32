/*
 * engine/cpu/pool.c - the persistent worker pool of the cpu backend.
 *
 * One 64-bit word describes the task in flight: generation (32 bits), chunk
 * count (16) and next unclaimed chunk (16). A thread claims a chunk by a
 * compare-and-swap that only succeeds while the generation and count are
 * those it saw, so a worker that wakes late can never run a chunk of a task
 * that has moved on. The caller publishes a task, works through chunks like
 * any worker, then waits for the done counter to reach the chunk count: the
 * op's one barrier. It never waits for a worker that has not claimed a
 * chunk, which keeps steps fast when the machine has more runnable threads
 * than cores.
 *
 * fn and arg are written before the word that publishes them; a worker reads
 * them only after claiming a chunk, and the caller cannot publish the next
 * task until that chunk is done, so it reads the task it claimed.
 *
 * Sleeping is Dekker-style with sequentially consistent atomics: a worker
 * counts itself in n_sleeping before re-reading the word under the mutex, and
 * the publisher stores the word before reading n_sleeping.
 */
#include "engine/cpu/cpu.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

/* Busy-wait iterations before a waiting thread yields its core, and yields
 * before a worker sleeps. */
#define SPIN_ITERS 256
#define YIELD_ITERS 2000

#define WORD(gen, n, next) (((uint64_t)(gen) << 32) | ((uint64_t)(n) << 16) | (uint64_t)(next))
#define WORD_GEN(w) ((uint32_t)((w) >> 32))
#define WORD_N(w) ((uint32_t)(((w) >> 16) & 0xffff))
#define WORD_NEXT(w) ((uint32_t)((w)&0xffff))

struct worker {
    struct gs_cpu_pool *pool;
    pthread_t thread;
    int ith;
};

struct gs_cpu_pool {
    int n_threads;
    struct worker *workers; /* [n_threads - 1] */
    gs_cpu_task_fn fn;
    void *arg;
    _Atomic uint64_t word; /* generation | chunk count | next chunk */
    _Atomic int n_done;    /* chunks finished in the current task */
    _Atomic int n_sleeping;
    _Atomic bool stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

/* Claims and runs chunks of the task of generation gen until none is left. */
static void work_on(struct gs_cpu_pool *pool, uint32_t gen, int ith)
{
    uint64_t w = atomic_load(&pool->word);
    while (WORD_GEN(w) == gen && WORD_NEXT(w) < WORD_N(w)) {
        if (!atomic_compare_exchange_weak(&pool->word, &w, w + 1))
            continue;
        pool->fn(pool->arg, (int)WORD_NEXT(w), (int)WORD_N(w), ith);
        atomic_fetch_add_explicit(&pool->n_done, 1, memory_order_release);
        w = atomic_load(&pool->word);
    }
}

static void *worker_main(void *p)
{
    struct worker *wk = p;
    struct gs_cpu_pool *pool = wk->pool;
    uint32_t seen = 0;
    for (;;) {
        uint32_t g;
        int spins = 0;
        while ((g = WORD_GEN(atomic_load(&pool->word))) == seen && !atomic_load(&pool->stop)) {
            if (++spins < SPIN_ITERS) {
                cpu_relax();
                continue;
            }
            if (spins < SPIN_ITERS + YIELD_ITERS) {
                sched_yield();
                continue;
            }
            pthread_mutex_lock(&pool->mu);
            atomic_fetch_add(&pool->n_sleeping, 1);
            while (WORD_GEN(atomic_load(&pool->word)) == seen && !atomic_load(&pool->stop))
                pthread_cond_wait(&pool->cv, &pool->mu);
            atomic_fetch_sub(&pool->n_sleeping, 1);
            pthread_mutex_unlock(&pool->mu);
            spins = 0;
        }
        if (atomic_load(&pool->stop))
            return NULL;
        seen = g;
        work_on(pool, g, wk->ith);
    }
}

int gs_cpu_physical_cores(void)
{
    /* Count distinct (physical id, core id) pairs; fall back to online CPUs. */
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int n = 0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f) {
        char line[256];
        int phys = 0, pairs[1024][2], n_pairs = 0;
        while (fgets(line, sizeof(line), f)) {
            int v;
            if (sscanf(line, "physical id : %d", &v) == 1)
                phys = v;
            else if (sscanf(line, "core id : %d", &v) == 1) {
                bool seen = false;
                for (int i = 0; i < n_pairs; i++)
                    seen |= pairs[i][0] == phys && pairs[i][1] == v;
                if (!seen && n_pairs < 1024) {
                    pairs[n_pairs][0] = phys;
                    pairs[n_pairs][1] = v;
                    n_pairs++;
                }
            }
        }
        fclose(f);
        n = n_pairs;
    }
    if (n <= 0)
        n = online > 0 ? (int)online : 1;
    return n;
}

enum gs_status gs_cpu_pool_new(int n_threads, struct gs_cpu_pool **out, struct gs_err *err)
{
    *out = NULL;
    if (n_threads < 0 || n_threads > 1024)
        return gs_err_set(err, GS_INVAL, "threads: %d is outside 0..1024", n_threads);
    if (n_threads == 0)
        n_threads = gs_cpu_physical_cores();
    struct gs_cpu_pool *pool = gs_calloc(1, sizeof(*pool));
    if (!pool)
        return gs_err_set(err, GS_NOMEM, "threads: out of memory");
    pool->n_threads = 1;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->cv, NULL);
    if (n_threads > 1) {
        pool->workers = gs_calloc((size_t)n_threads - 1, sizeof(*pool->workers));
        if (!pool->workers) {
            gs_cpu_pool_free(pool);
            return gs_err_set(err, GS_NOMEM, "threads: out of memory");
        }
    }
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, GS_THREAD_STACK_BYTES);
    for (int i = 0; i < n_threads - 1; i++) {
        struct worker *w = &pool->workers[i];
        w->pool = pool;
        w->ith = i + 1;
        if (pthread_create(&w->thread, &attr, worker_main, w) != 0) {
            pthread_attr_destroy(&attr);
            gs_cpu_pool_free(pool); /* joins the pool->n_threads - 1 started so far */
            return gs_err_set(err, GS_NOMEM, "threads: cannot start worker %d of %d", i + 1,
                              n_threads);
        }
        pool->n_threads = i + 2;
    }
    pthread_attr_destroy(&attr);
    *out = pool;
    return GS_OK;
}

void gs_cpu_pool_free(struct gs_cpu_pool *pool)
{
    if (!pool)
        return;
    pthread_mutex_lock(&pool->mu);
    atomic_store(&pool->stop, true);
    pthread_cond_broadcast(&pool->cv);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 0; i < pool->n_threads - 1; i++)
        pthread_join(pool->workers[i].thread, NULL);
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->cv);
    gs_free(pool->workers);
    gs_free(pool);
}

int gs_cpu_pool_threads(const struct gs_cpu_pool *pool)
{
    return pool->n_threads;
}

void gs_cpu_pool_run(struct gs_cpu_pool *pool, gs_cpu_task_fn fn, void *arg, int n_chunks)
{
    n_chunks = GS_MAX(1, GS_MIN(n_chunks, 0xffff));
    if (pool->n_threads == 1 || n_chunks == 1) {
        for (int c = 0; c < n_chunks; c++)
            fn(arg, c, n_chunks, 0);
        return;
    }
    pool->fn = fn;
    pool->arg = arg;
    atomic_store_explicit(&pool->n_done, 0, memory_order_relaxed);
    const uint32_t gen = WORD_GEN(atomic_load(&pool->word)) + 1;
    atomic_store(&pool->word, WORD(gen, n_chunks, 0)); /* seq_cst: publishes fn, arg, n_done */
    if (atomic_load(&pool->n_sleeping) > 0) {
        pthread_mutex_lock(&pool->mu);
        pthread_cond_broadcast(&pool->cv);
        pthread_mutex_unlock(&pool->mu);
    }
    work_on(pool, gen, 0);
    for (int spins = 0; atomic_load_explicit(&pool->n_done, memory_order_acquire) < n_chunks;)
        if (++spins < SPIN_ITERS)
            cpu_relax();
        else
            sched_yield();
}
