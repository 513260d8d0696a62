/*
 * wal.h: the write-ahead log of the embedded engine: every core event is
 * logged before the change it describes is acknowledged; snapshots compact
 * the log in the background; recovery rebuilds the state at start.
 *
 * The format, the rule for a valid record and the recovery algorithm are
 * specified in wal.c's header comment; docs/durability.md is the operator's
 * view.
 *
 * Threads and locks. The log serves one core_t that its owner (the store)
 * guards with one lock, "the state lock". The owner calls wal_publish()
 * at the end of every operation while it holds that lock, releases it, and
 * for a change calls wal_wait() without it. The log's own threads (a writer
 * and a keeper) never hold the state lock except the keeper for the moment
 * of a fork() (through wal_host). Errors are negative WAL_E* codes, in
 * -301..-399 (the ranges of the modules: docs/architecture.md).
 */
#ifndef HF_WAL_WAL_H
#define HF_WAL_WAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

enum {
    WAL_OK = 0,
    WAL_EIO = -301,          /* the data directory cannot be read or written */
    WAL_EFOREIGN = -302,     /* the directory holds files hf3fs-metad did not write */
    WAL_EDAMAGED = -303,     /* damage before the tail of the log (see --salvage) */
    WAL_ELOCKED = -304,      /* another process uses the directory */
    WAL_EUNAVAILABLE = -305, /* the log failed: the change may not be durable */
};

/*
 * Sync latency buckets: a sync that took `us` microseconds falls in bucket
 * wal_sync_bucket(us), the first whose bound (wal_sync_bounds_us) is at
 * least us; the last bucket is everything slower than every bound.
 */
#define WAL_SYNC_BUCKETS 13
static const uint64_t wal_sync_bounds_us[WAL_SYNC_BUCKETS - 1] = {
    50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 100000, 250000, 1000000,
};

static inline unsigned wal_sync_bucket(uint64_t us)
{
    unsigned i = 0;
    while (i < WAL_SYNC_BUCKETS - 1 && us > wal_sync_bounds_us[i])
        i++;
    return i;
}

typedef enum wal_fsync_policy {
    WAL_FSYNC_ALWAYS = 0, /* a change is acknowledged once fdatasync'ed (group commit) */
    WAL_FSYNC_EVERYSEC,   /* acknowledged once written; fdatasync once a second */
    WAL_FSYNC_NO,         /* acknowledged once written; the kernel syncs when it likes */
} wal_fsync_policy;

/* The file of the directory that holds the engine's record of an SGLang
 * import (store.h import_mark_get; wal_mark_get/_set below). */
#define WAL_IMPORT_MARK "IMPORTED"

typedef struct wal_options {
    const char *dir; /* created if missing (its parent must exist) */
    wal_fsync_policy fsync;
    int64_t save_interval_ms;    /* snapshot this often if anything was logged; 0: never */
    uint64_t snapshot_log_bytes; /* snapshot once the log grew by this much; 0: never */
    bool salvage;                /* start despite damage before the tail */
    bool quiet;                  /* no start-up line (tests) */
} wal_options;

/* How the keeper takes the state lock for the instant of a fork; `held`
 * (NULL if the owner cannot tell): whether the calling thread holds it,
 * for the log's HF_ASSERTs. */
typedef struct wal_host {
    void (*lock)(void *ctx);
    void (*unlock)(void *ctx);
    void *ctx;
    bool (*held)(void *ctx);
} wal_host;

typedef struct wal wal_t;

/*
 * Recover the state of opt->dir into `core` (new and empty, no observer),
 * start a new log segment, become core's observer and start the writer and
 * keeper threads. On error returns a WAL_E* code with a message in err and
 * leaves core partly filled (the caller frees it). The core and host are
 * borrowed until wal_close().
 */
int wal_open(const wal_options *opt, core_t *core, const wal_host *host, wal_t **out, char *err,
             size_t errlen);

/*
 * Under the state lock, at the end of each operation: hand the operation's
 * records to the writer. Returns the LSN just past them, for wal_wait().
 * `change`: the caller will wait for it (the writer syncs at once under
 * fsync always).
 */
uint64_t wal_publish(wal_t *wal, bool change);

/* Whether changes must be refused (WAL_EUNAVAILABLE) now: the log failed
 * and is not repaired yet. Any thread. */
bool wal_refusing(wal_t *wal);

/* Wait until every record before `lsn` is as durable as the policy
 * promises (always: fdatasync'ed; everysec, no: written to the file).
 * WAL_OK, or WAL_EUNAVAILABLE if the log failed first. Never under the
 * state lock. */
int wal_wait(wal_t *wal, uint64_t lsn);

/* Figures for /metrics and the benchmark. */
typedef struct wal_stats {
    uint64_t lsn; /* bytes of records produced since the data directory began */
    uint64_t written_lsn, synced_lsn;
    uint64_t records;                        /* records produced by this process */
    uint64_t syncs;                          /* fdatasync calls of the writer */
    uint64_t sync_buckets[WAL_SYNC_BUCKETS]; /* their latency (not cumulative) */
    uint64_t sync_us_sum;
    uint64_t snapshots;       /* snapshots completed by this process */
    uint64_t snapshot_bytes;  /* size of the newest snapshot */
    uint64_t snapshot_lsn;    /* LSN the newest snapshot covers */
    int64_t snapshot_time_ms; /* wall clock when this process completed one, 0 if none */
    uint64_t failures;        /* log write or sync failures */
    bool refusing;
} wal_stats;

void wal_get_stats(wal_t *wal, wal_stats *out);

/* Why changes are refused (a sentence for /health and logs), "" if they are not. */
void wal_failure_reason(wal_t *wal, char *out, size_t len);

/*
 * Stop: no operation may run any more. Writes and syncs what is pending,
 * then (final_snapshot) writes a snapshot so the next start reads one file.
 * Frees the log; the core stays with the caller (its observer is cleared).
 */
void wal_close(wal_t *wal, bool final_snapshot);

const char *wal_strerror(int err);
const char *wal_fsync_name(wal_fsync_policy policy);
/* "always", "everysec", "no" -> 0 and *policy; else -1. */
int wal_parse_fsync(const char *name, wal_fsync_policy *policy);
/* The format of the log and snapshots this build writes, and the oldest it
 * reads (format.h: WAL_VERSION, WAL_VERSION_OLDEST). */
unsigned wal_format_version(void);
unsigned wal_format_oldest(void);

/* The import's record (store.h import_mark_get): the text of the file
 * WAL_IMPORT_MARK in the log's directory, which recovery leaves alone.
 * mark_get: its length copied into out (NUL-terminated, cap > 0), 0 if
 * none, or a negative errno; mark_set: written under a temporary name,
 * synced, renamed, the directory synced; 0 or a negative errno. */
int wal_mark_get(wal_t *w, char *out, size_t cap);
int wal_mark_set(wal_t *w, const char *text);

#endif
