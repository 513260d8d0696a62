/*
 * hex.h: lowercase hex digests packed two characters a byte, and back: the
 * core's canonical form of a 64-hex key (core_internal.h "Key records")
 * and the packed key lists of the Redis module's commands (wire.h), so
 * that the rule exists once.
 *
 *   hf_hex_pack     32k lowercase hex characters -> 16k bytes, the first
 *                   character of each pair in the high nibble; false if any
 *                   character is not 0-9 or a-f (out is then unspecified)
 *   hf_hex_unpack   16k bytes -> their 32k lowercase hex characters
 *   hf_hex_value    one lowercase hex character's value (unchecked)
 *
 * Both run for every key of every request, so neither branches per
 * character (digits and letters alternate at random in a hash: a branch
 * would be mispredicted half the time): with SSE2 (every x86-64), 16
 * characters per step; elsewhere the portable forms, 8 characters at a
 * time in a 64-bit word (SWAR) and a table. Both forms are always defined
 * (hf_hex_pack_swar, hf_hex_unpack_table), so that the tests hold the two
 * to the same answers on x86-64 too.
 */
#ifndef HF_HEX_H
#define HF_HEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* The SWAR form reads 8 characters as one little-endian word. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "util/hex.h: the SWAR hex codec assumes a little-endian machine"
#endif

#define HF_HEX__ONES 0x0101010101010101ull
#define HF_HEX__HIGHS 0x8080808080808080ull

/* High bit of each byte lane set where the (7-bit) byte is >= k. */
static inline uint64_t hf_hex__at_least(uint64_t w, unsigned k)
{
    return (w + (0x80u - k) * HF_HEX__ONES) & HF_HEX__HIGHS;
}

/* The value of one lowercase hex character (the caller checked it). */
static inline unsigned hf_hex_value(char c)
{
    return c <= '9' ? (unsigned)(c - '0') : (unsigned)(c - 'a' + 10);
}

static inline bool hf_hex_pack_swar(const char *raw, size_t nchars, uint8_t *out)
{
    uint64_t bad = 0;
    for (size_t i = 0; i < nchars / 8; i++) {
        uint64_t w;
        memcpy(&w, raw + 8 * i, 8); /* byte j of w is character 8i + j */
        uint64_t digit = hf_hex__at_least(w, '0') & ~hf_hex__at_least(w, '9' + 1);
        uint64_t letter = hf_hex__at_least(w, 'a') & ~hf_hex__at_least(w, 'f' + 1);
        bad |= (w & HF_HEX__HIGHS) | ((digit | letter) ^ HF_HEX__HIGHS);
        /* value of each character: low nibble, +9 for letters (bit 6 set) */
        uint64_t v = (w & 0x0f * HF_HEX__ONES) + 9 * ((w >> 6) & HF_HEX__ONES);
        /* byte pairs (high nibble first) -> one byte in each 16-bit lane */
        v = ((v & 0x000f000f000f000full) << 4) | ((v >> 8) & 0x000f000f000f000full);
        v = (v | (v >> 8)) & 0x0000ffff0000ffffull;
        v = (v | (v >> 16)) & 0x00000000ffffffffull;
        uint32_t packed = (uint32_t)v;
        memcpy(out + 4 * i, &packed, 4);
    }
    return bad == 0;
}

static inline void hf_hex_unpack_table(const uint8_t *in, size_t nbytes, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < nbytes; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 0x0f];
    }
}

#ifdef __SSE2__
/* 16 characters -> 8 16-bit lanes, each the byte of one character pair;
 * lanes of characters that are not lowercase hex set in *bad. */
static inline __m128i hf_hex__pack16(const char *raw, __m128i *bad)
{
    __m128i c = _mm_loadu_si128((const __m128i *)(const void *)raw);
    /* signed compares: bytes >= 0x80 are negative, in neither range */
    __m128i digit = _mm_and_si128(_mm_cmpgt_epi8(c, _mm_set1_epi8('0' - 1)),
                                  _mm_cmplt_epi8(c, _mm_set1_epi8('9' + 1)));
    __m128i letter = _mm_and_si128(_mm_cmpgt_epi8(c, _mm_set1_epi8('a' - 1)),
                                   _mm_cmplt_epi8(c, _mm_set1_epi8('f' + 1)));
    *bad = _mm_or_si128(*bad, _mm_andnot_si128(_mm_or_si128(digit, letter), _mm_set1_epi8(-1)));
    /* value: low nibble, +9 for letters */
    __m128i v = _mm_add_epi8(_mm_and_si128(c, _mm_set1_epi8(0x0f)),
                             _mm_and_si128(letter, _mm_set1_epi8(9)));
    /* per 16-bit lane: first character (low byte) is the high nibble */
    return _mm_or_si128(_mm_slli_epi16(_mm_and_si128(v, _mm_set1_epi16(0x00ff)), 4),
                        _mm_srli_epi16(v, 8));
}

/* 16 nibbles (one per byte) -> their 16 lowercase hex characters */
static inline __m128i hf_hex__chars16(__m128i nib)
{
    __m128i letter = _mm_cmpgt_epi8(nib, _mm_set1_epi8(9));
    return _mm_add_epi8(_mm_add_epi8(nib, _mm_set1_epi8('0')),
                        _mm_and_si128(letter, _mm_set1_epi8('a' - '0' - 10)));
}

static inline bool hf_hex_pack(const char *raw, size_t nchars, uint8_t *out)
{
    __m128i bad = _mm_setzero_si128();
    /* unrolled: the callers' lengths are constants (32 or 64 characters) */
#pragma GCC unroll 4
    for (size_t i = 0; i < nchars; i += 32) {
        __m128i a = hf_hex__pack16(raw + i, &bad), b = hf_hex__pack16(raw + i + 16, &bad);
        /* every lane is <= 0xff: unsigned saturation packs it exactly */
        _mm_storeu_si128((__m128i *)(void *)(out + i / 2), _mm_packus_epi16(a, b));
    }
    return _mm_movemask_epi8(bad) == 0;
}

static inline void hf_hex_unpack(const uint8_t *in, size_t nbytes, char *out)
{
#pragma GCC unroll 4
    for (size_t i = 0; i < nbytes; i += 16) {
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(in + i));
        __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0x0f));
        __m128i lo = _mm_and_si128(b, _mm_set1_epi8(0x0f));
        /* interleaved: the high nibble's character first */
        _mm_storeu_si128((__m128i *)(void *)(out + 2 * i),
                         hf_hex__chars16(_mm_unpacklo_epi8(hi, lo)));
        _mm_storeu_si128((__m128i *)(void *)(out + 2 * i + 16),
                         hf_hex__chars16(_mm_unpackhi_epi8(hi, lo)));
    }
}
#else
static inline bool hf_hex_pack(const char *raw, size_t nchars, uint8_t *out)
{
    return hf_hex_pack_swar(raw, nchars, out);
}

static inline void hf_hex_unpack(const uint8_t *in, size_t nbytes, char *out)
{
    hf_hex_unpack_table(in, nbytes, out);
}
#endif

#endif
