#include "wire/wire.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/bytes.h"
#include "util/hash.h"
#include "util/hex.h"
#include "util/hexkey.h"
#include "util/slot.h"
#include "util/xalloc.h"

static const char hexd[] = "0123456789abcdef";

unsigned wire_version_agree(unsigned alo, unsigned ahi, unsigned blo, unsigned bhi)
{
    unsigned lo = alo > blo ? alo : blo, hi = ahi < bhi ? ahi : bhi;
    return lo <= hi ? hi : 0;
}

unsigned wire_cap_of(const char *name, size_t len)
{
#define WIRE_CAP_MATCH(id, bit, text)                                                              \
    if (len == sizeof(text) - 1 && memcmp(name, text, len) == 0)                                   \
        return bit;
    HF3FS_CAPS(WIRE_CAP_MATCH)
#undef WIRE_CAP_MATCH
    return 0;
}

size_t wire_value_key(hf_slice ns, char *out, size_t cap)
{
    size_t need = WIRE_VALUE_KEY_LEN(ns.len), n = 0;
    char tmp[8];
#define PUT(c)                                                                                     \
    do {                                                                                           \
        if (n < cap)                                                                               \
            out[n] = (c);                                                                          \
        n++;                                                                                       \
    } while (0)
    memcpy(tmp, "hf3fs:{", 7);
    for (size_t i = 0; i < 7; i++)
        PUT(tmp[i]);
    if (ns.len == 0)
        PUT('-');
    for (size_t i = 0; i < ns.len; i++) {
        PUT(hexd[(unsigned char)ns.ptr[i] >> 4]);
        PUT(hexd[(unsigned char)ns.ptr[i] & 15]);
    }
    PUT('}');
#undef PUT
    return need;
}

/* The packed form's head: FF FF FF FF, W, S. */
#define PACKED_HEAD 6

/* How a packed list is packed: W and S. */
typedef struct keys_form {
    unsigned hex;
    unsigned suffix;
} keys_form;

/* Whether p[0..len) is a packed list, with its form in *f (not checked). */
static bool packed_head(const char *p, size_t len, keys_form *f)
{
    if (len < PACKED_HEAD || memcmp(p, "\xff\xff\xff\xff", 4) != 0)
        return false;
    *f = (keys_form){(unsigned char)p[4], (unsigned char)p[5]};
    return true;
}

static bool form_valid(keys_form f)
{
    return (f.hex == 16 || f.hex == 32) && f.suffix <= WIRE_KEYS_SUFFIX_MAX;
}

/* The keys packed at out, its length; 0 (out's bytes then unspecified) if
 * the list is empty or one key does not fit the form the first key's
 * length asks for: W 32 from 64 characters on, 16 below (with S at most
 * WIRE_KEYS_SUFFIX_MAX, only one W fits a length). */
static size_t put_packed(char *out, const hf_slice *keys, size_t n)
{
    size_t len = n ? keys[0].len : 0;
    unsigned w = len >= 64 ? 32 : 16;
    if (n == 0 || len < 2 * w || len - 2 * w > WIRE_KEYS_SUFFIX_MAX)
        return 0;
    unsigned s = (unsigned)(len - 2 * w);
    memcpy(out, "\xff\xff\xff\xff", 4);
    out[4] = (char)w;
    out[5] = (char)s;
    char *o = out + PACKED_HEAD;
    for (size_t i = 0; i < n; i++, o += w + s) {
        if (keys[i].len != len || !hf_hex_pack(keys[i].ptr, 2 * w, (uint8_t *)o))
            return 0;
        if (s)
            memcpy(o + w, keys[i].ptr + 2 * w, s);
    }
    return (size_t)(o - out);
}

size_t wire_keys_len(const hf_slice *keys, size_t n)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += 4 + keys[i].len;
    return total;
}

static void put_general(char *out, const hf_slice *keys, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        hf_put_le32(out, (uint32_t)keys[i].len);
        if (keys[i].len)
            memcpy(out + 4, keys[i].ptr, keys[i].len);
        out += 4 + keys[i].len;
    }
}

size_t wire_keys_put(char *out, const hf_slice *keys, size_t n)
{
    size_t packed = put_packed(out, keys, n);
    if (packed)
        return packed;
    put_general(out, keys, n);
    return wire_keys_len(keys, n);
}

void wire_keys_append(hf_buf *b, const hf_slice *keys, size_t n)
{
    size_t total = wire_keys_len(keys, n);
    if (!hf_buf_reserve(b, total))
        return;
    put_general(b->ptr + b->len, keys, n);
    b->len += total;
}

int64_t wire_keys_count(const char *p, size_t len)
{
    keys_form f;
    if (packed_head(p, len, &f))
        return form_valid(f) && (len - PACKED_HEAD) % (f.hex + f.suffix) == 0
                   ? (int64_t)((len - PACKED_HEAD) / (f.hex + f.suffix))
                   : -1;
    int64_t n = 0;
    size_t pos = 0;
    while (pos < len) {
        if (len - pos < 4)
            return -1;
        uint32_t klen = hf_get_le32(p + pos);
        pos += 4;
        if (klen > len - pos)
            return -1;
        pos += klen;
        n++;
    }
    return n;
}

size_t wire_keys_text_len(const char *p, size_t len)
{
    keys_form f;
    if (!packed_head(p, len, &f) || !form_valid(f))
        return 0;
    return (len - PACKED_HEAD) / (f.hex + f.suffix) * (2 * f.hex + f.suffix);
}

void wire_keys_decode(const char *p, size_t len, hf_slice *out, char *text)
{
    keys_form f;
    if (packed_head(p, len, &f)) {
        size_t n = (len - PACKED_HEAD) / (f.hex + f.suffix), klen = 2 * f.hex + f.suffix;
        const uint8_t *in = (const uint8_t *)p + PACKED_HEAD;
        for (size_t i = 0; i < n; i++, in += f.hex + f.suffix, text += klen) {
            hf_hex_unpack(in, f.hex, text);
            if (f.suffix)
                memcpy(text + 2 * f.hex, in + f.hex, f.suffix);
            out[i] = (hf_slice){text, klen};
        }
        return;
    }
    size_t pos = 0, i = 0;
    while (pos < len) {
        uint32_t klen = hf_get_le32(p + pos);
        out[i++] = (hf_slice){p + pos + 4, klen};
        pos += 4 + klen;
    }
}

void wire_i64_append(hf_buf *b, const int64_t *v, size_t n)
{
    hf_buf_reserve(b, 8 * n);
    for (size_t i = 0; i < n; i++)
        hf_put_le64(b->ptr + b->len + 8 * i, (uint64_t)v[i]);
    b->len += 8 * n;
}

int64_t wire_i64_at(const char *p, size_t i)
{
    return (int64_t)hf_get_le64(p + 8 * i);
}

size_t wire_cfg_format(const core_config *cfg, char *out, size_t cap)
{
    int n = snprintf(out, cap,
                     "%" PRId64 ",%" PRId64 ",%" PRId64 ",%" PRId64 ",%d,%" PRIu64 ",%" PRIu32,
                     cfg->reservation_ms, cfg->read_lease_ms, cfg->write_lease_ms,
                     cfg->release_grace_ms, cfg->evict ? 1 : 0, cfg->max_pages, cfg->max_ranks);
    return n < 0 ? 0 : (size_t)n;
}

/* One decimal field of p[*pos..len) up to ',' or the end; -1 if malformed. */
static int cfg_field(const char *p, size_t len, size_t *pos, bool last, int64_t *out)
{
    size_t i = *pos;
    bool neg = i < len && p[i] == '-';
    if (neg)
        i++;
    uint64_t v = 0;
    size_t digits = 0;
    while (i < len && p[i] >= '0' && p[i] <= '9') {
        if (v > (UINT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (uint64_t)(p[i++] - '0');
        digits++;
    }
    if (digits == 0 || v > INT64_MAX)
        return -1;
    if (last ? i != len : (i >= len || p[i] != ','))
        return -1;
    *pos = last ? i : i + 1;
    *out = neg ? -(int64_t)v : (int64_t)v;
    return 0;
}

/* The seven fields of p; *end: just after the seventh (at len, or at the
 * comma of a stripe suffix). */
static int read_seven(const char *p, size_t len, size_t *end, wire_cfg *w)
{
    int64_t f[7];
    size_t pos = 0;
    bool suffix = false;
    for (size_t i = 0; i < 7; i++) {
        if (i == 6 && pos < len) { /* max_ranks ends the 7-field form */
            size_t j = pos;
            while (j < len && p[j] != ',')
                j++;
            suffix = j < len;
        }
        if (cfg_field(p, len, &pos, i == 6 && !suffix, &f[i]) != 0)
            return -1;
    }
    if (f[0] < 0 || f[1] < 0 || f[2] < 0 || f[3] < 0 || (f[4] != 0 && f[4] != 1) || f[5] < 0 ||
        f[6] < 0 || f[6] > UINT32_MAX)
        return -1;
    *end = suffix ? pos - 1 : pos;
    *w = (wire_cfg){.reservation_ms = f[0],
                    .read_lease_ms = f[1],
                    .write_lease_ms = f[2],
                    .release_grace_ms = f[3],
                    .evict = f[4] == 1,
                    .max_pages = (uint64_t)f[5],
                    .max_ranks = (uint32_t)f[6]};
    return 0;
}

/* The stripe from p[pos..len): nothing (one stripe) or
 * ",count,index[,placement]". */
static int read_stripe(const char *p, size_t len, size_t pos, wire_stripe *st)
{
    *st = (wire_stripe){1, 0, WIRE_PLACE_WINDOW};
    if (pos == len)
        return 0;
    int64_t count, index, placement = WIRE_PLACE_WINDOW;
    pos++; /* the comma read_seven stopped at */
    if (cfg_field(p, len, &pos, false, &count) != 0)
        return -1;
    const char *comma = memchr(p + pos, ',', len - pos);
    if (cfg_field(p, len, &pos, !comma, &index) != 0 ||
        (comma && cfg_field(p, len, &pos, true, &placement) != 0) ||
        !wire_stripe_valid(count, index, placement))
        return -1;
    *st = (wire_stripe){(uint32_t)count, (uint32_t)index, (uint32_t)placement};
    return 0;
}

int wire_cfg_read(const char *p, size_t len, wire_cfg *out)
{
    size_t end;
    wire_cfg w;
    if (read_seven(p, len, &end, &w) != 0 || read_stripe(p, len, end, &w.st) != 0)
        return -1;
    *out = w;
    return 0;
}

int wire_cfg_read_cached(wire_cfg_cache *c, const char *p, size_t len, wire_cfg *out)
{
    size_t end;
    wire_cfg w;
    if (c->len && len >= c->len && memcmp(p, c->text, c->len) == 0 &&
        (len == c->len || p[c->len] == ',')) {
        w = c->w; /* the seven fields: the cache's */
        end = c->len;
    } else {
        if (read_seven(p, len, &end, &w) != 0)
            return -1;
        if (end <= sizeof c->text) {
            memcpy(c->text, p, end);
            c->len = end;
            c->w = w;
        }
    }
    if (read_stripe(p, len, end, &w.st) != 0)
        return -1;
    *out = w;
    return 0;
}

void wire_cfg_apply(const wire_cfg *w, core_config *cfg)
{
    cfg->reservation_ms = w->reservation_ms;
    cfg->read_lease_ms = w->read_lease_ms;
    cfg->write_lease_ms = w->write_lease_ms;
    cfg->release_grace_ms = w->release_grace_ms;
    cfg->evict = w->evict;
    cfg->max_pages = w->max_pages;
    cfg->max_ranks = w->max_ranks;
}

int wire_cfg_parse(const char *p, size_t len, core_config *cfg, wire_stripe *st)
{
    wire_cfg w;
    if (wire_cfg_read(p, len, &w) != 0)
        return -1;
    wire_cfg_apply(&w, cfg);
    if (st)
        *st = w.st;
    return 0;
}

/* ---- stripes ---- */

static inline uint32_t stripe_index(uint64_t hash, uint32_t count)
{
    return (uint32_t)(((hash >> 32) * count) >> 32);
}

uint64_t wire_stripe_hash(hf_slice key)
{
    return hf_fmix64(hf_fnv1a(HF_FNV_OFFSET, key.ptr, key.len));
}

uint32_t wire_stripe_of(hf_slice key, uint32_t count)
{
    return stripe_index(wire_stripe_hash(key), count);
}

void wire_stripes_of(const hf_slice *keys, size_t n, uint32_t count, uint32_t *out)
{
    /* FNV-1a is a multiply per byte, each waiting for the one before: four
     * keys hashed side by side keep four chains in flight. */
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const hf_slice *k = keys + i;
        size_t common = k[0].len;
        for (int j = 1; j < 4; j++)
            common = k[j].len < common ? k[j].len : common;
        const unsigned char *p0 = (const unsigned char *)k[0].ptr,
                            *p1 = (const unsigned char *)k[1].ptr,
                            *p2 = (const unsigned char *)k[2].ptr,
                            *p3 = (const unsigned char *)k[3].ptr;
        uint64_t h0 = HF_FNV_OFFSET, h1 = HF_FNV_OFFSET, h2 = HF_FNV_OFFSET, h3 = HF_FNV_OFFSET;
        for (size_t b = 0; b < common; b++) { /* four chains in registers */
            h0 = (h0 ^ p0[b]) * HF_FNV_PRIME;
            h1 = (h1 ^ p1[b]) * HF_FNV_PRIME;
            h2 = (h2 ^ p2[b]) * HF_FNV_PRIME;
            h3 = (h3 ^ p3[b]) * HF_FNV_PRIME;
        }
        uint64_t h[4] = {h0, h1, h2, h3};
        for (int j = 0; j < 4; j++) {
            for (size_t b = common; b < k[j].len; b++)
                h[j] = (h[j] ^ (unsigned char)k[j].ptr[b]) * HF_FNV_PRIME;
            out[i + (size_t)j] = stripe_index(hf_fmix64(h[j]), count);
        }
    }
    for (; i < n; i++)
        out[i] = wire_stripe_of(keys[i], count);
}

uint64_t wire_stripe_pages(uint64_t num_pages, wire_stripe st)
{
    return num_pages > st.index ? (num_pages - st.index + st.count - 1) / st.count : 0;
}

uint32_t wire_stripes_for(uint64_t num_pages, uint32_t primaries)
{
    uint64_t p = primaries ? primaries : 1;
    uint64_t bound = num_pages / WIRE_STRIPE_MIN_PAGES;
    if (bound > WIRE_MAX_STRIPES)
        bound = WIRE_MAX_STRIPES;
    uint64_t span = p * WIRE_STRIPE_MAX_PAGES; /* the pages of one stripe per primary */
    uint64_t per_primary = num_pages / span + (num_pages % span != 0);
    uint64_t want = p * (per_primary ? per_primary : 1);
    if (want <= bound)
        return (uint32_t)want;
    if (bound >= p)
        return (uint32_t)(bound - bound % p);
    return bound ? (uint32_t)bound : 1;
}

/* Where range k of count starts: k * 16384 / count. */
static uint32_t range_start(uint32_t k, uint32_t count)
{
    return (uint32_t)(((uint64_t)k * HF_CLUSTER_SLOTS) / count);
}

/* "hf3fs:{<hex ns>.<count>.<index>.<t>}" (t decimal) into out (cap >= its
 * length); the length. */
static size_t stripe_key_try(hf_slice ns, wire_stripe st, uint32_t t, char *out, size_t cap)
{
    size_t n = wire_value_key(ns, out, cap) - 1; /* over the '}' */
    int m = snprintf(out + n, cap - n, ".%" PRIu32 ".%" PRIu32 ".%" PRIu32 "}", st.count, st.index,
                     t);
    return n + (size_t)m;
}

size_t wire_stripe_key(hf_slice ns, wire_stripe st, char *out, size_t cap)
{
    size_t base = wire_value_key(ns, out, cap);
    if (st.index == 0 || base > cap || cap < WIRE_STRIPE_KEY_MAX(ns.len))
        return st.index == 0 ? base : WIRE_STRIPE_KEY_MAX(ns.len);
    /* Stripe i's slot lies where its placement says (wire.h "Placement"):
     * t is the first suffix that lands there. */
    uint32_t a = (uint32_t)hf_key_slot(out, base), lo, width;
    if (st.placement == WIRE_PLACE_SPREAD) { /* wire.h "Placement" */
        uint32_t k = (uint32_t)(((uint64_t)a * st.count) / HF_CLUSTER_SLOTS);
        while (k > 0 && range_start(k, st.count) > a) /* rounding: a is in range k */
            k--;
        while (k + 1 < st.count && range_start(k + 1, st.count) <= a)
            k++;
        uint32_t r = (k + st.index) % st.count;
        uint32_t start = range_start(r, st.count);
        uint32_t size = range_start(r + 1, st.count) - start;
        lo = start + size / 4;
        width = size / 2 ? size / 2 : 1;
    } else {
        lo = range_start(st.index, st.count);
        width = range_start(st.index + 1, st.count) - lo;
        lo = (a + lo) % HF_CLUSTER_SLOTS;
    }
    size_t n = 0;
    for (uint32_t t = 0;; t++) {
        n = stripe_key_try(ns, st, t, out, cap);
        uint32_t slot = (uint32_t)hf_key_slot(out, n);
        if ((slot + HF_CLUSTER_SLOTS - lo) % HF_CLUSTER_SLOTS < width)
            break;
    }
    return n;
}

/* A varint at *pos of p[0..len), advancing *pos; -1 if malformed. */
static int get_varint(const char *p, size_t len, size_t *pos, uint64_t *out)
{
    int n = hf_varint_get(p + *pos, len - *pos, out);
    if (n <= 0)
        return -1;
    *pos += (size_t)n;
    return 0;
}

static void event_append(hf_buf *b, const core_event *ev, bool packed)
{
    hf_buf_reserve(b, 1);
    b->ptr[b->len++] = (char)ev->type;
    hf_buf_put_varint(b, ev->rank);
    hf_buf_put_varint(b, ev->page);
    hf_buf_put_varint(b, hf_zigzag_encode((uint64_t)ev->deadline));
    if (ev->type == CORE_EV_RESERVE && packed) {
        hf_hexkey_put(b, ev->key);
    } else if (ev->type == CORE_EV_RESERVE) {
        hf_buf_put_varint(b, ev->key.len);
        hf_buf_append(b, ev->key.ptr, ev->key.len);
    }
}

void wire_event_append(hf_buf *b, const core_event *ev)
{
    event_append(b, ev, false);
}

void wire_event_append_packed(hf_buf *b, const core_event *ev)
{
    event_append(b, ev, true);
}

/* scratch: the packed form's (NULL: the plain one). */
static int event_next(const char *p, size_t len, size_t *pos, hf_slice ns, core_event *ev,
                      hf_buf *scratch)
{
    if (*pos >= len)
        return 0;
    unsigned char type = (unsigned char)p[(*pos)++];
    if (type < CORE_EV_POOL_INIT || type > CORE_EV_SWEEP)
        return -1;
    uint64_t rank, page, zz;
    if (get_varint(p, len, pos, &rank) || rank > UINT32_MAX || get_varint(p, len, pos, &page) ||
        get_varint(p, len, pos, &zz))
        return -1;
    *ev = (core_event){(core_event_type)type,        ns, (uint32_t)rank, page, {"", 0},
                       (int64_t)hf_zigzag_decode(zz)};
    if (type == CORE_EV_CLEAR_ALL)
        ev->ns = (hf_slice){"", 0};
    if (type == CORE_EV_RESERVE && scratch) {
        if (hf_hexkey_get((const uint8_t *)p, len, pos, true, len, scratch, &ev->key) != 0)
            return -1;
    } else if (type == CORE_EV_RESERVE) {
        uint64_t klen;
        if (get_varint(p, len, pos, &klen) || klen > len - *pos)
            return -1;
        ev->key = (hf_slice){p + *pos, (size_t)klen};
        *pos += klen;
    }
    return 1;
}

int wire_event_next(const char *p, size_t len, size_t *pos, hf_slice ns, core_event *ev)
{
    return event_next(p, len, pos, ns, ev, NULL);
}

int wire_event_next_packed(const char *p, size_t len, size_t *pos, hf_slice ns, core_event *ev,
                           hf_buf *scratch)
{
    return event_next(p, len, pos, ns, ev, scratch);
}
