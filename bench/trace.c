/*
 * bench/trace.c - gs-bench-trace: what the step trace (/debug/events) costs the
 * engine.
 *
 *   gs-bench-trace -m MODEL [--backend cpu] [--seqs 16] [--prompt 32] [--gen 64]
 *                  [--rounds 5]
 *
 * Runs the same load (--seqs requests at once, --prompt random tokens, --gen
 * tokens each, greedy) on one scheduler in synchronous mode, alternating rounds
 * without a watcher and with one that takes the records after every step (as
 * the daemon's loop thread does; the loop's fan-out to HTTP clients runs on
 * that thread, not the engine's, and is not in these figures). Prints the best
 * generated tokens/s of each mode and their ratio: compare the ratio, measured
 * in one run, not the absolute figures across runs.
 */
#define _GNU_SOURCE
#include "engine/gguf.h"
#include "engine/model.h"
#include "scheduler/scheduler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct opts {
    const char *model, *backend;
    uint32_t seqs, n_prompt, n_gen, rounds;
};

static int usage(void)
{
    fprintf(stderr, "usage: gs-bench-trace -m MODEL [--backend cpu] [--seqs 16] [--prompt 32] "
                    "[--gen 64] [--rounds 5]\n");
    return 2;
}

static bool parse(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){.backend = "cpu", .seqs = 16, .n_prompt = 32, .n_gen = 64, .rounds = 5};
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *a = argv[i], *v = argv[i + 1];
        if (!strcmp(a, "-m"))
            o->model = v;
        else if (!strcmp(a, "--backend"))
            o->backend = v;
        else if (!strcmp(a, "--seqs"))
            o->seqs = (uint32_t)atoi(v);
        else if (!strcmp(a, "--prompt"))
            o->n_prompt = (uint32_t)atoi(v);
        else if (!strcmp(a, "--gen"))
            o->n_gen = (uint32_t)atoi(v);
        else if (!strcmp(a, "--rounds"))
            o->rounds = (uint32_t)atoi(v);
        else
            return false;
    }
    return o->model && o->seqs >= 1 && o->n_prompt >= 1 && o->n_gen >= 1 && o->rounds >= 1 &&
           argc % 2 == 1;
}

/* One round of the load; returns generated tokens/s, and the records' bytes taken. */
static double round_once(const struct opts *o, struct gs_sched *s, const struct gs_model *m,
                         bool watched, uint64_t *bytes, uint64_t *dropped, uint64_t round)
{
    struct gs_err err;
    int32_t *prompt = malloc(o->n_prompt * sizeof(*prompt));
    unsigned seed = 1234;
    for (uint32_t i = 0; i < o->seqs; i++) {
        prompt[0] = m->hp.bos_id >= 0 ? m->hp.bos_id : 1;
        for (uint32_t t = 1; t < o->n_prompt; t++)
            prompt[t] = 3 + rand_r(&seed) % (int32_t)(m->hp.n_vocab - 3);
        struct gs_sched_request req = {.id = round * o->seqs + i,
                                       .prompt = prompt,
                                       .n_prompt = o->n_prompt,
                                       .max_tokens = o->n_gen,
                                       .ignore_eos = true};
        gs_sample_params_init(&req.sampling);
        req.sampling.temperature = 0;
        if (gs_sched_submit(s, &req, &err)) {
            fprintf(stderr, "gs-bench-trace: %s\n", err.msg);
            exit(1);
        }
    }
    free(prompt);
    if (watched)
        gs_sched_trace_watch(s, true);
    uint64_t generated = 0;
    double t0 = gs_now_ms();
    while (!gs_sched_idle(s)) {
        if (gs_sched_step(s, &err)) {
            fprintf(stderr, "gs-bench-trace: %s\n", err.msg);
            exit(1);
        }
        struct gs_sched_event ev[256];
        size_t n;
        while ((n = gs_sched_poll(s, ev, 256)) > 0)
            for (size_t i = 0; i < n; i++)
                generated += ev[i].kind == GS_SCHED_EV_TOKEN;
        char *text;
        size_t len;
        *dropped += gs_sched_trace_take(s, &text, &len);
        *bytes += len;
        free(text);
    }
    double secs = (gs_now_ms() - t0) / 1000.0;
    if (watched)
        gs_sched_trace_watch(s, false);
    return (double)generated / secs;
}

int main(int argc, char **argv)
{
    struct opts o;
    if (!parse(argc, argv, &o))
        return usage();
    struct gs_err err;
    struct gs_gguf *g;
    struct gs_model *m;
    if (gs_gguf_open(o.model, &g, &err) || gs_model_load(g, &m, &err)) {
        fprintf(stderr, "gs-bench-trace: %s\n", err.msg);
        return 1;
    }
    uint64_t per_token = (uint64_t)gs_model_kv_layers(m) * 2 * gs_model_kv_dim(m) * 2;
    uint64_t pages = (uint64_t)o.seqs * ((o.n_prompt + o.n_gen + 15) / 16 + 1);
    struct gs_sched_cfg cfg = {.backend = o.backend,
                               .kv_type = GS_TYPE_F16,
                               .max_seqs = o.seqs,
                               .max_batch_tokens = GS_MAX(512u, o.seqs),
                               .n_ctx = o.n_prompt + o.n_gen + 1,
                               .max_queue = o.seqs + 1,
                               .kv_cache_bytes = pages * 16 * per_token};
    struct gs_sched *s;
    if (gs_sched_new(&cfg, m, &s, &err)) {
        fprintf(stderr, "gs-bench-trace: %s\n", err.msg);
        return 1;
    }
    double best[2] = {0, 0};
    uint64_t bytes = 0, dropped = 0, steps0, steps1;
    struct gs_sched_stats st;
    /* A warm-up round plans every shape first. */
    round_once(&o, s, m, false, &bytes, &dropped, 0);
    gs_sched_stats(s, &st);
    steps0 = st.n_steps;
    for (uint32_t r = 0; r < 2 * o.rounds; r++) {
        bool watched = r % 2 == 1;
        double tps = round_once(&o, s, m, watched, &bytes, &dropped, r + 1);
        best[watched] = GS_MAX(best[watched], tps);
    }
    gs_sched_stats(s, &st);
    steps1 = st.n_steps;
    printf("model %s, backend %s, %u sequences, prompt %u, gen %u, best of %u rounds each\n",
           o.model, o.backend, o.seqs, o.n_prompt, o.n_gen, o.rounds);
    printf("| no watcher gen tok/s | watched gen tok/s | watched / not |"
           " record bytes per watched step | dropped |\n|---:|---:|---:|---:|---:|\n");
    printf("| %.1f | %.1f | %.3f | %.0f | %llu |\n", best[0], best[1], best[1] / best[0],
           (double)bytes / ((double)(steps1 - steps0) / 2), (unsigned long long)dropped);
    gs_sched_free(s);
    gs_model_free(m);
    gs_gguf_close(g);
    return 0;
}
