/*
 * evict.c: the eviction rule (core.h "Recency"), whole: demotion, the clock
 * hand and its sweep over use counts, victim choice, and the replay of the
 * hand's moves. What a use does to a count is core_internal.h's "Recency"
 * (inline on every read), the count a new page starts with is
 * CORE_USE_INSERT (core.h); nothing else in the core lowers a count, marks a
 * page demoted or chooses a victim.
 *
 * Rules
 *   - A victim is an OWNED page that is evictable: no read or write lease
 *     (its column's deadline <= now) and not a hit of the running
 *     allocation (PINNED). RESERVED and DRAINING pages are never taken.
 *     Nothing is evicted without config.evict, or while every OWNED
 *     page is read-leased after core_recovered().
 *   - First choice: the most recently demoted evictable page (demoted: its
 *     key lost its page in another rank while this page had no lease, and
 *     no use since). The demoted stack may hold stale entries (a page used,
 *     freed or demoted again since): they are skipped, and dropped when the
 *     stack is compacted.
 *   - Otherwise the clock: from the hand on, in page order, wrapping at
 *     num_pages, the first evictable page whose count is 0; every other
 *     OWNED page passed loses one from its count. The hand stops just after
 *     the victim; a full turn without an evictable page takes nothing, and
 *     the allocation sweeps no more (core_evict_scan).
 *   - The hand's move is an event (CORE_EV_SWEEP: where it stopped, after
 *     how many full turns), so that replay (core__sweep_apply) moves the
 *     hand and lowers the counts the same way; demotions and counts are
 *     volatile (no event).
 *   - A change here is a change of docs/protocol.md's rule and of the
 *     reference model in tests/unit/test_model.c, which follows it exactly.
 */
#include "core/core_internal.h"

#include <string.h>

#include "util/xalloc.h"

/* ------------------------------------------------------------ demotion */

/* Is `page` (a demoted stack entry, maybe stale) an OWNED page still DEMOTED? */
static inline bool page_demoted(const core_pool_t *pool, uint32_t page)
{
    return core__page_is_owned(pool, page) && (*core__page_bits(pool, page) & CORE_REC_DEMOTED);
}

/* Lower a use count by `by`, to 0 at the least. */
static inline void bits_lower(uint8_t *bits, unsigned by)
{
    unsigned use = core__bits_use(*bits);
    HF_ASSERT(use <= CORE_USE_MAX);
    *bits = core__bits_set_use(*bits, use > by ? use - by : 0);
}

/* Drop the stale entries of the demoted stack (and all but the topmost
 * entry of a page), keeping the order of the others. */
static void demoted_compact(core_pool_t *pool)
{
    size_t keep = pool->ndemoted_stack;
    for (size_t i = pool->ndemoted_stack; i-- > 0;) {
        uint32_t page = pool->demoted[i];
        if (!page_demoted(pool, page))
            continue;
        uint8_t *bits = core__page_bits(pool, page);
        /* PINNED doubles as "seen" here: never set on a demoted page */
        if (*bits & CORE_REC_PINNED)
            continue;
        *bits |= CORE_REC_PINNED;
        pool->demoted[--keep] = page;
    }
    size_t n = pool->ndemoted_stack - keep;
    memmove(pool->demoted, pool->demoted + keep, n * sizeof *pool->demoted);
    pool->ndemoted_stack = n;
    for (size_t i = 0; i < n; i++)
        *core__page_bits(pool, pool->demoted[i]) &= (uint8_t)~CORE_REC_PINNED;
    /* page_demote compacts before it pushes the page it just marked */
    HF_ASSERT(pool->ndemoted_stack + 1 >= pool->ndemoted);
}

/* The OWNED page is demoted: it goes first on eviction. */
static void page_demote(core_pool_t *pool, uint32_t page)
{
    HF_ASSERT(page < pool->touched && core__page_is_owned(pool, page));
    uint8_t *bits = core__page_bits(pool, page);
    HF_ASSERT(!(*bits & CORE_REC_PINNED));
    if (!(*bits & CORE_REC_DEMOTED)) {
        *bits |= CORE_REC_DEMOTED;
        pool->ndemoted++;
    }
    if (pool->ndemoted_stack == pool->demoted_cap) {
        if (pool->ndemoted_stack > 2 * pool->ndemoted + 64)
            demoted_compact(pool);
        if (pool->ndemoted_stack == pool->demoted_cap) {
            pool->demoted_cap = pool->demoted_cap ? pool->demoted_cap * 2 : 64;
            pool->demoted = hf_xreallocarray(pool->demoted, pool->demoted_cap, sizeof(uint32_t));
        }
    }
    pool->demoted[pool->ndemoted_stack++] = page;
    HF_ASSERT(pool->ndemoted <= pool->nowned && pool->ndemoted <= pool->ndemoted_stack);
}

/* When one rank loses a key, the other ranks' pages for it can no longer
 * serve a complete key: demote them (unless leased). */
void core__demote_in_other_ranks(core_pool_t *pool, uint32_t id, int64_t now)
{
    core_ns *ns = pool->ns;
    if (ns->npools < 2 || core__all_owned_leased(pool->core, now))
        return;
    uint8_t *rec = core__krec(ns, id);
    const uint32_t *pages = core__krec_pages(ns, rec);
    const int64_t *deadlines = core__krec_deadlines(ns, rec);
    for (uint32_t c = 0; c < ns->ncols; c++) {
        core_pool_t *other = ns->by_col[c];
        if (other == pool || pages[c] == CORE_NIL || deadlines[c] > now)
            continue;
        page_demote(other, pages[c]); /* volatile: no event */
    }
}

/* ------------------------------------------------------------- victims */

/* Neither leased nor a hit of the running allocation. */
static inline bool evictable(uint8_t bits, int64_t deadline, int64_t now)
{
    return deadline <= now && !(bits & CORE_REC_PINNED);
}

static inline bool page_evictable(const core_pool_t *pool, uint32_t page, int64_t now)
{
    HF_ASSERT(page < pool->touched && core__page_is_owned(pool, page));
    uint32_t id = core__page_owner(pool, page);
    return evictable(*core__col_bits(pool, id), *core__col_deadline(pool, id), now);
}

/* The most recently demoted evictable page, off the stack; or CORE_NIL. */
static uint32_t take_demoted(core_pool_t *pool, int64_t now)
{
    while (pool->ndemoted_stack > 0 && !page_demoted(pool, pool->demoted[pool->ndemoted_stack - 1]))
        pool->ndemoted_stack--; /* stale */
    if (pool->ndemoted == 0)
        return CORE_NIL;
    for (size_t i = pool->ndemoted_stack; i-- > 0;) {
        uint32_t page = pool->demoted[i];
        if (!page_demoted(pool, page) || !page_evictable(pool, page, now))
            continue;
        bool topmost = true; /* a lower duplicate of a page demoted again is stale */
        for (size_t j = i + 1; j < pool->ndemoted_stack && topmost; j++)
            topmost = pool->demoted[j] != page;
        if (!topmost)
            continue;
        memmove(&pool->demoted[i], &pool->demoted[i + 1],
                (pool->ndemoted_stack - i - 1) * sizeof *pool->demoted);
        pool->ndemoted_stack--;
        HF_ASSERT(page_demoted(pool, page) && page_evictable(pool, page, now));
        return page;
    }
    return CORE_NIL;
}

/* The clock: the first OWNED evictable page with a use count of 0 from the
 * hand on, lowering the count of every other OWNED page passed; CORE_NIL
 * after a full turn without an evictable page. Emits the hand's move. */
static uint32_t clock_sweep(core_pool_t *pool, core_evict_scan *scan, int64_t now)
{
    core_ns *ns = pool->ns;
    uint64_t n = pool->num_pages; /* == touched: nothing is FREE when we evict */
    HF_ASSERT(n > 0 && pool->touched == n && pool->nfree == 0 && pool->hand < n);
    uint32_t hand = pool->hand, victim = CORE_NIL;
    uint64_t steps = 0;
    bool seen_evictable = false;
    for (;;) {
        if (steps > 0 && steps % n == 0 && !seen_evictable)
            break;            /* a full turn without an evictable page */
        if ((steps & 7) == 0) /* the records of the pages ahead, read at random */
            for (uint32_t k = 8; k < 16; k++)
                if ((uint64_t)hand + k < n) {
                    uint32_t ref = *core__ref(pool, hand + k);
                    if (core__ref_owned(ref))
                        __builtin_prefetch(core__krec(ns, ref) + CORE_REC_BITS, 1);
                }
        uint32_t page = hand;
        hand = hand + 1 == n ? 0 : hand + 1;
        steps++;
        uint32_t id = *core__ref(pool, page);
        if (!core__ref_owned(id))
            continue;
        uint8_t *rec = core__krec(ns, id);
        HF_ASSERT(core__krec_pages(ns, rec)[pool->col] == page);
        uint8_t *bits = &core__rec_bits(rec)[pool->col];
        unsigned use = core__bits_use(*bits);
        if (evictable(*bits, core__krec_deadlines(ns, rec)[pool->col], now)) {
            seen_evictable = true;
            if (use == 0) {
                victim = page;
                break;
            }
        }
        if (use > 0) /* no write to a count already 0 */
            *bits = core__bits_set_use(*bits, use - 1);
    }
    HF_ASSERT(hand < n);
    pool->hand = hand;
    if (victim == CORE_NIL)
        scan->exhausted = true;
    core__emit(pool, CORE_EV_SWEEP, hand, (int64_t)(steps / n));
    return victim;
}

static uint32_t find_evictable(core_pool_t *pool, core_evict_scan *scan, int64_t now)
{
    if (!pool->core->config.evict || pool->nowned == 0 || scan->exhausted ||
        core__all_owned_leased(pool->core, now))
        return CORE_NIL;
    uint32_t page = take_demoted(pool, now);
    return page != CORE_NIL ? page : clock_sweep(pool, scan, now);
}

uint32_t core__evict(core_pool_t *pool, core_evict_scan *scan, int64_t now)
{
    uint32_t page = find_evictable(pool, scan, now);
    if (page == CORE_NIL)
        return CORE_NIL;
    HF_ASSERT(page_evictable(pool, page, now));
    uint32_t id = core__owned_leave(pool, page, NULL);
    core__demote_in_other_ranks(pool, id, now);
    core__emit(pool, CORE_EV_FREE, page, 0);
    core__rec_release_if_empty(pool->ns, pool->core, id);
    pool->counters.evictions++;
    HF_ASSERT(*core__ref(pool, page) == CORE_NIL);
    return page;
}

/* Can `need` new pages be had (free or evictable) without taking any?
 * (ALL_OR_NOTHING asks before it takes one.) */
bool core__can_take(core_pool_t *pool, uint64_t need, int64_t now)
{
    uint64_t avail = core__pool_free_count(pool);
    if (avail >= need)
        return true;
    if (!pool->core->config.evict || core__all_owned_leased(pool->core, now))
        return false;
    for (uint64_t p = 0; p < pool->touched && avail < need; p++)
        if (core__page_is_owned(pool, (uint32_t)p) && page_evictable(pool, (uint32_t)p, now))
            avail++;
    return avail >= need;
}

/* -------------------------------------------------------------- replay */

/* The clock hand moved to `to` after `turns` full turns (CORE_EV_SWEEP):
 * every OWNED page lost one per pass, those in [hand, to) one more. */
void core__sweep_apply(core_pool_t *pool, uint32_t to, int64_t turns)
{
    uint64_t n = pool->num_pages;
    HF_ASSERT(to < n && turns >= 0 && (pool->hand < n || pool->hand == 0));
    if (turns > 0) {
        unsigned drop = turns > CORE_USE_MAX ? CORE_USE_MAX : (unsigned)turns;
        for (uint64_t p = 0; p < pool->touched; p++)
            if (core__page_is_owned(pool, (uint32_t)p))
                bits_lower(core__page_bits(pool, (uint32_t)p), drop);
    }
    for (uint64_t p = pool->hand; p != to; p = p + 1 == n ? 0 : p + 1) {
        if (p >= pool->touched) { /* no record: jump to `to` or to the wrap */
            p = to > p ? to - 1 : n - 1;
            continue;
        }
        if (core__page_is_owned(pool, (uint32_t)p))
            bits_lower(core__page_bits(pool, (uint32_t)p), 1);
    }
    pool->hand = to;
}
