/* server/stop.c - stop strings matched across token boundaries: text that
 * could be the start of a stop string is held back until it either completes
 * one (generation ends, the stop string is never shown) or cannot any more. */
#define _GNU_SOURCE
#include "server/internal.h"

#include <string.h>

void gs_srv_stop_init(struct gs_srv_stop *st, char *const *stops, size_t n_stops)
{
    *st = (struct gs_srv_stop){.stops = stops, .n_stops = n_stops};
}

void gs_srv_stop_deinit(struct gs_srv_stop *st)
{
    gs_srv_buf_free(&st->held);
}

/* Length of the longest suffix of s[0..n) that is a proper prefix of some
 * stop string. */
static size_t partial_suffix(const struct gs_srv_stop *st, const char *s, size_t n)
{
    size_t best = 0;
    for (size_t k = 0; k < st->n_stops; k++) {
        size_t sl = strlen(st->stops[k]);
        size_t max = GS_MIN(sl - 1, n);
        for (size_t l = max; l > best; l--)
            if (!memcmp(s + n - l, st->stops[k], l)) {
                best = l;
                break;
            }
    }
    return best;
}

bool gs_srv_stop_feed(struct gs_srv_stop *st, const char *text, size_t len, struct gs_srv_buf *out)
{
    if (st->hit)
        return true;
    if (st->n_stops == 0) {
        gs_srv_buf_add(out, text, len);
        return false;
    }
    gs_srv_buf_add(&st->held, text, len);
    if (st->held.failed) {
        out->failed = true;
        return false;
    }
    const char *h = st->held.p;
    size_t n = st->held.len;
    /* The earliest complete stop string wins. */
    size_t first = SIZE_MAX, which = 0;
    for (size_t k = 0; k < st->n_stops; k++) {
        const char *m = memmem(h, n, st->stops[k], strlen(st->stops[k]));
        if (m && (size_t)(m - h) < first) {
            first = (size_t)(m - h);
            which = k;
        }
    }
    if (first != SIZE_MAX) {
        gs_srv_buf_add(out, h, first);
        st->hit = true;
        st->hit_index = which;
        st->held.len = 0;
        return true;
    }
    size_t keep = partial_suffix(st, h, n);
    gs_srv_buf_add(out, h, n - keep);
    gs_srv_buf_consume(&st->held, n - keep);
    return false;
}

void gs_srv_stop_flush(struct gs_srv_stop *st, struct gs_srv_buf *out)
{
    if (!st->hit && st->held.len)
        gs_srv_buf_add(out, st->held.p, st->held.len);
    st->held.len = 0;
}
