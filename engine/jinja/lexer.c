/*
 * engine/jinja/lexer.c - template text to tokens, with Hugging Face's
 * whitespace settings applied here so that the parser never sees them:
 *
 *   {%- / {{- / {#-   strip all whitespace before the tag;
 *   -%} / -}} / -#}   strip all whitespace after it;
 *   trim_blocks       the first newline after a block or comment tag goes;
 *   lstrip_blocks     spaces and tabs between the start of a line and a block
 *                     or comment tag go ({%+ keeps them; {{ is never affected).
 *
 * The source has already had its newlines normalised to \n and one trailing
 * newline dropped (parse.c), as Jinja's lexer does with keep_trailing_newline
 * off.
 */
#include "engine/jinja/internal.h"

#include <stdlib.h>
#include <string.h>

void gs_jinja__lex_init(struct jlexer *lx, const char *src, size_t len, struct jarena *arena,
                        struct gs_err *err)
{
    memset(lx, 0, sizeof(*lx));
    lx->src = lx->p = lx->line_start = src;
    lx->end = src + len;
    lx->line = 1;
    lx->arena = arena;
    lx->err = err;
}

static int lex_fail(struct jlexer *lx, const char *at, const char *what)
{
    /* The column counts bytes from the start of the line, 1-based. */
    const char *ls = lx->line_start;
    gs_err_set(lx->err, GS_FORMAT, "jinja: line %u, column %zu: %s", lx->line,
               (size_t)(at - ls) + 1, what);
    return -1;
}

static void advance_to(struct jlexer *lx, const char *to)
{
    for (const char *q = lx->p; q < to; q++) {
        if (*q == '\n') {
            lx->line++;
            lx->line_start = q + 1;
        }
    }
    lx->p = to;
}

static bool is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* Where the next tag opening ({{, {%, {#) starts, or end. */
static const char *find_tag(const char *p, const char *end)
{
    for (; p + 1 < end; p++) {
        if (p[0] == '{' && (p[1] == '{' || p[1] == '%' || p[1] == '#'))
            return p;
    }
    return end;
}

/* The data before a tag at q, shortened by the tag's whitespace control. */
static size_t data_len_before(const struct jlexer *lx, const char *start, const char *q)
{
    size_t n = (size_t)(q - start);
    if (q == lx->end)
        return n;
    char kind = q[1], sign = q + 2 < lx->end ? q[2] : 0;
    if (sign == '-') {
        while (n > 0 && is_ws(start[n - 1]))
            n--;
        return n;
    }
    if (sign == '+' || kind == '{')
        return n;
    /* lstrip_blocks: only when nothing but spaces and tabs precede the tag on
     * its line, the line starting inside this data or right at its start. */
    size_t k = n;
    while (k > 0 && (start[k - 1] == ' ' || start[k - 1] == '\t'))
        k--;
    bool at_line_start = k > 0 ? start[k - 1] == '\n' : (start == lx->src || start[-1] == '\n');
    return at_line_start ? k : n;
}

/* Skips whitespace after a tag as its end marker asks (-, or trim_blocks). */
static void after_tag_end(struct jlexer *lx, bool strip, bool trim_newline)
{
    const char *q = lx->p;
    if (strip) {
        while (q < lx->end && is_ws(*q))
            q++;
    } else if (trim_newline && q < lx->end && *q == '\n') {
        q++;
    }
    advance_to(lx, q);
}

/* Skips a comment starting at lx->p ("{#"); returns -1 if it never ends. */
static int skip_comment(struct jlexer *lx)
{
    const char *open = lx->p;
    const char *q = lx->p + 2;
    while (q + 1 < lx->end && !(q[0] == '#' && q[1] == '}'))
        q++;
    if (q + 1 >= lx->end)
        return lex_fail(lx, open, "comment is never closed");
    bool strip = q[-1] == '-' && q - 1 > open + 2;
    advance_to(lx, q + 2);
    after_tag_end(lx, strip, true);
    return 0;
}

/* Data up to the next tag at lx->p; *n is 0 when whitespace control took it all. */
static void lex_data(struct jlexer *lx, struct jtok *tok)
{
    tok->kind = JTK_DATA;
    tok->line = lx->line;
    tok->col = (uint32_t)(lx->p - lx->line_start) + 1;
    const char *start = lx->p;
    const char *q = find_tag(lx->p, lx->end);
    tok->s = start;
    tok->n = data_len_before(lx, start, q);
    advance_to(lx, q);
}

static int lex_tag_open(struct jlexer *lx, struct jtok *tok)
{
    tok->line = lx->line;
    tok->col = (uint32_t)(lx->p - lx->line_start) + 1;
    tok->kind = lx->p[1] == '{' ? JTK_VAR_BEGIN : JTK_BLOCK_BEGIN;
    const char *q = lx->p + 2;
    if (q < lx->end && (*q == '-' || *q == '+'))
        q++;
    advance_to(lx, q);
    lx->in_tag = true;
    lx->tag_kind = tok->kind;
    lx->paren_depth = 0;
    return 0;
}

/* The one-character escapes of a Python string literal. */
static bool simple_escape(char c, char *out)
{
    static const char table[][2] = {
        {'n', '\n'}, {'t', '\t'}, {'r', '\r'},  {'0', '\0'},  {'a', '\a'}, {'b', '\b'},
        {'f', '\f'}, {'v', '\v'}, {'\\', '\\'}, {'\'', '\''}, {'"', '"'},
    };
    for (size_t i = 0; i < GS_ARRAY_LEN(table); i++)
        if (table[i][0] == c) {
            *out = table[i][1];
            return true;
        }
    return false;
}

/* Python string literal escapes, as Jinja resolves them. */
static int unescape(struct jlexer *lx, const char *s, size_t n, struct jtok *tok)
{
    char *o = gs_jinja__alloc(lx->arena, n + 1);
    if (!o)
        return gs_err_set(lx->err, GS_NOMEM, "jinja: out of memory"), -1;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 == n) {
            o[k++] = s[i];
            continue;
        }
        char c = s[++i], plain;
        if (c == '\n') /* a backslash before a newline joins the lines */
            continue;
        if (simple_escape(c, &plain)) {
            o[k++] = plain;
            continue;
        }
        switch (c) {
        case 'x':
        case 'u':
        case 'U': {
            int digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
            uint32_t cp = 0;
            if (i + (size_t)digits >= n)
                return lex_fail(lx, s + i, "truncated escape in string");
            for (int d = 1; d <= digits; d++) {
                char h = s[i + d];
                int v = h >= '0' && h <= '9'   ? h - '0'
                        : h >= 'a' && h <= 'f' ? h - 'a' + 10
                        : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                               : -1;
                if (v < 0)
                    return lex_fail(lx, s + i, "bad escape in string");
                cp = cp * 16 + (uint32_t)v;
            }
            i += (size_t)digits;
            if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
                return lex_fail(lx, s + i, "escape is not a code point");
            if (cp < 0x80) {
                o[k++] = (char)cp;
            } else if (cp < 0x800) {
                o[k++] = (char)(0xC0 | (cp >> 6));
                o[k++] = (char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                o[k++] = (char)(0xE0 | (cp >> 12));
                o[k++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                o[k++] = (char)(0x80 | (cp & 0x3F));
            } else {
                o[k++] = (char)(0xF0 | (cp >> 18));
                o[k++] = (char)(0x80 | ((cp >> 12) & 0x3F));
                o[k++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                o[k++] = (char)(0x80 | (cp & 0x3F));
            }
            break;
        }
        default: /* unknown escapes keep their backslash, as in Python */
            o[k++] = '\\';
            o[k++] = c;
        }
    }
    o[k] = '\0';
    tok->s = o;
    tok->n = k;
    return 0;
}

static int lex_string(struct jlexer *lx, struct jtok *tok)
{
    char quote = *lx->p;
    const char *q = lx->p + 1;
    while (q < lx->end && *q != quote) {
        if (*q == '\\' && q + 1 < lx->end)
            q++;
        q++;
    }
    if (q >= lx->end)
        return lex_fail(lx, lx->p, "string is never closed");
    tok->kind = JTK_STRING;
    if (unescape(lx, lx->p + 1, (size_t)(q - lx->p - 1), tok))
        return -1;
    advance_to(lx, q + 1);
    return 0;
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* The end of the digits (and underscores) from p. */
static const char *skip_digits(const char *p, const char *end)
{
    while (p < end && (is_digit(*p) || *p == '_'))
        p++;
    return p;
}

static int lex_number(struct jlexer *lx, struct jtok *tok)
{
    /* Find the literal's extent first: digits, optional .digits, optional exponent. */
    const char *q = skip_digits(lx->p, lx->end);
    bool is_float = false;
    if (q + 1 < lx->end && *q == '.' && is_digit(q[1])) {
        is_float = true;
        q = skip_digits(q + 1, lx->end);
    }
    if (q < lx->end && (*q == 'e' || *q == 'E')) {
        const char *e = q + 1;
        if (e < lx->end && (*e == '+' || *e == '-'))
            e++;
        if (e < lx->end && is_digit(*e)) {
            is_float = true;
            q = skip_digits(e, lx->end);
        }
    }
    char buf[64];
    size_t k = 0;
    for (const char *c = lx->p; c < q; c++) {
        if (*c == '_')
            continue;
        if (k == sizeof(buf) - 1)
            return lex_fail(lx, lx->p, "number literal is too long");
        buf[k++] = *c;
    }
    buf[k] = '\0';
    if (is_float) {
        tok->kind = JTK_FLOAT;
        tok->f = strtod(buf, NULL);
    } else {
        tok->kind = JTK_INT;
        uint64_t v = 0;
        for (size_t i = 0; i < k; i++) {
            if (v > (uint64_t)(INT64_MAX - 9) / 10)
                return lex_fail(lx, lx->p, "integer literal is too large");
            v = v * 10 + (uint64_t)(buf[i] - '0');
        }
        tok->i = (int64_t)v;
    }
    advance_to(lx, q);
    return 0;
}

struct op_row {
    const char *text;
    uint8_t op;
};

/* Longest first, so that "//" wins over "/". */
static const struct op_row op_table[] = {
    {"//", JT_FLOORDIV},
    {"**", JT_POW},
    {"==", JT_EQ},
    {"!=", JT_NE},
    {"<=", JT_LE},
    {">=", JT_GE},
    {"+", JT_ADD},
    {"-", JT_MINUS},
    {"*", JT_MUL},
    {"/", JT_DIV},
    {"%", JT_MOD},
    {"~", JT_TILDE},
    {"<", JT_LT},
    {">", JT_GT},
    {"=", 0},
    {"(", 0},
    {")", 0},
    {"[", 0},
    {"]", 0},
    {"{", 0},
    {"}", 0},
    {",", 0},
    {".", 0},
    {":", 0},
    {"|", 0},
};

static int lex_op(struct jlexer *lx, struct jtok *tok)
{
    for (size_t i = 0; i < GS_ARRAY_LEN(op_table); i++) {
        size_t n = strlen(op_table[i].text);
        if ((size_t)(lx->end - lx->p) >= n && memcmp(lx->p, op_table[i].text, n) == 0) {
            tok->kind = JTK_OP;
            tok->op = op_table[i].op;
            tok->s = op_table[i].text;
            tok->n = n;
            char c = op_table[i].text[0];
            if (n == 1 && (c == '(' || c == '[' || c == '{'))
                lx->paren_depth++;
            if (n == 1 && (c == ')' || c == ']' || c == '}') && lx->paren_depth > 0)
                lx->paren_depth--;
            advance_to(lx, lx->p + n);
            return 0;
        }
    }
    return lex_fail(lx, lx->p, "unexpected character");
}

/* The end of the current tag at lx->p, if it is there: returns its length. */
static size_t tag_end_at(const struct jlexer *lx, bool *strip)
{
    char close = lx->tag_kind == JTK_VAR_BEGIN ? '}' : '%';
    const char *p = lx->p;
    size_t left = (size_t)(lx->end - p);
    *strip = false;
    if (lx->paren_depth > 0)
        return 0;
    if (left >= 3 && p[0] == '-' && p[1] == close && p[2] == '}') {
        *strip = true;
        return 3;
    }
    if (left >= 2 && p[0] == close && p[1] == '}')
        return 2;
    return 0;
}

static int lex_in_tag(struct jlexer *lx, struct jtok *tok)
{
    while (lx->p < lx->end && is_ws(*lx->p))
        advance_to(lx, lx->p + 1);
    tok->line = lx->line;
    tok->col = (uint32_t)(lx->p - lx->line_start) + 1;
    if (lx->p >= lx->end)
        return lex_fail(lx, lx->p,
                        lx->tag_kind == JTK_VAR_BEGIN ? "'{{' is never closed"
                                                      : "'{%' is never closed");
    bool strip;
    size_t end_len = tag_end_at(lx, &strip);
    if (end_len) {
        tok->kind = lx->tag_kind == JTK_VAR_BEGIN ? JTK_VAR_END : JTK_BLOCK_END;
        advance_to(lx, lx->p + end_len);
        lx->in_tag = false;
        after_tag_end(lx, strip, tok->kind == JTK_BLOCK_END);
        return 0;
    }
    char c = *lx->p;
    if (c == '\'' || c == '"')
        return lex_string(lx, tok);
    if (is_digit(c))
        return lex_number(lx, tok);
    if (c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
        const char *q = lx->p;
        while (q < lx->end &&
               (*q == '_' || is_digit(*q) || (*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z')))
            q++;
        tok->kind = JTK_NAME;
        tok->s = lx->p;
        tok->n = (size_t)(q - lx->p);
        advance_to(lx, q);
        return 0;
    }
    return lex_op(lx, tok);
}

int gs_jinja__lex_next(struct jlexer *lx, struct jtok *tok)
{
    /* A loop, not recursion: a template may hold any number of comments and
     * fully stripped data in a row. */
    for (;;) {
        memset(tok, 0, sizeof(*tok));
        if (lx->in_tag)
            return lex_in_tag(lx, tok);
        if (lx->p >= lx->end) {
            tok->kind = JTK_EOF;
            tok->line = lx->line;
            tok->col = (uint32_t)(lx->p - lx->line_start) + 1;
            return 0;
        }
        if (lx->p + 1 < lx->end && lx->p[0] == '{') {
            if (lx->p[1] == '{' || lx->p[1] == '%')
                return lex_tag_open(lx, tok);
            if (lx->p[1] == '#') {
                if (skip_comment(lx))
                    return -1;
                continue;
            }
        }
        lex_data(lx, tok);
        if (tok->n > 0)
            return 0;
    }
}
