/*
 * tests/scheduler/test_spec.c - speculative decoding in the scheduler: the
 * prompt-lookup drafter, greedy outputs equal to plain decoding token for
 * token on every golden prompt and on 16 concurrent streams through
 * preemption and the prefix cache (the page invariants checked after every
 * step: rejected drafts leave refcounts, page tables and the prefix cache as
 * if never written), and sampled outputs that keep the target's
 * distribution (a two-sample test over many seeds).
 */
#include "engine/backend.h"
#include "engine/gguf.h"
#include "engine/grammar.h"
#include "engine/model.h"
#include "engine/tok.h"
#include "engine/validate.h"
#include "scheduler/scheduler.h"
#include "tests/common/testutil.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_OUT 96

struct rig {
    struct gs_gguf *file;
    struct gs_model *model;
};

static void rig_open_path(struct rig *r, const char *path)
{
    struct gs_err err;
    cr_assert_eq(gs_gguf_open(path, &r->file, &err), GS_OK, "%s: %s", path, err.msg);
    cr_assert_eq(gs_model_load(r->file, &r->model, &err), GS_OK, "%s: %s", path, err.msg);
}

/* rel: under the shared folder. */
static void rig_open(struct rig *r, const char *rel)
{
    rig_open_path(r, gs_test_shared_path(rel));
}

/* A `graphserve synth ARGS` file, written as NAME in the test's folder, opened. */
static void rig_synth(struct rig *r, const char *name, const char *args)
{
    char path[4200], cmd[9000];
    snprintf(path, sizeof(path), "%s/%s", gs_test_tmpdir(), name);
    snprintf(cmd, sizeof(cmd), "%s synth -o %s %s", gs_test_build_path("server/graphserve"), path,
             args);
    char *log = NULL;
    cr_assert_eq(gs_test_run(cmd, 1, &log), 0, "%s: %s", cmd, log);
    free(log);
    rig_open_path(r, path);
}

static void rig_close(struct rig *r)
{
    gs_model_free(r->model);
    gs_gguf_close(r->file);
}

struct job {
    const int32_t *prompt;
    uint32_t n_prompt;
    uint32_t max_tokens;
    float temperature;
    uint64_t seed;
    bool ignore_eos;
    struct gs_grammar *grammar; /* borrowed; with vocab */
    const struct gs_grammar_vocab *vocab;
    int32_t out[MAX_OUT];
    uint32_t n_out;
    enum gs_finish finish;
    struct gs_sched_req_stats stats;
};

struct run_cfg {
    const char *backend;
    enum gs_spec spec;
    uint32_t max_seqs;
    uint32_t n_pages; /* 0: roomy */
    uint32_t max_batch;
    bool prefix;
    enum gs_type kv_type;
    const char *draft; /* GS_SPEC_DRAFT: the draft model's file under the shared folder */
    bool recompute;    /* GS_SPEC_DRAFT: cfg.draft_recompute */
};

/* A scheduler on r's model; with c->draft, the draft model opened into *d
 * (closed by the caller after the scheduler). */
static struct gs_sched *open_sched(struct rig *r, const struct run_cfg *c, struct rig *d)
{
    const enum gs_type kv_type = c->kv_type ? c->kv_type : GS_TYPE_F16;
    uint64_t page_bytes = (uint64_t)gs_model_kv_layers(r->model) * 2 * 16 *
                          gs_kv_row_bytes(kv_type, gs_model_kv_dim(r->model));
    struct gs_sched_cfg cfg = {.backend = c->backend,
                               .kv_cache_bytes = (c->n_pages ? c->n_pages : 256) * page_bytes,
                               .kv_type = kv_type,
                               .max_seqs = c->max_seqs,
                               .max_batch_tokens = c->max_batch,
                               .max_queue = 4096,
                               .n_ctx = 512,
                               .prefix_cache = c->prefix,
                               .spec = c->spec};
    if (c->spec == GS_SPEC_DRAFT) {
        rig_open(d, c->draft);
        cfg.draft_model = d->model;
        cfg.draft_recompute = c->recompute;
    }
    struct gs_sched *s;
    struct gs_err err;
    cr_assert_eq(gs_sched_new(&cfg, r->model, &s, &err), GS_OK, "%s", err.msg);
    return s;
}

/* Runs jobs[0..n) on one scheduler to the end, checking the page invariants
 * after every step; returns the engine-wide stats. */
static struct gs_sched_stats run_jobs(struct rig *r, const struct run_cfg *c, struct job *jobs,
                                      uint32_t n)
{
    struct rig d = {0};
    struct gs_sched *s = open_sched(r, c, &d);
    struct gs_err err;
    for (uint32_t i = 0; i < n; i++) {
        struct gs_sched_request req = {.id = i,
                                       .prompt = jobs[i].prompt,
                                       .n_prompt = jobs[i].n_prompt,
                                       .max_tokens = jobs[i].max_tokens,
                                       .ignore_eos = jobs[i].ignore_eos,
                                       .grammar = jobs[i].grammar,
                                       .grammar_vocab = jobs[i].vocab};
        gs_sample_params_init(&req.sampling);
        req.sampling.temperature = jobs[i].temperature;
        req.sampling.seed = jobs[i].seed;
        cr_assert_eq(gs_sched_submit(s, &req, &err), GS_OK, "%s", err.msg);
        jobs[i].n_out = 0;
        jobs[i].finish = GS_FINISH_NONE;
    }
    struct gs_sched_event ev[64];
    for (int guard = 0; !gs_sched_idle(s); guard++) {
        cr_assert_lt(guard, 200000, "scheduler made no progress");
        cr_assert_eq(gs_sched_step(s, &err), GS_OK, "%s", err.msg);
        cr_assert_eq(gs_sched_check(s, &err), GS_OK, "after step %d: %s", guard, err.msg);
        size_t k;
        while ((k = gs_sched_poll(s, ev, 64)) > 0)
            for (size_t e = 0; e < k; e++) {
                struct job *j = &jobs[ev[e].id];
                if (ev[e].kind == GS_SCHED_EV_TOKEN) {
                    cr_assert_lt(j->n_out, MAX_OUT);
                    j->out[j->n_out++] = ev[e].token;
                } else if (ev[e].kind == GS_SCHED_EV_FINISH) {
                    j->finish = ev[e].finish;
                    j->stats = ev[e].stats;
                }
            }
    }
    struct gs_sched_stats st;
    gs_sched_stats(s, &st);
    cr_assert_eq(st.pages_used, 0, "%u pages still referenced at the end", st.pages_used);
    gs_sched_free(s);
    if (d.model)
        rig_close(&d);
    return st;
}

static void assert_same_outputs(const struct job *a, const struct job *b, uint32_t n,
                                const char *what)
{
    for (uint32_t i = 0; i < n; i++) {
        cr_assert_eq(a[i].finish, b[i].finish, "%s job %u: finish %s vs %s", what, i,
                     gs_finish_name(a[i].finish), gs_finish_name(b[i].finish));
        cr_assert_eq(a[i].n_out, b[i].n_out, "%s job %u: %u vs %u tokens", what, i, a[i].n_out,
                     b[i].n_out);
        for (uint32_t t = 0; t < a[i].n_out; t++)
            cr_assert_eq(a[i].out[t], b[i].out[t], "%s job %u differs at token %u: %d vs %d",
                         what, i, t, a[i].out[t], b[i].out[t]);
    }
}

/* ---- the drafter ----------------------------------------------------------------------- */

Test(spec_ngram, proposes_the_continuation_of_the_latest_longest_match)
{
    int32_t out[8];
    /* "5 6 7" occurs at 0 and at 5; the tail is "6 7": latest match at 6 */
    const int32_t a[] = {5, 6, 7, 1, 2, 5, 6, 7, 3, 9, 6, 7};
    uint32_t n = gs_spec_ngram_draft(a, 12, 4, out, 8);
    cr_assert_eq(n, 4);
    cr_assert_eq(out[0], 3);
    cr_assert_eq(out[1], 9);
    cr_assert_eq(out[2], 6);
    cr_assert_eq(out[3], 7);
    /* a longer match wins over a later shorter one: tail "1 2 3", 3-gram at 0 */
    const int32_t b[] = {1, 2, 3, 4, 8, 2, 3, 5, 1, 2, 3};
    n = gs_spec_ngram_draft(b, 11, 4, out, 2);
    cr_assert_eq(n, 2);
    cr_assert_eq(out[0], 4);
    cr_assert_eq(out[1], 8);
    /* a match that runs to the end proposes what there is */
    const int32_t c[] = {4, 4, 4};
    cr_assert_eq(gs_spec_ngram_draft(c, 3, 4, out, 8), 1);
    cr_assert_eq(out[0], 4);
    /* no earlier occurrence, too short, or no room: nothing */
    const int32_t d[] = {1, 2, 3, 4, 5};
    cr_assert_eq(gs_spec_ngram_draft(d, 5, 4, out, 8), 0);
    cr_assert_eq(gs_spec_ngram_draft(d, 2, 4, out, 8), 0);
    cr_assert_eq(gs_spec_ngram_draft(a, 12, 4, out, 0), 0);
}

/*
 * A context that repeats. A `synth --chain` model continues the cycle of
 * printable bytes its context holds (tools/synth.c), so once the context holds
 * one period of it every n-gram draft is right: the drafter must find them and
 * the verification keep them all. Equal outputs alone would also pass a
 * drafter whose drafts were never kept.
 */
Test(spec_ngram, keeps_every_draft_of_a_context_that_repeats, .timeout = 300)
{
    struct rig r;
    rig_synth(&r, "chain.gguf", "--chain --n-embd 64 --n-layer 2 --n-head 4 --type q8_0 --n-ctx 512");
    /* BOS and the byte 'a' (byte tokens start at id 3): the cycle from 'a'. */
    enum { PERIOD = 0x7e - 0x20 + 1 };
    static const int32_t start[] = {1, 3 + 'a'};
    struct job first = {.prompt = start, .n_prompt = 2, .max_tokens = MAX_OUT, .ignore_eos = true};
    struct run_cfg c = {.backend = "ref", .max_seqs = 1, .max_batch = 256};
    run_jobs(&r, &c, &first, 1);
    cr_assert_eq(first.n_out, MAX_OUT);
    bool seen[256] = {false};
    for (int i = 0; i < PERIOD; i++) {
        const int32_t b = first.out[i] - 3;
        cr_assert(b >= 0x20 && b <= 0x7e && !seen[b], "token %d of the cycle is %d", i, b + 3);
        seen[b] = true;
    }
    cr_assert_eq(first.out[PERIOD], first.out[0], "the chain's output does not cycle");
    /* The prompt holds a whole period; the answer is the cycle again. */
    int32_t prompt[2 + MAX_OUT];
    memcpy(prompt, start, sizeof(start));
    memcpy(prompt + 2, first.out, sizeof(first.out));
    static const char *const backends[] = {"ref", "cpu"};
    for (size_t k = 0; k < GS_ARRAY_LEN(backends); k++) {
        struct job plain = {.prompt = prompt,
                            .n_prompt = 2 + MAX_OUT,
                            .max_tokens = MAX_OUT,
                            .ignore_eos = true},
                   spec = plain;
        c.backend = backends[k];
        c.spec = GS_SPEC_OFF;
        run_jobs(&r, &c, &plain, 1);
        c.spec = GS_SPEC_NGRAM;
        struct gs_sched_stats st = run_jobs(&r, &c, &spec, 1);
        assert_same_outputs(&plain, &spec, 1, backends[k]);
        cr_assert_eq(st.n_draft_accepted, st.n_drafted, "%s: %llu of %llu drafts kept",
                     backends[k], (unsigned long long)st.n_draft_accepted,
                     (unsigned long long)st.n_drafted);
        cr_assert_geq(st.n_drafted, MAX_OUT * 3 / 4, "%s: only %llu of %d tokens drafted",
                      backends[k], (unsigned long long)st.n_drafted, MAX_OUT);
    }
    rig_close(&r);
}

/* ---- greedy: the same tokens --------------------------------------------------------- */

/* Figures over the golden prompts: tokens drafted and kept, by drafter. */
struct golden_tally {
    uint64_t drafted[2], kept[2];
};

typedef void golden_fn(const char *name, const char *rel, const struct gs_val_golden *g,
                       struct rig *r, struct golden_tally *t);

/* Calls fn on every golden completion with its model open; returns how many. */
static uint32_t each_golden(golden_fn *fn, struct golden_tally *t)
{
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", gs_test_shared_path("golden/completions"));
    DIR *d = opendir(dir);
    cr_assert(d, "%s is missing", dir);
    uint32_t n_files = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".json"))
            continue;
        char path[4096 + 512];
        snprintf(path, sizeof(path), "%s/%.500s", dir, e->d_name);
        struct gs_val_golden *g;
        struct gs_err err;
        cr_assert_eq(gs_val_golden_load(path, &g, &err), GS_OK, "%s: %s", path, err.msg);
        char rel[512];
        snprintf(rel, sizeof(rel), "models/%s", g->model);
        struct rig r;
        rig_open(&r, rel);
        fn(e->d_name, rel, g, &r, t);
        rig_close(&r);
        gs_val_golden_free(g);
        n_files++;
    }
    closedir(d);
    cr_assert_geq(n_files, 77, "only %u golden completions under %s", n_files, dir);
    return n_files;
}

static struct job golden_job(const struct gs_val_golden *g, uint32_t max_out)
{
    return (struct job){.prompt = g->prompt_tokens,
                        .n_prompt = (uint32_t)g->n_prompt,
                        .max_tokens = GS_MIN((uint32_t)g->n_predict, max_out),
                        .ignore_eos = true};
}

static enum gs_type golden_kv_type(const struct gs_val_golden *g)
{
    return !strcmp(g->kv_cache_type, "f32") ? GS_TYPE_F32 : GS_TYPE_F16;
}

static void golden_ngram(const char *name, const char *rel, const struct gs_val_golden *g,
                         struct rig *r, struct golden_tally *t)
{
    struct job plain = golden_job(g, MAX_OUT), spec = plain;
    struct run_cfg c = {
        .backend = "cpu", .max_seqs = 1, .max_batch = 256, .kv_type = golden_kv_type(g)};
    run_jobs(r, &c, &plain, 1);
    c.spec = GS_SPEC_NGRAM;
    struct gs_sched_stats st = run_jobs(r, &c, &spec, 1);
    assert_same_outputs(&plain, &spec, 1, name);
    cr_assert_eq(spec.stats.n_drafted, st.n_drafted);
    t->drafted[0] += st.n_drafted;
    t->kept[0] += st.n_draft_accepted;
}

/* Every golden prompt, greedy to the golden's length, with and without
 * speculation on the cpu backend. */
Test(spec_greedy, equals_plain_decoding_on_every_golden_prompt, .timeout = 600)
{
    struct golden_tally t = {0};
    each_golden(golden_ngram, &t);
    cr_assert_gt(t.kept[0], 0, "no draft was ever kept (%llu drafted)",
                 (unsigned long long)t.drafted[0]);
    cr_assert_lt(t.kept[0], t.drafted[0], "every draft was kept: rejection was never exercised");
}

/* The target drafting for itself (its file opened again), and for
 * stories260K (F32) its Q4_0 quantization: a draft that is often right. A
 * verification step is several rows of one sequence; on ref a row never
 * depends on the step's other rows, and on cpu the products give each row
 * the bits of its one-row product (cpu.h's batch invariance). On cpu the
 * four-query attention scores of an F16 cache may still differ in the last
 * bit from one query's (ARCHITECTURE.md, "Rows and rounding"); no golden
 * prompt has a tie that close (one would fail here, naming the prompt). 24
 * tokens each: the scalar backend under a sanitizer is slow. */
static void golden_draft_on(const char *backend, const char *name, const char *rel,
                            const struct gs_val_golden *g, struct rig *r, struct golden_tally *t)
{
    struct job plain = golden_job(g, 24);
    struct run_cfg c = {
        .backend = backend, .max_seqs = 1, .max_batch = 256, .kv_type = golden_kv_type(g)};
    run_jobs(r, &c, &plain, 1);
    c.spec = GS_SPEC_DRAFT;
    const char *drafts[] = {rel, "models/stories260K-Q4_0.gguf"};
    for (int k = 0; k < (strcmp(g->model, "stories260K.gguf") ? 1 : 2); k++) {
        struct job dm = plain;
        c.draft = drafts[k];
        struct gs_sched_stats st = run_jobs(r, &c, &dm, 1);
        char what[600];
        snprintf(what, sizeof(what), "%s drafted by %s on %s", name, drafts[k], backend);
        assert_same_outputs(&plain, &dm, 1, what);
        cr_assert_eq(dm.stats.n_drafted, st.n_drafted);
        cr_assert_gt(st.n_drafted, 0, "%s: nothing drafted", what);
        t->drafted[k] += st.n_drafted;
        t->kept[k] += st.n_draft_accepted;
    }
}

static void golden_draft_ref(const char *name, const char *rel, const struct gs_val_golden *g,
                             struct rig *r, struct golden_tally *t)
{
    golden_draft_on("ref", name, rel, g, r, t);
}

static void golden_draft_cpu(const char *name, const char *rel, const struct gs_val_golden *g,
                             struct rig *r, struct golden_tally *t)
{
    golden_draft_on("cpu", name, rel, g, r, t);
}

static void check_golden_drafts(golden_fn *fn)
{
    struct golden_tally t = {0};
    each_golden(fn, &t);
    cr_log_info("self-drafts %llu of %llu kept, Q4_0 drafts %llu of %llu",
                (unsigned long long)t.kept[0], (unsigned long long)t.drafted[0],
                (unsigned long long)t.kept[1], (unsigned long long)t.drafted[1]);
    /* A model drafting for itself is right nearly always; its quantization
     * often, but not always. */
    cr_assert_gt(t.kept[0], t.drafted[0] * 9 / 10, "self-drafts: %llu of %llu kept",
                 (unsigned long long)t.kept[0], (unsigned long long)t.drafted[0]);
    cr_assert_gt(t.kept[1], 0);
    cr_assert_lt(t.kept[1], t.drafted[1], "every Q4_0 draft was kept (%llu)",
                 (unsigned long long)t.drafted[1]);
}

Test(spec_draft, equals_plain_decoding_on_every_golden_prompt, .timeout = 600)
{
    check_golden_drafts(golden_draft_ref);
}

Test(spec_draft, equals_plain_decoding_on_every_golden_prompt_on_cpu, .timeout = 600)
{
    check_golden_drafts(golden_draft_cpu);
}

/* A prompt that repeats itself, so that the drafter has matches to offer. */
static uint32_t repetitive_prompt(int32_t *p, unsigned *seed, uint32_t n)
{
    uint32_t period = 5 + (uint32_t)rand_r(seed) % 12;
    p[0] = 1;
    for (uint32_t i = 1; i < n; i++)
        p[i] = i <= period ? 3 + rand_r(seed) % 500 : p[i - period];
    return n;
}

/* 16 streams on a pool too small for all, some repetitive (they speculate)
 * and some not (they mostly do not), greedy and seeded: each equals its run
 * alone without speculation, over a cache of kv_type (0: f16). */
static void concurrent(const char *backend, bool prefix, unsigned seed0, enum gs_spec spec,
                       const char *draft, enum gs_type kv_type)
{
    struct rig r;
    rig_open(&r, "models/stories260K.gguf");
    enum { N = 16 };
    static int32_t prompts[N][160];
    struct job jobs[N], alone[N];
    unsigned seed = seed0;
    for (uint32_t i = 0; i < N; i++) {
        uint32_t n = 20 + (uint32_t)rand_r(&seed) % 120;
        if (i % 4 == 3) {
            prompts[i][0] = 1;
            for (uint32_t t = 1; t < n; t++)
                prompts[i][t] = 3 + rand_r(&seed) % 500;
        } else {
            repetitive_prompt(prompts[i], &seed, n);
        }
        /* shared prefixes for the prefix cache: every fourth copies job 0's start */
        if (prefix && i % 4 == 1 && i > 1)
            memcpy(prompts[i], prompts[0], 32 * sizeof(int32_t));
        jobs[i] = (struct job){.prompt = prompts[i],
                               .n_prompt = n,
                               .max_tokens = 8 + (uint32_t)rand_r(&seed) % (MAX_OUT - 8),
                               .temperature = i % 3 == 2 ? 0.8f : 0.0f,
                               .seed = (uint64_t)rand_r(&seed),
                               .ignore_eos = true};
    }
    struct run_cfg c = {
        .backend = backend, .max_seqs = 1, .max_batch = 256, .prefix = false, .kv_type = kv_type};
    for (uint32_t i = 0; i < N; i++) {
        alone[i] = jobs[i];
        run_jobs(&r, &c, &alone[i], 1);
    }
    /* 28 pages of 16 tokens: the largest job needs 15 */
    c = (struct run_cfg){.backend = backend,
                         .spec = spec,
                         .max_seqs = N,
                         .n_pages = 28,
                         .max_batch = 96,
                         .prefix = prefix,
                         .draft = draft,
                         .kv_type = kv_type};
    struct gs_sched_stats st = run_jobs(&r, &c, jobs, N);
    assert_same_outputs(alone, jobs, N, backend);
    cr_assert_gt(st.n_preemptions, 0, "the pool was meant to be too small");
    cr_assert_gt(st.n_draft_accepted, 0);
    cr_log_info("%s %s: %llu of %llu drafted tokens kept, %llu verification steps", backend,
                draft ? draft : "ngram", (unsigned long long)st.n_draft_accepted,
                (unsigned long long)st.n_drafted, (unsigned long long)st.n_verify_steps);
    if (draft && !strcmp(draft, "models/stories260K.gguf"))
        /* the model drafting for itself: greedy drafts are kept, sampled ones often */
        cr_assert_gt(st.n_draft_accepted, st.n_drafted * 3 / 4, "%llu of %llu kept",
                     (unsigned long long)st.n_draft_accepted, (unsigned long long)st.n_drafted);
    else
        cr_assert_lt(st.n_draft_accepted, st.n_drafted);
    /* the random prompts' sequences spent steps without drafting beside the others */
    uint64_t verifies = 0, generated = 0;
    for (uint32_t i = 0; i < N; i++) {
        verifies += jobs[i].stats.n_verify_steps;
        generated += jobs[i].n_out;
    }
    cr_assert_eq(verifies, st.n_verify_steps);
    cr_assert_lt(verifies, generated);
    rig_close(&r);
}

Test(spec_greedy, sixteen_streams_ref)
{
    concurrent("ref", false, 3, GS_SPEC_NGRAM, NULL, 0);
}

Test(spec_greedy, sixteen_streams_cpu_with_prefix_cache)
{
    concurrent("cpu", true, 5, GS_SPEC_NGRAM, NULL, 0);
}

Test(spec_draft, sixteen_streams_drafted_by_the_target_itself_ref)
{
    concurrent("ref", false, 7, GS_SPEC_DRAFT, "models/stories260K.gguf", 0);
}

/* The draft's K/V after rollback is what computing the kept tokens afresh
 * gives: on ref (rows computed alone), 16 streams, greedy and sampled, draft
 * exactly the same tokens whether the draft model keeps its K/V across steps
 * or recomputes every sequence from position 0 each step. */
Test(spec_draft, rolled_back_draft_kv_drafts_what_recomputing_drafts, .timeout = 300)
{
    struct rig r;
    rig_open(&r, "models/stories260K.gguf");
    enum { N = 16 };
    static int32_t prompts[N][48];
    struct job kept[N], fresh[N];
    unsigned seed = 11;
    for (uint32_t i = 0; i < N; i++) {
        uint32_t n = 8 + (uint32_t)rand_r(&seed) % 40;
        repetitive_prompt(prompts[i], &seed, n);
        kept[i] = (struct job){.prompt = prompts[i],
                               .n_prompt = n,
                               .max_tokens = 24,
                               .temperature = i % 2 ? 0.8f : 0.0f,
                               .seed = 100 + i,
                               .ignore_eos = true};
        fresh[i] = kept[i];
    }
    /* a step's tokens hold every sequence's whole recomputation */
    struct run_cfg c = {.backend = "ref",
                        .spec = GS_SPEC_DRAFT,
                        .max_seqs = N,
                        .max_batch = 2048,
                        .draft = "models/stories260K-Q4_0.gguf"};
    struct gs_sched_stats a = run_jobs(&r, &c, kept, N);
    c.recompute = true;
    struct gs_sched_stats b = run_jobs(&r, &c, fresh, N);
    assert_same_outputs(fresh, kept, N, "rolled back vs recomputed");
    for (uint32_t i = 0; i < N; i++) {
        cr_assert_eq(kept[i].stats.n_drafted, fresh[i].stats.n_drafted, "job %u", i);
        cr_assert_eq(kept[i].stats.n_draft_accepted, fresh[i].stats.n_draft_accepted, "job %u", i);
    }
    cr_assert_gt(a.n_draft_accepted, 0);
    cr_assert_lt(a.n_draft_accepted, a.n_drafted, "rejection was never exercised");
    cr_assert_eq(a.n_verify_steps, b.n_verify_steps);
    rig_close(&r);
}

Test(spec_draft, sixteen_streams_drafted_by_q4_0_cpu_with_prefix_cache)
{
    concurrent("cpu", true, 9, GS_SPEC_DRAFT, "models/stories260K-Q4_0.gguf", 0);
}

/* q8_0 pages: rollback, preemption and prefix hits keep the outputs of each
 * stream alone, and the page invariants hold after every step. */
Test(spec_greedy, sixteen_streams_cpu_q8_0_cache_with_prefix_cache)
{
    concurrent("cpu", true, 5, GS_SPEC_NGRAM, NULL, GS_TYPE_Q8_0);
}

/* With --kv-type q8_0 the draft model's pool is q8_0 too (scheduler/draft.c): drafting,
 * rollback of the draft's K/V and verification over q8_0 pages keep each stream's output. */
Test(spec_draft, sixteen_streams_drafted_by_q4_0_over_q8_0_caches_ref)
{
    concurrent("ref", false, 9, GS_SPEC_DRAFT, "models/stories260K-Q4_0.gguf", GS_TYPE_Q8_0);
}

/* Structured output on prompts that repeat themselves: drafts are made
 * under the grammar (cut where it refuses a token) and the answers equal
 * plain decoding's, greedy and seeded. */
static void structured(enum gs_spec spec_kind, const char *draft)
{
    struct rig r;
    rig_open(&r, "models/stories260K.gguf");
    struct gs_err err;
    struct gs_tok *tok;
    cr_assert_eq(gs_tok_open(gs_test_shared_path("models/stories260K.gguf"), &tok, &err), GS_OK,
                 "%s", err.msg);
    struct gs_grammar_vocab *v = gs_test_grammar_vocab(tok);
    /* sentences of lowercase words without the letter o, then a full stop */
    const char *src = "root ::= [ a-np-z,]{1,200} \".\"";
    struct gs_grammar *g;
    cr_assert_eq(gs_grammar_compile(src, strlen(src), "root", NULL, &g, &err), GS_OK, "%s",
                 err.msg);
    const char *text = "Tim and Sam sat in the sun. Tim and Sam sat in the sun. Tim and Sam sat "
                       "in the sun. Tim and Sam sat in the sun. Tim and";
    int32_t *ids;
    size_t n;
    cr_assert_eq(gs_tok_encode(tok, text, strlen(text), GS_TOK_ADD_SPECIAL, &ids, &n, &err),
                 GS_OK);
    enum { N = 6 };
    struct job plain[N], spec[N];
    for (uint32_t i = 0; i < N; i++)
        plain[i] = (struct job){.prompt = ids, .n_prompt = (uint32_t)n, .max_tokens = MAX_OUT,
                                .temperature = i < 3 ? 0.0f : 0.7f, .seed = 77 + i,
                                .grammar = g, .vocab = v};
    memcpy(spec, plain, sizeof(spec));
    struct run_cfg c = {.backend = "cpu", .max_seqs = N, .max_batch = 256};
    run_jobs(&r, &c, plain, N);
    c.spec = spec_kind;
    c.draft = draft;
    struct gs_sched_stats st = run_jobs(&r, &c, spec, N);
    assert_same_outputs(plain, spec, N, "structured");
    cr_assert_gt(st.n_draft_accepted, 0, "no draft kept under the grammar (%llu drafted)",
                 (unsigned long long)st.n_drafted);
    gs_free(ids);
    gs_grammar_unref(g);
    gs_grammar_vocab_free(v);
    gs_tok_free(tok);
    rig_close(&r);
}

Test(spec_greedy, structured_output_equals_plain_decoding)
{
    structured(GS_SPEC_NGRAM, NULL);
}

Test(spec_draft, structured_output_equals_plain_decoding)
{
    structured(GS_SPEC_DRAFT, "models/stories260K-Q4_0.gguf");
}

/* ---- sampled: the same distribution ------------------------------------------------ */

/*
 * Temperature 0.8 on a prompt that holds the model's own greedy story and
 * then starts it again, so that sequences draft at their first decoding steps
 * and drafts are both kept and refused. Tokens 1 to 3 of N sequences with
 * speculation (seeds 1..N) against N without (other seeds): a chi-square
 * two-sample test per position over the tokens drawn at least 10 times by
 * the two sides together (rarer ones pooled), at a fixed 0.1% level.
 */
static void keeps_the_distribution(enum gs_spec spec, const char *draft)
{
    struct rig r;
    rig_open(&r, "models/stories260K.gguf");
    struct gs_val_golden *g;
    struct gs_err err;
    cr_assert_eq(gs_val_golden_load(
                     gs_test_shared_path("golden/completions/stories260K__once-upon-a-time.json"),
                     &g, &err),
                 GS_OK, "%s", err.msg);
    enum { N = 1500, T = 4, STORY = 40, AGAIN = 6 };
    cr_assert_geq(g->n_gen, STORY);
    int32_t prompt[2 * 16 + STORY + AGAIN];
    uint32_t n_prompt = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int32_t i = pass; i < g->n_prompt; i++) /* BOS once */
            prompt[n_prompt++] = g->prompt_tokens[i];
        for (int32_t i = 0; i < (pass ? AGAIN : STORY); i++)
            prompt[n_prompt++] = g->completion_tokens[i];
    }
    gs_val_golden_free(g);
    static struct job a[N], b[N];
    for (uint32_t i = 0; i < N; i++) {
        a[i] = (struct job){.prompt = prompt, .n_prompt = n_prompt, .max_tokens = T,
                            .temperature = 2.0f,
                            .seed = 1 + i, .ignore_eos = true};
        b[i] = a[i];
        b[i].seed = 1000003 + i;
    }
    struct run_cfg c = {.backend = "cpu",
                        .max_seqs = 64,
                        .max_batch = 4096,
                        .prefix = true,
                        .spec = spec,
                        .draft = draft};
    struct gs_sched_stats st = run_jobs(&r, &c, a, N);
    c.spec = GS_SPEC_OFF;
    run_jobs(&r, &c, b, N);
    cr_assert_gt(st.n_draft_accepted, N / 10, "drafts were meant to be kept often: %llu of %llu", (unsigned long long)st.n_draft_accepted, (unsigned long long)st.n_drafted);
    cr_assert_lt(st.n_draft_accepted, st.n_drafted - st.n_drafted / 10,
                 "drafts were meant to be refused often: %llu of %llu kept",
                 (unsigned long long)st.n_draft_accepted, (unsigned long long)st.n_drafted);
    uint32_t n_vocab = r.model->hp.n_vocab;
    uint32_t *ca = calloc(n_vocab, sizeof(*ca)), *cb = calloc(n_vocab, sizeof(*cb));
    for (uint32_t t = 1; t < T; t++) {
        memset(ca, 0, n_vocab * sizeof(*ca));
        memset(cb, 0, n_vocab * sizeof(*cb));
        for (uint32_t i = 0; i < N; i++) {
            cr_assert_eq(a[i].n_out, T);
            ca[a[i].out[t]]++;
            cb[b[i].out[t]]++;
        }
        /* equal sample sizes: chi2 = sum (a - b)^2 / (a + b) */
        double chi2 = 0, pa = 0, pb = 0;
        uint32_t df = 0;
        for (uint32_t v = 0; v < n_vocab; v++) {
            if (ca[v] + cb[v] >= 10) {
                chi2 += ((double)ca[v] - cb[v]) * ((double)ca[v] - cb[v]) / (ca[v] + cb[v]);
                df++;
            } else {
                pa += ca[v];
                pb += cb[v];
            }
        }
        if (pa + pb > 0) {
            chi2 += (pa - pb) * (pa - pb) / (pa + pb);
            df++;
        }
        df -= 1;
        cr_assert_gt(df, 2, "position %u: too few distinct tokens to test", t);
        /* chi-square 0.1% critical value (Wilson-Hilferty) */
        double z = 3.090, h = 2.0 / (9.0 * df);
        double crit = df * pow(1 - h + z * sqrt(h), 3);
        cr_assert_lt(chi2, crit, "position %u: chi2 %.1f over %.1f (%u degrees of freedom)", t,
                     chi2, crit, df);
    }
    free(ca);
    free(cb);
    rig_close(&r);
}

Test(spec_sampled, keeps_the_target_distribution, .timeout = 600)
{
    keeps_the_distribution(GS_SPEC_NGRAM, NULL);
}

/* The Q4_0 quantization drafting for the F32 model: its greedy drafts are
 * kept only as often as the target samples them at temperature 2. */
Test(spec_sampled, keeps_the_target_distribution_with_a_draft_model, .timeout = 600)
{
    keeps_the_distribution(GS_SPEC_DRAFT, "models/stories260K-Q4_0.gguf");
}

/* ---- the draft model's vocabulary ------------------------------------------------------- */

static void assert_refused(struct gs_sched_cfg *cfg, struct gs_model *target, const char *want)
{
    struct gs_sched *s = NULL;
    struct gs_err err = {0};
    cr_assert_eq(gs_sched_new(cfg, target, &s, &err), GS_INVAL, "accepted; wanted '%s'", want);
    cr_assert_null(s);
    cr_assert(strstr(err.msg, want), "'%s' does not say '%s'", err.msg, want);
}

/* A draft model is refused unless its vocabulary is the target's, and the
 * options that name one are refused apart. */
Test(spec_draft, refuses_another_vocabulary_and_options_apart)
{
    struct rig r, big, same;
    rig_open(&r, "models/stories260K.gguf");
    rig_open(&big, "models/llama-2-tiny-random.gguf");
    rig_open(&same, "models/stories260K-Q8_0.gguf");
    struct gs_sched_cfg cfg = {.backend = "ref", .n_ctx = 64, .spec = GS_SPEC_DRAFT};
    cfg.draft_model = big.model;
    assert_refused(&cfg, r.model, "its vocabulary has 32000 tokens, the target's 512");
    /* 512 tokens of synth's own vocabulary: the same size, other tokens */
    struct rig other;
    rig_synth(&other, "synth-vocab.gguf", "--n-vocab 512 --n-ctx 64");
    cfg.draft_model = other.model;
    assert_refused(&cfg, r.model, "draft model: token ");
    rig_close(&other);
    /* the target itself, a draft model without the drafter, the drafter without one */
    cfg.draft_model = r.model;
    assert_refused(&cfg, r.model, "a model of its own");
    cfg.spec = GS_SPEC_NGRAM;
    cfg.draft_model = same.model;
    assert_refused(&cfg, r.model, "draft_model: given, but spec is not draft");
    cfg.spec = GS_SPEC_DRAFT;
    cfg.draft_model = NULL;
    assert_refused(&cfg, r.model, "needs a draft model");
    /* the same vocabulary in another quantization opens */
    cfg.draft_model = same.model;
    struct gs_sched *s;
    struct gs_err err;
    cr_assert_eq(gs_sched_new(&cfg, r.model, &s, &err), GS_OK, "%s", err.msg);
    struct gs_sched_stats st;
    gs_sched_stats(s, &st);
    cr_assert_gt(st.draft_kv_bytes, 0);
    gs_sched_free(s);
    rig_close(&same);
    rig_close(&big);
    rig_close(&r);
}
