/*
 * buf.h: a growable byte buffer (git's strbuf, without the NUL).
 *
 * The owner frees it with hf_buf_free; growth goes through hf_xrealloc, so
 * it aborts on out-of-memory like every other allocation of the server. A
 * zeroed hf_buf is empty and ready. ptr is valid until the next call that
 * grows the buffer.
 */
#ifndef HF_BUF_H
#define HF_BUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct hf_buf {
    uint8_t *ptr;
    size_t len, cap;
} hf_buf;

/* Room for `more` bytes after len (capacity doubles from 256). */
void hf_buf_reserve(hf_buf *b, size_t more);
void hf_buf_append(hf_buf *b, const void *data, size_t len);
void hf_buf_free(hf_buf *b);

#endif
