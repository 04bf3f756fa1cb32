/*
 * tests/server/test_http_structured.c - structured outputs through the real
 * daemon: GBNF grammars, response_format json_object and json_schema, the
 * shared schema file, the errors, and a grammar that blows up beside a plain
 * request. The checks are in structured_outputs.py, with oracles that owe
 * nothing to graphserve: Python's ast and re, json, python3-jsonschema.
 *
 * The model is Qwen2's architecture with random weights (models/arch): its
 * output is noise, so only the grammar can make it parse.
 */
#define _GNU_SOURCE
#include "tests/common/testutil.h"
#include "tests/server/e2e.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A Python with jsonschema: the one on PATH, else Debian's (./dev test
 * installs python3-jsonschema), else the test fails saying so. */
static const char *python_with_jsonschema(void)
{
    static const char *const candidates[] = {"python3", "/usr/bin/python3"};
    for (size_t i = 0; i < sizeof(candidates) / sizeof(*candidates); i++) {
        char cmd[256], *out = NULL;
        snprintf(cmd, sizeof(cmd), "%s -c 'import jsonschema' 2>&1", candidates[i]);
        int rc = gs_test_run(cmd, 1, &out);
        free(out);
        if (rc == 0)
            return candidates[i];
    }
    cr_assert_fail("no python3 with the jsonschema module: install python3-jsonschema "
                   "(./dev test does)");
    return NULL;
}

static void run_case_with(const char *model, const char *daemon_args, const char *args)
{
    char extra[1024];
    snprintf(extra, sizeof(extra), "-m '%s' --backend cpu %s", gs_test_shared_path(model),
             daemon_args);
    struct e2e_daemon d;
    e2e_start(&d, extra);
    char src[1024];
    snprintf(src, sizeof(src), "%s", getenv("GS_SOURCE_DIR") ? getenv("GS_SOURCE_DIR") : ".");
    char *cmd, *out = NULL;
    cr_assert(asprintf(&cmd, "%s '%s/tests/server/structured_outputs.py' %d %s",
                       python_with_jsonschema(), src, d.port, args) > 0);
    int rc = gs_test_run(cmd, 1, &out);
    fprintf(stderr, "%s", out ? out : "");
    cr_expect_eq(rc, 0, "structured_outputs.py %s failed:\n%s", args, out ? out : "");
    free(out);
    free(cmd);
    cr_assert_eq(e2e_stop(&d), 0);
}

static void run_case(const char *model, const char *args)
{
    run_case_with(model, "", args);
}

#define RANDOM_QWEN2 "models/arch/qwen2-tiny-Q4_K_M.gguf"

Test(structured, gbnf_grammars_parse_under_independent_parsers, .timeout = 900)
{
    run_case(RANDOM_QWEN2, "grammars");
}

Test(structured, json_object_is_json, .timeout = 900)
{
    run_case(RANDOM_QWEN2, "json_object");
}

Test(structured, json_schemas_validate, .timeout = 900)
{
    run_case(RANDOM_QWEN2, "schemas");
}

/*
 * The shared file of real-world schemas: each is refused naming a keyword
 * and its path, or its outputs validate. Under the sanitizers (several times
 * slower) the first 30 rows, a proportional mix of the datasets.
 */
Test(structured, shared_schema_file_is_refused_by_keyword_or_validates, .timeout = 1800)
{
#if defined(__SANITIZE_ADDRESS__)
    int limit = 30;
#else
    int limit = 0;
#endif
    char args[1024];
    snprintf(args, sizeof(args), "schema_file '%s' %d",
             gs_test_shared_path("golden/schemas/schemas.jsonl"), limit);
    run_case(RANDOM_QWEN2, args);
}

Test(structured, bad_requests_are_400s_naming_the_field, .timeout = 900)
{
    run_case(RANDOM_QWEN2, "errors");
}

Test(structured, stop_strings_logprobs_and_n_streamed_work_with_a_grammar, .timeout = 900)
{
    run_case(RANDOM_QWEN2, "combos");
}

/* A pool of 16 pages (1 KiB a token on this model): eight schema requests
 * preempt each other, and their matchers resume with them. */
Test(structured, matchers_survive_preemption, .timeout = 900)
{
    run_case_with(RANDOM_QWEN2, "--kv-cache-bytes 256KiB", "preemption");
}

Test(structured, an_exploding_grammar_ends_only_its_own_sequence, .timeout = 900)
{
    run_case(RANDOM_QWEN2, "isolation");
}
