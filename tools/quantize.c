/*
 * tools/quantize.c - `graphserve quantize IN OUT TYPE`: rewrites a GGUF
 * file with its weight matrices in another type, as llama.cpp's llama-quantize
 * does for a plain type, so that a file quantized here and one quantized there
 * hold the same bytes (tests/tools/test_quantize.c compares them).
 *
 * Which tensors change, following llama.cpp's rules:
 *   - 2-D tensors whose name ends in ".weight" and is not a norm; AltUp,
 *     LAuReL and per_layer_model_proj tensors (Gemma 3n: small, and precision
 *     matters there) stay as they are;
 *   - a row length the type's blocks do not divide falls back: q4_K to q5_0,
 *     q5_K to q5_1, q6_K to q8_0, q2_K and q3_K to q4_0 (llama.cpp uses iq4_nl,
 *     which graphserve has no quantizer for), then to f16 when 32 does not
 *     divide it either;
 *   - the output matrix (token_embd when the output is tied) is q6_K for
 *     every quantized type but q8_0, or q8_0 when 256 does not divide its
 *     rows; --pure keeps it in TYPE.
 * Metadata is copied key by key; general.file_type becomes TYPE's llama.cpp
 * file type and general.quantization_version 2.
 *
 * Sources must be f32, f16 or bf16 tensors: requantizing loses precision
 * twice and is refused naming the tensor. The output is built in memory
 * (its size, not the input's) and written at the end.
 */
#include "engine/gguf.h"
#include "engine/quant.h"
#include "tools/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CMD "quantize"

struct opts {
    bool pure;
};

/* clang-format off */
static const struct gs_cfg_opt opt_rows[] = {
    {"pure", 0, GS_CFG_BOOL, offsetof(struct opts, pure), NULL, NULL, 0, 0, NULL, 0, NULL,
     "Every matrix in TYPE: no q6_K output matrix, fallbacks only where needed."},
};
/* clang-format on */

const struct gs_cli_spec gs_quantize_spec = {
    .cmd = CMD, .synopsis = "IN OUT TYPE [--pure]",
    .about = "  IN      a GGUF file with f32, f16 or bf16 weights\n"
             "  OUT     where to write the quantized file\n"
             "  TYPE    q4_0 q4_1 q5_0 q5_1 q8_0 q2_K q3_K q4_K q5_K q6_K f16 bf16 f32\n",
    .opts = opt_rows, .n_opts = GS_ARRAY_LEN(opt_rows), .min_args = 3, .max_args = 3,
};

/* TYPE's general.file_type as llama.cpp numbers them (its llama_ftype). */
static bool ftype_of(enum gs_type t, uint32_t *out)
{
    for (size_t i = 0; gs_tool_file_type_names[i]; i++)
        if (gs_tool_file_types[i].type == t) {
            *out = gs_tool_file_types[i].ftype;
            return true;
        }
    return false;
}

static bool has_suffix(struct gs_gguf_str s, const char *suffix)
{
    size_t n = strlen(suffix);
    return s.len >= n && !memcmp(s.data + s.len - n, suffix, n);
}

static bool contains(struct gs_gguf_str s, const char *needle)
{
    size_t n = strlen(needle);
    for (size_t i = 0; i + n <= s.len; i++)
        if (!memcmp(s.data + i, needle, n))
            return true;
    return false;
}

/* Rows of ne[0] elements the tensor holds (the reader checked the product fits). */
static int64_t tensor_rows(const struct gs_gguf_tensor *t)
{
    int64_t rows = 1;
    for (uint32_t d = 1; d < t->n_dims; d++)
        rows *= t->ne[d];
    return rows;
}

/* Whether the tensor is a matrix llama.cpp quantizes. */
static bool quantizable(const struct gs_gguf_tensor *t)
{
    return t->n_dims >= 2 && tensor_rows(t) > 1 && has_suffix(t->name, ".weight") &&
           !has_suffix(t->name, "_norm.weight") && !contains(t->name, "altup") &&
           !contains(t->name, "laurel") && !contains(t->name, "per_layer_model_proj");
}

static bool divides(enum gs_type t, int64_t ne0)
{
    return ne0 % gs_type_traits(t)->block_size == 0;
}

/* The type a row of ne0 elements gets when TYPE's blocks do not divide it. */
static enum gs_type fallback(enum gs_type t, int64_t ne0)
{
    if (divides(t, ne0))
        return t;
    switch (t) {
    case GS_TYPE_Q4_K:
        t = GS_TYPE_Q5_0;
        break;
    case GS_TYPE_Q5_K:
        t = GS_TYPE_Q5_1;
        break;
    case GS_TYPE_Q6_K:
        t = GS_TYPE_Q8_0;
        break;
    case GS_TYPE_Q2_K:
    case GS_TYPE_Q3_K:
        t = GS_TYPE_Q4_0;
        break;
    default:
        break;
    }
    return divides(t, ne0) ? t : GS_TYPE_F16;
}

/* The type tensor `t` is written in. */
static enum gs_type target_type(const struct gs_gguf *in, const struct gs_gguf_tensor *t,
                                enum gs_type type, bool pure)
{
    if (!quantizable(t))
        return t->type;
    const bool is_output = gs_gguf_str_eq(t->name, "output.weight") ||
                           (gs_gguf_str_eq(t->name, "token_embd.weight") &&
                            !gs_gguf_find_tensor(in, "output.weight"));
    if (is_output && !pure && gs_type_traits(type)->quantized && type != GS_TYPE_Q8_0)
        return t->ne[0] % GS_QK_K ? GS_TYPE_Q8_0 : GS_TYPE_Q6_K;
    return fallback(type, t->ne[0]);
}

/* The tensor's rows as floats, one row at a time into row, then quantized into out. */
static enum gs_status convert(const struct gs_gguf_tensor *t, enum gs_type to, void *out,
                              float *row, const char *name, struct gs_err *err)
{
    const struct gs_type_traits *from = gs_type_traits(t->type);
    uint64_t in_row = 0, out_row = 0;
    const int64_t rows = tensor_rows(t);
    if (gs_type_row_bytes(t->type, t->ne[0], &in_row) || gs_type_row_bytes(to, t->ne[0], &out_row))
        return gs_err_set(err, GS_FORMAT, "tensor '%s': bad row length", name);
    for (int64_t r = 0; r < rows; r++) {
        const char *src = (const char *)t->data + (uint64_t)r * in_row;
        if (t->type == GS_TYPE_F32)
            memcpy(row, src, (size_t)t->ne[0] * sizeof(float));
        else
            from->to_f32(src, row, t->ne[0]);
        enum gs_status st = gs_quantize(to, row, (char *)out + (uint64_t)r * out_row, t->ne[0]);
        if (st)
            return gs_err_set(err, st, "tensor '%s': cannot write %s", name, gs_type_name(to));
    }
    return GS_OK;
}

enum gs_status gs_tool_quantize(const struct gs_gguf *in, const char *out_path, enum gs_type type,
                                bool pure, uint64_t *n_changed_out, struct gs_err *err)
{
    struct gs_gguf_writer *w = NULL;
    enum gs_status st = gs_gguf_writer_new(NULL, &w, err);
    if (st)
        return st;
    uint32_t ftype = 0;
    ftype_of(type, &ftype);
    for (uint64_t i = 0; i < gs_gguf_n_kv(in) && !st; i++) {
        const struct gs_gguf_kv *kv = gs_gguf_kv_at(in, i);
        if (gs_gguf_str_eq(kv->key, "general.file_type") ||
            gs_gguf_str_eq(kv->key, "general.quantization_version"))
            continue;
        if (gs_gguf_w_copy_kv(w, kv))
            st = gs_err_set(err, GS_NOMEM, "metadata '%.*s' could not be copied",
                            (int)GS_MIN(kv->key.len, 200), kv->key.data);
    }
    if (!st && (gs_gguf_w_u32(w, "general.quantization_version", 2) ||
                gs_gguf_w_u32(w, "general.file_type", ftype)))
        st = gs_err_set(err, GS_NOMEM, "quantize: out of memory");
    int64_t widest = 1;
    for (uint64_t i = 0; i < gs_gguf_n_tensors(in); i++)
        widest = GS_MAX(widest, gs_gguf_tensor_at(in, i)->ne[0]);
    float *row = st ? NULL : gs_alloc_array((size_t)widest, sizeof(float));
    if (!st && !row)
        st = gs_err_set(err, GS_NOMEM, "quantize: out of memory");
    uint64_t n_changed = 0;
    for (uint64_t i = 0; i < gs_gguf_n_tensors(in) && !st; i++) {
        const struct gs_gguf_tensor *t = gs_gguf_tensor_at(in, i);
        char name[256];
        snprintf(name, sizeof(name), "%.*s", (int)GS_MIN(t->name.len, 255), t->name.data);
        const enum gs_type to = target_type(in, t, type, pure);
        struct gs_gguf_w_tensor wt = {.name = name, .type = (int32_t)to, .n_dims = t->n_dims};
        memcpy(wt.ne, t->ne, sizeof(wt.ne));
        void *buf = NULL;
        if (to == t->type) {
            wt.data = t->data;
            wt.nbytes = t->nbytes;
        } else if (t->type != GS_TYPE_F32 && t->type != GS_TYPE_F16 && t->type != GS_TYPE_BF16) {
            st = gs_err_set(err, GS_UNSUPPORTED,
                            "tensor '%s' is %s: only f32, f16 and bf16 tensors are quantized",
                            name, gs_type_name(t->type));
            break;
        } else {
            uint64_t row_bytes = 0;
            gs_type_row_bytes(to, t->ne[0], &row_bytes);
            wt.nbytes = row_bytes * (uint64_t)tensor_rows(t);
            buf = gs_malloc(wt.nbytes ? wt.nbytes : 1);
            if (!buf) {
                st = gs_err_set(err, GS_NOMEM, "tensor '%s': out of memory", name);
                break;
            }
            st = convert(t, to, buf, row, name, err);
            wt.data = buf;
            n_changed++;
        }
        if (!st && gs_gguf_w_tensor(w, &wt))
            st = gs_err_set(err, GS_NOMEM, "tensor '%s': out of memory", name);
        gs_free(buf);
    }
    gs_free(row);
    if (!st)
        st = gs_gguf_writer_to_file(w, out_path, err);
    if (n_changed_out)
        *n_changed_out = n_changed;
    gs_gguf_writer_free(w);
    return st;
}

int gs_cmd_quantize(int argc, char **argv)
{
    struct opts o = {0};
    struct gs_cli_args args;
    int prc = gs_cli_begin(&gs_quantize_spec, &o, argc, argv, &args);
    if (prc >= 0)
        return prc;
    const char *const *pos = args.args;
    bool pure = o.pure;
    enum gs_type type;
    uint32_t ftype;
    if (gs_type_from_name(pos[2], &type) || !ftype_of(type, &ftype) ||
        (type != GS_TYPE_F32 && !gs_type_traits(type)->from_f32)) {
        fprintf(stderr, "graphserve %s: '%s' is not a type this command writes\n", CMD, pos[2]);
        return 2;
    }
    if (!strcmp(pos[0], pos[1]))
        return gs_cli_fail(CMD, "IN and OUT are the same file");
    struct gs_err err = {0};
    struct gs_gguf *in = NULL;
    uint64_t n_changed = 0;
    if (gs_gguf_open(pos[0], &in, &err) ||
        gs_tool_quantize(in, pos[1], type, pure, &n_changed, &err)) {
        gs_gguf_close(in);
        return gs_cli_fail(CMD, "%s", err.msg);
    }
    printf("%s: %llu tensors, %llu written as %s or its fallbacks\n", pos[1],
           (unsigned long long)gs_gguf_n_tensors(in), (unsigned long long)n_changed,
           gs_type_name(type));
    gs_gguf_close(in);
    return 0;
}
