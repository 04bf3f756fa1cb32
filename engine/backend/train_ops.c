/*
 * engine/backend/train_ops.c - kernels of the training ops (engine/graph.h,
 * "Training"), run by ref whole and by cpu cut into units over its pool.
 *
 * Definitions (T the step's tokens, rows r):
 *   cross_entropy   L = 1/T sum_r (logsumexp(x_r) - x_r[target_r])
 *   rms_norm_back   y = x s, s = (mean(x^2) + eps)^-1/2:  dx = s dy - x s^3 (dy . x) / n
 *   attn_causal     o_i = sum_j p_ij v_j, p_ij = softmax_j(scale q_i . k_j) over the keys j
 *                   of i's sequence at rows <= i and positions <= pos_i; gradients
 *                   dP_ij = dy_i . v_j, D_i = sum_j p_ij dP_ij, dS_ij = p_ij (dP_ij - D_i),
 *                   dq_i = scale sum_j dS_ij k_j, dk_j = scale sum_i dS_ij q_i,
 *                   dv_j = sum_i p_ij dy_i (a kv head gathers all its query heads).
 */
#include "engine/backend/internal.h"

#include <math.h>
#include <string.h>

bool gs_train_op(enum gs_op op)
{
    const struct gs_op_info *info = gs_op_info(op);
    return info && (info->flags & GS_OPF_TRAIN);
}

int64_t gs_train_units(const struct gs_train_args *a)
{
    const struct gs_node *n = a->n;
    switch (n->op) {
    case GS_OP_CROSS_ENTROPY:
    case GS_OP_OUT:
        return 1;
    case GS_OP_EMBED_BACK:
    case GS_OP_SUM_ROWS_MUL:
        return n->ne[0]; /* columns: each sums over every row */
    case GS_OP_MATMUL_BACK_W:
        return n->ne[1]; /* rows of dW */
    case GS_OP_ATTN_CAUSAL_BACK_K:
    case GS_OP_ATTN_CAUSAL_BACK_V:
        return (int64_t)a->io->n_seqs * n->p.attn.n_head_kv;
    case GS_OP_ATTN_CAUSAL:
    case GS_OP_ATTN_CAUSAL_BACK_Q:
    case GS_OP_CROSS_ENTROPY_BACK:
    case GS_OP_MATMUL_BACK_X:
    case GS_OP_RMS_NORM_BACK:
    case GS_OP_ROPE_BACK:
    case GS_OP_SWIGLU_BACK_GATE:
        return a->io->n_tokens; /* row-local */
    /* Every other op is named so that a new one fails -Wswitch here: none of
     * these is a training op (gs_train_op), so no backend routes it here, and
     * no work rather than some other op's is what a routing mistake must get. */
    case GS_OP_WEIGHT:
    case GS_OP_EMBED:
    case GS_OP_RMS_NORM:
    case GS_OP_MUL:
    case GS_OP_ADD:
    case GS_OP_MATMUL:
    case GS_OP_ROPE:
    case GS_OP_KV_STORE:
    case GS_OP_ATTN:
    case GS_OP_SOFTMAX:
    case GS_OP_SILU:
    case GS_OP_GELU:
    case GS_OP_SCALE:
    case GS_OP_SOFTCAP:
    case GS_OP_SWIGLU:
    case GS_OP_RMS_NORM_MUL:
    case GS_OP_MATMUL_ADD:
    case GS_OP_OUTPUTS:
    case GS_OP_LOGITS:
    case GS_OP_HIDDEN:
    case GS_OP_RMS_NORM_QUANT:
    case GS_OP_SWIGLU_QUANT:
    case GS_OP_MATMUL_SWIGLU:
    case GS_OP_RMS_NORM_HEADS:
    case GS_OP_COLS:
    case GS_OP_CONCAT:
    case GS_OP_ALTUP_PREDICT:
    case GS_OP_ALTUP_CORRECT:
    case GS_OP_MAG_MATCH:
    case GS_OP_GAUSS_TOPK:
    case GS_OP_COUNT:
        (void)GS_NEVER(true);
        return 0;
    }
    return 0;
}

/* x86-64 builds also get an AVX2 copy of the vector loops, picked at load time.
 * Without FMA, and every element summed in the same order, both copies give
 * the same bits. Not under ThreadSanitizer: GCC instruments the clones' ifunc
 * resolver, which the dynamic loader runs before the TSan runtime is set up,
 * so the program would crash before main. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_THREAD__)
#define VEC_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define VEC_CLONES
#endif

static float dot(const float *a, const float *b, int64_t n)
{
    float s = 0;
    for (int64_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

VEC_CLONES static void axpy(float *restrict y, float a, const float *restrict x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

/* y += sum_k a[k] x[k*stride] over n_x rows of x, four rows a pass over y. */
VEC_CLONES static void axpy_rows(float *restrict y, const float *a, int64_t a_stride,
                                 const float *restrict x, int64_t x_stride, int64_t n_x, int64_t n)
{
    int64_t k = 0;
    for (; k + 4 <= n_x; k += 4) {
        const float a0 = a[k * a_stride], a1 = a[(k + 1) * a_stride];
        const float a2 = a[(k + 2) * a_stride], a3 = a[(k + 3) * a_stride];
        const float *x0 = x + k * x_stride, *x1 = x0 + x_stride, *x2 = x1 + x_stride,
                    *x3 = x2 + x_stride;
        for (int64_t i = 0; i < n; i++)
            y[i] = y[i] + a0 * x0[i] + a1 * x1[i] + a2 * x2[i] + a3 * x3[i];
    }
    for (; k < n_x; k++)
        axpy(y, a[k * a_stride], x + k * x_stride, n);
}

/* ---- attention ---------------------------------------------------------------- */

struct attn {
    const struct gs_attn_params *p;
    const struct gs_step_io *io;
    const float *q, *k, *v, *dy;
    int64_t q_dim, kv_dim;
    float *pr, *dp; /* [n_tokens] each: a query's softmax row and dy . v over its keys */
};

static bool sees(const struct attn *at, uint32_t i, uint32_t j)
{
    return at->io->seq[j] == at->io->seq[i] && at->io->pos[j] <= at->io->pos[i];
}

/* Query i, head h: at->pr[j] = p_ij over every row j <= i (0 where i does not see j). */
static void softmax_row(const struct attn *at, uint32_t i, int h)
{
    const int hd = at->p->head_dim, g = h / (at->p->n_head / at->p->n_head_kv);
    const float *qi = at->q + i * at->q_dim + (int64_t)h * hd;
    float mx = -INFINITY;
    for (uint32_t j = 0; j <= i; j++) {
        at->pr[j] = sees(at, i, j) ? at->p->scale * dot(qi, at->k + j * at->kv_dim + g * hd, hd)
                                   : -INFINITY;
        mx = at->pr[j] > mx ? at->pr[j] : mx;
    }
    double l = 0;
    for (uint32_t j = 0; j <= i; j++) {
        at->pr[j] = at->pr[j] == -INFINITY ? 0.0f : expf(at->pr[j] - mx);
        l += at->pr[j];
    }
    const float inv = (float)(1.0 / l);
    for (uint32_t j = 0; j <= i; j++)
        at->pr[j] *= inv;
}

/* at->dp[j] = dy_i . v_j for head h; returns D_i = sum_j p_ij dp_j. */
static float dp_row(const struct attn *at, uint32_t i, int h)
{
    const int hd = at->p->head_dim, g = h / (at->p->n_head / at->p->n_head_kv);
    const float *dyi = at->dy + i * at->q_dim + (int64_t)h * hd;
    double d = 0;
    for (uint32_t j = 0; j <= i; j++) {
        at->dp[j] = at->pr[j] != 0 ? dot(dyi, at->v + j * at->kv_dim + g * hd, hd) : 0.0f;
        d += (double)at->pr[j] * at->dp[j];
    }
    return (float)d;
}

static void attn_fwd(const struct attn *at, uint32_t i, float *out)
{
    const int hd = at->p->head_dim;
    for (int h = 0; h < at->p->n_head; h++) {
        const int g = h / (at->p->n_head / at->p->n_head_kv);
        float *o = out + i * at->q_dim + (int64_t)h * hd;
        softmax_row(at, i, h);
        memset(o, 0, (size_t)hd * sizeof(float));
        for (uint32_t j = 0; j <= i; j++)
            if (at->pr[j] != 0)
                axpy(o, at->pr[j], at->v + j * at->kv_dim + g * hd, hd);
    }
}

static void attn_back_q(const struct attn *at, uint32_t i, float *out)
{
    const int hd = at->p->head_dim;
    for (int h = 0; h < at->p->n_head; h++) {
        const int g = h / (at->p->n_head / at->p->n_head_kv);
        float *o = out + i * at->q_dim + (int64_t)h * hd;
        softmax_row(at, i, h);
        const float d = dp_row(at, i, h);
        memset(o, 0, (size_t)hd * sizeof(float));
        for (uint32_t j = 0; j <= i; j++)
            if (at->pr[j] != 0)
                axpy(o, at->p->scale * at->pr[j] * (at->dp[j] - d),
                     at->k + j * at->kv_dim + g * hd, hd);
    }
}

/* dk (want_k) or dv of sequence s's rows, kv head g: every query head of the
 * group and every query of the sequence, in row order. */
static void attn_back_kv(const struct attn *at, uint32_t s, int g, bool want_k, float *out)
{
    const int hd = at->p->head_dim, group = at->p->n_head / at->p->n_head_kv;
    const struct gs_step_io *io = at->io;
    for (uint32_t j = 0; j < io->n_tokens; j++)
        if (io->seq[j] == s)
            memset(out + j * at->kv_dim + g * hd, 0, (size_t)hd * sizeof(float));
    for (uint32_t i = 0; i < io->n_tokens; i++) {
        if (io->seq[i] != s)
            continue;
        for (int h = g * group; h < (g + 1) * group; h++) {
            const float *dyi = at->dy + i * at->q_dim + (int64_t)h * hd;
            const float *qi = at->q + i * at->q_dim + (int64_t)h * hd;
            softmax_row(at, i, h);
            const float d = want_k ? dp_row(at, i, h) : 0;
            for (uint32_t j = 0; j <= i; j++) {
                if (at->pr[j] == 0)
                    continue;
                float *o = out + j * at->kv_dim + g * hd;
                if (want_k)
                    axpy(o, at->p->scale * at->pr[j] * (at->dp[j] - d), qi, hd);
                else
                    axpy(o, at->pr[j], dyi, hd);
            }
        }
    }
}

/* ---- the rest ------------------------------------------------------------------- */

static void rope_back_row(const struct gs_train_args *a, uint32_t t)
{
    const struct gs_rope_params *p = &a->n->p.rope;
    const float *ff = a->n->n_src > 1 ? a->src[1] : NULL;
    const int64_t ne0 = a->n->ne[0];
    const float theta_scale = powf(p->freq_base, -2.0f / (float)p->n_rot);
    const int half = p->n_rot / 2;
    const float *dy = a->src[0] + t * ne0;
    float *o = a->out + t * ne0;
    memcpy(o, dy, (size_t)ne0 * sizeof(float));
    /* The forward's angles, computed as ref's rope computes them, turned back. */
    float theta = (float)a->io->pos[t];
    for (int i = 0; i < half; i++) {
        float th = p->freq_scale * theta / (ff ? ff[i] : 1.0f);
        float c = cosf(th), s = sinf(th);
        theta *= theta_scale;
        for (int h = 0; h < p->n_head; h++) {
            int64_t base = (int64_t)h * p->head_dim;
            int64_t i0 = p->mode == GS_ROPE_NEOX ? i : 2 * i;
            int64_t i1 = p->mode == GS_ROPE_NEOX ? i + half : 2 * i + 1;
            float y0 = dy[base + i0], y1 = dy[base + i1];
            o[base + i0] = y0 * c + y1 * s;
            o[base + i1] = -y0 * s + y1 * c;
        }
    }
}

static void row_kernel(const struct gs_train_args *a, uint32_t t)
{
    const struct gs_node *n = a->n;
    const int64_t ne0 = n->ne[0];
    switch (n->op) {
    case GS_OP_CROSS_ENTROPY_BACK: {
        const float *x = a->src[0] + t * ne0;
        float *o = a->out + t * ne0;
        float mx = -INFINITY;
        for (int64_t j = 0; j < ne0; j++)
            mx = fmaxf(mx, x[j]);
        double l = 0;
        for (int64_t j = 0; j < ne0; j++)
            l += expf(x[j] - mx);
        const float inv = (float)(1.0 / l), per = 1.0f / (float)a->io->n_tokens;
        for (int64_t j = 0; j < ne0; j++)
            o[j] = expf(x[j] - mx) * inv * per;
        o[a->io->targets[t]] -= per;
        break;
    }
    case GS_OP_MATMUL_BACK_X: { /* dy [N], W [K x N] rows of K -> [K] */
        const int64_t nn = a->src_rows[1];
        const float *dy = a->src[0] + t * nn;
        float *o = a->out + t * ne0;
        memset(o, 0, (size_t)ne0 * sizeof(float));
        axpy_rows(o, dy, 1, a->src[1], ne0, nn, ne0);
        break;
    }
    case GS_OP_RMS_NORM_BACK: {
        const float *dy = a->src[0] + t * ne0, *x = a->src[1] + t * ne0;
        float *o = a->out + t * ne0;
        double ss = 0, dx = 0;
        for (int64_t j = 0; j < ne0; j++) {
            ss += (double)x[j] * x[j];
            dx += (double)dy[j] * x[j];
        }
        const float s = 1.0f / sqrtf((float)(ss / ne0) + n->p.eps);
        const float c = (float)(dx / ne0) * s * s * s;
        for (int64_t j = 0; j < ne0; j++)
            o[j] = s * dy[j] - c * x[j];
        break;
    }
    case GS_OP_SWIGLU_BACK_GATE: {
        const float *dy = a->src[0] + t * ne0, *ga = a->src[1] + t * ne0;
        const float *up = a->src[2] + t * ne0;
        float *o = a->out + t * ne0;
        for (int64_t j = 0; j < ne0; j++) {
            const float sg = 1.0f / (1.0f + expf(-ga[j]));
            o[j] = dy[j] * up[j] * sg * (1.0f + ga[j] * (1.0f - sg));
        }
        break;
    }
    case GS_OP_ROPE_BACK:
        rope_back_row(a, t);
        break;
    /* Every other op is named so that a new one fails -Wswitch here: the
     * training ops below have kernels of their own in gs_train_run, the rest
     * are not training ops; a routing mistake leaves the output unwritten. */
    case GS_OP_ATTN_CAUSAL:
    case GS_OP_CROSS_ENTROPY:
    case GS_OP_EMBED_BACK:
    case GS_OP_MATMUL_BACK_W:
    case GS_OP_SUM_ROWS_MUL:
    case GS_OP_ATTN_CAUSAL_BACK_Q:
    case GS_OP_ATTN_CAUSAL_BACK_K:
    case GS_OP_ATTN_CAUSAL_BACK_V:
    case GS_OP_OUT:
    case GS_OP_WEIGHT:
    case GS_OP_EMBED:
    case GS_OP_RMS_NORM:
    case GS_OP_MUL:
    case GS_OP_ADD:
    case GS_OP_MATMUL:
    case GS_OP_ROPE:
    case GS_OP_KV_STORE:
    case GS_OP_ATTN:
    case GS_OP_SOFTMAX:
    case GS_OP_SILU:
    case GS_OP_GELU:
    case GS_OP_SCALE:
    case GS_OP_SOFTCAP:
    case GS_OP_SWIGLU:
    case GS_OP_RMS_NORM_MUL:
    case GS_OP_MATMUL_ADD:
    case GS_OP_OUTPUTS:
    case GS_OP_LOGITS:
    case GS_OP_HIDDEN:
    case GS_OP_RMS_NORM_QUANT:
    case GS_OP_SWIGLU_QUANT:
    case GS_OP_MATMUL_SWIGLU:
    case GS_OP_RMS_NORM_HEADS:
    case GS_OP_COLS:
    case GS_OP_CONCAT:
    case GS_OP_ALTUP_PREDICT:
    case GS_OP_ALTUP_CORRECT:
    case GS_OP_MAG_MATCH:
    case GS_OP_GAUSS_TOPK:
    case GS_OP_COUNT:
        (void)GS_NEVER(true);
        break;
    }
}

/*
 * The column ops (a unit is a column summed over every row) on columns
 * [u0, u1) with the rows in the outer loop: each row's span is read once and
 * in order, where a column at a time strides the whole input once per column.
 * Every column still adds its rows in order 0, 1, ... from 0, so the bits are
 * those of the column-at-a-time form.
 */
static void column_sums(const struct gs_train_args *a, int64_t u0, int64_t u1)
{
    const struct gs_node *n = a->n;
    const int64_t ne0 = n->ne[0], w = u1 - u0;
    float *o = a->out + u0;
    if (n->op == GS_OP_SUM_ROWS_MUL) {
        const float *x = a->src[0] + u0, *y = a->src[1] + u0;
        memset(o, 0, (size_t)w * sizeof(float));
        for (int64_t r = 0; r < a->src_rows[0]; r++)
            for (int64_t j = 0; j < w; j++)
                o[j] += x[r * ne0 + j] * y[r * ne0 + j];
        return;
    }
    /* EMBED_BACK: the table's gradient, each token's row added into its id's */
    for (int64_t r = 0; r < n->ne[1]; r++)
        memset(o + r * ne0, 0, (size_t)w * sizeof(float));
    for (uint32_t t = 0; t < a->io->n_tokens; t++) {
        float *dst = o + (int64_t)a->io->tokens[t] * ne0;
        const float *g = a->src[0] + t * ne0 + u0;
        for (int64_t j = 0; j < w; j++)
            dst[j] += g[j];
    }
}

void gs_train_run(const struct gs_train_args *a, int64_t u0, int64_t u1)
{
    const struct gs_node *n = a->n;
    const struct gs_step_io *io = a->io;
    const int64_t ne0 = n->ne[0];
    if (n->op == GS_OP_EMBED_BACK || n->op == GS_OP_SUM_ROWS_MUL) {
        if (u0 < u1)
            column_sums(a, u0, u1);
        return;
    }
    struct attn at = {.p = &n->p.attn, .io = io, .pr = a->work, .dp = a->work + io->n_tokens};
    if (n->op == GS_OP_ATTN_CAUSAL) {
        at.q = a->src[0], at.k = a->src[1], at.v = a->src[2];
    } else if (n->op >= GS_OP_ATTN_CAUSAL_BACK_Q && n->op <= GS_OP_ATTN_CAUSAL_BACK_V) {
        at.dy = a->src[0], at.q = a->src[1], at.k = a->src[2], at.v = a->src[3];
    }
    at.q_dim = (int64_t)at.p->n_head * at.p->head_dim;
    at.kv_dim = (int64_t)at.p->n_head_kv * at.p->head_dim;
    for (int64_t u = u0; u < u1; u++) {
        switch (n->op) {
        case GS_OP_OUT: {
            const int64_t count = a->src_rows[0] * a->src_ne0[0];
            memcpy(io->outs[n->p.out_slot], a->src[0], (size_t)count * sizeof(float));
            break;
        }
        case GS_OP_CROSS_ENTROPY: {
            const int64_t vocab = a->src_ne0[0];
            double sum = 0;
            for (uint32_t t = 0; t < io->n_tokens; t++) {
                const float *x = a->src[0] + t * vocab;
                float mx = -INFINITY;
                for (int64_t j = 0; j < vocab; j++)
                    mx = fmaxf(mx, x[j]);
                double l = 0;
                for (int64_t j = 0; j < vocab; j++)
                    l += expf(x[j] - mx);
                sum += log(l) + mx - x[io->targets[t]];
            }
            a->out[0] = (float)(sum / io->n_tokens);
            break;
        }
        case GS_OP_EMBED_BACK: /* column_sums */
        case GS_OP_SUM_ROWS_MUL:
            (void)GS_NEVER(true);
            break;
        case GS_OP_MATMUL_BACK_W: { /* row u of dW [K x N]: sum_r dy[r][u] x[r] */
            const int64_t nn = n->ne[1];
            float *o = a->out + u * ne0;
            memset(o, 0, (size_t)ne0 * sizeof(float));
            axpy_rows(o, a->src[0] + u, nn, a->src[1], ne0, a->src_rows[0], ne0);
            break;
        }
        case GS_OP_ATTN_CAUSAL:
            attn_fwd(&at, (uint32_t)u, a->out);
            break;
        case GS_OP_ATTN_CAUSAL_BACK_Q:
            attn_back_q(&at, (uint32_t)u, a->out);
            break;
        case GS_OP_ATTN_CAUSAL_BACK_K:
        case GS_OP_ATTN_CAUSAL_BACK_V:
            attn_back_kv(&at, (uint32_t)(u / at.p->n_head_kv), (int)(u % at.p->n_head_kv),
                         n->op == GS_OP_ATTN_CAUSAL_BACK_K, a->out);
            break;
        case GS_OP_CROSS_ENTROPY_BACK:
        case GS_OP_MATMUL_BACK_X:
        case GS_OP_RMS_NORM_BACK:
        case GS_OP_ROPE_BACK:
        case GS_OP_SWIGLU_BACK_GATE:
            row_kernel(a, (uint32_t)u);
            break;
        /* Every other op is named so that a new one fails -Wswitch here: none
         * of these is a training op, and gs_train_units gave them no units. */
        case GS_OP_WEIGHT:
        case GS_OP_EMBED:
        case GS_OP_RMS_NORM:
        case GS_OP_MUL:
        case GS_OP_ADD:
        case GS_OP_MATMUL:
        case GS_OP_ROPE:
        case GS_OP_KV_STORE:
        case GS_OP_ATTN:
        case GS_OP_SOFTMAX:
        case GS_OP_SILU:
        case GS_OP_GELU:
        case GS_OP_SCALE:
        case GS_OP_SOFTCAP:
        case GS_OP_SWIGLU:
        case GS_OP_RMS_NORM_MUL:
        case GS_OP_MATMUL_ADD:
        case GS_OP_OUTPUTS:
        case GS_OP_LOGITS:
        case GS_OP_HIDDEN:
        case GS_OP_RMS_NORM_QUANT:
        case GS_OP_SWIGLU_QUANT:
        case GS_OP_MATMUL_SWIGLU:
        case GS_OP_RMS_NORM_HEADS:
        case GS_OP_COLS:
        case GS_OP_CONCAT:
        case GS_OP_ALTUP_PREDICT:
        case GS_OP_ALTUP_CORRECT:
        case GS_OP_MAG_MATCH:
        case GS_OP_GAUSS_TOPK:
        case GS_OP_COUNT:
            (void)GS_NEVER(true);
            break;
        }
    }
}
