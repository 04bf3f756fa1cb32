/*
 * engine/validate.h - how closely one source of logits (the served backend)
 * agrees with another (a reference: the `ref` backend or llama.cpp goldens),
 * position by position, with a pass/fail verdict; and the loader for the
 * golden completion files under ../shared/golden/completions.
 *
 * Figures for one position (one row of n_vocab logits), served vs reference:
 *   - top-1 agreement: same argmax (ties go to the lowest id);
 *   - top-k overlap: |topK(served) ∩ topK(ref)| / K, K = GS_VAL_TOPK (10) for
 *     a full reference row, or the length of a partial reference's list;
 *   - Pearson correlation of the two rows (full rows only);
 *   - max abs error: over the row, or over the partial reference's entries;
 *   - KL(softmax(ref) || softmax(served)) in nats, computed in double from
 *     log-softmax with the maximum subtracted (full rows only);
 *   - the reference margin: its top-1 logit minus its top-2 logit.
 * A reference row is either full (all n_vocab logits: gs_val_add_full) or
 * partial (its top few ids and logits plus its margin, which is what golden
 * decode steps record: gs_val_add_top).
 *
 * Verdict (gs_val_finish): fails, with every failed check in .reason, when
 *   - any row holds NaN or Inf, in either source (such a row's figures are
 *     not computed and never enter an aggregate; the JSON shows them as null);
 *   - a row whose reference margin >= thr.top1_margin disagrees at top-1;
 *   - the top-1 agreement rate < thr.min_top1_rate and more than one row
 *     disagrees (over few rows the rate alone would forbid the one near-tie
 *     flip the margin rule allows);
 *   - the smallest Pearson over full rows < thr.min_pearson;
 *   - the mean KL over full rows > thr.max_mean_kl (when that check is on);
 *   - the max abs error > thr.max_abs_err (when that check is on);
 *   - no row was compared.
 *
 * Ownership: a report owns its rows; free it with gs_val_report_free. The
 * JSON built by gs_val_report_json is a new reference the caller decrefs.
 * Input rows are read during the add call only. A golden owns all its arrays;
 * free it with gs_val_golden_free.
 *
 * Threads: a report belongs to one thread at a time; goldens are immutable
 * once loaded and may be shared.
 *
 * Example (teacher-forced check of a backend against a golden file):
 *     struct gs_val_golden *g;
 *     gs_val_golden_load(path, &g, &err);
 *     int32_t n = gs_val_golden_n_eval(g);       // tokens to evaluate
 *     ... evaluate g->prompt_tokens then g->completion_tokens, n tokens in
 *         all, keeping the logits of every position in served[n][n_vocab] ...
 *     struct gs_val_report *r;
 *     gs_val_golden_compare(g, served, n, NULL, &r, &err);
 *     gs_val_report_print(r, stdout, 0);
 *     bool ok = r->pass;
 *     gs_val_report_free(r);
 *     gs_val_golden_free(g);
 */
#ifndef GS_VALIDATE_H
#define GS_VALIDATE_H

#include <jansson.h>
#include <stdio.h>

#include "engine/base.h"

#define GS_VAL_TOPK        10 /* K of the top-k overlap on full rows */
#define GS_VAL_PARTIAL_MAX 20 /* longest partial reference list */

/* ---- thresholds -------------------------------------------------------------- */

struct gs_val_thresholds {
    double min_pearson;   /* smallest allowed Pearson of any full row; 0.999 */
    double min_top1_rate; /* smallest allowed fraction of top-1 agreement; 0.95 */
    /* Rows whose reference margin is >= this must agree at top-1: a clear
     * winner must not change. 0.5 (logits). Negative: no such check. */
    double top1_margin;
    /* Largest allowed mean KL over full rows, nats. 0.01. Negative: off. */
    double max_mean_kl;
    /* Largest allowed max abs error, logits. Negative (default): off, since
     * logit scales differ between models. */
    double max_abs_err;
};

/* Fills t with the defaults given on each field. */
void gs_val_thresholds_init(struct gs_val_thresholds *t);

/* ---- reports ------------------------------------------------------------------ */

/* Which source of a row held NaN or Inf (bit set). */
#define GS_VAL_NONFINITE_SERVED 1u
#define GS_VAL_NONFINITE_REF    2u

/* The figures of one position. */
struct gs_val_row {
    int32_t pos;         /* the caller's label: position in the token sequence */
    bool full;           /* reference row was full: pearson and kl are set */
    uint32_t nonfinite;  /* GS_VAL_NONFINITE_* bits; if any, figures below are 0 */
    int32_t top1_served; /* argmax of the served row */
    int32_t top1_ref;    /* argmax of the reference row */
    bool top1_match;
    double ref_margin;   /* reference top-1 minus top-2 logit */
    int32_t topk;        /* K used for topk_overlap */
    double topk_overlap; /* in [0, 1] */
    double pearson;      /* in [-1, 1]; full rows only */
    double max_abs_err;  /* >= 0 */
    double kl;           /* >= 0, nats; full rows only */
};

struct gs_val_report {
    int32_t n_vocab;
    struct gs_val_thresholds thr;
    struct gs_val_row *rows; /* [n_rows], owned, in the order added */
    int32_t n_rows;
    int32_t n_full;      /* rows with a full reference */
    int32_t n_nonfinite; /* rows with NaN/Inf in either source */

    /* Set by gs_val_finish(), over finite rows (full ones for Pearson/KL).
     * An aggregate over no row is 0; see the counts. */
    int32_t first_divergence; /* .pos of the first row whose top-1 differs; -1 if none */
    int32_t first_nonfinite;  /* .pos of the first non-finite row; -1 if none */
    int32_t n_top1_match;
    double top1_rate;
    double mean_topk_overlap;
    double mean_pearson;
    double min_pearson;
    double max_abs_err;
    double mean_kl;
    double max_kl;
    bool pass;
    char reason[512]; /* "ok", or every failed check, "; "-separated */
    int32_t cap_rows; /* private: allocated rows */
};

/*
 * Creates an empty report for rows of n_vocab logits, judged by thr (NULL:
 * defaults; the thresholds are copied). GS_INVAL for n_vocab <= 0 or a NaN
 * threshold; GS_NOMEM.
 */
enum gs_status gs_val_report_new(int32_t n_vocab, const struct gs_val_thresholds *thr,
                                 struct gs_val_report **out, struct gs_err *err);
void gs_val_report_free(struct gs_val_report *r); /* NULL is a no-op */

/*
 * Adds one position with a full reference row. ref_margin: the reference
 * margin to judge this row by, or NAN to compute it from ref. Non-finite
 * values are recorded in the row, not refused. GS_NOMEM only.
 */
enum gs_status gs_val_add_full(struct gs_val_report *r, int32_t pos, const float *served,
                               const float *ref, double ref_margin, struct gs_err *err);

/*
 * Adds one position whose reference is only its n_ref best tokens (ids and
 * logits, best first, 1 <= n_ref <= GS_VAL_PARTIAL_MAX) and its margin.
 * GS_INVAL (naming the entry) for an id outside [0, n_vocab), logits out of
 * order or a negative margin; GS_NOMEM.
 */
enum gs_status gs_val_add_top(struct gs_val_report *r, int32_t pos, const float *served,
                              const int32_t *ref_ids, const float *ref_logits, int32_t n_ref,
                              double ref_margin, struct gs_err *err);

/* Computes the aggregates and the verdict from the rows so far. May be
 * called again after more rows are added. */
void gs_val_finish(struct gs_val_report *r);

/*
 * Convenience: a report over two [n_pos][n_vocab] matrices, row i labelled
 * position i, finished. margins: [n_pos] reference margins or NULL.
 */
enum gs_status gs_val_compare(const float *served, const float *ref, const float *margins,
                              int32_t n_pos, int32_t n_vocab, const struct gs_val_thresholds *thr,
                              struct gs_val_report **out, struct gs_err *err);

/* gs_val_report_print flags. */
#define GS_VAL_PRINT_ROWS 1u /* one line per row, not only the summary */

/* Writes the report as text: summary, verdict, and rows if asked. */
void gs_val_report_print(const struct gs_val_report *r, FILE *f, unsigned flags);

/*
 * The report as a JSON object: {"pass", "reason", "n_rows", ..., "thresholds":
 * {...}, "rows": [...] (with GS_VAL_PRINT_ROWS)}. Figures that are undefined
 * (non-finite rows, Pearson/KL of partial rows) are null, never NaN. Returns
 * a new reference (caller json_decref()s), NULL only when out of memory.
 */
json_t *gs_val_report_json(const struct gs_val_report *r, unsigned flags);

/* ---- golden completion files --------------------------------------------------- */

/* One greedy decode step of a golden: the token llama.cpp chose and the best
 * few logits at that point. */
struct gs_val_golden_step {
    int32_t token; /* chosen token = top_ids[0] */
    float logit;   /* its logit */
    float margin;  /* logit minus the runner-up's, >= 0 */
    int32_t n_top; /* entries in top_ids/top_logits, 1..GS_VAL_PARTIAL_MAX */
    int32_t top_ids[GS_VAL_PARTIAL_MAX];
    float top_logits[GS_VAL_PARTIAL_MAX];
};

/*
 * A golden completion: prompt tokens with the logits llama.cpp computed at
 * every prompt position, then greedy decode steps. Logits of step i come from
 * the position that holds completion_tokens[i - 1] (step 0: the last prompt
 * position, whose full row is last_logits).
 */
struct gs_val_golden {
    char *model;  /* GGUF file name, e.g. "stories260K.gguf" */
    char *prompt; /* prompt text */
    int32_t n_vocab;
    int32_t bos_id, eos_id;
    bool add_bos;
    int32_t n_prompt;
    int32_t *prompt_tokens; /* [n_prompt] */
    float *prompt_logits;   /* [n_prompt][n_vocab] */
    float *last_logits;     /* [n_vocab]: logits after the last prompt token */
    int32_t n_gen;          /* n_generated */
    int32_t n_predict;
    bool stopped_eog;
    int32_t *completion_tokens;       /* [n_gen] */
    struct gs_val_golden_step *steps; /* [n_gen] */
    /* settings.kv_cache_type ("f16", "f32"), "" when the file has none. */
    char kv_cache_type[16];
};

/*
 * Loads and checks a golden file: every field listed in struct gs_val_golden
 * must be present with the right JSON type and consistent shapes (rows of
 * n_vocab logits, n_prompt rows, n_generated steps and completion tokens,
 * ids in [0, n_vocab), step i's "i" = i, its token = completion_tokens[i] =
 * top5[0] id, finite logits; "settings" is optional). GS_FORMAT names the field ("steps[3].top5[1]:
 * expected [id, logit]"); GS_IO for an unreadable file; GS_NOMEM.
 */
enum gs_status gs_val_golden_load(const char *path, struct gs_val_golden **out, struct gs_err *err);

/* The same from JSON text (len bytes, not necessarily NUL-terminated). */
enum gs_status gs_val_golden_parse(const char *text, size_t len, struct gs_val_golden **out,
                                   struct gs_err *err);

void gs_val_golden_free(struct gs_val_golden *g); /* NULL is a no-op */

/*
 * Tokens a teacher-forced evaluation of g runs: the prompt, then every
 * completion token but the last (whose logits no step needs), i.e.
 * n_prompt + n_gen - 1 tokens (n_prompt when n_gen is 0). gs_val_golden_token
 * returns the i-th of them.
 */
int32_t gs_val_golden_n_eval(const struct gs_val_golden *g);
int32_t gs_val_golden_token(const struct gs_val_golden *g, int32_t i);

/*
 * Compares served[n_eval][n_vocab] (logits at every evaluated position, see
 * gs_val_golden_n_eval) with g: full rows for the prompt positions (the last
 * judged by step 0's margin), partial rows from the steps' top lists for the
 * rest. GS_INVAL if n_eval != gs_val_golden_n_eval(g); GS_NOMEM. The report
 * is finished.
 */
enum gs_status gs_val_golden_compare(const struct gs_val_golden *g, const float *served,
                                     int32_t n_eval, const struct gs_val_thresholds *thr,
                                     struct gs_val_report **out, struct gs_err *err);

#endif /* GS_VALIDATE_H */
