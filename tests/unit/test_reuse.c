/*
 * test_reuse.c: the prefix counters and the hit-ratio estimator
 * (src/core/reuse.h), alone and as the core feeds them (core.h
 * core_prefix_count), on streams whose answer is known.
 */
#include <stdlib.h>

#include "check.h"
#include "core/core.h"
#include "core/reuse.h"

/* Distinct 32-bit hashes for key numbers (an odd multiplier is a bijection). */
static uint32_t hash_of(uint32_t k)
{
    return k * 2654435761u + 0x9e3779b9u;
}

/* The estimate at scale j, in millionths (-1 with no sampled use). */
static int64_t ratio_at(const reuse_t *r, int j)
{
    uint64_t blocks, hits[REUSE_SCALES];
    reuse_figures(r, &blocks, hits);
    return blocks ? (int64_t)(hits[j] * 1000000 / blocks) : -1;
}

TEST(prefix_counts_the_leading_run_of_present_keys_not_every_present_key)
{
    reuse_prefix c = {0};
    bool a[] = {true, true, false, true};
    reuse_prefix_count(&c, a, 4);
    CHECK_EQ(c.requests, 1);
    CHECK_EQ(c.blocks, 4);
    CHECK_EQ(c.hit_blocks, 2);
    bool none[] = {false, true};
    reuse_prefix_count(&c, none, 2);
    reuse_prefix_count(&c, a, 0);
    CHECK_EQ(c.requests, 3);
    CHECK_EQ(c.blocks, 6);
    CHECK_EQ(c.hit_blocks, 2);
}

/* A cyclic scan of K keys under LRU: every use misses with fewer than K
 * pages, every use after the first round hits with more. */
TEST(cyclic_scan_of_k_keys_estimates_0_below_k_pages_and_1_above)
{
    reuse_t *r = reuse_new_at(1000, 1); /* exact; scales: 250, 500, 1000, 2000, 4000 */
    const uint32_t K = 1500, rounds = 10, chain = 10;
    for (uint32_t round = 0; round < rounds; round++)
        for (uint32_t k = 0; k < K; k += chain) {
            reuse_begin(r);
            for (uint32_t i = 0; i < chain; i++)
                reuse_key(r, hash_of(k + i));
        }
    CHECK_EQ(ratio_at(r, 0), 0);
    CHECK_EQ(ratio_at(r, 1), 0);
    CHECK_EQ(ratio_at(r, 2), 0);
    CHECK_EQ(ratio_at(r, 3), 900000); /* (rounds - 1) / rounds: the first round misses */
    CHECK_EQ(ratio_at(r, 4), 900000);
    reuse_free(r);
}

TEST(a_hit_after_a_miss_in_the_same_request_is_not_a_prefix_hit)
{
    reuse_t *r = reuse_new_at(100, 1); /* exact */
    reuse_begin(r);
    reuse_key(r, hash_of(1));
    reuse_begin(r);
    reuse_key(r, hash_of(2)); /* a miss first */
    reuse_key(r, hash_of(1)); /* then a key that every scale holds */
    CHECK_EQ(ratio_at(r, 4), 0);
    reuse_begin(r);
    reuse_key(r, hash_of(1));
    reuse_key(r, hash_of(2));
    CHECK_EQ(ratio_at(r, 4), 2 * 1000000 / 5);
    reuse_free(r);
}

/* Pools far larger than the simulation: keys are sampled by hash and the
 * caches shrink by the same rate; the scan's answer stays 0 and 1. */
TEST(sampled_estimate_of_a_large_pool_keeps_the_cyclic_scan_answer_in_bounded_memory)
{
    reuse_t *r = reuse_new(1000000); /* rate REUSE_MAX_KEYS / 4M */
    CHECK(r->threshold < (uint64_t)1 << 32);
    CHECK(reuse_memory(r) <=
          16 * (REUSE_MAX_KEYS + REUSE_HOT) + 4 * 2 * REUSE_MAX_KEYS + sizeof(reuse_t));
    const uint32_t K = 1500000, rounds = 3;
    for (uint32_t round = 0; round < rounds; round++)
        for (uint32_t k = 0; k < K; k++) {
            reuse_begin(r);
            reuse_key(r, hash_of(k));
        }
    uint64_t blocks, hits[REUSE_SCALES];
    reuse_figures(r, &blocks, hits);
    double expect = (double)rounds * K * REUSE_MAX_KEYS / 4e6; /* about K x rate a round */
    CHECK((double)blocks > 0.8 * (double)expect && (double)blocks < 1.2 * (double)expect);
    CHECK_EQ(ratio_at(r, 2), 0);      /* 1M pages < K */
    CHECK_EQ(ratio_at(r, 3), 666666); /* 2M pages > K: 2 rounds of 3 hit */
    reuse_free(r);
    r = reuse_new(4000000000ull);
    CHECK(reuse_memory(r) <=
          16 * (REUSE_MAX_KEYS + REUSE_HOT) + 4 * 2 * REUSE_MAX_KEYS + sizeof(reuse_t));
    reuse_free(r);
}

/* A prefix that every request starts with, sampled by hash or not: it
 * weighs one key's worth in the estimate either way, not 1/rate of them or
 * none. Each request: the shared key, then 7 keys never seen before
 * (misses). The ratio is 1/8 at every scale, whatever the sample. */
TEST(hot_shared_prefix_counts_as_one_key_whether_sampled_or_not)
{
    reuse_t *probe = reuse_new(1000000); /* rate REUSE_MAX_KEYS / 4M */
    uint64_t threshold = probe->threshold;
    reuse_free(probe);
    uint32_t sampled = 0, unsampled = 0; /* a shared key of each kind */
    for (uint32_t k = 1; !sampled || !unsampled; k++) {
        uint32_t h = hash_of(k) * 2246822519u; /* another bijection */
        if (h < threshold && !sampled)
            sampled = h;
        else if (h >= threshold && !unsampled)
            unsampled = h;
    }
    const uint32_t shared_keys[2] = {sampled, unsampled}, per = 8, requests = 200000;
    for (int t = 0; t < 2; t++) {
        reuse_t *r = reuse_new(1000000);
        uint32_t fresh = 0;
        for (uint32_t q = 0; q < requests; q++) {
            reuse_begin(r);
            reuse_key(r, shared_keys[t]);
            for (uint32_t i = 1; i < per; i++)
                reuse_key(r, hash_of(fresh++));
        }
        for (int j = 0; j < REUSE_SCALES; j++) {
            int64_t ppm = ratio_at(r, j);
            CHECK(ppm > 125000 - 10000 && ppm < 125000 + 10000);
        }
        reuse_free(r);
    }
}

TEST(window_halves_the_counts_and_keeps_the_ratio)
{
    reuse_t *r = reuse_new_at(10, 1); /* 2 keys alternating: hits from the third use */
    for (uint32_t i = 0; i < REUSE_WINDOW + 10; i++) {
        reuse_begin(r);
        reuse_key(r, hash_of(i & 1));
    }
    uint64_t blocks, hits[REUSE_SCALES];
    reuse_figures(r, &blocks, hits);
    CHECK(blocks < REUSE_WINDOW);
    CHECK(blocks >= REUSE_WINDOW / 2);
    CHECK(ratio_at(r, 4) >= 999990); /* 2 misses of 2^20 uses, halved */
    reuse_free(r);
}

/* ---- as the core feeds them ---- */

static core_config cfg(void)
{
    return core_config_default(4000000000ull, 64, 7);
}

static int events;
static void count_event(void *ctx, const core_event *ev)
{
    (void)ctx;
    (void)ev;
    events++;
}

static void save(core_t *c, hf_slice ns, uint32_t rank, const hf_slice *keys, size_t n)
{
    CHECK(n <= 64);
    core_pool_t *pool = core_pool_find(c, ns, rank);
    int64_t pages[64];
    core_allocate(pool, keys, n, CORE_ALLOC_ALL_OR_NOTHING, 1, pages, NULL);
    core_confirm(pool, keys, pages, n, NULL, 0, 1, NULL);
}

static void stats_of(core_t *c, hf_slice ns, uint32_t rank, core_pool_stats *st)
{
    core_pool_get_stats(core_pool_find(c, ns, rank), 1, st);
}

/* 64 keys "k0".."k63" (names in one buffer, slices into it). */
static void make_keys(char names[64][16], hf_slice keys[64])
{
    for (int i = 0; i < 64; i++) {
        snprintf(names[i], sizeof names[i], "k%d", i);
        keys[i] = (hf_slice){names[i], strlen(names[i])};
    }
}

TEST(core_reads_feed_the_first_pools_figures_and_write_no_event)
{
    core_config conf = cfg();
    core_t *c = core_new(&conf);
    hf_slice ns = HF_SLICE_LIT("kv");
    core_pool_init(c, ns, 0, 100, NULL);
    core_pool_init(c, ns, 1, 100, NULL);
    char names[64][16];
    hf_slice keys[64];
    make_keys(names, keys);
    save(c, ns, 0, keys, 48);
    save(c, ns, 1, keys, 48);
    core_set_observer(c, count_event, NULL);
    bool present[64];
    core_complete_exists(c, ns, keys, 64, 2, present);
    core_prefix_count(c, ns, present, 64);
    core_pool_stats first, second;
    stats_of(c, ns, 0, &first);
    uint64_t sampled = first.est_blocks; /* the keys the hash samples, ~1/8 */
    CHECK(sampled > 0 && sampled < 64);
    core_pool_t *rank1 = core_pool_find(c, ns, 1);
    core_exists(rank1, keys, 64, 2, present); /* rank 1: counted, not simulated */
    core_prefix_count(c, ns, present, 64);
    CHECK_EQ(events, 0);
    stats_of(c, ns, 0, &first);
    stats_of(c, ns, 1, &second);
    CHECK_EQ(first.prefix_requests, 2);
    CHECK_EQ(first.prefix_blocks, 128);
    CHECK_EQ(first.prefix_hits, 96);
    CHECK_EQ(first.est_blocks, sampled); /* only the completeness read */
    CHECK_EQ(second.prefix_requests, 0);
    CHECK_EQ(second.est_blocks, 0);
    core_pool_t *rank0 = core_pool_find(c, ns, 0);
    core_exists(rank0, keys, 64, 2, present);
    stats_of(c, ns, 0, &first);
    CHECK_EQ(first.est_blocks, 2 * sampled); /* the same keys sampled again */
    /* the largest scale holds every sampled key, the missed ones too, as
     * the saves after a miss would: the second read hits with each */
    CHECK_EQ(first.est_hits[REUSE_SCALES - 1], sampled);
    /* a namespace without pools counts nothing */
    core_prefix_count(c, HF_SLICE_LIT("none"), present, 3);
    core_clear_all(c);
    CHECK_EQ(events, 1); /* the clear itself */
    core_free(c);
}

TEST(core_keeps_estimators_for_at_most_core_reuse_ns_namespaces)
{
    core_config conf = cfg();
    core_t *c = core_new(&conf);
    char name[16];
    char names[64][16];
    hf_slice keys[64];
    make_keys(names, keys);
    bool present[64];
    for (int i = 0; i < CORE_REUSE_NS + 2; i++) {
        snprintf(name, sizeof name, "ns%d", i);
        hf_slice ns = {name, strlen(name)};
        core_pool_init(c, ns, 0, 100, NULL);
        core_complete_exists(c, ns, keys, 64, 1, present); /* some sampled */
    }
    int with = 0;
    for (int i = 0; i < CORE_REUSE_NS + 2; i++) {
        snprintf(name, sizeof name, "ns%d", i);
        core_pool_stats st;
        stats_of(c, (hf_slice){name, strlen(name)}, 0, &st);
        with += st.est_blocks > 0;
    }
    CHECK_EQ(with, CORE_REUSE_NS);
    core_free(c);
}

int main(int argc, char **argv)
{
    TEST_SELECT(argc, argv);
    RUN(prefix_counts_the_leading_run_of_present_keys_not_every_present_key);
    RUN(cyclic_scan_of_k_keys_estimates_0_below_k_pages_and_1_above);
    RUN(a_hit_after_a_miss_in_the_same_request_is_not_a_prefix_hit);
    RUN(sampled_estimate_of_a_large_pool_keeps_the_cyclic_scan_answer_in_bounded_memory);
    RUN(hot_shared_prefix_counts_as_one_key_whether_sampled_or_not);
    RUN(window_halves_the_counts_and_keeps_the_ratio);
    RUN(core_reads_feed_the_first_pools_figures_and_write_no_event);
    RUN(core_keeps_estimators_for_at_most_core_reuse_ns_namespaces);
    return TEST_SUMMARY();
}
