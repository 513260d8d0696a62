/*
 * wal_internal.h: the log's state shared by its files: wal.c (the live log:
 * writer, group commit, failures), snapshot.c (snapshots and the keeper
 * thread), files.c (the data directory's files) and recover.c (start-up).
 */
#ifndef HF_WAL_INTERNAL_H
#define HF_WAL_INTERNAL_H

#include <pthread.h>
#include <sys/types.h>

#include "util/hf_assert.h"
#include "wal/format.h"
#include "wal/wal.h"

#define WAL_LOCK_NAME "LOCK"
#define WAL_NAME_MAX 64
/* The writer may fall this far behind before the log counts as failed. */
#define WAL_MAX_PENDING (256u << 20)
/* The snapshot encoder writes its buffer out at this size. */
#define WAL_SNAPSHOT_CHUNK (1u << 20)
/* A failed log's repairs: the first after this, then doubling up to the maximum. */
#define WAL_REPAIR_FIRST_DELAY_MS 500
#define WAL_REPAIR_MAX_DELAY_MS 8000

/* A pending segment switch, set under the state lock and mu, done by the writer. */
typedef struct wal_rotation {
    bool pending;
    size_t off; /* bytes of `pending` that still belong to the old segment */
    uint64_t seq, lsn;
    int64_t time_base;
    uint32_t salt;
    bool repair; /* the old segment failed: abandon it unsynced */
} wal_rotation;

struct wal {
    wal_options opt;
    char *dir;
    core_t *core;
    wal_host host;
    int dir_fd, lock_fd;

    /* Under the state lock. */
    wal_encoder enc;
    uint64_t next_seq; /* number of the next segment */

    pthread_mutex_t mu;
    pthread_cond_t writer_cv;  /* the writer waits for work */
    pthread_cond_t durable_cv; /* wal_wait() waits for progress */
    pthread_cond_t keeper_cv;  /* the keeper waits for its next duty */

    /* Under mu. LSNs count bytes of records since the directory began. */
    hf_buf pending;           /* records the writer has not taken yet */
    uint64_t appended;        /* LSN at the end of everything published */
    uint64_t written;         /* records before this LSN are in the segment files */
    uint64_t synced;          /* ... and fdatasync'ed (or in a durable snapshot) */
    uint64_t sync_wanted;     /* a waiter needs this LSN synced */
    uint32_t changes_pending; /* changes published since the writer's last take */
    uint32_t gather_target;   /* changes a sync usually serves (adaptive) */
    int64_t gather_max_us;    /* how long the writer may wait for them */
    int64_t gather_since_us;  /* when it began waiting, 0 if not */
    bool writer_busy;
    wal_rotation rotate;
    bool accepting; /* published records are kept (false while the log is down) */
    bool failed;    /* changes are refused until a repair completes */
    bool broken;    /* the current segment takes no more records */
    bool repairing; /* a repair (snapshot + new segment) is under way */
    bool repair_snapshot_done, repair_segment_done;
    uint64_t repair_failures; /* `st.failures` when the repair began */
    char fail_reason[256];
    bool stop;
    /* The counters wal_get_stats reports (records: those published); its
     * LSNs and `refusing` are read from the fields above instead. */
    wal_stats st;
    uint64_t snapshot_seq;

    /* The writer's own. */
    int seg_fd;
    uint64_t seg_seq;
    int64_t last_sync_ms; /* monotonic */
    hf_buf batch;

    /* The keeper's own. */
    pid_t child;
    uint64_t child_seq, child_lsn;
    bool child_repair;
    int64_t child_started_ms;
    int64_t next_save_ms;   /* monotonic */
    int64_t hold_until_ms;  /* no snapshot before (after a failed one) */
    int64_t next_repair_ms; /* monotonic */
    int64_t repair_delay_ms;

    pthread_t writer_thread, keeper_thread;
    bool threads_started;
};


void wal__seg_name(char out[WAL_NAME_MAX], uint64_t seq);
void wal__snap_name(char out[WAL_NAME_MAX], uint64_t seq);
void wal__snap_tmp_name(char out[WAL_NAME_MAX], uint64_t seq);

/* write(2) all of it (retrying EINTR and short writes); 0 or -errno. */
int wal__write_all(int fd, const void *p, size_t n);
int wal__datasync(int fd);
int wal__sync_dir(wal_t *w);

/* Create segment `seq` (header only, synced, directory synced); its fd or -errno. */
int wal__segment_create(wal_t *w, uint64_t seq, uint64_t lsn, int64_t time_base, uint32_t salt,
                        uint32_t flags);
uint32_t wal__new_salt(void);

/* Names in the data directory. */
enum {
    WAL_FILE_UNKNOWN = 0,
    WAL_FILE_IGNORED, /* ".", "..", "lost+found", NFS silly-renames */
    WAL_FILE_LOCK,
    WAL_FILE_SEGMENT,      /* log-<seq>.wal */
    WAL_FILE_SNAPSHOT,     /* snapshot-<seq>.snap */
    WAL_FILE_SNAPSHOT_TMP, /* snapshot-<seq>.tmp */
    WAL_FILE_DAMAGED,      /* *.damaged, set aside by --salvage */
};
int wal__classify(const char *name, uint64_t *seq);

/* Write the snapshot of w->core as file `seq` covering the log up to lsn:
 * tmp file, fdatasync, rename, directory fsync. 0 or -errno; *bytes its size. */
int wal__snapshot_write(wal_t *w, uint64_t seq, uint64_t lsn, int64_t time_base, uint64_t *bytes);

/* Delete snapshots and segments numbered below seq (covered by snapshot seq). */
void wal__delete_covered(wal_t *w, uint64_t seq);

/* recover.c: lock the directory, rebuild w->core, create the next segment,
 * set w's LSNs, sequence numbers and encoder pool table. */
int wal__recover(wal_t *w, char *err, size_t errlen);

/* wal.c: a repair whose snapshot and segment are both durable ends the
 * failure (wal.c, "FAILURES"). Under mu. */
void wal__repair_settle_locked(wal_t *w);

/* snapshot.c: the keeper thread (snapshots, repairs), started by wal_open. */
void *wal__keeper_main(void *arg);

/* The LSNs, under mu: what is synced was written, what was written was
 * appended (`written` does not move while the segment is broken). */
HF_ASSERT_HELPER static inline bool wal__lsns_in_order(const wal_t *w)
{
    return w->synced <= w->written && (w->broken || w->written <= w->appended);
}

/* The failure flags (FAILURES), under mu once the log is open: a repair runs
 * only while the log is failed; a segment is given up only by a failure;
 * published records are kept unless the log failed and no repair runs; a
 * pending switch falls within `pending`. */
HF_ASSERT_HELPER static inline bool wal__flags_consistent(const wal_t *w)
{
    return (!w->repairing || w->failed) && (!w->broken || w->failed) &&
           w->accepting == (!w->failed || w->repairing) &&
           (!w->rotate.pending || w->rotate.off <= w->pending.len);
}

#endif
