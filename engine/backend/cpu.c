/*
 * engine/backend/cpu.c - the fast CPU backend: the kernels of engine/cpu
 * (integer SIMD dot products on weights in their file format, activations
 * quantized once per step to the weight type's dot partner) driven by a
 * persistent worker pool.
 *
 * Every op is one task on the pool, cut in chunks (output rows of a matmul,
 * rows of an elementwise op, (tile of tokens, kv head) pairs of attention) that the
 * threads claim; the pool's return is the op's one barrier. Kernels see
 * (chunk, chunks) where a static split would see (thread, threads). A matmul whose input has not
 * yet been quantized to the format it needs runs a quantize task first; the quantized rows are
 * kept, so the q/k/v (and gate/up) matmuls that read one input quantize it once.
 *
 * Attention reads the sequence's KV pages directly: K once for the scores, V
 * once for the output, each row for all the query heads of its kv head and a
 * tile of the sequence's tokens. With an F16 cache, q and the softmax weights are rounded to F16
 * as in ref (which is what llama.cpp's mixed F16 products do).
 *
 * This file opens the backend, compiles plans (sizing the work memory) and
 * runs steps: which ops run as one pool task and in how many chunks. The op
 * kernels are engine/backend/cpu_ops.c; the step state both files use is in
 * engine/backend/internal.h.
 *
 * Ownership: the pool belongs to the backend instance (created in open,
 * joined in close); a plan owns its scratch, quantized-activation and
 * per-thread buffers, all allocated at compile time. A step allocates nothing.
 */
#include "engine/backend.h"
#include "engine/backend/internal.h"
#include "engine/compile.h"
#include "engine/cpu/cpu.h"

#include <math.h>
#include <string.h>

/* ---- backend table ------------------------------------------------------------------ */

static enum gs_status cpu_open(struct gs_be *be, const struct gs_be_cfg *cfg, struct gs_err *err)
{
    struct cpu_ctx *c = gs_calloc(1, sizeof(*c));
    if (!c)
        return gs_err_set(err, GS_NOMEM, "cpu: out of memory");
    enum gs_status st = gs_cpu_pool_new(cfg->n_threads, &c->pool, err);
    if (st) {
        gs_free(c);
        return gs_err_prefix(err, "cpu");
    }
    c->n_threads = gs_cpu_pool_threads(c->pool);
    c->local = gs_calloc((size_t)c->n_threads, sizeof(*c->local));
    if (!c->local) {
        gs_cpu_pool_free(c->pool);
        gs_free(c);
        return gs_err_set(err, GS_NOMEM, "cpu: out of memory");
    }
    be->ctx = c;
    return GS_OK;
}

static void cpu_close(struct gs_be *be)
{
    struct cpu_ctx *c = be->ctx;
    if (!c)
        return;
    gs_cpu_pool_free(c->pool);
    gs_free(c->scratch);
    gs_free(c->xq);
    gs_free(c->xq_local);
    gs_free(c->local);
    gs_free(c->thread_buf);
    gs_free(c->scores);
    gs_free(c->rope_cs);
    gs_free(c->attn_tiles);
    gs_free(c->seq_first);
    gs_free(c->probs);
    gs_free(c->probs_row);
    gs_free(c);
    be->ctx = NULL;
}

static bool cpu_supports(const struct gs_be *be, const struct gs_node *n)
{
    if ((unsigned)n->op >= GS_OP_COUNT)
        return false;
    if (n->op == GS_OP_RMS_NORM_QUANT || n->op == GS_OP_SWIGLU_QUANT ||
        (n->op == GS_OP_MATMUL_SWIGLU && n->type != GS_TYPE_F32)) /* quantized rows */
        return gs_cpu_quantizer(n->type) != NULL;
    if (n->op != GS_OP_WEIGHT)
        return gs_be__cpu_kernels[n->op] && n->type == GS_TYPE_F32;
    const struct gs_type_traits *tt = gs_type_traits(n->type);
    const struct gs_cpu_kernels *kr = gs_cpu_kernels(n->type);
    return tt && tt->supported && tt->to_f32 && kr && kr->dot;
}

static void cpu_plan_free(struct gs_be *be, struct gs_plan *p)
{
    struct cpu_plan *cp = p->be_data;
    if (cp)
        gs_free(cp->probs_src);
    gs_free(p->be_data);
    gs_plan_free(p);
}

/* What the kernels need beyond supports() and the graph's own checks (which
 * keep quantized rows to matmuls that multiply with exactly that type):
 * matmul activations that quantize whole blocks, F32 broadcast weights.
 * Sizes the quantized-activation rows and the per-thread float rows
 * (attention's q and accumulator, a row on its way to being quantized). */
static enum gs_status check_nodes(const struct gs_graph *g, uint64_t *xq_stride,
                                  int64_t *thread_floats, int64_t *rope_floats,
                                  struct gs_err *err)
{
    *xq_stride = 0;
    *thread_floats = 2;
    *rope_floats = 1;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const struct gs_node *n = &g->nodes[i];
        if (gs_op_is_matmul(n->op)) {
            const struct gs_node *w = &g->nodes[n->src[1]];
            const enum gs_type vt = gs_type_traits(w->type)->vec_dot_type;
            uint64_t bytes;
            if (w->op != GS_OP_WEIGHT || (w->type != GS_TYPE_F32 && !gs_cpu_quantizer(vt)) ||
                gs_type_row_bytes(vt, w->ne[0], &bytes))
                return gs_err_set(err, GS_UNSUPPORTED,
                                  "cpu: node %u '%s': cannot quantize rows of %lld for %s", i,
                                  n->name, (long long)w->ne[0], gs_type_name(w->type));
            *xq_stride = GS_MAX(*xq_stride, (bytes + 63) / 64 * 64);
        }
        if (n->op == GS_OP_MATMUL_SWIGLU)
            *thread_floats = GS_MAX(*thread_floats, 2 * FFN_SLICE_FLOATS);
        if (n->op == GS_OP_RMS_NORM_QUANT || n->op == GS_OP_SWIGLU_QUANT ||
            (n->op == GS_OP_MATMUL_SWIGLU && n->type != GS_TYPE_F32)) {
            uint64_t bytes;
            if (!gs_cpu_quantizer(n->type) || gs_type_row_bytes(n->type, n->ne[0], &bytes))
                return gs_err_set(err, GS_UNSUPPORTED, "cpu: node %u '%s': %s rows of %lld", i,
                                  n->name, gs_type_name(n->type), (long long)n->ne[0]);
            *thread_floats = GS_MAX(*thread_floats, n->ne[0]);
        }
        for (uint32_t s = 1; s < n->n_src; s++) {
            const struct gs_node *b = &g->nodes[n->src[s]];
            bool reads_row = n->op == GS_OP_MUL || n->op == GS_OP_ADD ||
                             n->op == GS_OP_SWIGLU || n->op == GS_OP_RMS_NORM_MUL ||
                             n->op == GS_OP_RMS_NORM_QUANT || n->op == GS_OP_SWIGLU_QUANT;
            if (reads_row && b->op == GS_OP_WEIGHT && b->type != GS_TYPE_F32)
                return gs_err_set(err, GS_UNSUPPORTED, "cpu: node %u '%s': %s weight '%s'", i,
                                  n->name, gs_type_name(b->type), b->name);
            if (n->op == GS_OP_ROPE && b->op == GS_OP_WEIGHT && b->type != GS_TYPE_F32)
                return gs_err_set(err, GS_UNSUPPORTED, "cpu: node %u '%s': %s frequencies", i,
                                  n->name, gs_type_name(b->type));
        }
        if (n->op == GS_OP_ATTN) /* ATTN_ROWS queries and accumulators */
            *thread_floats = GS_MAX(*thread_floats, 2 * ATTN_ROWS * (int64_t)n->p.attn.head_dim);
        if (n->op == GS_OP_ROPE) /* per token: a cos and a sin per pair */
            *rope_floats = GS_MAX(*rope_floats, (int64_t)(n->p.rope.n_rot / 2) * 2);
    }
    return GS_OK;
}

/* The matmul feeding the graph's LOGITS node when nothing else reads it. */
static uint32_t logits_matmul(const struct gs_graph *g)
{
    uint32_t m = GS_NODE_NONE;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const struct gs_node *n = &g->nodes[i];
        if (n->op == GS_OP_LOGITS && g->nodes[n->src[0]].op == GS_OP_MATMUL)
            m = n->src[0];
    }
    for (uint32_t i = 0; m != GS_NODE_NONE && i < g->n_nodes; i++) {
        const struct gs_node *n = &g->nodes[i];
        for (uint32_t k = 0; k < n->n_src; k++)
            if (n->src[k] == m && n->op != GS_OP_LOGITS)
                return GS_NODE_NONE;
    }
    return m;
}

/* Makes *buf hold at least n * size bytes (contents are not kept: nothing
 * in the work memory outlives a step). false: out of memory or overflow, and
 * *buf is left as it was, so plans compiled earlier keep running. */
static bool grow(void **buf, size_t *cap, uint64_t n, uint64_t size)
{
    uint64_t need;
    if (gs_mul_overflow(n, size, &need) || need > SIZE_MAX)
        return false;
    need = need ? need : 1;
    if (need <= *cap)
        return true;
    void *p = gs_malloc((size_t)need);
    if (!p)
        return false;
    gs_free(*buf);
    *buf = p;
    *cap = (size_t)need;
    return true;
}

/* Floats of attention probabilities a plan may keep, over all its slots (64 MiB). */
#define PROBS_MAX_FLOATS ((uint64_t)1 << 24)

/* The forward attention nodes whose probabilities a backward node reads again
 * (struct cpu_plan's probs_*), each slot sized for every query of every
 * sequence of a step of s->n_tokens rows, up to PROBS_MAX_FLOATS in all.
 * False when out of memory. */
static bool find_probs(const struct gs_graph *g, const struct gs_shape *s, struct cpu_plan *cp)
{
    uint32_t n = 0, max_head = 0;
    for (uint32_t i = 0; i < g->n_nodes; i++)
        n += g->nodes[i].op == GS_OP_ATTN_CAUSAL;
    if (!n)
        return true;
    cp->probs_src = gs_alloc_array(n, sizeof(*cp->probs_src));
    if (!cp->probs_src)
        return false;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const struct gs_node *f = &g->nodes[i];
        if (f->op != GS_OP_ATTN_CAUSAL)
            continue;
        bool read_again = false;
        for (uint32_t j = 0; j < g->n_nodes && !read_again; j++) {
            const struct gs_node *b = &g->nodes[j];
            read_again = b->op >= GS_OP_ATTN_CAUSAL_BACK_Q && b->op <= GS_OP_ATTN_CAUSAL_BACK_V &&
                         b->src[1] == f->src[0] && b->src[2] == f->src[1] && b->src[3] == f->src[2];
        }
        if (!read_again)
            continue;
        memcpy(cp->probs_src[cp->n_probs++], f->src, sizeof(cp->probs_src[0]));
        max_head = GS_MAX(max_head, (uint32_t)f->p.attn.n_head);
    }
    if (cp->n_probs)
        cp->probs_slot = GS_MIN((uint64_t)max_head * s->n_tokens * (s->n_tokens + 1) / 2,
                                PROBS_MAX_FLOATS / cp->n_probs);
    return true;
}

static enum gs_status cpu_compile(struct gs_be *be, const struct gs_graph *g,
                                  const struct gs_shape *s, struct gs_plan **out,
                                  struct gs_err *err)
{
    struct cpu_ctx *c = be->ctx;
    *out = NULL;
    uint64_t xq_stride;
    int64_t thread_floats, rope_floats;
    enum gs_status st = gs_be_check_graph(be, g, err);
    if (!st)
        st = check_nodes(g, &xq_stride, &thread_floats, &rope_floats, err);
    if (st)
        return st;
    struct gs_plan *p;
    st = gs_plan_layout(g, s, &p, err);
    if (st)
        return st;
    struct cpu_plan *cp = gs_calloc(1, sizeof(*cp));
    p->be_data = cp;
    if (!cp)
        goto out_nomem;
    const uint64_t nt = (uint64_t)c->n_threads, row = xq_stride ? xq_stride : 1;
    cp->xq_stride = xq_stride;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const struct gs_node *n = &g->nodes[i];
        if (gs_train_op(n->op))
            thread_floats = GS_MAX(thread_floats, GS_TRAIN_WORK_FLOATS(s->n_tokens));
        if (gs_cpu_train_own(n->op))
            thread_floats = GS_MAX(thread_floats, GS_CPU_TRAIN_WORK_FLOATS(
                                                      s->n_tokens, g->nodes[n->src[0]].ne[0]));
        cp->causal_attn |= n->op == GS_OP_ATTN_CAUSAL;
        cp->train |= gs_train_op(n->op);
    }
    for (uint32_t i = 0; cp->train && i < g->n_nodes; i++)
        if (gs_op_is_matmul(g->nodes[i].op))
            thread_floats =
                GS_MAX(thread_floats, GS_CPU_TRAIN_PANEL * g->nodes[g->nodes[i].src[1]].ne[0]);
    cp->thread_floats = (thread_floats + 15) / 16 * 16;
    if (cp->train && !find_probs(g, s, cp))
        goto out_nomem;
    cp->logits_matmul = logits_matmul(g);
    int unit_heads = 1;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const struct gs_node *n = &g->nodes[i];
        cp->paged_attn |= n->op == GS_OP_ATTN;
        if (n->op == GS_OP_ATTN)
            unit_heads =
                GS_MAX(unit_heads, GS_MIN(ATTN_HEADS, n->p.attn.n_head / n->p.attn.n_head_kv));
    }
    cp->attn_tile = GS_MAX(ATTN_BLOCK, ATTN_ROWS / unit_heads / ATTN_BLOCK * ATTN_BLOCK);
    if (!grow(&c->scratch, &c->scratch_bytes, p->scratch_bytes, 1) ||
        !grow((void **)&c->xq, &c->xq_bytes, s->n_tokens, row) ||
        !grow((void **)&c->xq_local, &c->xq_local_bytes, nt * LOCAL_QUANT_TOKENS, row) ||
        !grow((void **)&c->thread_buf, &c->thread_buf_bytes, nt * (uint64_t)cp->thread_floats,
              sizeof(float)) ||
        !grow((void **)&c->rope_cs, &c->rope_cs_bytes, (uint64_t)s->n_tokens * rope_floats,
              sizeof(float)) ||
        !grow((void **)&c->attn_tiles, &c->attn_tiles_bytes, (uint64_t)s->n_tokens + 1,
              sizeof(uint32_t)) ||
        !grow((void **)&c->seq_first, &c->seq_first_bytes, s->n_tokens, sizeof(uint32_t)) ||
        !grow((void **)&c->probs, &c->probs_bytes, (uint64_t)cp->n_probs * cp->probs_slot,
              sizeof(float)) ||
        !grow((void **)&c->probs_row, &c->probs_row_bytes, s->n_tokens, sizeof(uint32_t)))
        goto out_nomem;
    *out = p;
    return GS_OK;
out_nomem:;
    const unsigned long long bytes = p->scratch_bytes;
    cpu_plan_free(be, p);
    return gs_err_set(err, GS_NOMEM, "cpu: out of memory reserving %llu scratch bytes", bytes);
}

/* Attention keeps ATTN_ROWS scores per position and thread; the rows are sized on
 * the first step (see below) and after that only a new, larger KV pool
 * grows them. */
static enum gs_status reserve_scores(struct cpu_ctx *c, const struct gs_step_io *io,
                                     struct gs_err *err)
{
    int64_t need = 1;
    for (uint32_t t = 0; t < io->n_tokens; t++)
        need = GS_MAX(need, (int64_t)io->pos[t] + 1);
    if (need <= c->scores_cap)
        return GS_OK;
    /* No sequence outgrows the KV pool it lives in: sized for the pool the
     * first time, the rows are never reallocated while serving from it
     * (4 * ATTN_ROWS bytes per pool token per thread, against kilobytes of
     * KV per token). */
    int64_t cap = GS_MAX(need, 256);
    if (io->kv)
        cap = GS_MAX(cap, (int64_t)io->kv->n_pages * io->kv->page_tokens);
    if (!grow((void **)&c->scores, &c->scores_bytes, (uint64_t)cap * c->n_threads * ATTN_ROWS,
              sizeof(float)))
        return gs_err_set(err, GS_NOMEM, "cpu: out of memory for %lld attention scores",
                          (long long)cap);
    c->scores_cap = cap;
    return GS_OK;
}

static void task(void *arg, int c, int nc, int ith)
{
    struct cpu_run *r = arg;
    gs_be__cpu_kernels[r->n->op](r, c, nc, ith);
}

static void task_quantize(void *arg, int c, int nc, int ith)
{
    gs_be__cpu_quantize_input(arg, c, nc, ith);
}

/* Weight bytes per piece a matmul is cut into beyond one per thread. */
#define MATMUL_PIECE_BYTES (1u << 20)

/*
 * Pieces are claimed from a counter, so a thread that runs late or is
 * descheduled on a shared machine leaves its share to the others; but each
 * piece costs two cache-line transfers between cores (its claim and its done
 * count), about 0.3 us. A matmul is therefore cut into one piece per thread
 * per MiB of weights, up to four: small matrices (the 135M shape's 576-wide
 * ones, read in ~10 us) take one piece per thread, large ones four (measured
 * on two threads: one-stream decoding of the 135M shape 220-248 -> 300-320
 * tokens/s with one piece instead of four when the machine was quiet, the 1B
 * shape 15% slower with one piece when it was not). Attention takes four per
 * thread: a causal prompt's later rows are longer.
 */
static int chunks_for(const struct gs_graph *g, const struct gs_node *n, int n_threads)
{
    if (n->op == GS_OP_ATTN || n->op == GS_OP_ATTN_CAUSAL || n->op == GS_OP_ATTN_CAUSAL_BACK_Q)
        return 4 * n_threads;
    if (!gs_op_is_matmul(n->op))
        return n_threads;
    const struct gs_node *w = &g->nodes[n->src[1]];
    uint64_t row = 0;
    gs_type_row_bytes(w->type, w->ne[0], &row);
    const uint64_t n_weights = n->op == GS_OP_MATMUL_SWIGLU ? 2 : 1;
    const uint64_t pieces = n_weights * row * (uint64_t)w->ne[1] / MATMUL_PIECE_BYTES;
    return (int)GS_MAX(1, GS_MIN(4, pieces)) * n_threads;
}

/* Where node id writes: its plan slot, or the caller's logits. */
static float *node_out(const struct cpu_run *r, uint32_t id)
{
    if (id == r->cp->logits_matmul)
        return r->io->logits;
    return r->plan->offset[id] == GS_PLAN_NO_OFFSET ? NULL : cpu_value(r, id);
}

/*
 * Ops run as one pool task: one barrier for the group instead of one each.
 * Member i has chunks first[i] .. first[i + 1] - 1 of a matmul group; a
 * token chain runs every member in each of its chunks.
 */
#define GROUP_MAX 4

struct op_group {
    const struct cpu_run *r;
    int n;
    const struct gs_node *nodes[GROUP_MAX];
    float *outs[GROUP_MAX];
    int first[GROUP_MAX + 1];
};

static void group_add(struct op_group *og, uint32_t id)
{
    og->nodes[og->n] = &og->r->g->nodes[id];
    og->outs[og->n] = node_out(og->r, id);
    og->n++;
}

/*
 * Matmuls that follow one another in the plan and read the same input (Q, K
 * and V; gate and up where they are not fused) run as one task: their chunks are numbered one after another and
 * claimed from one counter, so a thread that finishes its share of one
 * matrix goes on to the next instead of waiting.
 */
static void task_matmul_group(void *arg, int c, int nc, int ith)
{
    const struct op_group *mg = arg;
    int i = 0;
    while (c >= mg->first[i + 1])
        i++;
    struct cpu_run r = *mg->r;
    r.n = mg->nodes[i];
    r.out = mg->outs[i];
    gs_be__cpu_matmul(&r, c - mg->first[i], mg->first[i + 1] - mg->first[i], ith);
    (void)nc;
}

/* Gathers into mg the matmuls from order[k] on that can run with the one at
 * order[k] (same input, multiplied in the same type, so that one quantized
 * copy serves them all; none reads another's output); returns how many. */
static int matmul_group(const struct cpu_run *r, const struct gs_plan *p, uint32_t k, int n_threads,
                        struct op_group *mg)
{
    const struct gs_graph *g = r->g;
    const struct gs_node *first = &g->nodes[p->order[k]];
    const enum gs_type vt = gs_type_traits(g->nodes[first->src[1]].type)->vec_dot_type;
    *mg = (struct op_group){.r = r};
    for (uint32_t m = k; m < p->n_order && mg->n < GROUP_MAX; m++) {
        const uint32_t id = p->order[m];
        const struct gs_node *n = &g->nodes[id];
        if (!gs_op_is_matmul(n->op) || n->op == GS_OP_MATMUL_SWIGLU || n->src[0] != first->src[0])
            break;
        if (gs_type_traits(g->nodes[n->src[1]].type)->vec_dot_type != vt)
            break;
        bool reads_member = false;
        for (int i = 0; i < mg->n; i++)
            reads_member |= n->op == GS_OP_MATMUL_ADD && n->src[2] == p->order[k + (uint32_t)i];
        if (reads_member)
            break;
        mg->first[mg->n + 1] = mg->first[mg->n] + chunks_for(g, n, n_threads);
        group_add(mg, id);
    }
    return mg->n;
}

/*
 * Rope and KV stores cut a step by tokens the same way (gs_cpu_split over
 * the step's tokens) and read only their own tokens' rows, so consecutive
 * ones (rope of Q, rope of K, the store of K and V) run as one task: each
 * chunk runs every member, in order, on its tokens. Another chunk may still
 * be reading what a member reads or writes, so a node whose output overlaps
 * those ends the chain (rope rotates in place, GS_OPF_INPLACE, which keeps
 * rope K's output off Q's bytes).
 */
static bool by_token(const struct gs_node *n)
{
    return n->op == GS_OP_ROPE || n->op == GS_OP_KV_STORE;
}

static void task_token_chain(void *arg, int c, int nc, int ith)
{
    const struct op_group *tc = arg;
    struct cpu_run r = *tc->r;
    for (int i = 0; i < tc->n; i++) {
        r.n = tc->nodes[i];
        r.out = tc->outs[i];
        gs_be__cpu_kernels[r.n->op](&r, c, nc, ith);
    }
}

/* Whether the scratch values a and b share bytes. */
static bool overlap(const struct gs_plan *p, uint32_t a, uint32_t b)
{
    if (p->offset[a] == GS_PLAN_NO_OFFSET || p->offset[b] == GS_PLAN_NO_OFFSET)
        return false;
    return p->offset[a] < p->offset[b] + p->bytes[b] && p->offset[b] < p->offset[a] + p->bytes[a];
}

/* Whether node id may join the chain's members: its output touches nothing
 * they read or write. */
static bool chain_safe(const struct gs_plan *p, const struct op_group *tc, uint32_t id)
{
    const struct gs_graph *g = p->graph;
    for (int i = 0; i < tc->n; i++) {
        const uint32_t member = (uint32_t)(tc->nodes[i] - g->nodes);
        if (overlap(p, id, member))
            return false;
        for (uint32_t s = 0; s < tc->nodes[i]->n_src; s++)
            if (overlap(p, id, tc->nodes[i]->src[s]))
                return false;
    }
    return true;
}

/*
 * In a training plan's backward pass an op's gradients come in sets that read
 * the same upstream gradient and not each other: dx and dW of a matmul, the two
 * halves of a broadcast mul (dy·b, and the gain's column sums), and attention's
 * dq, dk and dv (each unit recomputes its softmax rows in its thread's buffer, so
 * units share nothing). Consecutive
 * such nodes run as one task, like a matmul group: each keeps the chunks it
 * would have alone, numbered one after another, so its units and their order,
 * and so its bits, are the same. A node joins only if it reads no member's
 * output and its output touches nothing a member reads or writes.
 */
static bool sibling_op(enum gs_op op)
{
    return op == GS_OP_MATMUL_BACK_X || op == GS_OP_MATMUL_BACK_W || op == GS_OP_MUL ||
           op == GS_OP_SUM_ROWS_MUL || op == GS_OP_ATTN_CAUSAL_BACK_Q ||
           op == GS_OP_ATTN_CAUSAL_BACK_K || op == GS_OP_ATTN_CAUSAL_BACK_V;
}

static void task_siblings(void *arg, int c, int nc, int ith)
{
    (void)nc;
    const struct op_group *sg = arg;
    int i = 0;
    while (c >= sg->first[i + 1])
        i++;
    struct cpu_run r = *sg->r;
    r.n = sg->nodes[i];
    r.out = sg->outs[i];
    gs_be__cpu_kernels[r.n->op](&r, c - sg->first[i], sg->first[i + 1] - sg->first[i], ith);
}

static int sibling_group(const struct cpu_run *r, const struct gs_plan *p, uint32_t k,
                         int n_threads, struct op_group *sg)
{
    const struct gs_graph *g = r->g;
    *sg = (struct op_group){.r = r};
    for (uint32_t m = k; m < p->n_order && sg->n < GROUP_MAX; m++) {
        const uint32_t id = p->order[m];
        const struct gs_node *n = &g->nodes[id];
        if (!sibling_op(n->op) || p->offset[id] == GS_PLAN_NO_OFFSET || !chain_safe(p, sg, id))
            break;
        bool reads_member = false;
        for (int i = 0; i < sg->n; i++) {
            const uint32_t member = (uint32_t)(sg->nodes[i] - g->nodes);
            for (uint32_t s = 0; s < n->n_src; s++)
                reads_member |= n->src[s] == member || overlap(p, n->src[s], member);
        }
        if (reads_member)
            break;
        sg->first[sg->n + 1] = sg->first[sg->n] + chunks_for(g, n, n_threads);
        group_add(sg, id);
    }
    return sg->n;
}

/* Gathers into tc the by-token nodes from order[k] on; returns how many.
 * Its ropes all turn by one set of angles: rope_prepare's table holds one. */
static int token_chain(const struct cpu_run *r, const struct gs_plan *p, uint32_t k,
                       struct op_group *tc)
{
    *tc = (struct op_group){.r = r};
    for (uint32_t m = k; m < p->n_order && tc->n < GROUP_MAX; m++) {
        const struct gs_node *n = &r->g->nodes[p->order[m]];
        if (!by_token(n) || !chain_safe(p, tc, p->order[m]))
            break;
        bool other_angles = false;
        for (int i = 0; i < tc->n && n->op == GS_OP_ROPE; i++)
            other_angles |=
                tc->nodes[i]->op == GS_OP_ROPE && !gs_be__cpu_same_rotation(n, tc->nodes[i]);
        if (other_angles)
            break;
        group_add(tc, p->order[m]);
    }
    return tc->n;
}

/* A run of consecutive `out` nodes (a training step's gradients, copied to the
 * caller's buffers at the end of the step): each is one unit of work, so the run
 * is one pool task of one chunk per node rather than one task, and one barrier,
 * per node. */
#define OUT_GROUP_MAX 64
struct out_group {
    const struct cpu_run *r;
    int n;
    const struct gs_node *nodes[OUT_GROUP_MAX];
    float *outs[OUT_GROUP_MAX];
};

static void task_out_group(void *arg, int c, int nc, int ith)
{
    (void)nc;
    const struct out_group *og = arg;
    struct cpu_run r = *og->r;
    r.n = og->nodes[c];
    r.out = og->outs[c];
    gs_be__cpu_kernels[r.n->op](&r, 0, 1, ith);
}

static enum gs_status cpu_run(struct gs_be *be, struct gs_plan *p, const struct gs_step_io *io,
                              struct gs_err *err)
{
    struct cpu_ctx *c = be->ctx;
    const struct gs_graph *g = p->graph;
    enum gs_status st = gs_step_io_check(io, g, &p->shape, err);
    if (st)
        return st;
    struct cpu_run r = {.plan = p, .g = g, .io = io, .cp = p->be_data, .ctx = c,
                    .xq_node = GS_NODE_NONE, .step = ++c->n_steps};
    st = r.cp->paged_attn ? reserve_scores(c, io, err) : GS_OK;
    if (st)
        return st;
    gs_be__cpu_attn_tiles(&r);
    if (r.cp->causal_attn)
        gs_cpu_train_seq_first(io, c->seq_first);
    if (r.cp->n_probs)
        r.probs_rows = gs_cpu_train_probs_rows(io, c->seq_first, c->probs_row);
    for (uint32_t k = 0; k < p->n_order;) {
        const uint32_t id = p->order[k];
        const struct gs_node *n = &g->nodes[id];
        if ((unsigned)n->op >= GS_OP_COUNT || !gs_be__cpu_kernels[n->op])
            return gs_err_set(err, GS_UNSUPPORTED, "cpu: node %u has no kernel", id);
        r.n = n;
        r.out = node_out(&r, id);
        if (gs_op_is_matmul(n->op)) {
            const enum gs_type wt = g->nodes[n->src[1]].type;
            const enum gs_type vt = gs_type_traits(wt)->vec_dot_type;
            const bool local = gs_step_rows(n, r.io) <= LOCAL_QUANT_TOKENS;
            const bool prequant = g->nodes[n->src[0]].type != GS_TYPE_F32;
            if (wt != GS_TYPE_F32 && !local && !prequant &&
                (r.xq_node != n->src[0] || r.xq_type != vt)) {
                r.xq_type = vt;
                gs_cpu_pool_run(c->pool, task_quantize, &r, c->n_threads);
                r.xq_node = n->src[0];
            }
            struct op_group mg;
            const int n_members = matmul_group(&r, p, k, c->n_threads, &mg);
            if (n_members > 1) {
                gs_cpu_pool_run(c->pool, task_matmul_group, &mg, mg.first[n_members]);
                k += (uint32_t)n_members;
                continue;
            }
        }
        if (n->op == GS_OP_OUT) {
            struct out_group og = {.r = &r};
            while (k < p->n_order && og.n < OUT_GROUP_MAX &&
                   g->nodes[p->order[k]].op == GS_OP_OUT) {
                og.nodes[og.n] = &g->nodes[p->order[k]];
                og.outs[og.n++] = node_out(&r, p->order[k]);
                k++;
            }
            gs_cpu_pool_run(c->pool, task_out_group, &og, og.n);
            continue;
        }
        if (r.cp->train && sibling_op(n->op)) {
            struct op_group sg;
            const int n_members = sibling_group(&r, p, k, c->n_threads, &sg);
            if (n_members > 1) {
                gs_cpu_pool_run(c->pool, task_siblings, &sg, sg.first[n_members]);
                k += (uint32_t)n_members;
                continue;
            }
        }
        struct op_group tc;
        const int n_chained = by_token(n) ? token_chain(&r, p, k, &tc) : 0;
        for (int i = 0; i < n_chained; i++)
            if (tc.nodes[i]->op == GS_OP_ROPE)
                gs_be__cpu_rope_prepare(&r, tc.nodes[i]);
        if (n_chained > 1) {
            gs_cpu_pool_run(c->pool, task_token_chain, &tc, c->n_threads);
            k += (uint32_t)n_chained;
            continue;
        }
        gs_cpu_pool_run(c->pool, task, &r, chunks_for(g, n, c->n_threads));
        k++;
    }
    return GS_OK;
}

/* gs_be_parallel's task, through the pool's task signature. */
struct parallel_task {
    void (*fn)(void *arg, int chunk);
    void *arg;
};

static void task_parallel(void *arg, int chunk, int n_chunks, int ith)
{
    (void)n_chunks;
    (void)ith;
    const struct parallel_task *pt = arg;
    pt->fn(pt->arg, chunk);
}

static void cpu_parallel(struct gs_be *be, void (*fn)(void *arg, int chunk), void *arg,
                         int n_chunks)
{
    struct cpu_ctx *c = be->ctx;
    struct parallel_task pt = {fn, arg};
    gs_cpu_pool_run(c->pool, task_parallel, &pt, n_chunks);
}

const struct gs_be_ops gs_be_cpu_ops = {
    .api_version = GS_BE_API_VERSION,
    .name = "cpu",
    .open = cpu_open,
    .close = cpu_close,
    .supports = cpu_supports,
    .compile = cpu_compile,
    .run = cpu_run,
    .plan_free = cpu_plan_free,
    .sync = NULL,
    .parallel = cpu_parallel,
};

const char *gs_be_kernel_variant(const char *name)
{
    return name && !strcmp(name, "cpu") ? gs_cpu_isa_name(gs_cpu_isa_best()) : "reference";
}
