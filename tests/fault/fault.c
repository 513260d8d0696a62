/*
 * fault.c: disk faults beneath the write-ahead log, for the tests (fault.h
 * says what a spec is and how it gets in). Which file a descriptor is comes
 * from /proc/self/fd: a log segment is "log-*.wal", a snapshot being written
 * "snapshot-*.tmp"; every other descriptor passes untouched.
 */
#include "fault.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef enum file_kind { FILE_OTHER, FILE_LOG, FILE_SNAPSHOT } file_kind;

static struct {
    bool any;
    char while_exists[PATH_MAX];
    int64_t write_fail_after; /* -1: never */
    int64_t sync_fail_after;
    bool snapshot_fail;
} spec;
static _Atomic int64_t log_writes, log_syncs; /* counted while in force */

static ssize_t (*real_write)(int, const void *, size_t);
static int (*real_fdatasync)(int);

static bool item_is(const char *item, size_t len, const char *name)
{
    return strlen(name) == len && memcmp(item, name, len) == 0;
}

int fault_set(const char *text)
{
    memset(&spec, 0, sizeof spec);
    spec.write_fail_after = spec.sync_fail_after = -1;
    atomic_store(&log_writes, 0);
    atomic_store(&log_syncs, 0);
    if (!text || !*text)
        return 0;
    for (const char *item = text; *item;) {
        const char *end = strchr(item, ',');
        size_t len = end ? (size_t)(end - item) : strlen(item);
        const char *eq = memchr(item, '=', len);
        size_t name_len = eq ? (size_t)(eq - item) : len;
        const char *value = eq ? eq + 1 : "";
        int value_len = eq ? (int)(len - name_len - 1) : 0;
        if (item_is(item, name_len, "write-fail-after")) {
            spec.write_fail_after = strtoll(value, NULL, 10);
        } else if (item_is(item, name_len, "sync-fail-after")) {
            spec.sync_fail_after = strtoll(value, NULL, 10);
        } else if (item_is(item, name_len, "snapshot-fail")) {
            spec.snapshot_fail = true;
        } else if (item_is(item, name_len, "while-exists")) {
            snprintf(spec.while_exists, sizeof spec.while_exists, "%.*s", value_len, value);
        } else {
            fprintf(stderr, "fault: unknown item '%.*s'\n", (int)len, item);
            fault_set(NULL);
            return -1;
        }
        item += len + (end != NULL);
    }
    spec.any = true;
    return 0;
}

static void resolve(void)
{
    if (!real_write)
        real_write = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    if (!real_fdatasync)
        real_fdatasync = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
}

__attribute__((constructor)) static void fault_load(void)
{
    resolve();
    const char *text = getenv("HF3FS_TEST_FAULT");
    if (text && fault_set(text) != 0)
        abort(); /* a test asked for a fault this file does not know */
}

static bool in_force(void)
{
    return spec.any && (!spec.while_exists[0] || access(spec.while_exists, F_OK) == 0);
}

static bool ends_with(const char *s, size_t len, const char *tail)
{
    size_t n = strlen(tail);
    return len >= n && memcmp(s + len - n, tail, n) == 0;
}

static file_kind kind_of(int fd)
{
    char link[64], path[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t len = readlink(link, path, sizeof path - 1);
    if (len <= 0)
        return FILE_OTHER;
    path[len] = '\0';
    const char *slash = strrchr(path, '/');
    const char *name = slash ? slash + 1 : path;
    size_t name_len = strlen(name);
    if (strncmp(name, "log-", 4) == 0 && ends_with(name, name_len, ".wal"))
        return FILE_LOG;
    if (strncmp(name, "snapshot-", 9) == 0 && ends_with(name, name_len, ".tmp"))
        return FILE_SNAPSHOT;
    return FILE_OTHER;
}

ssize_t write(int fd, const void *buf, size_t n)
{
    resolve();
    if (in_force()) {
        file_kind kind = kind_of(fd);
        if ((kind == FILE_SNAPSHOT && spec.snapshot_fail) ||
            (kind == FILE_LOG && spec.write_fail_after >= 0 &&
             atomic_fetch_add(&log_writes, 1) >= spec.write_fail_after)) {
            errno = ENOSPC;
            return -1;
        }
    }
    return real_write(fd, buf, n);
}

int fdatasync(int fd)
{
    resolve();
    if (in_force() && spec.sync_fail_after >= 0 && kind_of(fd) == FILE_LOG &&
        atomic_fetch_add(&log_syncs, 1) >= spec.sync_fail_after) {
        errno = EIO;
        return -1;
    }
    return real_fdatasync(fd);
}
