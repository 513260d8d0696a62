/*
 * checks.h: the CHECK macros of the C tests, over a TEST_FAIL(fmt, ...) that
 * the harness including this header defines first: it records the message
 * and ends the current test. tests/unit/check.h's jumps out of the test;
 * tests/client/test_client.c's records the first failure and goes to the
 * test's clean-up (`done:`).
 *
 *   CHECK(cond)          cond holds
 *   CHECK_INT(a, op, b)  a op b, both as int64_t, printed on failure
 *   CHECK_EQ(a, b)       CHECK_INT(a, ==, b)
 *   CHECK_IN(a, lo, hi)  lo <= a <= hi, as int64_t, printed on failure
 */
#ifndef HF_TEST_CHECKS_H
#define HF_TEST_CHECKS_H

#include <inttypes.h>
#include <stdint.h>

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            TEST_FAIL("check failed: %s", #cond);                                                  \
    } while (0)

#define CHECK_INT(a, op, b)                                                                        \
    do {                                                                                           \
        int64_t a_ = (int64_t)(a), b_ = (int64_t)(b);                                              \
        if (!(a_ op b_))                                                                           \
            TEST_FAIL("%s %s %s: %" PRId64 " vs %" PRId64, #a, #op, #b, a_, b_);                   \
    } while (0)

#define CHECK_EQ(a, b) CHECK_INT(a, ==, b)

#define CHECK_IN(a, lo, hi)                                                                        \
    do {                                                                                           \
        int64_t a_ = (int64_t)(a), lo_ = (int64_t)(lo), hi_ = (int64_t)(hi);                       \
        if (a_ < lo_ || a_ > hi_)                                                                  \
            TEST_FAIL("%s in [%s, %s]: %" PRId64 " not in [%" PRId64 ", %" PRId64 "]", #a, #lo,    \
                      #hi, a_, lo_, hi_);                                                          \
    } while (0)

#endif
