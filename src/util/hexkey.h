/*
 * hexkey.h: the shape of a hashed key, `<32 or 64 lowercase hex><suffix>`
 * (vLLM's MD5 and SGLang's SHA-256 digests, SGLang's `<hash>-k`, `<hash>-v`
 * and `<hash>_<pool>`), and its byte form in the log, snapshots and the
 * Redis module's saved values, so that the rule exists once.
 *
 *   hf_hexkey_split  the shape of a key: the hex characters it starts with
 *                    (32 or 64) when the rest, its suffix, is 1 to
 *                    HF_HEXKEY_SUFFIX_MAX bytes of anything; 0 otherwise
 *                    (a bare 32- or 64-hex key has no suffix: 0 as well)
 *   hf_hexkey_put    a key's bytes: varint (n << 1 | 0), n raw bytes; or
 *                    varint (n << 1 | 1), n bytes of packed hex, one byte
 *                    s, s bytes of suffix. Packed: a key of even length
 *                    that is all lowercase hex (s = 0), or one that
 *                    hf_hexkey_split cuts. The form without s (an odd
 *                    varint is n packed bytes and nothing else) is the
 *                    older one: hf_hexkey_get reads both, as asked.
 *   hf_hexkey_get    a key back; -1 if malformed
 *
 * The suffix bound: 16 bytes holds every suffix SGLang sends (`-k`, `-v`,
 * `_` and a pool name of up to 15 characters), and a 32-hex key's 16
 * packed bytes and its suffix fill the core's 32 bytes of key exactly.
 */
#ifndef HF_HEXKEY_H
#define HF_HEXKEY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/buf.h"
#include "util/bytes.h"
#include "util/hex.h"
#include "util/slice.h"

#define HF_HEXKEY_SUFFIX_MAX 16
#define HF_HEXKEY_TEXT_MAX (64 + HF_HEXKEY_SUFFIX_MAX) /* the longest key of the shape */

static inline bool hf_hexkey__all_hex(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return false;
    }
    return true;
}

/* 64 or 32 when key is that many lowercase hex characters then a suffix of
 * 1..HF_HEXKEY_SUFFIX_MAX bytes (64 tried first: the cut is unique); 0. */
static inline size_t hf_hexkey_split(hf_slice key)
{
    if (key.len > 64 && key.len <= 64 + HF_HEXKEY_SUFFIX_MAX && hf_hexkey__all_hex(key.ptr, 64))
        return 64;
    if (key.len > 32 && key.len <= 32 + HF_HEXKEY_SUFFIX_MAX && hf_hexkey__all_hex(key.ptr, 32))
        return 32;
    return 0;
}

static inline void hf_hexkey_put(hf_buf *b, hf_slice key)
{
    size_t hex = 0;
    if (key.len >= 2 && key.len % 2 == 0 && hf_hexkey__all_hex(key.ptr, key.len))
        hex = key.len;
    else
        hex = hf_hexkey_split(key);
    if (hex == 0) {
        hf_buf_put_varint(b, (uint64_t)key.len << 1);
        hf_buf_append(b, key.ptr, key.len);
        return;
    }
    size_t n = hex / 2, s = key.len - hex;
    hf_buf_put_varint(b, (uint64_t)n << 1 | 1);
    if (!hf_buf_reserve(b, n + 1 + s))
        return;
    uint8_t *o = (uint8_t *)b->ptr + b->len;
    for (size_t i = 0; i < n; i++) /* every character is hex: checked above */
        o[i] = (uint8_t)((unsigned)hf_hex_value(key.ptr[2 * i]) << 4 |
                         (unsigned)hf_hex_value(key.ptr[2 * i + 1]));
    o[n] = (uint8_t)s;
    if (s)
        memcpy(o + n + 1, key.ptr + hex, s);
    b->len += n + 1 + s;
}

/*
 * The key at *pos of p[0..len) into *out, advancing *pos: raw keys point
 * into p, packed ones are unpacked into *scratch (reset). `suffixed`: the
 * form with a suffix byte after packed hex (else the older one). 0, or -1
 * if malformed (a length past the end or above `most`).
 */
static inline int hf_hexkey_get(const uint8_t *p, size_t len, size_t *pos, bool suffixed,
                                size_t most, hf_buf *scratch, hf_slice *out)
{
    uint64_t h;
    int got = hf_varint_get(p + *pos, len - *pos, &h);
    if (got <= 0)
        return -1;
    *pos += (size_t)got;
    uint64_t n = h >> 1;
    if (n > most || n > len - *pos)
        return -1;
    const uint8_t *in = p + *pos;
    *pos += (size_t)n;
    if (!(h & 1)) {
        *out = (hf_slice){(const char *)in, (size_t)n};
        return 0;
    }
    size_t s = 0;
    const uint8_t *suffix = NULL;
    if (suffixed) {
        if (*pos >= len)
            return -1;
        s = p[(*pos)++];
        if (s > HF_HEXKEY_SUFFIX_MAX || s > len - *pos)
            return -1;
        suffix = p + *pos;
        *pos += s;
    }
    scratch->len = 0;
    if (!hf_buf_reserve(scratch, 2 * (size_t)n + s))
        return -1;
    hf_hex_unpack_table(in, (size_t)n, scratch->ptr);
    if (s)
        memcpy(scratch->ptr + 2 * n, suffix, s);
    scratch->len = 2 * (size_t)n + s;
    *out = (hf_slice){scratch->ptr, scratch->len};
    return 0;
}

#endif
