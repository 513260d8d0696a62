/*
 * core.c: pools, pages, keys, LRU and leases (see core.h for the promises and
 * core_internal.h for the layout).
 *
 * Every state change of a page goes through four functions: page_reserve,
 * page_own, page_free and page_drain. They keep the state counts, the lists
 * and the key index in step; core_check() verifies that they did.
 */
#include "core/core_internal.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "util/xalloc.h"

/* ---------------------------------------------------------------- keys */

/* The 128-bit product of a and b, folded to 64 bits (wyhash's "mum"). */
static inline uint64_t mum(uint64_t a, uint64_t b)
{
    __extension__ unsigned __int128 r = (unsigned __int128)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

/*
 * The key hash, in the manner of wyhash: one 64x64->128-bit multiply per 16
 * bytes, the seed in both factors of each (a factor that is zero would
 * erase the other word; without the seed, which is random per process, an
 * input cannot aim at that). A 32-byte key costs 3 multiplies (was 5
 * rounds of two dependent multiplies each: ~40% of the key's encoding).
 */
static uint32_t hash_bytes(uint64_t seed, const uint8_t *p, size_t len)
{
    const uint64_t k1 = 0xe7037ed1a0b428dbull, k2 = 0x8ebc6af09c88c6e3ull,
                   k3 = 0x589965cc75374cc3ull;
    uint64_t h = seed ^ (len * 0xa0761d6478bd642full);
    size_t left = len;
    while (left >= 16) {
        uint64_t a, b;
        memcpy(&a, p, 8);
        memcpy(&b, p + 8, 8);
        h = mum(a ^ k1 ^ h, b ^ seed ^ k2);
        p += 16;
        left -= 16;
    }
    uint64_t a = 0, b = 0;
    if (left > 8) {
        memcpy(&a, p, 8);
        memcpy(&b, p + 8, left - 8);
    } else if (left) {
        memcpy(&a, p, left);
    }
    h = mum(a ^ k1 ^ h, b ^ seed ^ k3);
    return (uint32_t)mum(h ^ k2, seed ^ k1 ^ len);
}

/*
 * Pack 64 lowercase hex characters into 32 bytes; 0 if raw is not such a key.
 * This runs for every key of every request. Without a branch per character
 * (digits and letters alternate at random in a hash: a branch would be
 * mispredicted half the time): with SSE2 (every x86-64), 16 characters per
 * step, ~11 ns a key; elsewhere 8 at a time in a 64-bit word (SWAR), ~40 ns.
 */
#ifdef __SSE2__
/* 16 characters -> 8 16-bit lanes, each the byte of one character pair;
 * lanes of characters that are not lowercase hex set in *bad. */
static inline __m128i hex16(const char *raw, __m128i *bad)
{
    __m128i c = _mm_loadu_si128((const __m128i *)(const void *)raw);
    /* signed compares: bytes >= 0x80 are negative, in neither range */
    __m128i digit = _mm_and_si128(_mm_cmpgt_epi8(c, _mm_set1_epi8('0' - 1)),
                                  _mm_cmplt_epi8(c, _mm_set1_epi8('9' + 1)));
    __m128i letter = _mm_and_si128(_mm_cmpgt_epi8(c, _mm_set1_epi8('a' - 1)),
                                   _mm_cmplt_epi8(c, _mm_set1_epi8('f' + 1)));
    *bad = _mm_or_si128(*bad, _mm_andnot_si128(_mm_or_si128(digit, letter),
                                               _mm_set1_epi8(-1)));
    /* value: low nibble, +9 for letters */
    __m128i v = _mm_add_epi8(_mm_and_si128(c, _mm_set1_epi8(0x0f)),
                             _mm_and_si128(letter, _mm_set1_epi8(9)));
    /* per 16-bit lane: first character (low byte) is the high nibble */
    return _mm_or_si128(_mm_slli_epi16(_mm_and_si128(v, _mm_set1_epi16(0x00ff)), 4),
                        _mm_srli_epi16(v, 8));
}

static int pack_hex64(const char *raw, uint8_t out[32])
{
    __m128i bad = _mm_setzero_si128();
    __m128i a = hex16(raw, &bad), b = hex16(raw + 16, &bad);
    __m128i c = hex16(raw + 32, &bad), d = hex16(raw + 48, &bad);
    /* every lane is <= 0xff: unsigned saturation packs it exactly */
    _mm_storeu_si128((__m128i *)(void *)out, _mm_packus_epi16(a, b));
    _mm_storeu_si128((__m128i *)(void *)(out + 16), _mm_packus_epi16(c, d));
    return _mm_movemask_epi8(bad) == 0;
}
#else
#define ONES 0x0101010101010101ull
#define HIGHS 0x8080808080808080ull

/* High bit of each byte lane set where the (7-bit) byte is >= k. */
static inline uint64_t lanes_at_least(uint64_t w, unsigned k)
{
    return (w + (0x80u - k) * ONES) & HIGHS;
}

static int pack_hex64(const char *raw, uint8_t out[32])
{
    uint64_t bad = 0;
    for (int i = 0; i < 8; i++) {
        uint64_t w;
        memcpy(&w, raw + 8 * i, 8); /* byte j of w is character 8i + j */
        uint64_t digit = lanes_at_least(w, '0') & ~lanes_at_least(w, '9' + 1);
        uint64_t letter = lanes_at_least(w, 'a') & ~lanes_at_least(w, 'f' + 1);
        bad |= (w & HIGHS) | ((digit | letter) ^ HIGHS);
        /* value of each character: low nibble, +9 for letters (bit 6 set) */
        uint64_t v = (w & 0x0f * ONES) + 9 * ((w >> 6) & ONES);
        /* byte pairs (high nibble first) -> one byte in each 16-bit lane */
        v = ((v & 0x000f000f000f000full) << 4) | ((v >> 8) & 0x000f000f000f000full);
        v = (v | (v >> 8)) & 0x0000ffff0000ffffull;
        v = (v | (v >> 16)) & 0x00000000ffffffffull;
        uint32_t packed = (uint32_t)v;
        memcpy(out + 4 * i, &packed, 4);
    }
    return bad == 0;
}
#endif

void core__key_encode(const core_t *core, hf_slice raw, core_key *out)
{
    const uint8_t *canon;
    size_t canon_len;

    out->ext = NULL;
    out->len = (uint32_t)raw.len;
    memset(out->bytes, 0, sizeof out->bytes);
    if (raw.len >= 1 && raw.len <= 32) {
        out->kind = (uint8_t)raw.len;
        memcpy(out->bytes, raw.ptr, raw.len);
        canon = out->bytes;
        canon_len = raw.len;
    } else if (raw.len == 64 && pack_hex64(raw.ptr, out->bytes)) {
        out->kind = CORE_KEY_HEX64;
        canon = out->bytes;
        canon_len = 32;
    } else {
        out->kind = CORE_KEY_EXT;
        out->ext = raw.ptr;
        canon = (const uint8_t *)raw.ptr;
        canon_len = raw.len;
    }
    /* The kind takes part so that a 32-byte raw key and a packed hex key
     * with the same bytes hash apart. */
    out->hash = hash_bytes(core->config.hash_seed + out->kind, canon, canon_len);
}

int core__rec_key_eq(const core_page_rec *rec, const core_key *key)
{
    if (rec->hash != key->hash || rec->key_kind != key->kind)
        return 0;
    if (key->kind == CORE_KEY_EXT)
        return rec->key.ext.len == key->len && memcmp(rec->key.ext.ptr, key->ext, key->len) == 0;
    /* inline keys are zero-padded to 32 bytes (core__key_encode): compare
     * all 32 as four words, without a call to memcmp */
    uint64_t diff = 0;
    for (int i = 0; i < 4; i++) {
        uint64_t a, b;
        memcpy(&a, rec->key.bytes + 8 * i, 8);
        memcpy(&b, key->bytes + 8 * i, 8);
        diff |= a ^ b;
    }
    return diff == 0;
}

void core__rec_to_key(const core_t *core, const core_page_rec *rec, core_key *out)
{
    (void)core;
    out->kind = rec->key_kind;
    out->hash = rec->hash;
    if (rec->key_kind == CORE_KEY_EXT) {
        out->ext = rec->key.ext.ptr;
        out->len = rec->key.ext.len;
    } else {
        out->ext = NULL;
        out->len = rec->key_kind == CORE_KEY_HEX64 ? 64 : rec->key_kind;
        memcpy(out->bytes, rec->key.bytes, 32);
    }
}

static const char hex_digits[] = "0123456789abcdef";

hf_slice core__rec_key_text(const core_page_rec *rec, char buf[64])
{
    if (rec->key_kind == CORE_KEY_EXT)
        return (hf_slice){rec->key.ext.ptr, rec->key.ext.len};
    if (rec->key_kind == CORE_KEY_HEX64) {
        for (int i = 0; i < 32; i++) {
            buf[2 * i] = hex_digits[rec->key.bytes[i] >> 4];
            buf[2 * i + 1] = hex_digits[rec->key.bytes[i] & 15];
        }
        return (hf_slice){buf, 64};
    }
    return (hf_slice){(const char *)rec->key.bytes, rec->key_kind};
}

static void rec_set_key(core_page_rec *rec, const core_key *key)
{
    rec->key_kind = key->kind;
    rec->hash = key->hash;
    if (key->kind == CORE_KEY_EXT) {
        rec->key.ext.ptr = hf_xmalloc(key->len);
        memcpy(rec->key.ext.ptr, key->ext, key->len);
        rec->key.ext.len = key->len;
    } else {
        memcpy(rec->key.bytes, key->bytes, 32);
    }
}

static void rec_drop_key(core_page_rec *rec)
{
    if (rec->key_kind == CORE_KEY_EXT)
        hf_xfree(rec->key.ext.ptr);
    rec->key_kind = CORE_KEY_NONE;
    memset(rec->key.bytes, 0, sizeof rec->key.bytes);
}

/* ----------------------------------------------------------- key index */

uint32_t core__index_find(const core_pool_t *pool, const core_key *key)
{
    if (!pool->slots)
        return CORE_NIL;
    size_t i = core__home(pool, key->hash);
    uint32_t tag = key->hash & ~pool->page_mask;
    for (;;) {
        uint32_t slot = pool->slots[i];
        if (slot == CORE_NIL)
            return CORE_NIL;
        if ((slot & ~pool->page_mask) == tag) {
            uint32_t page = core__slot_page(pool, slot);
            if (core__rec_key_eq(core__rec(pool, page), key))
                return page;
        }
        i = (i + 1) & pool->slot_mask;
    }
}

/*
 * Batches look many keys up at once, and each lookup waits on cache misses:
 * its slot, then its page record (a use writes only that record: no list
 * is relinked). Asking for the slots of a block of keys, then for their
 * records, before doing the work lets those misses overlap
 * instead of queueing (measured: about half the time per key of a 128-key
 * batch_exists on 2 ranks). Only a hint: nothing is changed; a wrong guess
 * wastes a load.
 */
#define PREFETCH_BLOCK 16

/* A record is 54 bytes: most records straddle two cache lines; ask for both
 * (a lookup reads the key at its start and the hash and kind after it). */
static inline __attribute__((always_inline)) void prefetch_rec(const core_page_rec *rec, int rw)
{
    const char *p = (const char *)rec;
    if (rw) {
        __builtin_prefetch(p, 1);
        __builtin_prefetch(p + sizeof *rec - 1, 1);
    } else {
        __builtin_prefetch(p);
        __builtin_prefetch(p + sizeof *rec - 1);
    }
}

/* always_inline: as a function of its own it has no effect that GCC can see
 * (it only reads memory and returns nothing), so GCC deletes every call. */
static inline __attribute__((always_inline)) void
index_prefetch(const core_pool_t *pool, const core_key *keys, size_t n)
{
    if (n > PREFETCH_BLOCK)
        n = PREFETCH_BLOCK; /* a hint: never more than a block */
    if (!pool->slots)
        return;
    size_t home[PREFETCH_BLOCK];
    for (size_t j = 0; j < n; j++) {
        home[j] = core__home(pool, keys[j].hash);
        __builtin_prefetch(&pool->slots[home[j]]);
    }
    for (size_t j = 0; j < n; j++) {
        uint32_t slot = pool->slots[home[j]];
        if (slot != CORE_NIL && (slot & ~pool->page_mask) == (keys[j].hash & ~pool->page_mask))
            prefetch_rec(core__rec(pool, core__slot_page(pool, slot)), 0);
    }
}

static void index_place(core_pool_t *pool, uint32_t page, uint32_t hash)
{
    size_t i = core__home(pool, hash);
    while (pool->slots[i] != CORE_NIL)
        i = (i + 1) & pool->slot_mask;
    pool->slots[i] = core__slot_make(pool, page, hash);
}

static void index_grow(core_pool_t *pool)
{
    size_t old_cap = pool->slots ? pool->slot_mask + 1 : 0;
    size_t cap = old_cap ? old_cap * 2 : 64;
    uint32_t *old = pool->slots;

    pool->slots = hf_xreallocarray(NULL, cap, sizeof *pool->slots);
    memset(pool->slots, 0xff, cap * sizeof *pool->slots);
    pool->slot_mask = cap - 1;
    for (size_t i = 0; i < old_cap; i++) {
        /* the records are read in slot order, at random: ask ahead */
        if (i + PREFETCH_BLOCK < old_cap && old[i + PREFETCH_BLOCK] != CORE_NIL)
            prefetch_rec(core__rec(pool, core__slot_page(pool, old[i + PREFETCH_BLOCK])), 0);
        if (old[i] == CORE_NIL)
            continue;
        uint32_t page = core__slot_page(pool, old[i]);
        index_place(pool, page, core__rec(pool, page)->hash);
    }
    hf_xfree(old);
}

static void index_insert(core_pool_t *pool, uint32_t page)
{
    if (!pool->slots || (pool->nkeys + 1) * 4 > (pool->slot_mask + 1) * 3)
        index_grow(pool);
    index_place(pool, page, core__rec(pool, page)->hash);
    pool->nkeys++;
}

/* Insert page under its record's key unless the key is indexed already
 * (then 0): one probe where a find and an insert would take two. Replay
 * uses it, since a log or snapshot must never make a key own two pages. */
static int index_insert_unique(core_pool_t *pool, uint32_t page)
{
    if (!pool->slots || (pool->nkeys + 1) * 4 > (pool->slot_mask + 1) * 3)
        index_grow(pool);
    core_key key;
    core__rec_to_key(pool->core, core__rec(pool, page), &key);
    size_t i = core__home(pool, key.hash);
    uint32_t tag = key.hash & ~pool->page_mask;
    for (uint32_t slot; (slot = pool->slots[i]) != CORE_NIL; i = (i + 1) & pool->slot_mask)
        if ((slot & ~pool->page_mask) == tag &&
            core__rec_key_eq(core__rec(pool, core__slot_page(pool, slot)), &key))
            return 0;
    pool->slots[i] = core__slot_make(pool, page, key.hash);
    pool->nkeys++;
    return 1;
}

/*
 * Backward-shift deletion keeps probe sequences unbroken without tombstones:
 * each entry after the hole, up to the next empty slot, moves into the hole
 * unless its home lies cyclically in (hole, its slot], i.e. unless its
 * displacement d = (slot - home) & mask is below the hole's distance.
 *
 * d comes from the slot itself when it can (core__home): the tag gives d
 * modulo 2^home_bits (m + 1 below). It is exact when the entry's cluster is
 * shorter than that: all slots from an entry's home to the entry are
 * occupied (the linear probing invariant), so an empty slot `e` before the
 * hole bounds d < (slot - e) & mask; when that bound is <= m + 1 the residue
 * is d itself. `e` is found by a short backward scan of the slot array
 * before anything moves. Otherwise (a longer cluster, or home_bits 0) the
 * page record gives the hash, as it always did before.
 */
static void index_remove(core_pool_t *pool, uint32_t page)
{
    size_t mask = pool->slot_mask;
    uint32_t hash = core__rec(pool, page)->hash;
    uint32_t slot = core__slot_make(pool, page, hash);
    size_t i = core__home(pool, hash);
    while (pool->slots[i] != slot)
        i = (i + 1) & mask;
    /* m: the residue mask of the home bits a slot carries; e: an empty slot
     * at most m + 1 before i, or none (have_e false). */
    size_t m = pool->home_bits ? (((size_t)1 << pool->home_bits) - 1) & mask : 0;
    size_t e = i;
    bool have_e = false;
    for (size_t k = 0; m && k <= m; k++) {
        e = (e - 1) & mask;
        if (pool->slots[e] == CORE_NIL) {
            have_e = true;
            break;
        }
    }
    size_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        uint32_t moved = pool->slots[j];
        if (moved == CORE_NIL)
            break;
        size_t d;
        if (have_e && ((j - e) & mask) <= m + 1)
            d = (j - core__slot_home_low(pool, moved)) & m;
        else
            d = (j - core__home(pool, core__rec(pool, core__slot_page(pool, moved))->hash)) & mask;
        if (d >= ((j - i) & mask)) {
            pool->slots[i] = moved;
            i = j;
        }
    }
    pool->slots[i] = CORE_NIL;
    pool->nkeys--;
}

/* --------------------------------------------------------------- lists */

static void list_init(core_list *list)
{
    list->head = list->tail = CORE_NIL;
    list->len = 0;
}

static void list_remove(core_pool_t *pool, core_list *list, uint32_t page)
{
    core_page_rec *rec = core__rec(pool, page);
    if (rec->prev != CORE_NIL)
        core__rec(pool, rec->prev)->next = rec->next;
    else
        list->head = rec->next;
    if (rec->next != CORE_NIL)
        core__rec(pool, rec->next)->prev = rec->prev;
    else
        list->tail = rec->prev;
    rec->prev = rec->next = CORE_NIL;
    list->len--;
}

static void list_insert_after(core_pool_t *pool, core_list *list, uint32_t after, uint32_t page)
{
    core_page_rec *rec = core__rec(pool, page);
    rec->prev = after;
    if (after == CORE_NIL) {
        rec->next = list->head;
        list->head = page;
    } else {
        core_page_rec *prev = core__rec(pool, after);
        rec->next = prev->next;
        prev->next = page;
    }
    if (rec->next != CORE_NIL)
        core__rec(pool, rec->next)->prev = page;
    else
        list->tail = page;
    list->len++;
}

/* Deadlines mostly arrive in order, so the walk back from the tail is short. */
static void list_insert_by_deadline(core_pool_t *pool, core_list *list, uint32_t page)
{
    int64_t deadline = core__rec(pool, page)->deadline;
    uint32_t after = list->tail;
    while (after != CORE_NIL && core__rec(pool, after)->deadline > deadline)
        after = core__rec(pool, after)->prev;
    list_insert_after(pool, list, after, page);
}

/* --------------------------------------------------------------- events */

static void emit(core_pool_t *pool, core_event_type type, uint64_t page, int64_t deadline)
{
    core_t *core = pool->core;
    if (!core->observer || core->replaying)
        return;
    core_event ev = {type, {pool->ns->name, pool->ns->name_len}, pool->rank, page,
                     {"", 0}, deadline};
    char buf[64];
    if (type == CORE_EV_RESERVE)
        ev.key = core__rec_key_text(core__rec(pool, (uint32_t)page), buf);
    core->observer(core->observer_ctx, &ev);
}

void core_set_observer(core_t *core, core_observer_fn fn, void *ctx)
{
    core->observer = fn;
    core->observer_ctx = ctx;
}

/* --------------------------------------------------------- write leases */

static size_t wlease_home(const core_pool_t *pool, uint32_t page)
{
    return (page * 0x9e3779b1u) & pool->wlease_mask;
}

static core_wlease *wlease_find(const core_pool_t *pool, uint32_t page)
{
    if (!pool->wleases)
        return NULL;
    for (size_t s = wlease_home(pool, page);; s = (s + 1) & pool->wlease_mask) {
        if (pool->wleases[s].page == page)
            return &pool->wleases[s];
        if (pool->wleases[s].page == CORE_NIL)
            return NULL;
    }
}

static core_wlease *wlease_place(core_pool_t *pool, core_wlease e)
{
    size_t s = wlease_home(pool, e.page);
    while (pool->wleases[s].page != CORE_NIL)
        s = (s + 1) & pool->wlease_mask;
    pool->wleases[s] = e;
    return &pool->wleases[s];
}

static core_wlease *wlease_get(core_pool_t *pool, uint32_t page)
{
    core_wlease *e = wlease_find(pool, page);
    if (e)
        return e;
    if (!pool->wleases || (pool->nwleases + 1) * 2 > pool->wlease_mask + 1) {
        core_wlease *old = pool->wleases;
        size_t old_cap = old ? pool->wlease_mask + 1 : 0;
        size_t cap = old_cap ? old_cap * 2 : 16;
        pool->wleases = hf_xmalloc(cap * sizeof *pool->wleases);
        for (size_t i = 0; i < cap; i++)
            pool->wleases[i] = (core_wlease){CORE_NIL, 0, 0};
        pool->wlease_mask = cap - 1;
        for (size_t i = 0; i < old_cap; i++)
            if (old[i].page != CORE_NIL)
                wlease_place(pool, old[i]);
        hf_xfree(old);
    }
    pool->nwleases++;
    return wlease_place(pool, (core_wlease){page, 0, 0});
}

/* Backward-shift deletion, as in the key index. */
static void wlease_remove(core_pool_t *pool, core_wlease *e)
{
    size_t hole = (size_t)(e - pool->wleases);
    pool->wleases[hole].page = CORE_NIL;
    pool->nwleases--;
    for (size_t s = (hole + 1) & pool->wlease_mask; pool->wleases[s].page != CORE_NIL;
         s = (s + 1) & pool->wlease_mask) {
        size_t home = wlease_home(pool, pool->wleases[s].page);
        /* the entry may move to the hole if its home is not in (hole, s] */
        if (((s - home) & pool->wlease_mask) >= ((s - hole) & pool->wlease_mask)) {
            pool->wleases[hole] = pool->wleases[s];
            pool->wleases[s].page = CORE_NIL;
            hole = s;
        }
    }
}

/* The page leaves OWNED: its write lease (if any) goes with it; the record's
 * deadline keeps the protection for draining. */
static void wlease_drop(core_pool_t *pool, uint32_t page)
{
    core_wlease *e = pool->nwleases ? wlease_find(pool, page) : NULL;
    if (e)
        wlease_remove(pool, e);
}

/* One more writer of the OWNED `page`, protected until `end`. */
static void wlease_add(core_pool_t *pool, uint32_t page, int64_t end)
{
    core_wlease *e = wlease_get(pool, page);
    e->writers++;
    if (end > e->end)
        e->end = end;
    if (pool->nwleases == 1 || end < pool->wlease_min)
        pool->wlease_min = end;
    core_page_rec *rec = core__rec(pool, page);
    if (end > rec->deadline)
        rec->deadline = end;
}

static void page_write_lease(core_pool_t *pool, uint32_t page, int64_t now)
{
    wlease_add(pool, page, now + pool->core->config.write_lease_ms);
    pool->counters.write_leases++;
    emit(pool, CORE_EV_WRITE_LEASE, page, now + pool->core->config.write_lease_ms);
}

/* A writer of the OWNED `page` confirmed it. The last one ends the lease:
 * what is left is at most a read lease from now, which no read lease still
 * running outlasts (each ends at most read_lease_ms after it was given). */
static void page_write_done(core_pool_t *pool, uint32_t page, int64_t now)
{
    core_wlease *e = pool->nwleases ? wlease_find(pool, page) : NULL;
    if (!e)
        return;
    if (--e->writers > 0) {
        /* one writer of several: reported too, so that a replay or a
         * follower counts the writers left (the protection is unchanged) */
        emit(pool, CORE_EV_WRITE_DONE, page, core__rec(pool, page)->deadline);
        return;
    }
    wlease_remove(pool, e);
    core_page_rec *rec = core__rec(pool, page);
    int64_t until = now + pool->core->config.read_lease_ms;
    if (until < rec->deadline)
        rec->deadline = until;
    pool->counters.write_leases_ended++;
    emit(pool, CORE_EV_WRITE_DONE, page, rec->deadline);
}

/* Drop the write leases whose end passed (their writers never confirmed). */
static void wlease_expire(core_pool_t *pool, int64_t now)
{
    if (pool->nwleases == 0 || pool->wlease_min > now)
        return;
    int64_t min = INT64_MAX;
    for (size_t s = 0; s <= pool->wlease_mask;) {
        core_wlease *e = &pool->wleases[s];
        if (e->page != CORE_NIL && e->end <= now) {
            uint32_t page = e->page, writers = e->writers;
            wlease_remove(pool, e); /* may shift a later entry into s: look again */
            pool->counters.write_leases_expired++;
            /* one WRITE_DONE per writer that never confirmed */
            for (uint32_t w = 0; w < writers || w == 0; w++)
                emit(pool, CORE_EV_WRITE_DONE, page, core__rec(pool, page)->deadline);
            continue;
        }
        if (e->page != CORE_NIL && e->end < min)
            min = e->end;
        s++;
    }
    pool->wlease_min = min;
}

/* ---------------------------------------------------------- page states */

static uint64_t pool_free_count(const core_pool_t *pool)
{
    return pool->nfree + (pool->num_pages - pool->touched);
}

static void ensure_chunk(core_pool_t *pool, uint32_t page)
{
    size_t chunk = page >> CORE_CHUNK_SHIFT;
    if (chunk < pool->nchunks)
        return;
    if (chunk >= pool->chunks_cap) {
        size_t cap = pool->chunks_cap ? pool->chunks_cap * 2 : 4;
        while (cap <= chunk)
            cap *= 2;
        pool->chunks = hf_xreallocarray(pool->chunks, cap, sizeof *pool->chunks);
        pool->chunks_cap = cap;
    }
    pool->chunks[chunk] = hf_xcalloc(CORE_CHUNK_PAGES, sizeof(core_page_rec));
    pool->nchunks = chunk + 1;
}

/* Take a FREE page without eviction, or CORE_NIL. */
static uint32_t take_free_page(core_pool_t *pool)
{
    if (pool->nfree > 0)
        return pool->free_stack[--pool->nfree];
    if (pool->touched >= pool->num_pages)
        return CORE_NIL;
    uint32_t page = (uint32_t)pool->touched++;
    ensure_chunk(pool, page);
    core_page_rec *rec = core__rec(pool, page);
    rec->bits = CORE_PAGE_FREE;
    rec->prev = rec->next = CORE_NIL;
    return page;
}

static void free_stack_push(core_pool_t *pool, uint32_t page)
{
    if (pool->nfree == pool->free_cap) {
        pool->free_cap = pool->free_cap ? pool->free_cap * 2 : 64;
        pool->free_stack = hf_xreallocarray(pool->free_stack, pool->free_cap, sizeof(uint32_t));
    }
    pool->free_stack[pool->nfree++] = page;
}

/* Take a FREE page off the stack (live replay: the primary took it, almost
 * always from the top). */
static void free_stack_remove(core_pool_t *pool, uint32_t page)
{
    for (size_t i = pool->nfree; i-- > 0;) {
        if (pool->free_stack[i] == page) {
            memmove(&pool->free_stack[i], &pool->free_stack[i + 1],
                    (pool->nfree - i - 1) * sizeof(uint32_t));
            pool->nfree--;
            return;
        }
    }
}

static void page_free(core_pool_t *pool, uint32_t page)
{
    core_page_rec *rec = core__rec(pool, page);
    emit(pool, CORE_EV_FREE, page, 0);
    rec_drop_key(rec);
    rec->bits = CORE_PAGE_FREE;
    rec->deadline = 0;
    free_stack_push(pool, page);
}

/* page was taken from the free stack or the mark, or evicted. */
static void page_reserve(core_pool_t *pool, uint32_t page, const core_key *key, int64_t deadline)
{
    core_page_rec *rec = core__rec(pool, page);
    rec_set_key(rec, key);
    rec->bits = CORE_PAGE_RESERVED;
    rec->deadline = deadline;
    list_insert_by_deadline(pool, &pool->reserved, page);
    pool->counters.reservations++;
    emit(pool, CORE_EV_RESERVE, page, deadline);
}

/* A RESERVED page becomes OWNED by its key (which owns no other page and,
 * unless `indexed`, is not in the key index yet). */
static void page_own_indexed(core_pool_t *pool, uint32_t page, bool indexed)
{
    core_page_rec *rec = core__rec(pool, page);
    list_remove(pool, &pool->reserved, page);
    rec->bits = CORE_PAGE_OWNED | CORE_USE_INSERT << CORE_REC_USE_SHIFT;
    rec->deadline = 0;
    if (!indexed)
        index_insert(pool, page);
    pool->nowned++;
    pool->counters.confirmations++;
    emit(pool, CORE_EV_OWN, page, 0);
}

static void page_own(core_pool_t *pool, uint32_t page)
{
    page_own_indexed(pool, page, false);
}

/* The page, off every list, loses its key and drains until its deadline. */
static void page_drain(core_pool_t *pool, uint32_t page)
{
    core_page_rec *rec = core__rec(pool, page);
    rec_drop_key(rec);
    rec->bits = CORE_PAGE_DRAINING;
    list_insert_by_deadline(pool, &pool->draining, page);
    emit(pool, CORE_EV_DRAIN, page, rec->deadline);
}

/* The page is no longer demoted (its stack entry, if any, goes stale). */
static void page_undemote(core_pool_t *pool, core_page_rec *rec)
{
    if (rec->bits & CORE_REC_DEMOTED) {
        rec->bits &= (uint8_t)~CORE_REC_DEMOTED;
        pool->ndemoted--;
    }
}

/* Drop the stale entries of the demoted stack (and all but the topmost
 * entry of a page), keeping the order of the others. */
static void demoted_compact(core_pool_t *pool)
{
    size_t keep = pool->ndemoted_stack;
    for (size_t i = pool->ndemoted_stack; i-- > 0;) {
        uint32_t page = pool->demoted[i];
        core_page_rec *rec = core__rec(pool, page);
        /* PINNED doubles as "seen" here: never set on a demoted page */
        if (!(rec->bits & CORE_REC_DEMOTED) || (rec->bits & CORE_REC_PINNED))
            continue;
        rec->bits |= CORE_REC_PINNED;
        pool->demoted[--keep] = page;
    }
    size_t n = pool->ndemoted_stack - keep;
    memmove(pool->demoted, pool->demoted + keep, n * sizeof *pool->demoted);
    pool->ndemoted_stack = n;
    for (size_t i = 0; i < n; i++)
        core__rec(pool, pool->demoted[i])->bits &= (uint8_t)~CORE_REC_PINNED;
}

/* The OWNED page is demoted: it goes first on eviction. */
static void page_demote(core_pool_t *pool, uint32_t page)
{
    core_page_rec *rec = core__rec(pool, page);
    if (!(rec->bits & CORE_REC_DEMOTED)) {
        rec->bits |= CORE_REC_DEMOTED;
        pool->ndemoted++;
    }
    if (pool->ndemoted_stack == pool->demoted_cap) {
        if (pool->ndemoted_stack > 2 * pool->ndemoted + 64)
            demoted_compact(pool);
        if (pool->ndemoted_stack == pool->demoted_cap) {
            pool->demoted_cap = pool->demoted_cap ? pool->demoted_cap * 2 : 64;
            pool->demoted = hf_xreallocarray(pool->demoted, pool->demoted_cap, sizeof(uint32_t));
        }
    }
    pool->demoted[pool->ndemoted_stack++] = page;
}

/* An OWNED page leaves OWNED (the caller sets its new state). */
static void owned_leave(core_pool_t *pool, uint32_t page)
{
    index_remove(pool, page);
    page_undemote(pool, core__rec(pool, page));
    pool->nowned--;
    wlease_drop(pool, page);
}

/* An OWNED page loses its key: FREE now, or DRAINING while leased. */
static void page_disown(core_pool_t *pool, uint32_t page, int64_t now)
{
    owned_leave(pool, page);
    if (core__rec(pool, page)->deadline > now)
        page_drain(pool, page);
    else
        page_free(pool, page);
}

static void page_unreserve(core_pool_t *pool, uint32_t page)
{
    list_remove(pool, &pool->reserved, page);
    page_free(pool, page);
}

/* A release: the page drains for the release grace, so that the same
 * release, replayed by a client that did not see the answer, finds it
 * DRAINING (refused, harmless) and never a page reserved for someone else. */
static void page_release(core_pool_t *pool, uint32_t page, int64_t now)
{
    int64_t grace = pool->core->config.release_grace_ms;
    if (grace <= 0) {
        page_unreserve(pool, page);
        return;
    }
    list_remove(pool, &pool->reserved, page);
    emit(pool, CORE_EV_FREE, page, 0); /* the log has no RESERVED -> DRAINING */
    core__rec(pool, page)->deadline = now + grace;
    page_drain(pool, page);
}

/* A use: one more to the use count (core.h "Recency"), and no longer
 * demoted. Only this record is written. */
static void page_use(core_pool_t *pool, core_page_rec *rec)
{
    unsigned use = core__rec_use(rec);
    if (use < CORE_USE_MAX)
        core__rec_set_use(rec, use + 1);
    page_undemote(pool, rec);
}

static void page_touch(core_pool_t *pool, uint32_t page)
{
    page_use(pool, core__rec(pool, page));
    emit(pool, CORE_EV_USE, page, core__rec(pool, page)->deadline);
}

static void page_lease(core_pool_t *pool, uint32_t page, int64_t now)
{
    core_page_rec *rec = core__rec(pool, page);
    int64_t until = now + pool->core->config.read_lease_ms;
    if (until > rec->deadline)
        rec->deadline = until;
    page_touch(pool, page);
}

/* ------------------------------------------------------------- leases */

void core_pool_expire(core_pool_t *pool, int64_t now)
{
    uint32_t page;
    while ((page = pool->reserved.head) != CORE_NIL && core__rec(pool, page)->deadline <= now) {
        page_unreserve(pool, page);
        pool->counters.expired_reservations++;
    }
    while ((page = pool->draining.head) != CORE_NIL && core__rec(pool, page)->deadline <= now) {
        list_remove(pool, &pool->draining, page);
        page_free(pool, page);
    }
    wlease_expire(pool, now);
}

/* ------------------------------------------------------ pools and core */

core_t *core_new(const core_config *config)
{
    core_t *core = hf_xcalloc(1, sizeof *core);
    core->config = *config;
    if (core->config.max_pages == 0 || core->config.max_pages > CORE_MAX_PAGES_LIMIT)
        core->config.max_pages = CORE_MAX_PAGES_LIMIT;
    return core;
}

void core_set_config(core_t *core, const core_config *config)
{
    uint64_t seed = core->config.hash_seed;
    core->config = *config;
    core->config.hash_seed = seed;
    if (core->config.max_pages == 0 || core->config.max_pages > CORE_MAX_PAGES_LIMIT)
        core->config.max_pages = CORE_MAX_PAGES_LIMIT;
}

const core_config *core_get_config(const core_t *core)
{
    return &core->config;
}

static void pool_release_memory(core_pool_t *pool)
{
    for (size_t c = 0; c < pool->nchunks; c++) {
        /* Records at or above the high-water mark were never written: a pool
         * of a few pages is freed without reading a whole chunk. */
        uint64_t first = (uint64_t)c << CORE_CHUNK_SHIFT;
        uint64_t used = pool->touched > first ? pool->touched - first : 0;
        if (used > CORE_CHUNK_PAGES)
            used = CORE_CHUNK_PAGES;
        for (uint32_t i = 0; i < used; i++)
            if (pool->chunks[c][i].key_kind == CORE_KEY_EXT)
                hf_xfree(pool->chunks[c][i].key.ext.ptr);
        hf_xfree(pool->chunks[c]);
    }
    hf_xfree(pool->chunks);
    hf_xfree(pool->free_stack);
    hf_xfree(pool->slots);
    hf_xfree(pool->wleases);
    hf_xfree(pool->demoted);
}

void core_clear_all(core_t *core)
{
    if (core->observer && !core->replaying && core->nns > 0) {
        core_event ev = {CORE_EV_CLEAR_ALL, {"", 0}, 0, 0, {"", 0}, 0};
        core->observer(core->observer_ctx, &ev);
    }
    for (size_t n = 0; n < core->nns; n++) {
        core_ns *ns = core->namespaces[n];
        for (uint32_t r = 0; r < ns->ranks_cap; r++) {
            if (ns->by_rank[r]) {
                pool_release_memory(ns->by_rank[r]);
                hf_xfree(ns->by_rank[r]);
            }
        }
        hf_xfree(ns->by_rank);
        hf_xfree(ns->name);
        hf_xfree(ns);
    }
    hf_xfree(core->namespaces);
    core->namespaces = NULL;
    core->nns = 0;
}

void core_free(core_t *core)
{
    if (!core)
        return;
    core_clear_all(core);
    hf_xfree(core);
}

static core_ns *ns_find(const core_t *core, hf_slice name)
{
    for (size_t n = 0; n < core->nns; n++) {
        core_ns *ns = core->namespaces[n];
        if (ns->name_len == name.len && memcmp(ns->name, name.ptr, name.len) == 0)
            return ns;
    }
    return NULL;
}

static core_ns *ns_create(core_t *core, hf_slice name)
{
    core_ns *ns = hf_xcalloc(1, sizeof *ns);
    ns->name = hf_xmalloc(name.len + 1);
    memcpy(ns->name, name.ptr, name.len);
    ns->name[name.len] = '\0';
    ns->name_len = name.len;
    core->namespaces = hf_xreallocarray(core->namespaces, core->nns + 1, sizeof *core->namespaces);
    core->namespaces[core->nns++] = ns;
    return ns;
}

core_pool_t *core_pool_find(core_t *core, hf_slice name, uint32_t rank)
{
    core_ns *ns = ns_find(core, name);
    if (!ns || rank >= ns->ranks_cap)
        return NULL;
    return ns->by_rank[rank];
}

int core_pool_init(core_t *core, hf_slice name, uint32_t rank, uint64_t num_pages,
                   uint64_t *existing_pages)
{
    /* Replay rebuilds pools accepted under an earlier run's limits: max_pages
     * and max_ranks bound what clients may create, not what exists, so a
     * restart with lower limits keeps every pool (instead of finding the log
     * "damaged", where --salvage would drop them). */
    uint64_t max_pages = core->replaying ? CORE_MAX_PAGES_LIMIT : core->config.max_pages;
    uint32_t max_ranks = core->replaying ? CORE_MAX_RANKS_LIMIT : core->config.max_ranks;
    if (num_pages > max_pages || rank >= max_ranks)
        return CORE_EINVAL;
    core_pool_t *pool = core_pool_find(core, name, rank);
    if (pool) {
        if (existing_pages)
            *existing_pages = pool->num_pages;
        return 0;
    }
    core_ns *ns = ns_find(core, name);
    if (!ns)
        ns = ns_create(core, name);
    if (rank >= ns->ranks_cap) {
        uint32_t cap = ns->ranks_cap ? ns->ranks_cap : 8;
        while (cap <= rank)
            cap *= 2;
        ns->by_rank = hf_xreallocarray(ns->by_rank, cap, sizeof *ns->by_rank);
        memset(ns->by_rank + ns->ranks_cap, 0, (cap - ns->ranks_cap) * sizeof *ns->by_rank);
        ns->ranks_cap = cap;
    }
    pool = hf_xcalloc(1, sizeof *pool);
    pool->core = core;
    pool->ns = ns;
    pool->rank = rank;
    pool->num_pages = num_pages;
    /* page_bits: the fewest bits whose all-ones value exceeds num_pages - 1 */
    pool->page_mask = 1;
    while (pool->page_mask < num_pages && pool->page_mask != UINT32_MAX)
        pool->page_mask = pool->page_mask << 1 | 1;
    pool->page_bits = (uint8_t)__builtin_popcount(pool->page_mask);
    /* Half the tag (at most 8 bits) carries home bits; the rest filters. The
     * home needs at least as many bits as the index has slot bits, at most
     * page_bits + 1 (the index holds at most num_pages keys at a load of at
     * least 3/8): page_bits from outside the tag plus home_bits >= 1. */
    unsigned tag_bits = 32u - pool->page_bits;
    pool->home_bits = (uint8_t)(tag_bits / 2 > 8 ? 8 : tag_bits / 2);
    list_init(&pool->reserved);
    list_init(&pool->draining);
    ns->by_rank[rank] = pool;
    ns->npools++;
    if (existing_pages)
        *existing_pages = num_pages;
    emit(pool, CORE_EV_POOL_INIT, num_pages, 0);
    return 1;
}

void core_pool_clear(core_pool_t *pool, int64_t now)
{
    core_pool_expire(pool, now);
    for (uint64_t p = 0; p < pool->touched && pool->nowned > 0; p++)
        if (core__rec_state(core__rec(pool, (uint32_t)p)) == CORE_PAGE_OWNED)
            page_disown(pool, (uint32_t)p, now);
    while (pool->reserved.head != CORE_NIL)
        page_unreserve(pool, pool->reserved.head);
}

/* ------------------------------------------------- completeness helpers */

/* When one rank loses a key, the other ranks' pages for it can no longer
 * serve a complete key: move them to the eviction end (unless read-leased). */
static void demote_in_other_ranks(core_pool_t *pool, const core_key *key, int64_t now)
{
    core_ns *ns = pool->ns;
    if (ns->npools < 2)
        return;
    for (uint32_t r = 0; r < ns->ranks_cap; r++) {
        core_pool_t *other = ns->by_rank[r];
        if (!other || other == pool)
            continue;
        uint32_t page = core__index_find(other, key);
        if (page == CORE_NIL || core__rec(other, page)->deadline > now)
            continue;
        page_demote(other, page);
        emit(other, CORE_EV_DEMOTE, page, 0);
    }
}

/* ---------------------------------------------------------- allocation */

/*
 * Eviction (core.h "Recency"): a demoted page first, else the clock. An
 * allocation whose clock sweep met no evictable page in a full turn sweeps
 * no more (leases do not change within a call, and pages it reserves are
 * not OWNED), which keeps a call linear when every page is leased.
 */
typedef struct evict_scan {
    bool exhausted;
} evict_scan;

/* Neither leased nor a hit of the running allocation. */
static inline bool evictable(const core_page_rec *rec, int64_t now)
{
    return rec->deadline <= now && !(rec->bits & CORE_REC_PINNED);
}

/* The most recently demoted evictable page, off the stack; or CORE_NIL. */
static uint32_t take_demoted(core_pool_t *pool, int64_t now)
{
    while (pool->ndemoted_stack > 0 &&
           !(core__rec(pool, pool->demoted[pool->ndemoted_stack - 1])->bits & CORE_REC_DEMOTED))
        pool->ndemoted_stack--; /* stale */
    if (pool->ndemoted == 0)
        return CORE_NIL;
    /* A demoted page is unleased when demoted and any use undemotes it, so
     * the top one is evictable unless the clock went back. */
    for (size_t i = pool->ndemoted_stack; i-- > 0;) {
        uint32_t page = pool->demoted[i];
        core_page_rec *rec = core__rec(pool, page);
        if (!(rec->bits & CORE_REC_DEMOTED) || !evictable(rec, now))
            continue;
        bool topmost = true; /* a lower duplicate of a page demoted again is stale */
        for (size_t j = i + 1; j < pool->ndemoted_stack && topmost; j++)
            topmost = pool->demoted[j] != page;
        if (!topmost)
            continue;
        memmove(&pool->demoted[i], &pool->demoted[i + 1],
                (pool->ndemoted_stack - i - 1) * sizeof *pool->demoted);
        pool->ndemoted_stack--;
        return page;
    }
    return CORE_NIL;
}

/* The clock: the first OWNED evictable page with a use count of 0 from the
 * hand on, lowering the count of every other OWNED page passed; CORE_NIL
 * after a full turn without an evictable page. Emits the hand's move. */
static uint32_t clock_sweep(core_pool_t *pool, evict_scan *scan, int64_t now)
{
    uint64_t n = pool->num_pages; /* == touched: nothing is FREE when we evict */
    uint32_t hand = pool->hand, victim = CORE_NIL;
    uint64_t steps = 0;
    bool seen_evictable = false;
    for (;;) {
        if (steps > 0 && steps % n == 0 && !seen_evictable)
            break; /* a full turn without an evictable page */
        if ((steps & 7) == 0) /* the records ahead are read in page order */
            for (uint32_t k = 8; k < 16; k++)
                if ((uint64_t)hand + k < n)
                    prefetch_rec(core__rec(pool, hand + k), 1);
        uint32_t page = hand;
        hand = hand + 1 == n ? 0 : hand + 1;
        steps++;
        core_page_rec *rec = core__rec(pool, page);
        if (core__rec_state(rec) != CORE_PAGE_OWNED)
            continue;
        unsigned use = core__rec_use(rec);
        if (evictable(rec, now)) {
            seen_evictable = true;
            if (use == 0) {
                victim = page;
                break;
            }
        }
        if (use > 0)
            core__rec_set_use(rec, use - 1);
    }
    pool->hand = hand;
    if (victim == CORE_NIL)
        scan->exhausted = true;
    emit(pool, CORE_EV_SWEEP, hand, (int64_t)(steps / n));
    return victim;
}

static uint32_t find_evictable(core_pool_t *pool, evict_scan *scan, int64_t now)
{
    if (!pool->core->config.evict_lru || pool->nowned == 0 || scan->exhausted)
        return CORE_NIL;
    uint32_t page = take_demoted(pool, now);
    return page != CORE_NIL ? page : clock_sweep(pool, scan, now);
}

static uint32_t take_page(core_pool_t *pool, evict_scan *scan, int64_t now)
{
    uint32_t page = take_free_page(pool);
    if (page != CORE_NIL)
        return page;
    page = find_evictable(pool, scan, now);
    if (page == CORE_NIL)
        return CORE_NIL;
    core_key key;
    core__rec_to_key(pool->core, core__rec(pool, page), &key);
    owned_leave(pool, page); /* an ended write lease not swept yet; a live one is never evicted */
    /* key.ext still points at the record's copy: demote before dropping it. */
    demote_in_other_ranks(pool, &key, now);
    emit(pool, CORE_EV_FREE, page, 0);
    rec_drop_key(core__rec(pool, page));
    pool->counters.evictions++;
    return page;
}

/* Can `need` new pages be had (free or evictable) without taking any? Every
 * evictable OWNED page is: the clock lowers counts until one is 0. */
static int can_take(core_pool_t *pool, uint64_t need, int64_t now)
{
    uint64_t avail = pool_free_count(pool);
    if (avail >= need)
        return 1;
    if (!pool->core->config.evict_lru)
        return 0;
    for (uint64_t p = 0; p < pool->touched && avail < need; p++) {
        const core_page_rec *rec = core__rec(pool, (uint32_t)p);
        if (core__rec_state(rec) == CORE_PAGE_OWNED && evictable(rec, now))
            avail++;
    }
    return avail >= need;
}

/* Index of the first occurrence of each key within the call (dup[i] == i for firsts). */
static void find_repeats(const core_key *enc, size_t n, size_t *dup)
{
    size_t cap = 16;
    while (cap < n * 2)
        cap *= 2;
    size_t *table = hf_xmalloc(cap * sizeof *table);
    memset(table, 0xff, cap * sizeof *table);
    for (size_t i = 0; i < n; i++) {
        size_t s = enc[i].hash & (cap - 1);
        dup[i] = i;
        for (; table[s] != (size_t)-1; s = (s + 1) & (cap - 1)) {
            const core_key *a = &enc[table[s]], *b = &enc[i];
            if (a->hash == b->hash && a->kind == b->kind && a->len == b->len &&
                (a->kind == CORE_KEY_EXT ? memcmp(a->ext, b->ext, a->len) == 0
                                         : memcmp(a->bytes, b->bytes, 32) == 0)) {
                dup[i] = table[s];
                break;
            }
        }
        if (dup[i] == i)
            table[s] = i;
    }
    hf_xfree(table);
}

void core_allocate(core_pool_t *pool, const hf_slice *keys, size_t n, core_alloc_mode mode,
                   int64_t now, int64_t *pages, bool *existed)
{
    if (n == 0)
        return;
    core_pool_expire(pool, now);
    core_key *enc = hf_xmalloc(n * sizeof *enc);
    size_t *dup = hf_xmalloc(n * sizeof *dup);
    for (size_t i = 0; i < n; i++)
        core__key_encode(pool->core, keys[i], &enc[i]);
    find_repeats(enc, n, dup);

    /* Pass 1: hits answer their page, count a use and are pinned (never
     * evicted for the other keys of this call). */
    uint64_t hits = 0, need = 0;
    for (size_t i = 0; i < n; i++) {
        if (i % PREFETCH_BLOCK == 0)
            index_prefetch(pool, &enc[i], n - i < PREFETCH_BLOCK ? n - i : PREFETCH_BLOCK);
        if (dup[i] != i)
            continue;
        uint32_t page = core__index_find(pool, &enc[i]);
        pages[i] = page == CORE_NIL ? -1 : (int64_t)page;
        if (page != CORE_NIL) {
            page_touch(pool, page);
            core__rec(pool, page)->bits |= CORE_REC_PINNED;
            hits++;
        } else {
            need++;
        }
    }
    pool->counters.hits += hits;
    pool->counters.misses += need;

    /* Pass 2: new keys get pages, unless all-or-nothing cannot be met. */
    int give = mode == CORE_ALLOC_PARTIAL || can_take(pool, need, now);
    /* Write protection: vLLM rewrites every hit of an allocation that got
     * all its new pages before it confirms them (core.h). */
    bool lease_hits = mode == CORE_ALLOC_ALL_OR_NOTHING && give && hits > 0 &&
                      pool->core->config.write_lease_ms > 0;
    evict_scan scan = {false};
    int64_t deadline = now + pool->core->config.reservation_ms;
    for (size_t i = 0; i < n; i++) {
        if (dup[i] != i) {
            pages[i] = pages[dup[i]];
            if (existed)
                existed[i] = existed[dup[i]];
            continue;
        }
        bool hit = pages[i] >= 0;
        if (existed)
            existed[i] = hit;
        if (hit && lease_hits)
            page_write_lease(pool, (uint32_t)pages[i], now);
        if (hit || !give)
            continue;
        uint32_t page = take_page(pool, &scan, now);
        if (page != CORE_NIL)
            page_reserve(pool, page, &enc[i], deadline);
        pages[i] = page == CORE_NIL ? -1 : (int64_t)page;
    }
    for (size_t i = 0; hits > 0 && i < n; i++)
        if (dup[i] == i && pages[i] >= 0) /* hits; a reserved page has no PINNED */
            core__rec(pool, (uint32_t)pages[i])->bits &= (uint8_t)~CORE_REC_PINNED;
    hf_xfree(dup);
    hf_xfree(enc);
}

/* ------------------------------------------------- confirm and release */

static int page_in_range(const core_pool_t *pool, int64_t page)
{
    return page >= 0 && (uint64_t)page < pool->num_pages;
}

static void refuse(core_pool_t *pool, uint64_t *counters, core_refusal why, size_t *refused)
{
    (void)pool;
    counters[why]++;
    (*refused)++;
}

static void confirm_one(core_pool_t *pool, const core_key *key, int64_t page, int64_t now,
                        size_t *refused)
{
    uint64_t *refusals = pool->counters.refused_confirms;
    if (!page_in_range(pool, page)) {
        refuse(pool, refusals, CORE_REFUSE_OUT_OF_RANGE, refused);
        return;
    }
    if ((uint64_t)page >= pool->touched) {
        refuse(pool, refusals, CORE_REFUSE_NOT_RESERVED, refused);
        return;
    }
    core_page_rec *rec = core__rec(pool, (uint32_t)page);
    if (core__rec_state(rec) != CORE_PAGE_RESERVED && core__rec_state(rec) != CORE_PAGE_OWNED) {
        refuse(pool, refusals, CORE_REFUSE_NOT_RESERVED, refused);
        return;
    }
    if (!core__rec_key_eq(rec, key)) {
        refuse(pool, refusals, CORE_REFUSE_OTHER_KEY, refused);
        return;
    }
    if (core__rec_state(rec) == CORE_PAGE_OWNED) { /* re-confirm of a hit: a use, ends a write */
        page_write_done(pool, (uint32_t)page, now);
        page_touch(pool, (uint32_t)page);
        return;
    }
    uint32_t owned = core__index_find(pool, key);
    if (owned != CORE_NIL) { /* the key won a page meanwhile: keep that one */
        page_unreserve(pool, (uint32_t)page);
        page_touch(pool, owned);
        pool->counters.duplicate_confirmations++;
        return;
    }
    page_own(pool, (uint32_t)page);
}

static void release_one(core_pool_t *pool, int64_t page, int64_t now, size_t *refused)
{
    uint64_t *refusals = pool->counters.refused_releases;
    if (!page_in_range(pool, page)) {
        refuse(pool, refusals, CORE_REFUSE_OUT_OF_RANGE, refused);
        return;
    }
    core_page_state state = (uint64_t)page < pool->touched ? core__rec_state(core__rec(pool, (uint32_t)page))
                                                           : CORE_PAGE_FREE;
    if (state == CORE_PAGE_RESERVED) {
        page_release(pool, (uint32_t)page, now);
        pool->counters.releases++;
    } else {
        refuse(pool, refusals, state == CORE_PAGE_OWNED ? CORE_REFUSE_OWNED : CORE_REFUSE_NOT_RESERVED,
               refused);
    }
}

void core_confirm(core_pool_t *pool, const hf_slice *keys, const int64_t *pages, size_t n,
                  const int64_t *release, size_t nrel, int64_t now, size_t *refused)
{
    size_t count = 0;
    core_key enc[PREFETCH_BLOCK];
    core_pool_expire(pool, now);
    for (size_t i = 0; i < n; i++) {
        size_t j = i % PREFETCH_BLOCK;
        if (j == 0) { /* the records named by the pages, and the keys' slots */
            size_t m = n - i < PREFETCH_BLOCK ? n - i : PREFETCH_BLOCK;
            for (size_t k = 0; k < m; k++) {
                if (pages[i + k] >= 0 && (uint64_t)pages[i + k] < pool->touched)
                    prefetch_rec(core__rec(pool, (uint32_t)pages[i + k]), 1);
                core__key_encode(pool->core, keys[i + k], &enc[k]);
            }
            index_prefetch(pool, enc, m);
        }
        confirm_one(pool, &enc[j], pages[i], now, &count);
    }
    for (size_t i = 0; i < nrel; i++)
        release_one(pool, release[i], now, &count);
    if (refused)
        *refused = count;
}

/* ------------------------------------------------------------- readers */

static uint32_t find_raw(core_pool_t *pool, hf_slice raw, core_key *key)
{
    core__key_encode(pool->core, raw, key);
    return core__index_find(pool, key);
}

void core_exists(core_pool_t *pool, const hf_slice *keys, size_t n, int64_t now, bool *present)
{
    int64_t pages_buf[64];
    int64_t *pages = n <= 64 ? pages_buf : hf_xmalloc(n * sizeof *pages);
    core_lookup(pool, keys, n, now, pages);
    for (size_t i = 0; i < n; i++)
        present[i] = pages[i] >= 0;
    if (pages != pages_buf)
        hf_xfree(pages);
}

void core_lookup(core_pool_t *pool, const hf_slice *keys, size_t n, int64_t now, int64_t *pages)
{
    core_key enc[PREFETCH_BLOCK];
    core_pool_expire(pool, now);
    for (size_t i = 0; i < n; i++) {
        size_t j = i % PREFETCH_BLOCK;
        if (j == 0) {
            size_t m = n - i < PREFETCH_BLOCK ? n - i : PREFETCH_BLOCK;
            for (size_t k = 0; k < m; k++)
                core__key_encode(pool->core, keys[i + k], &enc[k]);
            index_prefetch(pool, enc, m);
        }
        uint32_t page = core__index_find(pool, &enc[j]);
        if (page == CORE_NIL) {
            pages[i] = -1;
            pool->counters.misses++;
            continue;
        }
        page_lease(pool, page, now);
        pages[i] = page;
        pool->counters.hits++;
    }
}

void core_delete(core_pool_t *pool, const hf_slice *keys, size_t n, int64_t now)
{
    core_pool_expire(pool, now);
    for (size_t i = 0; i < n; i++) {
        core_key key;
        uint32_t page = find_raw(pool, keys[i], &key);
        if (page == CORE_NIL)
            continue;
        page_disown(pool, page, now);
        demote_in_other_ranks(pool, &key, now);
    }
}

/* Page of `key` in every pool of ns into found[rank]; 1 if all own it. */
static int complete_pages(core_ns *ns, const core_key *key, uint32_t *found)
{
    for (uint32_t r = 0; r < ns->ranks_cap; r++) {
        core_pool_t *pool = ns->by_rank[r];
        if (!pool)
            continue;
        found[r] = core__index_find(pool, key);
        if (found[r] == CORE_NIL)
            return 0;
    }
    return 1;
}

/* Shared walk of batch_exists and get_locations: complete keys are leased in
 * every rank; answer[i] is the page in `rank` (or 0 if rank is CORE_NIL). */
static void complete_walk(core_t *core, core_ns *ns, uint32_t rank, const hf_slice *keys,
                          size_t n, int64_t now, int64_t *answer)
{
    for (size_t i = 0; i < n; i++)
        answer[i] = -1;
    if (!ns || ns->npools == 0)
        return;
    uint32_t *found = hf_xmalloc(ns->ranks_cap * sizeof *found);
    for (uint32_t r = 0; r < ns->ranks_cap; r++)
        if (ns->by_rank[r])
            core_pool_expire(ns->by_rank[r], now);
    core_key enc[PREFETCH_BLOCK];
    for (size_t i = 0; i < n; i++) {
        size_t j = i % PREFETCH_BLOCK;
        if (j == 0) {
            size_t m = n - i < PREFETCH_BLOCK ? n - i : PREFETCH_BLOCK;
            for (size_t k = 0; k < m; k++)
                core__key_encode(core, keys[i + k], &enc[k]);
            for (uint32_t r = 0; r < ns->ranks_cap; r++)
                if (ns->by_rank[r])
                    index_prefetch(ns->by_rank[r], enc, m);
        }
        int complete = complete_pages(ns, &enc[j], found);
        for (uint32_t r = 0; r < ns->ranks_cap; r++) {
            core_pool_t *pool = ns->by_rank[r];
            if (!pool)
                continue;
            if (complete) {
                page_lease(pool, found[r], now);
                pool->counters.hits++;
            } else {
                pool->counters.misses++;
            }
        }
        if (complete)
            answer[i] = rank == CORE_NIL ? 0 : found[rank];
    }
    hf_xfree(found);
}

void core_complete_exists(core_t *core, hf_slice ns, const hf_slice *keys, size_t n, int64_t now,
                          bool *present)
{
    int64_t *answer = hf_xmalloc((n ? n : 1) * sizeof *answer);
    complete_walk(core, ns_find(core, ns), CORE_NIL, keys, n, now, answer);
    for (size_t i = 0; i < n; i++)
        present[i] = answer[i] >= 0;
    hf_xfree(answer);
}

int core_complete_locations(core_t *core, hf_slice ns, uint32_t rank, const hf_slice *keys,
                            size_t n, int64_t now, int64_t *pages)
{
    if (!core_pool_find(core, ns, rank))
        return CORE_ENOPOOL;
    complete_walk(core, ns_find(core, ns), rank, keys, n, now, pages);
    return 0;
}

/* --------------------------------------------------------------- stats */

void core_pool_get_stats(const core_pool_t *pool, int64_t now, core_pool_stats *out)
{
    *out = pool->counters;
    out->write_leased = 0;
    for (size_t s = 0; pool->nwleases && s <= pool->wlease_mask; s++)
        out->write_leased += pool->wleases[s].page != CORE_NIL && pool->wleases[s].end > now;
    out->num_pages = pool->num_pages;
    out->free = pool_free_count(pool);
    out->reserved = pool->reserved.len;
    out->owned = pool->nowned;
    out->draining = pool->draining.len;
    out->touched = pool->touched;
}

void core_foreach_pool(const core_t *core, int64_t now, core_pool_visitor fn, void *ctx)
{
    for (size_t n = 0; n < core->nns; n++) {
        const core_ns *ns = core->namespaces[n];
        for (uint32_t r = 0; r < ns->ranks_cap; r++) {
            if (!ns->by_rank[r])
                continue;
            core_pool_stats stats;
            core_pool_get_stats(ns->by_rank[r], now, &stats);
            fn(ctx, (hf_slice){ns->name, ns->name_len}, r, &stats);
        }
    }
}

core_page_state core_page_get(const core_pool_t *pool, uint64_t page, hf_slice *key,
                              char keybuf[64], int64_t *deadline)
{
    if (key)
        *key = (hf_slice){"", 0};
    if (deadline)
        *deadline = 0;
    if (page >= pool->touched)
        return CORE_PAGE_FREE;
    const core_page_rec *rec = core__rec(pool, (uint32_t)page);
    if (deadline)
        *deadline = rec->deadline;
    if (key)
        *key = core__rec_key_text(rec, keybuf);
    return (core_page_state)core__rec_state(rec);
}

/* -------------------------------------------------------------- replay */

/* The page of an event, if it is in range and in the expected state. */
static core_page_rec *apply_target(core_pool_t *pool, uint64_t page, core_page_state want)
{
    if (!pool || page >= pool->num_pages)
        return NULL;
    if (page >= pool->touched) {
        if (want != CORE_PAGE_FREE)
            return NULL;
        for (uint64_t p = pool->touched; p <= page; p++) {
            ensure_chunk(pool, (uint32_t)p);
            core_page_rec *rec = core__rec(pool, (uint32_t)p);
            rec->bits = CORE_PAGE_FREE;
            rec->prev = rec->next = CORE_NIL;
        }
        uint64_t skipped = pool->touched;
        pool->touched = page + 1;
        /* live: a primary takes the mark's own page, so nothing is skipped;
         * if something is, those pages are FREE and must be on the stack */
        if (pool->core->live_apply)
            for (uint64_t p = skipped; p < page; p++)
                free_stack_push(pool, (uint32_t)p);
        return core__rec(pool, (uint32_t)page);
    }
    core_page_rec *rec = core__rec(pool, (uint32_t)page);
    return core__rec_state(rec) == want ? rec : NULL;
}

static int apply_free(core_pool_t *pool, uint32_t page)
{
    if (!pool || page >= pool->touched)
        return CORE_EINVAL;
    core_page_rec *rec = core__rec(pool, page);
    switch (core__rec_state(rec)) {
    case CORE_PAGE_RESERVED: list_remove(pool, &pool->reserved, page); break;
    case CORE_PAGE_OWNED: owned_leave(pool, page); break;
    case CORE_PAGE_DRAINING: list_remove(pool, &pool->draining, page); break;
    default: return CORE_EINVAL;
    }
    page_free(pool, page); /* the free stack is rebuilt by core_apply_finish */
    return 0;
}

/* The clock hand moved to `to` after `turns` full turns (CORE_EV_SWEEP):
 * every OWNED page lost one per pass, those in [hand, to) one more. */
static void apply_sweep(core_pool_t *pool, uint32_t to, int64_t turns)
{
    uint64_t n = pool->num_pages;
    if (turns > 0) {
        unsigned drop = turns > CORE_USE_MAX ? CORE_USE_MAX : (unsigned)turns;
        for (uint64_t p = 0; p < pool->touched; p++) {
            core_page_rec *rec = core__rec(pool, (uint32_t)p);
            if (core__rec_state(rec) != CORE_PAGE_OWNED)
                continue;
            unsigned use = core__rec_use(rec);
            core__rec_set_use(rec, use > drop ? use - drop : 0);
        }
    }
    for (uint64_t p = pool->hand; p != to; p = p + 1 == n ? 0 : p + 1) {
        if (p >= pool->touched) { /* no record: jump to `to` or to the wrap */
            p = to > p ? to - 1 : n - 1;
            continue;
        }
        core_page_rec *rec = core__rec(pool, (uint32_t)p);
        unsigned use = core__rec_use(rec);
        if (core__rec_state(rec) == CORE_PAGE_OWNED && use > 0)
            core__rec_set_use(rec, use - 1);
    }
    pool->hand = to;
}

static int apply_page_event(core_pool_t *pool, const core_event *ev)
{
    uint32_t page = (uint32_t)ev->page;
    core_page_rec *rec;
    core_key key;
    switch (ev->type) {
    case CORE_EV_RESERVE:
        if (ev->key.len == 0 || !(rec = apply_target(pool, ev->page, CORE_PAGE_FREE)))
            return CORE_EINVAL;
        if (pool->core->live_apply)
            free_stack_remove(pool, page);
        core__key_encode(pool->core, ev->key, &key);
        page_reserve(pool, page, &key, ev->deadline);
        return 0;
    case CORE_EV_OWN:
        if (!(rec = apply_target(pool, ev->page, CORE_PAGE_RESERVED)))
            return CORE_EINVAL;
        if (!index_insert_unique(pool, page))
            return CORE_EINVAL; /* the key would own two pages */
        page_own_indexed(pool, page, true);
        return 0;
    case CORE_EV_FREE:
        return apply_free(pool, page);
    case CORE_EV_DRAIN: /* from the log: an OWNED page; from a snapshot: a FREE one */
        if ((rec = apply_target(pool, ev->page, CORE_PAGE_OWNED)) != NULL) {
            rec->deadline = ev->deadline;
            owned_leave(pool, page);
            rec_drop_key(rec);
        } else if (!(rec = apply_target(pool, ev->page, CORE_PAGE_FREE))) {
            return CORE_EINVAL;
        } else if (pool->core->live_apply) {
            free_stack_remove(pool, page); /* a release: FREE, then DRAIN */
        }
        rec->bits = CORE_PAGE_DRAINING;
        rec->deadline = ev->deadline;
        list_insert_by_deadline(pool, &pool->draining, page);
        return 0;
    case CORE_EV_USE:
        if (!(rec = apply_target(pool, ev->page, CORE_PAGE_OWNED)))
            return CORE_EINVAL;
        rec->deadline = ev->deadline;
        page_touch(pool, page);
        return 0;
    case CORE_EV_DEMOTE:
        if (!(rec = apply_target(pool, ev->page, CORE_PAGE_OWNED)))
            return CORE_EINVAL;
        page_demote(pool, page);
        return 0;
    case CORE_EV_SWEEP:
        if (!pool || ev->page >= pool->num_pages || ev->deadline < 0)
            return CORE_EINVAL;
        apply_sweep(pool, page, ev->deadline);
        return 0;
    case CORE_EV_WRITE_LEASE:
        if (!apply_target(pool, ev->page, CORE_PAGE_OWNED))
            return CORE_EINVAL;
        wlease_add(pool, page, ev->deadline);
        return 0;
    case CORE_EV_WRITE_DONE: {
        core_wlease *e;
        if (!(rec = apply_target(pool, ev->page, CORE_PAGE_OWNED)) ||
            !(e = wlease_find(pool, page)))
            return CORE_EINVAL;
        if (e->writers <= 1)
            wlease_remove(pool, e); /* the last writer: the lease ends */
        else
            e->writers--;
        rec->deadline = ev->deadline;
        return 0;
    }
    default:
        return CORE_EINVAL;
    }
}

int core_apply(core_t *core, const core_event *ev)
{
    core->replaying = true;
    int rc;
    if (ev->type == CORE_EV_CLEAR_ALL) {
        core_clear_all(core);
        rc = 0;
    } else if (ev->type == CORE_EV_POOL_INIT) {
        uint64_t existing = 0;
        rc = core_pool_init(core, ev->ns, ev->rank, ev->page, &existing);
        rc = rc == 1 ? 0 : CORE_EINVAL; /* a second init of a pool is never logged */
    } else {
        rc = apply_page_event(core_pool_find(core, ev->ns, ev->rank), ev);
    }
    return rc;
}

int core_apply_live(core_t *core, const core_event *ev)
{
    core->live_apply = true;
    int rc = core_apply(core, ev);
    core->live_apply = false;
    core->replaying = false;
    return rc;
}

size_t core_pool_free_order(const core_pool_t *pool, const uint32_t **pages)
{
    *pages = pool->free_stack;
    return pool->nfree;
}

int core_pool_set_free_order(core_pool_t *pool, const uint32_t *pages, size_t n)
{
    /* The events of a snapshot carry no high-water mark: a replay raises
     * the mark only to its highest page that is not FREE. Pages of the
     * order at or above this pool's mark are FREE pages that the source had
     * handed out once: the mark rises to cover them, and then every page
     * between the old and the new mark must be in the order. */
    uint64_t mark = pool->touched;
    for (size_t i = 0; i < n; i++) {
        if (pages[i] >= pool->num_pages)
            return CORE_EINVAL;
        if ((uint64_t)pages[i] + 1 > mark)
            mark = (uint64_t)pages[i] + 1;
    }
    if (n != pool->nfree + (mark - pool->touched))
        return CORE_EINVAL;
    size_t words = (size_t)(mark + 63) / 64;
    uint64_t *seen = hf_xcalloc(words ? words : 1, sizeof *seen);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        uint32_t p = pages[i];
        if ((p < pool->touched && core__rec_state(core__rec(pool, p)) != CORE_PAGE_FREE) ||
            (seen[p / 64] >> (p % 64) & 1))
            rc = CORE_EINVAL;
        else
            seen[p / 64] |= 1ull << (p % 64);
    }
    hf_xfree(seen);
    if (rc != 0)
        return rc;
    for (uint64_t p = pool->touched; p < mark; p++) {
        ensure_chunk(pool, (uint32_t)p);
        core_page_rec *rec = core__rec(pool, (uint32_t)p);
        rec->bits = CORE_PAGE_FREE;
        rec->prev = rec->next = CORE_NIL;
        free_stack_push(pool, (uint32_t)p); /* room; the order is copied below */
    }
    pool->touched = mark;
    if (n)
        memcpy(pool->free_stack, pages, n * sizeof *pages);
    return 0;
}

size_t core_memory_usage(const core_t *core)
{
    size_t total = sizeof *core + core->nns * sizeof(core_ns *);
    for (size_t n = 0; n < core->nns; n++) {
        const core_ns *ns = core->namespaces[n];
        total += sizeof *ns + ns->name_len + ns->ranks_cap * sizeof(core_pool_t *);
        for (uint32_t r = 0; r < ns->ranks_cap; r++) {
            const core_pool_t *pool = ns->by_rank[r];
            if (!pool)
                continue;
            total += sizeof *pool + pool->nchunks * CORE_CHUNK_PAGES * sizeof(core_page_rec) +
                     pool->chunks_cap * sizeof(core_page_rec *) +
                     pool->free_cap * sizeof(uint32_t) + pool->demoted_cap * sizeof(uint32_t) +
                     (pool->slots ? (pool->slot_mask + 1) * sizeof(uint32_t) : 0) +
                     (pool->wleases ? (pool->wlease_mask + 1) * sizeof(core_wlease) : 0);
            for (uint64_t p = 0; p < pool->touched; p++) {
                const core_page_rec *rec = core__rec(pool, (uint32_t)p);
                if (rec->key_kind == CORE_KEY_EXT)
                    total += rec->key.ext.len;
            }
        }
    }
    return total;
}

void core_apply_finish(core_t *core)
{
    for (size_t n = 0; n < core->nns; n++) {
        core_ns *ns = core->namespaces[n];
        for (uint32_t r = 0; r < ns->ranks_cap; r++) {
            core_pool_t *pool = ns->by_rank[r];
            if (!pool)
                continue;
            pool->nfree = 0;
            for (uint32_t p = (uint32_t)pool->touched; p-- > 0;)
                if (core__rec_state(core__rec(pool, p)) == CORE_PAGE_FREE)
                    page_free(pool, p);
        }
    }
    core->replaying = false;
}

static void walk_emit(core_observer_fn fn, void *ctx, const core_pool_t *pool,
                      core_event_type type, uint32_t page, int64_t deadline)
{
    char buf[64];
    core_event ev = {type, {pool->ns->name, pool->ns->name_len}, pool->rank, page, {"", 0},
                     deadline};
    if (type == CORE_EV_RESERVE)
        ev.key = core__rec_key_text(core__rec(pool, page), buf);
    fn(ctx, &ev);
}

/* The USEs that follow OWN for an owned page in a snapshot, and how many
 * SWEEPs (turns that lower its count by one) must follow them. */
static unsigned walk_uses(const core_page_rec *rec, unsigned *sweeps)
{
    unsigned use = core__rec_use(rec), nuse = 0;
    if (rec->deadline > 0 || use > CORE_USE_INSERT)
        nuse = use > CORE_USE_INSERT + 1 ? use - CORE_USE_INSERT : 1;
    unsigned top = CORE_USE_INSERT + nuse > CORE_USE_MAX ? CORE_USE_MAX : CORE_USE_INSERT + nuse;
    *sweeps = top - use;
    return nuse;
}

/* Owned pages, in groups by the sweeps they need (most first), each group
 * followed by a SWEEP of a full turn that leaves the hand where it is;
 * then the demoted pages in stack order. */
static void walk_owned(const core_pool_t *pool, core_observer_fn fn, void *ctx)
{
    unsigned most = 0, sweeps;
    for (uint64_t p = 0; p < pool->touched; p++) {
        const core_page_rec *rec = core__rec(pool, (uint32_t)p);
        if (core__rec_state(rec) == CORE_PAGE_OWNED) {
            walk_uses(rec, &sweeps);
            if (sweeps > most)
                most = sweeps;
        }
    }
    for (unsigned g = most + 1; pool->nowned > 0 && g-- > 0;) {
        for (uint64_t p = 0; p < pool->touched; p++) {
            const core_page_rec *rec = core__rec(pool, (uint32_t)p);
            if (core__rec_state(rec) != CORE_PAGE_OWNED)
                continue;
            unsigned nuse = walk_uses(rec, &sweeps);
            if (sweeps != g)
                continue;
            walk_emit(fn, ctx, pool, CORE_EV_RESERVE, (uint32_t)p, 0);
            walk_emit(fn, ctx, pool, CORE_EV_OWN, (uint32_t)p, 0);
            for (unsigned u = 0; u < nuse; u++)
                walk_emit(fn, ctx, pool, CORE_EV_USE, (uint32_t)p, rec->deadline);
        }
        if (g > 0)
            walk_emit(fn, ctx, pool, CORE_EV_SWEEP, pool->hand, 1);
    }
    if (pool->ndemoted == 0)
        return;
    /* the topmost entry of each demoted page, top first, then emitted bottom first */
    uint32_t *order = hf_xmalloc(pool->ndemoted * sizeof *order);
    uint64_t *seen = hf_xcalloc((size_t)(pool->touched + 63) / 64, sizeof *seen);
    size_t n = 0;
    for (size_t i = pool->ndemoted_stack; i-- > 0 && n < pool->ndemoted;) {
        uint32_t page = pool->demoted[i];
        if (!(core__rec(pool, page)->bits & CORE_REC_DEMOTED) || (seen[page / 64] >> (page % 64) & 1))
            continue;
        seen[page / 64] |= 1ull << (page % 64);
        order[n++] = page;
    }
    while (n-- > 0)
        walk_emit(fn, ctx, pool, CORE_EV_DEMOTE, order[n], 0);
    hf_xfree(seen);
    hf_xfree(order);
}

static void walk_pool(const core_pool_t *pool, core_observer_fn fn, void *ctx)
{
    core_event init = {CORE_EV_POOL_INIT, {pool->ns->name, pool->ns->name_len}, pool->rank,
                       pool->num_pages, {"", 0}, 0};
    fn(ctx, &init);
    if (pool->hand != 0) /* no OWNED page yet: this only puts the hand in place */
        walk_emit(fn, ctx, pool, CORE_EV_SWEEP, pool->hand, 0);
    for (uint32_t p = pool->reserved.head; p != CORE_NIL; p = core__rec(pool, p)->next)
        walk_emit(fn, ctx, pool, CORE_EV_RESERVE, p, core__rec(pool, p)->deadline);
    walk_owned(pool, fn, ctx);
    for (size_t s = 0; pool->nwleases && s <= pool->wlease_mask; s++) {
        const core_wlease *e = &pool->wleases[s];
        for (uint32_t w = 0; e->page != CORE_NIL && w < e->writers; w++)
            walk_emit(fn, ctx, pool, CORE_EV_WRITE_LEASE, e->page, e->end);
    }
}

static void walk_draining(const core_pool_t *pool, core_observer_fn fn, void *ctx)
{
    for (uint32_t p = pool->draining.head; p != CORE_NIL; p = core__rec(pool, p)->next)
        walk_emit(fn, ctx, pool, CORE_EV_DRAIN, p, core__rec(pool, p)->deadline);
}

void core_walk_state(const core_t *core, core_observer_fn fn, void *ctx)
{
    for (size_t n = 0; n < core->nns; n++) {
        const core_ns *ns = core->namespaces[n];
        for (uint32_t r = 0; r < ns->ranks_cap; r++) {
            if (!ns->by_rank[r])
                continue;
            walk_pool(ns->by_rank[r], fn, ctx);
            walk_draining(ns->by_rank[r], fn, ctx);
        }
    }
}
