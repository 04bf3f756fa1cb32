/*
 * tools/validate_server.h - `graphserve validate --server URL`: runs a
 * prompt set against a running daemon with validation on and prints each
 * answer's figures and a summary.
 */
#ifndef GS_CMD_VALIDATE_SERVER_H
#define GS_CMD_VALIDATE_SERVER_H

#include <stdbool.h>

/* Whether argv asks for the --server mode. */
bool gs_validate_server_wanted(int argc, char **argv);

/* The mode's main(); exit status 0 when every answer passed, 1 when one
 * failed or could not be had, 2 on a usage error. */
int gs_validate_server(int argc, char **argv);

#endif
