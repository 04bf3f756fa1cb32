/*
 * tools/options.c - option values several tools share (tools/internal.h).
 * Apart from tools.c, whose table names every tool: a tool reading these
 * would otherwise call back into the file that calls it.
 */
#include "tools/internal.h"

const char *const gs_tool_kv_type_names[] = {"f16", "f32", NULL};
const enum gs_type gs_tool_kv_types[] = {GS_TYPE_F16, GS_TYPE_F32};
