/*
 * bench/gguf_open.c - gs-bench-gguf-open FILE...: resident memory added by
 * opening a GGUF file, next to the file's size. The reader maps the file and
 * touches only the header, so the figure shows that tensor data is not copied
 * or read at open.
 */
#include "engine/gguf.h"

#include <stdio.h>
#include <unistd.h>

static long rss_bytes(void)
{
    long pages_total, pages_resident;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return -1;
    int n = fscanf(f, "%ld %ld", &pages_total, &pages_resident);
    fclose(f);
    return n == 2 ? pages_resident * sysconf(_SC_PAGESIZE) : -1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: gs-bench-gguf-open FILE...\n");
        return 2;
    }
    printf("| file | file bytes | RSS added by open | header bytes | ratio to file |\n"
           "|---|---|---|---|---|\n");
    for (int i = 1; i < argc; i++) {
        struct gs_gguf *g;
        struct gs_err err;
        long before = rss_bytes();
        if (gs_gguf_open(argv[i], &g, &err)) {
            fprintf(stderr, "gs-bench-gguf-open: %s\n", err.msg);
            return 1;
        }
        long added = rss_bytes() - before;
        printf("| %s | %llu | %ld | %llu | %.3f |\n", argv[i],
               (unsigned long long)gs_gguf_file_bytes(g), added,
               (unsigned long long)gs_gguf_data_offset(g),
               (double)added / (double)gs_gguf_file_bytes(g));
        gs_gguf_close(g);
    }
    return 0;
}
