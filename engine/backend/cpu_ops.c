/*
 * engine/backend/cpu_ops.c - the cpu backend's op kernels: one function per
 * op (or family of ops) that does chunk c of nc of the node being run, on the
 * kernels of engine/cpu. A file of its own so that adding an op is a kernel
 * here and a row of the table at the end, apart from how steps are compiled
 * and run (engine/backend/cpu.c); what the two share is engine/backend/internal.h.
 */
#include "engine/backend.h"
#include "engine/backend/internal.h"
#include "engine/cpu/cpu.h"
#include "engine/quant/blocks.h"

#include <math.h>
#include <string.h>

/* ---- helpers -------------------------------------------------------------------- */

static bool is_weight(const struct cpu_run *r, uint32_t id)
{
    return r->g->nodes[id].op == GS_OP_WEIGHT;
}

/* Row `row` of node id as F32: broadcast weights are F32 (checked at compile). */
static const float *row_of(const struct cpu_run *r, uint32_t id, int64_t row)
{
    const struct gs_node *n = &r->g->nodes[id];
    if (n->op == GS_OP_WEIGHT)
        return (const float *)n->data + row * n->ne[0];
    return cpu_value(r, id) + row * n->ne[0];
}

static float *thread_buf(const struct cpu_run *r, int ith)
{
    return r->ctx->thread_buf + (int64_t)ith * r->cp->thread_floats;
}

/* ---- ops ---------------------------------------------------------------------------- */

static void k_embed(struct cpu_run *r, int chunk, int n_chunks, int thread)
{
    const struct gs_node *n = r->n, *table = &r->g->nodes[n->src[0]];
    uint64_t row_bytes = 0;
    gs_type_row_bytes(table->type, table->ne[0], &row_bytes);
    int64_t t0, t1;
    gs_cpu_split(r->io->n_tokens, 1, chunk, n_chunks, &t0, &t1);
    for (int64_t t = t0; t < t1; t++)
        gs_dequantize(table->type, (const char *)table->data + r->io->tokens[t] * row_bytes,
                      r->out + t * n->ne[0], n->ne[0]);
}

/* RMS_NORM, RMS_NORM_MUL, and RMS_NORM_QUANT, whose normalized row goes
 * through a per-thread float row into the matmul input type. */
static void k_rms_norm(struct cpu_run *r, int chunk, int n_chunks, int thread)
{
    const struct gs_node *n = r->n;
    const float *x = cpu_value(r, n->src[0]);
    const bool quant = n->op == GS_OP_RMS_NORM_QUANT;
    const gs_from_f32_fn quantize = quant ? gs_cpu_quantizer(n->type) : NULL;
    uint64_t row_bytes = 0;
    gs_type_row_bytes(n->type, n->ne[0], &row_bytes);
    int64_t ne0 = n->ne[0], i0, i1;
    gs_cpu_split(gs_step_rows(n, r->io), 1, chunk, n_chunks, &i0, &i1);
    for (int64_t i = i0; i < i1; i++) {
        const float *xr = x + i * ne0;
        double sum = 0;
        for (int64_t j = 0; j < ne0; j++)
            sum += (double)xr[j] * xr[j];
        const float scale = 1.0f / sqrtf((float)(sum / ne0) + n->p.eps);
        float *o = quant ? thread_buf(r, thread) : r->out + i * ne0;
        if (n->op != GS_OP_RMS_NORM) {
            const float *w = row_of(r, n->src[1], is_weight(r, n->src[1]) ? 0 : i);
            for (int64_t j = 0; j < ne0; j++)
                o[j] = xr[j] * scale * w[j];
        } else {
            for (int64_t j = 0; j < ne0; j++)
                o[j] = xr[j] * scale;
        }
        if (quant)
            quantize(o, (char *)r->out + i * row_bytes, ne0);
    }
}

/* ---- Gemma 3n's row ops: rows shared out, each row from the same rows of its sources ---- */

static void rows_of_chunk(const struct cpu_run *r, int chunk, int n_chunks, int64_t *i0,
                          int64_t *i1)
{
    gs_cpu_split(gs_step_rows(r->n, r->io), 1, chunk, n_chunks, i0, i1);
}

static void k_cols(struct cpu_run *r, int chunk, int n_chunks, int thread)
{
    (void)thread;
    const struct gs_node *n = r->n;
    const int64_t w = r->g->nodes[n->src[0]].ne[0], ne0 = n->ne[0];
    const float *x = cpu_value(r, n->src[0]) + n->p.cols.off;
    int64_t i0, i1;
    rows_of_chunk(r, chunk, n_chunks, &i0, &i1);
    for (int64_t i = i0; i < i1; i++)
        memcpy(r->out + i * ne0, x + i * w, (size_t)ne0 * sizeof(float));
}

static void k_concat(struct cpu_run *r, int chunk, int n_chunks, int thread)
{
    (void)thread;
    const struct gs_node *n = r->n;
    const int64_t ne0 = n->ne[0];
    int64_t i0, i1;
    rows_of_chunk(r, chunk, n_chunks, &i0, &i1);
    for (int64_t i = i0; i < i1; i++) {
        int64_t at = 0;
        for (uint32_t k = 0; k < n->n_src; k++) {
            const int64_t w = r->g->nodes[n->src[k]].ne[0];
            memcpy(r->out + i * ne0 + at, cpu_value(r, n->src[k]) + i * w,
                   (size_t)w * sizeof(float));
            at += w;
        }
    }
}

/* out_j = s_j + sum_k c[j m + k] s_k, stream by stream: each pass is an axpy the
 * compiler vectorises. */
static void k_altup_predict(struct cpu_run *r, int chunk, int n_chunks, int thread)
{
    (void)thread;
    const struct gs_node *n = r->n;
    const int64_t ne0 = n->ne[0], m = n->p.altup.n_streams, w = ne0 / m;
    const float *s = cpu_value(r, n->src[0]), *c = cpu_value(r, n->src[1]);
    int64_t i0, i1;
    rows_of_chunk(r, chunk, n_chunks, &i0, &i1);
    for (int64_t i = i0; i < i1; i++)
        for (int64_t j = 0; j < m; j++) {
            float *o = r->out + i * ne0 + j * w;
            memcpy(o, s + i * ne0 + j * w, (size_t)w * sizeof(float));
            for (int64_t k = 0; k < m; k++) {
                const float ck = c[i * m * m + j * m + k];
                const float *sk = s + i * ne0 + k * w;
                for (int64_t e = 0; e < w; e++)
                    o[e] += ck * sk[e];
            }
        }
}

static void k_altup_correct(struct cpu_run *r, int chunk, int n_chunks, int thread)
{
    (void)thread;
    const struct gs_node *n = r->n;
    const int64_t ne0 = n->ne[0], m = n->p.altup.n_streams, w = ne0 / m;
    const int64_t act = n->p.altup.active;
    const float *p = cpu_value(r, n->src[0]), *a = cpu_value(r, n->src[1]),
                *c = cpu_value(r, n->src[2]);
    int64_t i0, i1;
    rows_of_chunk(r, chunk, n_chunks, &i0, &i1);
    for (int64_t i = i0; i < i1; i++) {
        const float *pa = p + i * ne0 + act * w, *ai = a + i * w;
        for (int64_t j = 0; j < m; j++) {
            const float f = c[i * m + j] + 1.0f;
            const float *pj = p + i * ne0 + j * w;
            float *o = r->out + i * ne0 + j * w;
            for (int64_t e = 0; e < w; e++)
                o[e] = pj[e] + f * (ai[e] - pa[e]);
        }
    }
}

static void k_mag_match(struct cpu_run *r, int chunk, int n_chunks, int thread)
{
    (void)thread;
    const struct gs_node *n = r->n;
    const int64_t ne0 = n->ne[0], wr = r->g->nodes[n->src[1]].ne[0];
    const float *x = cpu_value(r, n->src[0]), *ref = cpu_value(r, n->src[1]);
    int64_t i0, i1;
    rows_of_chunk(r, chunk, n_chunks, &i0, &i1);
    for (int64_t i = i0; i < i1; i++) {
        const float *xr = x + i * ne0, *rr = ref + i * wr;
        float sx = 0, sr = 0;
        for (int64_t j = 0; j < ne0; j++)
            sx += xr[j] * xr[j];
        for (int64_t j = 0; j < wr; j++)
            sr += rr[j] * rr[j];
        const float f = sqrtf(sr) / sqrtf(sx);
        for (int64_t j = 0; j < ne0; j++)
            r->out[i * ne0 + j] = xr[j] * f;
    }
}

static void k_gauss_topk(struct cpu_run *r, int chunk, int n_chunks, int thread)
{
    (void)thread;
    const struct gs_node *n = r->n;
    const int64_t ne0 = n->ne[0];
    const float *x = cpu_value(r, n->src[0]);
    int64_t i0, i1;
    rows_of_chunk(r, chunk, n_chunks, &i0, &i1);
    for (int64_t i = i0; i < i1; i++) {
        const float *xr = x + i * ne0;
        float *o = r->out + i * ne0;
        float sum = 0, sq = 0;
        for (int64_t j = 0; j < ne0; j++)
            sum += xr[j];
        const float mean = sum / (float)ne0;
        for (int64_t j = 0; j < ne0; j++)
            sq += (xr[j] - mean) * (xr[j] - mean);
        const float cutoff = mean + n->p.topk_k * sqrtf(sq / (float)(ne0 - 1));
        for (int64_t j = 0; j < ne0; j++)
            o[j] = xr[j] > cutoff ? xr[j] - cutoff : 0.0f;
    }
}

/* RMS_NORM_HEADS: rows shared out; each head's slice over its own rms, times w. */
static void k_rms_norm_heads(struct cpu_run *r, int chunk, int n_chunks, int thread)
{
    const struct gs_node *n = r->n;
    const float *x = cpu_value(r, n->src[0]);
    const float *w = row_of(r, n->src[1], 0);
    const int64_t ne0 = n->ne[0], hd = n->p.norm_heads.head_dim;
    int64_t i0, i1;
    gs_cpu_split(gs_step_rows(n, r->io), 1, chunk, n_chunks, &i0, &i1);
    for (int64_t i = i0; i < i1; i++)
        for (int64_t h0 = 0; h0 < ne0; h0 += hd) {
            const float *xh = x + i * ne0 + h0;
            float *o = r->out + i * ne0 + h0;
            double sum = 0;
            for (int64_t j = 0; j < hd; j++)
                sum += (double)xh[j] * xh[j];
            const float scale = 1.0f / sqrtf((float)(sum / hd) + n->p.norm_heads.eps);
            for (int64_t j = 0; j < hd; j++)
                o[j] = xh[j] * scale * w[j];
        }
}

/* Elements [j0, j1) of row i of a row-local op. */
static void elementwise_span(const struct cpu_run *r, int64_t i, int64_t j0, int64_t j1)
{
    const struct gs_node *n = r->n;
    const int64_t ne0 = n->ne[0];
    const float *a = cpu_value(r, n->src[0]) + i * ne0;
    const float *b = n->n_src > 1 ? row_of(r, n->src[1], is_weight(r, n->src[1]) ? 0 : i) : NULL;
    float *o = r->out + i * ne0;
    switch (n->op) {
    case GS_OP_MUL:
        for (int64_t j = j0; j < j1; j++)
            o[j] = a[j] * b[j];
        break;
    case GS_OP_ADD:
        for (int64_t j = j0; j < j1; j++)
            o[j] = a[j] + b[j];
        break;
    case GS_OP_SWIGLU:
        gs_cpu_glu(n->p.glu_act == GS_GLU_GELU, o + j0, a + j0, b + j0, j1 - j0);
        break;
    case GS_OP_SILU:
        gs_cpu_swiglu(o + j0, a + j0, NULL, j1 - j0);
        break;
    case GS_OP_GELU:
        gs_cpu_geglu(o + j0, a + j0, NULL, j1 - j0);
        break;
    case GS_OP_SCALE:
        for (int64_t j = j0; j < j1; j++)
            o[j] = a[j] * n->p.scale;
        break;
    case GS_OP_SOFTCAP: {
        /* As llama.cpp computes it: scale by 1/c, tanh, scale by c. */
        const float c = n->p.softcap, inv = 1.0f / c;
        for (int64_t j = j0; j < j1; j++)
            o[j] = c * tanhf(a[j] * inv);
        break;
    }
    /* Every other op is named so that a new one fails -Wswitch here: none of these
     * is routed to this kernel (SWIGLU_QUANT has its own), and NaN rather than some
     * other op's result is what a routing mistake must produce. */
    case GS_OP_WEIGHT:
    case GS_OP_EMBED:
    case GS_OP_RMS_NORM:
    case GS_OP_RMS_NORM_HEADS:
    case GS_OP_MATMUL:
    case GS_OP_ROPE:
    case GS_OP_KV_STORE:
    case GS_OP_ATTN:
    case GS_OP_SOFTMAX:
    case GS_OP_RMS_NORM_MUL:
    case GS_OP_MATMUL_ADD:
    case GS_OP_OUTPUTS:
    case GS_OP_LOGITS:
    case GS_OP_HIDDEN:
    case GS_OP_RMS_NORM_QUANT:
    case GS_OP_SWIGLU_QUANT:
    case GS_OP_MATMUL_SWIGLU:
    case GS_OP_COLS:
    case GS_OP_CONCAT:
    case GS_OP_ALTUP_PREDICT:
    case GS_OP_ALTUP_CORRECT:
    case GS_OP_MAG_MATCH:
    case GS_OP_GAUSS_TOPK:
    case GS_OP_ATTN_CAUSAL:
    case GS_OP_CROSS_ENTROPY:
    case GS_OP_CROSS_ENTROPY_BACK:
    case GS_OP_EMBED_BACK:
    case GS_OP_MATMUL_BACK_X:
    case GS_OP_MATMUL_BACK_W:
    case GS_OP_RMS_NORM_BACK:
    case GS_OP_ROPE_BACK:
    case GS_OP_SWIGLU_BACK_GATE:
    case GS_OP_SUM_ROWS_MUL:
    case GS_OP_ATTN_CAUSAL_BACK_Q:
    case GS_OP_ATTN_CAUSAL_BACK_K:
    case GS_OP_ATTN_CAUSAL_BACK_V:
    case GS_OP_OUT:
    case GS_OP_COUNT:
        (void)GS_NEVER(true);
        for (int64_t j = j0; j < j1; j++)
            o[j] = NAN;
        break;
    }
}

/* Rows are shared out when there are enough; a single row is split by columns. */
static void k_elementwise(struct cpu_run *r, int chunk, int n_chunks, int thread)
{
    const int64_t rows = gs_step_rows(r->n, r->io), ne0 = r->n->ne[0];
    int64_t a, b;
    if (rows >= n_chunks) {
        gs_cpu_split(rows, 1, chunk, n_chunks, &a, &b);
        for (int64_t i = a; i < b; i++)
            elementwise_span(r, i, 0, ne0);
    } else {
        gs_cpu_split(ne0, 16, chunk, n_chunks, &a, &b);
        for (int64_t i = 0; i < rows; i++)
            elementwise_span(r, i, a, b);
    }
}

/* SWIGLU_QUANT: silu(a) * b through a per-thread float row into the block
 * type of the matmul that reads it. A single row is split in whole blocks. */
static void k_swiglu_quant(struct cpu_run *r, int chunk, int n_chunks, int thread)
{
    const struct gs_node *n = r->n;
    const struct gs_type_traits *tt = gs_type_traits(n->type);
    const gs_from_f32_fn quantize = gs_cpu_quantizer(n->type);
    const int64_t rows = gs_step_rows(n, r->io), ne0 = n->ne[0];
    uint64_t row_bytes = 0;
    gs_type_row_bytes(n->type, ne0, &row_bytes);
    const float *a = cpu_value(r, n->src[0]);
    float *tmp = thread_buf(r, thread);
    int64_t i0 = 0, i1 = rows, j0 = 0, j1 = ne0;
    if (rows >= n_chunks)
        gs_cpu_split(rows, 1, chunk, n_chunks, &i0, &i1);
    else
        gs_cpu_split(ne0, tt->block_size, chunk, n_chunks, &j0, &j1);
    for (int64_t i = i0; i < i1 && j0 < j1; i++) {
        const float *b = row_of(r, n->src[1], is_weight(r, n->src[1]) ? 0 : i);
        gs_cpu_glu(n->p.glu_act == GS_GLU_GELU, tmp, a + i * ne0 + j0, b + j0, j1 - j0);
        quantize(tmp, (char *)r->out + i * row_bytes + j0 / tt->block_size * tt->block_bytes,
                 j1 - j0);
    }
}

/* Quantizes the matmul input's rows (a share of tokens) into xq. */
void gs_be__cpu_quantize_input(struct cpu_run *r, int chunk, int n_chunks, int thread)
{
    const struct gs_node *n = r->n, *w = &r->g->nodes[n->src[1]];
    const gs_from_f32_fn quantize = gs_cpu_quantizer(r->xq_type);
    const float *x = cpu_value(r, n->src[0]);
    const int64_t K = w->ne[0];
    int64_t t0, t1;
    gs_cpu_split(gs_step_rows(n, r->io), 1, chunk, n_chunks, &t0, &t1);
    for (int64_t t = t0; t < t1; t++)
        quantize(x + t * K, r->ctx->xq + t * r->cp->xq_stride, K);
}

/* The rows a matmul n against weight w multiplies, and their stride: for
 * F32 weights the float rows as they are; else quantized into xq (or, for a
 * few tokens, into this thread's rows); an RMS_NORM_QUANT or SWIGLU_QUANT
 * input is already in the weight's partner type. */
static const void *matmul_input(const struct cpu_run *r, const struct gs_node *n,
                                const struct gs_node *w, int thread, size_t *x_stride)
{
    const int64_t K = w->ne[0], T = gs_step_rows(n, r->io);
    const enum gs_type in_type = r->g->nodes[n->src[0]].type;
    const bool plain = w->type == GS_TYPE_F32, prequant = in_type != GS_TYPE_F32;
    if (plain || prequant) {
        uint64_t in_stride = (uint64_t)K * sizeof(float);
        gs_type_row_bytes(in_type, K, &in_stride);
        *x_stride = (size_t)in_stride;
        return cpu_value(r, n->src[0]);
    }
    *x_stride = r->cp->xq_stride;
    if (T > LOCAL_QUANT_TOKENS)
        return r->ctx->xq;
    struct local_quant *lq = &r->ctx->local[thread];
    uint8_t *buf = r->ctx->xq_local + (size_t)thread * LOCAL_QUANT_TOKENS * *x_stride;
    const enum gs_type vt = gs_type_traits(w->type)->vec_dot_type;
    if (lq->step != r->step || lq->node != n->src[0] || lq->type != vt) {
        const gs_from_f32_fn quantize = gs_cpu_quantizer(vt);
        const float *xf = cpu_value(r, n->src[0]);
        for (int64_t t = 0; t < T; t++)
            quantize(xf + t * K, buf + t * *x_stride, K);
        *lq = (struct local_quant){.step = r->step, .node = n->src[0], .type = vt};
    }
    return buf;
}

/* x [K x T] @ W [K x N] -> out [N x T] (+ residual): each thread takes a
 * range of output rows for all tokens. */
void gs_be__cpu_matmul(struct cpu_run *r, int chunk, int n_chunks, int thread)
{
    const struct gs_node *n = r->n, *w = &r->g->nodes[n->src[1]];
    const struct gs_cpu_kernels *kr = gs_cpu_kernels(w->type);
    const int64_t K = w->ne[0], N = w->ne[1], T = gs_step_rows(n, r->io);
    uint64_t w_stride = 0;
    gs_type_row_bytes(w->type, K, &w_stride);
    int64_t r0, r1;
    gs_cpu_split(N, 16, chunk, n_chunks, &r0, &r1); /* whole panels of the widest kernels */
    if (r0 >= r1)
        return;
    if (r->cp->train && w->type == GS_TYPE_F32 && r->g->nodes[n->src[0]].type == GS_TYPE_F32) {
        gs_cpu_train_matmul(cpu_value(r, n->src[0]), w->data, K, N, T, r0, r1, r->out,
                            thread_buf(r, thread));
    } else {
        size_t x_stride;
        const void *x = matmul_input(r, n, w, thread, &x_stride);
        kr->gemm(K, (const char *)w->data + r0 * w_stride, w_stride, (int)(r1 - r0), x, x_stride,
                 (int)T, r->out + r0, (size_t)N);
    }
    if (n->op == GS_OP_MATMUL_ADD) {
        const float *res = cpu_value(r, n->src[2]);
        for (int64_t t = 0; t < T; t++)
            for (int64_t o = r0; o < r1; o++)
                r->out[t * N + o] += res[t * N + o];
    }
}

/* A matmul_swiglu works in slices of output rows by up to 64 tokens: the
 * slice's gate and up products sit in the thread's buffer (2 x 16384 floats,
 * 128 KiB: in L2) until they are joined. A slice is 256 rows for 64 tokens
 * and longer for fewer, so that a short step streams each matrix in long runs
 * as a plain matmul does (with 256-row slices one-token decoding of the 1B
 * shape was ~15% slower). Slices are multiples of 256 rows: of the 16-row
 * panels and of every block an output row can be quantized to (q8_0's 32,
 * q8_K's 256). */
#define FFN_SLICE_TOKENS 64

/* act(x @ Wg) * (x @ Wu) -> out [N x T], F32 or the node's block type:
 * each thread takes a range of output rows, slice by slice. */
static void k_matmul_swiglu(struct cpu_run *r, int chunk, int n_chunks, int thread)
{
    const struct gs_node *n = r->n, *wg = &r->g->nodes[n->src[1]], *wu = &r->g->nodes[n->src[2]];
    const struct gs_cpu_kernels *kr = gs_cpu_kernels(wg->type);
    const struct gs_type_traits *ot = gs_type_traits(n->type);
    const bool quant = n->type != GS_TYPE_F32, gelu_gate = n->p.glu_act == GS_GLU_GELU;
    const gs_from_f32_fn quantize = quant ? gs_cpu_quantizer(n->type) : NULL;
    const int64_t K = wg->ne[0], N = wg->ne[1], T = gs_step_rows(n, r->io);
    uint64_t w_stride = 0, out_row = 0;
    gs_type_row_bytes(wg->type, K, &w_stride);
    gs_type_row_bytes(n->type, N, &out_row);
    int64_t r0, r1;
    gs_cpu_split(N, quant ? GS_MAX(16, ot->block_size) : 16, chunk, n_chunks, &r0, &r1);
    if (r0 >= r1)
        return;
    size_t x_stride;
    const char *x = matmul_input(r, n, wg, thread, &x_stride);
    const int64_t slice_toks = GS_MAX(1, GS_MIN(T, FFN_SLICE_TOKENS));
    const int64_t slice_rows = FFN_SLICE_FLOATS / slice_toks / 256 * 256;
    float *gate = thread_buf(r, thread), *up = gate + FFN_SLICE_FLOATS;
    for (int64_t s0 = r0; s0 < r1; s0 += slice_rows) {
        const int64_t s1 = GS_MIN(r1, s0 + slice_rows);
        const int rows = (int)(s1 - s0);
        for (int64_t t0 = 0; t0 < T; t0 += slice_toks) {
            const int toks = (int)GS_MIN(T - t0, slice_toks);
            const char *xt = x + (size_t)t0 * x_stride;
            kr->gemm(K, (const char *)wg->data + s0 * w_stride, w_stride, rows, xt, x_stride,
                     toks, gate, (size_t)slice_rows);
            kr->gemm(K, (const char *)wu->data + s0 * w_stride, w_stride, rows, xt, x_stride,
                     toks, up, (size_t)slice_rows);
            for (int t = 0; t < toks; t++) {
                float *g = gate + t * slice_rows, *u = up + t * slice_rows;
                if (!quant) {
                    gs_cpu_glu(gelu_gate, r->out + (t0 + t) * N + s0, g, u, rows);
                    continue;
                }
                gs_cpu_glu(gelu_gate, g, g, u, rows);
                quantize(g, (char *)r->out + (t0 + t) * out_row +
                                s0 / ot->block_size * ot->block_bytes, rows);
            }
        }
    }
}

/*
 * The cos and sin of every rotation of the step: every layer rotates Q and K
 * by the same angles (the same positions, base and scale), so they are
 * computed once a step, by the thread that runs the step, before the first
 * rope task; the ropes read them. The same float recurrence as ref:
 * theta_i = pos * scale^i.
 */
/* Whether ropes a and b of one graph turn by the same angles. */
bool gs_be__cpu_same_rotation(const struct gs_node *a, const struct gs_node *b)
{
    const struct gs_rope_params *p = &a->p.rope, *q = &b->p.rope;
    return p->n_rot == q->n_rot && p->freq_base == q->freq_base &&
           p->freq_scale == q->freq_scale && a->n_src == b->n_src &&
           (a->n_src < 2 || a->src[1] == b->src[1]);
}

void gs_be__cpu_rope_prepare(struct cpu_run *r, const struct gs_node *n)
{
    struct cpu_ctx *c = r->ctx;
    if (c->rope_step == r->step && gs_be__cpu_same_rotation(n, c->rope_node))
        return;
    const struct gs_rope_params *p = &n->p.rope;
    const float *ff = n->n_src > 1 ? r->g->nodes[n->src[1]].data : NULL;
    const float theta_scale = powf(p->freq_base, -2.0f / (float)p->n_rot);
    const int half = p->n_rot / 2;
    float *cs = r->ctx->rope_cs;
    for (uint32_t t = 0; t < r->io->n_tokens; t++) {
        float theta = (float)r->io->pos[t];
        for (int i = 0; i < half; i++, cs += 2) {
            const float th = p->freq_scale * theta / (ff ? ff[i] : 1.0f);
            cs[0] = cosf(th);
            cs[1] = sinf(th);
            theta *= theta_scale;
        }
    }
    c->rope_step = r->step;
    c->rope_node = n;
}

static void k_rope(struct cpu_run *r, int chunk, int n_chunks, int thread)
{
    const struct gs_node *n = r->n;
    const struct gs_rope_params *p = &n->p.rope;
    const float *x = cpu_value(r, n->src[0]);
    const int64_t ne0 = n->ne[0];
    const int half = p->n_rot / 2;
    int64_t t0, t1;
    gs_cpu_split(r->io->n_tokens, 1, chunk, n_chunks, &t0, &t1);
    if (t0 >= t1)
        return;
    if (r->out != x) /* the plan may rotate in place (GS_OPF_INPLACE) */
        memcpy(r->out + t0 * ne0, x + t0 * ne0, (size_t)((t1 - t0) * ne0) * sizeof(float));
    for (int64_t t = t0; t < t1; t++) {
        const float *cs = r->ctx->rope_cs + t * half * 2; /* rope_prepare's */
        for (int i = 0; i < half; i++) {
            const float c = cs[2 * i], s = cs[2 * i + 1];
            const int64_t i0 = p->mode == GS_ROPE_NEOX ? i : 2 * i;
            const int64_t i1 = p->mode == GS_ROPE_NEOX ? i + half : 2 * i + 1;
            for (int h = 0; h < p->n_head; h++) {
                const int64_t base = t * ne0 + (int64_t)h * p->head_dim;
                const float x0 = x[base + i0], x1 = x[base + i1];
                r->out[base + i0] = x0 * c - x1 * s;
                r->out[base + i1] = x0 * s + x1 * c;
            }
        }
    }
}

/* Address of row 0 of K (which 0) or V (which 1) of layer l in page `page`;
 * rows are row bytes apart. */
static char *kv_page_rows(const struct gs_kv_view *kv, uint64_t row, uint32_t page, int layer,
                          int which)
{
    return (char *)kv->base + page * kv->page_bytes +
           (uint64_t)(2 * layer + which) * kv->page_tokens * row;
}

/* One token's K or V row into the cache. A q8_0 row takes the q8_0 activation
 * quantizer (what the matmuls round their inputs with, byte-identical to ref's,
 * and the x86 form llama.cpp's CPU backend quantizes q8_0 rows with); a last
 * partial block is quantized from a zero-padded copy. */
static void kv_put(const struct gs_kv_view *kv, void *dst, const float *src)
{
    const int64_t n = kv->kv_dim;
    if (kv->type == GS_TYPE_F16) {
        gs_cpu_f32_to_f16(src, dst, n);
    } else if (kv->type == GS_TYPE_Q8_0) {
        const gs_from_f32_fn quantize = gs_cpu_quantizer(GS_TYPE_Q8_0);
        const int64_t whole = n / GS_QK * GS_QK;
        if (whole)
            quantize(src, dst, whole);
        if (whole < n) {
            float tail[GS_QK] = {0};
            memcpy(tail, src + whole, (size_t)(n - whole) * sizeof(float));
            quantize(tail, (char *)dst + whole / GS_QK * GS_Q8_0_BYTES, GS_QK);
        }
    } else {
        memcpy(dst, src, (size_t)n * sizeof(float));
    }
}

static void k_kv_store(struct cpu_run *r, int chunk, int n_chunks, int thread)
{
    const struct gs_step_io *io = r->io;
    const struct gs_kv_view *kv = io->kv;
    const struct gs_node *n = r->n;
    const int64_t kv_dim = kv->kv_dim;
    const uint64_t row = gs_kv_row_bytes(kv->type, kv->kv_dim);
    const float *k = cpu_value(r, n->src[0]), *v = cpu_value(r, n->src[1]);
    int64_t t0, t1;
    gs_cpu_split(io->n_tokens, 1, chunk, n_chunks, &t0, &t1);
    for (int64_t t = t0; t < t1; t++) {
        const uint32_t pos = (uint32_t)io->pos[t];
        const uint32_t page = io->seqs[io->seq[t]].pages[pos / kv->page_tokens];
        const uint32_t slot = pos % kv->page_tokens;
        kv_put(kv, kv_page_rows(kv, row, page, n->p.attn.layer, 0) + slot * row, k + t * kv_dim);
        kv_put(kv, kv_page_rows(kv, row, page, n->p.attn.layer, 1) + slot * row, v + t * kv_dim);
    }
}

/*
 * Attention, softmax(q K^T * scale) V over positions 0..pos of each query
 * (a window moves the first one up), in units of one tile of a sequence's
 * consecutive tokens (cp->attn_tile of them: a prompt's, or one decoding
 * token) and the query heads that share one kv head (up to ATTN_HEADS of
 * them). A unit walks the tile's K pages once, and for each page runs every
 * one of its heads' blocks of ATTN_BLOCK tokens against it while the page
 * is in cache; then the same for V. With GQA (9 query heads on 3 kv heads
 * in the 135M shape, 32 on 8 in the 1B one) a decoding step read every K and
 * V row once per query head, and a prompt once per four of its rows; a unit
 * reads them once for its up to ATTN_ROWS rows.
 *
 * The arithmetic of each query is what it was with one head per unit: the
 * same kernels over the same page pieces, in the same order. Scores go into
 * per-thread rows; the weights are normalized before V is applied, and with
 * an F16 cache rounded to F16 like the rest of a mixed F16 product: that
 * keeps the logits those of llama.cpp's goldens, which an online softmax
 * (rounding weights against a running maximum) does not. A q8_0 cache is
 * read by its own kernels, F32 queries and weights against the rows' int8
 * quants and scales (no F16 rounding: nothing is F16), the four-query ones
 * converting a row's quants once for the block.
 */
/* Where one (sequence, layer, kv head)'s K and V rows are. */
struct attn_ctx {
    const struct gs_kv_view *kv;
    const struct gs_seq_pages *sp;
    int layer, kvh, hd;
    bool f16, q8;
    uint64_t row; /* bytes of a cache row */
};

/* The head's slice of the K (which 0) or V (which 1) row at position pos; the
 * rows after it in its page follow kv_dim elements apart. A q8_0 cache gives
 * the row's start instead: the slice begins at element kvh * hd, maybe inside
 * a block. */
static const char *kv_rows_at(const struct attn_ctx *a, int which, int32_t pos)
{
    const uint32_t page = a->sp->pages[(uint32_t)pos / a->kv->page_tokens];
    const char *row = kv_page_rows(a->kv, a->row, page, a->layer, which) +
                      (uint64_t)(pos % (int32_t)a->kv->page_tokens) * a->row;
    return a->q8 ? row : row + (uint64_t)a->kvh * a->hd * (a->f16 ? 2 : 4);
}

/* Asks for the head's slice of the K (which 0) or V (1) rows of the page holding
 * pos, when pos <= last. A sequence's pages lie anywhere in the pool and a head
 * reads a slice of each row, a pattern the hardware prefetchers do not follow
 * across pages: decoding at depth waited on the first lines of every page. The
 * page loops ask for the page ATTN_PREFETCH_PAGES past the next one: at depth 4096
 * on the 135M shape one page ahead gained 1.4x, three 1.9x, more no further. */
#define ATTN_PREFETCH_PAGES 3

static void attn_prefetch_page(const struct attn_ctx *a, int which, int32_t pos, int32_t last)
{
    if (pos > last)
        return;
    const int32_t pt = (int32_t)a->kv->page_tokens;
    const int32_t n = GS_MIN(pt - pos % pt, last - pos + 1);
    const size_t slice = a->q8 ? a->row : (size_t)a->hd * (a->f16 ? 2 : 4);
    const char *base = kv_rows_at(a, which, pos);
    for (int32_t t = 0; t < n; t++)
        for (size_t off = 0; off < slice; off += 64)
            __builtin_prefetch(base + (size_t)t * a->row + off, 0, 3);
}

/* Scores sc[0..last] -> softmax weights, in place. */
static void attn_weights(const struct gs_attn_params *p, float *sc, int32_t last, bool f16)
{
    float mx = gs_cpu_scale_max(sc, p->scale, last + 1);
    if (p->softcap > 0) {
        mx = -INFINITY;
        for (int32_t j = 0; j <= last; j++) {
            sc[j] = p->softcap * tanhf(sc[j] / p->softcap);
            mx = sc[j] > mx ? sc[j] : mx;
        }
    }
    const float inv = 1.0f / gs_cpu_exp_sum(sc, mx, last + 1);
    for (int32_t j = 0; j <= last; j++)
        sc[j] *= inv;
    if (f16)
        gs_cpu_round_f16(sc, last + 1);
}

/* acc += sum of w[j] V[j] over positions from..to (one query), a page at a time. */
static void attn_values(const struct attn_ctx *a, float *acc, const float *w, int32_t from,
                        int32_t to)
{
    const int32_t pt = (int32_t)a->kv->page_tokens;
    for (int32_t j = from; j <= to;) {
        const int32_t n = GS_MIN(pt - j % pt, to - j + 1);
        const char *vr = kv_rows_at(a, 1, j);
        if (a->q8)
            gs_cpu_axpys_q8_0(acc, w + j, vr, a->row, n, (int64_t)a->kvh * a->hd, a->hd);
        else if (a->f16)
            gs_cpu_axpys_f16(acc, w + j, (const uint16_t *)vr, a->kv->kv_dim, n, a->hd);
        else
            gs_cpu_axpys_f32(acc, w + j, (const float *)vr, a->kv->kv_dim, n, a->hd);
        j += n;
    }
}

/* One head's block of up to ATTN_BLOCK consecutive tokens in a unit. */
struct attn_block {
    int h, nt;  /* query head; tokens */
    int nq;     /* query rows the kernels take: 1 for a lone token, else ATTN_BLOCK */
    int64_t t0; /* first token */
    const float *q[ATTN_BLOCK];
    float *sc[ATTN_BLOCK], *acc[ATTN_BLOCK];
    /* Query j sees keys first[j]..last[j]. K is read for first_lo..hi; V at
     * once for first_hi..lo (the positions every query sees), when there are
     * such (vlo <= vhi), and for each query's own positions after. */
    int32_t first[ATTN_BLOCK], last[ATTN_BLOCK];
    int32_t first_lo, first_hi, lo, hi, vlo, vhi;
};

/* Block b's queries from the step's q rows, its accumulators zeroed. */
static void attn_block_init(const struct cpu_run *r, const struct attn_ctx *a, struct attn_block *b,
                            float *q, float *acc, float *sc, int64_t cap)
{
    const struct gs_node *n = r->n;
    const struct gs_attn_params *p = &n->p.attn;
    const int hd = a->hd;
    /* A longer short block repeats its last query so that the four-query
     * kernels are fed, and the repeats' results are dropped. */
    b->nq = b->nt == 1 ? 1 : ATTN_BLOCK;
    b->first_lo = b->lo = INT32_MAX;
    b->first_hi = b->hi = 0;
    for (int j = 0; j < b->nq; j++) {
        const int64_t t = b->t0 + GS_MIN(j, b->nt - 1);
        float *qj = q + (int64_t)j * hd;
        memcpy(qj, cpu_value(r, n->src[0]) + t * n->ne[0] + (int64_t)b->h * hd,
               (size_t)hd * sizeof(float));
        if (a->f16)
            gs_cpu_round_f16(qj, hd);
        b->q[j] = qj;
        b->sc[j] = sc + (int64_t)j * cap;
        b->acc[j] = acc + (int64_t)j * hd;
        memset(b->acc[j], 0, (size_t)hd * sizeof(float));
        b->last[j] = r->io->pos[t];
        b->first[j] = p->window > 0 ? GS_MAX(0, b->last[j] - p->window + 1) : 0;
        b->lo = GS_MIN(b->lo, b->last[j]);
        b->hi = GS_MAX(b->hi, b->last[j]);
        b->first_lo = GS_MIN(b->first_lo, b->first[j]);
        b->first_hi = GS_MAX(b->first_hi, b->first[j]);
    }
    /* A lone query takes all its positions in the shared pass; windows that
     * share no position take none there. */
    b->vlo = b->nt == 1 ? b->first[0] : b->first_hi;
    b->vhi = b->nt == 1 ? b->last[0] : b->lo;
}

/* Block b's scores for keys j0 .. j0 + n - 1 of one page. */
static void attn_scores(const struct attn_ctx *a, const struct attn_block *b, int32_t j0, int32_t n)
{
    const char *kr = kv_rows_at(a, 0, j0);
    const int hd = a->hd;
    float *outs[ATTN_BLOCK];
    for (int j = 0; j < b->nq; j++)
        outs[j] = b->sc[j] + j0;
    if (a->q8 && b->nq == 1)
        gs_cpu_dots_q8_0(b->q[0], kr, a->row, n, (int64_t)a->kvh * hd, hd, outs[0]);
    else if (a->q8)
        gs_cpu_dots4_q8_0(b->q, kr, a->row, n, (int64_t)a->kvh * hd, hd, outs);
    else if (b->nq == 1 && a->f16)
        gs_cpu_dots_f16(b->q[0], (const uint16_t *)kr, a->kv->kv_dim, n, hd, outs[0]);
    else if (b->nq == 1)
        gs_cpu_dots_f32(b->q[0], (const float *)kr, a->kv->kv_dim, n, hd, outs[0]);
    else
        gs_cpu_dots4(b->q, kr, a->kv->kv_dim, n, hd, outs, a->f16);
}

/* Block b's value sums over positions j0 .. j0 + n - 1 of one page, all its queries. */
static void attn_values_shared(const struct attn_ctx *a, const struct attn_block *b, int32_t j0,
                               int32_t n)
{
    if (b->nq == 1) {
        attn_values(a, b->acc[0], b->sc[0], j0, j0 + n - 1);
        return;
    }
    const float *ws[ATTN_BLOCK];
    for (int j = 0; j < ATTN_BLOCK; j++)
        ws[j] = b->sc[j] + j0;
    const char *vr = kv_rows_at(a, 1, j0);
    if (a->q8)
        gs_cpu_axpys4_q8_0(b->acc, ws, vr, a->row, n, (int64_t)a->kvh * a->hd, a->hd);
    else
        gs_cpu_axpys4(b->acc, ws, vr, a->kv->kv_dim, n, a->hd, a->f16);
}

/* Tokens t0 .. t0 + nt - 1 (one sequence, nt <= cp->attn_tile), query heads
 * h0 .. h0 + nh - 1 of one kv head. The thread's buffers: buf holds
 * ATTN_ROWS query rows and as many accumulators, sc ATTN_ROWS score rows of
 * `cap`. */
static void attn_unit(const struct cpu_run *r, int64_t t0, int nt, int h0, int nh, float *buf,
                      float *sc, int64_t cap)
{
    const struct gs_node *n = r->n;
    const struct gs_attn_params *p = &n->p.attn;
    const struct gs_step_io *io = r->io;
    const struct attn_ctx a = {.kv = io->kv,
                               .sp = &io->seqs[io->seq[t0]],
                               .layer = p->layer,
                               .kvh = h0 / (p->n_head / p->n_head_kv),
                               .hd = p->head_dim,
                               .f16 = io->kv->type == GS_TYPE_F16,
                               .q8 = io->kv->type == GS_TYPE_Q8_0,
                               .row = gs_kv_row_bytes(io->kv->type, io->kv->kv_dim)};
    const int hd = a.hd;
    const int32_t pt = (int32_t)a.kv->page_tokens;
    /* nh * nt <= ATTN_ROWS (cpu.c sizes the tile), so the blocks fit: each
     * takes ATTN_BLOCK rows of the buffers. */
    struct attn_block blocks[ATTN_ROWS / ATTN_BLOCK];
    int nb = 0;
    int32_t k_lo = INT32_MAX, k_hi = 0, v_lo = INT32_MAX, v_hi = 0;
    for (int h = h0; h < h0 + nh; h++)
        for (int i = 0; i < nt; i += ATTN_BLOCK, nb++) {
            struct attn_block *b = &blocks[nb];
            const int64_t row = (int64_t)nb * ATTN_BLOCK;
            b->h = h;
            b->t0 = t0 + i;
            b->nt = GS_MIN(ATTN_BLOCK, nt - i);
            attn_block_init(r, &a, b, buf + row * hd, buf + (ATTN_ROWS + row) * hd, sc + row * cap,
                            cap);
            k_lo = GS_MIN(k_lo, b->first_lo);
            k_hi = GS_MAX(k_hi, b->hi);
            v_lo = GS_MIN(v_lo, b->vlo);
            v_hi = GS_MAX(v_hi, b->vhi);
        }
    /* A page at a time, every block's part of it: what a block reads of a
     * page is the piece it read when it was a unit of its own. */
    for (int32_t j0 = k_lo; j0 <= k_hi;) {
        const int32_t end = GS_MIN(j0 - j0 % pt + pt - 1, k_hi);
        attn_prefetch_page(&a, 0, end + 1 + ATTN_PREFETCH_PAGES * pt, k_hi);
        for (int i = 0; i < nb; i++) {
            const int32_t from = GS_MAX(j0, blocks[i].first_lo), to = GS_MIN(end, blocks[i].hi);
            if (from <= to)
                attn_scores(&a, &blocks[i], from, to - from + 1);
        }
        j0 = end + 1;
    }
    for (int i = 0; i < nb; i++)
        for (int j = 0; j < blocks[i].nt; j++)
            attn_weights(p, blocks[i].sc[j] + blocks[i].first[j],
                         blocks[i].last[j] - blocks[i].first[j], a.f16);
    for (int32_t j0 = v_lo; j0 <= v_hi;) {
        const int32_t end = GS_MIN(j0 - j0 % pt + pt - 1, v_hi);
        attn_prefetch_page(&a, 1, end + 1 + ATTN_PREFETCH_PAGES * pt, v_hi);
        for (int i = 0; i < nb; i++) {
            const int32_t from = GS_MAX(j0, blocks[i].vlo), to = GS_MIN(end, blocks[i].vhi);
            if (from <= to)
                attn_values_shared(&a, &blocks[i], from, to - from + 1);
        }
        j0 = end + 1;
    }
    for (int i = 0; i < nb; i++) {
        const struct attn_block *b = &blocks[i];
        /* Each query's own positions, after the shared ones (a lone query has none). */
        for (int j = 0; j < b->nt && b->nq > 1; j++) {
            if (b->vlo > b->vhi) {
                attn_values(&a, b->acc[j], b->sc[j], b->first[j], b->last[j]);
            } else {
                attn_values(&a, b->acc[j], b->sc[j], b->first[j], b->vlo - 1);
                attn_values(&a, b->acc[j], b->sc[j], b->vhi + 1, b->last[j]);
            }
        }
        for (int j = 0; j < b->nt; j++)
            memcpy(r->out + (b->t0 + j) * n->ne[0] + (int64_t)b->h * hd, b->acc[j],
                   (size_t)hd * sizeof(float));
    }
}

/* The units: (tile, kv head, part of its query heads), in that order. A
 * part is up to ATTN_HEADS heads; when a step has fewer (tile, kv head) pairs
 * than threads (one sequence decoding over few kv heads), the heads are cut
 * in more parts so that every thread has one. */
static void k_attn(struct cpu_run *r, int chunk, int n_chunks, int thread)
{
    const struct gs_attn_params *p = &r->n->p.attn;
    float *buf = thread_buf(r, thread);
    float *sc = r->ctx->scores + (int64_t)thread * ATTN_ROWS * r->ctx->scores_cap;
    const uint32_t *tiles = r->ctx->attn_tiles;
    const int group = p->n_head / p->n_head_kv;
    const int64_t pairs = (int64_t)r->n_attn_tiles * p->n_head_kv;
    int parts = (group + ATTN_HEADS - 1) / ATTN_HEADS;
    while (parts < group && pairs * parts < r->ctx->n_threads)
        parts++;
    const int part_heads = (group + parts - 1) / parts;
    parts = (group + part_heads - 1) / part_heads;
    int64_t u0, u1;
    gs_cpu_split(pairs * parts, 1, chunk, n_chunks, &u0, &u1);
    for (int64_t u = u0; u < u1; u++) {
        const int64_t pair = u / parts;
        const uint32_t t = (uint32_t)(pair / p->n_head_kv);
        const int h0 = (int)(pair % p->n_head_kv) * group + (int)(u % parts) * part_heads;
        attn_unit(r, tiles[t], (int)(tiles[t + 1] - tiles[t]), h0,
                  GS_MIN(part_heads, (int)(pair % p->n_head_kv + 1) * group - h0), buf, sc,
                  r->ctx->scores_cap);
    }
}

/* Cuts the step's tokens into attention tiles: runs of up to cp->attn_tile
 * consecutive tokens of one sequence. */
void gs_be__cpu_attn_tiles(struct cpu_run *r)
{
    uint32_t *b = r->ctx->attn_tiles, n = 0;
    const uint32_t tile = (uint32_t)r->cp->attn_tile;
    for (uint32_t t = 0; t < r->io->n_tokens; t++)
        if (n == 0 || t - b[n - 1] == tile || r->io->seq[t] != r->io->seq[b[n - 1]])
            b[n++] = t;
    b[n] = r->io->n_tokens;
    r->n_attn_tiles = n;
}

static void k_softmax(struct cpu_run *r, int chunk, int n_chunks, int thread)
{
    const struct gs_node *n = r->n;
    const float *x = cpu_value(r, n->src[0]);
    const struct gs_softmax_params *p = &n->p.softmax;
    const int64_t ne0 = n->ne[0];
    int64_t i0, i1;
    gs_cpu_split(gs_step_rows(n, r->io), 1, chunk, n_chunks, &i0, &i1);
    for (int64_t i = i0; i < i1; i++) {
        const float *xr = x + i * ne0;
        float *o = r->out + i * ne0, mx = -INFINITY;
        for (int64_t j = 0; j < ne0; j++) {
            float s = xr[j] * p->scale;
            if (p->softcap > 0)
                s = p->softcap * tanhf(s / p->softcap);
            o[j] = s;
            mx = fmaxf(mx, s);
        }
        double sum = 0;
        for (int64_t j = 0; j < ne0; j++) {
            o[j] = expf(o[j] - mx);
            sum += o[j];
        }
        const float inv = (float)(1.0 / sum);
        for (int64_t j = 0; j < ne0; j++)
            o[j] *= inv;
    }
}

static void k_outputs(struct cpu_run *r, int chunk, int n_chunks, int thread)
{
    const struct gs_node *n = r->n;
    const float *x = cpu_value(r, n->src[0]);
    int64_t o0, o1;
    gs_cpu_split(r->io->n_outputs, 1, chunk, n_chunks, &o0, &o1);
    for (int64_t o = o0; o < o1; o++)
        memcpy(r->out + o * n->ne[0], x + r->io->out_rows[o] * n->ne[0],
               (size_t)n->ne[0] * sizeof(float));
}

static void k_logits(struct cpu_run *r, int chunk, int n_chunks, int thread)
{
    const struct gs_node *n = r->n;
    if (n->src[0] == r->cp->logits_matmul)
        return; /* written in place by the matmul */
    int64_t o0, o1;
    gs_cpu_split(r->io->n_outputs, 1, chunk, n_chunks, &o0, &o1);
    if (o1 > o0)
        memcpy(r->io->logits + o0 * n->ne[0], cpu_value(r, n->src[0]) + o0 * n->ne[0],
               (size_t)((o1 - o0) * n->ne[0]) * sizeof(float));
}

static void k_hidden(struct cpu_run *r, int chunk, int n_chunks, int thread)
{
    const struct gs_node *n = r->n;
    if (!r->io->hidden)
        return;
    int64_t t0, t1;
    gs_cpu_split(r->io->n_tokens, 1, chunk, n_chunks, &t0, &t1);
    if (t1 > t0)
        memcpy(r->io->hidden + t0 * n->ne[0], cpu_value(r, n->src[0]) + t0 * n->ne[0],
               (size_t)((t1 - t0) * n->ne[0]) * sizeof(float));
}

/* Causal attention node n's slot of kept probabilities (struct cpu_plan),
 * for the forward node and its backward ones alike; NULL when it has none or
 * this step's rows do not fit one. */
static float *train_probs(const struct cpu_run *r, const struct gs_node *n)
{
    const uint32_t *qkv;
    if (n->op == GS_OP_ATTN_CAUSAL)
        qkv = n->src;
    else if (n->op >= GS_OP_ATTN_CAUSAL_BACK_Q && n->op <= GS_OP_ATTN_CAUSAL_BACK_V)
        qkv = n->src + 1;
    else
        return NULL;
    if (!r->probs_rows || (uint64_t)n->p.attn.n_head * r->probs_rows > r->cp->probs_slot)
        return NULL;
    for (uint32_t k = 0; k < r->cp->n_probs; k++)
        if (!memcmp(r->cp->probs_src[k], qkv, sizeof(r->cp->probs_src[k])))
            return r->ctx->probs + k * r->cp->probs_slot;
    return NULL;
}

/* The training ops (train_ops.c): a chunk runs its share of the node's units. */
static void k_train(struct cpu_run *r, int chunk, int n_chunks, int thread)
{
    const struct gs_node *n = r->n;
    struct gs_train_args a = {.n = n, .io = r->io, .out = r->out, .work = thread_buf(r, thread)};
    for (uint32_t j = 0; j < n->n_src; j++) {
        const struct gs_node *s = &r->g->nodes[n->src[j]];
        a.src[j] = s->op == GS_OP_WEIGHT ? s->data : cpu_value(r, n->src[j]);
        a.src_rows[j] = gs_step_rows(s, r->io);
        a.src_ne0[j] = s->ne[0];
    }
    int64_t u0, u1;
    gs_cpu_split(gs_train_units(&a), 1, chunk, n_chunks, &u0, &u1);
    struct gs_cpu_train_probs pr = {.row = r->ctx->probs_row, .rows = r->probs_rows};
    pr.p = train_probs(r, n);
    if (gs_cpu_train_own(n->op))
        gs_cpu_train_run(&a, r->ctx->seq_first, pr.p ? &pr : NULL, u0, u1);
    else
        gs_train_run(&a, u0, u1);
}

/* One row per op; WEIGHT has no kernel and never appears in a plan's order. */
const cpu_kernel_fn gs_be__cpu_kernels[GS_OP_COUNT] = {
    [GS_OP_EMBED] = k_embed,
    [GS_OP_RMS_NORM] = k_rms_norm,
    [GS_OP_RMS_NORM_MUL] = k_rms_norm,
    [GS_OP_RMS_NORM_QUANT] = k_rms_norm,
    [GS_OP_SWIGLU_QUANT] = k_swiglu_quant,
    [GS_OP_MATMUL_SWIGLU] = k_matmul_swiglu,
    [GS_OP_MUL] = k_elementwise,
    [GS_OP_ADD] = k_elementwise,
    [GS_OP_SWIGLU] = k_elementwise,
    [GS_OP_SILU] = k_elementwise,
    [GS_OP_GELU] = k_elementwise,
    [GS_OP_SCALE] = k_elementwise,
    [GS_OP_SOFTCAP] = k_elementwise,
    [GS_OP_MATMUL] = gs_be__cpu_matmul,
    [GS_OP_MATMUL_ADD] = gs_be__cpu_matmul,
    [GS_OP_ROPE] = k_rope,
    [GS_OP_KV_STORE] = k_kv_store,
    [GS_OP_ATTN] = k_attn,
    [GS_OP_SOFTMAX] = k_softmax,
    [GS_OP_OUTPUTS] = k_outputs,
    [GS_OP_LOGITS] = k_logits,
    [GS_OP_HIDDEN] = k_hidden,
    [GS_OP_RMS_NORM_HEADS] = k_rms_norm_heads,
    [GS_OP_COLS] = k_cols,
    [GS_OP_CONCAT] = k_concat,
    [GS_OP_ALTUP_PREDICT] = k_altup_predict,
    [GS_OP_ALTUP_CORRECT] = k_altup_correct,
    [GS_OP_MAG_MATCH] = k_mag_match,
    [GS_OP_GAUSS_TOPK] = k_gauss_topk,
    [GS_OP_ATTN_CAUSAL] = k_train,
    [GS_OP_CROSS_ENTROPY] = k_train,
    [GS_OP_CROSS_ENTROPY_BACK] = k_train,
    [GS_OP_EMBED_BACK] = k_train,
    [GS_OP_MATMUL_BACK_X] = k_train,
    [GS_OP_MATMUL_BACK_W] = k_train,
    [GS_OP_RMS_NORM_BACK] = k_train,
    [GS_OP_ROPE_BACK] = k_train,
    [GS_OP_SWIGLU_BACK_GATE] = k_train,
    [GS_OP_SUM_ROWS_MUL] = k_train,
    [GS_OP_ATTN_CAUSAL_BACK_Q] = k_train,
    [GS_OP_ATTN_CAUSAL_BACK_K] = k_train,
    [GS_OP_ATTN_CAUSAL_BACK_V] = k_train,
    [GS_OP_OUT] = k_train,
};
