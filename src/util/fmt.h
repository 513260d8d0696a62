/*
 * fmt.h: decimal digits of an unsigned integer, for the writers on hot paths
 * (JSON answers carry a page number per key; every HTTP answer carries its
 * status and Content-Length), without printf's parsing of a format.
 */
#ifndef HF_FMT_H
#define HF_FMT_H

#include <stdint.h>
#include <string.h>

/* The longest uint64_t: 20 digits. */
#define HF_UINT_DIGITS 20

/* Writes the digits of v at dst (no NUL); returns the end. Two digits per
 * division. */
static inline char *hf_put_uint(char *dst, uint64_t v)
{
    static const char pairs[201] =
        "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
        "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
        "8081828384858687888990919293949596979899";
    char digits[HF_UINT_DIGITS];
    size_t n = HF_UINT_DIGITS;
    while (v >= 100) {
        const char *pair = pairs + 2 * (v % 100);
        v /= 100;
        digits[--n] = pair[1];
        digits[--n] = pair[0];
    }
    if (v >= 10) {
        digits[--n] = pairs[2 * v + 1];
        digits[--n] = pairs[2 * v];
    } else {
        digits[--n] = (char)('0' + v);
    }
    memcpy(dst, digits + n, HF_UINT_DIGITS - n);
    return dst + (HF_UINT_DIGITS - n);
}

#endif
