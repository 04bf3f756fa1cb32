/*
 * scheduler/scheduler.h - continuous batching: admission, one batch per engine
 * step, chunked prefill, preemption, cancellation, and the events that carry
 * results back to the server.
 *
 * The scheduler owns the engine side of serving: the model's backend and plan
 * cache, the KV page pool (kvcache/) with its prefix cache, and one sampler
 * state per running sequence. Every step it builds one batch within
 * cfg.max_batch_tokens and cfg.max_seqs: the decode token of every running
 * sequence first, then chunks of pending prefills, so that a long new prompt
 * never stalls streams that are already decoding.
 *
 * Two ways to drive it:
 *   - threaded (the daemon): gs_sched_start() runs the step loop on its own
 *     engine thread. The server thread submits and cancels; results come back
 *     as events that the server drains with gs_sched_poll(). When events are
 *     pending, the engine thread calls cfg.notify (the daemon passes a function
 *     that calls uv_async_send), so the loop thread never polls.
 *   - synchronous (tests, `graphserve run` with several prompts): never call
 *     gs_sched_start(); call gs_sched_step() until gs_sched_idle().
 *
 * Thread rules: gs_sched_submit, gs_sched_cancel, gs_sched_poll and
 * gs_sched_stats may be called from any one other thread (the loop thread)
 * while the engine thread runs; everything else belongs to the thread that
 * created the scheduler. The only shared state is the two queues inside (requests
 * and cancellations in, events out) and the stats snapshot, each behind a mutex.
 *
 * Ownership: gs_sched_submit copies the request (prompt, sampling arrays). An
 * event's data is borrowed until the next gs_sched_poll on that scheduler.
 * The model and its GGUF file are borrowed and must outlive the scheduler;
 * gs_sched_new rewrites the model's graph with the passes its backend
 * supports (a graph rewritten so still runs on every backend, ref included).
 *
 * Determinism: with greedy sampling, or a fixed seed, a sequence's tokens do
 * not depend on what else shares its batches, on preemption, or on prefix-cache
 * hits (tested on every backend).
 */
#ifndef GS_SCHEDULER_H
#define GS_SCHEDULER_H

#include "engine/base.h"
#include "engine/grammar.h"
#include "engine/model.h"
#include "engine/sample.h"
#include "engine/validate.h"

/* How sequences draft tokens for speculative decoding. */
enum gs_spec {
    GS_SPEC_OFF = 0, /* one token per sequence per step */
    GS_SPEC_NGRAM,   /* prompt lookup: the continuation of the latest earlier match of the
                        last tokens in the sequence's own prompt and output */
    GS_SPEC_DRAFT,   /* a draft model (cfg.draft_model) proposes its greedy continuation */
};

/* The element type of the validation reference's own KV cache (its run on ref), whatever
 * the served cache's kv_type: validation compares a served answer with full-precision
 * numerics, so what a quantized cache costs shows in its figures. */
#define GS_SCHED_VAL_KV_TYPE GS_TYPE_F32

struct gs_sched_cfg {
    const char *backend;        /* "ref", "cpu", ... */
    int n_threads;              /* backend worker threads; 0: backend default */
    uint64_t kv_cache_bytes;    /* KV pool size; 0: derived from the model and free memory */
    uint32_t page_tokens;       /* tokens per KV page; 0: 16 */
    enum gs_type kv_type;       /* GS_TYPE_F16, GS_TYPE_F32 (0) or GS_TYPE_Q8_0 */
    uint32_t max_seqs;          /* running sequences per step; 0: 64 */
    uint32_t max_batch_tokens;  /* tokens per step; 0: 512 */
    uint32_t max_queue;         /* waiting requests before submit says GS_BUSY; 0: 256 */
    uint32_t n_ctx;             /* longest sequence (prompt + output); 0: the model's */
    bool prefix_cache;          /* reuse full pages of identical prompt prefixes */
    const int32_t *eog;         /* end-of-generation token ids (copied); NULL: the model's eos */
    uint32_t n_eog;
    /*
     * Speculative decoding. A decoding sequence may add up to spec_max_draft
     * drafted tokens after its next one; the step computes logits for all of
     * them, and the longest prefix of the draft that sampling reproduces is
     * kept, plus the token sampled where the draft went wrong (or after its
     * end): every token is still sampled from the target's logits at its own
     * position, so greedy output is the same token for token and sampled
     * output follows the same distribution. Drafts use only token budget and
     * free pages left after every sequence's own tokens are placed, so they
     * never preempt, never evict a cached prefix, and rejected positions are
     * rolled back (gs_kv_seq_truncate) to the page table, refcounts and
     * prefix cache of a step that never wrote them. Each sequence adapts its
     * draft length to its recent acceptance, down to 0 (then it tries again
     * now and then).
     */
    enum gs_spec spec;
    uint32_t spec_max_draft; /* most drafted tokens per sequence per step; 0: 8 */
    uint32_t spec_ngram;     /* GS_SPEC_NGRAM: longest n-gram looked up (>= 2); 0: 4 */
    /*
     * GS_SPEC_DRAFT: a small model with the target's vocabulary (the same
     * token count, token texts and types, and special ids; gs_sched_new
     * refuses another with GS_INVAL naming the first difference). Borrowed:
     * it and its file must outlive the scheduler, and it must be a model of
     * its own, not the target (load the file twice to draft with the target
     * itself): the scheduler opens a second runner on its graph, on the same
     * backend, which rewrites that graph with the backend's passes.
     *
     * Its K/V live in a pool of their own with as many pages of page_tokens
     * as the target's pool (so whatever the target admits the draft holds),
     * each page sized for the draft model; kv_cache_bytes budgets the
     * target's pool alone and the draft's adds draft_kv_bytes (stats). Each
     * step, the sequences that draft run on the draft model together: the
     * first draft step feeds each one the tokens its draft K/V lacks (the
     * prompt at its first decoding step, then the tokens kept last step, in
     * chunks of max_batch_tokens across sequences) and takes the argmax of
     * the last one's logits; each further step feeds every sequence its
     * latest drafted token, up to its draft length. After verification the
     * draft's K/V past the tokens actually kept is rolled back
     * (gs_kv_seq_truncate). The draft never decides a token: every served
     * token and logit is the target's.
     */
    struct gs_model *draft_model;
    /* Test knob (false in production): the draft model recomputes each drafting
     * sequence from position 0 every step, keeping nothing, so its drafts are
     * what rolled-back K/V must reproduce (tests compare the two on ref). */
    bool draft_recompute;
    /* Per-request validation (requests with .validate): the reference run goes
     * in chunks of at most this many tokens, one chunk between serving steps,
     * so it delays other requests by one bounded slice at a time; 0: 32. */
    uint32_t validate_chunk_tokens;
    const struct gs_val_thresholds *validate_thresholds; /* NULL: defaults; copied */
    /*
     * Test and diagnostics hook (NULL in production): called on the engine
     * thread with each sequence's logits row, before sampling, and may modify
     * it. Tests use it to inject non-finite values and check that only that
     * sequence fails.
     */
    void (*logits_hook)(uint64_t id, uint32_t position, float *logits, uint32_t n_vocab,
                        void *ctx);
    void *logits_hook_ctx;
    /* Test hook (NULL in production): called on the engine thread before each
     * validation chunk; tests use it to hold validation jobs. */
    void (*validate_hook)(void *ctx);
    void *validate_hook_ctx;
    /* Called on the engine thread after events were queued (may be NULL). */
    void (*notify)(void *ctx);
    void *notify_ctx;
};

/* What a client asked for, after the server parsed and tokenized it. */
struct gs_sched_request {
    uint64_t id;                  /* chosen by the caller, unique among live requests */
    const int32_t *prompt;        /* [n_prompt] token ids, each < n_vocab; copied */
    uint32_t n_prompt;            /* >= 1 */
    uint32_t max_tokens;          /* tokens to generate at most (>= 1) */
    bool ignore_eos;              /* keep going past end-of-generation tokens */
    uint32_t n_top_logprobs;      /* 0..20 alternatives per token in events; 0: none */
    bool want_logprobs;           /* report the chosen token's logprob */
    bool validate;                /* re-evaluate on ref afterwards: a VALIDATION event follows */
    struct gs_sample_params sampling; /* arrays inside are copied */
    /* Structured output (NULL: none): every token is sampled among those the
     * grammar allows next; end-of-generation tokens only where it may end
     * (and never with ignore_eos); the sequence finishes with
     * GS_FINISH_STOP when the grammar is complete and nothing may follow.
     * submit takes a reference to grammar; grammar_vocab (the model's tokens,
     * engine/grammar.h) is borrowed and must outlive the scheduler. */
    struct gs_grammar *grammar;
    const struct gs_grammar_vocab *grammar_vocab;
    /* With grammar: the text from which it applies (NUL-terminated, copied;
     * NULL or "": from the first token). Until the sequence's text contains
     * it, tokens are sampled freely; the token that completes it is fed to
     * the grammar from the trigger's first byte on, so the grammar's sentence
     * starts with the trigger itself (a tool call's start marker). If the
     * grammar refuses that text, the sequence goes on unconstrained. */
    const char *grammar_trigger;
    /* Embedding (GS_POOLING_NONE: a generation): the prompt is computed like
     * any prefill, in chunks beside other work, and its final hidden states
     * pooled so and L2-normalised into the FINISH event's embedding (finish
     * GS_FINISH_STOP); nothing is generated, so max_tokens, sampling, logprobs,
     * grammar and validate are ignored, and the prompt alone must fit the
     * context. The prefix cache is not used for its prompt (pooling needs every
     * row), though its pages are registered for others. GS_UNSUPPORTED when the
     * model's graph has no hidden-state output (engine/graph.h, HIDDEN). */
    enum gs_pooling pooling;
};

enum gs_finish {
    GS_FINISH_NONE = 0, /* still running */
    GS_FINISH_STOP,     /* a stop token (or the caller's stop string, via cancel) */
    GS_FINISH_LENGTH,   /* max_tokens or the context length reached */
    GS_FINISH_EOS,      /* an end-of-generation token of the vocabulary */
    GS_FINISH_CANCELLED,/* gs_sched_cancel, e.g. the client went away */
    GS_FINISH_ERROR,    /* numerical failure or engine error; see event.err */
    GS_FINISH_ABORT,    /* the scheduler was shut down with the request unfinished */
};

const char *gs_finish_name(enum gs_finish f); /* "stop", "length", ... */

/* Timings and counts of one request, reported with its last event. */
struct gs_sched_req_stats {
    double queue_ms;            /* submit to first scheduled */
    double prefill_ms;          /* first scheduled to first token */
    double decode_ms;           /* first token to finish */
    uint32_t n_prompt;
    uint32_t n_prompt_cached;   /* prompt tokens served from the prefix cache */
    uint32_t n_recomputed;      /* tokens computed again after preemption */
    uint32_t n_generated;
    uint32_t n_preemptions;
    double grammar_ms;          /* structured output: masks and matcher advances, all steps */
    /* Speculative decoding (zero when off): tokens drafted, drafted tokens
     * kept, steps that verified a draft, time spent drafting. Tokens per
     * verification step are (n_draft_accepted + n_verify_steps) / n_verify_steps. */
    uint32_t n_drafted;
    uint32_t n_draft_accepted;
    uint32_t n_verify_steps;
    double draft_ms;
};

enum gs_sched_event_kind {
    GS_SCHED_EV_TOKEN,      /* one generated token */
    GS_SCHED_EV_FINISH,     /* the request ended; only a VALIDATION event may follow */
    GS_SCHED_EV_VALIDATION, /* the validation report of a finished request (last event) */
};

struct gs_sched_top {
    int32_t token;
    float logprob;
};

struct gs_sched_event {
    enum gs_sched_event_kind kind;
    uint64_t id;
    /* TOKEN */
    int32_t token;
    float logprob;                 /* when want_logprobs */
    uint32_t n_top;
    const struct gs_sched_top *top; /* [n_top], borrowed until the next poll */
    /* FINISH */
    enum gs_finish finish;
    struct gs_sched_req_stats stats;
    enum gs_status err_code;       /* GS_OK unless finish == GS_FINISH_ERROR */
    char err_msg[GS_ERR_MSG_LEN];
    bool validation_pending;       /* FINISH: a VALIDATION event will follow */
    /* FINISH of an embedding request that ended GS_FINISH_STOP: [n_embd] unit
     * vector, borrowed until the next gs_sched_poll; NULL otherwise. */
    const float *embedding;
    uint32_t n_embd;
    /* VALIDATION: the comparison of the served logits with the ref backend's at
     * every generated position (the positions whose logits were sampled).
     * Borrowed until the next gs_sched_poll; NULL if validation could not run,
     * with the reason in err_msg. */
    const struct gs_val_report *validation;
};

/* Buckets of the batch-size histogram: steps whose token count is <= bound i
 * (the last bucket takes everything larger). */
#define GS_SCHED_BATCH_BUCKETS 12
extern const uint32_t gs_sched_batch_bounds[GS_SCHED_BATCH_BUCKETS - 1];

/* Engine-wide counters, a consistent snapshot for /metrics. */
struct gs_sched_stats {
    uint64_t n_steps;
    uint64_t n_tokens_prompt;     /* prompt tokens computed (not cached) */
    uint64_t n_tokens_generated;
    uint64_t n_prefix_hit_tokens;
    uint64_t n_preemptions;
    uint64_t n_cancelled;
    uint64_t n_errors;
    uint32_t n_running;
    uint32_t n_waiting;
    uint32_t last_batch_tokens;
    uint64_t batch_steps[GS_SCHED_BATCH_BUCKETS]; /* steps by token count (not cumulative) */
    uint64_t batch_tokens_sum;                    /* tokens over all steps */
    uint32_t pages_total, pages_used, pages_cached, pages_free;
    uint32_t page_tokens; /* token slots per KV page */
    uint64_t n_evictions;
    uint64_t kv_bytes;
    uint64_t scratch_bytes;       /* activation scratch of all compiled plans (the draft's too) */
    uint64_t n_validated;         /* validation reports emitted */
    uint64_t n_validation_failed; /* ... whose verdict was a failure */
    uint32_t n_validating;        /* validation jobs waiting or running */
    /* Speculative decoding, summed over requests as in gs_sched_req_stats. */
    uint64_t n_drafted;
    uint64_t n_draft_accepted;
    uint64_t n_verify_steps;
    double draft_seconds;
    uint64_t draft_kv_bytes; /* GS_SPEC_DRAFT: the draft model's KV pool; 0 otherwise */
    /* Bytes held for the sequences the engine knows (running and waiting): token
     * arrays, page tables, grammar masks, pooled rows and validation logits. */
    uint64_t seq_bytes;
    /* Bytes allocated for engine events: the queue the loop has not taken yet and
     * the items of its last poll. A burst grows them; drained, they shrink back. */
    uint64_t event_bytes;
};

struct gs_sched;

/*
 * Creates a scheduler for model on backend cfg->backend: opens the backend,
 * sizes the KV pool (printing nothing; gs_sched_stats tells). GS_NOTFOUND for
 * an unknown backend, GS_INVAL for a config out of range, GS_NOMEM.
 */
enum gs_status gs_sched_new(const struct gs_sched_cfg *cfg, struct gs_model *model,
                            struct gs_sched **out, struct gs_err *err);

/* Stops the engine thread if running, aborts what is left, frees everything. */
void gs_sched_free(struct gs_sched *s);

/*
 * Queues a request. GS_BUSY when cfg.max_queue requests wait already (HTTP
 * 429); GS_INVAL when the request can never run (prompt + max_tokens over the
 * context, larger than the whole KV pool, a token id out of range): the message
 * says which. Never blocks on the engine.
 */
enum gs_status gs_sched_submit(struct gs_sched *s, const struct gs_sched_request *req,
                               struct gs_err *err);

/* Ends request id before the next step and frees its pages; its FINISH event
 * says GS_FINISH_CANCELLED. A pending validation of a finished id is dropped
 * without an event. Unknown ids are ignored. */
void gs_sched_cancel(struct gs_sched *s, uint64_t id);

/* Moves up to cap pending events into out; returns how many. */
size_t gs_sched_poll(struct gs_sched *s, struct gs_sched_event *out, size_t cap);

void gs_sched_stats(struct gs_sched *s, struct gs_sched_stats *out);

/* ---- step trace: the engine made visible (the daemon's /debug/events) -------------------- */

/*
 * While at least one watcher is registered, the engine thread writes one JSON
 * object per step (a line ending in '\n') into a bounded buffer that the loop
 * thread takes; cfg.notify is called after each. The record, in docs/SERVER.md's
 * shape: the step's batch (each sequence with its prompt and decode tokens),
 * running and waiting counts, the prefix-cache hits and preemptions since the
 * last record, generated tokens per second over the last steps, and the KV page
 * map (each page used, cached or free, run-length coded, and each running
 * sequence's pages). With no watcher nothing is built: the engine tests one
 * atomic counter per step. The engine never waits for the taker: a record that
 * does not fit in GS_SCHED_TRACE_MAX_BYTES is dropped and counted.
 */
#define GS_SCHED_TRACE_MAX_BYTES (1u << 20)

/* Registers (on) or removes (off) one watcher. Any thread. */
void gs_sched_trace_watch(struct gs_sched *s, bool on);
/* Moves the pending records into *text (gs_malloc'd, the caller frees; NULL
 * when none) and *len; returns how many records were dropped since the last
 * take. Any one thread (the loop thread). */
uint64_t gs_sched_trace_take(struct gs_sched *s, char **text, size_t *len);

/* The context length requests are checked against (prompt + max_tokens). */
uint32_t gs_sched_n_ctx(const struct gs_sched *s);

/*
 * Checks what the scheduler promises about its pages (tests, after any
 * step; engine thread or synchronous caller only): the pool's own lists
 * (gs_kv_pool_check); every sequence's page table covers exactly the
 * positions it has computed; each page's refcount is the number of page
 * tables holding it; a sequence's registered pages carry the chained hash
 * of its own tokens and its other pages carry none. With a draft model, the
 * same of its pool (lists, refcounts, tables covering exactly the positions
 * the draft has computed, no page hashed) and no sequence's draft K/V ahead
 * of its own tokens. GS_INVAL with the first broken rule.
 */
enum gs_status gs_sched_check(struct gs_sched *s, struct gs_err *err);

/*
 * The prompt-lookup drafter (GS_SPEC_NGRAM): finds the latest earlier
 * occurrence in tokens[0..n) of its last g tokens, for g from ngram_max down
 * to 2, and copies up to k of the tokens that followed it into out. Returns
 * how many (0: no match). Pure; O(n * ngram_max).
 */
uint32_t gs_spec_ngram_draft(const int32_t *tokens, uint32_t n, uint32_t ngram_max, int32_t *out,
                             uint32_t k);

/* ---- threaded mode ---------------------------------------------------------------- */

enum gs_status gs_sched_start(struct gs_sched *s, struct gs_err *err);
/* Finishes running requests within drain_ms, then aborts the rest
 * (GS_FINISH_ABORT) and joins the engine thread. */
void gs_sched_stop(struct gs_sched *s, uint32_t drain_ms);

/* ---- synchronous mode ---------------------------------------------------------------- */

/* Runs one engine step on the calling thread. */
enum gs_status gs_sched_step(struct gs_sched *s, struct gs_err *err);
/* True when nothing is running, waiting or being validated. */
bool gs_sched_idle(struct gs_sched *s);

#endif /* GS_SCHEDULER_H */
