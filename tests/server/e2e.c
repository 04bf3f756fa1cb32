/* tests/server/e2e.c - see e2e.h. */
#define _GNU_SOURCE
#include "tests/server/e2e.h"
#include "tests/common/testutil.h"

#include "engine/gguf.h"

#include <criterion/criterion.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void e2e_start(struct e2e_daemon *d, const char *extra_args)
{
    memset(d, 0, sizeof(*d));
    static int n_started;
    snprintf(d->log_path, sizeof(d->log_path), "%s/daemon-%d-%d.log", gs_test_tmpdir(), getpid(),
             ++n_started);
    char model[512];
    snprintf(model, sizeof(model), "%s", gs_test_shared_path("models/stories260K.gguf"));
    char bin[512];
    snprintf(bin, sizeof(bin), "%s", gs_test_build_path("server/graphserve"));
    int pfd[2];
    cr_assert_eq(pipe(pfd), 0);
    char *cmd;
    cr_assert(asprintf(&cmd, "exec '%s' serve -m '%s' --port 0 %s 2>'%s'", bin, model, extra_args,
                       d->log_path) > 0);
    pid_t parent = getpid();
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        /* A test whose assertion fails exits without e2e_stop: its daemon goes with
         * it rather than living on, holding a port and a core, after the suite. */
#ifdef __linux__
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
            _exit(127);
#else
        (void)parent;
#endif
        dup2(pfd[1], 1);
        close(pfd[0]);
        close(pfd[1]);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    free(cmd);
    close(pfd[1]);
    d->pid = pid;
    /* Read stdout until the listening line (the model loads in well under 10 s). */
    FILE *f = fdopen(pfd[0], "r");
    cr_assert(f);
    char line[512];
    bool found = false;
    bool https = false;
    while (fgets(line, sizeof(line), f)) {
        /* "listening on http://127.0.0.1:PORT", or https:// with --tls-cert */
        const char *p = strstr(line, "listening on http");
        const char *h = p ? strstr(p, "://127.0.0.1:") : NULL;
        if (h) {
            https = p[strlen("listening on http")] == 's';
            d->port = atoi(h + strlen("://127.0.0.1:"));
            found = true;
            break;
        }
    }
    fclose(f); /* the daemon prints nothing else on stdout */
    if (!found) {
        char *log = gs_test_read_file(d->log_path, NULL);
        cr_assert_fail("the daemon did not start; its log:\n%s", log);
    }
    snprintf(d->url, sizeof(d->url), "%s://127.0.0.1:%d", https ? "https" : "http", d->port);
}

void e2e_start_gated(struct e2e_daemon *d, const char *var, const char *gate,
                     const char *extra_args)
{
    unlink(gate);
    setenv(var, gate, 1);
    e2e_start(d, extra_args);
    unsetenv(var);
    FILE *f = fopen(gate, "w");
    cr_assert(f, "%s", gate);
    fclose(f);
}

int e2e_stop(struct e2e_daemon *d)
{
    if (d->pid <= 0)
        return -1;
    kill(d->pid, SIGTERM);
    int st;
    cr_assert_eq(waitpid(d->pid, &st, 0), d->pid);
    d->pid = 0;
    size_t n;
    char *log = gs_test_read_file(d->log_path, &n);
    cr_expect(!strstr(log, "Sanitizer"), "sanitizer report in the daemon's log:\n%s", log);
    free(log);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

const char *e2e_body_file(const char *body)
{
    static char path[600];
    static int n;
    snprintf(path, sizeof(path), "%s/body-%d-%d.json", gs_test_tmpdir(), getpid(), ++n);
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    fwrite(body, 1, strlen(body), f);
    fclose(f);
    return path;
}

void e2e_http(const struct e2e_daemon *d, const char *method, const char *path, const char *body,
              const char *extra_curl, struct e2e_resp *out)
{
    memset(out, 0, sizeof(*out));
    char hdr[600];
    static int n;
    snprintf(hdr, sizeof(hdr), "%s/headers-%d-%d.txt", gs_test_tmpdir(), getpid(), ++n);
    char data[700] = "";
    if (body)
        snprintf(data, sizeof(data), "-H 'Content-Type: application/json' --data-binary '@%s'",
                 e2e_body_file(body));
    char *cmd;
    cr_assert(asprintf(&cmd, "curl -sS --max-time %d -X %s -D '%s' %s %s '%s%s'", E2E_HANG_S,
                       method, hdr, data, extra_curl ? extra_curl : "", d->url, path) > 0);
    int rc = gs_test_run(cmd, 0, &out->body);
    cr_assert_eq(rc, 0, "curl failed (%d): %s", rc, cmd);
    free(cmd);
    out->headers = gs_test_read_file(hdr, NULL);
    for (char *p = out->headers; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    /* The last status line wins (curl may print a 100 Continue first). */
    const char *s = out->headers, *last = NULL;
    while ((s = strstr(s, "http/1.1 ")))
        last = s++;
    cr_assert(last, "no status line in: %s", out->headers);
    out->status = atoi(last + 9);
    out->json = json_loads(out->body, 0, NULL);
}

void e2e_post_at_once(const struct e2e_daemon *d, const char *path, const char *const *bodies,
                      size_t n, char **outs)
{
    char(*files)[600] = calloc(n, sizeof(*files));
    cr_assert(files || !n);
    char *cmd = strdup("");
    for (size_t i = 0; i < n; i++) {
        snprintf(files[i], sizeof(files[i]), "%s", e2e_body_file(bodies[i]));
        char *next;
        cr_assert(asprintf(&next, "%scurl -sN --max-time %d --data-binary @%s '%s%s' > %s.out & ",
                           cmd, E2E_HANG_S, files[i], d->url, path, files[i]) > 0);
        free(cmd);
        cmd = next;
    }
    char *full;
    cr_assert(asprintf(&full, "%swait", cmd) > 0);
    cr_assert_eq(gs_test_run(full, 1, NULL), 0);
    free(full);
    free(cmd);
    for (size_t i = 0; i < n; i++) {
        char out[700];
        snprintf(out, sizeof(out), "%.600s.out", files[i]);
        outs[i] = gs_test_read_file(out, NULL);
    }
    free(files);
}

void e2e_resp_free(struct e2e_resp *r)
{
    free(r->headers);
    free(r->body);
    json_decref(r->json);
    memset(r, 0, sizeof(*r));
}

json_t *e2e_sse_events(const char *body, bool *done)
{
    json_t *events = json_array();
    *done = false;
    const char *p = body;
    while (*p) {
        const char *eol = strstr(p, "\n\n");
        cr_assert(eol, "SSE event not terminated by a blank line: '%.80s'", p);
        size_t n = (size_t)(eol - p);
        if (!strncmp(p, "data: ", 6)) {
            cr_assert(!*done, "an event after [DONE]");
            if (n == 12 && !strncmp(p + 6, "[DONE]", 6)) {
                *done = true;
            } else {
                json_error_t je;
                json_t *j = json_loadb(p + 6, n - 6, 0, &je);
                cr_assert(j, "bad JSON in SSE event (%s): '%.*s'", je.text, (int)n, p);
                json_array_append_new(events, j);
            }
        } else {
            cr_assert(p[0] == ':', "unexpected SSE line '%.*s'", (int)n, p);
        }
        p = eol + 2;
    }
    return events;
}

json_t *e2e_sse_named_events(const char *body)
{
    json_t *events = json_array();
    for (const char *p = body; *p;) {
        const char *eol = strstr(p, "\n\n");
        cr_assert(eol, "SSE event not terminated by a blank line: '%.80s'", p);
        int n = (int)(eol - p);
        if (p[0] != ':') {
            const char *nl = memchr(p, '\n', (size_t)n);
            cr_assert(!strncmp(p, "event: ", 7) && nl && !strncmp(nl + 1, "data: ", 6),
                      "not an 'event:' and 'data:' pair: '%.*s'", n, p);
            json_error_t je;
            json_t *j = json_loadb(nl + 7, (size_t)(eol - nl - 7), 0, &je);
            cr_assert(j, "bad JSON in SSE event (%s): '%.*s'", je.text, n, p);
            json_array_append_new(
                events, json_pack("{s:s%,s:o}", "event", p + 7, (size_t)(nl - p - 7), "data", j));
        }
        p = eol + 2;
    }
    return events;
}

double e2e_metric(const char *metrics, const char *name_and_labels)
{
    size_t n = strlen(name_and_labels);
    for (const char *p = metrics; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (!strncmp(p, name_and_labels, n) && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    return -1;
}

double e2e_await_metric(const struct e2e_daemon *d, const char *name, double at_least)
{
    double v = -1;
    for (int i = 0; i < E2E_HANG_S * 10; i++) {
        struct e2e_resp m;
        e2e_http(d, "GET", "/metrics", NULL, NULL, &m);
        v = e2e_metric(m.body, name);
        e2e_resp_free(&m);
        if (v >= at_least)
            return v;
        usleep(100 * 1000);
    }
    return v;
}

int e2e_log_count(const struct e2e_daemon *d, const char *needle)
{
    char *log = gs_test_read_file(d->log_path, NULL);
    int n = 0;
    for (const char *p = log; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    free(log);
    return n;
}

int e2e_await_log(const struct e2e_daemon *d, const char *needle, int n)
{
    int got = 0;
    for (int i = 0; i < E2E_HANG_S * 50 && (got = e2e_log_count(d, needle)) < n; i++)
        usleep(20 * 1000);
    if (got < n) {
        char *log = gs_test_read_file(d->log_path, NULL);
        cr_assert_fail("'%s' not %d times in the daemon's log after %d s (a hang):\n%s", needle, n,
                       E2E_HANG_S, log);
    }
    return got;
}

/* GGUF metadata value types used below (the file format's numbering). */
#define GGUF_U32    4
#define GGUF_STRING 8

static size_t put_u32(unsigned char *p, uint32_t v)
{
    memcpy(p, &v, 4); /* GGUF is little-endian, as every machine this runs on */
    return 4;
}

static size_t put_u64(unsigned char *p, uint64_t v)
{
    memcpy(p, &v, 8);
    return 8;
}

static size_t put_str(unsigned char *p, const char *s, size_t n)
{
    size_t k = put_u64(p, n);
    memcpy(p + k, s, n);
    return k + n;
}

/*
 * The two keys go right after the header; a padding key makes them a whole
 * number of alignment units, so that the data section, which starts at the
 * first aligned offset after the tensor table, moves by exactly as much and
 * every tensor offset stays valid.
 */
char *e2e_model_with_template(const char *rel, const char *name, const char *tmpl, size_t n)
{
    size_t len;
    unsigned char *src = gs_test_read_file(gs_test_shared_path(rel), &len);
    struct gs_gguf *g;
    struct gs_err err;
    cr_assert_eq(gs_gguf_open_mem(src, len, &g, &err), GS_OK, "%s", err.msg);
    size_t align = gs_gguf_alignment(g);
    gs_gguf_close(g);
    static const char key[] = "tokenizer.chat_template", pad_prefix[] = "graphserve.test.pad";
    size_t kv = 8 + strlen(key) + 4 + 8 + n, pad_kv_base = 8 + 4 + 4;
    size_t pad_key = strlen(pad_prefix);
    while ((kv + pad_kv_base + pad_key) % align)
        pad_key++;
    size_t added = kv + pad_kv_base + pad_key;
    unsigned char *out = malloc(len + added);
    cr_assert(out);
    memcpy(out, src, 24); /* magic, version, n_tensors, n_kv */
    uint64_t n_kv;
    memcpy(&n_kv, src + 16, 8);
    put_u64(out + 16, n_kv + 2);
    size_t k = 24;
    k += put_str(out + k, key, strlen(key));
    k += put_u32(out + k, GGUF_STRING);
    k += put_str(out + k, tmpl, n);
    char *pk = malloc(pad_key + 1);
    cr_assert(pk);
    memcpy(pk, pad_prefix, strlen(pad_prefix));
    memset(pk + strlen(pad_prefix), 'x', pad_key - strlen(pad_prefix));
    k += put_str(out + k, pk, pad_key);
    k += put_u32(out + k, GGUF_U32);
    k += put_u32(out + k, 0);
    cr_assert_eq(k, 24 + added);
    memcpy(out + k, src + 24, len - 24);
    char *path;
    cr_assert(asprintf(&path, "%s/%s.gguf", gs_test_tmpdir(), name) > 0);
    FILE *f = fopen(path, "wb");
    cr_assert(f, "cannot write %s", path);
    cr_assert_eq(fwrite(out, 1, len + added, f), len + added);
    fclose(f);
    cr_assert_eq(gs_gguf_open(path, &g, &err), GS_OK, "the crafted file: %s", err.msg);
    gs_gguf_close(g);
    free(pk);
    free(out);
    free(src);
    return path;
}

