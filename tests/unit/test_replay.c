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
#include "randops.h"

static const core_config CFG = RANDOPS_CORE_CONFIG;
static randops_space space;
static randops_rng rng = {0x853c49e6748fea9bull};

/* Writes above all (allocations, deletes, clears) over small pools, so that
 * the log holds every kind of event. */
static const randops_mix MIX = {.pools = {.pages = 1, .span = 8, .reinit_one_in = 50},
                                .writes = {.allocate = 30, .delete = 10, .pool_clear = 2},
                                .reads = {.lookup = 25, .exists = 15, .complete_exists = 16},
                                .one_in = {.clear_all = 10, .release = 5, .unconfirmed = 4}};

static int pick(int n)
{
    return randops_pick(&rng, n);
}

/* Replay events[from..to) on top of `base` (a list of events, may be NULL). */
static core_t *replay(const core_event *base, size_t nbase, const randops_events *log, size_t from)
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
    if (randops_text_differ(randops_text_state(live), randops_text_state(copy), "live", what))
        TEST_FAIL("%s differs from the live state", what);
}

TEST(replaying_the_event_log_or_a_snapshot_plus_its_tail_rebuilds_the_exact_state)
{
    randops_space_init(&space, 20);
    randops_events log = {0}, snapshot = {0};
    size_t snapshot_at = 0;
    core_t *live = core_new(&CFG);
    core_set_observer(live, randops_record, &log);
    int64_t now = 1000000;
    int checkpoints = 0;
    for (int step = 1; step <= 20000; step++) {
        now += pick(4) ? pick(50) : pick(1000);
        randops_step(live, &space, &MIX, &rng, now, false, NULL);
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
        randops_events_free(&snapshot);
        core_walk_state(live, randops_record, &snapshot);
        snapshot_at = log.len;
        checkpoints++;
    }
    CHECK_EQ(checkpoints, 40);
    CHECK(log.len > 10000);
    core_free(live);
    randops_events_free(&log);
    randops_events_free(&snapshot);
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
