/*
 * vllm.c: the vLLM HF3FS connector dialect (docs/protocol.md, "The vLLM dialect").
 *
 * Namespace is always "kv". Allocation is all or nothing for new pages (the
 * stock client releases nothing when a key gets -1). Error texts that the
 * contract fixes are kept to the letter; every other 400 names the field.
 *
 *   POST /rank/{rank}/initialize  {"role"?, "num_pages"?}    200 {"message"}
 *   POST /initialize              {"rank", "role"?, "num_pages"?}
 *   POST /keys/batch_allocate     {"rank", "keys"}           200 {"rank", "results"}
 *   POST /keys/confirm_write      {"rank", "confirmations", "pages_to_release"?}  204
 *   POST /keys/batch_exists       {"keys"}                   200 {"exists"}
 *   POST /keys/get_locations      {"rank", "keys"}           200 {"locations"}
 *   POST /clear                   anything or nothing        204
 */
#include <inttypes.h>
#include <string.h>

#include "api/api_internal.h"
#include "util/log.h"

#define INIT_INVALID "Invalid initialization parameters"

static const hf_slice vllm_ns = HF_SLICE_LIT("kv");

static void fail_not_initialized(api__req *req, uint32_t rank)
{
    api__fail(req, 404, "Rank %u not initialized", (unsigned)rank);
}

static void fail_store(api__req *req, int err, uint32_t rank)
{
    if (err == STORE_ENOPOOL)
        fail_not_initialized(req, rank);
    else
        api__store_failed(req, err);
}

/* "rank" present and not null, and `list` a list (else the contract's
 * text), and the rank valid: into req->rank. */
static int rank_and_list(api__req *req, const char *list_field, const json_node **list)
{
    const json_node *rank = json_get(req->body, "rank");
    *list = json_get(req->body, list_field);
    if (!rank || rank->type == JSON_NULL || !api__is_list(*list)) {
        api__fail(req, 400, "Invalid request format: need 'rank' and '%s'", list_field);
        return -1;
    }
    return api__decode_rank(req, rank, "rank", &req->rank);
}

/* {"rank": r, "keys": [...]}: items allows [key, prefix_key] items
 * (api__decode_key_items). */
static int rank_and_keys(api__req *req, bool items, hf_slice **keys, size_t *n)
{
    const json_node *list;
    if (rank_and_list(req, "keys", &list) != 0 ||
        (items ? api__decode_key_items : api__decode_keys)(req, list, "keys", keys) != 0)
        return -1;
    *n = list->len;
    return 0;
}

/* ---- initialize ---- */

/* role: "worker" (default) or "scheduler"; anything else is invalid. */
static int init_role(api__req *req, bool *scheduler)
{
    const json_node *role = json_get(req->body, "role");
    *scheduler = false;
    if (!role)
        return 0;
    if (role->type == JSON_STRING && hf_slice_eq(json_slice(role), HF_SLICE_LIT("scheduler"))) {
        *scheduler = true;
        return 0;
    }
    if (role->type == JSON_STRING && hf_slice_eq(json_slice(role), HF_SLICE_LIT("worker")))
        return 0;
    if (role->type == JSON_STRING)
        api__fail_reason(req, 400, INIT_INVALID,
                         "'role' must be \"worker\" or \"scheduler\", got \"%.*s\"",
                         (int)(role->len > 64 ? 64 : role->len), role->u.str);
    else
        api__fail_reason(req, 400, INIT_INVALID,
                         "'role' must be \"worker\" or \"scheduler\", got %s",
                         json_type_name(role));
    return -1;
}

/* num_pages: an integer (not a boolean, not 1.0) in 1..max_pages; default 0. */
static int init_num_pages(api__req *req, uint64_t *num_pages)
{
    const json_node *node = json_get(req->body, "num_pages");
    uint64_t max = req->limits->max_pages;
    if (!node) {
        api__fail_reason(req, 400, INIT_INVALID,
                         "'num_pages' is missing (default 0); a worker needs 1..%" PRIu64, max);
        return -1;
    }
    if (node->type != JSON_INT) {
        api__fail_reason(req, 400, INIT_INVALID,
                         "'num_pages' must be an integer in 1..%" PRIu64 ", got %s", max,
                         json_type_name(node));
        return -1;
    }
    if (node->u.i < 1 || (uint64_t)node->u.i > max) {
        api__fail_reason(req, 400, INIT_INVALID,
                         "'num_pages' must be an integer in 1..%" PRIu64 ", got %" PRId64, max,
                         node->u.i);
        return -1;
    }
    *num_pages = (uint64_t)node->u.i;
    return 0;
}

/* The body's "rank" for POST /initialize: required for a worker only. */
static int init_body_rank(api__req *req, bool scheduler, bool *have_rank)
{
    const json_node *node = json_get(req->body, "rank");
    *have_rank = node && node->type != JSON_NULL;
    if (!*have_rank) {
        if (scheduler)
            return 0;
        api__fail_reason(req, 400, INIT_INVALID, "'rank' is missing");
        return -1;
    }
    uint32_t max_ranks = req->limits->max_ranks;
    if (node->type != JSON_INT || node->u.i < 0 || (uint64_t)node->u.i >= max_ranks) {
        api__fail_reason(req, 400, INIT_INVALID, "'rank' must be an integer in 0..%u, got %s",
                         (unsigned)(max_ranks - 1),
                         node->type == JSON_INT ? "one out of range" : json_type_name(node));
        return -1;
    }
    req->rank = (uint32_t)node->u.i;
    return 0;
}

static void init_pool(api__req *req, uint64_t num_pages)
{
    bool created = false;
    uint64_t existing = 0;
    int err = api__init_pool(req, vllm_ns, num_pages, &created, &existing);
    if (err == API__ANSWERED)
        return;
    if (err != STORE_OK) {
        api__store_failed(req, err);
        return;
    }
    if (created)
        log_msg(LOG_INFO, "rank %u namespace 'kv'%s initialized with %" PRIu64 " pages",
                (unsigned)req->rank, api__tenant_words(req), num_pages);
    else if (existing != num_pages)
        log_msg(LOG_WARN,
                "rank %u namespace 'kv'%s already has %" PRIu64 " pages; an "
                "initialize asked for %" PRIu64 ": the pool is kept as it is",
                (unsigned)req->rank, api__tenant_words(req), existing, num_pages);
    /* The pool's real size: the one asked for, except when an existing pool
     * of another size was kept. */
    api__begin(req);
    json_put_lit(req->out, "{\"message\":\"Rank ");
    json_put_uint(req->out, req->rank);
    json_put_lit(req->out, " initialized with ");
    json_put_uint(req->out, created ? num_pages : existing);
    json_put_lit(req->out, " pages\"}");
}

static void initialize(api__req *req, bool rank_in_body)
{
    bool scheduler, have_rank = true;
    if (init_role(req, &scheduler) != 0)
        return;
    if (rank_in_body && init_body_rank(req, scheduler, &have_rank) != 0)
        return;
    if (scheduler) {
        api__begin(req);
        json_put_lit(req->out, "{\"message\":\"Scheduler role does not require initialization\"}");
        return;
    }
    uint64_t num_pages;
    if (init_num_pages(req, &num_pages) != 0)
        return;
    init_pool(req, num_pages);
}

static void initialize_path(api__req *req)
{
    initialize(req, false);
}

static void initialize_body(api__req *req)
{
    initialize(req, true);
}

/* ---- keys ---- */

static void batch_allocate(api__req *req)
{
    hf_slice *keys;
    size_t n;
    if (rank_and_keys(req, true, &keys, &n) != 0)
        return;
    int64_t *pages = json_doc_alloc(req->doc, n * sizeof *pages);
    int err = req->store->ops->allocate(req->store, api__store_ns(req, vllm_ns), req->rank, keys, n,
                                        CORE_ALLOC_ALL_OR_NOTHING, pages, NULL);
    if (err != STORE_OK) {
        fail_store(req, err, req->rank);
        return;
    }
    api__begin(req);
    json_put_lit(req->out, "{\"rank\":");
    json_put_uint(req->out, req->rank);
    json_put_lit(req->out, ",\"results\":[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            json_put_char(req->out, ',');
        json_put_char(req->out, '[');
        json_put_str(req->out, keys[i].ptr, keys[i].len);
        json_put_char(req->out, ',');
        json_put_int(req->out, pages[i]);
        json_put_char(req->out, ']');
    }
    json_put_lit(req->out, "]}");
}

static void confirm_write(api__req *req)
{
    const json_node *list;
    hf_slice *keys;
    int64_t *pages, *release;
    size_t nrel;
    if (rank_and_list(req, "confirmations", &list) != 0 ||
        api__decode_confirmations(req, list, "confirmations", &keys, &pages) != 0 ||
        api__decode_pages(req, json_get(req->body, "pages_to_release"), "pages_to_release",
                          &release, &nrel) != 0)
        return;
    int err = req->store->ops->confirm(req->store, api__store_ns(req, vllm_ns), req->rank, keys,
                                       pages, list->len, release, nrel);
    if (err != STORE_OK) {
        fail_store(req, err, req->rank);
        return;
    }
    api__no_content(req);
}

static void batch_exists(api__req *req)
{
    const json_node *list = json_get(req->body, "keys");
    hf_slice *keys;
    if (!api__is_list(list)) {
        api__fail(req, 400, "Invalid keys format");
        return;
    }
    if (api__decode_keys(req, list, "keys", &keys) != 0)
        return;
    size_t n = list->len;
    bool *present = json_doc_alloc(req->doc, n * sizeof *present);
    int err = req->store->ops->complete_exists(req->store, api__store_ns(req, vllm_ns), keys, n,
                                               present);
    if (err != STORE_OK) {
        api__store_failed(req, err);
        return;
    }
    api__answer_bools(req, "exists", present, n);
}

static void get_locations(api__req *req)
{
    hf_slice *keys;
    size_t n;
    if (rank_and_keys(req, false, &keys, &n) != 0)
        return;
    int64_t *pages = json_doc_alloc(req->doc, n * sizeof *pages);
    int err = req->store->ops->complete_locations(req->store, api__store_ns(req, vllm_ns),
                                                  req->rank, keys, n, pages);
    if (err != STORE_OK) {
        fail_store(req, err, req->rank);
        return;
    }
    api__answer_pages(req, "locations", pages, n);
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
static void clear_all(api__req *req)
{
    clear_plan plan = {.doc = req->doc};
    int err = api__pools(req, plan_pool, &plan);
    if (err == STORE_OK && !plan.others && !req->shared)
        err = req->store->ops->clear_all(req->store);
    else
        for (const pool_ref *p = plan.mine; err == STORE_OK && p; p = p->next) {
            err = req->store->ops->clear_pool(req->store, api__store_ns(req, p->ns), p->rank);
            if (err == STORE_ENOPOOL) /* gone meanwhile */
                err = STORE_OK;
        }
    if (err != STORE_OK) {
        api__store_failed(req, err);
        return;
    }
    log_msg(LOG_INFO, "every pool%s cleared (POST /clear)", api__tenant_words(req));
    api__no_content(req);
}

const api__route api__vllm_routes[] = {
    {"POST", "/rank/{rank}/initialize", initialize_path, API__EMPTY_BODY_OK | API__INIT_ERRORS},
    {"POST", "/initialize", initialize_body, API__EMPTY_BODY_OK | API__INIT_ERRORS},
    {"POST", "/keys/batch_allocate", batch_allocate, 0},
    {"POST", "/keys/confirm_write", confirm_write, 0},
    {"POST", "/keys/batch_exists", batch_exists, 0},
    {"POST", "/keys/get_locations", get_locations, 0},
    {"POST", "/clear", clear_all, API__EMPTY_BODY_OK},
};
const size_t api__vllm_route_count = sizeof api__vllm_routes / sizeof api__vllm_routes[0];
