/*
 * tools/graph.c - `graphserve graph -m FILE [--passes none|all|NAME,...]
 * [--format text|dot|json] [--before] [--tokens N]`: builds a model's
 * forward-pass graph, rewrites it with the chosen passes and prints it; a
 * summary (node counts, planned scratch bytes) goes to stderr.
 */
#include "engine/backend.h"
#include "engine/compile.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "tools/internal.h"

#include <stdio.h>
#include <string.h>

static const char usage[] =
    "-m FILE [--passes none|all|NAME,...] [--format text|dot|json] [--before] [--tokens N]\n"
    "  -m FILE      GGUF model file\n"
    "  --passes     rewrite passes to run, in order (default all): dce, cse, rms_norm_mul,\n"
    "               swiglu, residual, rms_norm_quant, swiglu_quant, matmul_swiglu\n"
    "  --format     text (one node a line, default), dot (Graphviz) or json\n"
    "  --before     print the graph before the passes too (first)\n"
    "  --tokens N   shape bucket whose scratch plan to report (default 1 and 512)\n";

/* Parses "none", "all" or a comma list into out; returns the count or -1. */
static int parse_passes(const char *spec, const struct gs_pass **out, size_t cap)
{
    if (!strcmp(spec, "none"))
        return 0;
    if (!strcmp(spec, "all")) {
        for (size_t i = 0; i < gs_passes_all_len && i < cap; i++)
            out[i] = gs_passes_all[i];
        return (int)gs_passes_all_len;
    }
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", spec);
    int n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        const struct gs_pass *p = gs_pass_find(tok);
        if (!p) {
            fprintf(stderr, "graphserve graph: unknown pass '%s'\n", tok);
            return -1;
        }
        if ((size_t)n == cap)
            return -1;
        out[n++] = p;
    }
    return n;
}

static void report_plan(const struct gs_graph *g, uint32_t n_tokens)
{
    struct gs_plan *p;
    struct gs_err err = {0};
    struct gs_shape s = {.n_tokens = gs_plan_bucket(n_tokens)};
    if (gs_plan_layout(g, &s, &p, &err) != GS_OK) {
        fprintf(stderr, "graphserve graph: %s\n", err.msg);
        return;
    }
    fprintf(stderr,
            "plan for %u tokens: %u steps, scratch %llu bytes (one buffer per value: %llu)\n",
            s.n_tokens, p->n_order, (unsigned long long)p->scratch_bytes,
            (unsigned long long)p->naive_bytes);
    gs_plan_free(p);
}

int gs_cmd_graph(int argc, char **argv)
{
    const char *path = NULL, *passes = "all", *format = "text";
    bool before = false;
    int64_t n_tokens = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: graphserve graph %s", usage);
            return 0;
        } else if (!strcmp(a, "-m") && i + 1 < argc) {
            path = argv[++i];
        } else if (!strcmp(a, "--passes") && i + 1 < argc) {
            passes = argv[++i];
        } else if (!strcmp(a, "--format") && i + 1 < argc) {
            format = argv[++i];
        } else if (!strcmp(a, "--before")) {
            before = true;
        } else if (!strcmp(a, "--tokens") && i + 1 < argc) {
            if (!gs_cli_parse_i64("--tokens", argv[++i], 1, 1 << 20, &n_tokens))
                return 2;
        } else {
            return gs_cli_usage("graph", usage);
        }
    }
    if (!path)
        return gs_cli_usage("graph", usage);
    enum gs_graph_format fmt;
    if (!strcmp(format, "text"))
        fmt = GS_GRAPH_TEXT;
    else if (!strcmp(format, "dot"))
        fmt = GS_GRAPH_DOT;
    else if (!strcmp(format, "json"))
        fmt = GS_GRAPH_JSON;
    else
        return gs_cli_fail("graph", "--format: '%s' is not text, dot or json", format);
    const struct gs_pass *list[32];
    int n_passes = parse_passes(passes, list, GS_ARRAY_LEN(list));
    if (n_passes < 0)
        return 2;

    struct gs_err err = {0};
    struct gs_gguf *file = NULL;
    struct gs_model *m = NULL;
    int rc = 1;
    if (gs_gguf_open(path, &file, &err) != GS_OK || gs_model_load(file, &m, &err) != GS_OK) {
        gs_cli_fail("graph", "%s: %s", path, err.msg);
        goto out;
    }
    uint32_t n_before = m->graph->n_nodes;
    if (before)
        gs_graph_print(m->graph, fmt, stdout);
    if (gs_graph_run_passes(m->graph, list, (size_t)n_passes, &err) != GS_OK) {
        gs_cli_fail("graph", "%s", err.msg);
        goto out;
    }
    gs_graph_print(m->graph, fmt, stdout);
    fprintf(stderr, "%s: %s, %u layers: %u nodes, %u after %d passes\n", path, m->hp.arch,
            m->hp.n_layer, n_before, m->graph->n_nodes, n_passes);
    if (n_tokens)
        report_plan(m->graph, (uint32_t)n_tokens);
    else {
        report_plan(m->graph, 1);
        report_plan(m->graph, 512);
    }
    rc = 0;
out:
    gs_model_free(m);
    gs_gguf_close(file);
    return rc;
}
