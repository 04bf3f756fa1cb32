/*
 * engine/models/gemma3.c - the gemma3 family (Gemma 3 text models). Gemma 2's
 * block without the attention soft-cap, with each head of q and k RMS-normed
 * before rope. Five of every six layers (l % 6 < 5) attend over a sliding
 * window (attention.sliding_window) with their own rope: base
 * rope.freq_base_swa (10000 when absent) and no rope scaling; the sixth is
 * global with rope.freq_base and the file's rope scaling. A file without a
 * sliding window has every layer global. Final logits are capped only when
 * the file has final_logit_softcapping (Gemma 3 releases do not).
 */
#include "engine/model.h"

enum gs_status gs_model_build_gemma3(struct gs_model *m, struct gs_err *err)
{
    const struct gs_block_desc d = {
        .rope_mode = GS_ROPE_NEOX,
        .qk_norm = true,
        .ffn_act = GS_FFN_GELU,
        .embd_scale = true,
        .post_norms = true,
        .final_softcap = true,
        .swa_period = 6,
        .swa_rope_base_default = 10000.0f,
        .swa_rope_unscaled = true,
        .query_scale_wide_n_layer = 62, /* Gemma 3 27B */
    };
    return gs_model_build_decoder(m, &d, err);
}
