/*
 * tests/tools/test_config_cmd.c - `graphserve config check|print|reference`, run
 * as a user runs them: the real binary in a child process.
 */
#define _GNU_SOURCE
#include "tests/common/testutil.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int run(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int run(char **out, const char *fmt, ...)
{
    char *args, *cmd;
    va_list ap;
    va_start(ap, fmt);
    cr_assert(vasprintf(&args, fmt, ap) > 0);
    va_end(ap);
    /* Keeps a developer's own GRAPHSERVE_* settings out of the test. */
    cr_assert(asprintf(&cmd,
                       "env $(env | sed -n 's/^\\(GRAPHSERVE_[A-Za-z0-9_]*\\)=.*/-u \\1/p') %s %s",
                       gs_test_build_path("server/graphserve"), args) > 0);
    int rc = gs_test_run(cmd, 1, out);
    free(cmd);
    free(args);
    return rc;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert(f);
    fputs(text, f);
    fclose(f);
}

Test(config_cmd, check_accepts_a_good_file_and_names_the_bad_key)
{
    char good[4200], bad[4200];
    const char *dir = gs_test_tmpdir();
    snprintf(good, sizeof(good), "%s/good.json", dir);
    snprintf(bad, sizeof(bad), "%s/bad.json", dir);
    write_file(good, "{\n  \"port\": 9000,\n  \"max_body_bytes\": \"4MiB\",\n"
                     "  \"log_format\": \"json\"\n}\n");
    write_file(bad, "{\n  \"port\": 9000,\n  \"max_conns\": 0\n}\n");

    char *out;
    int rc = run(&out, "config check %s", good);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "ok"), "%s", out);
    free(out);

    rc = run(&out, "config check %s", bad);
    cr_assert_eq(rc, 1, "%s", out);
    char want[4300];
    snprintf(want, sizeof(want), "%s:3: max_conns: 0 is out of range [1, 65536]", bad);
    cr_assert(strstr(out, want), "%s", out);
    free(out);

    /* The environment does not leak into a check of the file alone. */
    rc = run(&out, "config check /nonexistent/x.json");
    cr_assert_eq(rc, 1, "%s", out);
    cr_assert(strstr(out, "cannot read '/nonexistent/x.json'"), "%s", out);
    free(out);
}

Test(config_cmd, print_masks_keys_and_reference_lists_options)
{
    char *out;
    int rc = run(&out, "config print --api-key sk-abcdef --port 7000");
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(!strstr(out, "sk-abcdef"), "%s", out);
    cr_assert(strstr(out, "\"***\""), "%s", out);
    cr_assert(strstr(out, "\"port\": 7000"), "%s", out);
    free(out);

    rc = run(&out, "config print --prot 7000");
    cr_assert_eq(rc, 1, "%s", out);
    cr_assert(strstr(out, "--prot: unknown option (did you mean --port?)"), "%s", out);
    free(out);

    rc = run(&out, "config reference");
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "| Flag | Environment | File key |"), "%s", out);
    cr_assert(strstr(out, "`--kv-cache-bytes` | `GRAPHSERVE_KV_CACHE_BYTES` | `kv_cache_bytes`"),
              "%s", out);
    free(out);
}
