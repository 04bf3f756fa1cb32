/*
 * tests/engine/test_jinja_golden.c - engine/jinja against the reference
 * renderings in ../shared/golden/templates: every case of every template
 * renders byte-identical to Jinja2 with Hugging Face's settings, or fails
 * where the reference raised (with the template's own message when it was
 * raise_exception). The context is built as the README there describes:
 * messages, add_generation_prompt, bos_token, eos_token, tools only when the
 * case has them, the case's extra_kwargs, and strftime_now at 2026-01-15
 * 00:00:00.
 */
#define _GNU_SOURCE /* memmem */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/jinja.h"
#include "tests/common/testutil.h"

/* 2026-01-15 00:00:00 UTC, the reference's fixed strftime_now. */
#define GOLDEN_NOW_UNIX_S 1768435200

static json_t *case_context(const json_t *file, const json_t *c)
{
    json_t *ctx = json_object();
    json_object_set(ctx, "messages", json_object_get(c, "messages"));
    json_object_set(ctx, "add_generation_prompt", json_object_get(c, "add_generation_prompt"));
    json_object_set(ctx, "bos_token", json_object_get(file, "bos_token"));
    json_object_set(ctx, "eos_token", json_object_get(file, "eos_token"));
    if (json_object_get(c, "tools"))
        json_object_set(ctx, "tools", json_object_get(c, "tools"));
    json_t *extra = json_object_get(c, "extra_kwargs");
    if (extra)
        json_object_update(ctx, extra);
    return ctx;
}

/* Where two texts first differ, for the failure message. */
static size_t first_difference(const char *a, size_t na, const char *b, size_t nb)
{
    size_t i = 0;
    while (i < na && i < nb && a[i] == b[i])
        i++;
    return i;
}

struct tally {
    int cases, passed, files;
};

/* Whether some occurrence of needle in text lies wholly inside one span. */
static bool inside_a_span(const char *text, size_t n, const char *needle, size_t nn,
                          const struct gs_jinja_span *sp, size_t n_sp)
{
    for (const char *p = text; (p = memmem(p, n - (size_t)(p - text), needle, nn)); p++) {
        size_t off = (size_t)(p - text);
        for (size_t i = 0; i < n_sp; i++)
            if (sp[i].off <= off && off + nn <= sp[i].off + sp[i].len)
                return true;
    }
    return false;
}

/* The provenance of a rendered case: with bos_token and eos_token trusted and
 * the rest as the client's, the text is the same, the spans are ordered and
 * inside it, and every message content that appears verbatim appears inside
 * a span (the renderer knows it came from the client). */
static bool check_spans(const char *file_name, const char *name, const struct gs_jinja_tmpl *t,
                        const json_t *file, const json_t *c, const char *want, size_t wn)
{
    json_t *ctx = case_context(file, c);
    json_t *trusted = json_object();
    json_object_set(trusted, "bos_token", json_object_get(file, "bos_token"));
    json_object_set(trusted, "eos_token", json_object_get(file, "eos_token"));
    json_object_del(ctx, "bos_token");
    json_object_del(ctx, "eos_token");
    char *out = NULL;
    size_t n = 0, n_sp = 0;
    struct gs_jinja_span *sp = NULL;
    struct gs_err err = {0};
    bool ok = gs_jinja_render_spans(t, ctx, trusted, GOLDEN_NOW_UNIX_S, &out, &n, &sp, &n_sp, NULL,
                                    &err) == GS_OK &&
              n == wn && memcmp(out, want, n) == 0;
    for (size_t i = 0; ok && i < n_sp; i++)
        ok = sp[i].len > 0 && (i == 0 || sp[i].off > sp[i - 1].off + sp[i - 1].len - 1) &&
             sp[i].off + sp[i].len <= n;
    size_t k;
    json_t *m;
    json_array_foreach(json_object_get(c, "messages"), k, m)
    {
        const json_t *content = json_object_get(m, "content");
        size_t cn = json_string_length(content);
        if (!ok || !json_is_string(content) || cn < 4)
            continue;
        const char *cs = json_string_value(content);
        if (memmem(out, n, cs, cn) && !inside_a_span(out, n, cs, cn, sp, n_sp)) {
            cr_log_error("%s/%s: message %zu's content is not marked as the client's", file_name,
                         name, k);
            ok = false;
        }
    }
    if (!ok)
        cr_log_error("%s/%s: provenance check failed %s", file_name, name, err.msg);
    gs_free(out);
    gs_free(sp);
    json_decref(ctx);
    json_decref(trusted);
    return ok;
}

/* Renders one case; returns true when it matches the reference. */
static bool check_case(const char *file_name, const struct gs_jinja_tmpl *t, const json_t *file,
                       const json_t *c)
{
    const char *name = json_string_value(json_object_get(c, "name"));
    json_t *ctx = case_context(file, c);
    char *out = NULL;
    size_t n = 0;
    enum gs_jinja_fail fail;
    struct gs_err err = {0};
    enum gs_status st = gs_jinja_render(t, ctx, GOLDEN_NOW_UNIX_S, &out, &n, &fail, &err);
    json_decref(ctx);
    const json_t *want = json_object_get(c, "rendered");
    bool ok;
    if (want) {
        const char *w = json_string_value(want);
        size_t wn = json_string_length(want);
        ok = st == GS_OK && n == wn && memcmp(out, w, n) == 0;
        if (!ok && st == GS_OK) {
            size_t at = first_difference(out, n, w, wn);
            cr_log_error("%s/%s: differs at byte %zu: got \"%.60s\" want \"%.60s\"", file_name,
                         name, at, out + at, w + at);
        } else if (!ok) {
            cr_log_error("%s/%s: failed: %s", file_name, name, err.msg);
        }
        ok = ok && check_spans(file_name, name, t, file, c, w, wn);
    } else {
        const char *type = json_string_value(json_object_get(c, "error_type"));
        const char *msg = json_string_value(json_object_get(c, "error"));
        bool raised = strcmp(type, "TemplateError") == 0;
        ok = st != GS_OK && (raised ? fail == GS_JINJA_FAIL_RAISED && st == GS_INVAL &&
                                          strncmp(err.msg, msg, GS_ERR_MSG_LEN - 1) == 0
                                    : fail == GS_JINJA_FAIL_ERROR && st == GS_FORMAT);
        if (!ok)
            cr_log_error("%s/%s: want %s \"%s\", got status %d kind %d \"%s\"", file_name, name,
                         type, msg, st, fail, st == GS_OK ? "(rendered)" : err.msg);
    }
    gs_free(out);
    return ok;
}

static void check_file(const char *dir, const char *file_name, struct tally *tl)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", dir, file_name);
    json_t *file = gs_test_load_json(path);
    json_t *src = json_object_get(file, "template");
    cr_assert(json_is_string(src), "%s: no template", file_name);
    struct gs_jinja_tmpl *t = NULL;
    struct gs_err err = {0};
    enum gs_status st =
        gs_jinja_parse(json_string_value(src), json_string_length(src), NULL, &t, &err);
    json_t *cases = json_object_get(file, "cases");
    cr_assert(json_array_size(cases) > 0, "%s: no cases", file_name);
    tl->files++;
    tl->cases += (int)json_array_size(cases);
    if (st != GS_OK) {
        cr_log_error("%s: does not parse: %s", file_name, err.msg);
        json_decref(file);
        return;
    }
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) tl->passed += check_case(file_name, t, file, c);
    gs_jinja_free(t);
    json_decref(file);
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

Test(jinja_golden, every_case_renders_as_the_reference, .timeout = 120)
{
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", gs_test_shared_path("golden/templates/README.md"));
    *strrchr(dir, '/') = '\0';
    struct dirent **names;
    int n = scandir(dir, &names, NULL, by_name);
    cr_assert(n > 0, "cannot list %s", dir);
    struct tally tl = {0};
    for (int i = 0; i < n; i++) {
        size_t len = strlen(names[i]->d_name);
        if (len > 5 && strcmp(names[i]->d_name + len - 5, ".json") == 0)
            check_file(dir, names[i]->d_name, &tl);
        free(names[i]);
    }
    free(names);
    cr_log_info("jinja goldens: %d of %d cases in %d templates pass", tl.passed, tl.cases,
                tl.files);
    /* The README lists 44 templates; fewer means the shared folder is incomplete. */
    cr_assert_geq(tl.files, 44, "only %d golden templates found in %s", tl.files, dir);
    cr_assert_eq(tl.passed, tl.cases, "%d of %d golden cases fail", tl.cases - tl.passed, tl.cases);
}

/* Rendering is on the request path. The largest golden template (gpt-oss,
 * 16 KiB of Jinja) over a long conversation with tools: ten rounds of the
 * parallel-tool-calls case, 70 messages. About 0.3 ms on the development
 * machine; the bound is loose so that a loaded CI machine does not fail it,
 * and tight enough to catch a render that went quadratic. */
Test(jinja_bench, long_conversation_through_the_largest_template, .timeout = 120)
{
    json_t *file =
        gs_test_load_json(gs_test_shared_path("golden/templates/openai-gpt-oss-120b.json"));
    json_t *src = json_object_get(file, "template");
    const json_t *base = NULL;
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(file, "cases"), i,
                       c) if (strcmp(json_string_value(json_object_get(c, "name")),
                                     "parallel_tool_calls_then_answer") == 0) base = c;
    cr_assert(base, "no parallel_tool_calls_then_answer case");
    json_t *ctx = case_context(file, base);
    json_t *msgs = json_array();
    for (int round = 0; round < 10; round++)
        json_array_extend(msgs, json_object_get(base, "messages"));
    json_object_set_new(ctx, "messages", msgs);

    struct gs_jinja_tmpl *t = NULL;
    struct gs_err err = {0};
    cr_assert_eq(gs_jinja_parse(json_string_value(src), json_string_length(src), NULL, &t, &err),
                 GS_OK, "%s", err.msg);
    enum { N = 200 };
    size_t first_len = 0;
    double t0 = gs_now_ms();
    for (int k = 0; k < N; k++) {
        char *out;
        size_t n;
        cr_assert_eq(gs_jinja_render(t, ctx, GOLDEN_NOW_UNIX_S, &out, &n, NULL, &err), GS_OK, "%s",
                     err.msg);
        if (k == 0)
            first_len = n;
        cr_assert_eq(n, first_len, "render %d differs in length", k);
        gs_free(out);
    }
    double ms = (gs_now_ms() - t0) / N;
    cr_log_info("jinja bench: %zu messages, %zu bytes, %.3f ms per render", json_array_size(msgs),
                first_len, ms);
    cr_expect_lt(ms, 5.0, "%.3f ms per render", ms);
    gs_jinja_free(t);
    json_decref(ctx);
    json_decref(file);
}
