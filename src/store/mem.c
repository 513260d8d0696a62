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

#include "store/store.h"
#include "util/clock.h"
#include "util/xalloc.h"
#include "wal/wal.h"

typedef struct store_mem {
    store_t base;
    pthread_mutex_t lock;
    core_t *core;
    wal_t *wal; /* NULL: in memory only */
} store_mem;

static store_mem *mem_of(store_t *s)
{
    return (store_mem *)s;
}

/*
 * Every operation runs between op_begin and op_end. A change is refused at
 * once while the log is down (reads go on). op_end hands the operation's
 * log records to the writer before the lock is released (so the log order
 * is the lock order) and then, for a change, waits without the lock until
 * they are durable: a change whose records could not be made durable is
 * answered STORE_EUNAVAILABLE, never success.
 */
static int op_begin(store_mem *m, bool change)
{
    pthread_mutex_lock(&m->lock);
    if (change && m->wal && wal_refusing(m->wal)) {
        pthread_mutex_unlock(&m->lock);
        return STORE_EUNAVAILABLE;
    }
    return STORE_OK;
}

static int op_end(store_mem *m, bool change, int rc)
{
    uint64_t lsn = m->wal ? wal_publish(m->wal, change) : 0;
    pthread_mutex_unlock(&m->lock);
    if (m->wal && change && wal_wait(m->wal, lsn) != WAL_OK)
        return STORE_EUNAVAILABLE;
    return rc;
}

/* Run body under the lock as a change (CHANGE) or a read (READ). */
#define LOCKED(s, change, rc, body)                                                            \
    do {                                                                                       \
        store_mem *m_ = mem_of(s);                                                             \
        rc = op_begin(m_, change);                                                             \
        if (rc != STORE_OK)                                                                    \
            break;                                                                             \
        core_t *core = m_->core;                                                               \
        int64_t now = hf_clock_wall_ms();                                                      \
        (void)now;                                                                             \
        (void)core;                                                                            \
        body;                                                                                  \
        rc = op_end(m_, change, rc);                                                           \
    } while (0)

#define CHANGE true
#define READ false

static int mem_init_pool(store_t *s, hf_slice ns, uint32_t rank, uint64_t num_pages,
                         bool *created, uint64_t *existing_pages)
{
    int rc, made = 0;
    LOCKED(s, CHANGE, rc, made = core_pool_init(core, ns, rank, num_pages, existing_pages));
    if (rc != STORE_OK)
        return rc;
    if (made < 0)
        return STORE_EINVAL;
    if (created)
        *created = made == 1;
    return STORE_OK;
}

/* Run `op` on the pool (ns, rank) under the lock, or answer STORE_ENOPOOL. */
#define ON_POOL(s, change, ns, rank, op)                                                       \
    do {                                                                                       \
        int rc_;                                                                               \
        LOCKED(s, change, rc_, {                                                               \
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
    ON_POOL(s, CHANGE, ns, rank, core_allocate(pool, keys, n, mode, now, pages, existed));
}

static int mem_confirm(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys,
                       const int64_t *pages, size_t n, const int64_t *release, size_t nrel)
{
    ON_POOL(s, CHANGE, ns, rank, core_confirm(pool, keys, pages, n, release, nrel, now, NULL));
}

static int mem_exists(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n,
                      bool *present)
{
    ON_POOL(s, READ, ns, rank, core_exists(pool, keys, n, now, present));
}

static int mem_lookup(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n,
                      int64_t *pages)
{
    ON_POOL(s, READ, ns, rank, core_lookup(pool, keys, n, now, pages));
}

static int mem_delete_keys(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n)
{
    ON_POOL(s, CHANGE, ns, rank, core_delete(pool, keys, n, now));
}

static int mem_clear_pool(store_t *s, hf_slice ns, uint32_t rank)
{
    ON_POOL(s, CHANGE, ns, rank, core_pool_clear(pool, now));
}

static int mem_clear_all(store_t *s)
{
    int rc;
    LOCKED(s, CHANGE, rc, core_clear_all(core));
    return rc;
}

static int mem_complete_exists(store_t *s, hf_slice ns, const hf_slice *keys, size_t n,
                               bool *present)
{
    int rc;
    LOCKED(s, READ, rc, core_complete_exists(core, ns, keys, n, now, present));
    return rc;
}

static int mem_complete_locations(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys,
                                  size_t n, int64_t *pages)
{
    int rc, found = 0;
    LOCKED(s, READ, rc, found = core_complete_locations(core, ns, rank, keys, n, now, pages));
    return found == CORE_ENOPOOL ? STORE_ENOPOOL : rc;
}

static int mem_stats(store_t *s, store_stats_visitor fn, void *ctx)
{
    int rc;
    LOCKED(s, READ, rc, core_foreach_pool(core, fn, ctx));
    return rc;
}

static int mem_check(store_t *s, char *err, size_t errlen)
{
    int rc, bad = 0;
    LOCKED(s, READ, rc, bad = core_check(core, err, errlen));
    return bad ? -1 : rc;
}

/* Changes are refused while the log is down (wal.c, FAILURES). */
static int mem_health(store_t *s, char *reason, size_t len)
{
    store_mem *m = mem_of(s);
    if (len)
        reason[0] = '\0';
    if (!m->wal || !wal_refusing(m->wal))
        return STORE_OK;
    wal_failure_reason(m->wal, reason, len);
    return STORE_EUNAVAILABLE;
}

static int mem_persistence(store_t *s, store_persistence *out)
{
    store_mem *m = mem_of(s);
    if (!m->wal)
        return STORE_EINVAL;
    wal_stats st;
    wal_get_stats(m->wal, &st);
    *out = (store_persistence){
        .log_bytes = st.lsn,
        .log_written_bytes = st.written_lsn,
        .log_synced_bytes = st.synced_lsn,
        .records = st.records,
        .syncs = st.syncs,
        .sync_us_sum = st.sync_us_sum,
        .failures = st.failures,
        .snapshots = st.snapshots,
        .snapshot_bytes = st.snapshot_bytes,
        .snapshot_time_ms = st.snapshot_time_ms,
        .refusing = st.refusing,
    };
    for (unsigned i = 0; i < STORE_SYNC_BUCKETS; i++)
        out->sync_buckets[i] = st.sync_buckets[i];
    return STORE_OK;
}

static void mem_destroy(store_t *s)
{
    store_mem *m = mem_of(s);
    /* The final snapshot makes the next start read one file. */
    wal_close(m->wal, true);
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
    .persistence = mem_persistence,
};

store_t *store_mem_new(const core_config *config)
{
    store_mem *m = hf_xcalloc(1, sizeof *m);
    m->base.ops = &mem_ops;
    m->core = core_new(config);
    pthread_mutex_init(&m->lock, NULL);
    return &m->base;
}

static void host_lock(void *ctx)
{
    pthread_mutex_lock(&((store_mem *)ctx)->lock);
}

static void host_unlock(void *ctx)
{
    pthread_mutex_unlock(&((store_mem *)ctx)->lock);
}

int store_mem_open(const core_config *config, const struct wal_options *log, store_t **out,
                   char *err, size_t errlen)
{
    store_mem *m = mem_of(store_mem_new(config));
    wal_host host = {host_lock, host_unlock, m};
    int rc = wal_open(log, m->core, &host, &m->wal, err, errlen);
    if (rc != WAL_OK) {
        mem_destroy(&m->base);
        return rc;
    }
    *out = &m->base;
    return 0;
}

const char *store_strerror(int err)
{
    switch (err) {
    case STORE_OK: return "success";
    case STORE_ENOPOOL: return "pool not initialized";
    case STORE_EINVAL: return "argument out of range";
    case STORE_ENOMEM: return "out of memory";
    case STORE_EUNAVAILABLE:
        return "the write-ahead log failed (disk full or I/O error: see GET /health and the "
               "server log), so this change was not acknowledged and changes are refused until "
               "the log is repaired; reads still work";
    default: return "unknown store error";
    }
}
