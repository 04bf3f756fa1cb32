/*
 * server/cmd/run.c - `graphserve run -m FILE (-p PROMPT | --tokens 1,2,3)
 * [-n N] [--temp T] [--top-k K] [--top-p P] [--seed S] [--backend ref]
 * [--kv-type f32|f16] [--page-tokens N] [--batch N] [--json]`: one sequence,
 * evaluated step by step on a backend over the paged KV cache, text streamed
 * to stdout as it is produced. --json prints prompt and output ids, the
 * finish reason, the planned scratch bytes and timings instead.
 */
#include "engine/backend.h"
#include "engine/compile.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/sample.h"
#include "engine/tok.h"
#include "kvcache/kvcache.h"
#include "server/cli.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "-m FILE (-p PROMPT | --tokens ID,ID,...) [options]\n"
    "  -m FILE            GGUF model file\n"
    "  -p PROMPT          text to continue (BOS added as the model asks)\n"
    "  --tokens IDS       prompt as comma-separated token ids instead of text\n"
    "  -n N               tokens to generate (default 64)\n"
    "  --temp T           temperature (default 0: greedy)\n"
    "  --top-k K, --top-p P, --seed S   sampling (defaults off, off, 0)\n"
    "  --backend NAME     backend (default ref)\n"
    "  --kv-type f32|f16  KV cache element type (default f16)\n"
    "  --page-tokens N    tokens per KV page (default 16)\n"
    "  --batch N          most prompt tokens per step (default 512)\n"
    "  --json             print ids, finish reason and timings as JSON\n";

struct opts {
    const char *path, *prompt, *tokens, *backend;
    int64_t n_predict, top_k, seed, page_tokens, batch;
    double temp, top_p;
    enum gs_type kv_type;
    bool json;
};

/* Everything one run holds. */
struct runner {
    struct gs_gguf *file;
    struct gs_model *model;
    struct gs_tok *tok; /* NULL when the file has no usable tokenizer */
    struct gs_be be;
    bool be_open;
    struct gs_plan_cache cache;
    bool cache_open;
    struct gs_kv_pool *pool;
    struct gs_kv_seq seq;
    struct gs_kv_view kv;
    uint32_t n_past;
    float *logits;     /* [n_vocab] */
    int32_t *pos;      /* [batch] */
    uint32_t *seq_ids; /* [batch] zeros */
};

static bool parse_args(int argc, char **argv, struct opts *o)
{
    *o = (struct opts){.backend = "ref",
                       .n_predict = 64,
                       .page_tokens = 16,
                       .batch = 512,
                       .top_p = 1.0,
                       .kv_type = GS_TYPE_F16};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (!strcmp(a, "--json")) {
            o->json = true;
            continue;
        }
        if (!v)
            return false;
        i++;
        if (!strcmp(a, "-m"))
            o->path = v;
        else if (!strcmp(a, "-p"))
            o->prompt = v;
        else if (!strcmp(a, "--tokens"))
            o->tokens = v;
        else if (!strcmp(a, "--backend"))
            o->backend = v;
        else if (!strcmp(a, "-n"))
            ok = gs_cli_parse_i64("-n", v, 0, 1 << 20, &o->n_predict);
        else if (!strcmp(a, "--temp"))
            ok = gs_cli_parse_f64("--temp", v, 0, 100, &o->temp);
        else if (!strcmp(a, "--top-p"))
            ok = gs_cli_parse_f64("--top-p", v, 0, 1, &o->top_p) && o->top_p > 0;
        else if (!strcmp(a, "--top-k"))
            ok = gs_cli_parse_i64("--top-k", v, 0, INT32_MAX, &o->top_k);
        else if (!strcmp(a, "--seed"))
            ok = gs_cli_parse_i64("--seed", v, 0, INT64_MAX, &o->seed);
        else if (!strcmp(a, "--page-tokens"))
            ok = gs_cli_parse_i64("--page-tokens", v, 1, 4096, &o->page_tokens);
        else if (!strcmp(a, "--batch"))
            ok = gs_cli_parse_i64("--batch", v, 1, 1 << 16, &o->batch);
        else if (!strcmp(a, "--kv-type")) {
            if (!strcmp(v, "f32"))
                o->kv_type = GS_TYPE_F32;
            else if (!strcmp(v, "f16"))
                o->kv_type = GS_TYPE_F16;
            else
                ok = false;
        } else
            ok = false;
        if (!ok)
            return false;
    }
    return o->path && (!o->prompt != !o->tokens);
}

/* Parses "1,2,3" into a gs_malloc'ed array. */
static bool parse_ids(const char *s, int32_t **ids, size_t *n)
{
    size_t cap = 1;
    for (const char *p = s; *p; p++)
        cap += *p == ',';
    *ids = gs_calloc(cap, sizeof(**ids));
    *n = 0;
    if (!*ids)
        return false;
    char *end;
    for (const char *p = s;; p = end + 1) {
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > INT32_MAX || (*end != ',' && *end != '\0'))
            return false;
        (*ids)[(*n)++] = (int32_t)v;
        if (*end == '\0')
            return true;
    }
}

static void runner_close(struct runner *r)
{
    if (r->cache_open)
        gs_plan_cache_deinit(&r->cache);
    if (r->pool) {
        gs_kv_seq_release(r->pool, &r->seq);
        gs_kv_pool_free(r->pool);
    }
    if (r->be_open)
        gs_be_deinit(&r->be);
    gs_tok_free(r->tok);
    gs_model_free(r->model);
    gs_gguf_close(r->file);
    gs_free(r->logits);
    gs_free(r->pos);
    gs_free(r->seq_ids);
}

static enum gs_status runner_open(struct runner *r, const struct opts *o, uint32_t n_ctx,
                                  struct gs_err *err)
{
    enum gs_status st;
    if ((st = gs_gguf_open(o->path, &r->file, err)) ||
        (st = gs_model_load(r->file, &r->model, err)))
        return st;
    struct gs_err tok_err = {0};
    if (gs_tok_new(r->file, &r->tok, &tok_err) != GS_OK)
        r->tok = NULL;
    if (!r->tok && o->prompt)
        return gs_err_set(err, GS_UNSUPPORTED, "no tokenizer (%s): use --tokens", tok_err.msg);
    if ((st = gs_be_init(&r->be, o->backend, NULL, err)))
        return st;
    r->be_open = true;
    const struct gs_pass *passes[16];
    size_t n_passes =
        gs_be_select_passes(&r->be, gs_passes_all, gs_passes_all_len, passes, GS_ARRAY_LEN(passes));
    if ((st = gs_graph_run_passes(r->model->graph, passes, n_passes, err)))
        return st;
    gs_plan_cache_init(&r->cache, &r->be, r->model->graph);
    r->cache_open = true;
    struct gs_kv_pool_cfg pc = {
        .n_layer = r->model->hp.n_layer,
        .kv_dim = gs_model_kv_dim(r->model),
        .elem_bytes = o->kv_type == GS_TYPE_F16 ? 2 : 4,
        .page_tokens = (uint32_t)o->page_tokens,
        .n_pages = (uint32_t)(n_ctx / o->page_tokens + 1),
    };
    if ((st = gs_kv_pool_new(&pc, &r->pool, err)))
        return st;
    gs_kv_seq_init(&r->seq);
    struct gs_kv_layout l = gs_kv_pool_layout(r->pool);
    r->kv = (struct gs_kv_view){.base = l.base,
                                .type = o->kv_type,
                                .n_pages = l.n_pages,
                                .page_tokens = l.page_tokens,
                                .n_layer = l.n_layer,
                                .kv_dim = l.kv_dim,
                                .page_bytes = l.page_bytes};
    r->logits = gs_calloc(r->model->hp.n_vocab, sizeof(float));
    r->pos = gs_calloc((size_t)o->batch, sizeof(*r->pos));
    r->seq_ids = gs_calloc((size_t)o->batch, sizeof(*r->seq_ids));
    if (!r->logits || !r->pos || !r->seq_ids)
        return gs_err_set(err, GS_NOMEM, "run: out of memory");
    return GS_OK;
}

/* Appends n tokens as one step; the last one's logits land in r->logits when want_logits. */
static enum gs_status runner_step(struct runner *r, const int32_t *tokens, uint32_t n,
                                  bool want_logits, struct gs_err *err)
{
    enum gs_status st = gs_kv_seq_reserve(r->pool, &r->seq, r->n_past + n, err);
    if (st)
        return st;
    for (uint32_t i = 0; i < n; i++)
        r->pos[i] = (int32_t)(r->n_past + i);
    uint32_t last = n - 1;
    struct gs_seq_pages sp = {r->seq.pages, r->seq.n_pages};
    struct gs_step_io io = {.n_tokens = n,
                            .tokens = tokens,
                            .pos = r->pos,
                            .seq = r->seq_ids,
                            .n_seqs = 1,
                            .seqs = &sp,
                            .kv = &r->kv,
                            .n_outputs = want_logits ? 1 : 0,
                            .out_rows = &last,
                            .logits = r->logits};
    struct gs_plan *plan;
    if ((st = gs_plan_cache_get(&r->cache, n, &plan, err)) ||
        (st = gs_be_run(&r->be, plan, &io, err)))
        return st;
    r->n_past += n;
    return GS_OK;
}

static bool is_eog(const struct runner *r, int32_t id)
{
    return r->tok ? gs_tok_is_eog(r->tok, id) : id == r->model->hp.eos_id;
}

static void print_json(const int32_t *prompt, size_t n_prompt, const int32_t *out, size_t n_out,
                       const char *text, size_t text_len, const char *finish, double prompt_ms,
                       double gen_ms, uint64_t scratch_bytes)
{
    json_t *jp = json_array(), *jo = json_array();
    for (size_t i = 0; i < n_prompt; i++)
        json_array_append_new(jp, json_integer(prompt[i]));
    for (size_t i = 0; i < n_out; i++)
        json_array_append_new(jo, json_integer(out[i]));
    double per_token = n_out ? gen_ms / (double)n_out : 0;
    json_t *j = json_pack(
        "{s:o, s:o, s:s#, s:s, s:I, s:{s:f, s:f, s:f, s:f}}", "prompt_tokens", jp, "output_tokens",
        jo, "text", text ? text : "", (int)text_len, "finish_reason", finish, "scratch_bytes",
        (json_int_t)scratch_bytes, "timings", "prompt_ms", prompt_ms, "per_token_ms", per_token,
        "tokens_per_s", gen_ms > 0 ? 1000.0 * (double)n_out / gen_ms : 0.0, "prompt_tokens_per_s",
        prompt_ms > 0 ? 1000.0 * (double)n_prompt / prompt_ms : 0.0);
    if (j) {
        json_dumpf(j, stdout, JSON_COMPACT);
        fputc('\n', stdout);
        json_decref(j);
    }
}

int gs_cmd_run(int argc, char **argv)
{
    struct opts o;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: graphserve run %s", usage);
            return 0;
        }
    if (!parse_args(argc, argv, &o))
        return gs_cli_usage("run", usage);

    struct gs_err err = {0};
    struct runner r;
    memset(&r, 0, sizeof(r));
    int32_t *prompt = NULL, *out = NULL;
    size_t n_prompt = 0, n_out = 0, text_len = 0;
    char *text = NULL;
    struct gs_sample_state *sampler = NULL;
    struct gs_tok_decoder *dec = NULL;
    int rc = 1;

    if (o.tokens && !parse_ids(o.tokens, &prompt, &n_prompt)) {
        gs_free(prompt);
        return gs_cli_fail("run", "--tokens: '%s' is not a list of ids", o.tokens);
    }
    /* The prompt length is only known after tokenizing; size the cache after. */
    if (o.prompt) {
        struct gs_tok *t = NULL;
        if (gs_tok_open(o.path, &t, &err) != GS_OK ||
            gs_tok_encode(t, o.prompt, strlen(o.prompt), GS_TOK_ADD_SPECIAL, &prompt, &n_prompt,
                          &err) != GS_OK) {
            gs_tok_free(t);
            gs_cli_fail("run", "%s: %s", o.path, err.msg);
            goto out;
        }
        gs_tok_free(t);
    }
    if (n_prompt == 0) {
        gs_cli_fail("run", "the prompt has no tokens");
        goto out;
    }
    if (runner_open(&r, &o, (uint32_t)(n_prompt + (size_t)o.n_predict), &err) != GS_OK) {
        gs_cli_fail("run", "%s: %s", o.path, err.msg);
        goto out;
    }
    uint32_t n_vocab = r.model->hp.n_vocab;
    struct gs_sample_params sp;
    gs_sample_params_init(&sp);
    sp.temperature = (float)o.temp;
    sp.top_k = (int32_t)o.top_k;
    sp.top_p = (float)o.top_p;
    sp.seed = (uint64_t)o.seed;
    out = gs_calloc((size_t)o.n_predict + 1, sizeof(*out));
    text = gs_malloc(((size_t)o.n_predict + 1) * 64);
    if (!out || !text || gs_sample_state_new(&sp, (int32_t)n_vocab, &sampler, &err) != GS_OK ||
        gs_sample_accept_prompt(sampler, prompt, (int32_t)n_prompt, &err) != GS_OK ||
        (r.tok && gs_tok_decoder_new(r.tok, 0, &dec, &err) != GS_OK)) {
        gs_cli_fail("run", "%s", err.msg[0] ? err.msg : "out of memory");
        goto out;
    }
    /* The prompt goes through the decoder unprinted, so that the first generated
     * piece keeps its leading space and completes any split character. */
    for (size_t i = 0; dec && i < n_prompt; i++) {
        const char *piece;
        size_t len;
        if (gs_tok_decoder_feed(dec, prompt[i], &piece, &len, &err) != GS_OK) {
            gs_cli_fail("run", "prompt token %zu: %s", i, err.msg);
            goto out;
        }
    }

    double t0 = gs_now_ms();
    for (size_t done = 0; done < n_prompt;) {
        uint32_t n = (uint32_t)GS_MIN(n_prompt - done, (size_t)o.batch);
        if (runner_step(&r, prompt + done, n, done + n == n_prompt, &err) != GS_OK) {
            gs_cli_fail("run", "prompt: %s", err.msg);
            goto out;
        }
        done += n;
    }
    double t1 = gs_now_ms();
    const char *finish = "length";
    for (n_out = 0; n_out < (size_t)o.n_predict;) {
        struct gs_sample_out so;
        if (gs_sample_next(sampler, r.logits, (int32_t)n_vocab, &so, &err) != GS_OK ||
            gs_sample_accept(sampler, so.token, &err) != GS_OK) {
            gs_cli_fail("run", "sampling: %s", err.msg);
            goto out;
        }
        out[n_out++] = so.token;
        if (is_eog(&r, so.token) || so.stop) {
            finish = "stop";
            break;
        }
        const char *piece = NULL;
        size_t len = 0;
        if (dec && gs_tok_decoder_feed(dec, so.token, &piece, &len, &err) == GS_OK && len) {
            if (o.json) {
                if (text_len + len < ((size_t)o.n_predict + 1) * 64) {
                    memcpy(text + text_len, piece, len);
                    text_len += len;
                }
            } else {
                fwrite(piece, 1, len, stdout);
                fflush(stdout);
            }
        } else if (!dec && !o.json) {
            printf("%d ", so.token);
            fflush(stdout);
        }
        if (n_out == (size_t)o.n_predict)
            break;
        if (runner_step(&r, &so.token, 1, true, &err) != GS_OK) {
            gs_cli_fail("run", "step %zu: %s", n_out, err.msg);
            goto out;
        }
    }
    double t2 = gs_now_ms();
    if (o.json)
        print_json(prompt, n_prompt, out, n_out, text, text_len, finish, t1 - t0, t2 - t1,
                   gs_plan_cache_scratch_bytes(&r.cache));
    else
        fputc('\n', stdout);
    rc = 0;
out:
    gs_tok_decoder_free(dec);
    gs_sample_state_free(sampler);
    runner_close(&r);
    gs_free(prompt);
    gs_free(out);
    gs_free(text);
    return rc;
}
