/*
 * bytes.h: the byte codecs every on-disk and on-wire format of the project
 * shares (the WAL, the Redis module's arguments, replies and RDB), so that
 * each exists once.
 *
 *   le16/le32/le64   little-endian integers, whatever the host's order
 *   varint           unsigned LEB128: 7 bits a byte, low group first, the
 *                    high bit set on every byte but the last; at most
 *                    HF_VARINT_MAX bytes for a uint64_t
 *   zigzag           a signed value's bits mapped so that small magnitudes
 *                    give small unsigned values (0, -1, 1, -2 -> 0, 1, 2, 3),
 *                    for a varint; done on the two's-complement bits as
 *                    uint64_t, so that no signed shift or overflow happens
 *                    and every int64_t round-trips
 *
 * Pointers are void * so that char and uint8_t buffers both take them. The
 * decoders never read past the length they are given.
 */
#ifndef HF_BYTES_H
#define HF_BYTES_H

#include <stddef.h>
#include <stdint.h>

static inline void hf_put_le16(void *p, uint16_t v)
{
    uint8_t *u = p;
    u[0] = (uint8_t)v;
    u[1] = (uint8_t)(v >> 8);
}

static inline void hf_put_le32(void *p, uint32_t v)
{
    uint8_t *u = p;
    for (int i = 0; i < 4; i++)
        u[i] = (uint8_t)(v >> (8 * i));
}

static inline void hf_put_le64(void *p, uint64_t v)
{
    uint8_t *u = p;
    for (int i = 0; i < 8; i++)
        u[i] = (uint8_t)(v >> (8 * i));
}

static inline uint16_t hf_get_le16(const void *p)
{
    const uint8_t *u = p;
    return (uint16_t)(u[0] | u[1] << 8);
}

static inline uint32_t hf_get_le32(const void *p)
{
    const uint8_t *u = p;
    return (uint32_t)u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 | (uint32_t)u[3] << 24;
}

static inline uint64_t hf_get_le64(const void *p)
{
    const uint8_t *u = p;
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | u[i];
    return v;
}

#define HF_VARINT_MAX 10

/* Writes v at out (room for HF_VARINT_MAX bytes); the bytes written. */
static inline size_t hf_varint_put(void *out, uint64_t v)
{
    uint8_t *u = out;
    size_t n = 0;
    while (v >= 0x80) {
        u[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    u[n++] = (uint8_t)v;
    return n;
}

/*
 * Reads a varint from p[0..len) into *out: the bytes it took (1 or more),
 * 0 if len ran out before its last byte, -1 if it runs longer than
 * HF_VARINT_MAX bytes (bits past the 64th of a tenth byte are dropped, as
 * every reader of the project always did).
 */
static inline int hf_varint_get(const void *p, size_t len, uint64_t *out)
{
    const uint8_t *u = p;
    uint64_t v = 0;
    for (size_t i = 0; i < HF_VARINT_MAX; i++) {
        if (i >= len)
            return 0;
        v |= (uint64_t)(u[i] & 0x7f) << (7 * i);
        if (!(u[i] & 0x80)) {
            *out = v;
            return (int)i + 1;
        }
    }
    return -1;
}

/* v: the two's-complement bits of a signed value ((uint64_t)x). */
static inline uint64_t hf_zigzag_encode(uint64_t v)
{
    return (v << 1) ^ (0 - (v >> 63));
}

/* The inverse: the signed value's bits ((int64_t) of it is the value). */
static inline uint64_t hf_zigzag_decode(uint64_t z)
{
    return (z >> 1) ^ (0 - (z & 1));
}

#endif
