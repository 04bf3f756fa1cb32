/*
 * engine/digest.h - SHA-256 of files and buffers (mbedTLS), for `inspect
 * --sha256` and the reproducibility receipt a response carries.
 *
 * Reads the file in chunks through a fixed buffer: hashing a model allocates
 * nothing and costs one sequential pass over the file. Thread-safe.
 */
#ifndef GS_DIGEST_H
#define GS_DIGEST_H

#include "engine/base.h"

#include <mbedtls/sha256.h>

#define GS_SHA256_BYTES 32
#define GS_SHA256_HEX_LEN 65 /* 64 hex digits and a NUL */

/* A digest computed piece by piece (one pass over data that arrives in
 * chunks, e.g. with a progress bar). Caller-allocated; begin before update. */
struct gs_sha256 {
    mbedtls_sha256_context ctx;
};
void gs_sha256_begin(struct gs_sha256 *h);
void gs_sha256_update(struct gs_sha256 *h, const void *p, size_t n);
void gs_sha256_end(struct gs_sha256 *h, uint8_t out[GS_SHA256_BYTES]); /* also frees h's state */

/* Digest of n bytes at p. */
void gs_sha256(const void *p, size_t n, uint8_t out[GS_SHA256_BYTES]);

/* Digest of a whole file; GS_IO with the path and reason on failure. */
enum gs_status gs_sha256_file(const char *path, uint8_t out[GS_SHA256_BYTES],
                              struct gs_err *err);

/* Lower-case hex of a digest into hex[GS_SHA256_HEX_LEN]. */
void gs_sha256_hex(const uint8_t digest[GS_SHA256_BYTES], char hex[GS_SHA256_HEX_LEN]);

#endif /* GS_DIGEST_H */
