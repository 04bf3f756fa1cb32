/*
 * engine/sample/internal.h - declarations shared by the files of engine/sample
 * (and its tests). No other module includes this header.
 *
 * The random stream: xoshiro256** (Blackman and Vigna, 2018), whose 256-bit
 * state is filled from a 64-bit seed by splitmix64, as its authors recommend.
 * Both are defined on unsigned 64-bit arithmetic only, so the stream is the
 * same on every platform and compiler.
 */
#ifndef GS_SAMPLE_INTERNAL_H
#define GS_SAMPLE_INTERNAL_H

#include "engine/base.h"
#include "engine/sample.h"

#include <stdint.h>

struct gs_sample__rng {
    uint64_t s[4];
};

/* Advances *x and returns the next splitmix64 output. */
uint64_t gs_sample__splitmix64(uint64_t *x);

/* Seeds rng from seed through four splitmix64 outputs. */
void gs_sample__rng_seed(struct gs_sample__rng *rng, uint64_t seed);

/* Next 64 random bits. */
uint64_t gs_sample__rng_u64(struct gs_sample__rng *rng);

/* Uniform double in [0, 1): the top 53 bits of the next output. */
double gs_sample__rng_f64(struct gs_sample__rng *rng);

/* ---- raw-logit helpers (logprob.c) ---------------------------------------- */

/*
 * Checks logits[n] for NaN and +Inf (GS_NUMERIC naming the first bad index)
 * and returns the largest finite logit in *max (GS_NUMERIC if none is).
 */
enum gs_status gs_sample__scan(const float *logits, int32_t n, float *max, struct gs_err *err);

/* log(sum_i exp(logits[i] - max)) in double; logits already scanned. */
double gs_sample__log_sum_exp(const float *logits, int32_t n, float max);

/* Writes the k (<= n) largest logits' ids to top[].token, best first, ties by
 * ascending id, and their log-softmax given max and lse. */
void gs_sample__top(const float *logits, int32_t n, int32_t k, float max, double lse,
                    struct gs_sample_logprob *top);

#endif /* GS_SAMPLE_INTERNAL_H */
