/*
 * replay.c: events in and out (core.h "Events").
 *
 * In: core_apply rebuilds a core from a log or a snapshot, one event at a
 * time, then core_apply_finish rebuilds the free stacks; core_apply_live
 * follows a primary's events on a live core (its free stack following
 * them). Out: core_walk_state reports the durable state as the events that
 * rebuild it; core_pool_free_order / _set_free_order carry the one thing
 * those events do not: the free stack's order.
 *
 * Rules
 *   - An event is applied through the same transitions as the operation
 *     that emitted it (pages.c), with emission off (core->replaying), so a
 *     replayed core is the primary's durable state by construction; the
 *     hand's moves go to evict.c (core__sweep_apply).
 *   - An event that does not fit the state (unknown pool, page out of
 *     range or in the wrong state, a key that would own two pages) changes
 *     nothing and is CORE_EINVAL: the log it came from is damaged.
 *   - Recency is volatile: CORE_EV_USE and CORE_EV_DEMOTE of older logs are
 *     checked and ignored, and the walk reports no use count or demotion.
 */
#include "core/core_internal.h"

#include <string.h>

#include "util/xalloc.h"

void core_set_observer(core_t *core, core_observer_fn fn, void *ctx)
{
    core->observer = fn;
    core->observer_ctx = ctx;
}

/* ------------------------------------------------------------- events in */

/* Is the page of an event in range and in the expected state? Pages above
 * the mark are FREE: the mark moves up to the page. */
static bool apply_target(core_pool_t *pool, uint64_t page, core_page_state want)
{
    if (!pool || page >= pool->num_pages)
        return false;
    if (page >= pool->touched) {
        if (want != CORE_PAGE_FREE)
            return false;
        core__ensure_chunk(pool, (uint32_t)page);
        for (uint64_t p = pool->touched; p <= page; p++)
            *core__ref(pool, (uint32_t)p) = CORE_NIL;
        uint64_t skipped = pool->touched;
        pool->touched = page + 1;
        /* live: a primary takes the mark's own page, so nothing is skipped;
         * if something is, those pages are FREE and must be on the stack */
        if (pool->core->live_apply)
            for (uint64_t p = skipped; p < page; p++)
                core__free_stack_push(pool, (uint32_t)p);
        return true;
    }
    return core__page_state(pool, (uint32_t)page) == want;
}

static int apply_free(core_pool_t *pool, uint32_t page)
{
    if (!pool || page >= pool->touched)
        return CORE_EINVAL;
    switch (core__page_state(pool, page)) {
    case CORE_PAGE_RESERVED:
    case CORE_PAGE_DRAINING: core__side_drop(pool, page); break;
    case CORE_PAGE_OWNED:
        core__rec_release_if_empty(pool->ns, pool->core, core__owned_leave(pool, page, NULL));
        break;
    default: return CORE_EINVAL;
    }
    core__page_free(pool, page); /* the free stack is rebuilt by core_apply_finish */
    return 0;
}

static int apply_page_event(core_pool_t *pool, const core_event *ev)
{
    uint32_t page = (uint32_t)ev->page;
    core_key key;
    switch (ev->type) {
    case CORE_EV_RESERVE:
        if (ev->key.len == 0 || !apply_target(pool, ev->page, CORE_PAGE_FREE))
            return CORE_EINVAL;
        if (pool->core->live_apply)
            core__free_stack_remove(pool, page);
        core__key_encode_stored(pool->ns, pool->core, ev->key, &key);
        core__page_reserve(pool, page, &key, ev->deadline);
        return 0;
    case CORE_EV_OWN: {
        if (!apply_target(pool, ev->page, CORE_PAGE_RESERVED))
            return CORE_EINVAL;
        const core_side *e = &pool->side[core__page_side(pool, page)];
        core__keyst_to_key(pool->ns, pool->core, &e->key, e->key_kind, &key);
        uint32_t id = core__index_find(pool->ns, &key);
        if (id != CORE_NIL &&
            core__krec_pages(pool->ns, core__krec(pool->ns, id))[pool->col] != CORE_NIL)
            return CORE_EINVAL; /* the key would own two pages */
        core__page_own(pool, page, id, &key);
        return 0;
    }
    case CORE_EV_FREE: return apply_free(pool, page);
    case CORE_EV_DRAIN: /* from the log: an OWNED page; from a snapshot: a FREE one */
        if (apply_target(pool, ev->page, CORE_PAGE_OWNED)) {
            core__rec_release_if_empty(pool->ns, pool->core, core__owned_leave(pool, page, NULL));
        } else if (!apply_target(pool, ev->page, CORE_PAGE_FREE)) {
            return CORE_EINVAL;
        } else if (pool->core->live_apply) {
            core__free_stack_remove(pool, page); /* a release: FREE, then DRAIN */
        }
        core__page_drain(pool, page, ev->deadline);
        return 0;
    case CORE_EV_USE: /* recency of an older log or value: volatile, ignored */
    case CORE_EV_DEMOTE: return apply_target(pool, ev->page, CORE_PAGE_OWNED) ? 0 : CORE_EINVAL;
    case CORE_EV_SWEEP:
        if (!pool || ev->page >= pool->num_pages || ev->deadline < 0)
            return CORE_EINVAL;
        core__sweep_apply(pool, page, ev->deadline);
        return 0;
    case CORE_EV_WRITE_LEASE:
        if (!apply_target(pool, ev->page, CORE_PAGE_OWNED))
            return CORE_EINVAL;
        core__wlease_add(pool, page, ev->deadline);
        return 0;
    case CORE_EV_WRITE_DONE: {
        core_wlease *e;
        if (!apply_target(pool, ev->page, CORE_PAGE_OWNED) || !(e = core__wlease_find(pool, page)))
            return CORE_EINVAL;
        if (e->writers <= 1)
            core__wlease_remove(pool, e); /* the last writer: the lease ends */
        else
            e->writers--;
        *core__page_deadline(pool, page) = ev->deadline;
        return 0;
    }
    default: return CORE_EINVAL;
    }
}

int core_apply(core_t *core, const core_event *ev)
{
    core->replaying = true;
    int rc;
    if (ev->type == CORE_EV_CLEAR_ALL) {
        core_clear_all(core);
        rc = 0;
    } else if (ev->type == CORE_EV_POOL_INIT) {
        uint64_t existing = 0;
        rc = core_pool_init(core, ev->ns, ev->rank, ev->page, &existing);
        rc = rc == 1 ? 0 : CORE_EINVAL; /* a second init of a pool is never logged */
    } else {
        rc = apply_page_event(core_pool_find(core, ev->ns, ev->rank), ev);
    }
    return rc;
}

int core_apply_live(core_t *core, const core_event *ev)
{
    core->live_apply = true;
    int rc = core_apply(core, ev);
    core->live_apply = false;
    core->replaying = false;
    return rc;
}

size_t core_pool_free_order(const core_pool_t *pool, const uint32_t **pages)
{
    *pages = pool->free_stack;
    return pool->nfree;
}

int core_pool_set_free_order(core_pool_t *pool, const uint32_t *pages, size_t n)
{
    /* The events of a snapshot carry no high-water mark: a replay raises
     * the mark only to its highest page that is not FREE. Pages of the
     * order at or above this pool's mark are FREE pages that the source had
     * handed out once: the mark rises to cover them, and then every page
     * between the old and the new mark must be in the order. */
    uint64_t mark = pool->touched;
    for (size_t i = 0; i < n; i++) {
        if (pages[i] >= pool->num_pages)
            return CORE_EINVAL;
        if ((uint64_t)pages[i] + 1 > mark)
            mark = (uint64_t)pages[i] + 1;
    }
    if (n != pool->nfree + (mark - pool->touched))
        return CORE_EINVAL;
    size_t words = (size_t)(mark + 63) / 64;
    uint64_t *seen = hf_xcalloc(words ? words : 1, sizeof *seen);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        uint32_t p = pages[i];
        if ((p < pool->touched && *core__ref(pool, p) != CORE_NIL) ||
            (seen[p / 64] >> (p % 64) & 1))
            rc = CORE_EINVAL;
        else
            seen[p / 64] |= 1ull << (p % 64);
    }
    hf_xfree(seen);
    if (rc != 0)
        return rc;
    if (mark > pool->touched)
        core__ensure_chunk(pool, (uint32_t)(mark - 1));
    for (uint64_t p = pool->touched; p < mark; p++) {
        *core__ref(pool, (uint32_t)p) = CORE_NIL;
        core__free_stack_push(pool, (uint32_t)p); /* room; the order is copied below */
    }
    pool->touched = mark;
    if (n)
        memcpy(pool->free_stack, pages, n * sizeof *pages);
    HF_ASSERT(pool->nfree == n && core__pool_counts_agree(pool));
    return 0;
}

/* A deadline further than `len` from now is cut to now + len: it was set
 * on a clock that ran ahead of this one (a step back while the host was
 * down, a primary whose clock was ahead). Returns the deadline kept. */
static int64_t clamp_deadline(int64_t *deadline, int64_t now, int64_t len)
{
    if (*deadline > now + len)
        *deadline = now + len;
    return *deadline;
}

/* core.h core_recovered: every deadline of the pool at most its own lease
 * length from now. The reserved and draining lists stay sorted: the
 * deadlines cut are their tails, all cut to one value. */
static void clamp_pool(core_pool_t *pool, int64_t now)
{
    const core_config *cfg = &pool->core->config;
    int64_t protect = cfg->read_lease_ms > cfg->write_lease_ms ? cfg->read_lease_ms
                                                               : cfg->write_lease_ms;
    int64_t drain = protect > cfg->release_grace_ms ? protect : cfg->release_grace_ms;
    for (size_t s = 0; s < pool->side_top; s++) {
        core_side *e = &pool->side[s];
        if (e->state == CORE_PAGE_RESERVED)
            clamp_deadline(&e->deadline, now, cfg->reservation_ms);
        else if (e->state == CORE_PAGE_DRAINING)
            clamp_deadline(&e->deadline, now, drain);
    }
    for (size_t s = 0; pool->wleases && s <= pool->wlease_mask; s++) {
        core_wlease *e = &pool->wleases[s];
        if (e->page != CORE_NIL &&
            clamp_deadline(&e->end, now, cfg->write_lease_ms) < pool->wlease_min)
            pool->wlease_min = e->end;
    }
    /* The protection of an OWNED page (at least its write lease's end, which
     * was cut to no more than this). */
    for (uint32_t p = 0; p < pool->touched; p++)
        if (core__ref_owned(*core__ref(pool, p)))
            clamp_deadline(core__page_deadline(pool, p), now, protect);
}

void core_recovered(core_t *core, int64_t now)
{
    for (size_t n = 0; n < core->nns; n++) {
        core_ns *ns = core->namespaces[n];
        for (uint32_t r = 0; r < ns->ranks_cap; r++)
            if (ns->by_rank[r])
                clamp_pool(ns->by_rank[r], now);
    }
    for (size_t n = 0; n < core->nns; n++) {
        if (core->namespaces[n]->nrecs > 0) {
            core->recovered = true;
            core->recovered_at = now;
            return;
        }
    }
}

void core_apply_finish(core_t *core)
{
    for (size_t n = 0; n < core->nns; n++) {
        core_ns *ns = core->namespaces[n];
        for (uint32_t r = 0; r < ns->ranks_cap; r++) {
            core_pool_t *pool = ns->by_rank[r];
            if (!pool)
                continue;
            pool->nfree = 0;
            for (uint32_t p = (uint32_t)pool->touched; p-- > 0;)
                if (*core__ref(pool, p) == CORE_NIL)
                    core__free_stack_push(pool, p);
            HF_ASSERT(core__pool_counts_agree(pool));
        }
    }
    core->replaying = false;
}

/* ------------------------------------------------------------ events out */

static void walk_emit(core_observer_fn fn, void *ctx, const core_pool_t *pool, core_event_type type,
                      uint32_t page, int64_t deadline)
{
    char buf[CORE_KEY_TEXT_MAX];
    core_event ev = {type,    {pool->ns->name, pool->ns->name_len}, pool->rank, page, {"", 0},
                     deadline};
    if (type == CORE_EV_RESERVE) {
        uint32_t ref = *core__ref(pool, page);
        if (ref & CORE_REF_SIDE) {
            const core_side *e = &pool->side[ref & ~CORE_REF_SIDE];
            ev.key = core__keyst_text(pool->ns, &e->key, e->key_kind, buf);
        } else {
            uint8_t *rec = core__krec(pool->ns, ref);
            ev.key = core__keyst_text(pool->ns, core__krec_key(rec), *core__rec_kind(rec), buf);
        }
    }
    fn(ctx, &ev);
}

/* Owned pages: RESERVE + OWN each (their recency is volatile: not walked). */
static void walk_owned(const core_pool_t *pool, core_observer_fn fn, void *ctx)
{
    for (uint64_t p = 0; p < pool->touched && pool->nowned > 0; p++) {
        if (!core__page_is_owned(pool, (uint32_t)p))
            continue;
        walk_emit(fn, ctx, pool, CORE_EV_RESERVE, (uint32_t)p, 0);
        walk_emit(fn, ctx, pool, CORE_EV_OWN, (uint32_t)p, 0);
    }
}

static void walk_pool(const core_pool_t *pool, core_observer_fn fn, void *ctx)
{
    core_event init = {CORE_EV_POOL_INIT, {pool->ns->name, pool->ns->name_len},
                       pool->rank,        pool->num_pages,
                       {"", 0},           0};
    fn(ctx, &init);
    if (pool->hand != 0) /* no OWNED page yet: this only puts the hand in place */
        walk_emit(fn, ctx, pool, CORE_EV_SWEEP, pool->hand, 0);
    for (uint32_t s = pool->reserved.head; s != CORE_NIL; s = pool->side[s].next)
        walk_emit(fn, ctx, pool, CORE_EV_RESERVE, pool->side[s].page, pool->side[s].deadline);
    walk_owned(pool, fn, ctx);
    for (size_t s = 0; pool->nwleases && s <= pool->wlease_mask; s++) {
        const core_wlease *e = &pool->wleases[s];
        for (uint32_t w = 0; e->page != CORE_NIL && w < e->writers; w++)
            walk_emit(fn, ctx, pool, CORE_EV_WRITE_LEASE, e->page, e->end);
    }
}

static void walk_draining(const core_pool_t *pool, core_observer_fn fn, void *ctx)
{
    for (uint32_t s = pool->draining.head; s != CORE_NIL; s = pool->side[s].next)
        walk_emit(fn, ctx, pool, CORE_EV_DRAIN, pool->side[s].page, pool->side[s].deadline);
}

void core_walk_state(const core_t *core, core_observer_fn fn, void *ctx)
{
    for (size_t n = 0; n < core->nns; n++) {
        const core_ns *ns = core->namespaces[n];
        for (uint32_t r = 0; r < ns->ranks_cap; r++) {
            if (!ns->by_rank[r])
                continue;
            walk_pool(ns->by_rank[r], fn, ctx);
            walk_draining(ns->by_rank[r], fn, ctx);
        }
    }
}
