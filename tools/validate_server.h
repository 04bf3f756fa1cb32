/*
 * tools/validate_server.h - `graphserve validate --server URL`: runs a
 * prompt set against a running daemon with validation on and prints each
 * answer's figures and a summary. validate.c's option table reads the
 * options; this is the mode's body.
 */
#ifndef GS_TOOLS_VALIDATE_SERVER_H
#define GS_TOOLS_VALIDATE_SERVER_H

#include "config/cli.h"

#include <stdbool.h>
#include <stdint.h>

struct gs_validate_server_opts {
    const char *server;  /* "http://HOST[:PORT]" */
    const char *api_key; /* Bearer key, or NULL */
    const struct gs_cli_list *prompts; /* -p values; with no file either, built-in prompts */
    const char *prompts_file;          /* one prompt per line, or NULL */
    int64_t max_tokens, timeout_s;
    bool json;
};

/* The mode's main(); exit status 0 when every answer passed, 1 when one
 * failed or could not be had, 2 on a usage error (a malformed URL). */
int gs_validate_server(const struct gs_validate_server_opts *opts);

#endif /* GS_TOOLS_VALIDATE_SERVER_H */
