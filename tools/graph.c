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

struct opts {
    const char *path, *passes;
    int format; /* enum gs_graph_format: the choices are in its order */
    bool before;
    int64_t n_tokens;
};

static const char *const format_names[] = {"text", "dot", "json", NULL};

#define O(f) offsetof(struct opts, f)
/* clang-format off */
static const struct gs_cfg_opt opt_rows[] = {
    GS_TOOL_OPT_MODEL(struct opts, path),
    {"passes", 0, GS_CFG_STR, O(passes), NULL, "all", 0, 0, NULL, 0, NULL,
     "Rewrite passes to run, in order: none, all, or names separated by commas (an unknown "
     "name is refused with the list of passes)."},
    {"format", 0, GS_CFG_ENUM, O(format), NULL, "text", 0, 0, format_names, 0, NULL,
     "text (one node a line), dot (Graphviz) or json."},
    {"before", 0, GS_CFG_BOOL, O(before), NULL, NULL, 0, 0, NULL, 0, NULL,
     "Print the graph before the passes too (first)."},
    {"tokens", 0, GS_CFG_INT, O(n_tokens), NULL, "0", 0, 1 << 20, NULL, 0, NULL,
     "Shape bucket whose scratch plan to report; 0: 1 and 512."},
};
/* clang-format on */
#undef O

const struct gs_cli_spec gs_graph_spec = {
    .cmd = "graph", .synopsis = "-m FILE [--passes none|all|NAME,...] [--format text|dot|json]",
    .opts = opt_rows, .n_opts = GS_ARRAY_LEN(opt_rows),
};

/* Parses "none", "all" or a comma list into out; returns the count or -1. */
static int parse_passes(const char *names, const struct gs_pass **out, size_t cap)
{
    if (!strcmp(names, "none"))
        return 0;
    if (!strcmp(names, "all")) {
        for (size_t i = 0; i < gs_passes_all_len && i < cap; i++)
            out[i] = gs_passes_all[i];
        return (int)gs_passes_all_len;
    }
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", names);
    int n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        const struct gs_pass *p = gs_pass_find(tok);
        if (!p) {
            fprintf(stderr, "graphserve graph: --passes: unknown pass '%s'; the passes are", tok);
            for (size_t i = 0; i < gs_passes_all_len; i++)
                fprintf(stderr, "%s %s", i ? "," : "", gs_passes_all[i]->name);
            fputc('\n', stderr);
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
    struct opts o = {0};
    struct gs_cli_args args;
    int prc = gs_cli_begin(&gs_graph_spec, &o, argc, argv, &args);
    if (prc >= 0)
        return prc;
    const char *path = o.path;
    enum gs_graph_format fmt = (enum gs_graph_format)o.format;
    bool before = o.before;
    int64_t n_tokens = o.n_tokens;
    const struct gs_pass *list[32];
    int n_passes = parse_passes(o.passes, list, GS_ARRAY_LEN(list));
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
