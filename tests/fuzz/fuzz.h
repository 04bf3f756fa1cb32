/*
 * tests/fuzz/fuzz.h - what every fuzz target implements, and the checks they
 * share. A target is one fuzz_<name>.c file with a row in tests/fuzz/meson.build.
 *
 * The same object files link two ways: with replay.c, which runs
 * LLVMFuzzerTestOneInput over every file of a corpus folder (the default test
 * run, any compiler), or with libFuzzer (clang -fsanitize=fuzzer, ./dev fuzz),
 * which supplies main() itself.
 *
 * Contract of a target: it accepts any bytes, returns 0, frees everything it
 * allocated before returning (LeakSanitizer reports the rest), and calls
 * FUZZ_CHECK on the invariants the parser promises. A broken invariant aborts,
 * which both drivers report as a failure with the input that caused it.
 * LLVMFuzzerInitialize, when a target defines it, runs once before the first
 * input (loading vocabularies, say); replay.c calls it as libFuzzer does.
 *
 * Threads: both drivers call a target from one thread.
 */
#ifndef GS_FUZZ_H
#define GS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* Aborts with the location and the failed condition when cond is false.
 * Not assert(): it must hold in release builds too. */
#define FUZZ_CHECK(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: invariant failed: %s: ", __FILE__, __LINE__, #cond);          \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* Absolute path of rel under the shared folder: $GS_SHARED_DIR, else the
 * folder meson's shared_dir named at build time. Returns a static buffer;
 * aborts with a message when the file is missing, as the test suites do
 * (tests/common/testutil.h). */
const char *fuzz_shared_path(const char *rel);

#endif /* GS_FUZZ_H */
