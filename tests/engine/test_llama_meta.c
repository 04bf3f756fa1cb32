/*
 * tests/engine/test_llama_meta.c - the llama builder refuses missing or
 * inconsistent metadata and tensors with a message naming the problem, on
 * small files crafted with the GGUF writer; and the graph it builds has the
 * expected structure.
 */
#include "craft.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "tests/common/testutil.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a crafted file holds; each test breaks one thing. */
struct craft {
    const char *arch;
    uint32_t n_embd, n_head, n_head_kv, n_ff, n_layer, n_vocab;
    const char *omit_key;    /* metadata key left out */
    const char *omit_tensor; /* tensor left out */
    const char *bad_tensor;  /* tensor written one row short */
    bool tied;               /* no output.weight */
    bool zero_ff_key;        /* feed_forward_length written as 0, tensors as n_ff */
};

static const struct craft good = {"llama", 8, 2, 1, 16, 2, 10, NULL, NULL, NULL, false, false};

static void add_u32(struct gs_gguf_writer *w, const struct craft *c, const char *key, uint32_t v)
{
    if (c->omit_key && !strcmp(c->omit_key, key))
        return;
    cr_assert_eq(gs_gguf_w_u32(w, key, v), GS_OK);
}

static void add_tensor(struct gs_gguf_writer *w, const struct craft *c, const char *name,
                       int64_t ne0, int64_t ne1)
{
    if (c->omit_tensor && !strcmp(c->omit_tensor, name))
        return;
    if (c->bad_tensor && !strcmp(c->bad_tensor, name))
        ne1 -= 1;
    craft_f32_tensor(w, name, ne0, ne1);
}

/* Writes the crafted file and returns its path (static buffer). */
static const char *write_model(const struct craft *c)
{
    static char path[1024];
    static int seq;
    struct gs_err err = {0};
    struct gs_gguf_writer *w;
    cr_assert_eq(gs_gguf_writer_new(NULL, &w, &err), GS_OK, "%s", err.msg);
    if (!c->omit_key || strcmp(c->omit_key, "general.architecture"))
        cr_assert_eq(gs_gguf_w_str(w, "general.architecture", c->arch), GS_OK);
    char key[128];
#define KEY(suffix) (snprintf(key, sizeof(key), "%s.%s", c->arch, suffix), key)
    add_u32(w, c, KEY("embedding_length"), c->n_embd);
    add_u32(w, c, KEY("block_count"), c->n_layer);
    add_u32(w, c, KEY("attention.head_count"), c->n_head);
    add_u32(w, c, KEY("attention.head_count_kv"), c->n_head_kv);
    add_u32(w, c, KEY("feed_forward_length"), c->zero_ff_key ? 0 : c->n_ff);
    add_u32(w, c, KEY("context_length"), 64);
    if (!c->omit_key || strcmp(c->omit_key, KEY("attention.layer_norm_rms_epsilon")))
        cr_assert_eq(gs_gguf_w_f32(w, KEY("attention.layer_norm_rms_epsilon"), 1e-5f), GS_OK);
#undef KEY
    add_u32(w, c, "tokenizer.ggml.bos_token_id", 1);
    add_u32(w, c, "tokenizer.ggml.eos_token_id", 2);
    uint32_t hd = c->n_head ? c->n_embd / c->n_head : 1;
    add_tensor(w, c, "token_embd.weight", c->n_embd, c->n_vocab);
    add_tensor(w, c, "output_norm.weight", c->n_embd, 1);
    if (!c->tied)
        add_tensor(w, c, "output.weight", c->n_embd, c->n_vocab);
    for (uint32_t l = 0; l < c->n_layer; l++) {
        char name[64];
#define T(suffix, ne0, ne1)                                                                        \
    (snprintf(name, sizeof(name), "blk.%u.%s.weight", l, suffix), add_tensor(w, c, name, ne0, ne1))
        T("attn_norm", c->n_embd, 1);
        T("attn_q", c->n_embd, c->n_head * hd);
        T("attn_k", c->n_embd, c->n_head_kv * hd);
        T("attn_v", c->n_embd, c->n_head_kv * hd);
        T("attn_output", c->n_head * hd, c->n_embd);
        T("ffn_norm", c->n_embd, 1);
        T("ffn_gate", c->n_embd, c->n_ff);
        T("ffn_up", c->n_embd, c->n_ff);
        T("ffn_down", c->n_ff, c->n_embd);
#undef T
    }
    snprintf(path, sizeof(path), "%s/craft-%d.gguf", gs_test_tmpdir(), seq++);
    cr_assert_eq(gs_gguf_writer_to_file(w, path, &err), GS_OK, "%s", err.msg);
    gs_gguf_writer_free(w);
    return path;
}

/* Loads c; returns the status and leaves the message in err. */
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
    enum gs_status st = load(c, &m, &f, &err);
    cr_assert_neq(st, GS_OK, "a model that should be refused loaded (%s)", needle);
    cr_assert_null(m);
    cr_assert(strstr(err.msg, needle), "message '%s' does not name '%s'", err.msg, needle);
    gs_gguf_close(f);
}

Test(llama_meta, good_file_builds_expected_graph)
{
    struct gs_model *m;
    struct gs_gguf *f;
    struct gs_err err = {0};
    cr_assert_eq(load(&good, &m, &f, &err), GS_OK, "%s", err.msg);
    cr_assert_eq(m->hp.n_vocab, 10);
    cr_assert_eq(m->hp.head_dim, 4);
    cr_assert_eq(gs_model_kv_dim(m), 4);
    cr_assert_eq(m->hp.bos_id, 1);
    cr_assert(!m->hp.tied_output);
    uint32_t n_attn = 0, n_store = 0;
    for (uint32_t i = 0; i < m->graph->n_nodes; i++) {
        n_attn += m->graph->nodes[i].op == GS_OP_ATTN;
        n_store += m->graph->nodes[i].op == GS_OP_KV_STORE;
    }
    cr_assert_eq(n_attn, 2);
    cr_assert_eq(n_store, 2);
    cr_assert_eq(m->graph->n_vocab, 10);
    gs_model_free(m);
    gs_gguf_close(f);
}

Test(llama_meta, tied_output_uses_embedding)
{
    struct craft c = good;
    c.tied = true;
    struct gs_model *m;
    struct gs_gguf *f;
    struct gs_err err = {0};
    cr_assert_eq(load(&c, &m, &f, &err), GS_OK, "%s", err.msg);
    cr_assert(m->hp.tied_output);
    const struct gs_node *logits = gs_graph_node(m->graph, gs_graph_logits_node(m->graph));
    const struct gs_node *proj = gs_graph_node(m->graph, logits->src[0]);
    cr_assert_str_eq(gs_graph_node(m->graph, proj->src[1])->name, "token_embd.weight");
    gs_model_free(m);
    gs_gguf_close(f);
}

Test(llama_meta, heads_not_dividing_embd_refused)
{
    struct craft c = good;
    c.n_head = 3;
    c.n_head_kv = 3;
    expect_refused(&c, "llama.attention.head_count");
}

Test(llama_meta, kv_heads_not_dividing_heads_refused)
{
    struct craft c = good;
    c.n_head = 4;
    c.n_head_kv = 3;
    expect_refused(&c, "llama.attention.head_count_kv");
}

Test(llama_meta, zero_sizes_refused)
{
    struct craft c = good;
    c.n_layer = 0;
    expect_refused(&c, "llama.block_count");
    c = good;
    c.zero_ff_key = true;
    expect_refused(&c, "llama.feed_forward_length");
}

Test(llama_meta, missing_key_refused)
{
    struct craft c = good;
    c.omit_key = "llama.embedding_length";
    expect_refused(&c, "llama.embedding_length");
    c.omit_key = "llama.attention.layer_norm_rms_epsilon";
    expect_refused(&c, "layer_norm_rms_epsilon");
    c.omit_key = "general.architecture";
    expect_refused(&c, "general.architecture");
}

Test(llama_meta, missing_tensor_refused)
{
    struct craft c = good;
    c.omit_tensor = "blk.1.ffn_up.weight";
    expect_refused(&c, "blk.1.ffn_up.weight");
    c.omit_tensor = "output_norm.weight";
    expect_refused(&c, "output_norm.weight");
}

Test(llama_meta, wrong_tensor_shape_refused)
{
    struct craft c = good;
    c.bad_tensor = "blk.0.attn_k.weight";
    expect_refused(&c, "blk.0.attn_k.weight");
    c.bad_tensor = "output.weight";
    expect_refused(&c, "output.weight");
}

Test(llama_meta, unknown_architecture_refused)
{
    struct craft c = good;
    c.arch = "mamba";
    expect_refused(&c, "mamba");
}
