/*
 * wal.c: the write-ahead log of hf3fs-metad: its specification (file
 * format, group commit, snapshots, failures) and the live log: the writer
 * thread, group commit, publishing and waiting, failures, open and close.
 * Snapshots and the keeper thread are in snapshot.c, the data directory's
 * files in files.c, recovery in recover.c, the codec in format.c.
 *
 * WHAT IS LOGGED
 *   The core reports every change of state as an event (core.h, "Events"):
 *   POOL_INIT, CLEAR_ALL, RESERVE, OWN, FREE, DRAIN, WRITE_LEASE,
 *   WRITE_DONE, SWEEP. Those are physical effects, not requests: replaying
 *   them with core_apply() on the state they were logged against gives
 *   exactly the same durable state (core.h "What is durable"): pools,
 *   pages, keys, clock hands, reservations (with their wall-clock
 *   deadlines), write leases and drains. Evictions and lease expiries are
 *   FREE events like any other, and the clock hand's moves SWEEP events, so
 *   replay never re-decides anything and never reads a clock.
 *   Reads are not logged: use counts, demotions and read leases are
 *   volatile, so a read-only workload writes nothing. After recovery the
 *   store calls core_recovered(): every owned page is read-leased for one
 *   read lease, covering the reads answered before the restart.
 *
 * THE DATA DIRECTORY
 *   LOCK                      fcntl() write lock of the one server using it
 *   snapshot-<seq>.snap       the state at an LSN; normally exactly one
 *   log-<seq>.wal             log segments, in <seq> order
 *   snapshot-<seq>.tmp        a snapshot being written (deleted at start)
 *   <name>.damaged            a file set aside by --salvage (ignored)
 *   <seq> is 16 lowercase hex digits. Any other name (except ".nfs*" and
 *   "lost+found") makes the directory foreign: the server refuses to start.
 *
 * LSN
 *   The log is one stream of records cut into segments. The LSN of a record
 *   is the number of record bytes (file headers excluded) logged before it
 *   since the directory was created. Waiting for a change to be durable is
 *   waiting for the LSN just past its records.
 *
 * FILE HEADER (segments and snapshots; 48 bytes, integers little-endian)
 *    0   8  magic: "HF3FSLOG" (segment) or "HF3FSSNP" (snapshot)
 *    8   4  format version: 5 (versions 1 to 4 are read too: version 1
 *           lacks types 11 to 13, version 2 type 13; their USE and DEMOTE
 *           records are read and ignored, recency being volatile; before
 *           5 a packed key has no suffix byte)
 *   12   4  flags: bit 0 RECOVERY (segment begun by a repair, see FAILURES)
 *   16   8  seq: a segment's number (also in its name); for a snapshot the
 *           number of the segment that continues it
 *   24   8  lsn: a segment's first record; for a snapshot the LSN the
 *           snapshot covers (every record before it)
 *   32   8  time base, wall-clock milliseconds: deadlines are stored
 *           relative to it
 *   40   4  salt: a random number XORed into every record checksum of the
 *           file, so that no record of another file (or a key crafted by a
 *           client to look like a record) checks out here
 *   44   4  CRC-32C of bytes 0..43
 *
 * RECORD (from byte 48 on, back to back)
 *    0   4  CRC-32C of bytes 4..end of record, XOR salt
 *    4  1-4 n, the body length, LEB128 varint, 1 <= n <= 2^24
 *    .   n  body: a type byte and its fields
 *   Fields are LEB128 varints unless stated. A deadline field is 0 for "no
 *   deadline", else zigzag(deadline - time base) + 1. A key field is
 *   varint(len << 1 | hex) and len bytes: hex = 0 stores the bytes as they
 *   are; hex = 1 packs lowercase hex digits two characters a byte (2*len
 *   characters), then (version 5 on) one byte s and s bytes of suffix:
 *   s = 0 for a key of lowercase hex digits of even length, else the key is
 *   `<32 or 64 hex><suffix of 1..16 bytes>` (util/hexkey.h, as the core
 *   packs it).
 *
 *   type  name       fields                        replays as
 *    1    POOL_INIT  pool, rank, num_pages,        POOL_INIT
 *                    ns_len, ns bytes
 *    2    CLEAR_ALL  -                             CLEAR_ALL (forgets pool ids)
 *    3    RESERVE    pool, page, deadline, key     RESERVE
 *    4    OWN        pool, page                    OWN
 *    5    FREE       pool, page                    FREE
 *    6    DRAIN      pool, page, deadline          DRAIN
 *    7    USE        pool, deadline, count,        versions 1-3 only: checked
 *                    count x page                  (pages OWNED), else ignored
 *    8    DEMOTE     pool, page                    versions 1-3 only: as USE
 *    9    OWNED      pool, page, key               RESERVE (no deadline) + OWN
 *   10    END        record count                  end of a snapshot
 *   11    WRITE_LEASE pool, page, deadline         WRITE_LEASE (one writer more)
 *   12    WRITE_DONE pool, page, deadline          WRITE_DONE (the last writer
 *                                                  confirmed; page protected
 *                                                  until deadline)
 *   13    SWEEP      pool, hand, full turns        SWEEP (the clock hand moves
 *                                                  to page `hand`)
 *   `pool` is a small id: POOL_INIT gives it to (namespace, rank); the live
 *   log numbers pools 0, 1, 2... and starts again after CLEAR_ALL; a
 *   snapshot keeps the ids of the log it continues.
 *
 * A VALID RECORD
 *   (1) all its bytes are in the file, (2) its length is 1..2^24 and its
 *   checksum matches: then it is intact; (3) its body parses exactly (known
 *   type, every field present, nothing left over) and (4) core_apply()
 *   accepts its events (known pool, page in range and in the state the event
 *   expects). A record failing (1) or (2) is damaged; an intact record
 *   failing (3) or (4) means the log does not describe this state (a bug, or
 *   a file edited by hand): always damage, never a torn tail.
 *   A snapshot is valid when its header is, every record is valid and it
 *   ends with END, whose count equals the records before it.
 *
 * THE CHAIN
 *   The state = the newest snapshot (highest seq S, covering up to LSN L) +
 *   segments S, S+1, ... replayed in order. Segment S starts at LSN L and
 *   each next one starts exactly where the previous one's valid records end.
 *   A segment is only begun after the previous one is complete and synced
 *   (the writer fdatasyncs a segment before it creates the next), so in a
 *   healthy log only the last segment can have a torn tail. Segments below
 *   S are covered by the snapshot and deleted.
 *
 * RECOVERY (recover.c)
 *   1. List the directory. A name we do not know, a magic we do not know or
 *      a format version we do not read: refuse (foreign directory). No
 *      snapshot and no segment: a new directory (write snapshot 1 of the
 *      empty state, then segment 1). Segments without a snapshot: damage.
 *   2. Load the newest snapshot; it must be valid (else damage).
 *   3. Replay segments S, S+1, ... A damaged record in the last segment with
 *      no intact record after it is a torn tail: the file is truncated at it
 *      and the cut is reported (bytes, records). A damaged record followed
 *      by an intact one, a damaged record in a segment that is not the
 *      last, an intact record that is not valid, or a segment that does not
 *      continue the previous one: damage. A RECOVERY segment that does not
 *      continue the chain was begun by a repair whose snapshot never
 *      completed: it holds no acknowledged change (changes are refused
 *      during a repair) and is deleted with any segment after it.
 *   4. Damage stops the start (exit code 3) with the file and offset,
 *      unless --salvage: then every valid record is kept (after damage the
 *      reader resynchronizes at the next intact record; records that do not
 *      apply are skipped), the damaged files are renamed *.damaged, a fresh
 *      snapshot is written at once, and the counts are logged as errors.
 *   5. Begin a new segment after the last one and serve.
 *
 * GROUP COMMIT
 *   Operations run under the store's lock; the core's observer encodes their
 *   events into the encoder's buffer (wal__enc_event); at the end of the
 *   operation wal_publish() moves those records to `pending` and returns
 *   the LSN past them. The request thread releases the store lock and, for
 *   a change, waits in wal_wait(). One writer thread takes all of `pending`
 *   at once, writes it with one write(2) and, if a waiter needs it (fsync
 *   always), fdatasyncs once for everybody: requests that arrive during a
 *   sync share the next one. Under everysec and no a change waits for the
 *   write only (so it survives kill -9, as in Redis, which writes the AOF
 *   before it replies), and the writer syncs once a second (everysec) or
 *   never (no). A read publishes only what the expiries it ran produced
 *   (usually nothing) and never waits; the writer writes those records at
 *   once and syncs them with the next change (at the latest within a
 *   second under always and everysec).
 *
 * SNAPSHOTS
 *   The keeper thread takes the store lock, asks the writer to switch to
 *   segment S+1 at the current LSN L (exactly: the records before L go to
 *   the old segment), fork()s and releases the lock: the parent serves on
 *   while the child walks its copy-on-write image of the state
 *   (core_walk_state) into snapshot-S+1.tmp, fdatasyncs, renames it to
 *   snapshot-S+1.snap, fsyncs the directory and exits. The keeper reaps it
 *   and deletes the segments and snapshots below S+1. Why fork: the state is
 *   a graph of pointers that changes on every request; fork gives a
 *   consistent image for the cost of copying page tables (a few ms per GB)
 *   while the service pauses only for the fork itself, and the child's
 *   writes never contend with the service for the state lock (Redis does
 *   the same). Triggers: --save-interval seconds if anything was logged,
 *   and --snapshot-log-bytes of log since the last snapshot. Clean shutdown
 *   writes a final snapshot in-process, so the next start reads one file.
 *
 * FAILURES (disk full, I/O errors)
 *   A failed write, fdatasync or segment creation makes the log "failed":
 *   every waiter whose records are not durable gets WAL_EUNAVAILABLE (the
 *   store makes it STORE_EUNCERTAIN and the API answers 507 "Outcome
 *   unknown": the change was applied in memory but is not acknowledged, and
 *   a repaired log may keep it, so it must not get a status that the stock
 *   clients resend); new changes are refused before anything changes
 *   (STORE_EUNAVAILABLE, 503, which they may resend), reads go on. The
 *   failed segment is never written again: after a failed fdatasync the
 *   kernel may have dropped the dirty pages, so retrying it proves nothing
 *   (PostgreSQL's "fsyncgate"; LMDB's "unusable until reopened"). While the
 *   log is failed, published records are dropped (the memory state is ahead
 *   of the disk). The keeper retries a repair after 0.5 s, then with
 *   backoff up to 8 s: a snapshot of the whole state plus a new segment
 *   flagged RECOVERY; when both are durable the log accepts changes again.
 *   A restart before that finds the old chain (its torn tail cut): nothing
 *   acknowledged is lost, since acknowledgements stopped at the failure.
 *   If the writer falls WAL_MAX_PENDING bytes behind, that is a failure too.
 *
 * FAULT INJECTION
 *   None here: the tests wrap write(2) and fdatasync(2) beneath the log
 *   (tests/fault/fault.h), as SQLite's test_vfs.c wraps the real VFS.
 */
#include "wal/wal_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/fd.h"
#include "util/hf_assert.h"
#include "util/log.h"
#include "util/xalloc.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "crc32c.c reads words little-endian"
#endif


/* ---------------------------------------------------------- failure state */

/* Whether the calling thread holds the state lock (true if the host cannot tell). */
HF_ASSERT_HELPER static bool state_held(const wal_t *w)
{
    return !w->host.held || w->host.held(w->host.ctx);
}

/* A repair succeeds when its snapshot and its new segment are both durable
 * and nothing failed since it began. Under mu. */
void wal__repair_settle_locked(wal_t *w)
{
    if (!w->repairing)
        return;
    if (w->st.failures != w->repair_failures) {
        w->repairing = false;
        return;
    }
    if (!w->repair_snapshot_done || !w->repair_segment_done)
        return;
    HF_ASSERT(w->failed && w->accepting && !w->broken); /* the repair's segment is current */
    w->repairing = false;
    w->failed = false;
    w->repair_delay_ms = WAL_REPAIR_FIRST_DELAY_MS;
    log_msg(LOG_WARN,
            "write-ahead log repaired (snapshot %016" PRIx64 " and a new segment are "
            "durable): changes are accepted again",
            w->snapshot_seq);
    pthread_cond_broadcast(&w->durable_cv);
}

/* The log failed: refuse changes, fail the waiters, never write the current
 * segment again, schedule a repair. Under mu. */
static void fail_locked(wal_t *w, const char *what, int err)
{
    if (!w->failed)
        log_msg(LOG_ERROR,
                "write-ahead log in %s: %s failed: %s; changes are refused with 503 "
                "until the log is repaired (retrying), reads go on",
                w->dir, what, strerror(err));
    else
        log_msg(LOG_WARN, "write-ahead log in %s: %s failed again: %s", w->dir, what,
                strerror(err));
    snprintf(w->fail_reason, sizeof w->fail_reason,
             "the write-ahead log failed (%s: %s); changes are refused until it is repaired, "
             "reads still work",
             what, strerror(err));
    w->failed = true;
    w->broken = true;
    w->accepting = false;
    w->pending.len = 0;
    if (w->rotate.pending) {
        /* The records before the switch are lost: the next segment cannot
         * continue the chain, it can only follow a snapshot. */
        w->rotate.off = 0;
        w->rotate.repair = true;
    }
    w->st.failures++;
    wal__repair_settle_locked(w);
    if (!w->repairing)
        w->next_repair_ms = hf_clock_mono_ms() + w->repair_delay_ms;
    HF_ASSERT(!w->repairing && !w->accepting && wal__flags_consistent(w));
    pthread_cond_broadcast(&w->durable_cv);
    pthread_cond_signal(&w->keeper_cv);
}
/* ---------------------------------------------------------------- writer */

/* fdatasync the current segment, counting its latency. Writer only. */
static int timed_sync(wal_t *w)
{
    int64_t t0 = hf_clock_mono_us();
    int rc = wal__datasync(w->seg_fd);
    uint64_t us = (uint64_t)(hf_clock_mono_us() - t0);
    pthread_mutex_lock(&w->mu);
    w->st.syncs++;
    w->st.sync_us_sum += us;
    w->st.sync_buckets[wal_sync_bucket(us)]++;
    pthread_mutex_unlock(&w->mu);
    return rc;
}

/*
 * Group commit gathers: requests that a sync released come back with their
 * next change a little after it ends, and a writer that syncs as soon as
 * the first of them arrives splits them over two or three syncs. So, under
 * fsync always, the writer waits for as many changes as recent syncs served
 * (gather_target, which decays by 1/8 a sync so that it follows a falling
 * load), but never longer than half the time a sync takes (gather_max_us):
 * a lone client pays nothing (target 1), a busy server gets full batches.
 * Returns true if the writer waited (the caller looks again). Under mu.
 */
static bool gather_more(wal_t *w)
{
    if (w->opt.fsync != WAL_FSYNC_ALWAYS || w->stop || w->rotate.pending ||
        w->changes_pending >= w->gather_target) {
        w->gather_since_us = 0;
        return false;
    }
    int64_t now = hf_clock_mono_us();
    if (w->gather_since_us == 0)
        w->gather_since_us = now;
    int64_t limit = w->gather_since_us + w->gather_max_us;
    if (now >= limit) {
        w->gather_since_us = 0;
        return false;
    }
    hf_cond_wait_until_us(&w->writer_cv, &w->mu, limit);
    return true;
}

/* After a sync that served `changes` changes in `took_us`. Under mu. */
static void gather_learn(wal_t *w, uint32_t changes, int64_t took_us)
{
    uint32_t decayed = w->gather_target - w->gather_target / 8;
    w->gather_target = changes > decayed ? changes : decayed;
    if (w->gather_target < 1)
        w->gather_target = 1;
    int64_t half = took_us / 2;
    w->gather_max_us = half < 20 ? 20 : half > 2000 ? 2000 : half;
}

/* Switch to the rotation's segment: sync and close the old one (unless it
 * is abandoned), create the new one. 0 or -errno with *what set. */
static int switch_segment(wal_t *w, const wal_rotation *rot, bool abandon, const char **what)
{
    int rc = 0;
    if (w->seg_fd >= 0) {
        if (!abandon && !rot->repair) {
            rc = timed_sync(w);
            if (rc < 0) {
                *what = "fdatasync before a segment switch";
                return rc;
            }
        }
        close(w->seg_fd);
        w->seg_fd = -1;
    }
    int fd = wal__segment_create(w, rot->seq, rot->lsn, rot->time_base, rot->salt,
                                 rot->repair ? WAL_FLAG_RECOVERY : 0);
    if (fd < 0) {
        *what = "creating a log segment";
        return fd;
    }
    w->seg_fd = fd;
    w->seg_seq = rot->seq;
    return 0;
}

/* Write (and sync) one batch taken from `pending`. Not under mu. */
static int write_batch(wal_t *w, const wal_rotation *rot, bool broken, bool sync, const char **what)
{
    const uint8_t *p = (const uint8_t *)w->batch.ptr;
    size_t n = w->batch.len, head = rot->pending ? rot->off : n;
    HF_ASSERT(head <= n); /* a rotation falls within the batch it was asked in */
    int rc = 0;
    *what = "write";
    if (!broken && head > 0)
        rc = wal__write_all(w->seg_fd, p, head);
    if (rc == 0 && rot->pending) {
        rc = switch_segment(w, rot, broken, what);
        if (rc < 0)
            return rc;
        broken = false;
        *what = "write";
    }
    if (rc < 0 || broken)
        return rc;
    if (n > head)
        rc = wal__write_all(w->seg_fd, p + head, n - head);
    if (rc == 0 && sync) {
        *what = "fdatasync";
        rc = timed_sync(w);
    }
    return rc;
}

static void *writer_main(void *arg)
{
    wal_t *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        int64_t now = hf_clock_mono_ms();
        bool unsynced = w->opt.fsync != WAL_FSYNC_NO && !w->broken && w->written > w->synced;
        bool timed = unsynced && now - w->last_sync_ms >= 1000;
        bool asked = w->opt.fsync == WAL_FSYNC_ALWAYS && !w->broken && w->sync_wanted > w->synced;
        if (w->pending.len == 0 && !w->rotate.pending && !timed && !asked) {
            if (w->stop)
                break;
            int64_t wait_ms = unsynced ? 1000 - (now - w->last_sync_ms) : 1000;
            hf_cond_wait_until_us(&w->writer_cv, &w->mu, hf_clock_mono_us() + wait_ms * 1000);
            continue;
        }
        if (asked && gather_more(w))
            continue;
        hf_buf swap = w->batch;
        w->batch = w->pending;
        w->pending = swap;
        w->pending.len = 0;
        uint64_t end = w->appended;
        uint32_t changes = w->changes_pending;
        w->changes_pending = 0;
        wal_rotation rot = w->rotate;
        w->rotate.pending = false;
        bool broken = w->broken;
        bool sync = w->opt.fsync == WAL_FSYNC_ALWAYS ? w->sync_wanted > w->synced || timed : timed;
        w->writer_busy = true;
        pthread_mutex_unlock(&w->mu);

        const char *what = "write";
        int64_t t0 = hf_clock_mono_us();
        int rc = write_batch(w, &rot, broken, sync, &what);
        int64_t took_us = hf_clock_mono_us() - t0;

        pthread_mutex_lock(&w->mu);
        w->writer_busy = false;
        if (sync && changes > 0)
            gather_learn(w, changes, took_us);
        if (rc < 0) {
            fail_locked(w, what, -rc);
        } else {
            if (rot.pending) {
                /* the switch's LSN is past every batch written before it:
                 * `written` does not move back */
                HF_ASSERT(rot.lsn >= w->written || w->synced == w->written);
                w->broken = false;
                w->written = w->synced = rot.lsn > w->synced ? rot.lsn : w->synced;
                if (rot.repair && w->repairing) {
                    w->repair_segment_done = true;
                    wal__repair_settle_locked(w);
                }
            }
            if (!w->broken && (!broken || rot.pending)) {
                if (end > w->written)
                    w->written = end;
                if (sync) {
                    w->synced = w->written;
                    w->last_sync_ms = now;
                }
            }
        }
        /* what is synced was written; what was written was appended */
        HF_ASSERT(w->synced <= w->written);
        HF_ASSERT(w->broken || w->written <= w->appended);
        HF_ASSERT(wal__flags_consistent(w));
        pthread_cond_broadcast(&w->durable_cv);
        w->batch.len = 0;
        if (w->batch.cap > (8u << 20)) {
            hf_buf_free(&w->batch);
        }
    }
    /* Stopping: everything was written; make it durable. */
    if (!w->broken && w->seg_fd >= 0 && w->opt.fsync != WAL_FSYNC_NO && w->written > w->synced) {
        pthread_mutex_unlock(&w->mu);
        int rc = wal__datasync(w->seg_fd);
        pthread_mutex_lock(&w->mu);
        if (rc < 0)
            fail_locked(w, "fdatasync at shutdown", -rc);
        else
            w->synced = w->written;
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* ------------------------------------------------------------ publishing */

uint64_t wal_publish(wal_t *w, bool change)
{
    HF_ASSERT(state_held(w)); /* the log order is the state lock's order */
    HF_ASSERT(!w->enc.snapshot);
    wal__enc_flush(&w->enc);
    HF_ASSERT(!w->enc.held); /* no record waits past its operation */
    hf_buf *out = &w->enc.out;
    pthread_mutex_lock(&w->mu);
    if (out->len > 0) {
        if (w->accepting && w->pending.len + out->len > WAL_MAX_PENDING)
            fail_locked(w, "keeping up (the writer fell 256 MiB behind)", EAGAIN);
        if (w->accepting)
            hf_buf_append(&w->pending, out->ptr, out->len);
        w->appended += out->len;
        if (!w->writer_busy)
            pthread_cond_signal(&w->writer_cv);
    }
    uint64_t lsn = w->appended;
    if (change && w->opt.fsync == WAL_FSYNC_ALWAYS) {
        w->changes_pending++;
        if (lsn > w->sync_wanted)
            w->sync_wanted = lsn;
        if (!w->writer_busy)
            pthread_cond_signal(&w->writer_cv);
    }
    HF_ASSERT(w->enc.records >= w->st.records); /* a count of this process's records */
    w->st.records = w->enc.records;
    HF_ASSERT(wal__lsns_in_order(w) && wal__flags_consistent(w));
    pthread_mutex_unlock(&w->mu);
    out->len = 0;
    if (out->cap > (4u << 20))
        hf_buf_free(out);
    return lsn;
}

bool wal_refusing(wal_t *w)
{
    pthread_mutex_lock(&w->mu);
    bool failed = w->failed;
    pthread_mutex_unlock(&w->mu);
    return failed;
}

int wal_wait(wal_t *w, uint64_t lsn)
{
    HF_ASSERT(!w->host.held || !w->host.held(w->host.ctx)); /* it may wait for a sync */
    pthread_mutex_lock(&w->mu);
    int rc = WAL_OK;
    for (;;) {
        /* Failed first: while a repair runs, `written` and `synced` count
         * records that only its snapshot will make durable. */
        if (w->failed) {
            rc = WAL_EUNAVAILABLE;
            break;
        }
        uint64_t durable = w->opt.fsync == WAL_FSYNC_ALWAYS ? w->synced : w->written;
        if (durable >= lsn)
            break;
        pthread_cond_wait(&w->durable_cv, &w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}
/* ------------------------------------------------------------- life cycle */

static void wal_free(wal_t *w)
{
    hf_close_fd(w->seg_fd);
    hf_close_fd(w->lock_fd);
    hf_close_fd(w->dir_fd);
    wal__enc_free(&w->enc);
    hf_buf_free(&w->pending);
    hf_buf_free(&w->batch);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->writer_cv);
    pthread_cond_destroy(&w->durable_cv);
    pthread_cond_destroy(&w->keeper_cv);
    free(w->dir);
    free(w);
}

int wal_open(const wal_options *opt, core_t *core, const wal_host *host, wal_t **out, char *err,
             size_t errlen)
{
    wal_t *w = hf_xcalloc(1, sizeof *w);
    w->opt = *opt;
    size_t dir_len = strlen(opt->dir) + 1;
    w->dir = memcpy(hf_xmalloc(dir_len), opt->dir, dir_len);
    w->opt.dir = w->dir;
    w->core = core;
    w->host = *host;
    w->dir_fd = w->lock_fd = w->seg_fd = -1;
    pthread_mutex_init(&w->mu, NULL);
    hf_cond_init_mono(&w->writer_cv);
    hf_cond_init_mono(&w->durable_cv);
    hf_cond_init_mono(&w->keeper_cv);
    wal__enc_init(&w->enc, hf_clock_wall_ms());
    w->repair_delay_ms = WAL_REPAIR_FIRST_DELAY_MS;
    w->gather_target = 1;
    w->gather_max_us = 100;

    int rc = wal__recover(w, err, errlen);
    if (rc != 0) {
        wal_free(w);
        return rc;
    }
    w->accepting = true;
    w->last_sync_ms = hf_clock_mono_ms();
    w->next_save_ms = hf_clock_mono_ms() + opt->save_interval_ms;
    core_set_observer(core, wal__enc_event, &w->enc);
    if (pthread_create(&w->writer_thread, NULL, writer_main, w) != 0 ||
        pthread_create(&w->keeper_thread, NULL, wal__keeper_main, w) != 0) {
        snprintf(err, errlen, "cannot start the log threads");
        abort(); /* like out-of-memory: nothing sensible is left to do */
    }
    w->threads_started = true;
    *out = w;
    return WAL_OK;
}

void wal_close(wal_t *w, bool final_snapshot)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_broadcast(&w->writer_cv);
    pthread_cond_broadcast(&w->keeper_cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->keeper_thread, NULL);
    pthread_join(w->writer_thread, NULL);
    HF_ASSERT(w->child == 0); /* the keeper reaped its last child */
    core_set_observer(w->core, NULL, NULL);
    if (final_snapshot) {
        uint64_t seq = w->next_seq++, bytes = 0;
        if (wal__snapshot_write(w, seq, w->appended, hf_clock_wall_ms(), &bytes) == 0) {
            wal__delete_covered(w, seq);
            log_msg(LOG_INFO, "final snapshot %s/snapshot-%016" PRIx64 ".snap: %" PRIu64 " bytes",
                    w->dir, seq, bytes);
        } else if (w->failed) {
            log_msg(LOG_ERROR, "the write-ahead log had failed and the final snapshot failed: "
                               "changes refused with 503 since the failure are lost");
        }
    }
    wal_free(w);
}

void wal_get_stats(wal_t *w, wal_stats *out)
{
    pthread_mutex_lock(&w->mu);
    *out = w->st;
    out->lsn = w->appended;
    out->written_lsn = w->written;
    out->synced_lsn = w->synced;
    out->refusing = w->failed;
    pthread_mutex_unlock(&w->mu);
}

void wal_failure_reason(wal_t *w, char *out, size_t len)
{
    pthread_mutex_lock(&w->mu);
    snprintf(out, len, "%s", w->failed ? w->fail_reason : "");
    pthread_mutex_unlock(&w->mu);
}

const char *wal_strerror(int err)
{
    switch (err) {
    case WAL_OK: return "success";
    case WAL_EIO: return "the data directory cannot be read or written";
    case WAL_EFOREIGN: return "the data directory holds files hf3fs-metad did not write";
    case WAL_EDAMAGED: return "the log is damaged before its tail";
    case WAL_ELOCKED: return "another process uses the data directory";
    case WAL_EUNAVAILABLE: return "the write-ahead log failed";
    default: return "unknown log error";
    }
}

const char *wal_fsync_name(wal_fsync_policy policy)
{
    switch (policy) {
    case WAL_FSYNC_ALWAYS: return "always";
    case WAL_FSYNC_EVERYSEC: return "everysec";
    case WAL_FSYNC_NO: return "no";
    }
    return "?";
}

unsigned wal_format_version(void)
{
    return WAL_VERSION;
}

unsigned wal_format_oldest(void)
{
    return WAL_VERSION_OLDEST;
}

int wal_parse_fsync(const char *name, wal_fsync_policy *policy)
{
    static const wal_fsync_policy all[] = {WAL_FSYNC_ALWAYS, WAL_FSYNC_EVERYSEC, WAL_FSYNC_NO};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (!strcmp(name, wal_fsync_name(all[i]))) {
            *policy = all[i];
            return 0;
        }
    }
    return -1;
}
