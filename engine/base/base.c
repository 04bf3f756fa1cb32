/* engine/base/base.c - status strings, error messages, allocation hooks, clocks,
 * half-precision conversion. See engine/base.h for the contracts. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, madvise */
#define _POSIX_C_SOURCE 200809L
#include "engine/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static const char *const status_text[] = {
#define GS_STATUS_TEXT(name, text) [GS_##name] = text,
    GS_STATUS_MAP(GS_STATUS_TEXT)
#undef GS_STATUS_TEXT
};

const char *gs_status_str(enum gs_status code)
{
    if ((unsigned)code >= GS_STATUS_COUNT)
        return "unknown status";
    return status_text[code];
}

enum gs_status gs_err_set(struct gs_err *err, enum gs_status code, const char *fmt, ...)
{
    if (!err)
        return code;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    return code;
}

enum gs_status gs_err_prefix(struct gs_err *err, const char *fmt, ...)
{
    if (!err)
        return GS_OK;
    char joined[2 * GS_ERR_MSG_LEN + 2];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(joined, GS_ERR_MSG_LEN, fmt, ap);
    va_end(ap);
    if (n < 0)
        return err->code;
    size_t at = strlen(joined);
    memcpy(joined + at, ": ", 2);
    memcpy(joined + at + 2, err->msg, strnlen(err->msg, GS_ERR_MSG_LEN - 1) + 1);
    joined[GS_ERR_MSG_LEN - 1] = '\0'; /* truncate to the message size */
    memcpy(err->msg, joined, GS_ERR_MSG_LEN);
    return err->code;
}

void gs_err_clear(struct gs_err *err)
{
    if (!err)
        return;
    err->code = GS_OK;
    err->msg[0] = '\0';
}

/* Countdown for gs_alloc_fail_after(); negative means "never fail". */
static long alloc_fail_countdown = -1;

static bool alloc_should_fail(void)
{
    if (alloc_fail_countdown < 0)
        return false;
    if (alloc_fail_countdown == 0)
        return true;
    alloc_fail_countdown--;
    return false;
}

void gs_alloc_fail_after(long n)
{
    alloc_fail_countdown = n;
}

void *gs_malloc(size_t size)
{
    if (alloc_should_fail())
        return NULL;
    return malloc(size ? size : 1);
}

void *gs_calloc(size_t n, size_t size)
{
    uint64_t total;
    if (gs_mul_overflow(n, size, &total) || total > SIZE_MAX)
        return NULL;
    if (alloc_should_fail())
        return NULL;
    return calloc(n ? n : 1, size ? size : 1);
}

void *gs_alloc_array(size_t n, size_t size)
{
    uint64_t total;
    if (gs_mul_overflow(n, size, &total) || total > SIZE_MAX)
        return NULL;
    return gs_malloc((size_t)total);
}

void *gs_realloc(void *p, size_t size)
{
    if (alloc_should_fail())
        return NULL;
    return realloc(p, size ? size : 1);
}

char *gs_strndup(const char *s, size_t n)
{
    char *d = gs_malloc(n + 1);
    if (!d)
        return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

char *gs_strdup(const char *s)
{
    return gs_strndup(s, strlen(s));
}

/* Huge-page alignment: a mapping starting on a 2 MiB boundary can be backed by
 * huge pages from its first byte. */
#define HUGE_PAGE_BYTES ((size_t)2 << 20)

void *gs_alloc_pages(size_t size)
{
    if (alloc_should_fail())
        return NULL;
    size = size ? size : 1;
    if (size < HUGE_PAGE_BYTES)
        return calloc(1, size);
    /* Over-map by one huge page, then trim both ends to an aligned span. */
    const size_t span = (size + HUGE_PAGE_BYTES - 1) / HUGE_PAGE_BYTES * HUGE_PAGE_BYTES;
    char *m = mmap(NULL, span + HUGE_PAGE_BYTES, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    char *a = (char *)(((uintptr_t)m + HUGE_PAGE_BYTES - 1) & ~(uintptr_t)(HUGE_PAGE_BYTES - 1));
    if (a > m)
        munmap(m, (size_t)(a - m));
    if (a + span < m + span + HUGE_PAGE_BYTES)
        munmap(a + span, (size_t)(m + span + HUGE_PAGE_BYTES - (a + span)));
#ifdef MADV_HUGEPAGE
    (void)madvise(a, span, MADV_HUGEPAGE); /* advice only: 4 KiB pages work too */
#endif
    return a;
}

void gs_free_pages(void *p, size_t size)
{
    if (!p)
        return;
    size = size ? size : 1;
    if (size < HUGE_PAGE_BYTES) {
        free(p);
        return;
    }
    munmap(p, (size + HUGE_PAGE_BYTES - 1) / HUGE_PAGE_BYTES * HUGE_PAGE_BYTES);
}

void gs_free(void *p)
{
    free(p);
}

uint64_t gs_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double gs_now_ms(void)
{
    return (double)gs_now_ns() / 1e6;
}

/* ---- half precision ------------------------------------------------------- */

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

float gs_fp16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    if (exp == 0x1f) /* Inf or NaN: keep the payload */
        return bits_f32(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
        if (mant == 0)
            return bits_f32(sign);
        /* Subnormal half: value = mant * 2^-24, exact in float. */
        float v = (float)mant * 0x1p-24f;
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t gs_f32_to_fp16(float f)
{
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t abs = x & 0x7fffffffu;
    if (abs >= 0x7f800000u) /* Inf or NaN */
        return (uint16_t)(sign | 0x7c00 | (abs > 0x7f800000u ? 0x200 | ((abs >> 13) & 0x3ff) : 0));
    if (abs >= 0x477ff000u) /* rounds to >= 65520: overflow to Inf */
        return (uint16_t)(sign | 0x7c00);
    if (abs < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        /* Adding 0.5 (2^-1) aligns the mantissa so that the FPU rounds to
         * nearest-even at the half-subnormal quantum of 2^-24. */
        float v = bits_f32(abs) + 0.5f;
        return (uint16_t)(sign | (f32_bits(v) - 0x3f000000u));
    }
    uint32_t mant_odd = (abs >> 13) & 1;
    abs += 0xc8000fffu + mant_odd; /* rebias exponent (-112 << 23) and round to nearest even */
    return (uint16_t)(sign | (abs >> 13));
}

float gs_bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

uint16_t gs_f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: force quiet */
        return (uint16_t)((x >> 16) | 64);
    return (uint16_t)((x + (0x7fff + ((x >> 16) & 1))) >> 16);
}
