/* engine/models/model.c - the helpers every builder shares: weights by name and shape,
 * the ones vector, pooling. The table of builders is registry.c, so that the builders
 * calling these and the table naming the builders are not one cycle. */
#include "engine/model.h"

#include <stdio.h>
#include <string.h>

/* The tensor `name` checked against shape [ne0 x ne1] and a supported type. */
static enum gs_status find_weight(struct gs_model *m, const char *name, int64_t ne0, int64_t ne1,
                                  const struct gs_gguf_tensor **out, struct gs_err *err)
{
    const struct gs_gguf_tensor *t = gs_gguf_find_tensor(m->file, name);
    *out = t;
    if (!t)
        return gs_err_set(err, GS_FORMAT, "tensor '%s' is missing", name);
    /* Trailing dims of 1 are the same shape: [64] and [64 x 1]. */
    int64_t rows = 1;
    for (uint32_t d = 1; d < t->n_dims; d++)
        rows *= t->ne[d];
    if (t->ne[0] != ne0 || rows != ne1 || (t->n_dims > 2 && t->ne[2] * t->ne[3] != 1))
        return gs_err_set(err, GS_FORMAT,
                          "tensor '%s' has shape [%lld x %lld], the metadata implies [%lld x %lld]",
                          name, (long long)t->ne[0], (long long)rows, (long long)ne0,
                          (long long)ne1);
    const struct gs_type_traits *tt = gs_type_traits(t->type);
    if (!tt || !tt->supported || (t->type != GS_TYPE_F32 && !tt->to_f32))
        return gs_err_set(err, GS_UNSUPPORTED, "tensor '%s': type %s is not supported", name,
                          gs_type_name(t->type));
    return GS_OK;
}

enum gs_status gs_model_weight_rows(struct gs_model *m, const char *name, int64_t ne0, int64_t ne1,
                                    int64_t row0, int64_t n_rows, uint32_t *id, struct gs_err *err)
{
    *id = GS_NODE_NONE;
    const struct gs_gguf_tensor *t;
    enum gs_status st = find_weight(m, name, ne0, ne1, &t, err);
    if (st)
        return st;
    uint64_t row_bytes = 0;
    if (row0 < 0 || n_rows <= 0 || row0 + n_rows > ne1 ||
        gs_type_row_bytes(t->type, ne0, &row_bytes) != GS_OK)
        return gs_err_set(err, GS_FORMAT, "tensor '%s': rows [%lld, %lld) are not in the tensor",
                          name, (long long)row0, (long long)(row0 + n_rows));
    *id = gs_graph_weight(m->graph, name, t->type, ne0, n_rows,
                          (const char *)t->data + (uint64_t)row0 * row_bytes);
    gs_graph_name(m->graph, *id, "%s[%lld:%lld]", name, (long long)row0,
                  (long long)(row0 + n_rows));
    return gs_graph_status(m->graph, err);
}

enum gs_status gs_model_weight(struct gs_model *m, const char *name, int64_t ne0, int64_t ne1,
                               bool optional, uint32_t *id, struct gs_err *err)
{
    *id = GS_NODE_NONE;
    if (optional && !gs_gguf_find_tensor(m->file, name))
        return GS_OK;
    const struct gs_gguf_tensor *t;
    enum gs_status st = find_weight(m, name, ne0, ne1, &t, err);
    if (st)
        return st;
    *id = gs_graph_weight(m->graph, name, t->type, ne0, ne1, t->data);
    return gs_graph_status(m->graph, err);
}

enum gs_status gs_model_weight_stacked(struct gs_model *m, const char *name, int64_t ne0,
                                       int64_t ne1, int64_t n_mat, int64_t i, uint32_t *id,
                                       struct gs_err *err)
{
    *id = GS_NODE_NONE;
    const struct gs_gguf_tensor *t = gs_gguf_find_tensor(m->file, name);
    if (!t)
        return gs_err_set(err, GS_FORMAT, "tensor '%s' is missing", name);
    if (t->n_dims != 3 || t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != n_mat)
        return gs_err_set(err, GS_FORMAT,
                          "tensor '%s' must be [%lld x %lld x %lld] (the metadata implies it)",
                          name, (long long)ne0, (long long)ne1, (long long)n_mat);
    const struct gs_type_traits *tt = gs_type_traits(t->type);
    uint64_t row_bytes = 0;
    if (!tt || !tt->supported || (t->type != GS_TYPE_F32 && !tt->to_f32) ||
        gs_type_row_bytes(t->type, ne0, &row_bytes))
        return gs_err_set(err, GS_UNSUPPORTED, "tensor '%s': type %s is not supported", name,
                          gs_type_name(t->type));
    *id = gs_graph_weight(m->graph, name, t->type, ne0, ne1,
                          (const char *)t->data + (uint64_t)(i * ne1) * row_bytes);
    gs_graph_name(m->graph, *id, "%s[%lld]", name, (long long)i);
    return gs_graph_status(m->graph, err);
}

uint32_t gs_model_ones(struct gs_model *m, int64_t n)
{
    if (!m->ones && n > 0) {
        m->ones = gs_alloc_array((size_t)n, sizeof(float));
        for (int64_t i = 0; m->ones && i < n; i++)
            m->ones[i] = 1.0f;
        m->n_ones = m->ones ? n : 0;
    }
    if (n != m->n_ones) /* no memory, or another width: a sticky error naming it */
        return gs_graph_weight(m->graph, "ones", GS_TYPE_F32, n, 1, NULL);
    return gs_graph_name(m->graph, gs_graph_weight(m->graph, "ones", GS_TYPE_F32, n, 1, m->ones),
                         "ones[%lld]", (long long)n);
}

const char *gs_pooling_name(enum gs_pooling p)
{
    static const char *const names[] = {
        [GS_POOLING_NONE] = "none",
        [GS_POOLING_MEAN] = "mean",
        [GS_POOLING_CLS] = "cls",
        [GS_POOLING_LAST] = "last",
    };
    return (unsigned)p < GS_ARRAY_LEN(names) ? names[p] : NULL;
}

enum gs_status gs_model_pooling(const struct gs_model *m, enum gs_pooling *out, struct gs_err *err)
{
    char key[128];
    snprintf(key, sizeof(key), "%s.pooling_type", m->hp.arch);
    uint32_t v;
    enum gs_status st = gs_gguf_get_u32(m->file, key, &v, err);
    if (st)
        return st;
    if (v > GS_POOLING_LAST)
        return gs_err_set(err, GS_UNSUPPORTED, "metadata '%s': pooling type %u is not supported",
                          key, v);
    *out = (enum gs_pooling)v;
    return GS_OK;
}
