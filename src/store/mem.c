/*
 * mem.c: the embedded engine. The whole state is one core_t behind one mutex.
 *
 * Why one lock: every operation is a few microseconds of pointer work at
 * most (hash lookups and list splices), far below the cost of the HTTP and
 * JSON work around it, and the vLLM completeness operations touch every pool
 * of a namespace at once. A finer scheme would buy little on the machines
 * this runs on and would make the invariant harder to keep.
 *
 * The clock is CLOCK_REALTIME in milliseconds so that deadlines keep their
 * meaning across a restart once the state is persisted.
 */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "store/store.h"
#include "util/xalloc.h"

typedef struct store_mem {
    store_t base;
    pthread_mutex_t lock;
    core_t *core;
} store_mem;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static store_mem *mem_of(store_t *s)
{
    return (store_mem *)s;
}

#define LOCKED(s, body)                                                                        \
    do {                                                                                       \
        store_mem *m_ = mem_of(s);                                                             \
        pthread_mutex_lock(&m_->lock);                                                         \
        core_t *core = m_->core;                                                               \
        int64_t now = now_ms();                                                                \
        (void)now;                                                                             \
        body;                                                                                  \
        pthread_mutex_unlock(&m_->lock);                                                       \
    } while (0)

static int mem_init_pool(store_t *s, hf_slice ns, uint32_t rank, uint64_t num_pages,
                         bool *created, uint64_t *existing_pages)
{
    int rc;
    LOCKED(s, rc = core_pool_init(core, ns, rank, num_pages, existing_pages));
    if (rc < 0)
        return STORE_EINVAL;
    if (created)
        *created = rc == 1;
    return STORE_OK;
}

/* Run `op` on the pool (ns, rank) under the lock, or answer STORE_ENOPOOL. */
#define ON_POOL(s, ns, rank, op)                                                               \
    do {                                                                                       \
        int rc_ = STORE_OK;                                                                    \
        LOCKED(s, {                                                                            \
            core_pool_t *pool = core_pool_find(core, ns, rank);                                \
            if (!pool)                                                                         \
                rc_ = STORE_ENOPOOL;                                                           \
            else                                                                               \
                op;                                                                            \
        });                                                                                    \
        return rc_;                                                                            \
    } while (0)

static int mem_allocate(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n,
                        core_alloc_mode mode, int64_t *pages, bool *existed)
{
    ON_POOL(s, ns, rank, core_allocate(pool, keys, n, mode, now, pages, existed));
}

static int mem_confirm(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys,
                       const int64_t *pages, size_t n, const int64_t *release, size_t nrel)
{
    ON_POOL(s, ns, rank, core_confirm(pool, keys, pages, n, release, nrel, now, NULL));
}

static int mem_exists(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n,
                      bool *present)
{
    ON_POOL(s, ns, rank, core_exists(pool, keys, n, now, present));
}

static int mem_lookup(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n,
                      int64_t *pages)
{
    ON_POOL(s, ns, rank, core_lookup(pool, keys, n, now, pages));
}

static int mem_delete_keys(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n)
{
    ON_POOL(s, ns, rank, core_delete(pool, keys, n, now));
}

static int mem_clear_pool(store_t *s, hf_slice ns, uint32_t rank)
{
    ON_POOL(s, ns, rank, core_pool_clear(pool, now));
}

static int mem_clear_all(store_t *s)
{
    LOCKED(s, core_clear_all(core));
    return STORE_OK;
}

static int mem_complete_exists(store_t *s, hf_slice ns, const hf_slice *keys, size_t n,
                               bool *present)
{
    LOCKED(s, core_complete_exists(core, ns, keys, n, now, present));
    return STORE_OK;
}

static int mem_complete_locations(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys,
                                  size_t n, int64_t *pages)
{
    int rc;
    LOCKED(s, rc = core_complete_locations(core, ns, rank, keys, n, now, pages));
    return rc == CORE_ENOPOOL ? STORE_ENOPOOL : STORE_OK;
}

static int mem_stats(store_t *s, store_stats_visitor fn, void *ctx)
{
    LOCKED(s, core_foreach_pool(core, fn, ctx));
    return STORE_OK;
}

static int mem_check(store_t *s, char *err, size_t errlen)
{
    int rc;
    LOCKED(s, rc = core_check(core, err, errlen));
    return rc;
}

/* No log yet: the in-memory engine always accepts changes. The durability
 * work answers STORE_EUNAVAILABLE here while its log is failing. */
static int mem_health(store_t *s, char *reason, size_t len)
{
    if (len)
        reason[0] = '\0';
    return STORE_OK;
}

static void mem_destroy(store_t *s)
{
    store_mem *m = mem_of(s);
    core_free(m->core);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

static const struct store_ops mem_ops = {
    .init_pool = mem_init_pool,
    .allocate = mem_allocate,
    .confirm = mem_confirm,
    .exists = mem_exists,
    .lookup = mem_lookup,
    .delete_keys = mem_delete_keys,
    .clear_pool = mem_clear_pool,
    .clear_all = mem_clear_all,
    .complete_exists = mem_complete_exists,
    .complete_locations = mem_complete_locations,
    .stats = mem_stats,
    .check = mem_check,
    .destroy = mem_destroy,
    .health = mem_health,
};

store_t *store_mem_new(const core_config *config)
{
    store_mem *m = hf_xcalloc(1, sizeof *m);
    m->base.ops = &mem_ops;
    m->core = core_new(config);
    pthread_mutex_init(&m->lock, NULL);
    return &m->base;
}

const char *store_strerror(int err)
{
    switch (err) {
    case STORE_OK: return "success";
    case STORE_ENOPOOL: return "pool not initialized";
    case STORE_EINVAL: return "argument out of range";
    case STORE_ENOMEM: return "out of memory";
    case STORE_EUNAVAILABLE: return "store cannot accept changes now";
    default: return "unknown store error";
    }
}
