/*
 * bench/validation.c - the cost of per-request validation: requests/s and
 * the inter-token latency of the streams that share the engine, with
 * validation off, on 1 % of requests and on every request.
 *
 *   gs-bench-validation -m MODEL [--backend cpu] [--requests N] [--concurrency C]
 *                       [--prompt P] [--gen G] [--chunk T] [--reps R]
 *
 * The scheduler runs threaded, as in the daemon; the bench keeps C requests
 * in flight until N have finished; each rate keeps the best of R runs
 * (default 3) by requests/s. Request i is validated when the rate's
 * running count steps up at i (1 %: every 100th). Latencies are measured
 * where the daemon's loop sees them: when events are polled after the
 * engine's notify. A run ends when every validation report is in.
 */
#include "engine/gguf.h"
#include "engine/model.h"
#include "scheduler/scheduler.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct opts {
    const char *model, *backend;
    int requests, concurrency, prompt, gen, chunk, reps;
};

struct waker {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool flag;
};

static void notify(void *ctx)
{
    struct waker *w = ctx;
    pthread_mutex_lock(&w->mu);
    w->flag = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

struct run {
    double wall_s, req_per_s, tok_per_s, itl_mean_ms, itl_p50_ms, itl_p99_ms;
    int n_validated, n_failed;
};

static int one_run(const struct opts *o, struct gs_model *m, double rate, struct run *out)
{
    struct waker w = {.flag = false};
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    struct gs_sched_cfg cfg = {.backend = o->backend,
                               .max_seqs = (uint32_t)o->concurrency,
                               .max_queue = (uint32_t)o->requests + 1,
                               .prefix_cache = false,
                               .validate_chunk_tokens = (uint32_t)o->chunk,
                               .notify = notify,
                               .notify_ctx = &w};
    struct gs_sched *s;
    struct gs_err err;
    if (gs_sched_new(&cfg, m, &s, &err) || gs_sched_start(s, &err)) {
        fprintf(stderr, "scheduler: %s\n", err.msg);
        return 1;
    }
    int32_t *prompt = malloc(sizeof(*prompt) * (size_t)o->prompt);
    double *last = calloc((size_t)o->requests, sizeof(*last));
    size_t cap_itl = (size_t)o->requests * (size_t)o->gen, n_itl = 0;
    double *itl = malloc(sizeof(*itl) * cap_itl);
    bool *validated = calloc((size_t)o->requests, sizeof(*validated));
    int submitted = 0, finished = 0, reports = 0, want_reports = 0;
    uint64_t tokens = 0;
    double t0 = gs_now_ms();
    struct gs_sched_event ev[64];
    while (finished < o->requests || reports < want_reports) {
        while (submitted < o->requests && submitted - finished < o->concurrency) {
            int i = submitted;
            for (int k = 0; k < o->prompt; k++)
                prompt[k] = 1 + (int32_t)((i * 31 + k * 7) % (m->hp.n_vocab - 1));
            struct gs_sched_request q = {.id = (uint64_t)i,
                                         .prompt = prompt,
                                         .n_prompt = (uint32_t)o->prompt,
                                         .max_tokens = (uint32_t)o->gen,
                                         .ignore_eos = true};
            gs_sample_params_init(&q.sampling);
            q.sampling.temperature = 0;
            q.validate = floor((i + 1) * rate) > floor(i * rate);
            validated[i] = q.validate;
            want_reports += q.validate;
            if (gs_sched_submit(s, &q, &err)) {
                fprintf(stderr, "submit: %s\n", err.msg);
                return 1;
            }
            submitted++;
        }
        pthread_mutex_lock(&w.mu);
        while (!w.flag)
            pthread_cond_wait(&w.cv, &w.mu);
        w.flag = false;
        pthread_mutex_unlock(&w.mu);
        size_t n;
        while ((n = gs_sched_poll(s, ev, 64)) > 0) {
            double now = gs_now_ms();
            for (size_t k = 0; k < n; k++) {
                int id = (int)ev[k].id;
                if (ev[k].kind == GS_SCHED_EV_TOKEN) {
                    tokens++;
                    /* A stream's own validation runs after its last token,
                     * so every stream's gaps measure what validation of the
                     * others costs it. */
                    if (last[id] > 0 && n_itl < cap_itl)
                        itl[n_itl++] = now - last[id];
                    last[id] = now;
                } else if (ev[k].kind == GS_SCHED_EV_FINISH) {
                    finished++;
                } else {
                    reports++;
                    out->n_failed += !ev[k].validation || !ev[k].validation->pass;
                }
            }
        }
    }
    double wall = (gs_now_ms() - t0) / 1000.0;
    gs_sched_stop(s, 0);
    gs_sched_free(s);
    qsort(itl, n_itl, sizeof(*itl), cmp_d);
    double sum = 0;
    for (size_t i = 0; i < n_itl; i++)
        sum += itl[i];
    out->wall_s = wall;
    out->req_per_s = o->requests / wall;
    out->tok_per_s = (double)tokens / wall;
    out->itl_mean_ms = n_itl ? sum / (double)n_itl : 0;
    out->itl_p50_ms = n_itl ? itl[n_itl / 2] : 0;
    out->itl_p99_ms = n_itl ? itl[(size_t)((double)(n_itl - 1) * 0.99)] : 0;
    out->n_validated = want_reports;
    free(prompt);
    free(last);
    free(itl);
    free(validated);
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o = {.backend = "cpu",
                     .requests = 200,
                     .concurrency = 16,
                     .prompt = 32,
                     .gen = 64,
                     .chunk = 0,
                     .reps = 3};
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "-m"))
            o.model = v;
        else if (!strcmp(a, "--backend"))
            o.backend = v;
        else if (!strcmp(a, "--requests"))
            o.requests = atoi(v);
        else if (!strcmp(a, "--concurrency"))
            o.concurrency = atoi(v);
        else if (!strcmp(a, "--prompt"))
            o.prompt = atoi(v);
        else if (!strcmp(a, "--gen"))
            o.gen = atoi(v);
        else if (!strcmp(a, "--chunk"))
            o.chunk = atoi(v);
        else if (!strcmp(a, "--reps"))
            o.reps = atoi(v);
    }
    if (!o.model || o.reps < 1 || o.requests < 1 || o.concurrency < 1 || o.prompt < 1 ||
        o.gen < 2) {
        fprintf(stderr, "usage: gs-bench-validation -m MODEL [--backend cpu] [--requests N] "
                        "[--concurrency C] [--prompt P] [--gen G] [--chunk T] [--reps R]\n");
        return 2;
    }
    struct gs_gguf *g;
    struct gs_model *m;
    struct gs_err err;
    if (gs_gguf_open(o.model, &g, &err) || gs_model_load(g, &m, &err)) {
        fprintf(stderr, "%s: %s\n", o.model, err.msg);
        return 1;
    }
    printf("model=%s backend=%s requests=%d concurrency=%d prompt=%d gen=%d chunk=%d\n", o.model,
           o.backend, o.requests, o.concurrency, o.prompt, o.gen, o.chunk ? o.chunk : 32);
    printf("| validated | req/s | tok/s | ITL mean ms | ITL p50 ms | ITL p99 ms | reports "
           "(failed) |\n|---|---|---|---|---|---|---|\n");
    static const double rates[] = {0, 0.01, 1};
    int rc = 0;
    for (size_t r = 0; r < 3 && !rc; r++) {
        /* Best of reps runs (by requests/s): the machine is shared. */
        struct run x = {0};
        for (int k = 0; k < o.reps && !rc; k++) {
            struct run y = {0};
            rc = one_run(&o, m, rates[r], &y);
            if (!rc && y.req_per_s > x.req_per_s)
                x = y;
        }
        if (!rc)
            printf("| %g %% | %.1f | %.0f | %.3f | %.3f | %.3f | %d (%d) |\n", rates[r] * 100,
                   x.req_per_s, x.tok_per_s, x.itl_mean_ms, x.itl_p50_ms, x.itl_p99_ms,
                   x.n_validated, x.n_failed);
        fflush(stdout);
    }
    gs_model_free(m);
    gs_gguf_close(g);
    return rc;
}
