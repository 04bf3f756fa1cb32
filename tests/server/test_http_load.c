/*
 * tests/server/test_http_load.c - the real daemon under load: 32 streaming
 * clients at once give exactly what each gets alone; clients that disconnect
 * mid-stream or while queued are noticed and every KV page comes back; a
 * SIGTERM drain lets short requests finish, ends long ones with "abort" and
 * exits 0.
 */
#define _GNU_SOURCE
#include "tests/common/testutil.h"
#include "tests/server/e2e.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define N_CLIENTS 32

/* Tests that need requests to still be running a second or two later pin
 * the scalar reference backend (--backend ref) and ask for 1500 tokens: tens
 * of seconds there, whatever faster backend becomes the default. */

static void prompt_of(int i, char *out, size_t cap)
{
    static const char *const who[] = {"Lily", "Tom", "Ben", "Sue", "Max", "Anna", "Sam", "Mia"};
    static const char *const what[] = {"saw a big dog", "found a red ball", "went to the park",
                                       "had a little cat"};
    snprintf(out, cap, "Once upon a time, %s %s", who[i % 8], what[(i / 8) % 4]);
}

/* Concatenated text of a completions SSE body; asserts [DONE] and one finish. */
static char *stream_text(const char *body, const char **finish)
{
    bool done;
    json_t *ev = e2e_sse_events(body, &done);
    cr_expect(done, "stream without [DONE]: %s", body);
    size_t cap = 8192, len = 0;
    char *text = calloc(1, cap);
    size_t i;
    json_t *e;
    *finish = NULL;
    json_array_foreach(ev, i, e)
    {
        json_t *c = json_array_get(json_object_get(e, "choices"), 0);
        const char *t = json_string_value(json_object_get(c, "text"));
        if (t && len + strlen(t) < cap) {
            memcpy(text + len, t, strlen(t));
            len += strlen(t);
        }
        if (json_is_string(json_object_get(c, "finish_reason")))
            *finish = json_string_value(json_object_get(c, "finish_reason"));
    }
    static char fin[32];
    snprintf(fin, sizeof(fin), "%s", *finish ? *finish : "");
    *finish = fin;
    json_decref(ev);
    return text;
}

Test(http_load, concurrent_streams_equal_each_request_alone, .timeout = 300)
{
    struct e2e_daemon d;
    e2e_start(&d, "");
    char *alone[N_CLIENTS], *streamed[N_CLIENTS], stream_bodies[N_CLIENTS][256];
    const char *bodies[N_CLIENTS];
    for (int i = 0; i < N_CLIENTS; i++) {
        char prompt[128], body[256];
        prompt_of(i, prompt, sizeof(prompt));
        snprintf(body, sizeof(body),
                 "{\"prompt\":\"%s\",\"max_tokens\":48,\"temperature\":0,\"stream\":%s}", prompt,
                 "false");
        struct e2e_resp r;
        e2e_http(&d, "POST", "/v1/completions", body, NULL, &r);
        cr_assert_eq(r.status, 200, "%s", r.body);
        alone[i] = strdup(json_string_value(
            json_object_get(json_array_get(json_object_get(r.json, "choices"), 0), "text")));
        e2e_resp_free(&r);
        snprintf(stream_bodies[i], sizeof(stream_bodies[i]),
                 "{\"prompt\":\"%s\",\"max_tokens\":48,\"temperature\":0,\"stream\":true}", prompt);
        bodies[i] = stream_bodies[i];
    }
    /* All 32 at once. */
    e2e_post_at_once(&d, "/v1/completions", bodies, N_CLIENTS, streamed);
    for (int i = 0; i < N_CLIENTS; i++) {
        char *body = streamed[i];
        const char *finish;
        char *text = stream_text(body, &finish);
        cr_expect_str_eq(text, alone[i], "client %d differs from its request alone", i);
        cr_expect_str_neq((char *)finish, "");
        free(text);
        free(body);
        free(alone[i]);
    }
    struct e2e_resp m;
    e2e_http(&d, "GET", "/metrics", NULL, NULL, &m);
    cr_expect_eq(e2e_metric(m.body, "graphserve_http_requests_total{endpoint=\"/v1/completions\","
                                    "status=\"200\"}"),
                 2 * N_CLIENTS);
    cr_expect_eq(e2e_metric(m.body, "graphserve_kv_pages{state=\"used\"}"), 0);
    e2e_resp_free(&m);
    cr_expect_eq(e2e_stop(&d), 0);
}

/* Polls /metrics until nothing runs, waits or holds a page; returns the
 * seconds it took, or a negative number after timeout_s. */
static double wait_idle(const struct e2e_daemon *d, double timeout_s, char **metrics)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        struct e2e_resp m;
        e2e_http(d, "GET", "/metrics", NULL, NULL, &m);
        bool idle = e2e_metric(m.body, "graphserve_requests_running") == 0 &&
                    e2e_metric(m.body, "graphserve_requests_waiting") == 0 &&
                    e2e_metric(m.body, "graphserve_kv_pages{state=\"used\"}") == 0 &&
                    e2e_metric(m.body, "graphserve_requests_in_flight") == 0;
        clock_gettime(CLOCK_MONOTONIC, &t);
        double dt = (double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) * 1e-9;
        if (idle || dt > timeout_s) {
            *metrics = m.body;
            m.body = NULL;
            e2e_resp_free(&m);
            return idle ? dt : -dt;
        }
        e2e_resp_free(&m);
        usleep(100 * 1000);
    }
}

/* Polls /metrics until requests_running and requests_waiting reach the
 * given counts; false after about 100 s (a hang; the suite's timeout is the
 * real bound). */
static bool await_admitted(const struct e2e_daemon *d, double running, double waiting)
{
    for (int i = 0; i < 1000; i++) {
        struct e2e_resp m;
        e2e_http(d, "GET", "/metrics", NULL, NULL, &m);
        bool ok = e2e_metric(m.body, "graphserve_requests_running") == running &&
                  e2e_metric(m.body, "graphserve_requests_waiting") == waiting;
        e2e_resp_free(&m);
        if (ok)
            return true;
        usleep(100 * 1000);
    }
    return false;
}

/* Clients that leave with a reset (SO_LINGER 0), so that they are gone under
 * either reading of a FIN: argv port, go-file, then (path, body-file) pairs.
 * Each sends its request; once go exists, all reset. */
static const char reset_clients_py[] =
    "import os, socket, struct, sys, time\n"
    "port, go, rest = int(sys.argv[1]), sys.argv[2], sys.argv[3:]\n"
    "socks = []\n"
    "for path, body in zip(rest[0::2], rest[1::2]):\n"
    "    data = open(body, 'rb').read()\n"
    "    s = socket.create_connection(('127.0.0.1', port))\n"
    "    s.sendall(b'POST %s HTTP/1.1\\r\\nHost: localhost\\r\\nContent-Type: application/json\\r\\n'\n"
    "              b'Content-Length: %d\\r\\n\\r\\n' % (path.encode(), len(data)) + data)\n"
    "    socks.append(s)\n"
    "end = time.monotonic() + 100\n"
    "while not os.path.exists(go) and time.monotonic() < end:\n"
    "    time.sleep(0.02)\n"
    "for s in socks:\n"
    "    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))\n"
    "    s.close()\n";

/* Two sequences run, the rest queue; once all are admitted, every client
 * goes away with a reset. Each is noticed: all pages come back, every
 * request is counted cancelled, and none ran to its 1500 tokens. */
Test(http_load, disconnected_clients_free_every_page, .timeout = 120)
{
    struct e2e_daemon d;
    e2e_start(&d, "--backend ref --max-seqs 2 --max-batch-tokens 64");
    const char *stream = e2e_body_file("{\"prompt\":\"Once upon a time\",\"max_tokens\":1500,"
                                       "\"ignore_eos\":true,\"stream\":true}");
    char sp[600];
    snprintf(sp, sizeof(sp), "%s", stream);
    const char *whole = e2e_body_file("{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],"
                                      "\"max_tokens\":1500,\"ignore_eos\":true}");
    char py[600], go[600];
    snprintf(py, sizeof(py), "%s/reset_clients-%d.py", gs_test_tmpdir(), getpid());
    snprintf(go, sizeof(go), "%s/reset_go-%d", gs_test_tmpdir(), getpid());
    FILE *f = fopen(py, "w");
    cr_assert(f);
    fputs(reset_clients_py, f);
    fclose(f);
    unlink(go);
    char *cmd;
    cr_assert(asprintf(&cmd,
                       "python3 '%s' %d '%s' /v1/completions %s /v1/completions %s "
                       "/v1/completions %s /v1/completions %s /v1/completions %s "
                       "/v1/completions %s /v1/chat/completions %s /v1/chat/completions %s",
                       py, d.port, go, sp, sp, sp, sp, sp, sp, whole, whole) > 0);
    FILE *bg = popen(cmd, "r");
    cr_assert(bg);
    free(cmd);
    cr_expect(await_admitted(&d, 2, 6), "the 8 requests were not all admitted");
    f = fopen(go, "w");
    cr_assert(f);
    fclose(f);
    cr_expect_eq(pclose(bg), 0, "the client script failed");
    char *metrics;
    double dt = wait_idle(&d, 100.0, &metrics);
    cr_expect_geq(dt, 0, "still busy %.1f s after the clients left:\n%s", -dt, metrics);
    cr_expect_eq(e2e_metric(metrics, "graphserve_cancellations_total"), 8, "%s", metrics);
    cr_expect_geq(e2e_metric(metrics, "graphserve_engine_cancellations_total"), 8, "%s", metrics);
    cr_expect_eq(e2e_metric(metrics, "graphserve_kv_pages{state=\"used\"}"), 0);
    /* Noticed before any stream could have ended on its own. */
    cr_expect_lt(e2e_metric(metrics, "graphserve_generation_tokens_total"), 1500, "%s", metrics);
    free(metrics);
    /* The daemon still serves. */
    struct e2e_resp r;
    e2e_http(&d, "POST", "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":3}", NULL, &r);
    cr_expect_eq(r.status, 200);
    e2e_resp_free(&r);
    cr_expect_eq(e2e_stop(&d), 0);
}

/* SIGTERM with a drain long enough for anything: a stream under way finishes
 * normally, then the daemon exits 0 at once. Nothing here depends on the machine's
 * speed: the drain outlasts the stream however slow it is, and the exit follows
 * its end. */
Test(http_load, sigterm_lets_a_stream_finish_then_exits_0, .timeout = 300)
{
    struct e2e_daemon d;
    e2e_start(&d, "--backend ref --drain-timeout-s 3600");
    char shrt[600];
    snprintf(shrt, sizeof(shrt), "%s",
             e2e_body_file("{\"prompt\":\"Once upon a time\",\"max_tokens\":40,"
                           "\"ignore_eos\":true,\"stream\":true}"));
    char dir[600];
    snprintf(dir, sizeof(dir), "%s/finish-%d", gs_test_tmpdir(), getpid());
    char *cmd;
    cr_assert(asprintf(&cmd,
                       "D=%s; mkdir -p $D; "
                       "curl -sN --max-time %d --data-binary @%s %s/v1/completions > $D/short & "
                       "for i in $(seq %d); do [ -s $D/short ] && break; sleep 0.05; done; "
                       "kill -TERM %d; wait",
                       dir, E2E_HANG_S, shrt, d.url, E2E_HANG_S * 20, (int)d.pid) > 0);
    gs_test_run(cmd, 1, NULL);
    free(cmd);
    int st;
    cr_assert_eq(waitpid(d.pid, &st, 0), d.pid);
    d.pid = 0;
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit status %d", st);
    char path[700];
    snprintf(path, sizeof(path), "%s/short", dir);
    char *body = gs_test_read_file(path, NULL);
    const char *finish;
    char *text = stream_text(body, &finish);
    cr_expect_str_eq((char *)finish, "length", "the stream should finish within the drain: %s",
                     body);
    free(text);
    free(body);
}

/* SIGTERM under load with a short drain: /ready turns 503 on an open connection,
 * a completion asked during the drain gets 503, streams still running when
 * --drain-timeout-s ends get "abort", and the daemon exits 0. (That a stream
 * which ends within the drain finishes normally is the test above: here the
 * drain is shorter than a 1500-token stream on ref, on any machine that runs
 * this suite.) */
Test(http_load, sigterm_drains_then_aborts_and_exits_0, .timeout = 120)
{
    struct e2e_daemon d;
    e2e_start(&d, "--backend ref --drain-timeout-s 2 --max-seqs 4");
    const char *lng = e2e_body_file("{\"prompt\":\"Once upon a time\",\"max_tokens\":1500,"
                                    "\"ignore_eos\":true,\"stream\":true}");
    char lp[600];
    snprintf(lp, sizeof(lp), "%s", lng);
    char dir[600];
    snprintf(dir, sizeof(dir), "%s/drain-%d", gs_test_tmpdir(), getpid());
    /* A client that keeps its connection open across the SIGTERM and then
     * asks for a completion: it must get 503 with Retry-After. It says when
     * it holds its connection (argv[2]) and posts once the signal is sent
     * (argv[3]): an interpreter can take seconds to start on a loaded machine. */
    char py[600];
    snprintf(py, sizeof(py), "%s",
             e2e_body_file("import http.client, os, sys, time\n"
                           "c = http.client.HTTPConnection('127.0.0.1', int(sys.argv[1]))\n"
                           "c.request('GET', '/health'); c.getresponse().read()\n"
                           "open(sys.argv[2], 'w').write('1')\n"
                           "while not os.path.exists(sys.argv[3]): time.sleep(0.05)\n"
                           "time.sleep(0.3)\n"
                           "c.request('POST', '/v1/completions', body='{\"prompt\":\"a\"}',\n"
                           "          headers={'Content-Type': 'application/json'})\n"
                           "r = c.getresponse()\n"
                           "print(r.status, r.getheader('Retry-After'), r.read().decode())\n"));
    char *cmd;
    /* Two long streams and the Python client; once each has
     * been answered (its output file is not empty), /health on a kept-alive
     * connection that asks /ready a second later (curl --rate; its -w lines
     * go to stderr, which curl does not buffer); once /health is answered,
     * the signal. Then /ready and Python's completion fall in
     * the drain. */
    cr_assert(
        asprintf(
            &cmd,
            "D=%s; mkdir -p $D; "
            "await() { for i in $(seq 400); do [ -s \"$1\" ] && return; sleep 0.05; done; }; "
            "for i in 1 2; do curl -sN --max-time 30 --data-binary @%s "
            "%s/v1/completions > $D/long$i & done; "
            "python3 %s %d $D/connected $D/killed > $D/gen503 & "
            "for f in long1 long2 connected; do await $D/$f; done; "
            "curl -s --rate 1/s -o /dev/null -o /dev/null "
            "-w '%%{stderr}%%{http_code} %%{num_connects}\\n' %s/health %s/ready 2> $D/ready & "
            "await $D/ready; "
            "kill -TERM %d; touch $D/killed; wait",
            dir, lp, d.url, py, d.port, d.url, d.url, (int)d.pid) > 0);
    gs_test_run(cmd, 1, NULL);
    free(cmd);
    int st;
    cr_assert_eq(waitpid(d.pid, &st, 0), d.pid);
    d.pid = 0;
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit status %d", st);
    char path[700];
    for (int i = 1; i <= 2; i++) {
        snprintf(path, sizeof(path), "%s/long%d", dir, i);
        char *body = gs_test_read_file(path, NULL);
        const char *finish;
        char *text = stream_text(body, &finish);
        cr_expect_str_eq((char *)finish, "abort", "long stream %d", i);
        cr_expect_gt(strlen(text), 0);
        free(text);
        free(body);
    }
    snprintf(path, sizeof(path), "%s/ready", dir);
    char *body = gs_test_read_file(path, NULL);
    cr_expect(!strncmp(body, "200 1\n503 0\n", 12), "health then ready on one connection: %s",
              body);
    free(body);
    snprintf(path, sizeof(path), "%s/gen503", dir);
    body = gs_test_read_file(path, NULL);
    cr_expect(!strncmp(body, "503 1 ", 6), "a completion during the drain: %s", body);
    cr_expect(strstr(body, "\"service_unavailable\""), "%s", body);
    free(body);
    char *log = gs_test_read_file(d.log_path, NULL);
    cr_expect(!strstr(log, "Sanitizer"), "%s", log);
    free(log);
}

/* CPU time (user + system, in clock ticks) of thread tid of process pid. */
static long thread_ticks(pid_t pid, pid_t tid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)pid, (int)tid);
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s", path);
    char stat[1024];
    size_t n = fread(stat, 1, sizeof(stat) - 1, f);
    fclose(f);
    stat[n] = '\0';
    /* Fields after the command name (which may hold spaces) start after ") ". */
    const char *p = strrchr(stat, ')');
    cr_assert(p);
    long utime = 0, stime = 0;
    cr_assert_eq(
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %ld %ld", &utime, &stime), 2);
    return utime + stime;
}

/* The loop thread's voluntary context switches: how often it went to sleep,
 * which a thread that sleeps until an event comes does once per wake-up. */
static long thread_wakeups(pid_t pid, pid_t tid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task/%d/status", (int)pid, (int)tid);
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s", path);
    char line[256];
    long n = -1;
    while (n < 0 && fgets(line, sizeof(line), f))
        if (!strncmp(line, "voluntary_ctxt_switches:", 24))
            n = strtol(line + 24, NULL, 10);
    fclose(f);
    cr_assert_geq(n, 0, "%s has no voluntary_ctxt_switches", path);
    return n;
}

static double monotonic_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* While four streams wait and the engine makes no token (held by the test
 * gate, GS_TEST_STEP_GATE), the loop thread
 * (the daemon's main thread) sleeps: suspended connections cost no CPU and no
 * wake-ups beyond the loop's once-a-second timers. A loop that polled its
 * suspended connections would wake hundreds of times a second and spend its
 * CPU doing it. Idle is idle on any machine, fast or loaded: the bounds are
 * ten times what the timers need, not a measure of speed. */
Test(http_load, waiting_streams_cost_the_loop_no_cpu, .timeout = 300)
{
    char gate[600];
    snprintf(gate, sizeof(gate), "%s/loopcpu-gate-%d", gs_test_tmpdir(), getpid());
    struct e2e_daemon d;
    e2e_start_gated(&d, "GS_TEST_STEP_GATE", gate,
                    "--backend ref --max-seqs 1 --max-batch-tokens 64 --drain-timeout-s 0");
    const char *body = e2e_body_file("{\"prompt\":\"Once upon a time\",\"max_tokens\":8,"
                                     "\"ignore_eos\":true,\"stream\":true}");
    char *cmd;
    cr_assert(asprintf(&cmd,
                       "for i in 1 2 3 4; do curl -sN --data-binary @%s "
                       "%s/v1/completions >/dev/null & done; wait",
                       body, d.url) > 0);
    FILE *bg = popen(cmd, "r");
    cr_assert(bg);
    free(cmd);
    /* The engine publishes its running and waiting counts after a step, and
     * the gate holds the first: the four are in the daemon once in flight. */
    cr_assert_geq(e2e_await_metric(&d, "graphserve_requests_in_flight", 4), 4,
                  "the four streams did not arrive");
    long ticks0 = thread_ticks(d.pid, d.pid), wakes0 = thread_wakeups(d.pid, d.pid);
    double t0 = monotonic_s(), t1;
    while ((t1 = monotonic_s()) - t0 < 3.0)
        usleep(100 * 1000);
    long ticks = thread_ticks(d.pid, d.pid) - ticks0;
    long wakes = thread_wakeups(d.pid, d.pid) - wakes0;
    double secs = t1 - t0;
    cr_log_info("loop thread while 4 streams wait %.1f s: %ld wake-ups, %ld CPU ticks", secs, wakes,
                ticks);
    /* Two 1 s timers (the dead-peer tick and the deadline sweep): 2 wake-ups a second. */
    cr_expect_leq((double)wakes, 20.0 * secs + 10, "the loop woke %ld times in %.1f s", wakes, secs);
    cr_expect_leq((double)ticks, 0.1 * secs * (double)sysconf(_SC_CLK_TCK) + 2,
                  "the loop used %ld CPU ticks in %.1f s", ticks, secs);
    /* The streams go on once the engine does, and end with the daemon (no drain time). */
    unlink(gate);
    cr_expect_eq(e2e_stop(&d), 0);
    pclose(bg);
}
