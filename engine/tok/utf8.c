/*
 * engine/tok/utf8.c - the UTF-8 rules the tokenizers share. Decoding is
 * strict (no overlong forms, surrogates or code points past U+10FFFF): a bad
 * byte reads as U+FFFD and consumes one byte, which is what llama.cpp does
 * for every malformed input its own lenient decoder notices.
 */
#include "engine/tok/internal.h"

size_t gs_tok__utf8_decode(const char *str, size_t len, uint32_t *cp)
{
    const unsigned char *s = (const unsigned char *)str;
    *cp = 0xFFFD;
    if (len == 0)
        return 0;
    unsigned char c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t n;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF)
        n = 2, v = c & 0x1F, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF)
        n = 3, v = c & 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4)
        n = 4, v = c & 0x07, min = 0x10000;
    else
        return 1;
    if (len < n)
        return 1;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 1;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 1;
    *cp = v;
    return n;
}

size_t gs_tok__utf8_encode(uint32_t cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

enum gs_status gs_tok__utf8_sanitize(struct gs_tok__buf *b, const char *text, size_t len)
{
    size_t i = 0;
    while (i < len) {
        /* Copy the longest valid run in one go. */
        size_t j = i;
        for (;;) {
            if (j >= len)
                break;
            if ((unsigned char)text[j] < 0x80) {
                j++;
                continue;
            }
            uint32_t cp;
            size_t n = gs_tok__utf8_decode(text + j, len - j, &cp);
            if (cp == 0xFFFD && n == 1)
                break;
            j += n;
        }
        if (gs_tok__buf_put(b, text + i, j - i) != GS_OK)
            return GS_NOMEM;
        if (j < len) {
            if (gs_tok__buf_put(b, "\xef\xbf\xbd", 3) != GS_OK)
                return GS_NOMEM;
            j++;
        }
        i = j;
    }
    return GS_OK;
}
