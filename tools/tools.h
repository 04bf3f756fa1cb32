/*
 * tools/tools.h - graphserve's engine tools: every command of the graphserve
 * executable except `serve` (the daemon, server/). A tool runs the engine (or
 * reads and writes GGUF files, or talks to a daemon over HTTP) on the command
 * line; none of them includes server/.
 *
 * Each tool is a function with main()'s signature: argv[0] is the command's
 * name ("bench"). It prints results to stdout and errors to stderr as
 * "graphserve <name>: <message>", and returns the process exit status: 0 ok,
 * 1 failure, 2 usage error (an unknown option, a bad value, a missing
 * argument). Options come from each tool's option table through config/cli.h,
 * so --help, value checks and their messages are the same in every tool.
 */
#ifndef GS_TOOLS_H
#define GS_TOOLS_H

#include "config/cli.h"

#include <stddef.h>

struct gs_tool {
    const char *name; /* the command word: "bench" */
    int (*run)(int argc, char **argv);
    const struct gs_cli_spec *spec; /* its options (NULL for a command outside tools/) */
    const char *help;               /* one line for `graphserve --help` */
};

/* The tools, in `graphserve --help` order; *n receives their count. The
 * table is static: never NULL, never freed. */
const struct gs_tool *gs_tools(size_t *n);

#endif /* GS_TOOLS_H */
