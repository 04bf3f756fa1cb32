/*
 * tools/train.c - `graphserve train`: a text file in, a Llama-architecture
 * GGUF out, trained on the engine (engine/train.h).
 *
 * Tokenizer: by default byte level, written as a SentencePiece ("llama") vocabulary that
 * graphserve and llama.cpp both load: <unk>, <s>, </s>, the 256 byte tokens
 * <0x00>..<0xFF> and "▁" (U+2581, SentencePiece's space), with
 * add_space_prefix off. With no merges in the vocabulary, SentencePiece
 * encodes a text as one "▁" per space and one byte token per other byte, so
 * the corpus is tokenized here exactly that way and a served prompt is seen
 * as the model was trained on it. With --vocab FILE the tokenizer is FILE's
 * (any graphserve loads: SPM, BPE, WPM): the corpus is encoded by it without
 * special-token parsing, each window starts with the tokens the tokenizer puts
 * before a prompt (open_vocab), the model's vocabulary is its token count,
 * and every tokenizer.* key is copied into the output byte for byte, so the
 * trained model tokenizes and detokenizes as FILE does. A checkpoint records
 * which vocabulary and encoding its tokens are (struct vocab_id).
 *
 * Output: F32, or with --type the matrices quantized as `graphserve quantize`
 * writes them (tools/quantize.c); checkpoints hold the F32 state either way.
 *
 * Data: the corpus must be UTF-8 text (no NUL bytes). Its last --holdout
 * fraction is held out; training batches are windows of block + 1 tokens at
 * seeded random offsets in the rest, and the held-out loss is the mean over
 * fixed consecutive windows, evaluated every --eval-every steps and at the
 * end. The curve goes to --csv (step, train loss, held-out loss, learning
 * rate); a terminal gets a progress line.
 */
#include "engine/train.h"
#include "engine/digest.h"
#include "engine/gguf.h"
#include "engine/tok.h"
#include "tools/internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define N_SPECIAL  3
#define TOK_BYTE0  N_SPECIAL
#define TOK_SPACE  (N_SPECIAL + 256)
#define N_VOCAB    (TOK_SPACE + 1)
#define MAX_CORPUS ((int64_t)1 << 30)

struct train_cfg {
    const char *in, *out, *csv, *svg, *checkpoint, *resume, *print_graph, *vocab;
    int type; /* index into gs_tool_file_types */
    int64_t n_embd, n_layer, n_head, n_head_kv, n_ff, block, n_ctx, batch, steps, warmup;
    int64_t eval_every, eval_batches, threads, seed, checkpoint_every, stop_after, accum;
    double lr, min_lr, weight_decay, clip, holdout;
};

#define O(f) offsetof(struct train_cfg, f)
#define I(name, f, def, lo, hi, help)                                                           \
    {name, 0, GS_CFG_INT, O(f), NULL, def, lo, hi, NULL, 0, NULL, help}
#define R(name, f, def, lo, hi, help)                                                           \
    {name, 0, GS_CFG_FLOAT, O(f), NULL, def, lo, hi, NULL, 0, NULL, help}
#define S(name, sh, f, flags, help)                                                             \
    {name, sh, GS_CFG_STR, O(f), NULL, NULL, 0, 0, NULL, flags, NULL, help}
/* clang-format off */
static const struct gs_cfg_opt opt_rows[] = {
    S("input", 'i', in, GS_CFG_F_PATH, "The training text (UTF-8); required unless --print-graph."),
    S("output", 'o', out, GS_CFG_F_PATH,
      "Where to write the trained model (GGUF); required unless --print-graph."),
    S("vocab", 0, vocab, GS_CFG_F_PATH,
      "Take the tokenizer from this GGUF (its tokenizer.* metadata, copied into the output) "
      "instead of the byte-level one."),
    {"type", 0, GS_CFG_ENUM, O(type), NULL, "f32", 0, 0, gs_tool_file_type_names, 0, NULL,
     "Type of the output's matrices, as `graphserve quantize` writes them; checkpoints stay "
     "F32."},
    I("n-embd", n_embd, "64", 2, 65536, "Width."),
    I("n-layer", n_layer, "2", 1, 256, "Blocks."),
    I("n-head", n_head, "4", 1, 1024, "Attention heads."),
    I("n-head-kv", n_head_kv, "0", 0, 1024, "Key/value heads, dividing n-head; 0: n-head."),
    I("n-ff", n_ff, "0", 0, 1 << 20, "Feed-forward width; 0: 4 * n-embd rounded up to 32."),
    I("block", block, "32", 1, 65536, "Tokens per training sequence."),
    I("n-ctx", n_ctx, "0", 0, 1 << 20,
      "Context length written in the file, at least block; 0: block."),
    I("batch", batch, "16", 1, 65536, "Sequences per step."),
    I("accum", accum, "1", 1, 65536, "Steps whose gradients make one update."),
    I("steps", steps, "1500", 1, 1e6, "Optimiser steps."),
    R("lr", lr, "3e-3", 0, 10, "Peak learning rate."),
    R("min-lr", min_lr, "-1", -1, 10, "The cosine decay's floor; negative: lr / 10."),
    I("warmup", warmup, "0", 0, 1e9, "Steps of linear warmup."),
    R("weight-decay", weight_decay, "0.1", 0, 10, "AdamW's decoupled decay on matrices."),
    R("clip", clip, "1", 0, 1e6, "Gradient-norm clip; 0: none."),
    R("holdout", holdout, "0.1", 0.001, 0.5, "Fraction of the text held out."),
    I("eval-every", eval_every, "100", 1, 1e9, "Held-out evaluation interval in steps."),
    I("eval-batches", eval_batches, "8", 1, 1e6, "Batches per held-out evaluation."),
    S("csv", 0, csv, GS_CFG_F_PATH, "The loss curve as CSV (appended to on --resume)."),
    S("svg", 0, svg, GS_CFG_F_PATH, "A plot of the train and held-out loss."),
    S("checkpoint", 0, checkpoint, GS_CFG_F_PATH,
      "Save the training state every --checkpoint-every steps and at the end."),
    I("checkpoint-every", checkpoint_every, "0", 0, 1e9, "Checkpoint interval; 0: --eval-every."),
    S("resume", 0, resume, GS_CFG_F_PATH,
      "Continue from a checkpoint of the same shape and options: the result equals the "
      "uninterrupted run's bit for bit."),
    I("stop-after", stop_after, "0", 0, 1e9,
      "End after this step (with a checkpoint), to resume later; 0: run every step."),
    S("print-graph", 0, print_graph, 0,
      "Print the training graph (forward, backward, outputs) as text, dot or json and exit; "
      "-i and -o are not needed."),
    GS_TOOL_OPT_THREADS(struct train_cfg, threads),
    I("seed", seed, "1", 0, 9e18, "Initialisation and batch order."),
};
/* clang-format on */
#undef O
#undef I
#undef R
#undef S

const struct gs_cli_spec gs_train_spec = {
    .cmd = "train", .synopsis = "-i TEXT -o FILE [options]", .opts = opt_rows,
    .n_opts = GS_ARRAY_LEN(opt_rows),
};

#define MAX_PREFIX 4

/* The tokenizer the corpus is encoded with and the output carries: the
 * byte-level one (file NULL) or --vocab's. */
struct vocab {
    struct gs_gguf *file;
    struct gs_tok *tok;
    int64_t n; /* tokens: the model's vocabulary */
    /* What the served tokenizer puts before a prompt's text (BOS where it adds
     * one); every training and held-out window starts with it (see open_vocab). */
    int32_t prefix[MAX_PREFIX];
    int n_prefix;
};

/* The ids the tokenizer adds before a text: those of an encoding with
 * GS_TOK_ADD_SPECIAL ahead of the plain encoding of the same text. A
 * tokenizer that adds ids after the text is refused. */
static int served_prefix(const char *path, struct vocab *v)
{
    static const char probe[] = "the";
    struct gs_err err = {0};
    int32_t *with = NULL, *plain = NULL;
    size_t n_with = 0, n_plain = 0;
    int rc = 0;
    if (gs_tok_encode(v->tok, probe, sizeof(probe) - 1, GS_TOK_ADD_SPECIAL, &with, &n_with, &err) ||
        gs_tok_encode(v->tok, probe, sizeof(probe) - 1, 0, &plain, &n_plain, &err))
        rc = gs_cli_fail("train", "--vocab %s: %s", path, err.msg);
    size_t k = 0;
    while (!rc && k + n_plain <= n_with && memcmp(with + k, plain, n_plain * sizeof(int32_t)) != 0)
        k++;
    if (!rc && (k + n_plain > n_with || k > MAX_PREFIX))
        rc = gs_cli_fail("train",
                         "--vocab %s: the tokenizer's special tokens around a text are not a "
                         "prefix of at most %d tokens",
                         path, MAX_PREFIX);
    /* Tokens after the text (add_eos_token, WordPiece's SEP) would end every
     * served prompt with a marker that running text never holds, so the model
     * would be asked to continue from a place it was never trained at. */
    if (!rc && k + n_plain < n_with)
        rc = gs_cli_fail("train",
                         "--vocab %s: the tokenizer adds %zu token(s) after a prompt's text "
                         "(first id %d: add_eos_token, or a WordPiece SEP); a model trained on "
                         "running text would see it at the end of every served prompt",
                         path, n_with - k - n_plain, (int)with[k + n_plain]);
    for (size_t i = 0; !rc && i < k; i++)
        v->prefix[i] = with[i];
    v->n_prefix = rc ? 0 : (int)k;
    gs_free(with);
    gs_free(plain);
    return rc;
}

/*
 * A served prompt is tokenized with the file's special tokens (BOS where
 * add_bos_token or the model's default says, CLS for WordPiece), so each
 * window is trained the same way: the served prefix, then corpus tokens. The
 * model's first position then holds in training what it holds when served,
 * and every tokenizer.* key still goes into the output as the source has it
 * (writing add_bos_token = false instead would not hold for tokenizers that
 * add BOS whatever the file says). The byte-level tokenizer adds nothing.
 */
static int open_vocab(const char *path, struct vocab *v)
{
    *v = (struct vocab){.n = N_VOCAB};
    if (!path)
        return 0;
    struct gs_err err = {0};
    if (gs_gguf_open(path, &v->file, &err))
        return gs_cli_fail("train", "--vocab %s: %s", path, err.msg);
    if (!gs_gguf_find_kv(v->file, "tokenizer.ggml.model"))
        return gs_cli_fail("train",
                           "--vocab %s: the file has no tokenizer (no "
                           "tokenizer.ggml.model)",
                           path);
    if (gs_tok_new(v->file, &v->tok, &err))
        return gs_cli_fail("train", "--vocab %s: %s", path, err.msg);
    v->n = gs_tok_n_vocab(v->tok);
    return served_prefix(path, v);
}

static void close_vocab(struct vocab *v)
{
    gs_tok_free(v->tok);
    gs_gguf_close(v->file);
}

/* Reads the corpus and tokenizes it; refuses what is not text. */
static int load_corpus(const char *path, const struct vocab *v, int32_t **out, int64_t *n_out)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return gs_cli_fail("train", "%s: cannot open", path);
    unsigned char *buf = NULL;
    int64_t n = 0, cap = 0;
    int rc = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 1 << 16;
            if (cap > MAX_CORPUS + 1) {
                rc = gs_cli_fail("train", "%s: larger than %lld bytes", path,
                                 (long long)MAX_CORPUS);
                break;
            }
            unsigned char *b = gs_realloc(buf, (size_t)cap);
            if (!b) {
                rc = gs_cli_fail("train", "%s: out of memory", path);
                break;
            }
            buf = b;
        }
        size_t got = fread(buf + n, 1, (size_t)(cap - n), f);
        n += (int64_t)got;
        if (got == 0)
            break;
    }
    if (!rc && ferror(f))
        rc = gs_cli_fail("train", "%s: read error", path);
    fclose(f);
    if (!rc && n == 0)
        rc = gs_cli_fail("train", "%s: the corpus is empty", path);
    for (int64_t i = 0; i < n && !rc; i++)
        if (buf[i] == 0)
            rc = gs_cli_fail("train", "%s: byte %lld is NUL: not a text file", path, (long long)i);
    /* UTF-8, so that what the model learns to write decodes */
    for (int64_t i = 0; i < n && !rc;) {
        const unsigned c = buf[i];
        const int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        bool ok = len > 0 && i + len <= n;
        for (int k = 1; ok && k < len; k++)
            ok = (buf[i + k] & 0xC0) == 0x80;
        if (!ok)
            rc = gs_cli_fail("train", "%s: byte %lld is not UTF-8: not a text file", path,
                             (long long)i);
        i += len ? len : 1;
    }
    int32_t *tok = NULL;
    if (!rc && v->tok) {
        /* plain text: no BOS or EOS, and "<s>" in the corpus is text, not a control token */
        struct gs_err err = {0};
        size_t n_ids = 0;
        if (gs_tok_encode(v->tok, (const char *)buf, (size_t)n, 0, &tok, &n_ids, &err))
            rc = gs_cli_fail("train", "%s: %s", path, err.msg);
        n = (int64_t)n_ids;
    } else if (!rc) {
        tok = gs_alloc_array((size_t)n, sizeof(int32_t));
        if (!tok)
            rc = gs_cli_fail("train", "%s: out of memory", path);
        for (int64_t i = 0; i < n && !rc; i++)
            tok[i] = buf[i] == ' ' ? TOK_SPACE : TOK_BYTE0 + buf[i];
    }
    gs_free(buf);
    *out = tok;
    *n_out = n;
    return rc;
}

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ---- the GGUF --------------------------------------------------------------------- */

/* --vocab's tokenizer: every tokenizer.* key as the file has it. */
static enum gs_status copy_vocab(struct gs_gguf_writer *w, const struct gs_gguf *from)
{
    static const char prefix[] = "tokenizer.";
    for (uint64_t i = 0; i < gs_gguf_n_kv(from); i++) {
        const struct gs_gguf_kv *kv = gs_gguf_kv_at(from, i);
        if (kv->key.len >= sizeof(prefix) - 1 &&
            !memcmp(kv->key.data, prefix, sizeof(prefix) - 1) && gs_gguf_w_copy_kv(w, kv))
            return GS_NOMEM;
    }
    return GS_OK;
}

static enum gs_status add_vocab(struct gs_gguf_writer *w, const struct vocab *v)
{
    if (v->file)
        return copy_vocab(w, v->file);
    static char names[N_VOCAB][16];
    const char *toks[N_VOCAB];
    float scores[N_VOCAB] = {0};
    int32_t types[N_VOCAB];
    static const char *const specials[N_SPECIAL] = {"<unk>", "<s>", "</s>"};
    /* GGUF token types: 1 normal, 2 unknown, 3 control, 6 byte. */
    for (int i = 0; i < N_VOCAB; i++) {
        if (i < N_SPECIAL)
            snprintf(names[i], sizeof(names[i]), "%s", specials[i]);
        else if (i < TOK_SPACE)
            snprintf(names[i], sizeof(names[i]), "<0x%02X>", (unsigned)(i - TOK_BYTE0));
        else
            snprintf(names[i], sizeof(names[i]), "\xe2\x96\x81");
        types[i] = i == 0 ? 2 : i < N_SPECIAL ? 3 : i < TOK_SPACE ? 6 : 1;
        toks[i] = names[i];
    }
    enum gs_status rc = GS_OK;
    rc |= gs_gguf_w_str(w, "tokenizer.ggml.model", "llama");
    rc |= gs_gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, N_VOCAB);
    rc |= gs_gguf_w_arr(w, "tokenizer.ggml.scores", GS_GGUF_F32, scores, N_VOCAB);
    rc |= gs_gguf_w_arr(w, "tokenizer.ggml.token_type", GS_GGUF_I32, types, N_VOCAB);
    rc |= gs_gguf_w_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    rc |= gs_gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 1);
    rc |= gs_gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 2);
    /* trained on plain text windows: no BOS, no space before the first word */
    rc |= gs_gguf_w_bool(w, "tokenizer.ggml.add_bos_token", false);
    rc |= gs_gguf_w_bool(w, "tokenizer.ggml.add_eos_token", false);
    rc |= gs_gguf_w_bool(w, "tokenizer.ggml.add_space_prefix", false);
    return rc ? GS_NOMEM : GS_OK;
}

/* The F32 model in w to --output, quantized there as --type says. */
static int write_file(const struct train_cfg *c, struct gs_gguf_writer *w)
{
    const enum gs_type type = gs_tool_file_types[c->type].type;
    struct gs_err err = {0};
    if (type == GS_TYPE_F32)
        return gs_gguf_writer_to_file(w, c->out, &err) ? gs_cli_fail("train", "%s", err.msg) : 0;
    void *buf = NULL;
    size_t len = 0;
    struct gs_gguf *f32 = NULL;
    int rc = 0;
    if (gs_gguf_writer_to_mem(w, &buf, &len, &err) || gs_gguf_open_mem(buf, len, &f32, &err) ||
        gs_tool_quantize(f32, c->out, type, false, NULL, &err))
        rc = gs_cli_fail("train", "%s: %s", c->out, err.msg);
    gs_gguf_close(f32);
    gs_free(buf);
    return rc;
}

static int write_model(const struct train_cfg *c, const struct vocab *v, const struct gs_train *t,
                       double heldout)
{
    struct gs_gguf_writer *w;
    struct gs_err err = {0};
    if (gs_gguf_writer_new(NULL, &w, &err))
        return gs_cli_fail("train", "%s", err.msg);
    char name[160], desc[320];
    snprintf(name, sizeof(name), "graphserve train %" PRId64 "x%" PRId64 " %s", c->n_embd,
             c->n_layer, v->file ? "vocab" : "byte-level");
    snprintf(desc, sizeof(desc),
             "Trained by graphserve train on %s: %" PRId64 " steps of %" PRId64 " x %" PRId64
             " tokens, held-out loss %.4f nats/token.",
             c->in, c->steps, c->batch, c->block, heldout);
    enum gs_status rc = GS_OK;
    rc |= gs_gguf_w_str(w, "general.architecture", "llama");
    rc |= gs_gguf_w_str(w, "general.name", name);
    rc |= gs_gguf_w_str(w, "general.description", desc);
    rc |= gs_gguf_w_u32(w, "general.alignment", GS_GGUF_DEFAULT_ALIGNMENT);
    rc |= gs_gguf_w_u32(w, "llama.context_length", (uint32_t)c->n_ctx);
    rc |= gs_gguf_w_u32(w, "llama.embedding_length", (uint32_t)c->n_embd);
    rc |= gs_gguf_w_u32(w, "llama.block_count", (uint32_t)c->n_layer);
    rc |= gs_gguf_w_u32(w, "llama.feed_forward_length", (uint32_t)c->n_ff);
    rc |= gs_gguf_w_u32(w, "llama.attention.head_count", (uint32_t)c->n_head);
    rc |= gs_gguf_w_u32(w, "llama.attention.head_count_kv", (uint32_t)c->n_head_kv);
    rc |= gs_gguf_w_u32(w, "llama.rope.dimension_count", (uint32_t)(c->n_embd / c->n_head));
    rc |= gs_gguf_w_u32(w, "llama.vocab_size", (uint32_t)v->n);
    rc |= gs_gguf_w_f32(w, "llama.rope.freq_base", 10000.0f);
    rc |= gs_gguf_w_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    rc |= add_vocab(w, v);
    for (size_t i = 0; i < gs_train_n_params(t) && !rc; i++) {
        const struct gs_train_param *p = gs_train_param(t, i);
        struct gs_gguf_w_tensor wt = {.name = p->name, .type = GS_TYPE_F32,
                                      .n_dims = p->ne1 > 1 ? 2 : 1, .ne = {p->ne0, p->ne1, 1, 1},
                                      .data = p->data,
                                      .nbytes = (uint64_t)(p->ne0 * p->ne1) * sizeof(float)};
        rc = gs_gguf_w_tensor(w, &wt);
    }
    if (rc) {
        gs_gguf_writer_free(w);
        return gs_cli_fail("train", "out of memory writing the model");
    }
    const int wrc = write_file(c, w);
    gs_gguf_writer_free(w);
    return wrc;
}

/* What a checkpoint's tokens mean: the vocabulary (a digest of the tokenizer.*
 * keys the output carries, and a name for messages) and how the corpus became
 * windows of its ids. A resume that differs in either would continue training
 * on other ids, so it is refused. */
struct vocab_id {
    uint8_t digest[GS_SHA256_BYTES];
    char name[64];
    char encoding[128]; /* room for MAX_PREFIX ids of 10 digits */
};

static int vocab_identity(const struct vocab *v, struct vocab_id *id)
{
    memset(id, 0, sizeof(*id));
    struct gs_gguf_writer *w = NULL;
    struct gs_err err = {0};
    void *buf = NULL;
    size_t len = 0;
    if (gs_gguf_writer_new(NULL, &w, &err) || add_vocab(w, v) ||
        gs_gguf_writer_to_mem(w, &buf, &len, &err)) {
        gs_gguf_writer_free(w);
        return gs_cli_fail("train", "out of memory digesting the vocabulary");
    }
    gs_sha256(buf, len, id->digest);
    gs_free(buf);
    gs_gguf_writer_free(w);
    if (!v->file) {
        snprintf(id->name, sizeof(id->name), "byte-level, %d tokens", N_VOCAB);
        snprintf(id->encoding, sizeof(id->encoding), "bytes: token %d + byte, a space %d",
                 TOK_BYTE0, TOK_SPACE);
        return 0;
    }
    const struct gs_gguf_kv *model = gs_gguf_find_kv(v->file, "tokenizer.ggml.model");
    const int mlen = model->type == GS_GGUF_STRING ? (int)GS_MIN(model->v.str.len, 16u) : 0;
    snprintf(id->name, sizeof(id->name), "--vocab's %.*s tokenizer, %lld tokens", mlen,
             mlen ? model->v.str.data : "", (long long)v->n);
    size_t n = (size_t)snprintf(id->encoding, sizeof(id->encoding),
                                "--vocab's, text without special tokens; windows after [");
    for (int i = 0; i < v->n_prefix && n < sizeof(id->encoding); i++)
        n += (size_t)snprintf(id->encoding + n, sizeof(id->encoding) - n, "%s%d", i ? "," : "",
                              (int)v->prefix[i]);
    if (n < sizeof(id->encoding))
        snprintf(id->encoding + n, sizeof(id->encoding) - n, "]");
    return 0;
}

/* Refuses a checkpoint whose tokens meant something else, naming what. */
static int check_vocab_id(const char *path, const struct vocab_id *saved,
                          const struct vocab_id *ours)
{
    if (memcmp(saved->digest, ours->digest, sizeof(ours->digest))) {
        char a[GS_SHA256_HEX_LEN], b[GS_SHA256_HEX_LEN];
        gs_sha256_hex(saved->digest, a);
        gs_sha256_hex(ours->digest, b);
        return gs_cli_fail("train",
                           "--resume %s: the checkpoint's vocabulary is not this run's: %.*s "
                           "(tokenizer sha256 %.16s) against %s (%.16s)",
                           path, (int)sizeof(saved->name) - 1, saved->name, a, ours->name, b);
    }
    if (memcmp(saved->encoding, ours->encoding, sizeof(ours->encoding)))
        return gs_cli_fail("train",
                           "--resume %s: the checkpoint's corpus encoding is not this run's: "
                           "%.*s against %s",
                           path, (int)sizeof(saved->encoding) - 1, saved->encoding, ours->encoding);
    return 0;
}

/* ---- the loop ------------------------------------------------------------------------ */

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double now_s(void)
{
    return clock_s(CLOCK_MONOTONIC);
}

/* CPU seconds of every thread of the process (the backend's workers too,
 * spinning at barriers included). */
static double cpu_s(void)
{
    return clock_s(CLOCK_PROCESS_CPUTIME_ID);
}

/* One window of a batch: the served prefix, then win - n_prefix tokens of src. */
static void fill_window(int32_t *dst, const struct vocab *v, const int32_t *src, int64_t win)
{
    memcpy(dst, v->prefix, (size_t)v->n_prefix * sizeof(int32_t));
    memcpy(dst + v->n_prefix, src, (size_t)(win - v->n_prefix) * sizeof(int32_t));
}

/* Time spent in held-out evaluations (wall and CPU) and their tokens: the
 * forward-only rate. */
static double eval_seconds, eval_cpu_seconds;
static int64_t eval_tokens;

/* The mean loss over eval_batches batches of consecutive held-out windows. */
static int heldout_loss(const struct train_cfg *c, const struct vocab *v, struct gs_train *t,
                        const int32_t *held, int64_t n_held, int32_t *batch, double *out)
{
    const double t0 = now_s(), c0 = cpu_s();
    const int64_t win = c->block + 1, body = win - v->n_prefix, n_win = n_held / body;
    double sum = 0;
    int64_t k = 0;
    struct gs_err err = {0};
    for (int64_t b = 0; b < c->eval_batches; b++) {
        for (int64_t s = 0; s < c->batch; s++, k++)
            fill_window(batch + s * win, v, held + (k % n_win) * body, win);
        float loss;
        if (gs_train_eval(t, batch, &loss, &err))
            return gs_cli_fail("train", "%s", err.msg);
        sum += loss;
    }
    *out = sum / (double)c->eval_batches;
    eval_seconds += now_s() - t0;
    eval_cpu_seconds += cpu_s() - c0;
    eval_tokens += c->eval_batches * c->batch * c->block;
    return 0;
}

/* What the loop adds to a checkpoint: where it is, its data order and its curve. */
struct loop_state {
    int64_t step;     /* steps done */
    uint64_t rng;     /* the batch sampler */
    double first_loss;
    float *curve; /* [2][steps + 1]: train loss by step, held-out loss (NaN: not evaluated) */
};

/* The curve as an SVG line plot: train loss (every step) and held-out loss (each evaluation). */
static int write_svg(const struct train_cfg *c, const float *curve)
{
    FILE *f = fopen(c->svg, "w");
    if (!f)
        return gs_cli_fail("train", "%s: cannot create", c->svg);
    const float *tr = curve, *ho = curve + c->steps + 1;
    double hi = 0;
    for (int64_t i = 0; i <= c->steps; i++) {
        if (isfinite(tr[i]) && tr[i] > hi)
            hi = tr[i];
        if (isfinite(ho[i]) && ho[i] > hi)
            hi = ho[i];
    }
    hi = ceil(hi);
    const double w = 640, h = 400, l = 60, r = 20, t = 30, b = 50;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
               "<text x=\"%.0f\" y=\"18\">graphserve train: loss (nats/token) by step</text>\n",
            w, h, l);
    fprintf(f, "<path d=\"M%.0f %.0f V%.0f H%.0f\" stroke=\"black\" fill=\"none\"/>\n", l, t,
            h - b, w - r);
    for (int k = 0; k <= (int)hi; k++) {
        const double y = h - b - (h - t - b) * k / hi;
        fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%d</text>\n", l - 6, y + 4, k);
    }
    for (int k = 0; k <= 4; k++)
        fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%lld</text>\n",
                l + (w - l - r) * k / 4, h - b + 16, (long long)(c->steps * k / 4));
    for (int s = 0; s < 2; s++) {
        const float *y = s ? ho : tr;
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"",
                s ? "#d62728" : "#1f77b4");
        for (int64_t i = 0; i <= c->steps; i++)
            if (isfinite(y[i]))
                fprintf(f, "%.1f,%.1f ", l + (w - l - r) * (double)i / (double)c->steps,
                        h - b - (h - t - b) * y[i] / hi);
        fprintf(f, "\"/>\n");
    }
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" fill=\"#1f77b4\">train</text>\n"
               "<text x=\"%.0f\" y=\"%.0f\" fill=\"#d62728\">held-out</text>\n"
               "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">step</text>\n</svg>\n",
            w - 140, t + 10, w - 80, t + 10, l + (w - l - r) / 2, h - 12);
    return fclose(f) ? gs_cli_fail("train", "%s: write error", c->svg) : 0;
}

/* The checkpoint's caller bytes: the loop state's scalars, the vocabulary's
 * identity, then the curve. */
#define USER_CURVE (24 + sizeof(struct vocab_id))
static size_t user_bytes(const struct train_cfg *c)
{
    return USER_CURVE + 2 * (size_t)(c->steps + 1) * sizeof(float);
}

static void pack(const struct train_cfg *c, const struct loop_state *ls, const struct vocab_id *id,
                 char *buf)
{
    memcpy(buf, &ls->step, 8);
    memcpy(buf + 8, &ls->rng, 8);
    memcpy(buf + 16, &ls->first_loss, 8);
    memcpy(buf + 24, id, sizeof(*id));
    memcpy(buf + USER_CURVE, ls->curve, 2 * (size_t)(c->steps + 1) * sizeof(float));
}

static void unpack(const struct train_cfg *c, struct loop_state *ls, struct vocab_id *id,
                   const char *buf)
{
    memcpy(&ls->step, buf, 8);
    memcpy(&ls->rng, buf + 8, 8);
    memcpy(&ls->first_loss, buf + 16, 8);
    memcpy(id, buf + 24, sizeof(*id));
    memcpy(ls->curve, buf + USER_CURVE, 2 * (size_t)(c->steps + 1) * sizeof(float));
}

/* The model's shape: the flags', with the vocabulary's size. */
static struct gs_train_shape shape_of(const struct train_cfg *c, const struct vocab *v)
{
    return (struct gs_train_shape){.n_vocab = v->n,
                                   .n_embd = c->n_embd,
                                   .n_layer = c->n_layer,
                                   .n_head = c->n_head,
                                   .n_head_kv = c->n_head_kv,
                                   .n_ff = c->n_ff,
                                   .block = c->block};
}

static int train(const struct train_cfg *c, const struct vocab *v, const int32_t *tok,
                 int64_t n_tok)
{
    const int64_t win = c->block + 1, body = win - v->n_prefix;
    if (body < 1)
        return gs_cli_fail("train",
                           "--block %lld: no room after the %d special tokens a "
                           "window starts with",
                           (long long)c->block, v->n_prefix);
    const int64_t n_held = (int64_t)((double)n_tok * c->holdout), n_train = n_tok - n_held;
    if (n_train < c->batch * body)
        return gs_cli_fail("train",
                           "%s: %lld training tokens%s, fewer than one batch (%lld sequences of "
                           "%lld)",
                           c->in, (long long)n_train, v->file ? " by --vocab's tokenizer" : "",
                           (long long)c->batch, (long long)body);
    if (n_held < body)
        return gs_cli_fail("train", "%s: %lld held-out tokens, fewer than one sequence of %lld",
                           c->in, (long long)n_held, (long long)body);
    struct vocab_id id, saved_id;
    if (vocab_identity(v, &id))
        return 1;
    const struct gs_train_shape shape = shape_of(c, v);
    struct gs_train_opt opt = gs_train_opt_default();
    opt.batch = c->batch;
    opt.accum = c->accum;
    /* the schedule counts updates */
    opt.warmup = (c->warmup + c->accum - 1) / c->accum;
    opt.lr = (float)c->lr;
    opt.min_lr = (float)c->min_lr;
    opt.total = (c->steps + c->accum - 1) / c->accum;
    opt.weight_decay = (float)c->weight_decay;
    opt.clip_norm = (float)c->clip;
    opt.seed = (uint64_t)c->seed;
    struct gs_train *t;
    struct gs_err err = {0};
    if (gs_train_new(&shape, &opt, "cpu", (int)c->threads, &t, &err))
        return gs_cli_fail("train", "%s", err.msg);
    struct loop_state ls = {.rng = (uint64_t)c->seed ^ 0x5eed0fba7c4e5ull, .first_loss = NAN};
    int32_t *batch = gs_alloc_array((size_t)(c->batch * win), sizeof(int32_t));
    ls.curve = gs_alloc_array(2 * (size_t)(c->steps + 1), sizeof(float));
    char *user = gs_malloc(user_bytes(c));
    int rc = 0;
    if (!batch || !ls.curve || !user)
        rc = gs_cli_fail("train", "out of memory");
    for (int64_t i = 0; !rc && i < 2 * (c->steps + 1); i++)
        ls.curve[i] = NAN;
    if (!rc && c->resume) {
        if (gs_train_load(t, c->resume, user, user_bytes(c), &err))
            rc = gs_cli_fail("train",
                             "--resume: %s (same shape, batch and --steps as the run "
                             "that wrote it? checkpoints from before they recorded "
                             "their vocabulary do not resume)",
                             err.msg);
        else
            unpack(c, &ls, &saved_id, user);
        if (!rc)
            rc = check_vocab_id(c->resume, &saved_id, &id);
        if (!rc && (ls.step < 0 || ls.step > c->steps))
            rc = gs_cli_fail("train", "--resume %s: at step %lld of %lld", c->resume,
                             (long long)ls.step, (long long)c->steps);
    }
    FILE *csv = NULL;
    if (!rc && c->csv && !(csv = fopen(c->csv, c->resume ? "a" : "w")))
        rc = gs_cli_fail("train", "%s: cannot create", c->csv);
    const bool tty = isatty(fileno(stderr));
    float *held = ls.curve + c->steps + 1;
    if (!rc && ls.step == 0) {
        double h0;
        rc = heldout_loss(c, v, t, tok + n_train, n_held, batch, &h0);
        held[0] = (float)h0;
        if (!rc && csv)
            fprintf(csv, "step,train_loss,heldout_loss,lr\n0,,%.6f,%.6g\n", h0,
                    (double)gs_train_lr(&opt, 0));
    }
    if (!rc)
        fprintf(stderr,
                "graphserve train: %zu tensors, %" PRId64 " training and %" PRId64
                " held-out tokens; held-out loss at step 0 %.4f (ln %d = %.4f)%s\n",
                gs_train_n_params(t), n_train, n_held, (double)held[0], (int)v->n,
                log((double)v->n), c->resume ? ", resumed" : "");
    if (!rc && v->n_prefix) {
        char ids[64] = "";
        for (int i = 0, n = 0; i < v->n_prefix; i++)
            n +=
                snprintf(ids + n, sizeof(ids) - (size_t)n, "%s%d", i ? "," : "", (int)v->prefix[i]);
        fprintf(stderr,
                "graphserve train: every window starts with [%s], the tokens the written "
                "tokenizer puts before a prompt\n",
                ids);
    }
    const int64_t start = ls.step, last = c->stop_after ? GS_MIN(c->stop_after, c->steps) : c->steps;
    double t0 = now_s(), c0 = cpu_s(), h = held[0], eval0 = eval_seconds,
           eval_cpu0 = eval_cpu_seconds;
    for (int64_t i = 0; i <= ls.step; i++) /* the latest evaluation, on resuming */
        if (isfinite(held[i]))
            h = held[i];
    for (int64_t step = start + 1; step <= last && !rc; step++) {
        for (int64_t s = 0; s < c->batch; s++) {
            const uint64_t off = splitmix64(&ls.rng) % (uint64_t)(n_train - body + 1);
            fill_window(batch + s * win, v, tok + off, win);
        }
        float loss;
        bool updated;
        const float lr = gs_train_lr(&opt, (step - 1) / c->accum);
        if (gs_train_step(t, batch, &loss, &updated, &err)) {
            rc = gs_cli_fail("train", "step %lld: %s", (long long)step, err.msg);
            break;
        }
        ls.curve[step] = loss;
        if (step == 1)
            ls.first_loss = loss;
        const bool eval = step % c->eval_every == 0 || step == c->steps || step == last;
        if (eval && (rc = heldout_loss(c, v, t, tok + n_train, n_held, batch, &h)))
            break;
        if (eval)
            held[step] = (float)h;
        ls.step = step;
        if (csv) {
            fprintf(csv, "%lld,%.6f,", (long long)step, (double)loss);
            if (eval)
                fprintf(csv, "%.6f", h);
            fprintf(csv, ",%.6g\n", (double)lr);
        }
        const double el = now_s() - t0;
        const double tps = (double)((step - start) * c->batch * c->block) / el;
        if (tty || eval)
            fprintf(stderr, "%sstep %lld/%lld  loss %.4f  held-out %.4f (ppl %.2f)  %.0f tok/s  "
                            "ETA %.0f s%s",
                    tty ? "\r" : "", (long long)step, (long long)c->steps, (double)loss, h,
                    exp(h), tps, el / (double)(step - start) * (double)(c->steps - step),
                    tty && !eval ? "" : "\n");
        if (c->checkpoint && (step % c->checkpoint_every == 0 || step == last)) {
            pack(c, &ls, &id, user);
            if (gs_train_save(t, c->checkpoint, user, user_bytes(c), &err))
                rc = gs_cli_fail("train", "%s", err.msg);
        }
    }
    if (!rc) {
        const double el = now_s() - t0;
        /* tokens/s of the steps alone (forward + backward + update), and of the
         * held-out evaluations (forward only) at the same shape */
        const double train_s = el - (eval_seconds - eval0);
        const double train_tok = (double)((ls.step - start) * c->batch * c->block);
        const double train_tps = train_s > 0 ? train_tok / train_s : 0.0;
        const double eval_tps = eval_seconds > 0 ? (double)eval_tokens / eval_seconds : 0.0;
        printf("steps %lld  first loss %.4f (ln %d = %.4f)  held-out loss %.4f  perplexity %.3f  "
               "%.1f s  train %.0f tokens/s  forward-only %.0f tokens/s\n",
               (long long)ls.step, ls.first_loss, (int)v->n, log((double)v->n), h, exp(h), el,
               train_tps, eval_tps);
        /* the same split in CPU seconds, which a loaded machine stretches less
         * than wall time: the step's cost per token against the forward pass's */
        const double train_cpu = cpu_s() - c0 - (eval_cpu_seconds - eval_cpu0);
        const double us_train = train_tok > 0 ? 1e6 * train_cpu / train_tok : 0.0;
        const double us_eval = eval_tokens > 0 ? 1e6 * eval_cpu_seconds / (double)eval_tokens : 0.0;
        printf("cpu (all threads, barrier spins included): train %.2f s, %.2f us/token  "
               "forward-only %.2f s, %.2f us/token  train/forward per token %.2fx cpu, %.2fx "
               "wall\n",
               train_cpu, us_train, eval_cpu_seconds, us_eval,
               us_eval > 0 ? us_train / us_eval : 0.0, train_tps > 0 ? eval_tps / train_tps : 0.0);
        rc = write_model(c, v, t, h);
    }
    if (!rc && c->svg)
        rc = write_svg(c, ls.curve);
    if (csv && fclose(csv) && !rc)
        rc = gs_cli_fail("train", "%s: write error", c->csv);
    gs_free(batch);
    gs_free(ls.curve);
    gs_free(user);
    gs_train_free(t);
    return rc;
}

/* The graph a step runs, for a shape: what gs_graph_backward made of the forward pass. */
static int print_graph(const struct train_cfg *c, const struct vocab *v)
{
    static const char *const names[] = {"text", "dot", "json"};
    static const enum gs_graph_format fmts[] = {GS_GRAPH_TEXT, GS_GRAPH_DOT, GS_GRAPH_JSON};
    size_t k = 0;
    while (k < GS_ARRAY_LEN(names) && strcmp(names[k], c->print_graph))
        k++;
    if (k == GS_ARRAY_LEN(names))
        return gs_cli_fail("train", "--print-graph '%s': not text, dot or json", c->print_graph);
    const struct gs_train_shape shape = shape_of(c, v);
    struct gs_train_opt opt = gs_train_opt_default();
    opt.batch = c->batch;
    struct gs_train *t;
    struct gs_err err = {0};
    if (gs_train_new(&shape, &opt, "ref", 1, &t, &err))
        return gs_cli_fail("train", "%s", err.msg);
    gs_graph_print(gs_train_graph(t), fmts[k], stdout);
    gs_train_free(t);
    return 0;
}

int gs_cmd_train(int argc, char **argv)
{
    struct train_cfg c = {0};
    struct gs_cli_args args;
    int prc = gs_cli_begin(&gs_train_spec, &c, argc, argv, &args);
    if (prc >= 0)
        return prc;
    if (!c.print_graph && (!c.in || !c.out))
        return gs_cli_fail("train", "needs -i TEXT and -o FILE (or --print-graph FMT)") + 1;
    if (!c.n_head_kv)
        c.n_head_kv = c.n_head;
    if (!c.n_ff)
        c.n_ff = (4 * c.n_embd + 31) / 32 * 32;
    if (!c.n_ctx)
        c.n_ctx = c.block;
    if (c.min_lr < 0)
        c.min_lr = c.lr / 10;
    if (!c.checkpoint_every)
        c.checkpoint_every = c.eval_every;
    if (c.stop_after && !c.checkpoint)
        return gs_cli_fail("train", "--stop-after needs --checkpoint FILE to resume from");
    if (c.block > c.n_ctx)
        return gs_cli_fail("train", "--block %lld is over the context --n-ctx %lld",
                           (long long)c.block, (long long)c.n_ctx);
    if (c.n_embd % c.n_head)
        return gs_cli_fail("train", "--n-head %lld does not divide --n-embd %lld",
                           (long long)c.n_head, (long long)c.n_embd);
    if (c.n_head % c.n_head_kv)
        return gs_cli_fail("train", "--n-head-kv %lld does not divide --n-head %lld",
                           (long long)c.n_head_kv, (long long)c.n_head);
    struct vocab v;
    int rc = open_vocab(c.vocab, &v);
    if (!rc && c.print_graph)
        rc = print_graph(&c, &v);
    int32_t *tok = NULL;
    int64_t n_tok = 0;
    if (!rc && !c.print_graph)
        rc = load_corpus(c.in, &v, &tok, &n_tok);
    if (!rc && !c.print_graph)
        rc = train(&c, &v, tok, n_tok);
    gs_free(tok);
    close_vocab(&v);
    return rc;
}
