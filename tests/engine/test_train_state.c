/*
 * tests/engine/test_train_state.c - the training state (engine/train.h): the
 * learning-rate schedule, gradient accumulation against one larger batch,
 * steps that allocate nothing, and the shapes and options it refuses.
 */
#include "engine/train.h"

#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

static const struct gs_train_shape shape = {.n_vocab = 13, .n_embd = 16, .n_layer = 2,
                                            .n_head = 4, .n_head_kv = 2, .n_ff = 24, .block = 6};

static void tokens(int32_t *t, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        t[i] = (int32_t)((seed >> 16) % 13);
    }
}

Test(train_state, schedule)
{
    struct gs_train_opt o = gs_train_opt_default();
    o.lr = 1.0f, o.min_lr = 0.1f, o.warmup = 4, o.total = 14;
    cr_expect_float_eq(gs_train_lr(&o, 0), 0.25f, 1e-6);
    cr_expect_float_eq(gs_train_lr(&o, 3), 1.0f, 1e-6);
    cr_expect_float_eq(gs_train_lr(&o, 4), 1.0f, 1e-6);  /* the cosine's start */
    cr_expect_float_eq(gs_train_lr(&o, 9), 0.55f, 1e-6); /* its middle: (lr + min) / 2 */
    cr_expect_float_eq(gs_train_lr(&o, 14), 0.1f, 1e-6);
    cr_expect_float_eq(gs_train_lr(&o, 100), 0.1f, 1e-6);
    for (int64_t u = 5; u < 14; u++)
        cr_expect_lt(gs_train_lr(&o, u), gs_train_lr(&o, u - 1), "the decay falls at %lld",
                     (long long)u);
}

/* Two accumulated steps of 2 sequences update as one step of the 4 together
 * (the mean of two equal halves' mean losses is the whole batch's). */
Test(train_state, accumulation_equals_the_larger_batch)
{
    struct gs_train_opt one = gs_train_opt_default(), acc;
    one.batch = 4;
    one.clip_norm = 0; /* the same update either way, not a clipped one */
    acc = one;
    acc.batch = 2;
    acc.accum = 2;
    struct gs_train *a, *b;
    struct gs_err err = {0};
    cr_assert_eq(gs_train_new(&shape, &one, "cpu", 2, &a, &err), GS_OK, "%s", err.msg);
    cr_assert_eq(gs_train_new(&shape, &acc, "cpu", 2, &b, &err), GS_OK, "%s", err.msg);
    int32_t t[4 * 7];
    tokens(t, 28, 5);
    float loss, l1, l2;
    bool updated;
    cr_assert_eq(gs_train_step(a, t, &loss, &updated, &err), GS_OK, "%s", err.msg);
    cr_assert(updated);
    cr_assert_eq(gs_train_step(b, t, &l1, &updated, &err), GS_OK, "%s", err.msg);
    cr_assert(!updated, "the first of two accumulated steps updated");
    cr_assert_eq(gs_train_updates(b), 0);
    cr_assert_eq(gs_train_step(b, t + 14, &l2, &updated, &err), GS_OK, "%s", err.msg);
    cr_assert(updated);
    cr_expect_float_eq(loss, (l1 + l2) / 2, 1e-5, "%g vs %g", loss, (l1 + l2) / 2);
    double num = 0, den = 0;
    for (size_t i = 0; i < gs_train_n_params(a); i++) {
        const struct gs_train_param *pa = gs_train_param(a, i), *pb = gs_train_param(b, i);
        cr_assert_str_eq(pa->name, pb->name);
        for (int64_t j = 0; j < pa->ne0 * pa->ne1; j++) {
            /* the moments after one update are the (averaged) gradients themselves */
            num += ((double)pa->m[j] - pb->m[j]) * ((double)pa->m[j] - pb->m[j]);
            den += (double)pa->m[j] * pa->m[j];
        }
    }
    cr_expect_leq(sqrt(num / den), 1e-5, "first moments differ by %.3e relative",
                  sqrt(num / den));
    gs_train_free(a);
    gs_train_free(b);
}

/* Once created, a state trains and evaluates with every allocation failing. */
Test(train_state, steps_allocate_nothing)
{
    struct gs_train_opt o = gs_train_opt_default();
    o.batch = 3;
    o.accum = 2;
    struct gs_train *t;
    struct gs_err err = {0};
    cr_assert_eq(gs_train_new(&shape, &o, "cpu", 2, &t, &err), GS_OK, "%s", err.msg);
    int32_t tok[3 * 7];
    tokens(tok, 21, 9);
    float loss;
    bool updated;
    gs_alloc_fail_after(0);
    for (int s = 0; s < 4; s++)
        cr_assert_eq(gs_train_step(t, tok, &loss, &updated, &err), GS_OK, "step %d: %s", s,
                     err.msg);
    cr_assert_eq(gs_train_eval(t, tok, &loss, &err), GS_OK, "%s", err.msg);
    gs_alloc_fail_after(-1);
    cr_expect_eq(gs_train_updates(t), 2);
    gs_train_free(t);
}

Test(train_state, refusals)
{
    struct gs_train_opt o = gs_train_opt_default();
    struct gs_train *t;
    struct gs_err err = {0};
    struct gs_train_shape s = shape;
    s.n_head = 5;
    cr_expect_eq(gs_train_new(&s, &o, "cpu", 1, &t, &err), GS_INVAL);
    cr_expect(strstr(err.msg, "5 heads do not divide the width 16"), "%s", err.msg);
    s = shape;
    s.n_head_kv = 3;
    cr_expect_eq(gs_train_new(&s, &o, "cpu", 1, &t, &err), GS_INVAL);
    cr_expect(strstr(err.msg, "3 kv heads"), "%s", err.msg);
    s = shape;
    s.n_embd = 12; /* head dim 3 */
    cr_expect_eq(gs_train_new(&s, &o, "cpu", 1, &t, &err), GS_INVAL);
    cr_expect(strstr(err.msg, "even"), "%s", err.msg);
    o.accum = 0;
    cr_expect_eq(gs_train_new(&shape, &o, "cpu", 1, &t, &err), GS_INVAL);
    o = gs_train_opt_default();
    cr_expect_eq(gs_train_new(&shape, &o, "nonesuch", 1, &t, &err), GS_NOTFOUND);

    cr_assert_eq(gs_train_new(&shape, &o, "ref", 1, &t, &err), GS_OK, "%s", err.msg);
    int32_t tok[16 * 7] = {0};
    tok[5] = 13; /* outside the vocabulary */
    float loss;
    bool updated;
    cr_expect_eq(gs_train_step(t, tok, &loss, &updated, &err), GS_INVAL);
    cr_expect(strstr(err.msg, "id 13 outside the vocabulary"), "%s", err.msg);
    gs_train_free(t);
}
