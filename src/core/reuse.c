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
    release(r);
    memset(r, 0, sizeof *r);
    r->pages = pages;
    /* rate = min(1, MAX / (4 pages)); the largest cache holds 4 pages rate */
    uint64_t largest = 4 * pages; /* pages < 2^32: no overflow */
    double rate = largest <= REUSE_MAX_KEYS ? 1.0 : (double)REUSE_MAX_KEYS / (double)largest;
    r->threshold = rate >= 1.0 ? (uint64_t)1 << 32 : (uint64_t)(rate * 4294967296.0);
    uint32_t below = 0;
    for (int j = 0; j < REUSE_SCALES; j++) {
        double keys = (double)pages * scale_quarters[j] / 4.0 * rate + 0.5;
        uint32_t c = keys >= REUSE_MAX_KEYS ? REUSE_MAX_KEYS : (uint32_t)keys;
        if (c < below)
            c = below;
        r->size[j] = c - below;
        below = c;
        r->last[j] = NIL;
    }
    r->cap = below;
    r->head = NIL;
    if (r->cap == 0)
        return;
    r->e = hf_xmalloc(r->cap * sizeof *r->e);
    uint32_t nslots = 4;
    while (nslots < 2 * r->cap)
        nslots *= 2;
    r->slots = hf_xmalloc(nslots * sizeof *r->slots);
    memset(r->slots, 0xff, nslots * sizeof *r->slots);
    r->slot_mask = nslots - 1;
}

reuse_t *reuse_new(uint64_t pages)
{
    reuse_t *r = hf_xcalloc(1, sizeof *r);
    reuse_reset(r, pages);
    return r;
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
    r->count[s]--;
    if (p != NIL)
        r->e[p].next = n;
    else
        r->head = n;
    if (n != NIL)
        r->e[n].prev = p;
}

void reuse__access(reuse_t *r, uint32_t hash)
{
    unsigned s = REUSE_SCALES; /* a miss at every scale */
    if (r->cap) {
        uint32_t slot = slot_of(r, hash), e = r->slots[slot];
        if (e != NIL) {
            s = r->e[e].seg;
            unlink_entry(r, e);
        } else {
            if (r->used < r->cap) {
                e = r->used++;
            } else { /* full: the least recent key of the last segment leaves */
                int t = REUSE_SCALES - 1;
                while (r->last[t] == NIL)
                    t--;
                e = r->last[t];
                index_delete(r, slot_of(r, r->e[e].key));
                unlink_entry(r, e);
                slot = slot_of(r, hash);
            }
            r->e[e].key = hash;
            r->slots[slot] = e;
        }
        r->e[e].prev = NIL;
        r->e[e].next = r->head;
        if (r->head != NIL)
            r->e[r->head].prev = e;
        r->head = e;
        r->e[e].seg = 0;
        if (r->count[0]++ == 0)
            r->last[0] = e;
        for (int j = 0; j + 1 < REUSE_SCALES && r->count[j] > r->size[j]; j++) {
            uint32_t x = r->last[j], p = r->e[x].prev;
            r->last[j] = --r->count[j] && p != NIL ? p : NIL;
            r->e[x].seg = (uint8_t)(j + 1);
            if (r->count[j + 1]++ == 0)
                r->last[j + 1] = x;
        }
    }
    if (s > r->run)
        r->run = (uint8_t)s;
    r->by_run[r->run]++;
    if (++r->blocks >= REUSE_WINDOW) {
        r->blocks /= 2;
        for (int j = 0; j <= REUSE_SCALES; j++)
            r->by_run[j] /= 2;
    }
}

void reuse_figures(const reuse_t *r, uint64_t *blocks, uint64_t hits[REUSE_SCALES])
{
    uint64_t sum = 0;
    for (int j = 0; j < REUSE_SCALES; j++) {
        sum += r->by_run[j];
        hits[j] = sum;
    }
    *blocks = r->blocks;
}
