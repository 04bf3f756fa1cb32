/*
 * tests/engine/test_family_meta.c - the qwen2, phi3 and gemma builders on
 * small files crafted with the GGUF writer: a good file builds with its fused
 * tensors split into views of the file's bytes and its Gemma features in the
 * graph; a fused tensor of the wrong width, a missing bias or post-norm, or a
 * hostile value of a Gemma key (soft-cap negative or NaN, a window of 0 or
 * below) is refused with a message naming the tensor or key.
 */
#include "craft.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "tests/common/testutil.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_EMBD = 8, N_HEAD = 2, N_HEAD_KV = 1, HEAD_DIM = 4, N_FF = 16, N_VOCAB = 10 };

/* What a crafted file holds; each test breaks one thing. */
struct craft {
    const char *arch;       /* "qwen2", "phi3", "gemma2" or "gemma3" */
    const char *short_name; /* tensor written one row short */
    const char *omit;       /* tensor left out */
    /* one more metadata value, <arch>.<meta_key>: an f32, or an i32 when meta_i32 */
    const char *meta_key;
    float meta_f32;
    bool meta_i32;
    int32_t meta_i32_value;
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
        if (c->meta_key && !strcmp(c->meta_key, u32s[i].suffix))
            continue; /* the test's value instead */
        snprintf(key, sizeof(key), "%s.%s", c->arch, u32s[i].suffix);
        cr_assert_eq(gs_gguf_w_u32(w, key, u32s[i].v), GS_OK);
    }
    snprintf(key, sizeof(key), "%s.attention.layer_norm_rms_epsilon", c->arch);
    cr_assert_eq(gs_gguf_w_f32(w, key, 1e-6f), GS_OK);
    if (c->meta_key) {
        snprintf(key, sizeof(key), "%s.%s", c->arch, c->meta_key);
        cr_assert_eq(c->meta_i32 ? gs_gguf_w_i32(w, key, c->meta_i32_value)
                                 : gs_gguf_w_f32(w, key, c->meta_f32),
                     GS_OK);
    }
    const bool phi3 = !strcmp(c->arch, "phi3"), qwen2 = !strcmp(c->arch, "qwen2");
    const bool gemma = !strncmp(c->arch, "gemma", 5), gemma3 = !strcmp(c->arch, "gemma3");
    /* Gemma 3 files have a window; without one every layer would be global. */
    if (gemma3 && !(c->meta_key && !strcmp(c->meta_key, "attention.sliding_window")))
        cr_assert_eq(gs_gguf_w_u32(w, "gemma3.attention.sliding_window", 4), GS_OK);
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
        if (qwen2) {
            add_tensor(w, c, "blk.0.attn_q.bias", n_q, 1);
            add_tensor(w, c, "blk.0.attn_k.bias", n_kv, 1);
            add_tensor(w, c, "blk.0.attn_v.bias", n_kv, 1);
        }
        add_tensor(w, c, "blk.0.ffn_gate.weight", N_EMBD, N_FF);
    }
    if (gemma3) {
        add_tensor(w, c, "blk.0.attn_q_norm.weight", HEAD_DIM, 1);
        add_tensor(w, c, "blk.0.attn_k_norm.weight", HEAD_DIM, 1);
    }
    if (gemma) {
        add_tensor(w, c, "blk.0.post_attention_norm.weight", N_EMBD, 1);
        add_tensor(w, c, "blk.0.post_ffw_norm.weight", N_EMBD, 1);
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
    const struct craft c = {.arch = "phi3", .short_name = NULL, .omit = NULL};
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
    struct craft c = {.arch = "phi3", .short_name = "blk.0.attn_qkv.weight", .omit = NULL};
    expect_refused(&c, "blk.0.attn_qkv.weight");
    c.short_name = "blk.0.ffn_up.weight";
    expect_refused(&c, "blk.0.ffn_up.weight");
}

Test(family_meta, qwen2_builds_with_biases)
{
    const struct craft c = {.arch = "qwen2", .short_name = NULL, .omit = NULL};
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
    struct craft c = {.arch = "qwen2", .short_name = NULL, .omit = "blk.0.attn_v.bias"};
    expect_refused(&c, "blk.0.attn_v.bias");
    c = (struct craft){.arch = "qwen2", .short_name = "blk.0.attn_q.weight", .omit = NULL};
    expect_refused(&c, "blk.0.attn_q.weight");
}

/* The first node of op `op`, or NULL. */
static const struct gs_node *first_op(const struct gs_graph *g, enum gs_op op)
{
    for (uint32_t i = 0; i < g->n_nodes; i++)
        if (g->nodes[i].op == op)
            return &g->nodes[i];
    return NULL;
}

/* Without the keys a Gemma 2 file takes llama.cpp's defaults: attention capped at 50,
 * logits at 30, a window of 4096 on the even layers; embeddings scaled by sqrt(n_embd). */
Test(family_meta, gemma2_builds_with_its_defaults)
{
    const struct craft c = {.arch = "gemma2"};
    struct gs_model *m = NULL;
    struct gs_gguf *f = NULL;
    struct gs_err err = {0};
    cr_assert_eq(load(&c, &m, &f, &err), GS_OK, "%s", err.msg);
    const struct gs_node *attn = first_op(m->graph, GS_OP_ATTN);
    cr_assert(attn);
    cr_expect_float_eq(attn->p.attn.softcap, 50.0f, 0);
    cr_expect_eq(attn->p.attn.window, 4096, "layer 0 slides");
    cr_expect_float_eq(attn->p.attn.scale, 1.0f / 2.0f, 1e-7, "1/sqrt(head_dim 4)");
    const struct gs_node *cap = first_op(m->graph, GS_OP_SOFTCAP), *sc = first_op(m->graph, GS_OP_SCALE);
    cr_assert(cap && sc);
    cr_expect_float_eq(cap->p.softcap, 30.0f, 0);
    cr_expect_float_eq(sc->p.scale, sqrtf((float)N_EMBD), 1e-6);
    cr_expect(first_op(m->graph, GS_OP_GELU), "the gate is GELU");
    cr_expect(weight_named(m->graph, "blk.0.post_ffw_norm.weight"));
    gs_model_free(m);
    gs_gguf_close(f);
}

/* Gemma 3 caps nothing unless the file says so, and its one layer (0 % 6 < 5) slides
 * with a window taken from the file. */
Test(family_meta, gemma3_builds_without_caps)
{
    const struct craft c = {.arch = "gemma3", .meta_key = "attention.sliding_window",
                            .meta_i32 = true, .meta_i32_value = 5};
    struct gs_model *m = NULL;
    struct gs_gguf *f = NULL;
    struct gs_err err = {0};
    cr_assert_eq(load(&c, &m, &f, &err), GS_OK, "%s", err.msg);
    const struct gs_node *attn = first_op(m->graph, GS_OP_ATTN);
    cr_assert(attn);
    cr_expect_float_eq(attn->p.attn.softcap, 0.0f, 0);
    cr_expect_eq(attn->p.attn.window, 5);
    cr_expect_null(first_op(m->graph, GS_OP_SOFTCAP));
    cr_expect_float_eq(first_op(m->graph, GS_OP_ROPE)->p.rope.freq_base, 10000.0f, 0,
                       "sliding layers' rope base");
    cr_expect(first_op(m->graph, GS_OP_RMS_NORM_HEADS), "q/k norms");
    gs_model_free(m);
    gs_gguf_close(f);
}

Test(family_meta, gemma_hostile_keys_refused)
{
    const struct {
        const char *arch, *key;
        float f;
        bool i32;
        int32_t i;
    } bad[] = {
        {"gemma2", "attn_logit_softcapping", -50.0f, false, 0},
        {"gemma2", "attn_logit_softcapping", NAN, false, 0},
        {"gemma2", "final_logit_softcapping", NAN, false, 0},
        {"gemma2", "final_logit_softcapping", 0.0f, false, 0},
        {"gemma3", "final_logit_softcapping", -30.0f, false, 0},
        {"gemma2", "attention.sliding_window", 0, true, 0},
        {"gemma2", "attention.sliding_window", 0, true, -8},
        {"gemma3", "attention.sliding_window", 0, true, 0},
        {"gemma3", "rope.freq_base_swa", NAN, false, 0},
        {"gemma3", "rope.freq_base_swa", -1.0f, false, 0},
    };
    for (size_t i = 0; i < GS_ARRAY_LEN(bad); i++) {
        const struct craft c = {.arch = bad[i].arch, .meta_key = bad[i].key, .meta_f32 = bad[i].f,
                                .meta_i32 = bad[i].i32, .meta_i32_value = bad[i].i};
        char key[128];
        snprintf(key, sizeof(key), "%s.%s", bad[i].arch, bad[i].key);
        expect_refused(&c, key);
    }
    /* Heads that do not divide the width (and no key_length to say the head size). */
    const struct craft heads = {.arch = "gemma2", .meta_key = "attention.head_count",
                                .meta_i32 = true, .meta_i32_value = 3};
    expect_refused(&heads, "gemma2.attention.head_count");
}

Test(family_meta, gemma_missing_post_norm_refused)
{
    struct craft c = {.arch = "gemma2", .omit = "blk.0.post_ffw_norm.weight"};
    expect_refused(&c, "blk.0.post_ffw_norm.weight");
    c = (struct craft){.arch = "gemma3", .omit = "blk.0.attn_k_norm.weight"};
    expect_refused(&c, "blk.0.attn_k_norm.weight");
    c = (struct craft){.arch = "gemma3", .omit = "blk.0.post_attention_norm.weight"};
    expect_refused(&c, "blk.0.post_attention_norm.weight");
}

/* ---- gemma3n: the real tiny file with one key changed ------------------------------------- */

/* How to write the replaced key. */
struct g3n_key {
    const char *key;
    enum { K_U32, K_F32_ARR, K_I32_ARR, K_BOOL_ARR } kind;
    uint32_t u32;
    uint64_t n; /* array length */
};

/* The shared gemma3n-tiny file with key k replaced (or, with n_arr 0 for an array, written
 * with n values); returns the path. */
static const char *gemma3n_with(const struct g3n_key *k)
{
    static char path[1024];
    static int seq;
    struct gs_err err = {0};
    struct gs_gguf *src;
    cr_assert_eq(gs_gguf_open(gs_test_shared_path("models/arch/gemma3n-tiny-F32.gguf"), &src, &err),
                 GS_OK, "%s", err.msg);
    struct gs_gguf_writer *w;
    cr_assert_eq(gs_gguf_writer_new(NULL, &w, &err), GS_OK);
    for (uint64_t i = 0; i < gs_gguf_n_kv(src); i++) {
        const struct gs_gguf_kv *kv = gs_gguf_kv_at(src, i);
        if (!gs_gguf_str_eq(kv->key, k->key))
            cr_assert_eq(gs_gguf_w_copy_kv(w, kv), GS_OK);
    }
    float f[64];
    int32_t iv[64];
    uint8_t b[64];
    cr_assert(k->n <= 64);
    for (uint64_t i = 0; i < k->n; i++) {
        f[i] = 1.5f;
        iv[i] = 256;
        b[i] = i % 5 != 4;
    }
    switch (k->kind) {
    case K_U32:
        cr_assert_eq(gs_gguf_w_u32(w, k->key, k->u32), GS_OK);
        break;
    case K_F32_ARR:
        cr_assert_eq(gs_gguf_w_arr(w, k->key, GS_GGUF_F32, f, k->n), GS_OK);
        break;
    case K_I32_ARR:
        cr_assert_eq(gs_gguf_w_arr(w, k->key, GS_GGUF_I32, iv, k->n), GS_OK);
        break;
    case K_BOOL_ARR:
        cr_assert_eq(gs_gguf_w_arr(w, k->key, GS_GGUF_BOOL, b, k->n), GS_OK);
        break;
    }
    for (uint64_t i = 0; i < gs_gguf_n_tensors(src); i++) {
        const struct gs_gguf_tensor *t = gs_gguf_tensor_at(src, i);
        char name[128];
        snprintf(name, sizeof(name), "%.*s", (int)t->name.len, t->name.data);
        struct gs_gguf_w_tensor wt = {.name = name, .type = (int32_t)t->type, .n_dims = t->n_dims,
                                      .data = t->data, .nbytes = t->nbytes};
        memcpy(wt.ne, t->ne, sizeof(wt.ne));
        cr_assert_eq(gs_gguf_w_tensor(w, &wt), GS_OK);
    }
    snprintf(path, sizeof(path), "%s/gemma3n-%d.gguf", gs_test_tmpdir(), seq++);
    cr_assert_eq(gs_gguf_writer_to_file(w, path, &err), GS_OK, "%s", err.msg);
    gs_gguf_writer_free(w);
    gs_gguf_close(src);
    return path;
}

static void gemma3n_refused(const struct g3n_key *k, const char *needle)
{
    struct gs_err err = {0};
    struct gs_gguf *f;
    struct gs_model *m = NULL;
    cr_assert_eq(gs_gguf_open(gemma3n_with(k), &f, &err), GS_OK, "%s", err.msg);
    cr_expect_neq(gs_model_load(f, &m, &err), GS_OK, "%s: loaded", k->key);
    cr_expect_null(m);
    cr_expect(strstr(err.msg, needle), "message '%s' does not name '%s'", err.msg, needle);
    gs_gguf_close(f);
}

/* The copy with nothing changed loads: the helper is not what refuses the others. */
Test(family_meta, gemma3n_copy_loads_and_shares_its_kv_cache)
{
    const struct g3n_key same = {"gemma3n.altup.active_idx", K_U32, 0, 0};
    struct gs_err err = {0};
    struct gs_gguf *f;
    struct gs_model *m = NULL;
    cr_assert_eq(gs_gguf_open(gemma3n_with(&same), &f, &err), GS_OK, "%s", err.msg);
    cr_assert_eq(gs_model_load(f, &m, &err), GS_OK, "%s", err.msg);
    cr_expect_eq(m->hp.n_layer, 25);
    cr_expect_eq(gs_model_kv_layers(m), 20, "the last 5 layers share caches");
    uint32_t n_store = 0, n_attn = 0;
    for (uint32_t i = 0; i < m->graph->n_nodes; i++) {
        const struct gs_node *n = &m->graph->nodes[i];
        n_store += n->op == GS_OP_KV_STORE;
        if (n->op == GS_OP_ATTN && !strcmp(n->name, "kqv-24"))
            cr_expect_eq(n->p.attn.layer, 19, "global layer 24 reads layer 19's cache");
        if (n->op == GS_OP_ATTN && !strcmp(n->name, "kqv-23"))
            cr_expect_eq(n->p.attn.layer, 18, "sliding layer 23 reads layer 18's cache");
        n_attn += n->op == GS_OP_ATTN;
    }
    cr_expect_eq(n_store, 20);
    cr_expect_eq(n_attn, 25);
    gs_model_free(m);
    gs_gguf_close(f);
}

Test(family_meta, gemma3n_hostile_keys_refused)
{
    const struct {
        struct g3n_key k;
        const char *needle;
    } bad[] = {
        {{"gemma3n.altup.active_idx", K_U32, 4, 0}, "gemma3n.altup.active_idx"},
        {{"gemma3n.altup.num_inputs", K_U32, 9, 0}, "gemma3n.altup.num_inputs"},
        {{"gemma3n.attention.shared_kv_layers", K_U32, 25, 0}, "gemma3n.attention.shared_kv_layers"},
        {{"gemma3n.attention.shared_kv_layers", K_U32, 30, 0}, "gemma3n.attention.shared_kv_layers"},
        {{"gemma3n.embedding_length_per_layer_input", K_U32, 0, 0},
         "gemma3n.embedding_length_per_layer_input"},
        {{"gemma3n.feed_forward_length", K_I32_ARR, 0, 24}, "gemma3n.feed_forward_length"},
        {{"gemma3n.activation_sparsity_scale", K_F32_ARR, 0, 26},
         "gemma3n.activation_sparsity_scale"},
        {{"gemma3n.attention.sliding_window_pattern", K_BOOL_ARR, 0, 24},
         "gemma3n.attention.sliding_window_pattern"},
        {{"gemma3n.attention.sliding_window", K_U32, 0, 0}, "gemma3n.attention.sliding_window"},
    };
    for (size_t i = 0; i < GS_ARRAY_LEN(bad); i++)
        gemma3n_refused(&bad[i].k, bad[i].needle);
}
