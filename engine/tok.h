/*
 * engine/tok.h - tokenizers built from GGUF metadata: SentencePiece-style
 * score merges ("llama"), byte-level BPE with ranked merges and the
 * pre-tokenizers named by tokenizer.ggml.pre ("gpt2", "gemma4"), and
 * WordPiece ("bert"). Encoding, decoding, pieces, token types and the
 * end-of-generation set follow llama.cpp's observable behaviour, so that ids
 * agree with models converted for it.
 *
 * Ownership: gs_tok_new() copies everything it needs out of the GGUF file;
 * the struct gs_gguf may be closed afterwards. Strings returned by
 * gs_tok_token_text() and gs_tok_piece() are borrowed until gs_tok_free().
 * Arrays and strings returned through out-pointers by gs_tok_encode() and
 * gs_tok_decode() belong to the caller, who frees them with gs_free().
 *
 * Threads: a struct gs_tok is immutable once built; any number of threads may
 * encode and decode with it at the same time. A struct gs_tok_decoder holds
 * per-stream state and belongs to one thread at a time.
 *
 * Errors: building fails with GS_FORMAT and a message naming the key
 * ("tokenizer.ggml.scores: 10 entries for 12 tokens") for any inconsistent
 * metadata, GS_UNSUPPORTED for a tokenizer model or pre-tokenizer we do not
 * implement, GS_NOMEM when allocation fails; gs_tok_open() passes on the
 * GGUF reader's errors. Encoding accepts any bytes: SPM keeps invalid UTF-8
 * through its byte tokens, BPE and WordPiece read it as U+FFFD, as llama.cpp
 * does. Decoding refuses ids outside the vocabulary with GS_INVAL.
 *
 * Example:
 *     struct gs_tok *tok;
 *     if (gs_tok_open("model.gguf", &tok, &err) != GS_OK) ...
 *     int32_t *ids; size_t n;
 *     gs_tok_encode(tok, "Hello", 5, GS_TOK_ADD_SPECIAL, &ids, &n, &err);
 *     ...
 *     gs_free(ids);
 *     gs_tok_free(tok);
 */
#ifndef GS_TOK_H
#define GS_TOK_H

#include "engine/base.h"
#include "engine/gguf.h"

/* Token id meaning "none" (no BOS token, lookup failed). */
#define GS_TOK_NULL (-1)

/* The tokenizer algorithm, from tokenizer.ggml.model. */
enum gs_tok_model {
    GS_TOK_MODEL_SPM, /* "llama": SentencePiece score merges, byte fallback */
    GS_TOK_MODEL_BPE, /* "gpt2", "gemma4": ranked merges after a pre-tokenizer */
    GS_TOK_MODEL_WPM, /* "bert": WordPiece greedy longest match */
};

/* Token types, with the values stored in tokenizer.ggml.token_type. */
enum gs_tok_type {
    GS_TOK_TYPE_UNDEFINED = 0,
    GS_TOK_TYPE_NORMAL = 1,
    GS_TOK_TYPE_UNKNOWN = 2,
    GS_TOK_TYPE_CONTROL = 3,      /* <s>, </s>, <|im_end|>: hidden unless rendered */
    GS_TOK_TYPE_USER_DEFINED = 4, /* always matched in input text, always printed */
    GS_TOK_TYPE_UNUSED = 5,
    GS_TOK_TYPE_BYTE = 6, /* <0x0A>: one raw byte */
};

/* Special token ids (GS_TOK_NULL when the vocabulary has none) and the
 * model's defaults for adding them. */
struct gs_tok_special {
    int32_t bos, eos, eot, eom, unk, sep, pad, mask;
    int32_t nl;            /* the token for "\n", used by samplers */
    bool add_bos;          /* tokenizer.ggml.add_bos_token or the model default */
    bool add_eos;          /* tokenizer.ggml.add_eos_token or the model default */
    bool add_space_prefix; /* SPM: a space is put before the text */
};

/* Flags for gs_tok_encode(). */
enum gs_tok_encode_flags {
    /* Add BOS/EOS as add_bos/add_eos say (WordPiece: CLS and SEP). */
    GS_TOK_ADD_SPECIAL = 1u << 0,
    /* Recognise the text of control tokens ("<s>", "<|im_end|>") anywhere in
     * the input. Without it they are recognised only inside the special
     * spans given to gs_tok_encode_spans (nowhere for gs_tok_encode), and
     * are plain text elsewhere. User-defined tokens are always recognised. */
    GS_TOK_PARSE_SPECIAL = 1u << 1,
};

/* Flags for gs_tok_decode() and the streaming decoder. */
enum gs_tok_decode_flags {
    /* Drop a leading BOS and a trailing EOS when the model adds them. */
    GS_TOK_REMOVE_SPECIAL = 1u << 0,
    /* Render control and unknown tokens as their text instead of nothing. */
    GS_TOK_RENDER_SPECIAL = 1u << 1,
    /* gs_tok_decode only: skip the model's clean-up of spaces before
     * punctuation (" ," -> ","), which BPE models such as GPT-2 ask for. */
    GS_TOK_NO_CLEANUP = 1u << 2,
    /* The ids continue a text that is already there (a completion after its
     * prompt, a chat answer after its turn header): no space is removed from
     * the first piece. Without it the ids start a text, and the space SPM
     * put before it goes, as llama.cpp's detokenize does. */
    GS_TOK_CONTINUATION = 1u << 3,
};

struct gs_tok; /* opaque: an immutable tokenizer */

/* ---- building -------------------------------------------------------------- */

/* Builds a tokenizer from g's tokenizer.ggml.* metadata. On success *out is
 * owned by the caller (gs_tok_free); g may be closed at once. */
enum gs_status gs_tok_new(const struct gs_gguf *g, struct gs_tok **out, struct gs_err *err);

/* Opens path, builds its tokenizer and closes the file. Errors are prefixed
 * with the path. */
enum gs_status gs_tok_open(const char *path, struct gs_tok **out, struct gs_err *err);

void gs_tok_free(struct gs_tok *t); /* NULL is a no-op */

/* ---- vocabulary ------------------------------------------------------------ */

enum gs_tok_model gs_tok_model(const struct gs_tok *t);
/* The pre-tokenizer name in use ("llama-bpe", "default"; "" for SPM/WPM). */
const char *gs_tok_pre_name(const struct gs_tok *t);
uint32_t gs_tok_n_vocab(const struct gs_tok *t);
const struct gs_tok_special *gs_tok_special(const struct gs_tok *t);

/* The type the tokenizer treats token id as: the file's token_type, except
 * that tokens promoted by their text (<|im_end|>, <|eot_id|> become control,
 * as in llama.cpp) report GS_TOK_TYPE_CONTROL. GS_TOK_TYPE_UNDEFINED for ids
 * out of range. */
enum gs_tok_type gs_tok_token_type(const struct gs_tok *t, int32_t id);

/* The token's text as stored in the vocabulary ("▁Hello", "Ġworld", "<0x0A>"),
 * not NUL-terminated; NULL for ids out of range. Borrowed. */
const char *gs_tok_token_text(const struct gs_tok *t, int32_t id, size_t *len);

/* The id whose vocabulary text is exactly text[0..len), or GS_TOK_NULL. */
int32_t gs_tok_find(const struct gs_tok *t, const char *text, size_t len);

/* End of generation: EOS, EOT, EOM and the tokens llama.cpp recognises by
 * their text (<|im_end|>, <|eot_id|>, <end_of_turn>, ...). */
bool gs_tok_is_eog(const struct gs_tok *t, int32_t id);
/* All EOG ids in ascending order; *n receives the count. Borrowed. */
const int32_t *gs_tok_eog_ids(const struct gs_tok *t, size_t *n);

/* ---- encoding -------------------------------------------------------------- */

/*
 * Encodes text[0..len) (any bytes; need not be NUL-terminated) with flags
 * from enum gs_tok_encode_flags. On success *ids is a gs_malloc'ed array of
 * *n_ids ids (NULL when *n_ids is 0) that the caller frees with gs_free.
 * Memory used is proportional to len; merges run from a priority queue, so
 * time is O(len log len) even for text without spaces.
 */
enum gs_status gs_tok_encode(const struct gs_tok *t, const char *text, size_t len, unsigned flags,
                             int32_t **ids, size_t *n_ids, struct gs_err *err);

/* A byte range [off, off + len) of an input text. */
struct gs_tok_span {
    size_t off, len;
};

/*
 * Encodes text as gs_tok_encode does, except that without
 * GS_TOK_PARSE_SPECIAL a control or unknown token's text is recognised
 * where it lies wholly inside one of special[0..n_special), and nowhere
 * else. The spans mark text the caller vouches for, such as a chat
 * template's own turn markers; the rest (a user's message) stays plain
 * text however it is spelled, so a user cannot write "<|im_start|>system"
 * and open a turn. With GS_TOK_PARSE_SPECIAL the spans are not consulted.
 *
 * The text between recognised tokens is encoded exactly as by
 * gs_tok_encode, so when every control token's text in the input lies
 * inside a span, the ids are those of gs_tok_encode with
 * GS_TOK_PARSE_SPECIAL; with no spans they are those of gs_tok_encode
 * without it. Spans are in ascending order, disjoint (they may touch) and
 * within len, or the call fails with GS_INVAL; special may be NULL when
 * n_special is 0. Ownership of *ids as for gs_tok_encode; the spans are
 * only read during the call.
 */
enum gs_status gs_tok_encode_spans(const struct gs_tok *t, const char *text, size_t len,
                                   const struct gs_tok_span *special, size_t n_special,
                                   unsigned flags, int32_t **ids, size_t *n_ids,
                                   struct gs_err *err);

/* ---- decoding -------------------------------------------------------------- */

/*
 * The bytes a token stands for, as llama.cpp's token_to_piece: "▁" becomes a
 * space, byte tokens become their byte, GPT-2 byte-level text is mapped back
 * to bytes. Control and unknown tokens give "" unless flags has
 * GS_TOK_RENDER_SPECIAL. A piece may be part of a UTF-8 sequence. Returns
 * NULL for ids out of range; *len receives the length. Borrowed.
 */
const char *gs_tok_piece(const struct gs_tok *t, int32_t id, unsigned flags, size_t *len);

/*
 * Decodes ids to text with flags from enum gs_tok_decode_flags, as
 * llama.cpp's detokenize: the space that SPM put before the text is removed
 * (unless GS_TOK_CONTINUATION, or a BOS removed by GS_TOK_REMOVE_SPECIAL
 * came first), and BPE models clean up spaces before punctuation unless
 * GS_TOK_NO_CLEANUP.
 * *text is gs_malloc'ed, NUL-terminated, *len bytes long (the bytes are
 * exactly the pieces', so they may be invalid UTF-8). GS_INVAL names an id
 * out of range.
 */
enum gs_status gs_tok_decode(const struct gs_tok *t, const int32_t *ids, size_t n_ids,
                             unsigned flags, char **text, size_t *len, struct gs_err *err);

/*
 * Streaming decoder: fed one id at a time, it returns only complete, valid
 * UTF-8. Bytes that may still start a character are held back until the
 * next id completes them; malformed bytes come out as U+FFFD, one per
 * maximal subpart (Unicode's recommended practice). No clean-up of spaces
 * is done.
 *
 * A stream starts a text unless flags has GS_TOK_CONTINUATION: then its
 * first piece loses the space SPM put before the text, as in
 * gs_tok_decode. Generated text continues its prompt, so a generator passes
 * GS_TOK_CONTINUATION and " was" stays " was" after "The little dog".
 */
struct gs_tok_decoder;

enum gs_status gs_tok_decoder_new(const struct gs_tok *t, unsigned flags,
                                  struct gs_tok_decoder **out, struct gs_err *err);
void gs_tok_decoder_free(struct gs_tok_decoder *d); /* NULL is a no-op */

/* Feeds one id. *out (borrowed until the next call on d) receives *len bytes
 * of complete UTF-8, possibly none. GS_INVAL for an id out of range. */
enum gs_status gs_tok_decoder_feed(struct gs_tok_decoder *d, int32_t id, const char **out,
                                   size_t *len, struct gs_err *err);

/* Ends the stream: any held-back bytes come out as U+FFFD. The decoder is
 * then ready for a new stream. */
void gs_tok_decoder_flush(struct gs_tok_decoder *d, const char **out, size_t *len);

#endif /* GS_TOK_H */
