/*
 * admin.c: the routes beyond the dialects (docs/protocol.md, "Beyond the
 * dialects"); /metrics is written by prometheus.c.
 *
 *   GET /health    what a client meets (store_mode): 200 {"status":"ok"}
 *                  while serving; 200 {"status":"reads_only","detail":<why>}
 *                  while reads are served and changes fail (a load
 *                  balancer keeps routing the reads); 503
 *                  {"status":"unavailable","detail":<why>} while nothing is
 *                  served. Unless down, "unreplicated":[<node>...] names the
 *                  store's nodes whose changes have no copy elsewhere
 *                  (store_ops.unreplicated), when there are. Never needs
 *                  auth: it is what load balancers and systemd probes call.
 *   GET /v1/stats  200 {"server":{version, module_version,
 *                  value_encoding_version, data_format_version (api.h,
 *                  api_versions), ...},"pools":[{tenant, namespace, rank, the
 *                  figures of CORE_POOL_FIGURES (core.h) in its order,
 *                  refused_confirmations{...}, refused_releases{...}}],
 *                  "namespaces":[{tenant, namespace, prefix{...},
 *                  hit_ratio_at (21 scales, reuse.h; the coarse curve's 5
 *                  over a Redis node without "fine-curve"),
 *                  hit_ratio_sampled_blocks, advice (null before a sampled
 *                  use, else {target, reached, coarse, pages, pages_now,
 *                  hit_ratio_now, doubling_gain, halving_frees,
 *                  halving_cost}: reuse.h reuse_advise)}]}
 *   GET /ui        ui.c: the same figures as a page with the curves drawn
 *   GET /v1/check  200 {"ok":true} or 500 {"ok":false,"detail":...} (503 when the
 *                  store could not be asked); only with
 *                  --debug-api (it walks every pool), else 404
 *   GET /metrics   prometheus.c
 * The pools of /v1/stats and /metrics are the caller's tenant's (every
 * tenant's for the operator), named as that tenant's requests name them
 * (api__pools); the server's own figures are the whole server's.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "api/metrics.h"
#include "util/clock.h"
#include "util/steady.h"
#include "util/xalloc.h"

const char *const api__refusal_names[CORE_REFUSE_COUNT] = {
    [CORE_REFUSE_OUT_OF_RANGE] = "out_of_range",
    [CORE_REFUSE_NOT_RESERVED] = "not_reserved",
    [CORE_REFUSE_OTHER_KEY] = "other_key",
    [CORE_REFUSE_OWNED] = "owned",
};

store_mode api__store_mode(store_t *store, char *reason, size_t len)
{
    reason[0] = '\0';
    store_mode mode = store->ops->health ? store->ops->health(store, reason, len) : STORE_SERVING;
    if (mode != STORE_SERVING && !reason[0])
        snprintf(reason, len, "%s", store_describe(store, STORE_EUNAVAILABLE));
    return mode;
}

/* The health answer's "unreplicated": the store's nodes whose changes
 * have no copy elsewhere (store_ops.unreplicated), the first 64; nothing
 * when there are none. */
#define HEALTH_NODES_MAX 64
static void put_unreplicated(api__req *req)
{
    if (!req->store->ops->unreplicated)
        return;
    char(*names)[STORE_NODE_NAME] = hf_xmalloc(HEALTH_NODES_MAX * sizeof *names);
    size_t n = req->store->ops->unreplicated(req->store, names, HEALTH_NODES_MAX);
    if (n == 0) {
        free(names);
        return;
    }
    json_put_lit(req->out, ",\"unreplicated\":[");
    for (size_t i = 0; i < n && i < HEALTH_NODES_MAX; i++) {
        if (i)
            json_put_char(req->out, ',');
        json_put_str(req->out, names[i], strnlen(names[i], STORE_NODE_NAME));
    }
    json_put_char(req->out, ']');
    free(names);
}

static void health(api__req *req)
{
    char reason[256];
    store_mode mode = api__store_mode(req->store, reason, sizeof reason);
    api__begin(req);
    if (mode == STORE_SERVING) {
        json_put_lit(req->out, "{\"status\":\"ok\"");
        put_unreplicated(req);
        json_put_char(req->out, '}');
        return;
    }
    bool down = mode == STORE_DOWN;
    if (down)
        req->resp->status = 503;
    if (down)
        json_put_lit(req->out, "{\"status\":\"unavailable\",\"detail\":");
    else
        json_put_lit(req->out, "{\"status\":\"reads_only\",\"detail\":");
    size_t len = strnlen(reason, sizeof reason);
    char detail[320];
    int n = snprintf(detail, sizeof detail,
                     down ? "The server cannot serve requests: %.*s"
                          : "The server serves reads but cannot accept changes: %.*s",
                     (int)len, reason);
    json_put_str(req->out, detail, n < 0 ? 0 : strnlen(detail, sizeof detail));
    if (!down)
        put_unreplicated(req);
    json_put_char(req->out, '}');
}

/* ---- the caller's pools ---- */

typedef struct pool_list {
    json_doc *doc;
    api__pool_figures *head, **tail;
} pool_list;

static hf_slice arena_copy(json_doc *doc, hf_slice s)
{
    char *copy = json_doc_alloc(doc, s.len + 1);
    if (s.len)
        memcpy(copy, s.ptr, s.len);
    return (hf_slice){copy, s.len};
}

static void collect_pool(void *ctx, const api__pool *p)
{
    pool_list *list = ctx;
    if (!p->mine)
        return;
    api__pool_figures *pool = json_doc_alloc(list->doc, sizeof *pool);
    pool->next = NULL;
    pool->tenant = arena_copy(list->doc, p->owner);
    pool->ns = arena_copy(list->doc, p->ns);
    pool->rank = p->rank;
    pool->stats = *p->stats;
    *list->tail = pool;
    list->tail = &pool->next;
}

int api__gather_pools(api__req *req, api__pool_figures **head)
{
    pool_list pools = {.doc = req->doc, .head = NULL};
    pools.tail = &pools.head;
    int err = api__pools(req, collect_pool, &pools);
    *head = err == STORE_OK ? pools.head : NULL;
    return err;
}

bool api__collect_pools(api__req *req, api__pool_figures **head)
{
    int err = api__gather_pools(req, head);
    if (err != STORE_OK)
        api__store_failed(req, err);
    return err == STORE_OK;
}

bool api__ns_first(const api__pool_figures *prev, const api__pool_figures *p)
{
    return !prev || !hf_slice_eq(prev->ns, p->ns) || !hf_slice_eq(prev->tenant, p->tenant);
}

bool api__est_ratio(const core_pool_stats *s, int j, store_number *out)
{
    if (s->est_blocks == 0 || !reuse_scale_in(s->est_coarse, j))
        return false;
    *out = (store_number){s->est_hits[j] * 1000000 / s->est_blocks, 6};
    return true;
}

void api__advice(const api__req *req, const api__pool_figures *p, reuse_advice *a)
{
    double t = req->hit_ratio_target;
    int64_t target = t < 0 ? -1 : (int64_t)(t * 1e6 + 0.5);
    reuse_advise(p->stats.num_pages, p->stats.est_blocks, p->stats.est_hits, p->stats.est_coarse,
                 target, a);
}

store_number api__ppm(int64_t ppm)
{
    return (store_number){ppm < 0 ? 0 : (uint64_t)ppm, 6};
}

/* ---- /v1/stats ---- */

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
        json_put_key(out, api__refusal_names[i]);
        json_put_uint(out, counts[i]);
    }
    json_put_char(out, '}');
}

/* {"tenant":..,"namespace":.. and the members that follow */
static void put_names(json_buf *out, const api__pool_figures *p)
{
    json_put_lit(out, "{\"tenant\":");
    json_put_str(out, p->tenant.ptr, p->tenant.len);
    json_put_lit(out, ",\"namespace\":");
    json_put_str(out, p->ns.ptr, p->ns.len);
}

static void put_pool_json(json_buf *out, const api__pool_figures *p)
{
    const core_pool_stats *s = &p->stats;
    put_names(out, p);
    put_counter(out, "rank", p->rank);
#define JSON_FIGURE(field, ...) put_counter(out, #field, s->field);
#define JSON_ALIAS(name, field, ...) put_counter(out, #name, s->field);
    CORE_POOL_FIGURES(JSON_FIGURE, JSON_ALIAS)
#undef JSON_FIGURE
#undef JSON_ALIAS
#define JSON_REFUSALS(field, name, ...) put_refusals(out, #name, s->field);
    CORE_POOL_REFUSALS(JSON_REFUSALS)
#undef JSON_REFUSALS
    json_put_char(out, '}');
}

/* A namespace's prefix-hit figures, in the stats of its first pool. */
static void put_ns_json(const api__req *req, json_buf *out, const api__pool_figures *p)
{
    const core_pool_stats *s = &p->stats;
    put_names(out, p);
    json_put_lit(out, ",\"prefix\":{\"requests\":");
    json_put_uint(out, s->prefix_requests);
    put_counter(out, "blocks", s->prefix_blocks);
    put_counter(out, "hit_blocks", s->prefix_hits);
    json_put_lit(out, "},\"hit_ratio_at\":");
    store_number x;
    if (s->est_blocks == 0) {
        json_put_lit(out, "null");
    } else {
        char sep = '{';
        for (int j = 0; j < REUSE_SCALES; j++) {
            if (!api__est_ratio(s, j, &x))
                continue;
            json_put_char(out, sep);
            sep = ',';
            json_put_key(out, reuse_scale_names[j]);
            api__put_number(out, x);
        }
        json_put_char(out, '}');
    }
    put_counter(out, "hit_ratio_sampled_blocks", s->est_blocks);
    json_put_lit(out, ",\"advice\":");
    reuse_advice a;
    api__advice(req, p, &a);
    if (!a.known) {
        json_put_lit(out, "null}");
        return;
    }
    json_put_lit(out, "{\"target\":");
    api__put_number(out, api__ppm(a.target_ppm));
    json_put_lit(out, ",\"reached\":");
    json_put_bool(out, a.reached);
    json_put_lit(out, ",\"coarse\":");
    json_put_bool(out, a.coarse);
    put_counter(out, "pages", a.pages);
    put_counter(out, "pages_now", p->stats.num_pages);
    json_put_lit(out, ",\"hit_ratio_now\":");
    api__put_number(out, api__ppm(a.ratio_ppm));
    json_put_lit(out, ",\"doubling_gain\":");
    api__put_number(out, api__ppm(a.double_ppm));
    put_counter(out, "halving_frees", a.halve_frees);
    json_put_lit(out, ",\"halving_cost\":");
    api__put_number(out, api__ppm(a.halve_ppm));
    json_put_lit(out, "}}");
}

/* ---- the store's own figures (store_emitter) as JSON ---- */

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
    api__put_number(v->out, value);
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
    store_mode mode = api__store_mode(req->store, reason, sizeof reason);
    bool healthy = mode == STORE_SERVING;
    api_versions v = api_get_versions();
    json_put_lit(out, "\"server\":{\"version\":");
    json_put_str(out, v.release, strlen(v.release));
    put_counter(out, "module_version", v.module);
    put_counter(out, "value_encoding_version", v.value_encoding);
    put_counter(out, "data_format_version", v.data_format);
    json_put_lit(out, ",\"started_at\":");
    json_put_int(out, started / 1000);
    json_put_lit(out, ",\"uptime_seconds\":");
    json_put_int(out, (now - started) / 1000);
    json_put_lit(out, ",\"accepting_changes\":");
    json_put_bool(out, healthy);
    if (!healthy) {
        json_put_lit(out, ",\"unavailable_reason\":");
        json_put_str(out, reason, strnlen(reason, sizeof reason));
    }
    json_put_lit(out, ",\"mode\":");
    json_put_str(out, store_mode_name(mode), strlen(store_mode_name(mode)));
    json_put_lit(out, ",\"clock_offset_seconds\":");
    api__put_clock_offset(out);
    put_counter(out, "clock_steps", hf_steady_steps(hf_clock_server()));
    put_counter(out, "requests", fig.requests);
    json_put_lit(out, ",\"connections\":{\"open\":");
    json_put_uint(out, fig.connections_open);
    put_counter(out, "total", fig.connections_total);
    put_counter(out, "refused", fig.connections_refused);
    put_counter(out, "shed", fig.connections_shed);
    put_counter(out, "timed_out", fig.connections_timed_out);
    json_put_char(out, '}');
    put_store_json(req);
    json_put_char(out, '}');
}

static void stats(api__req *req)
{
    api__pool_figures *pools;
    if (!api__collect_pools(req, &pools))
        return;
    json_buf *out = req->out;
    api__begin(req);
    json_put_char(out, '{');
    put_server_json(req);
    json_put_lit(out, ",\"pools\":[");
    for (const api__pool_figures *p = pools; p; p = p->next) {
        if (p != pools)
            json_put_char(out, ',');
        put_pool_json(out, p);
    }
    json_put_lit(out, "],\"namespaces\":[");
    size_t k = 0;
    for (const api__pool_figures *prev = NULL, *p = pools; p; prev = p, p = p->next) {
        if (!api__ns_first(prev, p))
            continue;
        if (k++)
            json_put_char(out, ',');
        put_ns_json(req, out, p);
    }
    json_put_lit(out, "]}");
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

const api__route api__admin_routes[] = {
    API__ROUTE("GET", "/health", health, API__NO_BODY | API__OPERATOR_OK),
    API__ROUTE("GET", "/metrics", api__prometheus, API__NO_BODY | API__OPERATOR_OK),
    API__ROUTE("GET", "/v1/stats", stats, API__NO_BODY | API__OPERATOR_OK),
    API__ROUTE("GET", "/ui", api__ui, API__NO_BODY | API__OPERATOR_OK),
    API__ROUTE("GET", "/v1/check", check, API__NO_BODY | API__DEBUG_ONLY | API__OPERATOR_OK),
};
const size_t api__admin_route_count = sizeof api__admin_routes / sizeof api__admin_routes[0];
