/*
 * check.c: the invariant checker (core_check in core.h).
 *
 * It trusts nothing the operations maintain incrementally: it recounts page
 * states from the records, walks every list and the key index, and checks
 * each against the others. What it proves, per pool:
 *   - every page 0..num_pages-1 is in exactly one state, and the state
 *     counts add up to num_pages;
 *   - FREE pages below the high-water mark are exactly the free stack, once each;
 *   - the reservation list holds exactly the RESERVED pages, the draining
 *     list exactly the DRAINING pages, with consistent links and deadline
 *     order; the OWNED count is right;
 *   - recency: use counts are at most CORE_USE_MAX, only OWNED pages carry
 *     a count, DEMOTED or PINNED, no page is PINNED between calls, every
 *     DEMOTED page is on the demoted stack and the count of them is right,
 *     and the clock hand is below num_pages;
 *   - the key index holds exactly the OWNED pages and finds each OWNED page
 *     from its own key: so no key owns two pages and no page has two owners;
 *   - every write lease names an OWNED page once, with a writer, and the
 *     page's deadline protects it at least until the lease ends; the
 *     lease table's count and its lower bound of the ends are right.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/core_internal.h"
#include "util/xalloc.h"

typedef struct check_ctx {
    char *err;
    size_t errlen;
    const core_pool_t *pool;
} check_ctx;

static int fail(check_ctx *ctx, const char *fmt, ...)
{
    if (ctx->errlen == 0)
        return -1;
    int off = snprintf(ctx->err, ctx->errlen, "pool %s/%" PRIu32 ": ", ctx->pool->ns->name,
                       ctx->pool->rank);
    if (off < 0 || (size_t)off >= ctx->errlen)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->err + off, ctx->errlen - (size_t)off, fmt, ap);
    va_end(ap);
    return -1;
}

/* Walk a list; every member must be in `state`; deadlines sorted if asked. */
static int check_list(check_ctx *ctx, const core_list *list, core_page_state state,
                      int sorted, const char *name)
{
    const core_pool_t *pool = ctx->pool;
    uint64_t len = 0;
    uint32_t prev = CORE_NIL;
    for (uint32_t p = list->head; p != CORE_NIL; p = core__rec(pool, p)->next) {
        if (p >= pool->touched)
            return fail(ctx, "%s list holds page %u above the mark", name, p);
        const core_page_rec *rec = core__rec(pool, p);
        if (core__rec_state(rec) != state)
            return fail(ctx, "%s list holds page %u in state %d", name, p, core__rec_state(rec));
        if (rec->prev != prev)
            return fail(ctx, "%s list: page %u has a wrong prev link", name, p);
        if (sorted && prev != CORE_NIL && core__rec(pool, prev)->deadline > rec->deadline)
            return fail(ctx, "%s list: deadlines out of order at page %u", name, p);
        if (++len > pool->touched)
            return fail(ctx, "%s list has a cycle", name);
        prev = p;
    }
    if (list->tail != prev)
        return fail(ctx, "%s list: wrong tail", name);
    if (list->len != len)
        return fail(ctx, "%s list: length %" PRIu64 " but %" PRIu64 " linked", name, list->len, len);
    return 0;
}

static int check_free_stack(check_ctx *ctx, uint64_t free_records)
{
    const core_pool_t *pool = ctx->pool;
    if (pool->nfree != free_records)
        return fail(ctx, "%" PRIu64 " FREE records but %zu on the free stack", free_records,
                    pool->nfree);
    uint8_t *seen = hf_xcalloc(pool->touched ? pool->touched : 1, 1);
    int rc = 0;
    for (size_t i = 0; i < pool->nfree && rc == 0; i++) {
        uint32_t p = pool->free_stack[i];
        if (p >= pool->touched)
            rc = fail(ctx, "free stack holds page %u above the mark", p);
        else if (core__rec_state(core__rec(pool, p)) != CORE_PAGE_FREE)
            rc = fail(ctx, "free stack holds page %u in state %d", p, core__rec_state(core__rec(pool, p)));
        else if (seen[p]++)
            rc = fail(ctx, "page %u is on the free stack twice", p);
    }
    hf_xfree(seen);
    return rc;
}

static int check_index(check_ctx *ctx, uint64_t owned)
{
    const core_pool_t *pool = ctx->pool;
    uint64_t indexed = 0;
    for (size_t i = 0; pool->slots && i <= pool->slot_mask; i++) {
        uint32_t slot = pool->slots[i];
        if (slot == CORE_NIL)
            continue;
        uint32_t p = core__slot_page(pool, slot);
        indexed++;
        if (p >= pool->touched || core__rec_state(core__rec(pool, p)) != CORE_PAGE_OWNED)
            return fail(ctx, "key index points at page %u, which is not OWNED", p);
        if (slot != core__slot_make(pool, p, core__rec(pool, p)->hash))
            return fail(ctx, "key index slot of page %u has a tag that is not its key's", p);
    }
    if (indexed != owned || pool->nkeys != owned)
        return fail(ctx, "%" PRIu64 " OWNED pages but %" PRIu64 " indexed (count %zu)", owned,
                    indexed, pool->nkeys);
    for (uint32_t p = 0; p < pool->touched; p++) {
        const core_page_rec *rec = core__rec(pool, p);
        if (core__rec_state(rec) != CORE_PAGE_OWNED)
            continue;
        core_key key;
        core__rec_to_key(pool->core, rec, &key);
        uint32_t found = core__index_find(pool, &key);
        if (found != p)
            return fail(ctx, "key of page %u is found at page %d: two owners or a lost key", p,
                        found == CORE_NIL ? -1 : (int)found);
    }
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
        if (e->page >= pool->touched || core__rec_state(core__rec(pool, e->page)) != CORE_PAGE_OWNED)
            return fail(ctx, "write lease on page %u, which is not OWNED", e->page);
        if (e->writers == 0)
            return fail(ctx, "write lease on page %u without a writer", e->page);
        if (core__rec(pool, e->page)->deadline < e->end)
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

static int check_demoted(check_ctx *ctx, uint64_t demoted)
{
    const core_pool_t *pool = ctx->pool;
    if (pool->ndemoted != demoted)
        return fail(ctx, "%" PRIu64 " demoted pages but a count of %" PRIu64, demoted,
                    pool->ndemoted);
    if (pool->hand >= pool->num_pages && !(pool->hand == 0 && pool->num_pages == 0))
        return fail(ctx, "clock hand %u is not below num_pages", pool->hand);
    uint8_t *listed = hf_xcalloc(pool->touched ? pool->touched : 1, 1);
    int rc = 0;
    for (size_t i = 0; i < pool->ndemoted_stack && rc == 0; i++) {
        uint32_t p = pool->demoted[i];
        if (p >= pool->touched)
            rc = fail(ctx, "demoted stack holds page %u above the mark", p);
        else
            listed[p] = 1;
    }
    for (uint32_t p = 0; p < pool->touched && rc == 0; p++)
        if ((core__rec(pool, p)->bits & CORE_REC_DEMOTED) && !listed[p])
            rc = fail(ctx, "demoted page %u is not on the demoted stack", p);
    hf_xfree(listed);
    return rc;
}

static int check_pool(check_ctx *ctx)
{
    const core_pool_t *pool = ctx->pool;
    uint64_t count[4] = {0, 0, 0, 0}, demoted = 0;
    if (pool->touched > pool->num_pages)
        return fail(ctx, "mark %" PRIu64 " above num_pages", pool->touched);
    for (uint32_t p = 0; p < pool->touched; p++) {
        const core_page_rec *rec = core__rec(pool, p);
        if (core__rec_state(rec) > CORE_PAGE_DRAINING)
            return fail(ctx, "page %u in unknown state %d", p, core__rec_state(rec));
        count[core__rec_state(rec)]++;
        if (core__rec_state(rec) != CORE_PAGE_OWNED && (rec->bits & ~CORE_REC_STATE))
            return fail(ctx, "page %u in state %d has recency bits %#x", p, core__rec_state(rec),
                        rec->bits);
        if (core__rec_use(rec) > CORE_USE_MAX)
            return fail(ctx, "page %u has a use count of %u", p, core__rec_use(rec));
        if (rec->bits & CORE_REC_PINNED)
            return fail(ctx, "page %u is left pinned", p);
        demoted += (rec->bits & CORE_REC_DEMOTED) != 0;
        int has_key = rec->key_kind != CORE_KEY_NONE;
        int wants_key = core__rec_state(rec) == CORE_PAGE_RESERVED || core__rec_state(rec) == CORE_PAGE_OWNED;
        if (has_key != wants_key)
            return fail(ctx, "page %u in state %d %s a key", p, core__rec_state(rec),
                        has_key ? "holds" : "lacks");
    }
    uint64_t total = count[0] + count[1] + count[2] + count[3] + (pool->num_pages - pool->touched);
    if (total != pool->num_pages)
        return fail(ctx, "state counts add up to %" PRIu64, total);
    if (check_free_stack(ctx, count[CORE_PAGE_FREE]) ||
        check_list(ctx, &pool->reserved, CORE_PAGE_RESERVED, 1, "reserved") ||
        check_list(ctx, &pool->draining, CORE_PAGE_DRAINING, 1, "draining"))
        return -1;
    if (pool->nowned != count[CORE_PAGE_OWNED] || pool->reserved.len != count[CORE_PAGE_RESERVED] ||
        pool->draining.len != count[CORE_PAGE_DRAINING])
        return fail(ctx, "list lengths disagree with the page records");
    if (check_demoted(ctx, demoted))
        return -1;
    return check_index(ctx, count[CORE_PAGE_OWNED]) || check_write_leases(ctx) ? -1 : 0;
}

int core_check(const core_t *core, char *err, size_t errlen)
{
    if (errlen)
        err[0] = '\0';
    for (size_t n = 0; n < core->nns; n++) {
        const core_ns *ns = core->namespaces[n];
        uint32_t npools = 0;
        for (uint32_t r = 0; r < ns->ranks_cap; r++) {
            if (!ns->by_rank[r])
                continue;
            npools++;
            check_ctx ctx = {err, errlen, ns->by_rank[r]};
            if (ns->by_rank[r]->rank != r || ns->by_rank[r]->ns != ns)
                return fail(&ctx, "pool filed under the wrong rank or namespace");
            if (check_pool(&ctx))
                return -1;
        }
        if (npools != ns->npools) {
            if (errlen)
                snprintf(err, errlen, "namespace %s counts %u pools, has %u", ns->name, ns->npools,
                         npools);
            return -1;
        }
    }
    return 0;
}
