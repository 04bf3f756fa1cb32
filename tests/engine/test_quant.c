/*
 * tests/engine/test_quant.c - the type traits table and the reference
 * (de)quantizers of engine/quant.h.
 *
 * Every check loops over the traits table (or over a per-type row of expected
 * properties) instead of repeating itself per format. The expected geometry
 * below is the GGUF on-disk format as ggml defines it, not our own output.
 *
 * Against llama.cpp: dequantization must equal ggml's floats bit for bit (the
 * shared goldens), the shared quantized models must dequantize to within each
 * format's error of their f32 originals, and quantizing those originals must
 * give back llama.cpp's bytes.
 */
#include "engine/gguf.h"
#include "engine/quant.h"
#include "tests/common/testutil.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ---------------------------------------------------------------- */

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* Deterministic generator (xorshift64*) so that failures reproduce. */
struct rng {
    uint64_t s;
};

static uint64_t rng_next(struct rng *r)
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545F4914F6CDD1DULL;
}

static double rng_uniform(struct rng *r) /* (0, 1) */
{
    return ((double)(rng_next(r) >> 11) + 0.5) / 9007199254740992.0;
}

static float rng_gauss(struct rng *r)
{
    return (float)(sqrt(-2.0 * log(rng_uniform(r))) * cos(6.283185307179586 * rng_uniform(r)));
}

/* Relative RMS error of y against x: sqrt(sum (y-x)^2 / sum x^2). */
static double rel_rmse(const float *x, const float *y, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        num += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        den += (double)x[i] * x[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static size_t buf_bytes(enum gs_type t, int64_t n)
{
    uint64_t bytes;
    cr_assert_eq(gs_type_row_bytes(t, n, &bytes), GS_OK, "%s: row of %lld", gs_type_name(t),
                 (long long)n);
    return (size_t)bytes;
}

/* Quantizes x[0..n) to t and back into y; returns the relative RMS error. */
static double round_trip(enum gs_type t, const float *x, float *y, int64_t n)
{
    void *q = malloc(buf_bytes(t, n));
    cr_assert(q);
    cr_assert_eq(gs_quantize(t, x, q, n), GS_OK, "%s: quantize", gs_type_name(t));
    cr_assert_eq(gs_dequantize(t, q, y, n), GS_OK, "%s: dequantize", gs_type_name(t));
    free(q);
    return rel_rmse(x, y, n);
}

/* ---- the table ----------------------------------------------------------------- */

/* The GGUF type ids with ggml's name and block geometry (ggml-common.h), and
 * whether graphserve implements them. */
static const struct {
    int32_t id;
    const char *name;
    int32_t block_size, block_bytes;
    bool supported;
} expected_types[] = {
    {0, "f32", 1, 4, true},          {1, "f16", 1, 2, true},
    {2, "q4_0", 32, 18, true},       {3, "q4_1", 32, 20, true},
    {6, "q5_0", 32, 22, true},       {7, "q5_1", 32, 24, true},
    {8, "q8_0", 32, 34, true},       {9, "q8_1", 32, 36, true},
    {10, "q2_K", 256, 84, true},     {11, "q3_K", 256, 110, true},
    {12, "q4_K", 256, 144, true},    {13, "q5_K", 256, 176, true},
    {14, "q6_K", 256, 210, true},    {15, "q8_K", 256, 292, true},
    {16, "iq2_xxs", 256, 66, false}, {17, "iq2_xs", 256, 74, false},
    {18, "iq3_xxs", 256, 98, false}, {19, "iq1_s", 256, 50, false},
    {20, "iq4_nl", 32, 18, false},   {21, "iq3_s", 256, 110, false},
    {22, "iq2_s", 256, 82, false},   {23, "iq4_xs", 256, 136, false},
    {24, "i8", 1, 1, false},         {25, "i16", 1, 2, false},
    {26, "i32", 1, 4, false},        {27, "i64", 1, 8, false},
    {28, "f64", 1, 8, false},        {29, "iq1_m", 256, 56, false},
    {30, "bf16", 1, 2, true},        {34, "tq1_0", 256, 54, false},
    {35, "tq2_0", 256, 66, false},   {39, "mxfp4", 32, 17, false},
};

Test(quant_table, every_type_id_has_ggml_name_and_geometry)
{
    bool listed[GS_TYPE_COUNT] = {false};
    for (size_t i = 0; i < sizeof(expected_types) / sizeof(expected_types[0]); i++) {
        const int32_t id = expected_types[i].id;
        listed[id] = true;
        const struct gs_type_traits *tt = gs_type_traits(id);
        cr_assert(tt, "type id %d has no traits", id);
        cr_expect_str_eq(tt->name, expected_types[i].name, "type id %d", id);
        cr_expect_str_eq(gs_type_name(id), expected_types[i].name);
        cr_expect_eq(tt->block_size, expected_types[i].block_size, "%s block size", tt->name);
        cr_expect_eq(tt->block_bytes, expected_types[i].block_bytes, "%s block bytes", tt->name);
        cr_expect_eq(tt->supported, expected_types[i].supported, "%s supported", tt->name);
        cr_expect_eq(tt->quantized, tt->block_size > 1, "%s quantized flag", tt->name);
    }
    /* Retired ids (Q4_2, Q4_3, the repacked Q4_0_x_y and IQ4_NL_x_y) and
     * anything out of range are not types at all. */
    for (int32_t id = -1; id <= GS_TYPE_COUNT; id++) {
        if (id >= 0 && id < GS_TYPE_COUNT && listed[id])
            continue;
        cr_expect_null(gs_type_traits(id), "id %d should be unknown", id);
        cr_expect_str_eq(gs_type_name(id), "unknown");
    }
}

Test(quant_table, supported_types_have_kernels_and_a_supported_dot_type)
{
    for (int32_t t = 0; t < GS_TYPE_COUNT; t++) {
        const struct gs_type_traits *tt = gs_type_traits(t);
        if (!tt)
            continue;
        if (!tt->supported) {
            cr_expect_null(tt->to_f32, "%s is unsupported but has to_f32", tt->name);
            cr_expect_null(tt->from_f32, "%s is unsupported but has from_f32", tt->name);
            continue;
        }
        cr_expect_not_null(tt->to_f32, "%s", tt->name);
        cr_expect_not_null(tt->from_f32, "%s: every supported type quantizes", tt->name);
        const struct gs_type_traits *vd = gs_type_traits(tt->vec_dot_type);
        cr_assert(vd && vd->supported, "%s: vec_dot_type %d", tt->name, tt->vec_dot_type);
        cr_expect_not_null(vd->from_f32, "%s: activations must be quantizable to %s", tt->name,
                           vd->name);
    }
    /* What ggml pairs with the formats that carry a minimum. */
    cr_expect_eq(gs_type_traits(GS_TYPE_Q4_0)->vec_dot_type, GS_TYPE_Q8_0);
    cr_expect_eq(gs_type_traits(GS_TYPE_Q4_1)->vec_dot_type, GS_TYPE_Q8_1);
    cr_expect_eq(gs_type_traits(GS_TYPE_Q5_1)->vec_dot_type, GS_TYPE_Q8_1);
    cr_expect_eq(gs_type_traits(GS_TYPE_Q4_K)->vec_dot_type, GS_TYPE_Q8_K);
}

Test(quant_table, names_look_up_case_insensitively)
{
    for (int32_t t = 0; t < GS_TYPE_COUNT; t++) {
        const struct gs_type_traits *tt = gs_type_traits(t);
        if (!tt)
            continue;
        char upper[32];
        snprintf(upper, sizeof(upper), "%s", tt->name);
        for (char *c = upper; *c; c++)
            *c = (char)(*c >= 'a' && *c <= 'z' ? *c - 32 : *c);
        enum gs_type found = GS_TYPE_COUNT;
        cr_expect_eq(gs_type_from_name(tt->name, &found), GS_OK, "%s", tt->name);
        cr_expect_eq(found, t);
        found = GS_TYPE_COUNT;
        cr_expect_eq(gs_type_from_name(upper, &found), GS_OK, "%s", upper);
        cr_expect_eq(found, t);
    }
    enum gs_type found;
    cr_expect_eq(gs_type_from_name("q4_2", &found), GS_NOTFOUND);
    cr_expect_eq(gs_type_from_name("", &found), GS_NOTFOUND);
    cr_expect_eq(gs_type_from_name("q4_K_M", &found), GS_NOTFOUND, "a file type is not a type");
}

/* ---- row sizes ------------------------------------------------------------------- */

Test(quant_row_bytes, sizes_whole_blocks_of_supported_types)
{
    for (int32_t t = 0; t < GS_TYPE_COUNT; t++) {
        const struct gs_type_traits *tt = gs_type_traits(t);
        if (!tt || !tt->supported)
            continue;
        uint64_t bytes = 1;
        cr_expect_eq(gs_type_row_bytes(t, 0, &bytes), GS_OK, "%s", tt->name);
        cr_expect_eq(bytes, 0);
        cr_expect_eq(gs_type_row_bytes(t, 3 * (int64_t)tt->block_size, &bytes), GS_OK);
        cr_expect_eq(bytes, 3 * (uint64_t)tt->block_bytes, "%s", tt->name);
    }
    uint64_t bytes;
    cr_expect_eq(gs_type_row_bytes(GS_TYPE_Q4_K, 4096, &bytes), GS_OK);
    cr_expect_eq(bytes, 16 * 144);
}

Test(quant_row_bytes, rejects_partial_blocks_unsupported_and_unknown_types)
{
    uint64_t bytes = 12345;
    for (int32_t t = 0; t < GS_TYPE_COUNT; t++) {
        const struct gs_type_traits *tt = gs_type_traits(t);
        if (!tt) {
            cr_expect_eq(gs_type_row_bytes(t, 256, &bytes), GS_INVAL, "retired id %d", t);
            continue;
        }
        if (!tt->supported) {
            cr_expect_eq(gs_type_row_bytes(t, 256, &bytes), GS_UNSUPPORTED, "%s", tt->name);
            continue;
        }
        if (tt->block_size > 1) {
            cr_expect_eq(gs_type_row_bytes(t, tt->block_size + 1, &bytes), GS_FORMAT, "%s",
                         tt->name);
            cr_expect_eq(gs_type_row_bytes(t, tt->block_size / 2, &bytes), GS_FORMAT, "%s",
                         tt->name);
        }
        cr_expect_eq(gs_type_row_bytes(t, -(int64_t)tt->block_size, &bytes), GS_INVAL, "%s",
                     tt->name);
    }
    cr_expect_eq(bytes, 12345, "failures leave *out alone");
    cr_expect_eq(gs_type_row_bytes(-1, 32, &bytes), GS_INVAL);
    cr_expect_eq(gs_type_row_bytes(GS_TYPE_COUNT, 32, &bytes), GS_INVAL);
    cr_expect_eq(gs_type_row_bytes(1000, 32, &bytes), GS_INVAL);
    /* 2^62 floats would be 2^64 bytes. */
    cr_expect_eq(gs_type_row_bytes(GS_TYPE_F32, INT64_C(1) << 62, &bytes), GS_FORMAT);
}

Test(quant_convert, refuses_bad_lengths_and_types_without_touching_memory)
{
    float x[64] = {0};
    uint8_t q[512];
    for (int32_t t = 0; t < GS_TYPE_COUNT; t++) {
        const struct gs_type_traits *tt = gs_type_traits(t);
        if (!tt)
            continue;
        if (!tt->supported) {
            cr_expect_eq(gs_dequantize((enum gs_type)t, q, x, 256), GS_UNSUPPORTED, "%s", tt->name);
            cr_expect_eq(gs_quantize((enum gs_type)t, x, q, 256), GS_UNSUPPORTED, "%s", tt->name);
            continue;
        }
        if (tt->block_size > 1) {
            cr_expect_eq(gs_dequantize((enum gs_type)t, q, x, tt->block_size - 1), GS_INVAL, "%s",
                         tt->name);
            cr_expect_eq(gs_quantize((enum gs_type)t, x, q, tt->block_size + 1), GS_INVAL, "%s",
                         tt->name);
        }
        cr_expect_eq(gs_dequantize((enum gs_type)t, q, x, -1), GS_INVAL, "%s", tt->name);
    }
    cr_expect_eq(gs_dequantize((enum gs_type)4, q, x, 32), GS_INVAL);
    cr_expect_eq(gs_quantize((enum gs_type)GS_TYPE_COUNT, x, q, 32), GS_INVAL);
}

Test(quant_convert, refuses_non_finite_input_for_block_formats)
{
    const float specials[] = {NAN, INFINITY, -INFINITY};
    float x[256];
    uint8_t q[512];
    for (size_t s = 0; s < sizeof(specials) / sizeof(specials[0]); s++) {
        for (int32_t t = 0; t < GS_TYPE_COUNT; t++) {
            const struct gs_type_traits *tt = gs_type_traits(t);
            if (!tt || !tt->supported || !tt->quantized)
                continue;
            for (int i = 0; i < 256; i++)
                x[i] = (float)i / 256.0f;
            x[100] = specials[s];
            memset(q, 0xAB, sizeof(q));
            cr_expect_eq(gs_quantize((enum gs_type)t, x, q, 256), GS_NUMERIC, "%s", tt->name);
            cr_expect_eq(q[0], 0xAB, "%s wrote despite refusing", tt->name);
        }
    }
}

Test(quant_convert, refuses_values_too_large_for_the_f16_scales)
{
    float x[256];
    uint8_t q[1024];
    for (int32_t t = 0; t < GS_TYPE_COUNT; t++) {
        const struct gs_type_traits *tt = gs_type_traits(t);
        if (!tt || !tt->supported || !tt->quantized)
            continue;
        /* Up to 30000 in magnitude, both signs and zeros: always encodable. */
        for (int i = 0; i < 256; i++)
            x[i] = (float)((i % 3) - 1) * 30000.0f * (float)(i % 17) / 16.0f;
        cr_expect_eq(gs_quantize((enum gs_type)t, x, q, 256), GS_OK, "%s at 3e4", tt->name);
        /* 1e9 overflows every f16 scale; only q8_K (f32 scale) holds it. */
        x[5] = 1e9f;
        const enum gs_status want = t == GS_TYPE_Q8_K ? GS_OK : GS_NUMERIC;
        cr_expect_eq(gs_quantize((enum gs_type)t, x, q, 256), want, "%s at 1e9", tt->name);
    }
}

/* ---- golden dequantization ------------------------------------------------------- */

/* Compares the dequantized first rows of one tensor with floats computed by
 * ggml, bit for bit. Returns the number of values compared. */
static size_t check_golden_tensor(const char *file, json_t *t, const uint8_t *model,
                                  size_t model_len)
{
    const char *name = json_string_value(json_object_get(t, "tensor"));
    const char *type_name = json_string_value(json_object_get(t, "type"));
    json_t *shape = json_object_get(t, "shape");
    json_t *rows = json_object_get(t, "rows");
    cr_assert(name && type_name && json_is_array(shape) && json_is_array(rows), "%s: fields", file);
    enum gs_type type;
    cr_assert_eq(gs_type_from_name(type_name, &type), GS_OK, "%s: type %s", file, type_name);
    const int64_t ne0 = json_integer_value(json_array_get(shape, 0));
    const uint64_t offset = (uint64_t)json_integer_value(json_object_get(t, "data_offset_in_file"));
    uint64_t row_bytes;
    cr_assert_eq(gs_type_row_bytes(type, ne0, &row_bytes), GS_OK, "%s %s", file, name);
    cr_expect_eq(row_bytes, (uint64_t)json_integer_value(json_object_get(t, "row_bytes")),
                 "%s %s: row bytes", file, name);

    float *y = malloc((size_t)ne0 * sizeof(*y));
    cr_assert(y);
    size_t compared = 0;
    for (size_t r = 0; r < json_array_size(rows); r++) {
        json_t *row = json_array_get(rows, r);
        cr_assert_eq(json_array_size(row), (size_t)ne0, "%s %s row %zu", file, name, r);
        cr_assert(offset + (r + 1) * row_bytes <= model_len, "%s %s: past end", file, name);
        cr_assert_eq(gs_dequantize(type, model + offset + r * row_bytes, y, ne0), GS_OK);
        for (int64_t i = 0; i < ne0; i++) {
            const float want = (float)json_number_value(json_array_get(row, (size_t)i));
            cr_assert_eq(f32_bits(y[i]), f32_bits(want),
                         "%s %s (%s) row %zu [%lld]: got %.9g (0x%08x), want %.9g (0x%08x)", file,
                         name, type_name, r, (long long)i, y[i], f32_bits(y[i]), want,
                         f32_bits(want));
            compared++;
        }
    }
    free(y);
    return compared;
}

Test(quant_dequant, matches_ggml_bit_for_bit_on_golden_tensors)
{
    char dir_path[4096];
    snprintf(dir_path, sizeof(dir_path), "%s", gs_test_shared_path("golden/dequant"));
    DIR *dir = opendir(dir_path);
    cr_assert(dir, "cannot list %s", dir_path);
    bool seen[GS_TYPE_COUNT] = {false};
    size_t n_files = 0, n_values = 0;
    struct dirent *de;
    while ((de = readdir(dir))) {
        const size_t len = strlen(de->d_name);
        if (len < 5 || strcmp(de->d_name + len - 5, ".json") != 0)
            continue;
        char path[4096 + 256 + 2];
        snprintf(path, sizeof(path), "%s/%s", dir_path, de->d_name);
        json_t *j = gs_test_load_json(path);
        char model_rel[512];
        snprintf(model_rel, sizeof(model_rel), "models/%s",
                 json_string_value(json_object_get(j, "file")));
        size_t model_len;
        uint8_t *model = gs_test_read_file(gs_test_shared_path(model_rel), &model_len);
        json_t *tensors = json_object_get(j, "tensors");
        cr_assert(json_array_size(tensors) > 0, "%s lists no tensors", de->d_name);
        for (size_t i = 0; i < json_array_size(tensors); i++) {
            json_t *t = json_array_get(tensors, i);
            enum gs_type type;
            if (gs_type_from_name(json_string_value(json_object_get(t, "type")), &type) == GS_OK)
                seen[type] = true;
            n_values += check_golden_tensor(de->d_name, t, model, model_len);
        }
        free(model);
        json_decref(j);
        n_files++;
    }
    closedir(dir);
    cr_assert_geq(n_files, 14, "expected the 14 golden files, found %zu", n_files);
    /* The goldens must exercise every format llama.cpp writes into those models. */
    const enum gs_type covered[] = {GS_TYPE_F16,  GS_TYPE_Q4_0, GS_TYPE_Q4_1, GS_TYPE_Q5_0,
                                    GS_TYPE_Q5_1, GS_TYPE_Q8_0, GS_TYPE_Q2_K, GS_TYPE_Q3_K,
                                    GS_TYPE_Q4_K, GS_TYPE_Q5_K, GS_TYPE_Q6_K};
    for (size_t i = 0; i < sizeof(covered) / sizeof(covered[0]); i++)
        cr_expect(seen[covered[i]], "no golden tensor of type %s", gs_type_name(covered[i]));
    cr_log_info("golden dequant: %zu values in %zu files match bit for bit", n_values, n_files);
}

Test(quant_dequant, reads_unaligned_blocks_and_allocates_nothing)
{
    struct rng r = {0x1234};
    float x[512], want[512], got[512];
    uint8_t q[1024 + 1], shifted[1024 + 1];
    for (int32_t t = 0; t < GS_TYPE_COUNT; t++) {
        const struct gs_type_traits *tt = gs_type_traits(t);
        if (!tt || !tt->supported)
            continue;
        const int64_t n = tt->block_size == 1 ? 256 : 2 * tt->block_size;
        for (int64_t i = 0; i < n; i++)
            x[i] = rng_gauss(&r);
        const size_t bytes = buf_bytes((enum gs_type)t, n);
        cr_assert_leq(bytes, sizeof(q) - 1);
        cr_assert_eq(gs_quantize((enum gs_type)t, x, q, n), GS_OK);
        memcpy(shifted + 1, q, bytes);
        gs_alloc_fail_after(0);
        const enum gs_status s1 = gs_dequantize((enum gs_type)t, q, want, n);
        const enum gs_status s2 = gs_dequantize((enum gs_type)t, shifted + 1, got, n);
        const enum gs_status s3 = gs_quantize((enum gs_type)t, x, q, n);
        gs_alloc_fail_after(-1);
        cr_assert(s1 == GS_OK && s2 == GS_OK && s3 == GS_OK, "%s with allocation failing",
                  tt->name);
        cr_expect_arr_eq(want, got, (size_t)n * sizeof(float), "%s: odd address", tt->name);
    }
}

/* ---- quantize/dequantize round trips ----------------------------------------------- */

Test(quant_roundtrip, plain_types_are_exact_where_the_format_can_hold_the_value)
{
    /* Every f16 and bf16 bit pattern except signalling NaNs (which come back
     * quiet, as from any IEEE conversion). */
    for (uint32_t h = 0; h < 65536; h++) {
        const enum gs_type types[] = {GS_TYPE_F16, GS_TYPE_BF16};
        for (size_t k = 0; k < 2; k++) {
            const uint16_t in = (uint16_t)h;
            const bool f16 = types[k] == GS_TYPE_F16;
            const bool nan = f16 ? (in & 0x7c00) == 0x7c00 && (in & 0x3ff)
                                 : (in & 0x7f80) == 0x7f80 && (in & 0x7f);
            const bool quiet = f16 ? (in & 0x200) != 0 : (in & 0x40) != 0;
            if (nan && !quiet)
                continue;
            float v;
            uint16_t out;
            cr_assert_eq(gs_dequantize(types[k], &in, &v, 1), GS_OK);
            cr_assert_eq(gs_quantize(types[k], &v, &out, 1), GS_OK);
            if (out != in)
                cr_assert_fail("%s: 0x%04x -> %g -> 0x%04x", gs_type_name(types[k]), in, v, out);
        }
    }
    /* f32 keeps any bit pattern. */
    struct rng r = {42};
    float x[1024], y[1024];
    for (int i = 0; i < 1024; i++)
        x[i] = bits_f32((uint32_t)rng_next(&r));
    x[0] = -0.0f;
    x[1] = INFINITY;
    x[2] = bits_f32(0x7fc00001);
    cr_assert_eq(gs_quantize(GS_TYPE_F32, x, y, 1024), GS_OK);
    cr_assert_arr_eq(x, y, sizeof(x));
}

/*
 * Per-type bounds on round-trip errors, with the reasoning.
 *
 * random_bound: relative RMS error on Gaussian data. A uniform quantizer with
 * step D has RMS error D/sqrt(12); for Gaussian data the largest magnitude of
 * a block of 32 is about 2.5 sigma (16: about 2.2 sigma). The bounds are about
 * 1.5 times the measured error, which is at or below the estimate.
 *
 * scale_gain: the largest factor by which a format multiplies its f16
 * super-scale into a value (quant code times sub-scale code, plus the min
 * path). Small inputs make that scale subnormal, where f16 rounds to an
 * absolute 2^-25; the error of tiny values is bounded by the usual relative
 * error plus 2^-25 * scale_gain. (ggml's formats behave the same: q6_K loses
 * most precision on blocks below about 1e-3.)
 */
static const struct {
    enum gs_type type;
    double random_bound;
    float scale_gain;
    const char *why;
} roundtrip_bounds[] = {
    {GS_TYPE_F32, 0.0, 0, "exact"},
    {GS_TYPE_F16, 4e-4, 1, "11-bit significand: 2^-11/sqrt(3) = 2.8e-4"},
    {GS_TYPE_BF16, 3e-3, 1, "8-bit significand: 2^-8/sqrt(3) = 2.3e-3"},
    {GS_TYPE_Q8_0, 0.009, 127, "D = amax/127: 2.5/127/3.46 = 5.7e-3"},
    {GS_TYPE_Q8_1, 0.009, 127, "as q8_0"},
    {GS_TYPE_Q8_K, 0.008, 1, "D = amax/127 over 256 values (amax ~3.2 sigma), f32 scale"},
    {GS_TYPE_Q6_K, 0.025, 32 * 128, "16-value groups, D = amax/32 per group, scales 8-bit"},
    {GS_TYPE_Q5_0, 0.065, 16, "D = amax/16: 2.5/16/3.46 = 0.045"},
    {GS_TYPE_Q5_1, 0.065, 31 + 1, "D = (max-min)/31: 5/31/3.46 = 0.047"},
    {GS_TYPE_Q5_K, 0.06, 31 * 63 + 63, "32-value groups, 31 steps over the fitted range"},
    {GS_TYPE_Q4_0, 0.13, 8, "D = amax/8: 2.5/8/3.46 = 0.09"},
    {GS_TYPE_Q4_1, 0.13, 15 + 1, "D = (max-min)/15: 5/15/3.46 = 0.096"},
    {GS_TYPE_Q4_K, 0.12, 15 * 63 + 63, "32-value groups, 15 steps over the fitted range"},
    {GS_TYPE_Q3_K, 0.25, 4 * 32, "16-value groups, 8 levels: D ~ 4.4/7.5 sigma -> 0.17"},
    {GS_TYPE_Q2_K, 0.50, 3 * 15 + 15, "16-value groups, 4 levels and a min: D ~ 4.4/3 sigma"},
};

Test(quant_roundtrip, every_quantizing_type_has_a_bound)
{
    for (int32_t t = 0; t < GS_TYPE_COUNT; t++) {
        const struct gs_type_traits *tt = gs_type_traits(t);
        if (!tt || !tt->from_f32)
            continue;
        bool found = false;
        for (size_t i = 0; i < sizeof(roundtrip_bounds) / sizeof(roundtrip_bounds[0]); i++)
            found |= (int32_t)roundtrip_bounds[i].type == t;
        cr_expect(found, "%s quantizes but has no round-trip bound", tt->name);
    }
}

#define N_RT 4096

Test(quant_roundtrip, gaussian_data_within_the_format_error)
{
    static float x[N_RT], y[N_RT];
    for (size_t i = 0; i < sizeof(roundtrip_bounds) / sizeof(roundtrip_bounds[0]); i++) {
        const enum gs_type t = roundtrip_bounds[i].type;
        struct rng r = {7 + i};
        for (int j = 0; j < N_RT; j++)
            x[j] = 0.02f * rng_gauss(&r); /* typical weight magnitude */
        const double e = round_trip(t, x, y, N_RT);
        cr_log_info("round trip %-5s gaussian rel RMS %.3e (bound %.1e: %s)", gs_type_name(t), e,
                    roundtrip_bounds[i].random_bound, roundtrip_bounds[i].why);
        cr_expect_leq(e, roundtrip_bounds[i].random_bound, "%s: %.4g", gs_type_name(t), e);
        /* Scaling the input scales the error: no absolute error floor at
         * ordinary magnitudes (large values still fit the f16 scales). */
        for (int j = 0; j < N_RT; j++)
            x[j] *= 1000.0f;
        const double e_large = round_trip(t, x, y, N_RT);
        cr_expect_leq(e_large, roundtrip_bounds[i].random_bound, "%s large: %.4g", gs_type_name(t),
                      e_large);
    }
}

/* Structured inputs each format must handle without blowing up. */
enum pattern { ZEROS, CONSTANT, NEG_CONSTANT, OUTLIER, TINY, RAMP, ALTERNATING, N_PATTERNS };
static const char *const pattern_names[] = {"zeros", "constant", "negative constant", "outlier",
                                            "tiny",  "ramp",     "alternating"};

static void fill_pattern(enum pattern p, float *x, int n)
{
    for (int i = 0; i < n; i++) {
        switch (p) {
        case ZEROS:
            x[i] = 0.0f;
            break;
        case CONSTANT:
            x[i] = 0.75f;
            break;
        case NEG_CONSTANT:
            x[i] = -1.25f;
            break;
        case OUTLIER:
            x[i] = i == 77 ? 100.0f : 0.0f;
            break;
        case TINY:
            x[i] = 1e-4f * (float)((i % 7) - 3);
            break;
        case RAMP:
            x[i] = (float)(i - n / 2) / (float)n;
            break;
        case ALTERNATING:
            x[i] = i % 2 ? 1.0f : -1.0f;
            break;
        default:
            break;
        }
    }
}

static double rms(const float *x, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    return sqrt(s / n);
}

Test(quant_roundtrip, adversarial_blocks_stay_bounded)
{
    enum { N = 512 };
    float x[N], y[N];
    for (size_t i = 0; i < sizeof(roundtrip_bounds) / sizeof(roundtrip_bounds[0]); i++) {
        const enum gs_type t = roundtrip_bounds[i].type;
        const char *tn = gs_type_name(t);
        const float floor_abs = 0x1p-25f * roundtrip_bounds[i].scale_gain;
        for (int p = 0; p < N_PATTERNS; p++) {
            fill_pattern((enum pattern)p, x, N);
            const double e = round_trip(t, x, y, N);
            float amax = 0, worst = 0;
            for (int j = 0; j < N; j++) {
                cr_assert(isfinite(y[j]), "%s %s: [%d] = %g", tn, pattern_names[p], j, y[j]);
                amax = fmaxf(amax, fabsf(x[j]));
                worst = fmaxf(worst, fabsf(y[j]));
            }
            /* No value grows beyond the input's magnitude by more than a
             * least-squares scale can overshoot (q3_K's levels -4..3 allow
             * 4/3) plus the rounding of the f16 scale. */
            cr_expect_leq(worst, amax * 1.34f + floor_abs, "%s %s: |y| up to %g > %g", tn,
                          pattern_names[p], worst, amax);
            switch (p) {
            case ZEROS:
                for (int j = 0; j < N; j++)
                    cr_assert_eq(y[j], 0.0f, "%s zeros: [%d] = %g", tn, j, y[j]);
                break;
            case OUTLIER:
                /* The outlier survives to f16 precision of its scale and the
                 * zeros around it stay zero. */
                cr_expect_leq(fabsf(y[77] - 100.0f), 0.1f, "%s outlier: %g", tn, y[77]);
                for (int j = 0; j < N; j++)
                    cr_expect(j == 77 || y[j] == 0.0f, "%s outlier: [%d] = %g", tn, j, y[j]);
                break;
            case CONSTANT:
            case NEG_CONSTANT:
                /* Every value is the block's extreme: exact up to the f16 scale. */
                cr_expect_leq(e, 2e-3, "%s %s: %.3g", tn, pattern_names[p], e);
                break;
            case TINY:
                cr_log_info("round trip %-5s tiny (|x| <= 3e-4) rel RMS %.3e", tn, e);
                cr_expect_leq(e * rms(x, N),
                              roundtrip_bounds[i].random_bound * rms(x, N) + floor_abs,
                              "%s tiny: rel %.3g", tn, e);
                break;
            default:
                cr_expect_leq(e, roundtrip_bounds[i].random_bound, "%s %s: %.3g", tn,
                              pattern_names[p], e);
                break;
            }
        }
    }
}

Test(quant_roundtrip, quantizing_is_deterministic_and_writes_every_byte)
{
    enum { N = 512 };
    float x[N];
    uint8_t a[N * 4 + 1], b[N * 4 + 1];
    for (size_t i = 0; i < sizeof(roundtrip_bounds) / sizeof(roundtrip_bounds[0]); i++) {
        const enum gs_type t = roundtrip_bounds[i].type;
        for (int p = -1; p < N_PATTERNS; p++) {
            struct rng r = {99};
            if (p < 0) {
                for (int j = 0; j < N; j++)
                    x[j] = rng_gauss(&r);
            } else {
                fill_pattern((enum pattern)p, x, N);
            }
            const size_t bytes = buf_bytes(t, N);
            memset(a, 0x00, sizeof(a));
            memset(b, 0xff, sizeof(b));
            cr_assert_eq(gs_quantize(t, x, a, N), GS_OK);
            cr_assert_eq(gs_quantize(t, x, b, N), GS_OK);
            cr_expect_arr_eq(a, b, bytes, "%s pattern %d: output depends on old contents",
                             gs_type_name(t), p);
            cr_expect_eq(a[bytes], 0x00, "%s wrote past its row", gs_type_name(t));
            cr_expect_eq(b[bytes], 0xff, "%s wrote past its row", gs_type_name(t));
        }
    }
}

/* ---- reproducing llama.cpp's bytes ---------------------------------------------- */

/*
 * Requantizes the dequantized values of whole tensors that llama.cpp wrote
 * (the tensors named in the goldens) and counts the blocks whose bytes come
 * back identical. For q8_0 and the 32-element formats the reference is exact
 * on its own output; the K-quants search scales, so a decoded block may
 * requantize to a different (equally good) encoding.
 */
Test(quant_requant, reproduces_llama_cpp_blocks)
{
    char dir_path[4096];
    snprintf(dir_path, sizeof(dir_path), "%s", gs_test_shared_path("golden/dequant"));
    DIR *dir = opendir(dir_path);
    cr_assert(dir);
    uint64_t same[GS_TYPE_COUNT] = {0}, total[GS_TYPE_COUNT] = {0};
    struct dirent *de;
    while ((de = readdir(dir))) {
        const size_t len = strlen(de->d_name);
        if (len < 5 || strcmp(de->d_name + len - 5, ".json") != 0)
            continue;
        char path[4096 + 256 + 2];
        snprintf(path, sizeof(path), "%s/%s", dir_path, de->d_name);
        json_t *j = gs_test_load_json(path);
        char model_rel[512];
        snprintf(model_rel, sizeof(model_rel), "models/%s",
                 json_string_value(json_object_get(j, "file")));
        size_t model_len;
        uint8_t *model = gs_test_read_file(gs_test_shared_path(model_rel), &model_len);
        json_t *tensors = json_object_get(j, "tensors");
        for (size_t i = 0; i < json_array_size(tensors); i++) {
            json_t *t = json_array_get(tensors, i);
            enum gs_type type;
            cr_assert_eq(gs_type_from_name(json_string_value(json_object_get(t, "type")), &type),
                         GS_OK);
            const struct gs_type_traits *tt = gs_type_traits(type);
            if (!tt->quantized)
                continue;
            json_t *shape = json_object_get(t, "shape");
            int64_t n = 1;
            for (size_t d = 0; d < json_array_size(shape); d++)
                n *= json_integer_value(json_array_get(shape, d));
            const uint64_t off =
                (uint64_t)json_integer_value(json_object_get(t, "data_offset_in_file"));
            const size_t bytes = buf_bytes(type, n);
            cr_assert_leq(off + bytes, model_len);
            float *y = malloc((size_t)n * sizeof(*y));
            uint8_t *q = malloc(bytes);
            cr_assert(y && q);
            cr_assert_eq(gs_dequantize(type, model + off, y, n), GS_OK);
            cr_assert_eq(gs_quantize(type, y, q, n), GS_OK);
            for (size_t b = 0; b < bytes / (size_t)tt->block_bytes; b++) {
                const size_t o = b * (size_t)tt->block_bytes;
                same[type] += memcmp(q + o, model + off + o, (size_t)tt->block_bytes) == 0;
                total[type]++;
            }
            free(y);
            free(q);
        }
        free(model);
        json_decref(j);
    }
    closedir(dir);
    for (int32_t t = 0; t < GS_TYPE_COUNT; t++) {
        if (!total[t])
            continue;
        cr_log_info("requantize %-5s: %llu of %llu llama.cpp blocks reproduced (%.1f%%)",
                    gs_type_name(t), (unsigned long long)same[t], (unsigned long long)total[t],
                    100.0 * (double)same[t] / (double)total[t]);
    }
    cr_expect_gt(total[GS_TYPE_Q8_0], 0);
    cr_expect_gt(total[GS_TYPE_Q4_0], 0);
    cr_expect_eq(same[GS_TYPE_Q8_0], total[GS_TYPE_Q8_0], "q8_0 must requantize exactly");
    cr_expect_eq(same[GS_TYPE_Q4_0], total[GS_TYPE_Q4_0], "q4_0 must requantize exactly");
}

/* ---- llama.cpp models against their f32 originals ------------------------------ */

/* Every quantized model in the shared folder and the f32 file it was made from. */
static const struct {
    const char *quantized, *original;
} model_pairs[] = {
    {"models/stories260K-F16.gguf", "models/stories260K.gguf"},
    {"models/stories260K-Q4_0.gguf", "models/stories260K.gguf"},
    {"models/stories260K-Q4_1.gguf", "models/stories260K.gguf"},
    {"models/stories260K-Q5_0.gguf", "models/stories260K.gguf"},
    {"models/stories260K-Q5_1.gguf", "models/stories260K.gguf"},
    {"models/stories260K-Q8_0.gguf", "models/stories260K.gguf"},
    {"models/stories260K-Q4_K_M-fallback.gguf", "models/stories260K.gguf"},
    {"models/tiny-k-Q2_K.gguf", "models/tiny-k-F32.gguf"},
    {"models/tiny-k-Q3_K_M.gguf", "models/tiny-k-F32.gguf"},
    {"models/tiny-k-Q4_K.gguf", "models/tiny-k-F32.gguf"},
    {"models/tiny-k-Q4_K_M.gguf", "models/tiny-k-F32.gguf"},
    {"models/tiny-k-Q5_K.gguf", "models/tiny-k-F32.gguf"},
    {"models/tiny-k-Q5_K_M.gguf", "models/tiny-k-F32.gguf"},
    {"models/tiny-k-Q6_K.gguf", "models/tiny-k-F32.gguf"},
    {"models/tiny-k-Q8_0.gguf", "models/tiny-k-F32.gguf"},
};

static double random_bound_of(enum gs_type t)
{
    for (size_t i = 0; i < sizeof(roundtrip_bounds) / sizeof(roundtrip_bounds[0]); i++) {
        if (roundtrip_bounds[i].type == t)
            return roundtrip_bounds[i].random_bound;
    }
    cr_assert_fail("no bound for %s", gs_type_name(t));
    return 0;
}

static struct gs_gguf *open_model(const char *rel)
{
    struct gs_gguf *g = NULL;
    struct gs_err err = {0};
    const enum gs_status rc = gs_gguf_open(gs_test_shared_path(rel), &g, &err);
    cr_assert_eq(rc, GS_OK, "%s: %s", rel, err.msg);
    return g;
}

static int64_t n_elements(const struct gs_gguf_tensor *t)
{
    int64_t n = 1;
    for (uint32_t d = 0; d < t->n_dims; d++)
        n *= t->ne[d];
    return n;
}

/* Per-type totals over all model tensors. */
struct model_stats {
    double worst_rmse[GS_TYPE_COUNT];
    uint64_t n_tensors[GS_TYPE_COUNT];
    uint64_t blocks_same[GS_TYPE_COUNT], blocks_total[GS_TYPE_COUNT];
};

/*
 * One tensor: its dequantized values against the f32 original (relative RMS
 * error within the type's Gaussian round-trip bound: trained weights are close
 * to Gaussian per block), and our quantizer run on the original against
 * llama.cpp's bytes.
 */
static void check_model_tensor(const char *file, const struct gs_gguf_tensor *qt,
                               const struct gs_gguf_tensor *ot, struct model_stats *st)
{
    const enum gs_type type = qt->type;
    const struct gs_type_traits *tt = gs_type_traits(type);
    const int64_t n = n_elements(qt);
    cr_assert_eq(n, n_elements(ot), "%s %.*s: shape differs from the original", file,
                 (int)qt->name.len, qt->name.data);
    float *orig = malloc((size_t)n * sizeof(float)), *deq = malloc((size_t)n * sizeof(float));
    cr_assert(orig && deq);
    cr_assert_eq(gs_dequantize(ot->type, ot->data, orig, n), GS_OK);
    cr_assert_eq(gs_dequantize(type, qt->data, deq, n), GS_OK, "%s: %s", file, tt->name);
    const double e = rel_rmse(orig, deq, n);
    cr_expect_leq(e, random_bound_of(type), "%s %.*s (%s): rel RMS %.4g", file, (int)qt->name.len,
                  qt->name.data, tt->name, e);
    st->worst_rmse[type] = fmax(st->worst_rmse[type], e);
    st->n_tensors[type]++;

    if (type != GS_TYPE_F32) {
        uint8_t *q = malloc(qt->nbytes);
        cr_assert(q);
        cr_assert_eq(gs_quantize(type, orig, q, n), GS_OK);
        const uint8_t *want = qt->data;
        for (uint64_t o = 0; o < qt->nbytes; o += (uint64_t)tt->block_bytes) {
            st->blocks_same[type] += memcmp(q + o, want + o, (size_t)tt->block_bytes) == 0;
            st->blocks_total[type]++;
        }
        free(q);
    }
    free(orig);
    free(deq);
}

Test(quant_models, llama_cpp_models_dequantize_close_to_their_f32_originals, .timeout = 300)
{
    static struct model_stats st;
    memset(&st, 0, sizeof(st));
    for (size_t m = 0; m < sizeof(model_pairs) / sizeof(model_pairs[0]); m++) {
        struct gs_gguf *orig = open_model(model_pairs[m].original);
        struct gs_gguf *quant = open_model(model_pairs[m].quantized);
        size_t n_quantized = 0;
        for (uint64_t i = 0; i < gs_gguf_n_tensors(quant); i++) {
            const struct gs_gguf_tensor *qt = gs_gguf_tensor_at(quant, i);
            char name[256];
            snprintf(name, sizeof(name), "%.*s", (int)qt->name.len, qt->name.data);
            const struct gs_gguf_tensor *ot = gs_gguf_find_tensor(orig, name);
            cr_assert(ot, "%s: %s is not in %s", model_pairs[m].quantized, name,
                      model_pairs[m].original);
            n_quantized += gs_type_traits(qt->type)->quantized || qt->type == GS_TYPE_F16;
            check_model_tensor(model_pairs[m].quantized, qt, ot, &st);
        }
        cr_expect_gt(n_quantized, 0, "%s has no quantized tensor", model_pairs[m].quantized);
        gs_gguf_close(quant);
        gs_gguf_close(orig);
    }
    for (int32_t t = 0; t < GS_TYPE_COUNT; t++) {
        if (!st.n_tensors[t])
            continue;
        cr_log_info("models %-5s: %3llu tensors, worst rel RMS %.3e (bound %.1e)", gs_type_name(t),
                    (unsigned long long)st.n_tensors[t], st.worst_rmse[t],
                    random_bound_of((enum gs_type)t));
        if (st.blocks_total[t])
            cr_log_info("models %-5s: quantizing the f32 original gives llama.cpp's bytes in "
                        "%llu of %llu blocks (%.2f%%)",
                        gs_type_name(t), (unsigned long long)st.blocks_same[t],
                        (unsigned long long)st.blocks_total[t],
                        100.0 * (double)st.blocks_same[t] / (double)st.blocks_total[t]);
    }
    /* llama-quantize without an importance matrix runs the reference
     * quantizers; ours must reproduce every block it wrote. */
    const enum gs_type covered[] = {GS_TYPE_F16,  GS_TYPE_Q4_0, GS_TYPE_Q4_1, GS_TYPE_Q5_0,
                                    GS_TYPE_Q5_1, GS_TYPE_Q8_0, GS_TYPE_Q2_K, GS_TYPE_Q3_K,
                                    GS_TYPE_Q4_K, GS_TYPE_Q5_K, GS_TYPE_Q6_K};
    for (size_t i = 0; i < sizeof(covered) / sizeof(covered[0]); i++)
        cr_expect_gt(st.blocks_total[covered[i]], 0, "no %s tensor", gs_type_name(covered[i]));
    for (int32_t t = 0; t < GS_TYPE_COUNT; t++) {
        cr_expect_eq(st.blocks_same[t], st.blocks_total[t],
                     "%s: %llu of %llu blocks differ from llama.cpp", gs_type_name(t),
                     (unsigned long long)(st.blocks_total[t] - st.blocks_same[t]),
                     (unsigned long long)st.blocks_total[t]);
    }
}

/* A dot product's activations round as llama.cpp's x86 CPU backend rounds them (halves to
 * even), weights as its reference quantizer does (halves away from zero): a block whose
 * largest magnitude is 127 has the multiplier 1, so its halves show the two rules. */
Test(quant_activations, q8_rounds_halves_to_even_where_weights_round_away)
{
    static const enum gs_type types[] = {GS_TYPE_Q8_0, GS_TYPE_Q8_1};
    float x[32] = {0};
    x[0] = 127.0f;
    x[1] = 2.5f;
    x[2] = 3.5f;
    x[3] = -2.5f;
    x[4] = 0.5f;
    x[5] = -126.5f;
    static const int8_t even[] = {127, 2, 4, -2, 0, -126}, away[] = {127, 3, 4, -3, 1, -127};
    for (size_t t = 0; t < GS_ARRAY_LEN(types); t++) {
        const size_t qs = types[t] == GS_TYPE_Q8_0 ? 2 : 4; /* after d (and s) */
        uint8_t act[40], wt[40];
        gs_from_f32_fn q = gs_activation_quantizer(types[t]);
        cr_assert(q);
        q(x, act, 32);
        cr_assert_eq(gs_quantize(types[t], x, wt, 32), GS_OK);
        for (size_t i = 0; i < GS_ARRAY_LEN(even); i++) {
            cr_expect_eq((int8_t)act[qs + i], even[i], "%s activation %zu: %d",
                         gs_type_name(types[t]), i, (int8_t)act[qs + i]);
            cr_expect_eq((int8_t)wt[qs + i], away[i], "%s weight %zu: %d", gs_type_name(types[t]),
                         i, (int8_t)wt[qs + i]);
        }
    }
    /* Types whose activations round as their weights do share the quantizer. */
    cr_expect_eq(gs_activation_quantizer(GS_TYPE_Q8_K), gs_type_traits(GS_TYPE_Q8_K)->from_f32);
    cr_expect_null(gs_activation_quantizer(GS_TYPE_COUNT));
}
