/*
 * core_internal.h: the data layout shared by core.c and check.c.
 *
 * Key-major: one record per (namespace, key) holds every rank's page of the
 * key, so a completeness read (core_complete_exists / _locations) is one
 * index probe and one record whatever the TP size. Pools (ranks) keep only
 * what is per page.
 *
 * Key records (per namespace)
 *   A namespace has `ncols` columns, one per pool, in rank order (column c
 *   is the pool of the c-th smallest rank; pool->col). A record is
 *   rec_size bytes, a multiple of 8, laid out as
 *       [0, 32)          the key: up to 32 bytes inline (zero-padded); 64
 *                        lowercase hex characters (a SHA-256 hex digest, the
 *                        common case) packed into 32 bytes; anything else a
 *                        pointer to a malloc'd copy and its length
 *       32               key kind (CORE_KEY_*; CORE_KEY_NONE: a free record)
 *       33 + c           column c's bits: use count (bits 4-6), DEMOTED,
 *                        PINNED (CORE_REC_*); 0 when the column owns nothing
 *       off_pages + 4c   column c's page (uint32), CORE_NIL if none
 *       off_deadlines+8c column c's deadline (int64): read-lease end (0 if
 *                        never leased), or write protection; 0 if no page
 *   so 48 bytes at TP 1, 64 at TP 2, 144 at TP 8. The hash is not kept: it
 *   is recomputed from the key when the index needs it (growth, deletion,
 *   a pool added). A record lives while its key owns a page in at least one
 *   pool; its id (< CORE_MAX_RECS) is stable while it lives. Records sit in
 *   chunks of CORE_REC_CHUNK; free ones form a list through their column-0
 *   page field (rec_free). Adding a pool to a namespace rebuilds every
 *   record with one more column (ids unchanged; rare: pools are created
 *   once and only core_clear_all removes them).
 *
 * Key index (per namespace)
 *   Open addressing with linear probing over uint32 slots, backward-shift
 *   deletion, load <= 3/4, over record ids. A slot holds a record id in its
 *   low `id_bits` bits (the fewest that hold every id the namespace can
 *   need, i.e. the sum of its pools' num_pages, and are never all ones, so no
 *   slot equals CORE_NIL) and the same bits of the key's hash above them: a
 *   tag, so a probe reads a record only when the tag matches. The low half of
 *   the tag (at most 8 bits) doubles as the low bits of the key's home slot
 *   (core__home), so deletion can tell where an entry's probe started without
 *   reading its record. Every live record is indexed, once.
 *
 * Pages (per pool)
 *   A pool hands pages out from a high-water mark: pages >= `touched` have
 *   never been used and are FREE without any storage, so creating a pool of
 *   10^9 pages costs one struct. Below the mark each page has a 32-bit ref,
 *   in chunks of CORE_CHUNK_PAGES:
 *       CORE_NIL                 FREE (and on free_stack, LIFO)
 *       CORE_REF_SIDE | s        RESERVED or DRAINING: side entry s
 *       id (< CORE_MAX_RECS)     OWNED by the key of record id, whose column
 *                                pool->col names this page
 *   The ownership invariant is the agreement of the two directions: a
 *   record's column holds at most one page (a key owns at most one page per
 *   pool), a page's ref names at most one record (a page has one owner), and
 *   each names the other.
 *
 * Side entries (per pool): RESERVED and DRAINING pages
 *   Few at a time, so kept apart from the owned layout: an array of
 *   core_side with a free list; a RESERVED entry holds its key (a key may
 *   hold several reservations) and its deadline, a DRAINING one its drain
 *   end. The lists, doubly linked through prev/next side ids:
 *     reserved  RESERVED pages, sorted by deadline (head expires first).
 *     draining  DRAINING pages, sorted by deadline.
 *
 * Recency (core.h "Recency"): no list. A column's bits hold the use count
 *   (CORE_USE_MAX at most), DEMOTED (the key lost another rank: evicted
 *   first) and PINNED (a hit of the allocation running now; never set
 *   between calls). A use writes those bits and the deadline in the record
 *   the lookup read anyway. The pool keeps the clock hand (a page number) and
 *   a stack of demoted pages (most recently demoted on top; an entry whose
 *   page is no longer DEMOTED is stale and dropped when reached).
 *
 * Write leases (docs/protocol.md "Leases")
 *   A small per-pool table: open addressing on the page number, linear
 *   probing, backward-shift deletion, load <= 1/2. An entry holds how many
 *   writers were answered the page and not yet confirmed, and when the lease
 *   ends. The protection itself is the column's deadline (at least the
 *   lease's end), so eviction, demotion and draining see one deadline, as
 *   for read leases. Every entry names an OWNED page; an entry whose end
 *   passed is dropped by the next core_pool_expire (wlease_min is a lower
 *   bound of the ends).
 *
 * Memory per owned (key, rank), 64-hex keys, 1M keys: rec_size / TP + 4
 * (ref) + the index (8 bytes per key at 1M keys) / TP: ~60 at TP 1, ~23 at
 * TP 8.
 */
#ifndef HF_CORE_INTERNAL_H
#define HF_CORE_INTERNAL_H

#include "core/core.h"

#define CORE_NIL UINT32_MAX
#define CORE_CHUNK_SHIFT 12
#define CORE_CHUNK_PAGES (1u << CORE_CHUNK_SHIFT)
#define CORE_REC_CHUNK_SHIFT 12
#define CORE_REC_CHUNK (1u << CORE_REC_CHUNK_SHIFT)
#define CORE_REF_SIDE 0x80000000u
#define CORE_MAX_RECS 0x7fffffffu /* record ids are below this (and below id_mask) */

/* key kinds: 1..32 = raw bytes inline (the value is the length). */
#define CORE_KEY_NONE 0
#define CORE_KEY_HEX64 33 /* 64 lowercase hex characters packed in 32 bytes */
#define CORE_KEY_EXT 34   /* malloc'd copy */

/* A column's bits. */
#define CORE_REC_DEMOTED 0x04u /* its key lost a page in another rank */
#define CORE_REC_PINNED 0x08u  /* a hit of the allocation in progress */
#define CORE_REC_USE_SHIFT 4
#define CORE_REC_USE (0x7u << CORE_REC_USE_SHIFT) /* use count, 0..CORE_USE_MAX */

#define CORE_REC_KIND 32
#define CORE_REC_BITS 33

typedef union core_keyst {
    uint8_t bytes[32];
    struct {
        char *ptr;
        uint32_t len;
    } ext;
} core_keyst;

typedef struct core_side {
    core_keyst key;   /* RESERVED only */
    int64_t deadline; /* reservation end or drain end */
    uint32_t page;
    uint32_t prev, next; /* list links (side ids); next: free list link */
    uint8_t state;       /* CORE_PAGE_RESERVED or _DRAINING; FREE: unused entry */
    uint8_t key_kind;
} core_side;

typedef struct core_wlease {
    uint32_t page;    /* CORE_NIL: empty slot */
    uint32_t writers; /* answered the page as a hit, not confirmed yet */
    int64_t end;      /* the lease ends then, whatever writers says */
} core_wlease;

typedef struct core_list {
    uint32_t head, tail; /* side ids */
    uint64_t len;
} core_list;

struct core_ns;

struct core_pool {
    core_t *core;
    struct core_ns *ns;
    uint32_t rank;
    uint32_t col; /* this pool's column in the namespace's records */
    uint64_t num_pages;
    uint64_t touched; /* high-water mark */

    uint32_t **refs; /* per page below the mark (see above), in chunks */
    size_t nchunks;
    size_t chunks_cap;

    uint32_t *free_stack;
    size_t nfree;
    size_t free_cap;

    core_side *side; /* RESERVED and DRAINING pages */
    size_t side_top, side_cap, side_live;
    uint32_t side_free;

    core_list reserved, draining;
    uint64_t nowned;   /* OWNED pages */
    uint32_t hand;     /* the clock hand: next page the sweep looks at, < num_pages */
    uint32_t *demoted; /* stack of demoted pages, may hold stale entries */
    size_t ndemoted_stack, demoted_cap;
    uint64_t ndemoted; /* pages whose column is DEMOTED */

    core_wlease *wleases; /* write leases (see above); NULL until the first */
    size_t wlease_mask;
    size_t nwleases;
    int64_t wlease_min;

    core_pool_stats counters; /* the counter fields only; gauges are computed */
};

typedef struct core_ns {
    char *name;
    size_t name_len;
    core_pool_t **by_rank; /* index = rank */
    uint32_t ranks_cap;
    uint32_t npools;

    uint32_t ncols;       /* == npools */
    core_pool_t **by_col; /* column -> pool, in rank order */
    size_t rec_size;
    uint32_t off_pages, off_deadlines;
    uint8_t **rchunks;
    size_t nrchunks, rchunks_cap;
    uint32_t rec_top;  /* ids below this were handed out */
    uint32_t rec_free; /* free list of record ids */
    uint64_t nrecs;    /* live records */
    uint64_t pages_sum; /* sum of the pools' num_pages: bounds the live records */

    uint32_t *slots; /* key index: tag | record id, or CORE_NIL */
    size_t slot_mask;
    uint32_t id_mask; /* the id bits of a slot; the rest is the tag */
    uint8_t id_bits;
    uint8_t home_bits;
    size_t nkeys;

    reuse_t *reuse;      /* volatile (core.h core_prefix_count); NULL until read */
    reuse_prefix prefix; /* volatile */
} core_ns;

struct core {
    core_config config;
    core_observer_fn observer;
    void *observer_ctx;
    bool replaying;
    bool live_apply; /* core_apply_live: the free stack follows each event */
    bool recovered;  /* core_recovered() was called, at recovered_at */
    int64_t recovered_at;
    core_ns **namespaces;
    size_t nns;
    uint32_t nreuse; /* namespaces with an estimator (<= CORE_REUSE_NS) */
};

/* A key prepared for lookups: canonical bytes plus hash. */
typedef struct core_key {
    uint8_t kind;
    uint8_t bytes[32];
    const char *ext;
    uint32_t len;
    uint32_t hash;
} core_key;

static inline uint8_t *core__krec(const core_ns *ns, uint32_t id)
{
    return ns->rchunks[id >> CORE_REC_CHUNK_SHIFT] + (size_t)(id & (CORE_REC_CHUNK - 1)) * ns->rec_size;
}

static inline core_keyst *core__krec_key(uint8_t *rec)
{
    return (core_keyst *)(void *)rec;
}

static inline uint32_t *core__krec_pages(const core_ns *ns, uint8_t *rec)
{
    return (uint32_t *)(void *)(rec + ns->off_pages);
}

static inline int64_t *core__krec_deadlines(const core_ns *ns, uint8_t *rec)
{
    return (int64_t *)(void *)(rec + ns->off_deadlines);
}

static inline unsigned core__bits_use(uint8_t bits)
{
    return (bits & CORE_REC_USE) >> CORE_REC_USE_SHIFT;
}

static inline uint8_t core__bits_set_use(uint8_t bits, unsigned use)
{
    return (uint8_t)((bits & ~CORE_REC_USE) | (use << CORE_REC_USE_SHIFT));
}

static inline uint32_t *core__ref(const core_pool_t *pool, uint32_t page)
{
    return &pool->refs[page >> CORE_CHUNK_SHIFT][page & (CORE_CHUNK_PAGES - 1)];
}

static inline bool core__ref_owned(uint32_t ref)
{
    return !(ref & CORE_REF_SIDE);
}

/* The state of a page below the mark. */
static inline core_page_state core__page_state(const core_pool_t *pool, uint32_t page)
{
    uint32_t ref = *core__ref(pool, page);
    if (ref == CORE_NIL)
        return CORE_PAGE_FREE;
    if (ref & CORE_REF_SIDE)
        return (core_page_state)pool->side[ref & ~CORE_REF_SIDE].state;
    return CORE_PAGE_OWNED;
}

/* The home slot of a key (where its probe starts); see the header comment
 * and core.c's index. */
static inline size_t core__home(const core_ns *ns, uint32_t hash)
{
    if (ns->home_bits == 0)
        return hash & ns->slot_mask;
    size_t low = (hash >> ns->id_bits) & ((1u << ns->home_bits) - 1);
    return (((size_t)(hash & ns->id_mask) << ns->home_bits) | low) & ns->slot_mask;
}

static inline size_t core__slot_home_low(const core_ns *ns, uint32_t slot)
{
    return (slot >> ns->id_bits) & ((1u << ns->home_bits) - 1);
}

static inline uint32_t core__slot_make(const core_ns *ns, uint32_t id, uint32_t hash)
{
    return id | (hash & ~ns->id_mask);
}

void core__key_encode(const core_t *core, hf_slice raw, core_key *out);
/* The key of record storage (hash recomputed). */
void core__keyst_to_key(const core_t *core, const core_keyst *st, uint8_t kind, core_key *out);
int core__keyst_eq(const core_keyst *st, uint8_t kind, const core_key *key);
uint32_t core__index_find(const core_ns *ns, const core_key *key);
hf_slice core__keyst_text(const core_keyst *st, uint8_t kind, char buf[64]);

#endif
