/*
 * engine/validate/report.c - a validation report as text and as JSON.
 */
#include "engine/validate.h"

#include <math.h>

static const char *nonfinite_text(uint32_t bits)
{
    switch (bits & (GS_VAL_NONFINITE_SERVED | GS_VAL_NONFINITE_REF)) {
    case GS_VAL_NONFINITE_SERVED:
        return "served";
    case GS_VAL_NONFINITE_REF:
        return "reference";
    default:
        return "served and reference";
    }
}

static void print_row(const struct gs_val_row *row, FILE *f)
{
    if (row->nonfinite) {
        fprintf(f, "  pos %5d  non-finite logits in %s\n", (int)row->pos,
                nonfinite_text(row->nonfinite));
        return;
    }
    fprintf(f, "  pos %5d  top1 %6d/%-6d %s  margin %8.4f  top%-2d %.2f  max_abs %.3e",
            (int)row->pos, (int)row->top1_served, (int)row->top1_ref,
            row->top1_match ? "  " : "!=", row->ref_margin, (int)row->topk, row->topk_overlap,
            row->max_abs_err);
    if (row->full)
        fprintf(f, "  pearson %.6f  kl %.3e", row->pearson, row->kl);
    fputc('\n', f);
}

void gs_val_report_print(const struct gs_val_report *r, FILE *f, unsigned flags)
{
    int32_t n_finite = r->n_rows - r->n_nonfinite;
    fprintf(f, "positions      %d (%d with full reference rows, %d non-finite), n_vocab %d\n",
            (int)r->n_rows, (int)r->n_full, (int)r->n_nonfinite, (int)r->n_vocab);
    fprintf(f, "top-1          %d/%d = %.4f (min %.4f)\n", (int)r->n_top1_match, (int)n_finite,
            r->top1_rate, r->thr.min_top1_rate);
    if (r->first_divergence >= 0)
        fprintf(f, "first diverges at position %d\n", (int)r->first_divergence);
    else
        fprintf(f, "first diverges nowhere\n");
    fprintf(f, "top-k overlap  mean %.4f\n", r->mean_topk_overlap);
    fprintf(f, "max abs error  %.4e\n", r->max_abs_err);
    if (r->n_full > 0) {
        fprintf(f, "pearson        mean %.6f  min %.6f (min allowed %.6f)\n", r->mean_pearson,
                r->min_pearson, r->thr.min_pearson);
        fprintf(f, "KL(ref||served) mean %.4e  max %.4e\n", r->mean_kl, r->max_kl);
    }
    if (flags & GS_VAL_PRINT_ROWS)
        for (int32_t i = 0; i < r->n_rows; i++)
            print_row(&r->rows[i], f);
    fprintf(f, "verdict        %s%s%s\n", r->pass ? "PASS" : "FAIL", r->pass ? "" : ": ",
            r->pass ? "" : r->reason);
}

/* A real, or null where the figure is undefined; jansson refuses NaN anyway. */
static json_t *real_or_null(double x, bool defined)
{
    return defined && isfinite(x) ? json_real(x) : json_null();
}

static json_t *row_json(const struct gs_val_row *row)
{
    bool ok = row->nonfinite == 0;
    json_t *o = json_object();
    if (!o)
        return NULL;
    int bad = 0;
    bad |= json_object_set_new(o, "pos", json_integer(row->pos));
    bad |= json_object_set_new(o, "full", json_boolean(row->full));
    bad |= json_object_set_new(o, "nonfinite",
                               ok ? json_null() : json_string(nonfinite_text(row->nonfinite)));
    bad |= json_object_set_new(o, "top1_served", ok ? json_integer(row->top1_served) : json_null());
    bad |= json_object_set_new(o, "top1_ref", ok ? json_integer(row->top1_ref) : json_null());
    bad |= json_object_set_new(o, "top1_match", ok ? json_boolean(row->top1_match) : json_null());
    bad |= json_object_set_new(o, "ref_margin", real_or_null(row->ref_margin, ok));
    bad |= json_object_set_new(o, "topk", json_integer(row->topk));
    bad |= json_object_set_new(o, "topk_overlap", real_or_null(row->topk_overlap, ok));
    bad |= json_object_set_new(o, "max_abs_err", real_or_null(row->max_abs_err, ok));
    bad |= json_object_set_new(o, "pearson", real_or_null(row->pearson, ok && row->full));
    bad |= json_object_set_new(o, "kl", real_or_null(row->kl, ok && row->full));
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *gs_val_report_json(const struct gs_val_report *r, unsigned flags)
{
    int32_t n_finite = r->n_rows - r->n_nonfinite;
    int32_t n_full_finite = 0;
    for (int32_t i = 0; i < r->n_rows; i++)
        n_full_finite += r->rows[i].full && !r->rows[i].nonfinite;
    bool any = n_finite > 0, any_full = n_full_finite > 0;

    json_t *thr =
        json_pack("{s:f, s:f, s:f, s:f, s:f}", "min_pearson", r->thr.min_pearson, "min_top1_rate",
                  r->thr.min_top1_rate, "top1_margin", r->thr.top1_margin, "max_mean_kl",
                  r->thr.max_mean_kl, "max_abs_err", r->thr.max_abs_err);
    json_t *o = json_object();
    if (!thr || !o)
        goto out_nomem;
    int bad = 0;
    bad |= json_object_set_new(o, "pass", json_boolean(r->pass));
    bad |= json_object_set_new(o, "reason", json_string(r->reason));
    bad |= json_object_set_new(o, "n_vocab", json_integer(r->n_vocab));
    bad |= json_object_set_new(o, "n_positions", json_integer(r->n_rows));
    bad |= json_object_set_new(o, "n_full", json_integer(r->n_full));
    bad |= json_object_set_new(o, "n_nonfinite", json_integer(r->n_nonfinite));
    bad |= json_object_set_new(o, "first_divergence",
                               r->first_divergence >= 0 ? json_integer(r->first_divergence)
                                                        : json_null());
    bad |= json_object_set_new(o, "first_nonfinite",
                               r->first_nonfinite >= 0 ? json_integer(r->first_nonfinite)
                                                       : json_null());
    bad |= json_object_set_new(o, "n_top1_match", json_integer(r->n_top1_match));
    bad |= json_object_set_new(o, "top1_rate", real_or_null(r->top1_rate, any));
    bad |= json_object_set_new(o, "mean_topk_overlap", real_or_null(r->mean_topk_overlap, any));
    bad |= json_object_set_new(o, "max_abs_err", real_or_null(r->max_abs_err, any));
    bad |= json_object_set_new(o, "mean_pearson", real_or_null(r->mean_pearson, any_full));
    bad |= json_object_set_new(o, "min_pearson", real_or_null(r->min_pearson, any_full));
    bad |= json_object_set_new(o, "mean_kl", real_or_null(r->mean_kl, any_full));
    bad |= json_object_set_new(o, "max_kl", real_or_null(r->max_kl, any_full));
    bad |= json_object_set_new(o, "thresholds", thr);
    thr = NULL;
    if (flags & GS_VAL_PRINT_ROWS) {
        json_t *rows = json_array();
        bad |= json_object_set_new(o, "rows", rows);
        for (int32_t i = 0; rows && i < r->n_rows; i++)
            bad |= json_array_append_new(rows, row_json(&r->rows[i]));
    }
    if (bad)
        goto out_nomem;
    return o;

out_nomem:
    json_decref(thr);
    json_decref(o);
    return NULL;
}
