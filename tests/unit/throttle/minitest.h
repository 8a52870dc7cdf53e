/*
 * Criterion, or the few pieces of it a test needs when Criterion cannot run: under
 * ThreadSanitizer (Criterion's runner forks and talks over pipes in ways TSan does not
 * follow). Built with -DMG_MINITEST, a test file gets Test(), cr_assert(), cr_assert_eq()
 * and cr_log_info(), and a main() that runs every test in the order written and ends with
 * "N passed, N failed" (exit status 1 when something failed).
 *
 * Assert only on the thread that runs the test: a failure jumps back to main().
 */
#ifndef MG_TEST_MINITEST_H
#define MG_TEST_MINITEST_H

#ifndef MG_MINITEST
#include <criterion/criterion.h>
#include <criterion/logging.h>
#else
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>

typedef struct mt_test {
    const char *suite, *name;
    void (*run)(void);
    struct mt_test *next;
} mt_test_t;

static mt_test_t *mt_tests;
static jmp_buf mt_failed;

#define Test(suite, name, ...)                                                                                                     \
    static void suite##_##name(void);                                                                                              \
    static mt_test_t mt_##suite##_##name = {#suite, #name, suite##_##name, NULL};                                                  \
    __attribute__((constructor)) static void mt_add_##suite##_##name(void)                                                         \
    {                                                                                                                              \
        mt_test_t **p = &mt_tests;                                                                                                 \
        while (*p != NULL)                                                                                                         \
            p = &(*p)->next;                                                                                                       \
        *p = &mt_##suite##_##name;                                                                                                 \
    }                                                                                                                              \
    static void suite##_##name(void)

__attribute__((format(printf, 4, 5), noreturn)) static void mt_fail(const char *file, int line, const char *expr, const char *fmt,
                                                                    ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("  %s:%d: assertion failed: %s\n  ", file, line, expr);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    longjmp(mt_failed, 1);
}

#define cr_assert(cond, ...) ((cond) ? (void)0 : mt_fail(__FILE__, __LINE__, #cond, " " __VA_ARGS__))
#define cr_assert_eq(a, b, ...) cr_assert((a) == (b), __VA_ARGS__)
#define cr_log_info(...) (printf("  "), printf(__VA_ARGS__), printf("\n"))

int main(void)
{
    volatile int passed = 0, failed = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (mt_test_t *volatile t = mt_tests; t != NULL; t = t->next) {
        printf("%s::%s\n", t->suite, t->name);
        if (setjmp(mt_failed) == 0) {
            t->run();
            passed++;
        } else {
            printf("FAIL %s::%s\n", t->suite, t->name);
            failed++;
        }
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
#endif

#endif
