/* engine/sample/rng.c - splitmix64 and xoshiro256**, see internal.h. */
#include "engine/sample/internal.h"

uint64_t gs_sample__splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void gs_sample__rng_seed(struct gs_sample__rng *rng, uint64_t seed)
{
    uint64_t x = seed;
    /* splitmix64 never yields four zero words in a row, so the xoshiro state
     * is never the all-zero fixed point. */
    for (int i = 0; i < 4; i++)
        rng->s[i] = gs_sample__splitmix64(&x);
}

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t gs_sample__rng_u64(struct gs_sample__rng *rng)
{
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double gs_sample__rng_f64(struct gs_sample__rng *rng)
{
    return (double)(gs_sample__rng_u64(rng) >> 11) * 0x1.0p-53;
}
