/*
 * engine/grammar/internal.h - the compiled form shared by the GBNF compiler
 * (gbnf.c), the vocabulary trie (vocab.c) and the matcher (matcher.c).
 * Private to engine/grammar.
 *
 * A compiled grammar is byte-level: every terminal is a set of bytes, and
 * code-point classes were turned into rules over UTF-8 byte sequences. Rules
 * are laid out in one element array; each alternative is a run of elements
 * ended by GE_END:
 *
 *     el:        [BYTES 3][REF 7][END] [BYTES 9][END] ...
 *     alt_start: index in el of each alternative's first element
 *     rule_alt:  rule r's alternatives are alt_start[rule_alt[r] .. rule_alt[r+1])
 *
 * A parse stack is an array of element indices, top last. Each entry points
 * at the next element to match in some alternative; the entries below the top
 * are where the enclosing rules continue. A stack is "expanded" when its top
 * is a BYTES element (or it is empty: the text is complete).
 */
#ifndef GS_GRAMMAR_INTERNAL_H
#define GS_GRAMMAR_INTERNAL_H

#include <stdatomic.h>

#include "engine/grammar.h"

/* An element: kind in the top two bits, its argument in the rest. */
enum { GE_END = 0u, GE_BYTES = 1u, GE_REF = 2u };
#define GE_KIND(e) ((e) >> 30)
#define GE_ARG(e) ((e) & 0x3fffffffu)
#define GE_MAKE(kind, arg) (((uint32_t)(kind) << 30) | (uint32_t)(arg))

/* A set of bytes, bit b of w[b / 64]. */
struct gbytes {
    uint64_t w[4];
};

static inline bool gbytes_has(const struct gbytes *s, uint8_t b)
{
    return (s->w[b >> 6] >> (b & 63)) & 1;
}

struct gcache; /* matcher.c: interned parse states, transitions, masks */

struct gs_grammar {
    atomic_uint refs;
    struct gs_grammar_limits lim;
    uint32_t *el;
    uint32_t n_el;
    uint32_t *alt_start;
    uint32_t n_alts;
    uint32_t *rule_alt; /* [n_rules + 1] */
    uint32_t n_rules;
    struct gbytes *sets;
    uint32_t n_sets;
    uint32_t root;
    struct gcache *cache; /* NULL until a matcher first needs it */
};

/* gbnf.c: frees what gs_grammar_compile built, the rule arrays and g itself;
 * NULL is a no-op. The cache is matcher.c's: gs_grammar_unref (matcher.c)
 * frees it first. */
void gs_grammar__free(struct gs_grammar *g);

/*
 * The vocabulary as a flattened trie in preorder: node i's subtree is
 * nodes [i, end); its children are the nodes of depth + 1 in (i, end).
 * Tokens with the same bytes chain through same_next.
 */
struct gnode {
    uint32_t end;   /* one past the last node of this subtree */
    int32_t token;  /* a token whose bytes end here, or -1 */
    uint16_t depth; /* bytes from the root: 1 for the first byte */
    uint8_t byte;
};

struct gs_grammar_vocab {
    uint32_t n_vocab;
    struct gnode *nodes;
    uint32_t n_nodes;
    uint32_t max_depth;
    int32_t *same_next; /* [n_vocab]: next token with the same bytes, or -1 */
    char **piece;       /* [n_vocab] copies (NULL when empty) */
    uint32_t *len;      /* [n_vocab] */
};

#endif /* GS_GRAMMAR_INTERNAL_H */
