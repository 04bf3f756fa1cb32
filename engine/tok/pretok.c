/*
 * engine/tok/pretok.c - BPE pre-tokenizers: for each tokenizer.ggml.pre
 * value, the regular expressions that cut text into words before merging,
 * and the per-variant flags. The expressions are those of the original
 * tokenizers as llama.cpp runs them (facts as of 2026-11); each expression
 * splits every piece left by the previous one, keeping both the matches and
 * the text between them as pieces.
 *
 * They run on PCRE2 with UTF and UCP (Unicode \p classes and \s), JIT
 * compiled when the platform allows. '$' matches only at the very end of a
 * piece, as in std::regex.
 */
#include "engine/tok/internal.h"

#include <string.h>

/* clang-format off */
#define PRE_DEFAULT {"[\\p{P}\\$\\+<=>\\^~\\|]+", "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)", "\\p{N}+", "[0-9][0-9][0-9]"}
#define PRE_LLAMA3 {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}
#define PRE_DEEPSEEK_LLM {"[\r\n]", "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+", "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$", "[一-龥ࠀ-一가-퟿]+", "\\p{N}+"}
#define PRE_DEEPSEEK_CODER {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}"}
#define PRE_DEEPSEEK3_LLM {"\\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+", "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"}
#define PRE_FALCON {"[\\p{P}\\$\\+<=>\\^~\\|`]+", "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)", "[0-9][0-9][0-9]"}
#define PRE_STARCODER {"\\p{N}", "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"}
#define PRE_GPT2 {"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"}
#define PRE_QWEN2 {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}
#define PRE_QWEN35 {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}
#define PRE_GEMMA4 {"[^\\n]+|[\\n]+"}
#define PRE_GPT4O {"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}
#define PRE_TEKKEN {"[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}
#define PRE_PORO {" ?[^(\\s|.,!?…。，、।۔،)]+"}
#define PRE_VIKING {" ?[^(\\s|.,!?…。，、।۔،)]+", "\\p{N}"}
#define PRE_SEED_CODER {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}
#define PRE_BAILINGMOE {"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"}
#define PRE_EXAONE_MOE {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: \\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"}
#define PRE_CHATGLM4 {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}
#define PRE_MINICPM5 {"\\p{N}{1,3}", "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}
#define PRE_UFAKZEKA {"[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}
#define PRE_LAGUNA {"[^\\n]+|[\\n]+", "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}
/* clang-format on */

/* names, regexes, clean_spaces, ignore_merges, add_bos, raw_utf8, escape_spaces */
static const struct gs_tok__pre pre_table[] = {
    {"default", PRE_DEFAULT, true, false, false, false, false},
    {"llama3|llama-v3|llama-bpe|falcon3|falcon-h1|pixtral|midm-2.0|lfm2|jina-v5-nano", PRE_LLAMA3,
     true, true, true, false, false},
    {"dbrx|smaug-bpe", PRE_LLAMA3, true, false, false, false, false},
    {"deepseek-llm", PRE_DEEPSEEK_LLM, false, false, false, false, false},
    {"deepseek-coder", PRE_DEEPSEEK_CODER, false, false, false, false, false},
    {"deepseek-v3|hunyuan-dense|joyai-llm|hy_v4", PRE_DEEPSEEK3_LLM, false, false, false, false,
     false},
    {"falcon", PRE_FALCON, true, false, false, false, false},
    {"gpt-2|phi-2|jina-es|jina-de|gigachat|jina-v2-es|jina-v2-de|a.x-4.0|mellum|modern-bert|"
     "exaone4|mpt|olmo|jais",
     PRE_GPT2, true, false, false, false, false},
    {"trillion|granite-docling", PRE_GPT2, false, false, false, false, false},
    {"starcoder|refact|codeshell|exaone|minerva-7b|mellum2", PRE_STARCODER, true, false, false,
     false, false},
    {"command-r|smollm", PRE_STARCODER, false, false, false, false, false},
    {"qwen2|deepseek-r1-qwen|kormo|f2llmv2|hunyuan|solar-open", PRE_QWEN2, false, false, false,
     false, false},
    {"stablelm2|megrez", PRE_QWEN2, true, false, false, false, false},
    {"qwen35", PRE_QWEN35, false, false, false, false, false},
    {"gemma4|granite-embed-multi-311m", PRE_GEMMA4, true, false, false, true, true},
    {"gpt-4o|llama4|kanana2|talkie|minimax-m2", PRE_GPT4O, false, false, false, false, false},
    {"tekken", PRE_TEKKEN, false, true, true, false, false},
    {"poro-chat", PRE_PORO, false, false, false, false, false},
    {"bloom|gpt3-finnish", PRE_PORO, true, false, false, false, false},
    {"viking", PRE_VIKING, false, false, false, false, false},
    {"seed-coder", PRE_SEED_CODER, false, false, false, false, false},
    {"bailingmoe|bailingmoe2|llada-moe", PRE_BAILINGMOE, false, false, false, false, false},
    {"exaone-moe", PRE_EXAONE_MOE, true, false, false, false, false},
    {"grok-2", PRE_QWEN2, false, false, false, false, false},
    {"ufakzeka", PRE_UFAKZEKA, false, false, false, false, false},
    {"laguna", PRE_LAGUNA, false, false, false, false, false},
    {"minicpm5", PRE_MINICPM5, true, true, false, false, false},
};

const struct gs_tok__pre *gs_tok__pre_find(const char *name, size_t len)
{
    for (size_t i = 0; i < GS_ARRAY_LEN(pre_table); i++) {
        const char *p = pre_table[i].names;
        for (;;) {
            const char *bar = strchr(p, '|');
            size_t n = bar ? (size_t)(bar - p) : strlen(p);
            if (n == len && memcmp(p, name, len) == 0)
                return &pre_table[i];
            if (!bar)
                break;
            p = bar + 1;
        }
    }
    return NULL;
}

/* PCRE2 allocates through graphserve's hooks, so that OOM tests reach it. */
static void *re_malloc(size_t n, void *ctx)
{
    (void)ctx;
    return gs_malloc(n);
}

static void re_free(void *p, void *ctx)
{
    (void)ctx;
    gs_free(p);
}

/* llama.cpp's whitespace (what its \s matches, and the only thing a
 * non-ASCII whitespace character matches). PCRE2's own \s also takes
 * U+180E. */
#define WS_SET                                                                                     \
    "\\t\\n\\x{0B}\\f\\r "                                                                         \
    "\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/*
 * Rewrites an expression so that PCRE2 matches as llama.cpp's engines do:
 * \s and \S use WS_SET; a positive class with non-ASCII members cannot
 * match a whitespace character (llama.cpp replaces non-ASCII whitespace by
 * U+000B before matching, so "[\u3000-\u3002]" never sees U+3000).
 */
static enum gs_status rewrite_regex(const char *re, struct gs_tok__buf *out)
{
    bool in_class = false;
    out->n = 0;
    for (size_t i = 0; re[i]; i++) {
        enum gs_status st = GS_OK;
        if (re[i] == '\\' && re[i + 1]) {
            char c = re[i + 1];
            if (c == 's')
                st = in_class ? gs_tok__buf_put(out, WS_SET, sizeof(WS_SET) - 1)
                              : gs_tok__buf_put(out, "[" WS_SET "]", sizeof(WS_SET) + 1);
            else if (c == 'S' && !in_class)
                st = gs_tok__buf_put(out, "[^" WS_SET "]", sizeof(WS_SET) + 2);
            else if (c == 'S')
                return GS_UNSUPPORTED;
            else
                st = gs_tok__buf_put(out, re + i, 2);
            i++;
        } else if (re[i] == '[' && !in_class) {
            /* Find the end of the class to see whether it is positive and
             * has non-ASCII members. */
            bool negated = re[i + 1] == '^', wide = false;
            size_t j = i + 1;
            while (re[j] && re[j] != ']') {
                if (re[j] == '\\' && re[j + 1])
                    j++;
                else if ((unsigned char)re[j] >= 0x80)
                    wide = true;
                j++;
            }
            if (!negated && wide) {
                static const char guard[] = "(?:(?![" WS_SET "])";
                st = gs_tok__buf_put(out, guard, sizeof(guard) - 1);
                if (st == GS_OK)
                    st = gs_tok__buf_put(out, re + i, j - i + 1);
                if (st == GS_OK)
                    st = gs_tok__buf_put(out, ")", 1);
                if (!re[j])
                    return GS_UNSUPPORTED;
                i = j;
            } else {
                in_class = true;
                st = gs_tok__buf_put(out, "[", 1);
            }
        } else {
            if (re[i] == ']' && in_class)
                in_class = false;
            st = gs_tok__buf_put(out, re + i, 1);
        }
        if (st != GS_OK)
            return st;
    }
    return in_class ? GS_UNSUPPORTED : GS_OK;
}

enum gs_status gs_tok__pre_compile(struct gs_tok *t, struct gs_err *err)
{
    struct gs_tok__buf pat = {0};
    pcre2_general_context *gc = pcre2_general_context_create(re_malloc, re_free, NULL);
    pcre2_compile_context *cc = gc ? pcre2_compile_context_create(gc) : NULL;
    t->re_gc = gc;
    enum gs_status st = GS_OK;
    if (!cc) {
        st = gs_err_set(err, GS_NOMEM, "tokenizer.ggml.pre: out of memory");
        goto out;
    }
    for (int i = 0; i < GS_TOK__MAX_REGEX && t->pre->regex[i]; i++) {
        int code;
        PCRE2_SIZE at;
        st = rewrite_regex(t->pre->regex[i], &pat);
        if (st != GS_OK) {
            gs_err_set(err, st, "tokenizer.ggml.pre '%s': regex %d: %s", t->pre_name, i,
                       st == GS_NOMEM ? "out of memory" : "cannot be translated");
            goto out;
        }
        pcre2_code *re = pcre2_compile(
            (PCRE2_SPTR)pat.v, pat.n, PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &code, &at, cc);
        if (!re) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(code, msg, sizeof(msg));
            st = gs_err_set(err,
                            code == PCRE2_ERROR_HEAP_FAILED || code == PCRE2_ERROR_NOMEMORY
                                ? GS_NOMEM
                                : GS_UNSUPPORTED,
                            "tokenizer.ggml.pre '%s': regex %d: %s at %zu", t->pre_name, i,
                            (const char *)msg, (size_t)at);
            goto out;
        }
        /* JIT is an optimisation: matching works without it. */
        (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
        t->re[t->n_re++] = re;
    }
out:
    gs_free(pat.v);
    pcre2_compile_context_free(cc);
    return st;
}

static enum gs_status splits_push(struct gs_tok__splits *s, size_t end)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        size_t *v = gs_realloc(s->v, cap * sizeof(*v));
        if (!v)
            return GS_NOMEM;
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = end;
    return GS_OK;
}

/* Finds the next match of re in subject[from..len); returns false when there
 * is none. Falls back from JIT to the interpreter if the JIT stack runs out. */
static bool next_match(const pcre2_code *re, pcre2_match_data *md, const char *subject, size_t len,
                       size_t from, size_t *ms, size_t *me)
{
    int rc = pcre2_match(re, (PCRE2_SPTR)subject, len, from, PCRE2_NO_UTF_CHECK, md, NULL);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match(re, (PCRE2_SPTR)subject, len, from, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md,
                         NULL);
    if (rc < 0)
        return false;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    *ms = ov[0];
    *me = ov[1];
    return true;
}

enum gs_status gs_tok__pre_split(const struct gs_tok *t, struct gs_tok__scratch *s,
                                 const char *text, size_t len, struct gs_tok__splits *out)
{
    struct gs_tok__splits cur = {0}, next = {0};
    enum gs_status st = GS_OK;
    if (!s->md) {
        s->md = pcre2_match_data_create(1, t->re_gc);
        if (!s->md)
            return GS_NOMEM;
    }
    out->n = 0;
    if (len == 0)
        return GS_OK;
    if ((st = splits_push(&cur, len)) != GS_OK)
        goto out;
    for (int r = 0; r < t->n_re; r++) {
        next.n = 0;
        size_t start = 0;
        for (size_t k = 0; k < cur.n; k++) {
            const char *piece = text + start;
            size_t n = cur.v[k] - start, pos = 0, from = 0, ms, me;
            while (from < n && next_match(t->re[r], s->md, piece, n, from, &ms, &me)) {
                if (me == ms) { /* an empty match splits nothing; step one character */
                    if (ms >= n)
                        break;
                    from = ms + gs_tok__utf8_len((unsigned char)piece[ms]);
                    continue;
                }
                if (ms > pos && (st = splits_push(&next, start + ms)) != GS_OK)
                    goto out;
                if ((st = splits_push(&next, start + me)) != GS_OK)
                    goto out;
                pos = from = me;
            }
            if (pos < n && (st = splits_push(&next, start + n)) != GS_OK)
                goto out;
            start = cur.v[k];
        }
        struct gs_tok__splits tmp = cur;
        cur = next;
        next = tmp;
    }
    for (size_t k = 0; k < cur.n; k++)
        if ((st = splits_push(out, cur.v[k])) != GS_OK)
            goto out;
out:
    gs_free(cur.v);
    gs_free(next.v);
    return st;
}
