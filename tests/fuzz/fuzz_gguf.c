/*
 * tests/fuzz/fuzz_gguf.c - a GGUF file from a stranger: the reader
 * (gs_gguf_open_mem), then what the daemon builds from an accepted file, the
 * tokenizer (gs_tok_new) and the model (gs_model_load).
 *
 * Invariants: a refusal returns no file and a message; an accepted file's
 * strings, arrays and tensor data all lie inside the input, tensors are in
 * bounds and within GS_GGUF_MAX_DIMS, and lookups find what the tables list.
 */
#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/tok.h"
#include "tests/fuzz/fuzz.h"

#include <string.h>

struct span {
    const uint8_t *lo, *hi;
};

static void check_inside(struct span s, const void *p, uint64_t n, const char *what)
{
    const uint8_t *q = p;
    FUZZ_CHECK(n == 0 || (q >= s.lo && q <= s.hi && n <= (uint64_t)(s.hi - q)),
               "%s (%llu bytes) is outside the input", what, (unsigned long long)n);
}

static void check_kv(const struct gs_gguf *g, struct span s, const struct gs_gguf_kv *kv)
{
    check_inside(s, kv->key.data, kv->key.len, "a key");
    FUZZ_CHECK((unsigned)kv->type < GS_GGUF_VTYPE_COUNT, "type %d", (int)kv->type);
    if (kv->type == GS_GGUF_STRING)
        check_inside(s, kv->v.str.data, kv->v.str.len, "a string value");
    if (kv->type != GS_GGUF_ARRAY)
        return;
    FUZZ_CHECK(kv->v.arr.type != GS_GGUF_ARRAY, "a nested array was accepted");
    if (kv->v.arr.type == GS_GGUF_STRING) {
        for (uint64_t i = 0; i < kv->v.arr.n; i++)
            check_inside(s, kv->v.arr.strs[i].data, kv->v.arr.strs[i].len, "an array string");
    } else {
        size_t es = gs_gguf_vtype_size(kv->v.arr.type);
        FUZZ_CHECK(es > 0, "array of type %d", (int)kv->v.arr.type);
        check_inside(s, kv->v.arr.data, kv->v.arr.n * es, "array elements");
        if (kv->v.arr.n)
            (void)gs_gguf_arr_get(kv, kv->v.arr.n - 1);
    }
    /* Only a key without NUL bytes can be looked up by C string. */
    char key[256];
    if (kv->key.len < sizeof(key) && !memchr(kv->key.data, 0, kv->key.len)) {
        memcpy(key, kv->key.data, kv->key.len);
        key[kv->key.len] = '\0';
        FUZZ_CHECK(gs_gguf_find_kv(g, key) == kv, "key '%s' not found by name", key);
    }
}

static void check_tensor(const struct gs_gguf *g, struct span s, const struct gs_gguf_tensor *t)
{
    check_inside(s, t->name.data, t->name.len, "a tensor name");
    FUZZ_CHECK(t->n_dims >= 1 && t->n_dims <= GS_GGUF_MAX_DIMS, "n_dims %u", t->n_dims);
    for (uint32_t d = 0; d < GS_GGUF_MAX_DIMS; d++)
        FUZZ_CHECK(t->ne[d] >= 0, "ne[%u] = %lld", d, (long long)t->ne[d]);
    check_inside(s, t->data, t->nbytes, "tensor data");
    FUZZ_CHECK((const uint8_t *)t->data ==
                   s.lo + gs_gguf_data_offset(g) + t->offset || t->nbytes == 0,
               "tensor data not at data_offset + offset");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gs_gguf *g = (struct gs_gguf *)1;
    struct gs_err err = {0};
    enum gs_status st = gs_gguf_open_mem(data, size, &g, &err);
    if (st != GS_OK) {
        FUZZ_CHECK(g == NULL, "a refused file came back");
        FUZZ_CHECK(err.msg[0], "refused (status %d) without a message", (int)st);
        return 0;
    }
    struct span s = {data, data + size};
    FUZZ_CHECK(gs_gguf_file_bytes(g) == size, "file_bytes %llu",
               (unsigned long long)gs_gguf_file_bytes(g));
    FUZZ_CHECK(gs_gguf_data_offset(g) <= size, "data offset past the end");
    FUZZ_CHECK(gs_gguf_alignment(g) > 0, "alignment 0");
    for (uint64_t i = 0; i < gs_gguf_n_kv(g); i++)
        check_kv(g, s, gs_gguf_kv_at(g, i));
    for (uint64_t i = 0; i < gs_gguf_n_tensors(g); i++)
        check_tensor(g, s, gs_gguf_tensor_at(g, i));

    /* What loading a model reads next: each must refuse with a message, or build. */
    struct gs_tok *tok = NULL;
    err = (struct gs_err){0};
    if (gs_tok_new(g, &tok, &err) == GS_OK) {
        int32_t *ids;
        size_t n_ids;
        if (gs_tok_encode(tok, "Hello, world", 12, GS_TOK_ADD_SPECIAL | GS_TOK_PARSE_SPECIAL,
                          &ids, &n_ids, &err) == GS_OK) {
            char *text;
            size_t len;
            if (gs_tok_decode(tok, ids, n_ids, 0, &text, &len, &err) == GS_OK)
                gs_free(text);
            gs_free(ids);
        }
        gs_tok_free(tok);
    } else {
        FUZZ_CHECK(err.msg[0], "tokenizer refused without a message");
    }
    struct gs_model *m = NULL;
    err = (struct gs_err){0};
    if (gs_model_load(g, &m, &err) == GS_OK)
        gs_model_free(m);
    else
        FUZZ_CHECK(err.msg[0], "model refused without a message");
    gs_gguf_close(g);
    return 0;
}
