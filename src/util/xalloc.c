#include "util/xalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static hf_allocator alloc = {malloc, calloc, realloc, free};

void hf_set_allocator(const hf_allocator *a)
{
    alloc = *a;
}

static void out_of_memory(size_t size)
{
    fprintf(stderr, "hf3fs-metad: fatal: out of memory allocating %zu bytes\n", size);
    abort();
}

void *hf_xmalloc(size_t size)
{
    void *p = alloc.malloc(size ? size : 1);
    if (!p)
        out_of_memory(size);
    return p;
}

void *hf_xcalloc(size_t count, size_t size)
{
    void *p = alloc.calloc(count ? count : 1, size ? size : 1);
    if (!p)
        out_of_memory(count * size);
    return p;
}

void *hf_xrealloc(void *ptr, size_t size)
{
    void *p = alloc.realloc(ptr, size ? size : 1);
    if (!p)
        out_of_memory(size);
    return p;
}

void *hf_xreallocarray(void *ptr, size_t count, size_t size)
{
    if (size && count > (size_t)-1 / size)
        out_of_memory((size_t)-1);
    return hf_xrealloc(ptr, count * size);
}

void *hf_xmemdup(const void *p, size_t count, size_t size)
{
    void *copy = hf_xreallocarray(NULL, count ? count : 1, size);
    if (count)
        memcpy(copy, p, count * size);
    return copy;
}

void *hf_grow_slow(void *ptr, size_t *cap, size_t need, size_t elem_size, size_t max)
{
    size_t c = *cap ? *cap : 256 / elem_size ? 256 / elem_size : 1;
    while (c < need && c <= max / 2)
        c *= 2;
    if (c < need || c > max)
        c = max;
    *cap = c;
    return hf_xreallocarray(ptr, c, elem_size);
}

void *hf_grow_index(void *ptr, uint32_t *cap, uint32_t index, size_t elem_size, uint32_t first)
{
    if (index < *cap)
        return ptr;
    uint64_t c = *cap ? *cap : first;
    while (c <= index)
        c *= 2;
    char *p = hf_xreallocarray(ptr, (size_t)c, elem_size);
    memset(p + (size_t)*cap * elem_size, 0, (size_t)(c - *cap) * elem_size);
    *cap = c > UINT32_MAX ? UINT32_MAX : (uint32_t)c;
    return p;
}

void hf_xfree(void *ptr)
{
    if (ptr)
        alloc.free(ptr);
}
