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
