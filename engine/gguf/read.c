/*
 * engine/gguf/read.c - the GGUF reader: map, validate everything, then hand out
 * borrowed views into the mapping. See engine/gguf.h for the contract.
 *
 * Layout of a GGUF v2/v3 file (all little-endian):
 *   u32 magic "GGUF", u32 version, u64 n_tensors, u64 n_kv,
 *   n_kv x { string key, u32 value_type, value },
 *   n_tensors x { string name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset },
 *   padding to `alignment`, then the data section; every tensor offset is
 *   relative to the data section and a multiple of `alignment`.
 * A string is u64 length + bytes (no NUL). An array is u32 element type +
 * u64 count + elements.
 *
 * Every size read from the file is checked against the bytes that remain
 * before it is used, so no allocation or loop is sized by an unchecked field.
 */
#define _GNU_SOURCE
#include "engine/gguf.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct gs_gguf {
    const uint8_t *base;   /* the file's bytes */
    uint64_t size;         /* bytes at base */
    bool mapped;           /* base is our mmap and is unmapped at close */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset;  /* file offset of the data section */
    uint64_t n_kv;
    struct gs_gguf_kv *kvs;          /* [n_kv], from gs_calloc */
    uint64_t n_tensors;
    struct gs_gguf_tensor *tensors;  /* [n_tensors], from gs_calloc */
    const struct gs_gguf_tensor **tensor_by_name; /* [n_tensors] sorted by name, for lookup */
};

/* ---- value types ------------------------------------------------------------ */

static const struct {
    const char *name;
    size_t size;
} vtypes[GS_GGUF_VTYPE_COUNT] = {
    [GS_GGUF_U8] = {"u8", 1},       [GS_GGUF_I8] = {"i8", 1},
    [GS_GGUF_U16] = {"u16", 2},     [GS_GGUF_I16] = {"i16", 2},
    [GS_GGUF_U32] = {"u32", 4},     [GS_GGUF_I32] = {"i32", 4},
    [GS_GGUF_F32] = {"f32", 4},     [GS_GGUF_BOOL] = {"bool", 1},
    [GS_GGUF_STRING] = {"string", 0}, [GS_GGUF_ARRAY] = {"array", 0},
    [GS_GGUF_U64] = {"u64", 8},     [GS_GGUF_I64] = {"i64", 8},
    [GS_GGUF_F64] = {"f64", 8},
};

const char *gs_gguf_vtype_name(int32_t t)
{
    return t >= 0 && t < GS_GGUF_VTYPE_COUNT ? vtypes[t].name : "?";
}

size_t gs_gguf_vtype_size(enum gs_gguf_vtype t)
{
    return (unsigned)t < GS_GGUF_VTYPE_COUNT ? vtypes[t].size : 0;
}

static bool vtype_is_int(enum gs_gguf_vtype t)
{
    return t == GS_GGUF_U8 || t == GS_GGUF_I8 || t == GS_GGUF_U16 || t == GS_GGUF_I16 ||
           t == GS_GGUF_U32 || t == GS_GGUF_I32 || t == GS_GGUF_U64 || t == GS_GGUF_I64;
}

static bool vtype_is_signed(enum gs_gguf_vtype t)
{
    return t == GS_GGUF_I8 || t == GS_GGUF_I16 || t == GS_GGUF_I32 || t == GS_GGUF_I64;
}

/* ---- keys whose type we know ------------------------------------------------ */

/*
 * Well-known keys and the types they must have. A file that stores, say,
 * token scores as u8 is refused at open rather than misread later. `elem` is
 * the array element type for ARRAY keys. Integer keys accept any integer type,
 * since writers disagree on u32 vs i32 for token ids.
 */
/* KEY_INT_OR_LAYERS: an integer, or an array of integers with one value per
 * layer (gemma3n's feed_forward_length, OpenELM's head counts). */
enum key_kind { KEY_INT, KEY_INT_OR_LAYERS, KEY_FLOAT, KEY_BOOL, KEY_STRING, KEY_ARRAY };

static const struct known_key {
    const char *key;
    enum key_kind kind;
    enum gs_gguf_vtype elem;
} known_keys[] = {
    {"general.alignment", KEY_INT, 0},
    {"general.architecture", KEY_STRING, 0},
    {"general.name", KEY_STRING, 0},
    {"general.file_type", KEY_INT, 0},
    {"general.quantization_version", KEY_INT, 0},
    {"tokenizer.ggml.model", KEY_STRING, 0},
    {"tokenizer.ggml.pre", KEY_STRING, 0},
    {"tokenizer.ggml.tokens", KEY_ARRAY, GS_GGUF_STRING},
    {"tokenizer.ggml.scores", KEY_ARRAY, GS_GGUF_F32},
    {"tokenizer.ggml.token_type", KEY_ARRAY, GS_GGUF_I32},
    {"tokenizer.ggml.merges", KEY_ARRAY, GS_GGUF_STRING},
    {"tokenizer.ggml.bos_token_id", KEY_INT, 0},
    {"tokenizer.ggml.eos_token_id", KEY_INT, 0},
    {"tokenizer.ggml.unknown_token_id", KEY_INT, 0},
    {"tokenizer.ggml.padding_token_id", KEY_INT, 0},
    {"tokenizer.ggml.add_bos_token", KEY_BOOL, 0},
    {"tokenizer.ggml.add_eos_token", KEY_BOOL, 0},
    {"tokenizer.ggml.add_space_prefix", KEY_BOOL, 0},
    {"tokenizer.chat_template", KEY_STRING, 0},
};

/* Keys of the form "<arch>.<suffix>" whose type we know. */
static const struct known_key known_suffixes[] = {
    {".context_length", KEY_INT, 0},
    {".embedding_length", KEY_INT, 0},
    {".block_count", KEY_INT, 0},
    {".feed_forward_length", KEY_INT_OR_LAYERS, 0},
    {".attention.head_count", KEY_INT_OR_LAYERS, 0},
    {".attention.head_count_kv", KEY_INT_OR_LAYERS, 0},
    {".vocab_size", KEY_INT, 0},
    {".rope.dimension_count", KEY_INT, 0},
    {".attention.layer_norm_rms_epsilon", KEY_FLOAT, 0},
    {".rope.freq_base", KEY_FLOAT, 0},
};

static const char *const key_kind_name[] = {
    [KEY_INT] = "an integer", [KEY_INT_OR_LAYERS] = "an integer or an array of integers",
    [KEY_FLOAT] = "a float", [KEY_BOOL] = "a bool",
    [KEY_STRING] = "a string", [KEY_ARRAY] = "an array",
};

static const struct known_key *find_known_key(const struct gs_gguf_str key)
{
    for (size_t i = 0; i < GS_ARRAY_LEN(known_keys); i++)
        if (gs_gguf_str_eq(key, known_keys[i].key))
            return &known_keys[i];
    for (size_t i = 0; i < GS_ARRAY_LEN(known_suffixes); i++) {
        size_t n = strlen(known_suffixes[i].key);
        if (key.len > n && !memcmp(key.data + key.len - n, known_suffixes[i].key, n))
            return &known_suffixes[i];
    }
    return NULL;
}

static bool kind_matches(const struct known_key *k, const struct gs_gguf_kv *kv)
{
    switch (k->kind) {
    case KEY_INT:
        return vtype_is_int(kv->type);
    case KEY_INT_OR_LAYERS:
        return vtype_is_int(kv->type) ||
               (kv->type == GS_GGUF_ARRAY && vtype_is_int(kv->v.arr.type));
    case KEY_FLOAT:
        return kv->type == GS_GGUF_F32 || kv->type == GS_GGUF_F64;
    case KEY_BOOL:
        return kv->type == GS_GGUF_BOOL;
    case KEY_STRING:
        return kv->type == GS_GGUF_STRING;
    case KEY_ARRAY: /* elem GS_GGUF_VTYPE_COUNT: any element type */
        return kv->type == GS_GGUF_ARRAY &&
               (k->elem == GS_GGUF_VTYPE_COUNT || kv->v.arr.type == k->elem);
    }
    return false;
}

/* ---- cursor over the file ----------------------------------------------------- */

struct cursor {
    const uint8_t *p;
    uint64_t size;
    uint64_t pos;
    struct gs_err *err;
};

static uint64_t left(const struct cursor *c)
{
    return c->size - c->pos;
}

/* Reads n bytes into out, or fails naming what was being read. */
static enum gs_status rd_bytes(struct cursor *c, void *out, uint64_t n, const char *what)
{
    if (n > left(c))
        return gs_err_set(c->err, GS_FORMAT, "%s: file truncated at byte %llu (needs %llu more)",
                          what, (unsigned long long)c->pos, (unsigned long long)n);
    memcpy(out, c->p + c->pos, n);
    c->pos += n;
    return GS_OK;
}

static enum gs_status rd_u32(struct cursor *c, uint32_t *out, const char *what)
{
    return rd_bytes(c, out, 4, what);
}

static enum gs_status rd_u64(struct cursor *c, uint64_t *out, const char *what)
{
    return rd_bytes(c, out, 8, what);
}

static enum gs_status rd_str(struct cursor *c, struct gs_gguf_str *out, const char *what)
{
    uint64_t len = 0;
    enum gs_status rc = rd_u64(c, &len, what);
    if (rc)
        return rc;
    if (len > left(c))
        return gs_err_set(c->err, GS_FORMAT,
                          "%s: string length %llu exceeds the %llu bytes left in the file", what,
                          (unsigned long long)len, (unsigned long long)left(c));
    out->len = len;
    out->data = (const char *)c->p + c->pos;
    c->pos += len;
    return GS_OK;
}

/* Formats a file string for an error message, shortened and with control
 * characters replaced, since it comes from an untrusted file. */
static const char *printable(struct gs_gguf_str s, char *buf, size_t cap)
{
    size_t n = s.len < cap - 4 ? (size_t)s.len : cap - 4;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s.data[i];
        buf[i] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
    }
    if (n < s.len)
        memcpy(buf + n, "...", 3), n += 3;
    buf[n] = '\0';
    return buf;
}

/* ---- metadata ------------------------------------------------------------------ */

/* Decodes one little-endian scalar of type t at p (vtypes[t].size bytes) into
 * kv->v: integers zero- or sign-extended to 64 bits, floats widened to double.
 * Assumes a little-endian host, as every supported platform is. */
static void decode_scalar(enum gs_gguf_vtype t, const uint8_t *p, struct gs_gguf_kv *kv)
{
    size_t size = vtypes[t].size;
    uint64_t raw = 0;
    memcpy(&raw, p, size);
    kv->type = t;
    if (t == GS_GGUF_F32) {
        float f;
        memcpy(&f, p, 4);
        kv->v.f64 = f;
    } else if (t == GS_GGUF_F64) {
        memcpy(&kv->v.f64, p, 8);
    } else if (vtype_is_signed(t) && size < 8 && (raw >> (8 * size - 1)) & 1) {
        kv->v.u64 = raw | (~UINT64_C(0) << (8 * size)); /* sign-extend */
    } else {
        kv->v.u64 = raw;
    }
}

static enum gs_status read_scalar(struct cursor *c, enum gs_gguf_vtype t, struct gs_gguf_kv *kv,
                                  const char *what)
{
    uint8_t raw[8] = {0};
    enum gs_status rc = rd_bytes(c, raw, vtypes[t].size, what);
    if (rc)
        return rc;
    if (t == GS_GGUF_BOOL && raw[0] > 1)
        return gs_err_set(c->err, GS_FORMAT, "%s: bool value %u is not 0 or 1", what, raw[0]);
    decode_scalar(t, raw, kv);
    return GS_OK;
}

static enum gs_status read_array(struct cursor *c, struct gs_gguf_kv *kv, const char *what)
{
    uint32_t elem = 0;
    uint64_t n = 0;
    enum gs_status rc = rd_u32(c, &elem, what);
    if (!rc)
        rc = rd_u64(c, &n, what);
    if (rc)
        return rc;
    if (elem >= GS_GGUF_VTYPE_COUNT)
        return gs_err_set(c->err, GS_FORMAT, "%s: unknown array element type %u", what, elem);
    if (elem == GS_GGUF_ARRAY)
        return gs_err_set(c->err, GS_FORMAT, "%s: nested arrays are not supported", what);
    kv->v.arr.type = (enum gs_gguf_vtype)elem;
    kv->v.arr.n = n;
    kv->v.arr.data = c->p + c->pos;
    if (elem != GS_GGUF_STRING) {
        uint64_t bytes;
        if (gs_mul_overflow(n, vtypes[elem].size, &bytes) || bytes > left(c))
            return gs_err_set(c->err, GS_FORMAT,
                              "%s: array of %llu %s elements exceeds the %llu bytes left", what,
                              (unsigned long long)n, vtypes[elem].name,
                              (unsigned long long)left(c));
        if (elem == GS_GGUF_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (c->p[c->pos + i] > 1)
                    return gs_err_set(c->err, GS_FORMAT, "%s[%llu]: bool value %u is not 0 or 1",
                                      what, (unsigned long long)i, c->p[c->pos + i]);
        c->pos += bytes;
        return GS_OK;
    }
    /* Each string takes at least its 8-byte length, which bounds n before we
     * allocate the index of string views. */
    if (n > left(c) / 8)
        return gs_err_set(c->err, GS_FORMAT,
                          "%s: array of %llu strings exceeds the %llu bytes left", what,
                          (unsigned long long)n, (unsigned long long)left(c));
    struct gs_gguf_str *strs = gs_alloc_array(n ? n : 1, sizeof(*strs));
    if (!strs)
        return gs_err_set(c->err, GS_NOMEM, "%s: no memory for %llu strings", what,
                          (unsigned long long)n);
    kv->v.arr.strs = strs; /* owned by kv from here on, freed at close */
    for (uint64_t i = 0; i < n; i++) {
        rc = rd_str(c, &strs[i], what);
        if (rc)
            return gs_err_prefix(c->err, "element %llu", (unsigned long long)i);
    }
    return GS_OK;
}

static enum gs_status read_kv(struct cursor *c, uint64_t i, struct gs_gguf_kv *kv)
{
    char what[96], name[64];
    snprintf(what, sizeof(what), "metadata entry %llu key", (unsigned long long)i);
    enum gs_status rc = rd_str(c, &kv->key, what);
    if (rc)
        return rc;
    if (kv->key.len == 0)
        return gs_err_set(c->err, GS_FORMAT, "metadata entry %llu: empty key",
                          (unsigned long long)i);
    snprintf(what, sizeof(what), "metadata '%s'", printable(kv->key, name, sizeof(name)));
    uint32_t type = 0;
    rc = rd_u32(c, &type, what);
    if (rc)
        return rc;
    if (type >= GS_GGUF_VTYPE_COUNT)
        return gs_err_set(c->err, GS_FORMAT, "%s: unknown value type %u", what, type);
    kv->type = (enum gs_gguf_vtype)type;
    if (type == GS_GGUF_STRING)
        rc = rd_str(c, &kv->v.str, what);
    else if (type == GS_GGUF_ARRAY)
        rc = read_array(c, kv, what);
    else
        rc = read_scalar(c, kv->type, kv, what);
    if (rc)
        return rc;
    const struct known_key *k = find_known_key(kv->key);
    if (k && !kind_matches(k, kv)) {
        if (k->kind == KEY_ARRAY)
            return gs_err_set(c->err, GS_FORMAT, "%s: expected an array of %s, found %s%s%s",
                              what, vtypes[k->elem].name, vtypes[kv->type].name,
                              kv->type == GS_GGUF_ARRAY ? " of " : "",
                              kv->type == GS_GGUF_ARRAY ? vtypes[kv->v.arr.type].name : "");
        return gs_err_set(c->err, GS_FORMAT, "%s: expected %s, found %s", what,
                          key_kind_name[k->kind], vtypes[kv->type].name);
    }
    return GS_OK;
}

/* ---- tensors ------------------------------------------------------------------- */

static enum gs_status read_tensor_info(struct cursor *c, uint64_t i, struct gs_gguf_tensor *t)
{
    char what[96], name[64];
    snprintf(what, sizeof(what), "tensor %llu name", (unsigned long long)i);
    enum gs_status rc = rd_str(c, &t->name, what);
    if (rc)
        return rc;
    snprintf(what, sizeof(what), "tensor '%s'", printable(t->name, name, sizeof(name)));
    if (t->name.len == 0)
        return gs_err_set(c->err, GS_FORMAT, "tensor %llu: empty name", (unsigned long long)i);
    rc = rd_u32(c, &t->n_dims, what);
    if (rc)
        return rc;
    if (t->n_dims < 1 || t->n_dims > GS_GGUF_MAX_DIMS)
        return gs_err_set(c->err, GS_FORMAT, "%s: n_dims %u is not in 1..%d", what, t->n_dims,
                          GS_GGUF_MAX_DIMS);
    uint64_t n_elems = 1;
    for (uint32_t d = 0; d < GS_GGUF_MAX_DIMS; d++) {
        uint64_t ne = 1;
        if (d < t->n_dims) {
            rc = rd_u64(c, &ne, what);
            if (rc)
                return rc;
        }
        if (ne == 0 || ne > (uint64_t)INT64_MAX)
            return gs_err_set(c->err, GS_FORMAT, "%s: dim %u is %llu (must be 1..2^63-1)", what,
                              d, (unsigned long long)ne);
        if (gs_mul_overflow(n_elems, ne, &n_elems) || n_elems > (uint64_t)INT64_MAX)
            return gs_err_set(c->err, GS_FORMAT, "%s: element count overflows", what);
        t->ne[d] = (int64_t)ne;
    }
    uint32_t type = 0;
    rc = rd_u32(c, &type, what);
    if (!rc)
        rc = rd_u64(c, &t->offset, what);
    if (rc)
        return rc;
    const struct gs_type_traits *tt = gs_type_traits((int32_t)type);
    if (!tt)
        return gs_err_set(c->err, GS_FORMAT, "%s: unknown tensor type %u", what, type);
    if (!tt->supported)
        return gs_err_set(c->err, GS_UNSUPPORTED, "%s: type %s is not supported yet", what,
                          tt->name);
    t->type = (enum gs_type)type;
    if (t->ne[0] % tt->block_size)
        return gs_err_set(c->err, GS_FORMAT,
                          "%s: row length %lld is not a multiple of the %s block size %d", what,
                          (long long)t->ne[0], tt->name, tt->block_size);
    uint64_t row_bytes = (uint64_t)(t->ne[0] / tt->block_size) * (uint64_t)tt->block_bytes;
    uint64_t rows = n_elems / (uint64_t)t->ne[0];
    if (gs_mul_overflow(row_bytes, rows, &t->nbytes))
        return gs_err_set(c->err, GS_FORMAT, "%s: byte size overflows", what);
    return GS_OK;
}

static int str_cmp(struct gs_gguf_str a, struct gs_gguf_str b)
{
    int r = memcmp(a.data, b.data, GS_MIN(a.len, b.len));
    if (r)
        return r;
    return a.len < b.len ? -1 : a.len > b.len;
}

/* Comparators over arrays of pointers, so that sorting needs no shared state. */
static int cmp_tensor_name(const void *a, const void *b)
{
    const struct gs_gguf_tensor *x = *(const struct gs_gguf_tensor *const *)a;
    const struct gs_gguf_tensor *y = *(const struct gs_gguf_tensor *const *)b;
    return str_cmp(x->name, y->name);
}

static int cmp_tensor_offset(const void *a, const void *b)
{
    const struct gs_gguf_tensor *x = *(const struct gs_gguf_tensor *const *)a;
    const struct gs_gguf_tensor *y = *(const struct gs_gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int cmp_kv_key(const void *a, const void *b)
{
    const struct gs_gguf_kv *x = *(const struct gs_gguf_kv *const *)a;
    const struct gs_gguf_kv *y = *(const struct gs_gguf_kv *const *)b;
    return str_cmp(x->key, y->key);
}

/* Builds g->tensor_by_name and refuses duplicate names, then checks that data
 * ranges are aligned, inside the data section and do not overlap. */
static enum gs_status check_tensors(struct gs_gguf *g, struct gs_err *err)
{
    char name[64], name2[64];
    uint64_t n = g->n_tensors;
    uint64_t data_bytes = g->size - g->data_offset;
    const struct gs_gguf_tensor **by = gs_alloc_array(n ? n : 1, sizeof(*by));
    if (!by)
        return gs_err_set(err, GS_NOMEM, "no memory for the tensor index");
    g->tensor_by_name = by;
    for (uint64_t i = 0; i < n; i++) {
        struct gs_gguf_tensor *t = &g->tensors[i];
        by[i] = t;
        if (t->offset % g->alignment)
            return gs_err_set(err, GS_FORMAT,
                              "tensor '%s': data offset %llu is not a multiple of the alignment %u",
                              printable(t->name, name, sizeof(name)),
                              (unsigned long long)t->offset, g->alignment);
        if (t->offset > data_bytes || t->nbytes > data_bytes - t->offset)
            return gs_err_set(err, GS_FORMAT,
                              "tensor '%s': data [%llu, +%llu) extends past the end of the file "
                              "(data section holds %llu bytes)",
                              printable(t->name, name, sizeof(name)),
                              (unsigned long long)t->offset, (unsigned long long)t->nbytes,
                              (unsigned long long)data_bytes);
        t->data = g->base + g->data_offset + t->offset;
    }
    qsort(by, n, sizeof(*by), cmp_tensor_offset);
    for (uint64_t i = 1; i < n; i++)
        if (by[i - 1]->offset + by[i - 1]->nbytes > by[i]->offset)
            return gs_err_set(err, GS_FORMAT, "tensor '%s': data overlaps tensor '%s'",
                              printable(by[i]->name, name, sizeof(name)),
                              printable(by[i - 1]->name, name2, sizeof(name2)));
    qsort(by, n, sizeof(*by), cmp_tensor_name);
    for (uint64_t i = 1; i < n; i++)
        if (!str_cmp(by[i - 1]->name, by[i]->name))
            return gs_err_set(err, GS_FORMAT, "tensor '%s': duplicate tensor name",
                              printable(by[i]->name, name, sizeof(name)));
    return GS_OK;
}

static enum gs_status check_duplicate_keys(struct gs_gguf *g, struct gs_err *err)
{
    char name[64];
    uint64_t n = g->n_kv;
    if (n < 2)
        return GS_OK;
    const struct gs_gguf_kv **by = gs_alloc_array(n, sizeof(*by));
    if (!by)
        return gs_err_set(err, GS_NOMEM, "no memory for the metadata index");
    for (uint64_t i = 0; i < n; i++)
        by[i] = &g->kvs[i];
    qsort(by, n, sizeof(*by), cmp_kv_key);
    enum gs_status rc = GS_OK;
    for (uint64_t i = 1; i < n && !rc; i++)
        if (!str_cmp(by[i - 1]->key, by[i]->key))
            rc = gs_err_set(err, GS_FORMAT, "metadata '%s': duplicate key",
                            printable(by[i]->key, name, sizeof(name)));
    gs_free(by);
    return rc;
}

static enum gs_status read_alignment(struct gs_gguf *g, struct gs_err *err)
{
    g->alignment = GS_GGUF_DEFAULT_ALIGNMENT;
    const struct gs_gguf_kv *kv = gs_gguf_find_kv(g, "general.alignment");
    if (!kv)
        return GS_OK;
    if (kv->type != GS_GGUF_U32)
        return gs_err_set(err, GS_FORMAT, "metadata 'general.alignment': expected u32, found %s",
                          vtypes[kv->type].name);
    uint64_t a = kv->v.u64;
    if (a == 0 || (a & (a - 1)))
        return gs_err_set(err, GS_FORMAT,
                          "metadata 'general.alignment': %llu is not a power of two",
                          (unsigned long long)a);
    g->alignment = (uint32_t)a;
    return GS_OK;
}

/* ---- open / close ---------------------------------------------------------------- */

/* The smallest encodings of one metadata entry (8-byte key length, 1 key byte,
 * 4-byte type, 1-byte value) and one tensor info (8 + 1 + 4 + 8 + 4 + 8). They
 * bound the counts read from the header before anything is allocated. */
#define MIN_KV_BYTES 14
#define MIN_TENSOR_BYTES 33

static enum gs_status parse(struct gs_gguf *g, struct gs_err *err)
{
    struct cursor c = {.p = g->base, .size = g->size, .pos = 0, .err = err};
    uint32_t magic = 0;
    enum gs_status rc = rd_u32(&c, &magic, "header magic");
    if (rc)
        return rc;
    if (magic != GS_GGUF_MAGIC)
        return gs_err_set(err, GS_FORMAT, "header magic: 0x%08x is not \"GGUF\"", magic);
    rc = rd_u32(&c, &g->version, "header version");
    if (rc)
        return rc;
    if (g->version == 1)
        return gs_err_set(err, GS_UNSUPPORTED, "header version: GGUF v1 is not supported (v2, v3)");
    if (g->version != 2 && g->version != 3)
        return gs_err_set(err, GS_FORMAT, "header version: %u is not a GGUF version (2, 3)",
                          g->version);
    if ((rc = rd_u64(&c, &g->n_tensors, "header n_tensors")) ||
        (rc = rd_u64(&c, &g->n_kv, "header n_kv")))
        return rc;
    if (g->n_kv > left(&c) / MIN_KV_BYTES)
        return gs_err_set(err, GS_FORMAT, "header n_kv: %llu entries cannot fit in %llu bytes",
                          (unsigned long long)g->n_kv, (unsigned long long)left(&c));
    if (g->n_tensors > left(&c) / MIN_TENSOR_BYTES || g->n_tensors > UINT32_MAX)
        return gs_err_set(err, GS_FORMAT,
                          "header n_tensors: %llu tensors cannot fit in %llu bytes",
                          (unsigned long long)g->n_tensors, (unsigned long long)left(&c));
    g->kvs = gs_calloc(g->n_kv ? g->n_kv : 1, sizeof(*g->kvs));
    g->tensors = gs_calloc(g->n_tensors ? g->n_tensors : 1, sizeof(*g->tensors));
    if (!g->kvs || !g->tensors)
        return gs_err_set(err, GS_NOMEM, "no memory for %llu metadata entries and %llu tensors",
                          (unsigned long long)g->n_kv, (unsigned long long)g->n_tensors);
    for (uint64_t i = 0; i < g->n_kv; i++)
        if ((rc = read_kv(&c, i, &g->kvs[i])))
            return rc;
    if ((rc = check_duplicate_keys(g, err)) || (rc = read_alignment(g, err)))
        return rc;
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if ((rc = read_tensor_info(&c, i, &g->tensors[i])))
            return rc;
    uint64_t pad = (g->alignment - c.pos % g->alignment) % g->alignment;
    g->data_offset = c.pos + pad;
    if (g->data_offset > g->size) {
        if (g->n_tensors)
            return gs_err_set(err, GS_FORMAT,
                              "data section: starts at byte %llu, past the end of the file (%llu)",
                              (unsigned long long)g->data_offset, (unsigned long long)g->size);
        g->data_offset = g->size; /* metadata-only files (vocabularies) need no padding */
    }
    return check_tensors(g, err);
}

static enum gs_status open_common(struct gs_gguf *g, struct gs_gguf **out, struct gs_err *err)
{
    enum gs_status rc = parse(g, err);
    if (rc) {
        gs_gguf_close(g);
        return rc;
    }
    *out = g;
    return GS_OK;
}

enum gs_status gs_gguf_open_mem(const void *buf, size_t len, struct gs_gguf **out,
                                struct gs_err *err)
{
    *out = NULL;
    struct gs_gguf *g = gs_calloc(1, sizeof(*g));
    if (!g)
        return gs_err_set(err, GS_NOMEM, "no memory for a GGUF handle");
    g->base = buf;
    g->size = len;
    return open_common(g, out, err);
}

enum gs_status gs_gguf_open(const char *path, struct gs_gguf **out, struct gs_err *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return gs_err_set(err, GS_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        int e = errno;
        close(fd);
        return gs_err_set(err, GS_IO, "%s: %s", path,
                          S_ISDIR(st.st_mode) ? "is a directory" : strerror(e ? e : EINVAL));
    }
    struct gs_gguf *g = gs_calloc(1, sizeof(*g));
    if (!g) {
        close(fd);
        return gs_err_set(err, GS_NOMEM, "no memory for a GGUF handle");
    }
    g->size = (uint64_t)st.st_size;
    if (g->size > 0) {
        /* MAP_PRIVATE + PROT_READ: the weights are shared with the page cache and
         * never copied; nothing we do can write to the file. */
        void *m = mmap(NULL, (size_t)g->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            gs_free(g);
            return gs_err_set(err, GS_IO, "%s: mmap: %s", path, strerror(e));
        }
        g->base = m;
        g->mapped = true;
    }
    close(fd);
    enum gs_status rc = open_common(g, out, err);
    if (rc)
        gs_err_prefix(err, "%s", path);
    return rc;
}

void gs_gguf_close(struct gs_gguf *g)
{
    if (!g)
        return;
    if (g->kvs)
        for (uint64_t i = 0; i < g->n_kv; i++)
            if (g->kvs[i].type == GS_GGUF_ARRAY)
                gs_free((void *)g->kvs[i].v.arr.strs);
    gs_free(g->kvs);
    gs_free(g->tensors);
    gs_free(g->tensor_by_name);
    if (g->mapped)
        munmap((void *)g->base, (size_t)g->size);
    gs_free(g);
}

/* ---- accessors --------------------------------------------------------------------- */

uint32_t gs_gguf_version(const struct gs_gguf *g)
{
    return g->version;
}

uint32_t gs_gguf_alignment(const struct gs_gguf *g)
{
    return g->alignment;
}

uint64_t gs_gguf_file_bytes(const struct gs_gguf *g)
{
    return g->size;
}

uint64_t gs_gguf_data_offset(const struct gs_gguf *g)
{
    return g->data_offset;
}

const void *gs_gguf_file_data(const struct gs_gguf *g)
{
    return g->base;
}

uint64_t gs_gguf_n_kv(const struct gs_gguf *g)
{
    return g->n_kv;
}

const struct gs_gguf_kv *gs_gguf_kv_at(const struct gs_gguf *g, uint64_t i)
{
    return i < g->n_kv ? &g->kvs[i] : NULL;
}

bool gs_gguf_str_eq(struct gs_gguf_str s, const char *c)
{
    size_t n = strlen(c);
    return s.len == n && !memcmp(s.data, c, n);
}

const struct gs_gguf_kv *gs_gguf_find_kv(const struct gs_gguf *g, const char *key)
{
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (gs_gguf_str_eq(g->kvs[i].key, key))
            return &g->kvs[i];
    return NULL;
}

uint64_t gs_gguf_n_tensors(const struct gs_gguf *g)
{
    return g->n_tensors;
}

const struct gs_gguf_tensor *gs_gguf_tensor_at(const struct gs_gguf *g, uint64_t i)
{
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const struct gs_gguf_tensor *gs_gguf_find_tensor(const struct gs_gguf *g, const char *name)
{
    struct gs_gguf_str key = {.len = strlen(name), .data = name};
    uint64_t lo = 0, hi = g->n_tensors;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        const struct gs_gguf_tensor *t = g->tensor_by_name[mid];
        int r = str_cmp(t->name, key);
        if (r == 0)
            return t;
        if (r < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* ---- typed getters ------------------------------------------------------------------ */

/* Finds key and checks that its value is of the given kind (the same rules as
 * for well-known keys at open), naming the key in either failure. */
static enum gs_status get_kind(const struct gs_gguf *g, const char *key, enum key_kind kind,
                               const struct gs_gguf_kv **out, struct gs_err *err)
{
    *out = gs_gguf_find_kv(g, key);
    if (!*out)
        return gs_err_set(err, GS_NOTFOUND, "metadata '%s': missing", key);
    const struct known_key want = {.key = key, .kind = kind, .elem = GS_GGUF_VTYPE_COUNT};
    if (!kind_matches(&want, *out))
        return gs_err_set(err, GS_FORMAT, "metadata '%s': expected %s, found %s", key,
                          key_kind_name[kind], vtypes[(*out)->type].name);
    return GS_OK;
}

enum gs_status gs_gguf_get_i64(const struct gs_gguf *g, const char *key, int64_t *out,
                               struct gs_err *err)
{
    const struct gs_gguf_kv *kv;
    enum gs_status rc = get_kind(g, key, KEY_INT, &kv, err);
    if (rc)
        return rc;
    if (!vtype_is_signed(kv->type) && kv->v.u64 > (uint64_t)INT64_MAX)
        return gs_err_set(err, GS_FORMAT, "metadata '%s': %llu is out of range", key,
                          (unsigned long long)kv->v.u64);
    *out = kv->v.i64;
    return GS_OK;
}

enum gs_status gs_gguf_get_u64(const struct gs_gguf *g, const char *key, uint64_t *out,
                               struct gs_err *err)
{
    const struct gs_gguf_kv *kv;
    enum gs_status rc = get_kind(g, key, KEY_INT, &kv, err);
    if (rc)
        return rc;
    if (vtype_is_signed(kv->type) && kv->v.i64 < 0)
        return gs_err_set(err, GS_FORMAT, "metadata '%s': %lld is negative", key,
                          (long long)kv->v.i64);
    *out = kv->v.u64;
    return GS_OK;
}

enum gs_status gs_gguf_get_u32(const struct gs_gguf *g, const char *key, uint32_t *out,
                               struct gs_err *err)
{
    uint64_t v;
    enum gs_status rc = gs_gguf_get_u64(g, key, &v, err);
    if (rc)
        return rc;
    if (v > UINT32_MAX)
        return gs_err_set(err, GS_FORMAT, "metadata '%s': %llu does not fit in 32 bits", key,
                          (unsigned long long)v);
    *out = (uint32_t)v;
    return GS_OK;
}

enum gs_status gs_gguf_get_f32(const struct gs_gguf *g, const char *key, float *out,
                               struct gs_err *err)
{
    const struct gs_gguf_kv *kv;
    enum gs_status rc = get_kind(g, key, KEY_FLOAT, &kv, err);
    if (rc)
        return rc;
    *out = (float)kv->v.f64;
    return GS_OK;
}

enum gs_status gs_gguf_get_bool(const struct gs_gguf *g, const char *key, bool *out,
                                struct gs_err *err)
{
    const struct gs_gguf_kv *kv;
    enum gs_status rc = get_kind(g, key, KEY_BOOL, &kv, err);
    if (rc)
        return rc;
    *out = kv->v.u64 != 0;
    return GS_OK;
}

enum gs_status gs_gguf_get_str(const struct gs_gguf *g, const char *key,
                               struct gs_gguf_str *out, struct gs_err *err)
{
    const struct gs_gguf_kv *kv;
    enum gs_status rc = get_kind(g, key, KEY_STRING, &kv, err);
    if (rc)
        return rc;
    *out = kv->v.str;
    return GS_OK;
}

enum gs_status gs_gguf_get_arr(const struct gs_gguf *g, const char *key, enum gs_gguf_vtype elem,
                               const struct gs_gguf_kv **out, struct gs_err *err)
{
    const struct gs_gguf_kv *kv;
    enum gs_status rc = get_kind(g, key, KEY_ARRAY, &kv, err);
    if (rc)
        return rc;
    if (elem != GS_GGUF_VTYPE_COUNT && kv->v.arr.type != elem)
        return gs_err_set(err, GS_FORMAT, "metadata '%s': expected an array of %s, found %s",
                          key, vtypes[elem].name, vtypes[kv->v.arr.type].name);
    *out = kv;
    return GS_OK;
}

struct gs_gguf_kv gs_gguf_arr_get(const struct gs_gguf_kv *arr, uint64_t i)
{
    struct gs_gguf_kv e = {.key = arr->key};
    assert(arr->type == GS_GGUF_ARRAY && i < arr->v.arr.n);
    if (arr->v.arr.type == GS_GGUF_STRING) {
        e.type = GS_GGUF_STRING;
        e.v.str = arr->v.arr.strs[i];
    } else {
        size_t size = vtypes[arr->v.arr.type].size;
        decode_scalar(arr->v.arr.type, (const uint8_t *)arr->v.arr.data + i * size, &e);
    }
    return e;
}

float gs_gguf_arr_f32(const struct gs_gguf_kv *kv, uint64_t i)
{
    float v;
    assert(kv->type == GS_GGUF_ARRAY && kv->v.arr.type == GS_GGUF_F32 && i < kv->v.arr.n);
    memcpy(&v, (const uint8_t *)kv->v.arr.data + 4 * i, 4);
    return v;
}

int32_t gs_gguf_arr_i32(const struct gs_gguf_kv *kv, uint64_t i)
{
    int32_t v;
    assert(kv->type == GS_GGUF_ARRAY && (kv->v.arr.type == GS_GGUF_I32 ||
                                         kv->v.arr.type == GS_GGUF_U32) && i < kv->v.arr.n);
    memcpy(&v, (const uint8_t *)kv->v.arr.data + 4 * i, 4);
    return v;
}
