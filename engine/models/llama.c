/*
 * engine/models/llama.c - the llama family: Llama 2/3, TinyLlama, SmolLM,
 * SmolLM2, Mistral (without sliding window). Pre-norm decoder blocks with
 * RMSNorm, rotary embeddings (normal mode), grouped-query attention and a
 * SwiGLU feed-forward; the output projection may be tied to the embedding.
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

static enum gs_status read_hparams(struct gs_model *m, struct gs_err *err)
{
    struct gs_model_hparams *hp = &m->hp;
    enum gs_status st;
    if ((st = get_u32(m, "embedding_length", false, 0, &hp->n_embd, err)) ||
        (st = get_u32(m, "block_count", false, 0, &hp->n_layer, err)) ||
        (st = get_u32(m, "attention.head_count", false, 0, &hp->n_head, err)) ||
        (st = get_u32(m, "feed_forward_length", false, 0, &hp->n_ff, err)) ||
        (st = get_u32(m, "context_length", true, 0, &hp->n_ctx_train, err)) ||
        (st = get_f32(m, "attention.layer_norm_rms_epsilon", false, 0, &hp->rms_eps, err)) ||
        (st = get_f32(m, "rope.freq_base", true, 10000.0f, &hp->rope_freq_base, err)))
        return st;
    const char *a = hp->arch;
    if (hp->n_embd == 0)
        return gs_err_set(err, GS_FORMAT, "metadata '%s.embedding_length' is 0", a);
    if (hp->n_layer == 0)
        return gs_err_set(err, GS_FORMAT, "metadata '%s.block_count' is 0", a);
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
    hp->rope_mode = GS_ROPE_NORMAL;
    hp->bos_id = token_id(m->file, "tokenizer.ggml.bos_token_id");
    hp->eos_id = token_id(m->file, "tokenizer.ggml.eos_token_id");
    hp->add_bos = true;
    if (gs_gguf_find_kv(m->file, "tokenizer.ggml.add_bos_token") &&
        (st = gs_gguf_get_bool(m->file, "tokenizer.ggml.add_bos_token", &hp->add_bos, err)))
        return st;
    return read_rope_scaling(m, err);
}

/* One decoder block; returns the block's output, GS_NODE_NONE on error. */
static enum gs_status build_block(struct gs_model *m, uint32_t l, uint32_t rope_ff, uint32_t *x,
                                  struct gs_err *err)
{
    const struct gs_model_hparams *hp = &m->hp;
    struct gs_graph *g = m->graph;
    int64_t n_q = (int64_t)hp->n_head * hp->head_dim;
    int64_t n_kv = (int64_t)hp->n_head_kv * hp->head_dim;
    struct {
        const char *name;
        int64_t ne0, ne1;
        uint32_t id;
    } w[] = {
        {"attn_norm", hp->n_embd, 1, 0},       {"attn_q", hp->n_embd, n_q, 0},
        {"attn_k", hp->n_embd, n_kv, 0},       {"attn_v", hp->n_embd, n_kv, 0},
        {"attn_output", n_q, hp->n_embd, 0},   {"ffn_norm", hp->n_embd, 1, 0},
        {"ffn_gate", hp->n_embd, hp->n_ff, 0}, {"ffn_up", hp->n_embd, hp->n_ff, 0},
        {"ffn_down", hp->n_ff, hp->n_embd, 0},
    };
    for (size_t i = 0; i < GS_ARRAY_LEN(w); i++) {
        char name[96];
        snprintf(name, sizeof(name), "blk.%u.%s.weight", l, w[i].name);
        enum gs_status st = gs_model_weight(m, name, w[i].ne0, w[i].ne1, false, &w[i].id, err);
        if (st)
            return st;
    }
    struct gs_rope_params rp = {
        .n_head = (int32_t)hp->n_head,
        .head_dim = (int32_t)hp->head_dim,
        .n_rot = (int32_t)hp->n_rot,
        .mode = hp->rope_mode,
        .freq_base = hp->rope_freq_base,
        .freq_scale = hp->rope_freq_scale,
    };
    struct gs_attn_params ap = {
        .layer = (int32_t)l,
        .n_head = (int32_t)hp->n_head,
        .n_head_kv = (int32_t)hp->n_head_kv,
        .head_dim = (int32_t)hp->head_dim,
        .scale = 1.0f / sqrtf((float)hp->head_dim),
    };

    uint32_t h = gs_graph_name(g, gs_graph_rms_norm(g, *x, hp->rms_eps), "norm-%u", l);
    h = gs_graph_name(g, gs_graph_mul(g, h, w[0].id), "attn_norm-%u", l);
    uint32_t q = gs_graph_name(g, gs_graph_matmul(g, h, w[1].id), "Qcur-%u", l);
    uint32_t k = gs_graph_name(g, gs_graph_matmul(g, h, w[2].id), "Kcur-%u", l);
    uint32_t v = gs_graph_name(g, gs_graph_matmul(g, h, w[3].id), "Vcur-%u", l);
    q = gs_graph_name(g, gs_graph_rope(g, q, &rp, rope_ff), "Qrope-%u", l);
    rp.n_head = (int32_t)hp->n_head_kv;
    k = gs_graph_name(g, gs_graph_rope(g, k, &rp, rope_ff), "Krope-%u", l);
    uint32_t kv = gs_graph_name(g, gs_graph_kv_store(g, k, v, &ap), "kv_store-%u", l);
    uint32_t a = gs_graph_name(g, gs_graph_attn(g, q, kv, &ap), "kqv-%u", l);
    a = gs_graph_name(g, gs_graph_matmul(g, a, w[4].id), "kqv_out-%u", l);
    uint32_t ffn_inp = gs_graph_name(g, gs_graph_add(g, a, *x), "ffn_inp-%u", l);

    h = gs_graph_name(g, gs_graph_rms_norm(g, ffn_inp, hp->rms_eps), "norm-%u", l);
    h = gs_graph_name(g, gs_graph_mul(g, h, w[5].id), "ffn_norm-%u", l);
    uint32_t gate = gs_graph_name(g, gs_graph_matmul(g, h, w[6].id), "ffn_gate-%u", l);
    uint32_t up = gs_graph_name(g, gs_graph_matmul(g, h, w[7].id), "ffn_up-%u", l);
    gate = gs_graph_name(g, gs_graph_silu(g, gate), "ffn_silu-%u", l);
    uint32_t par = gs_graph_name(g, gs_graph_mul(g, gate, up), "ffn_gate_par-%u", l);
    uint32_t down = gs_graph_name(g, gs_graph_matmul(g, par, w[8].id), "ffn_out-%u", l);
    *x = gs_graph_name(g, gs_graph_add(g, down, ffn_inp), "l_out-%u", l);
    return gs_graph_status(g, err);
}

enum gs_status gs_model_build_llama(struct gs_model *m, struct gs_err *err)
{
    enum gs_status st = read_hparams(m, err);
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
    hp->tied_output = output == GS_NODE_NONE;
    if (hp->tied_output)
        output = tok_embd;
    if (hp->bos_id >= (int32_t)hp->n_vocab)
        hp->bos_id = -1;
    if (hp->eos_id >= (int32_t)hp->n_vocab)
        hp->eos_id = -1;

    uint32_t x = gs_graph_name(g, gs_graph_embed(g, tok_embd), "inp_embd");
    for (uint32_t l = 0; l < hp->n_layer; l++)
        if ((st = build_block(m, l, rope_ff, &x, err)))
            return st;
    /* Only the rows that want logits go through the final norm and projection. */
    x = gs_graph_name(g, gs_graph_outputs(g, x), "inp_out");
    x = gs_graph_name(g, gs_graph_rms_norm(g, x, hp->rms_eps), "norm");
    x = gs_graph_name(g, gs_graph_mul(g, x, out_norm), "result_norm");
    x = gs_graph_name(g, gs_graph_matmul(g, x, output), "result_output");
    gs_graph_name(g, gs_graph_logits(g, x), "logits");
    return gs_graph_status(g, err);
}
