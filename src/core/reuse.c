/*
 * reuse.c: see reuse.h.
 *
 * The list runs from the most recently used key (head) to the least; the
 * keys of segment j are those at positions [c(j-1), c(j)) where c(j) is
 * the cache size of scale j, so a key of segment s is a hit at every scale
 * j >= s. last[j] is segment j's least recent key: when segment j holds
 * one key too many, that key moves into segment j + 1 (it stays where it
 * is in the list). The index maps a sampled key's hash to its entry (open
 * addressing, linear probing, backward-shift deletion, load <= 1/2).
 */
#include "core/reuse.h"

#include <string.h>

#include "util/xalloc.h"

#define NIL UINT32_MAX

const char *const reuse_scale_names[REUSE_SCALES] = {"0.25", "0.5", "1", "2", "4"};
/* the scales in quarters */
static const uint32_t scale_quarters[REUSE_SCALES] = {1, 2, 4, 8, 16};

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
    hf_xfree(r->e);
    hf_xfree(r->slots);
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
        double keys = (double)pages * scale_quarters[j] / 4.0 * rate + 0.5;
        uint32_t c = keys >= REUSE_MAX_KEYS ? REUSE_MAX_KEYS : (uint32_t)keys;
        if (c < below)
            c = below;
        r->size[j] = (c - below) * REUSE_UNIT;
        below = c;
        r->last[j] = NIL;
    }
    r->head = NIL;
    r->free = NIL;
    if (below == 0)
        return;
    r->cap = below + REUSE_HOT; /* the hot keys weigh less than a sampled one */
    r->e = hf_xmalloc(r->cap * sizeof *r->e);
    uint32_t nslots = 4;
    while (nslots < 2 * below || nslots <= r->cap)
        nslots *= 2;
    r->slots = hf_xmalloc(nslots * sizeof *r->slots);
    memset(r->slots, 0xff, nslots * sizeof *r->slots);
    r->slot_mask = nslots - 1;
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
    size_t slots = r->cap ? (size_t)r->slot_mask + 1 : 0;
    return sizeof *r + (size_t)r->cap * sizeof *r->e + slots * sizeof *r->slots;
}

static uint32_t home(const reuse_t *r, uint32_t hash)
{
    return (uint32_t)(hash * 2654435761u) & r->slot_mask;
}

static uint32_t slot_of(const reuse_t *r, uint32_t hash)
{
    uint32_t s = home(r, hash);
    while (r->slots[s] != NIL && r->e[r->slots[s]].key != hash)
        s = (s + 1) & r->slot_mask;
    return s;
}

static void index_delete(reuse_t *r, uint32_t s)
{
    r->slots[s] = NIL;
    for (uint32_t j = (s + 1) & r->slot_mask; r->slots[j] != NIL; j = (j + 1) & r->slot_mask) {
        uint32_t h = home(r, r->e[r->slots[j]].key);
        /* the entry at j may move to s when s lies cyclically in [h, j) */
        if (((j - h) & r->slot_mask) >= ((j - s) & r->slot_mask)) {
            r->slots[s] = r->slots[j];
            r->slots[j] = NIL;
            s = j;
        }
    }
}

static void unlink_entry(reuse_t *r, uint32_t e)
{
    uint32_t p = r->e[e].prev, n = r->e[e].next, s = r->e[e].seg;
    if (r->last[s] == e)
        r->last[s] = p != NIL && r->e[p].seg == s ? p : NIL;
    r->count[s] -= r->e[e].weight;
    if (p != NIL)
        r->e[p].next = n;
    else
        r->head = n;
    if (n != NIL)
        r->e[n].prev = p;
}

/* The least recent key leaves the simulation; its entry is free. */
static void evict_last(reuse_t *r)
{
    int t = REUSE_SCALES - 1;
    while (r->last[t] == NIL)
        t--;
    uint32_t e = r->last[t];
    index_delete(r, slot_of(r, r->e[e].key));
    unlink_entry(r, e);
    r->e[e].next = r->free;
    r->free = e;
}

void reuse__access(reuse_t *r, uint32_t hash, uint32_t weight)
{
    unsigned s = REUSE_SCALES; /* a miss at every scale */
    if (r->cap) {
        uint32_t slot = slot_of(r, hash), e = r->slots[slot];
        if (e != NIL) {
            s = r->e[e].seg;
            unlink_entry(r, e);
        } else {
            if (r->free == NIL && r->used == r->cap) {
                evict_last(r);
                slot = slot_of(r, hash);
            }
            if (r->free != NIL) {
                e = r->free;
                r->free = r->e[e].next;
            } else {
                e = r->used++;
            }
            r->e[e].key = hash;
            r->slots[slot] = e;
        }
        r->e[e].weight = weight & 0xffffff;
        r->e[e].prev = NIL;
        r->e[e].next = r->head;
        if (r->head != NIL)
            r->e[r->head].prev = e;
        r->head = e;
        r->e[e].seg = 0;
        if (r->count[0] == 0)
            r->last[0] = e;
        r->count[0] += weight;
        /* each segment too heavy passes its least recent keys on */
        for (int j = 0; j + 1 < REUSE_SCALES; j++)
            while (r->count[j] > r->size[j]) {
                uint32_t x = r->last[j], p = r->e[x].prev;
                r->count[j] -= r->e[x].weight;
                r->last[j] = r->count[j] && p != NIL ? p : NIL;
                r->e[x].seg = (uint32_t)(j + 1) & 0xff;
                if (r->count[j + 1] == 0)
                    r->last[j + 1] = x;
                r->count[j + 1] += r->e[x].weight;
            }
        while (r->count[REUSE_SCALES - 1] > r->size[REUSE_SCALES - 1])
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
