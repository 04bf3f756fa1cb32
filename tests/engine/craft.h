/*
 * tests/engine/craft.h - tensors for the model files the metadata suites craft
 * by hand: deterministic F32 values, so a file that loads builds the same graph
 * every run. Failures are Criterion assertions.
 */
#ifndef GS_TEST_CRAFT_H
#define GS_TEST_CRAFT_H

#include "engine/gguf.h"

#include <stdint.h>

/* Adds F32 tensor `name` of ne0 x ne1 (1-D when ne1 is 1) to w. */
void craft_f32_tensor(struct gs_gguf_writer *w, const char *name, int64_t ne0, int64_t ne1);

#endif
