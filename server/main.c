/*
 * server/main.c - graphserve's entry point: dispatches to a command. The
 * command table is `serve` (the daemon, this module) followed by the engine
 * tools' own table (tools/tools.h), so adding a tool touches tools/ only.
 */
#include "server/cli.h"
#include "tools/tools.h"

#include <stdio.h>
#include <string.h>

/* serve's options are config/'s own table (gs_cfg_opts), not a tool spec. */
static const struct gs_tool serve = {"serve", gs_cmd_serve, NULL,
                                     "run the OpenAI-compatible HTTP daemon"};

static void print_usage(FILE *f)
{
    size_t n;
    const struct gs_tool *tools = gs_tools(&n);
    fprintf(f, "usage: graphserve <command> [options]\n\ncommands:\n");
    fprintf(f, "  %-10s %s\n", serve.name, serve.help);
    for (size_t i = 0; i < n; i++)
        fprintf(f, "  %-10s %s\n", tools[i].name, tools[i].help);
    fprintf(f, "\n'graphserve <command> --help' describes a command.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        print_usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        print_usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("graphserve 0.1.0\n");
        return 0;
    }
    if (!strcmp(argv[1], serve.name))
        return serve.run(argc - 1, argv + 1);
    size_t n;
    const struct gs_tool *tools = gs_tools(&n);
    for (size_t i = 0; i < n; i++)
        if (!strcmp(argv[1], tools[i].name))
            return tools[i].run(argc - 1, argv + 1);
    fprintf(stderr, "graphserve: unknown command '%s'\n", argv[1]);
    print_usage(stderr);
    return 2;
}
