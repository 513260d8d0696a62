/*
 * recover.c: start-up. Lock the data directory, rebuild the state from the
 * newest snapshot and the log after it, cut a torn tail, begin a new
 * segment. The algorithm and the rule for a valid record are specified in
 * wal.c (RECOVERY, A VALID RECORD, THE CHAIN).
 *
 * Nothing in the directory is changed until the whole chain has been read
 * and judged: a start that fails leaves every file as it found it (except a
 * new LOCK file and leftover snapshot-*.tmp files).
 */
#include "wal/wal_internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/bytes.h"
#include "util/clock.h"
#include "util/fd.h"
#include "util/hf_assert.h"
#include "util/log.h"
#include "util/xalloc.h"

typedef struct dir_file {
    int kind;
    uint64_t seq;
    char name[WAL_NAME_MAX];
} dir_file;

typedef struct recovery {
    wal_t *w;
    char *err;
    size_t errlen;
    wal_decoder dec;
    dir_file *files;
    size_t nfiles, cap;
    /* what was read */
    bool fresh;
    const char *snapshot_name;
    uint64_t snap_seq, snap_lsn, snap_records;
    uint64_t log_records, segments, end_lsn, last_seq, max_seq;
    /* what to do once the chain is judged */
    const char **obsolete; /* files to delete */
    size_t nobsolete;
    const char **damaged; /* files to set aside (salvage) */
    size_t ndamaged;
    const char *cut_name; /* a torn tail to cut */
    size_t cut_keep;
    uint64_t cut_bytes, cut_records;
    uint64_t skipped_records, skipped_bytes;
} recovery;

static int fail(recovery *R, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(recovery *R, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(R->err, R->errlen, fmt, ap);
    va_end(ap);
    return code;
}

static bool noted(const char *const *list, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(list[i], name))
            return true;
    return false;
}

static void note(const char ***list, size_t *n, const char *name)
{
    if (noted(*list, *n, name))
        return;
    *list = hf_xreallocarray(*list, *n + 1, sizeof **list);
    (*list)[(*n)++] = name;
}

/* Damage: a refusal, or under --salvage a loud note and on we go. */
static int damage(recovery *R, const char *name, size_t off, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int damage(recovery *R, const char *name, size_t off, const char *fmt, ...)
{
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (!R->w->opt.salvage)
        return fail(R, WAL_EDAMAGED,
                    "the log in %s is damaged before its tail: %s, at byte %zu: %s. Refusing to "
                    "start on it; --salvage starts with every valid record and sets the damaged "
                    "files aside (see docs/durability.md)",
                    R->w->dir, name, off, what);
    log_msg(LOG_ERROR, "salvage: %s/%s at byte %zu: %s", R->w->dir, name, off, what);
    note(&R->damaged, &R->ndamaged, name);
    return 0;
}

/* ---------------------------------------------------------- the directory */

static int open_dir(recovery *R)
{
    wal_t *w = R->w;
    if (mkdir(w->dir, 0755) != 0 && errno != EEXIST)
        return fail(R, WAL_EIO, "cannot create the data directory %s: %s", w->dir, strerror(errno));
    w->dir_fd = open(w->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (w->dir_fd < 0)
        return fail(R, WAL_EIO, "cannot open the data directory %s: %s", w->dir, strerror(errno));
    return 0;
}

static int cmp_file(const void *a, const void *b)
{
    const dir_file *x = a, *y = b;
    if (x->kind != y->kind)
        return x->kind < y->kind ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int list_dir(recovery *R)
{
    wal_t *w = R->w;
    int fd = openat(w->dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        hf_close_fd(fd);
        return fail(R, WAL_EIO, "cannot list the data directory %s: %s", w->dir, strerror(errno));
    }
    struct dirent *de;
    int rc = 0;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        uint64_t seq;
        int kind = wal__classify(de->d_name, &seq);
        if (kind == WAL_FILE_UNKNOWN) {
            rc = fail(R, WAL_EFOREIGN,
                      "the data directory %s contains '%s', which hf3fs-metad did not write: "
                      "refusing to use a directory it does not own (choose an empty or new "
                      "--data-dir, or move that file away)",
                      w->dir, de->d_name);
            break;
        }
        if (kind == WAL_FILE_IGNORED || kind == WAL_FILE_LOCK)
            continue;
        if (kind == WAL_FILE_DAMAGED) {
            log_msg(LOG_WARN, "%s/%s: set aside by an earlier --salvage; ignored", w->dir,
                    de->d_name);
            continue;
        }
        R->files = hf_grow(R->files, &R->cap, R->nfiles + 1, sizeof *R->files);
        dir_file *f = &R->files[R->nfiles++];
        f->kind = kind;
        f->seq = seq;
        /* classified names are at most 30 characters */
        snprintf(f->name, sizeof f->name, "%.*s", (int)sizeof f->name - 1, de->d_name);
        if (seq > R->max_seq)
            R->max_seq = seq;
    }
    closedir(d);
    if (rc == 0 && R->nfiles > 0)
        qsort(R->files, R->nfiles, sizeof *R->files, cmp_file);
    return rc;
}

static int lock_dir(recovery *R)
{
    wal_t *w = R->w;
    w->lock_fd = openat(w->dir_fd, WAL_LOCK_NAME, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (w->lock_fd < 0)
        return fail(R, WAL_EIO, "cannot create %s/%s: %s", w->dir, WAL_LOCK_NAME, strerror(errno));
    /* A POSIX record lock: released when this process dies, and not
     * inherited by the snapshot children. */
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    if (fcntl(w->lock_fd, F_SETLK, &fl) != 0) {
        int err = errno;
        if (err == EACCES || err == EAGAIN) {
            fl.l_type = F_WRLCK;
            fcntl(w->lock_fd, F_GETLK, &fl);
            return fail(R, WAL_ELOCKED,
                        "the data directory %s is in use by another process "
                        "(pid %d holds %s)",
                        w->dir, (int)fl.l_pid, WAL_LOCK_NAME);
        }
        return fail(R, WAL_EIO, "cannot lock %s/%s: %s", w->dir, WAL_LOCK_NAME, strerror(err));
    }
    return 0;
}

/* ----------------------------------------------------------------- files */

typedef struct mapped {
    const uint8_t *p;
    size_t len;
} mapped;

static int map_file(recovery *R, const char *name, mapped *m)
{
    m->p = NULL;
    m->len = 0;
    int fd = openat(R->w->dir_fd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fail(R, WAL_EIO, "cannot open %s/%s: %s", R->w->dir, name, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return fail(R, WAL_EFOREIGN, "%s/%s is not a regular file", R->w->dir, name);
    }
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
        if (p == MAP_FAILED) {
            int err = errno;
            close(fd);
            return fail(R, WAL_EIO, "cannot read %s/%s: %s", R->w->dir, name, strerror(err));
        }
        m->p = p;
        m->len = (size_t)st.st_size;
    }
    close(fd);
    return 0;
}

static void unmap_file(mapped *m)
{
    if (m->p)
        munmap((void *)m->p, m->len);
    m->p = NULL;
}

static bool all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return false;
    return true;
}

/* The header of file f. *torn (segments only): the file was being created
 * when the process died (shorter than a header, or zeros); the caller
 * decides whether that is allowed. */
static int check_header(recovery *R, const dir_file *f, const mapped *m, wal_file_header *h,
                        bool *torn)
{
    const char *dir = R->w->dir;
    bool segment = f->kind == WAL_FILE_SEGMENT;
    *torn = false;
    int rc = wal__header_decode(m->p, m->len, h);
    if (segment && (rc == WAL_HDR_SHORT || (rc == WAL_HDR_BAD_MAGIC && all_zero(m->p, m->len)))) {
        *torn = true;
        return 0;
    }
    switch (rc) {
    case WAL_HDR_OK: break;
    case WAL_HDR_BAD_MAGIC:
        return fail(R, WAL_EFOREIGN,
                    "%s/%s is not an hf3fs-metad file (unknown magic number): "
                    "refusing to use this data directory",
                    dir, f->name);
    case WAL_HDR_BAD_VERSION:
        return fail(R, WAL_EFOREIGN,
                    "%s/%s has format version %u; this build reads versions "
                    "%d to %d",
                    dir, f->name, h->version, WAL_VERSION_OLDEST, WAL_VERSION);
    case WAL_HDR_SHORT:
        return damage(R, f->name, 0, "the snapshot is shorter than its header") ? WAL_EDAMAGED : 1;
    default:
        return damage(R, f->name, 0, "the file header's checksum does not match") ? WAL_EDAMAGED
                                                                                  : 1;
    }
    const char *want = segment ? WAL_MAGIC_LOG : WAL_MAGIC_SNAPSHOT;
    if (memcmp(h->magic, want, 8) != 0)
        return fail(R, WAL_EFOREIGN, "%s/%s: a %s under the name of a %s", dir, f->name,
                    segment ? "snapshot" : "log segment", segment ? "log segment" : "snapshot");
    if (h->seq != f->seq)
        return damage(R, f->name, 16, "the header says number %016" PRIx64, h->seq) ? WAL_EDAMAGED
                                                                                    : 1;
    return 0;
}

/* ---------------------------------------------------------------- records */

/* Offset of the next intact record at or after `from`, or len. */
static size_t next_intact(const uint8_t *p, size_t from, size_t len, uint32_t salt)
{
    for (size_t i = from; i < len; i++) {
        size_t rec_len, body_len;
        const uint8_t *body;
        if (wal__frame(p + i, len - i, salt, &rec_len, &body, &body_len) == WAL_FRAME_OK)
            return i;
    }
    return len;
}

/* How many records a damaged tail held, by its length fields (at least 1). */
static uint64_t count_frames(const uint8_t *p, size_t len)
{
    uint64_t count = 0;
    size_t i = 0;
    while (i < len) {
        count++;
        size_t n = i + 4;
        if (n >= len)
            break;
        uint64_t body = 0;
        size_t most = WAL_MAX_FRAME_OVERHEAD - 4;
        int got = hf_varint_get(p + n, len - n < most ? len - n : most, &body);
        if (got <= 0 || body == 0)
            break;
        i = n + (size_t)got + body;
    }
    return count ? count : 1;
}

typedef struct replay_out {
    size_t valid_end; /* offset just past the last record kept or skipped */
    uint64_t records;
    bool end_seen;
    bool torn;
} replay_out;

static int replay_file(recovery *R, const dir_file *f, const mapped *m, const wal_file_header *h,
                       bool tail_ok, replay_out *o)
{
    bool snapshot = f->kind == WAL_FILE_SNAPSHOT;
    const uint8_t *p = m->p;
    size_t len = m->len, off = WAL_HEADER_SIZE;
    int rc;
    /* only a file whose header was read and names it is replayed */
    HF_ASSERT(len >= WAL_HEADER_SIZE && h->seq == f->seq);
    HF_ASSERT(!snapshot || !tail_ok); /* a snapshot has no torn tail to cut */
    memset(o, 0, sizeof *o);
    o->valid_end = off;
    R->dec.time_base = h->time_base;
    R->dec.version = h->version;
    while (off < len) {
        if (o->end_seen && (rc = damage(R, f->name, off, "bytes after the END record")) != 0)
            return rc;
        if (o->end_seen)
            break;
        size_t rec_len, body_len;
        const uint8_t *body;
        if (wal__frame(p + off, len - off, h->salt, &rec_len, &body, &body_len) == WAL_FRAME_OK) {
            uint64_t count = 0;
            int dr = wal__decode(&R->dec, body, body_len, wal__apply_event, R->w->core, &count);
            if (dr == WAL_DEC_OK || (dr == WAL_DEC_END && snapshot && count == o->records)) {
                o->end_seen = dr == WAL_DEC_END;
                o->records += dr == WAL_DEC_OK;
            } else {
                const char *why = dr == WAL_DEC_REFUSED ? "does not fit the state before it"
                                  : dr == WAL_DEC_END   ? "is an END record out of place"
                                                        : "does not parse";
                if ((rc = damage(R, f->name, off, "an intact record %s", why)) != 0)
                    return rc;
                R->skipped_records++;
            }
            HF_ASSERT(rec_len > 0 && rec_len <= len - off);
            off += rec_len;
            o->valid_end = off;
            continue;
        }
        size_t next = next_intact(p, off + 1, len, h->salt);
        HF_ASSERT(next > off && next <= len);
        if (next == len && tail_ok) {
            o->torn = true;
            R->cut_name = f->name;
            R->cut_keep = off;
            R->cut_bytes = len - off;
            R->cut_records = count_frames(p + off, len - off);
            return 0;
        }
        if (next == len)
            rc = damage(R, f->name, off,
                        snapshot ? "the snapshot is truncated or damaged"
                                 : "a damaged record in a segment that is not "
                                   "the last one");
        else
            rc = damage(R, f->name, off,
                        "a damaged record, with intact records after it (at "
                        "byte %zu)",
                        next);
        if (rc)
            return rc;
        R->skipped_bytes += next - off;
        off = next;
        o->valid_end = off;
    }
    HF_ASSERT(o->valid_end >= WAL_HEADER_SIZE && o->valid_end <= len);
    if (snapshot && !o->end_seen &&
        (rc = damage(R, f->name, len, "the snapshot has no END record (incomplete)")) != 0)
        return rc;
    return 0;
}

/* ---------------------------------------------------------------- the chain */

/* Map file f and check its header: map_file's failure, else check_header's
 * answer. Either way *m is safe to unmap (a failed map maps nothing). */
static int open_file(recovery *R, const dir_file *f, mapped *m, wal_file_header *h, bool *torn)
{
    int rc = map_file(R, f->name, m);
    return rc ? rc : check_header(R, f, m, h, torn);
}

static int load_snapshot(recovery *R, const dir_file *f)
{
    mapped m;
    wal_file_header h = {0};
    bool torn;
    int rc = open_file(R, f, &m, &h, &torn);
    if (rc == 0) {
        replay_out o;
        rc = replay_file(R, f, &m, &h, false, &o);
        R->snap_records = o.records;
    }
    if (rc == 1) { /* salvage of a bad header: nothing of it can be trusted */
        rc = 0;
        h.lsn = 0;
    }
    unmap_file(&m);
    R->snapshot_name = f->name;
    R->snap_seq = f->seq;
    R->snap_lsn = h.lsn;
    R->end_lsn = h.lsn;
    return rc;
}

/* Flags of segment file f, or 0 if its header cannot be read. */
static uint32_t peek_flags(recovery *R, const dir_file *f)
{
    uint8_t buf[WAL_HEADER_SIZE];
    wal_file_header h;
    int fd = openat(R->w->dir_fd, f->name, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = pread(fd, buf, sizeof buf, 0);
    close(fd);
    if (n != (ssize_t)sizeof buf || wal__header_decode(buf, sizeof buf, &h) != WAL_HDR_OK)
        return 0;
    return h.flags;
}

/* Segments segs[0..n-1] (seq >= the snapshot's), in order. */
static int replay_chain(recovery *R, const dir_file *segs, size_t n)
{
    bool expect_any = R->snapshot_name == NULL; /* salvage without a snapshot */
    for (size_t i = 0; i < n; i++) {
        const dir_file *f = &segs[i];
        mapped m;
        wal_file_header h;
        bool torn;
        int rc = open_file(R, f, &m, &h, &torn);
        if (rc == 0 && torn && i + 1 == n) {
            log_msg(LOG_WARN,
                    "%s/%s: created but never written (the process died while "
                    "creating it); deleted",
                    R->w->dir, f->name);
            note(&R->obsolete, &R->nobsolete, f->name);
            unmap_file(&m);
            return 0;
        }
        if (rc == 0 && torn)
            rc = damage(R, f->name, 0, "an empty log segment before others") ? WAL_EDAMAGED : 1;
        if (rc == 0 && !expect_any && h.lsn != R->end_lsn) {
            if (h.flags & WAL_FLAG_RECOVERY) {
                for (size_t j = i; j < n; j++) {
                    log_msg(LOG_WARN,
                            "%s/%s: begun by a log repair that did not complete; it "
                            "holds no acknowledged change; deleted",
                            R->w->dir, segs[j].name);
                    note(&R->obsolete, &R->nobsolete, segs[j].name);
                }
                unmap_file(&m);
                return 0;
            }
            rc = damage(R, f->name, 24,
                        "it starts at LSN %" PRIu64 " but the log before it "
                        "ends at LSN %" PRIu64 ": records are missing",
                        h.lsn, R->end_lsn);
        }
        if (rc == 0) {
            /* segments in order; each continues the chain (or salvage goes on) */
            HF_ASSERT(i == 0 || segs[i - 1].seq < f->seq);
            HF_ASSERT(expect_any || h.lsn == R->end_lsn || R->w->opt.salvage);
            bool tail_ok = i + 1 == n || (peek_flags(R, &segs[i + 1]) & WAL_FLAG_RECOVERY);
            replay_out o;
            rc = replay_file(R, f, &m, &h, tail_ok, &o);
            R->log_records += o.records;
            R->end_lsn = h.lsn + (o.valid_end - WAL_HEADER_SIZE);
            R->segments++;
            R->last_seq = f->seq;
            expect_any = false;
        }
        unmap_file(&m);
        if (rc == 1)
            rc = 0; /* salvage: a segment whose header cannot be trusted is skipped */
        if (rc)
            return rc;
    }
    return 0;
}

/* --------------------------------------------------------------- actions */

static int cut_tail(recovery *R)
{
    wal_t *w = R->w;
    int fd = openat(w->dir_fd, R->cut_name, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)R->cut_keep) != 0 || fdatasync(fd) != 0) {
        int err = errno;
        hf_close_fd(fd);
        return fail(R, WAL_EIO, "cannot cut the torn tail of %s/%s: %s", w->dir, R->cut_name,
                    strerror(err));
    }
    close(fd);
    log_msg(LOG_WARN,
            "%s/%s: cut a torn tail of %" PRIu64 " bytes (%" PRIu64 " damaged or "
            "incomplete record%s) after LSN %" PRIu64 ": those records were never acknowledged",
            w->dir, R->cut_name, R->cut_bytes, R->cut_records, R->cut_records == 1 ? "" : "s",
            R->end_lsn);
    return 0;
}

static int set_aside(recovery *R)
{
    wal_t *w = R->w;
    for (size_t i = 0; i < R->ndamaged; i++) {
        /* Already deleted as obsolete (a torn or abandoned segment that is
         * also the one without a snapshot): it held nothing to keep. */
        if (noted(R->obsolete, R->nobsolete, R->damaged[i]))
            continue;
        char to[WAL_NAME_MAX + 16];
        snprintf(to, sizeof to, "%s.damaged", R->damaged[i]);
        if (renameat(w->dir_fd, R->damaged[i], w->dir_fd, to) != 0)
            return fail(R, WAL_EIO, "salvage: cannot rename %s/%s: %s", w->dir, R->damaged[i],
                        strerror(errno));
        log_msg(LOG_ERROR, "salvage: %s/%s set aside as %s", w->dir, R->damaged[i], to);
    }
    log_msg(LOG_ERROR,
            "salvage: kept every valid record; skipped %" PRIu64 " intact records "
            "that did not apply and %" PRIu64 " damaged bytes",
            R->skipped_records, R->skipped_bytes);
    return 0;
}

static void delete_obsolete(recovery *R)
{
    for (size_t i = 0; i < R->nobsolete; i++)
        if (unlinkat(R->w->dir_fd, R->obsolete[i], 0) != 0 && errno != ENOENT)
            log_msg(LOG_WARN, "cannot delete %s/%s: %s", R->w->dir, R->obsolete[i],
                    strerror(errno));
}

typedef struct state_count {
    size_t pools;
    uint64_t owned, reserved;
} state_count;

static void count_pool(void *ctx, hf_slice ns, uint32_t rank, const core_pool_stats *st)
{
    state_count *c = ctx;
    c->pools++;
    c->owned += st->owned;
    c->reserved += st->reserved;
}

/* A new segment after everything read; the log's LSNs and pool ids. */
static int begin_segment(recovery *R, uint64_t seq)
{
    wal_t *w = R->w;
    /* after every segment read and the snapshot it continues; nothing encoded yet */
    HF_ASSERT(seq >= R->snap_seq && (R->segments == 0 || seq > R->last_seq));
    HF_ASSERT(R->snap_lsn <= R->end_lsn && w->enc.out.len == 0 && !w->enc.held);
    int64_t base = hf_clock_wall_ms();
    uint32_t salt = wal__new_salt();
    int fd = wal__segment_create(w, seq, R->end_lsn, base, salt, 0);
    if (fd < 0)
        return fail(R, WAL_EIO, "cannot create a log segment in %s: %s", w->dir, strerror(-fd));
    w->seg_fd = fd;
    w->seg_seq = seq;
    w->next_seq = seq + 1;
    w->appended = w->written = w->synced = w->sync_wanted = R->end_lsn;
    w->enc.time_base = base;
    w->enc.salt = salt;
    w->enc.records = 0;
    wal__pools_clear(&w->enc.pools);
    wal__pools_copy(&w->enc.pools, &R->dec.pools);
    return 0;
}

static int recover_existing(recovery *R)
{
    wal_t *w = R->w;
    const dir_file *snap = NULL, *segs = NULL;
    size_t nsegs = 0;
    for (size_t i = 0; i < R->nfiles; i++) {
        const dir_file *f = &R->files[i];
        if (f->kind == WAL_FILE_SNAPSHOT)
            snap = f; /* sorted: the last is the newest */
        if (f->kind == WAL_FILE_SEGMENT && !segs)
            segs = f;
        nsegs += f->kind == WAL_FILE_SEGMENT;
    }
    int rc;
    if (!snap) {
        /* wal__recover calls this only when a segment or a snapshot is
         * listed: with no snapshot, segs is a segment */
        // cppcheck-suppress nullPointer
        rc = damage(R, segs->name, 0,
                    "there is no snapshot: the log cannot be read without "
                    "the snapshot it continues");
        if (rc)
            return rc;
    } else if ((rc = load_snapshot(R, snap)) != 0) {
        return rc;
    }
    for (size_t i = 0; i < R->nfiles; i++) {
        const dir_file *f = &R->files[i];
        bool covered = snap && f != snap && f->seq < snap->seq &&
                       (f->kind == WAL_FILE_SEGMENT || f->kind == WAL_FILE_SNAPSHOT);
        if (covered)
            note(&R->obsolete, &R->nobsolete, f->name);
    }
    while (nsegs > 0 && snap && segs->seq < snap->seq) {
        segs++;
        nsegs--;
    }
    HF_ASSERT(!snap || nsegs == 0 || segs->seq >= snap->seq); /* covered segments skipped */
    if ((rc = replay_chain(R, segs, nsegs)) != 0)
        return rc;
    /* the cut is at a record boundary of the last segment read */
    HF_ASSERT(!R->cut_name || (R->cut_keep >= WAL_HEADER_SIZE && R->cut_bytes > 0));
    core_apply_finish(w->core);
    if (R->cut_name && (rc = cut_tail(R)) != 0)
        return rc;
    delete_obsolete(R);
    uint64_t next = R->segments ? R->last_seq + 1 : R->snap_seq;
    if (R->ndamaged > 0) {
        if ((rc = set_aside(R)) != 0)
            return rc;
        /* A fresh snapshot makes the damaged chain unnecessary. */
        next = R->max_seq + 1;
        w->enc.time_base = hf_clock_wall_ms();
        wal__pools_copy(&w->enc.pools, &R->dec.pools);
        if (wal__snapshot_write(w, next, R->end_lsn, w->enc.time_base, NULL) != 0)
            return fail(R, WAL_EIO, "salvage: cannot write a snapshot in %s", w->dir);
        wal__delete_covered(w, next);
        log_msg(LOG_ERROR, "salvage: the salvaged state is in snapshot-%016" PRIx64 ".snap", next);
        R->snap_seq = next;
        R->snap_lsn = R->end_lsn;
    }
    return begin_segment(R, next);
}

static int recover_fresh(recovery *R)
{
    wal_t *w = R->w;
    R->fresh = true;
    R->snap_seq = 1;
    if (wal__snapshot_write(w, 1, 0, hf_clock_wall_ms(), NULL) != 0)
        return fail(R, WAL_EIO, "cannot write the first snapshot in %s", w->dir);
    return begin_segment(R, 1);
}

static void log_start(recovery *R, int64_t ms)
{
    wal_t *w = R->w;
    state_count c = {0, 0, 0};
    core_foreach_pool(w->core, 0, count_pool, &c);
    if (R->fresh) {
        log_msg(LOG_INFO, "data directory %s: new and empty (fsync %s)", w->dir,
                wal_fsync_name(w->opt.fsync));
        return;
    }
    log_msg(LOG_INFO,
            "data directory %s: loaded snapshot-%016" PRIx64 ".snap (%" PRIu64
            " records, LSN %" PRIu64 ") and replayed %" PRIu64 " log records from %" PRIu64
            " segment%s in %" PRId64 " ms: %zu pools, %" PRIu64 " owned keys, %" PRIu64
            " reservations (fsync %s)",
            w->dir, R->snap_seq, R->snap_records, R->snap_lsn, R->log_records, R->segments,
            R->segments == 1 ? "" : "s", ms, c.pools, c.owned, c.reserved,
            wal_fsync_name(w->opt.fsync));
}

int wal__recover(wal_t *w, char *err, size_t errlen)
{
    int64_t t0 = hf_clock_mono_ms();
    recovery R = {.w = w, .err = err, .errlen = errlen};
    wal__dec_init(&R.dec);
    int rc = open_dir(&R);
    if (rc == 0)
        rc = list_dir(&R);
    if (rc == 0)
        rc = lock_dir(&R);
    bool any = false;
    for (size_t i = 0; rc == 0 && i < R.nfiles; i++) {
        if (R.files[i].kind == WAL_FILE_SNAPSHOT_TMP) {
            log_msg(LOG_INFO, "%s/%s: an unfinished snapshot; deleted", w->dir, R.files[i].name);
            unlinkat(w->dir_fd, R.files[i].name, 0);
        } else {
            any = true;
        }
    }
    if (rc == 0)
        rc = any ? recover_existing(&R) : recover_fresh(&R);
    if (rc == 0) {
        w->snapshot_seq = R.snap_seq;
        w->st.snapshot_lsn = R.snap_lsn;
        if (!w->opt.quiet)
            log_start(&R, hf_clock_mono_ms() - t0);
    }
    wal__dec_free(&R.dec);
    free(R.files);
    free(R.obsolete);
    free(R.damaged);
    return rc;
}
