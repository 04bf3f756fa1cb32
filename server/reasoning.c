/*
 * server/reasoning.c - the thinking block a reasoning model writes before its answer
 * (<think> ... </think>, Qwen 3, DeepSeek R1 and the templates that copy them), taken
 * out of the answer's text into reasoning_content. A small state machine over held text,
 * like the tool-call reader: its results do not depend on how the text was cut.
 *
 * Threads: none of its own; the loop thread.
 */
#define _GNU_SOURCE
#include "server/internal.h"

#include <string.h>

#define OPEN_TAG  "<think>"
#define CLOSE_TAG "</think>"

enum {
    TH_START, /* nothing but whitespace yet: a block may still open */
    TH_IN,    /* inside the block */
    TH_GAP,   /* just after </think>: its whitespace is dropped */
    TH_OUT,   /* the answer */
};

static bool is_ws(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

void gs_srv_think_init(struct gs_srv_think *t, bool open)
{
    *t = (struct gs_srv_think){.state = open ? TH_IN : TH_START};
}

void gs_srv_think_deinit(struct gs_srv_think *t)
{
    gs_srv_buf_free(&t->held);
}

bool gs_srv_think_detect(const char *tmpl)
{
    return tmpl && strstr(tmpl, OPEN_TAG) && strstr(tmpl, CLOSE_TAG);
}

bool gs_srv_think_prompt_opens(const char *p, size_t n)
{
    while (n && is_ws(p[n - 1]))
        n--;
    size_t l = strlen(OPEN_TAG);
    return n >= l && !memcmp(p + n - l, OPEN_TAG, l);
}

static void give(struct gs_srv_think *t, size_t n, struct gs_srv_buf *to)
{
    gs_srv_buf_add(to, t->held.p, n);
    gs_srv_buf_consume(&t->held, n);
}

/* One step; false when more text is needed. */
static bool step(struct gs_srv_think *t, struct gs_srv_buf *reasoning, struct gs_srv_buf *content)
{
    const char *p = t->held.p;
    size_t n = t->held.len;
    switch (t->state) {
    case TH_START: {
        size_t k = 0, l = strlen(OPEN_TAG);
        while (k < n && is_ws(p[k]))
            k++;
        size_t have = n - k;
        if (memcmp(p + k, OPEN_TAG, GS_MIN(have, l))) {
            t->state = TH_OUT; /* no block: all of it is the answer, whitespace included */
            return true;
        }
        if (have < l)
            return false;
        gs_srv_buf_consume(&t->held, k + l);
        t->state = TH_IN;
        return true;
    }
    case TH_IN: {
        size_t l = strlen(CLOSE_TAG);
        const char *at = memmem(p, n, CLOSE_TAG, l);
        if (at) {
            give(t, (size_t)(at - p), reasoning);
            gs_srv_buf_consume(&t->held, l);
            t->state = TH_GAP;
            return true;
        }
        size_t keep = 0; /* the longest tail that may still become the close tag */
        for (size_t k = GS_MIN(l - 1, n); k > 0 && !keep; k--)
            if (!memcmp(p + n - k, CLOSE_TAG, k))
                keep = k;
        give(t, n - keep, reasoning);
        return false;
    }
    case TH_GAP: {
        size_t k = 0;
        while (k < n && is_ws(p[k]))
            k++;
        gs_srv_buf_consume(&t->held, k);
        if (k == n)
            return false;
        t->state = TH_OUT;
        return true;
    }
    case TH_OUT:
        give(t, n, content);
        return false;
    }
    return false;
}

bool gs_srv_think_feed(struct gs_srv_think *t, const char *text, size_t len,
                       struct gs_srv_buf *reasoning, struct gs_srv_buf *content)
{
    gs_srv_buf_add(&t->held, text, len);
    while (!t->held.failed && t->held.len && step(t, reasoning, content)) {
    }
    return !t->held.failed && !reasoning->failed && !content->failed;
}

bool gs_srv_think_finish(struct gs_srv_think *t, struct gs_srv_buf *reasoning,
                         struct gs_srv_buf *content)
{
    if (t->state == TH_IN)
        give(t, t->held.len, reasoning);
    else if (t->state == TH_GAP)
        gs_srv_buf_consume(&t->held, t->held.len);
    else
        give(t, t->held.len, content);
    t->state = TH_OUT;
    return !reasoning->failed && !content->failed;
}
