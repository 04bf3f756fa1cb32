/*
 * engine/sample/logprob.c - log-probabilities of raw logits: the figures
 * OpenAI's `logprobs` reports, computed before any bias, penalty or filter.
 */
#include "engine/sample.h"
#include "engine/sample/internal.h"

#include <math.h>

enum gs_status gs_sample__scan(const float *logits, int32_t n, float *max, struct gs_err *err)
{
    float m = -INFINITY;
    for (int32_t i = 0; i < n; i++) {
        float x = logits[i];
        if (isnan(x) || x == INFINITY)
            return gs_err_set(err, GS_NUMERIC, "logits[%d] is %s", (int)i,
                              isnan(x) ? "NaN" : "+Inf");
        if (x > m)
            m = x;
    }
    if (m == -INFINITY)
        return gs_err_set(err, GS_NUMERIC, "logits: no finite value among %d", (int)n);
    *max = m;
    return GS_OK;
}

double gs_sample__log_sum_exp(const float *logits, int32_t n, float max)
{
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++)
        sum += exp((double)logits[i] - (double)max);
    /* sum >= 1: the maximum itself contributes exp(0). */
    return log(sum);
}

static bool better(float a, int32_t ia, float b, int32_t ib)
{
    return a > b || (a == b && ia < ib);
}

void gs_sample__top(const float *logits, int32_t n, int32_t k, float max, double lse,
                    struct gs_sample_logprob *top)
{
    int32_t filled = 0;
    if (k > n)
        k = n;
    if (k <= 0)
        return;
    /* Insertion into a k-long sorted list: k is at most 20 and most logits
     * fail the first comparison, so this is one pass over the row. Ids are
     * visited in ascending order, so an equal logit never displaces an entry
     * already present, which gives the ascending-id tie order. */
    for (int32_t i = 0; i < n; i++) {
        float x = logits[i];
        if (filled == k && !better(x, i, logits[top[k - 1].token], top[k - 1].token))
            continue;
        int32_t j = filled < k ? filled++ : k - 1;
        while (j > 0 && better(x, i, logits[top[j - 1].token], top[j - 1].token)) {
            top[j] = top[j - 1];
            j--;
        }
        top[j].token = i;
    }
    for (int32_t j = 0; j < k; j++)
        top[j].logprob = (float)((double)logits[top[j].token] - (double)max - lse);
}

enum gs_status gs_sample_log_softmax(const float *logits, int32_t n, float *out, struct gs_err *err)
{
    float max;
    if (!logits || !out || n <= 0)
        return gs_err_set(err, GS_INVAL, "log_softmax: empty or NULL row");
    enum gs_status rc = gs_sample__scan(logits, n, &max, err);
    if (rc != GS_OK)
        return rc;
    double lse = gs_sample__log_sum_exp(logits, n, max);
    for (int32_t i = 0; i < n; i++)
        out[i] = (float)((double)logits[i] - (double)max - lse);
    return GS_OK;
}

enum gs_status gs_sample_top_logprobs(const float *logits, int32_t n, int32_t k,
                                      struct gs_sample_logprob *top, struct gs_err *err)
{
    float max;
    if (!logits || n <= 0)
        return gs_err_set(err, GS_INVAL, "top_logprobs: empty or NULL row");
    if (k < 0 || k > GS_SAMPLE_TOP_LOGPROBS_MAX || (k > 0 && !top))
        return gs_err_set(err, GS_INVAL, "top_logprobs: k=%d outside [0, %d]", (int)k,
                          GS_SAMPLE_TOP_LOGPROBS_MAX);
    enum gs_status rc = gs_sample__scan(logits, n, &max, err);
    if (rc != GS_OK)
        return rc;
    gs_sample__top(logits, n, k, max, gs_sample__log_sum_exp(logits, n, max), top);
    return GS_OK;
}
