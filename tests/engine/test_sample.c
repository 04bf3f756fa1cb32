/*
 * tests/engine/test_sample.c - engine/sample: every mechanism on small
 * hand-computed rows, determinism of the seeded stream, the distribution of
 * draws, non-finite input, allocation behaviour, and raw-logit logprobs
 * against llama.cpp's server output.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sample.h"
#include "engine/sample/internal.h"
#include "tests/common/testutil.h"

/* ---- helpers ---------------------------------------------------------------- */

static struct gs_sample_state *new_state(const struct gs_sample_params *p, int32_t n_vocab)
{
    struct gs_err err = {0};
    struct gs_sample_state *st = NULL;
    enum gs_status rc = gs_sample_state_new(p, n_vocab, &st, &err);
    cr_assert_eq(rc, GS_OK, "state_new: %s", err.msg);
    return st;
}

static int32_t next_token(struct gs_sample_state *st, const float *logits, int32_t n)
{
    struct gs_err err = {0};
    struct gs_sample_out o;
    enum gs_status rc = gs_sample_next(st, logits, n, &o, &err);
    cr_assert_eq(rc, GS_OK, "sample_next: %s", err.msg);
    cr_assert(o.token >= 0 && o.token < n);
    return o.token;
}

/* Draws n_draws tokens from one row and counts them into counts[n]. */
static void histogram(struct gs_sample_state *st, const float *logits, int32_t n, int n_draws,
                      int *counts)
{
    memset(counts, 0, (size_t)n * sizeof(*counts));
    for (int i = 0; i < n_draws; i++)
        counts[next_token(st, logits, n)]++;
}

/* Test-local generator for random logit rows (independent of the sampler's). */
static uint64_t lcg_state = 88172645463325252ull;
static float rand_logit(void)
{
    lcg_state = lcg_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(lcg_state >> 11) * 0x1.0p-53 * 20.0 - 10.0);
}

static int32_t argmax(const float *x, int32_t n)
{
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

/* ---- random stream ------------------------------------------------------------ */

Test(sample_rng, splitmix64_matches_reference_outputs)
{
    /* Published outputs of splitmix64 seeded with 1234567. */
    static const uint64_t want[] = {6457827717110365317ull, 3203168211198807973ull,
                                    9817491932198370423ull, 4593380528125082431ull,
                                    16408922859458223821ull};
    uint64_t x = 1234567;
    for (size_t i = 0; i < GS_ARRAY_LEN(want); i++)
        cr_assert_eq(gs_sample__splitmix64(&x), want[i], "output %zu", i);
}

Test(sample_rng, xoshiro256starstar_matches_reference_outputs)
{
    /* Reference outputs of xoshiro256** from the state {1, 2, 3, 4}. */
    static const uint64_t want[] = {11520ull,
                                    0ull,
                                    1509978240ull,
                                    1215971899390074240ull,
                                    1216172134540287360ull,
                                    607988272756665600ull,
                                    16172922978634559625ull,
                                    8476171486693032832ull,
                                    10595114339597558777ull,
                                    2904607092377533576ull};
    struct gs_sample__rng rng = {{1, 2, 3, 4}};
    for (size_t i = 0; i < GS_ARRAY_LEN(want); i++)
        cr_assert_eq(gs_sample__rng_u64(&rng), want[i], "output %zu", i);
}

Test(sample_rng, uniform_is_in_unit_interval)
{
    struct gs_sample__rng rng;
    gs_sample__rng_seed(&rng, 0);
    double sum = 0;
    for (int i = 0; i < 10000; i++) {
        double u = gs_sample__rng_f64(&rng);
        cr_assert(u >= 0.0 && u < 1.0);
        sum += u;
    }
    cr_assert(fabs(sum / 10000 - 0.5) < 0.02, "mean %f", sum / 10000);
}

/* ---- parameters ---------------------------------------------------------------- */

Test(sample_params, defaults_are_off)
{
    struct gs_sample_params p;
    gs_sample_params_init(&p);
    cr_assert_eq(p.temperature, 1.0f);
    cr_assert_eq(p.top_k, 0);
    cr_assert_eq(p.top_p, 1.0f);
    cr_assert_eq(p.min_p, 0.0f);
    cr_assert_eq(p.repeat_penalty, 1.0f);
    cr_assert_eq(p.presence_penalty, 0.0f);
    cr_assert_eq(p.frequency_penalty, 0.0f);
    cr_assert_eq(p.n_bias, 0);
    cr_assert_eq(p.n_stop, 0);
    cr_assert_not(p.logprobs);
    struct gs_err err = {0};
    cr_assert_eq(gs_sample_params_check(&p, 10, &err), GS_OK, "%s", err.msg);
}

Test(sample_params, check_names_the_bad_field)
{
    static const struct gs_sample_bias bad_bias[] = {{1, 0.5f}, {3, NAN}};
    static const struct gs_sample_bias oob_bias[] = {{10, 1.0f}};
    static const int32_t bad_stop[] = {2, -1};
    struct gs_sample_params p;
    struct gs_err err;
#define EXPECT_BAD(stmt, field)                                                                    \
    do {                                                                                           \
        gs_sample_params_init(&p);                                                                 \
        stmt;                                                                                      \
        gs_err_clear(&err);                                                                        \
        cr_assert_eq(gs_sample_params_check(&p, 10, &err), GS_INVAL, "%s accepted", #stmt);        \
        cr_assert(strstr(err.msg, field), "'%s' not in '%s'", field, err.msg);                     \
        struct gs_sample_state *st = NULL;                                                         \
        cr_assert_eq(gs_sample_state_new(&p, 10, &st, &err), GS_INVAL);                            \
        cr_assert_null(st);                                                                        \
    } while (0)
    EXPECT_BAD(p.temperature = -0.1f, "temperature");
    EXPECT_BAD(p.temperature = NAN, "temperature");
    EXPECT_BAD(p.temperature = INFINITY, "temperature");
    EXPECT_BAD(p.top_k = -1, "top_k");
    EXPECT_BAD(p.top_p = 0.0f, "top_p");
    EXPECT_BAD(p.top_p = 1.5f, "top_p");
    EXPECT_BAD(p.min_p = -0.1f, "min_p");
    EXPECT_BAD(p.min_p = 1.01f, "min_p");
    EXPECT_BAD(p.repeat_penalty = 0.0f, "repeat_penalty");
    EXPECT_BAD(p.repeat_last_n = -1, "repeat_last_n");
    EXPECT_BAD(p.presence_penalty = 2.5f, "presence_penalty");
    EXPECT_BAD(p.frequency_penalty = -3.0f, "frequency_penalty");
    EXPECT_BAD((p.bias = bad_bias, p.n_bias = 2), "logit_bias[1].bias");
    EXPECT_BAD((p.bias = oob_bias, p.n_bias = 1), "logit_bias[0].token");
    EXPECT_BAD((p.stop_tokens = bad_stop, p.n_stop = 2), "stop_tokens[1]");
    EXPECT_BAD(p.top_logprobs = GS_SAMPLE_TOP_LOGPROBS_MAX + 1, "top_logprobs");
#undef EXPECT_BAD
}

/* ---- greedy and temperature ----------------------------------------------------- */

Test(sample_greedy, picks_the_argmax_lowest_id_on_ties)
{
    struct gs_sample_params p;
    gs_sample_params_init(&p);
    p.temperature = 0.0f;
    struct gs_sample_state *st = new_state(&p, 4);
    cr_assert_eq(next_token(st, (float[]){1.0f, 3.0f, 2.0f, -1.0f}, 4), 1);
    cr_assert_eq(next_token(st, (float[]){5.0f, 1.0f, 5.0f, 5.0f}, 4), 0);
    cr_assert_eq(next_token(st, (float[]){-INFINITY, -7.0f, -INFINITY, -9.0f}, 4), 1);
    gs_sample_state_free(st);
}

Test(sample_temperature, near_zero_equals_greedy)
{
    struct gs_sample_params p;
    gs_sample_params_init(&p);
    p.temperature = 1e-3f;
    p.seed = 7;
    struct gs_sample_state *st = new_state(&p, 64);
    float row[64];
    for (int r = 0; r < 200; r++) {
        for (int i = 0; i < 64; i++)
            row[i] = rand_logit();
        /* Keep the best token 0.05 clear of the rest: at T = 1e-3 the
         * runner-up then has probability below e^-50. */
        int32_t best = argmax(row, 64);
        row[best] += 0.05f;
        cr_assert_eq(next_token(st, row, 64), best, "row %d", r);
    }
    gs_sample_state_free(st);
}

/* Pearson's chi-square of observed counts against expected probabilities. */
static double chi_square(const int *counts, const double *prob, int n, int n_draws)
{
    double chi = 0;
    for (int i = 0; i < n; i++) {
        double e = prob[i] * n_draws;
        chi += (counts[i] - e) * (counts[i] - e) / e;
    }
    return chi;
}

static void softmax_ref(const float *x, int n, double t, double *prob)
{
    double m = -INFINITY, s = 0;
    for (int i = 0; i < n; i++)
        m = fmax(m, x[i]);
    for (int i = 0; i < n; i++)
        s += prob[i] = exp((x[i] - m) / t);
    for (int i = 0; i < n; i++)
        prob[i] /= s;
}

Test(sample_temperature, draws_follow_softmax)
{
    /* 8 tokens, df = 7: chi-square above 24.3 has probability 0.001 under the
     * right distribution. The seed is fixed, so the test is deterministic; a
     * wrong distribution (no softmax, temperature applied twice, an off-by-one
     * in the cumulative walk) gives values in the hundreds. */
    static const float row[8] = {2.0f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f, 1.5f, 0.25f};
    static const double temps[] = {1.0, 0.7, 2.0};
    enum { N_DRAWS = 40000 };
    for (size_t ti = 0; ti < GS_ARRAY_LEN(temps); ti++) {
        struct gs_sample_params p;
        gs_sample_params_init(&p);
        p.temperature = (float)temps[ti];
        p.seed = 1000 + ti;
        struct gs_sample_state *st = new_state(&p, 8);
        int counts[8];
        double prob[8];
        histogram(st, row, 8, N_DRAWS, counts);
        softmax_ref(row, 8, temps[ti], prob);
        double chi = chi_square(counts, prob, 8, N_DRAWS);
        cr_assert(chi < 24.3, "temperature %g: chi-square %f", temps[ti], chi);
        gs_sample_state_free(st);
    }
}

Test(sample_temperature, two_token_case_by_hand)
{
    /* logits {0, ln 3}: p = {1/4, 3/4}; at T = 2, p1 = sqrt(3) / (1 + sqrt(3)). */
    float row[2] = {0.0f, (float)log(3.0)};
    struct gs_sample_params p;
    gs_sample_params_init(&p);
    p.seed = 99;
    struct gs_sample_state *st = new_state(&p, 2);
    int counts[2];
    histogram(st, row, 2, 20000, counts);
    cr_assert(fabs(counts[1] / 20000.0 - 0.75) < 0.015, "p1 = %f", counts[1] / 20000.0);
    gs_sample_state_free(st);
    p.temperature = 2.0f;
    st = new_state(&p, 2);
    histogram(st, row, 2, 20000, counts);
    double want = sqrt(3.0) / (1.0 + sqrt(3.0));
    cr_assert(fabs(counts[1] / 20000.0 - want) < 0.015, "p1 = %f, want %f", counts[1] / 20000.0,
              want);
    gs_sample_state_free(st);
}

/* ---- seeds ------------------------------------------------------------------------- */

static void draw_sequence(uint64_t seed, int32_t *out, int n)
{
    static const float row[6] = {0.1f, 0.2f, 0.0f, -0.3f, 0.15f, 0.05f};
    struct gs_sample_params p;
    gs_sample_params_init(&p);
    p.seed = seed;
    struct gs_sample_state *st = new_state(&p, 6);
    for (int i = 0; i < n; i++)
        out[i] = next_token(st, row, 6);
    gs_sample_state_free(st);
}

Test(sample_seed, same_seed_same_tokens)
{
    int32_t a[200], b[200];
    draw_sequence(12345, a, 200);
    draw_sequence(12345, b, 200);
    cr_assert_arr_eq(a, b, sizeof(a));
    draw_sequence(0, a, 200);
    draw_sequence(0, b, 200);
    cr_assert_arr_eq(a, b, sizeof(a));
}

Test(sample_seed, different_seed_different_tokens)
{
    int32_t a[200], b[200];
    draw_sequence(12345, a, 200);
    draw_sequence(12346, b, 200);
    int differ = 0;
    for (int i = 0; i < 200; i++)
        differ += a[i] != b[i];
    /* Six near-uniform tokens: two independent streams agree ~1/6 of the time. */
    cr_assert(differ > 100, "only %d of 200 tokens differ", differ);
}

Test(sample_seed, reset_restarts_the_stream)
{
    static const float row[6] = {0.1f, 0.2f, 0.0f, -0.3f, 0.15f, 0.05f};
    int32_t a[50], b[50];
    draw_sequence(77, a, 50);
    struct gs_sample_params p;
    gs_sample_params_init(&p);
    p.seed = 77;
    struct gs_sample_state *st = new_state(&p, 6);
    for (int i = 0; i < 13; i++)
        next_token(st, row, 6);
    gs_sample_state_reset(st);
    for (int i = 0; i < 50; i++)
        b[i] = next_token(st, row, 6);
    cr_assert_arr_eq(a, b, sizeof(a));
    gs_sample_state_free(st);
}

/* ---- filters -------------------------------------------------------------------------- */

Test(sample_top_k, one_equals_greedy)
{
    struct gs_sample_params p;
    gs_sample_params_init(&p);
    p.top_k = 1;
    p.seed = 3;
    struct gs_sample_state *st = new_state(&p, 100);
    float row[100];
    for (int r = 0; r < 200; r++) {
        for (int i = 0; i < 100; i++)
            row[i] = rand_logit();
        cr_assert_eq(next_token(st, row, 100), argmax(row, 100), "row %d", r);
    }
    gs_sample_state_free(st);
}

Test(sample_top_k, keeps_exactly_the_k_best)
{
    /* Best three are ids 1, 3, 6 (logits 4, 3.5, 3); the rest are close
     * enough to be drawn often if they survived. */
    static const float row[8] = {2.5f, 4.0f, 2.9f, 3.5f, 2.0f, 2.8f, 3.0f, 1.0f};
    struct gs_sample_params p;
    gs_sample_params_init(&p);
    p.top_k = 3;
    p.seed = 5;
    struct gs_sample_state *st = new_state(&p, 8);
    int counts[8];
    histogram(st, row, 8, 5000, counts);
    for (int i = 0; i < 8; i++) {
        if (i == 1 || i == 3 || i == 6)
            cr_assert(counts[i] > 500, "token %d drawn %d times", i, counts[i]);
        else
            cr_assert_eq(counts[i], 0, "token %d survived top_k", i);
    }
    /* Survivors are renormalised: 1 : e^-0.5 : e^-1. */
    double z = 1 + exp(-0.5) + exp(-1.0);
    cr_assert(fabs(counts[1] / 5000.0 - 1 / z) < 0.03, "p(1) = %f", counts[1] / 5000.0);
    gs_sample_state_free(st);
}

/* Probabilities {0.5, 0.3, 0.15, 0.05} as logits, shuffled over ids. */
static const float quad_row[4] = {-2.99573227f /* ln .05 */, -0.69314718f /* ln .5 */,
                                  -1.89711998f /* ln .15 */, -1.20397280f /* ln .3 */};

static void survivors(const struct gs_sample_params *p, bool *drawn)
{
    struct gs_sample_state *st = new_state(p, 4);
    int counts[4];
    histogram(st, quad_row, 4, 4000, counts);
    for (int i = 0; i < 4; i++)
        drawn[i] = counts[i] > 0;
    gs_sample_state_free(st);
}

Test(sample_top_p, keeps_the_smallest_set_reaching_p)
{
    struct gs_sample_params p;
    gs_sample_params_init(&p);
    p.seed = 11;
    bool d[4];
    p.top_p = 0.45f; /* 0.5 alone reaches it */
    survivors(&p, d);
    cr_assert(d[1] && !d[3] && !d[2] && !d[0]);
    p.top_p = 0.75f; /* 0.5 + 0.3 */
    survivors(&p, d);
    cr_assert(d[1] && d[3] && !d[2] && !d[0]);
    p.top_p = 0.9f; /* 0.5 + 0.3 + 0.15 */
    survivors(&p, d);
    cr_assert(d[1] && d[3] && d[2] && !d[0]);
    p.top_p = 1.0f;
    survivors(&p, d);
    cr_assert(d[1] && d[3] && d[2] && d[0]);
}

Test(sample_top_p, tiny_equals_greedy)
{
    struct gs_sample_params p;
    gs_sample_params_init(&p);
    p.top_p = 1e-6f;
    p.seed = 4;
    /* A large row exercises the grow-the-selection path of top-p. */
    enum { N = 3000 };
    static float row[N];
    struct gs_sample_state *st = new_state(&p, N);
    for (int r = 0; r < 50; r++) {
        for (int i = 0; i < N; i++)
            row[i] = rand_logit();
        cr_assert_eq(next_token(st, row, N), argmax(row, N), "row %d", r);
    }
    gs_sample_state_free(st);
}

Test(sample_top_p, flat_large_row_keeps_about_p_of_tokens)
{
    /* 1000 equal logits, top_p 0.25 (exact in binary): exactly the 250
     * lowest ids survive (the rank order breaks ties by id), which takes
     * several selection rounds. */
    enum { N = 1000 };
    static float row[N];
    struct gs_sample_params p;
    gs_sample_params_init(&p);
    p.top_p = 0.25f;
    p.seed = 8;
    struct gs_sample_state *st = new_state(&p, N);
    int max_id = -1;
    for (int i = 0; i < 5000; i++) {
        int32_t t = next_token(st, row, N);
        max_id = t > max_id ? t : max_id;
    }
    cr_assert(max_id >= 240 && max_id < 250, "largest id drawn %d", max_id);
    gs_sample_state_free(st);
}

/* Reference for the large-row filters: ids of row sorted best first. */
static const float *sort_row;
static int cmp_desc(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (sort_row[x] != sort_row[y])
        return sort_row[x] > sort_row[y] ? -1 : 1;
    return x < y ? -1 : 1;
}

/* Draws many tokens at a high temperature, so that every survivor of the
 * filters (which look at temperature-1 probabilities) is drawn often, and
 * checks the drawn set is exactly ids[0..n_keep). */
static void check_survivors(struct gs_sample_params *p, const float *row, int32_t n,
                            const int32_t *order, int32_t n_keep)
{
    p->temperature = 1000.0f;
    struct gs_sample_state *st = new_state(p, n);
    int *counts = calloc((size_t)n, sizeof(*counts));
    histogram(st, row, n, n_keep * 40, counts);
    for (int32_t r = 0; r < n; r++) {
        int32_t id = order[r];
        if (r < n_keep)
            cr_assert(counts[id] > 0, "rank %d (id %d) never drawn, keep %d", r, id, n_keep);
        else
            cr_assert_eq(counts[id], 0, "rank %d (id %d) drawn, keep %d", r, id, n_keep);
    }
    free(counts);
    gs_sample_state_free(st);
}

Test(sample_top_k, large_row_keeps_exactly_the_k_best)
{
    enum { N = 1000 };
    static float row[N];
    static int32_t order[N];
    for (int i = 0; i < N; i++) {
        row[i] = rand_logit() * 0.3f;
        order[i] = i;
    }
    row[17] = row[18] = row[19]; /* ties are ranked by id */
    sort_row = row;
    qsort(order, N, sizeof(*order), cmp_desc);
    static const int32_t ks[] = {1, 2, 7, 100, 400, 999};
    for (size_t i = 0; i < GS_ARRAY_LEN(ks); i++) {
        struct gs_sample_params p;
        gs_sample_params_init(&p);
        p.top_k = ks[i];
        p.seed = 40 + i;
        check_survivors(&p, row, N, order, ks[i]);
    }
}

Test(sample_top_p, large_row_keeps_the_sorted_prefix)
{
    enum { N = 1000 };
    static float row[N];
    static int32_t order[N];
    for (int i = 0; i < N; i++) {
        row[i] = rand_logit() * 0.3f;
        order[i] = i;
    }
    sort_row = row;
    qsort(order, N, sizeof(*order), cmp_desc);
    double total = 0;
    for (int i = 0; i < N; i++)
        total += exp((double)row[i] - row[order[0]]);
    static const float ps[] = {0.01f, 0.3f, 0.6f};
    for (size_t i = 0; i < GS_ARRAY_LEN(ps); i++) {
        double cum = 0;
        int32_t keep = 0;
        while (cum < (double)ps[i] * total)
            cum += exp((double)row[order[keep++]] - row[order[0]]);
        struct gs_sample_params p;
        gs_sample_params_init(&p);
        p.top_p = ps[i];
        p.seed = 50 + i;
        check_survivors(&p, row, N, order, keep);
        /* top-k first, then top-p over the survivors, renormalised. */
        p.top_k = 200;
        cum = 0;
        total = 0;
        for (int r = 0; r < 200; r++)
            total += exp((double)row[order[r]] - row[order[0]]);
        keep = 0;
        while (cum < (double)ps[i] * total)
            cum += exp((double)row[order[keep++]] - row[order[0]]);
        check_survivors(&p, row, N, order, keep);
        total = 0;
        for (int r = 0; r < N; r++)
            total += exp((double)row[r] - row[order[0]]);
    }
}

Test(sample_min_p, drops_tokens_below_fraction_of_best)
{
    struct gs_sample_params p;
    gs_sample_params_init(&p);
    p.seed = 12;
    bool d[4];
    p.min_p = 0.2f; /* floor 0.1: keeps 0.5, 0.3, 0.15 */
    survivors(&p, d);
    cr_assert(d[1] && d[3] && d[2] && !d[0]);
    p.min_p = 0.5f; /* floor 0.25: keeps 0.5, 0.3 */
    survivors(&p, d);
    cr_assert(d[1] && d[3] && !d[2] && !d[0]);
    p.min_p = 0.7f; /* floor 0.35: keeps 0.5 */
    survivors(&p, d);
    cr_assert(d[1] && !d[3] && !d[2] && !d[0]);
}

/* ---- penalties and bias -------------------------------------------------------------- */

static int32_t greedy_after(const struct gs_sample_params *base, const int32_t *prompt,
                            int n_prompt, const int32_t *gen, int n_gen, const float *row,
                            int32_t n)
{
    struct gs_sample_params p = *base;
    p.temperature = 0.0f;
    struct gs_sample_state *st = new_state(&p, n);
    struct gs_err err = {0};
    cr_assert_eq(gs_sample_accept_prompt(st, prompt, n_prompt, &err), GS_OK, "%s", err.msg);
    for (int i = 0; i < n_gen; i++)
        cr_assert_eq(gs_sample_accept(st, gen[i], &err), GS_OK, "%s", err.msg);
    int32_t t = next_token(st, row, n);
    gs_sample_state_free(st);
    return t;
}

Test(sample_repeat, divides_positive_multiplies_negative)
{
    struct gs_sample_params p;
    gs_sample_params_init(&p);
    p.repeat_penalty = 1.1f;
    const int32_t h0[] = {0};
    /* 2.0 / 1.1 = 1.818: loses to 1.85, beats 1.80. */
    cr_assert_eq(greedy_after(&p, h0, 1, NULL, 0, (float[]){2.0f, 1.85f, 0, 0}, 4), 1);
    cr_assert_eq(greedy_after(&p, h0, 1, NULL, 0, (float[]){2.0f, 1.80f, 0, 0}, 4), 0);
    /* -1.0 * 1.1 = -1.1: loses to -1.05, beats -1.15. */
    cr_assert_eq(greedy_after(&p, h0, 1, NULL, 0, (float[]){-1.0f, -1.05f, -9, -9}, 4), 1);
    cr_assert_eq(greedy_after(&p, h0, 1, NULL, 0, (float[]){-1.0f, -1.15f, -9, -9}, 4), 0);
    /* Generated tokens count too. */
    cr_assert_eq(greedy_after(&p, NULL, 0, h0, 1, (float[]){2.0f, 1.85f, 0, 0}, 4), 1);
}

Test(sample_repeat, applies_once_whatever_the_count)
{
    struct gs_sample_params p;
    gs_sample_params_init(&p);
    p.repeat_penalty = 1.1f;
    const int32_t h[] = {0, 0, 0};
    /* Once: 1.818 > 1.7. Three times would be 2 / 1.331 = 1.503 < 1.7. */
    cr_assert_eq(greedy_after(&p, h, 3, NULL, 0, (float[]){2.0f, 1.7f, 0, 0}, 4), 0);
    cr_assert_eq(greedy_after(&p, h, 3, NULL, 0, (float[]){2.0f, 1.85f, 0, 0}, 4), 1);
}

Test(sample_repeat, only_the_last_n_tokens)
{
    struct gs_sample_params p;
    gs_sample_params_init(&p);
    p.repeat_penalty = 1.1f;
    p.repeat_last_n = 2;
    const float row[] = {2.0f, 1.85f, 0, 0};
    cr_assert_eq(greedy_after(&p, (int32_t[]){0, 2, 3}, 3, NULL, 0, row, 4), 0);
    cr_assert_eq(greedy_after(&p, (int32_t[]){2, 0, 3}, 3, NULL, 0, row, 4), 1);
    /* The window slides across prompt and generated tokens. */
    cr_assert_eq(greedy_after(&p, (int32_t[]){0}, 1, (int32_t[]){2, 3}, 2, row, 4), 0);
    cr_assert_eq(greedy_after(&p, (int32_t[]){0}, 1, (int32_t[]){2}, 1, row, 4), 1);
    /* Off when repeat_last_n is 0. */
    p.repeat_last_n = 0;
    cr_assert_eq(greedy_after(&p, (int32_t[]){0}, 1, NULL, 0, row, 4), 0);
}

Test(sample_presence, frequency_scales_with_count)
{
    struct gs_sample_params p;
    gs_sample_params_init(&p);
    const float row[] = {1.0f, 0.5f, 0, 0};
    const int32_t g[] = {0, 0};
    p.frequency_penalty = 0.3f; /* 1 - 2 * 0.3 = 0.4 < 0.5 */
    cr_assert_eq(greedy_after(&p, NULL, 0, g, 2, row, 4), 1);
    p.frequency_penalty = 0.2f; /* 1 - 2 * 0.2 = 0.6 > 0.5 */
    cr_assert_eq(greedy_after(&p, NULL, 0, g, 2, row, 4), 0);
    /* Negative values encourage repetition: token 1 generated once, +0.6. */
    p.frequency_penalty = -0.6f;
    cr_assert_eq(greedy_after(&p, NULL, 0, (int32_t[]){1}, 1, row, 4), 1);
}

Test(sample_presence, presence_is_once_per_token)
{
    struct gs_sample_params p;
    gs_sample_params_init(&p);
    const float row[] = {1.0f, 0.5f, 0, 0};
    const int32_t g[] = {0, 0, 0, 0};
    p.presence_penalty = 0.4f; /* 1 - 0.4 = 0.6 > 0.5, whatever the count */
    cr_assert_eq(greedy_after(&p, NULL, 0, g, 4, row, 4), 0);
    p.presence_penalty = 0.6f; /* 0.4 < 0.5 */
    cr_assert_eq(greedy_after(&p, NULL, 0, g, 1, row, 4), 1);
}

Test(sample_presence, prompt_tokens_do_not_count)
{
    struct gs_sample_params p;
    gs_sample_params_init(&p);
    p.frequency_penalty = 0.3f;
    p.presence_penalty = 0.6f;
    const float row[] = {1.0f, 0.5f, 0, 0};
    cr_assert_eq(greedy_after(&p, (int32_t[]){0, 0, 0}, 3, NULL, 0, row, 4), 0);
    /* ... but tokens the sampler drew itself do. */
    p.temperature = 0.0f;
    struct gs_sample_state *st = new_state(&p, 4);
    cr_assert_eq(next_token(st, row, 4), 0);
    cr_assert_eq(next_token(st, row, 4), 1); /* 1 - 0.3 - 0.6 = 0.1 < 0.5 */
    gs_sample_state_free(st);
}

Test(sample_bias, adds_to_the_logit)
{
    struct gs_sample_params p;
    gs_sample_params_init(&p);
    const float row[] = {1.0f, 0.0f, 0.5f};
    struct gs_sample_bias b1[] = {{1, 1.01f}};
    p.bias = b1;
    p.n_bias = 1;
    cr_assert_eq(greedy_after(&p, NULL, 0, NULL, 0, row, 3), 1);
    b1[0].bias = 0.99f;
    cr_assert_eq(greedy_after(&p, NULL, 0, NULL, 0, row, 3), 0);
    /* Repeated entries add up: 0.6 + 0.6 lifts token 2 to 1.7. */
    struct gs_sample_bias b2[] = {{2, 0.6f}, {2, 0.6f}};
    p.bias = b2;
    p.n_bias = 2;
    cr_assert_eq(greedy_after(&p, NULL, 0, NULL, 0, row, 3), 2);
}

Test(sample_bias, banned_token_never_drawn)
{
    /* Token 3 has the highest logit by far but is banned. */
    static const float row[6] = {0.0f, 0.1f, 0.2f, 5.0f, -0.1f, 0.05f};
    struct gs_sample_bias ban[] = {{3, -INFINITY}};
    struct gs_sample_params p;
    gs_sample_params_init(&p);
    p.bias = ban;
    p.n_bias = 1;
    p.seed = 2024;
    struct gs_sample_state *st = new_state(&p, 6);
    int counts[6];
    histogram(st, row, 6, 10000, counts);
    cr_assert_eq(counts[3], 0);
    for (int i = 0; i < 6; i++)
        if (i != 3)
            cr_assert(counts[i] > 0, "token %d never drawn", i);
    gs_sample_state_free(st);
    /* Greedy skips it too. */
    p.temperature = 0.0f;
    st = new_state(&p, 6);
    cr_assert_eq(next_token(st, row, 6), 2);
    gs_sample_state_free(st);
}

Test(sample_bias, banning_everything_is_numeric_error)
{
    struct gs_sample_bias ban[] = {{0, -INFINITY}, {1, -INFINITY}};
    struct gs_sample_params p;
    gs_sample_params_init(&p);
    p.bias = ban;
    p.n_bias = 2;
    struct gs_sample_state *st = new_state(&p, 2);
    struct gs_err err = {0};
    struct gs_sample_out o;
    cr_assert_eq(gs_sample_next(st, (float[]){1, 2}, 2, &o, &err), GS_NUMERIC);
    gs_sample_state_free(st);
}

Test(sample_stop, flags_stop_tokens)
{
    struct gs_sample_params p;
    gs_sample_params_init(&p);
    p.temperature = 0.0f;
    p.stop_tokens = (int32_t[]){2, 9};
    p.n_stop = 2;
    struct gs_sample_state *st = new_state(&p, 10);
    struct gs_err err = {0};
    struct gs_sample_out o;
    float row[10] = {0};
    row[2] = 1.0f;
    cr_assert_eq(gs_sample_next(st, row, 10, &o, &err), GS_OK);
    cr_assert_eq(o.token, 2);
    cr_assert(o.stop);
    row[2] = 0.0f;
    row[5] = 1.0f;
    cr_assert_eq(gs_sample_next(st, row, 10, &o, &err), GS_OK);
    cr_assert_eq(o.token, 5);
    cr_assert_not(o.stop);
    cr_assert(gs_sample_is_stop(st, 9));
    cr_assert_not(gs_sample_is_stop(st, 0));
    cr_assert_not(gs_sample_is_stop(st, 10));
    cr_assert_not(gs_sample_is_stop(st, -1));
    gs_sample_state_free(st);
}

/* ---- non-finite input and misuse ----------------------------------------------------- */

Test(sample_numeric, nan_and_inf_are_refused)
{
    struct gs_sample_params p;
    gs_sample_params_init(&p);
    struct gs_sample_state *st = new_state(&p, 4);
    struct gs_err err = {0};
    struct gs_sample_out o = {.token = -7};
    cr_assert_eq(gs_sample_next(st, (float[]){0, NAN, 1, 2}, 4, &o, &err), GS_NUMERIC);
    cr_assert(strstr(err.msg, "logits[1]"), "%s", err.msg);
    cr_assert_eq(o.token, -7, "out written on failure");
    cr_assert_eq(gs_sample_next(st, (float[]){0, 1, 2, INFINITY}, 4, &o, &err), GS_NUMERIC);
    cr_assert(strstr(err.msg, "logits[3]"), "%s", err.msg);
    cr_assert_eq(
        gs_sample_next(st, (float[]){-INFINITY, -INFINITY, -INFINITY, -INFINITY}, 4, &o, &err),
        GS_NUMERIC);
    /* -inf entries are simply impossible tokens. */
    for (int i = 0; i < 200; i++) {
        cr_assert_eq(gs_sample_next(st, (float[]){-INFINITY, 0, -INFINITY, 0}, 4, &o, &err), GS_OK);
        cr_assert(o.token == 1 || o.token == 3);
    }
    gs_sample_state_free(st);
}

Test(sample_numeric, penalty_overflow_is_refused)
{
    /* A huge negative logit times a large repetition penalty overflows to
     * -inf (allowed: impossible), a huge positive one divided by a penalty
     * < 1 overflows to +inf, which must not be sampled. */
    struct gs_sample_params p;
    gs_sample_params_init(&p);
    p.repeat_penalty = 0.01f;
    struct gs_sample_state *st = new_state(&p, 2);
    struct gs_err err = {0};
    cr_assert_eq(gs_sample_accept(st, 0, &err), GS_OK);
    struct gs_sample_out o;
    cr_assert_eq(gs_sample_next(st, (float[]){3e38f, 0}, 2, &o, &err), GS_NUMERIC);
    gs_sample_state_free(st);
}

Test(sample_state, rejects_wrong_vocab_and_bad_ids)
{
    struct gs_sample_params p;
    gs_sample_params_init(&p);
    p.repeat_penalty = 1.2f;
    struct gs_sample_state *st = new_state(&p, 4);
    struct gs_err err = {0};
    struct gs_sample_out o;
    cr_assert_eq(gs_sample_next(st, (float[]){0, 1, 2}, 3, &o, &err), GS_INVAL);
    cr_assert(strstr(err.msg, "n_vocab"), "%s", err.msg);
    cr_assert_eq(gs_sample_accept(st, 4, &err), GS_INVAL);
    cr_assert_eq(gs_sample_accept(st, -1, &err), GS_INVAL);
    cr_assert_eq(gs_sample_accept_prompt(st, (int32_t[]){1, 2, 99}, 3, &err), GS_INVAL);
    cr_assert(strstr(err.msg, "prompt token 2"), "%s", err.msg);
    gs_sample_state_free(st);
    /* Nothing of a refused prompt is recorded: token 1 stays unpenalised
     * (2.0 / 1.2 = 1.67 would lose to 1.8). */
    p.temperature = 0.0f;
    st = new_state(&p, 4);
    cr_assert_eq(gs_sample_accept_prompt(st, (int32_t[]){1, 1, 99}, 3, &err), GS_INVAL);
    cr_assert_eq(next_token(st, (float[]){0, 2.0f, 1.8f, 0}, 4), 1);
    gs_sample_state_free(st);
}

/* ---- allocation ------------------------------------------------------------------------ */

Test(sample_alloc, next_does_not_allocate)
{
    struct gs_sample_params p;
    gs_sample_params_init(&p);
    p.top_k = 50;
    p.top_p = 0.9f;
    p.min_p = 0.01f;
    p.repeat_penalty = 1.1f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.5f;
    p.top_logprobs = 5;
    p.bias = (struct gs_sample_bias[]){{3, 1.0f}};
    p.n_bias = 1;
    enum { N = 5000 };
    static float row[N];
    struct gs_sample_state *st = new_state(&p, N);
    struct gs_err err = {0};
    struct gs_sample_out o;
    gs_alloc_fail_after(0);
    for (int r = 0; r < 20; r++) {
        for (int i = 0; i < N; i++)
            row[i] = rand_logit();
        enum gs_status rc = gs_sample_next(st, row, N, &o, &err);
        if (rc != GS_OK) {
            gs_alloc_fail_after(-1);
            cr_assert_fail("step %d: %s", r, err.msg);
        }
    }
    /* Also with the full-sort path of top-p (flat row, top_k off). */
    gs_alloc_fail_after(-1);
    gs_sample_state_free(st);
    p.top_k = 0;
    p.top_p = 0.99f;
    st = new_state(&p, N);
    memset(row, 0, sizeof(row));
    gs_alloc_fail_after(0);
    enum gs_status rc = gs_sample_next(st, row, N, &o, &err);
    gs_alloc_fail_after(-1);
    cr_assert_eq(rc, GS_OK, "%s", err.msg);
    gs_sample_state_free(st);
}

Test(sample_alloc, state_new_survives_every_failed_allocation)
{
    struct gs_sample_params p;
    gs_sample_params_init(&p);
    p.repeat_penalty = 1.1f;
    p.presence_penalty = 0.5f;
    p.bias = (struct gs_sample_bias[]){{3, 1.0f}};
    p.n_bias = 1;
    p.stop_tokens = (int32_t[]){2};
    p.n_stop = 1;
    for (long n = 0;; n++) {
        struct gs_sample_state *st = NULL;
        struct gs_err err = {0};
        gs_alloc_fail_after(n);
        enum gs_status rc = gs_sample_state_new(&p, 100, &st, &err);
        gs_alloc_fail_after(-1);
        if (rc == GS_OK) {
            cr_assert(n >= 8, "succeeded after only %ld allocations", n);
            gs_sample_state_free(st);
            break;
        }
        cr_assert_eq(rc, GS_NOMEM);
        cr_assert_null(st);
        cr_assert(n < 100, "never succeeds");
    }
}

/* ---- log-probabilities ------------------------------------------------------------------ */

Test(sample_logprob, log_softmax_by_hand)
{
    float row[3] = {0.0f, (float)log(3.0), -INFINITY};
    float out[3];
    struct gs_err err = {0};
    cr_assert_eq(gs_sample_log_softmax(row, 3, out, &err), GS_OK);
    cr_assert_float_eq(out[0], (float)log(0.25), 1e-6);
    cr_assert_float_eq(out[1], (float)log(0.75), 1e-6);
    cr_assert(out[2] == -INFINITY);
    /* Shift invariance, with values that would overflow a naive exp(). */
    float big[2] = {1000.0f, 1000.0f + (float)log(3.0)};
    cr_assert_eq(gs_sample_log_softmax(big, 2, big, &err), GS_OK);
    cr_assert_float_eq(big[0], (float)log(0.25), 1e-4);
    cr_assert_eq(gs_sample_log_softmax((float[]){1, NAN}, 2, out, &err), GS_NUMERIC);
}

Test(sample_logprob, top_logprobs_order_and_ties)
{
    const float row[6] = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 2.0f};
    struct gs_sample_logprob top[4];
    struct gs_err err = {0};
    cr_assert_eq(gs_sample_top_logprobs(row, 6, 4, top, &err), GS_OK);
    const int32_t want[4] = {1, 3, 2, 5};
    double lse = log(exp(1.0) + 2 * exp(3.0) + 2 * exp(2.0) + exp(-1.0));
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(top[i].token, want[i], "rank %d", i);
        cr_assert_float_eq(top[i].logprob, (float)(row[want[i]] - lse), 1e-6);
    }
    /* k larger than the row is clamped. */
    struct gs_sample_logprob all[GS_SAMPLE_TOP_LOGPROBS_MAX];
    cr_assert_eq(gs_sample_top_logprobs(row, 2, 10, all, &err), GS_OK);
    cr_assert_eq(all[0].token, 1);
    cr_assert_eq(all[1].token, 0);
    cr_assert_eq(gs_sample_top_logprobs(row, 6, GS_SAMPLE_TOP_LOGPROBS_MAX + 1, all, &err),
                 GS_INVAL);
}

Test(sample_logprob, out_reports_raw_logprobs_not_biased_ones)
{
    struct gs_sample_params p;
    gs_sample_params_init(&p);
    p.temperature = 0.0f;
    p.top_logprobs = 2;
    p.bias = (struct gs_sample_bias[]){{0, 5.0f}};
    p.n_bias = 1;
    struct gs_sample_state *st = new_state(&p, 2);
    struct gs_err err = {0};
    struct gs_sample_out o;
    float row[2] = {0.0f, (float)log(3.0)};
    cr_assert_eq(gs_sample_next(st, row, 2, &o, &err), GS_OK);
    cr_assert_eq(o.token, 0); /* the bias decided */
    cr_assert_float_eq(o.logprob, (float)log(0.25), 1e-6);
    cr_assert_eq(o.n_top, 2);
    cr_assert_eq(o.top[0].token, 1);
    cr_assert_float_eq(o.top[0].logprob, (float)log(0.75), 1e-6);
    gs_sample_state_free(st);
    /* Without logprobs requested the field is NaN and no top is given. */
    p.top_logprobs = 0;
    st = new_state(&p, 2);
    cr_assert_eq(gs_sample_next(st, row, 2, &o, &err), GS_OK);
    cr_assert(isnan(o.logprob));
    cr_assert_eq(o.n_top, 0);
    gs_sample_state_free(st);
}

Test(sample_logprob, matches_llama_cpp_server_logprobs)
{
    /* The server golden asked llama.cpp for 3 logprobs of "Once upon a time"
     * on stories260K; the completion golden has the raw logits of the same
     * position (the last prompt token). */
    json_t *comp = gs_test_load_json(
        gs_test_shared_path("golden/completions/stories260K__once-upon-a-time.json"));
    json_t *srv =
        gs_test_load_json(gs_test_shared_path("golden/server/v1_completions__logprobs3.json"));
    json_t *last = json_object_get(comp, "last_logits");
    int32_t n = (int32_t)json_array_size(last);
    cr_assert_eq(n, 512);
    float row[512];
    for (int32_t i = 0; i < n; i++)
        row[i] = (float)json_number_value(json_array_get(last, (size_t)i));
    json_t *first = json_array_get(
        json_object_get(
            json_object_get(json_array_get(json_object_get(srv, "choices"), 0), "logprobs"),
            "content"),
        0);
    json_t *want_top = json_object_get(first, "top_logprobs");
    cr_assert_eq(json_array_size(want_top), 3);

    struct gs_sample_params p;
    gs_sample_params_init(&p);
    p.temperature = 0.0f;
    p.top_logprobs = 3;
    struct gs_sample_state *st = new_state(&p, n);
    struct gs_err err = {0};
    struct gs_sample_out o;
    cr_assert_eq(gs_sample_next(st, row, n, &o, &err), GS_OK);
    cr_assert_eq(o.token, json_integer_value(json_object_get(first, "id")));
    cr_assert_float_eq(o.logprob, json_number_value(json_object_get(first, "logprob")), 1e-5);
    for (int i = 0; i < 3; i++) {
        json_t *w = json_array_get(want_top, (size_t)i);
        cr_assert_eq(o.top[i].token, json_integer_value(json_object_get(w, "id")), "rank %d", i);
        cr_assert_float_eq(o.top[i].logprob, json_number_value(json_object_get(w, "logprob")), 1e-5,
                           "rank %d", i);
    }
    gs_sample_state_free(st);
    json_decref(comp);
    json_decref(srv);
}
