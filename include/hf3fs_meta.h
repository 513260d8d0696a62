/*
 * hf3fs_meta.h: the client library of hf3fs-metad (libhf3fsmeta).
 *
 * hf3fs-metad keeps, for every (namespace, rank) pool of KV-cache pages, which
 * page holds which key (see docs/protocol.md). This library speaks both of its wire
 * dialects over one keep-alive HTTP/1.1 connection, with typed results:
 *
 *   vLLM dialect    hf3fs_meta_vllm_*      namespace "kv", completeness across ranks
 *   SGLang dialect  hf3fs_meta_sglang_*    one pool per call, optional namespace
 *   admin           hf3fs_meta_health, hf3fs_meta_stats, hf3fs_meta_request
 *
 * A minimal program:
 *
 *     hf3fs_meta_client *c;
 *     int rc = hf3fs_meta_open("http://127.0.0.1:18000", &c);
 *     if (rc == 0)
 *         rc = hf3fs_meta_vllm_init_worker(c, 0, 1024);
 *     if (rc != 0)
 *         fprintf(stderr, "%s\n", c ? hf3fs_meta_last_error(c) : hf3fs_meta_strerror(rc));
 *     hf3fs_meta_close(c);
 *
 * CONVENTIONS (they hold for every function below unless it says otherwise)
 *
 *  - Errors. Every function that can fail returns int: 0 (HF3FS_META_SUCCESS)
 *    on success, or one of the negative HF3FS_META_E* codes below, which live
 *    in their own range and never collide with errno values. The library never
 *    aborts, never prints and never exits. hf3fs_meta_strerror() gives a
 *    static text for a code; hf3fs_meta_last_error() gives the message of the
 *    last call on a client (with the server's `detail` text for HTTP errors).
 *
 *  - Every operation can return, besides what its own comment lists:
 *      HF3FS_META_EINVAL     a NULL client, a NULL array with n > 0, a NULL
 *                            key, a key or namespace that is not valid UTF-8,
 *                            a negative rank;
 *      HF3FS_META_ENOMEM     out of memory;
 *      HF3FS_META_ECONNECT   no connection could be made, or it was lost
 *                            before any answer, after all retries;
 *      HF3FS_META_ETIMEDOUT  connect or request timeout;
 *      HF3FS_META_EPROTO     an answer that is not HTTP/1.x, or whose JSON does
 *                            not have the shape the contract promises (wrong
 *                            length, wrong types, a key that is not echoed);
 *      HF3FS_META_ETOOBIG    the answer is larger than the client's limit;
 *      HF3FS_META_EUNAUTH    401: the server wants a token (or another one);
 *      HF3FS_META_EREFUSED   another 4xx (400 bad request, 413 too large ...);
 *                            hf3fs_meta_last_detail() has the server's text;
 *      HF3FS_META_ESERVER    a 5xx, or any 3xx/unexpected status.
 *
 *  - Ownership. Every pointer argument is borrowed for the duration of the call
 *    only: the library keeps no reference to keys, namespaces or arrays after
 *    it returns, so the caller may free or reuse them at once. Output arrays
 *    are allocated by the caller with room for n elements; on success every
 *    element is written, on failure their contents are unspecified. Memory the
 *    library allocates for the caller (hf3fs_meta_stats, hf3fs_meta_request,
 *    hf3fs_meta_stats_parse) is owned by the caller and released with
 *    hf3fs_meta_free(). Strings returned by the library that are not
 *    allocated for the caller (hf3fs_meta_last_error) are valid only until
 *    the next call on the same client or hf3fs_meta_close().
 *
 *  - Keys are NUL-terminated, non-empty UTF-8 strings (the contract allows any
 *    non-empty string; JSON needs UTF-8). Pages are int64_t; -1 means "none".
 *
 *  - Threads. A client is one connection and is not thread-safe: use one
 *    client per thread (or a lock around it). Distinct clients are fully
 *    independent. hf3fs_meta_strerror() and hf3fs_meta_version() are
 *    thread-safe. The library never installs signal handlers; writes use
 *    MSG_NOSIGNAL so a closed connection does not raise SIGPIPE.
 *
 * CONNECTION, TIMEOUTS AND RETRIES
 *
 *   The client connects lazily on the first operation and keeps the
 *   connection alive between operations. Before reusing an idle connection it
 *   checks that the server has not closed it. Host names are resolved with
 *   getaddrinfo(), which the connect timeout does not bound.
 *
 *   A request is retried, after a pause that doubles each time (default 50 ms,
 *   100 ms, 200 ms ... capped at 2 s, with a little jitter), at most
 *   max_retries times (default 3), and only when no byte of an answer arrived:
 *     - the connection could not be made (refused, reset, connect timeout);
 *     - the connection broke before the request was completely written (the
 *       server cannot have acted on an incomplete request);
 *     - the connection broke after the request was written but before any byte
 *       of the answer (typically an idle keep-alive connection the server was
 *       closing at that moment). The server may have acted on the request.
 *   A request that got an HTTP answer, whatever its status (4xx, 503 ...),
 *   is never retried, nor is one that hit the request timeout.
 *
 *   Which operations are safe to retry in the third case: every operation of
 *   both dialects is idempotent or harmless to repeat (initialize keeps an
 *   existing pool; a repeated confirm of a page the key owns is a no-op, and a
 *   repeated release of a FREE page changes nothing; exists and lookups only
 *   extend a read lease; delete and clear reach the same end state) EXCEPT
 *   allocation (hf3fs_meta_vllm_batch_allocate and
 *   hf3fs_meta_sglang_reserve_and_allocate): a repeated allocation reserves
 *   NEW pages for the keys that are not owned yet, and the reservations of the
 *   first attempt, which the caller never learns about, stay RESERVED until
 *   their reservation lease ends (600 s by default), and count as used until
 *   then. They never break the ownership invariant and never leak for good.
 *   The library's choice: allocations ARE retried in that case by default,
 *   because failing an engine's allocation on every stale keep-alive
 *   connection costs more than a bounded, self-healing reservation leak.
 *   hf3fs_meta_set_retry_allocate(c, 0) turns that off; allocations are then
 *   retried only in the first two cases. hf3fs_meta_request() follows the
 *   allocation rule for every method but GET.
 *
 * AUTHENTICATION
 *
 *   A URL of the form http://:TOKEN@host:port or http://user:TOKEN@host:port
 *   sends HTTP Basic auth (user, possibly empty, and the token as password;
 *   percent-escapes in both are decoded). hf3fs_meta_set_bearer_token() sends
 *   "Authorization: Bearer TOKEN" instead, and takes precedence.
 */
#ifndef HF3FS_META_H
#define HF3FS_META_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && __GNUC__ >= 4
#define HF3FS_META_API __attribute__((visibility("default")))
#else
#define HF3FS_META_API
#endif

#define HF3FS_META_VERSION_MAJOR 0
#define HF3FS_META_VERSION_MINOR 1
#define HF3FS_META_VERSION_PATCH 0
#define HF3FS_META_VERSION_STRING "0.1.0"

/** @defgroup errors Return codes
 * 0 is success; every error is negative and in -31400 .. -31409.
 * @{ */
#define HF3FS_META_SUCCESS 0
/** An argument is invalid (see CONVENTIONS); nothing was sent. */
#define HF3FS_META_EINVAL (-31400)
/** Out of memory. */
#define HF3FS_META_ENOMEM (-31401)
/** Could not connect, or the connection was lost before an answer (after retries). */
#define HF3FS_META_ECONNECT (-31402)
/** The connect timeout or the request timeout expired. */
#define HF3FS_META_ETIMEDOUT (-31403)
/** Malformed HTTP, or an answer whose JSON does not have the contract's shape. */
#define HF3FS_META_EPROTO (-31404)
/** HTTP 4xx other than 401 and "not initialized": the server refused the
 * request; hf3fs_meta_last_error() carries its `detail` text. */
#define HF3FS_META_EREFUSED (-31405)
/** HTTP 404 for a pool (or vLLM rank) that was not initialized: a 404 whose
 * `detail` says "not initialized" (any other 404, such as "Not Found" for an
 * unknown path, is HF3FS_META_EREFUSED). */
#define HF3FS_META_ENOTINIT (-31406)
/** HTTP 401: authentication required or wrong token. */
#define HF3FS_META_EUNAUTH (-31407)
/** HTTP 5xx (server error, 503 unavailable), or an unexpected status. */
#define HF3FS_META_ESERVER (-31408)
/** The answer exceeds the client's size limit (hf3fs_meta_set_max_answer). */
#define HF3FS_META_ETOOBIG (-31409)
/** @} */

/** The opaque client: one server URL, one connection, its settings and the
 * last error. Created by hf3fs_meta_open(), released by hf3fs_meta_close(). */
typedef struct hf3fs_meta_client hf3fs_meta_client;

/** "0.1.0": a static string. */
HF3FS_META_API const char *hf3fs_meta_version(void);

/** A static, thread-safe description of a return code ("success" for 0, a
 * generic text for an unknown code). Never NULL, never to be freed. */
HF3FS_META_API const char *hf3fs_meta_strerror(int code);

/* ------------------------------------------------------------------------ */
/** @defgroup client Client life cycle and settings
 * @{ */

/** Create a client for a server URL. Does not connect (the first operation
 * does; use hf3fs_meta_health() to check the server early).
 *
 * @param url  "http://host[:port][/base/path]", optionally with user info
 *             "http://[user]:TOKEN@host:port" (Basic auth, see above). The
 *             host may be a name, an IPv4 address or "[IPv6]". The port
 *             defaults to 80, as in any http URL. A base path, if any, is put
 *             before every request path. Copied: the caller keeps ownership.
 * @param out  receives the client on success, NULL on failure. The caller
 *             owns it and releases it with hf3fs_meta_close().
 * @return 0, HF3FS_META_EINVAL (NULL argument, not an http:// URL, bad port,
 *         empty host, a query or fragment), HF3FS_META_ENOMEM.
 *
 * Defaults: connect timeout 5000 ms, request timeout 30000 ms, 3 retries from
 * 50 ms backoff, allocations retried, answers up to 16 MiB.
 */
HF3FS_META_API int hf3fs_meta_open(const char *url, hf3fs_meta_client **out);

/** Close the connection and free the client. NULL is accepted. After it, every
 * string the client returned is invalid. */
HF3FS_META_API void hf3fs_meta_close(hf3fs_meta_client *c);

/** Timeouts in milliseconds; > 0. connect_ms bounds one connection attempt;
 * request_ms bounds one attempt of a request from the first byte written to
 * the last byte of the answer read. Applies to the next call.
 * @return 0, HF3FS_META_EINVAL. */
HF3FS_META_API int hf3fs_meta_set_timeouts(hf3fs_meta_client *c, int connect_ms, int request_ms);

/** Retries after a lost connection: at most max_retries (0 .. 100; 0 turns
 * retries off) further attempts, the first after backoff_ms (1 .. 60000),
 * each pause twice the last, capped at 2 s or backoff_ms if larger.
 * @return 0, HF3FS_META_EINVAL. */
HF3FS_META_API int hf3fs_meta_set_retries(hf3fs_meta_client *c, int max_retries, int backoff_ms);

/** Whether an allocation may be retried after it was completely sent and the
 * connection broke before an answer (see RETRIES above). Default 1 (yes).
 * @return 0, HF3FS_META_EINVAL (NULL client). */
HF3FS_META_API int hf3fs_meta_set_retry_allocate(hf3fs_meta_client *c, int on);

/** Send "Authorization: Bearer TOKEN" with every request from now on, instead
 * of any Basic auth from the URL. NULL removes the bearer token (the URL's
 * Basic auth, if any, applies again). The token is copied; it must be
 * non-empty and printable ASCII without spaces.
 * @return 0, HF3FS_META_EINVAL, HF3FS_META_ENOMEM. */
HF3FS_META_API int hf3fs_meta_set_bearer_token(hf3fs_meta_client *c, const char *token);

/** Largest answer body the client accepts, in bytes (>= 1024). Default
 * 16 MiB. Larger answers fail with HF3FS_META_ETOOBIG and the connection is
 * closed. @return 0, HF3FS_META_EINVAL. */
HF3FS_META_API int hf3fs_meta_set_max_answer(hf3fs_meta_client *c, size_t bytes);

/** The message of the last operation on this client: "" after a success;
 * after an HTTP error "HTTP 404: <the server's detail text>"; otherwise a
 * description of what failed (at most 1023 bytes, truncated if longer).
 * Never NULL. Owned by the client; valid until the next call on this client
 * or hf3fs_meta_close(). */
HF3FS_META_API const char *hf3fs_meta_last_error(const hf3fs_meta_client *c);

/** The server's `detail` text of the last HTTP error answer ("" if the last
 * operation got no error answer or the answer had no detail). Same lifetime
 * as hf3fs_meta_last_error(). */
HF3FS_META_API const char *hf3fs_meta_last_detail(const hf3fs_meta_client *c);

/** The HTTP status of the last answer received on this client, 0 if the last
 * operation got no answer. */
HF3FS_META_API int hf3fs_meta_last_status(const hf3fs_meta_client *c);

/** Free memory that the library allocated for the caller. NULL is accepted. */
HF3FS_META_API void hf3fs_meta_free(void *ptr);
/** @} */

/* ------------------------------------------------------------------------ */
/** @defgroup vllm The vLLM dialect (namespace "kv")
 * @{ */

/** POST /rank/{rank}/initialize {"role": "worker", "num_pages": N}.
 * Idempotent: an existing pool keeps its state (and its size).
 * num_pages is not checked by the client: the server refuses 0, negative and
 * too large values with HF3FS_META_EREFUSED, detail "Invalid initialization
 * parameters". */
HF3FS_META_API int hf3fs_meta_vllm_init_worker(hf3fs_meta_client *c, int rank, int64_t num_pages);

/** POST /rank/0/initialize {"role": "scheduler"}: creates nothing; checks that
 * the server speaks the dialect. */
HF3FS_META_API int hf3fs_meta_vllm_init_scheduler(hf3fs_meta_client *c);

/** POST /keys/batch_allocate: a page for each of keys[0..n-1] on rank.
 * pages_out[i] is the page of keys[i]: its own page if the key is already
 * owned (a hit), a newly RESERVED page, or -1. All or nothing for new pages:
 * if not every new key can get one, every new key gets -1.
 * Every page >= 0 that is not a hit must be confirmed or released (see
 * hf3fs_meta_vllm_confirm_write), or it stays reserved until its lease ends.
 * Keys are sent as [key, ""] pairs.
 * @return also HF3FS_META_ENOTINIT (rank not initialized). */
HF3FS_META_API int hf3fs_meta_vllm_batch_allocate(hf3fs_meta_client *c, int rank,
                                                  const char *const *keys, size_t n,
                                                  int64_t *pages_out);

/** POST /keys/confirm_write: confirm that keys[i] was written to pages[i]
 * (i < n), and give back the reserved pages release[0..n_release-1] unused.
 * Confirmations that match no reservation and releases of pages that are not
 * RESERVED are ignored by the server (not an error). n or n_release may be 0
 * (with a NULL array).
 * @return also HF3FS_META_ENOTINIT. */
HF3FS_META_API int hf3fs_meta_vllm_confirm_write(hf3fs_meta_client *c, int rank,
                                                 const char *const *keys, const int64_t *pages,
                                                 size_t n, const int64_t *release,
                                                 size_t n_release);

/** POST /keys/batch_exists: exists_out[i] is true iff keys[i] is complete
 * (owned by every initialized worker rank of "kv"). Extends the read lease of
 * the keys found. */
HF3FS_META_API int hf3fs_meta_vllm_batch_exists(hf3fs_meta_client *c, const char *const *keys,
                                                size_t n, bool *exists_out);

/** POST /keys/get_locations: pages_out[i] is the page of keys[i] on rank, or
 * -1 when the key is not complete. Extends the read lease of the keys found.
 * @return also HF3FS_META_ENOTINIT. */
HF3FS_META_API int hf3fs_meta_vllm_get_locations(hf3fs_meta_client *c, int rank,
                                                 const char *const *keys, size_t n,
                                                 int64_t *pages_out);

/** POST /clear: forget every pool and key (of every namespace); every worker
 * must initialize again. */
HF3FS_META_API int hf3fs_meta_vllm_clear(hf3fs_meta_client *c);
/** @} */

/* ------------------------------------------------------------------------ */
/** @defgroup sglang The SGLang dialect
 * ns is the pool's namespace; NULL sends no namespace (the server's default,
 * "kv"). Every call but init returns HF3FS_META_ENOTINIT for a pool that was
 * not initialized.
 * @{ */

/** POST /{rank}/initialize {"num_pages": N[, "namespace": ns]}: create the
 * pool (rank, ns), or keep it as it is if it exists. */
HF3FS_META_API int hf3fs_meta_sglang_init(hf3fs_meta_client *c, int rank, const char *ns,
                                          int64_t num_pages);

/** POST /{rank}/exists: exists_out[i] is true iff the pool owns keys[i]. */
HF3FS_META_API int hf3fs_meta_sglang_exists(hf3fs_meta_client *c, int rank, const char *ns,
                                            const char *const *keys, size_t n, bool *exists_out);

/** POST /{rank}/reserve_and_allocate_page_indices: for each key, existed_out[i]
 * is true for a key the pool already owns (pages_out[i] is its page), false
 * for a newly RESERVED page, or false with pages_out[i] == -1 when no page
 * could be had. Partial: some keys may get -1 while others get pages; release
 * what you do not use. existed_out may be NULL. Keys are sent as [key, ""]
 * pairs. Retries: see RETRIES above. */
HF3FS_META_API int hf3fs_meta_sglang_reserve_and_allocate(hf3fs_meta_client *c, int rank,
                                                          const char *ns, const char *const *keys,
                                                          size_t n, bool *existed_out,
                                                          int64_t *pages_out);

/** POST /{rank}/confirm_write {"written_keys_to_confirm": [[key, page]...],
 * "pages_to_release": [...]}: as hf3fs_meta_vllm_confirm_write. */
HF3FS_META_API int hf3fs_meta_sglang_confirm_write(hf3fs_meta_client *c, int rank, const char *ns,
                                                   const char *const *keys, const int64_t *pages,
                                                   size_t n, const int64_t *release,
                                                   size_t n_release);

/** POST /{rank}/delete_keys: forget the keys and free their pages (after any
 * read lease). Keys the pool does not own are ignored. */
HF3FS_META_API int hf3fs_meta_sglang_delete_keys(hf3fs_meta_client *c, int rank, const char *ns,
                                                 const char *const *keys, size_t n);

/** POST /{rank}/clear: free every page of the pool (rank, ns). */
HF3FS_META_API int hf3fs_meta_sglang_clear(hf3fs_meta_client *c, int rank, const char *ns);

/** POST /{rank}/get_page_indices: pages_out[i] is the page the pool has for
 * keys[i], or -1. */
HF3FS_META_API int hf3fs_meta_sglang_get_page_indices(hf3fs_meta_client *c, int rank,
                                                      const char *ns, const char *const *keys,
                                                      size_t n, int64_t *pages_out);
/** @} */

/* ------------------------------------------------------------------------ */
/** @defgroup admin Administration
 * @{ */

/** GET /health: 0 when the server answers 200 {"status": "ok"}. */
HF3FS_META_API int hf3fs_meta_health(hf3fs_meta_client *c);

/** GET /v1/stats. On success *json_out is the raw JSON text of the answer,
 * NUL-terminated, and *len_out (if len_out is not NULL) its length without
 * the NUL. The caller owns *json_out and frees it with hf3fs_meta_free(). On
 * failure *json_out is NULL. The text is returned as the server sent it, but
 * only after checking that it is a JSON object (else HF3FS_META_EPROTO). */
HF3FS_META_API int hf3fs_meta_stats(hf3fs_meta_client *c, char **json_out, size_t *len_out);

/** One pool of GET /v1/stats, decoded by hf3fs_meta_stats_parse(). A counter
 * the server did not send is -1. */
typedef struct hf3fs_meta_pool_stats {
    const char *ns; /**< namespace, NUL-terminated; inside the parse result */
    int64_t rank;
    int64_t num_pages;
    int64_t free;
    int64_t reserved;
    int64_t owned;
    int64_t draining;
    int64_t keys;
    int64_t touched;
    int64_t hits;
    int64_t misses;
    int64_t evictions;
} hf3fs_meta_pool_stats;

/** Decode the text of hf3fs_meta_stats(): {"pools": [{...}, ...]}. On success
 * *pools_out is an array of *n_out pools (NULL when there are none) in the
 * server's order; it is ONE allocation holding the array and its namespace
 * strings: free it with hf3fs_meta_free(*pools_out). It does not refer to
 * json, which the caller may free at once. Unknown fields are ignored.
 * @return 0, HF3FS_META_EINVAL (NULL argument), HF3FS_META_ENOMEM,
 *         HF3FS_META_EPROTO (not JSON, no "pools" array, a pool without a
 *         string "namespace" and an integer "rank", a counter that is not an
 *         integer). */
HF3FS_META_API int hf3fs_meta_stats_parse(const char *json, size_t len,
                                          hf3fs_meta_pool_stats **pools_out, size_t *n_out);

/** One namespace's sizing advice of GET /v1/stats ("namespaces"[i]."advice",
 * docs/sizing.md), decoded by hf3fs_meta_advice_parse(). Ratios are in
 * millionths. known is 0 while the server has no sampled use (then only ns
 * and pages_now, -1 when unknown, are set). */
typedef struct hf3fs_meta_ns_advice {
    const char *ns; /**< namespace, NUL-terminated; inside the parse result */
    int known;
    int reached;           /**< some size up to 4 times reaches the target */
    int coarse;            /**< from the 5-size curve: a Redis node's module lacks "fine-curve" */
    int64_t pages_now;     /**< pages per rank now */
    int64_t pages;         /**< advised pages per rank */
    int64_t target;        /**< the target ratio */
    int64_t hit_ratio_now; /**< the estimate at the pages now */
    int64_t doubling_gain;
    int64_t halving_frees; /**< pages */
    int64_t halving_cost;
} hf3fs_meta_ns_advice;

/** Decode the "namespaces" of hf3fs_meta_stats()'s text, as
 * hf3fs_meta_stats_parse() does the pools: one allocation, freed with
 * hf3fs_meta_free(*out). @return 0, HF3FS_META_EINVAL, HF3FS_META_ENOMEM,
 * HF3FS_META_EPROTO (no "namespaces" array, a namespace without a string
 * "namespace", an advice member of the wrong type). */
HF3FS_META_API int hf3fs_meta_advice_parse(const char *json, size_t len, hf3fs_meta_ns_advice **out,
                                           size_t *n_out);

/** Any request: method ("GET", "POST", ...; a token of letters), path (must
 * start with '/'; sent as given, after the URL's base path), an optional body
 * (body_len bytes, sent with Content-Type: application/json when body is not
 * NULL). On success, whatever the HTTP status, *status_out is the status and
 * *body_out the answer body, NUL-terminated (length in *len_out if len_out is
 * not NULL), owned by the caller, freed with hf3fs_meta_free(); body_out may
 * be NULL to discard the body. An HTTP error status is NOT an error of this
 * call (it returns 0); hf3fs_meta_last_detail() is set for 4xx/5xx answers
 * with a JSON detail. Retries: GET as any operation, other methods as
 * allocations.
 * @return 0, and the transport errors only (EINVAL, ENOMEM, ECONNECT,
 *         ETIMEDOUT, EPROTO for malformed HTTP, ETOOBIG). */
HF3FS_META_API int hf3fs_meta_request(hf3fs_meta_client *c, const char *method, const char *path,
                                      const char *body, size_t body_len, int *status_out,
                                      char **body_out, size_t *len_out);
/** @} */

#ifdef __cplusplus
}
#endif

#endif /* HF3FS_META_H */
