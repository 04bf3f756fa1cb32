/*
 * bench/batch.c - gs-bench-batch: what continuous batching buys.
 *
 *   gs-bench-batch -m MODEL [--backend ref] [--seqs 1,4,16,64] [--prompt N]
 *                  [--gen N] [--kv-type f16|f32|q8_0] [--kv-cache-bytes N]
 *                  [--max-batch-tokens N] [--json]
 *
 * For each concurrency C it submits C requests at once (random prompts of
 * --prompt tokens, --gen tokens each, greedy, ignore_eos) to a scheduler in
 * synchronous mode, runs to idle and reports:
 *   - aggregate generated tokens/s, and the ratio to C = 1 in the same run;
 *   - KV memory actually used per token (peak pages in use x page bytes /
 *     peak tokens held) next to what a contiguous cache reserving the full
 *     context for every sequence would take per token held;
 *   - the pool's pages and the most sequences that ran at once: with
 *     --kv-cache-bytes the pool has that budget (sequences beyond it wait or
 *     are preempted), else room for all C.
 * Timings are wall-clock on whatever else the machine is doing: compare the
 * ratios within one run, not absolute numbers across runs.
 */
#define _GNU_SOURCE
#include "engine/backend.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "scheduler/scheduler.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct opts {
    const char *model, *backend;
    uint32_t seqs[16], n_seqs;
    uint32_t n_prompt, n_gen, max_batch;
    uint64_t kv_bytes; /* 0: room for every sequence */
    enum gs_type kv_type;
    bool json;
};

static int usage(void)
{
    fprintf(stderr, "usage: gs-bench-batch -m MODEL [--backend ref] [--seqs 1,4,16,64] "
                    "[--prompt N] [--gen N] [--kv-type f16|f32|q8_0] [--kv-cache-bytes N] "
                    "[--max-batch-tokens N] [--json]\n");
    return 2;
}

static bool parse(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){.backend = "ref", .seqs = {1, 4, 16, 64}, .n_seqs = 4, .n_prompt = 32,
                       .n_gen = 32, .max_batch = 512, .kv_type = GS_TYPE_F16};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) {
            o->json = true;
            continue;
        }
        if (!v)
            return false;
        i++;
        if (!strcmp(a, "-m"))
            o->model = v;
        else if (!strcmp(a, "--backend"))
            o->backend = v;
        else if (!strcmp(a, "--prompt"))
            o->n_prompt = (uint32_t)atoi(v);
        else if (!strcmp(a, "--gen"))
            o->n_gen = (uint32_t)atoi(v);
        else if (!strcmp(a, "--kv-cache-bytes"))
            o->kv_bytes = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--max-batch-tokens"))
            o->max_batch = (uint32_t)atoi(v);
        else if (!strcmp(a, "--kv-type"))
            o->kv_type = !strcmp(v, "f32")    ? GS_TYPE_F32
                         : !strcmp(v, "q8_0") ? GS_TYPE_Q8_0
                                              : GS_TYPE_F16;
        else if (!strcmp(a, "--seqs")) {
            o->n_seqs = 0;
            for (char *s = (char *)v; *s && o->n_seqs < 16;) {
                o->seqs[o->n_seqs++] = (uint32_t)strtoul(s, &s, 10);
                if (*s == ',')
                    s++;
            }
        } else
            return false;
    }
    return o->model && o->n_prompt >= 1 && o->n_gen >= 1 && o->n_seqs >= 1;
}

struct result {
    uint32_t seqs;
    double seconds, tok_s;
    uint32_t peak_pages, peak_tokens, pool_pages, peak_running;
    double kv_bytes_per_token, contiguous_bytes_per_token;
    uint64_t n_preemptions;
};

static int run_one(const struct opts *o, struct gs_model *m, uint32_t c, struct result *r)
{
    struct gs_err err;
    uint32_t n_ctx = m->hp.n_ctx_train ? m->hp.n_ctx_train : 2048;
    uint64_t per_token =
        (uint64_t)gs_model_kv_layers(m) * 2 * gs_kv_row_bytes(o->kv_type, gs_model_kv_dim(m));
    /* A pool with room for every sequence's prompt and output, rounded up to pages. */
    uint64_t pages = (uint64_t)c * ((o->n_prompt + o->n_gen + 15) / 16 + 1);
    struct gs_sched_cfg cfg = {.backend = o->backend,
                               .kv_type = o->kv_type,
                               .max_seqs = c,
                               .max_batch_tokens = o->max_batch,
                               .n_ctx = n_ctx,
                               .max_queue = c + 1,
                               .kv_cache_bytes =
                                   o->kv_bytes ? o->kv_bytes : pages * 16 * per_token};
    struct gs_sched *s;
    if (gs_sched_new(&cfg, m, &s, &err)) {
        fprintf(stderr, "gs-bench-batch: %s\n", err.msg);
        return 1;
    }
    int32_t *prompt = malloc(o->n_prompt * sizeof(*prompt));
    unsigned seed = 1234;
    for (uint32_t i = 0; i < c; i++) {
        prompt[0] = m->hp.bos_id >= 0 ? m->hp.bos_id : 1;
        for (uint32_t t = 1; t < o->n_prompt; t++)
            prompt[t] = 3 + rand_r(&seed) % (int32_t)(m->hp.n_vocab - 3);
        struct gs_sched_request req = {.id = i, .prompt = prompt, .n_prompt = o->n_prompt,
                                       .max_tokens = o->n_gen, .ignore_eos = true};
        gs_sample_params_init(&req.sampling);
        req.sampling.temperature = 0;
        if (gs_sched_submit(s, &req, &err)) {
            fprintf(stderr, "gs-bench-batch: %s\n", err.msg);
            return 1;
        }
    }
    free(prompt);
    uint64_t generated = 0;
    r->peak_pages = r->peak_tokens = r->peak_running = 0;
    double t0 = gs_now_ms();
    while (!gs_sched_idle(s)) {
        if (gs_sched_step(s, &err)) {
            fprintf(stderr, "gs-bench-batch: %s\n", err.msg);
            return 1;
        }
        struct gs_sched_event ev[256];
        size_t n;
        while ((n = gs_sched_poll(s, ev, 256)) > 0)
            for (size_t i = 0; i < n; i++)
                generated += ev[i].kind == GS_SCHED_EV_TOKEN;
        struct gs_sched_stats st;
        gs_sched_stats(s, &st);
        r->peak_pages = GS_MAX(r->peak_pages, st.pages_used);
        r->peak_running = GS_MAX(r->peak_running, st.n_running);
    }
    r->seconds = (gs_now_ms() - t0) / 1000.0;
    struct gs_sched_stats st;
    gs_sched_stats(s, &st);
    r->n_preemptions = st.n_preemptions;
    r->pool_pages = st.pages_total;
    r->seqs = c;
    r->tok_s = (double)generated / r->seconds;
    /* All C sequences run together and end on the same step, so at the peak
     * each holds its prompt and all but its last token. */
    r->peak_tokens = c * (o->n_prompt + o->n_gen - 1);
    r->kv_bytes_per_token = (double)r->peak_pages * 16 * per_token / r->peak_tokens;
    r->contiguous_bytes_per_token = (double)c * n_ctx * per_token / r->peak_tokens;
    gs_sched_free(s);
    return 0;
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
        fprintf(stderr, "gs-bench-batch: %s\n", err.msg);
        return 1;
    }
    struct result res[16];
    for (uint32_t i = 0; i < o.n_seqs; i++)
        if (run_one(&o, m, o.seqs[i], &res[i]))
            return 1;
    if (!o.json) {
        printf("model %s, backend %s, prompt %u, gen %u, kv %s, context %u\n", o.model, o.backend,
               o.n_prompt, o.n_gen, gs_type_name(o.kv_type),
               m->hp.n_ctx_train ? m->hp.n_ctx_train : 2048);
        printf("| seqs | gen tok/s | vs 1 seq | KV bytes/token (paged) | KV bytes/token "
               "(contiguous, full ctx) | saving | pool pages | peak running | preemptions "
               "|\n|---|---|---|---|---|---|---|---|---|\n");
    }
    for (uint32_t i = 0; i < o.n_seqs; i++) {
        struct result *r = &res[i];
        double vs1 = r->tok_s / res[0].tok_s;
        if (o.json)
            printf("{\"seqs\":%u,\"tok_s\":%.2f,\"vs_first\":%.3f,\"kv_bytes_per_token\":%.1f,"
                   "\"contiguous_bytes_per_token\":%.1f,\"preemptions\":%" PRIu64
                   ",\"pool_pages\":%u,\"peak_running\":%u}\n",
                   r->seqs, r->tok_s, vs1, r->kv_bytes_per_token, r->contiguous_bytes_per_token,
                   r->n_preemptions, r->pool_pages, r->peak_running);
        else
            printf("| %u | %.1f | %.2fx | %.0f | %.0f | %.1fx | %u | %u | %" PRIu64 " |\n", r->seqs,
                   r->tok_s, vs1, r->kv_bytes_per_token, r->contiguous_bytes_per_token,
                   r->contiguous_bytes_per_token / r->kv_bytes_per_token, r->pool_pages,
                   r->peak_running, r->n_preemptions);
    }
    gs_model_free(m);
    gs_gguf_close(g);
    return 0;
}
