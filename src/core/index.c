/*
 * index.c: keys, key records and the key index (core_internal.h "Key
 * records" and "Key index" specify the layout).
 *
 * Rules
 *   - A key is encoded once per call (core__key_encode): its canonical
 *     bytes (inline, packed hex, or external) and its hash, seeded per
 *     process; the kind takes part in the hash.
 *   - A record lives while its key owns a page in at least one pool of the
 *     namespace (core__rec_new when the key first owns one, then
 *     core__rec_release_if_empty after each page it loses); its id is
 *     stable while it lives; free records form a list through column 0.
 *   - Every live record is in the index once, under its key's tag; the
 *     index stays at most 3/4 full and deletion shifts back (no tombstones).
 *   - A key of the shape `<32|64 hex><suffix>` (util/hexkey.h) is packed:
 *     a 32-hex key's suffix inline, a 64-hex key's interned per namespace
 *     ("Suffixes" below).
 *   - Nothing here changes a page's state or emits an event: pages.c does,
 *     and calls in here for the record of the key.
 */
#include "core/core_internal.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "util/hex.h"
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
 * input cannot aim at that). A 32-byte key costs 3 multiplies.
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

/* ------------------------------------------------------------ suffixes
 *
 * A namespace interns the suffixes of its CORE_KEY_HEX64S keys: at most
 * CORE_SFX_MAX, never forgotten while it lives (a record's kind names one
 * by number). A key whose suffix is not interned when it is stored, the
 * table being full, stays an external key, and so does every later key
 * with that suffix: a suffix is interned before any key of it is stored,
 * or never, which keeps each key's form unique. Lookups intern nothing.
 */

static uint32_t sfx_hash(const char *p, size_t len)
{
    uint64_t w[2] = {0, 0};
    memcpy(w, p, len); /* len <= 16 */
    return (uint32_t)(mum(w[0] ^ 0x9e3779b97f4a7c15ull ^ len, w[1] ^ 0xbf58476d1ce4e5b9ull) >> 7);
}

/* The suffix's number in ns, or -1. */
static int sfx_find(const core_sfx *t, const char *p, size_t len)
{
    if (!t)
        return -1;
    for (uint32_t i = sfx_hash(p, len);; i++) {
        uint8_t slot = t->slots[i & (CORE_SFX_SLOTS - 1)];
        if (slot == 0)
            return -1;
        uint32_t id = slot - 1u;
        if (t->len[id] == len && memcmp(t->bytes[id], p, len) == 0)
            return (int)id;
    }
}

/* The suffix's number in ns, interned if new and there is room; or -1. */
static int sfx_intern(core_ns *ns, const char *p, size_t len)
{
    int id = sfx_find(ns->sfx, p, len);
    if (id >= 0)
        return id;
    if (!ns->sfx)
        ns->sfx = hf_xcalloc(1, sizeof *ns->sfx);
    core_sfx *t = ns->sfx;
    if (t->n >= CORE_SFX_MAX)
        return -1;
    uint32_t n = t->n++;
    t->len[n] = (uint8_t)len;
    memcpy(t->bytes[n], p, len);
    uint32_t i = sfx_hash(p, len);
    while (t->slots[i & (CORE_SFX_SLOTS - 1)] != 0)
        i++;
    t->slots[i & (CORE_SFX_SLOTS - 1)] = (uint8_t)(n + 1);
    HF_ASSERT(t->n <= CORE_SFX_MAX && sfx_find(t, p, len) == (int)n);
    return (int)n;
}

bool core__kind_valid(const core_ns *ns, uint8_t kind)
{
    if (kind >= CORE_KEY_HEX64S)
        return ns->sfx && (uint32_t)(kind - CORE_KEY_HEX64S) < ns->sfx->n;
    return kind >= 1;
}

/* ---------------------------------------------------------------- keys */

/* `intern`: ns itself, which interns a new suffix (else NULL: a lookup). */
static void key_encode(const core_ns *ns, core_ns *intern, const core_t *core, hf_slice raw,
                       core_key *out)
{
    /* out is written here, never read before: only its address is taken */
    // cppcheck-suppress ctuuninitvar
    const uint8_t *canon = out->bytes;
    size_t canon_len = 32;

    out->ext = NULL;
    out->len = (uint32_t)raw.len;
    memset(out->bytes, 0, sizeof out->bytes);
    if (raw.len >= 1 && raw.len <= 32) {
        out->kind = (uint8_t)raw.len;
        memcpy(out->bytes, raw.ptr, raw.len);
        canon_len = raw.len;
    } else if (raw.len == 64 && hf_hex_pack(raw.ptr, 64, out->bytes)) {
        out->kind = CORE_KEY_HEX64;
    } else if (raw.len > 64 && raw.len <= 64 + HF_HEXKEY_SUFFIX_MAX &&
               hf_hex_pack(raw.ptr, 64, out->bytes)) {
        int id = intern ? sfx_intern(intern, raw.ptr + 64, raw.len - 64)
                        : sfx_find(ns ? ns->sfx : NULL, raw.ptr + 64, raw.len - 64);
        out->kind = id >= 0 ? (uint8_t)(CORE_KEY_HEX64S + id) : CORE_KEY_EXT;
    } else if (raw.len > 32 && raw.len <= 32 + HF_HEXKEY_SUFFIX_MAX &&
               hf_hex_pack(raw.ptr, 32, out->bytes)) {
        out->kind = (uint8_t)(CORE_KEY_HEX32S + (raw.len - 33));
        memcpy(out->bytes + 16, raw.ptr + 32, raw.len - 32);
    } else {
        out->kind = CORE_KEY_EXT;
    }
    if (out->kind == CORE_KEY_EXT) {
        memset(out->bytes, 0, sizeof out->bytes);
        out->ext = raw.ptr;
        canon = (const uint8_t *)raw.ptr;
        canon_len = raw.len;
    }
    /* The kind takes part so that a 32-byte raw key and a packed hex key
     * with the same bytes hash apart (and keys of two suffixes). */
    out->hash = hash_bytes(core->config.hash_seed + out->kind, canon, canon_len);
}

void core__key_encode(const core_ns *ns, const core_t *core, hf_slice raw, core_key *out)
{
    key_encode(ns, NULL, core, raw, out);
}

void core__key_encode_stored(core_ns *ns, const core_t *core, hf_slice raw, core_key *out)
{
    key_encode(ns, ns, core, raw, out);
}

bool core__keyst_canonical(const core_ns *ns, const core_t *core, const core_keyst *st,
                           uint8_t kind)
{
    if (!core__kind_valid(ns, kind))
        return false;
    char buf[CORE_KEY_TEXT_MAX];
    core_key key;
    key_encode(ns, NULL, core, core__keyst_text(ns, st, kind, buf), &key);
    return core__keyst_eq(st, kind, &key) != 0;
}

/* The canonical bytes of stored key `st` of `kind`. */
static const uint8_t *keyst_canon(const core_keyst *st, uint8_t kind, size_t *len)
{
    if (kind == CORE_KEY_EXT) {
        *len = st->ext.len;
        return (const uint8_t *)st->ext.ptr;
    }
    *len = kind <= 32 ? kind : 32;
    return st->bytes;
}

/* The length of the text of a stored key that is not external. */
static uint32_t keyst_text_len(const core_ns *ns, uint8_t kind)
{
    if (kind <= 32)
        return kind;
    if (kind == CORE_KEY_HEX64)
        return 64;
    if (kind >= CORE_KEY_HEX64S) {
        HF_ASSERT(core__kind_valid(ns, kind));
        return 64u + ns->sfx->len[kind - CORE_KEY_HEX64S];
    }
    HF_ASSERT(kind >= CORE_KEY_HEX32S);
    return 32u + (kind - CORE_KEY_HEX32S) + 1u;
}

void core__keyst_to_key(const core_ns *ns, const core_t *core, const core_keyst *st, uint8_t kind,
                        core_key *out)
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
        out->len = keyst_text_len(ns, kind);
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

hf_slice core__keyst_text(const core_ns *ns, const core_keyst *st, uint8_t kind,
                          char buf[CORE_KEY_TEXT_MAX])
{
    if (kind == CORE_KEY_EXT)
        return (hf_slice){st->ext.ptr, st->ext.len};
    if (kind <= 32)
        return (hf_slice){(const char *)st->bytes, kind};
    size_t len = keyst_text_len(ns, kind);
    if (kind == CORE_KEY_HEX64 || kind >= CORE_KEY_HEX64S) {
        hf_hex_unpack(st->bytes, 32, buf);
        if (kind >= CORE_KEY_HEX64S)
            memcpy(buf + 64, ns->sfx->bytes[kind - CORE_KEY_HEX64S], len - 64);
    } else {
        hf_hex_unpack(st->bytes, 16, buf);
        memcpy(buf + 32, st->bytes + 16, len - 32);
    }
    return (hf_slice){buf, len};
}

/* ------------------------------------------------------------ records */

static uint32_t rec_alloc(core_ns *ns)
{
    uint32_t id;
    if (ns->rec_free != CORE_NIL) {
        id = ns->rec_free;
        HF_ASSERT(id < ns->rec_top && *core__rec_kind(core__krec(ns, id)) == CORE_KEY_NONE);
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
    HF_ASSERT(ns->nrecs <= ns->pages_sum && ns->nrecs <= ns->rec_top);
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
            HF_ASSERT(id < ns->rec_top);
            uint8_t *rec = core__krec(ns, id);
            if (core__keyst_eq(core__krec_key(rec), *core__rec_kind(rec), key))
                return id;
        }
        i = (i + 1) & ns->slot_mask;
    }
}


static void index_place(core_ns *ns, uint32_t id, uint32_t hash)
{
    HF_ASSERT(ns->nkeys <= ns->slot_mask && id <= ns->id_mask);
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
        if (*core__rec_kind(rec) != CORE_KEY_NONE)
            index_place(ns, id, keyst_hash(core, core__krec_key(rec), *core__rec_kind(rec)));
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
    HF_ASSERT(ns->nkeys * 4 <= (ns->slot_mask + 1) * 3);
}

static uint32_t rec_hash(const core_ns *ns, const core_t *core, uint32_t id)
{
    uint8_t *rec = core__krec(ns, id);
    return keyst_hash(core, core__krec_key(rec), *core__rec_kind(rec));
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
    HF_ASSERT(ns->nkeys > 0);
    while (ns->slots[i] != slot) {
        HF_ASSERT(ns->slots[i] != CORE_NIL); /* every live record is indexed */
        i = (i + 1) & mask;
    }
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

uint32_t core__rec_new(core_ns *ns, const core_t *core, uint32_t hash, core_keyst *st,
                       uint8_t *kind)
{
    uint32_t id = rec_alloc(ns);
    index_insert(ns, core, id, hash); /* a growth skips it: no key yet */
    uint8_t *rec = core__krec(ns, id);
    *core__krec_key(rec) = *st; /* the key (an external copy included) moves over */
    *core__rec_kind(rec) = *kind;
    *kind = CORE_KEY_NONE;
    HF_ASSERT(keyst_hash(core, core__krec_key(rec), *core__rec_kind(rec)) == hash &&
              core__kind_valid(ns, *core__rec_kind(rec)));
    return id;
}

void core__rec_release_if_empty(core_ns *ns, const core_t *core, uint32_t id)
{
    HF_ASSERT(id < ns->rec_top);
    uint8_t *rec = core__krec(ns, id);
    HF_ASSERT(*core__rec_kind(rec) != CORE_KEY_NONE);
    const uint32_t *pages = core__krec_pages(ns, rec);
    for (uint32_t c = 0; c < ns->ncols; c++)
        if (pages[c] != CORE_NIL)
            return;
    index_remove(ns, core, id, rec_hash(ns, core, id));
    core__keyst_drop(core__krec_key(rec), core__rec_kind(rec));
    core__krec_pages(ns, rec)[0] = ns->rec_free;
    ns->rec_free = id;
    HF_ASSERT(ns->nrecs > 0);
    ns->nrecs--;
}

/* Columns stay in rank order; the records are rebuilt with one more
 * column, ids unchanged. */
void core__ns_add_pool(core_ns *ns, const core_t *core, core_pool_t *pool)
{
    uint32_t n = ns->ncols, m = n + 1;
    core_pool_t **by_col = hf_xmalloc(m * sizeof *by_col);
    uint32_t at = 0;
    while (at < n && ns->by_col[at]->rank < pool->rank)
        at++;
    for (uint32_t c = 0, k = 0; c < m; c++)
        by_col[c] = c == at ? pool : ns->by_col[k++];
    size_t size = CORE_REC_SIZE(m);
    uint32_t off_pages = CORE_REC_OFF_PAGES(m), off_deadlines = CORE_REC_OFF_DEADLINES(m);
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
            else if (at == 0 && *core__rec_kind(f) == CORE_KEY_NONE)
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
    HF_ASSERT(ns->ncols == ns->npools && ns->by_col[pool->col] == pool);
}

/* ---------------------------------------------------------- namespaces */

core_ns *core__ns_new(core_t *core, hf_slice name)
{
    core_ns *ns = hf_xcalloc(1, sizeof *ns);
    ns->name = hf_xmalloc(name.len + 1);
    memcpy(ns->name, name.ptr, name.len);
    ns->name[name.len] = '\0';
    ns->name_len = name.len;
    ns->rec_free = CORE_NIL;
    ns->rec_size = CORE_REC_SIZE(0);
    ns->off_pages = CORE_REC_OFF_PAGES(0);
    ns->off_deadlines = CORE_REC_OFF_DEADLINES(0);
    ns_set_id_bits(ns, core);
    core->namespaces = hf_xreallocarray(core->namespaces, core->nns + 1, sizeof *core->namespaces);
    core->namespaces[core->nns++] = ns;
    return ns;
}

void core__ns_free(core_ns *ns)
{
    for (uint32_t id = 0; id < ns->rec_top; id++) {
        uint8_t *rec = core__krec(ns, id);
        if (*core__rec_kind(rec) == CORE_KEY_EXT)
            hf_xfree(core__krec_key(rec)->ext.ptr);
    }
    for (size_t c = 0; c < ns->nrchunks; c++)
        hf_xfree(ns->rchunks[c]);
    hf_xfree(ns->rchunks);
    hf_xfree(ns->slots);
    hf_xfree(ns->by_col);
    hf_xfree(ns->sfx);
    reuse_free(ns->reuse);
    hf_xfree(ns->by_rank);
    hf_xfree(ns->name);
    hf_xfree(ns);
}
