/*
 * import_pool.c: core_pool_import() (core.h), one imported pool built on a
 * core with the core's own calls, and the checks of its lists.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "util/xalloc.h"

/* qsort's context: the list whose indexes are sorted. */
static _Thread_local const int64_t *sort_pages;
static _Thread_local const hf_slice *sort_keys;

static int cmp_by_page(const void *a, const void *b)
{
    int64_t pa = sort_pages[*(const size_t *)a], pb = sort_pages[*(const size_t *)b];
    return (pa > pb) - (pa < pb);
}

static int cmp_by_key(const void *a, const void *b)
{
    hf_slice ka = sort_keys[*(const size_t *)a], kb = sort_keys[*(const size_t *)b];
    int c = memcmp(ka.ptr, kb.ptr, ka.len < kb.len ? ka.len : kb.len);
    return c ? c : (ka.len > kb.len) - (ka.len < kb.len);
}

/* order[0..n) sorted by cmp; the first two neighbours it calls equal. */
static bool repeated(size_t n, size_t *order, int (*cmp)(const void *, const void *), size_t *first,
                     size_t *second)
{
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    qsort(order, n, sizeof *order, cmp);
    for (size_t i = 1; i < n; i++)
        if (cmp(&order[i - 1], &order[i]) == 0) {
            *first = order[i - 1];
            *second = order[i];
            return true;
        }
    return false;
}

bool core_repeated_page(const int64_t *pages, size_t n, size_t *order, size_t *first,
                        size_t *second)
{
    sort_pages = pages;
    return repeated(n, order, cmp_by_page, first, second);
}

bool core_repeated_key(const hf_slice *keys, size_t n, size_t *order, size_t *first, size_t *second)
{
    sort_keys = keys;
    return repeated(n, order, cmp_by_key, first, second);
}

int core_pool_import(core_t *core, hf_slice ns, uint32_t rank, uint64_t num_pages,
                     const hf_slice *keys, const int64_t *pages, size_t n, int64_t now)
{
    if (core_pool_find(core, ns, rank))
        return CORE_EEXIST;
    /* Check everything before the pool exists: a refusal changes nothing. */
    const core_config *cfg = core_get_config(core);
    if (num_pages > cfg->max_pages || rank >= cfg->max_ranks)
        return CORE_EINVAL;
    uint64_t mark = 0; /* the highest imported page + 1 */
    for (size_t i = 0; i < n; i++) {
        if (pages[i] < 0 || (uint64_t)pages[i] >= num_pages || keys[i].len == 0)
            return CORE_EINVAL;
        if ((uint64_t)pages[i] + 1 > mark)
            mark = (uint64_t)pages[i] + 1;
    }
    /* Allocation in increasing page order: a replica applying the RESERVE
     * events then only raises its high-water mark (core_apply_live), and
     * never searches its free stack. */
    size_t *order = hf_xmalloc((n ? n : 1) * sizeof *order);
    size_t a, b;
    int rc = 0;
    if (core_repeated_key(keys, n, order, &a, &b) || core_repeated_page(pages, n, order, &a, &b))
        rc = CORE_EINVAL;
    hf_slice *sorted_keys = hf_xmalloc((n ? n : 1) * sizeof *sorted_keys);
    int64_t *sorted_pages = hf_xmalloc((n ? n : 1) * sizeof *sorted_pages);
    for (size_t i = 0; i < n; i++) {
        sorted_keys[i] = keys[order[i]];
        sorted_pages[i] = pages[order[i]];
    }
    /* The free stack below the mark, bottom first: the free pages in
     * increasing order, then the imported pages, highest first, so that
     * core_allocate hands them out in increasing order. */
    uint32_t *stack = NULL;
    if (rc == 0 && mark > 0) {
        stack = hf_xmalloc((size_t)mark * sizeof *stack);
        size_t top = 0, next = 0;
        for (uint64_t p = 0; p < mark; p++) {
            if (next < n && (uint64_t)sorted_pages[next] == p)
                next++;
            else
                stack[top++] = (uint32_t)p;
        }
        for (size_t i = n; i-- > 0;)
            stack[top++] = (uint32_t)sorted_pages[i];
    }
    if (rc == 0 && core_pool_init(core, ns, rank, num_pages, NULL) != 1)
        rc = CORE_EINVAL;
    core_pool_t *pool = rc == 0 ? core_pool_find(core, ns, rank) : NULL;
    if (pool && mark > 0 && core_pool_set_free_order(pool, stack, (size_t)mark) != 0)
        abort(); /* a fresh pool takes any order of its first pages */
    if (pool && n > 0) {
        int64_t *got = hf_xmalloc(n * sizeof *got);
        core_allocate(pool, sorted_keys, n, CORE_ALLOC_PARTIAL, now, got, NULL);
        size_t refused = 0;
        for (size_t i = 0; i < n; i++)
            if (got[i] != sorted_pages[i])
                abort(); /* the stack above hands out exactly these pages */
        core_confirm(pool, sorted_keys, sorted_pages, n, NULL, 0, now, &refused);
        if (refused)
            abort();
        /* Recency: the newer half one use above the older half. */
        size_t half = n / 2;
        core_lookup(pool, keys + half, n - half, now, got);
        hf_xfree(got);
    }
    hf_xfree(stack);
    hf_xfree(sorted_pages);
    hf_xfree(sorted_keys);
    hf_xfree(order);
    return rc;
}
