/*
 * tools/synth.c - `graphserve synth`: writes a GGUF of any supported
 * architecture (llama, qwen2, qwen3, phi3, gemma2, gemma3, gemma3n) with RANDOM weights
 * at any shape and in any weight type that has a quantizer, with a byte-level
 * vocabulary.
 *
 * It exists so that graphserve can run, test and benchmark realistic shapes on
 * a machine that has nothing but the repository: no downloads. Its output is
 * noise, and every place that shows such a model says so (general.name and
 * general.description carry "random weights").
 *
 * Architectures: each family's tensors and keys as engine/models/decoder.c and
 * the family's gs_block_desc read them, and as llama.cpp's loaders read them,
 * so that both run the same file (struct synth_arch below). Gemma 3n's extra
 * parts (AltUp, LAuReL, per-layer inputs, KV sharing, activation sparsity) are
 * written as engine/models/gemma3n.c reads them, with the values llama.cpp
 * fixes: 4 AltUp streams with stream 0 active, a sliding window on four layers
 * in five, the first third of the layers sparse (E2B's ratio: 10 of 30), and
 * shared KV layers chosen so that the cache owners end with a global layer.
 *
 * Weights: matrices ~ N(0, init_std) (init_std = 0.02 by default, as common
 * Llama initialisations use), norm weights ~ 1 + N(0, 0.02), so that
 * activations stay in the ranges real models see. The same --seed gives the
 * same file.
 *
 * Vocabulary: SentencePiece-style ("llama") with <unk>, <s>, </s> and the 256
 * byte tokens <0x00>..<0xFF>: any text encodes through byte fallback. Larger
 * vocabularies are padded with unused tokens so the output matrix has the
 * requested shape.
 *
 * --chain: weights whose greedy output is known. Speculative decoding gains
 * only where drafts are right, and random weights never agree with a draft, so
 * its benchmarks need a model of a real size whose next token a drafter can
 * foresee. With --chain the printable ASCII bytes form one cycle (an order
 * drawn from --chain-seed), and each token's greedy successor is the next byte
 * of the cycle: the embeddings are large enough that every layer's random
 * contribution leaves the final state pointing at the current token's
 * embedding, and output row v is the unit direction of the embedding of v's
 * predecessor (zero for the tokens outside the cycle, which are then never
 * chosen). Every layer is still read and computed at its full size, so the
 * model costs what its shape costs. A prompt that holds part of the cycle is
 * continued exactly as the cycle reads; two files of any shapes with the same
 * --chain-seed agree on every token (a draft model and its target).
 */
#include "engine/gguf.h"
#include "engine/quant.h"
#include "tools/internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_BYTE_VOCAB 259 /* 3 specials + 256 byte tokens */
#define BYTE_TOKEN0  3   /* the id of <0x00> */

/* --chain: the cycle's members are the bytes CHAIN_FIRST..CHAIN_LAST, and the
 * embeddings' standard deviation. 16 layers of random blocks add at most about
 * 36 each to the residual of a 2048-wide model (their inputs are normalised);
 * a 2048-wide embedding of this size has a norm of about 2,300. */
#define CHAIN_FIRST    0x20
#define CHAIN_LAST     0x7e
#define CHAIN_LEN      (CHAIN_LAST - CHAIN_FIRST + 1)
#define CHAIN_EMBD_STD 50.0

/*
 * What a family's loader reads beyond Llama's block (engine/models/<arch>.c,
 * and llama.cpp's src/models/<arch>.cpp for the same file).
 */
struct synth_arch {
    const char *name;       /* general.architecture and the keys' prefix */
    bool qkv_bias;          /* blk.N.attn_{q,k,v}.bias */
    bool qkv_fused;         /* one blk.N.attn_qkv.weight: q rows, then k, then v */
    bool ffn_fused;         /* blk.N.ffn_up.weight holds the gate's rows, then the up rows */
    bool qk_norm;           /* blk.N.attn_{q,k}_norm.weight [head_dim] */
    bool post_norms;        /* blk.N.post_attention_norm.weight, blk.N.post_ffw_norm.weight */
    bool softcaps;          /* attn_logit_softcapping 50, final_logit_softcapping 30 */
    bool rope_base_swa;     /* rope.freq_base_swa for the sliding layers */
    int64_t window_default; /* attention.sliding_window; 0: the family has none */
    bool tied_only;         /* llama.cpp reads the output from token_embd whatever the file has */
    bool head_dim_free;     /* q may be n_head * head_dim wide, not n_embd (llama.cpp agrees) */
    bool gemma3n;           /* Gemma 3n's own parts and keys (write_gemma3n_*) */
};

static const struct synth_arch archs[] = {
    {.name = "llama", .head_dim_free = true},
    {.name = "qwen2", .qkv_bias = true},
    {.name = "qwen3", .qk_norm = true, .head_dim_free = true},
    {.name = "phi3", .qkv_fused = true, .ffn_fused = true},
    {.name = "gemma2",
     .post_norms = true,
     .softcaps = true,
     .window_default = 4096,
     .tied_only = true,
     .head_dim_free = true},
    {.name = "gemma3",
     .qk_norm = true,
     .post_norms = true,
     .rope_base_swa = true,
     .window_default = 512,
     .head_dim_free = true},
    {.name = "gemma3n",
     .qk_norm = true,
     .post_norms = true,
     .rope_base_swa = true,
     .window_default = 512,
     .tied_only = true,
     .head_dim_free = true,
     .gemma3n = true},
};

#define G3N_STREAMS      4   /* altup.num_inputs, as llama.cpp fixes it */
#define G3N_SWA_PERIOD   5   /* four sliding layers, then a global one */
#define G3N_SPARSE_SCALE 1.6448533535003662 /* the normal 0.95 quantile: E2B's value */

struct synth_cfg {
    const char *out;
    const struct synth_arch *arch;
    int64_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, n_ctx;
    const struct gs_gguf *vocab_from; /* copy its tokenizer.* keys instead of the byte vocabulary */
    int64_t head_dim;       /* 0: n_embd / n_head, and no key_length key */
    int64_t sliding_window; /* -1: the family's default; 0: no key */
    enum gs_type type;      /* matrices */
    enum gs_type out_type;  /* output.weight */
    enum gs_type down_type; /* ffn_down */
    enum gs_type embd_type; /* token_embd */
    bool tied;
    double rope_base, init_std;
    int64_t seed;
    int64_t per_layer, laurel_rank; /* gemma3n */
    int64_t shared_kv;              /* gemma3n; -1: chosen from n_layer */
    bool chain;                     /* the greedy successor of every token is fixed */
    int64_t chain_seed;
    /* the command line's names, resolved after parsing */
    const char *arch_name, *type_name, *out_type_name, *vocab_path;
};

#define O(f) offsetof(struct synth_cfg, f)
#define I(name, f, def, lo, hi, help)                                                           \
    {name, 0, GS_CFG_INT, O(f), NULL, def, lo, hi, NULL, 0, NULL, help}
/* clang-format off */
static const struct gs_cfg_opt opt_rows[] = {
    {"output", 'o', GS_CFG_STR, O(out), NULL, NULL, 0, 0, NULL,
     GS_CFG_F_PATH | GS_CFG_F_REQUIRED, NULL, "Where to write the model."},
    {"arch", 0, GS_CFG_STR, O(arch_name), NULL, "llama", 0, 0, NULL, 0, NULL,
     "llama, qwen2, qwen3, phi3, gemma2, gemma3 or gemma3n: each family's tensors and keys "
     "(gemma2 and gemma3n are always --tied)."},
    I("n-embd", n_embd, "64", 2, 65536, "Embedding width."),
    I("n-layer", n_layer, "2", 1, 1024, "Transformer blocks."),
    I("n-head", n_head, "4", 1, 1024, "Attention heads."),
    I("n-head-kv", n_head_kv, "0", 0, 1024, "Key/value heads, dividing n-head; 0: n-head."),
    I("head-dim", head_dim, "0", 0, 4096,
      "Head size, written as attention.key_length/value_length (llama, qwen3, gemma2, gemma3); "
      "0: n-embd / n-head, and no such key."),
    I("n-ff", n_ff, "0", 0, 1 << 20, "Feed-forward width; 0: 4 * n-embd rounded up to 32."),
    I("n-vocab", n_vocab, "259", N_BYTE_VOCAB, 1 << 22, "Vocabulary size."),
    {"vocab-from", 0, GS_CFG_STR, O(vocab_path), NULL, NULL, 0, 0, NULL, GS_CFG_F_PATH, NULL,
     "The tokenizer of another GGUF (every tokenizer.* key; a vocabulary file from "
     "shared/models/vocab will do): the vocabulary size is its token count."},
    I("n-ctx", n_ctx, "512", 1, 1 << 24, "Context length recorded in the file."),
    {"type", 0, GS_CFG_STR, O(type_name), NULL, "f32", 0, 0, NULL, 0, NULL,
     "Weight type: f32 f16 bf16 q8_0 q4_0 q4_K q6_K ... or the recipe q4_K_M (q4_K, with q6_K "
     "for output and ffn_down)."},
    {"output-type", 0, GS_CFG_STR, O(out_type_name), NULL, NULL, 0, 0, NULL, 0, NULL,
     "Type of output.weight; unset: from --type."},
    {"tied", 0, GS_CFG_BOOL, O(tied), NULL, NULL, 0, 0, NULL, 0, NULL,
     "No output.weight: the output reuses token_embd."},
    {"rope-base", 0, GS_CFG_FLOAT, O(rope_base), NULL, "10000", 1, 1e9, NULL, 0, NULL,
     "RoPE frequency base."},
    I("sliding-window", sliding_window, "-1", -1, 1 << 24,
      "gemma2/gemma3/gemma3n attention.sliding_window; 0: none; -1: the family's (4096 for "
      "gemma2, 512 for gemma3 and gemma3n)."),
    I("per-layer-input", per_layer, "256", 1, 1 << 16,
      "gemma3n embedding_length_per_layer_input."),
    I("laurel-rank", laurel_rank, "64", 1, 1 << 16, "gemma3n LAuReL rank."),
    I("shared-kv-layers", shared_kv, "-1", -1, 1023,
      "gemma3n layers that read an earlier layer's cache; -1: about a third, leaving a "
      "multiple of 5 owners, as E2B has."),
    {"init-std", 0, GS_CFG_FLOAT, O(init_std), NULL, "0.02", 0, 10, NULL, 0, NULL,
     "Standard deviation of matrix weights."},
    I("seed", seed, "1", 0, 9e18, "Random seed."),
    {"chain", 0, GS_CFG_BOOL, O(chain), NULL, NULL, 0, 0, NULL, 0, NULL,
     "Weights whose greedy output is a fixed cycle through the printable ASCII bytes (for "
     "speculative-decoding benchmarks: a prompt holding part of the cycle is continued as it "
     "reads); llama architecture, byte vocabulary, not --tied."},
    I("chain-seed", chain_seed, "1", 0, 9e18,
      "The cycle's order under --chain: files with the same one agree on every token."),
};
/* clang-format on */
#undef O
#undef I

const struct gs_cli_spec gs_synth_spec = {
    .cmd = "synth", .synopsis = "-o FILE [options]",
    .about = "Weights are random: the model produces noise. It is for tests and benchmarks.\n",
    .opts = opt_rows, .n_opts = GS_ARRAY_LEN(opt_rows),
};

/* ---- random numbers: splitmix64 + Box-Muller, reproducible everywhere ------- */

struct rng {
    uint64_t s;
    bool have_spare;
    double spare;
};

static uint64_t rng_next(struct rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rng_uniform(struct rng *r) /* in (0, 1] */
{
    return ((double)(rng_next(r) >> 11) + 1.0) * 0x1p-53;
}

static double rng_normal(struct rng *r)
{
    if (r->have_spare) {
        r->have_spare = false;
        return r->spare;
    }
    double u = rng_uniform(r), v = rng_uniform(r);
    double m = sqrt(-2.0 * log(u));
    r->spare = m * sin(2 * M_PI * v);
    r->have_spare = true;
    return m * cos(2 * M_PI * v);
}

/* ---- tensors ------------------------------------------------------------------- */

/*
 * A K-quant needs rows that are a multiple of 256; small models (n_embd 64)
 * cannot use one. Like common quantization tools, fall back to the nearest
 * legacy type with a 32-element block, and say so.
 */
static enum gs_type fit_type(enum gs_type t, int64_t row, const char *name)
{
    const struct gs_type_traits *tt = gs_type_traits(t);
    if (row % tt->block_size == 0)
        return t;
    enum gs_type fb = GS_TYPE_F16;
    switch (t) {
    case GS_TYPE_Q2_K:
    case GS_TYPE_Q3_K:
        fb = GS_TYPE_Q4_0;
        break;
    case GS_TYPE_Q4_K:
        fb = GS_TYPE_Q5_0;
        break;
    case GS_TYPE_Q5_K:
        fb = GS_TYPE_Q5_1;
        break;
    case GS_TYPE_Q6_K:
        fb = GS_TYPE_Q8_0;
        break;
    default:
        break;
    }
    if (row % gs_type_traits(fb)->block_size)
        fb = GS_TYPE_F16;
    fprintf(stderr, "graphserve synth: %s: row of %" PRId64 " is not a multiple of the %s block; "
                    "using %s\n",
            name, row, tt->name, gs_type_name(fb));
    return fb;
}

enum fill { FILL_MATRIX, FILL_NORM };

/* Converts one tensor [ne0, ne1, ne2] to type t and adds it: its rows are values
 * ([ne1 * ne2][ne0]), or generated by fill where values is NULL. */
static enum gs_status add_tensor_values(struct gs_gguf_writer *w, const struct synth_cfg *c,
                                        struct rng *r, const char *name, enum gs_type t,
                                        int64_t ne0, int64_t ne1, int64_t ne2, enum fill fill,
                                        const float *values, struct gs_err *err)
{
    uint32_t n_dims = ne2 > 1 ? 3 : ne1 > 1 ? 2 : 1;
    int64_t rows = ne1 * ne2;
    t = fill == FILL_NORM ? GS_TYPE_F32 : fit_type(t, ne0, name);
    uint64_t row_bytes;
    enum gs_status rc = gs_type_row_bytes(t, ne0, &row_bytes);
    if (rc)
        return gs_err_set(err, rc, "%s: type %s cannot hold rows of %" PRId64, name,
                          gs_type_name(t), ne0);
    float *row = gs_alloc_array((size_t)ne0, sizeof(float));
    uint8_t *data = gs_alloc_array((size_t)rows, (size_t)row_bytes);
    if (!row || !data) {
        gs_free(row);
        gs_free(data);
        return gs_err_set(err, GS_NOMEM, "%s: no memory for %" PRId64 " x %" PRId64, name, ne0,
                          rows);
    }
    for (int64_t i = 0; i < rows && !rc; i++) {
        if (values)
            memcpy(row, values + (size_t)i * (size_t)ne0, sizeof(float) * (size_t)ne0);
        else
            for (int64_t j = 0; j < ne0; j++)
                row[j] = fill == FILL_NORM ? (float)(1.0 + 0.02 * rng_normal(r))
                                           : (float)(c->init_std * rng_normal(r));
        rc = gs_quantize(t, row, data + (size_t)i * row_bytes, ne0);
    }
    if (rc) {
        gs_free(row);
        gs_free(data);
        return gs_err_set(err, rc, "%s: type %s has no quantizer", name, gs_type_name(t));
    }
    struct gs_gguf_w_tensor wt = {.name = name, .type = t, .n_dims = n_dims,
                                  .ne = {ne0, ne1, ne2, 1}, .data = data,
                                  .nbytes = row_bytes * (uint64_t)rows};
    rc = gs_gguf_w_tensor(w, &wt);
    gs_free(row);
    gs_free(data);
    if (rc)
        return gs_err_set(err, rc, "%s: cannot add tensor", name);
    return GS_OK;
}

/* Generates one tensor [ne0, ne1, ne2], converts it to type t and adds it. */
static enum gs_status add_tensor3(struct gs_gguf_writer *w, const struct synth_cfg *c,
                                  struct rng *r, const char *name, enum gs_type t, int64_t ne0,
                                  int64_t ne1, int64_t ne2, enum fill fill, struct gs_err *err)
{
    return add_tensor_values(w, c, r, name, t, ne0, ne1, ne2, fill, NULL, err);
}

static enum gs_status add_tensor(struct gs_gguf_writer *w, const struct synth_cfg *c,
                                 struct rng *r, const char *name, enum gs_type t, int64_t ne0,
                                 int64_t ne1, enum fill fill, struct gs_err *err)
{
    return add_tensor3(w, c, r, name, t, ne0, ne1, 1, fill, err);
}

static enum gs_status add_vocab(struct gs_gguf_writer *w, int64_t n_vocab, struct gs_err *err)
{
    char **toks = gs_calloc((size_t)n_vocab, sizeof(char *));
    float *scores = gs_calloc((size_t)n_vocab, sizeof(float));
    int32_t *types = gs_calloc((size_t)n_vocab, sizeof(int32_t));
    enum gs_status rc = GS_NOMEM;
    if (!toks || !scores || !types)
        goto out;
    /* Token types as GGUF defines them: 1 normal, 2 unknown, 3 control, 5 unused, 6 byte. */
    static const char *const specials[3] = {"<unk>", "<s>", "</s>"};
    for (int64_t i = 0; i < n_vocab; i++) {
        char buf[32];
        if (i < 3) {
            snprintf(buf, sizeof(buf), "%s", specials[i]);
            types[i] = i == 0 ? 2 : 3;
        } else if (i < N_BYTE_VOCAB) {
            snprintf(buf, sizeof(buf), "<0x%02X>", (unsigned)(i - 3));
            types[i] = 6;
        } else {
            snprintf(buf, sizeof(buf), "<unused%" PRId64 ">", i - N_BYTE_VOCAB);
            types[i] = 5;
        }
        if (!(toks[i] = gs_strdup(buf)))
            goto out;
    }
    if (gs_gguf_w_str(w, "tokenizer.ggml.model", "llama") ||
        gs_gguf_w_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)toks,
                          (uint64_t)n_vocab) ||
        gs_gguf_w_arr(w, "tokenizer.ggml.scores", GS_GGUF_F32, scores, (uint64_t)n_vocab) ||
        gs_gguf_w_arr(w, "tokenizer.ggml.token_type", GS_GGUF_I32, types, (uint64_t)n_vocab) ||
        gs_gguf_w_u32(w, "tokenizer.ggml.unknown_token_id", 0) ||
        gs_gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 1) ||
        gs_gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 2) ||
        gs_gguf_w_bool(w, "tokenizer.ggml.add_bos_token", true) ||
        gs_gguf_w_bool(w, "tokenizer.ggml.add_eos_token", false))
        goto out;
    rc = GS_OK;
out:
    if (toks)
        for (int64_t i = 0; i < n_vocab; i++)
            gs_free(toks[i]);
    gs_free(toks);
    gs_free(scores);
    gs_free(types);
    if (rc)
        gs_err_set(err, rc, "no memory for the vocabulary");
    return rc;
}

/* Every tokenizer.* key of g, so that the model speaks g's vocabulary. */
static enum gs_status copy_vocab(struct gs_gguf_writer *w, const struct gs_gguf *g,
                                 struct gs_err *err)
{
    for (uint64_t i = 0; i < gs_gguf_n_kv(g); i++) {
        const struct gs_gguf_kv *kv = gs_gguf_kv_at(g, i);
        if (kv->key.len < 10 || memcmp(kv->key.data, "tokenizer.", 10))
            continue;
        if (gs_gguf_w_copy_kv(w, kv))
            return gs_err_set(err, GS_NOMEM, "no memory for the vocabulary");
    }
    return GS_OK;
}

static int64_t head_dim(const struct synth_cfg *c)
{
    return c->head_dim ? c->head_dim : c->n_embd / c->n_head;
}

/* Writes the u32 or f32 key "<arch>.<suffix>". */
static enum gs_status w_arch_u32(struct gs_gguf_writer *w, const struct synth_cfg *c,
                                 const char *suffix, int64_t v)
{
    char key[128];
    snprintf(key, sizeof(key), "%s.%s", c->arch->name, suffix);
    return gs_gguf_w_u32(w, key, (uint32_t)v);
}

static enum gs_status w_arch_f32(struct gs_gguf_writer *w, const struct synth_cfg *c,
                                 const char *suffix, double v)
{
    char key[128];
    snprintf(key, sizeof(key), "%s.%s", c->arch->name, suffix);
    return gs_gguf_w_f32(w, key, (float)v);
}

/* Gemma 3n's keys beyond Gemma 3's: the per-layer arrays and the AltUp, per-layer input
 * and KV-sharing values (the file's laurel rank is its tensors' shape). */
static enum gs_status add_gemma3n_metadata(struct gs_gguf_writer *w, const struct synth_cfg *c)
{
    size_t n = (size_t)c->n_layer;
    int32_t *ff = gs_alloc_array(n, sizeof(*ff));
    float *sparse = gs_alloc_array(n, sizeof(*sparse));
    uint8_t *slides = gs_alloc_array(n, sizeof(*slides));
    enum gs_status rc = ff && sparse && slides ? GS_OK : GS_NOMEM;
    char key[128];
    for (size_t l = 0; !rc && l < n; l++) {
        ff[l] = (int32_t)c->n_ff;
        sparse[l] = l < n / 3 ? (float)G3N_SPARSE_SCALE : 0.0f;
        slides[l] = l % G3N_SWA_PERIOD < G3N_SWA_PERIOD - 1;
    }
    snprintf(key, sizeof(key), "%s.feed_forward_length", c->arch->name);
    rc = rc ? rc : gs_gguf_w_arr(w, key, GS_GGUF_I32, ff, n);
    snprintf(key, sizeof(key), "%s.activation_sparsity_scale", c->arch->name);
    rc = rc ? rc : gs_gguf_w_arr(w, key, GS_GGUF_F32, sparse, n);
    snprintf(key, sizeof(key), "%s.attention.sliding_window_pattern", c->arch->name);
    rc = rc ? rc : gs_gguf_w_arr(w, key, GS_GGUF_BOOL, slides, n);
    rc |= w_arch_u32(w, c, "altup.num_inputs", G3N_STREAMS);
    rc |= w_arch_u32(w, c, "altup.active_idx", 0);
    rc |= w_arch_u32(w, c, "embedding_length_per_layer_input", c->per_layer);
    rc |= w_arch_u32(w, c, "attention.shared_kv_layers", c->shared_kv);
    rc |= w_arch_f32(w, c, "final_logit_softcapping", 30.0);
    gs_free(ff);
    gs_free(sparse);
    gs_free(slides);
    return rc ? GS_NOMEM : GS_OK;
}

/* Gemma 3n's tensors outside the blocks: the per-layer token table and projection and
 * the AltUp projections (three [n_embd x n_embd] matrices stacked, one per extra stream). */
static enum gs_status add_gemma3n_globals(struct gs_gguf_writer *w, const struct synth_cfg *c,
                                          struct rng *r, struct gs_err *err)
{
    int64_t e = c->n_embd, lp = c->n_layer * c->per_layer;
    enum gs_status rc = add_tensor(w, c, r, "per_layer_token_embd.weight", c->embd_type, lp,
                                   c->n_vocab, FILL_MATRIX, err);
    if (!rc)
        rc = add_tensor(w, c, r, "per_layer_model_proj.weight", GS_TYPE_F32, e, lp, FILL_MATRIX,
                        err);
    if (!rc)
        rc = add_tensor(w, c, r, "per_layer_proj_norm.weight", GS_TYPE_F32, c->per_layer, 1,
                        FILL_NORM, err);
    /* Kept F32, as llama.cpp's quantizer keeps per_layer_model_proj and every altup and
     * laurel tensor. */
    if (!rc)
        rc = add_tensor3(w, c, r, "altup_proj.weight", GS_TYPE_F32, e, e, G3N_STREAMS - 1,
                         FILL_MATRIX, err);
    if (!rc)
        rc = add_tensor3(w, c, r, "altup_unembd_proj.weight", GS_TYPE_F32, e, e,
                         G3N_STREAMS - 1, FILL_MATRIX, err);
    return rc;
}

static enum gs_status add_metadata(struct gs_gguf_writer *w, const struct synth_cfg *c)
{
    char name[160];
    /* No family in the name: llama.cpp's vocabulary loader treats a name containing "phi3"
     * as Phi-3's own tokenizer and looks for tokens this vocabulary does not have. */
    snprintf(name, sizeof(name), "graphserve synth %" PRId64 "x%" PRId64 " %s (%s)", c->n_embd,
             c->n_layer, gs_type_name(c->type), c->chain ? "chain" : "random weights");
    enum gs_status rc = GS_OK;
    rc |= gs_gguf_w_str(w, "general.architecture", c->arch->name);
    rc |= gs_gguf_w_str(w, "general.name", name);
    rc |= gs_gguf_w_str(w, "general.description",
                        c->chain ? "Random blocks written by graphserve synth --chain: its greedy "
                                   "output cycles through the printable ASCII bytes in a fixed "
                                   "order; for speculative-decoding benchmarks."
                                 : "Random weights written by graphserve synth: for tests and "
                                   "benchmarks, its output is noise.");
    rc |= gs_gguf_w_u32(w, "general.alignment", GS_GGUF_DEFAULT_ALIGNMENT);
    rc |= w_arch_u32(w, c, "context_length", c->n_ctx);
    rc |= w_arch_u32(w, c, "embedding_length", c->n_embd);
    rc |= w_arch_u32(w, c, "block_count", c->n_layer);
    if (!c->arch->gemma3n)
        rc |= w_arch_u32(w, c, "feed_forward_length", c->n_ff);
    rc |= w_arch_u32(w, c, "attention.head_count", c->n_head);
    rc |= w_arch_u32(w, c, "attention.head_count_kv", c->n_head_kv);
    if (c->head_dim) {
        rc |= w_arch_u32(w, c, "attention.key_length", c->head_dim);
        rc |= w_arch_u32(w, c, "attention.value_length", c->head_dim);
    }
    rc |= w_arch_u32(w, c, "rope.dimension_count", head_dim(c));
    rc |= w_arch_u32(w, c, "vocab_size", c->n_vocab);
    rc |= w_arch_f32(w, c, "rope.freq_base", c->rope_base);
    rc |= w_arch_f32(w, c, "attention.layer_norm_rms_epsilon", 1e-5);
    if (c->arch->softcaps) {
        /* Gemma 2's released values (the loaders' defaults too). */
        rc |= w_arch_f32(w, c, "attn_logit_softcapping", 50.0);
        rc |= w_arch_f32(w, c, "final_logit_softcapping", 30.0);
    }
    if (c->sliding_window > 0)
        rc |= w_arch_u32(w, c, "attention.sliding_window", c->sliding_window);
    if (c->arch->rope_base_swa && c->sliding_window > 0)
        rc |= w_arch_f32(w, c, "rope.freq_base_swa", 10000.0);
    if (c->arch->gemma3n)
        rc |= add_gemma3n_metadata(w, c);
    return rc ? GS_NOMEM : GS_OK;
}

/*
 * --chain's token_embd and output values ([n_vocab][n_embd] each, the caller's to
 * free): embeddings ~ N(0, CHAIN_EMBD_STD) from r, where token_embd's would be
 * drawn, and output row v the unit direction of the embedding of v's predecessor
 * in the cycle, so that the final state of token t, which points along t's
 * embedding, scores t's successor about sqrt(n_embd) and every other token about
 * N(0, 1).
 */
static enum gs_status chain_values(const struct synth_cfg *c, struct rng *r, float **embd_out,
                                   float **out_out, struct gs_err *err)
{
    const int64_t e = c->n_embd, nv = c->n_vocab;
    float *embd = gs_alloc_array((size_t)(nv * e), sizeof(float));
    float *out = gs_calloc((size_t)(nv * e), sizeof(float));
    if (!embd || !out) {
        gs_free(embd);
        gs_free(out);
        return gs_err_set(err, GS_NOMEM, "--chain: no memory for %" PRId64 " x %" PRId64, e, nv);
    }
    for (int64_t i = 0; i < nv * e; i++)
        embd[i] = (float)(CHAIN_EMBD_STD * rng_normal(r));
    /* The cycle's order: a Fisher-Yates shuffle of its bytes by the chain's own seed. */
    int cycle[CHAIN_LEN];
    struct rng cr = {.s = (uint64_t)c->chain_seed};
    for (int i = 0; i < CHAIN_LEN; i++)
        cycle[i] = CHAIN_FIRST + i;
    for (int i = CHAIN_LEN - 1; i > 0; i--) {
        int j = (int)(rng_next(&cr) % (uint64_t)(i + 1)), t = cycle[i];
        cycle[i] = cycle[j];
        cycle[j] = t;
    }
    for (int i = 0; i < CHAIN_LEN; i++) {
        const float *pe = embd + (size_t)(BYTE_TOKEN0 + cycle[(i + CHAIN_LEN - 1) % CHAIN_LEN]) * e;
        float *o = out + (size_t)(BYTE_TOKEN0 + cycle[i]) * e;
        double n2 = 0;
        for (int64_t j = 0; j < e; j++)
            n2 += (double)pe[j] * pe[j];
        for (int64_t j = 0; j < e; j++)
            o[j] = (float)(pe[j] / sqrt(n2));
    }
    *embd_out = embd;
    *out_out = out;
    return GS_OK;
}

static enum gs_status write_model(const struct synth_cfg *c, struct gs_err *err)
{
    struct gs_gguf_writer *w;
    enum gs_status rc = gs_gguf_writer_new(NULL, &w, err);
    if (rc)
        return rc;
    struct rng r = {.s = (uint64_t)c->seed};
    const struct synth_arch *a = c->arch;
    int64_t e = c->n_embd, hd = head_dim(c), q = hd * c->n_head, kv = hd * c->n_head_kv;
    rc = add_metadata(w, c);
    if (rc)
        gs_err_set(err, rc, "no memory for metadata");
    if (!rc)
        rc = c->vocab_from ? copy_vocab(w, c->vocab_from, err) : add_vocab(w, c->n_vocab, err);
    float *chain_embd = NULL, *chain_out = NULL; /* --chain's values; NULL: random */
    if (!rc && c->chain)
        rc = chain_values(c, &r, &chain_embd, &chain_out, err);
    if (!rc)
        rc = add_tensor_values(w, c, &r, "token_embd.weight", c->embd_type, e, c->n_vocab, 1,
                               FILL_MATRIX, chain_embd, err);
    if (!rc && a->gemma3n)
        rc = add_gemma3n_globals(w, c, &r, err);
    if (!rc)
        rc = add_tensor(w, c, &r, "output_norm.weight", GS_TYPE_F32, e, 1, FILL_NORM, err);
    if (!rc && !c->tied)
        rc = add_tensor_values(w, c, &r, "output.weight", c->out_type, e, c->n_vocab, 1,
                               FILL_MATRIX, chain_out, err);
    gs_free(chain_embd);
    gs_free(chain_out);
    int64_t ms = G3N_STREAMS, P = c->per_layer, rank = c->laurel_rank;
    bool g3n = a->gemma3n;
    for (int64_t l = 0; l < c->n_layer && !rc; l++) {
        /* Llama's tensors keep their order, so a llama file is the one it always was. */
        const struct {
            const char *name;
            enum gs_type type;
            int64_t ne0, ne1;
            enum fill fill;
            bool on;
        } blk[] = {
            {"attn_norm.weight", GS_TYPE_F32, e, 1, FILL_NORM, true},
            {"attn_qkv.weight", c->type, e, q + 2 * kv, FILL_MATRIX, a->qkv_fused},
            {"attn_q.weight", c->type, e, q, FILL_MATRIX, !a->qkv_fused},
            {"attn_k.weight", c->type, e, kv, FILL_MATRIX, !a->qkv_fused},
            {"attn_v.weight", c->type, e, kv, FILL_MATRIX, !a->qkv_fused},
            {"attn_q.bias", GS_TYPE_F32, q, 1, FILL_MATRIX, a->qkv_bias},
            {"attn_k.bias", GS_TYPE_F32, kv, 1, FILL_MATRIX, a->qkv_bias},
            {"attn_v.bias", GS_TYPE_F32, kv, 1, FILL_MATRIX, a->qkv_bias},
            {"attn_q_norm.weight", GS_TYPE_F32, hd, 1, FILL_NORM, a->qk_norm},
            {"attn_k_norm.weight", GS_TYPE_F32, hd, 1, FILL_NORM, a->qk_norm},
            {"attn_output.weight", c->type, q, e, FILL_MATRIX, true},
            {"post_attention_norm.weight", GS_TYPE_F32, e, 1, FILL_NORM, a->post_norms},
            {"ffn_norm.weight", GS_TYPE_F32, e, 1, FILL_NORM, true},
            {"ffn_gate.weight", c->type, e, c->n_ff, FILL_MATRIX, !a->ffn_fused},
            {"ffn_up.weight", c->type, e, (a->ffn_fused ? 2 : 1) * c->n_ff, FILL_MATRIX, true},
            {"ffn_down.weight", c->down_type, c->n_ff, e, FILL_MATRIX, true},
            {"post_ffw_norm.weight", GS_TYPE_F32, e, 1, FILL_NORM, a->post_norms},
            /* Gemma 3n: the per-layer input's gate, AltUp's router and coefficients, LAuReL. */
            {"inp_gate.weight", c->type, e, P, FILL_MATRIX, g3n},
            {"proj.weight", c->type, P, e, FILL_MATRIX, g3n},
            {"post_norm.weight", GS_TYPE_F32, e, 1, FILL_NORM, g3n},
            {"altup_correct_coef.weight", GS_TYPE_F32, ms, ms, FILL_MATRIX, g3n},
            {"altup_correct_scale.weight", GS_TYPE_F32, e, 1, FILL_NORM, g3n},
            {"altup_predict_coef.weight", GS_TYPE_F32, ms, ms * ms, FILL_MATRIX, g3n},
            {"altup_router.weight", GS_TYPE_F32, e, ms, FILL_MATRIX, g3n},
            {"altup_router_norm.weight", GS_TYPE_F32, e, 1, FILL_NORM, g3n},
            {"laurel_l.weight", GS_TYPE_F32, e, rank, FILL_MATRIX, g3n},
            {"laurel_r.weight", GS_TYPE_F32, rank, e, FILL_MATRIX, g3n},
            {"laurel_post_norm.weight", GS_TYPE_F32, e, 1, FILL_NORM, g3n},
        };
        for (size_t i = 0; i < GS_ARRAY_LEN(blk) && !rc; i++) {
            if (!blk[i].on)
                continue;
            char name[64];
            snprintf(name, sizeof(name), "blk.%" PRId64 ".%s", l, blk[i].name);
            rc = add_tensor(w, c, &r, name, blk[i].type, blk[i].ne0, blk[i].ne1, blk[i].fill,
                            err);
        }
    }
    if (!rc)
        rc = gs_gguf_writer_to_file(w, c->out, err);
    gs_gguf_writer_free(w);
    return rc;
}

/* Parses a type name or the q4_K_M recipe into c. */
static bool parse_type(const char *s, struct synth_cfg *c)
{
    if (!strcasecmp(s, "q4_K_M")) {
        c->type = GS_TYPE_Q4_K;
        c->out_type = c->down_type = GS_TYPE_Q6_K;
        c->embd_type = GS_TYPE_Q4_K;
        return true;
    }
    enum gs_type t;
    if (gs_type_from_name(s, &t) || !gs_type_traits(t)->supported) {
        fprintf(stderr, "graphserve synth: unknown or unsupported type '%s'\n", s);
        return false;
    }
    c->type = c->out_type = c->down_type = c->embd_type = t;
    return true;
}

static const struct synth_arch *find_arch(const char *name)
{
    for (size_t i = 0; i < GS_ARRAY_LEN(archs); i++)
        if (!strcmp(archs[i].name, name))
            return &archs[i];
    return NULL;
}

static int check_shape(const struct synth_cfg *c)
{
    if (!c->head_dim && c->n_embd % c->n_head)
        return gs_cli_fail("synth", "--n-head %" PRId64 " does not divide --n-embd %" PRId64,
                           c->n_head, c->n_embd);
    if (c->n_head % c->n_head_kv)
        return gs_cli_fail("synth", "--n-head-kv %" PRId64 " does not divide --n-head %" PRId64,
                           c->n_head_kv, c->n_head);
    if (head_dim(c) % 2)
        return gs_cli_fail("synth", "head size %" PRId64 " must be even for RoPE", head_dim(c));
    /* llama.cpp reads these families' q and output projections as [n_embd x n_embd]. */
    if (!c->arch->head_dim_free && c->head_dim && c->head_dim * c->n_head != c->n_embd)
        return gs_cli_fail("synth",
                           "--head-dim %" PRId64 ": %s needs n-head x head-dim = n-embd %" PRId64,
                           c->head_dim, c->arch->name, c->n_embd);
    if (c->sliding_window > 0 && !c->arch->window_default)
        return gs_cli_fail("synth", "--sliding-window: %s has no sliding window", c->arch->name);
    if (c->arch->gemma3n && c->sliding_window == 0)
        return gs_cli_fail("synth", "--sliding-window: gemma3n needs one");
    if (c->arch->gemma3n && c->shared_kv &&
        (c->shared_kv >= c->n_layer || c->n_layer - c->shared_kv < 2))
        return gs_cli_fail("synth",
                           "--shared-kv-layers %" PRId64 " of %" PRId64
                           " layers leaves no sliding and global layer to share",
                           c->shared_kv, c->n_layer);
    return 0;
}

int gs_cmd_synth(int argc, char **argv)
{
    struct synth_cfg c = {0};
    struct gs_cli_args args;
    int prc = gs_cli_begin(&gs_synth_spec, &c, argc, argv, &args);
    if (prc >= 0)
        return prc;
    if (!(c.arch = find_arch(c.arch_name))) {
        fprintf(stderr, "graphserve synth: --arch '%s': not one of", c.arch_name);
        for (size_t i = 0; i < GS_ARRAY_LEN(archs); i++)
            fprintf(stderr, " %s", archs[i].name);
        fputc('\n', stderr);
        return 1;
    }
    if (!parse_type(c.type_name, &c))
        return 2;
    if (c.head_dim == 1)
        return gs_cli_fail("synth",
                           "--head-dim: 1 is out of range [2, 4096] (0: n-embd / n-head)") +
               1;
    const char *out_type = c.out_type_name, *vocab_path = c.vocab_path;
    if (!c.n_head_kv)
        c.n_head_kv = c.n_head;
    if (c.sliding_window < 0)
        c.sliding_window = c.arch->window_default;
    if (c.arch->tied_only)
        c.tied = true;
    if (!c.arch->gemma3n && (gs_cli_given(&gs_synth_spec, &args, "per-layer-input") ||
                             gs_cli_given(&gs_synth_spec, &args, "laurel-rank") ||
                             gs_cli_given(&gs_synth_spec, &args, "shared-kv-layers")))
        return gs_cli_fail("synth", "--per-layer-input, --laurel-rank and --shared-kv-layers "
                                    "are gemma3n's");
    /* E2B keeps 20 of its 30 layers' caches: about two thirds, a multiple of the swa period
     * so that the owners end with a global layer (which llama.cpp's reuse assumes). */
    if (c.shared_kv < 0) {
        int64_t owners = c.n_layer * 2 / 3 / G3N_SWA_PERIOD * G3N_SWA_PERIOD;
        c.shared_kv = c.arch->gemma3n && owners >= G3N_SWA_PERIOD ? c.n_layer - owners : 0;
    }
    if (!c.n_ff)
        c.n_ff = (4 * c.n_embd + 31) / 32 * 32;
    if (out_type) {
        enum gs_type t;
        if (gs_type_from_name(out_type, &t) || !gs_type_traits(t)->supported)
            return gs_cli_fail("synth", "unknown or unsupported --output-type '%s'", out_type);
        c.out_type = t;
    }
    if (c.chain && (strcmp(c.arch->name, "llama") || c.tied || vocab_path))
        return gs_cli_fail("synth", "--chain needs --arch llama, the byte vocabulary (no "
                                    "--vocab-from) and an output matrix (no --tied)");
    if (!c.chain && gs_cli_given(&gs_synth_spec, &args, "chain-seed"))
        return gs_cli_fail("synth", "--chain-seed is --chain's");
    struct gs_err err;
    struct gs_gguf *vocab = NULL;
    if (vocab_path) {
        const struct gs_gguf_kv *toks;
        if (gs_gguf_open(vocab_path, &vocab, &err))
            return gs_cli_fail("synth", "--vocab-from: %s", err.msg);
        if (gs_gguf_get_arr(vocab, "tokenizer.ggml.tokens", GS_GGUF_STRING, &toks, &err)) {
            gs_gguf_close(vocab);
            return gs_cli_fail("synth", "--vocab-from %s: %s", vocab_path, err.msg);
        }
        c.n_vocab = (int64_t)toks->v.arr.n;
        c.vocab_from = vocab;
    }
    int bad = check_shape(&c);
    double t0 = gs_now_ms();
    if (!bad && write_model(&c, &err))
        bad = gs_cli_fail("synth", "%s", err.msg);
    gs_gguf_close(vocab);
    if (bad)
        return bad;
    fprintf(stderr,
            "graphserve synth: wrote %s (%s, n_embd %" PRId64 ", %" PRId64 " layers, %" PRId64
            " heads, %" PRId64 " kv heads, head %" PRId64 ", ffn %" PRId64 ", vocab %" PRId64
            ", %s) in %.1f s. %s\n",
            c.out, c.arch->name, c.n_embd, c.n_layer, c.n_head, c.n_head_kv, head_dim(&c), c.n_ff,
            c.n_vocab, gs_type_name(c.type), (gs_now_ms() - t0) / 1000.0,
            c.chain ? "Its greedy output is the --chain cycle."
                    : "Its weights are random: the model produces noise.");
    return 0;
}
