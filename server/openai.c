/*
 * server/openai.c - OpenAI's answers: the chat.completion and text_completion objects,
 * their stream's chunks, usage, llama.cpp's timings and logprobs (both chat's entries and
 * the legacy completions arrays). The renderers are pure functions of the request's
 * state (struct gs_srv_req: the parsed request, each choice's released text, calls and
 * logprobs, the engine's statistics): they change nothing and write nowhere, so that a
 * test renders them without a socket (tests/server/test_openai.c). The shapes
 * (gs_srv__openai_chat_shape, gs_srv__openai_completion_shape) put what they render
 * on the stream (r->out) or into the answer (respond.c), and mark what was sent.
 *
 * Threads: the loop thread only.
 */
#include "server/daemon.h"

#include <math.h>
#include <string.h>

/* ---- usage, timings, finish reasons ------------------------------------------------------ */

const char *gs_srv__openai_finish_reason(const struct gs_srv_choice *c)
{
    /* An answer that ended by itself after making calls ends for them. */
    const char *stop = json_array_size(c->calls) ? "tool_calls" : "stop";
    if (c->stop_hit)
        return stop;
    switch (c->finish) {
    case GS_FINISH_STOP:
    case GS_FINISH_EOS:
        return stop;
    case GS_FINISH_LENGTH:
        return "length";
    case GS_FINISH_ERROR:
        return "error";
    case GS_FINISH_CANCELLED:
    case GS_FINISH_ABORT:
    case GS_FINISH_NONE:
        break;
    }
    return "abort";
}

json_t *gs_srv__openai_usage(const struct gs_srv_req *r)
{
    uint32_t gen = 0;
    for (uint32_t i = 0; i < r->n_choices; i++)
        gen += gs_srv__choice_tokens(&r->choices[i]);
    uint32_t cached = r->n_choices ? r->choices[0].stats.n_prompt_cached : 0;
    json_t *u = json_pack("{s:i,s:i,s:i,s:{s:i}}", "prompt_tokens", (int)r->n_prompt,
                          "completion_tokens", (int)gen, "total_tokens", (int)(r->n_prompt + gen),
                          "prompt_tokens_details", "cached_tokens", (int)cached);
    if (u && r->val.on)
        json_object_set_new(u, "validation", json_string(gs_srv__val_usage(r)));
    return u;
}

/* Per-request timings, as llama.cpp reports them, for choice 0. */
json_t *gs_srv__openai_timings(const struct gs_srv_req *r)
{
    const struct gs_sched_req_stats *st = &r->choices[0].stats;
    uint32_t prompt_n = st->n_prompt - GS_MIN(st->n_prompt, st->n_prompt_cached);
    json_t *t =
        json_pack("{s:f,s:i,s:f,s:f,s:f,s:i,s:f,s:f,s:f}", "queue_ms", st->queue_ms, "prompt_n",
                  (int)prompt_n, "prompt_ms", st->prefill_ms, "prompt_per_token_ms",
                  prompt_n ? st->prefill_ms / prompt_n : 0.0, "prompt_per_second",
                  st->prefill_ms > 0 ? prompt_n * 1000.0 / st->prefill_ms : 0.0, "predicted_n",
                  (int)st->n_generated, "predicted_ms", st->decode_ms, "predicted_per_token_ms",
                  st->n_generated ? st->decode_ms / st->n_generated : 0.0, "predicted_per_second",
                  st->decode_ms > 0 ? st->n_generated * 1000.0 / st->decode_ms : 0.0);
    /* Structured output: the part of predicted_ms spent on masks and matchers. */
    if (t && r->gen.grammar)
        json_object_set_new(t, "grammar_ms", json_real(st->grammar_ms));
    /* Speculative decoding, when it drafted for this request (llama.cpp's
     * draft_n and draft_n_accepted, plus the steps that verified a draft and
     * the drafting time inside predicted_ms). */
    if (t && st->n_drafted > 0) {
        json_object_set_new(t, "draft_n", json_integer(st->n_drafted));
        json_object_set_new(t, "draft_n_accepted", json_integer(st->n_draft_accepted));
        json_object_set_new(t, "draft_verify_steps", json_integer(st->n_verify_steps));
        json_object_set_new(t, "draft_ms", json_real(st->draft_ms));
    }
    return t;
}

/* ---- logprobs ------------------------------------------------------------------------------- */

static json_t *token_json(const struct gs_tok *tok, int32_t id, float lp, bool with_id)
{
    size_t pl = 0;
    const char *p = gs_tok_piece(tok, id, 0, &pl);
    if (!p)
        p = "";
    json_t *j = json_pack("{s:o,s:f,s:o}", "token", gs_srv_json_text(p, pl), "logprob",
                          isfinite(lp) ? (double)lp : -9999.0, "bytes", gs_srv_json_bytes(p, pl));
    if (j && with_id)
        json_object_set_new(j, "id", json_integer(id));
    return j;
}

json_t *gs_srv__openai_logprob(const struct gs_tok *tok, const struct gs_sched_event *ev,
                               uint32_t n_top)
{
    json_t *e = token_json(tok, ev->token, ev->logprob, true);
    json_t *top = json_array();
    /* The engine may send more alternatives than asked, for validation's
     * top_logprobs. */
    n_top = GS_MIN(ev->n_top, n_top);
    for (uint32_t k = 0; k < n_top && top; k++)
        json_array_append_new(top, token_json(tok, ev->top[k].token, ev->top[k].logprob, true));
    json_object_set_new(e, "top_logprobs", top);
    return e;
}

/* The logprobs object for c's pending entries (c->logprobs): chat's {"content": [...]}, or
 * the legacy completions arrays with text offsets from c->text_offset on. */
static json_t *logprobs_json(const struct gs_srv_req *r, const struct gs_srv_choice *c)
{
    if (!r->gen.logprobs)
        return json_null();
    json_t *entries = c->logprobs;
    if (r->gen.chat)
        return json_pack("{s:o}", "content", entries ? json_incref(entries) : json_array());
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    size_t offset = c->text_offset, i;
    json_t *e;
    json_array_foreach(entries, i, e)
    {
        json_array_append(tokens, json_object_get(e, "token"));
        json_array_append(lps, json_object_get(e, "logprob"));
        json_t *m = json_object();
        size_t k;
        json_t *t;
        json_array_foreach(json_object_get(e, "top_logprobs"), k, t) json_object_set(
            m, json_string_value(json_object_get(t, "token")), json_object_get(t, "logprob"));
        json_array_append_new(tops, m);
        json_array_append_new(offs, json_integer((json_int_t)offset));
        offset += json_array_size(json_object_get(e, "bytes"));
    }
    return json_pack("{s:o,s:o,s:o,s:o}", "tokens", tokens, "token_logprobs", lps, "top_logprobs",
                     tops, "text_offset", offs);
}

/* After a chunk carried c's pending text, reasoning and logprobs: they are sent. */
static void consume(const struct gs_srv_req *r, struct gs_srv_choice *c)
{
    c->text.len = 0;
    c->reasoning.len = 0;
    c->first_sent = true;
    if (r->gen.logprobs && !r->gen.chat) {
        size_t i;
        json_t *e;
        json_array_foreach(c->logprobs, i, e)
        {
            c->text_offset += json_array_size(json_object_get(e, "bytes"));
        }
    }
    json_decref(c->logprobs);
    c->logprobs = NULL;
}

/* ---- chunks and the answer ---------------------------------------------------------------- */

json_t *gs_srv__openai_chunk_base(const struct gs_srv_req *r, json_t *choices)
{
    return json_pack("{s:s,s:s,s:I,s:s,s:s,s:o}", "id", r->id, "object",
                     r->gen.chat ? "chat.completion.chunk" : "text_completion", "created",
                     (json_int_t)r->created, "model", r->srv->cfg.model.id, "system_fingerprint",
                     r->val.fingerprint, "choices", choices);
}

json_t *gs_srv__openai_chunk(const struct gs_srv_req *r, const struct gs_srv_choice *c,
                             const char *fin)
{
    json_t *text = gs_srv_json_text(c->text.p ? c->text.p : "", c->text.len);
    json_t *ch;
    if (r->gen.chat) {
        json_t *delta = json_object();
        if (!c->first_sent)
            json_object_set_new(delta, "role", json_string("assistant"));
        if (c->reasoning.len)
            json_object_set_new(delta, "reasoning_content",
                                gs_srv_json_text(c->reasoning.p, c->reasoning.len));
        if ((!fin && !json_object_get(delta, "reasoning_content")) || json_string_length(text))
            json_object_set(delta, "content", text);
        ch = json_pack("{s:i,s:o,s:o,s:o}", "index", (int)c->index, "delta", delta, "logprobs",
                       logprobs_json(r, c), "finish_reason", fin ? json_string(fin) : json_null());
    } else {
        ch = json_pack("{s:i,s:O,s:o,s:o}", "index", (int)c->index, "text", text, "logprobs",
                       logprobs_json(r, c), "finish_reason", fin ? json_string(fin) : json_null());
    }
    json_decref(text);
    json_t *chunk = gs_srv__openai_chunk_base(r, json_pack("[o]", ch));
    if (chunk && fin)
        json_object_set_new(chunk, "graphserve", gs_srv__val_receipt(r));
    return chunk;
}

json_t *gs_srv__openai_answer(const struct gs_srv_req *r)
{
    json_t *choices = json_array();
    for (uint32_t i = 0; i < r->n_choices; i++) {
        const struct gs_srv_choice *c = &r->choices[i];
        json_t *text = gs_srv_json_text(c->text.p ? c->text.p : "", c->text.len);
        json_t *ch;
        /* With calls, content is null unless the model wrote more than whitespace. */
        size_t k = 0;
        while (k < c->text.len && strchr(" \t\r\n", c->text.p[k]))
            k++;
        if (json_array_size(c->calls) && k == c->text.len) {
            json_decref(text);
            text = json_null();
        }
        const char *fin = gs_srv__openai_finish_reason(c);
        if (r->gen.chat)
            ch = json_pack("{s:i,s:{s:s,s:o},s:o,s:s}", "index", (int)i, "message", "role",
                           "assistant", "content", text, "logprobs", logprobs_json(r, c),
                           "finish_reason", fin);
        else
            ch = json_pack("{s:i,s:o,s:o,s:s}", "index", (int)i, "text", text, "logprobs",
                           logprobs_json(r, c), "finish_reason", fin);
        if (ch && r->gen.chat && json_array_size(c->calls))
            json_object_set(json_object_get(ch, "message"), "tool_calls", c->calls);
        if (ch && r->gen.chat && c->reasoning.len)
            json_object_set_new(json_object_get(ch, "message"), "reasoning_content",
                                gs_srv_json_text(c->reasoning.p, c->reasoning.len));
        json_array_append_new(choices, ch);
    }
    json_t *body = json_pack("{s:s,s:s,s:I,s:s,s:s,s:o,s:o,s:o}", "id", r->id, "object",
                             r->gen.chat ? "chat.completion" : "text_completion", "created",
                             (json_int_t)r->created, "model", r->srv->cfg.model.id,
                             "system_fingerprint", r->val.fingerprint, "choices", choices, "usage",
                             gs_srv__openai_usage(r), "timings", gs_srv__openai_timings(r));
    if (body) {
        json_object_set_new(body, "graphserve", gs_srv__val_receipt(r));
        gs_srv__val_attach(r, body);
    }
    return body;
}

/* ---- the shapes: rendered chunks onto the stream ----------------------------------------- */

static void put_chunk(struct gs_srv_req *r, json_t *chunk)
{
    gs_srv_sse_json(&r->out, chunk);
    json_decref(chunk);
}

/* Appends one chunk of choice c with delta (a new reference taken), no logprobs. */
static void emit_delta(struct gs_srv_req *r, struct gs_srv_choice *c, json_t *delta)
{
    json_t *ch = json_pack("{s:i,s:o,s:n,s:n}", "index", (int)c->index, "delta", delta, "logprobs",
                           "finish_reason");
    put_chunk(r, gs_srv__openai_chunk_base(r, json_pack("[o]", ch)));
}

/* The tool_calls deltas of c not yet streamed, one chunk each (generate.c's read_calls
 * queues them). */
static void emit_calls(struct gs_srv_req *r, struct gs_srv_choice *c)
{
    size_t i;
    json_t *d;
    json_array_foreach(c->call_deltas, i, d)
    {
        emit_delta(r, c, json_pack("{s:[O]}", "tool_calls", d));
    }
    json_array_clear(c->call_deltas);
}

/* One chunk with c's pending text, reasoning and logprobs, which are then sent. */
static void emit_chunk_text(struct gs_srv_req *r, struct gs_srv_choice *c, const char *fin)
{
    json_t *chunk = gs_srv__openai_chunk(r, c, fin);
    consume(r, c);
    put_chunk(r, chunk);
}

/* Appends choice c's pending text (and logprobs), then its new calls, with
 * finish_reason when fin is set. */
static void emit_chunk(struct gs_srv_req *r, struct gs_srv_choice *c, const char *fin)
{
    if (!r->gen.chat || !json_array_size(c->call_deltas)) {
        emit_chunk_text(r, c, fin);
        return;
    }
    if (c->text.len || c->reasoning.len || !c->first_sent || c->logprobs)
        emit_chunk_text(r, c, NULL);
    emit_calls(r, c);
    if (fin)
        emit_chunk_text(r, c, fin);
}

static void openai_open(struct gs_srv_req *r)
{
    if (r->gen.chat)
        for (uint32_t i = 0; i < r->n_choices; i++)
            emit_chunk(r, &r->choices[i], NULL);
}

static void openai_text(struct gs_srv_req *r, struct gs_srv_choice *c, bool fin)
{
    emit_chunk(r, c, fin ? gs_srv__openai_finish_reason(c) : NULL);
}

/* Every choice ended, a validation report awaited: the usage chunk, when asked, says
 * "pending" before the report's. */
static void openai_pending(struct gs_srv_req *r)
{
    if (!r->gen.include_usage)
        return;
    json_t *chunk = gs_srv__openai_chunk_base(r, json_array());
    json_object_set_new(chunk, "usage", gs_srv__openai_usage(r));
    put_chunk(r, chunk);
}

/* After the last choice: the error chunk if one failed, the usage chunk
 * when asked, and [DONE]. */
static void openai_end(struct gs_srv_req *r)
{
    for (uint32_t i = 0; i < r->n_choices; i++) {
        struct gs_srv_choice *c = &r->choices[i];
        if (c->finish == GS_FINISH_ERROR && !c->stop_hit) {
            json_t *e = gs_srv_err_json(gs_srv_err_from_status(c->err_code), c->err_msg, NULL);
            put_chunk(r, e);
            break;
        }
    }
    /* The validation report rides on the last chunk before [DONE]: the
     * usage chunk when asked, else one of its own. */
    if (r->val.on && !r->gen.include_usage) {
        json_t *chunk = gs_srv__openai_chunk_base(r, json_array());
        gs_srv__val_attach(r, chunk);
        put_chunk(r, chunk);
    }
    if (r->gen.include_usage) {
        json_t *chunk = gs_srv__openai_chunk_base(r, json_array());
        gs_srv__val_attach(r, chunk);
        json_object_set_new(chunk, "usage", gs_srv__openai_usage(r));
        json_object_set_new(chunk, "timings", gs_srv__openai_timings(r));
        put_chunk(r, chunk);
    }
    gs_srv_sse_done(&r->out);
}

static void openai_fail(struct gs_srv_req *r, enum gs_srv_ekind kind, const char *msg)
{
    put_chunk(r, gs_srv_err_json(kind, msg, NULL));
    gs_srv_sse_done(&r->out);
}

static enum MHD_Result openai_respond(struct gs_srv_req *r)
{
    return gs_srv__respond_json(r, 200, gs_srv__openai_answer(r));
}

const struct gs_srv_shape gs_srv__openai_chat_shape = {
    "chatcmpl-", openai_open, openai_text, openai_end, openai_fail, openai_respond, openai_pending,
};
const struct gs_srv_shape gs_srv__openai_completion_shape = {
    "cmpl-", openai_open, openai_text, openai_end, openai_fail, openai_respond, openai_pending,
};
