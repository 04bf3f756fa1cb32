/*
 * engine/tok/wpm.c - WordPiece ("bert") encoding of one fragment, as
 * llama.cpp does it: normalise (lowercase, strip accents by keeping the
 * first code point of the NFD form and dropping marks), split on whitespace
 * and around punctuation, ASCII symbols and CJK ideographs, then cover each
 * word, prefixed with U+2581, by greedy longest matches; a word that cannot
 * be covered becomes <unk>. Unicode data comes from utf8proc.
 */
#include "engine/tok/internal.h"

#include <utf8proc.h>

static bool is_ws(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

static bool is_cjk(uint32_t c)
{
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

static uint32_t nfd_first(uint32_t c)
{
    utf8proc_int32_t buf[8];
    int last = 0;
    utf8proc_ssize_t n =
        utf8proc_decompose_char((utf8proc_int32_t)c, buf, 8, UTF8PROC_DECOMPOSE, &last);
    return n >= 1 && n <= 8 ? (uint32_t)buf[0] : c;
}

/* Covers one word (already prefixed) by greedy longest matches. */
static enum gs_status cover_word(const struct gs_tok *t, const char *w, size_t n,
                                 struct gs_tok__ids *out)
{
    size_t mark = out->n;
    for (size_t i = 0; i < n;) {
        size_t j = GS_MIN(n, i + t->max_token_len);
        int32_t id = GS_TOK_NULL;
        for (; j > i; j--)
            if ((id = gs_tok__lookup(t, w + i, j - i)) >= 0)
                break;
        if (id < 0) {
            out->n = mark;
            break;
        }
        if (gs_tok__ids_push(out, id) != GS_OK)
            return GS_NOMEM;
        i = j;
    }
    if (out->n == mark && t->sp.unk >= 0)
        return gs_tok__ids_push(out, t->sp.unk);
    return GS_OK;
}

static enum gs_status end_word(const struct gs_tok *t, struct gs_tok__buf *w,
                               struct gs_tok__ids *out)
{
    enum gs_status st = GS_OK;
    if (w->n > 3)
        st = cover_word(t, w->v, w->n, out);
    w->n = 0;
    if (st == GS_OK)
        st = gs_tok__buf_put(w, "\xe2\x96\x81", 3);
    return st;
}

enum gs_status gs_tok__wpm_encode(const struct gs_tok *t, struct gs_tok__scratch *s,
                                  const char *text, size_t len, struct gs_tok__ids *out)
{
    struct gs_tok__buf *w = &s->word;
    w->n = 0;
    if (gs_tok__buf_put(w, "\xe2\x96\x81", 3) != GS_OK)
        return GS_NOMEM;
    for (size_t i = 0; i < len;) {
        uint32_t c;
        i += gs_tok__utf8_decode(text + i, len - i, &c);
        if (t->wpm_strip_accents)
            c = nfd_first(c);
        if (is_ws(c)) {
            if (end_word(t, w, out) != GS_OK)
                return GS_NOMEM;
            continue;
        }
        utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)c);
        if (c == 0 || c == 0xFFFD || cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF ||
            cat == UTF8PROC_CATEGORY_CO || cat == UTF8PROC_CATEGORY_CS)
            continue;
        bool mark = cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_MC ||
                    cat == UTF8PROC_CATEGORY_ME;
        if (t->wpm_strip_accents && mark)
            continue;
        if (t->wpm_lowercase)
            c = (uint32_t)utf8proc_tolower((utf8proc_int32_t)c);
        char u[4];
        size_t un = gs_tok__utf8_encode(c, u);
        bool punct = cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
        bool sym = cat >= UTF8PROC_CATEGORY_SM && cat <= UTF8PROC_CATEGORY_SO;
        if (punct || (c < 0x7F && sym) || is_cjk(c)) {
            if (end_word(t, w, out) != GS_OK || gs_tok__buf_put(w, u, un) != GS_OK ||
                end_word(t, w, out) != GS_OK)
                return GS_NOMEM;
        } else if (gs_tok__buf_put(w, u, un) != GS_OK) {
            return GS_NOMEM;
        }
    }
    return end_word(t, w, out);
}
