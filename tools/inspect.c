/*
 * tools/inspect.c - `graphserve inspect FILE [--json] [--sha256]`: a GGUF
 * file's header, metadata (long arrays summarised) and tensor table.
 *
 * Strings from the file are untrusted: text output escapes control bytes and
 * JSON output escapes bytes that are not valid UTF-8 as \xNN text.
 */
#include "engine/digest.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "tools/internal.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#define ARRAY_HEAD 8 /* array elements shown before "..." */

struct opts {
    bool json, sha256;
};

/* clang-format off */
static const struct gs_cfg_opt opt_rows[] = {
    {"json", 0, GS_CFG_BOOL, offsetof(struct opts, json), NULL, NULL, 0, 0, NULL, 0, NULL,
     "Print one JSON object instead of text."},
    {"sha256", 0, GS_CFG_BOOL, offsetof(struct opts, sha256), NULL, NULL, 0, 0, NULL, 0, NULL,
     "Also print the file's SHA-256."},
};
/* clang-format on */

const struct gs_cli_spec gs_inspect_spec = {
    .cmd = "inspect", .synopsis = "FILE [--json] [--sha256]", .opts = opt_rows,
    .n_opts = GS_ARRAY_LEN(opt_rows), .min_args = 1, .max_args = 1,
};

/* Writes s to f with control bytes and quotes escaped, at most max bytes. */
static void print_str(FILE *f, struct gs_gguf_str s, size_t max)
{
    fputc('"', f);
    size_t n = s.len < max ? (size_t)s.len : max;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.data[i];
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            fprintf(f, "\\x%02x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
    if (n < s.len)
        fprintf(f, "...(%" PRIu64 " bytes)", s.len);
}

static bool is_signed(enum gs_gguf_vtype t)
{
    return t == GS_GGUF_I8 || t == GS_GGUF_I16 || t == GS_GGUF_I32 || t == GS_GGUF_I64;
}

static void print_scalar(FILE *f, const struct gs_gguf_kv *kv)
{
    if (kv->type == GS_GGUF_STRING)
        print_str(f, kv->v.str, 120);
    else if (kv->type == GS_GGUF_F32 || kv->type == GS_GGUF_F64)
        fprintf(f, "%.9g", kv->v.f64);
    else if (kv->type == GS_GGUF_BOOL)
        fputs(kv->v.u64 ? "true" : "false", f);
    else if (is_signed(kv->type))
        fprintf(f, "%" PRId64, kv->v.i64);
    else
        fprintf(f, "%" PRIu64, kv->v.u64);
}

static void print_text(const struct gs_gguf *g, const char *path, const char *sha)
{
    printf("file:      %s\n", path);
    printf("bytes:     %" PRIu64 "\n", gs_gguf_file_bytes(g));
    printf("format:    GGUF v%u, alignment %u, data section at byte %" PRIu64 "\n",
           gs_gguf_version(g), gs_gguf_alignment(g), gs_gguf_data_offset(g));
    if (sha)
        printf("sha256:    %s\n", sha);
    struct gs_gguf_str arch = {0, ""};
    if (gs_gguf_get_str(g, "general.architecture", &arch, NULL) == GS_OK)
        printf("arch:      %.*s (%s)\n", (int)GS_MIN(arch.len, 64), arch.data,
               gs_model_arch_supported(arch.data, arch.len) ? "supported" : "not supported");
    else
        printf("arch:      none (not supported)\n");
    printf("\nmetadata (%" PRIu64 " keys):\n", gs_gguf_n_kv(g));
    for (uint64_t i = 0; i < gs_gguf_n_kv(g); i++) {
        const struct gs_gguf_kv *kv = gs_gguf_kv_at(g, i);
        printf("  %-44.*s ", (int)GS_MIN(kv->key.len, 200), kv->key.data);
        if (kv->type != GS_GGUF_ARRAY) {
            printf("%-8s ", gs_gguf_vtype_name(kv->type));
            print_scalar(stdout, kv);
        } else {
            printf("[%s x %" PRIu64 "] ", gs_gguf_vtype_name(kv->v.arr.type), kv->v.arr.n);
            for (uint64_t j = 0; j < kv->v.arr.n && j < ARRAY_HEAD; j++) {
                struct gs_gguf_kv e = gs_gguf_arr_get(kv, j);
                if (j)
                    fputs(", ", stdout);
                print_scalar(stdout, &e);
            }
            if (kv->v.arr.n > ARRAY_HEAD)
                fputs(", ...", stdout);
        }
        putchar('\n');
    }
    uint64_t total = 0;
    printf("\ntensors (%" PRIu64 "):\n", gs_gguf_n_tensors(g));
    printf("  %-36s %-7s %-24s %12s %12s\n", "name", "type", "shape", "offset", "bytes");
    for (uint64_t i = 0; i < gs_gguf_n_tensors(g); i++) {
        const struct gs_gguf_tensor *t = gs_gguf_tensor_at(g, i);
        char shape[64];
        int n = 0;
        for (uint32_t d = 0; d < t->n_dims; d++)
            n += snprintf(shape + n, sizeof(shape) - (size_t)n, "%s%" PRId64, d ? " x " : "",
                          t->ne[d]);
        printf("  %-36.*s %-7s %-24s %12" PRIu64 " %12" PRIu64 "\n", (int)GS_MIN(t->name.len, 200),
               t->name.data, gs_type_name(t->type), shape, t->offset, t->nbytes);
        total += t->nbytes;
    }
    printf("  total tensor bytes: %" PRIu64 "\n", total);
}

/* A JSON string of a file string; bytes that are not valid UTF-8 become "\xNN". */
static json_t *json_str(struct gs_gguf_str s)
{
    json_t *j = json_stringn(s.data, (size_t)s.len);
    if (j)
        return j;
    char *buf = gs_malloc((size_t)s.len * 4 + 1);
    if (!buf)
        return json_null();
    size_t n = 0;
    for (uint64_t i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)s.data[i];
        if (c < 0x80)
            buf[n++] = (char)c;
        else
            n += (size_t)snprintf(buf + n, 5, "\\x%02x", c);
    }
    j = json_stringn(buf, n);
    gs_free(buf);
    return j ? j : json_null();
}

static json_t *json_scalar(const struct gs_gguf_kv *kv)
{
    if (kv->type == GS_GGUF_STRING)
        return json_str(kv->v.str);
    if (kv->type == GS_GGUF_F32 || kv->type == GS_GGUF_F64)
        return json_real(kv->v.f64);
    if (kv->type == GS_GGUF_BOOL)
        return json_boolean(kv->v.u64);
    if (is_signed(kv->type))
        return json_integer(kv->v.i64);
    /* jansson integers are signed 64-bit: a u64 above that range becomes a string */
    if (kv->v.u64 > INT64_MAX) {
        char buf[24];
        snprintf(buf, sizeof(buf), "%" PRIu64, kv->v.u64);
        return json_string(buf);
    }
    return json_integer((json_int_t)kv->v.u64);
}

static json_t *json_report(const struct gs_gguf *g, const char *path, const char *sha)
{
    json_t *root = json_object();
    json_object_set_new(root, "file", json_string(path));
    json_object_set_new(root, "bytes", json_integer((json_int_t)gs_gguf_file_bytes(g)));
    json_object_set_new(root, "version", json_integer(gs_gguf_version(g)));
    json_object_set_new(root, "alignment", json_integer(gs_gguf_alignment(g)));
    json_object_set_new(root, "data_offset", json_integer((json_int_t)gs_gguf_data_offset(g)));
    if (sha)
        json_object_set_new(root, "sha256", json_string(sha));
    json_t *meta = json_object();
    for (uint64_t i = 0; i < gs_gguf_n_kv(g); i++) {
        const struct gs_gguf_kv *kv = gs_gguf_kv_at(g, i);
        json_t *key = json_str(kv->key);
        json_t *val;
        if (kv->type != GS_GGUF_ARRAY) {
            val = json_object();
            json_object_set_new(val, "type", json_string(gs_gguf_vtype_name(kv->type)));
            json_object_set_new(val, "value", json_scalar(kv));
        } else {
            val = json_object();
            json_object_set_new(val, "type", json_string("array"));
            json_object_set_new(val, "elem", json_string(gs_gguf_vtype_name(kv->v.arr.type)));
            json_object_set_new(val, "n", json_integer((json_int_t)kv->v.arr.n));
            json_t *head = json_array();
            for (uint64_t j = 0; j < kv->v.arr.n && j < ARRAY_HEAD; j++) {
                struct gs_gguf_kv e = gs_gguf_arr_get(kv, j);
                json_array_append_new(head, json_scalar(&e));
            }
            json_object_set_new(val, "head", head);
        }
        if (json_is_string(key))
            json_object_set_new(meta, json_string_value(key), val);
        else
            json_decref(val);
        json_decref(key);
    }
    json_object_set_new(root, "metadata", meta);
    json_t *tensors = json_array();
    for (uint64_t i = 0; i < gs_gguf_n_tensors(g); i++) {
        const struct gs_gguf_tensor *t = gs_gguf_tensor_at(g, i);
        json_t *shape = json_array();
        for (uint32_t d = 0; d < t->n_dims; d++)
            json_array_append_new(shape, json_integer(t->ne[d]));
        json_t *jt = json_object();
        json_object_set_new(jt, "name", json_str(t->name));
        json_object_set_new(jt, "type", json_string(gs_type_name(t->type)));
        json_object_set_new(jt, "shape", shape);
        json_object_set_new(jt, "offset", json_integer((json_int_t)t->offset));
        json_object_set_new(jt, "bytes", json_integer((json_int_t)t->nbytes));
        json_array_append_new(tensors, jt);
    }
    json_object_set_new(root, "tensors", tensors);
    return root;
}

int gs_cmd_inspect(int argc, char **argv)
{
    struct opts o = {0};
    struct gs_cli_args args;
    int prc = gs_cli_begin(&gs_inspect_spec, &o, argc, argv, &args);
    if (prc >= 0)
        return prc;
    const char *path = args.args[0];
    bool as_json = o.json, want_sha = o.sha256;

    struct gs_err err;
    struct gs_gguf *g;
    if (gs_gguf_open(path, &g, &err))
        return gs_cli_fail("inspect", "%s", err.msg);
    char hex[GS_SHA256_HEX_LEN];
    const char *sha = NULL;
    if (want_sha) {
        uint8_t d[GS_SHA256_BYTES];
        if (gs_sha256_file(path, d, &err)) {
            gs_gguf_close(g);
            return gs_cli_fail("inspect", "%s", err.msg);
        }
        gs_sha256_hex(d, hex);
        sha = hex;
    }
    if (as_json) {
        json_t *j = json_report(g, path, sha);
        json_dumpf(j, stdout, JSON_INDENT(1) | JSON_ENSURE_ASCII);
        putchar('\n');
        json_decref(j);
    } else {
        print_text(g, path, sha);
    }
    gs_gguf_close(g);
    return 0;
}
