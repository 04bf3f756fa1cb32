/*
 * server/responses_store.c - the responses kept for previous_response_id and for
 * GET and DELETE /v1/responses/{id}: a bounded, in-memory list, one entry per response
 * created with "store": true. Each entry is the response object as it was answered, and
 * the conversation as chat messages (the request's input after its own previous
 * response, then the answer as an assistant message), which is what a later request's
 * input is appended to. The instructions are not kept in the conversation: as OpenAI's,
 * they apply to one request.
 *
 * Limits (gs_srv_limits.responses_store_*: --responses-store-max, -bytes, -max-age-s): a
 * count, a total of bytes (the conversations' and response objects' compact JSON) and an age; the oldest entries go
 * first. An entry older than the age limit is as unknown as one never stored: 404. Nothing is
 * written to disk and a restart forgets everything.
 *
 * Threads: the loop thread only.
 */
#include "server/daemon.h"

#include "config/log.h"

#include <stdlib.h>
#include <string.h>

struct gs_srv_resp_entry {
    struct gs_srv_resp_entry *next; /* newer */
    char id[64];
    json_t *conv; /* chat messages; owned */
    json_t *resp; /* the response object; owned */
    size_t bytes; /* conv's and resp's compact JSON */
    double t_ms;  /* when it was kept */
};

struct gs_srv_resp_store {
    struct gs_srv_resp_entry *oldest, *newest;
    size_t n, bytes;
};

/* Unlinks e, whose predecessor (older) is prev or NULL, and frees it. */
static void drop(struct gs_srv_resp_store *st, struct gs_srv_resp_entry *prev,
                 struct gs_srv_resp_entry *e)
{
    if (prev)
        prev->next = e->next;
    else
        st->oldest = e->next;
    if (st->newest == e)
        st->newest = prev;
    st->n--;
    st->bytes -= e->bytes;
    json_decref(e->conv);
    json_decref(e->resp);
    gs_free(e);
}

static void drop_oldest(struct gs_srv_resp_store *st)
{
    drop(st, NULL, st->oldest);
}

static void expire(const struct gs_srv *s, struct gs_srv_resp_store *st, double now_ms)
{
    double max_ms = s->cfg.limits.responses_store_max_age_s * 1000.0;
    while (st->oldest && now_ms - st->oldest->t_ms > max_ms)
        drop_oldest(st);
}

/* The live entry for id (and its predecessor in *prev), or NULL. */
static struct gs_srv_resp_entry *find(struct gs_srv *s, const char *id,
                                      struct gs_srv_resp_entry **prev)
{
    struct gs_srv_resp_store *st = s->resp_store;
    *prev = NULL;
    if (!st || !id)
        return NULL;
    expire(s, st, gs_now_ms());
    for (struct gs_srv_resp_entry *e = st->oldest; e; *prev = e, e = e->next)
        if (!strcmp(e->id, id))
            return e;
    return NULL;
}

const json_t *gs_srv__responses_find(struct gs_srv *s, const char *id)
{
    struct gs_srv_resp_entry *prev, *e = find(s, id, &prev);
    return e ? e->conv : NULL;
}

static enum MHD_Result not_found(struct gs_srv_req *r, const char *id)
{
    return gs_srv__respond_error(r, GS_SRV_E_NOT_FOUND, "response_id",
                                 "no response '%.64s' is stored here (created with \"store\": "
                                 "true, and not yet expired, evicted or deleted)",
                                 id);
}

enum MHD_Result gs_srv__responses_retrieve(struct gs_srv_req *r)
{
    const char *id = r->url + strlen("/v1/responses/");
    struct gs_srv_resp_entry *prev, *e = find(r->srv, id, &prev);
    if (!e)
        return not_found(r, id);
    return gs_srv__respond_json(r, 200, json_deep_copy(e->resp));
}

enum MHD_Result gs_srv__responses_delete(struct gs_srv_req *r)
{
    const char *id = r->url + strlen("/v1/responses/");
    struct gs_srv_resp_entry *prev, *e = find(r->srv, id, &prev);
    if (!e)
        return not_found(r, id);
    json_t *body = json_pack("{s:s,s:s,s:b}", "id", e->id, "object", "response", "deleted", 1);
    drop(r->srv->resp_store, prev, e);
    return gs_srv__respond_json(r, 200, body);
}

/* The answer's output items as one chat assistant message (text, then tool calls). */
static json_t *assistant_message(const json_t *output)
{
    struct gs_srv_buf text = {0};
    json_t *calls = json_array();
    size_t i;
    json_t *it;
    json_array_foreach(output, i, it)
    {
        const char *type = json_string_value(json_object_get(it, "type"));
        if (type && !strcmp(type, "message")) {
            json_t *part = json_array_get(json_object_get(it, "content"), 0);
            json_t *t = json_object_get(part, "text");
            gs_srv_buf_add(&text, json_string_value(t), json_string_length(t));
        } else if (type && !strcmp(type, "function_call")) {
            json_array_append_new(calls,
                                  json_pack("{s:O,s:s,s:{s:O,s:O}}", "id",
                                            json_object_get(it, "call_id"), "type", "function",
                                            "function", "name", json_object_get(it, "name"),
                                            "arguments", json_object_get(it, "arguments")));
        }
    }
    json_t *m = text.failed ? NULL
                            : json_pack("{s:s,s:o}", "role", "assistant", "content",
                                        json_stringn(text.p ? text.p : "", text.len));
    if (m && json_array_size(calls))
        json_object_set(m, "tool_calls", calls);
    json_decref(calls);
    gs_srv_buf_free(&text);
    return m;
}

void gs_srv__responses_keep(struct gs_srv_req *r, const json_t *resp)
{
    struct gs_srv *s = r->srv;
    if (!r->gen.store || !resp || !r->gen.resp_conv)
        return;
    if (!s->resp_store && !(s->resp_store = gs_calloc(1, sizeof(*s->resp_store))))
        return;
    struct gs_srv_resp_store *st = s->resp_store;
    json_t *conv = json_copy(r->gen.resp_conv), *kept = json_deep_copy(resp);
    json_t *m = assistant_message(json_object_get(resp, "output"));
    if (!conv || !kept || !m || json_array_append_new(conv, m)) {
        json_decref(conv);
        json_decref(kept);
        return;
    }
    char *dump = json_dumps(conv, JSON_COMPACT), *dump_resp = json_dumps(kept, JSON_COMPACT);
    size_t bytes = dump && dump_resp ? strlen(dump) + strlen(dump_resp) : 0;
    free(dump); /* jansson's allocator */
    free(dump_resp);
    struct gs_srv_resp_entry *e = bytes ? gs_calloc(1, sizeof(*e)) : NULL;
    if (!e || bytes > s->cfg.limits.responses_store_bytes) {
        gs_log(GS_LOG_WARN, "response_not_stored", "id=%s bytes=%zu", r->id, bytes);
        gs_free(e);
        json_decref(conv);
        json_decref(kept);
        return;
    }
    snprintf(e->id, sizeof(e->id), "%s", r->id);
    e->conv = conv;
    e->resp = kept;
    e->bytes = bytes;
    e->t_ms = gs_now_ms();
    expire(s, st, e->t_ms);
    while (st->oldest && (st->n + 1 > s->cfg.limits.responses_store_max ||
                          st->bytes + bytes > s->cfg.limits.responses_store_bytes))
        drop_oldest(st);
    if (st->newest)
        st->newest->next = e;
    else
        st->oldest = e;
    st->newest = e;
    st->n++;
    st->bytes += bytes;
}

void gs_srv__responses_store_free(struct gs_srv *s)
{
    struct gs_srv_resp_store *st = s->resp_store;
    while (st && st->oldest)
        drop_oldest(st);
    gs_free(st);
    s->resp_store = NULL;
}
