/*
 * buf.h: a growable byte buffer (git's strbuf, without the NUL), with an
 * optional maximum (as curl's dynbuf).
 *
 * The owner frees it with hf_buf_free; growth goes through hf_xrealloc, so
 * it aborts on out-of-memory like every other allocation of the server. A
 * zeroed hf_buf is empty, has no maximum and is ready. A buffer given a
 * maximum (hf_buf_init) never holds more than that many bytes: a growth past
 * it changes nothing and answers false, which the caller turns into its
 * out-of-limit answer (a buffer without one never refuses). ptr is valid
 * until the next call that grows the buffer.
 */
#ifndef HF_BUF_H
#define HF_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/bytes.h"

typedef struct hf_buf {
    uint8_t *ptr;
    size_t len, cap;
    size_t max; /* largest len allowed; 0: no maximum */
} hf_buf;

/* An empty buffer of at most max bytes (0: no maximum). */
static inline void hf_buf_init(hf_buf *b, size_t max)
{
    *b = (hf_buf){.max = max};
}

/* Room for `more` bytes after len: capacity doubles from 256, up to the
 * maximum; false (nothing changed) if len + more would pass it. */
bool hf_buf_reserve(hf_buf *b, size_t more);
/* false (nothing appended) past the maximum. */
bool hf_buf_append(hf_buf *b, const void *data, size_t len);
/* Frees the memory; the maximum stays. */
void hf_buf_free(hf_buf *b);

/* Appends v as a varint (util/bytes.h); for a buffer without a maximum. */
static inline void hf_buf_put_varint(hf_buf *b, uint64_t v)
{
    hf_buf_reserve(b, HF_VARINT_MAX);
    b->len += hf_varint_put(b->ptr + b->len, v);
}

#endif
