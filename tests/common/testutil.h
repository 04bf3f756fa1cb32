/*
 * tests/common/testutil.h - helpers shared by the Criterion suites.
 *
 * Files under ../shared are required: gs_test_shared_path() fails the test
 * (never skips) when the file is missing, so that a CI run without the shared
 * models is red, not silently green.
 */
#ifndef GS_TESTUTIL_H
#define GS_TESTUTIL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* Absolute path of rel under the shared folder (GS_SHARED_DIR). Asserts that
 * it exists. Returns a static buffer valid until the next call. */
const char *gs_test_shared_path(const char *rel);

/* Path of rel under the build folder (GS_BUILD_DIR), e.g. the graphserve binary. */
const char *gs_test_build_path(const char *rel);

/* Reads a whole file; asserts on failure. Caller frees with free(). */
void *gs_test_read_file(const char *path, size_t *len);

/* Loads a JSON file; asserts on failure. Caller json_decref()s. */
json_t *gs_test_load_json(const char *path);

/* A fresh temporary directory for this test (removed by nobody: it is under
 * the build folder's tmp/). Returns a static buffer. */
const char *gs_test_tmpdir(void);

/* Runs a shell command, captures stdout (and stderr if merge_stderr) into a
 * malloc'ed string (*out, caller frees) and returns the exit status. */
int gs_test_run(const char *cmd, int merge_stderr, char **out);

/* The grammar vocabulary of tok's tokens, as the daemon builds it (each token's piece
 * bytes); asserts on failure. Free with gs_grammar_vocab_free. */
struct gs_tok;
struct gs_grammar_vocab;
struct gs_grammar_vocab *gs_test_grammar_vocab(const struct gs_tok *tok);

#endif
