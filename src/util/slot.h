/*
 * slot.h: the Redis Cluster slot of a key (CRC16-CCITT/XMODEM of its hash
 * tag, or of the whole key, modulo 16384), as Redis computes it. Header-only:
 * the front end's cluster routing and the module's stripe keys use it.
 */
#ifndef HF_UTIL_SLOT_H
#define HF_UTIL_SLOT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define HF_CLUSTER_SLOTS 16384

/* Polynomial 0x1021, initial value 0, as Redis's crc16.c. */
static inline uint16_t hf_crc16(const unsigned char *p, size_t len)
{
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc = (uint16_t)(crc ^ (p[i] << 8));
        for (int bit = 0; bit < 8; bit++)
            crc = (uint16_t)((crc & 0x8000) ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    return crc;
}

/* The slot of key[0..len): of its hash tag (the bytes between the first
 * '{' and the next '}', if not empty), else of the whole key. */
static inline int hf_key_slot(const void *key, size_t len)
{
    const unsigned char *k = key;
    const unsigned char *open = len ? memchr(k, '{', len) : NULL;
    if (open) {
        size_t from = (size_t)(open - k) + 1;
        const unsigned char *close = memchr(k + from, '}', len - from);
        if (close && close > k + from)
            return hf_crc16(k + from, (size_t)(close - (k + from))) & (HF_CLUSTER_SLOTS - 1);
    }
    return hf_crc16(k, len) & (HF_CLUSTER_SLOTS - 1);
}

#endif
