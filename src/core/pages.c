/*
 * pages.c: a pool's pages, their side tables and their state transitions
 * (core_internal.h "Pages", "Side entries", "Write leases").
 *
 * Rules
 *   - Every change of a page's state goes through the transitions below:
 *     core__page_reserve (FREE -> RESERVED), core__page_own (RESERVED ->
 *     OWNED), core__page_free (-> FREE), core__page_drain (-> DRAINING),
 *     and the composites built on them (core__owned_leave, _disown,
 *     _unreserve, _release). They keep the state counts, the lists, the
 *     free stack and the key's record in step, and emit the event of each
 *     change as it happens (core.h "Events"); core_check() verifies them.
 *   - A page's ref and its owner agree both ways: a side entry names its
 *     page and the page's ref names the entry; an OWNED page's ref names
 *     the record whose column names the page.
 *   - Side entries are RESERVED or DRAINING pages only, each on its list
 *     (reserved, draining), sorted by deadline; free entries on the side
 *     free list.
 *   - A write lease names an OWNED page; the page's deadline covers it.
 *   - Recency is not here: a transition sets the use count a new page
 *     starts with and clears the column of a page that leaves OWNED;
 *     what a use does is core_internal.h's, eviction is evict.c's.
 */
#include "core/core_internal.h"

#include <stdlib.h>
#include <string.h>

#include "util/xalloc.h"

/* ---------------------------------------------------------- side table */

/* The FREE `page` gets a side entry in `state` (on no list yet). */
static uint32_t side_alloc(core_pool_t *pool, uint32_t page, core_page_state state,
                           int64_t deadline)
{
    HF_ASSERT(page < pool->touched && *core__ref(pool, page) == CORE_NIL);
    HF_ASSERT(state == CORE_PAGE_RESERVED || state == CORE_PAGE_DRAINING);
    uint32_t s;
    if (pool->side_free != CORE_NIL) {
        s = pool->side_free;
        HF_ASSERT(s < pool->side_top && pool->side[s].state == CORE_PAGE_FREE);
        pool->side_free = pool->side[s].next;
    } else {
        if (pool->side_top == pool->side_cap) {
            pool->side_cap = pool->side_cap ? pool->side_cap * 2 : 16;
            if (pool->side_cap > CORE_REF_SIDE - 1)
                abort();
            pool->side = hf_xreallocarray(pool->side, pool->side_cap, sizeof *pool->side);
        }
        s = (uint32_t)pool->side_top++;
    }
    core_side *e = &pool->side[s];
    memset(e, 0, sizeof *e);
    e->page = page;
    e->state = (uint8_t)state;
    e->deadline = deadline;
    e->prev = e->next = CORE_NIL;
    pool->side_live++;
    HF_ASSERT(pool->side_live <= pool->touched);
    *core__ref(pool, page) = CORE_REF_SIDE | s;
    return s;
}

static void side_release(core_pool_t *pool, uint32_t s)
{
    HF_ASSERT(s < pool->side_top && pool->side_live > 0);
    core_side *e = &pool->side[s];
    HF_ASSERT(e->state != CORE_PAGE_FREE && e->prev == CORE_NIL && e->next == CORE_NIL);
    core__keyst_drop(&e->key, &e->key_kind);
    e->state = CORE_PAGE_FREE;
    e->next = pool->side_free;
    pool->side_free = s;
    if (--pool->side_live == 0 && pool->side_cap > 1024) {
        /* a burst of reservations is over: give the table back. Both lists
         * are empty (their lengths sum to side_live); their ends are reset
         * with the table's other indexes so that the static analyzer, which
         * does not know that sum, sees no walk into the freed table. */
        HF_ASSERT(pool->reserved.len == 0 && pool->draining.len == 0);
        hf_xfree(pool->side);
        pool->side = NULL;
        pool->side_top = pool->side_cap = 0;
        pool->side_free = CORE_NIL;
        pool->reserved.head = pool->reserved.tail = CORE_NIL;
        pool->draining.head = pool->draining.tail = CORE_NIL;
    }
}

/* --------------------------------------------------------------- lists */

static void list_init(core_list *list)
{
    list->head = list->tail = CORE_NIL;
    list->len = 0;
}

static void list_remove(core_pool_t *pool, core_list *list, uint32_t s)
{
    core_side *e = &pool->side[s];
    HF_ASSERT(list->len > 0 && (e->prev == CORE_NIL) == (list->head == s) &&
              (e->next == CORE_NIL) == (list->tail == s));
    if (e->prev != CORE_NIL)
        pool->side[e->prev].next = e->next;
    else
        list->head = e->next;
    if (e->next != CORE_NIL)
        pool->side[e->next].prev = e->prev;
    else
        list->tail = e->prev;
    e->prev = e->next = CORE_NIL;
    list->len--;
}

static void list_insert_after(core_pool_t *pool, core_list *list, uint32_t after, uint32_t s)
{
    core_side *e = &pool->side[s];
    e->prev = after;
    if (after == CORE_NIL) {
        e->next = list->head;
        list->head = s;
    } else {
        e->next = pool->side[after].next;
        pool->side[after].next = s;
    }
    if (e->next != CORE_NIL)
        pool->side[e->next].prev = s;
    else
        list->tail = s;
    list->len++;
}

/* Deadlines mostly arrive in order, so the walk back from the tail is short. */
static void list_insert_by_deadline(core_pool_t *pool, core_list *list, uint32_t s)
{
    int64_t deadline = pool->side[s].deadline;
    uint32_t after = list->tail;
    while (after != CORE_NIL && pool->side[after].deadline > deadline)
        after = pool->side[after].prev;
    list_insert_after(pool, list, after, s);
}

void core__side_drop(core_pool_t *pool, uint32_t page)
{
    uint32_t s = core__page_side(pool, page);
    core_side *e = &pool->side[s];
    HF_ASSERT(e->page == page);
    list_remove(pool, e->state == CORE_PAGE_RESERVED ? &pool->reserved : &pool->draining, s);
    side_release(pool, s);
}

/* --------------------------------------------------------------- events */

void core__emit_key(core_pool_t *pool, core_event_type type, uint64_t page, int64_t deadline,
                    hf_slice key)
{
    core_t *core = pool->core;
    if (!core->observer || core->replaying)
        return;
    core_event ev = {type, {pool->ns->name, pool->ns->name_len}, pool->rank, page, key, deadline};
    core->observer(core->observer_ctx, &ev);
}

/* --------------------------------------------------------- write leases */

static size_t wlease_home(const core_pool_t *pool, uint32_t page)
{
    return (page * 0x9e3779b1u) & pool->wlease_mask;
}

core_wlease *core__wlease_find(const core_pool_t *pool, uint32_t page)
{
    if (!pool->wleases)
        return NULL;
    for (size_t s = wlease_home(pool, page);; s = (s + 1) & pool->wlease_mask) {
        if (pool->wleases[s].page == page)
            return &pool->wleases[s];
        if (pool->wleases[s].page == CORE_NIL)
            return NULL;
    }
}

static core_wlease *wlease_place(core_pool_t *pool, core_wlease e)
{
    size_t s = wlease_home(pool, e.page);
    while (pool->wleases[s].page != CORE_NIL)
        s = (s + 1) & pool->wlease_mask;
    pool->wleases[s] = e;
    return &pool->wleases[s];
}

static core_wlease *wlease_get(core_pool_t *pool, uint32_t page)
{
    core_wlease *e = core__wlease_find(pool, page);
    if (e)
        return e;
    if (!pool->wleases || (pool->nwleases + 1) * 2 > pool->wlease_mask + 1) {
        core_wlease *old = pool->wleases;
        size_t old_cap = old ? pool->wlease_mask + 1 : 0;
        size_t cap = old_cap ? old_cap * 2 : 16;
        pool->wleases = hf_xmalloc(cap * sizeof *pool->wleases);
        for (size_t i = 0; i < cap; i++)
            pool->wleases[i] = (core_wlease){CORE_NIL, 0, 0};
        pool->wlease_mask = cap - 1;
        for (size_t i = 0; i < old_cap; i++)
            if (old[i].page != CORE_NIL)
                wlease_place(pool, old[i]);
        hf_xfree(old);
    }
    pool->nwleases++;
    return wlease_place(pool, (core_wlease){page, 0, 0});
}

/* Backward-shift deletion, as in the key index. */
void core__wlease_remove(core_pool_t *pool, core_wlease *e)
{
    size_t hole = (size_t)(e - pool->wleases);
    pool->wleases[hole].page = CORE_NIL;
    pool->nwleases--;
    for (size_t s = (hole + 1) & pool->wlease_mask; pool->wleases[s].page != CORE_NIL;
         s = (s + 1) & pool->wlease_mask) {
        size_t home = wlease_home(pool, pool->wleases[s].page);
        if (((s - home) & pool->wlease_mask) >= ((s - hole) & pool->wlease_mask)) {
            pool->wleases[hole] = pool->wleases[s];
            pool->wleases[s].page = CORE_NIL;
            hole = s;
        }
    }
}

static void wlease_drop(core_pool_t *pool, uint32_t page)
{
    core_wlease *e = pool->nwleases ? core__wlease_find(pool, page) : NULL;
    if (e)
        core__wlease_remove(pool, e);
}

/* One more writer of the OWNED `page`, protected until `end`. */
void core__wlease_add(core_pool_t *pool, uint32_t page, int64_t end)
{
    HF_ASSERT(page < pool->touched && core__page_is_owned(pool, page));
    core_wlease *e = wlease_get(pool, page);
    e->writers++;
    if (end > e->end)
        e->end = end;
    HF_ASSERT(e->writers > 0 && pool->nwleases * 2 <= pool->wlease_mask + 1);
    if (pool->nwleases == 1 || end < pool->wlease_min)
        pool->wlease_min = end;
    int64_t *deadline = core__page_deadline(pool, page);
    if (end > *deadline)
        *deadline = end;
}

void core__page_write_lease(core_pool_t *pool, uint32_t page, int64_t now)
{
    core__wlease_add(pool, page, now + pool->core->config.write_lease_ms);
    pool->counters.write_leases++;
    core__emit(pool, CORE_EV_WRITE_LEASE, page, now + pool->core->config.write_lease_ms);
}

void core__page_write_done(core_pool_t *pool, uint32_t page, int64_t now)
{
    core_wlease *e = pool->nwleases ? core__wlease_find(pool, page) : NULL;
    if (!e)
        return;
    if (--e->writers > 0) {
        core__emit(pool, CORE_EV_WRITE_DONE, page, *core__page_deadline(pool, page));
        return;
    }
    core__wlease_remove(pool, e);
    int64_t *deadline = core__page_deadline(pool, page);
    int64_t until = now + pool->core->config.read_lease_ms;
    if (until < *deadline)
        *deadline = until;
    pool->counters.write_leases_ended++;
    core__emit(pool, CORE_EV_WRITE_DONE, page, *deadline);
}

static void wlease_expire(core_pool_t *pool, int64_t now)
{
    if (pool->nwleases == 0 || pool->wlease_min > now)
        return;
    int64_t min = INT64_MAX;
    for (size_t s = 0; s <= pool->wlease_mask;) {
        core_wlease *e = &pool->wleases[s];
        if (e->page != CORE_NIL && e->end <= now) {
            uint32_t page = e->page, writers = e->writers;
            core__wlease_remove(pool, e); /* may shift a later entry into s: look again */
            pool->counters.write_leases_expired++;
            for (uint32_t w = 0; w < writers || w == 0; w++)
                core__emit(pool, CORE_EV_WRITE_DONE, page, *core__page_deadline(pool, page));
            continue;
        }
        if (e->page != CORE_NIL && e->end < min)
            min = e->end;
        s++;
    }
    pool->wlease_min = min;
}

/* ---------------------------------------------------------- page states */

void core__ensure_chunk(core_pool_t *pool, uint32_t page)
{
    size_t chunk = page >> CORE_CHUNK_SHIFT;
    if (chunk < pool->nchunks)
        return;
    if (chunk >= pool->chunks_cap) {
        size_t cap = pool->chunks_cap ? pool->chunks_cap * 2 : 4;
        while (cap <= chunk)
            cap *= 2;
        pool->refs = hf_xreallocarray(pool->refs, cap, sizeof *pool->refs);
        pool->chunks_cap = cap;
    }
    for (size_t c = pool->nchunks; c <= chunk; c++)
        pool->refs[c] = hf_xmalloc(CORE_CHUNK_PAGES * sizeof(uint32_t));
    pool->nchunks = chunk + 1;
}

void core__free_stack_push(core_pool_t *pool, uint32_t page)
{
    if (pool->nfree == pool->free_cap) {
        pool->free_cap = pool->free_cap ? pool->free_cap * 2 : 64;
        pool->free_stack = hf_xreallocarray(pool->free_stack, pool->free_cap, sizeof(uint32_t));
    }
    pool->free_stack[pool->nfree++] = page;
}

void core__free_stack_remove(core_pool_t *pool, uint32_t page)
{
    for (size_t i = pool->nfree; i-- > 0;) {
        if (pool->free_stack[i] == page) {
            memmove(&pool->free_stack[i], &pool->free_stack[i + 1],
                    (pool->nfree - i - 1) * sizeof(uint32_t));
            pool->nfree--;
            return;
        }
    }
}

/* The page (whose side entry or column was let go) becomes FREE. */
void core__page_free(core_pool_t *pool, uint32_t page)
{
    HF_ASSERT(page < pool->touched);
    core__emit(pool, CORE_EV_FREE, page, 0);
    *core__ref(pool, page) = CORE_NIL;
    core__free_stack_push(pool, page);
    /* a replay pushes every FREE it applies: core_apply_finish rebuilds the stack */
    HF_ASSERT(pool->nfree <= pool->touched || (pool->core->replaying && !pool->core->live_apply));
}

/* page was taken from the free stack or the mark, or evicted. */
void core__page_reserve(core_pool_t *pool, uint32_t page, const core_key *key, int64_t deadline)
{
    uint32_t s = side_alloc(pool, page, CORE_PAGE_RESERVED, deadline);
    core_side *e = &pool->side[s];
    HF_ASSERT(core__kind_valid(pool->ns, key->kind));
    core__keyst_set(&e->key, &e->key_kind, key);
    list_insert_by_deadline(pool, &pool->reserved, s);
    HF_ASSERT(pool->reserved.len <= pool->side_live);
    pool->counters.reservations++;
    if (pool->core->observer && !pool->core->replaying) {
        char buf[CORE_KEY_TEXT_MAX];
        core__emit_key(pool, CORE_EV_RESERVE, page, deadline,
                       core__keyst_text(pool->ns, &e->key, e->key_kind, buf));
    }
}

/* A RESERVED page becomes OWNED by its key, whose record is `id` (CORE_NIL:
 * none yet) and which owns no page in this pool. */
void core__page_own(core_pool_t *pool, uint32_t page, uint32_t id, const core_key *key)
{
    core_ns *ns = pool->ns;
    uint32_t s = core__page_side(pool, page);
    core_side *e = &pool->side[s];
    HF_ASSERT(e->state == CORE_PAGE_RESERVED && e->page == page && e->key_kind == key->kind);
    list_remove(pool, &pool->reserved, s);
    if (id == CORE_NIL)
        id = core__rec_new(ns, pool->core, key->hash, &e->key, &e->key_kind);
    side_release(pool, s);
    uint8_t *rec = core__krec(ns, id);
    HF_ASSERT(core__krec_pages(ns, rec)[pool->col] == CORE_NIL &&
              core__rec_bits(rec)[pool->col] == 0); /* a key owns one page per pool */
    core__krec_pages(ns, rec)[pool->col] = page;
    core__krec_deadlines(ns, rec)[pool->col] = 0;
    core__rec_bits(rec)[pool->col] = CORE_USE_INSERT << CORE_REC_USE_SHIFT;
    *core__ref(pool, page) = id;
    pool->nowned++;
    HF_ASSERT(pool->nowned <= pool->touched);
    pool->counters.confirmations++;
    core__emit(pool, CORE_EV_OWN, page, 0);
}

/* The page, off every list and without a key, drains until `deadline`. */
void core__page_drain(core_pool_t *pool, uint32_t page, int64_t deadline)
{
    uint32_t s = side_alloc(pool, page, CORE_PAGE_DRAINING, deadline);
    list_insert_by_deadline(pool, &pool->draining, s);
    core__emit(pool, CORE_EV_DRAIN, page, deadline);
}

/* An OWNED page leaves OWNED: its column is cleared (the record stays, for
 * the caller to demote its other ranks and then core__rec_release_if_empty). The
 * caller gives the page its new state. Returns the record id; *deadline
 * receives the column's deadline. */
uint32_t core__owned_leave(core_pool_t *pool, uint32_t page, int64_t *deadline)
{
    core_ns *ns = pool->ns;
    uint32_t id = core__page_owner(pool, page);
    HF_ASSERT(page < pool->touched && core__ref_owned(id) && id < ns->rec_top);
    uint8_t *rec = core__krec(ns, id);
    HF_ASSERT(core__krec_pages(ns, rec)[pool->col] == page && pool->nowned > 0);
    core__bits_undemote(pool, &core__rec_bits(rec)[pool->col]);
    core__rec_bits(rec)[pool->col] = 0;
    core__krec_pages(ns, rec)[pool->col] = CORE_NIL;
    int64_t *d = &core__krec_deadlines(ns, rec)[pool->col];
    if (deadline)
        *deadline = *d;
    *d = 0;
    pool->nowned--;
    wlease_drop(pool, page);
    *core__ref(pool, page) = CORE_NIL;
    return id;
}

/* An OWNED page loses its key: FREE now, or DRAINING while leased. Returns
 * the record (not released). */
uint32_t core__page_disown(core_pool_t *pool, uint32_t page, int64_t now)
{
    int64_t deadline;
    uint32_t id = core__owned_leave(pool, page, &deadline);
    int64_t floor = core__lease_floor(pool->core);
    if (floor > deadline)
        deadline = floor;
    if (deadline > now)
        core__page_drain(pool, page, deadline);
    else
        core__page_free(pool, page);
    return id;
}

/* A RESERVED page becomes FREE at once. */
void core__page_unreserve(core_pool_t *pool, uint32_t page)
{
    HF_ASSERT(core__page_state(pool, page) == CORE_PAGE_RESERVED);
    core__side_drop(pool, page);
    core__page_free(pool, page);
}

/* A release: the page drains for the release grace, so that the same
 * release, replayed by a client that did not see the answer, finds it
 * DRAINING (refused, harmless) and never a page reserved for someone else. */
void core__page_release(core_pool_t *pool, uint32_t page, int64_t now)
{
    int64_t grace = pool->core->config.release_grace_ms;
    if (grace <= 0) {
        core__page_unreserve(pool, page);
        return;
    }
    uint32_t s = core__page_side(pool, page);
    HF_ASSERT(pool->side[s].state == CORE_PAGE_RESERVED);
    list_remove(pool, &pool->reserved, s);
    core__emit(pool, CORE_EV_FREE, page, 0); /* the log has no RESERVED -> DRAINING */
    core_side *e = &pool->side[s];
    core__keyst_drop(&e->key, &e->key_kind);
    e->state = CORE_PAGE_DRAINING;
    e->deadline = now + grace;
    list_insert_by_deadline(pool, &pool->draining, s);
    core__emit(pool, CORE_EV_DRAIN, page, e->deadline);
}

/* ------------------------------------------------------------- leases */

void core_pool_expire(core_pool_t *pool, int64_t now)
{
    uint32_t s;
    while ((s = pool->reserved.head) != CORE_NIL && pool->side[s].deadline <= now) {
        core__page_unreserve(pool, pool->side[s].page);
        pool->counters.expired_reservations++;
    }
    while ((s = pool->draining.head) != CORE_NIL && pool->side[s].deadline <= now) {
        uint32_t page = pool->side[s].page;
        core__side_drop(pool, page);
        core__page_free(pool, page);
    }
    wlease_expire(pool, now);
    HF_ASSERT(core__pool_counts_agree(pool));
}

/* --------------------------------------------------------------- pools */

core_pool_t *core__pool_new(core_t *core, core_ns *ns, uint32_t rank, uint64_t num_pages)
{
    HF_ASSERT(num_pages <= CORE_MAX_PAGES_LIMIT);
    core_pool_t *pool = hf_xcalloc(1, sizeof *pool);
    pool->core = core;
    pool->ns = ns;
    pool->rank = rank;
    pool->num_pages = num_pages;
    pool->side_free = CORE_NIL;
    list_init(&pool->reserved);
    list_init(&pool->draining);
    return pool;
}

/* Free the pool and all it holds. */
void core__pool_release(core_pool_t *pool)
{
    for (size_t c = 0; c < pool->nchunks; c++)
        hf_xfree(pool->refs[c]);
    hf_xfree(pool->refs);
    for (size_t s = 0; s < pool->side_top; s++)
        if (pool->side[s].key_kind == CORE_KEY_EXT)
            hf_xfree(pool->side[s].key.ext.ptr);
    hf_xfree(pool->side);
    hf_xfree(pool->free_stack);
    hf_xfree(pool->wleases);
    hf_xfree(pool->demoted);
    hf_xfree(pool);
}
