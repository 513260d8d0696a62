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
 *   when its hash is below rate * 2^32, and the simulated caches hold
 *   scale * pages * rate sampled keys, for the REUSE_SCALES scales 0.25,
 *   0.5, 1, 2 and 4 of the pool's pages. LRU is a stack algorithm (a cache
 *   of c keys holds the c most recently used), so one list with a segment
 *   per scale simulates the five caches at once: an access costs one hash
 *   probe and at most five boundary moves. A request's sampled keys, in
 *   order, have a leading run of hits at each scale (the sampled keys
 *   before the first one that scale misses): their sums over the requests
 *   divided by the sampled keys estimate the prefix-hit ratio at that
 *   scale. The server's eviction is a CLOCK rule within half a point of
 *   exact LRU (docs/eviction.md), so LRU is what the simulation runs.
 *
 *   rate = min(1 / REUSE_RATE_DIV, REUSE_MAX_KEYS / (4 * pages)): a request
 *   costs at most one simulated access per 8 keys, and at most 8,192 keys
 *   are simulated (the cost: docs/performance.md, "What the hit-ratio
 *   estimate costs"). Both bounds were chosen on the shipped traces
 *   (docs/sizing.md, "Accuracy"): at a rate of 1/8 the estimate stays
 *   within the targets there, at 1/16 it does not.
 *   reuse_new_at(pages, 1) simulates pools up to REUSE_MAX_KEYS / 4 pages
 *   exactly (the unit tests of the rules).
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
 *   sizes and the counts are in weights.
 *   Window: the counts are halved whenever REUSE_WINDOW sampled block uses
 *   (in weights) have been counted, so the ratios weigh the last
 *   REUSE_WINDOW to 2 x REUSE_WINDOW sampled uses (all of them before that).
 *   Memory: 16 bytes per simulated key and an index of 4-byte slots (a
 *   power of two, at least twice the keys): at most REUSE_MAX_KEYS +
 *   REUSE_HOT keys, so reuse_memory() <= 16 * 8,208 + 4 * 16,384 +
 *   sizeof(reuse_t) = 196,864 + sizeof(reuse_t) bytes per estimator.
 *
 * Pure (no I/O, no clock, no lock); the caller serializes.
 */
#ifndef HF_CORE_REUSE_H
#define HF_CORE_REUSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define REUSE_SCALES 5 /* 0.25, 0.5, 1, 2, 4 times the pages */
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

/* The scales' names, "0.25" to "4", as /v1/stats and /metrics write them. */
extern const char *const reuse_scale_names[REUSE_SCALES];

typedef struct reuse_prefix {
    uint64_t requests, blocks, hit_blocks;
} reuse_prefix;

/* Count one request: n keys, present[i] whether key i was found. */
void reuse_prefix_count(reuse_prefix *c, const bool *present, size_t n);

/* The estimator. Its members are reuse.c's; only reuse_key reads three. */
typedef struct reuse {
    uint64_t threshold; /* a key is sampled when its hash is below this */
    uint8_t run;        /* the request's leading run: the largest segment seen */
    uint32_t pos;       /* the request's keys so far */
    uint64_t pages;
    uint32_t rate_div;            /* the rate is at most 1 / rate_div */
    uint32_t hot_weight;          /* a hot key's weight: REUSE_UNIT x rate */
    uint32_t cap, used;           /* simulated keys: room, in use */
    uint32_t size[REUSE_SCALES];  /* weight of each segment, at most */
    uint32_t count[REUSE_SCALES]; /* weight of each segment */
    uint32_t last[REUSE_SCALES];  /* each segment's least recent key */
    uint32_t head, free;          /* the most recent key; a list of unused entries */
    struct reuse_entry {
        uint32_t key, prev, next; /* hash; list links (entry numbers) */
        uint32_t seg : 8, weight : 24;
    } * e; /* 16 bytes: an access reads one line per entry */
    uint32_t *slots;
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

#endif
