/*
 * config/internal.h - shared between the files of config/ only.
 */
#ifndef GS_CONFIG_INTERNAL_H
#define GS_CONFIG_INTERNAL_H

#include "config/config.h"

#include <jansson.h>

/* Where an option's value came from, in increasing precedence. */
enum gs_cfg__src {
    GS_CFG__SRC_DEFAULT = 0,
    GS_CFG__SRC_FILE,
    GS_CFG__SRC_ENV,
    GS_CFG__SRC_FLAG,
};

/* Index of o in the table. */
size_t gs_cfg__index(const struct gs_cfg_opt *o);

/* The environment-variable and file-key spellings of an option's name,
 * written into buf (cap >= 64); returns buf. */
const char *gs_cfg__env_name(const struct gs_cfg_opt *o, char *buf, size_t cap);
const char *gs_cfg__file_key(const struct gs_cfg_opt *o, char *buf, size_t cap);

/* The option whose table name is within a few edits of name, for "did you
 * mean" hints; NULL if none is close. style: 0 table name, 1 file key. */
const struct gs_cfg_opt *gs_cfg__suggest(const char *name, int style);

/* Sets a scalar option (not a list) from text, as a flag or env value.
 * where names the source for the message ("--port", "env GRAPHSERVE_PORT").
 * Empty text unsets a string option. base is the struct the row's offset is
 * into: a struct gs_cfg for serve's table, a command's options struct for a
 * tool's (config/cli.h), so every command checks values with this code. */
enum gs_status gs_cfg__set_text(void *base, const struct gs_cfg_opt *o, const char *text,
                                const char *where, struct gs_err *err);

/* Appends a copy of s to a list option, skipping duplicates. */
enum gs_status gs_cfg__list_add(struct gs_cfg_strlist *l, const char *s, struct gs_err *err);
void gs_cfg__list_clear(struct gs_cfg_strlist *l);

/* Sets an option from a JSON value of a config file; where is "file:line". */
enum gs_status gs_cfg__set_json(struct gs_cfg *cfg, const struct gs_cfg_opt *o, json_t *v,
                                const char *where, struct gs_err *err);

/* Parses a byte size ("512MiB", "2G", "65536"). False if malformed or over
 * UINT64_MAX. */
bool gs_cfg__parse_bytes(const char *s, uint64_t *out);

/* Formats a byte count with the largest exact binary unit ("2MiB", "1000"). */
void gs_cfg__format_bytes(uint64_t v, char *buf, size_t cap);

/* Field access by table row; base as for gs_cfg__set_text. */
void *gs_cfg__field(void *base, const struct gs_cfg_opt *o);
const void *gs_cfg__cfield(const struct gs_cfg *cfg, const struct gs_cfg_opt *o);
size_t gs_cfg__field_size(const struct gs_cfg_opt *o);

/* Frees the value of one option and resets it to zero. */
void gs_cfg__field_clear(struct gs_cfg *cfg, const struct gs_cfg_opt *o);

/* True when option o holds the same value in a and b. */
bool gs_cfg__field_equal(const struct gs_cfg *a, const struct gs_cfg *b,
                         const struct gs_cfg_opt *o);

/* Pieces of --help shared by serve's (output.c) and the tools' (cli.c): the
 * placeholder after a flag ("N", "FILE", "ref|cpu"), the default as text, the
 * range as "0..1024" ("" without one), and text wrapped from column col to
 * the help column (returns the column it ended at). */
void gs_cfg__metavar(const struct gs_cfg_opt *o, char *buf, size_t cap);
void gs_cfg__fmt_default(const struct gs_cfg_opt *o, char *buf, size_t cap);
void gs_cfg__fmt_help_range(const struct gs_cfg_opt *o, char *buf, size_t cap);
size_t gs_cfg__wrap(FILE *f, const char *text, size_t col);
#define GS_CFG__HELP_INDENT 32

/* The name of choice i of an enum option ("?" if out of range). */
const char *gs_cfg__choice(const struct gs_cfg_opt *o, int i);

#endif /* GS_CONFIG_INTERNAL_H */
