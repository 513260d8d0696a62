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

void *hf_xmalloc(size_t size);
void *hf_xcalloc(size_t count, size_t size);
void *hf_xrealloc(void *ptr, size_t size);
/* realloc of an array of count elements of size bytes, checking the product. */
void *hf_xreallocarray(void *ptr, size_t count, size_t size);

#endif
