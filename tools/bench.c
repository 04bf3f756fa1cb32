/*
 * tools/bench.c - `graphserve bench`: engine throughput on one model, in
 * the spirit of llama-bench. Prompt processing: one step of P tokens (logits
 * for the last). Generation: N steps of one token each from an empty cache.
 * Concurrent streams: S sequences decoding together, one token each per step
 * (the weights are read once per step for all of them); reported as the
 * aggregate generated tokens/s. Depth (-d, as llama-bench's): every sequence
 * first holds that many context tokens, prefilled untimed, so that both
 * measures include attention over a long context. Token ids are fixed
 * pseudo-random ids: speed does not depend on them. Peak RSS is the process
 * high-water mark.
 *
 * This measures the engine (graph + backend + KV pages), not HTTP or the
 * scheduler. No number here is asserted anywhere: see bench/ for the scripts
 * that run it and bench/RESULTS.md for what they measured.
 */
#include "engine/backend.h"
#include "engine/runner.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "kvcache/kvcache.h"
#include "tools/internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#define MAX_STREAMS 256
#define MAX_DEPTH (1 << 17)
/* Tokens per prefill step of the untimed depth context. */
#define DEPTH_CHUNK 512
#define CMD "bench"

struct opts {
    const char *path, *backend, *streams_text;
    int64_t threads, n_prompt, n_gen, reps, depth;
    int kv_type; /* index into gs_tool_kv_types */
    bool passes, json;
    int64_t streams[16]; /* --streams, parsed */
    int n_streams;
};

#define O(f) offsetof(struct opts, f)
/* clang-format off */
static const struct gs_cfg_opt opt_rows[] = {
    GS_TOOL_OPT_MODEL(struct opts, path),
    GS_TOOL_OPT_BACKEND(struct opts, backend, "cpu"),
    GS_TOOL_OPT_THREADS(struct opts, threads),
    {"n-prompt", 'p', GS_CFG_INT, O(n_prompt), NULL, "512", 0, 1 << 16, NULL, 0, NULL,
     "Prompt tokens processed in one step; 0 skips the prompt test."},
    {"n-gen", 'n', GS_CFG_INT, O(n_gen), NULL, "128", 0, 1 << 16, NULL, 0, NULL,
     "Tokens generated one per step; 0 skips the generation test."},
    {"depth", 'd', GS_CFG_INT, O(depth), NULL, "0", 0, MAX_DEPTH, NULL, 0, NULL,
     "Context depth: each sequence first holds this many tokens, prefilled untimed."},
    {"streams", 0, GS_CFG_STR, O(streams_text), NULL, "1", 0, 0, NULL, 0, NULL,
     "Concurrent sequences, comma-separated, each in 1..256 (e.g. 1,8,16,32)."},
    {"reps", 'r', GS_CFG_INT, O(reps), NULL, "1", 1, 1000, NULL, 0, NULL,
     "Repetitions; the best run is reported."},
    GS_TOOL_OPT_KV_TYPE(struct opts, kv_type),
    {"passes", 0, GS_CFG_BOOL, O(passes), NULL, "true", 0, 0, NULL, 0, NULL,
     "Run the rewrite passes (fusions); --no-passes runs the graph as built."},
    {"json", 0, GS_CFG_BOOL, O(json), NULL, NULL, 0, 0, NULL, 0, NULL,
     "One JSON object instead of the table."},
};
/* clang-format on */
#undef O

const struct gs_cli_spec gs_bench_spec = {
    .cmd = CMD, .synopsis = "-m FILE [options]", .opts = opt_rows,
    .n_opts = GS_ARRAY_LEN(opt_rows),
};

struct bench {
    struct gs_model *model;
    struct gs_runner *run;
    struct gs_kv_pool *pool;
    struct gs_kv_view kv;
    float *logits;        /* [MAX_STREAMS][n_vocab] */
    int32_t *tokens;      /* [max step] */
    int32_t *pos;
    uint32_t *seq, *rows;
    struct gs_seq_pages *sp;
    struct gs_kv_seq seqs[MAX_STREAMS];
};

static uint32_t rand_token(uint32_t i, uint32_t n_vocab)
{
    uint64_t z = (uint64_t)i * 0x9e3779b97f4a7c15ull + 12345;
    z ^= z >> 31;
    return (uint32_t)(z % n_vocab);
}

/* One step: tokens[i] of sequence i % n_seq at its next position. */
static enum gs_status step(struct bench *b, uint32_t n_tokens, uint32_t n_seq, bool one_seq,
                           struct gs_err *err)
{
    uint32_t n_vocab = b->model->hp.n_vocab;
    for (uint32_t s = 0; s < n_seq; s++) {
        uint32_t need = b->seqs[s].n_tokens + (one_seq ? n_tokens : 1);
        enum gs_status st = gs_kv_seq_reserve(b->pool, &b->seqs[s], need, err);
        if (st)
            return st;
    }
    for (uint32_t i = 0; i < n_tokens; i++) {
        uint32_t s = one_seq ? 0 : i;
        b->tokens[i] = (int32_t)rand_token(b->seqs[s].n_tokens + i * 7919u, n_vocab);
        b->pos[i] = (int32_t)(one_seq ? b->seqs[0].n_tokens - n_tokens + i
                                      : b->seqs[s].n_tokens - 1);
        b->seq[i] = s;
    }
    uint32_t n_out = one_seq ? 1 : n_tokens;
    for (uint32_t o = 0; o < n_out; o++)
        b->rows[o] = one_seq ? n_tokens - 1 : o;
    for (uint32_t s = 0; s < n_seq; s++)
        b->sp[s] = (struct gs_seq_pages){b->seqs[s].pages, b->seqs[s].n_pages};
    struct gs_step_io io = {
        .n_tokens = n_tokens, .tokens = b->tokens, .pos = b->pos, .seq = b->seq,
        .n_seqs = n_seq, .seqs = b->sp, .kv = &b->kv, .n_outputs = n_out,
        .out_rows = b->rows, .logits = b->logits,
    };
    return gs_runner_step(b->run, &io, err);
}

/* Untimed context: n tokens appended to sequence s (its cache), in steps of
 * up to DEPTH_CHUNK tokens of that sequence alone. */
static enum gs_status fill_seq(struct bench *b, uint32_t s, uint32_t n, struct gs_err *err)
{
    uint32_t n_vocab = b->model->hp.n_vocab;
    for (uint32_t done = 0; done < n;) {
        uint32_t k = GS_MIN(n - done, (uint32_t)DEPTH_CHUNK), base = b->seqs[s].n_tokens;
        enum gs_status st = gs_kv_seq_reserve(b->pool, &b->seqs[s], base + k, err);
        if (st)
            return st;
        for (uint32_t i = 0; i < k; i++) {
            b->tokens[i] = (int32_t)rand_token(base + i + s * 104729u, n_vocab);
            b->pos[i] = (int32_t)(base + i);
            b->seq[i] = s;
        }
        b->rows[0] = k - 1;
        for (uint32_t q = 0; q <= s; q++)
            b->sp[q] = (struct gs_seq_pages){b->seqs[q].pages, b->seqs[q].n_pages};
        struct gs_step_io io = {
            .n_tokens = k, .tokens = b->tokens, .pos = b->pos, .seq = b->seq,
            .n_seqs = s + 1, .seqs = b->sp, .kv = &b->kv, .n_outputs = 1,
            .out_rows = b->rows, .logits = b->logits,
        };
        if ((st = gs_runner_step(b->run, &io, err)))
            return st;
        done += k;
    }
    return GS_OK;
}

static void release_all(struct bench *b)
{
    for (int s = 0; s < MAX_STREAMS; s++)
        gs_kv_seq_release(b->pool, &b->seqs[s]);
}

/* Tokens per second of a prompt step of n tokens after depth tokens (best
 * of reps). */
static enum gs_status run_pp(struct bench *b, uint32_t n, uint32_t depth, int64_t reps,
                             double *tps, struct gs_err *err)
{
    *tps = 0;
    for (int64_t r = 0; r < reps + 1; r++) { /* the first run warms up (plans, pages) */
        release_all(b);
        enum gs_status fst = fill_seq(b, 0, depth, err);
        if (fst)
            return fst;
        double t0 = gs_now_ms();
        enum gs_status st = step(b, n, 1, true, err);
        if (st)
            return st;
        double ms = gs_now_ms() - t0;
        if (r > 0 || reps == 0)
            *tps = GS_MAX(*tps, n / (ms / 1000.0));
    }
    return GS_OK;
}

/* Aggregate tokens per second of n steps of one token for each of s streams,
 * each after depth tokens of its own. */
static enum gs_status run_tg(struct bench *b, uint32_t n, uint32_t s, uint32_t depth,
                             int64_t reps, double *tps, struct gs_err *err)
{
    *tps = 0;
    for (int64_t r = 0; r < reps; r++) {
        release_all(b);
        enum gs_status st = GS_OK;
        for (uint32_t q = 0; q < s && !st; q++)
            st = fill_seq(b, q, depth, err);
        if (!st)
            st = step(b, s, s, false, err); /* warm-up token */
        if (st)
            return st;
        double t0 = gs_now_ms();
        for (uint32_t i = 0; i < n; i++) {
            st = step(b, s, s, false, err);
            if (st)
                return st;
        }
        double ms = gs_now_ms() - t0;
        *tps = GS_MAX(*tps, (double)n * s / (ms / 1000.0));
    }
    return GS_OK;
}

static bool parse_streams(struct opts *o, const char *s)
{
    o->n_streams = 0;
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (o->n_streams == (int)GS_ARRAY_LEN(o->streams)) {
            gs_cli_fail(CMD, "--streams: more than %zu values", GS_ARRAY_LEN(o->streams));
            return false;
        }
        if (!gs_cli_parse_int(CMD, "--streams", tok, 1, MAX_STREAMS, &o->streams[o->n_streams]))
            return false;
        o->n_streams++;
    }
    if (!o->n_streams)
        gs_cli_fail(CMD, "--streams: expects at least one number");
    return o->n_streams > 0;
}

static int parse(int argc, char **argv, struct opts *o)
{
    struct gs_cli_args args;
    int rc = gs_cli_begin(&gs_bench_spec, o, argc, argv, &args);
    if (rc >= 0)
        return rc;
    if (!parse_streams(o, o->streams_text))
        return 2;
    return -1;
}

static enum gs_status bench_open(struct bench *b, const struct opts *o, struct gs_gguf *file,
                                 struct gs_err *err)
{
    enum gs_status st = gs_model_load(file, &b->model, err);
    if (st)
        return st;
    const struct gs_runner_cfg rc = {.backend = o->backend, .n_threads = (int)o->threads,
                                     .no_passes = !o->passes};
    if ((st = gs_runner_new(b->model->graph, &rc, &b->run, err)))
        return st;
    int64_t max_streams = 1;
    for (int i = 0; i < o->n_streams; i++)
        max_streams = GS_MAX(max_streams, o->streams[i]);
    uint32_t pt = GS_KV_DEFAULT_PAGE_TOKENS;
    uint64_t per_seq = (uint64_t)(o->depth + o->n_gen + 2 + pt - 1) / pt;
    uint64_t pages =
        GS_MAX((uint64_t)(o->depth + o->n_prompt + pt - 1) / pt + 1, per_seq * max_streams);
    struct gs_kv_pool_cfg pc = {
        .n_layer = gs_model_kv_layers(b->model),
        .kv_dim = gs_model_kv_dim(b->model),
        .type = gs_tool_kv_types[o->kv_type],
        .page_tokens = pt,
        .n_pages = (uint32_t)pages,
    };
    if ((st = gs_kv_pool_new(&pc, &b->pool, err)))
        return st;
    b->kv = gs_kv_pool_view(b->pool);
    for (int s = 0; s < MAX_STREAMS; s++)
        gs_kv_seq_init(&b->seqs[s]);
    size_t max_step = (size_t)GS_MAX(GS_MAX(o->n_prompt, max_streams),
                                     GS_MAX(GS_MIN(o->depth, DEPTH_CHUNK), 1));
    b->logits = gs_alloc_array((size_t)max_streams * b->model->hp.n_vocab, sizeof(float));
    b->tokens = gs_alloc_array(max_step, sizeof(*b->tokens));
    b->pos = gs_alloc_array(max_step, sizeof(*b->pos));
    b->seq = gs_alloc_array(max_step, sizeof(*b->seq));
    b->rows = gs_alloc_array(max_step, sizeof(*b->rows));
    b->sp = gs_alloc_array(MAX_STREAMS, sizeof(*b->sp));
    if (!b->logits || !b->tokens || !b->pos || !b->seq || !b->rows || !b->sp)
        return gs_err_set(err, GS_NOMEM, "bench: out of memory");
    return GS_OK;
}

static void bench_close(struct bench *b)
{
    if (b->pool) {
        release_all(b);
        gs_kv_pool_free(b->pool);
    }
    gs_runner_free(b->run);
    gs_model_free(b->model);
    gs_free(b->logits);
    gs_free(b->tokens);
    gs_free(b->pos);
    gs_free(b->seq);
    gs_free(b->rows);
    gs_free(b->sp);
}

int gs_cmd_bench(int argc, char **argv)
{
    struct opts o = {0};
    int rc = parse(argc, argv, &o);
    if (rc >= 0)
        return rc;
    struct gs_err err = {0};
    struct gs_gguf *file = NULL;
    struct bench b;
    memset(&b, 0, sizeof(b));
    if (gs_gguf_open(o.path, &file, &err))
        return gs_cli_fail(CMD, "%s", err.msg);
    enum gs_status st = bench_open(&b, &o, file, &err);
    double pp = 0, tg[16] = {0};
    if (!st && o.n_prompt > 0)
        st = run_pp(&b, (uint32_t)o.n_prompt, (uint32_t)o.depth, o.reps, &pp, &err);
    for (int i = 0; !st && o.n_gen > 0 && i < o.n_streams; i++)
        st = run_tg(&b, (uint32_t)o.n_gen, (uint32_t)o.streams[i], (uint32_t)o.depth, o.reps,
                    &tg[i], &err);
    if (st) {
        bench_close(&b);
        gs_gguf_close(file);
        return gs_cli_fail(CMD, "%s", err.msg);
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    struct stat sb;
    double file_mib = stat(o.path, &sb) == 0 ? sb.st_size / 1048576.0 : 0;
    double kv_mib = (double)b.kv.page_bytes * b.kv.n_pages / 1048576.0;
    double rss_mib = ru.ru_maxrss / 1024.0;
    int threads = o.threads ? (int)o.threads : 0;
    if (o.json) {
        json_t *j = json_pack("{s:s, s:s, s:i, s:I, s:f, s:f, s:f}", "model", o.path, "backend",
                              o.backend, "threads", threads, "depth", (json_int_t)o.depth,
                              "file_mib", file_mib, "kv_mib", kv_mib, "peak_rss_mib", rss_mib);
        if (o.n_prompt > 0)
            json_object_set_new(j, "pp", json_pack("{s:I, s:f}", "tokens", (json_int_t)o.n_prompt,
                                                   "tokens_per_s", pp));
        json_t *arr = json_array();
        for (int i = 0; o.n_gen > 0 && i < o.n_streams; i++)
            json_array_append_new(arr, json_pack("{s:I, s:I, s:f}", "streams",
                                                 (json_int_t)o.streams[i], "tokens",
                                                 (json_int_t)o.n_gen, "tokens_per_s", tg[i]));
        json_object_set_new(j, "tg", arr);
        char *s = json_dumps(j, JSON_COMPACT);
        printf("%s\n", s);
        free(s);
        json_decref(j);
    } else {
        printf("model %s (%.1f MiB), backend %s, threads %s, kv %s %.1f MiB\n", o.path,
               file_mib, o.backend, threads ? "set" : "default",
               gs_type_name(gs_tool_kv_types[o.kv_type]),
               kv_mib);
        char at[32] = "";
        if (o.depth > 0)
            snprintf(at, sizeof(at), " @ d%lld", (long long)o.depth);
        printf("| test | tokens/s |\n|---|---:|\n");
        if (o.n_prompt > 0)
            printf("| pp%lld%s | %.2f |\n", (long long)o.n_prompt, at, pp);
        for (int i = 0; o.n_gen > 0 && i < o.n_streams; i++)
            printf("| tg%lld x%lld streams%s | %.2f |\n", (long long)o.n_gen,
                   (long long)o.streams[i], at, tg[i]);
        printf("peak RSS %.1f MiB\n", rss_mib);
    }
    bench_close(&b);
    gs_gguf_close(file);
    return 0;
}
