/*
 * tests/engine/test_llama_util.h - a single-sequence rig for the llama suites:
 * opens a model file, builds the graph (optionally rewritten by passes), and
 * runs steps through a runner (ref, or another backend with llama_rig_use)
 * over a paged KV cache. Failures are Criterion assertions.
 */
#ifndef GS_TEST_LLAMA_UTIL_H
#define GS_TEST_LLAMA_UTIL_H

#include "engine/backend.h"
#include "engine/runner.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "kvcache/kvcache.h"

#include <jansson.h>

struct llama_rig {
    struct gs_gguf *file;
    struct gs_model *model;
    struct gs_runner *run;
    struct gs_kv_pool *pool;
    struct gs_kv_seq seq;
    struct gs_kv_view kv;
    uint32_t n_past; /* tokens already in the cache */
    float *logits;   /* [max_tokens][n_vocab] */
    uint32_t max_tokens;
};

/* path is relative to the shared folder (models/x.gguf), or absolute. */
void llama_rig_open(struct llama_rig *r, const char *rel_path, enum gs_type kv_type, bool passes,
                    uint32_t max_tokens);
void llama_rig_close(struct llama_rig *r);

/* Moves the rig onto backend `name` (n_threads 0: its default), keeping the graph as
 * the first runner's passes rewrote it. */
void llama_rig_use(struct llama_rig *r, const char *name, int n_threads);

/* Appends n tokens as one step; all_logits: every row gets logits, else the last.
 * Returns r->logits (row i for token i, or row 0 for the last token). */
const float *llama_rig_step(struct llama_rig *r, const int32_t *tokens, uint32_t n,
                            bool all_logits);

int32_t llama_argmax(const float *x, uint32_t n);
double llama_pearson(const float *a, const double *b, uint32_t n);

/* Loads a golden JSON file under the shared folder (or at an absolute path); pieces may
 * hold NUL bytes. */
json_t *llama_load_golden(const char *rel);

/* Reads a JSON array of ints into a malloc'ed int32 array; returns its length. */
uint32_t llama_json_ids(json_t *arr, int32_t **out);

/* How one backend agrees with a teacher-forced golden (prompt_logits, steps): the
 * lowest Pearson over the prompt's rows, the steps whose argmax is the golden's
 * token, and the misses where the golden's margin to its second token was >= 0.5. */
struct llama_agreement {
    double min_rho;
    uint32_t agree, n_steps, bad_margin;
};
/* Runs the golden's prompt and completion as one step over a kv-typed cache on
 * `backend` (n_threads 0: its default), with the daemon's passes. */
struct llama_agreement llama_teacher_forced(json_t *golden, const char *model_rel, enum gs_type kv,
                                            const char *backend, int n_threads);

#endif
