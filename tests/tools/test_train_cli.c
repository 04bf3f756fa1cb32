/*
 * tests/tools/test_train_cli.c - `graphserve train` as a child process: the
 * bad inputs it must refuse by name, a short run whose model `graphserve run`
 * loads and whose bytes do not depend on the thread count, and a resumed run
 * equal bit for bit to an uninterrupted one; a tokenizer taken from another
 * GGUF (--vocab) that the written model tokenizes and serves with, and a
 * quantized output (--type) whose logits stay near the F32 model's.
 */
#define _GNU_SOURCE /* asprintf */
#include "engine/gguf.h"
#include "engine/validate.h"
#include "tests/common/testutil.h"
#include "tests/engine/test_llama_util.h"
#include "tests/server/e2e.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int graphserve(const char *args, char **out)
{
    char *cmd = NULL;
    cr_assert(asprintf(&cmd, "%s %s", gs_test_build_path("server/graphserve"), args) > 0);
    int rc = gs_test_run(cmd, 1, out);
    free(cmd);
    return rc;
}

/* name in one fresh folder per test (gs_test_tmpdir makes a new one each call) */
static const char *tmp_path(const char *name)
{
    static char dir[4096], buf[8][4200];
    static int k;
    if (!dir[0])
        snprintf(dir, sizeof(dir), "%s", gs_test_tmpdir());
    char *p = buf[k++ % 8];
    snprintf(p, sizeof(buf[0]), "%s/%s", dir, name);
    return p;
}

static const char *write_file(const char *name, const void *data, size_t n)
{
    const char *path = tmp_path(name);
    FILE *f = fopen(path, "wb");
    cr_assert(f, "cannot create %s", path);
    cr_assert_eq(fwrite(data, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
    return path;
}

/* A small English-like text: a few sentences repeated with variations. */
static const char *corpus(void)
{
    static char text[16384];
    static const char *const words[] = {"the", "king", "said", "unto", "his", "servants",
                                        "and", "they", "went", "into", "city", "of", "light"};
    size_t n = 0;
    uint32_t s = 1;
    while (n + 16 < sizeof(text)) {
        s = s * 1664525u + 1013904223u;
        n += (size_t)snprintf(text + n, sizeof(text) - n, "%s%s", words[(s >> 16) % 13],
                              (s >> 8) % 9 == 0 ? ".\n" : " ");
    }
    static char path[4200]; /* not in tmp_path's ring, which later calls reuse */
    snprintf(path, sizeof(path), "%s", write_file("corpus.txt", text, n));
    return path;
}

static bool same_file(const char *a, const char *b)
{
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    cr_assert(fa && fb);
    int ca, cb;
    do {
        ca = fgetc(fa);
        cb = fgetc(fb);
    } while (ca == cb && ca != EOF);
    fclose(fa);
    fclose(fb);
    return ca == cb;
}

#define SMALL "--n-embd 16 --n-layer 2 --n-head 2 --block 16 --batch 4 --eval-every 2 " \
              "--eval-batches 1 --seed 3"

struct bad_case {
    const char *what;
    int kind; /* 0 empty, 1 NUL, 2 not UTF-8, 3 tiny text, 4 the corpus */
    const char *flags;
    const char *message;
};

static const struct bad_case bad_cases[] = {
    {"empty corpus", 0, "", "the corpus is empty"},
    {"binary corpus", 1, "", "is NUL: not a text file"},
    {"not UTF-8", 2, "", "is not UTF-8"},
    {"smaller than a batch", 3, "", "fewer than one batch"},
    {"block over the context", 4, "--block 64 --n-ctx 32", "--block 64 is over the context"},
    {"heads do not divide", 4, "--n-embd 16 --n-head 3", "--n-head 3 does not divide"},
    {"kv heads do not divide", 4, "--n-head 4 --n-head-kv 3", "--n-head-kv 3 does not divide"},
    {"odd head size", 4, "--n-embd 12 --n-head 4", "must be even"},
    {"missing file", 5, "", "cannot open"},
};

Test(train_cli, bad_inputs)
{
    for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
        const struct bad_case *c = &bad_cases[i];
        const char *in;
        switch (c->kind) {
        case 0:
            in = write_file("empty.txt", "", 0);
            break;
        case 1:
            in = write_file("nul.txt", "ab\0cd", 5);
            break;
        case 2:
            in = write_file("latin1.txt", "caf\xe9 au lait", 12);
            break;
        case 3:
            in = write_file("tiny.txt", "In the beginning.", 17);
            break;
        case 4:
            in = corpus();
            break;
        default:
            in = tmp_path("does-not-exist.txt");
            break;
        }
        char args[2048], *out = NULL;
        snprintf(args, sizeof(args), "train -i %s -o %s --steps 2 %s", in, tmp_path("bad.gguf"),
                 c->flags);
        int rc = graphserve(args, &out);
        cr_expect_eq(rc, 1, "%s: exit %d: %s", c->what, rc, out);
        cr_expect(out && strstr(out, c->message), "%s: '%s' not in: %s", c->what, c->message,
                  out);
        free(out);
    }
}

/* The same run on one and two threads writes the same bytes, and the model
 * it writes loads and generates. */
Test(train_cli, deterministic_and_loadable)
{
    const char *in = corpus();
    char args[2048], *out = NULL;
    snprintf(args, sizeof(args), "train -i %s -o %s --steps 4 --threads 1 --csv %s " SMALL, in,
             tmp_path("one.gguf"), tmp_path("one.csv"));
    cr_assert_eq(graphserve(args, &out), 0, "%s", out);
    /* a sane initialisation predicts every token alike: the first loss is ln(vocab) */
    const char *first = strstr(out, "first loss ");
    double loss0 = 0;
    cr_assert(first && sscanf(first, "first loss %lf", &loss0) == 1, "%s", out);
    cr_expect(fabs(loss0 - log(260.0)) <= 0.05, "first loss %.4f, ln 260 = %.4f", loss0,
              log(260.0));
    free(out);
    snprintf(args, sizeof(args), "train -i %s -o %s --steps 4 --threads 2 " SMALL, in,
             tmp_path("two.gguf"));
    cr_assert_eq(graphserve(args, &out), 0, "%s", out);
    free(out);
    cr_expect(same_file(tmp_path("one.gguf"), tmp_path("two.gguf")),
              "1 and 2 threads wrote different models");

    FILE *f = fopen(tmp_path("one.csv"), "r");
    cr_assert(f);
    char line[256];
    int n = 0;
    cr_assert(fgets(line, sizeof(line), f));
    cr_expect_str_eq(line, "step,train_loss,heldout_loss,lr\n");
    while (fgets(line, sizeof(line), f))
        n++;
    fclose(f);
    cr_expect_eq(n, 5, "a row for step 0 and each of 4 steps, got %d", n);

    /* The served tokenizer encodes a text exactly as train encoded the corpus:
     * byte b is token 3 + b, a space is the "▁" piece (259), no BOS, no prefix. */
    static const char text[] = "In the  beginning, \xc3\xa9";
    snprintf(args, sizeof(args), "tokenize -m %s --json '%s'", tmp_path("one.gguf"), text);
    cr_assert_eq(graphserve(args, &out), 0, "%s", out);
    char want[512] = "{\"ids\":[";
    for (size_t i = 0; i < sizeof(text) - 1; i++)
        snprintf(want + strlen(want), sizeof(want) - strlen(want), "%s%d", i ? "," : "",
                 text[i] == ' ' ? 259 : 3 + (unsigned char)text[i]);
    cr_expect(strstr(out, want), "want %s in %s", want, out);
    free(out);

    snprintf(args, sizeof(args), "run -m %s -p 'the king' -n 8 --temp 0", tmp_path("one.gguf"));
    cr_expect_eq(graphserve(args, &out), 0, "the trained model does not run: %s", out);
    free(out);
}

/* Stopping at step 3 and resuming from its checkpoint writes the model an
 * uninterrupted run of 6 steps writes, byte for byte; a checkpoint of another
 * shape is refused by name. */
Test(train_cli, resume_is_bit_exact)
{
    const char *in = corpus();
    char args[16384], *out = NULL;
    snprintf(args, sizeof(args), "train -i %s -o %s --steps 6 --svg %s " SMALL, in,
             tmp_path("straight.gguf"), tmp_path("curve.svg"));
    cr_assert_eq(graphserve(args, &out), 0, "%s", out);
    free(out);
    snprintf(args, sizeof(args), "train -i %s -o %s --steps 6 --checkpoint %s --stop-after 3 " SMALL,
             in, tmp_path("half.gguf"), tmp_path("ck"));
    cr_assert_eq(graphserve(args, &out), 0, "%s", out);
    free(out);
    cr_expect(!same_file(tmp_path("half.gguf"), tmp_path("straight.gguf")));
    snprintf(args, sizeof(args), "train -i %s -o %s --steps 6 --resume %s " SMALL, in,
             tmp_path("resumed.gguf"), tmp_path("ck"));
    cr_assert_eq(graphserve(args, &out), 0, "%s", out);
    cr_expect(strstr(out, "resumed"), "%s", out);
    free(out);
    cr_expect(same_file(tmp_path("straight.gguf"), tmp_path("resumed.gguf")),
              "the resumed run's model differs from the uninterrupted run's");

    snprintf(args, sizeof(args), "train -i %s -o %s --steps 6 --resume %s " SMALL " --n-embd 32",
             in, tmp_path("other.gguf"), tmp_path("ck"));
    cr_expect_eq(graphserve(args, &out), 1, "%s", out);
    cr_expect(strstr(out, "width 16, this run 32"), "%s", out);
    free(out);

    FILE *f = fopen(tmp_path("curve.svg"), "r");
    cr_assert(f, "no plot");
    char head[64] = {0};
    cr_expect(fread(head, 1, sizeof(head) - 1, f) > 0);
    fclose(f);
    cr_expect(strstr(head, "<svg"), "%s", head);
}

/* from's tokenizer with one boolean key set to value: a vocabulary of the same
 * size whose tokens encode a text otherwise. */
static const char *vocab_variant(const char *from, const char *name, const char *key, bool value)
{
    struct gs_gguf *g = NULL;
    struct gs_gguf_writer *w = NULL;
    struct gs_err err = {0};
    cr_assert_eq(gs_gguf_open(from, &g, &err), GS_OK, "%s", err.msg);
    cr_assert_eq(gs_gguf_writer_new(NULL, &w, &err), GS_OK, "%s", err.msg);
    for (uint64_t i = 0; i < gs_gguf_n_kv(g); i++) {
        const struct gs_gguf_kv *kv = gs_gguf_kv_at(g, i);
        if (kv->key.len != strlen(key) || memcmp(kv->key.data, key, kv->key.len))
            cr_assert_eq(gs_gguf_w_copy_kv(w, kv), GS_OK);
    }
    cr_assert_eq(gs_gguf_w_bool(w, key, value), GS_OK);
    const char *path = tmp_path(name);
    cr_assert_eq(gs_gguf_writer_to_file(w, path, &err), GS_OK, "%s", err.msg);
    gs_gguf_writer_free(w);
    gs_gguf_close(g);
    return path;
}

/* A checkpoint knows its vocabulary and how the corpus was encoded: resuming
 * it with a vocabulary of the same size but other tokens, or the same tokens
 * encoded another way, is refused by name; resuming with the same --vocab
 * writes the uninterrupted run's model. */
Test(train_cli, resume_checks_the_vocabulary, .timeout = 600)
{
    const char *in = corpus();
    char args[16384], *out = NULL, ck[4200], byte_model[4200], spm[4200];
    snprintf(ck, sizeof(ck), "%s", tmp_path("byte.ck"));
    snprintf(byte_model, sizeof(byte_model), "%s", tmp_path("byte.gguf"));
    snprintf(spm, sizeof(spm), "%s", gs_test_shared_path("models/stories260K.gguf"));
    snprintf(args, sizeof(args),
             "train -i %s -o %s --steps 6 --checkpoint %s --stop-after 3 " SMALL, in, byte_model,
             ck);
    cr_assert_eq(graphserve(args, &out), 0, "%s", out);
    free(out);

    /* the byte-level model's own tokenizer as --vocab: the same tokens, 260 of
     * them, but the corpus encoded by the tokenizer rather than byte by byte */
    snprintf(args, sizeof(args), "train -i %s -o %s --steps 6 --resume %s --vocab %s " SMALL, in,
             tmp_path("x.gguf"), ck, byte_model);
    cr_expect_eq(graphserve(args, &out), 1, "%s", out);
    cr_expect(out && strstr(out, "the checkpoint's corpus encoding is not this run's"), "%s", out);
    free(out);
    /* 260 tokens again, with a space prefix: another vocabulary of the same size */
    const char *spaced =
        vocab_variant(byte_model, "spaced.gguf", "tokenizer.ggml.add_space_prefix", true);
    snprintf(args, sizeof(args), "train -i %s -o %s --steps 6 --resume %s --vocab %s " SMALL, in,
             tmp_path("x.gguf"), ck, spaced);
    cr_expect_eq(graphserve(args, &out), 1, "%s", out);
    cr_expect(out && strstr(out, "the checkpoint's vocabulary is not this run's: byte-level, 260 "
                                 "tokens"),
              "%s", out);
    free(out);

    /* --vocab: stopped and resumed equals straight through; a checkpoint of
     * stories260K's tokenizer is refused with another one of its 512 tokens */
    snprintf(args, sizeof(args), "train -i %s -o %s --vocab %s --steps 6 --n-ctx 64 " SMALL, in,
             tmp_path("v-straight.gguf"), spm);
    cr_assert_eq(graphserve(args, &out), 0, "%s", out);
    free(out);
    snprintf(
        args, sizeof(args),
        "train -i %s -o %s --vocab %s --steps 6 --n-ctx 64 --checkpoint %s --stop-after 3 " SMALL,
        in, tmp_path("v-half.gguf"), spm, tmp_path("v.ck"));
    cr_assert_eq(graphserve(args, &out), 0, "%s", out);
    free(out);
    const char *nobos = vocab_variant(spm, "nobos.gguf", "tokenizer.ggml.add_bos_token", false);
    snprintf(args, sizeof(args),
             "train -i %s -o %s --vocab %s --steps 6 --n-ctx 64 --resume %s " SMALL, in,
             tmp_path("x.gguf"), nobos, tmp_path("v.ck"));
    cr_expect_eq(graphserve(args, &out), 1, "%s", out);
    cr_expect(out && strstr(out, "the checkpoint's vocabulary is not this run's: --vocab's llama "
                                 "tokenizer, 512 tokens"),
              "%s", out);
    free(out);
    snprintf(args, sizeof(args),
             "train -i %s -o %s --vocab %s --steps 6 --n-ctx 64 --resume %s " SMALL, in,
             tmp_path("v-resumed.gguf"), spm, tmp_path("v.ck"));
    cr_assert_eq(graphserve(args, &out), 0, "%s", out);
    free(out);
    cr_expect(same_file(tmp_path("v-straight.gguf"), tmp_path("v-resumed.gguf")),
              "the resumed --vocab run's model differs from the uninterrupted run's");
}

/* The training graph prints like any other: the backward nodes and each gradient's root. */
Test(train_cli, print_graph)
{
    char *out = NULL;
    cr_assert_eq(graphserve("train --print-graph text --n-layer 1 --batch 2 --block 4", &out), 0,
                 "%s", out);
    cr_expect(strstr(out, "= cross_entropy(") && strstr(out, "= attn_causal_back_k(") &&
                  strstr(out, "grad.token_embd.weight") && strstr(out, "= out("),
              "%s", out);
    free(out);
    cr_expect_eq(graphserve("train --print-graph svg", &out), 1, "%s", out);
    cr_expect(strstr(out, "not text, dot or json"), "%s", out);
    free(out);
}

/* ---- --vocab: another GGUF's tokenizer ------------------------------------------ */

/* A text that exercises a tokenizer: spaces in runs, a newline, digits, an accent,
 * and "<s>", which is text here, not the control token. */
static const char tok_text[] =
    "In the  beginning God created\nthe heaven: 1234 caf\xc3\xa9 <s> don't";

static char *tokenize_json(const char *model, const char *flags)
{
    char args[8192], *out = NULL;
    const char *text = write_file("tok.txt", tok_text, sizeof(tok_text) - 1);
    snprintf(args, sizeof(args), "tokenize -m %s %s --json --stdin < %s", model, flags, text);
    cr_assert_eq(graphserve(args, &out), 0, "%s", out);
    return out;
}

/* The "ids" of `tokenize --json` output. */
static json_t *json_ids(const char *out)
{
    json_t *j = json_loads(out, 0, NULL);
    cr_assert(j && json_is_array(json_object_get(j, "ids")), "%s", out);
    json_t *ids = json_incref(json_object_get(j, "ids"));
    json_decref(j);
    return ids;
}

/*
 * The model's first position holds in training what a served prompt puts
 * there: train reports the tokens each window starts with, and they are what
 * the written file's tokenizer adds before a text (the ids with special
 * tokens are those ids, then the ids without).
 */
static void check_served_prefix(const char *model, const char *train_out)
{
    const char *said = strstr(train_out, "every window starts with [");
    json_t *prefix =
        said ? json_loads(said + strlen("every window starts with "), JSON_DISABLE_EOF_CHECK, NULL)
             : NULL;
    cr_assert(json_is_array(prefix), "train does not say what a window starts with: %s", train_out);
    char *a = tokenize_json(model, ""), *b = tokenize_json(model, "--no-bos");
    json_t *with = json_ids(a), *plain = json_ids(b);
    const size_t n = json_array_size(prefix);
    cr_expect(n >= 1, "the tokenizer adds BOS, yet windows start with nothing");
    cr_assert_eq(json_array_size(with), n + json_array_size(plain), "%s against %s", a, b);
    for (size_t i = 0; i < json_array_size(with); i++) {
        json_t *want = i < n ? json_array_get(prefix, i) : json_array_get(plain, i - n);
        cr_expect(json_equal(json_array_get(with, i), want), "id %zu: %s against %s", i, a, b);
    }
    json_decref(prefix);
    json_decref(with);
    json_decref(plain);
    free(a);
    free(b);
}

/* Trains a few steps with the tokenizer of shared_rel; the model starts at ln(vocab
 * size), tokenizes as the source file does, passes the daemon's known-answer check
 * (cpu against ref) and serves a completion. */
static void check_vocab(const char *shared_rel, int n_vocab, const char *name)
{
    char vocab[4200]; /* gs_test_shared_path's buffer is reused by the next call */
    snprintf(vocab, sizeof(vocab), "%s", gs_test_shared_path(shared_rel));
    const char *in = corpus();
    const char *model = tmp_path(name);
    char args[8192], *out = NULL;
    snprintf(args, sizeof(args), "train -i %s -o %s --vocab %s --steps 3 --n-ctx 64 " SMALL, in,
             model, vocab);
    cr_assert_eq(graphserve(args, &out), 0, "%s", out);
    const char *first = strstr(out, "first loss ");
    double loss0 = 0;
    cr_assert(first && sscanf(first, "first loss %lf", &loss0) == 1, "%s", out);
    cr_expect(fabs(loss0 - log(n_vocab)) <= 0.05, "%s: first loss %.4f, ln %d = %.4f", vocab, loss0,
              n_vocab, log(n_vocab));
    check_served_prefix(model, out);
    free(out);

    char *want = tokenize_json(vocab, ""), *got = tokenize_json(model, "");
    cr_expect_str_eq(got, want, "%s: the trained model tokenizes differently", vocab);
    free(want);
    free(got);

    struct e2e_daemon d;
    char extra[4400];
    snprintf(extra, sizeof(extra), "-m '%s' --threads 1", model);
    e2e_start(&d, extra);
    e2e_await_log(&d, "event=known_answer passed=true", 1);
    struct e2e_resp r;
    e2e_http(&d, "POST", "/v1/completions",
             "{\"prompt\": \"the king said\", \"max_tokens\": 6, \"temperature\": 0}", NULL, &r);
    cr_expect_eq(r.status, 200, "%s: %s", vocab, r.body);
    json_t *choice = r.json ? json_array_get(json_object_get(r.json, "choices"), 0) : NULL;
    const char *text = json_string_value(json_object_get(choice, "text"));
    cr_expect(text, "%s: no completion text in %s", vocab, r.body);
    json_t *usage = r.json ? json_object_get(r.json, "usage") : NULL;
    cr_expect_eq(json_integer_value(json_object_get(usage, "completion_tokens")), 6, "%s: %s",
                 vocab, r.body);
    /* the served prompt is tokenized as `tokenize` does, BOS included */
    char tok_args[8192], *tok_out = NULL;
    snprintf(tok_args, sizeof(tok_args), "tokenize -m %s --json 'the king said'", model);
    cr_assert_eq(graphserve(tok_args, &tok_out), 0, "%s", tok_out);
    json_t *served = json_ids(tok_out);
    cr_expect_eq(json_integer_value(json_object_get(usage, "prompt_tokens")),
                 (json_int_t)json_array_size(served), "%s: %s against %s", vocab, r.body, tok_out);
    json_decref(served);
    free(tok_out);
    e2e_resp_free(&r);
    cr_expect_eq(e2e_stop(&d), 0);
}

Test(train_cli, vocab_spm, .timeout = 600)
{
    check_vocab("models/stories260K.gguf", 512, "spm.gguf");
}

Test(train_cli, vocab_bpe, .timeout = 600)
{
    check_vocab("models/vocab/ggml-vocab-deepseek-coder.gguf", 32256, "bpe.gguf");
}

/* A GGUF with no tokenizer, a corpus long enough in bytes but not in the
 * vocabulary's tokens, and a tokenizer that appends a token to every prompt
 * are refused by name. */
Test(train_cli, vocab_refusals)
{
    /* GGUF v3, no tensors, one key: general.architecture = "llama" */
    static const char key[] = "general.architecture", val[] = "llama";
    unsigned char gguf[128];
    size_t n = 0;
    const uint32_t version = 3, str_type = 8;
    const uint64_t n_tensors = 0, n_kv = 1, key_len = sizeof(key) - 1, val_len = sizeof(val) - 1;
    memcpy(gguf + n, "GGUF", 4), n += 4;
    memcpy(gguf + n, &version, 4), n += 4;
    memcpy(gguf + n, &n_tensors, 8), n += 8;
    memcpy(gguf + n, &n_kv, 8), n += 8;
    memcpy(gguf + n, &key_len, 8), n += 8;
    memcpy(gguf + n, key, key_len), n += key_len;
    memcpy(gguf + n, &str_type, 4), n += 4;
    memcpy(gguf + n, &val_len, 8), n += 8;
    memcpy(gguf + n, val, val_len), n += val_len;
    const char *bare = write_file("no-tokenizer.gguf", gguf, n);
    const char *in = corpus();
    char args[8192], *out = NULL;
    snprintf(args, sizeof(args), "train -i %s -o %s --vocab %s --steps 2 " SMALL, in,
             tmp_path("bad.gguf"), bare);
    cr_expect_eq(graphserve(args, &out), 1, "%s", out);
    cr_expect(out && strstr(out, "has no tokenizer"), "%s", out);
    free(out);

    /* 200 bytes of common words: enough for a byte-level batch of 4 x 17 tokens
     * (and a held-out window), about 45 tokens in a BPE vocabulary */
    char text[256] = "";
    while (strlen(text) < 200)
        strcat(text, "the king said ");
    const char *small = write_file("small.txt", text, strlen(text));
    snprintf(args, sizeof(args), "train -i %s -o %s --steps 2 " SMALL, small,
             tmp_path("bytes.gguf"));
    cr_expect_eq(graphserve(args, &out), 0, "byte level: %s", out);
    free(out);
    char bpe[4200];
    snprintf(bpe, sizeof(bpe), "%s",
             gs_test_shared_path("models/vocab/ggml-vocab-deepseek-coder.gguf"));
    snprintf(args, sizeof(args), "train -i %s -o %s --vocab %s --steps 2 " SMALL, small,
             tmp_path("bad.gguf"), bpe);
    cr_expect_eq(graphserve(args, &out), 1, "%s", out);
    cr_expect(out && strstr(out, "training tokens by --vocab's tokenizer, fewer than one batch"),
              "%s", out);
    free(out);

    /* A tokenizer that ends every prompt with a token of its own (WordPiece's
     * [SEP], id 102) is refused by what it adds. */
    char wpm[4200];
    snprintf(wpm, sizeof(wpm), "%s", gs_test_shared_path("models/vocab/ggml-vocab-bert-bge.gguf"));
    snprintf(args, sizeof(args), "train -i %s -o %s --vocab %s --steps 2 " SMALL, in,
             tmp_path("bad.gguf"), wpm);
    cr_expect_eq(graphserve(args, &out), 1, "%s", out);
    cr_expect(out && strstr(out, "adds 1 token(s) after a prompt's text (first id 102"), "%s", out);
    free(out);
}

/* ---- --type: quantized output --------------------------------------------------- */

static enum gs_type tensor_type(const char *path, const char *name)
{
    struct gs_gguf *g = NULL;
    struct gs_err err = {0};
    cr_assert_eq(gs_gguf_open(path, &g, &err), GS_OK, "%s", err.msg);
    const struct gs_gguf_tensor *t = gs_gguf_find_tensor(g, name);
    cr_assert(t, "%s: no %s", path, name);
    const enum gs_type type = (enum gs_type)t->type;
    gs_gguf_close(g);
    return type;
}

/*
 * The same run written as F32 and as q8_0: the q8_0 file holds q8_0 matrices,
 * passes `graphserve validate` (cpu against ref on a golden's tokens), and its
 * logits on those tokens agree with the F32 file's within the thresholds the
 * q8_0 goldens are held to (engine/validate's defaults: Pearson >= 0.999 on every
 * row, top-1 on every row with a margin >= 0.5 and on >= 95%, mean KL <= 0.01).
 * The checkpoint stays F32: resuming it at its last step writes the F32 file.
 */
Test(train_cli, quantized_output, .timeout = 600)
{
    const char *in = corpus();
    char vocab[4200], golden[4200], f32[4200], q8[4200], again[4200], ck[4200];
    snprintf(vocab, sizeof(vocab), "%s", gs_test_shared_path("models/stories260K.gguf"));
    snprintf(golden, sizeof(golden), "%s",
             gs_test_shared_path("golden/completions/stories260K-F16__once-upon-a-time.json"));
    snprintf(f32, sizeof(f32), "%s", tmp_path("f32.gguf"));
    snprintf(q8, sizeof(q8), "%s", tmp_path("q8.gguf"));
    snprintf(again, sizeof(again), "%s", tmp_path("again.gguf"));
    snprintf(ck, sizeof(ck), "%s", tmp_path("q8.ck"));
#define QSHAPE                                                                                     \
    "--n-embd 64 --n-layer 2 --n-head 4 --block 32 --n-ctx 128 --batch 4 "                         \
    "--eval-every 10 --eval-batches 1 --steps 10 --seed 5"
    char args[16384], *out = NULL;
    snprintf(args, sizeof(args), "train -i %s -o %s --vocab %s " QSHAPE, in, f32, vocab);
    cr_assert_eq(graphserve(args, &out), 0, "%s", out);
    free(out);
    snprintf(args, sizeof(args), "train -i %s -o %s --vocab %s --type q8_0 --checkpoint %s " QSHAPE,
             in, q8, vocab, ck);
    cr_assert_eq(graphserve(args, &out), 0, "%s", out);
    free(out);
    cr_expect_eq(tensor_type(f32, "blk.0.attn_q.weight"), GS_TYPE_F32);
    cr_expect_eq(tensor_type(q8, "blk.0.attn_q.weight"), GS_TYPE_Q8_0);
    cr_expect_eq(tensor_type(q8, "output.weight"), GS_TYPE_Q8_0);
    cr_expect_eq(tensor_type(q8, "output_norm.weight"), GS_TYPE_F32);

    snprintf(args, sizeof(args), "train -i %s -o %s --vocab %s --resume %s " QSHAPE, in, again,
             vocab, ck);
    cr_assert_eq(graphserve(args, &out), 0, "%s", out);
    free(out);
    cr_expect(same_file(f32, again), "the q8_0 run's checkpoint does not hold the F32 model");

    snprintf(args, sizeof(args), "validate -m %s --golden %s --backend cpu --against ref", q8,
             golden);
    cr_expect_eq(graphserve(args, &out), 0, "%s", out);
    cr_expect(out && strstr(out, "PASS"), "%s", out);
    free(out);

    json_t *j = llama_load_golden(golden);
    int32_t *prompt, *completion;
    const uint32_t n_prompt = llama_json_ids(json_object_get(j, "prompt_tokens"), &prompt);
    const uint32_t n_gen = llama_json_ids(json_object_get(j, "completion_tokens"), &completion);
    const uint32_t n = GS_MIN(n_prompt + n_gen, 128u);
    int32_t *tokens = calloc(n, sizeof(*tokens));
    for (uint32_t i = 0; i < n; i++)
        tokens[i] = i < n_prompt ? prompt[i] : completion[i - n_prompt];
    struct llama_rig a, b;
    llama_rig_open(&a, f32, GS_TYPE_F32, true, n);
    llama_rig_open(&b, q8, GS_TYPE_F32, true, n);
    const uint32_t n_vocab = a.model->hp.n_vocab;
    const float *la = llama_rig_step(&a, tokens, n, true),
                *lb = llama_rig_step(&b, tokens, n, true);
    struct gs_val_report *rep = NULL;
    struct gs_err err = {0};
    cr_assert_eq(gs_val_compare(lb, la, NULL, (int32_t)n, (int32_t)n_vocab, NULL, &rep, &err),
                 GS_OK, "%s", err.msg);
    cr_log_info("q8_0 against F32 on %u tokens: min Pearson %.6f, top-1 %.3f, mean KL %.2e", n,
                rep->min_pearson, rep->top1_rate, rep->mean_kl);
    cr_expect(rep->pass, "q8_0 against F32: %s", rep->reason);
    /* and the comparison can fail: the F32 logits against another position's */
    cr_expect(rep->min_pearson < 1.0, "q8_0 logits equal F32's exactly: not quantized?");
    gs_val_report_free(rep);
    llama_rig_close(&a);
    llama_rig_close(&b);
    free(tokens);
    free(prompt);
    free(completion);
    json_decref(j);
#undef QSHAPE
}
