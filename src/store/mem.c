/*
 * mem.c: the embedded engine. The whole state is one core_t behind one mutex.
 *
 * Why one lock: every operation is a few microseconds of pointer work at
 * most (hash lookups and list splices), far below the cost of the HTTP and
 * JSON work around it, and the vLLM completeness operations touch every pool
 * of a namespace at once. A finer scheme would buy little on the machines
 * this runs on and would make the invariant harder to keep.
 *
 * The clock is the caller's (store_clock): the server gives its server
 * clock (milliseconds since the Unix epoch that never step: util/clock.h),
 * so that deadlines keep their meaning across a restart once the state is
 * persisted; tests and fuzzers give a fake clock.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/mem.h"
#include "util/clock.h"
#include "util/hf_assert.h"
#include "util/xalloc.h"
#include "wal/wal.h"

typedef struct store_mem {
    store_t base;
    pthread_mutex_t lock;
    /* Under the lock: who holds it (for HF_ASSERT), and the clock's last
     * reading by an operation. */
    pthread_t holder;
    bool held;
    int64_t last_now;
    core_t *core;
    store_clock clock;
    wal_t *wal; /* NULL: in memory only */
    char *mark; /* in memory only: the import's record (import_mark_set) */
} store_mem;

static store_mem *mem_of(store_t *s)
{
    return (store_mem *)s;
}

/* Whether the calling thread holds the state lock. */
static bool lock_held(const store_mem *m)
{
    return m->held && pthread_equal(m->holder, pthread_self());
}

/* The state lock is taken and released here only (the log's keeper too,
 * through wal_host), so `holder` always names its holder. */
static void state_lock(store_mem *m)
{
    pthread_mutex_lock(&m->lock);
    HF_ASSERT(!m->held);
    m->holder = pthread_self();
    m->held = true;
}

static void state_unlock(store_mem *m)
{
    HF_ASSERT(lock_held(m));
    m->held = false;
    pthread_mutex_unlock(&m->lock);
}

/* The `now` of an operation, under the lock. The engine's clock never runs
 * backward from one operation to the next (the server clock never steps;
 * the tests' clocks only advance): a deadline the core set is never in the
 * past of an operation that ran before it. */
static int64_t op_now(store_mem *m)
{
    HF_ASSERT(lock_held(m));
    int64_t now = m->clock.now_ms(m->clock.ctx);
    HF_ASSERT(now >= m->last_now);
    m->last_now = now;
    return now;
}

/*
 * Every operation runs between op_begin and op_end. A change is refused at
 * once while the log is down (reads go on). op_end hands the operation's
 * log records to the writer before the lock is released (so the log order
 * is the lock order) and then, for a change, waits without the lock until
 * they are durable: a change whose records could not be made durable is
 * answered STORE_EUNCERTAIN (it took effect in memory, and a repaired log
 * may keep it), never success.
 */
static int op_begin(store_mem *m, bool change)
{
    state_lock(m);
    if (change && m->wal && wal_refusing(m->wal)) {
        state_unlock(m);
        return STORE_EUNAVAILABLE;
    }
    return STORE_OK;
}

static int op_end(store_mem *m, bool change, int rc)
{
    HF_ASSERT(lock_held(m)); /* the log order is the lock order */
    uint64_t lsn = m->wal ? wal_publish(m->wal, change) : 0;
    state_unlock(m);
    if (m->wal && change && wal_wait(m->wal, lsn) != WAL_OK)
        return STORE_EUNCERTAIN;
    return rc;
}

/* Run body under the lock as a change (CHANGE) or a read (READ). */
#define LOCKED(s, change, rc, body)                                                                \
    do {                                                                                           \
        store_mem *m_ = mem_of(s);                                                                 \
        (rc) = op_begin(m_, change);                                                               \
        if ((rc) != STORE_OK)                                                                      \
            break;                                                                                 \
        core_t *core = m_->core;                                                                   \
        int64_t now = op_now(m_);                                                                  \
        (void)now;                                                                                 \
        (void)core;                                                                                \
        body; /* NOLINT(bugprone-macro-parentheses): a statement */                                \
        (rc) = op_end(m_, change, (rc));                                                           \
    } while (0)

#define CHANGE true
#define READ false

static int mem_init_pool(store_t *s, hf_slice ns, uint32_t rank, uint64_t num_pages, bool *created,
                         uint64_t *existing_pages)
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
#define ON_POOL(s, change, ns, rank, op)                                                           \
    do {                                                                                           \
        int rc_;                                                                                   \
        LOCKED(s, change, rc_, {                                                                   \
            core_pool_t *pool = core_pool_find(core, ns, rank);                                    \
            if (!pool)                                                                             \
                rc_ = STORE_ENOPOOL;                                                               \
            else                                                                                   \
                op; /* NOLINT(bugprone-macro-parentheses): a statement */                          \
        });                                                                                        \
        return rc_;                                                                                \
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
    ON_POOL(s, READ, ns, rank, {
        core_exists(pool, keys, n, now, present);
        core_prefix_count(core, ns, present, n); /* the whole request is this call */
    });
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
    LOCKED(s, READ, rc, {
        core_complete_exists(core, ns, keys, n, now, present);
        core_prefix_count(core, ns, present, n);
    });
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
    LOCKED(s, READ, rc, core_foreach_pool(core, now, fn, ctx));
    return rc;
}

static int mem_check(store_t *s, char *err, size_t errlen)
{
    int rc, bad = 0;
    LOCKED(s, READ, rc, bad = core_check(core, err, errlen));
    return bad ? -1 : rc;
}

/* Changes are refused while the log is down (wal.c, FAILURES). */
static int mem_import_pool(store_t *s, hf_slice ns, uint32_t rank, uint64_t num_pages,
                           const hf_slice *keys, const int64_t *pages, size_t n)
{
    int rc, made;
    LOCKED(s, CHANGE, rc, made = core_pool_import(core, ns, rank, num_pages, keys, pages, n, now));
    if (rc != STORE_OK)
        return rc;
    return made == CORE_EEXIST ? STORE_EEXIST : made < 0 ? STORE_EINVAL : STORE_OK;
}

/* The import's record: in memory only, a copy; with a log, the log's
 * (wal_mark_get/_set). */
static int mem_import_mark_get(store_t *s, char *out, size_t cap)
{
    store_mem *m = mem_of(s);
    if (m->wal)
        return wal_mark_get(m->wal, out, cap) < 0 ? STORE_EIO : (int)strnlen(out, cap);
    state_lock(m);
    snprintf(out, cap, "%s", m->mark ? m->mark : "");
    state_unlock(m);
    return (int)strnlen(out, cap);
}

static int mem_import_mark_set(store_t *s, const char *text)
{
    store_mem *m = mem_of(s);
    if (m->wal)
        return wal_mark_set(m->wal, text) < 0 ? STORE_EIO : STORE_OK;
    size_t len = strlen(text) + 1;
    state_lock(m);
    free(m->mark);
    m->mark = memcpy(hf_xmalloc(len), text, len);
    state_unlock(m);
    return STORE_OK;
}

/* A failed log refuses changes; reads go on from memory. */
static store_mode mem_health(store_t *s, char *reason, size_t len)
{
    store_mem *m = mem_of(s);
    if (len)
        reason[0] = '\0';
    if (!m->wal || !wal_refusing(m->wal))
        return STORE_SERVING;
    wal_failure_reason(m->wal, reason, len);
    return STORE_READS_ONLY;
}

/* A gauge or counter of one unlabelled sample. */
static void emit(const store_emitter *e, const char *name, store_metric_type type, const char *help,
                 uint64_t value)
{
    store_emit_metric(e, name, type, help, store_int(value));
}

/* The log's figures: /metrics families and the "persistence" member of
 * /v1/stats (docs/operations.md has the table). */
static int mem_metrics(store_t *s, const store_emitter *e)
{
    store_mem *m = mem_of(s);
    emit(e, "hf3fs_metad_persistence_enabled", STORE_METRIC_GAUGE,
         "1 if the state is logged to the data directory, 0 if in memory only.", m->wal != NULL);
    if (!m->wal) {
        store_emit_null(e, "persistence");
        return STORE_OK;
    }
    wal_stats st;
    wal_get_stats(m->wal, &st);
    const store_metric_type counter = STORE_METRIC_COUNTER, gauge = STORE_METRIC_GAUGE;
    emit(e, "hf3fs_metad_log_bytes_total", counter,
         "Bytes of log records produced (the log sequence number).", st.lsn);
    emit(e, "hf3fs_metad_log_written_bytes_total", counter,
         "Bytes of log records written to the log files.", st.written_lsn);
    emit(e, "hf3fs_metad_log_synced_bytes_total", counter, "Bytes of log records synced to disk.",
         st.synced_lsn);
    emit(e, "hf3fs_metad_log_records_total", counter, "Log records produced by this process.",
         st.records);
    emit(e, "hf3fs_metad_log_syncs_total", counter, "Syncs of the log.", st.syncs);
    store_emit_family(e, "hf3fs_metad_log_sync_duration_seconds", STORE_METRIC_HISTOGRAM,
                      "Time one sync (fdatasync) of the log took.");
    store_histogram syncs = {
        .nbuckets = WAL_SYNC_BUCKETS,
        .bounds = wal_sync_bounds_us,
        .counts = st.sync_buckets,
        .sum = st.sync_us_sum,
        .decimals = 6,
    };
    store_emit_histogram(e, NULL, 0, &syncs);
    emit(e, "hf3fs_metad_log_failures_total", counter, "Log write or sync failures.", st.failures);
    emit(e, "hf3fs_metad_snapshots_total", counter, "Snapshots completed by this process.",
         st.snapshots);
    emit(e, "hf3fs_metad_snapshot_bytes", gauge, "Size of the newest snapshot.", st.snapshot_bytes);
    /* The snapshot time is the log's wall clock, whatever clock the state runs on. */
    int64_t age_ms = st.snapshot_time_ms > 0 ? hf_clock_wall_ms() - st.snapshot_time_ms : 0;
    if (age_ms < 0)
        age_ms = 0;
    if (st.snapshot_time_ms > 0)
        store_emit_metric(e, "hf3fs_metad_snapshot_age_seconds", gauge,
                          "Seconds since the newest snapshot completed.",
                          (store_number){(uint64_t)age_ms, 3});

    store_emit_object(e, "persistence");
    store_emit_number(e, "log_bytes", store_int(st.lsn));
    store_emit_number(e, "log_written_bytes", store_int(st.written_lsn));
    store_emit_number(e, "log_synced_bytes", store_int(st.synced_lsn));
    store_emit_number(e, "log_records", store_int(st.records));
    store_emit_number(e, "log_syncs", store_int(st.syncs));
    store_emit_number(e, "log_failures", store_int(st.failures));
    store_emit_number(e, "snapshots", store_int(st.snapshots));
    store_emit_number(e, "snapshot_bytes", store_int(st.snapshot_bytes));
    if (st.snapshot_time_ms > 0)
        store_emit_number(e, "snapshot_age_seconds", store_int((uint64_t)age_ms / 1000));
    else
        store_emit_null(e, "snapshot_age_seconds");
    store_emit_bool(e, "refusing_changes", st.refusing);
    store_emit_end(e);
    return STORE_OK;
}

static const char *mem_describe(store_t *s, int err)
{
    if (err == STORE_EUNCERTAIN)
        return "the write-ahead log failed while this change was being made durable (disk full "
               "or I/O error: see GET /health and the server log): the change may or may not "
               "survive a restart, and changes are refused until the log is repaired; check the "
               "state before repeating it";
    if (err != STORE_EUNAVAILABLE)
        return NULL;
    return "the write-ahead log failed (disk full or I/O error: see GET /health and the server "
           "log), so this change was not acknowledged and changes are refused until the log is "
           "repaired; reads still work";
}

static void mem_destroy(store_t *s)
{
    store_mem *m = mem_of(s);
    /* The final snapshot makes the next start read one file. */
    wal_close(m->wal, true);
    core_free(m->core);
    pthread_mutex_destroy(&m->lock);
    free(m->mark);
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
    .metrics = mem_metrics,
    .describe = mem_describe,
    .import_pool = mem_import_pool,
    .import_mark_get = mem_import_mark_get,
    .import_mark_set = mem_import_mark_set,
};

store_t *store_mem_new(const core_config *config, const store_clock *clock)
{
    store_mem *m = hf_xcalloc(1, sizeof *m);
    m->base.ops = &mem_ops;
    m->core = core_new(config); /* never NULL: out of memory aborts (util/xalloc.h) */
    m->clock = *clock;
    pthread_mutex_init(&m->lock, NULL);
    return &m->base;
}

/* The engine-neutral code of a WAL_E* code of opening. */
static int store_error_of_wal(int rc)
{
    switch (rc) {
    case WAL_EFOREIGN: return STORE_EFOREIGN;
    case WAL_EDAMAGED: return STORE_EDAMAGED;
    case WAL_ELOCKED: return STORE_ELOCKED;
    case WAL_EUNAVAILABLE: return STORE_EUNAVAILABLE;
    default: return STORE_EIO;
    }
}

static void host_lock(void *ctx)
{
    state_lock(ctx);
}

static void host_unlock(void *ctx)
{
    state_unlock(ctx);
}

static bool host_held(void *ctx)
{
    return lock_held(ctx);
}

core_t *store_mem_core(store_t *s)
{
    return mem_of(s)->core;
}

int store_mem_open(const core_config *config, const store_clock *clock,
                   const struct wal_options *log, store_t **out, char *err, size_t errlen)
{
    store_mem *m = mem_of(store_mem_new(config, clock));
    wal_host host = {host_lock, host_unlock, m, host_held};
    int rc = wal_open(log, m->core, &host, &m->wal, err, errlen);
    if (rc != WAL_OK) {
        mem_destroy(&m->base);
        return store_error_of_wal(rc);
    }
    /* reads answered before the restart: their pages stay read-leased */
    state_lock(m);
    core_recovered(m->core, op_now(m));
    state_unlock(m);
    *out = &m->base;
    return STORE_OK;
}
