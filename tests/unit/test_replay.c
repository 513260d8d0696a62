/*
 * test_replay.c: the event stream rebuilds the durable state exactly.
 *
 * Random operations run on a core whose observer records every event. At
 * checkpoints, a fresh core replays (a) the whole event log, (b) a snapshot
 * taken by core_walk_state at an earlier checkpoint plus the events logged
 * since; both must describe exactly the same state as the live core (same
 * pools, pages, keys, clock hands, reservations, write leases, drains: the
 * durable state of core.h "What is durable"),
 * compared through core_walk_state, and pass core_check().
 */
#include <stdlib.h>

#include "check.h"
#include "core/core.h"

typedef struct rec_event {
    core_event ev;
    char *ns;
    char *key;
} rec_event;

typedef struct event_log {
    rec_event *items;
    size_t len, cap;
} event_log;

static void log_push(void *ctx, const core_event *ev)
{
    event_log *log = ctx;
    if (log->len == log->cap) {
        log->cap = log->cap ? log->cap * 2 : 1024;
        log->items = realloc(log->items, log->cap * sizeof *log->items);
    }
    rec_event *r = &log->items[log->len++];
    r->ev = *ev;
    r->ns = malloc(ev->ns.len + 1);
    memcpy(r->ns, ev->ns.ptr, ev->ns.len);
    r->key = malloc(ev->key.len + 1);
    memcpy(r->key, ev->key.ptr, ev->key.len);
    r->ev.ns = (hf_slice){r->ns, ev->ns.len};
    r->ev.key = (hf_slice){r->key, ev->key.len};
}

static void log_free(event_log *log)
{
    for (size_t i = 0; i < log->len; i++) {
        free(log->items[i].ns);
        free(log->items[i].key);
    }
    free(log->items);
    memset(log, 0, sizeof *log);
}

/* A text rendering of a state, through core_walk_state. */
typedef struct text {
    char *buf;
    size_t len, cap;
} text;

static void text_event(void *ctx, const core_event *ev)
{
    text *t = ctx;
    char line[1200];
    int n = snprintf(line, sizeof line, "%d %.*s %u %llu %.*s %lld\n", ev->type, (int)ev->ns.len,
                     ev->ns.ptr, ev->rank, (unsigned long long)ev->page, (int)ev->key.len,
                     ev->key.ptr, (long long)ev->deadline);
    if (t->len + (size_t)n + 1 > t->cap) {
        t->cap = (t->len + (size_t)n + 1) * 2;
        t->buf = realloc(t->buf, t->cap);
    }
    memcpy(t->buf + t->len, line, (size_t)n + 1);
    t->len += (size_t)n;
}

static text render(const core_t *core)
{
    text t = {NULL, 0, 0};
    text_event(&t, &(core_event){0, {"", 0}, 0, 0, {"", 0}, 0});
    core_walk_state(core, text_event, &t);
    return t;
}

static const core_config CFG = {.reservation_ms = 900, .read_lease_ms = 400, .evict = true,
                                .max_pages = 1000, .max_ranks = 4, .hash_seed = 7,
                                .write_lease_ms = 700, .release_grace_ms = 300};
static const hf_slice NS[2] = {HF_SLICE_LIT("kv"), HF_SLICE_LIT("other")};
static char names[20][80];
static hf_slice keys[20];
static uint64_t rng = 0x853c49e6748fea9bull;

static int pick(int n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (int)(rng % (uint64_t)n);
}

static void random_step(core_t *core, int64_t now)
{
    hf_slice ns = NS[pick(2)];
    uint32_t rank = (uint32_t)pick(3);
    core_pool_t *pool = core_pool_find(core, ns, rank);
    if (!pool || pick(50) == 0) {
        core_pool_init(core, ns, rank, (uint64_t)(1 + pick(8)), NULL);
        return;
    }
    hf_slice batch[4];
    int64_t pages[4];
    bool flags[4];
    int n = 1 + pick(4);
    for (int i = 0; i < n; i++)
        batch[i] = keys[pick(20)];
    int op = pick(100);
    if (op < 30) {
        core_allocate(pool, batch, (size_t)n, pick(2) ? CORE_ALLOC_PARTIAL : CORE_ALLOC_ALL_OR_NOTHING,
                      now, pages, flags);
        /* confirm most, release some */
        int64_t release[4];
        size_t nrel = 0, nconf = 0;
        hf_slice ck[4];
        int64_t cp[4];
        for (int i = 0; i < n; i++) {
            if (pages[i] < 0)
                continue;
            if (pick(5) == 0)
                release[nrel++] = pages[i];
            else if (pick(4)) {
                ck[nconf] = batch[i];
                cp[nconf++] = pages[i];
            }
        }
        core_confirm(pool, ck, cp, nconf, release, nrel, now, NULL);
    } else if (op < 55) {
        core_lookup(pool, batch, (size_t)n, now, pages);
    } else if (op < 70) {
        core_exists(pool, batch, (size_t)n, now, flags);
    } else if (op < 80) {
        core_delete(pool, batch, (size_t)n, now);
    } else if (op < 82) {
        core_pool_clear(pool, now);
    } else if (op < 98) {
        core_complete_exists(core, ns, batch, (size_t)n, now, flags);
    } else if (pick(10) == 0) {
        core_clear_all(core);
    }
}

/* Replay events[from..to) on top of `base` (a list of events, may be NULL). */
static core_t *replay(const core_event *base, size_t nbase, const event_log *log, size_t from)
{
    core_t *copy = core_new(&CFG);
    for (size_t i = 0; i < nbase; i++)
        if (core_apply(copy, &base[i]) != 0)
            TEST_FAIL("snapshot event %zu (type %d) refused", i, base[i].type);
    for (size_t i = from; i < log->len; i++)
        if (core_apply(copy, &log->items[i].ev) != 0)
            TEST_FAIL("log event %zu (type %d, page %llu) refused", i, log->items[i].ev.type,
                      (unsigned long long)log->items[i].ev.page);
    core_apply_finish(copy);
    char err[256];
    if (core_check(copy, err, sizeof err) != 0)
        TEST_FAIL("replayed state breaks the invariant: %s", err);
    return copy;
}

static void expect_same(const core_t *live, const core_t *copy, const char *what)
{
    text a = render(live), b = render(copy);
    int same = a.len == b.len && memcmp(a.buf, b.buf, a.len) == 0;
    if (!same) {
        printf("  live:\n%.2000s\n  %s:\n%.2000s\n", a.buf, what, b.buf);
    }
    free(a.buf);
    free(b.buf);
    if (!same)
        TEST_FAIL("%s differs from the live state", what);
}

TEST(replaying_the_event_log_or_a_snapshot_plus_its_tail_rebuilds_the_exact_state)
{
    for (int i = 0; i < 20; i++) {
        if (i == 0)
            memset(names[i], 'a', 64);
        else if (i == 1)
            memcpy(names[i], "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff", 64);
        else if (i == 2)
            memset(names[i], 'Z', 70);
        else
            snprintf(names[i], sizeof names[i], "k%d", i);
        keys[i] = hf_slice_from_cstr(names[i]);
    }
    event_log log = {0}, snapshot = {0};
    size_t snapshot_at = 0;
    core_t *live = core_new(&CFG);
    core_set_observer(live, log_push, &log);
    int64_t now = 1000000;
    int checkpoints = 0;
    for (int step = 1; step <= 20000; step++) {
        now += pick(4) ? pick(50) : pick(1000);
        random_step(live, now);
        if (step % 500 != 0)
            continue;
        core_t *copy = replay(NULL, 0, &log, 0);
        expect_same(live, copy, "replay of the whole log");
        core_free(copy);
        if (snapshot.len || snapshot_at) {
            core_event *base = malloc((snapshot.len + 1) * sizeof *base);
            for (size_t i = 0; i < snapshot.len; i++)
                base[i] = snapshot.items[i].ev;
            copy = replay(base, snapshot.len, &log, snapshot_at);
            free(base);
            expect_same(live, copy, "snapshot plus log tail");
            core_free(copy);
        }
        log_free(&snapshot);
        core_walk_state(live, log_push, &snapshot);
        snapshot_at = log.len;
        checkpoints++;
    }
    CHECK_EQ(checkpoints, 40);
    CHECK(log.len > 10000);
    core_free(live);
    log_free(&log);
    log_free(&snapshot);
}

TEST(replay_refuses_events_that_do_not_fit_the_state)
{
    core_t *core = core_new(&CFG);
    core_event init = {CORE_EV_POOL_INIT, HF_SLICE_LIT("kv"), 0, 4, {"", 0}, 0};
    CHECK_EQ(core_apply(core, &init), 0);
    CHECK_EQ(core_apply(core, &init), CORE_EINVAL); /* a pool is created once */
    core_event own = {CORE_EV_OWN, HF_SLICE_LIT("kv"), 0, 1, {"", 0}, 0};
    CHECK_EQ(core_apply(core, &own), CORE_EINVAL); /* not reserved */
    core_event reserve = {CORE_EV_RESERVE, HF_SLICE_LIT("kv"), 0, 1, HF_SLICE_LIT("a"), 5};
    CHECK_EQ(core_apply(core, &reserve), 0);
    CHECK_EQ(core_apply(core, &reserve), CORE_EINVAL); /* already reserved */
    CHECK_EQ(core_apply(core, &own), 0);
    reserve.page = 2;
    CHECK_EQ(core_apply(core, &reserve), 0);
    own.page = 2;
    CHECK_EQ(core_apply(core, &own), CORE_EINVAL); /* "a" would own two pages */
    reserve.page = 4;
    CHECK_EQ(core_apply(core, &reserve), CORE_EINVAL); /* out of range */
    core_event other = {CORE_EV_FREE, HF_SLICE_LIT("nope"), 0, 0, {"", 0}, 0};
    CHECK_EQ(core_apply(core, &other), CORE_EINVAL); /* unknown pool */
    core_apply_finish(core);
    char err[256];
    CHECK_EQ(core_check(core, err, sizeof err), 0);
    core_free(core);
}

int main(void)
{
    RUN(replaying_the_event_log_or_a_snapshot_plus_its_tail_rebuilds_the_exact_state);
    RUN(replay_refuses_events_that_do_not_fit_the_state);
    return TEST_SUMMARY();
}
