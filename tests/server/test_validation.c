/*
 * tests/server/test_validation.c - per-request validation, the numerical
 * guard, known-answer readiness and the reproducibility receipt, end to end:
 * the real `graphserve serve` on 127.0.0.1, curl as the client.
 *
 * Figures are judged by the thresholds the golden-file checks use
 * (gs_val_thresholds_init), which the response also echoes.
 */
#define _GNU_SOURCE
#include "engine/digest.h"
#include "engine/validate.h"
#include "tests/common/testutil.h"
#include "tests/server/e2e.h"

#include <criterion/criterion.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Starts the daemon on model file `model` (under ../shared/models) with args. */
static void start_on(struct e2e_daemon *d, const char *model, const char *args)
{
    char extra[1024];
    snprintf(extra, sizeof(extra), "-m '%s' %s",
             gs_test_shared_path(model[0] ? model : "models/stories260K.gguf"), args);
    e2e_start(d, extra);
}

static double num(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    cr_assert(json_is_number(v), "'%s' is not a number", key);
    return json_number_value(v);
}

/* The validation object agrees with the golden thresholds and covers every
 * generated token. */
static void check_validation(const json_t *v, int n_generated)
{
    cr_assert(json_is_object(v), "no validation object");
    struct gs_val_thresholds thr;
    gs_val_thresholds_init(&thr);
    cr_expect_str_eq(json_string_value(json_object_get(v, "status")), "done");
    cr_expect_str_eq(json_string_value(json_object_get(v, "reference_backend")), "ref");
    cr_expect(json_is_true(json_object_get(v, "passed")), "validation failed: %s",
              json_string_value(json_object_get(v, "reason")));
    cr_expect_eq(num(v, "n_positions"), n_generated);
    cr_expect_geq(num(v, "top1_rate"), thr.min_top1_rate);
    cr_expect_geq(num(v, "min_pearson"), thr.min_pearson);
    cr_expect_leq(num(v, "mean_kl"), thr.max_mean_kl);
    cr_expect_geq(num(v, "mean_topk_overlap"), 0.5);
    cr_expect_geq(num(v, "max_abs_err"), 0);
    json_t *t = json_object_get(v, "thresholds");
    cr_expect_eq(num(t, "min_pearson"), thr.min_pearson);
    cr_expect_eq(num(t, "min_top1_rate"), thr.min_top1_rate);
    cr_expect(json_object_get(v, "first_divergence"), "first_divergence missing");
}

/* system_fingerprint is "gs-" and 12 hex digits; graphserve holds the parts,
 * with the model file's real digest. */
static void check_receipt(const json_t *body, const char *model_rel, const char *backend)
{
    const char *fp = json_string_value(json_object_get(body, "system_fingerprint"));
    cr_assert(fp && strlen(fp) == 15 && !strncmp(fp, "gs-", 3), "fingerprint %s", fp);
    for (int i = 3; i < 15; i++)
        cr_expect(isxdigit((unsigned char)fp[i]), "fingerprint %s", fp);
    json_t *g = json_object_get(body, "graphserve");
    cr_assert(json_is_object(g), "no graphserve receipt");
    uint8_t d[GS_SHA256_BYTES];
    char hex[GS_SHA256_HEX_LEN];
    struct gs_err err;
    cr_assert_eq(gs_sha256_file(gs_test_shared_path(model_rel), d, &err), GS_OK);
    gs_sha256_hex(d, hex);
    cr_expect_str_eq(json_string_value(json_object_get(g, "model_sha256")), hex);
    cr_expect_str_eq(json_string_value(json_object_get(g, "backend")), backend);
    cr_expect(json_string_length(json_object_get(g, "kernel_variant")) > 0);
    cr_expect_eq(json_string_length(json_object_get(g, "graph_hash")), 16);
    cr_expect(json_is_integer(json_object_get(g, "seed")));
}

Test(srv_validation, json_response_on_stories260k_and_quantized_variants, .timeout = 120)
{
    static const char *const models[] = {
        "models/stories260K.gguf",      "models/stories260K-Q8_0.gguf",
        "models/stories260K-Q4_0.gguf", "models/stories260K-Q5_1.gguf",
        "models/stories260K-F16.gguf",
    };
    for (size_t m = 0; m < sizeof(models) / sizeof(models[0]); m++) {
        struct e2e_daemon d;
        start_on(&d, models[m], "--backend cpu");
        struct e2e_resp r;
        e2e_http(&d, "POST", "/v1/completions",
                 "{\"prompt\":\"Once upon a time\",\"max_tokens\":24,\"temperature\":0,"
                 "\"seed\":7,\"validation\":true}",
                 NULL, &r);
        cr_assert_eq(r.status, 200, "%s: %s", models[m], r.body);
        int n = (int)json_integer_value(
            json_object_get(json_object_get(r.json, "usage"), "completion_tokens"));
        cr_expect_gt(n, 0);
        cr_expect_str_eq(
            json_string_value(json_object_get(json_object_get(r.json, "usage"), "validation")),
            "done");
        check_validation(json_object_get(r.json, "validation"), n);
        check_receipt(r.json, models[m], "cpu");
        cr_expect_eq(
            json_integer_value(json_object_get(json_object_get(r.json, "graphserve"), "seed")), 7);
        e2e_resp_free(&r);
        /* Counted in /metrics, and the exposition still lints. */
        e2e_http(&d, "GET", "/metrics", NULL, NULL, &r);
        /* The model label is the file's name without ".gguf". */
        char id[64], sample[256];
        snprintf(id, sizeof(id), "%s", strrchr(models[m], '/') + 1);
        id[strlen(id) - 5] = '\0';
        snprintf(sample, sizeof(sample),
                 "graphserve_validated_requests_total{model=\"%s\",backend=\"cpu\","
                 "result=\"passed\"}",
                 id);
        cr_expect_eq(e2e_metric(r.body, sample), 1, "%s: %s", sample, r.body);
        char *out = NULL, cmd[1024];
        snprintf(cmd, sizeof(cmd), "promtool check metrics < '%s'", e2e_body_file(r.body));
        cr_expect_eq(gs_test_run(cmd, 1, &out), 0, "promtool: %s", out);
        free(out);
        e2e_resp_free(&r);
        cr_expect_eq(e2e_stop(&d), 0);
    }
}

Test(srv_validation, stream_carries_the_report_in_the_last_chunk, .timeout = 60)
{
    /* Greedy, so that the figures are reproducible. (stories260K-Q4_1 on this
     * prompt has one near-tie flip in 16 positions, which the 0.95 top-1 rate
     * of the goldens fails: short requests make that threshold strict.) */
    static const char *const models[] = {"models/stories260K.gguf", "models/stories260K-Q8_0.gguf"};
    for (size_t m = 0; m < 2; m++) {
        struct e2e_daemon d;
        start_on(&d, models[m], "--backend cpu");
        struct e2e_resp r;
        e2e_http(&d, "POST", "/v1/chat/completions",
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell a story\"}],"
                 "\"max_tokens\":16,\"temperature\":0,\"stream\":true,\"stream_options\":{"
                 "\"include_usage\":true},"
                 "\"validation\":{\"top_logprobs\":3}}",
                 NULL, &r);
        cr_assert_eq(r.status, 200, "%s", r.body);
        bool done;
        json_t *evs = e2e_sse_events(r.body, &done);
        cr_assert(done);
        size_t n = json_array_size(evs);
        cr_assert_geq(n, 3);
        json_t *last = json_array_get(evs, n - 1);
        json_t *usage = json_object_get(last, "usage");
        int gen = (int)json_integer_value(json_object_get(usage, "completion_tokens"));
        cr_expect_str_eq(json_string_value(json_object_get(usage, "validation")), "done");
        json_t *v = json_object_get(last, "validation");
        check_validation(v, gen);
        /* The served top-3 of every generated position, best first. */
        json_t *top = json_object_get(v, "served_top_logprobs");
        cr_assert_eq(json_array_size(top), (size_t)gen);
        size_t i;
        json_t *pos;
        json_array_foreach(top, i, pos)
        {
            cr_assert_eq(json_array_size(pos), 3);
            cr_expect_geq(num(json_array_get(pos, 0), "logprob"),
                          num(json_array_get(pos, 1), "logprob"));
        }
        /* Before the report, a usage chunk said it was pending; the finish
         * chunk carries the receipt. */
        bool pending = false, receipt = false;
        json_array_foreach(evs, i, pos)
        {
            json_t *u = json_object_get(pos, "usage");
            const char *st = json_string_value(json_object_get(u, "validation"));
            pending = pending || (st && !strcmp(st, "pending"));
            if (json_object_get(pos, "graphserve")) {
                receipt = true;
                check_receipt(pos, models[m], "cpu");
            }
        }
        cr_expect(pending, "no pending usage chunk");
        cr_expect(receipt, "no receipt in the stream");
        json_decref(evs);
        e2e_resp_free(&r);
        cr_expect_eq(e2e_stop(&d), 0);
    }
}

Test(srv_validation, rate_one_validates_unasked_and_off_leaves_it_out, .timeout = 60)
{
    struct e2e_daemon d;
    start_on(&d, "", "--validate-rate 1");
    struct e2e_resp r;
    e2e_http(&d, "POST", "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":5}", NULL, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    check_validation(json_object_get(r.json, "validation"), 5);
    e2e_resp_free(&r);
    cr_expect_eq(e2e_stop(&d), 0);

    start_on(&d, "", "");
    e2e_http(&d, "POST", "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":5}", NULL, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_expect_null(json_object_get(r.json, "validation"));
    cr_expect_null(json_object_get(json_object_get(r.json, "usage"), "validation"));
    check_receipt(r.json, "models/stories260K.gguf", "cpu"); /* the default backend */
    e2e_resp_free(&r);
    e2e_http(&d, "POST", "/v1/completions",
             "{\"prompt\":\"Hi\",\"validation\":{\"top_logprobs\":99}}", NULL, &r);
    cr_expect_eq(r.status, 400);
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(r.json, "error"), "param")),
                     "validation.top_logprobs");
    e2e_resp_free(&r);
    cr_expect_eq(e2e_stop(&d), 0);
}

/* A prompt of n token ids (valid for stories260K). */
static void id_prompt(char *out, size_t cap, int n, const char *rest)
{
    size_t w = (size_t)snprintf(out, cap, "{\"prompt\":[1");
    for (int i = 1; i < n; i++)
        w += (size_t)snprintf(out + w, cap - w, ",%d", 300 + i % 50);
    snprintf(out + w, cap - w, "],%s}", rest);
}

/* Reads a file the shell wrote; caller frees. */
static char *slurp(const char *dir, const char *name)
{
    char p[800];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    return gs_test_read_file(p, NULL);
}

/* The finish_reason of the last choice event that has one, or NULL. */
static const char *last_finish(json_t *evs)
{
    const char *fin = NULL;
    size_t i;
    json_t *e;
    json_array_foreach(evs, i, e)
    {
        json_t *c = json_array_get(json_object_get(e, "choices"), 0);
        if (json_is_string(json_object_get(c, "finish_reason")))
            fin = json_string_value(json_object_get(c, "finish_reason"));
    }
    return fin;
}

/* Position 40 and later get a NaN: a 30-token prompt with 20 tokens to
 * generate reaches it; a 3-token prompt with 30 does not. The known-answer
 * check stays below 40 and passes. The healthy stream and both poisoned
 * requests run in the same batches: the test gate (GS_TEST_STEP_GATE) holds
 * the engine until all three are in flight. */
Test(srv_validation, nonfinite_logits_end_only_that_sequence, .timeout = 120)
{
    char dir[600], gate[700];
    snprintf(dir, sizeof(dir), "%s/nonfinite-%d", gs_test_tmpdir(), (int)getpid());
    cr_assert(mkdir(dir, 0700) == 0 || errno == EEXIST);
    snprintf(gate, sizeof(gate), "%s/gate", dir);
    setenv("GS_TEST_POISON_POS", "40", 1);
    setenv("GS_TEST_STEP_GATE", gate, 1);
    struct e2e_daemon d;
    start_on(&d, "", "--backend ref");
    unsetenv("GS_TEST_POISON_POS");
    unsetenv("GS_TEST_STEP_GATE");
    struct e2e_resp r;
    e2e_http(&d, "GET", "/ready", NULL, NULL, &r);
    cr_expect_eq(r.status, 200, "%s", r.body);
    e2e_resp_free(&r);
    FILE *f = fopen(gate, "w");
    cr_assert(f);
    fclose(f);

    char healthy[4096], poisoned[4096], files[3][700];
    id_prompt(healthy, sizeof(healthy), 3,
              "\"max_tokens\":30,\"ignore_eos\":true,\"stream\":true,\"validation\":true");
    snprintf(files[0], sizeof(files[0]), "%s", e2e_body_file(healthy));
    /* Not streamed: no header went out yet, so a 500 with a clear code. */
    id_prompt(poisoned, sizeof(poisoned), 30, "\"max_tokens\":20,\"ignore_eos\":true");
    snprintf(files[1], sizeof(files[1]), "%s", e2e_body_file(poisoned));
    /* Streamed: finish_reason "error", then an error chunk, then [DONE]. */
    id_prompt(poisoned, sizeof(poisoned), 30,
              "\"max_tokens\":20,\"ignore_eos\":true,\"stream\":true,\"validation\":true");
    snprintf(files[2], sizeof(files[2]), "%s", e2e_body_file(poisoned));
    char *cmd;
    const char *c = "curl -sS -H 'Content-Type: application/json' -w '%{http_code}'";
    cr_assert(
        asprintf(&cmd,
                 "D='%s'; M=%d; "
                 "for i in 0 1 2; do eval f=\\$F$i; %s --max-time $M --data-binary \"@$f\" "
                 "-o $D/body$i %s/v1/completions > $D/code$i & done; "
                 "for i in $(seq $((M * 20))); do curl -s --max-time $M %s/metrics | "
                 "grep -qx 'graphserve_requests_in_flight 3' && { touch $D/overlap; break; }; "
                 "sleep 0.05; done; "
                 "rm -f $D/gate; wait",
                 dir, E2E_HANG_S, c, d.url, d.url) > 0);
    char *full;
    cr_assert(asprintf(&full, "F0='%s' F1='%s' F2='%s'; %s", files[0], files[1], files[2], cmd) >
              0);
    free(cmd);
    gs_test_run(full, 1, NULL);
    free(full);
    char marker[800];
    snprintf(marker, sizeof(marker), "%s/overlap", dir);
    cr_expect(access(marker, F_OK) == 0, "the three requests were never in flight together");

    char *code[3], *resp[3];
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof(name), "code%d", i);
        code[i] = slurp(dir, name);
        snprintf(name, sizeof(name), "body%d", i);
        resp[i] = slurp(dir, name);
    }
    /* The healthy stream ends by length, its validation passed. */
    cr_expect_str_eq(code[0], "200", "%s", resp[0]);
    bool done = false;
    json_t *evs = e2e_sse_events(resp[0], &done);
    const char *fin = last_finish(evs);
    json_t *v = json_object_get(json_array_get(evs, json_array_size(evs) - 1), "validation");
    cr_expect(done && fin && !strcmp(fin, "length") && json_is_true(json_object_get(v, "passed")),
              "the healthy stream did not finish well: %s", resp[0]);
    json_decref(evs);

    cr_expect_str_eq(code[1], "500", "%s", resp[1]);
    json_t *body = json_loads(resp[1], 0, NULL);
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(body, "error"), "code")),
                     "numerical_error", "%s", resp[1]);
    json_decref(body);

    cr_expect_str_eq(code[2], "200");
    evs = e2e_sse_events(resp[2], &done);
    cr_expect(done);
    bool fin_error = false, err_chunk = false;
    size_t i;
    json_t *e;
    json_array_foreach(evs, i, e)
    {
        json_t *ch = json_array_get(json_object_get(e, "choices"), 0);
        const char *fr = json_string_value(json_object_get(ch, "finish_reason"));
        fin_error = fin_error || (fr && !strcmp(fr, "error"));
        const char *ec = json_string_value(json_object_get(json_object_get(e, "error"), "code"));
        err_chunk = err_chunk || (ec && !strcmp(ec, "numerical_error"));
    }
    cr_expect(fin_error, "no finish_reason error: %s", resp[2]);
    cr_expect(err_chunk, "no error chunk: %s", resp[2]);
    json_decref(evs);
    for (int k = 0; k < 3; k++) {
        free(code[k]);
        free(resp[k]);
    }

    e2e_http(&d, "GET", "/metrics", NULL, NULL, &r);
    cr_expect_eq(e2e_metric(r.body, "graphserve_numeric_errors_total{model=\"stories260K\","
                                    "backend=\"ref\"}"),
                 2);
    e2e_resp_free(&r);
    cr_expect_eq(e2e_stop(&d), 0);
}

Test(srv_validation, failed_known_answer_check_keeps_ready_503, .timeout = 60)
{
    setenv("GS_TEST_POISON_POS", "0", 1);
    struct e2e_daemon d;
    start_on(&d, "", "");
    unsetenv("GS_TEST_POISON_POS");
    struct e2e_resp r;
    e2e_http(&d, "GET", "/ready", NULL, NULL, &r);
    cr_expect_eq(r.status, 503, "%s", r.body);
    cr_expect(strstr(r.body, "known-answer"), "%s", r.body);
    e2e_resp_free(&r);
    e2e_http(&d, "GET", "/health", NULL, NULL, &r);
    cr_expect_eq(r.status, 200);
    json_t *ka = json_object_get(r.json, "known_answer");
    cr_expect(json_is_false(json_object_get(ka, "passed")), "%s", r.body);
    cr_expect(strstr(json_string_value(json_object_get(ka, "detail")), "NaN") ||
                  strstr(json_string_value(json_object_get(ka, "detail")), "numer"),
              "%s", r.body);
    e2e_resp_free(&r);
    /* Generation is refused while not ready. */
    e2e_http(&d, "POST", "/v1/completions", "{\"prompt\":\"Hi\",\"max_tokens\":2}", NULL, &r);
    cr_expect_eq(r.status, 503, "%s", r.body);
    e2e_resp_free(&r);
    cr_expect_eq(e2e_stop(&d), 0);
    char *log = gs_test_read_file(d.log_path, NULL);
    cr_expect(strstr(log, "event=known_answer passed=false"), "%s", log);
    free(log);
}

/* Where a probe or a client reads which cache the daemon serves: /health, /v1/models'
 * meta, /metrics' cache info gauge and the start-up log's engine and receipt lines. */
static void check_kv_type_named(struct e2e_daemon *d, const char *kv)
{
    struct e2e_resp r;
    e2e_http(d, "GET", "/health", NULL, NULL, &r);
    cr_expect_str_eq(json_string_value(json_object_get(r.json, "kv_type")), kv, "%s", r.body);
    e2e_resp_free(&r);
    e2e_http(d, "GET", "/v1/models", NULL, NULL, &r);
    json_t *meta = json_object_get(json_array_get(json_object_get(r.json, "data"), 0), "meta");
    cr_expect_str_eq(json_string_value(json_object_get(meta, "kv_type")), kv, "%s", r.body);
    e2e_resp_free(&r);
    e2e_http(d, "GET", "/metrics", NULL, NULL, &r);
    char want[128];
    snprintf(want, sizeof(want), ",kv_type=\"%s\",cache_dtype=\"%s\"} 1\n", kv, kv);
    const char *info = strstr(r.body, "\ngraphserve_cache_config_info{");
    cr_assert(info, "%s", r.body);
    char line[512];
    snprintf(line, sizeof(line), "%.*s", (int)strcspn(info + 1, "\n") + 1, info + 1);
    cr_expect(strstr(line, want), "no %s in %s", want, line);
    e2e_resp_free(&r);
}

/* A q8_0 cache served on cpu and on ref, and an f16 one on cpu beside them: ready
 * (the known-answer check passed against ref's F32 cache), a validated completion
 * within the thresholds with its figures and both caches named in its receipt, the
 * cache type in /health, /v1/models, /metrics and the log, and 1.88x the pages of
 * an f16 cache in the same bytes. tiny-k (64-value heads) holds the thresholds;
 * stories260K (8-value heads, one block's scale over four heads) does not on every
 * request: min Pearson 0.997 over 24 generated tokens of "Once upon a time". */
Test(srv_validation, q8_0_cache_serves_validated_on_cpu_and_ref, .timeout = 180)
{
    static const char *const backends[] = {"cpu", "ref"};
    double pages[3] = {0};
    char fingerprint[3][32] = {{0}};
    for (size_t b = 0; b < 3; b++) {
        const char *kv = b < 2 ? "q8_0" : "f16";
        char args[256];
        snprintf(args, sizeof(args), "--backend %s --kv-type %s --kv-cache-bytes 1048576",
                 backends[b % 2], kv);
        struct e2e_daemon d;
        start_on(&d, "models/tiny-k-F32.gguf", args);
        struct e2e_resp r;
        e2e_http(&d, "GET", "/health", NULL, NULL, &r);
        cr_expect(json_is_true(json_object_get(json_object_get(r.json, "known_answer"), "passed")),
                  "%s: %s", args, r.body);
        e2e_resp_free(&r);
        e2e_http(&d, "GET", "/ready", NULL, NULL, &r);
        cr_expect_eq(r.status, 200, "%s: %s", args, r.body);
        e2e_resp_free(&r);
        check_kv_type_named(&d, kv);
        e2e_http(&d, "POST", "/v1/completions",
                 "{\"prompt\":\"Once upon a time\",\"max_tokens\":24,\"temperature\":0,"
                 "\"seed\":7,\"validation\":true}",
                 NULL, &r);
        cr_assert_eq(r.status, 200, "%s: %s", args, r.body);
        int n = (int)json_integer_value(
            json_object_get(json_object_get(r.json, "usage"), "completion_tokens"));
        cr_expect_gt(n, 0);
        json_t *v = json_object_get(r.json, "validation");
        check_validation(v, n);
        /* The figures compare the served cache with the reference's F32 one. */
        cr_expect_str_eq(json_string_value(json_object_get(v, "kv_type")), kv, "%s", r.body);
        cr_expect_str_eq(json_string_value(json_object_get(v, "reference_kv_type")), "f32", "%s",
                         r.body);
        cr_expect_str_eq(
            json_string_value(json_object_get(json_object_get(r.json, "graphserve"), "kv_type")),
            kv, "%s", r.body);
        snprintf(fingerprint[b], sizeof(fingerprint[b]), "%s",
                 json_string_value(json_object_get(r.json, "system_fingerprint")));
        e2e_resp_free(&r);
        e2e_http(&d, "GET", "/metrics", NULL, NULL, &r);
        pages[b] = e2e_metric(r.body, "graphserve_kv_pages_capacity");
        e2e_resp_free(&r);
        cr_expect_eq(e2e_stop(&d), 0);
        char *log = gs_test_read_file(d.log_path, NULL);
        char want[64];
        snprintf(want, sizeof(want), " kv_type=%s kv_pages=", kv);
        cr_expect(strstr(log, "event=engine ") && strstr(log, want), "no '%s' in %s", want, log);
        snprintf(want, sizeof(want), " kv_type=%s\n", kv);
        cr_expect(strstr(log, "event=receipt ") && strstr(log, want), "no '%s' in %s", want, log);
        free(log);
    }
    /* Same model, backend, kernels, graph and seed: only the cache differs. */
    cr_expect_str_neq(fingerprint[0], fingerprint[2]);
    /* tiny-k: 2 layers x K, V x 16 tokens x 128 values, at 2 bytes or 34 per 32 */
    cr_expect_eq(pages[2], 1048576 / (2 * 2 * 16 * 128 * 2));
    cr_expect_eq(pages[0], 1048576 / (2 * 2 * 16 * 4 * 34));
    cr_expect_eq(pages[1], pages[0]);
}

Test(srv_validation, passing_check_is_in_health, .timeout = 30)
{
    struct e2e_daemon d;
    start_on(&d, "", "");
    struct e2e_resp r;
    e2e_http(&d, "GET", "/health", NULL, NULL, &r);
    json_t *ka = json_object_get(r.json, "known_answer");
    cr_expect(json_is_true(json_object_get(ka, "passed")), "%s", r.body);
    e2e_resp_free(&r);
    e2e_http(&d, "GET", "/ready", NULL, NULL, &r);
    cr_expect_eq(r.status, 200);
    e2e_resp_free(&r);
    cr_expect_eq(e2e_stop(&d), 0);
}

/* `graphserve validate --server`: a prompt set against a running daemon. */
Test(srv_validation, validate_command_against_a_daemon, .timeout = 60)
{
    struct e2e_daemon d;
    start_on(&d, "models/stories260K-Q8_0.gguf", "--backend cpu");
    char cmd[2048], *out = NULL;
    snprintf(cmd, sizeof(cmd),
             "'%s' validate --server %s -p 'Once upon a time' -p 'The little dog' --max-tokens 12",
             gs_test_build_path("server/graphserve"), d.url);
    cr_expect_eq(gs_test_run(cmd, 1, &out), 0, "%s", out);
    cr_expect(strstr(out, "2/2 passed against ref"), "%s", out);
    cr_expect(strstr(out, ", kv_type f16 against the reference's f32)\n"), "%s", out);
    cr_expect(strstr(out, "PASS   positions=12 "), "%s", out);
    free(out);
    cr_expect_eq(e2e_stop(&d), 0);

    /* Answers that fail (here: a numerical error past position 20) make it exit 1. */
    setenv("GS_TEST_POISON_POS", "20", 1);
    start_on(&d, "", "");
    unsetenv("GS_TEST_POISON_POS");
    snprintf(cmd, sizeof(cmd),
             "'%s' validate --server %s -p 'Once upon a time' --max-tokens 30 --json",
             gs_test_build_path("server/graphserve"), d.url);
    cr_expect_eq(gs_test_run(cmd, 1, &out), 1, "%s", out);
    json_t *line = json_loads(out, JSON_DISABLE_EOF_CHECK, NULL);
    cr_expect_eq(json_integer_value(json_object_get(line, "http_status")), 500, "%s", out);
    cr_expect(json_is_false(json_object_get(line, "passed")), "%s", out);
    json_decref(line);
    free(out);
    cr_expect_eq(e2e_stop(&d), 0);
}

/* A report that does not come within --validate-timeout-ms: the answer goes
 * out saying so, and the engine drops the job. The job is held by the
 * validation gate until the answer is in, so the deadline passes first on a
 * machine of any speed. */
Test(srv_validation, timeout_answers_without_the_report_and_drops_the_job, .timeout = 120)
{
    /* The validation job is held (GS_TEST_VALIDATE_GATE) until the answer has
     * come, so the report cannot beat the 1 ms deadline on any machine. */
    char gate[600];
    snprintf(gate, sizeof(gate), "%s/validate-gate-%d", gs_test_tmpdir(), getpid());
    setenv("GS_TEST_VALIDATE_GATE", gate, 1);
    struct e2e_daemon d;
    start_on(&d, "", "--backend cpu --validate-timeout-ms 1");
    unsetenv("GS_TEST_VALIDATE_GATE");
    FILE *g = fopen(gate, "w"); /* after the known-answer check, which validates too */
    cr_assert(g);
    fclose(g);
    static char body[16384];
    id_prompt(body, sizeof(body), 64, "\"max_tokens\":4,\"ignore_eos\":true,\"validation\":true");
    struct e2e_resp r;
    double t0 = gs_now_ms();
    e2e_http(&d, "POST", "/v1/completions", body, NULL, &r);
    unlink(gate);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_expect_str_eq(
        json_string_value(json_object_get(json_object_get(r.json, "usage"), "validation")),
        "timeout");
    json_t *v = json_object_get(r.json, "validation");
    cr_expect_str_eq(json_string_value(json_object_get(v, "status")), "timeout");
    cr_expect(json_is_false(json_object_get(v, "passed")));
    e2e_resp_free(&r);
    /* Dropped: nothing left validating, once the engine has taken the
     * cancel (waited for, not timed). */
    double running = -1;
    for (int i = 0; i < E2E_HANG_S * 10 && running != 0; i++) {
        e2e_http(&d, "GET", "/metrics", NULL, NULL, &r);
        running = e2e_metric(r.body, "graphserve_validations_running");
        if (running == 0)
            cr_expect_eq(e2e_metric(r.body, "graphserve_validated_requests_total{model="
                                            "\"stories260K\",backend=\"cpu\",result=\"timeout\"}"),
                         1);
        e2e_resp_free(&r);
        if (running != 0)
            usleep(100000);
    }
    cr_expect_eq(running, 0, "the engine still validates");
    cr_log_info("timed-out request answered and its job dropped after %.0f ms", gs_now_ms() - t0);
    cr_expect_eq(e2e_stop(&d), 0);
}
