/*
 * tests/fuzz/fuzz_tok.c - the tokenizers on text and ids from a stranger:
 * gs_tok_encode (a prompt, a /tokenize body), gs_tok_decode and the streaming
 * decoder (a /detokenize body, generated ids), with real vocabularies from
 * ../shared/models: SentencePiece (stories260K), byte-level BPE with two
 * pre-tokenizers (GPT-2, Qwen2) and WordPiece (BERT).
 *
 * Input: one selector byte, then the text. The selector picks the
 * vocabulary (low two bits) and the encode and decode flags; the text is
 * also read as 16-bit ids (scaled to the vocabulary) and decoded.
 *
 * Invariants: encoding accepts any bytes and yields ids in the vocabulary;
 * decoding those ids succeeds and gives NUL-terminated text; the streaming
 * decoder hands out only valid UTF-8 and, where the whole decode is valid
 * UTF-8, the same bytes; and the lossless tokenizers round-trip (below).
 */
#define _GNU_SOURCE /* memmem */
#include "engine/tok.h"
#include "tests/fuzz/fuzz.h"

#include <string.h>

static const struct {
    const char *path;
    bool lossless; /* decode(encode(x)) == x for plain text (tests/engine/test_tok.c) */
} vocabs[] = {
    {"models/stories260K.gguf", true},
    {"models/vocab/ggml-vocab-gpt-2.gguf", true},
    {"models/vocab/ggml-vocab-qwen2.gguf", true},
    /* WordPiece lowercases and drops accents. */
    {"models/vocab/ggml-vocab-bert-bge.gguf", false},
};

static struct gs_tok *toks[GS_ARRAY_LEN(vocabs)];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    for (size_t i = 0; i < GS_ARRAY_LEN(vocabs); i++) {
        struct gs_err err = {0};
        if (gs_tok_open(fuzz_shared_path(vocabs[i].path), &toks[i], &err) != GS_OK) {
            fprintf(stderr, "fuzz_tok: %s\n", err.msg);
            abort();
        }
    }
    /* The vocabularies live as long as the process: freeing them at exit
     * would need a destructor, and LeakSanitizer ignores what is reachable. */
    return 0;
}

/* Strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF. */
static bool utf8_valid(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i], len, lo = 0x80, hi = 0xBF;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF)
            len = 2;
        else if (c >= 0xE0 && c <= 0xEF)
            len = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        else if (c >= 0xF0 && c <= 0xF4)
            len = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        else
            return false;
        if (n - i < len || p[i + 1] < lo || p[i + 1] > hi)
            return false;
        for (unsigned k = 2; k < len; k++)
            if ((p[i + k] & 0xC0) != 0x80)
                return false;
        i += len;
    }
    return true;
}

/* Decodes ids whole and through the streaming decoder; checks both.
 * Returns the whole text (caller gs_frees), *len bytes. */
static char *decode_checked(const struct gs_tok *t, const int32_t *ids, size_t n, unsigned flags,
                            size_t *len)
{
    struct gs_err err = {0};
    char *whole;
    enum gs_status st = gs_tok_decode(t, ids, n, flags, &whole, len, &err);
    FUZZ_CHECK(st == GS_OK, "decode: %s", err.msg);
    FUZZ_CHECK(whole[*len] == '\0', "decoded text not NUL-terminated");

    /* The stream does no clean-up of spaces: compare it with a decode that does none. */
    unsigned sflags = flags & ~(unsigned)GS_TOK_NO_CLEANUP;
    struct gs_tok_decoder *d;
    FUZZ_CHECK(gs_tok_decoder_new(t, sflags, &d, &err) == GS_OK, "decoder: %s", err.msg);
    struct {
        char *p;
        size_t len, cap;
    } s = {0};
    for (size_t i = 0; i <= n; i++) {
        const char *o;
        size_t ol;
        if (i < n)
            FUZZ_CHECK(gs_tok_decoder_feed(d, ids[i], &o, &ol, &err) == GS_OK, "feed: %s",
                       err.msg);
        else
            gs_tok_decoder_flush(d, &o, &ol);
        FUZZ_CHECK(utf8_valid(o, ol), "the decoder handed out invalid UTF-8 at id %zu", i);
        if (s.len + ol + 1 > s.cap) {
            s.cap = (s.len + ol + 1) * 2;
            s.p = realloc(s.p, s.cap);
            FUZZ_CHECK(s.p, "out of memory");
        }
        memcpy(s.p + s.len, o, ol);
        s.len += ol;
    }
    gs_tok_decoder_free(d);
    char *plain;
    size_t plain_len;
    FUZZ_CHECK(gs_tok_decode(t, ids, n, sflags | GS_TOK_NO_CLEANUP, &plain, &plain_len, &err) ==
                   GS_OK,
               "decode: %s", err.msg);
    if (utf8_valid(plain, plain_len))
        FUZZ_CHECK(s.len == plain_len && (!s.len || !memcmp(s.p, plain, s.len)),
                   "the stream (%zu bytes) differs from the whole decode (%zu bytes)", s.len,
                   plain_len);
    gs_free(plain);
    free(s.p);
    return whole;
}

/* Round trips are promised for valid UTF-8 only: BPE and WordPiece read
 * invalid UTF-8 as U+FFFD, and SPM, as llama.cpp does, sizes a character by
 * its lead byte alone, so a stray 0xFF swallows the next three bytes (a
 * space among them then comes back as the bytes of U+2581). SPM also writes
 * a space as U+2581, so text that already holds one comes back as a space. */
static bool expect_round_trip(size_t v, const char *text, size_t len)
{
    if (!vocabs[v].lossless || !utf8_valid(text, len))
        return false;
    return gs_tok_model(toks[v]) != GS_TOK_MODEL_SPM || !memmem(text, len, "\xe2\x96\x81", 3);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    unsigned sel = data[0];
    size_t v = sel % GS_ARRAY_LEN(vocabs);
    const struct gs_tok *t = toks[v];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    unsigned enc_flags = (sel & 0x04 ? GS_TOK_ADD_SPECIAL : 0) |
                         (sel & 0x08 ? GS_TOK_PARSE_SPECIAL : 0);
    unsigned dec_flags = (sel & 0x10 ? GS_TOK_REMOVE_SPECIAL : 0) |
                         (sel & 0x20 ? GS_TOK_RENDER_SPECIAL : 0) |
                         (sel & 0x40 ? GS_TOK_NO_CLEANUP : 0);
    uint32_t n_vocab = gs_tok_n_vocab(t);

    int32_t *ids;
    size_t n_ids;
    struct gs_err err = {0};
    enum gs_status st = gs_tok_encode(t, text, len, enc_flags, &ids, &n_ids, &err);
    FUZZ_CHECK(st == GS_OK, "encode refused %zu bytes: %s", len, err.msg);
    for (size_t i = 0; i < n_ids; i++) {
        FUZZ_CHECK(ids[i] >= 0 && (uint32_t)ids[i] < n_vocab, "id %d", ids[i]);
        size_t pl;
        FUZZ_CHECK(gs_tok_piece(t, ids[i], dec_flags, &pl), "no piece for id %d", ids[i]);
    }
    size_t back_len;
    char *back = decode_checked(t, ids, n_ids, dec_flags, &back_len);
    gs_free(back);
    if (enc_flags == 0 && expect_round_trip(v, text, len)) {
        back = decode_checked(t, ids, n_ids, GS_TOK_NO_CLEANUP, &back_len);
        FUZZ_CHECK(back_len == len && !memcmp(back, text, len),
                   "%s: %zu bytes came back as %zu bytes", vocabs[v].path, len, back_len);
        gs_free(back);
    }
    gs_free(ids);

    /* The same bytes as ids, as a /detokenize body or a generation gives them. */
    size_t n = len / 2;
    int32_t *raw = malloc((n ? n : 1) * sizeof(*raw));
    FUZZ_CHECK(raw, "out of memory");
    for (size_t i = 0; i < n; i++) {
        /* Scaled, not reduced modulo n_vocab, so that the control tokens at
         * the end of a large vocabulary are reachable too. */
        uint32_t u16 = (uint32_t)(uint8_t)text[2 * i] | (uint32_t)(uint8_t)text[2 * i + 1] << 8;
        raw[i] = (int32_t)(((uint64_t)u16 * n_vocab) >> 16);
    }
    back = decode_checked(t, raw, n, dec_flags, &back_len);
    gs_free(back);
    free(raw);
    return 0;
}
