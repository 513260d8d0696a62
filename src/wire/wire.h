/*
 * wire.h: what the front end and the Redis module say to each other
 * (docs/redis-module.md): names, versions, and the byte encodings of the
 * HF3FS.* commands' arguments and replies. Used by both sides (src/store's
 * Redis engine and src/module), so that an encoding exists once; a folder of
 * its own, so that neither side depends on the other's.
 *
 * Encodings (all integers little-endian)
 *   key list   for each key: u32 length, then its bytes
 *   page list  int64 per item (a page, or -1 for none)
 *   flag list  one byte per item, 0 or 1
 *   cfg        decimal fields joined by ',': reservation_ms, read_lease_ms,
 *              write_lease_ms, release_grace_ms, evict (0/1), max_pages,
 *              max_ranks, and optionally stripes, stripe[, placement] (the
 *              namespace's stripe count, the index of the value the command
 *              names and the placement of its keys; without them 1, 0, 0)
 *   events     for each core event: u8 type, then varints: rank, page,
 *              zigzag(deadline); RESERVE adds varint key length and the key.
 *              The namespace is the value's own and is not repeated.
 *   packed events  (a saved value's, encoding version 4 on; never a
 *              command's) the same, but RESERVE's key in util/hexkey.h's
 *              form: hex packed two characters a byte, a suffix after it.
 *
 * Decoders never trust their input: a malformed list or event answers -1
 * and reads nothing beyond the given length.
 */
#ifndef HF_WIRE_H
#define HF_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "util/buf.h"
#include "util/slice.h"

#define HF3FS_MODULE_NAME "hf3fsmeta"
/*
 * Versions between a front end and the module (docs/redis-module.md
 * "Versions between front ends and modules").
 *
 * A command set N is a set of HF3FS.* command names, each with fixed
 * arguments and replies: a name never changes meaning within a set, so
 * what a command means never depends on the connection. A build speaks
 * the sets HF3FS_MODULE_VERSION to HF3FS_WIRE_HIGHEST, as a module and as
 * a front end. A module shows the lowest it speaks, its baseline, as
 * MODULE LIST's "ver": what a front end of before HF3FS.VERSION requires
 * exactly, so a release keeps it as long as it serves every command of
 * that set unchanged. A command whose meaning must change gets a new name
 * in a new set; the baseline rises only when a release drops an old name.
 * Additive commands (a name no set of the range has) are capabilities:
 * HF3FS.VERSION lists them, and a front end sends one only to a node that
 * listed it. A front end and a node speak the highest set both do
 * (wire_version_agree); a node with none in common gets no command.
 */
#define HF3FS_MODULE_VERSION 5 /* 5: packed key lists (4: stripes record their placement) */
#define HF3FS_WIRE_HIGHEST 5
/* The capabilities of this build (bit, name), in the order HF3FS.VERSION
 * lists them: "version" is HF3FS.VERSION itself; "settle" is HF3FS.ALLOC's
 * allocation id, HF3FS.SETTLE and HF3FS.NOTE; "fine-curve" is HF3FS.STATS's
 * last argument WIRE_STATS_FINE, with which a row carries the hit-ratio
 * estimate at every scale of core/reuse.h instead of the five of the
 * coarse curve (docs/redis-module.md). */
#define HF3FS_CAPS(X)                                                                              \
    X(WIRE_CAP_VERSION, 1u << 0, "version")                                                        \
    X(WIRE_CAP_SETTLE, 1u << 1, "settle")                                                          \
    X(WIRE_CAP_FINE_CURVE, 1u << 2, "fine-curve")
#define WIRE_STATS_FINE "FINE"
#define WIRE_CAP_ENUM(id, bit, name) id = (bit),
enum { HF3FS_CAPS(WIRE_CAP_ENUM) };
#undef WIRE_CAP_ENUM
/* The highest command set of [alo, ahi] and [blo, bhi] both, or 0 if the
 * ranges do not meet. */
unsigned wire_version_agree(unsigned alo, unsigned ahi, unsigned blo, unsigned bhi);
/* The bit of the capability name[0..len) this build knows, 0 if none
 * (a capability of a later build: ignored). */
unsigned wire_cap_of(const char *name, size_t len);
/* The data type's name (exactly 9 characters) and its serialized form's
 * version; rdb_load keeps reading every older version, from
 * HF3FS_TYPE_ENCVER_OLDEST. */
#define HF3FS_TYPE_NAME "hf3fsmeta"
#define HF3FS_TYPE_ENCVER 4 /* 4: saved events pack their keys (wire_event_append_packed) */
#define HF3FS_TYPE_ENCVER_OLDEST 1

/* The Redis key of namespace ns: "hf3fs:{" hex(ns) "}" ("hf3fs:{-}" for the
 * empty namespace), so that any namespace is a valid hash tag. Writes at
 * most cap bytes (no NUL) and returns the full length (6 + 2 len + 1 + ...). */
size_t wire_value_key(hf_slice ns, char *out, size_t cap);
#define WIRE_VALUE_KEY_LEN(nslen) (8 + 2 * (nslen) + ((nslen) == 0))

/*
 * Key lists (the keys argument of the commands), in one of two forms:
 *   general  per key: its length (le32), then its bytes;
 *   packed   FF FF FF FF, then W (one byte, 16 or 32) and S (one byte,
 *            0 to WIRE_KEYS_SUFFIX_MAX), then per key W + S bytes: keys of
 *            2W lowercase hex characters and then S bytes of any kind, the
 *            characters two a byte, the first in the high nibble
 *            (util/hex.h), the S bytes as they are. vLLM's keys are MD5
 *            digests (W 16, S 0), SGLang's SHA-256 ones (W 32, S 0, or S
 *            2: "<64 hex>-k" and "-v" of an MHA model's pages).
 * No general list begins as a packed one: its first key would be 4 GiB
 * long. A packed list takes 16, 32 or 34 bytes a key where the general one
 * takes 36, 68 or 70, and Redis pays for what it reads by the byte.
 */
#define WIRE_KEYS_SUFFIX_MAX 8
/* The bytes of the general form of these keys: room enough for
 * wire_keys_put, whose packed form is always shorter. */
size_t wire_keys_len(const hf_slice *keys, size_t n);
/* The list written at out (wire_keys_len bytes of room): packed if that
 * fits every key of a non-empty list (one W, one S, hex characters), else
 * in the general form; its length. */
size_t wire_keys_put(char *out, const hf_slice *keys, size_t n);
/* The general form, appended. */
void wire_keys_append(hf_buf *b, const hf_slice *keys, size_t n);
/* How many keys p[0..len) holds, or -1 if it is not a well-formed key list
 * of either form. */
int64_t wire_keys_count(const char *p, size_t len);
/* The bytes of key text a list wire_keys_count accepted unpacks to: 0 for
 * the general form, 2W + S a key for the packed one. */
size_t wire_keys_text_len(const char *p, size_t len);
/* Fill out[0..count) from a list wire_keys_count accepted: slices into p,
 * or for a packed list into text (wire_keys_text_len bytes), where its
 * keys are written. */
void wire_keys_decode(const char *p, size_t len, hf_slice *out, char *text);

/* Page lists. */
void wire_i64_append(hf_buf *b, const int64_t *v, size_t n);
/* Item i of a page list (the caller checked len == 8 * count). */
int64_t wire_i64_at(const char *p, size_t i);

/*
 * Stripes (docs/redis-module.md "Stripes"). A namespace of S stripes is S
 * values; stripe i holds the keys with wire_stripe_of(key, S) == i, of every
 * rank, and page p of every pool with p % S == i, as its local page p / S.
 * Stripe 0 is the value under wire_value_key(ns) (the anchor: the same key
 * whatever S, so it records the namespace's S); stripe i > 0 is under
 * wire_stripe_key(ns, {S, i}). The hash and the keys never change: front
 * ends of every version must agree on them (tests/unit/test_wire.c pins
 * them).
 */
#define WIRE_MAX_STRIPES 256
typedef struct wire_stripe {
    uint32_t count;     /* S, 1..WIRE_MAX_STRIPES */
    uint32_t index;     /* < count */
    uint32_t placement; /* WIRE_PLACE_*: the rule of the stripes' keys, the namespace's */
} wire_stripe;
/*
 * Placement: where stripe i > 0's key puts its slot, relative to the
 * anchor's slot a (the 16384 slots cut into S ranges of about 16384 / S,
 * range k from k * 16384 / S):
 *   WIRE_PLACE_WINDOW  anywhere in [a + i * 16384 / S, a + (i + 1) * 16384 / S)
 *                      (mod 16384): namespaces made before placements
 *                      were recorded;
 *   WIRE_PLACE_SPREAD  in the middle half of range (k + i) mod S, k the
 *                      anchor's range: for a cluster whose primaries serve
 *                      contiguous ranges of about equal size (what redis-cli
 *                      --cluster create and rebalance make), S = m x P puts
 *                      exactly m stripes on each primary. What new
 *                      namespaces of S > 1 get.
 * A namespace keeps the placement it was created with: every stripe's value
 * records it, the anchor answers it with S (HF3FS.STRIPES).
 */
enum { WIRE_PLACE_WINDOW = 0, WIRE_PLACE_SPREAD = 1 };
/* A placement this version knows; (count, index, placement) naming a stripe:
 * 1 <= count <= WIRE_MAX_STRIPES, 0 <= index < count, a known placement.
 * The one check of every decoder (cfg, APPLY/REBUILD, RDB, HF3FS.STRIPES). */
static inline bool wire_placement_known(int64_t placement)
{
    return placement == WIRE_PLACE_WINDOW || placement == WIRE_PLACE_SPREAD;
}
static inline bool wire_stripe_valid(int64_t count, int64_t index, int64_t placement)
{
    return count >= 1 && count <= WIRE_MAX_STRIPES && index >= 0 && index < count &&
           wire_placement_known(placement);
}

/* The key-to-stripe hash: FNV-1a 64 of the key's bytes, then MurmurHash3's
 * 64-bit finalizer; a key's stripe is (hash >> 32) * S >> 32. */
uint64_t wire_stripe_hash(hf_slice key);
uint32_t wire_stripe_of(hf_slice key, uint32_t count);
/* out[i] = wire_stripe_of(keys[i], count) for i < n, four keys at a time. */
void wire_stripes_of(const hf_slice *keys, size_t n, uint32_t count, uint32_t *out);
/* The pages of a num_pages pool that stripe st holds. */
uint64_t wire_stripe_pages(uint64_t num_pages, wire_stripe st);
/*
 * The stripe count of a namespace created over a Redis Cluster of
 * `primaries` primaries by a pool of num_pages pages, when no --stripes
 * says (docs/many-nodes.md "Choosing S"): primaries x m, m the fewest that
 * keep a stripe's share of the pool within WIRE_STRIPE_MAX_PAGES (the
 * MIGRATE stall), but never so many that a stripe gets fewer than
 * WIRE_STRIPE_MIN_PAGES (the hit ratio) nor more than WIRE_MAX_STRIPES;
 * when those bounds cut it, the largest multiple of primaries within them,
 * or below primaries the bound itself; at least 1.
 */
#define WIRE_STRIPE_MIN_PAGES 2500
#define WIRE_STRIPE_MAX_PAGES 60000
uint32_t wire_stripes_for(uint64_t num_pages, uint32_t primaries);
/* The Redis key of stripe st of ns (index 0: wire_value_key(ns)); writes it
 * when cap >= WIRE_STRIPE_KEY_MAX(ns.len), returns its length. */
size_t wire_stripe_key(hf_slice ns, wire_stripe st, char *out, size_t cap);
#define WIRE_STRIPE_KEY_MAX(nslen) (WIRE_VALUE_KEY_LEN(nslen) + 33)

/* cfg: formats the seven core fields listed above into out (NUL-terminated;
 * cap >= 128) and returns the length (the caller appends ",S,i"); parse
 * sets those fields of *cfg (others unchanged) and *st (NULL: not wanted),
 * 0 or -1 if malformed. */
size_t wire_cfg_format(const core_config *cfg, char *out, size_t cap);
int wire_cfg_parse(const char *p, size_t len, core_config *cfg, wire_stripe *st);
/* The same in two steps, for a caller that keeps the fields of a text it
 * saw before (the module: every command of a front end carries the same). */
typedef struct wire_cfg {
    int64_t reservation_ms, read_lease_ms, write_lease_ms, release_grace_ms;
    bool evict;
    uint64_t max_pages;
    uint32_t max_ranks;
    wire_stripe st;
} wire_cfg;
int wire_cfg_read(const char *p, size_t len, wire_cfg *out);
void wire_cfg_apply(const wire_cfg *w, core_config *cfg);
/* wire_cfg_read, keeping the seven fields' text and values of the last
 * text read in *cache (zeroed at first): a text with the same seven
 * fields, stripe or not, reads only its stripe. Same answers as
 * wire_cfg_read. */
typedef struct wire_cfg_cache {
    char text[128];
    size_t len; /* 0: empty */
    wire_cfg w;
} wire_cfg_cache;
int wire_cfg_read_cached(wire_cfg_cache *cache, const char *p, size_t len, wire_cfg *out);

/* Events. */
void wire_event_append(hf_buf *b, const core_event *ev);
/* Decode the event at *pos of p[0..len) into *ev (ev->ns = ns; ev->key
 * points into p); advances *pos. 1: an event, 0: the end, -1: malformed. */
int wire_event_next(const char *p, size_t len, size_t *pos, hf_slice ns, core_event *ev);
/* The packed events' pair: a packed key is unpacked into *scratch, where
 * ev->key points until the next call. */
void wire_event_append_packed(hf_buf *b, const core_event *ev);
int wire_event_next_packed(const char *p, size_t len, size_t *pos, hf_slice ns, core_event *ev,
                           hf_buf *scratch);

#endif
