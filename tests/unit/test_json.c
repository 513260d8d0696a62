/*
 * test_json.c: the JSON writer's number formatting (json.c), which answers
 * carry for every page: every width and every digit pair, as printf writes it.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "api/json.h"
#include "check.h"

static void expect_written(int64_t value, bool as_unsigned)
{
    json_buf buf;
    json_buf_init(&buf, 64);
    char want[32];
    if (as_unsigned) {
        json_put_uint(&buf, (uint64_t)value);
        snprintf(want, sizeof want, "%" PRIu64, (uint64_t)value);
    } else {
        json_put_int(&buf, value);
        snprintf(want, sizeof want, "%" PRId64, value);
    }
    CHECK_EQ(buf.len, strlen(want));
    CHECK(memcmp(buf.ptr, want, buf.len) == 0);
    json_buf_free(&buf);
}

TEST(json_put_uint_and_int_write_every_width_and_digit_pair_as_printf_does)
{
    for (int64_t v = 0; v < 100000; v++) {
        expect_written(v, true);
        expect_written(-v, false);
    }
    uint64_t p = 1;
    for (int i = 0; i < 20; i++, p *= 10) { /* every power of ten and its neighbours */
        expect_written((int64_t)(p - 1), true);
        expect_written((int64_t)p, true);
        expect_written((int64_t)(p + 1), true);
    }
    expect_written((int64_t)UINT64_MAX, true);
    expect_written(INT64_MAX, false);
    expect_written(INT64_MIN, false);
    expect_written(4294967295, true);
}

int main(void)
{
    RUN(json_put_uint_and_int_write_every_width_and_digit_pair_as_printf_does);
    return TEST_SUMMARY();
}
