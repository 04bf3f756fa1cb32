/*
 * tests/engine/test_family_meta.c - the qwen2 and phi3 builders on small
 * files crafted with the GGUF writer: a good file builds with its fused
 * tensors split into views of the file's bytes; a fused tensor of the wrong
 * width, or a missing bias, is refused with a message naming the tensor.
 */
#include "craft.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "tests/common/testutil.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_EMBD = 8, N_HEAD = 2, N_HEAD_KV = 1, HEAD_DIM = 4, N_FF = 16, N_VOCAB = 10 };

/* What a crafted file holds; each test breaks one thing. */
struct craft {
    const char *arch;       /* "qwen2" or "phi3" */
    const char *short_name; /* tensor written one row short */
    const char *omit;       /* tensor left out */
};

static void add_tensor(struct gs_gguf_writer *w, const struct craft *c, const char *name,
                       int64_t ne0, int64_t ne1)
{
    if (c->omit && !strcmp(c->omit, name))
        return;
    if (c->short_name && !strcmp(c->short_name, name))
        ne1 -= 1;
    craft_f32_tensor(w, name, ne0, ne1);
}

static const char *write_model(const struct craft *c)
{
    static char path[1024];
    static int seq;
    struct gs_err err = {0};
    struct gs_gguf_writer *w;
    cr_assert_eq(gs_gguf_writer_new(NULL, &w, &err), GS_OK, "%s", err.msg);
    cr_assert_eq(gs_gguf_w_str(w, "general.architecture", c->arch), GS_OK);
    static const struct {
        const char *suffix;
        uint32_t v;
    } u32s[] = {{"embedding_length", N_EMBD},     {"block_count", 1},
                {"attention.head_count", N_HEAD}, {"attention.head_count_kv", N_HEAD_KV},
                {"feed_forward_length", N_FF},    {"context_length", 64}};
    char key[128];
    for (size_t i = 0; i < GS_ARRAY_LEN(u32s); i++) {
        snprintf(key, sizeof(key), "%s.%s", c->arch, u32s[i].suffix);
        cr_assert_eq(gs_gguf_w_u32(w, key, u32s[i].v), GS_OK);
    }
    snprintf(key, sizeof(key), "%s.attention.layer_norm_rms_epsilon", c->arch);
    cr_assert_eq(gs_gguf_w_f32(w, key, 1e-6f), GS_OK);
    const bool phi3 = !strcmp(c->arch, "phi3");
    const int64_t n_q = N_HEAD * HEAD_DIM, n_kv = N_HEAD_KV * HEAD_DIM;
    add_tensor(w, c, "token_embd.weight", N_EMBD, N_VOCAB);
    add_tensor(w, c, "output_norm.weight", N_EMBD, 1);
    add_tensor(w, c, "blk.0.attn_norm.weight", N_EMBD, 1);
    if (phi3) {
        add_tensor(w, c, "blk.0.attn_qkv.weight", N_EMBD, n_q + 2 * n_kv);
    } else {
        add_tensor(w, c, "blk.0.attn_q.weight", N_EMBD, n_q);
        add_tensor(w, c, "blk.0.attn_k.weight", N_EMBD, n_kv);
        add_tensor(w, c, "blk.0.attn_v.weight", N_EMBD, n_kv);
        add_tensor(w, c, "blk.0.attn_q.bias", n_q, 1);
        add_tensor(w, c, "blk.0.attn_k.bias", n_kv, 1);
        add_tensor(w, c, "blk.0.attn_v.bias", n_kv, 1);
        add_tensor(w, c, "blk.0.ffn_gate.weight", N_EMBD, N_FF);
    }
    add_tensor(w, c, "blk.0.attn_output.weight", n_q, N_EMBD);
    add_tensor(w, c, "blk.0.ffn_norm.weight", N_EMBD, 1);
    add_tensor(w, c, "blk.0.ffn_up.weight", N_EMBD, phi3 ? 2 * N_FF : N_FF);
    add_tensor(w, c, "blk.0.ffn_down.weight", N_FF, N_EMBD);
    snprintf(path, sizeof(path), "%s/family-%d.gguf", gs_test_tmpdir(), seq++);
    cr_assert_eq(gs_gguf_writer_to_file(w, path, &err), GS_OK, "%s", err.msg);
    gs_gguf_writer_free(w);
    return path;
}

static enum gs_status load(const struct craft *c, struct gs_model **m, struct gs_gguf **f,
                           struct gs_err *err)
{
    cr_assert_eq(gs_gguf_open(write_model(c), f, err), GS_OK, "%s", err->msg);
    return gs_model_load(*f, m, err);
}

static void expect_refused(const struct craft *c, const char *needle)
{
    struct gs_model *m = NULL;
    struct gs_gguf *f = NULL;
    struct gs_err err = {0};
    cr_assert_neq(load(c, &m, &f, &err), GS_OK, "a model that should be refused loaded (%s)",
                  needle);
    cr_assert_null(m);
    cr_assert(strstr(err.msg, needle), "message '%s' does not name '%s'", err.msg, needle);
    gs_gguf_close(f);
}

/* The weight node named exactly `name`, or NULL. */
static const struct gs_node *weight_named(const struct gs_graph *g, const char *name)
{
    for (uint32_t i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == GS_OP_WEIGHT && !strcmp(g->nodes[i].name, name))
            return &g->nodes[i];
    return NULL;
}

Test(family_meta, phi3_fused_tensors_are_views_of_the_file)
{
    const struct craft c = {"phi3", NULL, NULL};
    struct gs_model *m = NULL;
    struct gs_gguf *f = NULL;
    struct gs_err err = {0};
    cr_assert_eq(load(&c, &m, &f, &err), GS_OK, "%s", err.msg);
    const struct gs_gguf_tensor *qkv = gs_gguf_find_tensor(f, "blk.0.attn_qkv.weight");
    const struct gs_gguf_tensor *up = gs_gguf_find_tensor(f, "blk.0.ffn_up.weight");
    const size_t row = N_EMBD * sizeof(float);
    const struct {
        const char *name;
        const void *data;
        int64_t rows;
    } want[] = {
        {"blk.0.attn_qkv.weight[0:8]", qkv->data, 8},
        {"blk.0.attn_qkv.weight[8:12]", (const char *)qkv->data + 8 * row, 4},
        {"blk.0.attn_qkv.weight[12:16]", (const char *)qkv->data + 12 * row, 4},
        {"blk.0.ffn_up.weight[0:16]", up->data, N_FF},
        {"blk.0.ffn_up.weight[16:32]", (const char *)up->data + N_FF * row, N_FF},
    };
    for (size_t i = 0; i < GS_ARRAY_LEN(want); i++) {
        const struct gs_node *n = weight_named(m->graph, want[i].name);
        cr_assert(n, "no weight node %s", want[i].name);
        cr_assert_eq(n->data, want[i].data, "%s does not point into the file", want[i].name);
        cr_assert_eq(n->ne[1], want[i].rows);
    }
    gs_model_free(m);
    gs_gguf_close(f);
}

Test(family_meta, phi3_fused_tensor_of_wrong_width_refused)
{
    struct craft c = {"phi3", "blk.0.attn_qkv.weight", NULL};
    expect_refused(&c, "blk.0.attn_qkv.weight");
    c.short_name = "blk.0.ffn_up.weight";
    expect_refused(&c, "blk.0.ffn_up.weight");
}

Test(family_meta, qwen2_builds_with_biases)
{
    const struct craft c = {"qwen2", NULL, NULL};
    struct gs_model *m = NULL;
    struct gs_gguf *f = NULL;
    struct gs_err err = {0};
    cr_assert_eq(load(&c, &m, &f, &err), GS_OK, "%s", err.msg);
    cr_assert(weight_named(m->graph, "blk.0.attn_k.bias"));
    cr_assert_eq(m->hp.rope_mode, GS_ROPE_NEOX);
    gs_model_free(m);
    gs_gguf_close(f);
}

Test(family_meta, qwen2_missing_or_short_bias_refused)
{
    struct craft c = {"qwen2", NULL, "blk.0.attn_v.bias"};
    expect_refused(&c, "blk.0.attn_v.bias");
    c = (struct craft){"qwen2", "blk.0.attn_q.weight", NULL};
    expect_refused(&c, "blk.0.attn_q.weight");
}
