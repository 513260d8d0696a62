/*
 * fuzz_sequence.c: sequences of requests of both dialects against the
 * embedded engine on a fake clock that the input moves (so that leases
 * expire exactly when the input says and every run of an input takes the
 * same path), through one api_response reused
 * as a keep-alive connection reuses it, with the invariant checker run
 * after every request.
 *
 * Input: a list of operations, each one opcode byte and its argument bytes
 * (a missing byte reads as 0). Most operations build a valid request from
 * a small vocabulary, so that the fuzzer spends its time on state, not on
 * JSON syntax:
 *   keys       16 keys: short, exactly 32 bytes, 64 lowercase hex (packed by
 *              the core), 64 with upper case, 63 and 65 hex, UTF-8, an
 *              escaped NUL, quotes, the longest allowed and one too long
 *   ranks      0..3 and 4 (out of range: max_ranks is 4)
 *   namespaces absent, "kv", "ns", "" (invalid)
 *   pages      confirmations and releases take (key, page) pairs from the
 *              last allocation answers, sometimes off by one page or key
 * plus "raw" operations (a route and up to 255 body bytes from the input),
 * clock ticks (leases are 600 ms and 200 ms: ticks expire them), trims, and
 * snapshots.
 *
 * Oracles: those of fuzz_request (fuzz_common.h) after every request. And,
 * for the embedded engine, the write-ahead log's codec (src/wal/format.h)
 * watches its core as the server's log does: at the end, replaying the
 * whole log into an empty core, and the last snapshot plus the log after
 * it, must each rebuild exactly the live state (compared through
 * core_walk_state), invariant included.
 *
 * The engine is the one HF3FS_TEST_ENGINE names (tests/engines.h; default
 * the embedded engine), driven only through the api and store_t.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/json.h"
#include "engines.h"
#include "fuzz_common.h"
#include "util/xalloc.h"
#include "wal/format.h"

#define MAX_OPS 256
#define RING 32
#define START_MS 1700000000000
#define LOG_SALT 0x5a17u
#define SNAPSHOT_SALT 0x0badu

static const char *const vocabulary[] = {
    "a",
    "b",
    "c",
    "k3",
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    "ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
    "0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef",
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde",
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0",
    "0123456789abcdef0123456789abcdef",
    "0123456789abcdef0123456789abcdef!",
    "\xc3\xa9t\xc3\xa9",
    "\0x", /* an escaped NUL: length given below */
    "a\"b\\c/",
    "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk",
    "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk",
};
#define NKEYS (sizeof vocabulary / sizeof vocabulary[0])

static hf_slice key_of(unsigned i)
{
    i %= NKEYS;
    if (i == 12)
        return (hf_slice){vocabulary[i], 2};
    return hf_slice_from_cstr(vocabulary[i]);
}

static const char *const namespaces[] = {NULL, "kv", "ns", ""};

/* A page handed out recently, to confirm or release. */
typedef struct handed {
    unsigned key;
    int64_t page;
} handed;

typedef struct session {
    fuzz_reader in;
    int64_t now; /* the store's clock, in milliseconds */
    test_engine engine;
    store_t *store; /* engine.store */
    api_t *api;
    api_response resp;
    json_buf body;
    char path[128];
    handed ring[RING];
    unsigned ring_len, ring_next;
    unsigned last_keys[8]; /* vocabulary indexes of the last request's keys */
    unsigned nlast;
    fuzz_snapshot before, after;
    wal_encoder log;    /* the core's events, as the server logs them */
    hf_buf snapshot;    /* the last OP_SNAPSHOT, empty if none */
    size_t snapshot_at; /* log bytes before it */
} session;

/* ---- building bodies ---- */

static unsigned pick_rank(session *s)
{
    uint8_t b = fuzz_byte(&s->in);
    return b % 16 == 15 ? 4 : b % 3;
}

static void put_namespace(session *s)
{
    const char *ns = namespaces[fuzz_byte(&s->in) % 4];
    if (!ns)
        return;
    json_put_lit(&s->body, ",\"namespace\":");
    json_put_str(&s->body, ns, strlen(ns));
}

/* "name":[keys...]; style 0: bare keys, 1: [key, prefix] pairs, 2: mixed. */
static void put_keys(session *s, const char *name, int style)
{
    unsigned n = fuzz_byte(&s->in) % 6;
    json_put_char(&s->body, '"');
    json_put_raw(&s->body, name, strlen(name));
    json_put_lit(&s->body, "\":[");
    s->nlast = 0;
    for (unsigned i = 0; i < n; i++) {
        uint8_t b = fuzz_byte(&s->in);
        unsigned k = b % NKEYS;
        hf_slice key = key_of(k);
        if (s->nlast < 8)
            s->last_keys[s->nlast++] = k;
        if (i)
            json_put_char(&s->body, ',');
        bool pair = style == 1 || (style == 2 && (b & 0x80));
        if (pair) {
            json_put_char(&s->body, '[');
            json_put_str(&s->body, key.ptr, key.len);
            if (b & 0x40)
                json_put_lit(&s->body, ",null]");
            else
                json_put_lit(&s->body, ",\"prefix\"]");
        } else {
            json_put_str(&s->body, key.ptr, key.len);
        }
    }
    json_put_char(&s->body, ']');
}

/* "name":[[key, page], ...] from the ring, sometimes off by one. */
static void put_confirmations(session *s, const char *name)
{
    unsigned n = fuzz_byte(&s->in) % 5;
    json_put_char(&s->body, '"');
    json_put_raw(&s->body, name, strlen(name));
    json_put_lit(&s->body, "\":[");
    for (unsigned i = 0; i < n; i++) {
        uint8_t b = fuzz_byte(&s->in);
        handed h = {.key = b % NKEYS, .page = b % 8};
        if (s->ring_len)
            h = s->ring[(b >> 3) % s->ring_len];
        uint8_t twist = fuzz_byte(&s->in) % 8;
        if (twist == 6)
            h.page++;
        else if (twist == 7)
            h.key++;
        if (i)
            json_put_char(&s->body, ',');
        hf_slice key = key_of(h.key);
        json_put_char(&s->body, '[');
        json_put_str(&s->body, key.ptr, key.len);
        json_put_char(&s->body, ',');
        json_put_int(&s->body, h.page);
        json_put_char(&s->body, ']');
    }
    json_put_char(&s->body, ']');
}

static void put_releases(session *s)
{
    unsigned n = fuzz_byte(&s->in) % 4;
    if (!n)
        return;
    json_put_lit(&s->body, ",\"pages_to_release\":[");
    for (unsigned i = 0; i < n; i++) {
        uint8_t b = fuzz_byte(&s->in);
        int64_t page = s->ring_len && (b & 1) ? s->ring[(b >> 1) % s->ring_len].page
                                              : (int64_t)(b >> 1) - 2;
        if (i)
            json_put_char(&s->body, ',');
        json_put_int(&s->body, page);
    }
    json_put_char(&s->body, ']');
}

/* ---- sending ---- */

static void remember(session *s, unsigned key, int64_t page)
{
    if (page < 0)
        return;
    s->ring[s->ring_next] = (handed){key, page};
    s->ring_next = (s->ring_next + 1) % RING;
    if (s->ring_len < RING)
        s->ring_len++;
}

/* Note the pages of an allocation answer (item[1] of each item). */
static void remember_answer(session *s, const char *list)
{
    json_limits limits = {.max_depth = 8, .max_nodes = 4096};
    json_doc doc;
    json_doc_init(&doc, &limits);
    const json_node *root;
    char err[128];
    if (json_parse(&doc, s->resp.body.ptr, s->resp.body.len, &root, err, sizeof err) == 0) {
        const json_node *items = json_get(root, list);
        for (uint32_t i = 0; items && i < items->len && i < s->nlast; i++) {
            const json_node *item = &items->u.items[i];
            if (item->type == JSON_ARRAY && item->len == 2 && item->u.items[1].type == JSON_INT)
                remember(s, s->last_keys[i], item->u.items[1].u.i);
        }
    }
    json_doc_free(&doc);
}

static void send_exact(session *s, const char *method, const char *path, const char *body,
                       size_t len)
{
    fuzz_snapshot_take(s->store, &s->before);
    api_handle(s->api, method, hf_slice_from_cstr(path), NULL, body, len, &s->resp);
    fuzz_check_answer(method, path, &s->resp);
    if (s->resp.status >= 400) {
        fuzz_snapshot_take(s->store, &s->after);
        if (!fuzz_snapshot_equal(&s->before, &s->after))
            fuzz_fail("%s %s answered %d but changed the state", method, path, s->resp.status);
    }
    fuzz_check_store(s->store, path);
    wal__enc_flush(&s->log); /* the end of an operation (wal_publish) */
    if (s->resp.status != 200)
        return;
    const char *slash = strrchr(path, '/');
    if (strcmp(path, "/keys/batch_allocate") == 0) {
        fuzz_check_pages(path, body, len, "keys", &s->resp, "results", 1);
        remember_answer(s, "results");
    } else if (strcmp(path, "/keys/get_locations") == 0) {
        fuzz_check_pages(path, body, len, "keys", &s->resp, "locations", -1);
    } else if (strcmp(slash, "/reserve_and_allocate_page_indices") == 0) {
        fuzz_check_pages(path, body, len, "keys", &s->resp, "indices", 1);
        remember_answer(s, "indices");
    } else if (strcmp(slash, "/get_page_indices") == 0) {
        fuzz_check_pages(path, body, len, "keys", &s->resp, "indices", -1);
    }
}

/* A copy the exact size of the body, so that ASan sees any over-read. */
static void send_request(session *s, const char *method, const char *path, const char *body,
                         size_t len)
{
    char *copy = malloc(len ? len : 1);
    if (len)
        memcpy(copy, body, len);
    send_exact(s, method, path, copy, len);
    free(copy);
}

/* Send the JSON object built in s->body (without its braces). */
static void send_body(session *s, const char *path)
{
    json_put_char(&s->body, '}');
    send_request(s, "POST", path, s->body.ptr, s->body.len);
}

static void begin_body(session *s)
{
    json_buf_reset(&s->body, 4096);
    json_put_char(&s->body, '{');
}

/* ---- operations ---- */

enum {
    OP_TICK,
    OP_TRIM,
    OP_RAW,
    OP_V_INIT,
    OP_V_INIT_ALIAS,
    OP_V_ALLOC,
    OP_V_CONFIRM,
    OP_V_EXISTS,
    OP_V_LOCATIONS,
    OP_V_CLEAR,
    OP_S_INIT,
    OP_S_EXISTS,
    OP_S_ALLOC,
    OP_S_CONFIRM,
    OP_S_DELETE,
    OP_S_CLEAR,
    OP_S_PAGES,
    OP_SNAPSHOT,
    OP_COUNT
};

/* ---- the log and snapshots ---- */

/* A snapshot of the live state with the live pool ids, as wal.c writes it. */
static void take_snapshot(session *s)
{
    wal_encoder snap;
    wal__enc_init(&snap, s->log.time_base);
    snap.salt = SNAPSHOT_SALT;
    snap.snapshot = true;
    wal__pools_copy(&snap.pools, &s->log.pools);
    core_walk_state(s->engine.core, wal__enc_event, &snap);
    wal__enc_flush(&snap);
    wal__enc_end(&snap);
    hf_buf_free(&s->snapshot);
    s->snapshot = snap.out;
    snap.out = (hf_buf){0};
    wal__enc_free(&snap);
    s->snapshot_at = s->log.out.len;
}

/* Every event of a state walk, as bytes. */
static hf_buf render(const core_t *core)
{
    hf_buf out = {0};
    core_walk_state(core, fuzz_render_event, &out);
    return out;
}

/* Replay the records of bytes[from..len-1] into core; the last decode result. */
static int replay(wal_decoder *dec, core_t *core, const hf_buf *bytes, size_t from, uint32_t salt,
                  const char *what)
{
    int last = WAL_DEC_OK;
    for (size_t off = from; off < bytes->len;) {
        size_t rec_len, body_len;
        const uint8_t *body;
        uint64_t end;
        if (wal__frame(bytes->ptr + off, bytes->len - off, salt, &rec_len, &body, &body_len) !=
            WAL_FRAME_OK)
            fuzz_fail("%s: the record at byte %zu does not frame", what, off);
        last = wal__decode(dec, body, body_len, wal__apply_event, core, &end);
        if (last != WAL_DEC_OK && last != WAL_DEC_END)
            fuzz_fail("%s: the record at byte %zu does not replay (%d)", what, off, last);
        off += rec_len;
    }
    return last;
}

static void expect_rebuilt(session *s, core_t *copy, const char *what)
{
    core_apply_finish(copy);
    hf_buf live = render(s->engine.core), got = render(copy);
    if (live.len != got.len || (live.len && memcmp(live.ptr, got.ptr, live.len) != 0))
        fuzz_fail("%s does not rebuild the live state", what);
    char err[512];
    if (core_check(copy, err, sizeof err) != 0)
        fuzz_fail("%s rebuilds a state that breaks the invariant: %s", what, err);
    hf_buf_free(&live);
    hf_buf_free(&got);
    core_free(copy);
}

static void check_log(session *s)
{
    core_config config = fuzz_core_config();
    wal_decoder dec;
    wal__dec_init(&dec);
    dec.time_base = s->log.time_base;
    core_t *copy = core_new(&config);
    replay(&dec, copy, &s->log.out, 0, LOG_SALT, "the whole log");
    expect_rebuilt(s, copy, "the whole log");
    wal__dec_free(&dec);
    if (!s->snapshot.len)
        return;
    wal__dec_init(&dec);
    dec.time_base = s->log.time_base;
    copy = core_new(&config);
    if (replay(&dec, copy, &s->snapshot, 0, SNAPSHOT_SALT, "the snapshot") != WAL_DEC_END)
        fuzz_fail("the snapshot does not end with END");
    replay(&dec, copy, &s->log.out, s->snapshot_at, LOG_SALT, "the log after the snapshot");
    expect_rebuilt(s, copy, "the snapshot plus the log after it");
    wal__dec_free(&dec);
}

static void sglang_path(session *s, const char *route)
{
    snprintf(s->path, sizeof s->path, "/%u/%s", pick_rank(s), route);
}

static void run_op(session *s, unsigned op)
{
    begin_body(s);
    switch (op) {
    case OP_TICK: s->now += (int64_t)fuzz_byte(&s->in) * 8; return;
    case OP_TRIM: api_response_trim(&s->resp); return;
    case OP_SNAPSHOT:
        if (s->engine.core)
            take_snapshot(s);
        return;
    case OP_RAW: {
        const fuzz_route *route = &fuzz_routes[fuzz_byte(&s->in) % fuzz_route_count];
        const uint8_t *bytes;
        size_t len = fuzz_bytes(&s->in, fuzz_byte(&s->in), &bytes);
        send_request(s, route->method, route->path, (const char *)bytes, len);
        return;
    }
    case OP_V_INIT: {
        snprintf(s->path, sizeof s->path, "/rank/%u/initialize", pick_rank(s));
        uint8_t b = fuzz_byte(&s->in);
        json_put_lit(&s->body, "\"role\":");
        json_put_raw(&s->body, b & 0x80 ? "\"scheduler\"" : "\"worker\"", b & 0x80 ? 11 : 8);
        json_put_lit(&s->body, ",\"num_pages\":");
        json_put_int(&s->body, b % 16 == 15 ? 1001 : b % 6);
        send_body(s, s->path);
        return;
    }
    case OP_V_INIT_ALIAS:
        json_put_lit(&s->body, "\"rank\":");
        json_put_uint(&s->body, pick_rank(s));
        json_put_lit(&s->body, ",\"num_pages\":");
        json_put_int(&s->body, fuzz_byte(&s->in) % 6);
        send_body(s, "/initialize");
        return;
    case OP_V_ALLOC:
        json_put_lit(&s->body, "\"rank\":");
        json_put_uint(&s->body, pick_rank(s));
        json_put_char(&s->body, ',');
        put_keys(s, "keys", 2);
        send_body(s, "/keys/batch_allocate");
        return;
    case OP_V_CONFIRM:
        json_put_lit(&s->body, "\"rank\":");
        json_put_uint(&s->body, pick_rank(s));
        json_put_char(&s->body, ',');
        put_confirmations(s, "confirmations");
        put_releases(s);
        send_body(s, "/keys/confirm_write");
        return;
    case OP_V_EXISTS:
        put_keys(s, "keys", 0);
        send_body(s, "/keys/batch_exists");
        return;
    case OP_V_LOCATIONS:
        json_put_lit(&s->body, "\"rank\":");
        json_put_uint(&s->body, pick_rank(s));
        json_put_char(&s->body, ',');
        put_keys(s, "keys", 0);
        send_body(s, "/keys/get_locations");
        return;
    case OP_V_CLEAR: send_request(s, "POST", "/clear", "", 0); return;
    case OP_S_INIT:
        sglang_path(s, "initialize");
        json_put_lit(&s->body, "\"num_pages\":");
        json_put_int(&s->body, fuzz_byte(&s->in) % 6);
        put_namespace(s);
        send_body(s, s->path);
        return;
    case OP_S_EXISTS:
        sglang_path(s, "exists");
        put_keys(s, "keys", 0);
        put_namespace(s);
        send_body(s, s->path);
        return;
    case OP_S_ALLOC:
        sglang_path(s, "reserve_and_allocate_page_indices");
        put_keys(s, "keys", 1);
        put_namespace(s);
        send_body(s, s->path);
        return;
    case OP_S_CONFIRM:
        sglang_path(s, "confirm_write");
        put_confirmations(s, "written_keys_to_confirm");
        put_releases(s);
        put_namespace(s);
        send_body(s, s->path);
        return;
    case OP_S_DELETE:
        sglang_path(s, "delete_keys");
        put_keys(s, "keys", 0);
        put_namespace(s);
        send_body(s, s->path);
        return;
    case OP_S_CLEAR:
        sglang_path(s, "clear");
        if (fuzz_byte(&s->in) & 1) {
            send_request(s, "POST", s->path, "", 0);
            return;
        }
        json_put_lit(&s->body, "\"x\":0");
        put_namespace(s);
        send_body(s, s->path);
        return;
    case OP_S_PAGES:
        sglang_path(s, "get_page_indices");
        put_keys(s, "keys", 0);
        put_namespace(s);
        send_body(s, s->path);
        return;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int64_t session_now_ms(void *ctx)
{
    return ((const session *)ctx)->now;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool quiet;
    if (!quiet) {
        fuzz_quiet();
        quiet = true;
    }
    session *s = calloc(1, sizeof *s);
    s->in = (fuzz_reader){data, size};
    core_config core = fuzz_core_config();
    s->now = START_MS;
    store_clock clock = {session_now_ms, s};
    char err[256];
    if (test_engine_open(&s->engine, test_engine_name(), &core, &clock, err, sizeof err) != 0)
        fuzz_fail("%s", err);
    s->store = s->engine.store;
    wal__enc_init(&s->log, START_MS);
    s->log.salt = LOG_SALT;
    if (s->engine.core)
        core_set_observer(s->engine.core, wal__enc_event, &s->log);
    api_config config = fuzz_api_config();
    s->api = api_new(s->store, &config);
    api_response_init(&s->resp, s->api);
    json_buf_init(&s->body, 1u << 20);

    for (int ops = 0; s->in.n && ops < MAX_OPS; ops++)
        run_op(s, fuzz_byte(&s->in) % OP_COUNT);
    if (s->engine.core) {
        check_log(s);
        core_set_observer(s->engine.core, NULL, NULL);
    }
    wal__enc_free(&s->log);
    hf_buf_free(&s->snapshot);
    fuzz_snapshot_free(&s->before);
    fuzz_snapshot_free(&s->after);
    json_buf_free(&s->body);
    api_response_free(&s->resp);
    api_free(s->api);
    test_engine_close(&s->engine);
    free(s);
    return 0;
}
