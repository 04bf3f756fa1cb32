/*
 * tests/fuzz/shared_path.c - where the targets that need real files (the
 * tokenizer vocabularies) find ../shared, for both drivers.
 */
#include "tests/fuzz/fuzz.h"

#include <unistd.h>

#ifndef GS_FUZZ_SHARED_DIR
#define GS_FUZZ_SHARED_DIR "../shared"
#endif

const char *fuzz_shared_path(const char *rel)
{
    static char path[4096];
    const char *dir = getenv("GS_SHARED_DIR");
    if (!dir || !*dir)
        dir = GS_FUZZ_SHARED_DIR;
    snprintf(path, sizeof(path), "%s/%s", dir, rel);
    if (access(path, R_OK)) {
        fprintf(stderr, "fuzz: %s is missing (set GS_SHARED_DIR to the folder with models/)\n",
                path);
        abort();
    }
    return path;
}
