/*
 * test_wal.c: the write-ahead log keeps the state, cuts exactly a torn tail
 * and refuses (or salvages) damage before it.
 *
 * States are compared through a text rendering of core_walk_state (the
 * durable state: pools, pages, keys, hands, reservations, drains), as in
 * test_replay.c. Each test works in its own temporary directory.
 */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fault/fault.h"
#include "check.h"
#include "core/core.h"
#include "randops.h"
#include "util/log.h"
#include "wal/format.h"
#include "wal/wal.h"
#include "wal/wal_internal.h"

/* The cores of these tests: the default leases, small limits. */
static const core_config *cfg(void)
{
    static core_config c;
    c = core_config_default(1000, 8, 11);
    return &c;
}

/* ------------------------------------------------------------- rendering */

static void expect_same_state(const core_t *a, const core_t *b, const char *what)
{
    if (randops_text_differ(randops_text_state(a), randops_text_state(b), "expected", what))
        TEST_FAIL("%s: the state differs", what);
    char err[256];
    if (core_check(b, err, sizeof err) != 0)
        TEST_FAIL("%s: the invariant is broken: %s", what, err);
}

/* --------------------------------------------------------- random work */

static randops_rng rng = {0x9e3779b97f4a7c15ull};

static int pick(int n)
{
    return randops_pick(&rng, n);
}

static const hf_slice NS[3] = {HF_SLICE_LIT("kv"), HF_SLICE_LIT("ns-b"), HF_SLICE_LIT("")};

/* The first two namespaces, ranks 0-2, batches of up to 6 keys of 24, in
 * three forms: 64 hex characters (packed), other characters, short hex. */
static randops_space space = {.ns = NS, .nns = 2, .ranks = 3, .max_batch = 6, .nkeys = 24};

static void make_keys(void)
{
    for (int i = 0; i < space.nkeys; i++) {
        char *name = space.names[i];
        if (i % 3 == 0)
            for (int j = 0; j < 64; j++)
                name[j] = "0123456789abcdef"[(i * 7 + j * 13) % 16];
        else if (i % 3 == 1)
            snprintf(name, sizeof space.names[i], "Key-%d/with:other chars", i);
        else
            snprintf(name, sizeof space.names[i], "%02x", i * 9);
        space.keys[i] = hf_slice_from_cstr(name);
    }
}

/* The operations as the store would run them, over pools of 2-11 pages. */
static const randops_mix MIX = {.pools = {.pages = 2, .span = 10, .reinit_one_in = 60},
                                .writes = {.allocate = 35, .delete = 10, .pool_clear = 2},
                                .reads = {.lookup = 20, .exists = 10, .complete_exists = 21},
                                .one_in = {.clear_all = 8, .release = 6, .unconfirmed = 5}};

/* One random operation, as the store would run it. */
static void random_op(core_t *core, int64_t now)
{
    randops_step(core, &space, &MIX, &rng, now, false, NULL);
}

/* ------------------------------------------------------- codec round trip */

/* A decoder's callback: the events into a randops_events. */
static int collect(void *ctx, const core_event *ev)
{
    randops_record(ctx, ev);
    return 0;
}

TEST(sync_latencies_fall_in_the_first_bucket_whose_bound_they_do_not_exceed)
{
    CHECK_EQ(wal_sync_bucket(0), 0);
    CHECK_EQ(wal_sync_bucket(50), 0);
    CHECK_EQ(wal_sync_bucket(51), 1);
    CHECK_EQ(wal_sync_bucket(3000), 6);
    CHECK_EQ(wal_sync_bucket(1000000), WAL_SYNC_BUCKETS - 2);
    CHECK_EQ(wal_sync_bucket(5000000), WAL_SYNC_BUCKETS - 1);
}

TEST(every_event_type_the_log_writes_round_trips_through_the_record_encoding)
{
    static const char bin_key[] = {'a', 0, (char)0xff, '\n'};
    core_event evs[] = {
        {CORE_EV_POOL_INIT, HF_SLICE_LIT("kv"), 3, 1000000000, {"", 0}, 0},
        {CORE_EV_POOL_INIT, HF_SLICE_LIT("other"), 0, 7, {"", 0}, 0},
        {CORE_EV_RESERVE, HF_SLICE_LIT("kv"), 3, 999999999,
         HF_SLICE_LIT("00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"),
         1700000600000},
        {CORE_EV_RESERVE, HF_SLICE_LIT("kv"), 3, 5, HF_SLICE_LIT("ABCDEF"), 1699999000000},
        /* <32|64 hex><suffix>: packed with their suffix, at the bounds */
        {CORE_EV_RESERVE, HF_SLICE_LIT("kv"), 3, 7,
         HF_SLICE_LIT("00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff-k"), 0},
        {CORE_EV_RESERVE, HF_SLICE_LIT("kv"), 3, 8,
         HF_SLICE_LIT("00112233445566778899aabbccddeeff00112233445566778899aabbccddeeffa"), 0},
        {CORE_EV_RESERVE, HF_SLICE_LIT("kv"), 3, 9,
         HF_SLICE_LIT("00112233445566778899aabbccddeeff_0123456789abcde"), 0},
        {CORE_EV_RESERVE, HF_SLICE_LIT("kv"), 3, 10,
         HF_SLICE_LIT("00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
                      "_0123456789abcdef"),
         0},
        {CORE_EV_RESERVE, HF_SLICE_LIT("kv"), 3, 11,
         HF_SLICE_LIT("00112233445566778899AABBCCDDEEFF00112233445566778899aabbccddeeff-v"), 0},
        {CORE_EV_RESERVE, HF_SLICE_LIT("kv"), 3, 6, HF_SLICE_LIT("abc"), 1},
        {CORE_EV_RESERVE, HF_SLICE_LIT("other"), 0, 1, {bin_key, sizeof bin_key}, 0},
        {CORE_EV_OWN, HF_SLICE_LIT("kv"), 3, 5, {"", 0}, 0},
        {CORE_EV_WRITE_LEASE, HF_SLICE_LIT("kv"), 3, 5, {"", 0}, 1700000009000},
        {CORE_EV_WRITE_DONE, HF_SLICE_LIT("kv"), 3, 5, {"", 0}, 1700000006000},
        {CORE_EV_SWEEP, HF_SLICE_LIT("kv"), 3, 999999999, {"", 0}, 0},
        {CORE_EV_SWEEP, HF_SLICE_LIT("kv"), 3, 0, {"", 0}, 4},
        {CORE_EV_DRAIN, HF_SLICE_LIT("kv"), 3, 5, {"", 0}, INT64_MAX},
        {CORE_EV_FREE, HF_SLICE_LIT("other"), 0, 1, {"", 0}, 0},
        {CORE_EV_CLEAR_ALL, {"", 0}, 0, 0, {"", 0}, 0},
        {CORE_EV_POOL_INIT, HF_SLICE_LIT("kv"), 0, 1, {"", 0}, 0},
    };
    size_t nev = sizeof evs / sizeof evs[0];
    wal_encoder enc;
    wal__enc_init(&enc, 1700000000000);
    enc.salt = 0x12345678;
    for (size_t i = 0; i < nev; i++) {
        wal__enc_event(&enc, &evs[i]);
        wal__enc_flush(&enc);
    }
    wal_decoder dec;
    wal__dec_init(&dec);
    dec.time_base = enc.time_base;
    randops_events got = {0};
    size_t off = 0;
    uint64_t records = 0;
    while (off < enc.out.len) {
        size_t rec_len, body_len;
        const uint8_t *body;
        CHECK_EQ(
            wal__frame(enc.out.ptr + off, enc.out.len - off, enc.salt, &rec_len, &body, &body_len),
            WAL_FRAME_OK);
        uint64_t end = 0;
        CHECK_EQ(wal__decode(&dec, body, body_len, collect, &got, &end), WAL_DEC_OK);
        off += rec_len;
        records++;
        /* The wrong salt never checks out. */
        CHECK_EQ(wal__frame(enc.out.ptr + off - rec_len, rec_len, enc.salt ^ 1, &rec_len, &body,
                            &body_len),
                 WAL_FRAME_BAD);
    }
    CHECK_EQ(records, nev);
    CHECK_EQ(got.len, nev);
    for (size_t i = 0; i < nev; i++) {
        const core_event *a = &evs[i], *b = &got.items[i].ev;
        if (a->type != b->type || !hf_slice_eq(a->ns, b->ns) || a->rank != b->rank ||
            a->page != b->page || !hf_slice_eq(a->key, b->key) || a->deadline != b->deadline)
            TEST_FAIL("event %zu (type %d) did not round-trip", i, a->type);
    }
    /* 64 hex characters are stored in 32 bytes. */
    wal_encoder one;
    wal__enc_init(&one, 1700000000000);
    wal__enc_event(&one, &evs[0]);
    size_t before = one.out.len;
    wal__enc_event(&one, &evs[2]);
    CHECK(one.out.len - before < 50);
    randops_events_free(&got);
    wal__enc_free(&one);
    wal__enc_free(&enc);
    wal__dec_free(&dec);
}

/* Decode every record of out (salt) with dec into core (wal__apply_event). */
static void replay_records(wal_decoder *dec, const hf_buf *out, uint32_t salt, core_t *core)
{
    for (size_t off = 0; off < out->len;) {
        size_t rec_len, body_len;
        const uint8_t *body;
        uint64_t end = 0;
        CHECK_EQ(wal__frame(out->ptr + off, out->len - off, salt, &rec_len, &body, &body_len),
                 WAL_FRAME_OK);
        CHECK_EQ(wal__decode(dec, body, body_len, wal__apply_event, core, &end), WAL_DEC_OK);
        off += rec_len;
    }
}

/* A key field of a version 4 file (packed hex, no suffix byte) reads as it
 * was written; the same bytes are short of the suffix byte at version 5. */
TEST(packed_keys_of_version_4_files_read_back_and_version_5_adds_the_suffix)
{
    /* RESERVE, pool 0, page 1, no deadline, key: 2 packed bytes "abcd" */
    static const uint8_t v4[] = {WAL_REC_RESERVE, 0, 1, 0, 2 << 1 | 1, 0xab, 0xcd};
    static const uint8_t v5[] = {WAL_REC_RESERVE, 0, 1, 0, 2 << 1 | 1, 0xab, 0xcd, 2, '-', 'k'};
    static const uint8_t init[] = {WAL_REC_POOL_INIT, 0, 0, 8, 2, 'k', 'v'};
    for (uint32_t version = 4; version <= 5; version++) {
        wal_decoder dec;
        wal__dec_init(&dec);
        dec.version = version;
        randops_events got = {0};
        uint64_t end = 0;
        CHECK_EQ(wal__decode(&dec, init, sizeof init, collect, &got, &end), WAL_DEC_OK);
        CHECK_EQ(wal__decode(&dec, v4, sizeof v4, collect, &got, &end),
                 version == 4 ? WAL_DEC_OK : WAL_DEC_MALFORMED);
        CHECK_EQ(wal__decode(&dec, v5, sizeof v5, collect, &got, &end),
                 version == 5 ? WAL_DEC_OK : WAL_DEC_MALFORMED);
        CHECK_EQ(got.len, 2);
        CHECK(hf_slice_eq(got.items[1].ev.key,
                          version == 4 ? HF_SLICE_LIT("abcd") : HF_SLICE_LIT("abcd-k")));
        randops_events_free(&got);
        wal__dec_free(&dec);
    }
}

/* A core whose events go to enc, a new encoder with time_base. */
static core_t *logged_core(wal_encoder *enc, int64_t time_base)
{
    core_t *core = core_new(cfg());
    wal__enc_init(enc, time_base);
    core_set_observer(core, wal__enc_event, enc);
    return core;
}

TEST(reads_write_nothing_to_the_log)
{
    wal_encoder enc;
    core_t *core = logged_core(&enc, 1000);
    for (uint32_t r = 0; r < 4; r++)
        core_pool_init(core, HF_SLICE_LIT("kv"), r, 256, NULL);
    char names[128][65];
    hf_slice batch[128];
    int64_t pages[128];
    bool present[128];
    for (int i = 0; i < 128; i++) {
        for (int j = 0; j < 64; j++)
            names[i][j] = "0123456789abcdef"[(i * 31 + j * 7 + j / 5) % 16];
        names[i][64] = '\0';
        batch[i] = hf_slice_from_cstr(names[i]);
    }
    for (uint32_t r = 0; r < 4; r++) {
        core_pool_t *pool = core_pool_find(core, HF_SLICE_LIT("kv"), r);
        core_allocate(pool, batch, 128, CORE_ALLOC_PARTIAL, 2000, pages, NULL);
        core_confirm(pool, batch, pages, 128, NULL, 0, 2000, NULL);
    }
    wal__enc_flush(&enc);
    CHECK(enc.out.len > 0);
    enc.out.len = 0;
    uint64_t records = enc.records;
    /* every read of both dialects, and an SGLang allocation that only hits */
    core_pool_t *pool = core_pool_find(core, HF_SLICE_LIT("kv"), 1);
    core_complete_exists(core, HF_SLICE_LIT("kv"), batch, 128, 3000, present);
    CHECK(core_complete_locations(core, HF_SLICE_LIT("kv"), 2, batch, 128, 3001, pages) == 0);
    core_exists(pool, batch, 128, 3002, present);
    core_lookup(pool, batch, 128, 3003, pages);
    core_allocate(pool, batch, 128, CORE_ALLOC_PARTIAL, 3004, pages, NULL);
    wal__enc_flush(&enc);
    CHECK_EQ(enc.records, records);
    CHECK_EQ(enc.out.len, 0);
    core_free(core);
    wal__enc_free(&enc);
}

/* USE (type 7) and DEMOTE (type 8) records, as versions 1 to 3 wrote them
 * (this build writes none), are read: they must name OWNED pages of known
 * pools, and then change nothing. */
TEST(use_and_demote_records_of_older_versions_are_checked_and_ignored)
{
    wal_encoder enc;
    core_t *live = logged_core(&enc, 1000);
    core_pool_init(live, HF_SLICE_LIT("kv"), 0, 8, NULL);
    core_pool_t *pool = core_pool_find(live, HF_SLICE_LIT("kv"), 0);
    hf_slice k = HF_SLICE_LIT("key");
    int64_t page;
    core_allocate(pool, &k, 1, CORE_ALLOC_PARTIAL, 2000, &page, NULL);
    core_confirm(pool, &k, &page, 1, NULL, 0, 2000, NULL);
    CHECK_EQ(page, 0);
    wal__enc_flush(&enc);

    core_t *replayed = core_new(cfg());
    wal_decoder dec;
    wal__dec_init(&dec);
    dec.time_base = enc.time_base;
    replay_records(&dec, &enc.out, enc.salt, replayed);
    /* USE of pool 0: deadline 5 ms after the time base, pages 0 and 0 */
    static const uint8_t use_owned[] = {WAL_REC_USE, 0, 11, 2, 0, 0};
    static const uint8_t demote_owned[] = {WAL_REC_DEMOTE, 0, 0};
    static const uint8_t use_free[] = {WAL_REC_USE, 0, 0, 1, 3};
    static const uint8_t demote_free[] = {WAL_REC_DEMOTE, 0, 3};
    static const uint8_t use_no_pool[] = {WAL_REC_USE, 9, 0, 1, 0};
    uint64_t end = 0;
    CHECK_EQ(wal__decode(&dec, use_owned, sizeof use_owned, wal__apply_event, replayed, &end),
             WAL_DEC_OK);
    CHECK_EQ(wal__decode(&dec, demote_owned, sizeof demote_owned, wal__apply_event, replayed, &end),
             WAL_DEC_OK);
    CHECK_EQ(wal__decode(&dec, use_free, sizeof use_free, wal__apply_event, replayed, &end),
             WAL_DEC_REFUSED);
    CHECK_EQ(wal__decode(&dec, demote_free, sizeof demote_free, wal__apply_event, replayed, &end),
             WAL_DEC_REFUSED);
    CHECK_EQ(wal__decode(&dec, use_no_pool, sizeof use_no_pool, wal__apply_event, replayed, &end),
             WAL_DEC_REFUSED);
    core_apply_finish(replayed);
    expect_same_state(live, replayed, "after old USE and DEMOTE records");
    core_pool_t *rp = core_pool_find(replayed, HF_SLICE_LIT("kv"), 0);
    int64_t deadline = -1;
    CHECK_EQ(core_page_get(rp, 0, NULL, NULL, &deadline), CORE_PAGE_OWNED);
    CHECK_EQ(deadline, 0); /* the old read lease was not applied */
    core_free(live);
    core_free(replayed);
    wal__enc_free(&enc);
    wal__dec_free(&dec);
}

/* The encoder as the store uses it: events of an operation, then a flush. */
TEST(replaying_the_encoded_log_or_a_snapshot_plus_its_tail_rebuilds_the_state)
{
    wal_encoder enc;
    core_t *live = logged_core(&enc, 1700000000000);
    enc.salt = 99;
    int64_t now = 1700000000000;
    hf_buf snapshot = {0};
    size_t snapshot_at = 0;
    for (int step = 1; step <= 6000; step++) {
        now += pick(4) ? pick(40) : pick(4000);
        random_op(live, now);
        wal__enc_flush(&enc);
        if (step % 1000 != 0)
            continue;
        /* (a) the whole log */
        core_t *copy = core_new(cfg());
        wal_decoder dec;
        wal__dec_init(&dec);
        dec.time_base = enc.time_base;
        replay_records(&dec, &enc.out, 99, copy);
        core_apply_finish(copy);
        expect_same_state(live, copy, "replay of the whole log");
        core_free(copy);
        /* (b) the previous snapshot plus the log since */
        if (snapshot.len) {
            copy = core_new(cfg());
            wal__dec_free(&dec);
            wal__dec_init(&dec);
            dec.time_base = enc.time_base;
            uint64_t end = 0;
            int last = WAL_DEC_OK;
            for (size_t off = 0; off < snapshot.len;) {
                size_t rec_len, body_len;
                const uint8_t *body;
                CHECK_EQ(wal__frame(snapshot.ptr + off, snapshot.len - off, 7, &rec_len, &body,
                                    &body_len),
                         WAL_FRAME_OK);
                last = wal__decode(&dec, body, body_len, wal__apply_event, copy, &end);
                CHECK(last == WAL_DEC_OK || last == WAL_DEC_END);
                off += rec_len;
            }
            CHECK_EQ(last, WAL_DEC_END);
            for (size_t off = snapshot_at; off < enc.out.len;) {
                size_t rec_len, body_len;
                const uint8_t *body;
                CHECK_EQ(wal__frame(enc.out.ptr + off, enc.out.len - off, 99, &rec_len, &body,
                                    &body_len),
                         WAL_FRAME_OK);
                CHECK_EQ(wal__decode(&dec, body, body_len, wal__apply_event, copy, &end),
                         WAL_DEC_OK);
                off += rec_len;
            }
            core_apply_finish(copy);
            expect_same_state(live, copy, "snapshot plus log tail");
            core_free(copy);
        }
        wal__dec_free(&dec);
        /* A snapshot now, with the live pool ids, as the fork child writes it. */
        wal_encoder snap;
        wal__enc_init(&snap, enc.time_base);
        snap.salt = 7;
        snap.snapshot = true;
        wal__pools_copy(&snap.pools, &enc.pools);
        core_walk_state(live, wal__enc_event, &snap);
        wal__enc_flush(&snap);
        wal__enc_end(&snap);
        hf_buf_free(&snapshot);
        snapshot = snap.out;
        snap.out = (hf_buf){0};
        wal__enc_free(&snap);
        snapshot_at = enc.out.len;
    }
    hf_buf_free(&snapshot);
    core_free(live);
    wal__enc_free(&enc);
}

/* ------------------------------------------------------ directory helpers */

static char tmp_root[256];

static void rm_tree(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *de;
    char sub[512];
    while ((de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        snprintf(sub, sizeof sub, "%s/%s", path, de->d_name);
        struct stat st;
        if (lstat(sub, &st) == 0 && S_ISDIR(st.st_mode))
            rm_tree(sub);
        else
            unlink(sub);
    }
    closedir(d);
    rmdir(path);
}

static void new_dir(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", tmp_root, name);
    rm_tree(out);
}

static void copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    char buf[65536];
    ssize_t n;
    while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof buf)) > 0)
        if (write(out, buf, (size_t)n) != n)
            break;
    close(in);
    close(out);
}

static void copy_dir(const char *from, const char *to)
{
    rm_tree(to);
    mkdir(to, 0755);
    DIR *d = opendir(from);
    struct dirent *de;
    char a[512], b[512];
    while (d && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        snprintf(a, sizeof a, "%s/%s", from, de->d_name);
        snprintf(b, sizeof b, "%s/%s", to, de->d_name);
        copy_file(a, b);
    }
    if (d)
        closedir(d);
}

static size_t count_files(const char *dir, const char *suffix)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    size_t n = 0, ls = strlen(suffix);
    while (d && (de = readdir(d)) != NULL) {
        size_t l = strlen(de->d_name);
        n += l >= ls && !strcmp(de->d_name + l - ls, suffix);
    }
    if (d)
        closedir(d);
    return n;
}

/* The path of the newest (highest numbered) log segment of dir. */
static void last_segment(const char *dir, char *out, size_t len)
{
    DIR *d = opendir(dir);
    struct dirent *de;
    char best[WAL_NAME_MAX] = "";
    while (d && (de = readdir(d)) != NULL)
        if (!strncmp(de->d_name, "log-", 4) && strlen(de->d_name) == 24 &&
            strcmp(de->d_name, best) > 0)
            snprintf(best, sizeof best, "%.*s", (int)sizeof best - 1, de->d_name);
    if (d)
        closedir(d);
    snprintf(out, len, "%s/%s", dir, best);
}

static size_t file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (size_t)st.st_size : 0;
}

/* core_walk_state into another core: a copy of the state. */
static void apply_to(void *ctx, const core_event *ev)
{
    if (core_apply(ctx, ev) != 0)
        TEST_FAIL("copying a state: event type %d refused", ev->type);
}

static core_t *copy_state(const core_t *from)
{
    core_t *copy = core_new(cfg());
    core_walk_state(from, apply_to, copy);
    core_apply_finish(copy);
    return copy;
}

/* A store in miniature: a core behind a mutex, with its log. */
typedef struct mini {
    pthread_mutex_t lock;
    core_t *core;
    wal_t *wal;
} mini;

static void mini_lock(void *ctx)
{
    pthread_mutex_lock(&((mini *)ctx)->lock);
}

static void mini_unlock(void *ctx)
{
    pthread_mutex_unlock(&((mini *)ctx)->lock);
}

static int mini_open(mini *m, const char *dir, const wal_options *extra)
{
    wal_options opt = {.dir = dir, .fsync = WAL_FSYNC_ALWAYS, .quiet = true};
    if (extra) {
        opt = *extra;
        opt.dir = dir;
    }
    pthread_mutex_init(&m->lock, NULL);
    m->core = core_new(cfg());
    m->wal = NULL;
    char err[1024];
    wal_host host = {mini_lock, mini_unlock, m, NULL};
    int rc = wal_open(&opt, m->core, &host, &m->wal, err, sizeof err);
    if (rc != 0 && getenv("TEST_WAL_VERBOSE"))
        printf("  wal_open: %s\n", err);
    return rc;
}

/* What mini_open made, without a log: the open was refused. */
static void mini_free(mini *m)
{
    core_free(m->core);
    pthread_mutex_destroy(&m->lock);
}

static void mini_close(mini *m, bool final_snapshot)
{
    wal_close(m->wal, final_snapshot);
    mini_free(m);
}

/* Opening the log in dir is refused with the code want. */
static void expect_open_refused(const char *dir, int want)
{
    mini m;
    int rc = mini_open(&m, dir, NULL);
    if (rc == 0)
        mini_close(&m, false);
    else
        mini_free(&m);
    CHECK_EQ(rc, want);
}

/* Run n random operations; each change waits for the log. Returns how many
 * changes were refused. */
static int mini_work(mini *m, int n, int64_t *now)
{
    int refused = 0;
    for (int i = 0; i < n; i++) {
        *now += pick(30);
        pthread_mutex_lock(&m->lock);
        bool refusing = wal_refusing(m->wal);
        if (!refusing)
            random_op(m->core, *now);
        uint64_t lsn = wal_publish(m->wal, true);
        pthread_mutex_unlock(&m->lock);
        if (refusing || wal_wait(m->wal, lsn) != WAL_OK)
            refused++;
    }
    return refused;
}

/* A log of `ops` operations in dir (fresh), closed without a final snapshot;
 * returns the state it describes. */
static core_t *build_log(const char *dir, int ops)
{
    mini m;
    CHECK_EQ(mini_open(&m, dir, NULL), 0);
    int64_t now = 1700000000000;
    CHECK_EQ(mini_work(&m, ops, &now), 0);
    core_t *expected = copy_state(m.core);
    mini_close(&m, false);
    return expected;
}

/* Record boundaries of a segment file (offsets of record starts, and its end). */
static size_t boundaries(const char *path, size_t *out, size_t max)
{
    int fd = open(path, O_RDONLY);
    size_t len = file_size(path), n = 0;
    uint8_t *p = malloc(len ? len : 1);
    if (read(fd, p, len) != (ssize_t)len)
        len = 0;
    close(fd);
    wal_file_header h;
    if (wal__header_decode(p, len, &h) != WAL_HDR_OK) {
        free(p);
        return 0;
    }
    size_t off = WAL_HEADER_SIZE;
    while (off < len && n < max) {
        size_t rec_len, body_len;
        const uint8_t *body;
        if (wal__frame(p + off, len - off, h.salt, &rec_len, &body, &body_len) != WAL_FRAME_OK)
            break;
        out[n++] = off;
        off += rec_len;
    }
    out[n] = off;
    free(p);
    return n;
}

/* The state that the log in dir describes, read by a fresh open (which must
 * succeed); the directory is left as that open left it. */
static core_t *reopen_state(const char *dir, const wal_options *opt)
{
    mini m;
    int rc = mini_open(&m, dir, opt);
    if (rc != 0)
        TEST_FAIL("reopening %s failed: %d (%s)", dir, rc, wal_strerror(rc));
    core_t *copy = copy_state(m.core);
    mini_close(&m, false);
    return copy;
}

/* The state after the records of segment `seg` before byte keep_bytes (of a
 * log that began empty in that one segment). */
static core_t *state_after_records(const char *seg, size_t keep_bytes)
{
    int fd = open(seg, O_RDONLY);
    size_t len = file_size(seg);
    uint8_t *p = malloc(len);
    if (read(fd, p, len) != (ssize_t)len)
        TEST_FAIL("cannot read %s", seg);
    close(fd);
    wal_file_header h;
    CHECK_EQ(wal__header_decode(p, len, &h), WAL_HDR_OK);
    core_t *core = core_new(cfg());
    wal_decoder dec;
    wal__dec_init(&dec);
    dec.time_base = h.time_base;
    for (size_t off = WAL_HEADER_SIZE; off < keep_bytes;) {
        size_t rec_len, body_len;
        const uint8_t *body;
        uint64_t end;
        CHECK_EQ(wal__frame(p + off, len - off, h.salt, &rec_len, &body, &body_len), WAL_FRAME_OK);
        CHECK_EQ(wal__decode(&dec, body, body_len, wal__apply_event, core, &end), WAL_DEC_OK);
        off += rec_len;
    }
    core_apply_finish(core);
    wal__dec_free(&dec);
    free(p);
    return core;
}

/* ------------------------------------------------------ directory tests */

/* The byte at offset at of path, xor bits. */
static void flip(const char *path, size_t at, uint8_t bits)
{
    int fd = open(path, O_RDWR);
    uint8_t byte;
    if (pread(fd, &byte, 1, (off_t)at) != 1)
        TEST_FAIL("cannot read %s", path);
    byte ^= bits;
    if (pwrite(fd, &byte, 1, (off_t)at) != 1)
        TEST_FAIL("cannot write %s", path);
    close(fd);
}

/* A log directory of the tests and its newest segment. */
typedef struct test_log {
    char dir[300], seg[600];
} test_log;

/* A log of ops operations in a new directory named name (build_log);
 * returns the state it describes. */
static core_t *new_log(test_log *l, const char *name, int ops)
{
    new_dir(l->dir, sizeof l->dir, name);
    core_t *state = build_log(l->dir, ops);
    last_segment(l->dir, l->seg, sizeof l->seg);
    return state;
}

TEST(a_restart_with_or_without_a_final_snapshot_restores_the_exact_state)
{
    char dir[300];
    new_dir(dir, sizeof dir, "restart");
    core_t *expected = build_log(dir, 1500);
    CHECK_EQ(count_files(dir, ".wal"), 1);
    core_t *got = reopen_state(dir, NULL); /* from the log */
    expect_same_state(expected, got, "log replay");
    core_free(got);
    mini m;
    CHECK_EQ(mini_open(&m, dir, NULL), 0);
    mini_close(&m, true); /* final snapshot: one file left */
    CHECK_EQ(count_files(dir, ".wal"), 0);
    CHECK_EQ(count_files(dir, ".snap"), 1);
    got = reopen_state(dir, NULL);
    expect_same_state(expected, got, "final snapshot");
    core_free(got);
    core_free(expected);
    rm_tree(dir);
}

TEST(a_torn_tail_at_every_byte_offset_of_the_last_records_is_cut_exactly)
{
    test_log l;
    char work[300], wseg[600];
    core_free(new_log(&l, "torn", 300));
    new_dir(work, sizeof work, "torn-work");
    size_t starts[20000];
    size_t n = boundaries(l.seg, starts, 19999);
    CHECK(n > 12);
    size_t first = starts[n - 8], end = starts[n];
    int cuts = 0;
    for (size_t cut = first; cut < end; cut++) {
        copy_dir(l.dir, work);
        snprintf(wseg, sizeof wseg, "%s/%s", work, l.seg + strlen(l.dir) + 1);
        CHECK_EQ(truncate(wseg, (off_t)cut), 0);
        size_t keep = 0; /* the last record boundary at or before cut */
        for (size_t i = 0; i <= n && starts[i] <= cut; i++)
            keep = starts[i];
        core_t *expected = state_after_records(l.seg, keep);
        core_t *got = reopen_state(work, NULL);
        expect_same_state(expected, got, "after a torn tail");
        core_free(expected);
        core_free(got);
        CHECK_EQ(file_size(wseg), keep);
        cuts += keep != cut;
    }
    CHECK(cuts > 0);
    /* One flipped bit anywhere in the last record: that record is cut. */
    size_t last = starts[n - 1];
    core_t *expected = state_after_records(l.seg, last);
    for (size_t at = last; at < end; at++) {
        copy_dir(l.dir, work);
        snprintf(wseg, sizeof wseg, "%s/%s", work, l.seg + strlen(l.dir) + 1);
        flip(wseg, at, (uint8_t)(1u << (at % 8)));
        core_t *got = reopen_state(work, NULL);
        expect_same_state(expected, got, "after a flipped byte in the last record");
        core_free(got);
        CHECK_EQ(file_size(wseg), last);
    }
    core_free(expected);
    rm_tree(work);
    rm_tree(l.dir);
}

TEST(damage_before_the_tail_is_refused_without_salvage_and_salvaged_with_it)
{
    test_log l;
    core_t *full = new_log(&l, "damage", 400);
    size_t starts[20000];
    size_t n = boundaries(l.seg, starts, 19999);
    flip(l.seg, starts[n / 2] + 2, 0x40);
    size_t size = file_size(l.seg);
    expect_open_refused(l.dir, WAL_EDAMAGED);
    CHECK_EQ(file_size(l.seg), size); /* nothing was cut or changed */
    CHECK_EQ(count_files(l.dir, ".wal"), 1);

    wal_options salvage = {.fsync = WAL_FSYNC_ALWAYS, .salvage = true, .quiet = true};
    core_t *got = reopen_state(l.dir, &salvage);
    char err[256];
    CHECK_EQ(core_check(got, err, sizeof err), 0);
    CHECK_EQ(count_files(l.dir, ".damaged"), 1);
    core_t *again = reopen_state(l.dir, NULL); /* no --salvage needed any more */
    expect_same_state(got, again, "restart after a salvage");
    core_free(again);
    core_free(got);
    core_free(full);
    rm_tree(l.dir);
}

TEST(a_damaged_tail_in_a_segment_that_is_not_the_last_is_refused)
{
    test_log l;
    core_free(new_log(&l, "older", 200));
    core_free(reopen_state(l.dir, NULL)); /* begins segment 2 */
    mini m;
    CHECK_EQ(mini_open(&m, l.dir, NULL), 0);
    int64_t now = 1700000100000;
    CHECK_EQ(mini_work(&m, 50, &now), 0);
    mini_close(&m, false);
    CHECK(count_files(l.dir, ".wal") >= 2);
    CHECK_EQ(truncate(l.seg, (off_t)(file_size(l.seg) - 3)), 0);
    expect_open_refused(l.dir, WAL_EDAMAGED);
    rm_tree(l.dir);
}

TEST(a_background_snapshot_plus_the_log_after_it_equals_the_live_state)
{
    char dir[300];
    new_dir(dir, sizeof dir, "snapshot");
    mini m;
    wal_options opt = {.fsync = WAL_FSYNC_EVERYSEC, .snapshot_log_bytes = 4096, .quiet = true};
    CHECK_EQ(mini_open(&m, dir, &opt), 0);
    int64_t now = 1700000000000;
    wal_stats st;
    for (int round = 0; round < 200; round++) {
        CHECK_EQ(mini_work(&m, 20, &now), 0);
        wal_get_stats(m.wal, &st);
        if (st.snapshots >= 2)
            break;
        usleep(20000);
    }
    CHECK(st.snapshots >= 2);
    CHECK_EQ(mini_work(&m, 100, &now), 0);
    pthread_mutex_lock(&m.lock);
    core_t *live = copy_state(m.core);
    pthread_mutex_unlock(&m.lock);
    mini_close(&m, false);
    CHECK(count_files(dir, ".snap") >= 1);
    core_t *got = reopen_state(dir, NULL);
    expect_same_state(live, got, "snapshot plus log");
    core_free(got);
    core_free(live);
    rm_tree(dir);
}

TEST(a_foreign_or_newer_data_directory_is_refused_and_left_alone)
{
    char dir[300], path[600];
    new_dir(dir, sizeof dir, "foreign");
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/dump.rdb", dir);
    copy_file("/dev/null", path);
    expect_open_refused(dir, WAL_EFOREIGN);
    CHECK_EQ(count_files(dir, ""), 3); /* ., .., dump.rdb: nothing created */
    unlink(path);

    /* one of our names, but not our magic number */
    snprintf(path, sizeof path, "%s/snapshot-0000000000000001.snap", dir);
    int fd = open(path, O_WRONLY | O_CREAT, 0644);
    CHECK_EQ(write(fd, "{\"not\": \"a snapshot of ours, but long enough to have a header\"}", 64),
             64);
    close(fd);
    expect_open_refused(dir, WAL_EFOREIGN);
    rm_tree(dir);

    /* a newer format version */
    core_t *state = build_log(dir, 10);
    core_free(state);
    char seg[600];
    last_segment(dir, seg, sizeof seg);
    fd = open(seg, O_RDWR);
    uint8_t hdr[WAL_HEADER_SIZE];
    CHECK_EQ(pread(fd, hdr, sizeof hdr, 0), (ssize_t)sizeof hdr);
    wal_file_header h;
    CHECK_EQ(wal__header_decode(hdr, sizeof hdr, &h), WAL_HDR_OK);
    h.version = WAL_VERSION + 1;
    wal__header_encode(&h, hdr);
    CHECK_EQ(pwrite(fd, hdr, sizeof hdr, 0), (ssize_t)sizeof hdr);
    close(fd);
    expect_open_refused(dir, WAL_EFOREIGN);
    rm_tree(dir);
}

TEST(a_second_process_cannot_use_a_directory_in_use)
{
    char dir[300];
    new_dir(dir, sizeof dir, "locked");
    mini m;
    CHECK_EQ(mini_open(&m, dir, NULL), 0);
    pid_t pid = fork();
    if (pid == 0) {
        mini other;
        _exit(mini_open(&other, dir, NULL) == WAL_ELOCKED ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    mini_close(&m, false);
    rm_tree(dir);
}

TEST(a_failing_disk_refuses_changes_then_recovers_and_keeps_them)
{
    char dir[300], full[400];
    new_dir(dir, sizeof dir, "fault");
    snprintf(full, sizeof full, "%s-full", dir);
    unlink(full);
    char spec[600];
    snprintf(spec, sizeof spec, "while-exists=%s,write-fail-after=0,snapshot-fail", full);
    CHECK_EQ(fault_set(spec), 0);
    mini m;
    CHECK_EQ(mini_open(&m, dir, NULL), 0);
    int64_t now = 1700000000000;
    CHECK_EQ(mini_work(&m, 200, &now), 0);
    close(open(full, O_WRONLY | O_CREAT, 0644)); /* the disk is full */
    /* The first change that writes a record fails (one that logs nothing,
     * like a lookup of missing keys, has nothing to fail)... */
    for (int i = 0; i < 500 && mini_work(&m, 1, &now) == 0; i++)
        ;
    CHECK(wal_refusing(m.wal));
    CHECK_EQ(mini_work(&m, 20, &now), 20); /* ...and every change after it is refused */
    usleep(1200000);                       /* repairs fail while the disk is full */
    CHECK(wal_refusing(m.wal));
    unlink(full); /* the disk recovers */
    for (int i = 0; i < 200 && wal_refusing(m.wal); i++)
        usleep(50000);
    CHECK(!wal_refusing(m.wal));
    CHECK_EQ(mini_work(&m, 100, &now), 0);
    pthread_mutex_lock(&m.lock);
    core_t *live = copy_state(m.core);
    pthread_mutex_unlock(&m.lock);
    mini_close(&m, false);
    fault_set(NULL);
    core_t *got = reopen_state(dir, NULL);
    expect_same_state(live, got, "after the disk recovered");
    core_free(got);
    core_free(live);
    rm_tree(dir);
}

int main(void)
{
    /* The log's messages (salvage, injected faults) are expected here:
     * silent unless TEST_WAL_VERBOSE is set. */
    log_set_level(getenv("TEST_WAL_VERBOSE") ? LOG_DEBUG : (log_level)-1);
    snprintf(tmp_root, sizeof tmp_root, "%s/hf3fs-test-wal-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmp_root)) {
        perror("mkdtemp");
        return 1;
    }
    make_keys();
    RUN(sync_latencies_fall_in_the_first_bucket_whose_bound_they_do_not_exceed);
    RUN(every_event_type_the_log_writes_round_trips_through_the_record_encoding);
    RUN(packed_keys_of_version_4_files_read_back_and_version_5_adds_the_suffix);
    RUN(reads_write_nothing_to_the_log);
    RUN(use_and_demote_records_of_older_versions_are_checked_and_ignored);
    RUN(replaying_the_encoded_log_or_a_snapshot_plus_its_tail_rebuilds_the_state);
    RUN(a_restart_with_or_without_a_final_snapshot_restores_the_exact_state);
    RUN(a_torn_tail_at_every_byte_offset_of_the_last_records_is_cut_exactly);
    RUN(damage_before_the_tail_is_refused_without_salvage_and_salvaged_with_it);
    RUN(a_damaged_tail_in_a_segment_that_is_not_the_last_is_refused);
    RUN(a_background_snapshot_plus_the_log_after_it_equals_the_live_state);
    RUN(a_foreign_or_newer_data_directory_is_refused_and_left_alone);
    RUN(a_second_process_cannot_use_a_directory_in_use);
    RUN(a_failing_disk_refuses_changes_then_recovers_and_keeps_them);
    rm_tree(tmp_root);
    return TEST_SUMMARY();
}
