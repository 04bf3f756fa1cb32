/*
 * config/sched_cfg.h - maps the validated config onto the scheduler's
 * struct gs_sched_cfg. Header-only, so that the config library itself does
 * not depend on the scheduler; the daemon includes it.
 *
 * Every value was range-checked by gs_cfg_load(), so the narrowing casts
 * below cannot truncate. Strings are borrowed from cfg: keep cfg alive (and
 * do not reload its non-reloadable fields, which gs_cfg_reload never does)
 * while the scheduler runs. notify and notify_ctx are left for the caller,
 * and draft_model too: with --spec draft the caller loads cfg->draft_model.
 */
#ifndef GS_CONFIG_SCHED_CFG_H
#define GS_CONFIG_SCHED_CFG_H

#include "config/config.h"
#include "engine/quant.h"
#include "scheduler/scheduler.h"

static inline void gs_cfg_to_sched_cfg(const struct gs_cfg *cfg, struct gs_sched_cfg *out)
{
    *out = (struct gs_sched_cfg){
        .backend = gs_cfg_backend_name(cfg->backend),
        .n_threads = (int)cfg->threads,
        .kv_cache_bytes = cfg->kv_cache_bytes,
        .page_tokens = (uint32_t)cfg->page_tokens,
        .kv_type = gs_cfg_kv_engine_type(cfg->kv_type),
        .max_seqs = (uint32_t)cfg->max_seqs,
        .max_batch_tokens = (uint32_t)cfg->max_batch_tokens,
        .max_queue = (uint32_t)cfg->max_queue,
        .n_ctx = (uint32_t)cfg->n_ctx,
        .prefix_cache = cfg->prefix_cache,
        .spec = cfg->spec == GS_CFG_SPEC_NGRAM   ? GS_SPEC_NGRAM
                : cfg->spec == GS_CFG_SPEC_DRAFT ? GS_SPEC_DRAFT
                                                 : GS_SPEC_OFF,
        .spec_max_draft = (uint32_t)cfg->spec_max_draft,
        .spec_ngram = (uint32_t)cfg->spec_ngram,
    };
}

#endif /* GS_CONFIG_SCHED_CFG_H */
