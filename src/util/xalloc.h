/*
 * xalloc.h: allocation that cannot fail.
 *
 * The server aborts on out-of-memory, deliberately and only here: a metadata
 * server that half-applies a change because malloc failed would break the
 * ownership invariant, which is worse than a restart. (The client library
 * never uses these: it returns errors.)
 */
#ifndef HF_XALLOC_H
#define HF_XALLOC_H

#include <stddef.h>
#include <stdint.h>

void *hf_xmalloc(size_t size);
void *hf_xcalloc(size_t count, size_t size);
void *hf_xrealloc(void *ptr, size_t size);
/* realloc of an array of count elements of size bytes, checking the product. */
void *hf_xreallocarray(void *ptr, size_t count, size_t size);
/* A copy of the count elements of size bytes at p (a snapshot taken under a
 * lock); room for one at least, so that count 0 gives a pointer to free. */
void *hf_xmemdup(const void *p, size_t count, size_t size);
/*
 * Growth of an array of elem_size-byte elements (a byte buffer: 1) that must
 * now hold `need` of them: when *cap (in elements) is smaller, the capacity
 * doubles, from 256 bytes' worth, until it holds need, and *cap and the
 * reallocated pointer are returned; else ptr unchanged. hf_grow_max never
 * goes past max elements (need <= max is the caller's to check: the last
 * doubling stops at max).
 */
void *hf_grow_slow(void *ptr, size_t *cap, size_t need, size_t elem_size, size_t max);
static inline void *hf_grow_max(void *ptr, size_t *cap, size_t need, size_t elem_size, size_t max)
{
    if (need <= *cap) /* the common case, inline: a push into room already there */
        return ptr;
    return hf_grow_slow(ptr, cap, need, elem_size, max);
}
static inline void *hf_grow(void *ptr, size_t *cap, size_t need, size_t elem_size)
{
    return hf_grow_max(ptr, cap, need, elem_size, (size_t)-1 / elem_size);
}
/*
 * Growth of a table indexed by a 32-bit id so that it holds `index`: when
 * *cap is not above it, the capacity doubles from `first` until it is, the
 * new elements are zeroed, and *cap and the reallocated pointer are
 * returned; else ptr unchanged.
 */
void *hf_grow_index(void *ptr, uint32_t *cap, uint32_t index, size_t elem_size, uint32_t first);
/* Frees what the functions above returned. */
void hf_xfree(void *ptr);

/*
 * Where the memory comes from: the C library's allocator unless a host
 * process supplies its own before the first allocation (the Redis module
 * gives Redis's, so that used_memory and maxmemory count the core). The
 * functions follow malloc/calloc/realloc/free, and may return NULL only
 * where those may; every pointer allocated before the change must be freed
 * by the allocator that made it, so a host sets this once, at load.
 */
typedef struct hf_allocator {
    void *(*malloc)(size_t size);
    void *(*calloc)(size_t count, size_t size);
    void *(*realloc)(void *ptr, size_t size);
    void (*free)(void *ptr);
} hf_allocator;

void hf_set_allocator(const hf_allocator *a);

#endif
