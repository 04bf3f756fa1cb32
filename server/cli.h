/*
 * server/cli.h - `graphserve serve`, the daemon's command (server/cmd/serve.c).
 * It has main()'s signature like the tools of tools/tools.h, and main.c's
 * command table lists it first.
 */
#ifndef GS_CLI_H
#define GS_CLI_H

int gs_cmd_serve(int argc, char **argv);

#endif /* GS_CLI_H */
