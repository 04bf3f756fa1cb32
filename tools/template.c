/*
 * tools/template.c - `graphserve template (-m FILE | --template-file
 * FILE) [--text] [--now UNIX_S]`: renders a Jinja chat template
 * (engine/jinja.h), a model's own (tokenizer.chat_template) or a file's, with
 * the JSON object read from standard input as its variables - messages, and
 * optionally tools, add_generation_prompt, bos_token, eos_token and any other
 * template variable (enable_thinking, ...) - and prints the prompt.
 *
 * With --text the output is exactly the rendered text and nothing else, so
 * that scripts can compare it byte for byte. Otherwise a newline follows, and
 * with a model its tokens: the vocabulary's BOS and EOS texts are the
 * template's bos_token and eos_token (stdin cannot replace them), control
 * tokens are recognised only in the template's own text, never in the
 * client's strings, and BOS is added only when the template did not write it.
 * A template that does not parse, fails, or calls raise_exception exits 1
 * with the reason on stderr.
 */
#include "engine/gguf.h"
#include "engine/jinja.h"
#include "engine/tok.h"
#include "tools/internal.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

struct opts {
    const char *model, *path;
    bool text_only;
    int64_t now;
};

#define O(f) offsetof(struct opts, f)
/* --now has no default text: the caller sets the current time first. */
/* clang-format off */
static const struct gs_cfg_opt opt_rows[] = {
    {"model", 'm', GS_CFG_STR, O(model), NULL, NULL, 0, 0, NULL, GS_CFG_F_PATH, NULL,
     "GGUF whose tokenizer.chat_template, BOS/EOS texts and tokenizer to use (the tokens are "
     "printed too)."},
    {"template-file", 0, GS_CFG_STR, O(path), NULL, NULL, 0, 0, NULL, GS_CFG_F_PATH, NULL,
     "Jinja chat template to render (with -m: instead of the model's)."},
    {"text", 0, GS_CFG_BOOL, O(text_only), NULL, NULL, 0, 0, NULL, 0, NULL,
     "Print exactly the rendered text, nothing else."},
    {"now", 0, GS_CFG_INT, O(now), NULL, NULL, 0, 253402300799.0, NULL, 0, "s",
     "The moment strftime_now formats, in seconds since 1970 (UTC); the default is now."},
};
/* clang-format on */
#undef O

const struct gs_cli_spec gs_template_spec = {
    .cmd = "template",
    .synopsis = "(-m FILE | --template-file FILE) [--text] [--now UNIX_S] < CONTEXT.json",
    .about = "Standard input holds one JSON object: messages, and optionally tools,\n"
             "add_generation_prompt, bos_token, eos_token and any further template variables.\n",
    .opts = opt_rows, .n_opts = GS_ARRAY_LEN(opt_rows),
};

static int read_template_file(const char *path, char **src, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return gs_cli_fail("template", "%s: cannot open", path);
    *src = gs_tool_read_all(f, len);
    fclose(f);
    if (!*src)
        return gs_cli_fail("template", "%s: cannot read", path);
    return 0;
}

/* What a render needs from a model: its template, vocabulary and BOS/EOS texts. */
struct model_side {
    struct gs_gguf *gguf;
    struct gs_tok *tok;
    json_t *trusted; /* {"bos_token": ..., "eos_token": ...} */
    const char *bos_text;
    size_t bos_len;
};

static int open_model(const char *path, struct model_side *m)
{
    struct gs_err err = {0};
    if (gs_gguf_open(path, &m->gguf, &err) != GS_OK || gs_tok_new(m->gguf, &m->tok, &err) != GS_OK)
        return gs_cli_fail("template", "%s: %s", path, err.msg);
    const struct gs_tok_special *sp = gs_tok_special(m->tok);
    m->trusted = json_object();
    static const char *const names[] = {"bos_token", "eos_token"};
    int32_t ids[] = {sp->bos, sp->eos};
    for (int i = 0; i < 2; i++) {
        size_t n;
        const char *t = ids[i] >= 0 ? gs_tok_token_text(m->tok, ids[i], &n) : NULL;
        if (!t)
            continue;
        json_object_set_new(m->trusted, names[i], json_stringn(t, n));
        if (i == 0) {
            m->bos_text = t;
            m->bos_len = n;
        }
    }
    return 0;
}

static void close_model(struct model_side *m)
{
    json_decref(m->trusted);
    gs_tok_free(m->tok);
    gs_gguf_close(m->gguf);
}

static int model_template(const char *path, const struct model_side *m, char **src, size_t *len)
{
    struct gs_gguf_str t;
    struct gs_err err = {0};
    if (gs_gguf_get_str(m->gguf, "tokenizer.chat_template", &t, &err) != GS_OK)
        return gs_cli_fail("template", "%s has no tokenizer.chat_template: %s", path, err.msg);
    *src = gs_strndup(t.data, t.len);
    *len = t.len;
    return *src ? 0 : gs_cli_fail("template", "out of memory");
}

/* The template's own text: the complement of the context's spans. */
static struct gs_tok_span *template_spans(const struct gs_jinja_span *ctx, size_t n_ctx, size_t len,
                                          size_t *n_out)
{
    struct gs_tok_span *v = gs_alloc_array(n_ctx + 1, sizeof(*v));
    size_t k = 0, at = 0;
    for (size_t i = 0; v && i <= n_ctx; i++) {
        size_t end = i < n_ctx ? ctx[i].off : len;
        if (end > at)
            v[k++] = (struct gs_tok_span){.off = at, .len = end - at};
        if (i < n_ctx)
            at = ctx[i].off + ctx[i].len;
    }
    *n_out = k;
    return v;
}

static int print_tokens(const struct model_side *m, const char *text, size_t n,
                        const struct gs_jinja_span *ctx_sp, size_t n_ctx)
{
    size_t n_sp;
    struct gs_tok_span *sp = template_spans(ctx_sp, n_ctx, n, &n_sp);
    if (!sp)
        return gs_cli_fail("template", "out of memory");
    /* A template that writes bos_token itself must not get a second BOS. */
    bool has_bos = m->bos_text && n >= m->bos_len && memcmp(text, m->bos_text, m->bos_len) == 0;
    int32_t *ids;
    size_t n_ids;
    struct gs_err err = {0};
    enum gs_status st = gs_tok_encode_spans(m->tok, text, n, sp, n_sp,
                                            has_bos ? 0 : GS_TOK_ADD_SPECIAL, &ids, &n_ids, &err);
    gs_free(sp);
    if (st != GS_OK)
        return gs_cli_fail("template", "tokenizing the prompt: %s", err.msg);
    printf("%zu tokens\n", n_ids);
    for (size_t i = 0; i < n_ids; i++) {
        size_t pl;
        const char *p = gs_tok_piece(m->tok, ids[i], GS_TOK_RENDER_SPECIAL, &pl);
        printf("%6d -> '%.*s'\n", ids[i], (int)pl, p);
    }
    gs_free(ids);
    return 0;
}

static int render(const char *name, const char *src, size_t len, const json_t *ctx,
                  const struct model_side *m, int64_t now, bool text_only)
{
    struct gs_jinja_tmpl *t;
    struct gs_err err = {0};
    enum gs_status st = gs_jinja_parse(src, len, NULL, &t, &err);
    if (st != GS_OK)
        return gs_cli_fail("template", "%s: %s", name, err.msg);
    char *out;
    size_t n, n_sp = 0;
    struct gs_jinja_span *sp = NULL;
    enum gs_jinja_fail fail;
    st = gs_jinja_render_spans(t, ctx, m ? m->trusted : NULL, now, &out, &n, m ? &sp : NULL,
                               m ? &n_sp : NULL, &fail, &err);
    gs_jinja_free(t);
    if (st != GS_OK)
        return gs_cli_fail("template", "%s: %s%s", name,
                           fail == GS_JINJA_FAIL_RAISED ? "the template raised: " : "", err.msg);
    int rc = 0;
    if (fwrite(out, 1, n, stdout) != n || (!text_only && fputc('\n', stdout) == EOF))
        rc = gs_cli_fail("template", "writing the prompt failed");
    else if (!text_only && m)
        rc = print_tokens(m, out, n, sp, n_sp);
    gs_free(out);
    gs_free(sp);
    if (rc == 0 && fflush(stdout) != 0)
        rc = gs_cli_fail("template", "writing the prompt failed");
    return rc;
}

/* Reads the template (from the file, else the model) and renders it. */
static int run_template(const char *path, const char *model, const json_t *ctx, int64_t now,
                        bool text_only)
{
    struct model_side m = {0};
    char *src = NULL;
    size_t len = 0;
    int rc = model ? open_model(model, &m) : 0;
    if (rc == 0)
        rc = path ? read_template_file(path, &src, &len) : model_template(model, &m, &src, &len);
    if (rc == 0)
        rc = render(path ? path : model, src, len, ctx, model ? &m : NULL, now, text_only);
    gs_free(src);
    if (model)
        close_model(&m);
    return rc;
}

int gs_cmd_template(int argc, char **argv)
{
    struct opts o = {.now = (int64_t)time(NULL)};
    struct gs_cli_args args;
    int prc = gs_cli_begin(&gs_template_spec, &o, argc, argv, &args);
    if (prc >= 0)
        return prc;
    const char *path = o.path, *model = o.model;
    bool text_only = o.text_only;
    int64_t now = o.now;
    if (!path && !model)
        return gs_cli_fail(gs_template_spec.cmd, "needs -m FILE or --template-file FILE") + 1;
    size_t len;
    char *in = gs_tool_read_all(stdin, &len);
    if (!in)
        return gs_cli_fail("template", "reading standard input failed");
    json_error_t jerr;
    json_t *ctx = json_loadb(in, len, 0, &jerr);
    gs_free(in);
    if (!json_is_object(ctx)) {
        json_decref(ctx);
        return gs_cli_fail("template", "standard input: expected one JSON object%s%s",
                           ctx ? "" : ": ", ctx ? "" : jerr.text);
    }
    int rc = run_template(path, model, ctx, now, text_only);
    json_decref(ctx);
    return rc;
}
