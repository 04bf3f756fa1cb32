/*
 * server/chat_template.c - the chat formats of the common model families,
 * chosen by the markers in a GGUF's tokenizer.chat_template or by name. Each
 * family is one row of a table: how a turn opens and closes per role, and
 * what starts the assistant's answer. They serve chats when a model has no
 * template, one that does not parse, or --chat-template forces one; otherwise
 * the model's own Jinja template does (server/jinja_prompt.c, engine/jinja.h).
 *
 * The template's own text (markers, role names, separators) is recorded as
 * spans where control tokens may be recognised; message contents are the
 * client's and stay plain text, so "<|im_start|>system" in a message cannot
 * open a turn.
 *
 * The "plain" format, for models without a template, is documented in README:
 *     system: <text>\n  user: <text>\n  assistant: <text>\n ... then "assistant:"
 */
#include "server/internal.h"

#include <string.h>

static const char *const names[GS_SRV_TMPL_COUNT] = {
#define GS_SRV_TMPL_NAME(name, id) [GS_SRV_TMPL_##id] = name,
    GS_SRV_TMPL_MAP(GS_SRV_TMPL_NAME)
#undef GS_SRV_TMPL_NAME
};

const char *gs_srv_tmpl_name(enum gs_srv_tmpl t)
{
    return (unsigned)t < GS_SRV_TMPL_COUNT ? names[t] : "?";
}

enum gs_status gs_srv_tmpl_from_name(const char *name, enum gs_srv_tmpl *out)
{
    for (int t = 0; t < GS_SRV_TMPL_COUNT; t++)
        if (!strcmp(name, names[t])) {
            *out = (enum gs_srv_tmpl)t;
            return GS_OK;
        }
    return GS_NOTFOUND;
}

/* Markers that identify a family in Jinja text; every marker of a row must
 * occur. Rows are tried in order, so the more specific come first. */
static const struct {
    enum gs_srv_tmpl t;
    const char *all[2];
} markers[] = {
    {GS_SRV_TMPL_CHATML, {"<|im_start|>", NULL}},
    {GS_SRV_TMPL_LLAMA3, {"<|start_header_id|>", NULL}},
    {GS_SRV_TMPL_GEMMA4, {"<|turn>", "<turn|>"}},
    {GS_SRV_TMPL_GEMMA, {"<start_of_turn>", NULL}},
    {GS_SRV_TMPL_PHI3, {"<|assistant|>", "<|end|>"}},
    {GS_SRV_TMPL_ZEPHYR, {"<|user|>", NULL}},
    {GS_SRV_TMPL_LLAMA2, {"[INST]", "<<SYS>>"}},
    {GS_SRV_TMPL_MISTRAL, {"[INST]", NULL}},
};

enum gs_srv_tmpl gs_srv_tmpl_detect(const char *jinja)
{
    if (!jinja)
        return GS_SRV_TMPL_PLAIN;
    for (size_t i = 0; i < GS_ARRAY_LEN(markers); i++) {
        bool all = true;
        for (size_t k = 0; k < 2 && markers[i].all[k]; k++)
            all = all && strstr(jinja, markers[i].all[k]);
        if (all)
            return markers[i].t;
    }
    return GS_SRV_TMPL_PLAIN;
}

/* Families whose turns are "<open><role><sep><content><close>". The role may
 * be renamed (gemma calls the assistant "model"). */
static const struct {
    const char *open, *sep, *close, *assistant_role;
    bool system_into_user; /* no system role: prepend it to the first user turn */
} turn_fmt[GS_SRV_TMPL_COUNT] = {
    [GS_SRV_TMPL_CHATML] = {"<|im_start|>", "\n", "<|im_end|>\n", "assistant", false},
    [GS_SRV_TMPL_LLAMA3] = {"<|start_header_id|>", "<|end_header_id|>\n\n", "<|eot_id|>",
                            "assistant", false},
    [GS_SRV_TMPL_GEMMA4] = {"<|turn>", "\n", "<turn|>\n", "model", false},
    [GS_SRV_TMPL_GEMMA] = {"<start_of_turn>", "\n", "<end_of_turn>\n", "model", true},
    [GS_SRV_TMPL_PHI3] = {"<|", "|>\n", "<|end|>\n", "assistant", false},
    [GS_SRV_TMPL_ZEPHYR] = {"<|", "|>\n", "</s>\n", "assistant", false},
    [GS_SRV_TMPL_PLAIN] = {"", ": ", "\n", "assistant", false},
};

/* The rendered prompt being written: text, and where the template wrote it. */
struct out {
    struct gs_srv_buf *text;
    struct gs_srv_spans *spans; /* NULL: text only */
};

void gs_srv_spans_free(struct gs_srv_spans *s)
{
    gs_free(s->v);
    *s = (struct gs_srv_spans){0};
}

/* Text the template writes: control tokens may be recognised in it. */
static void put_tmpl(struct out *o, const char *s)
{
    size_t at = o->text->len, n = strlen(s);
    gs_srv_buf_adds(o->text, s);
    struct gs_srv_spans *sp = o->spans;
    if (!sp || n == 0 || sp->failed || o->text->failed)
        return;
    if (sp->n > 0 && sp->v[sp->n - 1].off + sp->v[sp->n - 1].len == at) {
        sp->v[sp->n - 1].len += n;
        return;
    }
    if (sp->n == sp->cap) {
        size_t cap = sp->cap ? sp->cap * 2 : 16;
        struct gs_tok_span *v = gs_realloc(sp->v, cap * sizeof(*v));
        if (!v) {
            sp->failed = true;
            return;
        }
        sp->v = v;
        sp->cap = cap;
    }
    sp->v[sp->n++] = (struct gs_tok_span){at, n};
}

/* Text a client sent: always plain text. */
static void put_user(struct out *o, const char *s)
{
    gs_srv_buf_adds(o->text, s);
}

static void render_turns(enum gs_srv_tmpl t, const struct gs_srv_msg *msgs, size_t n,
                         struct out *out)
{
    const char *pending_system = NULL;
    for (size_t i = 0; i < n; i++) {
        const char *role = msgs[i].role;
        if (turn_fmt[t].system_into_user && !strcmp(role, "system")) {
            pending_system = msgs[i].content;
            continue;
        }
        if (!strcmp(role, "assistant"))
            role = turn_fmt[t].assistant_role;
        /* Roles are one of the parser's fixed names, so template text. */
        put_tmpl(out, turn_fmt[t].open);
        put_tmpl(out, role);
        put_tmpl(out, turn_fmt[t].sep);
        if (pending_system && !strcmp(msgs[i].role, "user")) {
            put_user(out, pending_system);
            put_tmpl(out, "\n\n");
            pending_system = NULL;
        }
        put_user(out, msgs[i].content);
        put_tmpl(out, turn_fmt[t].close);
    }
    /* A system text with no user turn after it (a chat of system messages
     * only) would otherwise vanish: it becomes a user turn of its own. */
    if (pending_system) {
        put_tmpl(out, turn_fmt[t].open);
        put_tmpl(out, "user");
        put_tmpl(out, turn_fmt[t].sep);
        put_user(out, pending_system);
        put_tmpl(out, turn_fmt[t].close);
    }
    put_tmpl(out, turn_fmt[t].open);
    put_tmpl(out, turn_fmt[t].assistant_role);
    /* The plain format ends "assistant:" so that the model writes the text. */
    put_tmpl(out, t == GS_SRV_TMPL_PLAIN ? ":" : turn_fmt[t].sep);
}

/* Llama 2 and Mistral: user turns inside [INST] ... [/INST], the system text
 * inside the first one (Llama 2 wraps it in <<SYS>>), answers closed by </s>. */
static void render_inst_user(enum gs_srv_tmpl t, const char *system, const char *content,
                             struct out *out)
{
    put_tmpl(out, "[INST] ");
    if (system) {
        if (t == GS_SRV_TMPL_LLAMA2) {
            put_tmpl(out, "<<SYS>>\n");
            put_user(out, system);
            put_tmpl(out, "\n<</SYS>>\n\n");
        } else {
            put_user(out, system);
            put_tmpl(out, "\n\n");
        }
    }
    put_user(out, content);
    put_tmpl(out, " [/INST]");
}

static void render_inst(enum gs_srv_tmpl t, const struct gs_srv_msg *msgs, size_t n,
                        struct out *out)
{
    const char *system = NULL;
    bool first = true;
    for (size_t i = 0; i < n; i++) {
        const char *role = msgs[i].role;
        if (!strcmp(role, "system")) {
            system = msgs[i].content;
        } else if (!strcmp(role, "assistant")) {
            put_tmpl(out, t == GS_SRV_TMPL_LLAMA2 ? " " : "");
            put_user(out, msgs[i].content);
            put_tmpl(out, t == GS_SRV_TMPL_LLAMA2 ? " </s><s>" : "</s>");
        } else {
            render_inst_user(t, first ? system : NULL, msgs[i].content, out);
            first = false;
        }
    }
    /* With no user turn at all the system text would vanish and the prompt
     * be empty: it gets an [INST] of its own. */
    if (first && system)
        render_inst_user(t, system, "", out);
}

void gs_srv_tmpl_render_spans(enum gs_srv_tmpl t, const struct gs_srv_msg *msgs, size_t n,
                              struct gs_srv_buf *text, struct gs_srv_spans *spans)
{
    struct out out = {text, spans};
    if (t == GS_SRV_TMPL_LLAMA2 || t == GS_SRV_TMPL_MISTRAL)
        render_inst(t, msgs, n, &out);
    else if ((unsigned)t < GS_SRV_TMPL_COUNT)
        render_turns(t, msgs, n, &out);
}

void gs_srv_tmpl_render(enum gs_srv_tmpl t, const struct gs_srv_msg *msgs, size_t n,
                        struct gs_srv_buf *out)
{
    gs_srv_tmpl_render_spans(t, msgs, n, out, NULL);
}
