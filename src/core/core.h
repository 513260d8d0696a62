/*
 * core.h: the page state machine of docs/protocol.md (State, Leases, Allocation).
 *
 * Pure: no I/O, no clock reads, no locks. Every call that may expire a lease
 * takes `now` (milliseconds on the caller's clock; the server passes wall-clock
 * milliseconds so that deadlines survive restarts). The caller serializes
 * access to one core_t.
 *
 * Vocabulary
 *   pool      (namespace, rank): num_pages pages numbered 0..num_pages-1.
 *   page      FREE, RESERVED for a key until a deadline, OWNED by a key, or
 *             DRAINING: deleted or cleared while a read or write lease protected
 *             it, or released (for the release grace); it
 *             belongs to no key and becomes FREE when the lease ends. DRAINING
 *             is how "frees their pages (after any read lease)" is kept.
 *   key       any non-empty byte string. A key owns at most one page per pool
 *             and a page is owned by at most one key (the product's invariant,
 *             verified by core_check()). A key may hold several reservations.
 *
 * Recency (docs/protocol.md "recency order": a CLOCK with use counts)
 *   Every OWNED page has a use count, 0..CORE_USE_MAX. Confirming a new
 *   page sets it to CORE_USE_INSERT; a use (an allocation hit, a
 *   re-confirmation, exists, lookup, and a completeness read, which uses
 *   the key in every pool of the namespace) raises it by one, up to
 *   CORE_USE_MAX. A use writes only that count (and the read lease) in the
 *   page's own record: nothing is relinked. Each pool has a clock hand, a
 *   page number. Eviction in a pool takes, in this order:
 *     1. a DEMOTED page: one whose key lost its page in another rank of the
 *        namespace (evicted or deleted there) while this page had no
 *        lease, and that was not used since; the most recently demoted
 *        first;
 *     2. otherwise the clock: the hand looks at pages in increasing order
 *        (wrapping at num_pages); it takes the first OWNED page that is
 *        evictable and whose count is 0, and lowers the count of every
 *        other OWNED page it passes (evictable or not) by one; the hand
 *        stops just after the page taken. If one full turn meets no
 *        evictable page, nothing is taken (the counts of that turn stay
 *        lowered) and the allocation sweeps no more.
 *   Evictable means: OWNED, no read or write lease (deadline <= now), and
 *   not a hit of the same allocation. RESERVED and DRAINING pages are
 *   never taken. Every step depends only on the calls and their times, so
 *   a reference model follows it exactly (tests/unit/test_model.c), and
 *   the hand's moves are events (CORE_EV_SWEEP), so replay rebuilds the
 *   hand (not the counts: see below).
 *
 * What is durable (docs/protocol.md "What a read changes")
 *   Recency and read leases are volatile: use counts, demotion marks and
 *   read-lease deadlines live in this process only. A read (exists, lookup,
 *   a completeness read, an allocation hit, a re-confirmation) changes
 *   nothing else and reports no event, so a host that logs or replicates
 *   the events writes nothing for it. Everything a change does is an event:
 *   pool creation, reservations, ownership, frees, drains (with their
 *   deadlines, which may come from a read lease), write leases and their
 *   ends, the clock hand's moves, and (through those) the free order. A
 *   replayed or followed core therefore has the primary's durable state
 *   (core_walk_state describes exactly that) and its own recency: every
 *   page starts at CORE_USE_INSERT, lowered by the sweeps replayed, with
 *   no demotion and no read lease.
 *   A worker told where a key is reads that page for up to a read lease,
 *   so a host calls core_recovered() when a core it rebuilt (a restart, a
 *   load, a promoted replica) starts serving: until one read lease after
 *   that moment every OWNED page is treated as read-leased (never evicted
 *   or demoted; deleted or cleared, it drains until then).
 *
 * Memory: a pool costs O(1) to create whatever num_pages is; pages are backed
 * by storage only once handed out. Keys are stored once per namespace: one
 * record per (namespace, key) holds the key's page, use count and lease in
 * every pool (core_internal.h specifies the layout).
 *
 * Errors: functions returning int return 0 (or a count, where said) or a
 * negative CORE_E* code, in a range of the core's own (core_strerror says
 * what each means). Out of memory aborts the process (util/xalloc.h): a
 * half-applied change is worse.
 */
#ifndef HF_CORE_H
#define HF_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/reuse.h"
#include "util/hexkey.h"
#include "util/slice.h"

/* Largest num_pages a pool may have: page numbers must fit a uint32 with one
 * value kept as the "no page" sentinel. */
#define CORE_MAX_PAGES_LIMIT 4294967294ull
/* Ranks are below this whatever max_ranks says (--max-ranks accepts at most
 * this many). */
#define CORE_MAX_RANKS_LIMIT (1u << 24)

/* The use count of an OWNED page (see Recency above). */
#define CORE_USE_MAX 4
#define CORE_USE_INSERT 3

/* The core's error codes: -101..-199, apart from the other modules' codes
 * (store.h's STORE_E*, -201..-299). Their callers test them by name or by
 * sign only: no value is written to a log, a value or the wire. */
enum {
    CORE_OK = 0,
    CORE_EFIRST = -101,
    CORE_ENOPOOL = -101, /* the (namespace, rank) pool was not initialized */
    CORE_EINVAL = -102,  /* num_pages or rank out of range; an event that does not fit */
    CORE_EEXIST = -103,  /* core_pool_import: the pool exists already */
    CORE_ELAST = -199,
};

/* A sentence for a CORE_E* code (and for CORE_OK); never NULL. */
const char *core_strerror(int err);

typedef enum core_page_state {
    CORE_PAGE_FREE = 0,
    CORE_PAGE_RESERVED = 1,
    CORE_PAGE_OWNED = 2,
    CORE_PAGE_DRAINING = 3,
} core_page_state;

typedef struct core_config {
    int64_t reservation_ms;   /* reservation lease (docs/protocol.md: default 600 s) */
    int64_t read_lease_ms;    /* read lease (docs/protocol.md: default 5 s) */
    int64_t write_lease_ms;   /* bound of a write lease on a hit; 0: hits are not protected */
    int64_t release_grace_ms; /* a released page drains this long; 0: FREE at once */
    bool evict;               /* eviction: true = the CLOCK rule (see Recency), false = none */
    uint64_t max_pages;       /* largest num_pages accepted, <= CORE_MAX_PAGES_LIMIT */
    uint32_t max_ranks;       /* ranks are 0 .. max_ranks-1 */
    uint64_t hash_seed;       /* seeds the key hash (the caller picks it at random) */
} core_config;

/* Why a confirmation or release was refused. */
typedef enum core_refusal {
    CORE_REFUSE_OUT_OF_RANGE = 0, /* page >= num_pages or negative */
    CORE_REFUSE_NOT_RESERVED,     /* page FREE or DRAINING (late, expired, cleared) */
    CORE_REFUSE_OTHER_KEY,        /* page reserved for, or owned by, another key */
    CORE_REFUSE_OWNED,            /* release of an OWNED page */
    CORE_REFUSE_COUNT
} core_refusal;

/*
 * The figures of one pool, in the order of core_pool_stats, which is also
 * the order of an HF3FS.STATS row (src/module/module.c, read back by
 * src/store/redis/admin.c) and of a pool's members in GET /v1/stats: a change of
 * the list changes both. One X(field, view, family, type, help) each;
 * A(name, field, view, family, type, help) is a figure shown a second time
 * under another name (not a field of its own, not in HF3FS.STATS rows).
 * family, type (gauge or counter) and help are its Prometheus family in
 * GET /metrics, and view how /metrics shows it:
 *   STATE   a sample of hf3fs_metad_pool_pages{state="<field>"} (no family
 *           of its own: family, type and help are empty)
 *   FAMILY  a family of its own
 *   LEASE   a family of its own, after every FAMILY one: the write-lease
 *           families stand together
 */
#define CORE_POOL_FIGURES(X, A)                                                                    \
    X(num_pages, FAMILY, "hf3fs_metad_pool_num_pages", gauge, "Pages of the pool.")                \
    X(free, STATE, "", gauge, "")                                                                  \
    X(reserved, STATE, "", gauge, "")                                                              \
    X(owned, STATE, "", gauge, "")                                                                 \
    X(draining, STATE, "", gauge, "")                                                              \
    X(write_leased, LEASE, "hf3fs_metad_pool_write_leased_pages", gauge,                           \
      "Owned pages protected for writers: vLLM allocation hits being rewritten.")                  \
    A(keys, owned, FAMILY, "hf3fs_metad_pool_keys", gauge, "Keys owning a page in the pool.")      \
    X(touched, FAMILY, "hf3fs_metad_pool_touched_pages", gauge,                                    \
      "Pages ever handed out (high-water mark).")                                                  \
    X(hits, FAMILY, "hf3fs_metad_pool_hits_total", counter,                                        \
      "Keys found by allocate, exists or lookup.")                                                 \
    X(misses, FAMILY, "hf3fs_metad_pool_misses_total", counter,                                    \
      "Keys not found by allocate, exists or lookup.")                                             \
    X(reservations, FAMILY, "hf3fs_metad_pool_reservations_total", counter,                        \
      "Pages reserved for a key.")                                                                 \
    X(confirmations, FAMILY, "hf3fs_metad_pool_confirmations_total", counter,                      \
      "Reservations confirmed.")                                                                   \
    X(releases, FAMILY, "hf3fs_metad_pool_releases_total", counter, "Reservations released.")      \
    X(evictions, FAMILY, "hf3fs_metad_pool_evictions_total", counter,                              \
      "Owned keys evicted to make room.")                                                          \
    X(expired_reservations, FAMILY, "hf3fs_metad_pool_expired_reservations_total", counter,        \
      "Reservations whose lease ran out.")                                                         \
    X(duplicate_confirmations, FAMILY, "hf3fs_metad_pool_duplicate_confirmations_total", counter,  \
      "Confirmed reservations freed because the key already owned another page.")                  \
    X(write_leases, LEASE, "hf3fs_metad_pool_write_leases_total", counter,                         \
      "Write leases given to allocation hits (one per writer).")                                   \
    X(write_leases_ended, LEASE, "hf3fs_metad_pool_write_leases_ended_total", counter,             \
      "Write leases ended by the confirmation of their last writer.")                              \
    X(write_leases_expired, LEASE, "hf3fs_metad_pool_write_leases_expired_total", counter,         \
      "Write leases that ran out before their writers confirmed (writers crashed or gave up).")

/* The refusals of one pool, a count per core_refusal each, in the same
 * places and after the figures: X(field, name, family, help), name its
 * member in /v1/stats, family a counter labelled by reason. */
#define CORE_POOL_REFUSALS(X)                                                                      \
    X(refused_confirms, refused_confirmations, "hf3fs_metad_pool_refused_confirmations_total",     \
      "Confirmations refused, by reason.")                                                         \
    X(refused_releases, refused_releases, "hf3fs_metad_pool_refused_releases_total",               \
      "Releases refused, by reason.")

/* For the expansions that leave the second names (A) out. */
#define CORE_POOL_NO_ALIAS(...)
#define CORE_POOL_PLUS_ONE(...) +1 // NOLINT(bugprone-macro-parentheses): a term of a sum
/* How many fields CORE_POOL_FIGURES lists. */
enum { CORE_POOL_FIGURE_COUNT = 0 CORE_POOL_FIGURES(CORE_POOL_PLUS_ONE, CORE_POOL_NO_ALIAS) };

/* Counters and gauges of one pool, as reported by stats and metrics: the
 * figures above (free, reserved, owned, draining: pages per state; owned ==
 * keys; write_leased: OWNED pages under a live write lease; touched: pages
 * ever handed out; hits, misses: allocate/exists/lookup outcomes), the
 * refusals, then the namespace's figures. */
typedef struct core_pool_stats {
#define CORE_POOL_FIELD(field, ...) uint64_t field;
    CORE_POOL_FIGURES(CORE_POOL_FIELD, CORE_POOL_NO_ALIAS)
#undef CORE_POOL_FIELD
#define CORE_POOL_REFUSAL_FIELD(field, ...) uint64_t field[CORE_REFUSE_COUNT];
    CORE_POOL_REFUSALS(CORE_POOL_REFUSAL_FIELD)
#undef CORE_POOL_REFUSAL_FIELD
    /* The namespace's figures, volatile (reuse.h), in the stats of its
     * first pool (the lowest rank) and 0 in the others: the completeness
     * reads counted by core_prefix_count, and the estimator's sampled block
     * uses (est_blocks) with, per scale, those in their request's leading
     * run of hits (est_hits; ratio = est_hits / est_blocks). est_coarse:
     * est_hits holds the coarse curve's scales only (reuse.h: a Redis node
     * whose module lacks the capability "fine-curve"), the others 0. */
    uint64_t prefix_requests, prefix_blocks, prefix_hits;
    uint64_t est_blocks, est_hits[REUSE_SCALES];
    bool est_coarse;
} core_pool_stats;

typedef struct core core_t;
typedef struct core_pool core_pool_t;

/* The protocol's leases (docs/protocol.md: reservations 600 s, read leases
 * 5 s) and the CLOCK rule, no write lease and no release grace, with the
 * given limits and hash seed: the configuration the tests and the Redis
 * module start from. */
core_config core_config_default(uint64_t max_pages, uint32_t max_ranks, uint64_t hash_seed);

/* Never NULL: out of memory aborts (util/xalloc.h). The config is copied;
 * max_pages 0 or above CORE_MAX_PAGES_LIMIT means CORE_MAX_PAGES_LIMIT. */
core_t *core_new(const core_config *config);
void core_free(core_t *core);
const core_config *core_get_config(const core_t *core);
/* Replace the configuration (leases, eviction, limits) for later calls; the
 * hash seed stays the core's own. For a host whose callers each bring their
 * settings (the Redis module: every command carries its front end's). */
void core_set_config(core_t *core, const core_config *config);

/*
 * Create the pool (ns, rank) with num_pages pages, or keep the existing one.
 * Idempotent: an existing pool keeps its state and size; *existing_pages (if
 * not NULL) receives its size so the caller can warn about a mismatch.
 * Returns 1 if created, 0 if it existed, CORE_EINVAL if num_pages is above
 * max_pages or rank >= max_ranks (during replay, core_apply, only above
 * CORE_MAX_PAGES_LIMIT and CORE_MAX_RANKS_LIMIT: the log holds pools that
 * earlier limits accepted). A pool of 0 pages (the SGLang dialect allows it)
 * exists but never has a page to give.
 */
int core_pool_init(core_t *core, hf_slice ns, uint32_t rank, uint64_t num_pages,
                   uint64_t *existing_pages);

/* The pool, or NULL. Valid until core_clear_all() or core_free(). */
core_pool_t *core_pool_find(core_t *core, hf_slice ns, uint32_t rank);

/* Forget every pool of every namespace (vLLM /clear). */
void core_clear_all(core_t *core);

/* Free every page of the pool; read-leased owned pages drain first. The pool
 * stays initialized. Counters are kept. */
void core_pool_clear(core_pool_t *pool, int64_t now);

/* Return expired reservations and drained pages of the pool to FREE. Every
 * operation below does this first; exposed for housekeeping and tests. */
void core_pool_expire(core_pool_t *pool, int64_t now);

typedef enum core_alloc_mode {
    CORE_ALLOC_PARTIAL = 0,    /* SGLang: each key gets what is available */
    CORE_ALLOC_ALL_OR_NOTHING, /* vLLM: all new keys get a page, or none does */
} core_alloc_mode;

/*
 * Allocate pages for keys[0..n-1] (docs/protocol.md "Allocation and eviction").
 * pages[i] receives the page or -1; existed[i] (may be NULL) whether key i
 * was OWNED (a hit). A key repeated within the call gets one answer. Keys
 * that are hits of the call are never evicted to make room for other keys of
 * the same call.
 *
 * Write protection (docs/protocol.md "Leases"): vLLM's connector rewrites
 * every page that batch_allocate answers, hits included, and then confirms
 * them all; SGLang's never rewrites a hit, and vLLM's writes nothing when
 * any page is -1. So in ALL_OR_NOTHING mode, when every new key got a page,
 * each hit gets a write lease: one more writer, and the page is protected
 * (never evicted, drained if deleted) until write_lease_ms from now. The
 * confirmation of (key, page) by one of its writers ends that writer's part;
 * when the last one confirmed, the protection falls back to at most a read
 * lease from now (never shorter than a read lease still running).
 */
void core_allocate(core_pool_t *pool, const hf_slice *keys, size_t n, core_alloc_mode mode,
                   int64_t now, int64_t *pages, bool *existed);

/*
 * Confirm (keys[i], pages[i]) for i < n, then release release[0..nrel-1].
 * A released page drains for release_grace_ms before it is FREE again, so
 * that a replayed release (the stock clients retry a POST whose answer they
 * did not get) cannot free a page that another writer was given meanwhile.
 * Refused items change nothing and are counted in the pool's stats;
 * *refused (may be NULL) receives how many confirmations and releases were
 * refused in this call.
 */
void core_confirm(core_pool_t *pool, const hf_slice *keys, const int64_t *pages, size_t n,
                  const int64_t *release, size_t nrel, int64_t now, size_t *refused);

/*
 * Undo core_allocate's answer (keys, pages, existed as it gave them, in its
 * ALL_OR_NOTHING mode) when no client saw it: a front end that split one
 * request over several cores (stripes) and could not give every key a page
 * on all of them. Each page still reserved by its key is FREE at once (no
 * release grace: no client knows it), pushed back so that the next
 * allocation takes it first; each hit still OWNED by its key loses the
 * write lease the allocation gave (as a confirmation ends it). Pages that
 * changed meanwhile are left alone, and so are the keys the allocation
 * evicted to make room (evicted is evicted). Counters are not rolled back.
 */
void core_cancel(core_pool_t *pool, const hf_slice *keys, const int64_t *pages, const bool *existed,
                 size_t n, int64_t now);

/* Per-pool presence (SGLang exists); present keys get a read lease and a use
 * (volatile: no event). */
void core_exists(core_pool_t *pool, const hf_slice *keys, size_t n, int64_t now, bool *present);

/* Per-pool lookup (SGLang get_page_indices): page or -1; leases like exists. */
void core_lookup(core_pool_t *pool, const hf_slice *keys, size_t n, int64_t now, int64_t *pages);

/* Delete keys from the pool; their pages become FREE, or DRAINING while read-leased. */
void core_delete(core_pool_t *pool, const hf_slice *keys, size_t n, int64_t now);

/*
 * Completeness (vLLM): a key is complete when every pool of namespace ns owns
 * it (no pool: nothing is complete). Complete keys get a read lease and a use
 * in every pool of ns.
 * core_complete_exists: present[i] for each key.
 * core_complete_locations: pages[i] = the page in pool `rank` if complete, else -1.
 * Returns CORE_ENOPOOL if that pool does not exist (locations only).
 */
void core_complete_exists(core_t *core, hf_slice ns, const hf_slice *keys, size_t n, int64_t now,
                          bool *present);
int core_complete_locations(core_t *core, hf_slice ns, uint32_t rank, const hf_slice *keys,
                            size_t n, int64_t now, int64_t *pages);

/*
 * The prefix-hit figures of a namespace (reuse.h; volatile like recency:
 * no event, nothing logged or replicated). core_complete_exists, and
 * core_exists on the namespace's first pool (the lowest rank: the other
 * ranks of an SGLang deployment ask for the same keys), feed each call's
 * keys to the namespace's estimator; the estimators of at most
 * CORE_REUSE_NS namespaces per core exist (the first to be read), so a
 * core's estimators hold at most 32 x 197,256 bytes = 6.0 MiB.
 * core_prefix_count counts one read of a whole request (its keys' answers)
 * in the namespace's prefix counters: the caller that holds the whole
 * request calls it (a core that sees a part of it, a stripe, does not).
 * Nothing if ns has no pool.
 */
/* A build may set it to 0, a server without estimators, to measure what
 * they cost (docs/performance.md). */
#ifndef CORE_REUSE_NS
#define CORE_REUSE_NS 32
#endif
void core_prefix_count(core_t *core, hf_slice ns, const bool *present, size_t n);

/* Pools, for stats: calls fn for each pool in (namespace, rank) order of creation. */
typedef void (*core_pool_visitor)(void *ctx, hf_slice ns, uint32_t rank,
                                  const core_pool_stats *stats);
/* `now` decides which write leases are still live. */
void core_foreach_pool(const core_t *core, int64_t now, core_pool_visitor fn, void *ctx);
void core_pool_get_stats(const core_pool_t *pool, int64_t now, core_pool_stats *out);

/* The state of one page; for tests, the invariant checker and snapshots.
 * key (may be NULL) receives the owning or reserving key (empty for FREE and
 * DRAINING pages); it points into the page record or into keybuf, and is
 * valid until the next change of the pool. deadline (may be NULL) receives
 * the reservation deadline, the read-lease end (0 if never leased) or the
 * drain end. */
#define CORE_KEY_TEXT_MAX HF_HEXKEY_TEXT_MAX /* keybuf's size: the longest packed key */
core_page_state core_page_get(const core_pool_t *pool, uint64_t page, hf_slice *key,
                              char keybuf[CORE_KEY_TEXT_MAX], int64_t *deadline);

/*
 * Events: how the state changes, for the write-ahead log.
 *
 * With an observer set, every state change is reported as it happens, in
 * order, under the caller's serialization. Replaying the same events with
 * core_apply() on an empty core (then core_apply_finish()) rebuilds the
 * same durable state: pools, pages, keys, clock hands, reservations, write
 * leases and drains (recency is volatile: "What is durable" above).
 * Pointers in an event are valid during the observer call only.
 */
typedef enum core_event_type {
    CORE_EV_POOL_INIT = 1, /* pool created with `page` = num_pages pages */
    CORE_EV_CLEAR_ALL,     /* every pool forgotten (no per-page events follow) */
    CORE_EV_RESERVE,       /* FREE page -> RESERVED for `key` until `deadline` */
    CORE_EV_OWN,           /* RESERVED page -> OWNED by its key, use count CORE_USE_INSERT */
    CORE_EV_FREE,          /* RESERVED, OWNED or DRAINING page -> FREE */
    CORE_EV_DRAIN,         /* OWNED or FREE page -> DRAINING until `deadline` */
    CORE_EV_USE,           /* never produced (recency is volatile); in logs and values of
                            * earlier versions: an OWNED page was used. core_apply checks
                            * the page is OWNED and ignores it */
    CORE_EV_DEMOTE,        /* never produced, as CORE_EV_USE: a demotion */
    CORE_EV_WRITE_LEASE,   /* OWNED page: one more writer, protected until `deadline` */
    CORE_EV_WRITE_DONE,    /* OWNED page: one writer is done (it confirmed, or the lease's
                            * end passed: one event per writer left); with the last
                            * one the write lease ends; protected until `deadline` */
    CORE_EV_SWEEP,         /* the pool's clock hand moves to `page` (< num_pages) after
                            * `deadline` full turns: every OWNED page it passed lost one
                            * from its use count per pass (those in [old hand, page),
                            * cyclically, once more than the others). Logs written
                            * before recency by use counts have none. */
} core_event_type;

typedef struct core_event {
    core_event_type type;
    hf_slice ns; /* pool namespace (empty for CLEAR_ALL) */
    uint32_t rank;
    uint64_t page;    /* page number, or num_pages for POOL_INIT */
    hf_slice key;     /* RESERVE only */
    int64_t deadline; /* RESERVE, DRAIN, USE, WRITE_LEASE, WRITE_DONE; SWEEP: full turns */
} core_event;

typedef void (*core_observer_fn)(void *ctx, const core_event *ev);

/* Report every later change to fn (NULL: stop reporting). */
void core_set_observer(core_t *core, core_observer_fn fn, void *ctx);

/*
 * Replay one event. Returns 0, or CORE_EINVAL if the event does not fit the
 * state (unknown pool, page out of range or in the wrong state, a key that
 * would own two pages): the log it came from is damaged. Call
 * core_apply_finish() once after the last event, before any operation.
 */
int core_apply(core_t *core, const core_event *ev);
void core_apply_finish(core_t *core);

/*
 * The core was rebuilt (core_apply, core_apply_live or a load) and starts
 * serving at `now`: until now + read_lease_ms (of the configuration in
 * force at each later call) every OWNED page, including pages owned in
 * that time, is read-leased ("What is durable" above); nothing if no page
 * is OWNED. core_clear_all() ends it.
 * First, every deadline further from `now` than its own lease length (of
 * the configuration in force now) is cut to that length from now: a
 * reservation to reservation_ms, a write lease and an OWNED page's
 * protection to write_lease_ms and max(read_lease_ms, write_lease_ms), a
 * drain to the longest of the three leases. Deadlines written on a clock
 * that was ahead of this one (a step back while the host was down, a
 * failover) thus pin no page for longer than a lease. Changes no event:
 * a host that replays the same log clamps again.
 */
void core_recovered(core_t *core, int64_t now);

/*
 * Apply one event to a live core, as a replica follows its primary: no
 * core_apply_finish() is needed, and the free stack follows the events
 * (FREE pushes; a RESERVE or a DRAIN of a FREE page takes it off), so a
 * replica whose free stack started as its primary's hands out the pages
 * the primary would have. Returns as core_apply().
 */
int core_apply_live(core_t *core, const core_event *ev);

/* The free stack of a pool, bottom first (the top is handed out next):
 * core_walk_state does not carry it, so a host that must rebuild a core
 * that hands out exactly the same pages (a replica) saves it beside the
 * events. Valid until the next change of the pool. */
size_t core_pool_free_order(const core_pool_t *pool, const uint32_t **pages);
/* After core_apply_finish(): put the free stack in that order. The events
 * of core_walk_state do not carry the high-water mark (a replay raises it
 * only to its highest page that is not FREE), so pages of the order at or
 * above the pool's mark raise the mark to cover them. CORE_EINVAL (nothing
 * changed) unless pages[] is exactly the pool's FREE pages below that
 * mark. */
int core_pool_set_free_order(core_pool_t *pool, const uint32_t *pages, size_t n);

/*
 * Create the pool (ns, rank) of num_pages pages with keys[i] OWNED at
 * pages[i] (i < n) and every other page FREE, through the core's own calls
 * (core_pool_init, core_allocate, core_confirm), so that the observer sees
 * the usual events (POOL_INIT, RESERVE, OWN) for a log or a replica: an
 * imported state (SGLang's, src/api/import.h), one pool per call, for the
 * engines that hold a core (the embedded engine, the Redis module's
 * HF3FS.IMPORT). keys are in recency order, oldest first: distinct and
 * non-empty, and the pages distinct and below num_pages, or the call is
 * refused. Recency: every imported page starts at CORE_USE_INSERT, and the
 * newer half of the keys gets one use more (a lookup: CORE_USE_INSERT + 1,
 * and a read lease), so that the clock evicts the older half first: the
 * two levels the core's use counts allow above a fresh confirmation
 * (docs/eviction.md). The pool's free stack afterwards: the free pages
 * below the highest imported page in increasing order (the next handed out
 * is the highest of them), then the pages above it; a replica following
 * the events holds the same stack. Returns 0, CORE_EEXIST (the pool
 * exists), or CORE_EINVAL (num_pages or rank above the core's limits, or
 * the lists are not as said); nothing changed on a refusal.
 */
int core_pool_import(core_t *core, hf_slice ns, uint32_t rank, uint64_t num_pages,
                     const hf_slice *keys, const int64_t *pages, size_t n, int64_t now);

/* Whether a page (a key) appears twice in pages[0..n) (keys[0..n)), which
 * core_pool_import refuses: then *first and *second are two indexes of it,
 * for a reader that names them. order (n items, scratch) ends as the
 * indexes sorted by page (by key). */
bool core_repeated_page(const int64_t *pages, size_t n, size_t *order, size_t *first,
                        size_t *second);
bool core_repeated_key(const hf_slice *keys, size_t n, size_t *order, size_t *first,
                       size_t *second);

/* Bytes held by the core (records, indexes, stacks, key copies), for
 * MEMORY USAGE; O(pages handed out). */
size_t core_memory_usage(const core_t *core);

/*
 * Report the whole durable state to fn as the events that rebuild it (for
 * snapshots): per pool POOL_INIT, a SWEEP that puts the clock hand in
 * place (if it is not at page 0), then reservations, then owned pages
 * (RESERVE + OWN), then a WRITE_LEASE per writer of each write lease,
 * then draining pages (DRAIN of a FREE page, which only replay accepts).
 * Recency (use counts, demotions, read leases) is not reported.
 */
void core_walk_state(const core_t *core, core_observer_fn fn, void *ctx);

/*
 * Walk every pool and verify the invariants: every page in exactly one state,
 * state counts agree, a key owns at most one page and a page is owned by at
 * most one key, the key index, the reservation, draining and free lists
 * and the demoted stack agree with the page records, use counts are in
 * range and no page is left pinned. Returns 0, or -1 with a description in
 * err (if errlen > 0). Cost O(pages handed out); for tests.
 */
int core_check(const core_t *core, char *err, size_t errlen);

#endif
