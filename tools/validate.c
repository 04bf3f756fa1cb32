/*
 * tools/validate.c - `graphserve validate`: how closely a backend's
 * logits agree with llama.cpp's goldens, or two logit dumps with each other.
 *
 *   graphserve validate -m MODEL --golden FILE [--golden FILE ...] [options]
 *     Runs each golden's prompt and completion tokens teacher-forced on the
 *     backend (the prompt as one step, then one token per step, as llama.cpp
 *     produced the golden) and compares every position: full rows for the
 *     prompt, the recorded top-5 and margins for the decode steps. With
 *     --against REF the same tokens also run on backend REF, and every
 *     position's full row is compared between the two backends instead.
 *   graphserve validate --a FILE --b FILE [options]
 *     Compares two logit matrices: goldens (their prompt_logits) or dumps
 *     {"logits": [[...], ...]}; --a is judged against --b.
 *
 * Exit status: 0 when every comparison passes, 1 when one fails or cannot
 * run, 2 on a usage error.
 */
#include "engine/validate.h"
#include "engine/backend.h"
#include "engine/runner.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "kvcache/kvcache.h"
#include "tools/internal.h"
#include "tools/validate_server.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

struct opts {
    const char *model;
    const char *backend;
    const char *against; /* reference backend, or NULL: the golden's logits */
    const char *kv;
    struct gs_cli_list goldens;
    const char *a, *b;
    bool passes;
    bool json;
    bool rows;
    unsigned print_flags;
    struct gs_val_thresholds thr;
    struct gs_cli_list prompts; /* --server mode */
    struct gs_validate_server_opts server;
};

#define O(f) offsetof(struct opts, f)
#define THR(f) offsetof(struct opts, thr) + offsetof(struct gs_val_thresholds, f)
#define SRV(f) offsetof(struct opts, server) + offsetof(struct gs_validate_server_opts, f)
/* The thresholds have no default text: they keep engine/validate's defaults
 * (gs_val_thresholds_init), which --help shows. */
/* clang-format off */
static const struct gs_cfg_opt opt_rows[] = {
    {"model", 'm', GS_CFG_STR, O(model), NULL, NULL, 0, 0, NULL, GS_CFG_F_PATH, NULL,
     "GGUF file, or a folder holding each golden's \"model\"."},
    {"golden", 0, GS_CFG_LIST, O(goldens), NULL, NULL, 0, 0, NULL, GS_CFG_F_PATH, NULL,
     "A golden completion (../shared/golden/completions/*.json)."},
    GS_TOOL_OPT_BACKEND(struct opts, backend, "ref"),
    {"against", 0, GS_CFG_STR, O(against), NULL, NULL, 0, 0, NULL, 0, NULL,
     "Compare with this backend on the golden's tokens instead of with the golden's logits "
     "(e.g. --backend cpu --against ref)."},
    {"kv", 0, GS_CFG_STR, O(kv), NULL, NULL, 0, 0, NULL, 0, NULL,
     "KV cache type, f16, f32 or q8_0; unset: the golden's settings, else f16."},
    {"passes", 0, GS_CFG_BOOL, O(passes), NULL, "true", 0, 0, NULL, 0, NULL,
     "Run the rewrite passes; --no-passes runs the graph as built."},
    {"a", 0, GS_CFG_STR, O(a), NULL, NULL, 0, 0, NULL, GS_CFG_F_PATH, NULL,
     "With --b: compare two logit matrices (goldens or {\"logits\": [...]})."},
    {"b", 0, GS_CFG_STR, O(b), NULL, NULL, 0, 0, NULL, GS_CFG_F_PATH, NULL,
     "The second matrix of --a."},
    {"min-pearson", 0, GS_CFG_FLOAT, THR(min_pearson), NULL, NULL, -1, 1, NULL, 0, NULL,
     "Smallest Pearson of any full row."},
    {"min-top1", 0, GS_CFG_FLOAT, THR(min_top1_rate), NULL, NULL, 0, 1, NULL, 0, NULL,
     "Smallest top-1 agreement rate."},
    {"top1-margin", 0, GS_CFG_FLOAT, THR(top1_margin), NULL, NULL, -1e9, 1e9, NULL, 0, NULL,
     "Rows whose reference margin is at least this must agree at top-1; negative: off."},
    {"max-kl", 0, GS_CFG_FLOAT, THR(max_mean_kl), NULL, NULL, -1e9, 1e9, NULL, 0, "nats",
     "Largest mean KL; negative: off."},
    {"max-abs-err", 0, GS_CFG_FLOAT, THR(max_abs_err), NULL, NULL, -1e9, 1e9, NULL, 0, NULL,
     "Largest abs error of a logit; negative: off."},
    {"rows", 0, GS_CFG_BOOL, O(rows), NULL, NULL, 0, 0, NULL, 0, NULL,
     "Print every position, not only the summary."},
    {"json", 0, GS_CFG_BOOL, O(json), NULL, NULL, 0, 0, NULL, 0, NULL,
     "Print one JSON object instead of text (--server: one per prompt)."},
    {"server", 0, GS_CFG_STR, SRV(server), NULL, NULL, 0, 0, NULL, 0, NULL,
     "Validate a running daemon, http://HOST[:PORT], instead: its answers to a prompt set, "
     "each with validation on."},
    {"api-key", 0, GS_CFG_STR, SRV(api_key), NULL, NULL, 0, 0, NULL, 0, NULL,
     "--server: Bearer key, when the daemon has keys."},
    {"prompt", 'p', GS_CFG_LIST, O(prompts), NULL, NULL, 0, 0, NULL, 0, NULL,
     "--server: a prompt; without -p or --prompts-file four short built-in prompts run."},
    {"prompts-file", 0, GS_CFG_STR, SRV(prompts_file), NULL, NULL, 0, 0, NULL, GS_CFG_F_PATH,
     NULL, "--server: one prompt per line (blank lines skipped)."},
    {"max-tokens", 0, GS_CFG_INT, SRV(max_tokens), NULL, "32", 1, 1 << 20, NULL, 0, NULL,
     "--server: tokens per answer."},
    {"timeout-s", 0, GS_CFG_INT, SRV(timeout_s), NULL, "120", 1, 86400, NULL, 0, "s",
     "--server: time for each request."},
};
/* clang-format on */
#undef O
#undef THR
#undef SRV

const struct gs_cli_spec gs_validate_spec = {
    .cmd = "validate",
    .synopsis = "-m MODEL --golden FILE [--golden FILE ...] [options]\n"
                "       graphserve validate --a FILE --b FILE [options]\n"
                "       graphserve validate --server URL [--api-key K]"
                " [--prompts-file F | -p P ...]",
    .opts = opt_rows, .n_opts = GS_ARRAY_LEN(opt_rows),
};

/* ---- evaluation ---------------------------------------------------------------- */

/* Everything one teacher-forced evaluation holds; zeroed = nothing held. */
struct eval {
    struct gs_gguf *file;
    struct gs_model *model;
    struct gs_runner *run;
    struct gs_kv_pool *pool;
    struct gs_kv_seq seq;
    int32_t *pos;
    uint32_t *seq_idx;
    uint32_t *rows;
};

static void eval_close(struct eval *e)
{
    gs_runner_free(e->run);
    if (e->pool) {
        gs_kv_seq_release(e->pool, &e->seq);
        gs_kv_pool_free(e->pool);
    }
    gs_model_free(e->model);
    gs_gguf_close(e->file);
    gs_free(e->pos);
    gs_free(e->seq_idx);
    gs_free(e->rows);
}

static enum gs_status eval_open(struct eval *e, const struct opts *o, const char *backend,
                                const char *model_path, enum gs_type kv_type, uint32_t n_tokens,
                                struct gs_err *err)
{
    enum gs_status rc;
    if ((rc = gs_gguf_open(model_path, &e->file, err)) != GS_OK ||
        (rc = gs_model_load(e->file, &e->model, err)) != GS_OK) {
        gs_err_prefix(err, "%s", model_path);
        return rc;
    }
    const struct gs_runner_cfg rc_cfg = {.backend = backend, .no_passes = !o->passes};
    if ((rc = gs_runner_new(e->model->graph, &rc_cfg, &e->run, err)) != GS_OK)
        return rc;
    struct gs_kv_pool_cfg pc = {
        .n_layer = gs_model_kv_layers(e->model),
        .kv_dim = gs_model_kv_dim(e->model),
        .type = kv_type,
        .page_tokens = GS_KV_DEFAULT_PAGE_TOKENS,
        .n_pages = n_tokens / GS_KV_DEFAULT_PAGE_TOKENS + 1,
    };
    if ((rc = gs_kv_pool_new(&pc, &e->pool, err)) != GS_OK)
        return rc;
    gs_kv_seq_init(&e->seq);
    if ((rc = gs_kv_seq_reserve(e->pool, &e->seq, n_tokens, err)) != GS_OK)
        return rc;
    e->pos = gs_alloc_array(n_tokens, sizeof(*e->pos));
    e->seq_idx = gs_calloc(n_tokens, sizeof(*e->seq_idx));
    e->rows = gs_alloc_array(n_tokens, sizeof(*e->rows));
    if (!e->pos || !e->seq_idx || !e->rows)
        return gs_err_set(err, GS_NOMEM, "step arrays: out of memory");
    return GS_OK;
}

/* Runs tokens[0..n) at positions first.. as one step; logits of every token
 * (all_rows) or of the last one land in out. */
static enum gs_status eval_step(struct eval *e, const int32_t *tokens, uint32_t n, uint32_t first,
                                bool all_rows, float *out, struct gs_err *err)
{
    for (uint32_t i = 0; i < n; i++) {
        e->pos[i] = (int32_t)(first + i);
        e->rows[i] = i;
    }
    struct gs_kv_view kv = gs_kv_pool_view(e->pool);
    struct gs_seq_pages sp = {e->seq.pages, e->seq.n_pages};
    struct gs_step_io io = {
        .n_tokens = n,
        .tokens = tokens,
        .pos = e->pos,
        .seq = e->seq_idx,
        .n_seqs = 1,
        .seqs = &sp,
        .kv = &kv,
        .n_outputs = all_rows ? n : 1,
        .out_rows = all_rows ? e->rows : &e->rows[n - 1],
        .logits = out,
    };
    return gs_runner_step(e->run, &io, err);
}

/*
 * Evaluates g teacher-forced on the backend: the prompt as one step, then
 * each completion token but the last as its own step. *served is
 * [gs_val_golden_n_eval(g)][n_vocab], caller frees with gs_free.
 */
static enum gs_status eval_golden(const struct opts *o, const char *backend,
                                  const struct gs_val_golden *g, const char *model_path,
                                  enum gs_type kv_type, float **served, struct gs_err *err)
{
    struct eval e;
    memset(&e, 0, sizeof(e));
    int32_t n_eval = gs_val_golden_n_eval(g);
    float *out = NULL;
    enum gs_status rc = eval_open(&e, o, backend, model_path, kv_type, (uint32_t)n_eval, err);
    if (rc != GS_OK)
        goto out;
    if (e.model->hp.n_vocab != (uint32_t)g->n_vocab) {
        rc = gs_err_set(err, GS_FORMAT, "%s has %u tokens, the golden %d: wrong model?", model_path,
                        e.model->hp.n_vocab, (int)g->n_vocab);
        goto out;
    }
    size_t nv = (size_t)g->n_vocab;
    out = gs_alloc_array((size_t)n_eval * nv, sizeof(float));
    if (!out) {
        rc = gs_err_set(err, GS_NOMEM, "logits for %d positions: out of memory", (int)n_eval);
        goto out;
    }
    rc = eval_step(&e, g->prompt_tokens, (uint32_t)g->n_prompt, 0, true, out, err);
    for (int32_t i = g->n_prompt; i < n_eval && rc == GS_OK; i++) {
        int32_t tok = gs_val_golden_token(g, i);
        rc = eval_step(&e, &tok, 1, (uint32_t)i, false, out + (size_t)i * nv, err);
    }
out:
    eval_close(&e);
    if (rc != GS_OK) {
        gs_free(out);
        return rc;
    }
    *served = out;
    return GS_OK;
}

/* The model for golden g: -m itself, or g's "model" inside the -m folder. */
static void model_path_for(const struct opts *o, const struct gs_val_golden *g, char *buf,
                           size_t cap)
{
    struct stat st;
    if (stat(o->model, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(buf, cap, "%s/%s", o->model, g->model);
    else
        snprintf(buf, cap, "%s", o->model);
}

/* One of the tools' KV types (tools/options.c); *name is the table's (static) string. */
static bool kv_type_parse(const char *s, enum gs_type *t, const char **name)
{
    for (size_t i = 0; gs_tool_kv_type_names[i]; i++)
        if (!strcmp(s, gs_tool_kv_type_names[i])) {
            *t = gs_tool_kv_types[i];
            *name = gs_tool_kv_type_names[i];
            return true;
        }
    return false;
}

/* ---- output -------------------------------------------------------------------- */

struct result {
    const char *golden; /* the argument, borrowed */
    char model[4096];
    const char *kv;
    struct gs_val_report *report; /* NULL when err is set */
    struct gs_err err;
};

static json_t *result_json(const struct opts *o, const struct result *r)
{
    json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:s, s:b}", "golden", r->golden, "model", r->model,
                          "backend", o->backend, "reference", o->against ? o->against : "golden",
                          "kv", r->kv ? r->kv : "", "passes", o->passes);
    if (!j)
        return NULL;
    if (r->report)
        json_object_set_new(j, "report", gs_val_report_json(r->report, o->print_flags));
    else
        json_object_set_new(j, "error", json_string(r->err.msg));
    return j;
}

static void result_print(const struct opts *o, const struct result *r)
{
    printf("== %s\n   model %s, backend %s against %s, kv %s, passes %s\n", r->golden, r->model,
           o->backend, o->against ? o->against : "the golden", r->kv ? r->kv : "-",
           o->passes ? "on" : "off");
    if (r->report)
        gs_val_report_print(r->report, stdout, o->print_flags);
    else
        printf("error          %s\nverdict        FAIL\n", r->err.msg);
}

/* ---- the two modes -------------------------------------------------------------- */

static void run_golden(const struct opts *o, const char *path, struct result *r)
{
    struct gs_val_golden *g = NULL;
    float *served = NULL, *ref = NULL;
    enum gs_type kv_type = GS_TYPE_F16;
    r->golden = path;
    snprintf(r->model, sizeof(r->model), "%s", o->model);
    if (gs_val_golden_load(path, &g, &r->err) != GS_OK)
        return;
    model_path_for(o, g, r->model, sizeof(r->model));
    const char *kv = o->kv ? o->kv : g->kv_cache_type[0] ? g->kv_cache_type : "f16";
    if (!kv_type_parse(kv, &kv_type, &r->kv)) { /* r->kv static: outlives g */
        gs_err_set(&r->err, GS_UNSUPPORTED, "kv cache type '%s' (want f16, f32 or q8_0)", kv);
        goto out;
    }
    if (eval_golden(o, o->backend, g, r->model, kv_type, &served, &r->err) != GS_OK)
        goto out;
    if (!o->against) {
        gs_val_golden_compare(g, served, gs_val_golden_n_eval(g), &o->thr, &r->report, &r->err);
        goto out;
    }
    if (eval_golden(o, o->against, g, r->model, kv_type, &ref, &r->err) != GS_OK) {
        gs_err_prefix(&r->err, "backend %s", o->against);
        goto out;
    }
    gs_val_compare(served, ref, NULL, gs_val_golden_n_eval(g), g->n_vocab, &o->thr, &r->report,
                   &r->err);
out:
    gs_free(served);
    gs_free(ref);
    gs_val_golden_free(g);
}

/* A logit matrix from a golden (prompt_logits) or a dump {"logits": [[...]]}. */
static enum gs_status load_matrix(const char *path, float **out, int32_t *n_rows, int32_t *n_vocab,
                                  struct gs_err *err)
{
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_ALLOW_NUL, &jerr);
    if (!root)
        return gs_err_set(err, GS_FORMAT, "%s: line %d: %s", path, jerr.line, jerr.text);
    enum gs_status rc = GS_OK;
    if (json_object_get(root, "prompt_logits")) {
        json_decref(root);
        struct gs_val_golden *g;
        if ((rc = gs_val_golden_load(path, &g, err)) != GS_OK)
            return rc;
        *n_rows = g->n_prompt;
        *n_vocab = g->n_vocab;
        *out = g->prompt_logits;
        g->prompt_logits = NULL;
        gs_val_golden_free(g);
        return GS_OK;
    }
    json_t *m = json_object_get(root, "logits");
    json_t *row0 = json_array_get(m, 0);
    size_t rows = json_array_size(m), cols = json_array_size(row0);
    if (!json_is_array(m) || rows == 0 || cols == 0 || rows > INT32_MAX || cols > INT32_MAX) {
        rc = gs_err_set(err, GS_FORMAT, "%s: logits: expected a non-empty array of rows", path);
        goto out;
    }
    float *x = gs_alloc_array(rows * cols, sizeof(float));
    if (!x) {
        rc = gs_err_set(err, GS_NOMEM, "%s: out of memory", path);
        goto out;
    }
    for (size_t i = 0; i < rows && rc == GS_OK; i++) {
        json_t *row = json_array_get(m, i);
        if (!json_is_array(row) || json_array_size(row) != cols) {
            rc = gs_err_set(err, GS_FORMAT, "%s: logits[%zu]: expected %zu numbers", path, i, cols);
            break;
        }
        for (size_t k = 0; k < cols; k++) {
            json_t *v = json_array_get(row, k);
            if (!json_is_number(v)) {
                rc = gs_err_set(err, GS_FORMAT, "%s: logits[%zu][%zu]: expected a number", path, i,
                                k);
                break;
            }
            x[i * cols + k] = (float)json_number_value(v);
        }
    }
    if (rc != GS_OK) {
        gs_free(x);
        goto out;
    }
    *out = x;
    *n_rows = (int32_t)rows;
    *n_vocab = (int32_t)cols;
out:
    json_decref(root);
    return rc;
}

static void run_pair(const struct opts *o, struct result *r)
{
    float *a = NULL, *b = NULL;
    int32_t na, nb, va, vb;
    r->golden = o->a;
    snprintf(r->model, sizeof(r->model), "%s", o->b);
    if (load_matrix(o->a, &a, &na, &va, &r->err) != GS_OK ||
        load_matrix(o->b, &b, &nb, &vb, &r->err) != GS_OK)
        goto out;
    if (na != nb || va != vb) {
        gs_err_set(&r->err, GS_FORMAT, "shapes differ: %s is [%d][%d], %s is [%d][%d]", o->a,
                   (int)na, (int)va, o->b, (int)nb, (int)vb);
        goto out;
    }
    gs_val_compare(a, b, NULL, na, va, &o->thr, &r->report, &r->err);
out:
    gs_free(a);
    gs_free(b);
}

/* ---- command line ---------------------------------------------------------------- */

/* The modes' rules: which options go together. */
static int check_modes(const struct opts *o, const struct gs_cli_args *args)
{
    static const char cmd[] = "validate";
    if (o->server.server) {
        static const char *const local[] = {"model", "golden", "a", "b", "against", "kv",
                                            "passes", "rows", "min-pearson", "min-top1",
                                            "top1-margin", "max-kl", "max-abs-err", "backend"};
        for (size_t i = 0; i < GS_ARRAY_LEN(local); i++)
            if (gs_cli_given(&gs_validate_spec, args, local[i])) {
                gs_cli_fail(cmd, "--%s: not with --server (the daemon's settings apply)",
                            local[i]);
                return 2;
            }
        return -1;
    }
    static const char *const remote[] = {"api-key", "prompt", "prompts-file", "max-tokens",
                                         "timeout-s"};
    for (size_t i = 0; i < GS_ARRAY_LEN(remote); i++)
        if (gs_cli_given(&gs_validate_spec, args, remote[i])) {
            gs_cli_fail(cmd, "--%s: only with --server", remote[i]);
            return 2;
        }
    bool pair = o->a || o->b;
    if (pair && (!o->a || !o->b)) {
        gs_cli_fail(cmd, "--a and --b come together");
        return 2;
    }
    if (pair && (o->goldens.n || o->against)) {
        gs_cli_fail(cmd, "--a/--b: not with --%s", o->goldens.n ? "golden" : "against");
        return 2;
    }
    if (!pair && (!o->model || !o->goldens.n)) {
        gs_cli_fail(cmd, "needs -m MODEL and --golden FILE, --a and --b, or --server URL");
        return 2;
    }
    enum gs_type kv_type;
    const char *kv_name;
    if (o->kv && !kv_type_parse(o->kv, &kv_type, &kv_name)) {
        gs_cli_fail(cmd, "--kv: '%s' is not one of f16, f32, q8_0", o->kv);
        return 2;
    }
    if (!gs_be_find(o->backend) || (o->against && !gs_be_find(o->against))) {
        bool bad_ref = gs_be_find(o->backend) != NULL;
        gs_cli_fail(cmd, "--%s: unknown backend '%s'", bad_ref ? "against" : "backend",
                    bad_ref ? o->against : o->backend);
        return 2;
    }
    return -1;
}

int gs_cmd_validate(int argc, char **argv)
{
    struct opts o = {0};
    gs_val_thresholds_init(&o.thr);
    struct gs_cli_args args;
    int rc = gs_cli_begin(&gs_validate_spec, &o, argc, argv, &args);
    if (rc < 0)
        rc = check_modes(&o, &args);
    if (rc >= 0)
        return rc;
    if (o.server.server) {
        o.server.prompts = &o.prompts;
        o.server.json = o.json;
        return gs_validate_server(&o.server);
    }
    if (o.rows)
        o.print_flags |= GS_VAL_PRINT_ROWS;
    int n = o.a ? 1 : (int)o.goldens.n, n_pass = 0;
    json_t *jall = o.json ? json_array() : NULL;
    for (int i = 0; i < n; i++) {
        struct result *r = gs_calloc(1, sizeof(*r));
        if (!r) {
            rc = gs_cli_fail("validate", "out of memory");
            break;
        }
        if (o.a)
            run_pair(&o, r);
        else
            run_golden(&o, o.goldens.v[i], r);
        n_pass += r->report && r->report->pass;
        if (jall)
            json_array_append_new(jall, result_json(&o, r));
        else
            result_print(&o, r);
        gs_val_report_free(r->report);
        gs_free(r);
    }
    if (jall) {
        json_t *root = json_pack("{s:b, s:i, s:i, s:o}", "pass", n_pass == n, "n_pass", n_pass, "n",
                                 n, "results", jall);
        if (root)
            json_dumpf(root, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(9));
        printf("\n");
        json_decref(root);
    } else if (n > 1) {
        printf("validate: %d/%d pass\n", n_pass, n);
    }
    if (rc > 0)
        return rc;
    return n_pass == n ? 0 : 1;
}
