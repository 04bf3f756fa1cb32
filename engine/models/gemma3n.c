/*
 * engine/models/gemma3n.c - the gemma3n family (Gemma 3n text). Not a decoder
 * description: its own builder, over the hyperparameters every family shares
 * (gs_model_read_hparams with Gemma 3's variants) and these parts:
 *
 *   AltUp. The model carries m = altup.num_inputs streams of n_embd, kept side
 *   by side in one [m * n_embd] row per token. At the start stream 0 is the
 *   scaled embedding and stream i the embedding through altup_proj[i - 1],
 *   given stream 0's magnitude (mag_match). Each layer predicts every stream
 *   from all of them (altup_predict, coefficients from the router: tanh of the
 *   normed active stream / n_embd through altup_router, then altup_predict_coef),
 *   runs the block on the active one, and corrects the others with the block's
 *   innovation (altup_correct, coefficients + 1). At the end streams 1.. are
 *   unembedded (altup_unembd_proj), magnitude-matched to the active one and the
 *   m streams averaged.
 *   LAuReL. Beside attention, a rank-r residual of the normed input
 *   (laurel_l, laurel_r, laurel_post_norm, + input); the attention output (plus
 *   its residual) and it are summed and divided by sqrt 2.
 *   Per-layer inputs. per_layer_token_embd rows (read by token id from the
 *   mapped file) times sqrt(P), plus per_layer_model_proj of the embedding
 *   times 1/sqrt(n_embd) RMS-normed per layer slice, summed and divided by
 *   sqrt 2: [n_layer * P] per token; layer l takes its slice (cols) through a
 *   GELU gate on the corrected active stream (altup_correct_scale, inp_gate),
 *   then proj and post_norm, and adds it to every stream but the first.
 *   Activation sparsity. A layer whose activation_sparsity_scale k is not 0
 *   keeps only the gate's values above mean + k std of the row (gauss_topk).
 *   KV sharing. The last attention.shared_kv_layers layers store no K or V:
 *   each reads the cache of the last layer before them of its kind (sliding or
 *   global), so the KV pool holds n_layer - shared layers (gs_model_kv_layers).
 *   Attention: q and k RMS-normed per head with weights, v without (a weight of
 *   ones), scale 1, no soft-cap; a sliding window on four layers in five
 *   (l % 5 < 4, llama.cpp's period; the file's sliding_window_pattern must
 *   agree), their rope base rope.freq_base_swa (10000 when absent), unscaled.
 *   Final logits are capped at final_logit_softcapping.
 *
 * Values llama.cpp fixes rather than reads, which this file takes from the
 * keys where they exist and refuses when they differ from what the graph
 * below computes: the active stream is 0 (altup.active_idx), the swa period
 * 5, the query scale 1.
 */
#include "engine/model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAX_STREAMS 4 /* concat takes at most GS_GRAPH_MAX_SRC sources */
#define SWA_PERIOD  5

struct g3n {
    struct gs_model *m;
    struct gs_graph *g;
    uint32_t n;         /* n_embd */
    uint32_t n_streams; /* altup.num_inputs */
    uint32_t act;       /* altup.active_idx */
    uint32_t per_layer; /* P: embedding_length_per_layer_input */
    float *sparsity;    /* [n_layer]: k of each layer's Gaussian top-k, 0 for none */
    uint32_t *kv_node;  /* [n_layer_kv]: each cache owner's kv_store node */
};

static enum gs_status key_u32(const struct gs_model *m, const char *suffix, bool required,
                              uint32_t def, uint32_t *out, struct gs_err *err)
{
    char key[128];
    snprintf(key, sizeof(key), "%s.%s", m->hp.arch, suffix);
    if (!gs_gguf_find_kv(m->file, key)) {
        *out = def;
        return required ? gs_err_set(err, GS_FORMAT, "metadata '%s' is missing", key) : GS_OK;
    }
    return gs_gguf_get_u32(m->file, key, out, err);
}

/* The Gemma 3n keys beyond the shared ones, each checked. */
static enum gs_status read_keys(struct g3n *b, struct gs_err *err)
{
    struct gs_model *m = b->m;
    struct gs_model_hparams *hp = &m->hp;
    const char *a = hp->arch;
    uint32_t shared = 0;
    enum gs_status st;
    if ((st = key_u32(m, "altup.num_inputs", true, 0, &b->n_streams, err)) ||
        (st = key_u32(m, "altup.active_idx", true, 0, &b->act, err)) ||
        (st = key_u32(m, "embedding_length_per_layer_input", true, 0, &b->per_layer, err)) ||
        (st = key_u32(m, "attention.shared_kv_layers", false, 0, &shared, err)))
        return st;
    if (b->n_streams < 2 || b->n_streams > MAX_STREAMS)
        return gs_err_set(err, GS_FORMAT, "metadata '%s.altup.num_inputs': %u streams (2 to %d)", a,
                          b->n_streams, MAX_STREAMS);
    if (b->act >= b->n_streams)
        return gs_err_set(err, GS_FORMAT,
                          "metadata '%s.altup.active_idx': %u is not one of the %u streams", a,
                          b->act, b->n_streams);
    if (b->act != 0)
        return gs_err_set(err, GS_UNSUPPORTED,
                          "metadata '%s.altup.active_idx': %u; the per-layer input and the "
                          "unembedding treat stream 0 as the active one",
                          a, b->act);
    if (b->per_layer == 0 || b->per_layer > (1u << 16))
        return gs_err_set(err, GS_FORMAT,
                          "metadata '%s.embedding_length_per_layer_input': %u is not a width", a,
                          b->per_layer);
    if (shared >= hp->n_layer || (shared && hp->n_layer - shared < 2))
        return gs_err_set(err, GS_FORMAT,
                          "metadata '%s.attention.shared_kv_layers': %u of %u layers leaves no "
                          "sliding and global layer to share",
                          a, shared, hp->n_layer);
    hp->n_layer_kv = hp->n_layer - shared;
    if (hp->swa_window == 0)
        return gs_err_set(err, GS_FORMAT, "metadata '%s.attention.sliding_window' is missing", a);

    char key[128];
    snprintf(key, sizeof(key), "%s.activation_sparsity_scale", a);
    b->sparsity = gs_calloc(hp->n_layer, sizeof(*b->sparsity));
    b->kv_node = gs_alloc_array(hp->n_layer_kv, sizeof(*b->kv_node));
    if (!b->sparsity || !b->kv_node)
        return gs_err_set(err, GS_NOMEM, "model: out of memory");
    const struct gs_gguf_kv *kv = gs_gguf_find_kv(m->file, key);
    if (kv) {
        if (kv->type != GS_GGUF_ARRAY || kv->v.arr.type != GS_GGUF_F32 ||
            kv->v.arr.n != hp->n_layer)
            return gs_err_set(err, GS_FORMAT, "metadata '%s': must be %u f32 values", key,
                              hp->n_layer);
        for (uint32_t l = 0; l < hp->n_layer; l++) {
            b->sparsity[l] = gs_gguf_arr_f32(kv, l);
            if (!isfinite(b->sparsity[l]) || b->sparsity[l] < 0)
                return gs_err_set(err, GS_FORMAT, "metadata '%s': layer %u has %g", key, l,
                                  (double)b->sparsity[l]);
        }
    }
    snprintf(key, sizeof(key), "%s.attention.sliding_window_pattern", a);
    if ((kv = gs_gguf_find_kv(m->file, key))) {
        if (kv->type != GS_GGUF_ARRAY || kv->v.arr.type != GS_GGUF_BOOL ||
            kv->v.arr.n != hp->n_layer)
            return gs_err_set(err, GS_FORMAT, "metadata '%s': must be %u bools", key, hp->n_layer);
        for (uint32_t l = 0; l < hp->n_layer; l++)
            if ((((const uint8_t *)kv->v.arr.data)[l] != 0) != gs_model_layer_slides(hp, l))
                return gs_err_set(err, GS_UNSUPPORTED,
                                  "metadata '%s': layer %u differs from the period of %d "
                                  "(four sliding layers, then a global one)",
                                  key, l, SWA_PERIOD);
    }
    return GS_OK;
}

/* The layer whose cache layer l reads: its own, or for a sharing layer the last owner
 * of its kind (the owners end with a sliding and a global layer). */
static uint32_t kv_source(const struct gs_model_hparams *hp, uint32_t l)
{
    if (l < hp->n_layer_kv)
        return l;
    for (uint32_t s = hp->n_layer_kv; s-- > 0;)
        if (gs_model_layer_slides(hp, s) == gs_model_layer_slides(hp, l))
            return s;
    return hp->n_layer_kv - 1;
}

static enum gs_status w(struct g3n *b, uint32_t l, const char *suffix, int64_t ne0, int64_t ne1,
                        uint32_t *id, struct gs_err *err)
{
    char name[96];
    snprintf(name, sizeof(name), "blk.%u.%s", l, suffix);
    return gs_model_weight(b->m, name, ne0, ne1, false, id, err);
}

/* x RMS-normed, times the weight. */
static uint32_t norm(struct g3n *b, uint32_t x, uint32_t weight, const char *name, uint32_t l)
{
    uint32_t h = gs_graph_name(b->g, gs_graph_rms_norm(b->g, x, b->m->hp.rms_eps), "norm-%u", l);
    return gs_graph_name(b->g, gs_graph_mul(b->g, h, weight), "%s-%u", name, l);
}

/* Stream i of the stacked streams. */
static uint32_t stream(struct g3n *b, uint32_t streams, uint32_t i)
{
    return gs_graph_cols(b->g, streams, (int64_t)i * b->n, b->n);
}

/* The router's modalities for x: tanh(rms_norm(x) * router_norm / n_embd @ router). */
static uint32_t modalities(struct g3n *b, uint32_t x, uint32_t router_norm, uint32_t router,
                           uint32_t l)
{
    uint32_t h = norm(b, x, router_norm, "altup_router_norm", l);
    h = gs_graph_scale(b->g, h, 1.0f / (float)b->n);
    h = gs_graph_matmul(b->g, h, router);
    return gs_graph_name(b->g, gs_graph_softcap(b->g, h, 1.0f), "modalities-%u", l);
}

struct layer_w {
    uint32_t attn_norm, q, k, v, q_norm, k_norm, out, post_attn, ffn_norm, gate, up, down, post_ffw,
        inp_gate, proj, post_norm, corr_coef, corr_scale, pred_coef, router, router_norm, laurel_l,
        laurel_r, laurel_norm;
};

static enum gs_status layer_weights(struct g3n *b, uint32_t l, struct layer_w *lw,
                                    struct gs_err *err)
{
    const struct gs_model_hparams *hp = &b->m->hp;
    const int64_t n = b->n, n_q = (int64_t)hp->n_head * hp->head_dim;
    const int64_t n_kv = (int64_t)hp->n_head_kv * hp->head_dim, hd = hp->head_dim;
    const int64_t ff = b->m->n_ff_layer ? b->m->n_ff_layer[l] : hp->n_ff;
    const int64_t ms = b->n_streams, P = b->per_layer;
    const struct gs_gguf_tensor *lt;
    char name[96];
    snprintf(name, sizeof(name), "blk.%u.laurel_l.weight", l);
    lt = gs_gguf_find_tensor(b->m->file, name);
    const int64_t rank = lt && lt->n_dims == 2 ? lt->ne[1] : 0;
    if (rank <= 0 || rank > n)
        return gs_err_set(err, GS_FORMAT, "tensor '%s' is missing or not [%lld x rank]", name,
                          (long long)n);
    enum gs_status st;
    const bool owns_kv = l < hp->n_layer_kv;
    lw->k = lw->v = lw->k_norm = GS_NODE_NONE;
    if ((st = w(b, l, "attn_norm.weight", n, 1, &lw->attn_norm, err)) ||
        (st = w(b, l, "attn_q.weight", n, n_q, &lw->q, err)) ||
        (owns_kv && (st = w(b, l, "attn_k.weight", n, n_kv, &lw->k, err))) ||
        (owns_kv && (st = w(b, l, "attn_v.weight", n, n_kv, &lw->v, err))) ||
        (st = w(b, l, "attn_q_norm.weight", hd, 1, &lw->q_norm, err)) ||
        (owns_kv && (st = w(b, l, "attn_k_norm.weight", hd, 1, &lw->k_norm, err))) ||
        (st = w(b, l, "attn_output.weight", n_q, n, &lw->out, err)) ||
        (st = w(b, l, "post_attention_norm.weight", n, 1, &lw->post_attn, err)) ||
        (st = w(b, l, "ffn_norm.weight", n, 1, &lw->ffn_norm, err)) ||
        (st = w(b, l, "ffn_gate.weight", n, ff, &lw->gate, err)) ||
        (st = w(b, l, "ffn_up.weight", n, ff, &lw->up, err)) ||
        (st = w(b, l, "ffn_down.weight", ff, n, &lw->down, err)) ||
        (st = w(b, l, "post_ffw_norm.weight", n, 1, &lw->post_ffw, err)) ||
        (st = w(b, l, "inp_gate.weight", n, P, &lw->inp_gate, err)) ||
        (st = w(b, l, "proj.weight", P, n, &lw->proj, err)) ||
        (st = w(b, l, "post_norm.weight", n, 1, &lw->post_norm, err)) ||
        (st = w(b, l, "altup_correct_coef.weight", ms, ms, &lw->corr_coef, err)) ||
        (st = w(b, l, "altup_correct_scale.weight", n, 1, &lw->corr_scale, err)) ||
        (st = w(b, l, "altup_predict_coef.weight", ms, ms * ms, &lw->pred_coef, err)) ||
        (st = w(b, l, "altup_router.weight", n, ms, &lw->router, err)) ||
        (st = w(b, l, "altup_router_norm.weight", n, 1, &lw->router_norm, err)) ||
        (st = w(b, l, "laurel_l.weight", n, rank, &lw->laurel_l, err)) ||
        (st = w(b, l, "laurel_r.weight", rank, n, &lw->laurel_r, err)) ||
        (st = w(b, l, "laurel_post_norm.weight", n, 1, &lw->laurel_norm, err)))
        return st;
    return GS_OK;
}

/* Layer l: the stacked streams *s in, corrected and with the layer's input added out. */
static enum gs_status build_layer(struct g3n *b, uint32_t l, uint32_t per_layer_inputs,
                                  uint32_t rope_ff, uint32_t *s, struct gs_err *err)
{
    struct gs_graph *g = b->g;
    const struct gs_model_hparams *hp = &b->m->hp;
    struct layer_w lw;
    enum gs_status st = layer_weights(b, l, &lw, err);
    if (st)
        return st;
    const uint32_t src = kv_source(hp, l);

    /* AltUp predict, then the block on the active stream's prediction. */
    uint32_t mod = modalities(b, stream(b, *s, b->act), lw.router_norm, lw.router, l);
    uint32_t coefs = gs_graph_matmul(g, mod, lw.pred_coef);
    uint32_t pred = gs_graph_name(g, gs_graph_altup_predict(g, *s, coefs, (int32_t)b->n_streams),
                                  "predictions-%u", l);
    uint32_t active = gs_graph_name(g, stream(b, pred, b->act), "active_prediction-%u", l);
    uint32_t cur = norm(b, active, lw.attn_norm, "attn_norm", l);

    uint32_t laurel = gs_graph_matmul(g, gs_graph_matmul(g, cur, lw.laurel_l), lw.laurel_r);
    laurel = norm(b, laurel, lw.laurel_norm, "laurel_post_norm", l);
    laurel = gs_graph_name(g, gs_graph_add(g, laurel, cur), "laurel_out-%u", l);

    struct gs_rope_params rp;
    struct gs_attn_params ap;
    gs_model_layer_params(hp, l, &rp, &ap);
    ap.layer = (int32_t)src; /* a sharing layer reads an earlier layer's cache */
    const int32_t hd = (int32_t)hp->head_dim;
    uint32_t q = gs_graph_name(g, gs_graph_matmul(g, cur, lw.q), "Qcur-%u", l);
    q = gs_graph_name(g, gs_graph_rms_norm_heads(g, q, lw.q_norm, hd, hp->rms_eps),
                      "Qcur_normed-%u", l);
    q = gs_graph_name(g, gs_graph_rope(g, q, &rp, rope_ff), "Qcur_pos-%u", l);
    if (l < hp->n_layer_kv) {
        uint32_t k = gs_graph_name(g, gs_graph_matmul(g, cur, lw.k), "Kcur-%u", l);
        uint32_t v = gs_graph_name(g, gs_graph_matmul(g, cur, lw.v), "Vcur-%u", l);
        k = gs_graph_rms_norm_heads(g, k, lw.k_norm, hd, hp->rms_eps);
        v = gs_graph_name(g,
                          gs_graph_rms_norm_heads(g, v, gs_model_ones(b->m, hd), hd, hp->rms_eps),
                          "Vcur_normed-%u", l);
        rp.n_head = (int32_t)hp->n_head_kv;
        k = gs_graph_name(g, gs_graph_rope(g, k, &rp, rope_ff), "Kcur_pos-%u", l);
        b->kv_node[l] = gs_graph_name(g, gs_graph_kv_store(g, k, v, &ap), "kv_store-%u", l);
    }
    uint32_t a = gs_graph_name(g, gs_graph_attn(g, q, b->kv_node[src], &ap), "kqv-%u", l);
    a = gs_graph_matmul(g, a, lw.out);
    a = norm(b, a, lw.post_attn, "attn_post_norm", l);
    a = gs_graph_name(g, gs_graph_add(g, a, active), "attn_gated-%u", l);
    uint32_t attn_laurel = gs_graph_name(
        g, gs_graph_scale(g, gs_graph_add(g, a, laurel), 1.0f / sqrtf(2.0f)), "attn_laurel-%u", l);

    uint32_t h = norm(b, attn_laurel, lw.ffn_norm, "ffn_norm", l);
    uint32_t up = gs_graph_matmul(g, h, lw.up);
    uint32_t gate = gs_graph_matmul(g, h, lw.gate);
    if (b->sparsity[l] != 0)
        gate = gs_graph_name(g, gs_graph_gauss_topk(g, gate, b->sparsity[l]), "ffn_sparse-%u", l);
    gate = gs_graph_gelu(g, gate);
    uint32_t ffn = gs_graph_matmul(g, gs_graph_mul(g, gate, up), lw.down);
    ffn = norm(b, ffn, lw.post_ffw, "ffn_post_norm", l);
    uint32_t out =
        gs_graph_name(g, gs_graph_add(g, ffn, attn_laurel), "attn_ffw_laurel_gated-%u", l);

    /* AltUp correct, then the per-layer input into every stream but the first. */
    mod = modalities(b, out, lw.router_norm, lw.router, l);
    uint32_t corr =
        gs_graph_name(g,
                      gs_graph_altup_correct(g, pred, out, gs_graph_matmul(g, mod, lw.corr_coef),
                                             (int32_t)b->n_streams, (int32_t)b->act),
                      "corrected-%u", l);
    uint32_t first = gs_graph_mul(g, stream(b, corr, b->act), lw.corr_scale);
    first = gs_graph_gelu(g, gs_graph_matmul(g, first, lw.inp_gate));
    uint32_t inp = gs_graph_cols(g, per_layer_inputs, (int64_t)l * b->per_layer, b->per_layer);
    first = gs_graph_name(g, gs_graph_mul(g, first, inp), "first_prediction_scaled-%u", l);
    first = norm(b, gs_graph_matmul(g, first, lw.proj), lw.post_norm, "first_prediction_out", l);
    uint32_t parts[MAX_STREAMS];
    for (uint32_t i = 0; i < b->n_streams; i++) {
        parts[i] = stream(b, corr, i);
        if (i > 0)
            parts[i] = gs_graph_add(g, parts[i], first);
    }
    *s = gs_graph_name(g, gs_graph_concat(g, parts, (int)b->n_streams), "l_out-%u", l);
    return gs_graph_status(g, err);
}

static enum gs_status build(struct g3n *b, struct gs_err *err)
{
    struct gs_model *m = b->m;
    struct gs_model_hparams *hp = &m->hp;
    struct gs_graph *g = b->g;
    const int64_t n = b->n, L = hp->n_layer, P = b->per_layer, ms = b->n_streams;
    const struct gs_gguf_tensor *te = gs_gguf_find_tensor(m->file, "token_embd.weight");
    if (!te || te->n_dims != 2 || te->ne[1] <= 0 || te->ne[1] > INT32_MAX)
        return gs_err_set(err, GS_FORMAT, "tensor 'token_embd.weight' must be [n_embd x n_vocab]");
    hp->n_vocab = (uint32_t)te->ne[1];
    uint32_t tok, pl_tok, pl_proj, pl_norm, out_norm, output, up[MAX_STREAMS], un[MAX_STREAMS];
    enum gs_status st;
    if ((st = gs_model_weight(m, "token_embd.weight", n, hp->n_vocab, false, &tok, err)) ||
        (st = gs_model_weight(m, "per_layer_token_embd.weight", L * P, hp->n_vocab, false, &pl_tok,
                              err)) ||
        (st = gs_model_weight(m, "per_layer_model_proj.weight", n, L * P, false, &pl_proj, err)) ||
        (st = gs_model_weight(m, "per_layer_proj_norm.weight", P, 1, false, &pl_norm, err)) ||
        (st = gs_model_weight(m, "output_norm.weight", n, 1, false, &out_norm, err)) ||
        (st = gs_model_weight(m, "output.weight", n, hp->n_vocab, true, &output, err)))
        return st;
    for (int64_t i = 0; i + 1 < ms; i++)
        if ((st = gs_model_weight_stacked(m, "altup_proj.weight", n, n, ms - 1, i, &up[i], err)) ||
            (st = gs_model_weight_stacked(m, "altup_unembd_proj.weight", n, n, ms - 1, i, &un[i],
                                          err)))
            return st;
    if (gs_gguf_find_tensor(m->file, "rope_freqs.weight"))
        return gs_err_set(
            err, GS_UNSUPPORTED,
            "tensor 'rope_freqs.weight': gemma3n does not use rope frequency factors");
    hp->tied_output = output == GS_NODE_NONE;
    if (hp->tied_output)
        output = tok;

    uint32_t x = gs_graph_name(g, gs_graph_embed(g, tok), "inp_embd");
    x = gs_graph_name(g, gs_graph_scale(g, x, hp->embd_scale), "inp_scaled");
    /* [n_layer * P] per token: token rows plus the embedding's projection. */
    uint32_t pl = gs_graph_scale(g, gs_graph_embed(g, pl_tok), sqrtf((float)P));
    uint32_t proj = gs_graph_scale(g, gs_graph_matmul(g, x, pl_proj), 1.0f / sqrtf((float)n));
    proj = gs_graph_name(g, gs_graph_rms_norm_heads(g, proj, pl_norm, (int32_t)P, hp->rms_eps),
                         "per_layer_proj");
    uint32_t pli = gs_graph_name(
        g, gs_graph_scale(g, gs_graph_add(g, pl, proj), 1.0f / sqrtf(2.0f)), "inp_per_layer");
    uint32_t parts[MAX_STREAMS] = {x};
    for (int64_t i = 1; i < ms; i++)
        parts[i] = gs_graph_mag_match(g, gs_graph_matmul(g, x, up[i - 1]), x);
    uint32_t s = gs_graph_name(g, gs_graph_concat(g, parts, (int)ms), "inp_stacked");
    for (uint32_t l = 0; l < hp->n_layer; l++)
        if ((st = build_layer(b, l, pli, GS_NODE_NONE, &s, err)))
            return st;
    /* The streams back to one: unembedded, given the active stream's magnitude, averaged. */
    uint32_t active = stream(b, s, b->act), sum = stream(b, s, 0);
    for (int64_t i = 1; i < ms; i++) {
        uint32_t u = gs_graph_matmul(g, stream(b, s, (uint32_t)i), un[i - 1]);
        sum = gs_graph_add(g, sum, gs_graph_mag_match(g, u, active));
    }
    x = gs_graph_name(g, gs_graph_scale(g, sum, 1.0f / (float)ms), "unembd_merged");
    /* Every row's final hidden state for embeddings, as the shared decoder does. */
    uint32_t h = gs_graph_name(g, gs_graph_rms_norm(g, x, hp->rms_eps), "hidden_norm");
    h = gs_graph_name(g, gs_graph_mul(g, h, out_norm), "hidden_result");
    gs_graph_name(g, gs_graph_hidden(g, h), "hidden");
    x = gs_graph_name(g, gs_graph_outputs(g, x), "inp_out");
    x = gs_graph_name(g, gs_graph_rms_norm(g, x, hp->rms_eps), "norm");
    x = gs_graph_name(g, gs_graph_mul(g, x, out_norm), "result_norm");
    x = gs_graph_name(g, gs_graph_matmul(g, x, output), "result_output");
    if (hp->final_softcap > 0)
        x = gs_graph_name(g, gs_graph_softcap(g, x, hp->final_softcap), "result_softcap");
    gs_graph_name(g, gs_graph_logits(g, x), "logits");
    return gs_graph_status(g, err);
}

enum gs_status gs_model_build_gemma3n(struct gs_model *m, struct gs_err *err)
{
    const struct gs_block_desc d = {
        .rope_mode = GS_ROPE_NEOX,
        .qk_norm = true,
        .ffn_act = GS_FFN_GELU,
        .embd_scale = true,
        .post_norms = true,
        .final_softcap = true,
        .final_softcap_default = 30.0f,
        .swa_period = SWA_PERIOD,
        .swa_rope_base_default = 10000.0f,
        .swa_rope_unscaled = true,
        .query_scale = 1.0f,
    };
    struct g3n b = {.m = m, .g = m->graph};
    enum gs_status st = gs_model_read_hparams(m, &d, err);
    if (!st) {
        b.n = m->hp.n_embd;
        st = read_keys(&b, err);
    }
    if (!st)
        st = build(&b, err);
    gs_free(b.sparsity);
    gs_free(b.kv_node);
    return st;
}
