/* tests/common/testutil.c - see testutil.h. */
#define _GNU_SOURCE
#include "tests/common/testutil.h"

#include "engine/grammar.h"
#include "engine/tok.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char path_buf[4096];

const char *gs_test_shared_path(const char *rel)
{
    const char *dir = getenv("GS_SHARED_DIR");
    cr_assert(dir && *dir, "GS_SHARED_DIR is not set: run the tests through meson test");
    snprintf(path_buf, sizeof(path_buf), "%s/%s", dir, rel);
    struct stat st;
    cr_assert(stat(path_buf, &st) == 0,
              "required shared file is missing: %s (the shared folder must sit beside the "
              "repository)",
              path_buf);
    return path_buf;
}

const char *gs_test_build_path(const char *rel)
{
    const char *dir = getenv("GS_BUILD_DIR");
    cr_assert(dir && *dir, "GS_BUILD_DIR is not set: run the tests through meson test");
    snprintf(path_buf, sizeof(path_buf), "%s/%s", dir, rel);
    return path_buf;
}

void *gs_test_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot open %s", path);
    cr_assert(fseek(f, 0, SEEK_END) == 0);
    long n = ftell(f);
    cr_assert(n >= 0);
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    cr_assert(buf);
    cr_assert(fread(buf, 1, (size_t)n, f) == (size_t)n, "short read on %s", path);
    buf[n] = '\0';
    fclose(f);
    if (len)
        *len = (size_t)n;
    return buf;
}

json_t *gs_test_load_json(const char *path)
{
    json_error_t jerr;
    json_t *j = json_load_file(path, JSON_DECODE_ANY, &jerr);
    cr_assert(j, "cannot parse %s: %s (line %d)", path, jerr.text, jerr.line);
    return j;
}

const char *gs_test_tmpdir(void)
{
    static char dir[4096];
    const char *b = getenv("GS_BUILD_DIR");
    snprintf(dir, sizeof(dir), "%s/tmp", b && *b ? b : "/tmp");
    mkdir(dir, 0700);
    strncat(dir, "/t.XXXXXX", sizeof(dir) - strlen(dir) - 1);
    cr_assert(mkdtemp(dir), "mkdtemp failed");
    return dir;
}

int gs_test_run(const char *cmd, int merge_stderr, char **out)
{
    char *full = NULL;
    cr_assert(asprintf(&full, "%s%s", cmd, merge_stderr ? " 2>&1" : "") > 0);
    FILE *p = popen(full, "r");
    cr_assert(p, "popen failed: %s", full);
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    cr_assert(buf);
    size_t n;
    while ((n = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += n;
        if (cap - len < 1024) {
            cap *= 2;
            buf = realloc(buf, cap);
            cr_assert(buf);
        }
    }
    buf[len] = '\0';
    int st = pclose(p);
    free(full);
    if (out)
        *out = buf;
    else
        free(buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

struct gs_grammar_vocab *gs_test_grammar_vocab(const struct gs_tok *tok)
{
    uint32_t n = gs_tok_n_vocab(tok);
    const char **piece = calloc(n, sizeof(*piece));
    uint32_t *len = calloc(n, sizeof(*len));
    cr_assert(piece && len);
    for (uint32_t i = 0; i < n; i++) {
        size_t l = 0;
        piece[i] = gs_tok_piece(tok, (int32_t)i, 0, &l);
        len[i] = (uint32_t)l;
    }
    struct gs_grammar_vocab *v;
    struct gs_err err;
    cr_assert_eq(gs_grammar_vocab_new(piece, len, n, &v, &err), GS_OK, "%s", err.msg);
    free(piece); /* the vocabulary copied the pieces */
    free(len);
    return v;
}
