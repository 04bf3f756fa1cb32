/*
 * tests/scheduler/test_trace.c - the step trace (scheduler.h): nothing is
 * built without a watcher; with one, a record per step whose batch, page map,
 * prefix hits and preemptions agree with what the scheduler did; the buffer
 * stays bounded and counts what it dropped when nobody takes.
 */
#include "engine/gguf.h"
#include "engine/model.h"
#include "scheduler/scheduler.h"
#include "tests/common/testutil.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

struct rig {
    struct gs_gguf *file;
    struct gs_model *model;
    struct gs_sched *s;
};

/* stories260K on ref: 10240 bytes a page of 16 tokens. */
static void rig_open(struct rig *r, uint32_t max_seqs, uint32_t n_pages)
{
    struct gs_err err;
    cr_assert_eq(gs_gguf_open(gs_test_shared_path("models/stories260K.gguf"), &r->file, &err),
                 GS_OK, "%s", err.msg);
    cr_assert_eq(gs_model_load(r->file, &r->model, &err), GS_OK, "%s", err.msg);
    struct gs_sched_cfg cfg = {.backend = "ref",
                               .kv_cache_bytes = n_pages * 10240ull,
                               .kv_type = GS_TYPE_F16,
                               .max_seqs = max_seqs,
                               .max_batch_tokens = 512,
                               .n_ctx = 512,
                               .prefix_cache = true};
    cr_assert_eq(gs_sched_new(&cfg, r->model, &r->s, &err), GS_OK, "%s", err.msg);
}

static void rig_close(struct rig *r)
{
    gs_sched_free(r->s);
    gs_model_free(r->model);
    gs_gguf_close(r->file);
}

static void submit(struct gs_sched *s, uint64_t id, uint32_t n_prompt, uint32_t max_tokens)
{
    int32_t prompt[400];
    cr_assert_leq(n_prompt, 400);
    for (uint32_t i = 0; i < n_prompt; i++)
        prompt[i] = 3 + (int32_t)(i * 37 % 500);
    struct gs_sched_request req = {.id = id,
                                   .prompt = prompt,
                                   .n_prompt = n_prompt,
                                   .max_tokens = max_tokens,
                                   .ignore_eos = true};
    gs_sample_params_init(&req.sampling);
    req.sampling.temperature = 0;
    struct gs_err err;
    cr_assert_eq(gs_sched_submit(s, &req, &err), GS_OK, "%s", err.msg);
}

/* Steps until idle; returns the tokens generated (TOKEN events). */
static uint32_t run_to_idle(struct gs_sched *s)
{
    struct gs_sched_event ev[64];
    struct gs_err err;
    uint32_t tokens = 0;
    for (int guard = 0; !gs_sched_idle(s); guard++) {
        cr_assert_lt(guard, 100000, "scheduler made no progress");
        cr_assert_eq(gs_sched_step(s, &err), GS_OK, "%s", err.msg);
        size_t n;
        while ((n = gs_sched_poll(s, ev, 64)) > 0)
            for (size_t i = 0; i < n; i++)
                tokens += ev[i].kind == GS_SCHED_EV_TOKEN;
    }
    return tokens;
}

/* The records taken now, parsed (an array); every line must be one JSON object. */
static json_t *take_records(struct gs_sched *s, uint64_t *dropped)
{
    char *text;
    size_t len;
    *dropped = gs_sched_trace_take(s, &text, &len);
    json_t *all = json_array();
    for (size_t at = 0; text && at < len;) {
        char *nl = memchr(text + at, '\n', len - at);
        cr_assert(nl, "a record ends with a newline");
        json_error_t e;
        json_t *rec = json_loadb(text + at, (size_t)(nl - (text + at)), 0, &e);
        cr_assert(rec, "record not JSON: %s", e.text);
        cr_assert_str_eq(json_string_value(json_object_get(rec, "type")), "step");
        json_array_append_new(all, rec);
        at = (size_t)(nl - text) + 1;
    }
    gs_free(text);
    return all;
}

static uint64_t steps(struct gs_sched *s)
{
    struct gs_sched_stats st;
    gs_sched_stats(s, &st);
    return st.n_steps;
}

/* The map's runs ("u3c2f11") add up to pages_total and to the used/cached/free counts. */
static void check_map(json_t *kv)
{
    const char *map = json_string_value(json_object_get(kv, "map"));
    cr_assert(map);
    long n[3] = {0};
    for (const char *p = map; *p;) {
        const char *codes = "ucf", *c = strchr(codes, *p);
        cr_assert(c && *c, "bad page code in %s", map);
        char *end;
        long k = strtol(p + 1, &end, 10);
        cr_assert_gt(k, 0);
        n[c - codes] += k;
        p = end;
    }
    cr_assert_eq(n[0], json_integer_value(json_object_get(kv, "used")));
    cr_assert_eq(n[1], json_integer_value(json_object_get(kv, "cached")));
    cr_assert_eq(n[2], json_integer_value(json_object_get(kv, "free")));
    cr_assert_eq(n[0] + n[1] + n[2], json_integer_value(json_object_get(kv, "pages_total")));
}

Test(sched_trace, nothing_is_built_without_a_watcher)
{
    struct rig r;
    rig_open(&r, 4, 64);
    submit(r.s, 0, 20, 8);
    run_to_idle(r.s);
    char *text;
    size_t len;
    cr_assert_eq(gs_sched_trace_take(r.s, &text, &len), 0);
    cr_assert_null(text);
    cr_assert_eq(len, 0);
    /* A watcher that left stops the records too. */
    gs_sched_trace_watch(r.s, true);
    gs_sched_trace_watch(r.s, true);
    gs_sched_trace_watch(r.s, false);
    submit(r.s, 1, 20, 4);
    run_to_idle(r.s);
    uint64_t dropped;
    json_t *recs = take_records(r.s, &dropped);
    cr_assert_gt(json_array_size(recs), 0, "one watcher is still there");
    json_decref(recs);
    gs_sched_trace_watch(r.s, false);
    submit(r.s, 2, 20, 4);
    run_to_idle(r.s);
    cr_assert_eq(gs_sched_trace_take(r.s, &text, &len), 0);
    cr_assert_null(text);
    rig_close(&r);
}

Test(sched_trace, a_record_per_step_with_batch_pages_and_prefix_hits)
{
    struct rig r;
    rig_open(&r, 4, 64);
    gs_sched_trace_watch(r.s, true);
    uint64_t s0 = steps(r.s);
    submit(r.s, 0, 70, 8);
    uint32_t gen_a = run_to_idle(r.s);
    /* The same 70 tokens again: 4 full pages of 16 hit the prefix cache, and a
     * copy of the fifth's first 5 positions, all but the last prompt token. */
    submit(r.s, 1, 70, 8);
    uint32_t gen_b = run_to_idle(r.s);
    uint64_t dropped;
    json_t *recs = take_records(r.s, &dropped);
    cr_assert_eq(dropped, 0);
    cr_assert_eq(json_array_size(recs), steps(r.s) - s0, "one record per step");
    uint32_t decode[2] = {0}, prompt[2] = {0}, hit_pages = 0, hit_tokens = 0;
    size_t i;
    json_t *rec;
    json_array_foreach(recs, i, rec)
    {
        json_t *b, *batch = json_object_get(rec, "batch");
        size_t j;
        long sum = 0;
        json_array_foreach(batch, j, b)
        {
            uint64_t id = (uint64_t)json_integer_value(json_object_get(b, "seq"));
            cr_assert_lt(id, 2);
            long p = json_integer_value(json_object_get(b, "prompt_tokens"));
            long d = json_integer_value(json_object_get(b, "decode_tokens"));
            prompt[id] += (uint32_t)p;
            decode[id] += (uint32_t)d;
            sum += p + d;
        }
        cr_assert_eq(sum, json_integer_value(json_object_get(rec, "batch_tokens")));
        json_t *kv = json_object_get(rec, "kv");
        check_map(kv);
        json_t *h, *hits = json_object_get(rec, "prefix_hits");
        json_array_foreach(hits, j, h)
        {
            cr_assert_eq(json_integer_value(json_object_get(h, "seq")), 1);
            hit_pages += (uint32_t)json_integer_value(json_object_get(h, "pages"));
            hit_tokens += (uint32_t)json_integer_value(json_object_get(h, "tokens"));
        }
        /* Every running sequence's pages are used pages. */
        json_t *q, *seqs = json_object_get(kv, "seqs");
        long owned = 0;
        json_array_foreach(seqs, j, q)
        {
            json_t *run, *runs = json_object_get(q, "pages");
            size_t k;
            json_array_foreach(runs, k, run) owned += json_integer_value(json_array_get(run, 1));
        }
        cr_assert_leq(owned, json_integer_value(json_object_get(kv, "used")));
    }
    /* Each sequence: its prompt computed (less what hit), then one decode per token after
     * the first, which the last prompt step samples. */
    cr_assert_eq(prompt[0], 70);
    cr_assert_eq(prompt[1], 70 - 69);
    cr_assert_eq(hit_pages, 5);
    cr_assert_eq(hit_tokens, 69);
    cr_assert_eq(decode[0], gen_a - 1);
    cr_assert_eq(decode[1], gen_b - 1);
    json_decref(recs);
    rig_close(&r);
}

Test(sched_trace, preemptions_are_recorded)
{
    struct rig r;
    /* 4 sequences of 40 + 40 tokens need 20 pages; 10 force preemption. */
    rig_open(&r, 4, 10);
    gs_sched_trace_watch(r.s, true);
    for (uint64_t id = 0; id < 4; id++)
        submit(r.s, id, 40, 40);
    run_to_idle(r.s);
    struct gs_sched_stats st;
    gs_sched_stats(r.s, &st);
    cr_assert_gt(st.n_preemptions, 0, "the pool is too small for all four");
    uint64_t dropped, seen = 0;
    json_t *recs = take_records(r.s, &dropped);
    size_t i;
    json_t *rec;
    json_array_foreach(recs, i, rec)
    {
        long n = json_integer_value(json_object_get(rec, "n_preempted"));
        cr_assert_eq(json_array_size(json_object_get(rec, "preempted")), (size_t)n);
        seen += (uint64_t)n;
    }
    cr_assert_eq(seen, st.n_preemptions);
    json_decref(recs);
    rig_close(&r);
}

Test(sched_trace, the_buffer_is_bounded_and_counts_what_it_drops, .timeout = 300)
{
    struct rig r;
    rig_open(&r, 1, 64);
    gs_sched_trace_watch(r.s, true);
    /* Records of about 300 bytes, one a step, never taken: thousands of steps fill it. */
    uint64_t n = 0;
    for (uint64_t id = 0; n * 300 < 3 * GS_SCHED_TRACE_MAX_BYTES / 2; id++) {
        submit(r.s, id, 10, 500);
        run_to_idle(r.s);
        n = steps(r.s);
    }
    uint64_t dropped;
    char *text;
    size_t len;
    dropped = gs_sched_trace_take(r.s, &text, &len);
    cr_assert_leq(len, GS_SCHED_TRACE_MAX_BYTES);
    cr_assert_gt(dropped, 0);
    size_t lines = 0;
    for (size_t k = 0; k < len; k++)
        lines += text[k] == '\n';
    cr_assert_eq(lines + dropped, n, "every step's record is either kept or counted");
    gs_free(text);
    /* Taken: room again, and the count starts over. */
    submit(r.s, 999, 10, 2);
    run_to_idle(r.s);
    json_t *recs = take_records(r.s, &dropped);
    cr_assert_eq(dropped, 0);
    cr_assert_eq(json_array_size(recs), 2);
    json_decref(recs);
    rig_close(&r);
}
