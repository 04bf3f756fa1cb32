/*
 * tools/internal.h - shared between the files of tools/ only: each tool's
 * entry point and option spec, listed in tools.c's table and defined in
 * tools/<name>.c.
 */
#ifndef GS_TOOLS_INTERNAL_H
#define GS_TOOLS_INTERNAL_H

#include "config/cli.h"
#include "engine/quant.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
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

/* The types `quantize` and `train --type` write a model's matrices in: name, engine
 * type and llama.cpp's general.file_type (its llama_ftype) for a file of that type. */
#define GS_TOOL_FILE_TYPES(X)                                                                      \
    X("q4_0", GS_TYPE_Q4_0, 2)                                                                     \
    X("q4_1", GS_TYPE_Q4_1, 3)                                                                     \
    X("q5_0", GS_TYPE_Q5_0, 8)                                                                     \
    X("q5_1", GS_TYPE_Q5_1, 9)                                                                     \
    X("q8_0", GS_TYPE_Q8_0, 7)                                                                     \
    X("q2_K", GS_TYPE_Q2_K, 10)                                                                    \
    X("q3_K", GS_TYPE_Q3_K, 11)                                                                    \
    X("q4_K", GS_TYPE_Q4_K, 14)                                                                    \
    X("q5_K", GS_TYPE_Q5_K, 16)                                                                    \
    X("q6_K", GS_TYPE_Q6_K, 18)                                                                    \
    X("f16", GS_TYPE_F16, 1)                                                                       \
    X("bf16", GS_TYPE_BF16, 32)                                                                    \
    X("f32", GS_TYPE_F32, 0)
/* GS_TOOL_FILE_TYPES's names, NULL-terminated (an enum option's choices), and its
 * rows in the same order. */
extern const char *const gs_tool_file_type_names[];
struct gs_tool_file_type {
    enum gs_type type;
    uint32_t ftype;
};
extern const struct gs_tool_file_type gs_tool_file_types[];

/*
 * Writes `in` to out_path with its weight matrices in `type` (a GS_TOOL_FILE_TYPES
 * type), by llama.cpp's llama-quantize rules (tools/quantize.c says which tensors
 * change and their fallbacks; pure: none for the output matrix). Metadata is copied
 * key by key but general.file_type and general.quantization_version, which are set.
 * *n_changed (may be NULL) gets how many tensors changed type. Sources must be
 * f32, f16 or bf16 tensors; err names the tensor that is not.
 */
struct gs_gguf;
enum gs_status gs_tool_quantize(const struct gs_gguf *in, const char *out_path, enum gs_type type,
                                bool pure, uint64_t *n_changed, struct gs_err *err);

#endif /* GS_TOOLS_INTERNAL_H */
