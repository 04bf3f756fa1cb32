/* server/main.c - graphserve's entry point: dispatches to a command. */
#include "server/cli.h"

#include <stdio.h>
#include <string.h>

struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
};

static const struct command commands[] = {
    {"serve", gs_cmd_serve, "run the OpenAI-compatible HTTP daemon"},
    {"inspect", gs_cmd_inspect, "print a GGUF file's metadata and tensor table"},
    {"synth", gs_cmd_synth, "write a GGUF of any supported family with random weights"},
    {"train", gs_cmd_train, "train a Llama-architecture model on a text file (F32 GGUF out)"},
    {"tokenize", gs_cmd_tokenize, "print the token ids and pieces a model gives for a text"},
    {"graph", gs_cmd_graph, "print a model's forward-pass graph before/after rewrite passes"},
    {"run", gs_cmd_run, "generate from one or several prompts (batched) on the command line"},
    {"validate", gs_cmd_validate, "compare a backend's logits with golden logits"},
    {"config", gs_cmd_config, "validate a config file; print the effective config or reference"},
    {"bench", gs_cmd_bench, "measure prompt and generation tokens/s and peak memory"},
    {"quantize", gs_cmd_quantize, "rewrite a GGUF file with its weight matrices in another type"},
    {"template", gs_cmd_template, "render a Jinja chat template with a JSON conversation"},
};

static void print_usage(FILE *f)
{
    fprintf(f, "usage: graphserve <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
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
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (!strcmp(argv[1], commands[i].name))
            return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "graphserve: unknown command '%s'\n", argv[1]);
    print_usage(stderr);
    return 2;
}
