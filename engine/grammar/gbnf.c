/*
 * engine/grammar/gbnf.c - GBNF text to the byte-level compiled form of
 * internal.h: a recursive-descent parser that desugars as it goes (groups
 * and repetitions become rules of their own, code-point classes become rules
 * over UTF-8 byte sequences), then name resolution and the checks that keep
 * the matcher finite (no undefined rule, no left recursion).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/grammar/internal.h"

void gs_grammar_limits_default(struct gs_grammar_limits *lim)
{
    *lim = (struct gs_grammar_limits){
        .max_source_bytes = 1u << 20,
        .max_rules = 65536,
        .max_elements = 1u << 20,
        .max_repeat = 10000,
        .max_stacks = 2048,
        .max_stack_depth = 1024,
        .max_mask_work = 1ull << 26,
        .max_cache_bytes = 64ull << 20,
    };
}

static void limits_fill(struct gs_grammar_limits *out, const struct gs_grammar_limits *in)
{
    struct gs_grammar_limits d;
    gs_grammar_limits_default(&d);
    *out = in ? *in : d;
#define FILL(f)                                                                                    \
    if (!out->f)                                                                                   \
    out->f = d.f
    FILL(max_source_bytes);
    FILL(max_rules);
    FILL(max_elements);
    FILL(max_repeat);
    FILL(max_stacks);
    FILL(max_stack_depth);
    FILL(max_mask_work);
    FILL(max_cache_bytes);
#undef FILL
}

/* ---- the builder: rules as growable alternatives --------------------------- */

struct seq {
    uint32_t *e;
    uint32_t n, cap;
};

struct brule {
    char *name;      /* NULL for rules the compiler made */
    uint32_t line;   /* where it was defined or made */
    bool defined;
    struct seq *alts;
    uint32_t n_alts, cap_alts;
};

struct builder {
    const char *src, *end, *p;
    struct gs_grammar_limits lim;
    struct gs_err *err;
    struct brule *rules;
    uint32_t n_rules, cap_rules;
    uint32_t n_el; /* elements so far, all rules, for the limit */
    struct gbytes *sets;
    uint32_t n_sets, cap_sets;
    uint32_t *set_hash; /* open addressing: set index + 1, 0 empty */
    uint32_t set_hash_cap;
    uint32_t *name_hash; /* open addressing: rule index + 1 */
    uint32_t name_hash_cap;
    uint32_t depth; /* parser nesting */
    const char *line_at; /* where() resumes from here ... */
    uint32_t line_no;    /* ... which is on this line */
};

static enum gs_status nomem(struct builder *b)
{
    return gs_err_set(b->err, GS_NOMEM, "grammar: out of memory");
}

/* Line and column of at. Lines are counted from the last position asked
 * about when at is past it, so the parser's calls cost linear time. */
static void where(struct builder *b, const char *at, uint32_t *line, uint32_t *col)
{
    if (!b->line_at || at < b->line_at) {
        b->line_at = b->src;
        b->line_no = 1;
    }
    for (const char *q = b->line_at; q < at && q < b->end; q++)
        if (*q == '\n') {
            b->line_no++;
            b->line_at = q + 1;
        }
    const char *bol = b->line_at;
    *line = b->line_no;
    *col = (uint32_t)(at - bol) + 1;
}

static enum gs_status syntax(struct builder *b, const char *at, const char *what)
{
    uint32_t line, col;
    where(b, at, &line, &col);
    return gs_err_set(b->err, GS_INVAL, "grammar: line %u, column %u: %s", line, col, what);
}

static uint64_t hash_bytes(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 1099511628211ull;
    return h;
}

static bool grow(void **p, uint32_t *cap, uint32_t need, size_t elem)
{
    if (need <= *cap)
        return true;
    uint32_t nc = *cap ? *cap : 8;
    while (nc < need)
        nc *= 2;
    void *q = gs_realloc(*p, (size_t)nc * elem);
    if (!q)
        return false;
    *p = q;
    *cap = nc;
    return true;
}

/* Interns a byte set; returns its index or UINT32_MAX on no memory. */
static uint32_t set_intern(struct builder *b, const struct gbytes *s)
{
    if (b->n_sets * 2 >= b->set_hash_cap) {
        uint32_t nc = b->set_hash_cap ? b->set_hash_cap * 2 : 1024;
        uint32_t *h = gs_calloc(nc, sizeof(*h));
        if (!h)
            return UINT32_MAX;
        for (uint32_t i = 0; i < b->n_sets; i++) {
            uint32_t k = (uint32_t)hash_bytes(&b->sets[i], sizeof(*s)) & (nc - 1);
            while (h[k])
                k = (k + 1) & (nc - 1);
            h[k] = i + 1;
        }
        gs_free(b->set_hash);
        b->set_hash = h;
        b->set_hash_cap = nc;
    }
    uint32_t k = (uint32_t)hash_bytes(s, sizeof(*s)) & (b->set_hash_cap - 1);
    while (b->set_hash[k]) {
        if (!memcmp(&b->sets[b->set_hash[k] - 1], s, sizeof(*s)))
            return b->set_hash[k] - 1;
        k = (k + 1) & (b->set_hash_cap - 1);
    }
    if (!grow((void **)&b->sets, &b->cap_sets, b->n_sets + 1, sizeof(*s)))
        return UINT32_MAX;
    b->sets[b->n_sets] = *s;
    b->set_hash[k] = b->n_sets + 1;
    return b->n_sets++;
}

static enum gs_status seq_push(struct builder *b, struct seq *q, uint32_t e)
{
    if (++b->n_el > b->lim.max_elements)
        return gs_err_set(b->err, GS_INVAL,
                          "grammar: more than %u elements after expanding repetitions "
                          "(max_elements)",
                          b->lim.max_elements);
    if (!grow((void **)&q->e, &q->cap, q->n + 1, sizeof(*q->e)))
        return nomem(b);
    q->e[q->n++] = e;
    return GS_OK;
}

static enum gs_status push_byte_range(struct builder *b, struct seq *q, uint8_t lo, uint8_t hi)
{
    struct gbytes s = {{0}};
    for (unsigned c = lo; c <= hi; c++)
        s.w[c >> 6] |= 1ull << (c & 63);
    uint32_t id = set_intern(b, &s);
    if (id == UINT32_MAX)
        return nomem(b);
    return seq_push(b, q, GE_MAKE(GE_BYTES, id));
}

/* A new rule; returns its index or UINT32_MAX (error set). */
static uint32_t rule_new(struct builder *b, char *name, uint32_t line)
{
    if (b->n_rules >= b->lim.max_rules) {
        gs_err_set(b->err, GS_INVAL, "grammar: more than %u rules after expanding repetitions "
                                     "(max_rules)",
                   b->lim.max_rules);
        gs_free(name);
        return UINT32_MAX;
    }
    if (!grow((void **)&b->rules, &b->cap_rules, b->n_rules + 1, sizeof(*b->rules))) {
        gs_free(name);
        nomem(b);
        return UINT32_MAX;
    }
    b->rules[b->n_rules] = (struct brule){.name = name, .line = line};
    return b->n_rules++;
}

/* A new, empty alternative of rule r; NULL on no memory. */
static struct seq *alt_new(struct builder *b, uint32_t r)
{
    struct brule *ru = &b->rules[r];
    if (!grow((void **)&ru->alts, &ru->cap_alts, ru->n_alts + 1, sizeof(*ru->alts))) {
        nomem(b);
        return NULL;
    }
    ru->alts[ru->n_alts] = (struct seq){0};
    return &ru->alts[ru->n_alts++];
}

/* The rule named name[n], created undefined on first use. */
static uint32_t rule_by_name(struct builder *b, const char *name, size_t n, uint32_t line)
{
    if (b->n_rules * 2 >= b->name_hash_cap) {
        uint32_t nc = b->name_hash_cap ? b->name_hash_cap * 2 : 256;
        while (nc <= b->n_rules * 2)
            nc *= 2;
        uint32_t *h = gs_calloc(nc, sizeof(*h));
        if (!h) {
            nomem(b);
            return UINT32_MAX;
        }
        for (uint32_t i = 0; i < b->n_rules; i++) {
            if (!b->rules[i].name)
                continue;
            uint32_t k = (uint32_t)hash_bytes(b->rules[i].name, strlen(b->rules[i].name)) &
                         (nc - 1);
            while (h[k])
                k = (k + 1) & (nc - 1);
            h[k] = i + 1;
        }
        gs_free(b->name_hash);
        b->name_hash = h;
        b->name_hash_cap = nc;
    }
    uint32_t k = (uint32_t)hash_bytes(name, n) & (b->name_hash_cap - 1);
    while (b->name_hash[k]) {
        const char *rn = b->rules[b->name_hash[k] - 1].name;
        if (!strncmp(rn, name, n) && rn[n] == '\0')
            return b->name_hash[k] - 1;
        k = (k + 1) & (b->name_hash_cap - 1);
    }
    char *copy = gs_strndup(name, n);
    if (!copy) {
        nomem(b);
        return UINT32_MAX;
    }
    uint32_t r = rule_new(b, copy, line);
    if (r != UINT32_MAX)
        b->name_hash[k] = r + 1;
    return r;
}

/* ---- code points to UTF-8 byte sequences ----------------------------------- */

struct cprange {
    uint32_t lo, hi;
};

static int encode_utf8(uint32_t c, uint8_t *out)
{
    if (c < 0x80) {
        out[0] = (uint8_t)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (uint8_t)(0xC0 | (c >> 6));
        out[1] = (uint8_t)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (c >> 12));
        out[1] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (c >> 18));
    out[1] = (uint8_t)(0x80 | ((c >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (c & 0x3F));
    return 4;
}

static int utf8_len(uint32_t c)
{
    return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
}

/*
 * Appends to rule r one alternative per run of byte ranges that together
 * encode exactly the code points [lo, hi] (same encoded length, no
 * surrogates): split until every position's bytes form one range.
 */
static enum gs_status utf8_alts(struct builder *b, uint32_t r, uint32_t lo, uint32_t hi)
{
    int n = utf8_len(lo);
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if (lo & m) {
                enum gs_status st = utf8_alts(b, r, lo, lo | m);
                return st ? st : utf8_alts(b, r, (lo | m) + 1, hi);
            }
            if ((hi & m) != m) {
                enum gs_status st = utf8_alts(b, r, lo, (hi & ~m) - 1);
                return st ? st : utf8_alts(b, r, hi & ~m, hi);
            }
        }
    }
    uint8_t el[4], eh[4];
    encode_utf8(lo, el);
    encode_utf8(hi, eh);
    struct seq *q = alt_new(b, r);
    if (!q)
        return GS_NOMEM;
    for (int i = 0; i < n; i++) {
        enum gs_status st = push_byte_range(b, q, el[i], eh[i]);
        if (st)
            return st;
    }
    return GS_OK;
}

static int cmp_range(const void *a, const void *b)
{
    const struct cprange *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/*
 * Appends to q the element matching one code point of the ranges (sorted and
 * merged here; negated: their complement): one byte set when every code
 * point is ASCII, else a reference to a new rule with the UTF-8 sequences.
 */
static enum gs_status push_class(struct builder *b, struct seq *q, struct cprange *rg, uint32_t n,
                                 bool negate, uint32_t line)
{
    qsort(rg, n, sizeof(*rg), cmp_range);
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (m && rg[i].lo <= rg[m - 1].hi + 1) {
            if (rg[i].hi > rg[m - 1].hi)
                rg[m - 1].hi = rg[i].hi;
        } else {
            rg[m++] = rg[i];
        }
    }
    /* The final set as at most m + 1 ranges, then split at the surrogates and
     * the encoded-length boundaries (five cuts: at most six parts each). */
    struct cprange *out = gs_alloc_array((size_t)m + 2, sizeof(*out));
    struct cprange *parts = gs_alloc_array(((size_t)m + 2) * 6, sizeof(*parts));
    enum gs_status st = GS_OK;
    if (!out || !parts) {
        st = nomem(b);
        goto done;
    }
    uint32_t k = 0;
    if (negate) {
        uint32_t next = 0;
        for (uint32_t i = 0; i < m; i++) {
            if (rg[i].lo > next)
                out[k++] = (struct cprange){next, rg[i].lo - 1};
            next = rg[i].hi + 1;
        }
        if (next <= 0x10FFFF)
            out[k++] = (struct cprange){next, 0x10FFFF};
    } else {
        memcpy(out, rg, m * sizeof(*rg));
        k = m;
    }
    static const uint32_t cuts[] = {0x7F, 0x7FF, 0xD7FF, 0xDFFF, 0xFFFF};
    uint32_t np = 0;
    for (uint32_t i = 0; i < k; i++) {
        uint32_t lo = out[i].lo, hi = out[i].hi;
        for (size_t c = 0; c < GS_ARRAY_LEN(cuts) && lo <= hi; c++) {
            if (lo <= cuts[c] && hi > cuts[c]) {
                parts[np++] = (struct cprange){lo, cuts[c]};
                lo = cuts[c] + 1;
            }
        }
        if (lo <= hi)
            parts[np++] = (struct cprange){lo, hi};
    }
    struct gbytes ascii = {{0}};
    bool any_ascii = false, any_wide = false;
    for (uint32_t i = 0; i < np; i++) {
        if (parts[i].lo >= 0xD800 && parts[i].hi <= 0xDFFF)
            continue;
        if (parts[i].hi < 0x80) {
            for (uint32_t c = parts[i].lo; c <= parts[i].hi; c++)
                ascii.w[c >> 6] |= 1ull << (c & 63);
            any_ascii = true;
        } else {
            any_wide = true;
        }
    }
    if (!any_ascii && !any_wide) {
        st = syntax(b, b->p, "character class matches nothing");
        goto done;
    }
    if (!any_wide) {
        uint32_t id = set_intern(b, &ascii);
        st = id == UINT32_MAX ? nomem(b) : seq_push(b, q, GE_MAKE(GE_BYTES, id));
        goto done;
    }
    uint32_t r = rule_new(b, NULL, line);
    if (r == UINT32_MAX) {
        st = GS_INVAL;
        goto done;
    }
    b->rules[r].defined = true;
    if (any_ascii) {
        struct seq *a = alt_new(b, r);
        uint32_t id = a ? set_intern(b, &ascii) : UINT32_MAX;
        if (id == UINT32_MAX) {
            st = nomem(b);
            goto done;
        }
        if ((st = seq_push(b, a, GE_MAKE(GE_BYTES, id))))
            goto done;
    }
    for (uint32_t i = 0; i < np && !st; i++) {
        if (parts[i].hi < 0x80 || (parts[i].lo >= 0xD800 && parts[i].hi <= 0xDFFF))
            continue;
        st = utf8_alts(b, r, parts[i].lo, parts[i].hi);
    }
    if (!st)
        st = seq_push(b, q, GE_MAKE(GE_REF, r));
done:
    gs_free(out);
    gs_free(parts);
    return st;
}

/* ---- the parser ---------------------------------------------------------- */

static bool is_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_';
}

/* Skips spaces, tabs and comments; newlines too when nl. */
static void skip_space(struct builder *b, bool nl)
{
    while (b->p < b->end) {
        char c = *b->p;
        if (c == ' ' || c == '\t' || c == '\r' || (nl && c == '\n')) {
            b->p++;
        } else if (c == '#') {
            while (b->p < b->end && *b->p != '\n')
                b->p++;
        } else {
            break;
        }
    }
}

/* Whether the text at p (after blank lines and comments) starts a new rule
 * ("name ::=") or ends the grammar. */
static bool at_rule_start(struct builder *b)
{
    const char *save = b->p;
    skip_space(b, true);
    bool yes = b->p >= b->end;
    if (!yes) {
        const char *q = b->p;
        while (q < b->end && is_name_char(*q))
            q++;
        if (q > b->p) {
            while (q < b->end && (*q == ' ' || *q == '\t'))
                q++;
            yes = b->end - q >= 3 && !memcmp(q, "::=", 3);
        }
    }
    b->p = save;
    return yes;
}

/* Skips blanks between terms: within parentheses newlines too; at a rule's
 * top level a newline continues the rule unless a new rule starts. */
static void skip_between(struct builder *b)
{
    skip_space(b, b->depth > 0);
    if (b->depth == 0 && b->p < b->end && *b->p == '\n' && !at_rule_start(b))
        skip_space(b, true);
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Reads one code point of a literal or class at p, with escapes. */
static enum gs_status read_char(struct builder *b, uint32_t *out)
{
    const char *at = b->p;
    if (b->p >= b->end)
        return syntax(b, at, "unexpected end of grammar");
    unsigned char c = (unsigned char)*b->p;
    if (c == '\\') {
        if (++b->p >= b->end)
            return syntax(b, at, "unexpected end after '\\'");
        char e = *b->p++;
        int nhex = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (nhex) {
            uint32_t v = 0;
            for (int i = 0; i < nhex; i++) {
                int h = b->p < b->end ? hexval(*b->p) : -1;
                if (h < 0)
                    return syntax(b, at, "malformed hexadecimal escape");
                v = v * 16 + (uint32_t)h;
                b->p++;
            }
            if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
                return syntax(b, at, "escape is not a Unicode scalar value");
            *out = v;
            return GS_OK;
        }
        switch (e) {
        case 'n': *out = '\n'; return GS_OK;
        case 'r': *out = '\r'; return GS_OK;
        case 't': *out = '\t'; return GS_OK;
        case '0': *out = 0; return GS_OK;
        case '\\': case '"': case '[': case ']': case '-': case '^': case '\'':
            *out = (uint32_t)e;
            return GS_OK;
        default:
            return syntax(b, at, "unknown escape");
        }
    }
    /* One UTF-8 encoded code point, checked. */
    int n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (!n || b->end - b->p < n)
        return syntax(b, at, "invalid UTF-8");
    uint32_t v = n == 1 ? c : n == 2 ? (c & 0x1Fu) : n == 3 ? (c & 0x0Fu) : (c & 0x07u);
    for (int i = 1; i < n; i++) {
        unsigned char d = (unsigned char)b->p[i];
        if ((d & 0xC0) != 0x80)
            return syntax(b, at, "invalid UTF-8");
        v = (v << 6) | (d & 0x3Fu);
    }
    if (utf8_len(v) != n || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return syntax(b, at, "invalid UTF-8");
    b->p += n;
    *out = v;
    return GS_OK;
}

static enum gs_status parse_alternates(struct builder *b, uint32_t r);

/* Parses one term into a fresh sequence (several elements for a literal). */
static enum gs_status parse_primary(struct builder *b, struct seq *q, uint32_t line)
{
    const char *at = b->p;
    char c = *b->p;
    enum gs_status st;
    if (c == '"') {
        b->p++;
        while (b->p < b->end && *b->p != '"') {
            if (*b->p == '\n')
                return syntax(b, at, "unterminated string literal");
            uint32_t cp;
            if ((st = read_char(b, &cp)))
                return st;
            uint8_t u[4];
            int n = encode_utf8(cp, u);
            for (int i = 0; i < n; i++)
                if ((st = push_byte_range(b, q, u[i], u[i])))
                    return st;
        }
        if (b->p >= b->end)
            return syntax(b, at, "unterminated string literal");
        b->p++;
        return GS_OK;
    }
    if (c == '[') {
        b->p++;
        bool negate = b->p < b->end && *b->p == '^';
        b->p += negate;
        uint32_t n = 0, cap = 16;
        struct cprange *rg = gs_alloc_array(cap, sizeof(*rg));
        if (!rg)
            return nomem(b);
        while (b->p < b->end && *b->p != ']') {
            uint32_t lo, hi;
            if ((st = read_char(b, &lo)))
                goto out;
            hi = lo;
            if (b->p + 1 < b->end && *b->p == '-' && b->p[1] != ']') {
                b->p++;
                if ((st = read_char(b, &hi)))
                    goto out;
                if (hi < lo) {
                    st = syntax(b, at, "character range is reversed");
                    goto out;
                }
            }
            if (n == cap) {
                if (cap >= (1u << 16)) {
                    st = syntax(b, at, "character class is too long");
                    goto out;
                }
                struct cprange *nr = gs_realloc(rg, (size_t)cap * 2 * sizeof(*rg));
                if (!nr) {
                    st = nomem(b);
                    goto out;
                }
                rg = nr;
                cap *= 2;
            }
            rg[n++] = (struct cprange){lo, hi};
        }
        if (b->p >= b->end) {
            st = syntax(b, at, "unterminated character class");
            goto out;
        }
        b->p++;
        if (!n && !negate) {
            st = syntax(b, at, "empty character class");
            goto out;
        }
        st = push_class(b, q, rg, n, negate, line);
    out:
        gs_free(rg);
        return st;
    }
    if (c == '.') {
        b->p++;
        struct cprange none[1];
        return push_class(b, q, none, 0, true, line);
    }
    if (c == '(') {
        if (++b->depth > 256)
            return syntax(b, at, "parentheses nested more than 256 deep");
        b->p++;
        skip_space(b, true);
        uint32_t r = rule_new(b, NULL, line);
        if (r == UINT32_MAX)
            return GS_INVAL;
        b->rules[r].defined = true;
        if ((st = parse_alternates(b, r)))
            return st;
        if (b->p >= b->end || *b->p != ')')
            return syntax(b, at, "missing ')'");
        b->p++;
        b->depth--;
        /* A group of one alternative is its sequence, inline. */
        if (b->rules[r].n_alts == 1 && b->rules[r].alts[0].n > 0) {
            struct seq *only = &b->rules[r].alts[0];
            for (uint32_t i = 0; i < only->n; i++) {
                if (!grow((void **)&q->e, &q->cap, q->n + 1, sizeof(*q->e)))
                    return nomem(b);
                q->e[q->n++] = only->e[i];
            }
            /* The rule stays, unreferenced and empty. */
            only->n = 0;
            return GS_OK;
        }
        return seq_push(b, q, GE_MAKE(GE_REF, r));
    }
    if (is_name_char(c)) {
        const char *s = b->p;
        while (b->p < b->end && is_name_char(*b->p))
            b->p++;
        uint32_t r = rule_by_name(b, s, (size_t)(b->p - s), line);
        if (r == UINT32_MAX)
            return b->err->code;
        return seq_push(b, q, GE_MAKE(GE_REF, r));
    }
    return syntax(b, at, "expected a term");
}

static enum gs_status parse_uint(struct builder *b, uint32_t *out)
{
    const char *at = b->p;
    uint64_t v = 0;
    if (b->p >= b->end || *b->p < '0' || *b->p > '9')
        return syntax(b, at, "expected a number");
    while (b->p < b->end && *b->p >= '0' && *b->p <= '9') {
        v = v * 10 + (uint64_t)(*b->p++ - '0');
        if (v > b->lim.max_repeat)
            return gs_err_set(b->err, GS_INVAL,
                              "grammar: a repetition count is over %u (max_repeat)",
                              b->lim.max_repeat);
    }
    *out = (uint32_t)v;
    return GS_OK;
}

/* One element standing for the term t (a rule of one alternative when the
 * term is several elements). */
static enum gs_status as_one(struct builder *b, struct seq *t, uint32_t line, uint32_t *out)
{
    if (t->n == 1) {
        *out = t->e[0];
        return GS_OK;
    }
    uint32_t r = rule_new(b, NULL, line);
    if (r == UINT32_MAX)
        return GS_INVAL;
    b->rules[r].defined = true;
    struct seq *a = alt_new(b, r);
    if (!a)
        return GS_NOMEM;
    *a = *t;
    *t = (struct seq){0};
    *out = GE_MAKE(GE_REF, r);
    return GS_OK;
}

/* Appends x{min,max} (max UINT32_MAX: unbounded) to q. */
static enum gs_status push_repeat(struct builder *b, struct seq *q, uint32_t x, uint32_t min,
                                  uint32_t max, uint32_t line)
{
    enum gs_status st;
    for (uint32_t i = 0; i < min; i++)
        if ((st = seq_push(b, q, x)))
            return st;
    if (max == UINT32_MAX) {
        /* star ::= x star | (nothing) */
        uint32_t r = rule_new(b, NULL, line);
        if (r == UINT32_MAX)
            return GS_INVAL;
        b->rules[r].defined = true;
        struct seq *a = alt_new(b, r);
        if (!a || (st = seq_push(b, a, x)) || (st = seq_push(b, &b->rules[r].alts[0], GE_MAKE(GE_REF, r))))
            return a ? st : GS_NOMEM;
        if (!alt_new(b, r))
            return GS_NOMEM;
        return seq_push(b, q, GE_MAKE(GE_REF, r));
    }
    /* Up to max - min more, nested so that the parse is unambiguous:
     * opt_k ::= x opt_{k-1} | (nothing). */
    uint32_t inner = UINT32_MAX;
    for (uint32_t k = 0; k < max - min; k++) {
        uint32_t r = rule_new(b, NULL, line);
        if (r == UINT32_MAX)
            return GS_INVAL;
        b->rules[r].defined = true;
        struct seq *a = alt_new(b, r);
        if (!a)
            return GS_NOMEM;
        if ((st = seq_push(b, a, x)))
            return st;
        if (inner != UINT32_MAX && (st = seq_push(b, &b->rules[r].alts[0], GE_MAKE(GE_REF, inner))))
            return st;
        if (!alt_new(b, r))
            return GS_NOMEM;
        inner = r;
    }
    return inner == UINT32_MAX ? GS_OK : seq_push(b, q, GE_MAKE(GE_REF, inner));
}

static enum gs_status parse_sequence(struct builder *b, struct seq *q, uint32_t line)
{
    enum gs_status st;
    for (;;) {
        skip_between(b);
        if (b->p >= b->end || *b->p == '|' || *b->p == ')' || *b->p == '\n')
            return GS_OK;
        struct seq t = {0};
        if ((st = parse_primary(b, &t, line))) {
            gs_free(t.e);
            return st;
        }
        char op = b->p < b->end ? *b->p : '\0';
        if (op != '*' && op != '+' && op != '?' && op != '{') {
            for (uint32_t i = 0; i < t.n && !st; i++) {
                if (!grow((void **)&q->e, &q->cap, q->n + 1, sizeof(*q->e)))
                    st = nomem(b);
                else
                    q->e[q->n++] = t.e[i];
            }
            gs_free(t.e);
            if (st)
                return st;
            continue;
        }
        /* The term's elements were counted once; a repetition counts its own. */
        b->n_el -= t.n;
        uint32_t x;
        st = as_one(b, &t, line, &x);
        gs_free(t.e);
        if (st)
            return st;
        b->n_el++;
        uint32_t min = 0, max = UINT32_MAX;
        const char *at = b->p++;
        if (op == '+')
            min = 1;
        else if (op == '?')
            max = 1;
        else if (op == '{') {
            skip_space(b, false);
            if ((st = parse_uint(b, &min)))
                return st;
            skip_space(b, false);
            max = min;
            if (b->p < b->end && *b->p == ',') {
                b->p++;
                skip_space(b, false);
                max = UINT32_MAX;
                if (b->p < b->end && *b->p != '}' && (st = parse_uint(b, &max)))
                    return st;
                skip_space(b, false);
            }
            if (b->p >= b->end || *b->p != '}')
                return syntax(b, at, "expected '}' after a repetition count");
            b->p++;
            if (max < min)
                return syntax(b, at, "repetition {m,n} with n < m");
        }
        if ((st = push_repeat(b, q, x, min, max, line)))
            return st;
    }
}

static enum gs_status parse_alternates(struct builder *b, uint32_t r)
{
    enum gs_status st;
    for (;;) {
        uint32_t line, col;
        where(b, b->p, &line, &col);
        struct seq *a = alt_new(b, r);
        if (!a)
            return GS_NOMEM;
        struct seq q = {0};
        st = parse_sequence(b, &q, line);
        b->rules[r].alts[b->rules[r].n_alts - 1] = q;
        if (st)
            return st;
        if (b->p < b->end && *b->p == '|') {
            b->p++;
            skip_space(b, true);
            continue;
        }
        return GS_OK;
    }
}

static enum gs_status parse_rule(struct builder *b)
{
    const char *at = b->p, *s = b->p;
    while (b->p < b->end && is_name_char(*b->p))
        b->p++;
    if (b->p == s)
        return syntax(b, at, "expected a rule name");
    uint32_t line, col;
    where(b, at, &line, &col);
    uint32_t r = rule_by_name(b, s, (size_t)(b->p - s), line);
    if (r == UINT32_MAX)
        return b->err->code;
    skip_space(b, false);
    if (b->end - b->p < 3 || memcmp(b->p, "::=", 3))
        return syntax(b, b->p, "expected '::='");
    b->p += 3;
    skip_space(b, true);
    if (!b->rules[r].defined)
        b->rules[r].line = line;
    b->rules[r].defined = true;
    enum gs_status st = parse_alternates(b, r);
    if (st)
        return st;
    if (b->p < b->end && *b->p == ')')
        return syntax(b, b->p, "unbalanced ')'");
    return GS_OK;
}

/* ---- checks ---------------------------------------------------------------- */

static const char *rule_label(const struct builder *b, uint32_t r, char *buf, size_t cap)
{
    if (b->rules[r].name)
        snprintf(buf, cap, "rule '%s'", b->rules[r].name);
    else
        snprintf(buf, cap, "a group or repetition on line %u", b->rules[r].line);
    return buf;
}

/*
 * Refuses left recursion: a rule that can reach itself without consuming a
 * byte (directly, through rules that start it, or through rules that can
 * match nothing before it) would make the matcher expand forever. Also
 * catches repetitions of something that can match nothing. Iterative DFS
 * over "may start with" edges.
 */
static enum gs_status check_left_recursion(struct builder *b)
{
    uint32_t n = b->n_rules;
    bool *nullable = gs_calloc(n, 1);
    uint8_t *color = gs_calloc(n, 1);
    uint32_t *stack_r = gs_alloc_array(n + 1, sizeof(uint32_t));
    uint32_t *stack_a = gs_alloc_array(n + 1, sizeof(uint32_t));
    uint32_t *stack_e = gs_alloc_array(n + 1, sizeof(uint32_t));
    enum gs_status st = GS_OK;
    if (!nullable || !color || !stack_r || !stack_a || !stack_e) {
        st = nomem(b);
        goto out;
    }
    /* Nullable rules by fixpoint. */
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t r = 0; r < n; r++) {
            if (nullable[r])
                continue;
            for (uint32_t a = 0; a < b->rules[r].n_alts && !nullable[r]; a++) {
                const struct seq *q = &b->rules[r].alts[a];
                bool all = true;
                for (uint32_t i = 0; i < q->n && all; i++)
                    all = GE_KIND(q->e[i]) == GE_REF && nullable[GE_ARG(q->e[i])];
                if (all)
                    nullable[r] = changed = true;
            }
        }
    }
    /* DFS: color 1 on the path, 2 done. The frame (r, a, e) walks rule r's
     * alternative a from element e while the elements before were nullable. */
    for (uint32_t root = 0; root < n && !st; root++) {
        if (color[root])
            continue;
        uint32_t sp = 0;
        stack_r[0] = root;
        stack_a[0] = 0;
        stack_e[0] = 0;
        color[root] = 1;
        sp = 1;
        while (sp && !st) {
            uint32_t r = stack_r[sp - 1];
            uint32_t *a = &stack_a[sp - 1], *e = &stack_e[sp - 1];
            if (*a >= b->rules[r].n_alts) {
                color[r] = 2;
                sp--;
                continue;
            }
            const struct seq *q = &b->rules[r].alts[*a];
            if (*e >= q->n || GE_KIND(q->e[*e]) != GE_REF) {
                ++*a;
                *e = 0;
                continue;
            }
            uint32_t t = GE_ARG(q->e[*e]);
            /* Next time, look past t only if it can match nothing. */
            if (nullable[t])
                ++*e;
            else {
                ++*a;
                *e = 0;
            }
            if (color[t] == 1) {
                char l1[96];
                st = gs_err_set(b->err, GS_INVAL,
                                "grammar: left recursion through %s: it can reach itself "
                                "without consuming input",
                                rule_label(b, t, l1, sizeof(l1)));
            } else if (!color[t]) {
                color[t] = 1;
                stack_r[sp] = t;
                stack_a[sp] = 0;
                stack_e[sp] = 0;
                sp++;
            }
        }
    }
out:
    gs_free(nullable);
    gs_free(color);
    gs_free(stack_r);
    gs_free(stack_a);
    gs_free(stack_e);
    return st;
}

/* ---- assembly -------------------------------------------------------------- */

static void builder_free(struct builder *b)
{
    for (uint32_t r = 0; r < b->n_rules; r++) {
        for (uint32_t a = 0; a < b->rules[r].n_alts; a++)
            gs_free(b->rules[r].alts[a].e);
        gs_free(b->rules[r].alts);
        gs_free(b->rules[r].name);
    }
    gs_free(b->rules);
    gs_free(b->sets);
    gs_free(b->set_hash);
    gs_free(b->name_hash);
}

void gs_grammar__free(struct gs_grammar *g)
{
    if (!g)
        return;
    gs_free(g->el);
    gs_free(g->alt_start);
    gs_free(g->rule_alt);
    gs_free(g->sets);
    gs_free(g);
}

static enum gs_status assemble(struct builder *b, uint32_t root, struct gs_grammar **out)
{
    struct gs_grammar *g = gs_calloc(1, sizeof(*g));
    if (!g)
        return nomem(b);
    uint32_t n_alts = 0, n_el = 0;
    for (uint32_t r = 0; r < b->n_rules; r++) {
        n_alts += b->rules[r].n_alts;
        for (uint32_t a = 0; a < b->rules[r].n_alts; a++)
            n_el += b->rules[r].alts[a].n + 1;
    }
    g->el = gs_alloc_array(n_el + 1, sizeof(uint32_t));
    g->alt_start = gs_alloc_array(n_alts + 1, sizeof(uint32_t));
    g->rule_alt = gs_alloc_array(b->n_rules + 1, sizeof(uint32_t));
    g->sets = gs_alloc_array(b->n_sets + 1, sizeof(struct gbytes));
    if (!g->el || !g->alt_start || !g->rule_alt || !g->sets) {
        gs_grammar__free(g);
        return nomem(b);
    }
    uint32_t ea = 0, aa = 0;
    for (uint32_t r = 0; r < b->n_rules; r++) {
        g->rule_alt[r] = aa;
        for (uint32_t a = 0; a < b->rules[r].n_alts; a++) {
            g->alt_start[aa++] = ea;
            if (b->rules[r].alts[a].n) /* an empty alternative has no array */
                memcpy(g->el + ea, b->rules[r].alts[a].e,
                       b->rules[r].alts[a].n * sizeof(uint32_t));
            ea += b->rules[r].alts[a].n;
            g->el[ea++] = GE_MAKE(GE_END, 0);
        }
    }
    g->rule_alt[b->n_rules] = aa;
    g->el[ea] = GE_MAKE(GE_END, 0);
    if (b->n_sets) /* a grammar of empty strings has no byte set */
        memcpy(g->sets, b->sets, b->n_sets * sizeof(struct gbytes));
    g->n_el = ea;
    g->n_alts = aa;
    g->n_rules = b->n_rules;
    g->n_sets = b->n_sets;
    g->root = root;
    g->lim = b->lim;
    atomic_init(&g->refs, 1);
    *out = g;
    return GS_OK;
}

enum gs_status gs_grammar_compile(const char *src, size_t len, const char *root,
                                  const struct gs_grammar_limits *lim, struct gs_grammar **out,
                                  struct gs_err *err)
{
    *out = NULL;
    struct builder b = {.src = src, .end = src + len, .p = src, .err = err};
    limits_fill(&b.lim, lim);
    if (!src && len)
        return gs_err_set(err, GS_INVAL, "grammar: NULL text");
    if (len > b.lim.max_source_bytes)
        return gs_err_set(err, GS_INVAL, "grammar: %zu bytes, over the limit of %u "
                                         "(max_source_bytes)",
                          len, b.lim.max_source_bytes);
    if (memchr(src, '\0', len))
        return gs_err_set(err, GS_INVAL, "grammar: the text contains a NUL byte");
    enum gs_status st = GS_OK;
    skip_space(&b, true);
    while (b.p < b.end && !st) {
        st = parse_rule(&b);
        skip_space(&b, true);
    }
    const char *rn = root ? root : "root";
    uint32_t r = UINT32_MAX;
    if (!st) {
        for (uint32_t i = 0; i < b.n_rules && r == UINT32_MAX; i++)
            if (b.rules[i].name && !strcmp(b.rules[i].name, rn) && b.rules[i].defined)
                r = i;
        if (r == UINT32_MAX)
            st = gs_err_set(err, GS_INVAL, "grammar: no rule '%s' to start from", rn);
    }
    for (uint32_t i = 0; i < b.n_rules && !st; i++)
        if (!b.rules[i].defined)
            st = gs_err_set(err, GS_INVAL, "grammar: rule '%s' (line %u) is used but not defined",
                            b.rules[i].name, b.rules[i].line);
    if (!st)
        st = check_left_recursion(&b);
    if (!st)
        st = assemble(&b, r, out);
    builder_free(&b);
    return st;
}

uint32_t gs_grammar_n_rules(const struct gs_grammar *g)
{
    return g->n_rules;
}

uint32_t gs_grammar_n_elements(const struct gs_grammar *g)
{
    return g->n_el;
}
