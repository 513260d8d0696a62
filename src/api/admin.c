/*
 * admin.c: the routes beyond the dialects (PROTOCOL.md, "Beyond the dialects").
 *
 *   GET /health    200 {"status":"ok"}
 *   GET /v1/stats  200 {"pools":[{namespace, rank, num_pages, pages per state,
 *                  counters, refused_confirmations{...}, refused_releases{...}}]}
 *   GET /v1/check  200 {"ok":true} or 500 {"ok":false,"detail":...}; only with
 *                  --debug-api (it walks every pool), else 404
 *   GET /metrics   Prometheus text format 0.0.4: requests per route and
 *                  status, then per pool (labels namespace, rank) pages per
 *                  state, keys, and the pool counters.
 *
 * Prometheus wants every sample of a metric family together, so /metrics
 * first copies each pool's figures (the store hands them out one pool at a
 * time) into the request arena, then writes family by family.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "api/api_internal.h"

static const char *const refusal_names[CORE_REFUSE_COUNT] = {
    [CORE_REFUSE_OUT_OF_RANGE] = "out_of_range",
    [CORE_REFUSE_NOT_RESERVED] = "not_reserved",
    [CORE_REFUSE_OTHER_KEY] = "other_key",
    [CORE_REFUSE_OWNED] = "owned",
};

static void health(api__req *req)
{
    api__begin(req);
    json_put_lit(req->out, "{\"status\":\"ok\"}");
}

/* ---- /v1/stats ---- */

typedef struct stats_writer {
    json_buf *out;
    size_t pools;
} stats_writer;

static void put_counter(json_buf *out, const char *name, uint64_t value)
{
    json_put_char(out, ',');
    json_put_key(out, name);
    json_put_uint(out, value);
}

static void put_refusals(json_buf *out, const char *name, const uint64_t *counts)
{
    json_put_char(out, ',');
    json_put_key(out, name);
    json_put_char(out, '{');
    for (int i = 0; i < CORE_REFUSE_COUNT; i++) {
        if (i)
            json_put_char(out, ',');
        json_put_key(out, refusal_names[i]);
        json_put_uint(out, counts[i]);
    }
    json_put_char(out, '}');
}

static void put_pool_json(void *ctx, hf_slice ns, uint32_t rank, const core_pool_stats *s)
{
    stats_writer *w = ctx;
    json_buf *out = w->out;
    if (w->pools++)
        json_put_char(out, ',');
    json_put_lit(out, "{\"namespace\":");
    json_put_str(out, ns.ptr, ns.len);
    put_counter(out, "rank", rank);
    put_counter(out, "num_pages", s->num_pages);
    put_counter(out, "free", s->free);
    put_counter(out, "reserved", s->reserved);
    put_counter(out, "owned", s->owned);
    put_counter(out, "draining", s->draining);
    put_counter(out, "keys", s->owned);
    put_counter(out, "touched", s->touched);
    put_counter(out, "hits", s->hits);
    put_counter(out, "misses", s->misses);
    put_counter(out, "reservations", s->reservations);
    put_counter(out, "confirmations", s->confirmations);
    put_counter(out, "releases", s->releases);
    put_counter(out, "evictions", s->evictions);
    put_counter(out, "expired_reservations", s->expired_reservations);
    put_counter(out, "duplicate_confirmations", s->duplicate_confirmations);
    put_refusals(out, "refused_confirmations", s->refused_confirms);
    put_refusals(out, "refused_releases", s->refused_releases);
    json_put_char(out, '}');
}

static void stats(api__req *req)
{
    stats_writer writer = {.out = req->out};
    api__begin(req);
    json_put_lit(req->out, "{\"pools\":[");
    int err = req->store->ops->stats(req->store, put_pool_json, &writer);
    if (err != STORE_OK) {
        api__store_failed(req, err);
        return;
    }
    json_put_lit(req->out, "]}");
}

/* ---- /v1/check ---- */

static void check(api__req *req)
{
    char err[512] = "";
    if (req->store->ops->check(req->store, err, sizeof err) == 0) {
        api__begin(req);
        json_put_lit(req->out, "{\"ok\":true}");
        return;
    }
    api__begin(req);
    req->resp->status = 500;
    json_put_lit(req->out, "{\"ok\":false,\"detail\":");
    json_put_str(req->out, err, strnlen(err, sizeof err));
    json_put_char(req->out, '}');
}

/* ---- /metrics ---- */

typedef struct pool_figures {
    struct pool_figures *next;
    hf_slice ns; /* copied into the request arena */
    uint32_t rank;
    core_pool_stats stats;
} pool_figures;

typedef struct pool_list {
    json_doc *doc;
    pool_figures *head, **tail;
} pool_list;

static void collect_pool(void *ctx, hf_slice ns, uint32_t rank, const core_pool_stats *s)
{
    pool_list *list = ctx;
    pool_figures *pool = json_doc_alloc(list->doc, sizeof *pool);
    char *name = json_doc_alloc(list->doc, ns.len + 1);
    if (ns.len)
        memcpy(name, ns.ptr, ns.len);
    pool->next = NULL;
    pool->ns = (hf_slice){name, ns.len};
    pool->rank = rank;
    pool->stats = *s;
    *list->tail = pool;
    list->tail = &pool->next;
}

/* A label value: backslash, double quote and newline escaped (format 0.0.4). */
static void put_label_value(json_buf *out, hf_slice value)
{
    size_t start = 0;
    for (size_t i = 0; i < value.len; i++) {
        char c = value.ptr[i];
        if (c != '\\' && c != '"' && c != '\n')
            continue;
        json_put_raw(out, value.ptr + start, i - start);
        json_put_raw(out, c == '\n' ? "\\n" : c == '"' ? "\\\"" : "\\\\", 2);
        start = i + 1;
    }
    json_put_raw(out, value.ptr + start, value.len - start);
}

static void put_family(json_buf *out, const char *name, const char *type, const char *help)
{
    json_put_lit(out, "# HELP ");
    json_put_raw(out, name, strlen(name));
    json_put_char(out, ' ');
    json_put_raw(out, help, strlen(help));
    json_put_lit(out, "\n# TYPE ");
    json_put_raw(out, name, strlen(name));
    json_put_char(out, ' ');
    json_put_raw(out, type, strlen(type));
    json_put_char(out, '\n');
}

/* name{namespace="..",rank="..",<extra>} value */
static void put_sample(json_buf *out, const char *name, const pool_figures *pool,
                       const char *extra, uint64_t value)
{
    json_put_raw(out, name, strlen(name));
    json_put_lit(out, "{namespace=\"");
    put_label_value(out, pool->ns);
    json_put_lit(out, "\",rank=\"");
    json_put_uint(out, pool->rank);
    json_put_char(out, '"');
    if (extra) {
        json_put_char(out, ',');
        json_put_raw(out, extra, strlen(extra));
    }
    json_put_lit(out, "} ");
    json_put_uint(out, value);
    json_put_char(out, '\n');
}

static void put_page_states(json_buf *out, const pool_figures *pools)
{
    static const char name[] = "hf3fs_metad_pool_pages";
    put_family(out, name, "gauge", "Pages of a pool, by state.");
    for (const pool_figures *p = pools; p; p = p->next) {
        put_sample(out, name, p, "state=\"free\"", p->stats.free);
        put_sample(out, name, p, "state=\"reserved\"", p->stats.reserved);
        put_sample(out, name, p, "state=\"owned\"", p->stats.owned);
        put_sample(out, name, p, "state=\"draining\"", p->stats.draining);
    }
}

/* One family of one figure per pool; offset is the figure in core_pool_stats. */
typedef struct pool_metric {
    const char *name, *type, *help;
    size_t offset;
} pool_metric;

#define POOL_METRIC(n, t, field, h) {n, t, h, offsetof(core_pool_stats, field)}

static const pool_metric pool_metrics[] = {
    POOL_METRIC("hf3fs_metad_pool_num_pages", "gauge", num_pages, "Pages of the pool."),
    POOL_METRIC("hf3fs_metad_pool_keys", "gauge", owned, "Keys owning a page in the pool."),
    POOL_METRIC("hf3fs_metad_pool_touched_pages", "gauge", touched,
                "Pages ever handed out (high-water mark)."),
    POOL_METRIC("hf3fs_metad_pool_hits_total", "counter", hits,
                "Keys found by allocate, exists or lookup."),
    POOL_METRIC("hf3fs_metad_pool_misses_total", "counter", misses,
                "Keys not found by allocate, exists or lookup."),
    POOL_METRIC("hf3fs_metad_pool_reservations_total", "counter", reservations,
                "Pages reserved for a key."),
    POOL_METRIC("hf3fs_metad_pool_confirmations_total", "counter", confirmations,
                "Reservations confirmed."),
    POOL_METRIC("hf3fs_metad_pool_releases_total", "counter", releases,
                "Reservations released."),
    POOL_METRIC("hf3fs_metad_pool_evictions_total", "counter", evictions,
                "Owned keys evicted to make room."),
    POOL_METRIC("hf3fs_metad_pool_expired_reservations_total", "counter", expired_reservations,
                "Reservations whose lease ran out."),
    POOL_METRIC("hf3fs_metad_pool_duplicate_confirmations_total", "counter",
                duplicate_confirmations, "Confirmed reservations freed because the key already owned another page."),
};

static void put_pool_metric(json_buf *out, const pool_metric *m, const pool_figures *pools)
{
    put_family(out, m->name, m->type, m->help);
    for (const pool_figures *p = pools; p; p = p->next) {
        uint64_t value;
        memcpy(&value, (const char *)&p->stats + m->offset, sizeof value);
        put_sample(out, m->name, p, NULL, value);
    }
}

static void put_refusal_family(json_buf *out, const char *name, const char *help,
                               const pool_figures *pools, bool releases)
{
    put_family(out, name, "counter", help);
    for (const pool_figures *p = pools; p; p = p->next) {
        const uint64_t *counts = releases ? p->stats.refused_releases : p->stats.refused_confirms;
        for (int i = 0; i < CORE_REFUSE_COUNT; i++) {
            char label[48];
            snprintf(label, sizeof label, "reason=\"%s\"", refusal_names[i]);
            put_sample(out, name, p, label, counts[i]);
        }
    }
}

static void metrics(api__req *req)
{
    pool_list pools = {.doc = req->doc, .head = NULL};
    pools.tail = &pools.head;
    int err = req->store->ops->stats(req->store, collect_pool, &pools);
    if (err != STORE_OK) {
        api__store_failed(req, err);
        return;
    }
    api__begin(req);
    req->resp->content_type = "text/plain; version=0.0.4; charset=utf-8";
    api__write_request_metrics(req);
    put_page_states(req->out, pools.head);
    for (size_t i = 0; i < sizeof pool_metrics / sizeof pool_metrics[0]; i++)
        put_pool_metric(req->out, &pool_metrics[i], pools.head);
    put_refusal_family(req->out, "hf3fs_metad_pool_refused_confirmations_total",
                       "Confirmations refused, by reason.", pools.head, false);
    put_refusal_family(req->out, "hf3fs_metad_pool_refused_releases_total",
                       "Releases refused, by reason.", pools.head, true);
}

const api__route api__admin_routes[] = {
    {"GET", "/health", health, API__NO_BODY},
    {"GET", "/metrics", metrics, API__NO_BODY},
    {"GET", "/v1/stats", stats, API__NO_BODY},
    {"GET", "/v1/check", check, API__NO_BODY | API__DEBUG_ONLY},
};
const size_t api__admin_route_count = sizeof api__admin_routes / sizeof api__admin_routes[0];
