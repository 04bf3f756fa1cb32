/*
 * engine/models/llama.c - the llama family: Llama 2/3, TinyLlama, SmolLM,
 * SmolLM2, Mistral (without sliding window). The shared decoder block as it
 * is, rotating adjacent pairs; Llama 3 files may carry rope frequency factors.
 */
#include "engine/model.h"

enum gs_status gs_model_build_llama(struct gs_model *m, struct gs_err *err)
{
    const struct gs_block_desc d = {.rope_mode = GS_ROPE_NORMAL, .rope_freq_factors = true};
    return gs_model_build_decoder(m, &d, err);
}
