/*
 * engine/models/qwen2.c - the qwen2 family: Qwen2 and Qwen2.5. The shared
 * decoder block with biases on the q, k and v projections and rope rotating
 * halves (NEOX style); small models tie the output to the embedding.
 */
#include "engine/model.h"

enum gs_status gs_model_build_qwen2(struct gs_model *m, struct gs_err *err)
{
    const struct gs_block_desc d = {.rope_mode = GS_ROPE_NEOX, .qkv_bias = true};
    return gs_model_build_decoder(m, &d, err);
}
