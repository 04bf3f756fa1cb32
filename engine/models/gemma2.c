/*
 * engine/models/gemma2.c - the gemma2 family (Gemma 2). The shared block with
 * embeddings scaled by sqrt(n_embd), RMS norms after attention and after the
 * feed-forward (post_attention_norm, post_ffw_norm) before each residual add,
 * a GELU-gated feed-forward, rope rotating halves, attention scores capped at
 * attn_logit_softcapping (50 when absent) and final logits at
 * final_logit_softcapping (30). Even layers attend over a sliding window
 * (attention.sliding_window, 4096 when absent), odd layers globally, both with
 * the same rope. Norm weights in GGUF files already hold Gemma's 1 + w.
 */
#include "engine/model.h"

enum gs_status gs_model_build_gemma2(struct gs_model *m, struct gs_err *err)
{
    const struct gs_block_desc d = {
        .rope_mode = GS_ROPE_NEOX,
        .ffn_act = GS_FFN_GELU,
        .embd_scale = true,
        .post_norms = true,
        .attn_softcap = true,
        .attn_softcap_default = 50.0f,
        .final_softcap = true,
        .final_softcap_default = 30.0f,
        .swa_period = 2,
        .swa_window_default = 4096,
        .query_scale_wide_n_layer = 46, /* Gemma 2 27B */
    };
    return gs_model_build_decoder(m, &d, err);
}
