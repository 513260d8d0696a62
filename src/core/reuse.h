/*
 * reuse.h: a namespace's prefix-hit figures, volatile (core.h "What is
 * durable": nothing here is an event, a log record or a replicated byte).
 *
 * The prefix counters (reuse_prefix)
 *   A completeness read as an engine sees it (vLLM batch_exists, SGLang
 *   exists): one request of n blocks (the keys asked) whose hit is the
 *   leading run of present keys (what the engine loads instead of
 *   computing). reuse_prefix_count is that rule, for every engine.
 *
 * The estimator (reuse_t): the prefix-hit ratio at other pool sizes
 *   A miniature simulation (Waldspurger et al., "Cache Modeling and
 *   Optimization using Miniature Simulations", USENIX ATC '17) of exact
 *   LRU on the keys sampled by hash as in SHARDS (Waldspurger et al.,
 *   "Efficient MRC Construction with SHARDS", FAST '15): a key is sampled
 *   when its hash is below rate * 2^32, and a simulated cache of scale x
 *   holds x * pages * rate sampled keys, for the REUSE_SCALES scales 2^(k/4),
 *   k = -12..8 (1/8 to 4 times the pool's pages, 21 sizes, each 19% above
 *   the one before). LRU is a stack algorithm (a cache of c keys holds the
 *   c most recently used), so one simulation answers every size: a hit's
 *   stack distance (the weight of the keys used since, itself included)
 *   says the smallest scale that holds it. The distance is a prefix sum
 *   over the keys' last-use times (Olken's method, in a Fenwick tree over a
 *   ring of times that is compacted when it fills), so an access costs
 *   O(log keys) whatever the number of scales. A request's sampled keys, in
 *   order, have a leading run of hits at each scale (the sampled keys
 *   before the first one that scale misses): their sums over the requests
 *   divided by the sampled keys estimate the prefix-hit ratio at that
 *   scale. The server's eviction is a CLOCK rule within half a point of
 *   exact LRU (docs/eviction.md), so LRU is what the simulation runs.
 *
 *   rate = min(1 / REUSE_RATE_DIV, REUSE_MAX_KEYS / (4 * pages)): a request
 *   costs at most one simulated access per REUSE_RATE_DIV keys, and at most
 *   REUSE_MAX_KEYS keys are simulated (the cost: docs/performance.md, "What
 *   the hit-ratio estimate costs"; the accuracy: docs/sizing.md,
 *   "Accuracy"). reuse_new_at(pages, 1) simulates pools up to
 *   REUSE_MAX_KEYS / 4 pages exactly (the unit tests of the rules). The
 *   range stops at 4 times: 8 times would halve the rate of pools above
 *   2,048 pages, and at half the rate the estimate at 1x missed the
 *   measured ratio by more than a point on a shipped trace (docs/sizing.md).
 *   Hot prefixes: a few keys, the first blocks of a prompt every request
 *   shares, can carry several percent of all uses and always hit; sampled
 *   by hash, such a key is in the sample or not, and the estimate moves by
 *   its whole weight (docs/sizing.md, "Accuracy"). So the first REUSE_HEAD
 *   keys of each request are also counted in a Space-Saving table of
 *   REUSE_HOT keys (Metwally et al., ICDT '05), and a key whose guaranteed
 *   count there reaches 1/REUSE_HOT_SHARE of those uses (and
 *   REUSE_HOT_MIN) is simulated whether sampled or not, as one key rather
 *   than 1/rate of them: every simulated key has a weight, REUSE_UNIT for a
 *   sampled one and REUSE_UNIT * rate for a hot one, and both the caches'
 *   sizes and the distances are in weights.
 *   Window: the counts are halved whenever REUSE_WINDOW sampled block uses
 *   (in weights) have been counted, so the ratios weigh the last
 *   REUSE_WINDOW to 2 x REUSE_WINDOW sampled uses (all of them before that).
 *   Memory: per slot of the index (a power of two, at least twice the keys
 *   sampled) 6 bytes, and per entry of the ring of times (twice the keys) 2
 *   bytes and 4 of the Fenwick tree: at most REUSE_MAX_KEYS + REUSE_HOT
 *   keys, so reuse_memory() <= REUSE_MEMORY_MAX = 6 * 16,384 + 6 * 16,416 +
 *   4 = 196,804 bytes plus sizeof(reuse_t) per estimator.
 *
 * The advice (reuse_advise): from the figures, the smallest pool whose
 *   estimated ratio reaches a target (linear in pages between the two
 *   scales around it, so never below what the curve says), the gain of
 *   doubling the pool and the cost of halving it. Pure arithmetic.
 *
 * Pure (no I/O, no clock, no lock); the caller serializes.
 */
#ifndef HF_CORE_REUSE_H
#define HF_CORE_REUSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define REUSE_SCALES 21    /* 2^(k/4) times the pages, k = -12..8 */
#define REUSE_SCALE_ONE 12 /* the index of scale 1 */
/* The coarse curve: the five scales 0.25, 0.5, 1, 2 and 4 (every fourth
 * from index 4), all that a Redis module without the capability
 * "fine-curve" answers (src/wire/wire.h). */
#define REUSE_COARSE 5
#define REUSE_COARSE_FIRST 4
#define REUSE_COARSE_STEP 4
static inline bool reuse_scale_in(bool coarse, int j)
{
    return !coarse ||
           (j >= REUSE_COARSE_FIRST && (j - REUSE_COARSE_FIRST) % REUSE_COARSE_STEP == 0);
}
/* sampled keys simulated, at most; a build may set it lower to measure the
 * sampled estimate on small traces (docs/sizing.md, "Accuracy") */
#ifndef REUSE_MAX_KEYS
#define REUSE_MAX_KEYS 8192u
#endif
#ifndef REUSE_RATE_DIV
#define REUSE_RATE_DIV 4 /* the rate is at most 1 / REUSE_RATE_DIV */
#endif
#define REUSE_WINDOW (1u << 20)
#define REUSE_HEAD 4       /* a request's first keys, counted for hot prefixes */
#define REUSE_HOT 16       /* Space-Saving counters */
#define REUSE_HOT_SHARE 32 /* hot: at least 1/32 of the head keys' uses */
#define REUSE_HOT_MIN 16   /* and at least 16 uses */
#define REUSE_UNIT 65536u  /* a sampled key's weight */
#define REUSE_BUCKETS 512  /* a distance's scale is looked up by its bucket of 1/512 */
/* reuse_memory() beyond sizeof(reuse_t), at most (above) */
#define REUSE_MEMORY_MAX (6u * 16384u + 12u * (REUSE_MAX_KEYS + REUSE_HOT) + 4u)

/* The scales' names, "0.125" to "4" (4 significant digits), as /v1/stats
 * and /metrics write them, and their values. */
extern const char *const reuse_scale_names[REUSE_SCALES];
extern const double reuse_scales[REUSE_SCALES];

typedef struct reuse_prefix {
    uint64_t requests, blocks, hit_blocks;
} reuse_prefix;

/* Count one request: n keys, present[i] whether key i was found. */
void reuse_prefix_count(reuse_prefix *c, const bool *present, size_t n);

/* The estimator. Its members are reuse.c's; only reuse_key reads three. */
typedef struct reuse {
    uint64_t threshold; /* a key is sampled when its hash is below this */
    uint8_t run;        /* the request's leading run: the largest scale index missed */
    uint32_t pos;       /* the request's keys so far */
    uint64_t pages;
    uint32_t rate_div;                  /* the rate is at most 1 / rate_div */
    uint32_t hot_weight;                /* a hot key's weight: REUSE_UNIT x rate */
    uint32_t cap, used;                 /* simulated keys: room, in use */
    uint32_t size[REUSE_SCALES];        /* each scale's cache, in weights */
    uint32_t bucket_shift;              /* scale_of's table: distances >> this ... */
    uint8_t first_scale[REUSE_BUCKETS]; /* ... the first scale that could hold them */
    uint32_t total;                     /* weight of the simulated keys */
    uint32_t fen_total;                 /* weight in the tree: theirs and the evicted keys' */
    uint32_t ring_len, tail, now;       /* the ring of times: length, least recent, next */
    uint32_t *keys;                     /* the index: hashes, open addressing, linear probing */
    uint16_t *times;                    /* each key's last use, in the ring (UINT16_MAX: empty) */
    uint16_t *ring;                     /* time -> slot and a hot flag, or UINT16_MAX */
    uint32_t *fen;                      /* Fenwick tree of the weights by time, 1-based */
    uint32_t slot_mask;
    struct reuse_hot {
        uint32_t key, count, error; /* Space-Saving: count - error <= uses */
    } hot[REUSE_HOT];
    uint32_t nhot;
    uint64_t head_uses;                /* keys counted in hot[] */
    uint64_t blocks;                   /* sampled block uses in the window, in weights */
    uint64_t by_run[REUSE_SCALES + 1]; /* of them, by their request's run so far */
} reuse_t;

/* An estimator for pools of `pages` pages (never NULL: out of memory aborts),
 * at a rate of at most 1 / REUSE_RATE_DIV; reuse_new_at: at most 1 /
 * rate_div (1: pools up to REUSE_MAX_KEYS / 4 pages simulated exactly). */
reuse_t *reuse_new(uint64_t pages);
reuse_t *reuse_new_at(uint64_t pages, uint32_t rate_div);
void reuse_free(reuse_t *r);
/* Start over for pools of `pages` pages (counts and simulated keys dropped). */
void reuse_reset(reuse_t *r, uint64_t pages);
size_t reuse_memory(const reuse_t *r);

/* A request starts; then reuse_key for each of its keys, in order. */
static inline void reuse_begin(reuse_t *r)
{
    r->run = 0;
    r->pos = 0;
}

void reuse__access(reuse_t *r, uint32_t hash, uint32_t weight);
void reuse__head(reuse_t *r, uint32_t hash);

/* A key of the request, by its hash (the caller's, stable for the key). */
static inline void reuse_key(reuse_t *r, uint32_t hash)
{
    if (r->pos < REUSE_HEAD) {
        r->pos++;
        reuse__head(r, hash);
    } else if (hash < r->threshold) {
        reuse__access(r, hash, REUSE_UNIT);
    }
}

/* The window's sampled block uses, and how many of them were in their
 * request's leading run of hits at each scale (in sampled keys: the
 * weights over REUSE_UNIT). */
void reuse_figures(const reuse_t *r, uint64_t *blocks, uint64_t hits[REUSE_SCALES]);

/* The advice for a pool of `pages` pages per rank, from reuse_figures'
 * blocks and hits; coarse: only the coarse curve's scales are known (the
 * others are not read). target_ppm: the hit ratio wanted, in millionths,
 * or -1 for the default, the ratio at the largest scale less
 * REUSE_TARGET_SLACK. known is false without sampled uses or pages. */
#define REUSE_TARGET_SLACK 10000 /* 1 point, in millionths */
typedef struct reuse_advice {
    bool known;
    bool reached;         /* some scale up to 4 reaches the target */
    bool coarse;          /* from the coarse curve's five scales */
    int64_t target_ppm;   /* the target it sought */
    uint64_t pages;       /* the smallest pool reaching it (the largest scale's if none) */
    int64_t ratio_ppm;    /* the estimate at scale 1 */
    int64_t double_ppm;   /* the estimate at scale 2 less that at 1 */
    uint64_t halve_frees; /* pages that halving frees */
    int64_t halve_ppm;    /* the estimate at scale 1 less that at 1/2 */
} reuse_advice;
void reuse_advise(uint64_t pages, uint64_t blocks, const uint64_t hits[REUSE_SCALES], bool coarse,
                  int64_t target_ppm, reuse_advice *out);

#endif
