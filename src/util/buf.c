#include "util/buf.h"

#include <string.h>

#include "util/xalloc.h"

bool hf_buf_reserve(hf_buf *b, size_t more)
{
    if (b->cap - b->len >= more)
        return true;
    size_t max = b->max ? b->max : SIZE_MAX;
    if (more > max - b->len)
        return false;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < more && cap <= max / 2)
        cap *= 2;
    if (cap > max || cap - b->len < more)
        cap = max; /* the last doubling would pass the maximum: stop at it */
    b->ptr = hf_xrealloc(b->ptr, cap);
    b->cap = cap;
    return true;
}

bool hf_buf_append(hf_buf *b, const void *data, size_t len)
{
    if (!hf_buf_reserve(b, len))
        return false;
    if (len)
        memcpy(b->ptr + b->len, data, len);
    b->len += len;
    return true;
}

void hf_buf_free(hf_buf *b)
{
    hf_xfree(b->ptr);
    hf_buf_init(b, b->max);
}
