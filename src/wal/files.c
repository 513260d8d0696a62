/*
 * files.c: the files of the data directory (wal.c, "THE DATA DIRECTORY"):
 * their names and what a name is, write(2) and fdatasync(2) with their
 * retries, a new segment's creation, and the import record of
 * --import-sglang. No state but the directory's descriptor.
 */
#include "wal/wal_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "util/clock.h"

/* ------------------------------------------------------------- helpers */

uint32_t wal__new_salt(void)
{
    uint32_t salt;
    if (getrandom(&salt, sizeof salt, GRND_NONBLOCK) != (ssize_t)sizeof salt)
        salt = (uint32_t)(hf_clock_wall_ms() * 2654435761u) ^ (uint32_t)getpid();
    return salt;
}

void wal__seg_name(char out[WAL_NAME_MAX], uint64_t seq)
{
    snprintf(out, WAL_NAME_MAX, "log-%016" PRIx64 ".wal", seq);
}

void wal__snap_name(char out[WAL_NAME_MAX], uint64_t seq)
{
    snprintf(out, WAL_NAME_MAX, "snapshot-%016" PRIx64 ".snap", seq);
}

void wal__snap_tmp_name(char out[WAL_NAME_MAX], uint64_t seq)
{
    snprintf(out, WAL_NAME_MAX, "snapshot-%016" PRIx64 ".tmp", seq);
}

/* "prefix<16 hex>suffix" -> seq. */
static bool parse_seq_name(const char *name, const char *prefix, const char *suffix, uint64_t *seq)
{
    size_t lp = strlen(prefix), ls = strlen(suffix), len = strlen(name);
    if (len != lp + 16 + ls || strncmp(name, prefix, lp) != 0 ||
        strcmp(name + lp + 16, suffix) != 0)
        return false;
    uint64_t v = 0;
    for (size_t i = lp; i < lp + 16; i++) {
        char c = name[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return false;
        v = v << 4 | (uint64_t)d;
    }
    *seq = v;
    return true;
}

int wal__classify(const char *name, uint64_t *seq)
{
    size_t len = strlen(name);
    *seq = 0;
    if (!strcmp(name, ".") || !strcmp(name, "..") || !strcmp(name, "lost+found") ||
        !strncmp(name, ".nfs", 4))
        return WAL_FILE_IGNORED;
    if (!strcmp(name, WAL_LOCK_NAME))
        return WAL_FILE_LOCK;
    if (!strcmp(name, WAL_IMPORT_MARK) || !strcmp(name, WAL_IMPORT_MARK ".tmp"))
        return WAL_FILE_IGNORED;
    if (parse_seq_name(name, "log-", ".wal", seq))
        return WAL_FILE_SEGMENT;
    if (parse_seq_name(name, "snapshot-", ".snap", seq))
        return WAL_FILE_SNAPSHOT;
    if (parse_seq_name(name, "snapshot-", ".tmp", seq))
        return WAL_FILE_SNAPSHOT_TMP;
    if (len > 8 && !strcmp(name + len - 8, ".damaged"))
        return WAL_FILE_DAMAGED;
    return WAL_FILE_UNKNOWN;
}

/* --------------------------------------------------------------- file I/O */

int wal__write_all(int fd, const void *p, size_t n)
{
    const char *q = p;
    while (n > 0) {
        ssize_t k = write(fd, q, n);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (k == 0)
            return -EIO;
        q += k;
        n -= (size_t)k;
    }
    return 0;
}

int wal__datasync(int fd)
{
    return fdatasync(fd) == 0 ? 0 : -errno;
}

int wal__sync_dir(wal_t *w)
{
    return fsync(w->dir_fd) == 0 ? 0 : -errno;
}

int wal__segment_create(wal_t *w, uint64_t seq, uint64_t lsn, int64_t time_base, uint32_t salt,
                        uint32_t flags)
{
    char name[WAL_NAME_MAX];
    wal__seg_name(name, seq);
    int fd = openat(w->dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    wal_file_header h = {WAL_MAGIC_LOG, WAL_VERSION, flags, seq, lsn, time_base, salt};
    uint8_t hdr[WAL_HEADER_SIZE];
    wal__header_encode(&h, hdr);
    int rc = wal__write_all(fd, hdr, sizeof hdr);
    if (rc == 0)
        rc = wal__datasync(fd);
    if (rc == 0)
        rc = wal__sync_dir(w);
    if (rc < 0) {
        close(fd);
        unlinkat(w->dir_fd, name, 0);
        return rc;
    }
    return fd;
}

/* ------------------------------------------------------ the import record */

int wal_mark_get(wal_t *w, char *out, size_t cap)
{
    out[0] = 0;
    int fd = openat(w->dir_fd, WAL_IMPORT_MARK, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : -errno;
    ssize_t n = read(fd, out, cap - 1);
    int rc = n < 0 ? -errno : (int)n;
    close(fd);
    out[n > 0 ? (size_t)n : 0] = 0;
    return rc;
}

int wal_mark_set(wal_t *w, const char *text)
{
    const char *tmp = WAL_IMPORT_MARK ".tmp";
    int fd = openat(w->dir_fd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -errno;
    int rc = wal__write_all(fd, text, strlen(text));
    if (rc == 0)
        rc = wal__datasync(fd);
    if (close(fd) != 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && renameat(w->dir_fd, tmp, w->dir_fd, WAL_IMPORT_MARK) != 0)
        rc = -errno;
    return rc == 0 ? wal__sync_dir(w) : rc;
}
