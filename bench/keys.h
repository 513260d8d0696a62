/*
 * keys.h: the benchmark keys, one generator for bench/loadgen and
 * bench/core_memory (header only: loadgen does not link the core).
 *
 * key(i) in one of the engines' shapes, KEYCHARS bytes:
 *   32  vLLM: the shape of its connector's keys, hashlib.md5(...).hexdigest(),
 *       32 lowercase hex characters;
 *   64  SGLang HiCache: the chained SHA-256 hex digest of a page's tokens,
 *       64 lowercase hex characters (layer_first layouts, MLA models);
 *   66  SGLang HiCache's 3FS backend for an MHA model under the page_first
 *       layouts: each page is two keys, "<64 hex>-k" and "<64 hex>-v"
 *       (_get_mha_zero_copy_keys); key 2p is page p's "-k", key 2p+1 its "-v".
 * The hex characters are pseudo-random (splitmix64 of i), distinct for every
 * i: they have the digests' shape, not their values.
 */
#ifndef HF3FS_BENCH_KEYS_H
#define HF3FS_BENCH_KEYS_H

#include <stdint.h>
#include <stdlib.h>

#define BENCH_KEY_MAX 66

static inline uint64_t bench_splitmix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* 1 when chars is a shape above (32, 64 or 66) */
static inline int bench_key_shape_ok(int chars)
{
    return chars == 32 || chars == 64 || chars == 66;
}

/* the KEYCHARS environment variable when set (0 if it is not a shape), else dflt */
static inline int bench_key_chars_env(int dflt)
{
    const char *v = getenv("KEYCHARS");
    if (!v || !*v)
        return dflt;
    int chars = atoi(v);
    return bench_key_shape_ok(chars) ? chars : 0;
}

/* key(i): `chars` bytes into out, no NUL */
static inline void bench_key_text(uint64_t i, int chars, char *out)
{
    static const char hex[] = "0123456789abcdef";
    uint64_t base = chars == 66 ? i >> 1 : i;
    for (int w = 0; w < (chars == 66 ? 64 : chars) / 16; w++) {
        uint64_t v = bench_splitmix(base * 4 + (uint64_t)w);
        for (int c = 0; c < 16; c++)
            out[w * 16 + c] = hex[(v >> (60 - 4 * c)) & 15];
    }
    if (chars == 66) {
        out[64] = '-';
        out[65] = (i & 1) ? 'v' : 'k';
    }
}

#endif
