/*
 * vllm.c: the vLLM HF3FS connector dialect (docs/protocol.md, "The vLLM dialect").
 *
 * Namespace is always "kv". Allocation is all or nothing for new pages (the
 * stock client releases nothing when a key gets -1). Error texts that the
 * contract fixes are kept to the letter; every other 400 names the field.
 *
 *   POST /rank/{rank}/initialize  {"role"?, "num_pages"?}    200 {"message"}
 *   POST /initialize              {"rank", "role"?, "num_pages"?}
 *   POST /keys/batch_allocate     {"rank", "keys"}           200 {"rank", "results"}
 *   POST /keys/confirm_write      {"rank", "confirmations", "pages_to_release"?}  204
 *   POST /keys/batch_exists       {"keys"}                   200 {"exists"}
 *   POST /keys/get_locations      {"rank", "keys"}           200 {"locations"}
 *   POST /clear                   anything or nothing        204
 */
#include <inttypes.h>

#include "api/api_internal.h"
#include "util/log.h"

/* The routes (API__DIALECT_ROUTE, run by dialect.c): method, path, flags,
 * decoder, store call, answer. */
#define VLLM_ROUTES(X)                                                                             \
    X("POST", "/rank/{rank}/initialize", API__EMPTY_BODY_OK | API__INIT_ERRORS, init_rank_in_path, \
      INIT, answer_initialized)                                                                    \
    X("POST", "/initialize", API__EMPTY_BODY_OK | API__INIT_ERRORS, init_rank_in_body, INIT,       \
      answer_initialized)                                                                          \
    X("POST", "/keys/batch_allocate", API__KEY_ITEMS, rank_and_keys, ALLOCATE_ALL, answer_results) \
    X("POST", "/keys/confirm_write", 0, rank_and_confirmations, CONFIRM, api__answer_nothing)      \
    X("POST", "/keys/batch_exists", 0, keys_only, COMPLETE_EXISTS, api__answer_exists)             \
    X("POST", "/keys/get_locations", 0, rank_and_keys, COMPLETE_LOCATIONS, answer_locations)       \
    X("POST", "/clear", API__EMPTY_BODY_OK, nothing, CLEAR_TENANT, answer_cleared)

#define INIT_INVALID "Invalid initialization parameters"

static void fail_not_initialized(api__req *req, const api__call *call)
{
    (void)call;
    api__fail(req, 404, "Rank %u not initialized", (unsigned)req->rank);
}

/* "rank" present and not null, and `list` a list (else the contract's
 * text), and the rank valid: into req->rank. */
static int rank_and_list(api__req *req, const char *list_field, const json_node **list)
{
    const json_node *rank = json_get(req->body, "rank");
    *list = json_get(req->body, list_field);
    if (!rank || rank->type == JSON_NULL || !api__is_list(*list)) {
        api__fail(req, 400, "Invalid request format: need 'rank' and '%s'", list_field);
        return -1;
    }
    return api__decode_rank(req, rank, "rank", &req->rank);
}

/* {"rank": r, "keys": [...]}: API__KEY_ITEMS allows [key, prefix_key]
 * items (api__decode_key_items). */
static int rank_and_keys(api__req *req, api__call *c)
{
    const json_node *list;
    if (rank_and_list(req, "keys", &list) != 0 || api__decode_route_keys(req, list, &c->keys) != 0)
        return -1;
    c->n = list->len;
    return 0;
}

/* ---- initialize ---- */

/* role: "worker" (default) or "scheduler"; anything else is invalid. */
static int init_role(api__req *req, bool *scheduler)
{
    const json_node *role = json_get(req->body, "role");
    *scheduler = false;
    if (!role)
        return 0;
    if (role->type == JSON_STRING && hf_slice_eq(json_slice(role), HF_SLICE_LIT("scheduler"))) {
        *scheduler = true;
        return 0;
    }
    if (role->type == JSON_STRING && hf_slice_eq(json_slice(role), HF_SLICE_LIT("worker")))
        return 0;
    if (role->type == JSON_STRING)
        api__fail_reason(req, 400, INIT_INVALID,
                         "'role' must be \"worker\" or \"scheduler\", got \"%.*s\"",
                         (int)(role->len > 64 ? 64 : role->len), role->u.str);
    else
        api__fail_reason(req, 400, INIT_INVALID,
                         "'role' must be \"worker\" or \"scheduler\", got %s",
                         json_type_name(role));
    return -1;
}

/* num_pages: an integer (not a boolean, not 1.0) in 1..max_pages; default 0. */
static int init_num_pages(api__req *req, uint64_t *num_pages)
{
    const json_node *node = json_get(req->body, "num_pages");
    uint64_t max = req->limits->max_pages;
    if (!node) {
        api__fail_reason(req, 400, INIT_INVALID,
                         "'num_pages' is missing (default 0); a worker needs 1..%" PRIu64, max);
        return -1;
    }
    if (node->type != JSON_INT) {
        api__fail_reason(req, 400, INIT_INVALID,
                         "'num_pages' must be an integer in 1..%" PRIu64 ", got %s", max,
                         json_type_name(node));
        return -1;
    }
    if (node->u.i < 1 || (uint64_t)node->u.i > max) {
        api__fail_reason(req, 400, INIT_INVALID,
                         "'num_pages' must be an integer in 1..%" PRIu64 ", got %" PRId64, max,
                         node->u.i);
        return -1;
    }
    *num_pages = (uint64_t)node->u.i;
    return 0;
}

/* The body's "rank" for POST /initialize: required for a worker only. */
static int init_body_rank(api__req *req, bool scheduler, bool *have_rank)
{
    const json_node *node = json_get(req->body, "rank");
    *have_rank = node && node->type != JSON_NULL;
    if (!*have_rank) {
        if (scheduler)
            return 0;
        api__fail_reason(req, 400, INIT_INVALID, "'rank' is missing");
        return -1;
    }
    uint32_t max_ranks = req->limits->max_ranks;
    if (node->type != JSON_INT || node->u.i < 0 || (uint64_t)node->u.i >= max_ranks) {
        api__fail_reason(req, 400, INIT_INVALID, "'rank' must be an integer in 0..%u, got %s",
                         (unsigned)(max_ranks - 1),
                         node->type == JSON_INT ? "one out of range" : json_type_name(node));
        return -1;
    }
    req->rank = (uint32_t)node->u.i;
    return 0;
}

/* The pool's real size: the one asked for, except when an existing pool
 * of another size was kept. */
static void answer_initialized(api__req *req, const api__call *c)
{
    api__begin(req);
    json_put_lit(req->out, "{\"message\":\"Rank ");
    json_put_uint(req->out, req->rank);
    json_put_lit(req->out, " initialized with ");
    json_put_uint(req->out, c->created ? c->num_pages : c->existing);
    json_put_lit(req->out, " pages\"}");
}

/* A scheduler is answered at once: it has no pool. */
static int init_decode(api__req *req, api__call *c, bool rank_in_body)
{
    bool scheduler, have_rank = true;
    if (init_role(req, &scheduler) != 0)
        return -1;
    if (rank_in_body && init_body_rank(req, scheduler, &have_rank) != 0)
        return -1;
    if (scheduler) {
        api__begin(req);
        json_put_lit(req->out, "{\"message\":\"Scheduler role does not require initialization\"}");
        return API__ANSWERED;
    }
    return init_num_pages(req, &c->num_pages);
}

static int init_rank_in_path(api__req *req, api__call *c)
{
    return init_decode(req, c, false);
}

static int init_rank_in_body(api__req *req, api__call *c)
{
    return init_decode(req, c, true);
}

/* ---- keys ---- */

static int rank_and_confirmations(api__req *req, api__call *c)
{
    const json_node *list;
    if (rank_and_list(req, "confirmations", &list) != 0 ||
        api__decode_confirmations(req, list, "confirmations", &c->keys, &c->pages) != 0)
        return -1;
    c->n = list->len;
    return api__decode_pages(req, json_get(req->body, "pages_to_release"), "pages_to_release",
                             &c->release, &c->nrel);
}

static int keys_only(api__req *req, api__call *c)
{
    const json_node *list = json_get(req->body, "keys");
    if (!api__is_list(list)) {
        api__fail(req, 400, "Invalid keys format");
        return -1;
    }
    c->n = list->len;
    return api__decode_keys(req, list, "keys", &c->keys);
}

/* /clear reads no body. */
static int nothing(api__req *req, api__call *c)
{
    (void)req;
    (void)c;
    return 0;
}

static void answer_results(api__req *req, const api__call *c)
{
    api__list_open(req, "results", true);
    for (size_t i = 0; i < c->n; i++) {
        api__list_item(req, i);
        json_put_char(req->out, '[');
        json_put_str(req->out, c->keys[i].ptr, c->keys[i].len);
        json_put_char(req->out, ',');
        json_put_int(req->out, c->pages[i]);
        json_put_char(req->out, ']');
    }
    api__list_close(req);
}

static void answer_locations(api__req *req, const api__call *c)
{
    api__answer_pages(req, "locations", c->pages, c->n);
}

static void answer_cleared(api__req *req, const api__call *c)
{
    (void)c;
    log_msg(LOG_INFO, "every pool%s cleared (POST /clear)", api__tenant_words(req));
    api__no_content(req);
}

#define VLLM_ROUTE(...) API__DIALECT_ROUTE(fail_not_initialized, __VA_ARGS__),
const api__route api__vllm_routes[] = {VLLM_ROUTES(VLLM_ROUTE)};
const size_t api__vllm_route_count = sizeof api__vllm_routes / sizeof api__vllm_routes[0];
