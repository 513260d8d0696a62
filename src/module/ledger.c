/*
 * ledger.c: which allocation made each reservation of a value, so that a
 * front end can settle an allocation whose answer it did not give
 * (docs/redis-module.md, "Settling an outcome unknown").
 *
 * An item is (rank, page, id): page of pool `rank` was reserved by the
 * HF3FS.ALLOC that carried `id` and nothing has happened to it since.
 * Items are added by ALLOC with an id (on a primary) and by HF3FS.NOTE (the
 * same, on a replica or while the AOF loads); every core event that moves
 * a page (RESERVE, OWN, FREE, DRAIN), whether the value's own commands
 * produced it or an HF3FS.APPLY replayed it, removes the page's item first.
 * So an item names exactly the reservation its allocation made, never a
 * later one of the same page (even of the same key in the same
 * millisecond), and the ledger holds at most one item per reserved page:
 * it grows with the reservations and shrinks with them (a confirmation, a
 * release, an expiry).
 *
 * The ledger is volatile: not saved, digested or rewritten. A value loaded
 * from an RDB, rebuilt, or moved to another node has an empty ledger; the
 * reservations of such a value end with their lease, as before.
 *
 * The index is open addressing with linear probing over (rank, page),
 * removal by backward shift (no tombstones); the table is at most half
 * full.
 */
#include <string.h>

#include "core/core.h"
#include "module/module_internal.h"
#include "util/hash.h"
#include "util/hf_assert.h"
#include "util/xalloc.h"

typedef struct ledger_item {
    uint64_t where; /* rank << 32 | page, plus one: 0 is an empty slot */
    int64_t id;
} ledger_item;

struct hf_ledger {
    ledger_item *slot;
    size_t cap; /* a power of two, or 0 */
    size_t n;
};

static uint64_t where_of(uint32_t rank, uint64_t page)
{
    return ((uint64_t)rank << 32 | (page & 0xffffffffu)) + 1;
}

static size_t home(const hf_ledger *l, uint64_t where)
{
    return (size_t)(hf_fmix64(where) & (l->cap - 1));
}

/* The slot of `where`, or of the empty slot that ends its probe. */
static size_t probe(const hf_ledger *l, uint64_t where)
{
    size_t i = home(l, where);
    while (l->slot[i].where != 0 && l->slot[i].where != where)
        i = (i + 1) & (l->cap - 1);
    return i;
}

static void grow(hf_ledger *l)
{
    ledger_item *old = l->slot;
    size_t oldcap = l->cap;
    l->cap = oldcap ? oldcap * 2 : 64;
    l->slot = hf_xcalloc(l->cap, sizeof *l->slot);
    for (size_t i = 0; i < oldcap; i++)
        if (old[i].where)
            l->slot[probe(l, old[i].where)] = old[i];
    hf_xfree(old);
}

void ledger_free(hf_ledger *l)
{
    if (!l)
        return;
    hf_xfree(l->slot);
    hf_xfree(l);
}

size_t ledger_memory(const hf_ledger *l)
{
    return l ? sizeof *l + l->cap * sizeof *l->slot : 0;
}

void ledger_add(hf_value *v, uint32_t rank, uint64_t page, int64_t id)
{
    HF_ASSERT(id > 0 && page < CORE_MAX_PAGES_LIMIT);
    if (!v->ledger)
        v->ledger = hf_xcalloc(1, sizeof *v->ledger);
    hf_ledger *l = v->ledger;
    if (2 * (l->n + 1) > l->cap)
        grow(l);
    uint64_t where = where_of(rank, page);
    size_t i = probe(l, where);
    /* the RESERVE that made the reservation removed any older item */
    HF_ASSERT(l->slot[i].where == 0);
    l->slot[i] = (ledger_item){where, id};
    l->n++;
}

/* Remove the item of (rank, page), if any. */
static void forget(hf_ledger *l, uint32_t rank, uint64_t page)
{
    uint64_t where = where_of(rank, page);
    size_t i = probe(l, where);
    if (l->slot[i].where == 0)
        return;
    l->slot[i].where = 0;
    l->n--;
    /* backward shift: move up every later item of the run whose home is
     * not between the hole and it */
    size_t hole = i, mask = l->cap - 1;
    for (size_t j = (i + 1) & mask; l->slot[j].where != 0; j = (j + 1) & mask) {
        size_t h = home(l, l->slot[j].where);
        bool stays = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
        if (stays)
            continue;
        l->slot[hole] = l->slot[j];
        l->slot[j].where = 0;
        hole = j;
    }
}

void ledger_touch(hf_value *v, const core_event *ev)
{
    hf_ledger *l = v->ledger;
    if (!l || l->n == 0)
        return;
    switch (ev->type) {
    case CORE_EV_RESERVE:
    case CORE_EV_OWN:
    case CORE_EV_FREE:
    case CORE_EV_DRAIN: forget(l, ev->rank, ev->page); break;
    case CORE_EV_CLEAR_ALL:
        memset(l->slot, 0, l->cap * sizeof *l->slot);
        l->n = 0;
        break;
    default: break;
    }
}

size_t ledger_pages_of(const hf_value *v, uint32_t rank, int64_t id, uint64_t **pages)
{
    const hf_ledger *l = v->ledger;
    size_t n = 0;
    *pages = NULL;
    for (size_t i = 0; l && i < l->cap; i++) {
        uint64_t w = l->slot[i].where;
        if (w == 0 || l->slot[i].id != id || (uint32_t)((w - 1) >> 32) != rank)
            continue;
        if (!*pages)
            *pages = hf_xmalloc(l->n * sizeof **pages);
        (*pages)[n++] = (w - 1) & 0xffffffffu;
    }
    return n;
}

bool ledger_holds(const hf_value *v, uint32_t rank, uint64_t page)
{
    const hf_ledger *l = v->ledger;
    return l && l->n && l->slot[probe(l, where_of(rank, page))].where != 0;
}
