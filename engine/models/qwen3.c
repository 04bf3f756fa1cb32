/*
 * engine/models/qwen3.c - the qwen3 family (dense Qwen3). Qwen2's block
 * without the q/k/v biases, with each head of q and k RMS-normed (weights
 * attn_q_norm, attn_k_norm) before rope, which rotates halves. The head size
 * comes from attention.key_length and need not divide n_embd.
 */
#include "engine/model.h"

enum gs_status gs_model_build_qwen3(struct gs_model *m, struct gs_err *err)
{
    const struct gs_block_desc d = {.rope_mode = GS_ROPE_NEOX, .qk_norm = true};
    return gs_model_build_decoder(m, &d, err);
}
