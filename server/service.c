/*
 * server/service.c - what the daemon does for a service manager besides
 * serving: SIGHUP reloads (handed to the embedder's on_reload on the loop
 * thread) and the systemd watchdog. Loop thread only.
 *
 * The watchdog ping comes from a libuv timer on the loop thread that checks
 * the engine thread made progress, rather than from the engine thread itself:
 * the engine sleeps when it has no work, so a ping from there alone would
 * stop while the daemon is healthy and idle, and it would not notice a loop
 * thread (the one serving HTTP) that is stuck. The timer proves the loop is
 * alive by firing; the engine's step counter proves the engine is, whenever
 * it has requests to run. So WATCHDOG=1 is sent each half interval unless
 * requests are running or waiting and the engine has not finished a step for
 * a whole interval; then systemd's watchdog restarts the service.
 */
#include "server/daemon.h"

#include "config/log.h"
#include "server/systemd.h"

#include <signal.h>

static void on_hup(uv_signal_t *h, int signum)
{
    struct gs_srv *s = h->data;
    (void)signum;
    if (s->draining)
        return;
    s->cfg.on_reload(s->cfg.reload_ctx, s);
}

/* True while the engine is idle or finished a step within the interval. */
static bool engine_alive(struct gs_srv *s, double now_ms)
{
    if (!s->has_engine)
        return true;
    struct gs_sched_stats st;
    s->engine.stats(s->engine.ctx, &st);
    if (st.n_steps != s->wd_steps || (st.n_running == 0 && st.n_waiting == 0)) {
        s->wd_steps = st.n_steps;
        s->wd_progress_ms = now_ms;
    }
    return now_ms - s->wd_progress_ms < (double)s->cfg.watchdog_usec / 1000.0;
}

static void on_watchdog(uv_timer_t *h)
{
    struct gs_srv *s = h->data;
    double now = gs_now_ms();
    if (!engine_alive(s, now)) {
        gs_log(GS_LOG_ERROR, "watchdog", "engine_stalled_ms=%.0f", now - s->wd_progress_ms);
        return;
    }
    struct gs_err err;
    if (gs_sd_notify("WATCHDOG=1", NULL, &err) != GS_OK)
        gs_log(GS_LOG_WARN, "watchdog", "error=\"%s\"", err.msg);
}

void gs_srv__service_start(struct gs_srv *s)
{
    if (s->cfg.handle_signals && s->cfg.on_reload) {
        uv_signal_init(&s->loop, &s->sig_hup);
        s->sig_hup.data = s;
        uv_signal_start(&s->sig_hup, on_hup, SIGHUP);
        s->hup_on = true;
    }
    if (s->cfg.watchdog_usec) {
        uint64_t every_ms = s->cfg.watchdog_usec / 2000;
        if (!every_ms)
            every_ms = 1;
        uv_timer_init(&s->loop, &s->watchdog);
        s->watchdog.data = s;
        s->wd_progress_ms = gs_now_ms();
        uv_timer_start(&s->watchdog, on_watchdog, 0, every_ms);
        s->watchdog_on = true;
    }
}

void gs_srv__service_close(struct gs_srv *s)
{
    if (s->hup_on)
        uv_close((uv_handle_t *)&s->sig_hup, NULL);
    if (s->watchdog_on)
        uv_close((uv_handle_t *)&s->watchdog, NULL);
    s->hup_on = s->watchdog_on = false;
}
