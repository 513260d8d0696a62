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

/* The index of the scale 2^(q/4). */
#define AT(q) (REUSE_SCALE_ONE + (q))
#define TOP (REUSE_SCALES - 1)

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
    reuse_t *r = reuse_new_at(1000, 1); /* exact; scales: 125 to 4000, 1414 then 1682 */
    const uint32_t K = 1500, rounds = 10, chain = 10;
    for (uint32_t round = 0; round < rounds; round++)
        for (uint32_t k = 0; k < K; k += chain) {
            reuse_begin(r);
            for (uint32_t i = 0; i < chain; i++)
                reuse_key(r, hash_of(k + i));
        }
    for (int j = 0; j <= AT(2); j++) /* up to 1414 pages */
        CHECK_EQ(ratio_at(r, j), 0);
    for (int j = AT(3); j <= TOP; j++)    /* from 1682 */
        CHECK_EQ(ratio_at(r, j), 900000); /* (rounds - 1) / rounds: the first round misses */
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
    CHECK_EQ(ratio_at(r, TOP), 0);
    reuse_begin(r);
    reuse_key(r, hash_of(1));
    reuse_key(r, hash_of(2));
    CHECK_EQ(ratio_at(r, TOP), 2 * 1000000 / 5);
    reuse_free(r);
}

/* Pools far larger than the simulation: keys are sampled by hash and the
 * caches shrink by the same rate; the scan's answer stays 0 and 1. */
TEST(sampled_estimate_of_a_large_pool_keeps_the_cyclic_scan_answer_in_bounded_memory)
{
    reuse_t *r = reuse_new(1000000); /* rate REUSE_MAX_KEYS / 4M */
    CHECK(r->threshold < (uint64_t)1 << 32);
    CHECK(reuse_memory(r) <= REUSE_MEMORY_MAX + sizeof(reuse_t));
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
    CHECK_EQ(ratio_at(r, AT(0)), 0);      /* 1M pages < K */
    CHECK_EQ(ratio_at(r, AT(4)), 666666); /* 2M pages > K: 2 rounds of 3 hit */
    reuse_free(r);
    r = reuse_new(4000000000ull);
    CHECK(reuse_memory(r) <= REUSE_MEMORY_MAX + sizeof(reuse_t));
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
    CHECK(ratio_at(r, TOP) >= 999990); /* 2 misses of 2^20 uses, halved */
    reuse_free(r);
}

/* Exact LRU by brute force: keys[0] the most recent; returns the key's
 * stack distance (1-based), 0 for a miss; keeps at most `cap` keys. */
static uint32_t lru_use(uint32_t *keys, uint32_t *n, uint32_t cap, uint32_t key)
{
    uint32_t d = 0;
    for (uint32_t i = 0; i < *n; i++)
        if (keys[i] == key) {
            d = i + 1;
            break;
        }
    uint32_t move = d ? d - 1 : (*n < cap ? (*n)++ : cap - 1);
    memmove(keys + 1, keys, move * sizeof *keys);
    keys[0] = key;
    return d;
}

/* At rate 1 (every key simulated, weights equal) the estimate is exact LRU
 * at all 21 sizes: checked against a brute-force LRU stack on a skewed
 * random stream long enough to renumber the ring of times many times. */
TEST(every_scale_matches_a_brute_force_lru_on_a_random_stream)
{
    const uint64_t pages = 100; /* sizes 13 to 400 keys */
    reuse_t *r = reuse_new_at(pages, 1);
    uint32_t size[REUSE_SCALES];
    for (int j = 0; j < REUSE_SCALES; j++)
        size[j] = r->size[j] / REUSE_UNIT;
    uint32_t *stack = calloc(size[TOP], sizeof *stack), n = 0;
    uint64_t hits[REUSE_SCALES] = {0}, blocks = 0;
    uint64_t seed = 12345;
    for (int q = 0; q < 30000; q++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t len = 1 + (uint32_t)(seed >> 59);
        uint32_t run = 0; /* the first scale that holds every key so far */
        reuse_begin(r);
        for (uint32_t i = 0; i < len; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            uint32_t x = (uint32_t)(seed >> 33) % 1200;
            uint32_t key = x % 7 ? x % 300 : x; /* 6 of 7 from 300 keys */
            uint32_t d = lru_use(stack, &n, size[TOP], key);
            uint32_t s = REUSE_SCALES;
            for (int j = 0; d && j < REUSE_SCALES; j++)
                if (d <= size[j]) {
                    s = (uint32_t)j;
                    break;
                }
            if (s > run)
                run = s;
            for (uint32_t j = run; j < REUSE_SCALES; j++)
                hits[j]++;
            blocks++;
            reuse_key(r, hash_of(key));
        }
    }
    uint64_t got_blocks, got[REUSE_SCALES];
    reuse_figures(r, &got_blocks, got);
    CHECK_EQ(got_blocks, blocks);
    for (int j = 0; j < REUSE_SCALES; j++)
        CHECK_EQ(got[j], hits[j]);
    CHECK(hits[0] > 0 && hits[TOP] < blocks && hits[0] < hits[TOP]);
    free(stack);
    reuse_free(r);
}

/* The cyclic scan of 1500 keys on 1000 pages: nothing below 1500 pages,
 * 0.9 from there. */
TEST(advice_is_the_smallest_pool_reaching_the_target_never_below_the_curve)
{
    reuse_t *r = reuse_new_at(1000, 1);
    for (uint32_t round = 0; round < 10; round++)
        for (uint32_t k = 0; k < 1500; k += 10) {
            reuse_begin(r);
            for (uint32_t i = 0; i < 10; i++)
                reuse_key(r, hash_of(k + i));
        }
    uint64_t blocks, hits[REUSE_SCALES];
    reuse_figures(r, &blocks, hits);
    reuse_advice a;
    reuse_advise(1000, blocks, hits, false, -1, &a); /* 1 point below 0.9 */
    CHECK(a.known && a.reached && !a.coarse);
    CHECK_EQ(a.target_ppm, 890000);
    CHECK(a.pages > 1414 && a.pages <= 1682); /* between the scales 1.414 and 1.682 */
    CHECK_EQ(a.ratio_ppm, 0);
    CHECK_EQ(a.double_ppm, 900000);
    CHECK_EQ(a.halve_frees, 500);
    CHECK_EQ(a.halve_ppm, 0);
    reuse_advise(1000, blocks, hits, false, 0, &a); /* a target of 0: the smallest scale */
    CHECK(a.reached);
    CHECK_EQ(a.pages, 125);
    reuse_advise(1000, blocks, hits, false, 950000, &a); /* above the curve */
    CHECK(a.known && !a.reached);
    CHECK_EQ(a.pages, 4000);
    /* the coarse curve (a Redis node without "fine-curve") reads only the
     * scales 0.25 to 4: between 1000 pages (0) and 2000 (0.9), above the
     * fine answer, never below it; the other figures are the same */
    uint64_t coarse[REUSE_SCALES] = {0};
    for (int j = REUSE_COARSE_FIRST; j < REUSE_SCALES; j += REUSE_COARSE_STEP)
        coarse[j] = hits[j];
    reuse_advise(1000, blocks, coarse, true, -1, &a);
    CHECK(a.known && a.reached && a.coarse);
    CHECK_EQ(a.target_ppm, 890000);
    CHECK_EQ(a.pages, 1989); /* 1000 + 1000 x 0.89 / 0.9, rounded up */
    CHECK_EQ(a.double_ppm, 900000);
    CHECK_EQ(a.halve_ppm, 0);
    reuse_advise(1000, 0, hits, false, -1, &a);
    CHECK(!a.known);
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
    RUN(every_scale_matches_a_brute_force_lru_on_a_random_stream);
    RUN(advice_is_the_smallest_pool_reaching_the_target_never_below_the_curve);
    RUN(core_reads_feed_the_first_pools_figures_and_write_no_event);
    RUN(core_keeps_estimators_for_at_most_core_reuse_ns_namespaces);
    return TEST_SUMMARY();
}
