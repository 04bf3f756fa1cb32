/*
 * server/progress.h - a one-line progress bar on a terminal for long start-up
 * work (reading a model's weights): bytes done of the total, percent, rate and
 * time left, redrawn in place at most ten times a second. Off (every call a
 * no-op) when the stream is not a terminal or TERM is "dumb", so that logs,
 * journald and container runtimes never see carriage returns.
 *
 * Ownership: struct gs_progress is caller-allocated; the stream is borrowed.
 * Threads: one thread per bar.
 */
#ifndef GS_SERVER_PROGRESS_H
#define GS_SERVER_PROGRESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct gs_progress {
    FILE *f;           /* where the bar is drawn */
    bool on;           /* f is a terminal */
    char label[32];    /* "loading" */
    uint64_t total;    /* bytes; 0: unknown (no percent, no time left) */
    uint64_t done;     /* bytes */
    double t0_ms;      /* when it began */
    double t_draw_ms;  /* last redraw */
};

/* Starts a bar on f (normally stderr); draws nothing unless f is a terminal. */
void gs_progress_begin(struct gs_progress *p, FILE *f, const char *label, uint64_t total);

/* Starts a bar that is on or off regardless of f (for tests). */
void gs_progress_begin_forced(struct gs_progress *p, FILE *f, const char *label, uint64_t total,
                              bool on);

/* Records done bytes; redraws when 100 ms have passed since the last draw. */
void gs_progress_update(struct gs_progress *p, uint64_t done);

/* Draws the final state and ends the line. */
void gs_progress_end(struct gs_progress *p);

/* Formats n bytes as "512 B", "1.5 KiB", "3.2 GiB" into out. */
void gs_progress_bytes(uint64_t n, char *out, size_t cap);

#endif /* GS_SERVER_PROGRESS_H */
