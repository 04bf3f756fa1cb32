/*
 * tests/tools/test_llama_cli.c - `graphserve run` and `graphserve graph` as
 * child processes: greedy output and prompt tokens against the llama.cpp
 * goldens, printing formats, and refusal of bad model files.
 */
#include "engine/gguf.h"
#include "tests/common/testutil.h"
#include "tests/engine/test_llama_util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const prompts[] = {"once-upon-a-time", "the-little-dog", "lily-and-tom",
                                      "tom-had-3-red-balls"};

/* Runs graphserve with args; returns its exit status and output (caller frees). */
static int graphserve(const char *args, int merge_stderr, char **out)
{
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "%s %s", gs_test_build_path("server/graphserve"), args);
    return gs_test_run(cmd, merge_stderr, out);
}

/* `run -p PROMPT --temp 0 --json` tokenizes like llama.cpp and generates its tokens. */
static void check_run(const char *golden, const char *model, bool check_text)
{
    char rel[256], args[2048];
    snprintf(rel, sizeof(rel), "golden/completions/%s.json", golden);
    json_t *g = llama_load_golden(rel);
    snprintf(rel, sizeof(rel), "models/%s", model);
    char *quoted = NULL;
    const char *prompt = json_string_value(json_object_get(g, "prompt"));
    cr_assert(prompt && !strchr(prompt, '\''));
    snprintf(args, sizeof(args), "run -m %s -p '%s' -n %lld --json", gs_test_shared_path(rel),
             prompt, (long long)json_integer_value(json_object_get(g, "n_predict")));
    char *out = NULL;
    int rc = graphserve(args, 0, &out);
    cr_assert_eq(rc, 0, "%s: run failed: %s", golden, out);
    json_error_t jerr;
    json_t *j = json_loads(out, 0, &jerr);
    cr_assert(j, "%s: output is not JSON: %s", golden, out);
    cr_assert(json_equal(json_object_get(j, "prompt_tokens"), json_object_get(g, "prompt_tokens")),
              "%s: prompt tokens differ from llama.cpp's", golden);
    cr_assert(
        json_equal(json_object_get(j, "output_tokens"), json_object_get(g, "completion_tokens")),
        "%s: generated tokens differ from llama.cpp's", golden);
    const char *text = json_string_value(json_object_get(j, "text"));
    const char *want = json_string_value(json_object_get(g, "completion_text"));
    /* Random-weight models emit broken UTF-8 that the golden renders byte by byte. */
    cr_assert(!check_text || (text && want && !strcmp(text, want)), "%s: text '%s', golden '%s'",
              golden, text, want);
    cr_assert(json_is_object(json_object_get(j, "timings")));
    json_decref(j);
    json_decref(g);
    free(out);
    free(quoted);
}

Test(cli_run, stories260K_greedy_matches_goldens)
{
    for (size_t i = 0; i < GS_ARRAY_LEN(prompts); i++) {
        char stem[128];
        snprintf(stem, sizeof(stem), "stories260K__%s", prompts[i]);
        check_run(stem, "stories260K.gguf", true);
    }
}

Test(cli_run, tiny_k_greedy_matches_goldens)
{
    for (size_t i = 0; i < GS_ARRAY_LEN(prompts); i++) {
        char stem[128];
        snprintf(stem, sizeof(stem), "tiny-k-F32__%s", prompts[i]);
        check_run(stem, "tiny-k-F32.gguf", false);
    }
}

Test(cli_run, llama_2_tiny_random_greedy_matches_golden)
{
    check_run("llama-2-tiny-random__once-upon-a-time", "llama-2-tiny-random.gguf", false);
}

Test(cli_run, tokens_option_and_streamed_text)
{
    char args[1024], *out = NULL;
    snprintf(args, sizeof(args), "run -m %s --tokens 1,403,407,261,378 -n 8 --kv-type f32",
             gs_test_shared_path("models/stories260K.gguf"));
    cr_assert_eq(graphserve(args, 0, &out), 0, "%s", out);
    cr_assert(!strncmp(out, ", there was a little girl", 25), "streamed '%s'", out);
    free(out);
}

Test(cli_run, bad_arguments_fail)
{
    char args[1024], *out = NULL;
    snprintf(args, sizeof(args), "run -m %s --tokens 1,99999 -n 4",
             gs_test_shared_path("models/stories260K.gguf"));
    cr_assert_neq(graphserve(args, 1, &out), 0);
    cr_assert(strstr(out, "99999"), "%s", out);
    free(out);
    cr_assert_eq(graphserve("run -p hello", 1, &out), 2);
    free(out);
}

Test(cli_graph, formats_and_passes)
{
    char args[2048], *plain = NULL, *opt = NULL, *js = NULL;
    char m[1024]; /* the helper's buffer is reused by the next call */
    snprintf(m, sizeof(m), "%s", gs_test_shared_path("models/stories260K.gguf"));
    snprintf(args, sizeof(args), "graph -m %s --passes none", m);
    cr_assert_eq(graphserve(args, 0, &plain), 0);
    snprintf(args, sizeof(args), "graph -m %s --passes all", m);
    cr_assert_eq(graphserve(args, 0, &opt), 0);
    cr_assert(strstr(plain, "= rms_norm(%"));
    cr_assert(!strstr(opt, "= rms_norm(%"), "rms_norm survived the fusion");
    cr_assert(strstr(opt, "= matmul_swiglu(%") && strstr(opt, "= matmul_add(%"));
    cr_assert(!strstr(opt, "= swiglu(%"), "swiglu survived the fusion");
    snprintf(args, sizeof(args), "graph -m %s --format json --passes dce,cse", m);
    cr_assert_eq(graphserve(args, 0, &js), 0);
    json_error_t jerr;
    json_t *j = json_loads(js, 0, &jerr);
    cr_assert(j, "graph JSON does not parse: %s", jerr.text);
    json_decref(j);
    snprintf(args, sizeof(args), "graph -m %s --passes nope", m);
    char *err = NULL;
    cr_assert_neq(graphserve(args, 1, &err), 0);
    cr_assert(strstr(err, "nope"));
    free(plain);
    free(opt);
    free(js);
    free(err);
}

Test(cli_graph, bad_model_exits_nonzero_naming_problem)
{
    /* A llama file whose kv heads do not divide the heads. */
    struct gs_err e = {0};
    struct gs_gguf_writer *w;
    cr_assert_eq(gs_gguf_writer_new(NULL, &w, &e), GS_OK);
    gs_gguf_w_str(w, "general.architecture", "llama");
    gs_gguf_w_u32(w, "llama.embedding_length", 8);
    gs_gguf_w_u32(w, "llama.block_count", 1);
    gs_gguf_w_u32(w, "llama.attention.head_count", 4);
    gs_gguf_w_u32(w, "llama.attention.head_count_kv", 3);
    gs_gguf_w_u32(w, "llama.feed_forward_length", 8);
    gs_gguf_w_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    char path[1024];
    snprintf(path, sizeof(path), "%s/bad-heads.gguf", gs_test_tmpdir());
    cr_assert_eq(gs_gguf_writer_to_file(w, path, &e), GS_OK, "%s", e.msg);
    gs_gguf_writer_free(w);
    char args[1200], *out = NULL;
    snprintf(args, sizeof(args), "graph -m %s", path);
    cr_assert_eq(graphserve(args, 1, &out), 1);
    cr_assert(strstr(out, "head_count_kv"), "%s", out);
    free(out);
    snprintf(args, sizeof(args), "run -m %s --tokens 1", path);
    cr_assert_eq(graphserve(args, 1, &out), 1);
    cr_assert(strstr(out, "head_count_kv"), "%s", out);
    free(out);
    /* Not a GGUF file at all. */
    snprintf(args, sizeof(args), "graph -m %s",
             gs_test_shared_path("golden/completions/"
                                 "stories260K__lily-and-tom.json"));
    cr_assert_eq(graphserve(args, 1, &out), 1);
    free(out);
}
