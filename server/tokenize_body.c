/*
 * server/tokenize_body.c - the /tokenize and /detokenize bodies, parsed and
 * checked into plain values. Pure functions with no I/O: routes.c answers
 * with what they return, and tests/fuzz/fuzz_request.c feeds them anything.
 */
#include "server/internal.h"

#include <stdio.h>

/* Names the refused field in param ("" for the body as a whole) and returns
 * GS_INVAL with the message. */
__attribute__((format(printf, 5, 6))) static enum gs_status
fail(char *param, size_t param_cap, const char *field, struct gs_err *err, const char *fmt, ...)
{
    if (param_cap)
        snprintf(param, param_cap, "%s", field);
    va_list ap;
    va_start(ap, fmt);
    char msg[GS_ERR_MSG_LEN];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return gs_err_set(err, GS_INVAL, "%s", msg);
}

/* The body as a JSON object (a new reference), or NULL with err set. Unlike
 * a generation body, duplicate keys are accepted (the last one wins). */
static json_t *body_object(const char *body, size_t len, char *param, size_t param_cap,
                           struct gs_err *err)
{
    json_error_t je;
    json_t *root = json_loadb(body, len, 0, &je);
    if (!root) {
        fail(param, param_cap, "", err, "malformed JSON at line %d, column %d: %s", je.line,
             je.column, je.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        fail(param, param_cap, "", err, "the request body must be a JSON object");
        return NULL;
    }
    return root;
}

enum gs_status gs_srv_tokenize_parse(const char *body, size_t len, struct gs_srv_tokenize_req *out,
                                     char *param, size_t param_cap, struct gs_err *err)
{
    *out = (struct gs_srv_tokenize_req){0};
    if (param_cap)
        param[0] = '\0';
    json_t *root = body_object(body, len, param, param_cap, err);
    if (!root)
        return GS_INVAL;
    enum gs_status st = GS_OK;
    json_t *content = json_object_get(root, "content");
    json_t *add = json_object_get(root, "add_special"),
           *parse = json_object_get(root, "parse_special");
    json_t *pieces = json_object_get(root, "with_pieces");
    if (!json_is_string(content)) {
        st = fail(param, param_cap, "content", err, "'content' must be a string");
        goto out;
    }
    if ((add && !json_is_boolean(add)) || (parse && !json_is_boolean(parse)) ||
        (pieces && !json_is_boolean(pieces))) {
        st = fail(param, param_cap, "", err,
                  "'add_special', 'parse_special' and 'with_pieces' are booleans");
        goto out;
    }
    /* Special tokens are recognised unless the client says not to, as in
     * llama.cpp's server. */
    out->flags = (json_is_true(add) ? GS_TOK_ADD_SPECIAL : 0) |
                 (!parse || json_is_true(parse) ? GS_TOK_PARSE_SPECIAL : 0);
    out->with_pieces = json_is_true(pieces);
    gs_srv_buf_add(&out->content, json_string_value(content), json_string_length(content));
    if (out->content.failed)
        st = gs_err_set(err, GS_NOMEM, "out of memory");
out:
    json_decref(root);
    return st;
}

void gs_srv_tokenize_req_free(struct gs_srv_tokenize_req *t)
{
    gs_srv_buf_free(&t->content);
    *t = (struct gs_srv_tokenize_req){0};
}

enum gs_status gs_srv_detokenize_parse(const char *body, size_t len, uint32_t n_vocab,
                                       int32_t **ids, size_t *n_ids, char *param, size_t param_cap,
                                       struct gs_err *err)
{
    *ids = NULL;
    *n_ids = 0;
    if (param_cap)
        param[0] = '\0';
    json_t *root = body_object(body, len, param, param_cap, err);
    if (!root)
        return GS_INVAL;
    enum gs_status st = GS_OK;
    json_t *toks = json_object_get(root, "tokens");
    if (!json_is_array(toks)) {
        st = fail(param, param_cap, "tokens", err, "'tokens' must be an array of token ids");
        goto out;
    }
    size_t n = json_array_size(toks);
    int32_t *v = gs_alloc_array(n ? n : 1, sizeof(*v));
    if (!v) {
        st = gs_err_set(err, GS_NOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(toks, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 ||
            json_integer_value(t) >= (json_int_t)n_vocab) {
            gs_free(v);
            st = fail(param, param_cap, "tokens", err, "'tokens[%zu]' is not a token id in [0, %u)",
                      i, n_vocab);
            goto out;
        }
        v[i] = (int32_t)json_integer_value(t);
    }
    *ids = v;
    *n_ids = n;
out:
    json_decref(root);
    return st;
}
