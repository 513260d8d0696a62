/*
 * test_robustness.c: regressions for what the fuzzers and abuse tests found
 * below the HTTP layer (docs/robustness.md, "Findings").
 */
#include <stdlib.h>

#include "api/json.h"
#include "check.h"
#include "core/core.h"

/* Limits below the pool replayed (5,000 pages, rank 100); no leases, no
 * eviction: the tests below are about the limits only. */
static const core_config SMALL = {.max_pages = 1000, .max_ranks = 4, .hash_seed = 3};

/* A restart with a lower --max-pages or --max-ranks than an existing pool
 * must replay that pool, not find the log "damaged" (where --salvage would
 * drop the pool and its keys). Clients still cannot create such pools. */
TEST(replay_keeps_pools_above_the_current_limits)
{
    core_t *core = core_new(&SMALL);
    core_event init = {CORE_EV_POOL_INIT, HF_SLICE_LIT("kv"), 100, 5000, {"", 0}, 0};
    CHECK_EQ(core_apply(core, &init), 0);
    core_event reserve = {CORE_EV_RESERVE, HF_SLICE_LIT("kv"), 100, 4999, HF_SLICE_LIT("k"), 0};
    CHECK_EQ(core_apply(core, &reserve), 0);
    core_event own = {CORE_EV_OWN, HF_SLICE_LIT("kv"), 100, 4999, {"", 0}, 0};
    CHECK_EQ(core_apply(core, &own), 0);
    core_apply_finish(core);
    core_pool_t *pool = core_pool_find(core, HF_SLICE_LIT("kv"), 100);
    CHECK(pool != NULL);
    int64_t page = -1;
    hf_slice key = HF_SLICE_LIT("k");
    core_lookup(pool, &key, 1, 0, &page);
    CHECK_EQ(page, 4999);
    char err[256];
    CHECK_EQ(core_check(core, err, sizeof err), 0);
    /* Outside replay the limits hold. */
    CHECK_EQ(core_pool_init(core, HF_SLICE_LIT("kv"), 101, 10, NULL), CORE_EINVAL);
    CHECK_EQ(core_pool_init(core, HF_SLICE_LIT("kv"), 1, 5000, NULL), CORE_EINVAL);
    core_free(core);
}

/* Replay still refuses what no configuration could have accepted. */
TEST(replay_refuses_pools_beyond_every_limit)
{
    core_t *core = core_new(&SMALL);
    core_event rank = {CORE_EV_POOL_INIT, HF_SLICE_LIT("kv"), CORE_MAX_RANKS_LIMIT, 8, {"", 0}, 0};
    CHECK(core_apply(core, &rank) != 0);
    core_event pages = {
        CORE_EV_POOL_INIT, HF_SLICE_LIT("kv"), 0, CORE_MAX_PAGES_LIMIT + 1, {"", 0}, 0};
    CHECK(core_apply(core, &pages) != 0);
    core_apply_finish(core);
    core_free(core);
}

/* fuzz_json: a json_buf with a maximum below 256 bytes took writes past it
 * (its first allocation was 256 bytes whatever the maximum). */
TEST(json_buf_never_grows_past_a_small_maximum)
{
    for (size_t max = 0; max < 300; max += 7) {
        json_buf buf;
        json_buf_init(&buf, max);
        for (int i = 0; i < 100; i++)
            json_put_lit(&buf, "0123456789");
        CHECK(buf.len <= max);
        CHECK(buf.overflow == (max < 1000));
        json_buf_free(&buf);
    }
}

int main(void)
{
    RUN(replay_keeps_pools_above_the_current_limits);
    RUN(replay_refuses_pools_beyond_every_limit);
    RUN(json_buf_never_grows_past_a_small_maximum);
    return TEST_SUMMARY();
}
