/*
 * tests/server/test_openai.c - OpenAI's answers rendered from a request's state
 * (server/openai.c) without a socket: a server and a request are built in memory as
 * generate.c leaves them, and the renderers' JSON is read back field by field. The
 * daemon suites (http_api, openai_sdk, ...) check the same objects over HTTP; these
 * reach the cases a real model makes hard to arrange (every finish reason, calls with
 * and without text, the legacy logprobs' offsets) and check that rendering changes
 * nothing.
 */
#include "server/daemon.h"

#include <criterion/criterion.h>
#include <string.h>

/* A server and a request with n choices whose text has been released, as generate.c
 * leaves them once every choice has ended. */
struct rig {
    struct gs_srv srv;
    struct gs_srv_req req;
    struct gs_srv_choice ch[2];
};

static void rig_init(struct rig *t, bool chat, uint32_t n)
{
    memset(t, 0, sizeof(*t));
    t->srv.cfg.model.id = "tiny-model";
    t->srv.cfg.model.backend = "cpu";
    t->srv.cfg.model.sha256 = "00ff";
    t->req.srv = &t->srv;
    snprintf(t->req.id, sizeof(t->req.id), "%s", chat ? "chatcmpl-abc" : "cmpl-abc");
    t->req.created = 1700000000;
    t->req.gen.chat = chat;
    t->req.n_prompt = 7;
    t->req.seed = 42;
    snprintf(t->req.val.fingerprint, sizeof(t->req.val.fingerprint), "gs-0123456789ab");
    t->req.choices = t->ch;
    t->req.n_choices = n;
    t->req.n_done = n;
    for (uint32_t i = 0; i < n; i++) {
        t->ch[i].index = i;
        t->ch[i].done = true;
        t->ch[i].finish = GS_FINISH_EOS;
        t->ch[i].stats.n_prompt = 7;
        t->ch[i].stats.n_generated = 3 + i;
    }
}

static void rig_free(struct rig *t)
{
    for (uint32_t i = 0; i < GS_ARRAY_LEN(t->ch); i++) {
        gs_srv_buf_free(&t->ch[i].text);
        gs_srv_buf_free(&t->ch[i].reasoning);
        json_decref(t->ch[i].logprobs);
        json_decref(t->ch[i].calls);
    }
}

static const char *str_at(json_t *o, const char *path)
{
    /* "a.b.0.c": objects by key, arrays by index. */
    char buf[128];
    snprintf(buf, sizeof(buf), "%s", path);
    json_t *j = o;
    for (char *k = strtok(buf, "."); k && j; k = strtok(NULL, "."))
        j = json_is_array(j) ? json_array_get(j, (size_t)atoi(k)) : json_object_get(j, k);
    return json_string_value(j);
}

static json_int_t int_at(json_t *o, const char *a, const char *b)
{
    return json_integer_value(json_object_get(json_object_get(o, a), b));
}

Test(srv_openai, chat_answer_has_the_message_usage_and_receipt)
{
    struct rig t;
    rig_init(&t, true, 2);
    gs_srv_buf_adds(&t.ch[0].text, "Hello there");
    gs_srv_buf_adds(&t.ch[1].text, "Bye");
    t.ch[1].finish = GS_FINISH_LENGTH;
    json_t *a = gs_srv__openai_answer(&t.req);
    cr_assert(a);
    cr_expect_str_eq(str_at(a, "object"), "chat.completion");
    cr_expect_str_eq(str_at(a, "id"), "chatcmpl-abc");
    cr_expect_str_eq(str_at(a, "model"), "tiny-model");
    cr_expect_str_eq(str_at(a, "system_fingerprint"), "gs-0123456789ab");
    cr_expect_eq(json_integer_value(json_object_get(a, "created")), 1700000000);
    cr_expect_str_eq(str_at(a, "choices.0.message.role"), "assistant");
    cr_expect_str_eq(str_at(a, "choices.0.message.content"), "Hello there");
    cr_expect_str_eq(str_at(a, "choices.0.finish_reason"), "stop");
    cr_expect_str_eq(str_at(a, "choices.1.message.content"), "Bye");
    cr_expect_str_eq(str_at(a, "choices.1.finish_reason"), "length");
    cr_expect(json_is_null(
        json_object_get(json_array_get(json_object_get(a, "choices"), 0), "logprobs")));
    /* completion_tokens counts both choices (3 + 4), total adds the prompt's 7. */
    cr_expect_eq(int_at(a, "usage", "prompt_tokens"), 7);
    cr_expect_eq(int_at(a, "usage", "completion_tokens"), 7);
    cr_expect_eq(int_at(a, "usage", "total_tokens"), 14);
    cr_expect_eq(int_at(a, "timings", "predicted_n"), 3);
    cr_expect_str_eq(str_at(a, "graphserve.model_sha256"), "00ff");
    cr_expect_str_eq(str_at(a, "graphserve.backend"), "cpu");
    cr_expect_eq(int_at(a, "graphserve", "seed"), 42);
    cr_expect_null(json_object_get(a, "validation"), "not validated: no report");
    json_decref(a);
    rig_free(&t);
}

Test(srv_openai, finish_reasons_follow_how_each_choice_ended)
{
    static const struct {
        enum gs_finish finish;
        bool stop_hit, calls;
        const char *want;
    } rows[] = {
        {GS_FINISH_EOS, false, false, "stop"},     {GS_FINISH_STOP, false, false, "stop"},
        {GS_FINISH_LENGTH, true, false, "stop"},   {GS_FINISH_LENGTH, false, false, "length"},
        {GS_FINISH_ERROR, false, false, "error"},  {GS_FINISH_CANCELLED, false, false, "abort"},
        {GS_FINISH_ABORT, false, false, "abort"},  {GS_FINISH_EOS, false, true, "tool_calls"},
        {GS_FINISH_LENGTH, false, true, "length"},
    };
    for (size_t i = 0; i < GS_ARRAY_LEN(rows); i++) {
        struct gs_srv_choice c = {.finish = rows[i].finish, .stop_hit = rows[i].stop_hit};
        c.calls = json_array();
        if (rows[i].calls)
            json_array_append_new(c.calls, json_object());
        cr_expect_str_eq(gs_srv__openai_finish_reason(&c), rows[i].want, "row %zu", i);
        json_decref(c.calls);
    }
}

Test(srv_openai, tool_calls_leave_content_null_unless_the_model_wrote_text)
{
    struct rig t;
    rig_init(&t, true, 2);
    for (int i = 0; i < 2; i++) {
        t.ch[i].calls = json_pack("[{s:s,s:s,s:{s:s,s:s}}]", "id", "call_1", "type", "function",
                                  "function", "name", "get_weather", "arguments", "{\"c\":1}");
    }
    gs_srv_buf_adds(&t.ch[0].text, " \n\t");
    gs_srv_buf_adds(&t.ch[1].text, "Let me check.");
    json_t *a = gs_srv__openai_answer(&t.req);
    cr_assert(a);
    json_t *m0 = json_object_get(json_array_get(json_object_get(a, "choices"), 0), "message");
    cr_expect(json_is_null(json_object_get(m0, "content")), "only whitespace: null");
    cr_expect_str_eq(str_at(a, "choices.0.message.tool_calls.0.function.name"), "get_weather");
    cr_expect_str_eq(str_at(a, "choices.0.finish_reason"), "tool_calls");
    cr_expect_str_eq(str_at(a, "choices.1.message.content"), "Let me check.");
    cr_expect_str_eq(str_at(a, "choices.1.message.tool_calls.0.id"), "call_1");
    json_decref(a);
    rig_free(&t);
}

/* Two tokens' entries as generate.c keeps them (gs_srv__openai_logprob's shape). */
static json_t *two_entries(void)
{
    return json_pack("[{s:s,s:f,s:[i,i],s:i,s:[{s:s,s:f}]},{s:s,s:f,s:[i,i,i],s:i,s:[]}]", "token",
                     "He", "logprob", -0.5, "bytes", 72, 101, "id", 10, "top_logprobs", "token",
                     "He", "logprob", -0.5, "token", "llo", "logprob", -1.0, "bytes", 108, 108, 111,
                     "id", 11, "top_logprobs");
}

Test(srv_openai, completion_logprobs_are_the_legacy_arrays_with_offsets)
{
    struct rig t;
    rig_init(&t, false, 1);
    t.req.gen.logprobs = true;
    gs_srv_buf_adds(&t.ch[0].text, "Hello");
    t.ch[0].logprobs = two_entries();
    t.ch[0].text_offset = 4; /* bytes already reported before these entries */
    json_t *a = gs_srv__openai_answer(&t.req);
    cr_assert(a);
    cr_expect_str_eq(str_at(a, "object"), "text_completion");
    cr_expect_str_eq(str_at(a, "choices.0.text"), "Hello");
    json_t *lp = json_object_get(json_array_get(json_object_get(a, "choices"), 0), "logprobs");
    cr_expect_str_eq(str_at(lp, "tokens.1"), "llo");
    cr_expect_eq(json_integer_value(json_array_get(json_object_get(lp, "text_offset"), 0)), 4);
    cr_expect_eq(json_integer_value(json_array_get(json_object_get(lp, "text_offset"), 1)), 6);
    cr_expect_eq(json_real_value(
                     json_object_get(json_array_get(json_object_get(lp, "top_logprobs"), 0), "He")),
                 -0.5);
    json_decref(a);
    /* Rendering took nothing: the entries and the offset are as they were. */
    cr_expect_eq(json_array_size(t.ch[0].logprobs), 2);
    cr_expect_eq(t.ch[0].text_offset, 4);
    rig_free(&t);
}

Test(srv_openai, chat_logprobs_are_content_entries)
{
    struct rig t;
    rig_init(&t, true, 1);
    t.req.gen.logprobs = true;
    t.ch[0].logprobs = two_entries();
    json_t *a = gs_srv__openai_answer(&t.req);
    cr_assert(a);
    cr_expect_str_eq(str_at(a, "choices.0.logprobs.content.0.token"), "He");
    cr_expect_str_eq(str_at(a, "choices.0.logprobs.content.1.token"), "llo");
    json_decref(a);
    rig_free(&t);
}

Test(srv_openai, stream_chunks_carry_the_role_first_and_the_receipt_last)
{
    struct rig t;
    rig_init(&t, true, 1);
    t.ch[0].done = false;
    gs_srv_buf_adds(&t.ch[0].text, "Hi");
    json_t *first = gs_srv__openai_chunk(&t.req, &t.ch[0], NULL);
    cr_assert(first);
    cr_expect_str_eq(str_at(first, "object"), "chat.completion.chunk");
    cr_expect_str_eq(str_at(first, "choices.0.delta.role"), "assistant");
    cr_expect_str_eq(str_at(first, "choices.0.delta.content"), "Hi");
    cr_expect(json_is_null(
        json_object_get(json_array_get(json_object_get(first, "choices"), 0), "finish_reason")));
    cr_expect_null(json_object_get(first, "graphserve"));
    /* Pure: the same state renders the same chunk, and nothing was marked sent. */
    json_t *again = gs_srv__openai_chunk(&t.req, &t.ch[0], NULL);
    cr_expect(json_equal(first, again));
    cr_expect_eq(t.ch[0].text.len, 2);
    cr_expect_not(t.ch[0].first_sent);
    json_decref(first);
    json_decref(again);
    /* The last chunk of a choice sent before: no role, no empty content, the reason and
     * the receipt. */
    t.ch[0].first_sent = true;
    t.ch[0].text.len = 0;
    json_t *last = gs_srv__openai_chunk(&t.req, &t.ch[0], "stop");
    cr_assert(last);
    json_t *delta = json_object_get(json_array_get(json_object_get(last, "choices"), 0), "delta");
    cr_expect_eq(json_object_size(delta), 0);
    cr_expect_str_eq(str_at(last, "choices.0.finish_reason"), "stop");
    cr_expect_str_eq(str_at(last, "graphserve.backend"), "cpu");
    json_decref(last);
    rig_free(&t);
}

Test(srv_openai, stream_chunks_carry_reasoning_apart_from_content)
{
    struct rig t;
    rig_init(&t, true, 1);
    t.ch[0].first_sent = true;
    gs_srv_buf_adds(&t.ch[0].reasoning, "thinking");
    json_t *c = gs_srv__openai_chunk(&t.req, &t.ch[0], NULL);
    cr_assert(c);
    cr_expect_str_eq(str_at(c, "choices.0.delta.reasoning_content"), "thinking");
    json_t *delta = json_object_get(json_array_get(json_object_get(c, "choices"), 0), "delta");
    cr_expect_null(json_object_get(delta, "content"), "no empty content beside reasoning");
    json_decref(c);
    rig_free(&t);
}

Test(srv_openai, the_shapes_write_chunks_to_the_stream_and_mark_them_sent)
{
    struct rig t;
    rig_init(&t, false, 1);
    t.req.gen.logprobs = true;
    t.ch[0].done = false;
    gs_srv_buf_adds(&t.ch[0].text, "Hello");
    t.ch[0].logprobs = two_entries();
    gs_srv__openai_completion_shape.stream_text(&t.req, &t.ch[0], false);
    cr_assert(t.req.out.p);
    cr_expect(!strncmp(t.req.out.p, "data: {", 7), "%s", t.req.out.p);
    cr_expect(strstr(t.req.out.p, "\"text\":\"Hello\""), "%s", t.req.out.p);
    cr_expect_eq(t.ch[0].text.len, 0);
    cr_expect_null(t.ch[0].logprobs);
    cr_expect_eq(t.ch[0].text_offset, 5, "the next entries' offsets start after these");
    t.ch[0].done = true;
    t.req.out.len = 0;
    gs_srv__openai_completion_shape.stream_end(&t.req);
    cr_expect(t.req.out.p && strstr(t.req.out.p, "data: [DONE]\n\n"));
    gs_srv_buf_free(&t.req.out);
    rig_free(&t);
}
