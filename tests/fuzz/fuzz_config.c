/*
 * tests/fuzz/fuzz_config.c - a JSON config file (--config FILE,
 * GRAPHSERVE_CONFIG, `graphserve config check FILE`) with any bytes in it:
 * gs_cfg_check_file and gs_cfg_load read it from a temporary file, as the
 * daemon does, with no other flags and an empty environment.
 *
 * Invariants: a refusal has a message; the two entry points agree on
 * whether the file is good; and an accepted file saved back through
 * gs_cfg_to_json (what --print-config writes, unmasked) loads again to the
 * same config.
 */
#include "config/config.h"
#include "tests/fuzz/fuzz.h"

#include <jansson.h>
#include <string.h>
#include <unistd.h>

static char paths[2][4096]; /* the input, and the config saved back */

static void remove_files(void)
{
    for (int i = 0; i < 2; i++)
        if (paths[i][0])
            unlink(paths[i]);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *dir = getenv("TMPDIR");
    for (int i = 0; i < 2; i++) {
        snprintf(paths[i], sizeof(paths[i]), "%s/gs_fuzz_config_XXXXXX", dir && *dir ? dir : "/tmp");
        int fd = mkstemp(paths[i]);
        FUZZ_CHECK(fd >= 0, "cannot create %s", paths[i]);
        close(fd);
    }
    atexit(remove_files);
    return 0;
}

static void write_file(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    FUZZ_CHECK(f && fwrite(data, 1, size, f) == size && fclose(f) == 0, "cannot write %s", path);
}

/* gs_cfg_load with --config path, nothing else. */
static enum gs_status load(struct gs_cfg *cfg, const char *path, struct gs_err *err)
{
    char *argv[] = {"serve", "--config", (char *)path, NULL};
    char *envp[] = {NULL};
    return gs_cfg_load(cfg, 3, argv, envp, err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    write_file(paths[0], data, size);

    struct gs_err err = {0};
    enum gs_status checked = gs_cfg_check_file(paths[0], &err);
    FUZZ_CHECK(checked == GS_OK || err.msg[0], "check refused (status %d) without a message",
               (int)checked);

    struct gs_cfg cfg;
    err = (struct gs_err){0};
    enum gs_status st = load(&cfg, paths[0], &err);
    FUZZ_CHECK((st == GS_OK) == (checked == GS_OK), "check says %d, load says %d: %s",
               (int)checked, (int)st, err.msg);
    if (st != GS_OK) {
        FUZZ_CHECK(err.msg[0], "load refused (status %d) without a message", (int)st);
        gs_cfg_deinit(&cfg);
        return 0;
    }

    json_t *saved = gs_cfg_to_json(&cfg, false);
    FUZZ_CHECK(saved, "the config cannot be saved");
    char *text = json_dumps(saved, JSON_INDENT(2));
    FUZZ_CHECK(text, "the saved config does not serialise");
    write_file(paths[1], text, strlen(text));
    free(text);
    struct gs_cfg again;
    err = (struct gs_err){0};
    st = load(&again, paths[1], &err);
    FUZZ_CHECK(st == GS_OK, "the saved config is refused: %s", err.msg);
    json_t *reloaded = gs_cfg_to_json(&again, false);
    FUZZ_CHECK(reloaded && json_equal(saved, reloaded), "the saved config loads differently");
    json_decref(reloaded);
    json_decref(saved);
    gs_cfg_deinit(&again);
    gs_cfg_deinit(&cfg);
    return 0;
}
