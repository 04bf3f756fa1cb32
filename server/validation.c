/*
 * server/validation.c - per-request validation figures in /metrics and the
 * reproducibility fingerprint; see server/validation.h.
 */
#include "server/validation.h"
#include "server/daemon.h"

#include "engine/digest.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

/* Upper bounds per figure. Rates and correlations crowd near 1, errors span
 * decades, positions are token counts. */
static const double fig_bounds[GS_SRV_VAL_FIG_COUNT][GS_SRV_VAL_BUCKETS] = {
    [GS_SRV_VAL_FIG_TOP1_RATE] = {0.5, 0.7, 0.8, 0.9, 0.95, 0.97, 0.98, 0.99, 0.995, 0.999, 0.9999,
                                  1},
    [GS_SRV_VAL_FIG_TOPK_OVERLAP] = {0.5, 0.7, 0.8, 0.9, 0.95, 0.97, 0.98, 0.99, 0.995, 0.999,
                                     0.9999, 1},
    [GS_SRV_VAL_FIG_MIN_PEARSON] = {0.9, 0.99, 0.995, 0.999, 0.9995, 0.9999, 0.99995, 0.99999,
                                    0.999995, 0.999999, 0.9999999, 1},
    [GS_SRV_VAL_FIG_MAX_ABS_ERR] = {1e-6, 1e-5, 1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3, 1,
                                    10},
    [GS_SRV_VAL_FIG_MEAN_KL] = {1e-9, 1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.1, 1},
    [GS_SRV_VAL_FIG_FIRST_DIVERGENCE] = {0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 1024, 4096},
};

static const char *const fig_names[GS_SRV_VAL_FIG_COUNT] = {
#define GS_SRV_VAL_FIG_NAME(id, name, help) [GS_SRV_VAL_FIG_##id] = name,
    GS_SRV_VAL_FIGURE_MAP(GS_SRV_VAL_FIG_NAME)
#undef GS_SRV_VAL_FIG_NAME
};

static const char *const fig_help[GS_SRV_VAL_FIG_COUNT] = {
#define GS_SRV_VAL_FIG_HELP(id, name, help) [GS_SRV_VAL_FIG_##id] = help,
    GS_SRV_VAL_FIGURE_MAP(GS_SRV_VAL_FIG_HELP)
#undef GS_SRV_VAL_FIG_HELP
};

static void observe(struct gs_srv_val_hist *h, const double *bounds, double v)
{
    if (!isfinite(v))
        return; /* undefined figures (no full row) are not observations */
    size_t b = 0;
    while (b < GS_SRV_VAL_BUCKETS && v > bounds[b])
        b++;
    h->counts[b]++;
    h->count++;
    h->sum += v;
}

void gs_srv_val_observe(struct gs_srv_val_metrics *m, const struct gs_val_report *r)
{
    int32_t finite = r->n_rows - r->n_nonfinite;
    int32_t full = r->n_full; /* Pearson and KL exist only over full finite rows */
    double v[GS_SRV_VAL_FIG_COUNT] = {
        [GS_SRV_VAL_FIG_TOP1_RATE] = finite > 0 ? r->top1_rate : NAN,
        [GS_SRV_VAL_FIG_TOPK_OVERLAP] = finite > 0 ? r->mean_topk_overlap : NAN,
        [GS_SRV_VAL_FIG_MIN_PEARSON] = full > 0 && finite > 0 ? r->min_pearson : NAN,
        [GS_SRV_VAL_FIG_MAX_ABS_ERR] = finite > 0 ? r->max_abs_err : NAN,
        [GS_SRV_VAL_FIG_MEAN_KL] = full > 0 && finite > 0 ? r->mean_kl : NAN,
        [GS_SRV_VAL_FIG_FIRST_DIVERGENCE] =
            r->first_divergence >= 0 ? (double)r->first_divergence : NAN,
    };
    for (int f = 0; f < GS_SRV_VAL_FIG_COUNT; f++)
        observe(&m->fig[f], fig_bounds[f], v[f]);
    if (r->pass)
        m->passed++;
    else
        m->failed++;
}

/* A label value with \, " and newline escaped as the text format requires. */
static void label_value(struct gs_srv_buf *o, const char *s)
{
    for (; s && *s; s++) {
        if (*s == '\\' || *s == '"')
            gs_srv_buf_addf(o, "\\%c", *s);
        else if (*s == '\n')
            gs_srv_buf_adds(o, "\\n");
        else
            gs_srv_buf_add(o, s, 1);
    }
}

static void labels(struct gs_srv_buf *o, const char *model, const char *backend)
{
    gs_srv_buf_adds(o, "model=\"");
    label_value(o, model);
    gs_srv_buf_adds(o, "\",backend=\"");
    label_value(o, backend);
    gs_srv_buf_adds(o, "\"");
}

void gs_srv_val_metrics_render(const struct gs_srv_val_metrics *m, const char *model,
                               const char *backend, const struct gs_sched_stats *st,
                               struct gs_srv_buf *o)
{
    for (int f = 0; f < GS_SRV_VAL_FIG_COUNT; f++) {
        const struct gs_srv_val_hist *h = &m->fig[f];
        gs_srv_buf_addf(o, "# HELP graphserve_validation_%s %s\n", fig_names[f], fig_help[f]);
        gs_srv_buf_addf(o, "# TYPE graphserve_validation_%s histogram\n", fig_names[f]);
        uint64_t cum = 0;
        for (size_t b = 0; b <= GS_SRV_VAL_BUCKETS; b++) {
            cum += h->counts[b];
            gs_srv_buf_addf(o, "graphserve_validation_%s_bucket{", fig_names[f]);
            labels(o, model, backend);
            if (b < GS_SRV_VAL_BUCKETS)
                gs_srv_buf_addf(o, ",le=\"%.10g\"} %llu\n", fig_bounds[f][b],
                                (unsigned long long)cum);
            else
                gs_srv_buf_addf(o, ",le=\"+Inf\"} %llu\n", (unsigned long long)cum);
        }
        gs_srv_buf_addf(o, "graphserve_validation_%s_sum{", fig_names[f]);
        labels(o, model, backend);
        gs_srv_buf_addf(o, "} %.17g\n", h->sum);
        gs_srv_buf_addf(o, "graphserve_validation_%s_count{", fig_names[f]);
        labels(o, model, backend);
        gs_srv_buf_addf(o, "} %llu\n", (unsigned long long)h->count);
    }
    static const char *const results[] = {"passed", "failed", "timeout", "error"};
    const uint64_t counts[] = {m->passed, m->failed, m->timeout, m->error};
    gs_srv_buf_adds(o, "# HELP graphserve_validated_requests_total Validated choices by outcome "
                       "(passed, failed, timeout, error).\n"
                       "# TYPE graphserve_validated_requests_total counter\n");
    for (size_t i = 0; i < GS_ARRAY_LEN(results); i++) {
        gs_srv_buf_adds(o, "graphserve_validated_requests_total{");
        labels(o, model, backend);
        gs_srv_buf_addf(o, ",result=\"%s\"} %llu\n", results[i], (unsigned long long)counts[i]);
    }
    gs_srv_buf_adds(o, "# HELP graphserve_numeric_errors_total Sequences ended because their "
                       "logits held NaN or Inf.\n"
                       "# TYPE graphserve_numeric_errors_total counter\n"
                       "graphserve_numeric_errors_total{");
    labels(o, model, backend);
    gs_srv_buf_addf(o, "} %llu\n", (unsigned long long)m->numeric_errors);
    if (st) {
        gs_srv_buf_adds(o, "# HELP graphserve_validations_running Validation jobs waiting or "
                           "running on the reference backend.\n"
                           "# TYPE graphserve_validations_running gauge\n"
                           "graphserve_validations_running ");
        gs_srv_buf_addf(o, "%u\n", st->n_validating);
    }
}

void gs_srv_val_fingerprint(const char *model_sha256, const char *backend, const char *variant,
                            const char *graph_hash, const char *kv_type, uint64_t seed,
                            char out[20])
{
    struct gs_srv_buf b = {0};
    const char *parts[] = {model_sha256, backend, variant, graph_hash};
    for (size_t i = 0; i < GS_ARRAY_LEN(parts); i++) {
        gs_srv_buf_adds(&b, parts[i] ? parts[i] : "");
        gs_srv_buf_add(&b, "", 1);
    }
    /* Another cache type computes other logits from the same graph. */
    if (kv_type && strcmp(kv_type, "f16")) {
        gs_srv_buf_adds(&b, kv_type);
        gs_srv_buf_add(&b, "", 1);
    }
    gs_srv_buf_addf(&b, "%llu", (unsigned long long)seed);
    uint8_t d[GS_SHA256_BYTES];
    char hex[GS_SHA256_HEX_LEN];
    gs_sha256(b.p ? b.p : "", b.failed ? 0 : b.len, d);
    gs_sha256_hex(d, hex);
    snprintf(out, 20, "gs-%.12s", hex);
    gs_srv_buf_free(&b);
}

/* ---- the request side ------------------------------------------------------------------------ */

static const char *state_name(enum gs_srv_val_state st)
{
    switch (st) {
    case GS_SRV_VAL_RUNNING:
        return "pending";
    case GS_SRV_VAL_DONE:
        return "done";
    case GS_SRV_VAL_TIMEOUT:
        return "timeout";
    case GS_SRV_VAL_ERROR:
        return "error";
    case GS_SRV_VAL_OFF:
        break;
    }
    return "off";
}

/* A uniform draw in [0, 1) for validate_rate sampling. */
static double draw(void)
{
    uint64_t x;
    if (getrandom(&x, sizeof(x), GRND_NONBLOCK) != (ssize_t)sizeof(x))
        x = gs_now_ns() * 0x9E3779B97F4A7C15ull;
    return (double)(x >> 11) / 9007199254740992.0;
}

void gs_srv__val_decide(struct gs_srv_req *r)
{
    const struct gs_srv *s = r->srv;
    const struct gs_srv_model_info *m = &s->cfg.model;
    r->val.requested = r->gen.validation;
    r->val.on = r->gen.validation || (s->cfg.validate_rate > 0 && draw() < s->cfg.validate_rate);
    r->val.top_k = r->gen.validation ? r->gen.validation_top_k : 0;
    gs_srv_val_fingerprint(m->sha256, m->backend, m->kernel_variant, m->graph_hash, m->kv_type,
                           r->seed, r->val.fingerprint);
}

const char *gs_srv__val_usage(const struct gs_srv_req *r)
{
    enum gs_srv_val_state worst = GS_SRV_VAL_DONE;
    for (uint32_t i = 0; i < r->n_choices; i++) {
        enum gs_srv_val_state st = r->choices[i].val.state;
        if (st == GS_SRV_VAL_RUNNING)
            return "pending";
        if (st == GS_SRV_VAL_TIMEOUT || (st == GS_SRV_VAL_ERROR && worst != GS_SRV_VAL_TIMEOUT))
            worst = st;
    }
    return state_name(worst);
}

json_t *gs_srv__val_receipt(const struct gs_srv_req *r)
{
    const struct gs_srv_model_info *m = &r->srv->cfg.model;
#define S(x) ((x) ? (x) : "")
    json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:I}", "model_sha256", S(m->sha256), "backend",
                          S(m->backend), "kernel_variant", S(m->kernel_variant), "graph_hash",
                          S(m->graph_hash), "seed", (json_int_t)r->seed);
#undef S
    if (o && m->kv_type)
        json_object_set_new(o, "kv_type", json_string(m->kv_type));
    return o;
}

/* The object a client sees for one choice: the report's figures, the
 * reference's name, both sides' KV cache types and the status, plus the
 * served top-k when asked. */
static json_t *choice_json(const struct gs_srv_model_info *m, const struct gs_srv_choice *c)
{
    json_t *o = c->val.report ? json_deep_copy(c->val.report) : json_object();
    if (!o)
        return json_null();
    json_object_set_new(o, "reference_backend", json_string("ref"));
    /* A q8_0 answer is held to a full-precision reference: the figures carry the
     * cache's rounding, and the object says which caches they compare. */
    if (m->kv_type)
        json_object_set_new(o, "kv_type", json_string(m->kv_type));
    if (m->validation_kv_type)
        json_object_set_new(o, "reference_kv_type", json_string(m->validation_kv_type));
    json_object_set_new(o, "status", json_string(state_name(c->val.state)));
    if (!json_object_get(o, "passed"))
        json_object_set_new(o, "passed", json_boolean(json_is_true(json_object_get(o, "pass"))));
    if (c->val.top)
        json_object_set(o, "served_top_logprobs", c->val.top);
    return o;
}

void gs_srv__val_attach(const struct gs_srv_req *r, json_t *body)
{
    if (!r->val.on || !body || !r->n_choices)
        return;
    const struct gs_srv_model_info *m = &r->srv->cfg.model;
    json_object_set_new(body, "validation", choice_json(m, &r->choices[0]));
    if (r->n_choices > 1) {
        json_t *all = json_array();
        for (uint32_t i = 0; i < r->n_choices; i++)
            json_array_append_new(all, choice_json(m, &r->choices[i]));
        json_object_set_new(body, "validations", all);
    }
}

void gs_srv__val_token(struct gs_srv_req *r, struct gs_srv_choice *c,
                       const struct gs_sched_event *ev)
{
    if (!c->val.top)
        c->val.top = json_array();
    json_t *pos = json_array();
    uint32_t n = GS_MIN(ev->n_top, r->val.top_k);
    for (uint32_t k = 0; k < n && pos; k++)
        json_array_append_new(pos, json_pack("{s:i,s:f}", "id", ev->top[k].token, "logprob",
                                             (double)ev->top[k].logprob));
    json_array_append_new(c->val.top, pos);
}

void gs_srv__val_finish(struct gs_srv_req *r, struct gs_srv_choice *c,
                        const struct gs_sched_event *ev)
{
    struct gs_srv *s = r->srv;
    if (ev->finish == GS_FINISH_ERROR && ev->err_code == GS_NUMERIC)
        s->val_metrics.numeric_errors++;
    if (!r->val.on)
        return;
    if (!ev->validation_pending) {
        /* Nothing to compare: the choice failed or was cancelled first. */
        c->val.state = GS_SRV_VAL_ERROR;
        c->val.report =
            json_pack("{s:s}", "reason",
                      ev->finish == GS_FINISH_ERROR ? ev->err_msg : "the choice did not complete");
        return;
    }
    c->val.state = GS_SRV_VAL_RUNNING;
    c->val.pending = true;
    if (r->val.n_pending++ == 0) {
        uint32_t t = s->cfg.validate_timeout_ms ? s->cfg.validate_timeout_ms : 10000;
        r->val.deadline_ms = gs_now_ms() + t;
    }
}

void gs_srv__val_report(struct gs_srv_req *r, struct gs_srv_choice *c,
                        const struct gs_sched_event *ev)
{
    struct gs_srv *s = r->srv;
    c->val.pending = false;
    r->val.n_pending--;
    json_decref(c->val.report);
    if (ev->validation) {
        c->val.state = GS_SRV_VAL_DONE;
        c->val.report = gs_val_report_json(ev->validation, 0);
        if (c->val.report)
            json_object_set(c->val.report, "passed", json_object_get(c->val.report, "pass"));
        gs_srv_val_observe(&s->val_metrics, ev->validation);
    } else {
        c->val.state = GS_SRV_VAL_ERROR;
        c->val.report = json_pack("{s:s}", "reason", ev->err_msg);
        s->val_metrics.error++;
    }
}

void gs_srv__val_give_up(struct gs_srv_req *r, enum gs_srv_val_state state, const char *why)
{
    struct gs_srv *s = r->srv;
    for (uint32_t i = 0; i < r->n_choices; i++) {
        struct gs_srv_choice *c = &r->choices[i];
        if (!c->val.pending)
            continue;
        if (s->has_engine)
            s->engine.cancel(s->engine.ctx, c->sched_id);
        c->val.pending = false;
        c->val.state = state;
        json_decref(c->val.report);
        c->val.report = json_pack("{s:s}", "reason", why);
        if (state == GS_SRV_VAL_TIMEOUT)
            s->val_metrics.timeout++;
        else
            s->val_metrics.error++;
    }
    r->val.n_pending = 0;
}

bool gs_srv__val_expire(struct gs_srv_req *r, double now_ms)
{
    const struct gs_srv *s = r->srv;
    if (!r->val.n_pending || now_ms < r->val.deadline_ms)
        return false;
    char why[96];
    snprintf(why, sizeof(why), "no report within validate_timeout_ms (%u ms)",
             s->cfg.validate_timeout_ms ? s->cfg.validate_timeout_ms : 10000);
    gs_srv__val_give_up(r, GS_SRV_VAL_TIMEOUT, why);
    return true;
}

void gs_srv_set_known_answer(struct gs_srv *s, bool passed, const char *detail)
{
    s->known_answer_set = true;
    s->known_answer_passed = passed;
    snprintf(s->known_answer, sizeof(s->known_answer), "%s", detail ? detail : "");
}
