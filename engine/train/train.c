/* engine/train/train.c - the training state: model graph, backward pass, AdamW. */
#include "engine/train.h"

#include "engine/backend.h"
#include "engine/compile.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define NAME_LEN 48

struct gs_train {
    struct gs_train_shape shape;
    struct gs_train_opt opt;
    struct gs_train_param *params;
    char (*names)[NAME_LEN];
    size_t n_params;
    float *param_mem; /* values, gradients, moments and the step's gradients, one block */
    float **outs;     /* [1 + n_params] OUT buffers: loss, then each gradient */
    float loss;
    float **step_grads;
    struct gs_graph *train_g, *eval_g;
    struct gs_be be;
    bool be_open;
    struct gs_plan_cache train_pc, eval_pc;
    int32_t *tokens, *targets, *pos; /* [batch * block] */
    uint32_t *seq;
    struct gs_seq_pages *seqs; /* [batch], empty: attention reads no cache */
    int64_t n_steps_in_update, n_updates;
    double grad_norm;
    /* The optimiser's work, cut into fixed pieces of parameters that the backend's
     * threads share: a piece's arithmetic does not depend on which thread runs it,
     * and the gradient norm adds the pieces' partial sums in piece order, so the
     * result does not depend on the thread count. */
    struct opt_piece *pieces;
    int n_pieces;
    double *piece_sq; /* [n_pieces]: each piece's sum of squared accumulated gradients */
    /* the update's values, set before the pieces run */
    float upd_scale, upd_lr, upd_bc1, upd_bc2;
    bool sum_squares; /* the accumulation also sums squares: this step updates */
};

/* Elements [off, off + n) of parameter `param`. */
struct opt_piece {
    uint32_t param;
    int64_t off, n;
};

/* Elements per piece: enough to outweigh a pool task's start. */
#define OPT_PIECE_ELEMS ((int64_t)1 << 14)
#define OPT_MAX_PIECES  65535

struct gs_train_opt gs_train_opt_default(void)
{
    return (struct gs_train_opt){.batch = 16, .accum = 1, .lr = 3e-3f, .min_lr = 3e-4f,
                                 .warmup = 0, .total = 0, .beta1 = 0.9f, .beta2 = 0.95f,
                                 .eps = 1e-8f, .weight_decay = 0.1f, .clip_norm = 1.0f,
                                 .init_std = 0.02f, .seed = 1};
}

float gs_train_lr(const struct gs_train_opt *o, int64_t update)
{
    if (o->warmup > 0 && update < o->warmup)
        return o->lr * (float)(update + 1) / (float)o->warmup;
    if (o->total <= o->warmup)
        return o->lr;
    if (update >= o->total)
        return o->min_lr;
    const double progress = (double)(update - o->warmup) / (double)(o->total - o->warmup);
    return (float)(o->min_lr + 0.5 * (o->lr - o->min_lr) * (1.0 + cos(M_PI * progress)));
}

/* ---- initialisation ------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A standard normal draw (Box-Muller on two 53-bit uniforms in (0, 1]). */
static double normal(uint64_t *s)
{
    double u1 = ((double)(splitmix64(s) >> 11) + 1.0) / 9007199254740992.0;
    double u2 = (double)(splitmix64(s) >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* ---- shape and parameters --------------------------------------------------------- */

static enum gs_status check(const struct gs_train_shape *s, const struct gs_train_opt *o,
                            struct gs_err *err)
{
    const int64_t limit = (int64_t)1 << 24;
    if (s->n_vocab < 2 || s->n_vocab > limit || s->n_embd <= 0 || s->n_embd > limit ||
        s->n_layer <= 0 || s->n_layer > 1024 || s->n_ff <= 0 || s->n_ff > limit ||
        s->block <= 0 || s->block > 65536)
        return gs_err_set(err, GS_INVAL,
                          "train: shape out of range (vocab %lld, width %lld, layers %lld, ffn "
                          "%lld, block %lld)",
                          (long long)s->n_vocab, (long long)s->n_embd, (long long)s->n_layer,
                          (long long)s->n_ff, (long long)s->block);
    if (s->n_head <= 0 || s->n_embd % s->n_head)
        return gs_err_set(err, GS_INVAL, "train: %lld heads do not divide the width %lld",
                          (long long)s->n_head, (long long)s->n_embd);
    if (s->n_head_kv <= 0 || s->n_head % s->n_head_kv)
        return gs_err_set(err, GS_INVAL, "train: %lld kv heads do not divide %lld heads",
                          (long long)s->n_head_kv, (long long)s->n_head);
    if ((s->n_embd / s->n_head) % 2)
        return gs_err_set(err, GS_INVAL, "train: head dim %lld must be even for rope",
                          (long long)(s->n_embd / s->n_head));
    if (o->batch <= 0 || o->batch > 65536 || o->batch * s->block > (1 << 22))
        return gs_err_set(err, GS_INVAL, "train: batch %lld of %lld tokens out of range",
                          (long long)o->batch, (long long)s->block);
    if (o->accum <= 0 || !(o->lr >= 0) || !(o->min_lr >= 0) || !(o->beta1 >= 0 && o->beta1 < 1) ||
        !(o->beta2 >= 0 && o->beta2 < 1) || !(o->eps > 0) || !(o->weight_decay >= 0) ||
        !(o->clip_norm >= 0) || !(o->init_std > 0) || o->warmup < 0 || o->total < 0)
        return gs_err_set(err, GS_INVAL, "train: an optimiser option is out of range");
    return GS_OK;
}

enum ptype { P_EMBD, P_NORM, P_MAT, P_MAT_OUT };

static void add_param(struct gs_train *t, const char *name, int64_t ne0, int64_t ne1)
{
    struct gs_train_param *p = &t->params[t->n_params];
    snprintf(t->names[t->n_params], NAME_LEN, "%s", name);
    p->name = t->names[t->n_params];
    p->ne0 = ne0;
    p->ne1 = ne1;
    t->n_params++;
}

/* The parameter list in its fixed order (names and shapes only). */
static void list_params(struct gs_train *t)
{
    const struct gs_train_shape *s = &t->shape;
    const int64_t hd = s->n_embd / s->n_head, kv = hd * s->n_head_kv;
    char name[NAME_LEN];
    t->n_params = 0;
    add_param(t, "token_embd.weight", s->n_embd, s->n_vocab);
    for (int64_t l = 0; l < s->n_layer; l++) {
        static const char *const names[] = {"attn_norm", "attn_q",   "attn_k",  "attn_v",
                                            "attn_output", "ffn_norm", "ffn_gate", "ffn_up",
                                            "ffn_down"};
        const int64_t ne[][2] = {{s->n_embd, 1},        {s->n_embd, s->n_embd}, {s->n_embd, kv},
                                 {s->n_embd, kv},       {s->n_embd, s->n_embd}, {s->n_embd, 1},
                                 {s->n_embd, s->n_ff},  {s->n_embd, s->n_ff},   {s->n_ff, s->n_embd}};
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
            snprintf(name, sizeof(name), "blk.%lld.%s.weight", (long long)l, names[i]);
            add_param(t, name, ne[i][0], ne[i][1]);
        }
    }
    add_param(t, "output_norm.weight", s->n_embd, 1);
    add_param(t, "output.weight", s->n_embd, s->n_vocab);
}

static void init_params(struct gs_train *t)
{
    uint64_t rng = t->opt.seed;
    const float std = t->opt.init_std;
    /* Projections into the residual stream start smaller, so the stream's
     * variance does not grow with depth (GPT-2's 1/sqrt(2 n_layer)). */
    const float std_out = std / sqrtf(2.0f * (float)t->shape.n_layer);
    for (size_t i = 0; i < t->n_params; i++) {
        struct gs_train_param *p = &t->params[i];
        const int64_t n = p->ne0 * p->ne1;
        const bool norm = p->ne1 == 1;
        const bool out = strstr(p->name, "attn_output") || strstr(p->name, "ffn_down");
        for (int64_t j = 0; j < n; j++)
            p->data[j] = norm ? 1.0f : (float)normal(&rng) * (out ? std_out : std);
    }
}

/* ---- graphs ------------------------------------------------------------------------- */

static uint32_t weight(struct gs_graph *g, const struct gs_train_param *p)
{
    return gs_graph_weight(g, p->name, GS_TYPE_F32, p->ne0, p->ne1, p->data);
}

/* The forward graph to the loss; ids[i] gets parameter i's node. */
static uint32_t build_forward(const struct gs_train *t, struct gs_graph *g, uint32_t *ids)
{
    const struct gs_train_shape *s = &t->shape;
    for (size_t i = 0; i < t->n_params; i++)
        ids[i] = weight(g, &t->params[i]);
    const int32_t hd = (int32_t)(s->n_embd / s->n_head);
    const struct gs_rope_params rq = {(int32_t)s->n_head, hd, hd, GS_ROPE_NORMAL, s->rope_base,
                                      1.0f};
    struct gs_rope_params rk = rq;
    rk.n_head = (int32_t)s->n_head_kv;
    const struct gs_attn_params ap = {.n_head = (int32_t)s->n_head,
                                      .n_head_kv = (int32_t)s->n_head_kv,
                                      .head_dim = hd,
                                      .scale = 1.0f / sqrtf((float)hd)};
    uint32_t x = gs_graph_name(g, gs_graph_embed(g, ids[0]), "inp_embd");
    for (int64_t l = 0; l < s->n_layer; l++) {
        const uint32_t *w = ids + 1 + 9 * l;
        uint32_t h = gs_graph_mul(g, gs_graph_rms_norm(g, x, s->rms_eps), w[0]);
        uint32_t q = gs_graph_rope(g, gs_graph_matmul(g, h, w[1]), &rq, GS_NODE_NONE);
        uint32_t k = gs_graph_rope(g, gs_graph_matmul(g, h, w[2]), &rk, GS_NODE_NONE);
        uint32_t v = gs_graph_matmul(g, h, w[3]);
        uint32_t a = gs_graph_attn_causal(g, q, k, v, &ap);
        x = gs_graph_add(g, x, gs_graph_matmul(g, a, w[4]));
        h = gs_graph_mul(g, gs_graph_rms_norm(g, x, s->rms_eps), w[5]);
        uint32_t f = gs_graph_swiglu(g, gs_graph_matmul(g, h, w[6]), gs_graph_matmul(g, h, w[7]));
        x = gs_graph_name(g, gs_graph_add(g, x, gs_graph_matmul(g, f, w[8])), "l_out-%lld",
                          (long long)l);
    }
    const size_t n = t->n_params;
    uint32_t h = gs_graph_mul(g, gs_graph_rms_norm(g, x, s->rms_eps), ids[n - 2]);
    uint32_t logits = gs_graph_matmul(g, h, ids[n - 1]);
    return gs_graph_name(g, gs_graph_cross_entropy(g, logits), "loss");
}

static enum gs_status build_graphs(struct gs_train *t, struct gs_err *err)
{
    uint32_t *ids = gs_alloc_array(t->n_params, sizeof(uint32_t));
    if (!ids)
        return gs_err_set(err, GS_NOMEM, "train: out of memory");
    enum gs_status st = gs_graph_new(&t->train_g, err);
    if (!st) {
        uint32_t loss = build_forward(t, t->train_g, ids);
        st = gs_graph_backward(t->train_g, loss, ids, (uint32_t)t->n_params, err);
    }
    if (!st)
        st = gs_graph_new(&t->eval_g, err);
    if (!st) {
        gs_graph_out(t->eval_g, build_forward(t, t->eval_g, ids), 0);
        st = gs_graph_status(t->eval_g, err);
    }
    gs_free(ids);
    if (st)
        return st;
    /* The same clean-up passes as serving; the fusions are for F32 inference rows only. */
    const struct gs_pass *passes[] = {&gs_pass_cse, &gs_pass_dce};
    st = gs_graph_run_passes(t->train_g, passes, 2, err);
    if (!st)
        st = gs_graph_run_passes(t->eval_g, passes, 2, err);
    return st;
}

/* ---- lifetime ----------------------------------------------------------------------- */

enum gs_status gs_train_new(const struct gs_train_shape *shape_in, const struct gs_train_opt *opt,
                            const char *backend, int n_threads, struct gs_train **out,
                            struct gs_err *err)
{
    *out = NULL;
    struct gs_train_shape shape = *shape_in;
    if (shape.n_head_kv == 0)
        shape.n_head_kv = shape.n_head;
    if (shape.rms_eps == 0)
        shape.rms_eps = 1e-5f;
    if (shape.rope_base == 0)
        shape.rope_base = 10000.0f;
    enum gs_status st = check(&shape, opt, err);
    if (st)
        return st;
    struct gs_train *t = gs_calloc(1, sizeof(*t));
    if (!t)
        return gs_err_set(err, GS_NOMEM, "train: out of memory");
    t->shape = shape;
    t->opt = *opt;
    const size_t max_params = 3 + 9 * (size_t)shape.n_layer;
    t->params = gs_calloc(max_params, sizeof(*t->params));
    t->names = gs_calloc(max_params, sizeof(*t->names));
    t->outs = gs_calloc(max_params + 1, sizeof(*t->outs));
    t->step_grads = gs_calloc(max_params, sizeof(*t->step_grads));
    if (!t->params || !t->names || !t->outs || !t->step_grads)
        goto nomem;
    list_params(t);
    size_t total = 0;
    for (size_t i = 0; i < t->n_params; i++)
        total += (size_t)(t->params[i].ne0 * t->params[i].ne1);
    t->param_mem = gs_alloc_array(total * 5, sizeof(float));
    if (!t->param_mem)
        goto nomem;
    float *mem = t->param_mem;
    for (size_t i = 0; i < t->n_params; i++) {
        struct gs_train_param *p = &t->params[i];
        const size_t n = (size_t)(p->ne0 * p->ne1);
        p->data = mem, p->grad = mem + n, p->m = mem + 2 * n, p->v = mem + 3 * n;
        t->step_grads[i] = p->step_grad = mem + 4 * n;
        memset(mem + n, 0, 3 * n * sizeof(float));
        mem += 5 * n;
        t->outs[1 + i] = t->step_grads[i];
    }
    t->outs[0] = &t->loss;
    /* pieces of OPT_PIECE_ELEMS, larger where a model has more than the pool takes */
    const int64_t piece =
        GS_MAX(OPT_PIECE_ELEMS, ((int64_t)total + OPT_MAX_PIECES / 2 - 1) / (OPT_MAX_PIECES / 2));
    int64_t n_pieces = 0;
    for (size_t i = 0; i < t->n_params; i++)
        n_pieces += (t->params[i].ne0 * t->params[i].ne1 + piece - 1) / piece;
    t->pieces = gs_alloc_array((size_t)n_pieces, sizeof(*t->pieces));
    t->piece_sq = gs_alloc_array((size_t)n_pieces, sizeof(double));
    if (!t->pieces || !t->piece_sq)
        goto nomem;
    for (size_t i = 0; i < t->n_params; i++) {
        const int64_t n = t->params[i].ne0 * t->params[i].ne1;
        for (int64_t off = 0; off < n; off += piece)
            t->pieces[t->n_pieces++] = (struct opt_piece){(uint32_t)i, off, GS_MIN(piece, n - off)};
    }
    init_params(t);
    const size_t n_tok = (size_t)(opt->batch * shape.block);
    t->tokens = gs_alloc_array(n_tok, sizeof(int32_t));
    t->targets = gs_alloc_array(n_tok, sizeof(int32_t));
    t->pos = gs_alloc_array(n_tok, sizeof(int32_t));
    t->seq = gs_alloc_array(n_tok, sizeof(uint32_t));
    t->seqs = gs_calloc((size_t)opt->batch, sizeof(*t->seqs));
    if (!t->tokens || !t->targets || !t->pos || !t->seq || !t->seqs)
        goto nomem;
    for (size_t i = 0; i < n_tok; i++) {
        t->pos[i] = (int32_t)(i % (size_t)shape.block);
        t->seq[i] = (uint32_t)(i / (size_t)shape.block);
    }
    st = build_graphs(t, err);
    if (!st) {
        struct gs_be_cfg cfg = {.n_threads = n_threads};
        st = gs_be_init(&t->be, backend, &cfg, err);
        t->be_open = st == GS_OK;
    }
    if (!st) {
        gs_plan_cache_init(&t->train_pc, &t->be, t->train_g);
        gs_plan_cache_init(&t->eval_pc, &t->be, t->eval_g);
        struct gs_plan *p;
        /* Both plans now, so that no step compiles or allocates. */
        st = gs_plan_cache_get(&t->train_pc, (uint32_t)n_tok, &p, err);
        if (!st)
            st = gs_plan_cache_get(&t->eval_pc, (uint32_t)n_tok, &p, err);
    }
    if (st) {
        gs_train_free(t);
        return st;
    }
    *out = t;
    return GS_OK;
nomem:
    gs_train_free(t);
    return gs_err_set(err, GS_NOMEM, "train: out of memory");
}

void gs_train_free(struct gs_train *t)
{
    if (!t)
        return;
    if (t->be_open) {
        gs_plan_cache_deinit(&t->train_pc);
        gs_plan_cache_deinit(&t->eval_pc);
        gs_be_deinit(&t->be);
    }
    gs_graph_free(t->train_g);
    gs_graph_free(t->eval_g);
    gs_free(t->params);
    gs_free(t->names);
    gs_free(t->outs);
    gs_free(t->step_grads);
    gs_free(t->param_mem);
    gs_free(t->pieces);
    gs_free(t->piece_sq);
    gs_free(t->tokens);
    gs_free(t->targets);
    gs_free(t->pos);
    gs_free(t->seq);
    gs_free(t->seqs);
    gs_free(t);
}

/* ---- steps -------------------------------------------------------------------------- */

static enum gs_status run(struct gs_train *t, struct gs_plan_cache *pc, const int32_t *tokens,
                          uint32_t n_outs, struct gs_err *err)
{
    const int64_t block = t->shape.block, n_tok = t->opt.batch * block;
    for (int64_t b = 0; b < t->opt.batch; b++) {
        const int32_t *row = tokens + b * (block + 1);
        for (int64_t i = 0; i < block; i++) {
            t->tokens[b * block + i] = row[i];
            t->targets[b * block + i] = row[i + 1];
        }
    }
    struct gs_plan *p;
    enum gs_status st = gs_plan_cache_get(pc, (uint32_t)n_tok, &p, err);
    if (st)
        return st;
    const struct gs_step_io io = {.n_tokens = (uint32_t)n_tok,
                                  .tokens = t->tokens,
                                  .pos = t->pos,
                                  .seq = t->seq,
                                  .n_seqs = (uint32_t)t->opt.batch,
                                  .seqs = t->seqs,
                                  .targets = t->targets,
                                  .outs = t->outs,
                                  .n_outs = n_outs};
    return gs_be_run(&t->be, p, &io, err);
}

/* A piece's share of a step: its gradient added into the accumulator, and on an
 * updating step the sum of squares of what the update reads. Without accumulation
 * (accum 1) the update reads the step's gradient itself and the accumulator stays
 * zero: 0 + g is g, so the bits are those of the accumulated form. */
static void accumulate_piece(void *arg, int k)
{
    struct gs_train *t = arg;
    const struct opt_piece *pc = &t->pieces[k];
    float *grad = t->params[pc->param].grad + pc->off;
    const float *g = t->step_grads[pc->param] + pc->off;
    double sq = 0;
    if (t->opt.accum == 1) {
        for (int64_t j = 0; j < pc->n; j++)
            sq += (double)g[j] * g[j];
    } else {
        for (int64_t j = 0; j < pc->n; j++) {
            grad[j] += g[j];
            sq += (double)grad[j] * grad[j];
        }
    }
    t->piece_sq[k] = t->sum_squares ? sq : 0;
}

/* A piece's AdamW update at the values update() set. */
static void adamw_piece(void *arg, int k)
{
    struct gs_train *t = arg;
    const struct gs_train_opt *o = &t->opt;
    const struct opt_piece *pc = &t->pieces[k];
    struct gs_train_param *p = &t->params[pc->param];
    const float decay = p->ne1 > 1 ? o->weight_decay : 0.0f;
    const float scale = t->upd_scale, lr = t->upd_lr, bc1 = t->upd_bc1, bc2 = t->upd_bc2;
    const bool direct = o->accum == 1;
    float *data = p->data + pc->off, *grad = p->grad + pc->off, *m = p->m + pc->off,
          *v = p->v + pc->off;
    const float *src = direct ? p->step_grad + pc->off : grad;
    /* in locals: the stores below could alias the options' floats, which
     * would keep the loop scalar */
    const float beta1 = o->beta1, beta2 = o->beta2, eps = o->eps;
    const int64_t count = pc->n;
    for (int64_t j = 0; j < count; j++) {
        const float g = src[j] * scale;
        m[j] = beta1 * m[j] + (1.0f - beta1) * g;
        v[j] = beta2 * v[j] + (1.0f - beta2) * g * g;
        const float mh = m[j] / bc1, vh = v[j] / bc2;
        data[j] -= lr * (mh / (sqrtf(vh) + eps) + decay * data[j]);
    }
    if (!direct)
        memset(grad, 0, (size_t)pc->n * sizeof(float));
}

/* The update after the accumulation's pass summed the squares. */
static void update(struct gs_train *t)
{
    const struct gs_train_opt *o = &t->opt;
    const float inv_accum = 1.0f / (float)o->accum;
    double sq = 0;
    for (int k = 0; k < t->n_pieces; k++)
        sq += t->piece_sq[k];
    t->grad_norm = sqrt(sq) * inv_accum;
    float scale = inv_accum;
    if (o->clip_norm > 0 && t->grad_norm > o->clip_norm)
        scale *= (float)(o->clip_norm / t->grad_norm);
    const int64_t step = t->n_updates + 1;
    t->upd_scale = scale;
    t->upd_lr = gs_train_lr(o, t->n_updates);
    t->upd_bc1 = 1.0f - powf(o->beta1, (float)step);
    t->upd_bc2 = 1.0f - powf(o->beta2, (float)step);
    gs_be_parallel(&t->be, adamw_piece, t, t->n_pieces);
    t->n_updates++;
}

enum gs_status gs_train_step(struct gs_train *t, const int32_t *tokens, float *loss, bool *updated,
                             struct gs_err *err)
{
    *updated = false;
    for (int64_t i = 0; i < t->opt.batch * (t->shape.block + 1); i++)
        if (tokens[i] < 0 || tokens[i] >= t->shape.n_vocab)
            return gs_err_set(err, GS_INVAL, "train: token %lld: id %d outside the vocabulary",
                              (long long)i, tokens[i]);
    enum gs_status st = run(t, &t->train_pc, tokens, (uint32_t)(1 + t->n_params), err);
    if (st)
        return st;
    *loss = t->loss;
    if (!isfinite(t->loss))
        return gs_err_set(err, GS_NUMERIC, "train: the loss is not finite (%g)", (double)t->loss);
    t->sum_squares = t->n_steps_in_update + 1 == t->opt.accum;
    gs_be_parallel(&t->be, accumulate_piece, t, t->n_pieces);
    if (++t->n_steps_in_update == t->opt.accum) {
        t->n_steps_in_update = 0;
        update(t);
        *updated = true;
    }
    return GS_OK;
}

enum gs_status gs_train_eval(struct gs_train *t, const int32_t *tokens, float *loss,
                             struct gs_err *err)
{
    for (int64_t i = 0; i < t->opt.batch * (t->shape.block + 1); i++)
        if (tokens[i] < 0 || tokens[i] >= t->shape.n_vocab)
            return gs_err_set(err, GS_INVAL, "train: token %lld: id %d outside the vocabulary",
                              (long long)i, tokens[i]);
    enum gs_status st = run(t, &t->eval_pc, tokens, 1, err);
    if (!st)
        *loss = t->loss;
    return st;
}

size_t gs_train_n_params(const struct gs_train *t)
{
    return t->n_params;
}

const struct gs_train_param *gs_train_param(const struct gs_train *t, size_t i)
{
    return i < t->n_params ? &t->params[i] : NULL;
}

int64_t gs_train_updates(const struct gs_train *t)
{
    return t->n_updates;
}

double gs_train_grad_norm(const struct gs_train *t)
{
    return t->grad_norm;
}

const struct gs_graph *gs_train_graph(const struct gs_train *t)
{
    return t->train_g;
}

/* ---- checkpoints -------------------------------------------------------------------- */

static const char ckpt_magic[8] = {'G', 'S', 'T', 'R', 'A', 'I', 'N', '1'};

/* The header: what a checkpoint must agree on, then the counters. */
static void ckpt_header(const struct gs_train *t, int64_t h[12])
{
    const struct gs_train_shape *s = &t->shape;
    const int64_t v[12] = {(int64_t)t->n_params, s->n_vocab, s->n_embd, s->n_layer, s->n_head,
                           s->n_head_kv, s->n_ff, s->block, t->opt.batch, t->opt.accum,
                           t->n_updates, t->n_steps_in_update};
    memcpy(h, v, sizeof(v));
}

enum gs_status gs_train_save(const struct gs_train *t, const char *path, const void *user,
                             size_t user_len, struct gs_err *err)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
        return gs_err_set(err, GS_INVAL, "checkpoint: path too long");
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return gs_err_set(err, GS_IO, "checkpoint: cannot create %s", tmp);
    int64_t h[12];
    ckpt_header(t, h);
    const uint64_t ulen = user_len;
    bool ok = fwrite(ckpt_magic, sizeof(ckpt_magic), 1, f) == 1 && fwrite(h, sizeof(h), 1, f) == 1;
    for (size_t i = 0; i < t->n_params && ok; i++) {
        const struct gs_train_param *p = &t->params[i];
        const size_t n = (size_t)(p->ne0 * p->ne1);
        ok = fwrite(p->data, sizeof(float), n, f) == n && fwrite(p->grad, sizeof(float), n, f) == n &&
             fwrite(p->m, sizeof(float), n, f) == n && fwrite(p->v, sizeof(float), n, f) == n;
    }
    ok = ok && fwrite(&ulen, sizeof(ulen), 1, f) == 1 &&
         (user_len == 0 || fwrite(user, user_len, 1, f) == 1);
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path)) {
        remove(tmp);
        return gs_err_set(err, GS_IO, "checkpoint: cannot write %s", path);
    }
    return GS_OK;
}

enum gs_status gs_train_load(struct gs_train *t, const char *path, void *user, size_t user_len,
                             struct gs_err *err)
{
    static const char *const fields[12] = {"parameter count", "vocabulary", "width", "layers",
                                           "heads", "kv heads", "feed-forward width", "block",
                                           "batch", "accumulation"};
    FILE *f = fopen(path, "rb");
    if (!f)
        return gs_err_set(err, GS_IO, "checkpoint: cannot open %s", path);
    char magic[8];
    int64_t h[12], want[12];
    uint64_t ulen = 0;
    enum gs_status st = GS_OK;
    ckpt_header(t, want);
    if (fread(magic, sizeof(magic), 1, f) != 1 || memcmp(magic, ckpt_magic, sizeof(magic)) ||
        fread(h, sizeof(h), 1, f) != 1)
        st = gs_err_set(err, GS_FORMAT, "checkpoint: %s is not a graphserve training checkpoint",
                        path);
    for (int i = 0; i < 10 && !st; i++)
        if (h[i] != want[i])
            st = gs_err_set(err, GS_INVAL, "checkpoint: %s has %s %lld, this run %lld", path,
                            fields[i], (long long)h[i], (long long)want[i]);
    if (!st && (h[10] < 0 || h[11] < 0 || h[11] >= t->opt.accum))
        st = gs_err_set(err, GS_FORMAT, "checkpoint: %s: bad counters", path);
    /* Read straight into the state: a damaged tail leaves it partly loaded,
     * and the caller (told so by the status) frees it. */
    for (size_t i = 0; i < t->n_params && !st; i++) {
        struct gs_train_param *p = &t->params[i];
        const size_t n = (size_t)(p->ne0 * p->ne1);
        if (fread(p->data, sizeof(float), n, f) != n || fread(p->grad, sizeof(float), n, f) != n ||
            fread(p->m, sizeof(float), n, f) != n || fread(p->v, sizeof(float), n, f) != n)
            st = gs_err_set(err, GS_FORMAT, "checkpoint: %s is truncated", path);
    }
    if (!st && (fread(&ulen, sizeof(ulen), 1, f) != 1 || ulen != user_len ||
                (user_len && fread(user, user_len, 1, f) != 1)))
        st = gs_err_set(err, GS_FORMAT, "checkpoint: %s: the caller's %zu bytes are missing",
                        path, user_len);
    if (!st && fgetc(f) != EOF)
        st = gs_err_set(err, GS_FORMAT, "checkpoint: %s has bytes after its end", path);
    fclose(f);
    if (!st) {
        t->n_updates = h[10];
        t->n_steps_in_update = h[11];
    }
    return st;
}
