/*
 * engine/validate/golden.c - golden completion files: loading, shape checks
 * and comparison with served logits (engine/validate.h).
 *
 * The JSON tree is read field by field into plain arrays and dropped before
 * returning; every failure names the field as the file spells it. Token
 * pieces may hold "\u0000" (byte tokens), so NUL is allowed in strings.
 */
#include "engine/validate.h"

#include <math.h>
#include <string.h>

static enum gs_status bad(struct gs_err *err, const char *field, const char *what)
{
    return gs_err_set(err, GS_FORMAT, "%s: %s", field, what);
}

static enum gs_status get_int(json_t *obj, const char *key, int64_t min, int64_t max, int64_t *out,
                              struct gs_err *err)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return bad(err, key, "missing");
    if (!json_is_integer(v))
        return bad(err, key, "expected an integer");
    int64_t x = json_integer_value(v);
    if (x < min || x > max)
        return gs_err_set(err, GS_FORMAT, "%s: %lld outside [%lld, %lld]", key, (long long)x,
                          (long long)min, (long long)max);
    *out = x;
    return GS_OK;
}

static enum gs_status get_bool(json_t *obj, const char *key, bool *out, struct gs_err *err)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return bad(err, key, "missing");
    if (!json_is_boolean(v))
        return bad(err, key, "expected true or false");
    *out = json_is_true(v);
    return GS_OK;
}

static enum gs_status get_string(json_t *obj, const char *key, char **out, struct gs_err *err)
{
    json_t *v = json_object_get(obj, key);
    if (!v)
        return bad(err, key, "missing");
    if (!json_is_string(v))
        return bad(err, key, "expected a string");
    *out = gs_strndup(json_string_value(v), json_string_length(v));
    if (!*out)
        return gs_err_set(err, GS_NOMEM, "%s: out of memory", key);
    return GS_OK;
}

/* A finite JSON number into *out; field names the value for errors. */
static enum gs_status number(json_t *v, const char *field, float *out, struct gs_err *err)
{
    if (!json_is_number(v))
        return bad(err, field, "expected a number");
    double x = json_number_value(v);
    if (!isfinite(x) || fabs(x) > 3.4e38)
        return bad(err, field, "not a finite float");
    *out = (float)x;
    return GS_OK;
}

/* A JSON array of exactly n finite numbers into out[n]. */
static enum gs_status float_row(json_t *arr, const char *field, int32_t n, float *out,
                                struct gs_err *err)
{
    if (!json_is_array(arr))
        return bad(err, field, "expected an array");
    if (json_array_size(arr) != (size_t)n)
        return gs_err_set(err, GS_FORMAT, "%s: %zu values, expected n_vocab = %d", field,
                          json_array_size(arr), (int)n);
    char name[96];
    for (int32_t i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, (size_t)i);
        if (!json_is_number(v) || !(fabs(json_number_value(v)) <= 3.4e38)) {
            snprintf(name, sizeof(name), "%s[%d]", field, (int)i);
            return number(v, name, &out[i], err);
        }
        out[i] = (float)json_number_value(v);
    }
    return GS_OK;
}

/* A JSON array of n token ids in [0, n_vocab) into a new out[n]. */
static enum gs_status token_array(json_t *obj, const char *key, int32_t n_vocab, int32_t *n,
                                  int32_t **out, struct gs_err *err)
{
    json_t *arr = json_object_get(obj, key);
    if (!arr)
        return bad(err, key, "missing");
    if (!json_is_array(arr))
        return bad(err, key, "expected an array of token ids");
    size_t len = json_array_size(arr);
    if (len > INT32_MAX / 2)
        return bad(err, key, "too long");
    *n = (int32_t)len;
    *out = gs_alloc_array(len ? len : 1, sizeof(**out));
    if (!*out)
        return gs_err_set(err, GS_NOMEM, "%s: out of memory", key);
    for (size_t i = 0; i < len; i++) {
        json_t *v = json_array_get(arr, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= n_vocab)
            return gs_err_set(err, GS_FORMAT, "%s[%zu]: expected a token id in [0, %d)", key, i,
                              (int)n_vocab);
        (*out)[i] = (int32_t)json_integer_value(v);
    }
    return GS_OK;
}

static enum gs_status parse_step(json_t *s, int32_t i, const struct gs_val_golden *g,
                                 struct gs_val_golden_step *st, struct gs_err *err)
{
    char f[96];
    snprintf(f, sizeof(f), "steps[%d]", (int)i);
    if (!json_is_object(s))
        return bad(err, f, "expected an object");
    json_t *v = json_object_get(s, "i");
    if (!json_is_integer(v) || json_integer_value(v) != i)
        return gs_err_set(err, GS_FORMAT, "%s.i: expected %d", f, (int)i);
    v = json_object_get(s, "token");
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= g->n_vocab)
        return gs_err_set(err, GS_FORMAT, "%s.token: expected a token id in [0, %d)", f,
                          (int)g->n_vocab);
    st->token = (int32_t)json_integer_value(v);
    char sub[128];
    snprintf(sub, sizeof(sub), "%s.logit", f);
    if (!(v = json_object_get(s, "logit")))
        return bad(err, sub, "missing");
    enum gs_status rc = number(v, sub, &st->logit, err);
    if (rc != GS_OK)
        return rc;
    snprintf(sub, sizeof(sub), "%s.margin_to_2nd", f);
    if (!(v = json_object_get(s, "margin_to_2nd")))
        return bad(err, sub, "missing");
    if ((rc = number(v, sub, &st->margin, err)) != GS_OK)
        return rc;
    if (st->margin < 0)
        return bad(err, sub, "negative");

    json_t *top = json_object_get(s, "top5");
    snprintf(sub, sizeof(sub), "%s.top5", f);
    if (!top)
        return bad(err, sub, "missing");
    if (!json_is_array(top) || json_array_size(top) < 1 ||
        json_array_size(top) > GS_VAL_PARTIAL_MAX)
        return gs_err_set(err, GS_FORMAT, "%s: expected 1..%d [id, logit] pairs", sub,
                          GS_VAL_PARTIAL_MAX);
    st->n_top = (int32_t)json_array_size(top);
    for (int32_t j = 0; j < st->n_top; j++) {
        json_t *pair = json_array_get(top, (size_t)j);
        snprintf(sub, sizeof(sub), "%s.top5[%d]", f, (int)j);
        json_t *id = json_array_get(pair, 0);
        if (!json_is_array(pair) || json_array_size(pair) != 2 || !json_is_integer(id) ||
            !json_is_number(json_array_get(pair, 1)))
            return bad(err, sub, "expected [id, logit]");
        if (json_integer_value(id) < 0 || json_integer_value(id) >= g->n_vocab)
            return gs_err_set(err, GS_FORMAT, "%s: id outside [0, %d)", sub, (int)g->n_vocab);
        st->top_ids[j] = (int32_t)json_integer_value(id);
        if ((rc = number(json_array_get(pair, 1), sub, &st->top_logits[j], err)) != GS_OK)
            return rc;
        if (j > 0 && st->top_logits[j] > st->top_logits[j - 1])
            return bad(err, sub, "logits not in descending order");
    }
    if (st->top_ids[0] != st->token)
        return gs_err_set(err, GS_FORMAT, "%s.top5[0]: id %d is not the step's token %d", f,
                          (int)st->top_ids[0], (int)st->token);
    return GS_OK;
}

static enum gs_status parse_tree(json_t *root, struct gs_val_golden *g, struct gs_err *err)
{
    enum gs_status rc;
    int64_t x;
    if (!json_is_object(root))
        return bad(err, "(top level)", "expected an object");
    if ((rc = get_string(root, "model", &g->model, err)) != GS_OK ||
        (rc = get_string(root, "prompt", &g->prompt, err)) != GS_OK)
        return rc;
    if ((rc = get_int(root, "n_vocab", 1, INT32_MAX / 4, &x, err)) != GS_OK)
        return rc;
    g->n_vocab = (int32_t)x;
    if ((rc = get_int(root, "bos_id", -1, g->n_vocab - 1, &x, err)) != GS_OK)
        return rc;
    g->bos_id = (int32_t)x;
    if ((rc = get_int(root, "eos_id", -1, g->n_vocab - 1, &x, err)) != GS_OK)
        return rc;
    g->eos_id = (int32_t)x;
    if ((rc = get_bool(root, "add_bos", &g->add_bos, err)) != GS_OK ||
        (rc = get_bool(root, "stopped_eog", &g->stopped_eog, err)) != GS_OK)
        return rc;

    rc = token_array(root, "prompt_tokens", g->n_vocab, &g->n_prompt, &g->prompt_tokens, err);
    if (rc != GS_OK)
        return rc;
    if (g->n_prompt == 0)
        return bad(err, "prompt_tokens", "empty");

    json_t *pl = json_object_get(root, "prompt_logits");
    if (!pl)
        return bad(err, "prompt_logits", "missing");
    if (!json_is_array(pl) || json_array_size(pl) != (size_t)g->n_prompt)
        return gs_err_set(err, GS_FORMAT,
                          "prompt_logits: expected an array of %d rows (one per prompt token)",
                          (int)g->n_prompt);
    g->prompt_logits = gs_alloc_array((size_t)g->n_prompt * (size_t)g->n_vocab, sizeof(float));
    g->last_logits = gs_alloc_array((size_t)g->n_vocab, sizeof(float));
    if (!g->prompt_logits || !g->last_logits)
        return gs_err_set(err, GS_NOMEM, "prompt_logits: out of memory");
    char f[64];
    for (int32_t i = 0; i < g->n_prompt; i++) {
        snprintf(f, sizeof(f), "prompt_logits[%d]", (int)i);
        rc = float_row(json_array_get(pl, (size_t)i), f, g->n_vocab,
                       g->prompt_logits + (size_t)i * (size_t)g->n_vocab, err);
        if (rc != GS_OK)
            return rc;
    }
    json_t *ll = json_object_get(root, "last_logits");
    if (!ll)
        return bad(err, "last_logits", "missing");
    if ((rc = float_row(ll, "last_logits", g->n_vocab, g->last_logits, err)) != GS_OK)
        return rc;

    if ((rc = get_int(root, "n_predict", 0, INT32_MAX / 4, &x, err)) != GS_OK)
        return rc;
    g->n_predict = (int32_t)x;
    if ((rc = get_int(root, "n_generated", 0, g->n_predict, &x, err)) != GS_OK)
        return rc;
    g->n_gen = (int32_t)x;
    int32_t n_comp;
    rc = token_array(root, "completion_tokens", g->n_vocab, &n_comp, &g->completion_tokens, err);
    if (rc != GS_OK)
        return rc;
    if (n_comp != g->n_gen)
        return gs_err_set(err, GS_FORMAT, "completion_tokens: %d tokens, n_generated is %d",
                          (int)n_comp, (int)g->n_gen);

    json_t *settings = json_object_get(root, "settings");
    if (settings) {
        if (!json_is_object(settings))
            return bad(err, "settings", "expected an object");
        json_t *kv = json_object_get(settings, "kv_cache_type");
        if (kv && (!json_is_string(kv) || json_string_length(kv) >= sizeof(g->kv_cache_type)))
            return bad(err, "settings.kv_cache_type", "expected a short string");
        if (kv)
            snprintf(g->kv_cache_type, sizeof(g->kv_cache_type), "%s", json_string_value(kv));
    }

    json_t *steps = json_object_get(root, "steps");
    if (!steps)
        return bad(err, "steps", "missing");
    if (!json_is_array(steps) || json_array_size(steps) != (size_t)g->n_gen)
        return gs_err_set(err, GS_FORMAT, "steps: expected an array of n_generated = %d steps",
                          (int)g->n_gen);
    g->steps = gs_calloc(g->n_gen ? (size_t)g->n_gen : 1, sizeof(*g->steps));
    if (!g->steps)
        return gs_err_set(err, GS_NOMEM, "steps: out of memory");
    for (int32_t i = 0; i < g->n_gen; i++) {
        rc = parse_step(json_array_get(steps, (size_t)i), i, g, &g->steps[i], err);
        if (rc != GS_OK)
            return rc;
        if (g->steps[i].token != g->completion_tokens[i])
            return gs_err_set(err, GS_FORMAT, "steps[%d].token: %d, completion_tokens[%d] is %d",
                              (int)i, (int)g->steps[i].token, (int)i, (int)g->completion_tokens[i]);
    }
    return GS_OK;
}

enum gs_status gs_val_golden_parse(const char *text, size_t len, struct gs_val_golden **out,
                                   struct gs_err *err)
{
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
    if (!root)
        return gs_err_set(err, GS_FORMAT, "line %d column %d: %s", jerr.line, jerr.column,
                          jerr.text);
    struct gs_val_golden *g = gs_calloc(1, sizeof(*g));
    if (!g) {
        json_decref(root);
        return gs_err_set(err, GS_NOMEM, "golden: out of memory");
    }
    enum gs_status rc = parse_tree(root, g, err);
    json_decref(root);
    if (rc != GS_OK) {
        gs_val_golden_free(g);
        return rc;
    }
    *out = g;
    return GS_OK;
}

enum gs_status gs_val_golden_load(const char *path, struct gs_val_golden **out, struct gs_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return gs_err_set(err, GS_IO, "%s: cannot open", path);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    enum gs_status rc = GS_OK;
    for (;;) {
        if (len == cap) {
            size_t ncap = cap ? cap * 2 : 1 << 16;
            char *nbuf = gs_realloc(buf, ncap);
            if (!nbuf) {
                rc = gs_err_set(err, GS_NOMEM, "%s: out of memory reading", path);
                goto out;
            }
            buf = nbuf;
            cap = ncap;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        rc = gs_err_set(err, GS_IO, "%s: read error", path);
        goto out;
    }
    rc = gs_val_golden_parse(buf, len, out, err);
    if (rc != GS_OK)
        gs_err_prefix(err, "%s", path);
out:
    gs_free(buf);
    fclose(f);
    return rc;
}

void gs_val_golden_free(struct gs_val_golden *g)
{
    if (!g)
        return;
    gs_free(g->model);
    gs_free(g->prompt);
    gs_free(g->prompt_tokens);
    gs_free(g->prompt_logits);
    gs_free(g->last_logits);
    gs_free(g->completion_tokens);
    gs_free(g->steps);
    gs_free(g);
}

int32_t gs_val_golden_n_eval(const struct gs_val_golden *g)
{
    return g->n_prompt + (g->n_gen > 0 ? g->n_gen - 1 : 0);
}

int32_t gs_val_golden_token(const struct gs_val_golden *g, int32_t i)
{
    return i < g->n_prompt ? g->prompt_tokens[i] : g->completion_tokens[i - g->n_prompt];
}

enum gs_status gs_val_golden_compare(const struct gs_val_golden *g, const float *served,
                                     int32_t n_eval, const struct gs_val_thresholds *thr,
                                     struct gs_val_report **out, struct gs_err *err)
{
    if (n_eval != gs_val_golden_n_eval(g) || !served)
        return gs_err_set(err, GS_INVAL, "served logits: %d rows, the golden needs %d", (int)n_eval,
                          (int)gs_val_golden_n_eval(g));
    struct gs_val_report *r;
    enum gs_status rc = gs_val_report_new(g->n_vocab, thr, &r, err);
    if (rc != GS_OK)
        return rc;
    size_t nv = (size_t)g->n_vocab;
    for (int32_t i = 0; i < g->n_prompt && rc == GS_OK; i++) {
        bool last = i == g->n_prompt - 1;
        double margin = last && g->n_gen > 0 ? (double)g->steps[0].margin : NAN;
        rc = gs_val_add_full(r, i, served + (size_t)i * nv, g->prompt_logits + (size_t)i * nv,
                             margin, err);
    }
    for (int32_t s = 1; s < g->n_gen && rc == GS_OK; s++) {
        const struct gs_val_golden_step *st = &g->steps[s];
        int32_t pos = g->n_prompt - 1 + s;
        rc = gs_val_add_top(r, pos, served + (size_t)pos * nv, st->top_ids, st->top_logits,
                            st->n_top, st->margin, err);
    }
    if (rc != GS_OK) {
        gs_val_report_free(r);
        return rc;
    }
    gs_val_finish(r);
    *out = r;
    return GS_OK;
}
