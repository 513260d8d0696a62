/*
 * format.c: file headers, record framing and the event codec (the layout is
 * specified in wal.c's header comment).
 */
#include "wal/format.h"

#include <stdlib.h>
#include <string.h>

#include "util/bytes.h"
#include "util/hexkey.h"
#include "util/hf_assert.h"
#include "util/xalloc.h"
#include "wal/crc32c.h"

/* ---------------------------------------------------------- file headers */

void wal__header_encode(const wal_file_header *h, uint8_t out[WAL_HEADER_SIZE])
{
    memset(out, 0, WAL_HEADER_SIZE);
    memcpy(out, h->magic, 8);
    hf_put_le32(out + 8, h->version);
    hf_put_le32(out + 12, h->flags);
    hf_put_le64(out + 16, h->seq);
    hf_put_le64(out + 24, h->lsn);
    hf_put_le64(out + 32, (uint64_t)h->time_base);
    hf_put_le32(out + 40, h->salt);
    hf_put_le32(out + 44, wal_crc32c(out, 44));
}

int wal__header_decode(const uint8_t *p, size_t len, wal_file_header *h)
{
    if (len < 8)
        return WAL_HDR_SHORT;
    if (memcmp(p, WAL_MAGIC_LOG, 8) != 0 && memcmp(p, WAL_MAGIC_SNAPSHOT, 8) != 0)
        return WAL_HDR_BAD_MAGIC;
    if (len < WAL_HEADER_SIZE)
        return WAL_HDR_SHORT;
    if (hf_get_le32(p + 44) != wal_crc32c(p, 44))
        return WAL_HDR_BAD_CRC;
    memcpy(h->magic, p, 8);
    h->version = hf_get_le32(p + 8);
    h->flags = hf_get_le32(p + 12);
    h->seq = hf_get_le64(p + 16);
    h->lsn = hf_get_le64(p + 24);
    h->time_base = (int64_t)hf_get_le64(p + 32);
    h->salt = hf_get_le32(p + 40);
    if (h->version < WAL_VERSION_OLDEST || h->version > WAL_VERSION)
        return WAL_HDR_BAD_VERSION;
    return WAL_HDR_OK;
}

/* ---------------------------------------------------------------- varints */


/* A cursor over a body; `bad` once anything did not parse. */
typedef struct reader {
    const uint8_t *p, *end;
    bool bad;
} reader;

static uint64_t get_varint(reader *r)
{
    uint64_t v;
    int n = hf_varint_get(r->p, (size_t)(r->end - r->p), &v);
    if (n <= 0) {
        r->bad = true;
        return 0;
    }
    r->p += n;
    return v;
}

static const uint8_t *get_bytes(reader *r, size_t n)
{
    if ((size_t)(r->end - r->p) < n) {
        r->bad = true;
        return NULL;
    }
    const uint8_t *p = r->p;
    r->p += n;
    return p;
}

/* 0 stands for "no deadline"; others are zigzag(deadline - base) + 1, in
 * wrapping arithmetic so that every int64 round-trips. */
static void put_deadline(hf_buf *b, int64_t base, int64_t deadline)
{
    if (deadline == 0) {
        hf_buf_put_varint(b, 0);
        return;
    }
    hf_buf_put_varint(b, hf_zigzag_encode((uint64_t)deadline - (uint64_t)base) + 1);
}

static int64_t get_deadline(reader *r, int64_t base)
{
    uint64_t v = get_varint(r);
    if (v == 0)
        return 0;
    return (int64_t)((uint64_t)base + hf_zigzag_decode(v - 1));
}

/* ------------------------------------------------------------------- keys */

/* A key field (wal.c "RECORD"): util/hexkey.h's form. */
static void put_key(hf_buf *b, hf_slice key)
{
    hf_hexkey_put(b, key);
}

/* The key text; packed keys are unpacked into *scratch. Versions before 5
 * have no suffix byte after packed hex. */
static hf_slice get_key(reader *r, uint32_t version, hf_buf *scratch)
{
    size_t pos = 0;
    hf_slice key = {"", 0};
    if (hf_hexkey_get(r->p, (size_t)(r->end - r->p), &pos, version >= 5, WAL_MAX_BODY, scratch,
                      &key) != 0) {
        r->bad = true;
        return (hf_slice){"", 0};
    }
    r->p += pos;
    return key;
}

/* ---------------------------------------------------------------- framing */

void wal__frame_append(hf_buf *out, uint32_t salt, const void *body, size_t body_len)
{
    HF_ASSERT(body_len >= 1 && body_len <= WAL_MAX_BODY); /* every record written reads back */
    hf_buf_reserve(out, WAL_MAX_FRAME_OVERHEAD + body_len);
    uint8_t *rec = (uint8_t *)out->ptr + out->len;
    size_t n = 4 + hf_varint_put(rec + 4, body_len);
    memcpy(rec + n, body, body_len);
    hf_put_le32(rec, wal_crc32c(rec + 4, n - 4 + body_len) ^ salt);
    out->len += n + body_len;
}

int wal__frame(const void *data, size_t avail, uint32_t salt, size_t *rec_len, const uint8_t **body,
               size_t *body_len)
{
    const uint8_t *p = data;
    /* The length's varint: at most WAL_MAX_FRAME_OVERHEAD - 4 bytes; one
     * that has not ended where the data ends may still be arriving. */
    size_t room = avail > 4 ? avail - 4 : 0, most = WAL_MAX_FRAME_OVERHEAD - 4;
    uint64_t len = 0;
    int got = hf_varint_get(p + 4, room < most ? room : most, &len);
    if (got <= 0)
        return room <= most ? WAL_FRAME_SHORT : WAL_FRAME_BAD;
    size_t n = 4 + (size_t)got;
    if (len == 0 || len > WAL_MAX_BODY)
        return WAL_FRAME_BAD;
    if (avail - n < len)
        return WAL_FRAME_SHORT;
    if (hf_get_le32(p) != (wal_crc32c(p + 4, n - 4 + (size_t)len) ^ salt))
        return WAL_FRAME_BAD;
    *rec_len = n + (size_t)len;
    *body = p + n;
    *body_len = (size_t)len;
    return WAL_FRAME_OK;
}

/* ------------------------------------------------------------ pool table */

static uint32_t pool_hash(hf_slice ns, uint32_t rank)
{
    uint32_t h = 2166136261u ^ rank;
    for (size_t i = 0; i < ns.len; i++)
        h = (h ^ (uint8_t)ns.ptr[i]) * 16777619u;
    return (h ^ (h >> 15)) * 0x2c1b3c6du;
}

int64_t wal__pools_find(const wal_pools *t, hf_slice ns, uint32_t rank)
{
    if (!t->slots)
        return -1;
    uint32_t h = pool_hash(ns, rank);
    for (size_t i = h & t->mask;; i = (i + 1) & t->mask) {
        uint32_t slot = t->slots[i];
        if (slot == 0)
            return -1;
        const wal_pool_ent *e = &t->ents[slot - 1]; /* listed ids are in use */
        if (e->hash == h && e->rank == rank && e->ns_len == ns.len &&
            memcmp(e->ns, ns.ptr, ns.len) == 0)
            return slot - 1;
    }
}

static void pools_place(wal_pools *t, uint32_t id)
{
    size_t i = t->ents[id].hash & t->mask;
    while (t->slots[i] != 0)
        i = (i + 1) & t->mask;
    t->slots[i] = id + 1;
}

void wal__pools_put(wal_pools *t, uint32_t id, hf_slice ns, uint32_t rank)
{
    HF_ASSERT(id < WAL_MAX_POOL_ID && (id >= t->count || !t->ents[id].ns)); /* an unused id */
    t->ents = hf_grow_index(t->ents, &t->cap, id, sizeof *t->ents, 16);
    if (id >= t->count)
        t->count = id + 1;
    wal_pool_ent *e = &t->ents[id];
    e->ns = hf_xmalloc(ns.len + 1);
    memcpy(e->ns, ns.ptr, ns.len);
    e->ns[ns.len] = '\0';
    e->ns_len = ns.len;
    e->rank = rank;
    e->hash = pool_hash(ns, rank);
    t->used++;
    if (!t->slots || (size_t)t->used * 2 > t->mask + 1) {
        size_t cap = t->slots ? (t->mask + 1) * 2 : 64;
        free(t->slots);
        t->slots = hf_xcalloc(cap, sizeof *t->slots);
        t->mask = cap - 1;
        for (uint32_t i = 0; i < t->count; i++)
            if (t->ents[i].ns)
                pools_place(t, i);
    } else {
        pools_place(t, id);
    }
    /* every id in use is listed once, in a table at most half full */
    HF_ASSERT(t->used <= t->count && (size_t)t->used * 2 <= t->mask + 1);
}

void wal__pools_clear(wal_pools *t)
{
    for (uint32_t i = 0; i < t->count; i++)
        free(t->ents[i].ns);
    free(t->ents);
    free(t->slots);
    memset(t, 0, sizeof *t);
}

void wal__pools_copy(wal_pools *dst, const wal_pools *src)
{
    for (uint32_t i = 0; i < src->count; i++)
        if (src->ents[i].ns)
            wal__pools_put(dst, i, (hf_slice){src->ents[i].ns, src->ents[i].ns_len},
                           src->ents[i].rank);
}

/* The core events written as one record each, by name: CORE_EV_<name> is
 * written as WAL_REC_<name> and read back as it (the encoder's table and
 * the decoder's). */
#define EVENT_RECORDS(X) X(RESERVE) X(OWN) X(FREE) X(DRAIN) X(WRITE_LEASE) X(WRITE_DONE) X(SWEEP)

/* ---------------------------------------------------------------- encoder */

void wal__enc_init(wal_encoder *e, int64_t time_base)
{
    memset(e, 0, sizeof *e);
    e->time_base = time_base;
}

void wal__enc_free(wal_encoder *e)
{
    wal__pools_clear(&e->pools);
    hf_buf_free(&e->out);
    hf_buf_free(&e->body);
    hf_buf_free(&e->held_key);
    memset(e, 0, sizeof *e);
}

static void body_start(wal_encoder *e, uint8_t type)
{
    e->body.len = 0;
    hf_buf_reserve(&e->body, 1);
    e->body.ptr[e->body.len++] = (char)type;
}

static void body_emit(wal_encoder *e)
{
    wal__frame_append(&e->out, e->salt, e->body.ptr, e->body.len);
    e->records++;
}

static void held_flush(wal_encoder *e)
{
    if (!e->held)
        return;
    e->held = false;
    body_start(e, WAL_REC_RESERVE);
    hf_buf_put_varint(&e->body, e->held_pool);
    hf_buf_put_varint(&e->body, e->held_page);
    put_deadline(&e->body, e->time_base, 0);
    put_key(&e->body, (hf_slice){(const char *)e->held_key.ptr, e->held_key.len});
    body_emit(e);
}

void wal__enc_flush(wal_encoder *e)
{
    held_flush(e);
}

/* The id of the event's pool. */
static uint32_t pool_of(wal_encoder *e, const core_event *ev)
{
    int64_t id = wal__pools_find(&e->pools, ev->ns, ev->rank);
    /* The core reports POOL_INIT before any event of a pool: a miss is a bug. */
    if (id < 0)
        abort();
    return (uint32_t)id;
}

void wal__enc_event(void *ctx, const core_event *ev)
{
    wal_encoder *e = ctx;
    if (e->held) {
        bool merge = ev->type == CORE_EV_OWN && ev->page == e->held_page &&
                     pool_of(e, ev) == e->held_pool;
        if (merge) {
            e->held = false;
            body_start(e, WAL_REC_OWNED);
            hf_buf_put_varint(&e->body, e->held_pool);
            hf_buf_put_varint(&e->body, e->held_page);
            put_key(&e->body, (hf_slice){(const char *)e->held_key.ptr, e->held_key.len});
            body_emit(e);
            return;
        }
        held_flush(e);
    }
    if (ev->type == CORE_EV_CLEAR_ALL) {
        wal__enc_flush(e);
        wal__pools_clear(&e->pools);
        body_start(e, WAL_REC_CLEAR_ALL);
        body_emit(e);
        return;
    }
    if (ev->type == CORE_EV_POOL_INIT) {
        uint32_t id;
        if (e->snapshot) {
            id = pool_of(e, ev);
        } else {
            HF_ASSERT(wal__pools_find(&e->pools, ev->ns, ev->rank) < 0); /* one POOL_INIT a pool */
            id = e->pools.count;
            wal__pools_put(&e->pools, id, ev->ns, ev->rank);
        }
        body_start(e, WAL_REC_POOL_INIT);
        hf_buf_put_varint(&e->body, id);
        hf_buf_put_varint(&e->body, ev->rank);
        hf_buf_put_varint(&e->body, ev->page);
        hf_buf_put_varint(&e->body, ev->ns.len);
        hf_buf_append(&e->body, ev->ns.ptr, ev->ns.len);
        body_emit(e);
        return;
    }
    uint32_t id = pool_of(e, ev);
    if (ev->type == CORE_EV_RESERVE && ev->deadline == 0) {
        e->held = true;
        e->held_pool = id;
        e->held_page = ev->page;
        e->held_key.len = 0;
        hf_buf_append(&e->held_key, ev->key.ptr, ev->key.len);
        return;
    }
    static const uint8_t types[] = {
#define EVENT_TO_RECORD(name) [CORE_EV_##name] = WAL_REC_##name,
        EVENT_RECORDS(EVENT_TO_RECORD)
#undef EVENT_TO_RECORD
    };
    if ((size_t)ev->type >= sizeof types || types[ev->type] == 0)
        abort(); /* an event type this log does not write (USE, DEMOTE): a bug */
    body_start(e, types[ev->type]);
    hf_buf_put_varint(&e->body, id);
    hf_buf_put_varint(&e->body, ev->page);
    if (ev->type == CORE_EV_RESERVE || ev->type == CORE_EV_DRAIN ||
        ev->type == CORE_EV_WRITE_LEASE || ev->type == CORE_EV_WRITE_DONE)
        put_deadline(&e->body, e->time_base, ev->deadline);
    if (ev->type == CORE_EV_RESERVE)
        put_key(&e->body, ev->key);
    HF_ASSERT(ev->type != CORE_EV_SWEEP || ev->deadline >= 0);
    if (ev->type == CORE_EV_SWEEP)
        hf_buf_put_varint(&e->body, (uint64_t)ev->deadline); /* full turns, >= 0 */
    body_emit(e);
}

void wal__enc_end(wal_encoder *e)
{
    HF_ASSERT(e->snapshot && !e->held); /* a snapshot's, after wal__enc_flush */
    uint64_t count = e->records;
    body_start(e, WAL_REC_END);
    hf_buf_put_varint(&e->body, count);
    body_emit(e);
}

/* ---------------------------------------------------------------- decoder */

void wal__dec_init(wal_decoder *d)
{
    memset(d, 0, sizeof *d);
    d->version = WAL_VERSION;
}

void wal__dec_free(wal_decoder *d)
{
    wal__pools_clear(&d->pools);
    hf_buf_free(&d->key);
    memset(d, 0, sizeof *d);
}

int wal__apply_event(void *ctx, const core_event *ev)
{
    return core_apply(ctx, ev);
}

/* Fill ev's pool from a pool id; false if no such pool. */
static bool dec_pool(const wal_decoder *d, uint64_t id, core_event *ev)
{
    if (id >= d->pools.count || !d->pools.ents[id].ns)
        return false;
    const wal_pool_ent *p = &d->pools.ents[id];
    ev->ns = (hf_slice){p->ns, p->ns_len};
    ev->rank = p->rank;
    return true;
}

static int dec_pool_init(wal_decoder *d, reader *r, wal_event_fn fn, void *ctx)
{
    uint64_t id = get_varint(r), rank = get_varint(r), num_pages = get_varint(r);
    uint64_t ns_len = get_varint(r);
    const uint8_t *ns = ns_len <= WAL_MAX_BODY ? get_bytes(r, (size_t)ns_len) : NULL;
    if (r->bad || !ns || r->p != r->end || rank > UINT32_MAX)
        return WAL_DEC_MALFORMED;
    hf_slice name = {(const char *)ns, (size_t)ns_len};
    if (id >= WAL_MAX_POOL_ID || (id < d->pools.count && d->pools.ents[id].ns) ||
        wal__pools_find(&d->pools, name, (uint32_t)rank) >= 0)
        return WAL_DEC_REFUSED;
    wal__pools_put(&d->pools, (uint32_t)id, name, (uint32_t)rank);
    core_event ev = {CORE_EV_POOL_INIT, name, (uint32_t)rank, num_pages, {"", 0}, 0};
    return fn(ctx, &ev) ? WAL_DEC_REFUSED : WAL_DEC_OK;
}

static int dec_use(wal_decoder *d, reader *r, core_event *ev, wal_event_fn fn, void *ctx)
{
    ev->type = CORE_EV_USE;
    ev->deadline = get_deadline(r, d->time_base);
    uint64_t count = get_varint(r);
    if (r->bad || count == 0 || count > (uint64_t)(r->end - r->p))
        return WAL_DEC_MALFORMED;
    int rc = WAL_DEC_OK;
    for (uint64_t i = 0; i < count; i++) {
        ev->page = get_varint(r);
        if (r->bad)
            return WAL_DEC_MALFORMED;
        if (fn(ctx, ev))
            rc = WAL_DEC_REFUSED;
    }
    return r->p == r->end ? rc : WAL_DEC_MALFORMED;
}

int wal__decode(wal_decoder *d, const uint8_t *body, size_t len, wal_event_fn fn, void *ctx,
                uint64_t *end_count)
{
    reader r = {body + 1, body + len, false};
    if (len == 0)
        return WAL_DEC_MALFORMED;
    uint8_t type = body[0];
    core_event ev = {0, {"", 0}, 0, 0, {"", 0}, 0};
    int rc;
    switch (type) {
    case WAL_REC_POOL_INIT: rc = dec_pool_init(d, &r, fn, ctx); break;
    case WAL_REC_CLEAR_ALL:
        if (r.p != r.end)
            return WAL_DEC_MALFORMED;
        wal__pools_clear(&d->pools);
        ev.type = CORE_EV_CLEAR_ALL;
        rc = fn(ctx, &ev) ? WAL_DEC_REFUSED : WAL_DEC_OK;
        break;
    case WAL_REC_END:
        *end_count = get_varint(&r);
        return r.bad || r.p != r.end ? WAL_DEC_MALFORMED : WAL_DEC_END;
    case WAL_REC_USE:
        if (!dec_pool(d, get_varint(&r), &ev))
            return r.bad ? WAL_DEC_MALFORMED : WAL_DEC_REFUSED;
        rc = dec_use(d, &r, &ev, fn, ctx);
        break;
    case WAL_REC_RESERVE:
    case WAL_REC_OWN:
    case WAL_REC_FREE:
    case WAL_REC_DRAIN:
    case WAL_REC_DEMOTE:
    case WAL_REC_OWNED:
    case WAL_REC_WRITE_LEASE:
    case WAL_REC_WRITE_DONE:
    case WAL_REC_SWEEP: {
        uint64_t id = get_varint(&r);
        ev.page = get_varint(&r);
        if (type == WAL_REC_RESERVE || type == WAL_REC_DRAIN || type == WAL_REC_WRITE_LEASE ||
            type == WAL_REC_WRITE_DONE)
            ev.deadline = get_deadline(&r, d->time_base);
        if (type == WAL_REC_RESERVE || type == WAL_REC_OWNED)
            ev.key = get_key(&r, d->version, &d->key);
        if (type == WAL_REC_SWEEP) {
            uint64_t turns = get_varint(&r);
            if (turns > INT64_MAX)
                return WAL_DEC_MALFORMED;
            ev.deadline = (int64_t)turns;
        }
        if (r.bad || r.p != r.end)
            return WAL_DEC_MALFORMED;
        if (!dec_pool(d, id, &ev))
            return WAL_DEC_REFUSED;
        static const core_event_type kinds[] = {
            [WAL_REC_DEMOTE] = CORE_EV_DEMOTE, /* read only (versions 1-3) */
            [WAL_REC_OWNED] = CORE_EV_RESERVE, /* then an OWN, below */
#define RECORD_TO_EVENT(name) [WAL_REC_##name] = CORE_EV_##name,
            EVENT_RECORDS(RECORD_TO_EVENT)
#undef RECORD_TO_EVENT
        };
        ev.type = kinds[type];
        rc = fn(ctx, &ev) ? WAL_DEC_REFUSED : WAL_DEC_OK;
        if (type == WAL_REC_OWNED && rc == WAL_DEC_OK) {
            ev.type = CORE_EV_OWN;
            ev.key = (hf_slice){"", 0};
            rc = fn(ctx, &ev) ? WAL_DEC_REFUSED : WAL_DEC_OK;
        }
        break;
    }
    default: return WAL_DEC_MALFORMED;
    }
    if (rc == WAL_DEC_OK)
        d->records++;
    return rc;
}
