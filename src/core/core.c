/*
 * core.c: the public operations of core.h: the core and its pools, and the
 * calls on them (allocate, confirm and release, cancel, exists, lookup,
 * delete, the completeness reads, stats).
 *
 * Rules
 *   - An operation expires its pool's leases first (core_pool_expire), then
 *     encodes its keys once (index.c) and changes pages only through the
 *     transitions of pages.c, which emit the events; it takes pages to
 *     give through evict.c when none is FREE, and uses keys through the
 *     inline recency of core_internal.h. Nothing here reads a clock or
 *     does I/O: `now` comes with each call.
 *   - A key repeated within a call gets one answer (find_repeats).
 *   - Between operations every pool's counts agree (core__pool_counts_agree,
 *     asserted) and core_check() holds.
 */
#include "core/core_internal.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "util/xalloc.h"

/* ------------------------------------------------------ pools and core */

core_config core_config_default(uint64_t max_pages, uint32_t max_ranks, uint64_t hash_seed)
{
    return (core_config){.reservation_ms = 600000,
                         .read_lease_ms = 5000,
                         .evict = true,
                         .max_pages = max_pages,
                         .max_ranks = max_ranks,
                         .hash_seed = hash_seed};
}

core_t *core_new(const core_config *config)
{
    core_t *core = hf_xcalloc(1, sizeof *core);
    core->config = *config;
    if (core->config.max_pages == 0 || core->config.max_pages > CORE_MAX_PAGES_LIMIT)
        core->config.max_pages = CORE_MAX_PAGES_LIMIT;
    return core;
}

void core_set_config(core_t *core, const core_config *config)
{
    uint64_t seed = core->config.hash_seed;
    core->config = *config;
    core->config.hash_seed = seed;
    if (core->config.max_pages == 0 || core->config.max_pages > CORE_MAX_PAGES_LIMIT)
        core->config.max_pages = CORE_MAX_PAGES_LIMIT;
}

const core_config *core_get_config(const core_t *core)
{
    return &core->config;
}

const char *core_strerror(int err)
{
    switch (err) {
    case CORE_OK: return "no error";
    case CORE_ENOPOOL: return "the pool was not initialized";
    case CORE_EINVAL: return "out of range, or an event that does not fit the state";
    case CORE_EEXIST: return "the pool exists already";
    default: return "unknown core error";
    }
}

void core_clear_all(core_t *core)
{
    if (core->observer && !core->replaying && core->nns > 0) {
        core_event ev = {CORE_EV_CLEAR_ALL, {"", 0}, 0, 0, {"", 0}, 0};
        core->observer(core->observer_ctx, &ev);
    }
    for (size_t n = 0; n < core->nns; n++) {
        core_ns *ns = core->namespaces[n];
        for (uint32_t r = 0; r < ns->ranks_cap; r++)
            if (ns->by_rank[r])
                core__pool_release(ns->by_rank[r]);
        core__ns_free(ns);
    }
    hf_xfree(core->namespaces);
    core->namespaces = NULL;
    core->nns = 0;
    core->nreuse = 0;
    core->recovered = false; /* no page left to protect */
}

void core_free(core_t *core)
{
    if (!core)
        return;
    core_clear_all(core);
    hf_xfree(core);
}

static core_ns *ns_find(const core_t *core, hf_slice name)
{
    for (size_t n = 0; n < core->nns; n++) {
        core_ns *ns = core->namespaces[n];
        if (ns->name_len == name.len && memcmp(ns->name, name.ptr, name.len) == 0)
            return ns;
    }
    return NULL;
}

core_pool_t *core_pool_find(core_t *core, hf_slice name, uint32_t rank)
{
    core_ns *ns = ns_find(core, name);
    if (!ns || rank >= ns->ranks_cap)
        return NULL;
    return ns->by_rank[rank];
}

int core_pool_init(core_t *core, hf_slice name, uint32_t rank, uint64_t num_pages,
                   uint64_t *existing_pages)
{
    /* Replay rebuilds pools accepted under an earlier run's limits: max_pages
     * and max_ranks bound what clients may create, not what exists. */
    uint64_t max_pages = core->replaying ? CORE_MAX_PAGES_LIMIT : core->config.max_pages;
    uint32_t max_ranks = core->replaying ? CORE_MAX_RANKS_LIMIT : core->config.max_ranks;
    if (num_pages > max_pages || rank >= max_ranks)
        return CORE_EINVAL;
    core_pool_t *pool = core_pool_find(core, name, rank);
    if (pool) {
        if (existing_pages)
            *existing_pages = pool->num_pages;
        return 0;
    }
    core_ns *ns = ns_find(core, name);
    if (!ns)
        ns = core__ns_new(core, name);
    ns->by_rank = hf_grow_index(ns->by_rank, &ns->ranks_cap, rank, sizeof *ns->by_rank, 8);
    HF_ASSERT(rank < ns->ranks_cap && !ns->by_rank[rank]);
    pool = core__pool_new(core, ns, rank, num_pages);
    ns->by_rank[rank] = pool;
    ns->npools++;
    core__ns_add_pool(ns, core, pool);
    if (existing_pages)
        *existing_pages = num_pages;
    core__emit(pool, CORE_EV_POOL_INIT, num_pages, 0);
    return 1;
}

void core_pool_clear(core_pool_t *pool, int64_t now)
{
    core_pool_expire(pool, now);
    for (uint64_t p = 0; p < pool->touched && pool->nowned > 0; p++) {
        if (core__page_is_owned(pool, (uint32_t)p)) {
            uint32_t id = core__page_disown(pool, (uint32_t)p, now);
            core__rec_release_if_empty(pool->ns, pool->core, id);
        }
    }
    while (pool->reserved.head != CORE_NIL)
        core__page_unreserve(pool, pool->side[pool->reserved.head].page);
    HF_ASSERT(pool->nowned == 0 && pool->reserved.len == 0 && core__pool_counts_agree(pool));
}

/* ---------------------------------------------------------- allocation */

/* Index of the first occurrence of each key within the call (dup[i] == i for firsts). */
static void find_repeats(const core_key *enc, size_t n, size_t *dup)
{
    size_t cap = 16;
    while (cap < n * 2)
        cap *= 2;
    size_t *table = hf_xmalloc(cap * sizeof *table);
    memset(table, 0xff, cap * sizeof *table);
    for (size_t i = 0; i < n; i++) {
        size_t s = enc[i].hash & (cap - 1);
        dup[i] = i;
        for (; table[s] != (size_t)-1; s = (s + 1) & (cap - 1)) {
            const core_key *a = &enc[table[s]], *b = &enc[i];
            if (a->hash == b->hash && a->kind == b->kind && a->len == b->len &&
                (a->kind == CORE_KEY_EXT ? memcmp(a->ext, b->ext, a->len) == 0
                                         : memcmp(a->bytes, b->bytes, 32) == 0)) {
                dup[i] = table[s];
                break;
            }
        }
        if (dup[i] == i)
            table[s] = i;
    }
    hf_xfree(table);
}

/* The start of a call on a batch of keys: the pool's leases expired, the
 * keys encoded (*enc) and their repeats found (*dup, as find_repeats);
 * false, with nothing done, for an empty batch. batch_end frees both. */
static bool batch_begin(core_pool_t *pool, const hf_slice *keys, size_t n, int64_t now, bool intern,
                        core_key **enc, size_t **dup)
{
    if (n == 0)
        return false;
    core_pool_expire(pool, now);
    *enc = hf_xmalloc(n * sizeof **enc);
    *dup = hf_xmalloc(n * sizeof **dup);
    for (size_t i = 0; i < n; i++)
        if (intern)
            core__key_encode_stored(pool->ns, pool->core, keys[i], &(*enc)[i]);
        else
            core__key_encode(pool->ns, pool->core, keys[i], &(*enc)[i]);
    find_repeats(*enc, n, *dup);
    return true;
}

static void batch_end(core_pool_t *pool, core_key *enc, size_t *dup)
{
    hf_xfree(dup);
    hf_xfree(enc);
    HF_ASSERT(core__pool_counts_agree(pool));
}

/* The page of `key` in `pool`, or CORE_NIL. */
static inline uint32_t pool_find(const core_pool_t *pool, const core_key *key)
{
    uint32_t id = core__index_find(pool->ns, key);
    return id == CORE_NIL ? CORE_NIL
                          : core__krec_pages(pool->ns, core__krec(pool->ns, id))[pool->col];
}

/* A page to give: a FREE one, else a victim (evict.c). */
static inline uint32_t take_page(core_pool_t *pool, core_evict_scan *scan, int64_t now)
{
    uint32_t page = core__take_free_page(pool);
    return page != CORE_NIL ? page : core__evict(pool, scan, now);
}

void core_allocate(core_pool_t *pool, const hf_slice *keys, size_t n, core_alloc_mode mode,
                   int64_t now, int64_t *pages, bool *existed)
{
    core_key *enc;
    size_t *dup;
    if (!batch_begin(pool, keys, n, now, true, &enc, &dup))
        return;

    /* Pass 1: hits answer their page, count a use and are pinned. */
    uint64_t hits = 0, need = 0;
    for (size_t i = 0; i < n; i++) {
        if (i % CORE_PREFETCH_BLOCK == 0)
            core__index_prefetch(pool->ns, &enc[i],
                                 n - i < CORE_PREFETCH_BLOCK ? n - i : CORE_PREFETCH_BLOCK);
        if (dup[i] != i)
            continue;
        uint32_t page = pool_find(pool, &enc[i]);
        pages[i] = page == CORE_NIL ? -1 : (int64_t)page;
        if (page != CORE_NIL) {
            core__page_touch(pool, page);
            *core__page_bits(pool, page) |= CORE_REC_PINNED;
            hits++;
        } else {
            need++;
        }
    }
    pool->counters.hits += hits;
    pool->counters.misses += need;

    /* Pass 2: new keys get pages, unless all-or-nothing cannot be met. */
    int give = mode == CORE_ALLOC_PARTIAL || core__can_take(pool, need, now);
    bool lease_hits = mode == CORE_ALLOC_ALL_OR_NOTHING && give && hits > 0 &&
                      pool->core->config.write_lease_ms > 0;
    core_evict_scan scan = {false};
    int64_t deadline = now + pool->core->config.reservation_ms;
    for (size_t i = 0; i < n; i++) {
        if (dup[i] != i) {
            pages[i] = pages[dup[i]];
            if (existed)
                existed[i] = existed[dup[i]];
            continue;
        }
        bool hit = pages[i] >= 0;
        if (existed)
            existed[i] = hit;
        if (hit && lease_hits)
            core__page_write_lease(pool, (uint32_t)pages[i], now);
        if (hit || !give)
            continue;
        uint32_t page = take_page(pool, &scan, now);
        if (page != CORE_NIL)
            core__page_reserve(pool, page, &enc[i], deadline);
        pages[i] = page == CORE_NIL ? -1 : (int64_t)page;
    }
    for (size_t i = 0; hits > 0 && i < n; i++)
        if (dup[i] == i && pages[i] >= 0 && core__page_is_owned(pool, (uint32_t)pages[i]))
            *core__page_bits(pool, (uint32_t)pages[i]) &= (uint8_t)~CORE_REC_PINNED; /* hits */
    batch_end(pool, enc, dup);
}

/* ------------------------------------------------- confirm and release */

static int page_in_range(const core_pool_t *pool, int64_t page)
{
    return page >= 0 && (uint64_t)page < pool->num_pages;
}

static void refuse(core_pool_t *pool, uint64_t *counters, core_refusal why, size_t *refused)
{
    (void)pool;
    counters[why]++;
    (*refused)++;
}

static void confirm_one(core_pool_t *pool, const core_key *key, int64_t page, int64_t now,
                        size_t *refused)
{
    uint64_t *refusals = pool->counters.refused_confirms;
    if (!page_in_range(pool, page)) {
        refuse(pool, refusals, CORE_REFUSE_OUT_OF_RANGE, refused);
        return;
    }
    if ((uint64_t)page >= pool->touched) {
        refuse(pool, refusals, CORE_REFUSE_NOT_RESERVED, refused);
        return;
    }
    uint32_t p = (uint32_t)page, ref = *core__ref(pool, p);
    core_page_state state = core__page_state(pool, p);
    if (state != CORE_PAGE_RESERVED && state != CORE_PAGE_OWNED) {
        refuse(pool, refusals, CORE_REFUSE_NOT_RESERVED, refused);
        return;
    }
    if (state == CORE_PAGE_OWNED) {
        uint8_t *rec = core__krec(pool->ns, ref);
        if (!core__keyst_eq(core__krec_key(rec), *core__rec_kind(rec), key)) {
            refuse(pool, refusals, CORE_REFUSE_OTHER_KEY, refused);
            return;
        }
        core__page_write_done(pool, p, now); /* re-confirm of a hit: a use, ends a write */
        core__page_touch(pool, p);
        return;
    }
    const core_side *e = &pool->side[ref & ~CORE_REF_SIDE];
    if (!core__keyst_eq(&e->key, e->key_kind, key)) {
        refuse(pool, refusals, CORE_REFUSE_OTHER_KEY, refused);
        return;
    }
    uint32_t id = core__index_find(pool->ns, key);
    uint32_t owned = id == CORE_NIL
                         ? CORE_NIL
                         : core__krec_pages(pool->ns, core__krec(pool->ns, id))[pool->col];
    HF_ASSERT(owned != p);
    if (owned != CORE_NIL) { /* the key won a page meanwhile: keep that one */
        core__page_unreserve(pool, p);
        core__page_touch(pool, owned);
        pool->counters.duplicate_confirmations++;
        return;
    }
    core__page_own(pool, p, id, key);
}

static void release_one(core_pool_t *pool, int64_t page, int64_t now, size_t *refused)
{
    uint64_t *refusals = pool->counters.refused_releases;
    if (!page_in_range(pool, page)) {
        refuse(pool, refusals, CORE_REFUSE_OUT_OF_RANGE, refused);
        return;
    }
    core_page_state state = (uint64_t)page < pool->touched ? core__page_state(pool, (uint32_t)page)
                                                           : CORE_PAGE_FREE;
    if (state == CORE_PAGE_RESERVED) {
        core__page_release(pool, (uint32_t)page, now);
        pool->counters.releases++;
    } else {
        refuse(pool, refusals,
               state == CORE_PAGE_OWNED ? CORE_REFUSE_OWNED : CORE_REFUSE_NOT_RESERVED, refused);
    }
}

void core_confirm(core_pool_t *pool, const hf_slice *keys, const int64_t *pages, size_t n,
                  const int64_t *release, size_t nrel, int64_t now, size_t *refused)
{
    size_t count = 0;
    core_key enc[CORE_PREFETCH_BLOCK];
    core_pool_expire(pool, now);
    for (size_t i = 0; i < n; i++) {
        size_t j = i % CORE_PREFETCH_BLOCK;
        if (j == 0) { /* the refs named by the pages, and the keys' slots */
            size_t m = n - i < CORE_PREFETCH_BLOCK ? n - i : CORE_PREFETCH_BLOCK;
            for (size_t k = 0; k < m; k++) {
                if (pages[i + k] >= 0 && (uint64_t)pages[i + k] < pool->touched)
                    __builtin_prefetch(core__ref(pool, (uint32_t)pages[i + k]));
                core__key_encode(pool->ns, pool->core, keys[i + k], &enc[k]);
            }
            core__index_prefetch(pool->ns, enc, m);
        }
        confirm_one(pool, &enc[j], pages[i], now, &count);
    }
    for (size_t i = 0; i < nrel; i++)
        release_one(pool, release[i], now, &count);
    if (refused)
        *refused = count;
    HF_ASSERT(count <= n + nrel && core__pool_counts_agree(pool));
}

/* Undo an allocation that no client saw: see core.h. */
void core_cancel(core_pool_t *pool, const hf_slice *keys, const int64_t *pages, const bool *existed,
                 size_t n, int64_t now)
{
    core_key *enc;
    size_t *dup;
    if (!batch_begin(pool, keys, n, now, false, &enc, &dup))
        return;
    for (size_t i = n; i-- > 0;) { /* last taken first: the free stack as it was */
        if (dup[i] != i || !page_in_range(pool, pages[i]) || (uint64_t)pages[i] >= pool->touched)
            continue;
        uint32_t p = (uint32_t)pages[i], ref = *core__ref(pool, p);
        core_page_state state = core__page_state(pool, p);
        if (!existed[i] && state == CORE_PAGE_RESERVED) {
            const core_side *e = &pool->side[ref & ~CORE_REF_SIDE];
            if (core__keyst_eq(&e->key, e->key_kind, &enc[i]))
                core__page_unreserve(pool, p);
        } else if (existed[i] && state == CORE_PAGE_OWNED) {
            uint8_t *rec = core__krec(pool->ns, ref);
            if (core__keyst_eq(core__krec_key(rec), *core__rec_kind(rec), &enc[i]))
                core__page_write_done(pool, p, now);
        }
    }
    batch_end(pool, enc, dup);
}

/* ------------------------------------------------------------- readers */

/* The namespace's estimator, a request starting (core.h core_prefix_count):
 * made on the namespace's first read, resized when its pools change; NULL
 * beyond CORE_REUSE_NS namespaces. Volatile. */
static reuse_t *ns_reuse(core_t *core, core_ns *ns)
{
    uint64_t pages = ns->npools ? ns->pages_sum / ns->npools : 0;
    if (!ns->reuse) {
        if (core->nreuse + 1 > CORE_REUSE_NS) /* also with CORE_REUSE_NS 0 */
            return NULL;
        core->nreuse++;
        ns->reuse = reuse_new(pages);
    } else if (ns->reuse->pages != pages) {
        reuse_reset(ns->reuse, pages);
    }
    reuse_begin(ns->reuse);
    return ns->reuse;
}

void core_prefix_count(core_t *core, hf_slice ns, const bool *present, size_t n)
{
    core_ns *found = ns_find(core, ns);
    if (found && found->npools)
        reuse_prefix_count(&found->prefix, present, n);
}

static void lookup_walk(core_pool_t *pool, const hf_slice *keys, size_t n, int64_t now,
                        int64_t *pages, reuse_t *feed);

void core_exists(core_pool_t *pool, const hf_slice *keys, size_t n, int64_t now, bool *present)
{
    int64_t pages_buf[64];
    int64_t *pages = n <= 64 ? pages_buf : hf_xmalloc(n * sizeof *pages);
    lookup_walk(pool, keys, n, now, pages, pool->col == 0 ? ns_reuse(pool->core, pool->ns) : NULL);
    for (size_t i = 0; i < n; i++)
        present[i] = pages[i] >= 0;
    if (pages != pages_buf)
        hf_xfree(pages);
}

void core_lookup(core_pool_t *pool, const hf_slice *keys, size_t n, int64_t now, int64_t *pages)
{
    lookup_walk(pool, keys, n, now, pages, NULL);
}

/* A read of an OWNED page: a read lease from now (never shortened) and a
 * use. Volatile: no event. */
static inline void page_lease(core_pool_t *pool, uint32_t page, int64_t now)
{
    int64_t *deadline = core__page_deadline(pool, page);
    int64_t until = now + pool->core->config.read_lease_ms;
    if (until > *deadline)
        *deadline = until;
    core__page_touch(pool, page);
}

/* core_lookup, feeding each key to the estimator `feed` (may be NULL). */
static void lookup_walk(core_pool_t *pool, const hf_slice *keys, size_t n, int64_t now,
                        int64_t *pages, reuse_t *feed)
{
    core_key enc[CORE_PREFETCH_BLOCK];
    core_pool_expire(pool, now);
    for (size_t i = 0; i < n; i++) {
        size_t j = i % CORE_PREFETCH_BLOCK;
        if (j == 0) {
            size_t m = n - i < CORE_PREFETCH_BLOCK ? n - i : CORE_PREFETCH_BLOCK;
            for (size_t k = 0; k < m; k++) {
                core__key_encode(pool->ns, pool->core, keys[i + k], &enc[k]);
                if (feed)
                    reuse_key(feed, enc[k].hash);
            }
            core__index_prefetch(pool->ns, enc, m);
        }
        uint32_t page = pool_find(pool, &enc[j]);
        if (page == CORE_NIL) {
            pages[i] = -1;
            pool->counters.misses++;
            continue;
        }
        page_lease(pool, page, now);
        pages[i] = page;
        pool->counters.hits++;
    }
}

void core_delete(core_pool_t *pool, const hf_slice *keys, size_t n, int64_t now)
{
    core_pool_expire(pool, now);
    for (size_t i = 0; i < n; i++) {
        core_key key;
        core__key_encode(pool->ns, pool->core, keys[i], &key);
        uint32_t page = pool_find(pool, &key);
        if (page == CORE_NIL)
            continue;
        uint32_t id = core__page_disown(pool, page, now);
        core__demote_in_other_ranks(pool, id, now);
        core__rec_release_if_empty(pool->ns, pool->core, id);
    }
    HF_ASSERT(core__pool_counts_agree(pool));
}

/* Keys ahead of the one being answered whose slot (2 * PIPE_AHEAD ahead)
 * and record (PIPE_AHEAD ahead) are asked for: a steady stream of misses in
 * flight instead of one block's burst at a time. */
#define PIPE_AHEAD 6
#define PIPE_STACK 128

static inline __attribute__((always_inline)) void
pipe_prefetch_rec(const core_ns *ns, const core_key *key, size_t home)
{
    uint32_t slot = ns->slots[home];
    if (slot != CORE_NIL && (slot & ~ns->id_mask) == (key->hash & ~ns->id_mask))
        core__prefetch_bytes(core__krec(ns, slot & ns->id_mask), ns->rec_size, 1);
}

/* Whether none of a record's n pages is CORE_NIL (4 at a time with SSE2). */
static inline bool all_pages(const uint32_t *pages, uint32_t n)
{
    uint32_t c = 0;
#ifdef __SSE2__
    __m128i nil = _mm_set1_epi32(-1), hit = _mm_setzero_si128();
    for (; c + 4 <= n; c += 4) {
        __m128i four = _mm_loadu_si128((const __m128i *)(const void *)(pages + c));
        hit = _mm_or_si128(hit, _mm_cmpeq_epi32(four, nil));
    }
    if (_mm_movemask_epi8(hit))
        return false;
#endif
    for (; c < n; c++)
        if (pages[c] == CORE_NIL)
            return false;
    return true;
}

/* Shared walk of batch_exists and get_locations: a key is complete when its
 * record has a page in every column; complete keys are leased and used in
 * every rank; answer[i] is the page in `rank` (or 0 if rank is CORE_NIL).
 * One index probe and one record per key, whatever the TP size. */
static void complete_walk(core_t *core, core_ns *ns, uint32_t rank, const hf_slice *keys, size_t n,
                          int64_t now, int64_t *answer)
{
    for (size_t i = 0; i < n; i++)
        answer[i] = -1;
    if (!ns || ns->npools == 0)
        return;
    uint32_t ncols = ns->ncols;
    for (uint32_t c = 0; c < ncols; c++)
        core_pool_expire(ns->by_col[c], now); /* even for no key, as always */
    if (n == 0)
        return;
    uint32_t want = rank == CORE_NIL ? CORE_NIL : ns->by_rank[rank]->col;
    HF_ASSERT(want == CORE_NIL || want < ncols);
    reuse_t *feed = rank == CORE_NIL ? ns_reuse(core, ns) : NULL;
    int64_t until = now + core->config.read_lease_ms;
    uint64_t complete_keys = 0;
    core_key enc_buf[PIPE_STACK];
    size_t home_buf[PIPE_STACK];
    core_key *enc = n <= PIPE_STACK ? enc_buf : hf_xmalloc(n * sizeof *enc);
    size_t *home = n <= PIPE_STACK ? home_buf : hf_xmalloc(n * sizeof *home);
    for (size_t i = 0; i < n; i++) {
        core__key_encode(ns, core, keys[i], &enc[i]);
        if (feed)
            reuse_key(feed, enc[i].hash);
        home[i] = core__home(ns, enc[i].hash);
        if (ns->slots && i < 2 * PIPE_AHEAD)
            __builtin_prefetch(&ns->slots[home[i]]);
    }
    for (size_t i = 0; ns->slots && i < PIPE_AHEAD && i < n; i++)
        pipe_prefetch_rec(ns, &enc[i], home[i]);
    for (size_t i = 0; i < n && ns->slots; i++) {
        if (i + 2 * PIPE_AHEAD < n)
            __builtin_prefetch(&ns->slots[home[i + 2 * PIPE_AHEAD]]);
        if (i + PIPE_AHEAD < n)
            pipe_prefetch_rec(ns, &enc[i + PIPE_AHEAD], home[i + PIPE_AHEAD]);
        uint32_t id = core__index_find(ns, &enc[i]);
        if (id == CORE_NIL)
            continue;
        uint8_t *rec = core__krec(ns, id);
        const uint32_t *pages = core__krec_pages(ns, rec);
        if (!all_pages(pages, ncols))
            continue;
        complete_keys++;
        core__complete_use(ns, rec, until);
        answer[i] = want == CORE_NIL ? 0 : pages[want];
    }
    if (enc != enc_buf)
        hf_xfree(enc);
    if (home != home_buf)
        hf_xfree(home);
    for (uint32_t c = 0; c < ncols; c++) {
        ns->by_col[c]->counters.hits += complete_keys;
        ns->by_col[c]->counters.misses += n - complete_keys;
    }
}

void core_complete_exists(core_t *core, hf_slice ns, const hf_slice *keys, size_t n, int64_t now,
                          bool *present)
{
    int64_t buf[128];
    int64_t *answer = n <= 128 ? buf : hf_xmalloc(n * sizeof *answer);
    complete_walk(core, ns_find(core, ns), CORE_NIL, keys, n, now, answer);
    for (size_t i = 0; i < n; i++)
        present[i] = answer[i] >= 0;
    if (answer != buf)
        hf_xfree(answer);
}

int core_complete_locations(core_t *core, hf_slice ns, uint32_t rank, const hf_slice *keys,
                            size_t n, int64_t now, int64_t *pages)
{
    if (!core_pool_find(core, ns, rank))
        return CORE_ENOPOOL;
    complete_walk(core, ns_find(core, ns), rank, keys, n, now, pages);
    return 0;
}

/* --------------------------------------------------------------- stats */

void core_pool_get_stats(const core_pool_t *pool, int64_t now, core_pool_stats *out)
{
    *out = pool->counters;
    out->write_leased = 0;
    for (size_t s = 0; pool->nwleases && s <= pool->wlease_mask; s++)
        out->write_leased += pool->wleases[s].page != CORE_NIL && pool->wleases[s].end > now;
    out->num_pages = pool->num_pages;
    out->free = core__pool_free_count(pool);
    out->reserved = pool->reserved.len;
    out->owned = pool->nowned;
    out->draining = pool->draining.len;
    out->touched = pool->touched;
    if (pool->col == 0) {
        out->prefix_requests = pool->ns->prefix.requests;
        out->prefix_blocks = pool->ns->prefix.blocks;
        out->prefix_hits = pool->ns->prefix.hit_blocks;
        if (pool->ns->reuse)
            reuse_figures(pool->ns->reuse, &out->est_blocks, out->est_hits);
    }
}

void core_foreach_pool(const core_t *core, int64_t now, core_pool_visitor fn, void *ctx)
{
    for (size_t n = 0; n < core->nns; n++) {
        const core_ns *ns = core->namespaces[n];
        for (uint32_t r = 0; r < ns->ranks_cap; r++) {
            if (!ns->by_rank[r])
                continue;
            core_pool_stats stats;
            core_pool_get_stats(ns->by_rank[r], now, &stats);
            fn(ctx, (hf_slice){ns->name, ns->name_len}, r, &stats);
        }
    }
}

core_page_state core_page_get(const core_pool_t *pool, uint64_t page, hf_slice *key,
                              char keybuf[CORE_KEY_TEXT_MAX], int64_t *deadline)
{
    if (key)
        *key = (hf_slice){"", 0};
    if (deadline)
        *deadline = 0;
    if (page >= pool->touched)
        return CORE_PAGE_FREE;
    uint32_t ref = *core__ref(pool, (uint32_t)page);
    if (ref == CORE_NIL)
        return CORE_PAGE_FREE;
    if (ref & CORE_REF_SIDE) {
        const core_side *e = &pool->side[ref & ~CORE_REF_SIDE];
        if (deadline)
            *deadline = e->deadline;
        if (key && e->state == CORE_PAGE_RESERVED)
            *key = core__keyst_text(pool->ns, &e->key, e->key_kind, keybuf);
        return (core_page_state)e->state;
    }
    uint8_t *rec = core__krec(pool->ns, ref);
    if (deadline)
        *deadline = core__krec_deadlines(pool->ns, rec)[pool->col];
    if (key)
        *key = core__keyst_text(pool->ns, core__krec_key(rec), *core__rec_kind(rec), keybuf);
    return CORE_PAGE_OWNED;
}

size_t core_memory_usage(const core_t *core)
{
    size_t total = sizeof *core + core->nns * sizeof(core_ns *);
    for (size_t n = 0; n < core->nns; n++) {
        const core_ns *ns = core->namespaces[n];
        total += sizeof *ns + ns->name_len + ns->ranks_cap * sizeof(core_pool_t *) +
                 ns->ncols * sizeof(core_pool_t *) + ns->nrchunks * CORE_REC_CHUNK * ns->rec_size +
                 ns->rchunks_cap * sizeof(uint8_t *) +
                 (ns->slots ? (ns->slot_mask + 1) * sizeof(uint32_t) : 0) +
                 (ns->sfx ? sizeof *ns->sfx : 0) + reuse_memory(ns->reuse);
        for (uint32_t id = 0; id < ns->rec_top; id++) {
            uint8_t *rec = core__krec(ns, id);
            if (*core__rec_kind(rec) == CORE_KEY_EXT)
                total += core__krec_key(rec)->ext.len;
        }
        for (uint32_t r = 0; r < ns->ranks_cap; r++) {
            const core_pool_t *pool = ns->by_rank[r];
            if (!pool)
                continue;
            total += sizeof *pool + pool->nchunks * CORE_CHUNK_PAGES * sizeof(uint32_t) +
                     pool->chunks_cap * sizeof(uint32_t *) + pool->side_cap * sizeof(core_side) +
                     pool->free_cap * sizeof(uint32_t) + pool->demoted_cap * sizeof(uint32_t) +
                     (pool->wleases ? (pool->wlease_mask + 1) * sizeof(core_wlease) : 0);
            for (size_t s = 0; s < pool->side_top; s++)
                if (pool->side[s].key_kind == CORE_KEY_EXT)
                    total += pool->side[s].key.ext.len;
        }
    }
    return total;
}
