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

/* The canonical bytes of stored key `st` of `kind`. */
static const uint8_t *keyst_canon(const core_keyst *st, uint8_t kind, size_t *len)
{
    if (kind == CORE_KEY_EXT) {
        *len = st->ext.len;
        return (const uint8_t *)st->ext.ptr;
    }
    *len = kind == CORE_KEY_HEX64 ? 32 : kind;
    return st->bytes;
}

void core__keyst_to_key(const core_t *core, const core_keyst *st, uint8_t kind, core_key *out)
{
    size_t len;
    const uint8_t *canon = keyst_canon(st, kind, &len);
    out->kind = kind;
    if (kind == CORE_KEY_EXT) {
        out->ext = st->ext.ptr;
        out->len = st->ext.len;
        memset(out->bytes, 0, sizeof out->bytes);
    } else {
        out->ext = NULL;
        out->len = kind == CORE_KEY_HEX64 ? 64 : kind;
        memcpy(out->bytes, st->bytes, 32);
    }
    out->hash = hash_bytes(core->config.hash_seed + kind, canon, len);
}

static uint32_t keyst_hash(const core_t *core, const core_keyst *st, uint8_t kind)
{
    size_t len;
    const uint8_t *canon = keyst_canon(st, kind, &len);
    return hash_bytes(core->config.hash_seed + kind, canon, len);
}

int core__keyst_eq(const core_keyst *st, uint8_t kind, const core_key *key)
{
    if (kind != key->kind)
        return 0;
    if (kind == CORE_KEY_EXT)
        return st->ext.len == key->len && memcmp(st->ext.ptr, key->ext, key->len) == 0;
    /* inline keys are zero-padded to 32 bytes (core__key_encode): compare
     * all 32 as four words, without a call to memcmp */
    uint64_t diff = 0;
    for (int i = 0; i < 4; i++) {
        uint64_t a, b;
        memcpy(&a, st->bytes + 8 * i, 8);
        memcpy(&b, key->bytes + 8 * i, 8);
        diff |= a ^ b;
    }
    return diff == 0;
}

static const char hex_digits[] = "0123456789abcdef";

hf_slice core__keyst_text(const core_keyst *st, uint8_t kind, char buf[64])
{
    if (kind == CORE_KEY_EXT)
        return (hf_slice){st->ext.ptr, st->ext.len};
    if (kind == CORE_KEY_HEX64) {
        for (int i = 0; i < 32; i++) {
            buf[2 * i] = hex_digits[st->bytes[i] >> 4];
            buf[2 * i + 1] = hex_digits[st->bytes[i] & 15];
        }
        return (hf_slice){buf, 64};
    }
    return (hf_slice){(const char *)st->bytes, kind};
}

static void keyst_set(core_keyst *st, uint8_t *kind, const core_key *key)
{
    *kind = key->kind;
    if (key->kind == CORE_KEY_EXT) {
        memset(st->bytes, 0, sizeof st->bytes);
        st->ext.ptr = hf_xmalloc(key->len);
        memcpy(st->ext.ptr, key->ext, key->len);
        st->ext.len = key->len;
    } else {
        memcpy(st->bytes, key->bytes, 32);
    }
}

static void keyst_drop(core_keyst *st, uint8_t *kind)
{
    if (*kind == CORE_KEY_EXT)
        hf_xfree(st->ext.ptr);
    *kind = CORE_KEY_NONE;
    memset(st->bytes, 0, sizeof st->bytes);
}

/* ------------------------------------------------------------ records */

static inline core_keyst *rec_key(uint8_t *rec)
{
    return core__krec_key(rec);
}

static inline uint8_t *rec_kind(uint8_t *rec)
{
    return rec + CORE_REC_KIND;
}

static inline uint8_t *rec_bits(uint8_t *rec)
{
    return rec + CORE_REC_BITS;
}

/* The column bits, page and deadline of an OWNED page of `pool`. */
static inline uint8_t *col_bits(const core_pool_t *pool, uint32_t id)
{
    return rec_bits(core__krec(pool->ns, id)) + pool->col;
}

static inline int64_t *col_deadline(const core_pool_t *pool, uint32_t id)
{
    return core__krec_deadlines(pool->ns, core__krec(pool->ns, id)) + pool->col;
}

static inline uint32_t page_owner(const core_pool_t *pool, uint32_t page)
{
    return *core__ref(pool, page);
}

static inline uint8_t *page_bits(const core_pool_t *pool, uint32_t page)
{
    return col_bits(pool, page_owner(pool, page));
}

static inline int64_t *page_deadline(const core_pool_t *pool, uint32_t page)
{
    return col_deadline(pool, page_owner(pool, page));
}

static inline bool page_is_owned(const core_pool_t *pool, uint32_t page)
{
    return core__ref_owned(*core__ref(pool, page));
}

/* Is `page` (a demoted stack entry, maybe stale) an OWNED page still DEMOTED? */
static inline bool page_demoted(const core_pool_t *pool, uint32_t page)
{
    return page_is_owned(pool, page) && (*page_bits(pool, page) & CORE_REC_DEMOTED);
}

/* Record layout for `ncols` columns (core_internal.h). */
static void ns_layout(uint32_t ncols, size_t *size, uint32_t *off_pages, uint32_t *off_deadlines)
{
    uint32_t p = (CORE_REC_BITS + ncols + 3) & ~3u;
    uint32_t d = (p + 4 * ncols + 7) & ~7u;
    *off_pages = p;
    *off_deadlines = d;
    *size = (d + 8 * (size_t)ncols + 7) & ~(size_t)7;
}

static uint32_t rec_alloc(core_ns *ns)
{
    uint32_t id;
    if (ns->rec_free != CORE_NIL) {
        id = ns->rec_free;
        ns->rec_free = core__krec_pages(ns, core__krec(ns, id))[0];
    } else {
        id = ns->rec_top;
        if (id >= CORE_MAX_RECS || id >= ns->id_mask)
            abort(); /* more live keys than the namespace's pages: cannot happen */
        size_t chunk = id >> CORE_REC_CHUNK_SHIFT;
        if (chunk >= ns->nrchunks) {
            if (chunk >= ns->rchunks_cap) {
                ns->rchunks_cap = ns->rchunks_cap ? ns->rchunks_cap * 2 : 4;
                ns->rchunks = hf_xreallocarray(ns->rchunks, ns->rchunks_cap, sizeof *ns->rchunks);
            }
            ns->rchunks[chunk] = hf_xmalloc(CORE_REC_CHUNK * ns->rec_size);
            ns->nrchunks = chunk + 1;
        }
        ns->rec_top++;
    }
    uint8_t *rec = core__krec(ns, id);
    memset(rec, 0, ns->rec_size);
    uint32_t *pages = core__krec_pages(ns, rec);
    for (uint32_t c = 0; c < ns->ncols; c++)
        pages[c] = CORE_NIL;
    ns->nrecs++;
    return id;
}

/* ----------------------------------------------------------- key index */

uint32_t core__index_find(const core_ns *ns, const core_key *key)
{
    if (!ns->slots)
        return CORE_NIL;
    size_t i = core__home(ns, key->hash);
    uint32_t tag = key->hash & ~ns->id_mask;
    for (;;) {
        uint32_t slot = ns->slots[i];
        if (slot == CORE_NIL)
            return CORE_NIL;
        if ((slot & ~ns->id_mask) == tag) {
            uint32_t id = slot & ns->id_mask;
            uint8_t *rec = core__krec(ns, id);
            if (core__keyst_eq(rec_key(rec), *rec_kind(rec), key))
                return id;
        }
        i = (i + 1) & ns->slot_mask;
    }
}

/*
 * Batches look many keys up at once, and each lookup waits on cache misses:
 * its slot, then its record. Asking for the slots of a block of keys, then
 * for their records, before doing the work lets those misses overlap
 * instead of queueing. Only a hint: nothing is changed.
 */
#define PREFETCH_BLOCK 16

static inline __attribute__((always_inline)) void prefetch_bytes(const void *p, size_t len, int rw)
{
    const char *c = (const char *)p;
    for (size_t off = 0; off < len; off += 64) {
        if (rw)
            __builtin_prefetch(c + off, 1);
        else
            __builtin_prefetch(c + off);
    }
    if (rw)
        __builtin_prefetch(c + len - 1, 1);
    else
        __builtin_prefetch(c + len - 1);
}

/* always_inline: as a function of its own it has no effect that GCC can see
 * (it only reads memory and returns nothing), so GCC deletes every call. */
static inline __attribute__((always_inline)) void
index_prefetch(const core_ns *ns, const core_key *keys, size_t n)
{
    if (n > PREFETCH_BLOCK)
        n = PREFETCH_BLOCK; /* a hint: never more than a block */
    if (!ns->slots)
        return;
    size_t home[PREFETCH_BLOCK];
    for (size_t j = 0; j < n; j++) {
        home[j] = core__home(ns, keys[j].hash);
        __builtin_prefetch(&ns->slots[home[j]]);
    }
    for (size_t j = 0; j < n; j++) {
        uint32_t slot = ns->slots[home[j]];
        if (slot != CORE_NIL && (slot & ~ns->id_mask) == (keys[j].hash & ~ns->id_mask))
            prefetch_bytes(core__krec(ns, slot & ns->id_mask), ns->rec_size, 1);
    }
}

static void index_place(core_ns *ns, uint32_t id, uint32_t hash)
{
    size_t i = core__home(ns, hash);
    while (ns->slots[i] != CORE_NIL)
        i = (i + 1) & ns->slot_mask;
    ns->slots[i] = core__slot_make(ns, id, hash);
}

/* Rebuild the index with `cap` slots from the live records (hashes recomputed). */
static void index_rebuild(core_ns *ns, const core_t *core, size_t cap)
{
    hf_xfree(ns->slots);
    ns->slots = hf_xreallocarray(NULL, cap, sizeof *ns->slots);
    memset(ns->slots, 0xff, cap * sizeof *ns->slots);
    ns->slot_mask = cap - 1;
    for (uint32_t id = 0; id < ns->rec_top; id++) {
        uint8_t *rec = core__krec(ns, id);
        if (id + 8 < ns->rec_top)
            __builtin_prefetch(core__krec(ns, id + 8));
        if (*rec_kind(rec) != CORE_KEY_NONE)
            index_place(ns, id, keyst_hash(core, rec_key(rec), *rec_kind(rec)));
    }
}

static void index_insert(core_ns *ns, const core_t *core, uint32_t id, uint32_t hash)
{
    if (!ns->slots || (ns->nkeys + 1) * 4 > (ns->slot_mask + 1) * 3) {
        size_t cap = ns->slots ? (ns->slot_mask + 1) * 2 : 64;
        index_rebuild(ns, core, cap); /* the new record is not live yet */
    }
    index_place(ns, id, hash);
    ns->nkeys++;
}

static uint32_t rec_hash(const core_ns *ns, const core_t *core, uint32_t id)
{
    uint8_t *rec = core__krec(ns, id);
    return keyst_hash(core, rec_key(rec), *rec_kind(rec));
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
 * occupied, so an empty slot `e` before the hole bounds d < (slot - e) &
 * mask; when that bound is <= m + 1 the residue is d itself. Otherwise the
 * record's key gives the hash (recomputed).
 */
static void index_remove(core_ns *ns, const core_t *core, uint32_t id, uint32_t hash)
{
    size_t mask = ns->slot_mask;
    uint32_t slot = core__slot_make(ns, id, hash);
    size_t i = core__home(ns, hash);
    while (ns->slots[i] != slot)
        i = (i + 1) & mask;
    size_t m = ns->home_bits ? (((size_t)1 << ns->home_bits) - 1) & mask : 0;
    size_t e = i;
    bool have_e = false;
    for (size_t k = 0; m && k <= m; k++) {
        e = (e - 1) & mask;
        if (ns->slots[e] == CORE_NIL) {
            have_e = true;
            break;
        }
    }
    size_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        uint32_t moved = ns->slots[j];
        if (moved == CORE_NIL)
            break;
        size_t d;
        if (have_e && ((j - e) & mask) <= m + 1)
            d = (j - core__slot_home_low(ns, moved)) & m;
        else
            d = (j - core__home(ns, rec_hash(ns, core, moved & ns->id_mask))) & mask;
        if (d >= ((j - i) & mask)) {
            ns->slots[i] = moved;
            i = j;
        }
    }
    ns->slots[i] = CORE_NIL;
    ns->nkeys--;
}

/* id_mask from the namespace's pages; the index is re-tagged if it changed. */
static void ns_set_id_bits(core_ns *ns, const core_t *core)
{
    uint64_t bound = ns->pages_sum < CORE_MAX_RECS ? ns->pages_sum : CORE_MAX_RECS;
    uint32_t mask = 1;
    while (mask < bound && mask != CORE_MAX_RECS)
        mask = mask << 1 | 1;
    if (mask == ns->id_mask)
        return;
    ns->id_mask = mask;
    ns->id_bits = (uint8_t)__builtin_popcount(mask);
    unsigned tag_bits = 32u - ns->id_bits;
    ns->home_bits = (uint8_t)(tag_bits / 2 > 8 ? 8 : tag_bits / 2);
    if (ns->slots)
        index_rebuild(ns, core, ns->slot_mask + 1);
}

/* The record no longer owns anything in a pool: free it. */
static void rec_release_if_empty(core_ns *ns, const core_t *core, uint32_t id)
{
    uint8_t *rec = core__krec(ns, id);
    const uint32_t *pages = core__krec_pages(ns, rec);
    for (uint32_t c = 0; c < ns->ncols; c++)
        if (pages[c] != CORE_NIL)
            return;
    index_remove(ns, core, id, rec_hash(ns, core, id));
    keyst_drop(rec_key(rec), rec_kind(rec));
    core__krec_pages(ns, rec)[0] = ns->rec_free;
    ns->rec_free = id;
    ns->nrecs--;
}

/* A pool joins the namespace: every record gets a column for it, columns
 * stay in rank order. */
static void ns_add_pool(core_ns *ns, const core_t *core, core_pool_t *pool)
{
    uint32_t n = ns->ncols, m = n + 1;
    core_pool_t **by_col = hf_xmalloc(m * sizeof *by_col);
    uint32_t at = 0;
    while (at < n && ns->by_col[at]->rank < pool->rank)
        at++;
    for (uint32_t c = 0, k = 0; c < m; c++)
        by_col[c] = c == at ? pool : ns->by_col[k++];
    size_t size;
    uint32_t off_pages, off_deadlines;
    ns_layout(m, &size, &off_pages, &off_deadlines);
    for (size_t ch = 0; ch < ns->nrchunks; ch++) {
        uint8_t *old = ns->rchunks[ch], *fresh = hf_xmalloc(CORE_REC_CHUNK * size);
        uint32_t first = (uint32_t)(ch << CORE_REC_CHUNK_SHIFT);
        for (uint32_t k = 0; k < CORE_REC_CHUNK && first + k < ns->rec_top; k++) {
            const uint8_t *o = old + (size_t)k * ns->rec_size;
            uint8_t *f = fresh + (size_t)k * size;
            memset(f, 0, size);
            memcpy(f, o, CORE_REC_BITS); /* key and kind */
            uint32_t *fp = (uint32_t *)(void *)(f + off_pages);
            int64_t *fd = (int64_t *)(void *)(f + off_deadlines);
            const uint32_t *op = (const uint32_t *)(const void *)(o + ns->off_pages);
            const int64_t *od = (const int64_t *)(const void *)(o + ns->off_deadlines);
            for (uint32_t c = 0, j = 0; c < m; c++) {
                if (c == at) {
                    fp[c] = CORE_NIL;
                    continue;
                }
                f[CORE_REC_BITS + c] = o[CORE_REC_BITS + j];
                fp[c] = op[j];
                fd[c] = od[j];
                j++;
            }
            if (n == 0)
                fp[0] = CORE_NIL; /* no record lives without a column */
            else if (at == 0 && *rec_kind(f) == CORE_KEY_NONE)
                fp[0] = op[0]; /* the free list stays in column 0 */
        }
        hf_xfree(old);
        ns->rchunks[ch] = fresh;
    }
    hf_xfree(ns->by_col);
    ns->by_col = by_col;
    ns->ncols = m;
    ns->rec_size = size;
    ns->off_pages = off_pages;
    ns->off_deadlines = off_deadlines;
    for (uint32_t c = 0; c < m; c++)
        by_col[c]->col = c;
    ns->pages_sum += pool->num_pages;
    ns_set_id_bits(ns, core);
}

/* ---------------------------------------------------------- side table */

static uint32_t side_alloc(core_pool_t *pool, uint32_t page, core_page_state state, int64_t deadline)
{
    uint32_t s;
    if (pool->side_free != CORE_NIL) {
        s = pool->side_free;
        pool->side_free = pool->side[s].next;
    } else {
        if (pool->side_top == pool->side_cap) {
            pool->side_cap = pool->side_cap ? pool->side_cap * 2 : 16;
            if (pool->side_cap > CORE_REF_SIDE - 1)
                abort();
            pool->side = hf_xreallocarray(pool->side, pool->side_cap, sizeof *pool->side);
        }
        s = (uint32_t)pool->side_top++;
    }
    core_side *e = &pool->side[s];
    memset(e, 0, sizeof *e);
    e->page = page;
    e->state = (uint8_t)state;
    e->deadline = deadline;
    e->prev = e->next = CORE_NIL;
    pool->side_live++;
    *core__ref(pool, page) = CORE_REF_SIDE | s;
    return s;
}

static void side_release(core_pool_t *pool, uint32_t s)
{
    core_side *e = &pool->side[s];
    keyst_drop(&e->key, &e->key_kind);
    e->state = CORE_PAGE_FREE;
    e->next = pool->side_free;
    pool->side_free = s;
    if (--pool->side_live == 0 && pool->side_cap > 1024) {
        /* a burst of reservations is over: give the table back */
        hf_xfree(pool->side);
        pool->side = NULL;
        pool->side_top = pool->side_cap = 0;
        pool->side_free = CORE_NIL;
    }
}

static inline uint32_t page_side(const core_pool_t *pool, uint32_t page)
{
    return *core__ref(pool, page) & ~CORE_REF_SIDE;
}

/* --------------------------------------------------------------- lists */

static void list_init(core_list *list)
{
    list->head = list->tail = CORE_NIL;
    list->len = 0;
}

static void list_remove(core_pool_t *pool, core_list *list, uint32_t s)
{
    core_side *e = &pool->side[s];
    if (e->prev != CORE_NIL)
        pool->side[e->prev].next = e->next;
    else
        list->head = e->next;
    if (e->next != CORE_NIL)
        pool->side[e->next].prev = e->prev;
    else
        list->tail = e->prev;
    e->prev = e->next = CORE_NIL;
    list->len--;
}

static void list_insert_after(core_pool_t *pool, core_list *list, uint32_t after, uint32_t s)
{
    core_side *e = &pool->side[s];
    e->prev = after;
    if (after == CORE_NIL) {
        e->next = list->head;
        list->head = s;
    } else {
        e->next = pool->side[after].next;
        pool->side[after].next = s;
    }
    if (e->next != CORE_NIL)
        pool->side[e->next].prev = s;
    else
        list->tail = s;
    list->len++;
}

/* Deadlines mostly arrive in order, so the walk back from the tail is short. */
static void list_insert_by_deadline(core_pool_t *pool, core_list *list, uint32_t s)
{
    int64_t deadline = pool->side[s].deadline;
    uint32_t after = list->tail;
    while (after != CORE_NIL && pool->side[after].deadline > deadline)
        after = pool->side[after].prev;
    list_insert_after(pool, list, after, s);
}

/* --------------------------------------------------------------- events */

static void emit_key(core_pool_t *pool, core_event_type type, uint64_t page, int64_t deadline,
                     hf_slice key)
{
    core_t *core = pool->core;
    if (!core->observer || core->replaying)
        return;
    core_event ev = {type, {pool->ns->name, pool->ns->name_len}, pool->rank, page, key, deadline};
    core->observer(core->observer_ctx, &ev);
}

static inline void emit(core_pool_t *pool, core_event_type type, uint64_t page, int64_t deadline)
{
    if (pool->core->observer && !pool->core->replaying)
        emit_key(pool, type, page, deadline, (hf_slice){"", 0});
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
        if (((s - home) & pool->wlease_mask) >= ((s - hole) & pool->wlease_mask)) {
            pool->wleases[hole] = pool->wleases[s];
            pool->wleases[s].page = CORE_NIL;
            hole = s;
        }
    }
}

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
    int64_t *deadline = page_deadline(pool, page);
    if (end > *deadline)
        *deadline = end;
}

static void page_write_lease(core_pool_t *pool, uint32_t page, int64_t now)
{
    wlease_add(pool, page, now + pool->core->config.write_lease_ms);
    pool->counters.write_leases++;
    emit(pool, CORE_EV_WRITE_LEASE, page, now + pool->core->config.write_lease_ms);
}

static void page_write_done(core_pool_t *pool, uint32_t page, int64_t now)
{
    core_wlease *e = pool->nwleases ? wlease_find(pool, page) : NULL;
    if (!e)
        return;
    if (--e->writers > 0) {
        emit(pool, CORE_EV_WRITE_DONE, page, *page_deadline(pool, page));
        return;
    }
    wlease_remove(pool, e);
    int64_t *deadline = page_deadline(pool, page);
    int64_t until = now + pool->core->config.read_lease_ms;
    if (until < *deadline)
        *deadline = until;
    pool->counters.write_leases_ended++;
    emit(pool, CORE_EV_WRITE_DONE, page, *deadline);
}

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
            for (uint32_t w = 0; w < writers || w == 0; w++)
                emit(pool, CORE_EV_WRITE_DONE, page, *page_deadline(pool, page));
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
        pool->refs = hf_xreallocarray(pool->refs, cap, sizeof *pool->refs);
        pool->chunks_cap = cap;
    }
    for (size_t c = pool->nchunks; c <= chunk; c++)
        pool->refs[c] = hf_xmalloc(CORE_CHUNK_PAGES * sizeof(uint32_t));
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
    *core__ref(pool, page) = CORE_NIL;
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

/* The page (whose side entry or column was let go) becomes FREE. */
static void page_free(core_pool_t *pool, uint32_t page)
{
    emit(pool, CORE_EV_FREE, page, 0);
    *core__ref(pool, page) = CORE_NIL;
    free_stack_push(pool, page);
}

/* page was taken from the free stack or the mark, or evicted. */
static void page_reserve(core_pool_t *pool, uint32_t page, const core_key *key, int64_t deadline)
{
    uint32_t s = side_alloc(pool, page, CORE_PAGE_RESERVED, deadline);
    core_side *e = &pool->side[s];
    keyst_set(&e->key, &e->key_kind, key);
    list_insert_by_deadline(pool, &pool->reserved, s);
    pool->counters.reservations++;
    if (pool->core->observer && !pool->core->replaying) {
        char buf[64];
        emit_key(pool, CORE_EV_RESERVE, page, deadline, core__keyst_text(&e->key, e->key_kind, buf));
    }
}

/* A RESERVED page becomes OWNED by its key, whose record is `id` (CORE_NIL:
 * none yet) and which owns no page in this pool. */
static void page_own(core_pool_t *pool, uint32_t page, uint32_t id, const core_key *key)
{
    core_ns *ns = pool->ns;
    uint32_t s = page_side(pool, page);
    core_side *e = &pool->side[s];
    list_remove(pool, &pool->reserved, s);
    if (id == CORE_NIL) {
        id = rec_alloc(ns);
        index_insert(ns, pool->core, id, key->hash); /* a growth skips it: no key yet */
        uint8_t *rec = core__krec(ns, id);
        *rec_key(rec) = e->key; /* the key (an external copy included) moves over */
        *rec_kind(rec) = e->key_kind;
        e->key_kind = CORE_KEY_NONE;
    }
    side_release(pool, s);
    uint8_t *rec = core__krec(ns, id);
    core__krec_pages(ns, rec)[pool->col] = page;
    core__krec_deadlines(ns, rec)[pool->col] = 0;
    rec_bits(rec)[pool->col] = CORE_USE_INSERT << CORE_REC_USE_SHIFT;
    *core__ref(pool, page) = id;
    pool->nowned++;
    pool->counters.confirmations++;
    emit(pool, CORE_EV_OWN, page, 0);
}

/* The page, off every list and without a key, drains until `deadline`. */
static void page_drain(core_pool_t *pool, uint32_t page, int64_t deadline)
{
    uint32_t s = side_alloc(pool, page, CORE_PAGE_DRAINING, deadline);
    list_insert_by_deadline(pool, &pool->draining, s);
    emit(pool, CORE_EV_DRAIN, page, deadline);
}

/* The page is no longer demoted (its stack entry, if any, goes stale). */
static inline void bits_undemote(core_pool_t *pool, uint8_t *bits)
{
    if (*bits & CORE_REC_DEMOTED) {
        *bits &= (uint8_t)~CORE_REC_DEMOTED;
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
        if (!page_demoted(pool, page))
            continue;
        uint8_t *bits = page_bits(pool, page);
        /* PINNED doubles as "seen" here: never set on a demoted page */
        if (*bits & CORE_REC_PINNED)
            continue;
        *bits |= CORE_REC_PINNED;
        pool->demoted[--keep] = page;
    }
    size_t n = pool->ndemoted_stack - keep;
    memmove(pool->demoted, pool->demoted + keep, n * sizeof *pool->demoted);
    pool->ndemoted_stack = n;
    for (size_t i = 0; i < n; i++)
        *page_bits(pool, pool->demoted[i]) &= (uint8_t)~CORE_REC_PINNED;
}

/* The OWNED page is demoted: it goes first on eviction. */
static void page_demote(core_pool_t *pool, uint32_t page)
{
    uint8_t *bits = page_bits(pool, page);
    if (!(*bits & CORE_REC_DEMOTED)) {
        *bits |= CORE_REC_DEMOTED;
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

/* The end of the lease every OWNED page has after core_recovered() (the
 * read lease of the configuration in force), or INT64_MIN. */
static inline int64_t lease_floor(const core_t *core)
{
    return core->recovered ? core->recovered_at + core->config.read_lease_ms : INT64_MIN;
}

/* Is every OWNED page read-leased at `now` (core_recovered)? Then nothing
 * is evicted or demoted. */
static inline bool all_owned_leased(const core_t *core, int64_t now)
{
    return now < lease_floor(core);
}

/* An OWNED page leaves OWNED: its column is cleared (the record stays, for
 * the caller to demote its other ranks and then rec_release_if_empty). The
 * caller gives the page its new state. Returns the record id; *deadline
 * receives the column's deadline. */
static uint32_t owned_leave(core_pool_t *pool, uint32_t page, int64_t *deadline)
{
    core_ns *ns = pool->ns;
    uint32_t id = page_owner(pool, page);
    uint8_t *rec = core__krec(ns, id);
    bits_undemote(pool, &rec_bits(rec)[pool->col]);
    rec_bits(rec)[pool->col] = 0;
    core__krec_pages(ns, rec)[pool->col] = CORE_NIL;
    int64_t *d = &core__krec_deadlines(ns, rec)[pool->col];
    if (deadline)
        *deadline = *d;
    *d = 0;
    pool->nowned--;
    wlease_drop(pool, page);
    *core__ref(pool, page) = CORE_NIL;
    return id;
}

/* An OWNED page loses its key: FREE now, or DRAINING while leased. Returns
 * the record (not released). */
static uint32_t page_disown(core_pool_t *pool, uint32_t page, int64_t now)
{
    int64_t deadline;
    uint32_t id = owned_leave(pool, page, &deadline);
    int64_t floor = lease_floor(pool->core);
    if (floor > deadline)
        deadline = floor;
    if (deadline > now)
        page_drain(pool, page, deadline);
    else
        page_free(pool, page);
    return id;
}

static void page_unreserve(core_pool_t *pool, uint32_t page)
{
    uint32_t s = page_side(pool, page);
    list_remove(pool, &pool->reserved, s);
    side_release(pool, s);
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
    uint32_t s = page_side(pool, page);
    list_remove(pool, &pool->reserved, s);
    emit(pool, CORE_EV_FREE, page, 0); /* the log has no RESERVED -> DRAINING */
    core_side *e = &pool->side[s];
    keyst_drop(&e->key, &e->key_kind);
    e->state = CORE_PAGE_DRAINING;
    e->deadline = now + grace;
    list_insert_by_deadline(pool, &pool->draining, s);
    emit(pool, CORE_EV_DRAIN, page, e->deadline);
}

/* A use: one more to the use count (core.h "Recency"), and no longer
 * demoted. Only the key's record is written. */
static inline void bits_use(core_pool_t *pool, uint8_t *bits)
{
    unsigned use = core__bits_use(*bits);
    if (use < CORE_USE_MAX)
        *bits = core__bits_set_use(*bits, use + 1);
    bits_undemote(pool, bits);
}

/* Volatile (core.h "What is durable"): no event. */
static void page_touch(core_pool_t *pool, uint32_t page)
{
    bits_use(pool, col_bits(pool, page_owner(pool, page)));
}

static void page_lease(core_pool_t *pool, uint32_t page, int64_t now)
{
    int64_t *deadline = page_deadline(pool, page);
    int64_t until = now + pool->core->config.read_lease_ms;
    if (until > *deadline)
        *deadline = until;
    page_touch(pool, page);
}

/* ------------------------------------------------------------- leases */

void core_pool_expire(core_pool_t *pool, int64_t now)
{
    uint32_t s;
    while ((s = pool->reserved.head) != CORE_NIL && pool->side[s].deadline <= now) {
        page_unreserve(pool, pool->side[s].page);
        pool->counters.expired_reservations++;
    }
    while ((s = pool->draining.head) != CORE_NIL && pool->side[s].deadline <= now) {
        uint32_t page = pool->side[s].page;
        list_remove(pool, &pool->draining, s);
        side_release(pool, s);
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
    for (size_t c = 0; c < pool->nchunks; c++)
        hf_xfree(pool->refs[c]);
    hf_xfree(pool->refs);
    for (size_t s = 0; s < pool->side_top; s++)
        if (pool->side[s].key_kind == CORE_KEY_EXT)
            hf_xfree(pool->side[s].key.ext.ptr);
    hf_xfree(pool->side);
    hf_xfree(pool->free_stack);
    hf_xfree(pool->wleases);
    hf_xfree(pool->demoted);
}

static void ns_release_memory(core_ns *ns)
{
    for (uint32_t id = 0; id < ns->rec_top; id++) {
        uint8_t *rec = core__krec(ns, id);
        if (*rec_kind(rec) == CORE_KEY_EXT)
            hf_xfree(rec_key(rec)->ext.ptr);
    }
    for (size_t c = 0; c < ns->nrchunks; c++)
        hf_xfree(ns->rchunks[c]);
    hf_xfree(ns->rchunks);
    hf_xfree(ns->slots);
    hf_xfree(ns->by_col);
    reuse_free(ns->reuse);
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
        ns_release_memory(ns);
        hf_xfree(ns->by_rank);
        hf_xfree(ns->name);
        hf_xfree(ns);
    }
    hf_xfree(core->namespaces);
    core->namespaces = NULL;
    core->nns = 0;
    core->nreuse = 0;
    core->recovered = false; /* no page left to protect */
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
    ns->rec_free = CORE_NIL;
    ns_layout(0, &ns->rec_size, &ns->off_pages, &ns->off_deadlines);
    ns_set_id_bits(ns, core);
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
     * and max_ranks bound what clients may create, not what exists. */
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
    pool->side_free = CORE_NIL;
    list_init(&pool->reserved);
    list_init(&pool->draining);
    ns->by_rank[rank] = pool;
    ns->npools++;
    ns_add_pool(ns, core, pool);
    if (existing_pages)
        *existing_pages = num_pages;
    emit(pool, CORE_EV_POOL_INIT, num_pages, 0);
    return 1;
}

void core_pool_clear(core_pool_t *pool, int64_t now)
{
    core_pool_expire(pool, now);
    for (uint64_t p = 0; p < pool->touched && pool->nowned > 0; p++) {
        if (page_is_owned(pool, (uint32_t)p)) {
            uint32_t id = page_disown(pool, (uint32_t)p, now);
            rec_release_if_empty(pool->ns, pool->core, id);
        }
    }
    while (pool->reserved.head != CORE_NIL)
        page_unreserve(pool, pool->side[pool->reserved.head].page);
}

/* ------------------------------------------------- completeness helpers */

/* When one rank loses a key, the other ranks' pages for it can no longer
 * serve a complete key: demote them (unless leased). */
static void demote_in_other_ranks(core_pool_t *pool, uint32_t id, int64_t now)
{
    core_ns *ns = pool->ns;
    if (ns->npools < 2 || all_owned_leased(pool->core, now))
        return;
    uint8_t *rec = core__krec(ns, id);
    const uint32_t *pages = core__krec_pages(ns, rec);
    const int64_t *deadlines = core__krec_deadlines(ns, rec);
    for (uint32_t c = 0; c < ns->ncols; c++) {
        core_pool_t *other = ns->by_col[c];
        if (other == pool || pages[c] == CORE_NIL || deadlines[c] > now)
            continue;
        page_demote(other, pages[c]); /* volatile: no event */
    }
}

/* ---------------------------------------------------------- allocation */

typedef struct evict_scan {
    bool exhausted;
} evict_scan;

/* Neither leased nor a hit of the running allocation. */
static inline bool evictable(uint8_t bits, int64_t deadline, int64_t now)
{
    return deadline <= now && !(bits & CORE_REC_PINNED);
}

static inline bool page_evictable(const core_pool_t *pool, uint32_t page, int64_t now)
{
    uint32_t id = page_owner(pool, page);
    return evictable(*col_bits(pool, id), *col_deadline(pool, id), now);
}

/* The most recently demoted evictable page, off the stack; or CORE_NIL. */
static uint32_t take_demoted(core_pool_t *pool, int64_t now)
{
    while (pool->ndemoted_stack > 0 &&
           !page_demoted(pool, pool->demoted[pool->ndemoted_stack - 1]))
        pool->ndemoted_stack--; /* stale */
    if (pool->ndemoted == 0)
        return CORE_NIL;
    for (size_t i = pool->ndemoted_stack; i-- > 0;) {
        uint32_t page = pool->demoted[i];
        if (!page_demoted(pool, page) || !page_evictable(pool, page, now))
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
    core_ns *ns = pool->ns;
    uint64_t n = pool->num_pages; /* == touched: nothing is FREE when we evict */
    uint32_t hand = pool->hand, victim = CORE_NIL;
    uint64_t steps = 0;
    bool seen_evictable = false;
    for (;;) {
        if (steps > 0 && steps % n == 0 && !seen_evictable)
            break; /* a full turn without an evictable page */
        if ((steps & 7) == 0) /* the records of the pages ahead, read at random */
            for (uint32_t k = 8; k < 16; k++)
                if ((uint64_t)hand + k < n) {
                    uint32_t ref = *core__ref(pool, hand + k);
                    if (core__ref_owned(ref))
                        __builtin_prefetch(core__krec(ns, ref) + CORE_REC_BITS, 1);
                }
        uint32_t page = hand;
        hand = hand + 1 == n ? 0 : hand + 1;
        steps++;
        uint32_t id = *core__ref(pool, page);
        if (!core__ref_owned(id))
            continue;
        uint8_t *rec = core__krec(ns, id);
        uint8_t *bits = &rec_bits(rec)[pool->col];
        unsigned use = core__bits_use(*bits);
        if (evictable(*bits, core__krec_deadlines(ns, rec)[pool->col], now)) {
            seen_evictable = true;
            if (use == 0) {
                victim = page;
                break;
            }
        }
        if (use > 0)
            *bits = core__bits_set_use(*bits, use - 1);
    }
    pool->hand = hand;
    if (victim == CORE_NIL)
        scan->exhausted = true;
    emit(pool, CORE_EV_SWEEP, hand, (int64_t)(steps / n));
    return victim;
}

static uint32_t find_evictable(core_pool_t *pool, evict_scan *scan, int64_t now)
{
    if (!pool->core->config.evict_lru || pool->nowned == 0 || scan->exhausted ||
        all_owned_leased(pool->core, now))
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
    uint32_t id = owned_leave(pool, page, NULL);
    demote_in_other_ranks(pool, id, now);
    emit(pool, CORE_EV_FREE, page, 0);
    rec_release_if_empty(pool->ns, pool->core, id);
    pool->counters.evictions++;
    return page;
}

/* Can `need` new pages be had (free or evictable) without taking any? */
static int can_take(core_pool_t *pool, uint64_t need, int64_t now)
{
    uint64_t avail = pool_free_count(pool);
    if (avail >= need)
        return 1;
    if (!pool->core->config.evict_lru || all_owned_leased(pool->core, now))
        return 0;
    for (uint64_t p = 0; p < pool->touched && avail < need; p++)
        if (page_is_owned(pool, (uint32_t)p) && page_evictable(pool, (uint32_t)p, now))
            avail++;
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

/* The keys of a call encoded (*enc) and their repeats found (*dup, as
 * find_repeats); the caller frees both. */
static void encode_call(const core_pool_t *pool, const hf_slice *keys, size_t n, core_key **enc,
                        size_t **dup)
{
    *enc = hf_xmalloc(n * sizeof **enc);
    *dup = hf_xmalloc(n * sizeof **dup);
    for (size_t i = 0; i < n; i++)
        core__key_encode(pool->core, keys[i], &(*enc)[i]);
    find_repeats(*enc, n, *dup);
}

/* The page of `key` in `pool`, or CORE_NIL. */
static inline uint32_t pool_find(const core_pool_t *pool, const core_key *key)
{
    uint32_t id = core__index_find(pool->ns, key);
    return id == CORE_NIL ? CORE_NIL : core__krec_pages(pool->ns, core__krec(pool->ns, id))[pool->col];
}

void core_allocate(core_pool_t *pool, const hf_slice *keys, size_t n, core_alloc_mode mode,
                   int64_t now, int64_t *pages, bool *existed)
{
    if (n == 0)
        return;
    core_pool_expire(pool, now);
    core_key *enc;
    size_t *dup;
    encode_call(pool, keys, n, &enc, &dup);

    /* Pass 1: hits answer their page, count a use and are pinned. */
    uint64_t hits = 0, need = 0;
    for (size_t i = 0; i < n; i++) {
        if (i % PREFETCH_BLOCK == 0)
            index_prefetch(pool->ns, &enc[i], n - i < PREFETCH_BLOCK ? n - i : PREFETCH_BLOCK);
        if (dup[i] != i)
            continue;
        uint32_t page = pool_find(pool, &enc[i]);
        pages[i] = page == CORE_NIL ? -1 : (int64_t)page;
        if (page != CORE_NIL) {
            page_touch(pool, page);
            *page_bits(pool, page) |= CORE_REC_PINNED;
            hits++;
        } else {
            need++;
        }
    }
    pool->counters.hits += hits;
    pool->counters.misses += need;

    /* Pass 2: new keys get pages, unless all-or-nothing cannot be met. */
    int give = mode == CORE_ALLOC_PARTIAL || can_take(pool, need, now);
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
        if (dup[i] == i && pages[i] >= 0 && page_is_owned(pool, (uint32_t)pages[i]))
            *page_bits(pool, (uint32_t)pages[i]) &= (uint8_t)~CORE_REC_PINNED; /* hits */
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
    uint32_t p = (uint32_t)page, ref = *core__ref(pool, p);
    core_page_state state = core__page_state(pool, p);
    if (state != CORE_PAGE_RESERVED && state != CORE_PAGE_OWNED) {
        refuse(pool, refusals, CORE_REFUSE_NOT_RESERVED, refused);
        return;
    }
    if (state == CORE_PAGE_OWNED) {
        uint8_t *rec = core__krec(pool->ns, ref);
        if (!core__keyst_eq(rec_key(rec), *rec_kind(rec), key)) {
            refuse(pool, refusals, CORE_REFUSE_OTHER_KEY, refused);
            return;
        }
        page_write_done(pool, p, now); /* re-confirm of a hit: a use, ends a write */
        page_touch(pool, p);
        return;
    }
    const core_side *e = &pool->side[ref & ~CORE_REF_SIDE];
    if (!core__keyst_eq(&e->key, e->key_kind, key)) {
        refuse(pool, refusals, CORE_REFUSE_OTHER_KEY, refused);
        return;
    }
    uint32_t id = core__index_find(pool->ns, key);
    uint32_t owned = id == CORE_NIL ? CORE_NIL
                                    : core__krec_pages(pool->ns, core__krec(pool->ns, id))[pool->col];
    if (owned != CORE_NIL) { /* the key won a page meanwhile: keep that one */
        page_unreserve(pool, p);
        page_touch(pool, owned);
        pool->counters.duplicate_confirmations++;
        return;
    }
    page_own(pool, p, id, key);
}

static void release_one(core_pool_t *pool, int64_t page, int64_t now, size_t *refused)
{
    uint64_t *refusals = pool->counters.refused_releases;
    if (!page_in_range(pool, page)) {
        refuse(pool, refusals, CORE_REFUSE_OUT_OF_RANGE, refused);
        return;
    }
    core_page_state state = (uint64_t)page < pool->touched ? core__page_state(pool, (uint32_t)page)
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
        if (j == 0) { /* the refs named by the pages, and the keys' slots */
            size_t m = n - i < PREFETCH_BLOCK ? n - i : PREFETCH_BLOCK;
            for (size_t k = 0; k < m; k++) {
                if (pages[i + k] >= 0 && (uint64_t)pages[i + k] < pool->touched)
                    __builtin_prefetch(core__ref(pool, (uint32_t)pages[i + k]));
                core__key_encode(pool->core, keys[i + k], &enc[k]);
            }
            index_prefetch(pool->ns, enc, m);
        }
        confirm_one(pool, &enc[j], pages[i], now, &count);
    }
    for (size_t i = 0; i < nrel; i++)
        release_one(pool, release[i], now, &count);
    if (refused)
        *refused = count;
}

/* Undo an allocation that no client saw: see core.h. */
void core_cancel(core_pool_t *pool, const hf_slice *keys, const int64_t *pages,
                 const bool *existed, size_t n, int64_t now)
{
    if (n == 0)
        return;
    core_pool_expire(pool, now);
    core_key *enc;
    size_t *dup;
    encode_call(pool, keys, n, &enc, &dup);
    for (size_t i = n; i-- > 0;) { /* last taken first: the free stack as it was */
        if (dup[i] != i || !page_in_range(pool, pages[i]) || (uint64_t)pages[i] >= pool->touched)
            continue;
        uint32_t p = (uint32_t)pages[i], ref = *core__ref(pool, p);
        core_page_state state = core__page_state(pool, p);
        if (!existed[i] && state == CORE_PAGE_RESERVED) {
            const core_side *e = &pool->side[ref & ~CORE_REF_SIDE];
            if (core__keyst_eq(&e->key, e->key_kind, &enc[i]))
                page_unreserve(pool, p);
        } else if (existed[i] && state == CORE_PAGE_OWNED) {
            uint8_t *rec = core__krec(pool->ns, ref);
            if (core__keyst_eq(rec_key(rec), *rec_kind(rec), &enc[i]))
                page_write_done(pool, p, now);
        }
    }
    hf_xfree(dup);
    hf_xfree(enc);
}

/* ------------------------------------------------------------- readers */

/* The namespace's estimator, a request starting (core.h core_prefix_count):
 * made on the namespace's first read, resized when its pools change; NULL
 * beyond CORE_REUSE_NS namespaces. Volatile. */
static reuse_t *ns_reuse(core_t *core, core_ns *ns)
{
    uint64_t pages = ns->npools ? ns->pages_sum / ns->npools : 0;
    if (!ns->reuse) {
        if (core->nreuse >= CORE_REUSE_NS)
            return NULL;
        core->nreuse++;
        ns->reuse = reuse_new(pages);
    } else if (ns->reuse->pages != pages) {
        reuse_reset(ns->reuse, pages);
    }
    reuse_begin(ns->reuse);
    return ns->reuse;
}

void core_prefix_count(core_t *core, hf_slice ns, const bool *present, size_t n)
{
    core_ns *found = ns_find(core, ns);
    if (found && found->npools)
        reuse_prefix_count(&found->prefix, present, n);
}

static void lookup_walk(core_pool_t *pool, const hf_slice *keys, size_t n, int64_t now,
                        int64_t *pages, reuse_t *feed);

void core_exists(core_pool_t *pool, const hf_slice *keys, size_t n, int64_t now, bool *present)
{
    int64_t pages_buf[64];
    int64_t *pages = n <= 64 ? pages_buf : hf_xmalloc(n * sizeof *pages);
    lookup_walk(pool, keys, n, now, pages, pool->col == 0 ? ns_reuse(pool->core, pool->ns) : NULL);
    for (size_t i = 0; i < n; i++)
        present[i] = pages[i] >= 0;
    if (pages != pages_buf)
        hf_xfree(pages);
}

void core_lookup(core_pool_t *pool, const hf_slice *keys, size_t n, int64_t now, int64_t *pages)
{
    lookup_walk(pool, keys, n, now, pages, NULL);
}

/* core_lookup, feeding each key to the estimator `feed` (may be NULL). */
static void lookup_walk(core_pool_t *pool, const hf_slice *keys, size_t n, int64_t now,
                        int64_t *pages, reuse_t *feed)
{
    core_key enc[PREFETCH_BLOCK];
    core_pool_expire(pool, now);
    for (size_t i = 0; i < n; i++) {
        size_t j = i % PREFETCH_BLOCK;
        if (j == 0) {
            size_t m = n - i < PREFETCH_BLOCK ? n - i : PREFETCH_BLOCK;
            for (size_t k = 0; k < m; k++) {
                core__key_encode(pool->core, keys[i + k], &enc[k]);
                if (feed)
                    reuse_key(feed, enc[k].hash);
            }
            index_prefetch(pool->ns, enc, m);
        }
        uint32_t page = pool_find(pool, &enc[j]);
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
        core__key_encode(pool->core, keys[i], &key);
        uint32_t page = pool_find(pool, &key);
        if (page == CORE_NIL)
            continue;
        uint32_t id = page_disown(pool, page, now);
        demote_in_other_ranks(pool, id, now);
        rec_release_if_empty(pool->ns, pool->core, id);
    }
}

/* Keys ahead of the one being answered whose slot (2 * PIPE_AHEAD ahead)
 * and record (PIPE_AHEAD ahead) are asked for: a steady stream of misses in
 * flight instead of one block's burst at a time. */
#define PIPE_AHEAD 6
#define PIPE_STACK 128

static inline __attribute__((always_inline)) void
pipe_prefetch_rec(const core_ns *ns, const core_key *key, size_t home)
{
    uint32_t slot = ns->slots[home];
    if (slot != CORE_NIL && (slot & ~ns->id_mask) == (key->hash & ~ns->id_mask))
        prefetch_bytes(core__krec(ns, slot & ns->id_mask), ns->rec_size, 1);
}

/* Whether none of a record's n pages is CORE_NIL (4 at a time with SSE2). */
static inline bool all_pages(const uint32_t *pages, uint32_t n)
{
    uint32_t c = 0;
#ifdef __SSE2__
    __m128i nil = _mm_set1_epi32(-1), hit = _mm_setzero_si128();
    for (; c + 4 <= n; c += 4) {
        __m128i four = _mm_loadu_si128((const __m128i *)(const void *)(pages + c));
        hit = _mm_or_si128(hit, _mm_cmpeq_epi32(four, nil));
    }
    if (_mm_movemask_epi8(hit))
        return false;
#endif
    for (; c < n; c++)
        if (pages[c] == CORE_NIL)
            return false;
    return true;
}

/* A complete key's use in every column: the read lease, one more to the
 * use count, no longer demoted (volatile: no event). */
static inline void complete_use(core_ns *ns, uint8_t *rec, int64_t until)
{
    uint32_t ncols = ns->ncols;
    int64_t *deadlines = core__krec_deadlines(ns, rec);
    uint8_t *bits = rec_bits(rec);
    /* the columns' bits 8 at a time: a byte's bit 6 (count 4) moves to
     * bit 4 within the byte, and no byte carries into the next (a count
     * that takes one is at most 3, so the sum stays in bits 4-6) */
    uint32_t wide = ncols & ~7u;
    uint64_t anyw = 0;
    for (uint32_t c = 0; c < wide; c += 8) {
        uint64_t w;
        memcpy(&w, bits + c, 8);
        anyw |= w;
    }
    uint8_t any = 0;
    for (uint32_t c = wide; c < ncols; c++)
        any |= bits[c];
    uint64_t demoted_w = 0x0101010101010101ull * CORE_REC_DEMOTED;
    if (!(any & CORE_REC_DEMOTED) && !(anyw & demoted_w)) {
        /* the common case, without a branch per column: a count below
         * CORE_USE_MAX (4) has bit 6 clear, and then takes one more */
        for (uint32_t c = 0; c < ncols; c++) {
            int64_t d = deadlines[c];
            deadlines[c] = d > until ? d : until;
        }
        for (uint32_t c = 0; c < wide; c += 8) {
            uint64_t w;
            memcpy(&w, bits + c, 8);
            w += (~w >> 2) & 0x1010101010101010ull;
            memcpy(bits + c, &w, 8);
        }
        for (uint32_t c = wide; c < ncols; c++)
            bits[c] = (uint8_t)(bits[c] + ((~bits[c] >> 2) & 0x10));
        return;
    }
    for (uint32_t c = 0; c < ncols; c++) {
        if (until > deadlines[c])
            deadlines[c] = until;
        unsigned use = core__bits_use(bits[c]);
        if (use < CORE_USE_MAX)
            bits[c] = core__bits_set_use(bits[c], use + 1);
        if (bits[c] & CORE_REC_DEMOTED) {
            bits[c] &= (uint8_t)~CORE_REC_DEMOTED;
            ns->by_col[c]->ndemoted--;
        }
    }
}

/* Shared walk of batch_exists and get_locations: a key is complete when its
 * record has a page in every column; complete keys are leased and used in
 * every rank; answer[i] is the page in `rank` (or 0 if rank is CORE_NIL).
 * One index probe and one record per key, whatever the TP size. */
static void complete_walk(core_t *core, core_ns *ns, uint32_t rank, const hf_slice *keys,
                          size_t n, int64_t now, int64_t *answer)
{
    for (size_t i = 0; i < n; i++)
        answer[i] = -1;
    if (!ns || ns->npools == 0)
        return;
    uint32_t ncols = ns->ncols;
    for (uint32_t c = 0; c < ncols; c++)
        core_pool_expire(ns->by_col[c], now); /* even for no key, as always */
    if (n == 0)
        return;
    uint32_t want = rank == CORE_NIL ? CORE_NIL : ns->by_rank[rank]->col;
    reuse_t *feed = rank == CORE_NIL ? ns_reuse(core, ns) : NULL;
    int64_t until = now + core->config.read_lease_ms;
    uint64_t complete_keys = 0;
    core_key enc_buf[PIPE_STACK];
    size_t home_buf[PIPE_STACK];
    core_key *enc = n <= PIPE_STACK ? enc_buf : hf_xmalloc(n * sizeof *enc);
    size_t *home = n <= PIPE_STACK ? home_buf : hf_xmalloc(n * sizeof *home);
    for (size_t i = 0; i < n; i++) {
        core__key_encode(core, keys[i], &enc[i]);
        if (feed)
            reuse_key(feed, enc[i].hash);
        home[i] = core__home(ns, enc[i].hash);
        if (ns->slots && i < 2 * PIPE_AHEAD)
            __builtin_prefetch(&ns->slots[home[i]]);
    }
    for (size_t i = 0; ns->slots && i < PIPE_AHEAD && i < n; i++)
        pipe_prefetch_rec(ns, &enc[i], home[i]);
    for (size_t i = 0; i < n && ns->slots; i++) {
        if (i + 2 * PIPE_AHEAD < n)
            __builtin_prefetch(&ns->slots[home[i + 2 * PIPE_AHEAD]]);
        if (i + PIPE_AHEAD < n)
            pipe_prefetch_rec(ns, &enc[i + PIPE_AHEAD], home[i + PIPE_AHEAD]);
        uint32_t id = core__index_find(ns, &enc[i]);
        if (id == CORE_NIL)
            continue;
        uint8_t *rec = core__krec(ns, id);
        const uint32_t *pages = core__krec_pages(ns, rec);
        if (!all_pages(pages, ncols))
            continue;
        complete_keys++;
        complete_use(ns, rec, until);
        answer[i] = want == CORE_NIL ? 0 : pages[want];
    }
    if (enc != enc_buf)
        hf_xfree(enc);
    if (home != home_buf)
        hf_xfree(home);
    for (uint32_t c = 0; c < ncols; c++) {
        ns->by_col[c]->counters.hits += complete_keys;
        ns->by_col[c]->counters.misses += n - complete_keys;
    }
}

void core_complete_exists(core_t *core, hf_slice ns, const hf_slice *keys, size_t n, int64_t now,
                          bool *present)
{
    int64_t buf[128];
    int64_t *answer = n <= 128 ? buf : hf_xmalloc(n * sizeof *answer);
    complete_walk(core, ns_find(core, ns), CORE_NIL, keys, n, now, answer);
    for (size_t i = 0; i < n; i++)
        present[i] = answer[i] >= 0;
    if (answer != buf)
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
    if (pool->col == 0) {
        out->prefix_requests = pool->ns->prefix.requests;
        out->prefix_blocks = pool->ns->prefix.blocks;
        out->prefix_hits = pool->ns->prefix.hit_blocks;
        if (pool->ns->reuse)
            reuse_figures(pool->ns->reuse, &out->est_blocks, out->est_hits);
    }
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
    uint32_t ref = *core__ref(pool, (uint32_t)page);
    if (ref == CORE_NIL)
        return CORE_PAGE_FREE;
    if (ref & CORE_REF_SIDE) {
        const core_side *e = &pool->side[ref & ~CORE_REF_SIDE];
        if (deadline)
            *deadline = e->deadline;
        if (key && e->state == CORE_PAGE_RESERVED)
            *key = core__keyst_text(&e->key, e->key_kind, keybuf);
        return (core_page_state)e->state;
    }
    uint8_t *rec = core__krec(pool->ns, ref);
    if (deadline)
        *deadline = core__krec_deadlines(pool->ns, rec)[pool->col];
    if (key)
        *key = core__keyst_text(rec_key(rec), *rec_kind(rec), keybuf);
    return CORE_PAGE_OWNED;
}

/* -------------------------------------------------------------- replay */

/* Is the page of an event in range and in the expected state? Pages above
 * the mark are FREE: the mark moves up to the page. */
static bool apply_target(core_pool_t *pool, uint64_t page, core_page_state want)
{
    if (!pool || page >= pool->num_pages)
        return false;
    if (page >= pool->touched) {
        if (want != CORE_PAGE_FREE)
            return false;
        ensure_chunk(pool, (uint32_t)page);
        for (uint64_t p = pool->touched; p <= page; p++)
            *core__ref(pool, (uint32_t)p) = CORE_NIL;
        uint64_t skipped = pool->touched;
        pool->touched = page + 1;
        /* live: a primary takes the mark's own page, so nothing is skipped;
         * if something is, those pages are FREE and must be on the stack */
        if (pool->core->live_apply)
            for (uint64_t p = skipped; p < page; p++)
                free_stack_push(pool, (uint32_t)p);
        return true;
    }
    return core__page_state(pool, (uint32_t)page) == want;
}

static int apply_free(core_pool_t *pool, uint32_t page)
{
    if (!pool || page >= pool->touched)
        return CORE_EINVAL;
    uint32_t s = page_side(pool, page);
    switch (core__page_state(pool, page)) {
    case CORE_PAGE_RESERVED:
        list_remove(pool, &pool->reserved, s);
        side_release(pool, s);
        break;
    case CORE_PAGE_OWNED:
        rec_release_if_empty(pool->ns, pool->core, owned_leave(pool, page, NULL));
        break;
    case CORE_PAGE_DRAINING:
        list_remove(pool, &pool->draining, s);
        side_release(pool, s);
        break;
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
            if (!page_is_owned(pool, (uint32_t)p))
                continue;
            uint8_t *bits = page_bits(pool, (uint32_t)p);
            unsigned use = core__bits_use(*bits);
            *bits = core__bits_set_use(*bits, use > drop ? use - drop : 0);
        }
    }
    for (uint64_t p = pool->hand; p != to; p = p + 1 == n ? 0 : p + 1) {
        if (p >= pool->touched) { /* no record: jump to `to` or to the wrap */
            p = to > p ? to - 1 : n - 1;
            continue;
        }
        if (!page_is_owned(pool, (uint32_t)p))
            continue;
        uint8_t *bits = page_bits(pool, (uint32_t)p);
        unsigned use = core__bits_use(*bits);
        if (use > 0)
            *bits = core__bits_set_use(*bits, use - 1);
    }
    pool->hand = to;
}

static int apply_page_event(core_pool_t *pool, const core_event *ev)
{
    uint32_t page = (uint32_t)ev->page;
    core_key key;
    switch (ev->type) {
    case CORE_EV_RESERVE:
        if (ev->key.len == 0 || !apply_target(pool, ev->page, CORE_PAGE_FREE))
            return CORE_EINVAL;
        if (pool->core->live_apply)
            free_stack_remove(pool, page);
        core__key_encode(pool->core, ev->key, &key);
        page_reserve(pool, page, &key, ev->deadline);
        return 0;
    case CORE_EV_OWN: {
        if (!apply_target(pool, ev->page, CORE_PAGE_RESERVED))
            return CORE_EINVAL;
        const core_side *e = &pool->side[page_side(pool, page)];
        core__keyst_to_key(pool->core, &e->key, e->key_kind, &key);
        uint32_t id = core__index_find(pool->ns, &key);
        if (id != CORE_NIL &&
            core__krec_pages(pool->ns, core__krec(pool->ns, id))[pool->col] != CORE_NIL)
            return CORE_EINVAL; /* the key would own two pages */
        page_own(pool, page, id, &key);
        return 0;
    }
    case CORE_EV_FREE:
        return apply_free(pool, page);
    case CORE_EV_DRAIN: /* from the log: an OWNED page; from a snapshot: a FREE one */
        if (apply_target(pool, ev->page, CORE_PAGE_OWNED)) {
            rec_release_if_empty(pool->ns, pool->core, owned_leave(pool, page, NULL));
        } else if (!apply_target(pool, ev->page, CORE_PAGE_FREE)) {
            return CORE_EINVAL;
        } else if (pool->core->live_apply) {
            free_stack_remove(pool, page); /* a release: FREE, then DRAIN */
        }
        page_drain(pool, page, ev->deadline);
        return 0;
    case CORE_EV_USE:    /* recency of an older log or value: volatile, ignored */
    case CORE_EV_DEMOTE:
        return apply_target(pool, ev->page, CORE_PAGE_OWNED) ? 0 : CORE_EINVAL;
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
        if (!apply_target(pool, ev->page, CORE_PAGE_OWNED) || !(e = wlease_find(pool, page)))
            return CORE_EINVAL;
        if (e->writers <= 1)
            wlease_remove(pool, e); /* the last writer: the lease ends */
        else
            e->writers--;
        *page_deadline(pool, page) = ev->deadline;
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
        if ((p < pool->touched && *core__ref(pool, p) != CORE_NIL) ||
            (seen[p / 64] >> (p % 64) & 1))
            rc = CORE_EINVAL;
        else
            seen[p / 64] |= 1ull << (p % 64);
    }
    hf_xfree(seen);
    if (rc != 0)
        return rc;
    if (mark > pool->touched)
        ensure_chunk(pool, (uint32_t)(mark - 1));
    for (uint64_t p = pool->touched; p < mark; p++) {
        *core__ref(pool, (uint32_t)p) = CORE_NIL;
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
        total += sizeof *ns + ns->name_len + ns->ranks_cap * sizeof(core_pool_t *) +
                 ns->ncols * sizeof(core_pool_t *) + ns->nrchunks * CORE_REC_CHUNK * ns->rec_size +
                 ns->rchunks_cap * sizeof(uint8_t *) +
                 (ns->slots ? (ns->slot_mask + 1) * sizeof(uint32_t) : 0) +
                 reuse_memory(ns->reuse);
        for (uint32_t id = 0; id < ns->rec_top; id++) {
            uint8_t *rec = core__krec(ns, id);
            if (*rec_kind(rec) == CORE_KEY_EXT)
                total += rec_key(rec)->ext.len;
        }
        for (uint32_t r = 0; r < ns->ranks_cap; r++) {
            const core_pool_t *pool = ns->by_rank[r];
            if (!pool)
                continue;
            total += sizeof *pool + pool->nchunks * CORE_CHUNK_PAGES * sizeof(uint32_t) +
                     pool->chunks_cap * sizeof(uint32_t *) + pool->side_cap * sizeof(core_side) +
                     pool->free_cap * sizeof(uint32_t) + pool->demoted_cap * sizeof(uint32_t) +
                     (pool->wleases ? (pool->wlease_mask + 1) * sizeof(core_wlease) : 0);
            for (size_t s = 0; s < pool->side_top; s++)
                if (pool->side[s].key_kind == CORE_KEY_EXT)
                    total += pool->side[s].key.ext.len;
        }
    }
    return total;
}

void core_recovered(core_t *core, int64_t now)
{
    for (size_t n = 0; n < core->nns; n++) {
        if (core->namespaces[n]->nrecs > 0) {
            core->recovered = true;
            core->recovered_at = now;
            return;
        }
    }
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
                if (*core__ref(pool, p) == CORE_NIL)
                    free_stack_push(pool, p);
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
    if (type == CORE_EV_RESERVE) {
        uint32_t ref = *core__ref(pool, page);
        if (ref & CORE_REF_SIDE) {
            const core_side *e = &pool->side[ref & ~CORE_REF_SIDE];
            ev.key = core__keyst_text(&e->key, e->key_kind, buf);
        } else {
            uint8_t *rec = core__krec(pool->ns, ref);
            ev.key = core__keyst_text(rec_key(rec), *rec_kind(rec), buf);
        }
    }
    fn(ctx, &ev);
}

/* Owned pages: RESERVE + OWN each (their recency is volatile: not walked). */
static void walk_owned(const core_pool_t *pool, core_observer_fn fn, void *ctx)
{
    for (uint64_t p = 0; p < pool->touched && pool->nowned > 0; p++) {
        if (!page_is_owned(pool, (uint32_t)p))
            continue;
        walk_emit(fn, ctx, pool, CORE_EV_RESERVE, (uint32_t)p, 0);
        walk_emit(fn, ctx, pool, CORE_EV_OWN, (uint32_t)p, 0);
    }
}

static void walk_pool(const core_pool_t *pool, core_observer_fn fn, void *ctx)
{
    core_event init = {CORE_EV_POOL_INIT, {pool->ns->name, pool->ns->name_len}, pool->rank,
                       pool->num_pages, {"", 0}, 0};
    fn(ctx, &init);
    if (pool->hand != 0) /* no OWNED page yet: this only puts the hand in place */
        walk_emit(fn, ctx, pool, CORE_EV_SWEEP, pool->hand, 0);
    for (uint32_t s = pool->reserved.head; s != CORE_NIL; s = pool->side[s].next)
        walk_emit(fn, ctx, pool, CORE_EV_RESERVE, pool->side[s].page, pool->side[s].deadline);
    walk_owned(pool, fn, ctx);
    for (size_t s = 0; pool->nwleases && s <= pool->wlease_mask; s++) {
        const core_wlease *e = &pool->wleases[s];
        for (uint32_t w = 0; e->page != CORE_NIL && w < e->writers; w++)
            walk_emit(fn, ctx, pool, CORE_EV_WRITE_LEASE, e->page, e->end);
    }
}

static void walk_draining(const core_pool_t *pool, core_observer_fn fn, void *ctx)
{
    for (uint32_t s = pool->draining.head; s != CORE_NIL; s = pool->side[s].next)
        walk_emit(fn, ctx, pool, CORE_EV_DRAIN, pool->side[s].page, pool->side[s].deadline);
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
