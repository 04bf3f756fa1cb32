/*
 * engine/models/decoder.c - the decoder every family shares: pre-norm blocks
 * with RMSNorm, rotary embeddings, grouped-query attention and a gated
 * feed-forward, an output projection that may be tied to the embedding. A
 * family's struct gs_block_desc (engine/model.h) says where its blocks differ:
 * rope style, q/k/v biases, fused projections, per-head q/k norms, post-norms,
 * the gate's activation, soft-caps, sliding windows. The hyperparameters are
 * read here once and checked here once.
 */
#include "engine/model.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Reads "<arch>.<suffix>" as u32; missing keys take def when def_ok. */
static enum gs_status get_u32(const struct gs_model *m, const char *suffix, bool def_ok,
                              uint32_t def, uint32_t *out, struct gs_err *err)
{
    char key[128];
    snprintf(key, sizeof(key), "%s.%s", m->hp.arch, suffix);
    if (def_ok && !gs_gguf_find_kv(m->file, key)) {
        *out = def;
        return GS_OK;
    }
    enum gs_status st = gs_gguf_get_u32(m->file, key, out, err);
    return st == GS_NOTFOUND ? gs_err_set(err, GS_FORMAT, "metadata '%s' is missing", key) : st;
}

static enum gs_status get_f32(const struct gs_model *m, const char *suffix, bool def_ok, float def,
                              float *out, struct gs_err *err)
{
    char key[128];
    snprintf(key, sizeof(key), "%s.%s", m->hp.arch, suffix);
    if (def_ok && !gs_gguf_find_kv(m->file, key)) {
        *out = def;
        return GS_OK;
    }
    enum gs_status st = gs_gguf_get_f32(m->file, key, out, err);
    return st == GS_NOTFOUND ? gs_err_set(err, GS_FORMAT, "metadata '%s' is missing", key) : st;
}

static int32_t token_id(const struct gs_gguf *f, const char *key)
{
    uint32_t v;
    if (gs_gguf_get_u32(f, key, &v, NULL) != GS_OK || v > INT32_MAX)
        return -1;
    return (int32_t)v;
}

/* Rope scaling: none or linear. */
static enum gs_status read_rope_scaling(struct gs_model *m, struct gs_err *err)
{
    char key[128];
    m->hp.rope_freq_scale = 1.0f;
    snprintf(key, sizeof(key), "%s.rope.scaling.type", m->hp.arch);
    struct gs_gguf_str type = {0, ""};
    if (gs_gguf_find_kv(m->file, key)) {
        enum gs_status st = gs_gguf_get_str(m->file, key, &type, err);
        if (st)
            return st;
    }
    float factor = 0;
    enum gs_status st = get_f32(m, "rope.scaling.factor", true, 0, &factor, err);
    if (st)
        return st;
    if (type.len == 0 || gs_gguf_str_eq(type, "none")) {
        float lin = 0;
        st = get_f32(m, "rope.scale_linear", true, 0, &lin, err);
        if (st)
            return st;
        factor = type.len ? 0 : lin;
    } else if (!gs_gguf_str_eq(type, "linear")) {
        return gs_err_set(err, GS_UNSUPPORTED, "metadata '%s': scaling '%.*s' is not supported",
                          key, (int)GS_MIN(type.len, 32), type.data);
    }
    if (factor != 0 && !(factor > 0 && isfinite(factor)))
        return gs_err_set(err, GS_FORMAT, "metadata '%s.rope.scaling.factor': %g is not positive",
                          m->hp.arch, (double)factor);
    if (factor > 0)
        m->hp.rope_freq_scale = 1.0f / factor;
    return GS_OK;
}

/* A soft-cap key: absent takes def; present must be positive and finite. */
static enum gs_status read_softcap(struct gs_model *m, const char *suffix, float def, float *out,
                                   struct gs_err *err)
{
    enum gs_status st = get_f32(m, suffix, true, def, out, err);
    if (st)
        return st;
    if (*out == def && def == 0)
        return GS_OK;
    if (!(*out > 0 && isfinite(*out)))
        return gs_err_set(err, GS_FORMAT, "metadata '%s.%s': %g is not positive", m->hp.arch,
                          suffix, (double)*out);
    return GS_OK;
}

/* What Gemma-like families add: embedding scale, query scale, soft-caps, sliding windows. */
static enum gs_status read_variant_hparams(struct gs_model *m, const struct gs_block_desc *d,
                                           struct gs_err *err)
{
    struct gs_model_hparams *hp = &m->hp;
    const char *a = hp->arch;
    enum gs_status st;
    hp->embd_scale = d->embd_scale ? sqrtf((float)hp->n_embd) : 1.0f;
    hp->query_scale = 1.0f / sqrtf((float)hp->head_dim);
    if (d->query_scale_wide_n_layer && hp->n_layer == d->query_scale_wide_n_layer)
        hp->query_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
    if (d->query_scale > 0)
        hp->query_scale = d->query_scale;
    if ((d->attn_softcap && (st = read_softcap(m, "attn_logit_softcapping", d->attn_softcap_default,
                                               &hp->attn_softcap, err))) ||
        (d->final_softcap &&
         (st = read_softcap(m, "final_logit_softcapping", d->final_softcap_default,
                            &hp->final_softcap, err))))
        return st;
    hp->rope_freq_base_swa = hp->rope_freq_base;
    hp->swa_window = 0;
    hp->rope_freq_scale_swa = hp->rope_freq_scale;
    if (!d->swa_period)
        return GS_OK;
    char key[128];
    snprintf(key, sizeof(key), "%s.attention.sliding_window", a);
    bool has_window = gs_gguf_find_kv(m->file, key) != NULL;
    if (!has_window && !d->swa_window_default)
        return GS_OK;
    if ((st = get_u32(m, "attention.sliding_window", true, d->swa_window_default, &hp->swa_window,
                      err)))
        return st;
    if (hp->swa_window == 0 || hp->swa_window > INT32_MAX)
        return gs_err_set(err, GS_FORMAT, "metadata '%s': %u is not a window", key, hp->swa_window);
    hp->swa_period = d->swa_period;
    float base_def = d->swa_rope_base_default > 0 ? d->swa_rope_base_default : hp->rope_freq_base;
    if ((st = get_f32(m, "rope.freq_base_swa", true, base_def, &hp->rope_freq_base_swa, err)))
        return st;
    if (!(hp->rope_freq_base_swa > 0 && isfinite(hp->rope_freq_base_swa)))
        return gs_err_set(err, GS_FORMAT, "metadata '%s.rope.freq_base_swa': %g is not positive", a,
                          (double)hp->rope_freq_base_swa);
    if (d->swa_rope_unscaled)
        hp->rope_freq_scale_swa = 1.0f;
    return GS_OK;
}

/* feed_forward_length: one width, or (Gemma 3n) one per layer into m->n_ff_layer, with
 * hp->n_ff the widest. */
static enum gs_status read_n_ff(struct gs_model *m, struct gs_err *err)
{
    struct gs_model_hparams *hp = &m->hp;
    char key[128];
    snprintf(key, sizeof(key), "%s.feed_forward_length", hp->arch);
    const struct gs_gguf_kv *kv = gs_gguf_find_kv(m->file, key);
    if (!kv || kv->type != GS_GGUF_ARRAY)
        return get_u32(m, "feed_forward_length", false, 0, &hp->n_ff, err);
    if (kv->v.arr.n != hp->n_layer ||
        (kv->v.arr.type != GS_GGUF_I32 && kv->v.arr.type != GS_GGUF_U32))
        return gs_err_set(err, GS_FORMAT, "metadata '%s': %llu widths for %u layers", key,
                          (unsigned long long)kv->v.arr.n, hp->n_layer);
    m->n_ff_layer = gs_alloc_array(hp->n_layer, sizeof(*m->n_ff_layer));
    if (!m->n_ff_layer)
        return gs_err_set(err, GS_NOMEM, "model: out of memory");
    hp->n_ff = 0;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        int32_t w = gs_gguf_arr_i32(kv, l);
        if (w <= 0)
            return gs_err_set(err, GS_FORMAT, "metadata '%s': layer %u has width %d", key, l, w);
        m->n_ff_layer[l] = (uint32_t)w;
        hp->n_ff = GS_MAX(hp->n_ff, (uint32_t)w);
    }
    return GS_OK;
}

enum gs_status gs_model_read_hparams(struct gs_model *m, const struct gs_block_desc *d,
                                     struct gs_err *err)
{
    struct gs_model_hparams *hp = &m->hp;
    enum gs_status st;
    if ((st = get_u32(m, "embedding_length", false, 0, &hp->n_embd, err)) ||
        (st = get_u32(m, "block_count", false, 0, &hp->n_layer, err)) ||
        (st = get_u32(m, "attention.head_count", false, 0, &hp->n_head, err)))
        return st;
    if (hp->n_layer == 0)
        return gs_err_set(err, GS_FORMAT, "metadata '%s.block_count' is 0", hp->arch);
    hp->n_layer_kv = hp->n_layer;
    if ((st = read_n_ff(m, err)) ||
        (st = get_u32(m, "context_length", true, 0, &hp->n_ctx_train, err)) ||
        (st = get_f32(m, "attention.layer_norm_rms_epsilon", false, 0, &hp->rms_eps, err)) ||
        (st = get_f32(m, "rope.freq_base", true, 10000.0f, &hp->rope_freq_base, err)))
        return st;
    const char *a = hp->arch;
    if (hp->n_embd == 0)
        return gs_err_set(err, GS_FORMAT, "metadata '%s.embedding_length' is 0", a);
    if (hp->n_head == 0)
        return gs_err_set(err, GS_FORMAT, "metadata '%s.attention.head_count' is 0", a);
    if (hp->n_ff == 0)
        return gs_err_set(err, GS_FORMAT, "metadata '%s.feed_forward_length' is 0", a);
    if ((st = get_u32(m, "attention.head_count_kv", true, hp->n_head, &hp->n_head_kv, err)))
        return st;
    if (hp->n_head_kv == 0 || hp->n_head % hp->n_head_kv)
        return gs_err_set(err, GS_FORMAT,
                          "metadata '%s.attention.head_count_kv': %u does not divide %u heads", a,
                          hp->n_head_kv, hp->n_head);
    char key[128];
    snprintf(key, sizeof(key), "%s.attention.key_length", a);
    if (!gs_gguf_find_kv(m->file, key) && hp->n_embd % hp->n_head)
        return gs_err_set(err, GS_FORMAT,
                          "metadata '%s.attention.head_count': %u heads do not divide "
                          "embedding_length %u",
                          a, hp->n_head, hp->n_embd);
    if ((st =
             get_u32(m, "attention.key_length", true, hp->n_embd / hp->n_head, &hp->head_dim, err)))
        return st;
    uint32_t v_len;
    if ((st = get_u32(m, "attention.value_length", true, hp->head_dim, &v_len, err)))
        return st;
    if (hp->head_dim == 0 || v_len != hp->head_dim)
        return gs_err_set(err, GS_FORMAT,
                          "metadata '%s.attention.value_length': %u differs from key length %u", a,
                          v_len, hp->head_dim);
    if ((st = get_u32(m, "rope.dimension_count", true, hp->head_dim, &hp->n_rot, err)))
        return st;
    if (hp->n_rot == 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return gs_err_set(err, GS_FORMAT,
                          "metadata '%s.rope.dimension_count': %u must be even and at most the "
                          "head size %u",
                          a, hp->n_rot, hp->head_dim);
    if (!(hp->rms_eps > 0 && hp->rms_eps < 1))
        return gs_err_set(err, GS_FORMAT,
                          "metadata '%s.attention.layer_norm_rms_epsilon': %g is not in (0, 1)", a,
                          (double)hp->rms_eps);
    if (!(hp->rope_freq_base > 0 && isfinite(hp->rope_freq_base)))
        return gs_err_set(err, GS_FORMAT, "metadata '%s.rope.freq_base': %g is not positive", a,
                          (double)hp->rope_freq_base);
    hp->rope_mode = d->rope_mode;
    hp->bos_id = token_id(m->file, "tokenizer.ggml.bos_token_id");
    hp->eos_id = token_id(m->file, "tokenizer.ggml.eos_token_id");
    hp->add_bos = true;
    if (gs_gguf_find_kv(m->file, "tokenizer.ggml.add_bos_token") &&
        (st = gs_gguf_get_bool(m->file, "tokenizer.ggml.add_bos_token", &hp->add_bos, err)))
        return st;
    if ((st = read_rope_scaling(m, err)))
        return st;
    return read_variant_hparams(m, d, err);
}

void gs_model_layer_params(const struct gs_model_hparams *hp, uint32_t l, struct gs_rope_params *rp,
                           struct gs_attn_params *ap)
{
    const bool slides = gs_model_layer_slides(hp, l);
    *rp = (struct gs_rope_params){
        .n_head = (int32_t)hp->n_head,
        .head_dim = (int32_t)hp->head_dim,
        .n_rot = (int32_t)hp->n_rot,
        .mode = hp->rope_mode,
        .freq_base = slides ? hp->rope_freq_base_swa : hp->rope_freq_base,
        .freq_scale = slides ? hp->rope_freq_scale_swa : hp->rope_freq_scale,
    };
    *ap = (struct gs_attn_params){
        .layer = (int32_t)l,
        .n_head = (int32_t)hp->n_head,
        .n_head_kv = (int32_t)hp->n_head_kv,
        .head_dim = (int32_t)hp->head_dim,
        .scale = hp->query_scale,
        .softcap = hp->attn_softcap,
        .window = slides ? (int32_t)hp->swa_window : 0,
    };
}

/* The weight blk.<l>.<suffix> of shape [ne0 x ne1], or GS_NODE_NONE when optional and absent. */
static enum gs_status block_weight(struct gs_model *m, uint32_t l, const char *suffix, int64_t ne0,
                                   int64_t ne1, bool optional, uint32_t *id, struct gs_err *err)
{
    char name[96];
    snprintf(name, sizeof(name), "blk.%u.%s", l, suffix);
    return gs_model_weight(m, name, ne0, ne1, optional, id, err);
}

/* Views of consecutive row ranges of one fused weight blk.<l>.<suffix>:
 * view i covers rows[i] rows. The views share the file's bytes. */
static enum gs_status block_views(struct gs_model *m, uint32_t l, const char *suffix, int64_t ne0,
                                  const int64_t *rows, int n, uint32_t *ids, struct gs_err *err)
{
    char name[96];
    snprintf(name, sizeof(name), "blk.%u.%s", l, suffix);
    int64_t total = 0;
    for (int i = 0; i < n; i++)
        total += rows[i];
    int64_t row0 = 0;
    for (int i = 0; i < n; i++) {
        enum gs_status st = gs_model_weight_rows(m, name, ne0, total, row0, rows[i], &ids[i], err);
        if (st)
            return st;
        row0 += rows[i];
    }
    return GS_OK;
}

/* The weights of the q, k and v projections, and their biases when the family has them
 * (b[i] GS_NODE_NONE otherwise). */
static enum gs_status qkv_weights(struct gs_model *m, const struct gs_block_desc *d, uint32_t l,
                                  uint32_t w[3], uint32_t b[3], struct gs_err *err)
{
    const struct gs_model_hparams *hp = &m->hp;
    const int64_t rows[3] = {(int64_t)hp->n_head * hp->head_dim,
                             (int64_t)hp->n_head_kv * hp->head_dim,
                             (int64_t)hp->n_head_kv * hp->head_dim};
    static const char *const proj[3] = {"attn_q", "attn_k", "attn_v"};
    char suffix[32];
    enum gs_status st = GS_OK;
    if (d->qkv_fused)
        st = block_views(m, l, "attn_qkv.weight", hp->n_embd, rows, 3, w, err);
    for (int i = 0; i < 3 && !st && !d->qkv_fused; i++) {
        snprintf(suffix, sizeof(suffix), "%s.weight", proj[i]);
        st = block_weight(m, l, suffix, hp->n_embd, rows[i], false, &w[i], err);
    }
    for (int i = 0; i < 3 && !st; i++) {
        b[i] = GS_NODE_NONE;
        snprintf(suffix, sizeof(suffix), "%s.bias", proj[i]);
        if (d->qkv_bias)
            st = block_weight(m, l, suffix, rows[i], 1, false, &b[i], err);
    }
    return st;
}

/* One decoder block: *x in, the block's output out. */
static enum gs_status build_block(struct gs_model *m, const struct gs_block_desc *d, uint32_t l,
                                  uint32_t rope_ff, uint32_t *x, struct gs_err *err)
{
    const struct gs_model_hparams *hp = &m->hp;
    struct gs_graph *g = m->graph;
    const int64_t n_q = (int64_t)hp->n_head * hp->head_dim;
    uint32_t attn_norm, w_qkv[3], b_qkv[3], attn_out, ffn_norm, gate_up[2], down;
    enum gs_status st;
    /* Weights join the graph in the order llama's always did, so its graphs print as before. */
    if ((st = block_weight(m, l, "attn_norm.weight", hp->n_embd, 1, false, &attn_norm, err)) ||
        (st = qkv_weights(m, d, l, w_qkv, b_qkv, err)))
        return st;
    struct gs_rope_params rp;
    struct gs_attn_params ap;
    gs_model_layer_params(hp, l, &rp, &ap);

    if ((st = block_weight(m, l, "attn_output.weight", n_q, hp->n_embd, false, &attn_out, err)) ||
        (st = block_weight(m, l, "ffn_norm.weight", hp->n_embd, 1, false, &ffn_norm, err)))
        return st;
    const int64_t n_ff = m->n_ff_layer ? m->n_ff_layer[l] : hp->n_ff;
    if (d->ffn_gate_up_fused) {
        const int64_t rows[2] = {n_ff, n_ff};
        st = block_views(m, l, "ffn_up.weight", hp->n_embd, rows, 2, gate_up, err);
    } else if (!(st = block_weight(m, l, "ffn_gate.weight", hp->n_embd, n_ff, false, &gate_up[0],
                                   err))) {
        st = block_weight(m, l, "ffn_up.weight", hp->n_embd, n_ff, false, &gate_up[1], err);
    }
    if (st || (st = block_weight(m, l, "ffn_down.weight", n_ff, hp->n_embd, false, &down, err)))
        return st;
    uint32_t qk_norm[2] = {GS_NODE_NONE, GS_NODE_NONE};
    if (d->qk_norm &&
        ((st =
              block_weight(m, l, "attn_q_norm.weight", hp->head_dim, 1, false, &qk_norm[0], err)) ||
         (st = block_weight(m, l, "attn_k_norm.weight", hp->head_dim, 1, false, &qk_norm[1], err))))
        return st;
    uint32_t post_norm[2] = {GS_NODE_NONE, GS_NODE_NONE};
    if (d->post_norms && ((st = block_weight(m, l, "post_attention_norm.weight", hp->n_embd, 1,
                                             false, &post_norm[0], err)) ||
                          (st = block_weight(m, l, "post_ffw_norm.weight", hp->n_embd, 1, false,
                                             &post_norm[1], err))))
        return st;

    uint32_t h = gs_graph_name(g, gs_graph_rms_norm(g, *x, hp->rms_eps), "norm-%u", l);
    h = gs_graph_name(g, gs_graph_mul(g, h, attn_norm), "attn_norm-%u", l);
    static const char *const cur[3] = {"Qcur", "Kcur", "Vcur"};
    uint32_t qkv[3];
    for (int i = 0; i < 3; i++) {
        qkv[i] = gs_graph_name(g, gs_graph_matmul(g, h, w_qkv[i]), "%s-%u", cur[i], l);
        if (b_qkv[i] != GS_NODE_NONE)
            qkv[i] = gs_graph_name(g, gs_graph_add(g, qkv[i], b_qkv[i]), "%s_bias-%u", cur[i], l);
        if (i < 2 && qk_norm[i] != GS_NODE_NONE)
            qkv[i] = gs_graph_name(
                g,
                gs_graph_rms_norm_heads(g, qkv[i], qk_norm[i], (int32_t)hp->head_dim, hp->rms_eps),
                "%s_normed-%u", cur[i], l);
    }
    uint32_t q = gs_graph_name(g, gs_graph_rope(g, qkv[0], &rp, rope_ff), "Qrope-%u", l);
    rp.n_head = (int32_t)hp->n_head_kv;
    uint32_t k = gs_graph_name(g, gs_graph_rope(g, qkv[1], &rp, rope_ff), "Krope-%u", l);
    uint32_t kv = gs_graph_name(g, gs_graph_kv_store(g, k, qkv[2], &ap), "kv_store-%u", l);
    uint32_t a = gs_graph_name(g, gs_graph_attn(g, q, kv, &ap), "kqv-%u", l);
    a = gs_graph_name(g, gs_graph_matmul(g, a, attn_out), "kqv_out-%u", l);
    if (post_norm[0] != GS_NODE_NONE) {
        a = gs_graph_name(g, gs_graph_rms_norm(g, a, hp->rms_eps), "norm-%u", l);
        a = gs_graph_name(g, gs_graph_mul(g, a, post_norm[0]), "attn_post_norm-%u", l);
    }
    uint32_t ffn_inp = gs_graph_name(g, gs_graph_add(g, a, *x), "ffn_inp-%u", l);

    h = gs_graph_name(g, gs_graph_rms_norm(g, ffn_inp, hp->rms_eps), "norm-%u", l);
    h = gs_graph_name(g, gs_graph_mul(g, h, ffn_norm), "ffn_norm-%u", l);
    uint32_t gate = gs_graph_name(g, gs_graph_matmul(g, h, gate_up[0]), "ffn_gate-%u", l);
    uint32_t up = gs_graph_name(g, gs_graph_matmul(g, h, gate_up[1]), "ffn_up-%u", l);
    if (d->ffn_act == GS_FFN_GELU)
        gate = gs_graph_name(g, gs_graph_gelu(g, gate), "ffn_gelu-%u", l);
    else
        gate = gs_graph_name(g, gs_graph_silu(g, gate), "ffn_silu-%u", l);
    uint32_t par = gs_graph_name(g, gs_graph_mul(g, gate, up), "ffn_gate_par-%u", l);
    uint32_t out = gs_graph_name(g, gs_graph_matmul(g, par, down), "ffn_out-%u", l);
    if (post_norm[1] != GS_NODE_NONE) {
        out = gs_graph_name(g, gs_graph_rms_norm(g, out, hp->rms_eps), "norm-%u", l);
        out = gs_graph_name(g, gs_graph_mul(g, out, post_norm[1]), "ffn_post_norm-%u", l);
    }
    *x = gs_graph_name(g, gs_graph_add(g, out, ffn_inp), "l_out-%u", l);
    return gs_graph_status(g, err);
}

enum gs_status gs_model_build_decoder(struct gs_model *m, const struct gs_block_desc *d,
                                      struct gs_err *err)
{
    enum gs_status st = gs_model_read_hparams(m, d, err);
    if (st)
        return st;
    struct gs_model_hparams *hp = &m->hp;
    struct gs_graph *g = m->graph;

    const struct gs_gguf_tensor *te = gs_gguf_find_tensor(m->file, "token_embd.weight");
    if (!te)
        return gs_err_set(err, GS_FORMAT, "tensor 'token_embd.weight' is missing");
    if (te->n_dims != 2 || te->ne[1] <= 0 || te->ne[1] > INT32_MAX)
        return gs_err_set(err, GS_FORMAT, "tensor 'token_embd.weight' must be [n_embd x n_vocab]");
    hp->n_vocab = (uint32_t)te->ne[1];
    uint32_t tok_embd, out_norm, output, rope_ff;
    if ((st = gs_model_weight(m, "token_embd.weight", hp->n_embd, hp->n_vocab, false, &tok_embd,
                              err)) ||
        (st = gs_model_weight(m, "output_norm.weight", hp->n_embd, 1, false, &out_norm, err)) ||
        (st = gs_model_weight(m, "output.weight", hp->n_embd, hp->n_vocab, true, &output, err)) ||
        (st = gs_model_weight(m, "rope_freqs.weight", hp->n_rot / 2, 1, true, &rope_ff, err)))
        return st;
    if (!d->rope_freq_factors && rope_ff != GS_NODE_NONE)
        return gs_err_set(err, GS_UNSUPPORTED,
                          "tensor 'rope_freqs.weight': %s does not use rope frequency factors",
                          hp->arch);
    hp->tied_output = output == GS_NODE_NONE;
    if (hp->tied_output)
        output = tok_embd;
    if (hp->bos_id >= (int32_t)hp->n_vocab)
        hp->bos_id = -1;
    if (hp->eos_id >= (int32_t)hp->n_vocab)
        hp->eos_id = -1;

    uint32_t x = gs_graph_name(g, gs_graph_embed(g, tok_embd), "inp_embd");
    if (d->embd_scale)
        x = gs_graph_name(g, gs_graph_scale(g, x, hp->embd_scale), "inp_scaled");
    for (uint32_t l = 0; l < hp->n_layer; l++)
        if ((st = build_block(m, d, l, rope_ff, &x, err)))
            return st;
    /* Every token row's final hidden state, for embeddings: a norm of its own
     * over all rows, since the logits' branch norms only the output rows. A
     * step that gives no hidden buffer pays the norm (n_embd x n_tokens, small
     * beside any matmul) and copies nothing. */
    uint32_t h = gs_graph_name(g, gs_graph_rms_norm(g, x, hp->rms_eps), "hidden_norm");
    h = gs_graph_name(g, gs_graph_mul(g, h, out_norm), "hidden_result");
    gs_graph_name(g, gs_graph_hidden(g, h), "hidden");
    /* Only the rows that want logits go through the final norm and projection. */
    x = gs_graph_name(g, gs_graph_outputs(g, x), "inp_out");
    x = gs_graph_name(g, gs_graph_rms_norm(g, x, hp->rms_eps), "norm");
    x = gs_graph_name(g, gs_graph_mul(g, x, out_norm), "result_norm");
    x = gs_graph_name(g, gs_graph_matmul(g, x, output), "result_output");
    if (hp->final_softcap > 0)
        x = gs_graph_name(g, gs_graph_softcap(g, x, hp->final_softcap), "result_softcap");
    gs_graph_name(g, gs_graph_logits(g, x), "logits");
    return gs_graph_status(g, err);
}
