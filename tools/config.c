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

/* The subcommands; `print` hands the rest of the line to serve's own table
 * (gs_cfg_load), so it takes exactly serve's options. */
const struct gs_cli_spec gs_config_spec = {
    .cmd = "config",
    .synopsis = "check FILE | print [serve options] | reference",
    .about = "  check FILE        validate a JSON config file (keys, types, ranges, files it\n"
             "                    names) without starting; flags and GRAPHSERVE_* variables\n"
             "                    are not read\n"
             "  print [options]   print the effective config that `serve` would use with these\n"
             "                    options and the environment, secrets masked\n"
             "  reference         print every option as a Markdown table\n",
    .max_args = 2,
};

/* `config check FILE` and `config reference` take no options: positional
 * arguments only, counted by their specs. */
static const struct gs_cli_spec check_spec = {
    .cmd = "config check", .synopsis = "FILE", .min_args = 1, .max_args = 1,
};
static const struct gs_cli_spec reference_spec = {.cmd = "config reference", .synopsis = ""};

int gs_cmd_config(int argc, char **argv)
{
    struct gs_cli_args args;
    const char *sub = argc > 1 ? argv[1] : "";
    if (!strcmp(sub, "print")) {
        struct gs_err err;
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
    const struct gs_cli_spec *sp = !strcmp(sub, "check")       ? &check_spec
                                   : !strcmp(sub, "reference") ? &reference_spec
                                                               : &gs_config_spec;
    /* A subcommand's own line starts at its name, as a command's starts at its. */
    int rc = sp == &gs_config_spec ? gs_cli_begin(sp, NULL, argc, argv, &args)
                         : gs_cli_begin(sp, NULL, argc - 1, argv + 1, &args);
    if (rc >= 0)
        return rc;
    if (sp == &check_spec) {
        struct gs_err err;
        if (gs_cfg_check_file(args.args[0], &err))
            return gs_cli_fail("config", "%s", err.msg);
        printf("%s: ok\n", args.args[0]);
        return 0;
    }
    if (sp == &reference_spec) {
        gs_cfg_help_markdown(stdout);
        return 0;
    }
    if (args.n_args)
        gs_cli_fail("config", "unknown subcommand '%s'", args.args[0]);
    else
        gs_cli_fail("config", "expects a subcommand");
    return gs_cli_usage("config", gs_config_spec.synopsis);
}
