/*
 * tools/internal.h - shared between the files of tools/ only: each tool's
 * entry point, listed in tools.c's table and defined in tools/<name>.c.
 */
#ifndef GS_TOOLS_INTERNAL_H
#define GS_TOOLS_INTERNAL_H

#include "config/cli.h"

int gs_cmd_inspect(int argc, char **argv);
int gs_cmd_synth(int argc, char **argv);
int gs_cmd_train(int argc, char **argv);
int gs_cmd_tokenize(int argc, char **argv);
int gs_cmd_graph(int argc, char **argv);
int gs_cmd_run(int argc, char **argv);
int gs_cmd_validate(int argc, char **argv);
int gs_cmd_config(int argc, char **argv);
int gs_cmd_bench(int argc, char **argv);
int gs_cmd_quantize(int argc, char **argv);
int gs_cmd_template(int argc, char **argv);

#endif /* GS_TOOLS_INTERNAL_H */
