/*
 * tests/fuzz/fuzz_jinja.c - engine/jinja on any template source and any
 * conversation: parse, then render twice.
 *
 * Input: the template source, optionally followed by a NUL and a JSON object
 * used as the context:
 *     <template> [ \0 <context JSON> ]
 * Without a NUL (or with a context that is not a JSON object) a fixed
 * conversation is used: system, user, assistant with a tool call, tool, with
 * tools and add_generation_prompt.
 *
 * Invariants: parsing succeeds or fails with GS_FORMAT or GS_BUSY and a
 * message; rendering succeeds within max_output_bytes or fails with the
 * status that its failure kind promises (error: GS_FORMAT, raised: GS_INVAL,
 * limit: GS_BUSY); rendering is a pure function: a second render (with
 * provenance) gives the same status and the same bytes; and the provenance
 * spans are ascending, disjoint, non-empty and inside the text. The limits are smaller than the
 * defaults so that every input runs in milliseconds.
 */
#include "engine/jinja.h"
#include "tests/fuzz/fuzz.h"

#include <string.h>

static const char default_context[] =
    "{\"messages\": ["
    "{\"role\": \"system\", \"content\": \"Be brief.\"},"
    "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Weather in Paris?\"}]},"
    "{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"call00001\", "
    "\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": "
    "{\"city\": \"Paris\"}}}]},"
    "{\"role\": \"tool\", \"tool_call_id\": \"call00001\", \"content\": \"18 C\"},"
    "{\"role\": \"user\", \"content\": \"Thanks \\u00e9\\ud83d\\ude00\"}],"
    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
    "\"description\": \"Current weather\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}],"
    "\"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

static enum gs_status expected_status(enum gs_jinja_fail fail)
{
    switch (fail) {
    case GS_JINJA_FAIL_NONE:
        return GS_OK;
    case GS_JINJA_FAIL_RAISED:
        return GS_INVAL;
    case GS_JINJA_FAIL_ERROR:
        return GS_FORMAT;
    case GS_JINJA_FAIL_LIMIT:
        return GS_BUSY;
    case GS_JINJA_FAIL_NOMEM:
        return GS_NOMEM;
    }
    return GS_STATUS_COUNT;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *src = (const char *)data;
    const uint8_t *nul = memchr(data, '\0', size);
    size_t src_len = nul ? (size_t)(nul - data) : size;
    json_t *ctx = NULL;
    if (nul)
        ctx = json_loadb((const char *)nul + 1, size - src_len - 1, 0, NULL);
    if (!json_is_object(ctx)) {
        json_decref(ctx);
        ctx = json_loads(default_context, 0, NULL);
        FUZZ_CHECK(ctx, "the default context does not parse");
    }

    struct gs_jinja_limits lim = {
        .max_loop_iterations = 20000,
        .max_output_bytes = 256 * 1024,
        .max_memory_bytes = 32u << 20,
        .max_call_depth = 16,
    };
    struct gs_jinja_tmpl *t = NULL;
    struct gs_err err = {0};
    enum gs_status st = gs_jinja_parse(src, src_len, &lim, &t, &err);
    FUZZ_CHECK(st == GS_OK || st == GS_FORMAT || st == GS_BUSY, "parse status %d: %s", st, err.msg);
    FUZZ_CHECK((st == GS_OK) == (t != NULL), "status %d with template %p", st, (void *)t);
    FUZZ_CHECK(st == GS_OK || strncmp(err.msg, "jinja: ", 7) == 0, "parse message '%s'", err.msg);
    if (st == GS_OK) {
        char *out[2] = {NULL, NULL};
        size_t n[2] = {0, 0};
        enum gs_status rs[2];
        struct gs_jinja_span *sp = NULL;
        size_t n_sp = 0;
        for (int i = 0; i < 2; i++) {
            enum gs_jinja_fail fail = GS_JINJA_FAIL_NONE;
            rs[i] = i == 0 ? gs_jinja_render(t, ctx, 1768435200, &out[i], &n[i], &fail, &err)
                           : gs_jinja_render_spans(t, ctx, NULL, 1768435200, &out[i], &n[i], &sp,
                                                   &n_sp, &fail, &err);
            FUZZ_CHECK(rs[i] == expected_status(fail), "render status %d for kind %d: %s", rs[i],
                       (int)fail, err.msg);
            FUZZ_CHECK(rs[i] != GS_NOMEM, "out of memory under the memory limit: %s", err.msg);
            FUZZ_CHECK((rs[i] == GS_OK) == (out[i] != NULL), "status %d with text %p", rs[i],
                       (void *)out[i]);
            FUZZ_CHECK(rs[i] != GS_OK || (n[i] <= lim.max_output_bytes && out[i][n[i]] == '\0'),
                       "%zu bytes rendered, limit %zu", n[i], lim.max_output_bytes);
        }
        for (size_t i = 0; i < n_sp; i++)
            FUZZ_CHECK(sp[i].len > 0 && sp[i].off + sp[i].len <= n[1] &&
                           (i == 0 || sp[i].off > sp[i - 1].off + sp[i - 1].len),
                       "span %zu [%zu, +%zu) of %zu bytes", i, sp[i].off, sp[i].len, n[1]);
        gs_free(sp);
        FUZZ_CHECK(rs[0] == rs[1], "two renders: status %d then %d", rs[0], rs[1]);
        FUZZ_CHECK(rs[0] != GS_OK || (n[0] == n[1] && memcmp(out[0], out[1], n[0]) == 0),
                   "two renders differ");
        gs_free(out[0]);
        gs_free(out[1]);
    }
    gs_jinja_free(t);
    json_decref(ctx);
    return 0;
}
