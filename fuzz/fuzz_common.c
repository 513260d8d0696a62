/*
 * fuzz_common.c: routes, limits and oracles shared by the fuzz targets
 * (see fuzz_common.h).
 */
#include "fuzz_common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/json.h"
#include "util/buf.h"
#include "util/log.h"
#include "util/xalloc.h"

void fuzz_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("FUZZ ORACLE: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    abort();
}

void fuzz_quiet(void)
{
    log_set_level(LOG_ERROR);
}

api_config fuzz_api_config(void)
{
    return (api_config){
        .limits =
            {
                .max_ranks = 4,
                .max_pages = 1000,
                .max_keys = 16,
                .max_key_bytes = 80,
                .max_body_bytes = 64 * 1024,
            },
        .debug_api = true,
    };
}

core_config fuzz_core_config(void)
{
    return (core_config){
        .reservation_ms = 600,
        .read_lease_ms = 200,
        .evict = true,
        .max_pages = 1000,
        .max_ranks = 4,
        .hash_seed = 0x5eed,
    };
}

uint8_t fuzz_byte(fuzz_reader *r)
{
    if (!r->n)
        return 0;
    r->n--;
    return *r->p++;
}

size_t fuzz_bytes(fuzz_reader *r, size_t want, const uint8_t **out)
{
    size_t n = want < r->n ? want : r->n;
    *out = r->p;
    r->p += n;
    r->n -= n;
    return n;
}

const fuzz_route fuzz_routes[] = {
    /* vLLM */
    {"POST", "/rank/0/initialize"},
    {"POST", "/rank/1/initialize"},
    {"POST", "/rank/3/initialize"},
    {"POST", "/rank/4/initialize"}, /* rank out of range */
    {"POST", "/rank/x/initialize"},
    {"POST", "/initialize"},
    {"POST", "/keys/batch_allocate"},
    {"POST", "/keys/confirm_write"},
    {"POST", "/keys/batch_exists"},
    {"POST", "/keys/get_locations"},
    {"POST", "/clear"},
    /* SGLang */
    {"POST", "/0/initialize"},
    {"POST", "/1/initialize"},
    {"POST", "/0/exists"},
    {"POST", "/1/exists"},
    {"POST", "/0/reserve_and_allocate_page_indices"},
    {"POST", "/1/reserve_and_allocate_page_indices"},
    {"POST", "/0/confirm_write"},
    {"POST", "/1/confirm_write"},
    {"POST", "/0/delete_keys"},
    {"POST", "/0/clear"},
    {"POST", "/0/get_page_indices"},
    {"POST", "/1/get_page_indices"},
    {"POST", "/00/get_page_indices"},
    {"POST", "/9999999999/exists"},
    {"POST", "/-1/exists"},
    /* admin */
    {"GET", "/health"},
    {"GET", "/metrics"},
    {"GET", "/v1/stats"},
    {"GET", "/v1/check"},
    {"HEAD", "/health"},
    /* wrong methods and unknown paths */
    {"GET", "/keys/batch_allocate"},
    {"PUT", "/0/exists"},
    {"POST", "/health"},
    {"POST", "/keys"},
    {"POST", "//exists"},
    {"POST", "/0/exists/"},
    {"POST", ""},
    {"DELETE", "/"},
};
const size_t fuzz_route_count = sizeof fuzz_routes / sizeof fuzz_routes[0];

/* ---- oracles ---- */

static bool status_allowed(int status)
{
    switch (status) {
    case 200:
    case 204:
    case 400:
    case 404:
    case 405: return true;
    default: return false;
    }
}

void fuzz_check_answer(const char *method, const char *path, const api_response *resp)
{
    int status = resp->status;
    if (!status_allowed(status))
        fuzz_fail("%s %s answered %d: %.*s", method, path, status, (int)resp->body.len,
                  resp->body.ptr ? resp->body.ptr : "");
    if (status == 204) {
        if (resp->body.len != 0 || resp->content_type != NULL)
            fuzz_fail("%s %s: 204 with a body or a content type", method, path);
        return;
    }
    if (!resp->content_type)
        fuzz_fail("%s %s: %d without a content type", method, path, status);
    if (strcmp(resp->content_type, "application/json") != 0) {
        if (status != 200 || strcmp(path, "/metrics") != 0)
            fuzz_fail("%s %s: %d with content type %s", method, path, status, resp->content_type);
        return;
    }
    json_limits limits = {.max_depth = 8, .max_nodes = 1u << 20};
    json_doc doc;
    json_doc_init(&doc, &limits);
    const json_node *root;
    char err[256];
    if (json_parse(&doc, resp->body.ptr, resp->body.len, &root, err, sizeof err) != 0)
        fuzz_fail("%s %s: %d answer is not JSON (%s): %.*s", method, path, status, err,
                  (int)resp->body.len, resp->body.ptr);
    if (root->type != JSON_OBJECT)
        fuzz_fail("%s %s: %d answer is not a JSON object", method, path, status);
    if (status >= 400) {
        const json_node *detail = json_get(root, "detail");
        if (!detail || detail->type != JSON_STRING || detail->len == 0)
            fuzz_fail("%s %s: %d error without a non-empty string detail: %.*s", method, path,
                      status, (int)resp->body.len, resp->body.ptr);
    }
    json_doc_free(&doc);
}

/* ---- snapshots ---- */

static void snap_add(fuzz_snapshot *snap, const void *data, size_t len)
{
    if (snap->len + len > snap->cap) {
        size_t cap = snap->cap ? snap->cap * 2 : 1024;
        while (cap < snap->len + len)
            cap *= 2;
        snap->bytes = hf_xrealloc(snap->bytes, cap);
        snap->cap = cap;
    }
    memcpy(snap->bytes + snap->len, data, len);
    snap->len += len;
}

static void snap_pool(void *ctx, hf_slice ns, uint32_t rank, const core_pool_stats *stats)
{
    fuzz_snapshot *snap = ctx;
    snap_add(snap, &ns.len, sizeof ns.len);
    snap_add(snap, ns.ptr, ns.len);
    snap_add(snap, &rank, sizeof rank);
    snap_add(snap, stats, sizeof *stats);
}

void fuzz_snapshot_take(store_t *store, fuzz_snapshot *snap)
{
    snap->len = 0;
    if (store->ops->stats(store, snap_pool, snap) != STORE_OK)
        fuzz_fail("store stats failed");
}

bool fuzz_snapshot_equal(const fuzz_snapshot *a, const fuzz_snapshot *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(a->bytes, b->bytes, a->len) == 0);
}

void fuzz_snapshot_free(fuzz_snapshot *snap)
{
    free(snap->bytes);
    memset(snap, 0, sizeof *snap);
}

void fuzz_render_event(void *ctx, const core_event *ev)
{
    hf_buf *out = ctx;
    uint64_t fixed[5] = {(uint64_t)ev->type, ev->rank, ev->page, (uint64_t)ev->deadline,
                         ev->ns.len};
    hf_buf_append(out, fixed, sizeof fixed);
    hf_buf_append(out, ev->ns.ptr, ev->ns.len);
    uint64_t klen = ev->key.len;
    hf_buf_append(out, &klen, sizeof klen);
    hf_buf_append(out, ev->key.ptr, ev->key.len);
}

void fuzz_check_store(store_t *store, const char *after)
{
    char err[512];
    if (store->ops->check(store, err, sizeof err) != 0)
        fuzz_fail("invariant broken after %s: %s", after, err);
}

/* ---- answers that hand out pages ---- */

static const json_node *item_key(const json_node *item)
{
    if (item->type == JSON_ARRAY && item->len >= 1)
        item = &item->u.items[0];
    return item->type == JSON_STRING ? item : NULL;
}

void fuzz_check_pages(const char *path, const char *body, size_t body_len, const char *req_list,
                      const api_response *resp, const char *answer_list, int pages_at)
{
    json_limits limits = {.max_depth = 32, .max_nodes = 1u << 20};
    json_doc req_doc, ans_doc;
    json_doc_init(&req_doc, &limits);
    json_doc_init(&ans_doc, &limits);
    const json_node *req_root, *ans_root;
    char err[256];
    if (json_parse(&req_doc, body, body_len, &req_root, err, sizeof err) != 0)
        fuzz_fail("%s: answered 200 to a body that does not parse (%s)", path, err);
    if (json_parse(&ans_doc, resp->body.ptr, resp->body.len, &ans_root, err, sizeof err) != 0)
        fuzz_fail("%s: 200 answer does not parse (%s)", path, err);
    const json_node *keys = json_get(req_root, req_list);
    const json_node *answers = json_get(ans_root, answer_list);
    if (!keys || keys->type != JSON_ARRAY)
        fuzz_fail("%s: answered 200 without a '%s' list in the request", path, req_list);
    if (!answers || answers->type != JSON_ARRAY || answers->len != keys->len)
        fuzz_fail("%s: '%s' of the answer does not have one item per key (%u keys): %.*s", path,
                  answer_list, (unsigned)keys->len, (int)resp->body.len, resp->body.ptr);
    for (uint32_t i = 0; i < keys->len; i++) {
        const json_node *key_i = item_key(&keys->u.items[i]);
        const json_node *ans_i = &answers->u.items[i];
        if (!key_i)
            fuzz_fail("%s: answered 200 to a request whose key %u is not a string", path, i);
        if (pages_at >= 0) {
            if (ans_i->type != JSON_ARRAY || ans_i->len != 2)
                fuzz_fail("%s: answer item %u is not a pair", path, i);
            if (json_get(ans_root, "rank") &&
                (ans_i->u.items[0].type != JSON_STRING ||
                 !hf_slice_eq(json_slice(&ans_i->u.items[0]), json_slice(key_i))))
                fuzz_fail("%s: answer item %u does not echo its key", path, i);
            ans_i = &ans_i->u.items[pages_at];
        }
        if (ans_i->type == JSON_NULL)
            continue;
        if (ans_i->type != JSON_INT || ans_i->u.i < -1)
            fuzz_fail("%s: answer item %u is not a page", path, i);
        if (ans_i->u.i < 0)
            continue;
        for (uint32_t j = 0; j < i; j++) {
            const json_node *ans_j = &answers->u.items[j];
            if (pages_at >= 0)
                ans_j = &ans_j->u.items[pages_at];
            const json_node *key_j = item_key(&keys->u.items[j]);
            if (ans_j->type == JSON_INT && ans_j->u.i == ans_i->u.i &&
                !hf_slice_eq(json_slice(key_i), json_slice(key_j)))
                fuzz_fail("%s: keys %u and %u (different) were both given page %lld: %.*s", path, j,
                          i, (long long)ans_i->u.i, (int)resp->body.len, resp->body.ptr);
        }
    }
    json_doc_free(&req_doc);
    json_doc_free(&ans_doc);
}
