/*
 * mem.h: the embedded engine: the whole state in this process (one core_t
 * behind one lock), optionally logged to a data directory (src/wal).
 *
 * Its figures (store_ops.metrics): hf3fs_metad_persistence_enabled always,
 * and with a log the hf3fs_metad_log_* and hf3fs_metad_snapshot_* families;
 * in /v1/stats the member "persistence" (an object, or null in memory only).
 */
#ifndef HF_STORE_MEM_H
#define HF_STORE_MEM_H

#include <stddef.h>

#include "store/store.h"

struct wal_options;

/*
 * In memory only. Never NULL (aborts on out-of-memory). The engine reads
 * `clock` (copied; store_server_clock for the server, a fake clock in tests
 * and fuzzers) for every deadline, never a clock of its own.
 */
store_t *store_mem_new(const core_config *config, const store_clock *clock);

/* With its write-ahead log (src/wal/wal.h): recovers the state of log->dir
 * first. STORE_OK, or STORE_EIO, STORE_EFOREIGN, STORE_EDAMAGED or
 * STORE_ELOCKED with a message in err. destroy() writes a final snapshot.
 * The log stamps its files with the wall clock whatever `clock` is. */
int store_mem_open(const core_config *config, const store_clock *clock,
                   const struct wal_options *log, store_t **out, char *err, size_t errlen);

/*
 * For tests and fuzzers only: the core behind the engine, to watch its
 * events (core_set_observer) or walk its state while no operation runs.
 * Not for the server: it would bypass the engine's lock and log.
 */
core_t *store_mem_core(store_t *s);

#endif
