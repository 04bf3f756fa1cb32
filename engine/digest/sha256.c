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

void gs_sha256(const void *p, size_t n, uint8_t out[GS_SHA256_BYTES])
{
    mbedtls_sha256_context ctx;
    mbedtls_sha256_init(&ctx);
    sha256_starts(&ctx, 0);
    sha256_update(&ctx, p, n);
    sha256_finish(&ctx, out);
    mbedtls_sha256_free(&ctx);
}

enum gs_status gs_sha256_file(const char *path, uint8_t out[GS_SHA256_BYTES], struct gs_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return gs_err_set(err, GS_IO, "%s: %s", path, strerror(errno));
    mbedtls_sha256_context ctx;
    mbedtls_sha256_init(&ctx);
    sha256_starts(&ctx, 0);
    static __thread unsigned char chunk[1 << 16];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        sha256_update(&ctx, chunk, n);
    bool failed = ferror(f);
    fclose(f);
    sha256_finish(&ctx, out);
    mbedtls_sha256_free(&ctx);
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
