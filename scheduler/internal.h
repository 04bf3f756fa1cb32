/*
 * scheduler/internal.h - what the scheduler's files share: the scheduler
 * struct, its sequences, queued events and validation jobs, and the few
 * functions one file calls in another. Private to scheduler/.
 *
 *   sched.c   creation, the loop thread's side (submit, cancel, poll, stats),
 *             the engine thread
 *   step.c    the engine's side: admission, preemption, batches, sampling
 *   draft.c   the draft-model drafter: its runner and KV pool, the batched
 *             draft steps, the rollback of its K/V after verification
 *   spec.c    speculative decoding: drafts, what a verification teaches
 *   trace.c   the step trace
 *   vjobs.c   validation jobs on the reference runner, which it owns
 *   seq.c     the leaf they all call: pages for a token count, end-of-generation
 *             tokens, the event queue, a sequence's release
 *
 * Calls go down that list and never back up (tests/check_calls.py checks it).
 */
#ifndef GS_SCHEDULER_INTERNAL_H
#define GS_SCHEDULER_INTERNAL_H

#include "scheduler/scheduler.h"

#include "engine/backend.h"
#include "engine/runner.h"
#include "kvcache/kvcache.h"

#include <pthread.h>
#include <stdatomic.h>

#define DEFAULT_MAX_SEQS         64
#define DEFAULT_MAX_BATCH_TOKENS 512
#define DEFAULT_MAX_QUEUE        256
#define DEFAULT_VALIDATE_CHUNK   32
#define DEFAULT_SPEC_MAX_DRAFT   8
#define DEFAULT_SPEC_NGRAM       4
#define MAX_SPEC_DRAFT           64
/* Logits rows for drafted tokens are sized for this many sequences drafting
 * spec_max_draft tokens in one step (beyond one row per sequence), which
 * bounds the logits buffer however many sequences speculate. */
#define SPEC_DRAFT_SEQS          16
/* A sequence whose drafts keep failing stops drafting for this many of its
 * tokens, doubling on each failed retry up to the maximum. */
#define SPEC_BACKOFF_MIN 16
#define SPEC_BACKOFF_MAX 256
/* Served logits kept for one validated request: max_tokens x n_vocab floats. */
#define MAX_VALIDATE_BYTES (256u << 20)

struct seq {
    struct seq *next; /* link in the inbox or the waiting queue */
    uint64_t id;
    int32_t *tokens; /* [cap] prompt then generated, owned */
    uint32_t n_tokens, cap;
    uint32_t n_prompt;
    uint32_t max_tokens;
    uint32_t n_generated;
    uint32_t n_computed;   /* positions with K/V in the pages */
    uint32_t high_water;   /* most positions ever computed (recompute accounting) */
    uint32_t n_registered; /* leading pages whose hash is set */
    uint64_t chain_hash;   /* hash of the last registered page */
    struct gs_kv_seq kv;
    struct gs_sample_state *sampler;
    struct gs_grammar_matcher *matcher; /* structured output, or NULL */
    uint64_t *allow;                    /* [(n_vocab + 63) / 64] its mask, with matcher */
    /* A grammar with a trigger (gs_sched_request.grammar_trigger): off until
     * the text holds trigger; window keeps the last trigger_len - 1 bytes of
     * text, plus room for one token, so that a trigger split across tokens
     * is found. */
    bool grammar_on;
    const struct gs_grammar_vocab *vocab; /* borrowed, with matcher */
    char *trigger;                        /* owned; NULL: the grammar is on from the start */
    uint32_t trigger_len;
    char *window; /* [trigger_len + longest token] owned */
    uint32_t window_len;
    bool ignore_eos;
    bool want_logprobs;
    uint32_t n_top;
    float *served;        /* [max_tokens][n_vocab] logits as sampled, when validating */
    uint64_t admit_order; /* larger = admitted more recently */
    bool cancelled;
    bool in_batch;         /* placed in the step being built */
    uint32_t batch_tokens; /* tokens of this sequence in that step */
    int32_t out_row;       /* its logits row in that step, -1 if none */
    uint32_t row0;         /* its first token row in that step */
    /* Speculative decoding: draft[0..n_draft) follow its next token in the
     * step being built; spec_k is the draft length it tries next (0: it
     * waits until n_generated reaches spec_probe_at, then tries 1 token),
     * spec_rate its recent share of drafted tokens kept. */
    int32_t *draft; /* [cfg.spec_max_draft], owned; NULL when speculation is off */
    uint32_t n_draft;
    uint32_t spec_k;
    float spec_rate;
    uint32_t spec_probe_at, spec_backoff;
    /* GS_SPEC_DRAFT: the draft model's K/V of tokens[0..d_computed) (then,
     * within a step, of the drafted tokens fed after them) in its own pool;
     * in the step being built, d_want is the draft length asked of it and
     * d_from (0: none) the position of the first drafted token it was fed. */
    struct gs_kv_seq dkv;
    uint32_t d_computed;
    uint32_t d_want, d_from;
    enum gs_pooling pooling; /* an embedding request unless GS_POOLING_NONE */
    float *embd;             /* [n_embd] pooled rows so far, with pooling; owned */
    enum gs_finish finish;
    enum gs_status err_code;
    char err_msg[GS_ERR_MSG_LEN];
    double t_submit_ms, t_sched_ms, t_first_ms;
    struct gs_sched_req_stats st;
};

struct ev_item {
    struct gs_sched_event ev;
    struct gs_sched_top top[GS_SAMPLE_TOP_LOGPROBS_MAX];
    struct gs_val_report *report; /* VALIDATION: owned by the item */
    float *embd;                  /* FINISH of an embedding: owned by the item */
};

/* A finished request waiting for, or in, its reference evaluation. It runs on
 * a private ref backend and KV pool, so serving state is never touched. */
struct vjob {
    struct vjob *next;
    uint64_t id;
    int32_t *tokens; /* [n_tokens] prompt then generated, owned */
    uint32_t n_tokens, n_prompt;
    float *served;           /* [n_served][n_vocab], owned */
    uint32_t n_served;       /* rows: positions n_prompt-1 .. n_prompt-2+n_served */
    uint32_t n_done;         /* tokens evaluated on ref so far */
    struct gs_kv_pool *pool; /* sized for this job alone */
    struct gs_kv_seq kv;
    struct gs_val_report *report;
    bool cancelled;
};

/* The step trace (trace.c). Engine side except watchers (atomic) and out/dropped (under mu). */
#define GS_SCHED_TRACE_WINDOW 32 /* steps tokens_per_s is measured over */
struct gs_sched_trace_hit {
    uint64_t id;
    uint32_t pages;
};
struct gs_sched_trace_member {
    uint64_t id;
    uint32_t prompt, decode;
};
struct gs_sched_trace_state {
    atomic_uint watchers;
    struct gs_sched_trace_hit *hits; /* [max_seqs] since the last record */
    uint32_t n_hits;
    uint64_t preempted[64]; /* the first ones since the last record */
    uint32_t n_preempted;   /* all of them */
    struct gs_sched_trace_member *batch; /* [max_seqs] the step's members */
    uint32_t n_batch;
    uint64_t n_steps;
    double win_t[GS_SCHED_TRACE_WINDOW];
    uint32_t win_gen[GS_SCHED_TRACE_WINDOW];
    uint32_t win_n;
    char *rec; /* the record being written */
    size_t rec_len, rec_cap;
    bool rec_failed;
    char *out; /* records for the taker, under mu */
    size_t out_len, out_cap;
    uint64_t dropped;
};

struct gs_sched {
    struct gs_sched_cfg cfg;
    const struct gs_model *model;
    uint32_t n_vocab;
    uint32_t n_ctx;
    int32_t *eog;
    uint32_t n_eog;

    /* Engine side: touched only by the engine thread (or the sync caller). */
    struct gs_runner *run;
    struct gs_kv_pool *pool;
    struct gs_kv_view kv;
    struct seq *wait_head, *wait_tail;
    uint32_t n_waiting_engine;
    struct seq **running; /* [max_seqs] */
    uint32_t n_running;
    uint64_t admit_counter;
    /* step buffers, sized once for max_batch_tokens / max_seqs */
    int32_t *step_tokens, *step_pos;
    uint32_t *step_seq, *step_rows;
    struct gs_seq_pages *step_pages;
    struct seq **step_seqs;
    float *logits; /* [max_seqs][n_vocab] */
    uint32_t n_embd;
    float *hidden; /* [max_batch_tokens][n_embd]; NULL when the graph has no HIDDEN root */
    /* validation: a ref runner opened on first use, and its jobs */
    struct gs_runner *ref;
    struct vjob *vjobs_head, *vjobs_tail;
    uint32_t n_vjobs;
    float *ref_logits; /* [validate_chunk_tokens][n_vocab] */
    int32_t *ref_pos;
    uint32_t *ref_seq, *ref_rows;
    struct gs_val_thresholds thresholds;
    uint32_t max_out_rows; /* logits rows per step: max_seqs plus the drafted ones */
    uint32_t max_draft_rows;
    /* GS_SPEC_DRAFT (draft.c): the draft model's runner, its KV pool (as many
     * pages as pool) and its step buffers, sized once for max(max_batch_tokens,
     * max_seqs) tokens and max_seqs logits rows */
    const struct gs_model *draft_model;
    struct gs_runner *draft_run;
    struct gs_kv_pool *draft_pool;
    struct gs_kv_view draft_kv;
    uint32_t draft_max_tokens;
    int32_t *draft_tokens, *draft_pos;
    uint32_t *draft_seq, *draft_rows;
    struct gs_seq_pages *draft_pages;
    struct seq **draft_seqs;
    float *draft_logits; /* [max_seqs][n_vocab] */
    /* this step's speculation, folded into stats by gs_sched__update_stats */
    uint64_t spec_drafted, spec_accepted, spec_verifies, spec_draft_ns;

    /* Shared with the loop thread, under mu. */
    pthread_mutex_t mu;
    pthread_cond_t wake;
    struct seq *inbox_head, *inbox_tail;
    uint32_t n_inbox;
    uint64_t *cancels;
    uint32_t n_cancels, cap_cancels;
    struct ev_item *events;
    size_t n_events, cap_events;
    struct ev_item *borrowed; /* what the last poll handed out */
    size_t cap_borrowed, n_borrowed;
    struct gs_sched_stats stats;
    bool draining, stopping;

    pthread_t thread;
    bool thread_running;

    struct gs_sched_trace_state trace;
};

/* ---- shared between the files ----------------------------------------------------- */

/* seq.c */
void gs_sched__emit_finish(struct gs_sched *s, struct seq *q, bool validation_pending);
uint32_t gs_sched__page_tokens(const struct gs_sched *s);
uint32_t gs_sched__pages_for(const struct gs_sched *s, uint64_t n_tokens);
bool gs_sched__push_event(struct gs_sched *s, const struct gs_sched_event *ev,
                          const struct gs_sample_logprob *top, uint32_t n_top);
bool gs_sched__push_event_report(struct gs_sched *s, const struct gs_sched_event *ev,
                                 const struct gs_sample_logprob *top, uint32_t n_top,
                                 struct gs_val_report *report);
void gs_sched__seq_free(struct gs_sched *s, struct seq *q);
/* Gives q's draft-model K/V back (preemption, the end of the sequence): the
 * draft then catches up from position 0 when q next drafts. */
void gs_sched__draft_release(struct gs_sched *s, struct seq *q);
/* Frees what an event item owns (its report, its embedding). */
void gs_sched__item_free(struct ev_item *it);

bool gs_sched__is_eog(const struct gs_sched *s, int32_t tok);

/* step.c */
void gs_sched__abort_all(struct gs_sched *s, enum gs_finish why);
void gs_sched__update_stats(struct gs_sched *s, uint32_t batch_tokens, uint64_t prompt_tokens,
                            uint64_t gen_tokens);

/* draft.c */
/* Opens the draft model's runner, pool and buffers once the target's pool
 * exists; GS_INVAL when its vocabulary is not the target's. */
enum gs_status gs_sched__draft_open(struct gs_sched *s, struct gs_err *err);
void gs_sched__draft_free(struct gs_sched *s);
/* Drafts for the step's decoding sequences on the draft model, all of them in
 * each draft step, within *budget tokens and *rows logits rows of the target
 * step (both lowered by what was drafted). */
void gs_sched__draft_model(struct gs_sched *s, uint32_t n_seqs, uint32_t *budget, uint32_t *rows);
/* After q's verification: the draft's K/V is cut to the longest prefix whose
 * tokens are q's own. */
void gs_sched__draft_rollback(struct gs_sched *s, struct seq *q);

/* spec.c */
/* The draft length q may try this step, at most limit: its adapted length,
 * what max_tokens and the context leave, and the free pages of the target's
 * pool; 0 when q does not draft. */
uint32_t gs_sched__draft_room(struct gs_sched *s, struct seq *q, uint32_t limit);
/* Cuts q->draft[0..n) where its grammar refuses a token, takes the target's
 * pages for what is left and sets q->n_draft to it; returns n_draft. */
uint32_t gs_sched__draft_commit(struct gs_sched *s, struct seq *q, uint32_t n);
/* The prompt-lookup drafter: drafts up to limit tokens after q's next one
 * into q->draft (n_draft), taking only free pages for them; returns n_draft. */
uint32_t gs_sched__draft(struct gs_sched *s, struct seq *q, uint32_t limit);
/* After the step: n_accepted of q's n_draft tokens were kept. */
void gs_sched__spec_verified(struct gs_sched *s, struct seq *q, uint32_t n_accepted);
/* trace.c: the step trace; the note functions are called only while tracing */
bool gs_sched__tracing(const struct gs_sched *s);
enum gs_status gs_sched__trace_init(struct gs_sched *s);
void gs_sched__trace_free(struct gs_sched *s);
void gs_sched__trace_hit(struct gs_sched *s, uint64_t id, uint32_t pages);
void gs_sched__trace_preempt(struct gs_sched *s, uint64_t id);
void gs_sched__trace_batch(struct gs_sched *s, uint64_t id, uint32_t prompt, uint32_t decode);
/* Writes the step's record; t0_ms: when the step began. */
void gs_sched__trace_step(struct gs_sched *s, double t0_ms, uint32_t batch_tokens,
                          uint64_t gen_tokens);

/* vjobs.c */
bool gs_sched__queue_vjob(struct gs_sched *s, struct seq *q);
void gs_sched__validate_step(struct gs_sched *s);
void gs_sched__vjob_done(struct gs_sched *s, struct gs_val_report *report, const char *why);
/* Frees the reference runner and its step buffers (opened on the first job). */
void gs_sched__ref_free(struct gs_sched *s);

#endif /* GS_SCHEDULER_INTERNAL_H */
