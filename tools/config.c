/*
 * tools/config.c - `graphserve config check FILE | print [options] |
 * reference`: validate a config file without starting the daemon, show the
 * effective config that `serve` would run with (secrets masked), or print the
 * option reference as Markdown for the README.
 */
#include "config/config.h"
#include "tools/internal.h"

#include <stdio.h>
#include <string.h>

static const char usage[] =
    "check FILE | print [serve options] | reference\n"
    "  check FILE        validate a JSON config file (keys, types, ranges, files it names)\n"
    "                    without starting; flags and GRAPHSERVE_* variables are not read\n"
    "  print [options]   print the effective config that `serve` would use with these\n"
    "                    options and the environment, secrets masked\n"
    "  reference         print every option as a Markdown table\n";

int gs_cmd_config(int argc, char **argv)
{
    if (argc < 2)
        return gs_cli_usage("config", usage);
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        printf("usage: graphserve config %s", usage);
        return 0;
    }
    struct gs_err err;
    if (!strcmp(argv[1], "check")) {
        if (argc != 3)
            return gs_cli_usage("config", usage);
        if (gs_cfg_check_file(argv[2], &err))
            return gs_cli_fail("config", "%s", err.msg);
        printf("%s: ok\n", argv[2]);
        return 0;
    }
    if (!strcmp(argv[1], "print")) {
        struct gs_cfg cfg;
        /* argv + 1: "print" takes the place of "serve" as the command name. */
        if (gs_cfg_load(&cfg, argc - 1, argv + 1, NULL, &err))
            return gs_cli_fail("config", "%s", err.msg);
        bool ok = true;
        if (cfg.action == GS_CFG_HELP)
            gs_cfg_help(stdout);
        else if (cfg.action == GS_CFG_HELP_MARKDOWN)
            gs_cfg_help_markdown(stdout);
        else
            ok = gs_cfg_print(&cfg, stdout);
        gs_cfg_deinit(&cfg);
        return ok ? 0 : gs_cli_fail("config", "cannot print the config");
    }
    if (!strcmp(argv[1], "reference") && argc == 2) {
        gs_cfg_help_markdown(stdout);
        return 0;
    }
    return gs_cli_usage("config", usage);
}
