/*
 * value.c: the module's values (module_internal.h), one per stripe of a
 * namespace: made, freed, and their serialized form (module.c's head,
 * "What survives what"): snapshots, the data type's rdb, aof and digest
 * methods.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "core/core.h"
#include "module/module_internal.h"
#include "module/redismodule_api.h"
#include "util/bytes.h"
#include "util/hf_assert.h"
#include "util/xalloc.h"
#include "wire/wire.h"

/* Bumped when this node starts serving values it did not serve before:
 * a load ended, or it became a primary (module.c, on_rebuilt). */
uint64_t rebuilt_epoch;


hf_slice value_ns(const hf_value *v)
{
    return (hf_slice){v->ns, v->ns_len};
}

/* The configuration of a value made by a load or an APPLY: the limits are
 * the core's own, so every pool that existed anywhere loads; every command
 * that changes a value brings its caller's configuration anyway. */
core_config default_config(void)
{
    core_config cfg = core_config_default(CORE_MAX_PAGES_LIMIT, CORE_MAX_RANKS_LIMIT, 0);
    cfg.write_lease_ms = 30000;
    return cfg;
}

hf_value *value_new(hf_slice ns, const core_config *cfg, wire_stripe st)
{
    core_config c = *cfg;
    if (getrandom(&c.hash_seed, sizeof c.hash_seed, GRND_NONBLOCK) != sizeof c.hash_seed)
        c.hash_seed = (uint64_t)rm_Milliseconds() * 0x9e3779b97f4a7c15ull ^ (uintptr_t)&c;
    core_t *core = core_new(&c);
    if (!core)
        return NULL;
    hf_value *v = hf_xcalloc(1, sizeof *v);
    v->core = core;
    v->ns = hf_xmalloc(ns.len + 1);
    if (ns.len)
        memcpy(v->ns, ns.ptr, ns.len);
    v->ns[ns.len] = 0;
    v->ns_len = ns.len;
    /* a stripe of its namespace; a live epoch is never the loaded marker */
    HF_ASSERT(st.count >= 1 && st.count <= WIRE_MAX_STRIPES && st.index < st.count);
    HF_ASSERT(rebuilt_epoch != EPOCH_LOADED);
    v->epoch = rebuilt_epoch;
    v->st = st;
    return v;
}

/* The stripe of an APPLY or a REBUILD: argv[i], argv[i + 1] and argv[i + 2]
 * if given (count, index, placement; a value of one stripe otherwise, as
 * every module before stripes wrote; placement WIRE_PLACE_WINDOW without
 * the third, as modules before placements wrote); 0, or -1 if malformed. */
int arg_stripe_opt(RedisModuleString **argv, int argc, int i, wire_stripe *st)
{
    *st = (wire_stripe){1, 0, WIRE_PLACE_WINDOW};
    if (argc <= i)
        return 0;
    long long count, index, placement = WIRE_PLACE_WINDOW;
    if ((argc != i + 2 && argc != i + 3) ||
        rm_StringToLongLong(argv[i], &count) != REDISMODULE_OK ||
        rm_StringToLongLong(argv[i + 1], &index) != REDISMODULE_OK ||
        (argc == i + 3 && rm_StringToLongLong(argv[i + 2], &placement) != REDISMODULE_OK) ||
        !wire_stripe_valid(count, index, placement))
        return -1;
    *st = (wire_stripe){(uint32_t)count, (uint32_t)index, (uint32_t)placement};
    return 0;
}

void value_free(void *p)
{
    hf_value *v = p;
    if (!v)
        return;
    core_free(v->core);
    ledger_free(v->ledger);
    hf_xfree(v->ns);
    hf_xfree(v);
}

/* ---- snapshots: the serialized form (see the header) ---- */

static void put_u32(hf_buf *b, uint32_t x)
{
    char c[4];
    hf_put_le32(c, x);
    hf_buf_append(b, c, 4);
}

void collect_event(void *ctx, const core_event *ev)
{
    wire_event_append(ctx, ev);
}

static void collect_event_packed(void *ctx, const core_event *ev)
{
    wire_event_append_packed(ctx, ev);
}

typedef struct free_orders {
    core_t *core;
    hf_buf *out;
} free_orders;

static void collect_free_order(void *ctx, hf_slice ns, uint32_t rank, const core_pool_stats *st)
{
    free_orders *f = ctx;
    core_pool_t *pool = core_pool_find(f->core, ns, rank);
    const uint32_t *pages = NULL;
    size_t n = pool ? core_pool_free_order(pool, &pages) : 0;
    put_u32(f->out, rank);
    put_u32(f->out, (uint32_t)n);
    hf_buf_reserve(f->out, 4 * n);
    for (size_t i = 0; i < n; i++)
        put_u32(f->out, pages[i]);
}

/* The events and free orders of the value (two fresh buffers); `packed`:
 * the events' packed form (an rdb_save's), else the commands' (REBUILD's). */
static void snapshot(const hf_value *v, bool packed, hf_buf *events, hf_buf *order)
{
    *events = (hf_buf){0};
    *order = (hf_buf){0};
    core_walk_state(v->core, packed ? collect_event_packed : collect_event, events);
    free_orders f = {v->core, order};
    core_foreach_pool(v->core, 0, collect_free_order, &f);
}

/* A value rebuilt from a snapshot, or NULL (why in err) if it does not
 * describe a state. */
hf_value *value_from_snapshot(hf_slice ns, wire_stripe st, bool packed, const char *ev,
                              size_t evlen, const char *order, size_t orderlen, char *err,
                              size_t errlen)
{
    core_config cfg = default_config();
    hf_value *v = value_new(ns, &cfg, st);
    if (!v) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    size_t pos = 0, count = 0;
    core_event e;
    int rc;
    hf_buf scratch = {0};
    while ((rc = packed ? wire_event_next_packed(ev, evlen, &pos, ns, &e, &scratch)
                        : wire_event_next(ev, evlen, &pos, ns, &e)) == 1) {
        if (e.type == CORE_EV_CLEAR_ALL || core_apply(v->core, &e) != 0) {
            snprintf(err, errlen,
                     "event %zu (type %d, rank %" PRIu32 ", page %" PRIu64
                     ") does not fit the state",
                     count, (int)e.type, e.rank, e.page);
            goto fail;
        }
        count++;
    }
    hf_buf_free(&scratch);
    if (rc < 0) {
        snprintf(err, errlen, "malformed event %zu", count);
        goto fail;
    }
    core_apply_finish(v->core);
    pos = 0;
    uint32_t *pages = NULL;
    while (pos < orderlen) {
        if (orderlen - pos < 8) {
            snprintf(err, errlen, "truncated free order");
            goto fail;
        }
        uint32_t rank = hf_get_le32(order + pos), n = hf_get_le32(order + pos + 4);
        pos += 8;
        if ((orderlen - pos) / 4 < n) {
            snprintf(err, errlen, "truncated free order of rank %" PRIu32, rank);
            goto fail;
        }
        core_pool_t *pool = core_pool_find(v->core, ns, rank);
        pages = hf_xreallocarray(pages, n ? n : 1, sizeof *pages);
        for (uint32_t i = 0; i < n; i++)
            pages[i] = hf_get_le32(order + pos + 4 * (size_t)i);
        pos += 4 * (size_t)n;
        if (!pool || core_pool_set_free_order(pool, pages, n) != 0) {
            hf_xfree(pages);
            snprintf(err, errlen, "free order of rank %" PRIu32 " does not fit the pool", rank);
            goto fail;
        }
    }
    hf_xfree(pages);
    v->epoch = EPOCH_LOADED;
    return v;
fail:
    hf_buf_free(&scratch);
    value_free(v);
    return NULL;
}

/* ---- data type methods ---- */

/* The saved form of a value: what rdb_save, aof_rewrite and digest write
 * ("What survives what"). */
typedef struct saved_form {
    hf_buf ev, order;
    hf_slice events, free_order;
} saved_form;

static void saved_of(hf_value *v, bool packed, saved_form *f)
{
    snapshot(v, packed, &f->ev, &f->order);
    f->events = (hf_slice){f->ev.ptr ? (const char *)f->ev.ptr : "", f->ev.len};
    f->free_order = (hf_slice){f->order.ptr ? (const char *)f->order.ptr : "", f->order.len};
}

static void saved_free(saved_form *f)
{
    hf_buf_free(&f->ev);
    hf_buf_free(&f->order);
}

void type_rdb_save(RedisModuleIO *io, void *p)
{
    hf_value *v = p;
    saved_form f;
    saved_of(v, true, &f);
    rm_SaveStringBuffer(io, v->ns, v->ns_len);
    rm_SaveStringBuffer(io, f.events.ptr, f.events.len);
    rm_SaveStringBuffer(io, f.free_order.ptr, f.free_order.len);
    rm_SaveUnsigned(io, v->st.count);
    rm_SaveUnsigned(io, v->st.index);
    rm_SaveUnsigned(io, v->st.placement);
    saved_free(&f);
}

void *type_rdb_load(RedisModuleIO *io, int encver)
{
    if (encver < HF3FS_TYPE_ENCVER_OLDEST || encver > HF3FS_TYPE_ENCVER) {
        rm_LogIOError(io, "warning",
                      "hf3fsmeta: a value of encoding version %d, this module reads %d..%d "
                      "(load it with a newer module)",
                      encver, HF3FS_TYPE_ENCVER_OLDEST, HF3FS_TYPE_ENCVER);
        return NULL;
    }
    size_t nslen, evlen, orderlen;
    char *ns = rm_LoadStringBuffer(io, &nslen);
    char *ev = rm_LoadStringBuffer(io, &evlen);
    char *order = rm_LoadStringBuffer(io, &orderlen);
    wire_stripe st = {1, 0, WIRE_PLACE_WINDOW}; /* version 1: a namespace of one value */
    if (encver >= 2) {
        uint64_t count = rm_LoadUnsigned(io), index = rm_LoadUnsigned(io);
        uint64_t placement = encver >= 3 ? rm_LoadUnsigned(io) : WIRE_PLACE_WINDOW;
        st = (wire_stripe){(uint32_t)count, (uint32_t)index, (uint32_t)placement};
        if (!wire_stripe_valid((int64_t)count, (int64_t)index, (int64_t)placement)) {
            rm_LogIOError(io, "warning",
                          "hf3fsmeta: a saved value names stripe %" PRIu64 " of %" PRIu64
                          " (placement %" PRIu64 ")",
                          index, count, placement);
            st.count = 0;
        }
    }
    hf_value *v = NULL;
    if (ns && ev && order && st.count) {
        char err[200];
        v = value_from_snapshot((hf_slice){ns, nslen}, st, encver >= 4, ev, evlen, order, orderlen,
                                err, sizeof err);
        if (!v)
            rm_LogIOError(io, "warning", "hf3fsmeta: a saved value is damaged: %s", err);
    }
    rm_Free(ns);
    rm_Free(ev);
    rm_Free(order);
    return v;
}

void type_aof_rewrite(RedisModuleIO *aof, RedisModuleString *key, void *p)
{
    hf_value *v = p;
    saved_form f;
    saved_of(v, false, &f); /* HF3FS.REBUILD's argument: the commands' form, as before */
    rm_EmitAOF(aof, "HF3FS.REBUILD", "sbbblll", key, v->ns, v->ns_len, f.events.ptr, f.events.len,
               f.free_order.ptr, f.free_order.len, (long long)v->st.count, (long long)v->st.index,
               (long long)v->st.placement);
    saved_free(&f);
}

size_t type_mem_usage(const void *p)
{
    const hf_value *v = p;
    return sizeof *v + v->ns_len + 1 + core_memory_usage(v->core) + ledger_memory(v->ledger);
}

void type_digest(RedisModuleDigest *md, void *p)
{
    hf_value *v = p;
    saved_form f;
    saved_of(v, false, &f); /* the form before version 4: digests agree across it */
    char st[40];
    int stlen = snprintf(st, sizeof st, "%" PRIu32 ",%" PRIu32 ",%" PRIu32, v->st.count,
                         v->st.index, v->st.placement);
    rm_DigestAddStringBuffer(md, v->ns, v->ns_len);
    rm_DigestAddStringBuffer(md, f.events.ptr, f.events.len);
    rm_DigestAddStringBuffer(md, f.free_order.ptr, f.free_order.len);
    rm_DigestAddStringBuffer(md, st, (size_t)stlen);
    rm_DigestEndSequence(md);
    saved_free(&f);
}
