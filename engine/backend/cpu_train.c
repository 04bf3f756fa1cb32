/*
 * engine/backend/cpu_train.c - the cpu backend's own kernels for the training
 * ops that dominate a step: the backward matmuls, causal attention and its
 * backward, the cross-entropy pair and swiglu's gate gradient. They compute
 * what train_ops.c defines (its header comment has the formulas) on the SIMD
 * helpers of engine/cpu (gs_cpu_gemm_f32, dots, axpys, the vector
 * exponential), so their results
 * differ from ref's in the last bits; the other training ops run train_ops.c
 * as ref does.
 *
 * Units are train_ops.c's (gs_train_units: rows, rows of dW, a sequence and
 * kv head for dk and dv), and every output element is summed in one fixed
 * order inside its unit, so the bits do not depend on the thread count.
 *
 * Attention's backward ops need the forward's softmax rows again (dq and dk
 * through dS, dv through P): where the plan keeps them (struct
 * gs_cpu_train_probs), the forward op leaves every row there and the three
 * backward ops copy them back instead of computing each again: the same
 * values, three fewer passes of q.k dots and exponentials a step.
 */
#include "engine/backend/internal.h"
#include "engine/cpu/cpu.h"

#include <math.h>
#include <string.h>

uint64_t gs_cpu_train_probs_rows(const struct gs_step_io *io, const uint32_t *first, uint32_t *row)
{
    uint64_t sum = 0;
    for (uint32_t t = 0; t < io->n_tokens; t++) {
        row[t] = (uint32_t)GS_MIN(sum, UINT32_MAX);
        sum += t - first[t] + 1;
    }
    return sum;
}

void gs_cpu_train_seq_first(const struct gs_step_io *io, uint32_t *first)
{
    /* At the start of each run of rows of one sequence, the earliest earlier
     * row of that sequence: runs are few (one per sequence in training). */
    uint32_t run = 0;
    for (uint32_t t = 0; t < io->n_tokens; t++) {
        if (t == 0 || io->seq[t] != io->seq[t - 1]) {
            run = t;
            for (uint32_t j = 0; j < t; j++)
                if (io->seq[j] == io->seq[t]) {
                    run = j;
                    break;
                }
        }
        first[t] = run;
    }
}

/* ---- attention ---------------------------------------------------------------------- */

struct attn {
    const struct gs_attn_params *p;
    const struct gs_step_io *io;
    const uint32_t *first;
    const float *q, *k, *v, *dy;
    int64_t q_dim, kv_dim;
    float *pr, *dp; /* [n_tokens] each, indexed by key row */
    const struct gs_cpu_train_probs *kept; /* NULL: every op computes its softmax rows */
};

/* Query i, head h: pr[j] = p_ij for j in [first_i, i] (0 where i does not see
 * j); returns first_i. */
static uint32_t softmax_row(const struct attn *at, uint32_t i, int h)
{
    const int hd = at->p->head_dim, g = h / (at->p->n_head / at->p->n_head_kv);
    const uint32_t lo = at->first[i], n = i - lo + 1;
    const struct gs_step_io *io = at->io;
    float *s = at->pr + lo;
    gs_cpu_dots_f32(at->q + i * at->q_dim + (int64_t)h * hd, at->k + lo * at->kv_dim + g * hd,
                    (size_t)at->kv_dim, (int)n, hd, s);
    for (uint32_t j = lo; j <= i; j++)
        if (io->seq[j] != io->seq[i] || io->pos[j] > io->pos[i])
            at->pr[j] = -INFINITY;
    const float mx = gs_cpu_scale_max(s, at->p->scale, n);
    const float sum = gs_cpu_exp_sum(s, mx, n);
    gs_cpu_scale_max(s, 1.0f / sum, n);
    return lo;
}

/* Query i, head h's kept softmax row: keys first_i .. i. */
static float *kept_row(const struct attn *at, uint32_t i, int h)
{
    return at->kept->p + (uint64_t)h * at->kept->rows + at->kept->row[i];
}

/* softmax_row for the backward ops: the forward op's row where it kept them. */
static uint32_t probs_row(const struct attn *at, uint32_t i, int h)
{
    if (!at->kept)
        return softmax_row(at, i, h);
    const uint32_t lo = at->first[i];
    memcpy(at->pr + lo, kept_row(at, i, h), (size_t)(i - lo + 1) * sizeof(float));
    return lo;
}

/* dp[j] = dy_i . v_j over [lo, i]; then dp[j] = dS_ij = p_ij (dp_ij - D_i). */
static void ds_row(const struct attn *at, uint32_t i, int h, uint32_t lo)
{
    const int hd = at->p->head_dim, g = h / (at->p->n_head / at->p->n_head_kv);
    const uint32_t n = i - lo + 1;
    float *dp = at->dp + lo;
    const float *pr = at->pr + lo;
    gs_cpu_dots_f32(at->dy + i * at->q_dim + (int64_t)h * hd, at->v + lo * at->kv_dim + g * hd,
                    (size_t)at->kv_dim, (int)n, hd, dp);
    float d = 0;
    for (uint32_t j = 0; j < n; j++)
        d += pr[j] * dp[j];
    for (uint32_t j = 0; j < n; j++)
        dp[j] = pr[j] * (dp[j] - d);
}

static void attn_fwd(const struct attn *at, uint32_t i, float *out)
{
    const int hd = at->p->head_dim, group = at->p->n_head / at->p->n_head_kv;
    for (int h = 0; h < at->p->n_head; h++) {
        float *o = out + i * at->q_dim + (int64_t)h * hd;
        const uint32_t lo = softmax_row(at, i, h);
        if (at->kept)
            memcpy(kept_row(at, i, h), at->pr + lo, (size_t)(i - lo + 1) * sizeof(float));
        memset(o, 0, (size_t)hd * sizeof(float));
        gs_cpu_axpys_f32(o, at->pr + lo, at->v + lo * at->kv_dim + (h / group) * hd,
                         (size_t)at->kv_dim, (int)(i - lo + 1), hd);
    }
}

static void attn_back_q(const struct attn *at, uint32_t i, float *out)
{
    const int hd = at->p->head_dim, group = at->p->n_head / at->p->n_head_kv;
    for (int h = 0; h < at->p->n_head; h++) {
        float *o = out + i * at->q_dim + (int64_t)h * hd;
        const uint32_t lo = probs_row(at, i, h), n = i - lo + 1;
        ds_row(at, i, h, lo);
        for (uint32_t j = lo; j <= i; j++)
            at->dp[j] *= at->p->scale;
        memset(o, 0, (size_t)hd * sizeof(float));
        gs_cpu_axpys_f32(o, at->dp + lo, at->k + lo * at->kv_dim + (h / group) * hd,
                         (size_t)at->kv_dim, (int)n, hd);
    }
}

/*
 * dk or dv of a sequence whose rows are the one run [lo, lo + L), as products:
 * per query head h of the group, the L x L matrix of its softmax rows P (or
 * of dS, times the scale) in the work buffer, then dv = P^T dy_h (dk = dS^T
 * q_h) in one gs_cpu_gemm_f32, each element summed over the queries in row
 * order; the group's heads are added in order. Each row of P is softmax_row's,
 * so this sums the same terms as the row form below in another order.
 */
static void attn_back_kv_matrix(const struct attn *at, uint32_t lo, uint32_t L, int g,
                                bool want_k, float *out, float *mat)
{
    const int hd = at->p->head_dim, group = at->p->n_head / at->p->n_head_kv;
    float *tmp = mat + (size_t)L * L; /* [L][hd]: a head's part when the group has more */
    float *dst = out + lo * at->kv_dim + g * hd;
    for (int h = g * group; h < (g + 1) * group; h++) {
        for (uint32_t i = lo; i < lo + L; i++) {
            float *row = mat + (size_t)(i - lo) * L;
            probs_row(at, i, h);
            const float *src = at->pr + lo;
            if (want_k) {
                ds_row(at, i, h, lo);
                src = at->dp + lo;
            }
            const uint32_t n = i - lo + 1;
            for (uint32_t j = 0; j < n; j++)
                row[j] = want_k ? src[j] * at->p->scale : src[j];
            memset(row + n, 0, (size_t)(L - n) * sizeof(float));
        }
        const float *b = (want_k ? at->q : at->dy) + lo * at->q_dim + (int64_t)h * hd;
        const bool first = h == g * group;
        float *c = first ? dst : tmp;
        const size_t ldc = first ? (size_t)at->kv_dim : (size_t)hd;
        gs_cpu_gemm_f32(c, ldc, mat, 1, L, b, (size_t)at->q_dim, L, hd, L);
        if (!first)
            for (uint32_t j = 0; j < L; j++)
                for (int d = 0; d < hd; d++)
                    dst[j * at->kv_dim + d] += tmp[(size_t)j * hd + d];
    }
}

/* dk (want_k) or dv of sequence s's rows, kv head g: every query of the
 * sequence in row order, every query head of the group in order. A sequence
 * that is one run of rows and fits the work buffer goes as products above. */
static void attn_back_kv(const struct attn *at, uint32_t s, int g, bool want_k, float *out,
                         float *mat)
{
    const int hd = at->p->head_dim, group = at->p->n_head / at->p->n_head_kv;
    const struct gs_step_io *io = at->io;
    uint32_t s_lo = io->n_tokens, s_hi = 0, rows = 0;
    for (uint32_t j = 0; j < io->n_tokens; j++)
        if (io->seq[j] == s) {
            s_lo = GS_MIN(s_lo, j);
            s_hi = j + 1;
            rows++;
        }
    if (rows && s_hi - s_lo == rows &&
        (int64_t)rows * (rows + hd) <= GS_CPU_TRAIN_MATRIX_FLOATS) {
        attn_back_kv_matrix(at, s_lo, rows, g, want_k, out, mat);
        return;
    }
    for (uint32_t j = 0; j < io->n_tokens; j++)
        if (io->seq[j] == s)
            memset(out + j * at->kv_dim + g * hd, 0, (size_t)hd * sizeof(float));
    for (uint32_t i = 0; i < io->n_tokens; i++) {
        if (io->seq[i] != s)
            continue;
        for (int h = g * group; h < (g + 1) * group; h++) {
            const uint32_t lo = probs_row(at, i, h);
            const float *w = at->pr, *x = at->dy + i * at->q_dim + (int64_t)h * hd;
            if (want_k) {
                ds_row(at, i, h, lo);
                for (uint32_t j = lo; j <= i; j++)
                    at->dp[j] *= at->p->scale;
                w = at->dp;
                x = at->q + i * at->q_dim + (int64_t)h * hd;
            }
            for (uint32_t j = lo; j <= i; j++)
                if (w[j] != 0)
                    gs_cpu_axpys_f32(out + j * at->kv_dim + g * hd, w + j, x, 0, 1, hd);
        }
    }
}

/* ---- cross-entropy ------------------------------------------------------------------- */

/* Row x's logsumexp, through work [n]. */
static float logsumexp(const float *x, int64_t n, float *work)
{
    memcpy(work, x, (size_t)n * sizeof(float));
    const float mx = gs_cpu_scale_max(work, 1.0f, n);
    return logf(gs_cpu_exp_sum(work, mx, n)) + mx;
}

/* ---- a training plan's forward matmul -------------------------------------------- */

/*
 * GS_CPU_TRAIN_PANEL rows of W at a time transposed into wt, then
 * gs_cpu_gemm_f32 over every token, as the backward matmuls run. With a row of
 * 64 (the seed model's width) dot_f32's horizontal sum per output costs more
 * than half its multiply-adds; the broadcast form has none, and the
 * transposition is K x N copies against 2 T K N operations. Serving plans keep
 * the dot form, whose bits do not depend on how many tokens a step holds.
 */
void gs_cpu_train_matmul(const float *x, const float *w, int64_t K, int64_t N, int64_t T,
                         int64_t r0, int64_t r1, float *out, float *wt)
{
    for (int64_t p0 = r0; p0 < r1; p0 += GS_CPU_TRAIN_PANEL) {
        const int64_t np = GS_MIN(GS_CPU_TRAIN_PANEL, r1 - p0);
        for (int64_t j = 0; j < np; j++)
            for (int64_t k = 0; k < K; k++)
                wt[k * np + j] = w[(p0 + j) * K + k];
        gs_cpu_gemm_f32(out + p0, (size_t)N, x, (size_t)K, 1, wt, (size_t)np, T, np, K);
    }
}

/* ---- dispatch ---------------------------------------------------------------------- */

bool gs_cpu_train_own(enum gs_op op)
{
    switch (op) {
    case GS_OP_MATMUL_BACK_X:
    case GS_OP_MATMUL_BACK_W:
    case GS_OP_ATTN_CAUSAL:
    case GS_OP_ATTN_CAUSAL_BACK_Q:
    case GS_OP_ATTN_CAUSAL_BACK_K:
    case GS_OP_ATTN_CAUSAL_BACK_V:
    case GS_OP_CROSS_ENTROPY:
    case GS_OP_CROSS_ENTROPY_BACK:
    case GS_OP_SWIGLU_BACK_GATE:
        return true;
    default:
        return false;
    }
}

void gs_cpu_train_run(const struct gs_train_args *a, const uint32_t *seq_first,
                      const struct gs_cpu_train_probs *probs, int64_t u0, int64_t u1)
{
    const struct gs_node *n = a->n;
    const struct gs_step_io *io = a->io;
    const int64_t ne0 = n->ne[0];
    if (u0 >= u1)
        return;
    switch (n->op) {
    case GS_OP_MATMUL_BACK_X: { /* dx [T x K] = dy [T x N] W [N rows of K] */
        const int64_t nn = a->src_rows[1];
        gs_cpu_gemm_f32(a->out + u0 * ne0, (size_t)ne0, a->src[0] + u0 * nn, (size_t)nn, 1,
                        a->src[1], (size_t)ne0, u1 - u0, ne0, nn);
        return;
    }
    case GS_OP_MATMUL_BACK_W: { /* rows u of dW: sum_t dy[t][u] x[t] */
        const int64_t nn = n->ne[1];
        gs_cpu_gemm_f32(a->out + u0 * ne0, (size_t)ne0, a->src[0] + u0, 1, (size_t)nn, a->src[1],
                        (size_t)ne0, u1 - u0, ne0, a->src_rows[0]);
        return;
    }
    case GS_OP_CROSS_ENTROPY: {
        const int64_t vocab = a->src_ne0[0];
        double sum = 0;
        for (uint32_t t = 0; t < io->n_tokens; t++) {
            const float *x = a->src[0] + t * vocab;
            sum += (double)logsumexp(x, vocab, a->work) - x[io->targets[t]];
        }
        a->out[0] = (float)(sum / io->n_tokens);
        return;
    }
    case GS_OP_SWIGLU_BACK_GATE: /* rows u0 .. u1 - 1 are one run of floats */
        gs_cpu_swiglu_back_gate(a->out + u0 * ne0, a->src[0] + u0 * ne0, a->src[1] + u0 * ne0,
                                a->src[2] + u0 * ne0, (u1 - u0) * ne0);
        return;
    case GS_OP_CROSS_ENTROPY_BACK:
        for (int64_t t = u0; t < u1; t++) {
            float *o = a->out + t * ne0;
            memcpy(o, a->src[0] + t * ne0, (size_t)ne0 * sizeof(float));
            const float mx = gs_cpu_scale_max(o, 1.0f, ne0);
            const float sum = gs_cpu_exp_sum(o, mx, ne0), per = 1.0f / (float)io->n_tokens;
            gs_cpu_scale_max(o, per / sum, ne0);
            o[io->targets[t]] -= per;
        }
        return;
    default:
        break;
    }
    struct attn at = {.p = &n->p.attn,
                      .io = io,
                      .first = seq_first,
                      .pr = a->work,
                      .dp = a->work + io->n_tokens,
                      .kept = probs};
    if (n->op == GS_OP_ATTN_CAUSAL) {
        at.q = a->src[0], at.k = a->src[1], at.v = a->src[2];
    } else {
        at.dy = a->src[0], at.q = a->src[1], at.k = a->src[2], at.v = a->src[3];
    }
    at.q_dim = (int64_t)at.p->n_head * at.p->head_dim;
    at.kv_dim = (int64_t)at.p->n_head_kv * at.p->head_dim;
    for (int64_t u = u0; u < u1; u++) {
        switch (n->op) {
        case GS_OP_ATTN_CAUSAL:
            attn_fwd(&at, (uint32_t)u, a->out);
            break;
        case GS_OP_ATTN_CAUSAL_BACK_Q:
            attn_back_q(&at, (uint32_t)u, a->out);
            break;
        case GS_OP_ATTN_CAUSAL_BACK_K:
        case GS_OP_ATTN_CAUSAL_BACK_V:
            attn_back_kv(&at, (uint32_t)(u / at.p->n_head_kv), (int)(u % at.p->n_head_kv),
                         n->op == GS_OP_ATTN_CAUSAL_BACK_K, a->out,
                         a->work + 2 * (int64_t)io->n_tokens);
            break;
        default:
            (void)GS_NEVER(true);
            break;
        }
    }
}
