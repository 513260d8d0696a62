/*
 * check.h: a tiny test harness in the manner of libuv's test/task.h.
 *
 * TEST(name) defines a test; RUN(name) runs it. The CHECK_* macros print
 * both sides on failure and fail the current test (the rest of it is skipped);
 * they are checks.h's, over this harness's TEST_FAIL (a longjmp out of the
 * test).
 * main() ends with TEST_SUMMARY(), which prints "N passed, N failed" and
 * returns the exit code. A main() that calls TEST_SELECT(argc, argv) first
 * runs only the tests whose names contain one of its arguments (all of them
 * without arguments), so that a runner can split a long binary into jobs.
 */
#ifndef HF_TEST_CHECK_H
#define HF_TEST_CHECK_H

#include <inttypes.h>
#include <setjmp.h>
#include <stdio.h>
#include <string.h>

static int test_passed, test_failed;
static jmp_buf test_jmp;
static int test_argc;
static char **test_argv;

#define TEST_SELECT(argc, argv) (test_argc = (argc)-1, test_argv = (argv) + 1)

static inline int test_selected(const char *name)
{
    for (int i = 0; i < test_argc; i++)
        if (strstr(name, test_argv[i]))
            return 1;
    return test_argc == 0;
}

#define TEST(name) static void name(void)

#define RUN(name)                                                                                  \
    do {                                                                                           \
        if (!test_selected(#name)) {                                                               \
        } else if (setjmp(test_jmp) == 0) {                                                        \
            name();                                                                                \
            test_passed++;                                                                         \
            printf("PASS %s\n", #name);                                                            \
        } else {                                                                                   \
            test_failed++;                                                                         \
            printf("FAIL %s\n", #name);                                                            \
        }                                                                                          \
        fflush(stdout);                                                                            \
    } while (0)

#define TEST_FAIL(...)                                                                             \
    do {                                                                                           \
        fprintf(stdout, "  %s:%d: ", __FILE__, __LINE__);                                          \
        fprintf(stdout, __VA_ARGS__);                                                              \
        fputc('\n', stdout);                                                                       \
        longjmp(test_jmp, 1);                                                                      \
    } while (0)

#include "checks.h"

#define TEST_SUMMARY()                                                                             \
    (printf("%d passed, %d failed\n", test_passed, test_failed),                                   \
     test_failed || !test_passed ? 1 : 0)

#endif
