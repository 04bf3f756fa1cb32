/*
 * tests/tools/test_quantize.c - `graphserve quantize`, run as a user runs it:
 * the shared F32 models quantized here hold, tensor for tensor, the types and
 * the bytes of the same models quantized by llama.cpp's llama-quantize
 * (../shared/models: stories260K in q4_0 .. q8_0, with its f16 fallback for
 * the 172-wide ffn_down and the q8_0 output matrix; tiny-k in the K-quants,
 * written with every matrix in one type, as --pure does). The metadata comes
 * across, the file loads and answers, and bad arguments are refused.
 */
#define _GNU_SOURCE
#include "engine/gguf.h"
#include "tests/common/testutil.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int quantize(char **out, const char *args)
{
    char *cmd;
    cr_assert(asprintf(&cmd, "%s quantize %s", gs_test_build_path("server/graphserve"), args) > 0);
    int rc = gs_test_run(cmd, 1, out);
    free(cmd);
    return rc;
}

/* Every tensor of got has want's type, shape and bytes; every key of want is in got. */
static void expect_same_tensors(const char *got_path, const char *want_path)
{
    struct gs_gguf *got, *want;
    struct gs_err err = {0};
    cr_assert_eq(gs_gguf_open(got_path, &got, &err), GS_OK, "%s", err.msg);
    cr_assert_eq(gs_gguf_open(want_path, &want, &err), GS_OK, "%s", err.msg);
    cr_assert_eq(gs_gguf_n_tensors(got), gs_gguf_n_tensors(want));
    for (uint64_t i = 0; i < gs_gguf_n_tensors(want); i++) {
        const struct gs_gguf_tensor *w = gs_gguf_tensor_at(want, i);
        char name[256];
        snprintf(name, sizeof(name), "%.*s", (int)w->name.len, w->name.data);
        const struct gs_gguf_tensor *g = gs_gguf_find_tensor(got, name);
        cr_assert(g, "%s: no tensor %s", got_path, name);
        cr_expect_eq(g->type, w->type, "%s: %s is %s, llama.cpp wrote %s", want_path, name,
                     gs_type_name(g->type), gs_type_name(w->type));
        cr_assert_eq(g->nbytes, w->nbytes, "%s: %s", want_path, name);
        cr_expect(!memcmp(g->data, w->data, w->nbytes), "%s: the bytes of %s differ", want_path,
                  name);
    }
    for (uint64_t i = 0; i < gs_gguf_n_kv(want); i++) {
        const struct gs_gguf_kv *kv = gs_gguf_kv_at(want, i);
        char key[256];
        snprintf(key, sizeof(key), "%.*s", (int)kv->key.len, kv->key.data);
        const struct gs_gguf_kv *k2 = gs_gguf_find_kv(got, key);
        cr_expect(k2, "%s: key %s was not copied", got_path, key);
        if (k2 && kv->type != GS_GGUF_ARRAY && kv->type != GS_GGUF_STRING &&
            strcmp(key, "general.file_type"))
            cr_expect(!memcmp(&k2->v, &kv->v, sizeof(kv->v)), "%s: key %s differs", got_path, key);
        if (k2 && kv->type == GS_GGUF_ARRAY)
            cr_expect_eq(k2->v.arr.n, kv->v.arr.n, "%s: array %s", got_path, key);
    }
    uint32_t ft_got = 0, ft_want = 1;
    cr_expect_eq(gs_gguf_get_u32(got, "general.file_type", &ft_got, &err), GS_OK);
    cr_expect_eq(gs_gguf_get_u32(want, "general.file_type", &ft_want, &err), GS_OK);
    cr_expect_eq(ft_got, ft_want, "%s: file type %u, llama.cpp's %u", got_path, ft_got, ft_want);
    gs_gguf_close(got);
    gs_gguf_close(want);
}

static void check(const char *in, const char *type, const char *extra, const char *want)
{
    char out_path[600], args[2000];
    snprintf(out_path, sizeof(out_path), "%s/q-%s.gguf", gs_test_tmpdir(), type);
    snprintf(args, sizeof(args), "'%s' '%s' %s %s", gs_test_shared_path(in), out_path, type,
             extra);
    char *out;
    int rc = quantize(&out, args);
    cr_assert_eq(rc, 0, "quantize %s: %s", args, out);
    free(out);
    expect_same_tensors(out_path, gs_test_shared_path(want));
}

Test(quantize, legacy_types_match_llama_quantize_byte_for_byte)
{
    static const char *const types[][2] = {
        {"q4_0", "models/stories260K-Q4_0.gguf"}, {"q4_1", "models/stories260K-Q4_1.gguf"},
        {"q5_0", "models/stories260K-Q5_0.gguf"}, {"q5_1", "models/stories260K-Q5_1.gguf"},
        {"q8_0", "models/stories260K-Q8_0.gguf"}, {"f16", "models/stories260K-F16.gguf"},
    };
    for (size_t i = 0; i < GS_ARRAY_LEN(types); i++)
        check("models/stories260K.gguf", types[i][0], "", types[i][1]);
}

Test(quantize, k_quants_match_llama_quantize_byte_for_byte)
{
    static const char *const types[][2] = {
        {"q4_K", "models/tiny-k-Q4_K.gguf"},
        {"q5_K", "models/tiny-k-Q5_K.gguf"},
        {"q6_K", "models/tiny-k-Q6_K.gguf"},
        {"q8_0", "models/tiny-k-Q8_0.gguf"},
    };
    for (size_t i = 0; i < GS_ARRAY_LEN(types); i++)
        check("models/tiny-k-F32.gguf", types[i][0], "--pure", types[i][1]);
}

/* Without --pure the output matrix of a K-quant file is q6_K, as llama.cpp writes it. */
Test(quantize, output_matrix_takes_q6_k_unless_pure)
{
    char out_path[600], args[2000];
    snprintf(out_path, sizeof(out_path), "%s/q-mixed.gguf", gs_test_tmpdir());
    snprintf(args, sizeof(args), "'%s' '%s' q4_K", gs_test_shared_path("models/tiny-k-F32.gguf"),
             out_path);
    char *out;
    cr_assert_eq(quantize(&out, args), 0, "%s", out);
    free(out);
    struct gs_gguf *g;
    struct gs_err err = {0};
    cr_assert_eq(gs_gguf_open(out_path, &g, &err), GS_OK, "%s", err.msg);
    cr_expect_eq(gs_gguf_find_tensor(g, "output.weight")->type, GS_TYPE_Q6_K);
    cr_expect_eq(gs_gguf_find_tensor(g, "blk.0.attn_q.weight")->type, GS_TYPE_Q4_K);
    cr_expect_eq(gs_gguf_find_tensor(g, "output_norm.weight")->type, GS_TYPE_F32);
    gs_gguf_close(g);
    /* and the file answers */
    char *cmd;
    cr_assert(asprintf(&cmd, "%s run -m '%s' -p 'Once upon a time' -n 4",
                       gs_test_build_path("server/graphserve"), out_path) > 0);
    int rc = gs_test_run(cmd, 1, &out);
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
    free(cmd);
}

Test(quantize, bad_arguments_are_refused)
{
    char *out, args[2000];
    cr_expect_eq(quantize(&out, "only-one-arg"), 2, "%s", out);
    free(out);
    snprintf(args, sizeof(args), "'%s' /tmp/x.gguf q9_9",
             gs_test_shared_path("models/stories260K.gguf"));
    cr_expect_eq(quantize(&out, args), 2, "%s", out);
    cr_expect(strstr(out, "q9_9"), "%s", out);
    free(out);
    /* requantizing a quantized file is refused, naming a tensor */
    char out_path[600];
    snprintf(out_path, sizeof(out_path), "%s/q-re.gguf", gs_test_tmpdir());
    snprintf(args, sizeof(args), "'%s' '%s' q4_0",
             gs_test_shared_path("models/stories260K-Q8_0.gguf"), out_path);
    cr_expect_eq(quantize(&out, args), 1, "%s", out);
    cr_expect(strstr(out, "tensor '") && strstr(out, "q8_0"), "%s", out);
    free(out);
    snprintf(args, sizeof(args), "/no/such/file.gguf '%s' q4_0", out_path);
    cr_expect_eq(quantize(&out, args), 1, "%s", out);
    cr_expect(strstr(out, "/no/such/file.gguf"), "%s", out);
    free(out);
}

/* Gemma 3n: the AltUp, LAuReL and per_layer_model_proj tensors stay as they were (llama.cpp
 * leaves them so), the rest of the matrices become q8_0, and the file loads and answers. */
Test(quantize, gemma3n_keeps_its_small_tensors)
{
    char out_path[600], args[2000];
    snprintf(out_path, sizeof(out_path), "%s/q-g3n.gguf", gs_test_tmpdir());
    snprintf(args, sizeof(args), "'%s' '%s' q8_0",
             gs_test_shared_path("models/arch/gemma3n-tiny-F32.gguf"), out_path);
    char *out;
    cr_assert_eq(quantize(&out, args), 0, "%s", out);
    free(out);
    struct gs_gguf *g;
    struct gs_err err = {0};
    cr_assert_eq(gs_gguf_open(out_path, &g, &err), GS_OK, "%s", err.msg);
    uint64_t n_q8 = 0, n_f32 = 0;
    for (uint64_t i = 0; i < gs_gguf_n_tensors(g); i++) {
        const struct gs_gguf_tensor *t = gs_gguf_tensor_at(g, i);
        char name[128];
        snprintf(name, sizeof(name), "%.*s", (int)t->name.len, t->name.data);
        const bool keep = strstr(name, "altup") || strstr(name, "laurel") ||
                          strstr(name, "per_layer_model_proj") || t->n_dims == 1 ||
                          strstr(name, "_norm.weight");
        cr_expect_eq(t->type, keep ? GS_TYPE_F32 : GS_TYPE_Q8_0, "%s is %s", name,
                     gs_type_name(t->type));
        n_q8 += t->type == GS_TYPE_Q8_0;
        n_f32 += t->type == GS_TYPE_F32;
    }
    cr_expect_gt(n_q8, 200);
    cr_expect_gt(n_f32, 200);
    gs_gguf_close(g);
    char *cmd;
    cr_assert(asprintf(&cmd, "%s run -m '%s' -p 'Once upon a time' -n 4 --kv-type f32",
                       gs_test_build_path("server/graphserve"), out_path) > 0);
    int rc = gs_test_run(cmd, 1, &out);
    cr_expect_eq(rc, 0, "%s", out);
    free(out);
    free(cmd);
}
