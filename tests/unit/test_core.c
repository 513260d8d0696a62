/*
 * test_core.c: every rule of docs/protocol.md's State, Leases and Allocation
 * sections, one test per rule, with the invariant checker after each step.
 */
#include <stdlib.h>

#include "check.h"
#include "core/core.h"
#include "core/core_internal.h"

static const hf_slice KV = HF_SLICE_LIT("kv");

static core_config test_config(void)
{
    return core_config_default(4000000000ull, 1024, 12345);
}

static core_t *core;

/* The invariant after every step: a test that breaks it fails here. */
#define CK()                                                                                       \
    do {                                                                                           \
        char err_[256];                                                                            \
        if (core_check(core, err_, sizeof err_) != 0)                                              \
            TEST_FAIL("invariant broken: %s", err_);                                               \
    } while (0)

static core_pool_t *make_pool(hf_slice ns, uint32_t rank, uint64_t pages)
{
    CHECK(core_pool_init(core, ns, rank, pages, NULL) == 1);
    CK();
    return core_pool_find(core, ns, rank);
}

static void setup(core_config cfg)
{
    core_free(core);
    core = core_new(&cfg);
}

/* A core whose reads only count a use: no read lease protects a page. */
static void setup_without_read_leases(void)
{
    core_config cfg = test_config();
    cfg.read_lease_ms = 0;
    setup(cfg);
}

/* A core that never evicts: a full pool answers -1. */
static void setup_without_eviction(void)
{
    core_config cfg = test_config();
    cfg.evict = false;
    setup(cfg);
}

static hf_slice K(const char *s)
{
    return hf_slice_from_cstr(s);
}

static int64_t alloc1(core_pool_t *pool, const char *key, core_alloc_mode mode, int64_t now)
{
    hf_slice k = K(key);
    int64_t page;
    core_allocate(pool, &k, 1, mode, now, &page, NULL);
    return page;
}

static size_t confirm1(core_pool_t *pool, const char *key, int64_t page, int64_t now)
{
    hf_slice k = K(key);
    size_t refused = 99;
    core_confirm(pool, &k, &page, 1, NULL, 0, now, &refused);
    return refused;
}

static int64_t lookup1(core_pool_t *pool, const char *key, int64_t now)
{
    hf_slice k = K(key);
    int64_t page;
    core_lookup(pool, &k, 1, now, &page);
    return page;
}

static int64_t own(core_pool_t *pool, const char *key, int64_t now)
{
    int64_t page = alloc1(pool, key, CORE_ALLOC_PARTIAL, now);
    CHECK(page >= 0);
    CHECK_EQ(confirm1(pool, key, page, now), 0);
    return page;
}

static core_pool_stats stats(core_pool_t *pool)
{
    core_pool_stats st;
    core_pool_get_stats(pool, 0, &st);
    return st;
}

TEST(pool_init_is_idempotent_and_keeps_state_and_size)
{
    setup(test_config());
    core_pool_t *pool = make_pool(KV, 0, 8);
    int64_t page = own(pool, "a", 0);
    uint64_t existing = 0;
    CHECK_EQ(core_pool_init(core, KV, 0, 100, &existing), 0);
    CHECK_EQ(existing, 8);
    CK();
    CHECK(core_pool_find(core, KV, 0) == pool);
    CHECK_EQ(stats(pool).num_pages, 8);
    CHECK_EQ(lookup1(pool, "a", 1), page);
}

TEST(pool_init_rejects_too_many_pages_and_rank_out_of_range)
{
    core_config cfg = test_config();
    cfg.max_pages = 1000;
    cfg.max_ranks = 4;
    setup(cfg);
    CHECK_EQ(core_pool_init(core, KV, 0, 1001, NULL), CORE_EINVAL);
    CHECK_EQ(core_pool_init(core, KV, 4, 10, NULL), CORE_EINVAL);
    CHECK(core_pool_find(core, KV, 0) == NULL);
    CHECK_EQ(core_pool_init(core, KV, 3, 1000, NULL), 1);
    CK();
}

TEST(pool_of_zero_pages_exists_and_never_gives_a_page)
{
    setup(test_config());
    core_pool_t *pool = make_pool(KV, 0, 0);
    CHECK(pool != NULL);
    CHECK_EQ(alloc1(pool, "a", CORE_ALLOC_PARTIAL, 0), -1);
    CHECK_EQ(alloc1(pool, "a", CORE_ALLOC_ALL_OR_NOTHING, 0), -1);
    CHECK_EQ(confirm1(pool, "a", 0, 0), 1);
    CK();
}

TEST(pool_of_a_billion_pages_is_created_without_per_page_work)
{
    setup(test_config());
    core_pool_t *pool = make_pool(KV, 0, 1000000000ull);
    core_pool_stats st = stats(pool);
    CHECK_EQ(st.free, 1000000000ull);
    CHECK_EQ(st.touched, 0);
    int64_t page = own(pool, "k", 0);
    CHECK(page >= 0 && page < 1000000000ll);
    st = stats(pool);
    CHECK_EQ(st.free, 999999999ull);
    CHECK_EQ(st.owned, 1);
    CHECK_EQ(st.touched, 1);
    CK();
}

TEST(allocate_new_key_reserves_a_free_page_until_confirmed)
{
    setup(test_config());
    core_pool_t *pool = make_pool(KV, 0, 4);
    int64_t page = alloc1(pool, "a", CORE_ALLOC_PARTIAL, 0);
    CK();
    CHECK(page >= 0 && page < 4);
    hf_slice key;
    char buf[CORE_KEY_TEXT_MAX];
    CHECK_EQ(core_page_get(pool, (uint64_t)page, &key, buf, NULL), CORE_PAGE_RESERVED);
    CHECK(hf_slice_eq(key, K("a")));
    CHECK_EQ(lookup1(pool, "a", 0), -1); /* reserved is not present */
    CHECK_EQ(stats(pool).reserved, 1);
    CHECK_EQ(confirm1(pool, "a", page, 0), 0);
    CK();
    CHECK_EQ(core_page_get(pool, (uint64_t)page, NULL, buf, NULL), CORE_PAGE_OWNED);
    CHECK_EQ(lookup1(pool, "a", 0), page);
}

TEST(allocate_owned_key_is_a_hit_that_returns_its_page)
{
    setup(test_config());
    core_pool_t *pool = make_pool(KV, 0, 4);
    int64_t page = own(pool, "a", 0);
    hf_slice k = K("a");
    int64_t again;
    bool existed = false;
    core_allocate(pool, &k, 1, CORE_ALLOC_PARTIAL, 1, &again, &existed);
    CK();
    CHECK_EQ(again, page);
    CHECK(existed);
    CHECK_EQ(stats(pool).reserved, 0);
}

TEST(allocate_of_a_reserved_key_gets_another_page)
{
    setup(test_config());
    core_pool_t *pool = make_pool(KV, 0, 4);
    int64_t first = alloc1(pool, "a", CORE_ALLOC_PARTIAL, 0);
    int64_t second = alloc1(pool, "a", CORE_ALLOC_PARTIAL, 0);
    CK();
    CHECK(first >= 0 && second >= 0 && first != second);
    CHECK_EQ(stats(pool).reserved, 2);
}

TEST(key_repeated_in_one_request_gets_one_page_and_the_same_answer)
{
    setup(test_config());
    core_pool_t *pool = make_pool(KV, 0, 8);
    int64_t owned = own(pool, "h", 0);
    hf_slice keys[5] = {K("x"), K("h"), K("x"), K("y"), K("h")};
    int64_t pages[5];
    bool existed[5];
    core_allocate(pool, keys, 5, CORE_ALLOC_PARTIAL, 1, pages, existed);
    CK();
    CHECK_EQ(pages[0], pages[2]);
    CHECK(!existed[0] && !existed[2]);
    CHECK_EQ(pages[1], owned);
    CHECK_EQ(pages[4], owned);
    CHECK(existed[1] && existed[4]);
    CHECK(pages[3] >= 0 && pages[3] != pages[0]);
    CHECK_EQ(stats(pool).reserved, 2);
}

TEST(confirm_of_an_owned_page_by_the_same_key_is_a_harmless_noop)
{
    setup(test_config());
    core_pool_t *pool = make_pool(KV, 0, 4);
    int64_t page = own(pool, "a", 0);
    CHECK_EQ(confirm1(pool, "a", page, 1), 0);
    CK();
    core_pool_stats st = stats(pool);
    CHECK_EQ(st.owned, 1);
    CHECK_EQ(st.confirmations, 1);
}

TEST(confirm_is_refused_unless_the_page_is_reserved_for_that_key)
{
    setup(test_config());
    core_pool_t *pool = make_pool(KV, 0, 4);
    int64_t page_a = alloc1(pool, "a", CORE_ALLOC_PARTIAL, 0);
    int64_t owned_b = own(pool, "b", 0);
    CHECK_EQ(confirm1(pool, "z", page_a, 0), 1);  /* reserved for another key */
    CHECK_EQ(confirm1(pool, "z", owned_b, 0), 1); /* owned by another key */
    CHECK_EQ(confirm1(pool, "z", 3, 0), 1);       /* free page */
    CHECK_EQ(confirm1(pool, "z", 4, 0), 1);       /* out of range */
    CHECK_EQ(confirm1(pool, "z", -1, 0), 1);      /* negative */
    CK();
    core_pool_stats st = stats(pool);
    CHECK_EQ(st.refused_confirms[CORE_REFUSE_OTHER_KEY], 2);
    CHECK_EQ(st.refused_confirms[CORE_REFUSE_NOT_RESERVED], 1);
    CHECK_EQ(st.refused_confirms[CORE_REFUSE_OUT_OF_RANGE], 2);
    CHECK_EQ(st.reserved, 1);
    CHECK_EQ(st.owned, 1);
    CHECK_EQ(lookup1(pool, "z", 0), -1);
}

TEST(confirm_when_the_key_already_owns_a_page_keeps_that_page_and_frees_the_other)
{
    setup(test_config());
    core_pool_t *pool = make_pool(KV, 0, 4);
    int64_t first = alloc1(pool, "a", CORE_ALLOC_PARTIAL, 0);
    int64_t second = alloc1(pool, "a", CORE_ALLOC_PARTIAL, 0);
    CHECK_EQ(confirm1(pool, "a", first, 0), 0);
    CHECK_EQ(confirm1(pool, "a", second, 0), 0);
    CK();
    core_pool_stats st = stats(pool);
    CHECK_EQ(st.owned, 1);
    CHECK_EQ(st.reserved, 0);
    CHECK_EQ(st.free, 3);
    CHECK_EQ(st.duplicate_confirmations, 1);
    CHECK_EQ(lookup1(pool, "a", 0), first);
}

TEST(release_frees_only_reserved_pages)
{
    setup(test_config());
    core_pool_t *pool = make_pool(KV, 0, 4);
    int64_t reserved = alloc1(pool, "r", CORE_ALLOC_PARTIAL, 0);
    int64_t owned = own(pool, "o", 0);
    int64_t release[4] = {reserved, owned, 3, 9};
    size_t refused = 0;
    core_confirm(pool, NULL, NULL, 0, release, 4, 0, &refused);
    CK();
    CHECK_EQ(refused, 3);
    core_pool_stats st = stats(pool);
    CHECK_EQ(st.reserved, 0);
    CHECK_EQ(st.owned, 1);
    CHECK_EQ(st.releases, 1);
    CHECK_EQ(st.refused_releases[CORE_REFUSE_OWNED], 1);
    CHECK_EQ(st.refused_releases[CORE_REFUSE_NOT_RESERVED], 1);
    CHECK_EQ(st.refused_releases[CORE_REFUSE_OUT_OF_RANGE], 1);
    CHECK_EQ(lookup1(pool, "o", 0), owned);
}

TEST(confirmations_apply_before_releases_of_the_same_call)
{
    setup(test_config());
    core_pool_t *pool = make_pool(KV, 0, 4);
    int64_t page = alloc1(pool, "a", CORE_ALLOC_PARTIAL, 0);
    hf_slice k = K("a");
    size_t refused = 0;
    core_confirm(pool, &k, &page, 1, &page, 1, 0, &refused);
    CK();
    CHECK_EQ(refused, 1);
    CHECK_EQ(lookup1(pool, "a", 0), page);
}

TEST(reservation_expires_after_the_timeout_and_a_late_confirm_is_refused)
{
    core_config cfg = test_config();
    cfg.reservation_ms = 1000;
    setup(cfg);
    core_pool_t *pool = make_pool(KV, 0, 2);
    int64_t page = alloc1(pool, "a", CORE_ALLOC_PARTIAL, 10000);
    core_pool_expire(pool, 10999);
    CK();
    CHECK_EQ(stats(pool).reserved, 1);
    core_pool_expire(pool, 11000);
    CK();
    CHECK_EQ(stats(pool).reserved, 0);
    CHECK_EQ(stats(pool).expired_reservations, 1);
    CHECK_EQ(confirm1(pool, "a", page, 11001), 1);
    CK();
    CHECK_EQ(lookup1(pool, "a", 11001), -1);
    CHECK_EQ(stats(pool).free, 2);
}

TEST(partial_allocation_answers_minus_one_for_keys_that_find_no_page)
{
    setup_without_eviction();
    core_pool_t *pool = make_pool(KV, 0, 2);
    int64_t owned = own(pool, "h", 0);
    hf_slice keys[4] = {K("a"), K("h"), K("b"), K("c")};
    int64_t pages[4];
    bool existed[4];
    core_allocate(pool, keys, 4, CORE_ALLOC_PARTIAL, 0, pages, existed);
    CK();
    CHECK(pages[0] >= 0 && pages[0] != owned);
    CHECK_EQ(pages[1], owned);
    CHECK(existed[1]);
    CHECK_EQ(pages[2], -1);
    CHECK_EQ(pages[3], -1);
    CHECK_EQ(stats(pool).reserved, 1);
}

TEST(all_or_nothing_reserves_no_new_key_when_they_do_not_all_fit_but_answers_hits)
{
    setup_without_eviction();
    core_pool_t *pool = make_pool(KV, 0, 3);
    int64_t owned = own(pool, "h", 0);
    hf_slice keys[4] = {K("a"), K("h"), K("b"), K("c")};
    int64_t pages[4];
    core_allocate(pool, keys, 4, CORE_ALLOC_ALL_OR_NOTHING, 0, pages, NULL);
    CK();
    CHECK_EQ(pages[0], -1);
    CHECK_EQ(pages[1], owned);
    CHECK_EQ(pages[2], -1);
    CHECK_EQ(pages[3], -1);
    core_pool_stats st = stats(pool);
    CHECK_EQ(st.reserved, 0);
    CHECK_EQ(st.free, 2);
    /* two new keys fit: both get pages */
    core_allocate(pool, keys, 3, CORE_ALLOC_ALL_OR_NOTHING, 0, pages, NULL);
    CK();
    CHECK(pages[0] >= 0 && pages[2] >= 0 && pages[0] != pages[2]);
}

TEST(all_or_nothing_counts_evictable_pages_as_available)
{
    setup(test_config());
    core_pool_t *pool = make_pool(KV, 0, 2);
    own(pool, "old1", 0);
    own(pool, "old2", 0);
    hf_slice keys[2] = {K("a"), K("b")};
    int64_t pages[2];
    core_allocate(pool, keys, 2, CORE_ALLOC_ALL_OR_NOTHING, 0, pages, NULL);
    CK();
    CHECK(pages[0] >= 0 && pages[1] >= 0);
    CHECK_EQ(stats(pool).evictions, 2);
}

TEST(clock_eviction_takes_the_first_page_from_the_hand_whose_use_count_ran_out)
{
    setup(test_config());
    core_pool_t *pool = make_pool(KV, 0, 3);
    int64_t a = own(pool, "a", 0); /* pages 0, 1, 2; counts CORE_USE_INSERT */
    int64_t b = own(pool, "b", 0);
    int64_t c = own(pool, "c", 0);
    CHECK(a == 0 && b == 1 && c == 2);
    /* a use of "a" (an allocate hit) gives it one more than "b" and "c" */
    CHECK_EQ(alloc1(pool, "a", CORE_ALLOC_PARTIAL, 0), a);
    /* the hand (at page 0) lowers a, b, c in turn: "b" is the first at 0 */
    CHECK_EQ(alloc1(pool, "d", CORE_ALLOC_PARTIAL, 0), b);
    CK();
    CHECK_EQ(lookup1(pool, "b", 0), -1);
    CHECK_EQ(stats(pool).evictions, 1);
    /* the hand stopped after page 1: "c" (now at 0) goes next, before "a" */
    CHECK_EQ(alloc1(pool, "e", CORE_ALLOC_PARTIAL, 0), c);
    CHECK_EQ(lookup1(pool, "a", 0), a);
    CK();
}

TEST(a_key_used_more_often_outlives_one_confirmed_after_its_last_use)
{
    /* Not LRU: counts, not order. "a" is used (count + 1) and then "b" is
     * confirmed; exact LRU would evict "a", the clock evicts "b". */
    setup_without_read_leases();
    core_pool_t *pool = make_pool(KV, 0, 2);
    int64_t a = own(pool, "a", 0);
    CHECK_EQ(lookup1(pool, "a", 1), a);
    int64_t b = own(pool, "b", 2);
    CHECK_EQ(alloc1(pool, "c", CORE_ALLOC_PARTIAL, 3), b);
    CHECK_EQ(lookup1(pool, "a", 4), a);
    CK();
}

TEST(reads_change_no_eviction_order_beyond_the_keys_they_read)
{
    /* A read writes only its key's count: the order of the others stays. */
    setup_without_read_leases();
    core_pool_t *pool = make_pool(KV, 0, 4);
    own(pool, "a", 0);
    own(pool, "b", 0);
    int64_t c = own(pool, "c", 0);
    own(pool, "d", 0);
    for (int i = 0; i < 3; i++) {
        CHECK(lookup1(pool, "a", 1) >= 0);
        CHECK(lookup1(pool, "b", 1) >= 0);
        CHECK(lookup1(pool, "d", 1) >= 0);
    }
    CHECK_EQ(alloc1(pool, "e", CORE_ALLOC_PARTIAL, 2), c);
    CK();
}

TEST(eviction_never_takes_a_reserved_page)
{
    setup(test_config());
    core_pool_t *pool = make_pool(KV, 0, 2);
    int64_t r1 = alloc1(pool, "r1", CORE_ALLOC_PARTIAL, 0);
    int64_t r2 = alloc1(pool, "r2", CORE_ALLOC_PARTIAL, 0);
    CHECK(r1 >= 0 && r2 >= 0);
    CHECK_EQ(alloc1(pool, "x", CORE_ALLOC_PARTIAL, 0), -1);
    CK();
    CHECK_EQ(confirm1(pool, "r1", r1, 0), 0);
    CHECK_EQ(confirm1(pool, "r2", r2, 0), 0);
    CK();
}

TEST(eviction_skips_read_leased_pages_until_the_lease_ends)
{
    setup(test_config()); /* read lease 5000 ms */
    core_pool_t *pool = make_pool(KV, 0, 1);
    int64_t a = own(pool, "a", 0);
    CHECK_EQ(lookup1(pool, "a", 1000), a); /* leased until 6000 */
    CHECK_EQ(alloc1(pool, "b", CORE_ALLOC_PARTIAL, 5999), -1);
    CK();
    CHECK_EQ(lookup1(pool, "a", 5999), a); /* the answer is unchanged, the lease extended */
    CHECK_EQ(alloc1(pool, "b", CORE_ALLOC_PARTIAL, 10998), -1);
    CHECK_EQ(alloc1(pool, "b", CORE_ALLOC_PARTIAL, 10999), a);
    CK();
    CHECK_EQ(lookup1(pool, "a", 11000), -1);
}

TEST(hits_of_a_request_are_never_evicted_for_its_other_keys)
{
    setup(test_config());
    core_pool_t *pool = make_pool(KV, 0, 1);
    int64_t a = own(pool, "a", 0);
    hf_slice keys[2] = {K("a"), K("b")};
    int64_t pages[2];
    core_allocate(pool, keys, 2, CORE_ALLOC_PARTIAL, 0, pages, NULL);
    CK();
    CHECK_EQ(pages[0], a);
    CHECK_EQ(pages[1], -1);
    core_allocate(pool, keys, 2, CORE_ALLOC_ALL_OR_NOTHING, 0, pages, NULL);
    CK();
    CHECK_EQ(pages[0], a);
    CHECK_EQ(pages[1], -1);
}

TEST(delete_frees_the_page_or_drains_it_while_read_leased)
{
    setup(test_config());
    core_pool_t *pool = make_pool(KV, 0, 2);
    int64_t a = own(pool, "a", 0);
    int64_t b = own(pool, "b", 0);
    CHECK_EQ(lookup1(pool, "b", 100), b); /* leased until 5100 */
    hf_slice keys[3] = {K("a"), K("b"), K("never")};
    core_delete(pool, keys, 3, 200);
    CK();
    char buf[CORE_KEY_TEXT_MAX];
    CHECK_EQ(core_page_get(pool, (uint64_t)a, NULL, buf, NULL), CORE_PAGE_FREE);
    CHECK_EQ(core_page_get(pool, (uint64_t)b, NULL, buf, NULL), CORE_PAGE_DRAINING);
    CHECK_EQ(lookup1(pool, "b", 200), -1);
    /* the draining page is not handed out: only one page is available */
    hf_slice fresh[2] = {K("x"), K("y")};
    int64_t pages[2];
    core_allocate(pool, fresh, 2, CORE_ALLOC_PARTIAL, 300, pages, NULL);
    CK();
    CHECK_EQ(pages[0], a);
    CHECK_EQ(pages[1], -1);
    core_pool_expire(pool, 5100);
    CK();
    CHECK_EQ(core_page_get(pool, (uint64_t)b, NULL, buf, NULL), CORE_PAGE_FREE);
}

TEST(pool_clear_frees_every_page_and_refuses_later_confirms)
{
    setup(test_config());
    core_pool_t *pool = make_pool(KV, 0, 4);
    own(pool, "a", 0);
    int64_t leased = own(pool, "b", 0);
    lookup1(pool, "b", 0);
    int64_t reserved = alloc1(pool, "c", CORE_ALLOC_PARTIAL, 0);
    core_pool_clear(pool, 10);
    CK();
    core_pool_stats st = stats(pool);
    CHECK_EQ(st.owned, 0);
    CHECK_EQ(st.reserved, 0);
    CHECK_EQ(st.draining, 1);
    CHECK_EQ(st.free, 3);
    CHECK_EQ(confirm1(pool, "c", reserved, 20), 1);
    char buf[CORE_KEY_TEXT_MAX];
    CHECK_EQ(core_page_get(pool, (uint64_t)leased, NULL, buf, NULL), CORE_PAGE_DRAINING);
    CK();
}

TEST(clear_all_forgets_every_pool_of_every_namespace)
{
    setup(test_config());
    core_pool_t *pool = make_pool(KV, 0, 4);
    own(pool, "a", 0);
    make_pool(K("other"), 3, 4);
    core_clear_all(core);
    CK();
    CHECK(core_pool_find(core, KV, 0) == NULL);
    CHECK(core_pool_find(core, K("other"), 3) == NULL);
    pool = make_pool(KV, 0, 4);
    CHECK_EQ(lookup1(pool, "a", 0), -1);
}

TEST(a_key_is_complete_only_when_every_rank_of_the_namespace_owns_it)
{
    setup(test_config());
    hf_slice k = K("a");
    bool present = true;
    core_complete_exists(core, KV, &k, 1, 0, &present);
    CHECK(!present); /* no rank initialized: nothing is complete */
    core_pool_t *r0 = make_pool(KV, 0, 4);
    core_pool_t *r1 = make_pool(KV, 1, 4);
    own(r0, "a", 0);
    core_complete_exists(core, KV, &k, 1, 0, &present);
    CHECK(!present);
    int64_t page = -2;
    CHECK_EQ(core_complete_locations(core, KV, 0, &k, 1, 0, &page), 0);
    CHECK_EQ(page, -1);
    int64_t p1 = own(r1, "a", 0);
    core_complete_exists(core, KV, &k, 1, 0, &present);
    CHECK(present);
    CHECK_EQ(core_complete_locations(core, KV, 1, &k, 1, 0, &page), 0);
    CHECK_EQ(page, p1);
    CHECK_EQ(core_complete_locations(core, KV, 7, &k, 1, 0, &page), CORE_ENOPOOL);
    /* another namespace does not count */
    make_pool(K("sg"), 0, 4);
    core_complete_exists(core, KV, &k, 1, 0, &present);
    CHECK(present);
    CK();
}

TEST(complete_reads_lease_the_key_on_every_rank)
{
    setup(test_config());
    core_pool_t *r0 = make_pool(KV, 0, 1);
    core_pool_t *r1 = make_pool(KV, 1, 1);
    own(r0, "a", 0);
    own(r1, "a", 0);
    hf_slice k = K("a");
    bool present;
    core_complete_exists(core, KV, &k, 1, 100, &present);
    CHECK(present);
    CHECK_EQ(alloc1(r0, "b", CORE_ALLOC_PARTIAL, 200), -1);
    CHECK_EQ(alloc1(r1, "b", CORE_ALLOC_PARTIAL, 200), -1);
    CK();
}

TEST(a_demoted_page_that_is_used_again_no_longer_goes_first)
{
    setup_without_read_leases();
    core_pool_t *r0 = make_pool(KV, 0, 2);
    core_pool_t *r1 = make_pool(KV, 1, 2);
    int64_t old = own(r1, "old", 0);
    int64_t k = own(r1, "k", 0);
    own(r0, "k", 0);
    hf_slice key = K("k");
    core_delete(r0, &key, 1, 1); /* "k" in rank 1 is demoted */
    own(r0, "k", 2);             /* saved again in rank 0: complete again */
    CHECK_EQ(alloc1(r1, "k", CORE_ALLOC_ALL_OR_NOTHING, 3), k); /* a hit: a use */
    CHECK_EQ(confirm1(r1, "k", k, 3), 0);
    /* "k" is no longer demoted and counts more uses: the clock takes "old" */
    CHECK_EQ(alloc1(r1, "new", CORE_ALLOC_PARTIAL, 4), old);
    CHECK_EQ(lookup1(r1, "k", 5), k);
    CK();
}

TEST(the_most_recently_demoted_page_goes_first)
{
    setup(test_config());
    core_pool_t *r0 = make_pool(KV, 0, 3);
    core_pool_t *r1 = make_pool(KV, 1, 3);
    own(r1, "x", 0);
    int64_t y = own(r1, "y", 0);
    int64_t z = own(r1, "z", 0);
    own(r0, "y", 0);
    own(r0, "z", 0);
    hf_slice ky = K("y"), kz = K("z");
    core_delete(r0, &kz, 1, 0);
    core_delete(r0, &ky, 1, 0);
    CHECK_EQ(alloc1(r1, "n1", CORE_ALLOC_PARTIAL, 0), y);
    CHECK_EQ(alloc1(r1, "n2", CORE_ALLOC_PARTIAL, 0), z);
    CHECK(lookup1(r1, "x", 0) >= 0);
    CK();
}

/* Many demotions undone by a use leave stale entries on the demoted stack
 * until it is compacted (in page_demote, before the page it just marked is
 * pushed): the page being demoted stays on the stack, and goes first. */
TEST(a_demoted_stack_full_of_stale_entries_is_compacted_and_keeps_the_live_demotion)
{
    setup(test_config());
    core_pool_t *r0 = make_pool(KV, 0, 4);
    core_pool_t *r1 = make_pool(KV, 1, 300);
    int64_t now = 0;
    for (int round = 0; round < 290; round++) {
        char name[16];
        snprintf(name, sizeof name, "k%d", round);
        hf_slice k = K(name);
        now += 10000;       /* past every read lease */
        own(r1, name, now); /* a page never demoted before */
        own(r0, name, now);
        core_delete(r0, &k, 1, now); /* demotes it in rank 1 */
        CK();
        CHECK(lookup1(r1, name, now) >= 0); /* a use: no longer demoted, its entry stale */
    }
    hf_slice k = K("k0");
    now += 10000;
    own(r0, "k0", now);
    core_delete(r0, &k, 1, now);
    for (int i = 0; i < 10; i++) {
        char name[16];
        snprintf(name, sizeof name, "fill%d", i);
        if (stats(r1).free > 0)
            own(r1, name, now);
    }
    CK();
    CHECK(alloc1(r1, "new", CORE_ALLOC_PARTIAL, now) >= 0); /* takes the demoted "k0" */
    CHECK_EQ(lookup1(r1, "k0", now), -1);
    CK();
}

TEST(losing_a_key_on_one_rank_makes_its_pages_on_other_ranks_go_first)
{
    setup(test_config());
    core_pool_t *r0 = make_pool(KV, 0, 2);
    core_pool_t *r1 = make_pool(KV, 1, 2);
    own(r1, "old", 0);
    own(r1, "dead", 0); /* most recently used in rank 1 */
    own(r0, "dead", 0);
    hf_slice k = K("dead");
    core_delete(r0, &k, 1, 0);
    CK();
    /* rank 1 must evict "dead" (no longer complete) before "old" */
    CHECK(alloc1(r1, "new", CORE_ALLOC_PARTIAL, 0) >= 0);
    CK();
    CHECK_EQ(lookup1(r1, "dead", 0), -1);
    CHECK(lookup1(r1, "old", 0) >= 0);
}

/* TP 9: the completeness read checks pages and updates use counts several
 * columns at a time (8 bytes of bits, 4 pages); rank 8 is the tail. */
TEST(complete_reads_at_tp_9_see_every_rank_and_use_every_column)
{
    enum { TP = 9 };
    setup_without_read_leases();
    core_pool_t *r[TP];
    for (uint32_t i = 0; i < TP; i++)
        r[i] = make_pool(KV, i, 3);
    hf_slice hot = K("hot");
    bool present, owned[TP] = {false};
    for (uint32_t missing = 0; missing < TP; missing++) { /* one rank short: not complete */
        for (uint32_t i = 0; i < TP; i++)
            if (i != missing && !owned[i]) {
                own(r[i], "hot", 0);
                owned[i] = true;
            }
        if (owned[missing]) {
            core_delete(r[missing], &hot, 1, 0);
            owned[missing] = false;
        }
        core_complete_exists(core, KV, &hot, 1, 0, &present);
        CHECK(!present);
        CK();
    }
    own(r[TP - 1], "hot", 0);
    core_complete_exists(core, KV, &hot, 1, 1, &present); /* un-demotes, count 4 */
    CHECK(present);
    CK();
    hf_slice warm = K("warm");
    for (uint32_t i = 0; i < TP; i++) {
        own(r[i], "warm", 2); /* count 3 */
        own(r[i], "old", 2);  /* count 3 */
    }
    core_complete_exists(core, KV, &warm, 1, 3, &present); /* no column demoted: count 4 */
    CHECK(present);
    CK();
    CK();
    for (uint32_t i = 0; i < TP; i++) { /* the clock takes "old" (count 3), not those at 4 */
        CHECK(alloc1(r[i], "new", CORE_ALLOC_PARTIAL, 4) >= 0);
        CHECK_EQ(lookup1(r[i], "old", 4), -1);
        CHECK(lookup1(r[i], "hot", 4) >= 0);
        CHECK(lookup1(r[i], "warm", 4) >= 0);
    }
    CK();
}

/* Every key is found on its page, and the page gives the key back verbatim. */
static void expect_owned_and_round_trip(core_pool_t *pool, const hf_slice *keys,
                                        const int64_t *pages, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int64_t found;
        core_lookup(pool, &keys[i], 1, 0, &found);
        CHECK_EQ(found, pages[i]);
        hf_slice back;
        char buf[CORE_KEY_TEXT_MAX];
        CHECK_EQ(core_page_get(pool, (uint64_t)pages[i], &back, buf, NULL), CORE_PAGE_OWNED);
        CHECK(hf_slice_eq(back, keys[i]));
    }
}

TEST(keys_of_every_shape_are_distinct_and_round_trip)
{
    setup(test_config());
    core_pool_t *pool = make_pool(KV, 0, 64);
    char hex64[65], upper64[65], long_key[1001], hex32[33];
    for (int i = 0; i < 64; i++) {
        hex64[i] = "0123456789abcdef"[i % 16];
        upper64[i] = "0123456789ABCDEF"[i % 16];
    }
    hex64[64] = upper64[64] = '\0';
    memcpy(hex32, hex64, 32);
    hex32[32] = '\0';
    memset(long_key, 'k', 1000);
    long_key[1000] = '\0';
    /* a 32-byte raw key equal to the packed bytes of hex64 must differ from it */
    char packed[32];
    for (int i = 0; i < 32; i++)
        packed[i] = (char)((i * 2 % 16) << 4 | ((i * 2 + 1) % 16));
    hf_slice keys[8] = {K(hex64),     K(upper64),          K(hex32),           K("x"), K(long_key),
                        {packed, 32}, {"nul\0inside", 10}, {"nul\0other!", 10}};
    int64_t pages[8];
    core_allocate(pool, keys, 8, CORE_ALLOC_PARTIAL, 0, pages, NULL);
    size_t refused = 0;
    core_confirm(pool, keys, pages, 8, NULL, 0, 0, &refused);
    CHECK_EQ(refused, 0);
    CK();
    CHECK_EQ(stats(pool).owned, 8);
    expect_owned_and_round_trip(pool, keys, pages, 8);
}

static void apply_to(void *ctx, const core_event *ev);

/* The shapes around `<32|64 lowercase hex><suffix of 1..16 bytes>` (packed
 * without a copy: util/hexkey.h): each key is its own, reads back verbatim
 * from the pool and from a core rebuilt from its events, and takes the
 * form its shape asks for (memory: no copy for the packed ones). */
TEST(hex_keys_with_a_suffix_round_trip_at_every_bound_of_their_shape)
{
    setup(test_config());
    core_pool_t *pool = make_pool(KV, 0, 64);
    const char *a = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const char *u = "0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF";
    enum { N = 20 };
    char text[N][96];
    /* packed: whether the key takes no copy */
    static const bool packed[N] = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1};
    snprintf(text[0], 96, "%s-k", a);                   /* SGLang MHA page_first */
    snprintf(text[1], 96, "%s-v", a);                   /* same hex, another suffix */
    snprintf(text[2], 96, "%s_mamba", a);               /* an extra pool */
    snprintf(text[3], 96, "%sa", a);                    /* 65 hex: suffix "a" */
    snprintf(text[4], 96, "%s0123456789abcdef", a);     /* 80 hex: a hex suffix of 16 */
    snprintf(text[5], 96, "%s_0123456789abcde", a);     /* suffix at the bound */
    snprintf(text[6], 96, "%.32s-k", a);                /* 32 hex + suffix */
    snprintf(text[7], 96, "%.32s_0123456789abcde", a);  /* 32 hex + 16 */
    snprintf(text[8], 96, "%s_0123456789abcdef", a);    /* 17: past the bound */
    snprintf(text[9], 96, "%.32s_0123456789abcdef", a); /* 32 hex + 17 */
    snprintf(text[10], 96, "%.63s-k", a);               /* 63 hex */
    snprintf(text[11], 96, "%s-k", u);                  /* uppercase */
    snprintf(text[12], 96, "%.31sA-k", a);              /* one uppercase digit in 32 */
    snprintf(text[13], 96, "%.33s", a);                 /* 33 hex: 32 + "0" */
    snprintf(text[14], 96, "%.48s", a);                 /* 48 hex: 32 + 16 hex */
    snprintf(text[15], 96, "%.62s-k", a);               /* 64 bytes, not all hex */
    snprintf(text[16], 96, "%.49s", a);                 /* 49 hex: 32 + 17 */
    snprintf(text[17], 96, "%.32s-", a);                /* suffix of one byte */
    snprintf(text[18], 96, "%s\x80", a);                /* a suffix of any byte */
    snprintf(text[19], 96, "%.32sz", a);                /* 33 bytes, suffix "z" */
    hf_slice keys[N];
    for (int i = 0; i < N; i++)
        keys[i] = hf_slice_from_cstr(text[i]);
    int64_t pages[N];
    core_allocate(pool, keys, N, CORE_ALLOC_PARTIAL, 0, pages, NULL);
    size_t refused = 0;
    core_confirm(pool, keys, pages, N, NULL, 0, 0, &refused);
    CHECK_EQ(refused, 0);
    CK();
    CHECK_EQ(stats(pool).owned, N);
    expect_owned_and_round_trip(pool, keys, pages, N);
    for (int i = 0; i < N; i++) {
        core_key enc;
        core__key_encode(pool->ns, core, keys[i], &enc);
        CHECK_EQ(enc.kind != CORE_KEY_EXT, packed[i]); /* external: a heap copy */
        CHECK_EQ(enc.len, keys[i].len);
    }
    core_t *copy = core_new(core_get_config(core));
    core_walk_state(core, apply_to, copy);
    core_apply_finish(copy);
    core_pool_t *again = core_pool_find(copy, KV, 0);
    expect_owned_and_round_trip(again, keys, pages, N);
    char err[256];
    CHECK_EQ(core_check(copy, err, sizeof err), 0);
    core_free(copy);
}

/* A namespace interns at most CORE_SFX_MAX suffixes: the next one's keys
 * are external copies, still found and read back; a lookup interns nothing
 * (a suffix only read leaves the table as it was). */
TEST(suffixes_past_the_interned_bound_stay_external_and_lookups_intern_nothing)
{
    setup(test_config());
    size_t n = CORE_SFX_MAX + 3;
    core_pool_t *pool = make_pool(KV, 0, 2 * n);
    const char *a = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";
    char(*text)[96] = malloc(n * sizeof *text);
    hf_slice *keys = malloc(n * sizeof *keys);
    int64_t *pages = malloc(n * sizeof *pages);
    hf_slice only_read = K("fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210_read");
    int64_t miss;
    core_lookup(pool, &only_read, 1, 0, &miss);
    CHECK_EQ(miss, -1);
    CHECK(pool->ns->sfx == NULL);
    for (size_t i = 0; i < n; i++) {
        snprintf(text[i], 96, "%s_p%zu", a, i);
        keys[i] = hf_slice_from_cstr(text[i]);
    }
    core_allocate(pool, keys, n, CORE_ALLOC_PARTIAL, 0, pages, NULL);
    size_t refused = 0;
    core_confirm(pool, keys, pages, n, NULL, 0, 0, &refused);
    CHECK_EQ(refused, 0);
    CK();
    CHECK_EQ(pool->ns->sfx->n, CORE_SFX_MAX);
    for (size_t i = 0; i < n; i++) {
        core_key enc;
        core__key_encode(pool->ns, core, keys[i], &enc);
        CHECK_EQ(enc.kind == CORE_KEY_EXT, i >= CORE_SFX_MAX);
    }
    expect_owned_and_round_trip(pool, keys, pages, n);
    core_delete(pool, keys, n, 1); /* the table stays: a suffix once refused stays refused */
    CK();
    core_allocate(pool, keys + CORE_SFX_MAX, 3, CORE_ALLOC_PARTIAL, 2, pages, NULL);
    CHECK(pages[0] >= 0 && pages[1] >= 0 && pages[2] >= 0);
    core_confirm(pool, keys + CORE_SFX_MAX, pages, 3, NULL, 0, 2, &refused);
    CHECK_EQ(refused, 0);
    CK();
    expect_owned_and_round_trip(pool, keys + CORE_SFX_MAX, pages, 3);
    free(text);
    free(keys);
    free(pages);
}

/* 64-character keys are packed when they are lowercase hex, and must be kept
 * verbatim otherwise: a bad character at any position, of any kind, must not
 * be taken for a digit (the packer checks 16 or 8 characters at a time). */
TEST(hex64_keys_pack_every_digit_at_every_position_and_keep_any_other_key_verbatim)
{
    static const char bad[] = {'g', 'z', 'A',  'F',        '/',        ':',        '`',
                               '@', ' ', '\0', (char)0x80, (char)0xb0, (char)0xe1, (char)0xff};
    size_t nbad = sizeof bad, n = 64 * 16 + 64 * nbad;
    setup(test_config());
    core_pool_t *pool = make_pool(KV, 0, n);
    char(*text)[64] = malloc(n * sizeof *text);
    hf_slice *keys = malloc(n * sizeof *keys);
    int64_t *pages = malloc(n * sizeof *pages);
    size_t k = 0;
    for (int pos = 0; pos < 64; pos++) {
        for (int d = 0; d < 16 + (int)nbad; d++, k++) {
            for (int i = 0; i < 64; i++)
                text[k][i] = "0123456789abcdef"[(i * 7 + pos) % 16];
            text[k][pos] = d < 16 ? "0123456789abcdef"[d] : bad[d - 16];
            keys[k] = (hf_slice){text[k], 64};
        }
    }
    CHECK_EQ(k, n);
    core_allocate(pool, keys, n, CORE_ALLOC_PARTIAL, 0, pages, NULL);
    size_t refused = 0;
    core_confirm(pool, keys, pages, n, NULL, 0, 0, &refused);
    CHECK_EQ(refused, 0);
    CK();
    size_t distinct = 0; /* positions 16 apart share their base key */
    for (size_t i = 0; i < n; i++) {
        size_t j = 0;
        while (j < i && memcmp(text[j], text[i], 64) != 0)
            j++;
        distinct += j == i;
    }
    CHECK(distinct > n - 64 * 4);
    CHECK_EQ(stats(pool).owned, distinct); /* no two of the keys were taken for one */
    expect_owned_and_round_trip(pool, keys, pages, n);
    free(text);
    free(keys);
    free(pages);
}

TEST(namespaces_with_the_same_rank_are_separate_pools)
{
    setup(test_config());
    core_pool_t *a = make_pool(KV, 0, 2);
    core_pool_t *b = make_pool(K("other"), 0, 2);
    own(a, "k", 0);
    CHECK_EQ(lookup1(b, "k", 0), -1);
    CHECK(lookup1(a, "k", 0) >= 0);
    CK();
}

TEST(exists_and_lookup_count_as_a_use_that_keeps_the_key_over_an_unused_one)
{
    setup_without_read_leases();
    core_pool_t *pool = make_pool(KV, 0, 2);
    int64_t a = own(pool, "a", 0);
    own(pool, "b", 0);
    hf_slice k = K("a");
    bool present;
    core_exists(pool, &k, 1, 1, &present);
    CHECK(present);
    CHECK(alloc1(pool, "c", CORE_ALLOC_PARTIAL, 2) >= 0);
    CHECK_EQ(lookup1(pool, "a", 3), a);
    CHECK_EQ(lookup1(pool, "b", 3), -1);
    CK();
}

TEST(key_index_survives_growth_and_many_deletions)
{
    setup(test_config());
    enum { N = 5000 };
    core_pool_t *pool = make_pool(KV, 0, N);
    static char names[N][16];
    static hf_slice keys[N];
    static int64_t pages[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "key-%d", i);
        keys[i] = K(names[i]);
    }
    core_allocate(pool, keys, N, CORE_ALLOC_PARTIAL, 0, pages, NULL);
    core_confirm(pool, keys, pages, N, NULL, 0, 0, NULL);
    CK();
    /* delete every third key, then every key must still be found or gone */
    for (int i = 0; i < N; i += 3)
        core_delete(pool, &keys[i], 1, 0);
    CK();
    for (int i = 0; i < N; i++)
        CHECK_EQ(lookup1(pool, names[i], 0), i % 3 == 0 ? -1 : pages[i]);
}

/* index_remove learns an entry's home from its slot's tag where the tag is
 * wide enough and the cluster short enough, else from the page record. Pool
 * sizes choose the tag width: 5,000 pages (8 home bits in the tag), 2^20 (6),
 * 2^27 (2: clusters often outgrow them, so both ways are taken), 3 * 2^29
 * and 4e9 (none: the record every time). Random deletions and re-insertions
 * must leave every key findable at its page and nothing else indexed. */
TEST(key_index_removal_keeps_every_key_findable_for_every_tag_width)
{
    static const uint64_t sizes[] = {5000, 1u << 20, 1u << 27, 3ull << 29, 4000000000ull};
    enum { N = 4000, ROUNDS = 12 };
    static char names[N][16];
    static hf_slice keys[N];
    static int64_t pages[N];
    static bool gone[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "k%d", i);
        keys[i] = K(names[i]);
    }
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        setup(test_config());
        core_pool_t *pool = make_pool(KV, 0, sizes[s]);
        core_allocate(pool, keys, N, CORE_ALLOC_PARTIAL, 0, pages, NULL);
        core_confirm(pool, keys, pages, N, NULL, 0, 0, NULL);
        CK();
        uint64_t rnd = 88172645463325252ull + s;
        /* time moves past the read leases of the lookups before keys come
         * back, so that no page drains and nothing is evicted */
        for (int64_t round = 0, t = 0; round < ROUNDS; round++, t += 20000) {
            for (int i = 0; i < N; i++) {
                rnd ^= rnd << 13, rnd ^= rnd >> 7, rnd ^= rnd << 17;
                gone[i] = rnd % 3 == 0;
                if (gone[i])
                    core_delete(pool, &keys[i], 1, t);
            }
            CK();
            for (int i = 0; i < N; i++)
                CHECK_EQ(lookup1(pool, names[i], t), gone[i] ? -1 : pages[i]);
            for (int i = 0; i < N; i++) {
                if (!gone[i])
                    continue;
                pages[i] = own(pool, names[i], t + 10000);
            }
            CK();
        }
    }
}

/* ------------------------------------------------------ write protection */

static core_config lease_config(void)
{
    core_config cfg = test_config();
    cfg.read_lease_ms = 100;
    cfg.write_lease_ms = 1000;
    cfg.release_grace_ms = 300;
    return cfg;
}

/* vLLM rewrites hit `a` (pool of 2 pages: a, then x in b's evicted page);
 * x is confirmed at once, a's writer has not confirmed yet. */
static core_pool_t *pool_with_a_being_rewritten(int64_t *pa, int64_t *px)
{
    setup(lease_config());
    core_pool_t *pool = make_pool(KV, 0, 2);
    *pa = own(pool, "a", 0);
    own(pool, "b", 0);
    hf_slice ks[2] = {K("a"), K("x")};
    int64_t pages[2];
    core_allocate(pool, ks, 2, CORE_ALLOC_ALL_OR_NOTHING, 10, pages, NULL);
    CHECK_EQ(pages[0], *pa);
    CHECK(pages[1] >= 0);
    *px = pages[1];
    CHECK_EQ(confirm1(pool, "x", *px, 10), 0);
    CK();
    return pool;
}

TEST(a_rewritten_hit_is_not_evicted_until_its_writer_confirms)
{
    int64_t pa, px;
    core_pool_t *pool = pool_with_a_being_rewritten(&pa, &px);
    CHECK_EQ(stats(pool).write_leased, 1);
    /* a is the least recently used key, but its page is being written */
    CHECK_EQ(alloc1(pool, "y", CORE_ALLOC_PARTIAL, 20), px);
    CHECK_EQ(alloc1(pool, "z", CORE_ALLOC_PARTIAL, 30), -1);
    CK();
    /* the confirmation ends the write; what is left is at most a read lease */
    CHECK_EQ(confirm1(pool, "a", pa, 40), 0);
    CHECK_EQ(stats(pool).write_leased, 0);
    CHECK_EQ(stats(pool).write_leases_ended, 1);
    CHECK_EQ(alloc1(pool, "z", CORE_ALLOC_PARTIAL, 139), -1);
    CHECK_EQ(alloc1(pool, "z", CORE_ALLOC_PARTIAL, 141), pa);
    CK();
}

TEST(a_write_lease_whose_writer_never_confirms_ends_at_the_write_lease_bound)
{
    int64_t pa, px;
    core_pool_t *pool = pool_with_a_being_rewritten(&pa, &px);
    CHECK_EQ(alloc1(pool, "y", CORE_ALLOC_PARTIAL, 20), px);
    CHECK_EQ(alloc1(pool, "z", CORE_ALLOC_PARTIAL, 1009), -1);
    CHECK_EQ(alloc1(pool, "z", CORE_ALLOC_PARTIAL, 1010), pa);
    CHECK_EQ(stats(pool).write_leases_expired, 1);
    CHECK_EQ(stats(pool).write_leased, 0);
    CK();
}

TEST(a_write_lease_ends_only_when_every_writer_of_the_hit_confirmed)
{
    int64_t pa, px;
    core_pool_t *pool = pool_with_a_being_rewritten(&pa, &px);
    /* a second vLLM writer rewrites a too */
    CHECK_EQ(alloc1(pool, "a", CORE_ALLOC_ALL_OR_NOTHING, 15), pa);
    CHECK_EQ(confirm1(pool, "a", pa, 20), 0);
    CHECK_EQ(stats(pool).write_leased, 1); /* the other writer is still writing */
    CHECK_EQ(alloc1(pool, "y", CORE_ALLOC_PARTIAL, 200), px);
    CHECK_EQ(alloc1(pool, "z", CORE_ALLOC_PARTIAL, 200), -1);
    CHECK_EQ(confirm1(pool, "a", pa, 300), 0);
    CHECK_EQ(stats(pool).write_leased, 0);
    CHECK_EQ(alloc1(pool, "z", CORE_ALLOC_PARTIAL, 401), pa);
    CK();
}

TEST(hits_get_no_write_lease_from_sglang_nor_from_a_vllm_allocation_that_failed)
{
    setup(lease_config());
    core_pool_t *pool = make_pool(KV, 0, 1);
    int64_t pa = own(pool, "a", 0);
    /* SGLang never rewrites a hit */
    CHECK_EQ(alloc1(pool, "a", CORE_ALLOC_PARTIAL, 10), pa);
    CHECK_EQ(stats(pool).write_leased, 0);
    /* vLLM writes nothing when a new key gets no page: [a, n] with no room
     * for n (a is a hit of the call, never evicted for it) */
    hf_slice ks[2] = {K("a"), K("n")};
    int64_t pages[2];
    core_allocate(pool, ks, 2, CORE_ALLOC_ALL_OR_NOTHING, 20, pages, NULL);
    CHECK_EQ(pages[0], pa);
    CHECK_EQ(pages[1], -1);
    CHECK_EQ(stats(pool).write_leased, 0);
    CHECK_EQ(alloc1(pool, "b", CORE_ALLOC_PARTIAL, 30), pa); /* a is evictable */
    CK();
}

/* Each read that leases what it finds: per pool (lookup, exists) and across
 * ranks (the completeness reads). */
enum { READ_LOOKUP, READ_EXISTS, READ_COMPLETE_EXISTS, READ_COMPLETE_LOCATIONS, READ_KINDS };
static const char *const read_names[READ_KINDS] = {"lookup", "exists", "complete_exists",
                                                   "complete_locations"};

/* One read of `key` in pool (KV, 0); answers whether it found the key. */
static bool read1(core_pool_t *pool, int kind, const char *key, int64_t now)
{
    hf_slice k = K(key);
    bool present = false;
    int64_t page = -1;
    switch (kind) {
    case READ_LOOKUP: return lookup1(pool, key, now) >= 0;
    case READ_EXISTS: core_exists(pool, &k, 1, now, &present); return present;
    case READ_COMPLETE_EXISTS: core_complete_exists(core, KV, &k, 1, now, &present); return present;
    default: core_complete_locations(core, KV, 0, &k, 1, now, &page); return page >= 0;
    }
}

/* The read lease only ever extends a page's protection: a read in the middle
 * of a write lease (1,000 ms) leases the page for 100 ms, and the page stays
 * protected until the write lease ends, not the read lease. */
TEST(no_read_cuts_short_a_write_lease_that_runs_longer_than_its_read_lease)
{
    for (int kind = 0; kind < READ_KINDS; kind++) {
        int64_t pa, px;
        core_pool_t *pool = pool_with_a_being_rewritten(&pa, &px); /* a: written until 1010 */
        CHECK(read1(pool, kind, "a", 500));                        /* read-leased until 600 */
        int64_t y = alloc1(pool, "y", CORE_ALLOC_PARTIAL, 700);
        int64_t z = alloc1(pool, "z", CORE_ALLOC_PARTIAL, 1009);
        if (y == pa || z == pa)
            TEST_FAIL("a %s at 500 cut a's write lease (until 1010) short: a evicted at %d",
                      read_names[kind], y == pa ? 700 : 1009);
        CHECK_EQ(y, px);
        CHECK_EQ(z, -1);
        CHECK_EQ(alloc1(pool, "z", CORE_ALLOC_PARTIAL, 1010), pa);
        CK();
    }
}

TEST(a_released_page_drains_for_the_grace_so_a_replayed_release_cannot_free_another_writers_page)
{
    setup(lease_config());
    core_pool_t *pool = make_pool(KV, 0, 1);
    int64_t p = alloc1(pool, "a", CORE_ALLOC_PARTIAL, 0);
    size_t refused = 99;
    core_confirm(pool, NULL, NULL, 0, &p, 1, 10, &refused);
    CHECK_EQ(refused, 0);
    CHECK_EQ(stats(pool).draining, 1);
    CHECK_EQ(alloc1(pool, "b", CORE_ALLOC_PARTIAL, 309), -1); /* not reused during the grace */
    /* the same release again (a client retrying): refused, changes nothing */
    core_confirm(pool, NULL, NULL, 0, &p, 1, 20, &refused);
    CHECK_EQ(refused, 1);
    CHECK_EQ(alloc1(pool, "b", CORE_ALLOC_PARTIAL, 310), p);
    /* replayed after the grace: b's reservation is not released by a's retry
     * unless b's writer asks; a release names only a page, so the grace is
     * what keeps a late replay from reaching b (a retry comes within seconds) */
    CHECK_EQ(stats(pool).reserved, 1);
    CK();
}

static void apply_to(void *ctx, const core_event *ev)
{
    CHECK_EQ(core_apply(ctx, ev), 0);
}

/* What a saved value does (the Redis module's rdb_save/rdb_load): walk the
 * state, replay it into a new core, then restore each free stack. */
TEST(a_rebuilt_pool_whose_highest_touched_page_is_free_gets_its_free_order_back)
{
    setup(test_config());
    core_pool_t *pool = make_pool(KV, 0, 8);
    for (int i = 0; i < 4; i++) {
        char key[16];
        snprintf(key, sizeof key, "k%d", i);
        CHECK_EQ(own(pool, key, 1), i);
    }
    hf_slice gone = K("k3");
    core_delete(pool, &gone, 1, 1); /* page 3, the top of the mark, is FREE and named by no event */
    const uint32_t *order;
    CHECK_EQ(core_pool_free_order(pool, &order), 1);
    CHECK_EQ(order[0], 3);

    core_t *copy = core_new(core_get_config(core));
    core_walk_state(core, apply_to, copy);
    core_apply_finish(copy);
    core_pool_t *again = core_pool_find(copy, KV, 0);
    CHECK_EQ(core_pool_set_free_order(again, order, 1), 0);
    const uint32_t *order2;
    CHECK_EQ(core_pool_free_order(again, &order2), 1);
    CHECK_EQ(order2[0], 3);
    CHECK_EQ(alloc1(again, "new", CORE_ALLOC_PARTIAL, 2),
             alloc1(pool, "new", CORE_ALLOC_PARTIAL, 2));
    uint32_t twice[2] = {3, 3};
    CHECK_EQ(core_pool_set_free_order(again, twice, 2), CORE_EINVAL);
    char err[256];
    CHECK_EQ(core_check(copy, err, sizeof err), 0);
    core_free(copy);
    CK();
}

/* A rebuilt core (restart, load, promotion) does not know which pages were
 * read just before: core_recovered leases every OWNED page for one read
 * lease (core.h "What is durable"). */
TEST(after_core_recovered_owned_pages_are_read_leased_for_one_read_lease)
{
    setup(test_config()); /* read lease 5000 */
    core_pool_t *a = make_pool(KV, 0, 2);
    core_pool_t *b = make_pool(KV, 1, 2);
    own(a, "x", 0);
    own(a, "y", 0);
    own(b, "x", 0);
    core_recovered(core, 100000);
    /* inside the lease: a full pool evicts nothing (all or nothing refuses,
     * partial gets no page), in neither mode */
    CHECK_EQ(alloc1(a, "z", CORE_ALLOC_PARTIAL, 100001), -1);
    CHECK_EQ(alloc1(a, "z", CORE_ALLOC_ALL_OR_NOTHING, 104999), -1);
    CHECK_EQ(stats(a).evictions, 0);
    /* a delete drains the page until the lease's end; the other rank's
     * page of the key is not demoted */
    hf_slice x = K("x");
    core_delete(b, &x, 1, 102000);
    hf_slice key;
    char buf[CORE_KEY_TEXT_MAX];
    int64_t deadline;
    CHECK_EQ(core_page_get(b, 0, &key, buf, &deadline), CORE_PAGE_DRAINING);
    CHECK_EQ(deadline, 105000);
    CK();
    /* after it: eviction and freeing as before */
    int64_t p = alloc1(a, "z", CORE_ALLOC_PARTIAL, 105000);
    CHECK(p == 0 || p == 1);
    CHECK_EQ(stats(a).evictions, 1);
    core_pool_expire(b, 105000);
    CHECK_EQ(core_page_get(b, 0, NULL, NULL, NULL), CORE_PAGE_FREE);
    CK();
}

TEST(core_recovered_on_a_core_without_owned_pages_protects_nothing)
{
    setup(test_config());
    core_pool_t *a = make_pool(KV, 0, 1);
    core_recovered(core, 100000);
    own(a, "x", 100000);
    CHECK_EQ(alloc1(a, "y", CORE_ALLOC_PARTIAL, 100001), 0); /* x evicted at once */
    CHECK_EQ(stats(a).evictions, 1);
    CK();
}

/* Deadlines written on a clock that was ahead of this one (the wall clock
 * stepped back 700 s while the host was down, or a primary whose clock ran
 * ahead) pin no page for longer than its own lease once the rebuilt core
 * starts serving (core.h core_recovered). */
TEST(core_recovered_cuts_every_deadline_further_than_its_lease_from_now)
{
    core_config cfg = test_config(); /* reservation 600 s, read lease 5 s */
    cfg.write_lease_ms = 20000;
    cfg.release_grace_ms = 10000;
    setup(cfg);
    core_pool_t *a = make_pool(KV, 0, 4);
    const int64_t t0 = 10000000, t1 = t0 - 700000; /* t1: 700 s behind */
    int64_t reserved = alloc1(a, "r", CORE_ALLOC_PARTIAL, t0);
    int64_t written = own(a, "w", t0);
    CHECK_EQ(alloc1(a, "w", CORE_ALLOC_ALL_OR_NOTHING, t0), written); /* a hit: write lease */
    int64_t released = alloc1(a, "g", CORE_ALLOC_PARTIAL, t0);
    core_confirm(a, NULL, NULL, 0, &released, 1, t0, NULL); /* drains for the grace */
    int64_t deadline;
    CHECK_EQ(core_page_get(a, (uint64_t)reserved, NULL, NULL, &deadline), CORE_PAGE_RESERVED);
    CHECK_EQ(deadline, t0 + 600000);
    CK();

    core_recovered(core, t1);
    CK();
    CHECK_EQ(core_page_get(a, (uint64_t)reserved, NULL, NULL, &deadline), CORE_PAGE_RESERVED);
    CHECK_EQ(deadline, t1 + 600000);
    CHECK_EQ(core_page_get(a, (uint64_t)written, NULL, NULL, &deadline), CORE_PAGE_OWNED);
    CHECK_EQ(deadline, t1 + 20000); /* max(read lease, write lease) */
    CHECK_EQ(core_page_get(a, (uint64_t)released, NULL, NULL, &deadline), CORE_PAGE_DRAINING);
    CHECK_EQ(deadline, t1 + 20000); /* the longest of the three leases */
    /* and they end then: the drain and the write lease at t1 + 20 s */
    core_pool_expire(a, t1 + 20000);
    CHECK_EQ(core_page_get(a, (uint64_t)released, NULL, NULL, NULL), CORE_PAGE_FREE);
    CHECK_EQ(core_page_get(a, (uint64_t)reserved, NULL, NULL, NULL), CORE_PAGE_RESERVED);
    core_pool_expire(a, t1 + 600000);
    CHECK_EQ(core_page_get(a, (uint64_t)reserved, NULL, NULL, NULL), CORE_PAGE_FREE);
    CK();
}

TEST(core_recovered_leaves_deadlines_within_their_lease_alone)
{
    core_config cfg = test_config();
    cfg.write_lease_ms = 20000;
    setup(cfg);
    core_pool_t *a = make_pool(KV, 0, 2);
    int64_t reserved = alloc1(a, "r", CORE_ALLOC_PARTIAL, 1000000);
    int64_t written = own(a, "w", 1000000);
    CHECK_EQ(alloc1(a, "w", CORE_ALLOC_ALL_OR_NOTHING, 1000000), written);
    core_recovered(core, 1000000 + 30000); /* a restart 30 s later, no step */
    int64_t deadline;
    CHECK_EQ(core_page_get(a, (uint64_t)reserved, NULL, NULL, &deadline), CORE_PAGE_RESERVED);
    CHECK_EQ(deadline, 1000000 + 600000);
    CHECK_EQ(core_page_get(a, (uint64_t)written, NULL, NULL, &deadline), CORE_PAGE_OWNED);
    CHECK_EQ(deadline, 1000000 + 20000);
    CK();
}

/* A front end that split an all-or-nothing allocation over stripes and
 * could not serve one stripe undoes the others' (core_cancel): their
 * reservations are free at once, in the order they were taken, and their
 * hits' write leases end; a page that changed meanwhile is left alone. */
TEST(core_error_codes_are_in_their_own_range_and_each_has_a_sentence)
{
    const int codes[] = {CORE_ENOPOOL, CORE_EINVAL, CORE_EEXIST};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        CHECK(codes[i] <= CORE_EFIRST && codes[i] >= CORE_ELAST);
        CHECK(strcmp(core_strerror(codes[i]), core_strerror(1)) != 0);
        for (size_t j = 0; j < i; j++)
            CHECK(codes[i] != codes[j]);
    }
    CHECK(core_strerror(CORE_OK) != NULL && core_strerror(-1) != NULL);
}

TEST(cancel_frees_reservations_at_once_and_ends_hit_write_leases)
{
    setup(lease_config());
    core_pool_t *pool = make_pool(KV, 0, 4);
    int64_t pa = own(pool, "a", 0);
    hf_slice ks[4] = {K("a"), K("x"), K("y"), K("x")};
    int64_t pages[4];
    bool existed[4];
    core_allocate(pool, ks, 4, CORE_ALLOC_ALL_OR_NOTHING, 10, pages, existed);
    CHECK(pages[0] == pa && existed[0] && pages[1] >= 0 && pages[2] >= 0 && pages[3] == pages[1]);
    CHECK_EQ(stats(pool).reserved, 2);
    CHECK_EQ(stats(pool).write_leased, 1);
    /* a reservation confirmed meanwhile is no longer the allocation's to undo */
    CHECK_EQ(confirm1(pool, "y", pages[2], 11), 0);
    core_cancel(pool, ks, pages, existed, 4, 12);
    CK();
    core_pool_stats st = stats(pool);
    CHECK(st.reserved == 0 && st.draining == 0 && st.write_leased == 0 && st.owned == 2);
    CHECK_EQ(lookup1(pool, "y", 13), pages[2]);
    /* the page given back is the next one handed out, with no release grace */
    CHECK_EQ(alloc1(pool, "z", CORE_ALLOC_PARTIAL, 13), pages[1]);
    CHECK_EQ(stats(pool).write_leases_ended, 1); /* a's, ended by the cancel */
    CK();
}

int main(void)
{
    RUN(pool_init_is_idempotent_and_keeps_state_and_size);
    RUN(pool_init_rejects_too_many_pages_and_rank_out_of_range);
    RUN(pool_of_zero_pages_exists_and_never_gives_a_page);
    RUN(pool_of_a_billion_pages_is_created_without_per_page_work);
    RUN(allocate_new_key_reserves_a_free_page_until_confirmed);
    RUN(allocate_owned_key_is_a_hit_that_returns_its_page);
    RUN(allocate_of_a_reserved_key_gets_another_page);
    RUN(key_repeated_in_one_request_gets_one_page_and_the_same_answer);
    RUN(confirm_of_an_owned_page_by_the_same_key_is_a_harmless_noop);
    RUN(confirm_is_refused_unless_the_page_is_reserved_for_that_key);
    RUN(confirm_when_the_key_already_owns_a_page_keeps_that_page_and_frees_the_other);
    RUN(release_frees_only_reserved_pages);
    RUN(confirmations_apply_before_releases_of_the_same_call);
    RUN(reservation_expires_after_the_timeout_and_a_late_confirm_is_refused);
    RUN(partial_allocation_answers_minus_one_for_keys_that_find_no_page);
    RUN(all_or_nothing_reserves_no_new_key_when_they_do_not_all_fit_but_answers_hits);
    RUN(all_or_nothing_counts_evictable_pages_as_available);
    RUN(clock_eviction_takes_the_first_page_from_the_hand_whose_use_count_ran_out);
    RUN(a_key_used_more_often_outlives_one_confirmed_after_its_last_use);
    RUN(reads_change_no_eviction_order_beyond_the_keys_they_read);
    RUN(eviction_never_takes_a_reserved_page);
    RUN(eviction_skips_read_leased_pages_until_the_lease_ends);
    RUN(hits_of_a_request_are_never_evicted_for_its_other_keys);
    RUN(delete_frees_the_page_or_drains_it_while_read_leased);
    RUN(pool_clear_frees_every_page_and_refuses_later_confirms);
    RUN(clear_all_forgets_every_pool_of_every_namespace);
    RUN(a_key_is_complete_only_when_every_rank_of_the_namespace_owns_it);
    RUN(complete_reads_lease_the_key_on_every_rank);
    RUN(losing_a_key_on_one_rank_makes_its_pages_on_other_ranks_go_first);
    RUN(a_demoted_stack_full_of_stale_entries_is_compacted_and_keeps_the_live_demotion);
    RUN(complete_reads_at_tp_9_see_every_rank_and_use_every_column);
    RUN(a_demoted_page_that_is_used_again_no_longer_goes_first);
    RUN(the_most_recently_demoted_page_goes_first);
    RUN(keys_of_every_shape_are_distinct_and_round_trip);
    RUN(hex_keys_with_a_suffix_round_trip_at_every_bound_of_their_shape);
    RUN(suffixes_past_the_interned_bound_stay_external_and_lookups_intern_nothing);
    RUN(hex64_keys_pack_every_digit_at_every_position_and_keep_any_other_key_verbatim);
    RUN(namespaces_with_the_same_rank_are_separate_pools);
    RUN(exists_and_lookup_count_as_a_use_that_keeps_the_key_over_an_unused_one);
    RUN(key_index_survives_growth_and_many_deletions);
    RUN(key_index_removal_keeps_every_key_findable_for_every_tag_width);
    RUN(a_rewritten_hit_is_not_evicted_until_its_writer_confirms);
    RUN(a_write_lease_whose_writer_never_confirms_ends_at_the_write_lease_bound);
    RUN(a_write_lease_ends_only_when_every_writer_of_the_hit_confirmed);
    RUN(hits_get_no_write_lease_from_sglang_nor_from_a_vllm_allocation_that_failed);
    RUN(no_read_cuts_short_a_write_lease_that_runs_longer_than_its_read_lease);
    RUN(a_released_page_drains_for_the_grace_so_a_replayed_release_cannot_free_another_writers_page);
    RUN(a_rebuilt_pool_whose_highest_touched_page_is_free_gets_its_free_order_back);
    RUN(after_core_recovered_owned_pages_are_read_leased_for_one_read_lease);
    RUN(core_recovered_on_a_core_without_owned_pages_protects_nothing);
    RUN(core_recovered_cuts_every_deadline_further_than_its_lease_from_now);
    RUN(core_recovered_leaves_deadlines_within_their_lease_alone);
    RUN(cancel_frees_reservations_at_once_and_ends_hit_write_leases);
    RUN(core_error_codes_are_in_their_own_range_and_each_has_a_sentence);
    core_free(core);
    return TEST_SUMMARY();
}
