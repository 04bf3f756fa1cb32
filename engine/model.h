/*
 * engine/model.h - model builders: from an open GGUF file to the forward-pass
 * graph of its architecture, plus the hyperparameters the rest of the engine
 * needs (KV cache geometry, vocabulary size, special tokens).
 *
 * One builder per architecture family lives in engine/models/<family>.c and
 * has a row in the table of engine/models/registry.c. A family's file is short:
 * it fills a struct gs_block_desc (below) saying where its decoder block
 * differs from Llama's, and engine/models/decoder.c builds the graph from it.
 * Supported: `llama` (Llama 2/3, TinyLlama, SmolLM/SmolLM2, Mistral without
 * sliding window), `qwen2` (Qwen2, Qwen2.5), `qwen3` (Qwen3 dense), `phi3` (Phi-3,
 * Phi-3.5 mini), `gemma2` (Gemma 2), `gemma3` (Gemma 3 text) and `gemma3n` (Gemma 3n
 * text, its own builder: engine/models/gemma3n.c).
 *
 * Every hyperparameter and every tensor shape is checked before a graph is
 * built: missing or inconsistent metadata (heads not dividing n_embd, kv heads
 * not dividing heads, zero sizes, missing tensors, wrong shapes) is refused
 * with GS_FORMAT and a message naming the key or tensor.
 *
 * Ownership: a struct gs_model owns its graph and borrows the GGUF file, which
 * must stay open until gs_model_free. Threads: immutable once loaded.
 */
#ifndef GS_MODEL_H
#define GS_MODEL_H

#include "engine/base.h"
#include "engine/gguf.h"
#include "engine/graph.h"

struct gs_model_hparams {
    char arch[32];        /* general.architecture */
    uint32_t n_vocab;     /* rows of token_embd.weight */
    uint32_t n_ctx_train; /* <arch>.context_length (0 when absent) */
    uint32_t n_embd;
    uint32_t n_layer;
    uint32_t n_layer_kv; /* the first n_layer_kv layers own a KV cache; the rest share one */
    uint32_t n_head;
    uint32_t n_head_kv;
    uint32_t head_dim; /* <arch>.attention.key_length, default n_embd / n_head */
    uint32_t n_ff; /* the widest layer's when feed_forward_length is per layer (n_ff_layer) */
    uint32_t n_rot; /* <arch>.rope.dimension_count, default head_dim */
    float rms_eps;
    float rope_freq_base;  /* default 10000 */
    float rope_freq_scale; /* 1 / rope.scaling.factor for linear scaling, else 1 */
    enum gs_rope_mode rope_mode;
    float embd_scale;    /* the embeddings are multiplied by it: sqrt(n_embd) for Gemma, else 1 */
    float query_scale;   /* q.k is multiplied by it: 1/sqrt(head_dim) unless the family differs */
    float attn_softcap;  /* <arch>.attn_logit_softcapping: 0 none, else scores c * tanh(s / c) */
    float final_softcap; /* <arch>.final_logit_softcapping: 0 none, else logits c * tanh(l / c) */
    /* Sliding-window attention: 0 when every layer is global. Else layer l slides when
     * l % swa_period < swa_period - 1 (gs_model_layer_slides) and sees the swa_window
     * positions up to its own, with rope base and scale of its own. */
    uint32_t swa_window; /* <arch>.attention.sliding_window */
    uint32_t swa_period;
    float rope_freq_base_swa;
    float rope_freq_scale_swa;
    bool tied_output; /* output.weight absent: logits use token_embd.weight */
    int32_t bos_id;   /* -1 when absent */
    int32_t eos_id;   /* -1 when absent */
    bool add_bos;     /* tokenizer.ggml.add_bos_token, default true */
};

struct gs_model {
    struct gs_model_hparams hp;
    struct gs_graph *graph;     /* owned; before any pass */
    const struct gs_gguf *file; /* borrowed */
    uint32_t *n_ff_layer;       /* [n_layer] when the file gives a width per layer; owned */
    float *ones;                /* owned constants behind weightless norms (Gemma 3n's V norm) */
    int64_t n_ones;
};

/*
 * Builds the model described by an open file. *out is freed with
 * gs_model_free. GS_UNSUPPORTED for an architecture without a builder,
 * GS_FORMAT for bad metadata or tensors.
 */
enum gs_status gs_model_load(const struct gs_gguf *file, struct gs_model **out, struct gs_err *err);
void gs_model_free(struct gs_model *m); /* NULL is a no-op */

/* Whether layer l attends over a sliding window (hp->swa_window positions). */
static inline bool gs_model_layer_slides(const struct gs_model_hparams *hp, uint32_t l)
{
    return hp->swa_window > 0 && l % hp->swa_period < hp->swa_period - 1;
}

/* Layers that own KV pages: what a KV pool must hold (n_layer but for Gemma 3n). */
static inline uint32_t gs_model_kv_layers(const struct gs_model *m)
{
    return m->hp.n_layer_kv;
}

/* KV elements per token per layer for K (and for V): n_head_kv * head_dim. */
static inline uint32_t gs_model_kv_dim(const struct gs_model *m)
{
    return m->hp.n_head_kv * m->hp.head_dim;
}

/* ---- for builders (engine/models/<family>.c) --------------------------------------- */

/* A family's builder: fills m->hp and m->graph from m->file. */
typedef enum gs_status (*gs_model_build_fn)(struct gs_model *m, struct gs_err *err);

enum gs_status gs_model_build_llama(struct gs_model *m, struct gs_err *err);
enum gs_status gs_model_build_qwen2(struct gs_model *m, struct gs_err *err);
enum gs_status gs_model_build_phi3(struct gs_model *m, struct gs_err *err);
enum gs_status gs_model_build_qwen3(struct gs_model *m, struct gs_err *err);
enum gs_status gs_model_build_gemma2(struct gs_model *m, struct gs_err *err);
enum gs_status gs_model_build_gemma3(struct gs_model *m, struct gs_err *err);
enum gs_status gs_model_build_gemma3n(struct gs_model *m, struct gs_err *err);

/* The gate's activation in the feed-forward: silu (SwiGLU) or gelu, tanh form (GeGLU). */
enum gs_ffn_act { GS_FFN_SILU = 0, GS_FFN_GELU };

/*
 * Where a family's decoder block differs from Llama's. The block every family
 * shares is: x -> RMSNorm * attn_norm -> q, k, v projections -> rope on q and
 * k -> causal GQA attention (scale 1/sqrt(head_dim)) -> attn_output -> + x;
 * then RMSNorm * ffn_norm -> silu(gate) * up -> ffn_down -> + residual. A
 * zero-filled description is Llama's block with normal rope.
 *
 * A variant extends this struct with fields whose zero value keeps today's
 * block, so existing families stay as they are.
 */
struct gs_block_desc {
    enum gs_rope_mode rope_mode; /* pairs rotated by rope (GS_ROPE_NEOX: halves) */
    bool qkv_bias;               /* blk.N.attn_{q,k,v}.bias added after each projection */
    /* one blk.N.attn_qkv.weight [n_embd x (n_q + 2 n_kv)] whose q, k and v row ranges are
     * views of the file's bytes, never copies */
    bool qkv_fused;
    /* blk.N.ffn_up.weight [n_embd x 2 n_ff]: the gate's rows, then the up rows, as views */
    bool ffn_gate_up_fused;
    bool rope_freq_factors; /* may carry rope_freqs.weight (Llama 3); refused otherwise */
    /* blk.N.attn_{q,k}_norm.weight [head_dim]: each head of q and k RMS-normed before rope */
    bool qk_norm;
    enum gs_ffn_act ffn_act;
    bool embd_scale; /* embeddings times sqrt(n_embd) */
    /* blk.N.post_attention_norm.weight and blk.N.post_ffw_norm.weight: the attention's and
     * the feed-forward's outputs are RMS-normed before their residual adds */
    bool post_norms;
    /* Soft-caps of attention scores and of the final logits: a family that has them
     * reads <arch>.attn_logit_softcapping and <arch>.final_logit_softcapping, taking the
     * default when a key is absent (0: no cap unless the file has the key). Families
     * without them never read the keys. */
    bool attn_softcap;
    float attn_softcap_default;
    bool final_softcap;
    float final_softcap_default;
    /* Sliding windows: layer l slides when l % swa_period < swa_period - 1 (0: no sliding
     * layers). The window is <arch>.attention.sliding_window, swa_window_default when
     * absent (0: absent means every layer is global). */
    uint32_t swa_period;
    uint32_t swa_window_default;
    /* Sliding layers' rope base: <arch>.rope.freq_base_swa, this when absent (0: the
     * global base); with swa_rope_unscaled their rope ignores rope scaling. */
    float swa_rope_base_default;
    bool swa_rope_unscaled;
    /* At this block count the query scale is 1/sqrt(n_embd / n_head) instead of
     * 1/sqrt(head_dim): the 27B Gemmas, as their reference code has it. 0: never. */
    uint32_t query_scale_wide_n_layer;
    float query_scale; /* the query scale itself (Gemma 3n: 1); 0: the rule above */
};

/* Layer l's rope and attention parameters from the hyperparameters: its rope base
 * and scale (a sliding layer's own), the query scale, the soft-cap, its window, and
 * ap->layer = l (a builder whose layer reads another's cache changes it). */
void gs_model_layer_params(const struct gs_model_hparams *hp, uint32_t l,
                           struct gs_rope_params *rp, struct gs_attn_params *ap);

/* Reads and checks the hyperparameters every family shares and the description's
 * variants into m->hp (a builder that is not the shared decoder starts with it).
 * feed_forward_length may be one width per layer (m->n_ff_layer). */
enum gs_status gs_model_read_hparams(struct gs_model *m, const struct gs_block_desc *d,
                                     struct gs_err *err);

/* Builds the shared decoder with a family's description (engine/models/decoder.c). */
enum gs_status gs_model_build_decoder(struct gs_model *m, const struct gs_block_desc *d,
                                      struct gs_err *err);

/*
 * Adds the weight `name` to g after checking that the file has it with shape
 * [ne0 x ne1] (ne1 = 1 for vectors) and a supported type. When optional and
 * absent, *id is GS_NODE_NONE and GS_OK is returned.
 */
enum gs_status gs_model_weight(struct gs_model *m, const char *name, int64_t ne0, int64_t ne1,
                               bool optional, uint32_t *id, struct gs_err *err);

/*
 * Adds rows [row0, row0 + n_rows) of the fused weight `name` as a weight node
 * of its own, after checking that the file has it with shape [ne0 x ne1]. The
 * node points into the file's bytes (a view, never a copy). A wrong width is
 * refused with GS_FORMAT naming the tensor.
 */
enum gs_status gs_model_weight_rows(struct gs_model *m, const char *name, int64_t ne0, int64_t ne1,
                                    int64_t row0, int64_t n_rows, uint32_t *id, struct gs_err *err);

/* Matrix i of the stacked weight `name` [ne0 x ne1 x n_mat] as a weight node of its
 * own [ne0 x ne1] (a view of the file's bytes). */
enum gs_status gs_model_weight_stacked(struct gs_model *m, const char *name, int64_t ne0,
                                       int64_t ne1, int64_t n_mat, int64_t i, uint32_t *id,
                                       struct gs_err *err);

/* A weight node of n ones (F32), owned by the model: a norm without a weight. Every
 * call must ask for the same n (one buffer serves them all). */
uint32_t gs_model_ones(struct gs_model *m, int64_t n);

/* Whether general.architecture value arch has a builder. */
bool gs_model_arch_supported(const char *arch, size_t len);

/* How an embedding pools a prompt's final hidden states; the values are
 * llama.cpp's (enum llama_pooling_type), as GGUF files store them in
 * <arch>.pooling_type. */
enum gs_pooling {
    GS_POOLING_NONE = 0, /* no embedding: the request generates */
    GS_POOLING_MEAN = 1, /* the mean over every token */
    GS_POOLING_CLS = 2,  /* the first token's */
    GS_POOLING_LAST = 3, /* the last token's */
};

/* "none", "mean", "cls", "last"; NULL for any other value. */
const char *gs_pooling_name(enum gs_pooling p);

/* The file's <arch>.pooling_type into *out. GS_NOTFOUND when the key is absent;
 * GS_UNSUPPORTED for a value graphserve does not pool by (4, rank), naming it. */
enum gs_status gs_model_pooling(const struct gs_model *m, enum gs_pooling *out,
                                struct gs_err *err);

#endif /* GS_MODEL_H */
