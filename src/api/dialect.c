/*
 * dialect.c: the one dispatcher of the dialects' routes (vllm.c, sglang.c),
 * and the store calls they make.
 *
 * A dialect is a table of routes, each {method, path, flags, decoder, store
 * call, answer} (API__DIALECT_ROUTE, api_internal.h), as the Redis module's
 * commands are one table (HF3FS_COMMANDS). api.c routes a request to its
 * row and decodes the body; api__dialect_run then does, for every row:
 *
 *   1. the row's decoder validates the whole body into an api__call (a 400
 *      on the first problem; nothing is called);
 *   2. the answer's arrays are allocated in the request arena, and the
 *      store call is made in the request's tenant's namespace (api__store_ns);
 *   3. a failure is answered: STORE_ENOPOOL from a call that names a pool
 *      by the dialect's own words (the row's no_pool), anything else by
 *      api__store_failed;
 *   4. else the row's answer writes the answer.
 *
 * What differs between the dialects (field names, error texts, answers) is
 * in their decoders and answers; what they share (list answers, the store
 * calls, the log lines of an initialize, the clear of a tenant's pools) is
 * here.
 */
#include <inttypes.h>
#include <string.h>

#include "api/api_internal.h"
#include "util/hf_assert.h"
#include "util/log.h"

/* ---- list answers ---- */

void api__list_open(api__req *req, const char *name, bool ranked)
{
    api__begin(req);
    json_put_char(req->out, '{');
    if (ranked) {
        json_put_lit(req->out, "\"rank\":");
        json_put_uint(req->out, req->rank);
        json_put_char(req->out, ',');
    }
    json_put_char(req->out, '"');
    json_put_raw(req->out, name, strlen(name));
    json_put_lit(req->out, "\":[");
}

void api__list_item(api__req *req, size_t i)
{
    if (i)
        json_put_char(req->out, ',');
}

void api__list_close(api__req *req)
{
    json_put_lit(req->out, "]}");
}

void api__answer_bools(api__req *req, const char *name, const bool *values, size_t n)
{
    api__list_open(req, name, false);
    for (size_t i = 0; i < n; i++) {
        api__list_item(req, i);
        json_put_bool(req->out, values[i]);
    }
    api__list_close(req);
}

/* A page, or null if negative. */
void api__answer_pages(api__req *req, const char *name, const int64_t *pages, size_t n)
{
    api__list_open(req, name, false);
    for (size_t i = 0; i < n; i++) {
        api__list_item(req, i);
        if (pages[i] < 0)
            json_put_lit(req->out, "null");
        else
            json_put_int(req->out, pages[i]);
    }
    api__list_close(req);
}

/* ---- the store calls ---- */

/* The pool (ns, req->rank) created or kept, within the tenant's quota; a
 * pool of 0 pages (SGLang allows it) is almost always a mistake. */
static int init_pool(api__req *req, api__call *c)
{
    int err = api__init_pool(req, c->ns, c->num_pages, &c->created, &c->existing);
    if (err != STORE_OK)
        return err;
    int ns_len = (int)c->ns.len;
    if (c->created && c->num_pages == 0)
        log_msg(LOG_WARN,
                "rank %u namespace '%.*s'%s initialized with 0 pages: it can store "
                "nothing",
                (unsigned)req->rank, ns_len, c->ns.ptr, api__tenant_words(req));
    if (c->created)
        log_msg(LOG_INFO, "rank %u namespace '%.*s'%s initialized with %" PRIu64 " pages",
                (unsigned)req->rank, ns_len, c->ns.ptr, api__tenant_words(req), c->num_pages);
    else if (c->existing != c->num_pages)
        log_msg(LOG_WARN,
                "rank %u namespace '%.*s'%s already has %" PRIu64 " pages; an "
                "initialize asked for %" PRIu64 ": the pool is kept as it is",
                (unsigned)req->rank, ns_len, c->ns.ptr, api__tenant_words(req), c->existing,
                c->num_pages);
    return STORE_OK;
}

/* The pools of the caller's tenant, and whether there is any other. */
typedef struct pool_ref {
    struct pool_ref *next;
    hf_slice ns; /* as the tenant names it, copied into the arena */
    uint32_t rank;
} pool_ref;

typedef struct clear_plan {
    json_doc *doc;
    pool_ref *mine;
    bool others;
} clear_plan;

static void plan_pool(void *ctx, const api__pool *pool)
{
    clear_plan *plan = ctx;
    if (!pool->mine) {
        plan->others = true;
        return;
    }
    pool_ref *p = json_doc_alloc(plan->doc, sizeof *p);
    char *copy = json_doc_alloc(plan->doc, pool->ns.len + 1);
    if (pool->ns.len)
        memcpy(copy, pool->ns.ptr, pool->ns.len);
    *p = (pool_ref){plan->mine, {copy, pool->ns.len}, pool->rank};
    plan->mine = p;
}

/*
 * Forgets every pool of the caller's tenant: workers must initialize again.
 * When the store holds no other tenant's pool and the token file names one
 * tenant (or there is none), that is the store's clear_all, as ever; else
 * each of the tenant's pools is cleared in its own step (the pools stay,
 * empty, with their sizes), never touching another tenant's.
 */
static int clear_tenant(api__req *req)
{
    clear_plan plan = {.doc = req->doc};
    int err = api__pools(req, plan_pool, &plan);
    if (err == STORE_OK && !plan.others && !req->shared)
        return req->store->ops->clear_all(req->store);
    for (const pool_ref *p = plan.mine; err == STORE_OK && p; p = p->next) {
        err = req->store->ops->clear_pool(req->store, api__store_ns(req, p->ns), p->rank);
        if (err == STORE_ENOPOOL) /* gone meanwhile */
            err = STORE_OK;
    }
    return err;
}

static void *answer_array(api__req *req, size_t n, size_t size)
{
    return json_doc_alloc(req->doc, n * size);
}

static int store_call(api__req *req, api__store_call call, api__call *c)
{
    store_t *s = req->store;
    const struct store_ops *ops = s->ops;
    uint32_t rank = req->rank;
    /* The store's namespace; INIT and CLEAR_TENANT find their own. */
    hf_slice ns = call == API__INIT || call == API__CLEAR_TENANT ? c->ns
                                                                 : api__store_ns(req, c->ns);
    switch (call) {
    case API__INIT: return init_pool(req, c);
    case API__ALLOCATE_ALL:
        c->pages = answer_array(req, c->n, sizeof *c->pages);
        return ops->allocate(s, ns, rank, c->keys, c->n, CORE_ALLOC_ALL_OR_NOTHING, c->pages, NULL);
    case API__ALLOCATE_PARTIAL:
        c->pages = answer_array(req, c->n, sizeof *c->pages);
        c->present = answer_array(req, c->n, sizeof *c->present);
        return ops->allocate(s, ns, rank, c->keys, c->n, CORE_ALLOC_PARTIAL, c->pages, c->present);
    case API__CONFIRM:
        return ops->confirm(s, ns, rank, c->keys, c->pages, c->n, c->release, c->nrel);
    case API__EXISTS:
        c->present = answer_array(req, c->n, sizeof *c->present);
        return ops->exists(s, ns, rank, c->keys, c->n, c->present);
    case API__LOOKUP:
        c->pages = answer_array(req, c->n, sizeof *c->pages);
        return ops->lookup(s, ns, rank, c->keys, c->n, c->pages);
    case API__DELETE: return ops->delete_keys(s, ns, rank, c->keys, c->n);
    case API__CLEAR_POOL: return ops->clear_pool(s, ns, rank);
    case API__CLEAR_TENANT: return clear_tenant(req);
    case API__COMPLETE_EXISTS:
        c->present = answer_array(req, c->n, sizeof *c->present);
        return ops->complete_exists(s, ns, c->keys, c->n, c->present);
    case API__COMPLETE_LOCATIONS:
        c->pages = answer_array(req, c->n, sizeof *c->pages);
        return ops->complete_locations(s, ns, rank, c->keys, c->n, c->pages);
    }
    return STORE_EINVAL; /* not reached: -Wswitch holds every call above */
}

/* Whether the call names a pool (namespace, rank): then STORE_ENOPOOL is
 * the dialect's "not initialized". */
static bool names_pool(api__store_call call)
{
    return call != API__CLEAR_TENANT && call != API__COMPLETE_EXISTS;
}

/* ---- the dispatcher ---- */

void api__dialect_run(api__req *req)
{
    const api__route *route = req->route;
    HF_ASSERT(route && route->decode && route->answer);
    HF_ASSERT(!names_pool(route->call) || route->no_pool);
    api__call call = {.ns = HF_SLICE_LIT("kv")};
    if (route->decode(req, &call) != 0)
        return;
    /* a decoder accepts a whole body or nothing: its lists are all there */
    HF_ASSERT(call.n == 0 || call.keys);
    HF_ASSERT(call.nrel == 0 || call.release);
    HF_ASSERT(route->call != API__CONFIRM || call.n == 0 || call.pages);
    int err = store_call(req, route->call, &call);
    if (err == API__ANSWERED)
        return;
    if (err == STORE_ENOPOOL && names_pool(route->call)) {
        route->no_pool(req, &call);
        return;
    }
    if (err != STORE_OK) {
        api__store_failed(req, err);
        return;
    }
    HF_ASSERT(api__answer_in_range(route->call, &call));
    route->answer(req, &call);
}

/* ---- the answers both dialects give ---- */

void api__answer_nothing(api__req *req, const api__call *call)
{
    (void)call;
    api__no_content(req);
}

void api__answer_exists(api__req *req, const api__call *call)
{
    api__answer_bools(req, "exists", call->present, call->n);
}
