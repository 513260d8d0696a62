/*
 * api.h: requests in, answers out, with no HTTP in between.
 *
 * api_handle() takes a method, a decoded path and a body and produces a
 * status, a content type and a body. It serves both wire dialects of
 * docs/protocol.md on the same state (vllm.c, sglang.c) and the admin routes
 * (admin.c: /health, /v1/stats, /v1/check; prometheus.c: /metrics). It promises:
 *   - every request is decoded and validated whole before the store is
 *     called; a request answered with a 4xx changed nothing;
 *   - every error answer is {"detail": "..."} naming the field and the
 *     problem; unknown path 404, wrong method 405, bad input 400, never a
 *     crash, whatever the bytes (this is the fuzzing entry point);
 *   - answers are compact JSON (as the stock FastAPI servers write them) with
 *     Content-Type application/json; 204 has no body and no content type.
 * It is thread-safe: any number of threads may call api_handle() on one
 * api_t at once, each with its own api_response.
 *
 * Auth (api_config.auth_token set): every request but those to /health
 * must carry a token of the token file, as "Authorization: Bearer TOKEN" or
 * as the password of "Authorization: Basic ..." (any user name); otherwise
 * 401 {"detail": ...} with resp->www_authenticate set (auth.c). The token
 * names the request's tenant (tenants.h): the dialects, /clear, /v1/stats
 * and /metrics see only that tenant's namespaces; the operator's token ("*")
 * reads /metrics, /v1/stats, /ui and the debug routes of every tenant and gets
 * 403 elsewhere.
 */
#ifndef HF_API_API_H
#define HF_API_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/json.h"
#include "store/store.h"
#include "util/slice.h"

typedef struct api_limits {
    uint32_t max_ranks;    /* ranks are 0 .. max_ranks-1 (path and body) */
    uint64_t max_pages;    /* largest num_pages an initialize may ask for */
    size_t max_keys;       /* items of any one list in a request */
    size_t max_key_bytes;  /* bytes of a key, and of a namespace */
    size_t max_body_bytes; /* largest request body; bounds the answer too */
} api_limits;

typedef struct api_config {
    api_limits limits;
    bool debug_api; /* serve GET /v1/check (walks every pool: for tests) */
    /* The text of the token file (tenants.h: "TOKEN [TENANT [pages=N]]"
     * lines; a lone token is one), or NULL: no auth. Parsed by api_new,
     * which aborts if tenant_table_parse refuses it: check it first. */
    const char *auth_token;
    size_t auth_token_len;
    /* With two tenants or more: each tenant's requests running at once at
     * most (a tenant's room, room.h); 0: no bound. */
    unsigned tenant_max_in_flight;
    /* The sizing advice's target prefix-hit ratio (0..1), or negative: the
     * estimate at the largest scale less a point (core/reuse.h). */
    double hit_ratio_target;
} api_config;

typedef struct api api_t;

/* The release of this build (the file VERSION, passed by the Makefile as
 * -DHF3FS_VERSION) and the versions of what it speaks and keeps
 * (docs/operations.md, "Versions and upgrades"): hf3fs-metad --version,
 * /v1/stats and /metrics (hf3fs_metad_build_info) show them. */
typedef struct api_versions {
    const char *release;         /* "1.0.0" */
    unsigned module;             /* HF3FS_MODULE_VERSION: the Redis module it needs */
    unsigned value_encoding;     /* HF3FS_TYPE_ENCVER: the module's Redis values */
    unsigned data_format;        /* the data directory's log and snapshots, written */
    unsigned data_format_oldest; /* ... and the oldest read */
} api_versions;

api_versions api_get_versions(void);

/* The store is borrowed: it must outlive the api. Aborts on out-of-memory. */
api_t *api_new(store_t *store, const api_config *config);
void api_free(api_t *api);

/* Replace the token file's text (SIGHUP); only when auth was on at api_new.
 * 0; or -1 with why in err, and the tokens in force stay. A request that
 * already started keeps the tenant it was given; the previous tokens stay
 * in memory until api_free. */
int api_reload_tokens(api_t *api, const char *text, size_t len, char *err, size_t errlen);

/*
 * The answer, and the scratch memory of the request that produced it. Owned
 * by the caller; reuse one per connection (api_response_init once,
 * api_handle per request, api_response_trim after the answer went out,
 * api_response_free at the end). body.ptr[0..body.len-1] is valid until the
 * next api_handle, trim or free.
 */
typedef struct api_response {
    int status;
    const char *content_type;     /* static string; NULL when there is no body */
    const char *www_authenticate; /* static string for a 401's WWW-Authenticate, else NULL */
    /* For the access log: the request's tenant; "-" when it has none (401,
     * /health); NULL without auth. Valid until api_free. */
    const char *tenant;
    json_buf body;
    json_doc doc; /* the decoded request and its arena */
} api_response;

void api_response_init(api_response *resp, const api_t *api);
/* Give back memory beyond what a typical request needs. */
void api_response_trim(api_response *resp);
void api_response_free(api_response *resp);

/* method: "GET", "POST", ...; path: decoded, without the query string;
 * authorization: the Authorization header's value, or NULL if absent. */
void api_handle(api_t *api, const char *method, hf_slice path, const char *authorization,
                const char *body, size_t len, api_response *resp);

/* Count an answer the HTTP layer gave without calling api_handle (413,
 * ...), so that /metrics sees it. */
void api_count_http_answer(api_t *api, int status);

/* Count connections for /metrics and /v1/stats. */
typedef enum api_connection_event {
    API_CONNECTION_OPENED,
    API_CONNECTION_CLOSED,
    API_CONNECTION_REFUSED,   /* accepted and closed at once: the connection limit */
    API_CONNECTION_SHED,      /* closed to admit a new one at the connection limit */
    API_CONNECTION_TIMED_OUT, /* closed because its request missed its deadline */
} api_connection_event;
void api_count_connection(api_t *api, api_connection_event event);

/* Log one line of what moved since the last call (evictions, expired
 * reservations, refused confirmations and releases by reason), if anything
 * did. For a periodic caller (main); the first call only takes the figures. */
void api_log_summary(api_t *api);

#endif
