/*
 * core_internal.h: the data layout, and what the core's files share.
 *
 * The files of src/core, each opening with what it holds and its rules:
 *   core.c    the public operations (pools, allocate, confirm, cancel,
 *             exists, lookup, delete, completeness reads, stats)
 *   index.c   keys (encoding, hashing), key records, the key index
 *   pages.c   pages: side table, lists, free stack, write leases, the
 *             page state transitions and the events they emit
 *   evict.c   the eviction rule: demotion, the clock hand and its sweep,
 *             victim choice (the use side of the rule, what a read does to
 *             a use count, is inline below: "Recency")
 *   replay.c  events in: core_apply / core_apply_live; events out:
 *             core_walk_state; the free order
 *   check.c   the invariant checker (core_check)
 *   reuse.c   the hit-ratio estimator (reuse.h)
 * Internal functions are core__*; helpers every file needs on a hot path
 * are static inline here, so that the cut into files costs no call.
 * Invariants are HF_ASSERTs (util/hf_assert.h: checked in the ASan build)
 * where they must hold, and _Static_asserts on the layout below.
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
 *   so 48 bytes at TP 1, 64 at TP 2, 144 at TP 8. A key of the shape
 *   `<32 or 64 lowercase hex><suffix of 1..16 bytes>` (util/hexkey.h;
 *   SGLang's `<hash>-k`, `-v`, `_<pool>`) takes no copy either: a 32-hex
 *   key's 16 packed bytes and its suffix fill the 32 bytes, the length in
 *   the kind (CORE_KEY_HEX32S); a 64-hex key's 32 packed bytes fill them,
 *   and its suffix is interned by the namespace (core_sfx), its number in
 *   the kind (CORE_KEY_HEX64S): the record has no byte to spare at TP 1. The hash is not kept: it
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
 * (ref) + the index (8 bytes per key at 1M keys) / TP; measured in
 * docs/performance.md, "Memory".
 */
#ifndef HF_CORE_INTERNAL_H
#define HF_CORE_INTERNAL_H

#include <string.h>

#include "core/core.h"
#include "util/hexkey.h"
#include "util/hf_assert.h"
#include "util/xalloc.h"

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
/* 32 lowercase hex characters packed in bytes 0..15, then a suffix of
 * s = kind - CORE_KEY_HEX32S + 1 bytes (1..HF_HEXKEY_SUFFIX_MAX) inline */
#define CORE_KEY_HEX32S 35
/* 64 lowercase hex characters packed in 32 bytes, then the namespace's
 * interned suffix number kind - CORE_KEY_HEX64S (core_sfx) */
#define CORE_KEY_HEX64S (CORE_KEY_HEX32S + HF_HEXKEY_SUFFIX_MAX)
#define CORE_SFX_MAX (256 - CORE_KEY_HEX64S) /* suffixes a namespace interns */
#define CORE_SFX_SLOTS 512                   /* its lookup table, at most half full */

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

/* A namespace's interned suffixes (index.c "Suffixes"): append-only while
 * the namespace lives, at most CORE_SFX_MAX; made at the first. */
typedef struct core_sfx {
    uint32_t n;
    uint8_t slots[CORE_SFX_SLOTS]; /* number + 1, or 0: open addressing on sfx_hash */
    uint8_t len[CORE_SFX_MAX];
    char bytes[CORE_SFX_MAX][HF_HEXKEY_SUFFIX_MAX]; /* zero-padded */
} core_sfx;

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
    uint32_t rec_top;   /* ids below this were handed out */
    uint32_t rec_free;  /* free list of record ids */
    uint64_t nrecs;     /* live records */
    uint64_t pages_sum; /* sum of the pools' num_pages: bounds the live records */

    uint32_t *slots; /* key index: tag | record id, or CORE_NIL */
    size_t slot_mask;
    uint32_t id_mask; /* the id bits of a slot; the rest is the tag */
    uint8_t id_bits;
    uint8_t home_bits;
    size_t nkeys;

    core_sfx *sfx; /* interned suffixes of CORE_KEY_HEX64S keys; NULL until one */

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
    return ns->rchunks[id >> CORE_REC_CHUNK_SHIFT] +
           (size_t)(id & (CORE_REC_CHUNK - 1)) * ns->rec_size;
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
 * and index.c's index_remove. */
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

/* ------------------------------------------------- layout, checked */

/* Record layout for `ncols` columns (see "Key records" above). */
#define CORE_REC_OFF_PAGES(ncols) ((CORE_REC_BITS + (uint32_t)(ncols) + 3) & ~3u)
#define CORE_REC_OFF_DEADLINES(ncols)                                                              \
    ((CORE_REC_OFF_PAGES(ncols) + 4 * (uint32_t)(ncols) + 7) & ~7u)
#define CORE_REC_SIZE(ncols)                                                                       \
    (((size_t)CORE_REC_OFF_DEADLINES(ncols) + 8 * (size_t)(ncols) + 7) & ~(size_t)7)

_Static_assert(sizeof(core_keyst) == 32 && CORE_REC_KIND == sizeof(core_keyst) &&
                   CORE_REC_BITS == CORE_REC_KIND + 1,
               "a record starts with the 32 bytes of its key, then its kind, then the bits");
_Static_assert(CORE_REC_SIZE(1) == 48 && CORE_REC_SIZE(2) == 64 && CORE_REC_SIZE(8) == 144,
               "the record sizes stated above (and the memory figures built on them)");
_Static_assert(CORE_KEY_EXT <= UINT8_MAX && CORE_KEY_HEX64 > 32 &&
                   CORE_KEY_HEX32S == CORE_KEY_EXT + 1 && HF_HEXKEY_SUFFIX_MAX == 16 &&
                   CORE_KEY_HEX64S + CORE_SFX_MAX - 1 == UINT8_MAX && CORE_SFX_MAX < 256,
               "key kinds fit a byte, apart from the inline lengths 1..32; a 32-hex key's "
               "16 packed bytes and its suffix fit the 32 bytes of key; a suffix number + 1 "
               "fits a lookup slot");
_Static_assert(CORE_SFX_SLOTS >= CORE_SFX_MAX * 2 && (CORE_SFX_SLOTS & (CORE_SFX_SLOTS - 1)) == 0,
               "the suffix table stays at most half full, a power of two");
_Static_assert(CORE_USE_INSERT <= CORE_USE_MAX &&
                   CORE_USE_MAX <= (CORE_REC_USE >> CORE_REC_USE_SHIFT),
               "use counts fit their bits");
_Static_assert(CORE_USE_MAX == 4 && CORE_REC_USE_SHIFT == 4,
               "core__complete_use adds one to counts below 4 by testing bit 6");
_Static_assert((CORE_REC_DEMOTED & CORE_REC_PINNED) == 0 &&
                   ((CORE_REC_DEMOTED | CORE_REC_PINNED) & CORE_REC_USE) == 0,
               "a column's flags and use count do not overlap");
_Static_assert(CORE_MAX_RECS < CORE_REF_SIDE && CORE_MAX_RECS < CORE_NIL,
               "a page's ref tells a record id from a side entry and from FREE");
_Static_assert(CORE_MAX_PAGES_LIMIT == (uint64_t)CORE_NIL - 1,
               "page numbers fit a uint32 with CORE_NIL kept as the sentinel");
_Static_assert(CORE_PAGE_FREE == 0 && CORE_PAGE_DRAINING == 3,
               "page states are 0..3 (a side entry's state byte, check.c's counts)");
_Static_assert(sizeof(core_wlease) == 16, "a write lease entry is 16 bytes");

/* ------------------------------------------------------------- records */

static inline uint8_t *core__rec_kind(uint8_t *rec)
{
    return rec + CORE_REC_KIND;
}

static inline uint8_t *core__rec_bits(uint8_t *rec)
{
    return rec + CORE_REC_BITS;
}

/* The column bits, page and deadline of an OWNED page of `pool`. */
static inline uint8_t *core__col_bits(const core_pool_t *pool, uint32_t id)
{
    return core__rec_bits(core__krec(pool->ns, id)) + pool->col;
}

static inline int64_t *core__col_deadline(const core_pool_t *pool, uint32_t id)
{
    return core__krec_deadlines(pool->ns, core__krec(pool->ns, id)) + pool->col;
}

static inline uint32_t core__page_owner(const core_pool_t *pool, uint32_t page)
{
    return *core__ref(pool, page);
}

static inline uint8_t *core__page_bits(const core_pool_t *pool, uint32_t page)
{
    return core__col_bits(pool, core__page_owner(pool, page));
}

static inline int64_t *core__page_deadline(const core_pool_t *pool, uint32_t page)
{
    return core__col_deadline(pool, core__page_owner(pool, page));
}

static inline bool core__page_is_owned(const core_pool_t *pool, uint32_t page)
{
    return core__ref_owned(*core__ref(pool, page));
}

/* The side entry of a RESERVED or DRAINING page. */
static inline uint32_t core__page_side(const core_pool_t *pool, uint32_t page)
{
    HF_ASSERT(!core__page_is_owned(pool, page) && *core__ref(pool, page) != CORE_NIL);
    return *core__ref(pool, page) & ~CORE_REF_SIDE;
}

/* A key into storage (a side entry's or a record's); an external key is copied. */
static inline void core__keyst_set(core_keyst *st, uint8_t *kind, const core_key *key)
{
    HF_ASSERT(key->kind != CORE_KEY_NONE);
    *kind = key->kind;
    if (key->kind == CORE_KEY_EXT) {
        memset(st->bytes, 0, sizeof st->bytes);
        st->ext.ptr = hf_xmalloc(key->len);
        memcpy(st->ext.ptr, key->ext, key->len);
        st->ext.len = key->len;
    } else {
        memcpy(st->bytes, key->bytes, 32);
    }
}

static inline void core__keyst_drop(core_keyst *st, uint8_t *kind)
{
    if (*kind == CORE_KEY_EXT)
        hf_xfree(st->ext.ptr);
    *kind = CORE_KEY_NONE;
    memset(st->bytes, 0, sizeof st->bytes);
}

/* ------------------------------------------------------------ prefetch */

/*
 * Batches look many keys up at once, and each lookup waits on cache misses:
 * its slot, then its record. Asking for the slots of a block of keys, then
 * for their records, before doing the work lets those misses overlap
 * instead of queueing. Only a hint: nothing is changed.
 */
#define CORE_PREFETCH_BLOCK 16

static inline __attribute__((always_inline)) void core__prefetch_bytes(const void *p, size_t len,
                                                                       int rw)
{
    const char *c = (const char *)p;
    for (size_t off = 0; off < len; off += 64) {
        if (rw)
            __builtin_prefetch(c + off, 1);
        else
            __builtin_prefetch(c + off);
    }
    if (rw)
        __builtin_prefetch(c + len - 1, 1);
    else
        __builtin_prefetch(c + len - 1);
}

/* always_inline: as a function of its own it has no effect that GCC can see
 * (it only reads memory and returns nothing), so GCC deletes every call. */
static inline __attribute__((always_inline)) void
core__index_prefetch(const core_ns *ns, const core_key *keys, size_t n)
{
    if (n > CORE_PREFETCH_BLOCK)
        n = CORE_PREFETCH_BLOCK; /* a hint: never more than a block */
    if (!ns->slots)
        return;
    size_t home[CORE_PREFETCH_BLOCK];
    for (size_t j = 0; j < n; j++) {
        home[j] = core__home(ns, keys[j].hash);
        __builtin_prefetch(&ns->slots[home[j]]);
    }
    for (size_t j = 0; j < n; j++) {
        uint32_t slot = ns->slots[home[j]];
        if (slot != CORE_NIL && (slot & ~ns->id_mask) == (keys[j].hash & ~ns->id_mask))
            core__prefetch_bytes(core__krec(ns, slot & ns->id_mask), ns->rec_size, 1);
    }
}

/* ------------------------------------------------------ index.c: keys,
 * records, the key index */

/* A key's canonical form in namespace ns, for a lookup: it interns
 * nothing (a suffix not interned is an external key, as it would have
 * been stored). _stored: for a key that may be stored (an allocation, a
 * replayed reservation), whose suffix ns interns if it can. */
void core__key_encode(const core_ns *ns, const core_t *core, hf_slice raw, core_key *out);
void core__key_encode_stored(core_ns *ns, const core_t *core, hf_slice raw, core_key *out);
/* Is the stored key in its canonical form (the form its text encodes to)? */
bool core__keyst_canonical(const core_ns *ns, const core_t *core, const core_keyst *st,
                           uint8_t kind);
/* The key of record storage (hash recomputed). */
void core__keyst_to_key(const core_ns *ns, const core_t *core, const core_keyst *st, uint8_t kind,
                        core_key *out);
int core__keyst_eq(const core_keyst *st, uint8_t kind, const core_key *key);
uint32_t core__index_find(const core_ns *ns, const core_key *key);
hf_slice core__keyst_text(const core_ns *ns, const core_keyst *st, uint8_t kind,
                          char buf[CORE_KEY_TEXT_MAX]);
/* Is kind a kind a key of ns may have (interned suffixes included)? */
bool core__kind_valid(const core_ns *ns, uint8_t kind);
/* A namespace without pools, added to the core. */
core_ns *core__ns_new(core_t *core, hf_slice name);
/* A pool joins the namespace: every record gets a column for it. */
void core__ns_add_pool(core_ns *ns, const core_t *core, core_pool_t *pool);
/* Free the namespace: its records, index and estimator (not its pools). */
void core__ns_free(core_ns *ns);
/* A new record for the key whose hash is `hash`, indexed, taking the key
 * from *st (left without one, kind CORE_KEY_NONE); owns nothing yet. */
uint32_t core__rec_new(core_ns *ns, const core_t *core, uint32_t hash, core_keyst *st,
                       uint8_t *kind);
/* The record no longer owns anything in any pool: free it. */
void core__rec_release_if_empty(core_ns *ns, const core_t *core, uint32_t id);

/* ------------------------------------------------------ pages.c: pages,
 * their side tables, write leases, transitions and events */

core_pool_t *core__pool_new(core_t *core, core_ns *ns, uint32_t rank, uint64_t num_pages);
void core__pool_release(core_pool_t *pool);
void core__emit_key(core_pool_t *pool, core_event_type type, uint64_t page, int64_t deadline,
                    hf_slice key);
void core__ensure_chunk(core_pool_t *pool, uint32_t page);
void core__free_stack_push(core_pool_t *pool, uint32_t page);
void core__free_stack_remove(core_pool_t *pool, uint32_t page);
/* A RESERVED or DRAINING page leaves its list and its side entry (its ref
 * still names the entry: the caller gives the page its new state). */
void core__side_drop(core_pool_t *pool, uint32_t page);
/* The transitions (pages.c says what each requires). */
void core__page_free(core_pool_t *pool, uint32_t page);
void core__page_reserve(core_pool_t *pool, uint32_t page, const core_key *key, int64_t deadline);
void core__page_own(core_pool_t *pool, uint32_t page, uint32_t id, const core_key *key);
void core__page_drain(core_pool_t *pool, uint32_t page, int64_t deadline);
uint32_t core__owned_leave(core_pool_t *pool, uint32_t page, int64_t *deadline);
uint32_t core__page_disown(core_pool_t *pool, uint32_t page, int64_t now);
void core__page_unreserve(core_pool_t *pool, uint32_t page);
void core__page_release(core_pool_t *pool, uint32_t page, int64_t now);
/* Write leases. */
core_wlease *core__wlease_find(const core_pool_t *pool, uint32_t page);
void core__wlease_remove(core_pool_t *pool, core_wlease *e);
void core__wlease_add(core_pool_t *pool, uint32_t page, int64_t end);
void core__page_write_lease(core_pool_t *pool, uint32_t page, int64_t now);
void core__page_write_done(core_pool_t *pool, uint32_t page, int64_t now);

/* Report a change (no event while replaying, or without an observer). */
static inline void core__emit(core_pool_t *pool, core_event_type type, uint64_t page,
                              int64_t deadline)
{
    if (pool->core->observer && !pool->core->replaying)
        core__emit_key(pool, type, page, deadline, (hf_slice){"", 0});
}

static inline uint64_t core__pool_free_count(const core_pool_t *pool)
{
    return pool->nfree + (pool->num_pages - pool->touched);
}

/* The pool's pages add up: every page is FREE (on the stack or above the
 * mark), RESERVED, OWNED or DRAINING, and the side entries are exactly the
 * RESERVED and DRAINING pages. Holds between operations. */
static inline bool core__pool_counts_agree(const core_pool_t *pool)
{
    return pool->touched <= pool->num_pages && pool->nfree <= pool->touched &&
           pool->reserved.len + pool->draining.len == pool->side_live &&
           core__pool_free_count(pool) + pool->reserved.len + pool->draining.len + pool->nowned ==
               pool->num_pages &&
           pool->ndemoted <= pool->nowned;
}

/* Take a FREE page without eviction (the free stack's top, else the mark's
 * page), or CORE_NIL. */
static inline uint32_t core__take_free_page(core_pool_t *pool)
{
    if (pool->nfree > 0) {
        uint32_t page = pool->free_stack[--pool->nfree];
        HF_ASSERT(page < pool->touched && *core__ref(pool, page) == CORE_NIL);
        return page;
    }
    if (pool->touched >= pool->num_pages)
        return CORE_NIL;
    uint32_t page = (uint32_t)pool->touched++;
    core__ensure_chunk(pool, page);
    *core__ref(pool, page) = CORE_NIL;
    return page;
}

/* The end of the lease every OWNED page has after core_recovered() (the
 * read lease of the configuration in force), or INT64_MIN. */
static inline int64_t core__lease_floor(const core_t *core)
{
    return core->recovered ? core->recovered_at + core->config.read_lease_ms : INT64_MIN;
}

/* Is every OWNED page read-leased at `now` (core_recovered)? Then nothing
 * is evicted or demoted. */
static inline bool core__all_owned_leased(const core_t *core, int64_t now)
{
    return now < core__lease_floor(core);
}

/* ------------------------------------------------------------- recency
 *
 * The use side of core.h "Recency": what a read does to a page's use count
 * and demotion mark. Inline: every read runs it for every key. The rest of
 * the rule (demotion, the clock, victim choice) is evict.c's. */

/* The page is no longer demoted (its stack entry, if any, goes stale). */
static inline void core__bits_undemote(core_pool_t *pool, uint8_t *bits)
{
    if (*bits & CORE_REC_DEMOTED) {
        HF_ASSERT(pool->ndemoted > 0);
        *bits &= (uint8_t)~CORE_REC_DEMOTED;
        pool->ndemoted--;
    }
}

/* A use: one more to the use count, up to CORE_USE_MAX, and no longer
 * demoted. Only the key's record is written. */
static inline void core__bits_touch(core_pool_t *pool, uint8_t *bits)
{
    unsigned use = core__bits_use(*bits);
    HF_ASSERT(use <= CORE_USE_MAX);
    if (use < CORE_USE_MAX)
        *bits = core__bits_set_use(*bits, use + 1);
    core__bits_undemote(pool, bits);
}

/* A use of an OWNED page. Volatile (core.h "What is durable"): no event. */
static inline void core__page_touch(core_pool_t *pool, uint32_t page)
{
    HF_ASSERT(page < pool->touched && core__page_is_owned(pool, page));
    core__bits_touch(pool, core__col_bits(pool, core__page_owner(pool, page)));
}

/* A complete key's use in every column: the read lease, one more to the
 * use count, no longer demoted (volatile: no event). */
static inline void core__complete_use(core_ns *ns, uint8_t *rec, int64_t until)
{
    uint32_t ncols = ns->ncols;
    int64_t *deadlines = core__krec_deadlines(ns, rec);
    uint8_t *bits = core__rec_bits(rec);
    /* the columns' bits 8 at a time: a byte's bit 6 (count 4) moves to
     * bit 4 within the byte, and no byte carries into the next (a count
     * that takes one is at most 3, so the sum stays in bits 4-6) */
    uint32_t wide = ncols & ~7u;
    uint64_t anyw = 0;
    for (uint32_t c = 0; c < wide; c += 8) {
        uint64_t w;
        memcpy(&w, bits + c, 8);
        anyw |= w;
    }
    uint8_t any = 0;
    for (uint32_t c = wide; c < ncols; c++)
        any |= bits[c];
    uint64_t demoted_w = 0x0101010101010101ull * CORE_REC_DEMOTED;
    if (!(any & CORE_REC_DEMOTED) && !(anyw & demoted_w)) {
        /* the common case, without a branch per column: a count below
         * CORE_USE_MAX (4) has bit 6 clear, and then takes one more */
        for (uint32_t c = 0; c < ncols; c++) {
            int64_t d = deadlines[c];
            deadlines[c] = d > until ? d : until;
        }
        for (uint32_t c = 0; c < wide; c += 8) {
            uint64_t w;
            memcpy(&w, bits + c, 8);
            w += (~w >> 2) & 0x1010101010101010ull;
            memcpy(bits + c, &w, 8);
        }
        for (uint32_t c = wide; c < ncols; c++)
            bits[c] = (uint8_t)(bits[c] + ((~bits[c] >> 2) & 0x10));
        return;
    }
    for (uint32_t c = 0; c < ncols; c++) {
        if (until > deadlines[c])
            deadlines[c] = until;
        core__bits_touch(ns->by_col[c], &bits[c]);
    }
}

/* ------------------------------------------- evict.c: the eviction rule */

/* One allocation's eviction: after a full turn of the clock that found
 * nothing, the allocation sweeps no more. */
typedef struct core_evict_scan {
    bool exhausted;
} core_evict_scan;

/* A victim for a page wanted by the running allocation, already FREE
 * (the event reported) and counted; CORE_NIL if none may be taken. */
uint32_t core__evict(core_pool_t *pool, core_evict_scan *scan, int64_t now);
/* Can `need` new pages be had (free or evictable) without taking any? */
bool core__can_take(core_pool_t *pool, uint64_t need, int64_t now);
/* The key of record `id` lost its page in `pool`: demote its other ranks. */
void core__demote_in_other_ranks(core_pool_t *pool, uint32_t id, int64_t now);
/* Replay of CORE_EV_SWEEP: the hand moved to `to` after `turns` full turns. */
void core__sweep_apply(core_pool_t *pool, uint32_t to, int64_t turns);

#endif
