/*
 * engine/backend/ref.c - the reference backend: plain scalar C over F32.
 *
 * Weights are dequantized one row at a time as a kernel reads them, never as
 * a whole model. Reductions accumulate in double. Nothing here is clever: this
 * backend is the oracle that validation and every faster backend compare with.
 *
 * One deliberate imitation: with an F16 KV cache the attention dot products
 * take their other operand (q, then the softmax weights) rounded to F16 too,
 * which is what a mixed F16 product computes; it keeps greedy decoding
 * identical to llama.cpp's F16-cache goldens.
 */
#include "engine/backend.h"
#include "engine/backend/internal.h"
#include "engine/compile.h"
#include "engine/quant/blocks.h"

#include <math.h>
#include <string.h>

struct ref_plan {
    float *scratch; /* [scratch_bytes / 4] activations */
    float *row_a;   /* [max weight row] dequantized weight row */
    float *row_b;   /* [max activation row] per-token temporary */
    float *xq;      /* [bucket][max weight row] activations rounded for a matmul */
    float *ffn;     /* [2][bucket][n_ff] gate and up products of a matmul_swiglu */
    float *train;   /* the training ops' scratch (engine/backend/internal.h) */
};

/* The state of one run: plan, step and resolved row counts. */
struct run {
    const struct gs_plan *plan;
    const struct gs_graph *g;
    const struct gs_step_io *io;
    struct ref_plan *rp;
};

static enum gs_status ref_open(struct gs_be *be, const struct gs_be_cfg *cfg, struct gs_err *err)
{
    be->ctx = NULL;
    return GS_OK;
}

static void ref_close(struct gs_be *be)
{
}

/* A kernel computes node n into out (NULL for nodes without a value). */
typedef void (*kernel_fn)(const struct run *r, const struct gs_node *n, float *out);

static const kernel_fn kernels[GS_OP_COUNT];

static bool ref_supports(const struct gs_be *be, const struct gs_node *n)
{
    if ((unsigned)n->op >= GS_OP_COUNT || (n->op != GS_OP_WEIGHT && !kernels[n->op]))
        return false;
    if (n->op == GS_OP_RMS_NORM_QUANT || n->op == GS_OP_SWIGLU_QUANT ||
        (n->op == GS_OP_MATMUL_SWIGLU && n->type != GS_TYPE_F32)) { /* quantized rows */
        const struct gs_type_traits *tt = gs_type_traits(n->type);
        return tt && gs_activation_quantizer(n->type) && tt->to_f32;
    }
    if (n->op != GS_OP_WEIGHT)
        return n->type == GS_TYPE_F32;
    const struct gs_type_traits *tt = gs_type_traits(n->type);
    return n->type == GS_TYPE_F32 || (tt && tt->supported && tt->to_f32);
}

static void ref_plan_free(struct gs_be *be, struct gs_plan *p)
{
    struct ref_plan *rp = p->be_data;
    if (rp) {
        gs_free(rp->scratch);
        gs_free(rp->row_a);
        gs_free(rp->row_b);
        gs_free(rp->xq);
        gs_free(rp->ffn);
        gs_free(rp->train);
        gs_free(rp);
    }
    gs_plan_free(p);
}

static enum gs_status ref_compile(struct gs_be *be, const struct gs_graph *g,
                                  const struct gs_shape *s, struct gs_plan **out,
                                  struct gs_err *err)
{
    *out = NULL;
    enum gs_status st = gs_be_check_graph(be, g, err);
    if (st)
        return st;
    struct gs_plan *p;
    st = gs_plan_layout(g, s, &p, err);
    if (st)
        return st;
    int64_t max_w = 1, max_a = 1, max_ff = 1;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].op == GS_OP_WEIGHT)
            max_w = GS_MAX(max_w, g->nodes[i].ne[0]);
        else
            max_a = GS_MAX(max_a, g->nodes[i].ne[0]);
        if (g->nodes[i].op == GS_OP_MATMUL_SWIGLU)
            max_ff = GS_MAX(max_ff, g->nodes[i].ne[0]);
    }
    struct ref_plan *rp = gs_calloc(1, sizeof(*rp));
    p->be_data = rp;
    if (!rp)
        goto out_nomem;
    rp->scratch = gs_malloc(p->scratch_bytes ? p->scratch_bytes : 1);
    rp->row_a = gs_alloc_array((size_t)max_w, sizeof(float));
    rp->row_b = gs_alloc_array((size_t)max_a, sizeof(float));
    rp->xq = gs_alloc_array((size_t)max_w * s->n_tokens, sizeof(float));
    rp->ffn = gs_alloc_array((size_t)max_ff * 2 * s->n_tokens, sizeof(float));
    rp->train = gs_alloc_array((size_t)GS_TRAIN_WORK_FLOATS(s->n_tokens), sizeof(float));
    if (!rp->scratch || !rp->row_a || !rp->row_b || !rp->xq || !rp->ffn || !rp->train)
        goto out_nomem;
    *out = p;
    return GS_OK;
out_nomem:;
    unsigned long long bytes = p->scratch_bytes;
    ref_plan_free(be, p);
    return gs_err_set(err, GS_NOMEM, "ref: out of memory reserving %llu scratch bytes", bytes);
}

/* ---- helpers -------------------------------------------------------------- */

static float *value(const struct run *r, uint32_t id)
{
    return (float *)((char *)r->rp->scratch + r->plan->offset[id]);
}

/* Row r of a weight as F32: the stored row itself, or dequantized into buf. */
static const float *weight_row(const struct gs_node *w, int64_t row, float *buf)
{
    uint64_t row_bytes = 0;
    gs_type_row_bytes(w->type, w->ne[0], &row_bytes);
    const char *src = (const char *)w->data + (uint64_t)row * row_bytes;
    if (w->type == GS_TYPE_F32)
        return (const float *)src;
    gs_dequantize(w->type, src, buf, w->ne[0]);
    return buf;
}

/* Row `row` of any node (weight or activation) as F32. */
static const float *row_of(const struct run *r, uint32_t id, int64_t row, float *buf)
{
    const struct gs_node *n = &r->g->nodes[id];
    if (n->op == GS_OP_WEIGHT)
        return weight_row(n, row, buf);
    return value(r, id) + row * n->ne[0];
}

static float round_f16(float x)
{
    return gs_fp16_to_f32(gs_f32_to_fp16(x));
}

/* ---- kernels -------------------------------------------------------------- */

static void k_embed(const struct run *r, const struct gs_node *n, float *out)
{
    const struct gs_node *table = &r->g->nodes[n->src[0]];
    for (uint32_t t = 0; t < r->io->n_tokens; t++) {
        const float *row = weight_row(table, r->io->tokens[t], r->rp->row_a);
        memcpy(out + t * n->ne[0], row, (size_t)n->ne[0] * sizeof(float));
    }
}

/* RMS_NORM, RMS_NORM_MUL when the node has a weight source, and
 * RMS_NORM_QUANT, whose row goes through row_b into its block type as a dot
 * product's activations are rounded (gs_activation_quantizer). */
static void k_rms_norm(const struct run *r, const struct gs_node *n, float *out)
{
    const float *x = value(r, n->src[0]);
    const bool quant = n->op == GS_OP_RMS_NORM_QUANT;
    int64_t ne0 = n->ne[0], rows = gs_step_rows(n, r->io);
    uint64_t row_bytes = 0;
    gs_type_row_bytes(n->type, ne0, &row_bytes);
    for (int64_t i = 0; i < rows; i++) {
        double sum = 0;
        for (int64_t j = 0; j < ne0; j++)
            sum += (double)x[i * ne0 + j] * x[i * ne0 + j];
        float scale = 1.0f / sqrtf((float)(sum / ne0) + n->p.eps);
        const float *w = NULL;
        if (n->op != GS_OP_RMS_NORM) {
            bool bcast = r->g->nodes[n->src[1]].rows == GS_ROWS_FIXED;
            w = row_of(r, n->src[1], bcast ? 0 : i, r->rp->row_a);
        }
        float *o = quant ? r->rp->row_b : out + i * ne0;
        for (int64_t j = 0; j < ne0; j++)
            o[j] = x[i * ne0 + j] * scale * (w ? w[j] : 1.0f);
        if (quant)
            gs_activation_quantizer(n->type)(o, (char *)out + i * row_bytes, ne0);
    }
}

/* RMS_NORM_HEADS: each head's slice of a row over its own rms, times w. */
static void k_rms_norm_heads(const struct run *r, const struct gs_node *n, float *out)
{
    const float *x = value(r, n->src[0]);
    const float *w = row_of(r, n->src[1], 0, r->rp->row_a);
    const int64_t ne0 = n->ne[0], hd = n->p.norm_heads.head_dim, rows = gs_step_rows(n, r->io);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t h0 = 0; h0 < ne0; h0 += hd) {
            const float *xh = x + i * ne0 + h0;
            double sum = 0;
            for (int64_t j = 0; j < hd; j++)
                sum += (double)xh[j] * xh[j];
            float scale = 1.0f / sqrtf((float)(sum / hd) + n->p.norm_heads.eps);
            for (int64_t j = 0; j < hd; j++)
                out[i * ne0 + h0 + j] = xh[j] * scale * w[j];
        }
}

/* ---- Gemma 3n's row ops: each output row from the same rows of its sources ---- */

static void k_cols(const struct run *r, const struct gs_node *n, float *out)
{
    const int64_t w = r->g->nodes[n->src[0]].ne[0], ne0 = n->ne[0], rows = gs_step_rows(n, r->io);
    const float *x = value(r, n->src[0]) + n->p.cols.off;
    for (int64_t i = 0; i < rows; i++)
        memcpy(out + i * ne0, x + i * w, (size_t)ne0 * sizeof(float));
}

static void k_concat(const struct run *r, const struct gs_node *n, float *out)
{
    const int64_t ne0 = n->ne[0], rows = gs_step_rows(n, r->io);
    for (int64_t i = 0; i < rows; i++) {
        int64_t at = 0;
        for (uint32_t k = 0; k < n->n_src; k++) {
            const int64_t w = r->g->nodes[n->src[k]].ne[0];
            memcpy(out + i * ne0 + at, value(r, n->src[k]) + i * w, (size_t)w * sizeof(float));
            at += w;
        }
    }
}

static void k_altup_predict(const struct run *r, const struct gs_node *n, float *out)
{
    const int64_t ne0 = n->ne[0], rows = gs_step_rows(n, r->io), m = n->p.altup.n_streams;
    const int64_t w = ne0 / m;
    const float *s = value(r, n->src[0]), *c = value(r, n->src[1]);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < m; j++)
            for (int64_t e = 0; e < w; e++) {
                double acc = s[i * ne0 + j * w + e];
                for (int64_t k = 0; k < m; k++)
                    acc += (double)c[i * m * m + j * m + k] * s[i * ne0 + k * w + e];
                out[i * ne0 + j * w + e] = (float)acc;
            }
}

static void k_altup_correct(const struct run *r, const struct gs_node *n, float *out)
{
    const int64_t ne0 = n->ne[0], rows = gs_step_rows(n, r->io), m = n->p.altup.n_streams;
    const int64_t w = ne0 / m, act = n->p.altup.active;
    const float *p = value(r, n->src[0]), *a = value(r, n->src[1]), *c = value(r, n->src[2]);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < m; j++)
            for (int64_t e = 0; e < w; e++) {
                const float innovation = a[i * w + e] - p[i * ne0 + act * w + e];
                out[i * ne0 + j * w + e] =
                    p[i * ne0 + j * w + e] + (c[i * m + j] + 1.0f) * innovation;
            }
}

static void k_mag_match(const struct run *r, const struct gs_node *n, float *out)
{
    const int64_t ne0 = n->ne[0], rows = gs_step_rows(n, r->io);
    const int64_t wr = r->g->nodes[n->src[1]].ne[0];
    const float *x = value(r, n->src[0]), *ref = value(r, n->src[1]);
    for (int64_t i = 0; i < rows; i++) {
        double sx = 0, sr = 0;
        for (int64_t j = 0; j < ne0; j++)
            sx += (double)x[i * ne0 + j] * x[i * ne0 + j];
        for (int64_t j = 0; j < wr; j++)
            sr += (double)ref[i * wr + j] * ref[i * wr + j];
        const float f = (float)(sqrt(sr) / sqrt(sx));
        for (int64_t j = 0; j < ne0; j++)
            out[i * ne0 + j] = x[i * ne0 + j] * f;
    }
}

static void k_gauss_topk(const struct run *r, const struct gs_node *n, float *out)
{
    const int64_t ne0 = n->ne[0], rows = gs_step_rows(n, r->io);
    const float *x = value(r, n->src[0]);
    for (int64_t i = 0; i < rows; i++) {
        const float *xr = x + i * ne0;
        double sum = 0, sq = 0;
        for (int64_t j = 0; j < ne0; j++)
            sum += xr[j];
        const double mean = sum / (double)ne0;
        for (int64_t j = 0; j < ne0; j++)
            sq += (xr[j] - mean) * (xr[j] - mean);
        const float cutoff = (float)(mean + n->p.topk_k * sqrt(sq / (double)(ne0 - 1)));
        for (int64_t j = 0; j < ne0; j++)
            out[i * ne0 + j] = xr[j] > cutoff ? xr[j] - cutoff : 0.0f;
    }
}

static float silu(float x)
{
    return x / (1.0f + expf(-x));
}

/* GELU, tanh form, as ggml's CPU backend computes it and so as llama.cpp's outputs
 * hold it: a table over f16 inputs, so the input and the result are rounded to f16,
 * with 0 below -10 and x above 10. (The exact function moves Gemma 3n's logits to a
 * Pearson of 0.9996 against llama.cpp's; this form matches them to 1e-6.) */
static float gelu(float x)
{
    const float c = 0.7978845608028654f; /* sqrt(2 / pi) */
    if (x <= -10.0f)
        return 0.0f;
    if (x >= 10.0f)
        return x;
    const float h = gs_fp16_to_f32(gs_f32_to_fp16(x));
    const float y = 0.5f * h * (1.0f + tanhf(c * h * (1.0f + 0.044715f * h * h)));
    return gs_fp16_to_f32(gs_f32_to_fp16(y));
}

/* MUL, ADD, SWIGLU, SILU, GELU, SCALE, SOFTCAP: row-local elementwise ops; SWIGLU_QUANT's
 * row goes through row_b into its block type as activations are (gs_activation_quantizer). */
static void k_elementwise(const struct run *r, const struct gs_node *n, float *out)
{
    int64_t ne0 = n->ne[0], rows = gs_step_rows(n, r->io);
    const bool quant = n->op == GS_OP_SWIGLU_QUANT;
    uint64_t row_bytes = 0;
    gs_type_row_bytes(n->type, ne0, &row_bytes);
    const float *a = value(r, n->src[0]);
    /* b is one row broadcast, or rows of its own (fixed rows too: weights' gradients) */
    bool bcast = n->n_src > 1 && r->g->nodes[n->src[1]].rows == GS_ROWS_FIXED &&
                 r->g->nodes[n->src[1]].ne[1] == 1;
    const float *b = bcast ? row_of(r, n->src[1], 0, r->rp->row_a) : NULL;
    for (int64_t i = 0; i < rows; i++) {
        if (n->n_src > 1 && !bcast)
            b = value(r, n->src[1]) + i * ne0;
        for (int64_t j = 0; j < ne0; j++) {
            float x = a[i * ne0 + j], y = NAN;
            switch (n->op) {
            case GS_OP_MUL:
                y = x * b[j];
                break;
            case GS_OP_ADD:
                y = x + b[j];
                break;
            case GS_OP_SWIGLU:
            case GS_OP_SWIGLU_QUANT:
                y = (n->p.glu_act == GS_GLU_GELU ? gelu(x) : silu(x)) * b[j];
                break;
            case GS_OP_SILU:
                y = silu(x);
                break;
            case GS_OP_GELU:
                y = gelu(x);
                break;
            case GS_OP_SCALE:
                y = x * n->p.scale;
                break;
            case GS_OP_SOFTCAP:
                y = n->p.softcap * tanhf(x / n->p.softcap);
                break;
            /* Every other op is named so that a new one fails -Wswitch here: none of
             * these is routed to this kernel, and NaN rather than some other op's
             * result is what a routing mistake must produce. */
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
                break;
            }
            if (quant)
                r->rp->row_b[j] = y;
            else
                out[i * ne0 + j] = y;
        }
        if (quant)
            gs_activation_quantizer(n->type)(r->rp->row_b, (char *)out + i * row_bytes, ne0);
    }
}

/*
 * The activations a matmul against w sees: x itself for F32 weights, else x
 * rounded through the weight's vec_dot_type (F16, Q8_0, Q8_1, Q8_K), the
 * format llama.cpp quantizes activations to before a quantized dot product, as
 * llama.cpp's CPU backend rounds them (gs_activation_quantizer).
 * Quantizing then dequantizing makes the F32 product of dequantized values
 * equal that integer dot product up to float rounding.
 */
static const float *round_activations(const struct run *r, const struct gs_node *w, const float *x,
                                      int64_t rows)
{
    const struct gs_type_traits *wt = gs_type_traits(w->type);
    const struct gs_type_traits *vt = wt ? gs_type_traits(wt->vec_dot_type) : NULL;
    int64_t K = w->ne[0];
    if (w->type == GS_TYPE_F32 || !vt || wt->vec_dot_type == GS_TYPE_F32 || !vt->from_f32 ||
        !vt->to_f32 || K % vt->block_size)
        return x;
    uint64_t row_bytes = 0;
    gs_type_row_bytes(wt->vec_dot_type, K, &row_bytes);
    /* The quantized row fits in the row_a buffer: row_bytes <= K * 4. */
    for (int64_t t = 0; t < rows; t++) {
        gs_activation_quantizer(wt->vec_dot_type)(x + t * K, r->rp->row_a, K);
        vt->to_f32(r->rp->row_a, r->rp->xq + t * K, K);
    }
    return r->rp->xq;
}

/* The input rows of matmul n against w, as F32: x rounded as the product sees it. */
static const float *matmul_input(const struct run *r, const struct gs_node *n,
                                 const struct gs_node *w, int64_t rows)
{
    const float *x = value(r, n->src[0]);
    const enum gs_type in = r->g->nodes[n->src[0]].type;
    if (in == GS_TYPE_F32)
        return round_activations(r, w, x, rows);
    /* RMS_NORM_QUANT / SWIGLU_QUANT rows: what round_activations makes */
    const int64_t K = w->ne[0];
    uint64_t row_bytes = 0;
    gs_type_row_bytes(in, K, &row_bytes);
    for (int64_t t = 0; t < rows; t++)
        gs_type_traits(in)->to_f32((const char *)x + t * row_bytes, r->rp->xq + t * K, K);
    return r->rp->xq;
}

/* out[t * N + o] = x row t . w row o (+ res[t * N + o]). Each weight row is
 * dequantized once and used for every token. */
static void product(const struct run *r, const struct gs_node *w, const float *x, int64_t rows,
                    const float *res, float *out)
{
    const int64_t K = w->ne[0], N = w->ne[1];
    for (int64_t o = 0; o < N; o++) {
        const float *wr = weight_row(w, o, r->rp->row_a);
        for (int64_t t = 0; t < rows; t++) {
            double acc = 0;
            for (int64_t k = 0; k < K; k++)
                acc += (double)wr[k] * x[t * K + k];
            out[t * N + o] = (float)acc + (res ? res[t * N + o] : 0.0f);
        }
    }
}

/* x [K x R] @ W [K x N] -> out [N x R] (+ residual for MATMUL_ADD). */
static void k_matmul(const struct run *r, const struct gs_node *n, float *out)
{
    const struct gs_node *w = &r->g->nodes[n->src[1]];
    const int64_t rows = gs_step_rows(n, r->io);
    product(r, w, matmul_input(r, n, w, rows), rows,
            n->op == GS_OP_MATMUL_ADD ? value(r, n->src[2]) : NULL, out);
}

/* act(x @ Wg) * (x @ Wu): both products in full, then the join, row by row
 * into F32 or (through row_b) the node's block type. */
static void k_matmul_swiglu(const struct run *r, const struct gs_node *n, float *out)
{
    const struct gs_node *wg = &r->g->nodes[n->src[1]], *wu = &r->g->nodes[n->src[2]];
    const int64_t rows = gs_step_rows(n, r->io), N = n->ne[0];
    const float *x = matmul_input(r, n, wg, rows);
    float *gate = r->rp->ffn, *up = r->rp->ffn + N * rows;
    product(r, wg, x, rows, NULL, gate);
    product(r, wu, x, rows, NULL, up);
    const bool quant = n->type != GS_TYPE_F32, gelu_gate = n->p.glu_act == GS_GLU_GELU;
    uint64_t row_bytes = 0;
    gs_type_row_bytes(n->type, N, &row_bytes);
    for (int64_t t = 0; t < rows; t++) {
        float *y = quant ? r->rp->row_b : out + t * N;
        for (int64_t o = 0; o < N; o++) {
            const float a = gate[t * N + o];
            y[o] = (gelu_gate ? gelu(a) : silu(a)) * up[t * N + o];
        }
        if (quant)
            gs_activation_quantizer(n->type)(y, (char *)out + t * row_bytes, N);
    }
}

static void k_rope(const struct run *r, const struct gs_node *n, float *out)
{
    const struct gs_rope_params *p = &n->p.rope;
    const float *x = value(r, n->src[0]);
    const float *ff = n->n_src > 1 ? r->g->nodes[n->src[1]].data : NULL;
    int64_t ne0 = n->ne[0];
    float theta_scale = powf(p->freq_base, -2.0f / (float)p->n_rot);
    int half = p->n_rot / 2;
    if (out != x) /* the plan may rotate in place (GS_OPF_INPLACE) */
        memcpy(out, x, (size_t)(ne0 * (int64_t)r->io->n_tokens) * sizeof(float));
    for (uint32_t t = 0; t < r->io->n_tokens; t++) {
        /* theta_i = pos * scale^i, built by repeated multiplication in float. */
        float theta = (float)r->io->pos[t];
        for (int i = 0; i < half; i++) {
            float th = p->freq_scale * theta / (ff ? ff[i] : 1.0f);
            float c = cosf(th), s = sinf(th);
            theta *= theta_scale;
            for (int h = 0; h < p->n_head; h++) {
                int64_t base = t * ne0 + (int64_t)h * p->head_dim;
                int64_t i0 = p->mode == GS_ROPE_NEOX ? i : 2 * i;
                int64_t i1 = p->mode == GS_ROPE_NEOX ? i + half : 2 * i + 1;
                float x0 = x[base + i0], x1 = x[base + i1];
                out[base + i0] = x0 * c - x1 * s;
                out[base + i1] = x0 * s + x1 * c;
            }
        }
    }
}

/* Address of K (which = 0) or V (which = 1) of layer l at a sequence position. */
static void *kv_at(const struct gs_step_io *io, uint32_t seq, int32_t pos, int layer, int which)
{
    const struct gs_kv_view *kv = io->kv;
    uint32_t page = io->seqs[seq].pages[(uint32_t)pos / kv->page_tokens];
    uint32_t slot = (uint32_t)pos % kv->page_tokens;
    uint64_t row = (uint64_t)(2 * layer + which) * kv->page_tokens + slot;
    return (char *)kv->base + page * kv->page_bytes + row * gs_kv_row_bytes(kv->type, kv->kv_dim);
}

/* A q8_0 row is written as the matmuls' activations are rounded
 * (gs_activation_quantizer), its last partial block from a zero-padded copy. */
static void kv_write(enum gs_type type, void *dst, const float *src, int64_t n)
{
    if (type == GS_TYPE_F16) {
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)dst)[i] = gs_f32_to_fp16(src[i]);
    } else if (type == GS_TYPE_Q8_0) {
        for (int64_t i = 0; i < n; i += GS_QK) {
            float block[GS_QK] = {0};
            memcpy(block, src + i, (size_t)GS_MIN(GS_QK, n - i) * sizeof(float));
            gs_activation_quantizer(GS_TYPE_Q8_0)(block, (char *)dst + i / GS_QK * GS_Q8_0_BYTES,
                                                  GS_QK);
        }
    } else {
        memcpy(dst, src, (size_t)n * sizeof(float));
    }
}

/* Element i of a cache row. */
static float kv_read(enum gs_type type, const void *row, int64_t i)
{
    if (type == GS_TYPE_Q8_0) {
        const uint8_t *b = (const uint8_t *)row + i / GS_QK * GS_Q8_0_BYTES;
        return gs_quant_ldf16(b + GS_Q8_0_D) * (float)((const int8_t *)(b + GS_Q8_0_QS))[i % GS_QK];
    }
    return type == GS_TYPE_F16 ? gs_fp16_to_f32(((const uint16_t *)row)[i])
                               : ((const float *)row)[i];
}

static void k_kv_store(const struct run *r, const struct gs_node *n, float *out)
{
    const struct gs_step_io *io = r->io;
    int64_t kv_dim = (int64_t)n->p.attn.n_head_kv * n->p.attn.head_dim;
    const float *k = value(r, n->src[0]), *v = value(r, n->src[1]);
    for (uint32_t t = 0; t < io->n_tokens; t++) {
        kv_write(io->kv->type, kv_at(io, io->seq[t], io->pos[t], n->p.attn.layer, 0),
                 k + t * kv_dim, kv_dim);
        kv_write(io->kv->type, kv_at(io, io->seq[t], io->pos[t], n->p.attn.layer, 1),
                 v + t * kv_dim, kv_dim);
    }
}

static float attn_score(const struct run *r, const struct gs_attn_params *p, const float *q,
                        uint32_t seq, int32_t pos, int kv_head)
{
    enum gs_type kt = r->io->kv->type;
    const char *k = kv_at(r->io, seq, pos, p->layer, 0);
    const int64_t off = (int64_t)kv_head * p->head_dim;
    double dot = 0;
    for (int d = 0; d < p->head_dim; d++)
        dot += (double)q[d] * kv_read(kt, k, off + d);
    float s = (float)dot * p->scale;
    if (p->softcap > 0)
        s = p->softcap * tanhf(s / p->softcap);
    return s;
}

/* Causal attention: token t attends to positions first..pos[t] of its own sequence, first
 * being 0 or the start of its sliding window. */
static void k_attn(const struct run *r, const struct gs_node *n, float *out)
{
    const struct gs_attn_params *p = &n->p.attn;
    const struct gs_step_io *io = r->io;
    enum gs_type kt = io->kv->type;
    bool f16 = kt == GS_TYPE_F16;
    const float *q = value(r, n->src[0]);
    float *qh = r->rp->row_b;
    int group = p->n_head / p->n_head_kv;
    for (uint32_t t = 0; t < io->n_tokens; t++) {
        uint32_t seq = io->seq[t];
        int32_t last = io->pos[t];
        int32_t first = p->window > 0 ? GS_MAX(0, last - p->window + 1) : 0;
        for (int h = 0; h < p->n_head; h++) {
            int kvh = h / group;
            const float *qsrc = q + (int64_t)t * n->ne[0] + (int64_t)h * p->head_dim;
            for (int d = 0; d < p->head_dim; d++)
                qh[d] = f16 ? round_f16(qsrc[d]) : qsrc[d];
            float mx = -INFINITY;
            for (int32_t j = first; j <= last; j++)
                mx = fmaxf(mx, attn_score(r, p, qh, seq, j, kvh));
            double sum = 0;
            for (int32_t j = first; j <= last; j++)
                sum += exp((double)attn_score(r, p, qh, seq, j, kvh) - mx);
            float *o = out + (int64_t)t * n->ne[0] + (int64_t)h * p->head_dim;
            double acc[512];
            int hd = p->head_dim;
            for (int d0 = 0; d0 < hd; d0 += 512) {
                int nd = GS_MIN(512, hd - d0);
                for (int d = 0; d < nd; d++)
                    acc[d] = 0;
                for (int32_t j = first; j <= last; j++) {
                    float w = (float)(exp((double)attn_score(r, p, qh, seq, j, kvh) - mx) / sum);
                    if (f16)
                        w = round_f16(w);
                    const char *v = kv_at(io, seq, j, p->layer, 1);
                    const int64_t off = (int64_t)kvh * hd + d0;
                    for (int d = 0; d < nd; d++)
                        acc[d] += (double)w * kv_read(kt, v, off + d);
                }
                for (int d = 0; d < nd; d++)
                    o[d0 + d] = (float)acc[d];
            }
        }
    }
}

static void k_softmax(const struct run *r, const struct gs_node *n, float *out)
{
    const float *x = value(r, n->src[0]);
    int64_t ne0 = n->ne[0], rows = gs_step_rows(n, r->io);
    const struct gs_softmax_params *p = &n->p.softmax;
    for (int64_t i = 0; i < rows; i++) {
        float mx = -INFINITY;
        for (int64_t j = 0; j < ne0; j++) {
            float s = x[i * ne0 + j] * p->scale;
            if (p->softcap > 0)
                s = p->softcap * tanhf(s / p->softcap);
            out[i * ne0 + j] = s;
            mx = fmaxf(mx, s);
        }
        double sum = 0;
        for (int64_t j = 0; j < ne0; j++)
            sum += exp((double)out[i * ne0 + j] - mx);
        for (int64_t j = 0; j < ne0; j++)
            out[i * ne0 + j] = (float)(exp((double)out[i * ne0 + j] - mx) / sum);
    }
}

static void k_outputs(const struct run *r, const struct gs_node *n, float *out)
{
    const float *x = value(r, n->src[0]);
    for (uint32_t o = 0; o < r->io->n_outputs; o++)
        memcpy(out + o * n->ne[0], x + r->io->out_rows[o] * n->ne[0],
               (size_t)n->ne[0] * sizeof(float));
}

static void k_logits(const struct run *r, const struct gs_node *n, float *out)
{
    memcpy(r->io->logits, value(r, n->src[0]),
           (size_t)(n->ne[0] * (int64_t)r->io->n_outputs) * sizeof(float));
}

static void k_hidden(const struct run *r, const struct gs_node *n, float *out)
{
    (void)out;
    if (r->io->hidden)
        memcpy(r->io->hidden, value(r, n->src[0]),
               (size_t)(n->ne[0] * (int64_t)r->io->n_tokens) * sizeof(float));
}

/* One row per op; WEIGHT has no kernel and never appears in a plan's order. */
/* The training ops (train_ops.c), every unit in order. */
static void k_train(const struct run *r, const struct gs_node *n, float *out)
{
    struct gs_train_args a = {.n = n, .io = r->io, .out = out, .work = r->rp->train};
    for (uint32_t j = 0; j < n->n_src; j++) {
        const struct gs_node *s = &r->g->nodes[n->src[j]];
        a.src[j] = s->op == GS_OP_WEIGHT ? s->data : value(r, n->src[j]);
        a.src_rows[j] = gs_step_rows(s, r->io);
        a.src_ne0[j] = s->ne[0];
    }
    gs_train_run(&a, 0, gs_train_units(&a));
}

static const kernel_fn kernels[GS_OP_COUNT] = {
    [GS_OP_EMBED] = k_embed,       [GS_OP_RMS_NORM] = k_rms_norm, [GS_OP_RMS_NORM_MUL] = k_rms_norm,
    [GS_OP_MUL] = k_elementwise,   [GS_OP_ADD] = k_elementwise,   [GS_OP_SWIGLU] = k_elementwise,
    [GS_OP_SILU] = k_elementwise,  [GS_OP_GELU] = k_elementwise,
    [GS_OP_SCALE] = k_elementwise, [GS_OP_SOFTCAP] = k_elementwise,  [GS_OP_MATMUL] = k_matmul,
    [GS_OP_MATMUL_ADD] = k_matmul, [GS_OP_ROPE] = k_rope,         [GS_OP_KV_STORE] = k_kv_store,
    [GS_OP_ATTN] = k_attn,         [GS_OP_SOFTMAX] = k_softmax,   [GS_OP_OUTPUTS] = k_outputs,
    [GS_OP_LOGITS] = k_logits,     [GS_OP_HIDDEN] = k_hidden,     [GS_OP_RMS_NORM_QUANT] = k_rms_norm,
    [GS_OP_SWIGLU_QUANT] = k_elementwise, [GS_OP_MATMUL_SWIGLU] = k_matmul_swiglu,
    [GS_OP_RMS_NORM_HEADS] = k_rms_norm_heads,
    [GS_OP_COLS] = k_cols,         [GS_OP_CONCAT] = k_concat,     [GS_OP_ALTUP_PREDICT] = k_altup_predict,
    [GS_OP_ALTUP_CORRECT] = k_altup_correct, [GS_OP_MAG_MATCH] = k_mag_match,
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

static enum gs_status ref_run(struct gs_be *be, struct gs_plan *p, const struct gs_step_io *io,
                              struct gs_err *err)
{
    const struct gs_graph *g = p->graph;
    enum gs_status st = gs_step_io_check(io, g, &p->shape, err);
    if (st)
        return st;
    struct run r = {.plan = p, .g = g, .io = io, .rp = p->be_data};
    for (uint32_t k = 0; k < p->n_order; k++) {
        uint32_t id = p->order[k];
        const struct gs_node *n = &g->nodes[id];
        kernel_fn fn = (unsigned)n->op < GS_OP_COUNT ? kernels[n->op] : NULL;
        if (!fn)
            return gs_err_set(err, GS_UNSUPPORTED, "ref: node %u (%s) has no kernel", id,
                              gs_op_info(n->op) ? gs_op_info(n->op)->name : "?");
        fn(&r, n, p->offset[id] == GS_PLAN_NO_OFFSET ? NULL : value(&r, id));
    }
    return GS_OK;
}

const struct gs_be_ops gs_be_ref_ops = {
    .api_version = GS_BE_API_VERSION,
    .name = "ref",
    .open = ref_open,
    .close = ref_close,
    .supports = ref_supports,
    .compile = ref_compile,
    .run = ref_run,
    .plan_free = ref_plan_free,
    .sync = NULL,
};
