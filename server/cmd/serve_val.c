/* server/cmd/serve_val.c - see serve_val.h. */
#define _GNU_SOURCE
#include "server/cmd/serve_val.h"

#include "engine/backend.h"
#include "engine/sample.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum gs_status gs_serve_receipt_compute(const uint8_t model_sha256[GS_SHA256_BYTES],
                                        const struct gs_model *m, const char *backend,
                                        struct gs_serve_receipt *r, struct gs_err *err)
{
    uint8_t d[GS_SHA256_BYTES];
    gs_sha256_hex(model_sha256, r->sha256);
    /* The graph's text names every node, op, type and shape: two servers
     * with the same text run the same computation. */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return gs_err_set(err, GS_NOMEM, "graph hash: out of memory");
    gs_graph_print(m->graph, GS_GRAPH_TEXT, f);
    fclose(f);
    char hex[GS_SHA256_HEX_LEN];
    gs_sha256(text ? text : "", len, d);
    free(text);
    gs_sha256_hex(d, hex);
    snprintf(r->graph_hash, sizeof(r->graph_hash), "%.16s", hex);
    r->variant = gs_be_kernel_variant(backend);
    return GS_OK;
}

bool gs_serve_test_hooks_from_env(struct gs_serve_test_hooks *h)
{
    *h = (struct gs_serve_test_hooks){0};
    const char *v = getenv("GS_TEST_POISON_POS");
    if (v && *v) {
        char *end;
        unsigned long n = strtoul(v, &end, 10);
        if (!*end && n <= UINT32_MAX) {
            h->poison = true;
            h->poison_pos = (uint32_t)n;
        }
    }
    v = getenv("GS_TEST_STEP_GATE");
    if (v && *v)
        h->gate_path = gs_strdup(v);
    v = getenv("GS_TEST_STEP_GATE_AT");
    if (v && *v) {
        char *end;
        unsigned long n = strtoul(v, &end, 10);
        if (*end == ':' && end[1] && n <= UINT32_MAX) {
            h->gate_at = (uint32_t)n;
            h->gate_at_path = gs_strdup(end + 1);
        }
    }
    v = getenv("GS_TEST_VALIDATE_GATE");
    if (v && *v)
        h->validate_gate_path = gs_strdup(v);
    v = getenv("GS_TEST_EVENT_GATE");
    if (v && *v)
        h->event_gate_path = gs_strdup(v);
    return h->poison || h->gate_path || h->gate_at_path || h->validate_gate_path ||
           h->event_gate_path;
}

void gs_serve_test_hooks_free(struct gs_serve_test_hooks *h)
{
    gs_free(h->gate_path);
    gs_free(h->gate_at_path);
    gs_free(h->validate_gate_path);
    gs_free(h->event_gate_path);
    h->gate_path = h->gate_at_path = h->validate_gate_path = h->event_gate_path = NULL;
}

/* Waits while path exists, bounded so that a forgotten gate cannot hang a
 * daemon's shutdown. */
static void hold_while(const char *path)
{
    for (int i = 0; path && i < 10000 && access(path, F_OK) == 0; i++)
        usleep(10 * 1000);
}

void gs_serve_test_validate_hook(void *ctx)
{
    hold_while(((const struct gs_serve_test_hooks *)ctx)->validate_gate_path);
}

void gs_serve_test_hook(uint64_t id, uint32_t position, float *logits, uint32_t n_vocab,
                        void *ctx)
{
    (void)id;
    const struct gs_serve_test_hooks *h = ctx;
    hold_while(h->gate_path);
    if (h->gate_at_path && position >= h->gate_at)
        hold_while(h->gate_at_path);
    if (h->poison && position >= h->poison_pos && n_vocab)
        logits[n_vocab / 2] = NAN;
}

/* The fixed prompt and length of the known-answer check. */
static const char ka_prompt[] = "Once upon a time, there was a little";
enum { KA_TOKENS = 8, KA_ID = 0x7fffffff };

bool gs_serve_known_answer(struct gs_sched *s, const struct gs_tok *tok, char *detail, size_t cap)
{
    struct gs_err err;
    int32_t *ids = NULL;
    size_t n = 0;
    if (gs_tok_encode(tok, ka_prompt, strlen(ka_prompt), GS_TOK_ADD_SPECIAL, &ids, &n, &err) !=
            GS_OK ||
        n == 0) {
        snprintf(detail, cap, "cannot tokenize the check's prompt: %s", n ? err.msg : "empty");
        gs_free(ids);
        return false;
    }
    struct gs_sched_request q = {
        .id = KA_ID,
        .prompt = ids,
        .n_prompt = (uint32_t)n,
        .max_tokens = KA_TOKENS,
        .ignore_eos = true,
        .validate = true,
    };
    gs_sample_params_init(&q.sampling);
    q.sampling.temperature = 0; /* greedy */
    enum gs_status st = gs_sched_submit(s, &q, &err);
    gs_free(ids);
    if (st != GS_OK) {
        snprintf(detail, cap, "cannot submit the check: %s", err.msg);
        return false;
    }
    bool got = false, passed = false;
    snprintf(detail, cap, "no validation report");
    for (int steps = 0; steps < 100000 && !gs_sched_idle(s) && !got; steps++) {
        if (gs_sched_step(s, &err) != GS_OK) {
            snprintf(detail, cap, "engine step failed: %s", err.msg);
            return false;
        }
        struct gs_sched_event ev[16];
        size_t k;
        while ((k = gs_sched_poll(s, ev, GS_ARRAY_LEN(ev))) > 0)
            for (size_t i = 0; i < k; i++) {
                if (ev[i].kind == GS_SCHED_EV_FINISH && ev[i].finish == GS_FINISH_ERROR) {
                    snprintf(detail, cap, "the check's generation failed (%s): %s",
                             gs_status_str(ev[i].err_code), ev[i].err_msg);
                    got = true;
                } else if (ev[i].kind == GS_SCHED_EV_VALIDATION && !got) {
                    const struct gs_val_report *r = ev[i].validation;
                    got = true;
                    if (!r) {
                        snprintf(detail, cap, "validation did not run: %s", ev[i].err_msg);
                        continue;
                    }
                    passed = r->pass;
                    snprintf(detail, cap,
                             "%s against ref on %d positions: top1_rate=%.4f min_pearson=%.6f "
                             "max_abs_err=%.3g mean_kl=%.3g%s%s",
                             r->pass ? "passed" : "failed", r->n_rows, r->top1_rate, r->min_pearson,
                             r->max_abs_err, r->mean_kl, r->pass ? "" : ": ",
                             r->pass ? "" : r->reason);
                }
            }
    }
    /* Leave nothing of the check behind in the engine. */
    gs_sched_cancel(s, KA_ID);
    for (int steps = 0; steps < 1000 && !gs_sched_idle(s); steps++) {
        struct gs_sched_event ev[16];
        if (gs_sched_step(s, &err) != GS_OK)
            break;
        while (gs_sched_poll(s, ev, GS_ARRAY_LEN(ev)) > 0) {
        }
    }
    return passed;
}
