/*
 * engine/tok/encode.c - gs_tok_encode(): cut the text at special tokens,
 * encode the fragments between them with the model's algorithm, and add
 * BOS/EOS.
 *
 * Special tokens are matched as llama.cpp does: one token text at a time,
 * longest first, each splitting every text fragment at all its occurrences,
 * so that "<|im_start|>" wins over "<". Control and unknown tokens are
 * matched with GS_TOK_PARSE_SPECIAL anywhere, else only inside the caller's
 * special spans (none for gs_tok_encode); user-defined tokens always. A
 * token with the LSTRIP/RSTRIP attribute eats the whitespace next to it.
 */
#define _GNU_SOURCE /* memmem */
#include "engine/tok/internal.h"

#include <ctype.h>
#include <string.h>

/* A fragment: text[off..off+len) to encode, or a matched special token. */
struct frag {
    size_t off, len;
    int32_t id; /* GS_TOK_NULL for text */
};

struct frags {
    struct frag *v;
    size_t n, cap;
};

static enum gs_status frags_push(struct frags *f, struct frag x)
{
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        struct frag *v = gs_realloc(f->v, cap * sizeof(*v));
        if (!v)
            return GS_NOMEM;
        f->v = v;
        f->cap = cap;
    }
    f->v[f->n++] = x;
    return GS_OK;
}

/* Where control and unknown tokens may be matched: everywhere (parse
 * special), or only wholly inside one of the spans, which are sorted and
 * disjoint. */
struct allowed {
    bool everywhere;
    const struct gs_tok_span *spans;
    size_t n_spans;
};

/* Whether token id may be matched at text[at..at+len). */
static bool allowed_at(const struct gs_tok *t, int32_t id, size_t at, size_t len,
                       const struct allowed *a)
{
    if (a->everywhere || !(t->vocab[id].attr & (GS_TOK__ATTR_CONTROL | GS_TOK__ATTR_UNKNOWN)))
        return true;
    size_t lo = 0, hi = a->n_spans; /* the first span starting after at is spans[lo] */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (a->spans[mid].off <= at)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return false;
    const struct gs_tok_span *s = &a->spans[lo - 1];
    return at + len <= s->off + s->len;
}

/* Splits every text fragment of *in at the occurrences of token id where
 * it may be matched; other occurrences stay text. */
static enum gs_status split_at(const struct gs_tok *t, const char *text, int32_t id,
                               const struct allowed *a, struct frags *in, struct frags *out)
{
    const char *tt = gs_tok__text(t, id);
    size_t tl = t->vocab[id].len;
    uint8_t attr = t->vocab[id].attr;
    out->n = 0;
    for (size_t k = 0; k < in->n; k++) {
        struct frag f = in->v[k];
        if (f.id != GS_TOK_NULL) {
            if (frags_push(out, f) != GS_OK)
                return GS_NOMEM;
            continue;
        }
        size_t off = f.off, len = f.len, from = off; /* search text[from..off+len) */
        for (;;) {
            size_t rest = off + len - from;
            const char *m = rest >= tl ? memmem(text + from, rest, tt, tl) : NULL;
            if (!m) {
                if (len > 0 && frags_push(out, (struct frag){off, len, GS_TOK_NULL}) != GS_OK)
                    return GS_NOMEM;
                break;
            }
            size_t at = (size_t)(m - text), left = at - off;
            if (!allowed_at(t, id, at, tl, a)) {
                from = at + 1;
                continue;
            }
            if (attr & GS_TOK__ATTR_LSTRIP)
                while (left > 0 && isspace((unsigned char)text[off + left - 1]))
                    left--;
            if (left > 0 && frags_push(out, (struct frag){off, left, GS_TOK_NULL}) != GS_OK)
                return GS_NOMEM;
            if (frags_push(out, (struct frag){at, tl, id}) != GS_OK)
                return GS_NOMEM;
            size_t roff = at + tl, rlen = off + len - roff;
            if (attr & GS_TOK__ATTR_RSTRIP)
                while (rlen > 0 && isspace((unsigned char)text[roff]))
                    roff++, rlen--;
            off = from = roff;
            len = rlen;
        }
    }
    return GS_OK;
}

static bool bit_set(const uint8_t *bits, unsigned char c)
{
    return bits[c >> 3] & (1u << (c & 7));
}

/* Cuts text into fragments at special tokens. Only the tokens that occur in
 * the text are tried, which keeps vocabularies with thousands of special
 * tokens fast: candidates are found by one pass over the text that hashes,
 * at each position, one slice per distinct special-token length. */
static enum gs_status partition(const struct gs_tok *t, const char *text, size_t len,
                                const struct allowed *a, struct frags *out)
{
    struct frags tmp = {0};
    uint8_t *present = NULL;
    enum gs_status st = GS_OK;
    out->n = 0;
    if (len == 0)
        return GS_OK;
    if ((st = frags_push(out, (struct frag){0, len, GS_TOK_NULL})) != GS_OK)
        return st;
    if (t->n_special == 0)
        return GS_OK;
    bool any = false;
    for (size_t i = 0; i < len; i++) {
        if (!bit_set(t->special_first, (unsigned char)text[i]))
            continue;
        for (size_t k = 0; k < t->n_special_lens && t->special_lens[k] <= len - i; k++) {
            int32_t id = gs_tok__lookup(t, text + i, t->special_lens[k]);
            if (id < 0 || !(t->vocab[id].attr & GS_TOK__SPECIAL_ATTRS) ||
                !allowed_at(t, id, i, t->special_lens[k], a))
                continue;
            /* Allocated on the first find, so plain text costs nothing. */
            if (!present && !(present = gs_calloc(t->n_vocab / 8 + 1, 1)))
                return GS_NOMEM;
            present[id >> 3] |= (uint8_t)(1u << (id & 7));
            any = true;
        }
    }
    for (size_t k = 0; any && k < t->n_special; k++) {
        int32_t id = t->special_ids[k];
        if (!(present[id >> 3] & (1u << (id & 7))))
            continue;
        if ((st = split_at(t, text, id, a, out, &tmp)) != GS_OK)
            goto out;
        struct frags x = *out;
        *out = tmp;
        tmp = x;
    }
out:
    gs_free(tmp.v);
    gs_free(present);
    return st;
}

static enum gs_status encode_fragments(const struct gs_tok *t, const char *text,
                                       const struct frags *fr, unsigned flags,
                                       struct gs_tok__scratch *s, struct gs_tok__ids *out)
{
    enum gs_status st = GS_OK;
    bool add = flags & GS_TOK_ADD_SPECIAL;
    bool bos = add && (t->sp.add_bos || t->model == GS_TOK_MODEL_WPM);
    if (bos && (st = gs_tok__ids_push(out, t->sp.bos)) != GS_OK)
        return st;
    /* SPM puts a space before text that starts the input or follows a
     * special token. */
    bool after_special = true;
    for (size_t k = 0; k < fr->n && st == GS_OK; k++) {
        const struct frag *f = &fr->v[k];
        if (f->id != GS_TOK_NULL) {
            st = gs_tok__ids_push(out, f->id);
            after_special = true;
            continue;
        }
        switch (t->model) {
        case GS_TOK_MODEL_SPM: {
            s->buf.n = 0;
            if (t->sp.add_space_prefix && after_special)
                st = gs_tok__buf_put(&s->buf, "\xe2\x96\x81", 3);
            for (size_t i = 0; i < f->len && st == GS_OK; i++) {
                const char *c = text + f->off + i;
                st = *c == ' ' ? gs_tok__buf_put(&s->buf, "\xe2\x96\x81", 3)
                               : gs_tok__buf_put(&s->buf, c, 1);
            }
            if (st == GS_OK)
                st = gs_tok__spm_encode(t, s, s->buf.v, s->buf.n, out);
            break;
        }
        case GS_TOK_MODEL_BPE:
            st = gs_tok__bpe_encode(t, s, text + f->off, f->len, out);
            break;
        case GS_TOK_MODEL_WPM:
            st = gs_tok__wpm_encode(t, s, text + f->off, f->len, out);
            break;
        }
        after_special = false;
    }
    if (st == GS_OK && add && t->sp.add_eos && t->model != GS_TOK_MODEL_WPM)
        st = gs_tok__ids_push(out, t->sp.eos);
    if (st == GS_OK && add && t->model == GS_TOK_MODEL_WPM && t->add_sep)
        st = gs_tok__ids_push(out, t->sp.sep);
    return st;
}

enum gs_status gs_tok_encode_spans(const struct gs_tok *t, const char *text, size_t len,
                                   const struct gs_tok_span *special, size_t n_special,
                                   unsigned flags, int32_t **ids, size_t *n_ids, struct gs_err *err)
{
    struct frags fr = {0};
    struct gs_tok__scratch s = {0};
    struct gs_tok__ids out = {0};
    *ids = NULL;
    *n_ids = 0;
    if (!text && len)
        return gs_err_set(err, GS_INVAL, "tokenize: NULL text");
    if (!special && n_special)
        return gs_err_set(err, GS_INVAL, "tokenize: NULL special spans");
    for (size_t k = 0, end = 0; k < n_special; k++) {
        const struct gs_tok_span *sp = &special[k];
        if (sp->off < end || sp->off > len || sp->len > len - sp->off)
            return gs_err_set(err, GS_INVAL,
                              "tokenize: special span %zu [%zu, +%zu) overlaps the one before or "
                              "ends past the text's %zu bytes",
                              k, sp->off, sp->len, len);
        end = sp->off + sp->len;
    }
    struct allowed a = {flags & GS_TOK_PARSE_SPECIAL, special, n_special};
    enum gs_status st = partition(t, text, len, &a, &fr);
    if (st == GS_OK)
        st = encode_fragments(t, text, &fr, flags, &s, &out);
    gs_free(fr.v);
    gs_free(s.syms);
    gs_free(s.heap.v);
    gs_free(s.buf.v);
    gs_free(s.word.v);
    pcre2_match_data_free(s.md);
    if (st != GS_OK) {
        gs_free(out.v);
        return gs_err_set(err, st, "tokenize: %s", gs_status_str(st));
    }
    *ids = out.v;
    *n_ids = out.n;
    return GS_OK;
}

enum gs_status gs_tok_encode(const struct gs_tok *t, const char *text, size_t len, unsigned flags,
                             int32_t **ids, size_t *n_ids, struct gs_err *err)
{
    return gs_tok_encode_spans(t, text, len, NULL, 0, flags, ids, n_ids, err);
}
