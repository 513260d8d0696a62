/*
 * store.h: what the dialects may ask of the state, as a table of functions.
 *
 * An engine implements struct store_ops. The embedded engine (store_mem_new)
 * keeps the state in this process; a Redis engine will implement the same
 * table. Nothing here assumes memory: every call names its pool by
 * (namespace, rank), takes whole batches, and writes its answers into arrays
 * the caller owns (sized n by the caller). Engines are thread-safe: any
 * thread may call any operation at any time. Engines read their own clock.
 *
 * Errors: 0 on success or a negative STORE_E* code; then nothing changed.
 */
#ifndef HF_STORE_H
#define HF_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "util/slice.h"

enum {
    STORE_OK = 0,
    STORE_ENOPOOL = -1,      /* pool not initialized */
    STORE_EINVAL = -2,       /* argument out of range (num_pages, rank) */
    STORE_ENOMEM = -3,
    STORE_EUNAVAILABLE = -4, /* the engine cannot accept changes now (e.g. its log failed);
                              * nothing changed, so the request may be sent again */
    STORE_EUNCERTAIN = -5,   /* the change may have taken effect but was not made durable
                              * (its log failed meanwhile, or its reply was lost): it must
                              * not be answered with a status that clients retry */
};

const char *store_strerror(int err);

typedef struct store store_t;

/*
 * The figures of an engine's log and snapshots, for /metrics. Sync latency
 * is a histogram: sync_buckets[i] counts the syncs that took at most
 * store_sync_bounds_us[i] microseconds and more than the bound before it
 * (not cumulative); the last bucket is everything slower.
 */
#define STORE_SYNC_BUCKETS 13
static const uint64_t store_sync_bounds_us[STORE_SYNC_BUCKETS - 1] = {
    50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 100000, 250000, 1000000,
};

/* The bucket of a sync that took `us` microseconds. */
static inline unsigned store_sync_bucket(uint64_t us)
{
    unsigned i = 0;
    while (i < STORE_SYNC_BUCKETS - 1 && us > store_sync_bounds_us[i])
        i++;
    return i;
}

typedef struct store_persistence {
    uint64_t log_bytes;         /* bytes of log records produced (the LSN) */
    uint64_t log_written_bytes; /* ... of which written to the log files */
    uint64_t log_synced_bytes;  /* ... of which synced (durable) */
    uint64_t records;           /* log records produced by this process */
    uint64_t syncs;             /* fdatasync calls of the log */
    uint64_t sync_buckets[STORE_SYNC_BUCKETS];
    uint64_t sync_us_sum;       /* total time spent in those syncs */
    uint64_t failures;          /* log write or sync failures */
    uint64_t snapshots;         /* snapshots completed by this process */
    uint64_t snapshot_bytes;    /* size of the newest snapshot, 0 if none */
    int64_t snapshot_time_ms;   /* wall clock (ms) when it completed, 0 if none */
    bool refusing;              /* changes are refused (the log failed) */
} store_persistence;

/* One pool's figures, handed to a stats visitor. Valid during the call only. */
typedef void (*store_stats_visitor)(void *ctx, hf_slice ns, uint32_t rank,
                                    const core_pool_stats *stats);

struct store_ops {
    /* Create the pool or keep it (idempotent). *created says which;
     * *existing_pages is the size the pool has after the call. */
    int (*init_pool)(store_t *s, hf_slice ns, uint32_t rank, uint64_t num_pages,
                     bool *created, uint64_t *existing_pages);
    int (*allocate)(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n,
                    core_alloc_mode mode, int64_t *pages, bool *existed);
    int (*confirm)(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys,
                   const int64_t *pages, size_t n, const int64_t *release, size_t nrel);
    int (*exists)(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n,
                  bool *present);
    int (*lookup)(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n,
                  int64_t *pages);
    int (*delete_keys)(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n);
    int (*clear_pool)(store_t *s, hf_slice ns, uint32_t rank);
    int (*clear_all)(store_t *s);
    int (*complete_exists)(store_t *s, hf_slice ns, const hf_slice *keys, size_t n, bool *present);
    int (*complete_locations)(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys,
                              size_t n, int64_t *pages);
    /* Visit every pool's figures (a consistent snapshot per pool). */
    int (*stats)(store_t *s, store_stats_visitor fn, void *ctx);
    /* Verify the ownership invariant; 0 or -1 with a description in err. */
    int (*check)(store_t *s, char *err, size_t errlen);
    void (*destroy)(store_t *s);
    /* Optional (NULL: always healthy). Whether the engine accepts changes
     * now: STORE_OK, or STORE_EUNAVAILABLE with why in reason (a
     * NUL-terminated sentence, e.g. "the log failed: No space left on
     * device"). Cheap and lock-free enough for a probe every second. */
    int (*health)(store_t *s, char *reason, size_t len);
    /* Optional (NULL: the engine keeps nothing on disk). The persistence
     * figures of /metrics; STORE_OK and *out filled, or an error. */
    int (*persistence)(store_t *s, store_persistence *out);
};

struct store {
    const struct store_ops *ops;
};

/* The embedded in-memory engine. Returns NULL on out-of-memory. */
store_t *store_mem_new(const core_config *config);

/* The embedded engine with its write-ahead log (src/wal/wal.h): recovers the
 * state of log->dir first. 0, or a negative WAL_E* code with a message in
 * err. destroy() writes a final snapshot. */
struct wal_options;
int store_mem_open(const core_config *config, const struct wal_options *log, store_t **out,
                   char *err, size_t errlen);

#endif
