/*
 * tests/engine/train_step_dump.c - runs two training steps of a small 2-layer
 * model on a backend and prints everything an independent implementation
 * needs to redo them (tests/engine/train_step_numpy.py): the shape, the
 * optimiser's settings, the tokens, the initial weights, and after each step
 * the loss, every gradient and every updated weight.
 *
 * Usage: train_step_dump BACKEND THREADS. One tensor a line:
 *   <kind> <name> <ne0> <ne1> <values...>   kind: init, grad1, after1, grad2, after2
 */
#include "engine/train.h"

#include <stdio.h>
#include <stdlib.h>

static void dump(const char *kind, const char *name, int64_t ne0, int64_t ne1, const float *x)
{
    printf("%s %s %lld %lld", kind, name, (long long)ne0, (long long)ne1);
    for (int64_t i = 0; i < ne0 * ne1; i++)
        printf(" %.9g", (double)x[i]);
    printf("\n");
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s BACKEND THREADS\n", argv[0]);
        return 2;
    }
    const struct gs_train_shape shape = {.n_vocab = 11, .n_embd = 16, .n_layer = 2, .n_head = 4,
                                         .n_head_kv = 2, .n_ff = 24, .block = 5};
    struct gs_train_opt opt = gs_train_opt_default();
    opt.batch = 3;
    opt.lr = 1e-2f;
    opt.min_lr = 1e-3f;
    opt.warmup = 0;
    opt.total = 3; /* the second update is a third of the way down the cosine */
    opt.weight_decay = 0.1f;
    opt.clip_norm = 0.5f; /* below the first gradients' norm: clipping is exercised */
    opt.init_std = 0.3f;  /* large enough that the layers matter to the gradients */
    opt.seed = 7;
    struct gs_train *t;
    struct gs_err err = {0};
    if (gs_train_new(&shape, &opt, argv[1], atoi(argv[2]), &t, &err)) {
        fprintf(stderr, "train_step_dump: %s\n", err.msg);
        return 1;
    }
    printf("shape %lld %lld %lld %lld %lld %lld %lld %lld\n", (long long)shape.n_vocab,
           (long long)shape.n_embd, (long long)shape.n_layer, (long long)shape.n_head,
           (long long)shape.n_head_kv, (long long)shape.n_ff, (long long)shape.block,
           (long long)opt.batch);
    printf("opt %.9g %.9g %lld %lld %.9g %.9g %.9g %.9g %.9g 1e-5 10000\n", (double)opt.lr,
           (double)opt.min_lr, (long long)opt.warmup, (long long)opt.total, (double)opt.beta1,
           (double)opt.beta2, (double)opt.eps, (double)opt.weight_decay, (double)opt.clip_norm);
    int32_t tokens[3 * 6];
    uint32_t s = 12345;
    for (size_t i = 0; i < sizeof(tokens) / sizeof(tokens[0]); i++) {
        s = s * 1664525u + 1013904223u;
        tokens[i] = (int32_t)((s >> 16) % 11);
    }
    printf("tokens");
    for (size_t i = 0; i < sizeof(tokens) / sizeof(tokens[0]); i++)
        printf(" %d", tokens[i]);
    printf("\n");
    for (size_t i = 0; i < gs_train_n_params(t); i++) {
        const struct gs_train_param *p = gs_train_param(t, i);
        dump("init", p->name, p->ne0, p->ne1, p->data);
    }
    for (int step = 1; step <= 2; step++) {
        float loss;
        bool updated;
        if (gs_train_step(t, tokens, &loss, &updated, &err) || !updated) {
            fprintf(stderr, "train_step_dump: %s\n", err.msg);
            gs_train_free(t);
            return 1;
        }
        printf("loss%d %.9g\n", step, (double)loss);
        char kind[16];
        for (size_t i = 0; i < gs_train_n_params(t); i++) {
            const struct gs_train_param *p = gs_train_param(t, i);
            snprintf(kind, sizeof(kind), "grad%d", step);
            dump(kind, p->name, p->ne0, p->ne1, p->step_grad);
            snprintf(kind, sizeof(kind), "after%d", step);
            dump(kind, p->name, p->ne0, p->ne1, p->data);
        }
    }
    gs_train_free(t);
    return 0;
}
