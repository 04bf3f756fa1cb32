/* server/auth.c - the API key check (Authorization: Bearer, or x-api-key) in
 * constant time. Both sides are hashed first, so that neither the keys' lengths
 * nor their bytes change the time a comparison takes. */
#include "engine/digest.h"
#include "server/internal.h"

#include <string.h>
#include <strings.h>

/* Whether tok[0..n) is one of the keys; every key is compared in full. */
static bool key_matches(const char *tok, size_t n, const uint8_t (*key_digests)[32], size_t n_keys)
{
    uint8_t d[GS_SHA256_BYTES];
    gs_sha256(tok, n, d);
    unsigned ok = 0;
    for (size_t k = 0; k < n_keys; k++) {
        unsigned diff = 0;
        for (size_t i = 0; i < GS_SHA256_BYTES; i++)
            diff |= (unsigned)(d[i] ^ key_digests[k][i]);
        ok |= (unsigned)(diff == 0);
    }
    return ok != 0;
}

bool gs_srv_auth_check_key(const char *key, const uint8_t (*key_digests)[32], size_t n_keys)
{
    if (n_keys == 0)
        return true;
    if (!key)
        return false;
    while (*key == ' ')
        key++;
    size_t n = strlen(key);
    while (n && key[n - 1] == ' ')
        n--;
    return key_matches(key, n, key_digests, n_keys);
}

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
    return gs_srv_auth_check_key(authorization + 7, key_digests, n_keys);
}
