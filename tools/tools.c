/* tools/tools.c - the table of tools (tools/tools.h). */
#include "tools/tools.h"

#include "tools/internal.h"

static const struct gs_tool tools[] = {
    {"inspect", gs_cmd_inspect, &gs_inspect_spec, "print a GGUF file's metadata and tensor table"},
    {"synth", gs_cmd_synth, &gs_synth_spec,
     "write a GGUF of any supported family with random weights"},
    {"train", gs_cmd_train, &gs_train_spec,
     "train a Llama-architecture model on a text file (GGUF out, F32 or --type)"},
    {"tokenize", gs_cmd_tokenize, &gs_tokenize_spec,
     "print the token ids and pieces a model gives for a text"},
    {"graph", gs_cmd_graph, &gs_graph_spec,
     "print a model's forward-pass graph before/after rewrite passes"},
    {"run", gs_cmd_run, &gs_run_spec,
     "generate from one or several prompts (batched) on the command line"},
    {"validate", gs_cmd_validate, &gs_validate_spec,
     "compare a backend's logits with golden logits"},
    {"config", gs_cmd_config, &gs_config_spec,
     "validate a config file; print the effective config or reference"},
    {"bench", gs_cmd_bench, &gs_bench_spec,
     "measure prompt and generation tokens/s and peak memory"},
    {"quantize", gs_cmd_quantize, &gs_quantize_spec,
     "rewrite a GGUF file with its weight matrices in another type"},
    {"template", gs_cmd_template, &gs_template_spec,
     "render a Jinja chat template with a JSON conversation"},
};

const struct gs_tool *gs_tools(size_t *n)
{
    *n = sizeof(tools) / sizeof(tools[0]);
    return tools;
}
