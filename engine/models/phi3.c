/*
 * engine/models/phi3.c - the phi3 family: Phi-3 and Phi-3.5 mini. The shared
 * decoder block with one fused q/k/v projection and one fused gate/up
 * projection (gate rows first), both split into views of the file's bytes, and
 * rope rotating halves. `phi3.attention.sliding_window` is present in files
 * but, as in llama.cpp, not applied: attention is global on every layer.
 */
#include "engine/model.h"

enum gs_status gs_model_build_phi3(struct gs_model *m, struct gs_err *err)
{
    const struct gs_block_desc d = {
        .rope_mode = GS_ROPE_NEOX,
        .qkv_fused = true,
        .ffn_gate_up_fused = true,
    };
    return gs_model_build_decoder(m, &d, err);
}
