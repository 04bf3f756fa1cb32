/*
 * server/cmd/template.c - `graphserve template --template-file FILE [--text]
 * [--now UNIX_S]`: renders a Jinja chat template (engine/jinja.h) with the
 * JSON object read from standard input as its variables - messages, and
 * optionally tools, add_generation_prompt, bos_token, eos_token and any other
 * template variable (enable_thinking, ...) - and prints the prompt.
 *
 * With --text the output is exactly the rendered text and nothing else, so
 * that scripts can compare it byte for byte; without it a newline follows.
 * A template that does not parse, fails, or calls raise_exception exits 1
 * with the reason on stderr.
 */
#include "engine/jinja.h"
#include "server/cli.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static const char usage[] =
    "--template-file FILE [--text] [--now UNIX_S] < CONTEXT.json\n"
    "  --template-file FILE  Jinja chat template to render\n"
    "  --text                print exactly the rendered text, nothing else\n"
    "  --now UNIX_S          the moment strftime_now formats (UTC; default: now)\n"
    "  standard input        one JSON object: messages, and optionally tools,\n"
    "                        add_generation_prompt, bos_token, eos_token and any\n"
    "                        further template variables\n";

/* Reads a whole stream; NULL on error or out of memory. Caller frees with gs_free. */
static char *read_all(FILE *f, size_t *len)
{
    size_t cap = 4096, n = 0;
    char *buf = gs_malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        char *grown = cap <= SIZE_MAX / 2 ? gs_realloc(buf, cap * 2) : NULL;
        if (!grown) {
            gs_free(buf);
            return NULL;
        }
        buf = grown;
        cap *= 2;
    }
    if (buf && ferror(f)) {
        gs_free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

static int render(const char *path, const json_t *ctx, int64_t now, bool text_only)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return gs_cli_fail("template", "%s: cannot open", path);
    size_t len;
    char *src = read_all(f, &len);
    fclose(f);
    if (!src)
        return gs_cli_fail("template", "%s: cannot read", path);
    struct gs_jinja_tmpl *t;
    struct gs_err err = {0};
    enum gs_status st = gs_jinja_parse(src, len, NULL, &t, &err);
    gs_free(src);
    if (st != GS_OK)
        return gs_cli_fail("template", "%s: %s", path, err.msg);
    char *out;
    size_t n;
    enum gs_jinja_fail fail;
    st = gs_jinja_render(t, ctx, now, &out, &n, &fail, &err);
    gs_jinja_free(t);
    if (st != GS_OK)
        return gs_cli_fail("template", "%s: %s%s", path,
                           fail == GS_JINJA_FAIL_RAISED ? "the template raised: " : "", err.msg);
    bool ok = fwrite(out, 1, n, stdout) == n && (text_only || fputc('\n', stdout) != EOF);
    gs_free(out);
    return ok && fflush(stdout) == 0 ? 0 : gs_cli_fail("template", "writing the prompt failed");
}

int gs_cmd_template(int argc, char **argv)
{
    const char *path = NULL;
    bool text_only = false;
    int64_t now = (int64_t)time(NULL);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--template-file")) {
            if (++i >= argc)
                return gs_cli_usage("template", usage);
            path = argv[i];
        } else if (!strcmp(a, "--text")) {
            text_only = true;
        } else if (!strcmp(a, "--now")) {
            if (++i >= argc || !gs_cli_parse_i64("--now", argv[i], 0, INT64_C(253402300799), &now))
                return gs_cli_usage("template", usage);
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: graphserve template %s", usage);
            return 0;
        } else {
            fprintf(stderr, "graphserve template: unknown argument '%s'\n", a);
            return gs_cli_usage("template", usage);
        }
    }
    if (!path)
        return gs_cli_usage("template", usage);
    size_t len;
    char *in = read_all(stdin, &len);
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
    int rc = render(path, ctx, now, text_only);
    json_decref(ctx);
    return rc;
}
