/*
 * bench/attn.c - gs-bench-attn: one paged-attention layer on a backend, at a
 * context depth, without the rest of a model around it: the time of a
 * decoding step of S sequences (one token each) and of a P-token prompt step
 * of one sequence, each after DEPTH cached positions per sequence. The cache
 * is filled with random rows directly (untimed; its layout is
 * engine/backend.h's), so a deep context costs nothing to set up. Prints the
 * best wall time and the best process CPU time per step over REPS steps:
 * CPU time is the figure to compare on a machine loaded by other work. Not a
 * test: nothing is asserted.
 *
 * usage: gs-bench-attn HEADS KV_HEADS HEAD_DIM DEPTH STREAMS PROMPT KV_TYPE [THREADS [REPS]]
 *   e.g. gs-bench-attn 9 3 64 4096 16 512 f16 2 5   (the SmolLM2-135M shape)
 */
#include "engine/backend.h"
#include "engine/base.h"
#include "engine/graph.h"
#include "engine/quant.h"
#include "engine/quant/blocks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { V = 64, PAGE = 16 };

static double cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static float rnd(uint32_t *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
}

/* Random K and V rows in every slot of the pool. */
static void fill_cache(const struct gs_kv_view *kv)
{
    uint32_t s = 7;
    const uint64_t row = gs_kv_row_bytes(kv->type, kv->kv_dim);
    for (uint64_t r = 0; r < (uint64_t)kv->n_pages * 2 * kv->page_tokens; r++) {
        uint8_t *p = (uint8_t *)kv->base + r * row;
        if (kv->type == GS_TYPE_F32) {
            for (uint32_t i = 0; i < kv->kv_dim; i++)
                ((float *)p)[i] = rnd(&s);
        } else if (kv->type == GS_TYPE_F16) {
            for (uint32_t i = 0; i < kv->kv_dim; i++)
                ((uint16_t *)p)[i] = gs_f32_to_fp16(rnd(&s));
        } else { /* q8_0 blocks: an f16 scale, 32 int8 quants */
            for (uint64_t b = 0; b < row / GS_Q8_0_BYTES; b++) {
                uint8_t *blk = p + b * GS_Q8_0_BYTES;
                const uint16_t d = gs_f32_to_fp16(1.0f / 127);
                memcpy(blk + GS_Q8_0_D, &d, sizeof(d));
                for (int i = 0; i < GS_QK; i++)
                    ((int8_t *)(blk + GS_Q8_0_QS))[i] = (int8_t)(rnd(&s) * 127);
            }
        }
    }
}

int main(int argc, char **argv)
{
    if (argc < 8 || argc > 10) {
        fprintf(stderr, "usage: gs-bench-attn HEADS KV_HEADS HEAD_DIM DEPTH STREAMS PROMPT "
                        "f16|f32|q8_0 [THREADS [REPS]]\n");
        return 2;
    }
    const int n_head = atoi(argv[1]), n_kv = atoi(argv[2]), hd = atoi(argv[3]);
    const int depth = atoi(argv[4]), streams = atoi(argv[5]), prompt = atoi(argv[6]);
    const char *type_name = argv[7];
    const int threads = argc > 8 ? atoi(argv[8]) : 2, reps = argc > 9 ? atoi(argv[9]) : 5;
    const enum gs_type type = !strcmp(type_name, "f16")    ? GS_TYPE_F16
                              : !strcmp(type_name, "f32")  ? GS_TYPE_F32
                              : !strcmp(type_name, "q8_0") ? GS_TYPE_Q8_0
                                                           : GS_TYPE_COUNT;
    if (n_head < 1 || n_kv < 1 || n_head % n_kv || hd < 1 || hd > 512 || depth < 0 ||
        depth > (1 << 20) || streams < 1 || streams > 256 || prompt < 0 || prompt > 4096 ||
        type == GS_TYPE_COUNT || threads < 1 || threads > 256 || reps < 1 || reps > 1000) {
        fprintf(stderr, "gs-bench-attn: bad arguments (heads a multiple of kv heads, head dim "
                        "1-512, depth 0-1048576, streams 1-256, prompt 0-4096, kv f16, f32 or "
                        "q8_0, threads 1-256, reps 1-1000)\n");
        return 2;
    }
    const int64_t qd = (int64_t)n_head * hd, kd = (int64_t)n_kv * hd;
    float *tq = malloc(sizeof(float) * V * qd), *tk = malloc(sizeof(float) * V * kd);
    uint32_t s = 1;
    if (!tq || !tk)
        return 1;
    for (int64_t i = 0; i < V * qd; i++)
        tq[i] = rnd(&s);
    for (int64_t i = 0; i < V * kd; i++)
        tk[i] = rnd(&s);

    struct gs_err err = {0};
    struct gs_graph *g;
    if (gs_graph_new(&g, &err))
        return 1;
    uint32_t q = gs_graph_embed(g, gs_graph_weight(g, "q", GS_TYPE_F32, qd, V, tq));
    uint32_t k = gs_graph_embed(g, gs_graph_weight(g, "k", GS_TYPE_F32, kd, V, tk));
    struct gs_attn_params ap = {
        .n_head = n_head, .n_head_kv = n_kv, .head_dim = hd, .scale = 0.125f};
    gs_graph_logits(g,
                    gs_graph_outputs(g, gs_graph_attn(g, q, gs_graph_kv_store(g, k, k, &ap), &ap)));
    struct gs_be be;
    struct gs_plan *plan;
    const struct gs_be_cfg cfg = {.n_threads = threads};
    const uint32_t max_step = (uint32_t)(prompt > streams ? prompt : streams);
    const struct gs_shape shape = {.n_tokens = max_step};
    if (gs_graph_status(g, &err) || gs_be_init(&be, "cpu", &cfg, &err) ||
        gs_be_compile(&be, g, &shape, &plan, &err)) {
        fprintf(stderr, "gs-bench-attn: %s\n", err.msg);
        return 1;
    }
    /* Each sequence's pages: depth + prompt positions, sequences side by side. */
    const uint32_t per_seq = (uint32_t)((depth + (prompt > 1 ? prompt : 1) + PAGE - 1) / PAGE);
    struct gs_kv_view kv = {.type = type,
                            .n_pages = per_seq * (uint32_t)streams,
                            .page_tokens = PAGE,
                            .n_layer = 1,
                            .kv_dim = (uint32_t)kd};
    kv.page_bytes = 2 * PAGE * gs_kv_row_bytes(type, kv.kv_dim);
    kv.base = malloc(kv.page_bytes * kv.n_pages);
    uint32_t *pages = malloc(sizeof(uint32_t) * kv.n_pages);
    struct gs_seq_pages *sp = malloc(sizeof(*sp) * (size_t)streams);
    int32_t *tokens = malloc(sizeof(int32_t) * max_step), *pos = malloc(sizeof(int32_t) * max_step);
    uint32_t *seq = malloc(sizeof(uint32_t) * max_step),
             *rows = malloc(sizeof(uint32_t) * max_step);
    float *out = malloc(sizeof(float) * max_step * qd);
    if (!kv.base || !pages || !sp || !tokens || !pos || !seq || !rows || !out)
        return 1;
    fill_cache(&kv);
    for (uint32_t i = 0; i < kv.n_pages; i++)
        pages[i] = i;
    for (int i = 0; i < streams; i++)
        sp[i] = (struct gs_seq_pages){pages + (size_t)i * per_seq, per_seq};
    for (int pass = 0; pass < 2; pass++) {
        const uint32_t n = pass == 0 ? (uint32_t)streams : (uint32_t)prompt;
        if (n == 0)
            continue;
        for (uint32_t i = 0; i < n; i++) {
            tokens[i] = (int32_t)(i * 7 % V);
            seq[i] = pass == 0 ? i : 0;
            pos[i] = depth + (pass == 0 ? 0 : (int32_t)i);
            rows[i] = i;
        }
        struct gs_step_io io = {.n_tokens = n,
                                .tokens = tokens,
                                .pos = pos,
                                .seq = seq,
                                .n_seqs = pass == 0 ? (uint32_t)streams : 1,
                                .seqs = sp,
                                .kv = &kv,
                                .n_outputs = n,
                                .out_rows = rows,
                                .logits = out};
        double best_wall = 1e30, best_cpu = 1e30;
        for (int r = 0; r < reps + 1; r++) { /* the first step warms up */
            const double w0 = gs_now_ms(), c0 = cpu_ms();
            if (gs_be_run(&be, plan, &io, &err)) {
                fprintf(stderr, "gs-bench-attn: %s\n", err.msg);
                return 1;
            }
            const double w = gs_now_ms() - w0, c = cpu_ms() - c0;
            if (r > 0) {
                best_wall = w < best_wall ? w : best_wall;
                best_cpu = c < best_cpu ? c : best_cpu;
            }
        }
        printf("%s heads %d/%d hd %d depth %d kv %s threads %d: %s %u tokens: wall %.3f ms, "
               "cpu %.3f ms (best of %d)\n",
               pass == 0 ? "decode" : "prompt", n_head, n_kv, hd, depth, type_name, threads,
               pass == 0 ? "streams" : "prompt", n, best_wall, best_cpu, reps);
    }
    gs_be_plan_free(&be, plan);
    gs_be_deinit(&be);
    gs_graph_free(g);
    free(kv.base);
    free(pages);
    free(sp);
    free(tokens);
    free(pos);
    free(seq);
    free(rows);
    free(out);
    free(tq);
    free(tk);
    return 0;
}
