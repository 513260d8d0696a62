/*
 * buf.h: the server's growable byte buffer (git's strbuf, without the NUL),
 * with an optional maximum (as curl's dynbuf). The WAL's records, the
 * module's replies, the JSON writer's answers (json_buf) and the HTTP
 * connections' requests and answers are all one.
 *
 * The owner frees it with hf_buf_free; growth goes through hf_xrealloc, so
 * it aborts on out-of-memory like every other allocation of the server. A
 * zeroed hf_buf is empty, has no maximum and is ready. A buffer given a
 * maximum (hf_buf_init) never holds more than that many bytes: a growth past
 * it changes nothing, answers false and sets `overflow`, which stays set
 * (every later growth fails too) until hf_buf_reset, so that a writer may
 * append freely and check once at the end; the caller turns it into its
 * out-of-limit answer. A buffer without a maximum never refuses. ptr is
 * valid until the next call that grows the buffer.
 */
#ifndef HF_BUF_H
#define HF_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/bytes.h"

typedef struct hf_buf {
    char *ptr;
    size_t len, cap;
    size_t max;    /* largest len allowed, when bounded */
    bool bounded;  /* false (a zeroed buffer): no maximum */
    bool overflow; /* a growth was refused because of max */
} hf_buf;

/* An empty buffer of at most max bytes (0 included). */
static inline void hf_buf_init(hf_buf *b, size_t max)
{
    *b = (hf_buf){.max = max, .bounded = true};
}

/* A new maximum for the growths to come (the bytes there stay). */
static inline void hf_buf_set_max(hf_buf *b, size_t max)
{
    b->max = max;
    b->bounded = true;
}

/* Room for `more` bytes after len: capacity doubles from 256, up to the
 * maximum; false (nothing changed) if len + more would pass it, or after
 * an earlier refusal. */
bool hf_buf_grow(hf_buf *b, size_t more);
static inline bool hf_buf_reserve(hf_buf *b, size_t more)
{
    if (!b->overflow && b->cap - b->len >= more) /* inline: room already there */
        return true;
    return hf_buf_grow(b, more);
}
/* false (nothing appended) as hf_buf_reserve. */
bool hf_buf_append(hf_buf *b, const void *data, size_t len);
/* Empty, and no overflow; memory above keep_bytes is given back. */
void hf_buf_reset(hf_buf *b, size_t keep_bytes);
/* Frees the memory; the maximum stays. */
void hf_buf_free(hf_buf *b);

/* Appends v as a varint (util/bytes.h). */
static inline bool hf_buf_put_varint(hf_buf *b, uint64_t v)
{
    if (!hf_buf_reserve(b, HF_VARINT_MAX))
        return false;
    b->len += hf_varint_put(b->ptr + b->len, v);
    return true;
}

#endif
