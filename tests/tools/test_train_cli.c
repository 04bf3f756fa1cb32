/*
 * tests/tools/test_train_cli.c - `graphserve train` as a child process: the
 * bad inputs it must refuse by name, a short run whose model `graphserve run`
 * loads and whose bytes do not depend on the thread count, and a resumed run
 * equal bit for bit to an uninterrupted one.
 */
#define _GNU_SOURCE /* asprintf */
#include "tests/common/testutil.h"

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
