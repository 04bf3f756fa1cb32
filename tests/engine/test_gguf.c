/*
 * tests/engine/test_gguf.c - the GGUF reader and writer.
 *
 * Every hostile-file case is a row of one table: a function crafts the file
 * (with the writer, or by patching the bytes of a valid file), and the row
 * says which status and which words the reader's message must contain. Each
 * row runs as its own test, and the whole table also runs under ASan+UBSan in
 * the sanitizer build.
 */
#define _GNU_SOURCE
#include "engine/gguf.h"
#include "tests/common/testutil.h"

#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- a small valid file -------------------------------------------------------- */

static float tensor_a[64];  /* [16, 4] f32 */
static uint8_t tensor_b[36]; /* [64, 1] q4_0: 2 blocks of 18 bytes */

static struct gs_gguf_writer *new_writer(const struct gs_gguf_writer_opts *opts)
{
    struct gs_gguf_writer *w;
    struct gs_err err;
    cr_assert_eq(gs_gguf_writer_new(opts, &w, &err), GS_OK);
    return w;
}

static void add_base_kvs(struct gs_gguf_writer *w)
{
    cr_assert_eq(gs_gguf_w_str(w, "general.architecture", "llama"), GS_OK);
    cr_assert_eq(gs_gguf_w_u32(w, "llama.block_count", 1), GS_OK);
    float scores[3] = {0.0f, -1.0f, -2.5f};
    cr_assert_eq(gs_gguf_w_arr(w, "tokenizer.ggml.scores", GS_GGUF_F32, scores, 3), GS_OK);
    const char *tokens[3] = {"<unk>", "a", "b"};
    cr_assert_eq(gs_gguf_w_arr_str(w, "tokenizer.ggml.tokens", tokens, 3), GS_OK);
}

static struct gs_gguf_w_tensor tensor_desc(const char *name, int32_t type, int64_t ne0,
                                           int64_t ne1, const void *data, uint64_t nbytes)
{
    struct gs_gguf_w_tensor t = {.name = name, .type = type, .n_dims = 2, .ne = {ne0, ne1, 1, 1},
                                 .data = data, .nbytes = nbytes};
    return t;
}

static void add_base_tensors(struct gs_gguf_writer *w)
{
    struct gs_gguf_w_tensor a = tensor_desc("a", GS_TYPE_F32, 16, 4, tensor_a, sizeof(tensor_a));
    struct gs_gguf_w_tensor b = tensor_desc("b", GS_TYPE_Q4_0, 64, 1, tensor_b, sizeof(tensor_b));
    cr_assert_eq(gs_gguf_w_tensor(w, &a), GS_OK);
    cr_assert_eq(gs_gguf_w_tensor(w, &b), GS_OK);
}

static void *to_mem(struct gs_gguf_writer *w, size_t *len)
{
    void *buf;
    struct gs_err err;
    cr_assert_eq(gs_gguf_writer_to_mem(w, &buf, len, &err), GS_OK);
    gs_gguf_writer_free(w);
    return buf;
}

static void *valid_file(size_t *len)
{
    struct gs_gguf_writer *w = new_writer(NULL);
    add_base_kvs(w);
    add_base_tensors(w);
    return to_mem(w, len);
}

/* Points at the u64 length that precedes the first occurrence of a string. */
static uint8_t *len_before(uint8_t *buf, size_t len, const char *s)
{
    uint8_t *p = memmem(buf, len, s, strlen(s));
    cr_assert(p && p - buf >= 8, "string '%s' not found in crafted file", s);
    return p - 8;
}

static void put_u64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, 8);
}

static void put_u32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, 4);
}

/* ---- crafted hostile files ------------------------------------------------------ */

typedef void *(*craft_fn)(size_t *len);

static void *bad_magic(size_t *len)
{
    uint8_t *b = valid_file(len);
    memcpy(b, "GGUX", 4);
    return b;
}

static void *version_1(size_t *len)
{
    uint8_t *b = valid_file(len);
    put_u32(b + 4, 1);
    return b;
}

static void *version_99(size_t *len)
{
    uint8_t *b = valid_file(len);
    put_u32(b + 4, 99);
    return b;
}

static void *empty_file(size_t *len)
{
    *len = 0;
    return malloc(1);
}

static void *truncated_header(size_t *len)
{
    uint8_t *b = valid_file(len);
    *len = 12;
    return b;
}

static void *n_kv_huge(size_t *len)
{
    uint8_t *b = valid_file(len);
    put_u64(b + 16, UINT64_MAX / 2);
    return b;
}

static void *n_tensors_huge(size_t *len)
{
    uint8_t *b = valid_file(len);
    put_u64(b + 8, 1ull << 40);
    return b;
}

static void *key_length_past_eof(size_t *len)
{
    uint8_t *b = valid_file(len);
    put_u64(len_before(b, *len, "general.architecture"), UINT64_MAX - 3);
    return b;
}

static void *string_value_past_eof(size_t *len)
{
    uint8_t *b = valid_file(len);
    put_u64(len_before(b, *len, "llama"), (uint64_t)*len);
    return b;
}

static void *array_length_overflows(size_t *len)
{
    uint8_t *b = valid_file(len);
    /* scores: key, u32 type, u32 elem type, u64 n: n sits 8 bytes after the key */
    uint8_t *k = memmem(b, *len, "tokenizer.ggml.scores", 21);
    cr_assert(k);
    put_u64(k + 21 + 8, (1ull << 62) + 1); /* 4 * n wraps around 2^64 */
    return b;
}

static void *string_array_count_huge(size_t *len)
{
    uint8_t *b = valid_file(len);
    uint8_t *k = memmem(b, *len, "tokenizer.ggml.tokens", 21);
    cr_assert(k);
    put_u64(k + 21 + 8, UINT64_MAX);
    return b;
}

static void *string_in_array_past_eof(size_t *len)
{
    uint8_t *b = valid_file(len);
    put_u64(len_before(b, *len, "<unk>"), 1ull << 50);
    return b;
}

static void *unknown_value_type(size_t *len)
{
    uint8_t *b = valid_file(len);
    uint8_t *k = memmem(b, *len, "llama.block_count", 17);
    cr_assert(k);
    put_u32(k + 17, 99);
    return b;
}

static void *unknown_array_elem_type(size_t *len)
{
    uint8_t *b = valid_file(len);
    uint8_t *k = memmem(b, *len, "tokenizer.ggml.scores", 21);
    cr_assert(k);
    put_u32(k + 21 + 4, 77);
    return b;
}

static void *bool_not_0_or_1(size_t *len)
{
    struct gs_gguf_writer *w = new_writer(NULL);
    uint8_t two = 2;
    gs_gguf_w_raw(w, "tokenizer.ggml.add_bos_token", GS_GGUF_BOOL, &two, 1);
    return to_mem(w, len);
}

static void *nested_array(size_t *len)
{
    struct gs_gguf_writer *w = new_writer(NULL);
    /* element type ARRAY, count 1, then an inner array header */
    uint8_t inner[4 + 8 + 4 + 8] = {0};
    put_u32(inner, GS_GGUF_ARRAY);
    put_u64(inner + 4, 1);
    put_u32(inner + 12, GS_GGUF_U8);
    put_u64(inner + 16, 0);
    gs_gguf_w_raw(w, "x.nested", GS_GGUF_ARRAY, inner, sizeof(inner));
    return to_mem(w, len);
}

static void *duplicate_key(size_t *len)
{
    struct gs_gguf_writer *w = new_writer(NULL);
    add_base_kvs(w);
    gs_gguf_w_u32(w, "llama.block_count", 2);
    return to_mem(w, len);
}

static void *duplicate_tensor(size_t *len)
{
    struct gs_gguf_writer *w = new_writer(NULL);
    add_base_kvs(w);
    add_base_tensors(w);
    struct gs_gguf_w_tensor a = tensor_desc("a", GS_TYPE_F32, 16, 4, tensor_a, sizeof(tensor_a));
    gs_gguf_w_tensor(w, &a);
    return to_mem(w, len);
}

static void *scores_as_u8(size_t *len)
{
    struct gs_gguf_writer *w = new_writer(NULL);
    uint8_t scores[3] = {1, 2, 3};
    gs_gguf_w_arr(w, "tokenizer.ggml.scores", GS_GGUF_U8, scores, 3);
    return to_mem(w, len);
}

static void *architecture_as_u32(size_t *len)
{
    struct gs_gguf_writer *w = new_writer(NULL);
    gs_gguf_w_u32(w, "general.architecture", 7);
    return to_mem(w, len);
}

static void *eps_as_string(size_t *len)
{
    struct gs_gguf_writer *w = new_writer(NULL);
    gs_gguf_w_str(w, "llama.attention.layer_norm_rms_epsilon", "1e-5");
    return to_mem(w, len);
}

static void *head_count_as_floats(size_t *len)
{
    struct gs_gguf_writer *w = new_writer(NULL);
    float heads[2] = {4, 4};
    gs_gguf_w_arr(w, "llama.attention.head_count", GS_GGUF_F32, heads, 2);
    return to_mem(w, len);
}

static void *alignment_zero(size_t *len)
{
    struct gs_gguf_writer *w = new_writer(NULL);
    gs_gguf_w_u32(w, "general.alignment", 0);
    return to_mem(w, len);
}

static void *alignment_not_pow2(size_t *len)
{
    struct gs_gguf_writer *w = new_writer(NULL);
    gs_gguf_w_u32(w, "general.alignment", 48);
    return to_mem(w, len);
}

static void *alignment_wrong_type(size_t *len)
{
    struct gs_gguf_writer *w = new_writer(NULL);
    gs_gguf_w_u64(w, "general.alignment", 32);
    return to_mem(w, len);
}

static void *with_tensor(size_t *len, struct gs_gguf_w_tensor t)
{
    struct gs_gguf_writer *w = new_writer(NULL);
    add_base_kvs(w);
    cr_assert_eq(gs_gguf_w_tensor(w, &t), GS_OK);
    return to_mem(w, len);
}

static void *n_dims_zero(size_t *len)
{
    struct gs_gguf_w_tensor t = tensor_desc("t", GS_TYPE_F32, 16, 4, tensor_a, sizeof(tensor_a));
    t.n_dims = 0;
    return with_tensor(len, t);
}

static void *n_dims_five(size_t *len)
{
    uint8_t *b = valid_file(len);
    /* tensor "a": name, then u32 n_dims */
    uint8_t *p = len_before(b, *len, "a\x02\x00\x00\x00") + 8 + 1;
    put_u32(p, 5);
    return b;
}

static void *dim_zero(size_t *len)
{
    struct gs_gguf_w_tensor t = tensor_desc("t", GS_TYPE_F32, 16, 0, tensor_a, 0);
    return with_tensor(len, t);
}

static void *dims_overflow(size_t *len)
{
    struct gs_gguf_w_tensor t =
        tensor_desc("t", GS_TYPE_F32, INT64_C(1) << 40, INT64_C(1) << 40, tensor_a, 64);
    return with_tensor(len, t);
}

static void *bytes_overflow(size_t *len)
{
    /* 2^62 f32 elements: the count fits in int64, 4 bytes each does not fit in u64 */
    struct gs_gguf_w_tensor t =
        tensor_desc("t", GS_TYPE_F32, INT64_C(1) << 31, INT64_C(1) << 31, tensor_a, 64);
    return with_tensor(len, t);
}

static void *unknown_tensor_type(size_t *len)
{
    struct gs_gguf_w_tensor t = tensor_desc("t", 200, 16, 4, tensor_a, sizeof(tensor_a));
    return with_tensor(len, t);
}

static void *removed_tensor_type(size_t *len)
{
    struct gs_gguf_w_tensor t = tensor_desc("t", 4, 32, 1, tensor_a, 20);
    return with_tensor(len, t);
}

static void *iquant_tensor(size_t *len)
{
    struct gs_gguf_w_tensor t = tensor_desc("t", GS_TYPE_IQ2_XXS, 256, 1, tensor_a, 66);
    return with_tensor(len, t);
}

static void *row_not_block_multiple(size_t *len)
{
    struct gs_gguf_w_tensor t = tensor_desc("t", GS_TYPE_Q4_0, 33, 1, tensor_b, 18);
    return with_tensor(len, t);
}

static void *data_past_eof(size_t *len)
{
    /* claims 16x4 f32 (256 bytes) but stores 64 */
    struct gs_gguf_w_tensor t = tensor_desc("t", GS_TYPE_F32, 16, 4, tensor_a, 64);
    return with_tensor(len, t);
}

static void *offset_unaligned(size_t *len)
{
    uint64_t off = 4;
    struct gs_gguf_w_tensor t = tensor_desc("t", GS_TYPE_F32, 16, 4, tensor_a, sizeof(tensor_a));
    t.offset_override = &off;
    return with_tensor(len, t);
}

static void *offset_past_eof(size_t *len)
{
    uint64_t off = 1ull << 40;
    struct gs_gguf_w_tensor t = tensor_desc("t", GS_TYPE_F32, 16, 4, tensor_a, sizeof(tensor_a));
    t.offset_override = &off;
    return with_tensor(len, t);
}

static void *offset_wraps(size_t *len)
{
    uint64_t off = UINT64_MAX - 31; /* aligned, and offset + size wraps around */
    struct gs_gguf_w_tensor t = tensor_desc("t", GS_TYPE_F32, 16, 4, tensor_a, sizeof(tensor_a));
    t.offset_override = &off;
    return with_tensor(len, t);
}

static void *overlapping_tensors(size_t *len)
{
    struct gs_gguf_writer *w = new_writer(NULL);
    add_base_kvs(w);
    add_base_tensors(w); /* a at 0 (256 bytes), b at 256 */
    uint64_t off = 128;
    struct gs_gguf_w_tensor c = tensor_desc("c", GS_TYPE_F32, 16, 1, tensor_a, 64);
    c.offset_override = &off;
    gs_gguf_w_tensor(w, &c);
    return to_mem(w, len);
}

static void *empty_tensor_name(size_t *len)
{
    struct gs_gguf_w_tensor t = tensor_desc("", GS_TYPE_F32, 16, 4, tensor_a, sizeof(tensor_a));
    return with_tensor(len, t);
}

struct hostile_case {
    const char *name;
    craft_fn craft;
    enum gs_status code;
    const char *must_say; /* a substring of the message */
};

static struct hostile_case hostile_cases[] = {
    {"bad magic", bad_magic, GS_FORMAT, "header magic"},
    {"version 1", version_1, GS_UNSUPPORTED, "header version"},
    {"version 99", version_99, GS_FORMAT, "header version: 99"},
    {"empty file", empty_file, GS_FORMAT, "header magic: file truncated"},
    {"truncated header", truncated_header, GS_FORMAT, "header n_tensors: file truncated"},
    {"n_kv huge", n_kv_huge, GS_FORMAT, "header n_kv"},
    {"n_tensors huge", n_tensors_huge, GS_FORMAT, "header n_tensors"},
    {"key length past eof", key_length_past_eof, GS_FORMAT, "metadata entry 0 key: string length"},
    {"string value past eof", string_value_past_eof, GS_FORMAT,
     "metadata 'general.architecture': string length"},
    {"array length overflows", array_length_overflows, GS_FORMAT,
     "metadata 'tokenizer.ggml.scores': array of"},
    {"string array count huge", string_array_count_huge, GS_FORMAT,
     "metadata 'tokenizer.ggml.tokens': array of 18446744073709551615 strings"},
    {"string in array past eof", string_in_array_past_eof, GS_FORMAT,
     "element 0: metadata 'tokenizer.ggml.tokens': string length"},
    {"unknown value type", unknown_value_type, GS_FORMAT,
     "metadata 'llama.block_count': unknown value type 99"},
    {"unknown array element type", unknown_array_elem_type, GS_FORMAT,
     "unknown array element type 77"},
    {"bool not 0 or 1", bool_not_0_or_1, GS_FORMAT, "bool value 2"},
    {"nested array", nested_array, GS_FORMAT, "metadata 'x.nested': nested arrays"},
    {"duplicate key", duplicate_key, GS_FORMAT, "metadata 'llama.block_count': duplicate key"},
    {"duplicate tensor", duplicate_tensor, GS_FORMAT, "tensor 'a': duplicate tensor name"},
    {"scores as u8", scores_as_u8, GS_FORMAT,
     "metadata 'tokenizer.ggml.scores': expected an array of f32, found array of u8"},
    {"architecture as u32", architecture_as_u32, GS_FORMAT,
     "metadata 'general.architecture': expected a string, found u32"},
    {"eps as string", eps_as_string, GS_FORMAT,
     "metadata 'llama.attention.layer_norm_rms_epsilon': expected a float"},
    {"head_count as f32 array", head_count_as_floats, GS_FORMAT,
     "'llama.attention.head_count': expected an integer or an array of integers, found array"},
    {"alignment zero", alignment_zero, GS_FORMAT, "'general.alignment': 0 is not a power of two"},
    {"alignment 48", alignment_not_pow2, GS_FORMAT,
     "'general.alignment': 48 is not a power of two"},
    {"alignment as u64", alignment_wrong_type, GS_FORMAT,
     "'general.alignment': expected u32, found u64"},
    {"n_dims 0", n_dims_zero, GS_FORMAT, "tensor 't': n_dims 0"},
    {"n_dims 5", n_dims_five, GS_FORMAT, "tensor 'a': n_dims 5"},
    {"dim 0", dim_zero, GS_FORMAT, "tensor 't': dim 1 is 0"},
    {"dims overflow", dims_overflow, GS_FORMAT, "tensor 't': element count overflows"},
    {"bytes overflow", bytes_overflow, GS_FORMAT, "tensor 't': byte size overflows"},
    {"unknown tensor type", unknown_tensor_type, GS_FORMAT, "tensor 't': unknown tensor type 200"},
    {"removed tensor type", removed_tensor_type, GS_FORMAT, "tensor 't': unknown tensor type 4"},
    {"i-quant tensor", iquant_tensor, GS_UNSUPPORTED,
     "tensor 't': type iq2_xxs is not supported yet"},
    {"row not block multiple", row_not_block_multiple, GS_FORMAT,
     "tensor 't': row length 33 is not a multiple of the q4_0 block size 32"},
    {"data past eof", data_past_eof, GS_FORMAT, "tensor 't': data [0, +256) extends past the end"},
    {"offset unaligned", offset_unaligned, GS_FORMAT,
     "tensor 't': data offset 4 is not a multiple of the alignment 32"},
    {"offset past eof", offset_past_eof, GS_FORMAT, "tensor 't': data [1099511627776, +256)"},
    {"offset wraps", offset_wraps, GS_FORMAT, "extends past the end"},
    {"overlapping tensors", overlapping_tensors, GS_FORMAT, "data overlaps tensor"},
    {"empty tensor name", empty_tensor_name, GS_FORMAT, "tensor 0: empty name"},
};

#define N_HOSTILE (sizeof(hostile_cases) / sizeof(hostile_cases[0]))

/* Criterion runs each parameter in a fresh process, where pointers inside a
 * parameter are not valid: the parameter is the row's index. */
ParameterizedTestParameters(gguf_reader, rejects_hostile_file)
{
    static int rows[N_HOSTILE];
    for (size_t i = 0; i < N_HOSTILE; i++)
        rows[i] = (int)i;
    return cr_make_param_array(int, rows, N_HOSTILE);
}

ParameterizedTest(int *row, gguf_reader, rejects_hostile_file)
{
    const struct hostile_case *c = &hostile_cases[*row];
    size_t len = 0;
    void *buf = c->craft(&len);
    struct gs_gguf *g = (struct gs_gguf *)0x1;
    struct gs_err err;
    gs_err_clear(&err);
    enum gs_status rc = gs_gguf_open_mem(buf, len, &g, &err);
    cr_expect_eq(rc, c->code, "%s: expected %s, got %s (%s)", c->name, gs_status_str(c->code),
                 gs_status_str(rc), err.msg);
    cr_expect_null(g, "%s: *out must be NULL on failure", c->name);
    cr_expect(strstr(err.msg, c->must_say), "%s: message '%s' should say '%s'", c->name, err.msg,
              c->must_say);
    free(buf);
}

/* Every prefix of a valid file is refused cleanly: no crash, no leak, no read
 * past the end (the sanitizer build checks the last two). */
Test(gguf_reader, rejects_every_truncation)
{
    size_t len;
    uint8_t *full = valid_file(&len);
    for (size_t n = 0; n < len; n++) {
        uint8_t *b = malloc(n ? n : 1);
        memcpy(b, full, n);
        struct gs_gguf *g;
        struct gs_err err;
        enum gs_status rc = gs_gguf_open_mem(b, n, &g, &err);
        cr_assert_neq(rc, GS_OK, "a %zu-byte prefix of a %zu-byte file was accepted", n, len);
        cr_assert(strlen(err.msg) > 0);
        free(b);
    }
    free(full);
}

/* Flipping any single byte of the header region never crashes the reader:
 * each result is either a clean refusal or a file that still validates. */
Test(gguf_reader, survives_single_byte_corruption)
{
    size_t len;
    uint8_t *full = valid_file(&len);
    size_t header = len - sizeof(tensor_a) - sizeof(tensor_b);
    for (size_t i = 0; i < header; i++) {
        for (int v = 0; v < 3; v++) {
            static const uint8_t vals[3] = {0x00, 0xff, 0x80};
            uint8_t *b = malloc(len);
            memcpy(b, full, len);
            b[i] = vals[v];
            struct gs_gguf *g;
            struct gs_err err;
            if (gs_gguf_open_mem(b, len, &g, &err) == GS_OK) {
                for (uint64_t t = 0; t < gs_gguf_n_tensors(g); t++) {
                    const struct gs_gguf_tensor *ti = gs_gguf_tensor_at(g, t);
                    const uint8_t *d = ti->data;
                    cr_assert(d >= b && d + ti->nbytes <= b + len);
                }
                gs_gguf_close(g);
            }
            free(b);
        }
    }
    free(full);
}

/* Allocation failures at every point of open are reported, never crash or leak. */
Test(gguf_reader, reports_every_allocation_failure)
{
    size_t len;
    uint8_t *b = valid_file(&len);
    for (long n = 0;; n++) {
        struct gs_gguf *g;
        struct gs_err err;
        gs_alloc_fail_after(n);
        enum gs_status rc = gs_gguf_open_mem(b, len, &g, &err);
        gs_alloc_fail_after(-1);
        if (rc == GS_OK) {
            gs_gguf_close(g);
            cr_assert_gt(n, 0);
            break;
        }
        cr_assert_eq(rc, GS_NOMEM, "allocation %ld failing gave %s: %s", n, gs_status_str(rc),
                     err.msg);
    }
    free(b);
}

/* ---- round trips -------------------------------------------------------------------- */

Test(gguf_writer, round_trips_every_value_type)
{
    struct gs_gguf_writer_opts opts = {.alignment = 64};
    struct gs_gguf_writer *w = new_writer(&opts);
    gs_gguf_w_u32(w, "general.alignment", 64);
    int8_t i8 = -5;
    uint16_t u16 = 65535;
    int16_t i16 = -32768;
    int64_t i64 = INT64_MIN;
    double f64 = 1.0 / 3.0;
    uint8_t u8 = 200;
    gs_gguf_w_raw(w, "t.u8", GS_GGUF_U8, &u8, 1);
    gs_gguf_w_raw(w, "t.i8", GS_GGUF_I8, &i8, 1);
    gs_gguf_w_raw(w, "t.u16", GS_GGUF_U16, &u16, 2);
    gs_gguf_w_raw(w, "t.i16", GS_GGUF_I16, &i16, 2);
    gs_gguf_w_u32(w, "t.u32", 4000000000u);
    gs_gguf_w_i32(w, "t.i32", -7);
    gs_gguf_w_f32(w, "t.f32", 0.25f);
    gs_gguf_w_bool(w, "t.bool", true);
    gs_gguf_w_str(w, "t.str", "héllo");
    gs_gguf_w_u64(w, "t.u64", UINT64_MAX);
    gs_gguf_w_raw(w, "t.i64", GS_GGUF_I64, &i64, 8);
    gs_gguf_w_raw(w, "t.f64", GS_GGUF_F64, &f64, 8);
    int32_t ints[4] = {1, -2, 3, -4};
    gs_gguf_w_arr(w, "t.arr_i32", GS_GGUF_I32, ints, 4);
    const char *strs[2] = {"x", ""};
    gs_gguf_w_arr_str(w, "t.arr_str", strs, 2);
    const char nul_str[3] = {'a', 0, 'b'};
    const char *nul_strs[1] = {nul_str};
    uint64_t nul_len = 3;
    gs_gguf_w_arr_strn(w, "t.arr_nul", nul_strs, &nul_len, 1);
    add_base_tensors(w);
    size_t len;
    void *buf = to_mem(w, &len);

    struct gs_gguf *g;
    struct gs_err err;
    cr_assert_eq(gs_gguf_open_mem(buf, len, &g, &err), GS_OK, "%s", err.msg);
    cr_assert_eq(gs_gguf_version(g), 3);
    cr_assert_eq(gs_gguf_alignment(g), 64);
    cr_assert_eq(gs_gguf_data_offset(g) % 64, 0);
    cr_assert_eq(gs_gguf_find_kv(g, "t.u8")->v.u64, 200);
    cr_assert_eq(gs_gguf_find_kv(g, "t.i8")->v.i64, -5);
    cr_assert_eq(gs_gguf_find_kv(g, "t.u16")->v.u64, 65535);
    cr_assert_eq(gs_gguf_find_kv(g, "t.i16")->v.i64, -32768);
    cr_assert_eq(gs_gguf_find_kv(g, "t.i64")->v.i64, INT64_MIN);
    cr_assert_eq(gs_gguf_find_kv(g, "t.f64")->v.f64, 1.0 / 3.0);
    uint32_t u32;
    int64_t s64;
    uint64_t u64;
    float f32;
    bool bl;
    struct gs_gguf_str s;
    cr_assert_eq(gs_gguf_get_u32(g, "t.u32", &u32, &err), GS_OK);
    cr_assert_eq(u32, 4000000000u);
    cr_assert_eq(gs_gguf_get_i64(g, "t.i32", &s64, &err), GS_OK);
    cr_assert_eq(s64, -7);
    cr_assert_eq(gs_gguf_get_u64(g, "t.u64", &u64, &err), GS_OK);
    cr_assert_eq(u64, UINT64_MAX);
    cr_assert_eq(gs_gguf_get_f32(g, "t.f32", &f32, &err), GS_OK);
    cr_assert_eq(f32, 0.25f);
    cr_assert_eq(gs_gguf_get_bool(g, "t.bool", &bl, &err), GS_OK);
    cr_assert(bl);
    cr_assert_eq(gs_gguf_get_str(g, "t.str", &s, &err), GS_OK);
    cr_assert(gs_gguf_str_eq(s, "héllo"));
    const struct gs_gguf_kv *arr;
    cr_assert_eq(gs_gguf_get_arr(g, "t.arr_i32", GS_GGUF_I32, &arr, &err), GS_OK);
    cr_assert_eq(arr->v.arr.n, 4);
    cr_assert_eq(gs_gguf_arr_i32(arr, 3), -4);
    struct gs_gguf_kv e = gs_gguf_arr_get(arr, 3);
    cr_assert_eq(e.type, GS_GGUF_I32);
    cr_assert_eq(e.v.i64, -4, "array elements are sign-extended like scalars");
    cr_assert_eq(gs_gguf_get_arr(g, "t.arr_str", GS_GGUF_STRING, &arr, &err), GS_OK);
    cr_assert(gs_gguf_str_eq(arr->v.arr.strs[0], "x"));
    cr_assert(gs_gguf_str_eq(gs_gguf_arr_get(arr, 0).v.str, "x"));
    cr_assert_eq(arr->v.arr.strs[1].len, 0);
    cr_assert_eq(gs_gguf_get_arr(g, "t.arr_nul", GS_GGUF_STRING, &arr, &err), GS_OK);
    cr_assert_eq(arr->v.arr.strs[0].len, 3);
    cr_assert_eq(memcmp(arr->v.arr.strs[0].data, nul_str, 3), 0);

    /* getters refuse what cannot represent the request, naming the key */
    cr_assert_eq(gs_gguf_get_u32(g, "t.u64", &u32, &err), GS_FORMAT);
    cr_assert(strstr(err.msg, "'t.u64'"));
    cr_assert_eq(gs_gguf_get_u64(g, "t.i32", &u64, &err), GS_FORMAT);
    cr_assert_eq(gs_gguf_get_i64(g, "t.u64", &s64, &err), GS_FORMAT);
    cr_assert_eq(gs_gguf_get_str(g, "t.u32", &s, &err), GS_FORMAT);
    cr_assert_eq(gs_gguf_get_f32(g, "missing.key", &f32, &err), GS_NOTFOUND);
    cr_assert(strstr(err.msg, "'missing.key': missing"));
    cr_assert_eq(gs_gguf_get_arr(g, "t.arr_i32", GS_GGUF_F32, &arr, &err), GS_FORMAT);

    const struct gs_gguf_tensor *ta = gs_gguf_find_tensor(g, "a");
    const struct gs_gguf_tensor *tb = gs_gguf_find_tensor(g, "b");
    cr_assert_not_null(ta);
    cr_assert_not_null(tb);
    cr_assert_null(gs_gguf_find_tensor(g, "c"));
    cr_assert_eq(ta->ne[0], 16);
    cr_assert_eq(ta->ne[1], 4);
    cr_assert_eq(ta->nbytes, 256);
    cr_assert_eq(tb->type, GS_TYPE_Q4_0);
    cr_assert_eq(tb->nbytes, 36);
    cr_assert_eq(((uintptr_t)ta->data - (uintptr_t)buf) % 64, 0);
    cr_assert_eq(memcmp(ta->data, tensor_a, sizeof(tensor_a)), 0);
    gs_gguf_close(g);
    free(buf);
}

Test(gguf_writer, writes_version_2_files_the_reader_accepts)
{
    struct gs_gguf_writer_opts opts = {.version = 2};
    struct gs_gguf_writer *w = new_writer(&opts);
    add_base_kvs(w);
    add_base_tensors(w);
    size_t len;
    void *buf = to_mem(w, &len);
    struct gs_gguf *g;
    struct gs_err err;
    cr_assert_eq(gs_gguf_open_mem(buf, len, &g, &err), GS_OK, "%s", err.msg);
    cr_assert_eq(gs_gguf_version(g), 2);
    gs_gguf_close(g);
    free(buf);
}

Test(gguf_writer, file_and_memory_outputs_are_identical)
{
    struct gs_gguf_writer *w = new_writer(NULL);
    add_base_kvs(w);
    add_base_tensors(w);
    char path[4200];
    snprintf(path, sizeof(path), "%s/x.gguf", gs_test_tmpdir());
    struct gs_err err;
    cr_assert_eq(gs_gguf_writer_to_file(w, path, &err), GS_OK, "%s", err.msg);
    void *mem;
    size_t mem_len, file_len;
    cr_assert_eq(gs_gguf_writer_to_mem(w, &mem, &mem_len, &err), GS_OK);
    gs_gguf_writer_free(w);
    void *file = gs_test_read_file(path, &file_len);
    cr_assert_eq(file_len, mem_len);
    cr_assert_eq(memcmp(file, mem, mem_len), 0);
    free(file);
    gs_free(mem);
}

/* A NUL-terminated copy of a file string, in a static buffer. */
static const char *gs_test_str(struct gs_gguf_str s)
{
    static char buf[512];
    cr_assert_lt(s.len, sizeof(buf));
    memcpy(buf, s.data, s.len);
    buf[s.len] = '\0';
    return buf;
}

/* ---- real files ------------------------------------------------------------------------ */

static const char *const real_models[] = {
    "models/stories260K.gguf",         "models/stories260K-F16.gguf",
    "models/stories260K-Q4_0.gguf",    "models/stories260K-Q4_1.gguf",
    "models/stories260K-Q5_0.gguf",    "models/stories260K-Q5_1.gguf",
    "models/stories260K-Q8_0.gguf",    "models/stories260K-Q4_K_M-fallback.gguf",
    "models/tiny-k-F32.gguf",          "models/tiny-k-Q2_K.gguf",
    "models/tiny-k-Q3_K_M.gguf",       "models/tiny-k-Q4_K.gguf",
    "models/tiny-k-Q4_K_M.gguf",       "models/tiny-k-Q5_K.gguf",
    "models/tiny-k-Q5_K_M.gguf",       "models/tiny-k-Q6_K.gguf",
    "models/tiny-k-Q8_0.gguf",         "models/llama-2-tiny-random.gguf",
    "models/vocab/ggml-vocab-llama-spm.gguf", "models/vocab/ggml-vocab-gpt-2.gguf",
};

/* Every model shipped with the project opens, and its tensors are views into
 * the mapping (zero-copy), not copies. */
Test(gguf_reader, opens_every_shared_model_zero_copy)
{
    for (size_t i = 0; i < sizeof(real_models) / sizeof(real_models[0]); i++) {
        const char *path = gs_test_shared_path(real_models[i]);
        struct gs_gguf *g;
        struct gs_err err;
        cr_assert_eq(gs_gguf_open(path, &g, &err), GS_OK, "%s", err.msg);
        const uint8_t *base = gs_gguf_file_data(g);
        uint64_t size = gs_gguf_file_bytes(g);
        for (uint64_t t = 0; t < gs_gguf_n_tensors(g); t++) {
            const struct gs_gguf_tensor *ti = gs_gguf_tensor_at(g, t);
            const uint8_t *d = ti->data;
            cr_assert(d >= base + gs_gguf_data_offset(g) && d + ti->nbytes <= base + size);
            cr_assert_eq(gs_gguf_find_tensor(g, gs_test_str(ti->name)), ti);
        }
        struct gs_gguf_str arch;
        cr_assert_eq(gs_gguf_get_str(g, "general.architecture", &arch, &err), GS_OK, "%s", path);
        gs_gguf_close(g);
    }
}

Test(gguf_reader, reads_stories260K_header)
{
    struct gs_gguf *g;
    struct gs_err err;
    cr_assert_eq(gs_gguf_open(gs_test_shared_path("models/stories260K.gguf"), &g, &err), GS_OK,
                 "%s", err.msg);
    uint32_t n_embd, n_layer;
    cr_assert_eq(gs_gguf_get_u32(g, "llama.embedding_length", &n_embd, &err), GS_OK);
    cr_assert_eq(gs_gguf_get_u32(g, "llama.block_count", &n_layer, &err), GS_OK);
    cr_assert_eq(n_embd, 64);
    cr_assert_eq(n_layer, 5);
    const struct gs_gguf_kv *tokens;
    cr_assert_eq(gs_gguf_get_arr(g, "tokenizer.ggml.tokens", GS_GGUF_STRING, &tokens, &err),
                 GS_OK);
    cr_assert_eq(tokens->v.arr.n, 512);
    const struct gs_gguf_tensor *emb = gs_gguf_find_tensor(g, "token_embd.weight");
    cr_assert_not_null(emb);
    cr_assert_eq(emb->ne[0], 64);
    cr_assert_eq(emb->ne[1], 512);
    cr_assert_eq(emb->type, GS_TYPE_F32);
    gs_gguf_close(g);
}

/* Per-layer hyperparameters (one value per layer) are a legal form. */
Test(gguf_reader, accepts_per_layer_integer_arrays)
{
    struct gs_gguf_writer *w = new_writer(NULL);
    int32_t ff[3] = {128, 256, 128};
    gs_gguf_w_arr(w, "x.feed_forward_length", GS_GGUF_I32, ff, 3);
    gs_gguf_w_u32(w, "x.attention.head_count", 4);
    size_t len;
    void *buf = to_mem(w, &len);
    struct gs_gguf *g;
    struct gs_err err;
    cr_assert_eq(gs_gguf_open_mem(buf, len, &g, &err), GS_OK, "%s", err.msg);
    gs_gguf_close(g);
    free(buf);
    cr_assert_eq(gs_gguf_open(gs_test_shared_path("models/arch/gemma3n-tiny-F32.gguf"), &g, &err),
                 GS_OK, "%s", err.msg);
    gs_gguf_close(g);
}

Test(gguf_reader, reports_missing_file_and_directory)
{
    struct gs_gguf *g;
    struct gs_err err;
    cr_assert_eq(gs_gguf_open("/nonexistent/model.gguf", &g, &err), GS_IO);
    cr_assert(strstr(err.msg, "/nonexistent/model.gguf"));
    cr_assert_eq(gs_gguf_open("/", &g, &err), GS_IO);
    cr_assert(strstr(err.msg, "is a directory"), "%s", err.msg);
}
