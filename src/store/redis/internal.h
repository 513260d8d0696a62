/*
 * internal.h: what the files of the Redis engine share. Not for use outside
 * src/store/redis.
 *
 *   redis.h      what the engine promises: store_redis_open, the tests' hooks
 *   ops.c        the store's operations, each as HF3FS.* commands of the
 *                module, and their table (redis__ops)
 *   admin.c      the calls over every namespace (stats, check), the prefix
 *                counters that stats reports, the tests' page dump
 *   stripes.c    a namespace over its stripes: layouts, the split of a call
 *                by stripe, one command per stripe sent at once, how their
 *                outcomes combine, the retry on a stale layout; its head
 *                comment is the specification
 *   command.c    one command: its arguments, its call, the judgment of its
 *                reply
 *   open.c       store_redis_open and the module check
 * The link to Redis, which knows no HF3FS.* command (the operations use
 * link.h only):
 *   link.h       what the link promises; its head comment is the
 *                specification (connections, pipelining, --redis-wait,
 *                up and down, a Redis Cluster)
 *   link.c       the URL, open and close, the calls, the monitor of one
 *                Redis, health and figures
 *   pipe.c       the pipes: shared, pipelined connections to a node
 *   route.c      a Redis Cluster: routing handles, the slot map, the fast
 *                path over the pipes, the cluster's probe and monitor
 *   link_internal.h  what link.c, pipe.c and route.c share
 */
#ifndef HF_STORE_REDIS_INTERNAL_H
#define HF_STORE_REDIS_INTERNAL_H

#include <hiredis/hiredis.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/redis/redis.h"
#include "store/redis/link.h"

/* What the probe learned of one node's module (open.c), by address: on
 * every new connection and every probe of the monitor. */
typedef struct module_seen {
    char addr[128];
    char release[32];         /* HF3FS.VERSION's; "" for a module without it */
    unsigned lowest, highest; /* the command sets it speaks */
    unsigned agreed;          /* the one this front end speaks to it; 0: none */
    unsigned enc_lo, enc_hi;  /* value encodings it reads (enc_hi: it writes); 0 unknown */
    unsigned caps;            /* WIRE_CAP_* it listed */
} module_seen;

typedef struct store_redis {
    store_t base;
    core_config cfg;
    char cfgs[160]; /* wire_cfg_format(cfg) */
    size_t cfglen;
    bool has_clock;
    store_clock clock;
    redis_link *link;
    uint32_t stripes;          /* of the namespaces it creates (options.stripes; 0: stripes_for) */
    pthread_mutex_t lock;      /* layouts, retired */
    struct layout *layouts;    /* every namespace's, once known */
    struct layout *retired;    /* stale ones, freed at destroy */
    struct prefix_row *prefix; /* this front end's prefix counters (under lock) */
    struct settle_queue *settle; /* settle.c */
    pthread_mutex_t seen_lock;   /* the probe's checker runs on any thread */
    module_seen *seen;           /* every node's module as last probed */
    size_t nseen;
    atomic_uint all_caps; /* the capabilities every node in seen listed (0: none seen) */
} store_redis;

/* Whether every node met so far listed capability cap (WIRE_CAP_*) at its
 * last probe (false before any): an additive command goes only where it
 * is known. Lock-free: on every allocation. */
bool redis__all_can(store_redis *r, unsigned cap);
/* The figures of the modules seen ("redis_modules", module_info). */
void redis__modules_metrics(store_redis *r, const store_emitter *e);

/* Outcomes of a call beside the STORE_* codes, never returned by an op: at
 * the end of the store's range (docs/architecture.md, "Errors and memory"). */
enum {
    RESTRIPE = -298,     /* a stripe says the layout is stale (-ESTRIPES) */
    NO_NAMESPACE = -299, /* the namespace has no value */
};

static inline store_redis *R(store_t *s)
{
    return (store_redis *)s;
}

/* The operations (ops.c), for store_redis_open. */
extern const struct store_ops redis__ops;

/* ------------------------------------------------- command.c: a command */

/* The arguments of one command, built in one growing arena (offsets, so
 * that growing it never leaves a pointer dangling). off, len and argv share
 * one allocation of cap entries each: a command takes two allocations (that
 * and buf), whatever its arguments (growing each array apart cost a
 * many-stripe read measurably more instructions). */
typedef struct args {
    int slot; /* the cluster slot of its key, or -1 */
    size_t n, cap;
    size_t *off, *len;
    const char **argv; /* filled by redis__cmd_of */
    char *buf;
    size_t used, bufcap;
} args;

/* An args is filled by these, in order, and owns what they copied until
 * redis__args_free (a batch's, until redis__batch_free). */
char *redis__args_room(args *a, size_t len);
void redis__args_trim(args *a, size_t len);
void redis__args_add(args *a, const void *p, size_t len);
void redis__args_str(args *a, const char *s);
void redis__args_int(args *a, int64_t v);
void redis__args_keys(args *a, const hf_slice *keys, size_t n);
void redis__args_pages(args *a, const int64_t *v, size_t n);
void redis__args_free(args *a);
void redis__args_cmd_key(args *a, const char *cmd, const char *key, size_t klen, int slot);
void redis__args_cmd(args *a, const char *cmd, hf_slice ns);
int64_t redis__now_of(const store_redis *r);
redis_cmd redis__cmd_of(args *a);

/* A reply judged (command.c, redis__judge): STORE_OK and *out, the
 * caller's to free (never an error reply), or a STORE_* code or RESTRIPE
 * (reply freed). */
bool redis__starts(const redisReply *rep, const char *prefix);
bool redis__refused_before_running(const redisReply *rep);
int redis__judge(store_redis *r, redis_cmd *c, redisReply **out);
int redis__call(store_redis *r, args *a, bool change, redisReply **out);
int redis__judge_all(store_redis *r, redis_cmd *cmds, size_t n);
int redis__malformed(store_redis *r, redisReply *rep, const char *what);
int64_t redis__int_of(const redisReply *e);

/* ------------------------------------------------- stripes.c: stripes */

/* Where a namespace's values are (stripes.c, "LAYOUTS"): its stripe count
 * and each stripe's key and slot. A cached layout never changes and lives
 * until destroy. */
typedef struct layout {
    struct layout *next;
    char *ns;
    size_t nslen;
    uint32_t count;
    uint32_t placement; /* WIRE_PLACE_* (wire.h "Placement") */
    char **key;
    size_t *keylen;
    int *slot;
} layout;

/* A layout not cached, the caller's (redis__layouts_free). */
layout *redis__layout_new(hf_slice ns, uint32_t count, uint32_t placement);
void redis__layouts_free(layout *L);
void redis__layouts_forget(store_redis *r);
/* STORE_OK and *out (NULL: the namespace has no value; else cached, valid
 * until destroy), or a code. */
int redis__layout_of(store_redis *r, hf_slice ns, bool fresh, const layout **out);
/* The same, NO_NAMESPACE when the namespace has no value. */
int redis__layout_present(store_redis *r, hf_slice ns, bool fresh, const layout **out);
uint32_t redis__stripes_for(store_redis *r, uint64_t num_pages);

/* A call's keys grouped by stripe: stripe i's are pos/keys[start[i] ..
 * start[i + 1]), pos[j] their places in the call, in the call's order. */
typedef struct split {
    size_t *start; /* count + 1 */
    size_t *pos;
    hf_slice *keys;
} split;

void redis__split_keys(split *sp, uint32_t count, const hf_slice *keys, size_t n);
void redis__split_confirm(split *sp, uint32_t count, const hf_slice *keys, const int64_t *pages,
                          size_t n);
void redis__split_free(split *sp);
int64_t redis__page_global(int64_t local, const layout *L, uint32_t i);
int64_t redis__page_local(int64_t page, const layout *L, uint32_t i);

/* The commands of one call: one per stripe it touches, all sent at once. */
typedef struct batch {
    size_t m;
    uint32_t *stripe;
    args *as;
    redis_cmd *cmds;
    redisReply **reps; /* redis__batch_run: the replies judged STORE_OK */
    int *codes;
} batch;

void redis__batch_init(batch *b, size_t cap);
/* The next command of b, for stripe i of L; the caller adds the arguments
 * after the shared ones. */
args *redis__batch_add(store_redis *r, batch *b, const char *cmd, const layout *L, uint32_t i);
void redis__batch_run(store_redis *r, batch *b, bool change);
void redis__batch_free(batch *b);
bool redis__batch_vouched(const batch *b);
int redis__batch_outcome(const batch *b, bool change, bool last);

/* An operation on one layout; `last`: the layout was just asked (ENOPOOL
 * anywhere is ENOPOOL). */
typedef int (*striped_fn)(store_redis *r, const layout *L, void *ctx, bool last);

/* STORE_* code, or NO_NAMESPACE: ns has no value. */
int redis__run_striped(store_redis *r, hf_slice ns, striped_fn fn, void *ctx);

/* --------------------- settle.c: allocations whose outcome is unknown */

typedef struct settle_queue settle_queue;

/* A new allocation id (> 0), unique to this call. */
int64_t redis__alloc_id(store_redis *r);
/* Stripe `stripe` of L may hold reservations of allocation id that no
 * client was given: HF3FS.SETTLE them once the node answers. */
void redis__settle_later(store_redis *r, const layout *L, uint32_t stripe, uint32_t rank,
                         int64_t id);
void redis__settle_start(store_redis *r);
void redis__settle_stop(store_redis *r);
void redis__settle_metrics(store_redis *r, const store_emitter *e);

/* ------------------------------------- admin.c: over every namespace */

int redis__stats(store_t *s, store_stats_visitor fn, void *ctx);
int redis__check(store_t *s, char *err, size_t errlen);
void redis__prefix_count(store_redis *r, hf_slice ns, const bool *present, size_t n);
void redis__prefix_free(struct prefix_row *row);

#endif
