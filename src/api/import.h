/*
 * import.h: importing the state file of SGLang's metadata server
 * (mini_3fs_metadata_server.py --persistence-path FILE) into an empty state.
 *
 * The file (SGLang's GlobalMetadataState.save_to_disk, json.dump): one JSON
 * object; each member is a pool, named "rank:namespace" (or a bare "rank",
 * namespace "kv", in older files), whose value is an object with
 *   num_pages     the pool's size
 *   free_pages    SGLang's free list (it hands out its last item next)
 *   key_to_index  [[key, page], ...], SGLang's OrderedDict in LRU order,
 *                 the least recently used first
 * A page neither free nor owned was reserved when SGLang saved (a write in
 * flight): it is imported FREE, as SGLang forgets such reservations too.
 *
 * Two halves:
 *   import_sglang_read()   reads and validates the whole file into per-pool
 *                          lists (nothing is changed; every refusal is here
 *                          or in the emptiness check below);
 *   import_sglang_apply()  refuses a target state that holds any pool, then
 *                          imports each pool through store_ops.import_pool
 *                          (one atomic step per pool), logs what it did and
 *                          records in the target which file it imported
 *                          (store_ops.import_mark_set: "<size> bytes,
 *                          FNV-1a 64 <16 hex>" of the file's bytes), so that
 *                          a later start with the same file knows
 *                          (import_already_done) and serves.
 * The reader is the api's (it parses JSON with json.h); the step on a core
 * is the core's (core_pool_import, core.h), run by the engines that hold one
 * (the embedded engine, the Redis module's HF3FS.IMPORT).
 */
#ifndef HF_API_IMPORT_H
#define HF_API_IMPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store.h"
#include "util/slice.h"

/* One pool of the file. keys and pages point into the import_state. */
typedef struct import_pool {
    hf_slice ns;
    uint32_t rank;
    uint64_t num_pages;
    size_t nkeys;
    const hf_slice *keys; /* SGLang's order: least recently used first */
    const int64_t *pages;
    uint64_t listed_free;    /* free_pages items */
    uint64_t in_flight;      /* pages neither free nor owned: imported FREE */
    uint64_t owned_and_free; /* pages owned and also listed free: imported OWNED */
} import_pool;

#define IMPORT_MARK_MAX 64

typedef struct import_state {
    import_pool *pools;
    size_t npools;
    char mark[IMPORT_MARK_MAX]; /* what identifies the file: its size and digest */
    void *priv;                 /* the file's text and parse tree */
} import_state;

/* What the server accepts; a file beyond it is refused. */
typedef struct import_limits {
    uint64_t max_pages;
    uint64_t max_ranks;
    uint64_t max_key_bytes;
} import_limits;

/* Read and validate path. 0, or -1 with why in err (the file cannot be
 * read, is not SGLang's format, or a pool has a page out of range or owned
 * twice, a key twice, or is beyond the limits). */
int import_sglang_read(const char *path, const import_limits *limits, import_state *out, char *err,
                       size_t errlen);
void import_state_free(import_state *st);

/* Whether the engine holds any pool: 1 yes, 0 no, or a STORE_E* code. */
int import_target_pools(store_t *s);

/* Whether s records the import of the file at path as it is now (same size
 * and digest): 1 yes, 0 no (or the engine records nothing), -1 with why in
 * err (the file cannot be read, or the record cannot: a STORE_E* error). */
int import_already_done(store_t *s, const char *path, char *err, size_t errlen);

/*
 * Import st into s (path is for the log). Refused (-1, why in err, nothing
 * imported) if the engine cannot import or holds a pool already. Each pool
 * is one step; a failure after the first pool (the store became
 * unavailable) leaves the pools imported so far: -1, and err says which.
 * After the last pool, st->mark is recorded (a failure to record it is
 * logged as a warning: the import stands, and a later start with the flag
 * is refused as before).
 */
int import_sglang_apply(store_t *s, const import_state *st, const char *path, char *err,
                        size_t errlen);

#endif
