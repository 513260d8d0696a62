/*
 * store.h: what the dialects may ask of the state, as a table of functions.
 *
 * An engine implements struct store_ops. The embedded engine (store_mem_new)
 * keeps the state in this process; a Redis engine will implement the same
 * table. Nothing here assumes memory: every call names its pool by
 * (namespace, rank), takes whole batches, and writes its answers into arrays
 * the caller owns (sized n by the caller). Engines are thread-safe: any
 * thread may call any operation at any time. Engines read their own clock.
 *
 * Errors: 0 on success or a negative STORE_E* code; then nothing changed.
 */
#ifndef HF_STORE_H
#define HF_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "util/slice.h"

enum {
    STORE_OK = 0,
    STORE_ENOPOOL = -1,      /* pool not initialized */
    STORE_EINVAL = -2,       /* argument out of range (num_pages, rank) */
    STORE_ENOMEM = -3,
    STORE_EUNAVAILABLE = -4, /* the engine cannot accept changes now (e.g. its log failed) */
};

const char *store_strerror(int err);

typedef struct store store_t;

/* One pool's figures, handed to a stats visitor. Valid during the call only. */
typedef void (*store_stats_visitor)(void *ctx, hf_slice ns, uint32_t rank,
                                    const core_pool_stats *stats);

struct store_ops {
    /* Create the pool or keep it (idempotent). *created says which;
     * *existing_pages is the size the pool has after the call. */
    int (*init_pool)(store_t *s, hf_slice ns, uint32_t rank, uint64_t num_pages,
                     bool *created, uint64_t *existing_pages);
    int (*allocate)(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n,
                    core_alloc_mode mode, int64_t *pages, bool *existed);
    int (*confirm)(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys,
                   const int64_t *pages, size_t n, const int64_t *release, size_t nrel);
    int (*exists)(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n,
                  bool *present);
    int (*lookup)(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n,
                  int64_t *pages);
    int (*delete_keys)(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n);
    int (*clear_pool)(store_t *s, hf_slice ns, uint32_t rank);
    int (*clear_all)(store_t *s);
    int (*complete_exists)(store_t *s, hf_slice ns, const hf_slice *keys, size_t n, bool *present);
    int (*complete_locations)(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys,
                              size_t n, int64_t *pages);
    /* Visit every pool's figures (a consistent snapshot per pool). */
    int (*stats)(store_t *s, store_stats_visitor fn, void *ctx);
    /* Verify the ownership invariant; 0 or -1 with a description in err. */
    int (*check)(store_t *s, char *err, size_t errlen);
    void (*destroy)(store_t *s);
};

struct store {
    const struct store_ops *ops;
};

/* The embedded in-memory engine. Returns NULL on out-of-memory. */
store_t *store_mem_new(const core_config *config);

#endif
