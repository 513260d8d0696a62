#include "util/buf.h"

#include <string.h>

#include "util/xalloc.h"

void hf_buf_reserve(hf_buf *b, size_t more)
{
    if (b->cap - b->len >= more)
        return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < more)
        cap *= 2;
    b->ptr = hf_xrealloc(b->ptr, cap);
    b->cap = cap;
}

void hf_buf_append(hf_buf *b, const void *data, size_t len)
{
    hf_buf_reserve(b, len);
    if (len)
        memcpy(b->ptr + b->len, data, len);
    b->len += len;
}

void hf_buf_free(hf_buf *b)
{
    hf_xfree(b->ptr);
    *b = (hf_buf){0};
}
