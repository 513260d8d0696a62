/*
 * module.c: src/core inside redis-server (hf3fs_metad_redis.so), the
 * HF3FS.* commands of docs/redis-module.md.
 *
 * Specification
 *
 * Layout. One Redis value of the type "hf3fsmeta" per stripe of a
 * namespace (wire.h "Stripes"), under wire_stripe_key(ns, stripe): stripe 0,
 * the anchor, under wire_value_key(ns) = "hf3fs:{<hex ns>}". A value is a
 * core_t that holds its stripe of that one namespace with all its ranks
 * (pools), plus the namespace's name and which stripe of how many it is
 * (checked against every command's cfg: -ESTRIPES). Every command names
 * one value (key position 1) and runs one core call on it, alone on
 * Redis's thread: one atomic step, with the embedded engine's code. HF3FS.NAMESPACES and HF3FS.CLEARALL have no key
 * and act on the values of the node (its selected database) they are sent
 * to. The commands are one table (HF3FS_COMMANDS: name, flags, key,
 * arity, how the key is opened, the arguments after it) and one
 * dispatcher (cmd_dispatch) that does what they share: the key opened, the
 * shared arguments parsed (cfg applied, the value caught up with a
 * rebuild), the core observed, the events propagated, the key closed; each
 * command's run_<name> does the rest.
 *
 * Memory. The core allocates through Redis (hf_set_allocator with
 * RedisModule_Alloc and its family, set once at load), so used_memory,
 * maxmemory and MEMORY USAGE (mem_usage: core_memory_usage) count it.
 *
 * What is replicated (effects replication). While a command runs, an
 * observer on the value's core appends every core event it produces
 * (wire_event_append, deadlines computed with this node's clock); if there
 * is any, the command propagates
 *     HF3FS.APPLY key ns events stripes stripe placement
 * to replicas and the AOF, never itself. The core reports every change and
 * no read (core.h "What is durable": use counts, demotions and read leases
 * are volatile), so a replica and an AOF hold exactly the primary's durable
 * state, free stack included (core_apply_live follows it), and a read
 * (EXISTS, LOOKUP, CEXISTS, CLOC) propagates nothing and leaves Redis's
 * change counter (rdb_changes_since_last_save) alone, unless it expired
 * reservations or drains, which are changes. Reads open their key
 * read-only; they stay `write` commands so that a replica refuses them and
 * cluster clients send them to primaries: a read lease given by a replica
 * would protect nothing on the primary. HF3FS.APPLY is refused unless it comes from the primary's
 * stream or from the AOF being loaded; on a replica it propagates itself
 * verbatim to the replica's own AOF. HF3FS.CLEARALL propagates a DEL of
 * each value it deletes (CORE_EV_CLEAR_ALL is never produced).
 *
 * What survives what. The serialized form of a value (rdb_save; DUMP,
 * RESTORE and MIGRATE use it too) is, at encoding version 2:
 *     string ns
 *     string events      core_walk_state, wire_event_append encoding
 *     string free order  per pool: u32 rank, u32 n, n u32 pages (LE), the
 *                        pool's free stack bottom first (core_pool_free_order)
 *     unsigned stripes, unsigned stripe   (version 1 has neither: 1, 0)
 * rdb_load replays the events with core_apply, core_apply_finish, then
 * restores each free order (core_pool_set_free_order): pages, keys, clock
 * hands, reservations, write leases, drains and the next pages handed out
 * are those of the saved value (recency is not saved; values of modules
 * that saved USE and DEMOTE events load, those events checked and
 * ignored). The pools' counters (hits, misses,
 * reservations, ...) are not saved: they count this node's work since the
 * value was loaded, as Redis's INFO stats do; the gauges (free, owned, ...)
 * follow from the state and survive. So SAVE/BGSAVE, restarts, DEBUG
 * RELOAD, full syncs and slot moves keep the state; the AOF keeps it too
 * (every change is an APPLY in it). AOF rewrite without an RDB preamble
 * (aof_rewrite) emits
 *     HF3FS.REBUILD key ns events freeorder stripes stripe placement
 * the same fields, accepted only while the AOF is loaded.
 * digest (DEBUG DIGEST-VALUE, DEBUG DIGEST) covers exactly those three
 * fields, the durable state, so a replica and its primary digest equal iff
 * their durable states are (their use counts and read leases may differ).
 *
 * Reads across a rebuild. A worker told "key K is at page P" reads P for
 * up to a read lease, which lives in the primary's memory only. So a value
 * that may have served reads elsewhere before it was rebuilt here gets
 * core_recovered (every OWNED page read-leased for one read lease): a
 * value made by rdb_load (restart, DEBUG RELOAD, full sync, RESTORE,
 * MIGRATE) or HF3FS.REBUILD; every value after any load ends (LOADING
 * ended: the AOF's HF3FS.APPLY tail too) and when this node becomes a
 * primary (REPLICAOF NO ONE, Sentinel, a cluster failover). The last two
 * bump `rebuilt_epoch`, nothing more: no scan; a loaded value starts at
 * EPOCH_LOADED. A value behind the epoch catches up at the next command
 * that brings a configuration
 * (arg_cfg): the lease runs from that command's `now`, in its caller's
 * clock (a read answered before the rebuild was answered before it, so
 * its lease ends before this one), and its length is that
 * configuration's read_lease_ms: the module sees no front end's flags
 * before a command arrives.
 *
 * Time. Every deadline is on this node's server clock (util/steady.h:
 * anchored to Redis's wall clock, RedisModule_Milliseconds, at module
 * load, advancing at the rate of Redis's monotonic clock,
 * RedisModule_MonotonicMicroseconds, and slewing back to the wall clock at
 * 1% at most), so a step of the wall clock moves no lease. A command's
 * `now` of 0 means this clock (the front ends send 0); a deadline computed
 * here is replicated as it is, and a promoted replica's own clock applies
 * from then on (core_recovered cuts what was further than a lease from
 * it). A step is logged once as a warning. HF3FS.CLOCK answers
 * [now_ms, wall_ms, offset_ms, steps]. The tests' seam (redis-server
 * does not run under libfaketime): loaded with the arguments `test-clock
 * [ms]`, the wall clock this module reads is Redis's plus ms (a step while
 * the node was down), and HF3FS.CLOCK STEP <ms> steps it by ms more.
 *
 * Upgrades. HF3FS_TYPE_ENCVER is bumped whenever the serialized form
 * changes; rdb_load keeps reading every older version (there is one:
 * version 1, before stripes) and refuses newer ones (a value saved by a newer module: the load
 * fails rather than guessing). HF3FS_MODULE_VERSION (MODULE LIST) is bumped
 * whenever a command changes meaning; the front end requires exactly its
 * own.
 *
 * Errors. Every argument is validated before the core sees it: malformed
 * numbers or lists answer -ERR, numbers out of range -EINVAL, a missing
 * value -ENOPOOL (except INIT, which creates it, CEXISTS, which answers all
 * 0, and the keyless commands), a key of another type WRONGTYPE.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include "core/core.h"
#include "module/redismodule_api.h"
#include "util/bytes.h"
#include "util/hf_assert.h"
#include "util/steady.h"
#include "util/xalloc.h"
#include "wire/wire.h"

/* ret and params are a type and a parameter list: they cannot be parenthesized */
#define RM_API_DEFINE(name, ret, params)                                                           \
    ret(*rm_##name) params; // NOLINT(bugprone-macro-parentheses)
RM_API_LIST(RM_API_DEFINE)
#undef RM_API_DEFINE

static RedisModuleType *hf_type;

/* ---- the clock ("Time") ---- */

static hf_steady module_clock;
static bool test_clock;      /* loaded with `test-clock`: HF3FS.CLOCK STEP allowed */
static int64_t test_step_us; /* what HF3FS.CLOCK STEP added to the wall clock */

static int64_t clock_wall_us(void *ctx)
{
    (void)ctx;
    return rm_Milliseconds() * 1000 + test_step_us;
}

static int64_t clock_mono_us(void *ctx)
{
    (void)ctx;
    return (int64_t)rm_MonotonicMicroseconds();
}

static void clock_step(void *ctx, int64_t step_us)
{
    (void)ctx;
    rm_Log(NULL, "warning", "hf3fsmeta: the wall clock stepped by %+.1f s; leases are unaffected",
           (double)step_us / 1e6);
}

static void clock_start(void)
{
    hf_steady_source src = {clock_wall_us, clock_mono_us, NULL, clock_step};
    hf_steady_init(&module_clock, &src);
}

/* ---- values ---- */

typedef struct hf_value {
    core_t *core;
    char *ns;
    size_t ns_len;
    uint64_t epoch; /* the rebuilt_epoch it caught up with; EPOCH_LOADED: none */
    wire_stripe st; /* which stripe of its namespace it is (wire.h "Stripes") */
} hf_value;

/* Bumped when this node starts serving values it did not serve before:
 * a load ended, or it became a primary. */
static uint64_t rebuilt_epoch;
/* The epoch of a value made by a load: behind every epoch, so that the
 * next command catches it up ("Reads across a rebuild"). */
#define EPOCH_LOADED UINT64_MAX

static hf_slice value_ns(const hf_value *v)
{
    return (hf_slice){v->ns, v->ns_len};
}

/* The configuration of a value made by a load or an APPLY: the limits are
 * the core's own, so every pool that existed anywhere loads; every command
 * that changes a value brings its caller's configuration anyway. */
static core_config default_config(void)
{
    core_config cfg = {.reservation_ms = 600000,
                       .read_lease_ms = 5000,
                       .write_lease_ms = 30000,
                       .release_grace_ms = 0,
                       .evict = true,
                       .max_pages = CORE_MAX_PAGES_LIMIT,
                       .max_ranks = CORE_MAX_RANKS_LIMIT};
    return cfg;
}

static hf_value *value_new(hf_slice ns, const core_config *cfg, wire_stripe st)
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
static int arg_stripe_opt(RedisModuleString **argv, int argc, int i, wire_stripe *st)
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

static void value_free(void *p)
{
    hf_value *v = p;
    if (!v)
        return;
    core_free(v->core);
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

static void collect_event(void *ctx, const core_event *ev)
{
    wire_event_append(ctx, ev);
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

/* The events and free orders of the value (two fresh buffers). */
static void snapshot(const hf_value *v, hf_buf *events, hf_buf *order)
{
    *events = (hf_buf){0};
    *order = (hf_buf){0};
    core_walk_state(v->core, collect_event, events);
    free_orders f = {v->core, order};
    core_foreach_pool(v->core, 0, collect_free_order, &f);
}

/* A value rebuilt from a snapshot, or NULL (why in err) if it does not
 * describe a state. */
static hf_value *value_from_snapshot(hf_slice ns, wire_stripe st, const char *ev, size_t evlen,
                                     const char *order, size_t orderlen, char *err, size_t errlen)
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
    while ((rc = wire_event_next(ev, evlen, &pos, ns, &e)) == 1) {
        if (e.type == CORE_EV_CLEAR_ALL || core_apply(v->core, &e) != 0) {
            snprintf(err, errlen,
                     "event %zu (type %d, rank %" PRIu32 ", page %" PRIu64
                     ") does not fit the state",
                     count, (int)e.type, e.rank, e.page);
            goto fail;
        }
        count++;
    }
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

static void saved_of(hf_value *v, saved_form *f)
{
    snapshot(v, &f->ev, &f->order);
    f->events = (hf_slice){f->ev.ptr ? (const char *)f->ev.ptr : "", f->ev.len};
    f->free_order = (hf_slice){f->order.ptr ? (const char *)f->order.ptr : "", f->order.len};
}

static void saved_free(saved_form *f)
{
    hf_buf_free(&f->ev);
    hf_buf_free(&f->order);
}

static void type_rdb_save(RedisModuleIO *io, void *p)
{
    hf_value *v = p;
    saved_form f;
    saved_of(v, &f);
    rm_SaveStringBuffer(io, v->ns, v->ns_len);
    rm_SaveStringBuffer(io, f.events.ptr, f.events.len);
    rm_SaveStringBuffer(io, f.free_order.ptr, f.free_order.len);
    rm_SaveUnsigned(io, v->st.count);
    rm_SaveUnsigned(io, v->st.index);
    rm_SaveUnsigned(io, v->st.placement);
    saved_free(&f);
}

static void *type_rdb_load(RedisModuleIO *io, int encver)
{
    if (encver < 1 || encver > HF3FS_TYPE_ENCVER) {
        rm_LogIOError(io, "warning",
                      "hf3fsmeta: a value of encoding version %d, this module reads 1..%d "
                      "(load it with a newer module)",
                      encver, HF3FS_TYPE_ENCVER);
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
        v = value_from_snapshot((hf_slice){ns, nslen}, st, ev, evlen, order, orderlen, err,
                                sizeof err);
        if (!v)
            rm_LogIOError(io, "warning", "hf3fsmeta: a saved value is damaged: %s", err);
    }
    rm_Free(ns);
    rm_Free(ev);
    rm_Free(order);
    return v;
}

static void type_aof_rewrite(RedisModuleIO *aof, RedisModuleString *key, void *p)
{
    hf_value *v = p;
    saved_form f;
    saved_of(v, &f);
    rm_EmitAOF(aof, "HF3FS.REBUILD", "sbbblll", key, v->ns, v->ns_len, f.events.ptr, f.events.len,
               f.free_order.ptr, f.free_order.len, (long long)v->st.count, (long long)v->st.index,
               (long long)v->st.placement);
    saved_free(&f);
}

static size_t type_mem_usage(const void *p)
{
    const hf_value *v = p;
    return sizeof *v + v->ns_len + 1 + core_memory_usage(v->core);
}

static void type_digest(RedisModuleDigest *md, void *p)
{
    hf_value *v = p;
    saved_form f;
    saved_of(v, &f);
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

/* ---- commands: shared parts ---- */

/* Key modes of cmd_open_mode. */
#define READ REDISMODULE_READ
#define CHANGE (REDISMODULE_READ | REDISMODULE_WRITE)

/* The arguments the dispatcher parses for a command, in the order of its
 * signature (cmd_spec.args), each into its field of cmd. */
typedef enum cmd_arg {
    A_END,       /* no more */
    A_NOW,       /* now: ms, 0 for this node's clock */
    A_CFG,       /* cfg: applied to the value, which catches up with a rebuild */
    A_NS,        /* a namespace (any bytes) */
    A_RANK,      /* a rank */
    A_POOL,      /* a rank whose pool must exist (else ENOPOOL) */
    A_MODE,      /* ALLOC's mode, 0 or 1 */
    A_NUM_PAGES, /* the integers: num[], in order */
    A_FIRST,
    A_COUNT,
    A_KEYS,  /* a key list */
    A_PAGES, /* a page list: pages[], in order */
    A_BYTES, /* any bytes: bytes[], in order */
} cmd_arg;

#define CMD_MAX_ARGS 7

/* One command's state: its key and value, its arguments, the events it
 * produced. */
typedef struct cmd {
    RedisModuleCtx *ctx;
    RedisModuleString **argv;
    RedisModuleKey *key;
    hf_value *v; /* NULL: no value under the key */
    hf_buf events;
    int64_t now;
    core_config cfg; /* the caller's, limits capped */
    wire_stripe st;  /* the stripe the caller names (cfg, or APPLY's and REBUILD's tail) */
    hf_slice ns;
    uint32_t rank;
    core_pool_t *pool;
    int64_t mode;
    int64_t num[2];
    hf_slice *keys; /* n of them */
    size_t n;
    int64_t *pages[2];
    size_t np[2];
    hf_slice bytes[3];
} cmd;

static void observe(void *ctx, const core_event *ev)
{
    wire_event_append(ctx, ev);
}

/* Open argv[1] (mode: READ for reads, CHANGE for changes). 0, or -1 after
 * replying WRONGTYPE. */
static int cmd_open_mode(cmd *c, RedisModuleCtx *ctx, RedisModuleString **argv, int mode)
{
    *c = (cmd){.ctx = ctx, .argv = argv};
    c->key = rm_OpenKey(ctx, argv[1], mode);
    int t = rm_KeyType(c->key);
    if (t == REDISMODULE_KEYTYPE_EMPTY)
        return 0;
    if (t != REDISMODULE_KEYTYPE_MODULE || rm_ModuleTypeGetType(c->key) != hf_type) {
        rm_CloseKey(c->key);
        c->key = NULL;
        rm_ReplyWithError(ctx, REDISMODULE_ERRORMSG_WRONGTYPE);
        return -1;
    }
    c->v = rm_ModuleTypeGetValue(c->key);
    return 0;
}

static int cmd_open(cmd *c, RedisModuleCtx *ctx, RedisModuleString **argv)
{
    return cmd_open_mode(c, ctx, argv, CHANGE);
}

/* Start observing the value's core (before the core call). */
static void cmd_observe(cmd *c)
{
    /* a command's own effects are a primary's: on a replica the stream
     * brings HF3FS.APPLY, which propagates itself verbatim */
    HF_ASSERT(!(rm_GetContextFlags(c->ctx) & REDISMODULE_CTX_FLAGS_REPLICATED));
    HF_ASSERT(c->events.len == 0);
    core_set_observer(c->v->core, observe, &c->events);
}

/* Stop observing; propagate the events, if any, as HF3FS.APPLY; free the
 * arguments; close. */
static void cmd_close(cmd *c)
{
    if (c->v) {
        core_set_observer(c->v->core, NULL, NULL);
        if (c->events.len)
            rm_Replicate(c->ctx, "HF3FS.APPLY", "sbblll", c->argv[1], c->v->ns, c->v->ns_len,
                         (const char *)c->events.ptr, c->events.len, (long long)c->v->st.count,
                         (long long)c->v->st.index, (long long)c->v->st.placement);
    }
    hf_buf_free(&c->events);
    hf_xfree(c->keys);
    hf_xfree(c->pages[0]);
    hf_xfree(c->pages[1]);
    if (c->key)
        rm_CloseKey(c->key);
}

static int reply_err(RedisModuleCtx *ctx, const char *msg)
{
    rm_ReplyWithError(ctx, msg);
    return REDISMODULE_OK;
}

static int reply_enopool(RedisModuleCtx *ctx)
{
    return reply_err(ctx, "ENOPOOL pool not initialized");
}

/* Argument parsers: 0, or -1 after replying the error. */

static int arg_i64(RedisModuleCtx *ctx, RedisModuleString *a, const char *what, int64_t min,
                   int64_t max, int64_t *out)
{
    long long ll;
    char msg[160];
    if (rm_StringToLongLong(a, &ll) != REDISMODULE_OK) {
        snprintf(msg, sizeof msg, "ERR %s is not an integer", what);
        rm_ReplyWithError(ctx, msg);
        return -1;
    }
    if (ll < min || ll > max) {
        snprintf(msg, sizeof msg, "EINVAL %s out of range", what);
        rm_ReplyWithError(ctx, msg);
        return -1;
    }
    *out = ll;
    return 0;
}

static int arg_now(RedisModuleCtx *ctx, RedisModuleString *a, int64_t *now)
{
    if (arg_i64(ctx, a, "now", 0, INT64_MAX / 4, now) != 0)
        return -1;
    if (*now == 0)
        *now = hf_steady_now_ms(&module_clock);
    return 0;
}

static int arg_rank(RedisModuleCtx *ctx, RedisModuleString *a, uint32_t *rank)
{
    int64_t r;
    if (arg_i64(ctx, a, "rank", 0, UINT32_MAX, &r) != 0)
        return -1;
    *rank = (uint32_t)r;
    return 0;
}

static hf_slice arg_bytes(RedisModuleString *a)
{
    size_t len;
    const char *p = rm_StringPtrLen(a, &len);
    return (hf_slice){p, len};
}

/* The value caught up with a rebuild at `now` ("Reads across a rebuild"). */
static void cmd_catch_up(cmd *c, int64_t now)
{
    if (c->v && c->v->epoch != rebuilt_epoch) {
        core_recovered(c->v->core, now);
        c->v->epoch = rebuilt_epoch;
    }
    HF_ASSERT(!c->v || c->v->epoch == rebuilt_epoch);
}

/* cfg applied to the value's core (its hash seed kept), and the value
 * caught up with a rebuild at `now`; without a value, into *out only. The
 * stripe the caller names (*st_out) must be the value's: else -ESTRIPES
 * <the value's count>, so that a front end that took the namespace for
 * another count learns the real one before anything is done. */
static int arg_cfg(cmd *c, RedisModuleString *a, int64_t now, core_config *out, wire_stripe *st_out)
{
    size_t len;
    const char *p = rm_StringPtrLen(a, &len);
    core_config cfg = c->v ? *core_get_config(c->v->core) : default_config();
    /* A front end sends the same seven fields with every command (commands
     * run one at a time, on Redis's main thread). */
    static wire_cfg_cache last;
    wire_cfg w;
    if (wire_cfg_read_cached(&last, p, len, &w) != 0) {
        rm_ReplyWithError(c->ctx, "ERR malformed cfg (reservation_ms,read_lease_ms,"
                                  "write_lease_ms,release_grace_ms,evict,max_pages,max_ranks"
                                  "[,stripes,stripe])");
        return -1;
    }
    wire_cfg_apply(&w, &cfg);
    wire_stripe st = w.st;
    if (c->v && (st.count != c->v->st.count || st.index != c->v->st.index ||
                 st.placement != c->v->st.placement)) {
        char msg[120];
        snprintf(msg, sizeof msg,
                 "ESTRIPES %" PRIu32 " the value is stripe %" PRIu32 " of %" PRIu32, c->v->st.count,
                 c->v->st.index, c->v->st.count);
        rm_ReplyWithError(c->ctx, msg);
        return -1;
    }
    *st_out = st;
    if (cfg.max_pages > CORE_MAX_PAGES_LIMIT)
        cfg.max_pages = CORE_MAX_PAGES_LIMIT;
    if (cfg.max_ranks > CORE_MAX_RANKS_LIMIT)
        cfg.max_ranks = CORE_MAX_RANKS_LIMIT;
    if (c->v)
        core_set_config(c->v->core, &cfg);
    cmd_catch_up(c, now);
    *out = cfg;
    return 0;
}

/* A key list: *keys (hf_xfree it) and *n. Empty keys are refused. */
static int arg_keys(RedisModuleCtx *ctx, RedisModuleString *a, hf_slice **keys, size_t *n)
{
    size_t len;
    const char *p = rm_StringPtrLen(a, &len);
    int64_t count = wire_keys_count(p, len);
    if (count < 0) {
        rm_ReplyWithError(ctx, "ERR malformed key list");
        return -1;
    }
    hf_slice *k = hf_xmalloc((size_t)(count ? count : 1) * sizeof *k);
    wire_keys_decode(p, len, k);
    for (int64_t i = 0; i < count; i++)
        if (k[i].len == 0) {
            hf_xfree(k);
            rm_ReplyWithError(ctx, "ERR empty key in key list");
            return -1;
        }
    *keys = k;
    *n = (size_t)count;
    return 0;
}

/* A page list: *pages (hf_xfree it) and *n. */
static int arg_pages(RedisModuleCtx *ctx, RedisModuleString *a, int64_t **pages, size_t *n)
{
    size_t len;
    const char *p = rm_StringPtrLen(a, &len);
    if (len % 8) {
        rm_ReplyWithError(ctx, "ERR malformed page list");
        return -1;
    }
    size_t count = len / 8;
    int64_t *v = hf_xmalloc((count ? count : 1) * sizeof *v);
    for (size_t i = 0; i < count; i++)
        v[i] = wire_i64_at(p, i);
    *pages = v;
    *n = count;
    return 0;
}

static void reply_pages(RedisModuleCtx *ctx, const int64_t *pages, size_t n)
{
    hf_buf b = {0};
    wire_i64_append(&b, pages, n);
    rm_ReplyWithStringBuffer(ctx, b.ptr ? (const char *)b.ptr : "", b.len);
    hf_buf_free(&b);
}

static void reply_flags(RedisModuleCtx *ctx, const bool *flags, size_t n)
{
    char *b = hf_xmalloc(n ? n : 1);
    for (size_t i = 0; i < n; i++)
        b[i] = flags[i] ? 1 : 0;
    rm_ReplyWithStringBuffer(ctx, b, n);
    hf_xfree(b);
}

/* The pool of a command: the value's (ns, rank), or NULL after replying
 * ENOPOOL. */
static core_pool_t *cmd_pool(cmd *c, uint32_t rank)
{
    core_pool_t *pool = c->v ? core_pool_find(c->v->core, value_ns(c->v), rank) : NULL;
    if (!pool)
        reply_enopool(c->ctx);
    return pool;
}

/* The arguments `args` of a command, argv[first] on, each parsed into its
 * field of c; 0, or -1 after an error reply. */
static int cmd_args(cmd *c, const cmd_arg *args, int first)
{
    static const char *const names[] = {
        [A_NUM_PAGES] = "num_pages", [A_FIRST] = "first", [A_COUNT] = "count"};
    RedisModuleCtx *ctx = c->ctx;
    size_t nums = 0, pages = 0, bytes = 0;
    for (int i = 0; i < CMD_MAX_ARGS && args[i] != A_END; i++) {
        RedisModuleString *a = c->argv[first + i];
        long long m;
        int rc = 0;
        switch (args[i]) {
        case A_END: break;
        case A_NOW: rc = arg_now(ctx, a, &c->now); break;
        case A_CFG: rc = arg_cfg(c, a, c->now, &c->cfg, &c->st); break;
        case A_NS: c->ns = arg_bytes(a); break;
        case A_RANK: rc = arg_rank(ctx, a, &c->rank); break;
        case A_POOL:
            rc = arg_rank(ctx, a, &c->rank) != 0 || !(c->pool = cmd_pool(c, c->rank)) ? -1 : 0;
            break;
        case A_MODE:
            if (rm_StringToLongLong(a, &m) != REDISMODULE_OK || (m != 0 && m != 1)) {
                reply_err(ctx, "ERR mode is 0 (partial) or 1 (all or nothing)");
                rc = -1;
            } else {
                c->mode = m;
            }
            break;
        case A_NUM_PAGES:
        case A_FIRST:
        case A_COUNT: rc = arg_i64(ctx, a, names[args[i]], 0, INT64_MAX, &c->num[nums++]); break;
        case A_KEYS: rc = arg_keys(ctx, a, &c->keys, &c->n); break;
        case A_PAGES:
            rc = arg_pages(ctx, a, &c->pages[pages], &c->np[pages]);
            pages++;
            break;
        case A_BYTES: c->bytes[bytes++] = arg_bytes(a); break;
        }
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* ---- commands ---- */

/* The command's value for its namespace (c->ns) under its key: the open
 * one, which must hold the namespace, or a new one (not yet set in the
 * key: cmd_keep_value) if the key is the namespace's own. 0, or -1 after
 * an error reply. */
static int cmd_value_of_ns(cmd *c)
{
    if (c->v) {
        if (!hf_slice_eq(c->ns, value_ns(c->v)))
            return reply_err(c->ctx, "ERR the value holds another namespace"), -1;
        return 0;
    }
    hf_slice key = arg_bytes(c->argv[1]);
    char want[128];
    size_t cap = WIRE_STRIPE_KEY_MAX(c->ns.len);
    char *w = cap <= sizeof want ? want : hf_xmalloc(cap);
    size_t wlen = wire_stripe_key(c->ns, c->st, w, cap);
    int ok = wlen == key.len && memcmp(w, key.ptr, key.len) == 0;
    if (w != want)
        hf_xfree(w);
    if (!ok)
        return reply_err(c->ctx, "ERR the key is not the namespace's stripe's (wire_stripe_key)"),
               -1;
    c->v = value_new(c->ns, &c->cfg, c->st);
    if (!c->v)
        return reply_err(c->ctx, "OOM cannot create the value"), -1;
    return 0;
}

/* After the core call on a value that cmd_value_of_ns made (fresh): set in
 * the key if the call succeeded (ok), dropped otherwise. */
static void cmd_keep_value(cmd *c, bool fresh, bool ok)
{
    if (!fresh)
        return;
    if (ok) {
        rm_ModuleTypeSetValue(c->key, hf_type, c->v);
        return;
    }
    /* a refused first call changed nothing: no event is lost with the value */
    HF_ASSERT(c->events.len == 0);
    core_set_observer(c->v->core, NULL, NULL);
    value_free(c->v);
    c->v = NULL;
}

/* HF3FS.INIT key now cfg ns rank num_pages */
static void run_init(cmd *c)
{
    bool fresh = c->v == NULL;
    if (cmd_value_of_ns(c) != 0)
        return;
    cmd_observe(c);
    uint64_t existing = (uint64_t)c->num[0];
    int rc = core_pool_init(c->v->core, c->ns, c->rank, (uint64_t)c->num[0], &existing);
    cmd_keep_value(c, fresh, rc >= 0);
    if (rc < 0) {
        reply_err(c->ctx, "EINVAL num_pages or rank above the configured limits");
        return;
    }
    rm_ReplyWithArray(c->ctx, 2);
    rm_ReplyWithLongLong(c->ctx, rc == 1);
    rm_ReplyWithLongLong(c->ctx, (long long)existing);
}

/* HF3FS.ALLOC key now cfg rank mode keys */
static void run_alloc(cmd *c)
{
    size_t n = c->n;
    int64_t *pages = hf_xmalloc((n ? n : 1) * sizeof *pages);
    bool *existed = hf_xmalloc(n ? n : 1);
    core_allocate(c->pool, c->keys, n, c->mode ? CORE_ALLOC_ALL_OR_NOTHING : CORE_ALLOC_PARTIAL,
                  c->now, pages, existed);
    rm_ReplyWithArray(c->ctx, 2);
    reply_pages(c->ctx, pages, n);
    reply_flags(c->ctx, existed, n);
    hf_xfree(pages);
    hf_xfree(existed);
}

/* HF3FS.IMPORT key now cfg ns rank num_pages keys pages: the pool built
 * whole (core_pool_import), refused (EEXIST) if it exists. */
static void run_import(cmd *c)
{
    if (c->np[0] != c->n) {
        reply_err(c->ctx, "ERR as many pages as keys");
        return;
    }
    bool fresh = c->v == NULL;
    if (cmd_value_of_ns(c) != 0)
        return;
    cmd_observe(c);
    int rc = core_pool_import(c->v->core, c->ns, c->rank, (uint64_t)c->num[0], c->keys, c->pages[0],
                              c->n, c->now);
    cmd_keep_value(c, fresh, rc == 0);
    if (rc != 0) {
        reply_err(c->ctx, rc == CORE_EEXIST ? "EEXIST the pool exists"
                                            : "EINVAL num_pages, rank, keys or pages refused");
        return;
    }
    rm_ReplyWithLongLong(c->ctx, (long long)c->n);
}

/* HF3FS.CONFIRM key now cfg rank keys pages release */
static void run_confirm(cmd *c)
{
    if (c->np[0] != c->n) {
        reply_err(c->ctx, "ERR as many pages as keys");
        return;
    }
    size_t refused = 0;
    core_confirm(c->pool, c->keys, c->pages[0], c->n, c->pages[1], c->np[1], c->now, &refused);
    rm_ReplyWithLongLong(c->ctx, (long long)refused);
}

/* HF3FS.CANCEL key now cfg rank keys pages existed: core_cancel of an
 * ALLOC's answer that no client saw (existed: a flag list). */
static void run_cancel(cmd *c)
{
    size_t n = c->n;
    if (c->np[0] != n || c->bytes[0].len != n) {
        reply_err(c->ctx, "ERR as many pages and flags as keys");
        return;
    }
    bool *existed = hf_xmalloc(n ? n : 1);
    for (size_t i = 0; i < n; i++)
        existed[i] = c->bytes[0].ptr[i] != 0;
    core_cancel(c->pool, c->keys, c->pages[0], existed, n, c->now);
    rm_ReplyWithSimpleString(c->ctx, "OK");
    hf_xfree(existed);
}

/* HF3FS.STRIPES key: [count, placement], the stripe count and the
 * placement the value records (its namespace's); [0, 0] without a value. */
static void run_stripes(cmd *c)
{
    rm_ReplyWithArray(c->ctx, 2);
    rm_ReplyWithLongLong(c->ctx, c->v ? (long long)c->v->st.count : 0);
    rm_ReplyWithLongLong(c->ctx, c->v ? (long long)c->v->st.placement : 0);
}

/* HF3FS.EXISTS / LOOKUP / DELETE / CLOC key now cfg rank keys */
static void run_exists(cmd *c)
{
    bool *flags = hf_xmalloc(c->n ? c->n : 1);
    core_exists(c->pool, c->keys, c->n, c->now, flags);
    reply_flags(c->ctx, flags, c->n);
    hf_xfree(flags);
}

static void run_lookup(cmd *c)
{
    int64_t *pages = hf_xmalloc((c->n ? c->n : 1) * sizeof *pages);
    core_lookup(c->pool, c->keys, c->n, c->now, pages);
    reply_pages(c->ctx, pages, c->n);
    hf_xfree(pages);
}

static void run_delete(cmd *c)
{
    core_delete(c->pool, c->keys, c->n, c->now);
    rm_ReplyWithSimpleString(c->ctx, "OK");
}

static void run_cloc(cmd *c)
{
    int64_t *pages = hf_xmalloc((c->n ? c->n : 1) * sizeof *pages);
    if (core_complete_locations(c->v->core, value_ns(c->v), c->rank, c->keys, c->n, c->now, pages) <
        0)
        reply_enopool(c->ctx);
    else
        reply_pages(c->ctx, pages, c->n);
    hf_xfree(pages);
}

/* HF3FS.CLEARPOOL key now cfg rank */
static void run_clearpool(cmd *c)
{
    core_pool_clear(c->pool, c->now);
    rm_ReplyWithSimpleString(c->ctx, "OK");
}

/* HF3FS.CEXISTS key now cfg keys */
static void run_cexists(cmd *c)
{
    if (!c->v && c->st.index > 0) { /* a stripe missing: the caller checks its count */
        reply_enopool(c->ctx);
        return;
    }
    bool *present = hf_xcalloc(c->n ? c->n : 1, 1);
    if (c->v)
        core_complete_exists(c->v->core, value_ns(c->v), c->keys, c->n, c->now, present);
    reply_flags(c->ctx, present, c->n);
    hf_xfree(present);
}

/* HF3FS.STATS key now */
typedef struct stats_list {
    uint32_t *ranks;
    core_pool_stats *st;
    size_t n, cap;
} stats_list;

static void collect_stats(void *ctx, hf_slice ns, uint32_t rank, const core_pool_stats *st)
{
    stats_list *l = ctx;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 8;
        l->ranks = hf_xreallocarray(l->ranks, l->cap, sizeof *l->ranks);
        l->st = hf_xreallocarray(l->st, l->cap, sizeof *l->st);
    }
    l->ranks[l->n] = rank;
    l->st[l->n++] = *st;
}

static int cmd_stats(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    if (argc != 3)
        return rm_WrongArity(ctx);
    cmd c;
    if (cmd_open(&c, ctx, argv) != 0)
        return REDISMODULE_OK;
    int64_t now;
    if (arg_now(ctx, argv[2], &now) != 0)
        goto out;
    if (!c.v) {
        reply_enopool(ctx);
        goto out;
    }
    stats_list l = {0};
    core_foreach_pool(c.v->core, now, collect_stats, &l);
    rm_ReplyWithArray(ctx, (long)l.n);
    for (size_t i = 0; i < l.n; i++) {
        const core_pool_stats *s = &l.st[i];
        /* rank, the figures and refusals (core.h lists both), the estimator */
        rm_ReplyWithArray(ctx,
                          1L + CORE_POOL_FIGURE_COUNT + 2L * CORE_REFUSE_COUNT + 1 + REUSE_SCALES);
        rm_ReplyWithLongLong(ctx, (long long)l.ranks[i]);
#define REPLY_FIGURE(field, ...) rm_ReplyWithLongLong(ctx, (long long)s->field);
        CORE_POOL_FIGURES(REPLY_FIGURE, CORE_POOL_NO_ALIAS)
#undef REPLY_FIGURE
#define REPLY_REFUSALS(field, ...)                                                                 \
    for (size_t k = 0; k < CORE_REFUSE_COUNT; k++)                                                 \
        rm_ReplyWithLongLong(ctx, (long long)s->field[k]);
        CORE_POOL_REFUSALS(REPLY_REFUSALS)
#undef REPLY_REFUSALS
        /* the estimator of this stripe's keys (its prefix counters stay 0:
         * a stripe sees a part of each request; the front end counts) */
        rm_ReplyWithLongLong(ctx, (long long)s->est_blocks);
        for (size_t k = 0; k < REUSE_SCALES; k++)
            rm_ReplyWithLongLong(ctx, (long long)s->est_hits[k]);
    }
    hf_xfree(l.ranks);
    hf_xfree(l.st);
out:
    cmd_close(&c);
    return REDISMODULE_OK;
}

/* HF3FS.CHECK key */
static void run_check(cmd *c)
{
    if (!c->v) {
        reply_enopool(c->ctx);
        return;
    }
    char err[400] = "ERR core_check: ";
    size_t pre = strlen(err);
    if (core_check(c->v->core, err + pre, sizeof err - pre) == 0) {
        rm_ReplyWithSimpleString(c->ctx, "OK");
    } else {
        for (char *q = err; *q; q++)
            if (*q == '\r' || *q == '\n')
                *q = ' ';
        rm_ReplyWithError(c->ctx, err);
    }
}

/* HF3FS.PAGES key now rank first count: the pool expired at now, then
 * [state, deadline, key] for pages first .. first+count-1 (clamped to the
 * pool). */
static void run_pages(cmd *c)
{
    core_pool_t *pool = cmd_pool(c, c->rank);
    if (!pool)
        return;
    uint64_t first = (uint64_t)c->num[0], count = (uint64_t)c->num[1];
    core_pool_expire(pool, c->now);
    core_pool_stats st;
    core_pool_get_stats(pool, c->now, &st);
    uint64_t end = first >= st.num_pages          ? first
                   : count > st.num_pages - first ? st.num_pages
                                                  : first + count;
    rm_ReplyWithArray(c->ctx, (long)(end - first));
    for (uint64_t p = first; p < end; p++) {
        hf_slice key = {"", 0};
        char keybuf[64];
        int64_t deadline = 0;
        core_page_state s = core_page_get(pool, p, &key, keybuf, &deadline);
        rm_ReplyWithArray(c->ctx, 3);
        rm_ReplyWithLongLong(c->ctx, (long long)s);
        rm_ReplyWithLongLong(c->ctx, (long long)deadline);
        rm_ReplyWithStringBuffer(c->ctx, key.len ? key.ptr : "", key.len);
    }
}

/* HF3FS.APPLY key ns events: the effects of a command of the primary. */
static void run_apply(cmd *c)
{
    hf_slice ev = c->bytes[0];
    bool fresh = c->v == NULL;
    if (fresh) {
        core_config cfg = default_config();
        c->v = value_new(c->ns, &cfg, c->st);
    } else if (!hf_slice_eq(c->ns, value_ns(c->v))) {
        c->v = NULL; /* not ours to propagate */
        reply_err(c->ctx, "ERR HF3FS.APPLY: the value holds another namespace");
        return;
    }
    hf_value *v = c->v;
    c->v = NULL; /* the events are propagated verbatim below, not collected */
    size_t pos = 0, count = 0;
    core_event e;
    int rc;
    while ((rc = wire_event_next(ev.ptr, ev.len, &pos, c->ns, &e)) == 1) {
        if (e.type == CORE_EV_CLEAR_ALL || core_apply_live(v->core, &e) != 0) {
            rc = -2;
            break;
        }
        count++;
    }
    if (rc < 0) {
        hf_slice k = arg_bytes(c->argv[1]);
        rm_Log(c->ctx, "warning",
               "hf3fsmeta: HF3FS.APPLY on %.*s: event %zu %s; this node no longer follows its "
               "primary exactly (resynchronize it)",
               (int)k.len, k.ptr, count, rc == -1 ? "is malformed" : "does not fit the state");
    }
    if (fresh && count == 0) {
        value_free(v);
    } else {
        if (fresh)
            rm_ModuleTypeSetValue(c->key, hf_type, v);
        rm_ReplicateVerbatim(c->ctx);
    }
    if (rc < 0)
        reply_err(c->ctx, "ERR HF3FS.APPLY: events do not fit the value");
    else
        rm_ReplyWithSimpleString(c->ctx, "OK");
}

/* HF3FS.REBUILD key ns events freeorder: a value as aof_rewrite wrote it. */
static void run_rebuild(cmd *c)
{
    c->v = NULL;
    hf_slice ev = c->bytes[0], order = c->bytes[1];
    char err[200];
    hf_value *v = value_from_snapshot(c->ns, c->st, ev.ptr, ev.len, order.ptr, order.len, err,
                                      sizeof err);
    if (!v) {
        rm_Log(c->ctx, "warning", "hf3fsmeta: HF3FS.REBUILD: %s", err);
        reply_err(c->ctx, "ERR HF3FS.REBUILD: the value is damaged");
    } else {
        rm_ModuleTypeSetValue(c->key, hf_type, v);
        rm_ReplyWithSimpleString(c->ctx, "OK");
    }
}

/* The values of this node's selected database, for the keyless commands. */
typedef struct scan_list {
    hf_buf names; /* key list encoding of the key names */
    hf_buf nss;   /* key list encoding of their namespaces */
    size_t n;
} scan_list;

static void scan_value(RedisModuleCtx *ctx, RedisModuleString *keyname, RedisModuleKey *key,
                       void *privdata)
{
    scan_list *l = privdata;
    if (!key || rm_KeyType(key) != REDISMODULE_KEYTYPE_MODULE ||
        rm_ModuleTypeGetType(key) != hf_type)
        return;
    hf_value *v = rm_ModuleTypeGetValue(key);
    hf_slice name = arg_bytes(keyname), ns = value_ns(v);
    wire_keys_append(&l->names, &name, 1);
    wire_keys_append(&l->nss, &ns, 1);
    l->n++;
}

static void scan_values(RedisModuleCtx *ctx, scan_list *l)
{
    *l = (scan_list){{0}, {0}, 0};
    RedisModuleScanCursor *cur = rm_ScanCursorCreate();
    while (rm_Scan(ctx, cur, scan_value, l))
        ;
    rm_ScanCursorDestroy(cur);
}

/* HF3FS.NAMESPACES: the namespaces of the values this node holds. */
static void run_namespaces(cmd *c)
{
    scan_list l;
    scan_values(c->ctx, &l);
    hf_slice *ns = hf_xmalloc((l.n ? l.n : 1) * sizeof *ns);
    wire_keys_decode((const char *)l.nss.ptr, l.nss.len, ns);
    rm_ReplyWithArray(c->ctx, (long)l.n);
    for (size_t i = 0; i < l.n; i++)
        rm_ReplyWithStringBuffer(c->ctx, ns[i].len ? ns[i].ptr : "", ns[i].len);
    hf_xfree(ns);
    hf_buf_free(&l.names);
    hf_buf_free(&l.nss);
}

/* HF3FS.CLEARALL: delete every value of this node; DEL of each propagates. */
static void run_clearall(cmd *c)
{
    RedisModuleCtx *ctx = c->ctx;
    scan_list l;
    scan_values(ctx, &l);
    hf_slice *names = hf_xmalloc((l.n ? l.n : 1) * sizeof *names);
    wire_keys_decode((const char *)l.names.ptr, l.names.len, names);
    long long deleted = 0;
    for (size_t i = 0; i < l.n; i++) {
        RedisModuleString *name = rm_CreateString(ctx, names[i].ptr, names[i].len);
        RedisModuleKey *key = rm_OpenKey(ctx, name, REDISMODULE_READ | REDISMODULE_WRITE);
        if (rm_KeyType(key) == REDISMODULE_KEYTYPE_MODULE && rm_ModuleTypeGetType(key) == hf_type &&
            rm_DeleteKey(key) == REDISMODULE_OK) {
            rm_Replicate(ctx, "DEL", "s", name);
            deleted++;
        }
        rm_CloseKey(key);
        rm_FreeString(ctx, name);
    }
    hf_xfree(names);
    hf_buf_free(&l.names);
    hf_buf_free(&l.nss);
    rm_ReplyWithLongLong(ctx, deleted);
}

/* ---- the command table ---- */

/* cmd_spec.opts */
#define OBSERVE 1 /* the core's events while run_<name> runs propagate as HF3FS.APPLY */
/* HF3FS.CLOCK [STEP ms]: the node's clock ("Time"). */
static int cmd_clock(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    if (argc == 3) {
        size_t len;
        const char *word = rm_StringPtrLen(argv[1], &len);
        long long ms;
        if (len != 4 || strncasecmp(word, "step", 4) != 0)
            return reply_err(ctx, "ERR HF3FS.CLOCK takes no argument but STEP ms");
        if (!test_clock)
            return reply_err(ctx, "ERR HF3FS.CLOCK STEP needs the module loaded with test-clock");
        if (rm_StringToLongLong(argv[2], &ms) != REDISMODULE_OK || ms < -INT32_MAX ||
            ms > INT32_MAX)
            return reply_err(ctx, "ERR ms is not an integer of at most 2^31");
        test_step_us += ms * 1000;
    } else if (argc != 1) {
        return rm_WrongArity(ctx);
    }
    hf_steady_check(&module_clock);
    rm_ReplyWithArray(ctx, 4);
    rm_ReplyWithLongLong(ctx, hf_steady_now_ms(&module_clock));
    rm_ReplyWithLongLong(ctx, clock_wall_us(NULL) / 1000);
    rm_ReplyWithLongLong(ctx, hf_steady_offset_us(&module_clock) / 1000);
    rm_ReplyWithLongLong(ctx, (long long)hf_steady_steps(&module_clock));
    return REDISMODULE_OK;
}

#define STRIPE_TAIL 2  /* argc may be 2 or 3 more: [stripes stripe [placement]] (arg_stripe_opt) */
#define FROM_PRIMARY 4 /* accepted only from the primary's stream or the AOF being loaded */
#define FROM_AOF 8     /* accepted only from the AOF being loaded */

#define NO_ARGS (A_END)

/* Every command, in the order they are registered. X: one that
 * cmd_dispatch runs:
 *   X(name, flags, key, argc, key mode, opts, (arguments after the key))
 * registered as "hf3fs.<name>" with CreateCommand's flags and key spec
 * first = last = step = key (0: keyless); run_<name> does what differs.
 * R(name, flags, key, function): one that runs whole, parsing its own
 * arguments. */
#define HF3FS_COMMANDS(X, R)                                                                       \
    X(init, "write deny-oom", 1, 7, CHANGE, OBSERVE, (A_NOW, A_CFG, A_NS, A_RANK, A_NUM_PAGES))    \
    X(alloc, "write deny-oom", 1, 7, CHANGE, OBSERVE, (A_NOW, A_CFG, A_POOL, A_MODE, A_KEYS))      \
    X(import, "write deny-oom", 1, 9, CHANGE, OBSERVE,                                             \
      (A_NOW, A_CFG, A_NS, A_RANK, A_NUM_PAGES, A_KEYS, A_PAGES))                                  \
    /* confirmations, deletes and clears need no new memory and free some:                    \
     * they run under maxmemory too (a refused confirmation would strand a                    \
     * page that was written) */    \
    X(confirm, "write", 1, 8, CHANGE, OBSERVE, (A_NOW, A_CFG, A_POOL, A_KEYS, A_PAGES, A_PAGES))   \
    X(cancel, "write", 1, 8, CHANGE, OBSERVE, (A_NOW, A_CFG, A_POOL, A_KEYS, A_PAGES, A_BYTES))    \
    X(stripes, "readonly", 1, 2, READ, 0, NO_ARGS)                                                 \
    X(exists, "write", 1, 6, READ, OBSERVE, (A_NOW, A_CFG, A_POOL, A_KEYS))                        \
    X(lookup, "write", 1, 6, READ, OBSERVE, (A_NOW, A_CFG, A_POOL, A_KEYS))                        \
    X(delete, "write", 1, 6, CHANGE, OBSERVE, (A_NOW, A_CFG, A_POOL, A_KEYS))                      \
    X(clearpool, "write", 1, 5, CHANGE, OBSERVE, (A_NOW, A_CFG, A_POOL))                           \
    X(cexists, "write", 1, 5, READ, OBSERVE, (A_NOW, A_CFG, A_KEYS))                               \
    X(cloc, "write", 1, 6, READ, OBSERVE, (A_NOW, A_CFG, A_POOL, A_KEYS))                          \
    R(stats, "readonly", 1, cmd_stats)                                                             \
    X(check, "readonly", 1, 2, CHANGE, 0, NO_ARGS)                                                 \
    X(pages, "write", 1, 6, CHANGE, OBSERVE, (A_NOW, A_RANK, A_FIRST, A_COUNT))                    \
    X(apply, "write", 1, 4, CHANGE, STRIPE_TAIL | FROM_PRIMARY, (A_NS, A_BYTES))                   \
    X(rebuild, "write", 1, 5, CHANGE, STRIPE_TAIL | FROM_AOF, (A_NS, A_BYTES, A_BYTES))            \
    X(namespaces, "readonly", 0, 1, 0, 0, NO_ARGS)                                                 \
    X(clearall, "write", 0, 1, 0, 0, NO_ARGS)                                                      \
    R(clock, "readonly fast", 0, cmd_clock)

typedef struct cmd_spec {
    const char *name;
    const char *flags;
    int key;               /* its position; 0: keyless */
    RedisModuleCmdFunc fn; /* what Redis calls */
    /* what cmd_dispatch does (none for R) */
    int argc;
    int mode;
    int opts;
    cmd_arg args[CMD_MAX_ARGS];
    void (*run)(cmd *c);
} cmd_spec;

#define CMD_UNPAREN(...) __VA_ARGS__
#define CMD_ID(id, ...) CMD_##id,
enum { HF3FS_COMMANDS(CMD_ID, CMD_ID) CMD_COUNT };

#define CMD_ENTRY_DECL(id, ...)                                                                    \
    static int entry_##id(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
#define CMD_NONE(...)
HF3FS_COMMANDS(CMD_ENTRY_DECL, CMD_NONE)

/* The arguments are initializers of the fields they name, not expressions. */
// NOLINTBEGIN(bugprone-macro-parentheses)
#define CMD_SPEC_X(id, flags_, key_, argc_, mode_, opts_, args_)                                   \
    {.name = "hf3fs." #id,                                                                         \
     .flags = flags_,                                                                              \
     .key = key_,                                                                                  \
     .fn = entry_##id,                                                                             \
     .argc = argc_,                                                                                \
     .mode = mode_,                                                                                \
     .opts = opts_,                                                                                \
     .args = {CMD_UNPAREN args_},                                                                  \
     .run = run_##id},
#define CMD_SPEC_R(id, flags_, key_, fn_)                                                          \
    {.name = "hf3fs." #id, .flags = flags_, .key = key_, .fn = fn_},
// NOLINTEND(bugprone-macro-parentheses)
static const cmd_spec commands[CMD_COUNT] = {HF3FS_COMMANDS(CMD_SPEC_X, CMD_SPEC_R)};

/* Whether the command's arguments include `arg`. */
HF_ASSERT_HELPER static bool cmd_takes(const cmd_spec *s, cmd_arg arg)
{
    for (int i = 0; i < CMD_MAX_ARGS && s->args[i] != A_END; i++)
        if (s->args[i] == arg)
            return true;
    return false;
}

/* The command's name as its errors spell it: HF3FS.<NAME>. */
static const char *cmd_upper(const cmd_spec *s, char what[static 32])
{
    size_t i;
    for (i = 0; i < 31 && s->name[i]; i++)
        what[i] = (char)(s->name[i] >= 'a' && s->name[i] <= 'z' ? s->name[i] - 'a' + 'A'
                                                                : s->name[i]);
    what[i] = 0;
    return what;
}

/* A command of the table: the arity; where it may come from; the key
 * opened and checked; its shared arguments parsed (cfg applied and the
 * value caught up with a rebuild); its core's events observed; run_<name>;
 * the events propagated as one HF3FS.APPLY; the key closed. Any error is
 * the reply. */
static int cmd_dispatch(const cmd_spec *s, RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    if (argc != s->argc && !(s->opts & STRIPE_TAIL && (argc == s->argc + 2 || argc == s->argc + 3)))
        return rm_WrongArity(ctx);
    char what[32];
    char msg[120];
    int from = (s->opts & FROM_PRIMARY ? REDISMODULE_CTX_FLAGS_REPLICATED : 0) |
               (s->opts & (FROM_PRIMARY | FROM_AOF) ? REDISMODULE_CTX_FLAGS_LOADING : 0);
    if (from && !(rm_GetContextFlags(ctx) & from)) {
        snprintf(msg, sizeof msg, "ERR %s is accepted only from %s", cmd_upper(s, what),
                 s->opts & FROM_PRIMARY ? "the primary or the AOF" : "the AOF");
        return reply_err(ctx, msg);
    }
    wire_stripe tail = {1, 0, WIRE_PLACE_WINDOW};
    if (s->opts & STRIPE_TAIL && arg_stripe_opt(argv, argc, s->argc, &tail) != 0) {
        snprintf(msg, sizeof msg, "ERR %s: malformed stripe", cmd_upper(s, what));
        return reply_err(ctx, msg);
    }
    cmd c = {.ctx = ctx, .argv = argv};
    if (s->key && cmd_open_mode(&c, ctx, argv, s->mode) != 0)
        return REDISMODULE_OK;
    c.st = tail;
    if (cmd_args(&c, s->args, s->key + 1) == 0) {
        if (s->opts & OBSERVE && c.v)
            cmd_observe(&c);
        s->run(&c);
        /* the value a configured command ran on is the stripe it named,
         * caught up with the last rebuild */
        HF_ASSERT(!c.v || !cmd_takes(s, A_CFG) ||
                  (c.v->st.count == c.st.count && c.v->st.index == c.st.index &&
                   c.v->st.placement == c.st.placement && c.v->epoch == rebuilt_epoch));
    }
    cmd_close(&c);
    return REDISMODULE_OK;
}

#define CMD_ENTRY(id, ...)                                                                         \
    static int entry_##id(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)                 \
    {                                                                                              \
        return cmd_dispatch(&commands[CMD_##id], ctx, argv, argc);                                 \
    }
HF3FS_COMMANDS(CMD_ENTRY, CMD_NONE)

/* ---- server events ---- */

/* This node serves values from now on that may have served reads elsewhere
 * (see "Reads across a rebuild"). */
static void on_rebuilt(RedisModuleCtx *ctx, RedisModuleEvent eid, uint64_t subevent, void *data)
{
    bool now_primary = eid.id == REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED &&
                       subevent == REDISMODULE_SUBEVENT_REPLROLECHANGED_NOW_MASTER;
    bool loaded = eid.id == REDISMODULE_EVENT_LOADING &&
                  subevent == REDISMODULE_SUBEVENT_LOADING_ENDED;
    HF_ASSERT(rebuilt_epoch < EPOCH_LOADED - 1); /* never reaches the loaded marker */
    if (now_primary || loaded)
        rebuilt_epoch++;
}

/* ---- loading ---- */

static int rm_load_api(RedisModuleCtx *ctx)
{
    int (*get_api)(const char *, void *) = (int (*)(const char *, void *))((void **)ctx)[0];
    int missing = 0;
#define RM_API_FETCH(name, ret, params)                                                            \
    if (get_api("RedisModule_" #name, (void *)&rm_##name) != REDISMODULE_OK)                       \
        missing++;
    RM_API_LIST(RM_API_FETCH)
#undef RM_API_FETCH
    return missing ? REDISMODULE_ERR : REDISMODULE_OK;
}

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    if (rm_load_api(ctx) != REDISMODULE_OK)
        return REDISMODULE_ERR;
    if (rm_IsModuleNameBusy(HF3FS_MODULE_NAME))
        return REDISMODULE_ERR;
    size_t len = 0;
    const char *arg = argc >= 1 ? rm_StringPtrLen(argv[0], &len) : NULL;
    long long step_ms = 0;
    test_clock = arg && len == 10 && memcmp(arg, "test-clock", 10) == 0;
    if (argc != 0 &&
        !(test_clock &&
          (argc == 1 || (argc == 2 && rm_StringToLongLong(argv[1], &step_ms) == REDISMODULE_OK)))) {
        rm_Log(ctx, "warning", "hf3fsmeta: the module takes no arguments but test-clock [ms]");
        return REDISMODULE_ERR;
    }
    test_step_us = step_ms * 1000;
    clock_start();
    rm_SetModuleAttribs(ctx, HF3FS_MODULE_NAME, HF3FS_MODULE_VERSION, REDISMODULE_APIVER_1);
    hf_set_allocator(&(hf_allocator){rm_Alloc, rm_Calloc, rm_Realloc, rm_Free});
    RedisModuleTypeMethods tm = {
        .version = REDISMODULE_TYPE_METHOD_VERSION_1,
        .rdb_load = type_rdb_load,
        .rdb_save = type_rdb_save,
        .aof_rewrite = type_aof_rewrite,
        .mem_usage = type_mem_usage,
        .digest = type_digest,
        .free = value_free,
    };
    hf_type = rm_CreateDataType(ctx, HF3FS_TYPE_NAME, HF3FS_TYPE_ENCVER, &tm);
    if (!hf_type)
        return REDISMODULE_ERR;
    static const RedisModuleEvent role_changed = {REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED, 1},
                                  loading = {REDISMODULE_EVENT_LOADING, 1};
    if (rm_SubscribeToServerEvent(ctx, role_changed, on_rebuilt) != REDISMODULE_OK ||
        rm_SubscribeToServerEvent(ctx, loading, on_rebuilt) != REDISMODULE_OK)
        return REDISMODULE_ERR;
    for (size_t i = 0; i < CMD_COUNT; i++)
        if (rm_CreateCommand(ctx, commands[i].name, commands[i].fn, commands[i].flags,
                             commands[i].key, commands[i].key, commands[i].key) != REDISMODULE_OK)
            return REDISMODULE_ERR;
    return REDISMODULE_OK;
}
