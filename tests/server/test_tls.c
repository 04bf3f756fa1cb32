/*
 * tests/server/test_tls.c - HTTPS on the real daemon: a test CA, a server
 * certificate and client certificates made here with the openssl program;
 * curl over https end to end (plain and streaming), the TLS policy (1.2
 * minimum, AEAD only), client certificates required and refused, a plain-HTTP
 * request and garbage handshakes refused while another connection in
 * progress is unharmed, the handshake timeout and the handshake cap, a
 * SIGHUP reload that swaps the API key while a stream continues over TLS,
 * the client's address in logs and per-IP limits, large bodies with a slow
 * reader, the drain's last bytes, and TLS on a socket passed by systemd.
 *
 * The connection kept in progress is an mbedTLS client in this process, so
 * the test controls exactly when each byte is sent.
 */
#define _GNU_SOURCE
#include "tests/common/testutil.h"
#include "tests/server/e2e.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/net_sockets.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char certs[512]; /* ca.pem, srv.{pem,key}, cli.{pem,key}, rogue.{pem,key} */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A CA; a server certificate for 127.0.0.1 signed by it; a client
 * certificate signed by it; and a client certificate from another CA. */
static void make_certs(void)
{
    snprintf(certs, sizeof(certs), "%s/certs-%d", gs_test_tmpdir(), getpid());
    char *cmd;
    cr_assert(asprintf(&cmd,
                       "set -e; mkdir -p '%s'; cd '%s'; "
                       "K='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes'; "
                       "openssl req -x509 $K -keyout ca.key -out ca.pem -days 2 -subj '/CN=gs test CA'; "
                       "openssl req -x509 $K -keyout rca.key -out rca.pem -days 2 -subj '/CN=rogue CA'; "
                       "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > san.cnf; "
                       "openssl req $K -keyout srv.key -out srv.csr -subj '/CN=localhost'; "
                       "openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
                       "  -out srv.pem -days 2 -extfile san.cnf; "
                       "openssl req $K -keyout cli.key -out cli.csr -subj '/CN=client'; "
                       "openssl x509 -req -in cli.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
                       "  -out cli.pem -days 2; "
                       "openssl req $K -keyout rogue.key -out rogue.csr -subj '/CN=rogue'; "
                       "openssl x509 -req -in rogue.csr -CA rca.pem -CAkey rca.key -CAcreateserial "
                       "  -out rogue.pem -days 2",
                       certs, certs) > 0);
    char *out = NULL;
    int rc = gs_test_run(cmd, 1, &out);
    cr_assert_eq(rc, 0, "openssl failed: %s", out);
    free(out);
    free(cmd);
}

/* The daemon with the server certificate plus extra arguments. */
static void start_tls(struct e2e_daemon *d, const char *extra)
{
    char *args;
    cr_assert(asprintf(&args, "--tls-cert '%s/srv.pem' --tls-key '%s/srv.key' %s", certs, certs,
                       extra) > 0);
    e2e_start(d, args);
    free(args);
    cr_assert(!strncmp(d->url, "https://", 8), "the daemon did not announce https: %s", d->url);
}

static int tcp_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0, "connect: %s", strerror(errno));
    return fd;
}

/* A TCP connection from the loopback address src (e.g. "127.0.0.2") that
 * sends nothing. */
static int tcp_connect_from(int port, const char *src)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    cr_assert(fd >= 0);
    struct sockaddr_in b = {.sin_family = AF_INET};
    cr_assert_eq(inet_pton(AF_INET, src, &b.sin_addr), 1);
    cr_assert_eq(bind(fd, (struct sockaddr *)&b, sizeof(b)), 0, "bind %s: %s", src,
                 strerror(errno));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0, "connect: %s", strerror(errno));
    return fd;
}

/* Whether the server has closed fd already (a FIN or a reset is waiting);
 * does not wait. */
static bool closed_by_server(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, 0) == 1;
}

/* Reads until the peer closes (returns bytes read into buf, NUL-terminated)
 * or timeout_s passes (returns -1). A reset counts as closed. */
static long read_until_closed(int fd, char *buf, size_t cap, double timeout_s)
{
    size_t n = 0;
    double end = now_s() + timeout_s;
    for (;;) {
        int left_ms = (int)((end - now_s()) * 1000);
        if (left_ms <= 0)
            return -1;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, left_ms) <= 0)
            continue;
        ssize_t r = recv(fd, buf + n, cap - 1 - n, 0);
        if (r <= 0) {
            buf[n] = '\0';
            return (long)n;
        }
        n += (size_t)r;
        if (n == cap - 1)
            n = 0; /* only the end matters */
    }
}

/* ---- a minimal blocking mbedTLS client ------------------------------------------------- */

struct tls_client {
    mbedtls_net_context net;
    mbedtls_ssl_context ssl;
    mbedtls_ssl_config conf;
    mbedtls_x509_crt ca;
    mbedtls_entropy_context entropy;
    mbedtls_ctr_drbg_context drbg;
};

static void tls_client_open(struct tls_client *c, int port)
{
    mbedtls_net_init(&c->net);
    mbedtls_ssl_init(&c->ssl);
    mbedtls_ssl_config_init(&c->conf);
    mbedtls_x509_crt_init(&c->ca);
    mbedtls_entropy_init(&c->entropy);
    mbedtls_ctr_drbg_init(&c->drbg);
    cr_assert_eq(mbedtls_ctr_drbg_seed(&c->drbg, mbedtls_entropy_func, &c->entropy, NULL, 0), 0);
    char ca[600];
    snprintf(ca, sizeof(ca), "%s/ca.pem", certs);
    cr_assert_eq(mbedtls_x509_crt_parse_file(&c->ca, ca), 0);
    cr_assert_eq(mbedtls_ssl_config_defaults(&c->conf, MBEDTLS_SSL_IS_CLIENT,
                                             MBEDTLS_SSL_TRANSPORT_STREAM,
                                             MBEDTLS_SSL_PRESET_DEFAULT),
                 0);
    mbedtls_ssl_conf_authmode(&c->conf, MBEDTLS_SSL_VERIFY_REQUIRED);
    mbedtls_ssl_conf_ca_chain(&c->conf, &c->ca, NULL);
    mbedtls_ssl_conf_rng(&c->conf, mbedtls_ctr_drbg_random, &c->drbg);
    cr_assert_eq(mbedtls_ssl_setup(&c->ssl, &c->conf), 0);
    cr_assert_eq(mbedtls_ssl_set_hostname(&c->ssl, "localhost"), 0);
    c->net.fd = tcp_connect(port);
    mbedtls_ssl_set_bio(&c->ssl, &c->net, mbedtls_net_send, mbedtls_net_recv, NULL);
    int r = mbedtls_ssl_handshake(&c->ssl);
    cr_assert_eq(r, 0, "handshake: -0x%04x", (unsigned)-r);
}

static void tls_client_send(struct tls_client *c, const char *s)
{
    size_t n = strlen(s), off = 0;
    while (off < n) {
        int r = mbedtls_ssl_write(&c->ssl, (const unsigned char *)s + off, n - off);
        cr_assert(r > 0, "ssl_write: -0x%04x", (unsigned)-r);
        off += (size_t)r;
    }
}

/* Reads a response with Connection: close until the server ends it. */
static char *tls_client_read_all(struct tls_client *c)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    cr_assert(buf);
    for (;;) {
        int r = mbedtls_ssl_read(&c->ssl, (unsigned char *)buf + n, cap - 1 - n);
        if (r <= 0)
            break;
        n += (size_t)r;
        cr_assert(n < cap - 1, "response too long");
    }
    buf[n] = '\0';
    return buf;
}

static void tls_client_close(struct tls_client *c)
{
    mbedtls_ssl_close_notify(&c->ssl);
    mbedtls_net_free(&c->net);
    mbedtls_ssl_free(&c->ssl);
    mbedtls_ssl_config_free(&c->conf);
    mbedtls_x509_crt_free(&c->ca);
    mbedtls_ctr_drbg_free(&c->drbg);
    mbedtls_entropy_free(&c->entropy);
}

/* ---- tests -------------------------------------------------------------------------------- */

TestSuite(tls, .init = make_certs, .timeout = 120);

Test(tls, curl_https_end_to_end)
{
    struct e2e_daemon d;
    start_tls(&d, "");
    char ca[600];
    snprintf(ca, sizeof(ca), "--cacert '%s/ca.pem'", certs);
    struct e2e_resp r;
    e2e_http(&d, "GET", "/health", NULL, ca, &r);
    cr_expect_eq(r.status, 200);
    cr_expect_str_eq(json_string_value(json_object_get(r.json, "status")), "ok");
    e2e_resp_free(&r);
    e2e_http(&d, "POST", "/v1/completions",
             "{\"prompt\":\"Once upon a time\",\"max_tokens\":24,\"temperature\":0}", ca, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    const char *text =
        json_string_value(json_object_get(json_array_get(json_object_get(r.json, "choices"), 0),
                                          "text"));
    cr_expect(text && strlen(text) > 10, "completion text: %s", r.body);
    e2e_resp_free(&r);
    /* A stream long enough to span many TLS records. */
    e2e_http(&d, "POST", "/v1/chat/completions",
             "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell me a story\"}],"
             "\"max_tokens\":300,\"ignore_eos\":true,\"stream\":true,"
             "\"stream_options\":{\"include_usage\":true}}",
             ca, &r);
    cr_assert_eq(r.status, 200, "%s", r.body);
    bool done;
    json_t *ev = e2e_sse_events(r.body, &done);
    cr_expect(done, "no [DONE] over TLS");
    json_t *last = json_array_get(ev, json_array_size(ev) - 1);
    cr_expect_eq(json_integer_value(
                     json_object_get(json_object_get(last, "usage"), "completion_tokens")),
                 300);
    json_decref(ev);
    e2e_resp_free(&r);
    /* Without the CA, curl refuses the self-made certificate: it is TLS for real. */
    char *out = NULL;
    char *cmd;
    cr_assert(asprintf(&cmd, "curl -sS --max-time 10 %s/health", d.url) > 0);
    cr_expect_neq(gs_test_run(cmd, 1, &out), 0, "curl trusted an unknown CA: %s", out);
    free(out);
    free(cmd);
    cr_expect_eq(e2e_stop(&d), 0);
}

/* TLS 1.2 at least, AEAD suites only, checked with openssl's client. */
Test(tls, policy_tls12_minimum_aead_only)
{
    struct e2e_daemon d;
    start_tls(&d, "");
    static const struct {
        const char *args;
        bool ok;
    } cases[] = {
        {"-tls1_2", true},
        {"-tls1_2 -cipher ECDHE-ECDSA-AES128-GCM-SHA256", true},
        {"-tls1_2 -cipher ECDHE-ECDSA-CHACHA20-POLY1305", true},
        {"-tls1_1 -cipher ALL:@SECLEVEL=0", false},
        {"-tls1_2 -cipher ECDHE-ECDSA-AES128-SHA256:ECDHE-ECDSA-AES256-SHA", false}, /* CBC */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *cmd, *out = NULL;
        cr_assert(asprintf(&cmd,
                           "openssl s_client -connect 127.0.0.1:%d -CAfile '%s/ca.pem' %s "
                           "-verify_return_error -brief </dev/null",
                           d.port, certs, cases[i].args) > 0);
        int rc = gs_test_run(cmd, 1, &out);
        if (cases[i].ok) {
            cr_expect_eq(rc, 0, "%s: refused: %s", cases[i].args, out);
            cr_expect(strstr(out, "Protocol version: TLSv1.2"), "%s: %s", cases[i].args, out);
            cr_expect(strstr(out, "GCM") || strstr(out, "CHACHA20"), "%s: not AEAD: %s",
                      cases[i].args, out);
        } else {
            cr_expect(rc != 0 || !strstr(out, "Protocol version"), "%s: accepted: %s",
                      cases[i].args, out);
        }
        free(out);
        free(cmd);
    }
    cr_expect_eq(e2e_stop(&d), 0);
}

Test(tls, client_certificate_required_and_refused)
{
    struct e2e_daemon d;
    char extra[700];
    snprintf(extra, sizeof(extra), "--tls-client-ca '%s/ca.pem'", certs);
    start_tls(&d, extra);
    static const struct {
        const char *who; /* cert/key base name, NULL: no certificate */
        bool ok;
    } cases[] = {{"cli", true}, {NULL, false}, {"rogue", false}};
    for (size_t i = 0; i < 3; i++) {
        char *cmd, *out = NULL;
        char cert[1400] = "";
        if (cases[i].who)
            snprintf(cert, sizeof(cert), "--cert '%s/%s.pem' --key '%s/%s.key'", certs,
                     cases[i].who, certs, cases[i].who);
        cr_assert(asprintf(&cmd,
                           "curl -sS --max-time 100 --cacert '%s/ca.pem' %s -o /dev/null "
                           "-w '%%{http_code}' %s/health",
                           certs, cert, d.url) > 0);
        int rc = gs_test_run(cmd, 1, &out);
        if (cases[i].ok)
            cr_expect(rc == 0 && strstr(out, "200"), "client cert refused: %s", out);
        else
            cr_expect(rc != 0 && !strstr(out, "200"), "%s: accepted: %s",
                      cases[i].who ? cases[i].who : "no certificate", out);
        free(out);
        free(cmd);
    }
    cr_expect_eq(e2e_stop(&d), 0);
}

/* While a TLS connection is half-way through a request: a plain-HTTP request
 * gets a plain 400 and is closed, garbage and a broken ClientHello are
 * closed without an HTTP answer, and then the first connection completes. */
Test(tls, plain_http_and_garbage_refused_without_harm)
{
    struct e2e_daemon d;
    start_tls(&d, "");
    struct tls_client c;
    tls_client_open(&c, d.port);
    tls_client_send(&c, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n");

    char buf[4096];
    int fd = tcp_connect(d.port);
    const char plain[] = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    cr_assert_eq(send(fd, plain, sizeof(plain) - 1, 0), (ssize_t)sizeof(plain) - 1);
    long n = read_until_closed(fd, buf, sizeof(buf), 100);
    cr_expect(n > 0 && strstr(buf, "400 Bad Request") && strstr(buf, "HTTPS"),
              "plain HTTP got: %s", n >= 0 ? buf : "(not closed)");
    close(fd);

    static const unsigned char garbage[][12] = {
        {'\x00', '\xff', 'z', 'q', '\x13', '\x37', 0, 1, 2, 3, 4, 5},
        /* a handshake record header with a nonsense body */
        {0x16, 0x03, 0x01, 0x00, 0x07, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee, 0xee},
    };
    for (size_t i = 0; i < 2; i++) {
        fd = tcp_connect(d.port);
        cr_assert_eq(send(fd, garbage[i], sizeof(garbage[i]), 0), (ssize_t)sizeof(garbage[i]));
        n = read_until_closed(fd, buf, sizeof(buf), 100);
        cr_expect(n >= 0, "garbage %zu: the connection stayed open", i);
        cr_expect(n < 0 || !strstr(buf, "HTTP/"), "garbage %zu got an HTTP answer", i);
        close(fd);
    }

    tls_client_send(&c, "Connection: close\r\n\r\n");
    char *resp = tls_client_read_all(&c);
    cr_expect(strstr(resp, "HTTP/1.1 200") && strstr(resp, "\"status\":\"ok\""),
              "the connection in progress was harmed: %s", resp);
    free(resp);
    tls_client_close(&c);
    /* /metrics counts them: the plain request and both garbage openings. */
    char ca[600];
    snprintf(ca, sizeof(ca), "--cacert '%s/ca.pem'", certs);
    struct e2e_resp r;
    e2e_http(&d, "GET", "/metrics", NULL, ca, &r);
    cr_expect_eq(e2e_metric(r.body, "graphserve_tls_handshakes_total{result=\"refused\"}"), 3,
                 "%s", r.body);
    cr_expect_eq(e2e_metric(r.body, "graphserve_tls_handshakes_total{result=\"ok\"}"), 2);
    cr_expect_eq(e2e_metric(r.body, "graphserve_tls_handshakes_in_progress"), 0);
    e2e_resp_free(&r);
    cr_expect_eq(e2e_stop(&d), 0);
}

/* A client that connects and sends nothing, or half a ClientHello, is
 * dropped after --tls-handshake-timeout-s and counted as a timeout. The wait
 * is bounded only by the suite's timeout, so a slow machine cannot fail it. */
Test(tls, handshake_timeout_drops_stalled_clients)
{
    struct e2e_daemon d;
    start_tls(&d, "--tls-handshake-timeout-s 1");
    int idle = tcp_connect(d.port);
    int half = tcp_connect(d.port);
    const unsigned char hello_start[] = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01};
    cr_assert_eq(send(half, hello_start, sizeof(hello_start), 0), (ssize_t)sizeof(hello_start));
    char buf[256];
    long n1 = read_until_closed(idle, buf, sizeof(buf), 100);
    long n2 = read_until_closed(half, buf, sizeof(buf), 100);
    cr_expect(n1 == 0 && n2 == 0, "a stalled handshake was not dropped (%ld, %ld)", n1, n2);
    close(idle);
    close(half);
    char ca[600];
    snprintf(ca, sizeof(ca), "--cacert '%s/ca.pem'", certs);
    struct e2e_resp r;
    e2e_http(&d, "GET", "/metrics", NULL, ca, &r);
    cr_expect_eq(e2e_metric(r.body, "graphserve_tls_handshakes_total{result=\"timeout\"}"), 2,
                 "%s", r.body);
    cr_expect_eq(e2e_metric(r.body, "graphserve_tls_handshakes_total{result=\"refused\"}"), 0);
    cr_expect_eq(e2e_metric(r.body, "graphserve_tls_handshakes_total{result=\"evicted\"}"), 0);
    e2e_resp_free(&r);
    cr_expect_eq(e2e_stop(&d), 0);
}

#define N_SILENT 100

/* curl's /health over https, --max-time 60: with the handshake timeout at
 * 300 s, a client left waiting behind silent connections fails here. */
static void expect_curl_served(const struct e2e_daemon *d)
{
    char *cmd, *out = NULL;
    cr_assert(asprintf(&cmd,
                       "curl -sS --max-time 60 --cacert '%s/ca.pem' -o /dev/null "
                       "-w '%%{http_code}' %s/health",
                       certs, d->url) > 0);
    int rc = gs_test_run(cmd, 1, &out);
    cr_expect(rc == 0 && !strcmp(out, "200"), "a real client was starved: rc %d, %s", rc, out);
    free(out);
    free(cmd);
}

/* 100 silent connections from 127.0.0.2 could take all 64 handshake slots;
 * --max-tls-handshakes-per-ip (default 8) keeps that address to 8, each
 * newer one evicting its oldest, so a client from 127.0.0.1 finds a slot
 * free at once instead of waiting out the 300 s handshake timeout. */
Test(tls, handshakes_capped_per_client_address)
{
    struct e2e_daemon d;
    start_tls(&d, "--tls-handshake-timeout-s 300");
    int fds[N_SILENT];
    for (int i = 0; i < N_SILENT; i++)
        fds[i] = tcp_connect_from(d.port, "127.0.0.2");
    expect_curl_served(&d);
    /* The daemon accepts in arrival order, so all 100 were taken before
     * curl's connection: the oldest 92 are closed, the newest 8 wait. */
    int n_closed = 0;
    for (int i = 0; i < N_SILENT; i++)
        n_closed += closed_by_server(fds[i]);
    cr_expect_eq(n_closed, N_SILENT - 8);
    for (int i = N_SILENT - 8; i < N_SILENT; i++)
        cr_expect(!closed_by_server(fds[i]), "connection %d (of the newest) was closed", i);
    char ca[600];
    snprintf(ca, sizeof(ca), "--cacert '%s/ca.pem'", certs);
    struct e2e_resp r;
    e2e_http(&d, "GET", "/metrics", NULL, ca, &r);
    cr_expect_eq(e2e_metric(r.body, "graphserve_tls_handshakes_total{result=\"evicted\"}"),
                 N_SILENT - 8, "%s", r.body);
    cr_expect_eq(e2e_metric(r.body, "graphserve_tls_handshakes_in_progress"), 8);
    cr_expect_eq(e2e_metric(r.body, "graphserve_tls_handshakes_total{result=\"refused\"}"), 0);
    e2e_resp_free(&r);
    for (int i = 0; i < N_SILENT; i++)
        close(fds[i]);
    cr_expect_eq(e2e_stop(&d), 0);
}

/* All --max-tls-handshakes slots taken by silent connections from the
 * client's own address (4 slots, under the per-address cap of 8): a new
 * connection evicts the one that has waited longest, so curl is served at
 * once, and only the newest silent ones still wait. */
Test(tls, full_handshake_slots_evict_the_oldest)
{
    struct e2e_daemon d;
    start_tls(&d, "--tls-handshake-timeout-s 300 --max-tls-handshakes 4");
    int fds[N_SILENT];
    for (int i = 0; i < N_SILENT; i++)
        fds[i] = tcp_connect(d.port);
    expect_curl_served(&d);
    /* 96 evicted by the silent ones that followed, one more by curl. */
    for (int i = 0; i < N_SILENT - 3; i++)
        cr_expect(closed_by_server(fds[i]), "connection %d (of the oldest) is still open", i);
    for (int i = N_SILENT - 3; i < N_SILENT; i++)
        cr_expect(!closed_by_server(fds[i]), "connection %d (of the newest) was closed", i);
    char ca[600];
    snprintf(ca, sizeof(ca), "--cacert '%s/ca.pem'", certs);
    struct e2e_resp r;
    e2e_http(&d, "GET", "/metrics", NULL, ca, &r);
    cr_expect_eq(e2e_metric(r.body, "graphserve_tls_handshakes_total{result=\"evicted\"}"),
                 N_SILENT - 3, "%s", r.body);
    cr_expect_eq(e2e_metric(r.body, "graphserve_tls_handshakes_in_progress"), 3);
    cr_expect_eq(e2e_metric(r.body, "graphserve_tls_handshakes_total{result=\"timeout\"}"), 0);
    e2e_resp_free(&r);
    for (int i = 0; i < N_SILENT; i++)
        close(fds[i]);
    cr_expect_eq(e2e_stop(&d), 0);
}

/* A client that sends a whole request and then finishes sending, with a
 * bare TCP FIN or with a close_notify first, has only half-closed: it still
 * gets the whole answer, and the relay ends when the daemon closes. */
Test(tls, half_closed_client_gets_the_whole_answer)
{
    struct e2e_daemon d;
    start_tls(&d, "");
    signal(SIGPIPE, SIG_IGN); /* a relay that closed early must fail the test, not kill it */
    for (int with_close_notify = 0; with_close_notify < 2; with_close_notify++) {
        struct tls_client c;
        tls_client_open(&c, d.port);
        tls_client_send(&c, "GET /v1/models HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
        if (with_close_notify)
            cr_assert_eq(mbedtls_ssl_close_notify(&c.ssl), 0);
        cr_assert_eq(shutdown(c.net.fd, SHUT_WR), 0);
        char *resp = tls_client_read_all(&c);
        const char *body = strstr(resp, "\r\n\r\n");
        const char *cl = strcasestr(resp, "content-length:");
        cr_expect(!strncmp(resp, "HTTP/1.1 200", 12) && body && cl,
                  "half-close%s: no answer: '%s'", with_close_notify ? " (close_notify)" : "",
                  resp);
        if (body && cl)
            cr_expect_eq((long)strlen(body + 4), atol(cl + 15), "a truncated answer: '%s'", resp);
        free(resp);
        tls_client_close(&c);
    }
    /* The relay closed each one when the daemon did. */
    char ca[600];
    snprintf(ca, sizeof(ca), "--cacert '%s/ca.pem'", certs);
    struct e2e_resp r;
    e2e_http(&d, "GET", "/metrics", NULL, ca, &r);
    cr_expect_eq(e2e_metric(r.body, "graphserve_tls_connections_open"), 1, "%s", r.body);
    e2e_resp_free(&r);
    cr_expect_eq(e2e_stop(&d), 0);
}

/* A shell function: await FILE [PATTERN] polls until FILE exists (and
 * holds PATTERN), for up to 100 s; the test's own timeout is the real
 * bound, this only keeps a hung wait from outliving the test. */
#define AWAIT_SH                                                                                   \
    "await() { for i in $(seq 2000); do [ -s \"$1\" ] && { [ -z \"$2\" ] || "                      \
    "grep -q -- \"$2\" \"$1\"; } && return 0; sleep 0.05; done; return 1; }; "

/* SIGHUP with a new key in the config file: a stream admitted with the old
 * key runs on to [DONE]; meanwhile the old key is refused and the new one
 * accepted. The stream is over TLS. The engine is held by the daemon's test
 * gate (GS_TEST_STEP_GATE) from before the stream is admitted until the
 * checks are done, so the overlap holds by construction on a machine of any
 * speed; the daemon's log proves it: no completion is logged until then. The
 * suite's timeout is for a genuine hang. */
Test(tls, sighup_swaps_api_key_while_stream_continues)
{
    char cfg[600];
    snprintf(cfg, sizeof(cfg), "%s/reload-%d.json", gs_test_tmpdir(), getpid());
    FILE *f = fopen(cfg, "w");
    cr_assert(f);
    fputs("{\"api_key\": [\"old-key\"]}\n", f);
    fclose(f);
    char dir[600], gate[700];
    snprintf(dir, sizeof(dir), "%s/reload-%d", gs_test_tmpdir(), getpid());
    snprintf(gate, sizeof(gate), "%s/gate", dir);
    cr_assert(mkdir(dir, 0700) == 0 || errno == EEXIST);
    struct e2e_daemon d;
    char extra[800];
    snprintf(extra, sizeof(extra), "--config '%s' --backend ref --max-seqs 1", cfg);
    setenv("GS_TEST_STEP_GATE", gate, 1);
    start_tls(&d, extra);
    unsetenv("GS_TEST_STEP_GATE");
    f = fopen(gate, "w"); /* closed from the start: the known-answer check ran before */
    cr_assert(f);
    fclose(f);
    const char *body = e2e_body_file("{\"prompt\":\"Once upon a time\",\"max_tokens\":40,"
                                     "\"ignore_eos\":true,\"stream\":true}");
    char *cmd;
    const char *c = "curl -s --max-time 60 --cacert";
    cr_assert(asprintf(&cmd,
                       AWAIT_SH "D=%s; "
                       "curl -s --cacert '%s/ca.pem' -N -D $D/headers -H 'Authorization: Bearer "
                       "old-key' --data-binary @%s %s/v1/completions > $D/stream & "
                       "await $D/headers ' 200' || echo 'the stream was not admitted' > $D/error; "
                       "echo '{\"api_key\": [\"new-key\"]}' > %s; kill -HUP %d; "
                       "await '%s' event=config_reload || echo 'no reload logged' >> $D/error; "
                       "%s '%s/ca.pem' -o /dev/null -w '%%{http_code}' -H 'Authorization: Bearer "
                       "old-key' %s/v1/models > $D/old; "
                       "%s '%s/ca.pem' -o /dev/null -w '%%{http_code}' -H 'Authorization: Bearer "
                       "new-key' %s/v1/models > $D/new; "
                       "grep -c 'path=/v1/completions' '%s' > $D/completions_at_checks; "
                       "rm -f '%s'; wait",
                       dir, certs, body, d.url, cfg, (int)d.pid, d.log_path, c, certs, d.url, c,
                       certs, d.url, d.log_path, gate) > 0);
    gs_test_run(cmd, 1, NULL);
    free(cmd);
    char p[700];
#define READ(name) (snprintf(p, sizeof(p), "%s/" name, dir), gs_test_read_file(p, NULL))
    snprintf(p, sizeof(p), "%s/error", dir);
    cr_assert(access(p, F_OK) != 0, "%s", (char *)READ("error"));
    char *old_code = READ("old"), *new_code = READ("new"), *stream = READ("stream");
    char *at_checks = READ("completions_at_checks");
#undef READ
    cr_expect_str_eq(old_code, "401", "the old key still works after SIGHUP");
    cr_expect_str_eq(new_code, "200", "the new key is refused after SIGHUP");
    cr_expect_eq(atoi(at_checks), 0, "the stream ended before the checks: no overlap with the "
                 "reload");
    bool done;
    json_t *ev = e2e_sse_events(stream, &done);
    cr_expect(done, "the stream admitted before the reload did not complete");
    cr_expect_geq(json_array_size(ev), 40u, "a stream of 40 tokens");
    json_t *last = json_array_get(ev, json_array_size(ev) - 1);
    const char *finish = json_string_value(
        json_object_get(json_array_get(json_object_get(last, "choices"), 0), "finish_reason"));
    cr_expect(finish && !strcmp(finish, "length"), "stream finish: %s",
              finish ? finish : "(none)");
    json_decref(ev);
    free(old_code);
    free(new_code);
    free(stream);
    free(at_checks);
    size_t n;
    char *log;
    cr_expect_eq(e2e_stop(&d), 0);
    log = gs_test_read_file(d.log_path, &n);
    cr_expect(strstr(log, "event=config_reload") && strstr(log, "api-key"),
              "no reload line naming api-key in the log:\n%s", log);
    free(log);
}

/* libmicrohttpd sees each TLS client's own address: the request log names
 * it, and --max-conns-per-ip counts TLS connections per client (a third
 * connection from 127.0.0.1 is refused while two are open, and served once
 * one of them closes). */
Test(tls, client_address_reaches_log_and_per_ip_limit)
{
    struct e2e_daemon d;
    start_tls(&d, "--max-conns-per-ip 2");
    struct tls_client a, b;
    tls_client_open(&a, d.port);
    tls_client_open(&b, d.port);
    tls_client_send(&a, "GET /health HTTP/1.1\r\nHost: localhost\r\n");
    tls_client_send(&b, "GET /health HTTP/1.1\r\nHost: localhost\r\n");
    char *cmd, *out = NULL;
    cr_assert(asprintf(&cmd,
                       "curl -sS --max-time 100 --cacert '%s/ca.pem' -o /dev/null "
                       "-w '%%{http_code}' %s/health",
                       certs, d.url) > 0);
    int rc = gs_test_run(cmd, 1, &out);
    cr_expect(rc != 0 && !strstr(out, "200"), "a third connection from one address: %s", out);
    free(out);
    tls_client_send(&a, "Connection: close\r\n\r\n");
    char *resp = tls_client_read_all(&a);
    cr_expect(strstr(resp, "HTTP/1.1 200"), "%s", resp);
    free(resp);
    tls_client_close(&a);
    bool served = false;
    for (int i = 0; i < 1000 && !served; i++) { /* until the slot is back; 100 s at most */
        out = NULL;
        served = gs_test_run(cmd, 1, &out) == 0 && strstr(out, "200");
        free(out);
        if (!served)
            usleep(100 * 1000);
    }
    cr_expect(served, "no connection slot came back after a client left");
    free(cmd);
    tls_client_close(&b);
    cr_expect_eq(e2e_stop(&d), 0);
    char *log = gs_test_read_file(d.log_path, NULL);
    cr_expect(strstr(log, "event=request") && strstr(log, "client=127.0.0.1 method=GET"),
              "the request log does not name the TLS client:\n%s", log);
    free(log);
}

/* About 1 MB up and 6 MB down through the relay, with curl reading slowly
 * (--limit-rate), so that both directions fill their buffers and wait: the
 * pieces /tokenize returns must spell the text exactly. */
Test(tls, large_bodies_with_a_slow_reader_arrive_intact)
{
    struct e2e_daemon d;
    start_tls(&d, "");
    static const char *const words[] = {"Once", "upon", "a", "time", "there", "was", "a",
                                        "little", "girl", "named", "Lily", "."};
    size_t cap = 1 << 20, n = 0;
    char *text = malloc(cap);
    cr_assert(text);
    for (unsigned i = 0; n + 16 < cap - 64; i++)
        n += (size_t)snprintf(text + n, cap - n, "%s%s", i ? " " : "",
                              words[(i * 7u + i / 13u) % 12u]);
    json_t *body = json_pack("{s:s, s:b}", "content", text, "with_pieces", 1);
    char *s = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    const char *path = e2e_body_file(s);
    free(s);
    char out_path[600];
    snprintf(out_path, sizeof(out_path), "%s/large-%d.json", gs_test_tmpdir(), getpid());
    char *cmd, *out = NULL;
    cr_assert(asprintf(&cmd,
                       "curl -sS --max-time 100 --limit-rate 4M --cacert '%s/ca.pem' "
                       "--data-binary @%s -o %s -w '%%{http_code}' %s/tokenize",
                       certs, path, out_path, d.url) > 0);
    cr_assert_eq(gs_test_run(cmd, 1, &out), 0, "%s", out);
    cr_expect_str_eq(out, "200");
    json_t *resp = json_load_file(out_path, 0, NULL);
    cr_assert(resp, "the response is not JSON (truncated or corrupted)");
    json_t *toks = json_object_get(resp, "tokens");
    size_t len = 0;
    char *joined = malloc(cap + 8);
    cr_assert(joined);
    for (size_t i = 0; i < json_array_size(toks); i++) {
        const char *piece = json_string_value(json_object_get(json_array_get(toks, i), "piece"));
        cr_assert(piece && len + strlen(piece) < cap + 8);
        memcpy(joined + len, piece, strlen(piece));
        len += strlen(piece);
    }
    joined[len] = '\0';
    cr_expect_gt(json_array_size(toks), 100000u);
    /* The tokenizer adds one leading space to the text. */
    cr_expect(len == n + 1 && !strcmp(joined + 1, text), "the pieces do not spell the text (%zu "
              "vs %zu bytes)", len, n);
    json_decref(resp);
    free(joined);
    free(text);
    free(out);
    free(cmd);
    cr_expect_eq(e2e_stop(&d), 0);
}

/* SIGTERM during a TLS stream (sent once its first tokens have arrived):
 * after --drain-timeout-s the stream ends with finish_reason "abort" and
 * [DONE], and those last bytes, written just before the daemon closes
 * everything, still reach the client through the relay; the daemon exits 0.
 * The slower the machine, the surer the abort; the stream is not bounded by
 * curl, since it ends a second after the signal on any machine. */
Test(tls, drain_delivers_the_last_bytes_of_a_stream)
{
    struct e2e_daemon d;
    start_tls(&d, "--backend ref --drain-timeout-s 1 --max-seqs 1");
    const char *body = e2e_body_file("{\"prompt\":\"Once upon a time\",\"max_tokens\":1500,"
                                     "\"ignore_eos\":true,\"stream\":true}");
    char out_path[600];
    snprintf(out_path, sizeof(out_path), "%s/drain-%d.txt", gs_test_tmpdir(), getpid());
    char *cmd;
    cr_assert(asprintf(&cmd,
                       AWAIT_SH "curl -sN --cacert '%s/ca.pem' --data-binary @%s "
                       "%s/v1/completions > %s & await %s 'data: '; kill -TERM %d; wait",
                       certs, body, d.url, out_path, out_path, (int)d.pid) > 0);
    gs_test_run(cmd, 1, NULL);
    free(cmd);
    int st;
    cr_assert_eq(waitpid(d.pid, &st, 0), d.pid);
    d.pid = 0;
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit status %d", st);
    char *stream = gs_test_read_file(out_path, NULL);
    bool done;
    json_t *ev = e2e_sse_events(stream, &done);
    cr_expect(done, "no [DONE] after the drain: ...%s",
              stream + (strlen(stream) > 300 ? strlen(stream) - 300 : 0));
    const char *finish = NULL;
    for (size_t i = 0; i < json_array_size(ev) && !finish; i++)
        finish = json_string_value(json_object_get(
            json_array_get(json_object_get(json_array_get(ev, i), "choices"), 0),
            "finish_reason"));
    cr_expect(finish && !strcmp(finish, "abort"), "finish_reason %s", finish ? finish : "none");
    json_decref(ev);
    free(stream);
}

/* Socket activation with TLS, as deploy/systemd runs it: the daemon serves
 * HTTPS on the listening socket it is passed as descriptor 3 (LISTEN_FDS),
 * binding nothing itself. */
Test(tls, serves_https_on_a_passed_socket)
{
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(lfd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(listen(lfd, 16), 0);
    socklen_t len = sizeof(a);
    cr_assert_eq(getsockname(lfd, (struct sockaddr *)&a, &len), 0);
    int port = ntohs(a.sin_port);
    char bin[512], model[512], cert[600], key[600], log[600];
    snprintf(bin, sizeof(bin), "%s", gs_test_build_path("server/graphserve"));
    snprintf(model, sizeof(model), "%s", gs_test_shared_path("models/stories260K.gguf"));
    snprintf(cert, sizeof(cert), "%s/srv.pem", certs);
    snprintf(key, sizeof(key), "%s/srv.key", certs);
    snprintf(log, sizeof(log), "%s/activated-%d.log", gs_test_tmpdir(), getpid());
    int pfd[2];
    cr_assert_eq(pipe(pfd), 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        dup2(pfd[1], 1);
        int lf = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(lf, 2);
        dup2(lfd, 3);
        char pidbuf[32];
        snprintf(pidbuf, sizeof(pidbuf), "%d", (int)getpid());
        setenv("LISTEN_PID", pidbuf, 1);
        setenv("LISTEN_FDS", "1", 1);
        execl(bin, bin, "serve", "-m", model, "--port", "1", "--tls-cert", cert, "--tls-key", key,
              (char *)NULL);
        _exit(127);
    }
    close(pfd[1]);
    close(lfd);
    FILE *f = fdopen(pfd[0], "r");
    char line[512] = "";
    char want[64];
    snprintf(want, sizeof(want), "listening on https://127.0.0.1:%d", port);
    bool found = false;
    while (!found && fgets(line, sizeof(line), f))
        found = strstr(line, want) != NULL;
    fclose(f);
    cr_expect(found, "no '%s' (last line: %s)", want, line);
    char *cmd, *out = NULL;
    cr_assert(asprintf(&cmd,
                       "curl -sS --max-time 100 --cacert '%s/ca.pem' -o /dev/null "
                       "-w '%%{http_code}' https://127.0.0.1:%d/health",
                       certs, port) > 0);
    int rc = gs_test_run(cmd, 1, &out);
    cr_expect(rc == 0 && !strcmp(out, "200"), "https on the passed socket: %s", out);
    free(out);
    free(cmd);
    kill(pid, SIGTERM);
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit status %d", st);
}
