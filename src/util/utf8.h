/*
 * utf8.h: strict UTF-8 (RFC 3629): no overlong forms, no surrogates,
 * nothing above U+10FFFF. yajl checks only the shape of multi-byte
 * sequences; the server's JSON reader and writer and the client library's
 * need the strict rule, and the same one (a key one side accepts, the other
 * must echo back unchanged).
 *
 * Header-only and free of the server's code, so that the client library
 * (lib/) uses it too.
 */
#ifndef HF_UTF8_H
#define HF_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at s (avail >= 1 bytes there): 1 for
 * ASCII, 2 to 4, or 0 if it is not valid or is cut short. */
static inline size_t hf_utf8_seq_len(const unsigned char *s, size_t avail)
{
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    size_t n;
    unsigned char lo = 0x80, hi = 0xBF; /* range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0)
            lo = 0xA0; /* no overlongs */
        else if (c == 0xED)
            hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F; /* <= U+10FFFF */
    } else {
        return 0;
    }
    if (avail < n || s[1] < lo || s[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return n;
}

/* Whether s[0..len) is all valid UTF-8 (ASCII runs 8 bytes at a time). */
static inline bool hf_utf8_valid(const void *s, size_t len)
{
    const unsigned char *p = s;
    size_t i = 0;
    while (i < len) {
        while (i + 8 <= len) {
            uint64_t w;
            memcpy(&w, p + i, 8);
            if (w & 0x8080808080808080ull)
                break;
            i += 8;
        }
        if (i >= len)
            break;
        size_t n = hf_utf8_seq_len(p + i, len - i);
        if (!n)
            return false;
        i += n;
    }
    return true;
}

#endif
