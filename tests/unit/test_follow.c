/*
 * test_follow.c: a core followed live (core_apply_live) is its primary.
 *
 * What the Redis module's replicas and AOF rest on: random operations run
 * on core A, whose observer feeds every event to core_apply_live on core B
 * (as HF3FS.APPLY does on a replica). After every step both cores describe
 * the same state (core_walk_state), have the same free stacks
 * (core_pool_free_order: B would hand out the pages A would) and pass
 * core_check. Only the durable state follows (core.h "What is durable"):
 * reads send no event, so B's use counts, demotions and read leases are
 * its own. Now and then the same read runs on both cores independently:
 * B, promoted, answers every key as A does.
 */
#include <stdlib.h>

#include "check.h"
#include "core/core.h"
#include "randops.h"

/* The free stacks of every pool, as text lines after the walk's events. */
typedef struct render_ctx {
    core_t *core;
    randops_text *t;
} render_ctx;

static void text_free_order(void *ctx, hf_slice ns, uint32_t rank, const core_pool_stats *st)
{
    render_ctx *r = ctx;
    const uint32_t *pages;
    size_t n = core_pool_free_order(core_pool_find(r->core, ns, rank), &pages);
    char line[64];
    int len = snprintf(line, sizeof line, "free %.*s %u:", (int)ns.len, ns.ptr, rank);
    randops_text_add(r->t, line, (size_t)len);
    for (size_t i = 0; i < n; i++) {
        len = snprintf(line, sizeof line, " %u", pages[i]);
        randops_text_add(r->t, line, (size_t)len);
    }
    randops_text_add(r->t, "\n", 1);
}

/* A text rendering of a state (walk events, then every free stack). */
static randops_text render(core_t *core)
{
    randops_text t = randops_text_state(core);
    render_ctx r = {core, &t};
    core_foreach_pool(core, 0, text_free_order, &r);
    return t;
}

static const core_config CFG = RANDOPS_CORE_CONFIG;
static randops_space space;
static randops_rng rng = {0x2545f4914f6cdd1dull};

/* Every operation, expiries and the completeness reads too; pools of 0-9
 * pages (0: refused); some confirmations name a wrong page (refused), and
 * some allocations are never confirmed nor released. */
static const randops_mix MIX = {
    .pools = {.pages = 0, .span = 10, .reinit_one_in = 60},
    .writes = {.allocate = 30, .delete = 10, .pool_clear = 2, .pool_expire = 4},
    .reads = {.lookup = 20, .exists = 12, .complete_exists = 12, .complete_locations = 9},
    .one_in = {.clear_all = 1, .release = 8, .wrong_page = 7, .unconfirmed = 6, .skip_confirm = 3}};

static int pick(int n)
{
    return randops_pick(&rng, n);
}

typedef struct follower {
    core_t *core;
    size_t events, refused;
} follower;

static void follow(void *ctx, const core_event *ev)
{
    follower *f = ctx;
    f->events++;
    if (core_apply_live(f->core, ev) != 0)
        f->refused++;
}

static void expect_same(core_t *a, core_t *b, int at)
{
    if (randops_text_differ(render(a), render(b), "primary", "follower"))
        TEST_FAIL("step %d: the follower's state differs from its primary's", at);
    char err[256];
    if (core_check(a, err, sizeof err) != 0)
        TEST_FAIL("step %d: primary breaks the invariant: %s", at, err);
    if (core_check(b, err, sizeof err) != 0)
        TEST_FAIL("step %d: follower breaks the invariant: %s", at, err);
}

TEST(a_core_fed_its_primarys_events_live_keeps_the_same_state_and_free_stacks)
{
    randops_space_init(&space, 24);
    core_t *a = core_new(&CFG),
           *b = core_new(&(core_config){
               .reservation_ms = 1, .max_pages = 1000, .max_ranks = 4, .hash_seed = 99});
    core_set_config(b, &CFG); /* what a promoted replica gets from its callers */
    follower f = {b, 0, 0};
    core_set_observer(a, follow, &f);
    int64_t now = 1000000;
    int independent = 0;
    for (int s = 1; s <= 30000; s++) {
        now += pick(4) ? pick(50) : pick(1000);
        int64_t out_a[RANDOPS_OUT_LEN], out_b[RANDOPS_OUT_LEN];
        if (s % 97 == 0) {
            /* a read (lookup, exists, completeness), on each core from the
             * same draws: the follower answers as its primary would */
            randops_rng again = rng;
            core_set_observer(a, NULL, NULL);
            randops_step(a, &space, &MIX, &rng, now, true, out_a);
            randops_step(b, &space, &MIX, &again, now, true, out_b);
            core_set_observer(a, follow, &f);
            for (int i = 0; i < RANDOPS_OUT_LEN; i++)
                if (out_a[i] != out_b[i])
                    TEST_FAIL("step %d: answer %d: primary %lld, follower %lld", s, i,
                              (long long)out_a[i], (long long)out_b[i]);
            independent++;
        } else {
            randops_step(a, &space, &MIX, &rng, now, false, NULL);
        }
        CHECK_EQ(f.refused, 0);
        expect_same(a, b, s);
    }
    CHECK(f.events > 20000);
    CHECK(independent > 300);
    core_free(a);
    core_free(b);
}

int main(void)
{
    RUN(a_core_fed_its_primarys_events_live_keeps_the_same_state_and_free_stacks);
    return TEST_SUMMARY();
}
