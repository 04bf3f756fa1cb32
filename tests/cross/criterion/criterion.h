/*
 * tests/cross/criterion/criterion.h - the part of Criterion's interface that
 * tests/engine/test_cpu_kernels.c uses, for the kernels_only cross build
 * (see tests/cross/README.md): Test(), cr_assert*, cr_expect. A cross
 * toolchain has no Criterion for the target, and this test needs only these.
 *
 * Each Test() registers itself before main. main runs every test in turn in
 * this one process, prints a line per test, and exits non-zero if any
 * assertion failed. cr_assert ends the current test (longjmp), cr_expect
 * records the failure and goes on. Arguments (meson's --jobs=1) are ignored.
 */
#ifndef GS_CROSS_CRITERION_H
#define GS_CROSS_CRITERION_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

/* cr_assert(cond) without a message passes crl_fail an empty format. */
#pragma GCC diagnostic ignored "-Wformat-zero-length"

struct crl_test {
    const char *suite, *name;
    void (*fn)(void);
};

enum { CRL_MAX_TESTS = 64 };
static struct crl_test crl_tests[CRL_MAX_TESTS];
static int crl_n_tests;
static int crl_failed_here;
static jmp_buf crl_jump;

static inline void crl_register(const char *suite, const char *name, void (*fn)(void))
{
    if (crl_n_tests == CRL_MAX_TESTS) {
        fprintf(stderr, "criterion (cross): more than %d tests\n", CRL_MAX_TESTS);
        abort();
    }
    crl_tests[crl_n_tests++] = (struct crl_test){suite, name, fn};
}

__attribute__((format(printf, 5, 6))) static inline void
crl_fail(int fatal, const char *file, int line, const char *expr, const char *fmt, ...)
{
    fprintf(stderr, "%s:%d: assertion failed: %s", file, line, expr);
    if (fmt[0]) {
        va_list ap;
        va_start(ap, fmt);
        fputs(": ", stderr);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
    }
    fputc('\n', stderr);
    crl_failed_here = 1;
    if (fatal)
        longjmp(crl_jump, 1);
}

#define Test(suite, name)                                                                          \
    static void suite##_##name(void);                                                              \
    __attribute__((constructor)) static void suite##_##name##_register(void)                       \
    {                                                                                              \
        crl_register(#suite, #name, suite##_##name);                                               \
    }                                                                                              \
    static void suite##_##name(void)

/* "" __VA_ARGS__: a message is optional, and when given its format is a literal. */
#define CRL_CHECK(fatal, cond, text, ...)                                                          \
    do {                                                                                           \
        if (!(cond))                                                                               \
            crl_fail(fatal, __FILE__, __LINE__, text, "" __VA_ARGS__);                             \
    } while (0)
#define cr_assert(cond, ...) CRL_CHECK(1, cond, #cond, __VA_ARGS__)
#define cr_expect(cond, ...) CRL_CHECK(0, cond, #cond, __VA_ARGS__)
#define cr_assert_eq(a, b, ...) CRL_CHECK(1, (a) == (b), #a " == " #b, __VA_ARGS__)
#define cr_assert_null(p, ...) CRL_CHECK(1, (p) == NULL, #p " == NULL", __VA_ARGS__)
#define cr_assert_not_null(p, ...) CRL_CHECK(1, (p) != NULL, #p " != NULL", __VA_ARGS__)

/* Runs test i; whether it failed. */
static int crl_run(int i)
{
    crl_failed_here = 0;
    if (!setjmp(crl_jump))
        crl_tests[i].fn();
    printf("[%s] %s::%s\n", crl_failed_here ? "FAIL" : "PASS", crl_tests[i].suite,
           crl_tests[i].name);
    fflush(stdout);
    return crl_failed_here;
}

int main(void)
{
    int failed = 0;
    for (int i = 0; i < crl_n_tests; i++)
        failed += crl_run(i);
    printf("Synthesis: Tested: %d | Passing: %d | Failing: %d\n", crl_n_tests,
           crl_n_tests - failed, failed);
    return failed ? 1 : 0;
}

#endif /* GS_CROSS_CRITERION_H */
