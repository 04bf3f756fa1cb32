/*
 * tests/tools/test_validate_cmd.c - `graphserve validate` as a user runs it: the
 * real binary in a child process, against the goldens in ../shared (its library,
 * engine/validate, is tested in tests/engine/test_validate.c).
 */
#include "engine/base.h"
#include "tests/common/testutil.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char exe[4096];

static int run_validate(const char *args, char **out)
{
    char cmd[16384];
    snprintf(exe, sizeof(exe), "%s", gs_test_build_path("server/graphserve"));
    int n = snprintf(cmd, sizeof(cmd), "%s validate %s", exe, args);
    cr_assert(n > 0 && (size_t)n < sizeof(cmd), "the command line is too long");
    return gs_test_run(cmd, 0, out);
}

Test(val_cmd, golden_on_the_ref_backend_passes)
{
    char models[4096], golden[4096], args[12288];
    snprintf(models, sizeof(models), "%s", gs_test_shared_path("models"));
    snprintf(golden, sizeof(golden), "%s",
             gs_test_shared_path("golden/completions/stories260K__once-upon-a-time.json"));
    snprintf(args, sizeof(args), "-m %s --golden %s --json --rows", models, golden);
    char *out = NULL;
    int rc = run_validate(args, &out);
    json_error_t jerr;
    json_t *j = json_loads(out, 0, &jerr);
    cr_assert_not_null(j, "%s: %s", jerr.text, out);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(json_is_true(json_object_get(j, "pass")), "%s", out);
    json_t *rep = json_object_get(json_array_get(json_object_get(j, "results"), 0), "report");
    /* 5 prompt tokens + 64 generated - 1: every evaluated position is judged. */
    cr_assert_eq(json_integer_value(json_object_get(rep, "n_positions")), 68, "%s", out);
    cr_assert_eq(json_integer_value(json_object_get(rep, "n_full")), 5);
    cr_assert_eq(json_array_size(json_object_get(rep, "rows")), 68);
    cr_assert(json_real_value(json_object_get(rep, "min_pearson")) > 0.9999);
    cr_assert_str_eq(
        json_string_value(json_object_get(json_array_get(json_object_get(j, "results"), 0), "kv")),
        "f16");
    json_decref(j);
    free(out);
}

Test(val_cmd, wrong_model_fails_with_a_message)
{
    char model[4096], golden[4096], args[12288];
    snprintf(model, sizeof(model), "%s", gs_test_shared_path("models/llama-2-tiny-random.gguf"));
    snprintf(golden, sizeof(golden), "%s",
             gs_test_shared_path("golden/completions/stories260K__once-upon-a-time.json"));
    snprintf(args, sizeof(args), "-m %s --golden %s", model, golden);
    char *out = NULL;
    int rc = run_validate(args, &out);
    cr_assert_eq(rc, 1, "%s", out);
    cr_assert(strstr(out, "wrong model?") && strstr(out, "verdict        FAIL"), "%s", out);
    free(out);
}

Test(val_cmd, compares_two_logit_files)
{
    char a[4096], b[4096], args[12288];
    snprintf(a, sizeof(a), "%s",
             gs_test_shared_path("golden/completions/stories260K-Q4_0__once-upon-a-time.json"));
    snprintf(b, sizeof(b), "%s",
             gs_test_shared_path("golden/completions/stories260K__once-upon-a-time.json"));
    char *out = NULL;
    /* A golden against itself is perfect. */
    snprintf(args, sizeof(args), "--a %s --b %s", b, b);
    cr_assert_eq(run_validate(args, &out), 0, "%s", out);
    cr_assert(strstr(out, "verdict        PASS"), "%s", out);
    free(out);
    /* A dump in the {"logits": ...} form, with a NaN-free but permuted row. */
    char dump[4096];
    snprintf(dump, sizeof(dump), "%s/dump.json", gs_test_tmpdir());
    FILE *f = fopen(dump, "w");
    cr_assert_not_null(f);
    fprintf(f, "{\"logits\": [[0, 1, 2, 9], [5, 0, 0, 0]]}");
    fclose(f);
    char dump2[4096];
    snprintf(dump2, sizeof(dump2), "%s/dump2.json", gs_test_tmpdir());
    f = fopen(dump2, "w");
    cr_assert_not_null(f);
    fprintf(f, "{\"logits\": [[0, 1, 9, 2], [5, 0, 0, 0]]}");
    fclose(f);
    snprintf(args, sizeof(args), "--a %s --b %s --json", dump, dump2);
    cr_assert_eq(run_validate(args, &out), 1, "%s", out);
    json_t *j = json_loads(out, 0, NULL);
    cr_assert_not_null(j, "%s", out);
    json_t *rep = json_object_get(json_array_get(json_object_get(j, "results"), 0), "report");
    cr_assert_eq(json_integer_value(json_object_get(rep, "first_divergence")), 0, "%s", out);
    json_decref(j);
    free(out);
    /* Shapes must match. */
    snprintf(args, sizeof(args), "--a %s --b %s", a, dump);
    cr_assert_eq(run_validate(args, &out), 1, "%s", out);
    cr_assert(strstr(out, "shapes differ"), "%s", out);
    free(out);
}

Test(val_cmd, usage_errors_exit_2)
{
    static const char *const bad[] = {"",
                                      "--golden x.json",
                                      "-m m.gguf",
                                      "--a x.json",
                                      "-m m --golden g --backend nosuch",
                                      "-m m --golden g --kv q8",
                                      "-m m --golden g --min-top1 2",
                                      "--bogus"};
    for (size_t i = 0; i < GS_ARRAY_LEN(bad); i++) {
        char *out = NULL;
        int rc = run_validate(bad[i], &out);
        cr_assert_eq(rc, 2, "'%s' exited %d", bad[i], rc);
        free(out);
    }
}

Test(val_cmd, against_a_backend_compares_every_row_in_full)
{
    char models[4096], golden[4096], args[12288];
    snprintf(models, sizeof(models), "%s", gs_test_shared_path("models"));
    snprintf(golden, sizeof(golden), "%s",
             gs_test_shared_path("golden/completions/stories260K__the-little-dog.json"));
    snprintf(args, sizeof(args), "-m %s --golden %s --backend ref --against ref --json", models,
             golden);
    char *out = NULL;
    int rc = run_validate(args, &out);
    json_t *j = json_loads(out, 0, NULL);
    cr_assert_not_null(j, "%s", out);
    cr_assert_eq(rc, 0, "%s", out);
    json_t *res = json_array_get(json_object_get(j, "results"), 0);
    cr_assert_str_eq(json_string_value(json_object_get(res, "reference")), "ref");
    json_t *rep = json_object_get(res, "report");
    /* The same backend twice is deterministic: identical rows everywhere. */
    cr_assert_eq(json_integer_value(json_object_get(rep, "n_full")), 68, "%s", out);
    cr_assert_eq(json_real_value(json_object_get(rep, "max_abs_err")), 0.0, "%s", out);
    cr_assert_eq(json_real_value(json_object_get(rep, "top1_rate")), 1.0, "%s", out);
    json_decref(j);
    free(out);
}
