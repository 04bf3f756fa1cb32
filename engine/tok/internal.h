/*
 * engine/tok/internal.h - what the files of engine/tok share: the tokenizer
 * struct, the text->id hash, the merge table, the pre-tokenizer table, the
 * growable arrays and the merge loop. No other module includes this header.
 *
 * The files call each other as a tree, from the loader down (the call_graph
 * test, tests/check_calls.py, fails on a cycle):
 *   vocab.c (gs_tok_new) -> encode.c -> spm.c, bpe.c, wpm.c
 *   spm.c, bpe.c -> merge.c (the one merge loop); bpe.c -> pretok.c
 *   everything -> lookup.c, utf8.c, arrays.c (leaves; utf8.c -> arrays.c)
 *   decode.c -> arrays.c
 *
 * Invariants once gs_tok_new() returns: every token has a non-empty, unique
 * text in pool; hash maps each text to its id; every merge's left, right and
 * result are ids in range; special_ids are sorted by text length, longest
 * first; pieces are precomputed for every id.
 */
#ifndef GS_TOK_INTERNAL_H
#define GS_TOK_INTERNAL_H

#include "engine/tok.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* Attribute bits per token (llama.cpp's token attributes). */
enum {
    GS_TOK__ATTR_NORMAL = 1u << 0,
    GS_TOK__ATTR_UNKNOWN = 1u << 1,
    GS_TOK__ATTR_CONTROL = 1u << 2,
    GS_TOK__ATTR_USER = 1u << 3,
    GS_TOK__ATTR_UNUSED = 1u << 4,
    GS_TOK__ATTR_BYTE = 1u << 5,
    GS_TOK__ATTR_LSTRIP = 1u << 6, /* eat whitespace before the token when matched */
    GS_TOK__ATTR_RSTRIP = 1u << 7, /* eat whitespace after it */
};
/* Tokens matched in the input before encoding. */
#define GS_TOK__SPECIAL_ATTRS (GS_TOK__ATTR_CONTROL | GS_TOK__ATTR_USER | GS_TOK__ATTR_UNKNOWN)

struct gs_tok__entry {
    uint32_t off, len;  /* text in pool */
    uint32_t piece_off; /* piece (rendered as special) in piece_pool */
    uint32_t piece_len;
    float score;  /* SPM merge priority */
    uint8_t type; /* enum gs_tok_type */
    uint8_t attr; /* GS_TOK__ATTR_* */
};

/* One row of the merge table: (left, right) -> rank, result. */
struct gs_tok__merge {
    int32_t left, right; /* left == GS_TOK_NULL marks an empty slot */
    int32_t rank, result;
};

#define GS_TOK__MAX_REGEX 6

/* A pre-tokenizer: the regexes llama.cpp applies, one after another, each
 * splitting every piece left by the previous one, plus per-variant flags. */
struct gs_tok__pre {
    const char *names; /* '|'-separated tokenizer.ggml.pre values */
    const char *regex[GS_TOK__MAX_REGEX];
    bool clean_spaces;  /* decode removes " ," etc. */
    bool ignore_merges; /* a word that is a token is emitted whole */
    bool add_bos;       /* default for add_bos when the file says nothing */
    bool raw_utf8;      /* no GPT-2 byte-to-unicode mapping (gemma4) */
    bool escape_spaces; /* ' ' -> U+2581 before pre-tokenizing (gemma4) */
};

struct gs_tok {
    enum gs_tok_model model;
    const struct gs_tok__pre *pre; /* BPE only */
    char pre_name[64];

    uint32_t n_vocab;
    struct gs_tok__entry *vocab; /* [n_vocab] */
    char *pool;                  /* token texts, back to back */
    char *piece_pool;            /* pieces, back to back */
    uint32_t max_token_len;

    uint32_t *hash; /* text -> id + 1; 0 = empty; hash_mask + 1 slots */
    uint64_t hash_mask;

    struct gs_tok__merge *merges; /* merge_mask + 1 slots, NULL for SPM/WPM */
    uint64_t merge_mask;

    pcre2_general_context *re_gc;      /* PCRE2 allocates through gs_malloc */
    pcre2_code *re[GS_TOK__MAX_REGEX]; /* compiled pre->regex, JIT when possible */
    int n_re;

    struct gs_tok_special sp;
    bool add_sep; /* WPM: SEP at the end */
    bool clean_spaces;
    bool escape_spaces; /* BPE only */
    bool wpm_lowercase, wpm_strip_accents;

    int32_t byte_tok[256]; /* SPM/gemma4 byte fallback: <0xXX>, else the 1-byte token */
    int32_t byte_sym[256]; /* BPE byte-level: the token for the byte's mapped char */
    char byte_enc[256][3]; /* GPT-2 byte -> UTF-8 of its mapped code point */
    uint8_t byte_enc_len[256];
    int16_t byte_dec[0x144]; /* mapped code point -> byte, -1 if none */

    int32_t *special_ids; /* control, user-defined, unknown; longest text first */
    size_t n_special;
    uint8_t special_first[32]; /* bitmap of the first bytes of special texts */
    uint32_t *special_lens;    /* distinct special text lengths, ascending */
    size_t n_special_lens;
    int32_t *eog; /* ascending */
    size_t n_eog;
};

/* ---- lookups (lookup.c) ----------------------------------------------------- */

/* The slot hashes of the text table and the merge table; vocab.c inserts with
 * them, the lookups below probe with them. */
uint64_t gs_tok__hash_bytes(const char *s, size_t len);
uint64_t gs_tok__merge_hash(int32_t left, int32_t right);
/* The id of the token whose text is s[0..len), or GS_TOK_NULL. */
int32_t gs_tok__lookup(const struct gs_tok *t, const char *s, size_t len);
/* The merge of (left, right), or NULL. */
const struct gs_tok__merge *gs_tok__merge_find(const struct gs_tok *t, int32_t left, int32_t right);
static inline const char *gs_tok__text(const struct gs_tok *t, int32_t id)
{
    return t->pool + t->vocab[id].off;
}

/* ---- growable arrays (arrays.c) --------------------------------------------- */

struct gs_tok__ids {
    int32_t *v;
    size_t n, cap;
};
enum gs_status gs_tok__ids_push(struct gs_tok__ids *a, int32_t id);

struct gs_tok__buf {
    char *v;
    size_t n, cap;
};
enum gs_status gs_tok__buf_put(struct gs_tok__buf *b, const void *p, size_t n);

/* ---- the merge loop (merge.c) ------------------------------------------------ */

/* A candidate merge of symbol left with its right neighbour. key orders the
 * queue (smallest first); size is left.len + right.len when queued, which
 * tells a stale entry from a live one. */
struct gs_tok__cand {
    uint64_t key;
    int32_t left, right;
    uint32_t size;
    int32_t result; /* the merged symbol's token */
};

/* The merge loop's queue, a min-heap on key (merge.c). */
struct gs_tok__heap {
    struct gs_tok__cand *v;
    size_t n, cap;
};

/* A symbol in the merge loop: a span of the text, doubly linked. */
struct gs_tok__sym {
    uint32_t off, len;
    int32_t prev, next;
    int32_t id; /* BPE: token of this span, GS_TOK_NULL if none */
};

/* Scratch shared by the encoders for one gs_tok_encode() call. */
struct gs_tok__scratch {
    struct gs_tok__sym *syms;
    size_t syms_cap;
    struct gs_tok__heap heap;
    struct gs_tok__buf buf;  /* transformed fragment text */
    struct gs_tok__buf word; /* one encoded word */
    pcre2_match_data *md;
};
enum gs_status gs_tok__syms_reserve(struct gs_tok__scratch *s, size_t n);

/* How an encoder ranks the adjacent symbols l and r (spans of text): false
 * when they do not merge, else *rank (smaller merges sooner) and the merged
 * symbol's token in *result. */
typedef bool (*gs_tok__pair_rank)(const struct gs_tok *t, const char *text,
                                  const struct gs_tok__sym *l, const struct gs_tok__sym *r,
                                  uint32_t *rank, int32_t *result);
/* Merges s->syms[0..n), linked in order from symbol 0, until no adjacent pair
 * merges: always the pair of smallest rank next, the leftmost among equals.
 * A merge grows the left symbol (its id becomes the result) and unlinks the
 * right one, leaving it len 0; the list from symbol 0 is the outcome. */
enum gs_status gs_tok__merge_syms(const struct gs_tok *t, struct gs_tok__scratch *s,
                                  const char *text, int32_t n, gs_tok__pair_rank rank_of);

/* ---- encoders of one text fragment (no special tokens inside) -------------- */

enum gs_status gs_tok__spm_encode(const struct gs_tok *t, struct gs_tok__scratch *s,
                                  const char *text, size_t len, struct gs_tok__ids *out);
enum gs_status gs_tok__bpe_encode(const struct gs_tok *t, struct gs_tok__scratch *s,
                                  const char *text, size_t len, struct gs_tok__ids *out);
enum gs_status gs_tok__wpm_encode(const struct gs_tok *t, struct gs_tok__scratch *s,
                                  const char *text, size_t len, struct gs_tok__ids *out);

/* ---- pre-tokenizers (pretok.c) ------------------------------------------------- */

/* The row for a tokenizer.ggml.pre value, NULL if unknown. */
const struct gs_tok__pre *gs_tok__pre_find(const char *name, size_t len);
/* Compiles t->pre's regexes into t->re. */
enum gs_status gs_tok__pre_compile(struct gs_tok *t, struct gs_err *err);

/* A word boundary list: offsets into the text, ascending, last == len. */
struct gs_tok__splits {
    size_t *v;
    size_t n, cap;
};
/* Splits valid UTF-8 text[0..len) into words with t's regexes; *out receives
 * the end offset of each word. */
enum gs_status gs_tok__pre_split(const struct gs_tok *t, struct gs_tok__scratch *s,
                                 const char *text, size_t len, struct gs_tok__splits *out);

/* ---- UTF-8 (utf8.c) ---------------------------------------------------------- */

/* Length of the UTF-8 sequence a lead byte announces, as llama.cpp counts it
 * (continuation bytes count 1). */
static inline size_t gs_tok__utf8_len(unsigned char c)
{
    static const uint8_t lut[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lut[c >> 4];
}
/* Decodes one code point at s[0..len) as llama.cpp does (invalid: 0xFFFD, 1
 * byte consumed). Returns the bytes consumed. */
size_t gs_tok__utf8_decode(const char *s, size_t len, uint32_t *cp);
/* Encodes cp; returns its length (1..4). */
size_t gs_tok__utf8_encode(uint32_t cp, char out[4]);
/* Appends text to b with invalid sequences replaced by U+FFFD. */
enum gs_status gs_tok__utf8_sanitize(struct gs_tok__buf *b, const char *text, size_t len);

#endif /* GS_TOK_INTERNAL_H */
