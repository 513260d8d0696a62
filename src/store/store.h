/*
 * store.h: what the dialects may ask of the state, as a table of functions.
 *
 * An engine implements struct store_ops; nothing above this header knows
 * which engine runs (each engine's constructor and options are in its own
 * header: store/mem.h for the embedded engine). Nothing here assumes
 * memory: every call names its pool by (namespace, rank), takes whole
 * batches, and writes its answers into arrays the caller owns (sized n by
 * the caller). Engines are thread-safe: any thread may call any operation
 * at any time.
 *
 * Errors: 0 on success or a negative STORE_E* code; then nothing changed
 * (STORE_EUNCERTAIN excepted). The codes from STORE_EIO on are those of
 * opening an engine (its constructor); the operations return the first
 * four and STORE_EUNCERTAIN (struct store_ops says which, when). The codes
 * are -201..-299, a range of their own (docs/architecture.md, "Errors and
 * memory", lists every module's), so that a code read in a log or a test's
 * output names its module. Compare codes by name, never by value.
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
    STORE_ENOPOOL = -201, /* pool not initialized */
    STORE_EINVAL = -202,  /* argument out of range (num_pages, rank) */
    STORE_ENOMEM = -203,
    STORE_EUNAVAILABLE = -204, /* the engine cannot accept changes now (its log failed,
                                  its server is unreachable...): nothing was acknowledged */
    /* Opening an engine. */
    STORE_EIO = -205,          /* the engine's files cannot be read or written */
    STORE_EFOREIGN = -206,     /* the engine's place holds data hf3fs-metad did not write */
    STORE_EDAMAGED = -207,     /* the stored state is damaged (the embedded log: see --salvage) */
    STORE_ELOCKED = -208,      /* another process holds the state */
    STORE_EUNREACHABLE = -209, /* the engine's server cannot be reached */
    STORE_EAUTH = -210,        /* the engine's server refused the credentials */
    STORE_ECONFIG = -211,      /* the engine's settings are invalid (e.g. a malformed address) */
    /* A change whose outcome is unknown: it may have taken effect but was not
     * made durable (its log failed meanwhile, or its reply was lost). It must
     * not be answered with a status that the stock clients resend. */
    STORE_EUNCERTAIN = -212,
    /* Opening an engine: its server lacks the extension it needs (Redis
     * without the hf3fs-metad module, or another version of it). */
    STORE_ENOMODULE = -213,
    /* import_pool: the pool exists already (nothing changed). */
    STORE_EEXIST = -214,
};

/* A sentence for the code, naming no engine. */
const char *store_strerror(int err);

typedef struct store store_t;

/*
 * A clock an engine may be given instead of its own (an option of the
 * engine's constructor): now_ms(ctx) is the time in milliseconds of every
 * lease and reservation deadline. The server gives store_server_clock
 * (util/clock.h hf_clock_server_ms: milliseconds since the Unix epoch, so
 * that deadlines keep their meaning across a restart, and never stepping
 * with the wall clock); tests and fuzzers give a fake clock that they
 * move, so that leases expire exactly when they say. Called under the
 * engine's locks: it must be cheap and take no lock of the engine.
 */
typedef struct store_clock {
    int64_t (*now_ms)(void *ctx);
    void *ctx;
} store_clock;

extern const store_clock store_server_clock;

/* ---- what an engine reports about itself: store_ops.metrics ---- */

typedef enum store_metric_type {
    STORE_METRIC_COUNTER,
    STORE_METRIC_GAUGE,
    STORE_METRIC_HISTOGRAM,
} store_metric_type;

/* A label of a sample. name: [a-zA-Z_][a-zA-Z0-9_]*; value: any bytes (the
 * writer escapes them). */
typedef struct store_label {
    const char *name;
    const char *value;
} store_label;

/* A non-negative decimal written exactly: units * 10^-decimals, so
 * {5003080, 6} is 5.003080 and {7, 0} is 7. decimals <= 9. */
typedef struct store_number {
    uint64_t units;
    unsigned decimals;
} store_number;

static inline store_number store_int(uint64_t value)
{
    return (store_number){value, 0};
}

/* One series of a histogram family. bounds[i] and sum are in units of
 * 10^-decimals (microseconds of a "_seconds" family: decimals 6). counts[i]
 * is the number of observations at most bounds[i] and above bounds[i-1]
 * (not cumulative: the writer sums them); counts[nbuckets-1] is those above
 * every bound. */
typedef struct store_histogram {
    size_t nbuckets;        /* >= 1 */
    const uint64_t *bounds; /* nbuckets - 1 ascending upper bounds */
    const uint64_t *counts; /* nbuckets counts */
    uint64_t sum;
    unsigned decimals;
} store_histogram;

/*
 * Where an engine writes its figures, for two views at once; the caller
 * (src/api/admin.c) sets the callbacks of the view it writes and leaves the
 * others NULL. An engine calls the store_emit_* helpers below (which skip a
 * NULL callback), never the callbacks directly, and writes both views in
 * the same call:
 *   /metrics    Prometheus families: store_emit_family(), then every sample
 *               of the family (store_emit_sample() or store_emit_histogram())
 *               before the next family. Names carry the product's prefix
 *               ("hf3fs_metad_") and Prometheus suffixes ("_total",
 *               "_seconds", "_bytes"); help is one line of plain text.
 *   /v1/stats   members of the "server" object, after the server's own:
 *               store_emit_object() ... store_emit_end() nest an object;
 *               store_emit_number/_bool/_string/_null() add a member.
 * Strings passed in are borrowed for the call only.
 */
typedef struct store_emitter {
    void *ctx;
    void (*family)(void *ctx, const char *name, store_metric_type type, const char *help);
    void (*sample)(void *ctx, const store_label *labels, size_t nlabels, store_number value);
    void (*histogram)(void *ctx, const store_label *labels, size_t nlabels,
                      const store_histogram *h);
    void (*object)(void *ctx, const char *key);
    void (*end)(void *ctx);
    void (*number)(void *ctx, const char *key, store_number value);
    void (*boolean)(void *ctx, const char *key, bool value);
    void (*string)(void *ctx, const char *key, const char *value, size_t len);
    void (*null)(void *ctx, const char *key);
} store_emitter;

void store_emit_family(const store_emitter *e, const char *name, store_metric_type type,
                       const char *help);
void store_emit_sample(const store_emitter *e, const store_label *labels, size_t nlabels,
                       store_number value);
void store_emit_histogram(const store_emitter *e, const store_label *labels, size_t nlabels,
                          const store_histogram *h);
/* A family of one unlabelled sample. */
void store_emit_metric(const store_emitter *e, const char *name, store_metric_type type,
                       const char *help, store_number value);
void store_emit_object(const store_emitter *e, const char *key);
void store_emit_end(const store_emitter *e);
void store_emit_number(const store_emitter *e, const char *key, store_number value);
void store_emit_bool(const store_emitter *e, const char *key, bool value);
void store_emit_string(const store_emitter *e, const char *key, const char *value, size_t len);
void store_emit_null(const store_emitter *e, const char *key);

/* ---- what a client meets now: store_ops.health ---- */

typedef enum store_mode {
    STORE_SERVING = 0,    /* reads and changes are served */
    STORE_READS_ONLY = 1, /* reads are served; some or every change fails (the
                             log failed, Redis refuses writes or has fewer
                             replicas than --redis-wait, a cluster's slots
                             without a primary: their reads fail too) */
    STORE_DOWN = 2,       /* nothing is served: every call is refused */
} store_mode;

/* The longest name of a store's node (store_ops.unreplicated), its NUL
 * included. */
#define STORE_NODE_NAME 128

/* "serving", "reads_only", "down": the words of /health and /metrics. */
const char *store_mode_name(store_mode mode);

/* ---- the operations ---- */

/* One pool's figures, handed to a stats visitor. Valid during the call only. */
typedef void (*store_stats_visitor)(void *ctx, hf_slice ns, uint32_t rank,
                                    const core_pool_stats *stats);

/*
 * The operations. What every member may assume and must do; an engine is
 * correct when the same call sequence gives the answers of the embedded
 * engine (the reference model, tests/unit/test_model.c, runs every engine).
 *
 * Every member may assume:
 *   - its arguments are valid for the call: s is the engine's own; ns and
 *     keys are byte strings of any content (NUL included), keys[0..n) and
 *     the output arrays hold n items (n may be 0; then nothing is read or
 *     written); rank < UINT32_MAX; the caller checked list sizes and key
 *     lengths against its own limits;
 *   - it may be called from any thread, concurrently with any member
 *     (destroy excepted: no other call runs or follows);
 *   - the output arrays are the caller's and may hold garbage on entry.
 * Every member must:
 *   - run as one atomic step: another caller sees all of it or none of it;
 *   - on success (STORE_OK) fill every output; on failure change nothing
 *     that a later call could see (STORE_EUNCERTAIN excepted, below) and
 *     leave the outputs undefined;
 *   - answer within a bounded time (the engine's timeouts): never block
 *     forever on a server that stopped answering;
 *   - return 0 or one of: STORE_ENOPOOL where a pool is named and does not
 *     exist; STORE_EINVAL (num_pages or rank beyond the configuration);
 *     STORE_ENOMEM; STORE_EUNAVAILABLE (refused: nothing was done, the
 *     call may be repeated as is); and, from a change only,
 *     STORE_EUNCERTAIN (the outcome is unknown: it may have taken effect).
 *     Nothing else: the API answers each of these with a status of its own
 *     and treats any other code as a bug.
 * "A change" below: init_pool, allocate, confirm, delete_keys, clear_pool,
 * clear_all. The reads (exists, lookup, complete_*) also record uses (the
 * recency order) and read leases, as the core does; they never answer
 * STORE_EUNCERTAIN (a read whose answer was lost is refused: repeating it
 * is harmless).
 */
struct store_ops {
    /* Create the pool (ns, rank) of num_pages pages, or keep the existing
     * one (idempotent: its state and size stay). *created says which (NULL:
     * not wanted); *existing_pages (NULL: not wanted) the size the pool has
     * after the call, so the caller can warn about a mismatch. A pool of 0
     * pages is valid (it never has a page to give). STORE_EINVAL: num_pages
     * above the configuration's max_pages or rank >= max_ranks. */
    int (*init_pool)(store_t *s, hf_slice ns, uint32_t rank, uint64_t num_pages, bool *created,
                     uint64_t *existing_pages);
    /* Reserve a page per key of the pool (core_allocate): pages[i] is the
     * key's page (its own if it already owns one: existed[i] true, may be
     * NULL) or -1 (none free and nothing evictable; under
     * CORE_ALLOC_ALL_OR_NOTHING every item is -1 if one would be).
     * Eviction and the demotion of evicted keys in the other ranks of ns
     * are part of the one step. STORE_ENOPOOL. */
    int (*allocate)(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n,
                    core_alloc_mode mode, int64_t *pages, bool *existed);
    /* Make the reservations (keys[i], pages[i]) owned and release the pages
     * release[0..nrel) (core_confirm); an item that does not hold (not
     * reserved by that key, expired, out of range) is refused and counted,
     * never an error. STORE_ENOPOOL. */
    int (*confirm)(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys,
                   const int64_t *pages, size_t n, const int64_t *release, size_t nrel);
    /* present[i]: whether the key owns a page of the pool (a use and a read
     * lease when it does). STORE_ENOPOOL. */
    int (*exists)(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n,
                  bool *present);
    /* pages[i]: the page the key owns in the pool, or -1 (a use and a read
     * lease when it owns one). STORE_ENOPOOL. */
    int (*lookup)(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n,
                  int64_t *pages);
    /* The keys leave the pool (their pages drain, then are free); the other
     * ranks of ns demote them. A key not there is no error. STORE_ENOPOOL. */
    int (*delete_keys)(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n);
    /* Every key leaves the pool; the pool stays, with its size.
     * STORE_ENOPOOL. */
    int (*clear_pool)(store_t *s, hf_slice ns, uint32_t rank);
    /* Forget every pool of every namespace (POST /clear). Over several
     * servers (shards), each is cleared in its own step: a call running
     * meanwhile may see some cleared and others not. */
    int (*clear_all)(store_t *s);
    /* present[i]: the key owns a page in every pool of ns (and ns has one
     * at least); then a use and a read lease in each. A namespace without
     * pools answers all false, not STORE_ENOPOOL. */
    int (*complete_exists)(store_t *s, hf_slice ns, const hf_slice *keys, size_t n, bool *present);
    /* pages[i]: the key's page in pool (ns, rank) if the key owns a page in
     * every pool of ns, else -1 (uses and leases as complete_exists).
     * STORE_ENOPOOL: (ns, rank) does not exist. */
    int (*complete_locations)(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys,
                              size_t n, int64_t *pages);
    /* Call fn once per pool with its figures, by namespace then rank (each
     * pool's figures a consistent snapshot; pools need not be taken at one
     * instant). fn must not call the engine. A failure may come after some
     * pools were visited: the caller then discards what it was given. */
    int (*stats)(store_t *s, store_stats_visitor fn, void *ctx);
    /* Verify the ownership invariant (core_check) over the whole state:
     * 0 if it holds; -1 with a description (NUL-terminated, at most errlen
     * bytes) in err if not; STORE_EUNAVAILABLE, with why in err, if the
     * engine could not look (then nothing is known). Slow: for tests and
     * GET /v1/check. */
    int (*check)(store_t *s, char *err, size_t errlen);
    /* Release everything (threads joined, connections closed, the log
     * flushed). No call runs meanwhile or afterwards. */
    void (*destroy)(store_t *s);
    /* Optional (NULL: always serving). What a client meets now
     * (store_mode): STORE_SERVING, or STORE_READS_ONLY / STORE_DOWN with why
     * in reason (a NUL-terminated sentence, e.g. "the log failed: No space
     * left on device"). Cheap and lock-free enough for a probe every
     * second; it may lag the truth by the engine's monitoring period. */
    store_mode (*health)(store_t *s, char *reason, size_t len);
    /* Optional (NULL: none). The store's nodes that hold changes with no
     * copy on another node (over Redis: primaries without a replica in
     * sync), as the engine last saw them: how many, and the first max of
     * their names ("host:port") into names. As cheap as health. */
    size_t (*unreplicated)(store_t *s, char (*names)[STORE_NODE_NAME], size_t max);
    /* Optional (NULL: the engine reports nothing of its own). The engine's
     * own figures (its log, its round trips...) through the emitter, for
     * /metrics and /v1/stats; called on every scrape, from any thread; it
     * must not wait on the engine's server. STORE_OK, or an error (then the
     * caller ignores what was written). */
    int (*metrics)(store_t *s, const store_emitter *e);
    /* Optional (NULL: store_strerror). The engine's own sentence for an
     * error one of its operations returned (e.g. what STORE_EUNAVAILABLE
     * means for it and what to do), or NULL for store_strerror's; a static
     * string. In the engine's words, not the protocol's: it says "refused"
     * or "outcome unknown", never an HTTP status, which is the API's
     * choice. */
    const char *(*describe)(store_t *s, int err);
    /* Optional (NULL: the engine cannot import). A change: create the pool
     * (ns, rank) of num_pages pages with keys[i] OWNED at pages[i] (i < n)
     * and every other page FREE, in one step (core_pool_import, core.h,
     * on the engine's core: keys oldest first, distinct, pages distinct and
     * < num_pages). STORE_EEXIST: the pool exists; STORE_EINVAL: beyond
     * the configuration or the lists are not as said (nothing changed
     * either way). For start-up (src/api/import.h), not a route. */
    int (*import_pool)(store_t *s, hf_slice ns, uint32_t rank, uint64_t num_pages,
                       const hf_slice *keys, const int64_t *pages, size_t n);
    /* Optional (NULL: nothing is recorded), with import_pool: what the
     * import at start recorded in the state it imported into (a line of
     * text naming the file's size and digest, src/api/import.h), so that a
     * later start with the same file knows it was imported. mark_get copies
     * it into out (NUL-terminated; cap > 0) and returns its length, 0 if
     * none, or a negative STORE_E* code; mark_set records text durably (a
     * change), STORE_OK or a STORE_E* code. /clear does not erase it: a
     * state without pools is imported into whatever the record says. */
    int (*import_mark_get)(store_t *s, char *out, size_t cap);
    int (*import_mark_set)(store_t *s, const char *text);
};

struct store {
    const struct store_ops *ops;
};

/* The engine's sentence for err (ops->describe, else store_strerror). */
const char *store_describe(store_t *s, int err);

#endif
