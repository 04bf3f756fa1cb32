/* server/auth.c - Bearer token check in constant time. Both sides are hashed
 * first, so that neither the keys' lengths nor their bytes change the time a
 * comparison takes. */
#include "engine/digest.h"
#include "server/internal.h"

#include <string.h>
#include <strings.h>

bool gs_srv_auth_check(const char *authorization, const uint8_t (*key_digests)[32], size_t n_keys)
{
    if (n_keys == 0)
        return true;
    if (!authorization)
        return false;
    while (*authorization == ' ')
        authorization++;
    if (strncasecmp(authorization, "Bearer ", 7) != 0)
        return false;
    const char *tok = authorization + 7;
    while (*tok == ' ')
        tok++;
    size_t n = strlen(tok);
    while (n && tok[n - 1] == ' ')
        n--;
    uint8_t d[GS_SHA256_BYTES];
    gs_sha256(tok, n, d);
    /* Every key is compared in full, whatever matched before. */
    unsigned ok = 0;
    for (size_t k = 0; k < n_keys; k++) {
        unsigned diff = 0;
        for (size_t i = 0; i < GS_SHA256_BYTES; i++)
            diff |= (unsigned)(d[i] ^ key_digests[k][i]);
        ok |= (unsigned)(diff == 0);
    }
    return ok != 0;
}
