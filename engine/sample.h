/*
 * engine/sample.h - choosing the next token from a row of logits: greedy,
 * temperature, top-k, top-p, min-p, repetition / presence / frequency
 * penalties, logit bias, stop tokens and a seeded, portable random stream;
 * plus log-probabilities of the raw logits for OpenAI `logprobs`.
 *
 * Two kinds of object:
 *   - struct gs_sample_params is plain data: what a request asked for. Fill it
 *     with gs_sample_params_init() (every mechanism off, as in the OpenAI API),
 *     set the fields you need, check it with gs_sample_params_check(). The
 *     arrays it points to are borrowed only during gs_sample_state_new().
 *   - struct gs_sample_state is one sequence's sampler: a copy of the params,
 *     its random stream, its token history (for the penalties) and scratch
 *     sized by n_vocab. gs_sample_state_new() allocates everything it will
 *     ever need; gs_sample_next() allocates nothing.
 *
 * Order of operations in gs_sample_next(), on a private copy of the logits:
 *
 *     logit bias -> repetition penalty -> presence/frequency penalties
 *       -> top-k -> top-p -> min-p -> temperature -> draw
 *
 * This is llama.cpp's default sampler chain (logit bias first, then its
 * penalties sampler, top-k, top-p, min-p, temperature, dist) without the
 * mechanisms graphserve does not implement (DRY, typical-p, XTC, mirostat).
 * As in llama.cpp, top-p and min-p look at probabilities at temperature 1;
 * temperature only reshapes what survives the filters. With temperature 0 the
 * result is the argmax of the biased, penalised logits (ties: lowest id), and
 * the filters cannot change it; no random number is consumed.
 *
 * Penalties (history is what the state has seen, see "History" below):
 *   - repetition (llama.cpp semantics): every token that occurs at least once
 *     in the last repeat_last_n history tokens has its logit divided by
 *     repeat_penalty if positive, multiplied by it if <= 0. Once per token,
 *     whatever its count.
 *   - presence / frequency (OpenAI semantics): logit -= count * frequency
 *     + (count > 0) * presence, where count is how many times the token was
 *     generated so far in this sequence (prompt tokens do not count).
 *
 * Random stream: xoshiro256** seeded through splitmix64 from params.seed. The
 * stream is bit-identical on every platform; a draw walks the surviving
 * candidates in an order that depends only on the logits and the parameters
 * (the filters' selection is deterministic) and accumulates probabilities in
 * double. The same seed, logits and history therefore give the same tokens on
 * every platform, up to last-ulp differences between libm exp() functions,
 * which matter only when a uniform draw lands within ~1e-16 of a boundary.
 *
 * Cost: one pass over the row for greedy without bias or penalties; expected
 * O(n_vocab) with top-k / top-p (selection by partitioning, not sorting),
 * O(n_vocab log n_vocab) at worst.
 *
 * Non-finite input: NaN or +Inf anywhere in the logits makes gs_sample_next()
 * return GS_NUMERIC without choosing. -Inf is a valid logit meaning "never"
 * (probability 0); if no candidate has a finite logit after bias, the call
 * returns GS_NUMERIC too.
 *
 * Stop tokens: a token in params.stop_tokens is returned like any other with
 * out->stop set; ending the sequence (and end-of-generation tokens from the
 * vocabulary) is the caller's business.
 *
 * Threads: a state belongs to one thread at a time; different states may be
 * used concurrently. The free functions (log-softmax, top logprobs) are pure.
 *
 * Example:
 *     struct gs_sample_params p;
 *     gs_sample_params_init(&p);
 *     p.temperature = 0.8f; p.top_p = 0.95f; p.seed = 42;
 *     struct gs_sample_state *st;
 *     if (gs_sample_state_new(&p, n_vocab, &st, &err) != GS_OK) ...;
 *     gs_sample_accept_prompt(st, prompt, n_prompt);
 *     for (;;) {
 *         ... evaluate the model, get logits[n_vocab] ...
 *         struct gs_sample_out o;
 *         if (gs_sample_next(st, logits, n_vocab, &o, &err) != GS_OK) break;
 *         if (o.stop || is_eog(o.token)) break;
 *         ... append o.token ...
 *     }
 *     gs_sample_state_free(st);
 */
#ifndef GS_SAMPLE_H
#define GS_SAMPLE_H

#include "engine/base.h"

/* Limits checked by gs_sample_params_check(). */
#define GS_SAMPLE_TOP_LOGPROBS_MAX  20        /* OpenAI's top_logprobs limit */
#define GS_SAMPLE_REPEAT_LAST_N_MAX (1 << 20) /* tokens of history for repetition */
#define GS_SAMPLE_N_BIAS_MAX        4096      /* logit_bias entries */
#define GS_SAMPLE_N_STOP_MAX        4096      /* stop token ids */

/* One logit_bias entry: bias is added to the token's logit; -INFINITY bans it. */
struct gs_sample_bias {
    int32_t token;
    float bias;
};

/* One (token, log-probability) pair, as reported in top_logprobs. */
struct gs_sample_logprob {
    int32_t token;
    float logprob; /* natural log of the softmax of the raw logits */
};

/*
 * What one request asked for. Defaults (gs_sample_params_init) turn every
 * mechanism off, so that sampling is plain softmax at temperature 1.
 */
struct gs_sample_params {
    /* Softmax temperature, >= 0. 0 = greedy (argmax). Default 1. */
    float temperature;
    /* Keep the k highest logits, >= 0. 0 = off. Default 0. */
    int32_t top_k;
    /* Keep the smallest set of most likely tokens whose probability (at
     * temperature 1, after top-k) sums to >= top_p; in (0, 1]. 1 = off. */
    float top_p;
    /* Drop tokens whose probability is below min_p times the most likely
     * token's; in [0, 1]. 0 = off. */
    float min_p;
    /* Repetition penalty factor, > 0. 1 = off. Default 1. */
    float repeat_penalty;
    /* How many of the most recent history tokens the repetition penalty
     * looks at, in [0, GS_SAMPLE_REPEAT_LAST_N_MAX]. 0 = off. Default 64
     * (llama.cpp's). llama.cpp's -1 ("whole context") is the caller's to
     * translate into the context size. */
    int32_t repeat_last_n;
    /* OpenAI presence / frequency penalties, in [-2, 2]. 0 = off. */
    float presence_penalty;
    float frequency_penalty;
    /* Additive biases, n_bias entries (borrowed during state_new). A token
     * may appear more than once; its biases add up. Values must be finite or
     * -INFINITY. */
    const struct gs_sample_bias *bias;
    int32_t n_bias;
    /* Token ids that end generation (borrowed during state_new). */
    const int32_t *stop_tokens;
    int32_t n_stop;
    /* Seed of the random stream. Any value, including 0, is a fixed seed;
     * choosing a random one when the client gave none is the caller's job. */
    uint64_t seed;
    /* Report the chosen token's log-probability in gs_sample_out.logprob. */
    bool logprobs;
    /* Also report the top_logprobs most likely tokens, in
     * [0, GS_SAMPLE_TOP_LOGPROBS_MAX]. Implies logprobs. */
    int32_t top_logprobs;
};

/* Result of one gs_sample_next() call. */
struct gs_sample_out {
    int32_t token; /* the chosen token id, in [0, n_vocab) */
    bool stop;     /* token is one of params.stop_tokens */
    /* Log-softmax of the RAW logits (before bias, penalties, filters and
     * temperature, as OpenAI reports it) at token. NAN unless params.logprobs
     * or params.top_logprobs > 0. */
    float logprob;
    int32_t n_top; /* entries filled in top[], = params.top_logprobs */
    /* The n_top most likely tokens by raw logit, most likely first, ties by
     * ascending id. */
    struct gs_sample_logprob top[GS_SAMPLE_TOP_LOGPROBS_MAX];
};

struct gs_sample_state; /* opaque: one sequence's sampler */

/* ---- parameters ---------------------------------------------------------- */

/* Fills p with the defaults described on each field (everything off). */
void gs_sample_params_init(struct gs_sample_params *p);

/*
 * Checks every field against its documented range and every bias / stop id
 * against [0, n_vocab). Returns GS_OK or GS_INVAL with a message naming the
 * field as a request spells it ("top_p", "logit_bias[3].token").
 */
enum gs_status gs_sample_params_check(const struct gs_sample_params *p, int32_t n_vocab,
                                      struct gs_err *err);

/* ---- per-sequence state --------------------------------------------------- */

/*
 * Creates a sampler for one sequence over a vocabulary of n_vocab tokens.
 * Checks p (as gs_sample_params_check), copies it, including the bias and stop
 * arrays, and allocates all scratch. Penalty bookkeeping (two n_vocab counters
 * and a repeat_last_n ring) is allocated only when that penalty is on.
 * Returns GS_OK and *out (caller frees with gs_sample_state_free), GS_INVAL
 * or GS_NOMEM.
 */
enum gs_status gs_sample_state_new(const struct gs_sample_params *p, int32_t n_vocab,
                                   struct gs_sample_state **out, struct gs_err *err);

/* Frees st; NULL is a no-op. */
void gs_sample_state_free(struct gs_sample_state *st);

/* Forgets the history and restarts the random stream from params.seed, as if
 * the state were new. */
void gs_sample_state_reset(struct gs_sample_state *st);

/*
 * Chooses the next token from logits[n_vocab] (n_vocab must equal the
 * state's) following the order at the top of this file, fills *out, and
 * records the token in the history as generated (gs_sample_accept). Does not
 * allocate; does not modify logits.
 * Returns GS_OK; GS_NUMERIC if logits hold NaN or +Inf, or no candidate is
 * finite (out is then untouched and nothing is recorded); GS_INVAL on a
 * mismatched n_vocab or NULL argument.
 */
enum gs_status gs_sample_next(struct gs_sample_state *st, const float *logits, int32_t n_vocab,
                              struct gs_sample_out *out, struct gs_err *err);

/*
 * gs_sample_next restricted to the tokens set in allow[(n_vocab + 63) / 64]
 * (bit t of allow[t / 64]; NULL: every token): the others get -inf before
 * the chain, so logit bias, penalties and the filters act on the allowed set
 * and greedy picks the most likely allowed token. Log-probabilities are still
 * those of the raw logits. GS_NUMERIC when no allowed token is left.
 * Grammar-constrained decoding (engine/grammar.h) passes its mask here.
 */
enum gs_status gs_sample_next_masked(struct gs_sample_state *st, const float *logits,
                                     int32_t n_vocab, const uint64_t *allow,
                                     struct gs_sample_out *out, struct gs_err *err);

/*
 * Records a generated token that the caller chose itself (forced or
 * speculative tokens): it enters the repetition window and the presence /
 * frequency counts. gs_sample_next() already does this for its own tokens.
 * Ids outside [0, n_vocab) return GS_INVAL and record nothing.
 */
enum gs_status gs_sample_accept(struct gs_sample_state *st, int32_t token, struct gs_err *err);

/*
 * Records prompt tokens: they enter the repetition window (llama.cpp feeds
 * the prompt to its penalties too) but not the presence / frequency counts,
 * which OpenAI defines over sampled tokens. Ids are checked first; on
 * GS_INVAL nothing is recorded.
 */
enum gs_status gs_sample_accept_prompt(struct gs_sample_state *st, const int32_t *tokens, int32_t n,
                                       struct gs_err *err);

/* Returns true if token is one of the state's stop tokens. */
bool gs_sample_is_stop(const struct gs_sample_state *st, int32_t token);

/* ---- log-probabilities of raw logits (pure) ------------------------------ */

/*
 * Writes log_softmax(logits)[i] to out[i] for n entries, computed in double
 * with the maximum subtracted. out may alias logits. Returns GS_NUMERIC (out
 * unspecified) if a logit is NaN or +Inf or none is finite, else GS_OK.
 */
enum gs_status gs_sample_log_softmax(const float *logits, int32_t n, float *out,
                                     struct gs_err *err);

/*
 * The k most likely tokens of logits[n] with their log-softmax, most likely
 * first, ties by ascending id; k in [0, GS_SAMPLE_TOP_LOGPROBS_MAX], clamped
 * to n. Writes k entries to top. Same errors as gs_sample_log_softmax.
 */
enum gs_status gs_sample_top_logprobs(const float *logits, int32_t n, int32_t k,
                                      struct gs_sample_logprob *top, struct gs_err *err);

#endif /* GS_SAMPLE_H */
