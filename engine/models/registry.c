/* engine/models/registry.c - the table of model builders by general.architecture:
 * which architectures load, loading a model through its builder, freeing it. */
#include "engine/model.h"

#include <stdio.h>
#include <string.h>

struct family {
    const char *arch; /* general.architecture */
    gs_model_build_fn build;
};

static const struct family families[] = {
    {"llama", gs_model_build_llama},
    {"qwen2", gs_model_build_qwen2},
    {"qwen3", gs_model_build_qwen3},
    {"phi3", gs_model_build_phi3},
    {"gemma2", gs_model_build_gemma2},
    {"gemma3", gs_model_build_gemma3},
    {"gemma3n", gs_model_build_gemma3n},
};

bool gs_model_arch_supported(const char *arch, size_t len)
{
    struct gs_gguf_str s = {len, arch};
    for (size_t i = 0; i < GS_ARRAY_LEN(families); i++)
        if (gs_gguf_str_eq(s, families[i].arch))
            return true;
    return false;
}

void gs_model_free(struct gs_model *m)
{
    if (!m)
        return;
    gs_graph_free(m->graph);
    gs_free(m->n_ff_layer);
    gs_free(m->ones);
    gs_free(m);
}

enum gs_status gs_model_load(const struct gs_gguf *file, struct gs_model **out, struct gs_err *err)
{
    *out = NULL;
    struct gs_gguf_str arch;
    enum gs_status st = gs_gguf_get_str(file, "general.architecture", &arch, err);
    if (st)
        return st;
    const struct family *fam = NULL;
    for (size_t i = 0; i < GS_ARRAY_LEN(families); i++)
        if (gs_gguf_str_eq(arch, families[i].arch))
            fam = &families[i];
    if (!fam)
        return gs_err_set(err, GS_UNSUPPORTED, "general.architecture: '%.*s' has no model builder",
                          (int)GS_MIN(arch.len, 64), arch.data);
    struct gs_model *m = gs_calloc(1, sizeof(*m));
    if (!m)
        return gs_err_set(err, GS_NOMEM, "model: out of memory");
    m->file = file;
    snprintf(m->hp.arch, sizeof(m->hp.arch), "%s", fam->arch);
    st = gs_graph_new(&m->graph, err);
    if (!st)
        st = fam->build(m, err);
    if (!st)
        st = gs_graph_status(m->graph, err);
    if (!st)
        st = gs_graph_verify(m->graph, err);
    if (st) {
        gs_model_free(m);
        return st;
    }
    *out = m;
    return GS_OK;
}
