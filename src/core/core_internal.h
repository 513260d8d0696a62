/*
 * core_internal.h: the data layout shared by core.c and check.c.
 *
 * Page records
 *   A pool hands pages out from a high-water mark: pages >= `touched` have
 *   never been used and are FREE without any record, so creating a pool of
 *   10^9 pages costs one struct. Pages below the mark have a 54-byte record,
 *   kept in chunks of CORE_CHUNK_PAGES (no realloc copies, no 2x slack).
 *   FREE pages below the mark sit on `free_stack` (LIFO, so recently used
 *   records are reused first and the mark grows only when needed).
 *
 * Keys
 *   The key of a RESERVED or OWNED page lives in its record: up to 32 bytes
 *   inline; 64 lowercase hex characters (a SHA-256 hex digest, the common
 *   case) packed into 32 bytes inline; anything else in a malloc'd copy.
 *
 * Key index
 *   Open addressing with linear probing over uint32 slots, backward-shift
 *   deletion, load <= 3/4. Only OWNED pages are indexed: reservations are
 *   found by page number. A slot holds a page number in its low `page_bits`
 *   bits (the fewest that hold num_pages - 1 and are never all ones, so no
 *   slot equals CORE_NIL) and, in the bits above, the same bits of the key's
 *   hash: a tag. A probe reads the page record (a cache miss) only when the
 *   tag matches, so a search that fails, or passes other keys, mostly stays
 *   in the slot array. A pool of 1M pages has 12 tag bits; one of 2^32 - 2
 *   pages has none (every probe then reads its record, as without tags).
 *   The low half of the tag (at most 8 bits) doubles as the low bits of the
 *   key's home slot (core__home), so deletion can tell where an entry's
 *   probe started without reading its record.
 *
 * Lists (doubly linked through the records' prev/next page numbers)
 *   reserved  RESERVED pages, sorted by deadline (head expires first).
 *   draining  DRAINING pages, sorted by deadline.
 *   A RESERVED or DRAINING page is on the list of its state; FREE pages are
 *   on the free stack (or above the mark); OWNED pages are on no list.
 *
 * Recency (core.h "Recency"): no list. The record's `bits` byte holds the
 *   page state (low 2 bits), the use count (CORE_USE_MAX at most, bits
 *   4-6), DEMOTED (the key lost another rank: evicted first) and PINNED (a
 *   hit of the allocation running now; never set between calls). A use
 *   writes that byte, in the record that the lookup read anyway: no other
 *   record is touched. The pool keeps the clock hand (a page number) and
 *   a stack of demoted pages (most recently demoted on top; an entry whose
 *   page is no longer DEMOTED is stale and dropped when reached, so a use
 *   never has to find the entry to undo a demotion).
 *
 * Write leases (docs/protocol.md "Leases")
 *   Pages under a write lease are few (those being rewritten right now), so
 *   they live in a small per-pool table, not in the 54-byte record: open
 *   addressing on the page number, linear probing, backward-shift deletion,
 *   load <= 1/2. An entry holds how many writers were answered the page and
 *   not yet confirmed, and when the lease ends. The lease's protection
 *   itself is in the record: its deadline is at least the lease's end, so
 *   eviction, demotion and draining see one deadline, as for read leases.
 *   Every entry names an OWNED page; an entry whose end passed is dropped by
 *   the next core_pool_expire (wlease_min is a lower bound of the ends).
 */
#ifndef HF_CORE_INTERNAL_H
#define HF_CORE_INTERNAL_H

#include "core/core.h"

#define CORE_NIL UINT32_MAX
#define CORE_CHUNK_SHIFT 12
#define CORE_CHUNK_PAGES (1u << CORE_CHUNK_SHIFT)

/* key_kind values: 1..32 = raw bytes inline (the value is the length). */
#define CORE_KEY_NONE 0
#define CORE_KEY_HEX64 33 /* 64 lowercase hex characters packed in 32 bytes */
#define CORE_KEY_EXT 34   /* malloc'd copy */

/* The record's `bits`. */
#define CORE_REC_STATE 0x03u   /* core_page_state */
#define CORE_REC_DEMOTED 0x04u /* OWNED, and its key lost a page in another rank */
#define CORE_REC_PINNED 0x08u  /* OWNED, a hit of the allocation in progress */
#define CORE_REC_USE_SHIFT 4
#define CORE_REC_USE (0x7u << CORE_REC_USE_SHIFT) /* OWNED: use count, 0..CORE_USE_MAX */

/* Packed: 54 bytes instead of 56 with padding, which is what brings an owned
 * entry (record + index slots) under 64 bytes at 1M entries. Records are
 * read through their fields only (never through a pointer to a field), so
 * the compiler handles the unaligned ones; x86 does so at no measured cost. */
typedef struct __attribute__((packed)) core_page_rec {
    union {
        uint8_t bytes[32];
        struct {
            char *ptr;
            uint32_t len;
        } ext;
    } key;
    uint32_t hash;
    uint32_t prev, next; /* reserved or draining list */
    uint8_t bits;     /* core_page_state | use count | DEMOTED | PINNED (CORE_REC_*) */
    uint8_t key_kind; /* CORE_KEY_* */
    int64_t deadline; /* reservation end, read-lease end, or drain end */
} core_page_rec;

typedef struct core_wlease {
    uint32_t page;    /* CORE_NIL: empty slot */
    uint32_t writers; /* answered the page as a hit, not confirmed yet */
    int64_t end;      /* the lease ends then, whatever writers says */
} core_wlease;

typedef struct core_list {
    uint32_t head, tail;
    uint64_t len;
} core_list;

struct core_ns;

struct core_pool {
    core_t *core;
    struct core_ns *ns;
    uint32_t rank;
    uint64_t num_pages;
    uint64_t touched; /* high-water mark */

    core_page_rec **chunks;
    size_t nchunks;
    size_t chunks_cap;

    uint32_t *free_stack;
    size_t nfree;
    size_t free_cap;

    uint32_t *slots; /* key index: tag | page number, or CORE_NIL */
    size_t slot_mask;
    uint32_t page_mask; /* the page-number bits of a slot; the rest is the tag */
    uint8_t page_bits;  /* popcount(page_mask) */
    uint8_t home_bits;  /* low bits of a key's home slot that its tag carries (core__home) */
    size_t nkeys;

    core_list reserved, draining;
    uint64_t nowned;   /* OWNED pages (== nkeys) */
    uint32_t hand;     /* the clock hand: next page the sweep looks at, < num_pages */
    uint32_t *demoted; /* stack of demoted pages, may hold stale entries */
    size_t ndemoted_stack, demoted_cap;
    uint64_t ndemoted; /* pages with CORE_REC_DEMOTED */

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
} core_ns;

struct core {
    core_config config;
    core_observer_fn observer;
    void *observer_ctx;
    bool replaying;
    bool live_apply; /* core_apply_live: the free stack follows each event */
    core_ns **namespaces;
    size_t nns;
};

/* A key prepared for lookups: canonical bytes plus hash. */
typedef struct core_key {
    uint8_t kind;
    uint8_t bytes[32];
    const char *ext;
    uint32_t len;
    uint32_t hash;
} core_key;

static inline core_page_state core__rec_state(const core_page_rec *rec)
{
    return (core_page_state)(rec->bits & CORE_REC_STATE);
}

static inline unsigned core__rec_use(const core_page_rec *rec)
{
    return (rec->bits & CORE_REC_USE) >> CORE_REC_USE_SHIFT;
}

static inline void core__rec_set_use(core_page_rec *rec, unsigned use)
{
    rec->bits = (uint8_t)((rec->bits & ~CORE_REC_USE) | (use << CORE_REC_USE_SHIFT));
}

/* The page of a slot that is not CORE_NIL. */
static inline uint32_t core__slot_page(const core_pool_t *pool, uint32_t slot)
{
    return slot & pool->page_mask;
}

/*
 * The home slot of a key (where its probe starts). A slot holds the page
 * number in its low page_bits and, above them, the same bits of the key's
 * hash (the tag). The home is built so that its low home_bits are the low
 * home_bits of the tag: a slot then tells the low bits of its key's home
 * without reading the page record, which is what index_remove's backward
 * shift needs for every entry after the hole (one cache miss each before).
 * The home's other bits are hash bits outside the tag, so the rest of the
 * tag (tag bits above home_bits) stays independent of the home and keeps
 * filtering probes of keys with the same home. home_bits is 0 for pools so
 * large that the tag is too short to share (then the home is hash & mask).
 */
static inline size_t core__home(const core_pool_t *pool, uint32_t hash)
{
    if (pool->home_bits == 0)
        return hash & pool->slot_mask;
    size_t low = (hash >> pool->page_bits) & ((1u << pool->home_bits) - 1);
    return (((size_t)(hash & pool->page_mask) << pool->home_bits) | low) & pool->slot_mask;
}

/* The low home_bits of the home of the key in `slot` (not CORE_NIL). */
static inline size_t core__slot_home_low(const core_pool_t *pool, uint32_t slot)
{
    return (slot >> pool->page_bits) & ((1u << pool->home_bits) - 1);
}

/* The slot of `page` for a key with this hash. */
static inline uint32_t core__slot_make(const core_pool_t *pool, uint32_t page, uint32_t hash)
{
    return page | (hash & ~pool->page_mask);
}

static inline core_page_rec *core__rec(const core_pool_t *pool, uint32_t page)
{
    return &pool->chunks[page >> CORE_CHUNK_SHIFT][page & (CORE_CHUNK_PAGES - 1)];
}

void core__key_encode(const core_t *core, hf_slice raw, core_key *out);
uint32_t core__index_find(const core_pool_t *pool, const core_key *key);
int core__rec_key_eq(const core_page_rec *rec, const core_key *key);
void core__rec_to_key(const core_t *core, const core_page_rec *rec, core_key *out);
hf_slice core__rec_key_text(const core_page_rec *rec, char buf[64]);

#endif
