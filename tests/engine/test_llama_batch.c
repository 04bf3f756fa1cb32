/*
 * tests/engine/test_llama_batch.c - one step carrying the tokens of several
 * sequences (continuous batching): interleaved prefill rows and mixed decode
 * rows give exactly the logits each sequence gets when run alone, with small
 * pages so that page tables matter.
 */
#include "tests/common/testutil.h"
#include "tests/engine/test_llama_util.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#define N_SEQ    3
#define N_DECODE 4

static const int32_t seq_tokens[N_SEQ][8] = {
    {1, 403, 407, 261, 378},
    {1, 306, 2, 400},
    {1, 333, 296, 322, 273, 353, 279, 264},
};
static const uint32_t seq_len[N_SEQ] = {5, 4, 8};

/* Greedy logits of one sequence alone: prompt, then N_DECODE steps. */
static void run_alone(const char *model, int s, float *out /* [N_DECODE + 1][n_vocab] */)
{
    struct llama_rig r;
    llama_rig_open(&r, model, GS_TYPE_F16, false, 32);
    uint32_t nv = r.model->hp.n_vocab;
    const float *l = llama_rig_step(&r, seq_tokens[s], seq_len[s], false);
    memcpy(out, l, nv * sizeof(float));
    for (int i = 1; i <= N_DECODE; i++) {
        int32_t next = llama_argmax(l, nv);
        l = llama_rig_step(&r, &next, 1, false);
        memcpy(out + (size_t)i * nv, l, nv * sizeof(float));
    }
    llama_rig_close(&r);
}

static void check_batched(const char *model)
{
    struct llama_rig r; /* only its model, backend and plan cache are used */
    llama_rig_open(&r, model, GS_TYPE_F16, true, 32);
    uint32_t nv = r.model->hp.n_vocab;
    float *alone = calloc((size_t)N_SEQ * (N_DECODE + 1) * nv, sizeof(float));
    for (int s = 0; s < N_SEQ; s++)
        run_alone(model, s, alone + (size_t)s * (N_DECODE + 1) * nv);

    /* A pool of 3-token pages shared by all sequences. */
    struct gs_err err = {0};
    struct gs_kv_pool *pool;
    struct gs_kv_pool_cfg pc = {.n_layer = gs_model_kv_layers(r.model),
                                .kv_dim = gs_model_kv_dim(r.model),
                                .type = GS_TYPE_F16,
                                .page_tokens = 3,
                                .n_pages = 64};
    cr_assert_eq(gs_kv_pool_new(&pc, &pool, &err), GS_OK, "%s", err.msg);
    struct gs_kv_layout kl = gs_kv_pool_layout(pool);
    struct gs_kv_view kv = {.base = kl.base,
                            .type = GS_TYPE_F16,
                            .n_pages = kl.n_pages,
                            .page_tokens = kl.page_tokens,
                            .n_layer = kl.n_layer,
                            .kv_dim = kl.kv_dim,
                            .page_bytes = kl.page_bytes};
    struct gs_kv_seq seqs[N_SEQ];
    struct gs_seq_pages sp[N_SEQ];
    uint32_t n_past[N_SEQ] = {0};
    /* Reserve in an interleaved order so that each table holds scattered pages. */
    for (uint32_t n = 3; n <= 16; n += 3)
        for (int s = 0; s < N_SEQ; s++) {
            if (n == 3)
                gs_kv_seq_init(&seqs[s]);
            cr_assert_eq(gs_kv_seq_reserve(pool, &seqs[s], n, &err), GS_OK, "%s", err.msg);
        }
    for (int s = 0; s < N_SEQ; s++)
        sp[s] = (struct gs_seq_pages){seqs[s].pages, seqs[s].n_pages};

    /* Prefill: rows interleaved across sequences (round robin). */
    int32_t tokens[32], pos[32];
    uint32_t seq_of[32], out_rows[N_SEQ], n = 0, last_row[N_SEQ];
    for (uint32_t i = 0; i < 8; i++)
        for (int s = 0; s < N_SEQ; s++) {
            if (i >= seq_len[s])
                continue;
            tokens[n] = seq_tokens[s][i];
            pos[n] = (int32_t)i;
            seq_of[n] = (uint32_t)s;
            last_row[s] = n++;
        }
    /* out_rows must be increasing: sort the sequences' last rows. */
    int order[N_SEQ] = {0, 1, 2};
    for (int a = 0; a < N_SEQ; a++)
        for (int b = a + 1; b < N_SEQ; b++)
            if (last_row[order[b]] < last_row[order[a]]) {
                int t = order[a];
                order[a] = order[b];
                order[b] = t;
            }
    for (int k = 0; k < N_SEQ; k++)
        out_rows[k] = last_row[order[k]];
    float *logits = calloc((size_t)N_SEQ * nv, sizeof(float));
    struct gs_step_io io = {.n_tokens = n,
                            .tokens = tokens,
                            .pos = pos,
                            .seq = seq_of,
                            .n_seqs = N_SEQ,
                            .seqs = sp,
                            .kv = &kv,
                            .n_outputs = N_SEQ,
                            .out_rows = out_rows,
                            .logits = logits};
    cr_assert_eq(gs_runner_step(r.run, &io, &err), GS_OK, "%s", err.msg);
    for (int s = 0; s < N_SEQ; s++)
        n_past[s] = seq_len[s];

    for (int step = 0; step <= N_DECODE; step++) {
        int32_t next[N_SEQ];
        for (int k = 0; k < N_SEQ; k++) {
            int s = order[k];
            const float *want = alone + ((size_t)s * (N_DECODE + 1) + step) * nv;
            for (uint32_t v = 0; v < nv; v++)
                cr_assert_float_eq(logits[(size_t)k * nv + v], want[v], 1e-4f,
                                   "%s: step %d, sequence %d, logit %u: %g batched, %g alone",
                                   model, step, s, v, logits[(size_t)k * nv + v], want[v]);
            next[s] = llama_argmax(want, nv);
        }
        if (step == N_DECODE)
            break;
        /* One decode row per sequence, in reverse order this time. */
        for (int k = 0; k < N_SEQ; k++) {
            int s = N_SEQ - 1 - k;
            tokens[k] = next[s];
            pos[k] = (int32_t)n_past[s]++;
            seq_of[k] = (uint32_t)s;
            out_rows[k] = (uint32_t)k;
            order[k] = s;
        }
        io.n_tokens = N_SEQ;
        cr_assert_eq(gs_runner_step(r.run, &io, &err), GS_OK, "%s", err.msg);
    }
    for (int s = 0; s < N_SEQ; s++)
        gs_kv_seq_release(pool, &seqs[s]);
    gs_kv_pool_free(pool);
    free(logits);
    free(alone);
    llama_rig_close(&r);
}

Test(llama_batch, sequences_in_one_step_match_running_alone)
{
    check_batched("models/stories260K.gguf");
    check_batched("models/tiny-k-Q4_K.gguf");
}

/* Gemma 3n: three sequences in one step through the AltUp streams, the windows
 * (8 positions: the longest sequence passes them) and the caches that the last five
 * layers share. */
Test(llama_batch, gemma3n_sequences_in_one_step_match_running_alone)
{
    check_batched("models/arch/gemma3n-tiny-F32.gguf");
}
