/*
 * engine/gguf.h - GGUF model files: a zero-copy reader that validates every
 * field before use, and a permissive writer.
 *
 * Reader. gs_gguf_open() maps the file read-only and checks the whole header
 * before returning: magic, version (2 or 3), counts, string and array lengths,
 * value types, tensor dims, types and byte sizes, alignment, data offsets
 * (aligned, in bounds, not overlapping), duplicate keys and tensor names, and
 * the types of well-known keys (tokenizer.ggml.scores must be an array of f32,
 * ...). A file that fails any check is refused with GS_FORMAT (or
 * GS_UNSUPPORTED for a known but unimplemented tensor type) and a message that
 * names the field. Nothing is allocated from an unchecked size; nothing aborts.
 *
 * Zero copy: strings, arrays and tensor data point into the mapping. They are
 * borrowed until gs_gguf_close(). Strings are NOT NUL-terminated: use .len.
 *
 * Writer. gs_gguf_writer collects metadata and tensors and writes a file. It
 * checks nothing beyond its own memory: tests use it to craft hostile files,
 * and the override fields in struct gs_gguf_writer_opts exist for that.
 *
 * Threads: an open struct gs_gguf is immutable and may be read from any number
 * of threads. A writer belongs to one thread.
 */
#ifndef GS_GGUF_H
#define GS_GGUF_H

#include "engine/base.h"
#include "engine/quant.h"

#define GS_GGUF_MAGIC 0x46554747u /* "GGUF" read as little-endian u32 */
#define GS_GGUF_DEFAULT_ALIGNMENT 32
#define GS_GGUF_MAX_DIMS 4

enum gs_gguf_vtype {
    GS_GGUF_U8 = 0,
    GS_GGUF_I8 = 1,
    GS_GGUF_U16 = 2,
    GS_GGUF_I16 = 3,
    GS_GGUF_U32 = 4,
    GS_GGUF_I32 = 5,
    GS_GGUF_F32 = 6,
    GS_GGUF_BOOL = 7,
    GS_GGUF_STRING = 8,
    GS_GGUF_ARRAY = 9,
    GS_GGUF_U64 = 10,
    GS_GGUF_I64 = 11,
    GS_GGUF_F64 = 12,
    GS_GGUF_VTYPE_COUNT
};

/* Name of a value type ("u32", "string", "array"), "?" if out of range. */
const char *gs_gguf_vtype_name(int32_t t);

/* Size in bytes of a scalar value type; 0 for STRING and ARRAY. */
size_t gs_gguf_vtype_size(enum gs_gguf_vtype t);

/* A string inside the file: not NUL-terminated, borrowed from the mapping. */
struct gs_gguf_str {
    uint64_t len;
    const char *data;
};

/* One metadata key/value. */
struct gs_gguf_kv {
    struct gs_gguf_str key;
    enum gs_gguf_vtype type;
    union {
        uint64_t u64; /* U8, U16, U32, U64, BOOL (0/1), zero-extended */
        int64_t i64;  /* I8, I16, I32, I64, sign-extended */
        double f64;   /* F32, F64 */
        struct gs_gguf_str str;
        struct {
            enum gs_gguf_vtype type; /* element type; never ARRAY (nested arrays are refused) */
            uint64_t n;              /* element count */
            const void *data;        /* scalar elements: packed little-endian, unaligned */
            const struct gs_gguf_str *strs; /* STRING elements: n entries, owned by the reader */
        } arr;
    } v;
};

/* One tensor in the table. */
struct gs_gguf_tensor {
    struct gs_gguf_str name;
    enum gs_type type;
    uint32_t n_dims;                 /* 1..GS_GGUF_MAX_DIMS */
    int64_t ne[GS_GGUF_MAX_DIMS];    /* elements per dim, ne[0] is the row length; unused dims 1 */
    uint64_t offset;                 /* from the start of the data section */
    uint64_t nbytes;                 /* exact size of the data */
    const void *data;                /* into the mapping, aligned to the file's alignment */
};

struct gs_gguf; /* opaque: an open, validated file */

/* ---- reader ---------------------------------------------------------------- */

/* Maps and validates path. On success *out is owned by the caller and freed with
 * gs_gguf_close(). On failure *out is NULL and err names the bad field. */
enum gs_status gs_gguf_open(const char *path, struct gs_gguf **out, struct gs_err *err);

/* Same over a caller-owned buffer (fuzzing, tests); buf must outlive the result. */
enum gs_status gs_gguf_open_mem(const void *buf, size_t len, struct gs_gguf **out,
                                struct gs_err *err);

void gs_gguf_close(struct gs_gguf *g);

uint32_t gs_gguf_version(const struct gs_gguf *g);
uint32_t gs_gguf_alignment(const struct gs_gguf *g);
uint64_t gs_gguf_file_bytes(const struct gs_gguf *g);
uint64_t gs_gguf_data_offset(const struct gs_gguf *g); /* file offset of the data section */
const void *gs_gguf_file_data(const struct gs_gguf *g); /* the whole mapping, file_bytes long */

uint64_t gs_gguf_n_kv(const struct gs_gguf *g);
const struct gs_gguf_kv *gs_gguf_kv_at(const struct gs_gguf *g, uint64_t i);
/* NULL when absent. */
const struct gs_gguf_kv *gs_gguf_find_kv(const struct gs_gguf *g, const char *key);

uint64_t gs_gguf_n_tensors(const struct gs_gguf *g);
const struct gs_gguf_tensor *gs_gguf_tensor_at(const struct gs_gguf *g, uint64_t i);
/* NULL when absent. */
const struct gs_gguf_tensor *gs_gguf_find_tensor(const struct gs_gguf *g, const char *name);

/*
 * Typed getters. Each returns GS_NOTFOUND (message names the key) when absent,
 * GS_FORMAT when present with a type that cannot represent the request (any
 * integer type is accepted for an integer if the value fits; f32/f64 for a
 * float; a string for a string), GS_OK otherwise.
 */
enum gs_status gs_gguf_get_u64(const struct gs_gguf *g, const char *key, uint64_t *out,
                               struct gs_err *err);
enum gs_status gs_gguf_get_u32(const struct gs_gguf *g, const char *key, uint32_t *out,
                               struct gs_err *err);
enum gs_status gs_gguf_get_i64(const struct gs_gguf *g, const char *key, int64_t *out,
                               struct gs_err *err);
enum gs_status gs_gguf_get_f32(const struct gs_gguf *g, const char *key, float *out,
                               struct gs_err *err);
enum gs_status gs_gguf_get_bool(const struct gs_gguf *g, const char *key, bool *out,
                                struct gs_err *err);
enum gs_status gs_gguf_get_str(const struct gs_gguf *g, const char *key,
                               struct gs_gguf_str *out, struct gs_err *err);
/* An array whose elements have type elem (GS_GGUF_VTYPE_COUNT: any type). */
enum gs_status gs_gguf_get_arr(const struct gs_gguf *g, const char *key, enum gs_gguf_vtype elem,
                               const struct gs_gguf_kv **out, struct gs_err *err);

/* Element i of an array as a scalar value (type = the element type, key = the
 * array's key), decoded like a scalar entry. Callers index below arr.n. */
struct gs_gguf_kv gs_gguf_arr_get(const struct gs_gguf_kv *arr, uint64_t i);

/* Reads element i of a scalar array as the given C type (no bounds check beyond
 * an assert: callers index below arr.n). */
float gs_gguf_arr_f32(const struct gs_gguf_kv *kv, uint64_t i);
int32_t gs_gguf_arr_i32(const struct gs_gguf_kv *kv, uint64_t i);

/* Compares a file string with a C string. */
bool gs_gguf_str_eq(struct gs_gguf_str s, const char *c);

/* ---- writer ---------------------------------------------------------------- */

struct gs_gguf_writer; /* opaque */

/* Overrides for crafting files; zero means "do the right thing". */
struct gs_gguf_writer_opts {
    uint32_t magic;            /* 0: GS_GGUF_MAGIC */
    uint32_t version;          /* 0: 3 */
    uint32_t alignment;        /* 0: GS_GGUF_DEFAULT_ALIGNMENT (also written as general.alignment
                                  only if the caller adds that key) */
    bool n_tensors_override;   /* write n_tensors_value instead of the real count */
    uint64_t n_tensors_value;
    bool n_kv_override;        /* write n_kv_value instead of the real count */
    uint64_t n_kv_value;
};

enum gs_status gs_gguf_writer_new(const struct gs_gguf_writer_opts *opts,
                                  struct gs_gguf_writer **out, struct gs_err *err);
void gs_gguf_writer_free(struct gs_gguf_writer *w);

/* Metadata. Keys and string values are copied. */
enum gs_status gs_gguf_w_u32(struct gs_gguf_writer *w, const char *key, uint32_t v);
enum gs_status gs_gguf_w_i32(struct gs_gguf_writer *w, const char *key, int32_t v);
enum gs_status gs_gguf_w_u64(struct gs_gguf_writer *w, const char *key, uint64_t v);
enum gs_status gs_gguf_w_f32(struct gs_gguf_writer *w, const char *key, float v);
enum gs_status gs_gguf_w_bool(struct gs_gguf_writer *w, const char *key, bool v);
enum gs_status gs_gguf_w_str(struct gs_gguf_writer *w, const char *key, const char *v);
/* A scalar of any type given as raw little-endian bytes (for odd cases in tests). */
enum gs_status gs_gguf_w_raw(struct gs_gguf_writer *w, const char *key, enum gs_gguf_vtype type,
                             const void *v, size_t v_bytes);
/* Arrays: elements of a scalar type (packed, copied) or C strings (copied). */
enum gs_status gs_gguf_w_arr(struct gs_gguf_writer *w, const char *key, enum gs_gguf_vtype elem,
                             const void *data, uint64_t n);
enum gs_status gs_gguf_w_arr_str(struct gs_gguf_writer *w, const char *key,
                                 const char *const *strs, uint64_t n);
/* Copies a value read from another file (any type, arrays included) under its key,
 * byte for byte. GS_UNSUPPORTED for a value type the reader does not give, GS_NOMEM. */
enum gs_status gs_gguf_w_copy_kv(struct gs_gguf_writer *w, const struct gs_gguf_kv *kv);
/* Strings with explicit lengths (may contain NUL bytes). */
enum gs_status gs_gguf_w_arr_strn(struct gs_gguf_writer *w, const char *key,
                                  const char *const *strs, const uint64_t *lens, uint64_t n);

/*
 * Adds a tensor of type t and shape ne[0..n_dims). data holds its bytes
 * (row_bytes(t, ne[0]) * rows) and is copied. Offsets are assigned in order,
 * aligned to the file's alignment, unless offset_override is non-NULL (tests).
 * nbytes_override, when non-zero, is the number of data bytes stored.
 */
struct gs_gguf_w_tensor {
    const char *name;
    int32_t type;
    uint32_t n_dims;
    int64_t ne[GS_GGUF_MAX_DIMS];
    const void *data;
    uint64_t nbytes;            /* bytes at data */
    const uint64_t *offset_override;
};
enum gs_status gs_gguf_w_tensor(struct gs_gguf_writer *w, const struct gs_gguf_w_tensor *t);

/* Serialises to a malloc'ed buffer (caller frees with gs_free) or to a file. */
enum gs_status gs_gguf_writer_to_mem(struct gs_gguf_writer *w, void **buf, size_t *len,
                                     struct gs_err *err);
enum gs_status gs_gguf_writer_to_file(struct gs_gguf_writer *w, const char *path,
                                      struct gs_err *err);

#endif /* GS_GGUF_H */
