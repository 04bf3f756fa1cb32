/*
 * tests/fuzz/fuzz_chat_template.c - the chat-template side of a model file
 * and of a chat request: gs_srv_tmpl_detect on any tokenizer.chat_template
 * text, and gs_srv_tmpl_render of any messages in every format.
 *
 * Input: the template text, then NUL-separated role and content strings:
 *     <template> \0 <role> \0 <content> \0 <role> \0 <content> ...
 * A corpus file without a NUL is a template alone.
 *
 * Invariants: detection names a known family whose name maps back to it;
 * rendering accepts any role, every message that is not a system message
 * appears in the prompt, and a chat of system messages alone still renders
 * its last one (once the formats dropped it, leaving an empty prompt).
 */
#include "server/internal.h"
#include "tests/fuzz/fuzz.h"

#include <string.h>

#define MAX_MSGS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A NUL-terminated copy: the parts are C strings, as they are in the daemon. */
    char *text = malloc(size + 1);
    FUZZ_CHECK(text, "out of memory");
    memcpy(text, data, size);
    text[size] = '\0';

    enum gs_srv_tmpl t = gs_srv_tmpl_detect(text);
    FUZZ_CHECK((unsigned)t < GS_SRV_TMPL_COUNT, "detected %d", (int)t);
    enum gs_srv_tmpl by_name;
    FUZZ_CHECK(gs_srv_tmpl_from_name(gs_srv_tmpl_name(t), &by_name) == GS_OK && by_name == t,
               "the name of %d does not map back", (int)t);

    struct gs_srv_msg msgs[MAX_MSGS];
    size_t n = 0;
    const char *p = text + strlen(text) + 1, *end = text + size + 1;
    while (p < end && n < MAX_MSGS) {
        msgs[n].role = (char *)p;
        p += strlen(p) + 1;
        msgs[n].content = p < end ? (char *)p : (char *)"";
        p += p < end ? strlen(p) + 1 : 0;
        n++;
    }

    for (int f = 0; f < GS_SRV_TMPL_COUNT; f++) {
        struct gs_srv_buf out = {0};
        gs_srv_tmpl_render((enum gs_srv_tmpl)f, msgs, n, &out);
        FUZZ_CHECK(!out.failed, "%s: out of memory", gs_srv_tmpl_name((enum gs_srv_tmpl)f));
        size_t n_system = 0;
        for (size_t i = 0; i < n; i++) {
            bool system = !strcmp(msgs[i].role, "system");
            n_system += system;
            FUZZ_CHECK(system || (out.p && strstr(out.p, msgs[i].content)),
                       "%s: message %zu is missing from the prompt",
                       gs_srv_tmpl_name((enum gs_srv_tmpl)f), i);
        }
        if (n && n_system == n)
            FUZZ_CHECK(out.p && strstr(out.p, msgs[n - 1].content),
                       "%s: a chat of system messages renders without them",
                       gs_srv_tmpl_name((enum gs_srv_tmpl)f));
        gs_srv_buf_free(&out);
    }
    free(text);
    return 0;
}
