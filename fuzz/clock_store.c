/*
 * clock_store.c: store_ops over one core_t with a virtual clock (see
 * clock_store.h). The same mapping as src/store/mem.c, without the lock.
 */
#include "clock_store.h"

#include <stdlib.h>

#include "util/xalloc.h"

typedef struct clock_store {
    store_t base;
    core_t *core;
    int64_t now;
} clock_store;

static clock_store *cs_of(store_t *s)
{
    return (clock_store *)s;
}

static int cs_init_pool(store_t *s, hf_slice ns, uint32_t rank, uint64_t num_pages,
                        bool *created, uint64_t *existing_pages)
{
    int rc = core_pool_init(cs_of(s)->core, ns, rank, num_pages, existing_pages);
    if (rc < 0)
        return STORE_EINVAL;
    if (created)
        *created = rc == 1;
    return STORE_OK;
}

#define ON_POOL(s, ns, rank, op)                                                               \
    do {                                                                                       \
        core_pool_t *pool = core_pool_find(cs_of(s)->core, ns, rank);                          \
        int64_t now = cs_of(s)->now;                                                           \
        if (!pool)                                                                             \
            return STORE_ENOPOOL;                                                              \
        op;                                                                                    \
        return STORE_OK;                                                                       \
    } while (0)

static int cs_allocate(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n,
                       core_alloc_mode mode, int64_t *pages, bool *existed)
{
    ON_POOL(s, ns, rank, core_allocate(pool, keys, n, mode, now, pages, existed));
}

static int cs_confirm(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys,
                      const int64_t *pages, size_t n, const int64_t *release, size_t nrel)
{
    ON_POOL(s, ns, rank, core_confirm(pool, keys, pages, n, release, nrel, now, NULL));
}

static int cs_exists(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n,
                     bool *present)
{
    ON_POOL(s, ns, rank, core_exists(pool, keys, n, now, present));
}

static int cs_lookup(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n,
                     int64_t *pages)
{
    ON_POOL(s, ns, rank, core_lookup(pool, keys, n, now, pages));
}

static int cs_delete_keys(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n)
{
    ON_POOL(s, ns, rank, core_delete(pool, keys, n, now));
}

static int cs_clear_pool(store_t *s, hf_slice ns, uint32_t rank)
{
    ON_POOL(s, ns, rank, core_pool_clear(pool, now));
}

static int cs_clear_all(store_t *s)
{
    core_clear_all(cs_of(s)->core);
    return STORE_OK;
}

static int cs_complete_exists(store_t *s, hf_slice ns, const hf_slice *keys, size_t n,
                              bool *present)
{
    core_complete_exists(cs_of(s)->core, ns, keys, n, cs_of(s)->now, present);
    return STORE_OK;
}

static int cs_complete_locations(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys,
                                 size_t n, int64_t *pages)
{
    int rc = core_complete_locations(cs_of(s)->core, ns, rank, keys, n, cs_of(s)->now, pages);
    return rc == CORE_ENOPOOL ? STORE_ENOPOOL : STORE_OK;
}

static int cs_stats(store_t *s, store_stats_visitor fn, void *ctx)
{
    core_foreach_pool(cs_of(s)->core, cs_of(s)->now, fn, ctx);
    return STORE_OK;
}

static int cs_check(store_t *s, char *err, size_t errlen)
{
    return core_check(cs_of(s)->core, err, errlen);
}

static void cs_destroy(store_t *s)
{
    core_free(cs_of(s)->core);
    free(s);
}

static const struct store_ops clock_ops = {
    .init_pool = cs_init_pool,
    .allocate = cs_allocate,
    .confirm = cs_confirm,
    .exists = cs_exists,
    .lookup = cs_lookup,
    .delete_keys = cs_delete_keys,
    .clear_pool = cs_clear_pool,
    .clear_all = cs_clear_all,
    .complete_exists = cs_complete_exists,
    .complete_locations = cs_complete_locations,
    .stats = cs_stats,
    .check = cs_check,
    .destroy = cs_destroy,
};

store_t *clock_store_new(const core_config *config, int64_t start)
{
    clock_store *cs = hf_xcalloc(1, sizeof *cs);
    cs->base.ops = &clock_ops;
    cs->core = core_new(config);
    if (!cs->core)
        abort();
    cs->now = start;
    return &cs->base;
}

void clock_store_advance(store_t *store, int64_t ms)
{
    cs_of(store)->now += ms;
}

int64_t clock_store_now(store_t *store)
{
    return cs_of(store)->now;
}

core_t *clock_store_core(store_t *store)
{
    return cs_of(store)->core;
}
