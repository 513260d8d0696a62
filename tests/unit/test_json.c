/*
 * test_json.c: the JSON writer's number formatting (json.c), which answers
 * carry for every page: every width and every digit pair, as printf writes it.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "api/json.h"
#include "check.h"
#include "util/buf.h"
#include "util/utf8.h"
#include "util/xalloc.h"

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

/* util/buf.h: the writer's buffer (and HTTP's) stops exactly at its
 * maximum, the refusal sticks until a reset, and a zeroed buffer has none;
 * a body with a declared length ends in a buffer of exactly its size. */
TEST(hf_buf_stops_at_its_maximum_and_a_reset_clears_the_refusal)
{
    hf_buf b;
    hf_buf_init(&b, 1000);
    for (int i = 0; i < 100; i++)
        CHECK(hf_buf_append(&b, "0123456789", 10));
    CHECK_EQ(b.len, 1000);
    CHECK_EQ(b.cap, 1000); /* the last doubling stopped at the maximum */
    CHECK(!b.overflow);
    CHECK(!hf_buf_append(&b, "x", 1));
    CHECK(b.overflow && b.len == 1000);
    CHECK(!hf_buf_reserve(&b, 0)); /* sticky */
    hf_buf_reset(&b, 4096);
    CHECK(!b.overflow && b.len == 0 && b.cap == 1000);
    hf_buf_reset(&b, 100); /* above keep_bytes: the memory goes */
    CHECK(b.ptr == NULL && b.cap == 0 && b.max == 1000);
    hf_buf_free(&b);

    hf_buf none = {0};
    for (int i = 0; i < 1000; i++)
        CHECK(hf_buf_append(&none, "0123456789", 10));
    CHECK(none.len == 10000 && !none.overflow);
    hf_buf_free(&none);

    int *a = NULL;
    size_t cap = 0;
    for (size_t i = 0; i < 1000; i++) {
        a = hf_grow(a, &cap, i + 1, sizeof *a);
        a[i] = (int)i;
    }
    CHECK(cap >= 1000 && a[999] == 999);
    hf_xfree(a);
}

/* util/utf8.h: the strict rule at its edges. */
TEST(utf8_is_strict_at_every_edge)
{
    static const struct {
        const char *s;
        bool ok;
    } cases[] = {
        {"plain ascii, longer than eight bytes", true},
        {"\xc3\xa9", true},
        {"\xc0\xaf", false},         /* overlong */
        {"\xe0\x9f\xbf", false},     /* overlong */
        {"\xed\xa0\x80", false},     /* surrogate */
        {"\xf4\x90\x80\x80", false}, /* above U+10FFFF */
        {"\xf0\x9f\x98\x80", true},
        {"\xe2\x82", false}, /* cut short */
        {"abcdefgh\xff", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK(hf_utf8_valid(cases[i].s, strlen(cases[i].s)) == cases[i].ok);
}

int main(void)
{
    RUN(json_put_uint_and_int_write_every_width_and_digit_pair_as_printf_does);
    RUN(hf_buf_stops_at_its_maximum_and_a_reset_clears_the_refusal);
    RUN(utf8_is_strict_at_every_edge);
    return TEST_SUMMARY();
}
