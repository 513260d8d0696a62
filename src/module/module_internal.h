/*
 * module_internal.h: what the module's files share (module.c's head is
 * the module's specification). module.c: the clock, the command table's
 * registration and dispatch, the server events, loading; value.c: the data
 * type's values and their serialized form; command.c: the commands'
 * arguments, replies and bodies (run_<name>).
 */
#ifndef HF3FS_MODULE_INTERNAL_H
#define HF3FS_MODULE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "module/redismodule_api.h"
#include "util/buf.h"
#include "util/slice.h"
#include "util/steady.h"
#include "wire/wire.h"

/* module.c: the data type, and this node's clock ("Time") */
extern RedisModuleType *hf_type;
extern hf_steady module_clock;
/* Loaded with `settle-replicate`: an ALLOC with an id sends its ledger
 * entries to the replicas as HF3FS.NOTE (every replica must know that
 * command: a replica whose module does not refuses the NOTE, and Redis then
 * aborts the whole MULTI/EXEC it came in, the APPLY with it). */
extern bool settle_replicate;

/* ---- values (value.c) ---- */

typedef struct hf_ledger hf_ledger;

typedef struct hf_value {
    core_t *core;
    char *ns;
    size_t ns_len;
    uint64_t epoch;    /* the rebuilt_epoch it caught up with; EPOCH_LOADED: none */
    wire_stripe st;    /* which stripe of its namespace it is (wire.h "Stripes") */
    hf_ledger *ledger; /* which allocation made each reservation (ledger.c); NULL: none */
} hf_value;

/* Bumped when this node starts serving values it did not serve before:
 * a load ended, or it became a primary. */
extern uint64_t rebuilt_epoch;
/* The epoch of a value made by a load: behind every epoch, so that the
 * next command catches it up ("Reads across a rebuild"). */
#define EPOCH_LOADED UINT64_MAX

hf_slice value_ns(const hf_value *v);
/* The configuration of a value made by a load or an APPLY. */
core_config default_config(void);
hf_value *value_new(hf_slice ns, const core_config *cfg, wire_stripe st);
void value_free(void *p);
/* ev appended to the hf_buf ctx (wire_event_append): the core's observer
 * while a command runs, and its walk of a value's state. */
void collect_event(void *ctx, const core_event *ev);
/* A value rebuilt from its serialized fields (see module.c's head); NULL
 * with why in err if they do not hold together. */
/* `packed`: the events' packed form (a value saved at encoding version 4
 * on), else the commands' (an older one's, HF3FS.REBUILD's). */
hf_value *value_from_snapshot(hf_slice ns, wire_stripe st, bool packed, const char *ev,
                              size_t evlen, const char *order, size_t orderlen, char *err,
                              size_t errlen);
/* The stripe of an APPLY or a REBUILD from argv[i..]: 0, or -1 if malformed. */
int arg_stripe_opt(RedisModuleString **argv, int argc, int i, wire_stripe *st);

/* The data type's methods. */
void type_rdb_save(RedisModuleIO *io, void *p);
void *type_rdb_load(RedisModuleIO *io, int encver);
void type_aof_rewrite(RedisModuleIO *aof, RedisModuleString *key, void *p);
size_t type_mem_usage(const void *p);
void type_digest(RedisModuleDigest *md, void *p);

/* ---- the ledger of reservations by allocation (ledger.c) ---- */

/* Page `page` of pool `rank` was just reserved by the allocation `id` (> 0). */
void ledger_add(hf_value *v, uint32_t rank, uint64_t page, int64_t id);
/* An event of the value's core (its own command's, or an APPLY's): a page
 * it moves leaves the ledger. */
void ledger_touch(hf_value *v, const core_event *ev);
/* The pages of pool `rank` that allocation `id` reserved and that nothing
 * moved since: their count, and *pages (hf_xfree it; NULL when none). */
size_t ledger_pages_of(const hf_value *v, uint32_t rank, int64_t id, uint64_t **pages);
bool ledger_holds(const hf_value *v, uint32_t rank, uint64_t page);
size_t ledger_memory(const hf_ledger *l);
void ledger_free(hf_ledger *l);

/* ---- commands (command.c) ---- */

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
    A_ID,    /* an allocation's id, > 0 (SETTLE, NOTE) */
} cmd_arg;

#define CMD_MAX_ARGS 7

/* One command's state: its key and value, its arguments, the events it
 * produced. */
typedef struct cmd {
    RedisModuleCtx *ctx;
    RedisModuleString **argv;
    int argc;
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
    int64_t id;   /* A_ID, or ALLOC's optional last argument (0: none) */
    hf_buf noted; /* ALLOC with an id: the pages it reserved (page list), for HF3FS.NOTE */
} cmd;

/* Open argv[1] (mode READ or CHANGE): 0, or -1 after replying WRONGTYPE. */
int cmd_open_mode(cmd *c, RedisModuleCtx *ctx, RedisModuleString **argv, int mode);
/* Parse the arguments args[] from argv[first]: 0, or -1 after replying. */
int cmd_args(cmd *c, const cmd_arg *args, int first);
/* Start observing the value's core (before the core call). */
void cmd_observe(cmd *c);
/* Stop observing; propagate the events, if any, as HF3FS.APPLY; free the
 * arguments; close. */
void cmd_close(cmd *c);
int reply_err(RedisModuleCtx *ctx, const char *msg);

/* cmd_spec.opts */
#define OBSERVE 1      /* the core's events while run_<name> runs propagate as HF3FS.APPLY */
#define STRIPE_TAIL 2  /* argc may be 2 or 3 more: [stripes stripe [placement]] (arg_stripe_opt) */
#define FROM_PRIMARY 4 /* accepted only from the primary's stream or the AOF being loaded */
#define FROM_AOF 8     /* accepted only from the AOF being loaded */
#define ID_TAIL 16     /* argc may be 1 more: an allocation's id (ALLOC) */

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
    X(alloc, "write deny-oom", 1, 7, CHANGE, OBSERVE | ID_TAIL,                                    \
      (A_NOW, A_CFG, A_POOL, A_MODE, A_KEYS))                                                      \
    X(import, "write deny-oom", 1, 9, CHANGE, OBSERVE,                                             \
      (A_NOW, A_CFG, A_NS, A_RANK, A_NUM_PAGES, A_KEYS, A_PAGES))                                  \
    /* confirmations, deletes and clears need no new memory and free some:                    \
     * they run under maxmemory too (a refused confirmation would strand a                    \
     * page that was written) */    \
    X(confirm, "write", 1, 8, CHANGE, OBSERVE, (A_NOW, A_CFG, A_POOL, A_KEYS, A_PAGES, A_PAGES))   \
    X(cancel, "write", 1, 8, CHANGE, OBSERVE, (A_NOW, A_CFG, A_POOL, A_KEYS, A_PAGES, A_BYTES))    \
    X(settle, "write", 1, 6, CHANGE, OBSERVE, (A_NOW, A_CFG, A_POOL, A_ID))                        \
    X(note, "write", 1, 5, CHANGE, FROM_PRIMARY, (A_RANK, A_ID, A_PAGES))                          \
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
    R(clock, "readonly fast", 0, cmd_clock)                                                        \
    R(version, "readonly fast", 0, cmd_version)


/* run_<name> of every command the dispatcher runs (X above), and the
 * commands that run whole (R) but HF3FS.CLOCK, module.c's. */
#define CMD_RUN_DECL(id, ...) void run_##id(cmd *c);
#define CMD_NO_DECL(...)
HF3FS_COMMANDS(CMD_RUN_DECL, CMD_NO_DECL)
#undef CMD_RUN_DECL
#undef CMD_NO_DECL
int cmd_stats(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);

#endif
