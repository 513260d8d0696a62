/*
 * slice.h: a non-owning view of bytes (h2o's h2o_iovec_t).
 *
 * A slice never owns its bytes: whoever hands one out says how long the bytes
 * stay valid. Keys travel through every layer as slices.
 */
#ifndef HF_SLICE_H
#define HF_SLICE_H

#include <stddef.h>
#include <string.h>

typedef struct hf_slice {
    const char *ptr;
    size_t len;
} hf_slice;

#define HF_SLICE_LIT(s) ((hf_slice){(s), sizeof(s) - 1})

static inline hf_slice hf_slice_from_cstr(const char *s)
{
    return (hf_slice){s, strlen(s)};
}

static inline int hf_slice_eq(hf_slice a, hf_slice b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

#endif
