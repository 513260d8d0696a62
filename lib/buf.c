/* buf.c: see buf.h. */
#include "buf.h"

#include <stdlib.h>
#include <string.h>

#include "hf3fs_meta.h"

void hf3fs_meta__buf_init(hf3fs_meta__buf *b, size_t max)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->max = max;
    b->error = 0;
}

void hf3fs_meta__buf_free(hf3fs_meta__buf *b)
{
    free(b->data);
    hf3fs_meta__buf_init(b, b->max);
}

void hf3fs_meta__buf_reset(hf3fs_meta__buf *b)
{
    b->len = 0;
    b->error = 0;
    if (b->data)
        b->data[0] = '\0';
}

int hf3fs_meta__buf_reserve(hf3fs_meta__buf *b, size_t extra)
{
    if (b->error)
        return b->error;
    if (extra > b->max || b->len > b->max - extra) {
        b->error = HF3FS_META_ETOOBIG;
        return b->error;
    }
    size_t need = b->len + extra + 1; /* + NUL */
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *data = realloc(b->data, cap);
    if (!data) {
        b->error = HF3FS_META_ENOMEM;
        return b->error;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

void hf3fs_meta__buf_append(hf3fs_meta__buf *b, const void *bytes, size_t n)
{
    if (hf3fs_meta__buf_reserve(b, n) != 0)
        return;
    if (n)
        memcpy(b->data + b->len, bytes, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void hf3fs_meta__buf_puts(hf3fs_meta__buf *b, const char *s)
{
    hf3fs_meta__buf_append(b, s, strlen(s));
}

void hf3fs_meta__buf_putc(hf3fs_meta__buf *b, char ch)
{
    hf3fs_meta__buf_append(b, &ch, 1);
}

void hf3fs_meta__buf_put_i64(hf3fs_meta__buf *b, int64_t v)
{
    char digits[24];
    size_t i = sizeof digits;
    /* Work on the magnitude as unsigned so that INT64_MIN is fine. */
    uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        digits[--i] = (char)('0' + mag % 10);
        mag /= 10;
    } while (mag);
    if (v < 0)
        digits[--i] = '-';
    hf3fs_meta__buf_append(b, digits + i, sizeof digits - i);
}

char *hf3fs_meta__buf_steal(hf3fs_meta__buf *b, size_t *len_out)
{
    if (b->error || hf3fs_meta__buf_reserve(b, 0) != 0)
        return NULL;
    char *out = b->data;
    out[b->len] = '\0';
    if (len_out)
        *len_out = b->len;
    hf3fs_meta__buf_init(b, b->max);
    return out;
}
