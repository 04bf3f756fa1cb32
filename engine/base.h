/*
 * engine/base.h - status codes, error messages, allocation hooks, small
 * arithmetic helpers and the thread stack size that every graphserve module
 * uses.
 *
 * Ownership: nothing here owns memory beyond what the caller asks for.
 * Threads: everything is safe from any thread, except gs_alloc_fail_after(),
 * which is a test hook and must be called while no other thread allocates.
 *
 * Calling convention used across graphserve: a function that can fail returns
 * enum gs_status, writes its results through out-pointers, and describes the
 * failure in a caller-provided struct gs_err whose message names the bad field
 * ("tensor 'blk.3.attn_q.weight': data offset past end of file"). There is no
 * global last-error. Nothing derived from a file, a request or a config may
 * abort the process; assert() is for programmer errors only.
 */
#ifndef GS_BASE_H
#define GS_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- status codes -------------------------------------------------------- */

#define GS_STATUS_MAP(X)                                                                           \
    X(OK, "ok")                                                                                    \
    X(NOMEM, "out of memory")                                                                      \
    X(INVAL, "invalid argument")                                                                   \
    X(FORMAT, "malformed input")                                                                   \
    X(UNSUPPORTED, "unsupported")                                                                  \
    X(IO, "i/o error")                                                                             \
    X(BUSY, "no capacity")                                                                         \
    X(CANCELLED, "cancelled")                                                                      \
    X(NOTFOUND, "not found")                                                                       \
    X(NUMERIC, "non-finite value")

enum gs_status {
#define GS_STATUS_ENUM(name, text) GS_##name,
    GS_STATUS_MAP(GS_STATUS_ENUM)
#undef GS_STATUS_ENUM
        GS_STATUS_COUNT
};

/* Returns a static string for a status code, "unknown status" if out of range. */
const char *gs_status_str(enum gs_status code);

/* ---- errors -------------------------------------------------------------- */

#define GS_ERR_MSG_LEN 256

struct gs_err {
    enum gs_status code;
    char msg[GS_ERR_MSG_LEN]; /* NUL-terminated, names the bad field */
};

/*
 * Records code and a printf-style message in err (err may be NULL) and returns
 * code, so that a failing path reads: return gs_err_set(err, GS_FORMAT, "...").
 * Messages longer than GS_ERR_MSG_LEN are truncated.
 */
enum gs_status gs_err_set(struct gs_err *err, enum gs_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * Prepends "prefix: " to an existing message, for adding context on the way up
 * ("model.gguf: tensor 'x': ..."). Returns err->code.
 */
enum gs_status gs_err_prefix(struct gs_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Resets err to GS_OK with an empty message. */
void gs_err_clear(struct gs_err *err);

/* ---- allocation ---------------------------------------------------------- */

/*
 * All graphserve allocation goes through these, so that tests can make the Nth
 * allocation fail. They return NULL on failure (never abort). gs_free(NULL) is
 * a no-op. gs_calloc and gs_alloc_array check n * size for overflow.
 */
void *gs_malloc(size_t size);
void *gs_calloc(size_t n, size_t size);
void *gs_realloc(void *p, size_t size);
void *gs_alloc_array(size_t n, size_t size); /* uninitialised, overflow-checked */
char *gs_strdup(const char *s);
char *gs_strndup(const char *s, size_t n);
void gs_free(void *p);

/*
 * Large zeroed buffers that are filled gradually (the KV pool): memory straight
 * from the kernel, advised for transparent huge pages where the system allows
 * them, so that first touches fault 2 MiB at a time instead of 4 KiB (a 4 KiB
 * fault costs ~10 us on a virtual machine). Pages are still committed only as
 * they are written. Free with gs_free_pages and the same size.
 */
void *gs_alloc_pages(size_t size);
void gs_free_pages(void *p, size_t size);

/*
 * Test hook: after n more successful allocations, every allocation fails until
 * the hook is reset with n < 0. Returns nothing; not thread-safe.
 */
void gs_alloc_fail_after(long n);

/* ---- checked arithmetic -------------------------------------------------- */

/* Each returns true if the result overflowed; *out is then unspecified. */
static inline bool gs_mul_overflow(uint64_t a, uint64_t b, uint64_t *out)
{
    return __builtin_mul_overflow(a, b, out);
}
static inline bool gs_add_overflow(uint64_t a, uint64_t b, uint64_t *out)
{
    return __builtin_add_overflow(a, b, out);
}

#define GS_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define GS_MIN(a, b) ((a) < (b) ? (a) : (b))
#define GS_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Defensive checks on conditions that should never happen but must not crash
 * (SQLite's ALWAYS/NEVER): in debug builds they assert, in release they return
 * the condition so that the caller can recover. */
#ifdef NDEBUG
#define GS_ALWAYS(x) (x)
#define GS_NEVER(x) (x)
#else
#include <assert.h>
#define GS_ALWAYS(x) ((x) ? 1 : (assert(0), 0))
#define GS_NEVER(x) ((x) ? (assert(0), 1) : 0)
#endif

/* ---- time ---------------------------------------------------------------- */

/* Monotonic clock in milliseconds / nanoseconds, for timings and benchmarks. */
double gs_now_ms(void);
uint64_t gs_now_ns(void);

/* ---- threads --------------------------------------------------------------- */

/* Stack of every thread that runs engine steps: the scheduler's engine thread
 * and the cpu backend's workers are created with it, and a thread that calls
 * gs_be_run needs it. Kernels keep their tile scratch, up to ~1 MiB, on the
 * stack. */
#define GS_THREAD_STACK_BYTES ((size_t)8 << 20)

/* ---- fp16 / bf16 conversion ------------------------------------------------ */

/* IEEE half precision and bfloat16 <-> float, exact for every finite value,
 * NaN and Inf preserved. Rounding from float is round-to-nearest-even. */
float gs_fp16_to_f32(uint16_t h);
uint16_t gs_f32_to_fp16(float f);
float gs_bf16_to_f32(uint16_t h);
uint16_t gs_f32_to_bf16(float f);

#endif /* GS_BASE_H */
