/* engine/digest/sha256.c - SHA-256 through mbedTLS. See engine/digest.h. */
#include "engine/digest.h"

#include <errno.h>
#include <mbedtls/sha256.h>
#include <mbedtls/version.h>
#include <stdio.h>
#include <string.h>

/* mbedTLS 3 dropped the _ret suffix that 2.28 (Debian 12) still uses. */
#if MBEDTLS_VERSION_MAJOR >= 3
#define sha256_starts mbedtls_sha256_starts
#define sha256_update mbedtls_sha256_update
#define sha256_finish mbedtls_sha256_finish
#else
#define sha256_starts mbedtls_sha256_starts_ret
#define sha256_update mbedtls_sha256_update_ret
#define sha256_finish mbedtls_sha256_finish_ret
#endif

void gs_sha256_begin(struct gs_sha256 *h)
{
    mbedtls_sha256_init(&h->ctx);
    sha256_starts(&h->ctx, 0);
}

void gs_sha256_update(struct gs_sha256 *h, const void *p, size_t n)
{
    sha256_update(&h->ctx, p, n);
}

void gs_sha256_end(struct gs_sha256 *h, uint8_t out[GS_SHA256_BYTES])
{
    sha256_finish(&h->ctx, out);
    mbedtls_sha256_free(&h->ctx);
}

void gs_sha256(const void *p, size_t n, uint8_t out[GS_SHA256_BYTES])
{
    struct gs_sha256 h;
    gs_sha256_begin(&h);
    gs_sha256_update(&h, p, n);
    gs_sha256_end(&h, out);
}

enum gs_status gs_sha256_file(const char *path, uint8_t out[GS_SHA256_BYTES], struct gs_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return gs_err_set(err, GS_IO, "%s: %s", path, strerror(errno));
    struct gs_sha256 h;
    gs_sha256_begin(&h);
    static __thread unsigned char chunk[1 << 16];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        gs_sha256_update(&h, chunk, n);
    bool failed = ferror(f);
    fclose(f);
    gs_sha256_end(&h, out);
    if (failed)
        return gs_err_set(err, GS_IO, "%s: read error", path);
    return GS_OK;
}

void gs_sha256_hex(const uint8_t digest[GS_SHA256_BYTES], char hex[GS_SHA256_HEX_LEN])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < GS_SHA256_BYTES; i++) {
        hex[2 * i] = digits[digest[i] >> 4];
        hex[2 * i + 1] = digits[digest[i] & 15];
    }
    hex[64] = '\0';
}
