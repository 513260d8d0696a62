/*
 * hash.h: the 64-bit FNV-1a hash of bytes and MurmurHash3's finalizer,
 * written once for every table and route that hashes a string: the stripe
 * of a key (wire.c, whose values the front ends must agree on forever) and
 * the tenant tables (tenants.c, seeded). Header-only, on the C library alone.
 */
#ifndef HF_UTIL_HASH_H
#define HF_UTIL_HASH_H

#include <stddef.h>
#include <stdint.h>

#define HF_FNV_OFFSET 0xcbf29ce484222325ull /* FNV-1a, 64 bits */
#define HF_FNV_PRIME 0x100000001b3ull

/* FNV-1a of p[0..len) from the state h (HF_FNV_OFFSET, or a seeded one). */
static inline uint64_t hf_fnv1a(uint64_t h, const void *p, size_t len)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < len; i++)
        h = (h ^ b[i]) * HF_FNV_PRIME;
    return h;
}

/* MurmurHash3's fmix64: every bit of the input reaches the top bits. */
static inline uint64_t hf_fmix64(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

#endif
