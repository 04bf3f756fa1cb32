/*
 * engine/validate/compare.c - per-position figures, aggregates and the
 * verdict of a validation report (engine/validate.h).
 */
#include "engine/sample.h"
#include "engine/validate.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

void gs_val_thresholds_init(struct gs_val_thresholds *t)
{
    t->min_pearson = 0.999;
    t->min_top1_rate = 0.95;
    t->top1_margin = 0.5;
    t->max_mean_kl = 0.01;
    t->max_abs_err = -1.0;
}

enum gs_status gs_val_report_new(int32_t n_vocab, const struct gs_val_thresholds *thr,
                                 struct gs_val_report **out, struct gs_err *err)
{
    if (n_vocab <= 0)
        return gs_err_set(err, GS_INVAL, "n_vocab: %d is not positive", (int)n_vocab);
    struct gs_val_thresholds t;
    if (thr)
        t = *thr;
    else
        gs_val_thresholds_init(&t);
    if (isnan(t.min_pearson) || isnan(t.min_top1_rate) || isnan(t.top1_margin) ||
        isnan(t.max_mean_kl) || isnan(t.max_abs_err))
        return gs_err_set(err, GS_INVAL, "thresholds: NaN");
    struct gs_val_report *r = gs_calloc(1, sizeof(*r));
    if (!r)
        return gs_err_set(err, GS_NOMEM, "validation report: out of memory");
    r->n_vocab = n_vocab;
    r->thr = t;
    r->first_divergence = -1;
    r->first_nonfinite = -1;
    gs_val_finish(r);
    *out = r;
    return GS_OK;
}

void gs_val_report_free(struct gs_val_report *r)
{
    if (!r)
        return;
    gs_free(r->rows);
    gs_free(r);
}

static struct gs_val_row *row_push(struct gs_val_report *r, int32_t pos, struct gs_err *err)
{
    if (r->n_rows == r->cap_rows) {
        int32_t cap = r->cap_rows ? r->cap_rows * 2 : 64;
        uint64_t bytes;
        if (gs_mul_overflow((uint64_t)cap, sizeof(*r->rows), &bytes) || bytes > SIZE_MAX) {
            gs_err_set(err, GS_NOMEM, "validation report: too many rows");
            return NULL;
        }
        struct gs_val_row *rows = gs_realloc(r->rows, (size_t)bytes);
        if (!rows) {
            gs_err_set(err, GS_NOMEM, "validation report: out of memory for %d rows", (int)cap);
            return NULL;
        }
        r->rows = rows;
        r->cap_rows = cap;
    }
    struct gs_val_row *row = &r->rows[r->n_rows++];
    memset(row, 0, sizeof(*row));
    row->pos = pos;
    return row;
}

static bool row_finite(const float *x, int32_t n)
{
    for (int32_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return false;
    return true;
}

/* Argmax (lowest id on ties) and the gap to the runner-up. */
static int32_t argmax_margin(const float *x, int32_t n, double *margin)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    double second = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        if (i != best && x[i] > second)
            second = x[i];
    *margin = n > 1 ? (double)x[best] - second : 0.0;
    return best;
}

/* Pearson correlation, two-pass in double. Constant rows have no defined
 * correlation; they count as 1 when the rows are equal, else 0. */
static double pearson(const float *a, const float *b, int32_t n, double max_abs_err)
{
    double ma = 0, mb = 0;
    for (int32_t i = 0; i < n; i++) {
        ma += a[i];
        mb += b[i];
    }
    ma /= n;
    mb /= n;
    double sab = 0, saa = 0, sbb = 0;
    for (int32_t i = 0; i < n; i++) {
        double da = a[i] - ma, db = b[i] - mb;
        sab += da * db;
        saa += da * da;
        sbb += db * db;
    }
    if (saa == 0 || sbb == 0)
        return max_abs_err == 0 ? 1.0 : 0.0;
    double r = sab / sqrt(saa * sbb);
    return r > 1 ? 1 : r < -1 ? -1 : r;
}

static void max_and_lse(const float *x, int32_t n, double *max, double *lse)
{
    double m = x[0];
    for (int32_t i = 1; i < n; i++)
        if (x[i] > m)
            m = x[i];
    double s = 0;
    for (int32_t i = 0; i < n; i++)
        s += exp((double)x[i] - m);
    *max = m;
    *lse = log(s);
}

/* KL(softmax(p) || softmax(q)) = sum p_i (log p_i - log q_i), nats. */
static double kl_div(const float *p, const float *q, int32_t n)
{
    double mp, lp, mq, lq;
    max_and_lse(p, n, &mp, &lp);
    max_and_lse(q, n, &mq, &lq);
    double kl = 0;
    for (int32_t i = 0; i < n; i++) {
        double logp = (double)p[i] - mp - lp;
        double logq = (double)q[i] - mq - lq;
        kl += exp(logp) * (logp - logq);
    }
    /* Mathematically >= 0; rounding can leave a tiny negative for equal rows. */
    return kl > 0 ? kl : 0;
}

/* |topk(a) ∩ ids[0..k)| for finite a. */
static int32_t overlap_with(const float *a, int32_t n, const int32_t *ids, int32_t k)
{
    struct gs_sample_logprob top[GS_VAL_PARTIAL_MAX];
    if (gs_sample_top_logprobs(a, n, k, top, NULL) != GS_OK)
        return 0;
    int32_t hit = 0;
    for (int32_t i = 0; i < k; i++)
        for (int32_t j = 0; j < k; j++)
            if (top[i].token == ids[j]) {
                hit++;
                break;
            }
    return hit;
}

enum gs_status gs_val_add_full(struct gs_val_report *r, int32_t pos, const float *served,
                               const float *ref, double ref_margin, struct gs_err *err)
{
    int32_t n = r->n_vocab;
    struct gs_val_row *row = row_push(r, pos, err);
    if (!row)
        return GS_NOMEM;
    row->full = true;
    if (!row_finite(served, n))
        row->nonfinite |= GS_VAL_NONFINITE_SERVED;
    if (!row_finite(ref, n))
        row->nonfinite |= GS_VAL_NONFINITE_REF;
    if (row->nonfinite)
        return GS_OK;

    double margin;
    row->top1_ref = argmax_margin(ref, n, &margin);
    row->ref_margin = isnan(ref_margin) ? margin : ref_margin;
    double unused;
    row->top1_served = argmax_margin(served, n, &unused);
    row->top1_match = row->top1_served == row->top1_ref;
    double mae = 0;
    for (int32_t i = 0; i < n; i++)
        mae = fmax(mae, fabs((double)served[i] - (double)ref[i]));
    row->max_abs_err = mae;
    row->pearson = pearson(served, ref, n, mae);
    row->kl = kl_div(ref, served, n);

    struct gs_sample_logprob top[GS_VAL_TOPK];
    int32_t ids[GS_VAL_TOPK];
    row->topk = GS_MIN(GS_VAL_TOPK, n);
    gs_sample_top_logprobs(ref, n, row->topk, top, NULL);
    for (int32_t i = 0; i < row->topk; i++)
        ids[i] = top[i].token;
    row->topk_overlap = (double)overlap_with(served, n, ids, row->topk) / row->topk;
    return GS_OK;
}

enum gs_status gs_val_add_top(struct gs_val_report *r, int32_t pos, const float *served,
                              const int32_t *ref_ids, const float *ref_logits, int32_t n_ref,
                              double ref_margin, struct gs_err *err)
{
    int32_t n = r->n_vocab;
    if (n_ref < 1 || n_ref > GS_VAL_PARTIAL_MAX || n_ref > n)
        return gs_err_set(err, GS_INVAL, "position %d: %d reference entries, want 1..%d", (int)pos,
                          (int)n_ref, (int)GS_MIN(GS_VAL_PARTIAL_MAX, n));
    for (int32_t j = 0; j < n_ref; j++) {
        if (ref_ids[j] < 0 || ref_ids[j] >= n)
            return gs_err_set(err, GS_INVAL, "position %d: reference id[%d] = %d outside [0, %d)",
                              (int)pos, (int)j, (int)ref_ids[j], (int)n);
        if (j > 0 && ref_logits[j] > ref_logits[j - 1])
            return gs_err_set(err, GS_INVAL,
                              "position %d: reference logit[%d] exceeds logit[%d] (not best first)",
                              (int)pos, (int)j, (int)j - 1);
    }
    if (ref_margin < 0)
        return gs_err_set(err, GS_INVAL, "position %d: reference margin %g is negative", (int)pos,
                          ref_margin);
    struct gs_val_row *row = row_push(r, pos, err);
    if (!row)
        return GS_NOMEM;
    row->full = false;
    if (!row_finite(served, n))
        row->nonfinite |= GS_VAL_NONFINITE_SERVED;
    if (!row_finite(ref_logits, n_ref) || isnan(ref_margin) || isinf(ref_margin))
        row->nonfinite |= GS_VAL_NONFINITE_REF;
    if (row->nonfinite)
        return GS_OK;

    double unused;
    row->top1_ref = ref_ids[0];
    row->ref_margin = ref_margin;
    row->top1_served = argmax_margin(served, n, &unused);
    row->top1_match = row->top1_served == row->top1_ref;
    double mae = 0;
    for (int32_t j = 0; j < n_ref; j++)
        mae = fmax(mae, fabs((double)served[ref_ids[j]] - (double)ref_logits[j]));
    row->max_abs_err = mae;
    row->topk = n_ref;
    row->topk_overlap = (double)overlap_with(served, n, ref_ids, n_ref) / n_ref;
    return GS_OK;
}

static void reason_add(struct gs_val_report *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void reason_add(struct gs_val_report *r, const char *fmt, ...)
{
    size_t used = strcmp(r->reason, "ok") ? strlen(r->reason) : 0;
    if (used == 0)
        r->reason[0] = '\0';
    else if (used + 2 < sizeof(r->reason)) {
        strcpy(r->reason + used, "; ");
        used += 2;
    }
    if (used + 1 >= sizeof(r->reason))
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->reason + used, sizeof(r->reason) - used, fmt, ap);
    va_end(ap);
}

void gs_val_finish(struct gs_val_report *r)
{
    int32_t n_finite = 0, n_full_finite = 0;
    double sum_overlap = 0, sum_pearson = 0, sum_kl = 0;
    const struct gs_val_row *first_required = NULL;

    r->n_full = 0;
    r->n_nonfinite = 0;
    r->first_divergence = -1;
    r->first_nonfinite = -1;
    r->n_top1_match = 0;
    r->min_pearson = 0;
    r->max_abs_err = 0;
    r->max_kl = 0;
    for (int32_t i = 0; i < r->n_rows; i++) {
        const struct gs_val_row *row = &r->rows[i];
        r->n_full += row->full;
        if (row->nonfinite) {
            if (r->n_nonfinite++ == 0)
                r->first_nonfinite = row->pos;
            continue;
        }
        n_finite++;
        sum_overlap += row->topk_overlap;
        r->max_abs_err = fmax(r->max_abs_err, row->max_abs_err);
        if (row->top1_match)
            r->n_top1_match++;
        else if (r->first_divergence < 0)
            r->first_divergence = row->pos;
        if (!row->top1_match && r->thr.top1_margin >= 0 && row->ref_margin >= r->thr.top1_margin &&
            !first_required)
            first_required = row;
        if (row->full) {
            r->min_pearson = n_full_finite ? fmin(r->min_pearson, row->pearson) : row->pearson;
            n_full_finite++;
            sum_pearson += row->pearson;
            sum_kl += row->kl;
            r->max_kl = fmax(r->max_kl, row->kl);
        }
    }
    r->top1_rate = n_finite ? (double)r->n_top1_match / n_finite : 0;
    r->mean_topk_overlap = n_finite ? sum_overlap / n_finite : 0;
    r->mean_pearson = n_full_finite ? sum_pearson / n_full_finite : 0;
    r->mean_kl = n_full_finite ? sum_kl / n_full_finite : 0;

    strcpy(r->reason, "ok");
    if (r->n_rows == 0)
        reason_add(r, "no positions compared");
    if (r->n_nonfinite)
        reason_add(r, "non-finite logits at %d position%s (first: position %d)",
                   (int)r->n_nonfinite, r->n_nonfinite == 1 ? "" : "s", (int)r->first_nonfinite);
    if (first_required)
        reason_add(r,
                   "position %d: top-1 differs (served %d, reference %d) where the reference "
                   "margin %.4g >= %.4g",
                   (int)first_required->pos, (int)first_required->top1_served,
                   (int)first_required->top1_ref, first_required->ref_margin, r->thr.top1_margin);
    /* One disagreement is never enough on its own: over fewer than 1 / (1 - rate) rows
     * (20 at 0.95) the rate would demand that every row agree, forbidding the single
     * near-tie flip the margin rule allows; a clear winner that changes fails above. */
    if (n_finite && r->top1_rate < r->thr.min_top1_rate && n_finite - r->n_top1_match > 1)
        reason_add(r, "top-1 agreement %.4f < %.4f", r->top1_rate, r->thr.min_top1_rate);
    if (n_full_finite && r->min_pearson < r->thr.min_pearson)
        reason_add(r, "min Pearson %.6f < %.6f", r->min_pearson, r->thr.min_pearson);
    if (n_full_finite && r->thr.max_mean_kl >= 0 && r->mean_kl > r->thr.max_mean_kl)
        reason_add(r, "mean KL %.3g > %.3g", r->mean_kl, r->thr.max_mean_kl);
    if (n_finite && r->thr.max_abs_err >= 0 && r->max_abs_err > r->thr.max_abs_err)
        reason_add(r, "max abs error %.4g > %.4g", r->max_abs_err, r->thr.max_abs_err);
    r->pass = !strcmp(r->reason, "ok");
}

enum gs_status gs_val_compare(const float *served, const float *ref, const float *margins,
                              int32_t n_pos, int32_t n_vocab, const struct gs_val_thresholds *thr,
                              struct gs_val_report **out, struct gs_err *err)
{
    if (n_pos < 0 || (n_pos > 0 && (!served || !ref)))
        return gs_err_set(err, GS_INVAL, "compare: bad matrices (%d positions)", (int)n_pos);
    struct gs_val_report *r;
    enum gs_status rc = gs_val_report_new(n_vocab, thr, &r, err);
    if (rc != GS_OK)
        return rc;
    for (int32_t i = 0; i < n_pos; i++) {
        size_t off = (size_t)i * (size_t)n_vocab;
        rc =
            gs_val_add_full(r, i, served + off, ref + off, margins ? (double)margins[i] : NAN, err);
        if (rc != GS_OK) {
            gs_val_report_free(r);
            return rc;
        }
    }
    gs_val_finish(r);
    *out = r;
    return GS_OK;
}
