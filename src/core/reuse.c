/*
 * reuse.c: see reuse.h.
 *
 * The simulated keys live in the index (keys[] and times[]: open
 * addressing, linear probing, backward-shift deletion, load <= 1/2), each
 * with the time of its last use (NIL16: the slot is empty). The ring maps a
 * time to the slot of the key last used then and whether that use was a hot
 * key's (RING_HOT), or NIL16 once that key was used again or left. The
 * Fenwick tree sums the weights by time, so the weight of the keys used
 * after time t is fen_total - prefix(t).
 *
 * What an access costs, the read path's (docs/performance.md):
 * - Appending at the newest time sets that node of the tree from its
 *   children (times come in order: a node is complete once its time
 *   comes, so nodes past the newest time are never kept up to date), one
 *   step on average; a removal walks up only to the newest time.
 * - An evicted key (the least recent) stays in the tree: every distance
 *   asked is of a live key, used after every evicted one, so the evicted
 *   weights cancel out of fen_total - prefix(t).
 * - Times run from 0 to ring_len - 1, ring_len twice the keys: when the
 *   ring is full, the live times are renumbered 0, 1, ... in order and the
 *   tree rebuilt, once per cap accesses at least (amortized O(1)). The
 *   least recent key is the first live time from tail on.
 */
#include "core/reuse.h"

#include <string.h>

#include "util/hf_assert.h"
#include "util/xalloc.h"

#define NIL16 UINT16_MAX
#define RING_HOT 0x8000u  /* a ring entry's flag: that use was a hot key's */
#define RING_SLOT 0x7fffu /* a ring entry's slot */
_Static_assert(REUSE_MAX_KEYS <= 8192u,
               "at most 16,384 slots: a slot number fits a ring entry beside RING_HOT");
_Static_assert(2u * (REUSE_MAX_KEYS + REUSE_HOT) < NIL16, "a time fits 16 bits below NIL16");

const char *const reuse_scale_names[REUSE_SCALES] = {
    "0.125",  "0.1487", "0.1768", "0.2102", "0.25",   "0.2973", "0.3536",
    "0.4204", "0.5",    "0.5946", "0.7071", "0.8409", "1",      "1.189",
    "1.414",  "1.682",  "2",      "2.378",  "2.828",  "3.364",  "4"};
const double reuse_scales[REUSE_SCALES] = {
    0.125, 0.14865088937534013, 0.17677669529663689, 0.21022410381342863,
    0.25,  0.29730177875068026, 0.35355339059327379, 0.42044820762685725,
    0.5,   0.59460355750136051, 0.70710678118654757, 0.8408964152537145,
    1,     1.189207115002721,   1.4142135623730951,  1.681792830507429,
    2,     2.3784142300054421,  2.8284271247461903,  3.363585661014858,
    4};

void reuse_prefix_count(reuse_prefix *c, const bool *present, size_t n)
{
    size_t run = 0;
    while (run < n && present[run])
        run++;
    c->requests++;
    c->blocks += n;
    c->hit_blocks += run;
}

static void release(reuse_t *r)
{
    hf_xfree(r->keys);
    hf_xfree(r->times);
    hf_xfree(r->ring);
    hf_xfree(r->fen);
}

void reuse_reset(reuse_t *r, uint64_t pages)
{
    uint32_t rate_div = r->rate_div;
    release(r);
    memset(r, 0, sizeof *r);
    r->rate_div = rate_div;
    r->pages = pages;
    /* rate = min(1 / rate_div, MAX / (4 pages)); the largest cache holds 4 pages rate */
    uint64_t largest = 4 * pages; /* pages < 2^32: no overflow */
    double rate = largest <= REUSE_MAX_KEYS ? 1.0 : (double)REUSE_MAX_KEYS / (double)largest;
    if (rate > 1.0 / rate_div)
        rate = 1.0 / rate_div;
    r->threshold = rate >= 1.0 ? (uint64_t)1 << 32 : (uint64_t)(rate * 4294967296.0);
    double hot = REUSE_UNIT * rate + 0.5;
    r->hot_weight = hot < 1 ? 1 : (uint32_t)hot;
    uint32_t below = 0; /* in sampled keys */
    for (int j = 0; j < REUSE_SCALES; j++) {
        double keys = (double)pages * reuse_scales[j] * rate + 0.5;
        uint32_t c = keys >= REUSE_MAX_KEYS ? REUSE_MAX_KEYS : (uint32_t)keys;
        if (c < below)
            c = below;
        r->size[j] = c * REUSE_UNIT;
        below = c;
    }
    /* scale_of's table: buckets of 2^bucket_shift weights, at most
     * REUSE_BUCKETS up to the largest size; a bucket is at most 1/256 of
     * it, narrower than the gap between two scales of a sampled pool, so a
     * guess is at most one scale short there */
    while ((r->size[REUSE_SCALES - 1] >> r->bucket_shift) >= REUSE_BUCKETS)
        r->bucket_shift++;
    for (uint32_t b = 0, j = 0; b < REUSE_BUCKETS; b++) {
        while (j + 1 < REUSE_SCALES && r->size[j] < ((uint64_t)b << r->bucket_shift))
            j++;
        r->first_scale[b] = (uint8_t)j;
    }
    if (below == 0)
        return;
    r->cap = below + REUSE_HOT; /* the hot keys weigh less than a sampled one */
    uint32_t nslots = 4;
    while (nslots < 2 * below || nslots <= r->cap)
        nslots *= 2;
    HF_ASSERT(nslots <= RING_SLOT + 1);
    r->keys = hf_xmalloc(nslots * sizeof *r->keys);
    r->times = hf_xmalloc(nslots * sizeof *r->times);
    memset(r->times, 0xff, nslots * sizeof *r->times);
    r->slot_mask = nslots - 1;
    r->ring_len = 2 * r->cap;
    r->ring = hf_xmalloc(r->ring_len * sizeof *r->ring);
    memset(r->ring, 0xff, r->ring_len * sizeof *r->ring);
    r->fen = hf_xmalloc((r->ring_len + 1) * sizeof *r->fen);
}

reuse_t *reuse_new_at(uint64_t pages, uint32_t rate_div)
{
    reuse_t *r = hf_xcalloc(1, sizeof *r);
    r->rate_div = rate_div ? rate_div : 1;
    reuse_reset(r, pages);
    return r;
}

reuse_t *reuse_new(uint64_t pages)
{
    return reuse_new_at(pages, REUSE_RATE_DIV);
}

void reuse_free(reuse_t *r)
{
    if (!r)
        return;
    release(r);
    hf_xfree(r);
}

size_t reuse_memory(const reuse_t *r)
{
    if (!r)
        return 0;
    if (!r->cap)
        return sizeof *r;
    return sizeof *r + ((size_t)r->slot_mask + 1) * (sizeof *r->keys + sizeof *r->times) +
           (size_t)r->ring_len * sizeof *r->ring + ((size_t)r->ring_len + 1) * sizeof *r->fen;
}

static uint32_t home(const reuse_t *r, uint32_t hash)
{
    return (uint32_t)(hash * 2654435761u) & r->slot_mask;
}

static uint32_t slot_of(const reuse_t *r, uint32_t hash)
{
    uint32_t s = home(r, hash);
    while (r->times[s] != NIL16 && r->keys[s] != hash)
        s = (s + 1) & r->slot_mask;
    return s;
}

static uint32_t weight_of(const reuse_t *r, uint32_t ring_entry)
{
    return ring_entry & RING_HOT ? r->hot_weight : REUSE_UNIT;
}

/* ---- the Fenwick tree of weights by time (index time + 1), kept up to
 * date up to the newest time (now - 1) ---- */

/* Time r->now gets weight w: its node is its own weight and its children's. */
static void fen_append(reuse_t *r, uint32_t w)
{
    uint32_t *fen = r->fen, i = r->now + 1, low = i & (0u - i), sum = w;
    for (uint32_t j = i - 1; j > i - low; j &= j - 1)
        sum += fen[j];
    fen[i] = sum;
    r->fen_total += w;
}

static void fen_remove(reuse_t *r, uint32_t time, uint32_t w)
{
    uint32_t *fen = r->fen, last = r->now;
    for (uint32_t i = time + 1; i <= last; i += i & (0u - i))
        fen[i] -= w;
    r->fen_total -= w;
}

/* The weight in the tree of times <= time. */
static uint32_t fen_prefix(const reuse_t *r, uint32_t time)
{
    const uint32_t *fen = r->fen;
    uint32_t sum = 0;
    for (uint32_t i = time + 1; i > 0; i &= i - 1)
        sum += fen[i];
    return sum;
}

/* The ring is full: the live times become 0, 1, ... in order, the tree
 * holds their weights alone. */
static void compact(reuse_t *r)
{
    uint32_t n = 0;
    for (uint32_t t = r->tail; t < r->now; t++) {
        uint16_t e = r->ring[t];
        if (e == NIL16)
            continue;
        r->ring[n] = e;
        r->times[e & RING_SLOT] = (uint16_t)n;
        n++;
    }
    HF_ASSERT(n <= r->cap);
    memset(r->ring + n, 0xff, (r->ring_len - n) * sizeof *r->ring);
    for (uint32_t i = 1; i <= n; i++)
        r->fen[i] = weight_of(r, r->ring[i - 1]);
    for (uint32_t i = 1; i <= n; i++) {
        uint32_t up = i + (i & (0u - i));
        if (up <= n)
            r->fen[up] += r->fen[i];
    }
    r->tail = 0;
    r->now = n;
    r->fen_total = r->total;
}

static void index_delete(reuse_t *r, uint32_t s)
{
    r->times[s] = NIL16;
    for (uint32_t j = (s + 1) & r->slot_mask; r->times[j] != NIL16; j = (j + 1) & r->slot_mask) {
        uint32_t h = home(r, r->keys[j]);
        /* the entry at j may move to s when s lies cyclically in [h, j) */
        if (((j - h) & r->slot_mask) >= ((j - s) & r->slot_mask)) {
            uint16_t t = r->times[j];
            r->keys[s] = r->keys[j];
            r->times[s] = t;
            r->times[j] = NIL16;
            r->ring[t] = (uint16_t)((r->ring[t] & RING_HOT) | s);
            s = j;
        }
    }
}

/* The least recent key leaves the simulation (its weight stays in the
 * tree: above). */
static void evict_last(reuse_t *r)
{
    while (r->ring[r->tail] == NIL16)
        r->tail++;
    HF_ASSERT(r->tail < r->now);
    uint16_t e = r->ring[r->tail];
    r->total -= weight_of(r, e);
    r->ring[r->tail++] = NIL16;
    r->used--;
    index_delete(r, e & RING_SLOT);
}

/* The first scale whose cache holds a key at stack distance `dist` (in
 * weights, the key itself included): the table's guess for dist's bucket
 * (the first scale that could hold the bucket's least distance), then up. */
static unsigned scale_of(const reuse_t *r, uint32_t dist)
{
    if (dist > r->size[REUSE_SCALES - 1])
        return REUSE_SCALES;
    unsigned j = r->first_scale[dist >> r->bucket_shift];
    while (dist > r->size[j])
        j++;
    return j;
}

void reuse__access(reuse_t *r, uint32_t hash, uint32_t weight)
{
    unsigned s = REUSE_SCALES; /* a miss at every scale */
    if (r->cap) {
        uint32_t slot = slot_of(r, hash), t = r->times[slot];
        if (t != NIL16) {
            uint32_t w = weight_of(r, r->ring[t]);
            s = scale_of(r, r->fen_total - fen_prefix(r, t) + w);
            fen_remove(r, t, w);
            r->total -= w;
            r->ring[t] = NIL16;
        } else {
            if (r->used == r->cap) {
                evict_last(r);
                slot = slot_of(r, hash);
            }
            r->keys[slot] = hash;
            r->used++;
        }
        if (r->now == r->ring_len)
            compact(r); /* the key is out of the ring: not renumbered */
        uint32_t hot = weight == REUSE_UNIT ? 0 : RING_HOT;
        r->times[slot] = (uint16_t)r->now;
        r->ring[r->now] = (uint16_t)(slot | hot);
        uint32_t w = weight_of(r, hot);
        fen_append(r, w);
        r->total += w;
        r->now++;
        while (r->total > r->size[REUSE_SCALES - 1])
            evict_last(r);
    }
    if (s > r->run)
        r->run = (uint8_t)s;
    r->by_run[r->run] += weight;
    r->blocks += weight;
    if (r->blocks >= (uint64_t)REUSE_WINDOW * REUSE_UNIT) {
        r->blocks /= 2;
        for (int j = 0; j <= REUSE_SCALES; j++)
            r->by_run[j] /= 2;
    }
}

/* One of a request's first REUSE_HEAD keys: counted in the Space-Saving
 * table, then simulated as a hot key, as a sampled one, or not at all. */
void reuse__head(reuse_t *r, uint32_t hash)
{
    struct reuse_hot *h = NULL;
    for (uint32_t i = 0; i < r->nhot && !h; i++)
        if (r->hot[i].key == hash)
            h = &r->hot[i];
    if (!h && r->nhot < REUSE_HOT) {
        h = &r->hot[r->nhot++];
        *h = (struct reuse_hot){hash, 0, 0};
    } else if (!h) { /* the least counted key gives its counter up */
        h = &r->hot[0];
        for (uint32_t i = 1; i < r->nhot; i++)
            if (r->hot[i].count < h->count)
                h = &r->hot[i];
        *h = (struct reuse_hot){hash, h->count, h->count};
    }
    h->count++;
    if (++r->head_uses >= (uint64_t)1 << 31) { /* halved, as the window is */
        r->head_uses /= 2;
        for (uint32_t i = 0; i < r->nhot; i++) {
            r->hot[i].count /= 2;
            r->hot[i].error /= 2;
        }
    }
    uint64_t sure = h->count - h->error;
    if (sure >= REUSE_HOT_MIN && sure * REUSE_HOT_SHARE >= r->head_uses)
        reuse__access(r, hash, r->hot_weight);
    else if (hash < r->threshold)
        reuse__access(r, hash, REUSE_UNIT);
}

void reuse_figures(const reuse_t *r, uint64_t *blocks, uint64_t hits[REUSE_SCALES])
{
    uint64_t sum = 0;
    for (int j = 0; j < REUSE_SCALES; j++) {
        sum += r->by_run[j];
        hits[j] = sum / REUSE_UNIT;
    }
    *blocks = r->blocks / REUSE_UNIT;
}

static int64_t ratio_ppm(uint64_t blocks, const uint64_t hits[REUSE_SCALES], int j)
{
    return (int64_t)(hits[j] * 1000000 / blocks);
}

void reuse_advise(uint64_t pages, uint64_t blocks, const uint64_t hits[REUSE_SCALES], bool coarse,
                  int64_t target_ppm, reuse_advice *out)
{
    memset(out, 0, sizeof *out);
    if (!blocks || !pages)
        return;
    out->known = true;
    out->coarse = coarse;
    const int one = REUSE_SCALE_ONE, top = REUSE_SCALES - 1;
    const int first = coarse ? REUSE_COARSE_FIRST : 0, step = coarse ? REUSE_COARSE_STEP : 1;
    out->target_ppm = target_ppm >= 0 ? target_ppm
                                      : ratio_ppm(blocks, hits, top) - REUSE_TARGET_SLACK;
    out->ratio_ppm = ratio_ppm(blocks, hits, one);
    out->double_ppm = ratio_ppm(blocks, hits, one + 4) - out->ratio_ppm;
    out->halve_ppm = out->ratio_ppm - ratio_ppm(blocks, hits, one - 4);
    out->halve_frees = pages - pages / 2;
    int j = first;
    while (j <= top && ratio_ppm(blocks, hits, j) < out->target_ppm)
        j += step;
    out->reached = j <= top;
    if (j > top) {
        out->pages = (uint64_t)((double)pages * reuse_scales[top] + 0.5);
        return;
    }
    double hi = (double)pages * reuse_scales[j];
    if (j == first) {
        out->pages = (uint64_t)(hi + 0.5);
        return;
    }
    /* between the known scale below (under the target) and j (at or above it) */
    double lo = (double)pages * reuse_scales[j - step];
    double r0 = (double)ratio_ppm(blocks, hits, j - step), r1 = (double)ratio_ppm(blocks, hits, j);
    double x = lo + (hi - lo) * ((double)out->target_ppm - r0) / (r1 - r0);
    uint64_t advised = (uint64_t)x;
    if ((double)advised < x)
        advised++;
    out->pages = advised;
}
