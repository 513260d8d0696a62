/*
 * format.h: the bytes of the log and of snapshots (specified in wal.c's
 * header comment): file headers, record framing with CRC-32C, and the codec
 * between core events and record bodies.
 *
 * Internal to src/wal and to tests/unit/test_wal.c.
 * Names are wal__*. Nothing here does I/O or takes locks.
 */
#ifndef HF_WAL_FORMAT_H
#define HF_WAL_FORMAT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "util/buf.h"
#include "util/slice.h"

#define WAL_VERSION 5 /* written; WAL_VERSION_OLDEST.. are read */
#define WAL_VERSION_OLDEST                                                                         \
    1 /* version 1 lacks WRITE_LEASE and WRITE_DONE, 2 lacks SWEEP;
                               * 1 to 3 have USE and DEMOTE records (read, then ignored);
                               * 1 to 4 have no suffix byte in a packed key */
#define WAL_HEADER_SIZE 48
#define WAL_MAGIC_LOG "HF3FSLOG"
#define WAL_MAGIC_SNAPSHOT "HF3FSSNP"
#define WAL_FLAG_RECOVERY 1u     /* segment opened by a snapshot that repairs a failed log */
#define WAL_MAX_BODY (1u << 24)  /* larger lengths are damage */
#define WAL_MAX_FRAME_OVERHEAD 8 /* CRC (4) + length varint (<= 4) */

/* Record types (the first byte of a body). */
enum {
    WAL_REC_POOL_INIT = 1,
    WAL_REC_CLEAR_ALL = 2,
    WAL_REC_RESERVE = 3,
    WAL_REC_OWN = 4,
    WAL_REC_FREE = 5,
    WAL_REC_DRAIN = 6,
    WAL_REC_USE = 7,    /* versions 1-3 only (recency is no longer logged) */
    WAL_REC_DEMOTE = 8, /* versions 1-3 only */
    WAL_REC_OWNED = 9,
    WAL_REC_END = 10,
    WAL_REC_WRITE_LEASE = 11,
    WAL_REC_WRITE_DONE = 12,
    WAL_REC_SWEEP = 13, /* pool, hand, full turns (core.h CORE_EV_SWEEP) */
};

/* ---------------------------------------------------------- file headers */

typedef struct wal_file_header {
    char magic[8];
    uint32_t version;
    uint32_t flags;
    uint64_t seq;      /* segment: its number; snapshot: the number of the segment after it */
    uint64_t lsn;      /* segment: LSN of its first record; snapshot: LSN it covers up to */
    int64_t time_base; /* wall-clock ms; deadlines in records are relative to it */
    uint32_t salt;     /* XORed into every record checksum of the file */
} wal_file_header;

/* The format's codes stand in the WAL range after the WAL_E* ones (wal.h):
 * headers -351..-354, framing -361..-362, decoding -371..-372. */
enum {
    WAL_HDR_OK = 0,
    WAL_HDR_SHORT = -351,       /* fewer than WAL_HEADER_SIZE bytes */
    WAL_HDR_BAD_MAGIC = -352,   /* not one of our files */
    WAL_HDR_BAD_VERSION = -353, /* ours, of a format this build does not read */
    WAL_HDR_BAD_CRC = -354,     /* damaged */
};

void wal__header_encode(const wal_file_header *h, uint8_t out[WAL_HEADER_SIZE]);
/* Decodes p[0..len-1]; magic must be WAL_MAGIC_LOG or WAL_MAGIC_SNAPSHOT. */
int wal__header_decode(const uint8_t *p, size_t len, wal_file_header *h);

/* ---------------------------------------------------------------- framing */

enum {
    WAL_FRAME_OK = 0,
    WAL_FRAME_SHORT = -361, /* the record runs past the end of the bytes given */
    WAL_FRAME_BAD = -362,   /* impossible length or checksum mismatch */
};

/* Frame the record at data[0..avail-1]: *rec_len = its whole size, *body its
 * body (pointing into p). */
int wal__frame(const void *data, size_t avail, uint32_t salt, size_t *rec_len, const uint8_t **body,
               size_t *body_len);

/* Append one record with this body to out. */
void wal__frame_append(hf_buf *out, uint32_t salt, const void *body, size_t body_len);

/* ------------------------------------------------------------ pool table */

typedef struct wal_pool_ent {
    char *ns; /* NULL: the id is unused */
    size_t ns_len;
    uint32_t rank;
    uint32_t hash;
} wal_pool_ent;

/* Pools by id and by (namespace, rank). The live log numbers pools 0, 1, 2...
 * in POOL_INIT order since the last CLEAR_ALL; a snapshot keeps those ids. */
#define WAL_MAX_POOL_ID (1u << 24)
typedef struct wal_pools {
    wal_pool_ent *ents;        /* by id, 0 .. count-1 */
    uint32_t count, cap, used; /* count: 1 + the highest id in use */
    uint32_t *slots;           /* id + 1, 0 = empty; open addressing */
    size_t mask;
} wal_pools;

/* The id of (ns, rank), or -1. */
int64_t wal__pools_find(const wal_pools *t, hf_slice ns, uint32_t rank);
/* Add (ns, rank) as pool `id` (unused, < WAL_MAX_POOL_ID). */
void wal__pools_put(wal_pools *t, uint32_t id, hf_slice ns, uint32_t rank);
void wal__pools_clear(wal_pools *t);
/* Copy src's pools into the empty dst. */
void wal__pools_copy(wal_pools *dst, const wal_pools *src);

/* ---------------------------------------------------------------- encoder */

/*
 * Turns core events into records. A RESERVE with deadline 0 followed by the OWN
 * of the same page (how snapshots describe an owned page) becomes one OWNED
 * record. Records accumulate in `out`, which the caller drains.
 */
typedef struct wal_encoder {
    wal_pools pools;
    hf_buf out;
    hf_buf body; /* scratch for one body */
    int64_t time_base;
    uint32_t salt; /* of the file the records go to */
    uint64_t records;
    bool held; /* a RESERVE with deadline 0 waits for its OWN */
    uint32_t held_pool;
    uint64_t held_page;
    hf_buf held_key;
    bool snapshot; /* POOL_INIT keeps the id the pool has in `pools` */
} wal_encoder;

void wal__enc_init(wal_encoder *e, int64_t time_base);
void wal__enc_free(wal_encoder *e);
/* A core_observer_fn: ctx is the encoder. */
void wal__enc_event(void *ctx, const core_event *ev);
/* Write a held RESERVE. */
void wal__enc_flush(wal_encoder *e);
/* The END record of a snapshot (after wal__enc_flush): `records` before it. */
void wal__enc_end(wal_encoder *e);

/* ---------------------------------------------------------------- decoder */

enum {
    WAL_DEC_OK = 0,
    WAL_DEC_END = 1,          /* the END record of a snapshot */
    WAL_DEC_MALFORMED = -371, /* the body does not parse (unknown type, bad fields) */
    WAL_DEC_REFUSED = -372,   /* it parses but does not fit (unknown pool, event refused) */
};

typedef struct wal_decoder {
    wal_pools pools;
    int64_t time_base;
    uint64_t records; /* bodies decoded (WAL_DEC_OK) */
    hf_buf key;       /* scratch: an unpacked hex key */
    uint32_t version; /* the format of the file read (its header): its key fields */
} wal_decoder;

/* Called once per event of a record; nonzero = the event does not fit. */
typedef int (*wal_event_fn)(void *ctx, const core_event *ev);

void wal__dec_init(wal_decoder *d);
void wal__dec_free(wal_decoder *d);
/* Decode one body into events for fn. *end_count receives the count of an
 * END record. Pointers in the events point into body or the pool table. */
int wal__decode(wal_decoder *d, const uint8_t *body, size_t len, wal_event_fn fn, void *ctx,
                uint64_t *end_count);
/* wal_event_fn that replays into a core_t (ctx) with core_apply. */
int wal__apply_event(void *ctx, const core_event *ev);

#endif
