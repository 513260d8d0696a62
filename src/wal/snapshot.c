/*
 * snapshot.c: snapshots (wal.c, "SNAPSHOTS"): writing one (the state walked
 * into a tmp file, synced, renamed), deleting what it covers, and the keeper
 * thread that forks the child which writes one, reaps it, and retries a
 * failed log's repair with backoff (wal.c, "FAILURES").
 */
#include "wal/wal_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/fd.h"
#include "util/hf_assert.h"
#include "util/log.h"

#define SNAPSHOT_RETRY_MS 10000
#define KEEPER_TICK_MS 100

/* ------------------------------------------------------------- snapshots */

typedef struct snap_writer {
    wal_t *w;
    int fd;
    int err;
    uint64_t bytes;
} snap_writer;

static void snap_drain(snap_writer *s)
{
    hf_buf *out = &s->w->enc.out;
    if (s->err == 0 && out->len)
        s->err = wal__write_all(s->fd, out->ptr, out->len);
    s->bytes += out->len;
    out->len = 0;
}

static void snap_event(void *ctx, const core_event *ev)
{
    snap_writer *s = ctx;
    wal__enc_event(&s->w->enc, ev);
    if (s->w->enc.out.len >= WAL_SNAPSHOT_CHUNK)
        snap_drain(s);
}

int wal__snapshot_write(wal_t *w, uint64_t seq, uint64_t lsn, int64_t time_base, uint64_t *bytes)
{
    char tmp[WAL_NAME_MAX], name[WAL_NAME_MAX];
    wal__snap_tmp_name(tmp, seq);
    wal__snap_name(name, seq);
    snap_writer s = {w, -1, 0, WAL_HEADER_SIZE};
    s.fd = openat(w->dir_fd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (s.fd < 0) {
        int err = errno;
        log_msg(LOG_ERROR, "snapshot: cannot create %s/%s: %s", w->dir, tmp, strerror(err));
        return -err;
    }
    wal_encoder *e = &w->enc;
    wal_file_header h = {WAL_MAGIC_SNAPSHOT, WAL_VERSION, 0, seq, lsn, time_base, wal__new_salt()};
    uint8_t hdr[WAL_HEADER_SIZE];
    wal__header_encode(&h, hdr);
    s.err = wal__write_all(s.fd, hdr, sizeof hdr);
    /* The encoder is between operations: no open batch, nothing staged. */
    e->snapshot = true;
    e->records = 0;
    e->out.len = 0;
    e->time_base = time_base;
    e->salt = h.salt;
    core_walk_state(w->core, snap_event, &s);
    wal__enc_flush(e);
    wal__enc_end(e);
    snap_drain(&s);
    e->snapshot = false;
    const char *step = "write";
    if (s.err == 0) {
        step = "fdatasync";
        s.err = wal__datasync(s.fd);
    }
    if (close(s.fd) != 0 && s.err == 0)
        s.err = -errno;
    if (s.err == 0) {
        step = "rename";
        if (renameat(w->dir_fd, tmp, w->dir_fd, name) != 0)
            s.err = -errno;
    }
    if (s.err == 0) {
        step = "directory fsync";
        s.err = wal__sync_dir(w);
    }
    if (s.err != 0) {
        log_msg(LOG_ERROR, "snapshot %s/%s: %s failed: %s", w->dir, name, step, strerror(-s.err));
        unlinkat(w->dir_fd, tmp, 0);
        return s.err;
    }
    if (bytes)
        *bytes = s.bytes;
    return 0;
}

void wal__delete_covered(wal_t *w, uint64_t seq)
{
    int fd = openat(w->dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        hf_close_fd(fd);
        log_msg(LOG_WARN, "cannot list %s to delete old log segments: %s", w->dir, strerror(errno));
        return;
    }
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        uint64_t n;
        int kind = wal__classify(de->d_name, &n);
        bool old = (kind == WAL_FILE_SEGMENT || kind == WAL_FILE_SNAPSHOT ||
                    kind == WAL_FILE_SNAPSHOT_TMP) &&
                   n < seq;
        if (old && unlinkat(w->dir_fd, de->d_name, 0) != 0)
            log_msg(LOG_WARN, "cannot delete %s/%s: %s", w->dir, de->d_name, strerror(errno));
    }
    closedir(d);
    wal__sync_dir(w);
}

/* ---------------------------------------------------------------- keeper */

static void child_main(wal_t *w, pid_t parent, uint64_t seq, uint64_t lsn, int64_t base)
{
    /* Die with the server: a kill -9 of the parent must not leave a writer
     * behind in the directory of the next server. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(1);
    /* Keep only the directory: the child must not hold the server's
     * sockets (a connection the parent closes would stay open). */
    if (w->dir_fd > 3)
        close_range(3, (unsigned)w->dir_fd - 1, 0);
    close_range((unsigned)w->dir_fd + 1, ~0u, 0);
    _exit(wal__snapshot_write(w, seq, lsn, base, NULL) == 0 ? 0 : 1);
}

static void start_snapshot(wal_t *w, bool repair)
{
    w->host.lock(w->host.ctx);
    /* The child must not need malloc for its output (fork in a threaded
     * process): give the encoder its whole chunk now. */
    hf_buf_reserve(&w->enc.out, WAL_SNAPSHOT_CHUNK + (64u << 10));
    uint64_t seq = w->next_seq++;
    int64_t base = hf_clock_wall_ms();
    uint32_t salt = wal__new_salt();
    pthread_mutex_lock(&w->mu);
    HF_ASSERT(w->child == 0); /* one snapshot at a time */
    /* a repair only of a failed log, and one at a time */
    HF_ASSERT(!repair || (w->failed && !w->repairing));
    uint64_t lsn = w->appended;
    if (repair) {
        w->pending.len = 0;
        w->accepting = true;
        w->repairing = true;
        w->repair_snapshot_done = w->repair_segment_done = false;
        w->repair_failures = w->st.failures;
    }
    w->rotate = (wal_rotation){true, w->pending.len, seq, lsn, base, salt, repair || w->broken};
    HF_ASSERT(wal__flags_consistent(w));
    if (!w->writer_busy)
        pthread_cond_signal(&w->writer_cv);
    pthread_mutex_unlock(&w->mu);
    w->enc.time_base = base;
    w->enc.salt = salt;
    pid_t parent = getpid();
    int64_t started = hf_clock_mono_ms();
    pid_t pid = fork();
    if (pid == 0)
        child_main(w, parent, seq, lsn, base);
    int fork_err = errno;
    w->host.unlock(w->host.ctx);

    pthread_mutex_lock(&w->mu);
    if (pid < 0) {
        log_msg(LOG_ERROR, "snapshot: fork failed: %s", strerror(fork_err));
        if (repair) {
            w->repairing = false;
            w->accepting = false;
            w->broken = true;
            w->pending.len = 0;
            w->next_repair_ms = hf_clock_mono_ms() + w->repair_delay_ms;
        }
        w->hold_until_ms = hf_clock_mono_ms() + SNAPSHOT_RETRY_MS;
    } else {
        w->child = pid;
        w->child_seq = seq;
        w->child_lsn = lsn;
        w->child_repair = repair;
        w->child_started_ms = started;
    }
    HF_ASSERT(wal__flags_consistent(w));
    pthread_mutex_unlock(&w->mu);
}

/* The child is done (status from waitpid). Not under mu. */
static void finish_snapshot(wal_t *w, int status)
{
    bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    char name[WAL_NAME_MAX];
    uint64_t bytes = 0;
    if (ok) {
        struct stat st;
        wal__snap_name(name, w->child_seq);
        if (fstatat(w->dir_fd, name, &st, 0) == 0)
            bytes = (uint64_t)st.st_size;
        wal__delete_covered(w, w->child_seq);
    } else {
        wal__snap_tmp_name(name, w->child_seq);
        unlinkat(w->dir_fd, name, 0);
        if (WIFSIGNALED(status) && !w->stop)
            log_msg(LOG_ERROR, "snapshot %016" PRIx64 ": the child died of signal %d", w->child_seq,
                    WTERMSIG(status));
    }
    int64_t now = hf_clock_mono_ms();
    pthread_mutex_lock(&w->mu);
    HF_ASSERT(w->child > 0 && w->child_lsn <= w->appended);
    /* snapshots cover more and more of the log, under rising numbers */
    HF_ASSERT(!ok || (w->child_lsn >= w->st.snapshot_lsn && w->child_seq > w->snapshot_seq));
    if (ok) {
        if (w->child_lsn > w->synced)
            w->synced = w->child_lsn;
        if (w->child_lsn > w->written)
            w->written = w->child_lsn;
        w->st.snapshots++;
        w->st.snapshot_bytes = bytes;
        w->st.snapshot_time_ms = hf_clock_wall_ms();
        w->st.snapshot_lsn = w->child_lsn;
        w->snapshot_seq = w->child_seq;
        w->next_save_ms = now + w->opt.save_interval_ms;
        w->hold_until_ms = 0;
        log_msg(LOG_DEBUG, "snapshot %016" PRIx64 ": %" PRIu64 " bytes in %" PRId64 " ms",
                w->child_seq, bytes, now - w->child_started_ms);
        if (w->child_repair && w->repairing) {
            w->repair_snapshot_done = true;
            wal__repair_settle_locked(w);
        }
        pthread_cond_broadcast(&w->durable_cv);
    } else {
        w->hold_until_ms = now + SNAPSHOT_RETRY_MS;
        if (w->child_repair && w->repairing) {
            w->repairing = false;
            w->accepting = false;
            w->broken = true;
            w->pending.len = 0;
        }
    }
    if (w->child_repair && w->failed && !w->repairing) {
        w->next_repair_ms = now + w->repair_delay_ms;
        log_msg(LOG_WARN, "write-ahead log repair failed; next attempt in %" PRId64 " ms",
                w->repair_delay_ms);
        w->repair_delay_ms = w->repair_delay_ms * 2 > WAL_REPAIR_MAX_DELAY_MS
                                 ? WAL_REPAIR_MAX_DELAY_MS
                                 : w->repair_delay_ms * 2;
    }
    w->child = 0;
    HF_ASSERT(wal__lsns_in_order(w) && wal__flags_consistent(w));
    pthread_mutex_unlock(&w->mu);
}

static bool snapshot_due_locked(const wal_t *w, int64_t now)
{
    if (w->failed || w->rotate.pending || now < w->hold_until_ms)
        return false;
    uint64_t grown = w->appended - w->st.snapshot_lsn;
    if (w->opt.snapshot_log_bytes > 0 && grown >= w->opt.snapshot_log_bytes)
        return true;
    return w->opt.save_interval_ms > 0 && now >= w->next_save_ms && grown > 0;
}

void *wal__keeper_main(void *arg)
{
    wal_t *w = arg;
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        int64_t now = hf_clock_mono_ms();
        if (w->child > 0) {
            int status;
            pid_t r = waitpid(w->child, &status, WNOHANG);
            if (r == w->child) {
                pthread_mutex_unlock(&w->mu);
                finish_snapshot(w, status);
                pthread_mutex_lock(&w->mu);
                continue;
            }
            hf_cond_wait_until_us(&w->keeper_cv, &w->mu, hf_clock_mono_us() + 10 * 1000);
            continue;
        }
        bool repair = w->failed && !w->repairing && now >= w->next_repair_ms;
        if (repair || snapshot_due_locked(w, now)) {
            pthread_mutex_unlock(&w->mu);
            start_snapshot(w, repair);
            pthread_mutex_lock(&w->mu);
            continue;
        }
        hf_cond_wait_until_us(&w->keeper_cv, &w->mu, hf_clock_mono_us() + KEEPER_TICK_MS * 1000);
    }
    pid_t child = w->child;
    pthread_mutex_unlock(&w->mu);
    if (child > 0) { /* the final snapshot supersedes it */
        kill(child, SIGKILL);
        int status;
        while (waitpid(child, &status, 0) < 0 && errno == EINTR)
            ;
        finish_snapshot(w, status);
    }
    return NULL;
}
