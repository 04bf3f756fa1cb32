/*
 * engine/graph.h - the graph IR: typed, shaped tensor nodes for one forward
 * pass of a decoder-only transformer, a builder API for model builders,
 * rewrite passes, and printing (text, DOT, JSON).
 *
 * Shapes. Every tensor is two-dimensional: ne[0] is the row length (the
 * contiguous dimension), ne[1] the number of rows. Weights have a fixed row
 * count. Activations have one row per token of the step (GS_ROWS_TOKENS) or
 * one row per token that asked for logits (GS_ROWS_OUTPUTS); the actual count
 * is only known when a plan is compiled for a shape bucket (engine/compile.h).
 * Activations are F32, except the rows of RMS_NORM_QUANT and SWIGLU_QUANT
 * (and of a MATMUL_SWIGLU made from one), which are blocks of the type their
 * matmuls multiply with (q8_0, q8_1, q8_K); weights keep their file type.
 *
 * Nodes are stored in topological order: a node's sources have smaller ids.
 * Builders append; passes rewrite nodes in place (a fused node takes the place
 * of the last node of the pattern) and dead-node elimination compacts the
 * array. Nodes that act on the world (KV_STORE, LOGITS) are roots: they are
 * never removed.
 *
 * Error handling in the builder is sticky: a builder call that fails (out of
 * memory, shape mismatch) records the first error in the graph and returns
 * GS_NODE_NONE; every later call that receives GS_NODE_NONE returns it too.
 * A model builder checks gs_graph_status() once at the end.
 *
 * Ownership: a graph owns its nodes and an arena holding names. Weight nodes
 * borrow their data pointer (normally from an open GGUF mapping), which must
 * outlive the graph. Threads: a graph is built and rewritten by one thread;
 * once built it is immutable and may be read (compiled, printed) from any.
 */
#ifndef GS_GRAPH_H
#define GS_GRAPH_H

#include "engine/base.h"
#include "engine/quant.h"

#include <stdio.h>

#define GS_NODE_NONE     UINT32_MAX
#define GS_GRAPH_MAX_SRC 4

/*
 * The ops. Columns: name, number of sources, flags. Shapes use R for the row
 * count of the step (tokens or outputs).
 */
#define GS_OP_MAP(X)                                                                               \
    /* a weight from the model file: [ne0 x ne1], any supported type */                            \
    X(WEIGHT, "weight", 0, GS_OPF_LEAF)                                                            \
    /* rows of table [n_embd x n_vocab] picked by the step's token ids -> [n_embd x T] */          \
    X(EMBED, "embed", 1, 0)                                                                        \
    /* x / sqrt(mean(x^2) + eps), per row */                                                       \
    X(RMS_NORM, "rms_norm", 1, GS_OPF_ELEMWISE)                                                    \
    /* a * b elementwise; b may be a single row broadcast over a's rows */                         \
    X(MUL, "mul", 2, GS_OPF_ELEMWISE)                                                              \
    /* a + b elementwise; b may be a single row broadcast over a's rows */                         \
    X(ADD, "add", 2, GS_OPF_ELEMWISE)                                                              \
    /* x [K x R] times weight W [K x N] (one row of K per output) -> [N x R] */                    \
    X(MATMUL, "matmul", 2, 0)                                                                      \
    /* rotary embedding at the step's positions; optional src1: frequency factors */               \
    X(ROPE, "rope", 1, GS_OPF_INPLACE)                                                                          \
    /* writes k and v rows of layer params.attn.layer into each token's sequence pages */          \
    X(KV_STORE, "kv_store", 2, GS_OPF_ROOT)                                                        \
    /* causal attention of q over the token's sequence pages (a sliding window when        */  \
    /* params.attn.window > 0); src1 orders it after KV_STORE                               */  \
    X(ATTN, "attn", 2, 0)                                                                          \
    /* softmax(x * scale) per row, with optional softcap before it */                              \
    X(SOFTMAX, "softmax", 1, 0)                                                                    \
    X(SILU, "silu", 1, GS_OPF_ELEMWISE)                                                            \
    X(GELU, "gelu", 1, GS_OPF_ELEMWISE)                                                            \
    /* x * params.scale: Gemma's embeddings times sqrt(n_embd)                                 */  \
    X(SCALE, "scale", 1, GS_OPF_ELEMWISE | GS_OPF_INPLACE)                                         \
    /* params.softcap * tanh(x / params.softcap): Gemma 2's final logit soft-cap               */  \
    X(SOFTCAP, "softcap", 1, GS_OPF_ELEMWISE | GS_OPF_INPLACE)                                     \
    /* act(a) * b, act silu (SwiGLU) or, with params.glu_act GS_GLU_GELU, gelu (GeGLU): the    */  \
    /* three swiglu ops below carry their gate's activation the same way                       */  \
    X(SWIGLU, "swiglu", 2, GS_OPF_ELEMWISE)                                                        \
    /* rms_norm(x) * w: fused by the rms_norm_mul pass */                                          \
    X(RMS_NORM_MUL, "rms_norm_mul", 2, 0)                                                          \
    /* x @ W + r: matmul with the residual add folded in, by the residual pass */                  \
    X(MATMUL_ADD, "matmul_add", 3, 0)                                                              \
    /* the rows of x whose tokens asked for logits -> [ne0 x n_outputs] */                         \
    X(OUTPUTS, "outputs", 1, 0)                                                                    \
    /* copies x [n_vocab x n_outputs] to the caller's logits buffer */                             \
    X(LOGITS, "logits", 1, GS_OPF_ROOT)                                                            \
    /* copies x [n_embd x n_tokens] to the caller's hidden buffer, when it gives one           */  \
    X(HIDDEN, "hidden", 1, GS_OPF_ROOT)                                                            \
    /* rms_norm_mul(x, w) with its rows quantized to the node's type, the dot partner of the   */  \
    /* quantized matmuls that read it: fused by the rms_norm_quant pass                        */  \
    X(RMS_NORM_QUANT, "rms_norm_quant", 2, 0)                                                      \
    /* swiglu(a, b) with its rows quantized likewise: fused by the swiglu_quant pass           */  \
    X(SWIGLU_QUANT, "swiglu_quant", 2, 0)                                                          \
    /* silu(x @ Wg) * (x @ Wu) -> [N x R]: a feed-forward's gate, up and SwiGLU in one node,    */  \
    /* F32 or quantized rows like swiglu_quant's; fused by the matmul_swiglu pass              */  \
    X(MATMUL_SWIGLU, "matmul_swiglu", 3, 0)                                                        \
    /* each head_dim slice of x [n_head * head_dim x R] over its own rms, times w [head_dim]:  */  \
    /* the per-head q and k norms of Qwen3 and Gemma 3                                         */  \
    X(RMS_NORM_HEADS, "rms_norm_heads", 2, GS_OPF_ELEMWISE)                                        \
    /* Gemma 3n. cols: elements [off, off + n) of every row -> [n x R]                         */  \
    X(COLS, "cols", 1, 0)                                                                          \
    /* rows of the 2 to 4 sources side by side -> [sum of widths x R]                          */  \
    X(CONCAT, "concat", 2, 0)                                                                      \
    /* AltUp predict: src0 m streams [m*n x R], src1 coefficients [m*m x R]; stream j becomes  */  \
    /* s_j + sum_k c[j*m + k] s_k                                                              */  \
    X(ALTUP_PREDICT, "altup_predict", 2, 0)                                                        \
    /* AltUp correct: src0 predictions [m*n x R], src1 the active stream after the block [n],  */  \
    /* src2 coefficients [m]: stream j becomes p_j + (c_j + 1) (a - p_active)                  */  \
    X(ALTUP_CORRECT, "altup_correct", 3, 0)                                                        \
    /* x * |ref| / |x| per row (|v| the L2 norm): x given ref's magnitude                      */  \
    X(MAG_MATCH, "mag_match", 2, 0)                                                                \
    /* relu(x - (mean + k * std)) per row, std with n - 1: Gemma 3n's Gaussian top-k           */  \
    X(GAUSS_TOPK, "gauss_topk", 1, 0)                                                              \
    /* Training (engine/graph/train.c). Causal attention of q [n_head*hd x T] over the k, v     */  \
    /* rows [n_head_kv*hd x T] of the step's earlier tokens of the same sequence: full        */  \
    /* sequences in one step, no KV cache                                                      */  \
    X(ATTN_CAUSAL, "attn_causal", 3, GS_OPF_TRAIN)                                                 \
    /* mean over the step's tokens of -log softmax(x)[target]: [V x T] -> [1 x 1]              */  \
    X(CROSS_ENTROPY, "cross_entropy", 1, GS_OPF_TRAIN)                                             \
    /* the gradient of cross_entropy with respect to its logits: (softmax(x) - onehot) / T    */  \
    X(CROSS_ENTROPY_BACK, "cross_entropy_back", 1, GS_OPF_TRAIN)                                   \
    /* dy [E x T] added into row tokens[t] of a zeroed table [E x ne1] (embed's gradient)     */  \
    X(EMBED_BACK, "embed_back", 1, GS_OPF_TRAIN)                                                   \
    /* dy [N x R] times W [K x N] -> dx [K x R] (matmul's gradient for its input)              */  \
    X(MATMUL_BACK_X, "matmul_back_x", 2, GS_OPF_TRAIN)                                             \
    /* dy [N x R] and x [K x R] -> dW [K x N] = sum over rows of dy^T x (for its weight)       */  \
    X(MATMUL_BACK_W, "matmul_back_w", 2, GS_OPF_TRAIN)                                             \
    /* rms_norm's gradient from dy and the norm's input x                                      */  \
    X(RMS_NORM_BACK, "rms_norm_back", 2, GS_OPF_ELEMWISE | GS_OPF_TRAIN)                           \
    /* rope's gradient: dy rotated back by the same angles; optional src1 frequency factors   */  \
    X(ROPE_BACK, "rope_back", 1, GS_OPF_TRAIN)                                                     \
    /* dy * b * silu'(a): swiglu's gradient for its gate a (for b it is swiglu(a, dy))         */  \
    X(SWIGLU_BACK_GATE, "swiglu_back_gate", 3, GS_OPF_ELEMWISE | GS_OPF_TRAIN)                     \
    /* sum over rows of a * b -> [ne0 x 1]: the gradient of a broadcast row of a mul           */  \
    X(SUM_ROWS_MUL, "sum_rows_mul", 2, GS_OPF_TRAIN)                                               \
    /* attn_causal's gradients for q, k and v, from (dy, q, k, v); recompute the softmax     */  \
    X(ATTN_CAUSAL_BACK_Q, "attn_causal_back_q", 4, GS_OPF_TRAIN)                                   \
    X(ATTN_CAUSAL_BACK_K, "attn_causal_back_k", 4, GS_OPF_TRAIN)                                   \
    X(ATTN_CAUSAL_BACK_V, "attn_causal_back_v", 4, GS_OPF_TRAIN)                                   \
    /* copies x (any rows) to the caller's buffer io->outs[params.out_slot]: loss, gradients  */  \
    X(OUT, "out", 1, GS_OPF_ROOT | GS_OPF_TRAIN)

enum gs_op_flags {
    GS_OPF_LEAF = 1 << 0,     /* no sources, no computation */
    GS_OPF_ROOT = 1 << 1,     /* has an effect outside the graph: never eliminated */
    GS_OPF_ELEMWISE = 1 << 2, /* row-local: output row r depends only on input row r */
    /* the value may take the bytes of src[0] when this node is its last reader: each
     * output element depends only on src[0] elements a kernel reads before writing it */
    GS_OPF_INPLACE = 1 << 3,
    /* a training op: one kernel in engine/backend/train_ops.c serves ref and cpu */
    GS_OPF_TRAIN = 1 << 4,
};

enum gs_op {
#define GS_OP_ENUM(name, text, n_src, flags) GS_OP_##name,
    GS_OP_MAP(GS_OP_ENUM)
#undef GS_OP_ENUM
        GS_OP_COUNT
};

struct gs_op_info {
    const char *name;
    int n_src;
    unsigned flags;
};

/* The op table; NULL for an out-of-range op. */
const struct gs_op_info *gs_op_info(enum gs_op op);

/* Ops that multiply their src[0] rows by the weight in src[1] (and, for
 * MATMUL_SWIGLU, src[2], of the same type and shape). */
static inline bool gs_op_is_matmul(enum gs_op op)
{
    return op == GS_OP_MATMUL || op == GS_OP_MATMUL_ADD || op == GS_OP_MATMUL_SWIGLU;
}

/* What the row count of a tensor is. */
enum gs_rows {
    GS_ROWS_FIXED = 0, /* ne[1] as stored (weights) */
    GS_ROWS_TOKENS,    /* one row per token of the step */
    GS_ROWS_OUTPUTS,   /* one row per token that asked for logits */
    GS_ROWS_NONE,      /* the node has no value (KV_STORE, LOGITS) */
};

/* The gate activation of the swiglu ops (zero: silu, as they were first made). */
enum gs_glu_act {
    GS_GLU_SILU = 0,
    GS_GLU_GELU, /* tanh form, as the GELU op */
};

enum gs_rope_mode {
    GS_ROPE_NORMAL = 0, /* rotate adjacent pairs (x[2i], x[2i+1]) */
    GS_ROPE_NEOX = 2,   /* rotate pairs (x[i], x[i + n_rot/2]) */
};

struct gs_rope_params {
    int32_t n_head; /* heads in the row: row length is n_head * head_dim */
    int32_t head_dim;
    int32_t n_rot; /* leading dims of each head that rotate (<= head_dim, even) */
    enum gs_rope_mode mode;
    float freq_base;  /* theta_i = pos * freq_scale * freq_base^(-2i/n_rot) */
    float freq_scale; /* 1 / linear scaling factor */
};

struct gs_attn_params {
    int32_t layer;     /* which layer's pages in the KV cache */
    int32_t n_head;    /* query heads */
    int32_t n_head_kv; /* key/value heads; n_head is a multiple of it (GQA) */
    int32_t head_dim;
    float scale;   /* applied to q.k before softcap and softmax */
    float softcap; /* 0: none; else scores become softcap * tanh(s / softcap) */
    /* 0: global. Else a sliding window: a query at position p sees keys at positions
     * (p - window, p] only, and the kernels never read the keys before that. */
    int32_t window;
};

struct gs_softmax_params {
    float scale;
    float softcap; /* 0: none */
};

struct gs_cols_params {
    int32_t off; /* COLS: first element taken */
};

struct gs_altup_params {
    int32_t n_streams; /* m */
    int32_t active;    /* ALTUP_CORRECT: the stream the block ran on */
};

struct gs_norm_heads_params {
    float eps; /* first, so that p.eps reads it as for the other norms */
    int32_t head_dim;
};

/* Op parameters. Zero-filled before use so that nodes compare with memcmp. */
union gs_node_params {
    float eps;     /* RMS_NORM, RMS_NORM_MUL, RMS_NORM_QUANT */
    float scale;   /* SCALE */
    float softcap; /* SOFTCAP: > 0 */
    enum gs_glu_act glu_act; /* SWIGLU, SWIGLU_QUANT, MATMUL_SWIGLU */
    struct gs_cols_params cols;
    struct gs_altup_params altup; /* ALTUP_PREDICT, ALTUP_CORRECT */
    float topk_k;                 /* GAUSS_TOPK: std multiplier */
    struct gs_rope_params rope;
    struct gs_attn_params attn; /* KV_STORE (layer, n_head_kv, head_dim), ATTN */
    struct gs_softmax_params softmax;
    struct gs_norm_heads_params norm_heads; /* RMS_NORM_HEADS */
    int32_t out_slot;                       /* OUT: index into gs_step_io.outs */
};

struct gs_node {
    enum gs_op op;
    enum gs_type type; /* F32 for activations (see RMS_NORM_QUANT); the file type for weights */
    enum gs_rows rows;
    int64_t ne[2]; /* ne[0] row length; ne[1] rows when rows == GS_ROWS_FIXED, else 0 */
    uint32_t n_src;
    uint32_t src[GS_GRAPH_MAX_SRC]; /* node ids, all smaller than this node's id */
    union gs_node_params p;
    const void *data; /* WEIGHT: borrowed tensor bytes; else NULL */
    const char *name; /* in the graph's arena; "" when unnamed */
};

/* A graph. Fields are read-only outside engine/graph. */
struct gs_graph {
    struct gs_node *nodes; /* [n_nodes], topological order; owned */
    uint32_t n_nodes;
    uint32_t cap_nodes;
    int64_t n_vocab;              /* row length of the LOGITS node's input, 0 until set */
    struct gs_err err;            /* first builder error (sticky); code GS_OK when none */
    struct gs_graph_arena *arena; /* names; internal */
};

/* ---- lifetime ------------------------------------------------------------- */

enum gs_status gs_graph_new(struct gs_graph **out, struct gs_err *err);
void gs_graph_free(struct gs_graph *g); /* NULL is a no-op */

/* A deep copy (nodes and names; weight data stays borrowed). */
enum gs_status gs_graph_clone(const struct gs_graph *g, struct gs_graph **out, struct gs_err *err);

/* The sticky builder status: GS_OK, or the first error (copied into err). */
enum gs_status gs_graph_status(const struct gs_graph *g, struct gs_err *err);

static inline const struct gs_node *gs_graph_node(const struct gs_graph *g, uint32_t id)
{
    return id < g->n_nodes ? &g->nodes[id] : NULL;
}

/* ---- builder -------------------------------------------------------------- */
/* Each returns the new node's id, or GS_NODE_NONE (see the sticky error above). */

uint32_t gs_graph_weight(struct gs_graph *g, const char *name, enum gs_type type, int64_t ne0,
                         int64_t ne1, const void *data);
uint32_t gs_graph_embed(struct gs_graph *g, uint32_t table);
uint32_t gs_graph_rms_norm(struct gs_graph *g, uint32_t x, float eps);
uint32_t gs_graph_mul(struct gs_graph *g, uint32_t a, uint32_t b);
uint32_t gs_graph_add(struct gs_graph *g, uint32_t a, uint32_t b);
uint32_t gs_graph_matmul(struct gs_graph *g, uint32_t x, uint32_t w);
/* freq_factors: a weight of n_rot/2 F32 values dividing each frequency, or GS_NODE_NONE. */
uint32_t gs_graph_rope(struct gs_graph *g, uint32_t x, const struct gs_rope_params *p,
                       uint32_t freq_factors);
uint32_t gs_graph_kv_store(struct gs_graph *g, uint32_t k, uint32_t v,
                           const struct gs_attn_params *p);
uint32_t gs_graph_attn(struct gs_graph *g, uint32_t q, uint32_t kv_store,
                       const struct gs_attn_params *p);
uint32_t gs_graph_softmax(struct gs_graph *g, uint32_t x, const struct gs_softmax_params *p);
uint32_t gs_graph_silu(struct gs_graph *g, uint32_t x);
uint32_t gs_graph_gelu(struct gs_graph *g, uint32_t x);
/* x * scale; scale must be finite. */
uint32_t gs_graph_scale(struct gs_graph *g, uint32_t x, float scale);
/* softcap * tanh(x / softcap); softcap must be positive and finite. */
uint32_t gs_graph_softcap(struct gs_graph *g, uint32_t x, float softcap);
uint32_t gs_graph_swiglu(struct gs_graph *g, uint32_t a, uint32_t b);
/* act(a) * b: swiglu with its gate activation named. */
uint32_t gs_graph_glu(struct gs_graph *g, uint32_t a, uint32_t b, enum gs_glu_act act);
uint32_t gs_graph_rms_norm_mul(struct gs_graph *g, uint32_t x, uint32_t w, float eps);
/* w: an F32 weight of head_dim values; x's row length a multiple of head_dim. */
uint32_t gs_graph_rms_norm_heads(struct gs_graph *g, uint32_t x, uint32_t w, int32_t head_dim,
                                 float eps);
uint32_t gs_graph_matmul_add(struct gs_graph *g, uint32_t x, uint32_t w, uint32_t r);
/* silu(x @ w_gate) * (x @ w_up); the weights must have the same type and shape. */
uint32_t gs_graph_matmul_swiglu(struct gs_graph *g, uint32_t x, uint32_t w_gate, uint32_t w_up);
/* act(x @ w_gate) * (x @ w_up). */
uint32_t gs_graph_matmul_glu(struct gs_graph *g, uint32_t x, uint32_t w_gate, uint32_t w_up,
                             enum gs_glu_act act);
/* Gemma 3n's ops (see the table above). */
uint32_t gs_graph_cols(struct gs_graph *g, uint32_t x, int64_t off, int64_t n);
uint32_t gs_graph_concat(struct gs_graph *g, const uint32_t *xs, int n);
uint32_t gs_graph_altup_predict(struct gs_graph *g, uint32_t streams, uint32_t coefs,
                                int32_t n_streams);
uint32_t gs_graph_altup_correct(struct gs_graph *g, uint32_t predictions, uint32_t activated,
                                uint32_t coefs, int32_t n_streams, int32_t active);
uint32_t gs_graph_mag_match(struct gs_graph *g, uint32_t x, uint32_t ref);
uint32_t gs_graph_gauss_topk(struct gs_graph *g, uint32_t x, float k);
uint32_t gs_graph_outputs(struct gs_graph *g, uint32_t x);
uint32_t gs_graph_logits(struct gs_graph *g, uint32_t x);
/* The hidden-state root: x has one row per token; at most one per graph. */
uint32_t gs_graph_hidden(struct gs_graph *g, uint32_t x);

/* ---- training (engine/graph/train.c) ------------------------------------- */

/* q, k, v: [n_head*hd x T], [n_head_kv*hd x T] twice; p.layer and p.window unused (0). */
uint32_t gs_graph_attn_causal(struct gs_graph *g, uint32_t q, uint32_t k, uint32_t v,
                              const struct gs_attn_params *p);
/* logits [V x T] against the step's targets (gs_step_io.targets) -> [1 x 1]. */
uint32_t gs_graph_cross_entropy(struct gs_graph *g, uint32_t logits);
/* A root copying x into io->outs[slot]. */
uint32_t gs_graph_out(struct gs_graph *g, uint32_t x, int32_t slot);

/*
 * Reverse-mode autodiff. From the scalar loss (a CROSS_ENTROPY node) appends
 * the nodes of the backward pass, computing d loss / d params[i] for each of
 * the n_params WEIGHT nodes (F32), and roots: OUT slot 0 the loss, OUT slot
 * 1 + i the gradient of params[i] (its shape). Gradients reaching a node
 * from several readers are summed with ADD. GS_UNSUPPORTED names an op on the
 * path from a parameter to the loss that has no gradient; GS_INVAL a
 * parameter that does not reach the loss.
 */
enum gs_status gs_graph_backward(struct gs_graph *g, uint32_t loss, const uint32_t *params,
                                 uint32_t n_params, struct gs_err *err);

/* Names node id (printf-style, copied into the arena); returns id for chaining. */
uint32_t gs_graph_name(struct gs_graph *g, uint32_t id, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Node id of the LOGITS root, GS_NODE_NONE when the graph has none. */
uint32_t gs_graph_logits_node(const struct gs_graph *g);
/* Node id of the HIDDEN root, GS_NODE_NONE when the graph has none. */
uint32_t gs_graph_hidden_node(const struct gs_graph *g);

/* ---- editing (used by passes) --------------------------------------------- */

/* Number of sources across the graph that read node id. */
uint32_t gs_graph_n_uses(const struct gs_graph *g, uint32_t id);

/* Makes every source that reads `from` read `to` instead (to < every such reader). */
void gs_graph_replace_uses(struct gs_graph *g, uint32_t from, uint32_t to);

/* Removes the nodes with dead[i] true, renumbering the rest; returns the count removed. */
uint32_t gs_graph_compact(struct gs_graph *g, const bool *dead);

/* Checks the invariants (source ids in range and smaller, shapes consistent).
 * Returns GS_FORMAT with the offending node named. */
enum gs_status gs_graph_verify(const struct gs_graph *g, struct gs_err *err);

/* ---- passes --------------------------------------------------------------- */

/*
 * A rewrite pass. A pass list is data (an array of pointers): a backend that
 * lacks a fused op simply leaves the pass that produces it out of its list.
 */
struct gs_pass {
    const char *name; /* "dce", "cse", "rms_norm_mul", "swiglu", "residual" */
    const char *help;
    enum gs_op produces; /* the op the pass introduces, GS_OP_COUNT if none */
    /* the type of the nodes it introduces (0: F32); quantizing passes name the
     * block type a backend must be able to write (their nodes take q8_0 or
     * q8_K, whichever their matmuls multiply with) */
    enum gs_type produces_type;
    /* Rewrites g in place; *n_changed counts rewritten or removed nodes. */
    enum gs_status (*run)(struct gs_graph *g, uint32_t *n_changed, struct gs_err *err);
};

extern const struct gs_pass gs_pass_dce;
extern const struct gs_pass gs_pass_cse;
extern const struct gs_pass gs_pass_rms_norm_mul;
extern const struct gs_pass gs_pass_swiglu;
extern const struct gs_pass gs_pass_residual;
extern const struct gs_pass gs_pass_rms_norm_quant;
extern const struct gs_pass gs_pass_swiglu_quant;
extern const struct gs_pass gs_pass_matmul_swiglu;

/* Every pass, in the default order (fusions, then CSE, then DCE). */
extern const struct gs_pass *const gs_passes_all[];
extern const size_t gs_passes_all_len;

/* Looks a pass up by name; NULL when unknown. */
const struct gs_pass *gs_pass_find(const char *name);

/* Runs passes in order, verifying the graph after each. */
enum gs_status gs_graph_run_passes(struct gs_graph *g, const struct gs_pass *const *passes,
                                   size_t n_passes, struct gs_err *err);

/* ---- printing ------------------------------------------------------------- */

enum gs_graph_format { GS_GRAPH_TEXT, GS_GRAPH_DOT, GS_GRAPH_JSON };

/* Writes g to f: text is one node a line ("%12 = matmul(%10, %3) f32 [64 x T] Qcur-0"). */
void gs_graph_print(const struct gs_graph *g, enum gs_graph_format fmt, FILE *f);

#endif /* GS_GRAPH_H */
