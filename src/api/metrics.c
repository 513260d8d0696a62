/*
 * metrics.c: see metrics.h.
 *
 * Layout. A shard is one block of cells, one cell per (row, status bucket):
 * the request count, the latency sum in nanoseconds and the (not
 * cumulative) latency buckets. Cumulative buckets are computed when
 * written. The latency buckets of a cell add up to the requests observed
 * with a latency, which is its requests count minus the HTTP layer's own
 * answers (api__metrics_count); the histogram's _count is that sum, so
 * _count always equals the +Inf bucket as Prometheus requires.
 */
#include "api/metrics.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/clock.h"
#include "util/steady.h"
#include "util/xalloc.h"

/* Statuses with their own label; the last bucket is "other". */
static const int counted_statuses[] = {200, 204, 400, 401, 403, 404, 405, 413, 431, 500, 503, 507};
#define STATUS_BUCKETS (sizeof counted_statuses / sizeof counted_statuses[0] + 1)

/* Upper bounds of the latency buckets, in nanoseconds and as `le` labels. */
static const uint64_t latency_bounds_ns[] = {
    10000,    25000,    50000,    100000,    250000,    500000,    1000000,    2500000,    5000000,
    10000000, 25000000, 50000000, 100000000, 250000000, 500000000, 1000000000, 2500000000,
};
static const char *const latency_labels[] = {
    "1e-05", "2.5e-05", "5e-05", "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005",
    "0.01",  "0.025",   "0.05",  "0.1",    "0.25",    "0.5",    "1",     "2.5",
};
#define LATENCY_BOUNDS (sizeof latency_bounds_ns / sizeof latency_bounds_ns[0])
#define LATENCY_BUCKETS (LATENCY_BOUNDS + 1)
_Static_assert(sizeof latency_labels / sizeof latency_labels[0] == LATENCY_BOUNDS,
               "one label per latency bound");

/* Request threads get shards round-robin; more threads than this share. */
#define SHARDS 16

typedef struct cell {
    _Atomic uint64_t requests;
    _Atomic uint64_t sum_ns;
    _Atomic uint64_t buckets[LATENCY_BUCKETS];
} cell;

struct api__metrics {
    size_t rows;                    /* nroutes + 1 */
    _Atomic(cell *) shards[SHARDS]; /* each rows * STATUS_BUCKETS cells */
    _Atomic uint64_t connections_opened;
    _Atomic uint64_t connections_closed;
    _Atomic uint64_t connections_refused;
    _Atomic uint64_t connections_shed;
    _Atomic uint64_t connections_timed_out;
    _Atomic uint64_t tenant_waits;
};

static atomic_uint next_shard;
static _Thread_local unsigned thread_shard; /* 0: none yet, else index + 1 */

api__metrics *api__metrics_new(size_t nroutes)
{
    api__metrics *m = hf_xcalloc(1, sizeof *m);
    m->rows = nroutes + 1;
    for (size_t i = 0; i < SHARDS; i++)
        atomic_init(&m->shards[i], NULL);
    atomic_init(&m->connections_opened, 0);
    atomic_init(&m->connections_closed, 0);
    atomic_init(&m->connections_refused, 0);
    atomic_init(&m->connections_shed, 0);
    atomic_init(&m->connections_timed_out, 0);
    atomic_init(&m->tenant_waits, 0);
    return m;
}

void api__metrics_free(api__metrics *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < SHARDS; i++)
        free(atomic_load(&m->shards[i]));
    free(m);
}

static size_t cells_per_shard(const api__metrics *m)
{
    return m->rows * STATUS_BUCKETS;
}

static cell *shard_new(const api__metrics *m)
{
    size_t n = cells_per_shard(m);
    cell *s = hf_xcalloc(n, sizeof *s);
    for (size_t i = 0; i < n; i++) {
        cell *c = &s[i];
        atomic_init(&c->requests, 0);
        atomic_init(&c->sum_ns, 0);
        for (size_t b = 0; b < LATENCY_BUCKETS; b++)
            atomic_init(&c->buckets[b], 0);
    }
    return s;
}

static cell *my_shard(api__metrics *m)
{
    if (!thread_shard)
        thread_shard = atomic_fetch_add_explicit(&next_shard, 1, memory_order_relaxed) % SHARDS + 1;
    _Atomic(cell *) *slot = &m->shards[thread_shard - 1];
    cell *s = atomic_load_explicit(slot, memory_order_acquire);
    if (s)
        return s;
    cell *fresh = shard_new(m);
    if (atomic_compare_exchange_strong_explicit(slot, &s, fresh, memory_order_acq_rel,
                                                memory_order_acquire))
        return fresh;
    free(fresh); /* another thread of this shard was first: s is its shard */
    return s;
}

static size_t status_bucket(int status)
{
    for (size_t i = 0; i < STATUS_BUCKETS - 1; i++)
        if (counted_statuses[i] == status)
            return i;
    return STATUS_BUCKETS - 1;
}

static cell *cell_of(api__metrics *m, size_t route, int status)
{
    if (route >= m->rows)
        route = m->rows - 1;
    return &my_shard(m)[route * STATUS_BUCKETS + status_bucket(status)];
}

static void add(_Atomic uint64_t *counter, uint64_t n)
{
    atomic_fetch_add_explicit(counter, n, memory_order_relaxed);
}

void api__metrics_observe(api__metrics *m, size_t route, int status, uint64_t ns)
{
    cell *c = cell_of(m, route, status);
    size_t b = 0;
    while (b < LATENCY_BOUNDS && ns > latency_bounds_ns[b])
        b++;
    add(&c->requests, 1);
    add(&c->sum_ns, ns);
    add(&c->buckets[b], 1);
}

void api__metrics_count(api__metrics *m, size_t route, int status)
{
    add(&cell_of(m, route, status)->requests, 1);
}

void api__metrics_connection(api__metrics *m, api_connection_event event)
{
    switch (event) {
    case API_CONNECTION_OPENED: add(&m->connections_opened, 1); return;
    case API_CONNECTION_CLOSED: add(&m->connections_closed, 1); return;
    case API_CONNECTION_REFUSED: add(&m->connections_refused, 1); return;
    case API_CONNECTION_SHED: add(&m->connections_shed, 1); return;
    case API_CONNECTION_TIMED_OUT: add(&m->connections_timed_out, 1); return;
    }
}

void api__metrics_tenant_wait(api__metrics *m)
{
    add(&m->tenant_waits, 1);
}

/* ---- reading ---- */

static uint64_t load(const _Atomic uint64_t *counter)
{
    return atomic_load_explicit(counter, memory_order_relaxed);
}

/* One (row, status) cell summed over the shards. */
typedef struct cell_sum {
    uint64_t requests, sum_ns;
    uint64_t buckets[LATENCY_BUCKETS];
} cell_sum;

static void sum_cell(const api__metrics *m, size_t index, cell_sum *out)
{
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < SHARDS; i++) {
        const cell *s = atomic_load_explicit(&m->shards[i], memory_order_acquire);
        if (!s)
            continue;
        const cell *c = &s[index];
        out->requests += load(&c->requests);
        out->sum_ns += load(&c->sum_ns);
        for (size_t b = 0; b < LATENCY_BUCKETS; b++)
            out->buckets[b] += load(&c->buckets[b]);
    }
}

static void connection_figures(const api__metrics *m, api__server_figures *out)
{
    /* Closed first: a connection closed between the two loads must not
     * make the difference negative. */
    uint64_t closed = load(&m->connections_closed);
    uint64_t opened = load(&m->connections_opened);
    out->connections_total = opened;
    out->connections_open = opened >= closed ? opened - closed : 0;
    out->connections_refused = load(&m->connections_refused);
    out->connections_shed = load(&m->connections_shed);
    out->connections_timed_out = load(&m->connections_timed_out);
}

void api__metrics_figures(const api__metrics *m, api__server_figures *out)
{
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < cells_per_shard(m); i++) {
        cell_sum sum;
        sum_cell(m, i, &sum);
        out->requests += sum.requests;
    }
    connection_figures(m, out);
}

/* ---- Prometheus text ---- */

static void put_str(json_buf *out, const char *text)
{
    json_put_raw(out, text, strlen(text));
}

size_t api__format_number(char *text, size_t size, store_number v)
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

void api__put_number(json_buf *out, store_number v)
{
    char text[48];
    json_put_raw(out, text, api__format_number(text, sizeof text, v));
}

void api__put_clock_offset(json_buf *out)
{
    hf_steady_check(hf_clock_server());
    int64_t us = hf_steady_offset_us(hf_clock_server());
    if (us < 0)
        json_put_char(out, '-');
    api__put_number(out, (store_number){us < 0 ? (uint64_t)-us : (uint64_t)us, 6});
}

void api__prom_family(json_buf *out, const char *name, const char *type, const char *help)
{
    put_str(out, "# HELP ");
    put_str(out, name);
    json_put_char(out, ' ');
    put_str(out, help);
    put_str(out, "\n# TYPE ");
    put_str(out, name);
    json_put_char(out, ' ');
    put_str(out, type);
    json_put_char(out, '\n');
}

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

/* name+suffix{labels[,le="le"]} and the space before the value. */
static void put_series(json_buf *out, const char *name, const char *suffix,
                       const api__prom_label *labels, size_t nlabels, const char *le)
{
    put_str(out, name);
    put_str(out, suffix);
    if (!nlabels && !le) {
        json_put_char(out, ' ');
        return;
    }
    for (size_t i = 0; i < nlabels; i++) {
        json_put_char(out, i ? ',' : '{');
        put_str(out, labels[i].name);
        put_str(out, "=\"");
        put_label_value(out, labels[i].value);
        json_put_char(out, '"');
    }
    if (le) {
        json_put_char(out, nlabels ? ',' : '{');
        put_str(out, "le=\"");
        put_str(out, le);
        json_put_char(out, '"');
    }
    put_str(out, "} ");
}

void api__prom_sample(json_buf *out, const char *name, const api__prom_label *labels,
                      size_t nlabels, store_number value)
{
    put_series(out, name, "", labels, nlabels, NULL);
    api__put_number(out, value);
    json_put_char(out, '\n');
}

void api__prom_single(json_buf *out, const char *name, const char *type, const char *help,
                      store_number value)
{
    api__prom_family(out, name, type, help);
    api__prom_sample(out, name, NULL, 0, value);
}

void api__prom_histogram(json_buf *out, const char *name, const api__prom_label *labels,
                         size_t nlabels, const store_histogram *h, const char *const *le_names)
{
    uint64_t cumulative = 0;
    for (size_t b = 0; b < h->nbuckets; b++) {
        cumulative += h->counts[b];
        char le[48] = "+Inf";
        if (b < h->nbuckets - 1 && le_names)
            snprintf(le, sizeof le, "%s", le_names[b]);
        else if (b < h->nbuckets - 1)
            api__format_number(le, sizeof le, (store_number){h->bounds[b], h->decimals});
        put_series(out, name, "_bucket", labels, nlabels, le);
        json_put_uint(out, cumulative);
        json_put_char(out, '\n');
    }
    put_series(out, name, "_sum", labels, nlabels, NULL);
    api__put_number(out, (store_number){h->sum, h->decimals});
    json_put_char(out, '\n');
    put_series(out, name, "_count", labels, nlabels, NULL);
    json_put_uint(out, cumulative);
    json_put_char(out, '\n');
}

/* ---- the request and connection families ---- */

/* route=".." and status=".." of a cell; status_text holds the number. */
static void cell_labels(api__prom_label labels[2], char status_text[16], const char *route,
                        size_t status_index)
{
    if (status_index < STATUS_BUCKETS - 1)
        snprintf(status_text, 16, "%d", counted_statuses[status_index]);
    else
        snprintf(status_text, 16, "other");
    labels[0] = (api__prom_label){"route", hf_slice_from_cstr(route)};
    labels[1] = (api__prom_label){"status", hf_slice_from_cstr(status_text)};
}

void api__metrics_write(const api__metrics *m, json_buf *out, const char *const *route_names)
{
    static const char requests[] = "hf3fs_metad_requests_total";
    static const char duration[] = "hf3fs_metad_request_duration_seconds";
    size_t ncells = cells_per_shard(m);
    /* Summed once, written twice (two families). */
    cell_sum *sums = hf_xcalloc(ncells, sizeof *sums);
    for (size_t i = 0; i < ncells; i++)
        sum_cell(m, i, &sums[i]);
    api__prom_label labels[2];
    char status[16];

    api__prom_family(out, requests, "counter",
                     "Requests answered, by route and status (route \"unmatched\": no route).");
    for (size_t i = 0; i < ncells; i++) {
        if (!sums[i].requests)
            continue;
        cell_labels(labels, status, route_names[i / STATUS_BUCKETS], i % STATUS_BUCKETS);
        api__prom_sample(out, requests, labels, 2, store_int(sums[i].requests));
    }
    api__prom_family(out, duration, "histogram",
                     "Time to answer a request once read (decode, store and log sync, encode), "
                     "by route and status.");
    for (size_t i = 0; i < ncells; i++) {
        uint64_t observed = 0;
        for (size_t b = 0; b < LATENCY_BUCKETS; b++)
            observed += sums[i].buckets[b];
        if (!observed)
            continue;
        /* the sum in nanoseconds: seconds with 9 decimals */
        store_histogram h = {LATENCY_BUCKETS, latency_bounds_ns, sums[i].buckets, sums[i].sum_ns,
                             9};
        cell_labels(labels, status, route_names[i / STATUS_BUCKETS], i % STATUS_BUCKETS);
        api__prom_histogram(out, duration, labels, 2, &h, latency_labels);
    }
    free(sums);

    api__server_figures conn;
    connection_figures(m, &conn);
    api__prom_single(out, "hf3fs_metad_connections_open", "gauge", "HTTP connections open now.",
                     store_int(conn.connections_open));
    api__prom_single(out, "hf3fs_metad_connections_total", "counter",
                     "HTTP connections accepted since start.", store_int(conn.connections_total));
    api__prom_single(out, "hf3fs_metad_connections_refused_total", "counter",
                     "HTTP connections closed at once because --max-connections were open.",
                     store_int(conn.connections_refused));
    api__prom_single(out, "hf3fs_metad_connections_shed_total", "counter",
                     "HTTP connections closed to admit a new one while --max-connections were "
                     "open (the one furthest from being served).",
                     store_int(conn.connections_shed));
    api__prom_single(out, "hf3fs_metad_connections_timed_out_total", "counter",
                     "HTTP connections closed because a request missed its deadline "
                     "(--header-timeout, --body-timeout, --body-min-rate).",
                     store_int(conn.connections_timed_out));
    api__prom_single(out, "hf3fs_metad_tenant_waits_total", "counter",
                     "Requests that waited for one of their tenant's --tenant-max-in-flight "
                     "places.",
                     store_int(load(&m->tenant_waits)));
}
