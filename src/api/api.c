/*
 * api.c: routing, body decoding, the shared validators and the request
 * counters. The routes themselves live in vllm.c and sglang.c (tables run
 * by dialect.c), admin.c and prometheus.c; the periodic summary in
 * summary.c.
 *
 * Routing. A path matches a route's shape when it has the same segments,
 * with "{rank}" matching any non-empty segment. The first route whose shape
 * and method match wins (admin, then vLLM, then SGLang: literal segments
 * come before "{rank}" so /keys/batch_exists is never read as rank "keys").
 * A shape match with another method is 405; no shape match is 404. Only
 * then is the rank segment parsed (400 if it is not in 0..max_ranks-1), so
 * that a wrong method is reported as such, as FastAPI does.
 *
 * Limits. Nesting depth 32; values in one body at most 4 * max_keys + 1024
 * (the largest valid body, a confirm_write with max_keys confirmations and
 * max_keys releases, has about 4 values per key). Answers are bounded by
 * 8 * max_body_bytes + 64 MiB: an answer echoes at most every key of the
 * body, each escape at most 6 bytes for the 6 it took in the body, and the
 * admin answers (one entry per pool) get their own margin.
 */
#include "api/api_internal.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "api/auth.h"
#include "api/metrics.h"
#include "api/room.h"
#include "util/clock.h"
#include "util/fiber.h"
#include "util/hf_assert.h"
#include "util/log.h"
#include "util/xalloc.h"

#define JSON_DEPTH_LIMIT 32
#define ANSWER_MARGIN (64u * 1024 * 1024)
#define ANSWER_KEEP (64u * 1024)      /* answer buffer kept between requests */
#define ROOM_WAIT_US (10 * 1000000LL) /* a request waits this long for its tenant's room */

struct api {
    store_t *store;
    api_config config; /* config.auth_token is NULL: the tokens are in `tenants` */
    /* The token table in force, NULL without auth. A reload swaps it; the
     * tables it replaced stay in `retired` until api_free, since a request
     * may still hold one of their tenants. */
    _Atomic(tenant_table *) tenants;
    tenant_table **retired;
    size_t nretired;
    uint64_t seed;               /* of the tables' hash */
    pthread_mutex_t reload_lock; /* reloads, one at a time */
    hf_fiber_mutex quota_lock;   /* initializes of tenants with a quota, one at a time */
    const api__route **routes;
    size_t nroutes;
    const char **route_names; /* metric labels: the patterns, then "unmatched" */
    api__metrics *metrics;    /* row nroutes: no route (404, HTTP-level answers) */
    api__summary *summary;
    int64_t started_ms; /* wall clock */
};

static void add_routes(api_t *api, const api__route *table, size_t n)
{
    for (size_t i = 0; i < n; i++)
        api->routes[api->nroutes++] = &table[i];
}

api_t *api_new(store_t *store, const api_config *config)
{
    api_t *api = hf_xcalloc(1, sizeof *api);
    api->store = store;
    api->config = *config;
    size_t total = api__admin_route_count + api__vllm_route_count + api__sglang_route_count;
    api->routes = hf_xcalloc(total, sizeof *api->routes);
    add_routes(api, api__admin_routes, api__admin_route_count);
    add_routes(api, api__vllm_routes, api__vllm_route_count);
    add_routes(api, api__sglang_routes, api__sglang_route_count);
    api->route_names = hf_xcalloc(total + 1, sizeof *api->route_names);
    for (size_t i = 0; i < total; i++)
        api->route_names[i] = api->routes[i]->pattern;
    api->route_names[total] = "unmatched";
    api->metrics = api__metrics_new(total);
    api->summary = api__summary_new();
    if (getrandom(&api->seed, sizeof api->seed, 0) != (ssize_t)sizeof api->seed)
        api->seed = (uint64_t)hf_clock_mono_ns();
    pthread_mutex_init(&api->reload_lock, NULL);
    hf_fiber_mutex_init(&api->quota_lock);
    atomic_init(&api->tenants, NULL);
    api->config.auth_token = NULL;
    api->config.auth_token_len = 0;
    if (config->auth_token) {
        tenant_table *table;
        char err[256];
        if (tenant_table_parse(config->auth_token, config->auth_token_len, api->seed, &table, err,
                               sizeof err) != 0) {
            log_msg(LOG_ERROR, "api_new: the token file: %s", err);
            abort();
        }
        atomic_store(&api->tenants, table);
    }
    api->started_ms = hf_clock_wall_ms();
    return api;
}

void api_free(api_t *api)
{
    if (!api)
        return;
    free(api->routes);
    free(api->route_names);
    api__metrics_free(api->metrics);
    api__summary_free(api->summary);
    tenant_table_free(atomic_load(&api->tenants));
    for (size_t i = 0; i < api->nretired; i++)
        tenant_table_free(api->retired[i]);
    free(api->retired);
    pthread_mutex_destroy(&api->reload_lock);
    hf_fiber_mutex_destroy(&api->quota_lock);
    free(api);
}

int api_reload_tokens(api_t *api, const char *text, size_t len, char *err, size_t errlen)
{
    tenant_table *table;
    if (!atomic_load(&api->tenants)) {
        snprintf(err, errlen, "auth is off (no --auth-token-file at start)");
        return -1;
    }
    if (tenant_table_parse(text, len, api->seed, &table, err, errlen) != 0)
        return -1;
    pthread_mutex_lock(&api->reload_lock);
    api->retired = hf_xreallocarray(api->retired, api->nretired + 1, sizeof *api->retired);
    api->retired[api->nretired++] = atomic_exchange(&api->tenants, table);
    HF_ASSERT(api->retired[api->nretired - 1] != table); /* retired once, never the one in use */
    pthread_mutex_unlock(&api->reload_lock);
    return 0;
}

/* ---- responses ---- */

void api_response_init(api_response *resp, const api_t *api)
{
    const api_limits *limits = &api->config.limits;
    size_t max_nodes = 4 * limits->max_keys + 1024;
    json_limits json = {.max_depth = JSON_DEPTH_LIMIT, .max_nodes = max_nodes};
    size_t answer_max = limits->max_body_bytes > (SIZE_MAX - ANSWER_MARGIN) / 8
                            ? SIZE_MAX
                            : 8 * limits->max_body_bytes + ANSWER_MARGIN;
    resp->status = 0;
    resp->content_type = NULL;
    resp->www_authenticate = NULL;
    resp->tenant = NULL;
    json_buf_init(&resp->body, answer_max);
    json_doc_init(&resp->doc, &json);
}

void api_response_trim(api_response *resp)
{
    json_buf_reset(&resp->body, ANSWER_KEEP);
    json_doc_reset(&resp->doc);
}

void api_response_free(api_response *resp)
{
    json_buf_free(&resp->body);
    json_doc_free(&resp->doc);
}

/* ---- counters ---- */

void api_count_http_answer(api_t *api, int status)
{
    api__metrics_count(api->metrics, api->nroutes, status);
}

void api_count_connection(api_t *api, api_connection_event event)
{
    api__metrics_connection(api->metrics, event);
}

void api_log_summary(api_t *api)
{
    api__summary_log(api->summary, api->store);
}

void api__write_request_metrics(api__req *req)
{
    /* Route patterns are plain ASCII without quotes or backslashes. */
    api__metrics_write(req->api->metrics, req->out, req->api->route_names);
}

void api__get_server_figures(const api_t *api, api__server_figures *out)
{
    api__metrics_figures(api->metrics, out);
}

int64_t api__started_ms(const api_t *api)
{
    return api->started_ms;
}

/* ---- answering ---- */

void api__begin(api__req *req)
{
    req->resp->status = 200;
    req->resp->content_type = "application/json";
    req->out->len = 0;
}

void api__no_content(api__req *req)
{
    req->resp->status = 204;
    req->resp->content_type = NULL;
    req->out->len = 0;
}

/* Format into the request arena: messages may quote a namespace or a path. */
__attribute__((format(printf, 2, 0))) static const char *vformat(api__req *req, const char *fmt,
                                                                 va_list ap, size_t *len)
{
    va_list copy;
    va_copy(copy, ap);
    int n = vsnprintf(NULL, 0, fmt, copy);
    va_end(copy);
    if (n < 0) {
        *len = 0;
        return "";
    }
    char *text = json_doc_alloc(req->doc, (size_t)n + 1);
    vsnprintf(text, (size_t)n + 1, fmt, ap);
    *len = (size_t)n;
    return text;
}

static void begin_error(api__req *req, int status)
{
    req->resp->status = status;
    req->resp->content_type = "application/json";
    req->out->len = 0;
    req->out->overflow = false;
}

/* {"detail": detail, "reason": <formatted>}, or {"detail": <formatted>}
 * without a detail. */
__attribute__((format(printf, 4, 0))) static void
fail_v(api__req *req, int status, const char *detail, const char *fmt, va_list ap)
{
    size_t len;
    const char *text = vformat(req, fmt, ap, &len);
    begin_error(req, status);
    json_put_lit(req->out, "{\"detail\":");
    if (detail) {
        json_put_str(req->out, detail, strlen(detail));
        json_put_lit(req->out, ",\"reason\":");
    }
    json_put_str(req->out, text, len);
    json_put_char(req->out, '}');
}

void api__fail(api__req *req, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fail_v(req, status, NULL, fmt, ap);
    va_end(ap);
}

void api__fail_reason(api__req *req, int status, const char *detail, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fail_v(req, status, detail, fmt, ap);
    va_end(ap);
}

void api__store_failed(api__req *req, int err)
{
    switch (err) {
    case STORE_EUNAVAILABLE:
        api__fail(req, 503, "Service unavailable: %s", store_describe(req->store, err));
        return;
    case STORE_EUNCERTAIN:
        /* 507, not 503: the stock clients resend a POST on 500/502/503/504,
         * and this change may already have taken effect. */
        api__fail(req, 507, "Outcome unknown: %s", store_describe(req->store, err));
        return;
    case STORE_ENOMEM: api__fail(req, 503, "Service unavailable: out of memory"); return;
    case STORE_EINVAL:
        api__fail(req, 400, "Invalid argument: %s", store_describe(req->store, err));
        return;
    default:
        /* Never expected (store.h lists what an operation may return): worth
         * an error line of its own, and 503, not 500: nothing was acknowledged,
         * and the stock clients treat a 500 as the server's fault. */
        log_msg(LOG_ERROR, "%s: unexpected store error %d (%s)",
                req->route ? req->route->pattern : "?", err, store_describe(req->store, err));
        api__fail(req, 503, "Service unavailable: %s (%d)", store_describe(req->store, err), err);
        return;
    }
}

/* ---- decoding ---- */

static bool fits_rank(int64_t value, uint32_t max_ranks)
{
    return value >= 0 && (uint64_t)value < max_ranks;
}

int api__decode_rank(api__req *req, const json_node *node, const char *field, uint32_t *rank)
{
    uint32_t max_ranks = req->limits->max_ranks;
    if (node->type != JSON_INT) {
        api__fail(req, 400, "'%s' must be an integer in 0..%u, got %s", field,
                  (unsigned)(max_ranks - 1), json_type_name(node));
        return -1;
    }
    if (!fits_rank(node->u.i, max_ranks)) {
        api__fail(req, 400, "'%s' must be an integer in 0..%u, got %lld", field,
                  (unsigned)(max_ranks - 1), (long long)node->u.i);
        return -1;
    }
    *rank = (uint32_t)node->u.i;
    return 0;
}

static int check_count(api__req *req, const json_node *list, const char *field)
{
    if (list->len <= req->limits->max_keys)
        return 0;
    api__fail(req, 400, "'%s' has %u items; at most %zu are allowed in one request", field,
              (unsigned)list->len, req->limits->max_keys);
    return -1;
}

/* A key: a non-empty string of at most max_key_bytes. where: "keys[3]". */
static int check_key(api__req *req, const json_node *key, const char *field, size_t i,
                     const char *sub)
{
    if (key->type != JSON_STRING) {
        api__fail(req, 400, "'%s[%zu]%s' must be a key string, got %s", field, i, sub,
                  json_type_name(key));
        return -1;
    }
    if (key->len == 0) {
        api__fail(req, 400, "'%s[%zu]%s' must be a non-empty key string", field, i, sub);
        return -1;
    }
    if (key->len > req->limits->max_key_bytes) {
        api__fail(req, 400, "'%s[%zu]%s' is a key of %u bytes; at most %zu are allowed", field, i,
                  sub, (unsigned)key->len, req->limits->max_key_bytes);
        return -1;
    }
    return 0;
}

/* A [key, prefix_key] pair; prefix_key may be a string or null. */
static int check_key_pair(api__req *req, const json_node *pair, const char *field, size_t i)
{
    if (pair->len != 2) {
        api__fail(req, 400,
                  "'%s[%zu]' must be a key string or a [key, prefix_key] pair, "
                  "got a list of %u items",
                  field, i, (unsigned)pair->len);
        return -1;
    }
    if (check_key(req, &pair->u.items[0], field, i, "[0]") != 0)
        return -1;
    const json_node *prefix = &pair->u.items[1];
    if (prefix->type != JSON_STRING && prefix->type != JSON_NULL) {
        api__fail(req, 400, "'%s[%zu][1]' (prefix_key) must be a string or null, got %s", field, i,
                  json_type_name(prefix));
        return -1;
    }
    return 0;
}

/* The keys of list: each a key string, or with pairs also a [key,
 * prefix_key] pair (its key taken). */
static int decode_keys(api__req *req, const json_node *list, const char *field, bool pairs,
                       hf_slice **keys)
{
    if (check_count(req, list, field) != 0)
        return -1;
    hf_slice *out = json_doc_alloc(req->doc, list->len * sizeof *out);
    for (size_t i = 0; i < list->len; i++) {
        const json_node *item = &list->u.items[i];
        if (pairs && item->type == JSON_ARRAY) {
            if (check_key_pair(req, item, field, i) != 0)
                return -1;
            item = &item->u.items[0];
        } else if (pairs && item->type != JSON_STRING) {
            api__fail(req, 400,
                      "'%s[%zu]' must be a key string or a [key, prefix_key] pair, got %s", field,
                      i, json_type_name(item));
            return -1;
        } else if (check_key(req, item, field, i, "") != 0) {
            return -1;
        }
        out[i] = json_slice(item);
    }
    *keys = out;
    return 0;
}

int api__decode_keys(api__req *req, const json_node *list, const char *field, hf_slice **keys)
{
    return decode_keys(req, list, field, false, keys);
}

int api__decode_key_items(api__req *req, const json_node *list, const char *field, hf_slice **keys)
{
    return decode_keys(req, list, field, true, keys);
}

int api__decode_route_keys(api__req *req, const json_node *list, hf_slice **keys)
{
    if (req->route->flags & API__KEY_ITEMS)
        return api__decode_key_items(req, list, "keys", keys);
    return api__decode_keys(req, list, "keys", keys);
}

static int check_page(api__req *req, const json_node *page, const char *field, size_t i,
                      const char *sub)
{
    if (page->type == JSON_INT)
        return 0;
    api__fail(req, 400, "'%s[%zu]%s' must be an integer page number, got %s", field, i, sub,
              json_type_name(page));
    return -1;
}

int api__decode_confirmations(api__req *req, const json_node *list, const char *field,
                              hf_slice **keys, int64_t **pages)
{
    if (check_count(req, list, field) != 0)
        return -1;
    hf_slice *out_keys = json_doc_alloc(req->doc, list->len * sizeof *out_keys);
    int64_t *out_pages = json_doc_alloc(req->doc, list->len * sizeof *out_pages);
    for (size_t i = 0; i < list->len; i++) {
        const json_node *pair = &list->u.items[i];
        if (pair->type != JSON_ARRAY || pair->len != 2) {
            api__fail(req, 400, "'%s[%zu]' must be a [key, page] pair, got %s%s", field, i,
                      json_type_name(pair), pair->type == JSON_ARRAY ? " of another length" : "");
            return -1;
        }
        if (check_key(req, &pair->u.items[0], field, i, "[0]") != 0 ||
            check_page(req, &pair->u.items[1], field, i, "[1]") != 0)
            return -1;
        out_keys[i] = json_slice(&pair->u.items[0]);
        out_pages[i] = pair->u.items[1].u.i;
    }
    *keys = out_keys;
    *pages = out_pages;
    return 0;
}

int api__decode_pages(api__req *req, const json_node *node, const char *field, int64_t **pages,
                      size_t *n)
{
    *n = 0;
    *pages = NULL;
    if (!node || node->type == JSON_NULL)
        return 0;
    if (node->type != JSON_ARRAY) {
        api__fail(req, 400, "'%s' must be a list of page numbers, got %s", field,
                  json_type_name(node));
        return -1;
    }
    if (check_count(req, node, field) != 0)
        return -1;
    int64_t *out = json_doc_alloc(req->doc, node->len * sizeof *out);
    for (size_t i = 0; i < node->len; i++) {
        if (check_page(req, &node->u.items[i], field, i, "") != 0)
            return -1;
        out[i] = node->u.items[i].u.i;
    }
    *pages = out;
    *n = node->len;
    return 0;
}

int api__decode_namespace(api__req *req, hf_slice *ns)
{
    const json_node *node = json_get(req->body, "namespace");
    *ns = HF_SLICE_LIT("kv");
    if (!node || node->type == JSON_NULL)
        return 0;
    if (node->type != JSON_STRING || node->len == 0) {
        api__fail(req, 400, "'namespace' must be a non-empty string, got %s",
                  node->type == JSON_STRING ? "an empty string" : json_type_name(node));
        return -1;
    }
    if (node->len > req->limits->max_key_bytes) {
        api__fail(req, 400, "'namespace' is %u bytes; at most %zu are allowed", (unsigned)node->len,
                  req->limits->max_key_bytes);
        return -1;
    }
    if (node->u.str[0] == TENANT_NS_BYTE) {
        api__fail(req, 400,
                  "'namespace' may not begin with the byte 0x%02x: it marks the "
                  "namespaces of tenants",
                  (unsigned)(unsigned char)TENANT_NS_BYTE);
        return -1;
    }
    *ns = json_slice(node);
    return 0;
}

/* ---- tenants ---- */

hf_slice api__store_ns(api__req *req, hf_slice ns)
{
    hf_slice prefix = req->tenant->prefix;
    if (!prefix.len)
        return ns;
    char *p = json_doc_alloc(req->doc, prefix.len + ns.len);
    memcpy(p, prefix.ptr, prefix.len);
    memcpy(p + prefix.len, ns.ptr, ns.len);
    return (hf_slice){p, prefix.len + ns.len};
}

const char *api__tenant_words(api__req *req)
{
    if (!req->resp->tenant)
        return "";
    size_t len = req->tenant->name.len + 10;
    char *text = json_doc_alloc(req->doc, len + 1);
    snprintf(text, len + 1, " (tenant %s)", req->tenant->name.ptr);
    return text;
}

typedef struct pool_filter {
    const tenant *caller;
    api__pool_visitor fn;
    void *ctx;
} pool_filter;

static void filter_pool(void *ctx, hf_slice store_ns, uint32_t rank, const core_pool_stats *s)
{
    pool_filter *f = ctx;
    api__pool pool = {.rank = rank, .stats = s};
    tenant_split(store_ns, &pool.owner, &pool.ns);
    pool.mine = f->caller->operator_ || hf_slice_eq(pool.owner, f->caller->name);
    f->fn(f->ctx, &pool);
}

int api__pools(api__req *req, api__pool_visitor fn, void *ctx)
{
    pool_filter f = {.caller = req->tenant, .fn = fn, .ctx = ctx};
    return req->store->ops->stats(req->store, filter_pool, &f);
}

/* The pages of a tenant's pools, and whether the pool asked for exists. */
typedef struct quota_count {
    hf_slice ns;
    uint32_t rank;
    uint64_t pages;
    bool exists;
} quota_count;

static void count_pages(void *ctx, const api__pool *p)
{
    quota_count *q = ctx;
    if (!p->mine)
        return;
    q->pages += p->stats->num_pages;
    q->exists |= p->rank == q->rank && hf_slice_eq(p->ns, q->ns);
}

static void fail_body(api__req *req, const char *problem);

int api__init_pool(api__req *req, hf_slice ns, uint64_t num_pages, bool *created,
                   uint64_t *existing)
{
    store_t *store = req->store;
    HF_ASSERT(req->tenant && created && existing);
    hf_slice sns = api__store_ns(req, ns);
    uint64_t quota = req->tenant->quota_pages;
    if (quota == TENANT_NO_QUOTA)
        return store->ops->init_pool(store, sns, req->rank, num_pages, created, existing);
    /* One at a time, so that two initializes cannot pass the quota together
     * (within this process: docs/operations.md). Held across store calls,
     * which may park a fiber (util/fiber.h). */
    HF_ASSERT(!req->tenant->operator_); /* the operator has no quota: a tenant's initialize */
    hf_fiber_lock(&req->api->quota_lock);
    quota_count q = {.ns = ns, .rank = req->rank};
    int err = api__pools(req, count_pages, &q);
    HF_ASSERT(hf_fiber_mutex_held(&req->api->quota_lock)); /* across the store calls */
    if (err == STORE_OK && !q.exists && (num_pages > quota || q.pages > quota - num_pages)) {
        hf_fiber_unlock(&req->api->quota_lock);
        char problem[320];
        snprintf(problem, sizeof problem,
                 "tenant '%s' has a quota of %" PRIu64 " pages: its "
                 "pools have %" PRIu64 " and this initialize asks for %" PRIu64 " more",
                 req->tenant->name.ptr, quota, q.pages, num_pages);
        fail_body(req, problem);
        return API__ANSWERED;
    }
    if (err == STORE_OK)
        err = store->ops->init_pool(store, sns, req->rank, num_pages, created, existing);
    hf_fiber_unlock(&req->api->quota_lock);
    return err;
}

/* ---- routing ---- */

/* Whether path has the segments of pattern; *rank_seg gets the "{rank}" one. */
static bool match_shape(const char *pattern, hf_slice path, hf_slice *rank_seg)
{
    const char *p = pattern;
    const char *s = path.ptr;
    const char *end = path.ptr + path.len;
    while (*p) {
        if (*p != '/' || s == end || *s != '/')
            return false;
        p++;
        s++;
        size_t plen = strcspn(p, "/");
        const char *slash = memchr(s, '/', (size_t)(end - s));
        size_t slen = (size_t)((slash ? slash : end) - s);
        if (plen == 6 && memcmp(p, "{rank}", 6) == 0) {
            if (slen == 0)
                return false;
            *rank_seg = (hf_slice){s, slen};
        } else if (plen != slen || memcmp(p, s, plen) != 0) {
            return false;
        }
        p += plen;
        s += slen;
    }
    return s == end;
}

static bool method_allows(const api__route *route, const char *method)
{
    if (strcmp(route->method, method) == 0)
        return true;
    /* HEAD is GET without the body (the HTTP layer drops it). */
    return strcmp(route->method, "GET") == 0 && strcmp(method, "HEAD") == 0;
}

/* The matching route's index; nroutes with *status 404 or 405 if none. */
static size_t find_route(api_t *api, const char *method, hf_slice path, hf_slice *rank_seg,
                         int *status)
{
    *status = 404;
    if (!path.ptr)
        return api->nroutes;
    for (size_t i = 0; i < api->nroutes; i++) {
        const api__route *route = api->routes[i];
        if ((route->flags & API__DEBUG_ONLY) && !api->config.debug_api)
            continue;
        hf_slice seg = {NULL, 0};
        if (!match_shape(route->pattern, path, &seg))
            continue;
        if (!method_allows(route, method)) {
            *status = 405;
            continue;
        }
        *rank_seg = seg;
        return i;
    }
    return api->nroutes;
}

/* Decimal digits only, in 0..max_ranks-1 (leading zeros accepted, as int()). */
static int parse_path_rank(api__req *req, hf_slice seg)
{
    uint64_t value = 0;
    bool ok = seg.len > 0 && seg.len <= 10;
    for (size_t i = 0; ok && i < seg.len; i++) {
        if (seg.ptr[i] < '0' || seg.ptr[i] > '9')
            ok = false;
        else
            value = value * 10 + (uint64_t)(seg.ptr[i] - '0');
    }
    if (ok && value < req->limits->max_ranks) {
        req->rank = (uint32_t)value;
        return 0;
    }
    api__fail(req, 400, "rank '%.*s' in the path must be an integer in 0..%u",
              (int)(seg.len > 64 ? 64 : seg.len), seg.ptr, (unsigned)(req->limits->max_ranks - 1));
    return -1;
}

static void fail_body(api__req *req, const char *problem)
{
    if (req->route->flags & API__INIT_ERRORS)
        api__fail_reason(req, 400, "Invalid initialization parameters", "%s", problem);
    else
        api__fail(req, 400, "%s", problem);
}

static bool is_blank(const char *body, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (body[i] != ' ' && body[i] != '\t' && body[i] != '\n' && body[i] != '\r')
            return false;
    return true;
}

/* The body as an object in req->body (or NULL where allowed); else 400. */
static int decode_body(api__req *req, const char *body, size_t len)
{
    unsigned flags = req->route->flags;
    req->body = NULL;
    if (flags & API__NO_BODY)
        return 0;
    if (is_blank(body, len)) {
        if (flags & API__EMPTY_BODY_OK)
            return 0;
        fail_body(req, "Request body is empty; expected a JSON object");
        return -1;
    }
    char err[256];
    const json_node *root;
    if (json_parse(req->doc, body, len, &root, err, sizeof err) != 0) {
        fail_body(req, err);
        return -1;
    }
    if (root->type != JSON_OBJECT) {
        snprintf(err, sizeof err, "Request body must be a JSON object, got %s",
                 json_type_name(root));
        fail_body(req, err);
        return -1;
    }
    req->body = root;
    return 0;
}

static void dispatch(api__req *req, hf_slice rank_seg, const char *body, size_t len)
{
    if (rank_seg.ptr && parse_path_rank(req, rank_seg) != 0)
        return;
    if (decode_body(req, body, len) != 0)
        return;
    req->route->handler(req);
    if (req->out->overflow) {
        log_msg(LOG_WARN,
                "%s: an answer outgrew the limit of %zu bytes (raise "
                "--max-body-bytes)",
                req->route->pattern, req->out->max);
        api__fail(req, 500, "The answer is larger than this server's limit of %zu bytes",
                  req->out->max);
    }
}

/* With a token file, everything but /health needs one of its tokens
 * (auth.h), which names the request's tenant (tenants.h). */
static bool authorized(api__req *req, hf_slice path, const char *authorization)
{
    const tenant_table *table = atomic_load_explicit(&req->api->tenants, memory_order_acquire);
    req->tenant = &tenant_default;
    if (!table)
        return true;
    req->resp->tenant = "-";
    req->shared = tenant_table_tenants(table) > 1;
    if (hf_slice_eq(path, HF_SLICE_LIT("/health")))
        return true;
    char buf[AUTH_MAX_CREDENTIALS];
    const char *secret;
    size_t len;
    auth_result result = auth_secret(authorization, buf, sizeof buf, &secret, &len);
    const tenant *t = result == AUTH_OK ? tenant_table_find(table, secret, len) : NULL;
    if (t) {
        req->tenant = t;
        req->resp->tenant = t->name.ptr;
        return true;
    }
    api__fail(req, 401, "%s",
              result == AUTH_MISSING
                  ? "Not authenticated: send 'Authorization: Bearer <token>', or HTTP Basic "
                    "auth with the token as password"
              : result == AUTH_MALFORMED
                  ? "Not authenticated: the Authorization header is neither 'Bearer <token>' "
                    "nor HTTP Basic auth"
                  : "Invalid authentication credentials");
    req->resp->www_authenticate = AUTH_CHALLENGE;
    return false;
}

/* The room the request's tenant runs in: with two tenants or more and
 * --tenant-max-in-flight, each but the operator has one. */
static tenant_room *room_of(const api__req *req)
{
    return req->shared && req->api->config.tenant_max_in_flight ? req->tenant->room : NULL;
}

/* A place in the tenant's room (NULL: none needed), waiting in line for at
 * most ROOM_WAIT_US; false, with a 503, if none came. */
static bool enter_room(api__req *req, tenant_room *room)
{
    if (!room)
        return true;
    bool waited;
    bool taken = tenant_room_enter(room, req->api->config.tenant_max_in_flight,
                                   hf_clock_mono_us() + ROOM_WAIT_US, &waited);
    if (waited)
        api__metrics_tenant_wait(req->api->metrics);
    if (!taken)
        api__fail(req, 503,
                  "Tenant '%s' had %u requests running for %d s: each tenant runs at most "
                  "--tenant-max-in-flight requests at once; retry",
                  req->tenant->name.ptr, req->api->config.tenant_max_in_flight,
                  (int)(ROOM_WAIT_US / 1000000));
    return taken;
}

void api_handle(api_t *api, const char *method, hf_slice path, const char *authorization,
                const char *body, size_t len, api_response *resp)
{
    uint64_t start = hf_clock_mono_ns();
    json_doc_reset(&resp->doc);
    resp->body.len = 0;
    resp->body.overflow = false;
    resp->www_authenticate = NULL;
    resp->tenant = NULL;
    api__req req = {
        .api = api,
        .store = api->store,
        .limits = &api->config.limits,
        .hit_ratio_target = api->config.hit_ratio_target,
        .resp = resp,
        .out = &resp->body,
        .doc = &resp->doc,
    };
    hf_slice rank_seg = {NULL, 0};
    int status;
    size_t index = find_route(api, method ? method : "", path, &rank_seg, &status);
    if (!authorized(&req, path, authorization)) {
        /* counted under the route asked for, without saying whether it exists */
    } else if (index == api->nroutes) {
        api__fail(&req, status, status == 405 ? "Method Not Allowed" : "Not Found");
    } else if (req.tenant->operator_ && !(api->routes[index]->flags & API__OPERATOR_OK)) {
        api__fail(&req, 403,
                  "Forbidden: the operator's token reads /metrics, /v1/stats, /ui and "
                  "the debug routes; %s needs a tenant's token",
                  api->routes[index]->pattern);
    } else {
        req.route = api->routes[index];
        tenant_room *room = room_of(&req);
        if (enter_room(&req, room)) {
            dispatch(&req, rank_seg, body, len);
            if (room)
                tenant_room_leave(room);
        }
    }
    api__metrics_observe(api->metrics, index, resp->status, hf_clock_mono_ns() - start);
}
