/*
 * tests/engine/test_validate.c - engine/validate: figures on hand-computed
 * rows, aggregates and verdict, non-finite input, the text and JSON reports,
 * and the golden loader on every shared golden and on malformed ones.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/validate.h"
#include "tests/common/testutil.h"

static struct gs_val_report *compare(const float *served, const float *ref, int32_t n_pos,
                                     int32_t n_vocab)
{
    struct gs_val_report *r = NULL;
    struct gs_err err = {0};
    cr_assert_eq(gs_val_compare(served, ref, NULL, n_pos, n_vocab, NULL, &r, &err), GS_OK, "%s",
                 err.msg);
    return r;
}

/* Test-local generator for rows (no libc rand). */
static uint64_t lcg = 0x2545F4914F6CDD1Dull;
static float rnd(void)
{
    lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(lcg >> 11) * 0x1.0p-53 * 10.0 - 5.0);
}

/* ---- figures ------------------------------------------------------------------ */

Test(val_compare, identical_rows_are_perfect)
{
    enum { P = 6, V = 50 };
    static float m[P * V];
    for (int i = 0; i < P * V; i++)
        m[i] = rnd();
    struct gs_val_report *r = compare(m, m, P, V);
    cr_assert_eq(r->n_rows, P);
    cr_assert_eq(r->n_full, P);
    cr_assert_eq(r->n_top1_match, P);
    cr_assert_float_eq(r->top1_rate, 1.0, 0);
    cr_assert_float_eq(r->mean_topk_overlap, 1.0, 0);
    cr_assert_float_eq(r->min_pearson, 1.0, 1e-12);
    cr_assert_float_eq(r->mean_pearson, 1.0, 1e-12);
    cr_assert_eq(r->max_abs_err, 0.0);
    cr_assert_eq(r->mean_kl, 0.0);
    cr_assert_eq(r->max_kl, 0.0);
    cr_assert_eq(r->first_divergence, -1);
    cr_assert(r->pass, "%s", r->reason);
    cr_assert_str_eq(r->reason, "ok");
    gs_val_report_free(r);
}

Test(val_compare, linear_transform_has_pearson_one)
{
    enum { V = 40 };
    float ref[V], served[V];
    for (int i = 0; i < V; i++) {
        ref[i] = rnd();
        served[i] = 2.0f * ref[i] + 3.0f;
    }
    struct gs_val_report *r = compare(served, ref, 1, V);
    cr_assert_float_eq(r->rows[0].pearson, 1.0, 1e-6);
    cr_assert(r->rows[0].top1_match);
    cr_assert_float_eq(r->rows[0].topk_overlap, 1.0, 0);
    cr_assert(r->rows[0].kl > 0, "a scaled row is a sharper distribution");
    gs_val_report_free(r);
    /* A pure shift leaves the softmax unchanged: KL 0, error = the shift. */
    for (int i = 0; i < V; i++)
        served[i] = ref[i] + 5.0f;
    r = compare(served, ref, 1, V);
    cr_assert_float_eq(r->rows[0].kl, 0.0, 1e-12);
    cr_assert_float_eq(r->rows[0].max_abs_err, 5.0, 1e-5);
    /* ... which the default thresholds accept: max abs error is off. */
    cr_assert(r->pass, "%s", r->reason);
    gs_val_report_free(r);
}

Test(val_compare, pearson_and_kl_by_hand)
{
    /* a = {1,2,3}, b = {1,3,2}: deviations {-1,0,1} and {-1,1,0}, r = 1/2. */
    struct gs_val_report *r = compare((float[]){1, 3, 2}, (float[]){1, 2, 3}, 1, 3);
    cr_assert_float_eq(r->rows[0].pearson, 0.5, 1e-12);
    cr_assert_float_eq(r->rows[0].max_abs_err, 1.0, 0);
    gs_val_report_free(r);
    /* ref {0, 0}: p = {1/2, 1/2}; served {0, ln 3}: q = {1/4, 3/4}.
     * KL(p||q) = 1/2 ln 2 + 1/2 ln(2/3) = 1/2 ln(4/3). */
    r = compare((float[]){0, (float)log(3.0)}, (float[]){0, 0}, 1, 2);
    cr_assert_float_eq(r->rows[0].kl, 0.5 * log(4.0 / 3.0), 1e-7);
    /* ref is constant and served is not: no correlation to speak of. */
    cr_assert_float_eq(r->rows[0].pearson, 0.0, 0);
    gs_val_report_free(r);
}

Test(val_compare, permuted_top1_is_detected)
{
    enum { V = 30 };
    float ref[V], served[V];
    for (int i = 0; i < V; i++)
        ref[i] = (float)i * 0.1f; /* argmax 29, margin 0.1 */
    ref[7] = 9.0f;                /* argmax 7, margin 9 - 2.9 */
    memcpy(served, ref, sizeof(ref));
    served[7] = ref[12];
    served[12] = ref[7];
    struct gs_val_report *r = compare(served, ref, 1, V);
    cr_assert_not(r->rows[0].top1_match);
    cr_assert_eq(r->rows[0].top1_ref, 7);
    cr_assert_eq(r->rows[0].top1_served, 12);
    cr_assert_float_eq(r->rows[0].ref_margin, 9.0 - 2.9, 1e-5);
    cr_assert_eq(r->first_divergence, 0);
    cr_assert_not(r->pass);
    cr_assert(strstr(r->reason, "position 0: top-1 differs"), "%s", r->reason);
    gs_val_report_free(r);
}

Test(val_compare, top10_overlap_by_hand)
{
    enum { V = 20 };
    float ref[V], served[V];
    for (int i = 0; i < V; i++)
        ref[i] = served[i] = (float)i; /* top-10: ids 10..19 */
    served[10] = served[11] = -100.0f; /* served top-10: 8, 9, 12..19 */
    struct gs_val_report *r = compare(served, ref, 1, V);
    cr_assert_eq(r->rows[0].topk, 10);
    cr_assert_float_eq(r->rows[0].topk_overlap, 0.8, 1e-12);
    cr_assert(r->rows[0].top1_match);
    gs_val_report_free(r);
}

Test(val_compare, first_divergence_and_rate)
{
    enum { P = 5, V = 8 };
    float ref[P * V], served[P * V];
    for (int p = 0; p < P; p++)
        for (int i = 0; i < V; i++)
            ref[p * V + i] = served[p * V + i] = (float)((i * 3 + p) % V);
    /* Rows 2 and 4: swap the two best in served. */
    for (int p = 2; p < P; p += 2) {
        float *s = served + p * V;
        int a = 0, b = 0;
        for (int i = 0; i < V; i++) {
            if (s[i] == V - 1)
                a = i;
            if (s[i] == V - 2)
                b = i;
        }
        s[a] = V - 2;
        s[b] = V - 1;
    }
    struct gs_val_report *r = compare(served, ref, P, V);
    cr_assert_eq(r->first_divergence, 2);
    cr_assert_eq(r->n_top1_match, 3);
    cr_assert_float_eq(r->top1_rate, 0.6, 1e-12);
    cr_assert_not(r->pass);
    cr_assert(strstr(r->reason, "top-1 agreement 0.6000 < 0.9500"), "%s", r->reason);
    gs_val_report_free(r);
}

Test(val_compare, small_margin_disagreement_is_tolerated)
{
    /* 20 rows, one of which flips a near tie (margin 0.01): rate 0.95 passes,
     * and no required row disagrees. */
    enum { P = 20, V = 16 };
    static float ref[P * V], served[P * V];
    for (int i = 0; i < P * V; i++)
        ref[i] = served[i] = rnd();
    float *s = served + 7 * V, *q = ref + 7 * V;
    for (int i = 0; i < V; i++)
        q[i] = s[i] = (float)i * 0.5f;
    q[V - 2] = s[V - 2] = q[V - 1] - 0.01f;
    s[V - 2] = q[V - 1];
    s[V - 1] = q[V - 2];
    struct gs_val_thresholds t;
    gs_val_thresholds_init(&t);
    t.min_pearson = 0.99;
    struct gs_val_report *r = NULL;
    struct gs_err err = {0};
    cr_assert_eq(gs_val_compare(served, ref, NULL, P, V, &t, &r, &err), GS_OK);
    cr_assert_eq(r->first_divergence, 7);
    cr_assert_float_eq(r->top1_rate, 0.95, 1e-12);
    cr_assert(r->pass, "%s", r->reason);
    gs_val_report_free(r);
    /* The same row judged with a caller-given margin of 0.6 must agree. */
    float margins[P];
    for (int i = 0; i < P; i++)
        margins[i] = NAN;
    margins[7] = 0.6f;
    cr_assert_eq(gs_val_compare(served, ref, margins, P, V, &t, &r, &err), GS_OK);
    cr_assert_not(r->pass);
    cr_assert(strstr(r->reason, "position 7"), "%s", r->reason);
    gs_val_report_free(r);
}

/* Over 8 rows one near-tie flip (rate 0.875) passes, as over 20; a second fails the
 * rate: the rate never forbids the one flip the margin rule allows. */
Test(val_compare, one_near_tie_flip_over_few_rows_is_tolerated)
{
    enum { P = 8, V = 16 };
    static float ref[P * V], served[P * V];
    for (int flips = 1; flips <= 2; flips++) {
        for (int i = 0; i < P * V; i++)
            ref[i] = served[i] = rnd();
        for (int f = 0; f < flips; f++) {
            float *s = served + (2 + 3 * f) * V, *q = ref + (2 + 3 * f) * V;
            for (int i = 0; i < V; i++)
                q[i] = s[i] = (float)i * 0.5f;
            q[V - 2] = q[V - 1] - 0.01f;
            s[V - 2] = q[V - 1];
            s[V - 1] = q[V - 2];
        }
        struct gs_val_thresholds t;
        gs_val_thresholds_init(&t);
        t.min_pearson = 0.99;
        struct gs_val_report *r = NULL;
        struct gs_err err = {0};
        cr_assert_eq(gs_val_compare(served, ref, NULL, P, V, &t, &r, &err), GS_OK);
        cr_assert_eq(r->n_top1_match, P - flips);
        if (flips == 1)
            cr_expect(r->pass, "%s", r->reason);
        else
            cr_expect(strstr(r->reason, "top-1 agreement 0.7500 < 0.9500"), "%s", r->reason);
        gs_val_report_free(r);
    }
}

Test(val_compare, thresholds_are_applied)
{
    enum { V = 64 };
    float ref[V], served[V];
    for (int i = 0; i < V; i++) {
        ref[i] = rnd();
        served[i] = ref[i] + 0.3f * rnd(); /* same top-1 is not guaranteed: force it */
    }
    ref[5] = served[5] = 20.0f;
    struct gs_val_report *r = compare(served, ref, 1, V);
    cr_assert(r->min_pearson < 0.999);
    cr_assert_not(r->pass);
    cr_assert(strstr(r->reason, "min Pearson"), "%s", r->reason);
    gs_val_report_free(r);
    struct gs_val_thresholds t;
    gs_val_thresholds_init(&t);
    t.min_pearson = 0.9;
    t.max_mean_kl = -1;
    t.max_abs_err = 0.01;
    struct gs_err err = {0};
    cr_assert_eq(gs_val_compare(served, ref, NULL, 1, V, &t, &r, &err), GS_OK);
    cr_assert_not(r->pass);
    cr_assert(strstr(r->reason, "max abs error"), "%s", r->reason);
    cr_assert_null(strstr(r->reason, "Pearson"), "%s", r->reason);
    gs_val_report_free(r);
}

Test(val_compare, empty_report_fails)
{
    struct gs_val_report *r = NULL;
    struct gs_err err = {0};
    cr_assert_eq(gs_val_report_new(10, NULL, &r, &err), GS_OK);
    gs_val_finish(r);
    cr_assert_not(r->pass);
    cr_assert(strstr(r->reason, "no positions"), "%s", r->reason);
    gs_val_report_free(r);
    cr_assert_eq(gs_val_report_new(0, NULL, &r, &err), GS_INVAL);
}

/* ---- non-finite --------------------------------------------------------------- */

Test(val_nonfinite, nan_rows_fail_and_stay_out_of_figures)
{
    enum { P = 3, V = 10 };
    float ref[P * V], served[P * V];
    for (int i = 0; i < P * V; i++)
        ref[i] = served[i] = rnd();
    served[1 * V + 4] = NAN;
    ref[2 * V + 0] = INFINITY;
    struct gs_val_report *r = compare(served, ref, P, V);
    cr_assert_eq(r->n_nonfinite, 2);
    cr_assert_eq(r->first_nonfinite, 1);
    cr_assert_eq(r->rows[1].nonfinite, GS_VAL_NONFINITE_SERVED);
    cr_assert_eq(r->rows[2].nonfinite, GS_VAL_NONFINITE_REF);
    /* The one finite row is perfect; the figures never turn NaN. */
    cr_assert_float_eq(r->mean_pearson, 1.0, 1e-12);
    cr_assert_float_eq(r->top1_rate, 1.0, 0);
    cr_assert(isfinite(r->mean_kl) && isfinite(r->max_abs_err));
    cr_assert_not(r->pass);
    cr_assert(strstr(r->reason, "non-finite logits at 2 positions (first: position 1)"), "%s",
              r->reason);

    json_t *j = gs_val_report_json(r, GS_VAL_PRINT_ROWS);
    cr_assert_not_null(j);
    char *text = json_dumps(j, 0);
    cr_assert_not_null(text);
    cr_assert_null(strstr(text, "nan"), "%s", text);
    json_t *row1 = json_array_get(json_object_get(j, "rows"), 1);
    cr_assert_str_eq(json_string_value(json_object_get(row1, "nonfinite")), "served");
    cr_assert(json_is_null(json_object_get(row1, "pearson")));
    cr_assert(json_is_null(json_object_get(row1, "top1_match")));
    cr_assert_eq(json_is_false(json_object_get(j, "pass")), true);
    free(text);
    json_decref(j);
    gs_val_report_free(r);
}

Test(val_nonfinite, all_rows_nonfinite)
{
    float row[3] = {NAN, NAN, NAN};
    struct gs_val_report *r = compare(row, row, 1, 3);
    cr_assert_not(r->pass);
    json_t *j = gs_val_report_json(r, 0);
    cr_assert(json_is_null(json_object_get(j, "mean_pearson")));
    cr_assert(json_is_null(json_object_get(j, "top1_rate")));
    json_decref(j);
    gs_val_report_free(r);
}

/* ---- partial references ------------------------------------------------------------ */

Test(val_partial, top_list_figures)
{
    enum { V = 12 };
    float served[V];
    for (int i = 0; i < V; i++)
        served[i] = (float)i; /* best first: 11, 10, 9, ... */
    struct gs_val_report *r = NULL;
    struct gs_err err = {0};
    cr_assert_eq(gs_val_report_new(V, NULL, &r, &err), GS_OK);
    /* Reference agrees on 11 and 10, has 3 where served has 9. */
    const int32_t ids[3] = {11, 10, 3};
    const float lg[3] = {11.5f, 10.0f, 9.0f};
    cr_assert_eq(gs_val_add_top(r, 42, served, ids, lg, 3, 1.5, &err), GS_OK, "%s", err.msg);
    gs_val_finish(r);
    const struct gs_val_row *row = &r->rows[0];
    cr_assert_eq(row->pos, 42);
    cr_assert_not(row->full);
    cr_assert(row->top1_match);
    cr_assert_eq(row->topk, 3);
    cr_assert_float_eq(row->topk_overlap, 2.0 / 3.0, 1e-12);
    cr_assert_float_eq(row->max_abs_err, 6.0, 1e-6); /* served[3] = 3 vs 9 */
    cr_assert_eq(r->n_full, 0);
    /* No full rows: Pearson and KL are not judged, and are null in JSON. */
    cr_assert(r->pass, "%s", r->reason);
    json_t *j = gs_val_report_json(r, GS_VAL_PRINT_ROWS);
    cr_assert(json_is_null(json_object_get(j, "min_pearson")));
    cr_assert(json_is_null(json_object_get(json_array_get(json_object_get(j, "rows"), 0), "kl")));
    json_decref(j);
    gs_val_report_free(r);
}

Test(val_partial, rejects_bad_reference_lists)
{
    float served[4] = {0, 1, 2, 3};
    struct gs_val_report *r = NULL;
    struct gs_err err = {0};
    cr_assert_eq(gs_val_report_new(4, NULL, &r, &err), GS_OK);
    cr_assert_eq(gs_val_add_top(r, 0, served, (int32_t[]){3, 4}, (float[]){2, 1}, 2, 1, &err),
                 GS_INVAL);
    cr_assert(strstr(err.msg, "id[1]"), "%s", err.msg);
    cr_assert_eq(gs_val_add_top(r, 0, served, (int32_t[]){3, 2}, (float[]){1, 2}, 2, 1, &err),
                 GS_INVAL);
    cr_assert(strstr(err.msg, "logit[1]"), "%s", err.msg);
    cr_assert_eq(gs_val_add_top(r, 0, served, (int32_t[]){3}, (float[]){1}, 0, 1, &err), GS_INVAL);
    cr_assert_eq(gs_val_add_top(r, 0, served, (int32_t[]){3}, (float[]){1}, 1, -1, &err), GS_INVAL);
    cr_assert(strstr(err.msg, "margin"), "%s", err.msg);
    cr_assert_eq(r->n_rows, 0);
    gs_val_report_free(r);
}

/* ---- output --------------------------------------------------------------------------- */

Test(val_report, text_and_json_agree_with_the_struct)
{
    enum { V = 20 };
    float ref[2 * V], served[2 * V];
    for (int i = 0; i < 2 * V; i++) {
        ref[i] = rnd();
        served[i] = ref[i] + 0.001f * rnd();
    }
    struct gs_val_report *r = compare(served, ref, 2, V);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    gs_val_report_print(r, f, GS_VAL_PRINT_ROWS);
    fclose(f);
    cr_assert(strstr(buf, r->pass ? "verdict        PASS" : "verdict        FAIL"), "%s", buf);
    cr_assert(strstr(buf, "pos     1"), "%s", buf);
    free(buf);

    json_t *j = gs_val_report_json(r, 0);
    cr_assert_eq(json_is_true(json_object_get(j, "pass")), r->pass);
    cr_assert_eq(json_integer_value(json_object_get(j, "n_positions")), 2);
    cr_assert_float_eq(json_real_value(json_object_get(j, "min_pearson")), r->min_pearson, 0);
    cr_assert_float_eq(json_real_value(json_object_get(j, "mean_kl")), r->mean_kl, 0);
    cr_assert(json_is_null(json_object_get(j, "first_divergence")) == (r->first_divergence < 0));
    cr_assert_float_eq(
        json_real_value(json_object_get(json_object_get(j, "thresholds"), "min_pearson")), 0.999,
        0);
    cr_assert_null(json_object_get(j, "rows"));
    json_decref(j);
    gs_val_report_free(r);
}

/* ---- golden files ---------------------------------------------------------------------- */

static void check_golden_shape(const char *path)
{
    struct gs_val_golden *g = NULL;
    struct gs_err err = {0};
    cr_assert_eq(gs_val_golden_load(path, &g, &err), GS_OK, "%s", err.msg);
    cr_assert(g->n_vocab > 0 && g->n_prompt > 0, "%s", path);
    cr_assert_eq(g->prompt_tokens[0], g->add_bos ? g->bos_id : g->prompt_tokens[0], "%s", path);
    size_t nv = (size_t)g->n_vocab;
    /* last_logits is the last prompt row. */
    cr_assert_arr_eq(g->last_logits, g->prompt_logits + (g->n_prompt - 1) * nv, nv * sizeof(float),
                     "%s", path);
    /* Greedy: step 0 is the argmax of last_logits, with the recorded margin. */
    int32_t best = 0;
    for (size_t i = 1; i < nv; i++)
        if (g->last_logits[i] > g->last_logits[best])
            best = (int32_t)i;
    if (g->n_gen > 0) {
        cr_assert_eq(g->steps[0].token, best, "%s", path);
        cr_assert_float_eq(g->steps[0].logit, g->last_logits[best], 1e-4, "%s", path);
    }
    cr_assert(g->n_gen <= g->n_predict);
    cr_assert(g->stopped_eog || g->n_gen == g->n_predict, "%s", path);
    if (g->stopped_eog)
        cr_assert_eq(g->completion_tokens[g->n_gen - 1], g->eos_id, "%s", path);
    cr_assert_eq(gs_val_golden_n_eval(g), g->n_prompt + g->n_gen - 1);
    cr_assert(!strcmp(g->kv_cache_type, "f16") || !strcmp(g->kv_cache_type, "f32"), "%s: '%s'",
              path, g->kv_cache_type);
    gs_val_golden_free(g);
}

static int for_each_golden(const char *dir_rel, void (*fn)(const char *))
{
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", gs_test_shared_path(dir_rel));
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "%s", dir);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 5, ".json"))
            continue;
        char path[8192];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        fn(path);
        n++;
    }
    closedir(d);
    return n;
}

Test(val_golden, loads_every_completion_golden)
{
    int n = for_each_golden("golden/completions", check_golden_shape);
    cr_assert(n >= 70, "only %d goldens", n);
}

Test(val_golden, loads_every_architecture_golden)
{
    int n = for_each_golden("golden/arch", check_golden_shape);
    cr_assert(n >= 10, "only %d goldens", n);
}

/* Served logits that reproduce the golden: its full prompt rows, and for each
 * later step a row holding the step's top list with everything else far below. */
static float *golden_as_served(const struct gs_val_golden *g)
{
    int32_t n = gs_val_golden_n_eval(g);
    size_t nv = (size_t)g->n_vocab;
    float *s = malloc((size_t)n * nv * sizeof(float));
    cr_assert_not_null(s);
    memcpy(s, g->prompt_logits, (size_t)g->n_prompt * nv * sizeof(float));
    for (int32_t k = 1; k < g->n_gen; k++) {
        float *row = s + (size_t)(g->n_prompt - 1 + k) * nv;
        for (size_t i = 0; i < nv; i++)
            row[i] = -100.0f;
        for (int32_t j = 0; j < g->steps[k].n_top; j++)
            row[g->steps[k].top_ids[j]] = g->steps[k].top_logits[j];
    }
    return s;
}

Test(val_golden, compare_with_itself_passes_and_finds_a_flipped_step)
{
    struct gs_val_golden *g = NULL;
    struct gs_err err = {0};
    const char *path = gs_test_shared_path("golden/completions/stories260K__lily-and-tom.json");
    cr_assert_eq(gs_val_golden_load(path, &g, &err), GS_OK, "%s", err.msg);
    int32_t n = gs_val_golden_n_eval(g);
    float *served = golden_as_served(g);
    struct gs_val_report *r = NULL;
    cr_assert_eq(gs_val_golden_compare(g, served, n, NULL, &r, &err), GS_OK, "%s", err.msg);
    cr_assert_eq(r->n_rows, n);
    cr_assert_eq(r->n_full, g->n_prompt);
    cr_assert(r->pass, "%s", r->reason);
    cr_assert_float_eq(r->top1_rate, 1.0, 0);
    cr_assert_float_eq(r->mean_topk_overlap, 1.0, 0);
    gs_val_report_free(r);

    /* Swap the best two logits of the first step with a clear winner. */
    int32_t k = 1;
    while (k < g->n_gen && g->steps[k].margin < 0.5f)
        k++;
    cr_assert(k < g->n_gen);
    float *row = served + (size_t)(g->n_prompt - 1 + k) * (size_t)g->n_vocab;
    float t = row[g->steps[k].top_ids[0]];
    row[g->steps[k].top_ids[0]] = row[g->steps[k].top_ids[1]];
    row[g->steps[k].top_ids[1]] = t;
    cr_assert_eq(gs_val_golden_compare(g, served, n, NULL, &r, &err), GS_OK, "%s", err.msg);
    cr_assert_not(r->pass);
    cr_assert_eq(r->first_divergence, g->n_prompt - 1 + k);
    char want[64];
    snprintf(want, sizeof(want), "position %d: top-1 differs", (int)(g->n_prompt - 1 + k));
    cr_assert(strstr(r->reason, want), "%s", r->reason);
    gs_val_report_free(r);
    cr_assert_eq(gs_val_golden_compare(g, served, n - 1, NULL, &r, &err), GS_INVAL);
    free(served);
    gs_val_golden_free(g);
}

/* A small valid golden; each malformed case below edits one piece of it. */
static const char tiny_golden[] =
    "{\"model\":\"m.gguf\",\"prompt\":\"hi\",\"n_vocab\":4,\"bos_id\":1,\"eos_id\":2,"
    "\"add_bos\":true,\"stopped_eog\":false,\"prompt_tokens\":[1,3],"
    "\"prompt_logits\":[[0,1,2,3],[3,2,1,0]],\"last_logits\":[3,2,1,0],"
    "\"n_predict\":2,\"n_generated\":2,\"completion_tokens\":[0,1],"
    "\"steps\":[{\"i\":0,\"token\":0,\"logit\":3,\"margin_to_2nd\":1,"
    "\"top5\":[[0,3],[1,2],[2,1],[3,0]]},"
    "{\"i\":1,\"token\":1,\"logit\":5,\"margin_to_2nd\":0.5,\"top5\":[[1,5],[0,4.5]]}]}";

Test(val_golden, tiny_golden_parses)
{
    struct gs_val_golden *g = NULL;
    struct gs_err err = {0};
    cr_assert_eq(gs_val_golden_parse(tiny_golden, strlen(tiny_golden), &g, &err), GS_OK, "%s",
                 err.msg);
    cr_assert_eq(g->n_vocab, 4);
    cr_assert_eq(g->n_prompt, 2);
    cr_assert_eq(g->n_gen, 2);
    cr_assert_str_eq(g->model, "m.gguf");
    cr_assert_eq(g->steps[1].n_top, 2);
    cr_assert_float_eq(g->steps[1].top_logits[1], 4.5f, 0);
    cr_assert_float_eq(g->prompt_logits[4], 3.0f, 0);
    cr_assert_eq(gs_val_golden_n_eval(g), 3);
    cr_assert_eq(gs_val_golden_token(g, 0), 1);
    cr_assert_eq(gs_val_golden_token(g, 2), 0);
    gs_val_golden_free(g);
}

static char *replace_once(const char *s, const char *from, const char *to)
{
    const char *at = strstr(s, from);
    cr_assert_not_null(at, "'%s' not in the template", from);
    size_t n = strlen(s) - strlen(from) + strlen(to) + 1;
    char *out = malloc(n);
    snprintf(out, n, "%.*s%s%s", (int)(at - s), s, to, at + strlen(from));
    return out;
}

Test(val_golden, malformed_goldens_name_the_field)
{
    static const struct {
        const char *from, *to, *field;
    } cases[] = {
        {"\"n_vocab\":4", "\"n_vocab\":\"4\"", "n_vocab: expected an integer"},
        {"\"n_vocab\":4", "\"n_vocab\":0", "n_vocab"},
        {"\"prompt\":\"hi\",", "", "prompt: missing"},
        {"\"model\":\"m.gguf\"", "\"model\":7", "model: expected a string"},
        {"\"add_bos\":true", "\"add_bos\":1", "add_bos"},
        {"\"bos_id\":1", "\"bos_id\":4", "bos_id"},
        {"\"prompt_tokens\":[1,3]", "\"prompt_tokens\":[1,4]", "prompt_tokens[1]"},
        {"\"prompt_tokens\":[1,3]", "\"prompt_tokens\":[]", "prompt_tokens: empty"},
        {"[[0,1,2,3],[3,2,1,0]]", "[[0,1,2,3]]", "prompt_logits: expected an array of 2 rows"},
        {"[3,2,1,0]],", "[3,2,1]],", "prompt_logits[1]: 3 values"},
        {"[[0,1,2,3],", "[[0,1,\"x\",3],", "prompt_logits[0][2]: expected a number"},
        {"[[0,1,2,3],", "[[0,1,1e39,3],", "prompt_logits[0][2]: not a finite float"},
        {"\"last_logits\":[3,2,1,0]", "\"last_logits\":[3,2,1,null]", "last_logits[3]"},
        {"\"last_logits\":[3,2,1,0],", "", "last_logits: missing"},
        {"\"n_predict\":2", "\"n_predict\":1", "n_generated: 2 outside [0, 1]"},
        {"\"n_predict\":2,\"n_generated\":2", "\"n_predict\":5,\"n_generated\":3",
         "completion_tokens: 2 tokens, n_generated is 3"},
        {"\"completion_tokens\":[0,1]", "\"completion_tokens\":[0,2]", "steps[1].token"},
        {"\"i\":1", "\"i\":7", "steps[1].i"},
        {"\"margin_to_2nd\":0.5", "\"margin_to_2nd\":-0.5", "steps[1].margin_to_2nd"},
        {"\"logit\":5,", "", "steps[1].logit: missing"},
        {"[[1,5],[0,4.5]]", "[[1,5],[0]]", "steps[1].top5[1]: expected [id, logit]"},
        {"[[1,5],[0,4.5]]", "[[1,5],[9,4.5]]", "steps[1].top5[1]: id outside"},
        {"[[1,5],[0,4.5]]", "[[0,5],[1,4.5]]", "steps[1].top5[0]: id 0 is not the step's token"},
        {"[[1,5],[0,4.5]]", "[[1,4],[0,4.5]]", "steps[1].top5[1]: logits not in descending"},
        {"[[1,5],[0,4.5]]", "[]", "steps[1].top5: expected 1..20"},
        {"\"steps\":[{", "\"steps\":[7,{", "steps: expected an array of n_generated = 2"},
        {"{\"i\":0", "[{\"i\":0", "line"},
        {"\"add_bos\"", "\"settings\":[],\"add_bos\"", "settings: expected an object"},
        {"\"add_bos\"", "\"settings\":{\"kv_cache_type\":1},\"add_bos\"", "settings.kv_cache_type"},
    };
    for (size_t i = 0; i < GS_ARRAY_LEN(cases); i++) {
        char *text = replace_once(tiny_golden, cases[i].from, cases[i].to);
        struct gs_val_golden *g = NULL;
        struct gs_err err = {0};
        enum gs_status rc = gs_val_golden_parse(text, strlen(text), &g, &err);
        cr_assert_eq(rc, GS_FORMAT, "case %zu (%s) accepted", i, cases[i].to);
        cr_assert_null(g);
        cr_assert(strstr(err.msg, cases[i].field), "case %zu: '%s' not in '%s'", i, cases[i].field,
                  err.msg);
        free(text);
    }
    struct gs_val_golden *g = NULL;
    struct gs_err err = {0};
    cr_assert_eq(gs_val_golden_parse("[1,2]", 5, &g, &err), GS_FORMAT);
    cr_assert(strstr(err.msg, "(top level)"), "%s", err.msg);
    cr_assert_eq(gs_val_golden_load("/nonexistent/golden.json", &g, &err), GS_IO);
    cr_assert(strstr(err.msg, "/nonexistent/golden.json"), "%s", err.msg);
}

Test(val_golden, parse_survives_every_failed_allocation)
{
    for (long n = 0;; n++) {
        struct gs_val_golden *g = NULL;
        struct gs_err err = {0};
        gs_alloc_fail_after(n);
        enum gs_status rc = gs_val_golden_parse(tiny_golden, strlen(tiny_golden), &g, &err);
        gs_alloc_fail_after(-1);
        if (rc == GS_OK) {
            gs_val_golden_free(g);
            break;
        }
        cr_assert_eq(rc, GS_NOMEM, "n=%ld: %s", n, err.msg);
        cr_assert_null(g);
        cr_assert(n < 100);
    }
}

Test(val_golden, truncated_or_corrupted_text_is_refused_cleanly)
{
    size_t len = strlen(tiny_golden);
    struct gs_err err;
    struct gs_val_golden *g;
    for (size_t cut = 0; cut < len; cut++) {
        g = NULL;
        cr_assert_eq(gs_val_golden_parse(tiny_golden, cut, &g, &err), GS_FORMAT, "cut %zu", cut);
        cr_assert_null(g);
    }
    /* Every single-byte change either still parses into a consistent golden
     * or is refused with GS_FORMAT; none crashes (ASan watches). */
    static const char subs[] = {'0', '9', '-', '"', ',', ']', '}', 'x', ' '};
    char *text = malloc(len + 1);
    for (size_t i = 0; i < len; i++) {
        for (size_t s = 0; s < sizeof(subs); s++) {
            memcpy(text, tiny_golden, len + 1);
            text[i] = subs[s];
            g = NULL;
            enum gs_status rc = gs_val_golden_parse(text, len, &g, &err);
            cr_assert(rc == GS_OK || rc == GS_FORMAT, "byte %zu -> '%c': %d", i, subs[s], rc);
            if (rc == GS_OK) {
                cr_assert(g->n_prompt > 0 && g->n_gen <= g->n_predict);
                for (int32_t k = 0; k < g->n_gen; k++)
                    cr_assert_eq(g->steps[k].token, g->completion_tokens[k]);
            }
            gs_val_golden_free(g);
        }
    }
    free(text);
}

Test(val_compare, survives_every_failed_allocation)
{
    enum { P = 150, V = 8 };
    static float m[P * V];
    for (int i = 0; i < P * V; i++)
        m[i] = rnd();
    for (long n = 0;; n++) {
        struct gs_val_report *r = NULL;
        struct gs_err err = {0};
        gs_alloc_fail_after(n);
        enum gs_status rc = gs_val_compare(m, m, NULL, P, V, NULL, &r, &err);
        gs_alloc_fail_after(-1);
        if (rc == GS_OK) {
            cr_assert(n >= 3, "rows grew without reallocating?");
            cr_assert_eq(r->n_rows, P);
            gs_val_report_free(r);
            break;
        }
        cr_assert_eq(rc, GS_NOMEM);
        cr_assert_null(r);
        cr_assert(n < 50);
    }
}

/* jansson allocations fail after json_fail_after more succeed. */
static long json_fail_after = -1;
static void *failing_json_malloc(size_t n)
{
    if (json_fail_after == 0)
        return NULL;
    if (json_fail_after > 0)
        json_fail_after--;
    return malloc(n);
}

Test(val_report, json_returns_null_when_jansson_runs_out_of_memory)
{
    enum { V = 6 };
    float row[2 * V] = {1, 2, 3, 4, 5, 6, 6, 5, 4, 3, 2, NAN};
    struct gs_val_report *r = compare(row, row, 2, V);
    json_set_alloc_funcs(failing_json_malloc, free);
    for (long n = 0;; n++) {
        json_fail_after = n;
        json_t *j = gs_val_report_json(r, GS_VAL_PRINT_ROWS);
        json_fail_after = -1;
        if (j) {
            cr_assert(json_is_array(json_object_get(j, "rows")));
            cr_assert_eq(json_array_size(json_object_get(j, "rows")), 2);
            json_decref(j);
            break;
        }
        cr_assert(n < 500);
    }
    json_set_alloc_funcs(malloc, free);
    gs_val_report_free(r);
}
