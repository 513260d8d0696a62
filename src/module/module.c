/*
 * module.c: src/core inside redis-server (hf3fs_metad_redis.so), the
 * HF3FS.* commands of docs/redis-module.md: this file's head is the
 * module's specification; here, the clock, the command table's
 * registration and dispatch, the server events and loading; value.c, the
 * values and their serialized form; command.c, the commands' arguments,
 * replies and bodies (module_internal.h).
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
 * RESTORE and MIGRATE use it too) is, at encoding version 4:
 *     string ns
 *     string events      core_walk_state, wire_event_append_packed encoding
 *                        (keys packed: util/hexkey.h; before version 4
 *                        wire_event_append's, which HF3FS.REBUILD, the AOF
 *                        rewrite and the digest keep)
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
 * Settling. An ALLOC with an id (its optional last argument) records the
 * pages it reserved in the value's ledger (ledger.c), and propagates them
 * as HF3FS.NOTE after its APPLY; HF3FS.SETTLE frees the reservations of an
 * id still in the ledger (docs/redis-module.md "Settling an outcome
 * unknown"). The ledger is volatile, like read leases.
 *
 * Upgrades. HF3FS_TYPE_ENCVER is bumped whenever the serialized form
 * changes; rdb_load keeps reading every older version (from
 * HF3FS_TYPE_ENCVER_OLDEST: 1, before stripes; 2, before placements; 3,
 * before packed keys) and refuses newer ones (a value saved by a newer
 * module: the load fails rather than guessing). MODULE LIST's "ver" is the
 * baseline, the lowest command set the module speaks (wire.h "Versions");
 * HF3FS.VERSION [release lowest highest] answers the flat list
 *     release R commands [lo, hi] encoding [oldest, written]
 *     capabilities [names...] agreed N
 * (N: the set both speak given the caller's, 0 if none, logged; without
 * arguments the module's highest). Fields may be added; readers skip
 * names they do not know. Loaded with `test-version lo hi`, the module
 * pretends to speak lo..hi (MODULE LIST shows lo): the tests' module of
 * another release.
 *
 * Errors. Every argument is validated before the core sees it: malformed
 * numbers or lists answer -ERR, numbers out of range -EINVAL, a missing
 * value -ENOPOOL (except INIT, which creates it, CEXISTS, which answers all
 * 0, and the keyless commands), a key of another type WRONGTYPE.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "core/core.h"
#include "module/module_internal.h"
#include "module/redismodule_api.h"
#include "util/hf_assert.h"
#include "util/steady.h"
#include "util/xalloc.h"
#include "wire/wire.h"

/* ret and params are a type and a parameter list: they cannot be parenthesized */
#define RM_API_DEFINE(name, ret, params)                                                           \
    ret(*rm_##name) params; // NOLINT(bugprone-macro-parentheses)
RM_API_LIST(RM_API_DEFINE)
#undef RM_API_DEFINE

RedisModuleType *hf_type;

/* ---- the clock ("Time") ---- */

hf_steady module_clock;
static bool test_clock;      /* loaded with `test-clock`: HF3FS.CLOCK STEP allowed */
bool settle_replicate;       /* loaded with `settle-replicate` (module_internal.h) */
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

/* ---- versions ("Versions") ---- */

/* The command sets this module speaks: the build's, or what the tests'
 * `test-version lo hi` made it pretend (a module of another release). */
static unsigned wire_lowest = HF3FS_MODULE_VERSION, wire_highest = HF3FS_WIRE_HIGHEST;

/* An unsigned argument of HF3FS.VERSION, or -1. */
static long long arg_version(RedisModuleString *s)
{
    long long v;
    return rm_StringToLongLong(s, &v) == REDISMODULE_OK && v >= 0 && v <= 65535 ? v : -1;
}

/* HF3FS.VERSION [release lowest highest]: what this module is and speaks,
 * and, given the caller's, the command set both speak (0: none). */
static int cmd_version(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    if (argc != 1 && argc != 4)
        return rm_WrongArity(ctx);
    long long agreed = wire_highest;
    if (argc == 4) {
        long long lo = arg_version(argv[2]), hi = arg_version(argv[3]);
        if (lo < 0 || hi < lo)
            return reply_err(ctx, "ERR HF3FS.VERSION release lowest highest: lowest and highest "
                                  "are command sets, lowest first");
        agreed = wire_version_agree(wire_lowest, wire_highest, (unsigned)lo, (unsigned)hi);
        if (!agreed) {
            size_t len;
            const char *rel = rm_StringPtrLen(argv[1], &len);
            rm_Log(ctx, "warning",
                   "hf3fsmeta: a front end of release %.*s speaks command sets %lld..%lld, this "
                   "module %u..%u: it sends this node nothing",
                   (int)(len > 32 ? 32 : len), rel, lo, hi, wire_lowest, wire_highest);
        }
    }
#define CAP_NAME(id, bit, name) name,
    static const char *const caps[] = {HF3FS_CAPS(CAP_NAME)};
#undef CAP_NAME
    rm_ReplyWithArray(ctx, 10);
    rm_ReplyWithSimpleString(ctx, "release");
    rm_ReplyWithSimpleString(ctx, HF3FS_VERSION);
    rm_ReplyWithSimpleString(ctx, "commands");
    rm_ReplyWithArray(ctx, 2);
    rm_ReplyWithLongLong(ctx, wire_lowest);
    rm_ReplyWithLongLong(ctx, wire_highest);
    rm_ReplyWithSimpleString(ctx, "encoding");
    rm_ReplyWithArray(ctx, 2);
    rm_ReplyWithLongLong(ctx, HF3FS_TYPE_ENCVER_OLDEST);
    rm_ReplyWithLongLong(ctx, HF3FS_TYPE_ENCVER);
    rm_ReplyWithSimpleString(ctx, "capabilities");
    rm_ReplyWithArray(ctx, (long)(sizeof caps / sizeof caps[0]));
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++)
        rm_ReplyWithSimpleString(ctx, caps[i]);
    rm_ReplyWithSimpleString(ctx, "agreed");
    rm_ReplyWithLongLong(ctx, agreed);
    return REDISMODULE_OK;
}

/* ---- the command table ---- */

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
    if (argc != s->argc &&
        !(s->opts & STRIPE_TAIL && (argc == s->argc + 2 || argc == s->argc + 3)) &&
        !(s->opts & ID_TAIL && argc == s->argc + 1))
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
    c.argc = argc;
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
    long long step_ms = 0;
    for (int i = 0; i < argc;) {
        size_t len;
        const char *arg = rm_StringPtrLen(argv[i++], &len);
        long long lo, hi;
        if (len == 10 && memcmp(arg, "test-clock", 10) == 0) {
            test_clock = true;
            if (i < argc && rm_StringToLongLong(argv[i], &step_ms) == REDISMODULE_OK)
                i++;
        } else if (len == 16 && memcmp(arg, "settle-replicate", 16) == 0) {
            settle_replicate = true;
        } else if (len == 12 && memcmp(arg, "test-version", 12) == 0 && i + 1 < argc &&
                   (lo = arg_version(argv[i])) > 0 && (hi = arg_version(argv[i + 1])) >= lo) {
            wire_lowest = (unsigned)lo;
            wire_highest = (unsigned)hi;
            i += 2;
        } else {
            rm_Log(ctx, "warning",
                   "hf3fsmeta: the module takes no arguments but settle-replicate, "
                   "test-clock [ms] and test-version lowest highest");
            return REDISMODULE_ERR;
        }
    }
    test_step_us = step_ms * 1000;
    clock_start();
    /* MODULE LIST's "ver": the baseline, the lowest command set it speaks */
    rm_SetModuleAttribs(ctx, HF3FS_MODULE_NAME, (int)wire_lowest, REDISMODULE_APIVER_1);
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
