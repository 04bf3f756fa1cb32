/*
 * tests/fuzz/replay.c - the corpus replay driver: main() for a fuzz target
 * built without libFuzzer. It runs LLVMFuzzerTestOneInput once over every
 * regular file of each folder (or file) named on the command line, in name
 * order so that a failure reproduces, and prints "N inputs replayed". A
 * target that breaks an invariant aborts, which fails the test; under
 * sanitizers the guard script fails it on any report.
 *
 * An empty corpus is an error: a misnamed folder must not pass silently.
 */
#include "tests/fuzz/fuzz.h"

#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

/* libFuzzer calls LLVMFuzzerInitialize only when a target defines it. */
__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    return 0;
}

static void *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s: %s\n", path, strerror(errno));
        exit(1);
    }
    struct stat sb;
    if (fstat(fileno(f), &sb)) {
        fprintf(stderr, "replay: cannot stat %s: %s\n", path, strerror(errno));
        exit(1);
    }
    /* One byte more than the file so that an empty input is a valid pointer;
     * the target is still told the exact size, so ASan catches a read past it. */
    size_t n = (size_t)sb.st_size;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf || fread(buf, 1, n, f) != n) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        exit(1);
    }
    fclose(f);
    *len = n;
    return buf;
}

static void replay_file(const char *path)
{
    size_t len;
    uint8_t *data = read_file(path, &len);
    LLVMFuzzerTestOneInput(data, len);
    free(data);
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

/* Replays path (a file, or every regular file in a folder); returns how many. */
static size_t replay_path(const char *path)
{
    struct stat sb;
    if (stat(path, &sb)) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        exit(1);
    }
    if (!S_ISDIR(sb.st_mode)) {
        replay_file(path);
        return 1;
    }
    struct dirent **names;
    int n = scandir(path, &names, NULL, by_name);
    if (n < 0) {
        fprintf(stderr, "replay: cannot list %s: %s\n", path, strerror(errno));
        exit(1);
    }
    size_t done = 0;
    for (int i = 0; i < n; i++) {
        char file[4096];
        snprintf(file, sizeof(file), "%s/%s", path, names[i]->d_name);
        if (!stat(file, &sb) && S_ISREG(sb.st_mode)) {
            replay_file(file);
            done++;
        }
        free(names[i]);
    }
    free(names);
    return done;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR_OR_FILE...\n", argv[0]);
        return 2;
    }
    LLVMFuzzerInitialize(&argc, &argv);
    size_t n = 0;
    for (int i = 1; i < argc; i++)
        n += replay_path(argv[i]);
    printf("%zu inputs replayed\n", n);
    if (n == 0) {
        fprintf(stderr, "replay: no inputs in the corpus\n");
        return 1;
    }
    return 0;
}
