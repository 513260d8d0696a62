/*
 * buf.h: a growable byte buffer with a maximum (as curl's dynbuf).
 *
 * Every append either fits under `max` and succeeds, or fails and makes the
 * buffer's error sticky (HF3FS_META_ENOMEM, or HF3FS_META_ETOOBIG past the
 * maximum): a writer appends freely and checks hf3fs_meta__buf_error() once at
 * the end. The data is always NUL-terminated after `len` bytes (when data is
 * not NULL), which the NUL does not count in. The buffer owns `data`.
 */
#ifndef HF3FS_META_LIB_BUF_H
#define HF3FS_META_LIB_BUF_H

#include <stddef.h>
#include <stdint.h>

typedef struct hf3fs_meta__buf {
    char *data;
    size_t len;
    size_t cap;
    size_t max; /* largest len allowed */
    int error;  /* 0, or the first HF3FS_META_E* an append ran into */
} hf3fs_meta__buf;

void hf3fs_meta__buf_init(hf3fs_meta__buf *b, size_t max);
void hf3fs_meta__buf_free(hf3fs_meta__buf *b);
/* Forget the contents and the error; keep the memory. */
void hf3fs_meta__buf_reset(hf3fs_meta__buf *b);
/* Make room for `extra` more bytes (and the NUL). 0 or the sticky error. */
int hf3fs_meta__buf_reserve(hf3fs_meta__buf *b, size_t extra);
void hf3fs_meta__buf_append(hf3fs_meta__buf *b, const void *bytes, size_t n);
void hf3fs_meta__buf_puts(hf3fs_meta__buf *b, const char *s);
void hf3fs_meta__buf_putc(hf3fs_meta__buf *b, char ch);
void hf3fs_meta__buf_put_i64(hf3fs_meta__buf *b, int64_t v);
/* Hand the bytes over to the caller (NUL-terminated, never NULL on success);
 * the buffer is empty afterwards. NULL if the buffer is in error or out of
 * memory. */
char *hf3fs_meta__buf_steal(hf3fs_meta__buf *b, size_t *len_out);

static inline int hf3fs_meta__buf_error(const hf3fs_meta__buf *b)
{
    return b->error;
}

#endif
