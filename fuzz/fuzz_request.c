/*
 * fuzz_request.c: one request through api_handle(), against a fresh
 * in-memory store that already holds some state.
 *
 * Input: byte 0 picks the route (fuzz_routes[b % count]); byte 0 == 0xff
 * instead takes the path from the input up to the first '\n' (method POST).
 * Every byte after that is the body. A first byte 0xfe turns auth on (token
 * FUZZ_TOKEN) and takes the Authorization header from the input up to the
 * first '\n' ("-": no header); the rest is read as above.
 *
 * The store starts with pools kv/0 and kv/1 (4 pages each) where "a" is
 * owned, "b" is reserved in kv/0, and an SGLang pool "ns"/2 of 0 pages, so
 * that valid bodies reach every store operation and every 404 text.
 *
 * Oracles (fuzz_common.h): a well-formed answer and never a 5xx; a 4xx
 * changes no state (the store's figures are compared before and after);
 * the invariant checker passes; answers that hand out pages have one item
 * per key and never give one page to two keys. With auth: a request other
 * than GET /health is answered only if an independent reading of the
 * header (ref_authorized) finds the token, else it is a 401 with a
 * challenge.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/auth.h"
#include "fuzz_common.h"
#include "store/mem.h"

#define FUZZ_TOKEN "s3cr3t:T0ken"

/* ---- auth, read independently of src/api/auth.c ---- */

static bool blank(char c)
{
    return c == ' ' || c == '\t';
}

static int b64(char c)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const char *at = c ? strchr(alphabet, c) : NULL;
    return at ? (int)(at - alphabet) : -1;
}

/* Whether header carries FUZZ_TOKEN as Bearer or as the Basic password. */
static bool ref_authorized(const char *header)
{
    if (!header)
        return false;
    char text[8192];
    size_t len = strlen(header);
    if (len >= sizeof text)
        return false;
    while (len && blank(header[len - 1]))
        len--;
    while (len && blank(*header))
        header++, len--;
    memcpy(text, header, len);
    text[len] = '\0';
    char *cred = text;
    while (*cred && !blank(*cred))
        cred++;
    if (!*cred)
        return false;
    *cred++ = '\0';
    while (blank(*cred))
        cred++;
    if (strcasecmp(text, "bearer") == 0)
        return strcmp(cred, FUZZ_TOKEN) == 0;
    if (strcasecmp(text, "basic") != 0)
        return false;
    unsigned char plain[8192];
    size_t n = 0, bits = 0;
    uint32_t acc = 0;
    size_t clen = strlen(cred);
    while (clen && cred[clen - 1] == '=')
        clen--;
    if (clen % 4 == 1)
        return false; /* not base64: 6 bits left over */
    for (size_t i = 0; i < clen; i++) {
        int v = b64(cred[i]);
        if (v < 0)
            return false;
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            plain[n++] = (unsigned char)(acc >> bits);
        }
    }
    if (n > AUTH_MAX_CREDENTIALS)
        return false;
    const unsigned char *colon = memchr(plain, ':', n);
    size_t tlen = strlen(FUZZ_TOKEN);
    return colon && (size_t)(plain + n - colon - 1) == tlen &&
           memcmp(colon + 1, FUZZ_TOKEN, tlen) == 0;
}

static void prepare(store_t *store)
{
    const hf_slice kv = HF_SLICE_LIT("kv");
    const hf_slice keys[] = {HF_SLICE_LIT("a"), HF_SLICE_LIT("b")};
    int64_t pages[2];
    bool created;
    uint64_t existing;
    for (uint32_t rank = 0; rank < 2; rank++) {
        if (store->ops->init_pool(store, kv, rank, 4, &created, &existing) != STORE_OK ||
            store->ops->allocate(store, kv, rank, keys, rank == 0 ? 2 : 1,
                                 CORE_ALLOC_ALL_OR_NOTHING, pages, NULL) != STORE_OK ||
            store->ops->confirm(store, kv, rank, keys, pages, 1, NULL, 0) != STORE_OK)
            fuzz_fail("preparing the store failed");
    }
    if (store->ops->init_pool(store, HF_SLICE_LIT("ns"), 2, 0, &created, &existing) != STORE_OK)
        fuzz_fail("preparing the store failed");
    fuzz_check_store(store, "preparing the store");
}

/* Routes whose 200 answers hand out or report pages: the request list, the
 * answer list and where the page is in an answer item. */
static void check_pages(const char *path, const char *body, size_t len, const api_response *resp)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        return;
    if (strcmp(path, "/keys/batch_allocate") == 0)
        fuzz_check_pages(path, body, len, "keys", resp, "results", 1);
    else if (strcmp(path, "/keys/get_locations") == 0)
        fuzz_check_pages(path, body, len, "keys", resp, "locations", -1);
    else if (strcmp(slash, "/reserve_and_allocate_page_indices") == 0)
        fuzz_check_pages(path, body, len, "keys", resp, "indices", 1);
    else if (strcmp(slash, "/get_page_indices") == 0)
        fuzz_check_pages(path, body, len, "keys", resp, "indices", -1);
}

/* One request as the input describes it (see the top of this file). */
typedef struct request {
    bool auth;
    char header_buf[8192];
    const char *header; /* NULL: no Authorization header */
    const char *method;
    char path[256];
    size_t path_len;
    const uint8_t *body;
    size_t body_len;
} request;

/* Everything up to the first '\n' (or the end) into buf, NUL-terminated. */
static size_t take_line(const uint8_t **data, size_t *size, char *buf, size_t cap)
{
    const uint8_t *nl = memchr(*data, '\n', *size);
    size_t len = nl ? (size_t)(nl - *data) : *size;
    size_t kept = len < cap ? len : cap - 1;
    memcpy(buf, *data, kept);
    buf[kept] = '\0';
    size_t used = nl ? len + 1 : len;
    *data += used;
    *size -= used;
    return kept;
}

/* false if the input holds no request. */
static bool parse_input(const uint8_t *data, size_t size, request *req)
{
    req->auth = size > 0 && data[0] == 0xfe;
    req->header = NULL;
    if (req->auth) {
        data++, size--;
        take_line(&data, &size, req->header_buf, sizeof req->header_buf);
        req->header = strcmp(req->header_buf, "-") == 0 ? NULL : req->header_buf;
    }
    if (size == 0)
        return false;
    uint8_t pick = data[0];
    data++, size--;
    if (pick == 0xff) {
        req->method = "POST";
        req->path_len = take_line(&data, &size, req->path, sizeof req->path);
    } else {
        const fuzz_route *route = &fuzz_routes[pick % fuzz_route_count];
        req->method = route->method;
        req->path_len = strlen(route->path);
        memcpy(req->path, route->path, req->path_len + 1);
    }
    req->body = data;
    req->body_len = size;
    return true;
}

/* With auth on: only /health is open; anything else needs the token. */
static void check_auth(const request *req, api_response *resp)
{
    const char *header = req->header ? req->header : "(none)";
    bool open = req->path_len == 7 && memcmp(req->path, "/health", 7) == 0;
    bool carries = ref_authorized(req->header);
    if ((auth_check(FUZZ_TOKEN, strlen(FUZZ_TOKEN), req->header) == AUTH_OK) != carries)
        fuzz_fail("auth_check and the reference disagree on: %s", header);
    if (resp->status == 401) {
        if (!resp->www_authenticate)
            fuzz_fail("401 without a WWW-Authenticate challenge");
        if (carries || open)
            fuzz_fail("%s %s refused with 401 but the header carries the token: %s", req->method,
                      req->path, header);
        resp->status = 400; /* for fuzz_check_answer: an error like the others */
    } else if (!carries && !open) {
        fuzz_fail("%s %s answered %d without the token: %s", req->method, req->path, resp->status,
                  header);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool quiet;
    if (!quiet) {
        fuzz_quiet();
        quiet = true;
    }
    static request req;
    if (!parse_input(data, size, &req))
        return 0;
    const char *method = req.method, *path = req.path;
    size_t path_len = req.path_len, body_len = req.body_len;

    core_config core = fuzz_core_config();
    core.reservation_ms = 600000; /* nothing expires while one input runs */
    core.read_lease_ms = 5000;
    store_t *store = store_mem_new(&core, &store_server_clock);
    if (!store)
        fuzz_fail("store_mem_new failed");
    prepare(store);
    api_config config = fuzz_api_config();
    if (req.auth) {
        config.auth_token = FUZZ_TOKEN;
        config.auth_token_len = strlen(FUZZ_TOKEN);
    }
    api_t *api = api_new(store, &config);
    api_response resp;
    api_response_init(&resp, api);

    /* A copy the exact size of the body, so that ASan sees any over-read. */
    char *copy = malloc(body_len ? body_len : 1);
    if (body_len)
        memcpy(copy, req.body, body_len);
    fuzz_snapshot before = {0}, after = {0};
    fuzz_snapshot_take(store, &before);
    api_handle(api, method, (hf_slice){path, path_len}, req.header, copy, body_len, &resp);
    if (req.auth)
        check_auth(&req, &resp);
    fuzz_check_answer(method, path, &resp);
    if (resp.status >= 400) {
        fuzz_snapshot_take(store, &after);
        if (!fuzz_snapshot_equal(&before, &after))
            fuzz_fail("%s %s answered %d but changed the state", method, path, resp.status);
    } else if (resp.status == 200) {
        check_pages(path, copy, body_len, &resp);
    }
    fuzz_check_store(store, path);

    fuzz_snapshot_free(&before);
    fuzz_snapshot_free(&after);
    free(copy);
    api_response_free(&resp);
    api_free(api);
    store->ops->destroy(store);
    return 0;
}
