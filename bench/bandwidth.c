/*
 * bench/bandwidth.c - gs-bench-bandwidth: the machine's read bandwidth, the
 * ceiling of single-stream decoding (every weight byte is read once per
 * token). T threads each sum their share of a buffer far larger than the
 * caches, with four independent accumulators; the best of several passes is
 * printed in GB/s (10^9 bytes). Not a test: nothing is asserted.
 *
 * usage: gs-bench-bandwidth [THREADS [MIB]]   (default 2 threads, 1024 MiB)
 */
#include "engine/base.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef uint64_t u64x4 __attribute__((vector_size(32)));

struct share {
    const u64x4 *p;
    size_t n; /* vectors */
    uint64_t sum;
};

static void *read_share(void *arg)
{
    struct share *s = arg;
    u64x4 a = {0}, b = {0}, c = {0}, d = {0};
    for (size_t i = 0; i + 4 <= s->n; i += 4) {
        a += s->p[i];
        b += s->p[i + 1];
        c += s->p[i + 2];
        d += s->p[i + 3];
    }
    u64x4 t = a + b + c + d;
    s->sum = t[0] + t[1] + t[2] + t[3]; /* kept, so the reads are not optimised away */
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    long mib = argc > 2 ? atol(argv[2]) : 1024;
    if (threads < 1 || threads > 256 || mib < 64 || mib > (1L << 20)) {
        fprintf(stderr, "usage: gs-bench-bandwidth [THREADS (1-256) [MIB (64-1048576)]]\n");
        return 2;
    }
    size_t bytes = (size_t)mib << 20, n = bytes / sizeof(u64x4);
    u64x4 *buf = aligned_alloc(64, bytes);
    pthread_t *tid = malloc(sizeof(*tid) * (size_t)threads);
    struct share *sh = malloc(sizeof(*sh) * (size_t)threads);
    if (!buf || !tid || !sh) {
        fprintf(stderr, "gs-bench-bandwidth: cannot allocate %ld MiB\n", mib);
        return 1;
    }
    memset(buf, 1, bytes); /* touch every page before timing */
    double best = 0;
    uint64_t check = 0;
    for (int pass = 0; pass < 5; pass++) {
        double t0 = gs_now_ms();
        for (int t = 0; t < threads; t++) {
            size_t first = n / (size_t)threads * (size_t)t;
            size_t last = t == threads - 1 ? n : n / (size_t)threads * (size_t)(t + 1);
            sh[t] = (struct share){buf + first, last - first, 0};
            if (pthread_create(&tid[t], NULL, read_share, &sh[t])) {
                fprintf(stderr, "gs-bench-bandwidth: cannot start thread %d\n", t);
                return 1;
            }
        }
        for (int t = 0; t < threads; t++) {
            pthread_join(tid[t], NULL);
            check += sh[t].sum;
        }
        double s = (gs_now_ms() - t0) / 1000.0;
        best = GS_MAX(best, (double)bytes / s / 1e9);
    }
    printf("read bandwidth: %.1f GB/s (%d threads, %ld MiB, best of 5; checksum %llu)\n", best,
           threads, mib, (unsigned long long)(check & 0xffff));
    free(sh);
    free(tid);
    free(buf);
    return 0;
}
