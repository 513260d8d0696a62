/*
 * check.c: the invariant checker (core_check in core.h).
 *
 * It trusts nothing the operations maintain incrementally: it recounts page
 * states from the page refs and the key records, walks every list, stack and
 * the key index, and checks each against the others. What it proves:
 *
 * per namespace
 *   - one column per pool, in rank order, each pool knowing its column; the
 *     record layout is the one for that many columns;
 *   - every record below rec_top is live (a key, at least one page) or on
 *     the free list, once; the live count is right;
 *   - ownership, both ways: a live record's column c names a page of pool
 *     c whose ref names the record back (so a key owns at most one page per
 *     pool), and a column without a page has no bits and no deadline;
 *   - the key index holds exactly the live records, each under its key's
 *     tag, and finds each live record from its own key: so no two records
 *     hold the same key (and no key owns two pages in a pool);
 * per pool
 *   - every page 0..num_pages-1 is in exactly one state, and the state
 *     counts add up to num_pages; an OWNED page's record names it back (so a
 *     page is owned by at most one key);
 *   - FREE pages below the high-water mark are exactly the free stack, once each;
 *   - side entries: each live one belongs to the RESERVED or DRAINING page
 *     that names it, the free ones are on the side free list; the
 *     reservation list holds exactly the RESERVED pages, the draining list
 *     exactly the DRAINING pages, with consistent links and deadline order;
 *     RESERVED entries hold a key, DRAINING ones none;
 *   - recency: use counts are at most CORE_USE_MAX, no column is PINNED
 *     between calls, every DEMOTED column is on its pool's demoted stack and
 *     the count of them is right, and the clock hand is below num_pages;
 *   - every write lease names an OWNED page once, with a writer, and the
 *     page's deadline protects it at least until the lease ends; the
 *     lease table's count and its lower bound of the ends are right.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core_internal.h"
#include "util/xalloc.h"

typedef struct check_ctx {
    char *err;
    size_t errlen;
    const core_ns *ns;
    const core_pool_t *pool; /* NULL: a namespace-wide check */
} check_ctx;

__attribute__((format(printf, 2, 3))) static int fail(check_ctx *ctx, const char *fmt, ...)
{
    if (ctx->errlen == 0)
        return -1;
    int off = ctx->pool ? snprintf(ctx->err, ctx->errlen, "pool %s/%" PRIu32 ": ", ctx->ns->name,
                                   ctx->pool->rank)
                        : snprintf(ctx->err, ctx->errlen, "namespace %s: ", ctx->ns->name);
    if (off < 0 || (size_t)off >= ctx->errlen)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->err + off, ctx->errlen - (size_t)off, fmt, ap);
    va_end(ap);
    return -1;
}


/* Walk a list; every member must be in `state`; deadlines sorted. */
static int check_list(check_ctx *ctx, const core_list *list, core_page_state state,
                      const char *name)
{
    const core_pool_t *pool = ctx->pool;
    uint64_t len = 0;
    uint32_t prev = CORE_NIL;
    for (uint32_t s = list->head; s != CORE_NIL; s = pool->side[s].next) {
        if (s >= pool->side_top)
            return fail(ctx, "%s list holds side entry %u beyond the table", name, s);
        const core_side *e = &pool->side[s];
        if (e->state != state)
            return fail(ctx, "%s list holds page %u in state %d", name, e->page, e->state);
        if (e->prev != prev)
            return fail(ctx, "%s list: page %u has a wrong prev link", name, e->page);
        if (prev != CORE_NIL && pool->side[prev].deadline > e->deadline)
            return fail(ctx, "%s list: deadlines out of order at page %u", name, e->page);
        if (++len > pool->side_top)
            return fail(ctx, "%s list has a cycle", name);
        prev = s;
    }
    if (list->tail != prev)
        return fail(ctx, "%s list: wrong tail", name);
    if (list->len != len)
        return fail(ctx, "%s list: length %" PRIu64 " but %" PRIu64 " linked", name, list->len,
                    len);
    return 0;
}

/* How many times each page below the mark is on a stack (the free or the
 * demoted one), counting up to 2; NULL (a failure) if the stack holds a
 * page at or above the mark. The caller frees it. */
static uint8_t *stack_counts(check_ctx *ctx, const uint32_t *stack, size_t n, const char *name)
{
    const core_pool_t *pool = ctx->pool;
    uint8_t *count = hf_xcalloc(pool->touched ? pool->touched : 1, 1);
    for (size_t i = 0; i < n; i++) {
        if (stack[i] >= pool->touched) {
            fail(ctx, "%s stack holds page %u above the mark", name, stack[i]);
            hf_xfree(count);
            return NULL;
        }
        if (count[stack[i]] < 2)
            count[stack[i]]++;
    }
    return count;
}

static int check_free_stack(check_ctx *ctx, uint64_t free_refs)
{
    const core_pool_t *pool = ctx->pool;
    if (pool->nfree != free_refs)
        return fail(ctx, "%" PRIu64 " FREE pages below the mark but %zu on the free stack",
                    free_refs, pool->nfree);
    uint8_t *count = stack_counts(ctx, pool->free_stack, pool->nfree, "free");
    if (!count)
        return -1;
    int rc = 0;
    for (size_t i = 0; i < pool->nfree && rc == 0; i++) {
        uint32_t p = pool->free_stack[i];
        if (core__page_state(pool, p) != CORE_PAGE_FREE)
            rc = fail(ctx, "free stack holds page %u in state %d", p, core__page_state(pool, p));
        else if (count[p] > 1)
            rc = fail(ctx, "page %u is on the free stack twice", p);
    }
    hf_xfree(count);
    return rc;
}

static int check_side(check_ctx *ctx)
{
    const core_pool_t *pool = ctx->pool;
    size_t live = 0, free_len = 0;
    for (size_t s = 0; s < pool->side_top; s++) {
        const core_side *e = &pool->side[s];
        if (e->state == CORE_PAGE_FREE) {
            if (e->key_kind != CORE_KEY_NONE)
                return fail(ctx, "unused side entry %zu holds a key", s);
            continue;
        }
        live++;
        if (e->state != CORE_PAGE_RESERVED && e->state != CORE_PAGE_DRAINING)
            return fail(ctx, "side entry %zu in state %d", s, e->state);
        if (e->page >= pool->touched || *core__ref(pool, e->page) != (CORE_REF_SIDE | (uint32_t)s))
            return fail(ctx, "side entry %zu names page %u, which does not name it", s, e->page);
        bool has_key = e->key_kind != CORE_KEY_NONE;
        if (has_key != (e->state == CORE_PAGE_RESERVED) ||
            (has_key && !core__keyst_canonical(pool->ns, pool->core, &e->key, e->key_kind)))
            return fail(ctx, "page %u in state %d %s a key", e->page, e->state,
                        has_key ? "holds" : "lacks");
    }
    if (live != pool->side_live)
        return fail(ctx, "%zu live side entries but a count of %zu", live, pool->side_live);
    for (uint32_t s = pool->side_free; s != CORE_NIL; s = pool->side[s].next) {
        if (s >= pool->side_top || pool->side[s].state != CORE_PAGE_FREE)
            return fail(ctx, "side free list holds entry %u, which is in use", s);
        if (++free_len > pool->side_top)
            return fail(ctx, "side free list has a cycle");
    }
    if (free_len + live != pool->side_top)
        return fail(ctx, "%zu side entries, %zu live and %zu free", pool->side_top, live, free_len);
    return 0;
}

static int check_write_leases(check_ctx *ctx)
{
    const core_pool_t *pool = ctx->pool;
    size_t n = 0;
    for (size_t s = 0; pool->wleases && s <= pool->wlease_mask; s++) {
        const core_wlease *e = &pool->wleases[s];
        if (e->page == CORE_NIL)
            continue;
        n++;
        if (e->page >= pool->touched || core__page_state(pool, e->page) != CORE_PAGE_OWNED)
            return fail(ctx, "write lease on page %u, which is not OWNED", e->page);
        if (e->writers == 0)
            return fail(ctx, "write lease on page %u without a writer", e->page);
        uint8_t *rec = core__krec(pool->ns, *core__ref(pool, e->page));
        if (core__krec_deadlines(pool->ns, rec)[pool->col] < e->end)
            return fail(ctx, "page %u is protected less long than its write lease", e->page);
        if (e->end < pool->wlease_min)
            return fail(ctx, "write lease of page %u ends before the table's minimum", e->page);
        for (size_t t = s + 1; t <= pool->wlease_mask; t++)
            if (pool->wleases[t].page == e->page)
                return fail(ctx, "page %u has two write leases", e->page);
    }
    if (n != pool->nwleases)
        return fail(ctx, "%zu write leases but a count of %zu", n, pool->nwleases);
    return 0;
}

static int check_demoted(check_ctx *ctx)
{
    const core_pool_t *pool = ctx->pool;
    uint64_t demoted = 0;
    if (pool->hand >= pool->num_pages && !(pool->hand == 0 && pool->num_pages == 0))
        return fail(ctx, "clock hand %u is not below num_pages", pool->hand);
    uint8_t *listed = stack_counts(ctx, pool->demoted, pool->ndemoted_stack, "demoted");
    if (!listed)
        return -1;
    int rc = 0;
    for (uint32_t p = 0; p < pool->touched && rc == 0; p++) {
        uint32_t ref = *core__ref(pool, p);
        if (!core__ref_owned(ref))
            continue;
        uint8_t bits = core__krec(pool->ns, ref)[CORE_REC_BITS + pool->col];
        if (!(bits & CORE_REC_DEMOTED))
            continue;
        demoted++;
        if (!listed[p])
            rc = fail(ctx, "demoted page %u is not on the demoted stack", p);
    }
    hf_xfree(listed);
    if (rc == 0 && pool->ndemoted != demoted)
        return fail(ctx, "%" PRIu64 " demoted pages but a count of %" PRIu64, demoted,
                    pool->ndemoted);
    return rc;
}

static int check_pool(check_ctx *ctx)
{
    const core_pool_t *pool = ctx->pool;
    const core_ns *ns = ctx->ns;
    uint64_t count[4] = {0, 0, 0, 0};
    if (pool->touched > pool->num_pages)
        return fail(ctx, "mark %" PRIu64 " above num_pages", pool->touched);
    if (pool->touched > (uint64_t)pool->nchunks * CORE_CHUNK_PAGES)
        return fail(ctx, "mark %" PRIu64 " beyond the page chunks", pool->touched);
    for (uint32_t p = 0; p < pool->touched; p++) {
        uint32_t ref = *core__ref(pool, p);
        if (ref == CORE_NIL) {
            count[CORE_PAGE_FREE]++;
        } else if (ref & CORE_REF_SIDE) {
            uint32_t s = ref & ~CORE_REF_SIDE;
            if (s >= pool->side_top || pool->side[s].page != p)
                return fail(ctx, "page %u names side entry %u, which does not name it", p, s);
            uint8_t st = pool->side[s].state;
            if (st != CORE_PAGE_RESERVED && st != CORE_PAGE_DRAINING)
                return fail(ctx, "page %u names side entry %u in state %d", p, s, st);
            count[st]++;
        } else {
            if (ref >= ns->rec_top)
                return fail(ctx, "page %u names record %u beyond the records", p, ref);
            uint8_t *rec = core__krec(ns, ref);
            if (rec[CORE_REC_KIND] == CORE_KEY_NONE || core__krec_pages(ns, rec)[pool->col] != p)
                return fail(ctx, "OWNED page %u names record %u, which does not own it", p, ref);
            count[CORE_PAGE_OWNED]++;
        }
    }
    uint64_t total = count[0] + count[1] + count[2] + count[3] + (pool->num_pages - pool->touched);
    if (total != pool->num_pages)
        return fail(ctx, "state counts add up to %" PRIu64, total);
    if (check_side(ctx) || check_free_stack(ctx, count[CORE_PAGE_FREE]) ||
        check_list(ctx, &pool->reserved, CORE_PAGE_RESERVED, "reserved") ||
        check_list(ctx, &pool->draining, CORE_PAGE_DRAINING, "draining"))
        return -1;
    if (pool->nowned != count[CORE_PAGE_OWNED] || pool->reserved.len != count[CORE_PAGE_RESERVED] ||
        pool->draining.len != count[CORE_PAGE_DRAINING])
        return fail(ctx, "counts disagree with the pages (owned %" PRIu64 " vs %" PRIu64 ")",
                    pool->nowned, count[CORE_PAGE_OWNED]);
    if (check_demoted(ctx))
        return -1;
    return check_write_leases(ctx);
}

static int check_records(check_ctx *ctx, const core_t *core)
{
    const core_ns *ns = ctx->ns;
    if (ns->off_pages != CORE_REC_OFF_PAGES(ns->ncols) ||
        ns->off_deadlines != CORE_REC_OFF_DEADLINES(ns->ncols) ||
        ns->rec_size != CORE_REC_SIZE(ns->ncols))
        return fail(ctx, "record layout is not the one for %u columns", ns->ncols);
    if (ns->rec_top > (uint64_t)ns->nrchunks * CORE_REC_CHUNK)
        return fail(ctx, "%u records beyond the record chunks", ns->rec_top);
    if (ns->rec_top > 0 && ns->rec_top - 1 >= ns->id_mask)
        return fail(ctx, "record id %u does not fit the index's id bits", ns->rec_top - 1);
    uint8_t *on_free = hf_xcalloc(ns->rec_top ? ns->rec_top : 1, 1);
    int rc = 0;
    uint64_t nfree = 0, live = 0;
    for (uint32_t id = ns->rec_free; id != CORE_NIL && rc == 0;
         id = core__krec_pages(ns, core__krec(ns, id))[0]) {
        if (id >= ns->rec_top)
            rc = fail(ctx, "record free list holds %u beyond the records", id);
        else if (on_free[id]++)
            rc = fail(ctx, "record free list holds %u twice (or loops)", id);
        else if (core__krec(ns, id)[CORE_REC_KIND] != CORE_KEY_NONE)
            rc = fail(ctx, "record free list holds live record %u", id);
        nfree++;
    }
    uint64_t *owned = hf_xcalloc(ns->ncols ? ns->ncols : 1, sizeof *owned);
    for (uint32_t id = 0; id < ns->rec_top && rc == 0; id++) {
        uint8_t *rec = core__krec(ns, id);
        uint8_t kind = rec[CORE_REC_KIND];
        if (kind == CORE_KEY_NONE) {
            if (!on_free[id])
                rc = fail(ctx, "record %u is neither live nor on the free list", id);
            continue;
        }
        live++;
        if (!core__keyst_canonical(ns, core, core__krec_key(rec), kind)) {
            rc = fail(ctx, "record %u has key kind %u, or a key not in its canonical form", id,
                      kind);
            break;
        }
        const uint32_t *pages = core__krec_pages(ns, rec);
        const int64_t *deadlines = core__krec_deadlines(ns, rec);
        uint32_t npages = 0;
        for (uint32_t c = 0; c < ns->ncols && rc == 0; c++) {
            const core_pool_t *pool = ns->by_col[c];
            uint8_t bits = rec[CORE_REC_BITS + c];
            if (pages[c] == CORE_NIL) {
                if (bits != 0 || deadlines[c] != 0)
                    rc = fail(ctx, "record %u has bits or a deadline in column %u without a page",
                              id, c);
                continue;
            }
            npages++;
            owned[c]++;
            if (pages[c] >= pool->touched || *core__ref(pool, pages[c]) != id)
                rc = fail(ctx, "record %u owns page %u of rank %u, which does not name it", id,
                          pages[c], pool->rank);
            else if (core__bits_use(bits) > CORE_USE_MAX)
                rc = fail(ctx, "record %u column %u has a use count of %u", id, c,
                          core__bits_use(bits));
            else if (bits & CORE_REC_PINNED)
                rc = fail(ctx, "record %u column %u is left pinned", id, c);
            else if (bits & ~(CORE_REC_USE | CORE_REC_DEMOTED))
                rc = fail(ctx, "record %u column %u has unknown bits %#x", id, c, bits);
        }
        if (rc == 0 && npages == 0)
            rc = fail(ctx, "live record %u owns no page", id);
    }
    for (uint32_t c = 0; c < ns->ncols && rc == 0; c++)
        if (owned[c] != ns->by_col[c]->nowned)
            rc = fail(ctx, "records own %" PRIu64 " pages of rank %u, which counts %" PRIu64,
                      owned[c], ns->by_col[c]->rank, ns->by_col[c]->nowned);
    hf_xfree(owned);
    hf_xfree(on_free);
    if (rc)
        return rc;
    if (live != ns->nrecs || live + nfree != ns->rec_top)
        return fail(ctx, "%" PRIu64 " live and %" PRIu64 " free records of %u, count %" PRIu64,
                    live, nfree, ns->rec_top, ns->nrecs);
    /* the index */
    uint64_t indexed = 0;
    for (size_t i = 0; ns->slots && i <= ns->slot_mask; i++) {
        uint32_t slot = ns->slots[i];
        if (slot == CORE_NIL)
            continue;
        uint32_t id = slot & ns->id_mask;
        indexed++;
        if (id >= ns->rec_top || core__krec(ns, id)[CORE_REC_KIND] == CORE_KEY_NONE)
            return fail(ctx, "key index points at record %u, which is not live", id);
        core_key key;
        uint8_t *rec = core__krec(ns, id);
        core__keyst_to_key(ns, core, core__krec_key(rec), rec[CORE_REC_KIND], &key);
        if (slot != core__slot_make(ns, id, key.hash))
            return fail(ctx, "key index slot of record %u has a tag that is not its key's", id);
    }
    if (indexed != live || ns->nkeys != live)
        return fail(ctx, "%" PRIu64 " live records but %" PRIu64 " indexed (count %zu)", live,
                    indexed, ns->nkeys);
    if (ns->slots && (ns->nkeys * 4 > (ns->slot_mask + 1) * 3))
        return fail(ctx, "key index above 3/4 full");
    for (uint32_t id = 0; id < ns->rec_top; id++) {
        uint8_t *rec = core__krec(ns, id);
        if (rec[CORE_REC_KIND] == CORE_KEY_NONE)
            continue;
        core_key key;
        core__keyst_to_key(ns, core, core__krec_key(rec), rec[CORE_REC_KIND], &key);
        uint32_t found = core__index_find(ns, &key);
        if (found != id)
            return fail(ctx, "key of record %u is found at record %d: two records or a lost key",
                        id, found == CORE_NIL ? -1 : (int)found);
    }
    return 0;
}

int core_check(const core_t *core, char *err, size_t errlen)
{
    if (errlen)
        err[0] = '\0';
    for (size_t n = 0; n < core->nns; n++) {
        const core_ns *ns = core->namespaces[n];
        check_ctx nctx = {err, errlen, ns, NULL};
        uint32_t npools = 0;
        for (uint32_t r = 0; r < ns->ranks_cap; r++) {
            const core_pool_t *pool = ns->by_rank[r];
            if (!pool)
                continue;
            check_ctx ctx = {err, errlen, ns, pool};
            if (pool->rank != r || pool->ns != ns)
                return fail(&ctx, "pool filed under the wrong rank or namespace");
            if (pool->col >= ns->ncols || ns->by_col[pool->col] != pool)
                return fail(&ctx, "pool's column %u does not name it", pool->col);
            if (npools > 0 && ns->by_col[npools - 1]->rank >= r)
                return fail(&ctx, "columns are not in rank order");
            if (pool->col != npools)
                return fail(&ctx, "pool has column %u, its rank order gives %u", pool->col, npools);
            npools++;
        }
        if (npools != ns->npools || npools != ns->ncols)
            return fail(&nctx, "counts %u pools and %u columns, has %u", ns->npools, ns->ncols,
                        npools);
        if (check_records(&nctx, core))
            return -1;
        for (uint32_t r = 0; r < ns->ranks_cap; r++) {
            if (!ns->by_rank[r])
                continue;
            check_ctx ctx = {err, errlen, ns, ns->by_rank[r]};
            if (check_pool(&ctx))
                return -1;
        }
    }
    return 0;
}
