/*
 * ops.c: the Redis engine's operations (redis.h; stats and check are
 * admin.c's): each store call as HF3FS.* commands of the module
 * (docs/redis-module.md), its arguments and answers in the encodings of
 * src/wire/wire.h. A call that names a namespace is a striped_fn (an
 * *_fn below: on one layout, one command per stripe it touches, sent at
 * once, the answers merged back in the call's order) run by
 * redis__run_striped, which retries it once on a stale layout (stripes.c,
 * whose head says how a call fans out and how the stripes' outcomes
 * combine). The engine keeps no rule of its own but one: an
 * all-or-nothing allocation that a stripe could not serve is undone on the
 * others (stripes.c, "ALL OR NOTHING ACROSS STRIPES").
 *
 * The clock is Redis's: every command carries now = 0, so front ends whose
 * clocks disagree still agree on every lease; a test's clock
 * (options.clock) is sent instead.
 */
#include "store/redis/internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "util/hf_assert.h"
#include "util/fiber.h"
#include "util/log.h"
#include "util/xalloc.h"
#include "wire/wire.h"

/* How many times init_pool creates a namespace that a clear takes away
 * before its stripes are made, before it refuses (STORE_EUNAVAILABLE). */
#define INIT_TRIES 4

/* A bulk string of exactly len bytes. */
static bool is_bulk(const redisReply *e, size_t len)
{
    return e->type == REDIS_REPLY_STRING && e->len == len;
}

/* A namespace with no value has no pool. */
static int no_pool(int rc)
{
    return rc == NO_NAMESPACE ? STORE_ENOPOOL : rc;
}

typedef struct init_call {
    uint32_t rank;
    uint64_t num_pages;
    bool created;
    uint64_t existing;
    uint32_t stripes; /* of the namespace */
} init_call;

/* INIT on the stripes [from, to) of L. */
static int init_on(store_redis *r, const layout *L, init_call *c, uint32_t from, uint32_t to,
                   bool last)
{
    batch b;
    redis__batch_init(&b, to - from);
    for (uint32_t i = from; i < to; i++) {
        args *a = redis__batch_add(r, &b, "HF3FS.INIT", L, i);
        redis__args_add(a, L->ns, L->nslen);
        redis__args_int(a, c->rank);
        redis__args_int(a, (int64_t)wire_stripe_pages(
                               c->num_pages, (wire_stripe){.count = L->count, .index = i}));
    }
    redis__batch_run(r, &b, true);
    int rc = redis__batch_outcome(&b, true, last);
    for (size_t k = 0; rc == STORE_OK && k < b.m; k++) {
        const redisReply *rep = b.reps[k];
        if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2) {
            rc = redis__malformed(r, NULL, "HF3FS.INIT");
            break;
        }
        if (b.stripe[k] == 0)
            c->created = redis__int_of(rep->element[0]) == 1;
        c->existing += (uint64_t)redis__int_of(rep->element[1]);
    }
    redis__batch_free(&b);
    return rc;
}

static int init_fn(store_redis *r, const layout *L, void *ctx, bool last)
{
    init_call *c = ctx;
    c->existing = 0;
    c->stripes = L->count;
    return init_on(r, L, c, 0, L->count, last);
}

static int rd_init_pool(store_t *s, hf_slice ns, uint32_t rank, uint64_t num_pages, bool *created,
                        uint64_t *existing_pages)
{
    store_redis *r = R(s);
    HF_ASSERT(created && existing_pages);
    if (num_pages > r->cfg.max_pages || rank >= r->cfg.max_ranks)
        return STORE_EINVAL;
    init_call c = {rank, num_pages, false, 0, 1};
    int rc = redis__run_striped(r, ns, init_fn, &c);
    bool made = false;
    /* A new namespace: its anchor first, which records our count (or tells
     * the count another front end gave it meanwhile), then the other
     * stripes. A clear between the two (another client's) takes the anchor
     * away again: begin anew, a few times, before refusing. */
    for (int tries = 0; rc == NO_NAMESPACE && tries < INIT_TRIES; tries++) {
        uint32_t guess = redis__stripes_for(r, num_pages);
        layout *mine = redis__layout_new(ns, guess,
                                         guess > 1 ? WIRE_PLACE_SPREAD : WIRE_PLACE_WINDOW);
        rc = init_on(r, mine, &c, 0, 1, true);
        redis__layouts_free(mine);
        if (rc == STORE_OK && c.created) {
            made = true;
            log_msg(LOG_INFO,
                    "namespace '%.*s' created with %" PRIu32 " stripe(s) (%s) by rank %" PRIu32
                    "'s pool of %" PRIu64 " pages",
                    (int)(ns.len > 100 ? 100 : ns.len), ns.ptr, guess,
                    r->stripes ? "--stripes" : "by pool size", rank, num_pages);
        }
        if (rc == RESTRIPE || rc == STORE_OK)
            rc = redis__run_striped(r, ns, init_fn, &c);
    }
    c.created = c.created || made;
    if (rc == NO_NAMESPACE) /* cleared again at every try */
        rc = STORE_EUNAVAILABLE;
    if (rc != STORE_OK)
        return rc;
    if (c.created && num_pages < c.stripes)
        log_msg(LOG_WARN,
                "pool '%.*s' rank %" PRIu32 ": %" PRIu64 " pages for %" PRIu32 " stripes: the "
                "keys of %" PRIu64 " stripes can never get a page (docs/redis-module.md, "
                "\"Stripes\")",
                (int)(ns.len > 100 ? 100 : ns.len), ns.ptr, rank, num_pages, c.stripes,
                (uint64_t)c.stripes - num_pages);
    if (created)
        *created = c.created;
    if (existing_pages)
        *existing_pages = c.existing;
    return STORE_OK;
}

typedef struct keys_call {
    uint32_t rank;
    const hf_slice *keys;
    size_t n;
    core_alloc_mode mode;
    int64_t *pages;
    bool *existed;
    bool *present;
    const int64_t *in_pages; /* confirm */
    int64_t id;              /* allocate: the id of its HF3FS.ALLOCs (settle.c) */
    const int64_t *release;
    size_t nrel;
    size_t refused;
} keys_call;

/* One command per stripe that has keys of the call (or, all: every
 * stripe), CMD key now cfg [rank] keys. */
static void batch_keys(store_redis *r, batch *b, const char *cmd, const layout *L, const split *sp,
                       bool with_rank, uint32_t rank, bool all)
{
    redis__batch_init(b, L->count);
    for (uint32_t i = 0; i < L->count; i++) {
        size_t from = sp->start[i], m = sp->start[i + 1] - from;
        if (m == 0 && !all)
            continue;
        args *a = redis__batch_add(r, b, cmd, L, i);
        if (with_rank)
            redis__args_int(a, rank);
        redis__args_keys(a, sp->keys + from, m);
    }
}

static int alloc_fn(store_redis *r, const layout *L, void *ctx, bool last)
{
    keys_call *c = ctx;
    split sp;
    redis__split_keys(&sp, L->count, c->keys, c->n);
    batch b;
    redis__batch_init(&b, L->count);
    for (uint32_t i = 0; i < L->count; i++) {
        size_t from = sp.start[i], m = sp.start[i + 1] - from;
        if (m == 0)
            continue;
        args *a = redis__batch_add(r, &b, "HF3FS.ALLOC", L, i);
        redis__args_int(a, c->rank);
        redis__args_str(a, c->mode == CORE_ALLOC_ALL_OR_NOTHING ? "1" : "0");
        redis__args_keys(a, sp.keys + from, m);
        if (c->id) /* a module of capability "settle" on every node */
            redis__args_int(a, c->id);
    }
    redis__batch_run(r, &b, true);
    size_t ok = 0;
    bool uncertain = false, short_of_pages = false;
    for (size_t k = 0; k < b.m; k++) {
        uint32_t i = b.stripe[k];
        size_t from = sp.start[i], m = sp.start[i + 1] - from;
        const redisReply *rep = b.reps[k];
        if (b.codes[k] == STORE_OK &&
            (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
             !is_bulk(rep->element[0], 8 * m) || !is_bulk(rep->element[1], m))) {
            /* malformed: outcome unknown on that stripe */
            freeReplyObject(b.reps[k]);
            b.reps[k] = NULL;
            redis__malformed(r, NULL, "HF3FS.ALLOC");
            b.codes[k] = STORE_EUNCERTAIN;
        }
        if (b.codes[k] == STORE_EUNCERTAIN)
            uncertain = true;
        if (b.codes[k] != STORE_OK)
            continue;
        ok++;
        for (size_t j = 0; j < m; j++) {
            int64_t local = wire_i64_at(rep->element[0]->str, j);
            bool hit = rep->element[1]->str[j] != 0;
            c->pages[sp.pos[from + j]] = redis__page_global(local, L, i);
            if (c->existed)
                c->existed[sp.pos[from + j]] = hit;
            if (local < 0 && !hit)
                short_of_pages = true;
        }
    }
    bool all_or_nothing = c->mode == CORE_ALLOC_ALL_OR_NOTHING && L->count > 1;
    int rc = redis__batch_outcome(&b, true, last);
    if (ok > 0 && (ok < b.m || (all_or_nothing && short_of_pages))) {
        /* Roll back what the stripes that answered gave: no client saw it. */
        batch u;
        redis__batch_init(&u, b.m);
        for (size_t k = 0; k < b.m; k++) {
            if (b.codes[k] != STORE_OK)
                continue;
            uint32_t i = b.stripe[k];
            size_t from = sp.start[i], m = sp.start[i + 1] - from;
            args *a = redis__batch_add(r, &u, "HF3FS.CANCEL", L, i);
            redis__args_int(a, c->rank);
            redis__args_keys(a, sp.keys + from, m);
            redis__args_add(a, b.reps[k]->element[0]->str, 8 * m);
            redis__args_add(a, b.reps[k]->element[1]->str, m);
        }
        redis__batch_run(r, &u, true);
        for (size_t k = 0; k < u.m; k++)
            if (u.codes[k] != STORE_OK) /* its reservations may stand: nobody was given them */
                redis__settle_later(r, L, u.stripe[k], c->rank, c->id);
        if (redis__batch_outcome(&u, true, true) != STORE_OK) {
            log_msg(LOG_WARN,
                    "Redis: an allocation over %" PRIu32 " stripes could not be "
                    "rolled back on every stripe: its reservations there are settled once "
                    "their node answers",
                    L->count);
            uncertain = true;
        }
        redis__batch_free(&u);
        if (ok == b.m) { /* every stripe answered, one was short of pages: all -1 */
            for (size_t j = 0; j < c->n; j++)
                if (!c->existed || !c->existed[j])
                    c->pages[j] = -1;
            rc = STORE_OK;
        } else if (!uncertain) { /* nothing left anywhere: as if refused */
            rc = STORE_EUNAVAILABLE;
            for (size_t k = 0; k < b.m; k++)
                if (b.codes[k] == RESTRIPE || (b.codes[k] == STORE_ENOPOOL && !last))
                    rc = RESTRIPE;
            if (rc != RESTRIPE)
                for (size_t k = 0; k < b.m; k++)
                    if (b.codes[k] == STORE_ENOPOOL)
                        rc = STORE_ENOPOOL;
        }
    }
    /* a stripe whose ALLOC may have taken effect unseen: the call answers
     * 507, its pages given to nobody */
    for (size_t k = 0; k < b.m; k++)
        if (b.codes[k] == STORE_EUNCERTAIN) {
            HF_ASSERT(rc == STORE_EUNCERTAIN);
            redis__settle_later(r, L, b.stripe[k], c->rank, c->id);
        }
    redis__batch_free(&b);
    redis__split_free(&sp);
    return rc;
}

static int rd_allocate(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n,
                       core_alloc_mode mode, int64_t *pages, bool *existed)
{
    HF_ASSERT((keys && pages) || n == 0);
    HF_ASSERT(mode == CORE_ALLOC_PARTIAL || mode == CORE_ALLOC_ALL_OR_NOTHING);
    bool *hits = existed ? existed : hf_xmalloc(n ? n : 1);
    keys_call c = {.rank = rank,
                   .keys = keys,
                   .n = n,
                   .mode = mode,
                   .pages = pages,
                   .existed = hits,
                   /* an id (settle.c) only where every node can settle: a
                    * node of a release without it would refuse the argument */
                   .id = redis__all_can(R(s), WIRE_CAP_SETTLE) ? redis__alloc_id(R(s)) : 0};
    int rc = no_pool(redis__run_striped(R(s), ns, alloc_fn, &c));
    if (hits != existed)
        free(hits);
    return rc;
}

static _Thread_local size_t last_refused;

size_t store_redis_last_refused(void)
{
    return last_refused;
}

static int confirm_fn(store_redis *r, const layout *L, void *ctx, bool last)
{
    keys_call *c = ctx;
    split sp;
    redis__split_confirm(&sp, L->count, c->keys, c->in_pages, c->n);
    /* The releases by stripe: page p is stripe p % S's (a page that is no
     * stripe's, negative, goes to the anchor as -1: refused there). */
    size_t *rstart = hf_xcalloc((size_t)L->count + 1, sizeof *rstart);
    int64_t *rel = hf_xmalloc((c->nrel ? c->nrel : 1) * sizeof *rel);
    for (size_t j = 0; j < c->nrel; j++)
        rstart[(c->release[j] < 0 ? 0 : (uint64_t)c->release[j] % L->count) + 1]++;
    for (uint32_t i = 0; i < L->count; i++)
        rstart[i + 1] += rstart[i];
    size_t *fill = hf_xmalloc((size_t)L->count * sizeof *fill);
    memcpy(fill, rstart, (size_t)L->count * sizeof *fill);
    for (size_t j = 0; j < c->nrel; j++) {
        uint32_t i = c->release[j] < 0 ? 0 : (uint32_t)((uint64_t)c->release[j] % L->count);
        rel[fill[i]++] = redis__page_local(c->release[j], L, i);
    }
    free(fill);
    batch b;
    redis__batch_init(&b, L->count);
    int64_t *local = hf_xmalloc((c->n ? c->n : 1) * sizeof *local);
    for (uint32_t i = 0; i < L->count; i++) {
        size_t from = sp.start[i], m = sp.start[i + 1] - from;
        size_t rfrom = rstart[i], rm = rstart[i + 1] - rfrom;
        if (m == 0 && rm == 0)
            continue;
        for (size_t j = 0; j < m; j++)
            local[from + j] = redis__page_local(c->in_pages[sp.pos[from + j]], L, i);
        args *a = redis__batch_add(r, &b, "HF3FS.CONFIRM", L, i);
        redis__args_int(a, c->rank);
        redis__args_keys(a, sp.keys + from, m);
        redis__args_pages(a, local + from, m);
        redis__args_pages(a, rel + rfrom, rm);
    }
    redis__batch_run(r, &b, true);
    int rc = redis__batch_outcome(&b, true, last);
    c->refused = 0;
    for (size_t k = 0; rc == STORE_OK && k < b.m; k++) {
        if (b.reps[k]->type != REDIS_REPLY_INTEGER) {
            rc = redis__malformed(r, NULL, "HF3FS.CONFIRM");
            break;
        }
        c->refused += (size_t)b.reps[k]->integer;
    }
    redis__batch_free(&b);
    free(local);
    free(rel);
    free(rstart);
    redis__split_free(&sp);
    return rc;
}

static int rd_confirm(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys,
                      const int64_t *pages, size_t n, const int64_t *release, size_t nrel)
{
    HF_ASSERT(((keys && pages) || n == 0) && (release || nrel == 0));
    keys_call c = {
        .rank = rank, .keys = keys, .n = n, .in_pages = pages, .release = release, .nrel = nrel};
    int rc = no_pool(redis__run_striped(R(s), ns, confirm_fn, &c));
    if (rc == STORE_OK)
        last_refused = c.refused;
    return rc;
}

/* A read whose answer is, per stripe, one bulk string of 1 (flags, into
 * present) or 8 (pages, into pages) bytes per key. CEXISTS (no rank) of a
 * stripe that has no value answers all false for its keys, once the
 * layout is known to be right. */
typedef struct read_call {
    keys_call k;
    const char *cmd;
    bool with_rank;
} read_call;

static int read_fn(store_redis *r, const layout *L, void *ctx, bool last)
{
    read_call *c = ctx;
    split sp;
    redis__split_keys(&sp, L->count, c->k.keys, c->k.n);
    batch b;
    batch_keys(r, &b, c->cmd, L, &sp, c->with_rank, c->k.rank, false);
    redis__batch_run(r, &b, false);
    if (!c->with_rank && (last || redis__batch_vouched(&b)))
        for (size_t k = 0; k < b.m; k++)
            if (b.codes[k] == STORE_ENOPOOL)
                b.codes[k] = STORE_OK; /* reps[k] NULL: no value, all false */
    int rc = redis__batch_outcome(&b, false, last);
    size_t width = c->k.pages ? 8 : 1;
    for (size_t k = 0; rc == STORE_OK && k < b.m; k++) {
        uint32_t i = b.stripe[k];
        size_t from = sp.start[i], m = sp.start[i + 1] - from;
        const redisReply *rep = b.reps[k];
        if (rep && !is_bulk(rep, width * m)) {
            rc = redis__malformed(r, NULL, c->cmd);
            break;
        }
        /* Exactly one of pages and present is given (by the caller of the
         * store op: LOOKUP and CLOC pages, EXISTS and CEXISTS present). rep
         * is NULL only for CEXISTS's ENOPOOL above (with_rank false, so
         * present): a STORE_OK rc means every code is STORE_OK, so judge
         * gave every other reply. The analyzer follows neither. */
        for (size_t j = 0; j < m; j++) {
            size_t at = sp.pos[from + j];
            if (c->k.pages)
                // NOLINTNEXTLINE(clang-analyzer-core.NullDereference): rep set with pages (above)
                c->k.pages[at] = redis__page_global(wire_i64_at(rep->str, j), L, i);
            else
                // NOLINTNEXTLINE(clang-analyzer-core.NullDereference): present set (above)
                c->k.present[at] = rep && rep->str[j] != 0;
        }
    }
    redis__batch_free(&b);
    redis__split_free(&sp);
    return rc;
}

static int rd_exists(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n,
                     bool *present)
{
    read_call c = {{.rank = rank, .keys = keys, .n = n, .present = present}, "HF3FS.EXISTS", true};
    int rc = no_pool(redis__run_striped(R(s), ns, read_fn, &c));
    if (rc == STORE_OK)
        redis__prefix_count(R(s), ns, present, n);
    return rc;
}

static int rd_lookup(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n,
                     int64_t *pages)
{
    read_call c = {{.rank = rank, .keys = keys, .n = n, .pages = pages}, "HF3FS.LOOKUP", true};
    return no_pool(redis__run_striped(R(s), ns, read_fn, &c));
}

static int rd_complete_exists(store_t *s, hf_slice ns, const hf_slice *keys, size_t n,
                              bool *present)
{
    read_call c = {{.keys = keys, .n = n, .present = present}, "HF3FS.CEXISTS", false};
    int rc = redis__run_striped(R(s), ns, read_fn, &c);
    if (rc == NO_NAMESPACE) { /* no pool: nothing is complete (and nothing counted) */
        for (size_t i = 0; i < n; i++)
            present[i] = false;
        rc = STORE_OK;
    } else if (rc == STORE_OK) {
        redis__prefix_count(R(s), ns, present, n);
    }
    return rc;
}

static int rd_complete_locations(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys,
                                 size_t n, int64_t *pages)
{
    read_call c = {{.rank = rank, .keys = keys, .n = n, .pages = pages}, "HF3FS.CLOC", true};
    return no_pool(redis__run_striped(R(s), ns, read_fn, &c));
}

static int delete_fn(store_redis *r, const layout *L, void *ctx, bool last)
{
    keys_call *c = ctx;
    split sp;
    redis__split_keys(&sp, L->count, c->keys, c->n);
    batch b;
    batch_keys(r, &b, "HF3FS.DELETE", L, &sp, true, c->rank, false);
    redis__batch_run(r, &b, true);
    int rc = redis__batch_outcome(&b, true, last);
    redis__batch_free(&b);
    redis__split_free(&sp);
    return rc;
}

static int rd_delete_keys(store_t *s, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n)
{
    HF_ASSERT(keys || n == 0);
    keys_call c = {.rank = rank, .keys = keys, .n = n};
    return no_pool(redis__run_striped(R(s), ns, delete_fn, &c));
}

static int clear_fn(store_redis *r, const layout *L, void *ctx, bool last)
{
    const uint32_t *rank = ctx;
    batch b;
    redis__batch_init(&b, L->count);
    for (uint32_t i = 0; i < L->count; i++)
        redis__args_int(redis__batch_add(r, &b, "HF3FS.CLEARPOOL", L, i), *rank);
    redis__batch_run(r, &b, true);
    int rc = redis__batch_outcome(&b, true, last);
    redis__batch_free(&b);
    return rc;
}

static int rd_clear_pool(store_t *s, hf_slice ns, uint32_t rank)
{
    return no_pool(redis__run_striped(R(s), ns, clear_fn, &rank));
}

static int rd_clear_all(store_t *s)
{
    store_redis *r = R(s);
    const char *argv[1] = {"HF3FS.CLEARALL"};
    size_t lens[1] = {14};
    size_t n;
    redis_cmd *cmds = redis_link_on_primaries(r->link, 1, argv, lens, true, &n);
    int code = redis__judge_all(r, cmds, n);
    redis_cmds_free(cmds, n);
    redis__layouts_forget(r);
    hf_mutex_lock(&r->lock);
    redis__prefix_free(r->prefix);
    r->prefix = NULL;
    hf_mutex_unlock(&r->lock);
    return code;
}

/* HF3FS.IMPORT key now cfg ns rank num_pages keys pages: the whole pool in
 * one command (the module runs core_pool_import). */
/* An imported namespace has one stripe, whatever --stripes says: SGLang
 * placed its keys on pages without regard to stripes (docs/operations.md,
 * "Switching from SGLang's server"). A namespace that exists with another
 * count is a pool that exists. */
static int rd_import_pool(store_t *s, hf_slice ns, uint32_t rank, uint64_t num_pages,
                          const hf_slice *keys, const int64_t *pages, size_t n)
{
    store_redis *r = R(s);
    HF_ASSERT((keys && pages) || n == 0);
    layout *one = redis__layout_new(ns, 1, WIRE_PLACE_WINDOW);
    batch b;
    redis__batch_init(&b, 1);
    args *a = redis__batch_add(r, &b, "HF3FS.IMPORT", one, 0);
    redis__args_add(a, ns.ptr, ns.len);
    redis__args_int(a, rank);
    redis__args_int(a, (int64_t)num_pages);
    redis__args_keys(a, keys, n);
    redis__args_pages(a, pages, n);
    redis__batch_run(r, &b, true);
    int rc = b.codes[0] == RESTRIPE ? STORE_EEXIST : b.codes[0];
    if (rc == STORE_OK && b.reps[0]->type != REDIS_REPLY_INTEGER)
        rc = redis__malformed(r, NULL, "HF3FS.IMPORT");
    redis__batch_free(&b);
    redis__layouts_free(one);
    return rc;
}

/* The import's record (store.h import_mark_get): a string key of its own
 * beside the module's values, GET and SET as one command each. */
#define IMPORT_MARK_KEY "hf3fs:imported"

static int mark_cmd(store_redis *r, const char *op, const char *text, bool change, redisReply **out)
{
    const char *argv[3] = {op, IMPORT_MARK_KEY, text};
    size_t lens[3] = {strlen(op), sizeof IMPORT_MARK_KEY - 1, text ? strlen(text) : 0};
    redis_cmd c = {.argc = text ? 3 : 2, .argv = argv, .argvlen = lens, .node = -1};
    c.slot = redis_link_slot(IMPORT_MARK_KEY, sizeof IMPORT_MARK_KEY - 1);
    redis_link_exec(r->link, &c, 1, change);
    return redis__judge(r, &c, out);
}

static int rd_import_mark_get(store_t *s, char *out, size_t cap)
{
    redisReply *rep;
    int rc = mark_cmd(R(s), "GET", NULL, false, &rep);
    out[0] = 0;
    if (rc != STORE_OK)
        return rc;
    size_t len = 0;
    if (rep->type == REDIS_REPLY_STRING) {
        len = rep->len < cap ? rep->len : cap - 1;
        memcpy(out, rep->str, len);
        out[len] = 0;
    } else if (rep->type != REDIS_REPLY_NIL) {
        rc = redis__malformed(R(s), NULL, "GET " IMPORT_MARK_KEY);
    }
    freeReplyObject(rep);
    return rc != STORE_OK ? rc : (int)len;
}

static int rd_import_mark_set(store_t *s, const char *text)
{
    HF_ASSERT(text);
    redisReply *rep;
    int rc = mark_cmd(R(s), "SET", text, true, &rep);
    if (rc == STORE_OK)
        freeReplyObject(rep);
    return rc;
}

static store_mode rd_health(store_t *s, char *reason, size_t len)
{
    return redis_link_health(R(s)->link, reason, len);
}

static size_t rd_unreplicated(store_t *s, char (*names)[STORE_NODE_NAME], size_t max)
{
    return redis_link_unreplicated(R(s)->link, names, max);
}

static int rd_metrics(store_t *s, const store_emitter *e)
{
    redis_link_metrics(R(s)->link, e);
    redis__settle_metrics(R(s), e);
    redis__modules_metrics(R(s), e);
    return STORE_OK;
}

static const char *rd_describe(store_t *s, int err)
{
    (void)s;
    switch (err) {
    case STORE_EUNAVAILABLE:
        return "Redis cannot be reached or refused the call (see GET /health for why); nothing "
               "was changed, so the request may be sent again";
    case STORE_EUNCERTAIN:
        return "the change was sent to Redis but its answer was lost (a timeout or a broken "
               "connection), or fewer replicas than --redis-wait confirmed it: it may have taken "
               "effect; check the state before repeating it";
    default: return NULL;
    }
}

static void rd_destroy(store_t *s)
{
    store_redis *r = R(s);
    redis__settle_stop(r);
    redis_link_close(r->link);
    redis__layouts_free(r->layouts);
    redis__layouts_free(r->retired);
    redis__prefix_free(r->prefix);
    pthread_mutex_destroy(&r->lock);
    pthread_mutex_destroy(&r->seen_lock);
    free(r->seen);
    free(r);
}

const struct store_ops redis__ops = {
    .init_pool = rd_init_pool,
    .allocate = rd_allocate,
    .confirm = rd_confirm,
    .exists = rd_exists,
    .lookup = rd_lookup,
    .delete_keys = rd_delete_keys,
    .clear_pool = rd_clear_pool,
    .clear_all = rd_clear_all,
    .complete_exists = rd_complete_exists,
    .complete_locations = rd_complete_locations,
    .stats = redis__stats,
    .check = redis__check,
    .destroy = rd_destroy,
    .health = rd_health,
    .unreplicated = rd_unreplicated,
    .metrics = rd_metrics,
    .describe = rd_describe,
    .import_pool = rd_import_pool,
    .import_mark_get = rd_import_mark_get,
    .import_mark_set = rd_import_mark_set,
};
