/*
 * api_internal.h: what api.c shares with the route files (vllm.c, sglang.c,
 * admin.c, prometheus.c), dialect.c and summary.c. Not for use outside
 * src/api.
 *
 * A route file exports a table of routes. api.c matches the path and method,
 * parses the {rank} segment and the body, then calls the route's handler
 * with an api__req. A handler decodes and validates the whole body with the
 * api__decode_* helpers (each answers 400 itself and returns -1 on the first
 * problem), and only then calls the store. It ends by answering exactly once:
 * api__begin() + writes to req->out, api__no_content(), or one of the
 * api__fail*() calls.
 *
 * The dialects' routes (vllm.c, sglang.c) all have one handler,
 * api__dialect_run (dialect.c): each row names its decoder, its store call
 * and its answer, and the one dispatcher runs them in that order (below,
 * "The dialects' routes").
 */
#ifndef HF_API_INTERNAL_H
#define HF_API_INTERNAL_H

#include <stdarg.h>
#include <stdint.h>

#include "api/api.h"
#include "api/json.h"
#include "api/tenants.h"

typedef struct api__req api__req;
typedef void (*api__handler)(api__req *req);

/* ---- the dialects' routes (dialect.c) ---- */

/* The store calls of the dialects, made by dialect.c. In: what the route's
 * decoder filled in of api__call; out: the arrays it answers in. */
typedef enum api__store_call {
    API__INIT,               /* api__init_pool(ns, num_pages): created, existing */
    API__ALLOCATE_ALL,       /* allocate, all or nothing (vLLM): pages */
    API__ALLOCATE_PARTIAL,   /* allocate, partial (SGLang): pages, present (existed) */
    API__CONFIRM,            /* confirm (keys, pages) and release */
    API__EXISTS,             /* exists in the pool: present */
    API__LOOKUP,             /* lookup in the pool: pages */
    API__DELETE,             /* delete_keys */
    API__CLEAR_POOL,         /* clear_pool */
    API__CLEAR_TENANT,       /* every pool of the request's tenant (vLLM /clear) */
    API__COMPLETE_EXISTS,    /* complete_exists in ns: present */
    API__COMPLETE_LOCATIONS, /* complete_locations: pages */
} api__store_call;

/* One request of a dialect route, in the request arena. The decoder fills
 * in what its store call reads (the rank goes to req->rank); the store
 * call fills in what the answer reads. */
typedef struct api__call {
    hf_slice ns; /* as the request names it ("kv" unless the decoder says) */
    hf_slice *keys;
    size_t n;
    int64_t *pages; /* in: the confirmed pages (CONFIRM); out: the pages found */
    int64_t *release;
    size_t nrel;
    uint64_t num_pages; /* INIT: the size asked for */
    bool *present;      /* out: EXISTS, COMPLETE_EXISTS; ALLOCATE_PARTIAL: existed */
    bool created;       /* out, INIT: the pool is new */
    uint64_t existing;  /* out, INIT: the pool's size */
} api__call;

/* 0: make the store call; else the request was answered (a 400, or an
 * answer that needs no store call). */
typedef int (*api__decoder)(api__req *req, api__call *call);
/* Writes the answer (a store call's success; or, as a route's no_pool, its
 * STORE_ENOPOOL). */
typedef void (*api__encoder)(api__req *req, const api__call *call);

enum {
    API__EMPTY_BODY_OK = 1, /* an empty (or blank) body is no body: req->body == NULL */
    API__NO_BODY = 2,       /* the body is not read at all (GET routes) */
    API__DEBUG_ONLY = 4,    /* only when api_config.debug_api */
    API__INIT_ERRORS = 8,   /* every 400 is "Invalid initialization parameters" (vLLM) */
    API__OPERATOR_OK = 16,  /* the operator's token may call it (else 403) */
    API__KEY_ITEMS = 32,    /* a dialect's "keys" may hold [key, prefix_key] items */
};

/* For asserts (dialect.c): what a store call that succeeded answered is a
 * page per key, each a page of a pool or -1 (none). */
static inline bool api__answer_in_range(api__store_call call, const api__call *c)
{
    bool pages_out = call == API__ALLOCATE_ALL || call == API__ALLOCATE_PARTIAL ||
                     call == API__LOOKUP || call == API__COMPLETE_LOCATIONS;
    for (size_t i = 0; pages_out && i < c->n; i++)
        if (c->pages[i] < -1 || c->pages[i] > (int64_t)CORE_MAX_PAGES_LIMIT)
            return false;
    return true;
}

/* What api__init_pool returns when it answered the request itself. */
#define API__ANSWERED 1

/* pattern: '/'-separated literal segments, at most one "{rank}". A
 * dialect's route has the handler api__dialect_run and the members after
 * flags (API__DIALECT_ROUTE); the others, a handler of their own. */
typedef struct api__route {
    const char *method;
    const char *pattern;
    api__handler handler;
    unsigned flags;
    api__decoder decode;
    api__store_call call;
    api__encoder answer;
    api__encoder no_pool; /* STORE_ENOPOOL from a call that names a pool */
} api__route;

/* The dispatcher of the dialects' routes: the route's decoder, the answer's
 * arrays allocated, its store call, then its answer; a failure answered
 * by its no_pool (STORE_ENOPOOL from a call that names a pool) or
 * api__store_failed. */
void api__dialect_run(api__req *req);

/* A route with a handler of its own (admin.c). */
#define API__ROUTE(method_, path_, handler_, flags_)                                               \
    {                                                                                              \
        .method = (method_), .pattern = (path_), .handler = (handler_), .flags = (flags_)          \
    }

/* One row of a dialect's table: method, path, flags (API__*), decoder,
 * store call (API__<call>), answer; no_pool is the dialect's answer to a
 * pool that does not exist. */
#define API__DIALECT_ROUTE(no_pool_, method_, path_, flags_, decode_, call_, answer_)              \
    {                                                                                              \
        .method = (method_), .pattern = (path_), .handler = api__dialect_run, .flags = (flags_),   \
        .decode = (decode_), .call = API__##call_, .answer = (answer_), .no_pool = (no_pool_)      \
    }

/* The answers that both dialects give: 204, and 200 {"exists": [...]}. */
void api__answer_nothing(api__req *req, const api__call *call);
void api__answer_exists(api__req *req, const api__call *call);

struct api__req {
    api_t *api;
    store_t *store;
    const api_limits *limits;
    double hit_ratio_target; /* api_config's */
    const api__route *route;
    api_response *resp;
    json_buf *out;         /* == &resp->body */
    json_doc *doc;         /* == &resp->doc: arena for decoded arrays */
    const json_node *body; /* the request object, or NULL (empty body, GET) */
    uint32_t rank;         /* the {rank} path segment, when the route has one */
    const tenant *tenant;  /* whose request it is (tenants.h) */
    bool shared;           /* the token file names more than one tenant */
};

extern const api__route api__vllm_routes[];
extern const size_t api__vllm_route_count;
extern const api__route api__sglang_routes[];
extern const size_t api__sglang_route_count;
extern const api__route api__admin_routes[];
extern const size_t api__admin_route_count;

/* ---- answering ---- */

/* Start a 200 JSON answer; the handler then writes the body to req->out. */
void api__begin(api__req *req);
void api__no_content(api__req *req);
/* A list answer (dialect.c): 200 {"<name>":[ ... ]}, with ranked
 * {"rank":<req->rank>,"<name>":[ ... ]}; name is a plain literal (no
 * escaping). Each item is written after api__list_item(req, its index). */
void api__list_open(api__req *req, const char *name, bool ranked);
void api__list_item(api__req *req, size_t i);
void api__list_close(api__req *req);
/* 200 {"<name>": [bool, ...]}. */
void api__answer_bools(api__req *req, const char *name, const bool *values, size_t n);
/* 200 {"<name>": [page or null, ...]}: a negative page is null. */
void api__answer_pages(api__req *req, const char *name, const int64_t *pages, size_t n);
/* {"detail": <formatted>} with the given status. */
void api__fail(api__req *req, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* {"detail": detail, "reason": <formatted>}: for errors whose detail text is
 * fixed by the contract. */
void api__fail_reason(api__req *req, int status, const char *detail, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Store errors other than STORE_ENOPOOL (which each dialect words itself). */
void api__store_failed(api__req *req, int err);

/* ---- decoding; each returns 0, or answers 400 and returns -1 ---- */

/* A JSON integer (not a boolean, not 1.0) in 0..max_ranks-1. */
int api__decode_rank(api__req *req, const json_node *node, const char *field, uint32_t *rank);
/* list must be a JSON list: non-empty strings of at most max_key_bytes, at
 * most max_keys of them. */
int api__decode_keys(api__req *req, const json_node *list, const char *field, hf_slice **keys);
/* Like api__decode_keys, but an item may also be [key, prefix_key] with
 * prefix_key a string or null (accepted and ignored). */
int api__decode_key_items(api__req *req, const json_node *list, const char *field, hf_slice **keys);
/* "keys" as the route says: api__decode_key_items with API__KEY_ITEMS,
 * else api__decode_keys. */
int api__decode_route_keys(api__req *req, const json_node *list, hf_slice **keys);
/* [[key, page], ...] with page an integer. */
int api__decode_confirmations(api__req *req, const json_node *list, const char *field,
                              hf_slice **keys, int64_t **pages);
/* Absent or null: no pages (*n = 0). Else a list of integers. */
int api__decode_pages(api__req *req, const json_node *node, const char *field, int64_t **pages,
                      size_t *n);
/* Absent or null: "kv". Else a non-empty string of at most max_key_bytes,
 * not beginning with TENANT_NS_BYTE (tenants.h). The namespace as the
 * request names it: api__store_ns gives the store's. */
int api__decode_namespace(api__req *req, hf_slice *ns);

/* ---- tenants (tenants.h) ---- */

/* The store's namespace for the request's namespace ns (in the arena,
 * unless the tenant's namespaces are the store's). */
hf_slice api__store_ns(api__req *req, hf_slice ns);
/* " (tenant NAME)" with auth on, "" without: for log lines. */
const char *api__tenant_words(api__req *req);
/* One pool, as the request's tenant sees it: owner is the pool's tenant's
 * name, ns its namespace as that tenant's requests name it, mine whether
 * the request may see it (its own tenant's, or the operator asks). */
typedef struct api__pool {
    bool mine;
    hf_slice owner, ns;
    uint32_t rank;
    const core_pool_stats *stats;
} api__pool;
typedef void (*api__pool_visitor)(void *ctx, const api__pool *pool);
/* store_ops.stats over every pool, through fn. */
int api__pools(api__req *req, api__pool_visitor fn, void *ctx);
/* store_ops.init_pool of the request's tenant's pool (ns, req->rank),
 * within its quota: STORE_OK, a store error, or API__ANSWERED after a 400
 * naming the quota (nothing changed). */
int api__init_pool(api__req *req, hf_slice ns, uint64_t num_pages, bool *created,
                   uint64_t *existing);

static inline bool api__is_list(const json_node *node)
{
    return node && node->type == JSON_ARRAY;
}

/* For /metrics: the request and connection figures (metrics.h), as
 * Prometheus text into req->out. */
void api__write_request_metrics(api__req *req);
/* For /v1/stats. */
struct api__server_figures;
void api__get_server_figures(const api_t *api, struct api__server_figures *out);
int64_t api__started_ms(const api_t *api); /* wall clock, milliseconds */

/* ---- the pools' figures: /v1/stats and /metrics (admin.c, prometheus.c) ---- */

/* The names of core_refusal in /v1/stats, /metrics and the log (admin.c). */
extern const char *const api__refusal_names[CORE_REFUSE_COUNT];

/* What a client meets now (store_ops.health); unless serving, why in
 * reason. */
store_mode api__store_mode(store_t *store, char *reason, size_t len);

/* One of the caller's pools (api__pools), its names copied into the
 * request arena: the store hands the pools out one at a time, a writer
 * goes over them several times. */
typedef struct api__pool_figures {
    struct api__pool_figures *next;
    hf_slice tenant, ns;
    uint32_t rank;
    core_pool_stats stats;
} api__pool_figures;

/* The caller's pools into *head (NULL: none), by namespace then rank; false
 * (answered) if the store failed. */
bool api__collect_pools(api__req *req, api__pool_figures **head);
/* The same, answering nothing: STORE_OK, or the store's code (then *head
 * is NULL: what was gathered before the failure is dropped). */
int api__gather_pools(api__req *req, api__pool_figures **head);
/* Is p its namespace's first pool (the lowest rank: the one whose stats
 * carry the namespace's figures)? prev is the pool before it, or NULL. */
bool api__ns_first(const api__pool_figures *prev, const api__pool_figures *p);
/* The estimated prefix-hit ratio at scale j (reuse.h), or false when the
 * window has no sampled block use or the figures lack scale j (coarse). */
bool api__est_ratio(const core_pool_stats *s, int j, store_number *out);
/* The sizing advice of a namespace from its first pool's figures, at the
 * server's target (api_config.hit_ratio_target); a.known false when there
 * is no sampled use yet. */
void api__advice(const api__req *req, const api__pool_figures *p, reuse_advice *a);
/* A ratio in millionths as a number (negatives written as 0). */
store_number api__ppm(int64_t ppm);
/* GET /ui (ui.c). */
void api__ui(api__req *req);

/* GET /metrics (prometheus.c). */
void api__prometheus(api__req *req);

/* The periodic summary of api_log_summary() (summary.c): the figures it last
 * saw. Used by one thread at a time. */
typedef struct api__summary api__summary;
api__summary *api__summary_new(void);
void api__summary_free(api__summary *summary);
void api__summary_log(api__summary *summary, store_t *store);

#endif
