/*
 * engine/gguf/write.c - the GGUF writer. It serialises exactly what it is
 * given: validation is the reader's job, and tests rely on being able to write
 * files the reader must refuse. See engine/gguf.h.
 *
 * Metadata entries are serialised as they are added, into one growing buffer;
 * tensors are kept as (info, copied data) until the file is written, because
 * their offsets depend on the alignment and on every tensor before them.
 */
#include "engine/gguf.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

struct buf {
    uint8_t *p;
    size_t len;
    size_t cap;
    bool failed; /* an allocation failed: every later append is a no-op */
};

static void buf_put(struct buf *b, const void *data, size_t n)
{
    if (b->failed)
        return;
    if (b->cap - b->len < n) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < n) {
            if (cap > SIZE_MAX / 2) {
                b->failed = true;
                return;
            }
            cap *= 2;
        }
        uint8_t *p = gs_realloc(b->p, cap);
        if (!p) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->len, data, n);
    b->len += n;
}

static void buf_u32(struct buf *b, uint32_t v)
{
    buf_put(b, &v, 4);
}

static void buf_u64(struct buf *b, uint64_t v)
{
    buf_put(b, &v, 8);
}

static void buf_strn(struct buf *b, const char *s, uint64_t n)
{
    buf_u64(b, n);
    buf_put(b, s, (size_t)n);
}

struct w_tensor {
    struct gs_gguf_w_tensor info; /* .name and .data point at our copies */
    char *name;
    void *data;
    bool has_offset;
    uint64_t offset;
};

struct gs_gguf_writer {
    struct gs_gguf_writer_opts opts;
    struct buf kv;        /* serialised metadata entries */
    uint64_t n_kv;
    struct w_tensor *tensors;
    uint64_t n_tensors;
    uint64_t cap_tensors;
};

enum gs_status gs_gguf_writer_new(const struct gs_gguf_writer_opts *opts,
                                  struct gs_gguf_writer **out, struct gs_err *err)
{
    struct gs_gguf_writer *w = gs_calloc(1, sizeof(*w));
    if (!w)
        return gs_err_set(err, GS_NOMEM, "no memory for a GGUF writer");
    if (opts)
        w->opts = *opts;
    if (!w->opts.magic)
        w->opts.magic = GS_GGUF_MAGIC;
    if (!w->opts.version)
        w->opts.version = 3;
    if (!w->opts.alignment)
        w->opts.alignment = GS_GGUF_DEFAULT_ALIGNMENT;
    *out = w;
    return GS_OK;
}

void gs_gguf_writer_free(struct gs_gguf_writer *w)
{
    if (!w)
        return;
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        gs_free(w->tensors[i].name);
        gs_free(w->tensors[i].data);
    }
    gs_free(w->tensors);
    gs_free(w->kv.p);
    gs_free(w);
}

static enum gs_status kv_done(struct gs_gguf_writer *w)
{
    if (w->kv.failed)
        return GS_NOMEM;
    w->n_kv++;
    return GS_OK;
}

static void kv_head(struct gs_gguf_writer *w, const char *key, enum gs_gguf_vtype type)
{
    buf_strn(&w->kv, key, strlen(key));
    buf_u32(&w->kv, (uint32_t)type);
}

enum gs_status gs_gguf_w_raw(struct gs_gguf_writer *w, const char *key, enum gs_gguf_vtype type,
                             const void *v, size_t v_bytes)
{
    kv_head(w, key, type);
    buf_put(&w->kv, v, v_bytes);
    return kv_done(w);
}

enum gs_status gs_gguf_w_u32(struct gs_gguf_writer *w, const char *key, uint32_t v)
{
    return gs_gguf_w_raw(w, key, GS_GGUF_U32, &v, 4);
}

enum gs_status gs_gguf_w_i32(struct gs_gguf_writer *w, const char *key, int32_t v)
{
    return gs_gguf_w_raw(w, key, GS_GGUF_I32, &v, 4);
}

enum gs_status gs_gguf_w_u64(struct gs_gguf_writer *w, const char *key, uint64_t v)
{
    return gs_gguf_w_raw(w, key, GS_GGUF_U64, &v, 8);
}

enum gs_status gs_gguf_w_f32(struct gs_gguf_writer *w, const char *key, float v)
{
    return gs_gguf_w_raw(w, key, GS_GGUF_F32, &v, 4);
}

enum gs_status gs_gguf_w_bool(struct gs_gguf_writer *w, const char *key, bool v)
{
    uint8_t b = v;
    return gs_gguf_w_raw(w, key, GS_GGUF_BOOL, &b, 1);
}

enum gs_status gs_gguf_w_str(struct gs_gguf_writer *w, const char *key, const char *v)
{
    kv_head(w, key, GS_GGUF_STRING);
    buf_strn(&w->kv, v, strlen(v));
    return kv_done(w);
}

enum gs_status gs_gguf_w_arr(struct gs_gguf_writer *w, const char *key, enum gs_gguf_vtype elem,
                             const void *data, uint64_t n)
{
    uint64_t bytes;
    if (gs_mul_overflow(n, gs_gguf_vtype_size(elem), &bytes) || bytes > SIZE_MAX)
        return GS_INVAL;
    kv_head(w, key, GS_GGUF_ARRAY);
    buf_u32(&w->kv, (uint32_t)elem);
    buf_u64(&w->kv, n);
    buf_put(&w->kv, data, (size_t)bytes);
    return kv_done(w);
}

enum gs_status gs_gguf_w_arr_strn(struct gs_gguf_writer *w, const char *key,
                                  const char *const *strs, const uint64_t *lens, uint64_t n)
{
    kv_head(w, key, GS_GGUF_ARRAY);
    buf_u32(&w->kv, GS_GGUF_STRING);
    buf_u64(&w->kv, n);
    for (uint64_t i = 0; i < n; i++)
        buf_strn(&w->kv, strs[i], lens ? lens[i] : strlen(strs[i]));
    return kv_done(w);
}

enum gs_status gs_gguf_w_copy_kv(struct gs_gguf_writer *w, const struct gs_gguf_kv *kv)
{
    buf_strn(&w->kv, kv->key.data, kv->key.len);
    buf_u32(&w->kv, (uint32_t)kv->type);
    if (kv->type == GS_GGUF_STRING) {
        buf_strn(&w->kv, kv->v.str.data, kv->v.str.len);
    } else if (kv->type == GS_GGUF_ARRAY) {
        buf_u32(&w->kv, (uint32_t)kv->v.arr.type);
        buf_u64(&w->kv, kv->v.arr.n);
        if (kv->v.arr.type == GS_GGUF_STRING) {
            for (uint64_t i = 0; i < kv->v.arr.n; i++)
                buf_strn(&w->kv, kv->v.arr.strs[i].data, kv->v.arr.strs[i].len);
        } else {
            /* the reader keeps scalar elements packed as the file had them */
            const size_t size = gs_gguf_vtype_size(kv->v.arr.type);
            if (!size || kv->v.arr.n > SIZE_MAX / size)
                return GS_UNSUPPORTED;
            buf_put(&w->kv, kv->v.arr.data, (size_t)kv->v.arr.n * size);
        }
    } else {
        /* scalars: the reader widened them; write them back at their own width */
        const size_t size = gs_gguf_vtype_size(kv->type);
        uint8_t raw[8] = {0};
        if (kv->type == GS_GGUF_F32) {
            const float f = (float)kv->v.f64;
            memcpy(raw, &f, 4);
        } else if (kv->type == GS_GGUF_F64) {
            memcpy(raw, &kv->v.f64, 8);
        } else {
            memcpy(raw, &kv->v.u64, 8); /* little-endian: the low bytes are the value */
        }
        if (!size || size > sizeof(raw))
            return GS_UNSUPPORTED;
        buf_put(&w->kv, raw, size);
    }
    return kv_done(w);
}

enum gs_status gs_gguf_w_arr_str(struct gs_gguf_writer *w, const char *key,
                                 const char *const *strs, uint64_t n)
{
    return gs_gguf_w_arr_strn(w, key, strs, NULL, n);
}

enum gs_status gs_gguf_w_tensor(struct gs_gguf_writer *w, const struct gs_gguf_w_tensor *t)
{
    if (t->n_dims > GS_GGUF_MAX_DIMS || t->nbytes > SIZE_MAX)
        return GS_INVAL;
    if (w->n_tensors == w->cap_tensors) {
        uint64_t cap = w->cap_tensors ? 2 * w->cap_tensors : 16;
        struct w_tensor *p = gs_realloc(w->tensors, (size_t)cap * sizeof(*p));
        if (!p)
            return GS_NOMEM;
        w->tensors = p;
        w->cap_tensors = cap;
    }
    struct w_tensor *wt = &w->tensors[w->n_tensors];
    memset(wt, 0, sizeof(*wt));
    wt->name = gs_strdup(t->name);
    wt->data = gs_malloc((size_t)t->nbytes);
    if (!wt->name || !wt->data) {
        gs_free(wt->name);
        gs_free(wt->data);
        return GS_NOMEM;
    }
    if (t->nbytes)
        memcpy(wt->data, t->data, (size_t)t->nbytes);
    wt->info = *t;
    wt->info.name = wt->name;
    wt->info.data = wt->data;
    wt->info.offset_override = NULL;
    if (t->offset_override) {
        wt->has_offset = true;
        wt->offset = *t->offset_override;
    }
    w->n_tensors++;
    return GS_OK;
}

static uint64_t align_up(uint64_t x, uint64_t a)
{
    return (x + a - 1) / a * a;
}

/* Where serialised bytes go: a memory buffer, or a file written as we go so
 * that a multi-gigabyte model never needs a second copy in memory. */
struct sink {
    struct buf *mem;
    FILE *file;
    uint64_t written;
    bool failed;
};

static void sink_put(struct sink *s, const void *p, size_t n)
{
    if (s->mem) {
        buf_put(s->mem, p, n);
        s->failed = s->mem->failed;
    } else if (!s->failed && n && fwrite(p, 1, n, s->file) != n) {
        s->failed = true;
    }
    s->written += n;
}

static void sink_zeros(struct sink *s, uint64_t n)
{
    static const uint8_t zeros[256];
    while (n) {
        size_t k = (size_t)GS_MIN(n, sizeof(zeros));
        sink_put(s, zeros, k);
        n -= k;
    }
}

static void serialise(struct gs_gguf_writer *w, struct sink *s)
{
    struct buf head = {0};
    uint64_t a = w->opts.alignment;
    buf_u32(&head, w->opts.magic);
    buf_u32(&head, w->opts.version);
    buf_u64(&head, w->opts.n_tensors_override ? w->opts.n_tensors_value : w->n_tensors);
    buf_u64(&head, w->opts.n_kv_override ? w->opts.n_kv_value : w->n_kv);
    buf_put(&head, w->kv.p, w->kv.len);

    /* Assign offsets in order; an overridden offset does not move the others. */
    uint64_t next = 0;
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        struct w_tensor *t = &w->tensors[i];
        if (!t->has_offset) {
            t->offset = align_up(next, a);
            next = t->offset + t->info.nbytes;
        }
        buf_strn(&head, t->name, strlen(t->name));
        buf_u32(&head, t->info.n_dims);
        for (uint32_t d = 0; d < t->info.n_dims; d++)
            buf_u64(&head, (uint64_t)t->info.ne[d]);
        buf_u32(&head, (uint32_t)t->info.type);
        buf_u64(&head, t->offset);
    }
    if (head.failed)
        s->failed = true;
    sink_put(s, head.p, head.len);
    uint64_t data_start = align_up(head.len, a);
    gs_free(head.p);
    sink_zeros(s, data_start - s->written);
    /* Tensors with natural offsets go where the offsets say; tensors with
     * overridden offsets (crafted files) are appended after them. */
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        struct w_tensor *t = &w->tensors[i];
        if (t->has_offset)
            continue;
        sink_zeros(s, data_start + t->offset - s->written);
        sink_put(s, t->data, (size_t)t->info.nbytes);
    }
    for (uint64_t i = 0; i < w->n_tensors; i++)
        if (w->tensors[i].has_offset)
            sink_put(s, w->tensors[i].data, (size_t)w->tensors[i].info.nbytes);
}

enum gs_status gs_gguf_writer_to_mem(struct gs_gguf_writer *w, void **out, size_t *out_len,
                                     struct gs_err *err)
{
    struct buf b = {0};
    struct sink s = {.mem = &b};
    serialise(w, &s);
    if (w->kv.failed || s.failed) {
        gs_free(b.p);
        return gs_err_set(err, GS_NOMEM, "no memory to serialise the GGUF file");
    }
    *out = b.p;
    *out_len = b.len;
    return GS_OK;
}

enum gs_status gs_gguf_writer_to_file(struct gs_gguf_writer *w, const char *path,
                                      struct gs_err *err)
{
    if (w->kv.failed)
        return gs_err_set(err, GS_NOMEM, "no memory to serialise the GGUF file");
    FILE *f = fopen(path, "wb");
    if (!f)
        return gs_err_set(err, GS_IO, "%s: %s", path, strerror(errno));
    struct sink s = {.file = f};
    serialise(w, &s);
    bool ok = fclose(f) == 0 && !s.failed;
    if (!ok)
        return gs_err_set(err, GS_IO, "%s: write failed", path);
    return GS_OK;
}
