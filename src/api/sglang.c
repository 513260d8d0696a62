/*
 * sglang.c: the SGLang HiCache 3FS dialect (docs/protocol.md, "The SGLang dialect").
 *
 * The rank is in the path; every body may carry "namespace" (a non-empty
 * string, default "kv"). Allocation is partial: each key gets what is
 * available and the client releases what it does not use.
 *
 *   POST /{rank}/initialize   {"num_pages"}                          204
 *   POST /{rank}/exists       {"keys"}                               200 {"exists"}
 *   POST /{rank}/reserve_and_allocate_page_indices {"keys"}          200 {"indices"}
 *   POST /{rank}/confirm_write {"written_keys_to_confirm"?, "pages_to_release"?}  204
 *   POST /{rank}/delete_keys  {"keys"}                               204
 *   POST /{rank}/clear        {} or nothing                          204
 *   POST /{rank}/get_page_indices {"keys"}                           200 {"indices"}
 *
 * num_pages 0. The contract allows it and the stock server then creates a
 * pool without pages: so do we (every allocation answers -1). A warning is
 * logged, since it is almost always a configuration mistake.
 */
#include <inttypes.h>

#include "api/api_internal.h"
#include "util/log.h"

/* The routes (API__DIALECT_ROUTE, run by dialect.c): method, path, flags,
 * decoder, store call, answer. */
#define SGLANG_ROUTES(X)                                                                           \
    X("POST", "/{rank}/initialize", 0, num_pages_and_ns, INIT, api__answer_nothing)                \
    X("POST", "/{rank}/exists", 0, keys_and_ns, EXISTS, api__answer_exists)                        \
    X("POST", "/{rank}/reserve_and_allocate_page_indices", API__KEY_ITEMS, keys_and_ns,            \
      ALLOCATE_PARTIAL, answer_reserved)                                                           \
    X("POST", "/{rank}/confirm_write", 0, confirmations_and_ns, CONFIRM, api__answer_nothing)      \
    X("POST", "/{rank}/delete_keys", 0, keys_and_ns, DELETE, api__answer_nothing)                  \
    X("POST", "/{rank}/clear", API__EMPTY_BODY_OK, ns_only, CLEAR_POOL, answer_cleared)            \
    X("POST", "/{rank}/get_page_indices", 0, keys_and_ns, LOOKUP, answer_indices)

static void fail_not_initialized(api__req *req, const api__call *c)
{
    api__fail(req, 404,
              "Rank %u namespace '%.*s' not initialized. Please call /%u/initialize "
              "first.",
              (unsigned)req->rank, (int)c->ns.len, c->ns.ptr, (unsigned)req->rank);
}

/* The required list "keys" (key items where the route says
 * API__KEY_ITEMS), then the namespace. */
static int keys_and_ns(api__req *req, api__call *c)
{
    const json_node *list = json_get(req->body, "keys");
    if (!list) {
        api__fail(req, 400, "'keys' is missing; expected a list of keys");
        return -1;
    }
    if (list->type != JSON_ARRAY) {
        api__fail(req, 400, "'keys' must be a list of keys, got %s", json_type_name(list));
        return -1;
    }
    c->n = list->len;
    if (api__decode_route_keys(req, list, &c->keys) != 0)
        return -1;
    return api__decode_namespace(req, &c->ns);
}

/* num_pages: an integer (not a boolean, not 1.0) in 0..max_pages. */
static int decode_num_pages(api__req *req, uint64_t *num_pages)
{
    const json_node *node = json_get(req->body, "num_pages");
    uint64_t max = req->limits->max_pages;
    if (!node) {
        api__fail(req, 400, "'num_pages' is missing; expected an integer in 0..%" PRIu64, max);
        return -1;
    }
    if (node->type != JSON_INT) {
        api__fail(req, 400, "'num_pages' must be an integer in 0..%" PRIu64 ", got %s", max,
                  json_type_name(node));
        return -1;
    }
    if (node->u.i < 0 || (uint64_t)node->u.i > max) {
        api__fail(req, 400, "'num_pages' must be an integer in 0..%" PRIu64 ", got %" PRId64, max,
                  node->u.i);
        return -1;
    }
    *num_pages = (uint64_t)node->u.i;
    return 0;
}

static int num_pages_and_ns(api__req *req, api__call *c)
{
    if (decode_num_pages(req, &c->num_pages) != 0)
        return -1;
    return api__decode_namespace(req, &c->ns);
}

static int confirmations_and_ns(api__req *req, api__call *c)
{
    const json_node *list = json_get(req->body, "written_keys_to_confirm");
    if (list && list->type != JSON_NULL) {
        if (list->type != JSON_ARRAY) {
            api__fail(req, 400,
                      "'written_keys_to_confirm' must be a list of [key, page] pairs, "
                      "got %s",
                      json_type_name(list));
            return -1;
        }
        if (api__decode_confirmations(req, list, "written_keys_to_confirm", &c->keys, &c->pages) !=
            0)
            return -1;
        c->n = list->len;
    }
    if (api__decode_pages(req, json_get(req->body, "pages_to_release"), "pages_to_release",
                          &c->release, &c->nrel) != 0)
        return -1;
    return api__decode_namespace(req, &c->ns);
}

static int ns_only(api__req *req, api__call *c)
{
    return api__decode_namespace(req, &c->ns);
}

/* [[existed, page], ...]: existed only for a key that has its page. */
static void answer_reserved(api__req *req, const api__call *c)
{
    api__begin(req);
    json_put_lit(req->out, "{\"indices\":[");
    for (size_t i = 0; i < c->n; i++) {
        if (i)
            json_put_char(req->out, ',');
        json_put_char(req->out, '[');
        json_put_bool(req->out, c->present[i] && c->pages[i] >= 0);
        json_put_char(req->out, ',');
        json_put_int(req->out, c->pages[i]);
        json_put_char(req->out, ']');
    }
    json_put_lit(req->out, "]}");
}

static void answer_cleared(api__req *req, const api__call *c)
{
    log_msg(LOG_INFO, "rank %u namespace '%.*s'%s cleared", (unsigned)req->rank, (int)c->ns.len,
            c->ns.ptr, api__tenant_words(req));
    api__no_content(req);
}

static void answer_indices(api__req *req, const api__call *c)
{
    api__answer_pages(req, "indices", c->pages, c->n);
}

#define SGLANG_ROUTE(...) API__DIALECT_ROUTE(fail_not_initialized, __VA_ARGS__),
const api__route api__sglang_routes[] = {SGLANG_ROUTES(SGLANG_ROUTE)};
const size_t api__sglang_route_count = sizeof api__sglang_routes / sizeof api__sglang_routes[0];
