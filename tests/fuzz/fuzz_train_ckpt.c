/*
 * tests/fuzz/fuzz_train_ckpt.c - gs_train_load (engine/train.h) on any bytes:
 * a training checkpoint is a file a user hands to `graphserve train --resume`.
 *
 * Invariants: loading succeeds, or fails with GS_INVAL, GS_FORMAT or GS_IO and
 * a message; a load that succeeds read a file of exactly the size the shape
 * implies (every byte accounted for) and left the counters in range.
 */
#include "engine/train.h"
#include "tests/fuzz/fuzz.h"

#include <string.h>
#include <unistd.h>

#define USER_BYTES 16

static struct gs_train *the_state; /* built once, kept (reachable) */
static char the_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* The shape tests/fuzz/corpus/fuzz_train_ckpt's files were written for. */
    const struct gs_train_shape shape = {.n_vocab = 8, .n_embd = 4, .n_layer = 1, .n_head = 2,
                                         .n_head_kv = 2, .n_ff = 4, .block = 2};
    struct gs_train_opt opt = gs_train_opt_default();
    opt.batch = 1;
    struct gs_err err;
    FUZZ_CHECK(gs_train_new(&shape, &opt, "ref", 1, &the_state, &err) == GS_OK, "%s", err.msg);
    snprintf(the_path, sizeof(the_path), "/tmp/fuzz_train_ckpt.%ld", (long)getpid());
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FILE *f = fopen(the_path, "wb");
    FUZZ_CHECK(f && fwrite(data, 1, size, f) == size && fclose(f) == 0, "cannot write %s",
               the_path);
    char user[USER_BYTES];
    struct gs_err err = {0};
    enum gs_status st = gs_train_load(the_state, the_path, user, sizeof(user), &err);
    remove(the_path);
    FUZZ_CHECK(st == GS_OK || st == GS_INVAL || st == GS_FORMAT || st == GS_IO,
               "status %d", (int)st);
    FUZZ_CHECK(st == GS_OK || err.msg[0], "an error without a message");
    if (st == GS_OK) {
        size_t floats = 0;
        for (size_t i = 0; i < gs_train_n_params(the_state); i++) {
            const struct gs_train_param *p = gs_train_param(the_state, i);
            floats += (size_t)(p->ne0 * p->ne1);
        }
        FUZZ_CHECK(size == 8 + 12 * 8 + 4 * floats * 4 + 8 + USER_BYTES, "accepted %zu bytes",
                   size);
        FUZZ_CHECK(gs_train_updates(the_state) >= 0, "negative update count");
    }
    return 0;
}
