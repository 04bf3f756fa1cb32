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

static void run_case(const char *model, const char *args)
{
    char extra[1024];
    snprintf(extra, sizeof(extra), "-m '%s' --backend cpu", gs_test_shared_path(model));
    struct e2e_daemon d;
    e2e_start(&d, extra);
    char src[1024];
    snprintf(src, sizeof(src), "%s", getenv("GS_SOURCE_DIR") ? getenv("GS_SOURCE_DIR") : ".");
    char *cmd, *out = NULL;
    cr_assert(asprintf(&cmd, "python3 '%s/tests/server/structured_outputs.py' %d %s", src, d.port,
                       args) > 0);
    int rc = gs_test_run(cmd, 1, &out);
    fprintf(stderr, "%s", out ? out : "");
    cr_expect_eq(rc, 0, "structured_outputs.py %s failed:\n%s", args, out ? out : "");
    free(out);
    free(cmd);
    cr_assert_eq(e2e_stop(&d), 0);
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

Test(structured, bad_requests_are_400s_naming_the_field, .timeout = 900)
{
    run_case(RANDOM_QWEN2, "errors");
}

Test(structured, an_exploding_grammar_ends_only_its_own_sequence, .timeout = 900)
{
    run_case(RANDOM_QWEN2, "isolation");
}
