#include "util/buf.h"

#include <string.h>

#include "util/xalloc.h"

/* hf_buf_reserve's growth: called when the room is short (or overflow set). */
bool hf_buf_grow(hf_buf *b, size_t more)
{
    if (b->overflow)
        return false;
    if (b->cap - b->len >= more)
        return true;
    size_t max = b->bounded ? b->max : SIZE_MAX;
    if (more > max - b->len) {
        b->overflow = true;
        return false;
    }
    b->ptr = hf_grow_max(b->ptr, &b->cap, b->len + more, 1, max);
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

void hf_buf_reset(hf_buf *b, size_t keep_bytes)
{
    if (b->cap > keep_bytes)
        hf_buf_free(b);
    b->len = 0;
    b->overflow = false;
}

void hf_buf_free(hf_buf *b)
{
    hf_xfree(b->ptr);
    *b = (hf_buf){.max = b->max, .bounded = b->bounded};
}
