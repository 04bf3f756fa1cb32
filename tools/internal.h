/*
 * tools/internal.h - shared between the files of tools/ only: each tool's
 * entry point and option spec, listed in tools.c's table and defined in
 * tools/<name>.c.
 */
#ifndef GS_TOOLS_INTERNAL_H
#define GS_TOOLS_INTERNAL_H

#include "config/cli.h"
#include "engine/quant.h"

#include <stddef.h>
#include <stdio.h>

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

extern const struct gs_cli_spec gs_inspect_spec;
extern const struct gs_cli_spec gs_synth_spec;
extern const struct gs_cli_spec gs_train_spec;
extern const struct gs_cli_spec gs_tokenize_spec;
extern const struct gs_cli_spec gs_graph_spec;
extern const struct gs_cli_spec gs_run_spec;
extern const struct gs_cli_spec gs_validate_spec;
extern const struct gs_cli_spec gs_config_spec;
extern const struct gs_cli_spec gs_bench_spec;
extern const struct gs_cli_spec gs_quantize_spec;
extern const struct gs_cli_spec gs_template_spec;

/* ---- option rows several tools share (config/cli.h) ---------------------------
 * One row each, so that the flag, its range and its help read the same in
 * every tool that has it. T is the tool's options struct, F the field. */

/* -m/--model FILE (const char *), required. */
#define GS_TOOL_OPT_MODEL(T, F)                                                                    \
    {                                                                                              \
        "model", 'm', GS_CFG_STR, offsetof(T, F), NULL, NULL, 0, 0, NULL,                          \
            GS_CFG_F_PATH | GS_CFG_F_REQUIRED, NULL, "GGUF model file."                            \
    }
/* --backend NAME (const char *): the engine refuses a name it does not have. */
#define GS_TOOL_OPT_BACKEND(T, F, DEF)                                                             \
    {                                                                                              \
        "backend", 0, GS_CFG_STR, offsetof(T, F), NULL, DEF, 0, 0, NULL, 0, NULL,                  \
            "Compute backend: cpu (SIMD kernels, worker threads) or ref, the scalar oracle."       \
    }
/* -t/--threads N (int64_t). */
#define GS_TOOL_OPT_THREADS(T, F)                                                                  \
    {                                                                                              \
        "threads", 't', GS_CFG_INT, offsetof(T, F), NULL, "0", 0, 1024, NULL, 0, NULL,             \
            "Backend worker threads; 0 uses one per physical core."                                \
    }
/* --kv-type f16|f32|q8_0 (int: an index into gs_tool_kv_types; config.h's GS_CFG_KV_TYPES). */
#define GS_TOOL_OPT_KV_TYPE(T, F)                                                                  \
    {                                                                                              \
        "kv-type", 0, GS_CFG_ENUM, offsetof(T, F), NULL, "f16", 0, 0, gs_tool_kv_type_names, 0,    \
            NULL, "Element type of cached keys and values (q8_0: 34 bytes per 32)."                \
    }

/* The KV element types a tool offers, names and engine types in one order. */
extern const char *const gs_tool_kv_type_names[]; /* "f16", "f32", "q8_0", NULL */
extern const enum gs_type gs_tool_kv_types[];     /* the same order: GS_TYPE_F16, ... */
/* The whole of stream f (a file, stdin), *len its bytes; NULL on a read error or out of
 * memory. The caller frees it with gs_free. */
char *gs_tool_read_all(FILE *f, size_t *len);

#endif /* GS_TOOLS_INTERNAL_H */
