/*
 * tests/server/test_http_debug.c - the debug endpoints and the web page's
 * files on the real daemon: /debug/events streams the engine's steps (batch,
 * page map, prefix hits) as requests run; /debug/graph holds the graph as
 * built and as served; /debug/memory is the ledger /metrics shows; keys guard
 * them; --no-debug-endpoints and --no-webui turn them off; the page's files
 * come with their types, ETags and security headers.
 */
#include "engine/base.h"
#include "tests/common/testutil.h"
#include "tests/server/e2e.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* A /debug/events subscriber: curl streaming into a file. */
struct sub {
    pid_t pid;
    char path[512];
};

static void sub_start(struct sub *s, const struct e2e_daemon *d, const char *auth)
{
    static int n;
    snprintf(s->path, sizeof(s->path), "%s/events-%d-%d.txt", gs_test_tmpdir(), getpid(), ++n);
    char url[128];
    snprintf(url, sizeof(url), "%s/debug/events", d->url);
    s->pid = fork();
    cr_assert(s->pid >= 0);
    if (s->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* a failed test leaves no stream behind */
        int null = open("/dev/null", O_RDWR);
        dup2(null, 1);
        dup2(null, 2);
        if (auth)
            execlp("curl", "curl", "-sN", "-H", auth, "-o", s->path, url, (char *)NULL);
        else
            execlp("curl", "curl", "-sN", "-o", s->path, url, (char *)NULL);
        _exit(127);
    }
}

/* Waits until the stream holds needle n times; returns the stream's whole events. */
static char *sub_await(const struct sub *s, const char *needle, int n)
{
    for (int i = 0; i < E2E_HANG_S * 50; i++) {
        char *text = access(s->path, F_OK) ? NULL : gs_test_read_file(s->path, NULL);
        int k = 0;
        for (const char *p = text; p && (p = strstr(p, needle)); p++)
            k++;
        if (k >= n) {
            char *end = strstr(text, "\n\n") ? text + strlen(text) : text;
            while (end > text && !(end - text >= 2 && end[-1] == '\n' && end[-2] == '\n'))
                end--; /* cut a partly written event */
            *end = '\0';
            return text;
        }
        free(text);
        usleep(20000); /* a poll interval, not a budget: the loop's bound is a hang guard */
    }
    cr_assert_fail("the event stream never held %d of '%s'", n, needle);
    return NULL;
}

static void sub_stop(struct sub *s)
{
    kill(s->pid, SIGTERM);
    int st;
    waitpid(s->pid, &st, 0);
}

/* A prompt of more than one 16-token page, so that a second request hits the cache. */
static const char long_prompt[] =
    "{\"prompt\":\"Once upon a time, there was a little girl named Lily. She loved to play "
    "outside in the park with her friends and her dog\",\"max_tokens\":6,\"temperature\":0}";

Test(http_debug, events_show_each_step_with_its_batch_pages_and_prefix_hits, .timeout = 300)
{
    struct e2e_daemon d;
    e2e_start(&d, "");
    struct sub s;
    sub_start(&s, &d, NULL);
    free(sub_await(&s, "\"type\":\"hello\"", 1));
    struct e2e_resp a, b;
    e2e_http(&d, "POST", "/v1/completions", long_prompt, NULL, &a);
    cr_assert_eq(a.status, 200, "%s", a.body);
    e2e_http(&d, "POST", "/v1/completions", long_prompt, NULL, &b);
    cr_assert_eq(b.status, 200, "%s", b.body);
    long gen =
        json_integer_value(json_object_get(json_object_get(a.json, "usage"), "completion_tokens")) +
        json_integer_value(json_object_get(json_object_get(b.json, "usage"), "completion_tokens"));
    long cached_a = json_integer_value(
        json_object_get(json_object_get(json_object_get(a.json, "usage"), "prompt_tokens_details"),
                        "cached_tokens"));
    long cached = json_integer_value(
        json_object_get(json_object_get(json_object_get(b.json, "usage"), "prompt_tokens_details"),
                        "cached_tokens"));
    cr_assert_gt(cached, cached_a, "the second prompt hits the prefix cache");
    cached += cached_a; /* the known-answer check's prompt may have left a page too */
    /* Both requests' last steps are in: the two records after which nothing runs. */
    char *text = sub_await(&s, "\"running\":0,\"waiting\":0,\"prefix_hits\"", 2);
    sub_stop(&s);
    bool done;
    json_t *evs = e2e_sse_events(text, &done);
    free(text);
    cr_assert_gt(json_array_size(evs), 2);
    json_t *hello = json_array_get(evs, 0);
    cr_assert_str_eq(json_string_value(json_object_get(hello, "type")), "hello");
    long pages_total = json_integer_value(json_object_get(hello, "pages_total"));
    cr_assert_gt(pages_total, 0);
    cr_assert_eq(json_integer_value(json_object_get(hello, "page_tokens")), 16);
    long decode = 0, hit_tokens = 0;
    size_t i;
    json_t *ev;
    json_array_foreach(evs, i, ev)
    {
        if (i == 0)
            continue;
        cr_assert_str_eq(json_string_value(json_object_get(ev, "type")), "step");
        json_t *m, *batch = json_object_get(ev, "batch");
        size_t j;
        json_array_foreach(batch, j, m) decode +=
            json_integer_value(json_object_get(m, "decode_tokens"));
        json_t *h, *hits = json_object_get(ev, "prefix_hits");
        json_array_foreach(hits, j, h) hit_tokens +=
            json_integer_value(json_object_get(h, "tokens"));
        json_t *kv = json_object_get(ev, "kv");
        cr_assert_eq(json_integer_value(json_object_get(kv, "pages_total")), pages_total);
        long sum = 0;
        const char *map = json_string_value(json_object_get(kv, "map"));
        for (const char *p = map; p && *p;) {
            char *end;
            cr_assert(strchr("ucf", *p), "page code '%c'", *p);
            sum += strtol(p + 1, &end, 10);
            p = end;
        }
        cr_assert_eq(sum, pages_total, "the map covers every page");
        cr_assert(json_is_number(json_object_get(ev, "tokens_per_s")));
    }
    /* Every generated token but each request's first (sampled by its last prompt step) is
     * one decode step's token. */
    cr_assert_eq(decode, gen - 2, "decode tokens %ld of %ld generated", decode, gen);
    cr_assert_eq(hit_tokens, cached, "hits %ld, cached %ld", hit_tokens, cached);
    json_decref(evs);
    e2e_resp_free(&a);
    e2e_resp_free(&b);
    e2e_stop(&d);
}

Test(http_debug, graph_as_built_and_as_served, .timeout = 120)
{
    struct e2e_daemon d;
    e2e_start(&d, "");
    struct e2e_resp r;
    e2e_http(&d, "GET", "/debug/graph", NULL, NULL, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cr_assert_str_eq(json_string_value(json_object_get(r.json, "model")), "stories260K");
    long n[2];
    const char *which[2] = {"built", "served"};
    for (int k = 0; k < 2; k++) {
        json_t *g = json_object_get(r.json, which[k]);
        json_t *nodes = json_object_get(g, "nodes");
        n[k] = json_integer_value(json_object_get(g, "n_nodes"));
        cr_assert_eq((size_t)n[k], json_array_size(nodes));
        size_t i;
        json_t *node;
        json_array_foreach(nodes, i, node)
        {
            cr_assert_eq(json_integer_value(json_object_get(node, "id")), (json_int_t)i);
            cr_assert(json_string_value(json_object_get(node, "op")));
            json_t *src;
            size_t j;
            json_array_foreach(json_object_get(node, "src"), j, src)
                cr_assert_lt(json_integer_value(src), (json_int_t)i, "sources come first");
        }
    }
    /* The passes fuse: the served graph has fewer nodes than the one built. */
    cr_assert_lt(n[1], n[0], "served %ld, built %ld", n[1], n[0]);
    e2e_resp_free(&r);
    e2e_stop(&d);
}

/* The bytes of /debug/memory's row for kind; the test fails when it is missing. */
static long long row_bytes(json_t *rows, const char *kind)
{
    size_t i;
    json_t *row;
    json_array_foreach(rows, i, row)
    {
        if (!strcmp(json_string_value(json_object_get(row, "kind")), kind))
            return json_integer_value(json_object_get(row, "bytes"));
    }
    cr_assert_fail("/debug/memory has no row %s", kind);
    return -1;
}

Test(http_debug, memory_ledger_is_what_metrics_shows, .timeout = 120)
{
    struct e2e_daemon d;
    e2e_start(&d, "");
    struct e2e_resp g, m, x;
    e2e_http(&d, "POST", "/v1/completions", long_prompt, NULL, &g);
    cr_assert_eq(g.status, 200);
    /* Idle now: two reads agree. */
    e2e_http(&d, "GET", "/debug/memory", NULL, NULL, &x);
    e2e_http(&d, "GET", "/metrics", NULL, NULL, &m);
    cr_assert_eq(x.status, 200, "%s", x.body);
    const char *kinds[] = {"weights_mapped", "kv_pool",       "kv_used",          "prefix_cache",
                           "draft_kv_pool",  "scratch",       "sequence_buffers", "event_queue",
                           "stream_buffers", "request_arenas"};
    json_t *rows = json_object_get(x.json, "rows");
    cr_assert_eq(json_array_size(rows), GS_ARRAY_LEN(kinds));
    long long total = 0;
    for (size_t i = 0; i < GS_ARRAY_LEN(kinds); i++) {
        json_t *row = json_array_get(rows, i);
        cr_assert_str_eq(json_string_value(json_object_get(row, "kind")), kinds[i]);
        long long bytes = json_integer_value(json_object_get(row, "bytes"));
        char name[96];
        snprintf(name, sizeof(name), "graphserve_memory_bytes{kind=\"%s\"}", kinds[i]);
        cr_assert_eq(e2e_metric(m.body, name), (double)bytes, "%s", kinds[i]);
        if (strcmp(kinds[i], "kv_used") && strcmp(kinds[i], "prefix_cache") &&
            strcmp(kinds[i], "stream_buffers"))
            total += bytes;
    }
    cr_assert_eq(json_integer_value(json_object_get(x.json, "total_bytes")), total);
    struct stat sb;
    cr_assert_eq(stat(gs_test_shared_path("models/stories260K.gguf"), &sb), 0);
    cr_assert_eq(row_bytes(rows, "weights_mapped"), (long long)sb.st_size);
    json_t *kv = json_object_get(x.json, "kv");
    long long pages = json_integer_value(json_object_get(kv, "pages_total"));
    cr_assert_eq(row_bytes(rows, "kv_pool"), pages * 10240, "stories260K: 10240 bytes a page");
    /* The prompt's full page stayed cached after the answer. */
    cr_assert_gt(json_integer_value(json_object_get(kv, "pages_cached")), 0);
    cr_assert_eq(row_bytes(rows, "prefix_cache"),
                 json_integer_value(json_object_get(kv, "pages_cached")) * 10240);
    /* no draft model: no draft pool; the plans' scratch is some */
    cr_assert_eq(row_bytes(rows, "draft_kv_pool"), 0);
    cr_assert_gt(row_bytes(rows, "scratch"), 0);
    /* Idle, no request holds an arena; an open /debug/events stream holds one, its
     * queued bytes inside it. */
    cr_assert_eq(row_bytes(rows, "request_arenas"), 0);
    struct sub stream;
    sub_start(&stream, &d, NULL);
    free(sub_await(&stream, "\"type\":\"hello\"", 1));
    struct e2e_resp y;
    e2e_http(&d, "GET", "/debug/memory", NULL, NULL, &y);
    cr_assert_eq(y.status, 200, "%s", y.body);
    json_t *yrows = json_object_get(y.json, "rows");
    long long arenas = row_bytes(yrows, "request_arenas");
    long long streams = row_bytes(yrows, "stream_buffers");
    cr_assert_geq(arenas, 64 << 10, "one chunk at least: %lld", arenas);
    cr_assert_eq(arenas % 4096, 0, "whole pages: %lld", arenas);
    cr_assert_leq(streams, arenas);
    sub_stop(&stream);
    e2e_resp_free(&y);
    e2e_resp_free(&g);
    e2e_resp_free(&m);
    e2e_resp_free(&x);
    e2e_stop(&d);
}

static const char *const debug_paths[] = {"/debug/graph", "/debug/memory", "/debug/events"};

Test(http_debug, keys_guard_the_debug_endpoints_not_the_page, .timeout = 120)
{
    struct e2e_daemon d;
    e2e_start(&d, "--api-key sekrit");
    struct e2e_resp r;
    for (size_t i = 0; i < GS_ARRAY_LEN(debug_paths); i++) {
        e2e_http(&d, "GET", debug_paths[i], NULL, NULL, &r);
        cr_assert_eq(r.status, 401, "%s: %d", debug_paths[i], r.status);
        cr_assert_str_eq(
            json_string_value(json_object_get(json_object_get(r.json, "error"), "type")),
            "authentication_error");
        e2e_resp_free(&r);
    }
    e2e_http(&d, "GET", "/debug/memory", NULL, "-H 'Authorization: Bearer sekrit'", &r);
    cr_assert_eq(r.status, 200);
    e2e_resp_free(&r);
    struct sub s;
    sub_start(&s, &d, "Authorization: Bearer sekrit");
    free(sub_await(&s, "\"type\":\"hello\"", 1));
    sub_stop(&s);
    /* The page itself asks for the key; it needs none to load. */
    e2e_http(&d, "GET", "/", NULL, NULL, &r);
    cr_assert_eq(r.status, 200);
    e2e_resp_free(&r);
    e2e_stop(&d);
}

Test(http_debug, both_can_be_turned_off, .timeout = 120)
{
    struct e2e_daemon d;
    e2e_start(&d, "--no-debug-endpoints --no-webui");
    struct e2e_resp r;
    const char *paths[] = {"/debug/graph", "/debug/memory", "/debug/events", "/", "/assets/app.js"};
    for (size_t i = 0; i < GS_ARRAY_LEN(paths); i++) {
        e2e_http(&d, "GET", paths[i], NULL, NULL, &r);
        cr_assert_eq(r.status, 404, "%s: %d", paths[i], r.status);
        cr_assert(json_object_get(r.json, "error"), "%s: an error object", paths[i]);
        e2e_resp_free(&r);
    }
    e2e_http(&d, "GET", "/health", NULL, NULL, &r);
    cr_assert_eq(r.status, 200);
    e2e_resp_free(&r);
    e2e_stop(&d);
}

static const char *header(const struct e2e_resp *r, const char *name, char *out, size_t cap)
{
    const char *p = strstr(r->headers, name);
    cr_assert(p, "no %s header in %s", name, r->headers);
    p += strlen(name);
    while (*p == ' ' || *p == ':')
        p++;
    size_t n = strcspn(p, "\r\n");
    snprintf(out, cap, "%.*s", (int)n, p);
    return out;
}

Test(http_debug, page_files_with_types_etags_and_policy, .timeout = 120)
{
    struct e2e_daemon d;
    e2e_start(&d, "");
    struct e2e_resp r;
    char v[512], etag[128];
    e2e_http(&d, "GET", "/", NULL, NULL, &r);
    cr_assert_eq(r.status, 200);
    cr_assert_str_eq(header(&r, "content-type", v, sizeof(v)), "text/html; charset=utf-8");
    cr_assert_str_eq(header(&r, "cache-control", v, sizeof(v)), "no-cache");
    cr_assert(strstr(header(&r, "content-security-policy", v, sizeof(v)), "script-src 'self'"));
    cr_assert(strstr(r.body, "<script type=\"module\" src=\"/assets/app.js\">"), "%s", r.body);
    header(&r, "etag", etag, sizeof(etag));
    e2e_resp_free(&r);
    char h[200];
    snprintf(h, sizeof(h), "-H 'If-None-Match: %s'", etag);
    e2e_http(&d, "GET", "/", NULL, h, &r);
    cr_assert_eq(r.status, 304, "the same ETag: not modified");
    cr_assert_str_eq(r.body, "");
    e2e_resp_free(&r);
    const char *files[][2] = {{"/assets/app.js", "text/javascript; charset=utf-8"},
                              {"/assets/style.css", "text/css; charset=utf-8"},
                              {"/assets/icon.svg", "image/svg+xml"}};
    for (size_t i = 0; i < GS_ARRAY_LEN(files); i++) {
        e2e_http(&d, "GET", files[i][0], NULL, NULL, &r);
        cr_assert_eq(r.status, 200, "%s", files[i][0]);
        cr_assert_str_eq(header(&r, "content-type", v, sizeof(v)), files[i][1]);
        cr_assert_str_eq(header(&r, "x-content-type-options", v, sizeof(v)), "nosniff");
        e2e_resp_free(&r);
    }
    const char *missing[] = {"/index.html", "/assets/nothing.js", "/assets/", "/favicon.ico"};
    for (size_t i = 0; i < GS_ARRAY_LEN(missing); i++) {
        e2e_http(&d, "GET", missing[i], NULL, NULL, &r);
        cr_assert_eq(r.status, 404, "%s: %d", missing[i], r.status);
        e2e_resp_free(&r);
    }
    e2e_stop(&d);
}

/* A subscriber that does not read: the engine goes on, the daemon drops records for it
 * past --max-stream-buffer-bytes and says how many in a gap event once it reads again. */
Test(http_debug, a_subscriber_that_does_not_read_gets_a_gap_not_a_stalled_engine, .timeout = 300)
{
    struct e2e_daemon d;
    /* The subscriber reads nothing while 30 requests run: on a slow machine (a sanitizer
     * build at load 30 took 98 s) that outlasts the default idle cut of 30 s, which would
     * close the stream before the gap is seen. The gap is what is tested here, so the
     * idle cut is out of its way. */
    e2e_start(&d, "--max-stream-buffer-bytes 64KiB --conn-timeout-s 3600");
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(fd >= 0);
    int small = 4096;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)d.port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    const char req[] = "GET /debug/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    cr_assert_eq(write(fd, req, sizeof(req) - 1), (ssize_t)sizeof(req) - 1);
    /* Far more records than every buffer between the daemon and this socket holds; each
     * request finishing is the engine not waiting for the subscriber. */
    for (int i = 0; i < 30; i++) {
        struct e2e_resp r;
        e2e_http(&d, "POST", "/v1/completions",
                 "{\"prompt\":\"Once\",\"max_tokens\":400,\"ignore_eos\":true}", NULL, &r);
        cr_assert_eq(r.status, 200, "%s", r.body);
        e2e_resp_free(&r);
    }
    /* Read what was kept, then one more request: its first record brings the gap. */
    size_t cap = 8u << 20, len = 0;
    char *got = malloc(cap + 1);
    bool asked = false;
    for (int quiet = 0;;) {
        struct timeval tv = {.tv_sec = 0, .tv_usec = 200000};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        ssize_t n = read(fd, got + len, cap - len);
        if (n > 0) {
            len += (size_t)n;
            got[len] = '\0';
            if (strstr(got, "\"type\":\"gap\""))
                break;
            continue;
        }
        cr_assert(n < 0, "the stream ended without a gap event");
        /* A hang guard only (reads time out after 0.2 s): the gap event follows the first
         * record after the drain. */
        cr_assert_lt(++quiet, E2E_HANG_S * 5, "no gap event in %zu bytes", len);
        if (!asked) { /* drained: now a record that fits */
            struct e2e_resp r;
            e2e_http(&d, "POST", "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":2}", NULL,
                     &r);
            e2e_resp_free(&r);
            asked = true;
        }
        cr_assert_lt(len, cap);
    }
    const char *g = strstr(got, "{\"type\":\"gap\"");
    long dropped = strtol(strstr(g, "\"dropped\":") + strlen("\"dropped\":"), NULL, 10);
    cr_assert_gt(dropped, 0);
    cr_assert_lt(len, 4u << 20, "the daemon kept only a bounded backlog (%zu bytes read)", len);
    free(got);
    close(fd);
    e2e_stop(&d);
}
