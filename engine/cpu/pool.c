/*
 * engine/cpu/pool.c - the persistent worker pool of the cpu backend.
 *
 * A task is published by bumping a generation counter; workers spin on it for
 * a while (the next op of a step follows within microseconds, and a futex
 * wake-up would cost more than the op) and then sleep on a condition variable.
 * The caller runs share 0 and waits for a done counter: that wait is the one
 * barrier per op.
 *
 * Sleeping is Dekker-style with sequentially consistent atomics: a worker
 * announces itself in n_sleeping before re-reading the generation under the
 * mutex, and the publisher bumps the generation before reading n_sleeping, so
 * at least one of them sees the other.
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
#else
#define cpu_relax() ((void)0)
#endif

/* Busy-wait iterations before a waiting thread yields its core, and yields
 * before a worker sleeps. Yielding matters when the machine has more runnable
 * threads than cores: a spinning waiter would otherwise burn the time slice
 * the thread it waits for needs. */
#define SPIN_ITERS 256
#define YIELD_ITERS 2000

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
    _Atomic unsigned gen;  /* bumped once per task */
    _Atomic int n_done;    /* workers finished with the current task */
    _Atomic int n_sleeping;
    _Atomic bool stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static void *worker_main(void *p)
{
    struct worker *w = p;
    struct gs_cpu_pool *pool = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&pool->gen, memory_order_acquire)) == seen) {
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
            while (atomic_load(&pool->gen) == seen && !atomic_load(&pool->stop))
                pthread_cond_wait(&pool->cv, &pool->mu);
            atomic_fetch_sub(&pool->n_sleeping, 1);
            pthread_mutex_unlock(&pool->mu);
            spins = 0;
        }
        seen = g;
        if (atomic_load(&pool->stop))
            return NULL;
        pool->fn(pool->arg, w->ith, pool->n_threads);
        atomic_fetch_add_explicit(&pool->n_done, 1, memory_order_acq_rel);
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
    pool->n_threads = n_threads;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->cv, NULL);
    if (n_threads > 1) {
        pool->workers = gs_calloc((size_t)n_threads - 1, sizeof(*pool->workers));
        if (!pool->workers) {
            gs_cpu_pool_free(pool);
            return gs_err_set(err, GS_NOMEM, "threads: out of memory");
        }
    }
    for (int i = 0; i < n_threads - 1; i++) {
        struct worker *w = &pool->workers[i];
        w->pool = pool;
        w->ith = i + 1;
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            pool->n_threads = i + 1; /* only the started ones are joined */
            gs_cpu_pool_free(pool);
            return gs_err_set(err, GS_NOMEM, "threads: cannot start worker %d of %d", i + 1,
                              n_threads);
        }
    }
    *out = pool;
    return GS_OK;
}

void gs_cpu_pool_free(struct gs_cpu_pool *pool)
{
    if (!pool)
        return;
    atomic_store(&pool->stop, true);
    pthread_mutex_lock(&pool->mu);
    atomic_fetch_add(&pool->gen, 1);
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

void gs_cpu_pool_run(struct gs_cpu_pool *pool, gs_cpu_task_fn fn, void *arg)
{
    if (pool->n_threads == 1) {
        fn(arg, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->arg = arg;
    atomic_store_explicit(&pool->n_done, 0, memory_order_relaxed);
    atomic_fetch_add(&pool->gen, 1); /* seq_cst: publishes fn, arg and the reset */
    if (atomic_load(&pool->n_sleeping) > 0) {
        pthread_mutex_lock(&pool->mu);
        pthread_cond_broadcast(&pool->cv);
        pthread_mutex_unlock(&pool->mu);
    }
    fn(arg, 0, pool->n_threads);
    for (int spins = 0;
         atomic_load_explicit(&pool->n_done, memory_order_acquire) < pool->n_threads - 1;)
        if (++spins < SPIN_ITERS)
            cpu_relax();
        else
            sched_yield();
}
