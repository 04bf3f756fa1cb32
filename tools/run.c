/*
 * tools/run.c - `graphserve run`: generate from one or several prompts on
 * the command line, through the same scheduler the daemon uses.
 *
 * One prompt: its text streams to stdout as it is produced. Several prompts
 * (-p repeated, or --prompts-file with one prompt per line) share every engine
 * step; each output is printed when all are done, followed by the step
 * statistics. --json prints ids, text, finish reason and timings instead.
 */
#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/sample.h"
#include "engine/tok.h"
#include "scheduler/scheduler.h"
#include "tools/internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PROMPTS 1024

struct opts {
    const char *path, *tokens, *backend, *prompts_file;
    struct gs_cli_list p;               /* -p values */
    const char *prompts[MAX_PROMPTS]; /* -p values, or --prompts-file's lines (owned) */
    size_t n_prompts;
    int64_t n_predict, top_k, seed, page_tokens, batch, max_seqs, threads;
    uint64_t kv_bytes;
    double temp, top_p;
    int kv_type; /* index into gs_tool_kv_types */
    bool json;
};

#define O(f) offsetof(struct opts, f)
/* clang-format off */
static const struct gs_cfg_opt opt_rows[] = {
    GS_TOOL_OPT_MODEL(struct opts, path),
    {"prompt", 'p', GS_CFG_LIST, O(p), NULL, NULL, 0, 0, NULL, 0, NULL,
     "Text to continue (BOS added as the model asks); repeat for several prompts, which share "
     "every engine step."},
    {"prompts-file", 0, GS_CFG_STR, O(prompts_file), NULL, NULL, 0, 0, NULL, GS_CFG_F_PATH, NULL,
     "One prompt per line (empty lines skipped), instead of -p."},
    {"tokens", 0, GS_CFG_STR, O(tokens), NULL, NULL, 0, 0, NULL, 0, NULL,
     "One prompt as comma-separated token ids, instead of -p."},
    {"n-predict", 'n', GS_CFG_INT, O(n_predict), NULL, "64", 1, 1 << 20, NULL, 0, NULL,
     "Tokens to generate per prompt."},
    {"temp", 0, GS_CFG_FLOAT, O(temp), NULL, "0", 0, 100, NULL, 0, NULL,
     "Sampling temperature; 0 is greedy."},
    {"top-k", 0, GS_CFG_INT, O(top_k), NULL, "0", 0, INT32_MAX, NULL, 0, NULL,
     "Sample among the K likeliest tokens; 0: off."},
    {"top-p", 0, GS_CFG_FLOAT, O(top_p), NULL, "1", 0, 1, NULL, 0, NULL,
     "Nucleus sampling: the likeliest tokens up to this mass (above 0); 1: off."},
    {"seed", 0, GS_CFG_INT, O(seed), NULL, "0", 0, (double)INT64_MAX, NULL, 0, NULL,
     "Seed of the sampler's random numbers."},
    GS_TOOL_OPT_BACKEND(struct opts, backend, "cpu"),
    GS_TOOL_OPT_THREADS(struct opts, threads),
    GS_TOOL_OPT_KV_TYPE(struct opts, kv_type),
    {"page-tokens", 0, GS_CFG_INT, O(page_tokens), NULL, "16", 1, 4096, NULL, 0, NULL,
     "Tokens per KV page."},
    {"batch", 0, GS_CFG_INT, O(batch), NULL, "512", 1, 1 << 16, NULL, 0, NULL,
     "Most tokens per engine step."},
    {"max-seqs", 0, GS_CFG_INT, O(max_seqs), NULL, "0", 0, 4096, NULL, 0, NULL,
     "Sequences per engine step; 0: all prompts, at most 64."},
    {"kv-cache-bytes", 0, GS_CFG_BYTES, O(kv_bytes), NULL, "0", 0, (double)(1ull << 40), NULL, 0,
     "bytes", "KV pool size; 0: room for every prompt at once."},
    {"json", 0, GS_CFG_BOOL, O(json), NULL, NULL, 0, 0, NULL, 0, NULL,
     "Print ids, text, finish reason and timings as JSON."},
};
/* clang-format on */
#undef O

const struct gs_cli_spec gs_run_spec = {
    .cmd = "run",
    .synopsis = "-m FILE (-p PROMPT ... | --prompts-file FILE | --tokens ID,ID,...) [options]",
    .opts = opt_rows, .n_opts = GS_ARRAY_LEN(opt_rows),
};

/* One prompt's request and what came back. */
struct item {
    int32_t *prompt;
    size_t n_prompt;
    int32_t *out;
    size_t n_out;
    char *text;
    size_t text_len, text_cap;
    struct gs_tok_decoder *dec;
    enum gs_finish finish;
    struct gs_sched_req_stats stats;
    char err[GS_ERR_MSG_LEN];
};

/* -1 when the command should run, else its exit status. */
static int parse_args(int argc, char **argv, struct opts *o)
{
    struct gs_cli_args args;
    int rc = gs_cli_begin(&gs_run_spec, o, argc, argv, &args);
    if (rc >= 0)
        return rc;
    if (!(o->top_p > 0)) {
        gs_cli_fail(gs_run_spec.cmd, "--top-p: must be above 0 (1: off)");
        return 2;
    }
    int sources = (o->p.n > 0) + (o->prompts_file != NULL) + (o->tokens != NULL);
    if (sources != 1) {
        gs_cli_fail(gs_run_spec.cmd, "give the prompts one way: -p, --prompts-file or --tokens");
        return 2;
    }
    for (size_t i = 0; i < o->p.n; i++)
        o->prompts[o->n_prompts++] = o->p.v[i];
    return -1;
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

/* Reads one prompt per non-empty line into o->prompts (gs_strdup'ed: the
 * caller frees them). Returns false when the file cannot be read or holds more
 * than MAX_PROMPTS prompts. */
static bool read_prompts_file(struct opts *o)
{
    FILE *f = fopen(o->prompts_file, "r");
    if (!f)
        return false;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    bool ok = true;
    while ((n = getline(&line, &cap, f)) >= 0) {
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        if (n == 0)
            continue;
        char *copy = o->n_prompts < MAX_PROMPTS ? gs_strdup(line) : NULL;
        if (!copy) {
            ok = false;
            break;
        }
        o->prompts[o->n_prompts++] = copy;
    }
    free(line);
    fclose(f);
    return ok;
}

static void append_text(struct item *it, const char *p, size_t n)
{
    if (it->text_len + n + 1 > it->text_cap) {
        size_t cap = GS_MAX(2 * it->text_cap, it->text_len + n + 64);
        char *t = gs_realloc(it->text, cap);
        if (!t)
            return;
        it->text = t;
        it->text_cap = cap;
    }
    memcpy(it->text + it->text_len, p, n);
    it->text_len += n;
    it->text[it->text_len] = '\0';
}

/* Handles one event: collects the token and its text; streams it when asked. */
static void on_event(struct gs_tok *tok, struct item *it, const struct gs_sched_event *ev,
                     bool stream)
{
    if (ev->kind == GS_SCHED_EV_FINISH) {
        it->finish = ev->finish;
        it->stats = ev->stats;
        snprintf(it->err, sizeof(it->err), "%s", ev->err_msg);
        return;
    }
    it->out[it->n_out++] = ev->token;
    /* An end-of-generation token ends the text; it is not part of it. */
    if (!it->dec || (tok && gs_tok_is_eog(tok, ev->token)))
        return;
    const char *piece = NULL;
    size_t len = 0;
    struct gs_err err;
    if (gs_tok_decoder_feed(it->dec, ev->token, &piece, &len, &err) != GS_OK || !len)
        return;
    append_text(it, piece, len);
    if (stream) {
        fwrite(piece, 1, len, stdout);
        fflush(stdout);
    }
}

static const char *finish_reason(enum gs_finish f)
{
    /* OpenAI's words: an end-of-generation token is a natural "stop". */
    return f == GS_FINISH_EOS ? "stop" : gs_finish_name(f);
}

static json_t *item_json(const struct item *it)
{
    json_t *jp = json_array(), *jo = json_array();
    for (size_t i = 0; i < it->n_prompt; i++)
        json_array_append_new(jp, json_integer(it->prompt[i]));
    for (size_t i = 0; i < it->n_out; i++)
        json_array_append_new(jo, json_integer(it->out[i]));
    const struct gs_sched_req_stats *st = &it->stats;
    double steps = it->n_out > 1 ? (double)(it->n_out - 1) : 0;
    return json_pack("{s:o, s:o, s:s#, s:s, s:{s:f, s:f, s:f, s:f, s:f}, s:i}", "prompt_tokens", jp,
                     "output_tokens", jo, "text", it->text ? it->text : "", (int)it->text_len,
                     "finish_reason", finish_reason(it->finish), "timings", "queue_ms",
                     st->queue_ms, "prompt_ms", st->prefill_ms, "per_token_ms",
                     steps > 0 ? st->decode_ms / steps : 0.0, "tokens_per_s",
                     st->decode_ms > 0 ? 1000.0 * steps / st->decode_ms : 0.0,
                     "prompt_tokens_per_s",
                     st->prefill_ms > 0 ? 1000.0 * (double)it->n_prompt / st->prefill_ms : 0.0,
                     "preemptions", (int)st->n_preemptions);
}

static json_t *stats_json(const struct gs_sched_stats *st, double wall_ms)
{
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:f, s:I, s:I}", "steps", (json_int_t)st->n_steps,
                     "prompt_tokens_computed", (json_int_t)st->n_tokens_prompt,
                     "generated_tokens", (json_int_t)st->n_tokens_generated,
                     "preemptions", (json_int_t)st->n_preemptions, "prefix_hit_tokens",
                     (json_int_t)st->n_prefix_hit_tokens, "wall_ms", wall_ms, "scratch_bytes",
                     (json_int_t)st->scratch_bytes, "kv_bytes", (json_int_t)st->kv_bytes);
}

static void print_results(const struct opts *o, struct item *items, size_t n,
                          const struct gs_sched_stats *st, double wall_ms)
{
    if (o->json) {
        json_t *j;
        if (n == 1) {
            j = item_json(&items[0]);
            json_object_set_new(j, "scratch_bytes", json_integer((json_int_t)st->scratch_bytes));
            json_object_set_new(j, "stats", stats_json(st, wall_ms));
        } else {
            json_t *arr = json_array();
            for (size_t i = 0; i < n; i++)
                json_array_append_new(arr, item_json(&items[i]));
            j = json_pack("{s:o, s:o}", "results", arr, "stats", stats_json(st, wall_ms));
        }
        json_dumpf(j, stdout, JSON_COMPACT);
        fputc('\n', stdout);
        json_decref(j);
        return;
    }
    if (n == 1) {
        fputc('\n', stdout);
        return;
    }
    for (size_t i = 0; i < n; i++)
        printf("[%zu] %s%s\n    (%zu tokens, %s)\n", i, o->prompts[i],
               items[i].text ? items[i].text : "", items[i].n_out,
               finish_reason(items[i].finish));
    printf("%llu steps, %.1f tokens per step, %llu generated tokens in %.0f ms (%.1f tokens/s), "
           "%llu preemptions, %llu prefix-cache tokens\n",
           (unsigned long long)st->n_steps,
           st->n_steps ? (double)(st->n_tokens_prompt + st->n_tokens_generated) / st->n_steps : 0,
           (unsigned long long)st->n_tokens_generated, wall_ms,
           wall_ms > 0 ? 1000.0 * (double)st->n_tokens_generated / wall_ms : 0,
           (unsigned long long)st->n_preemptions, (unsigned long long)st->n_prefix_hit_tokens);
}

/* Tokenizes every prompt. */
static bool make_prompts(const struct opts *o, struct gs_tok *tok, struct item *items, size_t n,
                         struct gs_err *err)
{
    if (o->tokens) {
        if (!parse_ids(o->tokens, &items[0].prompt, &items[0].n_prompt)) {
            gs_err_set(err, GS_INVAL, "--tokens: '%s' is not a list of ids", o->tokens);
            return false;
        }
        return true;
    }
    for (size_t i = 0; i < n; i++) {
        if (!tok) {
            gs_err_set(err, GS_UNSUPPORTED, "the model has no tokenizer: use --tokens");
            return false;
        }
        if (gs_tok_encode(tok, o->prompts[i], strlen(o->prompts[i]), GS_TOK_ADD_SPECIAL,
                          &items[i].prompt, &items[i].n_prompt, err) != GS_OK)
            return false;
        if (items[i].n_prompt == 0) {
            gs_err_set(err, GS_INVAL, "prompt %zu has no tokens", i);
            return false;
        }
    }
    return true;
}

/* Prepares the decoder of each item. The output continues the prompt, so
 * its first piece keeps its leading space, as the daemon's does. */
static bool make_decoders(struct gs_tok *tok, struct item *items, size_t n, int64_t n_predict,
                          struct gs_err *err)
{
    for (size_t i = 0; i < n; i++) {
        items[i].out = gs_calloc((size_t)n_predict, sizeof(int32_t));
        if (!items[i].out)
            return gs_err_set(err, GS_NOMEM, "out of memory"), false;
        if (!tok)
            continue;
        if (gs_tok_decoder_new(tok, GS_TOK_CONTINUATION, &items[i].dec, err) != GS_OK)
            return false;
    }
    return true;
}

/* Room for every prompt and its output at once, plus one page each. */
static uint64_t kv_bytes_for(const struct gs_model *m, const struct opts *o, struct item *items,
                             size_t n)
{
    uint64_t per_token = (uint64_t)gs_model_kv_layers(m) * 2 *
                         gs_kv_row_bytes(gs_tool_kv_types[o->kv_type], gs_model_kv_dim(m));
    uint64_t pages = 0;
    for (size_t i = 0; i < n; i++)
        pages += (items[i].n_prompt + (uint64_t)o->n_predict) / (uint64_t)o->page_tokens + 2;
    return pages * (uint64_t)o->page_tokens * per_token;
}

int gs_cmd_run(int argc, char **argv)
{
    struct opts o = {0};
    int prc = parse_args(argc, argv, &o);
    if (prc >= 0)
        return prc;
    if (o.prompts_file && (!read_prompts_file(&o) || o.n_prompts == 0)) {
        for (size_t i = 0; i < o.n_prompts; i++)
            gs_free((char *)o.prompts[i]);
        return gs_cli_fail("run", "--prompts-file %s: unreadable, empty, or over %d prompts",
                           o.prompts_file, MAX_PROMPTS);
    }
    size_t n = o.tokens ? 1 : o.n_prompts;

    struct gs_err err = {0};
    struct gs_gguf *file = NULL;
    struct gs_model *model = NULL;
    struct gs_tok *tok = NULL;
    struct gs_sched *sched = NULL;
    struct item *items = gs_calloc(n, sizeof(*items));
    int rc = 1;
    if (!items)
        return gs_cli_fail("run", "out of memory");
    if (gs_gguf_open(o.path, &file, &err) || gs_model_load(file, &model, &err)) {
        gs_cli_fail("run", "%s", err.msg);
        goto out;
    }
    struct gs_err tok_err = {0};
    if (gs_tok_new(file, &tok, &tok_err) != GS_OK)
        tok = NULL;
    if (!make_prompts(&o, tok, items, n, &err) ||
        !make_decoders(tok, items, n, o.n_predict, &err)) {
        gs_cli_fail("run", "%s", err.msg);
        goto out;
    }
    size_t n_eog = 0;
    const int32_t *eog = tok ? gs_tok_eog_ids(tok, &n_eog) : NULL;
    struct gs_sched_cfg cfg = {
        .backend = o.backend, .n_threads = (int)o.threads,
        .kv_type = gs_tool_kv_types[o.kv_type], .page_tokens = (uint32_t)o.page_tokens,
        .max_batch_tokens = (uint32_t)GS_MAX(o.batch, (int64_t)GS_MIN(n, 64)),
        .max_seqs = o.max_seqs ? (uint32_t)o.max_seqs : (uint32_t)GS_MIN(n, 64),
        .max_queue = (uint32_t)n + 1, .prefix_cache = true,
        .kv_cache_bytes = o.kv_bytes ? o.kv_bytes : kv_bytes_for(model, &o, items, n),
        .eog = eog, .n_eog = (uint32_t)n_eog};
    if (gs_sched_new(&cfg, model, &sched, &err)) {
        gs_cli_fail("run", "%s", err.msg);
        goto out;
    }
    struct gs_sample_params sp;
    gs_sample_params_init(&sp);
    sp.temperature = (float)o.temp;
    sp.top_k = (int32_t)o.top_k;
    sp.top_p = (float)o.top_p;
    sp.seed = (uint64_t)o.seed;
    for (size_t i = 0; i < n; i++) {
        struct gs_sched_request req = {.id = i, .prompt = items[i].prompt,
                                       .n_prompt = (uint32_t)items[i].n_prompt,
                                       .max_tokens = (uint32_t)o.n_predict, .sampling = sp};
        if (gs_sched_submit(sched, &req, &err)) {
            gs_cli_fail("run", "prompt %zu: %s", i, err.msg);
            goto out;
        }
    }
    bool stream = n == 1 && !o.json;
    double t0 = gs_now_ms();
    while (!gs_sched_idle(sched)) {
        if (gs_sched_step(sched, &err)) {
            gs_cli_fail("run", "%s", err.msg);
            goto out;
        }
        struct gs_sched_event ev[64];
        size_t got;
        while ((got = gs_sched_poll(sched, ev, GS_ARRAY_LEN(ev))) > 0)
            for (size_t i = 0; i < got; i++)
                on_event(tok, &items[ev[i].id], &ev[i], stream);
    }
    double wall_ms = gs_now_ms() - t0;
    struct gs_sched_stats st;
    gs_sched_stats(sched, &st);
    print_results(&o, items, n, &st, wall_ms);
    rc = 0;
    for (size_t i = 0; i < n; i++)
        if (items[i].finish == GS_FINISH_ERROR) {
            gs_cli_fail("run", "prompt %zu: %s", i, items[i].err);
            rc = 1;
        }
out:
    gs_sched_free(sched);
    for (size_t i = 0; i < n; i++) {
        gs_tok_decoder_free(items[i].dec);
        gs_free(items[i].prompt);
        gs_free(items[i].out);
        gs_free(items[i].text);
    }
    gs_free(items);
    gs_tok_free(tok);
    gs_model_free(model);
    gs_gguf_close(file);
    if (o.prompts_file)
        for (size_t i = 0; i < o.n_prompts; i++)
            gs_free((char *)o.prompts[i]);
    return rc;
}
