/* tests/engine/craft.c - see craft.h. */
#include "craft.h"

#include <criterion/criterion.h>
#include <stdlib.h>

void craft_f32_tensor(struct gs_gguf_writer *w, const char *name, int64_t ne0, int64_t ne1)
{
    size_t n = (size_t)(ne0 * ne1);
    float *data = calloc(n, sizeof(float));
    cr_assert(data);
    /* Small values of both signs: no layer overflows whatever the depth. */
    for (size_t i = 0; i < n; i++)
        data[i] = (float)((i * 7919) % 13) / 13.0f - 0.5f;
    struct gs_gguf_w_tensor t = {.name = name,
                                 .type = GS_TYPE_F32,
                                 .n_dims = ne1 > 1 ? 2 : 1,
                                 .ne = {ne0, ne1, 1, 1},
                                 .data = data,
                                 .nbytes = n * sizeof(float)};
    cr_assert_eq(gs_gguf_w_tensor(w, &t), GS_OK);
    free(data);
}
