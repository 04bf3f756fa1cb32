/* engine/backend/registry.c - the backend registry (GS_BE_LIST): finding a
 * backend by name, opening and closing it. Apart from backend.c, whose
 * checks every backend calls. */
#include "engine/backend.h"

#include <string.h>

static const struct gs_be_ops *const backends[] = {
#define BACKEND_OPS(id, ID) &gs_be_##id##_ops,
    GS_BE_LIST(BACKEND_OPS)
#undef BACKEND_OPS
};

const struct gs_be_ops *gs_be_find(const char *name)
{
    for (size_t i = 0; i < GS_ARRAY_LEN(backends); i++)
        if (!strcmp(backends[i]->name, name))
            return backends[i];
    return NULL;
}

enum gs_status gs_be_init(struct gs_be *be, const char *name, const struct gs_be_cfg *cfg,
                          struct gs_err *err)
{
    memset(be, 0, sizeof(*be));
    const struct gs_be_ops *ops = gs_be_find(name);
    if (!ops)
        return gs_err_set(err, GS_NOTFOUND, "backend '%s' does not exist", name);
    if (ops->api_version != GS_BE_API_VERSION)
        return gs_err_set(err, GS_UNSUPPORTED, "backend '%s' has api version %d, want %d", name,
                          ops->api_version, GS_BE_API_VERSION);
    struct gs_be_cfg def = {0};
    be->ops = ops;
    enum gs_status st = ops->open(be, cfg ? cfg : &def, err);
    if (st)
        memset(be, 0, sizeof(*be));
    return st;
}

void gs_be_deinit(struct gs_be *be)
{
    if (!be || !be->ops)
        return;
    be->ops->close(be);
    memset(be, 0, sizeof(*be));
}
