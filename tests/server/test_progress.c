/*
 * tests/server/test_progress.c - the load progress bar: drawn with bytes,
 * percent and rate on a terminal (a pseudo-terminal here), silent on a pipe
 * and with TERM=dumb, so that logs never get carriage returns.
 */
#define _GNU_SOURCE
#include "server/progress.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <pty.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Everything readable on fd now (non-blocking), NUL-terminated. */
static size_t drain(int fd, char *buf, size_t cap)
{
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    size_t n = 0;
    ssize_t r;
    while (n < cap - 1 && (r = read(fd, buf + n, cap - 1 - n)) > 0)
        n += (size_t)r;
    buf[n] = '\0';
    return n;
}

Test(progress, bar_on_a_terminal_shows_bytes_percent_and_rate)
{
    int master, slave;
    cr_assert_eq(openpty(&master, &slave, NULL, NULL, NULL), 0);
    FILE *f = fdopen(slave, "w");
    cr_assert(f);
    setenv("TERM", "xterm", 1);
    struct gs_progress p;
    gs_progress_begin(&p, f, "loading weights", 64ull << 20);
    cr_assert(p.on, "a pseudo-terminal is a terminal");
    gs_progress_update(&p, 16ull << 20);
    gs_progress_update(&p, 64ull << 20); /* within 100 ms: not drawn, but end draws it */
    gs_progress_end(&p);
    char out[4096];
    drain(master, out, sizeof(out));
    cr_expect(strstr(out, "\rloading weights ["), "%s", out);
    cr_expect(strstr(out, "16.0 MiB / 64.0 MiB"), "%s", out);
    cr_expect(strstr(out, " 25%"), "%s", out);
    cr_expect(strstr(out, "100%  64.0 MiB / 64.0 MiB"), "the final draw: %s", out);
    cr_expect(strstr(out, "/s"), "no rate: %s", out);
    cr_expect(out[strlen(out) - 1] == '\n', "the line is not ended: %s", out);
    fclose(f);
    close(master);
}

Test(progress, silent_on_a_pipe_and_with_term_dumb)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    FILE *f = fdopen(fds[1], "w");
    struct gs_progress p;
    gs_progress_begin(&p, f, "loading", 1000);
    cr_expect(!p.on);
    gs_progress_update(&p, 500);
    gs_progress_end(&p);
    fclose(f);
    char out[256];
    cr_expect_eq(drain(fds[0], out, sizeof(out)), 0, "wrote to a pipe: %s", out);
    close(fds[0]);

    int master, slave;
    cr_assert_eq(openpty(&master, &slave, NULL, NULL, NULL), 0);
    f = fdopen(slave, "w");
    setenv("TERM", "dumb", 1);
    gs_progress_begin(&p, f, "loading", 1000);
    cr_expect(!p.on, "TERM=dumb gets no bar");
    gs_progress_end(&p);
    fclose(f);
    cr_expect_eq(drain(master, out, sizeof(out)), 0, "wrote with TERM=dumb: %s", out);
    close(master);
}

Test(progress, byte_units)
{
    static const struct {
        unsigned long long n;
        const char *s;
    } cases[] = {{0, "0 B"}, {1023, "1023 B"}, {1536, "1.5 KiB"},
                 {5ull << 20, "5.0 MiB"}, {3ull << 30 | 1ull << 29, "3.5 GiB"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char b[32];
        gs_progress_bytes(cases[i].n, b, sizeof(b));
        cr_expect_str_eq(b, cases[i].s);
    }
}
