/*
 * tests/engine/test_isa_cap.c - GS_CPU_ISA_MAX, which runs a process as a CPU
 * whose best instruction set is the one named would (how ./dev test on an
 * AVX-512 machine checks what an AVX2-only one runs): the kernels it names are
 * the ones used (the receipt's variant says so), greedy output is unchanged,
 * and a set this CPU cannot run stops the process with a message naming it.
 */
#define _GNU_SOURCE
#include "engine/base.h"
#include "tests/common/testutil.h"

#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* `graphserve run` of stories260K under cap (NULL: none); its JSON (or NULL on failure). */
static json_t *run_capped(const char *cap, char **out)
{
    char exe[600], model[600], *cmd;
    snprintf(exe, sizeof(exe), "%s", gs_test_build_path("server/graphserve"));
    snprintf(model, sizeof(model), "%s", gs_test_shared_path("models/stories260K.gguf"));
    cr_assert(asprintf(&cmd, "%s%s%s %s run -m '%s' -p 'Once upon a time' -n 16 --json",
                       cap ? "GS_CPU_ISA_MAX=" : "", cap ? cap : "", cap ? " " : "", exe,
                       model) > 0);
    int rc = gs_test_run(cmd, 1, out);
    free(cmd);
    return rc == 0 ? json_loads(*out, 0, NULL) : NULL;
}

Test(isa_cap, capped_kernels_give_the_same_tokens)
{
    char *out;
    json_t *full = run_capped(NULL, &out);
    cr_assert(full, "%s", out);
    free(out);
    static const char *const caps[] = {"scalar", "avx2"};
    for (size_t i = 0; i < GS_ARRAY_LEN(caps); i++) {
        json_t *j = run_capped(caps[i], &out);
#if defined(__x86_64__)
        cr_assert(j, "%s: %s", caps[i], out);
        cr_expect(json_equal(json_object_get(j, "output_tokens"),
                             json_object_get(full, "output_tokens")),
                  "%s changes the greedy tokens: %s", caps[i], out);
        json_decref(j);
#else
        if (i == 0) {
            cr_assert(j, "%s: %s", caps[i], out);
            json_decref(j);
        }
#endif
        free(out);
    }
    json_decref(full);
}

Test(isa_cap, a_set_the_cpu_cannot_run_is_fatal)
{
    char *out;
    json_t *j = run_capped("pentium-mmx", &out);
    cr_expect_null(j, "ran under an unknown instruction set: %s", out);
    cr_expect(strstr(out, "GS_CPU_ISA_MAX=pentium-mmx"), "%s", out);
    free(out);
    json_decref(j);
}
