/*
 * server/validation.h - the daemon's side of per-request validation, the
 * numerical-health counters, the known-answer readiness verdict and the
 * reproducibility receipt (system_fingerprint). Included by daemon.h only;
 * loop thread only.
 *
 * Life of a validated choice: the request asks ("validation": true or an
 * object) or is sampled (cfg.validate_rate); its engine request carries
 * .validate. Its FINISH event says validation_pending; the answer (or, when
 * streaming, the chunk before [DONE]) waits for the VALIDATION event up to
 * cfg.validate_timeout_ms, checked on the loop's 1 s tick, so a timeout may
 * be noticed up to a second late. On timeout the engine is told to drop the
 * job (gs_sched_cancel on the finished id) and the object says "timeout".
 *
 * usage.validation is "pending" (a streamed request whose text is complete
 * and whose report is awaited), "done", "timeout" or "error" (the engine
 * could not validate); absent when the request is not validated.
 */
#ifndef GS_SERVER_VALIDATION_H
#define GS_SERVER_VALIDATION_H

#include "engine/validate.h"
#include "scheduler/scheduler.h"
#include "server/internal.h"

#include <jansson.h>

/* The validation state of one choice. */
enum gs_srv_val_state {
    GS_SRV_VAL_OFF = 0, /* not validated */
    GS_SRV_VAL_RUNNING, /* generating, or finished with the report awaited */
    GS_SRV_VAL_DONE,    /* report received */
    GS_SRV_VAL_TIMEOUT, /* the report did not come within validate_timeout_ms */
    GS_SRV_VAL_ERROR,   /* the engine could not validate (report NULL), or the choice failed */
};

struct gs_srv_choice_val {
    enum gs_srv_val_state state;
    bool pending;   /* FINISH said validation_pending, no report yet */
    json_t *report; /* gs_val_report_json of the report, or {"status": ...} */
    json_t *top;    /* with top_logprobs: one array of {id, logprob} per generated token */
};

struct gs_srv_req_val {
    bool on;              /* this request is validated */
    bool requested;       /* the client asked (not sampled) */
    uint32_t top_k;       /* served top-k logprobs per position to return; 0: none */
    uint32_t n_pending;   /* choices awaiting their report */
    double deadline_ms;   /* gs_now_ms() after which pending reports time out */
    bool pending_told;    /* stream: the "pending" usage chunk went out */
    char fingerprint[20]; /* "gs-" + 12 hex digits */
};

/* ---- metrics --------------------------------------------------------------------------------- */

#define GS_SRV_VAL_BUCKETS 12

/* The figures of a report that /metrics keeps a histogram of. */
#define GS_SRV_VAL_FIGURE_MAP(X)                                                                   \
    X(TOP1_RATE, "top1_rate", "Fraction of positions whose top-1 token agrees with ref.")          \
    X(TOPK_OVERLAP, "topk_overlap", "Mean top-10 overlap of served and ref logits.")               \
    X(MIN_PEARSON, "pearson", "Smallest per-position Pearson correlation with ref.")               \
    X(MAX_ABS_ERR, "max_abs_error", "Largest absolute logit difference from ref.")                 \
    X(MEAN_KL, "kl_divergence", "Mean KL(ref || served) over positions, nats.")                    \
    X(FIRST_DIVERGENCE, "first_divergence_position",                                               \
      "Position of the first top-1 disagreement (diverged requests only).")

enum gs_srv_val_figure {
#define GS_SRV_VAL_FIG_ENUM(id, name, help) GS_SRV_VAL_FIG_##id,
    GS_SRV_VAL_FIGURE_MAP(GS_SRV_VAL_FIG_ENUM)
#undef GS_SRV_VAL_FIG_ENUM
        GS_SRV_VAL_FIG_COUNT
};

struct gs_srv_val_hist {
    uint64_t counts[GS_SRV_VAL_BUCKETS + 1]; /* last is +Inf */
    uint64_t count;
    double sum;
};

struct gs_srv_val_metrics {
    struct gs_srv_val_hist fig[GS_SRV_VAL_FIG_COUNT];
    uint64_t passed, failed, timeout, error; /* validated choices by outcome */
    uint64_t numeric_errors;                 /* sequences ended by non-finite logits */
};

/* Records one finished report's figures and verdict. */
void gs_srv_val_observe(struct gs_srv_val_metrics *m, const struct gs_val_report *r);

/* Appends the validation families (Prometheus text 0.0.4), labelled with
 * model and backend; st may be NULL. */
void gs_srv_val_metrics_render(const struct gs_srv_val_metrics *m, const char *model,
                               const char *backend, const struct gs_sched_stats *st,
                               struct gs_srv_buf *out);

/* ---- receipt ------------------------------------------------------------------------------- */

/* "gs-" + the first 12 hex digits of SHA-256 over model digest, backend,
 * kernel variant, graph hash, the KV cache type and seed, each NUL-separated;
 * NULL strings count as "". The cache type counts only when it is not the
 * default f16 (NULL or "f16" add nothing), so an f16 daemon's fingerprints are
 * what they were before the type was part of them. out: 20 bytes. */
void gs_srv_val_fingerprint(const char *model_sha256, const char *backend, const char *variant,
                            const char *graph_hash, const char *kv_type, uint64_t seed,
                            char out[20]);

#endif /* GS_SERVER_VALIDATION_H */
