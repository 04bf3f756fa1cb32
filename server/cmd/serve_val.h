/*
 * server/cmd/serve_val.h - what `graphserve serve` does for validation
 * before it serves: the reproducibility receipt (model digest, kernel
 * variant, graph hash), the known-answer readiness check, and the test-only
 * logits poisoning hook.
 */
#ifndef GS_CMD_SERVE_VAL_H
#define GS_CMD_SERVE_VAL_H

#include "engine/digest.h"
#include "engine/model.h"
#include "engine/tok.h"
#include "scheduler/scheduler.h"

struct gs_serve_receipt {
    char sha256[GS_SHA256_HEX_LEN]; /* the model file's SHA-256 */
    char graph_hash[17];            /* 16 hex digits of SHA-256 over the graph's text */
    const char *variant;            /* kernel variant: "reference", "avx2", "vnni", ... */
};

/*
 * Fills r from the model file's digest (computed while the weights were read
 * at load) and the graph as the scheduler rewrote it for backend (call after
 * gs_sched_new). GS_NOMEM only.
 */
enum gs_status gs_serve_receipt_compute(const uint8_t model_sha256[GS_SHA256_BYTES],
                                        const struct gs_model *m, const char *backend,
                                        struct gs_serve_receipt *r, struct gs_err *err);

/*
 * TEST ONLY hooks, through the scheduler's logits_hook, read from the
 * environment (unset, the default: no hook):
 *   GS_TEST_POISON_POS=N puts a NaN into every logits row at sequence
 *     position N or later, so that tests see the numerical guard end only the
 *     sequences that reach N (and, with N small, the known-answer check fail).
 *   GS_TEST_STEP_GATE=FILE holds the engine, before it samples, while FILE
 *     exists (for at most 100 s a row), so that a test can keep a request
 *     running for exactly as long as it needs, on a machine of any speed.
 *   GS_TEST_VALIDATE_GATE=FILE holds validation jobs the same way.
 */
struct gs_serve_test_hooks {
    bool poison;
    uint32_t poison_pos;
    char *gate_path;          /* owned; NULL: no gate */
    /* GS_TEST_STEP_GATE_AT=N:FILE: the engine waits while FILE exists, but only at a
     * sequence position >= N, so that requests run up to N first. */
    uint32_t gate_at;
    char *gate_at_path; /* owned; NULL: no gate */
    char *validate_gate_path; /* owned; NULL: no gate */
    /* GS_TEST_EVENT_GATE=FILE: while FILE exists the loop takes no engine events;
     * they wait in the scheduler's queue, as behind a loop thread that fell behind. */
    char *event_gate_path; /* owned; NULL: no gate */
};

/* Fills *h from the environment; returns whether any hook is on. */
bool gs_serve_test_hooks_from_env(struct gs_serve_test_hooks *h);
void gs_serve_test_hooks_free(struct gs_serve_test_hooks *h);
void gs_serve_test_hook(uint64_t id, uint32_t position, float *logits, uint32_t n_vocab,
                        void *ctx); /* ctx: the struct gs_serve_test_hooks */
/* GS_TEST_VALIDATE_GATE=FILE: validation jobs wait while FILE exists (the
 * scheduler's validate_hook; at most 100 s a chunk). */
void gs_serve_test_validate_hook(void *ctx);

/*
 * The known-answer check: runs a fixed short prompt greedily on the
 * scheduler (synchronous mode: before gs_sched_start) with validation, so
 * that the serving backend's logits are compared with the ref backend's.
 * Returns true when the report passes; detail says what was measured or why
 * it failed.
 */
bool gs_serve_known_answer(struct gs_sched *s, const struct gs_tok *tok, char *detail, size_t cap);

#endif
