/*
 * tests/engine/test_kv_q8.c - a q8_0 KV cache against llama.cpp's goldens.
 *
 * Every golden of ../shared/golden/completions and ../shared/golden/arch is
 * run teacher-forced (the prompt and the golden's completion as one step,
 * logits on every row, with the passes the daemon runs) over a q8_0 cache, on
 * cpu and on ref, and held to the thresholds the quantized goldens are held to
 * (test_llama_quant.c, test_cpu_backend.c): Pearson >= 0.999 on every prompt
 * row, the golden's top-1 on every step whose margin to the second token is at
 * least 0.5, and on at least 95% of all steps. The same run over the golden's
 * own cache type (f16 or f32) is logged beside it, so the log shows what the
 * q8_0 cache costs.
 *
 * Not every golden holds them: KNOWN lists those that did not, with what was
 * measured (AVX2, 2026-12; the same list holds with GS_CPU_ISA_MAX=scalar). They are logged as such
 * and held only to a floor (Pearson >= 0.97, two thirds of the steps' top-1) that a broken cache (a
 * wrong block, a wrong scale) falls far below; a golden
 * that starts to hold the thresholds is logged so that it leaves the list.
 *
 * The list is what an 8-bit cache costs on these goldens, not a fault of this one:
 * llama.cpp's own q8_0 cache, run the same way on the 58 goldens whose heads it can
 * cache in q8_0 (it refuses heads of 4, 8 and 48 values), misses 11 of them where this
 * cache misses 9 on cpu and 10 on ref, five of them the same goldens, with fewer of
 * the golden's steps (3029 against 3039 of 3130) and more confident misses (13 against
 * 10); its q4_0 cache holds none (bench/RESULTS.md, "Quantized KV cache").
 */
#define _GNU_SOURCE
#include "tests/common/testutil.h"
#include "tests/engine/test_llama_util.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Goldens (file stem) over the thresholds with a q8_0 cache, on both backends
 * unless one is named. */
static const struct {
    const char *stem, *backend; /* backend NULL: both */
} KNOWN[] = {
    {"gemma2-tiny-Q8_0__once-upon-a-time", NULL},     /* pearson 0.99819 */
    {"gemma2-tiny-Q8_0__the-little-dog", NULL},       /* pearson 0.99842, top-1 30/32 */
    {"gemma3-tiny-Q8_0__once-upon-a-time", NULL},     /* top-1 28/32, 2 confident misses */
    {"gemma3n-tiny-F32__once-upon-a-time", NULL},     /* pearson 0.98997 cpu, 0.98838 ref */
    {"gemma3n-tiny-F32__the-little-dog", NULL},       /* pearson 0.98179 / 0.97649, top-1
                                                         23/32 / 22/32, 6 confident misses */
    {"phi3-tiny-Q4_K_M__once-upon-a-time", NULL},     /* top-1 30/32 */
    {"qwen3-tiny-Q4_K_M__once-upon-a-time", NULL},    /* top-1 30/32, 1 confident miss */
    {"stories260K-Q4_0__lily-and-tom", NULL},         /* pearson 0.99718 */
    {"stories260K-Q4_0__tom-had-3-red-balls", NULL},  /* top-1 57/64 */
    {"stories260K-Q5_1__tom-had-3-red-balls", "ref"}, /* top-1 60/64 */
    {"tiny-k-Q2_K__once-upon-a-time", NULL},          /* top-1 60/64 */
    {"tiny-k-Q4_K__the-little-dog", NULL},            /* top-1 59/64 */
    {"tiny-k-Q5_K_M__lily-and-tom", NULL},            /* top-1 60/64 */
    {"tiny-k-Q5_K__once-upon-a-time", "ref"},         /* top-1 58/64 */
    {"tiny-k-Q8_0__tom-had-3-red-balls", NULL},       /* top-1 60/64 cpu, 59/64 ref,
                                                         1 confident miss */
};

static bool known(const char *file, const char *backend)
{
    for (size_t i = 0; i < GS_ARRAY_LEN(KNOWN); i++) {
        size_t n = strlen(KNOWN[i].stem);
        if (!strncmp(file, KNOWN[i].stem, n) && !strcmp(file + n, ".json") &&
            (!KNOWN[i].backend || !strcmp(KNOWN[i].backend, backend)))
            return true;
    }
    return false;
}

/* Every golden in golden/<dir>, its model under models/<model_dir>. */
static void check_dir(const char *dir, const char *model_dir)
{
    char path[512];
    snprintf(path, sizeof(path), "%s", gs_test_shared_path(dir));
    DIR *d = opendir(path);
    cr_assert(d, "cannot open %s", path);
    uint32_t n_files = 0, n_known = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".json"))
            continue;
        char rel[512];
        snprintf(rel, sizeof(rel), "%s/%s", dir, e->d_name);
        json_t *j = llama_load_golden(rel);
        const char *model = json_string_value(json_object_get(j, "model"));
        const char *own =
            json_string_value(json_object_get(json_object_get(j, "settings"), "kv_cache_type"));
        cr_assert(model && own, "%s: no model or kv_cache_type", rel);
        const enum gs_type own_kv = !strcmp(own, "f16") ? GS_TYPE_F16 : GS_TYPE_F32;
        char model_rel[512];
        snprintf(model_rel, sizeof(model_rel), "%s/%s", model_dir, model);
        static const char *const backends[] = {"cpu", "ref"};
        for (size_t b = 0; b < GS_ARRAY_LEN(backends); b++) {
            struct llama_agreement base =
                llama_teacher_forced(j, model_rel, own_kv, backends[b], 0);
            struct llama_agreement q8 =
                llama_teacher_forced(j, model_rel, GS_TYPE_Q8_0, backends[b], 0);
            cr_log_info("%s %s: pearson %s %.7f q8_0 %.7f, top-1 %s %u/%u q8_0 %u/%u, "
                        "confident misses q8_0 %u",
                        e->d_name, backends[b], own, base.min_rho, q8.min_rho, own, base.agree,
                        base.n_steps, q8.agree, q8.n_steps, q8.bad_margin);
            const bool holds =
                q8.min_rho >= 0.999 && q8.bad_margin == 0 && (double)q8.agree >= 0.95 * q8.n_steps;
            if (known(e->d_name, backends[b])) {
                if (holds)
                    cr_log_warn("%s %s: now within the thresholds: take it off KNOWN", e->d_name,
                                backends[b]);
                else
                    cr_log_info("%s %s: over the thresholds, as KNOWN says", e->d_name,
                                backends[b]);
                cr_expect(q8.min_rho >= 0.97 && 3 * q8.agree >= 2 * q8.n_steps,
                          "%s %s q8_0: pearson %.6f, top-1 %u/%u: below even the floor", e->d_name,
                          backends[b], q8.min_rho, q8.agree, q8.n_steps);
                n_known += !holds;
                continue;
            }
            cr_expect(q8.min_rho >= 0.999, "%s %s q8_0: pearson %.6f", e->d_name, backends[b],
                      q8.min_rho);
            cr_expect(q8.bad_margin == 0, "%s %s q8_0: misses %u confident steps", e->d_name,
                      backends[b], q8.bad_margin);
            cr_expect((double)q8.agree >= 0.95 * q8.n_steps, "%s %s q8_0: top-1 %u/%u", e->d_name,
                      backends[b], q8.agree, q8.n_steps);
        }
        json_decref(j);
        n_files++;
    }
    closedir(d);
    cr_assert(n_files > 0, "no goldens in %s", path);
    cr_log_info("%s: %u goldens, %u runs over the thresholds as KNOWN says", dir, n_files, n_known);
}

Test(kv_q8, completion_goldens_hold_the_quantized_thresholds, .timeout = 1200)
{
    check_dir("golden/completions", "models");
}

Test(kv_q8, arch_goldens_hold_the_quantized_thresholds, .timeout = 1200)
{
    check_dir("golden/arch", "models/arch");
}
