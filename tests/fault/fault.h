/*
 * fault.h: disk faults for the tests, injected beneath the write-ahead log
 * (as SQLite's test_vfs.c wraps the real VFS): the server has no hook of its
 * own. fault.c defines write(2) and fdatasync(2); each passes the call on to
 * the real one unless a fault spec is in force and the file descriptor is
 * one of the log's files.
 *
 * Two ways in:
 *   - the real server: LD_PRELOAD=BUILD/tests/libhf3fs_fault.so with the spec
 *     in HF3FS_TEST_FAULT (read once, at load);
 *   - a unit test linked with fault.c: fault_set(spec), fault_set(NULL).
 *
 * A spec is a comma-separated list of items:
 *   write-fail-after=N   writes to log segments (log-*.wal) after the first N
 *                        fail with ENOSPC
 *   sync-fail-after=N    fdatasyncs of log segments after the first N fail with EIO
 *   snapshot-fail        writes to snapshots being written (snapshot-*.tmp)
 *                        fail with ENOSPC
 *   while-exists=PATH    the items above are in force (and count) only while
 *                        PATH exists: create it to fill the disk, remove it
 *                        to free it
 */
#ifndef HF3FS_TESTS_FAULT_H
#define HF3FS_TESTS_FAULT_H

/* Put spec in force (NULL or "": none) and reset the counts. Returns 0, or
 * -1 for an item it does not know (then no fault is in force). Not safe
 * against threads writing at the same moment: call it before the log opens. */
int fault_set(const char *spec);

#endif
