/*
 * server/progress.c - the start-up progress bar (server/progress.h).
 */
#include "server/progress.h"

#include "engine/base.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define REDRAW_MS 100
#define BAR_COLS  24

void gs_progress_bytes(uint64_t n, char *out, size_t cap)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    size_t u = 0;
    while (v >= 1024 && u + 1 < GS_ARRAY_LEN(units)) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(out, cap, "%llu B", (unsigned long long)n);
    else
        snprintf(out, cap, "%.1f %s", v, units[u]);
}

void gs_progress_begin_forced(struct gs_progress *p, FILE *f, const char *label, uint64_t total,
                              bool on)
{
    memset(p, 0, sizeof(*p));
    p->f = f;
    p->on = on;
    snprintf(p->label, sizeof(p->label), "%s", label);
    p->total = total;
    p->t0_ms = gs_now_ms();
    p->t_draw_ms = -REDRAW_MS;
}

void gs_progress_begin(struct gs_progress *p, FILE *f, const char *label, uint64_t total)
{
    const char *term = getenv("TERM");
    bool tty = f && isatty(fileno(f)) && !(term && !strcmp(term, "dumb"));
    gs_progress_begin_forced(p, f, label, total, tty);
}

static void draw(struct gs_progress *p, double now)
{
    char done[32], total[32], rate[32];
    double s = (now - p->t0_ms) / 1000.0;
    double bps = s > 0 ? (double)p->done / s : 0;
    gs_progress_bytes(p->done, done, sizeof(done));
    gs_progress_bytes(p->total, total, sizeof(total));
    gs_progress_bytes((uint64_t)bps, rate, sizeof(rate));
    if (!p->total) {
        fprintf(p->f, "\r%s %s  %s/s\x1b[K", p->label, done, rate);
    } else {
        double frac = p->done >= p->total ? 1.0 : (double)p->done / (double)p->total;
        char bar[BAR_COLS + 1];
        int fill = (int)(frac * BAR_COLS);
        for (int i = 0; i < BAR_COLS; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[BAR_COLS] = '\0';
        double left = bps > 0 ? (double)(p->total - (p->done < p->total ? p->done : p->total)) / bps
                              : 0;
        fprintf(p->f, "\r%s [%s] %3.0f%%  %s / %s  %s/s  %.0fs left\x1b[K", p->label, bar,
                frac * 100, done, total, rate, left);
    }
    fflush(p->f);
    p->t_draw_ms = now;
}

void gs_progress_update(struct gs_progress *p, uint64_t done)
{
    p->done = done;
    if (!p->on)
        return;
    double now = gs_now_ms();
    if (now - p->t_draw_ms >= REDRAW_MS)
        draw(p, now);
}

void gs_progress_end(struct gs_progress *p)
{
    if (!p->on)
        return;
    draw(p, gs_now_ms());
    fputc('\n', p->f);
    fflush(p->f);
    p->on = false;
}
