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

/* A text rendering of a state (walk events, then every free stack). */
typedef struct text {
    char *buf;
    size_t len, cap;
} text;

static void text_add(text *t, const char *line, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        t->cap = (t->len + n + 1) * 2;
        t->buf = realloc(t->buf, t->cap);
    }
    memcpy(t->buf + t->len, line, n);
    t->len += n;
    t->buf[t->len] = 0;
}

static void text_event(void *ctx, const core_event *ev)
{
    char line[1200];
    int n = snprintf(line, sizeof line, "%d %.*s %u %llu %.*s %lld\n", ev->type, (int)ev->ns.len,
                     ev->ns.ptr, ev->rank, (unsigned long long)ev->page, (int)ev->key.len,
                     ev->key.ptr, (long long)ev->deadline);
    text_add(ctx, line, (size_t)n);
}

typedef struct render_ctx {
    core_t *core;
    text *t;
} render_ctx;

static void text_free_order(void *ctx, hf_slice ns, uint32_t rank, const core_pool_stats *st)
{
    render_ctx *r = ctx;
    const uint32_t *pages;
    size_t n = core_pool_free_order(core_pool_find(r->core, ns, rank), &pages);
    char line[64];
    int len = snprintf(line, sizeof line, "free %.*s %u:", (int)ns.len, ns.ptr, rank);
    text_add(r->t, line, (size_t)len);
    for (size_t i = 0; i < n; i++) {
        len = snprintf(line, sizeof line, " %u", pages[i]);
        text_add(r->t, line, (size_t)len);
    }
    text_add(r->t, "\n", 1);
}

static text render(core_t *core)
{
    text t = {NULL, 0, 0};
    text_add(&t, "", 0);
    core_walk_state(core, text_event, &t);
    render_ctx r = {core, &t};
    core_foreach_pool(core, 0, text_free_order, &r);
    return t;
}

static const core_config CFG = {.reservation_ms = 900, .read_lease_ms = 400, .evict = true,
                                .max_pages = 1000, .max_ranks = 4, .hash_seed = 7,
                                .write_lease_ms = 700, .release_grace_ms = 300};
static const hf_slice NS[2] = {HF_SLICE_LIT("kv"), HF_SLICE_LIT("other")};
static char names[24][80];
static hf_slice keys[24];
static uint64_t rng = 0x2545f4914f6cdd1dull;

static int pick(int n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (int)(rng % (uint64_t)n);
}

/* One random operation, chosen by the numbers in r[] (so that two cores can
 * be given the same one); its answers are written into out[] for
 * comparison. */
static void step(core_t *core, const int *r, int64_t now, int64_t *out)
{
    hf_slice ns = NS[r[0] % 2];
    uint32_t rank = (uint32_t)(r[1] % 3);
    core_pool_t *pool = core_pool_find(core, ns, rank);
    memset(out, 0, 16 * sizeof *out);
    if (!pool || r[2] % 60 == 0) {
        core_pool_init(core, ns, rank, (uint64_t)(r[3] % 10), NULL);
        return;
    }
    hf_slice batch[4];
    int64_t pages[4];
    bool flags[4];
    int n = 1 + r[4] % 4;
    for (int i = 0; i < n; i++)
        batch[i] = keys[r[5 + i] % 24];
    int op = r[9] % 100;
    if (op < 30) {
        core_allocate(pool, batch, (size_t)n, r[10] % 2 ? CORE_ALLOC_PARTIAL : CORE_ALLOC_ALL_OR_NOTHING,
                      now, pages, flags);
        int64_t release[4];
        size_t nrel = 0, nconf = 0, refused = 0;
        hf_slice ck[4];
        int64_t cp[4];
        for (int i = 0; i < n; i++) {
            out[i] = pages[i];
            out[4 + i] = flags[i];
            if (pages[i] < 0)
                continue;
            int what = (r[11] >> (2 * i)) & 7;
            if (what == 0)
                release[nrel++] = pages[i];
            else if (what != 1) {
                ck[nconf] = batch[i];
                cp[nconf++] = what == 2 ? pages[i] + 1 : pages[i]; /* some refused */
            }
        }
        if (r[12] % 3)
            core_confirm(pool, ck, cp, nconf, release, nrel, now, &refused);
        out[8] = (int64_t)refused;
    } else if (op < 50) {
        core_lookup(pool, batch, (size_t)n, now, pages);
        memcpy(out, pages, (size_t)n * sizeof *pages);
    } else if (op < 62) {
        core_exists(pool, batch, (size_t)n, now, flags);
        for (int i = 0; i < n; i++)
            out[i] = flags[i];
    } else if (op < 72) {
        core_delete(pool, batch, (size_t)n, now);
    } else if (op < 74) {
        core_pool_clear(pool, now);
    } else if (op < 78) {
        core_pool_expire(pool, now);
    } else if (op < 90) {
        core_complete_exists(core, ns, batch, (size_t)n, now, flags);
        for (int i = 0; i < n; i++)
            out[i] = flags[i];
    } else if (op < 99) {
        out[15] = core_complete_locations(core, ns, rank, batch, (size_t)n, now, pages);
        memcpy(out, pages, (size_t)n * sizeof *pages);
    } else {
        core_clear_all(core);
    }
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
    text ta = render(a), tb = render(b);
    int same = ta.len == tb.len && memcmp(ta.buf, tb.buf, ta.len) == 0;
    if (!same)
        printf("  primary:\n%.3000s\n  follower:\n%.3000s\n", ta.buf, tb.buf);
    free(ta.buf);
    free(tb.buf);
    if (!same)
        TEST_FAIL("step %d: the follower's state differs from its primary's", at);
    char err[256];
    if (core_check(a, err, sizeof err) != 0)
        TEST_FAIL("step %d: primary breaks the invariant: %s", at, err);
    if (core_check(b, err, sizeof err) != 0)
        TEST_FAIL("step %d: follower breaks the invariant: %s", at, err);
}

TEST(a_core_fed_its_primarys_events_live_keeps_the_same_state_and_free_stacks)
{
    for (int i = 0; i < 24; i++) {
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
    core_t *a = core_new(&CFG), *b = core_new(&(core_config){.reservation_ms = 1,
                                                             .max_pages = 1000, .max_ranks = 4,
                                                             .hash_seed = 99});
    core_set_config(b, &CFG); /* what a promoted replica gets from its callers */
    follower f = {b, 0, 0};
    core_set_observer(a, follow, &f);
    int64_t now = 1000000;
    int independent = 0;
    for (int s = 1; s <= 30000; s++) {
        now += pick(4) ? pick(50) : pick(1000);
        int r[13];
        for (int i = 0; i < 13; i++)
            r[i] = pick(1 << 20);
        int64_t out_a[16], out_b[16];
        if (s % 97 == 0) {
            /* a read (lookup, exists, completeness), on each core: the
             * follower answers as its primary would */
            static const int reads[4] = {30, 50, 78, 90};
            r[9] = reads[r[9] % 4] + (r[9] >> 2) % 8;
            core_set_observer(a, NULL, NULL);
            step(a, r, now, out_a);
            step(b, r, now, out_b);
            core_set_observer(a, follow, &f);
            for (int i = 0; i < 16; i++)
                if (out_a[i] != out_b[i])
                    TEST_FAIL("step %d: answer %d: primary %lld, follower %lld", s, i,
                              (long long)out_a[i], (long long)out_b[i]);
            independent++;
        } else {
            step(a, r, now, out_a);
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
