/*
 * tests/server/test_http_embed.c - POST /v1/embeddings on the real daemon:
 * a text's vector does not depend on what shares its batches, cpu agrees
 * with ref, vectors are unit length, base64 is the float vector's bytes,
 * token ids embed as their text does, the pooling choices, and the 400s.
 */
#define _GNU_SOURCE
#include "tests/common/testutil.h"
#include "tests/server/e2e.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* stories260K's width */
#define N_EMBD 64

static struct e2e_daemon d;

static void start_default(void)
{
    e2e_start(&d, "");
}

static void stop_daemon(void)
{
    cr_expect_eq(e2e_stop(&d), 0, "the daemon did not exit 0 after SIGTERM");
}

TestSuite(http_embed, .init = start_default, .fini = stop_daemon, .timeout = 300);

/* POSTs body to /v1/embeddings on daemon k and expects status. */
static void embed(const struct e2e_daemon *k, const char *body, int status, struct e2e_resp *r)
{
    e2e_http(k, "POST", "/v1/embeddings", body, NULL, r);
    cr_assert_eq(r->status, status, "%s -> %d: %s", body, r->status, r->body);
}

/* data[i].embedding as floats (N_EMBD of them), checking the entry's shape. */
static void vector_of(const json_t *resp, size_t i, float *out)
{
    json_t *e = json_array_get(json_object_get(resp, "data"), i);
    cr_assert(e, "no data[%zu]", i);
    cr_expect_str_eq(json_string_value(json_object_get(e, "object")), "embedding");
    cr_expect_eq(json_integer_value(json_object_get(e, "index")), (json_int_t)i);
    json_t *v = json_object_get(e, "embedding");
    cr_assert_eq(json_array_size(v), N_EMBD);
    for (size_t j = 0; j < N_EMBD; j++)
        out[j] = (float)json_number_value(json_array_get(v, j));
}

static double dot(const float *a, const float *b)
{
    double s = 0;
    for (int j = 0; j < N_EMBD; j++)
        s += (double)a[j] * b[j];
    return s;
}

static int b64_value(char c)
{
    const char *abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const char *p = strchr(abc, c);
    return c && p ? (int)(p - abc) : -1;
}

/* Decodes padded base64 into out (cap bytes); returns the byte count. */
static size_t b64_decode(const char *s, unsigned char *out, size_t cap)
{
    size_t n = 0, len = strlen(s);
    cr_assert_eq(len % 4, 0, "base64 of %zu characters", len);
    for (size_t i = 0; i < len; i += 4) {
        int v[4];
        for (int k = 0; k < 4; k++)
            v[k] = s[i + k] == '=' ? 0 : b64_value(s[i + k]);
        cr_assert(v[0] >= 0 && v[1] >= 0 && v[2] >= 0 && v[3] >= 0, "not base64: %s", s);
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | v[3];
        unsigned char b[3] = {(unsigned char)(w >> 16), (unsigned char)(w >> 8), (unsigned char)w};
        int keep = s[i + 2] == '=' ? 1 : s[i + 3] == '=' ? 2 : 3;
        for (int k = 0; k < keep; k++) {
            cr_assert(n < cap);
            out[n++] = b[k];
        }
    }
    return n;
}

/* The same text alone and as one of 16 inputs (the others of other lengths,
 * so the batches and chunks differ) gives the same vector; every vector is
 * unit length and usage counts every input's tokens. */
Test(http_embed, batch_of_16_equals_alone_and_vectors_are_unit)
{
    const char *text = "Once upon a time there was a little girl named Lily.";
    char body[4096];
    snprintf(body, sizeof(body), "{\"input\":\"%s\",\"model\":\"stories260K\"}", text);
    struct e2e_resp r;
    embed(&d, body, 200, &r);
    cr_expect_str_eq(json_string_value(json_object_get(r.json, "object")), "list");
    cr_expect_str_eq(json_string_value(json_object_get(r.json, "model")), "stories260K");
    float alone[N_EMBD];
    vector_of(r.json, 0, alone);
    json_int_t n_alone =
        json_integer_value(json_object_get(json_object_get(r.json, "usage"), "prompt_tokens"));
    cr_expect_gt(n_alone, 5);
    cr_expect_eq(
        json_integer_value(json_object_get(json_object_get(r.json, "usage"), "total_tokens")),
        n_alone);
    cr_expect_float_eq(dot(alone, alone), 1.0, 1e-5);
    e2e_resp_free(&r);

    size_t w = (size_t)snprintf(body, sizeof(body), "{\"input\":[");
    for (int i = 0; i < 16; i++) {
        if (i == 11)
            w += (size_t)snprintf(body + w, sizeof(body) - w, "%s\"%s\"", i ? "," : "", text);
        else
            w += (size_t)snprintf(body + w, sizeof(body) - w, "%s\"%.*s the dog ran %d times\"",
                                  i ? "," : "", 3 + 7 * i, text, i);
    }
    snprintf(body + w, sizeof(body) - w, "]}");
    embed(&d, body, 200, &r);
    cr_assert_eq(json_array_size(json_object_get(r.json, "data")), 16);
    float v[N_EMBD];
    for (size_t i = 0; i < 16; i++) {
        vector_of(r.json, i, v);
        cr_expect_float_eq(dot(v, v), 1.0, 1e-5, "input %zu: |v|^2 = %g", i, dot(v, v));
    }
    vector_of(r.json, 11, v);
    for (int j = 0; j < N_EMBD; j++)
        cr_expect_float_eq(v[j], alone[j], 1e-6, "[%d] %.9g in the batch, %.9g alone", j, v[j],
                           alone[j]);
    cr_expect_gt(
        json_integer_value(json_object_get(json_object_get(r.json, "usage"), "prompt_tokens")),
        16 * 3);
    e2e_resp_free(&r);
}

/* base64 is the little-endian float32 bytes of the vector the float answer has. */
Test(http_embed, base64_decodes_to_the_float_vector)
{
    struct e2e_resp r;
    embed(&d, "{\"input\":[\"The cat sat.\",\"A bird\"],\"encoding_format\":\"float\"}", 200, &r);
    float f[2][N_EMBD];
    vector_of(r.json, 0, f[0]);
    vector_of(r.json, 1, f[1]);
    e2e_resp_free(&r);
    embed(&d, "{\"input\":[\"The cat sat.\",\"A bird\"],\"encoding_format\":\"base64\"}", 200, &r);
    for (size_t i = 0; i < 2; i++) {
        json_t *e = json_array_get(json_object_get(r.json, "data"), i);
        const char *s = json_string_value(json_object_get(e, "embedding"));
        cr_assert(s, "data[%zu].embedding is not a string", i);
        unsigned char bytes[4 * N_EMBD + 8];
        cr_assert_eq(b64_decode(s, bytes, sizeof(bytes)), 4 * N_EMBD);
        for (int j = 0; j < N_EMBD; j++) {
            uint32_t u = 0;
            for (int k = 0; k < 4; k++)
                u |= (uint32_t)bytes[4 * j + k] << (8 * k);
            float x;
            memcpy(&x, &u, 4);
            cr_expect_eq(x, f[i][j], "input %zu [%d]: %.9g from base64, %.9g as a number", i, j, x,
                         f[i][j]);
        }
    }
    e2e_resp_free(&r);
}

/* Token ids embed as the text they came from does, alone or in a list. */
Test(http_embed, token_ids_embed_as_their_text)
{
    struct e2e_resp r;
    e2e_http(&d, "POST", "/tokenize", "{\"content\":\"Lily liked to play.\",\"add_special\":true}",
             NULL, &r);
    cr_assert_eq(r.status, 200);
    char *ids = json_dumps(json_object_get(r.json, "tokens"), JSON_COMPACT);
    e2e_resp_free(&r);
    embed(&d, "{\"input\":\"Lily liked to play.\"}", 200, &r);
    float text[N_EMBD], v[N_EMBD];
    vector_of(r.json, 0, text);
    e2e_resp_free(&r);
    char body[2048];
    snprintf(body, sizeof(body), "{\"input\":%s}", ids);
    embed(&d, body, 200, &r);
    vector_of(r.json, 0, v);
    cr_expect_float_eq(dot(v, text), 1.0, 1e-6);
    e2e_resp_free(&r);
    snprintf(body, sizeof(body), "{\"input\":[%s,[1,2,3]]}", ids);
    embed(&d, body, 200, &r);
    vector_of(r.json, 0, v);
    cr_expect_float_eq(dot(v, text), 1.0, 1e-6);
    e2e_resp_free(&r);
    free(ids);
}

/* Embeddings and generation share the engine: both answer, sent at once. */
Test(http_embed, beside_a_generation)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "curl -sS -o '%s.gen' %s/v1/completions "
             "-d '{\"prompt\":\"Once\",\"max_tokens\":200,\"ignore_eos\":true}' & "
             "curl -sS -o '%s.emb' %s/v1/embeddings -d '{\"input\":[\"one\",\"two\",\"three\"]}'; "
             "wait",
             d.log_path, d.url, d.log_path, d.url);
    cr_assert_eq(system(cmd), 0);
    char path[600];
    snprintf(path, sizeof(path), "%s.gen", d.log_path);
    json_t *gen = gs_test_load_json(path);
    snprintf(path, sizeof(path), "%s.emb", d.log_path);
    json_t *emb = gs_test_load_json(path);
    cr_expect_eq(
        json_integer_value(json_object_get(json_object_get(gen, "usage"), "completion_tokens")),
        200);
    cr_expect_eq(json_array_size(json_object_get(emb, "data")), 3);
    json_decref(gen);
    json_decref(emb);
}

/* The cpu backend (the default) and ref agree: cosine >= 0.9999 per text. */
Test(http_embed, cpu_matches_ref)
{
    const char *body = "{\"input\":[\"Once upon a time\",\"The sun was hot and the park was "
                       "full of children playing.\",\"Tom\"]}";
    struct e2e_daemon ref;
    e2e_start(&ref, "--backend ref");
    struct e2e_resp a, b;
    embed(&d, body, 200, &a);
    embed(&ref, body, 200, &b);
    for (size_t i = 0; i < 3; i++) {
        float x[N_EMBD], y[N_EMBD];
        vector_of(a.json, i, x);
        vector_of(b.json, i, y);
        double c = dot(x, y) / sqrt(dot(x, x) * dot(y, y));
        cr_expect_geq(c, 0.9999, "input %zu: cosine %.6f", i, c);
    }
    e2e_resp_free(&a);
    e2e_resp_free(&b);
    cr_expect_eq(e2e_stop(&ref), 0);
}

/* The pooling /v1/models says daemon dm uses. */
static void expect_models_pooling(const struct e2e_daemon *dm, const char *want)
{
    struct e2e_resp r;
    e2e_http(dm, "GET", "/v1/models", NULL, NULL, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    json_t *meta = json_object_get(json_array_get(json_object_get(r.json, "data"), 0), "meta");
    cr_expect_str_eq(json_string_value(json_object_get(meta, "pooling")), want, "%s", r.body);
    e2e_resp_free(&r);
}

/* --pooling: cls takes the first row, and every prompt starts with BOS, so
 * under causal attention every text gets BOS's vector; last differs by text;
 * mean (the default here) is neither. /v1/models says which. */
Test(http_embed, pooling_choices)
{
    const char *body = "{\"input\":[\"Once upon a time\",\"Tom ran to the park.\"]}";
    struct e2e_daemon k;
    float x[N_EMBD], y[N_EMBD], mean[N_EMBD];
    struct e2e_resp r;
    embed(&d, body, 200, &r);
    vector_of(r.json, 0, mean);
    e2e_resp_free(&r);
    expect_models_pooling(&d, "mean");

    e2e_start(&k, "--pooling cls");
    expect_models_pooling(&k, "cls");
    embed(&k, body, 200, &r);
    vector_of(r.json, 0, x);
    vector_of(r.json, 1, y);
    cr_expect_float_eq(dot(x, y), 1.0, 1e-6, "cls: two texts, cosine %.7f", dot(x, y));
    cr_expect_lt(dot(x, mean), 0.9999);
    e2e_resp_free(&r);
    cr_expect_eq(e2e_stop(&k), 0);

    e2e_start(&k, "--pooling last");
    expect_models_pooling(&k, "last");
    embed(&k, body, 200, &r);
    vector_of(r.json, 0, x);
    vector_of(r.json, 1, y);
    cr_expect_lt(dot(x, y), 0.9999, "last: two texts gave one vector");
    cr_expect_lt(dot(x, mean), 0.9999);
    cr_expect_float_eq(dot(x, x), 1.0, 1e-5);
    e2e_resp_free(&r);
    cr_expect_eq(e2e_stop(&k), 0);
}

/* Each bad body is a 400 (404 for a model) naming the field. */
Test(http_embed, errors_name_the_field)
{
    static const struct {
        const char *body;
        int status;
        const char *param; /* NULL: none */
    } cases[] = {
        {"{\"input\":\"x\",\"foo\":1}", 400, "foo"},
        {"{\"input\":\"x\",\"dimensions\":32}", 400, "dimensions"},
        {"{\"input\":\"x\",\"encoding_format\":\"int8\"}", 400, "encoding_format"},
        {"{\"input\":\"x\",\"user\":5}", 400, "user"},
        {"{\"model\":\"stories260K\"}", 400, "input"},
        {"{\"input\":[]}", 400, "input"},
        {"{\"input\":\"\"}", 400, "input"},
        {"{\"input\":[\"a\",\"\"]}", 400, "input"},
        {"{\"input\":[[]]}", 400, "input"},
        {"{\"input\":[\"a\",[1,2]]}", 400, "input"},
        {"{\"input\":[1,\"a\"]}", 400, "input"},
        {"{\"input\":[999999]}", 400, "input"},
        {"{\"input\":[-1]}", 400, "input"},
        {"{\"input\":{}}", 400, "input"},
        {"{\"input\":\"x\",\"model\":\"gpt-4\"}", 404, "model"},
        {"[1]", 400, NULL},
        {"{\"input\":", 400, NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct e2e_resp r;
        embed(&d, cases[i].body, cases[i].status, &r);
        json_t *err = json_object_get(r.json, "error");
        cr_assert(err, "%s: no error object: %s", cases[i].body, r.body);
        cr_expect(json_is_string(json_object_get(err, "message")));
        if (cases[i].param)
            cr_expect_str_eq(json_string_value(json_object_get(err, "param")), cases[i].param,
                             "%s: %s", cases[i].body, r.body);
        e2e_resp_free(&r);
    }
    /* dimensions equal to the width is no change, and accepted; so is user. */
    struct e2e_resp r;
    embed(&d, "{\"input\":\"x\",\"dimensions\":64,\"user\":\"u-1\",\"encoding_format\":null}", 200,
          &r);
    e2e_resp_free(&r);
    /* An input longer than the context is refused, never truncated. */
    size_t cap = 20000, w = 0;
    char *body = malloc(cap);
    cr_assert(body);
    w += (size_t)snprintf(body, cap, "{\"input\":[");
    for (int i = 0; i < 3000; i++)
        w += (size_t)snprintf(body + w, cap - w, "%s5", i ? "," : "");
    snprintf(body + w, cap - w, "]}");
    embed(&d, body, 400, &r);
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(r.json, "error"), "code")),
                     "context_length_exceeded");
    e2e_resp_free(&r);
    free(body);
}

/*
 * Against llama.cpp: tests/server/golden/llama_embedding_stories260K.json holds
 * llama.cpp's llama-embedding output for the same file and texts, with mean,
 * last and cls pooling and L2 normalisation (its "command" field says how it was
 * run; llama.cpp was built outside this repository from the source that the
 * npm package node-llama-cpp@3.21.1 carries as llama/gitRelease.bundle:
 * `git clone gitRelease.bundle llama.cpp && cmake -B build -DLLAMA_CURL=OFF &&
 * cmake --build build --target llama-embedding`). When recorded the cosines
 * were 0.9999998 or more and the largest element difference 2.2e-4 (last
 * pooling; llama.cpp's kernels and ours round differently, and it prints seven
 * decimals), so the bounds are cosine >= 0.9999 and 5e-4 per element.
 */
/* The vectors of daemon k for the golden's prompts against its array key. */
static void expect_llama_cpp(const struct e2e_daemon *k, const json_t *g, const char *key)
{
    json_t *prompts = json_object_get(g, "prompts");
    cr_assert(json_array_size(prompts) > 0);
    json_t *req = json_pack("{s:O}", "input", prompts);
    char *body = json_dumps(req, JSON_COMPACT);
    struct e2e_resp r;
    embed(k, body, 200, &r);
    for (size_t i = 0; i < json_array_size(prompts); i++) {
        float ours[N_EMBD], theirs[N_EMBD];
        vector_of(r.json, i, ours);
        json_t *v = json_object_get(json_array_get(json_object_get(g, key), i), "embedding");
        cr_assert_eq(json_array_size(v), N_EMBD, "%s[%zu]", key, i);
        for (int j = 0; j < N_EMBD; j++)
            theirs[j] = (float)json_number_value(json_array_get(v, j));
        double c = dot(ours, theirs) / sqrt(dot(ours, ours) * dot(theirs, theirs));
        cr_expect_geq(c, 0.9999, "%s, prompt %zu: cosine %.7f with llama.cpp", key, i, c);
        for (int j = 0; j < N_EMBD; j++)
            cr_expect_float_eq(ours[j], theirs[j], 5e-4, "%s, prompt %zu [%d]: %.7f vs %.7f", key,
                               i, j, ours[j], theirs[j]);
    }
    e2e_resp_free(&r);
    free(body);
    json_decref(req);
}

Test(http_embed, matches_llama_cpp_llama_embedding)
{
    const char *src = getenv("GS_SOURCE_DIR");
    cr_assert(src, "GS_SOURCE_DIR is not set");
    char path[4200];
    snprintf(path, sizeof(path), "%s/tests/server/golden/llama_embedding_stories260K.json", src);
    json_t *g = gs_test_load_json(path);
    cr_assert(g, "cannot read %s", path);
    expect_llama_cpp(&d, g, "data"); /* mean, the default */
    struct e2e_daemon k;
    e2e_start(&k, "--pooling last");
    expect_llama_cpp(&k, g, "data_last");
    cr_expect_eq(e2e_stop(&k), 0);
    e2e_start(&k, "--pooling cls");
    expect_llama_cpp(&k, g, "data_cls");
    cr_expect_eq(e2e_stop(&k), 0);
    json_decref(g);
}
