/*
 * engine/train.h - training a Llama-architecture model on the graph engine:
 * the model's forward graph with a loss, its backward pass
 * (gs_graph_backward), and the training state that owns parameters,
 * gradients and AdamW moments.
 *
 * The model: token embedding, n_layer pre-norm blocks (RMSNorm, q/k/v
 * projections, rope on q and k in adjacent pairs, causal grouped-query
 * attention over each sequence of the step, output projection, residual add;
 * RMSNorm, SwiGLU feed-forward, residual add), the output norm and an untied
 * output projection, all F32; the loss is the mean cross-entropy of each
 * token's next token. Parameters are named and shaped as llama.cpp's GGUF
 * tensors (token_embd.weight, blk.N.attn_q.weight, ...), so they can be
 * written to a GGUF as they are.
 *
 * A step takes `batch` sequences of `block + 1` tokens: rows 0..block-1 are
 * the input, rows 1..block the targets. gs_train_step runs forward and
 * backward and adds the gradients into the accumulator; every `accum` calls
 * it updates the weights: gradients averaged over the calls, clipped to a
 * global L2 norm of clip_norm (0: no clipping), then AdamW (bias-corrected
 * moments, weight decay decoupled from the gradient and applied to matrices
 * only, not to norm gains) at the learning rate of gs_train_lr. Everything
 * a step touches is allocated by gs_train_new: a step allocates nothing.
 *
 * Determinism: initialisation is a function of the seed alone (splitmix64,
 * Box-Muller); every kernel sums in a fixed order, so a given seed, data and
 * backend give the same bits whatever the thread count.
 *
 * Ownership: the state owns its graphs, backend, plans and every buffer.
 * Threads: one thread at a time (the backend may run workers).
 */
#ifndef GS_TRAIN_H
#define GS_TRAIN_H

#include "engine/base.h"
#include "engine/graph.h"

struct gs_train_shape {
    int64_t n_vocab;
    int64_t n_embd;
    int64_t n_layer;
    int64_t n_head;
    int64_t n_head_kv; /* 0: n_head */
    int64_t n_ff;
    int64_t block; /* tokens per sequence (the context a trained model is written with) */
    float rms_eps;   /* 0: 1e-5 */
    float rope_base; /* 0: 10000 */
};

struct gs_train_opt {
    int64_t batch;  /* sequences per step */
    int64_t accum;  /* steps whose gradients make one update (>= 1) */
    float lr;       /* peak learning rate */
    float min_lr;   /* the cosine's floor */
    int64_t warmup; /* updates of linear warmup from 0 */
    int64_t total;  /* updates of the whole schedule (cosine from warmup to total) */
    float beta1, beta2, eps, weight_decay;
    float clip_norm; /* 0: none */
    float init_std;  /* 0: 0.02 */
    uint64_t seed;
};

/* The defaults of the options not set: beta1 0.9, beta2 0.95, eps 1e-8,
 * weight decay 0.1, clip 1.0, accum 1, init_std 0.02. */
struct gs_train_opt gs_train_opt_default(void);

struct gs_train;

/* A parameter: its GGUF name, shape [ne0 x ne1] and F32 values (owned by the state). */
struct gs_train_param {
    const char *name;
    int64_t ne0, ne1;
    float *data;
    float *grad;      /* the accumulated gradient since the last update */
    float *step_grad; /* the last step's gradient (before averaging and clipping) */
    float *m, *v;
};

/* Checks the shape (heads divide the width, head_dim even, sizes positive and
 * bounded) and options; opens backend `backend` ("ref", "cpu") with n_threads. */
enum gs_status gs_train_new(const struct gs_train_shape *shape, const struct gs_train_opt *opt,
                            const char *backend, int n_threads, struct gs_train **out,
                            struct gs_err *err);
void gs_train_free(struct gs_train *t); /* NULL is a no-op */

/* One forward and backward over tokens [batch][block + 1] (ids < n_vocab);
 * *loss gets the batch's mean loss; *updated whether this step updated the
 * weights (every accum-th call). */
enum gs_status gs_train_step(struct gs_train *t, const int32_t *tokens, float *loss,
                             bool *updated, struct gs_err *err);
/* The loss of tokens [batch][block + 1] without touching gradients or weights. */
enum gs_status gs_train_eval(struct gs_train *t, const int32_t *tokens, float *loss,
                             struct gs_err *err);

/* The learning rate of update number `update` (0-based): linear warmup, then
 * cosine decay from lr to min_lr at `total`, min_lr after. */
float gs_train_lr(const struct gs_train_opt *opt, int64_t update);

/* Parameters in a fixed order: token_embd, each block's, output_norm, output. */
size_t gs_train_n_params(const struct gs_train *t);
const struct gs_train_param *gs_train_param(const struct gs_train *t, size_t i);
/* Updates done so far; the last update's gradient norm (before clipping). */
int64_t gs_train_updates(const struct gs_train *t);
double gs_train_grad_norm(const struct gs_train *t);
/*
 * Checkpoints: everything a later step reads (weights, accumulated
 * gradients, moments, the update and accumulation counters) plus the caller's
 * own bytes (user, user_len: its data order, say), so that a run resumed from
 * a checkpoint continues bit for bit as the uninterrupted run would have.
 * Written to PATH.tmp and renamed over PATH, so a crash leaves the previous
 * checkpoint. Loading refuses a file of another shape or batch (GS_INVAL) or
 * a damaged one (GS_FORMAT), naming what differs; user_len must equal the
 * saved length. After a failed load the state may be partly overwritten:
 * free it rather than train on.
 */
enum gs_status gs_train_save(const struct gs_train *t, const char *path, const void *user,
                             size_t user_len, struct gs_err *err);
enum gs_status gs_train_load(struct gs_train *t, const char *path, void *user, size_t user_len,
                             struct gs_err *err);

/* The training graph (forward, backward, OUT roots), for printing. */
const struct gs_graph *gs_train_graph(const struct gs_train *t);

#endif /* GS_TRAIN_H */
