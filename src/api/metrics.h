/*
 * metrics.h: the server's own figures (not the pools'): requests and their
 * latency per route and status, and connections. Internal to src/api: api.c
 * counts, admin.c and prometheus.c write them out for /v1/stats and
 * /metrics. And the one writer of Prometheus text (format 0.0.4) that every
 * family of /metrics goes through (api__prom_*).
 *
 * Cost on the hot path. api__metrics_observe() is a bucket search over 17
 * bounds and three relaxed atomic adds on the calling thread's shard: no
 * lock, and no cache line shared with other threads as long as there are no
 * more request threads than shards (threads get shards round-robin on their
 * first request; a shard is allocated by its first thread). Readers sum the
 * shards; a scrape may see a request counted but its latency not yet, never
 * a torn number.
 *
 * Rows: route i of api.c's table is row i; row nroutes is "unmatched"
 * (404 and answers the HTTP layer gives by itself, such as 413).
 */
#ifndef HF_API_METRICS_H
#define HF_API_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "api/api.h"
#include "api/json.h"

typedef struct api__metrics api__metrics;

/* Aborts on out-of-memory. */
api__metrics *api__metrics_new(size_t nroutes);
void api__metrics_free(api__metrics *m);

/* A request of row `route` answered `status` after `ns` nanoseconds. */
void api__metrics_observe(api__metrics *m, size_t route, int status, uint64_t ns);
/* An answer without a measured latency (the HTTP layer's own): counted in
 * requests_total only. */
void api__metrics_count(api__metrics *m, size_t route, int status);
void api__metrics_connection(api__metrics *m, api_connection_event event);
/* A request waited for a place in its tenant's room (room.h). */
void api__metrics_tenant_wait(api__metrics *m);

typedef struct api__server_figures {
    uint64_t requests; /* every answer counted */
    uint64_t connections_open;
    uint64_t connections_total;     /* accepted since start */
    uint64_t connections_refused;   /* closed at once: the connection limit was reached */
    uint64_t connections_shed;      /* closed to admit a new one at the limit */
    uint64_t connections_timed_out; /* closed: a request missed its deadline */
} api__server_figures;

void api__metrics_figures(const api__metrics *m, api__server_figures *out);

/* ---- Prometheus text format 0.0.4 ---- */

/* name="value": value escaped as the format wants (backslash, double quote,
 * newline), so any bytes may be given. */
typedef struct api__prom_label {
    const char *name;
    hf_slice value;
} api__prom_label;

/* units * 10^-decimals as a decimal ("5.003080") into text (NUL-terminated);
 * its length. Also the numbers of the JSON views. */
size_t api__format_number(char *text, size_t size, store_number v);
void api__put_number(json_buf *out, store_number v);
/* The server clock's offset from the wall clock (util/clock.h), signed
 * seconds with microseconds, after a check made now. */
void api__put_clock_offset(json_buf *out);

/* # HELP and # TYPE of a family; type is "counter", "gauge", ... */
void api__prom_family(json_buf *out, const char *name, const char *type, const char *help);
/* name{labels} value: the braces left out when there are no labels. */
void api__prom_sample(json_buf *out, const char *name, const api__prom_label *labels,
                      size_t nlabels, store_number value);
/* A family of one unlabelled sample. */
void api__prom_single(json_buf *out, const char *name, const char *type, const char *help,
                      store_number value);
/* The series of one histogram (store.h: counts not cumulative): name_bucket
 * with le = le_names[b] (NULL: the bounds written as numbers) and +Inf for
 * the last, name_sum, name_count. */
void api__prom_histogram(json_buf *out, const char *name, const api__prom_label *labels,
                         size_t nlabels, const store_histogram *h, const char *const *le_names);

/* hf3fs_metad_requests_total, hf3fs_metad_request_duration_seconds and the
 * connection families, in Prometheus text format 0.0.4. route_names[i] is
 * row i's label (plain ASCII without quotes or backslashes). */
void api__metrics_write(const api__metrics *m, json_buf *out, const char *const *route_names);

#endif
