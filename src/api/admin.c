/*
 * admin.c: the routes beyond the dialects (docs/protocol.md, "Beyond the dialects"),
 * and the periodic summary line of the log.
 *
 *   GET /health    200 {"status":"ok"} while the store accepts changes, else
 *                  503 {"status":"unavailable","detail":<why>}. Never needs
 *                  auth: it is what load balancers and systemd probes call.
 *   GET /v1/stats  200 {"server":{...},"pools":[{tenant, namespace, rank, num_pages,
 *                  pages per state, keys, counters, refused_confirmations{...},
 *                  refused_releases{...}}]}
 *   GET /v1/check  200 {"ok":true} or 500 {"ok":false,"detail":...} (503 when the
 *                  store could not be asked); only with
 *                  --debug-api (it walks every pool), else 404
 *   GET /metrics   Prometheus text format 0.0.4: requests and latency per
 *                  route and status, connections, server state, the store
 *                  engine's own families (store_ops.metrics: the embedded
 *                  engine's log and snapshots), then per pool (labels
 *                  tenant, namespace, rank) pages per state, keys and the
 *                  pool counters. docs/operations.md has the table of every
 *                  family.
 * The pools of /v1/stats and /metrics are the caller's tenant's (every
 * tenant's for the operator), named as that tenant's requests name them
 * (api__pools); the server's own figures are the whole server's.
 *
 * Prometheus wants every sample of a metric family together, so /metrics
 * first copies each pool's figures (the store hands them out one pool at a
 * time) into the request arena, then writes family by family.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/api_internal.h"
#include "api/metrics.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/xalloc.h"

static const char *const refusal_names[CORE_REFUSE_COUNT] = {
    [CORE_REFUSE_OUT_OF_RANGE] = "out_of_range",
    [CORE_REFUSE_NOT_RESERVED] = "not_reserved",
    [CORE_REFUSE_OTHER_KEY] = "other_key",
    [CORE_REFUSE_OWNED] = "owned",
};

/* Whether the store accepts changes; if not, why in reason. */
static bool store_healthy(store_t *store, char *reason, size_t len)
{
    reason[0] = '\0';
    if (!store->ops->health || store->ops->health(store, reason, len) == STORE_OK)
        return true;
    if (!reason[0])
        snprintf(reason, len, "%s", store_describe(store, STORE_EUNAVAILABLE));
    return false;
}

static void health(api__req *req)
{
    char reason[256];
    if (store_healthy(req->store, reason, sizeof reason)) {
        api__begin(req);
        json_put_lit(req->out, "{\"status\":\"ok\"}");
        return;
    }
    api__begin(req);
    req->resp->status = 503;
    json_put_lit(req->out, "{\"status\":\"unavailable\",\"detail\":");
    size_t len = strnlen(reason, sizeof reason);
    char detail[320];
    int n = snprintf(detail, sizeof detail, "The server cannot accept changes: %.*s", (int)len,
                     reason);
    json_put_str(req->out, detail, n < 0 ? 0 : strnlen(detail, sizeof detail));
    json_put_char(req->out, '}');
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

static void put_pool_json(void *ctx, bool mine, hf_slice owner, hf_slice ns, uint32_t rank,
                          const core_pool_stats *s)
{
    stats_writer *w = ctx;
    json_buf *out = w->out;
    if (!mine)
        return;
    if (w->pools++)
        json_put_char(out, ',');
    json_put_lit(out, "{\"tenant\":");
    json_put_str(out, owner.ptr, owner.len);
    json_put_lit(out, ",\"namespace\":");
    json_put_str(out, ns.ptr, ns.len);
    put_counter(out, "rank", rank);
    put_counter(out, "num_pages", s->num_pages);
    put_counter(out, "free", s->free);
    put_counter(out, "reserved", s->reserved);
    put_counter(out, "owned", s->owned);
    put_counter(out, "draining", s->draining);
    put_counter(out, "write_leased", s->write_leased);
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
    put_counter(out, "write_leases", s->write_leases);
    put_counter(out, "write_leases_ended", s->write_leases_ended);
    put_counter(out, "write_leases_expired", s->write_leases_expired);
    put_refusals(out, "refused_confirmations", s->refused_confirms);
    put_refusals(out, "refused_releases", s->refused_releases);
    json_put_char(out, '}');
}

/* ---- the store's own figures (store_emitter), written as JSON or as Prometheus text ---- */

/* units * 10^-decimals as a decimal ("5.003080") into text; its length. */
static size_t format_number(char *text, size_t size, store_number v)
{
    int n;
    if (v.decimals == 0 || v.decimals > 9) {
        n = snprintf(text, size, "%" PRIu64, v.units);
    } else {
        uint64_t scale = 1;
        for (unsigned i = 0; i < v.decimals; i++)
            scale *= 10;
        n = snprintf(text, size, "%" PRIu64 ".%0*" PRIu64, v.units / scale, (int)v.decimals,
                     v.units % scale);
    }
    return n < 0 ? 0 : (size_t)n < size ? (size_t)n : size - 1;
}

static void put_number(json_buf *out, store_number v)
{
    char text[48];
    json_put_raw(out, text, format_number(text, sizeof text, v));
}

/* The JSON view: members of "server", nested objects at most JSON_DEPTH deep. */
#define JSON_DEPTH 8

typedef struct json_view {
    json_buf *out;
    int depth;
    bool more[JSON_DEPTH + 1]; /* a member was written at this depth: the next needs a comma */
} json_view;

static void json_member(json_view *v, const char *key)
{
    if (v->more[v->depth])
        json_put_char(v->out, ',');
    v->more[v->depth] = true;
    json_put_key(v->out, key);
}

static void json_object(void *ctx, const char *key)
{
    json_view *v = ctx;
    json_member(v, key);
    json_put_char(v->out, '{');
    if (v->depth < JSON_DEPTH)
        v->more[++v->depth] = false;
}

static void json_end(void *ctx)
{
    json_view *v = ctx;
    json_put_char(v->out, '}');
    if (v->depth > 0)
        v->depth--;
}

static void json_number(void *ctx, const char *key, store_number value)
{
    json_view *v = ctx;
    json_member(v, key);
    put_number(v->out, value);
}

static void json_boolean(void *ctx, const char *key, bool value)
{
    json_view *v = ctx;
    json_member(v, key);
    json_put_bool(v->out, value);
}

static void json_string(void *ctx, const char *key, const char *value, size_t len)
{
    json_view *v = ctx;
    json_member(v, key);
    json_put_str(v->out, value, len);
}

static void json_null(void *ctx, const char *key)
{
    json_view *v = ctx;
    json_member(v, key);
    json_put_lit(v->out, "null");
}

/* The store's members of "server" (after at least one of the server's own);
 * an engine that fails to report leaves what it wrote, closed. */
static void put_store_json(api__req *req)
{
    store_t *store = req->store;
    if (!store->ops->metrics)
        return;
    json_view view = {.out = req->out, .more = {true}};
    store_emitter e = {
        .ctx = &view,
        .object = json_object,
        .end = json_end,
        .number = json_number,
        .boolean = json_boolean,
        .string = json_string,
        .null = json_null,
    };
    store->ops->metrics(store, &e);
    while (view.depth > 0)
        json_end(&view);
}

/* "server": process-wide figures, before the pools. */
static void put_server_json(api__req *req)
{
    json_buf *out = req->out;
    api__server_figures fig;
    api__get_server_figures(req->api, &fig);
    int64_t now = hf_clock_wall_ms(), started = api__started_ms(req->api);
    char reason[256];
    bool healthy = store_healthy(req->store, reason, sizeof reason);
    json_put_lit(out, "\"server\":{\"started_at\":");
    json_put_int(out, started / 1000);
    json_put_lit(out, ",\"uptime_seconds\":");
    json_put_int(out, (now - started) / 1000);
    json_put_lit(out, ",\"accepting_changes\":");
    json_put_bool(out, healthy);
    if (!healthy) {
        json_put_lit(out, ",\"unavailable_reason\":");
        json_put_str(out, reason, strnlen(reason, sizeof reason));
    }
    put_counter(out, "requests", fig.requests);
    json_put_lit(out, ",\"connections\":{\"open\":");
    json_put_uint(out, fig.connections_open);
    put_counter(out, "total", fig.connections_total);
    put_counter(out, "refused", fig.connections_refused);
    json_put_char(out, '}');
    put_store_json(req);
    json_put_char(out, '}');
}

/* ---- /v1/check ---- */

static void check(api__req *req)
{
    char err[512] = "";
    int rc = req->store->ops->check(req->store, err, sizeof err);
    if (rc == 0) {
        api__begin(req);
        json_put_lit(req->out, "{\"ok\":true}");
        return;
    }
    if (rc == STORE_EUNAVAILABLE || rc == STORE_EUNCERTAIN) { /* could not look: not a verdict */
        api__store_failed(req, rc);
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
    hf_slice tenant, ns; /* copied into the request arena */
    uint32_t rank;
    core_pool_stats stats;
} pool_figures;

typedef struct pool_list {
    json_doc *doc;
    pool_figures *head, **tail;
} pool_list;

static hf_slice arena_copy(json_doc *doc, hf_slice s)
{
    char *copy = json_doc_alloc(doc, s.len + 1);
    if (s.len)
        memcpy(copy, s.ptr, s.len);
    return (hf_slice){copy, s.len};
}

static void collect_pool(void *ctx, bool mine, hf_slice owner, hf_slice ns, uint32_t rank,
                         const core_pool_stats *s)
{
    pool_list *list = ctx;
    if (!mine)
        return;
    pool_figures *pool = json_doc_alloc(list->doc, sizeof *pool);
    pool->next = NULL;
    pool->tenant = arena_copy(list->doc, owner);
    pool->ns = arena_copy(list->doc, ns);
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

/* name{tenant="..",namespace="..",[rank="..",]<extra>} value; the rank
 * unless the figure is the namespace's. */
static void put_labelled(json_buf *out, const char *name, const pool_figures *pool,
                         bool with_rank, const char *extra, store_number value)
{
    json_put_raw(out, name, strlen(name));
    json_put_lit(out, "{tenant=\"");
    put_label_value(out, pool->tenant);
    json_put_lit(out, "\",namespace=\"");
    put_label_value(out, pool->ns);
    json_put_char(out, '"');
    if (with_rank) {
        json_put_lit(out, ",rank=\"");
        json_put_uint(out, pool->rank);
        json_put_char(out, '"');
    }
    if (extra) {
        json_put_char(out, ',');
        json_put_raw(out, extra, strlen(extra));
    }
    json_put_lit(out, "} ");
    put_number(out, value);
    json_put_char(out, '\n');
}

static void put_sample(json_buf *out, const char *name, const pool_figures *pool,
                       const char *extra, uint64_t value)
{
    put_labelled(out, name, pool, true, extra, store_int(value));
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
    POOL_METRIC("hf3fs_metad_pool_write_leased_pages", "gauge", write_leased,
                "Owned pages protected for writers: vLLM allocation hits being rewritten."),
    POOL_METRIC("hf3fs_metad_pool_write_leases_total", "counter", write_leases,
                "Write leases given to allocation hits (one per writer)."),
    POOL_METRIC("hf3fs_metad_pool_write_leases_ended_total", "counter", write_leases_ended,
                "Write leases ended by the confirmation of their last writer."),
    POOL_METRIC("hf3fs_metad_pool_write_leases_expired_total", "counter", write_leases_expired,
                "Write leases that ran out before their writers confirmed (writers crashed or "
                "gave up)."),
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

/* ---- a namespace's prefix-hit figures, in the stats of its first pool ---- */

/* The caller's pools into the request arena; false (answered) if the
 * store failed. */
static bool collect_pools(api__req *req, pool_list *pools)
{
    *pools = (pool_list){.doc = req->doc, .head = NULL};
    pools->tail = &pools->head;
    int err = api__pools(req, collect_pool, pools);
    if (err != STORE_OK)
        api__store_failed(req, err);
    return err == STORE_OK;
}

/* Is p its namespace's first pool (the lowest rank: the one whose stats
 * carry the namespace's figures)? Pools come by namespace, then rank. */
static bool ns_first(const pool_figures *prev, const pool_figures *p)
{
    return !prev || !hf_slice_eq(prev->ns, p->ns) || !hf_slice_eq(prev->tenant, p->tenant);
}

/* The estimated prefix-hit ratio at scale j (reuse.h), or false when the
 * window has no sampled block use. */
static bool est_ratio(const core_pool_stats *s, int j, store_number *out)
{
    if (s->est_blocks == 0)
        return false;
    *out = (store_number){s->est_hits[j] * 1000000 / s->est_blocks, 6};
    return true;
}

static void put_ns_json(json_buf *out, const pool_figures *p)
{
    const core_pool_stats *s = &p->stats;
    json_put_lit(out, "{\"tenant\":");
    json_put_str(out, p->tenant.ptr, p->tenant.len);
    json_put_lit(out, ",\"namespace\":");
    json_put_str(out, p->ns.ptr, p->ns.len);
    json_put_lit(out, ",\"prefix\":{\"requests\":");
    json_put_uint(out, s->prefix_requests);
    put_counter(out, "blocks", s->prefix_blocks);
    put_counter(out, "hit_blocks", s->prefix_hits);
    json_put_lit(out, "},\"hit_ratio_at\":");
    store_number x;
    if (!est_ratio(s, 0, &x)) {
        json_put_lit(out, "null");
    } else {
        for (int j = 0; j < REUSE_SCALES; j++) {
            est_ratio(s, j, &x);
            json_put_char(out, j ? ',' : '{');
            json_put_key(out, reuse_scale_names[j]);
            put_number(out, x);
        }
        json_put_char(out, '}');
    }
    put_counter(out, "hit_ratio_sampled_blocks", s->est_blocks);
    json_put_char(out, '}');
}

static void stats(api__req *req)
{
    pool_list pools;
    if (!collect_pools(req, &pools))
        return;
    stats_writer writer = {.out = req->out};
    api__begin(req);
    json_put_char(req->out, '{');
    put_server_json(req);
    json_put_lit(req->out, ",\"pools\":[");
    for (const pool_figures *p = pools.head; p; p = p->next)
        put_pool_json(&writer, true, p->tenant, p->ns, p->rank, &p->stats);
    json_put_lit(req->out, "],\"namespaces\":[");
    size_t k = 0;
    for (const pool_figures *prev = NULL, *p = pools.head; p; prev = p, p = p->next) {
        if (!ns_first(prev, p))
            continue;
        if (k++)
            json_put_char(req->out, ',');
        put_ns_json(req->out, p);
    }
    json_put_lit(req->out, "]}");
}

static const pool_metric ns_metrics[] = {
    POOL_METRIC("hf3fs_metad_prefix_requests_total", "counter", prefix_requests,
                "Completeness reads (vLLM batch_exists, SGLang exists) counted as requests."),
    POOL_METRIC("hf3fs_metad_prefix_blocks_total", "counter", prefix_blocks,
                "Keys asked by those reads."),
    POOL_METRIC("hf3fs_metad_prefix_hit_blocks_total", "counter", prefix_hits,
                "Keys in the leading run of present keys of those reads (prefix hits)."),
    POOL_METRIC("hf3fs_metad_hit_ratio_estimate_sampled_blocks", "gauge", est_blocks,
                "Sampled block uses in the window of the hit ratio estimate."),
};

static void put_ns_metrics(json_buf *out, const pool_figures *pools)
{
    for (size_t i = 0; i < sizeof ns_metrics / sizeof ns_metrics[0]; i++) {
        const pool_metric *m = &ns_metrics[i];
        put_family(out, m->name, m->type, m->help);
        for (const pool_figures *prev = NULL, *p = pools; p; prev = p, p = p->next) {
            uint64_t value;
            memcpy(&value, (const char *)&p->stats + m->offset, sizeof value);
            if (ns_first(prev, p))
                put_labelled(out, m->name, p, false, NULL, store_int(value));
        }
    }
    static const char name[] = "hf3fs_metad_hit_ratio_estimate";
    put_family(out, name, "gauge",
               "Estimated prefix-hit ratio if the namespace's pools had pool_scale times their "
               "pages.");
    for (const pool_figures *prev = NULL, *p = pools; p; prev = p, p = p->next) {
        store_number x;
        for (int j = 0; ns_first(prev, p) && j < REUSE_SCALES && est_ratio(&p->stats, j, &x); j++) {
            char extra[32];
            snprintf(extra, sizeof extra, "pool_scale=\"%s\"", reuse_scale_names[j]);
            put_labelled(out, name, p, false, extra, x);
        }
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

/* A family of one unlabeled sample. */
static void put_single(json_buf *out, const char *name, const char *type, const char *help,
                       uint64_t value)
{
    put_family(out, name, type, help);
    json_put_raw(out, name, strlen(name));
    json_put_char(out, ' ');
    json_put_uint(out, value);
    json_put_char(out, '\n');
}

/* Milliseconds as seconds with three decimals; negative values as 0. */
static void put_ms_as_seconds(json_buf *out, int64_t ms)
{
    char text[32];
    if (ms < 0)
        ms = 0;
    int n = snprintf(text, sizeof text, "%" PRId64 ".%03d", ms / 1000, (int)(ms % 1000));
    json_put_raw(out, text, (size_t)n);
}

static void put_server_metrics(api__req *req, size_t npools)
{
    json_buf *out = req->out;
    char reason[256];
    put_single(out, "hf3fs_metad_accepting_changes", "gauge",
               "1 while the store accepts changes, 0 while it refuses them (see /health).",
               store_healthy(req->store, reason, sizeof reason));
    put_family(out, "hf3fs_metad_start_time_seconds", "gauge",
               "When the server started, in seconds since the Unix epoch.");
    json_put_lit(out, "hf3fs_metad_start_time_seconds ");
    put_ms_as_seconds(out, api__started_ms(req->api));
    json_put_char(out, '\n');
    put_single(out, "hf3fs_metad_pools", "gauge", "Pools (namespace, rank) initialized.",
               npools);
}

/* The Prometheus view of the store's figures. */
typedef struct prom_view {
    json_buf *out;
    const char *family; /* the current family's name */
} prom_view;

static const char *const metric_types[] = {
    [STORE_METRIC_COUNTER] = "counter",
    [STORE_METRIC_GAUGE] = "gauge",
    [STORE_METRIC_HISTOGRAM] = "histogram",
};

static void prom_family(void *ctx, const char *name, store_metric_type type, const char *help)
{
    prom_view *v = ctx;
    v->family = name;
    put_family(v->out, name, (unsigned)type <= STORE_METRIC_HISTOGRAM ? metric_types[type] : "untyped",
               help);
}

/* family+suffix{labels[,le="le"]} with nothing between the braces left out. */
static void put_series(json_buf *out, const char *name, const char *suffix,
                       const store_label *labels, size_t nlabels, const char *le)
{
    json_put_raw(out, name, strlen(name));
    json_put_raw(out, suffix, strlen(suffix));
    if (nlabels || le) {
        json_put_char(out, '{');
        for (size_t i = 0; i < nlabels; i++) {
            if (i)
                json_put_char(out, ',');
            json_put_raw(out, labels[i].name, strlen(labels[i].name));
            json_put_lit(out, "=\"");
            put_label_value(out, hf_slice_from_cstr(labels[i].value));
            json_put_char(out, '"');
        }
        if (le) {
            if (nlabels)
                json_put_char(out, ',');
            json_put_lit(out, "le=\"");
            json_put_raw(out, le, strlen(le));
            json_put_char(out, '"');
        }
        json_put_char(out, '}');
    }
    json_put_char(out, ' ');
}

static void prom_sample(void *ctx, const store_label *labels, size_t nlabels, store_number value)
{
    prom_view *v = ctx;
    if (!v->family)
        return;
    put_series(v->out, v->family, "", labels, nlabels, NULL);
    put_number(v->out, value);
    json_put_char(v->out, '\n');
}

static void prom_histogram(void *ctx, const store_label *labels, size_t nlabels,
                           const store_histogram *h)
{
    prom_view *v = ctx;
    if (!v->family || h->nbuckets == 0)
        return;
    uint64_t cumulative = 0;
    for (size_t b = 0; b < h->nbuckets; b++) {
        cumulative += h->counts[b];
        char le[48];
        if (b < h->nbuckets - 1)
            format_number(le, sizeof le, (store_number){h->bounds[b], h->decimals});
        else
            snprintf(le, sizeof le, "+Inf");
        put_series(v->out, v->family, "_bucket", labels, nlabels, le);
        json_put_uint(v->out, cumulative);
        json_put_char(v->out, '\n');
    }
    put_series(v->out, v->family, "_sum", labels, nlabels, NULL);
    put_number(v->out, (store_number){h->sum, h->decimals});
    json_put_char(v->out, '\n');
    put_series(v->out, v->family, "_count", labels, nlabels, NULL);
    json_put_uint(v->out, cumulative);
    json_put_char(v->out, '\n');
}

/* The store's own families, as the engine reports them. */
static void put_store_metrics(api__req *req)
{
    store_t *store = req->store;
    if (!store->ops->metrics)
        return;
    prom_view view = {.out = req->out, .family = NULL};
    store_emitter e = {
        .ctx = &view,
        .family = prom_family,
        .sample = prom_sample,
        .histogram = prom_histogram,
    };
    store->ops->metrics(store, &e);
}

static void metrics(api__req *req)
{
    pool_list pools;
    if (!collect_pools(req, &pools))
        return;
    size_t npools = 0;
    for (const pool_figures *p = pools.head; p; p = p->next)
        npools++;
    api__begin(req);
    req->resp->content_type = "text/plain; version=0.0.4; charset=utf-8";
    api__write_request_metrics(req);
    put_server_metrics(req, npools);
    put_store_metrics(req);
    put_page_states(req->out, pools.head);
    for (size_t i = 0; i < sizeof pool_metrics / sizeof pool_metrics[0]; i++)
        put_pool_metric(req->out, &pool_metrics[i], pools.head);
    put_refusal_family(req->out, "hf3fs_metad_pool_refused_confirmations_total",
                       "Confirmations refused, by reason.", pools.head, false);
    put_refusal_family(req->out, "hf3fs_metad_pool_refused_releases_total",
                       "Releases refused, by reason.", pools.head, true);
    put_ns_metrics(req->out, pools.head);
}

/* ---- the periodic summary line ---- */

/* What the summary counts, summed over every pool. */
typedef struct summary_figures {
    uint64_t evictions, expired;
    uint64_t refused_confirms[CORE_REFUSE_COUNT];
    uint64_t refused_releases[CORE_REFUSE_COUNT];
} summary_figures;

struct api__summary {
    bool primed;
    summary_figures last;
    struct timespec last_time; /* monotonic */
};

api__summary *api__summary_new(void)
{
    return hf_xcalloc(1, sizeof(api__summary));
}

void api__summary_free(api__summary *summary)
{
    free(summary);
}

static void add_pool_figures(void *ctx, hf_slice ns, uint32_t rank, const core_pool_stats *s)
{
    summary_figures *f = ctx;
    f->evictions += s->evictions;
    f->expired += s->expired_reservations;
    for (int i = 0; i < CORE_REFUSE_COUNT; i++) {
        f->refused_confirms[i] += s->refused_confirms[i];
        f->refused_releases[i] += s->refused_releases[i];
    }
}

/* Counters only grow, except when /clear forgets pools: then count from 0. */
static uint64_t moved(uint64_t now, uint64_t before)
{
    return now >= before ? now - before : now;
}

/* " (not_reserved 3, other_key 1)" for the reasons that moved. */
static uint64_t put_reasons(char *text, size_t size, const uint64_t *now, const uint64_t *before)
{
    uint64_t total = 0;
    size_t n = 0;
    for (int i = 0; i < CORE_REFUSE_COUNT; i++) {
        uint64_t d = moved(now[i], before[i]);
        if (!d)
            continue;
        total += d;
        int w = snprintf(text + n, size - n, "%s%s %" PRIu64, n ? ", " : " (", refusal_names[i], d);
        if (w > 0 && (size_t)w < size - n)
            n += (size_t)w;
    }
    if (n && n + 2 <= size)
        memcpy(text + n, ")", 2);
    else if (!n && size)
        text[0] = '\0';
    return total;
}

void api__summary_log(api__summary *summary, store_t *store)
{
    summary_figures now = {0};
    if (store->ops->stats(store, add_pool_figures, &now) != STORE_OK)
        return;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    summary_figures before = summary->last;
    double seconds = (double)(t.tv_sec - summary->last_time.tv_sec) +
                     (double)(t.tv_nsec - summary->last_time.tv_nsec) / 1e9;
    bool primed = summary->primed;
    summary->primed = true;
    summary->last = now;
    summary->last_time = t;
    if (!primed)
        return;
    char confirms[160], releases[160];
    uint64_t evictions = moved(now.evictions, before.evictions);
    uint64_t expired = moved(now.expired, before.expired);
    uint64_t refused_c = put_reasons(confirms, sizeof confirms, now.refused_confirms,
                                     before.refused_confirms);
    uint64_t refused_r = put_reasons(releases, sizeof releases, now.refused_releases,
                                     before.refused_releases);
    if (!evictions && !expired && !refused_c && !refused_r)
        return;
    /* Only what moved: "12 evictions, 2 refused confirmations (not_reserved 2)". */
    char line[512];
    size_t n = 0;
    const struct {
        uint64_t count;
        const char *what, *reasons;
    } parts[] = {
        {evictions, "evictions", ""},
        {expired, "expired reservations", ""},
        {refused_c, "refused confirmations", confirms},
        {refused_r, "refused releases", releases},
    };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        if (!parts[i].count)
            continue;
        int w = snprintf(line + n, sizeof line - n, "%s%" PRIu64 " %s%s", n ? ", " : "",
                         parts[i].count, parts[i].what, parts[i].reasons);
        if (w > 0 && (size_t)w < sizeof line - n)
            n += (size_t)w;
    }
    /* Refused confirmations mean written KV that was thrown away: worth a warning. */
    log_msg(refused_c ? LOG_WARN : LOG_INFO, "in the last %.0f s: %s", seconds, line);
}

const api__route api__admin_routes[] = {
    {"GET", "/health", health, API__NO_BODY | API__OPERATOR_OK},
    {"GET", "/metrics", metrics, API__NO_BODY | API__OPERATOR_OK},
    {"GET", "/v1/stats", stats, API__NO_BODY | API__OPERATOR_OK},
    {"GET", "/v1/check", check, API__NO_BODY | API__DEBUG_ONLY | API__OPERATOR_OK},
};
const size_t api__admin_route_count = sizeof api__admin_routes / sizeof api__admin_routes[0];
