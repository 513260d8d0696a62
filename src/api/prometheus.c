/*
 * prometheus.c: GET /metrics, Prometheus text format 0.0.4 (metrics.h
 * writes it): requests and latency per route and status, connections,
 * the build (hf3fs_metad_build_info), server state, the store engine's own families (store_ops.metrics: the
 * embedded engine's log and snapshots), then per pool (labels tenant,
 * namespace, rank) pages per state and the figures of CORE_POOL_FIGURES
 * (core.h), the refusals by reason, and per namespace (labels tenant,
 * namespace) the prefix-hit figures. docs/operations.md has the table of
 * every family.
 *
 * It always answers 200: while the store cannot be read, with what the
 * front end knows (its requests, connections, clock, the serving mode and
 * the engine's own gauges, e.g. hf3fs_metad_store_up 0), and without the
 * store-backed families (the pools, hf3fs_metad_pools): absent, never stale
 * numbers. A scrape that fails would hide exactly the outage its alerts
 * are for.
 *
 * Prometheus wants every sample of a metric family together, so the pools'
 * figures are first copied into the request arena (api__collect_pools),
 * then written family by family.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "api/api_internal.h"
#include "api/metrics.h"
#include "util/clock.h"
#include "util/steady.h"

/* ---- the pools' and the namespaces' families ---- */

/* How a figure shows (core.h, CORE_POOL_FIGURES), or a namespace's. */
typedef enum figure_view {
    VIEW_STATE,  /* a sample of hf3fs_metad_pool_pages */
    VIEW_FAMILY, /* a family of its own */
    VIEW_LEASE,  /* a family of its own, after the FAMILY ones */
    VIEW_NS,     /* a family of its own, a sample per namespace (no rank) */
} figure_view;

typedef struct figure {
    const char *family, *type, *help;
    const char *field; /* the label value of a STATE */
    size_t offset;     /* in core_pool_stats */
    figure_view view;
} figure;

#define FIGURE(field, view, family, type, help)                                                    \
    {family, #type, help, #field, offsetof(core_pool_stats, field), VIEW_##view},
#define FIGURE_ALIAS(name, field, view, family, type, help) FIGURE(field, view, family, type, help)

static const figure figures[] = {
    CORE_POOL_FIGURES(FIGURE, FIGURE_ALIAS)
    /* the namespace's, in the stats of its first pool */
    FIGURE(prefix_requests, NS, "hf3fs_metad_prefix_requests_total", counter,
           "Completeness reads (vLLM batch_exists, SGLang exists) counted as requests.")
        FIGURE(prefix_blocks, NS, "hf3fs_metad_prefix_blocks_total", counter,
               "Keys asked by those reads.")
            FIGURE(prefix_hits, NS, "hf3fs_metad_prefix_hit_blocks_total", counter,
                   "Keys in the leading run of present keys of those reads (prefix hits).")
                FIGURE(est_blocks, NS, "hf3fs_metad_hit_ratio_estimate_sampled_blocks", gauge,
                       "Sampled block uses in the window of the hit ratio estimate.")};
#define NFIGURES (sizeof figures / sizeof figures[0])

static uint64_t value_of(const api__pool_figures *p, const figure *f)
{
    uint64_t value;
    memcpy(&value, (const char *)&p->stats + f->offset, sizeof value);
    return value;
}

/* The labels of a pool's sample: tenant, namespace, the rank unless
 * per_ns, then extra (if extra->name). rank_text holds the rank. */
static size_t pool_labels(api__prom_label labels[4], char rank_text[16], const api__pool_figures *p,
                          bool per_ns, api__prom_label extra)
{
    size_t n = 0;
    labels[n++] = (api__prom_label){"tenant", p->tenant};
    labels[n++] = (api__prom_label){"namespace", p->ns};
    if (!per_ns) {
        snprintf(rank_text, 16, "%u", (unsigned)p->rank);
        labels[n++] = (api__prom_label){"rank", hf_slice_from_cstr(rank_text)};
    }
    if (extra.name)
        labels[n++] = extra;
    return n;
}

static void put_pool_sample(json_buf *out, const char *family, const api__pool_figures *p,
                            bool per_ns, api__prom_label extra, store_number value)
{
    api__prom_label labels[4];
    char rank[16];
    api__prom_sample(out, family, labels, pool_labels(labels, rank, p, per_ns, extra), value);
}

static const api__prom_label no_label = {NULL, {NULL, 0}};

/* The families of the figures of one view, in the list's order: a sample
 * per pool, or per namespace (its first pool's) for VIEW_NS. */
static void put_figures(json_buf *out, const api__pool_figures *pools, figure_view view)
{
    for (const figure *f = figures; f < figures + NFIGURES; f++) {
        if (f->view != view)
            continue;
        api__prom_family(out, f->family, f->type, f->help);
        for (const api__pool_figures *prev = NULL, *p = pools; p; prev = p, p = p->next)
            if (view != VIEW_NS || api__ns_first(prev, p))
                put_pool_sample(out, f->family, p, view == VIEW_NS, no_label,
                                store_int(value_of(p, f)));
    }
}

static void put_page_states(json_buf *out, const api__pool_figures *pools)
{
    static const char name[] = "hf3fs_metad_pool_pages";
    api__prom_family(out, name, "gauge", "Pages of a pool, by state.");
    for (const api__pool_figures *p = pools; p; p = p->next)
        for (const figure *f = figures; f < figures + NFIGURES; f++)
            if (f->view == VIEW_STATE)
                put_pool_sample(out, name, p, false,
                                (api__prom_label){"state", hf_slice_from_cstr(f->field)},
                                store_int(value_of(p, f)));
}

static void put_refusals(json_buf *out, const char *family, const char *help,
                         const api__pool_figures *pools, size_t offset)
{
    api__prom_family(out, family, "counter", help);
    for (const api__pool_figures *p = pools; p; p = p->next) {
        const uint64_t *counts = (const uint64_t *)((const char *)&p->stats + offset);
        for (int i = 0; i < CORE_REFUSE_COUNT; i++)
            put_pool_sample(out, family, p, false,
                            (api__prom_label){"reason", hf_slice_from_cstr(api__refusal_names[i])},
                            store_int(counts[i]));
    }
}

static void put_hit_ratios(json_buf *out, const api__pool_figures *pools)
{
    static const char name[] = "hf3fs_metad_hit_ratio_estimate";
    api__prom_family(out, name, "gauge",
                     "Estimated prefix-hit ratio if the namespace's pools had pool_scale times "
                     "their pages.");
    for (const api__pool_figures *prev = NULL, *p = pools; p; prev = p, p = p->next) {
        store_number x;
        if (!api__ns_first(prev, p))
            continue;
        for (int j = 0; j < REUSE_SCALES; j++) {
            if (!api__est_ratio(&p->stats, j, &x))
                continue;
            api__prom_label scale = {"pool_scale", hf_slice_from_cstr(reuse_scale_names[j])};
            put_pool_sample(out, name, p, true, scale, x);
        }
    }
}

/* The sizing advice (reuse.h reuse_advise): a family per figure, a sample
 * per namespace with a sampled use. */
enum { ADV_TARGET, ADV_PAGES, ADV_DOUBLING, ADV_HALVING_FREES, ADV_HALVING_COST, ADV_COUNT };

static store_number advice_value(const reuse_advice *a, int k)
{
    switch (k) {
    case ADV_TARGET: return api__ppm(a->target_ppm);
    case ADV_PAGES: return store_int(a->pages);
    case ADV_DOUBLING: return api__ppm(a->double_ppm);
    case ADV_HALVING_FREES: return store_int(a->halve_frees);
    default: return api__ppm(a->halve_ppm);
    }
}

static void put_advice(const api__req *req, json_buf *out, const api__pool_figures *pools)
{
    static const char *const names[ADV_COUNT][2] = {
        {"hf3fs_metad_hit_ratio_target",
         "The prefix-hit ratio the sizing advice seeks (--hit-ratio-target, or the estimate at "
         "the largest pool_scale less 0.01)."},
        {"hf3fs_metad_pool_advised_pages",
         "Smallest pages per rank whose estimated prefix-hit ratio reaches the target (4 times "
         "the pages when none up to that does)."},
        {"hf3fs_metad_hit_ratio_doubling_gain",
         "Estimated prefix-hit ratio at twice the pages less that at the pages now."},
        {"hf3fs_metad_pool_halving_frees_pages", "Pages per rank that halving the pool frees."},
        {"hf3fs_metad_hit_ratio_halving_cost",
         "Estimated prefix-hit ratio at the pages now less that at half of them."},
    };
    for (int k = 0; k < ADV_COUNT; k++) {
        api__prom_family(out, names[k][0], "gauge", names[k][1]);
        for (const api__pool_figures *prev = NULL, *p = pools; p; prev = p, p = p->next) {
            reuse_advice a;
            if (!api__ns_first(prev, p))
                continue;
            api__advice(req, p, &a);
            if (a.known)
                put_pool_sample(out, names[k][0], p, true, no_label, advice_value(&a, k));
        }
    }
}

/* ---- the server's and the store's families ---- */

/* Prometheus' *_build_info convention: one sample of value 1 whose labels
 * are the release and the versions it speaks (api.h, api_versions). */
static void put_build_info(json_buf *out)
{
    static const char *const name = "hf3fs_metad_build_info";
    api_versions v = api_get_versions();
    char module[16], encoding[16], format[16];
    snprintf(module, sizeof module, "%u", v.module);
    snprintf(encoding, sizeof encoding, "%u", v.value_encoding);
    snprintf(format, sizeof format, "%u", v.data_format);
    const api__prom_label labels[] = {
        {"version", hf_slice_from_cstr(v.release)},
        {"module_version", hf_slice_from_cstr(module)},
        {"value_encoding_version", hf_slice_from_cstr(encoding)},
        {"data_format_version", hf_slice_from_cstr(format)},
    };
    api__prom_family(out, name, "gauge",
                     "The release of this server (version) and the versions it speaks: the "
                     "Redis module's commands, its values' encoding, the data directory's "
                     "files; always 1.");
    api__prom_sample(out, name, labels, sizeof labels / sizeof labels[0], store_int(1));
}

/* npools: the caller's pools, or SIZE_MAX if the store could not say. */
static void put_server_metrics(api__req *req, size_t npools)
{
    json_buf *out = req->out;
    char reason[256];
    put_build_info(out);
    int64_t started = api__started_ms(req->api);
    store_mode mode = api__store_mode(req->store, reason, sizeof reason);
    api__prom_single(out, "hf3fs_metad_accepting_changes", "gauge",
                     "1 while the server serves reads and changes, 0 while changes fail (see "
                     "/health and hf3fs_metad_serving).",
                     store_int(mode == STORE_SERVING));
    static const char serving[] = "hf3fs_metad_serving";
    api__prom_family(out, serving, "gauge",
                     "1 for what a client meets now, 0 for the others: mode serving (reads and "
                     "changes), reads_only (changes fail), down (nothing served); as /health.");
    for (store_mode m = STORE_SERVING; m <= STORE_DOWN; m++) {
        api__prom_label l = {"mode", hf_slice_from_cstr(store_mode_name(m))};
        api__prom_sample(out, serving, &l, 1, store_int(m == mode));
    }
    api__prom_single(out, "hf3fs_metad_start_time_seconds", "gauge",
                     "When the server started, in seconds since the Unix epoch.",
                     (store_number){started < 0 ? 0 : (uint64_t)started, 3});
    if (npools != SIZE_MAX)
        api__prom_single(out, "hf3fs_metad_pools", "gauge", "Pools (namespace, rank) initialized.",
                         store_int(npools));
    /* The offset first: its check counts a step not seen yet. */
    api__prom_family(out, "hf3fs_metad_clock_offset_seconds", "gauge",
                     "The wall clock minus the server clock of every lease, which never steps "
                     "and slews toward the wall clock at 1% at most.");
    json_put_lit(out, "hf3fs_metad_clock_offset_seconds ");
    api__put_clock_offset(out);
    json_put_char(out, '\n');
    api__prom_single(out, "hf3fs_metad_clock_steps_total", "counter",
                     "Steps of the wall clock (more than 1 s apart from the monotonic clock "
                     "between two checks, 1 s apart); leases are unaffected.",
                     store_int(hf_steady_steps(hf_clock_server())));
}

/* The store's families, as the engine reports them (store_emitter). */
typedef struct prom_view {
    api__req *req;
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
    api__prom_family(v->req->out, name,
                     (unsigned)type <= STORE_METRIC_HISTOGRAM ? metric_types[type] : "untyped",
                     help);
}

/* The store's labels as api__prom_label, in the request arena. */
static api__prom_label *labels_of(prom_view *v, const store_label *labels, size_t nlabels)
{
    api__prom_label *l = json_doc_alloc(v->req->doc, (nlabels ? nlabels : 1) * sizeof *l);
    for (size_t i = 0; i < nlabels; i++)
        l[i] = (api__prom_label){labels[i].name, hf_slice_from_cstr(labels[i].value)};
    return l;
}

static void prom_sample(void *ctx, const store_label *labels, size_t nlabels, store_number value)
{
    prom_view *v = ctx;
    if (v->family)
        api__prom_sample(v->req->out, v->family, labels_of(v, labels, nlabels), nlabels, value);
}

static void prom_histogram(void *ctx, const store_label *labels, size_t nlabels,
                           const store_histogram *h)
{
    prom_view *v = ctx;
    if (v->family && h->nbuckets > 0)
        api__prom_histogram(v->req->out, v->family, labels_of(v, labels, nlabels), nlabels, h,
                            NULL);
}

static void put_store_metrics(api__req *req)
{
    store_t *store = req->store;
    if (!store->ops->metrics)
        return;
    prom_view view = {.req = req, .family = NULL};
    store_emitter e = {
        .ctx = &view,
        .family = prom_family,
        .sample = prom_sample,
        .histogram = prom_histogram,
    };
    store->ops->metrics(store, &e);
}

void api__prometheus(api__req *req)
{
    api__pool_figures *pools;
    /* unreadable: the pools' families are written with no sample */
    bool readable = api__gather_pools(req, &pools) == STORE_OK;
    size_t npools = 0;
    for (const api__pool_figures *p = pools; p; p = p->next)
        npools++;
    if (!readable)
        npools = SIZE_MAX;
    json_buf *out = req->out;
    api__begin(req);
    req->resp->content_type = "text/plain; version=0.0.4; charset=utf-8";
    api__write_request_metrics(req);
    put_server_metrics(req, npools);
    put_store_metrics(req);
    put_page_states(out, pools);
    put_figures(out, pools, VIEW_FAMILY);
    put_figures(out, pools, VIEW_LEASE);
#define REFUSALS(field, name, family, help)                                                        \
    put_refusals(out, family, help, pools, offsetof(core_pool_stats, field));
    CORE_POOL_REFUSALS(REFUSALS)
#undef REFUSALS
    put_figures(out, pools, VIEW_NS);
    put_hit_ratios(out, pools);
    put_advice(req, out, pools);
}
