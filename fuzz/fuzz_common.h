/*
 * fuzz_common.h: what the libFuzzer targets of fuzz/ share.
 *
 *   fuzz_json       json_parse against an independent yajl reference, and
 *                   the writer's round trip
 *   fuzz_request    one request (route, method, body bytes) through
 *                   api_handle() against a fresh in-memory store
 *   fuzz_sequence   a sequence of requests of both dialects against the
 *                   embedded engine on a fake clock; the invariant checker
 *                   after every request
 *
 * The oracles here are the contract's promises that hold for any input
 * (docs/protocol.md, "Errors for every route"): never a 5xx, never a crash, every
 * answer well-formed JSON, every error a {"detail": "..."} object, a
 * rejected request changes no state, and store->ops->check() passes. A
 * broken promise is reported on stderr and the target aborts, which
 * libFuzzer records as a crash with the input that caused it.
 */
#ifndef HF_FUZZ_COMMON_H
#define HF_FUZZ_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api/api.h"
#include "store/store.h"

/* Report a broken promise and abort (libFuzzer keeps the input). */
void fuzz_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Silence the server's logger (a fuzzer would spend its time printing). */
void fuzz_quiet(void);

/* Limits small enough for the fuzzer to reach every one of them. */
api_config fuzz_api_config(void);
core_config fuzz_core_config(void);

/* ---- input bytes ---- */

typedef struct fuzz_reader {
    const uint8_t *p;
    size_t n;
} fuzz_reader;

/* The next byte, or 0 once the input is used up. */
uint8_t fuzz_byte(fuzz_reader *r);
/* Up to `want` bytes (fewer at the end of the input). */
size_t fuzz_bytes(fuzz_reader *r, size_t want, const uint8_t **out);

/* ---- routes ---- */

typedef struct fuzz_route {
    const char *method;
    const char *path;
} fuzz_route;

/* Every route of both dialects and of admin, with valid and invalid ranks,
 * wrong methods and unknown paths. */
extern const fuzz_route fuzz_routes[];
extern const size_t fuzz_route_count;

/* ---- oracles ---- */

/*
 * The answer to (method, path) must be well-formed: a status the api may
 * give (never 5xx), 204 without a body or content type, other answers JSON
 * objects with Content-Type application/json (text for /metrics), errors
 * with a non-empty string "detail". Aborts otherwise.
 */
void fuzz_check_answer(const char *method, const char *path, const api_response *resp);

/* The store's figures (every pool's stats) as bytes, to compare. The
 * snapshot owns its buffer. */
typedef struct fuzz_snapshot {
    uint8_t *bytes;
    size_t len, cap;
} fuzz_snapshot;

void fuzz_snapshot_take(store_t *store, fuzz_snapshot *snap);
bool fuzz_snapshot_equal(const fuzz_snapshot *a, const fuzz_snapshot *b);
void fuzz_snapshot_free(fuzz_snapshot *snap);

/* A core_walk_state observer: each event of the walk appended as bytes to
 * the hf_buf ctx, so that two cores' durable states compare with memcmp. */
void fuzz_render_event(void *ctx, const core_event *ev);

/* store->ops->check() must pass. `after` names the request for the report. */
void fuzz_check_store(store_t *store, const char *after);

/*
 * The answer's list (e.g. "results") must have as many items as the
 * request's list (e.g. "keys"), and two different keys must never be given
 * the same page. `pages_at`: where the page is in an answer item (-1: the
 * item is the page or null; 1: item[1]). Call for 200 answers only.
 */
void fuzz_check_pages(const char *path, const char *body, size_t body_len, const char *req_list,
                      const api_response *resp, const char *answer_list, int pages_at);

#endif
