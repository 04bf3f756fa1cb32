/*
 * tests/scheduler/test_sched.c - continuous batching on the real engine
 * (stories260K on the ref backend): outputs that do not depend on batch
 * company, preemption on a pool too small for everyone, cancellation, the
 * prefix cache, admission errors, the threaded mode, and embedding requests
 * (pooled hidden rows beside generation, through preemption).
 *
 * "Alone" means a scheduler with max_seqs 1 and a roomy pool: the sequence is
 * the only one in every step it takes part in.
 */
#include "engine/gguf.h"
#include "engine/grammar.h"
#include "engine/model.h"
#include "engine/runner.h"
#include "engine/tok.h"
#include "kvcache/kvcache.h"
#include "scheduler/scheduler.h"
#include "tests/common/testutil.h"

#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GEN 48

struct rig {
    struct gs_gguf *file;
    struct gs_model *model;
};

static void rig_open(struct rig *r)
{
    struct gs_err err;
    cr_assert_eq(gs_gguf_open(gs_test_shared_path("models/stories260K.gguf"), &r->file, &err),
                 GS_OK, "%s", err.msg);
    cr_assert_eq(gs_model_load(r->file, &r->model, &err), GS_OK, "%s", err.msg);
}

static void rig_close(struct rig *r)
{
    gs_model_free(r->model);
    gs_gguf_close(r->file);
}

/* The backend the determinism tests run on; every backend must pass them. */
static const char *backend = "ref";

static struct gs_sched *new_sched(struct rig *r, uint32_t max_seqs, uint32_t n_pages,
                                  uint32_t max_batch, bool prefix)
{
    /* stories260K: 5 layers x kv_dim 32 x f16 x 2 (K,V) x 16 tokens = 10240 bytes a page */
    uint64_t page_bytes = 5ull * 2 * 16 * 32 * 2;
    struct gs_sched_cfg cfg = {.backend = backend, .kv_cache_bytes = n_pages * page_bytes,
                               .kv_type = GS_TYPE_F16, .max_seqs = max_seqs,
                               .max_batch_tokens = max_batch, .n_ctx = 512,
                               .prefix_cache = prefix};
    struct gs_sched *s;
    struct gs_err err;
    cr_assert_eq(gs_sched_new(&cfg, r->model, &s, &err), GS_OK, "%s", err.msg);
    struct gs_sched_stats st;
    gs_sched_stats(s, &st);
    cr_assert_eq(st.pages_total, n_pages);
    return s;
}

struct job {
    int32_t prompt[200];
    uint32_t n_prompt;
    uint32_t max_tokens;
    uint64_t seed;
    float temperature;
    /* results */
    int32_t out[MAX_GEN];
    uint32_t n_out;
    enum gs_finish finish;
    struct gs_sched_req_stats stats;
    bool cancel_after; /* cancel once it has produced cancel_at tokens */
    uint32_t cancel_at;
    bool cancel_sent;
    enum gs_pooling pooling; /* an embedding unless GS_POOLING_NONE */
    float embd[64];          /* FINISH's vector (stories260K is 64 wide) */
    bool has_embd;
};

static void submit(struct gs_sched *s, struct job *j, uint64_t id)
{
    struct gs_sched_request req = {.id = id,
                                   .prompt = j->prompt,
                                   .n_prompt = j->n_prompt,
                                   .max_tokens = j->max_tokens,
                                   .ignore_eos = true,
                                   .pooling = j->pooling};
    gs_sample_params_init(&req.sampling);
    req.sampling.temperature = j->temperature;
    req.sampling.seed = j->seed;
    struct gs_err err;
    cr_assert_eq(gs_sched_submit(s, &req, &err), GS_OK, "%s", err.msg);
    j->n_out = 0;
    j->finish = GS_FINISH_NONE;
    j->cancel_sent = false;
    j->has_embd = false;
}

/* Steps until idle, routing events to jobs[id]. */
static void run_to_idle(struct gs_sched *s, struct job *jobs, uint32_t n_jobs)
{
    struct gs_sched_event ev[64];
    struct gs_err err;
    for (int guard = 0; !gs_sched_idle(s); guard++) {
        cr_assert_lt(guard, 100000, "scheduler made no progress");
        cr_assert_eq(gs_sched_step(s, &err), GS_OK, "%s", err.msg);
        size_t n;
        while ((n = gs_sched_poll(s, ev, 64)) > 0) {
            for (size_t i = 0; i < n; i++) {
                cr_assert_lt(ev[i].id, n_jobs);
                struct job *j = &jobs[ev[i].id];
                cr_assert_eq(j->finish, GS_FINISH_NONE, "event after finish");
                if (ev[i].kind == GS_SCHED_EV_TOKEN) {
                    cr_assert_lt(j->n_out, MAX_GEN);
                    j->out[j->n_out++] = ev[i].token;
                    if (j->cancel_after && j->n_out >= j->cancel_at && !j->cancel_sent) {
                        gs_sched_cancel(s, ev[i].id);
                        j->cancel_sent = true;
                    }
                } else {
                    j->finish = ev[i].finish;
                    j->stats = ev[i].stats;
                    if (ev[i].embedding) {
                        cr_assert_eq(ev[i].n_embd, 64);
                        memcpy(j->embd, ev[i].embedding, sizeof(j->embd));
                        j->has_embd = true;
                    }
                }
            }
        }
    }
    /* drain what the last step emitted */
    struct gs_sched_event rest[64];
    size_t n = gs_sched_poll(s, rest, 64);
    cr_assert_eq(n, 0);
}

static void random_job(struct job *j, unsigned *seed, uint32_t max_prompt)
{
    memset(j, 0, sizeof(*j));
    j->n_prompt = 1 + (uint32_t)rand_r(seed) % max_prompt;
    j->prompt[0] = 1; /* BOS */
    for (uint32_t i = 1; i < j->n_prompt; i++)
        j->prompt[i] = 3 + rand_r(seed) % 500;
    j->max_tokens = 1 + (uint32_t)rand_r(seed) % MAX_GEN;
    j->seed = (uint64_t)rand_r(seed);
    j->temperature = (rand_r(seed) % 2) ? 0.0f : 0.9f;
}

/* Each job run alone, for reference. */
static void run_alone(struct rig *r, struct job *jobs, struct job *alone, uint32_t n)
{
    struct gs_sched *s = new_sched(r, 1, 64, 256, false);
    for (uint32_t i = 0; i < n; i++) {
        alone[i] = jobs[i];
        alone[i].cancel_after = false;
        submit(s, &alone[i], 0);
        run_to_idle(s, &alone[i], 1);
        cr_assert_eq(alone[i].finish, GS_FINISH_LENGTH);
        cr_assert_eq(alone[i].n_out, alone[i].max_tokens);
    }
    gs_sched_free(s);
}

static void assert_all_pages_free(struct gs_sched *s)
{
    struct gs_sched_stats st;
    gs_sched_stats(s, &st);
    cr_assert_eq(st.pages_used, 0, "%u pages still referenced after every request ended",
                 st.pages_used);
    cr_assert_eq(st.pages_free + st.pages_cached, st.pages_total);
    cr_assert_eq(st.n_running, 0);
    cr_assert_eq(st.n_waiting, 0);
}

/* A prompt alone and the same prompt among 7 others produce the same tokens,
 * greedy and seeded. */
static void batch_company(void)
{
    struct rig r;
    rig_open(&r);
    unsigned seed = 11;
    struct job jobs[8], alone[8];
    for (int i = 0; i < 8; i++)
        random_job(&jobs[i], &seed, 40);
    run_alone(&r, jobs, alone, 8);
    struct gs_sched *s = new_sched(&r, 8, 64, 512, false);
    for (uint64_t i = 0; i < 8; i++)
        submit(s, &jobs[i], i);
    run_to_idle(s, jobs, 8);
    for (int i = 0; i < 8; i++) {
        cr_assert_eq(jobs[i].finish, GS_FINISH_LENGTH);
        cr_assert_eq(jobs[i].n_out, alone[i].n_out);
        cr_assert_arr_eq(jobs[i].out, alone[i].out, jobs[i].n_out * sizeof(int32_t),
                         "job %d (temperature %.1f) differs in a batch", i, jobs[i].temperature);
    }
    struct gs_sched_stats st;
    gs_sched_stats(s, &st);
    cr_assert_gt(st.n_steps, 0);
    assert_all_pages_free(s);
    gs_sched_free(s);
    rig_close(&r);
}

/* Many sequences on a pool too small to hold them all: preemptions happen and
 * are counted, every sequence still produces its alone output, and no page
 * leaks. Small token budgets force chunked prefill too. */
static void stress(bool prefix, bool cancels, unsigned seed0)
{
    struct rig r;
    rig_open(&r);
    unsigned seed = seed0;
    enum { N = 24 };
    struct job jobs[N], alone[N];
    for (int i = 0; i < N; i++) {
        random_job(&jobs[i], &seed, 120);
        if (cancels && rand_r(&seed) % 3 == 0) {
            jobs[i].cancel_after = true;
            jobs[i].cancel_at = 1 + (uint32_t)rand_r(&seed) % jobs[i].max_tokens;
        }
    }
    run_alone(&r, jobs, alone, N);
    /* 24 pages of 16 tokens: the largest job (~170 tokens) needs 11 */
    struct gs_sched *s = new_sched(&r, 16, 24, 64, prefix);
    for (uint64_t i = 0; i < N; i++)
        submit(s, &jobs[i], i);
    run_to_idle(s, jobs, N);
    uint32_t preempted = 0, recomputed = 0;
    for (int i = 0; i < N; i++) {
        struct job *j = &jobs[i];
        preempted += j->stats.n_preemptions;
        if (j->cancel_after && j->finish == GS_FINISH_CANCELLED) {
            cr_assert_geq(j->n_out, j->cancel_at);
            cr_assert_leq(j->n_out, alone[i].n_out);
        } else {
            cr_assert_eq(j->finish, GS_FINISH_LENGTH, "job %d ended with %s", i,
                         gs_finish_name(j->finish));
            cr_assert_eq(j->n_out, alone[i].n_out);
        }
        cr_assert_arr_eq(j->out, alone[i].out, j->n_out * sizeof(int32_t),
                         "job %d differs from its alone run (%u preemptions)", i,
                         j->stats.n_preemptions);
        /* a sequence preempted before computing anything recomputes nothing */
        cr_assert_leq(j->stats.n_recomputed, (j->stats.n_preemptions + 1) * (j->n_prompt + j->n_out));
        if (!j->stats.n_preemptions)
            cr_assert_eq(j->stats.n_recomputed, 0);
        recomputed += j->stats.n_recomputed;
    }
    cr_assert_gt(recomputed, 0, "some preemption should have thrown computed work away");
    struct gs_sched_stats st;
    gs_sched_stats(s, &st);
    cr_assert_gt(st.n_preemptions, 0, "the pool was meant to be too small");
    cr_assert_eq(st.n_preemptions, preempted);
    assert_all_pages_free(s);
    gs_sched_free(s);
    rig_close(&r);
}

Test(sched, output_does_not_depend_on_batch_company)
{
    batch_company();
}

Test(sched, preemption_keeps_outputs_and_frees_every_page)
{
    stress(false, false, 3);
}

Test(sched, preemption_with_prefix_cache_and_random_cancellations)
{
    stress(true, true, 5);
}

/* The same guarantees on the fast backend: its rows must not depend on how
 * many tokens share a step (tiled and single-row kernels agree bit for bit). */
Test(sched_cpu, output_does_not_depend_on_batch_company)
{
    backend = "cpu";
    batch_company();
}

Test(sched_cpu, preemption_with_prefix_cache_and_random_cancellations)
{
    backend = "cpu";
    stress(true, true, 7);
}

/* A second request that shares a prefix prefills only the new tokens, and
 * produces what it produces without the cache. */
Test(sched, prefix_cache_reuses_full_and_partial_pages)
{
    struct rig r;
    rig_open(&r);
    struct job a = {.n_prompt = 70, .max_tokens = 8}, b, b_alone;
    for (uint32_t i = 0; i < a.n_prompt; i++)
        a.prompt[i] = 3 + (int32_t)(i * 37 % 500);
    b = a;
    b.n_prompt = 90;
    for (uint32_t i = 70; i < 90; i++)
        b.prompt[i] = 3 + (int32_t)(i * 11 % 500);
    b_alone = b;
    run_alone(&r, &b, &b_alone, 1);

    struct gs_sched *s = new_sched(&r, 4, 32, 512, true);
    submit(s, &a, 0);
    run_to_idle(s, &a, 1);
    cr_assert_eq(a.stats.n_prompt_cached, 0);
    struct job jobs[2] = {a, b};
    submit(s, &jobs[1], 1);
    run_to_idle(s, jobs, 2);
    /* 70 shared tokens: 4 full pages of 16, then the copy of a's fifth page
     * that holds a's prompt up to its last token (64..68) */
    cr_assert_eq(jobs[1].stats.n_prompt_cached, 69, "cached %u", jobs[1].stats.n_prompt_cached);
    cr_assert_arr_eq(jobs[1].out, b_alone.out, b_alone.n_out * sizeof(int32_t));
    struct gs_sched_stats st;
    gs_sched_stats(s, &st);
    cr_assert_eq(st.n_prefix_hit_tokens, 69);
    cr_assert_gt(st.pages_cached, 0, "released full pages stay cached");
    assert_all_pages_free(s);

    /* Same prompt again: every position but the last prompt token's hits (5
     * full pages and 9 positions of the sixth, b's prompt tail). */
    struct job again[1] = {b};
    submit(s, &again[0], 0);
    run_to_idle(s, again, 1);
    cr_assert_eq(again[0].stats.n_prompt_cached, 89);
    cr_assert_arr_eq(again[0].out, b_alone.out, b_alone.n_out * sizeof(int32_t));
    gs_sched_free(s);
    rig_close(&r);
}

/* A conversation's next turn (its prompt is the last request's prompt and
 * answer, then new text) reuses every position the last request computed,
 * through the partial last page it left cached; the same prompt sent twice at
 * once reuses all but its last token for both, because a partial hit takes a
 * copy and leaves the cached page for the next. Outputs are those without the
 * cache. */
static void conversation_turns(void)
{
    struct rig r;
    rig_open(&r);
    struct job a = {.n_prompt = 37, .max_tokens = 10};
    for (uint32_t i = 0; i < a.n_prompt; i++)
        a.prompt[i] = 3 + (int32_t)(i * 29 % 400);
    struct gs_sched *s = new_sched(&r, 4, 32, 512, true);
    submit(s, &a, 0);
    run_to_idle(s, &a, 1);
    cr_assert_eq(a.n_out, 10);

    struct job turn = a, turn_alone;
    memcpy(turn.prompt + a.n_prompt, a.out, a.n_out * sizeof(int32_t));
    turn.n_prompt = a.n_prompt + a.n_out + 5;
    for (uint32_t i = a.n_prompt + a.n_out; i < turn.n_prompt; i++)
        turn.prompt[i] = 7 + (int32_t)i;
    turn.max_tokens = 4;
    run_alone(&r, &turn, &turn_alone, 1);
    submit(s, &turn, 0);
    run_to_idle(s, &turn, 1);
    /* a computed its 37 + 10 tokens but the last: 2 full pages and 14 positions */
    cr_assert_eq(turn.stats.n_prompt_cached, 46, "cached %u", turn.stats.n_prompt_cached);
    cr_assert_arr_eq(turn.out, turn_alone.out, turn_alone.n_out * sizeof(int32_t));

    struct job twice[2] = {a, a};
    twice[0].n_out = twice[1].n_out = 0;
    submit(s, &twice[0], 0);
    submit(s, &twice[1], 1);
    run_to_idle(s, twice, 2);
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(twice[k].stats.n_prompt_cached, 36, "request %d cached %u", k,
                     twice[k].stats.n_prompt_cached);
        cr_assert_arr_eq(twice[k].out, a.out, a.n_out * sizeof(int32_t));
    }
    struct gs_err err;
    cr_assert_eq(gs_sched_check(s, &err), GS_OK, "%s", err.msg);
    assert_all_pages_free(s);
    gs_sched_free(s);
    rig_close(&r);
}

Test(sched, conversation_turns_reuse_partial_pages)
{
    conversation_turns();
}

Test(sched_cpu, conversation_turns_reuse_partial_pages)
{
    backend = "cpu";
    conversation_turns();
}

Test(sched, refuses_what_can_never_run)
{
    struct rig r;
    rig_open(&r);
    struct gs_sched *s = new_sched(&r, 2, 4, 64, false);
    int32_t prompt[100] = {1};
    struct gs_sched_request req = {.id = 1, .prompt = prompt, .n_prompt = 100, .max_tokens = 100};
    gs_sample_params_init(&req.sampling);
    struct gs_err err;
    cr_assert_eq(gs_sched_submit(s, &req, &err), GS_INVAL);
    cr_assert(strstr(err.msg, "the whole pool has 4"), "%s", err.msg);
    req.n_prompt = 10;
    req.max_tokens = 600;
    cr_assert_eq(gs_sched_submit(s, &req, &err), GS_INVAL);
    cr_assert(strstr(err.msg, "context_length_exceeded"), "%s", err.msg);
    req.max_tokens = 4;
    prompt[3] = 512;
    cr_assert_eq(gs_sched_submit(s, &req, &err), GS_INVAL);
    cr_assert(strstr(err.msg, "prompt[3]"), "%s", err.msg);
    prompt[3] = 5;
    req.sampling.top_p = 2.0f;
    cr_assert_eq(gs_sched_submit(s, &req, &err), GS_INVAL);
    cr_assert(strstr(err.msg, "top_p"), "%s", err.msg);
    gs_sched_free(s);
    rig_close(&r);
}

Test(sched, full_queue_says_busy)
{
    struct rig r;
    rig_open(&r);
    struct gs_sched_cfg cfg = {.backend = "ref", .kv_type = GS_TYPE_F16, .max_queue = 3,
                               .n_ctx = 256};
    struct gs_sched *s;
    struct gs_err err;
    cr_assert_eq(gs_sched_new(&cfg, r.model, &s, &err), GS_OK, "%s", err.msg);
    int32_t prompt[4] = {1, 5, 6, 7};
    struct gs_sched_request req = {.prompt = prompt, .n_prompt = 4, .max_tokens = 2};
    gs_sample_params_init(&req.sampling);
    for (uint64_t i = 0; i < 3; i++) {
        req.id = i;
        cr_assert_eq(gs_sched_submit(s, &req, &err), GS_OK, "%s", err.msg);
    }
    req.id = 3;
    cr_assert_eq(gs_sched_submit(s, &req, &err), GS_BUSY);
    cr_assert(strstr(err.msg, "queue is full"), "%s", err.msg);
    /* freeing with queued requests aborts them without leaking */
    gs_sched_free(s);
    rig_close(&r);
}

/* A burst of events that the loop takes late (four streams that step 48 times
 * before anyone polls: 196 events) grows the queue; once drained, the queue
 * gives that memory back, so an idle daemon holds no more than before the burst
 * (the daemon's /debug/memory row event_queue reads these bytes). */
Test(sched, a_drained_burst_of_events_gives_its_memory_back)
{
    struct rig r;
    rig_open(&r);
    struct gs_sched *s = new_sched(&r, 4, 64, 256, false);
    struct gs_sched_stats st;
    gs_sched_stats(s, &st);
    cr_assert_eq(st.event_bytes, 0, "a new scheduler holds no events");
    struct job jobs[4];
    unsigned seed = 5;
    for (uint64_t i = 0; i < 4; i++) {
        random_job(&jobs[i], &seed, 20);
        jobs[i].max_tokens = MAX_GEN;
        submit(s, &jobs[i], i);
    }
    struct gs_err err;
    for (int guard = 0; !gs_sched_idle(s); guard++) {
        cr_assert_lt(guard, 1000, "scheduler made no progress");
        cr_assert_eq(gs_sched_step(s, &err), GS_OK, "%s", err.msg);
    }
    gs_sched_stats(s, &st);
    uint64_t peak = st.event_bytes;
    struct gs_sched_event ev[64];
    size_t n, n_events = 0, n_finish = 0;
    while ((n = gs_sched_poll(s, ev, 64)) > 0) {
        for (size_t i = 0; i < n; i++)
            n_finish += ev[i].kind == GS_SCHED_EV_FINISH;
        n_events += n;
    }
    cr_assert_eq(n_events, 4 * (MAX_GEN + 1), "every token and finish arrives");
    cr_assert_eq(n_finish, 4);
    gs_sched_stats(s, &st);
    cr_assert_leq(st.event_bytes * 2, peak,
                  "the drained queue still holds %llu bytes of the burst's %llu",
                  (unsigned long long)st.event_bytes, (unsigned long long)peak);
    gs_sched_free(s);
    rig_close(&r);
}

/* A q8_0 cache is refused where its blocks of 32 would take more bytes than f16:
 * llama-2-tiny-random's rows are 8 values (one padded block, 34 bytes, against 16). */
Test(sched, q8_0_cache_refused_where_it_is_not_smaller)
{
    struct gs_err err;
    struct gs_gguf *file;
    struct gs_model *model;
    cr_assert_eq(gs_gguf_open(gs_test_shared_path("models/llama-2-tiny-random.gguf"), &file, &err),
                 GS_OK, "%s", err.msg);
    cr_assert_eq(gs_model_load(file, &model, &err), GS_OK, "%s", err.msg);
    struct gs_sched_cfg cfg = {.backend = "cpu", .kv_type = GS_TYPE_Q8_0, .n_ctx = 256};
    struct gs_sched *s;
    cr_assert_eq(gs_sched_new(&cfg, model, &s, &err), GS_INVAL);
    cr_assert(strstr(err.msg, "q8_0") && strstr(err.msg, "8 values") && strstr(err.msg, "use f16"),
              "%s", err.msg);
    cfg.kv_type = GS_TYPE_F16;
    cr_assert_eq(gs_sched_new(&cfg, model, &s, &err), GS_OK, "%s", err.msg);
    gs_sched_free(s);
    gs_model_free(model);
    gs_gguf_close(file);
    /* stories260K's rows of 32 are one whole block: 34 bytes against 64 */
    struct rig r;
    rig_open(&r);
    cfg.kv_type = GS_TYPE_Q8_0;
    cr_assert_eq(gs_sched_new(&cfg, r.model, &s, &err), GS_OK, "%s", err.msg);
    struct gs_sched_stats st;
    gs_sched_stats(s, &st);
    cr_assert_eq(st.kv_bytes / st.pages_total, 5ull * 2 * 16 * 34);
    gs_sched_free(s);
    rig_close(&r);
}

/* ---- threaded mode ---------------------------------------------------------------- */

struct notifier {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n;
};

static void on_notify(void *ctx)
{
    struct notifier *nt = ctx;
    pthread_mutex_lock(&nt->mu);
    nt->n++;
    pthread_cond_signal(&nt->cv);
    pthread_mutex_unlock(&nt->mu);
}

Test(sched, engine_thread_streams_events_and_notifies)
{
    struct rig r;
    rig_open(&r);
    struct notifier nt = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    struct gs_sched_cfg cfg = {.backend = "ref", .kv_type = GS_TYPE_F16, .n_ctx = 256,
                               .notify = on_notify, .notify_ctx = &nt, .prefix_cache = true};
    struct gs_sched *s;
    struct gs_err err;
    cr_assert_eq(gs_sched_new(&cfg, r.model, &s, &err), GS_OK, "%s", err.msg);
    cr_assert_eq(gs_sched_start(s, &err), GS_OK);
    struct job jobs[4], alone[4];
    unsigned seed = 9;
    for (int i = 0; i < 4; i++)
        random_job(&jobs[i], &seed, 30);
    run_alone(&r, jobs, alone, 4);
    for (uint64_t i = 0; i < 4; i++)
        submit(s, &jobs[i], i);
    int finished = 0;
    while (finished < 4) {
        pthread_mutex_lock(&nt.mu);
        while (nt.n == 0)
            pthread_cond_wait(&nt.cv, &nt.mu);
        nt.n = 0;
        pthread_mutex_unlock(&nt.mu);
        struct gs_sched_event ev[32];
        size_t n;
        while ((n = gs_sched_poll(s, ev, 32)) > 0)
            for (size_t i = 0; i < n; i++) {
                struct job *j = &jobs[ev[i].id];
                if (ev[i].kind == GS_SCHED_EV_TOKEN)
                    j->out[j->n_out++] = ev[i].token;
                else {
                    j->finish = ev[i].finish;
                    finished++;
                }
            }
    }
    for (int i = 0; i < 4; i++)
        cr_assert_arr_eq(jobs[i].out, alone[i].out, alone[i].n_out * sizeof(int32_t));
    /* a long request still running at stop is aborted */
    struct job longjob = {.n_prompt = 1, .prompt = {1}, .max_tokens = 200};
    struct gs_sched_request req = {.id = 9, .prompt = longjob.prompt, .n_prompt = 1,
                                   .max_tokens = 200, .ignore_eos = true};
    gs_sample_params_init(&req.sampling);
    cr_assert_eq(gs_sched_submit(s, &req, &err), GS_OK);
    gs_sched_stop(s, 0);
    struct gs_sched_event ev[256];
    size_t n = gs_sched_poll(s, ev, 256);
    cr_assert_gt(n, 0);
    cr_assert_eq(ev[n - 1].kind, GS_SCHED_EV_FINISH);
    cr_assert_eq(ev[n - 1].finish, GS_FINISH_ABORT);
    cr_assert_eq(gs_sched_submit(s, &req, &err), GS_BUSY, "no submissions after stop");
    gs_sched_free(s);
    rig_close(&r);
}

/* ---- numerical health ------------------------------------------------------------------ */

static void poison_job_1(uint64_t id, uint32_t position, float *logits, uint32_t n_vocab,
                         void *ctx)
{
    uint32_t *at = ctx;
    if (id == 1 && position >= *at)
        logits[n_vocab / 2] = NAN;
}

/* A sequence whose logits turn non-finite ends with an error; the others in
 * its batches finish exactly as they would alone, and the page filled by the
 * failing step never enters the prefix cache. */
Test(sched, non_finite_logits_end_only_that_sequence)
{
    struct rig r;
    rig_open(&r);
    unsigned seed = 21;
    struct job jobs[4], alone[4];
    for (int i = 0; i < 4; i++) {
        random_job(&jobs[i], &seed, 40);
        for (uint32_t t = jobs[i].n_prompt; t < 40; t++)
            jobs[i].prompt[t] = 3 + rand_r(&seed) % 500;
        jobs[i].n_prompt = 40;
        jobs[i].max_tokens = GS_MAX(jobs[i].max_tokens, 12);
    }
    run_alone(&r, jobs, alone, 4);
    /* Position 47 is the last slot of page 2: the failing step fills that page. */
    uint32_t poison_at = 47;
    struct gs_sched_cfg cfg = {.backend = "ref", .kv_type = GS_TYPE_F16, .n_ctx = 256,
                               .max_seqs = 4, .prefix_cache = true,
                               .logits_hook = poison_job_1, .logits_hook_ctx = &poison_at};
    struct gs_sched *s;
    struct gs_err err;
    cr_assert_eq(gs_sched_new(&cfg, r.model, &s, &err), GS_OK, "%s", err.msg);
    for (uint64_t i = 0; i < 4; i++)
        submit(s, &jobs[i], i);
    run_to_idle(s, jobs, 4);
    cr_assert_eq(jobs[1].finish, GS_FINISH_ERROR);
    /* logits at positions 39..46 gave tokens; position 47 failed */
    cr_assert_eq(jobs[1].n_out, 8);
    cr_assert_arr_eq(jobs[1].out, alone[1].out, 8 * sizeof(int32_t));
    for (int i = 0; i < 4; i++) {
        if (i == 1)
            continue;
        cr_assert_eq(jobs[i].finish, GS_FINISH_LENGTH);
        cr_assert_arr_eq(jobs[i].out, alone[i].out, alone[i].n_out * sizeof(int32_t));
    }
    struct gs_sched_stats st;
    gs_sched_stats(s, &st);
    cr_assert_eq(st.n_errors, 1);

    /* Continue each of jobs 0 and 1 from their first 48 tokens: the healthy
     * one finds 3 cached pages, the failed one only the 2 pages completed
     * before its failing step. */
    struct job cont[2];
    for (int k = 0; k < 2; k++) {
        cont[k] = jobs[k];
        memcpy(cont[k].prompt + 40, jobs[k].out, 8 * sizeof(int32_t));
        cont[k].prompt[48] = 5;
        cont[k].n_prompt = 49;
        cont[k].max_tokens = 1;
        submit(s, &cont[k], (uint64_t)k);
        run_to_idle(s, cont, 2);
    }
    cr_assert_eq(cont[0].stats.n_prompt_cached, 48);
    cr_assert_eq(cont[1].stats.n_prompt_cached, 32, "the failing step's page was cached");
    assert_all_pages_free(s);
    gs_sched_free(s);
    rig_close(&r);
}

/* ---- per-request validation ------------------------------------------------------------ */

struct vresult {
    struct job job;
    bool finished, pending;
    bool got_report;
    bool pass;
    int32_t n_rows, n_nonfinite;
    double min_pearson, top1_rate;
    char why[GS_ERR_MSG_LEN];
    int events_after_validation;
};

static void run_validated(struct gs_sched *s, struct vresult *v, uint32_t n)
{
    struct gs_sched_event ev[64];
    struct gs_err err;
    for (int guard = 0; !gs_sched_idle(s); guard++) {
        cr_assert_lt(guard, 100000);
        cr_assert_eq(gs_sched_step(s, &err), GS_OK, "%s", err.msg);
        size_t got;
        while ((got = gs_sched_poll(s, ev, 64)) > 0)
            for (size_t i = 0; i < got; i++) {
                cr_assert_lt(ev[i].id, n);
                struct vresult *r = &v[ev[i].id];
                cr_assert_not(r->got_report, "no event may follow VALIDATION");
                if (ev[i].kind == GS_SCHED_EV_TOKEN) {
                    r->job.out[r->job.n_out++] = ev[i].token;
                } else if (ev[i].kind == GS_SCHED_EV_FINISH) {
                    r->finished = true;
                    r->job.finish = ev[i].finish;
                    r->pending = ev[i].validation_pending;
                } else {
                    cr_assert(r->finished && r->pending, "VALIDATION before FINISH");
                    r->got_report = true;
                    snprintf(r->why, sizeof(r->why), "%s", ev[i].err_msg);
                    const struct gs_val_report *rep = ev[i].validation;
                    if (rep) {
                        r->pass = rep->pass;
                        r->n_rows = rep->n_rows;
                        r->n_nonfinite = rep->n_nonfinite;
                        r->min_pearson = rep->min_pearson;
                        r->top1_rate = rep->top1_rate;
                    }
                }
            }
    }
}

static void validate_model(const char *rel, uint32_t n_gen)
{
    struct gs_err err;
    struct gs_gguf *file;
    struct gs_model *model;
    cr_assert_eq(gs_gguf_open(gs_test_shared_path(rel), &file, &err), GS_OK, "%s", err.msg);
    cr_assert_eq(gs_model_load(file, &model, &err), GS_OK, "%s", err.msg);
    struct gs_sched_cfg cfg = {.backend = "ref", .kv_type = GS_TYPE_F16, .n_ctx = 256,
                               .validate_chunk_tokens = 7};
    struct gs_sched *s;
    cr_assert_eq(gs_sched_new(&cfg, model, &s, &err), GS_OK, "%s", err.msg);
    struct vresult v[3];
    memset(v, 0, sizeof(v));
    unsigned seed = 4;
    for (uint64_t i = 0; i < 3; i++) {
        random_job(&v[i].job, &seed, 30);
        v[i].job.max_tokens = n_gen;
        v[i].job.temperature = 0;
        struct gs_sched_request req = {.id = i, .prompt = v[i].job.prompt,
                                       .n_prompt = v[i].job.n_prompt, .max_tokens = n_gen,
                                       .ignore_eos = true, .validate = i != 2};
        gs_sample_params_init(&req.sampling);
        req.sampling.temperature = 0;
        cr_assert_eq(gs_sched_submit(s, &req, &err), GS_OK, "%s", err.msg);
    }
    run_validated(s, v, 3);
    for (int i = 0; i < 2; i++) {
        cr_assert(v[i].got_report, "%s: request %d got no validation (%s)", rel, i, v[i].why);
        cr_assert_eq(v[i].n_rows, (int32_t)n_gen, "one row per generated position");
        cr_assert(v[i].pass, "%s: served logits disagree with ref: min pearson %f top1 %f", rel,
                  v[i].min_pearson, v[i].top1_rate);
        cr_assert_geq(v[i].min_pearson, 0.999);
    }
    cr_assert_not(v[2].pending, "a request that did not ask is not validated");
    cr_assert_not(v[2].got_report);
    struct gs_sched_stats st;
    gs_sched_stats(s, &st);
    cr_assert_eq(st.n_validated, 2);
    cr_assert_eq(st.n_validation_failed, 0);
    gs_sched_free(s);
    gs_model_free(model);
    gs_gguf_close(file);
}

/* Served on the F16 KV cache, re-evaluated on ref with F32 K/V: the figures
 * pass the thresholds used for the golden files. */
Test(sched_validate, reports_agreement_for_f32_and_quantized_models)
{
    validate_model("models/stories260K.gguf", 20);
    validate_model("models/stories260K-Q4_0.gguf", 20);
    validate_model("models/tiny-k-Q4_K.gguf", 12);
}

/* Logits corrupted on the serving side: the sequence ends with an error and
 * its validation report says so (non-finite row, failed). */
Test(sched_validate, reports_non_finite_served_logits)
{
    struct rig r;
    rig_open(&r);
    uint32_t poison_at = 12;
    struct gs_sched_cfg cfg = {.backend = "ref", .kv_type = GS_TYPE_F16, .n_ctx = 256,
                               .logits_hook = poison_job_1, .logits_hook_ctx = &poison_at};
    struct gs_sched *s;
    struct gs_err err;
    cr_assert_eq(gs_sched_new(&cfg, r.model, &s, &err), GS_OK, "%s", err.msg);
    struct vresult v[2];
    memset(v, 0, sizeof(v));
    int32_t prompt[8] = {1, 400, 401, 402, 403, 404, 405, 406};
    for (uint64_t i = 0; i < 2; i++) {
        struct gs_sched_request req = {.id = i, .prompt = prompt, .n_prompt = 8,
                                       .max_tokens = 16, .ignore_eos = true, .validate = true};
        gs_sample_params_init(&req.sampling);
        req.sampling.temperature = 0;
        cr_assert_eq(gs_sched_submit(s, &req, &err), GS_OK, "%s", err.msg);
    }
    run_validated(s, v, 2);
    cr_assert_eq(v[1].job.finish, GS_FINISH_ERROR);
    cr_assert(v[1].got_report, "%s", v[1].why);
    cr_assert_not(v[1].pass);
    cr_assert_eq(v[1].n_nonfinite, 1);
    cr_assert_eq(v[1].n_rows, 12 - 7 + 1, "positions 7..12, the last one non-finite");
    cr_assert(v[0].got_report && v[0].pass, "the healthy request validates: %s", v[0].why);
    gs_sched_free(s);
    rig_close(&r);
}

/* ---- soak (long suite: ./dev test --long) ----------------------------------------------- */

/* Many rounds of random load on a pool too small for it, with and without the
 * prefix cache, with random cancellations, on every backend: each round checks
 * every sequence against its alone run and every page free at the end. */
Test(sched_soak, many_rounds_of_random_load_on_every_backend, .timeout = 3000)
{
    static const char *const backends[] = {"ref", "cpu"};
    for (size_t b = 0; b < GS_ARRAY_LEN(backends); b++) {
        backend = backends[b];
        for (unsigned round = 0; round < 12; round++)
            stress(round % 2 == 0, true, 1000 + round);
    }
}

/* Cancelling a finished request drops its pending validation without an event. */
Test(sched_validate, cancel_drops_pending_validation)
{
    struct rig r;
    rig_open(&r);
    struct gs_sched_cfg cfg = {.backend = "ref", .kv_type = GS_TYPE_F16, .n_ctx = 256,
                               .validate_chunk_tokens = 1};
    struct gs_sched *s;
    struct gs_err err;
    cr_assert_eq(gs_sched_new(&cfg, r.model, &s, &err), GS_OK, "%s", err.msg);
    int32_t prompt[20] = {1};
    for (int i = 1; i < 20; i++)
        prompt[i] = 100 + i;
    struct gs_sched_request req = {.id = 0, .prompt = prompt, .n_prompt = 20, .max_tokens = 4,
                                   .ignore_eos = true, .validate = true};
    gs_sample_params_init(&req.sampling);
    cr_assert_eq(gs_sched_submit(s, &req, &err), GS_OK);
    struct gs_sched_event ev[16];
    bool finished = false;
    while (!finished) {
        cr_assert_eq(gs_sched_step(s, &err), GS_OK);
        size_t n = gs_sched_poll(s, ev, 16);
        for (size_t i = 0; i < n; i++)
            finished |= ev[i].kind == GS_SCHED_EV_FINISH;
    }
    struct gs_sched_stats st;
    gs_sched_stats(s, &st);
    cr_assert_eq(st.n_validating, 1, "validation runs one token per step: still pending");
    gs_sched_cancel(s, 0);
    while (!gs_sched_idle(s)) {
        cr_assert_eq(gs_sched_step(s, &err), GS_OK);
        cr_assert_eq(gs_sched_poll(s, ev, 16), 0, "no event after cancelling");
    }
    gs_sched_stats(s, &st);
    cr_assert_eq(st.n_validated, 0);
    gs_sched_free(s);
    rig_close(&r);
}

/*
 * A grammar with a trigger (tool_choice "auto"): free text until the text holds the
 * trigger, then constrained from the trigger's first byte. The grammar here, "e" then at
 * most three letters then "Z", ends the sequence (STOP) a few tokens after the first "e"
 * of the text, once the token carrying that "e" was one the grammar takes (a token like
 * "e," drops the grammar, and the text goes on free). Over seeds: every sequence that
 * stopped ends in "Z" right after its first "e" and at most three letters, some do, and
 * the text before the first "e" is free (it differs between seeds).
 */
Test(sched, grammar_trigger_constrains_only_after_the_trigger)
{
    struct rig r;
    rig_open(&r);
    struct gs_err err;
    struct gs_tok *tok;
    cr_assert_eq(gs_tok_open(gs_test_shared_path("models/stories260K.gguf"), &tok, &err), GS_OK,
                 "%s", err.msg);
    struct gs_grammar_vocab *v = gs_test_grammar_vocab(tok);
    const char *src = "root ::= \"e\" [a-z]{0,3} \"Z\"";
    struct gs_grammar *g;
    cr_assert_eq(gs_grammar_compile(src, strlen(src), "root", NULL, &g, &err), GS_OK, "%s",
                 err.msg);
    struct gs_sched *s = new_sched(&r, 8, 256, 512, false);
    enum { N = 16 };
    static struct job jobs[N];
    for (uint32_t i = 0; i < N; i++) {
        struct job *j = &jobs[i];
        memset(j, 0, sizeof(*j));
        j->prompt[0] = 1;
        j->n_prompt = 1;
        j->max_tokens = MAX_GEN;
        struct gs_sched_request req = {.id = i,
                                       .prompt = j->prompt,
                                       .n_prompt = 1,
                                       .max_tokens = MAX_GEN,
                                       .grammar = g,
                                       .grammar_vocab = v,
                                       .grammar_trigger = "e"};
        gs_sample_params_init(&req.sampling);
        req.sampling.temperature = 1.0f;
        req.sampling.seed = 1000 + i;
        cr_assert_eq(gs_sched_submit(s, &req, &err), GS_OK, "%s", err.msg);
        j->finish = GS_FINISH_NONE;
    }
    run_to_idle(s, jobs, N);
    int n_stopped = 0;
    for (uint32_t i = 0; i < N; i++) {
        char text[MAX_GEN * 64] = "";
        size_t at = 0;
        for (uint32_t k = 0; k < jobs[i].n_out; k++) {
            size_t l = 0;
            const char *p = gs_tok_piece(tok, jobs[i].out[k], 0, &l);
            if (p && at + l < sizeof(text)) {
                memcpy(text + at, p, l);
                at += l;
            }
        }
        text[at] = '\0';
        if (jobs[i].finish != GS_FINISH_STOP)
            continue;
        n_stopped++;
        const char *e = strchr(text, 'e');
        cr_assert(e, "seed %u stopped without its trigger: '%s'", i, text);
        size_t k = 1;
        while (e[k] >= 'a' && e[k] <= 'z')
            k++;
        cr_expect(k <= 4 && e[k] == 'Z' && e[k + 1] == '\0',
                  "seed %u: after the trigger the grammar's sentence, then the end: '%s'", i, text);
    }
    cr_expect_gt(n_stopped, 0, "no sequence reached the end of the grammar");
    gs_sched_free(s);
    gs_grammar_unref(g);
    gs_grammar_vocab_free(v);
    gs_tok_free(tok);
    rig_close(&r);
}

/* ---- embeddings ------------------------------------------------------------------- */

/* The prompt's hidden rows from one direct step on a runner of the scheduler's
 * graph, over an F16 pool as the scheduler's, pooled and normalised here. */
static void embed_direct(struct rig *r, const struct job *j, float *out)
{
    enum { D = 64 };
    struct gs_err err = {0};
    struct gs_runner *run;
    const struct gs_runner_cfg rc = {.backend = "ref", .no_passes = true};
    cr_assert_eq(gs_runner_new(r->model->graph, &rc, &run, &err), GS_OK, "%s", err.msg);
    struct gs_kv_pool_cfg pc = {.n_layer = gs_model_kv_layers(r->model),
                                .kv_dim = gs_model_kv_dim(r->model),
                                .type = GS_TYPE_F16,
                                .page_tokens = 16,
                                .n_pages = 16};
    struct gs_kv_pool *pool;
    cr_assert_eq(gs_kv_pool_new(&pc, &pool, &err), GS_OK, "%s", err.msg);
    struct gs_kv_seq seq;
    gs_kv_seq_init(&seq);
    cr_assert_eq(gs_kv_seq_reserve(pool, &seq, j->n_prompt, &err), GS_OK, "%s", err.msg);
    struct gs_kv_view kv = gs_kv_pool_view(pool);
    int32_t pos[200];
    uint32_t sidx[200] = {0}, row = j->n_prompt - 1;
    for (uint32_t i = 0; i < j->n_prompt; i++)
        pos[i] = (int32_t)i;
    float *hid = calloc((size_t)j->n_prompt * D, sizeof(float));
    float *lg = calloc(r->model->hp.n_vocab, sizeof(float));
    cr_assert(hid && lg);
    struct gs_seq_pages sp = {seq.pages, seq.n_pages};
    struct gs_step_io io = {.n_tokens = j->n_prompt,
                            .tokens = j->prompt,
                            .pos = pos,
                            .seq = sidx,
                            .n_seqs = 1,
                            .seqs = &sp,
                            .kv = &kv,
                            .n_outputs = 1,
                            .out_rows = &row,
                            .logits = lg,
                            .hidden = hid};
    cr_assert_eq(gs_runner_step(run, &io, &err), GS_OK, "%s", err.msg);
    double acc[D] = {0}, ss = 0;
    for (uint32_t t = 0; t < j->n_prompt; t++)
        for (int k = 0; k < D; k++) {
            bool take = j->pooling == GS_POOLING_MEAN || (j->pooling == GS_POOLING_CLS && t == 0) ||
                        (j->pooling == GS_POOLING_LAST && t == j->n_prompt - 1);
            if (take)
                acc[k] += hid[t * D + k];
        }
    for (int k = 0; k < D; k++)
        ss += acc[k] * acc[k];
    for (int k = 0; k < D; k++)
        out[k] = (float)(acc[k] / sqrt(ss));
    free(hid);
    free(lg);
    gs_kv_seq_release(pool, &seq);
    gs_kv_pool_free(pool);
    gs_runner_free(run);
}

/* Embeddings (every pooling) and generations share small steps on a pool too
 * small for all: each vector equals the direct computation and the one it
 * gets alone, every generation its tokens alone, and every page comes back. */
Test(sched_embed, pool_beside_generation_with_preemption)
{
    struct rig r;
    rig_open(&r);
    enum { N = 12 };
    struct job jobs[N], alone[N];
    unsigned seed = 22;
    for (uint32_t i = 0; i < N; i++) {
        random_job(&jobs[i], &seed, 120);
        if (i % 2 == 0)
            jobs[i].pooling = (enum gs_pooling)(GS_POOLING_MEAN + (i / 2) % 3);
    }
    /* Alone: one sequence at a time, roomy pool, big steps. */
    struct gs_sched *s = new_sched(&r, 1, 64, 256, false);
    for (uint32_t i = 0; i < N; i++) {
        alone[i] = jobs[i];
        submit(s, &alone[i], 0);
        run_to_idle(s, &alone[i], 1);
        bool embed = jobs[i].pooling != GS_POOLING_NONE;
        cr_assert_eq(alone[i].finish, embed ? GS_FINISH_STOP : GS_FINISH_LENGTH);
        cr_assert_eq(alone[i].has_embd, embed);
        cr_assert_eq(alone[i].n_out, embed ? 0 : alone[i].max_tokens);
    }
    gs_sched_free(s);
    for (uint32_t i = 0; i < N; i += 2) {
        float direct[64];
        embed_direct(&r, &jobs[i], direct);
        double norm = 0;
        for (int k = 0; k < 64; k++) {
            norm += (double)alone[i].embd[k] * alone[i].embd[k];
            cr_assert_float_eq(alone[i].embd[k], direct[k], 1e-5, "job %u (%s) [%d]", i,
                               gs_pooling_name(jobs[i].pooling), k);
        }
        cr_assert_float_eq(norm, 1.0, 1e-5);
    }
    /* Together: 8 at once, 24-token steps, a pool of 14 pages (preemption), prefix cache on. */
    s = new_sched(&r, 8, 14, 24, true);
    for (uint32_t i = 0; i < N; i++)
        submit(s, &jobs[i], i);
    run_to_idle(s, jobs, N);
    struct gs_sched_stats st;
    gs_sched_stats(s, &st);
    cr_expect_gt(st.n_preemptions, 0, "the pool was meant to be too small");
    for (uint32_t i = 0; i < N; i++) {
        cr_assert_eq(jobs[i].finish, alone[i].finish, "job %u", i);
        cr_assert_eq(jobs[i].n_out, alone[i].n_out, "job %u", i);
        for (uint32_t t = 0; t < jobs[i].n_out; t++)
            cr_assert_eq(jobs[i].out[t], alone[i].out[t], "job %u token %u", i, t);
        for (int k = 0; jobs[i].has_embd && k < 64; k++)
            cr_assert_float_eq(jobs[i].embd[k], alone[i].embd[k], 1e-6, "job %u [%d]", i, k);
    }
    assert_all_pages_free(s);
    gs_sched_free(s);
    rig_close(&r);
}

/* An embedding asks nothing of max_tokens; its prompt alone must fit the
 * context; a cancelled one ends without a vector and gives its pages back. */
Test(sched_embed, limits_and_cancellation)
{
    struct rig r;
    rig_open(&r);
    struct gs_sched *s = new_sched(&r, 4, 32, 16, false);
    static int32_t prompt[600];
    for (int i = 0; i < 600; i++)
        prompt[i] = 3 + i % 400;
    struct gs_err err;
    struct gs_sched_request req = {
        .id = 0, .prompt = prompt, .n_prompt = 513, .pooling = GS_POOLING_MEAN};
    cr_assert_eq(gs_sched_submit(s, &req, &err), GS_INVAL);
    cr_assert(strstr(err.msg, "context"), "%s", err.msg);
    req.pooling = (enum gs_pooling)4; /* rank: not ours */
    req.n_prompt = 10;
    cr_assert_eq(gs_sched_submit(s, &req, &err), GS_UNSUPPORTED);
    struct job j = {.n_prompt = 200, .pooling = GS_POOLING_MEAN};
    memcpy(j.prompt, prompt, sizeof(j.prompt));
    submit(s, &j, 0);
    cr_assert_eq(gs_sched_step(s, &err), GS_OK, "%s", err.msg);
    gs_sched_cancel(s, 0);
    run_to_idle(s, &j, 1);
    cr_assert_eq(j.finish, GS_FINISH_CANCELLED);
    cr_assert(!j.has_embd);
    submit(s, &j, 0);
    run_to_idle(s, &j, 1);
    cr_assert_eq(j.finish, GS_FINISH_STOP);
    cr_assert(j.has_embd);
    assert_all_pages_free(s);
    gs_sched_free(s);
    rig_close(&r);
}

/* Decoding streams that grow take the pages of an embedding in mid-prefill
 * (the most recently admitted): it starts again from its first row and still
 * pools to the vector it gets alone. */
Test(sched_embed, preempted_mid_prefill_pools_again_from_the_start)
{
    struct rig r;
    rig_open(&r);
    struct job jobs[3] = {0}, alone;
    for (int i = 0; i < 2; i++) {
        jobs[i].n_prompt = 15;
        jobs[i].max_tokens = MAX_GEN;
        for (uint32_t t = 0; t < 15; t++)
            jobs[i].prompt[t] = t ? 5 + 17 * (int32_t)t + i : 1;
    }
    jobs[2].n_prompt = 150;
    jobs[2].pooling = GS_POOLING_MEAN;
    for (uint32_t t = 0; t < 150; t++)
        jobs[2].prompt[t] = t ? 3 + (int32_t)(t * 7 % 400) : 1;
    struct gs_sched *s = new_sched(&r, 1, 64, 256, false);
    alone = jobs[2];
    submit(s, &alone, 0);
    run_to_idle(s, &alone, 1);
    cr_assert(alone.has_embd);
    gs_sched_free(s);

    /* 13 pages: the streams' first pages leave the embedding its 10 at admission, and
     * their second ones take what it needs for its last chunk. */
    s = new_sched(&r, 4, 13, 24, false);
    for (uint64_t i = 0; i < 3; i++)
        submit(s, &jobs[i], i);
    run_to_idle(s, jobs, 3);
    cr_assert_gt(jobs[2].stats.n_preemptions, 0, "the embedding was meant to be preempted");
    cr_assert(jobs[2].has_embd);
    for (int k = 0; k < 64; k++)
        cr_assert_float_eq(jobs[2].embd[k], alone.embd[k], 1e-6, "[%d]", k);
    assert_all_pages_free(s);
    gs_sched_free(s);
    rig_close(&r);
}
