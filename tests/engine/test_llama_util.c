/* tests/engine/test_llama_util.c - see test_llama_util.h. */
#include "tests/engine/test_llama_util.h"
#include "tests/common/testutil.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void llama_rig_open(struct llama_rig *r, const char *rel_path, enum gs_type kv_type, bool passes,
                    uint32_t max_tokens)
{
    struct gs_err err = {0};
    memset(r, 0, sizeof(*r));
    const char *path = rel_path[0] == '/' ? rel_path : gs_test_shared_path(rel_path);
    cr_assert_eq(gs_gguf_open(path, &r->file, &err), GS_OK, "%s", err.msg);
    cr_assert_eq(gs_model_load(r->file, &r->model, &err), GS_OK, "%s", err.msg);
    const struct gs_runner_cfg rc = {.backend = "ref", .no_passes = !passes};
    cr_assert_eq(gs_runner_new(r->model->graph, &rc, &r->run, &err), GS_OK, "%s", err.msg);
    struct gs_kv_pool_cfg pc = {
        .n_layer = gs_model_kv_layers(r->model),
        .kv_dim = gs_model_kv_dim(r->model),
        .type = kv_type,
        .page_tokens = 16,
        .n_pages = max_tokens / 16 + 2,
    };
    cr_assert_eq(gs_kv_pool_new(&pc, &r->pool, &err), GS_OK, "%s", err.msg);
    gs_kv_seq_init(&r->seq);
    r->kv = gs_kv_pool_view(r->pool);
    r->max_tokens = max_tokens;
    r->logits = calloc((size_t)max_tokens * r->model->hp.n_vocab, sizeof(float));
    cr_assert(r->logits);
}

void llama_rig_use(struct llama_rig *r, const char *name, int n_threads)
{
    struct gs_err err = {0};
    gs_runner_free(r->run);
    const struct gs_runner_cfg rc = {.backend = name, .n_threads = n_threads, .no_passes = true};
    cr_assert_eq(gs_runner_new(r->model->graph, &rc, &r->run, &err), GS_OK, "%s", err.msg);
}

void llama_rig_close(struct llama_rig *r)
{
    gs_runner_free(r->run);
    gs_kv_seq_release(r->pool, &r->seq);
    gs_kv_pool_free(r->pool);
    gs_model_free(r->model);
    gs_gguf_close(r->file);
    free(r->logits);
}

const float *llama_rig_step(struct llama_rig *r, const int32_t *tokens, uint32_t n, bool all_logits)
{
    struct gs_err err = {0};
    cr_assert(n > 0 && n <= r->max_tokens);
    cr_assert_eq(gs_kv_seq_reserve(r->pool, &r->seq, r->n_past + n, &err), GS_OK, "%s", err.msg);
    int32_t *pos = calloc(n, sizeof(*pos));
    uint32_t *seq = calloc(n, sizeof(*seq));
    uint32_t *rows = calloc(n, sizeof(*rows));
    cr_assert(pos && seq && rows);
    for (uint32_t i = 0; i < n; i++) {
        pos[i] = (int32_t)(r->n_past + i);
        rows[i] = i;
    }
    struct gs_seq_pages sp = {r->seq.pages, r->seq.n_pages};
    struct gs_step_io io = {
        .n_tokens = n,
        .tokens = tokens,
        .pos = pos,
        .seq = seq,
        .n_seqs = 1,
        .seqs = &sp,
        .kv = &r->kv,
        .n_outputs = all_logits ? n : 1,
        .out_rows = all_logits ? rows : &rows[n - 1],
        .logits = r->logits,
    };
    cr_assert_eq(gs_runner_step(r->run, &io, &err), GS_OK, "%s", err.msg);
    r->n_past += n;
    free(pos);
    free(seq);
    free(rows);
    return r->logits;
}

int32_t llama_argmax(const float *x, uint32_t n)
{
    int32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = (int32_t)i;
    return best;
}

double llama_pearson(const float *a, const double *b, uint32_t n)
{
    double ma = 0, mb = 0;
    for (uint32_t i = 0; i < n; i++) {
        ma += a[i];
        mb += b[i];
    }
    ma /= n;
    mb /= n;
    double sab = 0, saa = 0, sbb = 0;
    for (uint32_t i = 0; i < n; i++) {
        sab += (a[i] - ma) * (b[i] - mb);
        saa += (a[i] - ma) * (a[i] - ma);
        sbb += (b[i] - mb) * (b[i] - mb);
    }
    return sab / sqrt(saa * sbb);
}

uint32_t llama_json_ids(json_t *arr, int32_t **out)
{
    cr_assert(json_is_array(arr));
    uint32_t n = (uint32_t)json_array_size(arr);
    *out = calloc(n ? n : 1, sizeof(**out));
    cr_assert(*out);
    for (uint32_t i = 0; i < n; i++)
        (*out)[i] = (int32_t)json_integer_value(json_array_get(arr, i));
    return n;
}

json_t *llama_load_golden(const char *rel)
{
    json_error_t jerr;
    const char *path = rel[0] == '/' ? rel : gs_test_shared_path(rel);
    json_t *j = json_load_file(path, JSON_ALLOW_NUL, &jerr);
    cr_assert(j, "cannot parse %s: %s (line %d)", path, jerr.text, jerr.line);
    return j;
}

struct llama_agreement llama_teacher_forced(json_t *j, const char *model_rel, enum gs_type kv,
                                            const char *backend, int n_threads)
{
    int32_t *prompt, *completion;
    uint32_t n_prompt = llama_json_ids(json_object_get(j, "prompt_tokens"), &prompt);
    uint32_t n_gen = llama_json_ids(json_object_get(j, "completion_tokens"), &completion);
    uint32_t n = n_prompt + n_gen - 1;
    int32_t *tokens = calloc(n, sizeof(*tokens));
    cr_assert(tokens);
    for (uint32_t i = 0; i < n; i++)
        tokens[i] = i < n_prompt ? prompt[i] : completion[i - n_prompt];
    struct llama_rig r;
    llama_rig_open(&r, model_rel, kv, true, n);
    llama_rig_use(&r, backend, n_threads);
    const uint32_t n_vocab = r.model->hp.n_vocab;
    const float *logits = llama_rig_step(&r, tokens, n, true);
    struct llama_agreement a = {.min_rho = 1};
    double *want = calloc(n_vocab, sizeof(*want));
    cr_assert(want);
    json_t *pl = json_object_get(j, "prompt_logits");
    for (uint32_t t = 0; t < n_prompt; t++) {
        for (uint32_t v = 0; v < n_vocab; v++)
            want[v] = json_real_value(json_array_get(json_array_get(pl, t), v));
        double rho = llama_pearson(logits + (size_t)t * n_vocab, want, n_vocab);
        a.min_rho = rho < a.min_rho ? rho : a.min_rho;
    }
    json_t *steps = json_object_get(j, "steps");
    a.n_steps = (uint32_t)json_array_size(steps);
    for (uint32_t i = 0; i < a.n_steps; i++) {
        json_t *st = json_array_get(steps, i);
        int32_t token = (int32_t)json_integer_value(json_object_get(st, "token"));
        double margin = json_real_value(json_object_get(st, "margin_to_2nd"));
        int32_t got = llama_argmax(logits + (size_t)(n_prompt - 1 + i) * n_vocab, n_vocab);
        a.agree += got == token;
        a.bad_margin += got != token && margin >= 0.5;
    }
    free(want);
    free(tokens);
    free(prompt);
    free(completion);
    llama_rig_close(&r);
    return a;
}
