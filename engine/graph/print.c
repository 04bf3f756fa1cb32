/* engine/graph/print.c - text, DOT and JSON renderings of a graph. */
#include "engine/graph/internal.h"

#include <string.h>

/* Writes op parameters as "k=v ..." (empty for ops without any). */
static void params_str(const struct gs_node *n, char *buf, size_t len)
{
    buf[0] = '\0';
    switch (n->op) {
    case GS_OP_RMS_NORM:
    case GS_OP_RMS_NORM_MUL:
    case GS_OP_RMS_NORM_QUANT:
    case GS_OP_RMS_NORM_BACK:
        snprintf(buf, len, "eps=%g", (double)n->p.eps);
        break;
    case GS_OP_RMS_NORM_HEADS:
        snprintf(buf, len, "eps=%g head_dim=%d", (double)n->p.norm_heads.eps,
                 n->p.norm_heads.head_dim);
        break;
    case GS_OP_ROPE:
    case GS_OP_ROPE_BACK:
        snprintf(buf, len, "heads=%d head_dim=%d n_rot=%d mode=%s base=%g scale=%g",
                 n->p.rope.n_head, n->p.rope.head_dim, n->p.rope.n_rot,
                 n->p.rope.mode == GS_ROPE_NEOX ? "neox" : "normal", (double)n->p.rope.freq_base,
                 (double)n->p.rope.freq_scale);
        break;
    case GS_OP_KV_STORE:
        snprintf(buf, len, "layer=%d kv_heads=%d head_dim=%d", n->p.attn.layer, n->p.attn.n_head_kv,
                 n->p.attn.head_dim);
        break;
    case GS_OP_ATTN:
        snprintf(buf, len, "layer=%d heads=%d kv_heads=%d head_dim=%d scale=%g softcap=%g",
                 n->p.attn.layer, n->p.attn.n_head, n->p.attn.n_head_kv, n->p.attn.head_dim,
                 (double)n->p.attn.scale, (double)n->p.attn.softcap);
        if (n->p.attn.window > 0) {
            size_t used = strlen(buf);
            snprintf(buf + used, len - used, " window=%d", n->p.attn.window);
        }
        break;
    case GS_OP_ATTN_CAUSAL:
    case GS_OP_ATTN_CAUSAL_BACK_Q:
    case GS_OP_ATTN_CAUSAL_BACK_K:
    case GS_OP_ATTN_CAUSAL_BACK_V:
        snprintf(buf, len, "heads=%d kv_heads=%d head_dim=%d scale=%g", n->p.attn.n_head,
                 n->p.attn.n_head_kv, n->p.attn.head_dim, (double)n->p.attn.scale);
        break;
    case GS_OP_OUT:
        snprintf(buf, len, "slot=%d", n->p.out_slot);
        break;
    case GS_OP_SWIGLU:
    case GS_OP_SWIGLU_QUANT:
    case GS_OP_MATMUL_SWIGLU:
        if (n->p.glu_act == GS_GLU_GELU)
            snprintf(buf, len, "act=gelu");
        break;
    case GS_OP_SCALE:
        snprintf(buf, len, "scale=%g", (double)n->p.scale);
        break;
    case GS_OP_COLS:
        snprintf(buf, len, "off=%d", n->p.cols.off);
        break;
    case GS_OP_ALTUP_PREDICT:
        snprintf(buf, len, "streams=%d", n->p.altup.n_streams);
        break;
    case GS_OP_ALTUP_CORRECT:
        snprintf(buf, len, "streams=%d active=%d", n->p.altup.n_streams, n->p.altup.active);
        break;
    case GS_OP_GAUSS_TOPK:
        snprintf(buf, len, "k=%g", (double)n->p.topk_k);
        break;
    case GS_OP_SOFTCAP:
        snprintf(buf, len, "softcap=%g", (double)n->p.softcap);
        break;
    case GS_OP_SOFTMAX:
        snprintf(buf, len, "scale=%g softcap=%g", (double)n->p.softmax.scale,
                 (double)n->p.softmax.softcap);
        break;
    default:
        break;
    }
}

static void print_text(const struct gs_graph *g, FILE *f)
{
    char rows[32], params[160];
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const struct gs_node *n = &g->nodes[i];
        fprintf(f, "%%%u = %s", i, gs_op_info(n->op)->name);
        for (uint32_t j = 0; j < n->n_src; j++)
            fprintf(f, "%s%%%u", j ? ", " : "(", n->src[j]);
        fprintf(f, "%s %s", n->n_src ? ")" : "", gs_type_name(n->type));
        if (n->rows != GS_ROWS_NONE)
            fprintf(f, " [%lld x %s]", (long long)n->ne[0],
                    gs_graph__rows_str(n, rows, sizeof(rows)));
        params_str(n, params, sizeof(params));
        if (params[0])
            fprintf(f, " {%s}", params);
        if (n->name[0])
            fprintf(f, " %s", n->name);
        fputc('\n', f);
    }
}

/* Writes s as a JSON/DOT string body, escaping quotes, backslashes and controls. */
static void put_escaped(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
}

static void print_dot(const struct gs_graph *g, FILE *f)
{
    char rows[32];
    fprintf(f,
            "digraph graphserve {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\"];\n");
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const struct gs_node *n = &g->nodes[i];
        fprintf(f, "  n%u [label=\"%%%u %s\\n", i, i, gs_op_info(n->op)->name);
        put_escaped(f, n->name);
        fprintf(f, "\\n%s [%lld x %s]\"%s];\n", gs_type_name(n->type), (long long)n->ne[0],
                gs_graph__rows_str(n, rows, sizeof(rows)),
                n->op == GS_OP_WEIGHT ? ", style=filled, fillcolor=lightgrey" : "");
        for (uint32_t j = 0; j < n->n_src; j++)
            fprintf(f, "  n%u -> n%u;\n", n->src[j], i);
    }
    fprintf(f, "}\n");
}

static void print_json(const struct gs_graph *g, FILE *f)
{
    char rows[32], params[160];
    fprintf(f, "{\"n_nodes\": %u, \"nodes\": [", g->n_nodes);
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const struct gs_node *n = &g->nodes[i];
        fprintf(f,
                "%s\n  {\"id\": %u, \"op\": \"%s\", \"type\": \"%s\", \"ne0\": %lld, "
                "\"rows\": \"%s\", \"src\": [",
                i ? "," : "", i, gs_op_info(n->op)->name, gs_type_name(n->type),
                (long long)n->ne[0], gs_graph__rows_str(n, rows, sizeof(rows)));
        for (uint32_t j = 0; j < n->n_src; j++)
            fprintf(f, "%s%u", j ? ", " : "", n->src[j]);
        fprintf(f, "], \"name\": \"");
        put_escaped(f, n->name);
        params_str(n, params, sizeof(params));
        fprintf(f, "\", \"params\": \"%s\"}", params);
    }
    fprintf(f, "\n]}\n");
}

void gs_graph_print(const struct gs_graph *g, enum gs_graph_format fmt, FILE *f)
{
    switch (fmt) {
    case GS_GRAPH_TEXT:
        print_text(g, f);
        break;
    case GS_GRAPH_DOT:
        print_dot(g, f);
        break;
    case GS_GRAPH_JSON:
        print_json(g, f);
        break;
    }
}
