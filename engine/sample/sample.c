/*
 * engine/sample/sample.c - the per-sequence sampler: parameters, history,
 * and the chain described in engine/sample.h.
 */
#include "engine/sample.h"
#include "engine/sample/internal.h"

#include <math.h>
#include <string.h>

/* One candidate token while the chain runs. */
struct cand {
    int32_t id;
    float logit; /* biased, penalised; temperature is applied in draw() */
    float p;     /* unnormalised probability, set by draw() */
};

struct gs_sample_state {
    struct gs_sample_params p; /* .bias and .stop_tokens point at our copies */
    int32_t n_vocab;
    struct gs_sample_bias *bias; /* [p.n_bias], owned */
    int32_t *stop;               /* [p.n_stop], owned */
    uint8_t *stop_bits;          /* [(n_vocab + 7) / 8], bit i set if i is a stop token */
    struct cand *cand;           /* [n_vocab] scratch */

    /* Repetition window, allocated when repeat_penalty != 1 and
     * repeat_last_n > 0: the last ring_cap tokens and their counts. */
    int32_t *ring;      /* [ring_cap] */
    int32_t ring_cap;   /* = p.repeat_last_n */
    int32_t ring_head;  /* next slot to write */
    int32_t ring_fill;  /* valid entries, <= ring_cap */
    int32_t *win_count; /* [n_vocab]: occurrences in the window */

    /* Generated-token counts, allocated when presence or frequency != 0. */
    int32_t *gen_count; /* [n_vocab] */
    int32_t *gen_ids;   /* [n_vocab]: distinct generated ids, in first-seen order */
    int32_t n_gen_ids;

    struct gs_sample__rng rng;
};

/* ---- parameters ---------------------------------------------------------- */

void gs_sample_params_init(struct gs_sample_params *p)
{
    memset(p, 0, sizeof(*p));
    p->temperature = 1.0f;
    p->top_k = 0;
    p->top_p = 1.0f;
    p->min_p = 0.0f;
    p->repeat_penalty = 1.0f;
    p->repeat_last_n = 64;
    p->presence_penalty = 0.0f;
    p->frequency_penalty = 0.0f;
    p->seed = 0;
}

enum gs_status gs_sample_params_check(const struct gs_sample_params *p, int32_t n_vocab,
                                      struct gs_err *err)
{
    if (!p)
        return gs_err_set(err, GS_INVAL, "sampling parameters: NULL");
    if (n_vocab <= 0)
        return gs_err_set(err, GS_INVAL, "n_vocab: %d is not positive", (int)n_vocab);
    if (!(p->temperature >= 0.0f) || !isfinite(p->temperature))
        return gs_err_set(err, GS_INVAL, "temperature: %g is not a finite value >= 0",
                          (double)p->temperature);
    if (p->top_k < 0)
        return gs_err_set(err, GS_INVAL, "top_k: %d is negative", (int)p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return gs_err_set(err, GS_INVAL, "top_p: %g is outside (0, 1]", (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return gs_err_set(err, GS_INVAL, "min_p: %g is outside [0, 1]", (double)p->min_p);
    if (!(p->repeat_penalty > 0.0f) || !isfinite(p->repeat_penalty))
        return gs_err_set(err, GS_INVAL, "repeat_penalty: %g is not a finite value > 0",
                          (double)p->repeat_penalty);
    if (p->repeat_last_n < 0 || p->repeat_last_n > GS_SAMPLE_REPEAT_LAST_N_MAX)
        return gs_err_set(err, GS_INVAL, "repeat_last_n: %d is outside [0, %d]",
                          (int)p->repeat_last_n, GS_SAMPLE_REPEAT_LAST_N_MAX);
    if (!(p->presence_penalty >= -2.0f && p->presence_penalty <= 2.0f))
        return gs_err_set(err, GS_INVAL, "presence_penalty: %g is outside [-2, 2]",
                          (double)p->presence_penalty);
    if (!(p->frequency_penalty >= -2.0f && p->frequency_penalty <= 2.0f))
        return gs_err_set(err, GS_INVAL, "frequency_penalty: %g is outside [-2, 2]",
                          (double)p->frequency_penalty);
    if (p->n_bias < 0 || p->n_bias > GS_SAMPLE_N_BIAS_MAX || (p->n_bias > 0 && !p->bias))
        return gs_err_set(err, GS_INVAL, "logit_bias: %d entries, at most %d", (int)p->n_bias,
                          GS_SAMPLE_N_BIAS_MAX);
    for (int32_t i = 0; i < p->n_bias; i++) {
        if (p->bias[i].token < 0 || p->bias[i].token >= n_vocab)
            return gs_err_set(err, GS_INVAL, "logit_bias[%d].token: %d is outside [0, %d)", (int)i,
                              (int)p->bias[i].token, (int)n_vocab);
        float b = p->bias[i].bias;
        if (isnan(b) || b == INFINITY)
            return gs_err_set(err, GS_INVAL, "logit_bias[%d].bias: %g is not finite or -inf",
                              (int)i, (double)b);
    }
    if (p->n_stop < 0 || p->n_stop > GS_SAMPLE_N_STOP_MAX || (p->n_stop > 0 && !p->stop_tokens))
        return gs_err_set(err, GS_INVAL, "stop_tokens: %d entries, at most %d", (int)p->n_stop,
                          GS_SAMPLE_N_STOP_MAX);
    for (int32_t i = 0; i < p->n_stop; i++)
        if (p->stop_tokens[i] < 0 || p->stop_tokens[i] >= n_vocab)
            return gs_err_set(err, GS_INVAL, "stop_tokens[%d]: %d is outside [0, %d)", (int)i,
                              (int)p->stop_tokens[i], (int)n_vocab);
    if (p->top_logprobs < 0 || p->top_logprobs > GS_SAMPLE_TOP_LOGPROBS_MAX)
        return gs_err_set(err, GS_INVAL, "top_logprobs: %d is outside [0, %d]",
                          (int)p->top_logprobs, GS_SAMPLE_TOP_LOGPROBS_MAX);
    return GS_OK;
}

/* ---- state ---------------------------------------------------------------- */

static bool repeat_on(const struct gs_sample_params *p)
{
    return p->repeat_penalty != 1.0f && p->repeat_last_n > 0;
}

static bool presence_on(const struct gs_sample_params *p)
{
    return p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
}

enum gs_status gs_sample_state_new(const struct gs_sample_params *p, int32_t n_vocab,
                                   struct gs_sample_state **out, struct gs_err *err)
{
    enum gs_status rc = gs_sample_params_check(p, n_vocab, err);
    if (rc != GS_OK)
        return rc;
    struct gs_sample_state *st = gs_calloc(1, sizeof(*st));
    if (!st)
        goto out_nomem;
    st->p = *p;
    st->n_vocab = n_vocab;
    st->cand = gs_alloc_array((size_t)n_vocab, sizeof(*st->cand));
    st->stop_bits = gs_calloc(((size_t)n_vocab + 7) / 8, 1);
    if (!st->cand || !st->stop_bits)
        goto out_nomem;
    if (p->n_bias > 0) {
        st->bias = gs_alloc_array((size_t)p->n_bias, sizeof(*st->bias));
        if (!st->bias)
            goto out_nomem;
        memcpy(st->bias, p->bias, (size_t)p->n_bias * sizeof(*st->bias));
    }
    if (p->n_stop > 0) {
        st->stop = gs_alloc_array((size_t)p->n_stop, sizeof(*st->stop));
        if (!st->stop)
            goto out_nomem;
        memcpy(st->stop, p->stop_tokens, (size_t)p->n_stop * sizeof(*st->stop));
        for (int32_t i = 0; i < p->n_stop; i++)
            st->stop_bits[st->stop[i] >> 3] |= (uint8_t)(1u << (st->stop[i] & 7));
    }
    st->p.bias = st->bias;
    st->p.stop_tokens = st->stop;
    if (repeat_on(p)) {
        st->ring_cap = p->repeat_last_n;
        st->ring = gs_alloc_array((size_t)st->ring_cap, sizeof(*st->ring));
        st->win_count = gs_calloc((size_t)n_vocab, sizeof(*st->win_count));
        if (!st->ring || !st->win_count)
            goto out_nomem;
    }
    if (presence_on(p)) {
        st->gen_count = gs_calloc((size_t)n_vocab, sizeof(*st->gen_count));
        st->gen_ids = gs_alloc_array((size_t)n_vocab, sizeof(*st->gen_ids));
        if (!st->gen_count || !st->gen_ids)
            goto out_nomem;
    }
    gs_sample__rng_seed(&st->rng, p->seed);
    *out = st;
    return GS_OK;

out_nomem:
    gs_sample_state_free(st);
    return gs_err_set(err, GS_NOMEM, "sampler for %d tokens: out of memory", (int)n_vocab);
}

void gs_sample_state_free(struct gs_sample_state *st)
{
    if (!st)
        return;
    gs_free(st->cand);
    gs_free(st->stop_bits);
    gs_free(st->bias);
    gs_free(st->stop);
    gs_free(st->ring);
    gs_free(st->win_count);
    gs_free(st->gen_count);
    gs_free(st->gen_ids);
    gs_free(st);
}

void gs_sample_state_reset(struct gs_sample_state *st)
{
    if (st->win_count)
        memset(st->win_count, 0, (size_t)st->n_vocab * sizeof(*st->win_count));
    st->ring_head = 0;
    st->ring_fill = 0;
    if (st->gen_count)
        memset(st->gen_count, 0, (size_t)st->n_vocab * sizeof(*st->gen_count));
    st->n_gen_ids = 0;
    gs_sample__rng_seed(&st->rng, st->p.seed);
}

bool gs_sample_is_stop(const struct gs_sample_state *st, int32_t token)
{
    if (token < 0 || token >= st->n_vocab)
        return false;
    return (st->stop_bits[token >> 3] >> (token & 7)) & 1u;
}

/* ---- history --------------------------------------------------------------- */

static void window_push(struct gs_sample_state *st, int32_t token)
{
    if (!st->ring)
        return;
    if (st->ring_fill == st->ring_cap)
        st->win_count[st->ring[st->ring_head]]--;
    else
        st->ring_fill++;
    st->ring[st->ring_head] = token;
    st->win_count[token]++;
    st->ring_head = (st->ring_head + 1) % st->ring_cap;
}

static void generated_push(struct gs_sample_state *st, int32_t token)
{
    if (!st->gen_count)
        return;
    if (st->gen_count[token]++ == 0)
        st->gen_ids[st->n_gen_ids++] = token;
}

enum gs_status gs_sample_accept(struct gs_sample_state *st, int32_t token, struct gs_err *err)
{
    if (token < 0 || token >= st->n_vocab)
        return gs_err_set(err, GS_INVAL, "token: %d is outside [0, %d)", (int)token,
                          (int)st->n_vocab);
    window_push(st, token);
    generated_push(st, token);
    return GS_OK;
}

enum gs_status gs_sample_accept_prompt(struct gs_sample_state *st, const int32_t *tokens, int32_t n,
                                       struct gs_err *err)
{
    if (n < 0 || (n > 0 && !tokens))
        return gs_err_set(err, GS_INVAL, "prompt tokens: bad count %d", (int)n);
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= st->n_vocab)
            return gs_err_set(err, GS_INVAL, "prompt token %d: %d is outside [0, %d)", (int)i,
                              (int)tokens[i], (int)st->n_vocab);
    /* Only the last ring_cap tokens can matter. */
    int32_t from = st->ring && n > st->ring_cap ? n - st->ring_cap : 0;
    for (int32_t i = from; i < n; i++)
        window_push(st, tokens[i]);
    return GS_OK;
}

/* ---- the chain ------------------------------------------------------------- */

static void apply_bias(struct gs_sample_state *st)
{
    for (int32_t i = 0; i < st->p.n_bias; i++)
        st->cand[st->bias[i].token].logit += st->bias[i].bias;
}

static void apply_repeat(struct gs_sample_state *st)
{
    if (!st->ring)
        return;
    float pen = st->p.repeat_penalty;
    /* A token may sit in the window several times but is penalised once: the
     * first visit flips its count negative as a "done" mark, and the second
     * loop flips it back, so no extra memory is needed. */
    for (int32_t i = 0; i < st->ring_fill; i++) {
        int32_t t = st->ring[i];
        if (st->win_count[t] <= 0)
            continue;
        st->win_count[t] = -st->win_count[t];
        float *l = &st->cand[t].logit;
        *l = *l <= 0.0f ? *l * pen : *l / pen;
    }
    for (int32_t i = 0; i < st->ring_fill; i++) {
        int32_t t = st->ring[i];
        if (st->win_count[t] < 0)
            st->win_count[t] = -st->win_count[t];
    }
}

static void apply_presence(struct gs_sample_state *st)
{
    if (!st->gen_count)
        return;
    for (int32_t i = 0; i < st->n_gen_ids; i++) {
        int32_t t = st->gen_ids[i];
        st->cand[t].logit -=
            (float)st->gen_count[t] * st->p.frequency_penalty + st->p.presence_penalty;
    }
}

/* Candidate a ranks before b: higher logit, then lower id. */
static bool ranks_before(const struct cand *a, const struct cand *b)
{
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static void swap_cand(struct cand *a, struct cand *b)
{
    struct cand t = *a;
    *a = *b;
    *b = t;
}

/* Sift-down in a heap of k whose root is the worst-ranked candidate. */
static void sift_worst(struct cand *c, int32_t k, int32_t i)
{
    for (;;) {
        int32_t w = i, l = 2 * i + 1, r = l + 1;
        if (l < k && ranks_before(&c[w], &c[l]))
            w = l;
        if (r < k && ranks_before(&c[w], &c[r]))
            w = r;
        if (w == i)
            return;
        swap_cand(&c[i], &c[w]);
        i = w;
    }
}

/*
 * Sorts c[0..n) into rank order by heapsort: O(n log n) worst case, no
 * allocation (glibc's qsort may allocate, and the sampler must not).
 */
static void sort_rank(struct cand *c, int32_t n)
{
    for (int32_t i = n / 2 - 1; i >= 0; i--)
        sift_worst(c, n, i);
    for (int32_t end = n - 1; end > 0; end--) {
        swap_cand(&c[0], &c[end]);
        sift_worst(c, end, 0);
    }
}

/*
 * Partitions c[lo..hi) (hi - lo >= 3) around the median of its first, middle
 * and last candidates; returns the pivot's final index p: c[lo..p) rank
 * before it, c[p+1..hi) after. Rank is a total order (ids break ties), so
 * equal logits cannot pile up on one side.
 */
static int32_t partition(struct cand *c, int32_t lo, int32_t hi)
{
    int32_t mid = lo + (hi - lo) / 2, last = hi - 1;
    if (ranks_before(&c[mid], &c[lo]))
        swap_cand(&c[mid], &c[lo]);
    if (ranks_before(&c[last], &c[lo]))
        swap_cand(&c[last], &c[lo]);
    if (ranks_before(&c[last], &c[mid]))
        swap_cand(&c[last], &c[mid]);
    swap_cand(&c[mid], &c[last]);
    struct cand pivot = c[last];
    int32_t store = lo;
    for (int32_t i = lo; i < last; i++)
        if (ranks_before(&c[i], &pivot))
            swap_cand(&c[i], &c[store++]);
    swap_cand(&c[store], &c[last]);
    return store;
}

/* Partition rounds before giving up on quickselect for a heapsort, so that a
 * hostile row cannot make selection quadratic. */
#define MAX_PARTITION_ROUNDS 64

/*
 * Permutes c[0..n) so that c[0..k) are the k best-ranked candidates, in no
 * particular order. Expected O(n) (quickselect), O(n log n) at worst.
 */
static void select_best(struct cand *c, int32_t n, int32_t k)
{
    int32_t lo = 0, hi = n;
    for (int rounds = 0; hi - lo >= 3 && rounds < MAX_PARTITION_ROUNDS; rounds++) {
        int32_t p = partition(c, lo, hi);
        if (p == k - 1 || p == k)
            return;
        if (p > k)
            hi = p;
        else
            lo = p + 1;
    }
    if (lo < k && k < hi)
        sort_rank(c + lo, hi - lo);
}

/*
 * Keeps the smallest rank-ordered prefix whose probability at temperature 1
 * reaches top_p (at least one token). Instead of sorting all n, partition
 * rounds narrow down where the prefix ends, as quickselect does, tracking
 * the mass still needed; only a small final region is sorted. The kept
 * candidates are moved to c[0..return).
 */
static int32_t filter_top_p(struct cand *c, int32_t n, float max, double top_p)
{
    double total = 0.0;
    for (int32_t i = 0; i < n; i++) {
        c[i].p = (float)exp((double)c[i].logit - (double)max);
        total += (double)c[i].p;
    }
    double need = top_p * total;
    int32_t lo = 0, hi = n;
    for (int rounds = 0; hi - lo > 16 && rounds < MAX_PARTITION_ROUNDS; rounds++) {
        int32_t p = partition(c, lo, hi);
        double better = 0.0;
        for (int32_t i = lo; i < p; i++)
            better += (double)c[i].p;
        if (better >= need) {
            hi = p;
            continue;
        }
        need -= better;
        if ((double)c[p].p >= need)
            return p + 1;
        need -= (double)c[p].p;
        lo = p + 1;
    }
    sort_rank(c + lo, hi - lo);
    for (int32_t i = lo; i < hi; i++) {
        need -= (double)c[i].p;
        if (need <= 0.0)
            return i + 1;
    }
    return hi; /* rounding left need a hair above 0: keep the region */
}

/* Keeps candidates whose probability is >= min_p times the best one's. */
static int32_t filter_min_p(struct cand *c, int32_t n, float max, double min_p)
{
    double floor_logit = (double)max + log(min_p);
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++)
        if ((double)c[i].logit >= floor_logit)
            c[m++] = c[i];
    return m;
}

/* Softmax at temperature t over c[0..n) and one draw from it. */
static int32_t draw(struct gs_sample_state *st, struct cand *c, int32_t n, float max, double t)
{
    double total = 0.0;
    for (int32_t i = 0; i < n; i++) {
        c[i].p = (float)exp(((double)c[i].logit - (double)max) / t);
        total += (double)c[i].p;
    }
    double target = gs_sample__rng_f64(&st->rng) * total;
    double cum = 0.0;
    int32_t last = 0;
    for (int32_t i = 0; i < n; i++) {
        if (c[i].p <= 0.0f)
            continue;
        cum += (double)c[i].p;
        last = i;
        if (cum > target)
            return c[i].id;
    }
    return c[last].id; /* only reachable through rounding at the very end */
}

/* Fills out for the chosen token and records it in the history. */
static void finish(struct gs_sample_state *st, const float *logits, int32_t n_vocab, float raw_max,
                   int32_t token, struct gs_sample_out *out)
{
    out->token = token;
    out->stop = gs_sample_is_stop(st, token);
    out->logprob = NAN;
    out->n_top = 0;
    if (st->p.logprobs || st->p.top_logprobs > 0) {
        double lse = gs_sample__log_sum_exp(logits, n_vocab, raw_max);
        out->logprob = (float)((double)logits[token] - (double)raw_max - lse);
        out->n_top = GS_MIN(st->p.top_logprobs, n_vocab);
        gs_sample__top(logits, n_vocab, out->n_top, raw_max, lse, out->top);
    }
    window_push(st, token);
    generated_push(st, token);
}

enum gs_status gs_sample_next(struct gs_sample_state *st, const float *logits, int32_t n_vocab,
                              struct gs_sample_out *out, struct gs_err *err)
{
    return gs_sample_next_masked(st, logits, n_vocab, NULL, out, err);
}

static bool allowed(const uint64_t *allow, int32_t i)
{
    return !allow || ((allow[(uint32_t)i >> 6] >> ((uint32_t)i & 63)) & 1);
}

enum gs_status gs_sample_next_masked(struct gs_sample_state *st, const float *logits,
                                     int32_t n_vocab, const uint64_t *allow,
                                     struct gs_sample_out *out, struct gs_err *err)
{
    if (!st || !logits || !out)
        return gs_err_set(err, GS_INVAL, "sample: NULL argument");
    if (n_vocab != st->n_vocab)
        return gs_err_set(err, GS_INVAL, "n_vocab: row has %d logits, sampler expects %d",
                          (int)n_vocab, (int)st->n_vocab);
    float raw_max;
    enum gs_status rc = gs_sample__scan(logits, n_vocab, &raw_max, err);
    if (rc != GS_OK)
        return rc;

    if (st->p.temperature == 0.0f && st->p.n_bias == 0 && !st->ring && !st->gen_count && !allow) {
        /* Plain greedy: the first logit equal to the maximum. */
        int32_t token = 0;
        while (logits[token] != raw_max)
            token++;
        finish(st, logits, n_vocab, raw_max, token, out);
        return GS_OK;
    }

    struct cand *c = st->cand;
    for (int32_t i = 0; i < n_vocab; i++) {
        c[i].id = i;
        c[i].logit = allowed(allow, i) ? logits[i] : -INFINITY;
    }
    apply_bias(st);
    apply_repeat(st);
    apply_presence(st);

    /* Drop impossible tokens; a finite logit pushed past the float range by a
     * penalty is refused rather than sampled. */
    int32_t n = 0;
    float max = -INFINITY;
    for (int32_t i = 0; i < n_vocab; i++) {
        float x = c[i].logit;
        if (x == -INFINITY)
            continue;
        if (!isfinite(x))
            return gs_err_set(err, GS_NUMERIC, "logits[%d] is non-finite after bias/penalties",
                              (int)i);
        if (x > max)
            max = x;
        c[n++] = c[i];
    }
    if (n == 0)
        return gs_err_set(err, GS_NUMERIC,
                          allow ? "no token the grammar allows is left after logit bias"
                                : "every token is banned (-inf) after logit bias");

    int32_t token;
    if (st->p.temperature == 0.0f) {
        int32_t best = 0;
        for (int32_t i = 1; i < n; i++)
            if (c[i].logit > c[best].logit)
                best = i; /* strict: the lowest id wins a tie */
        token = c[best].id;
    } else {
        if (st->p.top_k > 0 && st->p.top_k < n) {
            select_best(c, n, st->p.top_k);
            n = st->p.top_k;
        }
        if (st->p.top_p < 1.0f)
            n = filter_top_p(c, n, max, (double)st->p.top_p);
        if (st->p.min_p > 0.0f)
            n = filter_min_p(c, n, max, (double)st->p.min_p);
        token = draw(st, c, n, max, (double)st->p.temperature);
    }

    finish(st, logits, n_vocab, raw_max, token, out);
    return GS_OK;
}
