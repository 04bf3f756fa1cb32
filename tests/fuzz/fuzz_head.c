/*
 * tests/fuzz/fuzz_head.c - a request head as the daemon sees it once
 * libmicrohttpd has split it: method, version and header lines, checked by
 * gs_srv_head_check under both name policies.
 *
 * Input: lines separated by '\n'. The first is "METHOD VERSION"; each later
 * one is "name:value" (no colon: a name with an empty value).
 *
 * Invariants: a verdict is one of the kinds the contract names, with a
 * message; a head accepted while names are checked is accepted when they are
 * not (checking only refuses more); a head with two Content-Lengths, or
 * Content-Length beside Transfer-Encoding, is never accepted.
 */
#include "server/internal.h"
#include "tests/fuzz/fuzz.h"

#include <string.h>
#include <strings.h>

#define MAX_LINES 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    FUZZ_CHECK(text, "out of memory");
    memcpy(text, data, size);
    text[size] = '\0';
    struct gs_srv_header h[MAX_LINES] = {{0}};
    size_t n = 0, n_cl = 0, n_te = 0;
    char *method = text, *version = NULL;
    char *line = strchr(text, '\n');
    if (line)
        *line++ = '\0';
    char *sp = strchr(method, ' ');
    if (sp) {
        *sp = '\0';
        version = sp + 1;
    }
    while (line && n < MAX_LINES) {
        char *next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        char *colon = strchr(line, ':');
        if (colon)
            *colon = '\0';
        h[n] = (struct gs_srv_header){line, colon ? colon + 1 : ""};
        n_cl += !strcasecmp(line, "Content-Length");
        n_te += !strcasecmp(line, "Transfer-Encoding");
        n++;
        line = next;
    }
    static const char *const allowed[] = {"my.box", ".example.org"};
    static const char *const origins[] = {"https://app.example.net"};
    struct gs_srv_head_policy open = {0}, checked = {true, allowed, 2, origins, 1};
    struct gs_srv_head_verdict v_open, v_checked;
    bool ok_open = gs_srv_head_check(method, version, h, n, &open, &v_open);
    bool ok_checked = gs_srv_head_check(method, version, h, n, &checked, &v_checked);
    FUZZ_CHECK(!ok_checked || ok_open, "accepted only when names are checked");
    FUZZ_CHECK(!(n_cl > 1 || (n_cl && n_te)) || !ok_open, "ambiguous framing accepted");
    const struct gs_srv_head_verdict *vs[] = {ok_open ? NULL : &v_open,
                                              ok_checked ? NULL : &v_checked};
    for (int i = 0; i < 2; i++) {
        if (!vs[i])
            continue;
        FUZZ_CHECK(vs[i]->kind == GS_SRV_E_BAD_REQUEST || vs[i]->kind == GS_SRV_E_FORBIDDEN ||
                       vs[i]->kind == GS_SRV_E_MEDIA_TYPE,
                   "verdict kind %d", (int)vs[i]->kind);
        FUZZ_CHECK(vs[i]->msg[0], "a refusal without a message");
    }
    if (!ok_open)
        FUZZ_CHECK(vs[0]->kind != GS_SRV_E_FORBIDDEN, "names refused while not checked");
    free(text);
    return 0;
}
