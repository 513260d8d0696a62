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

static void fail_store(api__req *req, int err, hf_slice ns)
{
    if (err == STORE_ENOPOOL)
        api__fail(req, 404,
                  "Rank %u namespace '%.*s' not initialized. Please call /%u/initialize "
                  "first.",
                  (unsigned)req->rank, (int)ns.len, ns.ptr, (unsigned)req->rank);
    else
        api__store_failed(req, err);
}

/* The required list "keys", decoded as plain key strings or as key items. */
static int required_keys(api__req *req, bool items, hf_slice **keys, size_t *n)
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
    *n = list->len;
    return items ? api__decode_key_items(req, list, "keys", keys)
                 : api__decode_keys(req, list, "keys", keys);
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

static void initialize(api__req *req)
{
    uint64_t num_pages;
    hf_slice ns;
    if (decode_num_pages(req, &num_pages) != 0 || api__decode_namespace(req, &ns) != 0)
        return;
    bool created = false;
    uint64_t existing = 0;
    int err = api__init_pool(req, ns, num_pages, &created, &existing);
    if (err == API__ANSWERED)
        return;
    if (err == STORE_OK && created && num_pages == 0)
        log_msg(LOG_WARN,
                "rank %u namespace '%.*s'%s initialized with 0 pages: it can store "
                "nothing",
                (unsigned)req->rank, (int)ns.len, ns.ptr, api__tenant_words(req));
    if (err != STORE_OK) {
        fail_store(req, err, ns);
        return;
    }
    if (created)
        log_msg(LOG_INFO, "rank %u namespace '%.*s'%s initialized with %" PRIu64 " pages",
                (unsigned)req->rank, (int)ns.len, ns.ptr, api__tenant_words(req), num_pages);
    else if (existing != num_pages)
        log_msg(LOG_WARN,
                "rank %u namespace '%.*s'%s already has %" PRIu64 " pages; an "
                "initialize asked for %" PRIu64 ": the pool is kept as it is",
                (unsigned)req->rank, (int)ns.len, ns.ptr, api__tenant_words(req), existing,
                num_pages);
    api__no_content(req);
}

static void exists(api__req *req)
{
    hf_slice *keys, ns;
    size_t n;
    if (required_keys(req, false, &keys, &n) != 0 || api__decode_namespace(req, &ns) != 0)
        return;
    bool *present = json_doc_alloc(req->doc, n * sizeof *present);
    int err = req->store->ops->exists(req->store, api__store_ns(req, ns), req->rank, keys, n,
                                      present);
    if (err != STORE_OK) {
        fail_store(req, err, ns);
        return;
    }
    api__answer_bools(req, "exists", present, n);
}

static void reserve_and_allocate(api__req *req)
{
    hf_slice *keys, ns;
    size_t n;
    if (required_keys(req, true, &keys, &n) != 0 || api__decode_namespace(req, &ns) != 0)
        return;
    int64_t *pages = json_doc_alloc(req->doc, n * sizeof *pages);
    bool *existed = json_doc_alloc(req->doc, n * sizeof *existed);
    int err = req->store->ops->allocate(req->store, api__store_ns(req, ns), req->rank, keys, n,
                                        CORE_ALLOC_PARTIAL, pages, existed);
    if (err != STORE_OK) {
        fail_store(req, err, ns);
        return;
    }
    api__begin(req);
    json_put_lit(req->out, "{\"indices\":[");
    for (size_t i = 0; i < n; i++) {
        if (i)
            json_put_char(req->out, ',');
        json_put_char(req->out, '[');
        json_put_bool(req->out, existed[i] && pages[i] >= 0);
        json_put_char(req->out, ',');
        json_put_int(req->out, pages[i]);
        json_put_char(req->out, ']');
    }
    json_put_lit(req->out, "]}");
}

static void confirm_write(api__req *req)
{
    const json_node *list = json_get(req->body, "written_keys_to_confirm");
    hf_slice *keys = NULL, ns;
    int64_t *pages = NULL, *release;
    size_t n = 0, nrel;
    if (list && list->type != JSON_NULL) {
        if (list->type != JSON_ARRAY) {
            api__fail(req, 400,
                      "'written_keys_to_confirm' must be a list of [key, page] pairs, "
                      "got %s",
                      json_type_name(list));
            return;
        }
        if (api__decode_confirmations(req, list, "written_keys_to_confirm", &keys, &pages) != 0)
            return;
        n = list->len;
    }
    if (api__decode_pages(req, json_get(req->body, "pages_to_release"), "pages_to_release",
                          &release, &nrel) != 0 ||
        api__decode_namespace(req, &ns) != 0)
        return;
    int err = req->store->ops->confirm(req->store, api__store_ns(req, ns), req->rank, keys, pages,
                                       n, release, nrel);
    if (err != STORE_OK) {
        fail_store(req, err, ns);
        return;
    }
    api__no_content(req);
}

static void delete_keys(api__req *req)
{
    hf_slice *keys, ns;
    size_t n;
    if (required_keys(req, false, &keys, &n) != 0 || api__decode_namespace(req, &ns) != 0)
        return;
    int err = req->store->ops->delete_keys(req->store, api__store_ns(req, ns), req->rank, keys, n);
    if (err != STORE_OK) {
        fail_store(req, err, ns);
        return;
    }
    api__no_content(req);
}

static void clear_pool(api__req *req)
{
    hf_slice ns;
    if (api__decode_namespace(req, &ns) != 0)
        return;
    int err = req->store->ops->clear_pool(req->store, api__store_ns(req, ns), req->rank);
    if (err != STORE_OK) {
        fail_store(req, err, ns);
        return;
    }
    log_msg(LOG_INFO, "rank %u namespace '%.*s'%s cleared", (unsigned)req->rank, (int)ns.len,
            ns.ptr, api__tenant_words(req));
    api__no_content(req);
}

static void get_page_indices(api__req *req)
{
    hf_slice *keys, ns;
    size_t n;
    if (required_keys(req, false, &keys, &n) != 0 || api__decode_namespace(req, &ns) != 0)
        return;
    int64_t *pages = json_doc_alloc(req->doc, n * sizeof *pages);
    int err = req->store->ops->lookup(req->store, api__store_ns(req, ns), req->rank, keys, n,
                                      pages);
    if (err != STORE_OK) {
        fail_store(req, err, ns);
        return;
    }
    api__answer_pages(req, "indices", pages, n);
}

const api__route api__sglang_routes[] = {
    {"POST", "/{rank}/initialize", initialize, 0},
    {"POST", "/{rank}/exists", exists, 0},
    {"POST", "/{rank}/reserve_and_allocate_page_indices", reserve_and_allocate, 0},
    {"POST", "/{rank}/confirm_write", confirm_write, 0},
    {"POST", "/{rank}/delete_keys", delete_keys, 0},
    {"POST", "/{rank}/clear", clear_pool, API__EMPTY_BODY_OK},
    {"POST", "/{rank}/get_page_indices", get_page_indices, 0},
};
const size_t api__sglang_route_count = sizeof api__sglang_routes / sizeof api__sglang_routes[0];
