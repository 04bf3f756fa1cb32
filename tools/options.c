/*
 * tools/options.c - option values and helpers several tools share (tools/internal.h).
 * Apart from tools.c, whose table names every tool: a tool reading these
 * would otherwise call back into the file that calls it.
 */
#include "tools/internal.h"

#include <stdint.h>
#include <stdio.h>

const char *const gs_tool_kv_type_names[] = {
#define KV_TYPE_NAME(name, ID) name,
    GS_CFG_KV_TYPES(KV_TYPE_NAME)
#undef KV_TYPE_NAME
        NULL,
};
const enum gs_type gs_tool_kv_types[] = {
#define KV_TYPE_OF(name, ID) GS_TYPE_##ID,
    GS_CFG_KV_TYPES(KV_TYPE_OF)
#undef KV_TYPE_OF
};

#define GS_TOOL_FILE_TYPE_NAME(name, type, ftype) name,
const char *const gs_tool_file_type_names[] = {GS_TOOL_FILE_TYPES(GS_TOOL_FILE_TYPE_NAME) NULL};
#undef GS_TOOL_FILE_TYPE_NAME
#define GS_TOOL_FILE_TYPE_ROW(name, type, ftype) {type, ftype},
const struct gs_tool_file_type gs_tool_file_types[] = {GS_TOOL_FILE_TYPES(GS_TOOL_FILE_TYPE_ROW)};
#undef GS_TOOL_FILE_TYPE_ROW

char *gs_tool_read_all(FILE *f, size_t *len)
{
    size_t cap = 4096, n = 0;
    char *buf = gs_malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        char *grown = cap <= SIZE_MAX / 2 ? gs_realloc(buf, cap * 2) : NULL;
        if (!grown) {
            gs_free(buf);
            return NULL;
        }
        buf = grown;
        cap *= 2;
    }
    if (buf && ferror(f)) {
        gs_free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}
