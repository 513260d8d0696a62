/*
 * stripes.c: a namespace of the Redis engine over its stripes, as the
 * front end runs it: layouts, the split of a call by stripe, one command
 * per stripe sent at once, how their outcomes combine, the retry on a stale
 * layout, and the choice of S. The module's side is docs/redis-module.md,
 * "Stripes"; the hash, the keys and the page shares are src/wire/wire.h's.
 *
 * STRIPES
 *   A namespace is S values, its stripes, 1 <= S <= WIRE_MAX_STRIPES. Stripe
 *   i < S is the module's value under wire_stripe_key(ns, {S, i}), sent to
 *   the slot of that key. Stripe 0, the anchor, is under wire_value_key(ns)
 *   whatever S: it records S, the count of the front end whose INIT created
 *   it, and answers it to HF3FS.STRIPES (0: no anchor, so no namespace). The
 *   keys of stripes 1.. depend on S, so a front end that takes a namespace
 *   for another S finds no value there (-ENOPOOL), or one of another count
 *   (-ESTRIPES: every command carries S and i, checked by the value).
 *   Each stripe is a core of its own, holding
 *   - every key k with wire_stripe_of(k, S) == i, with all its ranks (so
 *     completeness and cross-rank demotion stay one core call);
 *   - page p of every pool with p % S == i, as its local page p / S: of a
 *     pool of N pages, wire_stripe_pages(N, {S, i}) = ceil((N - i) / S).
 *     Local page l of stripe i is page l * S + i, and no page (l < 0) stays
 *     -1 (page_global); page p in stripe i is p / S, or -1 when p < 0 or
 *     p % S != i, which the stripe refuses as out of range (page_local).
 *   A confirmation goes to its page's stripe (the key's reservation can only
 *   be there; any other stripe would judge the item as one value would:
 *   another key's page, or no reservation), one with a negative page to its
 *   key's stripe; a release to its page's stripe, a negative one to the
 *   anchor as -1 (ops.c, confirm_fn).
 *
 * LAYOUTS
 *   A layout is S and each stripe's key and slot. The front end caches one
 *   per namespace once it has asked the anchor (HF3FS.STRIPES) and never
 *   changes a cached one: when the anchor gives another S (the namespace
 *   cleared and created again by another front end), the new layout
 *   replaces it and the stale one is retired, kept until destroy, since a
 *   call may still be using it. clear_all retires every layout.
 *
 * A CALL
 *   An operation on a namespace is a striped_fn: on a layout it splits its
 *   keys by stripe (keeping the call's order within each), builds one
 *   command per stripe it touches,
 *       HF3FS.<OP> <stripe key> <now> <cfg>,<S>,<i> <arguments...>
 *   (now: 0, Redis's clock, or the test clock's reading; cfg:
 *   wire_cfg_format of the core configuration), sends them all at once
 *   (redis_link_exec: one round trip per node, the nodes in parallel),
 *   judges each reply into a STORE_* code (command.c, redis__judge;
 *   -ESTRIPES is RESTRIPE) and merges the answers back in the call's order,
 *   pages mapped by page_global. INIT and CLEARPOOL (and STATS, CHECK and
 *   PAGES) go to every stripe; the others to the stripes that have keys (or
 *   releases) of the call.
 *
 * A STALE LAYOUT
 *   A batch finds its layout stale when a stripe answers -ESTRIPES, or when
 *   a stripe other than the anchor answers -ENOPOOL and nothing vouches for
 *   the layout. It is vouched for when it was just asked (`last`) or when
 *   the anchor answered in the same batch (STORE_OK or -ENOPOOL: the
 *   anchor's key is the same whatever S, and a value there checks S).
 *   run_striped runs the operation on the cached layout (asked if none
 *   is cached); on RESTRIPE it asks the anchor again and runs it once more
 *   on the answer, `last`; RESTRIPE then is STORE_EUNAVAILABLE. No anchor,
 *   at either ask, is NO_NAMESPACE: no pool for most operations, all false
 *   for complete_exists, a namespace to create for init_pool.
 *
 * OUTCOMES OF A BATCH (batch_outcome), the first rule that applies:
 *   1. every command STORE_OK: STORE_OK;
 *   2. a change that took effect on some stripes and found no pool on all
 *      the others (a clear or a creation running meanwhile): STORE_ENOPOOL;
 *   3. a change that took effect on some stripes, or whose outcome is
 *      unknown on one (STORE_EUNCERTAIN): STORE_EUNCERTAIN, the outcome of
 *      the whole is unknown;
 *   4. the layout stale (above): RESTRIPE;
 *   5. the first failure, in the batch's order (nothing took effect).
 *   A read's -ENOPOOL on a stripe other than the anchor is thus no pool
 *   only when vouched for; complete_exists takes -ENOPOOL, when vouched
 *   for, as all false for that stripe's keys (ops.c, read_fn).
 *
 * CREATING A NAMESPACE (ops.c, rd_init_pool)
 *   When run_striped finds no anchor, the front end guesses S
 *   (redis__stripes_for: --stripes if given, else 1 over one Redis, else
 *   wire_stripes_for(the pool's pages, the primaries)) and sends INIT to the
 *   anchor alone under that guess: the anchor is created with it, or, made
 *   meanwhile by another front end, keeps its own count (-ESTRIPES). If it
 *   answered either way, INIT runs over every stripe through run_striped,
 *   on the anchor's word. No anchor by then (a clear meanwhile) begins
 *   anew; INIT_TRIES times so, STORE_EUNAVAILABLE.
 *
 * ALL OR NOTHING ACROSS STRIPES (ops.c, alloc_fn)
 *   Each stripe allocates its keys in the call's mode (a malformed answer
 *   counts as STORE_EUNCERTAIN on its stripe). When some stripes answered
 *   and either another did not, or the mode is all-or-nothing, S > 1 and an
 *   answer gave a key that is no hit no page, every stripe that answered is
 *   sent HF3FS.CANCEL with its keys and its answer, which frees what it
 *   gave (no client saw it); a cancel that fails anywhere is logged and
 *   its stripe queued to be settled (settle.c), as is every stripe whose
 *   ALLOC's outcome is unknown. Then, if
 *   every stripe had answered: STORE_OK, -1 for every key that is no hit.
 *   Else, the cancel done everywhere, as refused: RESTRIPE if a stripe
 *   found the layout stale (-ESTRIPES, or -ENOPOOL anywhere when not
 *   `last`), else STORE_ENOPOOL if one found no pool, else
 *   STORE_EUNAVAILABLE; the cancel failed, the batch's outcome (rule 2 or
 *   3).
 *
 * EVERY NAMESPACE (admin.c)
 *   stats and check ask every primary for the namespaces it holds
 *   (HF3FS.NAMESPACES), take each one's layout and send one command per
 *   stripe of each, all at once. A namespace whose anchor is gone, or a
 *   stripe with no value (a clear meanwhile), has no pools.
 *
 * IMPORT (ops.c, rd_import_pool)
 *   An imported namespace has one stripe whatever --stripes says; one that
 *   exists with another S (-ESTRIPES) is a pool that exists: STORE_EEXIST.
 */
#include "store/redis/internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "util/fiber.h"
#include "util/fmt.h"
#include "util/log.h"
#include "util/xalloc.h"
#include "util/hf_assert.h"
#include "wire/wire.h"

layout *redis__layout_new(hf_slice ns, uint32_t count, uint32_t placement)
{
    HF_ASSERT(wire_stripe_valid(count, 0, placement));
    layout *L = hf_xcalloc(1, sizeof *L);
    L->ns = hf_xmalloc(ns.len + 1);
    if (ns.len)
        memcpy(L->ns, ns.ptr, ns.len);
    L->nslen = ns.len;
    L->count = count;
    L->placement = placement;
    L->key = hf_xcalloc(count, sizeof *L->key);
    L->keylen = hf_xcalloc(count, sizeof *L->keylen);
    L->slot = hf_xcalloc(count, sizeof *L->slot);
    size_t cap = WIRE_STRIPE_KEY_MAX(ns.len);
    for (uint32_t i = 0; i < count; i++) {
        L->key[i] = hf_xmalloc(cap);
        L->keylen[i] = wire_stripe_key(ns, (wire_stripe){count, i, placement}, L->key[i], cap);
        L->slot[i] = redis_link_slot(L->key[i], L->keylen[i]);
    }
    return L;
}

void redis__layouts_free(layout *L)
{
    while (L) {
        layout *next = L->next;
        for (uint32_t i = 0; i < L->count; i++)
            free(L->key[i]);
        free(L->key);
        free(L->keylen);
        free(L->slot);
        free(L->ns);
        free(L);
        L = next;
    }
}

static bool layout_is(const layout *L, hf_slice ns)
{
    return L->nslen == ns.len && (ns.len == 0 || memcmp(L->ns, ns.ptr, ns.len) == 0);
}

static const layout *layout_cached(store_redis *r, hf_slice ns)
{
    hf_mutex_lock(&r->lock);
    layout *L = r->layouts;
    while (L && !layout_is(L, ns))
        L = L->next;
    hf_mutex_unlock(&r->lock);
    return L;
}

/* Cache ns as a namespace of `count` stripes placed by `placement` (the
 * anchor's word). */
/* At most one cached layout names ns (a stale one is retired when its
 * successor comes). Under r->lock. */
HF_ASSERT_HELPER static bool layout_unique(const store_redis *r, hf_slice ns)
{
    int found = 0;
    for (const layout *L = r->layouts; L; L = L->next)
        found += layout_is(L, ns);
    return found <= 1;
}

static const layout *layout_put(store_redis *r, hf_slice ns, uint32_t count, uint32_t placement)
{
    hf_mutex_lock(&r->lock);
    layout **at = &r->layouts;
    while (*at && !layout_is(*at, ns))
        at = &(*at)->next;
    layout *L = *at;
    if (L && L->count == count && L->placement == placement) {
        hf_mutex_unlock(&r->lock);
        return L;
    }
    if (L) { /* stale: retired, not freed */
        *at = L->next;
        L->next = r->retired;
        r->retired = L;
    }
    L = redis__layout_new(ns, count, placement);
    L->next = r->layouts;
    r->layouts = L;
    HF_ASSERT(layout_unique(r, ns));
    hf_mutex_unlock(&r->lock);
    if (r->stripes && count != r->stripes)
        log_msg(LOG_WARN,
                "namespace '%.*s' has %" PRIu32 " stripe(s), recorded when it was created: "
                "this front end uses them (its --stripes %" PRIu32 " applies to the namespaces "
                "it creates)",
                (int)(ns.len > 100 ? 100 : ns.len), ns.ptr, count, r->stripes);
    return L;
}

/* Forget every cached layout (after a clear of everything). */
void redis__layouts_forget(store_redis *r)
{
    hf_mutex_lock(&r->lock);
    while (r->layouts) {
        layout *L = r->layouts;
        r->layouts = L->next;
        L->next = r->retired;
        r->retired = L;
    }
    hf_mutex_unlock(&r->lock);
}

/* The stripe count and placement ns's anchor records (count 0: no anchor,
 * so no namespace). */
static int ask_stripes(store_redis *r, hf_slice ns, uint32_t *count, uint32_t *placement)
{
    args a;
    redis__args_cmd(&a, "HF3FS.STRIPES", ns);
    redisReply *rep;
    int rc = redis__call(r, &a, false, &rep);
    if (rc != STORE_OK)
        return rc;
    const redisReply *c = rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 ? rep->element[0]
                                                                               : NULL;
    const redisReply *p = c ? rep->element[1] : NULL;
    if (!c || c->type != REDIS_REPLY_INTEGER || c->integer < 0 || c->integer > WIRE_MAX_STRIPES ||
        p->type != REDIS_REPLY_INTEGER || !wire_placement_known(p->integer))
        return redis__malformed(r, rep, "HF3FS.STRIPES");
    *count = (uint32_t)c->integer;
    *placement = (uint32_t)p->integer;
    freeReplyObject(rep);
    return STORE_OK;
}

/* The layout of ns, cached or (fresh, or not cached) asked: STORE_OK and
 * *out (NULL: the namespace has no value), or a code. */
int redis__layout_of(store_redis *r, hf_slice ns, bool fresh, const layout **out)
{
    *out = fresh ? NULL : layout_cached(r, ns);
    if (*out)
        return STORE_OK;
    uint32_t count = 0, placement = 0; /* ask_stripes sets them when STORE_OK */
    int rc = ask_stripes(r, ns, &count, &placement);
    if (rc == STORE_OK && count)
        *out = layout_put(r, ns, count, placement);
    return rc;
}

int redis__layout_present(store_redis *r, hf_slice ns, bool fresh, const layout **out)
{
    int rc = redis__layout_of(r, ns, fresh, out);
    return rc == STORE_OK && !*out ? NO_NAMESPACE : rc;
}

/* Group keys[0..n) by of[i] (count groups), keeping the call's order in each. */
static void split_by(split *sp, uint32_t count, const hf_slice *keys, size_t n, const uint32_t *of)
{
    sp->start = hf_xcalloc((size_t)count + 1, sizeof *sp->start);
    sp->pos = hf_xmalloc((n ? n : 1) * sizeof *sp->pos);
    sp->keys = hf_xmalloc((n ? n : 1) * sizeof *sp->keys);
    for (size_t i = 0; i < n; i++)
        sp->start[of[i] + 1]++;
    for (uint32_t i = 0; i < count; i++)
        sp->start[i + 1] += sp->start[i];
    size_t *fill = hf_xmalloc((size_t)count * sizeof *fill);
    memcpy(fill, sp->start, (size_t)count * sizeof *fill);
    for (size_t i = 0; i < n; i++) {
        size_t j = fill[of[i]]++;
        sp->pos[j] = i;
        sp->keys[j] = keys[i];
    }
    free(fill);
}

/* By the keys' stripes. */
void redis__split_keys(split *sp, uint32_t count, const hf_slice *keys, size_t n)
{
    uint32_t *of = hf_xcalloc(n ? n : 1, sizeof *of);
    if (count > 1)
        wire_stripes_of(keys, n, count, of);
    split_by(sp, count, keys, n, of);
    free(of);
}

/* The stripe a confirmation goes to: its page's (a reservation of the key
 * can only be there, and any other stripe's core judges the item as the
 * one core of a single value would: another key's page, or no
 * reservation), or, for a negative page, the key's (refused there as out
 * of range). */
static uint32_t confirm_stripe(hf_slice key, int64_t page, uint32_t count)
{
    return page >= 0 ? (uint32_t)((uint64_t)page % count) : wire_stripe_of(key, count);
}

void redis__split_confirm(split *sp, uint32_t count, const hf_slice *keys, const int64_t *pages,
                          size_t n)
{
    uint32_t *of = hf_xcalloc(n ? n : 1, sizeof *of);
    for (size_t i = 0; count > 1 && i < n; i++)
        of[i] = confirm_stripe(keys[i], pages[i], count);
    split_by(sp, count, keys, n, of);
    free(of);
}

void redis__split_free(split *sp)
{
    free(sp->start);
    free(sp->pos);
    free(sp->keys);
}

/* Page numbers: local page l of stripe i of S is page l * S + i. */
int64_t redis__page_global(int64_t local, const layout *L, uint32_t i)
{
    return local < 0 ? -1 : local * (int64_t)L->count + (int64_t)i;
}

/* The local page of `page` in stripe i, or -1 (refused there as out of
 * range) if it is not one of stripe i's. */
int64_t redis__page_local(int64_t page, const layout *L, uint32_t i)
{
    if (page < 0 || (uint64_t)page % L->count != i)
        return -1;
    return page / (int64_t)L->count;
}

void redis__batch_init(batch *b, size_t cap)
{
    cap = cap ? cap : 1;
    b->m = 0;
    b->stripe = hf_xcalloc(cap, sizeof *b->stripe);
    b->as = hf_xcalloc(cap, sizeof *b->as);
    b->cmds = hf_xcalloc(cap, sizeof *b->cmds);
    b->reps = hf_xcalloc(cap, sizeof *b->reps);
    b->codes = hf_xcalloc(cap, sizeof *b->codes);
}

/* CMD key now cfg for stripe i of L: the next command of b. */
args *redis__batch_add(store_redis *r, batch *b, const char *cmd, const layout *L, uint32_t i)
{
    HF_ASSERT(i < L->count);
    args *a = &b->as[b->m];
    b->stripe[b->m++] = i;
    redis__args_cmd_key(a, cmd, L->key[i], L->keylen[i], L->slot[i]);
    redis__args_int(a, redis__now_of(r));
    char *cfg = redis__args_room(a, r->cfglen + 3 * (1 + HF_UINT_DIGITS)), *p = cfg + r->cfglen;
    memcpy(cfg, r->cfgs, r->cfglen); /* wire_cfg_parse's form: cfg,count,stripe[,placement] */
    *p++ = ',';
    p = hf_put_uint(p, L->count);
    *p++ = ',';
    p = hf_put_uint(p, i);
    if (L->placement != WIRE_PLACE_WINDOW) {
        *p++ = ',';
        p = hf_put_uint(p, L->placement);
    }
    redis__args_trim(a, (size_t)(p - cfg));
    return a;
}

/* Send every command of b at once, then judge each. */
void redis__batch_run(store_redis *r, batch *b, bool change)
{
    for (size_t k = 0; k < b->m; k++)
        b->cmds[k] = redis__cmd_of(&b->as[k]);
    redis_link_exec(r->link, b->cmds, b->m, change);
    for (size_t k = 0; k < b->m; k++)
        b->codes[k] = redis__judge(r, &b->cmds[k], &b->reps[k]);
}

void redis__batch_free(batch *b)
{
    for (size_t k = 0; k < b->m; k++) {
        redis__args_free(&b->as[k]);
        if (b->reps[k])
            freeReplyObject(b->reps[k]);
    }
    redis_cmds_free(b->cmds, b->m);
    free(b->stripe);
    free(b->as);
    free(b->reps);
    free(b->codes);
}

/* Whether the anchor answered in b, so checked the layout's count. */
bool redis__batch_vouched(const batch *b)
{
    for (size_t k = 0; k < b->m; k++)
        if (b->stripe[k] == 0 && (b->codes[k] == STORE_OK || b->codes[k] == STORE_ENOPOOL))
            return true;
    return false;
}

/* The outcome of a batch: OUTCOMES OF A BATCH above, rule by rule. */
int redis__batch_outcome(const batch *b, bool change, bool last)
{
    size_t ok = 0;
    int first = STORE_OK;
    bool restripe = false, uncertain = false, only_nopool = true;
    bool vouched = last || redis__batch_vouched(b);
    for (size_t k = 0; k < b->m; k++) {
        int c = b->codes[k];
        if (c == STORE_OK) {
            ok++;
            continue;
        }
        if (c == RESTRIPE || (c == STORE_ENOPOOL && b->stripe[k] > 0 && !vouched))
            restripe = true;
        if (c == STORE_EUNCERTAIN)
            uncertain = true;
        if (c != STORE_ENOPOOL)
            only_nopool = false;
        if (first == STORE_OK || first == RESTRIPE)
            first = c == RESTRIPE ? RESTRIPE : c;
    }
    if (ok == b->m)
        return STORE_OK;
    if (change && ok > 0 && only_nopool)
        return STORE_ENOPOOL; /* the rest of the pool is being cleared or created */
    if (change && (uncertain || ok > 0))
        return STORE_EUNCERTAIN;
    if (restripe)
        return RESTRIPE;
    return first == RESTRIPE ? STORE_EUNAVAILABLE : first;
}

/* Run fn on ns's layout; once more on the anchor's word if it was stale.
 * NO_NAMESPACE: ns has no value. */
int redis__run_striped(store_redis *r, hf_slice ns, striped_fn fn, void *ctx)
{
    const layout *L;
    int rc = redis__layout_present(r, ns, false, &L);
    if (rc != STORE_OK)
        return rc;
    rc = fn(r, L, ctx, false);
    if (rc != RESTRIPE)
        return rc;
    rc = redis__layout_present(r, ns, true, &L);
    if (rc != STORE_OK)
        return rc;
    rc = fn(r, L, ctx, true);
    return rc == RESTRIPE ? STORE_EUNAVAILABLE : rc;
}

/* The stripe count of a namespace that a pool of num_pages pages creates:
 * --stripes if given, else by the pool's size and the primaries over a
 * cluster (docs/many-nodes.md "Choosing S"), 1 over one Redis. Only a
 * guess until the anchor takes it: a namespace another front end created
 * meanwhile keeps its own count (-ESTRIPES, then HF3FS.STRIPES). */
uint32_t redis__stripes_for(store_redis *r, uint64_t num_pages)
{
    if (r->stripes)
        return r->stripes;
    if (!redis_link_is_cluster(r->link))
        return 1;
    return wire_stripes_for(num_pages, redis_link_primaries(r->link));
}
